//! Why a decision was taken: an enum, rendered to prose in one place ([`fmt::Display`]).
//!
//! The prose is what `history` shows and what is stored in a decision record's `reason`;
//! the variant's name ([`Reason::code`]) is stored beside it (`reason_code`) and shown in
//! `history --json`, so scripts, agents and tests match on a name, never on prose.

use crate::domain::model::{Classification, ResolveAction};
use std::fmt;

/// A resource change made for a retry, as the reason tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Memory { from_mib: u64, to_mib: u64 },
    TimeLimit { from_secs: u64, to_secs: u64 },
    Exclude(String),
    AvoidQuarantined(Vec<String>),
}

/// Why a chain moved. Variants about an ending carry the classifier's own sentence
/// (`verdict`), which the prose starts with.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// The attempt completed (no record is written for a success).
    Completed,
    /// A cancelled job is never retried.
    CancelNotRetried { verdict: String },
    /// A missed deadline is not retried.
    DeadlineNotRetried { verdict: String },
    /// A permanent error is not retried.
    PermanentNotRetried { verdict: String },
    /// Nothing recognises the failure: an agent decides.
    NeedsAgent { verdict: String },
    /// The retry an agent or person asked for failed the same way.
    AgentRetryFailedAgain {
        verdict: String,
        classification: Classification,
    },
    /// Too many infrastructure failures across chains: automatic retries are paused.
    BreakerOpen {
        verdict: String,
        failures: u32,
        window_secs: u64,
        threshold: u32,
    },
    /// The per-classification retry budget is spent.
    ClassBudgetSpent {
        verdict: String,
        classification: Classification,
        used: u32,
        budget: u32,
    },
    /// srun steps completed before the failure and the submission did not say a rerun is
    /// safe (`--restartable`): an automatic retry would repeat them.
    PartialExecution {
        verdict: String,
        completed_steps: Vec<String>,
    },
    /// The chain's retry budget is spent.
    ChainBudgetSpent {
        verdict: String,
        used: u32,
        max: u32,
    },
    /// An OOM without a known memory request: more memory cannot be computed.
    MemoryUnknown { verdict: String },
    /// Memory is already at the admin's cap.
    MemoryAtCap { verdict: String, mib: u64 },
    /// A timeout without a known time limit: a longer one cannot be computed.
    TimeLimitUnknown { verdict: String },
    /// The time limit is already at the cap (admin's or partition's).
    TimeLimitAtCap {
        verdict: String,
        secs: u64,
        partition_max_secs: Option<u64>,
    },
    /// An automatic retry, after a backoff, with these changes.
    Retry {
        verdict: String,
        delay_secs: u64,
        classification: Classification,
        retry: u32,
        budget: u32,
        changes: Vec<Change>,
    },
    /// Slurm requeued the job itself: it is watched, not resubmitted.
    RequeuedBySlurm { verdict: String },
    /// A continuing job ended having made progress: it is continued with the same
    /// resources (docs/continuation.md).
    Continued {
        verdict: String,
        delay_secs: u64,
        continuation: u32,
        budget: u32,
        evidence: String,
    },
    /// A continuing job ended without evidence of progress: it is not continued.
    NoProgress { verdict: String, evidence: String },
    /// A continuing chain's continuation budget or total wall time is spent.
    ContinuationSpent {
        verdict: String,
        continuations: u32,
        budget: u32,
        wall_secs: u64,
        max_wall_secs: u64,
    },
    /// An agent's or person's resolution, with their words.
    Resolution { given: String },
    /// A resolution given with too little confidence: held for a person instead.
    HeldForPerson {
        given: String,
        confidence: f64,
        min: f64,
        asked: ResolveAction,
    },
    /// A manual recover, with the words given (or none).
    Recover { given: Option<String> },
    /// The user cancelled the chain.
    CancelledByUser,
    /// sbatch refused a retry.
    RetryRefused { code: i32, stderr: String },
    /// A retry could not be prepared (e.g. its options cannot be rebuilt).
    RetryUnprepared { error: String },
    /// Whether an interrupted launch created its job cannot be confirmed.
    LaunchUnconfirmed {
        tag: String,
        last_error: Option<String>,
    },
    /// A live job vanished from squeue without an ending in sacct.
    JobLost { job: String, missing_secs: i64 },
    /// This chain's waiting job now follows the new attempts of the chains it waits on.
    Rewired {
        job: String,
        /// (upstream chain, earlier job, new job)
        changes: Vec<(String, String, String)>,
    },
    /// A job submitted with plain sbatch that waited on this chain's earlier attempt now
    /// waits on its new one.
    PlainJobRewired {
        job: String,
        from: String,
        to: String,
    },
    /// A job submitted with plain sbatch waits with afterany/afternotok on this chain's
    /// current job: Slurm starts it when that attempt ends, not when the chain has ended
    /// for good, and the supervisor cannot hold it back.
    PlainJobNotHeld {
        job: String,
        kind: String,
        attempt: String,
    },
    /// The chains its afterany/afternotok wait on have ended for good, and the condition
    /// holds: the supervisor released the held job.
    Released { upstreams: Vec<String> },
    /// A chain it waits on ended for good in a way that can never satisfy its dependency.
    DependencyNeverSatisfied {
        kind: String,
        upstream: String,
        upstream_state: String,
    },
    /// Slurm cancelled the waiting job because the attempt it waited on failed
    /// (`kill_invalid_depend`), while the supervisor retries that chain.
    KilledForDependency {
        verdict: String,
        upstreams: Vec<String>,
    },
    /// Nobody resolved the chain within `escalation.expire_after`: the admin's policy did.
    Expired {
        waited_secs: i64,
        expire_after_secs: u64,
        action: crate::config::ExpireAction,
    },
    /// The retry could not requeue the ended job in place: it is resubmitted instead.
    InPlaceRefused { job: String, error: String },
    /// Cluster mode: a held job with this chain's launch's tag that is not the launch's
    /// recorded job (a deposed daemon's submission) was cancelled while held.
    HeldJobCancelled {
        job: String,
        tag: String,
        recorded: Option<String>,
    },
    /// Cluster mode: the launch's recorded job, left held when its release failed, was
    /// released.
    HeldJobReleased { job: String },
    /// Cluster mode: the held job of an interrupted launch, found by its tag, was adopted
    /// and released.
    HeldJobAdopted { job: String, tag: String },
}

