//! Start-up cost with a big store (issue 3, "Restart is cheap"): a store with 100,000
//! chains must let the daemon reach READY within a couple of seconds.
//!
//! Run with `cargo bench --bench startup`. What it does:
//! 1. builds a store with `STARTUP_CHAINS` chains (default 100,000) through the store's
//!    public API (`create_submission`, `launch_submitted`, `record_ending`, ...): most
//!    completed, some failed, 1% active (a live attempt), 0.2% ready (a retry waiting for
//!    its backoff), 0.2% pending_failed, 2% with a second attempt. The build runs in
//!    `/dev/shm` when it exists, because the store syncs every commit and 300,000 commits
//!    on a disk would take many minutes; the finished file is then copied to the
//!    measuring directory (`STARTUP_BENCH_DIR`, default the system temp dir, on disk);
//! 2. measures (a) `Store::open` of that file, (b) the queries of the daemon's first cycle
//!    (`live_attempts`, `chains_in_state(Ready)`, `open_launches`), each a few times;
//! 3. measures (c) end to end: starts the real `slurm-supervisord` on that state directory
//!    with fake sbatch/squeue/sacct/sinfo/scancel scripts that answer at once with nothing,
//!    and times until its "ready" log line (READY=1 is sent at the same point) and until
//!    `supervisorctl status --json c1` answers; then (d) one `status --json` of all chains;
//! 4. measures (e), for comparison, what one more submission costs in that store.
//!
//! The binaries are the ones cargo builds next to this bench (cargo builds a package's
//! binaries for its benches: `target/release/slurm-supervisord` when this runs from
//! `target/release/deps/`). `SLURM_SUPERVISORD` and `SUPERVISORCTL` override the paths.
//! (c) and (d) are skipped, with a message, when the binaries cannot be found.

mod common;

