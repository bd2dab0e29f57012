use super::suite::*;
use super::*;
use journal::MemoryJournal;

mod live_prop;
mod replica;
pub(super) use replica::parser_override;

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
fn open_chains_are_counted_per_owner_and_a_write_past_the_store_is_found() {
    // It writes rows by hand: not a journaled store.
    let mut s = Store::in_memory().unwrap();
    s.create_submission(&sub(Some(vec![1, 2, 3])), 100, |_| vec!["job.sh".into()])
        .unwrap();
    let bob = NewSubmission {
        owner_uid: 2000,
        user: "bob".into(),
        ..sub(None)
    };
    s.create_submission(&bob, 100, |_| vec!["job.sh".into()])
        .unwrap();
    assert_eq!(s.open_chains_of(1000).unwrap(), 3);
    assert_eq!(s.open_chains_of(2000).unwrap(), 1);
    assert_eq!(s.open_chains_of(3000).unwrap(), 0);
    let t = s.recount_user_totals().unwrap();
    assert_eq!(t.kept, t.counted);
    // A state changed past the store's writes is not counted; the recount finds it.
    s.conn
        .execute("UPDATE chains SET state = 'completed' WHERE id = 1", [])
        .unwrap();
    let t = s.recount_user_totals().unwrap();
    assert_ne!(t.kept, t.counted);
    assert_eq!(t.counted[0].1.open_chains, 2);
}

#[test]
fn the_owner_migration_fills_in_the_owners_of_existing_chains() {
    // The store as it was just before the migration that added `chains.owner_uid`.
    let conn = store_before_migration("chains_open_by_owner");
    conn.execute_batch(
        "INSERT INTO submissions (owner_uid, user, argv, cwd, env, max_retries, created_at)
             VALUES (1000, 'alice', '[]', '/tmp', '[]', 5, 1), (2000, 'bob', '[]', '/tmp', '[]', 5, 1);
         INSERT INTO chains (submission_id, state, created_at, updated_at)
             VALUES (1, 'active', 1, 1), (1, 'pending_failed', 1, 1), (1, 'completed', 1, 1), (2, 'ready', 1, 1);",
    )
    .unwrap();
    let s = Store::init(conn).unwrap();
    assert_eq!(s.open_chains_of(1000).unwrap(), 2);
    assert_eq!(s.open_chains_of(2000).unwrap(), 1);
}

/// The poll's read of the live attempts is kept while the store is unchanged, and read
/// again after any change: its own writes, a write that changed nothing it shows, and
/// another connection's commit.
#[test]
fn the_live_jobs_are_read_again_whenever_the_store_changed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("supervisor.db");
    let mut s = Store::open(&path).unwrap();
    assert!(s.live_jobs().unwrap().is_empty());
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    let first = s.live_jobs().unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].slurm_job_id.as_deref(), Some("42"));
    assert!(
        std::sync::Arc::ptr_eq(&first, &s.live_jobs().unwrap()),
        "nothing changed: not read again"
    );
    s.set_last_seen(&[(1, 1, "RUNNING")], &[(1, 1, true)])
        .unwrap();
    let seen = s.live_jobs().unwrap();
    assert_eq!(seen[0].last_seen.as_deref(), Some("RUNNING"));
    assert!(seen[0].owner_seen);
    // Another connection (another process) changes the store: read again.
    let mut other = Store::open(&path).unwrap();
    other.set_last_seen(&[(1, 1, "PENDING")], &[]).unwrap();
    assert_eq!(
        s.live_jobs().unwrap()[0].last_seen.as_deref(),
        Some("PENDING")
    );
    let l2 = other
        .create_submission(&sub(None), 200, |_| vec![])
        .unwrap();
    other.launch_submitted(l2.id, "43", 201).unwrap();
    assert_eq!(s.live_jobs().unwrap().len(), 2);
}

