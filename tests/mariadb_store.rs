//! The store on a real MariaDB (Debian's mariadb-server, a private server per test,
//! `tests/mariadb/mod.rs`): every case of the store's suite (`store::suite`, which the unit
//! tests run on a journal in memory) passes with its journal on the shared database, and
//! ends with a new replica made from that journal alone holding the same rows; a deposed
//! writer appends nothing and its replica rolls the write back, while the new writer
//! carries on from every entry before; an entry larger than a row is written in parts; a
//! database of another Slurm cluster, or one a later version wrote to, is refused;
//! snapshots and the journal's pruning (docs/cluster.md, "Snapshots"): new and stale
//! replicas start from the snapshot, the journal stays bounded, a crash mid-snapshot
//! leaves a usable state, a deposed writer publishes nothing.

mod common;
mod mariadb;

use mariadb::MariaDb;
use slurm_supervisor::domain::election::Epoch;
use slurm_supervisor::plumbing::dbconfig::SnapshotPolicy;
use slurm_supervisor::store::cluster::{
    read_password_file, Acquisition, ClusterDb, EntrySizes, EpochCell, Pruned, Refusal,
    SharedJournal, StoreUrl,
};
use slurm_supervisor::store::journal::FORMAT;
use slurm_supervisor::store::suite::{self, Journaled, CASES};
use slurm_supervisor::store::{LaunchState, Store, StoreError};
use std::cell::Cell;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

const PASSWORD: &str = "store-test-pw";
const TIMEOUT: Duration = Duration::from_secs(10);
const LONG: Duration = Duration::from_secs(600);
const CLUSTER: &str = "devcluster";

struct Site {
    server: MariaDb,
}

/// One supervisor database on the site's server.
#[derive(Clone)]
struct Db {
    url: StoreUrl,
    password_file: PathBuf,
}

impl Db {
    fn connect(&self) -> ClusterDb {
        let password = read_password_file(&self.password_file).unwrap();
        ClusterDb::connect(&self.url, &password, TIMEOUT).unwrap()
    }

    /// A daemon's journal on this database, acting under `epoch` (`None`: a standby).
    fn journal(&self, epoch: Option<Epoch>) -> (SharedJournal, EpochCell) {
        let cell = EpochCell::default();
        cell.set(epoch);
        let db = self.clone();
        let connect = Box::new(move || {
            let password = read_password_file(&db.password_file).unwrap();
            ClusterDb::connect(&db.url, &password, TIMEOUT)
        });
        (SharedJournal::new(connect, cell.clone()), cell)
    }

    /// Prepares the database for this cluster; its store instance.
    fn prepare(&self) -> String {
        self.connect().prepare(CLUSTER).unwrap().unwrap().instance
    }

    fn win(&self, holder: &str) -> Epoch {
        match self.connect().try_acquire(holder, LONG).unwrap() {
            Acquisition::Won(g) => g.epoch,
            Acquisition::Held(v) => panic!("the lease is held: {v:?}"),
        }
    }
}

impl Site {
    fn new() -> Site {
        Site {
            server: MariaDb::start(),
        }
    }

    fn database(&self, name: &str) -> Db {
        let password_file = self.server.dir().join(format!("{name}-password"));
        std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
        std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        Db {
            url: self.server.supervisor_database(name, name, PASSWORD),
            password_file,
        }
    }

    /// A writer's journaled store on a new database of its own, holding its lease.
    fn journaled(&self, name: &str) -> Journaled {
        let db = self.database(name);
        let instance = db.prepare();
        let epoch = db.win("writer");
        let (journal, _cell) = db.journal(Some(epoch));
        let store = Store::in_memory_replica(&instance, Box::new(journal)).unwrap();
        Journaled::new(store, move || {
            let (journal, _) = db.journal(None);
            Store::in_memory_replica(&instance, Box::new(journal)).unwrap()
        })
    }
}

