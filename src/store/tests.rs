use super::*;

fn sub(tasks: Option<Vec<u32>>) -> NewSubmission {
    NewSubmission {
        owner_uid: 1000,
        user: "alice".into(),
        argv: vec!["--mem=100M".into(), "job.sh".into()],
        cwd: "/tmp".into(),
        env: vec![("HOME".into(), "/home/alice".into())],
        script_name: Some("job.sh".into()),
        script: Some(b"#!/bin/sh\necho hi\n".to_vec()),
        max_retries: 5,
        restartable: false,
        array_tasks: tasks,
    }
}

fn decision(c: Classification, action: Action) -> Record {
    Record {
        classification: c,
        class: RecoveryClass::R1,
        action,
        reason: crate::policy::Reason::Resolution {
            given: "test".into(),
        },
        inputs: crate::policy::Inputs::None {},
        resolves_latest: false,
        actor: "supervisor".into(),
        infra_failure: false,
        failed_nodes: None,
    }
}

/// A transition from `from` with `record`.
fn tr(from: ChainState, update: &ChainUpdate, record: Record) -> Transition {
    Transition {
        from,
        update: update.clone(),
        record: Some(record),
        effects: Vec::new(),
    }
}

#[test]
fn submission_launch_and_lookup() {
    let mut s = Store::in_memory().unwrap();
    let l = s
        .create_submission(&sub(None), 100, |tag| {
            vec![format!("--comment={tag}"), "job.sh".into()]
        })
        .unwrap();
    assert!(
        l.tag
            .starts_with(&format!("ssv-{}-L{}-c1.1", s.instance(), l.id)),
        "{}",
        l.tag
    );
    assert_eq!(l.argv[0], format!("--comment={}", l.tag));
    assert_eq!(s.open_launches().unwrap().len(), 1);
    s.launch_submitted(l.id, "42", 101).unwrap();
    assert!(s.open_launches().unwrap().is_empty());
    assert_eq!(s.resolve("42").unwrap(), vec![1]);
    assert_eq!(s.resolve("c1").unwrap(), vec![1]);
    assert!(s.resolve("43").unwrap().is_empty());
    assert!(s.resolve("c9").unwrap().is_empty());
    let a = s.live_attempts().unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].slurm_job_id.as_deref(), Some("42"));
    let sb = s.submission(l.submission_id).unwrap();
    assert_eq!(sb.script.as_deref(), Some(&b"#!/bin/sh\necho hi\n"[..]));
}

#[test]
fn arrays_get_a_chain_per_task() {
    let mut s = Store::in_memory().unwrap();
    let l = s
        .create_submission(&sub(Some(vec![1, 2, 5])), 100, |_| vec![])
        .unwrap();
    s.launch_submitted(l.id, "14", 101).unwrap();
    assert_eq!(s.resolve("14").unwrap(), vec![1, 2, 3]);
    assert_eq!(s.resolve("14_5").unwrap(), vec![3]);
    // "1" must not match "14_x" nor "14".
    assert!(s.resolve("1").unwrap().is_empty());
    let ids: Vec<_> = s
        .live_attempts()
        .unwrap()
        .into_iter()
        .map(|a| a.slurm_job_id.unwrap())
        .collect();
    assert_eq!(ids, vec!["14_1", "14_2", "14_5"]);
}

#[test]
fn relaunch_takes_next_attempt_number_and_plan() {
    let mut s = Store::in_memory().unwrap();
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    let plan = RetryPlan {
        mem_mb: Some(400),
        ..Default::default()
    };
    let update = ChainUpdate {
        state: ChainState::Ready,
        last_classification: Some(Classification::Oom),
        plan: Some(plan.clone()),
        not_before: Some(200),
    };
    s.record_ending(
        1,
        1,
        &serde_json::json!({}),
        &AttemptEnd::default(),
        &tr(
            ChainState::Active,
            &update,
            decision(Classification::Oom, Action::Resubmit),
        ),
        150,
    )
    .unwrap();
    assert_eq!(s.chains_in_state(ChainState::Ready).unwrap().len(), 1);
    let l2 = s
        .begin_relaunch(l.submission_id, &[1], 200, |_| vec![])
        .unwrap();
    s.launch_submitted(l2.id, "43", 201).unwrap();
    let a = s.attempts(1).unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a[1].n, 2);
    assert_eq!(a[1].plan, plan);
    assert_eq!(s.resolve("42").unwrap(), vec![1]);
    assert_eq!(s.resolve("43").unwrap(), vec![1]);
    assert_eq!(
        s.resubmits_by_class(1).unwrap(),
        vec![("oom".to_string(), 1)]
    );
    assert_eq!(s.chain(1).unwrap().unwrap().state, ChainState::Active);
}

#[test]
fn decisions_are_append_only() {
    let mut s = Store::in_memory().unwrap();
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    let update = ChainUpdate {
        state: ChainState::PendingFailed,
        last_classification: Some(Classification::Ambiguous),
        plan: None,
        not_before: None,
    };
    s.record_ending(
        1,
        1,
        &serde_json::json!({}),
        &AttemptEnd::default(),
        &tr(
            ChainState::Active,
            &update,
            decision(Classification::Ambiguous, Action::Escalate),
        ),
        150,
    )
    .unwrap();
    let err = s
        .conn
        .execute("UPDATE decisions SET reason = 'x'", [])
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    let err = s.conn.execute("DELETE FROM decisions", []).unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
}

