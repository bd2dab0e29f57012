//! Control requests from `supervisorctl`, handled on the daemon's loop.
//!
//! Callers are identified by the socket's peer uid: root and the daemon's own user see
//! everything; anyone else only their own chains.

use super::engine::{now, Engine};
use super::launch::{self, LaunchOutcome};
use super::views;
use crate::model::{Action, ChainState, RecoveryClass, RetryPlan};
use crate::protocol::{
    ErrorBody, ErrorKind, RecoverRequest, Request, Resolution, ResolveAction, Response,
    SubmitRequest,
};
use crate::sbatch_args;
use crate::slurm::Slurm;
use crate::store::{chain_label, ChainUpdate, NewDecision, NewSubmission, StoreError};
use serde_json::{json, Value};

type Handled = Result<Value, Response>;

fn internal(e: impl std::fmt::Display) -> Response {
    Response::error(ErrorKind::Internal, e.to_string())
}

impl From<StoreError> for Response {
    fn from(e: StoreError) -> Self {
        internal(e)
    }
}

/// sbatch options that do not make a supervisable submission.
const REFUSED_OPTIONS: &[(&str, &str)] = &[
    ("wait", "--wait would block the supervisor until the job ends; submit without it and use `supervisorctl status`"),
    ("test-only", "--test-only submits nothing; run sbatch --test-only directly"),
    ("help", "run sbatch --help directly"),
    ("usage", "run sbatch --usage directly"),
    ("version", "run sbatch --version directly"),
];

pub async fn handle<S: Slurm>(engine: &mut Engine<S>, request: Request, uid: u32) -> Response {
    let result = match request {
        Request::Ping => Ok(json!({ "pong": true })),
        Request::Submit(r) => submit(engine, r, uid).await,
        Request::Status { id } => status(engine, id.as_deref(), uid),
        Request::History { id } => history(engine, &id, uid),
        Request::Pending => pending(engine, uid),
        Request::Classify(r) => classify(engine, r, uid),
        Request::Recover(r) => recover(engine, r, uid),
        Request::Cancel { id } => cancel(engine, &id, uid).await,
        Request::Adopt { job_ids } => adopt(engine, &job_ids, uid).await,
    };
    match result {
        Ok(v) => Response::Ok(v),
        Err(r) => r,
    }
}

fn sees_all(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::getuid().as_raw()
}

/// The chains an id names that this caller may act on.
fn chains_for<S: Slurm>(
    engine: &Engine<S>,
    id: &str,
    uid: u32,
) -> Result<Vec<crate::store::Chain>, Response> {
    let ids = engine.store.resolve(id)?;
    if ids.is_empty() {
        return Err(Response::error(
            ErrorKind::NotFound,
            format!(
                "no chain or job {id:?} is supervised here: see `supervisorctl status` for the ids"
            ),
        ));
    }
    let mut out = Vec::new();
    for i in ids {
        if !sees_all(uid) && engine.store.owner_of(i)? != uid {
            return Err(Response::error(
                ErrorKind::Forbidden,
                format!("{id} belongs to another user"),
            ));
        }
        out.extend(engine.store.chain(i)?);
    }
    Ok(out)
}

fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string())
}

async fn submit<S: Slurm>(engine: &mut Engine<S>, r: SubmitRequest, uid: u32) -> Handled {
    let usage = |m: String| Response::error(ErrorKind::Usage, m);
    let submitted = sbatch_args::Submitted::read(&r.argv, r.script.as_deref())
        .map_err(|e| usage(format!("cannot understand the sbatch command: {e}")))?;
    let cmd = &submitted.cmd;
    for (opt, why) in REFUSED_OPTIONS {
        if submitted.has(opt) {
            return Err(usage(format!("--{opt} is not supervised: {why}")));
        }
    }
    let script_name = match (&cmd.script, cmd.has("wrap")) {
        (Some(s), _) => Some(
            std::path::Path::new(s)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| usage(format!("{s:?} is not a script file name")))?,
        ),
        (None, true) => None,
        (None, false) if r.script.is_some() => None,
        (None, false) => {
            return Err(usage(
                "no batch script given: name one after the options, or use --wrap".into(),
            ))
        }
    };
    if script_name.is_some() && r.script.is_none() {
        return Err(usage(
            "the script's content was not sent; use supervisorctl to submit".into(),
        ));
    }
    let array_tasks = match submitted.option("array") {
        Some(spec) => Some(
            sbatch_args::parse_array_spec(spec)
                .map_err(|e| usage(format!("invalid --array {spec:?}: {e}")))?,
        ),
        None => None,
    };
    let new = NewSubmission {
        owner_uid: uid,
        user: user_name(uid),
        argv: r.argv,
        cwd: r.cwd,
        env: r.env,
        script_name,
        script: r.script,
        max_retries: r.max_retries.unwrap_or(engine.config.retry.max_retries),
        array_tasks,
    };
    let t = now();
    let l = launch::begin_submission(&mut engine.store, &engine.config, &new, &submitted, t)
        .map_err(internal)?;
    crate::failpoint::hit("after-intent");
    let sub = engine.store.submission(l.submission_id)?;
    match engine.run_launch(&l, &sub, t).await? {
        LaunchOutcome::Submitted(job) => {
            let chains: Vec<String> = engine.store.resolve(&job)?.into_iter().map(chain_label).collect();
            Ok(json!({ "job_id": job, "chains": chains }))
        }
        LaunchOutcome::Refused { code, stderr } => {
            engine.store.discard_submission(l.id)?;
            Err(Response::Error(ErrorBody {
                kind: ErrorKind::SbatchFailed,
                message: format!("sbatch failed with exit code {code}"),
                exit_code: Some(code),
                stderr: Some(stderr),
            }))
        }
        LaunchOutcome::Unknown(e) => Err(Response::error(
            ErrorKind::Unavailable,
            format!(
                "sbatch gave no clear answer ({e}); the submission is recorded and will be looked up by its tag \
                 and submitted once Slurm answers: watch `supervisorctl status`"
            ),
        )),
    }
}

