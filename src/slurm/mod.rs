//! Everything that talks to Slurm. No other module runs a Slurm command.
//!
//! [`Slurm`] is the seam: [`cli::SlurmCli`] runs the real commands, tests swap in fakes
//! (fake executables on disk, or an in-process implementation). Queries are batched: one
//! squeue for every live job per cycle, sacct in chunks of job ids, never one per job.

pub mod cli;
/// The in-process fake is for tests only: the lib's own unit tests, and the tests in
/// `tests/` through the `fake-slurm` feature that the crate's dev-dependency on itself
/// turns on. A release build does not contain it.
#[cfg(any(test, feature = "fake-slurm"))]
pub mod fake;
pub mod jobid;
pub mod parse;
pub mod spawn;
pub mod types;

use parse::Parsed;
use std::collections::HashMap;
use std::path::PathBuf;
use types::{HeldRow, PendingRow, Queue, SacctRow, SqueueRow, TagRow};

/// The variable that turns the plain-sbatch cli_filter and job_submit script off for one
/// submission (`config/slurm/cli_filter.lua`). Every sbatch the daemon runs has it set to
/// `off`: the daemon's own jobs are never noted or marked as plain sbatch.
pub const PLAIN_SWITCH: &str = "SLURM_SUPERVISOR";

/// An sbatch to run: the exact argv (without the `sbatch` itself), where, with what environment.
#[derive(Debug, Clone)]
pub struct SbatchRequest {
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    /// Text to feed on stdin (a script given on stdin); `None` closes stdin.
    pub stdin: Option<Vec<u8>>,
    /// The user to run it as (a system-wide daemon acts for users, never as root for them).
    pub run_as: Option<RunAs>,
    /// The job is held by what it is submitted with (`--hold` in the argv or in the
    /// script's `#SBATCH` lines: a gate, the user's own): cluster mode does not release
    /// it.
    pub held: bool,
}

/// A user a command runs as: uid, primary gid, and the name for their supplementary groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    pub user: std::ffi::CString,
}

impl RunAs {
    /// The account of `uid`, or `None` if the system does not know it. Accounts found are
    /// kept a minute (nscd keeps them ten): the loop asks for its users' accounts at every
    /// submit, retry and scancel, and an NSS lookup there (reading /etc/passwd, or asking
    /// sssd or LDAP) is time it does not spend on anyone else. An unknown uid is asked
    /// again each time, so an account that appears is known at once. The group list is
    /// not kept (`spawn` asks for it at each start, on the starter thread).
    pub fn lookup(uid: u32) -> Option<RunAs> {
        use std::collections::HashMap;
        use std::sync::Mutex;
        use std::time::{Duration, Instant};
        const KEEP: Duration = Duration::from_secs(60);
        const MAX_KEPT: usize = 4096;
        static KEPT: Mutex<Option<HashMap<u32, (RunAs, Instant)>>> = Mutex::new(None);
        let now = Instant::now();
        if let Some((who, at)) = KEPT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|m| m.get(&uid))
        {
            if now.duration_since(*at) < KEEP {
                return Some(who.clone());
            }
        }
        let u = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()?;
        let who = RunAs {
            uid,
            gid: u.gid.as_raw(),
            user: std::ffi::CString::new(u.name).ok()?,
        };
        let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        let kept = kept.get_or_insert_with(HashMap::new);
        if kept.len() >= MAX_KEPT {
            kept.retain(|_, (_, at)| now.duration_since(*at) < KEEP);
            if kept.len() >= MAX_KEPT {
                kept.clear();
            }
        }
        kept.insert(uid, (who.clone(), now));
        Some(who)
    }
}

/// Why a Slurm command gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// Slurm could not answer (controller or database down, a timeout). Nothing may be
    /// concluded about any job from this.
    #[error("{command} could not reach Slurm ({status}): {stderr}")]
    Unavailable {
        command: String,
        status: String,
        stderr: String,
    },
    /// Slurm answered and refused (an invalid option, an unknown partition).
    #[error("{command} was refused ({status}): {stderr}")]
    Rejected {
        command: String,
        status: String,
        code: i32,
        stderr: String,
    },
    /// The command ran too long and was killed.
    #[error("{command} did not finish within {secs}s and was killed")]
    Timeout { command: String, secs: u64 },
    /// A command run as a user was held before it started (its working directory did not
    /// answer, or it was stopped) and killed after `secs`. Killed at that instant it may
    /// just have started. A matter of that user's folder, not a sign that Slurm is down.
    #[error("{command} was held before it started for {secs}s (its working directory does not answer, it was stopped, or it waited behind such a start of the same user) and was killed")]
    Held { command: String, secs: u64 },
    /// The command could not be started at all.
    #[error("cannot run {command}: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// It was started, but reading its output or waiting for it failed: it may have
    /// done its work.
    #[error("{command} was started but could not be followed to its end: {source}")]
    Io {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// It printed something that is not what it should print.
    #[error("{command} printed output that could not be understood: {message}")]
    Garbage { command: String, message: String },
    /// It was not run: this daemon does not act now (cluster mode: another daemon holds
    /// the lease, or this one cannot tell whether it still does).
    #[error("{command} was not run: this daemon is not the active one now")]
    NotActive { command: String },
}

