//! `supervisorctl stats`: how recovery went, per chain and in total. Measured from the
//! decision records, so it is as honest as they are.

use super::access::{chains_for, sees_all, Handled};
use crate::model::{Action, ChainState};
use crate::store::{chain_label, Store};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};

#[derive(Default)]
struct Counts {
    automatic_retries: u32,
    agent_resolutions: u32,
    agent_retries: u32,
}

pub fn stats(store: &Store, id: Option<&str>, uid: u32) -> Handled {
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
    let mut per_chain = Vec::new();
    let mut total = json!({
        "chains": chains.len(), "automatic_retries": 0, "agent_resolutions": 0, "agent_retries": 0,
        "recovered_successfully": 0, "not_recovered": 0, "recovery_in_progress": 0,
    });
    let mut by_state: BTreeMap<&str, u32> = BTreeMap::new();
    for ch in &chains {
        *by_state.entry(ch.state.as_str()).or_default() += 1;
        let c = counts.remove(&ch.id).unwrap_or_default();
        // Whether the retries an agent (or person) asked for then succeeded.
        let recovered = if c.agent_retries == 0 {
            Value::Null
        } else if ch.state == ChainState::Completed {
            Value::Bool(true)
        } else if matches!(ch.state, ChainState::Active | ChainState::Ready) {
            Value::Null
        } else {
            Value::Bool(false)
        };
        let bucket = match (&recovered, c.agent_retries) {
            (_, 0) => None,
            (Value::Bool(true), _) => Some("recovered_successfully"),
            (Value::Bool(false), _) => Some("not_recovered"),
            _ => Some("recovery_in_progress"),
        };
        if let Some(b) = bucket {
            total[b] = json!(total[b].as_u64().unwrap_or(0) + 1);
        }
        for (k, v) in [
            ("automatic_retries", c.automatic_retries),
            ("agent_resolutions", c.agent_resolutions),
            ("agent_retries", c.agent_retries),
        ] {
            total[k] = json!(total[k].as_u64().unwrap_or(0) + u64::from(v));
        }
        per_chain.push(json!({
            "id": chain_label(ch.id),
            "state": ch.state,
            "automatic_retries": c.automatic_retries,
            "agent_resolutions": c.agent_resolutions,
            "agent_retries": c.agent_retries,
            "recovered_successfully": recovered,
        }));
    }
    total["by_state"] = json!(by_state);
    Ok(json!({ "total": total, "chains": per_chain }))
}