#[test]
fn a_resolution_races_safely() {
    let mut s = Store::in_memory().unwrap();
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    let pf = ChainUpdate {
        state: ChainState::PendingFailed,
        last_classification: Some(Classification::Ambiguous),
        plan: None,
        not_before: None,
    };
    s.record_ending(
        1,
        1,
        &serde_json::json!({}),
        &AttemptEnd::default(),
        &tr(
            ChainState::Active,
            &pf,
            decision(Classification::Ambiguous, Action::Escalate),
        ),
        150,
    )
    .unwrap();
    let fail = ChainUpdate {
        state: ChainState::Failed,
        last_classification: None,
        plan: None,
        not_before: None,
    };
    let resolution = Record {
        resolves_latest: true,
        ..decision(Classification::Ambiguous, Action::Fail)
    };
    let t = tr(ChainState::PendingFailed, &fail, resolution);
    assert_eq!(s.decide_chains(&[(1, t.clone())], 160).unwrap(), None);
    assert_eq!(s.decide_chains(&[(1, t)], 161).unwrap(), Some(1));
    let ds = s.decisions(1).unwrap();
    assert_eq!(ds.len(), 2);
    assert_eq!(ds[1].resolves, Some(ds[0].id), "points at what it resolves");
    assert_eq!(ds[1].reason_code.as_deref(), Some("resolution"));
}

#[test]
fn reopening_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.db");
    let inst = {
        let mut s = Store::open(&p).unwrap();
        s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
        s.instance().to_string()
    };
    let s = Store::open(&p).unwrap();
    assert_eq!(s.instance(), inst);
    assert_eq!(s.open_launches().unwrap().len(), 1);
}

#[test]
fn discard_removes_a_refused_first_submission() {
    let mut s = Store::in_memory().unwrap();
    let l = s
        .create_submission(&sub(Some(vec![1, 2])), 100, |_| vec![])
        .unwrap();
    s.discard_submission(l.id).unwrap();
    assert!(s.chains(None).unwrap().is_empty());
    assert!(s.open_launches().unwrap().is_empty());
}

#[test]
fn an_operation_on_an_arrays_chains_commits_all_or_nothing() {
    let mut s = Store::in_memory().unwrap();
    let l = s
        .create_submission(&sub(Some(vec![1, 2])), 100, |_| vec![])
        .unwrap();
    s.launch_submitted(l.id, "14", 101).unwrap();
    let fail = ChainUpdate {
        state: ChainState::Failed,
        last_classification: None,
        plan: None,
        not_before: None,
    };
    let d = || decision(Classification::Ambiguous, Action::Fail);
    // Chain 2 is active, not pending_failed as the second transition expects.
    let items = [
        (1, tr(ChainState::Active, &fail, d())),
        (2, tr(ChainState::PendingFailed, &fail, d())),
    ];
    assert_eq!(s.decide_chains(&items, 150).unwrap(), Some(2));
    assert_eq!(s.chain(1).unwrap().unwrap().state, ChainState::Active);
    assert!(s.decisions(1).unwrap().is_empty(), "nothing of it is kept");
}

#[test]
fn the_breaker_and_quarantine_count_columns_written_with_the_record() {
    let mut s = Store::in_memory().unwrap();
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    let ready = ChainUpdate {
        state: ChainState::Ready,
        last_classification: Some(Classification::NodeFail),
        plan: None,
        not_before: Some(200),
    };
    let rec = Record {
        infra_failure: true,
        failed_nodes: Some("n1".into()),
        ..decision(Classification::NodeFail, Action::Resubmit)
    };
    s.record_ending(
        1,
        1,
        &serde_json::json!({}),
        &AttemptEnd::default(),
        &tr(ChainState::Active, &ready, rec),
        150,
    )
    .unwrap();
    assert_eq!(s.infra_failures_since(100).unwrap(), 1);
    assert_eq!(s.infra_failures_since(151).unwrap(), 0);
    assert_eq!(
        s.node_failures_since(100).unwrap(),
        vec![("n1".to_string(), 150)]
    );
}

#[test]
fn every_chain_summary_is_read_once_in_order_across_pages() {
    let mut s = Store::in_memory().unwrap();
    for i in 0..2_500 {
        let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
        if i % 2 == 0 {
            s.launch_submitted(l.id, &(1000 + i).to_string(), 101)
                .unwrap();
        }
    }
    let mut seen = Vec::new();
    s.each_chain_summary(None, |c| -> Result<()> {
        assert_eq!(c.submitted, u32::from(c.chain.id % 2 == 1));
        seen.push(c.chain.id);
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, (1..=2_500).collect::<Vec<i64>>());
    let mut none = 0;
    s.each_chain_summary(Some(4242), |_| -> Result<()> {
        none += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(none, 0, "another owner's chains are not read");
}
