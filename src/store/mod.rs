//! The SQLite store: one file, WAL, versioned migrations, and the only SQL in the project.
//!
//! Every state change that must survive a crash is one transaction. The write-ahead
//! intent of a launch (see `schema.rs`) is committed before sbatch runs.
//!
//! This file keeps [`Store`], [`StoreError`], the one write path ([`Store::write`]: a
//! transaction, or a savepoint inside a batch, and in cluster mode the journal entry) and
//! catch-up ([`Store::catch_up`]);
//! `dispatch.rs`, the dispatch of a journal operation to the function that applies it
//! (`apply_op`).
//! Each aggregate is a file of its own with its reads, its writes, the `exec_*` function
//! that applies each write, and one row decoder per row type (`*_from`):
//!
//! - `open.rs`: opening a store or a replica, migrations, snapshots of the file;
//! - `submissions.rs`: submissions, their dependency rows, request ids, discarding one;
//! - `launches.rs`: launches (the intent of an sbatch or requeue) and their answers;
//! - `chains.rs`, `attempts.rs`: reading chains and attempts; `live.rs`: the poll's live
//!   jobs, kept up to date by the writes (SQLite's update hook) instead of read again;
//! - `apply.rs`: applying transitions, the one writer of chain states and decisions;
//! - `decisions.rs`: decision records and observations, and the counts read of them;
//! - `notifications.rs`: queued notifications, reminders and expiries due;
//! - `totals.rs`: each user's totals, which the per-user limits read;
//! - `pipeline.rs`: what a submission waits on, gates, rewiring;
//! - `opt_in.rs`: plain `sbatch` choices, refusals, what was not recovered;
//! - `signatures.rs`: failure signatures' resolutions, as rule proposals are made from;
//!   `rule_decisions.rs`: decisions about rule proposals, and users' own rules;
//! - `metrics.rs`: the decision tally; `schema.rs`: the migrations;
//! - `journal.rs`: the journal's operations ([`journal::Op`]) and entries; `legacy.rs`:
//!   reading the entries of revision 1;
//!   `snapshot.rs`: the snapshot format; `cluster/`: cluster mode's shared database (its
//!   connection, the lease, the journal and snapshots on it, the nodes).
//!
//! **A new write** is, in its aggregate's file, one public method that calls
//! [`Store::write`] with its `exec_*` and pushes its operation, and the `exec_*` function
//! (all its SQL, in the caller's transaction, from the operation's values alone); one
//! [`journal::Op`] variant in `journal.rs` carrying every value its rows get (computed by
//! the method, never by `exec_*`: a replica applies it with `exec_*` alone, see
//! `journal.rs`), and its arm in `dispatch.rs`'s `apply_op`. A new read is one method beside the
//! aggregate's others, decoding rows with the aggregate's `*_from`.

pub mod cluster;
pub mod journal;
pub mod snapshot;

mod apply;
mod attempts;
mod chains;
mod decisions;
mod dispatch;
mod launches;
mod legacy;
mod live;
mod metrics;
mod notifications;
mod open;
mod opt_in;
mod pipeline;
mod rule_decisions;
mod schema;
mod signatures;
mod submissions;
mod totals;

use apply::*;
use attempts::*;
use chains::*;
use decisions::*;
use dispatch::*;
use launches::*;
use notifications::*;
use submissions::*;
use totals::*;

pub use apply::{Applied, Batch};
pub use attempts::{Attempt, AttemptState};
pub use chains::ChainSummary;
pub use decisions::DecisionRecord;
pub use launches::{Launch, LaunchState};
pub use live::LiveJob;
pub use metrics::{DecisionTally, RetryProgress};
pub use notifications::{Notification, Waiting};
pub use opt_in::PlainRefusal;
pub use pipeline::{Gate, Rewire, JOB_IDS_NAME_CHAINS_FOR, MAX_UPSTREAM_CHAINS};
pub use rule_decisions::NewRuleDecision;
pub use signatures::{RuleRetry, SignatureResolution};
pub use submissions::{NewSubmission, Submission, SubmitRequestState, SUBMIT_REQUESTS_KEPT};
pub use totals::{UserTotals, UserTotalsCheck};

