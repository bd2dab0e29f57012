//! Exactly-once under crashes, storms and hostile input, with the fake Slurm: the daemon
//! is killed at every named failpoint and at random instants, and afterwards every
//! attempt must have exactly one Slurm job and every Slurm job one attempt.

mod common;

use common::fake::{start, wait_until, Fake};
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// The supervisor tag inside a fake job's comment.
fn tag_of(job: &Value) -> Option<String> {
    job["comment"]
        .as_str()?
        .split_whitespace()
        .find(|w| w.starts_with("ssv-"))
        .map(str::to_string)
}

/// Every attempt that reached Slurm has exactly one job with its tag, and every tagged job
/// belongs to an attempt. Returns the histories.
fn assert_exactly_once(d: &Daemon, fake: &Fake) -> Vec<Value> {
    let mut jobs_by_tag: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, job) in fake.jobs() {
        if let Some(t) = tag_of(&job) {
            jobs_by_tag.entry(t).or_default().push(id);
        }
    }
    let mut histories = Vec::new();
    let mut seen_tags = Vec::new();
    for row in d.json(&["status", "--json"]).as_array().unwrap() {
        let h = d.history(row["id"].as_str().unwrap());
        let mut numbers = Vec::new();
        for a in h["attempts"].as_array().unwrap() {
            numbers.push(a["n"].as_u64().unwrap());
            let tag = a["tag"].as_str().unwrap().to_string();
            if let Some(job) = a["slurm_job_id"].as_str() {
                let jobs = jobs_by_tag.get(&tag).cloned().unwrap_or_default();
                assert_eq!(
                    jobs,
                    vec![job.to_string()],
                    "attempt {} of {} ({tag}): {h:#}",
                    a["n"],
                    row["id"]
                );
            }
            seen_tags.push(tag);
        }
        let mut sorted = numbers.clone();
        sorted.dedup();
        assert_eq!(numbers, sorted, "attempt numbers repeat: {h:#}");
        histories.push(h);
    }
    for (tag, jobs) in &jobs_by_tag {
        assert!(
            seen_tags.contains(tag),
            "Slurm job(s) {jobs:?} with tag {tag} belong to no attempt"
        );
    }
    histories
}

/// A daemon that dies during a first submission never answered it: the client sees an
/// error, and may well submit again. So nothing is submitted later on that request's
/// behalf; a job its sbatch did create is found by its tag and supervised.
#[test]
fn every_failpoint_on_a_first_submission_leaves_at_most_the_job_sbatch_made() {
    for (point, jobs) in [
        ("after-intent", 0),
        ("before-sbatch", 0),
        ("after-sbatch", 1),
    ] {
        let (mut d, fake) = start("", &[("SLURM_SUPERVISOR_FAILPOINT", point)]);
        d.write_script("job.sh", "echo hi");
        let out = d.ctl_in(&["submit", "--", "job.sh"], &d.work_dir());
        assert!(
            !out.status.success(),
            "{point}: the daemon should have died mid-submit"
        );
        d.kill();
        d.extra_env.clear();
        d.spawn();
        // The restarted daemon settles the launch in its first cycle, before READY.
        let settled = if jobs == 0 {
            "so it is dropped"
        } else {
            "adopting it"
        };
        wait_until(
            "the interrupted launch to be settled",
            Duration::from_secs(20),
            || d.log().contains(settled),
        );
        assert_exactly_once(&d, &fake);
        assert_eq!(fake.jobs().len(), jobs, "{point}");
        assert_eq!(
            d.json(&["status", "--json"]).as_array().unwrap().len(),
            jobs
        );
    }
}

