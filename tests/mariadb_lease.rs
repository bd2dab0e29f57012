//! The lease of cluster mode against a real MariaDB (Debian's mariadb-server, a private
//! server per test, `tests/mariadb/mod.rs`): contenders started at the same instant elect
//! exactly one; a holder renews under its epoch; after expiry by the server's clock
//! another takes over under the next epoch, and the deposed holder can neither renew nor
//! write (its fenced transaction leaves nothing); a release lets another in at once; a
//! takeover waits for a fenced write in flight; a holder that finds its own live lease
//! takes it under a new epoch; every daemon writes its own row and any reads them all;
//! the password file must be private; the grants the tests give are those docs/cluster.md
//! gives.

mod common;
mod mariadb;

use mariadb::{wait_for, MariaDb, GRANTS};
use mysql::prelude::Queryable;
use slurm_supervisor::domain::election::Epoch;
use slurm_supervisor::store::cluster::{
    fence, read_password_file, Acquisition, ClusterDb, Fence, Grant, PasswordFileError, StoreUrl,
};
use slurm_supervisor::store::StoreError;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::Duration;

const PASSWORD: &str = "lease-test-pw";
/// Every call to the database is bounded by this.
const TIMEOUT: Duration = Duration::from_secs(10);
const LONG: Duration = Duration::from_secs(600);
/// A lease short enough to wait out: the takeover tests wait for it to expire by the
/// server's clock.
const SHORT: Duration = Duration::from_millis(1500);

/// A private server with the supervisor's database and user, the lease table made by that
/// user (so the grants are shown to be enough), and a `probe` table that a fenced write
/// fills.
struct Site {
    server: MariaDb,
    url: StoreUrl,
    password_file: PathBuf,
}

impl Site {
    fn new() -> Site {
        let server = MariaDb::start();
        let url = server.supervisor_database("supervisor", "ssv", PASSWORD);
        let password_file = server.dir().join("db-password");
        std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
        std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let site = Site {
            server,
            url,
            password_file,
        };
        site.db().prepare_lease().unwrap();
        site.server
            .admin_sql("CREATE TABLE supervisor.probe (written_under BIGINT UNSIGNED NOT NULL)");
        site
    }

    fn db(&self) -> ClusterDb {
        let password = read_password_file(&self.password_file).unwrap();
        ClusterDb::connect(&self.url, &password, TIMEOUT).unwrap()
    }

    /// A plain connection as the supervisor's user, for a transaction the test writes
    /// itself around [`fence`].
    fn raw(&self) -> mysql::Conn {
        mysql::Conn::new(
            mysql::OptsBuilder::new()
                .ip_or_hostname(Some(self.url.host.as_str()))
                .tcp_port(self.url.port)
                .user(Some(self.url.user.as_str()))
                .pass(Some(PASSWORD))
                .db_name(Some(self.url.database.as_str()))
                .prefer_socket(false)
                .read_timeout(Some(TIMEOUT)),
        )
        .unwrap()
    }

    /// The epochs the probe rows were written under, as the admin reads them.
    fn probe(&self) -> String {
        self.server
            .admin_sql("SELECT written_under FROM supervisor.probe ORDER BY written_under")
    }
}

fn won(a: Acquisition) -> Grant {
    match a {
        Acquisition::Won(g) => g,
        Acquisition::Held(view) => panic!("expected to win the lease; it is held: {view:?}"),
    }
}

fn write_probe(tx: &mut mysql::Transaction<'_>, epoch: Epoch) -> Result<(), StoreError> {
    tx.exec_drop("INSERT INTO probe (written_under) VALUES (?)", (epoch.0,))?;
    Ok(())
}

fn fenced_why(r: Result<impl std::fmt::Debug, StoreError>) -> Fence {
    match r {
        Err(StoreError::Fenced { why, .. }) => why,
        other => panic!("expected the lease's fence to refuse; got {other:?}"),
    }
}

