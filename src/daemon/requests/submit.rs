//! `submit`: checks a submission, records its intent, and after its sbatch (run beside
//! the loop) records what came of it and answers.

use super::{Plan, RequestFlight};
use crate::config::LimitsConfig;
use crate::daemon::access::internal;
use crate::daemon::access::Caller;
use crate::daemon::engine::Desk;
use crate::daemon::sbatch::LaunchOutcome;
use crate::domain::continuation::Continuation;
use crate::domain::sbatch_args;
use crate::plumbing::clock::now;
use crate::protocol::views::SubmitAnswer;
use crate::protocol::{ErrorBody, ErrorKind, Request, Response, SubmitRequest};
use crate::slurm::Slurm;
use crate::store::{chain_label, Launch, NewSubmission, Store, Submission, SubmitRequestState};

/// sbatch options that do not make a supervisable submission.
const REFUSED_OPTIONS: &[(&str, &str)] = &[
    ("wait", "--wait would block the supervisor until the job ends; submit without it and use `supervisorctl status`"),
    ("test-only", "--test-only submits nothing; run sbatch --test-only directly"),
    ("help", "run sbatch --help directly"),
    ("usage", "run sbatch --usage directly"),
    ("version", "run sbatch --version directly"),
];

/// A submission whose intent is recorded and whose sbatch is to run.
#[derive(Debug)]
pub struct PendingSubmit {
    pub launch: Launch,
    pub sub: Submission,
    pub uid: u32,
    pub t: i64,
    /// The request's span (see `requests::span`), entered again when the answer is made.
    pub span: tracing::Span,
}

impl super::Write for SubmitRequest {
    const LOST: &'static str = "the daemon stopped before answering; nothing will be submitted later on this request's behalf \
                                 (a job sbatch had already created is found by its tag and supervised): check `supervisorctl status`";

    fn into_request(self) -> Request {
        Request::Submit(self)
    }

    /// The intent recorded and the launch in flight; its sbatch runs beside the loop.
    async fn begin<S: Slurm>(
        self,
        desk: &mut Desk<'_, S>,
        Caller { uid, .. }: Caller,
        span: tracing::Span,
    ) -> Plan {
        match begin_submit(desk, self, uid, span) {
            Ok(p) => {
                desk.flights.start_submit(p.launch.id, p.uid);
                Plan::Fly(RequestFlight::Submit(Box::new(p)))
            }
            Err(e) => Plan::Done(e),
        }
    }
}

fn usage(m: impl Into<String>) -> Response {
    Response::error(ErrorKind::Usage, m)
}

/// What sbatch would be given must be something the operating system can carry: no NUL
/// anywhere, an absolute working directory, environment names without `=`.
fn check_request(r: &SubmitRequest) -> Result<(), Response> {
    let shown = |s: &str| {
        crate::plumbing::osbytes::escape(s)
            .chars()
            .take(80)
            .collect::<String>()
    };
    if r.argv.iter().any(|a| a.contains('\0')) {
        return Err(usage(
            "an sbatch argument contains a NUL byte, which no command can be given",
        ));
    }
    if r.cwd.contains('\0') || !r.cwd.starts_with('/') {
        return Err(usage(format!(
            "the working directory {:?} is not an absolute path without NUL bytes",
            shown(&r.cwd)
        )));
    }
    let mut names = std::collections::HashSet::new();
    for (k, v) in &r.env {
        if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
            return Err(usage(format!(
                "the environment variable {:?} cannot be passed on: names must be non-empty without '=' or NUL, values without NUL",
                shown(k)
            )));
        }
        // One value a name: what is checked here is what sbatch gets.
        if !names.insert(k.as_str()) {
            return Err(usage(format!(
                "the environment variable {:?} is given twice",
                shown(k)
            )));
        }
    }
    // What the kernel would refuse to pass to sbatch is refused here, before it is stored.
    let strings = r.argv.iter().chain(r.env.iter().flat_map(|(k, v)| [k, v]));
    let (mut total, mut longest) = (0usize, 0usize);
    for s in strings {
        total += s.len() + 1;
        longest = longest.max(s.len());
    }
    if total > MAX_EXEC_BYTES || longest > MAX_EXEC_STRING {
        return Err(usage(format!(
            "the sbatch arguments and environment take {total} bytes (the longest {longest});              at most {MAX_EXEC_BYTES} in all and {MAX_EXEC_STRING} for one can be given to a command"
        )));
    }
    Ok(())
}

/// What Linux lets one exec carry: arguments and environment together (a quarter of the
/// default 8 MiB stack), and one string (MAX_ARG_STRLEN).
const MAX_EXEC_BYTES: usize = 2 << 20;
const MAX_EXEC_STRING: usize = 128 << 10;

