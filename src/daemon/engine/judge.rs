//! The endings `poll` found: classified (with the job's output tails, read off the loop),
//! decided by `policy::transition`, and recorded with their observation.
//!
//! A burst is judged in batches of `JUDGE_BATCH`: the output tails of a batch are read
//! side by side (each with a deadline), then the whole batch is decided and recorded in
//! one transaction (one sync to disk). Between batches the loop answers control
//! requests; the rest waits in the engine's backlog, in memory only: after a crash the
//! next poll finds those endings again.
//!
//! A job Slurm cancelled because the attempt it waited on failed (`kill_invalid_depend`:
//! `CANCELLED` by nobody, before it ever ran) is told here from one its user cancelled,
//! and decided with the upstream chains that failed.

use super::{log_transition, Engine, Found};
use crate::domain::classify::{self, Observation};
use crate::domain::continuation::Progress;
use crate::domain::model::Action;
use crate::domain::policy::Judged;
use crate::domain::policy::{self, ChainHistory, ContinuationFacts, Event};
use crate::slurm::types::{JobState, SacctRow};
use crate::slurm::Slurm;
use crate::store::{AttemptEnd, StoreError, Submission};
use futures_util::stream::{self, StreamExt};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tracing::{error, warn, Instrument};

/// The users' own rules the engine keeps compiled (by acceptance record) past a batch
/// that needs fewer: at most `MAX_RULES_PER_USER` per user, so a few thousand users' worth.
const OWN_RULES_KEPT: usize = 4096;

