//! Pipelines, after the poll: one squeue of the owners' pending jobs (in a cycle after a
//! retry was launched, else every ten poll intervals) says which jobs wait on a chain's
//! earlier attempt, rewired to its new one, and which plain-sbatch jobs wait
//! afterany/afternotok on a chain's current job, reported on that chain; jobs held for
//! afterany/afternotok are released or cancelled once the chains they wait on have ended
//! for good. Every change is a decision record.

use super::{log_transition, Engine};
use crate::domain::dependency::{self, Expr};
use crate::domain::model::ChainState;
use crate::domain::policy::{self, Event};
use crate::slurm::jobid::{base_job_id, JobId};
use crate::slurm::types::PendingRow;
use crate::slurm::{Slurm, SlurmError};
use crate::store::{Batch, StoreError};
use std::collections::{BTreeMap, HashMap, HashSet};
use tracing::{debug, error, info, warn};

/// The most waiting jobs rewired in one cycle (one `scontrol update` each): the rest are
/// rewired in the next cycles, so one user's huge queue cannot hold the loop for long.
const MAX_REWIRES_PER_CYCLE: usize = 1000;

/// The most waiting jobs looked at closely in one cycle (for the report of plain-sbatch
/// jobs: rows and the upstream chains they name, together).
const MAX_EXAMINED_PER_CYCLE: usize = 10_000;

/// Where a pending row comes in the report's job-id order.
type WaiterKey = (u64, String);

fn waiter_key(row: &PendingRow) -> WaiterKey {
    (
        row.job_id_raw.parse().unwrap_or(u64::MAX),
        row.job_id.clone(),
    )
}

/// A waiting job's new expression and what moved.
type Rewired = (Expr, Vec<dependency::Rewiring>);

/// What came of setting one job's dependency.
enum Set {
    Done,
    Skipped,
    SlurmDown,
}

/// How often the owners' pending jobs are looked through for plain-sbatch jobs waiting
/// afterany/afternotok on a chain (when no rewiring asks anyway): ten poll intervals,
/// at most a minute, and never less than one poll interval.
fn waiters_every(poll_interval: std::time::Duration) -> std::time::Duration {
    // Not `clamp(poll_interval, 60 s)`: that panics for a poll_interval above a minute.
    (poll_interval * 10)
        .min(std::time::Duration::from_secs(60))
        .max(poll_interval)
}

/// The jobs a pending row stands for: each task of a record of array tasks waiting
/// together (`12_[2-5]`), else the row's own job.
fn row_jobs(row: &PendingRow) -> Vec<String> {
    match JobId::parse(&row.job_id) {
        Ok(j) if j.pending_tasks().is_some() => j
            .pending_task_ids()
            .into_iter()
            .map(|t| t.to_string())
            .collect(),
        _ => vec![row.job_id.clone()],
    }
}

/// A job waiting on a chain whose ended job was requeued in place (`retry.in_place`): the
/// job id is the same, but Slurm does not re-check a dependency it marked failed
/// (`afterok:J(failed)` stays `DependencyNeverSatisfied` after J is requeued and
/// completes; docs/slurm-observed.md (l)). Setting the same expression again re-arms it.
/// Only for a target whose chain's latest job is that very job and that is still open.
fn rearm(row: &PendingRow, expr: &Expr, facts: &dependency::Facts) -> Option<Rewired> {
    let mut changes = Vec::new();
    for (_, t) in expr.targets() {
        if !row.dependency.contains(&format!("{}(failed)", t.job)) {
            continue;
        }
        for u in facts.get(&t.job).into_iter().flatten() {
            if u.latest_job.as_deref() == Some(t.job.as_str()) && u.state.is_open() {
                changes.push((u.chain, t.job.clone(), t.job.clone()));
            }
        }
    }
    (!changes.is_empty()).then(|| (expr.clone(), changes))
}

