//! The poll's live list (`store::live`, kept up to date by SQLite's update hook) against
//! the list read whole, after every kind of write, in random orders: submissions and
//! their answers (refused ones too), states and owners seen, endings, requeues in place
//! and by Slurm, lost jobs, cancels, relaunches, withdrawn and failed launches,
//! discarded submissions (rows deleted), batches committed and rolled back (with the
//! list read inside them), writes the journal refuses, another connection's writes,
//! more rows written than are patched, a read that fails, and a replica that follows
//! the journal and is reloaded from a snapshot. A mistake here makes the poll stop
//! watching a live job, or watch a dead one.

use super::*;
use journal::{Journal, MemoryJournal};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// One write (or event) done to the store under test. Indices pick among what exists
/// (modulo its count), so every case does something.
#[derive(Debug, Clone)]
enum Op {
    /// A new submission: one chain, or an array of `k` tasks.
    Submit(u8),
    /// sbatch's answer for an open launch: job `job` (few numbers: some are taken, and
    /// the store refuses a second live attempt on one job).
    Answer(usize, u8),
    /// States (and owners) seen for some attempts, live or not.
    Seen(Vec<(usize, u8, bool)>),
    /// A live attempt ends: its chain completed, ready for a retry, or waiting.
    End(usize, u8),
    /// Slurm requeued a live attempt itself: it stays live.
    RequeuedBySlurm(usize),
    /// A live attempt lost to Slurm.
    Lost(usize),
    /// A chain cancelled: its live attempt ends.
    Cancel(usize),
    /// The next attempt of a chain (a retry's launch).
    Relaunch(usize),
    /// The next attempt of a chain as an in-place requeue of its last job.
    Requeue(usize),
    /// A launching attempt that will not run.
    NotSubmitted(usize),
    /// A launching attempt withdrawn (its row deleted).
    Withdrawn(usize),
    /// A submission discarded (its rows deleted, live ones too).
    Discard(usize),
    /// Another connection (another process) writes states seen.
    Other(usize, u8),
    /// More rows written at once than are patched.
    Many,
    /// A read of the list fails (here: its query cannot be prepared) after a write.
    FailedRead,
    /// A write the journal refuses (a deposed daemon): rolled back.
    Fenced(Box<Op>),
    /// Writes in one batch, the list read inside it or not, committed or rolled back.
    Batch(Vec<Op>, bool, bool),
    /// A write, then the follower is reloaded from a snapshot of the writer.
    Snapshot(Box<Op>),
}

fn leaf() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4).prop_map(Op::Submit),
        6 => (any::<usize>(), 0u8..40).prop_map(|(l, j)| Op::Answer(l, j)),
        4 => prop::collection::vec((any::<usize>(), 0u8..4, any::<bool>()), 1..5).prop_map(Op::Seen),
        4 => (any::<usize>(), 0u8..3).prop_map(|(a, to)| Op::End(a, to)),
        1 => any::<usize>().prop_map(Op::RequeuedBySlurm),
        1 => any::<usize>().prop_map(Op::Lost),
        1 => any::<usize>().prop_map(Op::Cancel),
        3 => any::<usize>().prop_map(Op::Relaunch),
        2 => any::<usize>().prop_map(Op::Requeue),
        1 => any::<usize>().prop_map(Op::NotSubmitted),
        1 => any::<usize>().prop_map(Op::Withdrawn),
        1 => any::<usize>().prop_map(Op::Discard),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => leaf(),
        2 => (any::<usize>(), 0u8..4).prop_map(|(a, s)| Op::Other(a, s)),
        1 => Just(Op::Many),
        2 => Just(Op::FailedRead),
        2 => leaf().prop_map(|o| Op::Fenced(Box::new(o))),
        3 => (prop::collection::vec(leaf(), 1..6), any::<bool>(), any::<bool>())
            .prop_map(|(ops, read, commit)| Op::Batch(ops, read, commit)),
        1 => leaf().prop_map(|o| Op::Snapshot(Box::new(o))),
    ]
}

const STATES: [&str; 4] = ["PENDING", "RUNNING", "COMPLETING", "SUSPENDED"];

/// A journal in memory that also keeps one snapshot, and says it pruned the entries the
/// snapshot holds (so a replica behind it reloads from it).
#[derive(Clone, Default)]
struct SnapshotJournal {
    inner: MemoryJournal,
    snapshot: Arc<Mutex<Option<(snapshot::SnapshotHead, PathBuf)>>>,
}

