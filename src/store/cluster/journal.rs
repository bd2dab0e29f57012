//! The store's journal on the shared database (`store::journal`): the table `journal`,
//! and the row `cluster` that says whose store the database is (the Slurm cluster's name,
//! the store's instance, the newest journal format written). [`SharedJournal`] is the
//! store's `Journal` on it; [`EpochCell`], the epoch the daemon acts under, shared by its
//! election and its journal.
//!
//! An entry is appended in one transaction fenced by the appender's epoch ([`fence`]):
//! the lease row is locked first and checked again before the commit, so an entry is in
//! the journal only if its writer held the lease when it committed, and no two writers
//! ever append (a takeover waits for the row's lock). An entry larger than [`PART`] is
//! written as several rows of one sequence number, in the same transaction: the server's
//! `max_allowed_packet` (16 MiB by default) bounds one row, not one entry.
//!
//! **Invariant:** the entries' sequence numbers have no gaps and each is written once:
//! `(seq, part)` is the primary key, and only the lease's holder, whose replica applied
//! every entry before, appends (at the number after its replica's last).

use super::{ClusterDb, Fence};
use crate::domain::election::Epoch;
use crate::store::journal::{Journal, FORMAT};
use crate::store::snapshot::SnapshotHead;
use crate::store::StoreError;
use mysql::prelude::Queryable;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type Result<T> = std::result::Result<T, StoreError>;

/// The largest row of an entry's body.
pub const PART: usize = 1 << 20;

/// The journal's tables, created if missing (harmless twice, or from two daemons).
pub(super) const CREATE: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS journal (
        seq BIGINT UNSIGNED NOT NULL,
        part INT UNSIGNED NOT NULL,
        parts INT UNSIGNED NOT NULL,
        epoch BIGINT UNSIGNED NOT NULL,
        format INT UNSIGNED NOT NULL,
        written_at DATETIME(6) NOT NULL,
        body LONGBLOB NOT NULL,
        PRIMARY KEY (seq, part)
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS cluster (
        id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
        cluster_name VARCHAR(255) NOT NULL,
        instance CHAR(8) NOT NULL,
        format INT UNSIGNED NOT NULL,
        CONSTRAINT cluster_one_row CHECK (id = 1)
    ) ENGINE=InnoDB",
];

/// Whose store the shared database is: the Slurm cluster it supervises, the store's
/// instance (in every job's tag), and the newest journal format written to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub cluster_name: String,
    pub instance: String,
    pub format: u32,
}

/// Why a daemon may not use a shared database.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the shared database is the store of Slurm cluster {theirs:?}, and this node's Slurm cluster is {ours:?}: point [store] url at this cluster's database")]
    OtherCluster { theirs: String, ours: String },
    #[error("the shared database holds journal format {found}, newer than this program knows ({known}): another node runs a later slurm-supervisor; upgrade this node before it acts")]
    TooNew { found: u32, known: u32 },
}

impl Identity {
    /// Whether a daemon of Slurm cluster `cluster_name`, of this program's journal format,
    /// may use the database: it must be its cluster's, and hold no later format.
    pub fn usable_by(&self, cluster_name: &str) -> std::result::Result<(), Refusal> {
        if self.cluster_name != cluster_name {
            return Err(Refusal::OtherCluster {
                theirs: self.cluster_name.clone(),
                ours: cluster_name.to_string(),
            });
        }
        if self.format > FORMAT {
            return Err(Refusal::TooNew {
                found: self.format,
                known: FORMAT,
            });
        }
        Ok(())
    }
}

