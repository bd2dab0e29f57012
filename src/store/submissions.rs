//! Submissions: what a user submitted, written with its chains and the intent of its
//! first launch in one transaction ([`Store::create_submission_waiting`]), with the jobs
//! it waits on (`--dependency`: its dependency rows, read once by the writer and given
//! to the store; the store reads them itself, [`dependency_rows`], only for what an
//! earlier version wrote); the request ids that made them (a retried request makes no
//! second one); a refused first submission discarded whole.

use super::*;

/// What a user submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    pub id: i64,
    pub owner_uid: u32,
    pub user: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub script_name: Option<String>,
    pub script: Option<Vec<u8>>,
    pub max_retries: u32,
    /// `submit --restartable`: a rerun is safe even after srun steps completed.
    pub restartable: bool,
    /// A continuing submission (`submit --continue`, `#SSV --continue`).
    pub continuation: Option<crate::domain::continuation::Continuation>,
    pub created_at: i64,
}

/// The new submission the daemon is about to launch.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct NewSubmission {
    pub owner_uid: u32,
    pub user: String,
    pub argv: Vec<String>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub script_name: Option<String>,
    #[serde(with = "crate::protocol::script_bytes")]
    pub script: Option<Vec<u8>>,
    pub max_retries: u32,
    /// `submit --restartable`: a rerun is safe even after srun steps completed.
    pub restartable: bool,
    /// Array task ids, or `None` for a plain job.
    pub array_tasks: Option<Vec<u32>>,
    /// A continuing submission. Absent from journal entries written before it existed,
    /// which meant none (the schema version in their format says which those are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<Box<crate::domain::continuation::Continuation>>,
}

impl NewSubmission {
    /// The submission as `create_submission_waiting` stored it (as id `id` at `now`),
    /// without reading it back.
    pub fn stored_as(self, id: i64, now: i64) -> Submission {
        Submission {
            id,
            owner_uid: self.owner_uid,
            user: self.user,
            argv: self.argv,
            cwd: self.cwd,
            env: self.env,
            script_name: self.script_name,
            script: self.script,
            max_retries: self.max_retries,
            restartable: self.restartable,
            continuation: self.continuation.map(|c| *c),
            created_at: now,
        }
    }
}

/// The rows of the jobs a submission waits on (its `--dependency`: kind and job), read
/// from its argv and script by the store's `reader` (given from above). Only the
/// upgrading of what an earlier version wrote (a store's submissions from before the rows
/// were kept, a journal entry that did not carry them: `what`) calls it; a writer gives
/// the rows ([`Store::create_submission_waiting`]) and applying an operation never reads.
/// Without a reader it is an error that says what to do, never a silent nothing.
pub(super) fn dependency_rows(
    reader: Option<DependencyReader>,
    argv: &[String],
    script: Option<&[u8]>,
    what: impl FnOnce() -> String,
) -> Result<Vec<(String, String)>> {
    #[cfg(test)]
    if let Some(rows) = tests::parser_override(argv) {
        return Ok(rows);
    }
    let reader = reader.ok_or_else(|| StoreError::NoDependencyReader(what()))?;
    Ok(reader(argv, script))
}

/// Records the jobs a submission waits on (its `--dependency`), as given.
pub(super) fn insert_dependencies(
    tx: &Connection,
    submission_id: i64,
    rows: &[(String, String)],
) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut ins = tx.prepare_cached(
        "INSERT INTO dependencies (submission_id, kind, job_id) VALUES (?1, ?2, ?3)",
    )?;
    for (kind, job) in rows {
        ins.execute(params![submission_id, kind, job])?;
    }
    Ok(())
}

/// The request ids kept per owner: a client retries within seconds, so the newest
/// thousand are many more than any retry needs, and the table stays bounded.
pub const SUBMIT_REQUESTS_KEPT: i64 = 1000;

