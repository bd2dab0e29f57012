//! What to do about a classified ending: pure, no I/O; time and randomness are passed in.
//!
//! The decision core is `decide(verdict, history, config, context)`; the context carries
//! the partition limit, quarantined nodes, the breaker's count, the time and the jitter.
//! It implements the "default action" column of the README's table ("What happens to an
//! ending"), the per-class and per-chain budgets, the resource escalation, and the
//! backoff ladder.

use crate::classify::Verdict;
use crate::config::Config;
use crate::model::{Action, ChainState, Classification, RecoveryClass, RetryPlan};
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
}

/// The decision on one ending.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// `None` for a success: a success gets no recovery record.
    pub class: Option<RecoveryClass>,
    pub action: Action,
    pub next_state: ChainState,
    pub reason: String,
    /// For `Resubmit`: the resources of the next attempt (cumulative over the chain).
    pub plan: Option<RetryPlan>,
    /// For `Resubmit`: not before this time (unix seconds).
    pub not_before: Option<i64>,
}

impl Decision {
    fn new(
        class: Option<RecoveryClass>,
        action: Action,
        next_state: ChainState,
        reason: impl Into<String>,
    ) -> Self {
        Decision {
            class,
            action,
            next_state,
            reason: reason.into(),
            plan: None,
            not_before: None,
        }
    }

    fn escalate(reason: impl Into<String>) -> Self {
        Decision::new(
            Some(RecoveryClass::R2),
            Action::Escalate,
            ChainState::PendingFailed,
            reason,
        )
    }
}

const MIB: u64 = 1024 * 1024;

