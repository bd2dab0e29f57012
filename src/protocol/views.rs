//! The daemon's answers, as types. The daemon builds them, `supervisorctl` renders them and
//! the MCP server hands them to agents; JSON exists only on the socket and on stdout.
//!
//! Their serialized form is the contract of docs/json-schemas.md (tests/json_schemas.rs
//! checks the two against each other): add fields freely, never rename or remove one.
//! Every field is always present; an absent value is `null`, never a missing key, so a
//! script can tell "not known" from "not sent by an older daemon". The one exception is
//! noted on [`PlannedResolution::would_run`].

use super::ResolveAction;
use crate::domain::model::{Action, ChainState, Classification, RecoveryClass};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `ping`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pong {
    pub pong: bool,
}

/// What every view of a chain says about it. Not an answer by itself: `status` adds the
/// attempt count, `history` the attempts themselves (both under the name `attempts`,
/// which is why this part is separate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainFields {
    /// The chain's label, `c17`.
    pub id: String,
    pub state: ChainState,
    /// The current attempt's job id: the newest attempt that reached Slurm.
    pub slurm_job_id: Option<String>,
    pub last_classification: Option<Classification>,
    pub array_task: Option<u32>,
    /// The submission it belongs to; every task of an array shares it.
    pub submission: i64,
    /// The current attempt's last known Slurm state.
    pub slurm_state: Option<String>,
    /// For a `ready` chain: when its retry will be submitted.
    pub next_retry_at: Option<i64>,
    /// For an unfinished chain: the failed chains its `--dependency` waits on.
    pub dependency_failed: Vec<String>,
    /// The supervised chains its `--dependency` waits on (submitted through the
    /// supervisor; see docs/pipelines.md).
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// The supervised chains whose `--dependency` waits on it.
    #[serde(default)]
    pub dependents: Vec<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One element of `status --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainRow {
    #[serde(flatten)]
    pub chain: ChainFields,
    /// How many attempts reached Slurm.
    pub attempts: u32,
    /// How many of them were continuations of a job that checkpoints
    /// (docs/continuation.md), not retries of a failure.
    #[serde(default)]
    pub continuations: u32,
}

/// An attempt's state in the store, as `history` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptState {
    Launching,
    Live,
    Ended,
    NotSubmitted,
}

/// One attempt of a chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptView {
    pub n: u32,
    pub slurm_job_id: Option<String>,
    pub state: AttemptState,
    pub slurm_state: Option<String>,
    /// `code:signal`, as sacct prints it.
    pub exit_code: Option<String>,
    pub nodes: Option<String>,
    /// Memory asked, e.g. `100M`.
    pub mem: Option<String>,
    /// `HH:MM:SS` or `D-HH:MM:SS`.
    pub time_limit: Option<String>,
    pub excluded_nodes: Vec<String>,
    /// Times Slurm requeued it itself.
    pub requeues: u32,
    /// The job of the attempt before, requeued in place under the same id.
    #[serde(default)]
    pub in_place: bool,
    /// The tag in the job's comment.
    pub tag: String,
    pub submitted_at: Option<i64>,
    pub ended_at: Option<i64>,
    /// The ending's failure signature (docs/rules.md): its id, and the masked last lines
    /// of stderr it was computed from; `None` while it runs, for a success, and for
    /// endings judged before signatures were.
    #[serde(default)]
    pub signature: Option<String>,
    #[serde(default)]
    pub signature_text: Option<String>,
}

/// One decision record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionView {
    pub id: i64,
    pub at: i64,
    /// The attempt it was about.
    pub attempt: u32,
    pub class: RecoveryClass,
    pub classification: Classification,
    pub action: Action,
    pub reason: String,
    /// The reason's stable name (e.g. `breaker_open`), for scripts and agents to match
    /// on; `null` for records written before it was stored.
    pub reason_code: Option<String>,
    /// `supervisor` or `user:<name>`.
    pub actor: String,
    /// The decision it resolves.
    pub resolves: Option<i64>,
    /// The rule proposal (docs/rules.md) of the rule that decided it, when that rule was
    /// accepted from one (`inputs.verdict.proposal`); `null` otherwise.
    #[serde(default)]
    pub proposal: Option<String>,
    /// What the decision was computed from. Open-ended evidence whose shape depends on who
    /// decided, so it stays JSON.
    pub inputs: serde_json::Value,
}

/// `history --json ID` for one chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainHistory {
    #[serde(flatten)]
    pub chain: ChainFields,
    /// What `status` calls `attempts`: the number that reached Slurm.
    pub attempts_count: u32,
    /// As `status`'s: how many of those continued a job that checkpoints.
    #[serde(default)]
    pub continuations: u32,
    pub attempts: Vec<AttemptView>,
    pub decisions: Vec<DecisionView>,
    /// For a job adopted from Slurm (`adopt`, plain sbatch): what its retries cannot have
    /// exactly as it was submitted, one sentence each; empty for a submission the
    /// supervisor was given whole.
    #[serde(default)]
    pub not_recovered: Vec<String>,
}

/// `history --json ID`: one chain, or every task when ID names an array.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum HistoryAnswer {
    One(Box<ChainHistory>),
    Many(Vec<ChainHistory>),
}

impl HistoryAnswer {
    /// The chains, one or many.
    pub fn chains(&self) -> &[ChainHistory] {
        match self {
            HistoryAnswer::One(h) => std::slice::from_ref(h),
            HistoryAnswer::Many(all) => all,
        }
    }
}

/// What the last attempt used against what it asked for, from its job's sacct row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub mem_requested_bytes: Option<u64>,
    /// The largest MaxRSS of its steps.
    pub max_rss_bytes: Option<u64>,
    pub time_limit_secs: Option<u64>,
    pub elapsed_secs: Option<u64>,
    pub partition: String,
    pub nodes: String,
}

/// The submission as the user made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmissionView {
    pub argv: Vec<String>,
    pub cwd: String,
    pub script_name: Option<String>,
    /// The snapshot's text (bytes that are not UTF-8 are replaced).
    pub script: Option<String>,
}

/// What an agent needs to decide on a `pending_failed` chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The last observation's sacct rows, as the daemon stored them: kept as JSON so that
    /// rows recorded by an older daemon are shown as they are, not dropped.
    pub sacct_rows: serde_json::Value,
    pub stderr_tail: Option<String>,
    pub stdout_tail: Option<String>,
    /// `None` when the last observation has no job row.
    pub usage: Option<Usage>,
    /// The last attempt's srun steps that COMPLETED before it failed (a partial
    /// execution: a rerun would repeat them); empty when none did.
    pub completed_steps: Vec<String>,
    /// The last attempt's nodes.
    pub nodes: Option<String>,
    pub attempts: Vec<AttemptView>,
    pub decisions: Vec<DecisionView>,
    pub submission: SubmissionView,
}

/// One element of `pending --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingChain {
    #[serde(flatten)]
    pub row: ChainRow,
    /// Someone resolved it with `hold`: it waits for a person, not an agent.
    pub held: bool,
    pub evidence: Evidence,
}

