//! Who chose to have their plain `sbatch` submissions supervised (`supervisorctl
//! opt-in`), or chose not to (`opt-out`); a user without a choice follows the site's
//! default (`[plain_sbatch]`, decided in `daemon::plain`).

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

impl Store {
    /// Records a user's choice (replacing an earlier one).
    pub fn set_plain_opt(&mut self, uid: u32, opted_in: bool, now: i64) -> Result<()> {
        self.write(
            |tx, _| exec_set_plain_opt(tx, uid, opted_in, now),
            |_, p| p.push(&Op::SetPlainOpt { uid, opted_in, now }),
        )
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