impl ClusterDb {
    /// Creates what is missing of the lease's and the journal's tables, and the `cluster`
    /// row on first use (this cluster's name, a new random instance); returns the row.
    /// A database of another Slurm cluster is refused.
    pub fn prepare(
        &mut self,
        cluster_name: &str,
    ) -> Result<std::result::Result<Identity, Refusal>> {
        self.prepare_lease()?;
        for sql in CREATE.iter().chain(super::snapshot::CREATE) {
            self.conn.query_drop(sql)?;
        }
        let instance = format!("{:08x}", rand::random::<u32>());
        self.conn.exec_drop(
            "INSERT IGNORE INTO cluster (id, cluster_name, instance, format) VALUES (1, ?, ?, 0)",
            (cluster_name, &instance),
        )?;
        let id = self.identity()?;
        Ok(id.usable_by(cluster_name).map(|()| id))
    }

    /// The `cluster` row.
    pub fn identity(&mut self) -> Result<Identity> {
        let row: Option<(String, String, u32)> = self.conn.exec_first(
            "SELECT cluster_name, instance, format FROM cluster WHERE id = 1",
            (),
        )?;
        let (cluster_name, instance, format) = row.ok_or_else(|| {
            StoreError::Corrupt("the shared database has no cluster row: run its migrations".into())
        })?;
        Ok(Identity {
            cluster_name,
            instance,
            format,
        })
    }

    /// Appends entry `seq` under `epoch` (see the module's doc).
    pub fn append(&mut self, epoch: Epoch, seq: u64, format: u32, body: &[u8]) -> Result<()> {
        let parts: Vec<&[u8]> = if body.is_empty() {
            vec![body]
        } else {
            body.chunks(PART).collect()
        };
        let count = parts.len() as u32;
        self.fenced(epoch, |tx| {
            // Entry `seq` follows the last one, or is not written (a replica ahead of its
            // journal: a database restored from a backup).
            // The head counts the pruned entries: a journal pruned through its last entry
            // is empty, and still ends there.
            let head: Option<Option<u64>> = tx.query_first("SELECT MAX(seq) FROM journal")?;
            let pruned: Option<u64> =
                tx.query_first("SELECT through_seq FROM journal_pruned WHERE id = 1")?;
            let head = head.flatten().unwrap_or(0).max(pruned.unwrap_or(0));
            if head + 1 != seq {
                return Err(StoreError::Corrupt(format!(
                    "the shared journal ends at entry {head}, and this node's replica would write entry {seq}: the database and the replica do not agree (was the database restored from a backup?)"
                )));
            }
            // The newest format written: an older daemon reads it and does not act.
            tx.exec_drop(
                "UPDATE cluster SET format = GREATEST(format, ?) WHERE id = 1",
                (format,),
            )?;
            for (i, part) in parts.iter().enumerate() {
                tx.exec_drop(
                    "INSERT INTO journal (seq, part, parts, epoch, format, written_at, body)
                     VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6), ?)",
                    (seq, i as u32, count, epoch.0, format, *part),
                )?;
            }
            Ok(())
        })
    }

    /// Up to `max` entries after `seq`, in order: `(seq, format, body)`.
    pub fn read_after(&mut self, seq: u64, max: usize) -> Result<Vec<(u64, u32, Vec<u8>)>> {
        // One statement: one consistent read, whatever is appended or pruned meanwhile. The
        // second half is a marker row (`parts` 0, which no entry has) holding the pruned
        // horizon, only when it is past `seq`: a reader behind it learns so in the same
        // read, and one at the head pays no second round trip.
        let mut rows: Vec<(u64, u32, u32, u32, Vec<u8>)> = self.conn.exec(
            "(SELECT seq, part, parts, format, body FROM journal WHERE seq > ? AND seq <= ?)
             UNION ALL
             (SELECT through_seq, 0, 0, 0, '' FROM journal_pruned WHERE id = 1 AND through_seq > ?)
             ORDER BY seq, part",
            (seq, seq.saturating_add(max as u64), seq),
        )?;
        let through = rows.iter().find(|r| r.2 == 0).map(|r| r.0);
        rows.retain(|r| r.2 != 0);
        let mut out: Vec<(u64, u32, Vec<u8>)> = Vec::new();
        let mut expect = (0u64, 0u32, 0u32);
        for (s, part, parts, format, body) in rows {
            if part == 0 {
                if expect.1 != expect.2 {
                    return Err(torn(expect.0));
                }
                out.push((s, format, body));
                expect = (s, 1, parts);
            } else if s == expect.0 && part == expect.1 {
                out.last_mut()
                    .expect("a part 0 came first")
                    .2
                    .extend_from_slice(&body);
                expect.1 += 1;
            } else {
                return Err(torn(s));
            }
        }
        if expect.1 != expect.2 {
            return Err(torn(expect.0));
        }
        // No entry right after `seq`: none was appended since, or it was pruned (the
        // horizon is recorded before any entry at or before it is deleted, so a read that
        // misses the entry sees the horizon past it).
        if let Some(through) = through.filter(|_| out.first().is_none_or(|e| e.0 != seq + 1)) {
            return Err(StoreError::Pruned {
                after: seq,
                through,
            });
        }
        Ok(out)
    }

    /// The last entry's number (0 for an empty journal), counting entries pruned.
    pub fn journal_head(&mut self) -> Result<u64> {
        let head: Option<Option<u64>> = self.conn.query_first("SELECT MAX(seq) FROM journal")?;
        Ok(head.flatten().unwrap_or(0).max(self.pruned_through()?))
    }
}

