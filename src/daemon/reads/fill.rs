//! The read commands' answers, built from the store. Their types live in
//! `protocol::views`, shared with `supervisorctl` and the MCP server; this module only
//! fills them in.

use crate::domain::model::{Action, ChainState};
use crate::protocol::views::{
    AttemptState, AttemptView, ChainFields, ChainHistory, ChainRow, DecisionView, Evidence,
    PendingChain, SubmissionView, Usage,
};
use crate::slurm::types::SacctRow;
use crate::store::{self, chain_label, Attempt, Chain, DecisionRecord, Store, StoreError};
use serde_json::Value;

/// The current attempt: the newest one that reached Slurm.
fn current(attempts: &[Attempt]) -> Option<&Attempt> {
    attempts.iter().rev().find(|a| a.slurm_job_id.is_some())
}

/// The fields every view of a chain shares, given its attempts.
fn chain_fields(store: &Store, c: &Chain, attempts: &[Attempt]) -> Result<ChainFields, StoreError> {
    let cur = current(attempts);
    fields(
        store,
        c,
        cur.and_then(|a| a.slurm_job_id.clone()),
        cur.and_then(slurm_state),
        true,
        None,
    )
}

/// The chains something waits on, and the submissions that wait on something
/// ([`Store::pipeline_members`]): only these are asked for their edges.
pub type Members = (
    std::collections::HashSet<i64>,
    std::collections::HashSet<i64>,
);

/// The fields of a chain whose current attempt has `slurm_job_id` and `slurm_state`;
/// `may_wait` false when its submission has no `--dependency` (no query needed).
fn fields(
    store: &Store,
    c: &Chain,
    slurm_job_id: Option<String>,
    slurm_state: Option<String>,
    may_wait: bool,
    members: Option<&Members>,
) -> Result<ChainFields, StoreError> {
    let labels = |ids: Vec<i64>| ids.into_iter().map(chain_label).collect::<Vec<_>>();
    let depends_on = if members.is_none_or(|m| m.1.contains(&c.submission_id)) {
        labels(store.depends_on(c.submission_id)?)
    } else {
        Vec::new()
    };
    let dependents = if members.is_none_or(|m| m.0.contains(&c.id)) {
        labels(store.dependents(c.id)?)
    } else {
        Vec::new()
    };
    let dependency_failed = if c.state.is_open() && may_wait {
        store
            .failed_dependencies(c.submission_id)?
            .into_iter()
            .map(chain_label)
            .collect()
    } else {
        Vec::new()
    };
    Ok(ChainFields {
        id: chain_label(c.id),
        state: c.state,
        slurm_job_id,
        last_classification: c.last_classification,
        array_task: c.array_task,
        submission: c.submission_id,
        slurm_state,
        next_retry_at: if c.state == ChainState::Ready {
            c.not_before
        } else {
            None
        },
        dependency_failed,
        depends_on,
        dependents,
        created_at: c.created_at,
        updated_at: c.updated_at,
    })
}

/// A `status` row from a chain summary (the streaming form of [`chain_view`]).
/// `waits` holds the submissions that have a `--dependency` at all, so the others need no
/// query.
pub fn summary_view(
    store: &Store,
    s: store::ChainSummary,
    waits: &std::collections::HashSet<i64>,
    members: &Members,
) -> Result<ChainRow, StoreError> {
    let may_wait = waits.contains(&s.chain.submission_id);
    Ok(ChainRow {
        chain: fields(
            store,
            &s.chain,
            s.slurm_job_id,
            s.slurm_state,
            may_wait,
            Some(members),
        )?,
        attempts: s.submitted,
        continuations: s.continuations,
    })
}