#[test]
fn every_case_of_the_store_suite_passes_with_its_journal_on_mariadb() {
    let site = Site::new();
    let mut failed = Vec::new();
    for (i, (name, case)) in CASES.iter().enumerate() {
        let made = Cell::new(0);
        let make = || {
            made.set(made.get() + 1);
            site.journaled(&format!("c{i}_{}", made.get()))
        };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(&make))).is_err() {
            failed.push(*name);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} store cases failed on MariaDB: {failed:?}",
        failed.len(),
        CASES.len()
    );
    assert!(CASES.len() >= 10, "the suite has {} cases", CASES.len());
    // The cases did write through the shared database.
    let entries: u64 = site
        .server
        .admin_sql("SELECT COUNT(*) FROM c0_1.journal")
        .parse()
        .unwrap();
    assert!(
        entries > 0,
        "the first case appended nothing to its journal"
    );
}

#[test]
fn a_deposed_writer_appends_nothing_and_the_new_writer_carries_on_from_every_entry() {
    let site = Site::new();
    let db = site.database("supervisor");
    let instance = db.prepare();
    let first = db.win("login1");
    let (j1, cell1) = db.journal(Some(first));
    let mut login1 = Store::in_memory_replica(&instance, Box::new(j1)).unwrap();
    let (j2, cell2) = db.journal(None);
    let mut login2 = Store::in_memory_replica(&instance, Box::new(j2)).unwrap();

    let launch = login1
        .create_submission(&suite::sub(None), 100, |tag| vec![tag.to_string()])
        .unwrap();
    // A standby cannot write: its journal has no epoch.
    assert!(matches!(
        login2.note_launch_error(launch.id, "x", false),
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(login2.catch_up().unwrap(), 1);

    // login1 gives the lease up; login2 takes it, under the next epoch.
    assert!(db.connect().release("login1", first).unwrap());
    let second = db.win("login2");
    assert_eq!(second, Epoch(first.0 + 1));
    cell2.set(Some(second));
    login2.catch_up().unwrap();
    login2.launch_submitted(launch.id, "501", 101).unwrap();

    // login1 still believes it acts: its write is refused and rolled back.
    let e = login1.launch_submitted(launch.id, "999", 102).unwrap_err();
    assert!(matches!(e, StoreError::Fenced { .. }), "{e}");
    assert_eq!(login1.launch(launch.id).unwrap().state, LaunchState::Intent);
    cell1.set(None);
    // Catching up, it sees what the new writer did, and only that.
    assert_eq!(login1.catch_up().unwrap(), 1);
    assert_eq!(
        login1.launch(launch.id).unwrap().job_id.as_deref(),
        Some("501")
    );
    assert_eq!(suite::dump(&login1), suite::dump(&login2));
    assert_eq!(db.connect().journal_head().unwrap(), 2);
    // An entry that does not follow the last one is refused, even from the lease's holder
    // (a replica ahead of a database restored from a backup).
    let e = db.connect().append(second, 5, FORMAT, b"[]").unwrap_err();
    assert!(
        e.to_string().contains("the shared journal ends at entry 2"),
        "{e}"
    );
    assert_eq!(db.connect().journal_head().unwrap(), 2);
}

#[test]
fn an_entry_larger_than_a_row_is_written_in_parts_and_read_back_whole() {
    let site = Site::new();
    let mut s = site.journaled("supervisor");
    let mut big = suite::sub(None);
    // Three and a half rows of script, of bytes that are not text.
    big.script = Some(
        (0..(3 * (1 << 20) + (1 << 19)))
            .map(|i| (i % 251) as u8)
            .collect(),
    );
    let l = s.create_submission(&big, 100, |_| vec![]).unwrap();
    assert_eq!(s.submission(l.submission_id).unwrap().script, big.script);
    assert_eq!(
        site.server
            .admin_sql("SELECT COUNT(*), MAX(parts) FROM supervisor.journal WHERE seq = 1"),
        "5\t5",
        "base64 of 3.5 MiB is 4.7 MiB: five rows of 1 MiB"
    );
    // Dropping `s` makes a new replica from the journal and compares every row.
}

#[test]
fn a_database_of_another_cluster_or_of_a_later_version_is_refused() {
    let site = Site::new();
    let db = site.database("supervisor");
    db.prepare();
    let e = db.connect().prepare("othercluster").unwrap().unwrap_err();
    assert_eq!(
        e,
        Refusal::OtherCluster {
            theirs: CLUSTER.into(),
            ours: "othercluster".into()
        }
    );
    assert!(e
        .to_string()
        .contains("point [store] url at this cluster's database"));

    // A later version appended an entry: this one neither acts nor applies it.
    let epoch = db.win("newer");
    db.connect().append(epoch, 1, FORMAT + 1, b"[]").unwrap();
    let e = db.connect().prepare(CLUSTER).unwrap().unwrap_err();
    assert!(matches!(e, Refusal::TooNew { .. }), "{e}");
    assert!(e.to_string().contains("upgrade this node"), "{e}");
    let instance = db.connect().identity().unwrap().instance;
    let (journal, _) = db.journal(None);
    match Store::in_memory_replica(&instance, Box::new(journal)) {
        Err(StoreError::JournalTooNew { seq: 1, .. }) => {}
        Err(e) => panic!("expected the later entry refused; got {e}"),
        Ok(_) => panic!("a replica applied an entry of a later format"),
    }
}

// Snapshots and pruning (docs/cluster.md, "Snapshots").

/// A snapshot of `store`'s replica at its last entry written under `epoch`, and the
/// journal pruned, as the active daemon's snapshot thread does it (a policy of one entry).
fn snapshot(db: &Db, epoch: Epoch, store: &Store) -> Pruned {
    let (seq, why, pruned) = snapshot_now(db, epoch, None, |dest| store.snapshot_to(dest));
    assert_eq!((seq, why), (store.journal_seq(), "entries"));
    pruned
}

/// A snapshot under `epoch` made by `copy` (a replica file beside `near`), due at once (a
/// policy of one entry), and the journal pruned: its entry, why it was due, the pruning.
fn snapshot_now(
    db: &Db,
    epoch: Epoch,
    near: Option<&std::path::Path>,
    copy: impl FnOnce(&std::path::Path) -> Result<u64, slurm_supervisor::store::StoreError>,
) -> (u64, &'static str, Pruned) {
    let policy = SnapshotPolicy {
        entries: 1,
        bytes: 0,
        interval: Duration::ZERO,
    };
    db.connect()
        .snapshot_if_due(
            epoch,
            &policy,
            &mut EntrySizes::default(),
            near,
            copy,
            &|| false,
        )
        .unwrap()
        .expect("a snapshot was due")
}

/// Some writes of every kind a cycle makes: submissions, a launch's job, notes.
fn writes(s: &mut Store, n: usize, at: i64) {
    for i in 0..n {
        let l = s
            .create_submission(
                &suite::sub(None),
                at + i as i64,
                |tag| vec![tag.to_string()],
            )
            .unwrap();
        s.launch_submitted(l.id, &format!("{}", 1000 + at + i as i64), at + i as i64)
            .unwrap();
        // A user of its own each time: an opt-in that changes nothing writes nothing.
        s.set_plain_opt(1000 + (at as u32) + i as u32, i % 2 == 0, at)
            .unwrap();
    }
}

fn journal_rows(site: &Site, db: &str) -> u64 {
    site.server
        .admin_sql(&format!("SELECT COUNT(*) FROM {db}.journal"))
        .parse()
        .unwrap()
}

/// A node started after the journal was pruned starts from the snapshot and holds the
/// same rows as the writer and as a node that applied every entry from the first; its
/// replica is a file (the daemon's: the snapshot is copied into the open WAL database).
#[test]
fn a_node_started_after_pruning_holds_the_same_rows_as_one_that_replayed_everything() {
    let site = Site::new();
    let db = site.database("supervisor");
    let instance = db.prepare();
    let epoch = db.win("login1");
    let (j1, _c1) = db.journal(Some(epoch));
    let mut login1 = Store::in_memory_replica(&instance, Box::new(j1)).unwrap();
    let (j2, _) = db.journal(None);
    let mut login2 = Store::in_memory_replica(&instance, Box::new(j2)).unwrap();

    writes(&mut login1, 10, 100);
    assert_eq!(login2.catch_up().unwrap(), 30, "login2 applies every entry");
    let pruned = snapshot(&db, epoch, &login1);
    assert_eq!(pruned.through, 30);
    assert_eq!(pruned.entries, 30);
    assert_eq!(
        journal_rows(&site, "supervisor"),
        0,
        "the journal was pruned"
    );
    writes(&mut login1, 4, 200);
    assert_eq!(db.connect().journal_head().unwrap(), 42);
    assert_eq!(journal_rows(&site, "supervisor"), 12);

    let dir = tempfile::tempdir().unwrap();
    let (j3, _) = db.journal(None);
    let login3 = Store::open_replica(&dir.path().join("replica.db"), &instance, Box::new(j3))
        .expect("a new node starts from the snapshot and the entries after it");
    assert_eq!(login3.journal_seq(), 42);
    // Still a WAL database (readers beside the writer), though the snapshot's file is not.
    let mode: String = rusqlite::Connection::open(dir.path().join("replica.db"))
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    assert_eq!(login2.catch_up().unwrap(), 12);
    assert_eq!(suite::dump(&login3), suite::dump(&login1));
    assert_eq!(suite::dump(&login2), suite::dump(&login1));
    // The new node writes on from there once it holds the lease.
    drop(login1);
    assert!(db.connect().release("login1", epoch).unwrap());
    let second = db.win("login3");
    let (j3, _c3) = db.journal(Some(second));
    drop(login3);
    let mut login3 =
        Store::open_replica(&dir.path().join("replica.db"), &instance, Box::new(j3)).unwrap();
    writes(&mut login3, 1, 300);
    assert_eq!(login2.catch_up().unwrap(), 3);
    assert_eq!(suite::dump(&login2), suite::dump(&login3));
    // The daemon's way: the replica's file snapshotted on a read-only connection of its
    // own while the store is open (and another node started from that snapshot).
    let path = dir.path().join("replica.db");
    let (seq, _, pruned) =
        snapshot_now(&db, second, Some(&path), |d| Store::snapshot_file(&path, d));
    assert_eq!((seq, pruned.through), (45, 30));
    let (j4, _) = db.journal(None);
    let login4 = Store::in_memory_replica(&instance, Box::new(j4)).unwrap();
    assert_eq!(suite::dump(&login4), suite::dump(&login3));
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".snapshot"))
        .collect();
    assert!(left.is_empty(), "snapshot files left behind: {left:?}");
}

