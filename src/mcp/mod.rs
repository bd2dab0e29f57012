//! `supervisorctl mcp`: a Model Context Protocol server over stdio, for AI agents.
//!
//! It is a client of the running daemon like the rest of `supervisorctl`: every tool call
//! sends `protocol::Request`s over the control socket, reads the daemon's answer as its
//! `protocol::views` type and returns that to the agent as JSON. It keeps no state and decides nothing; the daemon checks every request (state, owner,
//! reason) as it does for the command line. Tool descriptions live in `text.rs`.

mod params;
mod text;

use crate::client;
use crate::protocol::views::{
    ChainRow, ClassifyAnswer, ClassifyDryRun, HistoryAnswer, PendingChain, RecoverAnswer,
    RecoverDryRun,
};
use crate::protocol::{decode, RecoverRequest, Request, Resolution, Response};
use params::{IdParam, RecoverParams, ResolutionItem, ResolveParams, StatusParams};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::Duration;

/// The MCP server: the daemon's socket and the tools.
#[derive(Clone)]
pub struct Supervisor {
    endpoint: client::Endpoint,
    tool_router: ToolRouter<Self>,
}

/// What went wrong, as the agent sees it: `{"kind": ..., "message": ...}`, with `kind` one
/// of the daemon's error kinds (`usage`, `not_found`, `conflict`, `forbidden`,
/// `unavailable`, `internal`, ...).
type Failure = Value;

fn failure(kind: &str, message: impl std::fmt::Display) -> Failure {
    json!({ "kind": kind, "message": message.to_string() })
}

/// A tool's answer: the value as structured content (and as text), or `{"error": ...}`
/// flagged as a tool error.
fn reply(answer: Result<Value, Failure>) -> CallToolResult {
    match answer {
        Ok(v) => CallToolResult::structured(v),
        Err(e) => CallToolResult::structured_error(json!({ "error": e })),
    }
}

/// A list of chains as a tool returns it: structured content must be an object for older
/// protocol versions, so lists are wrapped.
#[derive(Debug, Serialize)]
struct Listed<T> {
    count: usize,
    chains: Vec<T>,
}

impl<T> Listed<T> {
    fn new(chains: Vec<T>) -> Self {
        Listed {
            count: chains.len(),
            chains,
        }
    }
}

/// A typed answer as the agent gets it: a JSON value (whose keys print in order).
fn to_json<T: Serialize>(answer: &T) -> Result<Value, Failure> {
    serde_json::to_value(answer).map_err(|e| failure("internal", e))
}

/// `get_chain`'s answer: one chain's history as it is, an array's tasks as a list.
fn history_json(answer: HistoryAnswer) -> Result<Value, Failure> {
    match answer {
        HistoryAnswer::One(h) => to_json(&h),
        HistoryAnswer::Many(all) => to_json(&Listed::new(all)),
    }
}

impl Supervisor {
    pub fn new(endpoint: client::Endpoint) -> Self {
        Supervisor {
            endpoint,
            tool_router: Self::tool_router(),
        }
    }

    /// One request to the daemon (the client is blocking, so it runs off the event loop).
    async fn ask(&self, request: Request) -> Result<Value, Failure> {
        let endpoint = self.endpoint.clone();
        match tokio::task::spawn_blocking(move || client::call(&endpoint, &request)).await {
            Ok(Ok(Response::Ok(v))) => Ok(v),
            Ok(Ok(Response::Error(e))) => {
                let mut f = json!({ "kind": e.kind, "message": e.message });
                if let Some(stderr) = e.stderr {
                    f["stderr"] = stderr.into();
                }
                Err(f)
            }
            Ok(Err(e)) => Err(failure("unavailable", e)),
            Err(e) => Err(failure(
                "internal",
                format!("the request did not finish: {e}"),
            )),
        }
    }

    /// A read request whose answer is read as `T`: checked here, where the daemon's
    /// JSON enters, not by whoever uses it.
    async fn ask_typed<T: DeserializeOwned>(&self, request: Request) -> Result<T, Failure> {
        decode(self.ask(request).await?).map_err(|e| failure("internal", e))
    }

    /// One item of `classify_and_resolve`: `{"id", "ok": true, "result"}` or
    /// `{"id", "ok": false, "error"}`.
    async fn resolve_one(&self, item: ResolutionItem, dry_run: bool) -> Value {
        let id = item.id.clone();
        let outcome = self.resolve_item(item, dry_run).await;
        match outcome {
            Ok(result) => json!({ "id": id, "ok": true, "result": result }),
            Err(error) => json!({ "id": id, "ok": false, "error": error }),
        }
    }

    async fn resolve_item(&self, item: ResolutionItem, dry_run: bool) -> Result<Value, Failure> {
        let resolution = Resolution {
            id: item.id,
            action: item.action,
            mem: item.mem,
            time: item.time,
            partition: item.partition,
            exclude: item.exclude,
            reason: item.reason,
            confidence: item.confidence,
            dry_run,
        };
        let request = Request::Classify(resolution);
        if dry_run {
            to_json(&self.ask_typed::<ClassifyDryRun>(request).await?)
        } else {
            to_json(&self.ask_typed::<ClassifyAnswer>(request).await?)
        }
    }

    /// `recover`'s answer: what would run, or the chains being recovered.
    async fn recover_request(&self, r: RecoverRequest) -> Result<Value, Failure> {
        let request = Request::Recover(r.clone());
        if r.dry_run {
            to_json(&self.ask_typed::<RecoverDryRun>(request).await?)
        } else {
            to_json(&self.ask_typed::<RecoverAnswer>(request).await?)
        }
    }
}

