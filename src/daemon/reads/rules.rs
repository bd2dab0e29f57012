//! `rules`: the `[[rules]]` entries in force, and the rules proposed from how people and
//! agents resolved endings of one failure signature (docs/rules.md; `crate::learn`
//! decides what is proposed).
//!
//! Root (and the daemon's own user) sees the proposals made from every chain; any other
//! user, those made from their own chains only.

use super::Read;
use crate::config::Config;
use crate::daemon::access::sees_all;
use crate::learn::{self, Thresholds};
use crate::protocol::views::{RuleInForce, RulesAnswer};
use crate::protocol::Response;
use crate::store::{RuleRetry, SignatureResolution, Store, StoreError};

pub fn read() -> Read {
    Read::WithConfig(Box::new(|store, config, uid| {
        super::answer(rules(store, config, uid).map_err(Response::from))
    }))
}

fn rules(store: &Store, config: &Config, uid: u32) -> Result<RulesAnswer, StoreError> {
    let in_force = config
        .rules
        .iter()
        .map(|r| RuleInForce {
            name: r.name.clone(),
            kind: r.kind,
            exit_codes: r.exit_codes.clone(),
            stderr: r.stderr.as_ref().map(|re| re.as_str().to_string()),
            source: r
                .source
                .as_ref()
                .map_or_else(|| "config".into(), |p| p.display().to_string()),
            completed: 0,
            failed: 0,
            running: 0,
            not_working: false,
        })
        .collect();
    let owner = (!sees_all(uid)).then_some(uid);
    let thresholds = Thresholds::from(&config.learn);
    let mut in_force: Vec<RuleInForce> = in_force;
    let retries = store.rule_retries(owner)?;
    let outcomes = learn::tally(retries.iter().map(RuleRetry::outcome));
    for r in &mut in_force {
        if let Some(&(completed, failed, running)) = outcomes.get(&r.name) {
            (r.completed, r.failed, r.running) = (completed, failed, running);
            r.not_working = learn::not_working(completed, failed, thresholds);
        }
    }
    Ok(RulesAnswer {
        rules: in_force,
        proposals: proposals(store, config, owner)?,
    })
}

/// The proposals made from the resolutions of `owner`'s chains (every chain's for
/// `None`), leaving out those whose rule is in force.
pub fn proposals(
    store: &Store,
    config: &Config,
    owner: Option<u32>,
) -> Result<Vec<learn::Proposal>, StoreError> {
    let thresholds = Thresholds::from(&config.learn);
    let mut proposals = Vec::new();
    let rows = store.signature_resolutions(owner)?;
    for mut h in learn::histories(rows.iter().map(SignatureResolution::facts)) {
        h.endings = store.signature_endings(&h.signature, owner)?;
        // A proposal whose entry is in force (written to rules.d/) is no longer proposed.
        proposals.extend(
            learn::propose(&h, thresholds)
                .filter(|p| !config.rules.iter().any(|r| r.name == p.rule.name)),
        );
    }
    Ok(proposals)
}
