//! Attempts: one sbatch (or in-place requeue) of a chain each, read whole
//! ([`attempt_from`]; the little the poll needs of a live one every cycle is
//! [`super::live`]); and what the poll saw of them ([`Store::set_last_seen`]).

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptState {
    Launching,
    Live,
    Ended,
    NotSubmitted,
}

impl AttemptState {
    pub(super) fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "launching" => AttemptState::Launching,
            "live" => AttemptState::Live,
            "ended" => AttemptState::Ended,
            "not_submitted" => AttemptState::NotSubmitted,
            _ => return Err(StoreError::Corrupt(format!("unknown attempt state {s:?}"))),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attempt {
    pub chain_id: i64,
    pub n: u32,
    pub launch_id: i64,
    pub slurm_job_id: Option<String>,
    pub state: AttemptState,
    pub slurm_state: Option<String>,
    pub exit_code: Option<String>,
    pub nodes: Option<String>,
    pub mem: Option<String>,
    pub time_limit: Option<String>,
    pub plan: RetryPlan,
    pub restarts: u32,
    pub last_seen: Option<String>,
    pub submitted_at: Option<i64>,
    pub ended_at: Option<i64>,
    /// The tag of the launch that submitted it (in the job's comment). An attempt
    /// requeued in place has its launch's own tag, while the job's comment keeps the tag
    /// of the attempt that submitted the job.
    pub tag: String,
    /// Runs of its job id in sacct `--duplicates` that belong to earlier attempts (see
    /// `in_place`); its own runs come after them.
    pub first_run: u32,
    /// The ended job of the attempt before, requeued in place under the same id
    /// (`[retry] in_place`), not a new sbatch.
    pub in_place: bool,
    /// The uid of the chain's owner: the only owner Slurm may show for its job.
    pub owner_uid: u32,
    /// Slurm has shown its job owned by the chain's owner (a job's owner never changes):
    /// the poll may ask for its state alone.
    pub owner_seen: bool,
    /// The ended attempt's failure signature (`crate::domain::signature`), its id and masked
    /// stderr lines; `None` while it runs, and for endings judged before signatures were.
    pub signature: Option<String>,
    pub signature_text: Option<String>,
}

pub(super) const ATTEMPT_COLS: &str = "a.chain_id, a.n, a.launch_id, a.slurm_job_id, a.state, a.slurm_state, a.exit_code, a.nodes, a.mem, a.time_limit, a.plan, a.restarts, a.last_seen, a.submitted_at, a.ended_at, l.tag, a.first_run, l.requeue_of IS NOT NULL, s.owner_uid, a.owner_seen, a.signature, a.signature_text";

pub(super) const ATTEMPT_FROM: &str =
    "attempts a JOIN launches l ON l.id = a.launch_id JOIN submissions s ON s.id = l.submission_id";

pub(super) type RawAttempt = (Attempt, String, String);

pub(super) fn attempt_from(row: &Row) -> rusqlite::Result<RawAttempt> {
    Ok((
        Attempt {
            chain_id: row.get(0)?,
            n: row.get(1)?,
            launch_id: row.get(2)?,
            slurm_job_id: row.get(3)?,
            state: AttemptState::Launching,
            slurm_state: row.get(5)?,
            exit_code: row.get(6)?,
            nodes: row.get(7)?,
            mem: row.get(8)?,
            time_limit: row.get(9)?,
            plan: RetryPlan::default(),
            restarts: row.get(11)?,
            last_seen: row.get(12)?,
            submitted_at: row.get(13)?,
            ended_at: row.get(14)?,
            tag: row.get(15)?,
            first_run: row.get(16)?,
            in_place: row.get(17)?,
            owner_uid: row.get(18)?,
            owner_seen: row.get(19)?,
            signature: row.get(20)?,
            signature_text: row.get(21)?,
        },
        row.get(4)?,
        row.get(10)?,
    ))
}

pub(super) fn finish_attempt(raw: RawAttempt) -> Result<Attempt> {
    let (mut a, state, plan) = raw;
    a.state = AttemptState::parse(&state)?;
    a.plan = from_json(&plan)?;
    Ok(a)
}

pub(super) fn exec_set_last_seen<S: AsRef<str>>(
    tx: &Connection,
    seen: &[(i64, u32, S)],
    owned: &[(i64, u32, bool)],
) -> Result<()> {
    let mut q =
        tx.prepare_cached("UPDATE attempts SET last_seen = ?3 WHERE chain_id = ?1 AND n = ?2")?;
    for (chain_id, n, state) in seen {
        q.execute(params![chain_id, n, state.as_ref()])?;
    }
    let mut q =
        tx.prepare_cached("UPDATE attempts SET owner_seen = ?3 WHERE chain_id = ?1 AND n = ?2")?;
    for (chain_id, n, seen) in owned {
        q.execute(params![chain_id, n, seen])?;
    }
    Ok(())
}

impl Store {
    pub fn attempts(&self, chain_id: i64) -> Result<Vec<Attempt>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {ATTEMPT_COLS} FROM {ATTEMPT_FROM} WHERE a.chain_id = ?1 ORDER BY a.n"
        ))?;
        let rows = q.query_map([chain_id], attempt_from)?;
        rows.map(|r| finish_attempt(r?)).collect()
    }

    /// The live attempts among `which` (chain, attempt number), whole, in chain order:
    /// the ones a poll must judge. Only those are kept in memory (and their plans read).
    pub fn live_attempts_of(&self, which: &HashSet<(i64, u32)>) -> Result<Vec<Attempt>> {
        if which.is_empty() {
            return Ok(Vec::new());
        }
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {ATTEMPT_COLS} FROM {ATTEMPT_FROM} WHERE a.state = 'live' ORDER BY a.chain_id"
        ))?;
        let mut rows = q.query([])?;
        let mut out = Vec::with_capacity(which.len());
        while let Some(row) = rows.next()? {
            if which.contains(&(row.get(0)?, row.get(1)?)) {
                out.push(finish_attempt(attempt_from(row)?)?);
            }
        }
        Ok(out)
    }

    /// Every live attempt, whole (the start-up bench, the store's tests; the poll reads
    /// `live_jobs`).
    pub fn live_attempts(&self) -> Result<Vec<Attempt>> {
        let mut q = self.conn.prepare_cached(&format!(
            "SELECT {ATTEMPT_COLS} FROM {ATTEMPT_FROM} WHERE a.state = 'live' ORDER BY a.chain_id"
        ))?;
        let rows = q.query_map([], attempt_from)?;
        rows.map(|r| finish_attempt(r?)).collect()
    }

    /// What the poll saw of live attempts, in one transaction: the last squeue state
    /// (chain, attempt, state), and whether Slurm has shown each attempt's job owned by
    /// its chain's owner (set when it did, cleared when the job left the queue).
    pub fn set_last_seen(
        &mut self,
        seen: &[(i64, u32, &str)],
        owned: &[(i64, u32, bool)],
    ) -> Result<()> {
        if seen.is_empty() && owned.is_empty() {
            return Ok(());
        }
        self.write(
            |tx, _| exec_set_last_seen(tx, seen, owned),
            |_, p| {
                p.push(&Op::SetLastSeen {
                    seen: seen
                        .iter()
                        .map(|&(c, n, st)| (c, n, Cow::Borrowed(st)))
                        .collect(),
                    owned: Cow::Borrowed(owned),
                })
            },
        )
    }
}