use crate::domain::model::{Action, ChainState, Classification, RecoveryClass, RetryPlan};
use journal::{Journal, Op, Pending, Step, WrittenRecord};
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::HashSet;
use std::path::Path;

/// A store failure. The daemon treats these as fatal for the operation at hand and never
/// as a fact about a job.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("state database holds a value it cannot read: {0}")]
    Corrupt(String),
    #[error("state database is busy: {0}")]
    Busy(String),
    #[error("state database schema version {found} is newer than this program knows ({known}); upgrade slurm-supervisor")]
    TooNew { found: i64, known: i64 },
    #[error("{path} is not a healthy slurm-supervisor store: {why}; it was left as it is: restore it from a backup, or move it away to start with an empty store")]
    NotAStore { path: String, why: String },
    #[error("shared database error: {0}")]
    Mysql(#[from] mysql::Error),
    #[error("chain c{chain} has a launch in flight already; nothing was recorded")]
    InFlight { chain: i64 },
    #[error("journal entry {seq} is of format {found}, newer than this program knows ({known}); upgrade slurm-supervisor on this node")]
    JournalTooNew { seq: u64, found: u32, known: u32 },
    /// An entry of a format no version of this program wrote (its own is `known`): it is
    /// refused, never applied by guessing.
    #[error("journal entry {seq} is of format {found}, which this program does not know (its own is {known}): it was not written by this version or an earlier one; upgrade slurm-supervisor on this node")]
    JournalFormatUnknown { seq: u64, found: u32, known: u32 },
    /// The journal's entries after `after` were pruned (through entry `through`): the
    /// replica must be reloaded from a snapshot (`Store::catch_up` does).
    #[error("the shared journal was pruned through entry {through}, and this replica is at entry {after}: it reloads from the snapshot")]
    Pruned { after: u64, through: u64 },
    /// The lease of `epoch` is not this daemon's any more: the write transaction that
    /// found it was rolled back, and the daemon must stop acting (`election`).
    #[error("this daemon is not the active one any more: its lease of epoch {epoch} {why}; nothing of the transaction was written")]
    Fenced {
        epoch: crate::domain::election::Epoch,
        why: cluster::Fence,
    },
    /// Upgrading what an earlier version wrote (`what`: a store's submissions from before
    /// their dependency rows were kept, a journal entry of revision 1) reads submissions'
    /// `--dependency`, and the store was given no reader of them.
    #[error("{what} needs each submission's --dependency read from its command line, and this store was opened without a reader of them: nothing was changed; open it with slurm-supervisord (which gives one: Store::read_dependencies_with) to upgrade it", what = .0)]
    NoDependencyReader(String),
}

impl StoreError {
    /// True when the database file itself is damaged: carrying on would only fail again.
    /// Whether the store refused the write for a constraint of its own (e.g. one live
    /// attempt per Slurm job, migration 14): that write alone is wrong, not the store.
    pub fn is_constraint(&self) -> bool {
        matches!(
            self,
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation
        )
    }

    pub fn is_corruption(&self) -> bool {
        match self {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
            ),
            StoreError::NotAStore { .. } => true,
            _ => false,
        }
    }
}

type Result<T> = std::result::Result<T, StoreError>;

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("serializing plain data cannot fail")
}

fn from_json<T: serde::de::DeserializeOwned>(s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("{e}: {s:.200}")))
}

fn parse_name<T: std::str::FromStr<Err = crate::domain::model::UnknownName>>(s: &str) -> Result<T> {
    s.parse()
        .map_err(|e: crate::domain::model::UnknownName| StoreError::Corrupt(e.to_string()))
}

