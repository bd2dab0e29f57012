//! Pipelines: which supervised chains a submission waits on, the gates of
//! afterany/afternotok, and the launches whose new job the waiting jobs must follow.
//!
//! A launch that gives chains a later attempt is noted for rewiring (`note_rewire`) in the
//! transaction that records its job id (`exec_launch_submitted`), so no crash loses it;
//! the rewiring clears the note once done (`clear_rewires_in`).

use super::journal::Op;
use super::{open_states, parse_name, Result, Store};
use crate::domain::dependency::{Edge, Facts, Kind, Upstream};
use crate::domain::model::ChainState;
pub use crate::domain::policy::Gate;
use rusqlite::{params, Connection, OptionalExtension};
use std::borrow::Cow;
use std::collections::HashSet;

/// The most supervised chains one dependency is resolved against (a whole array names
/// each of its tasks; `limits.max_array_tasks` is at most 10,000).
pub const MAX_UPSTREAM_CHAINS: usize = 10_000;

/// How long a finished chain's Slurm job ids still name it in a dependency.
pub const JOB_IDS_NAME_CHAINS_FOR: i64 = 7 * 24 * 3600;

/// A launch that gave chains a new job, and whose owner's waiting jobs may name the
/// chains' earlier attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewire {
    pub launch_id: i64,
    pub owner_uid: u32,
    pub user: String,
}

/// Records what a submission waits on (in the caller's transaction). A gate is closed
/// whenever a resolution finds its chain open, also one opened before (the upstream was
/// recovered and the waiting job is held again).
pub(super) fn insert_waits(tx: &Connection, submission_id: i64, edges: &[Edge]) -> Result<()> {
    let mut edge = tx.prepare_cached(
        "INSERT OR IGNORE INTO waits_on (submission_id, upstream_chain, kind, target) VALUES (?1, ?2, ?3, ?4)",
    )?;
    let mut gate = tx.prepare_cached(
        "INSERT INTO waits_on (submission_id, upstream_chain, kind, target, gate) VALUES (?1, ?2, ?3, ?4, 'closed')
         ON CONFLICT (submission_id, upstream_chain, kind) DO UPDATE SET gate = 'closed', target = excluded.target",
    )?;
    for e in edges {
        let q = if e.gate { &mut gate } else { &mut edge };
        q.execute(params![submission_id, e.chain, e.kind.as_str(), e.target])?;
    }
    Ok(())
}

/// Rewiring after these launches is done (in the caller's transaction).
pub(super) fn clear_rewires_in(tx: &Connection, launch_ids: &[i64]) -> Result<()> {
    let mut q = tx.prepare_cached("DELETE FROM rewires WHERE launch_id = ?1")?;
    for id in launch_ids {
        q.execute([id])?;
    }
    Ok(())
}

/// Notes that a launch gave chains a later attempt (in the caller's transaction).
pub(super) fn note_rewire(tx: &Connection, launch_id: i64, now: i64) -> Result<()> {
    // Prepared once: every launch's sbatch answer passes here (a submit's among them).
    let later: bool = tx
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM attempts WHERE launch_id = ?1 AND n > 1)")?
        .query_row([launch_id], |r| r.get(0))?;
    if later {
        tx.prepare_cached("INSERT OR IGNORE INTO rewires (launch_id, created_at) VALUES (?1, ?2)")?
            .execute(params![launch_id, now])?;
    }
    Ok(())
}

