//! The store's tests that every backend must pass, generic over how the store is made
//! ([`Make`]): the unit tests run them on a journal in memory, `tests/mariadb_store.rs`
//! on a real MariaDB (docs/cluster.md). Each case's store is a replica of a journal, and
//! when the case ends a new replica made from that journal alone must hold exactly the
//! same rows ([`Journaled`]): every case is also a test that the journal replays.

use super::*;
use journal::MemoryJournal;

/// A journaled store, checked when dropped: a replica made anew from its journal holds
/// the same rows.
pub struct Journaled {
    pub store: Store,
    replica: Box<dyn Fn() -> Store>,
}

impl Journaled {
    /// `store`, and how to make a new replica of its journal.
    pub fn new(store: Store, replica: impl Fn() -> Store + 'static) -> Journaled {
        Journaled {
            store,
            replica: Box::new(replica),
        }
    }
}

/// How a case makes its store.
pub type Make<'a> = &'a dyn Fn() -> Journaled;

/// The instance of the stores the cases make in memory.
pub const INSTANCE: &str = "0a1b2c3d";

/// A journaled store on a journal in memory.
pub fn memory() -> Journaled {
    memory_with(MemoryJournal::default())
}

/// A journaled store on `journal`.
pub fn memory_with(journal: MemoryJournal) -> Journaled {
    let store = Store::in_memory_replica(INSTANCE, Box::new(journal.clone())).unwrap();
    Journaled::new(store, move || {
        Store::in_memory_replica(INSTANCE, Box::new(journal.clone())).unwrap()
    })
}

impl std::ops::Deref for Journaled {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

impl std::ops::DerefMut for Journaled {
    fn deref_mut(&mut self) -> &mut Store {
        &mut self.store
    }
}

impl Drop for Journaled {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let totals = self.store.recount_user_totals().unwrap();
        assert_eq!(
            totals.kept, totals.counted,
            "the users' totals kept differ from what the rows say"
        );
        let replica = (self.replica)();
        assert_eq!(replica.journal_seq(), self.store.journal_seq());
        assert_eq!(
            dump(&replica),
            dump(&self.store),
            "a replica of the journal differs from the store that wrote it"
        );
    }
}

/// A table's rows, each a list of values.
pub type Rows = Vec<Vec<rusqlite::types::Value>>;

/// Every row of every table, in row order.
pub fn dump(store: &Store) -> Vec<(String, Rows)> {
    let conn = &store.conn;
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    tables
        .into_iter()
        .map(|t| {
            let mut q = conn.prepare(&format!("SELECT * FROM \"{t}\"")).unwrap();
            let n = q.column_count();
            let rows = q
                .query_map([], |r| {
                    (0..n)
                        .map(|i| r.get::<_, rusqlite::types::Value>(i))
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .unwrap()
                .collect::<rusqlite::Result<Vec<_>>>()
                .unwrap();
            (t, rows)
        })
        .collect()
}

macro_rules! cases {
    ($($(#[$m:meta])* fn $name:ident($make:ident) $body:block)*) => {
        $($(#[$m])* pub fn $name($make: Make<'_>) $body)*

        /// Every case, with its name.
        pub const CASES: &[(&str, fn(Make<'_>))] = &[$((stringify!($name), $name as fn(Make<'_>))),*];

        #[cfg(test)]
        mod on_a_journal_in_memory {
            $(#[test]
            fn $name() {
                super::$name(&super::memory)
            })*
        }
    };
}

pub fn sub(tasks: Option<Vec<u32>>) -> NewSubmission {
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
        continuation: None,
    }
}

pub fn decision(c: Classification, action: Action) -> Record {
    Record {
        classification: c,
        class: RecoveryClass::R1,
        action,
        reason: crate::domain::policy::Reason::Resolution {
            given: "test".into(),
        },
        inputs: crate::domain::policy::Inputs::None {},
        resolves_latest: false,
        actor: "supervisor".into(),
        infra_failure: false,
        failed_nodes: None,
    }
}

/// A transition from `from` with `record`.
pub fn tr(from: ChainState, update: &ChainUpdate, record: Record) -> Transition {
    Transition::of(from, update.clone(), Some(record)).finish()
}

/// Records the ending of live attempt `n` with `t` (with a failure signature, which the
/// journal must carry to a replica as a value).
pub fn record_ending(s: &mut Store, chain: i64, n: u32, t: Transition, now: i64) -> Result<bool> {
    let t = Transition {
        attempt: Some(AttemptChange::Ended(crate::domain::policy::Judged {
            n,
            end: crate::domain::policy::AttemptEnd {
                signature: Some("0123456789ab".into()),
                signature_text: Some("boom <n>".into()),
                ..Default::default()
            },
            ..Default::default()
        })),
        ..t
    };
    s.apply_one(chain, &t, now)
}

/// Applies transitions to several chains, all or none; the chain that moved on, if one did.
pub fn decide_chains(s: &mut Store, items: &[(i64, Transition)], now: i64) -> Result<Option<i64>> {
    Ok(s.apply(&Batch::all(items.to_vec()), now)?.moved)
}

/// Queues a chain's reminder as the loop does.
pub fn remind(s: &mut Store, chain: i64, now: i64) -> Result<bool> {
    let c = s.chain(chain)?.unwrap();
    let config = crate::config::Config::defaults();
    let t = crate::domain::policy::transition(
        &c,
        crate::domain::policy::Event::RemindDue,
        &config,
        &crate::domain::policy::Context::at(now),
    )
    .unwrap();
    s.apply_one(chain, &t, now)
}

/// A chain waiting in `pending_failed` since 200.
pub fn waiting_chain(s: &mut Store) {
    let l = s.create_submission(&sub(None), 100, |_| vec![]).unwrap();
    s.launch_submitted(l.id, "42", 101).unwrap();
    let pending = ChainUpdate {
        last_classification: Some(Classification::Ambiguous),
        ..ChainUpdate::to(ChainState::PendingFailed)
    };
    let d = decision(Classification::Ambiguous, Action::Escalate);
    let t = tr(ChainState::Active, &pending, d);
    assert_eq!(decide_chains(s, &[(1, t)], 200).unwrap(), None);
}

mod cases;
pub use cases::*;
