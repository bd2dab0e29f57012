//! Applying transitions: the store's one writer of chain states, attempt endings,
//! observations, decision records and notifications. A [`Batch`] of `policy::Transition`s
//! enters as [`Step`]s (the values their rows get), is checked step by step against the
//! rows ([`apply_in`]: the chain is still in the state it was decided from, ...), and is
//! journaled as one [`Op::Apply`].
//!
//! A batch is applied in one transaction, either each step on its own (a step whose
//! conditions do not hold is left out) or all or none (an array's resolution), with the
//! launch a refusal fails and the gates a settlement closes. It writes what the
//! transitions say and decides nothing: no notification kind, no clock, no state is
//! chosen in SQL.

use super::*;

/// Applies one transition in the caller's transaction, if its conditions hold (all read
/// before anything is written): the chain is still in the state it was decided from, a
/// reminder or expiry was not made before, a once-only report was not made before, and an
/// attempt that must be live still is. False, and nothing written, otherwise.
///
/// This is the one way a chain's state changes. A transition with a notification gets
/// its row here, in the transaction of the decision that asked for it: the notification
/// can be delivered late, or twice after a crash, but never lost.
pub(super) fn apply_in(
    tx: &Connection,
    chain_id: i64,
    t: &Step<'_>,
    now: i64,
    totals: &mut TotalsDelta,
) -> Result<bool> {
    let (state, reminded, expired, owner, submission): (String, bool, bool, u32, i64) = tx
        .prepare_cached(
            "SELECT state, reminded, expired,
                    COALESCE(owner_uid, (SELECT owner_uid FROM submissions WHERE id = submission_id)),
                    submission_id
             FROM chains WHERE id = ?1",
        )?
        .query_row([chain_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?;
    if parse_name::<ChainState>(&state)? != t.from {
        return Ok(false);
    }
    let clock_holds = match t.update.clock {
        Clock::Remind => !reminded && !expired,
        Clock::Expire => !expired,
        Clock::Clear | Clock::Start | Clock::Keep => true,
    };
    if !clock_holds {
        return Ok(false);
    }
    if let Some(job) = &t.report_once {
        let made: bool = tx
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM plain_waiters WHERE job_id = ?1 AND chain_id = ?2)",
            )?
            .query_row(params![job, chain_id], |r| r.get(0))?;
        if made {
            return Ok(false);
        }
    }
    let live = |n: u32| -> Result<bool> {
        Ok(tx
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM attempts WHERE chain_id = ?1 AND n = ?2 AND state = 'live')",
            )?
            .query_row(params![chain_id, n], |r| r.get(0))?)
    };
    let needs_live = match t.attempt.as_deref() {
        Some(AttemptChange::Ended(j)) => Some(j.n),
        Some(AttemptChange::Requeued { n, .. } | AttemptChange::Lost { n }) => Some(*n),
        _ => None,
    };
    if let Some(n) = needs_live {
        if !live(n)? {
            return Ok(false);
        }
    }
    // Now the writes.
    if let Some(job) = &t.report_once {
        tx.prepare_cached(
            "INSERT INTO plain_waiters (job_id, chain_id, noted_at) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![job, chain_id, now])?;
    }
    let observation = match t.attempt.as_deref() {
        Some(change) => change_attempt(tx, chain_id, change, now)?,
        None => None,
    };
    if let Some(d) = &t.record {
        let n = match t.attempt.as_deref().and_then(AttemptChange::attempt) {
            Some(n) => n,
            None => tx
                .prepare_cached(
                    "SELECT COALESCE((SELECT MAX(n) FROM attempts WHERE chain_id = ?1), 0)",
                )?
                .query_row([chain_id], |r| r.get(0))?,
        };
        insert_decision(tx, chain_id, n, observation, now, d)?;
    }
    let u = &t.update;
    let (since, reminded, expired) = match u.clock {
        Clock::Clear => ("NULL", "0", "0"),
        Clock::Start => ("?6", "0", "0"),
        Clock::Keep => ("pending_since", "reminded", "expired"),
        Clock::Remind => ("pending_since", "1", "expired"),
        Clock::Expire => ("pending_since", "reminded", "1"),
    };
    if u.changes_chain {
        tx.prepare_cached(&format!(
            "UPDATE chains SET state = ?2, last_classification = COALESCE(?3, last_classification),
                 plan = COALESCE(?4, plan), not_before = ?5, updated_at = ?6,
                 pending_since = {since}, reminded = {reminded}, expired = {expired}
             WHERE id = ?1"
        ))?
        .execute(params![
            chain_id,
            u.state.as_str(),
            u.last_classification.map(|c| c.as_str()),
            u.plan.as_ref().map(json),
            u.not_before,
            now
        ])?;
    } else if u.clock != Clock::Keep {
        // Only the clock's marks (a reminder queued); the wait's start stays.
        tx.prepare_cached(&format!(
            "UPDATE chains SET reminded = {reminded}, expired = {expired} WHERE id = ?1"
        ))?
        .execute([chain_id])?;
    }
    if let Some(n) = &t.notify {
        tx.prepare_cached(
            "INSERT INTO notifications (chain_id, kind, decision_id, created_at, next_try)
             VALUES (?1, ?2, CASE WHEN ?3 THEN (SELECT MAX(id) FROM decisions WHERE chain_id = ?1) END, ?4, ?4)",
        )?
        .execute(params![chain_id, n.kind.as_str(), n.names_decision, now])?;
    }
    let was_open = t.from.is_open();
    let is_open = if u.changes_chain {
        u.state.is_open()
    } else {
        was_open
    };
    let record = t
        .record
        .as_ref()
        .map_or(0, |d| (d.reason.len() + d.inputs.len()) as i64);
    match (was_open, is_open) {
        (true, true) => totals.add(owner, [0, 0, record]),
        (true, false) | (false, true) => {
            // The record just written counts with the chain's others when it opens, and
            // was never counted when it closes.
            let unseen = if is_open { 0 } else { record };
            totals.opened_or_closed(tx, owner, submission, chain_id, is_open, unseen)?
        }
        (false, false) => {}
    }
    Ok(true)
}