#[test]
fn every_failpoint_on_a_retry_leaves_exactly_one_job_per_attempt() {
    for point in ["after-intent", "before-sbatch", "after-sbatch"] {
        let (mut d, fake) = start("", &[]);
        d.write_script("job.sh", "echo hi");
        let job = d.submit(&["job.sh"]);
        // Restart with the failpoint armed; the retry's launch hits it.
        d.kill();
        d.extra_env = vec![("SLURM_SUPERVISOR_FAILPOINT".into(), point.into())];
        d.spawn();
        fake.ctl(&["finish", &job, "FAILED", "1:0", "Connection refused\n"]);
        // The failpoint kills the daemon during the retry's launch.
        d.wait_dead(Duration::from_secs(30));
        d.extra_env.clear();
        d.spawn();
        wait_until("the retry to be live", Duration::from_secs(30), || {
            d.status(&job)[0]["attempts"] == 2 && d.status(&job)[0]["state"] == "active"
        });
        let h = assert_exactly_once(&d, &fake);
        assert_eq!(
            h[0]["decisions"].as_array().unwrap().len(),
            1,
            "{point}: one decision for one ending: {:#}",
            h[0]
        );
        assert_eq!(fake.jobs().len(), 2, "{point}");
    }
}

#[test]
fn random_kills_never_duplicate_or_lose_work() {
    let rounds = 4;
    for round in 0..rounds {
        // The breaker is off: 3 chains x 4 endings could open it depending on the order
        // the endings come in, and this test is about exactly-once, not the breaker.
        let (mut d, fake) = start(
            "[retry.budgets]\ntransient = 3\n[breaker]\nthreshold = 0\n",
            &[],
        );
        d.write_script("job.sh", "echo hi");
        let jobs: Vec<String> = (0..3).map(|_| d.submit(&["job.sh"])).collect();
        // Fail every job Slurm starts, transiently, while the daemon is killed at random.
        let stop = Instant::now() + Duration::from_secs(14);
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15 ^ (round as u64 + 1);
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        while Instant::now() < stop {
            for (id, job) in fake.jobs() {
                if job["state"] == "PENDING" {
                    fake.ctl(&["finish", &id, "FAILED", "1:0", "Connection refused\n"]);
                }
            }
            std::thread::sleep(Duration::from_millis(200 + next() % 1300));
            d.kill();
            d.spawn();
        }
        // Calm: no more kills; let every chain run out its budget.
        wait_until(
            "every chain to run out of retries",
            Duration::from_secs(60),
            || {
                for (id, job) in fake.jobs() {
                    if job["state"] == "PENDING" {
                        fake.ctl(&["finish", &id, "FAILED", "1:0", "Connection refused\n"]);
                    }
                }
                d.json(&["status", "--json"])
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|c| c["state"] == "pending_failed")
            },
        );
        let histories = assert_exactly_once(&d, &fake);
        assert_eq!(histories.len(), jobs.len(), "no chain lost");
        for h in &histories {
            let attempts = h["attempts"].as_array().unwrap();
            let decisions = h["decisions"].as_array().unwrap();
            assert_eq!(attempts.len(), 4, "1 + 3 transient retries: {h:#}");
            // Exactly one decision per ending: 3 resubmits, then the spent budget.
            assert_eq!(decisions.len(), 4, "{h:#}");
            assert!(
                decisions[..3].iter().all(|x| x["action"] == "resubmit"),
                "{h:#}"
            );
            assert_eq!(decisions[3]["action"], "escalate");
        }
    }
}

#[test]
fn a_storm_of_node_failures_opens_the_breaker() {
    let (d, fake) = start(
        "[breaker]\nthreshold = 3\nwindow = \"10m\"\nmin_users = 1\n[quarantine]\nthreshold = 0\n",
        &[],
    );
    d.write_script("job.sh", "echo hi");
    let jobs: Vec<String> = (0..5).map(|_| d.submit(&["job.sh"])).collect();
    for j in &jobs {
        fake.ctl(&["finish", j, "NODE_FAIL", "0:0"]);
    }
    wait_until("all five judged", Duration::from_secs(30), || {
        jobs.iter()
            .all(|j| d.status(j)[0]["last_classification"] == "node_fail")
    });
    let mut paused = 0;
    let mut retried = 0;
    for j in &jobs {
        let h = d.history(j);
        let dec = &h["decisions"][0];
        match dec["action"].as_str() {
            Some("resubmit") => retried += 1,
            Some("escalate") => {
                assert_eq!(dec["reason_code"], "breaker_open", "{h:#}");
                assert_eq!(dec["class"], "R2");
                paused += 1;
            }
            other => panic!("unexpected {other:?}: {h:#}"),
        }
    }
    assert_eq!((retried, paused), (3, 2));
}