/// A read of the live list that fails (a busy or damaged file, an interrupt) after the
/// store changed loses none of the writes since: the next read has them (here a job that
/// went live, which the poll would otherwise never watch).
#[test]
fn a_failed_read_of_the_live_list_loses_no_write() {
    let mut s = Store::in_memory().unwrap();
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    assert!(s.live_jobs().unwrap().is_empty());
    s.launch_submitted(l.id, "42", 101).unwrap();
    // The list's query cannot run for now.
    let rename = |s: &Store, from: &str, to: &str| {
        s.conn
            .execute_batch(&format!(
                "ALTER TABLE attempts RENAME COLUMN {from} TO {to}"
            ))
            .unwrap()
    };
    rename(&s, "last_seen", "seen_last");
    assert!(s.live_jobs().is_err());
    rename(&s, "seen_last", "last_seen");
    let live = s.live_jobs().unwrap();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].slurm_job_id.as_deref(), Some("42"));
}

/// The live list read inside a batch shows the batch's writes; rolled back, they are gone
/// from the next read too (a rollback tells no hook and leaves the store's version as it
/// was); committed, they stay.
#[test]
fn the_live_list_read_inside_a_batch_follows_its_commit_or_rollback() {
    let mut s = Store::in_memory().unwrap();
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    assert!(s.live_jobs().unwrap().is_empty());
    s.begin_batch().unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    assert_eq!(s.live_jobs().unwrap().len(), 1, "inside the batch");
    s.end_batch(false).unwrap();
    let live = s.live_jobs().unwrap();
    assert!(live.is_empty(), "rolled back, yet kept: {live:?}");
    s.begin_batch().unwrap();
    s.launch_submitted(l.id, "43", 102).unwrap();
    s.set_last_seen(&[(1, 1, "RUNNING")], &[]).unwrap();
    assert_eq!(s.live_jobs().unwrap().len(), 1, "inside the batch");
    s.end_batch(true).unwrap();
    let live = s.live_jobs().unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].slurm_job_id.as_deref(), Some("43"));
    assert_eq!(live[0].last_seen.as_deref(), Some("RUNNING"));
    assert_eq!(&*live, &*s.live_jobs_whole().unwrap());
}

/// The live list kept up to date by the writes (`store::live`) is, after every kind of
/// write, the list read whole; a write that changes nothing it shows (a new submission's
/// launching attempt) leaves the very same list.
#[test]
fn the_live_list_kept_by_the_writes_is_the_one_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("supervisor.db");
    let mut s = Store::open(&path).unwrap();
    fn same(s: &mut Store, what: &str) -> std::sync::Arc<[LiveJob]> {
        let kept = s.live_jobs().unwrap();
        assert_eq!(&*kept, &*s.live_jobs_whole().unwrap(), "after {what}");
        kept
    }
    same(&mut s, "nothing");
    // Chains 1..=40 live, launched out of order, one of them an array of three tasks.
    let mut launches = Vec::new();
    for i in 0..40 {
        let tasks = (i == 7).then(|| vec![0, 1, 2]);
        launches.push(s.create_submission(&sub(tasks), 100, |_| vec![]).unwrap());
    }
    let before = same(&mut s, "submissions (launching attempts)");
    assert!(before.is_empty());
    for (k, l) in launches.iter().enumerate().rev() {
        s.launch_submitted(l.id, &format!("{}", 500 + k), 101)
            .unwrap();
        if k % 9 == 0 {
            same(&mut s, "a launch's answer");
        }
    }
    let all = same(&mut s, "every launch's answer");
    assert_eq!(all.len(), 42);
    // A write that shows nothing new keeps the very list.
    s.create_submission(&sub(None), 102, |_| vec![]).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &all,
        &same(&mut s, "one more submission")
    ));
    // A transaction rolled back (one job is one chain's live attempt at most).
    let dup = s.create_submission(&sub(None), 103, |_| vec![]).unwrap();
    assert!(s.launch_submitted(dup.id, "500", 104).is_err());
    same(&mut s, "a refused launch answer");
    // States seen, owners seen.
    s.set_last_seen(&[(3, 1, "RUNNING"), (9, 1, "PENDING")], &[(3, 1, true)])
        .unwrap();
    let seen = same(&mut s, "states seen");
    assert_eq!(
        seen.iter()
            .find(|j| j.chain_id == 3)
            .unwrap()
            .last_seen
            .as_deref(),
        Some("RUNNING")
    );
    // Endings: live attempts leave the list.
    let done = ChainUpdate::to(ChainState::Completed);
    for c in [1, 5, 40] {
        let d = decision(Classification::Ambiguous, Action::Escalate);
        record_ending(&mut s, c, 1, tr(ChainState::Active, &done, d), 200).unwrap();
    }
    assert_eq!(same(&mut s, "three endings").len(), 39);
    // More rows written at once than are patched: read whole.
    let many: Vec<(i64, u32, &str)> = (0..3000).map(|i| (1 + i % 44, 1, "RUNNING")).collect();
    s.set_last_seen(&many, &[]).unwrap();
    same(&mut s, "thousands of rows written");
    // Another connection's commit: read whole.
    let mut other = Store::open(&path).unwrap();
    other.set_last_seen(&[(2, 1, "COMPLETING")], &[]).unwrap();
    let l = other
        .create_submission(&sub(None), 300, |_| vec![])
        .unwrap();
    other.launch_submitted(l.id, "900", 301).unwrap();
    assert_eq!(same(&mut s, "another connection's writes").len(), 40);
}

