//! The live attempts as the poll reads them every cycle ([`LiveJob`]: ids, last state,
//! owner), kept up to date by the writes that change them instead of read again whole.
//!
//! At 100,000 live jobs reading them all is most of a cycle's time on the loop, and every
//! submit changed the store, so a cycle among submits read them again (once when it asked
//! Slurm, again when the answer landed: docs/benchmarks.md). Now SQLite tells the store
//! which rows of `attempts` its own connection wrote (`sqlite3_update_hook`: the rowid of
//! each row inserted or updated, in transactions rolled back too), and the next call reads
//! those rows alone and patches the list: a submit's new attempt (launching, not live)
//! leaves the very same list, a launch's answer adds one entry. The list is read whole
//! again when that cannot be trusted to be complete: another connection committed
//! (`PRAGMA data_version`), a row was deleted (its key is gone with it), more rows were
//! written than patching is worth ([`PATCH_AT_MOST`]), or a snapshot replaced the file
//! ([`LiveCache::forget`]).
//!
//! A list is kept only when it was read outside a transaction: a rollback fires no hook
//! and leaves `sqlite3_total_changes` as it was, so a list read inside a batch that is then
//! rolled back would be kept showing rows that are gone. A read inside one, or a read that
//! failed, leaves the rows written noted for the next read.
//!
//! Patched and whole reads agree (`tests::the_live_list_kept_by_the_writes_is_the_one_read_whole`
//! after every kind of write; `tests::live_prop` after random sequences of them, on the
//! writer, another connection and a replica reloaded from a snapshot).

use super::*;
use rusqlite::hooks::Action;
use std::sync::{Arc, Mutex};

/// What the poll needs of a live attempt every cycle, and no more: at 100,000 live jobs a
/// cycle with nothing ending reads these alone ([`Store::live_jobs`]); an attempt is read
/// whole only when it must be judged ([`Store::live_attempts_of`]). The texts are shared
/// (`Arc<str>`), so a patched list copies no string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveJob {
    pub chain_id: i64,
    pub n: u32,
    pub slurm_job_id: Option<Arc<str>>,
    /// As [`Attempt::last_seen`].
    pub last_seen: Option<Arc<str>>,
    /// As [`Attempt::owner_uid`].
    pub owner_uid: u32,
    /// As [`Attempt::owner_seen`].
    pub owner_seen: bool,
}

impl LiveJob {
    /// Its place in [`Store::live_jobs`]'s order: chain, then attempt.
    pub fn key(&self) -> (i64, u32) {
        (self.chain_id, self.n)
    }
}

/// Past this many written rows since the last read, the list is read whole again (each
/// patched row is one lookup by rowid; a whole read is one pass over the live rows).
pub(super) const PATCH_AT_MOST: usize = 2048;

/// The rows of `attempts` this connection wrote since the list was last read.
#[derive(Debug, Default)]
struct Touched {
    rowids: HashSet<i64>,
    /// A row deleted, or more than [`PATCH_AT_MOST`] written: read whole.
    whole: bool,
}

/// The last list read, the store's version it stands for, and what was written since.
pub(super) struct LiveCache {
    at: Option<(Version, Arc<[LiveJob]>)>,
    touched: Arc<Mutex<Touched>>,
}

impl LiveCache {
    /// A cache for `conn`, whose writes to `attempts` it is told of from now on.
    pub(super) fn watch(conn: &Connection) -> LiveCache {
        let touched: Arc<Mutex<Touched>> = Arc::default();
        let seen = touched.clone();
        conn.update_hook(Some(
            move |action: Action, _db: &str, table: &str, rowid: i64| {
                if table != "attempts" {
                    return;
                }
                let mut t = seen.lock().unwrap_or_else(|e| e.into_inner());
                if t.whole {
                    return;
                }
                if action == Action::SQLITE_DELETE || t.rowids.len() >= PATCH_AT_MOST {
                    t.whole = true;
                    t.rowids = HashSet::new();
                } else {
                    t.rowids.insert(rowid);
                }
            },
        ));
        LiveCache { at: None, touched }
    }

    /// The file was replaced under the connection (a snapshot loaded): read whole next.
    pub(super) fn forget(&mut self) {
        self.at = None;
    }