impl Reason {
    /// The variant's stable name, stored and shown beside the prose.
    pub fn code(&self) -> &'static str {
        match self {
            Reason::Completed => "completed",
            Reason::CancelNotRetried { .. } => "cancel_not_retried",
            Reason::DeadlineNotRetried { .. } => "deadline_not_retried",
            Reason::PermanentNotRetried { .. } => "permanent_not_retried",
            Reason::NeedsAgent { .. } => "needs_agent",
            Reason::AgentRetryFailedAgain { .. } => "agent_retry_failed_again",
            Reason::BreakerOpen { .. } => "breaker_open",
            Reason::ClassBudgetSpent { .. } => "class_budget_spent",
            Reason::ChainBudgetSpent { .. } => "chain_budget_spent",
            Reason::PartialExecution { .. } => "partial_execution",
            Reason::MemoryUnknown { .. } => "memory_unknown",
            Reason::MemoryAtCap { .. } => "memory_at_cap",
            Reason::TimeLimitUnknown { .. } => "time_limit_unknown",
            Reason::TimeLimitAtCap { .. } => "time_limit_at_cap",
            Reason::Retry { .. } => "retry",
            Reason::RequeuedBySlurm { .. } => "requeued_by_slurm",
            Reason::Continued { .. } => "continued",
            Reason::NoProgress { .. } => "no_progress",
            Reason::ContinuationSpent { .. } => "continuation_spent",
            Reason::Resolution { .. } => "resolution",
            Reason::HeldForPerson { .. } => "held_for_person",
            Reason::Recover { .. } => "recover",
            Reason::CancelledByUser => "cancelled_by_user",
            Reason::RetryRefused { .. } => "retry_refused",
            Reason::RetryUnprepared { .. } => "retry_unprepared",
            Reason::LaunchUnconfirmed { .. } => "launch_unconfirmed",
            Reason::JobLost { .. } => "job_lost",
            Reason::Rewired { .. } => "rewired",
            Reason::PlainJobRewired { .. } => "plain_job_rewired",
            Reason::PlainJobNotHeld { .. } => "plain_job_not_held",
            Reason::Released { .. } => "released",
            Reason::DependencyNeverSatisfied { .. } => "dependency_never_satisfied",
            Reason::KilledForDependency { .. } => "killed_for_dependency",
            Reason::Expired { .. } => "expired",
            Reason::InPlaceRefused { .. } => "in_place_refused",
            Reason::HeldJobCancelled { .. } => "held_job_cancelled",
            Reason::HeldJobReleased { .. } => "held_job_released",
            Reason::HeldJobAdopted { .. } => "held_job_adopted",
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Memory { from_mib, to_mib } => {
                write!(f, "memory {from_mib} MiB -> {to_mib} MiB")
            }
            Change::TimeLimit { from_secs, to_secs } => {
                write!(f, "time limit {from_secs}s -> {to_secs}s")
            }
            Change::Exclude(n) => write!(f, "excluding {n}"),
            Change::AvoidQuarantined(nodes) => {
                write!(f, "avoiding quarantined {}", nodes.join(","))
            }
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Completed => f.write_str("completed"),
            Reason::CancelNotRetried { verdict } => {
                write!(f, "{verdict}: a cancel is never retried")
            }
            Reason::DeadlineNotRetried { verdict } => {
                write!(f, "{verdict}: a missed deadline is not retried")
            }
            Reason::PermanentNotRetried { verdict } => {
                write!(f, "{verdict}: a permanent error is not retried")
            }
            Reason::NeedsAgent { verdict } => {
                write!(f, "{verdict}: waiting for an agent to decide")
            }
            Reason::AgentRetryFailedAgain {
                verdict,
                classification,
            } => write!(
                f,
                "{verdict}: the retry an agent or person asked for failed the same way ({classification}); back to them"
            ),
            Reason::BreakerOpen {
                verdict,
                failures,
                window_secs,
                threshold,
            } => write!(
                f,
                "{verdict}: automatic resubmission is paused, {failures} infrastructure failures across chains in the last {window_secs}s (breaker threshold {threshold})"
            ),
            Reason::ClassBudgetSpent {
                verdict,
                classification,
                used,
                budget,
            } => write!(
                f,
                "{verdict}: the {classification} retry budget is spent ({used} of {budget} used)"
            ),
            Reason::ChainBudgetSpent { verdict, used, max } => write!(
                f,
                "{verdict}: the chain's retry budget is spent ({used} of {max} used)"
            ),
            Reason::PartialExecution {
                verdict,
                completed_steps,
            } => write!(
                f,
                "{verdict}: srun step(s) {} completed before the job ended, so running the script again would repeat them; not retried automatically (submit with --restartable if a rerun is safe)",
                completed_steps.join(", ")
            ),
            Reason::MemoryUnknown { verdict } => write!(
                f,
                "{verdict}: ReqMem is unknown, so more memory cannot be computed"
            ),
            Reason::MemoryAtCap { verdict, mib } => write!(
                f,
                "{verdict}: memory is already at the cap ({mib} MiB); another retry would fail the same way"
            ),
            Reason::TimeLimitUnknown { verdict } => write!(
                f,
                "{verdict}: the time limit is unknown, so a longer one cannot be computed"
            ),
            Reason::TimeLimitAtCap {
                verdict,
                secs,
                partition_max_secs,
            } => {
                let partition = partition_max_secs
                    .map(|s| format!("{s}s"))
                    .unwrap_or_else(|| "unlimited".into());
                write!(
                    f,
                    "{verdict}: the time limit is already at the cap ({secs}s, partition MaxTime {partition}); another retry would time out the same way"
                )
            }
            Reason::Retry {
                verdict,
                delay_secs,
                classification,
                retry,
                budget,
                changes,
            } => {
                write!(
                    f,
                    "{verdict}: resubmit in {delay_secs}s ({classification} retry {retry} of {budget})"
                )?;
                for c in changes {
                    write!(f, ", {c}")?;
                }
                Ok(())
            }
            Reason::RequeuedBySlurm { verdict } => {
                write!(f, "{verdict}: not resubmitted, watching the same job")
            }
            Reason::Continued {
                verdict,
                delay_secs,
                continuation,
                budget,
                evidence,
            } => write!(
                f,
                "{verdict}: continued with the same resources in {delay_secs}s (continuation {continuation} of {budget}); progress: {evidence}"
            ),
            Reason::NoProgress { verdict, evidence } => write!(
                f,
                "{verdict}: not continued, no evidence of progress ({evidence}); waiting for an agent to decide"
            ),
            Reason::ContinuationSpent {
                verdict,
                continuations,
                budget,
                wall_secs,
                max_wall_secs,
            } => write!(
                f,
                "{verdict}: not continued, {continuations} continuations of {budget} and {wall_secs}s of {max_wall_secs}s wall time used; waiting for an agent to decide"
            ),
            Reason::Resolution { given } => f.write_str(given),
            Reason::HeldForPerson {
                given,
                confidence,
                min,
                asked,
            } => {
                let asked = match asked {
                    ResolveAction::Retry => "retry",
                    ResolveAction::Fail | ResolveAction::Hold => "fail",
                };
                write!(
                    f,
                    "{given} (confidence {confidence} is below {min}: held for a person instead of {asked})"
                )
            }
            Reason::Recover { given } => f.write_str(given.as_deref().unwrap_or("manual recover")),
            Reason::CancelledByUser => {
                f.write_str("cancelled with supervisorctl cancel; never retried")
            }
            Reason::RetryRefused { code, stderr } => {
                write!(f, "sbatch refused the retry (exit code {code}): {stderr}")
            }
            Reason::RetryUnprepared { error } => {
                write!(f, "the retry could not be prepared: {error}")
            }
            Reason::LaunchUnconfirmed { tag, last_error } => write!(
                f,
                "could not confirm whether sbatch created the job of launch {tag} (last error: {}); not resubmitting blindly",
                last_error.as_deref().unwrap_or("the daemon stopped during sbatch")
            ),
            Reason::InPlaceRefused { job, error } => write!(
                f,
                "job {job} could not be requeued in place ({error}); resubmitting it as a new job instead"
            ),
            Reason::HeldJobCancelled { job, tag, recorded } => write!(
                f,
                "job {job} carries launch {tag}'s tag but is not its recorded job ({}): a daemon deposed before it could record it submitted it; cancelled while held, it never ran",
                recorded.as_deref().unwrap_or("none")
            ),
            Reason::HeldJobReleased { job } => write!(
                f,
                "job {job}, this attempt's job, was left held (its release after sbatch failed or did not fit the lease): released"
            ),
            Reason::HeldJobAdopted { job, tag } => write!(
                f,
                "job {job} of interrupted launch {tag} was found in Slurm by its tag: adopted as this attempt's job (not submitted again) and released (cluster mode submits every job held)"
            ),
            Reason::JobLost { job, missing_secs } => write!(
                f,
                "job {job} has been missing from squeue for {missing_secs}s while sacct shows no ending: Slurm may have lost it; nothing is retried blindly"
            ),
            Reason::Rewired { job, changes } => {
                write!(f, "job {job} now waits on")?;
                for (i, (chain, from, to)) in changes.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "," };
                    write!(f, "{sep} {to} ({chain}'s new attempt) instead of {from}")?;
                }
                Ok(())
            }
            Reason::PlainJobRewired { job, from, to } => write!(
                f,
                "job {job} (not supervised) waited on {from}; it now waits on this chain's new attempt {to}"
            ),
            Reason::PlainJobNotHeld { job, kind, attempt } => write!(
                f,
                "job {job} (submitted with plain sbatch, not supervised) waits {kind}:{attempt}: Slurm starts it when this attempt ends, even if the supervisor then retries the chain; to wait for the chain's final outcome, submit it with `supervisorctl submit --dependency={kind}:<this chain>`"
            ),
            Reason::Released { upstreams } => write!(
                f,
                "{} ended for good and the dependency holds: released",
                upstreams.join(", ")
            ),
            Reason::DependencyNeverSatisfied {
                kind,
                upstream,
                upstream_state,
            } => write!(
                f,
                "{upstream} ended for good ({upstream_state}), so {kind}:{upstream} can never hold: cancelled"
            ),
            Reason::KilledForDependency { verdict, upstreams } => write!(
                f,
                "{verdict}: Slurm cancelled it because the attempt of {} it waited on failed; that chain is being retried, so this job is resubmitted once it has a new attempt",
                upstreams.join(", ")
            ),
            Reason::Expired {
                waited_secs,
                expire_after_secs,
                action,
            } => {
                let what = match action {
                    crate::config::ExpireAction::Hold => {
                        "held for a person (no agent looks at it again)"
                    }
                    crate::config::ExpireAction::Fail => "failed for good",
                };
                write!(
                    f,
                    "nobody resolved the chain within escalation.expire_after ({expire_after_secs}s; it waited {waited_secs}s): {what} by the site's policy"
                )
            }
        }
    }
}