/// The delay before resubmission number `n` (0-based): `initial * multiplier^n`, capped,
/// then moved by `jitter` (a number in [-1, 1] from the caller) times the jitter fraction.
pub fn backoff_secs(config: &Config, n: u32, jitter: f64) -> u64 {
    let r = &config.retry;
    let base = r.backoff_initial.as_secs_f64() * r.backoff_multiplier.powi(n.min(64) as i32);
    let capped = base.min(r.backoff_max.as_secs_f64());
    let j = jitter.clamp(-1.0, 1.0) * r.backoff_jitter;
    (capped * (1.0 + j)).max(0.0).round() as u64
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

/// Classifications that point at the cluster rather than the job; a burst of them across
/// chains opens the breaker.
pub fn is_infrastructure(c: Classification) -> bool {
    matches!(
        c,
        Classification::NodeFail | Classification::BootFail | Classification::Transient
    )
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

/// Decides what to do about `verdict`.
pub fn decide(
    verdict: &Verdict,
    history: &ChainHistory,
    config: &Config,
    ctx: &Context,
) -> Decision {
    use Classification as C;
    let c = verdict.classification;
    let (partition_max_secs, now, jitter) = (ctx.partition_max_secs, ctx.now, ctx.jitter);
    match c {
        C::Completed => {
            return Decision::new(None, Action::None, ChainState::Completed, "completed")
        }
        C::Cancelled => {
            return Decision::new(
                Some(RecoveryClass::R3),
                Action::Cancel,
                ChainState::Cancelled,
                format!("{}: a cancel is never retried", verdict.reason),
            )
        }
        C::Deadline => {
            return Decision::new(
                Some(RecoveryClass::R3),
                Action::Fail,
                ChainState::Failed,
                format!("{}: a missed deadline is not retried", verdict.reason),
            )
        }
        C::Permanent => {
            return Decision::new(
                Some(RecoveryClass::R3),
                Action::Fail,
                ChainState::Failed,
                format!("{}: a permanent error is not retried", verdict.reason),
            )
        }
        C::Ambiguous => {
            return Decision::escalate(format!(
                "{}: waiting for an agent to decide",
                verdict.reason
            ))
        }
        C::Preempted | C::NodeFail | C::BootFail | C::Oom | C::Timeout | C::Transient => {}
    }

    // A recovery an agent asked for that failed the same way goes back to the agent: the
    // supervisor does not start a loop of its own on top of a fix that did not work.
    if history.agent_retry_of == Some(c) {
        return Decision::escalate(format!(
            "{}: the retry an agent or person asked for failed the same way ({c}); back to them",
            verdict.reason
        ));
    }

    let b = &config.breaker;
    if is_infrastructure(c) && b.threshold > 0 && ctx.recent_infra_failures >= b.threshold {
        return Decision::escalate(format!(
            "{}: automatic resubmission is paused, {} infrastructure failures across chains in the last {}s (breaker threshold {})",
            verdict.reason,
            ctx.recent_infra_failures,
            b.window.0.as_secs(),
            b.threshold
        ));
    }

    let budget = config.retry.budgets.for_class(c);
    let used = history
        .resubmits_by_class
        .get(c.as_str())
        .copied()
        .unwrap_or(0);
    if used >= budget {
        return Decision::escalate(format!(
            "{}: the {c} retry budget is spent ({used} of {budget} used)",
            verdict.reason
        ));
    }
    if history.resubmits >= history.max_retries {
        return Decision::escalate(format!(
            "{}: the chain's retry budget is spent ({} of {} used)",
            verdict.reason, history.resubmits, history.max_retries
        ));
    }

    let mut next = RetryPlan::default();
    let mut change = String::new();
    match c {
        C::Oom => {
            let current = verdict
                .req_mem_bytes
                .or(history.plan.mem_mb.map(|m| m * MIB));
            let Some(current) = current else {
                return Decision::escalate(format!(
                    "{}: ReqMem is unknown, so more memory cannot be computed",
                    verdict.reason
                ));
            };
            let by_factor = current as f64 * config.escalation.mem_factor;
            let by_rss = verdict.max_rss_bytes.unwrap_or(0) as f64 * config.escalation.mem_headroom;
            let want = by_factor
                .max(by_rss)
                .min(config.escalation.mem_max_bytes as f64) as u64;
            let want_mb = want.div_ceil(MIB);
            if want_mb <= current.div_ceil(MIB) {
                return Decision::escalate(format!(
                    "{}: memory is already at the cap ({} MiB); another retry would fail the same way",
                    verdict.reason,
                    current.div_ceil(MIB)
                ));
            }
            next.mem_mb = Some(want_mb);
            change = format!(", memory {} MiB -> {want_mb} MiB", current.div_ceil(MIB));
        }
        C::Timeout => {
            let Some(current) = verdict.timelimit_secs.or(history.plan.time_secs) else {
                return Decision::escalate(format!(
                    "{}: the time limit is unknown, so a longer one cannot be computed",
                    verdict.reason
                ));
            };
            let mut cap = config.escalation.time_max.as_secs();
            if let Some(p) = partition_max_secs {
                cap = cap.min(p);
            }
            let want = ((current as f64 * config.escalation.time_factor) as u64).min(cap);
            // Slurm limits are whole minutes.
            let want = want / 60 * 60;
            if want <= current {
                return Decision::escalate(format!(
                    "{}: the time limit is already at the cap ({}s, partition MaxTime {}); another retry would time out the same way",
                    verdict.reason,
                    current,
                    partition_max_secs.map(|s| format!("{s}s")).unwrap_or_else(|| "unlimited".into())
                ));
            }
            next.time_secs = Some(want);
            change = format!(", time limit {current}s -> {want}s");
        }
        C::NodeFail | C::BootFail => {
            if let Some(n) = &verdict.nodes {
                next.exclude.push(n.clone());
                change = format!(", excluding {n}");
            }
        }
        _ => {}
    }
    let fresh: Vec<String> = ctx
        .quarantined
        .iter()
        .filter(|n| !history.plan.exclude.contains(n) && !next.exclude.contains(n))
        .cloned()
        .collect();
    if !fresh.is_empty() {
        change.push_str(&format!(", avoiding quarantined {}", fresh.join(",")));
        next.exclude.extend(fresh);
    }
    let plan = history.plan.merged(&next);
    let delay = backoff_secs(config, history.resubmits, jitter);
    Decision {
        class: Some(RecoveryClass::R1),
        action: Action::Resubmit,
        next_state: ChainState::Ready,
        reason: format!(
            "{}: resubmit in {delay}s ({c} retry {} of {budget}){change}",
            verdict.reason,
            used + 1
        ),
        plan: Some(plan),
        not_before: Some(now + delay as i64),
    }
}

/// The decision recorded when Slurm requeued a job itself: keep watching the same job id.
pub fn decide_requeued(verdict: &Verdict) -> Decision {
    Decision::new(
        Some(RecoveryClass::R1),
        Action::Watch,
        ChainState::Active,
        format!("{}: not resubmitted, watching the same job", verdict.reason),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::types::JobState;

    fn verdict(c: Classification) -> Verdict {
        Verdict {
            classification: c,
            reason: c.to_string(),
            rule: None,
            state: JobState::Failed,
            exit_code: "0:0".into(),
            nodes: Some("n1".into()),
            req_mem_bytes: Some(100 * MIB),
            max_rss_bytes: Some(263 * MIB),
            timelimit_secs: Some(60),
            elapsed_secs: Some(87),
            partition: "debug".into(),
        }
    }

    fn history() -> ChainHistory {
        ChainHistory {
            max_retries: 5,
            ..Default::default()
        }
    }

    fn cfg() -> Config {
        Config::defaults()
    }

    fn ctx(partition_max_secs: Option<u64>, now: i64) -> Context {
        Context {
            partition_max_secs,
            now,
            ..Default::default()
        }
    }

    #[test]
    fn default_actions() {
        use Classification as C;
        let cases = [
            (C::Completed, None, Action::None, ChainState::Completed),
            (
                C::Cancelled,
                Some(RecoveryClass::R3),
                Action::Cancel,
                ChainState::Cancelled,
            ),
            (
                C::Deadline,
                Some(RecoveryClass::R3),
                Action::Fail,
                ChainState::Failed,
            ),
            (
                C::Permanent,
                Some(RecoveryClass::R3),
                Action::Fail,
                ChainState::Failed,
            ),
            (
                C::Ambiguous,
                Some(RecoveryClass::R2),
                Action::Escalate,
                ChainState::PendingFailed,
            ),
            (
                C::Preempted,
                Some(RecoveryClass::R1),
                Action::Resubmit,
                ChainState::Ready,
            ),
            (
                C::NodeFail,
                Some(RecoveryClass::R1),
                Action::Resubmit,
                ChainState::Ready,
            ),
            (
                C::BootFail,
                Some(RecoveryClass::R1),
                Action::Resubmit,
                ChainState::Ready,
            ),
            (
                C::Oom,
                Some(RecoveryClass::R1),
                Action::Resubmit,
                ChainState::Ready,
            ),
            (
                C::Timeout,
                Some(RecoveryClass::R1),
                Action::Resubmit,
                ChainState::Ready,
            ),
            (
                C::Transient,
                Some(RecoveryClass::R1),
                Action::Resubmit,
                ChainState::Ready,
            ),
        ];
        for (c, class, action, state) in cases {
            let d = decide(&verdict(c), &history(), &cfg(), &ctx(None, 1000));
            assert_eq!(
                (d.class, d.action, d.next_state),
                (class, action, state),
                "{c}"
            );
        }
    }

    #[test]
    fn oom_takes_the_larger_of_factor_and_rss() {
        let d = decide(
            &verdict(Classification::Oom),
            &history(),
            &cfg(),
            &ctx(None, 0),
        );
        // 100 MiB * 2.0 = 200; 263 MiB * 1.25 = 328.75 -> 329.
        assert_eq!(d.plan.unwrap().mem_mb, Some(329));
        let mut v = verdict(Classification::Oom);
        v.max_rss_bytes = None;
        assert_eq!(
            decide(&v, &history(), &cfg(), &ctx(None, 0))
                .plan
                .unwrap()
                .mem_mb,
            Some(200)
        );
    }

    #[test]
    fn oom_at_the_cap_escalates() {
        let mut c = cfg();
        c.escalation.mem_max_bytes = 100 * MIB;
        let d = decide(&verdict(Classification::Oom), &history(), &c, &ctx(None, 0));
        assert_eq!(d.action, Action::Escalate);
        assert!(d.reason.contains("already at the cap"), "{}", d.reason);
    }

    #[test]
    fn timeout_is_capped_by_the_partition() {
        let d = decide(
            &verdict(Classification::Timeout),
            &history(),
            &cfg(),
            &ctx(Some(30 * 60), 0),
        );
        assert_eq!(d.plan.unwrap().time_secs, Some(120));
        let mut v = verdict(Classification::Timeout);
        v.timelimit_secs = Some(25 * 60);
        assert_eq!(
            decide(&v, &history(), &cfg(), &ctx(Some(30 * 60), 0))
                .plan
                .unwrap()
                .time_secs,
            Some(30 * 60)
        );
        v.timelimit_secs = Some(30 * 60);
        assert_eq!(
            decide(&v, &history(), &cfg(), &ctx(Some(30 * 60), 0)).action,
            Action::Escalate
        );
    }

    #[test]
    fn node_fail_excludes_and_accumulates() {
        let mut h = history();
        h.plan.exclude = vec!["n2".into()];
        let d = decide(
            &verdict(Classification::NodeFail),
            &h,
            &cfg(),
            &ctx(None, 0),
        );
        assert_eq!(d.plan.unwrap().exclude, vec!["n2", "n1"]);
    }

    #[test]
    fn budgets_escalate() {
        let mut h = history();
        h.resubmits_by_class.insert("oom".into(), 3);
        h.resubmits = 3;
        let d = decide(&verdict(Classification::Oom), &h, &cfg(), &ctx(None, 0));
        assert_eq!(
            (d.class, d.next_state),
            (Some(RecoveryClass::R2), ChainState::PendingFailed)
        );
        assert!(
            d.reason.contains("oom retry budget is spent"),
            "{}",
            d.reason
        );

        let mut h = history();
        h.max_retries = 1;
        h.resubmits = 1;
        let d = decide(
            &verdict(Classification::Preempted),
            &h,
            &cfg(),
            &ctx(None, 0),
        );
        assert!(d.reason.contains("chain's retry budget"), "{}", d.reason);
    }

    #[test]
    fn the_breaker_escalates_infrastructure_failures_only() {
        let c = cfg();
        let busy = Context {
            recent_infra_failures: c.breaker.threshold,
            ..Default::default()
        };
        let d = decide(&verdict(Classification::NodeFail), &history(), &c, &busy);
        assert_eq!(
            (d.class, d.action),
            (Some(RecoveryClass::R2), Action::Escalate)
        );
        assert!(d.reason.contains("paused"), "{}", d.reason);
        // An OOM is about the job, not the cluster: it is still retried.
        assert_eq!(
            decide(&verdict(Classification::Oom), &history(), &c, &busy).action,
            Action::Resubmit
        );
        let calm = Context {
            recent_infra_failures: c.breaker.threshold - 1,
            ..Default::default()
        };
        assert_eq!(
            decide(&verdict(Classification::NodeFail), &history(), &c, &calm).action,
            Action::Resubmit
        );
    }

    #[test]
    fn an_agents_retry_that_fails_the_same_way_goes_back_to_the_agent() {
        let h = ChainHistory {
            agent_retry_of: Some(Classification::Oom),
            ..history()
        };
        let d = decide(&verdict(Classification::Oom), &h, &cfg(), &ctx(None, 0));
        assert_eq!(
            (d.class, d.action),
            (Some(RecoveryClass::R2), Action::Escalate)
        );
        assert!(d.reason.contains("failed the same way"), "{}", d.reason);
        // Failing another way is judged on its own.
        let d = decide(
            &verdict(Classification::Preempted),
            &h,
            &cfg(),
            &ctx(None, 0),
        );
        assert_eq!(d.action, Action::Resubmit);
    }

    #[test]
    fn quarantine_needs_repeats_and_decays() {
        let c = cfg(); // threshold 2 within 1h, kept 2h after the latest failure
        let f = |v: &[(&str, i64)]| {
            v.iter()
                .map(|(n, t)| (n.to_string(), *t))
                .collect::<Vec<_>>()
        };
        assert!(quarantined(&f(&[("n1", 100)]), &c, 200).is_empty());
        assert_eq!(
            quarantined(&f(&[("n1", 100), ("n1", 200), ("n2", 150)]), &c, 300),
            vec!["n1"]
        );
        assert!(
            quarantined(&f(&[("n1", 100), ("n1", 200)]), &c, 200 + 7200).is_empty(),
            "decays"
        );
        assert!(
            quarantined(&f(&[("n1", 0), ("n1", 4000)]), &c, 4100).is_empty(),
            "too far apart"
        );
        let ctx = Context {
            quarantined: vec!["n2".into()],
            ..Default::default()
        };
        let d = decide(&verdict(Classification::Preempted), &history(), &c, &ctx);
        assert_eq!(d.plan.unwrap().exclude, vec!["n2"]);
        assert!(d.reason.contains("quarantined n2"), "{}", d.reason);
    }

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let c = cfg(); // 10s, x2, max 600s, jitter 0.2
        assert_eq!(backoff_secs(&c, 0, 0.0), 10);
        assert_eq!(backoff_secs(&c, 3, 0.0), 80);
        assert_eq!(backoff_secs(&c, 30, 0.0), 600);
        assert_eq!(backoff_secs(&c, 0, 1.0), 12);
        assert_eq!(backoff_secs(&c, 0, -1.0), 8);
        let d = decide(
            &verdict(Classification::Preempted),
            &history(),
            &c,
            &ctx(None, 1000),
        );
        assert_eq!(d.not_before, Some(1010));
    }
}
