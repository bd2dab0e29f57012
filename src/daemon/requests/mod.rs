//! Control requests that change something, handled on the daemon's loop (reads are
//! answered by `reads`, off the loop). One file per request kind; `handle` only dispatches.
//!
//! A submit is cut in two so that its sbatch never holds up the loop: `submit::begin`
//! checks the request and records the launch's intent, the daemon runs the sbatch beside
//! the loop, and `submit::finish` records what came of it and builds the answer. The
//! answer is the truth: a submission the client is told failed is never submitted later.
//! A cancel of live jobs is cut in two the same way (`cancel::begin_cancel`, its scancel
//! beside the loop, `cancel::finish_cancel`): the scancel runs as the jobs' owner, who
//! could otherwise hold the loop with it.

mod adopt;
pub mod cancel;
mod classify;
mod recover;
mod resolution;
pub mod submit;

use super::engine::Engine;
use crate::protocol::{Request, Response};
use crate::slurm::Slurm;

pub use cancel::{begin_cancel, finish_cancel, run_scancels, BegunCancel, PendingCancel};
pub use submit::{begin_submit, finish_submit, PendingSubmit};

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

/// Handles one request to completion (reads too), as the in-process tests drive it. The
/// daemon's loop uses `begin_submit`/`finish_submit` for submits instead.
pub async fn handle<S: Slurm>(engine: &mut Engine<S>, request: Request, uid: u32) -> Response {
    if let Some(r) = super::reads::handle(engine.store(), &request, uid) {
        return r;
    }
    let result = match request {
        Request::Submit(r) => return submit::submit(engine, r, uid).await,
        Request::Classify(r) => classify::classify(engine, r, uid).map(|a| Response::answer(&a)),
        Request::Recover(r) => recover::recover(engine, r, uid).map(|a| Response::answer(&a)),
        Request::Cancel { id } => return cancel::cancel(engine, &id, uid).await,
        Request::Adopt { job_ids } => adopt::adopt(engine, &job_ids, uid)
            .await
            .map(|a| Response::answer(&a)),
        Request::Ping
        | Request::Status { .. }
        | Request::History { .. }
        | Request::Pending
        | Request::Stats { .. } => unreachable!("reads are answered above"),
    };
    result.unwrap_or_else(|e| e)
}