/// The unfinished chain states as an SQL list (`'active', 'ready', ...`), from
/// [`ChainState::is_open`], so the SQL never disagrees with it.
fn open_states() -> String {
    ChainState::ALL
        .iter()
        .filter(|s| s.is_open())
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub use crate::domain::model::chain_label;

pub use crate::domain::model::Chain;

pub use crate::domain::policy::{
    AttemptChange, AttemptEnd, ChainUpdate, Clock, Record, Transition,
};

pub struct Store {
    conn: Connection,
    instance: String,
    /// The last [`Store::live_jobs`], the store's version it stands for, and the rows
    /// written since (`live`).
    live: live::LiveCache,
    /// Cluster mode: this store is a replica of the shared journal (`journal`).
    journal: Option<Journaling>,
    /// How a submission's dependency rows are read from its argv and script, given from
    /// above ([`Store::read_dependencies_with`]): only upgrading what an earlier version
    /// wrote needs it. The store imports no reader of a command line.
    dependency_reader: Option<DependencyReader>,
    /// Submissions from before dependency rows were kept (migration 4) wait for a
    /// reader to have theirs filled in; until then nothing is written.
    backfill_pending: bool,
}

/// Reads the rows of the jobs a submission waits on (its `--dependency`: kind and job)
/// from its argv and script: `daemon::sbatch::dependency_rows`, given to the store by
/// whoever opens it ([`Store::read_dependencies_with`]).
pub type DependencyReader = fn(&[String], Option<&[u8]>) -> Vec<(String, String)>;

/// A replica's side of the journal.
struct Journaling {
    sink: Box<dyn Journal>,
    /// The operations of the open batch, not appended yet.
    pending: Pending,
    /// The last entry this replica applied (its `meta` row `journal_seq`).
    seq: u64,
    /// An append failed in a way that may have appended it after all (a lost answer), or
    /// a commit failed after its append: the journal is read before the next write.
    unsure: bool,
    /// The users whose plain-sbatch choice entries applied since it was last asked
    /// ([`Store::take_replicated_opt_ins`]); `None`: every user's may have changed (a
    /// snapshot was loaded, or too many to list).
    opt_ins: Option<std::collections::BTreeSet<u32>>,
}

/// The most users whose replicated choices are listed one by one; past it, every user's
/// file is published again.
const OPT_INS_LISTED: usize = 1024;

/// Entries read from the journal per query while catching up (an entry may be several
/// MiB: a submission's script).
const CATCH_UP_PAGE: usize = 16;

impl Journaling {
    /// Appends entry `seq`. When the answer is lost (the network, a timeout), the journal
    /// is read back at once: an entry `seq` with this body is this write's, appended after
    /// all, and it counts as done (the caller then commits it); otherwise the write failed,
    /// and the journal is read before the next write (`unsure`), in case its append still
    /// lands. A refusal by the fence is an answer: nothing was appended.
    fn append(&mut self, seq: u64, body: &[u8]) -> Result<()> {
        let e = match self.sink.append(seq, journal::FORMAT, body) {
            Ok(()) => return Ok(()),
            Err(e @ StoreError::Fenced { .. }) => return Err(e),
            Err(e) => e,
        };
        self.unsure = true;
        if let Ok(entries) = self.sink.read_after(seq - 1, 1) {
            if let Some((s, _, b)) = entries.first() {
                if *s == seq && b.as_slice() == body {
                    self.unsure = false;
                    return Ok(());
                }
            }
        }
        Err(e)
    }
}

/// What changed in the store, as far as this connection can tell: its own changed rows
/// (`sqlite3_total_changes`, which counts every row an INSERT, UPDATE or DELETE changed,
/// in transactions rolled back too) and other connections' commits (`PRAGMA
/// data_version`). Equal versions read outside a transaction, equal contents (a rollback
/// changes the contents and neither number: `store::live` keeps no list read inside one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Version {
    own: u64,
    others: i64,
}

impl Store {
    /// The last journal entry this replica applied (0 outside cluster mode).
    pub fn journal_seq(&self) -> u64 {
        self.journal.as_ref().map_or(0, |j| j.seq)
    }

    /// The users whose plain-sbatch choice this replica applied from the journal since the
    /// last call (`Some(empty)` when none), or `None` when every user's may have changed
    /// (a snapshot was loaded, or more than a thousand choices came): a standby publishes
    /// them in its own node's spool, as the active node did in its own (docs/cluster.md).
    pub fn take_replicated_opt_ins(&mut self) -> Option<Vec<u32>> {
        match self.journal.as_mut() {
            None => Some(Vec::new()),
            Some(j) => j
                .opt_ins
                .replace(Default::default())
                .map(|s| s.into_iter().collect()),
        }
    }

