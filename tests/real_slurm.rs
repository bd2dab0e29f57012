//! End-to-end tests against the real single-node Slurm of `scripts/dev-cluster`: each
//! submits through `supervisorctl submit` to a running daemon and watches the chain
//! through a real failure. Disruptive cases (node failure, preemption) are in
//! `real_slurm_disruptive.rs`, which runs its tests one at a time.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// Every run of a job in Slurm's accounting (`-D`), `JobID|State|ReqMem` a line.
fn sacct_runs(job: &str) -> String {
    run(
        "sacct",
        &[
            "-D",
            "-X",
            "-P",
            "--noheader",
            "--format=JobID,State,ReqMem",
            "-j",
            job,
        ],
    )
}

/// The job's entry in `pending --json`.
fn pending_entry(d: &Daemon, job: &str) -> Value {
    d.json(&["pending", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["slurm_job_id"] == job)
        .expect("listed in pending")
        .clone()
}

#[test]
fn oom_is_retried_with_more_memory_and_completes() {
    require_slurm();
    let d = Daemon::start("");
    // Touches 150 MiB, so --mem=100M is exceeded and OverMemoryKill fires.
    d.write_script("oom.sh", OOM_ONCE);
    let job = d.submit(&["--mem=100M", "--job-name=ssv-oom", "oom.sh"]);
    d.wait_state(&job, "completed", 4 * MIN);
    let h = d.history(&job);
    let a = attempts(&h);
    assert_eq!(a.len(), 2, "{h:#}");
    assert_eq!(a[0]["slurm_state"], "FAILED", "{h:#}");
    assert_eq!(a[0]["mem"], "100M");
    assert_eq!(a[1]["slurm_state"], "COMPLETED");
    let mem2: u64 = a[1]["mem"]
        .as_str()
        .unwrap()
        .trim_end_matches('M')
        .parse()
        .unwrap();
    assert!(mem2 >= 200, "second attempt got {mem2}M");
    let ds = decisions(&h);
    assert_eq!(ds.len(), 1, "{h:#}");
    assert_eq!(
        (
            ds[0]["class"].as_str(),
            ds[0]["classification"].as_str(),
            ds[0]["action"].as_str()
        ),
        (Some("R1"), Some("oom"), Some("resubmit"))
    );
}

/// srun step 0 completes, step 1 is killed for memory (docs/slurm-observed.md (k)).
fn two_steps() -> String {
    format!("set -e\nsrun true\nsrun {HOLD_150M}\necho done")
}

#[test]
fn a_partial_execution_waits_for_a_decision() {
    require_slurm();
    let d = Daemon::start("");
    d.write_script("steps.sh", &two_steps());
    let job = d.submit(&["--mem=100M", "--job-name=ssv-partial", "steps.sh"]);
    d.wait_state(&job, "pending_failed", 3 * MIN);
    let p = pending_entry(&d, &job);
    assert_eq!(p["last_classification"], "oom", "{p:#}");
    assert_eq!(
        p["evidence"]["completed_steps"],
        serde_json::json!([format!("{job}.0")]),
        "{p:#}"
    );
    let h = d.history(&job);
    assert_eq!(attempts(&h).len(), 1, "{h:#}");
    let ds = decisions(&h);
    assert_eq!(ds.len(), 1, "{h:#}");
    assert_eq!(
        (
            ds[0]["class"].as_str(),
            ds[0]["action"].as_str(),
            ds[0]["reason_code"].as_str()
        ),
        (Some("R2"), Some("escalate"), Some("partial_execution")),
        "{h:#}"
    );
    assert!(
        ds[0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("{job}.0")),
        "{h:#}"
    );
}

#[test]
fn a_restartable_partial_execution_is_retried_with_more_memory() {
    require_slurm();
    let d = Daemon::start("");
    d.write_script("steps.sh", &two_steps());
    let job = d.submit_with(
        &["--restartable"],
        &["--mem=100M", "--job-name=ssv-restartable", "steps.sh"],
    );
    d.wait_state(&job, "completed", 4 * MIN);
    let h = d.history(&job);
    let a = attempts(&h);
    assert_eq!(a.len(), 2, "{h:#}");
    assert_eq!(a[0]["mem"], "100M");
    assert_eq!(a[1]["slurm_state"], "COMPLETED");
    let ds = decisions(&h);
    assert_eq!(ds.len(), 1, "{h:#}");
    assert_eq!(
        (ds[0]["class"].as_str(), ds[0]["reason_code"].as_str()),
        (Some("R1"), Some("retry")),
        "{h:#}"
    );
}

#[test]
fn in_place_an_oom_job_completes_under_one_job_id_with_more_memory() {
    require_slurm();
    let d = Daemon::start(
        "[retry]\nin_place = true\nbackoff_initial = \"1s\"\nbackoff_max = \"2s\"\nbackoff_jitter = 0.0\n",
    );
    // Touches 150 MiB, so --mem=100M is exceeded and OverMemoryKill fires.
    d.write_script("oom.sh", OOM_ONCE);
    let job = d.submit(&["--mem=100M", "--job-name=ssv-inplace", "oom.sh"]);
    d.wait_state(&job, "completed", 4 * MIN);
    let h = d.history(&job);
    let a = attempts(&h);
    assert_eq!(a.len(), 2, "{h:#}");
    assert_eq!(a[1]["slurm_job_id"], job.as_str(), "{h:#}");
    assert_eq!(
        (a[0]["in_place"].as_bool(), a[1]["in_place"].as_bool()),
        (Some(false), Some(true)),
        "{h:#}"
    );
    assert_eq!(a[1]["slurm_state"], "COMPLETED", "{h:#}");
    let ds = decisions(&h);
    assert_eq!(ds.len(), 1, "{h:#}");
    assert_eq!(
        (
            ds[0]["class"].as_str(),
            ds[0]["classification"].as_str(),
            ds[0]["action"].as_str()
        ),
        (Some("R1"), Some("oom"), Some("resubmit"))
    );
    // One job id, two runs in Slurm's accounting: the requeued one, then the one that completed.
    let rows = sacct_runs(&job);
    let runs: Vec<&str> = rows.lines().collect();
    assert_eq!(runs.len(), 2, "{rows}");
    assert!(
        runs[0].starts_with(&format!("{job}|REQUEUED|100M")),
        "{rows}"
    );
    assert!(runs[1].starts_with(&format!("{job}|COMPLETED|")), "{rows}");
    let mem2: u64 = runs[1]
        .rsplit('|')
        .next()
        .unwrap()
        .trim_end_matches('M')
        .parse()
        .unwrap();
    assert!(mem2 >= 200, "{rows}");
}

#[test]
fn timeout_is_retried_with_a_longer_limit() {
    require_slurm();
    let d = Daemon::start("");
    d.write_script("slow.sh", "sleep 75\necho finished");
    let job = d.submit(&["--time=1", "--job-name=ssv-timeout", "slow.sh"]);
    d.wait_state(&job, "completed", 6 * MIN);
    let h = d.history(&job);
    let a = attempts(&h);
    assert_eq!(a.len(), 2, "{h:#}");
    assert_eq!(a[0]["slurm_state"], "TIMEOUT");
    assert_eq!(a[0]["time_limit"], "00:01:00");
    assert_eq!(a[1]["time_limit"], "00:02:00");
    assert_eq!(decisions(&h)[0]["classification"], "timeout");
}

#[test]
fn a_permanent_error_fails_without_a_retry() {
    require_slurm();
    let d = Daemon::start("[[rules]]\nname = \"missing-module\"\nkind = \"permanent\"\nstderr = 'ModuleNotFoundError'\n");
    d.write_script("perm.sh", "python3 -c 'import no_such_module_here'");
    let job = d.submit(&["--job-name=ssv-permanent", "perm.sh"]);
    d.wait_state(&job, "failed", 3 * MIN);
    let h = d.history(&job);
    assert_eq!(attempts(&h).len(), 1);
    let ds = decisions(&h);
    assert_eq!(ds.len(), 1);
    assert_eq!(
        (ds[0]["class"].as_str(), ds[0]["classification"].as_str()),
        (Some("R3"), Some("permanent"))
    );
    // `status ID` of a failed chain exits 1.
    assert_eq!(d.ctl(&["status", &job]).status.code(), Some(1));
}

#[test]
fn an_ambiguous_failure_waits_for_an_agent_then_retries() {
    require_slurm();
    let d = Daemon::start("");
    // Fails oddly the first time, succeeds once a marker exists.
    d.write_script("odd.sh", "if [ -e marker ]; then echo ok; exit 0; fi\ntouch marker\necho 'the frobnicator is out of phase' >&2\nexit 1");
    let job = d.submit(&["--job-name=ssv-ambiguous", "odd.sh"]);
    d.wait_state(&job, "pending_failed", 3 * MIN);
    let p = pending_entry(&d, &job);
    assert!(
        p["evidence"]["stderr_tail"]
            .as_str()
            .unwrap_or_default()
            .contains("frobnicator"),
        "{p:#}"
    );
    assert_eq!(p["last_classification"], "ambiguous");
    // A resolution without a reason is refused; with one it is recorded.
    let out = d.ctl(&["classify", &job, "--action", "retry", "--reason", " "]);
    assert_eq!(out.status.code(), Some(2));
    let out = d.ctl(&[
        "classify",
        &job,
        "--action",
        "retry",
        "--reason",
        "marker now exists",
        "--mem",
        "200M",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A second resolution of the same chain is refused.
    let again = d.ctl(&["classify", &job, "--action", "fail", "--reason", "late"]);
    assert_eq!(
        again.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    d.wait_state(&job, "completed", 3 * MIN);
    let h = d.history(&job);
    assert_eq!(attempts(&h).len(), 2);
    assert_eq!(attempts(&h)[1]["mem"], "200M");
    let ds = decisions(&h);
    assert_eq!(ds.len(), 2, "{h:#}");
    assert_eq!(
        (ds[0]["class"].as_str(), ds[0]["action"].as_str()),
        (Some("R2"), Some("escalate"))
    );
    assert_eq!(ds[1]["action"], "resubmit");
    assert_eq!(ds[1]["reason"], "marker now exists");
    assert_eq!(ds[1]["resolves"], ds[0]["id"]);
}

#[test]
fn a_users_scancel_is_never_retried() {
    require_slurm();
    let d = Daemon::start("");
    d.write_script("long.sh", "sleep 300");
    let job = d.submit(&["--job-name=ssv-scancel", "long.sh"]);
    // Once the daemon has seen it run, cancel it as the user would.
    d.wait_seen_running(&job, 3 * MIN);
    run("scancel", &[&job]);
    d.wait_state(&job, "cancelled", 2 * MIN);
    // `cancelled` is terminal: the R3 record below is the last word, nothing is retried.
    let h = d.history(&job);
    assert_eq!(attempts(&h).len(), 1, "{h:#}");
    let ds = decisions(&h);
    assert_eq!(
        (ds[0]["class"].as_str(), ds[0]["classification"].as_str()),
        (Some("R3"), Some("cancelled"))
    );
}

#[test]
fn supervisorctl_cancel_stops_supervision() {
    require_slurm();
    let d = Daemon::start("");
    d.write_script("long.sh", "sleep 300");
    let job = d.submit(&["--job-name=ssv-ctl-cancel", "long.sh"]);
    let out = d.ctl(&["cancel", &job]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    d.wait_state(&job, "cancelled", MIN);
    // Slurm really cancelled it.
    let deadline = std::time::Instant::now() + MIN;
    loop {
        let s = run(
            "sacct",
            &[
                "--parsable2",
                "--noheader",
                "-X",
                "-j",
                &job,
                "--format=State",
            ],
        );
        if s.contains("CANCELLED") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "sacct shows {s:?}");
        std::thread::sleep(Duration::from_secs(1));
    }
    assert_eq!(d.ctl(&["cancel", &job]).status.code(), Some(4));
}

#[test]
fn an_array_resubmits_only_its_failed_tasks_in_one_sbatch() {
    require_slurm();
    // Sibling tasks that fail within one backoff window are retried in one sbatch (the
    // engine joins every ready chain of a submission to the first one due). A 10 s backoff
    // makes that window wider than the time the daemon may take to see both endings.
    let d = Daemon::start(
        "[retry]\nbackoff_initial = \"10s\"\nbackoff_max = \"10s\"\nbackoff_jitter = 0.0\n",
    );
    // Every task says it started, then waits for `go`, which the test makes once all four
    // run: tasks 2 and 4 then fail together with a transient error (the first time only),
    // however far apart Slurm started them.
    d.write_script(
        "arr.sh",
        "t=$SLURM_ARRAY_TASK_ID\ntouch started-$t\nwhile [ ! -e go ]; do sleep 0.2; done\nif { [ $t = 2 ] || [ $t = 4 ]; } && [ ! -e done-$t ]; then touch done-$t; echo 'Connection refused' >&2; exit 1; fi\necho task $t ok",
    );
    let job = d.submit(&["--array=1-4", "--job-name=ssv-array", "arr.sh"]);
    let work = d.work_dir();
    wait_for("all four tasks to start", 4 * MIN, || {
        (1..=4).all(|t| work.join(format!("started-{t}")).exists())
    });
    std::fs::write(work.join("go"), "").unwrap();
    let rows = d.wait_state(&job, "completed", 4 * MIN);
    assert_eq!(rows.len(), 4);
    let mut retried_jobs = Vec::new();
    for r in &rows {
        let h = d.history(r["id"].as_str().unwrap());
        let a = attempts(&h);
        let task = r["array_task"].as_u64().unwrap();
        if task == 2 || task == 4 {
            assert_eq!(a.len(), 2, "task {task}: {h:#}");
            assert_eq!(decisions(&h)[0]["classification"], "transient");
            let second = a[1]["slurm_job_id"].as_str().unwrap().to_string();
            assert!(second.ends_with(&format!("_{task}")), "{second}");
            retried_jobs.push(second.split('_').next().unwrap().to_string());
        } else {
            assert_eq!(a.len(), 1, "task {task}: {h:#}");
        }
    }
    // Both retried tasks went in one sbatch.
    assert_eq!(retried_jobs[0], retried_jobs[1]);
    assert_ne!(retried_jobs[0], job);
}

#[test]
fn a_daemon_restart_midway_loses_and_repeats_nothing() {
    require_slurm();
    let mut d = Daemon::start("");
    d.write_script("flaky.sh", "sleep 8\nif [ ! -e once ]; then touch once; echo 'Connection refused' >&2; exit 1; fi\necho ok");
    let job = d.submit(&["--job-name=ssv-restart", "flaky.sh"]);
    // Stop the daemon while the job runs; the job ends while nobody watches.
    let status = d.stop();
    assert!(status.success(), "clean stop: {status}");
    wait_for(&format!("{job} to fail in sacct"), 3 * MIN, || {
        sacct_state(&job) == "FAILED"
    });
    d.spawn();
    d.wait_state(&job, "completed", 3 * MIN);
    let h = d.history(&job);
    assert_eq!(attempts(&h).len(), 2, "{h:#}");
    assert_eq!(decisions(&h).len(), 1, "{h:#}");
    // Each attempt's tag is on exactly one Slurm job: nothing was submitted twice.
    for a in attempts(&h) {
        let rows = sacct_jobs_with_comment(a["tag"].as_str().unwrap());
        assert_eq!(rows.len(), 1, "{rows:#?}");
    }
}

#[test]
fn unknown_ids_are_refused_clearly() {
    let d = Daemon::start("");
    for args in [
        vec!["status", "999999999"],
        vec!["history", "c424242"],
        vec!["cancel", "c1"],
        vec!["recover", "12345678"],
    ] {
        let out = d.ctl(&args);
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is supervised here"), "{args:?}: {err}");
    }
}

#[test]
fn a_job_submitted_with_plain_sbatch_can_be_adopted() {
    require_slurm();
    let d = Daemon::start("");
    // The job waits for `adopted` (made once `adopt` answered), so it is still running
    // when adopted however slow the queue is.
    let script = d.write_script(
        "adopt.sh",
        &format!("while [ ! -e adopted ]; do sleep 0.2; done\n{HOLD_150M}\necho adopted ok"),
    );
    let work = d.work_dir();
    let job = run(
        "sbatch",
        &[
            "--parsable",
            "--mem=100M",
            "--job-name=ssv adopt",
            &format!("--chdir={}", work.display()),
            script.to_str().unwrap(),
        ],
    )
    .trim()
    .to_string();
    let out = d.ctl(&["adopt", &job]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Adopting twice is refused.
    assert_eq!(d.ctl(&["adopt", &job]).status.code(), Some(4));
    std::fs::write(work.join("adopted"), "").unwrap();
    d.wait_state(&job, "completed", 4 * MIN);
    let h = d.history(&job);
    let a = attempts(&h);
    assert_eq!(a.len(), 2, "{h:#}");
    assert_eq!(decisions(&h)[0]["classification"], "oom");
    let name = run(
        "sacct",
        &[
            "--parsable2",
            "--noheader",
            "-X",
            "-j",
            a[1]["slurm_job_id"].as_str().unwrap(),
            "--format=JobName",
        ],
    );
    assert_eq!(name.trim(), "ssv adopt");
}

#[test]
fn an_mcp_agent_retries_an_ambiguous_failure_with_more_memory() {
    require_slurm();
    let d = Daemon::start("");
    // First run: an error no rule knows. Second run: needs 150 MiB, more than --mem=100M.
    d.write_script(
        "agentjob.sh",
        "if [ -e marker ]; then python3 -c 'x = b\"a\" * (150 * 1024 * 1024); import time; time.sleep(3)'; echo ok; exit 0; fi\ntouch marker\necho 'storage hiccup on shard 7' >&2\nexit 1",
    );
    let job = d.submit(&["--mem=100M", "--job-name=ssv-mcp", "agentjob.sh"]);
    d.wait_state(&job, "pending_failed", 3 * MIN);
    let script = format!("{}/tests/mcp/resolve_one.py", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(mcp_python())
        .args([&script, CTL, d.config.to_str().unwrap(), &job, "1G"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["pending"][0]["evidence"]["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("storage hiccup on shard 7"),
        "{v:#}"
    );
    assert_eq!(v["dry_run"]["is_error"], false, "{v:#}");
    assert_eq!(v["resolve"]["structured"]["succeeded"], 1, "{v:#}");
    assert_eq!(
        v["second"]["structured"]["results"][0]["error"]["kind"], "conflict",
        "{v:#}"
    );
    d.wait_state(&job, "completed", 3 * MIN);
    let h = d.history(&job);
    assert_eq!(attempts(&h)[1]["mem"], "1024M", "{h:#}");
    assert_eq!(
        decisions(&h)[1]["actor"]
            .as_str()
            .map(|a| a.starts_with("user:")),
        Some(true)
    );
}

#[test]
fn a_kill_right_after_sbatch_adopts_the_job_instead_of_submitting_again() {
    require_slurm();
    let mut d = Daemon::start("");
    d.write_script("flaky.sh", "sleep 3\nif [ ! -e once ]; then touch once; echo 'Connection refused' >&2; exit 1; fi\necho ok");
    let job = d.submit(&["--job-name=ssv-kill", "flaky.sh"]);
    // Re-arm the daemon to die right after the retry's sbatch returns, before recording it.
    d.kill();
    d.extra_env = vec![("SLURM_SUPERVISOR_FAILPOINT".into(), "after-sbatch".into())];
    d.spawn();
    d.wait_dead(3 * MIN);
    d.extra_env.clear();
    d.spawn();
    d.wait_state(&job, "completed", 3 * MIN);
    let h = d.history(&job);
    assert_eq!(attempts(&h).len(), 2, "{h:#}");
    for a in attempts(&h) {
        let rows = sacct_jobs_with_comment(a["tag"].as_str().unwrap());
        assert_eq!(rows.len(), 1, "attempt {}: {rows:#?}", a["n"]);
    }
    assert!(
        d.log().contains("adopting it, not submitting again"),
        "{}",
        d.log()
    );
}

// Pipelines (docs/pipelines.md): jobs that wait on a supervised job follow its chain.

#[test]
fn jobs_waiting_on_a_retried_job_run_after_its_retry() {
    require_slurm();
    let d = Daemon::start("");
    d.write_script("oom.sh", OOM_ONCE);
    d.write_script("down.sh", "echo down");
    let up = d.submit(&["--mem=100M", "--job-name=ssv-pipe-up", "oom.sh"]);
    let after = format!("--dependency=afterok:{up}");
    let down = d.submit(&[&after, "--job-name=ssv-pipe-down", "down.sh"]);
    let plain = plain_sbatch(&d, &[&after, "--job-name=ssv-pipe-plain", "--wrap=true"]);
    d.wait_state(&up, "completed", 4 * MIN);
    d.wait_state(&down, "completed", 4 * MIN);
    wait_for("the plain job to complete", 4 * MIN, || {
        sacct_field(&plain, "State") == "COMPLETED"
    });
    let up_end = last_end(&d, &up);
    for j in [&down, &plain] {
        let start = sacct_field(j, "Start");
        assert!(
            start >= up_end,
            "{j} started at {start}, before the retry ended at {up_end}"
        );
    }
    assert_eq!(attempts(&d.history(&up)).len(), 2);
    let hd = d.history(&down);
    assert_eq!(attempts(&hd).len(), 1, "rewired, not resubmitted: {hd:#}");
    assert!(reason_codes(&hd).contains(&"rewired".into()), "{hd:#}");
    let hu = d.history(&up);
    assert!(
        reason_codes(&hu).contains(&"plain_job_rewired".into()),
        "{hu:#}"
    );
    let row = &d.status(&down)[0];
    assert_eq!(row["depends_on"][0], d.status(&up)[0]["id"], "{row:#}");
}

#[test]
fn afterany_waits_for_the_final_attempt() {
    require_slurm();
    let d = Daemon::start("");
    d.write_script("oom.sh", OOM_ONCE);
    let up = d.submit(&["--mem=100M", "--job-name=ssv-pipe-up", "oom.sh"]);
    let down = d.submit(&[
        &format!("--dependency=afterany:{up}"),
        "--job-name=ssv-pipe-any",
        "--wrap=true",
    ]);
    d.wait_state(&up, "completed", 4 * MIN);
    d.wait_state(&down, "completed", 4 * MIN);
    let start = sacct_field(&down, "Start");
    let up_end = last_end(&d, &up);
    assert!(
        start >= up_end,
        "started at {start}, before the final attempt ended at {up_end}"
    );
    assert!(reason_codes(&d.history(&down)).contains(&"released".into()));
}

#[test]
fn afternotok_on_a_chain_that_recovers_never_runs() {
    require_slurm();
    let d = Daemon::start("");
    d.write_script("oom.sh", OOM_ONCE);
    let up = d.submit(&["--mem=100M", "--job-name=ssv-pipe-up", "oom.sh"]);
    let chain = d.status(&up)[0]["id"].as_str().unwrap().to_string();
    let fallback = d.submit(&[
        &format!("--dependency=afternotok:{chain}"),
        "--job-name=ssv-pipe-fallback",
        "--wrap=true",
    ]);
    d.wait_state(&up, "completed", 4 * MIN);
    d.wait_state(&fallback, "cancelled", 2 * MIN);
    let h = d.history(&fallback);
    assert!(
        reason_codes(&h).contains(&"dependency_never_satisfied".into()),
        "{h:#}"
    );
    assert_eq!(decisions(&h).last().unwrap()["class"], "R3");
    wait_for("the fallback to be cancelled in Slurm", MIN, || {
        sacct_field(&fallback, "State").starts_with("CANCELLED")
    });
    assert_eq!(sacct_field(&fallback, "Start"), "None", "it never ran");
}

#[test]
fn afternotok_on_a_chain_that_fails_for_good_runs() {
    require_slurm();
    let d = Daemon::start("[[rules]]\nname = \"missing-module\"\nkind = \"permanent\"\nstderr = 'ModuleNotFoundError'\n");
    d.write_script("perm.sh", "python3 -c 'import no_such_module_here'");
    let up = d.submit(&["--job-name=ssv-pipe-up", "perm.sh"]);
    let fallback = d.submit(&[
        &format!("--dependency=afternotok:{up}"),
        "--job-name=ssv-pipe-fallback",
        "--wrap=true",
    ]);
    d.wait_state(&up, "failed", 3 * MIN);
    d.wait_state(&fallback, "completed", 3 * MIN);
    assert!(reason_codes(&d.history(&fallback)).contains(&"released".into()));
}

/// A plain-sbatch afterany job cannot be held back until the chain ends for good: it is
/// reported on the upstream chain while it waits, once.
#[test]
fn a_plain_afterany_job_is_reported_on_the_upstream_chain() {
    require_slurm();
    let d = Daemon::start("");
    d.write_script("long.sh", "sleep 25\necho done");
    let up = d.submit(&["--job-name=ssv-pipe-long", "long.sh"]);
    let plain = plain_sbatch(
        &d,
        &[
            &format!("--dependency=afterany:{up}"),
            "--job-name=ssv-pipe-plain-any",
            "--wrap=true",
        ],
    );
    let reported = |h: &serde_json::Value| -> Vec<serde_json::Value> {
        decisions(h)
            .into_iter()
            .filter(|d| d["reason_code"] == "plain_job_not_held")
            .collect()
    };
    wait_for(
        "the plain job to be reported on the upstream chain",
        MIN,
        || !reported(&d.history(&up)).is_empty(),
    );
    let h = d.history(&up);
    let r = reported(&h);
    assert_eq!(r[0]["inputs"]["job"], plain.as_str(), "{h:#}");
    assert_eq!(r[0]["class"], "R3", "{h:#}");
    d.wait_state(&up, "completed", 2 * MIN);
    wait_for("the plain job to complete", 2 * MIN, || {
        sacct_field(&plain, "State") == "COMPLETED"
    });
    assert_eq!(reported(&d.history(&up)).len(), 1, "reported once");
}

#[test]
fn a_job_slurm_cancelled_for_its_dependency_is_brought_back() {
    require_slurm();
    // What a cluster with DependencyParameters=kill_invalid_depend does to every job,
    // asked for by this one job.
    a_job_slurm_cancelled_for_its_dependency_comes_back(&["--kill-on-invalid-dep=yes"]);
}

#[test]
fn aftercorr_tasks_follow_their_own_retried_counterpart() {
    require_slurm();
    let d = Daemon::start("");
    d.write_script(
        "tasks.sh",
        &format!("if [ \"$SLURM_ARRAY_TASK_ID\" = 2 ]; then\n{OOM_ONCE}\nfi\necho ok"),
    );
    let up = d.submit(&[
        "--mem=100M",
        "--array=1-3",
        "--job-name=ssv-pipe-up",
        "tasks.sh",
    ]);
    let down = d.submit(&[
        "--array=1-3",
        &format!("--dependency=aftercorr:{up}"),
        "--job-name=ssv-pipe-corr",
        "--wrap=true",
    ]);
    d.wait_state(&up, "completed", 4 * MIN);
    d.wait_state(&down, "completed", 4 * MIN);
    // Task 2 ran after its counterpart's retry; it was rewired, not resubmitted.
    let up2 = d.history(&format!("{up}_2"));
    let up2_end = last_end(&d, &format!("{up}_2"));
    assert_eq!(attempts(&up2).len(), 2, "{up2:#}");
    let h = d.history(&format!("{down}_2"));
    assert_eq!(attempts(&h).len(), 1, "{h:#}");
    assert!(reason_codes(&h).contains(&"rewired".into()), "{h:#}");
    let start = sacct_field(&format!("{down}_2"), "Start");
    assert!(
        start >= up2_end,
        "task 2 started at {start}, before its counterpart's retry ended at {up2_end}"
    );
}

#[test]
fn in_place_a_kill_between_requeuehold_and_release_does_not_leave_the_job_held() {
    require_slurm();
    let mut d = Daemon::start(
        "[retry]\nin_place = true\nbackoff_initial = \"1s\"\nbackoff_max = \"2s\"\nbackoff_jitter = 0.0\n",
    );
    d.write_script("oom.sh", &format!("sleep 3\n{OOM_ONCE}"));
    let job = d.submit(&["--mem=100M", "--job-name=ssv-inplace-kill", "oom.sh"]);
    // Re-arm the daemon to die right after scontrol requeuehold, before update and release.
    d.kill();
    d.extra_env = vec![(
        "SLURM_SUPERVISOR_FAILPOINT".into(),
        "after-requeuehold".into(),
    )];
    d.spawn();
    d.wait_dead(3 * MIN);
    let held = run("squeue", &["-h", "--states=all", "-j", &job, "-o", "%T|%r"]);
    assert!(held.contains("held"), "{held}");
    d.extra_env.clear();
    d.spawn();
    d.wait_state(&job, "completed", 4 * MIN);
    let h = d.history(&job);
    let a = attempts(&h);
    assert_eq!(a.len(), 2, "{h:#}");
    assert_eq!(a[1]["slurm_job_id"], job.as_str(), "{h:#}");
    assert_eq!(decisions(&h).len(), 1, "{h:#}");
    let rows = sacct_runs(&job);
    let runs: Vec<&str> = rows.lines().collect();
    assert_eq!(runs.len(), 2, "{rows}");
    assert!(runs[1].starts_with(&format!("{job}|COMPLETED|")), "{rows}");
    assert!(
        d.log()
            .contains("finishing an interrupted in-place requeue"),
        "{}",
        d.log()
    );
}

#[test]
fn in_place_jobs_waiting_on_the_requeued_job_run_after_it() {
    require_slurm();
    let d = Daemon::start(
        "[retry]\nin_place = true\nbackoff_initial = \"1s\"\nbackoff_max = \"2s\"\nbackoff_jitter = 0.0\n",
    );
    d.write_script("oom.sh", OOM_ONCE);
    d.write_script("down.sh", "echo down");
    let up = d.submit(&["--mem=100M", "--job-name=ssv-inplace-up", "oom.sh"]);
    let after = format!("--dependency=afterok:{up}");
    let down = d.submit(&[&after, "--job-name=ssv-inplace-down", "down.sh"]);
    let plain = plain_sbatch(&d, &[&after, "--job-name=ssv-inplace-plain", "--wrap=true"]);
    d.wait_state(&up, "completed", 4 * MIN);
    let h = d.history(&up);
    assert_eq!(attempts(&h)[1]["slurm_job_id"], up.as_str(), "{h:#}");
    // Slurm left both marked failed; the rewiring set their dependency again.
    d.wait_state(&down, "completed", 3 * MIN);
    wait_for("the plain job to complete", 3 * MIN, || {
        sacct_field(&plain, "State") == "COMPLETED"
    });
    let hd = d.history(&down);
    assert!(reason_codes(&hd).contains(&"rewired".into()), "{hd:#}");
    let hu = d.history(&up);
    assert!(
        reason_codes(&hu).contains(&"plain_job_rewired".into()),
        "{hu:#}"
    );
    let up_end = last_end(&d, &up);
    for j in [&down, &plain] {
        let start = sacct_field(j, "Start");
        assert!(
            start >= up_end,
            "{j} started at {start}, before {up} ended at {up_end}"
        );
    }
}

/// The job runs with the submitter's umask, not the daemon's own 077: sbatch hands its
/// umask to the job as SLURM_UMASK unless set, and the daemon's sbatch runs with 077, so
/// `supervisorctl submit` records the submitter's.
#[test]
fn the_job_gets_the_submitters_umask_not_the_daemons() {
    require_slurm();
    let d = Daemon::start("");
    d.write_script("umask.sh", "umask > umask.out");
    let mut submit = std::process::Command::new(env!("CARGO_BIN_EXE_supervisorctl"));
    submit
        .arg("--config")
        .arg(&d.config)
        .args(["submit", "--", "--job-name=ssv-umask", "umask.sh"])
        .current_dir(d.work_dir())
        .stdin(std::process::Stdio::null());
    with_umask(&mut submit, 0o027);
    let out = submit.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = String::from_utf8(out.stdout).unwrap().trim().to_string();
    d.wait_state(&job, "completed", 4 * MIN);
    let got = std::fs::read_to_string(d.work_dir().join("umask.out")).unwrap();
    assert_eq!(got.trim(), "0027", "the job's umask");
}

/// Held jobs of a test, cancelled when it ends however it ends.
struct Held(Vec<String>);

impl Drop for Held {
    fn drop(&mut self) {
        let _ = slurm("scancel").args(&self.0).output();
    }
}

/// The poll's one query a cycle, on the real squeue: for more than one job it lists every
/// job and keeps the lines of the jobs asked about. That listing shows those jobs as
/// naming them does, each task of a pending array whose task list is
/// irregular and long (`SLURM_BITSTR_LEN=0`: whole, not cut at 64 bytes), and nothing of
/// anyone else's jobs. The state-only query the same where Slurm has it (24.11).
#[test]
fn the_listing_of_every_job_shows_the_jobs_asked_about_as_naming_them_does() {
    use slurm_supervisor::slurm::cli::SlurmCli;
    use slurm_supervisor::slurm::jobid::queued_states;
    use slurm_supervisor::slurm::types::SqueueRow;
    use slurm_supervisor::slurm::Slurm;
    use std::collections::HashMap;
    require_slurm();
    let tasks: Vec<u32> = (1..30).map(|i| i * i).collect();
    let list = tasks
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    assert!(list.len() > 64, "longer than squeue prints by default");
    let held = |extra: &str| {
        run(
            "sbatch",
            &[
                "--parsable",
                "--hold",
                "--wrap=true",
                "--output=/dev/null",
                extra,
            ],
        )
        .trim()
        .to_string()
    };
    let array = held(&format!("--array={list}"));
    let single = held("--job-name=ssv-listing");
    let other = held("--job-name=ssv-not-asked");
    let _cancel = Held(vec![array.clone(), single.clone(), other.clone()]);

    let mut sc = slurm_supervisor::config::Config::parse("", None)
        .unwrap()
        .slurm;
    sc.bin_dir = slurm_bin_dir();
    let named = SlurmCli::new(&sc).naming_jobs_up_to(2);
    let every = SlurmCli::new(&sc);
    let ids = vec![array.clone(), single.clone()];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut expected: Vec<String> = tasks.iter().map(|t| format!("{array}_{t}")).collect();
    expected.push(single.clone());
    expected.sort();
    let states =
        |rows: &[SqueueRow]| queued_states(rows.iter().map(|r| (r.job_id.as_str(), r.state)));
    let keys = |m: &HashMap<String, _>| {
        let mut k: Vec<String> = m.keys().cloned().collect();
        k.sort();
        k
    };

    let by_name = rt.block_on(named.squeue(&ids)).unwrap();
    let listed = rt.block_on(every.squeue(&ids)).unwrap();
    assert!(listed.errors.is_empty(), "{:?}", listed.errors);
    assert!(
        listed.rows.iter().all(|r| !r.job_id.starts_with(&other)),
        "{:?}",
        listed.rows
    );
    let (a, b) = (states(&by_name.rows), states(&listed.rows));
    assert_eq!(keys(&b), expected, "{:?}", listed.rows);
    assert_eq!(a, b);
    // The poll's own reading of the same listings, folded as read, holds the same.
    let by_name = rt.block_on(named.poll_queue(&ids)).unwrap();
    let listed = rt.block_on(every.poll_queue(&ids)).unwrap();
    assert!(listed.errors.is_empty(), "{:?}", listed.errors);
    assert_eq!((by_name.states(), listed.states()), (b.clone(), b.clone()));

    // The same listing, reading the pending jobs of their owner too (the waiters' report
    // and rewiring, on the cycles that need them): one squeue for both.
    let owner = run("id", &["-un"]).trim().to_string();
    let (queue, pending) = rt
        .block_on(every.squeue_with_pending(&ids, std::slice::from_ref(&owner)))
        .unwrap();
    let pending = pending.unwrap();
    assert!(queue.errors.is_empty() && pending.errors.is_empty());
    assert_eq!(queue.states(), b);
    // Other tests' jobs may be pending beside these (with dependencies of their own):
    // only these three are looked at.
    let mine: Vec<&slurm_supervisor::slurm::types::PendingRow> = pending
        .rows
        .iter()
        .filter(|r| [&array, &single, &other].contains(&&r.job_id_raw))
        .collect();
    let mut waiting: Vec<&str> = mine.iter().map(|r| r.job_id_raw.as_str()).collect();
    waiting.sort();
    let mut held_ids = vec![array.as_str(), single.as_str(), other.as_str()];
    held_ids.sort();
    assert_eq!(waiting, held_ids, "{:?}", pending.rows);
    assert!(
        mine.iter()
            .all(|r| r.user == owner && r.dependency.is_empty()),
        "{mine:?}"
    );
    assert!(pending.rows.iter().all(|r| r.user == owner));

    let by_name = rt.block_on(named.job_states(&ids)).unwrap();
    let listed = rt.block_on(every.job_states(&ids)).unwrap();
    match (slurm_version(), by_name, listed) {
        ("22.05", None, None) => {}
        ("24.11", Some(by_name), Some(listed)) => {
            assert!(listed.errors.is_empty(), "{:?}", listed.errors);
            let (a, b) = (by_name.states(), listed.states());
            assert_eq!(keys(&b), expected, "{listed:?}");
            assert_eq!(a, b);
        }
        (v, a, b) => panic!(
            "Slurm {v}: state-only query {:?} / {:?}",
            a.is_some(),
            b.is_some()
        ),
    }
}
