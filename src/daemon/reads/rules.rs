//! `rules`: the `[[rules]]` entries in force (the config's, `rules.d/`'s, and the rules
//! users accepted for their own chains), the rules proposed from how people and agents
//! resolved endings of one failure signature (docs/rules.md; `crate::domain::learn` decides what
//! is proposed and where a proposal stands), and the decisions about them.
//!
//! An admin (root, the daemon's own user, a member of `[learn] admin_group`) sees the
//! proposals made from every chain, every user's rules and every decision; any other
//! user, the proposals made from their own chains, their own rules, and the decisions for
//! everyone and their own.

use super::Read;
use crate::config::Config;
use crate::daemon::access::{decides_rules_for_everyone, user_name, Caller};
use crate::domain::learn::{self, ProposalState, RuleAction, RuleRecord, Thresholds};
use crate::protocol::views::{RuleInForce, RulesAnswer};
use crate::protocol::Response;
use crate::store::{RuleRetry, SignatureResolution, Store, StoreError};

pub fn read() -> Read {
    Read::WithConfig(Box::new(|store, config, caller| {
        super::answer(rules(store, config, caller).map_err(Response::from))
    }))
}

/// A decision's scope as people read it: `everyone`, or `user:<name>`.
pub fn scope(owner: Option<u32>) -> String {
    owner.map_or_else(|| "everyone".into(), |o| format!("user:{}", user_name(o)))
}

/// A record's time as answers say it.
pub fn when(at: i64) -> String {
    crate::plumbing::clock::format_unix(at)
}

fn rules(store: &Store, config: &Config, caller: &Caller) -> Result<RulesAnswer, StoreError> {
    // A lookup of the caller's groups that timed out: their own view.
    let everyone = decides_rules_for_everyone(caller).unwrap_or(false);
    let owner = (!everyone).then_some(caller.uid);
    let records: Vec<RuleRecord> = store
        .rule_decisions(owner)?
        .into_iter()
        .map(|mut r| {
            r.scope = scope(r.owner_uid);
            r
        })
        .collect();
    let in_force = config.rules.iter().map(|r| {
        (
            None,
            RuleInForce {
                name: r.name.clone(),
                kind: r.kind,
                exit_codes: r.exit_codes.clone(),
                stderr: r.stderr.as_ref().map(|re| re.as_str().to_string()),
                source: r
                    .source
                    .as_ref()
                    .map_or_else(|| "config".into(), |p| p.display().to_string()),
                proposal: r.proposal.clone(),
                completed: 0,
                failed: 0,
                running: 0,
                not_working: false,
            },
        )
    });
    // The rules users keep for their own chains: the caller's, or everyone's for an admin.
    let mut owners: Vec<u32> = records.iter().filter_map(|r| r.owner_uid).collect();
    owners.sort_unstable();
    owners.dedup();
    let users = owners.iter().flat_map(|&o| {
        learn::accepted_by(&records, o)
            .into_iter()
            .filter_map(|r| {
                let p = r.rule.as_ref()?;
                Some((
                    Some(o),
                    RuleInForce {
                        name: p.name.clone(),
                        kind: p.kind,
                        exit_codes: p.exit_codes.clone(),
                        stderr: Some(p.stderr.clone()),
                        source: r.scope.clone(),
                        proposal: Some(r.proposal.clone()),
                        completed: 0,
                        failed: 0,
                        running: 0,
                        not_working: false,
                    },
                ))
            })
            .collect::<Vec<_>>()
    });
    let thresholds = Thresholds::from(&config.learn);
    let retries = store.rule_retries(owner)?;
    let outcomes = learn::tally(retries.iter().map(RuleRetry::outcome));
    // Each rule by its own retries: a user's own rule by those it gave that user's
    // chains, a rule for everyone by those it gave (never a user's rule of its name).
    let in_force: Vec<RuleInForce> = in_force
        .chain(users)
        .map(|(rule_owner, mut r)| {
            if let Some(&(completed, failed, running)) = outcomes.get(&(r.name.clone(), rule_owner))
            {
                (r.completed, r.failed, r.running) = (completed, failed, running);
                r.not_working = learn::not_working(completed, failed, thresholds);
            }
            r
        })
        .collect();
    Ok(RulesAnswer {
        rules: in_force,
        proposals: proposals(store, config, owner, &records, None)?,
        decisions: records,
    })
}

/// The proposals made from the resolutions of `owner`'s chains (every chain's for
/// `None`), leaving out those whose rule is in force for everyone, each with where it
/// stands for `owner` by `records` (the decisions `owner` may see, oldest first); only
/// the signature `only` when given (`rules accept|reject` of one: the others' endings are
/// not counted).
pub fn proposals(
    store: &Store,
    config: &Config,
    owner: Option<u32>,
    records: &[RuleRecord],
    only: Option<&str>,
) -> Result<Vec<learn::Proposal>, StoreError> {
    let thresholds = Thresholds::from(&config.learn);
    let mut proposals = Vec::new();
    let rows = store.signature_resolutions(owner)?;
    let asked = rows
        .iter()
        .filter(|r| only.is_none_or(|id| r.signature == id));
    for mut h in learn::histories(asked.map(SignatureResolution::facts)) {
        h.endings = store.signature_endings(&h.signature, owner)?;
        // A proposal whose entry is in force (written to rules.d/) is no longer proposed.
        let Some(mut p) = learn::propose(&h, thresholds)
            .filter(|p| !config.rules.iter().any(|r| r.name == p.rule.name))
        else {
            continue;
        };
        let decided = learn::standing(records, &p.id, owner);
        p.state = match learn::state_of(decided) {
            // Accepted for everyone, yet not in force (its file was taken out of
            // rules.d/): it waits again, its acceptance shown.
            ProposalState::Accepted
                if decided
                    .is_some_and(|d| d.owner_uid.is_none() && d.action == RuleAction::Accept) =>
            {
                ProposalState::Waiting
            }
            s => s,
        };
        p.decided = decided.cloned();
        proposals.push(p);
    }
    Ok(proposals)
}
