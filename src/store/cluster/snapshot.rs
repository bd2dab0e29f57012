//! The store's snapshots on the shared database, and the journal's pruning
//! (docs/cluster.md, "Snapshots"; the encoding is `store::snapshot`'s).
//!
//! A snapshot is written in three steps, each a transaction of its own, so that none
//! holds the lease row for long (an append, and the lease's renewal, lock it too):
//!
//! 1. its row in `snapshot`, not complete (`begin`), by the active daemon;
//! 2. its parts in `snapshot_part`, one row each (`put_part`);
//! 3. made complete in a transaction fenced by the maker's epoch (`publish`), which checks
//!    that every part is there with the length listed.
//!
//! Only a complete snapshot is ever read, so a maker that dies (or is deposed) before step
//! 3 leaves an incomplete row that nobody reads and the next pruning removes. When one is
//! made is `snapshot_if_due`'s question, asked by the active daemon's snapshot thread
//! (`daemon::cluster`) after the site's `dbconfig::SnapshotPolicy`.
//!
//! **Pruning** (`prune`) keeps the newest [`KEEP`] complete snapshots. In one fenced
//! transaction it records the horizon, the entry of the oldest snapshot kept
//! (`journal_pruned`: entries at or before it may be gone), and drops the other snapshots'
//! rows; then it deletes their parts and the journal's entries at or before the horizon,
//! a bounded batch per statement. A replica at or after the horizon catches up from the
//! journal; one before it reloads from the newest snapshot (`Store::catch_up`).
//!
//! **Invariant:** no entry after the oldest kept snapshot is ever deleted, and the horizon
//! is recorded before any entry at or before it is: so every reader either finds the entry
//! after its own, or is told it was pruned ([`StoreError::Pruned`]) and finds a snapshot at
//! or after the horizon. Appends are never disturbed: they write after the head, which is
//! after every snapshot, and the head counts the horizon (`journal_head`).

use super::ClusterDb;
use crate::domain::election::Epoch;
use crate::store::journal::FORMAT as JOURNAL_FORMAT;
use crate::store::snapshot::{self, SnapshotHead};
use crate::store::StoreError;
use mysql::prelude::Queryable;
use std::path::Path;
use std::time::Duration;

type Result<T> = std::result::Result<T, StoreError>;

/// How many complete snapshots are kept: the newest, and the one before it (a node
/// reading the newest while the next one is published still finds it whole).
pub const KEEP: usize = 2;

/// Rows deleted per statement while pruning (each statement its own short transaction).
const DELETE_BATCH: u32 = 500;
/// Snapshot parts (1 MiB each) deleted per statement.
const DELETE_PARTS: u32 = 16;

/// The snapshots' tables, created if missing.
pub(super) const CREATE: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS snapshot (
        id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
        seq BIGINT UNSIGNED NOT NULL,
        format INT UNSIGNED NOT NULL,
        journal_format INT UNSIGNED NOT NULL,
        epoch BIGINT UNSIGNED NOT NULL,
        parts INT UNSIGNED NOT NULL DEFAULT 0,
        bytes BIGINT UNSIGNED NOT NULL DEFAULT 0,
        sha256 CHAR(64) NOT NULL DEFAULT '',
        complete TINYINT NOT NULL DEFAULT 0,
        started_at DATETIME(6) NOT NULL,
        completed_at DATETIME(6) NULL
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS snapshot_part (
        id BIGINT UNSIGNED NOT NULL,
        part INT UNSIGNED NOT NULL,
        len INT UNSIGNED NOT NULL,
        body LONGBLOB NOT NULL,
        PRIMARY KEY (id, part)
    ) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS journal_pruned (
        id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
        through_seq BIGINT UNSIGNED NOT NULL,
        CONSTRAINT journal_pruned_one_row CHECK (id = 1)
    ) ENGINE=InnoDB",
    "INSERT IGNORE INTO journal_pruned (id, through_seq) VALUES (1, 0)",
];

/// What the active daemon needs to decide whether a snapshot is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotStatus {
    /// The newest complete snapshot's entry, and how long ago it was completed (by the
    /// database server's clock).
    pub latest: Option<(u64, Duration)>,
    /// The journal's last entry.
    pub head: u64,
}