/// Records a request id, and keeps the owner's newest `keep`.
pub(super) fn exec_note_submit_request(
    tx: &Connection,
    owner_uid: u32,
    request_id: &str,
    submission_id: i64,
    now: i64,
    keep: i64,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO submit_requests (owner_uid, request_id, submission_id, created_at)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![owner_uid, request_id, submission_id, now])?;
    // The rows past the newest `keep`, found along `submit_requests_by_age`: no sort,
    // `keep` index entries stepped over (the same rows as `NOT IN` the newest `keep`).
    tx.prepare_cached(
        "DELETE FROM submit_requests WHERE owner_uid = ?1 AND request_id IN
           (SELECT request_id FROM submit_requests WHERE owner_uid = ?1
            ORDER BY created_at DESC, submission_id DESC LIMIT -1 OFFSET ?2)",
    )?
    .execute(params![owner_uid, keep])?;
    Ok(())
}

/// What became of the submission a request id made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitRequestState {
    /// Its sbatch has not answered (or answered nothing clear) yet.
    Launching,
    /// Submitted as this job.
    Submitted { job_id: String },
}

pub(super) fn exec_discard_submission(tx: &Connection, launch_id: i64) -> Result<()> {
    let sub: i64 = tx.query_row(
        "SELECT submission_id FROM launches WHERE id = ?1",
        [launch_id],
        |r| r.get(0),
    )?;
    let decided: i64 = tx.query_row(
        "SELECT COUNT(*) FROM decisions d JOIN chains c ON c.id = d.chain_id WHERE c.submission_id = ?1",
        [sub],
        |r| r.get(0),
    )?;
    if decided > 0 {
        return Err(StoreError::Corrupt(format!(
            "submission {sub} has decisions and cannot be discarded"
        )));
    }
    tx.execute(
        "DELETE FROM attempts WHERE chain_id IN (SELECT id FROM chains WHERE submission_id = ?1)",
        [sub],
    )?;
    tx.execute("DELETE FROM launches WHERE submission_id = ?1", [sub])?;
    tx.execute("DELETE FROM chains WHERE submission_id = ?1", [sub])?;
    tx.execute("DELETE FROM submissions WHERE id = ?1", [sub])?;
    tx.execute("DELETE FROM not_recovered WHERE submission_id = ?1", [sub])?;
    Ok(())
}

const SUBMISSION_COLS: &str = "id, owner_uid, user, argv, cwd, env, script_name, script, max_retries, created_at, restartable, continuation";

/// A submission row as read ([`SUBMISSION_COLS`]), with its argv and environment (JSON),
/// for [`finish_submission`] to read.
pub(super) type RawSubmission = (Submission, String, String, Option<String>);

pub(super) fn submission_from(row: &Row) -> rusqlite::Result<RawSubmission> {
    Ok((
        Submission {
            id: row.get(0)?,
            owner_uid: row.get(1)?,
            user: row.get(2)?,
            argv: Vec::new(),
            cwd: row.get(4)?,
            env: Vec::new(),
            script_name: row.get(6)?,
            script: row.get(7)?,
            max_retries: row.get(8)?,
            restartable: row.get(10)?,
            continuation: None,
            created_at: row.get(9)?,
        },
        row.get(3)?,
        row.get(5)?,
        row.get(11)?,
    ))
}

pub(super) fn finish_submission(raw: RawSubmission) -> Result<Submission> {
    let (mut s, argv, env, continuation) = raw;
    s.argv = from_json(&argv)?;
    s.env = from_json(&env)?;
    s.continuation = continuation.as_deref().map(from_json).transpose()?;
    Ok(s)
}

impl Store {
    /// Records a new submission that waits on no job (no dependency rows) with its chains
    /// and the intent of its first launch. `argv_for_tag` builds the exact sbatch argv
    /// once the tag is known. Returns the launch.
    pub fn create_submission(
        &mut self,
        new: &NewSubmission,
        now: i64,
        argv_for_tag: impl FnOnce(&str) -> Vec<String>,
    ) -> Result<Launch> {
        self.create_submission_waiting(new, &[], &[], now, argv_for_tag)
    }

    /// [`Store::create_submission`] for a submission that waits on jobs: `dependencies`,
    /// the rows of every job its `--dependency` names (kind and job, read from its argv
    /// and script by the caller: `daemon::sbatch::dependency_rows`), kept as given and
    /// carried in the journal; `edges`, the supervised chains it waits on, some of them
    /// gates the supervisor opens: all in the one transaction, so a held job never exists
    /// without its gates.
    pub fn create_submission_waiting(
        &mut self,
        new: &NewSubmission,
        edges: &[crate::domain::dependency::Edge],
        dependencies: &[(String, String)],
        now: i64,
        argv_for_tag: impl FnOnce(&str) -> Vec<String>,
    ) -> Result<Launch> {
        self.create_submission_requested(new, edges, dependencies, None, now, argv_for_tag)
    }