fn status<S: Slurm>(engine: &Engine<S>, id: Option<&str>, uid: u32) -> Handled {
    let chains = match id {
        Some(id) => chains_for(engine, id, uid)?,
        None => engine
            .store
            .chains(if sees_all(uid) { None } else { Some(uid) })?,
    };
    let rows: Result<Vec<Value>, StoreError> = chains
        .iter()
        .map(|c| views::chain_view(&engine.store, c))
        .collect();
    Ok(Value::Array(rows?))
}

fn history<S: Slurm>(engine: &Engine<S>, id: &str, uid: u32) -> Handled {
    let chains = chains_for(engine, id, uid)?;
    if chains.len() == 1 {
        return Ok(views::history_view(&engine.store, &chains[0])?);
    }
    let all: Result<Vec<Value>, StoreError> = chains
        .iter()
        .map(|c| views::history_view(&engine.store, c))
        .collect();
    Ok(Value::Array(all?))
}

fn pending<S: Slurm>(engine: &Engine<S>, uid: u32) -> Handled {
    let mut out = Vec::new();
    for c in engine.store.chains_in_state(ChainState::PendingFailed)? {
        if sees_all(uid) || engine.store.owner_of(c.id)? == uid {
            out.push(views::pending_view(&engine.store, &c)?);
        }
    }
    Ok(Value::Array(out))
}

fn plan_from(mem: Option<&str>, time: Option<&str>) -> Result<RetryPlan, Response> {
    let mut plan = RetryPlan::default();
    if let Some(m) = mem {
        let bytes =
            crate::config::parse_mem_size(m).map_err(|e| Response::error(ErrorKind::Usage, e))?;
        plan.mem_mb = Some(bytes.div_ceil(1 << 20));
    }
    if let Some(t) = time {
        plan.time_secs = Some(crate::slurm::parse::parse_duration_secs(t).ok_or_else(|| {
            Response::error(
                ErrorKind::Usage,
                format!(
                    "invalid time limit {t:?}: use Slurm's form, e.g. 30, 2:00:00 or 1-00:00:00"
                ),
            )
        })?);
    }
    Ok(plan)
}

fn actor(uid: u32) -> String {
    format!("user:{}", user_name(uid))
}

fn classify<S: Slurm>(engine: &mut Engine<S>, r: Resolution, uid: u32) -> Handled {
    if r.reason.trim().is_empty() {
        return Err(Response::error(
            ErrorKind::Usage,
            "a resolution needs a --reason, which is recorded",
        ));
    }
    let chains = chains_for(engine, &r.id, uid)?;
    let extra = plan_from(r.mem.as_deref(), r.time.as_deref())?;
    let mut done = Vec::new();
    for c in &chains {
        if c.state != ChainState::PendingFailed {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!("{} is {}, not pending_failed: only a chain waiting for a decision can be classified", chain_label(c.id), c.state),
            ));
        }
    }
    if r.dry_run {
        return Ok(
            json!({ "dry_run": true, "chains": chains.iter().map(|c| chain_label(c.id)).collect::<Vec<_>>(), "action": r.action }),
        );
    }
    let t = now();
    for c in &chains {
        let last = engine.store.last_decision(c.id)?;
        let classification = c
            .last_classification
            .unwrap_or(crate::model::Classification::Ambiguous);
        let (class, action, update) = match r.action {
            ResolveAction::Retry => (
                RecoveryClass::R2,
                Action::Resubmit,
                ChainUpdate {
                    state: ChainState::Ready,
                    last_classification: None,
                    plan: Some(c.plan.merged(&extra)),
                    not_before: Some(t),
                },
            ),
            ResolveAction::Fail => (
                RecoveryClass::R3,
                Action::Fail,
                ChainUpdate {
                    state: ChainState::Failed,
                    last_classification: None,
                    plan: None,
                    not_before: None,
                },
            ),
        };
        let rec = NewDecision {
            classification,
            class,
            action,
            reason: r.reason.clone(),
            inputs: json!({ "resolution": r, "plan": extra }),
            resolves: last.map(|d| d.id),
            actor: actor(uid),
        };
        if !engine
            .store
            .decide_chain(c.id, &[ChainState::PendingFailed], &rec, &update, t)?
        {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!("{} was resolved by someone else first", chain_label(c.id)),
            ));
        }
        done.push(chain_label(c.id));
    }
    Ok(json!({ "resolved": done, "action": r.action }))
}

