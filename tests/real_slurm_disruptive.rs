//! End-to-end tests against the real Slurm that disturb the whole cluster (a node set
//! down, a partition preempting another). They take a lock so they run one at a time,
//! and scripts/test runs this file alone, after the other real-Slurm files.

mod common;

use common::*;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
const MIN: Duration = Duration::from_secs(60);

fn lock() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until squeue shows the job RUNNING; returns its node.
fn wait_running(job: &str) -> String {
    let deadline = Instant::now() + 3 * MIN;
    loop {
        let out = slurm("squeue")
            .args(["--noheader", "-j", job, "--format=%T|%N"])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if let Some(node) = s.strip_prefix("RUNNING|") {
            return node.to_string();
        }
        assert!(Instant::now() < deadline, "job {job} never ran: {s:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn wait_node_idle(node: &str) {
    let deadline = Instant::now() + 3 * MIN;
    loop {
        let s = run("sinfo", &["--noheader", "-n", node, "--format=%T"]);
        if s.lines()
            .all(|l| matches!(l.trim(), "idle" | "mixed" | "allocated"))
            && !s.trim().is_empty()
        {
            return;
        }
        if Instant::now() > deadline {
            let _ = slurm("scontrol")
                .args(["update", &format!("nodename={node}"), "state=resume"])
                .status();
            panic!("node {node} did not come back: {s:?}");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn a_node_failure_is_retried_on_another_node() {
    require_slurm();
    let _g = lock();
    let d = Daemon::start("");
    d.write_script("nf.sh", "sleep 30\necho ok on $(hostname) $SLURMD_NODENAME");
    let job = d.submit(&["--no-requeue", "--job-name=ssv-nodefail", "nf.sh"]);
    let node = wait_running(&job);
    run(
        "scontrol",
        &[
            "update",
            &format!("nodename={node}"),
            "state=down",
            "reason=ssv-test",
        ],
    );
    d.wait_state(&job, "completed", 4 * MIN);
    wait_node_idle(&node);
    let h = d.history(&job);
    let a = attempts(&h);
    assert_eq!(a.len(), 2, "{h:#}");
    assert_eq!(a[0]["slurm_state"], "NODE_FAIL");
    assert_eq!(a[0]["nodes"], node.as_str());
    assert_ne!(a[1]["nodes"], node.as_str(), "{h:#}");
    assert_eq!(a[1]["excluded_nodes"], serde_json::json!([node]));
    assert_eq!(h["decisions"][0]["classification"], "node_fail");
}

/// Starts a job in `urgent` on `node` that takes the whole node, preempting `debug` jobs there.
fn preempt_on(node: &str) -> String {
    let out = run(
        "sbatch",
        &[
            "--parsable",
            "--partition=urgent",
            "-w",
            node,
            "--exclusive",
            "--job-name=ssv-urgent",
            "--output=/dev/null",
            "--wrap=sleep 15",
        ],
    );
    out.trim().to_string()
}

#[test]
fn a_preemption_slurm_requeued_is_not_resubmitted() {
    require_slurm();
    let _g = lock();
    let d = Daemon::start("");
    d.write_script("victim.sh", "sleep 40\necho survived");
    let job = d.submit(&["--job-name=ssv-preempt-requeue", "victim.sh"]);
    let node = wait_running(&job);
    // Let the daemon see it running, so the requeue is noticed as it happens.
    d.wait_seen_running(&job, MIN);
    preempt_on(&node);
    d.wait_state(&job, "completed", 8 * MIN);
    let h = d.history(&job);
    let a = attempts(&h);
    assert_eq!(
        a.len(),
        1,
        "Slurm requeued it; the supervisor must not resubmit: {h:#}"
    );
    assert!(a[0]["requeues"].as_u64().unwrap() >= 1, "{h:#}");
    let ds = h["decisions"].as_array().unwrap();
    assert!(
        ds.iter()
            .any(|d| d["classification"] == "preempted" && d["action"] == "watch"),
        "{h:#}"
    );
    assert!(ds.iter().all(|d| d["action"] != "resubmit"), "{h:#}");
    // No second job anywhere in sacct carries this chain's tag.
    let rows = sacct_jobs_with_comment(a[0]["tag"].as_str().unwrap());
    let ids: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r.split('|').next().unwrap()).collect();
    assert_eq!(ids.len(), 1, "{rows:#?}");
}

#[test]
fn a_preemption_without_requeue_is_resubmitted() {
    require_slurm();
    let _g = lock();
    let d = Daemon::start("");
    d.write_script("victim.sh", "sleep 20\necho survived");
    let job = d.submit(&["--no-requeue", "--job-name=ssv-preempt", "victim.sh"]);
    let node = wait_running(&job);
    preempt_on(&node);
    d.wait_state(&job, "completed", 6 * MIN);
    let h = d.history(&job);
    let a = attempts(&h);
    assert_eq!(a.len(), 2, "{h:#}");
    assert_eq!(a[0]["slurm_state"], "PREEMPTED");
    assert_eq!(h["decisions"][0]["classification"], "preempted");
    assert_eq!(h["decisions"][0]["action"], "resubmit");
}

/// Stops a Slurm daemon of the dev cluster (as a crash or an admin would).
fn stop_daemon(name: &str) {
    let pid = std::fs::read_to_string(slurm_pidfile(name)).unwrap();
    run("kill", &[pid.trim()]);
    let deadline = Instant::now() + MIN;
    while std::path::Path::new(&format!("/proc/{}", pid.trim())).exists() {
        assert!(Instant::now() < deadline, "{name} did not stop");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Brings everything back (the dev cluster's `up` starts what is missing).
fn restart_cluster() {
    dev_cluster_up();
}

/// Waits until squeue no longer lists `job` as pending, running or completing: it ended.
fn wait_left_queue(job: &str) {
    wait_for(&format!("{job} to leave the queue"), 3 * MIN, || {
        let out = slurm("squeue")
            .args(["--noheader", "-j", job, "--format=%T"])
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout);
        !s.lines().any(|l| {
            matches!(
                l.trim(),
                "PENDING" | "RUNNING" | "COMPLETING" | "CONFIGURING"
            )
        })
    });
}

#[test]
fn a_slurmdbd_outage_is_not_taken_for_job_failures() {
    require_slurm();
    let _g = lock();
    let d = Daemon::start("");
    d.write_script("ok.sh", "sleep 6\necho fine");
    d.write_script("flaky.sh", "sleep 6\nif [ ! -e once ]; then touch once; echo 'Connection refused' >&2; exit 1; fi\necho ok");
    let a = d.submit(&["--job-name=ssv-dbd-ok", "ok.sh"]);
    let b = d.submit(&["--job-name=ssv-dbd-flaky", "flaky.sh"]);
    wait_running(&a);
    wait_running(&b);
    stop_daemon("slurmdbd");
    // The jobs end while accounting cannot be asked: nothing may be decided.
    wait_left_queue(&a);
    wait_left_queue(&b);
    wait_for("the daemon to find sacct not answering", MIN, || {
        d.log().contains("slurm is not answering")
    });
    let during = (
        d.status(&a)[0]["state"].clone(),
        d.status(&b)[0]["state"].clone(),
    );
    let log = d.log();
    restart_cluster();
    assert_eq!(during, ("active".into(), "active".into()), "{log}");
    assert_eq!(
        log.matches("slurm is not answering").count(),
        1,
        "one line per outage:\n{log}"
    );
    d.wait_state(&a, "completed", 3 * MIN);
    d.wait_state(&b, "completed", 3 * MIN);
    assert_eq!(d.history(&a)["decisions"].as_array().unwrap().len(), 0);
    let hb = d.history(&b);
    assert_eq!(hb["decisions"][0]["classification"], "transient", "{hb:#}");
    assert_eq!(attempts(&hb).len(), 2);
    assert!(d.log().contains("slurm answers again"));
}

#[test]
fn a_slurmctld_outage_delays_but_does_not_lose_or_duplicate_work() {
    require_slurm();
    let _g = lock();
    let d = Daemon::start("[slurm]\nsbatch_timeout = \"20s\"\n");
    d.write_script("ok.sh", "sleep 10\necho fine");
    let a = d.submit(&["--job-name=ssv-ctld-ok", "ok.sh"]);
    wait_running(&a);
    stop_daemon("slurmctld");
    // A submission while the controller is down is recorded and made later, once.
    let out = d.ctl_in(
        &["submit", "--", "--job-name=ssv-ctld-late", "ok.sh"],
        &d.work_dir(),
    );
    let submit_code = out.status.code();
    wait_for("the daemon to find Slurm not answering", MIN, || {
        d.log().contains("slurm is not answering")
    });
    let during = d.status(&a)[0]["state"].clone();
    let log = d.log();
    restart_cluster();
    assert_eq!(
        submit_code,
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(during, "active", "{log}");
    assert_eq!(log.matches("slurm is not answering").count(), 1, "{log}");
    d.wait_state(&a, "completed", 3 * MIN);
    // The late submission went in exactly once after the controller came back.
    let deadline = Instant::now() + 3 * MIN;
    let late = loop {
        let all = d.json(&["status", "--json"]);
        if let Some(c) = all
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] != d.status(&a)[0]["id"] && c["slurm_job_id"].is_string())
        {
            break c.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the late submission never went in: {all:#}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_secs(1));
    };
    let late_job = late["slurm_job_id"].as_str().unwrap().to_string();
    d.wait_state(&late_job, "completed", 3 * MIN);
    let h = d.history(&late_job);
    let rows = sacct_jobs_with_comment(h["attempts"][0]["tag"].as_str().unwrap());
    assert_eq!(rows.len(), 1, "{rows:#?}");
}