/// What a pruning removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// The horizon: entries at or before it are gone.
    pub through: u64,
    pub entries: u64,
    pub snapshots: u64,
}

/// The sizes of the entries after the newest snapshot, as the active daemon measured them:
/// each entry's size is read once.
#[derive(Debug, Default)]
pub struct EntrySizes(std::collections::BTreeMap<u64, u64>);

impl ClusterDb {
    /// One look of the active daemon (`daemon::cluster`'s snapshot thread): if `policy`
    /// says a snapshot is due, one is made by `make` (the replica's file at its last
    /// entry, written to the path given, beside `near`), written under `epoch`, and the
    /// journal pruned. Returns the snapshot's entry, why it was due, and what was pruned;
    /// `None` when none was due.
    pub fn snapshot_if_due(
        &mut self,
        epoch: Epoch,
        policy: &crate::plumbing::dbconfig::SnapshotPolicy,
        sizes: &mut EntrySizes,
        near: Option<&Path>,
        make: impl FnOnce(&Path) -> Result<u64>,
        stopping: &dyn Fn() -> bool,
    ) -> Result<Option<(u64, &'static str, Pruned)>> {
        let status = self.snapshot_status()?;
        let base = status.latest.map_or(0, |l| l.0);
        let entries = status.head.saturating_sub(base);
        let age = status.latest.map(|l| l.1);
        let mut why = policy.due(entries, 0, age);
        if why.is_none() && policy.bytes > 0 && entries > 0 {
            sizes.0.retain(|s, _| *s > base);
            let from = sizes
                .0
                .keys()
                .next_back()
                .copied()
                .unwrap_or(base)
                .max(base);
            sizes.0.extend(self.entry_sizes_after(from)?);
            why = policy.due(entries, sizes.0.values().sum(), age);
        }
        let Some(why) = why else {
            return Ok(None);
        };
        let file = snapshot::TempFile::beside(near);
        let seq = make(&file.0)?;
        if seq <= base {
            // The replica has not passed the newest snapshot: nothing to add.
            return Ok(None);
        }
        let pruned = self.snapshot_and_prune(epoch, &file.0, seq, stopping)?;
        sizes.0.retain(|s, _| *s > seq);
        Ok(Some((seq, why, pruned)))
    }

    /// Entries at or before this one may have been pruned (0: none).
    pub fn pruned_through(&mut self) -> Result<u64> {
        let v: Option<u64> = self
            .conn
            .query_first("SELECT through_seq FROM journal_pruned WHERE id = 1")?;
        Ok(v.unwrap_or(0))
    }

    /// The newest complete snapshot, if any.
    pub fn latest_snapshot(&mut self) -> Result<Option<SnapshotHead>> {
        type Row = (u64, u64, u32, u32, u32, u64, String);
        let row: Option<Row> = self.conn.query_first(
            "SELECT id, seq, format, journal_format, parts, bytes, sha256 FROM snapshot
             WHERE complete = 1 ORDER BY seq DESC, id DESC LIMIT 1",
        )?;
        Ok(row.map(
            |(id, seq, format, journal_format, parts, bytes, sha256)| SnapshotHead {
                id,
                seq,
                format,
                journal_format,
                parts,
                bytes,
                sha256,
            },
        ))
    }

    /// Every complete snapshot's entry, newest first.
    pub fn snapshots(&mut self) -> Result<Vec<u64>> {
        Ok(self
            .conn
            .query("SELECT seq FROM snapshot WHERE complete = 1 ORDER BY seq DESC, id DESC")?)
    }

    /// Writes snapshot `head` to the new file `out`, decoded and checked. A snapshot
    /// dropped while it is read (a newer one was published twice meanwhile) fails.
    pub fn read_snapshot(&mut self, head: &SnapshotHead, out: &Path) -> Result<()> {
        snapshot::decode(head, out, |part| {
            let body: Option<Vec<u8>> = self.conn.exec_first(
                "SELECT body FROM snapshot_part WHERE id = ? AND part = ?",
                (head.id, part),
            )?;
            body.ok_or_else(|| {
                StoreError::Busy(format!(
                    "the snapshot at journal entry {} was dropped while it was read; the next try reads the newer one",
                    head.seq
                ))
            })
        })
    }

