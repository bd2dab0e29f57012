//! `status`: one row per chain, the caller's own (all of them for root).

use super::views;
use crate::daemon::access::{chains_for, sees_all};
use crate::protocol::views::ChainRow;
use crate::protocol::Response;
use crate::store::{Store, StoreError};

pub(super) fn status(store: &Store, id: Option<&str>, uid: u32) -> Result<Vec<ChainRow>, Response> {
    let chains = match id {
        Some(id) => chains_for(store, id, uid)?,
        None => store.chains(if sees_all(uid) { None } else { Some(uid) })?,
    };
    let rows: Result<Vec<ChainRow>, StoreError> =
        chains.iter().map(|c| views::chain_view(store, c)).collect();
    Ok(rows?)
}