impl SlurmError {
    /// True when the command may have taken effect even though it reported failure (an
    /// sbatch whose reply was lost): the caller must look before repeating it. False only
    /// when the command certainly never reached Slurm (the controller refused
    /// the connection): then nothing can have been created.
    pub fn may_have_reached_slurm(&self) -> bool {
        match self {
            SlurmError::Unavailable { stderr, .. } => {
                !(stderr.contains("connect failure") || stderr.contains("Connection refused"))
            }
            SlurmError::Spawn { .. }
            | SlurmError::Rejected { .. }
            | SlurmError::NotActive { .. } => false,
            SlurmError::Timeout { .. }
            | SlurmError::Held { .. }
            | SlurmError::Garbage { .. }
            | SlurmError::Io { .. } => true,
        }
    }

    /// False for a failure that says nothing about Slurm itself (a user's start held
    /// before it ran): no outage is noted and polling does not back off for it.
    pub fn is_slurms(&self) -> bool {
        !matches!(self, SlurmError::Held { .. } | SlurmError::NotActive { .. })
    }
}

/// What [`Slurm::squeue_with_pending`] read: the jobs asked about, and the users'
/// pending jobs (or why they could not be read).
pub type PolledWithPending = (Queue, PendingAnswer);

/// Some users' pending jobs, or why they could not be read.
pub type PendingAnswer = Result<Parsed<PendingRow>, SlurmError>;