/// Writes an attempt's change (its conditions were checked); returns the observation
/// stored with it, if any.
pub(super) fn change_attempt(
    tx: &Connection,
    chain_id: i64,
    change: &AttemptChange,
    now: i64,
) -> Result<Option<i64>> {
    let observe = |n: u32, body: &serde_json::Value| -> Result<Option<i64>> {
        tx.prepare_cached(
            "INSERT INTO observations (chain_id, attempt_n, observed_at, body) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![chain_id, n, now, json(body)])?;
        Ok(Some(tx.last_insert_rowid()))
    };
    match change {
        AttemptChange::Ended(j) => {
            let e = &j.end;
            tx.prepare_cached(
                "UPDATE attempts SET state = 'ended', slurm_state = ?3, exit_code = ?4, nodes = ?5, mem = ?6, time_limit = ?7, ended_at = ?8,
                                     signature = ?9, signature_text = ?10
                 WHERE chain_id = ?1 AND n = ?2 AND state = 'live'",
            )?
            .execute(params![chain_id, j.n, e.slurm_state, e.exit_code, e.nodes, e.mem, e.time_limit, now, e.signature, e.signature_text])?;
            observe(j.n, &j.observation)
        }
        AttemptChange::Requeued { n, observation } => {
            tx.prepare_cached(
                "UPDATE attempts SET restarts = restarts + 1 WHERE chain_id = ?1 AND n = ?2 AND state = 'live'",
            )?
            .execute(params![chain_id, n])?;
            observe(*n, observation)
        }
        AttemptChange::Lost { n } => {
            tx.prepare_cached(
                "UPDATE attempts SET state = 'ended', slurm_state = 'LOST', ended_at = ?3 WHERE chain_id = ?1 AND n = ?2 AND state = 'live'",
            )?
            .execute(params![chain_id, n, now])?;
            Ok(None)
        }
        AttemptChange::Cancelled => {
            tx.prepare_cached(
                "UPDATE attempts SET state = 'ended', slurm_state = 'CANCELLED', ended_at = ?2 WHERE chain_id = ?1 AND state = 'live'",
            )?
            .execute(params![chain_id, now])?;
            Ok(None)
        }
        AttemptChange::NotSubmitted { n } => {
            tx.prepare_cached(
                "UPDATE attempts SET state = 'not_submitted', ended_at = ?3 WHERE chain_id = ?1 AND n = ?2",
            )?
            .execute(params![chain_id, n, now])?;
            Ok(None)
        }
        AttemptChange::Withdrawn { n } => {
            tx.prepare_cached(
                "DELETE FROM attempts WHERE chain_id = ?1 AND n = ?2 AND state = 'launching'",
            )?
            .execute(params![chain_id, n])?;
            Ok(None)
        }
    }
}

/// Applies a batch's steps (see [`Store::apply`]) in the caller's transaction. An
/// all-or-none batch that is not applied writes nothing (its own savepoint is rolled back).
pub(super) fn exec_apply<'s>(
    tx: &Connection,
    steps: impl IntoIterator<Item = (i64, &'s Step<'s>)>,
    all_or_none: bool,
    failed_launch: Option<(i64, &str)>,
    settled_gates: Option<(i64, bool)>,
    now: i64,
) -> Result<Applied> {
    if all_or_none {
        tx.execute_batch("SAVEPOINT all_or_none")?;
    }
    if let Some((launch, error)) = failed_launch {
        tx.execute(
            "UPDATE launches SET state = 'failed', error = ?2, finished_at = ?3 WHERE id = ?1 AND state = 'intent'",
            params![launch, error, now],
        )?;
    }
    let mut applied = Applied::default();
    let mut totals = TotalsDelta::default();
    for (chain, t) in steps {
        if apply_in(tx, chain, t, now, &mut totals)? {
            applied.chains.push(chain);
        } else if all_or_none {
            tx.execute_batch("ROLLBACK TO all_or_none; RELEASE all_or_none")?;
            return Ok(Applied {
                chains: Vec::new(),
                moved: Some(chain),
            });
        }
    }
    totals.write(tx)?;
    if let Some((submission, opened)) = settled_gates {
        tx.execute(
            "UPDATE waits_on SET gate = ?2 WHERE submission_id = ?1 AND gate = 'closed'",
            params![submission, if opened { "opened" } else { "never" }],
        )?;
    }
    if all_or_none {
        tx.execute_batch("RELEASE all_or_none")?;
    }
    Ok(applied)
}

