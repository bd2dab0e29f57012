//! The supervisor's working part: it gathers facts from Slurm and the store, asks
//! `classify` and `policy::transition` what they mean, and carries the transitions out.
//! Everything here runs on the daemon's one loop, so no two steps ever race on the store.
//!
//! A cycle ([`Engine::cycle`]) runs its phases, one file each, in this order: `age`
//! reminds of and expires chains left in `pending_failed` (no Slurm); `reconcile` settles
//! launches whose sbatch answer was lost (by their tags); `poll` watches live jobs (one
//! squeue, sacct for the ones that left the queue) and hands endings to `judge`, which
//! classifies and records them; `pipeline` rewires and reports the jobs that wait on
//! chains and settles their gates; `launch` starts the retries that are due (beside the
//! loop in the daemon, as *flights*: [`RetryFlight`], [`Engine::take_flights`],
//! [`Engine::land`]; in place with `[retry] in_place`: `requeue`) and records what sbatch
//! answered. In cluster mode the daemon runs `sweep` (held jobs with this store's tag)
//! after a cycle, when due (the first cycle of each tenure, then once a lease). `held`
//! keeps the chains a request holds out of every phase. While Slurm does not answer,
//! cycles back off and the outage is logged once.
//!
//! The engine's fields are private: it holds the daemon's store, config and `Slurm` (in
//! cluster mode `daemon::cluster::Guarded`), and is the daemon's one way to Slurm. The
//! parts outside the cycle (the requests, notification delivery, the agent, plain sbatch,
//! the loop itself) get a struct each that names what they may touch, borrowed from its
//! fields (`contexts`); its Slurm only as a [`Runner`] of the commands beside the loop,
//! run as the users they are for, and the [`Lookup`]s adoption makes (`runner`).

mod age;
mod contexts;
mod held;
mod judge;
mod launch;
mod pipeline;
mod poll;
mod reconcile;
mod requeue;
mod runner;
mod sweep;

pub use contexts::{AgentView, Desk, Flights, Holds, Post, Upkeep};
pub use poll::{PollAnswer, PollAsk};
pub use runner::{Lookup, Runner};

use crate::config::Config;
use crate::domain::policy::{self, Effect, Event, Transition};
use crate::plumbing::clock::now;
use crate::slurm::{Slurm, SlurmError};
use crate::store::{Store, StoreError};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use tracing::{debug, error, info, warn};

/// Prefixes of a launch's noted error: sbatch certainly did not reach Slurm, or may have.
const UNREACHED: &str = "unreached";
const UNCONFIRMED: &str = "unconfirmed";

/// The longest the poll interval stretches while Slurm is not answering: backing off
/// spares a struggling controller, the cap bounds how late recovery is noticed.
const MAX_OUTAGE_BACKOFF: Duration = Duration::from_secs(120);