#[test]
fn contenders_started_at_the_same_instant_elect_exactly_one() {
    let site = Site::new();
    const CONTENDERS: usize = 4;
    const ROUNDS: u64 = 5;
    let mut dbs: Vec<ClusterDb> = (0..CONTENDERS).map(|_| site.db()).collect();
    for round in 1..=ROUNDS {
        let barrier = Arc::new(Barrier::new(CONTENDERS));
        let results: Vec<(usize, String, Acquisition)> = std::thread::scope(|s| {
            let threads: Vec<_> = dbs
                .iter_mut()
                .enumerate()
                .map(|(i, db)| {
                    let barrier = barrier.clone();
                    s.spawn(move || {
                        let me = format!("login{i}:{round}");
                        barrier.wait();
                        let got = db.try_acquire(&me, LONG).unwrap();
                        (i, me, got)
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let winners: Vec<_> = results
            .iter()
            .filter_map(|(i, me, a)| match a {
                Acquisition::Won(g) => Some((*i, me.clone(), *g)),
                Acquisition::Held(_) => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        let (i, winner, grant) = &winners[0];
        // Every round is one acquisition: the epoch counts them.
        assert_eq!(grant.epoch, Epoch(round), "round {round}");
        for (_, _, a) in &results {
            if let Acquisition::Held(view) = a {
                assert_eq!(view.active(), Some(winner.as_str()), "round {round}");
                assert_eq!(view.epoch, Epoch(round));
            }
        }
        assert!(dbs[*i].release(winner, grant.epoch).unwrap());
    }
}

#[test]
fn a_holder_renews_under_its_epoch_and_nobody_else_gets_in() {
    let site = Site::new();
    let (mut a, mut b) = (site.db(), site.db());
    let grant = won(a.try_acquire("login1:100", LONG).unwrap());
    assert_eq!(grant.epoch, Epoch(1));
    assert!(grant.granted <= LONG && grant.granted > LONG - Duration::from_secs(5));
    let first = a.read().unwrap();
    assert_eq!(first.active(), Some("login1:100"));
    for _ in 0..3 {
        let again = a.renew("login1:100", grant.epoch, LONG).unwrap();
        assert_eq!(again.epoch, grant.epoch);
        match b.try_acquire("login2:200", LONG).unwrap() {
            Acquisition::Held(view) => {
                assert_eq!(view.active(), Some("login1:100"));
                assert_eq!(view.epoch, Epoch(1));
                assert_eq!(view.since, first.since, "a renewal is the same tenure");
                assert!(!view.left.is_zero());
            }
            Acquisition::Won(g) => panic!("took a live lease: {g:?}"),
        }
    }
    // Its renewal under a wrong epoch, or in another's name, is refused.
    assert_eq!(
        fenced_why(a.renew("login1:100", Epoch(2), LONG)),
        Fence::Moved {
            epoch: Epoch(1),
            holder: Some("login1:100".into())
        }
    );
    assert!(matches!(
        fenced_why(b.renew("login2:200", Epoch(1), LONG)),
        Fence::Moved { .. }
    ));
    // A fenced write under its epoch is written.
    a.fenced(grant.epoch, |tx| write_probe(tx, grant.epoch))
        .unwrap();
    assert_eq!(site.probe(), "1");
}

/// A holder whose acquisition's answer was lost asks again and finds its own live lease:
/// it takes it under a new epoch at once (and what it began under the old one is fenced
/// off), instead of standing by until its own lease runs out. Another holder still finds
/// it held.
#[test]
fn a_holder_that_finds_its_own_live_lease_takes_it_under_a_new_epoch() {
    let site = Site::new();
    let (mut a, mut b) = (site.db(), site.db());
    let lost = won(a.try_acquire("login1:100", LONG).unwrap());
    let again = won(a.try_acquire("login1:100", LONG).unwrap());
    assert_eq!(again.epoch, Epoch(lost.epoch.0 + 1));
    assert_eq!(a.read().unwrap().active(), Some("login1:100"));
    assert!(matches!(
        fenced_why(a.fenced(lost.epoch, |tx| write_probe(tx, lost.epoch))),
        Fence::Moved { .. }
    ));
    a.renew("login1:100", again.epoch, LONG).unwrap();
    a.fenced(again.epoch, |tx| write_probe(tx, again.epoch))
        .unwrap();
    assert_eq!(site.probe(), again.epoch.0.to_string());
    match b.try_acquire("login2:200", LONG).unwrap() {
        Acquisition::Held(view) => assert_eq!(view.epoch, again.epoch),
        Acquisition::Won(g) => panic!("took another's live lease: {g:?}"),
    }
    // Same node, another start (another PID): not its own lease.
    assert!(matches!(
        a.try_acquire("login1:101", LONG).unwrap(),
        Acquisition::Held(_)
    ));
}

#[test]
fn after_expiry_by_the_server_clock_another_takes_over_and_the_deposed_holder_writes_nothing() {
    let site = Site::new();
    let (mut a, mut b) = (site.db(), site.db());
    let old = won(a.try_acquire("login1:100", SHORT).unwrap());
    assert!(matches!(
        b.try_acquire("login2:200", LONG).unwrap(),
        Acquisition::Held(_)
    ));
    wait_for(
        "the lease to expire by the server's clock",
        Duration::from_secs(30),
        || b.read().unwrap().left.is_zero(),
    );
    // Expired and not yet taken: the holder is still named, but acts no more; its
    // renewal is refused (it must acquire again, under a new epoch).
    let view = b.read().unwrap();
    assert_eq!(
        (view.holder.as_deref(), view.active()),
        (Some("login1:100"), None)
    );
    assert_eq!(
        fenced_why(a.renew("login1:100", old.epoch, LONG)),
        Fence::Expired
    );
    assert_eq!(
        fenced_why(a.fenced(old.epoch, |tx| write_probe(tx, old.epoch))),
        Fence::Expired
    );

    let new = won(b.try_acquire("login2:200", LONG).unwrap());
    assert_eq!(new.epoch, Epoch(old.epoch.0 + 1));
    let taken_over = Fence::Moved {
        epoch: new.epoch,
        holder: Some("login2:200".into()),
    };
    assert_eq!(
        fenced_why(a.renew("login1:100", old.epoch, LONG)),
        taken_over
    );

    // The deposed holder's write transaction, the write first and the fence after it
    // (as a transaction that checks last would): refused, and rolled back.
    let mut conn = site.raw();
    let before = {
        let mut t = conn.start_transaction(mysql::TxOpts::default()).unwrap();
        write_probe(&mut t, old.epoch).unwrap();
        let r = fence(&mut t, old.epoch);
        drop(t);
        r
    };
    assert_eq!(fenced_why(before), taken_over);
    // Through `fenced`, the write is not even tried.
    let mut ran = false;
    let r = a.fenced(old.epoch, |tx| {
        ran = true;
        write_probe(tx, old.epoch)
    });
    assert_eq!(fenced_why(r), taken_over);
    assert!(!ran);
    assert_eq!(site.probe(), "", "the deposed holder wrote nothing");

    // The new holder writes under its epoch.
    b.fenced(new.epoch, |tx| write_probe(tx, new.epoch))
        .unwrap();
    assert_eq!(site.probe(), new.epoch.to_string());
    let view = a.read().unwrap();
    assert_eq!((view.active(), view.epoch), (Some("login2:200"), new.epoch));
}

#[test]
fn a_release_lets_another_in_at_once_and_the_epoch_never_goes_back() {
    let site = Site::new();
    let (mut a, mut b) = (site.db(), site.db());
    let first = won(a.try_acquire("login1:100", LONG).unwrap());
    assert!(a.release("login1:100", first.epoch).unwrap());
    let view = b.read().unwrap();
    assert_eq!((view.holder.as_deref(), view.left), (None, Duration::ZERO));
    assert_eq!(view.epoch, first.epoch, "a release keeps the epoch");
    assert_eq!(
        fenced_why(a.fenced(first.epoch, |tx| write_probe(tx, first.epoch))),
        Fence::Released
    );
    let second = won(b.try_acquire("login2:200", LONG).unwrap());
    assert_eq!(second.epoch, Epoch(first.epoch.0 + 1));
    // Released again by its old holder: not its own any more, nothing changes.
    assert!(!a.release("login1:100", first.epoch).unwrap());
    assert_eq!(b.read().unwrap().active(), Some("login2:200"));
    // The same daemon coming back gets a new epoch too.
    assert!(b.release("login2:200", second.epoch).unwrap());
    let third = won(b.try_acquire("login2:200", LONG).unwrap());
    assert_eq!(third.epoch, Epoch(second.epoch.0 + 1));
    assert_eq!(
        fenced_why(b.renew("login2:200", second.epoch, LONG)),
        Fence::Moved {
            epoch: third.epoch,
            holder: Some("login2:200".into())
        }
    );
}

#[test]
fn a_takeover_waits_for_the_fenced_write_in_flight_which_commits_first() {
    let site = Site::new();
    let (mut a, mut b) = (site.db(), site.db());
    let old = won(a.try_acquire("login1:100", SHORT).unwrap());
    // The holder's write transaction, on a connection of its own.
    let mut conn = site.raw();
    let mut tx = conn.start_transaction(mysql::TxOpts::default()).unwrap();
    fence(&mut tx, old.epoch).unwrap();
    write_probe(&mut tx, old.epoch).unwrap();
    // The lease runs out while the transaction is open: the fence holds the row.
    let mut watcher = site.db();
    wait_for(
        "the lease to expire by the server's clock",
        Duration::from_secs(30),
        || watcher.read().unwrap().left.is_zero(),
    );
    std::thread::scope(|s| {
        let taker = s.spawn(|| won(b.try_acquire("login2:200", LONG).unwrap()));
        wait_for(
            "the takeover to wait for the lease row's lock",
            Duration::from_secs(30),
            || {
                site.server.admin_sql(
                    "SELECT COUNT(*) FROM information_schema.INNODB_TRX
                     WHERE trx_state = 'LOCK WAIT'",
                ) == "1"
            },
        );
        assert!(!taker.is_finished());
        tx.commit().unwrap();
        let new = taker.join().unwrap();
        assert_eq!(new.epoch, Epoch(old.epoch.0 + 1));
    });
    // The write of the old epoch was committed before the new epoch existed.
    assert_eq!(site.probe(), old.epoch.to_string());
}

#[test]
fn a_password_file_others_can_read_is_refused_and_a_private_one_connects() {
    let site = Site::new();
    std::fs::set_permissions(&site.password_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = read_password_file(&site.password_file).unwrap_err();
    assert!(
        matches!(e, PasswordFileError::ReadableByOthers { mode: 0o644, .. }),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains(&format!("run `chmod 600 {}`", site.password_file.display())),
        "{e}"
    );
    std::fs::set_permissions(&site.password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut db = site.db();
    assert_eq!(db.read().unwrap().epoch, Epoch(0));
}

#[test]
fn the_grants_are_those_the_docs_give_and_reach_no_other_database() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cluster.md")).unwrap();
    let grant = format!("GRANT {GRANTS} ON supervisor.* TO");
    assert!(
        doc.contains(&grant),
        "docs/cluster.md must tell admins `{grant} ...`, the grants the tests give"
    );
    let site = Site::new();
    site.server.admin_sql("CREATE DATABASE other");
    let mut conn = site.raw();
    let e = conn.query_drop("CREATE TABLE other.t (x INT)").unwrap_err();
    assert!(e.to_string().contains("denied"), "{e}");
}

#[test]
#[should_panic(expected = "install Debian's mariadb-server (`apt-get install mariadb-server`")]
fn a_missing_server_program_fails_the_test_saying_what_to_install() {
    mariadb::program("mariadbd-that-is-not-there");
}

/// A fenced write that outlives its lease (the daemon paused between the fence and the
/// commit) is rolled back at the commit: what a fenced write commits, it commits while
/// its lease lives.
#[test]
fn a_fenced_write_that_outlives_its_lease_commits_nothing() {
    let site = Site::new();
    let (mut a, mut b) = (site.db(), site.db());
    let grant = won(a.try_acquire("login1:100", SHORT).unwrap());
    let r = a.fenced(grant.epoch, |tx| {
        write_probe(tx, grant.epoch)?;
        // Paused past the lease, by the server's clock (read on another connection:
        // the lease row is this transaction's, but a plain read does not wait for it).
        wait_for(
            "the lease to expire by the server's clock",
            Duration::from_secs(30),
            || b.read().unwrap().left.is_zero(),
        );
        Ok(())
    });
    assert_eq!(fenced_why(r), Fence::Expired);
    assert_eq!(site.probe(), "", "nothing was committed");
}

/// Each daemon writes a row of its own (`node`), timed by the server's clock from the ages
/// it sends; any daemon reads every row. A node's daemon started again takes its row over.
#[test]
fn every_daemon_writes_its_own_row_and_any_daemon_reads_them_all() {
    use slurm_supervisor::store::cluster::{Beat, NodeRole};
    let site = Site::new();
    let (mut a, mut b) = (site.db(), site.db());
    a.heartbeat(&Beat {
        node: "login1",
        holder: "login1:100:00aa",
        role: NodeRole::Active,
        epoch: Some(Epoch(3)),
        started_ago: Duration::from_secs(3600),
        last_cycle_ago: Some(Duration::from_secs(2)),
    })
    .unwrap();
    b.heartbeat(&Beat {
        node: "login2",
        holder: "login2:200:00bb",
        role: NodeRole::Standby,
        epoch: None,
        started_ago: Duration::from_secs(60),
        last_cycle_ago: None,
    })
    .unwrap();
    // Read from the standby's connection: both rows.
    let rows = b.nodes().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let (one, two) = (&rows[0], &rows[1]);
    assert_eq!(
        (one.node.as_str(), one.role, one.epoch),
        ("login1", NodeRole::Active, 3)
    );
    assert_eq!(
        (two.node.as_str(), two.role, two.epoch),
        ("login2", NodeRole::Standby, 0)
    );
    assert_eq!(one.holder, "login1:100:00aa");
    let near = |d: Duration, want: u64| {
        d >= Duration::from_secs(want) && d < Duration::from_secs(want + 10)
    };
    assert!(near(one.started_ago, 3600), "{one:?}");
    assert!(near(one.last_cycle_ago.unwrap(), 2), "{one:?}");
    assert!(near(one.updated_ago, 0), "{one:?}");
    assert!(near(two.started_ago, 60), "{two:?}");
    assert_eq!(two.last_cycle_ago, None);
    // login1's daemon stopped cleanly, and another started on login1 later.
    a.heartbeat(&Beat {
        node: "login1",
        holder: "login1:100:00aa",
        role: NodeRole::Stopped,
        epoch: None,
        started_ago: Duration::from_secs(3600),
        last_cycle_ago: Some(Duration::from_secs(1)),
    })
    .unwrap();
    assert_eq!(a.nodes().unwrap()[0].role, NodeRole::Stopped);
    a.heartbeat(&Beat {
        node: "login1",
        holder: "login1:300:00cc",
        role: NodeRole::Standby,
        epoch: None,
        started_ago: Duration::ZERO,
        last_cycle_ago: None,
    })
    .unwrap();
    let rows = a.nodes().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].holder, "login1:300:00cc");
    assert!(near(rows[0].started_ago, 0), "{:?}", rows[0]);
}
