//! Each user's totals (`user_totals`: unfinished chains, the bytes their submissions and
//! decision records take), which the per-user limits read in one row: kept up to date by
//! the writes that change them ([`TotalsDelta`], written once at the end of a write), made
//! once for a store from before them ([`ensure_user_totals`]), and recounted from the rows
//! to check them ([`Store::recount_user_totals`]).

use super::*;

/// [`Store::recount_user_totals`]: every user's totals as kept and as counted anew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserTotalsCheck {
    pub kept: Vec<(u32, UserTotals)>,
    pub counted: Vec<(u32, UserTotals)>,
}

/// Each user's totals as the per-user limits read them ([`Store::user_totals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserTotals {
    /// Unfinished chains (active, ready, pending_failed).
    pub open_chains: u64,
    /// The bytes of the submissions with an unfinished chain (script, argv, environment,
    /// working directory), each submission once however many of its chains are open.
    pub open_bytes: u64,
    /// The bytes of the decision records (reason and inputs) of unfinished chains.
    pub decision_bytes: u64,
    /// The bytes of their decisions about rule proposals for their own chains (reason
    /// and rule), kept for good (docs/rules.md).
    pub rule_bytes: u64,
}

impl UserTotals {
    /// What the limit `limits.max_stored_bytes_per_user` counts.
    pub fn kept_bytes(&self) -> u64 {
        self.open_bytes
            .saturating_add(self.decision_bytes)
            .saturating_add(self.rule_bytes)
    }
}

/// Every user's totals computed from the rows (what the triggers of migration 14 keep up
/// to date as `user_totals`), owners whose totals are all zero left out: the table keeps
/// no such row either (the trigger `user_totals_emptied` deletes one, and a rule decision
/// of no bytes inserts none).
pub(super) const RECOUNT_USER_TOTALS: &str = "
    SELECT owner_uid, SUM(chains), SUM(bytes), SUM(decided), SUM(ruled) FROM (
        SELECT s.owner_uid, COUNT(*) AS chains, 0 AS bytes, 0 AS decided, 0 AS ruled
          FROM chains c JOIN submissions s ON s.id = c.submission_id
          WHERE c.state IN ('active', 'ready', 'pending_failed') GROUP BY s.owner_uid
        UNION ALL
        SELECT owner_uid, 0, SUM(COALESCE(octet_length(script), 0) + octet_length(argv)
                                 + octet_length(env) + octet_length(cwd)), 0, 0
          FROM submissions WHERE id IN
            (SELECT submission_id FROM chains WHERE state IN ('active', 'ready', 'pending_failed'))
          GROUP BY owner_uid
        UNION ALL
        SELECT s.owner_uid, 0, 0, SUM(octet_length(d.reason) + octet_length(d.inputs)), 0
          FROM decisions d JOIN chains c ON c.id = d.chain_id JOIN submissions s ON s.id = c.submission_id
          WHERE c.state IN ('active', 'ready', 'pending_failed') GROUP BY s.owner_uid
        UNION ALL
        SELECT owner_uid, 0, 0, 0, SUM(RULE_DECISION_BYTES)
          FROM rule_decisions WHERE owner_uid IS NOT NULL GROUP BY owner_uid
    ) GROUP BY owner_uid
    HAVING SUM(chains) > 0 OR SUM(bytes) > 0 OR SUM(decided) > 0 OR SUM(ruled) > 0
    ORDER BY owner_uid";

/// [`RECOUNT_USER_TOTALS`] with what a rule decision's row counts.
pub(super) fn recount_user_totals_sql() -> String {
    RECOUNT_USER_TOTALS.replace(
        "RULE_DECISION_BYTES",
        super::rule_decisions::RULE_DECISION_BYTES,
    )
}

/// Fills `user_totals` from the rows when its `meta` row says nothing did (a store
/// migrated to 14, or a table copied without it); the triggers keep it from then on.
pub(super) fn ensure_user_totals(conn: &mut Connection) -> Result<()> {
    let done: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM meta WHERE key = 'user_totals')",
        [],
        |r| r.get(0),
    )?;
    if done {
        return Ok(());
    }
    let tx = conn.savepoint()?;
    tx.execute("DELETE FROM user_totals", [])?;
    tx.execute(
        &format!(
            "INSERT INTO user_totals (owner_uid, open_chains, open_bytes, decision_bytes, rule_bytes) {}",
            recount_user_totals_sql()
        ),
        [],
    )?;
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('user_totals', '1')",
        [],
    )?;
    tx.commit()?;
    Ok(())
}

