//! The JSON shapes of the read commands. Field names here are a contract
//! (docs/json-schemas.md): add fields freely, never rename or remove one.

use crate::store::{chain_label, Attempt, Chain, DecisionRecord, Store, StoreError};
use serde_json::{json, Value};

/// The current attempt: the newest one that reached Slurm.
fn current(attempts: &[Attempt]) -> Option<&Attempt> {
    attempts.iter().rev().find(|a| a.slurm_job_id.is_some())
}

/// One row of `status --json`.
pub fn chain_view(store: &Store, c: &Chain) -> Result<Value, StoreError> {
    let attempts = store.attempts(c.id)?;
    let cur = current(&attempts);
    Ok(json!({
        "id": chain_label(c.id),
        "state": c.state,
        "slurm_job_id": cur.and_then(|a| a.slurm_job_id.clone()),
        "attempts": attempts.iter().filter(|a| a.slurm_job_id.is_some()).count(),
        "last_classification": c.last_classification,
        "array_task": c.array_task,
        "submission": c.submission_id,
        "slurm_state": cur.and_then(|a| a.slurm_state.clone().or_else(|| a.last_seen.clone())),
        "next_retry_at": if c.state == crate::model::ChainState::Ready { c.not_before } else { None },
        "dependency_failed": if c.state.is_open() {
            super::dependents::failed_dependencies(store, c.submission_id)?.into_iter().map(chain_label).collect::<Vec<_>>()
        } else {
            Vec::new()
        },
        "created_at": c.created_at,
        "updated_at": c.updated_at,
    }))
}

fn attempt_view(a: &Attempt) -> Value {
    json!({
        "n": a.n,
        "slurm_job_id": a.slurm_job_id,
        "state": a.state,
        "slurm_state": a.slurm_state.clone().or_else(|| a.last_seen.clone()),
        "exit_code": a.exit_code,
        "nodes": a.nodes,
        "mem": a.mem.clone().or_else(|| a.plan.mem_mb.map(|m| format!("{m}M"))),
        "time_limit": a.time_limit.clone().or_else(|| a.plan.time_secs.map(crate::slurm::parse::format_time_limit)),
        "excluded_nodes": a.plan.exclude,
        "requeues": a.restarts,
        "tag": a.tag,
        "submitted_at": a.submitted_at,
        "ended_at": a.ended_at,
    })
}

fn decision_view(d: &DecisionRecord) -> Value {
    json!({
        "id": d.id,
        "at": d.at,
        "attempt": d.attempt_n,
        "class": d.class,
        "classification": d.classification,
        "action": d.action,
        "reason": d.reason,
        "actor": d.actor,
        "resolves": d.resolves,
        "inputs": d.inputs,
    })
}

/// `history --json`: the chain's fields, every attempt and every decision, in order.
pub fn history_view(store: &Store, c: &Chain) -> Result<Value, StoreError> {
    let mut v = chain_view(store, c)?;
    let attempts: Vec<Value> = store.attempts(c.id)?.iter().map(attempt_view).collect();
    let decisions: Vec<Value> = store.decisions(c.id)?.iter().map(decision_view).collect();
    v["attempts_count"] = v["attempts"].clone();
    v["attempts"] = Value::Array(attempts);
    v["decisions"] = Value::Array(decisions);
    Ok(v)
}

/// What the last attempt used against what it asked for, from its sacct rows.
fn usage(observation: &Value) -> Value {
    let rows: Vec<crate::slurm::types::SacctRow> =
        serde_json::from_value(observation.get("rows").cloned().unwrap_or(Value::Null))
            .unwrap_or_default();
    let Some(job) = rows.iter().find(|r| !r.is_step()) else {
        return Value::Null;
    };
    json!({
        "mem_requested_bytes": job.req_mem_bytes,
        "max_rss_bytes": rows.iter().filter_map(|r| r.max_rss_bytes).max(),
        "time_limit_secs": job.timelimit_secs,
        "elapsed_secs": job.elapsed_secs,
        "partition": job.partition,
        "nodes": job.node_list,
    })
}

/// One element of `pending --json`: the status row plus the evidence an agent needs.
pub fn pending_view(store: &Store, c: &Chain) -> Result<Value, StoreError> {
    let mut v = chain_view(store, c)?;
    let sub = store.submission(c.submission_id)?;
    let observations = store.observations(c.id)?;
    let last = observations
        .last()
        .map(|(_, _, _, body)| body.clone())
        .unwrap_or(Value::Null);
    let history = history_view(store, c)?;
    v["held"] = json!(store
        .last_decision(c.id)?
        .is_some_and(|d| d.action == crate::model::Action::Hold));
    v["evidence"] = json!({
        "sacct_rows": last.get("rows").cloned().unwrap_or(Value::Null),
        "stderr_tail": last.get("stderr_tail").cloned().unwrap_or(Value::Null),
        "stdout_tail": last.get("stdout_tail").cloned().unwrap_or(Value::Null),
        "usage": usage(&last),
        "nodes": history["attempts"].as_array().and_then(|a| a.last()).and_then(|a| a.get("nodes")).cloned().unwrap_or(Value::Null),
        "attempts": history["attempts"],
        "decisions": history["decisions"],
        "submission": {
            "argv": sub.argv.iter().map(|a| crate::osbytes::escape(a)).collect::<Vec<_>>(),
            "cwd": crate::osbytes::escape(&sub.cwd),
            "script_name": sub.script_name,
            "script": sub.script.as_deref().map(|s| String::from_utf8_lossy(s).into_owned()),
        },
    });
    Ok(v)
}