fn recover<S: Slurm>(engine: &mut Engine<S>, r: RecoverRequest, uid: u32) -> Handled {
    let chains = chains_for(engine, &r.id, uid)?;
    let extra = plan_from(r.mem.as_deref(), r.time.as_deref())?;
    let allowed = [ChainState::Failed, ChainState::PendingFailed];
    for c in &chains {
        if !allowed.contains(&c.state) {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!(
                    "{} is {}: only a failed or pending_failed chain can be recovered",
                    chain_label(c.id),
                    c.state
                ),
            ));
        }
    }
    if r.dry_run {
        let mut previews = Vec::new();
        for c in &chains {
            let sub = engine.store.submission(c.submission_id)?;
            let argv = launch::preview_argv(&engine.config, &sub, c, &c.plan.merged(&extra))
                .map_err(internal)?;
            previews.push(json!({ "chain": chain_label(c.id), "cwd": sub.cwd, "command": std::iter::once("sbatch".to_string()).chain(argv).collect::<Vec<_>>() }));
        }
        return Ok(json!({ "dry_run": true, "would_run": previews }));
    }
    let t = now();
    let mut done = Vec::new();
    for c in &chains {
        let rec = NewDecision {
            classification: c
                .last_classification
                .unwrap_or(crate::model::Classification::Ambiguous),
            class: RecoveryClass::R2,
            action: Action::Resubmit,
            reason: "manual recover".into(),
            inputs: json!({ "recover": r, "plan": extra }),
            resolves: engine.store.last_decision(c.id)?.map(|d| d.id),
            actor: actor(uid),
        };
        let update = ChainUpdate {
            state: ChainState::Ready,
            last_classification: None,
            plan: Some(c.plan.merged(&extra)),
            not_before: Some(t),
        };
        if !engine
            .store
            .decide_chain(c.id, &allowed, &rec, &update, t)?
        {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!("{} changed state meanwhile; look again", chain_label(c.id)),
            ));
        }
        done.push(chain_label(c.id));
    }
    Ok(json!({ "recovering": done }))
}

async fn cancel<S: Slurm>(engine: &mut Engine<S>, id: &str, uid: u32) -> Handled {
    let chains = chains_for(engine, id, uid)?;
    let open: Vec<_> = chains.into_iter().filter(|c| c.state.is_open()).collect();
    if open.is_empty() {
        return Err(Response::error(
            ErrorKind::Conflict,
            format!("{id} has already ended; nothing to cancel"),
        ));
    }
    let t = now();
    let mut done = Vec::new();
    for c in &open {
        let live = engine
            .store
            .attempts(c.id)?
            .into_iter()
            .find(|a| a.state == crate::store::AttemptState::Live);
        if let Some(a) = &live {
            let job = a.slurm_job_id.clone().unwrap_or_default();
            engine.slurm.scancel(&job).await.map_err(|e| {
                Response::error(
                    ErrorKind::Unavailable,
                    format!("scancel {job} failed, nothing changed: {e}"),
                )
            })?;
            engine.store.end_attempt(a.chain_id, a.n, "CANCELLED", t)?;
        }
        let rec = NewDecision {
            classification: crate::model::Classification::Cancelled,
            class: RecoveryClass::R3,
            action: Action::Cancel,
            reason: "cancelled with supervisorctl cancel; never retried".into(),
            inputs: json!({ "job": live.and_then(|a| a.slurm_job_id) }),
            resolves: None,
            actor: actor(uid),
        };
        let update = ChainUpdate {
            state: ChainState::Cancelled,
            last_classification: Some(crate::model::Classification::Cancelled),
            plan: None,
            not_before: None,
        };
        engine.store.decide_chain(
            c.id,
            &[
                ChainState::Active,
                ChainState::Ready,
                ChainState::PendingFailed,
            ],
            &rec,
            &update,
            t,
        )?;
        done.push(chain_label(c.id));
    }
    Ok(json!({ "cancelled": done }))
}

