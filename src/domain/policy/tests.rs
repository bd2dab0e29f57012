//! The decision core's tests: the table, the guards, escalation and every event.

use super::*;
use crate::slurm::types::JobState;

const MIB: u64 = 1024 * 1024;

/// The parts of a transition the ending tests look at.
struct D {
    class: Option<RecoveryClass>,
    action: Action,
    next_state: ChainState,
    reason: Option<Reason>,
    plan: Option<RetryPlan>,
    not_before: Option<i64>,
}

fn chain(state: ChainState) -> Chain {
    Chain {
        id: 1,
        submission_id: 1,
        array_task: None,
        state,
        last_classification: Some(Classification::Ambiguous),
        plan: RetryPlan::default(),
        not_before: None,
        created_at: 0,
        updated_at: 0,
    }
}

fn decide(verdict: &Verdict, history: &ChainHistory, config: &Config, ctx: &Context) -> D {
    let t = transition(
        &chain(ChainState::Active),
        Event::Ended {
            verdict,
            history,
            attempt: &Judged::default(),
        },
        config,
        ctx,
    )
    .expect("an ending always applies");
    D {
        class: t.record.as_ref().map(|r| r.class),
        action: t.action(),
        next_state: t.update.state,
        reason: t.record.map(|r| r.reason),
        plan: t.update.plan,
        not_before: t.update.not_before,
    }
}

