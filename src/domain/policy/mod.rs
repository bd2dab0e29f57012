//! The decision core: pure, no I/O; time and randomness are passed in.
//!
//! Everything that can happen to a chain is an [`Event`]; [`transition`] is the one place
//! that decides what it means: the chain's new state, the decision record, and what the
//! daemon must carry out ([`Effect`]). The daemon gathers the facts, calls it, and does
//! what it says; no other module builds a decision record.
//!
//! An event is anything that can happen to a chain: an ending, a requeue by Slurm, a
//! resolution, a recover, a cancel, a refused, unprepared or unconfirmed launch, a lost
//! job, an expiry. The [`Context`] carries the time, the jitter, the partition's MaxTime,
//! the quarantined nodes and the breaker's count. A [`Transition`] is every consequence,
//! as values: the state it was decided from (the store's compare-and-set), the chain's
//! update (with its `Clock`, the wait in `pending_failed`: started, kept, cleared,
//! reminded, expired), the decision record, what happens to an attempt
//! ([`AttemptChange`]), the notification to queue, a report made once per job, and the
//! effects the daemon carries out in Slurm or reads first ([`Effect`]). What the move
//! itself implies (the clock; the notification of entering `pending_failed`, `completed`
//! or `failed`, or of a cancel for a dependency that can never hold) is filled in by
//! [`Transition::finish`].
//!
//! Inside: the disposition table's readings (`table`; its rows are the model's, one per
//! classification, as docs/design.md's table), the guards against an automatic retry in order (`guards`),
//! resource escalation (`escalation`), and the reasons, an enum rendered to prose in one
//! place (`reason`).

mod continuation;
mod escalation;
mod guards;
mod reason;
mod table;

pub use continuation::ContinuationFacts;
pub use reason::{Change, Reason};
pub use table::{budget, disposition, is_infrastructure, Disposition, Never, Resources};

use crate::config::Config;
use crate::domain::classify::Verdict;
use crate::domain::dependency::Kind;
use crate::domain::model::{
    chain_label, Action, Chain, ChainState, Classification, RecoverRequest, RecoveryClass,
    Resolution, ResolveAction, RetryPlan,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the chain did before this ending, as the store knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainHistory {
    /// Automatic and agent-ordered resubmissions so far, by the classification that caused them.
    pub resubmits_by_class: BTreeMap<String, u32>,
    /// All resubmissions so far.
    pub resubmits: u32,
    /// The chain's cap on resubmissions.
    pub max_retries: u32,
    /// The resources the ended attempt ran with (the supervisor's overrides so far).
    pub plan: RetryPlan,
    /// When the ended attempt was a retry an agent or a person asked for: the
    /// classification of the failure they resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_retry_of: Option<Classification>,
    /// The submission said a rerun of its script is safe even after some of its srun steps
    /// completed (`submit --restartable`, else `retry.restartable`).
    #[serde(default)]
    pub restartable: bool,
    /// A continuing chain (docs/continuation.md): what it asked for and its evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<Box<ContinuationFacts>>,
}

impl ChainHistory {
    /// Resubmissions so far caused by classification `c`.
    pub fn used(&self, c: Classification) -> u32 {
        self.resubmits_by_class
            .get(c.as_str())
            .copied()
            .unwrap_or(0)
    }
}

/// The infrastructure failures the breaker weighs, from each owner's count in its window
/// (see `config::BreakerConfig`): with `min_users` above 1 (a daemon for several users),
/// an owner's failures count at most `threshold / min_users`, rounded up, so one user's
/// jobs alone never open it. `min_users` is the daemon's: 1 for a per-user daemon.
pub fn breaker_failures(by_owner: &[(u32, u32)], threshold: u32, min_users: u32) -> u32 {
    let cap = if min_users <= 1 {
        u32::MAX
    } else {
        threshold.div_ceil(min_users).max(1)
    };
    by_owner
        .iter()
        .map(|&(_, n)| n.min(cap))
        .fold(0u32, u32::saturating_add)
}

/// What a decision needs to know beyond the chain itself. The daemon gathers it; the
/// decision stays a pure function of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Context {
    /// MaxTime of the partition the attempt ran in (`None`: unlimited or unknown).
    pub partition_max_secs: Option<u64>,
    /// Nodes in quarantine now (see [`quarantined`]); every retry avoids them.
    pub quarantined: Vec<String>,
    /// Infrastructure failures (node_fail, boot_fail, transient) across all chains within
    /// the breaker window, not counting this one.
    pub recent_infra_failures: u32,
    /// Unix seconds.
    pub now: i64,
    /// A number in [-1, 1] for the backoff jitter.
    pub jitter: f64,
}

impl Context {
    /// The context of a request: only the time matters.
    pub fn at(now: i64) -> Context {
        Context {
            now,
            ..Default::default()
        }
    }
}

