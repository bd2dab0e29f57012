//! `history`: a chain's attempts and decisions, in order (every task's, for an array).

use super::{fill, Read};
use crate::daemon::access::chains_for;
use crate::protocol::views::HistoryAnswer;
use crate::protocol::Response;
use crate::store::{Store, StoreError};

pub fn read(id: String) -> Read {
    Read::Store(Box::new(move |store, uid| {
        super::answer(history(store, &id, uid))
    }))
}

fn history(store: &Store, id: &str, uid: u32) -> Result<HistoryAnswer, Response> {
    let chains = chains_for(store, id, uid)?;
    if let [one] = chains.as_slice() {
        return Ok(HistoryAnswer::One(Box::new(fill::history_view(
            store, one,
        )?)));
    }
    let all: Result<Vec<_>, StoreError> = chains
        .iter()
        .map(|c| fill::history_view(store, c))
        .collect();
    Ok(HistoryAnswer::Many(all?))
}
