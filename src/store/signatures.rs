//! Failure signatures (docs/rules.md): the resolutions of endings that had one, as rule
//! proposals (`crate::domain::learn`) are made from, and how many endings had each. Read only:
//! the signature is written with its attempt's ending (`apply.rs`).

use super::*;

/// One resolution by someone other than the supervisor of an ending with a signature,
/// with what came of it: the resolved attempt's signature and ending, and the attempt
/// after it (the retry, if one was made).
#[derive(Debug, Clone, PartialEq)]
pub struct SignatureResolution {
    pub signature: String,
    pub signature_text: String,
    pub slurm_state: String,
    pub exit_code: String,
    /// The resolution's decision record.
    pub decision_id: i64,
    pub chain_id: i64,
    pub owner_uid: u32,
    /// The attempt whose ending it resolved.
    pub attempt_n: u32,
    pub at: i64,
    pub actor: String,
    pub action: Action,
    pub inputs: serde_json::Value,
    /// The next attempt's state and Slurm state (`None` when there is none yet), and the
    /// chain's state now.
    pub next_state: Option<String>,
    pub next_slurm_state: Option<String>,
    pub chain_state: ChainState,
}

/// An automatic retry a rule gave, and what came of it (as [`SignatureResolution`]'s).
#[derive(Debug, Clone, PartialEq)]
pub struct RuleRetry {
    /// The retry's decision record, its chain, and the attempt whose ending it retried.
    pub decision_id: i64,
    pub chain_id: i64,
    pub attempt_n: u32,
    pub rule: String,
    /// The rule's owner when a user's own rule gave it (`verdict.rule_owner_uid`);
    /// `None` for the config's and `rules.d/`'s.
    pub rule_owner: Option<u32>,
    pub next_state: Option<String>,
    pub next_slurm_state: Option<String>,
    pub chain_state: ChainState,
}

impl SignatureResolution {
    /// As `learn` reads it.
    pub fn facts(&self) -> crate::domain::learn::ResolutionFacts<'_> {
        crate::domain::learn::ResolutionFacts {
            signature: &self.signature,
            signature_text: &self.signature_text,
            slurm_state: &self.slurm_state,
            exit_code: &self.exit_code,
            decision: self.decision_id,
            chain: self.chain_id,
            attempt: self.attempt_n,
            at: self.at,
            actor: &self.actor,
            action: self.action,
            inputs: &self.inputs,
            next_state: self.next_state.as_deref(),
            next_slurm_state: self.next_slurm_state.as_deref(),
            chain_state: self.chain_state,
        }
    }
}

impl RuleRetry {
    /// The rule's name and owner and how the retry went, as `learn::tally` reads it.
    pub fn outcome(&self) -> (&str, Option<u32>, crate::domain::learn::Outcome) {
        (
            &self.rule,
            self.rule_owner,
            crate::domain::learn::outcome(
                self.next_state.as_deref(),
                self.next_slurm_state.as_deref(),
                self.chain_state,
            ),
        )
    }
}

impl Store {
    /// Every resubmit or fail by a person or agent (`user:<name>`) that resolved an ending
    /// with a signature, oldest first; only `owner`'s chains when given.
    pub fn signature_resolutions(&self, owner: Option<u32>) -> Result<Vec<SignatureResolution>> {
        self.signature_resolutions_between(owner, 0, i64::MAX)
    }

    /// As [`Store::signature_resolutions`], of the resolutions among the decision records
    /// with `after < id <= upto` (the metrics read only those written since their last
    /// scrape).
    pub fn signature_resolutions_between(
        &self,
        owner: Option<u32>,
        after: i64,
        upto: i64,
    ) -> Result<Vec<SignatureResolution>> {
        let mut q = self.conn.prepare_cached(&by_id_range(
            (after, upto),
            "SELECT a.signature, COALESCE(a.signature_text, ''), COALESCE(a.slurm_state, ''), COALESCE(a.exit_code, ''),
                    r.id, r.chain_id, s.owner_uid, d.attempt_n, r.at, r.actor, r.action, r.inputs,
                    nx.state, nx.slurm_state, c.state
             FROM decisions r
             JOIN decisions d ON d.id = r.resolves
             JOIN attempts a ON a.chain_id = d.chain_id AND a.n = d.attempt_n
             JOIN chains c ON c.id = r.chain_id
             JOIN submissions s ON s.id = c.submission_id
             LEFT JOIN attempts nx ON nx.chain_id = r.chain_id AND nx.n = d.attempt_n + 1
             WHERE r.resolves IS NOT NULL AND r.actor LIKE 'user:%' AND r.action IN ('resubmit', 'fail')
               AND a.signature IS NOT NULL AND (?1 IS NULL OR s.owner_uid = ?1)
               AND {id} > ?2 AND {id} <= ?3
             ORDER BY r.id",
            "r.id",
        ))?;
        let rows = q.query_map(params![owner, after, upto], |r| {
            Ok((
                SignatureResolution {
                    signature: r.get(0)?,
                    signature_text: r.get(1)?,
                    slurm_state: r.get(2)?,
                    exit_code: r.get(3)?,
                    decision_id: r.get(4)?,
                    chain_id: r.get(5)?,
                    owner_uid: r.get(6)?,
                    attempt_n: r.get(7)?,
                    at: r.get(8)?,
                    actor: r.get(9)?,
                    action: Action::None,
                    inputs: serde_json::Value::Null,
                    next_state: r.get(12)?,
                    next_slurm_state: r.get(13)?,
                    chain_state: ChainState::Active,
                },
                r.get::<_, String>(10)?,
                r.get::<_, String>(11)?,
                r.get::<_, String>(14)?,
            ))
        })?;
        rows.map(|row| {
            let (mut s, action, inputs, state) = row?;
            s.action = parse_name(&action)?;
            s.inputs = from_json(&inputs)?;
            s.chain_state = parse_name(&state)?;
            Ok(s)
        })
        .collect()
    }