fn torn(seq: u64) -> StoreError {
    StoreError::Corrupt(format!("journal entry {seq} is missing some of its parts"))
}

/// The epoch a daemon acts under, shared by its election and its journal: 0 while it does
/// not hold the lease (epochs start at 1).
#[derive(Debug, Clone, Default)]
pub struct EpochCell(Arc<AtomicU64>);

impl EpochCell {
    pub fn set(&self, epoch: Option<Epoch>) {
        self.0.store(epoch.map_or(0, |e| e.0), Ordering::SeqCst);
    }

    pub fn get(&self) -> Option<Epoch> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            e => Some(Epoch(e)),
        }
    }
}

/// How a [`SharedJournal`] makes a connection when it has none.
pub type Connector = Box<dyn FnMut() -> Result<ClusterDb> + Send>;

/// The store's journal on the shared database, as the store's [`Journal`]. A connection
/// whose call failed is dropped and made anew on the next call (a cut network leaves a
/// connection that would only fail again).
pub struct SharedJournal {
    connect: Connector,
    db: Option<ClusterDb>,
    epoch: EpochCell,
}

impl SharedJournal {
    pub fn new(connect: Connector, epoch: EpochCell) -> SharedJournal {
        SharedJournal {
            connect,
            db: None,
            epoch,
        }
    }

    fn with<T>(&mut self, f: impl FnOnce(&mut ClusterDb) -> Result<T>) -> Result<T> {
        if self.db.is_none() {
            match (self.connect)() {
                Ok(db) => self.db = Some(db),
                Err(e) => {
                    tracing::debug!("journal: cannot connect: {e}");
                    return Err(e);
                }
            }
        }
        let out = f(self.db.as_mut().expect("connected above"));
        if let Err(e @ StoreError::Mysql(_)) = &out {
            tracing::debug!("journal: the connection failed: {e}");
            self.db = None;
        }
        out
    }
}

impl Journal for SharedJournal {
    fn append(&mut self, seq: u64, format: u32, body: &[u8]) -> Result<()> {
        let Some(epoch) = self.epoch.get() else {
            return Err(StoreError::Fenced {
                epoch: Epoch(0),
                why: Fence::Released,
            });
        };
        self.with(|db| db.append(epoch, seq, format, body))
    }

    fn read_after(&mut self, seq: u64, max: usize) -> Result<Vec<(u64, u32, Vec<u8>)>> {
        self.with(|db| db.read_after(seq, max))
    }

    fn latest_snapshot(&mut self) -> Result<Option<SnapshotHead>> {
        self.with(|db| db.latest_snapshot())
    }

    fn read_snapshot(&mut self, head: &SnapshotHead, out: &std::path::Path) -> Result<()> {
        self.with(|db| db.read_snapshot(head, out))
    }
}