/// Everything that can happen to a chain.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// An attempt ended and Slurm will not run it again by itself.
    Ended {
        verdict: &'a Verdict,
        history: &'a ChainHistory,
        attempt: &'a Judged,
    },
    /// Slurm requeued live attempt `n` itself, under the same job id; `observation` is
    /// the run that ended.
    Requeued {
        verdict: &'a Verdict,
        n: u32,
        observation: &'a serde_json::Value,
    },
    /// An agent or a person resolved a `pending_failed` chain (`classify`).
    Resolved {
        resolution: &'a Resolution,
        /// The resources they asked for, already checked against the admin's caps.
        plan: &'a RetryPlan,
        actor: &'a str,
    },
    /// A person asked for a failed or `pending_failed` chain to be retried (`recover`).
    Recovered {
        request: &'a RecoverRequest,
        plan: &'a RetryPlan,
        actor: &'a str,
    },
    /// The user cancelled the chain; `job` is its live job, if any.
    Cancelled {
        job: Option<&'a str>,
        actor: &'a str,
    },
    /// sbatch refused a retry for good: its attempt `n` was never submitted.
    RetryRefused {
        code: i32,
        stderr: &'a str,
        argv: &'a [String],
        n: u32,
    },
    /// A retry could not even be prepared.
    RetryUnprepared { error: &'a str },
    /// An interrupted launch (of attempt `n`) that may have created a job which cannot be
    /// found any more.
    LaunchUnconfirmed {
        tag: &'a str,
        last_error: Option<&'a str>,
        argv: &'a [String],
        n: u32,
    },
    /// Live attempt `n`'s job left squeue and sacct shows no ending for it, for
    /// `lost_job_after`.
    JobLost {
        job: &'a str,
        missing_since: i64,
        n: u32,
    },
    /// The chain has waited in `pending_failed` since `pending_since` and the daemon found
    /// `escalation.expire_after` passed: `escalation.expire_action` resolves it.
    Expired { pending_since: i64 },
    /// The chain has waited in `pending_failed` for `escalation.remind_after`: its
    /// submitter is reminded, once.
    RemindDue,
    /// This chain's waiting job `job` now follows the chains it waits on to their new
    /// attempts (upstream chain, earlier job, new job); `cause` is how the upstream's
    /// attempt ended.
    Rewired {
        job: &'a str,
        changes: &'a [(i64, String, String)],
        cause: Classification,
    },
    /// A job submitted with plain sbatch that waited on this chain's earlier attempt
    /// `from` now waits on its new attempt `to`.
    PlainJobRewired {
        job: &'a str,
        from: &'a str,
        to: &'a str,
    },
    /// A job submitted with plain sbatch waits with `kind` (afterany, afternotok) on this
    /// chain's current job `attempt`: Slurm will start it when that attempt ends, not
    /// when the chain ends for good. The supervisor cannot hold it back; it says so here.
    /// It is reported once, under `once_as` (the job's id without its array task, so an
    /// array's tasks are one report).
    PlainJobNotHeld {
        job: &'a str,
        kind: &'a str,
        attempt: &'a str,
        once_as: &'a str,
    },
    /// The chains a held job's afterany/afternotok wait on have ended for good (or one
    /// ended in a way that can never satisfy it): release it, or cancel it.
    GatesDecided {
        job: Option<&'a str>,
        gates: &'a [Gate],
    },
    /// Slurm cancelled this chain's waiting job because the attempt it waited on failed
    /// (`kill_invalid_depend`), and the chains it waits on are still being retried.
    KilledForDependency {
        verdict: &'a Verdict,
        upstreams: &'a [i64],
        attempt: &'a Judged,
    },
    /// A chain this one waits on with afterok/aftercorr ended for good without
    /// completing: its job can never start.
    UpstreamBroken {
        upstream: i64,
        upstream_state: ChainState,
        job: Option<&'a str>,
    },
    /// The ended job of a `ready` chain could not be requeued in place (`retry.in_place`):
    /// Slurm refused a step, or it was undone. `n` is the attempt that was to run it.
    InPlaceRefused {
        job: &'a str,
        error: &'a str,
        n: u32,
    },
    /// Cluster mode (docs/cluster.md): the active daemon settled a held job that carries
    /// the tag of this chain's launch `tag` (`recorded`: the launch's recorded job, if
    /// any), as `settled` says.
    HeldJob {
        job: &'a str,
        tag: &'a str,
        recorded: Option<&'a str>,
        settled: HeldJobSettled,
    },
}

/// What the active daemon did with a held job of one of its launches (cluster mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldJobSettled {
    /// Not its launch's recorded job: a deposed daemon's submission, cancelled while held.
    Cancelled,
    /// Its launch's recorded job, left held when its release failed: released.
    Released,
    /// Found by its tag for a launch left as an intent: adopted as the launch's job and
    /// released.
    Adopted,
}

impl Event<'_> {
    /// What the event does to one of the chain's attempts, whatever is decided: an ending
    /// is recorded even when the decision is nothing (the daemon's fallback for an event
    /// that does not apply keeps it, so the attempt is not judged again).
    pub fn attempt_change(&self) -> Option<AttemptChange> {
        match *self {
            Event::Ended { attempt, .. } | Event::KilledForDependency { attempt, .. } => {
                Some(AttemptChange::Ended(attempt.clone()))
            }
            Event::Requeued { n, observation, .. } => Some(AttemptChange::Requeued {
                n,
                observation: observation.clone(),
            }),
            Event::JobLost { n, .. } => Some(AttemptChange::Lost { n }),
            Event::RetryRefused { n, .. } | Event::LaunchUnconfirmed { n, .. } => {
                Some(AttemptChange::NotSubmitted { n })
            }
            Event::InPlaceRefused { n, .. } => Some(AttemptChange::Withdrawn { n }),
            Event::Cancelled { .. } => Some(AttemptChange::Cancelled),
            Event::Resolved { .. }
            | Event::Recovered { .. }
            | Event::RetryUnprepared { .. }
            | Event::Expired { .. }
            | Event::RemindDue
            | Event::Rewired { .. }
            | Event::PlainJobRewired { .. }
            | Event::PlainJobNotHeld { .. }
            | Event::GatesDecided { .. }
            | Event::HeldJob { .. }
            | Event::UpstreamBroken { .. } => None,
        }
    }
}

/// An ended attempt as the daemon judged it: which one, how it ended, and the
/// observation (sacct's rows, output tails) its verdict came from, stored unchanged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Judged {
    pub n: u32,
    pub end: AttemptEnd,
    pub observation: serde_json::Value,
}

/// How an attempt ended, as `history` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptEnd {
    pub slurm_state: String,
    pub exit_code: String,
    pub nodes: Option<String>,
    pub mem: Option<String>,
    pub time_limit: Option<String>,
    /// The ending's failure signature (`signature::Signature`: its id and masked stderr
    /// lines), computed by the daemon that judged it; `None` in journal entries written
    /// before signatures were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature_text: Option<String>,
}