/// `stats --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsAnswer {
    pub total: StatsTotal,
    pub chains: Vec<ChainStats>,
}

/// How recovery went for one chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainStats {
    pub id: String,
    pub state: ChainState,
    /// R1 resubmissions.
    pub automatic_retries: u32,
    /// Decisions by an agent or a person.
    pub agent_resolutions: u32,
    /// Of those, resubmissions.
    pub agent_retries: u32,
    /// Whether the chain completed after an agent retry; `None` when there was no agent
    /// retry or the chain still runs.
    pub recovered_successfully: Option<bool>,
}

/// The sums over the chains of a `stats` answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatsTotal {
    pub chains: u64,
    pub automatic_retries: u64,
    pub agent_resolutions: u64,
    pub agent_retries: u64,
    /// Chains with agent retries that then completed.
    pub recovered_successfully: u64,
    /// Chains with agent retries that ended otherwise.
    pub not_recovered: u64,
    /// Chains with agent retries that still run.
    pub recovery_in_progress: u64,
    /// Chains by state name. Keyed by the name, not the enum, so it is in the name's
    /// order, as JSON objects print.
    pub by_state: BTreeMap<String, u64>,
}

/// `submit`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubmitAnswer {
    /// Slurm's job id, which is all `supervisorctl submit` prints.
    pub job_id: String,
    /// The chains created (empty when the launch could not be recorded yet).
    pub chains: Vec<String>,
}

