//! The README's first command, `scripts/quickstart`, run as a new user runs it against the
//! selected real Slurm, and held to what the README promises it shows: the out-of-memory,
//! time-limit, node-failure and preemption chains completed (each after its own kind of
//! ending), the permanent one failed without a retry, and the ambiguous one waiting in
//! `pending_failed`, listed by `pending` with its evidence. The demo takes a node down and
//! preempts a job, so scripts/test runs this file on its own in its cluster, after the
//! cluster's other real-Slurm tests (before tests/package.rs). `supervisorctl wait`'s exit
//! codes are checked here on real endings too.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

struct Demo {
    dir: PathBuf,
}

impl Demo {
    fn config(&self) -> PathBuf {
        self.dir.join("supervisor.toml")
    }

    fn ctl(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_supervisorctl"))
            .arg("--config")
            .arg(self.config())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run supervisorctl")
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "supervisorctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("supervisorctl --json prints JSON")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }
}

/// Stops the demo's daemon however the test ends (`scripts/quickstart stop`).
impl Drop for Demo {
    fn drop(&mut self) {
        let _ = quickstart(&self.dir, &["stop"]);
    }
}

fn quickstart(dir: &Path, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--slurm", slurm_version()]);
    Command::new(format!("{}/scripts/quickstart", env!("CARGO_MANIFEST_DIR")))
        .args(&all)
        .env("DEMO_DIR", dir)
        .env_remove("SLURM_SUPERVISOR_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/quickstart")
}

/// The job ids the quickstart prints on its `oom=... timeout=...` line.
fn job_ids(stdout: &str) -> Vec<(String, String)> {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("oom="))
        .unwrap_or_else(|| panic!("no job id line in the quickstart's output:\n{stdout}"));
    line.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("name=job");
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn classifications(history: &Value) -> Vec<String> {
    decisions(history)
        .iter()
        .map(|d| d["classification"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn the_quickstart_shows_what_the_readme_promises() {
    require_slurm();
    let dir = tempfile::Builder::new()
        .prefix("ssv-quickstart-")
        .tempdir_in(scratch_root())
        .unwrap();
    // The demo user (ssvdemo) passes through to their folder in the demo's.
    common::system::chmod(dir.path(), 0o755);
    let demo = Demo {
        dir: dir.path().join("demo"),
    };
    let out = quickstart(&demo.dir, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "scripts/quickstart failed ({}):\n{stdout}\n{}\ndaemon log:\n{}",
        out.status,
        tail(&stderr, 40),
        tail(&demo.log(), 60)
    );
    let jobs = job_ids(&stdout);
    let job = |name: &str| -> &str {
        &jobs
            .iter()
            .find(|(k, _)| k == name)
            .unwrap_or_else(|| panic!("no {name} job in {jobs:?}"))
            .1
    };
    let context = || {
        format!(
            "quickstart output:\n{stdout}\ndaemon log:\n{}",
            tail(&demo.log(), 60)
        )
    };

    // What `supervisorctl wait` said, as the script printed it: all settled, one waits.
    assert!(
        stdout.contains("every chain has settled; some wait for a decision"),
        "{}",
        context()
    );

    // Recovered: each completed, after an ending of its own kind.
    for (name, kind) in [
        ("oom", "oom"),
        ("timeout", "timeout"),
        ("node_fail", "node_fail"),
        ("preempt", "preempted"),
    ] {
        let id = job(name);
        let h = demo.json(&["history", "--json", id]);
        assert_eq!(
            h["state"],
            "completed",
            "{name} ({id}): {h:#}\n{}",
            context()
        );
        let kinds = classifications(&h);
        assert!(
            kinds.iter().any(|k| k == kind),
            "{name} ({id}) was never classified {kind}: {kinds:?}\n{}",
            context()
        );
        let code = demo.ctl(&["wait", id]).status.code();
        assert_eq!(code, Some(0), "wait {id} of a completed chain");
    }
    // Those resubmitted got a new attempt with what the ending called for; the preempted
    // job was requeued by Slurm under its own id and only watched.
    let oom = demo.json(&["history", "--json", job("oom")]);
    assert!(attempts(&oom).len() >= 2, "oom: {oom:#}");
    // The out-of-memory job was submitted with plain sbatch (README: at least one is) and
    // taken up through the cli_filter's note: its first job carries no tag of the
    // supervisor's, its retry does.
    assert!(
        stdout.contains("submits the out-of-memory job with plain sbatch"),
        "{}",
        context()
    );
    let first = sacct_field(job("oom"), "Comment");
    assert!(
        !first.contains("ssv-"),
        "oom's first job was the supervisor's: {first:?}"
    );
    let retry = attempts(&oom)[1]["slurm_job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let tagged = sacct_field(&retry, "Comment");
    assert!(
        tagged.contains("ssv-"),
        "oom's retry carries no tag: {tagged:?}"
    );
    let tmo = demo.json(&["history", "--json", job("timeout")]);
    assert!(attempts(&tmo).len() >= 2, "timeout: {tmo:#}");
    // The checkpointing job ran to its end through continuations at the same limit (unless
    // the demo's node failure or preemption requeued it under its id and left it too
    // little work to meet a limit: then those requeues are its history).
    let cont = demo.json(&["history", "--json", job("continue")]);
    assert_eq!(cont["state"], "completed", "{cont:#}\n{}", context());
    let codes = reason_codes(&cont);
    assert!(
        codes.iter().any(|c| c == "continued") || codes.iter().any(|c| c == "requeued_by_slurm"),
        "continue: {cont:#}"
    );
    assert!(
        codes
            .iter()
            .all(|c| ["continued", "requeued_by_slurm", "retry"].contains(&c.as_str())),
        "continue: {cont:#}"
    );
    for a in attempts(&cont) {
        assert_eq!(a["time_limit"], "00:01:00", "continue: {cont:#}");
    }
    let nf = demo.json(&["history", "--json", job("node_fail")]);
    assert!(attempts(&nf).len() >= 2, "node_fail: {nf:#}");

    // The permanent error failed without a retry.
    let perm = demo.json(&["history", "--json", job("permanent")]);
    assert_eq!(perm["state"], "failed", "{perm:#}\n{}", context());
    assert_eq!(attempts(&perm).len(), 1, "permanent was retried: {perm:#}");
    // Its last ending is the permanent error; before it, the demo's node failure may have
    // hit it too (Slurm requeues it under the same id, and the supervisor only watches).
    assert_eq!(
        classifications(&perm).last().map(String::as_str),
        Some("permanent"),
        "{perm:#}"
    );
    assert!(
        decisions(&perm).iter().all(|d| d["action"] != "resubmit"),
        "the supervisor retried the permanent error: {perm:#}"
    );
    assert_eq!(demo.ctl(&["wait", job("permanent")]).status.code(), Some(1));

    // The ambiguous one waits for a decision, listed by `pending` with its evidence, and
    // the quickstart showed that list.
    let amb = job("ambiguous");
    let pending = demo.json(&["pending", "--json"]);
    let rows = pending.as_array().expect("pending --json is an array");
    assert_eq!(rows.len(), 1, "pending: {pending:#}\n{}", context());
    let row = &rows[0];
    assert_eq!(row["slurm_job_id"], amb, "{row:#}");
    assert_eq!(row["state"], "pending_failed");
    assert_eq!(row["last_classification"], "ambiguous");
    let stderr_tail = row["evidence"]["stderr_tail"].as_str().unwrap_or("");
    assert!(
        stderr_tail.contains("checkpoint shard 3 has an unexpected checksum"),
        "the evidence lacks the job's stderr: {row:#}"
    );
    assert!(
        stdout.contains("checkpoint shard 3 has an unexpected checksum"),
        "the quickstart did not show the pending chain's evidence:\n{stdout}"
    );
    assert_eq!(demo.ctl(&["wait", amb]).status.code(), Some(5));
    // All seven at once: a decision still to make wins over the failure.
    assert_eq!(demo.ctl(&["wait"]).status.code(), Some(5));
    let all: Vec<&str> = jobs.iter().map(|(_, j)| j.as_str()).collect();
    let mut args = vec!["wait", "--json"];
    args.extend(&all);
    let out = demo.ctl(&args);
    assert_eq!(out.status.code(), Some(5));
    let settled: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(settled.as_array().map(Vec::len), Some(7), "{settled:#}");
}