/// How long reading a job's stdout/stderr tail may take.
const OUTPUT_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a partition limit read from sinfo is trusted (a partition sinfo does not list
/// is remembered as unknown for as long).
const PARTITION_REFRESH: Duration = Duration::from_secs(3600);

/// Endings judged in one transaction before the loop looks at its requests again.
const JUDGE_BATCH: usize = 500;

/// Output files read at once (each on a blocking thread).
const TAIL_READS_AT_ONCE: usize = 16;

/// What was read of an ending off the loop: its stderr and stdout tails, and a
/// continuing job's progress path (`None`: none to read; `Some(Err)`: it did not answer
/// in time).
struct Evidence {
    tails: (Option<String>, Option<String>),
    progress: Option<Result<Progress, String>>,
}

/// How many polls in a row an ending whose progress path did not answer in time (a hung
/// network filesystem) waits for it before it is judged as not read: a storage hiccup
/// does not park a continuing chain for a person, and a dead mount does not hold its
/// ending for long (each try costs one reader of at most `PROGRESS_READ_TIMEOUT`).
pub(super) const PROGRESS_DEFERRALS: u32 = 3;

/// The progress path to read for an ending, and as whom: only a continuing submission's
/// with a path, only for an ending a continuation may answer (TIMEOUT, PREEMPTED, ended by
/// the warning signal or with one of its own "continue me" codes) that ran at least
/// `continuation.min_attempt` (a shorter one is no progress whatever the path says).
fn progress_to_read(
    config: &crate::config::Config,
    sub: &Submission,
    run: &[SacctRow],
) -> Option<(std::path::PathBuf, Option<crate::slurm::RunAs>)> {
    let spec = sub.continuation.as_ref()?;
    let path = spec.progress.as_deref()?;
    let job = run.iter().find(|r| !r.is_step())?;
    let candidate = match job.state {
        JobState::Timeout | JobState::Preempted => true,
        JobState::Failed => {
            job.exit_code.signal == 10
                || u8::try_from(job.exit_code.code).is_ok_and(|c| spec.requeue_exit.contains(&c))
        }
        _ => false,
    };
    let long_enough = job.elapsed_secs.unwrap_or(0) >= config.continuation.min_attempt.0.as_secs();
    if !candidate || !long_enough {
        return None;
    }
    let owner = crate::daemon::sbatch::run_as(sub.owner_uid).ok()?;
    Some((crate::daemon::evidence::progress_path(sub, path), owner))
}

/// An ending ready to be decided: its attempt, the run that ended, and the submission.
struct Ending {
    found: Found,
    run: Vec<SacctRow>,
    sub: Submission,
}

/// How far before this daemon's record of an sbatch Slurm's Submit time of the job it made
/// may be and still count as that job's: the controller's clock may be behind the login
/// node's. A job with the same id submitted earlier than that is an older job (job ids
/// wrapped around, or the controller's state was reset).
const ID_REUSE_MARGIN_SECS: i64 = 600;

impl<S: Slurm> Engine<S> {
    /// Makes sure the MaxTime of `partitions` is known: one sinfo per refresh at most. A
    /// partition sinfo does not list is remembered as unlimited-or-unknown until the next
    /// refresh, not asked about again for every ending.
    async fn learn_partitions(&mut self, partitions: &[String]) {
        let stale = self
            .partitions_read
            .is_none_or(|t| t.elapsed() > PARTITION_REFRESH);
        let unknown = partitions.iter().any(|p| !self.partitions.contains_key(p));
        if !stale && !unknown {
            return;
        }
        if !stale && self.partitions_read.is_some() {
            // Read within the refresh interval and still not listed: unknown.
            for p in partitions {
                self.partitions.entry(p.clone()).or_insert(None);
            }
            return;
        }
        match self.slurm.partition_limits().await {
            Ok(p) => self.partitions = p,
            Err(e) => {
                warn!("cannot read partition limits (sinfo): {e}; time escalation uses the config cap only");
                self.partitions.clear();
            }
        }
        self.partitions_read = Some(Instant::now());
        for p in partitions {
            self.partitions.entry(p.clone()).or_insert(None);
        }
    }

    /// True while endings found by the last poll wait to be judged.
    pub fn has_backlog(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// Judges the next batch of endings `poll` found: requeues and endings recorded in one
    /// transaction.
    pub(super) async fn judge_backlog(&mut self, t: i64) -> Result<(), StoreError> {
        let n = self.backlog.len().min(JUDGE_BATCH);
        if n == 0 {
            return Ok(());
        }
        // (A chain held since the poll left the backlog then: `Holds::hold`.)
        let batch: Vec<Found> = self.backlog.drain(..n).collect();
        let mut endings = Vec::new();
        let mut partitions = Vec::new();
        self.store.begin_batch()?;
        for f in batch {
            let job = f.attempt.slurm_job_id.clone().unwrap_or_default();
            let _span = super::attempt_span(f.attempt.chain_id, &job).entered();
            match self.requeues_then_ending(f, t) {
                Ok(None) => {}
                // One ending that cannot be recorded (its operation rolled back to its
                // savepoint) holds up only itself: the next poll finds it again.
                Err(e) if !e.is_corruption() => {
                    error!("cannot record what happened to the job: {e}; it is looked at again next cycle");
                }
                Ok(Some(e)) => {
                    let job_row = e.run.iter().find(|r| !r.is_step());
                    if let Some(p) = job_row.map(|r| &r.partition) {
                        if !partitions.contains(p) {
                            partitions.push(p.clone());
                        }
                    }
                    endings.push(e);
                }
                Err(e) => {
                    let _ = self.store.end_batch(false);
                    return Err(e);
                }
            }
        }
        self.store.end_batch(true)?;
        if endings.is_empty() {
            return Ok(());
        }
        // Slurm and the filesystem are asked before the transaction opens, not inside it.
        self.learn_partitions(&partitions).await;
        let tails = self.read_tails(&endings).await;
        let stopped = self.stopped_rules();
        let owners: std::collections::BTreeSet<u32> =
            endings.iter().map(|e| e.sub.owner_uid).collect();
        let users_rules = self.users_rules(&owners);
        self.store.begin_batch()?;
        let mut result = Ok(());
        for (e, read) in endings.into_iter().zip(tails) {
            let (stderr_tail, stdout_tail) = read.tails;
            let obs = Observation {
                job_id: e.found.attempt.slurm_job_id.clone().unwrap_or_default(),
                rows: e.run,
                stderr_tail,
                stdout_tail,
                requeued_by_slurm: false,
            };
            let _span = super::attempt_span(e.found.attempt.chain_id, &obs.job_id).entered();
            let Some(progress) = self
                .progress_or_defer((e.found.attempt.chain_id, e.found.attempt.n), read.progress)
            else {
                continue;
            };
            let own = users_rules
                .get(&e.sub.owner_uid)
                .map_or(&[][..], Vec::as_slice);
            match self.record_ending(&e.found, obs, &e.sub, progress, &stopped, own, t) {
                Ok(()) => {}
                Err(err) if !err.is_corruption() => {
                    error!("cannot record the job's ending: {err}; it is judged again next cycle");
                }
                Err(err) => {
                    result = Err(err);
                    break;
                }
            }
        }
        match result {
            Ok(()) => self.store.end_batch(true),
            Err(e) => {
                let _ = self.store.end_batch(false);
                Err(e)
            }
        }
    }

    /// The stdout/stderr tails of a batch of endings, and a continuing job's progress
    /// path, read side by side off the loop, each with a deadline (a hung network
    /// filesystem): past it, that ending is judged without them.
    async fn read_tails(&self, endings: &[Ending]) -> Vec<Evidence> {
        let reads = endings.iter().map(|e| {
            let (config, sub, run) = (self.config.clone(), e.sub.clone(), e.run.clone());
            let job = e.found.attempt.slurm_job_id.clone().unwrap_or_default();
            let span = super::attempt_span(e.found.attempt.chain_id, &job);
            // A continuing job's progress path, read as its owner, only for an ending a
            // continuation may answer (docs/continuation.md): not for every ending of it.
            let progress = progress_to_read(&config, &sub, &run);
            async move {
                let read = tokio::task::spawn_blocking(move || {
                    crate::daemon::evidence::output_tails(&config, &sub, &job, &run)
                });
                let tails = async {
                    match tokio::time::timeout(OUTPUT_READ_TIMEOUT, read).await {
                        Ok(Ok(tails)) => tails,
                        _ => {
                            warn!("the job's output files could not be read in time; judging without them");
                            (None, None)
                        }
                    }
                };
                let progress = async {
                    match progress {
                        Some((path, owner)) => Some(
                            crate::daemon::evidence::read_progress_as(&path, owner.as_ref())
                                .await,
                        ),
                        None => None,
                    }
                };
                let (tails, progress) = tokio::join!(tails, progress);
                Evidence { tails, progress }
            }
            .instrument(span)
        });
        stream::iter(reads)
            .buffered(TAIL_READS_AT_ONCE)
            .collect()
            .await
    }

    /// The progress read of the attempt `attempt` (chain, number) to judge its ending with, or `None` to leave
    /// the ending to a later poll: its path did not answer in time, fewer than
    /// [`PROGRESS_DEFERRALS`] polls in a row. After that it is judged as not read (so
    /// without progress: `no_progress`, for a person to look at), the reason saying so.
    fn progress_or_defer(
        &mut self,
        attempt: (i64, u32),
        read: Option<Result<Progress, String>>,
    ) -> Option<Option<Progress>> {
        match read {
            None => Some(None),
            Some(Ok(p)) => {
                self.progress_deferred.remove(&attempt);
                Some(Some(p))
            }
            Some(Err(why)) => {
                if self.progress_deferred.len() >= 4096
                    && !self.progress_deferred.contains_key(&attempt)
                {
                    // Attempts that left otherwise (a cancel) are never removed: bounded.
                    self.progress_deferred.clear();
                }
                let n = self.progress_deferred.entry(attempt).or_insert(0);
                *n += 1;
                if *n <= PROGRESS_DEFERRALS {
                    warn!("the job's progress path did not answer in time ({why}); its ending is judged at a later poll ({n} of {PROGRESS_DEFERRALS})");
                    return None;
                }
                let polls = *n;
                self.progress_deferred.remove(&attempt);
                Some(Some(Progress::Unreadable {
                    why: format!("{why}, at {polls} polls in a row"),
                }))
            }
        }
    }

    /// Records the requeues that the runs of one attempt show, and returns its ending if
    /// it has one (to be judged with its output tails).
    fn requeues_then_ending(&mut self, f: Found, t: i64) -> Result<Option<Ending>, StoreError> {
        let a = &f.attempt;
        let jid = a.slurm_job_id.clone().unwrap_or_default();
        // After Slurm's job ids wrap around (or its state is reset), an old job with the
        // same id is in sacct too: when some runs were submitted (or requeued) after this
        // attempt's sbatch, only those are ours. Slurm's Submit time is used, not the tag
        // in the comment: the comment is the owner's text, which the poll's sacct does not
        // read. (None is later for an adopted job, submitted before it was adopted.)
        let tagged = |run: &&Vec<SacctRow>| {
            let submit = run.iter().find(|r| !r.is_step()).and_then(|r| r.submit);
            match (a.submitted_at, submit) {
                (Some(at), Some(submit)) => submit >= at - ID_REUSE_MARGIN_SECS,
                _ => false,
            }
        };
        // An attempt requeued in place shares its job id (and comment) with the attempts
        // before it: its runs are those after theirs.
        let ours: Vec<Vec<SacctRow>> = if a.in_place {
            f.runs.iter().skip(a.first_run as usize).cloned().collect()
        } else if f.runs.iter().any(|r| tagged(&r)) {
            f.runs.iter().filter(tagged).cloned().collect()
        } else {
            f.runs.clone()
        };
        // Every run before the last one ended and was requeued by Slurm itself.
        let requeued_runs = ours.len().saturating_sub(1);
        for run in ours.iter().take(requeued_runs).skip(a.restarts as usize) {
            let obs = Observation {
                job_id: jid.clone(),
                rows: run.clone(),
                stderr_tail: None,
                stdout_tail: None,
                requeued_by_slurm: true,
            };
            let Ok(v) = classify::classify(&obs, &self.config.rules) else {
                continue;
            };
            let Some(chain) = self.store.chain(a.chain_id)? else {
                continue;
            };
            let observation = serde_json::to_value(&obs).unwrap_or_default();
            let event = Event::Requeued {
                verdict: &v,
                n: a.n,
                observation: &observation,
            };
            let tr = self.decide(&chain, event, &policy::Context::at(t));
            if tr.record.is_none() {
                continue;
            }
            // The loop answered requests since the poll found this (a burst is judged
            // over several turns): an attempt a cancel ended meanwhile is left as it is.
            if !self.store.apply_one(a.chain_id, &tr, t)? {
                return Ok(None);
            }
            log_transition(&tr);
        }
        let Some(last) = ours.last() else {
            return Ok(None);
        };
        let job_row_state = last.iter().find(|r| !r.is_step()).map(|r| r.state);
        if f.still_queued || !job_row_state.is_some_and(JobState::is_terminal) {
            return Ok(None);
        }
        let Some(chain) = self.store.chain(a.chain_id)? else {
            return Ok(None);
        };
        let sub = self.store.submission(chain.submission_id)?;
        let run = last.clone();
        Ok(Some(Ending { found: f, run, sub }))
    }

    /// The open supervised chains a submission waits on whose attempt, the one its job
    /// (submitted at `since`) waited on, failed: the chain is being retried (not active)
    /// or was relaunched after the job was submitted. Only such a failure explains Slurm
    /// cancelling the waiting job (kill_invalid_depend); any other cancel is not ours to
    /// undo, and each failed upstream attempt brings the job back at most once.
    fn failed_upstreams(
        &self,
        submission_id: i64,
        since: Option<i64>,
    ) -> Result<Vec<i64>, StoreError> {
        let mut out = Vec::new();
        for (c, state) in self.store.open_upstreams(submission_id)? {
            let relaunched = || -> Result<bool, StoreError> {
                let latest = self
                    .store
                    .attempts(c)?
                    .into_iter()
                    .rev()
                    .find_map(|a| a.submitted_at);
                Ok(matches!((latest, since), (Some(l), Some(s)) if l > s))
            };
            if state != crate::domain::model::ChainState::Active || relaunched()? {
                out.push(c);
            }
        }
        Ok(out)
    }

    /// What a continuing chain's earlier decisions say (docs/continuation.md): its
    /// continuations so far and the wall time they used (from its latest `continued`
    /// record), and its progress path when its previous attempt ended (from its latest
    /// record about progress). `now` is the path as it is after this attempt.
    fn continuation_facts(
        &self,
        a: &crate::store::Attempt,
        spec: &crate::domain::continuation::Continuation,
        now: Option<Progress>,
    ) -> Result<ContinuationFacts, StoreError> {
        let facts_of = |d: &crate::store::DecisionRecord| {
            d.inputs
                .get("history")
                .and_then(|h| h.get("continuation"))
                .and_then(|c| serde_json::from_value::<ContinuationFacts>(c.clone()).ok())
        };
        let (used, wall_secs) = match self.store.last_decision_coded(a.chain_id, &["continued"])? {
            Some(d) => {
                let elapsed = d
                    .inputs
                    .get("verdict")
                    .and_then(|v| v.get("elapsed_secs"))
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0);
                let prev = facts_of(&d).unwrap_or_default();
                (prev.used + 1, prev.wall_secs.saturating_add(elapsed))
            }
            None => (0, 0),
        };
        let before = self
            .store
            .last_decision_coded(
                a.chain_id,
                &["continued", "no_progress", "continuation_spent"],
            )?
            .as_ref()
            .and_then(facts_of)
            .and_then(|f| f.now);
        Ok(ContinuationFacts {
            spec: spec.clone(),
            used,
            wall_secs,
            before,
            now,
            // The job cannot have written anything before its sbatch; the record of that is
            // in whole seconds, so only what is newer than that whole second counts.
            started_ns: a
                .submitted_at
                .map(|s| s.saturating_add(1).saturating_mul(1_000_000_000)),
        })
    }

    /// With `[learn] stop_not_working` (docs/rules.md): the rules whose automatic
    /// retries stopped working, which no longer decide an ending; none without it. Each
    /// by its own retries (`learn::RuleKey`): a user's own rule stops for that user alone.
    fn stopped_rules(&self) -> Vec<crate::domain::learn::RuleKey> {
        if !self.config.learn.stop_not_working {
            return Vec::new();
        }
        match self.store.rule_retries(None) {
            Ok(retries) => crate::domain::learn::not_working_rules(
                &crate::domain::learn::tally(retries.iter().map(crate::store::RuleRetry::outcome)),
                (&self.config.learn).into(),
            ),
            Err(e) => {
                warn!(
                    "cannot read how the rules' retries went: {e}; every rule decides this batch"
                );
                Vec::new()
            }
        }
    }

    /// The rules each of `owners` accepted for their own chains (docs/rules.md), as the
    /// classifier takes them; none when the store cannot say (logged: the config's rules
    /// decide, and an ending no rule matches waits for a person, as always).
    fn users_rules(
        &mut self,
        owners: &std::collections::BTreeSet<u32>,
    ) -> BTreeMap<u32, Vec<crate::config::Rule>> {
        let mut out = BTreeMap::new();
        match self.store.any_user_rule_decisions() {
            Ok(true) => {}
            Ok(false) => return out,
            Err(e) => {
                warn!("cannot read the rules users accepted for their own chains: {e}; the config's rules decide this batch");
                return out;
            }
        }
        // One query for the batch: everyone's records and its owners' own.
        let records = match self.store.rule_decisions_for(owners) {
            Ok(r) => r,
            Err(e) => {
                warn!("cannot read the rules users accepted for their own chains: {e}; the config's rules decide this batch");
                return out;
            }
        };
        let mut everyones = Vec::new();
        let mut by_owner: BTreeMap<u32, Vec<crate::domain::learn::RuleRecord>> = BTreeMap::new();
        for r in records {
            match r.owner_uid {
                None => everyones.push(r),
                Some(o) => by_owner.entry(o).or_default().push(r),
            }
        }
        let mut used = std::collections::HashSet::new();
        for (o, theirs) in by_owner {
            // Theirs and everyone's, oldest first: an admin's rejection for everyone after
            // a user's own acceptance takes the user's rule out (`learn::accepted_by`).
            let mut seen: Vec<crate::domain::learn::RuleRecord> =
                everyones.iter().cloned().chain(theirs).collect();
            seen.sort_by_key(|r| r.id);
            let cache = &mut self.own_rules;
            let rules: Vec<crate::config::Rule> = crate::domain::learn::accepted_by(&seen, o)
                .into_iter()
                .filter_map(|r| {
                    used.insert(r.id);
                    // Compiled once per acceptance (a record never changes).
                    cache
                        .entry(r.id)
                        .or_insert_with(|| crate::domain::learn::rule_in_force(r))
                        .clone()
                })
                .collect();
            if !rules.is_empty() {
                out.insert(o, rules);
            }
        }
        // Kept while in force for an owner of this batch; a rule out of force goes.
        if self.own_rules.len() > OWN_RULES_KEPT {
            self.own_rules.retain(|id, _| used.contains(id));
        }
        out
    }

    /// Classifies an ending, decides it, and records it (inside the caller's batch),
    /// with the config's rules, then `own` (those its owner accepted for their own
    /// chains). The rules named in `stopped` do not decide it.
    #[allow(clippy::too_many_arguments)]
    fn record_ending(
        &mut self,
        f: &Found,
        obs: Observation,
        sub: &Submission,
        progress: Option<Progress>,
        stopped: &[crate::domain::learn::RuleKey],
        own: &[crate::config::Rule],
        t: i64,
    ) -> Result<(), StoreError> {
        let a = &f.attempt;
        let rules: std::borrow::Cow<[crate::config::Rule]> = if stopped.is_empty() && own.is_empty()
        {
            std::borrow::Cow::Borrowed(&self.config.rules)
        } else {
            let every: Vec<crate::config::Rule> =
                self.config.rules.iter().chain(own).cloned().collect();
            if !stopped.is_empty() {
                let all = classify::classify(&obs, &every).ok();
                if let Some(v) = all {
                    if let Some(rule) = v
                        .rule
                        .filter(|r| stopped.contains(&(r.clone(), v.rule_owner_uid)))
                    {
                        warn!(%rule, rule_owner = ?v.rule_owner_uid, "this rule's retries stopped working and [learn] stop_not_working is on: it no longer decides, the ending is judged without it");
                    }
                }
            }
            every
                .into_iter()
                .filter(|r| !stopped.contains(&(r.name.clone(), r.owner_uid)))
                .collect()
        };
        let v = match classify::classify(&obs, &rules) {
            Ok(v) => v,
            Err(e) => {
                warn!("cannot classify: {e}");
                return Ok(());
            }
        };
        let by_class: BTreeMap<String, u32> = self
            .store
            .resubmits_by_class(a.chain_id)?
            .into_iter()
            .collect();
        let history = ChainHistory {
            resubmits: by_class.values().sum(),
            resubmits_by_class: by_class,
            max_retries: sub.max_retries,
            restartable: sub.restartable || self.config.retry.restartable,
            plan: a.plan.clone(),
            agent_retry_of: self
                .store
                .last_decision(a.chain_id)?
                .filter(|d| d.actor != "supervisor" && d.action == Action::Resubmit)
                .map(|d| d.classification),
            continuation: match &sub.continuation {
                Some(spec) => Some(Box::new(self.continuation_facts(a, spec, progress)?)),
                None => None,
            },
        };
        let ctx = policy::Context {
            partition_max_secs: self.partitions.get(&v.partition).copied().flatten(),
            quarantined: policy::quarantined(
                &self.store.node_failures_since(
                    t - self.config.quarantine.window.0.as_secs() as i64
                        - self.config.quarantine.duration.0.as_secs() as i64,
                )?,
                &self.config,
                t,
            ),
            recent_infra_failures: policy::breaker_failures(
                &self.store.infra_failures_by_owner_since(
                    t - self.config.breaker.window.0.as_secs() as i64,
                )?,
                self.config.breaker.threshold,
                self.config.breaker.min_users_here(),
            ),
            now: t,
            jitter: rand::random::<f64>() * 2.0 - 1.0,
        };
        let Some(chain) = self.store.chain(a.chain_id)? else {
            return Ok(());
        };
        let job_row = obs.rows.iter().find(|r| !r.is_step());
        // `CANCELLED` by nobody, before it ever ran: Slurm cancelled the waiting job
        // because the attempt it waited on failed (kill_invalid_depend), not its user.
        let killed_for_dependency = job_row.is_some_and(|r| {
            r.state == JobState::Cancelled
                && r.cancelled_by.is_none()
                && (r.node_list.is_empty() || r.node_list == "None assigned")
        });
        let upstreams = if killed_for_dependency {
            self.failed_upstreams(chain.submission_id, a.submitted_at)?
        } else {
            Vec::new()
        };
        let slurm_state = job_row.map(|r| r.state.to_string()).unwrap_or_default();
        // Computed here, by the writer, and kept as a value: a replica applying the
        // journal reads no output file (docs/rules.md).
        let signature = (v.classification != crate::domain::model::Classification::Completed)
            .then(|| ending_signature(&slurm_state, &v, &obs, sub));
        let judged = Judged {
            n: a.n,
            end: AttemptEnd {
                signature: signature.as_ref().map(|s| s.id.clone()),
                signature_text: signature.map(|s| s.text),
                slurm_state,
                exit_code: v.exit_code.clone(),
                nodes: v.nodes.clone(),
                mem: v.req_mem_bytes.map(|b| format!("{}M", b.div_ceil(1 << 20))),
                time_limit: v.timelimit_secs.map(crate::slurm::parse::format_time_limit),
            },
            observation: serde_json::to_value(&obs).unwrap_or_default(),
        };
        let event = if upstreams.is_empty() {
            Event::Ended {
                verdict: &v,
                history: &history,
                attempt: &judged,
            }
        } else {
            Event::KilledForDependency {
                verdict: &v,
                upstreams: &upstreams,
                attempt: &judged,
            }
        };
        let tr = self.decide(&chain, event, &ctx);
        let tr = self.with_dependents(a.chain_id, tr)?;
        // Only a still live attempt: one a cancel ended between two turns keeps its cancel.
        let recorded = self.store.apply_one(a.chain_id, &tr, t)?;
        if recorded {
            log_transition(&tr);
        }
        Ok(())
    }
}

/// An ending's failure signature (`crate::domain::signature`): what is this job's own, masked, is
/// its working directory and home, its owner's name, its script's name and its nodes.
fn ending_signature(
    slurm_state: &str,
    v: &classify::Verdict,
    obs: &Observation,
    sub: &Submission,
) -> crate::domain::signature::Signature {
    use crate::domain::signature::{signature, JobSpecifics};
    let env = |name: &str| {
        sub.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let mut job = JobSpecifics {
        dirs: vec![sub.cwd.as_str()],
        names: vec![sub.user.as_str()],
    };
    job.dirs.extend(env("HOME"));
    // The script's file name (Slurm's default job name), not its stem: a script `job.sh`
    // must not mask the word "job" in every error.
    if let Some(script) = &sub.script_name {
        job.names.push(script.rsplit('/').next().unwrap_or(script));
    }
    // A hostlist's brackets and the numbers in it are masked as numbers anyway.
    if let Some(nodes) = &v.nodes {
        job.names
            .extend(nodes.split(',').filter(|n| !n.contains(['[', ']'])));
    }
    signature(slurm_state, &v.exit_code, obs.stderr_tail.as_deref(), &job)
}
