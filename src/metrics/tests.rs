use super::*;
use crate::store::Store;

/// The names and label values of every sample line (not the values): what a dashboard
/// depends on.
fn samples(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.rsplit_once(' ').expect("a sample has a value").0)
        .collect()
}

fn value<'a>(text: &'a str, sample: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no sample {sample} in:\n{text}"))
}

#[test]
fn an_empty_store_has_every_state_at_zero() {
    let store = Store::in_memory().unwrap();
    let config = Config::defaults();
    let dir = tempfile::tempdir().unwrap();
    let mut totals = Totals::default();
    let snap = Snapshot::read(
        &store,
        &mut totals,
        &mut RuleFacts::default(),
        &config,
        &dir.path().join("none.db"),
        1_000,
    )
    .unwrap();
    assert_eq!(snap.totals, Totals::default());
    let text = encode(&snap, &config);
    assert!(text.ends_with("# EOF\n"), "{text}");
    for s in ChainState::ALL {
        assert_eq!(
            value(&text, &format!("slurm_supervisor_chains{{state=\"{s}\"}}")),
            "0"
        );
        assert_eq!(
            value(
                &text,
                &format!("slurm_supervisor_resolution_resubmitted_chains{{state=\"{s}\"}}")
            ),
            "0"
        );
    }
    for c in Classification::ALL {
        assert_eq!(
            value(
                &text,
                &format!("slurm_supervisor_endings_total{{classification=\"{c}\"}}")
            ),
            "0"
        );
    }
    for a in ["supervisor", "user", "expiry"] {
        assert_eq!(
            value(
                &text,
                &format!("slurm_supervisor_decisions_by_actor_total{{actor=\"{a}\"}}")
            ),
            "0"
        );
    }
    for a in ["resubmit", "fail", "hold"] {
        assert_eq!(
            value(
                &text,
                &format!("slurm_supervisor_resolutions_total{{action=\"{a}\"}}")
            ),
            "0"
        );
    }
    assert_eq!(value(&text, "slurm_supervisor_breaker_infra_failures"), "0");
    assert_eq!(value(&text, "slurm_supervisor_breaker_threshold"), "10");
    assert_eq!(value(&text, "slurm_supervisor_breaker_open"), "0");
    assert_eq!(value(&text, "slurm_supervisor_quarantined_nodes"), "0");
    assert_eq!(value(&text, "slurm_supervisor_store_size_bytes"), "0");
    assert_eq!(
        value(&text, "slurm_supervisor_pending_failed_oldest_seconds"),
        "0"
    );
    assert_eq!(
        value(
            &text,
            "slurm_supervisor_decisions_total{class=\"R2\",action=\"escalate\"}"
        ),
        "0"
    );
    assert!(
        !text.contains("slurm_supervisor_quarantined_node{"),
        "{text}"
    );
    // Every Slurm command's series is there before its first call.
    for c in SLURM_COMMANDS {
        assert!(
            samples(&text).contains(
                &format!("slurm_supervisor_slurm_commands_total{{command=\"{c}\"}}").as_str()
            ),
            "{text}"
        );
    }
    let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
    for t in [
        "# TYPE slurm_supervisor_chains gauge",
        "# TYPE slurm_supervisor_endings counter",
        "# TYPE slurm_supervisor_decisions counter",
        "# TYPE slurm_supervisor_slurm_command_duration_seconds histogram",
        "# TYPE slurm_supervisor_poll_cycle_duration_seconds histogram",
        "# TYPE slurm_supervisor_store_size_bytes gauge",
    ] {
        assert!(types.contains(&t), "{t} missing from {types:#?}");
    }
}