use serde_json::json;
use slurm_supervisor::domain::model::{
    Action, ChainState, Classification, RecoveryClass, RetryPlan,
};
use slurm_supervisor::domain::policy::Judged;
use slurm_supervisor::domain::policy::{Inputs, Reason};
use slurm_supervisor::store::{AttemptChange, AttemptEnd, ChainUpdate, Record, Store, Transition};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const REPEATS: usize = 5;
const E2E_REPEATS: usize = 3;

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` (or `--all-targets`) does not,
    // and a quick smoke run with a small store is enough there.
    let bench = std::env::args().any(|a| a == "--bench");
    let chains: usize = std::env::var("STARTUP_CHAINS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench { 100_000 } else { 2_000 });
    let build_root = common::build_dir("STARTUP_BUILD_DIR");
    let build = tempfile::Builder::new()
        .prefix("ssv-bench-build")
        .tempdir_in(&build_root)
        .expect("temp dir for the build");
    let measure_root = std::env::var_os("STARTUP_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let measure = tempfile::Builder::new()
        .prefix("ssv-bench")
        .tempdir_in(&measure_root)
        .expect("temp dir for the measurements");

    println!("startup benchmark: {chains} chains");
    let built = build.path().join("supervisor.db");
    let t = Instant::now();
    let counts = build_store(&built, chains);
    let build_time = t.elapsed();
    println!(
        "  store built in {} under {} ({:.0} chains/s): {counts}",
        common::secs(build_time),
        build_root.display(),
        chains as f64 / build_time.as_secs_f64()
    );

    let state_dir = measure.path().join("state");
    std::fs::create_dir_all(&state_dir).unwrap();
    std::fs::set_permissions(&state_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let db = state_dir.join("supervisor.db");
    std::fs::copy(&built, &db).expect("copy the store");
    drop(build);
    let size = std::fs::metadata(&db).unwrap().len();
    println!(
        "  store file: {} ({:.1} MiB)",
        db.display(),
        size as f64 / (1 << 20) as f64
    );

    // (a) Store::open.
    let mut open = Vec::new();
    for _ in 0..REPEATS {
        let t = Instant::now();
        let s = Store::open(&db).expect("open");
        open.push(t.elapsed());
        drop(s);
    }
    report("(a) Store::open", &open);

    // (b) The store work of the first cycle.
    let store = Store::open(&db).unwrap();
    let mut cycle = Vec::new();
    let mut sizes = (0, 0, 0);
    for _ in 0..REPEATS {
        let t = Instant::now();
        let live = store.live_attempts().unwrap();
        let ready = store.chains_in_state(ChainState::Ready).unwrap();
        let open = store.open_launches().unwrap();
        cycle.push(t.elapsed());
        sizes = (live.len(), ready.len(), open.len());
    }
    drop(store);
    report(
        &format!(
            "(b) live_attempts ({}) + chains_in_state(Ready) ({}) + open_launches ({})",
            sizes.0, sizes.1, sizes.2
        ),
        &cycle,
    );

    // (f) A metrics scrape (`[metrics] listen`): the first reads every decision record
    // once, later ones only the records written since.
    let config = slurm_supervisor::config::Config::parse(
        &format!("state_dir = {:?}\n", state_dir.display().to_string()),
        None,
    )
    .unwrap();
    let scraper = slurm_supervisor::metrics::Scraper::new(&config);
    let t = Instant::now();
    let text = scraper.scrape().expect("scrape");
    report("(f) first metrics scrape", &[t.elapsed()]);
    let mut later = Vec::new();
    for _ in 0..REPEATS {
        let t = Instant::now();
        scraper.scrape().expect("scrape");
        later.push(t.elapsed());
    }
    report(
        &format!("(f) later metrics scrapes ({} bytes)", text.len()),
        &later,
    );

    // (c) and (d): the real daemon.
    match common::binaries() {
        Some((daemon, ctl)) => end_to_end(measure.path(), &state_dir, &daemon, &ctl),
        None => println!(
            "  (c) skipped: slurm-supervisord / supervisorctl not found next to the bench; \
             run `cargo build --release --bins` or set SLURM_SUPERVISORD and SUPERVISORCTL"
        ),
    }
    // (e) Not start-up, but what a big store costs every submission: recording one more
    // (create_submission, on disk with its fsync) and marking it submitted.
    let mut store = Store::open(&db).unwrap();
    let (mut create, mut submitted) = (Vec::new(), Vec::new());
    let now = slurm_supervisor::plumbing::clock::now();
    for k in 0..REPEATS {
        let t = Instant::now();
        let l = store
            .create_submission(&common::submission(chains + k), now, |tag| {
                vec![format!("--comment={tag}"), "train.sh".into()]
            })
            .unwrap();
        create.push(t.elapsed());
        let t = Instant::now();
        store
            .launch_submitted(l.id, &(5_000_000 + k).to_string(), now)
            .unwrap();
        submitted.push(t.elapsed());
    }
    report("(e) create_submission of one more chain", &create);
    report("(e) launch_submitted of it", &submitted);
}

fn report(what: &str, times: &[Duration]) {
    let mut t = times.to_vec();
    t.sort();
    println!(
        "  {what}: median {}, min {}, max {} ({} runs)",
        common::secs(t[t.len() / 2]),
        common::secs(t[0]),
        common::secs(t[t.len() - 1]),
        t.len()
    );
}

/// What sacct said about an ending, as the daemon stores it (the observation body).
fn observation(job: &str, state: &str) -> serde_json::Value {
    json!({
        "job_id": job,
        "rows": [
            {"job_id": job, "job_id_raw": job, "state": state, "cancelled_by": null,
             "exit_code": {"code": 0, "signal": 0}, "node_list": "gpu017",
             "max_rss_bytes": null, "req_mem_bytes": 17179869184u64, "timelimit_secs": 14400,
             "elapsed_secs": 9876, "partition": "gpu", "restarts": null, "comment": "ssv-bench"},
            {"job_id": format!("{job}.batch"), "job_id_raw": format!("{job}.batch"), "state": state,
             "cancelled_by": null, "exit_code": {"code": 0, "signal": 0}, "node_list": "gpu017",
             "max_rss_bytes": 9663676416u64, "req_mem_bytes": null, "timelimit_secs": null,
             "elapsed_secs": 9876, "partition": "", "restarts": null, "comment": ""}
        ],
        "stderr_tail": null,
        "requeued_by_slurm": false,
    })
}

fn end(state: &str, exit: &str) -> AttemptEnd {
    AttemptEnd {
        slurm_state: state.into(),
        exit_code: exit.into(),
        nodes: Some("gpu017".into()),
        mem: Some("16G".into()),
        time_limit: Some("04:00:00".into()),
        signature: None,
        signature_text: None,
    }
}

fn decision(
    classification: Classification,
    class: RecoveryClass,
    action: Action,
    reason: &str,
) -> Record {
    Record {
        classification,
        class,
        action,
        reason: Reason::Resolution {
            given: reason.into(),
        },
        inputs: Inputs::None {},
        resolves_latest: false,
        actor: "supervisor".into(),
        infra_failure: false,
        failed_nodes: None,
    }
}

/// A transition of an active chain.
fn tr(record: Option<Record>, update: ChainUpdate) -> Transition {
    Transition::of(ChainState::Active, update, record)
}

fn update(state: ChainState, c: Classification, not_before: Option<i64>) -> ChainUpdate {
    ChainUpdate {
        last_classification: Some(c),
        not_before,
        ..ChainUpdate::to(state)
    }
}

/// Records the ending of live attempt `n` with `t` (and what follows from it).
fn record_ending(
    s: &mut Store,
    chain: i64,
    n: u32,
    observation: &serde_json::Value,
    end: &AttemptEnd,
    t: &Transition,
    now: i64,
) -> Result<bool, slurm_supervisor::store::StoreError> {
    let t = Transition {
        attempt: Some(AttemptChange::Ended(Judged {
            n,
            end: end.clone(),
            observation: observation.clone(),
        })),
        ..t.clone()
    };
    s.apply_one(chain, &t.finish(), now)
}

/// Builds the store; returns a summary of what is in it.
fn build_store(path: &Path, chains: usize) -> String {
    let mut s = Store::open(path).expect("create the store");
    let now = slurm_supervisor::plumbing::clock::now();
    let start = now - chains as i64 * 30;
    let (mut active, mut ready, mut pending, mut retried, mut failed, mut completed) =
        (0, 0, 0, 0, 0, 0);
    for i in 0..chains {
        let t = start + i as i64 * 30;
        let l = s
            .create_submission(&common::submission(i), t, |tag| {
                vec![format!("--comment={tag}"), "train.sh".into()]
            })
            .unwrap();
        // One chain per submission, so the chain id is the submission id.
        let chain = l.submission_id;
        let job = (1_000_000 + 2 * i).to_string();
        s.launch_submitted(l.id, &job, t + 1).unwrap();
        if i % 10_000 == 0 {
            assert_eq!(s.resolve(&job).unwrap(), vec![chain]);
        }
        if i % 100 == 0 {
            active += 1;
            continue;
        }
        let obs_ok = observation(&job, "COMPLETED");
        match i % 500 {
            1 => {
                ready += 1;
                let d = decision(
                    Classification::NodeFail,
                    RecoveryClass::R1,
                    Action::Resubmit,
                    "node failure; resubmitting without gpu017",
                );
                record_ending(
                    &mut s,
                    chain,
                    1,
                    &observation(&job, "NODE_FAIL"),
                    &end("NODE_FAIL", "0:0"),
                    // The backoff runs out tomorrow: the first cycle must not launch it.
                    &tr(
                        Some(d),
                        update(
                            ChainState::Ready,
                            Classification::NodeFail,
                            Some(now + 86_400),
                        ),
                    ),
                    t + 600,
                )
                .unwrap();
                continue;
            }
            2 => {
                pending += 1;
                let d = decision(
                    Classification::Ambiguous,
                    RecoveryClass::R2,
                    Action::Escalate,
                    "FAILED 1:0 and no rule matches; waiting for an agent",
                );
                record_ending(
                    &mut s,
                    chain,
                    1,
                    &observation(&job, "FAILED"),
                    &end("FAILED", "1:0"),
                    &tr(
                        Some(d),
                        update(ChainState::PendingFailed, Classification::Ambiguous, None),
                    ),
                    t + 600,
                )
                .unwrap();
                continue;
            }
            _ => {}
        }
        let mut n = 1;
        let mut job = job;
        if i % 50 == 3 {
            retried += 1;
            let d = decision(
                Classification::Oom,
                RecoveryClass::R1,
                Action::Resubmit,
                "out of memory; resubmitting with 32G",
            );
            record_ending(
                &mut s,
                chain,
                1,
                &observation(&job, "OUT_OF_MEMORY"),
                &end("OUT_OF_MEMORY", "0:125"),
                &tr(
                    Some(d),
                    ChainUpdate {
                        plan: Some(RetryPlan {
                            mem_mb: Some(32_768),
                            ..RetryPlan::default()
                        }),
                        ..update(ChainState::Ready, Classification::Oom, Some(t + 610))
                    },
                ),
                t + 600,
            )
            .unwrap();
            let l2 = s
                .begin_relaunch(l.submission_id, &[chain], t + 610, |tag| {
                    vec![format!("--comment={tag}"), "--mem=32768M".into()]
                })
                .unwrap();
            job = (1_000_000 + 2 * i + 1).to_string();
            s.launch_submitted(l2.id, &job, t + 611).unwrap();
            n = 2;
        }
        if i % 20 == 4 {
            failed += 1;
            let d = decision(
                Classification::Permanent,
                RecoveryClass::R3,
                Action::Fail,
                "rule 'python error' says permanent",
            );
            record_ending(
                &mut s,
                chain,
                n,
                &observation(&job, "FAILED"),
                &end("FAILED", "1:0"),
                &tr(
                    Some(d),
                    update(ChainState::Failed, Classification::Permanent, None),
                ),
                t + 1200,
            )
            .unwrap();
        } else {
            completed += 1;
            record_ending(
                &mut s,
                chain,
                n,
                &obs_ok,
                &end("COMPLETED", "0:0"),
                &tr(
                    None,
                    update(ChainState::Completed, Classification::Completed, None),
                ),
                t + 1200,
            )
            .unwrap();
        }
    }
    format!(
        "{completed} completed, {failed} failed, {active} active, {ready} ready, \
         {pending} pending_failed; {retried} with a second attempt"
    )
}

/// Fake Slurm commands that answer at once, successfully, with nothing.
fn fake_slurm(root: &Path) -> PathBuf {
    let bin = root.join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["sbatch", "squeue", "sacct", "sinfo", "scancel", "scontrol"] {
        let p = bin.join(name);
        std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin
}

fn end_to_end(root: &Path, state_dir: &Path, daemon: &Path, ctl: &Path) {
    let bin = fake_slurm(root);
    let config = root.join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {:?}\npoll_interval = \"30s\"\n\n[slurm]\nbin_dir = {:?}\n",
            state_dir.display().to_string(),
            bin.display().to_string()
        ),
    )
    .unwrap();
    println!("  daemon: {}", daemon.display());

    let status = |args: &[&str]| {
        Command::new(ctl)
            .arg("--config")
            .arg(&config)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).is_ok())
    };

    let (mut ready_times, mut answer_times, mut all_times) = (Vec::new(), Vec::new(), Vec::new());
    let mut cold_answer_times = Vec::new();
    for run in 0..2 * E2E_REPEATS {
        // The second half starts with the store's pages dropped from the page cache, as
        // after a reboot (the binaries stay cached; only this file is evicted, so other
        // work on the machine is not disturbed).
        let cold = run >= E2E_REPEATS;
        if cold {
            evict_from_page_cache(state_dir);
        }
        let t0 = Instant::now();
        let mut child = Command::new(daemon)
            .arg("--config")
            .arg(&config)
            .env("SLURM_SUPERVISOR_LOG", "info")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("SLURM_SUPERVISOR_FAILPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start slurm-supervisord");
        // The "ready" line is logged right after READY=1 is sent.
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut log = Vec::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("slurm-supervisord ready") {
                    let _ = tx.send(t0.elapsed());
                }
                log.push(line);
            }
            log
        });
        let deadline = t0 + Duration::from_secs(120);
        let answered = loop {
            if let Some(out) = status(&["status", "--json", "c1"]) {
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(v[0]["id"], "c1", "{v}");
                break Some(t0.elapsed());
            }
            if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let Some(answered) = answered else {
            let _ = child.kill();
            let _ = child.wait();
            let log = reader.join().unwrap_or_default();
            panic!(
                "the daemon did not answer within 120 s; its log:\n{}",
                log.join("\n")
            );
        };
        let ready = rx.recv_timeout(Duration::from_secs(5)).unwrap_or(answered);
        if cold {
            cold_answer_times.push(answered);
        } else {
            answer_times.push(answered);
            ready_times.push(ready);
        }

        if !cold {
            let t = Instant::now();
            let all = status(&["status", "--json"]).expect("status --json answers");
            all_times.push(t.elapsed());
            let all: serde_json::Value = serde_json::from_slice(&all.stdout).unwrap();
            assert!(all.as_array().is_some_and(|a| !a.is_empty()), "{all}");
        }

        // SIGTERM, as systemd stops it.
        let _ = nix_kill(child.id());
        let _ = child.wait();
        let _ = reader.join();
    }
    report(
        "(c) process start to \"ready\" log line (READY=1)",
        &ready_times,
    );
    report(
        "(c) process start to first `status --json c1` answer",
        &answer_times,
    );
    report(
        "(c) the same, store file evicted from the page cache first",
        &cold_answer_times,
    );
    report("(d) `status --json` of every chain", &all_times);
}

/// Drops the cached pages of the files in `dir` (posix_fadvise DONTNEED after a sync).
fn evict_from_page_cache(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap().map_while(Result::ok) {
        let Ok(f) = std::fs::File::open(entry.path()) else {
            continue;
        };
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        let _ = f.sync_all();
        use std::os::fd::AsRawFd;
        // SAFETY: a plain advisory call on a file descriptor we own.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

fn nix_kill(pid: u32) -> std::io::Result<()> {
    // SAFETY: kill(2) with a pid we started and have not reaped.
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
