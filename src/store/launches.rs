//! Launches: the write-ahead intent of one sbatch (or in-place requeue) for attempts of
//! one submission, committed before the command runs, then settled by its answer
//! ([`Store::launch_submitted`]) or its failure; the tag (`ssv-<instance>-L<id>-...`)
//! that finds its job again; and the rule that a chain has one launch in flight at most.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchState {
    Intent,
    Submitted,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub id: i64,
    pub submission_id: i64,
    pub tag: String,
    pub argv: Vec<String>,
    pub state: LaunchState,
    pub job_id: Option<String>,
    pub error: Option<String>,
    pub created_at: i64,
    /// When the launch's job was recorded (`submitted`) or its failure (`failed`): by the
    /// clock of the daemon that recorded it, which may be another than the one that
    /// created the launch (reconciliation adopts a deposed daemon's job).
    pub recorded_at: Option<i64>,
    /// A first submission whose client has not been told it will be submitted: if its
    /// sbatch is interrupted, it is never submitted later (only adopted if found).
    pub unpromised: bool,
    /// An in-place requeue of this ended job instead of an sbatch; `argv` then holds the
    /// `scontrol update` fields.
    pub requeue_of: Option<String>,
}

/// The attempts a launch covers: chain, attempt number, array task.
pub(super) fn launch_members(
    tx: &Connection,
    launch_id: i64,
) -> Result<Vec<(i64, u32, Option<u32>)>> {
    let mut q = tx.prepare_cached(
        "SELECT a.chain_id, a.n, c.array_task FROM attempts a JOIN chains c ON c.id = a.chain_id WHERE a.launch_id = ?1",
    )?;
    let rows = q.query_map([launch_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// A chain has one launch in flight at most: a second intent while one is open (a decision
/// taken on a replica that lacked a write) is refused.
/// The number and plan of `chain_id`'s next attempt, once no launch of it is in flight.
fn next_attempt(tx: &Connection, chain_id: i64) -> Result<(u32, RetryPlan)> {
    refuse_launch_in_flight(tx, chain_id)?;
    let (n, plan): (u32, String) = tx.query_row(
        "SELECT COALESCE((SELECT MAX(n) FROM attempts WHERE chain_id = ?1), 0) + 1, plan FROM chains WHERE id = ?1",
        [chain_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok((n, from_json(&plan)?))
}

pub(super) fn refuse_launch_in_flight(tx: &Connection, chain_id: i64) -> Result<()> {
    let open: bool = tx
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM attempts WHERE chain_id = ?1 AND state = 'launching')",
        )?
        .query_row([chain_id], |r| r.get(0))?;
    if open {
        return Err(StoreError::InFlight { chain: chain_id });
    }
    Ok(())
}

/// `twin`: the attempts are a second live attempt on their job, kept as they were
/// (a replayed entry from before migration 14, see `apply_op`); false for every new write.
pub(super) fn exec_launch_submitted(
    tx: &Connection,
    launch_id: i64,
    job_id: &str,
    now: i64,
    twin: bool,
) -> Result<()> {
    // Only an intent: a launch settled meanwhile (by reconciliation, by another daemon in
    // cluster mode) keeps the job it has.
    let changed = tx
        .prepare_cached(
            "UPDATE launches SET state = 'submitted', job_id = ?2, finished_at = ?3, unpromised = 0 WHERE id = ?1 AND state = 'intent'",
        )?
        .execute(params![launch_id, job_id, now])?;
    if changed == 0 {
        return Ok(());
    }
    let mut totals = TotalsDelta::default();
    for (chain, n, task) in launch_members(tx, launch_id)? {
        // A chain that had ended (none should, with a launch in flight) is unfinished again.
        let (open, active, owner, submission): (bool, bool, u32, i64) = tx
            .prepare_cached(&format!(
                "SELECT state IN ({}), state = 'active',
                        COALESCE(owner_uid, (SELECT owner_uid FROM submissions WHERE id = submission_id)),
                        submission_id FROM chains WHERE id = ?1",
                open_states()
            ))?
            .query_row([chain], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
        let jid = match task {
            Some(t) => format!("{job_id}_{t}"),
            None => job_id.to_string(),
        };
        tx.prepare_cached(
            "UPDATE attempts SET slurm_job_id = ?3, slurm_base_id = ?5, state = 'live', submitted_at = ?4, twin = ?6 WHERE chain_id = ?1 AND n = ?2",
        )?
        .execute(params![chain, n, jid, now, job_id, twin])?;
        // The state is set only when it changes: an UPDATE that names `state` rewrites the
        // entries of every index on it (three pages of the chain's, for a first launch
        // whose chain is active already).
        tx.prepare_cached(if active {
            "UPDATE chains SET not_before = NULL, updated_at = ?2 WHERE id = ?1"
        } else {
            "UPDATE chains SET state = 'active', not_before = NULL, updated_at = ?2 WHERE id = ?1"
        })?
        .execute(params![chain, now])?;
        if !open {
            totals.opened_or_closed(tx, owner, submission, chain, true, 0)?;
        }
    }
    totals.write(tx)?;
    pipeline::note_rewire(tx, launch_id, now)
}

pub(super) fn exec_note_launch_error(
    tx: &Connection,
    launch_id: i64,
    error: &str,
    promise: bool,
) -> Result<()> {
    tx.execute(
        "UPDATE launches SET error = ?2, unpromised = CASE WHEN ?3 THEN 0 ELSE unpromised END
         WHERE id = ?1 AND state = 'intent'",
        params![launch_id, error, promise],
    )?;
    Ok(())
}

const LAUNCH_COLS: &str =
    "id, submission_id, tag, argv, state, job_id, error, created_at, unpromised, requeue_of, finished_at";

/// A launch row as read ([`LAUNCH_COLS`]), with its argv (JSON) and its state's name, for
/// [`finish_launch`] to read.
pub(super) type RawLaunch = (Launch, String, String);

pub(super) fn launch_from(row: &Row) -> rusqlite::Result<RawLaunch> {
    Ok((
        Launch {
            id: row.get(0)?,
            submission_id: row.get(1)?,
            tag: row.get(2)?,
            argv: Vec::new(),
            state: LaunchState::Intent,
            job_id: row.get(5)?,
            error: row.get(6)?,
            created_at: row.get(7)?,
            unpromised: row.get(8)?,
            requeue_of: row.get(9)?,
            recorded_at: row.get(10)?,
        },
        row.get(3)?,
        row.get(4)?,
    ))
}

pub(super) fn finish_launch(raw: RawLaunch) -> Result<Launch> {
    let (mut l, argv, state) = raw;
    l.argv = from_json(&argv)?;
    l.state = match state.as_str() {
        "intent" => LaunchState::Intent,
        "submitted" => LaunchState::Submitted,
        "failed" => LaunchState::Failed,
        s => return Err(StoreError::Corrupt(format!("unknown launch state {s:?}"))),
    };
    Ok(l)
}

impl Store {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn insert_launch(
        tx: &Connection,
        instance: &str,
        submission_id: i64,
        members: &[(i64, u32, RetryPlan)],
        now: i64,
        unpromised: bool,
        argv_for_tag: impl FnOnce(&str) -> Vec<String>,
    ) -> Result<Launch> {
        tx.prepare_cached(
            "INSERT INTO launches (submission_id, tag, argv, state, created_at, unpromised) VALUES (?1, '', '[]', 'intent', ?2, ?3)",
        )?
        .execute(params![submission_id, now, unpromised])?;
        let id = tx.last_insert_rowid();
        let first = members
            .first()
            .map(|m| format!("c{}.{}", m.0, m.1))
            .unwrap_or_default();
        let tag = format!("ssv-{instance}-L{id}-{first}");
        let argv = argv_for_tag(&tag);
        tx.prepare_cached("UPDATE launches SET tag = ?2, argv = ?3 WHERE id = ?1")?
            .execute(params![id, tag, json(&argv)])?;
        let mut ins = tx.prepare_cached(
            "INSERT INTO attempts (chain_id, n, launch_id, state, plan) VALUES (?1, ?2, ?3, 'launching', ?4)",
        )?;
        for (chain, n, plan) in members {
            ins.execute(params![chain, n, id, json(plan)])?;
        }
        Ok(Launch {
            id,
            submission_id,
            tag,
            argv,
            state: LaunchState::Intent,
            job_id: None,
            error: None,
            created_at: now,
            unpromised,
            requeue_of: None,
            recorded_at: None,
        })
    }

    /// Records the intent to launch the next attempt of `chains` (all of one submission)
    /// in one sbatch. Each chain's next attempt number and current plan are taken from
    /// the store.
    pub fn begin_relaunch(
        &mut self,
        submission_id: i64,
        chain_ids: &[i64],
        now: i64,
        argv_for_tag: impl FnOnce(&str) -> Vec<String>,
    ) -> Result<Launch> {
        self.write(
            |tx, instance| {
                Self::exec_begin_relaunch(tx, instance, submission_id, chain_ids, now, argv_for_tag)
            },
            |launch, p| {
                p.push(&Op::BeginRelaunch {
                    submission_id,
                    chain_ids: Cow::Borrowed(chain_ids),
                    now,
                    argv: Cow::Borrowed(&launch.argv),
                })
            },
        )
    }

    pub(super) fn exec_begin_relaunch(
        tx: &Connection,
        instance: &str,
        submission_id: i64,
        chain_ids: &[i64],
        now: i64,
        argv_for_tag: impl FnOnce(&str) -> Vec<String>,
    ) -> Result<Launch> {
        let mut members = Vec::with_capacity(chain_ids.len());
        for &c in chain_ids {
            let (n, plan) = next_attempt(tx, c)?;
            members.push((c, n, plan));
        }
        Self::insert_launch(
            tx,
            instance,
            submission_id,
            &members,
            now,
            false,
            argv_for_tag,
        )
    }

    /// Records the intent of requeueing `job_id`, the ended job of `chain_id`'s last
    /// attempt, in place as the chain's next attempt (`fields`: the `scontrol update`
    /// fields). The new attempt's runs come after those of every attempt before it with
    /// that job id.
    pub fn begin_requeue(
        &mut self,
        submission_id: i64,
        chain_id: i64,
        job_id: &str,
        fields: &[String],
        now: i64,
    ) -> Result<Launch> {
        self.write(
            |tx, instance| {
                Self::exec_begin_requeue(tx, instance, submission_id, chain_id, job_id, fields, now)
            },
            |_, p| {
                p.push(&Op::BeginRequeue {
                    submission_id,
                    chain_id,
                    job_id: Cow::Borrowed(job_id),
                    fields: Cow::Borrowed(fields),
                    now,
                })
            },
        )
    }

    pub(super) fn exec_begin_requeue(
        tx: &Connection,
        instance: &str,
        submission_id: i64,
        chain_id: i64,
        job_id: &str,
        fields: &[String],
        now: i64,
    ) -> Result<Launch> {
        let (n, plan) = next_attempt(tx, chain_id)?;
        // Each earlier attempt with this job id ran once, plus the requeues Slurm did.
        let first_run: u32 = tx.query_row(
            "SELECT COALESCE(SUM(1 + restarts), 0) FROM attempts WHERE chain_id = ?1 AND slurm_job_id = ?2",
            params![chain_id, job_id],
            |r| r.get(0),
        )?;
        let mut launch = Self::insert_launch(
            tx,
            instance,
            submission_id,
            &[(chain_id, n, plan)],
            now,
            false,
            |_| fields.to_vec(),
        )?;
        tx.execute(
            "UPDATE launches SET requeue_of = ?2 WHERE id = ?1",
            params![launch.id, job_id],
        )?;
        tx.execute(
            "UPDATE attempts SET first_run = ?3 WHERE chain_id = ?1 AND n = ?2",
            params![chain_id, n, first_run],
        )?;
        launch.requeue_of = Some(job_id.to_string());
        Ok(launch)
    }

    /// The attempts a launch covers: chain and attempt number.
    pub fn launch_attempts(&self, launch_id: i64) -> Result<Vec<(i64, u32)>> {
        Ok(launch_members(&self.conn, launch_id)?
            .into_iter()
            .map(|(c, n, _)| (c, n))
            .collect())
    }

    /// The chains a launch covers.
    pub fn launch_chains(&self, launch_id: i64) -> Result<Vec<i64>> {
        Ok(launch_members(&self.conn, launch_id)?
            .into_iter()
            .map(|(c, _, _)| c)
            .collect())
    }

    /// True when an in-place requeue of `job_id` was tried and did not happen: it is not
    /// tried again.
    pub fn requeue_refused_before(&self, job_id: &str) -> Result<bool> {
        Ok(self.conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM launches WHERE requeue_of = ?1 AND state = 'failed')",
            [job_id],
            |r| r.get(0),
        )?)
    }

    /// sbatch accepted the launch: its attempts are live under `job_id` (array tasks
    /// under `job_id_task`) and their chains active.
    pub fn launch_submitted(&mut self, launch_id: i64, job_id: &str, now: i64) -> Result<()> {
        self.write(
            |tx, _| exec_launch_submitted(tx, launch_id, job_id, now, false),
            |_, p| {
                p.push(&Op::LaunchSubmitted {
                    launch_id,
                    job_id: Cow::Borrowed(job_id),
                    now,
                })
            },
        )
    }

    /// Notes why a launch's sbatch gave no clear answer; the launch stays an intent. With
    /// `promise`, a first submission's launch becomes one reconciliation will finish (its
    /// client is about to be told so).
    pub fn note_launch_error(&mut self, launch_id: i64, error: &str, promise: bool) -> Result<()> {
        self.write(
            |tx, _| exec_note_launch_error(tx, launch_id, error, promise),
            |_, p| {
                p.push(&Op::NoteLaunchError {
                    launch_id,
                    error: Cow::Borrowed(error),
                    promise,
                })
            },
        )
    }

    pub fn launch(&self, id: i64) -> Result<Launch> {
        let raw = self.conn.query_row(
            &format!("SELECT {LAUNCH_COLS} FROM launches WHERE id = ?1"),
            [id],
            launch_from,
        )?;
        finish_launch(raw)
    }

    /// The launch with this tag, if there is one.
    pub fn launch_by_tag(&self, tag: &str) -> Result<Option<Launch>> {
        let id: Option<i64> = self
            .conn
            .prepare_cached("SELECT id FROM launches WHERE tag = ?1")?
            .query_row([tag], |r| r.get(0))
            .optional()?;
        id.map(|id| self.launch(id)).transpose()
    }

    /// Launches whose sbatch may or may not have happened (the daemon died, or sbatch's
    /// answer was lost).
    pub fn open_launches(&self) -> Result<Vec<Launch>> {
        let ids: Vec<i64> = {
            let mut q = self
                .conn
                .prepare("SELECT id FROM launches WHERE state = 'intent' ORDER BY id")?;
            let rows = q.query_map([], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        ids.into_iter().map(|id| self.launch(id)).collect()
    }
}