#[test]
fn the_breaker_and_quarantine_are_shown_as_policy_sees_them() {
    let config = Config::parse(
        "[breaker]\nthreshold = 2\nwindow = \"10m\"\nmin_users = 1\n[quarantine]\nthreshold = 2\n",
        None,
    )
    .unwrap();
    let snap = Snapshot {
        chains: HashMap::new(),
        pending_failed_oldest: 0,
        totals: Totals::default(),
        resubmitted_by_state: HashMap::new(),
        infra_failures: 2,
        quarantined: vec!["n1".into(), "n7".into()],
        store_bytes: 4096,
        rule_proposals: 0,
        rules_not_working: 0,
    };
    let text = encode(&snap, &config);
    assert_eq!(value(&text, "slurm_supervisor_breaker_open"), "1");
    assert_eq!(value(&text, "slurm_supervisor_quarantined_nodes"), "2");
    assert_eq!(
        value(&text, "slurm_supervisor_quarantined_node{node=\"n7\"}"),
        "1"
    );
    assert_eq!(value(&text, "slurm_supervisor_store_size_bytes"), "4096");
    let off = Config::parse("[breaker]\nthreshold = 0\n", None).unwrap();
    assert_eq!(
        value(&encode(&snap, &off), "slurm_supervisor_breaker_open"),
        "0"
    );
}

#[test]
fn slurm_commands_and_cycles_are_counted() {
    let before = LIVE
        .slurm_failures
        .get_or_create(&CommandLabel {
            command: "sinfo".into(),
        })
        .get();
    slurm_command("sinfo", false, Duration::from_millis(20));
    slurm_command("sinfo", true, Duration::from_millis(20));
    let failed_before = LIVE.cycle_failures.get();
    observe_cycle(Duration::from_millis(3), true);
    observe_cycle(Duration::from_millis(3), false);
    let text = encode(
        &Snapshot {
            chains: HashMap::new(),
            pending_failed_oldest: 0,
            totals: Totals::default(),
            resubmitted_by_state: HashMap::new(),
            infra_failures: 0,
            quarantined: vec![],
            store_bytes: 0,
            rule_proposals: 0,
            rules_not_working: 0,
        },
        &Config::defaults(),
    );
    let failures: u64 = value(
        &text,
        "slurm_supervisor_slurm_command_failures_total{command=\"sinfo\"}",
    )
    .parse()
    .unwrap();
    // Other tests in this process may count too; this one's are there.
    assert!(failures > before, "{text}");
    let cycles: u64 = value(&text, "slurm_supervisor_poll_cycle_duration_seconds_count")
        .parse()
        .unwrap();
    assert!(cycles >= 2, "{text}");
    let failed: u64 = value(&text, "slurm_supervisor_poll_cycle_failures_total")
        .parse()
        .unwrap();
    assert!(failed > failed_before, "{text}");
}

#[test]
fn notifications_are_counted_by_channel() {
    let before = LIVE
        .notifications_failed
        .get_or_create(&ChannelLabel { channel: "command" })
        .get();
    notification("mail", true);
    notification("command", false);
    let text = encode(
        &Snapshot {
            chains: HashMap::new(),
            pending_failed_oldest: 0,
            totals: Totals::default(),
            resubmitted_by_state: HashMap::new(),
            infra_failures: 0,
            quarantined: vec![],
            store_bytes: 0,
            rule_proposals: 0,
            rules_not_working: 0,
        },
        &Config::defaults(),
    );
    let sent: u64 = value(
        &text,
        "slurm_supervisor_notifications_sent_total{channel=\"mail\"}",
    )
    .parse()
    .unwrap();
    assert!(sent >= 1, "{text}");
    let failed: u64 = value(
        &text,
        "slurm_supervisor_notification_failures_total{channel=\"command\"}",
    )
    .parse()
    .unwrap();
    assert!(failed > before, "{text}");
}

#[test]
fn cluster_mode_shows_the_role_epoch_journal_and_takeovers() {
    let snap = Snapshot {
        chains: HashMap::new(),
        pending_failed_oldest: 0,
        totals: Totals::default(),
        resubmitted_by_state: HashMap::new(),
        infra_failures: 0,
        quarantined: vec![],
        store_bytes: 0,
        rule_proposals: 0,
        rules_not_working: 0,
    };
    // A single node's daemon has no cluster families.
    let single = encode(&snap, &Config::defaults());
    assert!(!single.contains("cluster_"), "{single}");
    let config = Config::parse("[store]\nurl = \"mysql://ssv@db1/supervisor\"\n", None).unwrap();
    cluster_takeover();
    cluster_role(Some(7), 42);
    let text = encode(&snap, &config);
    assert_eq!(
        value(&text, "slurm_supervisor_cluster_active"),
        "1",
        "{text}"
    );
    assert_eq!(value(&text, "slurm_supervisor_cluster_epoch"), "7");
    assert_eq!(
        value(&text, "slurm_supervisor_cluster_journal_entries"),
        "42"
    );
    let takeovers: u64 = value(&text, "slurm_supervisor_cluster_takeovers_total")
        .parse()
        .unwrap();
    assert!(takeovers >= 1, "{text}");
    cluster_role(None, 43);
    let text = encode(&snap, &config);
    assert_eq!(value(&text, "slurm_supervisor_cluster_active"), "0");
    assert_eq!(value(&text, "slurm_supervisor_cluster_epoch"), "0");
}

