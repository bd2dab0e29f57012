//! Decisions about rule proposals (docs/rules.md, "Decisions about rules"): every
//! `rules accept` and `rules reject`, a record of its own that belongs to no chain. Never
//! edited: a later decision about the same proposal is a new row, and where a proposal
//! stands is read from its latest (`learn::standing`). A user's decision for their own
//! chains counts in their totals (`user_totals.rule_bytes`), and their acceptance keeps
//! the rule that then decides their endings.

use super::journal::Op;
use super::{from_json, json, Result, Store, StoreError};
use crate::domain::learn::{ProposedRule, RuleAction, RuleRecord};
use rusqlite::{params, Connection, Row};

/// What one row counts in its owner's `rule_bytes`, as SQL over `rule_decisions`' columns.
pub(super) const RULE_DECISION_BYTES: &str =
    "octet_length(reason) + COALESCE(octet_length(rule), 0)";

/// A new decision about a rule proposal, as [`Store::record_rule_decision`] takes it.
#[derive(Debug, Clone)]
pub struct NewRuleDecision<'a> {
    pub proposal: &'a str,
    /// `None`: for everyone (an admin's); a uid: that user's chains only.
    pub owner_uid: Option<u32>,
    pub action: RuleAction,
    pub actor: &'a str,
    pub actor_uid: u32,
    pub reason: &'a str,
    pub rule: Option<&'a ProposedRule>,
    pub at: i64,
}

/// Appends the row, and counts it in its owner's totals (in the caller's transaction; a
/// replica applies [`Op::RecordRuleDecision`] with it too). A record of no bytes (a
/// rejection without a reason) adds no row of zeros: the recount makes none, and the
/// trigger `user_totals_emptied` deletes one only on an update.
#[allow(clippy::too_many_arguments)]
pub(super) fn exec_record_rule_decision(
    tx: &Connection,
    proposal: &str,
    owner_uid: Option<u32>,
    action: &str,
    actor: &str,
    actor_uid: u32,
    reason: &str,
    rule: Option<&str>,
    at: i64,
) -> Result<i64> {
    tx.prepare_cached(
        "INSERT INTO rule_decisions (proposal, owner_uid, action, actor, actor_uid, reason, rule, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![proposal, owner_uid, action, actor, actor_uid, reason, rule, at])?;
    let id = tx.last_insert_rowid();
    tx.prepare_cached(&format!(
        "INSERT INTO user_totals (owner_uid, rule_bytes)
         SELECT owner_uid, {RULE_DECISION_BYTES} FROM rule_decisions
         WHERE id = ?1 AND owner_uid IS NOT NULL AND {RULE_DECISION_BYTES} > 0
         ON CONFLICT (owner_uid) DO UPDATE SET rule_bytes = rule_bytes + excluded.rule_bytes"
    ))?
    .execute([id])?;
    Ok(id)
}

const COLS: &str = "id, proposal, owner_uid, action, actor, actor_uid, reason, rule, at";

type RawRecord = (RuleRecord, String, Option<String>);

fn record_from(r: &Row) -> rusqlite::Result<RawRecord> {
    Ok((
        RuleRecord {
            id: r.get(0)?,
            proposal: r.get(1)?,
            owner_uid: r.get(2)?,
            scope: String::new(),
            action: RuleAction::Reject,
            actor: r.get(4)?,
            actor_uid: r.get(5)?,
            reason: r.get(6)?,
            rule: None,
            at: r.get(8)?,
        },
        r.get(3)?,
        r.get(7)?,
    ))
}

fn finish((mut d, action, rule): RawRecord) -> Result<RuleRecord> {
    d.action = RuleAction::parse(&action)
        .ok_or_else(|| StoreError::Corrupt(format!("rule decision action {action:?}")))?;
    d.rule = rule.as_deref().map(from_json).transpose()?;
    Ok(d)
}

impl Store {
    /// Records a decision about a rule proposal; its id. Every call writes a row: the
    /// caller writes nothing for a decision that would change nothing.
    pub fn record_rule_decision(&mut self, d: &NewRuleDecision) -> Result<i64> {
        let action = d.action.as_str();
        let rule = d.rule.map(json);
        self.write(
            |tx, _| {
                exec_record_rule_decision(
                    tx,
                    d.proposal,
                    d.owner_uid,
                    action,
                    d.actor,
                    d.actor_uid,
                    d.reason,
                    rule.as_deref(),
                    d.at,
                )
            },
            |_, p| {
                p.push(&Op::RecordRuleDecision {
                    proposal: d.proposal.into(),
                    owner_uid: d.owner_uid,
                    action: action.into(),
                    actor: d.actor.into(),
                    actor_uid: d.actor_uid,
                    reason: d.reason.into(),
                    rule: rule.as_deref().map(Into::into),
                    at: d.at,
                })
            },
        )
    }

    /// The decisions about rule proposals, oldest first: every one for `None`; for a
    /// user, those for everyone and those for their own chains.
    pub fn rule_decisions(&self, viewer: Option<u32>) -> Result<Vec<RuleRecord>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {COLS} FROM rule_decisions
             WHERE ?1 IS NULL OR owner_uid IS NULL OR owner_uid = ?1 ORDER BY id"
        ))?;
        let rows = q.query_map([viewer], record_from)?;
        rows.map(|r| finish(r?)).collect()
    }

    /// Everyone's decisions and those of `owners` for their own chains, oldest first, in
    /// one query (the judge's batch reads its owners' rules with it).
    pub fn rule_decisions_for(
        &self,
        owners: &std::collections::BTreeSet<u32>,
    ) -> Result<Vec<RuleRecord>> {
        let list = serde_json::to_string(owners).expect("a list of numbers");
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {COLS} FROM rule_decisions
             WHERE owner_uid IS NULL OR owner_uid IN (SELECT value FROM json_each(?1))
             ORDER BY id"
        ))?;
        let rows = q.query_map([list], record_from)?;
        rows.map(|r| finish(r?)).collect()
    }

    /// The decisions of `owner` for their own chains, oldest first (what
    /// `learn::accepted_by` reads their rules from).
    pub fn rule_decisions_of(&self, owner: u32) -> Result<Vec<RuleRecord>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {COLS} FROM rule_decisions WHERE owner_uid = ?1 ORDER BY id"
        ))?;
        let rows = q.query_map([owner], record_from)?;
        rows.map(|r| finish(r?)).collect()
    }

    /// Whether any user keeps a decision for their own chains (the judge reads users'
    /// rules only then).
    pub fn any_user_rule_decisions(&self) -> Result<bool> {
        Ok(self.conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM rule_decisions WHERE owner_uid IS NOT NULL)",
            [],
            |r| r.get(0),
        )?)
    }
}
