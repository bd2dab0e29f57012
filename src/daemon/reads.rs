//! Read requests (status, history, pending, stats, ping). They change nothing, so the
//! control socket answers them itself from a read-only store connection, off the daemon's
//! loop: no poll cycle, sbatch or other user's request can hold them up.

use super::access::{chains_for, sees_all, Handled};
use super::views;
use crate::model::ChainState;
use crate::protocol::{Request, Response};
use crate::store::{Store, StoreError};
use serde_json::{json, Value};

/// Answers `request` if it is a read; `None` for requests that must go to the loop.
pub fn handle(store: &Store, request: &Request, uid: u32) -> Option<Response> {
    let result = match request {
        Request::Ping => Ok(json!({ "pong": true })),
        Request::Status { id } => status(store, id.as_deref(), uid),
        Request::History { id } => history(store, id, uid),
        Request::Pending => pending(store, uid),
        Request::Stats { id } => super::stats::stats(store, id.as_deref(), uid),
        _ => return None,
    };
    Some(match result {
        Ok(v) => Response::Ok(v),
        Err(r) => r,
    })
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

fn status(store: &Store, id: Option<&str>, uid: u32) -> Handled {
    let chains = match id {
        Some(id) => chains_for(store, id, uid)?,
        None => store.chains(if sees_all(uid) { None } else { Some(uid) })?,
    };
    let rows: Result<Vec<Value>, StoreError> =
        chains.iter().map(|c| views::chain_view(store, c)).collect();
    Ok(Value::Array(rows?))
}

fn history(store: &Store, id: &str, uid: u32) -> Handled {
    let chains = chains_for(store, id, uid)?;
    if chains.len() == 1 {
        return Ok(views::history_view(store, &chains[0])?);
    }
    let all: Result<Vec<Value>, StoreError> = chains
        .iter()
        .map(|c| views::history_view(store, c))
        .collect();
    Ok(Value::Array(all?))
}

fn pending(store: &Store, uid: u32) -> Handled {
    let mut out = Vec::new();
    for c in store.chains_in_state(ChainState::PendingFailed)? {
        if sees_all(uid) || store.owner_of(c.id)? == uid {
            out.push(views::pending_view(store, &c)?);
        }
    }
    Ok(Value::Array(out))
}
