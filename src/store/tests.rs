use super::suite::*;
use super::*;
use journal::MemoryJournal;

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

fn entries(j: &MemoryJournal) -> usize {
    j.entries.lock().unwrap().len()
}

#[test]
fn a_write_the_journal_refuses_is_rolled_back() {
    use std::sync::atomic::Ordering;
    let journal = MemoryJournal::default();
    let mut s = memory_with(journal.clone());
    let launch = s
        .create_submission(&sub(None), 100, |_| vec!["job.sh".into()])
        .unwrap();
    assert_eq!(entries(&journal), 1);
    journal.fenced.store(true, Ordering::SeqCst);
    let e = s.launch_submitted(launch.id, "77", 101).unwrap_err();
    assert!(matches!(e, StoreError::Fenced { .. }), "{e}");
    // Nothing of it was kept: the launch is still an intent, the journal as it was.
    assert_eq!(s.launch(launch.id).unwrap().state, LaunchState::Intent);
    assert_eq!(entries(&journal), 1);
    assert_eq!(s.journal_seq(), 1);
    journal.fenced.store(false, Ordering::SeqCst);
    s.launch_submitted(launch.id, "77", 102).unwrap();
    assert_eq!(s.launch(launch.id).unwrap().job_id.as_deref(), Some("77"));
    assert_eq!((entries(&journal), s.journal_seq()), (2, 2));
}

