//! Plain data about Slurm jobs, as the parsers produce it and the rest of the crate reads it.
//!
//! Job ids are kept as Slurm prints them (`123`, `123_4` for an array task, `123+0` for a
//! heterogeneous component, `123.batch` for a step) because that string is what a user
//! sees in `squeue` and `sacct` and what they pass back to the supervisor.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A job or step state, as squeue (`%T`) and sacct (`State`) print it.
///
/// Unknown states are a parse error, never a guess: a new Slurm version with a new state
/// must be looked at by a person before the supervisor acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    Pending,
    Running,
    Suspended,
    Completing,
    Configuring,
    Completed,
    Cancelled,
    Failed,
    Timeout,
    Preempted,
    NodeFail,
    BootFail,
    Deadline,
    OutOfMemory,
    Requeued,
    RequeueFed,
    RequeueHold,
    Resizing,
    Revoked,
    Signaling,
    SpecialExit,
    StageOut,
    Stopped,
    ResvDelHold,
}

impl JobState {
    /// Every state with the exact text Slurm prints for it.
    pub const ALL: [(JobState, &'static str); 24] = [
        (JobState::Pending, "PENDING"),
        (JobState::Running, "RUNNING"),
        (JobState::Suspended, "SUSPENDED"),
        (JobState::Completing, "COMPLETING"),
        (JobState::Configuring, "CONFIGURING"),
        (JobState::Completed, "COMPLETED"),
        (JobState::Cancelled, "CANCELLED"),
        (JobState::Failed, "FAILED"),
        (JobState::Timeout, "TIMEOUT"),
        (JobState::Preempted, "PREEMPTED"),
        (JobState::NodeFail, "NODE_FAIL"),
        (JobState::BootFail, "BOOT_FAIL"),
        (JobState::Deadline, "DEADLINE"),
        (JobState::OutOfMemory, "OUT_OF_MEMORY"),
        (JobState::Requeued, "REQUEUED"),
        (JobState::RequeueFed, "REQUEUE_FED"),
        (JobState::RequeueHold, "REQUEUE_HOLD"),
        (JobState::Resizing, "RESIZING"),
        (JobState::Revoked, "REVOKED"),
        (JobState::Signaling, "SIGNALING"),
        (JobState::SpecialExit, "SPECIAL_EXIT"),
        (JobState::StageOut, "STAGE_OUT"),
        (JobState::Stopped, "STOPPED"),
        (JobState::ResvDelHold, "RESV_DEL_HOLD"),
    ];

    pub fn as_str(self) -> &'static str {
        JobState::ALL
            .iter()
            .find(|(s, _)| *s == self)
            .map(|(_, t)| *t)
            .unwrap_or("UNKNOWN")
    }

    pub fn parse(text: &str) -> Option<JobState> {
        JobState::ALL
            .iter()
            .find(|(_, t)| *t == text)
            .map(|(s, _)| *s)
    }

    /// True when the job will not run again under this job id without someone acting.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Completed
                | JobState::Cancelled
                | JobState::Failed
                | JobState::Timeout
                | JobState::Preempted
                | JobState::NodeFail
                | JobState::BootFail
                | JobState::Deadline
                | JobState::OutOfMemory
                | JobState::Revoked
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `ExitCode` as sacct prints it: `code:signal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExitCode {
    pub code: i32,
    pub signal: i32,
}

impl fmt::Display for ExitCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.code, self.signal)
    }
}

/// One row of `sacct --parsable2` with the columns in [`crate::slurm::parse::SACCT_FIELDS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SacctRow {
    /// `JobID` as printed: `123`, `123_4`, `123.batch`, `123_4.0`, `123+0`, `123_[3-10]`.
    pub job_id: String,
    /// `JobIDRaw`: the numeric id Slurm uses internally (an array task has its own).
    pub job_id_raw: String,
    pub state: JobState,
    /// The uid after `CANCELLED by N`, when sacct printed one.
    pub cancelled_by: Option<u32>,
    /// A step row that sacct printed with an empty ExitCode (the `.batch` step of a job
    /// ended by NODE_FAIL) reads as 0:0.
    pub exit_code: ExitCode,
    /// `NodeList` as printed (`n1`, `n[1-2]`, `None assigned`); empty when blank.
    pub node_list: String,
    /// `MaxRSS` in bytes (sacct prints `269648K`); only step rows usually have one.
    pub max_rss_bytes: Option<u64>,
    /// `ReqMem` in bytes, per node or per cpu as printed (`100M`, older `100Mn`/`100Mc`).
    pub req_mem_bytes: Option<u64>,
    /// `Timelimit` in seconds; `None` for `UNLIMITED`, `Partition_Limit` or blank.
    pub timelimit_secs: Option<u64>,
    /// `Elapsed` in seconds.
    pub elapsed_secs: Option<u64>,
    pub partition: String,
    /// How many times Slurm requeued the job itself. sacct 22.05 has no such column (asking
    /// for `Restarts` makes it fail), so [`crate::slurm::parse::parse_sacct`] always leaves
    /// this `None`; `scontrol show job` reports it, and `--duplicates` shows each run.
    pub restarts: Option<u32>,
    /// `UID`: the job's owner as Slurm recorded it; `None` on step rows, which print none.
    pub uid: Option<u32>,
    /// `Submit`, in seconds since the epoch (sacct runs with `SLURM_TIME_FORMAT=%s`): when
    /// this run was submitted, or requeued (Slurm sets it anew on a requeue). `None` when
    /// sacct printed none.
    pub submit: Option<i64>,
}

impl SacctRow {
    /// `job_id` without any step suffix: `123_4.batch` gives `123_4`.
    pub fn job_part(&self) -> String {
        super::jobid::job_part(&self.job_id)
    }

