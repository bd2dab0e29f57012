//! Chains: one array task's (or plain job's) succession of attempts, read whole
//! ([`chain_from`]), page by page with their current attempt for `status`
//! ([`Store::each_chain_summary`]), by state, and by a user-given id
//! ([`Store::resolve`]). A chain's state changes only by `apply`.

use super::*;

/// Chains read per page by [`Store::each_chain_summary`].
pub(super) const SUMMARY_PAGE: usize = 1000;

/// A chain with what `status` shows of its current attempt, read in one query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainSummary {
    pub chain: Chain,
    /// The newest attempt that reached Slurm: its job id, and its last known Slurm state
    /// (what sacct said it ended as, else what squeue last showed).
    pub slurm_job_id: Option<String>,
    pub slurm_state: Option<String>,
    /// Attempts that reached Slurm.
    pub submitted: u32,
    /// Its continuations (decisions `continue`).
    pub continuations: u32,
}

pub(super) const CHAIN_COLS: &str = "id, submission_id, array_task, state, last_classification, plan, not_before, created_at, updated_at";

pub(super) fn chain_from(row: &Row) -> rusqlite::Result<(Chain, String, Option<String>, String)> {
    Ok((
        Chain {
            id: row.get(0)?,
            submission_id: row.get(1)?,
            array_task: row.get(2)?,
            state: ChainState::Active,
            last_classification: None,
            plan: RetryPlan::default(),
            not_before: row.get(6)?,
            created_at: row.get(7)?,
            updated_at: row.get(8)?,
        },
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
    ))
}

pub(super) fn finish_chain(raw: (Chain, String, Option<String>, String)) -> Result<Chain> {
    let (mut c, state, lc, plan) = raw;
    c.state = parse_name(&state)?;
    c.last_classification = lc.as_deref().map(parse_name).transpose()?;
    c.plan = from_json(&plan)?;
    Ok(c)
}

impl Store {
    pub fn chain(&self, id: i64) -> Result<Option<Chain>> {
        let raw = self
            .conn
            .query_row(
                &format!("SELECT {CHAIN_COLS} FROM chains WHERE id = ?1"),
                [id],
                chain_from,
            )
            .optional()?;
        raw.map(finish_chain).transpose()
    }

    /// Chains, newest first; `owner` limits them to one uid.
    pub fn chains(&self, owner: Option<u32>) -> Result<Vec<Chain>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {CHAIN_COLS} FROM chains WHERE ?1 IS NULL OR submission_id IN (SELECT id FROM submissions WHERE owner_uid = ?1) ORDER BY id"
        ))?;
        let rows = q.query_map([owner], chain_from)?;
        rows.map(|r| finish_chain(r?)).collect()
    }

    /// Every chain (of `owner`, or all) with its current attempt, oldest first, handed to
    /// `each` one at a time, read a page of `SUMMARY_PAGE` at a time: each page is its
    /// own short read, finished before `each` sees its rows, so a slow consumer (a client
    /// reading slowly) never holds a snapshot that keeps the write-ahead log from being
    /// checkpointed.
    pub fn each_chain_summary<E: From<StoreError>>(
        &self,
        owner: Option<u32>,
        mut each: impl FnMut(ChainSummary) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {}, a.slurm_job_id, COALESCE(a.slurm_state, a.last_seen),
                    (SELECT COUNT(*) FROM attempts x WHERE x.chain_id = c.id AND x.slurm_job_id IS NOT NULL),
                    (SELECT COUNT(*) FROM decisions d WHERE d.chain_id = c.id AND d.action = 'continue')
             FROM chains c
             LEFT JOIN attempts a ON a.chain_id = c.id AND a.n =
                 (SELECT MAX(y.n) FROM attempts y WHERE y.chain_id = c.id AND y.slurm_job_id IS NOT NULL)
             WHERE (?1 IS NULL OR c.submission_id IN (SELECT id FROM submissions WHERE owner_uid = ?1))
               AND c.id > ?2
             ORDER BY c.id LIMIT ?3",
            CHAIN_COLS
                .split(", ")
                .map(|col| format!("c.{col}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .map_err(StoreError::from)?;
        let mut after = 0i64;
        loop {
            let mut page = Vec::with_capacity(SUMMARY_PAGE);
            {
                let mut rows = q
                    .query(params![owner, after, SUMMARY_PAGE as i64])
                    .map_err(StoreError::from)?;
                while let Some(row) = rows.next().map_err(StoreError::from)? {
                    let read = || -> Result<ChainSummary> {
                        Ok(ChainSummary {
                            chain: finish_chain(chain_from(row)?)?,
                            slurm_job_id: row.get(9)?,
                            slurm_state: row.get(10)?,
                            submitted: row.get(11)?,
                            continuations: row.get(12)?,
                        })
                    };
                    page.push(read()?);
                }
            }
            let full = page.len() == SUMMARY_PAGE;
            for s in page {
                after = s.chain.id;
                each(s)?;
            }
            if !full {
                return Ok(());
            }
        }
    }

    pub fn chains_in_state(&self, state: ChainState) -> Result<Vec<Chain>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {CHAIN_COLS} FROM chains WHERE state = ?1 ORDER BY id"
        ))?;
        let rows = q.query_map([state.as_str()], chain_from)?;
        rows.map(|r| finish_chain(r?)).collect()
    }

    pub fn owner_of(&self, chain_id: i64) -> Result<u32> {
        Ok(self.conn.query_row(
            "SELECT s.owner_uid FROM chains c JOIN submissions s ON s.id = c.submission_id WHERE c.id = ?1",
            [chain_id],
            |r| r.get(0),
        )?)
    }

    /// The chains a user-given id names: `c17` (a chain), `123` (a job, or every task of
    /// array 123), `123_4` (one task). Empty when nothing matches.
    /// Every lookup is an exact, indexed match; an id that is not one of those forms
    /// names nothing.
    pub fn resolve(&self, id: &str) -> Result<Vec<i64>> {
        let sql = match crate::domain::ids::IdRef::parse(id) {
            Err(_) => return Ok(Vec::new()),
            Ok(crate::domain::ids::IdRef::Chain(n)) => {
                let found: Option<i64> = self
                    .conn
                    .query_row("SELECT id FROM chains WHERE id = ?1", [n], |r| r.get(0))
                    .optional()?;
                return Ok(found.into_iter().collect());
            }
            Ok(crate::domain::ids::IdRef::Task(_)) => {
                "SELECT DISTINCT chain_id FROM attempts WHERE slurm_job_id = ?1 ORDER BY chain_id"
            }
            Ok(crate::domain::ids::IdRef::Job(_)) => {
                "SELECT chain_id FROM attempts WHERE slurm_job_id = ?1
                 UNION SELECT chain_id FROM attempts WHERE slurm_base_id = ?1 ORDER BY chain_id"
            }
        };
        let mut q = self.conn.prepare_cached(sql)?;
        let rows = q.query_map([id.trim()], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