/// Checks a submission against the caller's limits and records its intent.
pub fn begin_submit<S>(
    desk: &mut Desk<'_, S>,
    r: SubmitRequest,
    uid: u32,
    span: tracing::Span,
) -> Result<PendingSubmit, Response> {
    let limits = desk.config.limits.clone();
    check_request(&r)?;
    // A retry of a submission this user made already: its first answer, never a second
    // submission. Looked up by this caller's uid alone.
    if let Some(id) = &r.request_id {
        if !crate::protocol::valid_request_id(id) {
            return Err(usage(
                "request_id must be 1 to 64 letters, digits, '-' or '_'",
            ));
        }
        match desk.store.submit_request(uid, id)? {
            None => {}
            Some(SubmitRequestState::Submitted { job_id }) => {
                let chains = desk
                    .store
                    .resolve(&job_id)
                    .unwrap_or_default()
                    .into_iter()
                    .map(chain_label)
                    .collect();
                tracing::info!(request_id = %id, job = %job_id, "a retried submit: answered with its first job");
                return Err(Response::answer(&SubmitAnswer { job_id, chains }));
            }
            Some(SubmitRequestState::Launching) => {
                return Err(Response::error(
                    ErrorKind::Unavailable,
                    "this submission (its request id) is already being submitted and sbatch has not answered yet; \
                     nothing more is submitted for it: see `supervisorctl status` in a moment",
                ))
            }
        }
    }
    if let Some(s) = &r.script {
        let max = limits.max_script_size.0;
        if s.len() as u64 > max {
            return Err(usage(format!(
                "the batch script is {} bytes, more than limits.max_script_size ({max} bytes); ask your admin to raise it",
                s.len()
            )));
        }
    }
    let in_flight = desk.flights.submits_of(uid);
    if in_flight >= limits.submits_in_flight_per_user {
        return Err(Response::error(
            ErrorKind::Unavailable,
            format!(
                "{in_flight} of your submissions are still waiting for sbatch (limits.submits_in_flight_per_user = {}); try again when they are done",
                limits.submits_in_flight_per_user
            ),
        ));
    }
    let submitted = sbatch_args::Submitted::read(&r.argv, r.script.as_deref())
        .map_err(|e| usage(format!("cannot understand the sbatch command: {e}")))?;
    let cmd = &submitted.cmd;
    if let Some(c) = submitted.option("comment") {
        sbatch_args::check_comment(c).map_err(|e| usage(e.to_string()))?;
    }
    for (opt, why) in REFUSED_OPTIONS {
        if submitted.has(opt) {
            return Err(usage(format!("--{opt} is not supervised: {why}")));
        }
    }
    // sbatch acts on these when they are set at all, empty or not.
    let env_has = |k: &str| r.env.iter().any(|(n, _)| n == k);
    if env_has("SBATCH_WAIT") {
        return Err(usage(format!(
            "SBATCH_WAIT is set: {}",
            REFUSED_OPTIONS[0].1
        )));
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
                "no batch script given: name one after the options, or use --wrap",
            ))
        }
    };
    if script_name.is_some() && r.script.is_none() {
        return Err(usage(
            "the script's content was not sent; use supervisorctl to submit",
        ));
    }
    // One job on one cluster is what the supervisor can watch.
    if submitted.has("clusters") || env_has("SLURM_CLUSTERS") || env_has("SBATCH_CLUSTERS") {
        return Err(usage("multi-cluster submission (--clusters, -M, SLURM_CLUSTERS) is not supervised; submit on one cluster"));
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
            sbatch_args::parse_array_spec_limited(spec, limits.max_array_tasks).map_err(|e| {
                usage(format!(
                    "invalid --array {spec:?}: {e} (the most tasks one submission may have is limits.max_array_tasks = {})",
                    limits.max_array_tasks
                ))
            })?,
        ),
        None => None,
    };
    let new_chains = array_tasks.as_ref().map_or(1, Vec::len);
    // What the store keeps for this user's unfinished work, this submission included.
    let size = r.script.as_ref().map_or(0, Vec::len)
        + r.cwd.len()
        + r.argv.iter().map(|a| a.len() + 3).sum::<usize>()
        + r.env
            .iter()
            .map(|(k, v)| k.len() + v.len() + 6)
            .sum::<usize>();
    check_room(desk.store, &limits, uid, new_chains, size as u64)?;
    // Continuation (docs/continuation.md): the script's `#SSV` lines, under the command
    // line's `--continue`.
    let from_script = match &r.script {
        Some(s) => Continuation::from_script(s).map_err(|e| usage(e.to_string()))?,
        None => None,
    };
    let continuation =
        Continuation::merged(from_script, r.continuation).map_err(|e| usage(e.to_string()))?;
    let new = NewSubmission {
        owner_uid: uid,
        user: crate::daemon::access::user_name(uid),
        argv: r.argv,
        cwd: r.cwd,
        env: r.env,
        script_name,
        script: r.script,
        max_retries: r.max_retries.unwrap_or(desk.config.retry.max_retries),
        restartable: r.restartable,
        array_tasks,
        continuation: continuation.map(Box::new),
    };
    let t = now();
    // The intent and the request id that made it are one transaction, one sync to disk,
    // before sbatch runs: a retry of this request finds the submission, and a crash
    // before it leaves neither (the client was told nothing, and nothing runs).
    let l = crate::daemon::sbatch::begin_submission(
        desk.store,
        desk.config,
        &new,
        &submitted,
        r.request_id.as_deref(),
        t,
    )
    .map_err(|e| match e {
        crate::daemon::sbatch::PrepareError::Dependency(d) => usage(format!("--dependency: {d}")),
        e => internal(e),
    })?;
    crate::plumbing::failpoint::hit("after-intent");
    let sub = new.stored_as(l.submission_id, t);
    Ok(PendingSubmit {
        launch: l,
        sub,
        uid,
        t,
        span,
    })
}

