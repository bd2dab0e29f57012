//! Plain `sbatch` (docs/plain-sbatch.md): who chose to have their plain `sbatch`
//! submissions supervised (`supervisorctl opt-in`), or chose not to (`opt-out`; a user
//! without a choice follows the site's default, `[plain_sbatch]`, decided in
//! `daemon::plain`); what could not be recovered from Slurm for an adopted job; and the
//! plain-sbatch jobs the daemon did not supervise, with why.

use super::journal::Op;
use super::{Result, Store};
use rusqlite::{params, Connection, OptionalExtension};

/// Records a user's choice, replacing an earlier one (in the caller's transaction; a
/// replica applies [`Op::SetPlainOpt`] with it too).
pub(super) fn exec_set_plain_opt(
    tx: &Connection,
    uid: u32,
    opted_in: bool,
    now: i64,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO plain_opt (uid, opted_in, chosen_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (uid) DO UPDATE SET opted_in = excluded.opted_in, chosen_at = excluded.chosen_at",
    )?
    .execute(params![uid, opted_in, now])?;
    Ok(())
}

/// How long a refusal is kept for its owner to see (`status JOBID`).
pub const REFUSAL_KEPT_SECS: i64 = 30 * 24 * 3600;

/// The most items kept of what was not recovered, and the most bytes of each (they name
/// options and values the job's owner wrote).
const MAX_ITEMS: usize = 32;
const MAX_ITEM_BYTES: usize = 512;

/// The most bytes of a refusal's reason that are kept.
const MAX_REASON_BYTES: usize = 1024;

fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// What is kept of the items not recovered (decided by the writer, carried in its
/// [`Op::NoteNotRecovered`]).
pub(super) fn kept_items(items: &[String]) -> Vec<String> {
    items
        .iter()
        .take(MAX_ITEMS)
        .map(|i| cut(i, MAX_ITEM_BYTES))
        .collect()
}

/// What is kept of a refusal's reason (decided by the writer, carried in its
/// [`Op::NotePlainRefused`]).
pub(super) fn kept_reason(reason: &str) -> String {
    cut(reason, MAX_REASON_BYTES)
}

/// The refusals noted before this go when one is noted at `now`.
pub(super) fn forget_refusals_before(now: i64) -> i64 {
    now - REFUSAL_KEPT_SECS
}

/// Records the items as kept ([`kept_items`]).
pub(super) fn exec_note_not_recovered(
    tx: &Connection,
    submission_id: i64,
    items: &[String],
) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO not_recovered (submission_id, items) VALUES (?1, ?2)
         ON CONFLICT (submission_id) DO UPDATE SET items = excluded.items",
    )?
    .execute(params![submission_id, super::json(&items)])?;
    Ok(())
}

/// Records the reason as kept ([`kept_reason`]), and forgets the refusals noted before
/// `forget_before`.
pub(super) fn exec_note_plain_refused(
    tx: &Connection,
    job_id: &str,
    owner_uid: u32,
    reason: &str,
    now: i64,
    forget_before: i64,
) -> Result<()> {
    tx.prepare_cached("DELETE FROM plain_refused WHERE noted_at < ?1")?
        .execute([forget_before])?;
    tx.prepare_cached(
        "INSERT INTO plain_refused (job_id, owner_uid, reason, noted_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (job_id, owner_uid) DO UPDATE SET reason = excluded.reason, noted_at = excluded.noted_at",
    )?
    .execute(params![job_id, owner_uid, reason, now])?;
    Ok(())
}

/// A plain-sbatch job the daemon did not supervise: whose note it was, why, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainRefusal {
    pub owner_uid: u32,
    pub reason: String,
    pub noted_at: i64,
}

impl Store {
    /// Records what could not be recovered from Slurm for an adopted job's submission.
    pub fn note_not_recovered(&mut self, submission_id: i64, items: &[String]) -> Result<()> {
        let items = kept_items(items);
        self.write(
            |tx, _| exec_note_not_recovered(tx, submission_id, &items),
            |_, p| {
                p.push(&Op::NoteNotRecovered {
                    submission_id,
                    items: items.as_slice().into(),
                })
            },
        )
    }

    /// What could not be recovered for a submission; empty for one given whole.
    pub fn not_recovered(&self, submission_id: i64) -> Result<Vec<String>> {
        let text: Option<String> = self
            .conn
            .prepare_cached("SELECT items FROM not_recovered WHERE submission_id = ?1")?
            .query_row([submission_id], |r| r.get(0))
            .optional()?;
        Ok(text
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default())
    }

    /// Records that a plain-sbatch job of `owner_uid`'s note is not supervised, and why
    /// (replacing an earlier word on it; refusals older than [`REFUSAL_KEPT_SECS`] go).
    /// The same word on it again, while it is kept, writes nothing: a user who leaves
    /// note after note for one job makes no write (nor journal entry) after the first.
    pub fn note_plain_refused(
        &mut self,
        job_id: &str,
        owner_uid: u32,
        reason: &str,
        now: i64,
    ) -> Result<()> {
        let kept: Option<(String, i64)> = self
            .conn
            .prepare_cached(
                "SELECT reason, noted_at FROM plain_refused WHERE job_id = ?1 AND owner_uid = ?2",
            )?
            .query_row(params![job_id, owner_uid], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let reason = kept_reason(reason);
        let forget_before = forget_refusals_before(now);
        if kept.is_some_and(|(said, at)| said == reason && at >= forget_before) {
            return Ok(());
        }
        self.write(
            |tx, _| exec_note_plain_refused(tx, job_id, owner_uid, &reason, now, forget_before),
            |_, p| {
                p.push(&Op::NotePlainRefused {
                    job_id: job_id.into(),
                    owner_uid,
                    reason: reason.as_str().into(),
                    now,
                    forget_before,
                })
            },
        )
    }

    /// The refusals of job `job_id`, of every note's owner.
    pub fn plain_refusals(&self, job_id: &str) -> Result<Vec<PlainRefusal>> {
        let mut q = self.conn.prepare_cached(
            "SELECT owner_uid, reason, noted_at FROM plain_refused WHERE job_id = ?1 ORDER BY owner_uid",
        )?;
        let rows = q.query_map([job_id], |r| {
            Ok(PlainRefusal {
                owner_uid: r.get(0)?,
                reason: r.get(1)?,
                noted_at: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Records a user's choice (replacing an earlier one); false, and nothing written (no
    /// journal entry either), when it is the choice recorded already.
    pub fn set_plain_opt(&mut self, uid: u32, opted_in: bool, now: i64) -> Result<bool> {
        if self.plain_opt(uid)? == Some(opted_in) {
            return Ok(false);
        }
        self.write(
            |tx, _| exec_set_plain_opt(tx, uid, opted_in, now),
            |_, p| p.push(&Op::SetPlainOpt { uid, opted_in, now }),
        )?;
        Ok(true)
    }

    /// A user's own choice, if they made one.
    pub fn plain_opt(&self, uid: u32) -> Result<Option<bool>> {
        Ok(self
            .conn
            .prepare_cached("SELECT opted_in FROM plain_opt WHERE uid = ?1")?
            .query_row([uid], |r| r.get(0))
            .optional()?)
    }

    /// Every user's choice, by uid.
    pub fn plain_opts(&self) -> Result<Vec<(u32, bool)>> {
        let mut q = self
            .conn
            .prepare_cached("SELECT uid, opted_in FROM plain_opt ORDER BY uid")?;
        let rows = q.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }
}
