//! Decision records: how a record's row is written (by `apply`, the one writer of
//! decisions) and read back ([`decision_from`]), with the observations stored beside them,
//! and the counts the breaker, quarantine and metrics read.

use super::*;

/// A decision record as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionRecord {
    pub id: i64,
    pub chain_id: i64,
    pub attempt_n: u32,
    pub observation_id: Option<i64>,
    pub at: i64,
    pub classification: Classification,
    pub class: RecoveryClass,
    pub action: Action,
    pub reason: String,
    /// The reason's stable name ([`crate::domain::policy::Reason::code`]); `None` for records
    /// written before it was stored.
    pub reason_code: Option<String>,
    pub inputs: serde_json::Value,
    pub resolves: Option<i64>,
    pub actor: String,
}

pub(super) const DECISION_COLS: &str = "id, chain_id, attempt_n, observation_id, at, classification, class, action, reason, inputs, resolves, actor, reason_code";

pub(super) type RawDecision = (DecisionRecord, String, String, String, String);

pub(super) fn decision_from(row: &Row) -> rusqlite::Result<RawDecision> {
    Ok((
        DecisionRecord {
            id: row.get(0)?,
            chain_id: row.get(1)?,
            attempt_n: row.get(2)?,
            observation_id: row.get(3)?,
            at: row.get(4)?,
            classification: Classification::Ambiguous,
            class: RecoveryClass::R2,
            action: Action::None,
            reason: row.get(8)?,
            inputs: serde_json::Value::Null,
            resolves: row.get(10)?,
            actor: row.get(11)?,
            reason_code: row.get(12)?,
        },
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(9)?,
    ))
}

pub(super) fn finish_decision(raw: RawDecision) -> Result<DecisionRecord> {
    let (mut d, c, class, action, inputs) = raw;
    d.classification = parse_name(&c)?;
    d.class = parse_name(&class)?;
    d.action = parse_name(&action)?;
    d.inputs = from_json(&inputs)?;
    Ok(d)
}

/// Appends a decision record. The facts later queries need (the reason's name, whether
/// it is an infrastructure failure, the failed nodes) are columns, written here with it.
/// A resolution points at the chain's latest decision, read in the same transaction.
pub(super) fn insert_decision(
    tx: &Connection,
    chain_id: i64,
    n: u32,
    obs: Option<i64>,
    at: i64,
    d: &WrittenRecord,
) -> Result<i64> {
    tx.execute(
        "INSERT INTO decisions (chain_id, attempt_n, observation_id, at, classification, class, action, reason, inputs, resolves, actor,
                                reason_code, infra_failure, failed_nodes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,
                 CASE WHEN ?10 THEN (SELECT MAX(id) FROM decisions WHERE chain_id = ?1) END,
                 ?11, ?12, ?13, ?14)",
        params![
            chain_id,
            n,
            obs,
            at,
            d.classification.as_str(),
            d.class.as_str(),
            d.action.as_str(),
            d.reason,
            d.inputs,
            d.resolves_latest,
            d.actor,
            d.reason_code,
            d.infra_failure,
            d.failed_nodes,
        ],
    )?;
    Ok(tx.last_insert_rowid())
}