pub struct Engine<S: Slurm> {
    config: Config,
    store: Store,
    slurm: S,
    partitions: HashMap<String, Option<u64>>,
    /// Users' own rules (docs/rules.md) as the classifier takes them, by the record of
    /// their acceptance (never edited): compiled once, not every batch (`judge.rs`).
    own_rules: HashMap<i64, Option<crate::config::Rule>>,
    partitions_read: Option<Instant>,
    /// Live attempts missing from squeue without an ending in sacct, and since when.
    missing: HashMap<(i64, u32), i64>,
    /// Jobs Slurm shows owned by someone else than the chain that has them, already
    /// logged (`poll`): each is logged once.
    foreign: HashSet<String>,
    /// Whether Slurm is answering.
    outage: Outage,
    /// Launches whose sbatch runs beside the loop right now (a user's submit, a retry).
    in_flight: Flights,
    /// Chains a request holds while its Slurm command runs beside the loop (a cancel's
    /// scancel): the cycle leaves them alone meanwhile (see `held`).
    held: held::Held,
    /// Whether retries' sbatch runs beside the loop (the daemon) or is awaited in place
    /// (the in-process tests, which drive cycles one by one).
    defer: bool,
    /// Retries ready to take off beside the loop, for the daemon to pick up.
    takeoff: Vec<RetryFlight>,
    /// Endings the last poll found and that are not judged yet (a burst is judged in
    /// batches, the loop answering requests in between). Lost with the process, found
    /// again by the next poll.
    backlog: std::collections::VecDeque<Found>,
    /// When the owners' pending jobs were last looked through for plain-sbatch
    /// afterany/afternotok jobs (`pipeline::watch_pending`).
    waiters_seen: Option<Instant>,
    /// The last pending row the report looked at when its budget ran out: the next look
    /// starts after it (`pipeline::report_plain_waiters`).
    waiters_after: Option<(u64, String)>,
    /// What `pipeline::watch_pending` asks this cycle and the answer, read by this
    /// cycle's poll in its one squeue.
    polled_pending: Option<(pipeline::PendingAsk, crate::slurm::PendingAnswer)>,
    /// Whether this cycle's poll asked Slurm (its one squeue): then the pipelines take
    /// what it read of pending jobs, or wait for the next cycle's, never asking again.
    poll_asked: bool,
    /// Each user's rate of requests that change something (`[limits]
    /// write_requests_per_minute`).
    write_rate: crate::daemon::rate::WriteRate,
    /// Endings whose progress path did not answer in time, by attempt (chain, number),
    /// and how many polls in a row: judged at a later poll, at most
    /// `judge::PROGRESS_DEFERRALS` times.
    progress_deferred: HashMap<(i64, u32), u32>,
}

/// A live attempt sacct has runs for: maybe requeued, maybe ended.
#[derive(Debug)]
struct Found {
    attempt: crate::store::Attempt,
    runs: Vec<Vec<crate::slurm::types::SacctRow>>,
    still_queued: bool,
}

/// A retry whose sbatch runs beside the loop: its intent is recorded; what sbatch
/// answers comes back to `Engine::land`.
#[derive(Debug)]
pub struct RetryFlight {
    pub launch: crate::store::Launch,
    pub sub: crate::store::Submission,
}

/// Retries whose sbatch may run beside the loop at once: enough for a burst, few enough
/// that an outage does not turn into a storm of sbatch calls.
const MAX_RETRY_FLIGHTS: usize = 16;

/// Of those, one user's at most: a user whose sbatch starts are held (a folder that does
/// not answer; each waits for the one before, up to 10 s) cannot take every place and
/// hold back everyone else's retries.
const MAX_RETRY_FLIGHTS_PER_USER: usize = 4;

impl<S: Slurm> Engine<S> {
    pub fn new(config: Config, store: Store, slurm: S) -> Self {
        Engine {
            store,
            slurm,
            partitions: HashMap::new(),
            own_rules: HashMap::new(),
            partitions_read: None,
            missing: HashMap::new(),
            foreign: HashSet::new(),
            outage: Outage::default(),
            in_flight: Flights::default(),
            held: held::Held::default(),
            defer: false,
            takeoff: Vec::new(),
            backlog: Default::default(),
            waiters_seen: None,
            waiters_after: None,
            polled_pending: None,
            poll_asked: false,
            progress_deferred: HashMap::new(),
            write_rate: crate::daemon::rate::WriteRate::new(
                config.limits.write_requests_per_minute,
            ),
            config,
        }
    }

    /// The config, for tests to look at (the daemon's parts get theirs in their
    /// contexts: [`Desk`], [`Post`], [`AgentView`], [`Upkeep`]).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A new config (a reload); what must stay until a restart is the caller's to keep.
    pub fn set_config(&mut self, config: Config) {
        self.config = config;
    }

    /// The store, for tests to look at.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store, for tests to set up.
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// The Slurm the engine drives, for tests to look at a fake (the daemon's parts run
    /// Slurm's commands through a [`Runner`] or a [`Lookup`]).
    pub fn slurm(&self) -> &S {
        &self.slurm
    }

    /// Retries' sbatch runs beside the loop from now on: `run_launch` records the intent
    /// and leaves the launch in `take_flights` for the caller to run and `land`.
    pub fn defer_launches(&mut self) {
        self.defer = true;
    }

