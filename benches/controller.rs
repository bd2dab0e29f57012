//! What the daemon's poll costs the real controller (issue 26), counted by slurmctld
//! itself with `sdiag`.
//!
//! Run with the dev cluster up (`scripts/dev-cluster up [--slurm 24.11]`):
//! `SSV_TEST_SLURM=22.05 cargo bench --bench controller` (or `24.11`). What it does:
//! 1. submits `CONTROLLER_JOBS` (default 6,000) held jobs as alice, so the controller holds
//!    more than the 5,000 at which the poll's listing used to be cut in two;
//! 2. builds a store of as many chains, each with one of those jobs as its live attempt;
//! 3. starts the release `slurm-supervisord` on it against the real Slurm (poll interval
//!    `CONTROLLER_POLL`, default 5s) with its metrics served, and waits for two poll
//!    cycles (the first one sees every job's owner);
//! 4. `sdiag -r`, then waits for `CONTROLLER_CYCLES` (default 6) more cycles, and prints
//!    the RPCs slurmctld served in them by message type, per cycle, with their controller
//!    time, beside the daemon's CPU time a cycle (its own, and its squeue's) and memory;
//! 5. cancels the jobs.
//!
//! Nothing else should use the cluster meanwhile (other RPCs would be counted too; the
//! nodes' own messages are listed apart). Run without `--bench` (`cargo test --benches`),
//! it only says how to run it: it needs a real Slurm and a few minutes.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "controller benchmark: needs a real Slurm; run `SSV_TEST_SLURM=22.05 cargo bench --bench controller`"
        );
        return;
    }
    let version = std::env::var("SSV_TEST_SLURM").unwrap_or_else(|_| "22.05".into());
    let bin_dir = PathBuf::from(match version.as_str() {
        "24.11" => "/opt/slurm-24.11/bin",
        "22.05" => "/usr/bin",
        v => panic!("SSV_TEST_SLURM={v:?}: known versions are 22.05 and 24.11"),
    });
    let jobs = env_or("CONTROLLER_JOBS", 6000);
    let cycles = env_or("CONTROLLER_CYCLES", 6);
    let poll = std::env::var("CONTROLLER_POLL").unwrap_or_else(|_| "5s".into());
    let Some((daemon, _ctl)) = common::binaries() else {
        panic!("slurm-supervisord not found next to the bench: cargo build --release --bins");
    };
    println!("controller benchmark: Slurm {version}, {jobs} held jobs, poll every {poll}");

    let t = Instant::now();
    let held = Held::submit(&bin_dir, jobs);
    println!(
        "  {} jobs submitted held in {}; the controller holds {} jobs",
        held.ids.len(),
        common::secs(t.elapsed()),
        count_jobs(&bin_dir)
    );

    // The store on tmpfs when there is one (`CONTROLLER_DIR` to choose): the controller's
    // cost is measured here, not the disk's.
    let dir = tempfile::Builder::new()
        .prefix("ssv-controller")
        .tempdir_in(common::build_dir("CONTROLLER_DIR"))
        .unwrap();
    let state_dir = dir.path().join("state");
    std::fs::create_dir_all(&state_dir).unwrap();
    build_store(&state_dir.join("supervisor.db"), &held.ids, held.uid);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {:?}\npoll_interval = {poll:?}\n\n[slurm]\nbin_dir = {:?}\n\n\
             [metrics]\nlisten = \"127.0.0.1:{port}\"\n",
            state_dir.display().to_string(),
            bin_dir.display().to_string(),
        ),
    )
    .unwrap();
    let log = dir.path().join("daemon.log");
    let mut d = Running(
        Command::new(&daemon)
            .arg("--config")
            .arg(&config)
            .env("SLURM_SUPERVISOR_LOG", "info")
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start slurm-supervisord"),
    );
    let limit = Duration::from_secs(600);
    let cycles_done = || metric(port, "slurm_supervisor_poll_cycle_duration_seconds_count");
    let squeues = || {
        metric(
            port,
            "slurm_supervisor_slurm_commands_total{command=\"squeue\"}",
        )
        .unwrap_or(0.0)
    };
    wait_for(&mut d, &log, limit, || cycles_done() >= Some(2.0));
    sdiag(&bin_dir, &["-r"]);
    let start = cycles_done().unwrap();
    let squeue0 = squeues();
    let cpu0 = common::cpu(d.0.id());
    wait_for(&mut d, &log, limit, || {
        cycles_done() >= Some(start + cycles as f64)
    });
    let stats = rpc_stats(&sdiag(&bin_dir, &[]));
    let cpu1 = common::cpu(d.0.id());
    let done = cycles_done().unwrap() - start;
    let (rss, hwm) = common::memory(d.0.id());
    let squeue1 = squeues();
    let failed = metric(
        port,
        "slurm_supervisor_slurm_command_failures_total{command=\"squeue\"}",
    );
    drop(d);

    println!(
        "  {done} cycles measured, {:.2} squeue calls a cycle; RPCs slurmctld served meanwhile:",
        (squeue1 - squeue0) / done
    );
    println!(
        "    {:<40} {:>8} {:>10} {:>14}",
        "message type", "count", "per cycle", "time a cycle"
    );
    for (name, (count, total_us)) in &stats {
        println!(
            "    {name:<40} {count:>8} {:>10.2} {:>11.2} ms",
            *count as f64 / done,
            *total_us as f64 / done / 1000.0
        );
    }
    println!(
        "  daemon CPU a cycle: {:.1} ms its own, {:.1} ms its commands' (squeue); VmRSS {:.1} MiB, VmHWM {:.1} MiB; failed squeues {}",
        (cpu1.0 - cpu0.0).as_secs_f64() * 1000.0 / done,
        (cpu1.1 - cpu0.1).as_secs_f64() * 1000.0 / done,
        rss as f64 / (1 << 20) as f64,
        hwm as f64 / (1 << 20) as f64,
        failed.unwrap_or(0.0)
    );
}

