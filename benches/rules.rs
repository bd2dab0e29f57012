//! Rules that learn on a big store (issue 35, docs/rules.md): what `supervisorctl rules`
//! and a metrics scrape (which counts the proposals waiting and the rules not working)
//! cost when the store holds many chains and thousands of resolved endings.
//!
//! Run with `cargo bench --bench rules`. What it does:
//! 1. builds a store of `RULES_CHAINS` chains (default 100,000) through the store's public
//!    API, in `/dev/shm` when there is one (as benches/startup.rs does, then copied to
//!    `RULES_BENCH_DIR`, default the system temp dir): most completed; `RULES_RESOLVED`
//!    (default 3,000) whose first attempt FAILED with one of `RULES_SIGNATURES` (default
//!    300) failure signatures, escalated, and resolved by a person (`user:alice`), 9 in 10
//!    with a retry and 1 in 10 with a fail, each retry's attempt completing (or, for 1
//!    signature in 5, half of them failing); 5% failed by a config rule (`permanent`) and
//!    0.2% waiting in pending_failed, each with one of those signatures too; 1% retried by
//!    a rule (`transient`, an infrastructure failure) whose retry completed;
//! 2. measures, in this process on the store's file, (a) the store's reads the proposals
//!    are made from (`signature_resolutions`, and `signature_endings` for each signature),
//!    `learn`'s grouping and proposing, and `rule_retries`; (b) a metrics scrape
//!    (`metrics::Scraper`, as `[metrics] listen` serves it), the first and later ones
//!    (with nothing changed, and each after one more resolution written), and the rule
//!    counts within it alone (`metrics::RuleFacts`, which a scraper keeps);
//! 3. measures (c) end to end: the real `slurm-supervisord` on that store with Slurm
//!    commands that answer nothing, and `supervisorctl rules --json` (every chain's
//!    proposals: the daemon runs as this user, who sees every chain).
//!
//! The binaries are found as benches/startup.rs finds them (`SLURM_SUPERVISORD`,
//! `SUPERVISORCTL` override the paths); (c) is skipped, with a message, without them.

mod common;

use serde_json::json;
use slurm_supervisor::config::Config;
use slurm_supervisor::domain::classify::Verdict;
use slurm_supervisor::domain::learn;
use slurm_supervisor::domain::model::{
    Action, ChainState, Classification, RecoveryClass, Resolution, ResolveAction, RetryPlan,
};
use slurm_supervisor::domain::policy::{Inputs, Judged, Reason};
use slurm_supervisor::metrics::RuleFacts;
use slurm_supervisor::store::{
    AttemptChange, AttemptEnd, ChainUpdate, Record, SignatureResolution, Store, Transition,
};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const REPEATS: usize = 5;

