//! The store's journal: every write transaction as the list of store operations it ran,
//! for cluster mode (docs/cluster.md, "The store on MariaDB").
//!
//! In cluster mode the shared database holds the **journal**, a numbered sequence of
//! entries, one per committed write transaction of the store, each the operations it ran
//! ([`Op`]) with the values they were given. Every daemon keeps a **replica**: an SQLite
//! store made by applying the journal's entries in order with the same code that wrote
//! them. The active daemon appends each transaction's entry to the journal, fenced by its
//! lease's epoch, before it commits the transaction to its replica; standbys apply what
//! was appended since they last looked; a daemon that takes over applies the rest first.
//!
//! **Invariant:** applying an operation is deterministic: its effect is a function of the
//! replica's state and the operation's values alone (ids are the tables' next row ids;
//! times are the values given; the store's instance comes from the shared database). So
//! every replica that applied entries 1..=n holds the same rows as the daemon that wrote
//! them (every case of `store::suite` checks it when it ends: `suite::Journaled`).
//!
//! **Invariant:** an operation carries every value its rows get, computed once by the
//! writer: applying one never parses, classifies, reads the clock or the config, or
//! decides with a limit of this program's. A submission's dependency rows (its
//! `--dependency`, read from argv and script by `sbatch_args`) are in
//! [`Op::CreateSubmission`]; what is kept of a note, and which old rows go, are in the
//! note's operation. So a replica of another version, whose parser or limits differ,
//! still makes the same rows from them
//! (`a_replica_whose_parser_differs_makes_the_same_rows`). Typed values (a retry plan, a
//! notification's body) are written as JSON by the replica's own types: a change to
//! those types is a change to the operation, and raises [`FORMAT`].
//!
//! **Invariant:** an entry is in the journal before the transaction it records is
//! committed to the writer's replica, and the writer's replica holds every earlier entry:
//! entry `n` is appended only by the holder of the lease, whose replica applied 1..n-1.
//!
//! What goes into an entry is what the store writes, never a decision: a transition
//! enters as the values its rows get ([`Step`]: the reason's prose and name, the inputs as
//! stored JSON), so a replica made by a later version stores exactly what was decided.

use super::snapshot::SnapshotHead;
use super::{NewSubmission, Result, StoreError};
use crate::domain::dependency::Edge;
use crate::domain::model::{Action, ChainState, Classification, RecoveryClass};
use crate::domain::policy::{AttemptChange, ChainUpdate, Notify, Transition};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The journal's format: what [`Op`]s mean and how the replica applies them, so which
/// writer made an entry. Any change to an operation's values or to how the store applies
/// one (a migration among them) must raise it; a replica never applies an entry of a
/// later format than its own ([`StoreError::JournalTooNew`]), nor one of a format no
/// version wrote ([`StoreError::JournalFormatUnknown`]). Low byte: the operations'
/// revision; above it: the replica's schema version.
pub const FORMAT: u32 = ((SCHEMA as u32) << 8) | OPS_REVISION;

/// The replica's schema version (the number of migrations).
const SCHEMA: usize = super::schema::MIGRATIONS.len();

/// The revision of [`Op`] and its application (raise it with any change).
/// 2: every operation carries the values its rows get (a submission's dependency rows,
/// what a note keeps and which old rows it removes); revision 1 re-derived them when
/// applied.
const OPS_REVISION: u32 = 2;

/// The revision whose entries are read by deriving what they lack once, as their writer
/// did when it applied them (`store::legacy`).
const LEGACY_REVISION: u32 = 1;

/// The schema version of the first journal (revision 1 was written from there on).
const FIRST_JOURNAL_SCHEMA: u32 = 10;

/// The schema version of the first entries of [`OPS_REVISION`]: an entry of this
/// revision written under any schema from this one to the replica's own is read as it
/// is. A migration changes the tables an operation writes, not what it carries: an
/// entry written before the replica's last migrations is still one it applies (as the
/// writer's own replica applied it when it made it); a change to what an operation
/// carries or means is a new revision.
pub(super) const FIRST_REVISION_SCHEMA: u32 = 15;

const _: () = assert!(FIRST_REVISION_SCHEMA <= SCHEMA as u32);