#[tool_router]
impl Supervisor {
    #[tool(
        description = text::LIST_PENDING_FAILED,
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_pending_failed(&self) -> CallToolResult {
        let pending = self.ask_typed::<Vec<PendingChain>>(Request::Pending).await;
        reply(pending.and_then(|p| to_json(&Listed::new(p))))
    }

    #[tool(
        description = text::LIST_RULE_PROPOSALS,
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn list_rule_proposals(&self) -> CallToolResult {
        let rules = self
            .ask_typed::<crate::protocol::views::RulesAnswer>(Request::Rules)
            .await;
        reply(rules.and_then(|r| to_json(&r)))
    }

    #[tool(
        description = text::GET_CHAIN,
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_chain(&self, Parameters(p): Parameters<IdParam>) -> CallToolResult {
        let history = self
            .ask_typed::<HistoryAnswer>(Request::History { id: p.id })
            .await;
        reply(history.and_then(history_json))
    }

    #[tool(
        description = text::STATUS,
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn status(&self, Parameters(p): Parameters<StatusParams>) -> CallToolResult {
        let rows = self
            .ask_typed::<Vec<ChainRow>>(Request::Status { id: p.id })
            .await;
        reply(rows.and_then(|r| to_json(&Listed::new(r))))
    }

    #[tool(
        description = text::CLASSIFY_AND_RESOLVE,
        annotations(destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn classify_and_resolve(
        &self,
        Parameters(p): Parameters<ResolveParams>,
    ) -> CallToolResult {
        if p.resolutions.is_empty() {
            return reply(Err(failure("usage", "no resolutions given")));
        }
        let mut results = Vec::new();
        for item in p.resolutions {
            results.push(self.resolve_one(item, p.dry_run).await);
        }
        let failed = results.iter().filter(|r| r["ok"] != true).count();
        let out = json!({
            "dry_run": p.dry_run,
            "succeeded": results.len() - failed,
            "failed": failed,
            "results": results,
        });
        // A tool error only when nothing went through; otherwise read each item.
        if failed == results.len() {
            CallToolResult::structured_error(out)
        } else {
            CallToolResult::structured(out)
        }
    }

    #[tool(
        description = text::RECOVER,
        annotations(destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn recover(&self, Parameters(p): Parameters<RecoverParams>) -> CallToolResult {
        reply(
            self.recover_request(RecoverRequest {
                id: p.id,
                mem: p.mem,
                time: p.time,
                reason: p.reason,
                dry_run: p.dry_run,
            })
            .await,
        )
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Supervisor {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("slurm-supervisor", env!("CARGO_PKG_VERSION"))
                    .with_title("slurm-supervisor: Slurm job failures waiting for a decision"),
            )
            .with_instructions(text::INSTRUCTIONS)
    }
}

/// Serves MCP on stdin/stdout until the client closes stdin; returns the exit code.
/// Nothing but the protocol goes to stdout; warnings go to stderr.
pub fn serve(endpoint: client::Endpoint) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("supervisorctl mcp: cannot start: {e}");
            return 70;
        }
    };
    if let Err(e) = client::call(&endpoint, &Request::Ping) {
        // Not fatal: the daemon may be started later; each tool call says so meanwhile.
        eprintln!("supervisorctl mcp: warning: {e}");
    }
    let served = runtime.block_on(async {
        let running = Supervisor::new(endpoint)
            .serve(rmcp::transport::stdio())
            .await?;
        running.waiting().await?;
        anyhow::Ok(())
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("supervisorctl mcp: {e:#}");
            70
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ResolveAction;

    fn no_daemon() -> Supervisor {
        Supervisor::new(client::Endpoint::Unix(
            "/nonexistent/slurm-supervisor.sock".into(),
        ))
    }

    fn item(id: &str, action: ResolveAction, mem: Option<&str>) -> ResolutionItem {
        ResolutionItem {
            id: id.into(),
            action,
            mem: mem.map(str::to_string),
            time: None,
            partition: None,
            exclude: Vec::new(),
            confidence: None,
            reason: "test".into(),
        }
    }

    #[test]
    fn every_tool_is_listed_with_a_schema() {
        let names: Vec<String> = no_daemon()
            .tool_router
            .list_all()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        for want in [
            "list_pending_failed",
            "list_rule_proposals",
            "get_chain",
            "status",
            "classify_and_resolve",
            "recover",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
        }
    }

    #[test]
    fn each_resolution_gets_its_own_answer_and_errors_do_not_stop_the_rest() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let s = no_daemon();
        // The daemon checks the resolutions; without one, each item still gets its answer.
        let bad = rt.block_on(s.resolve_one(item("c1", ResolveAction::Fail, Some("2G")), true));
        assert_eq!(bad["ok"], false);
        assert_eq!(bad["id"], "c1");
        let down = rt.block_on(s.resolve_one(item("c2", ResolveAction::Retry, Some("2G")), true));
        assert_eq!(down["id"], "c2");
        assert_eq!(down["error"]["kind"], "unavailable");
        assert!(
            down["error"]["message"]
                .as_str()
                .unwrap()
                .contains("is the daemon running"),
            "{down}"
        );
    }

    #[test]
    fn lists_are_wrapped_in_an_object() {
        assert_eq!(
            to_json(&Listed::new(vec![1, 2])).unwrap(),
            json!({ "count": 2, "chains": [1, 2] })
        );
    }
}