/// A gate of a held submission: `kind` on `upstream`, which is now in `upstream_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    pub upstream: i64,
    pub kind: Kind,
    /// The job as named: the gates of one target are one condition.
    pub target: String,
    pub upstream_state: ChainState,
}

/// Whether a held job's gates let it go: `Some(true)` when every upstream has ended for
/// good and each condition holds, `Some(false)` when one can never hold, `None` while an
/// upstream is still open.
pub fn gates_open(gates: &[Gate]) -> Option<bool> {
    if never_gate(gates).is_some() {
        return Some(false);
    }
    gates
        .iter()
        .all(|g| !g.upstream_state.is_open())
        .then_some(true)
}

/// A gate of a condition that can never hold: `afternotok` on a job (an array: all its
/// tasks) whose chains all ended for good and all completed. As in Slurm, afternotok on
/// an array holds when any task did not complete.
fn never_gate(gates: &[Gate]) -> Option<&Gate> {
    gates.iter().find(|g| {
        g.kind == Kind::AfterNotOk
            && gates
                .iter()
                .filter(|h| h.kind == g.kind && h.target == g.target)
                .all(|h| h.upstream_state == ChainState::Completed)
    })
}

/// Why an event cannot apply to the chain as it is (the request is answered with a
/// conflict; nothing is recorded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("is {0}, not pending_failed: only a chain waiting for a decision can be classified")]
    NotPendingFailed(ChainState),
    #[error("is {0}: only a failed or pending_failed chain can be recovered")]
    NotRecoverable(ChainState),
    #[error("has already ended; nothing to cancel")]
    AlreadyEnded,
    #[error("has not waited in pending_failed for escalation.expire_after (or expiry is off)")]
    NotExpired,
    #[error("is {0}, not ready: its in-place retry is no longer the chain's next step")]
    NotReady(ChainState),
}

/// What a decision was computed from, stored with the record as JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Inputs {
    Ending {
        verdict: Verdict,
        history: ChainHistory,
        context: Context,
        /// For a chain that failed for good: supervised chains whose `--dependency`
        /// waits on it (they will never start).
        #[serde(skip_serializing_if = "Option::is_none")]
        dependents: Option<Vec<String>>,
    },
    Requeue {
        verdict: Verdict,
    },
    Resolution {
        resolution: Resolution,
        plan: RetryPlan,
        #[serde(skip_serializing_if = "Option::is_none")]
        dependents: Option<Vec<String>>,
    },
    Recover {
        recover: RecoverRequest,
        plan: RetryPlan,
    },
    Cancel {
        job: Option<String>,
    },
    Lost {
        job: String,
        missing_since: i64,
    },
    Refused {
        argv: Vec<String>,
        stderr: String,
        exit_code: i32,
    },
    Unconfirmed {
        argv: Vec<String>,
        tag: String,
    },
    /// A pipeline decision: the waiting job, the chains it waits on, and the rewiring.
    Dependency {
        #[serde(skip_serializing_if = "Option::is_none")]
        job: Option<String>,
        upstreams: Vec<String>,
        /// (upstream chain, earlier job, new job)
        #[serde(skip_serializing_if = "Vec::is_empty")]
        rewired: Vec<(String, String, String)>,
    },
    Expiry {
        pending_since: i64,
        expire_after_secs: u64,
        expire_action: crate::config::ExpireAction,
        #[serde(skip_serializing_if = "Option::is_none")]
        dependents: Option<Vec<String>>,
    },
    InPlace {
        job: String,
        error: String,
    },
    /// A held job the active daemon settled (cluster mode): the job, the launch's tag it
    /// carries, and the launch's recorded job.
    HeldJob {
        job: String,
        tag: String,
        recorded: Option<String>,
    },
    None {},
}

/// A decision record to append.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub classification: Classification,
    pub class: RecoveryClass,
    pub action: Action,
    pub reason: Reason,
    pub inputs: Inputs,
    /// A resolution: it points at the chain's latest decision (the store fills the id in
    /// the same transaction).
    pub resolves_latest: bool,
    /// `supervisor`, or `user:<name>` for a person or an agent acting as one.
    pub actor: String,
    /// An infrastructure failure the supervisor saw end an attempt (the breaker counts these).
    pub infra_failure: bool,
    /// The node(s) of a node or boot failure (quarantine counts these).
    pub failed_nodes: Option<String>,
}

/// What changes on a chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainUpdate {
    pub state: ChainState,
    /// `None` keeps the chain's last classification.
    pub last_classification: Option<Classification>,
    /// `None` keeps the chain's plan.
    pub plan: Option<RetryPlan>,
    /// For `ready`: not before this time (unix seconds).
    pub not_before: Option<i64>,
    /// The chain's wait for a decision: when it began, and whether its reminder and its
    /// expiry came.
    pub clock: Clock,
    /// False when nothing of the chain changes but its clock's marks (a reminder) or
    /// nothing at all: its row is left as it is, `updated_at` too.
    pub changes_chain: bool,
}

impl ChainUpdate {
    /// The chain enters (or stays in) `state`; everything else as it is.
    pub fn to(state: ChainState) -> ChainUpdate {
        ChainUpdate {
            state,
            last_classification: None,
            plan: None,
            not_before: None,
            clock: Clock::Keep,
            changes_chain: true,
        }
    }
}

/// The clock of a chain's wait in `pending_failed` (reminders and expiry count from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Clock {
    /// Not waiting: no start, no reminder, no expiry.
    Clear,
    /// The wait starts now.
    Start,
    /// As it is.
    Keep,
    /// Its one reminder is queued (only if none was and it has not expired).
    Remind,
    /// Its expiry is recorded (only if it was not).
    Expire,
}