/// Refuses new work past the caller's limits: `new_chains` more unfinished chains, and
/// `bytes` more kept for them. One read of the user's totals, whatever they have open.
pub fn check_room(
    store: &Store,
    limits: &LimitsConfig,
    uid: u32,
    new_chains: usize,
    bytes: u64,
) -> Result<(), Response> {
    let totals = store.user_totals(uid)?;
    let open = totals.open_chains as usize;
    if open + new_chains > limits.max_open_chains_per_user {
        return Err(Response::error(
            ErrorKind::Unavailable,
            format!(
                "you have {open} unfinished chains and this adds {new_chains}: more than limits.max_open_chains_per_user = {}; wait for some to end",
                limits.max_open_chains_per_user
            ),
        ));
    }
    check_bytes(limits, &totals, bytes, "this one")
}

/// Refuses to keep `bytes` more for a user whose unfinished chains' submissions and
/// decision records would then take more than `limits.max_stored_bytes_per_user`.
pub fn check_bytes(
    limits: &LimitsConfig,
    totals: &crate::store::UserTotals,
    bytes: u64,
    what: &str,
) -> Result<(), Response> {
    let max = limits.max_stored_bytes_per_user.0;
    let kept = totals.kept_bytes();
    if kept.saturating_add(bytes) > max {
        return Err(Response::error(
            ErrorKind::Unavailable,
            format!(
                "your unfinished chains' submissions and decision records take {kept} bytes and {what} {bytes}: \
                 more than limits.max_stored_bytes_per_user = {max}; wait for some to end, or cancel some"
            ),
        ));
    }
    Ok(())
}

/// Records what came of a submission's sbatch and says it to the client. Whatever the
/// client is told is what the store will do: a submission answered with a failure is
/// left unpromised (reconciliation adopts a job it finds, and never submits one), and
/// only an answer that says it will be submitted later promises it.
pub fn finish_submit<S>(
    desk: &mut Desk<'_, S>,
    p: &PendingSubmit,
    outcome: LaunchOutcome,
) -> Response {
    let l = &p.launch;
    match outcome {
        LaunchOutcome::Submitted(job) => {
            if let Err(e) = desk.record_launch(l, &LaunchOutcome::Submitted(job.clone()), p.t, false) {
                // The job exists and carries its tag; the launch stays an intent, and
                // reconciliation finds the job and adopts it once the store takes writes.
                p.span.record("job", tracing::field::display(&job));
                tracing::error!(tag = %l.tag, "submitted, but cannot record it yet: {e}; it is adopted by its tag once the store takes writes again");
                return Response::answer(&SubmitAnswer {
                    job_id: job,
                    chains: Vec::new(),
                });
            }
            let chains: Vec<String> = desk
                .store
                .resolve(&job)
                .unwrap_or_default()
                .into_iter()
                .map(chain_label)
                .collect();
            if let [chain] = chains.as_slice() {
                p.span.record("chain", tracing::field::display(chain));
            }
            Response::answer(&SubmitAnswer {
                job_id: job,
                chains,
            })
        }
        LaunchOutcome::Refused { code, stderr } => {
            if let Err(e) = desk.store.discard_submission(l.id) {
                // Left unpromised, it is discarded by reconciliation, never submitted.
                tracing::warn!(tag = %l.tag, "cannot discard a refused submission yet: {e}");
            }
            Response::Error(ErrorBody {
                kind: ErrorKind::SbatchFailed,
                message: format!("sbatch failed with exit code {code}"),
                exit_code: Some(code),
                stderr: Some(stderr),
            })
        }
        LaunchOutcome::Unknown(e) => match desk.record_launch(l, &LaunchOutcome::Unknown(e), p.t, true) {
            Ok(()) => Response::error(
                ErrorKind::Unavailable,
                format!(
                    "sbatch gave no clear answer ({}); the submission is recorded and will be looked up by its tag \
                     and submitted once Slurm answers: watch `supervisorctl status`",
                    desk.store.launch(l.id).ok().and_then(|l| l.error).unwrap_or_default()
                ),
            ),
            Err(store) => Response::error(
                ErrorKind::Internal,
                format!(
                    "sbatch gave no clear answer and the daemon cannot record the submission ({store}): it will not be \
                     submitted later; if sbatch did create the job, it is found by its tag and supervised, so check \
                     `supervisorctl status` before submitting again"
                ),
            ),
        },
    }
}