    /// The retries waiting to take off.
    pub fn take_flights(&mut self) -> Vec<RetryFlight> {
        std::mem::take(&mut self.takeoff)
    }

    /// Whether a retry of `uid`'s may take off beside the loop now (always, when retries
    /// are awaited in place).
    pub(super) fn retry_room(&self, uid: u32) -> bool {
        !self.defer
            || (self.in_flight.retries(None) < MAX_RETRY_FLIGHTS
                && self.in_flight.retries(Some(uid)) < MAX_RETRY_FLIGHTS_PER_USER)
    }

    /// The poll interval to wait now: longer while Slurm is not answering.
    pub fn next_interval(&self) -> Duration {
        if self.has_backlog() {
            return Duration::ZERO;
        }
        let base = self.config.poll_interval;
        if self.outage.failures == 0 {
            return base;
        }
        let factor = 1u32 << self.outage.failures.min(2);
        (base * factor).min(MAX_OUTAGE_BACKOFF.max(base))
    }

    /// Notes that a Slurm command failed; logs once per outage (see [`Outage::down`]).
    fn slurm_down(&mut self, what: &str, e: &SlurmError) {
        self.outage.down(what, e);
    }

    /// Whether Slurm answered: false from a command that Slurm did not answer until one
    /// that it does (the outage `slurm_down` logs), so a cycle that ends with it false
    /// decided nothing Slurm would have told it.
    pub fn slurm_answering(&self) -> bool {
        self.outage.failing.is_none()
    }

    fn slurm_up(&mut self) {
        self.outage.up();
    }

    /// One full cycle: finish interrupted launches, watch live jobs, launch due retries.
    /// A burst of endings bigger than one batch is judged over several turns: while a
    /// backlog remains, a turn only judges the next batch (no Slurm command), and the
    /// loop comes back at once after answering what waits for it.
    pub async fn cycle(&mut self) -> Result<(), StoreError> {
        if let Some(ask) = self.cycle_to_poll().await? {
            let answer = ask.ask(&self.slurm).await;
            self.cycle_from_poll(answer).await?;
        }
        Ok(())
    }

    /// A cycle up to its poll's squeue: the question to ask Slurm (beside the loop, in
    /// the daemon: [`Runner::poll`]), then [`Engine::cycle_from_poll`] with its answer;
    /// `None` when the cycle is over already (a turn of a backlog, Slurm not answering,
    /// nothing live).
    pub async fn cycle_to_poll(&mut self) -> Result<Option<PollAsk>, StoreError> {
        let t = now();
        // What an earlier cycle's poll read of pending jobs is not this cycle's.
        self.polled_pending = None;
        self.poll_asked = false;
        self.age_pending(t)?;
        if self.has_backlog() {
            self.judge_backlog(t).await?;
            return Ok(None);
        }
        if !self.reconcile_launches(t).await? {
            return Ok(None);
        }
        match self.poll_ask(t)? {
            Some(ask) => Ok(Some(ask)),
            None => {
                self.after_poll(t).await?;
                Ok(None)
            }
        }
    }

    /// The rest of a cycle, on the loop, with what its poll's squeue answered: the
    /// poll's comparison and writes, then judging, the pipelines and due launches.
    pub async fn cycle_from_poll(&mut self, answer: PollAnswer) -> Result<(), StoreError> {
        let t = answer.at();
        if !self.poll_landed(answer).await? {
            return Ok(());
        }
        self.after_poll(t).await
    }

    /// A cycle's phases after the poll.
    async fn after_poll(&mut self, t: i64) -> Result<(), StoreError> {
        self.judge_backlog(t).await?;
        if self.has_backlog() {
            return Ok(());
        }
        if !self.watch_pending(t).await? || !self.settle_gates(t).await? {
            return Ok(());
        }
        self.launch_due(t).await?;
        Ok(())
    }