impl Clock {
    /// The clock of a move from `from` to `to`: a wait starts on entering
    /// `pending_failed` and ends on leaving it.
    fn of(from: ChainState, to: ChainState) -> Clock {
        match (
            from == ChainState::PendingFailed,
            to == ChainState::PendingFailed,
        ) {
            (_, false) => Clock::Clear,
            (false, true) => Clock::Start,
            (true, true) => Clock::Keep,
        }
    }
}

/// What happens to one of the chain's attempts with a transition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AttemptChange {
    /// Live attempt `n` ended as judged; only while it is still live.
    Ended(Judged),
    /// Slurm requeued live attempt `n` itself and runs it again: the run that ended is
    /// observed, the attempt stays live; only while it is live.
    Requeued {
        n: u32,
        observation: serde_json::Value,
    },
    /// Live attempt `n` is lost to Slurm (`LOST`); only while it is still live.
    Lost { n: u32 },
    /// The chain's live attempt, if any, ends as `CANCELLED` (by the supervisor's scancel).
    Cancelled,
    /// Attempt `n`'s launch will not run: it was never submitted.
    NotSubmitted { n: u32 },
    /// Attempt `n`, an in-place requeue that did not happen, is withdrawn: nothing of it
    /// ran.
    Withdrawn { n: u32 },
}

impl AttemptChange {
    /// The attempt the decision record is about (`None`: the chain's latest).
    pub fn attempt(&self) -> Option<u32> {
        match self {
            AttemptChange::Ended(j) => Some(j.n),
            AttemptChange::Requeued { n, .. }
            | AttemptChange::Lost { n }
            | AttemptChange::NotSubmitted { n } => Some(*n),
            AttemptChange::Cancelled | AttemptChange::Withdrawn { .. } => None,
        }
    }
}

/// The notification a transition queues for the chain's submitter (delivered later, at
/// least once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notify {
    pub kind: crate::domain::notification::Kind,
    /// It is about the chain's latest decision (after this transition's record); a
    /// completion is about none.
    pub names_decision: bool,
}

/// What the daemon must do to carry a transition out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Cancel this job in Slurm before the transition is recorded; if that fails, nothing
    /// is recorded.
    Scancel(String),
    /// Release this held job in Slurm (its gates opened) before the transition is recorded.
    Release(String),
    /// The chain failed for good: find the supervised chains that wait on it with
    /// `--dependency` (they will never start), warn, and [`Transition::set_dependents`].
    ListDependents,
}

/// The outcome of an event: everything that follows from it, as values. The store applies
/// it in one transaction (the store's `apply`), only if the chain is still in
/// the state it was decided from (and the attempt change's own condition holds); the
/// daemon carries out its effects.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// The state it was decided from: the store applies it only if the chain is still there.
    pub from: ChainState,
    pub update: ChainUpdate,
    /// `None` only for a success, which gets no recovery record.
    pub record: Option<Record>,
    pub attempt: Option<AttemptChange>,
    pub notify: Option<Notify>,
    /// A report made once per (job, chain): applied only if it was not made before.
    pub report_once: Option<String>,
    pub effects: Vec<Effect>,
}

impl Transition {
    /// A transition that leaves `chain` as it is and records nothing.
    pub fn none(chain: &Chain) -> Transition {
        Transition::of(
            chain.state,
            ChainUpdate {
                not_before: chain.not_before,
                changes_chain: false,
                ..ChainUpdate::to(chain.state)
            },
            None,
        )
    }

    /// A transition from `from` with `update` and `record`, and nothing else yet.
    pub fn of(from: ChainState, update: ChainUpdate, record: Option<Record>) -> Transition {
        Transition {
            from,
            update,
            record,
            attempt: None,
            notify: None,
            report_once: None,
            effects: Vec::new(),
        }
    }

    /// Notes the dependents an [`Effect::ListDependents`] found, in the record's inputs.
    pub fn set_dependents(&mut self, deps: Vec<String>) {
        if let Some(Record {
            inputs:
                Inputs::Ending { dependents, .. }
                | Inputs::Resolution { dependents, .. }
                | Inputs::Expiry { dependents, .. },
            ..
        }) = &mut self.record
        {
            *dependents = Some(deps);
        }
    }

    /// The record's action (`None` for a success).
    pub fn action(&self) -> Action {
        self.record.as_ref().map_or(Action::None, |r| r.action)
    }

    /// Fills in what follows from the move itself, unless it says otherwise already: the
    /// clock of a wait in `pending_failed` (started on entering it, cleared on leaving
    /// it), and the notification of entering a state the submitter is told about.
    pub fn finish(mut self) -> Transition {
        if self.update.clock == Clock::Keep {
            self.update.clock = Clock::of(self.from, self.update.state);
        }
        if self.notify.is_none() {
            self.notify = notification_of(&self);
        }
        self
    }

    /// The jobs its effects cancel or release.
    pub fn jobs(&self) -> impl Iterator<Item = &str> {
        self.effects.iter().filter_map(|e| match e {
            Effect::Scancel(j) | Effect::Release(j) => Some(j.as_str()),
            Effect::ListDependents => None,
        })
    }
}

/// What the submitter is told of a transition, if anything: the state the chain enters,
/// for the states they hear about, or that the supervisor cancelled it because a job it
/// waits on failed for good (its dependency can never be satisfied).
fn notification_of(t: &Transition) -> Option<Notify> {
    use crate::domain::notification::Kind;
    let to = t.update.state;
    if to == t.from {
        return None;
    }
    let kind = match to {
        ChainState::PendingFailed => Kind::PendingFailed,
        ChainState::Completed => Kind::Completed,
        ChainState::Failed => Kind::Failed,
        ChainState::Cancelled
            if t.record
                .as_ref()
                .is_some_and(|r| matches!(r.reason, Reason::DependencyNeverSatisfied { .. })) =>
        {
            Kind::DependencyNeverSatisfied
        }
        _ => return None,
    };
    Some(Notify {
        kind,
        names_decision: kind != Kind::Completed,
    })
}