    /// Applies the journal's entries this replica has not applied yet; returns how many.
    /// A standby calls it every cycle, and a daemon that takes over before it acts.
    ///
    /// A new replica (it has applied nothing) starts from the newest snapshot, if the
    /// shared database keeps one, and applies the entries after it. A replica whose next
    /// entry was pruned (a standby that was stopped or cut off for long) is reloaded from
    /// the newest snapshot, with a log line saying so, and carries on from there.
    pub fn catch_up(&mut self) -> Result<u64> {
        let Some(j) = self.journal.as_mut() else {
            return Ok(0);
        };
        if !self.conn.is_autocommit() {
            return Err(StoreError::Busy(
                "the journal cannot be read inside a batch".into(),
            ));
        }
        if j.seq == 0 {
            if let Some(head) = j.sink.latest_snapshot()? {
                tracing::info!(
                    snapshot = head.seq,
                    "this node's replica is new: it starts from the shared database's snapshot at journal entry {}, then applies the entries after it",
                    head.seq
                );
                self.load_snapshot(&head)?;
            }
        }
        let mut applied = 0;
        let mut reloads = 0;
        loop {
            match self.apply_journal() {
                Ok(n) => return Ok(applied + n),
                Err((n, StoreError::Pruned { after, through })) if reloads < 3 => {
                    applied += n;
                    reloads += 1;
                    let j = self.journal.as_mut().expect("a replica");
                    let Some(head) = j.sink.latest_snapshot()?.filter(|h| h.seq >= through) else {
                        return Err(StoreError::Corrupt(format!(
                            "the shared journal was pruned through entry {through}, and the shared database keeps no snapshot at or after it: this replica (at entry {after}) cannot be brought up to date (were the snapshot rows deleted by hand?); once the active daemon writes its next snapshot, this node loads it"
                        )));
                    };
                    tracing::warn!(
                        replica = after,
                        pruned_through = through,
                        snapshot = head.seq,
                        "this node's replica is at journal entry {after}, and the shared journal was pruned through entry {through}: reloading the replica from the snapshot at entry {}",
                        head.seq
                    );
                    self.load_snapshot(&head)?;
                }
                Err((_, e)) => return Err(e),
            }
        }
    }

    /// Applies the journal's entries after this replica's last; on an error, how many it
    /// applied before it.
    fn apply_journal(&mut self) -> std::result::Result<u64, (u64, StoreError)> {
        let Store {
            conn,
            instance,
            journal,
            dependency_reader,
            ..
        } = self;
        let reader = *dependency_reader;
        let j = journal.as_mut().expect("a replica");
        let mut applied = 0;
        let r = (|| {
            loop {
                let entries = j.sink.read_after(j.seq, CATCH_UP_PAGE)?;
                if entries.is_empty() {
                    break;
                }
                for (seq, format, body) in entries {
                    if seq != j.seq + 1 {
                        return Err(StoreError::Corrupt(format!(
                            "the journal goes from entry {} to {seq}: entries are missing",
                            j.seq
                        )));
                    }
                    let ops =
                        journal::decode(seq, format, &body, |op| legacy::upgrade(op, reader))?;
                    let tx = conn.savepoint()?;
                    for op in ops {
                        if let Op::SetPlainOpt { uid, .. } = &op {
                            if let Some(set) = j.opt_ins.as_mut() {
                                set.insert(*uid);
                                if set.len() > OPT_INS_LISTED {
                                    j.opt_ins = None;
                                }
                            }
                        }
                        apply_op(&tx, instance, op)?;
                    }
                    set_journal_seq(&tx, seq)?;
                    tx.commit()?;
                    j.seq = seq;
                    applied += 1;
                }
            }
            j.unsure = false;
            Ok(())
        })();
        match r {
            Ok(()) => Ok(applied),
            Err(e) => Err((applied, e)),
        }
    }

