//! What stops an automatic retry, in the order it is checked: the first guard that speaks
//! sends the chain to an agent with its reason.

use super::reason::Reason;
use super::table::is_infrastructure;
use super::{ChainHistory, Context};
use crate::config::Config;
use crate::domain::classify::Verdict;

/// What a guard looks at.
pub struct Facts<'a> {
    pub verdict: &'a Verdict,
    pub history: &'a ChainHistory,
    pub config: &'a Config,
    pub ctx: &'a Context,
}

type Guard = fn(&Facts) -> Option<Reason>;

/// The guards, in order.
pub const GUARDS: &[Guard] = &[
    partial_execution,
    agent_retry_failed_again,
    breaker,
    class_budget,
    chain_budget,
];

/// The first guard's objection to an automatic retry, if any.
pub fn objection(f: &Facts) -> Option<Reason> {
    GUARDS.iter().find_map(|g| g(f))
}

/// srun steps completed before the attempt failed: running the script again would repeat
/// their side effects, which only the user can say is safe (`--restartable`). Only the
/// supervisor's own resubmission is held back; a requeue Slurm does by itself (preemption,
/// node failure) is not ours to stop.
fn partial_execution(f: &Facts) -> Option<Reason> {
    let steps = &f.verdict.completed_steps;
    (!steps.is_empty() && !f.history.restartable).then(|| Reason::PartialExecution {
        verdict: f.verdict.reason.clone(),
        completed_steps: steps.clone(),
    })
}

/// A recovery an agent asked for that failed the same way goes back to the agent: the
/// supervisor does not start a loop of its own on top of a fix that did not work.
fn agent_retry_failed_again(f: &Facts) -> Option<Reason> {
    let c = f.verdict.classification;
    (f.history.agent_retry_of == Some(c)).then(|| Reason::AgentRetryFailedAgain {
        verdict: f.verdict.reason.clone(),
        classification: c,
    })
}

/// Many infrastructure failures across chains in a short time: the cluster is sick, and
/// resubmitting into it would only add load. Failures about the job itself still retry.
fn breaker(f: &Facts) -> Option<Reason> {
    let b = &f.config.breaker;
    let open = is_infrastructure(f.verdict.classification)
        && b.threshold > 0
        && f.ctx.recent_infra_failures >= b.threshold;
    open.then(|| Reason::BreakerOpen {
        verdict: f.verdict.reason.clone(),
        failures: f.ctx.recent_infra_failures,
        window_secs: b.window.0.as_secs(),
        threshold: b.threshold,
    })
}

/// The per-classification budget (`retry.budgets`).
fn class_budget(f: &Facts) -> Option<Reason> {
    let c = f.verdict.classification;
    let budget = super::table::budget(f.config, c);
    let used = f.history.used(c);
    (used >= budget).then(|| Reason::ClassBudgetSpent {
        verdict: f.verdict.reason.clone(),
        classification: c,
        used,
        budget,
    })
}

/// The chain's own cap on resubmissions (`--max-retries`, else `retry.max_retries`).
fn chain_budget(f: &Facts) -> Option<Reason> {
    let h = f.history;
    (h.resubmits >= h.max_retries).then(|| Reason::ChainBudgetSpent {
        verdict: f.verdict.reason.clone(),
        used: h.resubmits,
        max: h.max_retries,
    })
}
