//! The supervisor's working part: polls Slurm, turns endings into decisions (by calling
//! `classify` and `policy`), and carries them out. Everything here runs on the daemon's
//! one loop, so no two steps ever race on the store.

use super::launch::{self, LaunchOutcome};
use crate::classify::{self, Observation};
use crate::config::Config;
use crate::model::{Action, ChainState};
use crate::policy::{self, ChainHistory, Effect, Event, Transition};
use crate::slurm::jobid::{base_job_id, job_part, queued_states, runs_by_job};
use crate::slurm::types::{JobState, SacctRow};
use crate::slurm::{Slurm, SlurmError};
use crate::store::{Attempt, AttemptEnd, Store, StoreError};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};
use tracing::{debug, error, info, warn};

/// An interrupted launch older than this that cannot be found is escalated, not repeated:
/// a job it created could have ended and left squeue (Slurm's default MinJobAge is 300 s).
const UNCONFIRMED_AFTER_SECS: i64 = 300;
/// Prefixes of a launch's noted error: sbatch certainly did not reach Slurm, or may have.
const UNREACHED: &str = "unreached";
const UNCONFIRMED: &str = "unconfirmed";

/// How long reading a job's stdout/stderr tail may take.
const OUTPUT_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a partition limit read from sinfo is trusted.
const PARTITION_REFRESH: Duration = Duration::from_secs(3600);

/// The longest the poll interval stretches while Slurm is not answering: backing off
/// spares a struggling controller, the cap bounds how late recovery is noticed.
const MAX_OUTAGE_BACKOFF: Duration = Duration::from_secs(120);

pub struct Engine<S: Slurm> {
    config: Config,
    store: Store,
    slurm: S,
    partitions: HashMap<String, Option<u64>>,
    partitions_read: Option<Instant>,
    /// Live attempts missing from squeue without an ending in sacct, and since when.
    missing: HashMap<(i64, u32), i64>,
    /// The Slurm command that is currently failing, so an outage is logged once.
    outage: Option<String>,
    consecutive_failures: u32,
    /// Launches whose sbatch runs beside the loop right now, and for whom (a user's
    /// submit) or not (a retry). Reconciliation leaves them alone: their fate is about to
    /// be known.
    in_flight: HashMap<i64, Option<u32>>,
    /// Whether retries' sbatch runs beside the loop (the daemon) or is awaited in place
    /// (the in-process tests, which drive cycles one by one).
    defer: bool,
    /// Retries ready to take off beside the loop, for the daemon to pick up.
    takeoff: Vec<Flight>,
}

/// Why a scancel on a user's behalf did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ScancelError {
    /// The owner has no account here: nothing is run as root for them.
    #[error("{0}")]
    NoAccount(String),
    #[error(transparent)]
    Slurm(SlurmError),
}

/// A retry whose sbatch runs beside the loop: its intent is recorded; what sbatch
/// answers comes back to `Engine::land`.
#[derive(Debug)]
pub struct Flight {
    pub launch: crate::store::Launch,
    pub sub: crate::store::Submission,
}

/// Retries whose sbatch may run beside the loop at once: enough for a burst, few enough
/// that an outage does not turn into a storm of sbatch calls.
const MAX_RETRY_FLIGHTS: usize = 16;

/// Unix time in seconds.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}


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