/// Where the journal's entries go and come from: the shared database (`cluster::log`),
/// or memory (tests).
pub trait Journal: Send {
    /// Appends entry `seq` (the JSON array of one transaction's operations) durably, or
    /// fails having appended nothing. Fails with [`StoreError::Fenced`] when this daemon
    /// does not hold the lease, and when entry `seq` exists already.
    fn append(&mut self, seq: u64, format: u32, body: &[u8]) -> Result<()>;

    /// Entries after `seq`, in order, at most `max` of them: `(seq, format, body)`. Fails
    /// with [`StoreError::Pruned`] when the entry after `seq` was pruned (the caller
    /// reloads from a snapshot: [`Journal::latest_snapshot`]).
    fn read_after(&mut self, seq: u64, max: usize) -> Result<Vec<(u64, u32, Vec<u8>)>>;

    /// The newest complete snapshot of the store, if any (`store::snapshot`).
    fn latest_snapshot(&mut self) -> Result<Option<SnapshotHead>> {
        Ok(None)
    }

    /// Writes snapshot `head`, decoded and checked, to the new file `out`.
    fn read_snapshot(&mut self, head: &SnapshotHead, _out: &std::path::Path) -> Result<()> {
        Err(StoreError::Busy(format!(
            "this journal keeps no snapshot (entry {})",
            head.seq
        )))
    }
}

/// One journal entry's operations, in the order the transaction ran them.
pub(super) type Entry<'a> = Vec<Op<'a>>;

/// A store operation with the values it was given. Each is one public write of `Store`,
/// and is applied by the same function that ran it first.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(super) enum Op<'a> {
    CreateSubmission {
        new: Cow<'a, NewSubmission>,
        edges: Cow<'a, [Edge]>,
        now: i64,
        /// The sbatch argv made for the launch's tag (the tag itself is the launch id's,
        /// which applying the operation assigns again).
        argv: Cow<'a, [String]>,
        /// The jobs the submission waits on (`--dependency`), as its `dependencies` rows
        /// hold them: kind and job, read from argv and script by the writer.
        dependencies: Cow<'a, [(String, String)]>,
    },
    BeginRelaunch {
        submission_id: i64,
        chain_ids: Cow<'a, [i64]>,
        now: i64,
        argv: Cow<'a, [String]>,
    },
    BeginRequeue {
        submission_id: i64,
        chain_id: i64,
        job_id: Cow<'a, str>,
        fields: Cow<'a, [String]>,
        now: i64,
    },
    LaunchSubmitted {
        launch_id: i64,
        job_id: Cow<'a, str>,
        now: i64,
    },
    /// [`Op::LaunchSubmitted`] as an entry of revision 1 holds it (read from one, never
    /// written): written before migration 14, it may make a second live attempt on one
    /// job, which applying it keeps (`apply_op`).
    LegacyLaunchSubmitted {
        launch_id: i64,
        job_id: Cow<'a, str>,
        now: i64,
    },
    DiscardSubmission {
        launch_id: i64,
    },
    NoteSubmitRequest {
        owner_uid: u32,
        request_id: Cow<'a, str>,
        submission_id: i64,
        now: i64,
        /// How many of the owner's request ids are kept (the newest).
        keep: i64,
    },
    NoteLaunchError {
        launch_id: i64,
        error: Cow<'a, str>,
        promise: bool,
    },
    SetLastSeen {
        seen: Vec<(i64, u32, Cow<'a, str>)>,
        owned: Cow<'a, [(i64, u32, bool)]>,
    },
    /// A user's plain-sbatch choice (`supervisorctl opt-in` / `opt-out`).
    SetPlainOpt {
        uid: u32,
        opted_in: bool,
        now: i64,
    },
    /// What could not be recovered from Slurm for an adopted job's submission (the items
    /// as kept: cut by the writer).
    NoteNotRecovered {
        submission_id: i64,
        items: Cow<'a, [String]>,
    },
    /// A plain-sbatch job the daemon did not supervise, and why (the reason as kept: cut
    /// by the writer).
    NotePlainRefused {
        job_id: Cow<'a, str>,
        owner_uid: u32,
        reason: Cow<'a, str>,
        now: i64,
        /// The refusals noted before it are removed.
        forget_before: i64,
    },
    /// A decision about a rule proposal (`rules accept|reject`): a record of its own,
    /// with its rule as the stored JSON.
    RecordRuleDecision {
        proposal: Cow<'a, str>,
        owner_uid: Option<u32>,
        action: Cow<'a, str>,
        actor: Cow<'a, str>,
        actor_uid: u32,
        reason: Cow<'a, str>,
        rule: Option<Cow<'a, str>>,
        at: i64,
    },
    Apply {
        steps: Vec<(i64, Step<'a>)>,
        all_or_none: bool,
        failed_launch: Option<(i64, Cow<'a, str>)>,
        settled_gates: Option<(i64, bool)>,
        now: i64,
    },
    NotificationsSent {
        items: Cow<'a, [(i64, (bool, bool))]>,
        now: i64,
    },
    NotificationFailed {
        id: i64,
        done: (bool, bool),
        error: Cow<'a, str>,
        next_try: Option<i64>,
        now: i64,
    },
    NotificationMailed {
        id: i64,
    },
    AddWaits {
        submission_id: i64,
        edges: Cow<'a, [Edge]>,
    },
    ClearRewires {
        launch_ids: Cow<'a, [i64]>,
    },
}

/// A transition as the store writes it: its conditions and the values of its rows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Step<'a> {
    pub from: ChainState,
    pub update: Cow<'a, ChainUpdate>,
    pub record: Option<WrittenRecord>,
    pub attempt: Option<Cow<'a, AttemptChange>>,
    pub notify: Option<Notify>,
    pub report_once: Option<Cow<'a, str>>,
}

/// A decision record as its row holds it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WrittenRecord {
    pub classification: Classification,
    pub class: RecoveryClass,
    pub action: Action,
    /// The reason's prose, and its name (`Reason::code`).
    pub reason: String,
    pub reason_code: String,
    /// The inputs as stored (JSON text).
    pub inputs: String,
    pub resolves_latest: bool,
    pub actor: String,
    pub infra_failure: bool,
    pub failed_nodes: Option<String>,
}