    /// Whether a snapshot is due, and what for: the newest one and the journal's head.
    pub fn snapshot_status(&mut self) -> Result<SnapshotStatus> {
        let latest: Option<(u64, Option<i64>)> = self.conn.query_first(
            "SELECT seq, TIMESTAMPDIFF(MICROSECOND, completed_at, UTC_TIMESTAMP(6))
             FROM snapshot WHERE complete = 1 ORDER BY seq DESC, id DESC LIMIT 1",
        )?;
        let head = self.journal_head()?;
        Ok(SnapshotStatus {
            latest: latest
                .map(|(seq, us)| (seq, Duration::from_micros(us.unwrap_or(0).max(0) as u64))),
            head,
        })
    }

    /// The bytes of the journal's entries after `seq`, by entry: `(seq, bytes)`.
    pub fn entry_sizes_after(&mut self, seq: u64) -> Result<Vec<(u64, u64)>> {
        Ok(self.conn.exec(
            "SELECT seq, SUM(LENGTH(body)) FROM journal WHERE seq > ? GROUP BY seq ORDER BY seq",
            (seq,),
        )?)
    }

    /// Step 1: a snapshot's row, not complete, at entry `seq` by `epoch`'s holder.
    pub fn begin_snapshot(&mut self, epoch: Epoch, seq: u64) -> Result<u64> {
        self.conn.exec_drop(
            "INSERT INTO snapshot (seq, format, journal_format, epoch, started_at)
             VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6))",
            (seq, snapshot::FORMAT, JOURNAL_FORMAT, epoch.0),
        )?;
        Ok(self.conn.last_insert_id())
    }

    /// Step 2: part `part` of snapshot `id`.
    pub fn put_snapshot_part(&mut self, id: u64, part: u32, body: &[u8]) -> Result<()> {
        self.conn.exec_drop(
            "INSERT INTO snapshot_part (id, part, len, body) VALUES (?, ?, ?, ?)",
            (id, part, body.len() as u32, body),
        )?;
        Ok(())
    }

    /// Step 3: snapshot `id` made complete, under `epoch`'s fence, once every part is
    /// there with the length listed and the journal holds its entry.
    pub fn publish_snapshot(
        &mut self,
        epoch: Epoch,
        id: u64,
        parts: u32,
        bytes: u64,
        sha256: &str,
    ) -> Result<()> {
        self.fenced(epoch, |tx| {
            // The lengths as their rows list them: reading the parts' bodies would hold
            // the lease row (and every append and renewal) for as long.
            let have: Option<(u64, Option<u64>)> = tx.exec_first(
                "SELECT COUNT(*), SUM(len) FROM snapshot_part WHERE id = ?",
                (id,),
            )?;
            let (n, len) = have.map_or((0, 0), |(n, l)| (n, l.unwrap_or(0)));
            if n != u64::from(parts) || len != bytes {
                return Err(StoreError::Busy(format!(
                    "snapshot {id} has {n} parts of {len} bytes, not {parts} of {bytes}: it is not published"
                )));
            }
            let seq: Option<u64> =
                tx.exec_first("SELECT seq FROM snapshot WHERE id = ? AND complete = 0", (id,))?;
            let Some(seq) = seq else {
                return Err(StoreError::Busy(format!(
                    "snapshot {id} is gone (pruned as abandoned): it is not published"
                )));
            };
            let head: Option<Option<u64>> = tx.query_first("SELECT MAX(seq) FROM journal")?;
            let pruned: Option<u64> =
                tx.query_first("SELECT through_seq FROM journal_pruned WHERE id = 1")?;
            let head = head.flatten().unwrap_or(0).max(pruned.unwrap_or(0));
            if seq > head {
                return Err(StoreError::Corrupt(format!(
                    "a snapshot at journal entry {seq} was made, and the shared journal ends at entry {head}: the database and the replica do not agree (was the database restored from a backup?)"
                )));
            }
            tx.exec_drop(
                "UPDATE snapshot SET parts = ?, bytes = ?, sha256 = ?, complete = 1,
                 completed_at = UTC_TIMESTAMP(6) WHERE id = ?",
                (parts, bytes, sha256, id),
            )?;
            Ok(())
        })
    }

    /// Keeps the newest [`KEEP`] complete snapshots and drops the journal's entries at or
    /// before the oldest of them (see the module's doc). The horizon and the snapshots'
    /// rows change under `epoch`'s fence; the deletions follow in small batches, which
    /// anyone may finish (a crash meanwhile leaves them for the next pruning).
    pub fn prune(&mut self, epoch: Epoch) -> Result<Pruned> {
        let (through, dropped) = self.fenced(epoch, |tx| {
            let complete: Vec<(u64, u64)> = tx.query(
                "SELECT id, seq FROM snapshot WHERE complete = 1 ORDER BY seq DESC, id DESC",
            )?;
            let Some(&(newest, _)) = complete.first() else {
                return Ok((0, 0));
            };
            let kept = &complete[..complete.len().min(KEEP)];
            let through = kept.last().map_or(0, |k| k.1);
            let mut drop: Vec<u64> = complete[kept.len()..].iter().map(|c| c.0).collect();
            // Incomplete snapshots begun before the newest complete one: abandoned (their
            // maker died or was deposed), never to be read.
            let abandoned: Vec<u64> = tx.exec(
                "SELECT id FROM snapshot WHERE complete = 0 AND id < ?",
                (newest,),
            )?;
            drop.extend(abandoned);
            for id in &drop {
                tx.exec_drop("DELETE FROM snapshot WHERE id = ?", (id,))?;
            }
            tx.exec_drop(
                "UPDATE journal_pruned SET through_seq = GREATEST(through_seq, ?) WHERE id = 1",
                (through,),
            )?;
            Ok((through, drop.len() as u64))
        })?;
        let through = through.max(self.pruned_through()?);
        // Parts whose snapshot's row is gone (just now, or by a pruning that did not end).
        loop {
            self.conn.exec_drop(
                "DELETE FROM snapshot_part WHERE id NOT IN (SELECT id FROM snapshot) LIMIT ?",
                (DELETE_PARTS,),
            )?;
            if self.conn.affected_rows() == 0 {
                break;
            }
        }
        let mut entries = 0;
        loop {
            self.conn.exec_drop(
                "DELETE FROM journal WHERE seq <= ? ORDER BY seq LIMIT ?",
                (through, DELETE_BATCH),
            )?;
            let n = self.conn.affected_rows();
            entries += n;
            if n == 0 {
                break;
            }
        }
        Ok(Pruned {
            through,
            entries,
            snapshots: dropped,
        })
    }

    /// Writes a snapshot of the store in the SQLite file `file` (made by
    /// `Store::snapshot_to` or `Store::snapshot_file`, at entry `seq`) under `epoch`, then
    /// prunes. A daemon `stopping` gives up between parts (what it wrote is never read,
    /// and the next pruning removes it). `crate::plumbing::failpoint`s `snapshot-mid-parts` (after
    /// the first part) and `snapshot-before-prune` (after the publication) stop it there,
    /// for the tests.
    pub fn snapshot_and_prune(
        &mut self,
        epoch: Epoch,
        file: &Path,
        seq: u64,
        stopping: &dyn Fn() -> bool,
    ) -> Result<Pruned> {
        let id = self.begin_snapshot(epoch, seq)?;
        let (parts, bytes, sha256) = snapshot::encode(file, |part, body| {
            if stopping() {
                return Err(StoreError::Busy(
                    "the daemon is stopping: the snapshot was left unfinished".into(),
                ));
            }
            self.put_snapshot_part(id, part, body)?;
            if part == 0 {
                crate::plumbing::failpoint::hit("snapshot-mid-parts");
            }
            Ok(())
        })?;
        self.publish_snapshot(epoch, id, parts, bytes, &sha256)?;
        crate::plumbing::failpoint::hit("snapshot-before-prune");
        self.prune(epoch)
    }
}