#[test]
fn a_write_whose_append_answer_was_lost_is_settled_by_reading_the_journal_back() {
    use std::sync::atomic::Ordering;
    let journal = MemoryJournal::default();
    let mut s = memory_with(journal.clone());
    let launch = s
        .create_submission(&sub(None), 100, |_| vec!["job.sh".into()])
        .unwrap();
    // The answer is lost, and the journal, read back at once, has the entry: done.
    journal.lose_answers.store(true, Ordering::SeqCst);
    s.launch_submitted(launch.id, "77", 101).unwrap();
    assert_eq!(s.launch(launch.id).unwrap().job_id.as_deref(), Some("77"));
    assert!(!s.journal_unsure());
    // Lost, and the journal cannot be read back: the write fails, and nothing is decided
    // on this replica until the journal is read...
    journal.unreadable.store(true, Ordering::SeqCst);
    assert!(s.note_launch_error(launch.id, "late", false).is_err());
    assert!(s.journal_unsure());
    assert_eq!(s.launch(launch.id).unwrap().error, None);
    assert_eq!(entries(&journal), 3);
    journal.lose_answers.store(false, Ordering::SeqCst);
    journal.unreadable.store(false, Ordering::SeqCst);
    // ...which the next write does first, so the entry it failed to confirm is applied
    // and the next one follows it.
    s.note_launch_error(launch.id, "later", false).unwrap();
    assert!(!s.journal_unsure());
    assert_eq!((entries(&journal), s.journal_seq()), (4, 4));
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

#[test]
fn a_batch_is_one_entry_and_a_batch_the_journal_refuses_keeps_nothing() {
    use std::sync::atomic::Ordering;
    let journal = MemoryJournal::default();
    let mut s = memory_with(journal.clone());
    let a = s
        .create_submission(&sub(None), 100, |_| vec!["a.sh".into()])
        .unwrap();
    let b = s
        .create_submission(&sub(None), 100, |_| vec!["b.sh".into()])
        .unwrap();
    s.begin_batch().unwrap();
    s.launch_submitted(a.id, "10", 101).unwrap();
    s.launch_submitted(b.id, "11", 101).unwrap();
    s.end_batch(true).unwrap();
    assert_eq!(entries(&journal), 3, "two submissions and one batch");
    s.begin_batch().unwrap();
    s.note_launch_error(a.id, "x", false).unwrap();
    journal.fenced.store(true, Ordering::SeqCst);
    assert!(matches!(s.end_batch(true), Err(StoreError::Fenced { .. })));
    journal.fenced.store(false, Ordering::SeqCst);
    assert_eq!(s.launch(a.id).unwrap().error, None);
    assert_eq!(s.journal_seq(), 3);
    // A batch rolled back by the daemon appends nothing either.
    s.begin_batch().unwrap();
    s.note_launch_error(a.id, "y", false).unwrap();
    s.end_batch(false).unwrap();
    assert_eq!(entries(&journal), 3);
    s.note_launch_error(b.id, "z", false).unwrap();
    assert_eq!(entries(&journal), 4);
}

#[test]
fn a_standby_replica_follows_the_writer_entry_by_entry() {
    let journal = MemoryJournal::default();
    let mut s = memory_with(journal.clone());
    let mut standby = Store::in_memory_replica("0a1b2c3d", Box::new(journal.clone())).unwrap();
    let launch = s
        .create_submission(&sub(Some(vec![1, 2])), 100, |tag| {
            vec![format!("--comment={tag}"), "job.sh".into()]
        })
        .unwrap();
    s.launch_submitted(launch.id, "40", 101).unwrap();
    assert_eq!(standby.catch_up().unwrap(), 2);
    assert_eq!(standby.catch_up().unwrap(), 0);
    assert_eq!(dump(&standby), dump(&s));
    // The tag names the shared instance on every replica.
    assert_eq!(standby.launch(launch.id).unwrap().tag, launch.tag);
    assert!(launch.tag.starts_with("ssv-0a1b2c3d-"), "{}", launch.tag);
}

#[test]
fn an_entry_of_a_later_format_is_refused_whole() {
    let journal = MemoryJournal::default();
    journal
        .entries
        .lock()
        .unwrap()
        .push((journal::FORMAT + 1, b"[]".to_vec()));
    let e = match Store::in_memory_replica("0a1b2c3d", Box::new(journal)) {
        Err(e) => e,
        Ok(_) => panic!("a replica applied an entry of a later format"),
    };
    assert!(matches!(e, StoreError::JournalTooNew { seq: 1, .. }), "{e}");
    assert!(e.to_string().contains("upgrade slurm-supervisor"), "{e}");
}

#[test]
fn a_replica_of_another_shared_database_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("replica.db");
    drop(Store::open_replica(&p, "0a1b2c3d", Box::new(MemoryJournal::default())).unwrap());
    let before = std::fs::read(&p).unwrap();
    let e = match Store::open_replica(&p, "ffffffff", Box::new(MemoryJournal::default())) {
        Err(e) => e,
        Ok(_) => panic!("a replica of another database was opened"),
    };
    assert!(matches!(e, StoreError::NotAStore { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("not a replica of this shared database"),
        "{e}"
    );
    assert_eq!(std::fs::read(&p).unwrap(), before);
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
            decision_bytes: 0
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
    assert_eq!(s.resolve("42").unwrap().len(), 2);
    let c = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    assert!(s.launch_submitted(c.id, "42", 101).is_err());
    s.launch_submitted(c.id, "44", 101).unwrap();
}

/// A journal written before the one-live-attempt constraint may hold an entry that made a
/// second live attempt on one job: a new replica replays it (the pair kept as the
/// migration keeps it), and refuses a new one all the same.
#[test]
fn a_replica_replays_an_older_journals_second_attempt_on_one_job() {
    let journal = MemoryJournal::default();
    {
        let mut s = Store::in_memory_replica(INSTANCE, Box::new(journal.clone())).unwrap();
        let a = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
        let b = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
        s.launch_submitted(a.id, "42", 101).unwrap();
        s.launch_submitted(b.id, "43", 102).unwrap();
    }
    // As an older store wrote it (revision 1): the second launch on job 42 too.
    {
        let mut entries = journal.entries.lock().unwrap();
        for (format, _) in entries.iter_mut() {
            *format = (journal::FORMAT & !0xff) | 1;
        }
        let last = entries.last_mut().unwrap();
        let text = String::from_utf8(last.1.clone()).unwrap();
        assert!(text.contains("\"43\""), "{text}");
        last.1 = text.replace("\"43\"", "\"42\"").into_bytes();
    }
    let mut replica = Store::in_memory_replica(INSTANCE, Box::new(journal.clone())).unwrap();
    assert_eq!(replica.resolve("42").unwrap().len(), 2);
    let c = replica
        .create_submission(&sub(None), 103, |_| vec![])
        .unwrap();
    assert!(replica.launch_submitted(c.id, "42", 104).is_err());
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

thread_local! {
    /// What [`dependency_rows`] returns on this thread instead of the parser's reading
    /// (a parser of another version), while set.
    static PARSER: std::cell::RefCell<Option<Vec<(String, String)>>> = const { std::cell::RefCell::new(None) };
}

/// The test hook of [`dependency_rows`].
pub(super) fn parser_override(_argv: &[String]) -> Option<Vec<(String, String)>> {
    PARSER.with(|p| p.borrow().clone())
}

/// Makes the parser read `rows` from every submission on this thread until dropped.
struct ParserReads;

impl ParserReads {
    fn set(rows: &[(&str, &str)]) -> ParserReads {
        let rows = rows
            .iter()
            .map(|(k, j)| (k.to_string(), j.to_string()))
            .collect();
        PARSER.with(|p| *p.borrow_mut() = Some(rows));
        ParserReads
    }
}

impl Drop for ParserReads {
    fn drop(&mut self) {
        PARSER.with(|p| *p.borrow_mut() = None);
    }
}

/// A journal of every operation whose rows were derived by the writer: a submission with
/// a `--dependency`, a request id, what was not recovered, a plain refusal.
fn journal_of_derived_rows(journal: &MemoryJournal) -> Store {
    let mut s = Store::in_memory_replica(INSTANCE, Box::new(journal.clone())).unwrap();
    let waiting = NewSubmission {
        argv: vec!["--dependency=afterok:123:456_2".into(), "job.sh".into()],
        ..sub(None)
    };
    let l = s.create_submission(&waiting, 100, |_| vec![]).unwrap();
    s.note_submit_request(1000, "r1", l.submission_id, 100)
        .unwrap();
    s.note_not_recovered(l.submission_id, &["--gres".into(), "--licenses".into()])
        .unwrap();
    s.note_plain_refused("77", 1000, "not opted in", 100)
        .unwrap();
    s.note_plain_refused("78", 1000, "not opted in", 100 + 40 * 24 * 3600)
        .unwrap();
    s
}

fn dependency_rows_of(s: &Store) -> Vec<(String, String)> {
    s.conn
        .prepare("SELECT kind, job_id FROM dependencies ORDER BY rowid")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// A replica whose `--dependency` parser reads another thing than the writer's (another
/// version's, during a rolling upgrade) makes the same rows: the entry carries them.
#[test]
fn a_replica_whose_parser_differs_makes_the_same_rows() {
    let journal = MemoryJournal::default();
    let writer = journal_of_derived_rows(&journal);
    let rows = dependency_rows_of(&writer);
    assert_eq!(
        rows,
        [
            ("afterok".to_string(), "123".to_string()),
            ("afterok".to_string(), "456_2".to_string())
        ]
    );
    let _other = ParserReads::set(&[("afterany", "999")]);
    let replica = Store::in_memory_replica(INSTANCE, Box::new(journal.clone())).unwrap();
    assert_eq!(dependency_rows_of(&replica), rows);
    assert_eq!(dump(&replica), dump(&writer));
}

/// An entry of a format no version wrote (an unknown revision, or older than the journal)
/// is refused whole, with what to do.
#[test]
fn an_entry_of_an_unknown_format_is_refused_whole() {
    // Revision 0; revision 1 before the first journal; a revision no version had.
    for format in [
        journal::FORMAT & !0xff,
        (9 << 8) | 1,
        (journal::FORMAT - 0x100) | 0x7f,
    ] {
        let journal = MemoryJournal::default();
        journal
            .entries
            .lock()
            .unwrap()
            .push((format, b"[]".to_vec()));
        let e = match Store::in_memory_replica(INSTANCE, Box::new(journal)) {
            Err(e) => e,
            Ok(_) => panic!("a replica applied an entry of format {format}"),
        };
        assert!(
            matches!(e, StoreError::JournalFormatUnknown { seq: 1, found, .. } if found == format),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("upgrade slurm-supervisor on this node"),
            "{e}"
        );
    }
}

/// An entry as the previous revision wrote it (no dependency rows, no limits: its writer
/// derived them when it applied it) replays to the rows its writer made.
#[test]
fn an_entry_of_the_previous_revision_replays_as_its_writer_applied_it() {
    let journal = MemoryJournal::default();
    let writer = journal_of_derived_rows(&journal);
    {
        let mut entries = journal.entries.lock().unwrap();
        for (format, body) in entries.iter_mut() {
            let mut ops: Vec<serde_json::Value> = serde_json::from_slice(body).unwrap();
            for op in &mut ops {
                let fields = op.as_object_mut().unwrap();
                for new in ["dependencies", "keep", "forget_before"] {
                    fields.remove(new);
                }
            }
            *format = (journal::FORMAT & !0xff) | 1;
            *body = serde_json::to_vec(&ops).unwrap();
        }
    }
    let replica = Store::in_memory_replica(INSTANCE, Box::new(journal.clone())).unwrap();
    assert_eq!(dependency_rows_of(&replica).len(), 2);
    assert_eq!(dump(&replica), dump(&writer));
}

/// An entry of this revision that would make a second live attempt on one job (no writer
/// of it makes one: its own write is refused) is refused, not applied as an older
/// journal's would be: applying an entry of this revision decides nothing.
#[test]
fn an_entry_of_this_revision_that_makes_a_second_live_attempt_on_one_job_is_refused() {
    let journal = MemoryJournal::default();
    {
        let mut s = Store::in_memory_replica(INSTANCE, Box::new(journal.clone())).unwrap();
        let a = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
        let b = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
        s.launch_submitted(a.id, "42", 101).unwrap();
        s.launch_submitted(b.id, "43", 102).unwrap();
    }
    {
        let mut entries = journal.entries.lock().unwrap();
        let last = entries.last_mut().unwrap();
        let text = String::from_utf8(last.1.clone()).unwrap();
        last.1 = text.replace("\"43\"", "\"42\"").into_bytes();
    }
    let e = match Store::in_memory_replica(INSTANCE, Box::new(journal)) {
        Err(e) => e,
        Ok(_) => panic!("a replica applied a second live attempt on job 42"),
    };
    assert!(e.is_constraint(), "{e}");
}
