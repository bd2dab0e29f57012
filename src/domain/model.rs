//! The supervisor's own vocabulary: chain states, classifications, recovery classes, and
//! what an agent or a person may decide on a failed chain (`Resolution`, `RecoverRequest`,
//! `ResolveAction`, which the control protocol carries as they are).
//!
//! The string forms are part of the JSON contract (`status --json`, `history --json`)
//! that users' scripts and agents depend on; change them only with a deprecation path.

use rmcp::schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $text)] $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownName { kind: stringify!($name), value: s.to_string() }),
                }
            }
        }
    };
}

/// A name that is not one of an enum's known string forms (e.g. a corrupt store row).
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownName {
    pub kind: &'static str,
    pub value: String,
}

string_enum! {
    /// Where a chain is. `Active`, `Ready` and `PendingFailed` are not finished.
    ChainState {
        Active => "active",
        Ready => "ready",
        PendingFailed => "pending_failed",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

impl ChainState {
    /// True while the chain still needs the supervisor (or an agent).
    pub fn is_open(self) -> bool {
        matches!(
            self,
            ChainState::Active | ChainState::Ready | ChainState::PendingFailed
        )
    }
}

string_enum! {
    /// Who made a decision, without a name: the supervisor itself, a person or an agent
    /// acting as a user (a record's actor `user:<name>`), or the site's expiry of a wait
    /// (`escalation.expire_after`).
    ActorKind {
        Supervisor => "supervisor",
        User => "user",
        Expiry => "expiry",
    }
}

string_enum! {
    /// The verdict on a finished attempt.
    Classification {
        Completed => "completed",
        Preempted => "preempted",
        NodeFail => "node_fail",
        BootFail => "boot_fail",
        Oom => "oom",
        Timeout => "timeout",
        Cancelled => "cancelled",
        Deadline => "deadline",
        Transient => "transient",
        Permanent => "permanent",
        Ambiguous => "ambiguous",
    }
}

/// The classification table: what an ending of each classification gets by default, one
/// row per classification, as docs/design.md's table reads ("Classification"). Policy
/// reads it (`policy::transition`); the config takes each retried kind's default budget
/// from it and lets `[[rules]]` give the kinds it marks. A new kind of failure is a new
/// `Classification` and its row here; a kind that site rules recognise needs nothing
/// else (ARCHITECTURE.md, "Where to change what").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub disposition: Disposition,
    /// It points at the cluster rather than the job: a burst of them across chains opens
    /// the breaker.
    pub infrastructure: bool,
    /// Automatic resubmissions one chain gets for it by default (`[retry.budgets]`); 0 for
    /// a kind never retried automatically.
    pub budget: u32,
    /// A `[[rules]]` entry may give it to a FAILED attempt the site recognises.
    pub by_rule: bool,
}

/// The default answer to an ending of one classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// The work is done: no record, the chain completes.
    Done,
    /// Never retried (R3): the chain ends in `state` with `action`, for `why`.
    Stop {
        action: Action,
        state: ChainState,
        why: Never,
    },
    /// An agent decides (R2, `pending_failed`).
    AskAgent,
    /// Resubmitted automatically (R1), after the guards, with `resources` changed.
    Retry { resources: Resources },
}

/// Why an ending is never retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Never {
    /// Someone cancelled it.
    Cancelled,
    /// Its deadline passed.
    Deadline,
    /// A rule says the error is permanent.
    Permanent,
}

/// Which resources a retry of a classification changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resources {
    /// The same resources (preemption, a transient failure a rule recognised).
    Unchanged,
    /// More memory (OOM).
    MoreMemory,
    /// A longer time limit, never above the partition's MaxTime (TIMEOUT).
    MoreTime,
    /// The failed node(s) excluded (NODE_FAIL, BOOT_FAIL).
    ExcludeNode,
}

impl Classification {
    /// Its row of the classification table.
    pub fn row(self) -> Row {
        use Classification as C;
        use Disposition::*;
        let retry = |resources, infrastructure, budget| Row {
            disposition: Retry { resources },
            infrastructure,
            budget,
            by_rule: false,
        };
        let stop = |action, state, why| Row {
            disposition: Stop { action, state, why },
            infrastructure: false,
            budget: 0,
            by_rule: false,
        };
        match self {
            C::Completed => Row {
                disposition: Done,
                infrastructure: false,
                budget: 0,
                by_rule: false,
            },
            C::Preempted => retry(Resources::Unchanged, false, 10),
            C::NodeFail | C::BootFail => retry(Resources::ExcludeNode, true, 3),
            C::Oom => retry(Resources::MoreMemory, false, 3),
            C::Timeout => retry(Resources::MoreTime, false, 3),
            C::Cancelled => stop(Action::Cancel, ChainState::Cancelled, Never::Cancelled),
            C::Deadline => stop(Action::Fail, ChainState::Failed, Never::Deadline),
            C::Permanent => Row {
                by_rule: true,
                ..stop(Action::Fail, ChainState::Failed, Never::Permanent)
            },
            C::Transient => Row {
                by_rule: true,
                ..retry(Resources::Unchanged, true, 3)
            },
            C::Ambiguous => Row {
                disposition: AskAgent,
                infrastructure: false,
                budget: 0,
                by_rule: false,
            },
        }
    }

    /// Whether it is retried automatically (it has a budget).
    pub fn is_retried(self) -> bool {
        matches!(self.row().disposition, Disposition::Retry { .. })
    }
}