fn env_or(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and a smoke run
    // with a small store is enough there.
    let bench = std::env::args().any(|a| a == "--bench");
    let chains = env_or("RULES_CHAINS", if bench { 100_000 } else { 2_000 });
    let resolved = env_or("RULES_RESOLVED", if bench { 3_000 } else { 200 }).min(chains / 4);
    let signatures = env_or("RULES_SIGNATURES", if bench { 300 } else { 20 }).max(1);
    let build_root = common::build_dir("RULES_BUILD_DIR");
    let build = tempfile::Builder::new()
        .prefix("ssv-bench-build")
        .tempdir_in(&build_root)
        .expect("temp dir for the build");
    let measure_root = std::env::var_os("RULES_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let measure = tempfile::Builder::new()
        .prefix("ssv-bench")
        .tempdir_in(&measure_root)
        .expect("temp dir for the measurements");

    println!(
        "rules benchmark: {chains} chains, {resolved} resolved endings over {signatures} signatures"
    );
    let built = build.path().join("supervisor.db");
    let t = Instant::now();
    let counts = build_store(&built, chains, resolved, signatures);
    println!(
        "  store built in {} under {}: {counts}",
        common::secs(t.elapsed()),
        build_root.display()
    );
    let state_dir = measure.path().join("state");
    std::fs::create_dir_all(&state_dir).unwrap();
    std::fs::set_permissions(&state_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let db = state_dir.join("supervisor.db");
    std::fs::copy(&built, &db).expect("copy the store");
    drop(build);
    println!(
        "  store file: {} ({:.1} MiB)",
        db.display(),
        std::fs::metadata(&db).unwrap().len() as f64 / (1 << 20) as f64
    );

    let config = Config::parse(
        &format!("state_dir = {:?}\n{RULES}", state_dir.display().to_string()),
        None,
    )
    .unwrap();
    let thresholds = learn::Thresholds::from(&config.learn);

    // (a) The parts, each on its own, on a read-only connection as the reads use.
    let store = Store::open_reader(&db).unwrap();
    let mut proposals = 0;
    let (mut read, mut grouped, mut endings, mut retries) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut sizes = (0, 0, 0);
    for _ in 0..REPEATS {
        let t = Instant::now();
        let rows = store.signature_resolutions(None).unwrap();
        read.push(t.elapsed());
        let t = Instant::now();
        let histories = learn::histories(rows.iter().map(SignatureResolution::facts));
        proposals = histories
            .iter()
            .filter_map(|h| learn::propose(h, thresholds))
            .count();
        grouped.push(t.elapsed());
        let t = Instant::now();
        let mut n = 0;
        for h in &histories {
            n += store.signature_endings(&h.signature, None).unwrap();
        }
        endings.push(t.elapsed());
        let t = Instant::now();
        let r = store.rule_retries(None).unwrap();
        retries.push(t.elapsed());
        sizes = (rows.len(), n, r.len());
    }
    report(
        &format!("(a) signature_resolutions ({} rows)", sizes.0),
        &read,
    );
    report(
        &format!("(a) learn::histories + propose ({proposals} proposals)"),
        &grouped,
    );
    report(
        &format!(
            "(a) signature_endings of every signature ({} endings)",
            sizes.1
        ),
        &endings,
    );
    report(&format!("(a) rule_retries ({} retries)", sizes.2), &retries);
    drop(store);

    // (b) A metrics scrape: the first reads every decision record once, later ones only
    // those written since; every one counts the proposals and the rules not working.
    let scraper = slurm_supervisor::metrics::Scraper::new(&config);
    let t = Instant::now();
    let text = scraper.scrape().expect("scrape");
    report("(b) first metrics scrape", &[t.elapsed()]);
    let mut later = Vec::new();
    for _ in 0..REPEATS {
        let t = Instant::now();
        scraper.scrape().expect("scrape");
        later.push(t.elapsed());
    }
    report(
        &format!("(b) later metrics scrapes ({} bytes)", text.len()),
        &later,
    );
    // The rule counts alone, as a scrape makes them (`RuleFacts`, kept between scrapes):
    // the first reads every fact, later ones what changed.
    let reader = Store::open_reader(&db).unwrap();
    let mut facts = RuleFacts::default();
    let count = |facts: &mut RuleFacts| {
        let upto = reader.last_decision_id().unwrap();
        let t = Instant::now();
        reader
            .read_snapshot(|s| facts.counts(s, &config, upto))
            .unwrap();
        t.elapsed()
    };
    let whole: Vec<Duration> = (0..REPEATS)
        .map(|_| count(&mut RuleFacts::default()))
        .collect();
    report(
        "(b) the rule counts read whole (what every scrape did before they were kept)",
        &whole,
    );
    report("(b) the rule counts, first", &[count(&mut facts)]);
    let unchanged: Vec<Duration> = (0..REPEATS).map(|_| count(&mut facts)).collect();
    report("(b) the rule counts, nothing changed", &unchanged);
    // Each after a person resolved one more ending (a new resolution, and a retry
    // running): the new records are read and the proposals counted anew.
    let mut writer = Store::open(&db).unwrap();
    let (mut changed, mut counts_changed) = (Vec::new(), Vec::new());
    for k in 0..REPEATS {
        resolve_one_more(&mut writer, chains + k, k % signatures);
        let t = Instant::now();
        scraper.scrape().expect("scrape");
        changed.push(t.elapsed());
        counts_changed.push(count(&mut facts));
    }
    drop(writer);
    report(
        "(b) later metrics scrapes, each after one more resolution",
        &changed,
    );
    report(
        "(b) the rule counts, each after one more resolution",
        &counts_changed,
    );
    let served = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("slurm_supervisor_rule_proposals "))
            .unwrap_or("none")
            .to_string()
    };
    println!(
        "  the scrape's rule_proposals: {} (first), {} (last)",
        served(&text),
        served(&scraper.scrape().expect("scrape"))
    );

    match common::binaries() {
        Some((daemon, ctl)) => end_to_end(measure.path(), &state_dir, &daemon, &ctl),
        None => println!(
            "  (c) skipped: slurm-supervisord / supervisorctl not found next to the bench; \
             run `cargo build --release --bins` or set SLURM_SUPERVISORD and SUPERVISORCTL"
        ),
    }
}