#[test]
fn a_chain_with_a_launch_in_flight_gets_no_second_one_and_a_settled_launch_keeps_its_job() {
    let mut s = memory();
    let first = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    // The first launch is still an intent: no relaunch of its chain.
    let e = s
        .begin_relaunch(first.submission_id, &[1], 101, |_| vec![])
        .unwrap_err();
    assert!(matches!(e, StoreError::InFlight { chain: 1 }), "{e}");
    s.launch_submitted(first.id, "10", 102).unwrap();
    // A late answer for a launch settled meanwhile changes nothing.
    s.launch_submitted(first.id, "99", 103).unwrap();
    assert_eq!(s.launch(first.id).unwrap().job_id.as_deref(), Some("10"));
    assert_eq!(
        s.attempts(1).unwrap()[0].slurm_job_id.as_deref(),
        Some("10")
    );
}

/// The totals' triggers and the counting anew name the open states `open_states()`
/// names, and the trigger's look for another open chain of a submission is an index
/// lookup (a 10,000-task array's endings must not each walk its chains).
#[test]
fn the_user_totals_use_the_open_states_and_the_partial_index() {
    let m = schema::MIGRATIONS
        .iter()
        .find(|m| m.contains("CREATE TABLE user_totals"))
        .unwrap();
    let list = format!("IN ({})", open_states());
    assert_eq!(m.matches("IN (").count(), m.matches(&list).count(), "{m}");
    assert_eq!(
        RECOUNT_USER_TOTALS.matches("IN (").count(),
        RECOUNT_USER_TOTALS.matches(&list).count()
    );
    let s = Store::in_memory().unwrap();
    let plan: Vec<String> = s
        .conn
        .prepare(&format!(
            "EXPLAIN QUERY PLAN SELECT 1 FROM chains WHERE submission_id = ?1 AND state IN ({}) AND id <> ?2",
            open_states()
        ))
        .unwrap()
        .query_map([1, 2], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert!(
        plan.iter().any(|p| p.contains("chains_open_by_submission")),
        "{plan:?}"
    );
}

/// A store whose totals are missing (migrated, or copied without them) has them counted
/// from the rows at open; the triggers keep them from then on.
#[test]
fn missing_user_totals_are_counted_from_the_rows_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.db");
    {
        let mut s = Store::open(&p).unwrap();
        s.create_submission(&sub(Some(vec![1, 2, 3])), 100, |_| vec![])
            .unwrap();
        s.conn
            .execute_batch("DELETE FROM user_totals; DELETE FROM meta WHERE key = 'user_totals';")
            .unwrap();
        assert_eq!(s.user_totals(1000).unwrap(), UserTotals::default());
    }
    let mut s = Store::open(&p).unwrap();
    assert_eq!(s.user_totals(1000).unwrap().open_chains, 3);
    let t = s.recount_user_totals().unwrap();
    assert_eq!(t.kept, t.counted);
    s.create_submission(&sub(None), 200, |_| vec![]).unwrap();
    assert_eq!(s.user_totals(1000).unwrap().open_chains, 4);
    // With the mark there, nothing is counted again at open (a restart reads one row).
    drop(s);
    let s = Store::open(&p).unwrap();
    let t = s.recount_user_totals().unwrap();
    assert_eq!(t.kept, t.counted);
}