/// What [`Engine::watch_pending`] reads this cycle, if anything.
pub(super) struct PendingAsk {
    /// The launches whose earlier attempts' waiting jobs are to be rewired.
    pending: Vec<crate::store::Rewire>,
    /// Whether the waiters' report is due.
    watch: bool,
    /// Whose pending jobs are read, by name.
    owners: HashMap<String, u32>,
    /// The same names, sorted.
    users: Vec<String>,
}

impl PendingAsk {
    /// Whose pending jobs are read, by name, sorted.
    pub(super) fn users(&self) -> &[String] {
        &self.users
    }
}

impl<S: Slurm> Engine<S> {
    /// Whose pending jobs [`Engine::watch_pending`] reads this cycle: the retried chains'
    /// owners when a rewiring waits, every open chain's owner when the waiters' report is
    /// due; `None` when neither.
    pub(super) fn pending_ask(&self) -> Result<Option<PendingAsk>, StoreError> {
        let pending = self.store.pending_rewires()?;
        let watch = self
            .waiters_seen
            .is_none_or(|at| at.elapsed() >= waiters_every(self.config.poll_interval));
        if pending.is_empty() && !watch {
            return Ok(None);
        }
        let mut owners: HashMap<String, u32> = HashMap::new();
        for r in &pending {
            owners.insert(r.user.clone(), r.owner_uid);
        }
        // The other owners' queues are read only when the report is due: in the other
        // cycles a rewiring depends on the retried chains' owners' queues alone.
        if watch {
            for (uid, user) in self.store.open_chain_owners()? {
                owners.insert(user, uid);
            }
        }
        if owners.is_empty() {
            return Ok(None);
        }
        let mut users: Vec<String> = owners.keys().cloned().collect();
        users.sort();
        Ok(Some(PendingAsk {
            pending,
            watch,
            owners,
            users,
        }))
    }

    /// One `squeue --states=PENDING --user=<owners>` (or the cycle's poll, which read
    /// them too): every [`waiters_every`] for the
    /// owners of the unfinished chains, and in a cycle after a retry was launched for the
    /// owners of the retried chains (all of them if the interval is up too). It is read
    /// twice: the jobs that wait on an earlier attempt of a chain that got a new one are
    /// rewired to it, and the plain-sbatch jobs that wait afterany/afternotok on a chain's
    /// current job are reported on that chain. Returns false when Slurm did not answer a
    /// rewiring (it waits for the next cycle; nothing is lost). A failed answer that only
    /// the report asked for holds nothing back: the report waits one interval.
    pub(super) async fn watch_pending(&mut self, t: i64) -> Result<bool, StoreError> {
        // What the cycle's poll asked and read (one squeue for both), else asked now.
        let (ask, polled) = match self.polled_pending.take() {
            Some((ask, answer)) => (ask, Some(answer)),
            // The poll's squeue did not read them (nothing was due when it asked; a
            // retry launched while it was out): the next cycle's query will, not a
            // second one now, on the loop.
            None if self.poll_asked => return Ok(true),
            None => match self.pending_ask()? {
                Some(ask) => (ask, None),
                None => return Ok(true),
            },
        };
        let PendingAsk {
            pending,
            watch,
            owners,
            users,
        } = ask;
        let launches: Vec<i64> = pending.iter().map(|r| r.launch_id).collect();
        let answer = match polled {
            Some(answer) => answer,
            None => self.slurm.pending_of_users(&users).await,
        };
        let rows = match answer {
            Ok(p) => p,
            Err(e) if watch => {
                // The report waits one interval. Nothing else is held back for it, and a
                // rewiring is neither dropped nor held for good because of what another
                // owner's queue did to this answer: it asks again next cycle, with the
                // retried chains' owners alone, and is judged on that answer.
                self.waiters_seen = Some(std::time::Instant::now());
                warn!("cannot list the pending jobs of {users:?}: {e}; plain-sbatch afterany/afternotok jobs are looked for again later");
                if !pending.is_empty()
                    && !matches!(e, SlurmError::Garbage { .. } | SlurmError::Rejected { .. })
                {
                    self.slurm_down("squeue", &e);
                    return Ok(false);
                }
                return Ok(true);
            }
            Err(e @ (SlurmError::Garbage { .. } | SlurmError::Rejected { .. })) => {
                // Not an outage: asking again would get the same answer.
                error!("cannot list the pending jobs of {users:?}: {e}; jobs waiting on an earlier attempt are left as they are");
                self.store.clear_rewires(&launches)?;
                return Ok(true);
            }
            Err(e) => {
                self.slurm_down("squeue", &e);
                return Ok(false);
            }
        };
        for e in &rows.errors {
            warn!(
                line = e.line_no,
                "squeue printed a pending job that cannot be read, leaving it: {} ({:?})",
                e.message,
                e.line
            );
        }
        if watch {
            self.waiters_seen = Some(std::time::Instant::now());
        }
        self.report_plain_waiters(&rows.rows, &owners, t)?;
        if pending.is_empty() {
            return Ok(true);
        }
        self.rewire(&rows.rows, &launches, &owners, t).await
    }

