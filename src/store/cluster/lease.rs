//! The lease row: who acts, under which epoch, until when by the database server's clock.
//!
//! One row (`id = 1`). Every decision is taken on a *locking* read of that row
//! (`SELECT ... FOR UPDATE`), which in InnoDB reads the newest committed version whatever
//! the isolation level, and holds the row until the transaction ends: two contenders, a
//! renewal and a takeover, or a fenced write and a takeover, are put in one order by the
//! row's lock. Time is the server's alone (`UTC_TIMESTAMP(6)`: the statement's start on
//! the server, in UTC, so no daylight-saving change moves a lease), and the daemon sends
//! only lengths, never times of its own.
//!
//! **Invariant:** every acquisition adds one to the epoch, in the transaction that takes
//! the row, so each tenure has an epoch no other had.
//!
//! **Invariant:** a transaction that called [`fence`] and committed did so before any
//! later epoch existed: `fence` holds the row's lock until the commit, and a takeover must
//! take that lock first.

use super::Fence;
use super::{tx_options, ClusterDb};
use crate::domain::election::Epoch;
use crate::store::StoreError;
use mysql::prelude::Queryable;
use mysql::Transaction;
use std::time::{Duration, SystemTime};

type Result<T> = std::result::Result<T, StoreError>;

/// The longest holder id, the column's width.
pub const MAX_HOLDER: usize = 255;

/// The lease table and its one row, created if missing. Creating it twice, or from two
/// daemons at once, is harmless.
pub(super) const CREATE: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS lease (
        id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
        holder VARCHAR(255) NULL,
        epoch BIGINT UNSIGNED NOT NULL,
        acquired_at DATETIME(6) NULL,
        expires_at DATETIME(6) NULL,
        CONSTRAINT lease_one_row CHECK (id = 1)
    ) ENGINE=InnoDB",
    "INSERT IGNORE INTO lease (id, holder, epoch, acquired_at, expires_at)
        VALUES (1, NULL, 0, NULL, NULL)",
];

/// What the lease row says, read by the server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    /// The last epoch granted (0 before the first acquisition).
    pub epoch: Epoch,
    /// Who holds it, `None` once released (or before anyone did). A holder whose lease
    /// expired is still named here until someone takes the lease over.
    pub holder: Option<String>,
    /// When the holder acquired this epoch, by the server's clock.
    pub since: Option<SystemTime>,
    /// How long the lease has left by the server's clock; zero when expired or free.
    pub left: Duration,
}

impl LeaseView {
    /// The daemon that acts now, by the server's clock.
    pub fn active(&self) -> Option<&str> {
        self.holder.as_deref().filter(|_| !self.left.is_zero())
    }
}

/// A lease won or renewed: its epoch and how long the server granted it, by its clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub epoch: Epoch,
    pub granted: Duration,
}

/// What [`ClusterDb::try_acquire`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquisition {
    /// This holder acts now, under a new epoch.
    Won(Grant),
    /// Another daemon holds a lease that has not expired.
    Held(LeaseView),
}

/// The row as a locking read sees it.
struct Locked {
    holder: Option<String>,
    epoch: Epoch,
    live: bool,
}

fn lock_row(tx: &mut Transaction<'_>) -> Result<Locked> {
    let row: Option<(Option<String>, u64, Option<bool>)> = tx.exec_first(
        "SELECT holder, epoch, expires_at > UTC_TIMESTAMP(6) FROM lease WHERE id = 1 FOR UPDATE",
        (),
    )?;
    let (holder, epoch, live) = row.ok_or_else(no_row)?;
    Ok(Locked {
        holder,
        epoch: Epoch(epoch),
        live: live.unwrap_or(false),
    })
}

/// Why `locked` is not the live lease of `epoch` (held by `holder`, when given).
fn check(locked: &Locked, epoch: Epoch, holder: Option<&str>) -> std::result::Result<(), Fence> {
    let moved = || Fence::Moved {
        epoch: locked.epoch,
        holder: locked.holder.clone(),
    };
    if locked.epoch != epoch {
        return Err(moved());
    }
    match (&locked.holder, holder) {
        (None, _) => Err(Fence::Released),
        // An epoch is one holder's: another name under it cannot happen, and is refused.
        (Some(h), Some(me)) if h != me => Err(moved()),
        _ if !locked.live => Err(Fence::Expired),
        _ => Ok(()),
    }
}