#[test]
fn a_node_that_keeps_failing_is_quarantined_from_other_retries() {
    let (d, fake) = start(
        "[quarantine]\nthreshold = 2\nwindow = \"1h\"\nduration = \"2h\"\n",
        &[],
    );
    d.write_script("job.sh", "echo hi");
    let a = d.submit(&["job.sh"]);
    let b = d.submit(&["job.sh"]);
    let c = d.submit(&["job.sh"]);
    fake.ctl(&["run", &a, "n1"]);
    fake.ctl(&["finish", &a, "NODE_FAIL", "0:0"]);
    fake.ctl(&["run", &b, "n1"]);
    fake.ctl(&["finish", &b, "NODE_FAIL", "0:0"]);
    wait_until("two node failures judged", Duration::from_secs(20), || {
        [&a, &b].iter().all(|j| d.status(j)[0]["attempts"] == 2)
    });
    // An unrelated preemption on n2: its retry stays off the quarantined n1.
    fake.ctl(&["run", &c, "n2"]);
    fake.ctl(&["finish", &c, "PREEMPTED", "0:0"]);
    wait_until("the preempted job's retry", Duration::from_secs(20), || {
        d.status(&c)[0]["attempts"] == 2
    });
    let h = d.history(&c);
    let retry = &h["decisions"][0];
    assert_eq!(retry["reason_code"], "retry", "{h:#}");
    assert_eq!(
        retry["inputs"]["context"]["quarantined"],
        serde_json::json!(["n1"]),
        "{h:#}"
    );
    let last: Vec<String> =
        serde_json::from_value(fake.sbatch_calls().last().unwrap()["argv"].clone()).unwrap();
    assert!(last.contains(&"--exclude=n1".to_string()), "{last:?}");
}