/// How many attempts reached Slurm (what `status` calls `attempts`).
fn submitted_count(attempts: &[Attempt]) -> u32 {
    let n = attempts.iter().filter(|a| a.slurm_job_id.is_some()).count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// An attempt's Slurm state: the last one sacct reported, else the last squeue saw.
fn slurm_state(a: &Attempt) -> Option<String> {
    a.slurm_state.clone().or_else(|| a.last_seen.clone())
}

/// One row of `status --json`.
pub fn chain_view(store: &Store, c: &Chain) -> Result<ChainRow, StoreError> {
    let attempts = store.attempts(c.id)?;
    Ok(ChainRow {
        chain: chain_fields(store, c, &attempts)?,
        attempts: submitted_count(&attempts),
        continuations: store.continuations(c.id)?,
    })
}

fn attempt_state(s: store::AttemptState) -> AttemptState {
    match s {
        store::AttemptState::Launching => AttemptState::Launching,
        store::AttemptState::Live => AttemptState::Live,
        store::AttemptState::Ended => AttemptState::Ended,
        store::AttemptState::NotSubmitted => AttemptState::NotSubmitted,
    }
}

fn attempt_view(a: &Attempt) -> AttemptView {
    AttemptView {
        n: a.n,
        slurm_job_id: a.slurm_job_id.clone(),
        state: attempt_state(a.state),
        slurm_state: slurm_state(a),
        exit_code: a.exit_code.clone(),
        nodes: a.nodes.clone(),
        // What sacct reported, else what was asked.
        mem: a
            .mem
            .clone()
            .or_else(|| a.plan.mem_mb.map(|m| format!("{m}M"))),
        time_limit: a
            .time_limit
            .clone()
            .or_else(|| a.plan.time_secs.map(crate::slurm::parse::format_time_limit)),
        excluded_nodes: a.plan.exclude.clone(),
        requeues: a.restarts,
        in_place: a.in_place,
        tag: a.tag.clone(),
        submitted_at: a.submitted_at,
        ended_at: a.ended_at,
        signature: a.signature.clone(),
        signature_text: a.signature_text.clone(),
    }
}

fn decision_view(d: &DecisionRecord) -> DecisionView {
    DecisionView {
        id: d.id,
        at: d.at,
        attempt: d.attempt_n,
        class: d.class,
        classification: d.classification,
        action: d.action,
        reason: d.reason.clone(),
        reason_code: d.reason_code.clone(),
        actor: d.actor.clone(),
        resolves: d.resolves,
        proposal: d
            .inputs
            .pointer("/verdict/proposal")
            .and_then(|p| p.as_str())
            .map(str::to_string),
        inputs: d.inputs.clone(),
    }
}

/// `history --json`: the chain's fields, every attempt and every decision, in order.
pub fn history_view(store: &Store, c: &Chain) -> Result<ChainHistory, StoreError> {
    let attempts = store.attempts(c.id)?;
    Ok(ChainHistory {
        chain: chain_fields(store, c, &attempts)?,
        attempts_count: submitted_count(&attempts),
        continuations: store.continuations(c.id)?,
        attempts: attempts.iter().map(attempt_view).collect(),
        decisions: store.decisions(c.id)?.iter().map(decision_view).collect(),
        not_recovered: store.not_recovered(c.submission_id)?,
    })
}

/// What the last attempt used against what it asked for, from its sacct rows; `None`
/// when the observation has no job row (or rows this daemon cannot read).
fn usage(observation: &Value) -> Option<Usage> {
    let rows: Vec<SacctRow> = observation
        .get("rows")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default();
    let job = rows.iter().find(|r| !r.is_step())?;
    Some(Usage {
        mem_requested_bytes: job.req_mem_bytes,
        max_rss_bytes: rows.iter().filter_map(|r| r.max_rss_bytes).max(),
        time_limit_secs: job.timelimit_secs,
        elapsed_secs: job.elapsed_secs,
        partition: job.partition.clone(),
        nodes: job.node_list.clone(),
    })
}

/// The srun steps of the last observed run that completed (see
/// [`crate::domain::classify::completed_steps`]); empty for rows this daemon cannot read. Only a
/// `pending_failed` chain shows evidence, so the run did not succeed as a whole (its job
/// row may still say COMPLETED when a step was killed for memory and the script went on).
fn completed_steps(observation: &Value) -> Vec<String> {
    let rows: Vec<SacctRow> = observation
        .get("rows")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default();
    crate::domain::classify::completed_steps(&rows)
}

/// A text field of an observation, `None` when it is missing or not text.
fn text(observation: &Value, key: &str) -> Option<String> {
    observation
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// One element of `pending --json`: the status row plus the evidence an agent needs.
pub fn pending_view(store: &Store, c: &Chain) -> Result<PendingChain, StoreError> {
    let row = chain_view(store, c)?;
    let sub = store.submission(c.submission_id)?;
    let last = store
        .observations(c.id)?
        .pop()
        .map(|(_, _, _, body)| body)
        .unwrap_or(Value::Null);
    let history = history_view(store, c)?;
    let held = store
        .last_decision(c.id)?
        .is_some_and(|d| d.action == Action::Hold);
    let evidence = Evidence {
        sacct_rows: last.get("rows").cloned().unwrap_or(Value::Null),
        stderr_tail: text(&last, "stderr_tail"),
        stdout_tail: text(&last, "stdout_tail"),
        usage: usage(&last),
        completed_steps: completed_steps(&last),
        nodes: history.attempts.last().and_then(|a| a.nodes.clone()),
        attempts: history.attempts,
        decisions: history.decisions,
        submission: SubmissionView {
            argv: sub
                .argv
                .iter()
                .map(|a| crate::plumbing::osbytes::escape(a).into_owned())
                .collect(),
            cwd: crate::plumbing::osbytes::escape(&sub.cwd).into_owned(),
            script_name: sub.script_name,
            script: sub
                .script
                .as_deref()
                .map(|s| String::from_utf8_lossy(s).into_owned()),
        },
    };
    Ok(PendingChain {
        row,
        held,
        evidence,
    })
}