/// Two snapshots are kept and the journal is pruned before the older: a standby between
/// the two catches up from the journal; one behind the horizon reloads from the newest
/// snapshot, and both end with the writer's rows. A deposed writer can neither publish a
/// snapshot nor prune (the fence).
#[test]
fn a_standby_behind_the_horizon_reloads_from_the_snapshot_and_one_within_catches_up() {
    let site = Site::new();
    let db = site.database("supervisor");
    let instance = db.prepare();
    let epoch = db.win("login1");
    let (j1, _c1) = db.journal(Some(epoch));
    let mut login1 = Store::in_memory_replica(&instance, Box::new(j1)).unwrap();
    let (j2, _) = db.journal(None);
    let mut behind = Store::in_memory_replica(&instance, Box::new(j2)).unwrap();
    let (j3, _) = db.journal(None);
    let mut within = Store::in_memory_replica(&instance, Box::new(j3)).unwrap();

    writes(&mut login1, 2, 100);
    behind.catch_up().unwrap();
    assert_eq!(behind.journal_seq(), 6);
    writes(&mut login1, 2, 200);
    assert_eq!(snapshot(&db, epoch, &login1).through, 12);
    writes(&mut login1, 2, 300);
    within.catch_up().unwrap();
    assert_eq!(within.journal_seq(), 18);
    writes(&mut login1, 2, 400);
    // The second snapshot: the first is kept, the journal pruned through it.
    let pruned = snapshot(&db, epoch, &login1);
    assert_eq!((pruned.through, pruned.entries), (12, 0));
    assert_eq!(db.connect().snapshots().unwrap(), [24, 12]);
    writes(&mut login1, 1, 500);

    // Within the horizon (18 > 12): the journal's entries 19..=27.
    assert_eq!(within.catch_up().unwrap(), 9);
    // Behind it (6 < 12): told so, reloaded from the snapshot at 24, then 25..=27.
    let (j, _) = db.journal(None);
    let mut probe = j;
    use slurm_supervisor::store::journal::Journal;
    match probe.read_after(6, 16) {
        Err(StoreError::Pruned {
            after: 6,
            through: 12,
        }) => {}
        other => panic!("expected entry 7 pruned, got {other:?}"),
    }
    assert_eq!(behind.catch_up().unwrap(), 3);
    assert_eq!(behind.journal_seq(), 27);
    assert_eq!(suite::dump(&behind), suite::dump(&login1));
    assert_eq!(suite::dump(&within), suite::dump(&login1));

    // A third snapshot drops the first and prunes through the second.
    let pruned = snapshot(&db, epoch, &login1);
    assert_eq!((pruned.through, pruned.snapshots), (24, 1));
    assert_eq!(db.connect().snapshots().unwrap(), [27, 24]);
    assert_eq!(db.connect().pruned_through().unwrap(), 24);
    assert_eq!(journal_rows(&site, "supervisor"), 3);
    assert_eq!(
        site.server
            .admin_sql("SELECT COUNT(DISTINCT id) FROM supervisor.snapshot_part"),
        "2"
    );

    // Deposed (another node took the lease), login1 can neither publish nor prune.
    assert!(db.connect().release("login1", epoch).unwrap());
    let second = db.win("login2");
    // The new writer writes on; login1 applies it, so a snapshot is due.
    let (j, _) = db.journal(Some(second));
    let mut next = Store::in_memory_replica(&instance, Box::new(j)).unwrap();
    writes(&mut next, 1, 700);
    login1.catch_up().unwrap();
    let deposed = db.connect().snapshot_if_due(
        epoch,
        &SnapshotPolicy {
            entries: 1,
            bytes: 0,
            interval: Duration::ZERO,
        },
        &mut EntrySizes::default(),
        None,
        |d| login1.snapshot_to(d),
        &|| false,
    );
    assert!(
        matches!(deposed, Err(StoreError::Fenced { .. })),
        "{deposed:?}"
    );
    assert_eq!(db.connect().snapshots().unwrap(), [27, 24]);
    assert!(matches!(
        db.connect().prune(epoch),
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(db.connect().pruned_through().unwrap(), 24);
}

/// The journal stays bounded under a stream of writes: with a snapshot every 40 entries,
/// the journal never holds more than the entries since the older of the two snapshots
/// kept, plus one round, however many are written.
#[test]
fn the_journal_stays_bounded_under_a_stream_of_writes() {
    let site = Site::new();
    let db = site.database("supervisor");
    let instance = db.prepare();
    let epoch = db.win("login1");
    let (j1, _c1) = db.journal(Some(epoch));
    let mut login1 = Store::in_memory_replica(&instance, Box::new(j1)).unwrap();
    let policy = SnapshotPolicy {
        entries: 40,
        bytes: 0,
        interval: Duration::ZERO,
    };
    let mut sizes = EntrySizes::default();
    let mut conn = db.connect();
    let mut most = 0;
    let mut made = 0;
    for round in 0..20 {
        writes(&mut login1, 5, 1000 * round);
        if conn
            .snapshot_if_due(
                epoch,
                &policy,
                &mut sizes,
                None,
                |dest| login1.snapshot_to(dest),
                &|| false,
            )
            .unwrap()
            .is_some()
        {
            made += 1;
        }
        most = most.max(journal_rows(&site, "supervisor"));
    }
    assert_eq!(login1.journal_seq(), 300);
    assert!(made >= 6, "{made} snapshots");
    assert!(most <= 2 * 40 + 15, "the journal held {most} entries");
    // By size too: 64 KiB of entries.
    let by_size = SnapshotPolicy {
        entries: 0,
        bytes: 64 << 10,
        interval: Duration::ZERO,
    };
    let not_yet = conn
        .snapshot_if_due(
            epoch,
            &by_size,
            &mut sizes,
            None,
            |d| login1.snapshot_to(d),
            &|| false,
        )
        .unwrap();
    assert_eq!(
        not_yet, None,
        "the entries since the last snapshot are small"
    );
    let mut big = suite::sub(None);
    big.script = Some(vec![b'x'; 70 << 10]);
    login1.create_submission(&big, 5, |_| vec![]).unwrap();
    let (seq, why, _) = conn
        .snapshot_if_due(
            epoch,
            &by_size,
            &mut sizes,
            None,
            |d| login1.snapshot_to(d),
            &|| false,
        )
        .unwrap()
        .expect("due by size");
    assert_eq!((seq, why), (login1.journal_seq(), "size"));
    let (j, _) = db.journal(None);
    let fresh = Store::in_memory_replica(&instance, Box::new(j)).unwrap();
    assert_eq!(suite::dump(&fresh), suite::dump(&login1));
}

/// Run as a child by `a_crash_mid_snapshot_leaves_the_last_snapshot_and_the_journal_usable`
/// (it does nothing on its own): a daemon that snapshots its replica under the parent's
/// epoch, killed by the failpoint the parent names.
#[test]
fn child_snapshot_until_the_failpoint() {
    let Ok(url) = std::env::var("SNAPSHOT_CHILD_URL") else {
        return;
    };
    let db = Db {
        url: url.parse().unwrap(),
        password_file: std::env::var("SNAPSHOT_CHILD_PASSWORD").unwrap().into(),
    };
    let epoch = Epoch(
        std::env::var("SNAPSHOT_CHILD_EPOCH")
            .unwrap()
            .parse()
            .unwrap(),
    );
    let instance = db.connect().identity().unwrap().instance;
    let (j, _) = db.journal(None);
    let store = Store::in_memory_replica(&instance, Box::new(j)).unwrap();
    snapshot(&db, epoch, &store);
    panic!("the failpoint did not stop the snapshot");
}

/// A daemon killed mid-snapshot (after its first part) or between the snapshot's
/// publication and the pruning (SIGKILL, by `src/plumbing/failpoint.rs`) leaves a usable state: a
/// new node starts from the last complete snapshot and the journal after it, with the
/// writer's rows; the next snapshot removes what the dead one left.
#[test]
fn a_crash_mid_snapshot_leaves_the_last_snapshot_and_the_journal_usable() {
    let site = Site::new();
    let db = site.database("supervisor");
    let instance = db.prepare();
    let epoch = db.win("login1");
    let (j1, _c1) = db.journal(Some(epoch));
    let mut login1 = Store::in_memory_replica(&instance, Box::new(j1)).unwrap();
    writes(&mut login1, 3, 100);
    assert_eq!(snapshot(&db, epoch, &login1).through, 9);
    // Three parts' worth of a script that does not compress: the snapshot is several rows.
    let mut big = suite::sub(None);
    big.script = Some((0..(5 << 19)).map(|_| rand::random::<u8>()).collect());
    login1.create_submission(&big, 200, |_| vec![]).unwrap();
    writes(&mut login1, 1, 300);

    let crash = |failpoint: &str| {
        let u = &db.url;
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_snapshot_until_the_failpoint",
                "--nocapture",
            ])
            .env(
                "SNAPSHOT_CHILD_URL",
                format!("mysql://{}@{}:{}/{}", u.user, u.host, u.port, u.database),
            )
            .env("SNAPSHOT_CHILD_PASSWORD", &db.password_file)
            .env("SNAPSHOT_CHILD_EPOCH", epoch.0.to_string())
            .env("SLURM_SUPERVISOR_FAILPOINT", failpoint)
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(9),
            "the child was not killed at {failpoint}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let new_node = || {
        let (j, _) = db.journal(None);
        Store::in_memory_replica(&instance, Box::new(j)).unwrap()
    };

    crash("snapshot-mid-parts");
    assert_eq!(
        site.server
            .admin_sql("SELECT COUNT(*), SUM(complete) FROM supervisor.snapshot WHERE seq = 13"),
        "1\t0",
        "the dead daemon's snapshot is there, incomplete"
    );
    assert_eq!(db.connect().latest_snapshot().unwrap().unwrap().seq, 9);
    assert_eq!(db.connect().pruned_through().unwrap(), 9);
    assert_eq!(suite::dump(&new_node()), suite::dump(&login1));

    crash("snapshot-before-prune");
    assert_eq!(db.connect().snapshots().unwrap(), [13, 9]);
    assert_eq!(db.connect().pruned_through().unwrap(), 9, "not pruned yet");
    assert!(journal_rows(&site, "supervisor") > 0);
    assert_eq!(suite::dump(&new_node()), suite::dump(&login1));

    // The next snapshot prunes through 13 and removes the incomplete one's parts.
    writes(&mut login1, 1, 400);
    let pruned = snapshot(&db, epoch, &login1);
    assert_eq!((pruned.through, pruned.snapshots), (13, 2));
    assert_eq!(
        site.server.admin_sql(
            "SELECT COUNT(*) FROM supervisor.snapshot_part WHERE id NOT IN (SELECT id FROM supervisor.snapshot WHERE complete = 1)"
        ),
        "0"
    );
    assert_eq!(suite::dump(&new_node()), suite::dump(&login1));
}