    /// Rewires the owners' pending jobs that name an earlier attempt of a chain that got a
    /// new one. Returns false when Slurm did not answer.
    async fn rewire(
        &mut self,
        rows: &[PendingRow],
        launches: &[i64],
        owners: &HashMap<String, u32>,
        t: i64,
    ) -> Result<bool, StoreError> {
        // Only jobs that name one of the earlier attempts are looked at closely.
        let superseded = self.store.superseded_jobs(launches)?;
        let names_one = |dep: &str| {
            dep.split([':', ',', '?', '(', ')', '+'])
                .any(|tok| superseded.contains(dependency::whole_array_base(tok)))
        };
        let mut candidates: Vec<&PendingRow> =
            rows.iter().filter(|r| names_one(&r.dependency)).collect();
        // Whole-array records first: updating one reaches its split-off tasks too, which
        // their own (later) updates then set right.
        candidates.sort_by_key(|r| !r.job_id.contains('['));
        let (mut updates, mut examined) = (0usize, 0usize);
        let mut complete = true;
        for row in candidates {
            let Some(&uid) = owners.get(&row.user) else {
                continue;
            };
            if updates >= MAX_REWIRES_PER_CYCLE {
                // The rest next cycle (those done no longer name an earlier attempt).
                complete = false;
                break;
            }
            examined += 1;
            if examined > MAX_EXAMINED_PER_CYCLE {
                error!("more than {MAX_EXAMINED_PER_CYCLE} waiting jobs name an earlier attempt; the rest are not rewired");
                break;
            }
            let Some((new, changes)) = self.rewiring(row, uid)? else {
                continue;
            };
            updates += 1;
            match self.set_dependency(row, &new.to_string(), uid).await {
                // Recorded at once: a rewiring is never left without its record.
                Set::Done => {
                    let records = self.rewired_records(row, uid, &changes)?;
                    self.store.apply(&Batch::all(records), t)?;
                }
                Set::Skipped => {}
                Set::SlurmDown => return Ok(false),
            }
        }
        if complete {
            self.store.clear_rewires(launches)?;
        }
        Ok(true)
    }