    /// Runs one write: `run` in a transaction of its own, or inside a batch in a savepoint,
    /// and in cluster mode its operation (`op` of what `run` returned; `None`: it wrote
    /// nothing) into the journal. Outside a batch the entry is appended before the
    /// transaction commits, so a write the journal refused (the lease is not this daemon's)
    /// is rolled back.
    ///
    /// A transaction, not a savepoint, when nothing encloses the write: a savepoint copies
    /// every page the write changes into a statement journal (so it could be rolled back
    /// to while its transaction goes on), which SQLite spills to a temporary file past 16
    /// pages; a write of its own is all or nothing without it (docs/benchmarks.md, issue
    /// 32, session 20).
    fn write<T>(
        &mut self,
        run: impl FnOnce(&Connection, &str) -> Result<T>,
        record: impl FnOnce(&T, &mut Pending),
    ) -> Result<T> {
        if self.backfill_pending {
            return Err(StoreError::NoDependencyReader(
                "this store holds submissions from before their dependency rows were kept, and filling them in".into(),
            ));
        }
        let outermost = self.conn.is_autocommit();
        if outermost && self.journal.as_ref().is_some_and(|j| j.unsure) {
            self.catch_up()?;
        }
        let Store {
            conn,
            instance,
            journal,
            ..
        } = self;
        let tx = if outermost {
            Scope::Own(conn.transaction()?)
        } else {
            Scope::Nested(conn.savepoint()?)
        };
        let out = run(&tx, instance)?;
        if let Some(j) = journal.as_mut() {
            record(&out, &mut j.pending);
            if outermost && !j.pending.is_empty() {
                let seq = j.seq + 1;
                let body = j.pending.take();
                set_journal_seq(&tx, seq)?;
                // An error drops the transaction (or savepoint), which rolls the write back.
                j.append(seq, &body)?;
                if let Err(e) = tx.commit() {
                    j.unsure = true;
                    return Err(e.into());
                }
                j.seq = seq;
                return Ok(out);
            }
        }
        tx.commit()?;
        Ok(out)
    }

    /// A random id of this store, part of every tag so two stores never share one.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Starts a batch: everything recorded until [`Store::end_batch`] is one transaction
    /// (one sync to disk for a whole burst of endings). Each operation inside still
    /// applies all or nothing (a savepoint); a crash before the end keeps none of the batch.
    pub fn begin_batch(&mut self) -> Result<()> {
        if self.journal_unsure() {
            self.catch_up()?;
        }
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        Ok(())
    }

    /// Cluster mode: an append's fate is not known yet (its answer was lost and the journal
    /// could not be read back): this replica may lack a write the journal has. Nothing
    /// should be decided on it until [`Store::catch_up`] succeeds.
    pub fn journal_unsure(&self) -> bool {
        self.journal.as_ref().is_some_and(|j| j.unsure)
    }

    /// Ends a batch: commits it, or (`commit` false, after an error) rolls it back. In
    /// cluster mode the batch's operations are one journal entry, appended before the
    /// commit; if the journal refuses it, the batch is rolled back.
    pub fn end_batch(&mut self, commit: bool) -> Result<()> {
        if self.conn.is_autocommit() {
            return Ok(());
        }
        let mut appended = None;
        if let Some(j) = self.journal.as_mut() {
            if !commit {
                j.pending.clear();
            } else if !j.pending.is_empty() {
                let seq = j.seq + 1;
                let body = j.pending.take();
                let append = set_journal_seq(&self.conn, seq).and_then(|()| j.append(seq, &body));
                if let Err(e) = append {
                    let _ = self.conn.execute_batch("ROLLBACK");
                    return Err(e);
                }
                appended = Some(seq);
            }
        }
        let ended = self
            .conn
            .execute_batch(if commit { "COMMIT" } else { "ROLLBACK" });
        if let (Some(j), Some(seq)) = (self.journal.as_mut(), appended) {
            if ended.is_ok() && self.conn.is_autocommit() {
                j.seq = seq;
            } else {
                j.unsure = true;
            }
        }
        // A COMMIT that failed (a full disk, a busy database) can leave the transaction
        // open: everything after would be nested in it and never committed.
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        ended?;
        Ok(())
    }
}

/// Where one write runs ([`Store::write`]): a transaction of its own, or a savepoint in
/// the batch around it. Dropped without `commit`, it rolls back.
enum Scope<'c> {
    Own(rusqlite::Transaction<'c>),
    Nested(rusqlite::Savepoint<'c>),
}

impl Scope<'_> {
    fn commit(self) -> rusqlite::Result<()> {
        match self {
            Scope::Own(tx) => tx.commit(),
            Scope::Nested(sp) => sp.commit(),
        }
    }
}

impl std::ops::Deref for Scope<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        match self {
            Scope::Own(tx) => tx,
            Scope::Nested(sp) => sp,
        }
    }
}

#[cfg(any(test, feature = "test-suites"))]
pub mod suite;
#[cfg(test)]
mod tests;
