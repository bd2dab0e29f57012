//! An ending of a continuing chain (docs/continuation.md): a job that checkpoints met its
//! time limit, was preempted and not requeued by Slurm, or exited with a code it named
//! "continue me". With evidence of progress it is continued with the same resources,
//! under its own budget and wall-time cap; without, it waits for an agent with that
//! evidence and is never continued in a loop.

use super::{supervisor, ChainHistory, Context, Inputs, Record, Transition};
use crate::config::Config;
use crate::domain::classify::Verdict;
use crate::domain::continuation::{Continuation, Progress};
use crate::domain::model::{Action, ChainState, Classification, RecoveryClass};
use serde::{Deserialize, Serialize};

use super::reason::Reason;

/// What the daemon knows of a continuing chain when one of its attempts ends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinuationFacts {
    /// What the submission asked for.
    pub spec: Continuation,
    /// Continuations so far.
    pub used: u32,
    /// Wall time (seconds) the chain's continued attempts used so far.
    pub wall_secs: u64,
    /// The progress path when the previous attempt was continued (`None`: this is the
    /// first attempt to end, or the submission names no path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Progress>,
    /// The progress path as it is now, after this attempt (`None`: no path named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<Progress>,
    /// When this attempt started (unix nanoseconds), for a first attempt's progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ns: Option<i64>,
}

/// Why an ending is one a continuation answers, if it is.
fn continuable(verdict: &Verdict, spec: &Continuation) -> Option<&'static str> {
    match verdict.classification {
        Classification::Timeout => Some("time limit"),
        Classification::Preempted => Some("preemption"),
        Classification::Completed
        | Classification::Cancelled
        | Classification::Deadline
        | Classification::Oom
        | Classification::NodeFail
        | Classification::BootFail => None,
        Classification::Transient | Classification::Permanent | Classification::Ambiguous => {
            let mut parts = verdict.exit_code.split(':');
            let code = parts.next().and_then(|c| c.parse::<u8>().ok());
            let signal = parts.next().and_then(|c| c.parse::<u8>().ok());
            if signal == Some(SIGUSR1) {
                // The warning before the limit ended a job that does not trap it: it met
                // its time limit early (docs/continuation.md).
                return Some("the warning before its time limit (SIGUSR1), which it does not trap");
            }
            spec.requeue_exit
                .contains(&code?)
                .then_some("its own exit code")
        }
    }
}

/// The warning a continuing job gets (`--signal=B:USR1@...`), as Linux numbers it.
const SIGUSR1: u8 = 10;

/// The decision on an ending of a continuing chain, or `None` when the ending is not one
/// a continuation answers (the disposition table decides it as for any chain).
pub(super) fn ended(
    verdict: &Verdict,
    history: &ChainHistory,
    facts: &ContinuationFacts,
    config: &Config,
    ctx: &Context,
    inputs: &Inputs,
    to: impl Fn(ChainState, Option<Record>) -> Transition,
) -> Option<Transition> {
    let why = continuable(verdict, &facts.spec)?;
    let v = verdict.reason.clone();
    let elapsed = verdict.elapsed_secs.unwrap_or(0);
    let min = config.continuation.min_attempt.0.as_secs();
    let long_enough = elapsed >= min;
    let moved = match (&facts.now, &facts.spec.progress) {
        (Some(p), _) => p.moved_since(facts.before.as_ref(), facts.started_ns),
        // A path named but not read (the attempt was too short to look): no evidence.
        (None, Some(_)) => false,
        // No path: the attempt's length is the evidence.
        (None, None) => true,
    };
    let path = facts.spec.progress.as_deref().unwrap_or("");
    let evidence = {
        let mut e = format!("{why}; ran {elapsed}s (at least {min}s counts)");
        if let (None, Some(p)) = (&facts.now, &facts.spec.progress) {
            e.push_str(&format!(
                "; {p} not looked at: the attempt ran too short to count"
            ));
        }
        if let Some(now) = &facts.now {
            let before = facts
                .before
                .as_ref()
                .map(Progress::describe)
                .unwrap_or_else(|| "nothing recorded before this attempt".into());
            let verdict = if moved { "changed" } else { "did not change" };
            e.push_str(&format!(
                "; {path} {verdict}: before {before}, now {}",
                now.describe()
            ));
        }
        e
    };
    let ask_agent = |reason: Reason| {
        let r = Record {
            reason,
            ..supervisor(verdict, RecoveryClass::R2, Action::Escalate, inputs.clone())
        };
        to(ChainState::PendingFailed, Some(r))
    };
    if !(moved && long_enough) {
        if verdict.classification == Classification::Preempted {
            // Nothing the job did: a preemption is retried as for any chain.
            return None;
        }
        return Some(ask_agent(Reason::NoProgress {
            verdict: v,
            evidence,
        }));
    }
    let budget = config.retry.budgets.continuation();
    let max_wall = config.continuation.max_wall_time.0.as_secs();
    let wall = facts.wall_secs.saturating_add(elapsed);
    if facts.used >= budget || wall > max_wall {
        return Some(ask_agent(Reason::ContinuationSpent {
            verdict: v,
            continuations: facts.used,
            budget,
            wall_secs: wall,
            max_wall_secs: max_wall,
        }));
    }
    let delay = config.continuation.backoff.0.as_secs();
    let r = Record {
        reason: Reason::Continued {
            verdict: v,
            delay_secs: delay,
            continuation: facts.used + 1,
            budget,
            evidence,
        },
        ..supervisor(verdict, RecoveryClass::R1, Action::Continue, inputs.clone())
    };
    let mut t = to(ChainState::Ready, Some(r));
    t.update.plan = Some(history.plan.clone());
    t.update.not_before = Some(ctx.now + delay as i64);
    Some(t)
}
