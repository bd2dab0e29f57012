//! Control requests that change something, handled on the daemon's loop (reads are
//! answered by `reads`, off the loop). One file per request kind; `handle` only dispatches.
//!
//! A submit is cut in two so that its sbatch never holds up the loop: `submit::begin`
//! checks the request and records the launch's intent, the daemon runs the sbatch beside
//! the loop, and `submit::finish` records what came of it and builds the answer. The
//! answer is the truth: a submission the client is told failed is never submitted later.

mod adopt;
mod cancel;
mod classify;
mod recover;
mod resolution;
pub mod submit;

use super::engine::Engine;
use crate::protocol::{Request, Response};
use crate::slurm::Slurm;

pub use submit::{begin_submit, finish_submit, PendingSubmit};

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
        Request::Cancel { id } => cancel::cancel(engine, &id, uid)
            .await
            .map(|a| Response::answer(&a)),
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