    /// How many ended attempts had `signature` (of `owner`'s chains when given).
    pub fn signature_endings(&self, signature: &str, owner: Option<u32>) -> Result<u32> {
        Ok(self.conn.query_row(
            "SELECT COUNT(*) FROM attempts a JOIN chains c ON c.id = a.chain_id
             JOIN submissions s ON s.id = c.submission_id
             WHERE a.signature = ?1 AND (?2 IS NULL OR s.owner_uid = ?2)",
            params![signature, owner],
            |r| r.get(0),
        )?)
    }

    /// Every automatic retry a `[[rules]]` entry gave (`transient`, by the supervisor):
    /// the rule's name and its owner for a user's own rule, and, as for [`SignatureResolution`], the next attempt's state and
    /// Slurm state and the chain's state; only `owner`'s chains when given.
    pub fn rule_retries(&self, owner: Option<u32>) -> Result<Vec<RuleRetry>> {
        self.rule_retries_between(owner, 0, i64::MAX)
    }

    /// As [`Store::rule_retries`], of the decision records with `after < id <= upto`.
    pub fn rule_retries_between(
        &self,
        owner: Option<u32>,
        after: i64,
        upto: i64,
    ) -> Result<Vec<RuleRetry>> {
        let mut q = self.conn.prepare_cached(&by_id_range(
            (after, upto),
            "SELECT json_extract(d.inputs, '$.verdict.rule'), nx.state, nx.slurm_state, c.state,
                    d.id, d.chain_id, d.attempt_n,
                    json_extract(d.inputs, '$.verdict.rule_owner_uid')
             FROM decisions d
             JOIN chains c ON c.id = d.chain_id
             JOIN submissions s ON s.id = c.submission_id
             LEFT JOIN attempts nx ON nx.chain_id = d.chain_id AND nx.n = d.attempt_n + 1
             WHERE d.infra_failure = 1 AND d.actor = 'supervisor' AND d.action = 'resubmit'
               AND d.classification = 'transient' AND (?1 IS NULL OR s.owner_uid = ?1)
               AND {id} > ?2 AND {id} <= ?3",
            "d.id",
        ))?;
        let rows = q.query_map(params![owner, after, upto], |r| {
            Ok((
                r.get::<_, Option<String>>(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get::<_, String>(3)?,
                (r.get(4)?, r.get(5)?, r.get(6)?),
                r.get::<_, Option<u32>>(7)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (rule, next, next_slurm, state, (decision_id, chain_id, attempt_n), rule_owner) =
                row?;
            if let Some(rule) = rule {
                out.push(RuleRetry {
                    decision_id,
                    chain_id,
                    attempt_n,
                    rule,
                    rule_owner,
                    next_state: next,
                    next_slurm_state: next_slurm,
                    chain_state: parse_name(&state)?,
                });
            }
        }
        Ok(out)
    }
}

/// `sql` with its decision id range (`{id}`) as `id`, for a range of the decision records
/// written since a point; for every record (`range` from 0), as `+id`, which keeps SQLite
/// from walking the whole table by its rowid (each row read past its inputs) instead of
/// using the query's partial index.
fn by_id_range(range: (i64, i64), sql: &str, id: &str) -> String {
    if range == (0, i64::MAX) {
        sql.replace("{id}", &format!("+{id}"))
    } else {
        sql.replace("{id}", id)
    }
}
