//! An in-process fake of the [`Slurm`] trait, for tests that drive the engine directly.
//!
//! Jobs live in memory. `sbatch` reads the request the way sbatch does (command line over
//! the script's `#SBATCH` lines), hands out job ids (one per array task) and records the
//! call; `squeue` lists the jobs still queued or running; `sacct` answers with the rows
//! real sacct `--duplicates` prints in the column order of [`parse::SACCT_FIELDS`]: a job
//! row and its `.batch` step for each run, earlier (requeued) runs first.
//!
//! Test code moves jobs along: [`FakeSlurm::start`] puts a pending job on a node,
//! [`FakeSlurm::end`] ends it with a chosen [`Ending`] in the shape Slurm really records
//! it (see docs/slurm-observed.md), [`FakeSlurm::requeue`] has Slurm requeue it itself.
//! Every command can be switched to fail as "Slurm is not answering", and sbatch can be
//! made to lose its reply (the job exists, the caller hears nothing) or to refuse.
//!
//! Presets: nodes `n1`..`n4`; partitions `debug` (default, MaxTime 30 minutes) and
//! `long` (unlimited); memory 1000M when no `--mem` is given (DefMemPerCPU=1000).

use super::jobid::JobId;
use super::parse::{self, Parsed};
use super::types::{ExitCode, HeldRow, JobState, PendingRow, Queue, SacctRow, SqueueRow, TagRow};
use super::{SbatchRequest, Slurm, SlurmError};
use crate::domain::sbatch_args;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// The nodes of the fake cluster, in the order jobs are placed on them.
pub const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

/// The partition a job without `--partition` runs in.
pub const DEFAULT_PARTITION: &str = "debug";

/// Memory a job without `--mem` gets.
pub const DEFAULT_MEM_BYTES: u64 = 1000 << 20;

/// A Slurm command of the trait, to switch it off and to count its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Command {
    Sbatch,
    Squeue,
    /// `squeue --only-job-state`: the poll's state-only query.
    JobStates,
    SqueueUser,
    Sacct,
    SacctUserSince,
    Scancel,
    ShowJob,
    BatchScript,
    PartitionLimits,
    PendingOfUsers,
    SetDependency,
    RequeueHold,
    UpdateJob,
    Release,
}

impl Command {
    pub const ALL: [Command; 15] = [
        Command::Sbatch,
        Command::Squeue,
        Command::JobStates,
        Command::SqueueUser,
        Command::Sacct,
        Command::SacctUserSince,
        Command::Scancel,
        Command::ShowJob,
        Command::BatchScript,
        Command::PartitionLimits,
        Command::PendingOfUsers,
        Command::SetDependency,
        Command::RequeueHold,
        Command::UpdateJob,
        Command::Release,
    ];

    /// The program that would have run.
    pub fn program(self) -> &'static str {
        match self {
            Command::Sbatch => "sbatch",
            Command::Squeue
            | Command::JobStates
            | Command::SqueueUser
            | Command::PendingOfUsers => "squeue",
            Command::Sacct | Command::SacctUserSince => "sacct",
            Command::Scancel => "scancel",
            Command::ShowJob
            | Command::BatchScript
            | Command::SetDependency
            | Command::RequeueHold
            | Command::UpdateJob
            | Command::Release => "scontrol",
            Command::PartitionLimits => "sinfo",
        }
    }
}

/// How a job ends, as test code chooses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// COMPLETED 0:0.
    Completed,
    /// FAILED with this exit code (`code:0`), `.batch` the same.
    Failed(i32),
    /// OUT_OF_MEMORY 0:125 on the job row and the `.batch` step (cgroup enforcement).
    OutOfMemory,
    /// FAILED 1:0 on the job row, OUT_OF_MEMORY 0:125 only on step `.0`.
    OutOfMemoryInStep,
    /// COMPLETED 0:0 on the job row although step `.0` is OUT_OF_MEMORY 0:125 (cgroup
    /// kills of a step the script survived): not a success.
    CompletedWithStepOom,
    /// TIMEOUT 0:0, `.batch` CANCELLED 0:15; Elapsed a little over the limit.
    Timeout,
    /// NODE_FAIL 0:0 on the job's node, `.batch` CANCELLED with an empty exit code.
    NodeFail,
    /// BOOT_FAIL 0:0 on the job's node, no step.
    BootFail,
    /// PREEMPTED 0:0 and not requeued (`--no-requeue`), `.batch` CANCELLED 0:15.
    Preempted,
    /// `CANCELLED by <uid>`; a job that never ran has no step and no node.
    CancelledBy(u32),
    /// `CANCELLED` by nobody, before it ran: Slurm cancelled a job whose dependency can
    /// never be satisfied (`kill_invalid_depend`, `--kill-on-invalid-dep=yes`).
    CancelledForDependency,
    /// DEADLINE 0:0 (`--deadline` passed before it could run).
    Deadline,
}

