//! `supervisorctl stats`: how recovery went, per chain and in total. Measured from the
//! decision records, so it is as honest as they are.

use super::Read;
use crate::daemon::access::{chains_for, sees_all};
use crate::domain::model::{Action, ChainState};
use crate::protocol::views::{ChainStats, StatsAnswer, StatsTotal};
use crate::protocol::Response;
use crate::store::{chain_label, Chain, Store};
use std::collections::{BTreeMap, HashSet};

#[derive(Default)]
struct Counts {
    automatic_retries: u32,
    agent_resolutions: u32,
    agent_retries: u32,
}

pub fn read(id: Option<String>) -> Read {
    Read::Store(Box::new(move |store, uid| {
        super::answer(stats(store, id.as_deref(), uid))
    }))
}

fn stats(store: &Store, id: Option<&str>, uid: u32) -> Result<StatsAnswer, Response> {
    let chains = match id {
        Some(id) => chains_for(store, id, uid)?,
        None => store.chains(if sees_all(uid) { None } else { Some(uid) })?,
    };
    let wanted: HashSet<i64> = chains.iter().map(|c| c.id).collect();
    let mut counts: BTreeMap<i64, Counts> = BTreeMap::new();
    for (chain, by_supervisor, action, n) in store.decision_counts()? {
        if !wanted.contains(&chain) {
            continue;
        }
        let c = counts.entry(chain).or_default();
        match (by_supervisor, action) {
            (true, Action::Resubmit) => c.automatic_retries += n,
            (true, _) => {}
            (false, Action::Cancel) => {}
            (false, a) => {
                c.agent_resolutions += n;
                if a == Action::Resubmit {
                    c.agent_retries += n;
                }
            }
        }
    }
    let per_chain: Vec<ChainStats> = chains
        .iter()
        .map(|ch| chain_stats(ch, counts.remove(&ch.id).unwrap_or_default()))
        .collect();
    Ok(StatsAnswer {
        total: total(&per_chain),
        chains: per_chain,
    })
}

/// One chain's counts, and whether the retries an agent (or person) asked for then
/// succeeded.
fn chain_stats(ch: &Chain, c: Counts) -> ChainStats {
    let recovered_successfully = if c.agent_retries == 0 {
        None
    } else if ch.state == ChainState::Completed {
        Some(true)
    } else if matches!(ch.state, ChainState::Active | ChainState::Ready) {
        None
    } else {
        Some(false)
    };
    ChainStats {
        id: chain_label(ch.id),
        state: ch.state,
        automatic_retries: c.automatic_retries,
        agent_resolutions: c.agent_resolutions,
        agent_retries: c.agent_retries,
        recovered_successfully,
    }
}

/// The sums over the chains; chains with agent retries are counted by how those went.
fn total(chains: &[ChainStats]) -> StatsTotal {
    let mut t = StatsTotal {
        chains: chains.len() as u64,
        ..StatsTotal::default()
    };
    for c in chains {
        *t.by_state.entry(c.state.as_str().to_string()).or_default() += 1;
        t.automatic_retries += u64::from(c.automatic_retries);
        t.agent_resolutions += u64::from(c.agent_resolutions);
        t.agent_retries += u64::from(c.agent_retries);
        if c.agent_retries > 0 {
            match c.recovered_successfully {
                Some(true) => t.recovered_successfully += 1,
                Some(false) => t.not_recovered += 1,
                None => t.recovery_in_progress += 1,
            }
        }
    }
    t
}