impl Journal for SnapshotJournal {
    fn append(&mut self, seq: u64, format: u32, body: &[u8]) -> Result<()> {
        self.inner.append(seq, format, body)
    }
    fn read_after(&mut self, seq: u64, max: usize) -> Result<Vec<(u64, u32, Vec<u8>)>> {
        if let Some((head, _)) = &*self.snapshot.lock().unwrap() {
            if seq < head.seq {
                return Err(StoreError::Pruned {
                    after: seq,
                    through: head.seq,
                });
            }
        }
        self.inner.read_after(seq, max)
    }
    fn latest_snapshot(&mut self) -> Result<Option<snapshot::SnapshotHead>> {
        Ok(self
            .snapshot
            .lock()
            .unwrap()
            .as_ref()
            .map(|(h, _)| h.clone()))
    }
    fn read_snapshot(&mut self, head: &snapshot::SnapshotHead, out: &Path) -> Result<()> {
        let held = self.snapshot.lock().unwrap();
        let (h, file) = held.as_ref().expect("a snapshot");
        assert_eq!(h, head);
        std::fs::copy(file, out).unwrap();
        Ok(())
    }
}

/// The stores of one case: the writer (a replica of the journal, on a file), another
/// connection to the writer's file, and a follower (a replica of the same journal).
struct World {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    journal: SnapshotJournal,
    writer: Store,
    other: Store,
    follower: Store,
    snapshots: u32,
    now: i64,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let journal = SnapshotJournal::default();
        let writer =
            Store::open_replica(&path.join("writer.db"), INSTANCE, Box::new(journal.clone()))
                .unwrap();
        let other = Store::open(&path.join("writer.db")).unwrap();
        let follower = Store::open_replica(
            &path.join("follower.db"),
            INSTANCE,
            Box::new(journal.clone()),
        )
        .unwrap();
        World {
            _dir: dir,
            dir: path,
            journal,
            writer,
            other,
            follower,
            snapshots: 0,
            now: 100,
        }
    }

    /// Every store's kept list is the list read whole.
    fn check(&mut self, after: &Op) {
        for (name, s) in [
            ("writer", &mut self.writer),
            ("other connection", &mut self.other),
        ] {
            let kept = s.live_jobs().unwrap();
            assert_eq!(
                &*kept,
                &*s.live_jobs_whole().unwrap(),
                "{name}, after {after:?}"
            );
        }
        self.follower.catch_up().unwrap();
        let kept = self.follower.live_jobs().unwrap();
        assert_eq!(
            &*kept,
            &*self.follower.live_jobs_whole().unwrap(),
            "follower, after {after:?}"
        );
    }

    fn run(&mut self, op: &Op) {
        self.now += 1;
        match op {
            Op::Other(a, st) => {
                let all = attempts(&self.other);
                if let Some(x) = pick(&all, *a) {
                    self.other
                        .set_last_seen(&[(x.chain_id, x.n, STATES[*st as usize])], &[])
                        .unwrap();
                }
            }
            Op::Many => {
                let all = attempts(&self.writer);
                if !all.is_empty() {
                    let many: Vec<(i64, u32, &str)> = (0..live::PATCH_AT_MOST + 10)
                        .map(|i| {
                            let x = &all[i % all.len()];
                            (x.chain_id, x.n, STATES[i % 4])
                        })
                        .collect();
                    self.writer.set_last_seen(&many, &[]).unwrap();
                }
            }
            Op::FailedRead => {
                // A write the list has not seen, then a read of it that fails (a busy
                // or damaged file, an interrupt: here its query cannot be prepared).
                let all = attempts(&self.writer);
                let Some(x) = all.iter().find(|x| x.state == AttemptState::Live) else {
                    return;
                };
                let seen = if x.last_seen.as_deref() == Some("RUNNING") {
                    "PENDING"
                } else {
                    "RUNNING"
                };
                self.writer
                    .set_last_seen(&[(x.chain_id, x.n, seen)], &[])
                    .unwrap();
                let rename = |s: &Store, from: &str, to: &str| {
                    s.conn
                        .execute_batch(&format!(
                            "ALTER TABLE attempts RENAME COLUMN {from} TO {to}"
                        ))
                        .unwrap()
                };
                rename(&self.writer, "last_seen", "seen_last");
                assert!(self.writer.live_jobs().is_err());
                rename(&self.writer, "seen_last", "last_seen");
            }
            Op::Fenced(inner) => {
                self.journal.inner.fenced.store(true, Ordering::SeqCst);
                write(&mut self.writer, inner, self.now);
                self.journal.inner.fenced.store(false, Ordering::SeqCst);
            }
            Op::Batch(ops, read, commit) => {
                self.writer.begin_batch().unwrap();
                for o in ops {
                    write(&mut self.writer, o, self.now);
                    if *read {
                        let kept = self.writer.live_jobs().unwrap();
                        assert_eq!(
                            &*kept,
                            &*self.writer.live_jobs_whole().unwrap(),
                            "inside a batch, after {o:?}"
                        );
                    }
                }
                let _ = self.writer.end_batch(*commit);
            }
            Op::Snapshot(inner) => {
                // The follower keeps its list; the writer writes, and its file at that
                // entry becomes the snapshot, the journal before it pruned: the
                // follower, behind it, is reloaded from it when it next catches up.
                self.follower.live_jobs().unwrap();
                write(&mut self.writer, inner, self.now);
                self.snapshots += 1;
                let file = self.dir.join(format!("snap{}.db", self.snapshots));
                let seq = self.writer.snapshot_to(&file).unwrap();
                let head = head_of(u64::from(self.snapshots), seq);
                *self.journal.snapshot.lock().unwrap() = Some((head, file));
            }
            leaf => write(&mut self.writer, leaf, self.now),
        }
    }
}