/// What one sbatch call asked for and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SbatchCall {
    pub argv: Vec<String>,
    pub cwd: std::path::PathBuf,
    /// Whether the caller said the job is held by what it is submitted with
    /// ([`SbatchRequest::held`]: cluster mode then never releases it).
    pub held: bool,
    /// The value in force (command line over script) of each option.
    pub comment: Option<String>,
    pub array: Option<String>,
    pub mem: Option<String>,
    pub time: Option<String>,
    pub exclude: Option<String>,
    pub partition: Option<String>,
    /// The job id created, if one was (also when the reply was lost).
    pub job_id: Option<String>,
    /// What the caller was told: the job id, or the error.
    pub reply: Result<String, String>,
}

/// One job (or array task) of the fake, with the runs Slurm requeued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeJob {
    /// `123` or `123_4`.
    pub id: String,
    /// `123`, or the task's own numeric id.
    pub raw_id: String,
    pub array_task: Option<u32>,
    pub comment: String,
    pub partition: String,
    pub req_mem_bytes: u64,
    /// `None`: the partition's limit.
    pub timelimit_secs: Option<u64>,
    pub exclude: Vec<String>,
    pub argv: Vec<String>,
    pub script: Option<Vec<u8>>,
    /// The current run's state.
    pub state: JobState,
    /// The node of the current run, once it started.
    pub node: Option<String>,
    /// The current run's rows once it ended: job row first, then steps.
    pub ended_rows: Option<Vec<SacctRow>>,
    /// Rows of the runs Slurm requeued, oldest first (job row, then steps, per run).
    pub requeued_runs: Vec<Vec<SacctRow>>,
    /// `--dependency` as given (or as `scontrol update` set it).
    pub dependency: String,
    /// Submitted with `--hold`, or requeued with `scontrol requeuehold`, and not
    /// released yet: it does not start.
    pub held: bool,
    /// The owner's name (the user sbatch ran as).
    pub user: String,
    /// The owner's uid.
    pub uid: u32,
}

impl FakeJob {
    /// The base job id (`123` for `123_4`).
    pub fn base_id(&self) -> String {
        JobId::parse(&self.id).map_or_else(|_| self.id.clone(), |j| j.base().to_string())
    }

    pub fn is_live(&self) -> bool {
        !self.state.is_terminal()
    }

    fn job_row(&self, state: JobState, exit: ExitCode, elapsed: u64) -> SacctRow {
        SacctRow {
            job_id: self.id.clone(),
            job_id_raw: self.raw_id.clone(),
            state,
            cancelled_by: None,
            exit_code: exit,
            node_list: self
                .node
                .clone()
                .unwrap_or_else(|| "None assigned".to_string()),
            max_rss_bytes: None,
            req_mem_bytes: Some(self.req_mem_bytes),
            timelimit_secs: self.timelimit_secs,
            elapsed_secs: Some(elapsed),
            partition: self.partition.clone(),
            restarts: None,
            uid: Some(self.uid),
            // No clock here: no Submit time, so every run of a job id is its own (the
            // judge tells an older job of the same id only by a Submit time).
            submit: None,
        }
    }

    fn step_row(&self, step: &str, state: JobState, exit: ExitCode, rss: Option<u64>) -> SacctRow {
        SacctRow {
            job_id: format!("{}.{step}", self.id),
            job_id_raw: format!("{}.{step}", self.raw_id),
            state,
            cancelled_by: None,
            exit_code: exit,
            node_list: self.node.clone().unwrap_or_default(),
            max_rss_bytes: rss,
            req_mem_bytes: None,
            timelimit_secs: None,
            elapsed_secs: Some(5),
            partition: String::new(),
            restarts: None,
            uid: None,
            submit: None,
        }
    }

    /// The rows of the current run, as sacct shows them now.
    fn current_rows(&self) -> Vec<SacctRow> {
        if let Some(rows) = &self.ended_rows {
            return rows.clone();
        }
        let mut rows = vec![self.job_row(self.state, ExitCode::default(), 0)];
        if self.node.is_some() {
            rows[0].elapsed_secs = Some(5);
            rows.push(self.step_row("batch", JobState::Running, ExitCode::default(), None));
        }
        rows
    }

    /// Every row sacct `--duplicates` prints for this job, oldest run first.
    pub fn sacct_rows(&self) -> Vec<SacctRow> {
        let mut out: Vec<SacctRow> = self.requeued_runs.iter().flatten().cloned().collect();
        out.extend(self.current_rows());
        out
    }
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    jobs: BTreeMap<String, FakeJob>,
    calls: Vec<SbatchCall>,
    down: HashSet<Command>,
    counts: HashMap<Command, u32>,
    lose_next_reply: bool,
    refuse_next: Option<String>,
    /// `scontrol update` of a job refuses fields starting with this (`TimeLimit=`).
    refuse_update: Option<(String, String)>,
    show_ended_in_squeue: bool,
    /// squeue has `--only-job-state` (Slurm 23.11.5 on); on unless switched off.
    only_job_state: bool,
    partitions: HashMap<String, Option<u64>>,
    /// Partitions sinfo does not show.
    unlisted: std::collections::HashSet<String>,
}

impl State {
    /// The jobs squeue shows of `job_ids` (ids or base ids).
    fn queued<'a>(&'a self, job_ids: &'a [String]) -> impl Iterator<Item = &'a FakeJob> + 'a {
        self.jobs
            .values()
            .filter(|j| j.is_live() || self.show_ended_in_squeue)
            .filter(|j| job_ids.iter().any(|id| *id == j.id || *id == j.base_id()))
    }
}

