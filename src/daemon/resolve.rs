//! Resolving chains by hand or by an agent: `classify` (retry, fail or hold a
//! `pending_failed` chain) and `recover` (resubmit a failed one). Each is a new decision
//! record pointing at the one it resolves; the chain's state is changed only if it is
//! still where the caller saw it, so two resolvers racing cannot both win.

use super::access::{actor, chains_for, internal, Handled};
use super::engine::{now, Engine};
use super::launch;
use crate::model::RetryPlan;
use crate::policy::{self, Event, Transition};
use crate::protocol::{ErrorKind, RecoverRequest, Resolution, ResolveAction, Response};
use crate::slurm::Slurm;
use crate::store::{chain_label, Chain};
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

/// The transitions of `event` for every chain, or the first chain's refusal as a conflict.
fn transitions<S: Slurm>(
    engine: &Engine<S>,
    chains: &[Chain],
    event: Event,
    t: i64,
) -> Result<Vec<(i64, Transition)>, Response> {
    let ctx = policy::Context::at(t);
    chains
        .iter()
        .map(|c| {
            policy::transition(c, event, &engine.config, &ctx)
                .map(|tr| (c.id, tr))
                .map_err(|r| {
                    Response::error(ErrorKind::Conflict, format!("{} {r}", chain_label(c.id)))
                })
        })
        .collect()
}

/// Records the transitions of a request as one transaction: an array's chains change
/// together or not at all.
fn commit<S: Slurm>(
    engine: &mut Engine<S>,
    items: Vec<(i64, Transition)>,
    t: i64,
    moved: &str,
) -> Result<Vec<String>, Response> {
    let mut ready = Vec::with_capacity(items.len());
    for (c, tr) in items {
        ready.push((c, engine.with_dependents(c, tr)?));
    }
    if let Some(c) = engine.store.decide_chains(&ready, t)? {
        return Err(Response::error(
            ErrorKind::Conflict,
            format!("{} {moved}", chain_label(c)),
        ));
    }
    Ok(ready.into_iter().map(|(c, _)| chain_label(c)).collect())
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
    let t = now();
    let who = actor(uid);
    let event = Event::Resolved {
        resolution: &r,
        plan: &extra,
        actor: &who,
    };
    let items = transitions(engine, &chains, event, t)?;
    // The action every chain gets (a hold when the resolver was unsure): the same for all.
    let action = items
        .first()
        .map(|(_, tr)| policy::resolution_action(tr))
        .unwrap_or(r.action);
    // A retry is previewed for every chain first, dry run or not: one that sbatch would
    // refuse is turned down here, before any of them is recorded.
    let mut shown = Vec::new();
    for (c, (_, tr)) in chains.iter().zip(&items) {
        let reason = tr.record.as_ref().map(|d| d.reason.to_string());
        let mut item = json!({ "chain": chain_label(c.id), "action": action, "reason": reason });
        if action == ResolveAction::Retry {
            item["would_run"] = preview(engine, c, &c.plan.merged(&extra))?;
        }
        shown.push(item);
    }
    if r.dry_run {
        return Ok(json!({ "dry_run": true, "resolutions": shown }));
    }
    let done = commit(
        engine,
        items,
        t,
        "was resolved by someone else first; nothing changed",
    )?;
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
    let t = now();
    let who = actor(uid);
    let event = Event::Recovered {
        request: &r,
        plan: &extra,
        actor: &who,
    };
    let items = transitions(engine, &chains, event, t)?;
    // Previewed first, dry run or not, so a retry sbatch would refuse is turned down here.
    let previews: Result<Vec<Value>, Response> = chains
        .iter()
        .map(|c| preview(engine, c, &c.plan.merged(&extra)))
        .collect();
    let previews = previews?;
    if r.dry_run {
        return Ok(json!({ "dry_run": true, "would_run": previews }));
    }
    let done = commit(engine, items, t, "changed state meanwhile; look again")?;
    Ok(json!({ "recovering": done }))
}
