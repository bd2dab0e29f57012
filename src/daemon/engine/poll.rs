//! Phase 2: one squeue for every live job; sacct for those that left the queue or were
//! seen requeued; a job missing from both for `lost_job_after` is escalated.
//!
//! The squeue is asked in two halves (`PollAsk`, `PollAnswer`): the question is made on
//! the loop from the live attempts; the daemon runs the squeue beside its loop (the
//! engine's `Runner::poll`), where the listing is read and folded into a
//! `slurm::types::Queue` (each job's state by owner, no row of owned text on the way; the
//! folding on a blocking thread, `slurm::cli`, but for the listing with the owners'
//! pending jobs), so requests are answered meanwhile. The
//! answer lands on the loop (`poll_landed`), which compares it with the store as it is
//! then: only the live attempts the question was about (a job launched or a chain held
//! meanwhile waits for the next cycle), every write on the loop.
//!
//! What the poll costs Slurm, at any scale: one squeue a cycle, one controller query
//! (`SlurmCli::poll_query`). One live job alone is named (`--jobs=ID`, a lookup); more
//! are asked for as a listing of every job (`--local --all`, no `--array`, so a pending
//! array is one line whatever its size, its task list whole with `SLURM_BITSTR_LEN=0`),
//! read a line at a time: the lines of a job asked about are kept whole, every other line
//! is dropped as it is read, so memory is what the daemon's own jobs take and no one's
//! jobs can make the answer too big. (Naming thousands of ids made squeue match each job
//! against each id: 0.6 s of its CPU a cycle at 6,000.) While a live job's owner has not
//! been seen, the listing carries the owner (`%U`: REQUEST_JOB_INFO and
//! REQUEST_PARTITION_INFO); once every live job's owner has been seen, the states alone
//! (`--only-job-state`, Slurm 23.11.5 on: one REQUEST_JOB_STATE). A squeue that refuses
//! that option is noted once, one that fails three times in a row too, and the listing
//! kept; a failed state-only query falls back to the listing in the same cycle. When the
//! pipelines need the owners' pending jobs (after a retry's launch, else every ten poll
//! intervals, at most a minute apart), the listing carries `%u` and `%E` too and keeps
//! those pending lines (`squeue_with_pending`; another job's task list cut to 64 bytes as
//! Slurm cuts it, a line past 4 KiB dropped unread), still one query. So at most two
//! controller RPCs a cycle (22.05: always the two; 24.11: one, two on those cycles), and
//! with `[plain_sbatch] admin_comment` one squeue more every ten poll intervals, at most
//! a minute apart, for the job_submit script's marks. `benches/controller.rs` counts them
//! with `sdiag` on the real Slurm; `slurm::cli`'s tests count the calls at 100,000 ids.
//!
//! Then one sacct per `sacct_chunk` (5,000) ids of jobs that left the queue or were seen
//! requeued (slurmdbd filters by id in its query; the controller serves none), each list
//! also cut at 64 KiB; sinfo at most once an hour (`judge`; a partition it does not list
//! is remembered as unknown). What the poll reads of the store each cycle is
//! `Store::live_jobs` (ids, last state, owner), kept while the store is unchanged; the
//! attempts to judge are read whole (`live_attempts_of`). A row whose owner is not the
//! chain's is not acted on, and logged once a job. The daemon's own Slurm commands run
//! without the variables of its environment that would change what they print or whom
//! they ask (`SQUEUE_*`, `SACCT_*`, `SLURM_TIME_FORMAT`, `SLURM_CLUSTERS`, ...: the list
//! is `slurm::cli`'s `own_env`).

use super::{log_transition, Engine, Found};
use crate::domain::policy::{self, Event};
use crate::slurm::jobid::{base_job_id, job_part, runs_by_job};
use crate::slurm::types::{JobState, Queue, SacctRow};
use crate::slurm::{Slurm, SlurmError};
use crate::store::{Attempt, LiveJob, StoreError};
use std::collections::HashSet;
use tracing::{debug, error, warn};

/// The poll's one squeue as a cycle asks it, made on the loop ([`Engine::poll_ask`]):
/// in the daemon it runs beside the loop ([`PollAsk::ask`], through the `Runner`), so
/// requests are answered while squeue runs and its listing is read and folded; what it
/// answered comes back to the loop ([`Engine::poll_landed`]), where the cycle goes on.
pub struct PollAsk {
    t: i64,
    /// The live attempts as the store had them when the cycle asked: the ones this answer
    /// is about, but for the chains in `held`.
    live: std::sync::Arc<[LiveJob]>,
    /// The chains of those that were held then (left out of the question).
    held: HashSet<i64>,
    /// The jobs asked about: the base ids of the others' jobs, sorted.
    bases: Vec<String>,
    how: How,
}