    /// What `event` means for `chain`. Events the loop sees always apply; a refusal
    /// (which only requests can meet) is a bug, and leaves the chain as it is.
    fn decide(
        &self,
        chain: &crate::domain::model::Chain,
        event: Event,
        ctx: &policy::Context,
    ) -> Transition {
        policy::transition(chain, event, &self.config, ctx).unwrap_or_else(|r| {
            error!("an event the loop saw does not apply to the chain ({r}); leaving it as it is");
            // What the event did to its attempt is recorded all the same, so the attempt
            // is not judged again every cycle.
            Transition {
                attempt: event.attempt_change(),
                ..Transition::none(chain)
            }
        })
    }

    /// [`with_dependents`] from the engine's store.
    fn with_dependents(&self, chain_id: i64, tr: Transition) -> Result<Transition, StoreError> {
        with_dependents(&self.store, chain_id, tr)
    }
}

/// Whether Slurm is answering: the Slurm command that is currently failing, so an outage
/// is logged once, and how many failed in a row (the poll interval stretches with them).
#[derive(Debug, Default)]
struct Outage {
    failing: Option<String>,
    failures: u32,
}

impl Outage {
    /// Notes that a Slurm command failed; logs once per outage. A command a user held
    /// before it started (run as them: their folder, a SIGSTOP) is no outage: polling
    /// keeps its pace for everyone.
    fn down(&mut self, what: &str, e: &SlurmError) {
        if !e.is_slurms() {
            warn!("{what}: {e}; tried again later");
            return;
        }
        self.failures += 1;
        if self.failing.is_none() {
            warn!("slurm is not answering ({what}): {e}; nothing is decided until it does, polling backs off");
            self.failing = Some(what.to_string());
        } else {
            debug!("still no answer from slurm ({what}): {e}");
        }
    }

    fn up(&mut self) {
        if let Some(what) = self.failing.take() {
            info!("slurm answers again ({what} works); resuming");
        }
        self.failures = 0;
    }
}

/// Carries out [`Effect::ListDependents`]: the supervised chains whose `--dependency`
/// waits on a chain that failed for good will never start; they are named in its record
/// and in the log.
pub fn with_dependents(
    store: &Store,
    chain_id: i64,
    mut tr: Transition,
) -> Result<Transition, StoreError> {
    if tr.effects.contains(&Effect::ListDependents) {
        let deps: Vec<String> = store
            .dependents_of(chain_id)?
            .into_iter()
            .map(crate::store::chain_label)
            .collect();
        if !deps.is_empty() {
            warn!(dependents = ?deps, "failed for good; supervised jobs that depend on it will not start");
        }
        tr.set_dependents(deps);
    }
    Ok(tr)
}

/// One log line for a decision: what was decided, and why. Which chain and job it is
/// about comes from the span it is logged in ([`attempt_span`], [`chain_span`]).
fn log_transition(tr: &Transition) {
    match &tr.record {
        Some(r) if r.class == crate::domain::model::RecoveryClass::R1 => {
            info!(class = %r.class, action = %r.action, "{}", r.reason)
        }
        Some(r) => {
            warn!(class = %r.class, action = %r.action, "{}", r.reason)
        }
        None => info!("completed"),
    }
}

/// The span of the work on one attempt (judging its ending, noticing it is lost): every
/// line logged in it carries the chain (`c7`) and the Slurm job id, as fields (journal
/// fields `CHAIN` and `JOB` under systemd).
pub fn attempt_span(chain: i64, job: &str) -> tracing::Span {
    tracing::info_span!("attempt", chain = %crate::store::chain_label(chain), job = %job)
}

/// The span of the work on a job that waits on a supervised chain (it may be no chain's:
/// a job submitted with plain sbatch).
pub fn waiting_span(job: &str) -> tracing::Span {
    tracing::info_span!("waiting", job = %job)
}

/// The span of the work on one chain outside an attempt (an escalation, a resolution).
pub fn chain_span(chain: i64) -> tracing::Span {
    tracing::info_span!("chain", chain = %crate::store::chain_label(chain))
}

/// The span of one launch (one sbatch, for one chain or an array's chains): its tag, and
/// the job id once sbatch answered with one.
pub fn launch_span(l: &crate::store::Launch) -> tracing::Span {
    tracing::info_span!("launch", tag = %l.tag, job = tracing::field::Empty)
}