/// Transitions to apply together, in one transaction ([`Store::apply`]).
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// Each chain with its transition, applied in order.
    pub steps: Vec<(i64, Transition)>,
    /// All or none: when one chain has moved on, nothing is applied and that chain is
    /// returned. Otherwise a step whose conditions do not hold is left out.
    pub all_or_none: bool,
    /// A launch that will not run: it fails with this error (if it is still an intent).
    pub failed_launch: Option<(i64, String)>,
    /// A submission whose closed gates are settled: opened (true) or never (false).
    pub settled_gates: Option<(i64, bool)>,
}

impl Batch {
    /// Each step applied if its conditions hold.
    pub fn each(steps: Vec<(i64, Transition)>) -> Batch {
        Batch {
            steps,
            ..Batch::default()
        }
    }

    /// All the steps, or none.
    pub fn all(steps: Vec<(i64, Transition)>) -> Batch {
        Batch {
            steps,
            all_or_none: true,
            ..Batch::default()
        }
    }

    /// One transition of one chain.
    pub fn one(chain: i64, t: Transition) -> Batch {
        Batch::each(vec![(chain, t)])
    }
}

/// What [`Store::apply`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The chains whose transitions were applied, in order.
    pub chains: Vec<i64>,
    /// For an all-or-none batch that was not applied: the first chain that had moved on.
    pub moved: Option<i64>,
}

impl Applied {
    /// Whether the (one) step was applied.
    pub fn any(&self) -> bool {
        !self.chains.is_empty()
    }
}

impl Store {
    /// Applies one chain's transition ([`Store::apply`] of a batch of one); true when its
    /// conditions held and it was applied.
    pub fn apply_one(&mut self, chain: i64, t: &Transition, now: i64) -> Result<bool> {
        Ok(self
            .apply_steps(vec![(chain, Step::of(t))], false, None, None, now)?
            .any())
    }

    /// Applies a batch of transitions in one transaction: the store's one writer of
    /// decisions, chain states, attempt endings, observations and notifications (see
    /// [`apply_in`] for each step's conditions), with the launch and gates they settle.
    pub fn apply(&mut self, batch: &Batch, now: i64) -> Result<Applied> {
        let steps = batch.steps.iter().map(|(c, t)| (*c, Step::of(t))).collect();
        let failed_launch = batch.failed_launch.as_ref().map(|(l, e)| (*l, e.as_str()));
        self.apply_steps(
            steps,
            batch.all_or_none,
            failed_launch,
            batch.settled_gates,
            now,
        )
    }

    pub(super) fn apply_steps(
        &mut self,
        steps: Vec<(i64, Step<'_>)>,
        all_or_none: bool,
        failed_launch: Option<(i64, &str)>,
        settled_gates: Option<(i64, bool)>,
        now: i64,
    ) -> Result<Applied> {
        self.write(
            |tx, _| {
                exec_apply(
                    tx,
                    steps.iter().map(|(c, t)| (*c, t)),
                    all_or_none,
                    failed_launch,
                    settled_gates,
                    now,
                )
            },
            |applied, p| {
                // An all-or-none batch not applied wrote nothing.
                if applied.moved.is_none() {
                    p.push(&Op::Apply {
                        steps: steps.iter().map(|(c, t)| (*c, t.borrowed())).collect(),
                        all_or_none,
                        failed_launch: failed_launch.map(|(l, e)| (l, Cow::Borrowed(e))),
                        settled_gates,
                        now,
                    })
                }
            },
        )
    }
}