/// The delay before resubmission number `n` (0-based): `initial * multiplier^n`, capped,
/// then moved by `jitter` (a number in [-1, 1] from the caller) times the jitter fraction.
pub fn backoff_secs(config: &Config, n: u32, jitter: f64) -> u64 {
    let r = &config.retry;
    let base = r.backoff_initial.as_secs_f64() * r.backoff_multiplier.powi(n.min(64) as i32);
    let capped = base.min(r.backoff_max.as_secs_f64());
    let j = jitter.clamp(-1.0, 1.0) * r.backoff_jitter;
    (capped * (1.0 + j)).max(0.0).round() as u64
}

/// The nodes in quarantine at `now`: a node with `threshold` failures within `window` stays
/// out of retries until `duration` after its latest failure. So a quarantine decays by
/// itself when the node stops failing jobs.
pub fn quarantined(failures: &[(String, i64)], config: &Config, now: i64) -> Vec<String> {
    let q = &config.quarantine;
    let mut by_node: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (node, at) in failures {
        by_node.entry(node.as_str()).or_default().push(*at);
    }
    let window = q.window.0.as_secs() as i64;
    let duration = q.duration.0.as_secs() as i64;
    by_node
        .into_iter()
        .filter(|(_, times)| {
            let latest = times.iter().copied().max().unwrap_or(i64::MIN);
            let in_window = times.iter().filter(|t| **t > latest - window).count() as u32;
            q.threshold > 0 && in_window >= q.threshold && now < latest + duration
        })
        .map(|(n, _)| n.to_string())
        .collect()
}

/// The actor of the supervisor's own decisions.
pub const SUPERVISOR: &str = "supervisor";

/// The actor of a decision taken by `escalation.expire_action`.
pub const EXPIRY: &str = "expiry";

