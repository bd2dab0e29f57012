//! `rules`: the `[[rules]]` entries in force, and the rules proposed from how people and
//! agents resolved endings of one failure signature (docs/rules.md; `crate::learn`
//! decides what is proposed).
//!
//! Root (and the daemon's own user) sees the proposals made from every chain; any other
//! user, those made from their own chains only.

use super::Read;
use crate::config::Config;
use crate::daemon::access::sees_all;
use crate::learn::{self, Change, Outcome, Resolved, SignatureHistory, Thresholds};
use crate::model::{Action, ChainState};
use crate::protocol::views::{RuleInForce, RulesAnswer};
use crate::protocol::Response;
use crate::store::{chain_label, SignatureResolution, Store, StoreError};

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
    for retry in store.rule_retries(owner)? {
        if let Some(r) = in_force.iter_mut().find(|r| r.name == retry.rule) {
            let next = (
                retry.next_state.as_deref(),
                retry.next_slurm_state.as_deref(),
            );
            match outcome(next.0, next.1, retry.chain_state) {
                Outcome::Completed => r.completed += 1,
                Outcome::Failed => r.failed += 1,
                Outcome::Running => r.running += 1,
            }
        }
    }
    for r in &mut in_force {
        r.not_working = learn::not_working(r.completed, r.failed, thresholds);
    }
    let mut proposals = Vec::new();
    for mut h in histories(store.signature_resolutions(owner)?) {
        h.endings = store.signature_endings(&h.signature, owner)?;
        // A proposal whose entry is in force (written to rules.d/) is no longer proposed.
        proposals.extend(
            learn::propose(&h, thresholds)
                .filter(|p| !config.rules.iter().any(|r| r.name == p.rule.name)),
        );
    }
    Ok(RulesAnswer {
        rules: in_force,
        proposals,
    })
}

/// The resolutions grouped by signature, in the order each signature was first resolved.
fn histories(rows: Vec<SignatureResolution>) -> Vec<SignatureHistory> {
    let mut out: Vec<SignatureHistory> = Vec::new();
    for r in rows {
        let resolved = resolved(&r);
        match out.iter_mut().find(|h| h.signature == r.signature) {
            Some(h) => h.resolutions.push(resolved),
            None => out.push(SignatureHistory {
                signature: r.signature,
                text: r.signature_text,
                slurm_state: r.slurm_state,
                exit_code: r.exit_code,
                endings: 0,
                resolutions: vec![resolved],
            }),
        }
    }
    out
}

/// One resolution as `learn` weighs it: the kind of change it asked for (from the
/// resolution stored in its inputs), and how the retry it caused went (the attempt after
/// the resolved one; with none, the chain's state says whether one is still to come).
fn resolved(r: &SignatureResolution) -> Resolved {
    let asked = &r.inputs["resolution"];
    let set = |k: &str| !asked[k].is_null();
    let exclude = asked["exclude"].as_array().is_some_and(|v| !v.is_empty());
    let change = match r.action {
        Action::Resubmit => Change::of(set("mem"), set("time"), exclude, set("partition")),
        _ => Change::None,
    };
    let outcome = (r.action == Action::Resubmit).then(|| {
        outcome(
            r.next_state.as_deref(),
            r.next_slurm_state.as_deref(),
            r.chain_state,
        )
    });
    Resolved {
        decision: r.decision_id,
        chain: chain_label(r.chain_id),
        attempt: r.attempt_n,
        at: r.at,
        actor: r.actor.clone(),
        action: r.action,
        change,
        outcome,
    }
}

/// How a retry went, from the attempt it made (its state and Slurm state, `None` when
/// there is none yet) and its chain's state now.
fn outcome(next: Option<&str>, next_slurm: Option<&str>, chain: ChainState) -> Outcome {
    match (next, next_slurm) {
        (Some("ended"), Some("COMPLETED")) => Outcome::Completed,
        (Some("ended" | "not_submitted"), _) => Outcome::Failed,
        (Some(_), _) => Outcome::Running,
        (None, _) if chain.is_open() => Outcome::Running,
        // Closed with no retry made: completed some other way, or cancelled first.
        (None, _) if chain == ChainState::Completed => Outcome::Completed,
        (None, _) => Outcome::Failed,
    }
}
