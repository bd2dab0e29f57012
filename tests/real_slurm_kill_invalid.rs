//! Pipelines on a cluster configured with `DependencyParameters=kill_invalid_depend`
//! (docs/pipelines.md): Slurm cancels a job whose afterok upstream failed instead of
//! leaving it waiting, and the supervisor brings the job back once the upstream is
//! retried. The dev cluster is switched to that setting for these tests only
//! (`DEV_CLUSTER_KILL_INVALID_DEPEND=1 scripts/dev-cluster up`); scripts/test does it after
//! the cluster's other real-Slurm tests (before tests/package.rs), runs this file, and
//! switches the cluster back.

mod common;

use common::*;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// Fails the test unless the selected cluster cancels jobs whose dependency can never be
/// satisfied: this file tests nothing on a cluster that keeps them waiting.
fn require_kill_invalid_depend() {
    require_slurm();
    let config = run("scontrol", &["show", "config"]);
    let line = config
        .lines()
        .find(|l| l.trim_start().starts_with("DependencyParameters"))
        .unwrap_or("DependencyParameters (not listed)");
    assert!(
        line.contains("kill_invalid_depend"),
        "the Slurm {v} dev cluster does not kill jobs with an invalid dependency ({line:?}): \
         run `DEV_CLUSTER_KILL_INVALID_DEPEND=1 scripts/dev-cluster up --slurm {v}` first \
         (and `scripts/dev-cluster up --slurm {v}` afterwards to switch it back)",
        v = slurm_version()
    );
}

#[test]
fn a_downstream_slurm_cancelled_for_its_dependency_is_brought_back() {
    require_kill_invalid_depend();
    a_job_slurm_cancelled_for_its_dependency_comes_back(&[]);
}

/// The usual case: an OOM upstream retried at once. Whether Slurm's cancel or the
/// supervisor's rewiring comes first, the downstream runs once, after the retry, and
/// every step of it is recorded.
#[test]
fn a_downstream_of_an_oom_job_runs_after_the_retry() {
    require_kill_invalid_depend();
    let d = Daemon::start("");
    d.write_script("oom.sh", OOM_ONCE);
    let up = d.submit(&["--mem=100M", "--job-name=ssv-kid-oom", "oom.sh"]);
    let down = d.submit(&[
        &format!("--dependency=afterok:{up}"),
        "--job-name=ssv-kid-oom-down",
        "--wrap=true",
    ]);
    d.wait_state(&up, "completed", 4 * MIN);
    d.wait_state(&down, "completed", 4 * MIN);
    let h = d.history(&down);
    let codes = reason_codes(&h);
    assert!(
        codes.contains(&"killed_for_dependency".into()) || codes.contains(&"rewired".into()),
        "brought back or rewired, and recorded: {h:#}"
    );
    let ran: Vec<_> = attempts(&h)
        .iter()
        .filter_map(|a| a["slurm_job_id"].as_str().map(str::to_string))
        .filter(|j| ran(j))
        .collect();
    assert_eq!(ran.len(), 1, "the downstream ran once: {h:#}");
    let start = sacct_field(&ran[0], "Start");
    let up_end = last_end(&d, &up);
    assert!(
        start >= up_end,
        "started at {start}, before the upstream's retry ended at {up_end}"
    );
}

/// With `[retry] in_place`, the upstream keeps its job id; the downstream Slurm cancelled
/// when its first run failed is brought back (resubmitted, not requeued) waiting on the
/// requeued job, and runs once, after it. The upstream's retry waits 20 s, so Slurm's
/// cancel (within its next scheduling pass, 2 s here) surely comes first.
#[test]
fn in_place_a_downstream_slurm_cancelled_waits_on_the_requeued_job() {
    require_kill_invalid_depend();
    let d = Daemon::start(
        "[retry]\nin_place = true\nbackoff_initial = \"20s\"\nbackoff_max = \"20s\"\nbackoff_jitter = 0.0\n",
    );
    d.write_script("oom.sh", OOM_ONCE);
    let up = d.submit(&["--mem=100M", "--job-name=ssv-kid-inplace", "oom.sh"]);
    let down = d.submit(&[
        &format!("--dependency=afterok:{up}"),
        "--job-name=ssv-kid-inplace-down",
        "--wrap=true",
    ]);
    d.wait_state(&up, "completed", 4 * MIN);
    d.wait_state(&down, "completed", 4 * MIN);
    let uh = d.history(&up);
    let ua = attempts(&uh);
    assert_eq!(ua.len(), 2, "{uh:#}");
    assert_eq!(ua[1]["slurm_job_id"], up.as_str(), "one job id: {uh:#}");
    let h = d.history(&down);
    assert!(
        reason_codes(&h).contains(&"killed_for_dependency".into()),
        "Slurm's cancel recorded as one for the dependency: {h:#}"
    );
    let jobs: Vec<_> = attempts(&h)
        .iter()
        .filter_map(|a| a["slurm_job_id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(jobs.len(), 2, "{h:#}");
    assert_ne!(jobs[0], jobs[1], "resubmitted, not requeued: {h:#}");
    let ran: Vec<_> = jobs.iter().filter(|j| ran(j)).collect();
    assert_eq!(ran.len(), 1, "the downstream ran once: {h:#}");
    let start = sacct_field(ran[0], "Start");
    let up_end = last_end(&d, &up);
    assert!(
        start >= up_end,
        "started at {start}, before the upstream's requeued run ended at {up_end}"
    );
}