/// A store made before the totals (migration 14) gets them from its rows.
#[test]
fn the_totals_migration_counts_an_existing_store() {
    let conn = store_before_migration("CREATE TABLE user_totals");
    conn.execute_batch(
        "INSERT INTO submissions (owner_uid, user, argv, cwd, env, max_retries, created_at)
             VALUES (1000, 'alice', '[]', '/tmp', '[]', 5, 1), (2000, 'bob', '[\"x\"]', '/', '[]', 5, 1);
         INSERT INTO chains (submission_id, owner_uid, state, created_at, updated_at)
             VALUES (1, 1000, 'active', 1, 1), (1, 1000, 'completed', 1, 1), (2, 2000, 'failed', 1, 1);",
    )
    .unwrap();
    let s = Store::init(conn).unwrap();
    assert_eq!(
        s.user_totals(1000).unwrap(),
        UserTotals {
            open_chains: 1,
            open_bytes: 2 + 4 + 2,
            decision_bytes: 0,
            rule_bytes: 0
        }
    );
    assert_eq!(s.user_totals(2000).unwrap(), UserTotals::default());
}

/// One Slurm job is the live attempt of one chain at most: the store itself refuses a
/// second (a plain-sbatch adoption of a job a launch of its own made, after a lost sbatch
/// answer, made two chains of one job), and the first stays as it was.
#[test]
fn a_job_is_the_live_attempt_of_one_chain_at_most() {
    let mut s = Store::in_memory().unwrap();
    let a = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    let b = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(a.id, "42", 101).unwrap();
    assert!(s.launch_submitted(b.id, "42", 102).is_err());
    assert_eq!(s.resolve("42").unwrap().len(), 1);
    assert_eq!(s.live_jobs().unwrap().len(), 1);
    // Another job is fine, and so is the same id once the first attempt has ended (an
    // attempt requeued in place keeps its job id).
    s.launch_submitted(b.id, "43", 102).unwrap();
    assert_eq!(s.live_jobs().unwrap().len(), 2);
}

/// A store that already holds two live attempts on one job (made before the constraint)
/// is migrated: the pair is kept as it is, and no new one can be made.
#[test]
fn the_migration_keeps_existing_twins_and_refuses_new_ones() {
    let conn = store_before_migration("attempts_one_live_per_job");
    conn.execute_batch(
        "INSERT INTO submissions (owner_uid, user, argv, cwd, env, max_retries, created_at)
             VALUES (1000, 'alice', '[]', '/tmp', '[]', 5, 1), (1000, 'alice', '[]', '/tmp', '[]', 5, 1);
         INSERT INTO chains (submission_id, state, created_at, updated_at, owner_uid)
             VALUES (1, 'active', 1, 1, 1000), (2, 'active', 1, 1, 1000);
         INSERT INTO launches (submission_id, tag, argv, state, job_id, created_at)
             VALUES (1, 't1', '[]', 'submitted', '42', 1), (2, 't2', '[]', 'submitted', '42', 1);
         INSERT INTO attempts (chain_id, n, launch_id, slurm_job_id, slurm_base_id, state, plan)
             VALUES (1, 1, 1, '42', '42', 'live', '{}'), (2, 1, 2, '42', '42', 'live', '{}');",
    )
    .unwrap();
    let mut s = Store::init(conn).unwrap();
    s.read_dependencies_with(crate::daemon::sbatch::dependency_rows)
        .unwrap();
    assert_eq!(s.resolve("42").unwrap().len(), 2);
    let c = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    assert!(s.launch_submitted(c.id, "42", 101).is_err());
    s.launch_submitted(c.id, "44", 101).unwrap();
}