    /// True for a step row (`123.batch`, `123.0`, `123.extern`).
    pub fn is_step(&self) -> bool {
        super::jobid::is_step(&self.job_id)
    }
}

/// One row of squeue with the format in [`crate::slurm::parse::SQUEUE_FORMAT`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqueueRow {
    /// `%i`: `123`, `123_4`, or `123_[5-10%2]` for tasks not yet started.
    pub job_id: String,
    /// `%A`: the numeric id of this job or array task.
    pub job_id_raw: String,
    pub state: JobState,
    /// `%r`: why it waits (`Priority`, `BeginTime`, `DependencyNeverSatisfied`, ...).
    pub reason: String,
    /// `%N`: nodes it runs on, empty while pending.
    pub node_list: String,
    /// `%U`: the job's owner, as Slurm recorded it.
    pub uid: u32,
}

/// A job and its comment, from the queries that look the supervisor's tags up among one
/// user's jobs ([`crate::slurm::parse::TAG_SQUEUE_FORMAT`], [`crate::slurm::parse::TAG_SACCT_FIELDS`]).
/// The comment is the job owner's text and may hold anything, a newline included: a
/// line of it can look like a row of its own, about any job. Such rows are only ever
/// candidates, believed for a chain only once the poll's own rows (which carry no text a
/// user writes) show that job owned by the chain's owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagRow {
    /// `%i` / `JobID`: `123`, `123_4`, or `123_[5-10%2]`.
    pub job_id: String,
    /// `%A` / `JobIDRaw`.
    pub job_id_raw: String,
    /// `%k` / `Comment`: empty when the job has none.
    pub comment: String,
}

/// A job held by its owner (`JobHeldUser`), with its owner and comment: one row of
/// `squeue --states=PENDING --format=<crate::slurm::parse::HELD_FORMAT>`, for cluster mode's
/// sweep of held jobs (docs/cluster.md). The comment is the user's text: data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRow {
    /// `%i`: `123`, `123_4`, or `123_[5-10]`.
    pub job_id: String,
    /// `%A`.
    pub job_id_raw: String,
    /// `%U`: the owner.
    pub uid: u32,
    /// `%k`: empty when the job has none.
    pub comment: String,
}

/// A pending job and what it still waits on: one row of
/// `squeue --states=PENDING --format=<crate::slurm::parse::PENDING_FORMAT>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingRow {
    /// `%i`: `123`, `123_4`, or `123_[5-10]` for array tasks that wait together.
    pub job_id: String,
    /// `%A`: the id `scontrol update` takes for this row.
    pub job_id_raw: String,
    /// `%u`: its owner's name.
    pub user: String,
    /// `%E`: the remaining dependency clauses with their states; empty for none.
    pub dependency: String,
}

/// What the poll's one squeue showed, folded into what the poll keeps while it was read
/// (no row of owned text is made on the way): the state of each queued job, an array's
/// pending tasks one by one (`super::jobid::queued_ids`), with its owner when the listing
/// carried owners (`%U`), and the lines that could not be read.
///
/// Whose each job is matters: an attempt sees only the rows Slurm shows owned by its
/// chain's owner ([`Queue::state`]). However a job id came to a chain (what sbatch
/// printed, a tag found in a comment, which is its owner's text), a job of anyone else is
/// never judged, retried, requeued or cancelled for it, nor shown to it. Two chains of two
/// users holding the same id each see their own owner's rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Queue {
    /// Each job's state, and the owner of the first line that showed it (0 and unused
    /// when `owners` is false).
    jobs: std::collections::HashMap<String, (u32, JobState)>,
    /// A job id shown again as another owner's than its first line's (one listing never
    /// shows it; kept apart so that each owner still sees only its own rows).
    others: std::collections::HashMap<u32, std::collections::HashMap<String, JobState>>,
    /// Whether the listing carried each job's owner; without (`squeue
    /// --only-job-state`), asked only for jobs whose owner Slurm has shown before.
    owners: bool,
    /// The lines that could not be read.
    pub errors: Vec<super::parse::RowError>,
}