fn attempts(s: &Store) -> Vec<Attempt> {
    let mut all = Vec::new();
    for c in s.chains(None).unwrap() {
        all.extend(s.attempts(c.id).unwrap());
    }
    all
}

fn pick<T>(v: &[T], i: usize) -> Option<&T> {
    (!v.is_empty()).then(|| &v[i % v.len()])
}

/// A transition of `chain` from where it is to `to`, with `attempt`.
fn change(s: &mut Store, chain: i64, to: ChainState, attempt: AttemptChange, now: i64) {
    let from = s.chain(chain).unwrap().unwrap().state;
    let t = Transition {
        attempt: Some(attempt),
        ..tr(
            from,
            &ChainUpdate::to(to),
            decision(Classification::Ambiguous, Action::Escalate),
        )
    };
    let _ = s.apply_one(chain, &t, now);
}

/// Does one write `op` (errors are the store's answers: a refused write changes nothing).
fn write(s: &mut Store, op: &Op, now: i64) {
    let all = attempts(s);
    let in_state = |st: AttemptState| -> Vec<&Attempt> {
        all.iter().filter(|a| a.state == st).collect::<Vec<_>>()
    };
    // The attempt `a` picks among those in `st`, changed by `attempt` with its chain to `to`.
    let change_one = |s: &mut Store,
                      st: AttemptState,
                      a: usize,
                      to: ChainState,
                      attempt: &dyn Fn(u32) -> AttemptChange| {
        if let Some(x) = pick(&in_state(st), a) {
            change(s, x.chain_id, to, attempt(x.n), now);
        }
    };
    match op {
        Op::Submit(k) => {
            let tasks = (*k > 0).then(|| (0..u32::from(*k)).collect());
            let _ = s.create_submission(&sub(tasks), now, |_| vec![]);
        }
        Op::Answer(l, job) => {
            let open = s.open_launches().unwrap();
            if let Some(l) = pick(&open, *l) {
                let _ = s.launch_submitted(l.id, &format!("{}", 700 + u32::from(*job)), now);
            }
        }
        Op::Seen(items) => {
            if all.is_empty() {
                return;
            }
            let seen: Vec<(i64, u32, &str)> = items
                .iter()
                .map(|(a, st, _)| {
                    let x = &all[a % all.len()];
                    (x.chain_id, x.n, STATES[*st as usize])
                })
                .collect();
            let owned: Vec<(i64, u32, bool)> = items
                .iter()
                .map(|(a, _, o)| {
                    let x = &all[a % all.len()];
                    (x.chain_id, x.n, *o)
                })
                .collect();
            let _ = s.set_last_seen(&seen, &owned);
        }
        Op::End(a, to) => {
            if let Some(x) = pick(&in_state(AttemptState::Live), *a) {
                let to = [
                    ChainState::Completed,
                    ChainState::Ready,
                    ChainState::PendingFailed,
                ][*to as usize];
                let from = s.chain(x.chain_id).unwrap().unwrap().state;
                let t = tr(
                    from,
                    &ChainUpdate::to(to),
                    decision(Classification::Ambiguous, Action::Escalate),
                );
                let _ = record_ending(s, x.chain_id, x.n, t, now);
            }
        }
        Op::RequeuedBySlurm(a) => change_one(s, AttemptState::Live, *a, ChainState::Active, &|n| {
            AttemptChange::Requeued {
                n,
                observation: serde_json::json!({}),
            }
        }),
        Op::Lost(a) => change_one(s, AttemptState::Live, *a, ChainState::PendingFailed, &|n| {
            AttemptChange::Lost { n }
        }),
        Op::Cancel(c) => {
            let chains = s.chains(None).unwrap();
            if let Some(c) = pick(&chains, *c) {
                let id = c.id;
                change(s, id, ChainState::Cancelled, AttemptChange::Cancelled, now);
            }
        }
        Op::Relaunch(c) | Op::Requeue(c) => {
            // A chain whose attempts have all ended (as a retry's would be).
            let chains: Vec<Chain> = s
                .chains(None)
                .unwrap()
                .into_iter()
                .filter(|c| {
                    all.iter()
                        .filter(|a| a.chain_id == c.id)
                        .all(|a| a.state == AttemptState::Ended)
                })
                .collect();
            let Some(c) = pick(&chains, *c) else {
                return;
            };
            let last_job = all
                .iter()
                .filter(|a| a.chain_id == c.id)
                .filter_map(|a| a.slurm_job_id.clone())
                .next_back();
            match (op, last_job) {
                (Op::Requeue(_), Some(job)) => {
                    let _ = s.begin_requeue(c.submission_id, c.id, &job, &[], now);
                }
                _ => {
                    let _ = s.begin_relaunch(c.submission_id, &[c.id], now, |_| vec![]);
                }
            }
        }
        Op::NotSubmitted(a) => change_one(
            s,
            AttemptState::Launching,
            *a,
            ChainState::PendingFailed,
            &|n| AttemptChange::NotSubmitted { n },
        ),
        Op::Withdrawn(a) => change_one(
            s,
            AttemptState::Launching,
            *a,
            ChainState::PendingFailed,
            &|n| AttemptChange::Withdrawn { n },
        ),
        Op::Discard(a) => {
            // Any launch's: the store discards a submission with no decision, its live
            // attempts too (rows deleted).
            if let Some(x) = pick(&all, *a) {
                let _ = s.discard_submission(x.launch_id);
            }
        }
        other => unreachable!("not a leaf: {other:?}"),
    }
}