/// An in-memory store as it was just before the migration whose text contains `marker`.
fn store_before_migration(marker: &str) -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    let before = schema::MIGRATIONS
        .iter()
        .position(|m| m.contains(marker))
        .unwrap();
    for sql in &schema::MIGRATIONS[..before] {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", before as i64)
        .unwrap();
    conn
}

/// A store from before dependency rows were kept (migration 4) has the rows of its
/// unfinished submissions filled in by the reader it is given; until it has one it writes
/// nothing and says what to do (never a store that silently lacks them).
#[test]
fn an_older_stores_dependency_rows_are_filled_in_by_the_reader_it_is_given() {
    let conn = store_before_migration("CREATE TABLE dependencies");
    conn.execute_batch(
        r#"INSERT INTO submissions (owner_uid, user, argv, cwd, env, max_retries, created_at)
             VALUES (1000, 'alice', '["--dependency=afterok:12:13_2","job.sh"]', '/tmp', '[]', 5, 1),
                    (1000, 'alice', '["--dependency=afterok:14","job.sh"]', '/tmp', '[]', 5, 1);
         INSERT INTO chains (submission_id, state, created_at, updated_at)
             VALUES (1, 'active', 1, 1), (2, 'completed', 1, 1);"#,
    )
    .unwrap();
    let mut s = Store::init(conn).unwrap();
    let e = s
        .create_submission(&sub(None), 100, |_| vec![])
        .unwrap_err();
    assert!(matches!(e, StoreError::NoDependencyReader(_)), "{e}");
    assert!(
        e.to_string().contains("open it with slurm-supervisord"),
        "{e}"
    );
    assert!(s.submissions_with_dependencies().unwrap().is_empty());
    s.read_dependencies_with(crate::daemon::sbatch::dependency_rows)
        .unwrap();
    // The unfinished submission's, once; the finished one's matter to no one.
    assert_eq!(
        s.submissions_with_dependencies().unwrap(),
        HashSet::from([1])
    );
    let rows: i64 = s
        .conn
        .query_row("SELECT COUNT(*) FROM dependencies", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 2);
    s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
}

/// A submit keeps its user's newest request ids (by time, then submission) and removes
/// the older ones, never another user's: the same rows whichever way they are found
/// (`submit_requests_by_age`, migration 19).
#[test]
fn a_users_newest_request_ids_are_kept_and_no_one_elses_are_touched() {
    let s = Store::in_memory().unwrap();
    let keep = 3;
    for (uid, id, sub, at) in [
        (1, "a", 1, 10),
        (1, "b", 2, 10),
        (2, "x", 3, 5),
        (1, "c", 4, 11),
        (1, "d", 5, 9),
        (1, "e", 6, 12),
    ] {
        submissions::exec_note_submit_request(&s.conn, uid, id, sub, at, keep).unwrap();
    }
    let ids = |uid: u32| -> Vec<String> {
        s.conn
            .prepare(
                "SELECT request_id FROM submit_requests WHERE owner_uid = ?1 ORDER BY request_id",
            )
            .unwrap()
            .query_map([uid], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    };
    // d (at 9) went when it came, a (at 10, the older submission of two) when e came.
    assert_eq!(ids(1), ["b", "c", "e"]);
    assert_eq!(ids(2), ["x"]);
}
