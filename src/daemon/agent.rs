//! Optional: running an agent (an AI CLI such as `claude --print`, or any program) when
//! chains wait in `pending_failed`. The agent gets a prompt on stdin and acts through
//! `supervisorctl` (its config is in `SLURM_SUPERVISOR_CONFIG`) or the MCP server.
//!
//! It runs at most once per `agent.interval`, one at a time, in its own task with a
//! timeout: a slow, failing or hanging agent never holds up supervision. What starting
//! it may touch is its `AgentView`: the store to read, `[agent]` and the config's path.

use super::engine::AgentView;
use super::program;
use super::reads::fill;
use crate::domain::model::{Action, ChainState};
use crate::protocol::views::PendingChain;
use crate::slurm::spawn;
use crate::store::{Store, StoreError};
use serde::Serialize;
use std::time::Instant;
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// The prompt is cut to this size; an agent can ask for more with `get_chain`.
const MAX_PROMPT_BYTES: usize = 256 * 1024;

/// Whether an agent is running and when the last one started.
pub struct Runner {
    running: Option<JoinHandle<()>>,
    last_start: Option<Instant>,
    /// Where the agent's task runs: beside the loop, so it waits for the agent's output
    /// and timeout while the loop works.
    beside: tokio::runtime::Handle,
}

/// Chains waiting for an agent that no one asked to hold for a person (for a root
/// daemon: only root's own).
pub fn waiting(store: &Store) -> Result<Vec<PendingChain>, StoreError> {
    let mut out = Vec::new();
    // A root daemon gives its agent only root's own chains: another user's stderr could
    // carry instructions, and the agent acts as root. Users run their own agents (MCP).
    let root = nix::unistd::geteuid().is_root();
    for c in store.chains_in_state(ChainState::PendingFailed)? {
        if root && store.owner_of(c.id)? != 0 {
            continue;
        }
        let held = store
            .last_decision(c.id)?
            .is_some_and(|d| d.action == Action::Hold);
        if !held {
            out.push(fill::pending_view(store, &c)?);
        }
    }
    Ok(out)
}

/// The text given to the agent. The evidence is printed as `pending --json` prints it
/// (through a JSON value, whose keys are in order), so the agent reads what a person would.
pub fn prompt<T: Serialize>(pending: &[T], min_confidence: f64) -> String {
    let mut evidence = serde_json::to_value(pending)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_default();
    if evidence.len() > MAX_PROMPT_BYTES {
        let cut = crate::plumbing::osbytes::truncate(&evidence, MAX_PROMPT_BYTES).len();
        evidence.truncate(cut);
        evidence.push_str("\n... (cut; use `supervisorctl pending --json` or the MCP tool list_pending_failed for all of it)");
    }
    format!(
        "You are resolving failed Slurm batch jobs for slurm-supervisor. The chains below ended in a way \
no rule could classify and wait in pending_failed for you. For each, read the evidence (sacct rows, \
stderr tail, earlier attempts and what was already tried) and decide:\n\
- transient (retry): infrastructure trouble such as `Connection refused`, timeouts talking to a \
service, NCCL timeouts, I/O errors, a node problem; retry, with more memory or time if the evidence \
shows the job ran short of them;\n\
- permanent (fail): a bug or bad input such as SyntaxError, ModuleNotFoundError, a missing input \
file, a wrong argument; it would fail again;\n\
- hold: you are not sure, or a person must fix something first.\n\
Act with `supervisorctl classify ID --action retry|fail|hold --reason \"...\" --confidence 0.0-1.0 \
[--mem SIZE] [--time LIMIT] [--exclude NODES]`, first with `--dry-run`. Every reason is recorded. \
A confidence below {min_confidence} is turned into hold. Do not retry a fix that already failed \
(see the decisions of earlier attempts).\n\nPending chains:\n{evidence}\n"
    )
}

