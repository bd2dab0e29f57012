//! `supervisorctl mcp` driven end to end by a real MCP client: the official Python SDK
//! (`mcp` from PyPI, tests/mcp/client.py) against a daemon wired to the fake Slurm
//! (tests/common/fake.rs). The Python comes from `SSV_MCP_PYTHON`, default
//! /opt/ssv-mcp-venv/bin/python; scripts/test creates that venv.

mod common;

use common::fake::{start, Fake};
use common::*;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The argv of every sbatch call the fake saw, in order.
fn sbatch_argvs(fake: &Fake) -> Vec<Vec<String>> {
    fake.sbatch_calls()
        .iter()
        .map(|c| serde_json::from_value(c["argv"].clone()).unwrap())
        .collect()
}

fn item<'a>(batch: &'a Value, id: &str) -> &'a Value {
    batch["structured"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no result for {id}: {batch:#}"))
}

#[test]
fn an_agent_lists_and_resolves_a_pending_failure_over_mcp() {
    let python = mcp_python();
    let (d, fake) = start("", &[]);
    d.write_script("job.sh", "echo hi");
    let job_a = d.submit(&["--mem=100M", "job.sh"]);
    let job_b = d.submit(&["job.sh"]);
    // Endings no rule recognises: both wait for an agent.
    fake.ctl(&[
        "finish",
        &job_a,
        "FAILED",
        "1:0",
        "loading shard 7\nRuntimeError: shard 7 checksum mismatch (marker-a)\n",
    ]);
    fake.ctl(&[
        "finish",
        &job_b,
        "FAILED",
        "1:0",
        "  File \"train.py\", line 3\nSyntaxError: invalid syntax\n",
    ]);
    d.wait_state(&job_a, "pending_failed", Duration::from_secs(30));
    d.wait_state(&job_b, "pending_failed", Duration::from_secs(30));

    let client = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let out = Command::new(&python)
        .arg(&client)
        .arg(CTL)
        .arg(&d.config)
        .args([&job_a, &job_b])
        .output()
        .expect("run the Python MCP client");
    assert!(
        out.status.success(),
        "the MCP client failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the client printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let (a, b) = (
        v["chain_a"].as_str().unwrap(),
        v["chain_b"].as_str().unwrap(),
    );

    // The handshake and the tools, with descriptions that teach the agent.
    assert_eq!(v["server"]["name"], "slurm-supervisor");
    assert!(v["server"]["instructions"]
        .as_str()
        .unwrap()
        .contains("dry_run=true"));
    for tool in [
        "list_pending_failed",
        "list_rule_proposals",
        "get_chain",
        "status",
        "classify_and_resolve",
        "recover",
    ] {
        assert!(
            v["tools"][tool].is_object(),
            "{tool} missing: {:#}",
            v["tools"]
        );
    }
    // Rule proposals: read-only, with where each stands and the decisions about them;
    // no tool accepts or rejects one (docs/rules.md).
    let names: Vec<&String> = v["tools"].as_object().unwrap().keys().collect();
    assert!(
        names
            .iter()
            .all(|n| !n.contains("accept") && !n.contains("reject")),
        "{names:?}"
    );
    let rules_doc = v["tools"]["list_rule_proposals"]["description"]
        .as_str()
        .unwrap();
    assert!(
        rules_doc.contains("`state`") && rules_doc.contains("no tool does either"),
        "{rules_doc}"
    );
    let rules = &v["rules"]["structured"];
    assert!(
        rules["proposals"].is_array() && rules["decisions"].is_array(),
        "{:#}",
        v["rules"]
    );
    let resolve_doc = v["tools"]["classify_and_resolve"]["description"]
        .as_str()
        .unwrap();
    for words in [
        "Connection refused",
        "NCCL",
        "SyntaxError",
        "reason",
        "dry_run=true",
    ] {
        assert!(
            resolve_doc.contains(words),
            "{words:?} not in {resolve_doc}"
        );
    }
    let schema = &v["tools"]["classify_and_resolve"]["input_schema"];
    assert_eq!(
        schema["required"],
        serde_json::json!(["resolutions", "dry_run"])
    );

    // list_pending_failed: both chains, with their stderr in the evidence.
    let pending = &v["pending"];
    assert_eq!(pending["is_error"], false);
    assert_eq!(pending["structured"]["count"], 2);
    let chain_a = pending["structured"]["chains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == a)
        .unwrap();
    assert_eq!(chain_a["state"], "pending_failed");
    assert_eq!(chain_a["last_classification"], "ambiguous");
    assert!(
        chain_a["evidence"]["stderr_tail"]
            .as_str()
            .is_some_and(|s| s.contains("checksum mismatch (marker-a)")),
        "{chain_a:#}"
    );
    assert_eq!(
        chain_a["evidence"]["submission"]["script"],
        "#!/bin/bash\necho hi\n"
    );

    // The dry run changes nothing and shows the sbatch of the retry.
    let dry = &v["dry_run"];
    assert_eq!(dry["is_error"], false, "{dry:#}");
    assert_eq!(dry["structured"]["succeeded"], 1);
    let r = &item(dry, a)["result"];
    assert_eq!(r["dry_run"], true);
    assert_eq!(r["resolutions"][0]["action"], "retry");
    let would: Vec<&str> = r["resolutions"][0]["would_run"]["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(would[0], "sbatch");
    assert!(would.contains(&"--mem=2048M"), "{would:?}");
    assert_eq!(
        v["after_dry_run"]["structured"]["chains"][0]["state"],
        "pending_failed"
    );

    // For real: resolved once.
    let resolve = &v["resolve"];
    assert_eq!(resolve["is_error"], false, "{resolve:#}");
    assert_eq!(item(resolve, a)["ok"], true);
    assert_eq!(
        item(resolve, a)["result"]["resolved"],
        serde_json::json!([a])
    );

    // A second resolution of the same chain is refused, clearly.
    let second = &v["second"];
    assert_eq!(second["is_error"], true, "nothing went through: {second:#}");
    let refused = item(second, a);
    assert_eq!(refused["ok"], false);
    assert_eq!(refused["error"]["kind"], "conflict");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not pending_failed"),
        "{refused:#}"
    );

    // In a batch, the refused item does not stop the next one (B by its job id).
    let batch = &v["batch"];
    assert_eq!(batch["is_error"], false, "{batch:#}");
    assert_eq!(batch["structured"]["succeeded"], 1);
    assert_eq!(batch["structured"]["failed"], 1);
    assert_eq!(item(batch, a)["error"]["kind"], "conflict");
    assert_eq!(item(batch, &job_b)["ok"], true);
    assert_eq!(d.status(&job_b)[0]["state"], "failed");

    // recover's dry run on the failed chain shows the exact sbatch.
    let rec = &v["recover_b"];
    assert_eq!(rec["is_error"], false, "{rec:#}");
    assert_eq!(rec["structured"]["would_run"][0]["chain"], b);
    assert_eq!(rec["structured"]["would_run"][0]["command"][0], "sbatch");
    assert_eq!(
        d.status(&job_b)[0]["state"],
        "failed",
        "a dry run changes nothing"
    );

    // get_chain shows the resolution: a new record pointing at the escalation.
    let h = &v["history_a"]["structured"];
    let decisions = h["decisions"].as_array().unwrap();
    let escalation = decisions
        .iter()
        .find(|d| d["action"] == "escalate")
        .unwrap_or_else(|| panic!("{h:#}"));
    let resolution = decisions
        .iter()
        .find(|d| d["resolves"] == escalation["id"])
        .unwrap_or_else(|| panic!("no decision resolves the escalation: {h:#}"));
    assert_eq!(resolution["class"], "R2");
    assert_eq!(resolution["action"], "resubmit");
    assert_eq!(
        resolution["reason"],
        "stderr shows a lost connection to the data server: transient"
    );
    assert!(resolution["actor"].as_str().unwrap().starts_with("user:"));
    assert_eq!(v["unknown"]["is_error"], true);
    assert_eq!(v["unknown"]["structured"]["error"]["kind"], "not_found");

    // The daemon carries the resolution out: A goes back to Slurm with 2G, B does not.
    let deadline = Instant::now() + Duration::from_secs(30);
    while sbatch_argvs(&fake).len() < 3 {
        assert!(Instant::now() < deadline, "no retry of {a} was submitted");
        std::thread::sleep(Duration::from_millis(200));
    }
    let argvs = sbatch_argvs(&fake);
    assert_eq!(argvs.len(), 3, "only A is resubmitted: {argvs:?}");
    assert!(argvs[2].contains(&"--mem=2048M".to_string()), "{argvs:?}");
    assert!(!argvs[2].contains(&"--mem=100M".to_string()), "{argvs:?}");
    d.wait_state(a, "active", Duration::from_secs(30));
}