    /// [`Store::create_submission_waiting`], and with `request_id` the request that made
    /// it (written before its sbatch runs, in the same transaction: a retry of the request
    /// finds the submission and never runs a second one, and a crash leaves neither). The
    /// user's ids past the newest [`SUBMIT_REQUESTS_KEPT`] are pruned.
    pub fn create_submission_requested(
        &mut self,
        new: &NewSubmission,
        edges: &[crate::domain::dependency::Edge],
        dependencies: &[(String, String)],
        request_id: Option<&str>,
        now: i64,
        argv_for_tag: impl FnOnce(&str) -> Vec<String>,
    ) -> Result<Launch> {
        let dependencies = &dependencies[..dependencies
            .len()
            .min(crate::domain::dependency::MAX_DEPENDENCY_EDGES)];
        let keep = SUBMIT_REQUESTS_KEPT;
        self.write(
            |tx, instance| {
                let launch = Self::exec_create_submission(
                    tx,
                    instance,
                    new,
                    edges,
                    dependencies,
                    now,
                    argv_for_tag,
                )?;
                if let Some(id) = request_id {
                    let sub = launch.submission_id;
                    exec_note_submit_request(tx, new.owner_uid, id, sub, now, keep)?;
                }
                Ok(launch)
            },
            |launch, p| {
                p.push(&Op::CreateSubmission {
                    new: Cow::Borrowed(new),
                    edges: Cow::Borrowed(edges),
                    now,
                    argv: Cow::Borrowed(&launch.argv),
                    dependencies: Cow::Borrowed(dependencies),
                });
                if let Some(id) = request_id {
                    p.push(&Op::NoteSubmitRequest {
                        owner_uid: new.owner_uid,
                        request_id: Cow::Borrowed(id),
                        submission_id: launch.submission_id,
                        now,
                        keep,
                    })
                }
            },
        )
    }