#[test]
fn hostile_arguments_are_carried_byte_exact() {
    let (d, fake) = start("", &[]);
    d.write_script("job.sh", "echo hi");
    let name = "a\"b'c $(touch /tmp/ssv-pwned) `id` ; rm -rf / #\nsecond line";
    let job = d.submit(&[
        &format!("--job-name={name}"),
        "job.sh",
        "--not-an-option",
        "$HOME",
        "tab\there",
    ]);
    let argv: Vec<String> = serde_json::from_value(fake.sbatch_calls()[0]["argv"].clone()).unwrap();
    assert!(argv.contains(&format!("--job-name={name}")), "{argv:?}");
    assert_eq!(
        &argv[argv.len() - 3..],
        ["--not-an-option", "$HOME", "tab\there"]
    );
    assert!(
        !std::path::Path::new("/tmp/ssv-pwned").exists(),
        "nothing was run by a shell"
    );
    assert_eq!(d.status(&job).len(), 1);
    // A non-UTF-8 argument is carried byte for byte, as sbatch itself would take it.
    let bad = std::ffi::OsStr::from_bytes(b"--job-name=\xff\xfe");
    let out = Command::new(CTL)
        .arg("--config")
        .arg(&d.config)
        .args(["submit", "--"])
        .arg(bad)
        .arg("job.sh")
        .arg(std::ffi::OsStr::from_bytes(b"arg-\x80"))
        .current_dir(d.work_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = fake.sbatch_calls();
    assert_eq!(calls.len(), 2);
    let hex: Vec<String> = serde_json::from_value(calls[1]["argv_hex"].clone()).unwrap();
    let hex_of = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    assert!(hex.contains(&hex_of(b"--job-name=\xff\xfe")), "{hex:?}");
    assert_eq!(hex.last().unwrap(), &hex_of(b"arg-\x80"));
    // It is supervised like any other.
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let pending = d.status(&job);
    assert_eq!(pending.len(), 1);
}

#[test]
fn a_corrupt_state_file_stops_the_daemon_and_is_left_as_it_was() {
    let (mut d, _fake) = start("", &[]);
    d.kill();
    let db = d.state_dir().join("supervisor.db");
    for f in ["supervisor.db-wal", "supervisor.db-shm"] {
        let _ = std::fs::remove_file(d.state_dir().join(f));
    }
    let garbage = b"this is not a database, it is a shopping list\n".repeat(100);
    std::fs::write(&db, &garbage).unwrap();
    let out = Command::new(DAEMON)
        .arg("--config")
        .arg(&d.config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a database"), "{err}");
    assert_eq!(
        std::fs::read(&db).unwrap(),
        garbage,
        "the file is left for a person to look at"
    );
}

#[test]
fn endless_or_hanging_output_from_slurm_is_cut_off_and_decides_nothing() {
    let (d, fake) = start("", &[]);
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["job.sh"]);
    // squeue breaks first: a cycle between the two must not judge the ending from a
    // good answer.
    fake.ctl(&["mode", "squeue", "huge"]);
    fake.ctl(&["finish", &job, "FAILED", "1:0", "Connection refused\n"]);
    wait_until("the cut-off", Duration::from_secs(30), || {
        d.log().contains("printed more than")
    });
    fake.ctl(&["mode", "squeue", "hang"]);
    wait_until("the timeout", Duration::from_secs(30), || {
        d.log().contains("did not finish within")
    });
    assert_eq!(
        d.status(&job)[0]["state"],
        "active",
        "nothing is decided from a broken answer"
    );
    fake.ctl(&["mode", "squeue", "ok"]);
    wait_until("recovery", Duration::from_secs(60), || {
        d.status(&job)[0]["last_classification"] == "transient"
    });
}

/// A small tmpfs mounted for one test (needs root, as the tests do), unmounted on drop.
struct Mount(std::path::PathBuf);

impl Mount {
    fn tmpfs(at: &std::path::Path, size: &str) -> Mount {
        std::fs::create_dir_all(at).unwrap();
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "tmpfs",
                at.to_str().unwrap(),
            ],
        );
        Mount(at.to_path_buf())
    }

    fn remount(&self, mode: &str) {
        run(
            "mount",
            &["-o", &format!("remount,{mode}"), self.0.to_str().unwrap()],
        );
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Restarts the daemon with its state directory on a fresh 8 MiB tmpfs.
fn on_tmpfs(d: &mut Daemon) -> Mount {
    d.kill();
    let state = d.state_dir();
    let _ = std::fs::remove_dir_all(&state);
    let m = Mount::tmpfs(&state, "8m");
    d.spawn();
    m
}

/// Fills a filesystem to the last byte; returns the filler file.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    let f = dir.join("filler");
    let _ = Command::new("dd")
        .args(["if=/dev/zero", &format!("of={}", f.display()), "bs=64k"])
        .output();
    f
}

#[test]
fn a_full_disk_loses_nothing_and_recovery_resumes_when_space_returns() {
    let (mut d, fake) = start("", &[]);
    let _m = on_tmpfs(&mut d);
    let state = d.state_dir();
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["job.sh"]);
    let before = d.history(&job);
    let filler = fill(&state);
    fake.ctl(&["finish", &job, "FAILED", "1:0", "Connection refused\n"]);
    wait_until("the write to fail", Duration::from_secs(20), || {
        d.log().contains("poll cycle failed")
    });
    // Still up and answering; nothing half-recorded.
    assert_eq!(d.status(&job)[0]["state"], "active");
    assert_eq!(d.history(&job)["attempts"], before["attempts"]);
    std::fs::remove_file(filler).unwrap();
    wait_until("the ending to be recorded", Duration::from_secs(30), || {
        d.status(&job)[0]["last_classification"] == "transient"
    });
    let h = d.history(&job);
    assert_eq!(h["decisions"].as_array().unwrap().len(), 1, "{h:#}");
}

#[test]
fn a_read_only_state_directory_stops_the_daemon_clearly_and_keeps_the_data() {
    let (mut d, _fake) = start("", &[]);
    let m = on_tmpfs(&mut d);
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["job.sh"]);
    assert!(d.stop().success());
    m.remount("ro");
    let out = Command::new(DAEMON)
        .arg("--config")
        .arg(&d.config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Read-only file system") || err.contains("readonly"),
        "{err}"
    );
    m.remount("rw");
    d.spawn();
    assert_eq!(d.status(&job).len(), 1, "the chain is still there");
}