impl<'a> Step<'a> {
    /// What `t`'s rows get (its effects are the daemon's, not the store's).
    pub fn of(t: &'a Transition) -> Step<'a> {
        Step {
            from: t.from,
            update: Cow::Borrowed(&t.update),
            record: t.record.as_ref().map(|d| WrittenRecord {
                classification: d.classification,
                class: d.class,
                action: d.action,
                reason: d.reason.to_string(),
                reason_code: d.reason.code().to_string(),
                inputs: super::json(&d.inputs),
                resolves_latest: d.resolves_latest,
                actor: d.actor.clone(),
                infra_failure: d.infra_failure,
                failed_nodes: d.failed_nodes.clone(),
            }),
            attempt: t.attempt.as_ref().map(Cow::Borrowed),
            notify: t.notify,
            report_once: t.report_once.as_deref().map(Cow::Borrowed),
        }
    }
}

impl Step<'_> {
    /// The same step, borrowed.
    pub fn borrowed(&self) -> Step<'_> {
        Step {
            from: self.from,
            update: Cow::Borrowed(&*self.update),
            record: self.record.clone(),
            attempt: self.attempt.as_deref().map(Cow::Borrowed),
            notify: self.notify,
            report_once: self.report_once.as_deref().map(Cow::Borrowed),
        }
    }
}

/// The operations of a transaction not yet committed, as the JSON array they will be
/// appended as.
#[derive(Debug, Default)]
pub(super) struct Pending {
    body: Vec<u8>,
    ops: usize,
}

impl Pending {
    pub fn push(&mut self, op: &Op<'_>) {
        self.body.push(if self.ops == 0 { b'[' } else { b',' });
        serde_json::to_writer(&mut self.body, op).expect("serializing plain data cannot fail");
        self.ops += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.ops == 0
    }

    /// The entry's body, and the buffer emptied.
    pub fn take(&mut self) -> Vec<u8> {
        let mut body = std::mem::take(&mut self.body);
        body.push(b']');
        self.ops = 0;
        body
    }

    pub fn clear(&mut self) {
        self.body.clear();
        self.ops = 0;
    }
}