/// The batch system, as the supervisor uses it.
#[allow(async_fn_in_trait)]
pub trait Slurm {
    /// Submits; returns the job id sbatch printed.
    async fn sbatch(&self, req: &SbatchRequest) -> Result<String, SlurmError>;
    /// The live view of these jobs (base ids; array tasks are listed one per row).
    /// Jobs squeue no longer knows are simply absent.
    async fn squeue(&self, job_ids: &[String]) -> Result<Parsed<SqueueRow>, SlurmError>;
    /// The poll's view of these jobs (base ids), as [`Slurm::squeue`] shows them, folded
    /// into a [`Queue`] as it is read: each job's state by owner, an array's tasks one by
    /// one. No row of owned text is made on the way.
    async fn poll_queue(&self, job_ids: &[String]) -> Result<Queue, SlurmError>;
    /// The states alone of these jobs (base ids; an array's tasks one by one), one
    /// controller query that carries nothing else (`squeue --only-job-state`), folded as
    /// read; `None` when this Slurm's squeue cannot (before 23.11.5): ask
    /// [`Slurm::poll_queue`] instead.
    async fn job_states(&self, job_ids: &[String]) -> Result<Option<Queue>, SlurmError>;
    /// Every job of one user that squeue knows, with its comment, to look submissions up
    /// by their tag. The rows are candidates only (see [`TagRow`]).
    async fn squeue_user(&self, user: &str) -> Result<Parsed<TagRow>, SlurmError>;
    /// One job (a base id: an array's tasks are listed one per row) with its comment, to
    /// check the tag of a job sbatch said it made. The rows are candidates only.
    async fn squeue_tags(&self, job_id: &str) -> Result<Parsed<TagRow>, SlurmError>;
    /// The accounting records of these jobs, requeued runs included (`--duplicates`).
    async fn sacct(&self, job_ids: &[String]) -> Result<Parsed<SacctRow>, SlurmError>;
    /// The accounting records of one user's jobs since a unix time, with their comments,
    /// to find tags. The rows are candidates only (see [`TagRow`]).
    async fn sacct_user_since(&self, user: &str, since: i64) -> Result<Parsed<TagRow>, SlurmError>;
    /// Cancels jobs, in one call (as `run_as`, when given). Jobs that already ended are
    /// not an error.
    async fn scancel(&self, job_ids: &[String], run_as: Option<&RunAs>) -> Result<(), SlurmError>;
    /// Every job the controller knows whose admin comment is exactly `mark` (the
    /// plain-sbatch job_submit script's, docs/plain-sbatch.md): `(job id, uid)` candidates
    /// (see [`parse::parse_marked`]), in one squeue.
    async fn marked_jobs(&self, mark: &str) -> Result<Vec<(String, u32)>, SlurmError>;
    /// `scontrol show job -o`: one job's record as key/value pairs (for an array whose
    /// tasks Slurm shows apart, or a heterogeneous job, the first line's: its
    /// `ArrayJobId` or `HetJobId` says what the job is).
    async fn show_job(
        &self,
        job_id: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, SlurmError>;
    /// `scontrol write batch_script`: the script Slurm holds for a job.
    async fn batch_script(&self, job_id: &str) -> Result<Vec<u8>, SlurmError>;
    /// Each partition's MaxTime in seconds (`None`: unlimited).
    async fn partition_limits(&self) -> Result<HashMap<String, Option<u64>>, SlurmError>;
    /// These users' pending jobs with what they still wait on (`--dependency`), in one
    /// squeue: where the jobs that wait on a chain's earlier attempt are found.
    async fn pending_of_users(&self, users: &[String]) -> Result<Parsed<PendingRow>, SlurmError>;
    /// [`Slurm::poll_queue`] of `job_ids` and [`Slurm::pending_of_users`] of `users`, in
    /// one controller query where Slurm allows (the real one: one squeue of every job,
    /// whose pending part then never fails alone).
    async fn squeue_with_pending(
        &self,
        job_ids: &[String],
        users: &[String],
    ) -> Result<PolledWithPending, SlurmError> {
        let queue = self.poll_queue(job_ids).await?;
        let pending = self.pending_of_users(users).await;
        Ok((queue, pending))
    }
    /// `scontrol update JobId=<job> Dependency=<dependency>` (as `run_as`, when given).
    async fn set_dependency(
        &self,
        job_id: &str,
        dependency: &str,
        run_as: Option<&RunAs>,
    ) -> Result<(), SlurmError>;
    /// `scontrol release <jobs>`: lets held jobs be scheduled (as `run_as`, when given).
    async fn release(&self, job_ids: &[String], run_as: Option<&RunAs>) -> Result<(), SlurmError>;
    /// slurm.conf's `MailProg` (`scontrol show config`), `None` when unset. The in-process
    /// fake has none.
    async fn mail_prog(&self) -> Result<Option<String>, SlurmError> {
        Ok(None)
    }
    /// Every job its owner holds (`JobHeldUser`) whose comment holds `needle`, in one
    /// squeue of the pending jobs: cluster mode's sweep (a job submitted held by a daemon
    /// that was deposed before it could record it). The in-process fake has none.
    async fn held_with(&self, needle: &str) -> Result<Parsed<HeldRow>, SlurmError> {
        let _ = needle;
        Ok(Parsed {
            rows: Vec::new(),
            errors: Vec::new(),
        })
    }
    /// One job, asked about by id, if its owner holds it (`JobHeldUser`): what the sweep
    /// believes of a job, never a line of the listing (a comment can run onto a line of
    /// its own there).
    async fn held_job(&self, job_id: &str) -> Result<Option<HeldRow>, SlurmError> {
        let _ = job_id;
        Ok(None)
    }
    /// Whether this client released `job_id` itself right after submitting it held
    /// (cluster mode's `daemon::cluster::Guarded`): `Some(true)` released, so a hold seen
    /// later is its owner's own; `Some(false)` left held (the release failed, or did not
    /// fit the lease); `None` not known (submitted by another daemon or before a restart,
    /// or not in cluster mode).
    fn released_after_submit(&self, job_id: &str) -> Option<bool> {
        let _ = job_id;
        None
    }
    /// `scancel --state=PENDING JOB` (as `run_as`): cancels the job only if it has not
    /// started.
    async fn cancel_pending(&self, job_id: &str, run_as: Option<&RunAs>) -> Result<(), SlurmError> {
        self.scancel(&[job_id.to_string()], run_as).await
    }
    /// slurm.conf's `SlurmUser`'s uid (`scontrol show config`: `slurm(64030)`), the
    /// account slurmctld and slurmdbd run as. The in-process fake has none.
    async fn slurm_user_uid(&self) -> Result<Option<u32>, SlurmError> {
        Ok(None)
    }
    /// slurm.conf's `ClusterName` (`scontrol show config`): cluster mode's shared database
    /// belongs to one cluster. The in-process fake's is `fake`.
    async fn cluster_name(&self) -> Result<Option<String>, SlurmError> {
        Ok(Some("fake".into()))
    }
    /// `scontrol requeuehold J` (as `run_as`): a job that ended, still known to
    /// slurmctld, goes back to the queue under the same id, held.
    async fn requeue_hold(&self, job_id: &str, run_as: Option<&RunAs>) -> Result<(), SlurmError>;
    /// `scontrol update JobId=J <fields>` (as `run_as`), e.g. `MinMemoryNode=400` (a
    /// number in MB: `400M` is refused), `TimeLimit=01:00:00`, `ExcNodeList=n1`,
    /// `Partition=p`.
    async fn update_job(
        &self,
        job_id: &str,
        fields: &[String],
        run_as: Option<&RunAs>,
    ) -> Result<(), SlurmError>;
}
