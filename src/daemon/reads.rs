//! Read requests (status, history, pending, stats, ping). They change nothing, so the
//! control socket answers them itself from a read-only store connection, off the daemon's
//! loop: no poll cycle, sbatch or other user's request can hold them up.

use super::access::{chains_for, sees_all};
use super::views;
use crate::model::ChainState;
use crate::protocol::views::{ChainRow, HistoryAnswer, PendingChain, Pong};
use crate::protocol::{Request, Response};
use crate::store::{Store, StoreError};
use serde::Serialize;

/// Answers `request` if it is a read; `None` for requests that must go to the loop.
/// The answer is typed until here, where it becomes the wire's JSON.
pub fn handle(store: &Store, request: &Request, uid: u32) -> Option<Response> {
    Some(match request {
        Request::Ping => Response::answer(&Pong { pong: true }),
        Request::Status { id } => answer(status(store, id.as_deref(), uid)),
        Request::History { id } => answer(history(store, id, uid)),
        Request::Pending => answer(pending(store, uid)),
        Request::Stats { id } => answer(super::stats::stats(store, id.as_deref(), uid)),
        _ => return None,
    })
}

fn answer<T: Serialize>(result: Result<T, Response>) -> Response {
    match result {
        Ok(v) => Response::answer(&v),
        Err(r) => r,
    }
}

/// True for the requests `handle` answers.
pub fn is_read(request: &Request) -> bool {
    matches!(
        request,
        Request::Ping
            | Request::Status { .. }
            | Request::History { .. }
            | Request::Pending
            | Request::Stats { .. }
    )
}

fn status(store: &Store, id: Option<&str>, uid: u32) -> Result<Vec<ChainRow>, Response> {
    let chains = match id {
        Some(id) => chains_for(store, id, uid)?,
        None => store.chains(if sees_all(uid) { None } else { Some(uid) })?,
    };
    let rows: Result<Vec<ChainRow>, StoreError> =
        chains.iter().map(|c| views::chain_view(store, c)).collect();
    Ok(rows?)
}

fn history(store: &Store, id: &str, uid: u32) -> Result<HistoryAnswer, Response> {
    let chains = chains_for(store, id, uid)?;
    if let [one] = chains.as_slice() {
        return Ok(HistoryAnswer::One(views::history_view(store, one)?));
    }
    let all: Result<Vec<_>, StoreError> = chains
        .iter()
        .map(|c| views::history_view(store, c))
        .collect();
    Ok(HistoryAnswer::Many(all?))
}

fn pending(store: &Store, uid: u32) -> Result<Vec<PendingChain>, Response> {
    let mut out = Vec::new();
    for c in store.chains_in_state(ChainState::PendingFailed)? {
        if sees_all(uid) || store.owner_of(c.id)? == uid {
            out.push(views::pending_view(store, &c)?);
        }
    }
    Ok(out)
}