impl Store {
    pub fn decisions(&self, chain_id: i64) -> Result<Vec<DecisionRecord>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {DECISION_COLS} FROM decisions WHERE chain_id = ?1 ORDER BY id"
        ))?;
        let rows = q.query_map([chain_id], decision_from)?;
        rows.map(|r| finish_decision(r?)).collect()
    }

    /// The observations of a chain as stored (JSON), oldest first.
    pub fn observations(&self, chain_id: i64) -> Result<Vec<(i64, u32, i64, serde_json::Value)>> {
        let mut q = self.conn.prepare_cached("SELECT id, attempt_n, observed_at, body FROM observations WHERE chain_id = ?1 ORDER BY id")?;
        let rows = q.query_map([chain_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get::<_, String>(3)?))
        })?;
        rows.map(|r| {
            let (id, n, at, body) = r?;
            Ok((id, n, at, from_json(&body)?))
        })
        .collect()
    }

    /// Counts of resubmissions (automatic or agent-ordered) by the classification that caused them.
    pub fn resubmits_by_class(&self, chain_id: i64) -> Result<Vec<(String, u32)>> {
        let mut q = self.conn.prepare_cached(
            "SELECT classification, COUNT(*) FROM decisions WHERE chain_id = ?1 AND action = 'resubmit' GROUP BY classification",
        )?;
        let rows = q.query_map([chain_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// How many infrastructure failures (node_fail, boot_fail, transient endings) the
    /// supervisor recorded across all chains since `since`.
    pub fn infra_failures_since(&self, since: i64) -> Result<u32> {
        Ok(self.conn.query_row(
            "SELECT COUNT(*) FROM decisions WHERE at >= ?1 AND infra_failure = 1",
            [since],
            |r| r.get(0),
        )?)
    }

    /// Infrastructure failures since `since`, counted per owner of the chain (what the
    /// breaker weighs: `policy::breaker_failures`).
    pub fn infra_failures_by_owner_since(&self, since: i64) -> Result<Vec<(u32, u32)>> {
        let mut q = self.conn.prepare_cached(
            "SELECT s.owner_uid, COUNT(*) FROM decisions d JOIN chains c ON c.id = d.chain_id \
             JOIN submissions s ON s.id = c.submission_id \
             WHERE d.at >= ?1 AND d.infra_failure = 1 GROUP BY s.owner_uid",
        )?;
        let rows = q.query_map([since], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The nodes of node_fail/boot_fail endings since `since`, with when they were recorded.
    pub fn node_failures_since(&self, since: i64) -> Result<Vec<(String, i64)>> {
        let mut q = self.conn.prepare_cached(
            "SELECT failed_nodes, at FROM decisions WHERE at >= ?1 AND failed_nodes IS NOT NULL",
        )?;
        let rows = q.query_map([since], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Decision counts by chain, actor kind (`supervisor` or not) and action.
    pub fn decision_counts(&self) -> Result<Vec<(i64, bool, Action, u32)>> {
        let mut q = self.conn.prepare_cached(
            "SELECT chain_id, actor = 'supervisor', action, COUNT(*) FROM decisions GROUP BY chain_id, actor = 'supervisor', action ORDER BY chain_id",
        )?;
        let rows = q.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, bool>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, u32>(3)?,
            ))
        })?;
        rows.map(|r| {
            let (c, sup, a, n) = r?;
            Ok((c, sup, parse_name(&a)?, n))
        })
        .collect()
    }

    /// One decision record by its id.
    pub fn decision(&self, id: i64) -> Result<Option<DecisionRecord>> {
        let raw = self
            .conn
            .query_row(
                &format!("SELECT {DECISION_COLS} FROM decisions WHERE id = ?1"),
                [id],
                decision_from,
            )
            .optional()?;
        raw.map(finish_decision).transpose()
    }

    /// The latest decision of a chain, if any.
    /// The latest decision of a chain, if any. A note that an in-place requeue was refused
    /// (`in_place_refused`) only says how the decision before it is carried out, so it is
    /// passed over: an agent's retry stays the agent's.
    pub fn last_decision(&self, chain_id: i64) -> Result<Option<DecisionRecord>> {
        let raw = self
            .conn
            .query_row(
                &format!("SELECT {DECISION_COLS} FROM decisions WHERE chain_id = ?1 AND reason_code IS NOT 'in_place_refused' ORDER BY id DESC LIMIT 1"),
                [chain_id],
                decision_from,
            )
            .optional()?;
        raw.map(finish_decision).transpose()
    }

    /// The chain's latest decision with one of the reason codes `codes`
    /// ([`crate::domain::policy::Reason::code`]), e.g. its latest continuation: one query.
    pub fn last_decision_coded(
        &self,
        chain_id: i64,
        codes: &[&str],
    ) -> Result<Option<DecisionRecord>> {
        let marks = vec!["?"; codes.len()].join(", ");
        let mut args: Vec<&dyn rusqlite::ToSql> = vec![&chain_id];
        args.extend(codes.iter().map(|c| c as &dyn rusqlite::ToSql));
        let raw = self
            .conn
            .prepare_cached(&format!(
                "SELECT {DECISION_COLS} FROM decisions WHERE chain_id = ? AND reason_code IN ({marks}) ORDER BY id DESC LIMIT 1"
            ))?
            .query_row(args.as_slice(), decision_from)
            .optional()?;
        raw.map(finish_decision).transpose()
    }

    /// How many times the chain was continued (docs/continuation.md).
    pub fn continuations(&self, chain_id: i64) -> Result<u32> {
        Ok(self.conn.query_row(
            "SELECT COUNT(*) FROM decisions WHERE chain_id = ?1 AND action = 'continue'",
            [chain_id],
            |r| r.get(0),
        )?)
    }
}