/// Reads an entry's operations. A body that is not the operations of a known format is
/// refused, never half applied; each operation of an entry of [`LEGACY_REVISION`] gets
/// the values it lacks from `upgrade` (`store::legacy::upgrade`: derived once, as its
/// writer derived them when it applied it).
pub(super) fn decode(
    seq: u64,
    format: u32,
    body: &[u8],
    upgrade: impl Fn(&mut serde_json::Value) -> Result<()>,
) -> Result<Entry<'static>> {
    let corrupt = |e: serde_json::Error| {
        StoreError::Corrupt(format!(
            "journal entry {seq} (format {format}) cannot be read: {e}"
        ))
    };
    if format > FORMAT {
        return Err(StoreError::JournalTooNew {
            seq,
            found: format,
            known: FORMAT,
        });
    }
    let schema = format >> 8;
    if format & 0xff == OPS_REVISION && (FIRST_REVISION_SCHEMA..=SCHEMA as u32).contains(&schema) {
        let entry: Entry<'static> = serde_json::from_slice(body).map_err(corrupt)?;
        // Made from entries of revision 1 only: one of this revision that asks for it
        // would keep a second live attempt on one job, which this revision refuses.
        if entry
            .iter()
            .any(|op| matches!(op, Op::LegacyLaunchSubmitted { .. }))
        {
            return Err(StoreError::Corrupt(format!(
                "journal entry {seq} (format {format}) holds an operation only an entry of revision {LEGACY_REVISION} may hold"
            )));
        }
        return Ok(entry);
    }
    if format & 0xff != LEGACY_REVISION || !(FIRST_JOURNAL_SCHEMA..=SCHEMA as u32).contains(&schema)
    {
        return Err(StoreError::JournalFormatUnknown {
            seq,
            found: format,
            known: FORMAT,
        });
    }
    let mut ops: Vec<serde_json::Value> = serde_json::from_slice(body).map_err(corrupt)?;
    for op in &mut ops {
        upgrade(op).map_err(|e| match e {
            StoreError::Corrupt(why) => StoreError::Corrupt(format!(
                "journal entry {seq} (format {format}) cannot be read: {why}"
            )),
            StoreError::NoDependencyReader(what) => StoreError::NoDependencyReader(format!(
                "journal entry {seq} (format {format}): {what}"
            )),
            e => e,
        })?;
    }
    serde_json::from_value(serde_json::Value::Array(ops)).map_err(corrupt)
}

/// An entry as stored: its format and its body.
pub type RawEntry = (u32, Vec<u8>);

/// A journal in memory, for tests: the entries appended, in order. Clones share it.
#[derive(Debug, Default, Clone)]
pub struct MemoryJournal {
    pub entries: Arc<Mutex<Vec<RawEntry>>>,
    /// Refuse every append (a deposed daemon).
    pub fenced: Arc<AtomicBool>,
    /// Append, then answer with an error (an answer lost on the network).
    pub lose_answers: Arc<AtomicBool>,
    /// Every read fails (the database does not answer reads).
    pub unreadable: Arc<AtomicBool>,
}

impl Journal for MemoryJournal {
    fn append(&mut self, seq: u64, format: u32, body: &[u8]) -> Result<()> {
        let mut entries = self.entries.lock().expect("journal lock");
        if self.fenced.load(Ordering::SeqCst) || seq != entries.len() as u64 + 1 {
            return Err(StoreError::Fenced {
                epoch: crate::domain::election::Epoch(0),
                why: super::cluster::Fence::Released,
            });
        }
        entries.push((format, body.to_vec()));
        if self.lose_answers.load(Ordering::SeqCst) {
            return Err(StoreError::Busy("the journal's answer was lost".into()));
        }
        Ok(())
    }

    fn read_after(&mut self, seq: u64, max: usize) -> Result<Vec<(u64, u32, Vec<u8>)>> {
        if self.unreadable.load(Ordering::SeqCst) {
            return Err(StoreError::Busy("the journal cannot be read".into()));
        }
        let entries = self.entries.lock().expect("journal lock");
        Ok(entries
            .iter()
            .enumerate()
            .skip(seq as usize)
            .take(max)
            .map(|(i, (f, b))| (i as u64 + 1, *f, b.clone()))
            .collect())
    }
}