/// Which query the poll makes (see [`Engine::poll_ask`]).
enum How {
    /// The full listing, reading the owners' pending jobs too.
    WithPending(super::pipeline::PendingAsk),
    /// The states alone if Slurm can, else the full listing.
    States,
    /// The full listing, each job with its owner.
    Listing,
}

/// What the poll's squeue answered, for [`Engine::poll_landed`].
pub struct PollAnswer {
    t: i64,
    live: std::sync::Arc<[LiveJob]>,
    held: HashSet<i64>,
    queue: Result<Queue, SlurmError>,
    pending: Option<(super::pipeline::PendingAsk, crate::slurm::PendingAnswer)>,
}

impl PollAnswer {
    /// The time of the cycle that asked.
    pub(super) fn at(&self) -> i64 {
        self.t
    }
}

impl PollAsk {
    /// Runs the query (and, if the state-only one cannot answer, the full listing).
    pub async fn ask<S: Slurm>(self, slurm: &S) -> PollAnswer {
        let PollAsk {
            t,
            live,
            held,
            bases,
            how,
        } = self;
        let mut pending = None;
        let queue = match how {
            How::WithPending(ask) => {
                let answer = slurm.squeue_with_pending(&bases, ask.users()).await;
                match answer {
                    Ok((q, theirs)) => {
                        pending = Some((ask, theirs));
                        Ok(q)
                    }
                    Err(e) => Err(e),
                }
            }
            How::States => match slurm.job_states(&bases).await {
                Ok(Some(q)) => Ok(q),
                other => {
                    // The full listing instead: one that answers keeps the poll going (a
                    // controller or a squeue whose state-only query fails).
                    if let Err(e) = other {
                        warn!("squeue --only-job-state gave no answer ({e}); asking for the full listing");
                    }
                    slurm.poll_queue(&bases).await
                }
            },
            How::Listing => slurm.poll_queue(&bases).await,
        };
        PollAnswer {
            t,
            live,
            held,
            queue,
            pending,
        }
    }
}

impl<S: Slurm> Engine<S> {
    /// What the poll asks Slurm this cycle, `None` when no live attempt is watched.
    pub(super) fn poll_ask(&mut self, t: i64) -> Result<Option<PollAsk>, StoreError> {
        // A held chain's job is its holder's (a cancel's scancel ends it). What every live
        // attempt is read for each cycle is little (`LiveJob`); the attempts to judge are
        // read whole below.
        let all = self.store.live_jobs()?;
        let live = || all.iter().filter(|a| !self.held.contains(a.chain_id));
        if live().next().is_none() {
            return Ok(None);
        }
        let mut bases: Vec<String> = live()
            .filter_map(|a| a.slurm_job_id.as_deref())
            .map(base_job_id)
            .collect();
        bases.sort();
        bases.dedup();
        // One controller query, one squeue, at any scale (one job named, more as a listing
        // of every job filtered as it is read: `SlurmCli::poll_query`). Once
        // Slurm has shown every live attempt's job owned by its chain's owner (a job's
        // owner never changes), the states alone will do: one REQUEST_JOB_STATE (`squeue
        // --only-job-state`, Slurm 23.11.5 on), which carries nothing else. Otherwise (a
        // job not seen yet, or an older Slurm) the full listing, one REQUEST_JOB_INFO,
        // whose `%U` each attempt is checked against.
        // When the owners' pending jobs are to be read this cycle (the waiters' report,
        // a rewiring), the full listing reads them too: still one query.
        let how = match self.pending_ask()? {
            Some(ask) => How::WithPending(ask),
            None if live().all(|a| a.owner_seen) => How::States,
            None => How::Listing,
        };
        let held = all
            .iter()
            .map(|a| a.chain_id)
            .filter(|c| self.held.contains(*c))
            .collect();
        self.poll_asked = true;
        Ok(Some(PollAsk {
            t,
            live: all,
            held,
            bases,
            how,
        }))
    }

