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
        (crate::policy::SUPERVISOR, ActorKind::Supervisor),
        (crate::policy::EXPIRY, ActorKind::Expiry),
    ] {
        assert_eq!(actor.parse::<ActorKind>().unwrap(), kind);
    }
}