/// Decides what `event` means for `chain`.
pub fn transition(
    chain: &Chain,
    event: Event,
    config: &Config,
    ctx: &Context,
) -> Result<Transition, Refusal> {
    let from = chain.state;
    let mut t = match event {
        Event::Ended {
            verdict, history, ..
        } => ended(verdict, history, config, ctx),
        Event::Requeued { verdict, .. } => Transition::of(
            from,
            ChainUpdate {
                last_classification: Some(verdict.classification),
                not_before: chain.not_before,
                ..ChainUpdate::to(from)
            },
            Some(Record {
                reason: Reason::RequeuedBySlurm {
                    verdict: verdict.reason.clone(),
                },
                ..supervisor(
                    verdict,
                    RecoveryClass::R1,
                    Action::Watch,
                    Inputs::Requeue {
                        verdict: verdict.clone(),
                    },
                )
            }),
        ),
        Event::Resolved {
            resolution,
            plan,
            actor,
        } => resolved(chain, resolution, plan, actor, config, ctx)?,
        Event::Recovered {
            request,
            plan,
            actor,
        } => {
            if !matches!(from, ChainState::Failed | ChainState::PendingFailed) {
                return Err(Refusal::NotRecoverable(from));
            }
            Transition::of(
                from,
                retry_now(chain, plan, ctx),
                Some(Record {
                    classification: chain
                        .last_classification
                        .unwrap_or(Classification::Ambiguous),
                    class: RecoveryClass::R2,
                    action: Action::Resubmit,
                    reason: Reason::Recover {
                        given: request.reason.clone().filter(|s| !s.trim().is_empty()),
                    },
                    inputs: Inputs::Recover {
                        recover: request.clone(),
                        plan: plan.clone(),
                    },
                    resolves_latest: true,
                    actor: actor.to_string(),
                    infra_failure: false,
                    failed_nodes: None,
                }),
            )
        }
        Event::Cancelled { job, actor } => cancelled(
            chain,
            job,
            actor,
            Reason::CancelledByUser,
            Inputs::Cancel {
                job: job.map(str::to_string),
            },
        )?,
        Event::RetryRefused {
            code, stderr, argv, ..
        } => escalation(
            from,
            Reason::RetryRefused {
                code,
                stderr: stderr.to_string(),
            },
            Inputs::Refused {
                argv: argv.to_vec(),
                stderr: stderr.to_string(),
                exit_code: code,
            },
        ),
        Event::RetryUnprepared { error } => escalation(
            from,
            Reason::RetryUnprepared {
                error: error.to_string(),
            },
            Inputs::None {},
        ),
        Event::LaunchUnconfirmed {
            tag,
            last_error,
            argv,
            ..
        } => escalation(
            from,
            Reason::LaunchUnconfirmed {
                tag: tag.to_string(),
                last_error: last_error.map(str::to_string),
            },
            Inputs::Unconfirmed {
                argv: argv.to_vec(),
                tag: tag.to_string(),
            },
        ),
        Event::Expired { pending_since } => expired(chain, pending_since, config, ctx)?,
        Event::RemindDue => {
            if from != ChainState::PendingFailed {
                return Err(Refusal::NotPendingFailed(from));
            }
            Transition {
                notify: Some(Notify {
                    kind: crate::domain::notification::Kind::Reminder,
                    names_decision: true,
                }),
                ..Transition::of(
                    from,
                    ChainUpdate {
                        clock: Clock::Remind,
                        not_before: chain.not_before,
                        changes_chain: false,
                        ..ChainUpdate::to(from)
                    },
                    None,
                )
            }
        }
        Event::Rewired {
            job,
            changes,
            cause,
        } => note(
            chain,
            cause,
            RecoveryClass::R1,
            Action::Rewire,
            Reason::Rewired {
                job: job.to_string(),
                changes: changes
                    .iter()
                    .map(|(c, f, t)| (chain_label(*c), f.clone(), t.clone()))
                    .collect(),
            },
            Inputs::Dependency {
                job: Some(job.to_string()),
                upstreams: changes.iter().map(|(c, ..)| chain_label(*c)).collect(),
                rewired: changes
                    .iter()
                    .map(|(c, f, t)| (chain_label(*c), f.clone(), t.clone()))
                    .collect(),
            },
        ),
        Event::PlainJobRewired { job, from, to } => plain_job_note(
            chain,
            job,
            RecoveryClass::R1,
            Action::Rewire,
            Reason::PlainJobRewired {
                job: job.to_string(),
                from: from.to_string(),
                to: to.to_string(),
            },
            vec![(chain_label(chain.id), from.to_string(), to.to_string())],
        ),
        Event::PlainJobNotHeld {
            job,
            kind,
            attempt,
            once_as,
        } => Transition {
            report_once: Some(once_as.to_string()),
            ..plain_job_note(
                chain,
                job,
                RecoveryClass::R3,
                Action::None,
                Reason::PlainJobNotHeld {
                    job: job.to_string(),
                    kind: kind.to_string(),
                    attempt: attempt.to_string(),
                },
                Vec::new(),
            )
        },
        Event::GatesDecided { job, gates } => {
            let upstreams: Vec<String> = gates.iter().map(|g| chain_label(g.upstream)).collect();
            let inputs = Inputs::Dependency {
                job: job.map(str::to_string),
                upstreams: upstreams.clone(),
                rewired: Vec::new(),
            };
            match never_gate(gates) {
                Some(g) => never_satisfied(
                    chain,
                    job,
                    g.kind.as_str(),
                    g.upstream,
                    g.upstream_state,
                    inputs,
                )?,
                None => Transition {
                    effects: job
                        .map(|j| Effect::Release(j.to_string()))
                        .into_iter()
                        .collect(),
                    ..note(
                        chain,
                        Classification::Completed,
                        RecoveryClass::R1,
                        Action::Release,
                        Reason::Released { upstreams },
                        inputs,
                    )
                },
            }
        }
        Event::KilledForDependency {
            verdict, upstreams, ..
        } => {
            let labels: Vec<String> = upstreams.iter().map(|c| chain_label(*c)).collect();
            Transition::of(
                from,
                ChainUpdate {
                    last_classification: Some(verdict.classification),
                    not_before: Some(ctx.now),
                    ..ChainUpdate::to(ChainState::Ready)
                },
                Some(Record {
                    reason: Reason::KilledForDependency {
                        verdict: verdict.reason.clone(),
                        upstreams: labels.clone(),
                    },
                    ..supervisor(
                        verdict,
                        RecoveryClass::R1,
                        Action::Resubmit,
                        Inputs::Dependency {
                            job: None,
                            upstreams: labels,
                            rewired: Vec::new(),
                        },
                    )
                }),
            )
        }
        Event::UpstreamBroken {
            upstream,
            upstream_state,
            job,
        } => never_satisfied(
            chain,
            job,
            "afterok",
            upstream,
            upstream_state,
            Inputs::Dependency {
                job: job.map(str::to_string),
                upstreams: vec![chain_label(upstream)],
                rewired: Vec::new(),
            },
        )?,
        Event::JobLost {
            job, missing_since, ..
        } => escalation(
            from,
            Reason::JobLost {
                job: job.to_string(),
                missing_secs: ctx.now - missing_since,
            },
            Inputs::Lost {
                job: job.to_string(),
                missing_since,
            },
        ),
        Event::HeldJob {
            job,
            tag,
            recorded,
            settled,
        } => {
            let (action, reason) = match settled {
                HeldJobSettled::Cancelled => (
                    Action::Cancel,
                    Reason::HeldJobCancelled {
                        job: job.to_string(),
                        tag: tag.to_string(),
                        recorded: recorded.map(str::to_string),
                    },
                ),
                HeldJobSettled::Released => (
                    Action::Release,
                    Reason::HeldJobReleased {
                        job: job.to_string(),
                    },
                ),
                HeldJobSettled::Adopted => (
                    Action::Release,
                    Reason::HeldJobAdopted {
                        job: job.to_string(),
                        tag: tag.to_string(),
                    },
                ),
            };
            note(
                chain,
                chain
                    .last_classification
                    .unwrap_or(Classification::Ambiguous),
                RecoveryClass::R1,
                action,
                reason,
                Inputs::HeldJob {
                    job: job.to_string(),
                    tag: tag.to_string(),
                    recorded: recorded.map(str::to_string),
                },
            )
        }
        Event::InPlaceRefused { job, error, .. } => {
            if from != ChainState::Ready {
                return Err(Refusal::NotReady(from));
            }
            // The retry goes ahead as a resubmission, now.
            Transition::of(
                from,
                ChainUpdate {
                    not_before: Some(ctx.now),
                    ..ChainUpdate::to(from)
                },
                // Not a second resubmission: the one already decided is carried out by
                // sbatch instead (budgets count `resubmit` records).
                Some(by_supervisor(
                    chain
                        .last_classification
                        .unwrap_or(Classification::Ambiguous),
                    RecoveryClass::R1,
                    Action::None,
                    Reason::InPlaceRefused {
                        job: job.to_string(),
                        error: error.to_string(),
                    },
                    Inputs::InPlace {
                        job: job.to_string(),
                        error: error.to_string(),
                    },
                )),
            )
        }
    };
    t.from = from;
    if t.attempt.is_none() {
        t.attempt = event.attempt_change();
    }
    Ok(t.finish())
}

/// A record about a chain's waiting job that leaves its state as it is (a rewiring, a
/// release). `classification` is what happened upstream.
fn note(
    chain: &Chain,
    classification: Classification,
    class: RecoveryClass,
    action: Action,
    reason: Reason,
    inputs: Inputs,
) -> Transition {
    Transition::of(
        chain.state,
        ChainUpdate {
            not_before: chain.not_before,
            ..ChainUpdate::to(chain.state)
        },
        Some(by_supervisor(classification, class, action, reason, inputs)),
    )
}