    /// The rest of the poll, on the loop, with what its squeue answered: the live
    /// attempts compared with it (those the store still has live, not held, and that the
    /// query was about: a job launched or a chain held meanwhile waits for the next
    /// cycle), every state change in one transaction, sacct for the jobs that left the
    /// queue. Returns false when Slurm did not answer.
    pub(super) async fn poll_landed(&mut self, answer: PollAnswer) -> Result<bool, StoreError> {
        let PollAnswer {
            t,
            live: asked,
            held: held_then,
            queue,
            pending,
        } = answer;
        let queued = match queue {
            Ok(q) => q,
            Err(e) => {
                self.slurm_down("squeue", &e);
                return Ok(false);
            }
        };
        if let Some(pending) = pending {
            self.polled_pending = Some(pending);
        }
        // The store as it is now. Unchanged since the question (the same list), every live
        // attempt but the held ones was asked about; else only those that were live then
        // with the same job (both lists are in key order: `Store::live_jobs`).
        let all = self.store.live_jobs()?;
        let unchanged = std::sync::Arc::ptr_eq(&all, &asked);
        let was_asked = |a: &LiveJob| {
            unchanged
                || asked
                    .binary_search_by_key(&a.key(), LiveJob::key)
                    .is_ok_and(|i| asked[i].slurm_job_id == a.slurm_job_id)
        };
        let live: Vec<&LiveJob> = all
            .iter()
            .filter(|a| !self.held.contains(a.chain_id) && !held_then.contains(&a.chain_id))
            .filter(|a| was_asked(a))
            .collect();
        drop(asked);
        for e in &queued.errors {
            let _span = row_span(e).entered();
            error!(
                "squeue printed a row that cannot be read, ignoring it: {} ({:?})",
                e.message, e.line
            );
        }
        // A job's absence from squeue means something only when squeue's whole answer
        // could be read (see `watch_missing`).
        let mut complete = queued.errors.is_empty();
        let queued_for = |owner: u32, jid: &str| queued.state(owner, jid);
        // Logged once a job: a live attempt's job that Slurm lists as someone else's.
        let mut foreign_seen: Vec<(String, u32, u32)> = Vec::new();
        let mut owned: Vec<(i64, u32, bool)> = Vec::new();
        for a in &live {
            let Some(jid) = a.slurm_job_id.as_deref() else {
                continue;
            };
            match queued_for(a.owner_uid, jid) {
                Some(_) if !a.owner_seen => owned.push((a.chain_id, a.n, true)),
                Some(_) => {}
                // Gone from the queue: should its id ever come back (ids wrap around, a
                // controller starts afresh), its owner is checked again.
                None if a.owner_seen && complete => owned.push((a.chain_id, a.n, false)),
                None => {
                    if let Some(uid) = queued.other_owner(a.owner_uid, jid) {
                        foreign_seen.push((jid.to_string(), a.owner_uid, uid));
                    }
                }
            }
        }
        for (job, owner, uid) in foreign_seen {
            self.foreign_job(&job, owner, uid);
        }

        // The attempts whose jobs left the queue, ended in it, or were requeued: sacct
        // tells how.
        let mut ask: Vec<&LiveJob> = Vec::new();
        let mut seen: Vec<(i64, u32, &'static str)> = Vec::new();
        for a in live {
            let Some(jid) = a.slurm_job_id.as_deref() else {
                continue;
            };
            match queued_for(a.owner_uid, jid) {
                Some(state) if !state.is_terminal() => {
                    let prev = a.last_seen.as_deref().unwrap_or_default();
                    let requeued = is_running_like(prev)
                        && matches!(
                            state,
                            JobState::Pending
                                | JobState::Requeued
                                | JobState::RequeueHold
                                | JobState::RequeueFed
                        );
                    if prev != state.as_str() {
                        seen.push((a.chain_id, a.n, state.as_str()));
                    }
                    if requeued {
                        ask.push(a);
                    }
                }
                _ => ask.push(a),
            }
        }
        // Every state change of the cycle in one transaction.
        self.store.set_last_seen(&seen, &owned)?;
        if ask.is_empty() {
            self.slurm_up();
            return Ok(true);
        }
        let ids: Vec<String> = ask
            .iter()
            .filter_map(|a| a.slurm_job_id.as_deref().map(str::to_string))
            .collect();
        let sa = match self.slurm.sacct(&ids).await {
            Ok(p) => p,
            Err(e) => {
                self.slurm_down("sacct", &e);
                return Ok(false);
            }
        };
        self.slurm_up();
        let bad_jobs: HashSet<String> = sa
            .errors
            .iter()
            .filter_map(|e| e.job_id.as_deref())
            .map(job_part)
            .collect();
        for e in &sa.errors {
            let _span = row_span(e).entered();
            error!("sacct printed a row that cannot be read: {} ({:?}); that job is not judged this cycle", e.message, e.line);
        }
        complete &= sa.errors.is_empty();
        if !complete {
            // An unreadable answer says nothing about which jobs are gone: the lost-job
            // clocks start again from the next complete answer.
            self.missing.clear();
        }
        let runs = runs_by_job(&sa.rows);
        let ask: HashSet<(i64, u32)> = ask.iter().map(|a| (a.chain_id, a.n)).collect();
        for a in self.store.live_attempts_of(&ask)? {
            let jid = a.slurm_job_id.clone().unwrap_or_default();
            if bad_jobs.contains(&jid) {
                continue;
            }
            // The runs Slurm records as the chain's owner's, and no others (a run whose
            // job row names no owner is not taken either).
            let (own, theirs): (Vec<Vec<SacctRow>>, Vec<Vec<SacctRow>>) = runs
                .get(&jid)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .partition(|run| {
                    run.iter().find(|r| !r.is_step()).and_then(|r| r.uid) == Some(a.owner_uid)
                });
            if let Some(uid) = theirs
                .iter()
                .find_map(|run| run.iter().find(|r| !r.is_step()).and_then(|r| r.uid))
            {
                self.foreign_job(&jid, a.owner_uid, uid);
            }
            let job_runs = (!own.is_empty()).then_some(own);
            let still_queued = queued_for(a.owner_uid, &jid).is_some_and(|s| !s.is_terminal());
            let ended = job_runs
                .as_ref()
                .and_then(|r| r.last())
                .and_then(|run| run.iter().find(|r| !r.is_step()))
                .is_some_and(|r| r.state.is_terminal());
            if still_queued || ended {
                self.missing.remove(&(a.chain_id, a.n));
            } else if complete {
                self.watch_missing(&a, t)?;
            }
            let Some(job_runs) = job_runs else {
                let _span = super::attempt_span(a.chain_id, &jid).entered();
                debug!("sacct has no record of the job yet; asking again next cycle");
                continue;
            };
            self.backlog.push_back(Found {
                attempt: a,
                runs: job_runs,
                still_queued,
            });
        }
        Ok(true)
    }

    /// Logs, once per job, that Slurm shows `job` owned by `uid` where the chain that has
    /// it belongs to `owner`.
    fn foreign_job(&mut self, job: &str, owner: u32, uid: u32) {
        if self.foreign.len() < MAX_FOREIGN_LOGGED && self.foreign.insert(job.to_string()) {
            let _span = tracing::error_span!("job", job = %job).entered();
            error!(
                "Slurm shows this job owned by uid {uid}, but the chain that has it is uid {owner}'s: it is not watched for that chain (a job id taken from text its owner wrote, or printed by an sbatch its user changed)"
            );
        }
    }

    /// A live attempt that squeue no longer shows and sacct shows no ending for: after
    /// `lost_job_after` Slurm has lost it (or its accounting), and a person or agent must
    /// look. Nothing is guessed about how it ended.
    fn watch_missing(&mut self, a: &Attempt, t: i64) -> Result<(), StoreError> {
        let since = *self.missing.entry((a.chain_id, a.n)).or_insert(t);
        if t - since < self.config.slurm.lost_job_after.as_secs() as i64 {
            return Ok(());
        }
        let job = a.slurm_job_id.clone().unwrap_or_default();
        let _span = super::attempt_span(a.chain_id, &job).entered();
        let Some(chain) = self.store.chain(a.chain_id)? else {
            return Ok(());
        };
        let event = Event::JobLost {
            job: &job,
            missing_since: since,
            n: a.n,
        };
        let tr = self.decide(&chain, event, &policy::Context::at(t));
        log_transition(&tr);
        self.store.apply_one(a.chain_id, &tr, t)?;
        self.missing.remove(&(a.chain_id, a.n));
        Ok(())
    }
}

/// The span of a line of Slurm's output that cannot be read: its line number, and the job
/// it seems to be about.
fn row_span(e: &crate::slurm::parse::RowError) -> tracing::Span {
    match &e.job_id {
        Some(job) => tracing::error_span!("row", line = e.line_no, job = %job),
        None => tracing::error_span!("row", line = e.line_no),
    }
}

/// At most this many foreign jobs are remembered as logged; past that, new ones are not logged.
const MAX_FOREIGN_LOGGED: usize = 10_000;

fn is_running_like(s: &str) -> bool {
    matches!(
        s,
        "RUNNING"
            | "COMPLETING"
            | "SUSPENDED"
            | "CONFIGURING"
            | "STOPPED"
            | "SIGNALING"
            | "STAGE_OUT"
    )
}
