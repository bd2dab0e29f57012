//! The journal and the replicas made from it: a write the journal refuses, an answer lost,
//! a batch as one entry, a standby following the writer, formats refused, an older
//! revision's entries replayed, and a replica whose parser differs making the same rows.

use super::*;

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
fn a_standby_learns_whose_plain_sbatch_choice_it_applied() {
    let journal = MemoryJournal::default();
    let mut s = memory_with(journal.clone());
    let mut standby = Store::in_memory_replica("0a1b2c3d", Box::new(journal.clone())).unwrap();
    assert_eq!(standby.take_replicated_opt_ins(), Some(vec![]));
    s.set_plain_opt(1001, true, 100).unwrap();
    s.set_plain_opt(1002, true, 100).unwrap();
    s.set_plain_opt(1001, false, 101).unwrap();
    // The writer's own choices are its own to publish: it applied no entry.
    assert_eq!(s.take_replicated_opt_ins(), Some(vec![]));
    assert_eq!(standby.catch_up().unwrap(), 3);
    assert_eq!(standby.take_replicated_opt_ins(), Some(vec![1001, 1002]));
    assert_eq!(standby.plain_opt(1001).unwrap(), Some(false));
    // Once told, not again.
    assert_eq!(standby.take_replicated_opt_ins(), Some(vec![]));
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

/// A journal of two submissions launched as jobs 42 and 43, its last entry the launch of
/// 43 (which a test rewrites into a second launch on 42).
fn journal_of_jobs_42_and_43() -> MemoryJournal {
    let journal = MemoryJournal::default();
    let mut s = Store::in_memory_replica(INSTANCE, Box::new(journal.clone())).unwrap();
    let a = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    let b = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(a.id, "42", 101).unwrap();
    s.launch_submitted(b.id, "43", 102).unwrap();
    journal
}

/// A journal written before the one-live-attempt constraint may hold an entry that made a
/// second live attempt on one job: a new replica replays it (the pair kept as the
/// migration keeps it), and refuses a new one all the same.
#[test]
fn a_replica_replays_an_older_journals_second_attempt_on_one_job() {
    let journal = journal_of_jobs_42_and_43();
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
    let mut replica = replica_as_the_daemon_opens_it(&journal).unwrap();
    assert_eq!(replica.resolve("42").unwrap().len(), 2);
    let c = replica
        .create_submission(&sub(None), 103, |_| vec![])
        .unwrap();
    assert!(replica.launch_submitted(c.id, "42", 104).is_err());
}

/// A replica as the daemon opens one: given its reader of a submission's `--dependency`
/// before it catches up (an entry of revision 1 has its rows read by it).
fn replica_as_the_daemon_opens_it(journal: &MemoryJournal) -> Result<Store> {
    let mut s = Store::replica_as_it_is(
        Connection::open_in_memory()?,
        INSTANCE,
        Box::new(journal.clone()),
    )?;
    s.read_dependencies_with(crate::daemon::sbatch::dependency_rows)?;
    s.catch_up()?;
    Ok(s)
}

thread_local! {
    /// What [`dependency_rows`] returns on this thread instead of the parser's reading
    /// (a parser of another version), while set.
    static PARSER: std::cell::RefCell<Option<Vec<(String, String)>>> = const { std::cell::RefCell::new(None) };
}

/// The test hook of [`dependency_rows`].
pub(in crate::store) fn parser_override(_argv: &[String]) -> Option<Vec<(String, String)>> {
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
    let rows = crate::daemon::sbatch::dependency_rows(&waiting.argv, waiting.script.as_deref());
    let l = s
        .create_submission_requested(&waiting, &[], &rows, Some("r1"), 100, |_| vec![])
        .unwrap();
    s.note_not_recovered(l.submission_id, &raw_items()).unwrap();
    s.note_plain_refused("77", 1000, "not opted in", 100)
        .unwrap();
    s.note_plain_refused("78", 1000, &raw_reason(), 100 + 40 * 24 * 3600)
        .unwrap();
    s
}

/// What was not recovered, as a user's submission could make it: more items than are
/// kept, one longer than an item is kept.
fn raw_items() -> Vec<String> {
    let mut items: Vec<String> = (0..40).map(|i| format!("--opt{i}")).collect();
    items[1] = "x".repeat(2000);
    items
}

/// A refusal's reason longer than a reason is kept.
fn raw_reason() -> String {
    "why ".repeat(1000)
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

/// The journal of [`journal_of_derived_rows`] as the previous revision wrote it (no
/// dependency rows, no limits: its writer derived them when it applied it), and the
/// writer's store.
fn journal_of_the_previous_revision() -> (MemoryJournal, Store) {
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
                // Revision 1 carried what the user's submission made, uncut: its
                // replica cut it when it applied it.
                match fields["op"].as_str() {
                    Some("note_not_recovered") => {
                        fields.insert("items".into(), serde_json::json!(raw_items()));
                    }
                    Some("note_plain_refused") if fields["job_id"] == "78" => {
                        fields.insert("reason".into(), serde_json::json!(raw_reason()));
                    }
                    _ => {}
                }
            }
            *format = (journal::FORMAT & !0xff) | 1;
            *body = serde_json::to_vec(&ops).unwrap();
        }
    }
    (journal, writer)
}