/// The fencing check, to call inside every write transaction of the active daemon: locks
/// the lease row until the transaction ends and fails with [`StoreError::Fenced`] unless
/// the lease is still `epoch`'s, held and unexpired by the server's clock. On that error
/// the caller drops the transaction, which rolls back everything it wrote, before the
/// check or after.
pub fn fence(tx: &mut Transaction<'_>, epoch: Epoch) -> Result<()> {
    let locked = lock_row(tx)?;
    check(&locked, epoch, None).map_err(|why| StoreError::Fenced { epoch, why })
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn duration_from_micros(us: Option<i64>) -> Duration {
    Duration::from_micros(us.unwrap_or(0).max(0).unsigned_abs())
}

/// The grant just written, as the server's clock reads it now.
fn granted(tx: &mut Transaction<'_>) -> Result<Grant> {
    let row: Option<(u64, Option<i64>)> = tx.exec_first(
        "SELECT epoch, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
         FROM lease WHERE id = 1",
        (),
    )?;
    let (epoch, left) = row.ok_or_else(no_row)?;
    Ok(Grant {
        epoch: Epoch(epoch),
        granted: duration_from_micros(left),
    })
}

/// The lease row's columns as [`view`] reads them: holder, epoch, and the acquisition's
/// time and the time left, in microseconds by the server's clock.
type ViewRow = (Option<String>, u64, Option<i64>, Option<i64>);

fn view(q: &mut impl Queryable) -> Result<LeaseView> {
    let row: Option<ViewRow> = q.exec_first(
        "SELECT holder, epoch,
             TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', acquired_at),
             TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
         FROM lease WHERE id = 1",
        (),
    )?;
    let (holder, epoch, since, left) = row.ok_or_else(no_row)?;
    Ok(LeaseView {
        epoch: Epoch(epoch),
        holder,
        since: since
            .map(|us| SystemTime::UNIX_EPOCH + Duration::from_micros(us.max(0).unsigned_abs())),
        left: duration_from_micros(left),
    })
}

fn no_row() -> StoreError {
    StoreError::Corrupt("the shared database has no lease row: run its migrations".into())
}

fn check_holder(holder: &str) -> Result<()> {
    if holder.is_empty() || holder.len() > MAX_HOLDER {
        return Err(StoreError::Corrupt(format!(
            "a lease holder id must be 1 to {MAX_HOLDER} bytes, not {}",
            holder.len()
        )));
    }
    Ok(())
}

impl ClusterDb {
    /// Takes the lease for `holder` for `len` if nobody holds it, its holder's lease
    /// expired by the server's clock, or its holder is `holder` itself; the epoch grows by
    /// one.
    ///
    /// A holder finds its own live lease when the answer to its acquisition (or to a
    /// renewal) was lost: the row is its own, but it does not know under which epoch, so
    /// it must not act under it. Taking it again under a new epoch fences off whatever it
    /// started under the old one and lets it act at once, instead of nobody acting until
    /// its own lost lease runs out. The holder id is unique per start of a daemon
    /// (`NODE:PID:RANDOM`), so no other daemon's lease is ever taken this way.
    pub fn try_acquire(&mut self, holder: &str, len: Duration) -> Result<Acquisition> {
        check_holder(holder)?;
        let mut tx = self.conn.start_transaction(tx_options())?;
        let locked = lock_row(&mut tx)?;
        if locked.live && locked.holder.as_deref().is_some_and(|h| h != holder) {
            return Ok(Acquisition::Held(view(&mut tx)?));
        }
        tx.exec_drop(
            "UPDATE lease SET holder = ?, epoch = epoch + 1, acquired_at = UTC_TIMESTAMP(6),
                 expires_at = TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6))
             WHERE id = 1",
            (holder, micros(len)),
        )?;
        let grant = granted(&mut tx)?;
        tx.commit()?;
        Ok(Acquisition::Won(grant))
    }

    /// Extends `holder`'s lease of `epoch` to `len` from now by the server's clock. Fails
    /// with [`StoreError::Fenced`] if the epoch moved, the lease was released, or it
    /// expired (even if nobody took it over: an expired lease is won again, under a new
    /// epoch, so that what the daemon does next starts from a takeover's reconciliation).
    pub fn renew(&mut self, holder: &str, epoch: Epoch, len: Duration) -> Result<Grant> {
        let mut tx = self.conn.start_transaction(tx_options())?;
        let locked = lock_row(&mut tx)?;
        check(&locked, epoch, Some(holder)).map_err(|why| StoreError::Fenced { epoch, why })?;
        tx.exec_drop(
            "UPDATE lease SET expires_at = TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6))
             WHERE id = 1",
            (micros(len),),
        )?;
        let grant = granted(&mut tx)?;
        tx.commit()?;
        Ok(grant)
    }

    /// Gives the lease up, so another daemon can take it at once. True if `holder` held
    /// `epoch` (expired or not) and gave it up; false if it was not its own any more. The
    /// epoch stays: the next acquisition adds one to it.
    pub fn release(&mut self, holder: &str, epoch: Epoch) -> Result<bool> {
        self.conn.exec_drop(
            "UPDATE lease SET holder = NULL, acquired_at = NULL, expires_at = NULL
             WHERE id = 1 AND holder = ? AND epoch = ?",
            (holder, epoch.0),
        )?;
        Ok(self.conn.affected_rows() == 1)
    }

    /// The lease as the server sees it now (a plain read: it waits for no lock).
    pub fn read(&mut self) -> Result<LeaseView> {
        view(&mut self.conn)
    }

    /// Runs `write` in one transaction fenced by `epoch`: the fence first (so a deposed
    /// daemon does no work), then `write`, then the commit. Any error rolls everything
    /// back.
    pub fn fenced<T>(
        &mut self,
        epoch: Epoch,
        write: impl FnOnce(&mut Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut tx = self.conn.start_transaction(tx_options())?;
        fence(&mut tx, epoch)?;
        let out = write(&mut tx)?;
        // Checked again just before the commit (the row is still this transaction's):
        // a write that took longer than the lease (the daemon paused in between) is
        // rolled back, so what a fenced write commits, it commits while its lease lives.
        fence(&mut tx, epoch)?;
        tx.commit()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked(holder: Option<&str>, epoch: u64, live: bool) -> Locked {
        Locked {
            holder: holder.map(str::to_string),
            epoch: Epoch(epoch),
            live,
        }
    }

    #[test]
    fn the_check_names_why_a_lease_is_not_ones_own() {
        assert_eq!(
            check(&locked(Some("a"), 3, true), Epoch(3), Some("a")),
            Ok(())
        );
        assert_eq!(check(&locked(Some("a"), 3, true), Epoch(3), None), Ok(()));
        assert_eq!(
            check(&locked(Some("b"), 4, true), Epoch(3), Some("a")),
            Err(Fence::Moved {
                epoch: Epoch(4),
                holder: Some("b".into())
            })
        );
        // Taken over and released since: still moved, not merely released.
        assert_eq!(
            check(&locked(None, 4, false), Epoch(3), None),
            Err(Fence::Moved {
                epoch: Epoch(4),
                holder: None
            })
        );
        assert_eq!(
            check(&locked(None, 3, false), Epoch(3), Some("a")),
            Err(Fence::Released)
        );
        assert_eq!(
            check(&locked(Some("a"), 3, false), Epoch(3), Some("a")),
            Err(Fence::Expired)
        );
        assert_eq!(
            check(&locked(Some("b"), 3, true), Epoch(3), Some("a")),
            Err(Fence::Moved {
                epoch: Epoch(3),
                holder: Some("b".into())
            })
        );
    }

    #[test]
    fn the_fenced_error_says_what_happened_and_what_it_means() {
        let e = StoreError::Fenced {
            epoch: Epoch(3),
            why: Fence::Moved {
                epoch: Epoch(4),
                holder: Some("login2:812".into()),
            },
        };
        assert_eq!(
            e.to_string(),
            "this daemon is not the active one any more: its lease of epoch 3 was taken over \
             (epoch 4, held by login2:812); nothing of the transaction was written"
        );
    }
}
