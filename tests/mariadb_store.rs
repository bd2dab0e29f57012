//! The store on a real MariaDB (Debian's mariadb-server, a private server per test,
//! `tests/mariadb/mod.rs`): every case of the store's suite (`store::suite`, which the unit
//! tests run on a journal in memory) passes with its journal on the shared database, and
//! ends with a new replica made from that journal alone holding the same rows; a deposed
//! writer appends nothing and its replica rolls the write back, while the new writer
//! carries on from every entry before; an entry larger than a row is written in parts; a
//! database of another Slurm cluster, or one a later version wrote to, is refused.

mod common;
mod mariadb;

use mariadb::MariaDb;
use slurm_supervisor::election::Epoch;
use slurm_supervisor::store::cluster::{
    read_password_file, Acquisition, ClusterDb, EpochCell, Refusal, SharedJournal, StoreUrl,
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
