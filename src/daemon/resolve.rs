//! Resolving chains by hand or by an agent: `classify` (retry, fail or hold a
//! `pending_failed` chain) and `recover` (resubmit a failed one). Each is a new decision
//! record pointing at the one it resolves; the chain's state is changed only if it is
//! still where the caller saw it, so two resolvers racing cannot both win.

use super::access::{actor, chains_for, internal, Handled};
use super::engine::{now, Engine};
use super::{dependents, launch};
use crate::model::{Action, ChainState, Classification, RecoveryClass, RetryPlan};
use crate::protocol::{ErrorKind, RecoverRequest, Resolution, ResolveAction, Response};
use crate::slurm::Slurm;
use crate::store::{chain_label, Chain, ChainUpdate, NewDecision};
use serde_json::{json, Value};

fn usage(m: String) -> Response {
    Response::error(ErrorKind::Usage, m)
}

/// The resources a resolver asked for, checked against the admin's caps.
fn plan_from(
    config: &crate::config::Config,
    mem: Option<&str>,
    time: Option<&str>,
    partition: Option<&str>,
    exclude: &[String],
) -> Result<RetryPlan, Response> {
    let mut plan = RetryPlan {
        partition: partition.map(str::to_string),
        exclude: exclude.to_vec(),
        ..Default::default()
    };
    if let Some(m) = mem {
        let bytes = crate::config::parse_mem_size(m).map_err(usage)?;
        if bytes > config.escalation.mem_max_bytes {
            return Err(usage(format!(
                "--mem {m} is above the admin cap escalation.mem_max ({} MiB)",
                config.escalation.mem_max_bytes >> 20
            )));
        }
        plan.mem_mb = Some(bytes.div_ceil(1 << 20));
    }
    if let Some(t) = time {
        let secs = crate::slurm::parse::parse_duration_secs(t).ok_or_else(|| {
            usage(format!(
                "invalid time limit {t:?}: use Slurm's form, e.g. 30, 2:00:00 or 1-00:00:00"
            ))
        })?;
        if secs > config.escalation.time_max.as_secs() {
            return Err(usage(format!(
                "--time {t} is above the admin cap escalation.time_max ({}s)",
                config.escalation.time_max.as_secs()
            )));
        }
        plan.time_secs = Some(secs);
    }
    Ok(plan)
}

/// What a retry of `chain` with `plan` would run; a retry sbatch would refuse is a usage
/// error, before anything is recorded.
fn preview<S: Slurm>(engine: &Engine<S>, c: &Chain, plan: &RetryPlan) -> Result<Value, Response> {
    let sub = engine.store.submission(c.submission_id)?;
    let argv = launch::preview_argv(&engine.config, &sub, c, plan).map_err(|e| match e {
        launch::PrepareError::Args(e) => usage(format!("{}: {e}", chain_label(c.id))),
        e => internal(e),
    })?;
    Ok(
        json!({ "chain": chain_label(c.id), "cwd": crate::osbytes::escape(&sub.cwd), "command": std::iter::once("sbatch".to_string()).chain(argv.iter().map(|a| crate::osbytes::escape(a).into_owned())).collect::<Vec<_>>() }),
    )
}

