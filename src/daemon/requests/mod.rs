//! Control requests that change something, handled on the daemon's loop (reads are
//! answered by `reads`, off the loop). One file per request kind.
//!
//! One path for every such request, the daemon's and the tests' alike, as mini-redis
//! parses a command once and applies it: [`begin`] checks it and does what can be done on
//! the loop, and comes back with a [`Plan`]: answered now, or a Slurm command to run
//! beside the loop ([`Beside`]: a submit's sbatch, a cancel's scancels, run as the
//! caller, who could hold them), whose answer [`finish`] records and turns into the
//! answer. The daemon runs [`carry_out`] beside its loop; [`handle`] (the in-process
//! tests) awaits it in place. The answer is the truth: a submission the client is told
//! failed is never submitted later.

pub mod adopt;
pub mod cancel;
mod classify;
mod recover;
mod resolution;
pub mod submit;

use super::engine::Engine;
use super::sbatch::{self, LaunchOutcome};
use crate::protocol::{Request, Response};
use crate::slurm::Slurm;
use std::path::Path;

pub use cancel::PendingCancel;
use cancel::{begin_cancel, finish_cancel, run_scancels, BegunCancel};
pub use submit::PendingSubmit;
use submit::{begin_submit, finish_submit};

/// The span of one control request handled on the loop: its `cmd`, the caller's uid, the
/// chain or job it names as given (`subject`), and the `chain` and `job` a submit made once
/// they are known. (Not `target`: the journal has a `TARGET` field, the code's module.)
pub fn span(request: &Request, uid: u32) -> tracing::Span {
    let span = tracing::info_span!(
        "request",
        cmd = %request.cmd(),
        uid,
        subject = tracing::field::Empty,
        chain = tracing::field::Empty,
        job = tracing::field::Empty,
    );
    if let Some(t) = request.subject() {
        span.record("subject", t);
    }
    span
}

/// What a request that changes something comes to on the loop, as mini-redis applies a
/// parsed command: answered now, or a Slurm command to run beside the loop (as the
/// caller's user, who could hold it) whose answer [`finish`] then records. The chains or
/// launch it concerns are marked meanwhile (a submit's launch in flight, a cancel's chains
/// held), so the cycle leaves them alone.
#[derive(Debug)]
pub enum Plan {
    /// Answered now.
    Done(Response),
    /// A Slurm command to run beside the loop.
    Beside(Beside),
}

/// A request's Slurm command, to run beside the loop.
#[derive(Debug)]
pub enum Beside {
    /// A submission whose intent is recorded: its sbatch is to run.
    Submit(Box<PendingSubmit>),
    /// A cancel of live jobs: its scancels are to run.
    Cancel(PendingCancel),
}

impl Beside {
    /// The chains it holds (a cancel's), for the cycle to leave alone.
    pub fn chains(&self) -> &[i64] {
        match self {
            Beside::Cancel(p) => &p.chains,
            Beside::Submit(_) => &[],
        }
    }

    /// The submission whose sbatch it is to run, if it is a submit's.
    pub fn submission(&self) -> Option<&crate::store::Submission> {
        match self {
            Beside::Submit(p) => Some(&p.sub),
            Beside::Cancel(_) => None,
        }
    }
}

/// A plan's Slurm command, answered.
#[derive(Debug)]
pub enum Landed {
    Submit(Box<PendingSubmit>, LaunchOutcome),
    Cancel(PendingCancel, Result<(), String>),
}