impl Runner {
    /// No agent started yet; each runs as a task of `beside`.
    pub fn beside(beside: tokio::runtime::Handle) -> Runner {
        Runner {
            running: None,
            last_start: None,
            beside,
        }
    }

    /// Starts the agent if one is configured, something waits for it, none is running,
    /// and the interval has passed.
    pub fn maybe_start(&mut self, view: AgentView<'_>) {
        let cfg = view.agent;
        let Some(argv) = cfg.command.clone() else {
            return;
        };
        if self.running.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        if self
            .last_start
            .is_some_and(|t| t.elapsed() < cfg.interval.0)
        {
            return;
        }
        let pending = match waiting(view.store) {
            Ok(p) if p.is_empty() => return,
            Ok(p) => p,
            Err(e) => {
                warn!("cannot list pending chains for the agent: {e}");
                return;
            }
        };
        let text = prompt(&pending, cfg.min_confidence);
        let timeout = cfg.timeout.0;
        self.last_start = Some(Instant::now());
        info!(chains = pending.len(), command = ?argv, "starting the agent");
        let env = agent_env(&cfg.env, view.config_path);
        self.running = Some(self.beside.spawn(async move {
            // Started by `slurm::spawn` (no fd of the daemon's but 0-2), with only the
            // environment it is given, in its own process group: a timeout kills what it
            // started too.
            let program = if argv[0].contains('/') {
                std::path::PathBuf::from(&argv[0])
            } else {
                std::env::var_os("PATH")
                    .and_then(|p| spawn::find_in(&argv[0], &p))
                    .unwrap_or_else(|| std::path::PathBuf::from(&argv[0]))
            };
            let mut cmd = spawn::Command::new(&program);
            cmd.args(&argv[1..]).env_clear_with(env);
            match program::run(cmd, &argv[0], text.as_bytes(), timeout, MAX_AGENT_OUTPUT).await {
                Err(e) => warn!(command = ?argv, "the agent: {e}; supervision goes on"),
                Ok(out) => {
                    let tail = |b: &[u8]| {
                        let s = String::from_utf8_lossy(b);
                        let lines: Vec<&str> = s.lines().collect();
                        lines[lines.len().saturating_sub(40)..].join("\n")
                    };
                    info!(command = ?argv, status = %out.status, stdout = %tail(&out.stdout), stderr = %tail(&out.stderr), "the agent finished");
                }
            }
        }));
    }
}

/// The variables the agent gets: a few of the daemon's (see `config::AgentConfig::env`)
/// and the config's path. Not the rest (`NOTIFY_SOCKET`, through which it could speak to
/// systemd for the daemon; `JOURNAL_STREAM`; anything of the service's own).
fn agent_env(
    extra: &[String],
    config_path: Option<&std::path::Path>,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> = BASE_ENV
        .iter()
        .copied()
        .chain(extra.iter().map(String::as_str))
        .filter(|k| *k != "SLURM_SUPERVISOR_CONFIG")
        .filter_map(|k| std::env::var_os(k).map(|v| (k.into(), v)))
        .collect();
    if let Some(p) = config_path {
        env.push(("SLURM_SUPERVISOR_CONFIG".into(), p.as_os_str().to_owned()));
    }
    env
}

/// What the agent gets of the daemon's environment, always.
const BASE_ENV: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ"];

/// Output kept from the agent (for the log); past it, it is not read.
const MAX_AGENT_OUTPUT: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_carries_the_evidence_and_the_rules() {
        let p = prompt(
            &[serde_json::json!({"id": "c7", "evidence": {"stderr_tail": "weird failure"}})],
            0.7,
        );
        assert!(p.contains("\"c7\"") && p.contains("weird failure"));
        assert!(p.contains("--confidence") && p.contains("below 0.7"));
        let huge = vec![serde_json::json!({"x": "y".repeat(MAX_PROMPT_BYTES * 2)})];
        assert!(prompt(&huge, 0.7).len() < MAX_PROMPT_BYTES + 4096);
    }
}