impl Store {
    /// What the store knows of each job a dependency names: the chains of `owner_uid` it
    /// names (`c7`; a job id `12` or array task `12_3` of an attempt; a whole array `12`
    /// or `12_*`), each with its state and latest job. Another user's chains are never
    /// named: their jobs are left to Slurm. A Slurm job id names a chain only if the
    /// chain is unfinished or changed since `recent` (Slurm's job ids wrap around and
    /// restart with a new cluster: an old id may be another job now); a chain id always
    /// names it. `None` when they name more than [`MAX_UPSTREAM_CHAINS`] chains in all
    /// (whole arrays count each task): the work a dependency costs is bounded.
    pub fn upstream_facts<'a>(
        &self,
        owner_uid: u32,
        jobs: impl IntoIterator<Item = &'a str>,
        recent: i64,
    ) -> Result<Option<Facts>> {
        let mut facts = Facts::new();
        let mut total = 0usize;
        let mut chain_q = self.conn.prepare_cached(&format!(
            "SELECT c.id, c.state,
                    (SELECT a.slurm_job_id FROM attempts a WHERE a.chain_id = c.id AND a.slurm_job_id IS NOT NULL
                     ORDER BY a.n DESC LIMIT 1)
             FROM chains c JOIN submissions s ON s.id = c.submission_id
             WHERE c.id = ?1 AND s.owner_uid = ?2 AND (?3 OR c.state IN ({}) OR c.updated_at >= ?4)",
            open_states()
        ))?;
        let mut by_job = self
            .conn
            .prepare_cached("SELECT DISTINCT chain_id FROM attempts WHERE slurm_job_id = ?1")?;
        let mut by_base = self.conn.prepare_cached(
            "SELECT DISTINCT chain_id FROM attempts WHERE slurm_base_id = ?1 ORDER BY chain_id",
        )?;
        for job in jobs {
            if facts.contains_key(job) {
                continue;
            }
            let by_chain_id = crate::domain::dependency::chain_target(job).is_some();
            let chains: Vec<i64> = if let Some(c) = crate::domain::dependency::chain_target(job) {
                vec![c]
            } else if job.contains('_') && !job.ends_with("_*") {
                by_job
                    .query_map([job], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?
            } else {
                by_base
                    .query_map([crate::domain::dependency::whole_array_base(job)], |r| {
                        r.get(0)
                    })?
                    .collect::<rusqlite::Result<_>>()?
            };
            total += chains.len();
            if total > MAX_UPSTREAM_CHAINS {
                return Ok(None);
            }
            let mut ups = Vec::new();
            for c in chains {
                let row: Option<(i64, String, Option<String>)> = chain_q
                    .query_row(params![c, owner_uid, by_chain_id, recent], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })
                    .optional()?;
                if let Some((chain, state, latest_job)) = row {
                    ups.push(Upstream {
                        chain,
                        state: parse_name(&state)?,
                        latest_job,
                    });
                }
            }
            if !ups.is_empty() {
                facts.insert(job.to_string(), ups);
            }
        }
        Ok(Some(facts))
    }

    /// The job ids (and array bases) of the earlier attempts of the chains these launches
    /// relaunched: what a waiting job must name to need rewiring.
    pub fn superseded_jobs(&self, launch_ids: &[i64]) -> Result<HashSet<String>> {
        let mut q = self.conn.prepare_cached(
            "SELECT a.slurm_job_id, a.slurm_base_id FROM attempts a
             WHERE a.chain_id IN (SELECT chain_id FROM attempts WHERE launch_id = ?1)
               AND a.launch_id != ?1 AND a.slurm_job_id IS NOT NULL",
        )?;
        let mut out = HashSet::new();
        for id in launch_ids {
            let mut rows = q.query([id])?;
            while let Some(r) = rows.next()? {
                out.insert(r.get::<_, String>(0)?);
                if let Some(b) = r.get::<_, Option<String>>(1)? {
                    out.insert(b);
                }
            }
        }
        Ok(out)
    }

    /// Records what a submission waits on, as a later resolution found it (a retry).
    pub fn add_waits(&mut self, submission_id: i64, edges: &[Edge]) -> Result<()> {
        self.write(
            |tx, _| insert_waits(tx, submission_id, edges),
            |_, p| {
                p.push(&Op::AddWaits {
                    submission_id,
                    edges: Cow::Borrowed(edges),
                })
            },
        )
    }

    /// The supervised chains a submission waits on.
    pub fn depends_on(&self, submission_id: i64) -> Result<Vec<i64>> {
        let mut q = self.conn.prepare_cached(
            "SELECT DISTINCT upstream_chain FROM waits_on WHERE submission_id = ?1 ORDER BY 1",
        )?;
        let rows = q.query_map([submission_id], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The chains whose submission waits on `chain_id`.
    pub fn dependents(&self, chain_id: i64) -> Result<Vec<i64>> {
        let mut q = self.conn.prepare_cached(
            "SELECT DISTINCT c.id FROM waits_on w JOIN chains c ON c.submission_id = w.submission_id
             WHERE w.upstream_chain = ?1 ORDER BY 1",
        )?;
        let rows = q.query_map([chain_id], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The chains something waits on, and the submissions that wait on something: a
    /// status of every chain asks the two questions above only of these.
    pub fn pipeline_members(&self) -> Result<(HashSet<i64>, HashSet<i64>)> {
        let mut up = HashSet::new();
        let mut down = HashSet::new();
        let mut q = self
            .conn
            .prepare("SELECT upstream_chain, submission_id FROM waits_on")?;
        let mut rows = q.query([])?;
        while let Some(r) = rows.next()? {
            up.insert(r.get(0)?);
            down.insert(r.get(1)?);
        }
        Ok((up, down))
    }

    /// Submissions held by a gate whose upstream chain has ended for good.
    pub fn gates_due(&self) -> Result<Vec<i64>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT DISTINCT w.submission_id FROM waits_on w JOIN chains c ON c.id = w.upstream_chain
             WHERE w.gate = 'closed' AND c.state NOT IN ({}) ORDER BY 1",
            open_states()
        ))?;
        let rows = q.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The closed gates of a submission, with their upstream chains' states now.
    pub fn closed_gates(&self, submission_id: i64) -> Result<Vec<Gate>> {
        let mut q = self.conn.prepare_cached(
            "SELECT w.upstream_chain, w.kind, c.state, w.target FROM waits_on w JOIN chains c ON c.id = w.upstream_chain
             WHERE w.submission_id = ?1 AND w.gate = 'closed' ORDER BY 1, 2",
        )?;
        let rows = q.query_map([submission_id], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (upstream, kind, state, target) = row?;
            let kind = Kind::from_name(&kind).ok_or_else(|| {
                super::StoreError::Corrupt(format!("unknown dependency kind {kind:?}"))
            })?;
            out.push(Gate {
                upstream,
                kind,
                target,
                upstream_state: parse_name(&state)?,
            });
        }
        Ok(out)
    }

    /// Whether a submission is held by a gate still closed.
    pub fn is_gated(&self, submission_id: i64) -> Result<bool> {
        Ok(self.conn.prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM waits_on WHERE submission_id = ?1 AND gate = 'closed')",
        )?
        .query_row([submission_id], |r| r.get(0))?)
    }

    /// The unfinished supervised chains a submission waits on (afterok and the like).
    pub fn open_upstreams(&self, submission_id: i64) -> Result<Vec<(i64, ChainState)>> {
        self.upstreams_where(submission_id, &format!("c.state IN ({})", open_states()))
    }

    /// The supervised chains a submission waits on with afterok/aftercorr that ended for
    /// good without completing (its job can never start).
    pub fn broken_upstreams(&self, submission_id: i64) -> Result<Vec<(i64, ChainState)>> {
        self.upstreams_where(
            submission_id,
            "w.kind IN ('afterok', 'aftercorr') AND c.state IN ('failed', 'cancelled')",
        )
    }

    /// The upstream chains (not gates) of a submission that meet `condition`, with their
    /// states.
    fn upstreams_where(
        &self,
        submission_id: i64,
        condition: &str,
    ) -> Result<Vec<(i64, ChainState)>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT DISTINCT c.id, c.state FROM waits_on w JOIN chains c ON c.id = w.upstream_chain
             WHERE w.submission_id = ?1 AND w.gate IS NULL AND {condition} ORDER BY 1"
        ))?;
        let rows = q.query_map([submission_id], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (c, s) = row?;
            out.push((c, parse_name(&s)?));
        }
        Ok(out)
    }

    /// Launches whose new jobs the waiting jobs of their owners must follow.
    pub fn pending_rewires(&self) -> Result<Vec<Rewire>> {
        let mut q = self.conn.prepare_cached(
            "SELECT r.launch_id, s.owner_uid, s.user FROM rewires r
               JOIN launches l ON l.id = r.launch_id JOIN submissions s ON s.id = l.submission_id
             ORDER BY r.launch_id",
        )?;
        let rows = q.query_map([], |r| {
            Ok(Rewire {
                launch_id: r.get(0)?,
                owner_uid: r.get(1)?,
                user: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Rewiring after these launches is done (or was recorded as impossible).
    pub fn clear_rewires(&mut self, launch_ids: &[i64]) -> Result<()> {
        self.write(
            |tx, _| clear_rewires_in(tx, launch_ids),
            |_, p| {
                p.push(&Op::ClearRewires {
                    launch_ids: Cow::Borrowed(launch_ids),
                })
            },
        )
    }

    /// The chain whose attempt is exactly this Slurm job (`12`, `12_3`), with its owner.
    pub fn chain_of_job(&self, job: &str) -> Result<Option<(i64, u32)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT a.chain_id, s.owner_uid FROM attempts a JOIN chains c ON c.id = a.chain_id
                 JOIN submissions s ON s.id = c.submission_id WHERE a.slurm_job_id = ?1
                 ORDER BY a.n DESC LIMIT 1",
            )?
            .query_row([job], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    /// The chains of a submission that are still open, with their live job, if any.
    pub fn open_chains_of_submission(
        &self,
        submission_id: i64,
    ) -> Result<Vec<(i64, Option<String>)>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT c.id, (SELECT a.slurm_job_id FROM attempts a WHERE a.chain_id = c.id AND a.state = 'live')
             FROM chains c WHERE c.submission_id = ?1 AND c.state IN ({}) ORDER BY c.id",
            open_states()
        ))?;
        let rows = q.query_map([submission_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The owners (uid, user name) of the unfinished chains: whose pending jobs may wait
    /// on one of their jobs.
    pub fn open_chain_owners(&self) -> Result<Vec<(u32, String)>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT o.owner_uid,
                    (SELECT s.user FROM submissions s WHERE s.owner_uid = o.owner_uid ORDER BY s.id DESC LIMIT 1)
             FROM (SELECT DISTINCT owner_uid FROM chains WHERE state IN ({}) AND owner_uid IS NOT NULL) o",
            open_states()
        ))?;
        let rows = q.query_map([], |r| Ok((r.get(0)?, r.get::<_, Option<String>>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            if let (uid, Some(user)) = row? {
                out.push((uid, user));
            }
        }
        Ok(out)
    }

    /// Whether the plain-sbatch job `job` (its id without an array task) was reported.
    pub fn plain_waiter_noted(&self, job: &str) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM plain_waiters WHERE job_id = ?1 LIMIT 1")?
            .query_row([job], |_| Ok(()))
            .optional()?
            .is_some())
    }
}