    /// Reports, once on each chain, the plain-sbatch jobs that wait afterany/afternotok on
    /// the chain's current job: Slurm starts them when that attempt ends, not when the
    /// chain has ended for good, and the supervisor cannot hold them back in time (jobs
    /// submitted through the supervisor are held instead). Only the owner's own chains.
    fn report_plain_waiters(
        &mut self,
        rows: &[PendingRow],
        owners: &HashMap<String, u32>,
        t: i64,
    ) -> Result<(), StoreError> {
        let ctx = policy::Context::at(t);
        let recent = t - crate::store::JOB_IDS_NAME_CHAINS_FOR;
        let mut items = Vec::new();
        // In job-id order, from where the last look stopped: however many rows use up one
        // look's budget, the others' turn comes in the next.
        let mut order: Vec<(WaiterKey, &PendingRow, u32)> = rows
            .iter()
            .filter(|r| r.dependency.contains("afterany") || r.dependency.contains("afternotok"))
            .filter_map(|r| owners.get(&r.user).map(|&uid| (waiter_key(r), r, uid)))
            .collect();
        order.sort_by(|a, b| a.0.cmp(&b.0));
        let resume_from = self.waiters_after.take();
        if let Some(after) = &resume_from {
            let split = order.partition_point(|(k, _, _)| k <= after);
            order.rotate_left(split);
        }
        // The last row looked at in full: where the next look starts if this one stops.
        let mut done = resume_from;
        // One for each row, and one for each chain it names: a row that names a big
        // array costs what its chains cost.
        let mut cost = 0usize;
        'rows: for (key, row, uid) in &order {
            let uid = *uid;
            if cost >= MAX_EXAMINED_PER_CYCLE || items.len() >= MAX_REWIRES_PER_CYCLE {
                warn!("more pending jobs wait afterany/afternotok than one look takes; the rest are looked at in the next");
                self.waiters_after = done;
                break;
            }
            // Looked at in full unless the records run out within it (below).
            let before = done.replace(key.clone());
            cost += 1;
            let Ok(expr) = Expr::parse(&row.dependency) else {
                continue;
            };
            let targets: Vec<(dependency::Kind, &dependency::Target)> = expr
                .targets()
                .filter(|(k, _)| k.is_about_outcome())
                .collect();
            if targets.is_empty() || self.is_supervised(row)? {
                continue;
            }
            let Some(facts) = self.store.upstream_facts(
                uid,
                targets.iter().map(|(_, tg)| tg.job.as_str()),
                recent,
            )?
            else {
                continue;
            };
            cost += facts.values().map(Vec::len).sum::<usize>();
            // One report a job (a whole array's tasks too), on the first open chain whose
            // current job it waits on: Slurm judges that attempt alone, whatever the
            // supervisor does next.
            let noted_as = base_job_id(&row.job_id);
            if items.iter().any(|(_, j, _)| *j == noted_as)
                || self.store.plain_waiter_noted(&noted_as)?
            {
                continue;
            }
            let first = targets.iter().find_map(|(kind, target)| {
                let base = dependency::whole_array_base(&target.job);
                facts
                    .get(&target.job)
                    .into_iter()
                    .flatten()
                    .find(|u| {
                        u.state.is_open()
                            && u.latest_job
                                .as_deref()
                                .is_some_and(|j| base_job_id(j) == base || j == target.job)
                    })
                    .map(|u| (*kind, *target, u.chain))
            });
            let Some((kind, target, up)) = first else {
                continue;
            };
            if items.len() >= MAX_REWIRES_PER_CYCLE {
                // This row again next look.
                warn!("more than {MAX_REWIRES_PER_CYCLE} plain-sbatch jobs to report; the rest in the next look");
                self.waiters_after = before;
                break 'rows;
            }
            let Some(chain) = self.store.chain(up)? else {
                continue;
            };
            let event = Event::PlainJobNotHeld {
                job: &row.job_id,
                kind: kind.as_str(),
                attempt: &target.job,
                once_as: &noted_as,
            };
            let tr = self.decide(&chain, event, &ctx);
            super::attempt_span(up, &row.job_id).in_scope(|| log_transition(&tr));
            items.push((up, noted_as, tr));
        }
        if !items.is_empty() {
            let steps = items.into_iter().map(|(up, _, tr)| (up, tr)).collect();
            self.store.apply(&Batch::each(steps), t)?;
        }
        Ok(())
    }

    /// Whether a pending row is (or holds tasks of) a supervised job.
    fn is_supervised(&self, row: &PendingRow) -> Result<bool, StoreError> {
        Ok(match row_jobs(row).first() {
            Some(id) => self.store.chain_of_job(id)?.is_some(),
            None => false,
        })
    }

    /// The update one pending row needs: its new dependency and what moved. A record of
    /// array tasks waiting together (`12_[2-5]`, `%A` the array's id) is updated whole:
    /// Slurm takes an update of one task of such a record without applying it. aftercorr
    /// arrays are split by Slurm into a record per task, each rewired to its own
    /// counterpart.
    fn rewiring(&self, row: &PendingRow, uid: u32) -> Result<Option<Rewired>, StoreError> {
        let Ok(expr) = Expr::parse(&row.dependency) else {
            super::waiting_span(&row.job_id).in_scope(|| debug!(dependency = %row.dependency, "a dependency this cannot read is left to Slurm"));
            return Ok(None);
        };
        let Some(facts) = self.store.upstream_facts(
            uid,
            expr.targets().map(|(_, t)| t.job.as_str()),
            super::now() - crate::store::JOB_IDS_NAME_CHAINS_FOR,
        )?
        else {
            super::waiting_span(&row.job_id)
                .in_scope(|| warn!("its dependency names too many supervised jobs to rewire"));
            return Ok(None);
        };
        let task = JobId::parse(&row.job_id)
            .ok()
            .filter(|j| j.pending_tasks().is_none())
            .and_then(|j| j.task());
        let whole = dependency::rewire(&expr, &facts, task);
        if whole.is_none() {
            // A job requeued in place keeps its id: what waited on it is re-armed.
            return Ok(rearm(row, &expr, &facts));
        }
        Ok(whole)
    }

    /// Sets a waiting job's new dependency, as its owner. A refusal (it started
    /// meanwhile) is logged and skipped.
    async fn set_dependency(
        &mut self,
        row: &crate::slurm::types::PendingRow,
        new: &str,
        uid: u32,
    ) -> Set {
        let who = match crate::daemon::sbatch::run_as(uid) {
            Ok(w) => w,
            Err(e) => {
                super::waiting_span(&row.job_id).in_scope(|| warn!("{e}"));
                return Set::Skipped;
            }
        };
        match self
            .slurm
            .set_dependency(&row.job_id_raw, new, who.as_ref())
            .await
        {
            Ok(()) => {
                super::waiting_span(&row.job_id)
                    .in_scope(|| info!(dependency = %new, "rewired to the new attempt"));
                Set::Done
            }
            Err(e @ (SlurmError::Rejected { .. } | SlurmError::Garbage { .. })) => {
                // It started or ended meanwhile, or Slurm refuses: nothing to record.
                super::waiting_span(&row.job_id)
                    .in_scope(|| warn!("cannot rewire the job's dependency to {new}: {e}"));
                Set::Skipped
            }
            Err(e) => {
                self.slurm_down("scontrol", &e);
                Set::SlurmDown
            }
        }
    }

    /// The records of one rewired job: on its own chains when it is supervised (one per
    /// array task that waits), else on each upstream chain it now follows.
    fn rewired_records(
        &self,
        row: &crate::slurm::types::PendingRow,
        uid: u32,
        changes: &[(i64, String, String)],
    ) -> Result<Vec<(i64, policy::Transition)>, StoreError> {
        let mut own = Vec::new();
        for id in row_jobs(row) {
            if let Some((chain, owner)) = self.store.chain_of_job(&id)? {
                if owner == uid && !own.contains(&chain) {
                    own.push(chain);
                }
            }
        }
        let ctx = policy::Context::default();
        let mut out = Vec::new();
        if !own.is_empty() {
            let cause = match changes.first() {
                Some((up, ..)) => self.store.chain(*up)?.and_then(|c| c.last_classification),
                None => None,
            }
            .unwrap_or(crate::domain::model::Classification::Ambiguous);
            for c in own {
                let Some(chain) = self.store.chain(c)? else {
                    continue;
                };
                let event = Event::Rewired {
                    job: &row.job_id,
                    changes,
                    cause,
                };
                let tr = self.decide(&chain, event, &ctx);
                super::attempt_span(c, &row.job_id).in_scope(|| log_transition(&tr));
                out.push((c, tr));
            }
            return Ok(out);
        }
        for (up, from, to) in changes {
            let Some(chain) = self.store.chain(*up)? else {
                continue;
            };
            let event = Event::PlainJobRewired {
                job: &row.job_id,
                from,
                to,
            };
            let tr = self.decide(&chain, event, &ctx);
            super::attempt_span(*up, &row.job_id).in_scope(|| log_transition(&tr));
            out.push((*up, tr));
        }
        Ok(out)
    }

    /// Releases (or cancels) the jobs held for afterany/afternotok whose upstream chains
    /// have ended for good: one `scontrol release` (and at most one scancel) per owner,
    /// then every decision recorded. Returns false when Slurm did not answer (nothing is
    /// recorded; the next cycle decides again).
    pub(super) async fn settle_gates(&mut self, t: i64) -> Result<bool, StoreError> {
        struct Settle {
            sub: i64,
            owner: u32,
            open: bool,
            items: Vec<(i64, policy::Transition)>,
            jobs: Vec<String>,
        }
        let mut plans = Vec::new();
        let due = self.store.gates_due()?;
        if due.is_empty() {
            return Ok(true);
        }
        // A submission whose sbatch is not settled yet is decided once it is: its job
        // (held) may be about to exist.
        let unsettled: HashSet<i64> = self
            .store
            .open_launches()?
            .iter()
            .map(|l| l.submission_id)
            .collect();
        for sub_id in due {
            if unsettled.contains(&sub_id) {
                continue;
            }
            let gates = self.store.closed_gates(sub_id)?;
            let Some(open) = policy::gates_open(&gates) else {
                continue;
            };
            let chains = self.store.open_chains_of_submission(sub_id)?;
            // A chain its user is cancelling is the cancel's to record: the submission's
            // gates are settled next cycle, once the cancel is recorded or has failed.
            if self.held.any(chains.iter().map(|(c, _)| *c)) {
                continue;
            }
            let mut items = Vec::new();
            for (c, job) in &chains {
                let Some(chain) = self.store.chain(*c)? else {
                    continue;
                };
                let event = Event::GatesDecided {
                    job: job.as_deref(),
                    gates: &gates,
                };
                items.push((*c, self.decide(&chain, event, &policy::Context::at(t))));
            }
            // Released when the gates opened, cancelled when they never will.
            let jobs = items
                .iter()
                .flat_map(|(_, tr)| tr.jobs())
                .map(str::to_string)
                .collect();
            plans.push(Settle {
                sub: sub_id,
                owner: self.store.submission(sub_id)?.owner_uid,
                open,
                items,
                jobs,
            });
        }
        if plans.is_empty() {
            return Ok(true);
        }
        let mut by_owner: BTreeMap<(u32, bool), Vec<String>> = BTreeMap::new();
        for p in &plans {
            by_owner
                .entry((p.owner, p.open))
                .or_default()
                .extend(p.jobs.iter().cloned());
        }
        let mut unreachable = HashSet::new();
        for ((owner, open), jobs) in by_owner {
            if jobs.is_empty() {
                continue;
            }
            let who = match crate::daemon::sbatch::run_as(owner) {
                Ok(w) => w,
                Err(e) => {
                    warn!("{e}");
                    unreachable.insert(owner);
                    continue;
                }
            };
            let (what, result) = if open {
                ("scontrol", self.slurm.release(&jobs, who.as_ref()).await)
            } else {
                ("scancel", self.slurm.scancel(&jobs, who.as_ref()).await)
            };
            match result {
                Ok(()) => {}
                Err(e @ (SlurmError::Rejected { .. } | SlurmError::Garbage { .. })) => {
                    // Released or cancelled by its owner already, or gone: the gates are
                    // settled all the same, and the records say what was decided.
                    warn!(jobs = ?jobs, "{what} refused: {e}");
                }
                Err(e) => {
                    self.slurm_down(what, &e);
                    return Ok(false);
                }
            }
        }
        for p in plans
            .into_iter()
            .filter(|p| !unreachable.contains(&p.owner))
        {
            for (c, tr) in &p.items {
                super::chain_span(*c).in_scope(|| log_transition(tr));
            }
            let batch = Batch {
                settled_gates: Some((p.sub, p.open)),
                ..Batch::each(p.items)
            };
            self.store.apply(&batch, t)?;
        }
        Ok(true)
    }

    /// A chain whose waiting job Slurm cancelled for its dependency waits, `ready`, until
    /// the chains it waits on have a live attempt again: true while one does not.
    pub(super) fn waits_for_upstream(&self, submission_id: i64) -> Result<bool, StoreError> {
        Ok(self
            .store
            .open_upstreams(submission_id)?
            .iter()
            .any(|(_, s)| *s != ChainState::Active))
    }

    /// Ready chains whose afterok upstream has ended for good without completing will
    /// never start: cancelled, recorded (R3).
    pub(super) fn drop_broken(&mut self, chains: &[i64], t: i64) -> Result<Vec<i64>, StoreError> {
        let mut items = Vec::new();
        for &c in chains {
            let Some(chain) = self.store.chain(c)? else {
                continue;
            };
            // Only a chain whose job Slurm cancelled for its dependency: any other ran
            // once its upstream had completed.
            if chain.last_classification != Some(crate::domain::model::Classification::Cancelled) {
                continue;
            }
            let broken = self.store.broken_upstreams(chain.submission_id)?;
            let Some((up, state)) = broken.first() else {
                continue;
            };
            let event = Event::UpstreamBroken {
                upstream: *up,
                upstream_state: *state,
                job: None,
            };
            let tr = self.decide(&chain, event, &policy::Context::at(t));
            super::chain_span(c).in_scope(|| log_transition(&tr));
            items.push((c, tr));
        }
        let chains = items.iter().map(|(c, _)| *c).collect();
        self.store.apply(&Batch::all(items), t)?;
        Ok(chains)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::dependency::Upstream;

    fn row(dependency: &str) -> PendingRow {
        PendingRow {
            job_id: "57".into(),
            job_id_raw: "57".into(),
            user: "alice".into(),
            dependency: dependency.into(),
        }
    }

    /// Ten poll intervals, at most a minute, never less than one: with every allowed
    /// `poll_interval` (1 s to 1 h), a long one included.
    #[test]
    fn the_report_looks_every_ten_intervals_at_most_a_minute() {
        use std::time::Duration;
        let s = Duration::from_secs;
        assert_eq!(waiters_every(s(1)), s(10));
        assert_eq!(waiters_every(s(30)), s(60));
        assert_eq!(waiters_every(s(60)), s(60));
        assert_eq!(waiters_every(s(120)), s(120));
        assert_eq!(waiters_every(s(3600)), s(3600));
    }

    /// A job waiting on 56, requeued in place (its chain's latest job is still 56), as
    /// squeue showed it on 22.05 and 24.11: set again, unchanged. Not while the upstream
    /// chain is not open, nor when Slurm does not mark it failed.
    #[test]
    fn a_dependency_on_a_job_requeued_in_place_is_set_again() {
        let facts = |state| {
            dependency::Facts::from([(
                "56".to_string(),
                vec![Upstream {
                    chain: 3,
                    state,
                    latest_job: Some("56".into()),
                }],
            )])
        };
        let r = row("afterok:56(failed)");
        let expr = Expr::parse(&r.dependency).unwrap();
        let (new, changes) = rearm(&r, &expr, &facts(ChainState::Active)).unwrap();
        assert_eq!(new.to_string(), "afterok:56");
        assert_eq!(changes, vec![(3, "56".to_string(), "56".to_string())]);
        assert!(rearm(&r, &expr, &facts(ChainState::Failed)).is_none());
        let r = row("afterok:56(unfulfilled)");
        let expr = Expr::parse(&r.dependency).unwrap();
        assert!(rearm(&r, &expr, &facts(ChainState::Active)).is_none());
    }
}