/// The config's rules: the one that fails the 5% (`permanent`), and the one that retries
/// the 1% (`transient`).
const RULES: &str = "[[rules]]\nname = \"bad-input\"\nkind = \"permanent\"\nstderr = \"ValueError\"\n\
                     [[rules]]\nname = \"flaky-fs\"\nkind = \"transient\"\nstderr = \"Stale file handle\"\n";

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

/// Signature `k` of `signatures`: its id (12 hex digits, as `signature::Signature`'s) and
/// masked text.
fn signature(k: usize) -> (String, String) {
    (
        format!("{:012x}", 0x5160_0000_0000_u64 + k as u64 * 7919),
        format!(
            "Traceback (most recent call last):\n  File \"<dir>/train.py\", line <n>, in <module>\n\
             RuntimeError: shard <n> of dataset {k} has an unexpected checksum <hex>"
        ),
    )
}

fn end(state: &str, exit: &str, sig: Option<(String, String)>) -> AttemptEnd {
    let (signature, signature_text) = sig.unzip();
    AttemptEnd {
        slurm_state: state.into(),
        exit_code: exit.into(),
        nodes: Some("gpu017".into()),
        mem: Some("16G".into()),
        time_limit: Some("04:00:00".into()),
        signature,
        signature_text,
    }
}

fn observation(job: &str, state: &str) -> serde_json::Value {
    json!({
        "job_id": job,
        "rows": [{"job_id": job, "job_id_raw": job, "state": state, "cancelled_by": null,
                  "exit_code": {"code": 1, "signal": 0}, "node_list": "gpu017",
                  "max_rss_bytes": null, "req_mem_bytes": 17179869184u64,
                  "timelimit_secs": 14400, "elapsed_secs": 9876, "partition": "gpu",
                  "restarts": null, "comment": "ssv-bench"}],
        "stderr_tail": null,
        "requeued_by_slurm": false,
    })
}

/// A verdict as the judge stores it in a record's inputs, naming `rule` if one matched.
fn verdict(c: Classification, rule: Option<&str>) -> Verdict {
    serde_json::from_value(json!({
        "classification": c, "reason": "FAILED 1:0", "rule": rule, "state": "FAILED",
        "exit_code": "1:0", "nodes": "gpu017", "req_mem_bytes": null, "max_rss_bytes": null,
        "timelimit_secs": 14400, "elapsed_secs": 9876, "partition": "gpu",
    }))
    .expect("a verdict")
}

fn record(c: Classification, class: RecoveryClass, action: Action, inputs: Inputs) -> Record {
    Record {
        classification: c,
        class,
        action,
        reason: Reason::Resolution {
            given: "bench".into(),
        },
        inputs,
        resolves_latest: false,
        actor: "supervisor".into(),
        infra_failure: false,
        failed_nodes: None,
    }
}

fn update(state: ChainState, c: Classification, not_before: Option<i64>) -> ChainUpdate {
    ChainUpdate {
        last_classification: Some(c),
        not_before,
        ..ChainUpdate::to(state)
    }
}

/// Records the ending of attempt `n` of `chain` with `record` and the chain's `update`.
#[allow(clippy::too_many_arguments)]
fn ending(
    s: &mut Store,
    chain: i64,
    n: u32,
    job: &str,
    end: AttemptEnd,
    from: ChainState,
    record: Option<Record>,
    update: ChainUpdate,
    now: i64,
) {
    let t = Transition {
        attempt: Some(AttemptChange::Ended(Judged {
            n,
            observation: observation(job, &end.slurm_state),
            end,
        })),
        ..Transition::of(from, update, record)
    };
    s.apply_one(chain, &t.finish(), now).unwrap();
}

/// Launches attempt 2 of `chain` (its retry) as job `job`.
fn relaunch(s: &mut Store, submission: i64, chain: i64, job: &str, now: i64) {
    let l = s
        .begin_relaunch(submission, &[chain], now, |tag| {
            vec![format!("--comment={tag}"), "train.sh".into()]
        })
        .unwrap();
    s.launch_submitted(l.id, job, now + 1).unwrap();
}

/// Chain `i`, one more: its first attempt fails with signature `k`, waits, and a person
/// retries it (its retry not yet launched).
fn resolve_one_more(s: &mut Store, i: usize, k: usize) {
    let now = slurm_supervisor::plumbing::clock::now();
    let l = s
        .create_submission(&common::submission(i), now, |tag| {
            vec![format!("--comment={tag}"), "train.sh".into()]
        })
        .unwrap();
    let job = (1_000_000 + 2 * i).to_string();
    s.launch_submitted(l.id, &job, now).unwrap();
    escalate_and_resolve(s, l.submission_id, &job, signature(k), k, now);
}