/// Checks a request that changes something and does what can be done on the loop. The
/// one entry for such requests, the daemon's and the tests' alike; reads are answered off
/// the loop (`reads`).
pub async fn begin<S: Slurm>(
    engine: &mut Engine<S>,
    request: Request,
    uid: u32,
    span: tracing::Span,
) -> Plan {
    let answered = |r: Result<Response, Response>| Plan::Done(r.unwrap_or_else(|e| e));
    if !request.is_read() {
        if let Err((per_minute, wait)) = engine.take_write(uid) {
            return Plan::Done(too_many(per_minute, wait));
        }
    }
    match request {
        Request::Submit(r) => match begin_submit(engine, r, uid, span) {
            Ok(p) => {
                engine.start_flight(p.launch.id, p.uid);
                Plan::Beside(Beside::Submit(Box::new(p)))
            }
            Err(e) => Plan::Done(e),
        },
        Request::Cancel { id } => match begin_cancel(engine, &id, uid, span) {
            Ok(BegunCancel::Scancel(p)) => {
                engine.hold(&p.chains);
                Plan::Beside(Beside::Cancel(p))
            }
            Ok(BegunCancel::Done(r)) | Err(r) => Plan::Done(r),
        },
        Request::Classify(r) => {
            answered(classify::classify(engine, r, uid).map(|a| Response::answer(&a)))
        }
        Request::Recover(r) => {
            answered(recover::recover(engine, r, uid).map(|a| Response::answer(&a)))
        }
        Request::Adopt { job_ids } => answered(
            adopt::adopt(engine, &job_ids, uid)
                .await
                .map(|a| Response::answer(&a)),
        ),
        Request::PlainOpt { opted_in } => {
            answered(plain_opt(engine, uid, opted_in).map(|a| Response::answer(&a)))
        }
        // The socket answers it (`server::answer`), from the lease thread's view, not
        // the store.
        Request::Cluster => Plan::Done(Response::error(
            crate::protocol::ErrorKind::Internal,
            "cluster is answered by the control socket, not the loop",
        )),
        Request::Ping
        | Request::Status { .. }
        | Request::History { .. }
        | Request::Pending
        | Request::Stats { .. } => {
            match crate::daemon::reads::handle(engine.store(), &request, uid) {
                Some(r) => Plan::Done(r),
                None => unreachable!("a read is answered by reads::handle"),
            }
        }
    }
}

/// The answer to a request past its user's rate: nothing was done, try again later (exit
/// 75, as for a daemon that is busy).
fn too_many(per_minute: u32, wait: std::time::Duration) -> Response {
    Response::error(
        crate::protocol::ErrorKind::Unavailable,
        format!(
            "you have made more requests that change something than limits.write_requests_per_minute = {per_minute} allows; \
             nothing was done: try again in {:.1}s",
            wait.as_secs_f64().max(0.1)
        ),
    )
}

/// Records a user's plain-sbatch choice (the daemon then publishes it for the filter,
/// `daemon::plain`).
fn plain_opt<S: Slurm>(
    engine: &mut Engine<S>,
    uid: u32,
    opted_in: bool,
) -> Result<crate::protocol::views::PlainOptAnswer, Response> {
    // A choice this daemon would never read changes nothing: refused, so nothing is kept
    // (each one a journal entry every node applies, in cluster mode).
    if !engine.config().plain_sbatch.enabled {
        return Err(crate::protocol::Response::error(
            crate::protocol::ErrorKind::Conflict,
            "this daemon does not supervise plain sbatch submissions ([plain_sbatch] enabled = false), \
             so your choice would change nothing and is not recorded; submit with `supervisorctl submit`, \
             or ask your admin to enable plain sbatch",
        ));
    }
    // The same choice again is answered as it stands, and writes nothing.
    engine
        .store_mut()
        .set_plain_opt(uid, opted_in, crate::clock::now())?;
    Ok(crate::protocol::views::PlainOptAnswer {
        uid,
        opted_in,
        enabled: true,
    })
}

/// Runs a request's Slurm command (beside the loop, in the daemon).
pub async fn carry_out<S: Slurm>(slurm: &S, state_dir: &Path, command: Beside) -> Landed {
    match command {
        Beside::Submit(p) => {
            let outcome = sbatch::sbatch(slurm, state_dir, &p.launch, &p.sub).await;
            Landed::Submit(p, outcome)
        }
        Beside::Cancel(p) => {
            let scancelled = run_scancels(slurm, &p).await;
            Landed::Cancel(p, scancelled)
        }
    }
}

/// Records what a plan's Slurm command answered, and makes the answer (in the request's
/// span); the launch or chains it marked are the cycle's again.
pub fn finish<S: Slurm>(engine: &mut Engine<S>, landed: Landed) -> Response {
    match landed {
        Landed::Submit(p, outcome) => {
            let _span = p.span.clone().entered();
            engine.end_flight(p.launch.id);
            finish_submit(engine, &p, outcome)
        }
        Landed::Cancel(p, scancelled) => {
            let _span = p.span.clone().entered();
            engine.release(&p.chains);
            finish_cancel(engine, &p, scancelled)
        }
    }
}

/// Handles one request to completion (reads too), through the same [`begin`], [`carry_out`]
/// and [`finish`] as the daemon's loop, with the Slurm command awaited in place: the
/// in-process tests drive it.
pub async fn handle<S: Slurm>(engine: &mut Engine<S>, request: Request, uid: u32) -> Response {
    let span = tracing::Span::current();
    match begin(engine, request, uid, span).await {
        Plan::Done(answered) => answered,
        Plan::Beside(command) => {
            let dir = engine.config().state_dir.clone();
            let landed = carry_out(engine.slurm(), &dir, command).await;
            finish(engine, landed)
        }
    }
}