/// The daemon does it by itself: the active daemon (on the fake Slurm) snapshots its store
/// once the policy says so and prunes the journal; a daemon started on a new node (an
/// empty state directory) starts from that snapshot, says so, and answers for the chains
/// written before the pruning; stopped while the journal is pruned past its replica and
/// started again, it reloads its replica file from the snapshot, says so, and answers for
/// the chains written meanwhile.
#[test]
fn the_active_daemon_snapshots_and_new_or_stale_nodes_start_from_its_snapshot() {
    let site = Site::new();
    let db = site.database("supervisor");
    let u = &db.url;
    let store = |node: &str| {
        format!(
            "\n[store]\nurl = \"mysql://{}@{}:{}/{}\"\npassword_file = {:?}\nnode = \"{node}\"\n\
             lease = \"12s\"\nmargin = \"1s\"\ntimeout = \"2s\"\nsnapshot_entries = 4\n",
            u.user,
            u.host,
            u.port,
            u.database,
            db.password_file.display().to_string()
        )
    };
    let (d1, _fake1) = common::fake::start(&store("login1"), &[]);
    mariadb::wait_for("login1 to act", Duration::from_secs(60), || {
        d1.log().contains("this daemon is the active one now")
    });
    d1.write_script("job.sh", "echo hi");
    let jobs: Vec<String> = (0..3).map(|_| d1.submit(&["job.sh"])).collect();
    mariadb::wait_for("a snapshot by login1", Duration::from_secs(60), || {
        d1.log().contains("snapshot of the store at journal entry")
    });
    let through = db.connect().pruned_through().unwrap();
    assert!(through >= 4, "pruned through {through}");
    let first = db.connect().journal_head().unwrap();
    let (d2, _fake2) = common::fake::start(&store("login2"), &[]);
    mariadb::wait_for(
        "login2 to start from the snapshot",
        Duration::from_secs(30),
        || {
            d2.log()
                .contains("it starts from the shared database's snapshot at journal entry")
        },
    );
    for job in &jobs {
        let on1 = d1.status(job);
        assert_eq!(
            on1[0]["slurm_job_id"].as_str(),
            Some(job.as_str()),
            "{on1:?}"
        );
        mariadb::wait_for("login2 to show the chain", Duration::from_secs(30), || {
            let on2 = d2.status(job);
            !on2.is_empty()
                && on2.len() == on1.len()
                && on2[0]["id"] == on1[0]["id"]
                && on2[0]["slurm_job_id"] == on1[0]["slurm_job_id"]
        });
    }
    assert!(db.connect().journal_head().unwrap() >= first);

    // login2 stops; login1 writes on and snapshots twice, so the journal is pruned past
    // login2's replica: started again, login2 reloads from the snapshot and says so.
    let mut d2 = d2;
    d2.stop();
    let left_at = db.connect().journal_head().unwrap();
    let more: Vec<String> = (0..3).map(|_| d1.submit(&["job.sh"])).collect();
    mariadb::wait_for(
        "the journal pruned past login2's replica",
        Duration::from_secs(60),
        || db.connect().pruned_through().unwrap() > left_at,
    );
    d2.spawn();
    // Its replica stood at or before `left_at` (a standby lags by up to a poll).
    mariadb::wait_for("login2 to say it reloads", Duration::from_secs(30), || {
        d2.log()
            .contains("and the shared journal was pruned through entry")
    });
    let log = d2.log();
    let line = log
        .lines()
        .find(|l| l.contains("and the shared journal was pruned through entry"))
        .unwrap();
    assert!(
        line.contains("reloading the replica from the snapshot at entry"),
        "{line}"
    );
    for job in &more {
        mariadb::wait_for(
            "login2 to show the later chain",
            Duration::from_secs(30),
            || {
                d2.status(job).first().map(|c| c["slurm_job_id"].clone())
                    == Some(serde_json::Value::String(job.clone()))
            },
        );
    }
}

