//! Continuation (docs/continuation.md) end to end with the fake Slurm: the daemon and
//! supervisorctl run for real, the endings are scripted. A continuing job that meets its
//! time limit having written its checkpoint is submitted again with the same resources
//! and its warning signal, under a `continued` record that carries the evidence; one that
//! wrote nothing waits in `pending_failed` and is never submitted again; a job that exits
//! with the code it named is continued; a mistake in `#SSV` lines is refused with its line.
//! (tests/real_slurm.rs runs the same against a real Slurm.)

mod common;

use common::fake::{start, wait_until};
use common::*;
use std::time::Duration;

/// The fake's elapsed time is 5 s: a minimum below it, so the checkpoint is the evidence.
const CONFIG: &str = "[continuation]\nmin_attempt = \"1s\"\n";

/// Sets `path`'s modification time a few seconds ahead, as a job running later would.
fn touch_later(path: &std::path::Path) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
}

fn argv_of(call: &serde_json::Value) -> Vec<String> {
    serde_json::from_value(call["argv"].clone()).unwrap()
}

/// Waits until the daemon has recorded the continuation of the chain of `job`: its sbatch
/// answered and the answer landed, so the chain's latest attempt is another job (the fake
/// records an sbatch call before the daemon has its answer). Returns that job's id.
fn continued_as(d: &Daemon, job: &str) -> String {
    let mut next = String::new();
    wait_until(
        "the continuation's job",
        Duration::from_secs(20),
        || match d.status(job)[0]["slurm_job_id"].as_str() {
            Some(j) if j != job => {
                next = j.to_string();
                true
            }
            _ => false,
        },
    );
    next
}

#[test]
fn a_checkpointing_job_is_continued_while_it_makes_progress_and_stops_when_it_does_not() {
    let (d, fake) = start(CONFIG, &[]);
    d.write_script("train.sh", "echo training");
    let ckpt = d.work_dir().join("ckpt.txt");
    std::fs::write(&ckpt, "step 0\n").unwrap();
    let job = d.submit_with(
        &["--continue", "--progress", "ckpt.txt"],
        &["--time=1", "--mem=100M", "train.sh"],
    );
    let first = argv_of(&fake.sbatch_calls()[0]);
    assert!(
        first.contains(&"--signal=B:USR1@90".to_string()),
        "{first:?}"
    );

    // The first attempt wrote its checkpoint, then met its limit. (Its time is set past
    // the second of the submission, which is all the daemon knows of the job's start.)
    std::fs::write(&ckpt, "step 40\n").unwrap();
    touch_later(&ckpt);
    fake.ctl(&["finish", &job, "TIMEOUT", "0:0"]);
    let second_job = continued_as(&d, &job);
    let second = argv_of(&fake.sbatch_calls()[1]);
    // The same resources: the user's --time stays, no longer limit is asked for.
    assert!(second.contains(&"--time=1".to_string()), "{second:?}");
    assert!(
        !second
            .iter()
            .any(|a| a.starts_with("--time=") && a != "--time=1"),
        "{second:?}"
    );
    assert!(
        second.contains(&"--signal=B:USR1@90".to_string()),
        "{second:?}"
    );
    let h = d.history(&job);
    let ds = decisions(&h);
    assert_eq!(ds.len(), 1, "{h:#}");
    assert_eq!(ds[0]["action"], "continue");
    assert_eq!(ds[0]["class"], "R1");
    assert_eq!(ds[0]["classification"], "timeout");
    assert_eq!(ds[0]["reason_code"], "continued");
    let reason = ds[0]["reason"].as_str().unwrap();
    assert!(reason.contains("ckpt.txt changed"), "{reason}");
    let facts = &ds[0]["inputs"]["history"]["continuation"];
    assert_eq!(facts["now"]["kind"], "file", "{facts:#}");
    assert_eq!(facts["now"]["size"], 8, "{facts:#}");
    let rows = d.status(&job);
    assert_eq!(rows[0]["state"], "active", "{rows:#?}");
    assert_eq!(rows[0]["continuations"], 1, "{rows:#?}");

    // The second attempt wrote nothing: no continuation, evidence kept, no third sbatch.
    fake.ctl(&["finish", &second_job, "TIMEOUT", "0:0"]);
    d.wait_state(&job, "pending_failed", Duration::from_secs(20));
    let h = d.history(&job);
    let last = decisions(&h).last().cloned().unwrap();
    assert_eq!(last["reason_code"], "no_progress", "{h:#}");
    assert_eq!(last["action"], "escalate");
    assert!(
        last["reason"].as_str().unwrap().contains("did not change"),
        "{last:#}"
    );
    // pending_failed is never launched from: the two sbatch calls are all there will be.
    assert_eq!(
        fake.sbatch_calls().len(),
        2,
        "no continuation without progress"
    );
}

#[test]
fn ssv_lines_ask_for_it_and_a_requeue_exit_code_is_a_continuation() {
    let (d, fake) = start(CONFIG, &[]);
    d.write_script(
        "sim.sh",
        "#SBATCH --signal=B:USR2@30\n#SSV --requeue-exit=85\necho step",
    );
    let job = d.submit(&["sim.sh"]);
    // The user's own --signal is theirs: none is added.
    let first = argv_of(&fake.sbatch_calls()[0]);
    assert!(
        !first.iter().any(|a| a.starts_with("--signal")),
        "{first:?}"
    );
    fake.ctl(&["finish", &job, "FAILED", "85:0"]);
    let second_job = continued_as(&d, &job);
    let h = d.history(&job);
    assert_eq!(reason_codes(&h), vec!["continued"], "{h:#}");
    // Another exit code is a failure like any other.
    fake.ctl(&["finish", &second_job, "FAILED", "1:0"]);
    d.wait_state(&job, "pending_failed", Duration::from_secs(20));
    assert_eq!(
        reason_codes(&d.history(&job)),
        vec!["continued", "needs_agent"]
    );
}

#[test]
fn a_mistake_in_ssv_lines_is_refused_with_its_line() {
    let (d, fake) = start(CONFIG, &[]);
    d.write_script("bad.sh", "#SSV --contineu\necho");
    let out = d.ctl_in(&["submit", "--", "bad.sh"], &d.work_dir());
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("#SSV line 2") && err.contains("--contineu"),
        "{err}"
    );
    let out = d.ctl_in(
        &["submit", "--requeue-exit=0", "--", "bad.sh"],
        &d.work_dir(),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(fake.sbatch_calls().is_empty());
}
