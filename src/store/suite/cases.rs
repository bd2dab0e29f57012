//! The cases of the store's suite (see `suite`), each a function of how its store is
//! made; `CASES` lists them for the other backends.

use super::*;

cases! {
fn plain_sbatch_choices(journaled) {
    let mut s = journaled();
    assert_eq!(s.plain_opt(1000).unwrap(), None);
    s.set_plain_opt(1000, true, 100).unwrap();
    s.set_plain_opt(1001, false, 101).unwrap();
    assert!(s.set_plain_opt(1000, false, 102).unwrap());
    assert_eq!(s.plain_opt(1000).unwrap(), Some(false));
    // The same choice again changes nothing and writes nothing, the journal included.
    let seq = s.journal_seq();
    let rows = dump(&s);
    for t in 103..110 {
        assert!(!s.set_plain_opt(1000, false, t).unwrap());
    }
    assert_eq!(s.journal_seq(), seq);
    assert_eq!(dump(&s), rows);
    assert_eq!(s.plain_opts().unwrap(), vec![(1000, false), (1001, false)]);
}

/// Each user's totals follow every write that changes them, on the writer and (the case
/// ends with a replica made from the journal) on every replica, and equal what the rows
/// say at every step.
fn user_totals_follow_every_write(journaled) {
    let mut s = journaled();
    let check = |s: &Store| {
        let t = s.recount_user_totals().unwrap();
        assert_eq!(t.kept, t.counted);
    };
    let new = sub(Some(vec![1, 2]));
    let bytes = (new.script.as_ref().unwrap().len()
        + json(&new.argv).len()
        + json(&new.env).len()
        + new.cwd.len()) as u64;
    let l = s.create_submission(&new, 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    let alice = s.user_totals(1000).unwrap();
    assert_eq!(alice, UserTotals { open_chains: 2, open_bytes: bytes, decision_bytes: 0, rule_bytes: 0 });
    assert_eq!(s.user_totals(2000).unwrap(), UserTotals::default());
    check(&s);
    // A decision on an open chain counts; the submission counts once while a chain of
    // it is open.
    let pending = ChainUpdate {
        last_classification: Some(Classification::Ambiguous),
        ..ChainUpdate::to(ChainState::PendingFailed)
    };
    let d = decision(Classification::Ambiguous, Action::Escalate);
    assert!(record_ending(&mut s, 1, 1, tr(ChainState::Active, &pending, d.clone()), 200).unwrap());
    let one = s.user_totals(1000).unwrap();
    assert_eq!((one.open_chains, one.open_bytes), (2, bytes));
    let record = s.decisions(1).unwrap().pop().unwrap();
    let record_bytes = (record.reason.len() + json(&record.inputs).len()) as u64;
    assert_eq!(one.decision_bytes, record_bytes);
    check(&s);
    // Ending chain 1 takes its records and the chain off; ending chain 2 the submission.
    let failed = tr(ChainState::PendingFailed, &ChainUpdate::to(ChainState::Failed), d.clone());
    assert!(s.apply_one(1, &failed, 300).unwrap());
    let after = s.user_totals(1000).unwrap();
    assert_eq!(after, UserTotals { open_chains: 1, open_bytes: bytes, decision_bytes: 0, rule_bytes: 0 });
    check(&s);
    let done = tr(ChainState::Active, &ChainUpdate::to(ChainState::Completed), d.clone());
    assert!(record_ending(&mut s, 2, 1, done, 310).unwrap());
    assert_eq!(s.user_totals(1000).unwrap(), UserTotals::default());
    check(&s);
    // A recovered chain is open again, with its records.
    let again = tr(ChainState::Failed, &ChainUpdate::to(ChainState::Ready), d);
    assert!(s.apply_one(1, &again, 400).unwrap());
    let back = s.user_totals(1000).unwrap();
    assert_eq!((back.open_chains, back.open_bytes), (1, bytes));
    assert!(back.decision_bytes > record_bytes);
    check(&s);
    // A discarded submission takes what it added away again; another user's is theirs.
    let bob = NewSubmission { owner_uid: 2000, user: "bob".into(), ..sub(None) };
    let lb = s.create_submission(&bob, 500, |_| vec![]).unwrap();
    assert_eq!(s.user_totals(2000).unwrap().open_chains, 1);
    assert_eq!(s.user_totals(1000).unwrap(), back);
    s.discard_submission(lb.id).unwrap();
    assert_eq!(s.user_totals(2000).unwrap(), UserTotals::default());
    check(&s);
}

/// Decisions about rule proposals: records of their own, oldest first; a user sees those
/// for everyone and their own; a user's count in their totals for good, an admin's in no
/// one's; a replica made from the journal holds the same rows.
fn rule_decisions_are_records_of_their_own(journaled) {
    use crate::domain::learn::{Change, ProposedRule, RuleAction};
    let mut s = journaled();
    let rule = ProposedRule {
        name: "learnt-0123456789ab".into(),
        kind: Classification::Transient,
        exit_codes: vec![1],
        stderr: "shard [0-9]+".into(),
        change: Change::Unchanged,
    };
    let d = |owner, action, reason, at| NewRuleDecision {
        proposal: "0123456789ab",
        owner_uid: owner,
        action,
        actor: "user:x",
        actor_uid: owner.unwrap_or(0),
        reason,
        rule: (action == RuleAction::Accept).then_some(&rule),
        at,
    };
    let admin = s.record_rule_decision(&d(None, RuleAction::Reject, "not for everyone", 100)).unwrap();
    assert_eq!(s.user_totals(0).unwrap(), UserTotals::default());
    let alice = s.record_rule_decision(&d(Some(1000), RuleAction::Accept, "", 200)).unwrap();
    assert!(alice > admin);
    s.record_rule_decision(&d(Some(2000), RuleAction::Reject, "no", 300)).unwrap();
    let t = s.user_totals(1000).unwrap();
    assert_eq!(t.rule_bytes, json(&rule).len() as u64);
    assert_eq!(t.kept_bytes(), t.rule_bytes);
    assert_eq!(s.user_totals(2000).unwrap().rule_bytes, 2);
    // A rejection that keeps no bytes (no reason) makes no row of zeros, and the recount
    // makes none either (the trigger deletes a row of zeros: the two agree).
    s.record_rule_decision(&d(Some(3000), RuleAction::Reject, "", 310)).unwrap();
    assert_eq!(s.user_totals(3000).unwrap(), UserTotals::default());
    let t = s.recount_user_totals().unwrap();
    assert_eq!(t.kept, t.counted);
    // Their row made and emptied again (a submission, discarded): the trigger deletes
    // it, and the recount has none.
    let carol = NewSubmission { owner_uid: 3000, user: "carol".into(), ..sub(None) };
    let lc = s.create_submission(&carol, 320, |_| vec![]).unwrap();
    assert_eq!(s.user_totals(3000).unwrap().open_chains, 1);
    s.discard_submission(lc.id).unwrap();
    let t = s.recount_user_totals().unwrap();
    assert_eq!(t.kept, t.counted);
    let all = s.rule_decisions(None).unwrap();
    assert_eq!(all.iter().map(|r| r.at).collect::<Vec<_>>(), [100, 200, 300, 310]);
    assert_eq!(all[1].rule.as_ref(), Some(&rule));
    assert_eq!((all[0].owner_uid, all[0].action, all[0].reason.as_str()), (None, RuleAction::Reject, "not for everyone"));
    let alices = s.rule_decisions(Some(1000)).unwrap();
    assert_eq!(alices.iter().map(|r| r.at).collect::<Vec<_>>(), [100, 200]);
    assert_eq!(s.rule_decisions_of(1000).unwrap().len(), 1);
    // A batch's owners in one query: everyone's and theirs, no one else's.
    let batch = s.rule_decisions_for(&[1000, 3000].into()).unwrap();
    assert_eq!(batch.iter().map(|r| r.at).collect::<Vec<_>>(), [100, 200, 310]);
    let none = s.rule_decisions_for(&Default::default()).unwrap();
    assert_eq!(none.iter().map(|r| r.at).collect::<Vec<_>>(), [100]);
    assert!(s.any_user_rule_decisions().unwrap());
}

fn plain_sbatch_not_recovered_and_refusals(journaled) {
    let mut s = journaled();
    let l = s
        .create_submission(&sub(None), 100, |tag| {
            vec![format!("--comment={tag}"), "job.sh".into()]
        })
        .unwrap();
    assert!(s.not_recovered(l.submission_id).unwrap().is_empty());
    let items = vec!["its environment".to_string(), "--gres (gpu:1)".to_string()];
    s.note_not_recovered(l.submission_id, &items).unwrap();
    assert_eq!(s.not_recovered(l.submission_id).unwrap(), items);

    s.note_plain_refused("77", 1000, "a job array", 100).unwrap();
    s.note_plain_refused("77", 1001, "not theirs", 101).unwrap();
    s.note_plain_refused("77", 1000, "a job array, again", 102).unwrap();
    // The same word again writes nothing, the journal included.
    let seq = s.journal_seq();
    for t in 103..110 {
        s.note_plain_refused("77", 1000, "a job array, again", t).unwrap();
    }
    assert_eq!(s.journal_seq(), seq);
    let r = s.plain_refusals("77").unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].owner_uid, r[0].reason.as_str(), r[0].noted_at), (1000, "a job array, again", 102));
    assert!(s.plain_refusals("78").unwrap().is_empty());
    // Kept 30 days: a later refusal drops the old ones.
    s.note_plain_refused("79", 1000, "later", 102 + 31 * 24 * 3600).unwrap();
    assert!(s.plain_refusals("77").unwrap().is_empty());
    assert_eq!(s.plain_refusals("79").unwrap().len(), 1);
}

