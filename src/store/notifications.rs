//! Notifications: the rows a transition queues for a chain's submitter (written by
//! `apply`, in the decision's transaction), read when due, fairly across owners, and
//! marked sent, failed or mailed by the delivery (`daemon::notifications`); and the
//! waiting chains a reminder or an expiry is due for.

use super::*;

pub(super) fn exec_notifications_sent(
    tx: &Connection,
    items: &[(i64, (bool, bool))],
    now: i64,
) -> Result<()> {
    let mut q = tx.prepare_cached(
        "UPDATE notifications SET sent_at = ?2,
             mail_done = MAX(mail_done, ?3), command_done = MAX(command_done, ?4)
         WHERE id = ?1 AND sent_at IS NULL",
    )?;
    for (id, done) in items {
        q.execute(params![id, now, done.0, done.1])?;
    }
    Ok(())
}

pub(super) fn exec_notification_failed(
    tx: &Connection,
    id: i64,
    done: (bool, bool),
    error: &str,
    next_try: Option<i64>,
    now: i64,
) -> Result<()> {
    tx.execute(
        "UPDATE notifications SET tries = tries + 1, error = ?2,
             next_try = COALESCE(?3, next_try),
             gave_up_at = CASE WHEN ?3 IS NULL THEN ?4 END,
             mail_done = MAX(mail_done, ?5), command_done = MAX(command_done, ?6)
         WHERE id = ?1 AND sent_at IS NULL",
        params![id, error, next_try, now, done.0, done.1],
    )?;
    Ok(())
}

pub(super) fn exec_notification_mailed(tx: &Connection, id: i64) -> Result<()> {
    tx.execute(
        "UPDATE notifications SET mail_done = 1 WHERE id = ?1 AND sent_at IS NULL",
        params![id],
    )?;
    Ok(())
}

/// A notification waiting in the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub id: i64,
    pub chain_id: i64,
    /// `pending_failed`, `completed`, `failed`, `reminder`, `expired` or
    /// `dependency_never_satisfied` (`notification::Kind`).
    pub kind: String,
    pub decision_id: Option<i64>,
    pub created_at: i64,
    /// Failed deliveries so far.
    pub tries: u32,
    /// Its mail went out already (a retry for the command does not mail again).
    pub mail_done: bool,
    /// `notify.command` took it already.
    pub command_done: bool,
}

/// A `pending_failed` chain and when it entered that state.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub chain: Chain,
    pub pending_since: i64,
}

impl Store {
    /// Notifications due at `now`, oldest first, at most `limit`.
    pub fn due_notifications(&self, now: i64, limit: usize) -> Result<Vec<Notification>> {
        self.due_notifications_fair(now, limit, limit)
    }

    /// Due notifications, oldest first, at most `per_owner` of any one owner's chains: a
    /// user with thousands due does not fill the page ahead of everyone else's.
    pub fn due_notifications_fair(
        &self,
        now: i64,
        limit: usize,
        per_owner: usize,
    ) -> Result<Vec<Notification>> {
        let mut q = self.conn.prepare_cached(
            "SELECT id, chain_id, kind, decision_id, created_at, tries, mail_done, command_done FROM (
                 SELECT n.*, ROW_NUMBER() OVER (PARTITION BY c.owner_uid ORDER BY n.next_try, n.id) AS k
                 FROM notifications n JOIN chains c ON c.id = n.chain_id
                 WHERE n.sent_at IS NULL AND n.gave_up_at IS NULL AND n.next_try <= ?1)
             WHERE k <= ?3
             ORDER BY next_try, id LIMIT ?2",
        )?;
        let rows = q.query_map(params![now, limit as i64, per_owner as i64], |r| {
            Ok(Notification {
                id: r.get(0)?,
                chain_id: r.get(1)?,
                kind: r.get(2)?,
                decision_id: r.get(3)?,
                created_at: r.get(4)?,
                tries: r.get(5)?,
                mail_done: r.get(6)?,
                command_done: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// A notification was delivered (or had nothing to deliver): `done` says whether a
    /// mail and the command took it.
    pub fn notification_sent(&mut self, id: i64, done: (bool, bool), now: i64) -> Result<()> {
        self.notifications_sent(&[(id, done)], now)
    }

    /// Several notifications delivered, in one transaction (one sync to disk).
    pub fn notifications_sent(&mut self, items: &[(i64, (bool, bool))], now: i64) -> Result<()> {
        self.write(
            |tx, _| exec_notifications_sent(tx, items, now),
            |_, p| {
                p.push(&Op::NotificationsSent {
                    items: Cow::Borrowed(items),
                    now,
                })
            },
        )
    }

    /// A delivery failed: what did go out (`mail_done`, `command_done`) is kept, the rest
    /// is tried again from `next_try`, or (`next_try` `None`) given up.
    pub fn notification_failed(
        &mut self,
        id: i64,
        done: (bool, bool),
        error: &str,
        next_try: Option<i64>,
        now: i64,
    ) -> Result<()> {
        self.write(
            |tx, _| exec_notification_failed(tx, id, done, error, next_try, now),
            |_, p| {
                p.push(&Op::NotificationFailed {
                    id,
                    done,
                    error: Cow::Borrowed(error),
                    next_try,
                    now,
                })
            },
        )
    }

    /// A notification whose mail went out and whose command was not run yet (its owner's
    /// turn ran out of time): it stays due, no try counted.
    pub fn notification_mailed(&mut self, id: i64) -> Result<()> {
        self.write(
            |tx, _| exec_notification_mailed(tx, id),
            |_, p| p.push(&Op::NotificationMailed { id }),
        )
    }

    /// Chains in `pending_failed` since `cutoff` or before, not reminded and not expired:
    /// an indexed read of the waiting chains only.
    pub fn chains_to_remind(&self, cutoff: i64) -> Result<Vec<i64>> {
        let mut q = self.conn.prepare_cached(
            "SELECT id FROM chains WHERE state = 'pending_failed' AND pending_since <= ?1
               AND reminded = 0 AND expired = 0 ORDER BY pending_since",
        )?;
        let rows = q.query_map([cutoff], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Chains in `pending_failed` since `cutoff` or before that no expiry resolved yet.
    pub fn chains_to_expire(&self, cutoff: i64) -> Result<Vec<Waiting>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {CHAIN_COLS}, pending_since FROM chains WHERE state = 'pending_failed'
               AND pending_since <= ?1 AND expired = 0 ORDER BY pending_since"
        ))?;
        let rows = q.query_map([cutoff], |r| Ok((chain_from(r)?, r.get::<_, i64>(9)?)))?;
        rows.map(|r| {
            let (raw, pending_since) = r?;
            Ok(Waiting {
                chain: finish_chain(raw)?,
                pending_since,
            })
        })
        .collect()
    }
}