/// Every actor policy writes into a record has its kind: a scrape refuses a record whose
/// actor it cannot name (as it refuses an unknown classification), so a new actor must
/// come with its `ActorKind`.
#[test]
fn every_actor_policy_writes_has_a_kind() {
    for (actor, kind) in [
        (crate::domain::policy::SUPERVISOR, ActorKind::Supervisor),
        (crate::domain::policy::EXPIRY, ActorKind::Expiry),
    ] {
        assert_eq!(actor.parse::<ActorKind>().unwrap(), kind);
    }
}

/// The rule counts a scraper keeps from one scrape to the next (`RuleFacts`) are those
/// read anew from the whole store at each step: a new resolution, a retry launched, a
/// retry completing (which writes no decision record), a rule's retries failing, a
/// config that puts the proposed rule in force, and the admin's rejection of it.
#[test]
fn the_kept_rule_counts_are_those_read_anew_after_every_change() {
    use crate::domain::policy::{AttemptEnd, Inputs, Judged};
    use crate::store::suite::sub;
    use crate::store::{AttemptChange, ChainUpdate, Record, Transition};

    let mut s = Store::in_memory().unwrap();
    let config = |extra: &str| {
        Config::parse(
            &format!(
                "[learn]\nagreeing = 2\n\
                 [[rules]]\nname = \"io\"\nkind = \"transient\"\nstderr = \"Input/output error\"\n{extra}"
            ),
            None,
        )
        .unwrap()
    };
    let plain = config("");
    let sig = "5160aa00bb11";
    let verdict = |c: Classification, rule: Option<&str>| -> crate::domain::classify::Verdict {
        serde_json::from_value(serde_json::json!({
            "classification": c, "reason": "FAILED 1:0", "rule": rule, "state": "FAILED",
            "exit_code": "1:0", "nodes": "n1", "req_mem_bytes": null, "max_rss_bytes": null,
            "timelimit_secs": 600, "elapsed_secs": 60, "partition": "p",
        }))
        .unwrap()
    };
    let record = |c, class, action, inputs| Record {
        classification: c,
        class,
        action,
        reason: crate::domain::policy::Reason::Resolution {
            given: "test".into(),
        },
        inputs,
        resolves_latest: false,
        actor: "supervisor".into(),
        infra_failure: false,
        failed_nodes: None,
    };
    let ending = |s: &mut Store, chain, n, state: &str, signature: bool, record, to| {
        let t = Transition {
            attempt: Some(AttemptChange::Ended(Judged {
                n,
                end: AttemptEnd {
                    slurm_state: state.into(),
                    exit_code: "1:0".into(),
                    signature: signature.then(|| sig.into()),
                    signature_text: signature.then(|| "OSError: shard <n> is corrupt".into()),
                    ..Default::default()
                },
                ..Default::default()
            })),
            ..Transition::of(ChainState::Active, to, record)
        };
        assert!(s.apply_one(chain, &t.finish(), 100).unwrap());
    };
    let to = |state| ChainUpdate {
        last_classification: Some(Classification::Ambiguous),
        ..ChainUpdate::to(state)
    };
    let launch = |s: &mut Store, sub_id: i64, chain: i64, job: &str| {
        let l = s
            .begin_relaunch(sub_id, &[chain], 100, |tag| {
                vec![format!("--comment={tag}")]
            })
            .unwrap();
        s.launch_submitted(l.id, job, 100).unwrap();
    };
    let mut kept = RuleFacts::default();
    let mut check = |s: &Store, config: &Config, want: (u64, u64)| {
        let upto = s.last_decision_id().unwrap();
        let anew = RuleFacts::default().counts(s, config, upto).unwrap();
        assert_eq!(anew, want, "read anew");
        assert_eq!(kept.counts(s, config, upto).unwrap(), want, "kept");
    };

    // Two chains fail the same way and wait; a person retries both.
    let mut chains = Vec::new();
    for i in 0..2 {
        let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
        s.launch_submitted(l.id, &format!("{}", 10 + i), 100)
            .unwrap();
        let chain = l.submission_id;
        let escalate = record(
            Classification::Ambiguous,
            RecoveryClass::R2,
            Action::Escalate,
            Inputs::Requeue {
                verdict: verdict(Classification::Ambiguous, None),
            },
        );
        ending(
            &mut s,
            chain,
            1,
            "FAILED",
            true,
            Some(escalate),
            to(ChainState::PendingFailed),
        );
        chains.push((l.submission_id, chain));
    }
    check(&s, &plain, (0, 0));
    for &(_, chain) in &chains {
        let resolution: crate::domain::model::Resolution =
            serde_json::from_value(serde_json::json!({
                "id": format!("c{chain}"), "action": "retry", "reason": "downloaded again",
            }))
            .unwrap();
        let r = Record {
            resolves_latest: true,
            actor: "user:alice".into(),
            ..record(
                Classification::Ambiguous,
                RecoveryClass::R2,
                Action::Resubmit,
                Inputs::Resolution {
                    resolution,
                    plan: crate::domain::model::RetryPlan::default(),
                    dependents: None,
                },
            )
        };
        let t = Transition::of(ChainState::PendingFailed, to(ChainState::Ready), Some(r));
        assert!(s.apply_one(chain, &t.finish(), 100).unwrap());
    }
    // Their retries run: nothing ended yet, no proposal.
    check(&s, &plain, (0, 0));
    for (i, &(sub_id, chain)) in chains.iter().enumerate() {
        launch(&mut s, sub_id, chain, &format!("{}", 20 + i));
    }
    check(&s, &plain, (0, 0));
    // One completes, then the other: no decision record is written, and the proposal
    // appears.
    ending(
        &mut s,
        chains[0].1,
        2,
        "COMPLETED",
        false,
        None,
        to(ChainState::Completed),
    );
    check(&s, &plain, (0, 0));
    ending(
        &mut s,
        chains[1].1,
        2,
        "COMPLETED",
        false,
        None,
        to(ChainState::Completed),
    );
    check(&s, &plain, (1, 0));

    // The rule `io` retries two chains, and both retries fail: it is not working.
    for i in 0..2 {
        let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
        let chain = l.submission_id;
        s.launch_submitted(l.id, &format!("{}", 30 + i), 100)
            .unwrap();
        let retry = Record {
            infra_failure: true,
            ..record(
                Classification::Transient,
                RecoveryClass::R1,
                Action::Resubmit,
                Inputs::Requeue {
                    verdict: verdict(Classification::Transient, Some("io")),
                },
            )
        };
        ending(
            &mut s,
            chain,
            1,
            "FAILED",
            false,
            Some(retry),
            to(ChainState::Ready),
        );
        check(&s, &plain, (1, 0));
        launch(&mut s, l.submission_id, chain, &format!("{}", 40 + i));
        let fail = record(
            Classification::Ambiguous,
            RecoveryClass::R2,
            Action::Escalate,
            Inputs::Requeue {
                verdict: verdict(Classification::Ambiguous, None),
            },
        );
        ending(
            &mut s,
            chain,
            2,
            "FAILED",
            false,
            Some(fail),
            to(ChainState::PendingFailed),
        );
    }
    check(&s, &plain, (1, 1));
    // The proposal put in force (its rule named in the config): no longer waiting.
    let accepted = config(&format!(
        "[[rules]]\nname = \"learnt-{sig}\"\nkind = \"transient\"\nexit_codes = [1]\n"
    ));
    check(&s, &accepted, (0, 1));
    check(&s, &plain, (1, 1));
    // Rejected for everyone by the admin: no longer waiting either.
    s.record_rule_decision(&crate::store::NewRuleDecision {
        proposal: sig,
        owner_uid: None,
        action: crate::domain::learn::RuleAction::Reject,
        actor: "user:root",
        actor_uid: 0,
        reason: "the shards are fixed now",
        rule: None,
        at: 200,
    })
    .unwrap();
    check(&s, &plain, (0, 1));
}
