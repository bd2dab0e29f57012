//! The tools' inputs. Their doc comments become the JSON Schema descriptions an agent
//! reads, so they are written for the agent.

use crate::protocol::ResolveAction;
use rmcp::schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct IdParam {
    /// A chain id (`c17`) or any Slurm job id of one of its attempts (`12345`, or `12345_3`
    /// for an array task; an array's base job id names all its tasks).
    pub id: String,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct StatusParams {
    /// Only this chain or job (chain id or Slurm job id); omit for every chain you may see.
    #[serde(default)]
    pub id: Option<String>,
}

/// One decision on one `pending_failed` chain.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct ResolutionItem {
    /// The chain id (`c17`) or a Slurm job id of one of its attempts.
    pub id: String,
    /// `retry` for a transient failure, `fail` for a permanent one.
    pub action: ResolveAction,
    /// Only with `retry`: memory for the new attempt, in sbatch's form (`8G`, `4000M`).
    /// Omit to keep what the last attempt asked for.
    #[serde(default)]
    pub mem: Option<String>,
    /// Only with `retry`: time limit for the new attempt, in Slurm's form (`30`,
    /// `2:00:00`, `1-00:00:00`). Omit to keep the last one.
    #[serde(default)]
    pub time: Option<String>,
    /// Only with `retry`: another partition for the new attempt.
    #[serde(default)]
    pub partition: Option<String>,
    /// Only with `retry`: nodes to keep the new attempt off (e.g. `["n3"]`), for a node
    /// the evidence blames.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// How sure you are, 0.0 to 1.0. Below the admin's threshold the chain is held for a
    /// person instead; give an honest number.
    #[serde(default)]
    pub confidence: Option<f64>,
    /// Why, citing the evidence (e.g. "stderr shows `Connection refused` to the data
    /// server: transient"). Mandatory; stored in the chain's decision record for good.
    #[schemars(length(min = 1))]
    pub reason: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct ResolveParams {
    /// The decisions, applied one by one in this order; one that is refused does not stop
    /// the others.
    #[schemars(length(min = 1))]
    pub resolutions: Vec<ResolutionItem>,
    /// true: check every resolution and show what would happen, change nothing.
    /// false: apply them. Call with true first.
    pub dry_run: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct RecoverParams {
    /// A chain id (`c17`) or a Slurm job id of one of its attempts.
    pub id: String,
    /// Memory for the new attempt, in sbatch's form (`8G`); omit to keep the last one.
    #[serde(default)]
    pub mem: Option<String>,
    /// Time limit for the new attempt (`2:00:00`); omit to keep the last one.
    #[serde(default)]
    pub time: Option<String>,
    /// Why; recorded in the chain's decision record.
    #[serde(default)]
    pub reason: Option<String>,
    /// true: return the exact sbatch command that would run, change nothing.
    /// false: resubmit. Call with true first.
    pub dry_run: bool,
}