/// Ends attempt 1 of `chain` (job `job`) FAILED with `sig`, escalated, and records a
/// person's resolution (the `k`-th: 1 in 10 a fail, else a retry); true for a retry.
fn escalate_and_resolve(
    s: &mut Store,
    chain: i64,
    job: &str,
    sig: (String, String),
    k: usize,
    t: i64,
) -> bool {
    ending(
        s,
        chain,
        1,
        job,
        end("FAILED", "1:0", Some(sig)),
        ChainState::Active,
        Some(record(
            Classification::Ambiguous,
            RecoveryClass::R2,
            Action::Escalate,
            Inputs::Requeue {
                verdict: verdict(Classification::Ambiguous, None),
            },
        )),
        update(ChainState::PendingFailed, Classification::Ambiguous, None),
        t + 600,
    );
    let retry = k % 10 != 9;
    let resolution = Resolution {
        id: format!("c{chain}"),
        action: if retry {
            ResolveAction::Retry
        } else {
            ResolveAction::Fail
        },
        mem: None,
        time: None,
        partition: None,
        exclude: Vec::new(),
        reason: "the shard was downloaded again".into(),
        confidence: None,
        dry_run: false,
    };
    let r = Record {
        resolves_latest: true,
        actor: "user:alice".into(),
        ..record(
            Classification::Ambiguous,
            RecoveryClass::R2,
            if retry {
                Action::Resubmit
            } else {
                Action::Fail
            },
            Inputs::Resolution {
                resolution,
                plan: RetryPlan::default(),
                dependents: None,
            },
        )
    };
    let to = if retry {
        update(ChainState::Ready, Classification::Ambiguous, Some(t + 700))
    } else {
        update(ChainState::Failed, Classification::Ambiguous, None)
    };
    s.apply_one(
        chain,
        &Transition::of(ChainState::PendingFailed, to, Some(r)).finish(),
        t + 650,
    )
    .unwrap();
    retry
}