pub fn classify<S: Slurm>(engine: &mut Engine<S>, r: Resolution, uid: u32) -> Handled {
    if r.reason.trim().is_empty() {
        return Err(usage(
            "a resolution needs a --reason, which is recorded".into(),
        ));
    }
    if r.action != ResolveAction::Retry
        && (r.mem.is_some() || r.time.is_some() || r.partition.is_some() || !r.exclude.is_empty())
    {
        return Err(usage(
            "--mem, --time, --partition and --exclude go with --action retry only".into(),
        ));
    }
    if r.confidence.is_some_and(|c| !(0.0..=1.0).contains(&c)) {
        return Err(usage("--confidence is a number between 0.0 and 1.0".into()));
    }
    let chains = chains_for(&engine.store, &r.id, uid)?;
    let extra = plan_from(
        &engine.config,
        r.mem.as_deref(),
        r.time.as_deref(),
        r.partition.as_deref(),
        &r.exclude,
    )?;
    for c in &chains {
        if c.state != ChainState::PendingFailed {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!("{} is {}, not pending_failed: only a chain waiting for a decision can be classified", chain_label(c.id), c.state),
            ));
        }
    }
    // An unsure resolver does not get to act: a person decides.
    let min = engine.config.agent.min_confidence;
    let (action, reason) = match r.confidence {
        Some(c) if c < min && r.action != ResolveAction::Hold => {
            let asked = if r.action == ResolveAction::Retry {
                "retry"
            } else {
                "fail"
            };
            (
                ResolveAction::Hold,
                format!(
                    "{} (confidence {c} is below {min}: held for a person instead of {asked})",
                    r.reason
                ),
            )
        }
        _ => (r.action, r.reason.clone()),
    };
    // A retry is previewed for every chain first, dry run or not: one that sbatch would
    // refuse is turned down here, before any of them is recorded.
    let mut items = Vec::new();
    for c in &chains {
        let mut item = json!({ "chain": chain_label(c.id), "action": action, "reason": reason });
        if action == ResolveAction::Retry {
            item["would_run"] = preview(engine, c, &c.plan.merged(&extra))?;
        }
        items.push(item);
    }
    if r.dry_run {
        return Ok(json!({ "dry_run": true, "resolutions": items }));
    }
    let t = now();
    let mut done = Vec::new();
    for c in &chains {
        let last = engine.store.last_decision(c.id)?;
        let classification = c.last_classification.unwrap_or(Classification::Ambiguous);
        let mut inputs = json!({ "resolution": r, "plan": extra });
        let (class, act, update) = match action {
            ResolveAction::Retry => (
                RecoveryClass::R2,
                Action::Resubmit,
                ChainUpdate {
                    state: ChainState::Ready,
                    last_classification: None,
                    plan: Some(c.plan.merged(&extra)),
                    not_before: Some(t),
                },
            ),
            ResolveAction::Fail => {
                inputs["dependents"] = json!(dependents::of(&engine.store, c.id)?
                    .into_iter()
                    .map(chain_label)
                    .collect::<Vec<_>>());
                (
                    RecoveryClass::R3,
                    Action::Fail,
                    ChainUpdate {
                        state: ChainState::Failed,
                        last_classification: None,
                        plan: None,
                        not_before: None,
                    },
                )
            }
            ResolveAction::Hold => (
                RecoveryClass::R2,
                Action::Hold,
                ChainUpdate {
                    state: ChainState::PendingFailed,
                    last_classification: None,
                    plan: None,
                    not_before: None,
                },
            ),
        };
        let rec = NewDecision {
            classification,
            class,
            action: act,
            reason: reason.clone(),
            inputs,
            resolves: last.map(|d| d.id),
            actor: actor(uid),
        };
        if !engine
            .store
            .decide_chain(c.id, &[ChainState::PendingFailed], &rec, &update, t)?
        {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!("{} was resolved by someone else first", chain_label(c.id)),
            ));
        }
        done.push(chain_label(c.id));
    }
    Ok(json!({ "resolved": done, "action": action }))
}

pub fn recover<S: Slurm>(engine: &mut Engine<S>, r: RecoverRequest, uid: u32) -> Handled {
    let chains = chains_for(&engine.store, &r.id, uid)?;
    let extra = plan_from(
        &engine.config,
        r.mem.as_deref(),
        r.time.as_deref(),
        None,
        &[],
    )?;
    let allowed = [ChainState::Failed, ChainState::PendingFailed];
    for c in &chains {
        if !allowed.contains(&c.state) {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!(
                    "{} is {}: only a failed or pending_failed chain can be recovered",
                    chain_label(c.id),
                    c.state
                ),
            ));
        }
    }
    // Previewed first, dry run or not, so a retry sbatch would refuse is turned down here.
    let previews: Result<Vec<Value>, Response> = chains
        .iter()
        .map(|c| preview(engine, c, &c.plan.merged(&extra)))
        .collect();
    let previews = previews?;
    if r.dry_run {
        return Ok(json!({ "dry_run": true, "would_run": previews }));
    }
    let reason = r
        .reason
        .clone()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "manual recover".into());
    let t = now();
    let mut done = Vec::new();
    for c in &chains {
        let rec = NewDecision {
            classification: c.last_classification.unwrap_or(Classification::Ambiguous),
            class: RecoveryClass::R2,
            action: Action::Resubmit,
            reason: reason.clone(),
            inputs: json!({ "recover": r, "plan": extra }),
            resolves: engine.store.last_decision(c.id)?.map(|d| d.id),
            actor: actor(uid),
        };
        let update = ChainUpdate {
            state: ChainState::Ready,
            last_classification: None,
            plan: Some(c.plan.merged(&extra)),
            not_before: Some(t),
        };
        if !engine
            .store
            .decide_chain(c.id, &allowed, &rec, &update, t)?
        {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!("{} changed state meanwhile; look again", chain_label(c.id)),
            ));
        }
        done.push(chain_label(c.id));
    }
    Ok(json!({ "recovering": done }))
}