/// The fake batch system. It is `Sync` (a `Mutex` inside) but meant to be driven from one
/// thread, as the engine is. A clone is the same batch system (as `SlurmCli`'s clones
/// run the same commands).
#[derive(Debug, Clone)]
pub struct FakeSlurm {
    state: std::sync::Arc<Mutex<State>>,
}

impl Default for FakeSlurm {
    fn default() -> Self {
        Self::new()
    }
}

fn unavailable(cmd: Command) -> SlurmError {
    SlurmError::Unavailable {
        command: cmd.program().to_string(),
        status: "exit code 1".to_string(),
        stderr: format!(
            "{}: error: Unable to contact slurm controller (connect failure)",
            cmd.program()
        ),
    }
}

fn rejected(cmd: Command, stderr: &str) -> SlurmError {
    SlurmError::Rejected {
        command: cmd.program().to_string(),
        status: "exit code 1".to_string(),
        code: 1,
        stderr: stderr.to_string(),
    }
}

fn exit(code: i32, signal: i32) -> ExitCode {
    ExitCode { code, signal }
}

impl FakeSlurm {
    pub fn new() -> Self {
        let partitions = HashMap::from([
            (DEFAULT_PARTITION.to_string(), Some(30 * 60)),
            ("long".to_string(), None),
        ]);
        FakeSlurm {
            state: std::sync::Arc::new(Mutex::new(State {
                next_id: 100,
                partitions,
                only_job_state: true,
                ..State::default()
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock has failed already; its data is
        // still the best evidence there is.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a call and fails it if the command is switched off.
    fn enter(&self, cmd: Command) -> Result<MutexGuard<'_, State>, SlurmError> {
        let mut s = self.lock();
        *s.counts.entry(cmd).or_default() += 1;
        if s.down.contains(&cmd) {
            return Err(unavailable(cmd));
        }
        Ok(s)
    }

    /// Makes `cmd` fail as "Slurm is not answering" (`true`) or work again.
    pub fn set_unavailable(&self, cmd: Command, down: bool) {
        let mut s = self.lock();
        if down {
            s.down.insert(cmd);
        } else {
            s.down.remove(&cmd);
        }
    }

    /// Switches every command off (`true`) or on.
    pub fn set_all_unavailable(&self, down: bool) {
        for c in Command::ALL {
            self.set_unavailable(c, down);
        }
    }

    /// The next sbatch creates its job but its caller hears only a timeout.
    pub fn lose_next_sbatch_reply(&self) {
        self.lock().lose_next_reply = true;
    }

    /// The next sbatch is refused with this stderr (and creates nothing).
    pub fn refuse_next_sbatch(&self, stderr: &str) {
        self.lock().refuse_next = Some(stderr.to_string());
    }

    /// `scontrol update` refuses any field that starts with `field` (`TimeLimit=`) with
    /// this stderr, as Slurm refuses a longer time limit to a non-operator.
    pub fn refuse_update(&self, field: &str, stderr: &str) {
        self.lock().refuse_update = Some((field.to_string(), stderr.to_string()));
    }

    /// Whether squeue has `--only-job-state` (on by default, as 24.11's; off: as 22.05's).
    pub fn set_only_job_state(&self, on: bool) {
        self.lock().only_job_state = on;
    }

    /// Whether squeue still lists ended jobs with their final state, as it does within
    /// MinJobAge (`--states=all`). Off by default: ended jobs are simply absent.
    pub fn show_ended_in_squeue(&self, on: bool) {
        self.lock().show_ended_in_squeue = on;
    }

    /// A partition jobs may run in but that sinfo does not list (hidden from the user).
    pub fn set_unlisted_partition(&self, name: &str) {
        let mut s = self.lock();
        s.partitions.insert(name.to_string(), None);
        s.unlisted.insert(name.to_string());
    }

    /// Sets a partition's MaxTime (`None`: unlimited).
    pub fn set_partition(&self, name: &str, max_secs: Option<u64>) {
        self.lock().partitions.insert(name.to_string(), max_secs);
    }

    /// How many times `cmd` was called (failed calls included).
    pub fn calls(&self, cmd: Command) -> u32 {
        self.lock().counts.get(&cmd).copied().unwrap_or(0)
    }

    /// Every sbatch call, in order.
    pub fn sbatch_calls(&self) -> Vec<SbatchCall> {
        self.lock().calls.clone()
    }

    /// Every job and array task, by id.
    pub fn jobs(&self) -> BTreeMap<String, FakeJob> {
        self.lock().jobs.clone()
    }

    pub fn job(&self, id: &str) -> Option<FakeJob> {
        self.lock().jobs.get(id).cloned()
    }

    /// The ids of jobs still pending or running, in id order.
    pub fn live_jobs(&self) -> Vec<String> {
        let s = self.lock();
        let mut ids: Vec<&FakeJob> = s.jobs.values().filter(|j| j.is_live()).collect();
        ids.sort_by_key(|j| (j.raw_id.parse::<u64>().unwrap_or(0), j.id.clone()));
        ids.into_iter().map(|j| j.id.clone()).collect()
    }

    /// Slurm shows the job owned by `uid` (another user's job under this id, as when a job
    /// id came to a chain from text its owner wrote). False if the job is unknown.
    pub fn set_owner(&self, id: &str, uid: u32) -> bool {
        let mut s = self.lock();
        let Some(j) = s.jobs.get_mut(id) else {
            return false;
        };
        j.uid = uid;
        true
    }

    /// Holds a pending job, as its owner's `scontrol hold` does (`JobHeldUser`). False if
    /// it is not pending.
    pub fn hold(&self, id: &str) -> bool {
        let mut s = self.lock();
        match s.jobs.get_mut(id) {
            Some(j) if j.state == JobState::Pending => {
                j.held = true;
                true
            }
            _ => false,
        }
    }

    /// Starts a pending job on the first node it does not exclude. False if it is not pending.
    pub fn start(&self, id: &str) -> bool {
        let mut s = self.lock();
        let Some(j) = s.jobs.get_mut(id) else {
            return false;
        };
        start_job(j)
    }

    /// Ends a live job (starting it first when the ending needs a node). False if the job
    /// is unknown or has ended already.
    pub fn end(&self, id: &str, ending: Ending) -> bool {
        let mut s = self.lock();
        let Some(j) = s.jobs.get_mut(id) else {
            return false;
        };
        if !j.is_live() {
            return false;
        }
        let needs_node = !matches!(
            ending,
            Ending::CancelledBy(_) | Ending::CancelledForDependency | Ending::Deadline
        );
        if needs_node && j.node.is_none() {
            start_job(j);
        }
        let ran = j.node.is_some();
        let limit = j.timelimit_secs.unwrap_or(3600);
        let mem = j.req_mem_bytes;
        let (state, code, mut steps) = match ending {
            Ending::Completed => (
                JobState::Completed,
                exit(0, 0),
                vec![j.step_row("batch", JobState::Completed, exit(0, 0), Some(mem / 8))],
            ),
            Ending::Failed(c) => (
                JobState::Failed,
                exit(c, 0),
                vec![j.step_row("batch", JobState::Failed, exit(c, 0), Some(mem / 8))],
            ),
            Ending::OutOfMemory => (
                JobState::OutOfMemory,
                exit(0, 125),
                vec![j.step_row(
                    "batch",
                    JobState::OutOfMemory,
                    exit(0, 125),
                    Some(mem + mem / 50),
                )],
            ),
            Ending::OutOfMemoryInStep => (
                JobState::Failed,
                exit(1, 0),
                vec![
                    j.step_row("batch", JobState::Failed, exit(1, 0), Some(mem / 16)),
                    j.step_row("0", JobState::OutOfMemory, exit(0, 125), Some(mem)),
                ],
            ),
            Ending::CompletedWithStepOom => (
                JobState::Completed,
                exit(0, 0),
                vec![
                    j.step_row("batch", JobState::Completed, exit(0, 0), Some(mem / 16)),
                    j.step_row("0", JobState::OutOfMemory, exit(0, 125), Some(mem)),
                ],
            ),
            Ending::Timeout => (
                JobState::Timeout,
                exit(0, 0),
                vec![j.step_row("batch", JobState::Cancelled, exit(0, 15), Some(mem / 8))],
            ),
            Ending::NodeFail => (
                JobState::NodeFail,
                exit(0, 0),
                vec![j.step_row("batch", JobState::Cancelled, exit(0, 0), None)],
            ),
            Ending::BootFail => (JobState::BootFail, exit(0, 0), vec![]),
            Ending::Preempted => (
                JobState::Preempted,
                exit(0, 0),
                vec![j.step_row("batch", JobState::Cancelled, exit(0, 15), Some(mem / 8))],
            ),
            Ending::CancelledBy(_) => (
                JobState::Cancelled,
                exit(0, 0),
                if ran {
                    vec![j.step_row("batch", JobState::Cancelled, exit(0, 15), Some(mem / 8))]
                } else {
                    vec![]
                },
            ),
            Ending::Deadline => (JobState::Deadline, exit(0, 0), vec![]),
            Ending::CancelledForDependency => (JobState::Cancelled, exit(0, 0), vec![]),
        };
        let elapsed = match (ending, ran) {
            (_, false) => 0,
            (Ending::Timeout, true) => limit + 27,
            (_, true) => 20,
        };
        let mut row = j.job_row(state, code, elapsed);
        if let Ending::CancelledBy(uid) = ending {
            row.cancelled_by = Some(uid);
        }
        let mut rows = vec![row];
        rows.append(&mut steps);
        j.state = state;
        j.ended_rows = Some(rows);
        true
    }

    /// Slurm requeues a live job itself after `how` (PREEMPTED or NODE_FAIL): the run ends
    /// (started first if it was pending) and the same id is PENDING again. False if the
    /// job is unknown or has ended.
    pub fn requeue(&self, id: &str, how: JobState) -> bool {
        let mut s = self.lock();
        let Some(j) = s.jobs.get_mut(id) else {
            return false;
        };
        if !j.is_live() {
            return false;
        }
        if j.node.is_none() {
            start_job(j);
        }
        let batch_exit = if how == JobState::NodeFail {
            exit(0, 0)
        } else {
            exit(0, 15)
        };
        let run = vec![
            j.job_row(how, exit(0, 0), 20),
            j.step_row("batch", JobState::Cancelled, batch_exit, Some(1 << 20)),
        ];
        j.requeued_runs.push(run);
        j.node = None;
        j.state = JobState::Pending;
        true
    }

    fn squeue_row(j: &FakeJob) -> SqueueRow {
        SqueueRow {
            job_id: j.id.clone(),
            job_id_raw: j.raw_id.clone(),
            state: j.state,
            reason: match j.state {
                JobState::Pending if j.held && !j.requeued_runs.is_empty() => {
                    "job requeued in held state".into()
                }
                JobState::Pending if j.held => "JobHeldUser".into(),
                JobState::Pending if !j.requeued_runs.is_empty() => "BeginTime".into(),
                JobState::Pending => "Priority".into(),
                _ => "None".into(),
            },
            node_list: j.node.clone().unwrap_or_default(),
            uid: j.uid,
        }
    }

    /// The tag-format rows of the jobs squeue lists that `keep` selects (counted as `cmd`).
    fn squeue_tag_rows(
        &self,
        cmd: Command,
        keep: impl Fn(&FakeJob) -> bool,
    ) -> Result<Parsed<TagRow>, SlurmError> {
        let s = self.enter(cmd)?;
        let rows = s
            .jobs
            .values()
            .filter(|j| j.is_live() || s.show_ended_in_squeue)
            .filter(|j| keep(j))
            .map(Self::tag_row)
            .collect();
        Ok(Parsed {
            rows,
            errors: Vec::new(),
        })
    }

    fn held_row(j: &FakeJob) -> HeldRow {
        HeldRow {
            job_id: j.id.clone(),
            job_id_raw: j.raw_id.clone(),
            uid: j.uid,
            comment: j.comment.clone(),
        }
    }

    fn tag_row(j: &FakeJob) -> TagRow {
        TagRow {
            job_id: j.id.clone(),
            job_id_raw: j.raw_id.clone(),
            comment: j.comment.clone(),
        }
    }

    fn submit(s: &mut State, req: &SbatchRequest) -> Result<(SbatchCall, Vec<FakeJob>), String> {
        let cmd = sbatch_args::parse(&req.argv).map_err(|e| format!("sbatch: error: {e}"))?;
        let script: Option<Vec<u8>> = match (&cmd.script, &req.stdin) {
            (Some(p), _) => {
                let path = Path::new(p);
                let path = if path.is_absolute() {
                    path.to_path_buf()
                } else {
                    req.cwd.join(path)
                };
                Some(std::fs::read(&path).map_err(|e| {
                    format!("sbatch: error: Unable to open file {}: {e}", path.display())
                })?)
            }
            (None, Some(stdin)) => Some(stdin.clone()),
            (None, None) if cmd.has("wrap") => None,
            (None, None) => return Err("sbatch: error: Batch script is empty!".into()),
        };
        let directives = script
            .as_deref()
            .and_then(|s| {
                sbatch_args::parse_directives(&sbatch_args::script_directives(
                    &String::from_utf8_lossy(s),
                ))
                .ok()
            })
            .unwrap_or_default();
        let opt =
            |name: &str| sbatch_args::effective_option(&cmd, &directives, name).map(str::to_string);
        let partition = opt("partition").unwrap_or_else(|| DEFAULT_PARTITION.to_string());
        if !s.partitions.contains_key(&partition) {
            return Err(
                "sbatch: error: Batch job submission failed: Invalid partition name specified"
                    .into(),
            );
        }
        let req_mem_bytes = match opt("mem") {
            Some(m) => parse::parse_mem_bytes(&m)
                .filter(|b| *b > 0)
                .ok_or_else(|| format!("sbatch: error: invalid memory constraint {m}"))?,
            None => DEFAULT_MEM_BYTES,
        };
        let timelimit_secs = match opt("time") {
            Some(t) => match parse::parse_duration(&t) {
                Ok(parse::Duration::Secs(0)) | Ok(parse::Duration::Unlimited) => None,
                // Slurm keeps whole minutes and rounds up.
                Ok(parse::Duration::Secs(n)) => Some(n.div_ceil(60) * 60),
                Err(_) => {
                    return Err(format!(
                        "sbatch: error: Invalid time limit specification: {t}"
                    ))
                }
            },
            None => s.partitions.get(&partition).copied().flatten(),
        };
        let exclude: Vec<String> = opt("exclude")
            .map(|e| {
                e.split(',')
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let tasks = match opt("array") {
            Some(spec) => Some(
                sbatch_args::parse_array_spec(&spec)
                    .map_err(|e| format!("sbatch: error: invalid --array: {e}"))?,
            ),
            None => None,
        };
        let comment = opt("comment").unwrap_or_default();
        let (user, uid) = match &req.run_as {
            Some(r) => (r.user.to_string_lossy().into_owned(), r.uid),
            None => (current_user(), nix::unistd::getuid().as_raw()),
        };
        let base = s.next_id;
        let ids: Vec<(String, String, Option<u32>)> = match &tasks {
            None => vec![(base.to_string(), base.to_string(), None)],
            Some(tasks) => tasks
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    (
                        format!("{base}_{t}"),
                        (base + i as u64).to_string(),
                        Some(*t),
                    )
                })
                .collect(),
        };
        s.next_id += ids.len().max(1) as u64;
        let jobs = ids
            .into_iter()
            .map(|(id, raw_id, array_task)| FakeJob {
                id,
                raw_id,
                array_task,
                comment: comment.clone(),
                partition: partition.clone(),
                req_mem_bytes,
                timelimit_secs,
                exclude: exclude.clone(),
                argv: req.argv.clone(),
                script: script.clone(),
                state: JobState::Pending,
                node: None,
                ended_rows: None,
                requeued_runs: Vec::new(),
                dependency: opt("dependency").unwrap_or_default(),
                // As sbatch: only --hold holds (Slurm 22.05 and 24.11 read no SBATCH_HOLD).
                held: cmd.has("hold") || directives.has("hold"),
                user: user.clone(),
                uid,
            })
            .collect();
        let call = SbatchCall {
            argv: req.argv.clone(),
            cwd: req.cwd.clone(),
            held: req.held,
            comment: opt("comment"),
            array: opt("array"),
            mem: opt("mem"),
            time: opt("time"),
            exclude: opt("exclude"),
            partition: opt("partition"),
            job_id: Some(base.to_string()),
            reply: Ok(base.to_string()),
        };
        Ok((call, jobs))
    }
}

/// The name of the user the test runs as.
fn current_user() -> String {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map_or_else(|| "nobody".to_string(), |u| u.name)
}

fn start_job(j: &mut FakeJob) -> bool {
    if j.state != JobState::Pending || j.held {
        return false;
    }
    let node = NODES
        .iter()
        .find(|n| !j.exclude.iter().any(|e| e == *n))
        .copied()
        .unwrap_or("n9");
    j.node = Some(node.to_string());
    j.state = JobState::Running;
    true
}

impl Slurm for FakeSlurm {
    async fn sbatch(&self, req: &SbatchRequest) -> Result<String, SlurmError> {
        let mut s = self.enter(Command::Sbatch)?;
        if let Some(stderr) = s.refuse_next.take() {
            s.calls.push(SbatchCall {
                argv: req.argv.clone(),
                cwd: req.cwd.clone(),
                held: req.held,
                comment: None,
                array: None,
                mem: None,
                time: None,
                exclude: None,
                partition: None,
                job_id: None,
                reply: Err(stderr.clone()),
            });
            return Err(rejected(Command::Sbatch, &stderr));
        }
        match Self::submit(&mut s, req) {
            Ok((mut call, jobs)) => {
                for j in jobs {
                    s.jobs.insert(j.id.clone(), j);
                }
                let lost = std::mem::take(&mut s.lose_next_reply);
                let result = if lost {
                    call.reply = Err("sbatch timed out".into());
                    Err(SlurmError::Timeout {
                        command: "sbatch".into(),
                        secs: 60,
                    })
                } else {
                    Ok(call.job_id.clone().unwrap_or_default())
                };
                s.calls.push(call);
                result
            }
            Err(stderr) => {
                s.calls.push(SbatchCall {
                    argv: req.argv.clone(),
                    cwd: req.cwd.clone(),
                    held: req.held,
                    comment: None,
                    array: None,
                    mem: None,
                    time: None,
                    exclude: None,
                    partition: None,
                    job_id: None,
                    reply: Err(stderr.clone()),
                });
                Err(rejected(Command::Sbatch, &stderr))
            }
        }
    }

    async fn squeue(&self, job_ids: &[String]) -> Result<Parsed<SqueueRow>, SlurmError> {
        let s = self.enter(Command::Squeue)?;
        let rows = s.queued(job_ids).map(Self::squeue_row).collect();
        Ok(Parsed {
            rows,
            errors: Vec::new(),
        })
    }

    /// The poll's squeue: the rows [`FakeSlurm::squeue`] shows, as the real one folds them.
    async fn poll_queue(&self, job_ids: &[String]) -> Result<Queue, SlurmError> {
        let s = self.enter(Command::Squeue)?;
        let mut q = Queue::with_owners(0);
        for j in s.queued(job_ids) {
            q.add(j.uid, j.id.clone(), j.state);
        }
        Ok(q)
    }

    async fn job_states(&self, job_ids: &[String]) -> Result<Option<Queue>, SlurmError> {
        if !self.lock().only_job_state {
            return Ok(None);
        }
        let s = self.enter(Command::JobStates)?;
        let mut q = Queue::states_only(0);
        for j in s.queued(job_ids) {
            q.add(0, j.id.clone(), j.state);
        }
        Ok(Some(q))
    }

    /// The held pending jobs whose comment holds `needle`, as Slurm's `JobHeldUser`.
    async fn held_with(&self, needle: &str) -> Result<Parsed<HeldRow>, SlurmError> {
        let s = self.enter(Command::Squeue)?;
        let rows = s
            .jobs
            .values()
            .filter(|j| j.state == JobState::Pending && j.held && j.comment.contains(needle))
            .map(Self::held_row)
            .collect();
        Ok(Parsed {
            rows,
            errors: Vec::new(),
        })
    }

    async fn held_job(&self, job_id: &str) -> Result<Option<HeldRow>, SlurmError> {
        let s = self.enter(Command::Squeue)?;
        Ok(s.jobs
            .values()
            .find(|j| j.raw_id == job_id && j.state == JobState::Pending && j.held)
            .map(Self::held_row))
    }

    async fn squeue_user(&self, _user: &str) -> Result<Parsed<TagRow>, SlurmError> {
        self.squeue_tag_rows(Command::SqueueUser, |_| true)
    }

    async fn squeue_tags(&self, job_id: &str) -> Result<Parsed<TagRow>, SlurmError> {
        self.squeue_tag_rows(Command::Squeue, |j| job_id == j.id || job_id == j.base_id())
    }

    async fn sacct(&self, job_ids: &[String]) -> Result<Parsed<SacctRow>, SlurmError> {
        let s = self.enter(Command::Sacct)?;
        let rows = s
            .jobs
            .values()
            .filter(|j| job_ids.iter().any(|id| *id == j.id || *id == j.base_id()))
            .flat_map(FakeJob::sacct_rows)
            .collect();
        Ok(Parsed {
            rows,
            errors: Vec::new(),
        })
    }

    async fn sacct_user_since(
        &self,
        _user: &str,
        _since: i64,
    ) -> Result<Parsed<TagRow>, SlurmError> {
        let s = self.enter(Command::SacctUserSince)?;
        // `--allocations`: job rows only, one per run.
        let rows = s
            .jobs
            .values()
            .flat_map(|j| {
                let runs = j.requeued_runs.len() + 1;
                std::iter::repeat_n(Self::tag_row(j), runs)
            })
            .collect();
        Ok(Parsed {
            rows,
            errors: Vec::new(),
        })
    }

    async fn scancel(
        &self,
        job_ids: &[String],
        run_as: Option<&super::RunAs>,
    ) -> Result<(), SlurmError> {
        let ids: Vec<String> = {
            let s = self.enter(Command::Scancel)?;
            s.jobs
                .values()
                .filter(|j| job_ids.iter().any(|id| j.id == *id || j.base_id() == *id))
                .map(|j| j.id.clone())
                .collect()
        };
        if ids.is_empty() {
            return Err(rejected(
                Command::Scancel,
                &format!("scancel: error: Invalid job id {}", job_ids.join(" ")),
            ));
        }
        // Slurm records who cancelled: the user it ran as, else the caller.
        let uid = run_as
            .map(|r| r.uid)
            .unwrap_or_else(|| nix::unistd::getuid().as_raw());
        let mut any = false;
        for id in &ids {
            any |= self.end(id, Ending::CancelledBy(uid));
        }
        if any {
            Ok(())
        } else {
            Err(rejected(
                Command::Scancel,
                &format!("scancel: error: Kill job error on job id {}: Job/step already completing or completed", job_ids.join(" ")),
            ))
        }
    }

    async fn marked_jobs(&self, _mark: &str) -> Result<Vec<(String, u32)>, SlurmError> {
        // Its jobs have no admin comment (tests/real_slurm_plain.rs covers the listing).
        Ok(Vec::new())
    }

    async fn show_job(&self, job_id: &str) -> Result<BTreeMap<String, String>, SlurmError> {
        let s = self.enter(Command::ShowJob)?;
        let j = s.jobs.get(job_id).ok_or_else(|| {
            rejected(
                Command::ShowJob,
                &format!("slurm_load_jobs error: {}", super::cli::INVALID_JOB_ID),
            )
        })?;
        let uid = nix::unistd::getuid().as_raw();
        let mut m = BTreeMap::from([
            ("JobId".to_string(), j.raw_id.clone()),
            ("JobState".to_string(), j.state.to_string()),
            ("UserId".to_string(), format!("user({uid})")),
            ("Partition".to_string(), j.partition.clone()),
            (
                "MinMemoryNode".to_string(),
                format!("{}M", j.req_mem_bytes >> 20),
            ),
            ("Comment".to_string(), j.comment.clone()),
            ("Restarts".to_string(), j.requeued_runs.len().to_string()),
        ]);
        if let Some(t) = j.timelimit_secs {
            m.insert("TimeLimit".into(), parse::format_time_limit(t));
        }
        if let Some(t) = j.array_task {
            m.insert("ArrayJobId".into(), j.base_id());
            m.insert("ArrayTaskId".into(), t.to_string());
        }
        // As Slurm: the script's path as sbatch was given it (none for --wrap or stdin).
        if let Some(script) = sbatch_args::parse(&j.argv).ok().and_then(|c| c.script) {
            m.insert("Command".into(), script);
        }
        Ok(m)
    }

    async fn batch_script(&self, job_id: &str) -> Result<Vec<u8>, SlurmError> {
        let s = self.enter(Command::BatchScript)?;
        s.jobs
            .get(job_id)
            .and_then(|j| j.script.clone())
            .ok_or_else(|| {
                rejected(
                    Command::BatchScript,
                    "scontrol: error: No batch script for job",
                )
            })
    }

    /// As real Slurm (docs/slurm-observed.md (l)): only an ended job slurmctld still
    /// knows; its run's job row becomes REQUEUED and the same id is PENDING, held.
    async fn requeue_hold(
        &self,
        job_id: &str,
        _run_as: Option<&super::RunAs>,
    ) -> Result<(), SlurmError> {
        let mut s = self.enter(Command::RequeueHold)?;
        let invalid = || {
            rejected(
                Command::RequeueHold,
                &format!(
                    "Requeue of job {job_id} failed: {}",
                    super::cli::INVALID_JOB_ID
                ),
            )
        };
        let j = s.jobs.get_mut(job_id).ok_or_else(invalid)?;
        let Some(mut rows) = j.ended_rows.take().filter(|_| !j.is_live()) else {
            return Err(rejected(
                Command::RequeueHold,
                &format!("Requeue of job {job_id} failed: Job is pending execution"),
            ));
        };
        if let Some(r) = rows.first_mut() {
            r.state = JobState::Requeued;
        }
        j.requeued_runs.push(rows);
        j.node = None;
        j.state = JobState::Pending;
        j.held = true;
        Ok(())
    }

    async fn update_job(
        &self,
        job_id: &str,
        fields: &[String],
        _run_as: Option<&super::RunAs>,
    ) -> Result<(), SlurmError> {
        let mut s = self.enter(Command::UpdateJob)?;
        if let Some((prefix, stderr)) = s.refuse_update.clone() {
            if fields.iter().any(|f| f.starts_with(&prefix)) {
                return Err(rejected(Command::UpdateJob, &stderr));
            }
        }
        let partitions = s.partitions.clone();
        let j = s.jobs.get_mut(job_id).ok_or_else(|| {
            rejected(
                Command::UpdateJob,
                &format!("scontrol: error: {}", super::cli::INVALID_JOB_ID),
            )
        })?;
        if j.state != JobState::Pending {
            return Err(rejected(
                Command::UpdateJob,
                "Job is no longer pending execution",
            ));
        }
        for f in fields {
            let bad = || rejected(Command::UpdateJob, &format!("scontrol: error: Invalid {f}"));
            let (k, v) = f.split_once('=').ok_or_else(bad)?;
            match k {
                "MinMemoryNode" => j.req_mem_bytes = v.parse::<u64>().map_err(|_| bad())? << 20,
                "TimeLimit" => {
                    j.timelimit_secs = Some(parse::parse_duration_secs(v).ok_or_else(bad)?)
                }
                "ExcNodeList" => j.exclude = v.split(',').map(str::to_string).collect(),
                "Partition" if partitions.contains_key(v) => j.partition = v.to_string(),
                _ => return Err(bad()),
            }
        }
        Ok(())
    }

    async fn partition_limits(&self) -> Result<HashMap<String, Option<u64>>, SlurmError> {
        let s = self.enter(Command::PartitionLimits)?;
        Ok(s.partitions
            .iter()
            .filter(|(p, _)| !s.unlisted.contains(*p))
            .map(|(p, m)| (p.clone(), *m))
            .collect())
    }

    async fn pending_of_users(&self, users: &[String]) -> Result<Parsed<PendingRow>, SlurmError> {
        let s = self.enter(Command::PendingOfUsers)?;
        let rows = s
            .jobs
            .values()
            .filter(|j| j.state == JobState::Pending && users.contains(&j.user))
            .map(|j| PendingRow {
                job_id: j.id.clone(),
                job_id_raw: j.raw_id.clone(),
                user: j.user.clone(),
                dependency: j.dependency.clone(),
            })
            .collect();
        Ok(Parsed {
            rows,
            errors: Vec::new(),
        })
    }

    async fn set_dependency(
        &self,
        job_id: &str,
        dependency: &str,
        _run_as: Option<&super::RunAs>,
    ) -> Result<(), SlurmError> {
        let mut s = self.enter(Command::SetDependency)?;
        match s
            .jobs
            .values_mut()
            .find(|j| j.raw_id == job_id || j.id == job_id)
        {
            Some(j) if j.state == JobState::Pending => {
                j.dependency = dependency.to_string();
                Ok(())
            }
            Some(_) => Err(rejected(
                Command::SetDependency,
                "scontrol: error: Job is no longer pending execution",
            )),
            None => Err(rejected(
                Command::SetDependency,
                "scontrol: error: Invalid job id specified",
            )),
        }
    }

    async fn release(
        &self,
        job_ids: &[String],
        _run_as: Option<&super::RunAs>,
    ) -> Result<(), SlurmError> {
        let mut s = self.enter(Command::Release)?;
        let mut any = false;
        for j in s.jobs.values_mut() {
            if job_ids
                .iter()
                .any(|id| *id == j.id || *id == j.raw_id || *id == j.base_id())
            {
                j.held = false;
                any = true;
            }
        }
        if any {
            Ok(())
        } else {
            Err(rejected(
                Command::Release,
                "scontrol: error: Invalid job id specified",
            ))
        }
    }
}