/// An entry as the previous revision wrote it replays to the rows its writer made.
#[test]
fn an_entry_of_the_previous_revision_replays_as_its_writer_applied_it() {
    let (journal, writer) = journal_of_the_previous_revision();
    let replica = replica_as_the_daemon_opens_it(&journal).unwrap();
    assert_eq!(dependency_rows_of(&replica).len(), 2);
    assert_eq!(dump(&replica), dump(&writer));
}

/// A replica given no reader of a submission's `--dependency` refuses an entry of the
/// previous revision that needs one (it carries no rows), with what to do, rather than
/// applying it without them; given one, it applies it.
#[test]
fn an_entry_of_the_previous_revision_needs_a_reader_of_dependencies() {
    let (journal, writer) = journal_of_the_previous_revision();
    let e = match Store::in_memory_replica(INSTANCE, Box::new(journal.clone())) {
        Err(e) => e,
        Ok(_) => panic!("a replica applied a submission of revision 1 without its rows"),
    };
    assert!(
        matches!(&e, StoreError::NoDependencyReader(m) if m.starts_with("journal entry 1 ")),
        "{e}"
    );
    assert!(
        e.to_string().contains("open it with slurm-supervisord"),
        "{e}"
    );
    let replica = replica_as_the_daemon_opens_it(&journal).unwrap();
    assert_eq!(dump(&replica), dump(&writer));
}

/// An entry of this revision that would make a second live attempt on one job (no writer
/// of it makes one: its own write is refused) is refused, not applied as an older
/// journal's would be: applying an entry of this revision decides nothing.
#[test]
fn an_entry_of_this_revision_that_makes_a_second_live_attempt_on_one_job_is_refused() {
    let journal = journal_of_jobs_42_and_43();
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

/// An entry of this revision asking for what only revision 1's may (the operation that
/// keeps a second live attempt on one job) is refused as corrupt, not applied.
#[test]
fn an_entry_of_this_revision_holding_a_legacy_operation_is_refused() {
    let journal = MemoryJournal::default();
    {
        let mut s = Store::in_memory_replica(INSTANCE, Box::new(journal.clone())).unwrap();
        let a = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
        s.launch_submitted(a.id, "42", 101).unwrap();
    }
    {
        let mut entries = journal.entries.lock().unwrap();
        let last = entries.last_mut().unwrap();
        let text = String::from_utf8(last.1.clone()).unwrap();
        assert!(text.contains("\"launch_submitted\""), "{text}");
        last.1 = text
            .replace("\"launch_submitted\"", "\"legacy_launch_submitted\"")
            .into_bytes();
    }
    let e = match Store::in_memory_replica(INSTANCE, Box::new(journal)) {
        Err(e) => e,
        Ok(_) => panic!("a replica applied a legacy operation from an entry of this revision"),
    };
    assert!(
        matches!(&e, StoreError::Corrupt(m) if m.contains("only an entry of revision 1")),
        "{e}"
    );
}

/// An entry of this revision made under any schema since the revision's first is applied
/// as it is: the migrations after it changed tables, not what an operation carries (so
/// the next migration leaves the journal readable). One from before the revision's first
/// schema is no format any version wrote.
#[test]
fn an_entry_of_this_revision_from_an_earlier_schema_is_applied() {
    let revision = journal::FORMAT & 0xff;
    let first = journal::FIRST_REVISION_SCHEMA;
    for schema in first..=(journal::FORMAT >> 8) {
        let journal = MemoryJournal::default();
        journal
            .entries
            .lock()
            .unwrap()
            .push(((schema << 8) | revision, b"[]".to_vec()));
        Store::in_memory_replica(INSTANCE, Box::new(journal))
            .unwrap_or_else(|e| panic!("schema {schema}: {e}"));
    }
    let journal = MemoryJournal::default();
    journal
        .entries
        .lock()
        .unwrap()
        .push((((first - 1) << 8) | revision, b"[]".to_vec()));
    let e = match Store::in_memory_replica(INSTANCE, Box::new(journal)) {
        Err(e) => e,
        Ok(_) => {
            panic!("a replica applied an entry of revision {revision} before its first schema")
        }
    };
    assert!(matches!(e, StoreError::JournalFormatUnknown { .. }), "{e}");
}