fn submission_launch_and_lookup(journaled) {
    let mut s = journaled();
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

fn arrays_get_a_chain_per_task(journaled) {
    let mut s = journaled();
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

fn relaunch_takes_next_attempt_number_and_plan(journaled) {
    let mut s = journaled();
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
        clock: Clock::Keep,
        changes_chain: true,
    };
    record_ending(
        &mut s,
        1,
        1,
        tr(
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

fn decisions_are_append_only(journaled) {
    let mut s = journaled();
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    let update = ChainUpdate {
        state: ChainState::PendingFailed,
        last_classification: Some(Classification::Ambiguous),
        plan: None,
        not_before: None,
        clock: Clock::Keep,
        changes_chain: true,
    };
    record_ending(
        &mut s,
        1,
        1,
        tr(
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

fn a_resolution_races_safely(journaled) {
    let mut s = journaled();
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    let pf = ChainUpdate {
        state: ChainState::PendingFailed,
        last_classification: Some(Classification::Ambiguous),
        plan: None,
        not_before: None,
        clock: Clock::Keep,
        changes_chain: true,
    };
    record_ending(
        &mut s,
        1,
        1,
        tr(
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
        clock: Clock::Keep,
        changes_chain: true,
    };
    let resolution = Record {
        resolves_latest: true,
        ..decision(Classification::Ambiguous, Action::Fail)
    };
    let t = tr(ChainState::PendingFailed, &fail, resolution);
    assert_eq!(decide_chains(&mut s, &[(1, t.clone())], 160).unwrap(), None);
    assert_eq!(decide_chains(&mut s, &[(1, t)], 161).unwrap(), Some(1));
    let ds = s.decisions(1).unwrap();
    assert_eq!(ds.len(), 2);
    assert_eq!(ds[1].resolves, Some(ds[0].id), "points at what it resolves");
    assert_eq!(ds[1].reason_code.as_deref(), Some("resolution"));
}

fn discard_removes_a_refused_first_submission(journaled) {
    let mut s = journaled();
    let l = s
        .create_submission(&sub(Some(vec![1, 2])), 100, |_| vec![])
        .unwrap();
    s.discard_submission(l.id).unwrap();
    assert!(s.chains(None).unwrap().is_empty());
    assert!(s.open_launches().unwrap().is_empty());
}

fn an_operation_on_an_arrays_chains_commits_all_or_nothing(journaled) {
    let mut s = journaled();
    let l = s
        .create_submission(&sub(Some(vec![1, 2])), 100, |_| vec![])
        .unwrap();
    s.launch_submitted(l.id, "14", 101).unwrap();
    let fail = ChainUpdate {
        state: ChainState::Failed,
        last_classification: None,
        plan: None,
        not_before: None,
        clock: Clock::Keep,
        changes_chain: true,
    };
    let d = || decision(Classification::Ambiguous, Action::Fail);
    // Chain 2 is active, not pending_failed as the second transition expects.
    let items = [
        (1, tr(ChainState::Active, &fail, d())),
        (2, tr(ChainState::PendingFailed, &fail, d())),
    ];
    assert_eq!(decide_chains(&mut s, &items, 150).unwrap(), Some(2));
    assert_eq!(s.chain(1).unwrap().unwrap().state, ChainState::Active);
    assert!(s.decisions(1).unwrap().is_empty(), "nothing of it is kept");
}

fn the_breaker_and_quarantine_count_columns_written_with_the_record(journaled) {
    let mut s = journaled();
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    let ready = ChainUpdate {
        state: ChainState::Ready,
        last_classification: Some(Classification::NodeFail),
        plan: None,
        not_before: Some(200),
        clock: Clock::Keep,
        changes_chain: true,
    };
    let rec = Record {
        infra_failure: true,
        failed_nodes: Some("n1".into()),
        ..decision(Classification::NodeFail, Action::Resubmit)
    };
    record_ending(&mut s, 1, 1, tr(ChainState::Active, &ready, rec), 150).unwrap();
    assert_eq!(s.infra_failures_since(100).unwrap(), 1);
    assert_eq!(s.infra_failures_since(151).unwrap(), 0);
    assert_eq!(
        s.node_failures_since(100).unwrap(),
        vec![("n1".to_string(), 150)]
    );
}

fn every_chain_summary_is_read_once_in_order_across_pages(journaled) {
    let mut s = journaled();
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

/// The notification is written with the decision that moves the chain into a state its
/// submitter is told about, once per entry; the age of a waiting chain starts then, and a
/// reminder and an expiry are queued once.
fn notifications_are_queued_with_the_state_change(journaled) {
    let mut s = journaled();
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    let pending = ChainUpdate {
        state: ChainState::PendingFailed,
        last_classification: Some(Classification::Ambiguous),
        plan: None,
        not_before: None,
        clock: Clock::Keep,
        changes_chain: true,
    };
    let d = decision(Classification::Ambiguous, Action::Escalate);
    assert_eq!(
        decide_chains(
            &mut s,
            &[(1, tr(ChainState::Active, &pending, d.clone()))],
            200
        )
        .unwrap(),
        None
    );
    let due = s.due_notifications(200, 10).unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(
        (due[0].chain_id, due[0].kind.as_str()),
        (1, "pending_failed")
    );
    let latest = s.last_decision(1).unwrap().unwrap();
    assert_eq!(due[0].decision_id, Some(latest.id));
    // A hold keeps it waiting: no second notification, its age goes on.
    let hold = decision(Classification::Ambiguous, Action::Hold);
    decide_chains(
        &mut s,
        &[(1, tr(ChainState::PendingFailed, &pending, hold))],
        250,
    )
    .unwrap();
    assert_eq!(s.due_notifications(300, 10).unwrap().len(), 1);
    let w = s.chains_to_expire(200).unwrap();
    assert_eq!((w.len(), w[0].pending_since), (1, 200));
    assert!(s.chains_to_expire(199).unwrap().is_empty());
    // The metrics' oldest wait (`pending_failed_oldest_seconds`) starts there too.
    assert_eq!(s.oldest_pending_since().unwrap(), Some(200));
    // Not due before its time; sent once delivered; retried after a failure.
    s.notification_failed(due[0].id, (true, false), "boom", Some(400), 300)
        .unwrap();
    assert!(s.due_notifications(399, 10).unwrap().is_empty());
    let again = s.due_notifications(400, 10).unwrap();
    assert_eq!((again[0].tries, again[0].mail_done), (1, true));
    s.notification_sent(due[0].id, (false, true), 400).unwrap();
    assert!(s.due_notifications(10_000, 10).unwrap().is_empty());
    // One reminder.
    assert_eq!(s.chains_to_remind(300).unwrap(), vec![1]);
    assert!(remind(&mut s, 1, 300).unwrap());
    assert!(!remind(&mut s, 1, 301).unwrap());
    assert!(s.chains_to_remind(10_000).unwrap().is_empty());
    // An expiry that holds: recorded, marked, told once; never found again.
    let expiry = Transition {
        notify: Some(crate::domain::policy::Notify {
            kind: crate::domain::notification::Kind::Expired,
            names_decision: true,
        }),
        ..Transition::of(
            ChainState::PendingFailed,
            ChainUpdate {
                clock: Clock::Expire,
                ..pending.clone()
            },
            Some(decision(Classification::Ambiguous, Action::Hold)),
        )
    };
    assert!(s.apply_one(1, &expiry, 500).unwrap());
    assert!(s.chains_to_expire(10_000).unwrap().is_empty());
    let kinds: Vec<String> = s
        .due_notifications(10_000, 10)
        .unwrap()
        .into_iter()
        .map(|n| n.kind)
        .collect();
    assert_eq!(kinds, ["reminder", "expired"]);
    // Failing it for good queues `failed`; a completed chain never re-enters it.
    let failed = ChainUpdate {
        state: ChainState::Failed,
        ..pending.clone()
    };
    decide_chains(
        &mut s,
        &[(
            1,
            tr(
                ChainState::PendingFailed,
                &failed,
                decision(Classification::Ambiguous, Action::Fail),
            ),
        )],
        600,
    )
    .unwrap();
    let kinds: Vec<String> = s
        .due_notifications(10_000, 10)
        .unwrap()
        .into_iter()
        .map(|n| n.kind)
        .collect();
    assert_eq!(kinds, ["reminder", "expired", "failed"]);
    assert!(s.chains_to_expire(10_000).unwrap().is_empty());
    assert_eq!(s.oldest_pending_since().unwrap(), None);
}

fn a_new_submission_is_what_reading_it_back_gives(journaled) {
    // `begin_submit` hands sbatch `stored_as` instead of reading the row back: the two
    // must not differ, whatever the strings hold.
    let mut s = journaled();
    let mut new = sub(None);
    new.env.push((
        "ODD".into(),
        "quote \" backslash \\ tab\t newline\n é".into(),
    ));
    new.argv.push("--comment=a|b,c \"d\"".into());
    new.restartable = true;
    let l = s
        .create_submission_waiting(&new, &[], &[], 1234, |t| vec![t.to_string()])
        .unwrap();
    let read = s.submission(l.submission_id).unwrap();
    assert_eq!(new.stored_as(l.submission_id, 1234), read);
}

/// A reminder changes nothing of the chain but its mark: `updated_at` says when it last
/// changed.
fn a_reminder_leaves_the_chain_as_it_is(journaled) {
    let mut s = journaled();
    waiting_chain(&mut s);
    assert!(remind(&mut s, 1, 300).unwrap());
    assert_eq!(s.chain(1).unwrap().unwrap().updated_at, 200);
    assert!(s.chains_to_remind(10_000).unwrap().is_empty());
}

/// The attempt of an in-place requeue that did not happen goes, and a chain that has moved
/// on meanwhile is left as it is (its job ids keep naming it for as long as they did).
fn a_withdrawn_requeue_of_a_finished_chain_leaves_the_chain_row(journaled) {
    let mut s = journaled();
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    let c = s.chain(1).unwrap().unwrap();
    let cancel = crate::domain::policy::transition(
        &c,
        crate::domain::policy::Event::Cancelled {
            job: Some("42"),
            actor: "alice",
        },
        &crate::config::Config::defaults(),
        &crate::domain::policy::Context::at(150),
    )
    .unwrap();
    assert!(s.apply_one(1, &cancel, 150).unwrap());
    let c = s.chain(1).unwrap().unwrap();
    let t = Transition {
        attempt: Some(AttemptChange::Withdrawn { n: 2 }),
        ..Transition::none(&c)
    };
    assert!(s.apply_one(1, &t, 10_000_000).unwrap());
    assert_eq!(s.chain(1).unwrap().unwrap().updated_at, 150);
}

/// Whether Slurm has shown an attempt's job owned by its chain's owner is kept with the
/// attempt, set and cleared with the cycle's last-seen states.
fn an_attempts_owner_seen_is_set_and_cleared(journaled) {
    let mut s = journaled();
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    assert!(!s.live_attempts().unwrap()[0].owner_seen);
    s.set_last_seen(&[(1, 1, "RUNNING")], &[(1, 1, true)])
        .unwrap();
    let a = &s.live_attempts().unwrap()[0];
    assert!(a.owner_seen);
    assert_eq!(a.last_seen.as_deref(), Some("RUNNING"));
    s.set_last_seen(&[], &[(1, 1, false)]).unwrap();
    assert!(!s.live_attempts().unwrap()[0].owner_seen);
}
}