fn verdict(c: Classification) -> Verdict {
    Verdict {
        classification: c,
        reason: c.to_string(),
        rule: None,
        proposal: None,
        rule_owner_uid: None,
        state: JobState::Failed,
        exit_code: "0:0".into(),
        nodes: Some("n1".into()),
        req_mem_bytes: Some(100 * MIB),
        max_rss_bytes: Some(263 * MIB),
        timelimit_secs: Some(60),
        elapsed_secs: Some(87),
        partition: "debug".into(),
        completed_steps: Vec::new(),
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
    assert!(
        matches!(d.reason, Some(Reason::MemoryAtCap { mib: 100, .. })),
        "{:?}",
        d.reason
    );
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
        matches!(
            d.reason,
            Some(Reason::ClassBudgetSpent {
                classification: Classification::Oom,
                used: 3,
                budget: 3,
                ..
            })
        ),
        "{:?}",
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
    assert!(
        matches!(
            d.reason,
            Some(Reason::ChainBudgetSpent {
                used: 1,
                max: 1,
                ..
            })
        ),
        "{:?}",
        d.reason
    );
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
    assert!(
        matches!(d.reason, Some(Reason::BreakerOpen { .. })),
        "{:?}",
        d.reason
    );
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
    assert!(
        matches!(
            d.reason,
            Some(Reason::AgentRetryFailedAgain {
                classification: Classification::Oom,
                ..
            })
        ),
        "{:?}",
        d.reason
    );
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
fn a_partial_execution_is_not_retried_unless_restartable() {
    // From real rows: srun step 0 completed, step 1 was killed for memory.
    let rows = crate::slurm::parse::parse_sacct(
        "5|5|OUT_OF_MEMORY|0:125|n1||100M|00:10:00|00:00:05|debug|1000|1795611422\n\
         5.batch|5.batch|OUT_OF_MEMORY|0:125|n1|1024K||||||1795611422\n\
         5.0|5.0|COMPLETED|0:0|n1|1024K||||||1795611422\n\
         5.1|5.1|OUT_OF_MEMORY|0:125|n1|204800K||||||1795611422\n",
    );
    let v = crate::domain::classify::classify(
        &crate::domain::classify::Observation {
            job_id: "5".into(),
            rows: rows.rows,
            stderr_tail: None,
            stdout_tail: None,
            requeued_by_slurm: false,
        },
        &[],
    )
    .unwrap();
    assert_eq!(v.classification, Classification::Oom);
    assert_eq!(v.completed_steps, vec!["5.0".to_string()]);
    for c in [
        Classification::Oom,
        Classification::Timeout,
        Classification::NodeFail,
        Classification::Transient,
    ] {
        let pv = Verdict {
            completed_steps: vec!["5.0".into(), "5.1".into()],
            ..verdict(c)
        };
        let d = decide(&pv, &history(), &cfg(), &ctx(None, 0));
        assert_eq!(
            (d.class, d.action, d.next_state),
            (
                Some(RecoveryClass::R2),
                Action::Escalate,
                ChainState::PendingFailed
            ),
            "{c}"
        );
        let Some(r @ Reason::PartialExecution { .. }) = d.reason else {
            panic!("{c}: {:?}", d.reason)
        };
        assert!(r.to_string().contains("5.0, 5.1"), "{r}");
        // Restartable (the submission's flag or the config's default): retried as usual.
        let h = ChainHistory {
            restartable: true,
            ..history()
        };
        assert_eq!(
            decide(&pv, &h, &cfg(), &ctx(None, 0)).action,
            Action::Resubmit,
            "{c}"
        );
    }
    // A requeue by Slurm itself is watched whatever the steps did: not ours to stop.
    let pv = Verdict {
        completed_steps: vec!["5.0".into()],
        ..verdict(Classification::Preempted)
    };
    let t = transition(
        &chain(ChainState::Active),
        Event::Requeued {
            verdict: &pv,
            n: 1,
            observation: &serde_json::Value::Null,
        },
        &cfg(),
        &ctx(None, 0),
    )
    .unwrap();
    assert_eq!(t.action(), Action::Watch);
    // A permanent error stays permanent, an ambiguous one goes to the agent as before.
    let pv = Verdict {
        completed_steps: vec!["5.0".into()],
        ..verdict(Classification::Permanent)
    };
    assert_eq!(
        decide(&pv, &history(), &cfg(), &ctx(None, 0)).action,
        Action::Fail
    );
}

#[test]
fn a_refused_in_place_requeue_is_recorded_and_resubmitted_now() {
    let mut c = chain(ChainState::Ready);
    c.last_classification = Some(Classification::Oom);
    c.not_before = Some(10);
    let t = transition(
        &c,
        Event::InPlaceRefused {
            job: "42",
            error: "scontrol was refused (exit code 1): Access/permission denied for job 42",
            n: 2,
        },
        &cfg(),
        &ctx(None, 20),
    )
    .unwrap();
    assert_eq!(t.from, ChainState::Ready);
    assert_eq!(t.update.state, ChainState::Ready);
    assert_eq!(t.update.not_before, Some(20));
    assert_eq!(t.update.plan, None, "the plan decided before stays");
    let r = t.record.unwrap();
    // Not a second resubmission (budgets count those): the decided one goes ahead by sbatch.
    assert_eq!(
        (r.class, r.action, r.classification),
        (RecoveryClass::R1, Action::None, Classification::Oom)
    );
    assert_eq!(r.reason.code(), "in_place_refused");
    assert_eq!(
        r.reason.to_string(),
        "job 42 could not be requeued in place (scontrol was refused (exit code 1): Access/permission denied for job 42); resubmitting it as a new job instead"
    );
}

/// Cluster mode's settling of held jobs is a record on the chain that leaves its state as
/// it is: the stray job cancelled, the recorded job released, the adopted one released.
#[test]
fn a_held_job_settled_in_cluster_mode_is_recorded_and_changes_no_state() {
    use super::HeldJobSettled;
    let mut c = chain(ChainState::Active);
    c.not_before = Some(5);
    for (settled, action, code) in [
        (
            HeldJobSettled::Cancelled,
            Action::Cancel,
            "held_job_cancelled",
        ),
        (
            HeldJobSettled::Released,
            Action::Release,
            "held_job_released",
        ),
        (HeldJobSettled::Adopted, Action::Release, "held_job_adopted"),
    ] {
        let t = transition(
            &c,
            Event::HeldJob {
                job: "77",
                tag: "ssv-0badcafe-12",
                recorded: Some("76"),
                settled,
            },
            &cfg(),
            &ctx(None, 20),
        )
        .unwrap();
        assert_eq!(
            (t.from, t.update.state),
            (ChainState::Active, ChainState::Active)
        );
        assert_eq!(t.update.not_before, Some(5));
        assert_eq!(t.attempt, None);
        let r = t.record.unwrap();
        assert_eq!((r.class, r.action), (RecoveryClass::R1, action));
        assert_eq!(r.reason.code(), code);
        assert!(r.reason.to_string().contains("job 77"), "{}", r.reason);
        let inputs = serde_json::to_value(&r.inputs).unwrap();
        assert_eq!(
            inputs,
            serde_json::json!({"job": "77", "tag": "ssv-0badcafe-12", "recorded": "76"})
        );
    }
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
    let Some(Reason::Retry { changes, .. }) = &d.reason else {
        panic!("{:?}", d.reason)
    };
    assert_eq!(changes, &[Change::AvoidQuarantined(vec!["n2".into()])]);
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

#[test]
fn reasons_read_as_before() {
    // The prose is what `history` shows; it must not change with the enum behind it.
    let d = decide(
        &verdict(Classification::Oom),
        &history(),
        &cfg(),
        &ctx(None, 0),
    );
    assert_eq!(
        d.reason.unwrap().to_string(),
        "oom: resubmit in 10s (oom retry 1 of 3), memory 100 MiB -> 329 MiB"
    );
    let mut c = cfg();
    c.escalation.time_max = std::time::Duration::from_secs(60);
    let d = decide(
        &verdict(Classification::Timeout),
        &history(),
        &c,
        &ctx(None, 0),
    );
    assert_eq!(
        d.reason.unwrap().to_string(),
        "timeout: the time limit is already at the cap (60s, partition MaxTime unlimited); another retry would time out the same way"
    );
    let d = decide(
        &verdict(Classification::Permanent),
        &history(),
        &cfg(),
        &ctx(None, 0),
    );
    assert_eq!(
        d.reason.unwrap().to_string(),
        "permanent: a permanent error is not retried"
    );
}

#[test]
fn every_classification_has_a_row_and_a_class() {
    for c in Classification::ALL {
        let d = decide(&verdict(*c), &history(), &cfg(), &ctx(None, 0));
        let expected = match disposition(*c) {
            Disposition::Done => None,
            Disposition::Stop { .. } => Some(RecoveryClass::R3),
            Disposition::AskAgent => Some(RecoveryClass::R2),
            Disposition::Retry { .. } => Some(RecoveryClass::R1),
        };
        assert_eq!(d.class, expected, "{c}");
        assert_eq!(d.class.is_none(), *c == Classification::Completed, "{c}");
    }
}

#[test]
fn a_requeue_is_watched_and_counts_for_the_breaker() {
    let v = verdict(Classification::NodeFail);
    let t = transition(
        &chain(ChainState::Active),
        Event::Requeued {
            verdict: &v,
            n: 1,
            observation: &serde_json::Value::Null,
        },
        &cfg(),
        &ctx(None, 0),
    )
    .unwrap();
    let r = t.record.unwrap();
    assert_eq!((r.class, r.action), (RecoveryClass::R1, Action::Watch));
    assert_eq!(t.update.state, ChainState::Active);
    assert!(r.infra_failure);
    assert_eq!(r.failed_nodes.as_deref(), Some("n1"));
    assert!(matches!(r.reason, Reason::RequeuedBySlurm { .. }));
}

fn resolution(action: ResolveAction, confidence: Option<f64>) -> Resolution {
    Resolution {
        id: "c1".into(),
        action,
        mem: None,
        time: None,
        partition: None,
        exclude: Vec::new(),
        reason: "looks transient".into(),
        confidence,
        dry_run: false,
    }
}

#[test]
fn an_unsure_resolution_is_held_for_a_person() {
    let extra = RetryPlan {
        mem_mb: Some(500),
        ..Default::default()
    };
    let resolve = |action, confidence| {
        transition(
            &chain(ChainState::PendingFailed),
            Event::Resolved {
                resolution: &resolution(action, confidence),
                plan: &extra,
                actor: "user:alice",
            },
            &cfg(),
            &ctx(None, 50),
        )
        .unwrap()
    };
    let sure = resolve(ResolveAction::Retry, Some(0.9));
    assert_eq!(resolution_action(&sure), ResolveAction::Retry);
    assert_eq!(sure.update.state, ChainState::Ready);
    assert_eq!(sure.update.plan.as_ref().unwrap().mem_mb, Some(500));
    assert_eq!(sure.update.not_before, Some(50));
    let r = sure.record.unwrap();
    assert_eq!(
        (r.class, r.actor.as_str()),
        (RecoveryClass::R2, "user:alice")
    );
    assert!(r.resolves_latest);

    let unsure = resolve(ResolveAction::Retry, Some(0.5));
    assert_eq!(resolution_action(&unsure), ResolveAction::Hold);
    assert_eq!(unsure.update.state, ChainState::PendingFailed);
    let reason = unsure.record.unwrap().reason;
    assert!(
        matches!(
            reason,
            Reason::HeldForPerson {
                asked: ResolveAction::Retry,
                ..
            }
        ),
        "{reason:?}"
    );
    assert_eq!(
        reason.to_string(),
        "looks transient (confidence 0.5 is below 0.7: held for a person instead of retry)"
    );

    let fail = resolve(ResolveAction::Fail, None);
    assert_eq!(fail.update.state, ChainState::Failed);
    assert_eq!(fail.effects, vec![Effect::ListDependents]);
}

#[test]
fn requests_on_a_chain_in_the_wrong_state_are_refused() {
    let r = resolution(ResolveAction::Retry, None);
    let none = RetryPlan::default();
    let ev = Event::Resolved {
        resolution: &r,
        plan: &none,
        actor: "user:a",
    };
    assert_eq!(
        transition(&chain(ChainState::Active), ev, &cfg(), &ctx(None, 0)),
        Err(Refusal::NotPendingFailed(ChainState::Active))
    );
    let rec = RecoverRequest {
        id: "c1".into(),
        mem: None,
        time: None,
        reason: None,
        dry_run: false,
    };
    let ev = Event::Recovered {
        request: &rec,
        plan: &none,
        actor: "user:a",
    };
    assert_eq!(
        transition(&chain(ChainState::Ready), ev, &cfg(), &ctx(None, 0)),
        Err(Refusal::NotRecoverable(ChainState::Ready))
    );
    let t = transition(&chain(ChainState::Failed), ev, &cfg(), &ctx(None, 0)).unwrap();
    assert_eq!(t.record.unwrap().reason.to_string(), "manual recover");
    let cancel = Event::Cancelled {
        job: Some("12"),
        actor: "user:a",
    };
    assert_eq!(
        transition(&chain(ChainState::Completed), cancel, &cfg(), &ctx(None, 0)),
        Err(Refusal::AlreadyEnded)
    );
    let t = transition(&chain(ChainState::Active), cancel, &cfg(), &ctx(None, 0)).unwrap();
    assert_eq!(t.effects, vec![Effect::Scancel("12".into())]);
    assert_eq!(t.update.state, ChainState::Cancelled);
}

#[test]
fn escalations_wait_for_an_agent() {
    let argv = vec!["job.sh".to_string()];
    for ev in [
        Event::RetryRefused {
            code: 1,
            stderr: "bad",
            argv: &argv,
            n: 1,
        },
        Event::RetryUnprepared { error: "bad" },
        Event::LaunchUnconfirmed {
            tag: "ssv-x-L1-c1.2",
            last_error: None,
            argv: &argv,
            n: 1,
        },
        Event::JobLost {
            job: "12",
            missing_since: 10,
            n: 1,
        },
    ] {
        let t = transition(&chain(ChainState::Ready), ev, &cfg(), &ctx(None, 100)).unwrap();
        let r = t.record.unwrap();
        assert_eq!(
            (r.class, r.action, t.update.state, r.actor.as_str()),
            (
                RecoveryClass::R2,
                Action::Escalate,
                ChainState::PendingFailed,
                "supervisor"
            )
        );
    }
}

#[test]
fn every_reason_name_is_documented() {
    let doc = include_str!("../../../docs/json-schemas.md");
    let argv: Vec<String> = Vec::new();
    let v = verdict(Classification::Oom);
    let h = history();
    let mut reasons = vec![
        Reason::Completed,
        Reason::Recover { given: None },
        Reason::CancelledByUser,
    ];
    // Every other name comes out of a transition somewhere in these tests; listing them
    // through the enum keeps the list honest when a variant is added.
    reasons.extend([
        Reason::CancelNotRetried {
            verdict: v.reason.clone(),
        },
        Reason::DeadlineNotRetried {
            verdict: v.reason.clone(),
        },
        Reason::PermanentNotRetried {
            verdict: v.reason.clone(),
        },
        Reason::NeedsAgent {
            verdict: v.reason.clone(),
        },
        Reason::AgentRetryFailedAgain {
            verdict: v.reason.clone(),
            classification: Classification::Oom,
        },
        Reason::BreakerOpen {
            verdict: v.reason.clone(),
            failures: 1,
            window_secs: 1,
            threshold: 1,
        },
        Reason::ClassBudgetSpent {
            verdict: v.reason.clone(),
            classification: Classification::Oom,
            used: 1,
            budget: 1,
        },
        Reason::ChainBudgetSpent {
            verdict: v.reason.clone(),
            used: h.resubmits,
            max: h.max_retries,
        },
        Reason::PartialExecution {
            verdict: v.reason.clone(),
            completed_steps: vec!["5.0".into()],
        },
        Reason::MemoryUnknown {
            verdict: v.reason.clone(),
        },
        Reason::MemoryAtCap {
            verdict: v.reason.clone(),
            mib: 1,
        },
        Reason::TimeLimitUnknown {
            verdict: v.reason.clone(),
        },
        Reason::TimeLimitAtCap {
            verdict: v.reason.clone(),
            secs: 1,
            partition_max_secs: None,
        },
        Reason::Retry {
            verdict: v.reason.clone(),
            delay_secs: 1,
            classification: Classification::Oom,
            retry: 1,
            budget: 1,
            changes: Vec::new(),
        },
        Reason::RequeuedBySlurm {
            verdict: v.reason.clone(),
        },
        Reason::Resolution {
            given: String::new(),
        },
        Reason::HeldForPerson {
            given: String::new(),
            confidence: 0.1,
            min: 0.7,
            asked: ResolveAction::Retry,
        },
        Reason::RetryRefused {
            code: 1,
            stderr: argv.join(" "),
        },
        Reason::RetryUnprepared {
            error: String::new(),
        },
        Reason::LaunchUnconfirmed {
            tag: String::new(),
            last_error: None,
        },
        Reason::Expired {
            waited_secs: 1,
            expire_after_secs: 1,
            action: crate::config::ExpireAction::Hold,
        },
        Reason::JobLost {
            job: String::new(),
            missing_secs: 0,
        },
        Reason::Rewired {
            job: String::new(),
            changes: Vec::new(),
        },
        Reason::PlainJobRewired {
            job: String::new(),
            from: String::new(),
            to: String::new(),
        },
        Reason::PlainJobNotHeld {
            job: String::new(),
            kind: String::new(),
            attempt: String::new(),
        },
        Reason::Released {
            upstreams: Vec::new(),
        },
        Reason::DependencyNeverSatisfied {
            kind: String::new(),
            upstream: String::new(),
            upstream_state: String::new(),
        },
        Reason::KilledForDependency {
            verdict: v.reason.clone(),
            upstreams: Vec::new(),
        },
        Reason::InPlaceRefused {
            job: String::new(),
            error: String::new(),
        },
        Reason::HeldJobCancelled {
            job: String::new(),
            tag: String::new(),
            recorded: None,
        },
        Reason::HeldJobReleased { job: String::new() },
        Reason::HeldJobAdopted {
            job: String::new(),
            tag: String::new(),
        },
        Reason::Continued {
            verdict: String::new(),
            delay_secs: 0,
            continuation: 1,
            budget: 1,
            evidence: String::new(),
        },
        Reason::NoProgress {
            verdict: String::new(),
            evidence: String::new(),
        },
        Reason::ContinuationSpent {
            verdict: String::new(),
            continuations: 0,
            budget: 0,
            wall_secs: 0,
            max_wall_secs: 0,
        },
    ]);
    for r in &reasons {
        // A new variant must be added above: this match has no fallback.
        match r {
            Reason::Completed
            | Reason::CancelNotRetried { .. }
            | Reason::DeadlineNotRetried { .. }
            | Reason::PermanentNotRetried { .. }
            | Reason::NeedsAgent { .. }
            | Reason::AgentRetryFailedAgain { .. }
            | Reason::BreakerOpen { .. }
            | Reason::ClassBudgetSpent { .. }
            | Reason::ChainBudgetSpent { .. }
            | Reason::PartialExecution { .. }
            | Reason::MemoryUnknown { .. }
            | Reason::MemoryAtCap { .. }
            | Reason::TimeLimitUnknown { .. }
            | Reason::TimeLimitAtCap { .. }
            | Reason::Retry { .. }
            | Reason::RequeuedBySlurm { .. }
            | Reason::Resolution { .. }
            | Reason::HeldForPerson { .. }
            | Reason::Recover { .. }
            | Reason::CancelledByUser
            | Reason::RetryRefused { .. }
            | Reason::RetryUnprepared { .. }
            | Reason::LaunchUnconfirmed { .. }
            | Reason::JobLost { .. }
            | Reason::Expired { .. }
            | Reason::Rewired { .. }
            | Reason::PlainJobRewired { .. }
            | Reason::PlainJobNotHeld { .. }
            | Reason::Released { .. }
            | Reason::DependencyNeverSatisfied { .. }
            | Reason::KilledForDependency { .. }
            | Reason::InPlaceRefused { .. }
            | Reason::HeldJobCancelled { .. }
            | Reason::HeldJobReleased { .. }
            | Reason::HeldJobAdopted { .. }
            | Reason::Continued { .. }
            | Reason::NoProgress { .. }
            | Reason::ContinuationSpent { .. } => {}
        }
        if *r != Reason::Completed {
            assert!(
                doc.contains(&format!("`{}`", r.code())),
                "{} is not in docs/json-schemas.md",
                r.code()
            );
        }
    }
    assert_eq!(reasons.len(), 38, "one of each variant");
}

fn expiring(action: crate::config::ExpireAction) -> Config {
    let mut c = cfg();
    c.escalation.expire_after = Some(std::time::Duration::from_secs(100));
    c.escalation.expire_action = action;
    c
}

#[test]
fn an_expired_chain_is_held_or_failed_by_the_expiry() {
    use crate::config::ExpireAction;
    for (action, state, act) in [
        (ExpireAction::Hold, ChainState::PendingFailed, Action::Hold),
        (ExpireAction::Fail, ChainState::Failed, Action::Fail),
    ] {
        let t = transition(
            &chain(ChainState::PendingFailed),
            Event::Expired {
                pending_since: 1000,
            },
            &expiring(action),
            &Context::at(1100),
        )
        .unwrap();
        assert_eq!(t.from, ChainState::PendingFailed);
        assert_eq!(t.update.state, state);
        let r = t.record.as_ref().unwrap();
        assert_eq!(
            (r.class, r.action, r.actor.as_str(), r.reason.code()),
            (RecoveryClass::R3, act, EXPIRY, "expired")
        );
        assert!(r.resolves_latest);
        assert_eq!(r.classification, Classification::Ambiguous);
        assert_eq!(
            r.reason.to_string(),
            format!(
                "nobody resolved the chain within escalation.expire_after (100s; it waited 100s): {} by the site's policy",
                if action == ExpireAction::Hold {
                    "held for a person (no agent looks at it again)"
                } else {
                    "failed for good"
                }
            )
        );
        assert_eq!(
            t.effects.contains(&Effect::ListDependents),
            action == ExpireAction::Fail
        );
    }
}

#[test]
fn expiry_applies_only_to_a_chain_that_waited_long_enough() {
    use crate::config::ExpireAction;
    let c = expiring(ExpireAction::Fail);
    let pending = chain(ChainState::PendingFailed);
    let ev = Event::Expired {
        pending_since: 1000,
    };
    assert_eq!(
        transition(&pending, ev, &c, &Context::at(1099)),
        Err(Refusal::NotExpired)
    );
    assert_eq!(
        transition(&pending, ev, &cfg(), &Context::at(99_999)),
        Err(Refusal::NotExpired),
        "expiry is off by default"
    );
    assert_eq!(
        transition(&chain(ChainState::Ready), ev, &c, &Context::at(1100)),
        Err(Refusal::NotPendingFailed(ChainState::Ready))
    );
}

/// Issue 21, item 5: one user's failures alone never open the breaker of a daemon for
/// several users; a per-user daemon's one user counts whole.
#[test]
fn the_breaker_weighs_each_users_failures_at_most_threshold_over_min_users() {
    use crate::domain::policy::breaker_failures;
    // bob's ten transient failures and one of alice's: 5 + 1 of a threshold of 10.
    assert_eq!(breaker_failures(&[(1002, 10), (1001, 1)], 10, 2), 6);
    // Failures across users: a sick cluster.
    assert_eq!(breaker_failures(&[(1002, 6), (1001, 5)], 10, 2), 10);
    assert_eq!(breaker_failures(&[(1, 4), (2, 4), (3, 4)], 10, 3), 12);
    // A per-user daemon (min_users 1) counts every failure.
    assert_eq!(breaker_failures(&[(1001, 10)], 10, 1), 10);
    // An odd threshold rounds the share up; a threshold below min_users still counts one.
    assert_eq!(breaker_failures(&[(1, 9), (2, 9)], 3, 2), 4);
    assert_eq!(breaker_failures(&[(1, 9)], 1, 5), 1);
    assert_eq!(breaker_failures(&[], 10, 2), 0);
    assert_eq!(
        breaker_failures(&[(1, u32::MAX), (2, u32::MAX)], 10, 1),
        u32::MAX
    );
}

/// A continuing chain's history: `used` continuations so far, its progress path before
/// and after this attempt.
fn continuing(
    used: u32,
    before: Option<crate::domain::continuation::Progress>,
    now: Option<crate::domain::continuation::Progress>,
) -> ChainHistory {
    ChainHistory {
        plan: RetryPlan {
            time_secs: Some(60),
            ..Default::default()
        },
        continuation: Some(Box::new(ContinuationFacts {
            spec: crate::domain::continuation::Continuation {
                progress: now.as_ref().map(|_| "ckpt".into()),
                requeue_exit: vec![85],
            },
            used,
            wall_secs: used as u64 * 60,
            before,
            now,
            started_ns: Some(0),
        })),
        ..history()
    }
}

fn file(size: u64) -> crate::domain::continuation::Progress {
    crate::domain::continuation::Progress::File {
        size,
        mtime_ns: size as i64 * 1_000_000_000,
        sha256: None,
    }
}

#[test]
fn a_continuing_timeout_with_progress_is_continued_with_the_same_resources() {
    let h = continuing(2, Some(file(10)), Some(file(20)));
    let d = decide(
        &verdict(Classification::Timeout),
        &h,
        &cfg(),
        &ctx(Some(60), 100),
    );
    assert_eq!(d.action, Action::Continue);
    assert_eq!(d.class, Some(RecoveryClass::R1));
    assert_eq!(d.next_state, ChainState::Ready);
    // The same plan: no more time, whatever the timeout budget says.
    assert_eq!(d.plan, Some(h.plan.clone()));
    assert_eq!(d.not_before, Some(100));
    let Some(Reason::Continued {
        continuation,
        budget,
        evidence,
        ..
    }) = d.reason
    else {
        panic!("{:?}", d.reason);
    };
    assert_eq!((continuation, budget), (3, 100));
    assert!(evidence.contains("ckpt changed"), "{evidence}");
    // The timeout budget is not touched: with it spent, a continuation still goes on.
    let mut spent = h.clone();
    spent.resubmits_by_class.insert("timeout".into(), 99);
    spent.resubmits = 99;
    let d = decide(
        &verdict(Classification::Timeout),
        &spent,
        &cfg(),
        &ctx(Some(60), 100),
    );
    assert_eq!(d.action, Action::Continue);
}

#[test]
fn no_progress_means_no_continuation() {
    // The path did not change.
    let h = continuing(1, Some(file(10)), Some(file(10)));
    let d = decide(
        &verdict(Classification::Timeout),
        &h,
        &cfg(),
        &ctx(None, 100),
    );
    assert_eq!(d.action, Action::Escalate);
    assert_eq!(d.next_state, ChainState::PendingFailed);
    assert!(
        matches!(&d.reason, Some(Reason::NoProgress { evidence, .. }) if evidence.contains("did not change")),
        "{:?}",
        d.reason
    );
    // The path is not there.
    let h = continuing(
        0,
        None,
        Some(crate::domain::continuation::Progress::Missing),
    );
    let d = decide(
        &verdict(Classification::Timeout),
        &h,
        &cfg(),
        &ctx(None, 100),
    );
    assert_eq!(d.action, Action::Escalate);
    // An attempt shorter than continuation.min_attempt, with no path.
    let mut short = verdict(Classification::Timeout);
    short.elapsed_secs = Some(5);
    let d = decide(&short, &continuing(0, None, None), &cfg(), &ctx(None, 100));
    assert!(
        matches!(d.reason, Some(Reason::NoProgress { .. })),
        "{:?}",
        d.reason
    );
    // A preemption without progress is no failure of the job's: retried as for any chain.
    let h = continuing(1, Some(file(10)), Some(file(10)));
    let d = decide(
        &verdict(Classification::Preempted),
        &h,
        &cfg(),
        &ctx(None, 100),
    );
    assert_eq!(d.action, Action::Resubmit);
}

#[test]
fn continuations_stop_at_their_budget_and_wall_time() {
    let mut c = cfg();
    c.retry.budgets = crate::config::Config::parse("[retry.budgets]\ncontinuation = 2\n", None)
        .unwrap()
        .retry
        .budgets;
    let h = continuing(2, Some(file(10)), Some(file(20)));
    let d = decide(&verdict(Classification::Timeout), &h, &c, &ctx(None, 100));
    assert!(
        matches!(
            d.reason,
            Some(Reason::ContinuationSpent {
                continuations: 2,
                budget: 2,
                ..
            })
        ),
        "{:?}",
        d.reason
    );
    let mut c = cfg();
    c.continuation.max_wall_time = crate::config::Dur(std::time::Duration::from_secs(100));
    let d = decide(&verdict(Classification::Timeout), &h, &c, &ctx(None, 100));
    assert!(
        matches!(d.reason, Some(Reason::ContinuationSpent { .. })),
        "{:?}",
        d.reason
    );
}

#[test]
fn a_requeue_exit_code_asks_for_a_continuation() {
    let mut v = verdict(Classification::Ambiguous);
    v.exit_code = "85:0".into();
    let h = continuing(0, None, Some(file(20)));
    let d = decide(&v, &h, &cfg(), &ctx(None, 100));
    assert_eq!(d.action, Action::Continue);
    // Another code is an ordinary failure.
    v.exit_code = "1:0".into();
    let d = decide(&v, &h, &cfg(), &ctx(None, 100));
    assert_eq!(d.action, Action::Escalate);
    assert!(matches!(d.reason, Some(Reason::NeedsAgent { .. })));
    // Out of memory is never a continuation: it gets more memory.
    let d = decide(&verdict(Classification::Oom), &h, &cfg(), &ctx(None, 100));
    assert_eq!(d.action, Action::Resubmit);
}

#[test]
fn a_job_ended_by_the_warning_signal_met_its_limit() {
    // No trap for SIGUSR1: the batch shell dies of the warning (FAILED 0:10).
    let mut v = verdict(Classification::Ambiguous);
    v.exit_code = "0:10".into();
    let d = decide(
        &v,
        &continuing(0, None, Some(file(20))),
        &cfg(),
        &ctx(None, 100),
    );
    assert_eq!(d.action, Action::Continue);
    // A chain that does not continue: an ordinary failure.
    let d = decide(&v, &history(), &cfg(), &ctx(None, 100));
    assert_eq!(d.action, Action::Escalate);
}
