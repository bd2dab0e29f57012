//! `pending`: the chains waiting for an agent or a person, with their evidence.

use super::views;
use crate::daemon::access::sees_all;
use crate::model::ChainState;
use crate::protocol::views::PendingChain;
use crate::protocol::Response;
use crate::store::Store;

pub(super) fn pending(store: &Store, uid: u32) -> Result<Vec<PendingChain>, Response> {
    let mut out = Vec::new();
    for c in store.chains_in_state(ChainState::PendingFailed)? {
        if sees_all(uid) || store.owner_of(c.id)? == uid {
            out.push(views::pending_view(store, &c)?);
        }
    }
    Ok(out)
}