/// `adopt`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdoptAnswer {
    pub adopted: Vec<String>,
}

/// `opt-in`'s and `opt-out`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlainOptAnswer {
    pub uid: u32,
    pub opted_in: bool,
    /// Whether this daemon reads the plain-sbatch notes at all (`[plain_sbatch] enabled`).
    pub enabled: bool,
}

/// `cancel`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelAnswer {
    pub cancelled: Vec<String>,
}

/// The sbatch command a retry of one chain would run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SbatchPreview {
    pub chain: String,
    pub cwd: String,
    /// `sbatch` and its arguments.
    pub command: Vec<String>,
}

/// `recover --dry-run`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecoverDryRun {
    pub dry_run: bool,
    pub would_run: Vec<SbatchPreview>,
}

/// `recover`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecoverAnswer {
    /// The chains whose retry is submitted on the daemon's next cycle.
    pub recovering: Vec<String>,
}

/// What `classify --dry-run` would do to one chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedResolution {
    pub chain: String,
    /// The action that would be recorded (`hold` when the confidence is too low).
    pub action: ResolveAction,
    pub reason: String,
    /// Only for a retry; absent (not null) otherwise, as the daemon has always sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_run: Option<SbatchPreview>,
}

/// `classify --dry-run`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassifyDryRun {
    pub dry_run: bool,
    pub resolutions: Vec<PlannedResolution>,
}

/// `classify`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassifyAnswer {
    pub resolved: Vec<String>,
    pub action: ResolveAction,
}

/// What the daemon answers a `classify`: what would happen, or what did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ClassifyReply {
    DryRun(ClassifyDryRun),
    Done(ClassifyAnswer),
}

/// What the daemon answers a `recover`: what would run, or what is recovering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RecoverReply {
    DryRun(RecoverDryRun),
    Done(RecoverAnswer),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn history(id: &str) -> serde_json::Value {
        json!({
            "id": id, "state": "failed", "slurm_job_id": "7", "last_classification": "oom",
            "array_task": null, "submission": 1, "slurm_state": "FAILED",
            "next_retry_at": null, "dependency_failed": [], "depends_on": [], "dependents": [], "created_at": 1, "updated_at": 2,
            "attempts_count": 0, "continuations": 0, "attempts": [], "decisions": [], "not_recovered": [],
        })
    }

    #[test]
    fn a_history_answer_is_one_chain_or_a_list_and_prints_back_the_same() {
        let one = history("c1");
        let many = json!([history("c1"), history("c2")]);
        let a: HistoryAnswer = serde_json::from_value(one.clone()).unwrap();
        assert!(matches!(&a, HistoryAnswer::One(h) if h.chain.id == "c1"));
        assert_eq!(serde_json::to_value(&a).unwrap(), one);
        let b: HistoryAnswer = serde_json::from_value(many.clone()).unwrap();
        assert_eq!(b.chains().len(), 2);
        assert_eq!(serde_json::to_value(&b).unwrap(), many);
    }

    #[test]
    fn a_planned_resolution_without_a_retry_has_no_would_run_key() {
        let p = PlannedResolution {
            chain: "c1".into(),
            action: ResolveAction::Fail,
            reason: "bug".into(),
            would_run: None,
        };
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({ "chain": "c1", "action": "fail", "reason": "bug" })
        );
    }
}