string_enum! {
    /// R1: applied automatically. R2: suggested, escalated to an agent. R3: skipped, forbidden.
    RecoveryClass {
        R1 => "R1",
        R2 => "R2",
        R3 => "R3",
    }
}

string_enum! {
    /// What the supervisor did about an ending.
    Action {
        /// Nothing to do: the work is done.
        None => "none",
        /// Slurm requeued the job itself under the same id; keep watching it.
        Watch => "watch",
        /// A new sbatch with adjusted resources, after a backoff.
        Resubmit => "resubmit",
        /// A continuing job met its time limit (or was preempted, or asked to be
        /// continued) having made progress: a new sbatch with the same resources, under
        /// the continuation budget (docs/continuation.md).
        Continue => "continue",
        /// Wait in `pending_failed` for an agent.
        Escalate => "escalate",
        /// Terminal failure.
        Fail => "fail",
        /// Left in `pending_failed` for a person (an agent was unsure).
        Hold => "hold",
        /// The user stopped it (or, for a waiting job, its dependency can never hold).
        Cancel => "cancel",
        /// A waiting job's dependency now names the new attempts of the chains it waits on.
        Rewire => "rewire",
        /// A job held for its afterany/afternotok was let go: the condition holds.
        Release => "release",
    }
}

/// Resource changes for the next attempt, decided by policy or asked by an agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPlan {
    /// New `--mem` in MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_mb: Option<u64>,
    /// New `--time` in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_secs: Option<u64>,
    /// Nodes to add to `--exclude`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// New `--partition`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
}

impl RetryPlan {
    /// Merge `later` over `self`: later values win, excluded nodes accumulate.
    pub fn merged(&self, later: &RetryPlan) -> RetryPlan {
        let mut exclude = self.exclude.clone();
        for n in &later.exclude {
            if !exclude.contains(n) {
                exclude.push(n.clone());
            }
        }
        RetryPlan {
            mem_mb: later.mem_mb.or(self.mem_mb),
            time_secs: later.time_secs.or(self.time_secs),
            exclude,
            partition: later.partition.clone().or_else(|| self.partition.clone()),
        }
    }
}

/// One supervised piece of work as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chain {
    pub id: i64,
    pub submission_id: i64,
    pub array_task: Option<u32>,
    pub state: ChainState,
    pub last_classification: Option<Classification>,
    /// The supervisor's resource overrides so far, for the next attempt.
    pub plan: RetryPlan,
    /// For `ready`: not before this time (unix seconds).
    pub not_before: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// The user-facing chain id: `c` and the row id.
pub fn chain_label(id: i64) -> String {
    format!("c{id}")
}

// What to do with a `pending_failed` chain: the one type behind the control request,
// `supervisorctl classify --action` and the MCP tool's parameter. The variants' doc comments
// are the JSON Schema descriptions an agent reads through MCP, so they are written for it;
// the type itself has none (and keeps the schema name `Action`) so that the schema the
// MCP tools publish is what it was before the three action types became one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars", rename = "Action")]
#[serde(rename_all = "snake_case")]
pub enum ResolveAction {
    /// Resubmit the work (transient failure), optionally with new `mem` / `time`.
    Retry,
    /// End the chain for good (permanent failure); it is never retried.
    Fail,
    /// Leave it for a person: you are not sure, or it needs a fix outside the job.
    Hold,
}

impl ResolveAction {
    pub const ALL: [ResolveAction; 3] = [
        ResolveAction::Retry,
        ResolveAction::Fail,
        ResolveAction::Hold,
    ];

    /// The name on the wire and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            ResolveAction::Retry => "retry",
            ResolveAction::Fail => "fail",
            ResolveAction::Hold => "hold",
        }
    }
}

/// An agent's (or a person's) decision on a `pending_failed` chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resolution {
    pub id: String,
    pub action: ResolveAction,
    #[serde(default)]
    pub mem: Option<String>,
    #[serde(default)]
    pub time: Option<String>,
    #[serde(default)]
    pub partition: Option<String>,
    /// Nodes to keep the retry off.
    #[serde(default)]
    pub exclude: Vec<String>,
    pub reason: String,
    /// How sure the resolver is, 0.0 to 1.0; below the config's `agent.min_confidence`
    /// the resolution becomes `hold`.
    #[serde(default)]
    pub confidence: Option<f64>,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoverRequest {
    pub id: String,
    #[serde(default)]
    pub mem: Option<String>,
    #[serde(default)]
    pub time: Option<String>,
    /// Why; recorded (default: "manual recover").
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Classification::ALL {
            assert_eq!(c.as_str().parse::<Classification>().unwrap(), *c);
        }
        for s in ChainState::ALL {
            assert_eq!(s.as_str().parse::<ChainState>().unwrap(), *s);
        }
        assert!("bogus".parse::<ChainState>().is_err());
    }

    #[test]
    fn plan_merge_keeps_earlier_exclusions() {
        let a = RetryPlan {
            exclude: vec!["n1".into()],
            mem_mb: Some(100),
            ..Default::default()
        };
        let b = RetryPlan {
            exclude: vec!["n2".into(), "n1".into()],
            ..Default::default()
        };
        let m = a.merged(&b);
        assert_eq!(m.exclude, vec!["n1", "n2"]);
        assert_eq!(m.mem_mb, Some(100));
    }
}