impl<S: Slurm> Engine<S> {
    pub fn new(config: Config, store: Store, slurm: S) -> Self {
        Engine {
            config,
            store,
            slurm,
            partitions: HashMap::new(),
            partitions_read: None,
            missing: HashMap::new(),
            outage: None,
            consecutive_failures: 0,
            in_flight: HashMap::new(),
            defer: false,
            takeoff: Vec::new(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A new config (a reload); what must stay until a restart is the caller's to keep.
    pub fn set_config(&mut self, config: Config) {
        self.config = config;
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// The Slurm the engine drives, for running a recorded launch's sbatch beside the
    /// loop (and for tests to look at a fake).
    pub fn slurm(&self) -> &S {
        &self.slurm
    }

    /// Runs the sbatch of a recorded launch in place (a submit handled to completion).
    pub async fn sbatch(
        &self,
        l: &crate::store::Launch,
        sub: &crate::store::Submission,
    ) -> LaunchOutcome {
        launch::sbatch(&self.slurm, &self.config.state_dir, l, sub).await
    }

    /// Records a new submission and the intent of its first launch.
    pub fn begin_submission(
        &mut self,
        new: &crate::store::NewSubmission,
        submitted: &crate::sbatch_args::Submitted,
        t: i64,
    ) -> Result<crate::store::Launch, launch::PrepareError> {
        launch::begin_submission(&mut self.store, &self.config, new, submitted, t)
    }

    /// Cancels `owner`'s `jobs` in Slurm, as the owner.
    pub async fn scancel(&self, owner: u32, jobs: &[String]) -> Result<(), ScancelError> {
        let who = launch::run_as(owner).map_err(ScancelError::NoAccount)?;
        self.slurm
            .scancel(jobs, who.as_ref())
            .await
            .map_err(ScancelError::Slurm)
    }

    /// What `scontrol show job` says of a job (for `adopt`).
    pub async fn show_job(
        &self,
        id: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, SlurmError> {
        self.slurm.show_job(id).await
    }

    /// A job's batch script (for `adopt`).
    pub async fn batch_script(&self, id: &str) -> Result<Vec<u8>, SlurmError> {
        self.slurm.batch_script(id).await
    }

    /// Retries' sbatch runs beside the loop from now on: `run_launch` records the intent
    /// and leaves the launch in `take_flights` for the caller to run and `land`.
    pub fn defer_launches(&mut self) {
        self.defer = true;
    }

    /// The retries waiting to take off.
    pub fn take_flights(&mut self) -> Vec<Flight> {
        std::mem::take(&mut self.takeoff)
    }

    /// How many of `uid`'s submits are waiting for their sbatch.
    pub fn submits_in_flight(&self, uid: u32) -> usize {
        self.in_flight.values().filter(|&&u| u == Some(uid)).count()
    }

    /// Marks a user's submit as running beside the loop.
    pub fn start_flight(&mut self, launch_id: i64, uid: u32) {
        self.in_flight.insert(launch_id, Some(uid));
    }

    /// A launch's sbatch beside the loop has answered.
    pub fn end_flight(&mut self, launch_id: i64) {
        self.in_flight.remove(&launch_id);
    }

    fn retry_flights(&self) -> usize {
        self.in_flight.values().filter(|u| u.is_none()).count()
    }

    /// Records what a retry's sbatch beside the loop answered, as `run_launch` would have.
    pub fn land(&mut self, f: &Flight, outcome: LaunchOutcome) -> Result<(), StoreError> {
        self.end_flight(f.launch.id);
        let t = now();
        self.record_launch(&f.launch, &outcome, t, false)?;
        if let LaunchOutcome::Refused { code, stderr } = outcome {
            self.launch_refused(&f.launch, code, &stderr, t)?;
        }
        Ok(())
    }

    /// The poll interval to wait now: longer while Slurm is not answering.
    pub fn next_interval(&self) -> Duration {
        let base = self.config.poll_interval;
        if self.consecutive_failures == 0 {
            return base;
        }
        let factor = 1u32 << self.consecutive_failures.min(2);
        (base * factor).min(MAX_OUTAGE_BACKOFF.max(base))
    }

    /// Notes that a Slurm command failed; logs once per outage.
    pub fn slurm_down(&mut self, what: &str, e: &SlurmError) {
        self.consecutive_failures += 1;
        if self.outage.is_none() {
            warn!("slurm is not answering ({what}): {e}; nothing is decided until it does, polling backs off");
            self.outage = Some(what.to_string());
        } else {
            debug!("still no answer from slurm ({what}): {e}");
        }
    }

    fn slurm_up(&mut self) {
        if let Some(what) = self.outage.take() {
            info!("slurm answers again ({what} works); resuming");
        }
        self.consecutive_failures = 0;
    }

    /// One full cycle: finish interrupted launches, watch live jobs, launch due retries.
    pub async fn cycle(&mut self) -> Result<(), StoreError> {
        let t = now();
        if !self.reconcile_launches(t).await? {
            return Ok(());
        }
        if !self.poll(t).await? {
            return Ok(());
        }
        self.launch_due(t).await?;
        Ok(())
    }

    async fn partition_max(&mut self, partition: &str) -> Option<u64> {
        let stale = self
            .partitions_read
            .is_none_or(|t| t.elapsed() > PARTITION_REFRESH);
        if stale || !self.partitions.contains_key(partition) {
            match self.slurm.partition_limits().await {
                Ok(p) => {
                    self.partitions = p;
                    self.partitions_read = Some(Instant::now());
                }
                Err(e) => warn!("cannot read partition limits (sinfo): {e}; time escalation uses the config cap only"),
            }
        }
        self.partitions.get(partition).copied().flatten()
    }

    /// Resolves launches left in `intent` (the daemon died around sbatch, or sbatch's
    /// answer was lost) by looking their tags up in Slurm. Found: adopted. Not found in
    /// a successful lookup: submitted again, with the same tag. Returns false when Slurm
    /// did not answer.
    pub async fn reconcile_launches(&mut self, t: i64) -> Result<bool, StoreError> {
        let mut open = self.store.open_launches()?;
        open.retain(|l| !self.in_flight.contains_key(&l.id));
        if open.is_empty() {
            return Ok(true);
        }
        let mut by_user: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for l in open {
            let sub = self.store.submission(l.submission_id)?;
            by_user.entry(sub.user.clone()).or_default().push((l, sub));
        }
        for (user, launches) in by_user {
            let since = launches
                .iter()
                .map(|(l, _)| l.created_at)
                .min()
                .unwrap_or(t)
                - 600;
            // One user's lookup failing holds up only that user's launches: their chains
            // keep their open launch, which `launch_due` respects.
            let found = match launch::find_tags(&self.slurm, &user, since).await {
                Ok(f) => f,
                Err(e) => {
                    self.slurm_down("tag lookup", &e);
                    continue;
                }
            };
            for (l, sub) in launches {
                if let Some(job) = found.get(&l.tag) {
                    info!(tag = %l.tag, job = %job, "found the job of an interrupted launch in slurm; adopting it, not submitting again");
                    self.store.launch_submitted(l.id, job, t)?;
                    continue;
                }
                // A first submission whose client was never told it would be submitted
                // (the daemon stopped, or the answer was a failure) is not submitted now:
                // the user may already have submitted it again.
                if l.unpromised {
                    info!(tag = %l.tag, "an interrupted first submission is not in slurm; its client was not told it would be submitted, so it is dropped");
                    self.store.discard_submission(l.id)?;
                    continue;
                }
                // A job that may exist but is not found any more could have finished and
                // left squeue (and sacct may not keep comments): submitting again could
                // duplicate it, so a person or agent decides.
                let unreached = l.error.as_deref().is_some_and(|e| e.starts_with(UNREACHED));
                if !unreached && t - l.created_at > UNCONFIRMED_AFTER_SECS {
                    let event = Event::LaunchUnconfirmed {
                        tag: &l.tag,
                        last_error: l.error.as_deref(),
                        argv: &l.argv,
                    };
                    self.escalate_launch(&l, "unconfirmed", event, t)?;
                    continue;
                }
                if self.defer && self.retry_flights() >= MAX_RETRY_FLIGHTS {
                    continue;
                }
                info!(tag = %l.tag, "an interrupted launch is not in slurm; submitting it now");
                match self.run_launch(&l, &sub, t).await? {
                    None | Some(LaunchOutcome::Submitted(_) | LaunchOutcome::Unknown(_)) => {}
                    // Left as an intent, it would be tried again every cycle.
                    Some(LaunchOutcome::Refused { code, stderr }) => {
                        self.launch_refused(&l, code, &stderr, t)?
                    }
                }
            }
        }
        Ok(true)
    }

    /// Runs the sbatch of a recorded launch and records what happened; or, when launches
    /// are deferred, leaves it to take off beside the loop (`None`).
    pub async fn run_launch(
        &mut self,
        l: &crate::store::Launch,
        sub: &crate::store::Submission,
        t: i64,
    ) -> Result<Option<LaunchOutcome>, StoreError> {
        if self.defer {
            self.in_flight.insert(l.id, None);
            self.takeoff.push(Flight {
                launch: l.clone(),
                sub: sub.clone(),
            });
            return Ok(None);
        }
        let outcome = launch::sbatch(&self.slurm, &self.config.state_dir, l, sub).await;
        self.record_launch(l, &outcome, t, false)?;
        Ok(Some(outcome))
    }

    /// Records what an sbatch answered: a job, or no clear answer (the launch stays an
    /// intent; `promise` makes an unpromised first submission one to finish later). A
    /// refusal is for the caller to record.
    pub fn record_launch(
        &mut self,
        l: &crate::store::Launch,
        outcome: &LaunchOutcome,
        t: i64,
        promise: bool,
    ) -> Result<(), StoreError> {
        match outcome {
            LaunchOutcome::Submitted(job) => {
                crate::failpoint::hit("after-sbatch");
                self.store.launch_submitted(l.id, job, t)?;
                info!(job = %job, tag = %l.tag, "submitted");
            }
            LaunchOutcome::Unknown(e) => {
                self.slurm_down("sbatch", e);
                let kind = if e.may_have_reached_slurm() {
                    UNCONFIRMED
                } else {
                    UNREACHED
                };
                self.store
                    .note_launch_error(l.id, &format!("{kind}: {e}"), promise)?;
            }
            LaunchOutcome::Refused { .. } => {}
        }
        Ok(())
    }

    /// Watches every live attempt: one squeue for all, sacct for those that left the
    /// queue or were requeued. Returns false when Slurm did not answer.
    pub async fn poll(&mut self, t: i64) -> Result<bool, StoreError> {
        let live = self.store.live_attempts()?;
        if live.is_empty() {
            return Ok(true);
        }
        let mut bases: Vec<String> = live
            .iter()
            .filter_map(|a| a.slurm_job_id.as_deref())
            .map(base_job_id)
            .collect();
        bases.sort();
        bases.dedup();
        let sq = match self.slurm.squeue(&bases).await {
            Ok(p) => p,
            Err(e) => {
                self.slurm_down("squeue", &e);
                return Ok(false);
            }
        };
        for e in &sq.errors {
            error!(line = e.line_no, job = ?e.job_id, "squeue printed a row that cannot be read, ignoring it: {} ({:?})", e.message, e.line);
        }
        // A job's absence from squeue means something only when squeue's whole answer
        // could be read (see `watch_missing`).
        let mut complete = sq.errors.is_empty();
        let queued = queued_states(&sq.rows);

        let mut ask: Vec<(Attempt, bool)> = Vec::new();
        for a in live {
            let Some(jid) = a.slurm_job_id.clone() else {
                continue;
            };
            match queued.get(jid.as_str()) {
                Some(state) if !state.is_terminal() => {
                    let prev = a.last_seen.clone().unwrap_or_default();
                    let requeued = is_running_like(&prev)
                        && matches!(
                            state,
                            JobState::Pending
                                | JobState::Requeued
                                | JobState::RequeueHold
                                | JobState::RequeueFed
                        );
                    if prev != state.as_str() {
                        self.store.set_last_seen(a.chain_id, a.n, state.as_str())?;
                    }
                    if requeued {
                        ask.push((a, true));
                    }
                }
                _ => ask.push((a, false)),
            }
        }
        if ask.is_empty() {
            self.slurm_up();
            return Ok(true);
        }
        let ids: Vec<String> = ask
            .iter()
            .filter_map(|(a, _)| a.slurm_job_id.clone())
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
            error!(line = e.line_no, job = ?e.job_id, "sacct printed a row that cannot be read: {} ({:?}); that job is not judged this cycle", e.message, e.line);
        }
        complete &= sa.errors.is_empty();
        if !complete {
            // An unreadable answer says nothing about which jobs are gone: the lost-job
            // clocks start again from the next complete answer.
            self.missing.clear();
        }
        let runs = runs_by_job(&sa.rows);
        for (a, _requeue_suspected) in ask {
            let jid = a.slurm_job_id.clone().unwrap_or_default();
            if bad_jobs.contains(&jid) {
                continue;
            }
            let still_queued = queued.get(jid.as_str()).is_some_and(|s| !s.is_terminal());
            let ended = runs
                .get(&jid)
                .and_then(|r| r.last())
                .and_then(|run| run.iter().find(|r| !r.is_step()))
                .is_some_and(|r| r.state.is_terminal());
            if still_queued || ended {
                self.missing.remove(&(a.chain_id, a.n));
            } else if complete {
                self.watch_missing(&a, t)?;
            }
            let Some(job_runs) = runs.get(&jid) else {
                debug!(job = %jid, "sacct has no record of the job yet; asking again next cycle");
                continue;
            };
            self.judge(&a, job_runs, still_queued, t).await?;
        }
        Ok(true)
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
        let Some(chain) = self.store.chain(a.chain_id)? else {
            return Ok(());
        };
        let event = Event::JobLost {
            job: &job,
            missing_since: since,
        };
        let tr = self.decide(&chain, event, &policy::Context::at(t));
        log_transition(a.chain_id, &job, &tr);
        self.store.attempt_lost(a.chain_id, a.n, &tr, t)?;
        self.missing.remove(&(a.chain_id, a.n));
        Ok(())
    }

    /// Records the requeues and the ending (if any) that the runs of one attempt show.
    async fn judge(
        &mut self,
        a: &Attempt,
        runs: &[Vec<SacctRow>],
        still_queued: bool,
        t: i64,
    ) -> Result<(), StoreError> {
        let jid = a.slurm_job_id.clone().unwrap_or_default();
        // After Slurm's job ids wrap around (or its state is reset), an old job with the
        // same id is in sacct too: when some runs carry this attempt's tag, only those are
        // ours. (None carry it when the cluster keeps no comments, or the job was adopted.)
        let tagged = |run: &&Vec<SacctRow>| {
            run.iter()
                .any(|r| !r.is_step() && r.comment.contains(&a.tag))
        };
        let ours: Vec<Vec<SacctRow>> = if runs.iter().any(|r| tagged(&r)) {
            runs.iter().filter(tagged).cloned().collect()
        } else {
            runs.to_vec()
        };
        let runs = ours.as_slice();
        // Every run before the last one ended and was requeued by Slurm itself.
        let requeued_runs = runs.len().saturating_sub(1);
        for run in runs.iter().take(requeued_runs).skip(a.restarts as usize) {
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
            let tr = self.decide(
                &chain,
                Event::Requeued { verdict: &v },
                &policy::Context::at(t),
            );
            let Some(rec) = &tr.record else { continue };
            log_transition(a.chain_id, &jid, &tr);
            self.store.record_requeue(
                a.chain_id,
                a.n,
                &serde_json::to_value(&obs).unwrap_or_default(),
                rec,
                t,
            )?;
        }
        let last = runs.last().expect("runs are never empty");
        let job_row_state = last.iter().find(|r| !r.is_step()).map(|r| r.state);
        if still_queued || !job_row_state.is_some_and(JobState::is_terminal) {
            return Ok(());
        }
        let chain = self
            .store
            .chain(a.chain_id)?
            .expect("an attempt's chain exists");
        let sub = self.store.submission(chain.submission_id)?;
        // Reading the job's files can block (a hung network filesystem): off the loop,
        // with a deadline; past it the ending is judged without them.
        let max_retries = sub.max_retries;
        let (config, run, job) = (self.config.clone(), last.clone(), jid.clone());
        let read = tokio::task::spawn_blocking(move || {
            super::evidence::output_tails(&config, &sub, &job, &run)
        });
        let (stderr_tail, stdout_tail) = match tokio::time::timeout(OUTPUT_READ_TIMEOUT, read).await
        {
            Ok(Ok(tails)) => tails,
            _ => {
                warn!(job = %jid, "the job's output files could not be read in time; judging without them");
                (None, None)
            }
        };
        let obs = Observation {
            job_id: jid.clone(),
            rows: last.clone(),
            stderr_tail,
            stdout_tail,
            requeued_by_slurm: false,
        };
        self.record_ending(a, obs, max_retries, t).await
    }

    async fn record_ending(
        &mut self,
        a: &Attempt,
        obs: Observation,
        max_retries: u32,
        t: i64,
    ) -> Result<(), StoreError> {
        let jid = obs.job_id.clone();
        let v = match classify::classify(&obs, &self.config.rules) {
            Ok(v) => v,
            Err(e) => {
                warn!(job = %jid, "cannot classify: {e}");
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
            max_retries,
            plan: a.plan.clone(),
            agent_retry_of: self
                .store
                .last_decision(a.chain_id)?
                .filter(|d| d.actor != "supervisor" && d.action == Action::Resubmit)
                .map(|d| d.classification),
        };
        let ctx = policy::Context {
            partition_max_secs: self.partition_max(&v.partition).await,
            quarantined: policy::quarantined(
                &self.store.node_failures_since(
                    t - self.config.quarantine.window.0.as_secs() as i64
                        - self.config.quarantine.duration.0.as_secs() as i64,
                )?,
                &self.config,
                t,
            ),
            recent_infra_failures: self
                .store
                .infra_failures_since(t - self.config.breaker.window.0.as_secs() as i64)?,
            now: t,
            jitter: rand::random::<f64>() * 2.0 - 1.0,
        };
        let Some(chain) = self.store.chain(a.chain_id)? else {
            return Ok(());
        };
        let event = Event::Ended {
            verdict: &v,
            history: &history,
        };
        let tr = self.decide(&chain, event, &ctx);
        let job_row = obs.rows.iter().find(|r| !r.is_step());
        let end = AttemptEnd {
            slurm_state: job_row.map(|r| r.state.to_string()).unwrap_or_default(),
            exit_code: v.exit_code.clone(),
            nodes: v.nodes.clone(),
            mem: v.req_mem_bytes.map(|b| format!("{}M", b.div_ceil(1 << 20))),
            time_limit: v.timelimit_secs.map(crate::slurm::parse::format_time_limit),
        };
        let tr = self.with_dependents(a.chain_id, tr)?;
        log_transition(a.chain_id, &jid, &tr);
        self.store.record_ending(
            a.chain_id,
            a.n,
            &serde_json::to_value(&obs).unwrap_or_default(),
            &end,
            &tr,
            t,
        )
    }

    /// What `event` means for `chain`. Events the loop sees always apply; a refusal
    /// (which only requests can meet) is a bug, and leaves the chain as it is.
    fn decide(
        &self,
        chain: &crate::model::Chain,
        event: Event,
        ctx: &policy::Context,
    ) -> Transition {
        policy::transition(chain, event, &self.config, ctx).unwrap_or_else(|r| {
            error!(
                chain = chain.id,
                "an event the loop saw does not apply to the chain ({r}); leaving it as it is"
            );
            Transition {
                from: chain.state,
                update: policy::ChainUpdate {
                    state: chain.state,
                    last_classification: None,
                    plan: None,
                    not_before: chain.not_before,
                },
                record: None,
                effects: Vec::new(),
            }
        })
    }

    /// Carries out [`Effect::ListDependents`]: the supervised chains whose `--dependency`
    /// waits on a chain that failed for good will never start; they are named in its
    /// record and in the log.
    pub fn with_dependents(
        &self,
        chain_id: i64,
        mut tr: Transition,
    ) -> Result<Transition, StoreError> {
        if tr.effects.contains(&Effect::ListDependents) {
            let deps: Vec<String> = super::dependents::of(&self.store, chain_id)?
                .into_iter()
                .map(crate::store::chain_label)
                .collect();
            if !deps.is_empty() {
                warn!(chain = chain_id, dependents = ?deps, "failed for good; supervised jobs that depend on it will not start");
            }
            tr.set_dependents(deps);
        }
        Ok(tr)
    }

    /// Launches due retries outside a poll cycle (after a resolution): interrupted
    /// launches are settled first, so a chain never gets a second launch beside one whose
    /// fate is still unknown.
    pub async fn launch_ready(&mut self, t: i64) -> Result<(), StoreError> {
        if self.reconcile_launches(t).await? {
            self.launch_due(t).await?;
        }
        Ok(())
    }

    /// Launches the retries whose backoff has passed. Ready siblings of one array
    /// submission with the same resources go together in one sbatch (`--array=<list>`).
    async fn launch_due(&mut self, t: i64) -> Result<(), StoreError> {
        // A submission with a launch still unsettled gets no second one beside it.
        let unsettled: HashSet<i64> = self
            .store
            .open_launches()?
            .iter()
            .map(|l| l.submission_id)
            .collect();
        let ready: Vec<_> = self
            .store
            .chains_in_state(ChainState::Ready)?
            .into_iter()
            .filter(|c| !unsettled.contains(&c.submission_id))
            .collect();
        let due_subs: HashSet<i64> = ready
            .iter()
            .filter(|c| c.not_before.unwrap_or(0) <= t)
            .map(|c| c.submission_id)
            .collect();
        let mut groups: BTreeMap<(i64, String), Vec<i64>> = BTreeMap::new();
        for c in ready.iter().filter(|c| due_subs.contains(&c.submission_id)) {
            let key = (
                c.submission_id,
                serde_json::to_string(&c.plan).unwrap_or_default(),
            );
            groups.entry(key).or_default().push(c.id);
        }
        for ((sub_id, _), chains) in groups {
            if self.defer && self.retry_flights() >= MAX_RETRY_FLIGHTS {
                // The rest stay ready for the next cycle.
                break;
            }
            let sub = self.store.submission(sub_id)?;
            let l = match launch::begin_relaunch(&mut self.store, &self.config, &sub, &chains, t) {
                Ok(l) => l,
                Err(launch::PrepareError::Store(e)) => return Err(e),
                Err(e) => {
                    error!(submission = sub_id, "cannot prepare the retry: {e}");
                    self.escalate(&chains, &e.to_string(), t)?;
                    continue;
                }
            };
            crate::failpoint::hit("after-intent");
            match self.run_launch(&l, &sub, t).await? {
                None | Some(LaunchOutcome::Submitted(_)) => {}
                Some(LaunchOutcome::Unknown(_)) => return Ok(()),
                Some(LaunchOutcome::Refused { code, stderr }) => {
                    self.launch_refused(&l, code, &stderr, t)?;
                }
            }
        }
        Ok(())
    }

    /// sbatch refused a launch for good: its attempts are marked not submitted and their
    /// chains wait in `pending_failed`, with sbatch's answer as the evidence.
    fn launch_refused(
        &mut self,
        l: &crate::store::Launch,
        code: i32,
        stderr: &str,
        t: i64,
    ) -> Result<(), StoreError> {
        let event = Event::RetryRefused {
            code,
            stderr,
            argv: &l.argv,
        };
        self.escalate_launch(l, stderr, event, t)
    }

    /// Ends a launch that will not run (`error` is noted on it) and gives each of its
    /// chains the transition of `event`, in one transaction.
    fn escalate_launch(
        &mut self,
        l: &crate::store::Launch,
        error: &str,
        event: Event,
        t: i64,
    ) -> Result<(), StoreError> {
        let ctx = policy::Context::at(t);
        let config = &self.config;
        self.store.relaunch_refused(l.id, error, t, |chain| {
            let tr = policy::transition(chain, event, config, &ctx)
                .expect("an escalation applies to any chain");
            log_transition(chain.id, &l.tag, &tr);
            tr
        })
    }

    /// Retries that could not be prepared: their chains (still `ready`) wait for an
    /// agent, all in one transaction.
    fn escalate(&mut self, chains: &[i64], error: &str, t: i64) -> Result<(), StoreError> {
        let ctx = policy::Context::at(t);
        let mut items = Vec::new();
        for &c in chains {
            let Some(chain) = self.store.chain(c)? else {
                continue;
            };
            if chain.state != ChainState::Ready {
                continue;
            }
            let tr = self.decide(&chain, Event::RetryUnprepared { error }, &ctx);
            log_transition(c, "", &tr);
            items.push((c, tr));
        }
        self.store.decide_chains(&items, t)?;
        Ok(())
    }
}

/// One log line for a decision: what was decided about which chain, and why.
fn log_transition(chain: i64, job: &str, tr: &Transition) {
    match &tr.record {
        Some(r) if r.class == crate::model::RecoveryClass::R1 => {
            info!(chain, job = %job, class = %r.class, action = %r.action, "{}", r.reason)
        }
        Some(r) => {
            warn!(chain, job = %job, class = %r.class, action = %r.action, "{}", r.reason)
        }
        None => info!(chain, job = %job, "completed"),
    }
}
