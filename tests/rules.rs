//! Rules that learn (docs/rules.md) against the fake Slurm of tests/fake-slurm: an
//! ending's failure signature in `history` and `pending`, the same for the same failure
//! whatever its job id, directory and timestamps, and different for a different error.

mod common;

use common::fake::{start, Fake};
use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// Submits `job.sh` from the folder `dir` of the daemon's work dir; returns its job id.
fn submit_in(d: &Daemon, dir: &str) -> String {
    let cwd = d.work_dir().join(dir);
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::write(cwd.join("job.sh"), "#!/bin/bash\necho hi\n").unwrap();
    let out = d.ctl_in(&["submit", "--", "job.sh"], &cwd);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Ends `job` FAILED 1:0 with `stderr` in its output file, and waits for its escalation.
fn fail_with(d: &Daemon, fake: &Fake, job: &str, stderr: &str) {
    fake.ctl(&["finish", job, "FAILED", "1:0", stderr]);
    d.wait_state(job, "pending_failed", Duration::from_secs(60));
}

/// The signature of the latest attempt of the chain of `job` in `pending --json`.
fn pending_signature(d: &Daemon, job: &str) -> (String, String) {
    let pending = d.json(&["pending", "--json"]);
    let row = pending
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["slurm_job_id"] == job)
        .unwrap_or_else(|| panic!("{job} is not pending: {pending:#}"));
    let a = row["evidence"]["attempts"]
        .as_array()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    let text = |v: &Value| v.as_str().unwrap_or_else(|| panic!("{a:#}")).to_string();
    (text(&a["signature"]), text(&a["signature_text"]))
}

fn checksum_error(dir: &Path, job: &str, at: &str, sum: &str) -> String {
    format!(
        "[{at}] loading {}/ckpt/shard3.pt\n\
         RuntimeError: checkpoint shard 3 has an unexpected checksum {sum} (job {job})\n",
        dir.display()
    )
}

#[test]
fn the_same_failure_is_one_signature_and_two_errors_are_two() {
    let (d, fake) = start("", &[]);
    let (a, b, c) = (
        submit_in(&d, "run-1"),
        submit_in(&d, "exp/run-22"),
        submit_in(&d, "run-3"),
    );
    let w = d.work_dir();
    fail_with(
        &d,
        &fake,
        &a,
        &checksum_error(&w.join("run-1"), &a, "2026-11-28T23:28:53.123Z", "3f2a9bc1"),
    );
    fail_with(
        &d,
        &fake,
        &b,
        &checksum_error(&w.join("exp/run-22"), &b, "2026-12-01T04:05:06Z", "0badc0de"),
    );
    fail_with(&d, &fake, &c, "NCCL error: watchdog timeout after 1800 seconds\n");
    let (sa, ta) = pending_signature(&d, &a);
    let (sb, tb) = pending_signature(&d, &b);
    let (sc, tc) = pending_signature(&d, &c);
    assert_eq!((&sa, &ta), (&sb, &tb));
    assert_eq!(
        ta,
        "[<time>] loading <dir>/ckpt/shard<n>.pt\n\
         RuntimeError: checkpoint shard <n> has an unexpected checksum <hex> (job <n>)"
    );
    assert_ne!(sa, sc);
    assert_eq!(tc, "NCCL error: watchdog timeout after <n> seconds");
    // `history` shows it by the attempt, in JSON and in text.
    let h = d.history(&a);
    assert_eq!(h["attempts"][0]["signature"], sa.as_str());
    let out = d.ctl(&["history", &a]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("signature {sa}"))
            && text.contains("| RuntimeError: checkpoint shard <n>"),
        "{text}"
    );
}