/// The held jobs of the bench, cancelled when it ends however it ends.
struct Held {
    bin_dir: PathBuf,
    uid: u32,
    ids: Vec<String>,
}

impl Held {
    /// `n` held jobs, submitted as alice (the dev cluster's user).
    fn submit(bin_dir: &Path, n: usize) -> Held {
        let out = Command::new("id").args(["-u", "alice"]).output().unwrap();
        let uid: u32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the dev cluster's user alice");
        let mut held = Held {
            bin_dir: bin_dir.to_path_buf(),
            uid,
            ids: Vec::new(),
        };
        let script = format!(
            "cd /tmp && for i in $(seq {n}); do {}/sbatch --parsable --hold --wrap=true \
             --output=/dev/null --job-name=ssv-controller-bench || exit 1; done",
            bin_dir.display()
        );
        let mut child = Command::new("runuser")
            .args(["-u", "alice", "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut text = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        held.ids = text.lines().map(|l| l.trim().to_string()).collect();
        assert!(child.wait().unwrap().success(), "sbatch failed");
        assert_eq!(held.ids.len(), n);
        held
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = Command::new(self.bin_dir.join("scancel"))
            .args(["--user=alice", "--name=ssv-controller-bench"])
            .status();
    }
}

/// The daemon, killed when the bench ends however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn build_store(path: &Path, ids: &[String], uid: u32) {
    let mut s = slurm_supervisor::store::Store::open(path).expect("create the store");
    let now = slurm_supervisor::plumbing::clock::now();
    for (i, job) in ids.iter().enumerate() {
        let mut sub = common::submission(i);
        sub.owner_uid = uid;
        let l = s
            .create_submission(&sub, now, |tag| {
                vec![format!("--comment={tag}"), "train.sh".into()]
            })
            .unwrap();
        s.launch_submitted(l.id, job, now).unwrap();
    }
}

fn count_jobs(bin_dir: &Path) -> usize {
    let out = Command::new(bin_dir.join("squeue"))
        .args(["--noheader", "--all", "--format=%i"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

fn sdiag(bin_dir: &Path, args: &[&str]) -> String {
    let out = Command::new(bin_dir.join("sdiag"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "sdiag {args:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// sdiag's "by message type" lines: `REQUEST_JOB_INFO ( 2003) count:6 ave_time:2938
/// total_time:17630`, as (count, total microseconds) by name.
fn rpc_stats(sdiag: &str) -> BTreeMap<String, (u64, u64)> {
    let mut out = BTreeMap::new();
    let section = sdiag
        .split("by message type")
        .nth(1)
        .and_then(|s| s.split("by user").next())
        .unwrap_or("");
    for line in section.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|v| v.parse::<u64>().ok())
        };
        if let (Some(count), Some(total)) = (field("count:"), field("total_time:")) {
            out.insert(name.to_string(), (count, total));
        }
    }
    out
}

/// One sample of the daemon's metrics, by its whole name with labels.
fn metric(port: u16, name: &str) -> Option<f64> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

fn wait_for(d: &mut Running, log: &Path, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        if t.elapsed() > limit || d.0.try_wait().unwrap().is_some() {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            panic!(
                "no poll cycle within {limit:?}; the end of its log:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        // Each look is a scrape, which the daemon pays for: once a second.
        std::thread::sleep(Duration::from_secs(1));
    }
}