/// `cluster`'s answer: which daemon acts and what every daemon of the cluster does
/// (docs/cluster.md, "What admins see"). It names nodes and times only, so any user may
/// read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterAnswer {
    /// `single`: one daemon with its store in SQLite, which always acts (no `[store]`
    /// section); `cluster`: daemons on a shared database, one of them active.
    pub mode: String,
    /// The node of the daemon that answered (`[store] node`; the host name on a single
    /// node).
    pub answered_by: String,
    /// The lease, as the database server's clock reads it (`null` on a single node, or
    /// before this daemon has read it).
    pub lease: Option<LeaseAnswer>,
    /// Every daemon that has written its row in the shared database, by node (empty on a
    /// single node).
    pub nodes: Vec<NodeAnswer>,
    /// Why the shared database could not be read last time, if it could not.
    pub error: Option<String>,
}

/// Who holds the lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseAnswer {
    /// The node of the daemon that acts now; `null` when nobody does (the lease is free or
    /// expired).
    pub active_node: Option<String>,
    /// The last epoch granted.
    pub epoch: u64,
    /// When the holder acquired this epoch, in Unix seconds by the database server's clock.
    pub since: Option<i64>,
    /// How long the lease has left, in seconds, by the server's clock (0 when nobody acts).
    pub left_secs: u64,
}

/// One daemon, as its own row in the shared database says (the answering daemon's own
/// row is its state now).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeAnswer {
    pub node: String,
    /// `active`, `standby`, `unknown` (it has not heard from the database in time and does
    /// not act) or `stopped` (it stopped cleanly).
    pub role: String,
    /// The epoch it acts under; `null` unless active.
    pub epoch: Option<u64>,
    /// How long ago it started, in seconds.
    pub started_secs_ago: u64,
    /// How long ago its loop last turned (a poll cycle when active, a catch-up of its
    /// replica when standing by), in seconds; `null` before its first.
    pub last_cycle_secs_ago: Option<u64>,
    /// How long ago it last wrote its row, in seconds.
    pub heartbeat_secs_ago: u64,
    /// It has not written its row for longer than a lease: it may be dead or cut off
    /// (its role is the last it wrote).
    pub silent: bool,
    /// It is the daemon that answered.
    pub this: bool,
}

/// `rules --json` (docs/rules.md): the rules in force and the proposals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RulesAnswer {
    pub rules: Vec<RuleInForce>,
    pub proposals: Vec<crate::domain::learn::Proposal>,
    /// The decisions about rule proposals the caller may see (all for an admin; for a
    /// user, those for everyone and their own), oldest first: records of their own.
    #[serde(default)]
    pub decisions: Vec<crate::domain::learn::RuleRecord>,
}

/// A `[[rules]]` entry in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleInForce {
    pub name: String,
    pub kind: crate::domain::model::Classification,
    pub exit_codes: Vec<i32>,
    pub stderr: Option<String>,
    /// `config` (the config file), the path of the `rules.d/` file it came from, or
    /// `user:<name>` for a rule a user accepted for their own chains (kept in the store).
    pub source: String,
    /// The rule proposal it was accepted from, if it was.
    #[serde(default)]
    pub proposal: Option<String>,
    /// The automatic retries it gave: completed, failed, still running.
    pub completed: u32,
    pub failed: u32,
    pub running: u32,
    /// Its retries stopped working: at least `[learn] agreeing` ended, and fewer than
    /// `[learn] min_success` of them completed.
    pub not_working: bool,
}

/// `rules accept`'s and `rules reject`'s answer: what was decided about the proposal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleDecisionAnswer {
    /// The proposal's id.
    pub id: String,
    /// Its rule's name (`learnt-<id>`).
    pub name: String,
    /// `accept` or `reject`.
    pub action: crate::domain::learn::RuleAction,
    /// `everyone`, or `mine` (the caller's own chains).
    pub scope: String,
    /// False when it was so already: nothing was written.
    pub changed: bool,
    /// The decision it stands by: the new record, or the earlier one when nothing changed.
    pub record: Option<crate::domain::learn::RuleRecord>,
    /// For an acceptance for everyone, the `rules.d/` file that holds the rule.
    pub file: Option<String>,
}