/// A record on an upstream chain about a job submitted with plain sbatch (it has no chain
/// of its own): classified by the chain's last verdict, `ambiguous` before its first.
fn plain_job_note(
    chain: &Chain,
    job: &str,
    class: RecoveryClass,
    action: Action,
    reason: Reason,
    rewired: Vec<(String, String, String)>,
) -> Transition {
    note(
        chain,
        chain
            .last_classification
            .unwrap_or(Classification::Ambiguous),
        class,
        action,
        reason,
        Inputs::Dependency {
            job: Some(job.to_string()),
            upstreams: vec![chain_label(chain.id)],
            rewired,
        },
    )
}

/// A waiting chain whose dependency can never hold: cancelled (its job too), R3.
fn never_satisfied(
    chain: &Chain,
    job: Option<&str>,
    kind: &str,
    upstream: i64,
    upstream_state: ChainState,
    inputs: Inputs,
) -> Result<Transition, Refusal> {
    let reason = Reason::DependencyNeverSatisfied {
        kind: kind.to_string(),
        upstream: chain_label(upstream),
        upstream_state: upstream_state.to_string(),
    };
    cancelled(chain, job, SUPERVISOR, reason, inputs)
}

/// An open chain cancelled (its live `job` too), R3, by `actor`.
fn cancelled(
    chain: &Chain,
    job: Option<&str>,
    actor: &str,
    reason: Reason,
    inputs: Inputs,
) -> Result<Transition, Refusal> {
    if !chain.state.is_open() {
        return Err(Refusal::AlreadyEnded);
    }
    Ok(Transition {
        attempt: Some(AttemptChange::Cancelled),
        effects: job
            .map(|j| Effect::Scancel(j.to_string()))
            .into_iter()
            .collect(),
        ..Transition::of(
            chain.state,
            ChainUpdate {
                last_classification: Some(Classification::Cancelled),
                ..ChainUpdate::to(ChainState::Cancelled)
            },
            Some(Record {
                classification: Classification::Cancelled,
                class: RecoveryClass::R3,
                action: Action::Cancel,
                reason,
                inputs,
                resolves_latest: false,
                actor: actor.to_string(),
                infra_failure: false,
                failed_nodes: None,
            }),
        )
    })
}

/// A record by the supervisor that is not about a job's ending (no infrastructure
/// failure, no node).
fn by_supervisor(
    classification: Classification,
    class: RecoveryClass,
    action: Action,
    reason: Reason,
    inputs: Inputs,
) -> Record {
    Record {
        classification,
        class,
        action,
        reason,
        inputs,
        resolves_latest: false,
        actor: SUPERVISOR.into(),
        infra_failure: false,
        failed_nodes: None,
    }
}

/// A record by the supervisor about an ending (or a requeue) of `verdict`; the reason is
/// the caller's to set.
fn supervisor(verdict: &Verdict, class: RecoveryClass, action: Action, inputs: Inputs) -> Record {
    let c = verdict.classification;
    Record {
        classification: c,
        class,
        action,
        reason: Reason::Completed,
        inputs,
        resolves_latest: false,
        actor: SUPERVISOR.into(),
        infra_failure: is_infrastructure(c),
        failed_nodes: match disposition(c) {
            Disposition::Retry {
                resources: Resources::ExcludeNode,
            } => verdict.nodes.clone(),
            _ => None,
        },
    }
}

/// An R2 escalation by the supervisor that is not about a job's ending: the chain waits
/// in `pending_failed` for an agent or a person.
fn escalation(from: ChainState, reason: Reason, inputs: Inputs) -> Transition {
    Transition::of(
        from,
        ChainUpdate::to(ChainState::PendingFailed),
        Some(by_supervisor(
            Classification::Ambiguous,
            RecoveryClass::R2,
            Action::Escalate,
            reason,
            inputs,
        )),
    )
}

/// A `pending_failed` chain nobody resolved within `escalation.expire_after`: resolved by
/// `escalation.expire_action`, as an R3 record by the actor `expiry`. A hold keeps the
/// chain in `pending_failed` for a person (the agent skips held chains); a fail ends it.
fn expired(
    chain: &Chain,
    pending_since: i64,
    config: &Config,
    ctx: &Context,
) -> Result<Transition, Refusal> {
    let e = &config.escalation;
    let Some(after) = e.expire_after else {
        return Err(Refusal::NotExpired);
    };
    let after = after.as_secs();
    let waited = ctx.now - pending_since;
    if chain.state != ChainState::PendingFailed {
        return Err(Refusal::NotPendingFailed(chain.state));
    }
    if waited < after as i64 {
        return Err(Refusal::NotExpired);
    }
    // A hold leaves the chain waiting: it is told as an `expired` notification, and the
    // wait is marked expired. A fail is told as the chain's `failed` notification.
    let (action, state, effects, clock, notify) = match e.expire_action {
        crate::config::ExpireAction::Hold => (
            Action::Hold,
            ChainState::PendingFailed,
            Vec::new(),
            Clock::Expire,
            Some(Notify {
                kind: crate::domain::notification::Kind::Expired,
                names_decision: true,
            }),
        ),
        crate::config::ExpireAction::Fail => (
            Action::Fail,
            ChainState::Failed,
            vec![Effect::ListDependents],
            Clock::Clear,
            None,
        ),
    };
    Ok(Transition {
        notify,
        effects,
        ..Transition::of(
            chain.state,
            ChainUpdate {
                clock,
                ..ChainUpdate::to(state)
            },
            Some(Record {
                classification: chain
                    .last_classification
                    .unwrap_or(Classification::Ambiguous),
                class: RecoveryClass::R3,
                action,
                reason: Reason::Expired {
                    waited_secs: waited,
                    expire_after_secs: after,
                    action: e.expire_action,
                },
                inputs: Inputs::Expiry {
                    pending_since,
                    expire_after_secs: after,
                    expire_action: e.expire_action,
                    dependents: None,
                },
                resolves_latest: true,
                actor: EXPIRY.to_string(),
                infra_failure: false,
                failed_nodes: None,
            }),
        )
    })
}