/// The changes to users' totals (`user_totals`: unfinished chains, their submissions'
/// bytes, their decision records' bytes) that a write's chain changes make, gathered and
/// written once at its end ([`TotalsDelta::write`]): a burst of 10,000 endings is one
/// update of its owner's row, not 10,000. Inserted and removed chains are counted by the
/// triggers of migration 14 (a submission, a discarded submission: rare); state changes
/// and decision records here, in the write that makes them, on every replica alike.
#[derive(Debug, Default)]
pub(super) struct TotalsDelta(std::collections::BTreeMap<u32, [i64; 3]>);

impl TotalsDelta {
    pub(super) fn add(&mut self, owner: u32, d: [i64; 3]) {
        if d != [0; 3] {
            let e = self.0.entry(owner).or_default();
            for (a, b) in e.iter_mut().zip(d) {
                *a += b;
            }
        }
    }

    /// Chain `chain` of `submission` has just become unfinished (`opened`) or finished
    /// (its row written, and its records): it counts, with its records (but the
    /// `uncounted` bytes of them, never added), and its submission counts once while
    /// one of its chains is unfinished.
    pub(super) fn opened_or_closed(
        &mut self,
        tx: &Connection,
        owner: u32,
        submission: i64,
        chain: i64,
        opened: bool,
        uncounted: i64,
    ) -> Result<()> {
        let (others_open, bytes, records): (bool, i64, i64) = tx
            .prepare_cached(&format!(
                "SELECT EXISTS (SELECT 1 FROM chains WHERE submission_id = ?1 AND state IN ({}) AND id <> ?2),
                        (SELECT COALESCE(octet_length(script), 0) + octet_length(argv) + octet_length(env) + octet_length(cwd)
                           FROM submissions WHERE id = ?1),
                        (SELECT COALESCE(SUM(octet_length(reason) + octet_length(inputs)), 0)
                           FROM decisions WHERE chain_id = ?2)",
                open_states()
            ))?
            .query_row(params![submission, chain], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        let sign = if opened { 1 } else { -1 };
        let bytes = if others_open { 0 } else { bytes };
        self.add(owner, [sign, sign * bytes, sign * (records - uncounted)]);
        Ok(())
    }

    /// Writes the changes gathered (in the write's transaction); a row left at zero goes
    /// (trigger `user_totals_emptied`).
    pub(super) fn write(self, tx: &Connection) -> Result<()> {
        let mut q = tx.prepare_cached(
            "INSERT INTO user_totals (owner_uid, open_chains, open_bytes, decision_bytes) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (owner_uid) DO UPDATE SET open_chains = open_chains + excluded.open_chains,
                 open_bytes = open_bytes + excluded.open_bytes,
                 decision_bytes = decision_bytes + excluded.decision_bytes",
        )?;
        for (owner, [chains, bytes, records]) in self.0 {
            if [chains, bytes, records] != [0; 3] {
                q.execute(params![owner, chains, bytes, records])?;
            }
        }
        Ok(())
    }
}

impl Store {
    /// A user's totals (unfinished chains, the bytes their submissions and decision
    /// records take): one row, kept up to date by the writes that change them.
    pub fn user_totals(&self, owner_uid: u32) -> Result<UserTotals> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT open_chains, open_bytes, decision_bytes, rule_bytes FROM user_totals WHERE owner_uid = ?1",
            )?
            .query_row([owner_uid], |r| {
                Ok(UserTotals {
                    open_chains: r.get(0)?,
                    open_bytes: r.get(1)?,
                    decision_bytes: r.get(2)?,
                    rule_bytes: r.get(3)?,
                })
            })
            .optional()?
            .unwrap_or_default())
    }

    /// How many unfinished chains (active, ready, pending_failed) a user has.
    pub fn open_chains_of(&self, owner_uid: u32) -> Result<u64> {
        Ok(self.user_totals(owner_uid)?.open_chains)
    }

    /// Every user's totals as kept, and as computed from the rows now: equal unless
    /// something wrote the rows past the store's own writes (the store's tests check it
    /// after every case).
    pub fn recount_user_totals(&self) -> Result<UserTotalsCheck> {
        let read = |sql: &str| -> Result<Vec<(u32, UserTotals)>> {
            let mut q = self.conn.prepare(sql)?;
            let rows = q.query_map([], |r| {
                Ok((
                    r.get(0)?,
                    UserTotals {
                        open_chains: r.get(1)?,
                        open_bytes: r.get(2)?,
                        decision_bytes: r.get(3)?,
                        rule_bytes: r.get(4)?,
                    },
                ))
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        };
        Ok(UserTotalsCheck {
            kept: read(
                "SELECT owner_uid, open_chains, open_bytes, decision_bytes, rule_bytes FROM user_totals ORDER BY owner_uid",
            )?,
            counted: read(&recount_user_totals_sql())?,
        })
    }
}
