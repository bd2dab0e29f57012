//! Read-only counts for the Prometheus endpoint (`crate::metrics`). Each is either an
//! indexed query or reads only decision records it has not read before (decisions are
//! append-only, so a total once counted never changes).

use super::{parse_name, Result, Store};
use crate::domain::model::{Action, ActorKind, ChainState, Classification, RecoveryClass};

/// How many decision records share these facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionTally {
    pub classification: Classification,
    pub class: RecoveryClass,
    pub action: Action,
    /// Who made them.
    pub actor: ActorKind,
    /// Made about an ending Slurm reported (the record points at an observation).
    pub observed: bool,
    /// A `[[rules]]` entry decided the ending by itself: the supervisor retried it
    /// (`transient`) or failed it (`permanent`) because the rule its verdict names matched.
    pub by_rule: bool,
    pub count: u64,
}

/// How a retry is going: its attempt's state and Slurm state (`None` while there is no
/// attempt yet) and its chain's state now (`learn::outcome` reads these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryProgress {
    pub next_state: Option<String>,
    pub next_slurm_state: Option<String>,
    pub chain_state: ChainState,
}

impl Store {
    /// Runs `f` inside one read transaction, so every query it makes sees the same
    /// moment of the store.
    pub fn read_snapshot<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        let tx = self.conn.unchecked_transaction()?;
        let out = f(self)?;
        tx.commit()?;
        Ok(out)
    }

    /// How many chains are in each state (only the states that have any). Counted on
    /// the `chains_by_state` index, without reading the chains.
    pub fn chain_counts_by_state(&self) -> Result<Vec<(ChainState, u64)>> {
        let mut q = self
            .conn
            .prepare_cached("SELECT state, COUNT(*) FROM chains GROUP BY state")?;
        let rows = q.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?)))?;
        rows.map(|r| {
            let (s, n) = r?;
            Ok((parse_name(&s)?, n))
        })
        .collect()
    }

    /// When the chain that entered `pending_failed` first, of those in it now, entered
    /// it (`None` when none is in it). The minimum of the `chains_pending_since` partial
    /// index: one index lookup.
    pub fn oldest_pending_since(&self) -> Result<Option<i64>> {
        Ok(self
            .conn
            .prepare_cached("SELECT MIN(pending_since) FROM chains WHERE state = 'pending_failed'")?
            .query_row([], |r| r.get(0))?)
    }

    /// The id of the newest decision record, 0 when there is none (a rowid lookup).
    pub fn last_decision_id(&self) -> Result<i64> {
        Ok(self
            .conn
            .prepare_cached("SELECT COALESCE(MAX(id), 0) FROM decisions")?
            .query_row([], |r| r.get(0))?)
    }

    /// The wall time (seconds) of the attempts continued by decision records with
    /// `after < id <= upto` (docs/continuation.md): each `continue` record's ended
    /// attempt's elapsed time, from its inputs.
    pub fn continued_secs(&self, after: i64, upto: i64) -> Result<u64> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT COALESCE(SUM(json_extract(inputs, '$.verdict.elapsed_secs')), 0)
                 FROM decisions WHERE id > ?1 AND id <= ?2 AND action = 'continue'",
            )?
            .query_row([after, upto], |r| r.get::<_, i64>(0))?
            .max(0) as u64)
    }

    /// Decision records with `after < id <= upto`, counted by their facts. A range of
    /// the rowid: the cost is that of the records in it (the first call, from 0, reads
    /// every record once). Whether a rule decided is read from the record's verdict (its
    /// inputs) only for the supervisor's retries and fails of the kinds a rule gives.
    pub fn decision_tallies(&self, after: i64, upto: i64) -> Result<Vec<DecisionTally>> {
        let mut q = self.conn.prepare_cached(
            "SELECT classification, class, action,
                    CASE WHEN actor LIKE 'user:%' THEN 'user' ELSE actor END,
                    observation_id IS NOT NULL,
                    CASE WHEN actor = 'supervisor' AND observation_id IS NOT NULL
                              AND action IN ('resubmit', 'fail')
                              AND classification IN ('transient', 'permanent')
                         THEN json_extract(inputs, '$.verdict.rule') IS NOT NULL
                         ELSE 0 END,
                    COUNT(*)
             FROM decisions WHERE id > ?1 AND id <= ?2 GROUP BY 1, 2, 3, 4, 5, 6",
        )?;
        let rows = q.query_map([after, upto], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, bool>(4)?,
                r.get::<_, bool>(5)?,
                r.get::<_, u64>(6)?,
            ))
        })?;
        rows.map(|r| {
            let (classification, class, action, actor, observed, by_rule, count) = r?;
            Ok(DecisionTally {
                classification: parse_name(&classification)?,
                class: parse_name(&class)?,
                action: parse_name(&action)?,
                actor: parse_name(&actor)?,
                observed,
                by_rule,
                count,
            })
        })
        .collect()
    }

    /// The chains an agent or a person resubmitted (a `resubmit` decision whose actor is
    /// not the supervisor) among the decision records with `after < id <= upto`.
    pub fn chains_resubmitted_by_resolution(&self, after: i64, upto: i64) -> Result<Vec<i64>> {
        let mut q = self.conn.prepare_cached(
            "SELECT DISTINCT chain_id FROM decisions
             WHERE id > ?1 AND id <= ?2 AND actor <> 'supervisor' AND action = 'resubmit'",
        )?;
        let rows = q.query_map([after, upto], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// For each `(chain, n)` of `keys`, in order: attempt `n`'s state and Slurm state
    /// (`None` while there is none) and the chain's state now: how a retry is going, for
    /// the retries the metrics keep from one scrape to the next whose attempt had not
    /// ended (two key lookups each).
    pub fn retry_progress(&self, keys: &[(i64, u32)]) -> Result<Vec<RetryProgress>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let keys_json = serde_json::to_string(keys).expect("keys serialize");
        let mut q = self.conn.prepare_cached(
            "SELECT CAST(j.key AS INTEGER), nx.state, nx.slurm_state, c.state
             FROM json_each(?1) j
             JOIN chains c ON c.id = json_extract(j.value, '$[0]')
             LEFT JOIN attempts nx ON nx.chain_id = c.id AND nx.n = json_extract(j.value, '$[1]')
             ORDER BY 1",
        )?;
        let rows = q.query_map([keys_json], |r| {
            Ok((
                r.get::<_, usize>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        let mut out = Vec::with_capacity(keys.len());
        for row in rows {
            let (i, next_state, next_slurm_state, state) = row?;
            // A chain is never deleted: each key finds its row, in order.
            if i != out.len() {
                break;
            }
            out.push(RetryProgress {
                next_state,
                next_slurm_state,
                chain_state: parse_name(&state)?,
            });
        }
        match keys.get(out.len()) {
            None => Ok(out),
            Some((chain, _)) => Err(super::StoreError::Corrupt(format!(
                "no chain {chain} for a retry the metrics keep"
            ))),
        }
    }

    /// How many of the chains `ids` are in each state (one rowid lookup per id).
    pub fn chain_counts_by_state_of(&self, ids: &[i64]) -> Result<Vec<(ChainState, u64)>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids = serde_json::to_string(ids).expect("ids serialize");
        let mut q = self.conn.prepare_cached(
            "SELECT state, COUNT(*) FROM chains WHERE id IN (SELECT value FROM json_each(?1)) GROUP BY state",
        )?;
        let rows = q.query_map([ids], |r| Ok((r.get::<_, String>(0)?, r.get::<_, u64>(1)?)))?;
        rows.map(|r| {
            let (s, n) = r?;
            Ok((parse_name(&s)?, n))
        })
        .collect()
    }
}