/// Rebuilds an sbatch command line from what `scontrol show job` says about a job that
/// was submitted without the supervisor. Script arguments are split on blanks (scontrol
/// joins them with spaces, so an argument containing one cannot be recovered).
pub fn argv_from_scontrol(
    job: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<String>, String> {
    let set = |k: &str| {
        job.get(k).map(String::as_str).filter(|v| {
            !v.is_empty()
                && !matches!(
                    *v,
                    "(null)" | "N/A" | "UNLIMITED" | "NONE" | "Partition_Limit"
                )
        })
    };
    let mut argv = Vec::new();
    let mut add = |opt: &str, key: &str| {
        if let Some(v) = set(key) {
            argv.push(format!("--{opt}={v}"));
        }
    };
    add("job-name", "JobName");
    add("partition", "Partition");
    add("account", "Account");
    add("qos", "QOS");
    add("time", "TimeLimit");
    add("nodes", "NumNodes");
    add("ntasks", "NumTasks");
    add("cpus-per-task", "CPUs/Task");
    add("mem", "MinMemoryNode");
    add("mem-per-cpu", "MinMemoryCPU");
    add("exclude", "ExcNodeList");
    add("chdir", "WorkDir");
    add("output", "StdOut");
    add("error", "StdErr");
    if set("Requeue") == Some("0") {
        argv.push("--no-requeue".into());
    }
    if set("Comment").is_some() {
        argv.push(format!("--comment={}", job["Comment"]));
    }
    let command = set("Command").ok_or(
        "scontrol shows no Command for it (an interactive or --wrap job cannot be adopted)",
    )?;
    argv.extend(command.split_whitespace().map(str::to_string));
    Ok(argv)
}

async fn adopt<S: Slurm>(engine: &mut Engine<S>, job_ids: &[String], uid: u32) -> Handled {
    let mut adopted = Vec::new();
    for id in job_ids {
        let usage =
            |m: String| Response::error(ErrorKind::Usage, format!("cannot adopt {id}: {m}"));
        if !engine.store.resolve(id)?.is_empty() {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!("{id} is already supervised"),
            ));
        }
        let job = engine.slurm.show_job(id).await.map_err(|e| match e {
            crate::slurm::SlurmError::Rejected { .. } => Response::error(
                ErrorKind::NotFound,
                format!("Slurm does not know a live job {id}: {e}"),
            ),
            e => Response::error(
                ErrorKind::Unavailable,
                format!("cannot ask Slurm about {id}: {e}"),
            ),
        })?;
        if job.contains_key("ArrayJobId")
            || job.get("JobId").map(String::as_str) != Some(id.as_str())
        {
            return Err(usage(
                "array jobs cannot be adopted yet; submit arrays with supervisorctl submit".into(),
            ));
        }
        let owner: Option<u32> = job
            .get("UserId")
            .and_then(|u| u.split_once('('))
            .and_then(|(_, n)| n.trim_end_matches(')').parse().ok());
        if !sees_all(uid) && owner != Some(uid) {
            return Err(Response::error(
                ErrorKind::Forbidden,
                format!("job {id} belongs to another user"),
            ));
        }
        let state = job.get("JobState").cloned().unwrap_or_default();
        if crate::slurm::types::JobState::parse(&state).is_none_or(|s| s.is_terminal()) {
            return Err(usage(format!(
                "it is {state}; only a pending or running job can be adopted"
            )));
        }
        let argv = argv_from_scontrol(&job).map_err(usage)?;
        let script = engine.slurm.batch_script(id).await.map_err(|e| {
            Response::error(
                ErrorKind::Unavailable,
                format!("cannot read the batch script of {id}: {e}"),
            )
        })?;
        let submitted =
            sbatch_args::Submitted::read(&argv, Some(&script)).map_err(|e| usage(e.to_string()))?;
        let new = NewSubmission {
            owner_uid: owner.unwrap_or(uid),
            user: job
                .get("UserId")
                .and_then(|u| u.split('(').next())
                .unwrap_or_default()
                .to_string(),
            cwd: job.get("WorkDir").cloned().unwrap_or_else(|| "/".into()),
            env: Vec::new(),
            script_name: submitted
                .cmd
                .script
                .as_deref()
                .and_then(|p| std::path::Path::new(p).file_name())
                .map(|n| n.to_string_lossy().into_owned()),
            script: Some(script),
            max_retries: engine.config.retry.max_retries,
            array_tasks: None,
            argv,
        };
        let t = now();
        let l = launch::begin_submission(&mut engine.store, &engine.config, &new, &submitted, t)
            .map_err(internal)?;
        engine.store.launch_submitted(l.id, id, t)?;
        adopted.extend(engine.store.resolve(id)?.into_iter().map(chain_label));
    }
    Ok(json!({ "adopted": adopted }))
}