/// A retry as soon as possible with `extra` on top of the chain's plan.
fn retry_now(chain: &Chain, extra: &RetryPlan, ctx: &Context) -> ChainUpdate {
    ChainUpdate {
        plan: Some(chain.plan.merged(extra)),
        not_before: Some(ctx.now),
        ..ChainUpdate::to(ChainState::Ready)
    }
}

/// An ending: the table's row, then for a retry the guards, then the resources.
fn ended(verdict: &Verdict, history: &ChainHistory, config: &Config, ctx: &Context) -> Transition {
    let c = verdict.classification;
    let inputs = Inputs::Ending {
        verdict: verdict.clone(),
        history: history.clone(),
        context: ctx.clone(),
        dependents: None,
    };
    let to = |state: ChainState, record: Option<Record>| {
        let effects = if state == ChainState::Failed {
            vec![Effect::ListDependents]
        } else {
            Vec::new()
        };
        Transition {
            effects,
            ..Transition::of(
                ChainState::Active,
                ChainUpdate {
                    last_classification: Some(c),
                    ..ChainUpdate::to(state)
                },
                record,
            )
        }
    };
    let ask_agent = |reason: Reason| {
        let r = Record {
            reason,
            ..supervisor(verdict, RecoveryClass::R2, Action::Escalate, inputs.clone())
        };
        to(ChainState::PendingFailed, Some(r))
    };
    if let Some(facts) = &history.continuation {
        if let Some(t) = continuation::ended(verdict, history, facts, config, ctx, &inputs, to) {
            return t;
        }
    }
    let v = verdict.reason.clone();
    let resources = match disposition(c) {
        Disposition::Done => return to(ChainState::Completed, None),
        Disposition::Stop { action, state, why } => {
            let reason = match why {
                Never::Cancelled => Reason::CancelNotRetried { verdict: v },
                Never::Deadline => Reason::DeadlineNotRetried { verdict: v },
                Never::Permanent => Reason::PermanentNotRetried { verdict: v },
            };
            let r = Record {
                reason,
                ..supervisor(verdict, RecoveryClass::R3, action, inputs.clone())
            };
            return to(state, Some(r));
        }
        Disposition::AskAgent => return ask_agent(Reason::NeedsAgent { verdict: v }),
        Disposition::Retry { resources } => resources,
    };
    let facts = guards::Facts {
        verdict,
        history,
        config,
        ctx,
    };
    if let Some(reason) = guards::objection(&facts) {
        return ask_agent(reason);
    }
    let (next, changes) = match escalation::next_resources(resources, verdict, history, config, ctx)
    {
        Ok(n) => n,
        Err(reason) => return ask_agent(reason),
    };
    let delay = backoff_secs(config, history.resubmits, ctx.jitter);
    let r = Record {
        reason: Reason::Retry {
            verdict: v,
            delay_secs: delay,
            classification: c,
            retry: history.used(c) + 1,
            budget: budget(config, c),
            changes,
        },
        ..supervisor(verdict, RecoveryClass::R1, Action::Resubmit, inputs.clone())
    };
    let mut t = to(ChainState::Ready, Some(r));
    t.update.plan = Some(history.plan.merged(&next));
    t.update.not_before = Some(ctx.now + delay as i64);
    t
}

/// A resolution of a `pending_failed` chain. An unsure resolver does not get to act: below
/// `agent.min_confidence` a retry or a fail becomes a hold, for a person to decide.
fn resolved(
    chain: &Chain,
    resolution: &Resolution,
    plan: &RetryPlan,
    actor: &str,
    config: &Config,
    ctx: &Context,
) -> Result<Transition, Refusal> {
    if chain.state != ChainState::PendingFailed {
        return Err(Refusal::NotPendingFailed(chain.state));
    }
    let min = config.agent.min_confidence;
    let (action, reason) = match resolution.confidence {
        Some(c) if c < min && resolution.action != ResolveAction::Hold => (
            ResolveAction::Hold,
            Reason::HeldForPerson {
                given: resolution.reason.clone(),
                confidence: c,
                min,
                asked: resolution.action,
            },
        ),
        _ => (
            resolution.action,
            Reason::Resolution {
                given: resolution.reason.clone(),
            },
        ),
    };
    let keep = ChainUpdate::to;
    let (class, act, update, effects) = match action {
        ResolveAction::Retry => (
            RecoveryClass::R2,
            Action::Resubmit,
            retry_now(chain, plan, ctx),
            Vec::new(),
        ),
        ResolveAction::Fail => (
            RecoveryClass::R3,
            Action::Fail,
            keep(ChainState::Failed),
            vec![Effect::ListDependents],
        ),
        ResolveAction::Hold => (
            RecoveryClass::R2,
            Action::Hold,
            keep(ChainState::PendingFailed),
            Vec::new(),
        ),
    };
    Ok(Transition {
        effects,
        ..Transition::of(
            chain.state,
            update,
            Some(Record {
                classification: chain
                    .last_classification
                    .unwrap_or(Classification::Ambiguous),
                class,
                action: act,
                reason,
                inputs: Inputs::Resolution {
                    resolution: resolution.clone(),
                    plan: plan.clone(),
                    dependents: None,
                },
                resolves_latest: true,
                actor: actor.to_string(),
                infra_failure: false,
                failed_nodes: None,
            }),
        )
    })
}

/// The action a resolution ends up with (a hold when its confidence is too low).
pub fn resolution_action(t: &Transition) -> ResolveAction {
    match t.action() {
        Action::Resubmit => ResolveAction::Retry,
        Action::Fail => ResolveAction::Fail,
        _ => ResolveAction::Hold,
    }
}

#[cfg(test)]
mod tests;