/// Plain sbatch on two login nodes (docs/plain-sbatch.md): a user's `opt-in` answered by
/// the active node is published in the standby node's own spool too, from the journal,
/// for that node's cli_filter; and their `opt-out` after it.
#[test]
fn a_standby_publishes_a_users_choice_in_its_own_nodes_spool() {
    let site = Site::new();
    let db = site.database("supervisor");
    let u = &db.url;
    let config = |node: &str| {
        format!(
            "\n[plain_sbatch]\nenabled = true\n\
             [store]\nurl = \"mysql://{}@{}:{}/{}\"\npassword_file = {:?}\nnode = \"{node}\"\n\
             lease = \"12s\"\nmargin = \"1s\"\ntimeout = \"2s\"\n",
            u.user,
            u.host,
            u.port,
            u.database,
            db.password_file.display().to_string()
        )
    };
    let (d1, _fake1) = common::fake::start(&config("login1"), &[]);
    mariadb::wait_for("login1 to act", Duration::from_secs(60), || {
        d1.log().contains("this daemon is the active one now")
    });
    let (d2, _fake2) = common::fake::start(&config("login2"), &[]);
    let uid = nix::unistd::getuid().as_raw();
    let file = d2
        .state_dir()
        .join("plain-sbatch/optin")
        .join(uid.to_string());
    let choice = || std::fs::read_to_string(&file).unwrap_or_default();
    mariadb::wait_for("login2 to start", Duration::from_secs(30), || {
        d2.log().contains("standing by")
    });
    assert_eq!(choice(), "", "no choice yet");
    for (cmd, want) in [("opt-in", "in"), ("opt-out", "out")] {
        let out = d1.ctl(&[cmd]);
        assert!(out.status.success(), "{cmd}: {out:?}");
        mariadb::wait_for(
            &format!("login2's spool to say {want}"),
            Duration::from_secs(30),
            || choice().trim() == want,
        );
    }
}