impl Queue {
    /// An empty listing with owners, with room for `jobs` jobs.
    pub fn with_owners(jobs: usize) -> Queue {
        Queue {
            jobs: std::collections::HashMap::with_capacity(jobs),
            owners: true,
            ..Queue::default()
        }
    }

    /// An empty listing of states alone, with room for `jobs` jobs.
    pub fn states_only(jobs: usize) -> Queue {
        Queue {
            jobs: std::collections::HashMap::with_capacity(jobs),
            ..Queue::default()
        }
    }

    /// Adds one row: job `job_id` (a range of pending tasks stands for each of them)
    /// owned by `uid` (ignored in a listing of states alone) in `state`. A later row of
    /// the same job and owner wins.
    pub fn add(&mut self, uid: u32, job_id: String, state: JobState) {
        let owners = self.owners;
        super::jobid::queued_ids(job_id, |id| match self.jobs.get_mut(&id) {
            Some(seen) if !owners || seen.0 == uid => seen.1 = state,
            Some(_) => {
                self.others.entry(uid).or_default().insert(id, state);
            }
            None => {
                self.jobs.insert(id, (if owners { uid } else { 0 }, state));
            }
        });
    }

    /// Whether the listing carried each job's owner.
    pub fn has_owners(&self) -> bool {
        self.owners
    }

    /// The state Slurm shows for job `jid` of an attempt whose chain is `owner`'s, if it
    /// shows it as the attempt's (in a listing of states alone: if it shows it).
    pub fn state(&self, owner: u32, jid: &str) -> Option<JobState> {
        match self.jobs.get(jid) {
            Some(&(uid, state)) if !self.owners || uid == owner => Some(state),
            _ => self.others.get(&owner)?.get(jid).copied(),
        }
    }

    /// Another owner Slurm shows job `jid` as, if any (only a listing with owners tells).
    pub fn other_owner(&self, owner: u32, jid: &str) -> Option<u32> {
        if !self.owners {
            return None;
        }
        match self.jobs.get(jid) {
            Some(&(uid, _)) if uid != owner => Some(uid),
            _ => self
                .others
                .iter()
                .find(|(uid, q)| **uid != owner && q.contains_key(jid))
                .map(|(uid, _)| *uid),
        }
    }

    /// How many (job, owner) pairs it shows.
    pub fn len(&self) -> usize {
        self.jobs.len() + self.others.values().map(|q| q.len()).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every job it shows, with its owner (`None` in a listing of states alone) and state.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Option<u32>, JobState)> + '_ {
        let owner = |uid: u32| self.owners.then_some(uid);
        self.jobs
            .iter()
            .map(move |(id, &(uid, state))| (id.as_str(), owner(uid), state))
            .chain(self.others.iter().flat_map(|(&uid, q)| {
                q.iter()
                    .map(move |(id, &state)| (id.as_str(), Some(uid), state))
            }))
    }

    /// Each job's state, whoever owns it (for comparing two listings).
    pub fn states(&self) -> std::collections::HashMap<String, JobState> {
        self.iter()
            .map(|(id, _, state)| (id.to_string(), state))
            .collect()
    }
}

#[cfg(test)]
mod pending_listing_tests {
    /// The poll's map is sized for the ids asked, not from the listing's line count: in
    /// the listing that reads some users' pending jobs too, most lines can be theirs
    /// (every pending job of every open chain's owner when the waiters' report is due, up
    /// to `PENDING_BUDGET`), not the poll's: the map kept until the cycle lands is sized for
    /// all of them. Here one job of the poll's among 100,000 other pending lines.
    #[test]
    fn the_polls_map_is_not_sized_by_other_users_pending_lines() {
        let mut out = String::from("7|7|RUNNING|None|n1|1000|alice|(null)\n");
        for i in 0..100_000u32 {
            out.push_str(&format!(
                "{}|{}|PENDING|Priority||1001|bob|(null)\n",
                1_000_000 + i,
                1_000_000 + i
            ));
        }
        let (q, p) =
            super::super::parse::fold_squeue_pending(&out, |j| j == "7", 1, |u| u == "bob");
        assert_eq!(q.len(), 1);
        assert_eq!(p.rows.len(), 100_000);
        assert!(
            q.jobs.capacity() < 1_000,
            "the poll's map holds 1 job but has room for {} (sized by the other users' lines)",
            q.jobs.capacity()
        );
    }
}