    fn take_touched(&self) -> Touched {
        std::mem::take(&mut *self.touched.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Notes again rows taken by [`LiveCache::take_touched`] that no kept list shows yet.
    fn note_again(&self, taken: Touched) {
        let mut t = self.touched.lock().unwrap_or_else(|e| e.into_inner());
        if t.whole || taken.whole || t.rowids.len() + taken.rowids.len() > PATCH_AT_MOST {
            t.whole = true;
            t.rowids = HashSet::new();
        } else {
            t.rowids.extend(taken.rowids);
        }
    }
}

const LIVE_COLS: &str =
    "a.chain_id, a.n, a.slurm_job_id, a.last_seen, s.owner_uid, a.owner_seen, a.state = 'live'";

fn live_from(r: &Row) -> rusqlite::Result<(LiveJob, bool)> {
    let text = |i| -> rusqlite::Result<Option<Arc<str>>> {
        Ok(r.get::<_, Option<String>>(i)?.map(Arc::from))
    };
    Ok((
        LiveJob {
            chain_id: r.get(0)?,
            n: r.get(1)?,
            slurm_job_id: text(2)?,
            last_seen: text(3)?,
            owner_uid: r.get(4)?,
            owner_seen: r.get(5)?,
        },
        r.get(6)?,
    ))
}

impl Store {
    /// What the poll reads of every live attempt each cycle (see [`LiveJob`]), in chain
    /// order (then attempt). The very same list while nothing it shows changed; patched
    /// with the rows written since, or read whole (see the module's doc).
    pub fn live_jobs(&mut self) -> Result<Arc<[LiveJob]>> {
        let version = Version {
            own: self.conn.total_changes(),
            others: self
                .conn
                .query_row("PRAGMA data_version", [], |r| r.get(0))?,
        };
        let touched = self.live.take_touched();
        let read = match &self.live.at {
            Some((at, jobs)) if *at == version => Ok(jobs.clone()),
            Some((at, jobs)) if at.others == version.others && !touched.whole => {
                self.patched(jobs, &touched.rowids)
            }
            _ => self.live_jobs_whole(),
        };
        let jobs = match read {
            Ok(jobs) => jobs,
            Err(e) => {
                // The rows written since are in no list yet: the next read reads them.
                self.live.note_again(touched);
                return Err(e);
            }
        };
        if self.conn.is_autocommit() {
            self.live.at = Some((version, jobs.clone()));
        } else {
            // Inside a transaction, which may yet be rolled back: a rollback tells no hook
            // and leaves the version as it is, so a list kept now could show rows that
            // are not there any more. Not kept; the rows written stay noted, and the
            // first read after the transaction reads them as they are then.
            self.live.note_again(touched);
        }
        Ok(jobs)
    }

    /// Every live attempt, read whole.
    pub(super) fn live_jobs_whole(&self) -> Result<Arc<[LiveJob]>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {LIVE_COLS} FROM {ATTEMPT_FROM} WHERE a.state = 'live' ORDER BY a.chain_id, a.n"
        ))?;
        let rows = q.query_map([], live_from)?;
        Ok(rows
            .map(|r| r.map(|(j, _)| j))
            .collect::<rusqlite::Result<Vec<_>>>()?
            .into())
    }

    /// `jobs` with the rows `rowids` as they are now: the same list when none of them
    /// changed what it shows.
    fn patched(&self, jobs: &Arc<[LiveJob]>, rowids: &HashSet<i64>) -> Result<Arc<[LiveJob]>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {LIVE_COLS} FROM {ATTEMPT_FROM} WHERE a.rowid = ?1"
        ))?;
        // Key -> the row as it is now (`None`: not live).
        let mut now: std::collections::BTreeMap<(i64, u32), Option<LiveJob>> =
            std::collections::BTreeMap::new();
        for rowid in rowids {
            // A row written and then deleted is a delete, which reads whole.
            if let Some((job, live)) = q.query_row([rowid], live_from).optional()? {
                now.insert(job.key(), live.then_some(job));
            }
        }
        let was = |key: &(i64, u32)| {
            jobs.binary_search_by_key(key, LiveJob::key)
                .ok()
                .map(|i| &jobs[i])
        };
        if now.iter().all(|(k, j)| was(k) == j.as_ref()) {
            return Ok(jobs.clone());
        }
        // Both in key order: the list with each written key replaced by its row as it is
        // now (gone when it is not live), new live rows in their place.
        let mut out = Vec::with_capacity(jobs.len() + now.len());
        let mut changes = now.into_iter().peekable();
        for j in jobs.iter() {
            while let Some((_, c)) = changes.next_if(|(k, _)| *k < j.key()) {
                out.extend(c);
            }
            match changes.next_if(|(k, _)| *k == j.key()) {
                Some((_, c)) => out.extend(c),
                None => out.push(j.clone()),
            }
        }
        out.extend(changes.filter_map(|(_, c)| c));
        Ok(out.into())
    }
}