    /// Writes the submission, its dependency rows as given (`dependencies`, read once by
    /// the writer), its waits, chains and first launch.
    pub(super) fn exec_create_submission(
        tx: &Connection,
        instance: &str,
        new: &NewSubmission,
        edges: &[crate::domain::dependency::Edge],
        dependencies: &[(String, String)],
        now: i64,
        argv_for_tag: impl FnOnce(&str) -> Vec<String>,
    ) -> Result<Launch> {
        tx.prepare_cached(
            "INSERT INTO submissions (owner_uid, user, argv, cwd, env, script_name, script, max_retries, created_at, restartable, continuation)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )?
        .execute(params![
                new.owner_uid,
                new.user,
                json(&new.argv),
                new.cwd,
                json(&new.env),
                new.script_name,
                new.script,
                new.max_retries,
                now,
                new.restartable,
                new.continuation.as_ref().map(json)
            ])?;
        let submission_id = tx.last_insert_rowid();
        insert_dependencies(tx, submission_id, dependencies)?;
        pipeline::insert_waits(tx, submission_id, edges)?;
        let tasks: Vec<Option<u32>> = match &new.array_tasks {
            Some(t) => t.iter().copied().map(Some).collect(),
            None => vec![None],
        };
        let mut members = Vec::with_capacity(tasks.len());
        {
            let mut ins = tx.prepare_cached(
                "INSERT INTO chains (submission_id, owner_uid, array_task, state, created_at, updated_at) VALUES (?1, ?2, ?3, 'active', ?4, ?4)",
            )?;
            for t in tasks {
                ins.execute(params![submission_id, new.owner_uid, t, now])?;
                members.push((tx.last_insert_rowid(), 1u32, RetryPlan::default()));
            }
        }
        Self::insert_launch(
            tx,
            instance,
            submission_id,
            &members,
            now,
            true,
            argv_for_tag,
        )
    }

    /// The submission `owner_uid`'s request `request_id` made, if it still exists: only
    /// that owner's ids are looked at.
    pub fn submit_request(
        &self,
        owner_uid: u32,
        request_id: &str,
    ) -> Result<Option<SubmitRequestState>> {
        let row: Option<(String, Option<String>)> = self
            .conn
            .prepare_cached(
                "SELECT l.state, l.job_id FROM submit_requests r
                 JOIN submissions s ON s.id = r.submission_id AND s.owner_uid = r.owner_uid
                 JOIN launches l ON l.submission_id = s.id
                 WHERE r.owner_uid = ?1 AND r.request_id = ?2
                 ORDER BY l.id LIMIT 1",
            )?
            .query_row(params![owner_uid, request_id], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()?;
        Ok(row.map(|(state, job)| match (state.as_str(), job) {
            ("submitted", Some(job_id)) => SubmitRequestState::Submitted { job_id },
            _ => SubmitRequestState::Launching,
        }))
    }

    /// sbatch definitively refused a first submission: nothing was created in Slurm, so
    /// nothing is kept (the user sees sbatch's error instead).
    pub fn discard_submission(&mut self, launch_id: i64) -> Result<()> {
        self.write(
            |tx, _| exec_discard_submission(tx, launch_id),
            |_, p| p.push(&Op::DiscardSubmission { launch_id }),
        )
    }

    pub fn submission(&self, id: i64) -> Result<Submission> {
        let raw = self.conn.query_row(
            &format!("SELECT {SUBMISSION_COLS} FROM submissions WHERE id = ?1"),
            [id],
            submission_from,
        )?;
        finish_submission(raw)
    }

    /// The submissions that wait on some job with `--dependency`.
    pub fn submissions_with_dependencies(&self) -> Result<std::collections::HashSet<i64>> {
        let mut q = self
            .conn
            .prepare("SELECT DISTINCT submission_id FROM dependencies")?;
        let rows = q.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The unfinished chains (other than `chain_id`) of the same owner whose submission
    /// waits, with `--dependency`, on one of `chain_id`'s jobs or on the whole array one
    /// belongs to. (Another user's chains are not named in this owner's records.)
    pub fn dependents_of(&self, chain_id: i64) -> Result<Vec<i64>> {
        // CROSS JOIN keeps the dependency rows (usually none) as the outer loop: the other
        // order walks every unfinished chain.
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT DISTINCT c.id FROM dependencies d CROSS JOIN chains c ON c.submission_id = d.submission_id
             WHERE d.job_id IN (SELECT slurm_job_id FROM attempts WHERE chain_id = ?1 AND slurm_job_id IS NOT NULL
                                UNION SELECT slurm_base_id FROM attempts WHERE chain_id = ?1 AND slurm_base_id IS NOT NULL)
               AND c.state IN ({}) AND c.id != ?1
               AND (SELECT owner_uid FROM submissions WHERE id = c.submission_id)
                 = (SELECT s.owner_uid FROM chains x JOIN submissions s ON s.id = x.submission_id WHERE x.id = ?1)
             ORDER BY c.id",
            open_states()
        ))?;
        let rows = q.query_map([chain_id], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The failed chains a submission waits on with `--dependency` (it will never start).
    /// Only chains of the same owner: another user's chain is not theirs to learn about.
    pub fn failed_dependencies(&self, submission_id: i64) -> Result<Vec<i64>> {
        let mut q = self.conn.prepare_cached(
            "SELECT DISTINCT c.id FROM dependencies d
               JOIN attempts a ON a.slurm_job_id = d.job_id
               JOIN chains c ON c.id = a.chain_id
               JOIN submissions s ON s.id = c.submission_id
             WHERE d.submission_id = ?1 AND c.state = 'failed'
               AND s.owner_uid = (SELECT owner_uid FROM submissions WHERE id = ?1)
             UNION
             SELECT DISTINCT c.id FROM dependencies d
               JOIN attempts a ON a.slurm_base_id = d.job_id
               JOIN chains c ON c.id = a.chain_id
               JOIN submissions s ON s.id = c.submission_id
             WHERE d.submission_id = ?1 AND c.state = 'failed'
               AND s.owner_uid = (SELECT owner_uid FROM submissions WHERE id = ?1)
             ORDER BY 1",
        )?;
        let rows = q.query_map([submission_id], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
