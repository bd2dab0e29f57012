//! Control requests from `supervisorctl`, handled on the daemon's loop.
//!
//! Callers are identified by the socket's peer uid: root and the daemon's own user see
//! everything; anyone else only their own chains.

use super::engine::{now, Engine};
use super::launch::{self, LaunchOutcome};
use super::views;
use crate::model::{Action, ChainState, RecoveryClass};
use crate::protocol::{ErrorBody, ErrorKind, Request, Response, SubmitRequest};
use crate::sbatch_args;
use crate::slurm::Slurm;
use crate::store::{chain_label, ChainUpdate, NewDecision, NewSubmission, StoreError};
use serde_json::{json, Value};

pub(super) type Handled = Result<Value, Response>;

pub(super) fn internal(e: impl std::fmt::Display) -> Response {
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
        Request::Classify(r) => super::resolve::classify(engine, r, uid),
        Request::Recover(r) => super::resolve::recover(engine, r, uid),
        Request::Stats { id } => super::stats::stats(engine, id.as_deref(), uid),
        Request::Cancel { id } => cancel(engine, &id, uid).await,
        Request::Adopt { job_ids } => super::adopt::adopt(engine, &job_ids, uid).await,
    };
    match result {
        Ok(v) => Response::Ok(v),
        Err(r) => r,
    }
}

pub(super) fn sees_all(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::getuid().as_raw()
}

/// The chains an id names that this caller may act on.
pub(super) fn chains_for<S: Slurm>(
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

pub(super) fn user_name(uid: u32) -> String {
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
    // One job on one cluster is what the supervisor can watch.
    let env_has = |k: &str| r.env.iter().any(|(n, v)| n == k && !v.is_empty());
    if submitted.has("clusters") || env_has("SLURM_CLUSTERS") || env_has("SBATCH_CLUSTERS") {
        return Err(usage("multi-cluster submission (--clusters, -M, SLURM_CLUSTERS) is not supervised; submit on one cluster".into()));
    }
    // sbatch takes --array from the command line, then SBATCH_ARRAY_INX, then the script.
    let env_array = r
        .env
        .iter()
        .find(|(n, _)| n == "SBATCH_ARRAY_INX")
        .map(|(_, v)| v.clone());
    let array_spec = submitted
        .cmd
        .get("array")
        .map(str::to_string)
        .or(env_array)
        .or_else(|| submitted.option("array").map(str::to_string));
    let array_tasks = match array_spec.as_deref() {
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

pub(super) fn actor(uid: u32) -> String {
    format!("user:{}", user_name(uid))
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
    // A launch whose sbatch gave no answer may have created a job that the next cycle
    // will find by its tag and adopt; cancelling the chain now would leave that job
    // running and the chain brought back to `active` by the adoption.
    for c in &open {
        let launching = engine
            .store
            .attempts(c.id)?
            .iter()
            .any(|a| a.state == crate::store::AttemptState::Launching);
        if launching {
            return Err(Response::error(
                ErrorKind::Unavailable,
                format!(
                    "{} is being submitted and Slurm has not confirmed its job yet; nothing changed, try again after the next poll",
                    chain_label(c.id)
                ),
            ));
        }
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
            let who = launch::run_as(engine.store.owner_of(c.id)?)
                .map_err(|e| Response::error(ErrorKind::Internal, e))?;
            engine
                .slurm
                .scancel(&job, who.as_ref())
                .await
                .map_err(|e| {
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