/// Builds the store; returns a summary of what is in it.
fn build_store(path: &Path, chains: usize, resolved: usize, signatures: usize) -> String {
    let mut s = Store::open(path).expect("create the store");
    let now = slurm_supervisor::plumbing::clock::now();
    let start = now - chains as i64 * 30;
    // Every `every`-th chain is a resolved one.
    let every = (chains / resolved.max(1)).max(1);
    let (mut n_resolved, mut n_failed, mut n_pending, mut n_rule_retries, mut n_completed) =
        (0, 0, 0, 0, 0);
    for i in 0..chains {
        let t = start + i as i64 * 30;
        let l = s
            .create_submission(&common::submission(i), t, |tag| {
                vec![format!("--comment={tag}"), "train.sh".into()]
            })
            .unwrap();
        let chain = l.submission_id;
        let job = (1_000_000 + 2 * i).to_string();
        let retry_job = (1_000_000 + 2 * i + 1).to_string();
        s.launch_submitted(l.id, &job, t + 1).unwrap();
        let sig = signature(i % signatures);
        if i.is_multiple_of(every) && n_resolved < resolved {
            // Escalated, then resolved by a person: mostly a retry, whose attempt
            // completes; for 1 signature in 5, half the retries fail.
            let k = n_resolved;
            n_resolved += 1;
            let retry = escalate_and_resolve(&mut s, chain, &job, signature(k % signatures), k, t);
            if retry {
                relaunch(&mut s, l.submission_id, chain, &retry_job, t + 700);
                let works =
                    !((k % signatures).is_multiple_of(5) && (k / signatures).is_multiple_of(2));
                if works {
                    ending(
                        &mut s,
                        chain,
                        2,
                        &retry_job,
                        end("COMPLETED", "0:0", None),
                        ChainState::Active,
                        None,
                        update(ChainState::Completed, Classification::Completed, None),
                        t + 1200,
                    );
                } else {
                    ending(
                        &mut s,
                        chain,
                        2,
                        &retry_job,
                        end("FAILED", "1:0", Some(signature(k % signatures))),
                        ChainState::Active,
                        Some(record(
                            Classification::Ambiguous,
                            RecoveryClass::R2,
                            Action::Escalate,
                            Inputs::Requeue {
                                verdict: verdict(Classification::Ambiguous, None),
                            },
                        )),
                        update(ChainState::PendingFailed, Classification::Ambiguous, None),
                        t + 1200,
                    );
                }
            }
            continue;
        }
        match i % 500 {
            // Waits for a person, with a signature.
            2 => {
                n_pending += 1;
                ending(
                    &mut s,
                    chain,
                    1,
                    &job,
                    end("FAILED", "1:0", Some(sig)),
                    ChainState::Active,
                    Some(record(
                        Classification::Ambiguous,
                        RecoveryClass::R2,
                        Action::Escalate,
                        Inputs::Requeue {
                            verdict: verdict(Classification::Ambiguous, None),
                        },
                    )),
                    update(ChainState::PendingFailed, Classification::Ambiguous, None),
                    t + 600,
                );
                continue;
            }
            // Retried by a rule (an infrastructure failure), and the retry completes.
            i if i % 100 == 7 => {
                n_rule_retries += 1;
                ending(
                    &mut s,
                    chain,
                    1,
                    &job,
                    end("FAILED", "1:0", Some(sig)),
                    ChainState::Active,
                    Some(Record {
                        infra_failure: true,
                        ..record(
                            Classification::Transient,
                            RecoveryClass::R1,
                            Action::Resubmit,
                            Inputs::Requeue {
                                verdict: verdict(Classification::Transient, Some("flaky-fs")),
                            },
                        )
                    }),
                    update(ChainState::Ready, Classification::Transient, Some(t + 610)),
                    t + 600,
                );
                relaunch(&mut s, l.submission_id, chain, &retry_job, t + 610);
                ending(
                    &mut s,
                    chain,
                    2,
                    &retry_job,
                    end("COMPLETED", "0:0", None),
                    ChainState::Active,
                    None,
                    update(ChainState::Completed, Classification::Completed, None),
                    t + 1200,
                );
                continue;
            }
            _ => {}
        }
        if i % 20 == 4 {
            // Failed by the config's rule, with a signature.
            n_failed += 1;
            ending(
                &mut s,
                chain,
                1,
                &job,
                end("FAILED", "1:0", Some(sig)),
                ChainState::Active,
                Some(record(
                    Classification::Permanent,
                    RecoveryClass::R3,
                    Action::Fail,
                    Inputs::Requeue {
                        verdict: verdict(Classification::Permanent, Some("bad-input")),
                    },
                )),
                update(ChainState::Failed, Classification::Permanent, None),
                t + 1200,
            );
        } else {
            n_completed += 1;
            ending(
                &mut s,
                chain,
                1,
                &job,
                end("COMPLETED", "0:0", None),
                ChainState::Active,
                None,
                update(ChainState::Completed, Classification::Completed, None),
                t + 1200,
            );
        }
    }
    format!(
        "{n_completed} completed, {n_resolved} resolved by a person, {n_failed} failed by a rule, \
         {n_pending} pending_failed, {n_rule_retries} retried by a rule"
    )
}

/// Slurm commands that answer at once, successfully, with nothing.
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

/// (c): `supervisorctl rules --json` against the real daemon on the store.
fn end_to_end(root: &Path, state_dir: &Path, daemon: &Path, ctl: &Path) {
    let bin = fake_slurm(root);
    let config = root.join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {:?}\npoll_interval = \"30s\"\n\n[slurm]\nbin_dir = {:?}\n{RULES}",
            state_dir.display().to_string(),
            bin.display().to_string()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(ctl)
            .arg("--config")
            .arg(&config)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    let mut child = Command::new(daemon)
        .arg("--config")
        .arg(&config)
        .env("SLURM_SUPERVISOR_LOG", "warn")
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start slurm-supervisord");
    let deadline = Instant::now() + Duration::from_secs(120);
    while run(&["status", "--json", "c1"]).is_none() {
        assert!(
            Instant::now() < deadline && child.try_wait().unwrap().is_none(),
            "the daemon did not answer within 120 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (mut json_times, mut text_times) = (Vec::new(), Vec::new());
    let mut size = (0, 0);
    for _ in 0..REPEATS {
        let t = Instant::now();
        let out = run(&["rules", "--json"]).expect("rules --json answers");
        json_times.push(t.elapsed());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        size = (
            v["proposals"].as_array().map_or(0, Vec::len),
            out.stdout.len(),
        );
        let t = Instant::now();
        run(&["rules"]).expect("rules answers");
        text_times.push(t.elapsed());
    }
    report(
        &format!(
            "(c) `supervisorctl rules --json` ({} proposals, {} bytes)",
            size.0, size.1
        ),
        &json_times,
    );
    report("(c) `supervisorctl rules`", &text_times);
    // SIGTERM, as systemd stops it.
    // SAFETY: kill(2) with a pid we started and have not reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let _ = child.wait();
}
