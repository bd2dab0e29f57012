//! Continuation (docs/continuation.md) against the real Slurm of `scripts/dev-cluster`
//! (22.05 and 24.11): a job that checkpoints meets `--time=1` again and again and runs to
//! its end through continuations with the same limit; one whose progress path never
//! changes is not continued; a Lightning-style job that requeues itself keeps its one job
//! id and is never submitted a second time.

mod common;

use common::*;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// Attempts of at least 30 s count (a TIMEOUT at `--time=1` runs about 60 s).
const CONFIG: &str = "[continuation]\nmin_attempt = \"30s\"\n";

/// Every run of every job named `name` in Slurm's accounting (`JobID|State|Timelimit`).
fn runs_named(name: &str) -> Vec<String> {
    run(
        "sacct",
        &[
            "-D",
            "-X",
            "-P",
            "--noheader",
            "--starttime=now-1days",
            "--format=JobID,State,Timelimit",
            &format!("--name={name}"),
        ],
    )
    .lines()
    .map(str::to_string)
    .collect()
}

/// A job that needs `work` seconds in all, counts them into `ckpt` every two seconds and
/// resumes from it. The warning (SIGUSR1 to the batch shell) is only noted.
fn counter(work: u32) -> String {
    format!(
        "n=$(cat ckpt 2>/dev/null || echo 0)\n\
         trap 'echo \"warned at $n\" >&2' USR1\n\
         while [ \"$n\" -lt {work} ]; do\n\
           sleep 2 & wait $!\n\
           n=$((n + 2)); echo \"$n\" > ckpt.tmp && mv ckpt.tmp ckpt\n\
         done\n\
         echo \"done at $n\""
    )
}

#[test]
fn a_checkpointing_job_runs_to_its_end_through_continuations_at_the_same_limit() {
    require_slurm();
    let d = Daemon::start(CONFIG);
    d.write_script(
        "train.sh",
        &format!("#SSV --continue --progress=ckpt\n{}", counter(150)),
    );
    let name = format!("ssv-cont-{}", std::process::id());
    let job = d.submit(&["--time=1", &format!("--job-name={name}"), "train.sh"]);
    d.wait_state(&job, "completed", 9 * MIN);
    let h = d.history(&job);
    let a = attempts(&h);
    assert!((3..=4).contains(&a.len()), "{h:#}");
    for (i, at) in a.iter().enumerate() {
        assert_eq!(at["time_limit"], "00:01:00", "attempt {i}: {h:#}");
    }
    for at in &a[..a.len() - 1] {
        assert_eq!(at["slurm_state"], "TIMEOUT", "{h:#}");
    }
    // One `continued` record per continued attempt, and nothing else.
    let codes = reason_codes(&h);
    assert_eq!(codes, vec!["continued"; a.len() - 1], "{h:#}");
    for dec in decisions(&h) {
        assert_eq!(dec["action"], "continue");
        assert!(
            dec["reason"].as_str().unwrap().contains("ckpt changed"),
            "{dec:#}"
        );
    }
    let rows = d.status(&job);
    assert_eq!(rows[0]["continuations"], a.len() - 1, "{rows:#?}");
    // Every attempt got the warning: the daemon added --signal=B:USR1@90.
    let stderr =
        std::fs::read_to_string(d.work_dir().join(format!("slurm-{job}.out"))).unwrap_or_default();
    assert!(stderr.contains("warned at"), "{stderr}");
    assert_eq!(runs_named(&name).len(), a.len(), "{:?}", runs_named(&name));
    let done = std::fs::read_to_string(d.work_dir().join("ckpt")).unwrap();
    assert_eq!(done.trim(), "150");
}

#[test]
fn a_job_whose_progress_path_never_changes_is_not_continued() {
    require_slurm();
    let d = Daemon::start(CONFIG);
    std::fs::write(d.work_dir().join("never"), "0\n").unwrap();
    d.write_script("stuck.sh", "sleep 300");
    let name = format!("ssv-stuck-{}", std::process::id());
    let job = d.submit_with(
        &["--continue", "--progress=never"],
        &["--time=1", &format!("--job-name={name}"), "stuck.sh"],
    );
    d.wait_state(&job, "pending_failed", 4 * MIN);
    let h = d.history(&job);
    assert_eq!(reason_codes(&h), vec!["no_progress"], "{h:#}");
    let reason = decisions(&h)[0]["reason"].as_str().unwrap().to_string();
    // Ended by the warning it does not trap (too short to count: the path is not looked
    // at), or at its limit with the path unchanged.
    assert!(
        reason.contains("never did not change") || reason.contains("never not looked at"),
        "{reason}"
    );
    assert_eq!(attempts(&h).len(), 1, "{h:#}");
    // pending_failed is never launched from: one job, one run.
    assert_eq!(runs_named(&name).len(), 1, "{:?}", runs_named(&name));
}

#[test]
fn a_job_that_requeues_itself_keeps_its_one_job_id() {
    require_slurm();
    let d = Daemon::start(CONFIG);
    // Lightning's auto-requeue: on the warning, save and `scontrol requeue` itself, once
    // it has done some work (Slurm's signal may come at any moment of the first seconds;
    // a requeue before any work would make no progress), and only from its first run.
    // The trap is set first: an untrapped warning would end the batch shell. Slurm's own
    // scontrol, where the job runs (the 24.11 nodes run in their root, where it is
    // /usr/bin/scontrol too).
    d.write_script(
        "lightning.sh",
        "trap 'warned=1' USR1\n\
         warned=0; n=$(cat ckpt 2>/dev/null || echo 0); start=$n\n\
         while [ \"$n\" -lt 40 ]; do\n\
           sleep 2 & wait $!\n\
           n=$((n + 2))\n\
           if [ $warned = 1 ] && [ $((n - start)) -ge 6 ] && [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then\n\
             echo \"$n\" > ckpt; /usr/bin/scontrol requeue \"$SLURM_JOB_ID\" || exit 3; exit 0\n\
           fi\n\
         done\n\
         echo \"$n\" > ckpt; echo \"done at $n after ${SLURM_RESTART_COUNT:-0} requeues\"",
    );
    let name = format!("ssv-light-{}", std::process::id());
    let job = d.submit_with(
        &["--continue", "--progress=ckpt"],
        &[
            "--time=1",
            "--signal=B:USR1@50",
            &format!("--job-name={name}"),
            "lightning.sh",
        ],
    );
    d.wait_state(&job, "completed", 6 * MIN);
    let h = d.history(&job);
    // One attempt, one job id: the requeue is recorded and watched, never resubmitted.
    assert_eq!(attempts(&h).len(), 1, "{h:#}");
    let codes = reason_codes(&h);
    assert!(
        !codes.is_empty() && codes.iter().all(|c| c == "requeued_by_slurm"),
        "{h:#}"
    );
    let runs = runs_named(&name);
    assert!(
        runs.iter().all(|r| r.starts_with(&format!("{job}|"))),
        "{runs:?}"
    );
    assert!(runs.iter().any(|r| r.contains("REQUEUED")), "{runs:?}");
    assert!(runs.last().unwrap().contains("COMPLETED"), "{runs:?}");
}
