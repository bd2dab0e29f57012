//! Read requests (status, history, pending, stats, ping). They change nothing, so the
//! control socket answers them itself from a read-only store connection, off the daemon's
//! loop: no poll cycle, sbatch or other user's request can hold them up.

mod history;
pub mod pending;
mod stats;
pub mod status;
pub mod views;

use crate::protocol::views::Pong;
use crate::protocol::{Request, Response};
use crate::store::Store;
use serde::Serialize;

/// Answers `request` if it is a read; `None` for requests that must go to the loop.
/// The answer is typed until here, where it becomes the wire's JSON.
pub fn handle(store: &Store, request: &Request, uid: u32) -> Option<Response> {
    Some(match request {
        Request::Ping => Response::answer(&Pong { pong: true }),
        Request::Status { id } => answer(status::status(store, id.as_deref(), uid)),
        Request::History { id } => answer(history::history(store, id, uid)),
        Request::Pending => answer(pending::pending(store, uid)),
        Request::Stats { id } => answer(stats::stats(store, id.as_deref(), uid)),
        _ => return None,
    })
}

fn answer<T: Serialize>(result: Result<T, Response>) -> Response {
    match result {
        Ok(v) => Response::answer(&v),
        Err(r) => r,
    }
}

/// True for the requests `handle` answers: the reads of the store (`Request::is_read`,
/// but `cluster`, which the server answers from the lease thread's view).
pub fn is_read(request: &Request) -> bool {
    request.is_read() && !matches!(request, Request::Cluster)
}