/// A snapshot copied into a replica that then cannot be brought to this version's schema
/// (its migration fails) has replaced the replica's rows all the same: the live list is
/// not kept from before it (the copy tells no hook and changes no version).
#[test]
fn a_snapshot_whose_migration_fails_leaves_no_live_list_kept_from_before() {
    let mut w = World::new();
    let first = w
        .writer
        .create_submission(&sub(None), 100, |_| vec![])
        .unwrap();
    w.writer.launch_submitted(first.id, "41", 101).unwrap();
    w.follower.catch_up().unwrap();
    assert_eq!(w.follower.live_jobs().unwrap().len(), 1);
    let second = w
        .writer
        .create_submission(&sub(None), 102, |_| vec![])
        .unwrap();
    w.writer.launch_submitted(second.id, "42", 103).unwrap();
    let file = w.dir.join("snap.db");
    let seq = w.writer.snapshot_to(&file).unwrap();
    // Marked one migration behind, while it has that migration's tables already.
    rusqlite::Connection::open(&file)
        .unwrap()
        .pragma_update(None, "user_version", schema::MIGRATIONS.len() as i64 - 1)
        .unwrap();
    let head = head_of(1, seq);
    *w.journal.snapshot.lock().unwrap() = Some((head, file));
    assert!(w.follower.catch_up().is_err());
    let whole = w.follower.live_jobs_whole().unwrap();
    assert_eq!(whole.len(), 2, "the snapshot's rows were copied");
    assert_eq!(&*w.follower.live_jobs().unwrap(), &*whole);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    })]

    /// After every write, in any order, the live list kept by the writes is the list read
    /// whole: on the writer, on another connection to its file, and on a replica that
    /// follows the journal (and is reloaded from a snapshot).
    #[test]
    fn the_kept_live_list_is_the_one_read_whole_after_any_writes(
        ops in prop::collection::vec(op(), 1..60)
    ) {
        let mut w = World::new();
        for o in &ops {
            w.run(o);
            w.check(o);
        }
    }
}

/// The head of snapshot `id` at journal entry `seq`, as the test's journal offers it.
fn head_of(id: u64, seq: u64) -> snapshot::SnapshotHead {
    snapshot::SnapshotHead {
        id,
        seq,
        format: snapshot::FORMAT,
        journal_format: journal::FORMAT,
        parts: 1,
        bytes: 0,
        sha256: String::new(),
    }
}
