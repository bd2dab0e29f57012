//! Bad days (issue 10, "A bad day costs O(what changed)"): many jobs ending in one poll
//! cycle, and the big reads, measured on the real daemon.
//!
//! Run with `cargo bench --bench burst`. What it does:
//! 1. builds a store of `BURST_CHAINS` chains (default 100,000) through the store's public
//!    API, `BURST_LIVE` of them (default 10,000) active with a live attempt in Slurm and the
//!    rest completed, on `/dev/shm` when it can (the store syncs every commit); each
//!    session of the daemon below gets its own copy in the measuring directory
//!    (`BURST_BENCH_DIR`, default the system temp dir, on disk);
//! 2. starts the real `slurm-supervisord` (poll interval 1 s, backoff one day, a rule that
//!    makes exit code 1 permanent) against fake Slurm commands (`burst/fake_slurm.rs`: this
//!    very executable, called through symlinks), which answer from a job list the bench
//!    rewrites and log every call with the number of job ids it was asked about;
//! 3. session A, nothing ending: the daemon's RSS after a few cycles; `status --json` of
//!    every chain (time, the client's peak RSS from `wait4`, the daemon's RSS before and
//!    after); `status JOBID`; `submit` beside a direct call of the fake sbatch;
//! 4. session B: `BURST_FAILURES` (default a tenth of the live jobs) end FAILED 1:0 in one
//!    cycle while the rest keep running; then `BURST_NOPART` (default 100) end TIMEOUT in a
//!    partition sinfo does not list;
//! 5. session C: every live job ends OUT_OF_MEMORY in one cycle.
//!
//! For each burst the job list is swapped right after a cycle has ended, so one cycle sees
//! all of it. The bench then polls the store (read-only) until every chain is decided and
//! reports the time from the swap and from the first Slurm command of the cycle that saw it,
//! the daemon's CPU time over that span, the Slurm commands in it by kind, and the latency
//! of `supervisorctl status c1` and of a bare `ping` on the socket, asked in a loop
//! throughout. A table of the figures beside the targets ends the output.
//!
//! `BURST_SESSIONS` (default `abc`) picks the sessions to run (`a` alone measures the
//! reads and the submit in under a minute; `d` counts the Slurm commands a cycle with one
//! daemon and, in cluster mode, with a standby beside it); `BURST_SUBMITS` (default 20) is
//! how many submits (6) times.
//!
//! `BURST_STORE=mariadb` runs every daemon in cluster mode (docs/cluster.md) on a private
//! MariaDB server (`tests/mariadb/mod.rs`): the store is built as a replica of a journal
//! on it, and each session gets a copy of that database; the bench reads the replica.
//! `BURST_STANDBY=1` adds a standby daemon on the same database and fake Slurm through
//! the bursts of sessions B and C (docs/benchmarks.md, "Cluster mode on MariaDB").
//!
//! The binaries are the ones cargo builds next to this bench; `SLURM_SUPERVISORD` and
//! `SUPERVISORCTL` override the paths. Run without `--bench` (`cargo test --benches`), it
//! does the same with 2,000 chains, 200 live, in a few seconds.

mod common;
#[path = "burst/fake_slurm.rs"]
mod fake_slurm;
#[path = "../tests/mariadb/mod.rs"]
mod mariadb;

use fake_slurm::Call;
use slurm_supervisor::domain::model::{ChainState, Classification};
use slurm_supervisor::domain::policy::Judged;
use slurm_supervisor::store::cluster::{
    read_password_file, Acquisition, ClusterDb, EpochCell, SharedJournal, StoreUrl,
};
use slurm_supervisor::store::{
    AttemptChange, AttemptEnd, ChainUpdate, Store, Transition, SUBMIT_REQUESTS_KEPT,
};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The sizes of one run; each can be set from the environment.
struct Sizes {
    chains: usize,
    live: usize,
    failures: usize,
    nopart: usize,
    status_all: usize,
    status_id: usize,
    submits: usize,
    /// How long a burst may take before the bench gives up.
    limit: Duration,
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One row of the final table.
struct Row {
    what: String,
    measured: String,
    target: String,
}

fn main() {
    if let Some(code) = fake_slurm::dispatch() {
        std::process::exit(code);
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and a small smoke
    // run is enough there.
    let bench = std::env::args().any(|a| a == "--bench");
    let chains = env_or("BURST_CHAINS", if bench { 100_000 } else { 2_000 });
    let live = env_or("BURST_LIVE", if bench { 10_000 } else { 200 }).min(chains);
    let sizes = Sizes {
        chains,
        live,
        failures: env_or("BURST_FAILURES", live / 10).min(live / 2),
        nopart: env_or("BURST_NOPART", if bench { 100 } else { 10 }).min(live / 4),
        status_all: if bench { 3 } else { 1 },
        status_id: if bench { 50 } else { 5 },
        submits: env_or("BURST_SUBMITS", if bench { 20 } else { 3 }),
        limit: Duration::from_secs(if bench { 1800 } else { 120 }),
    };
    assert!(sizes.live >= 8, "BURST_LIVE must be at least 8");

    println!(
        "burst benchmark: {} chains, {} live",
        sizes.chains, sizes.live
    );
    let build_root = common::build_dir("BURST_BUILD_DIR");
    let build = tempfile::Builder::new()
        .prefix("ssv-burst-build")
        .tempdir_in(&build_root)
        .expect("temp dir for the build");
    let built = build.path().join("supervisor.db");
    let t = Instant::now();
    // `BURST_STORE=mariadb`: the daemon in cluster mode, its store a replica of a journal
    // on a private MariaDB server (`tests/mariadb/mod.rs`), each session on a copy of it.
    let site = match std::env::var("BURST_STORE").as_deref() {
        Ok("mariadb") => Some(Site::start(build.path())),
        Ok("sqlite") | Err(_) => None,
        Ok(other) => panic!("BURST_STORE must be sqlite or mariadb, not {other:?}"),
    };
    let live_jobs = match &site {
        None => {
            let mut s = Store::open(&built).expect("create the store");
            build_store(&mut s, sizes.chains, sizes.live, 0)
        }
        Some(site) => site.build(&built, sizes.chains, sizes.live),
    };
    println!(
        "  store built in {} under {} ({:.1} MiB{})",
        common::secs(t.elapsed()),
        build_root.display(),
        std::fs::metadata(&built).map(|m| m.len()).unwrap_or(0) as f64 / (1 << 20) as f64,
        match &site {
            None => String::new(),
            Some(s) => format!(
                "; its journal on MariaDB: {}",
                s.server.admin_sql(
                    "SELECT CONCAT(COUNT(DISTINCT seq), ' entries, ', \
                     ROUND(SUM(LENGTH(body)) / 1048576, 1), ' MiB') FROM burst_build.journal"
                )
            ),
        }
    );

    let mut rows = Vec::new();
    if site.is_none() {
        live_list(&built, &mut rows);
    }

    let Some((daemon, ctl)) = common::binaries() else {
        println!(
            "  skipped: slurm-supervisord / supervisorctl not found next to the bench; \
             run `cargo build --release --bins` or set SLURM_SUPERVISORD and SUPERVISORCTL"
        );
        return;
    };
    println!(
        "  daemon: {}\n  client: {}",
        daemon.display(),
        ctl.display()
    );
    let measure_root = std::env::var_os("BURST_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let measure = tempfile::Builder::new()
        .prefix("ssv-burst")
        .tempdir_in(&measure_root)
        .expect("temp dir for the measurements");
    let bins = Bins { daemon, ctl, site };

    let sessions = std::env::var("BURST_SESSIONS").unwrap_or_else(|_| "abc".into());
    if sessions.contains('a') {
        steady(&sizes, &bins, measure.path(), &built, &live_jobs, &mut rows);
    }
    if sessions.contains('b') {
        failures(&sizes, &bins, measure.path(), &built, &live_jobs, &mut rows);
    }
    if sessions.contains('c') {
        oom(&sizes, &bins, measure.path(), &built, &live_jobs, &mut rows);
    }
    if sessions.contains('d') {
        two_daemons(&sizes, &bins, measure.path(), &built, &live_jobs, &mut rows);
    }
    drop(bins);
    drop(build);

    println!(
        "\n| measurement ({} chains, {} live) | measured | target (issue 10) |\n| --- | --- | --- |",
        sizes.chains, sizes.live
    );
    for r in &rows {
        println!("| {} | {} | {} |", r.what, r.measured, r.target);
    }
}

/// (9) The poll's list of live attempts (`Store::live_jobs`), on a copy of the built
/// store: read whole (the first call, or after another connection's commit), after one
/// write that changed a live attempt (patched with that row), and after a submission
/// (its attempt launching, not live: the same list).
fn live_list(built: &Path, rows: &mut Vec<Row>) {
    let dir = tempfile::tempdir_in(built.parent().unwrap()).unwrap();
    let copy = dir.path().join("supervisor.db");
    std::fs::copy(built, &copy).unwrap();
    let (mut whole, mut patched, mut same) = (Vec::new(), Vec::new(), Vec::new());
    let mut s = Store::open(&copy).unwrap();
    let mut other = Store::open(&copy).unwrap();
    let n = s.live_jobs().unwrap().len();
    let first = s.live_jobs().unwrap()[0].clone();
    for i in 0..7 {
        // Another connection's commit: read whole.
        other
            .set_last_seen(&[(first.chain_id, first.n, "PENDING")], &[])
            .unwrap();
        let t = Instant::now();
        assert_eq!(s.live_jobs().unwrap().len(), n);
        whole.push(t.elapsed());
        let state = if i % 2 == 0 { "RUNNING" } else { "COMPLETING" };
        s.set_last_seen(&[(first.chain_id, first.n, state)], &[])
            .unwrap();
        let t = Instant::now();
        assert_eq!(s.live_jobs().unwrap()[0].last_seen.as_deref(), Some(state));
        patched.push(t.elapsed());
        let before = s.live_jobs().unwrap();
        s.create_submission(&common::submission(i), 2_000_000_000, |_| vec![])
            .unwrap();
        let t = Instant::now();
        assert!(std::sync::Arc::ptr_eq(&before, &s.live_jobs().unwrap()));
        same.push(t.elapsed());
    }
    println!(
        "  (9) the live list of {n}: read whole {}, after one live attempt's write {}, after a submission {}",
        common::secs(median(&whole)),
        common::secs(median(&patched)),
        common::secs(median(&same))
    );
    rows.push(Row {
        what: format!(
            "(9) the poll's live list ({n} live): whole / after a write / after a submission"
        ),
        measured: format!(
            "{} / {} / {}",
            common::secs(median(&whole)),
            common::secs(median(&patched)),
            common::secs(median(&same))
        ),
        target: "no whole read after the loop's own writes".into(),
    });
}

struct Bins {
    daemon: PathBuf,
    ctl: PathBuf,
    /// Cluster mode: the MariaDB server the daemons share.
    site: Option<Site>,
}

/// A live job of the built store: its Slurm job id and its launch's tag.
struct LiveJob {
    job: String,
    tag: String,
}

/// The fake's job list: every live job in `state` except those `ended` says otherwise.
fn job_list(
    live: &[LiveJob],
    ended: impl Fn(usize) -> Option<(&'static str, &'static str, &'static str)>,
) -> String {
    let mut s = String::new();
    for (k, j) in live.iter().enumerate() {
        let (state, exit, partition) = ended(k).unwrap_or(("RUNNING", "0:0", "gpu"));
        s.push_str(&format!("{}|{state}|{exit}|{partition}|{}\n", j.job, j.tag));
    }
    s
}

/// Session A: nothing ends; the big reads and a submission.
fn steady(s: &Sizes, b: &Bins, root: &Path, built: &Path, live: &[LiveJob], rows: &mut Vec<Row>) {
    println!("\nsession A: {} live jobs keep running", s.live);
    let d = Daemon::start(b, &root.join("a"), built, &job_list(live, |_| None));
    for _ in 0..3 {
        d.after_cycle(s.limit);
    }
    let (rss, hwm) = d.memory();
    println!(
        "  (7) daemon after 3 cycles: VmRSS {}, VmHWM {}",
        mib(rss),
        mib(hwm)
    );
    rows.push(Row {
        what: format!(
            "(7) daemon RSS, {} chains / {} live, after 3 cycles",
            s.chains, s.live
        ),
        measured: format!("{} (peak {})", mib(rss), mib(hwm)),
        target: "<= 64 MiB".into(),
    });

    // (8) A cycle's CPU with nothing ending: one squeue (the state-only query once every
    // owner was seen), read and compared with the live attempts.
    let (cpu0, calls0) = (d.cpu().0, fake_slurm::calls(&d.bin).len());
    for _ in 0..5 {
        d.after_cycle(s.limit);
    }
    let (cpu1, calls) = (d.cpu().0, fake_slurm::calls(&d.bin));
    let squeues = calls[calls0..]
        .iter()
        .filter(|c| c.name == "squeue")
        .count()
        .max(1);
    let per_cycle = (cpu1 - cpu0) / squeues as u32;
    println!(
        "  (8) daemon CPU a cycle, nothing ending: {} ({} over {squeues} cycles of one squeue each)",
        common::secs(per_cycle),
        common::secs(cpu1 - cpu0)
    );
    rows.push(Row {
        what: format!("(8) daemon CPU a cycle, {} live, nothing ending", s.live),
        measured: common::secs(per_cycle),
        target: "<= 300 ms".into(),
    });

    // (7b) Memory over many cycles with nothing ending (`BURST_STEADY_CYCLES`, 50): it
    // stays level, it does not creep cycle after cycle.
    let cycles = env_or("BURST_STEADY_CYCLES", 50).max(10);
    let mut rss = Vec::with_capacity(cycles);
    for _ in 0..cycles {
        d.after_cycle(s.limit);
        rss.push(d.memory().0);
    }
    let avg = |v: &[u64]| v.iter().sum::<u64>() / v.len() as u64;
    let (first, last) = (avg(&rss[..10]), avg(&rss[rss.len() - 10..]));
    let (lo, hi) = (*rss.iter().min().unwrap(), *rss.iter().max().unwrap());
    let hwm = d.memory().1;
    println!(
        "  (7b) daemon VmRSS over {cycles} cycles, nothing ending: first ten {}, last ten {} (min {}, max {}), VmHWM {}",
        mib(first),
        mib(last),
        mib(lo),
        mib(hi),
        mib(hwm)
    );
    rows.push(Row {
        what: format!(
            "(7b) daemon VmRSS over {cycles} cycles: first ten / last ten (min-max, VmHWM)"
        ),
        measured: format!(
            "{} / {} ({}-{}, {})",
            mib(first),
            mib(last),
            mib(lo),
            mib(hi),
            mib(hwm)
        ),
        target: "level; VmHWM <= 64 MiB".into(),
    });

    // (4) status --json of every chain.
    let mut times = Vec::new();
    let (mut client_rss, mut bytes) = (0, 0);
    let before = d.memory().0;
    for _ in 0..s.status_all {
        let mut cmd = d.ctl_cmd(&["status", "--json"]);
        let (t, n, maxrss, ok) = run_measured(&mut cmd);
        assert!(ok, "status --json failed");
        times.push(t);
        client_rss = client_rss.max(maxrss);
        bytes = n;
    }
    let after = d.memory();
    println!(
        "  (4) status --json ({:.1} MiB of JSON): {}; client peak RSS {}; daemon VmRSS {} before, {} after (peak {})",
        bytes as f64 / (1 << 20) as f64,
        spread(&times),
        mib(client_rss),
        mib(before),
        mib(after.0),
        mib(after.1)
    );
    rows.push(Row {
        what: format!("(4) `status --json` of {} chains", s.chains),
        measured: format!(
            "{} (median of {})",
            common::secs(median(&times)),
            times.len()
        ),
        target: "<= 0.5 s".into(),
    });
    rows.push(Row {
        what: "(4) ... its client's peak RSS".into(),
        measured: mib(client_rss),
        target: "< 64 MiB".into(),
    });
    rows.push(Row {
        what: "(4) ... daemon VmRSS before / after (VmHWM)".into(),
        measured: format!("{} / {} ({})", mib(before), mib(after.0), mib(after.1)),
        target: "no memory kept".into(),
    });

    // (5) status by Slurm job id, of a live chain and of a completed one.
    let live_id = &live[live.len() / 2].job;
    let mut by_process = Vec::new();
    let mut by_socket = Vec::new();
    for _ in 0..s.status_id {
        let t = Instant::now();
        let out = d.ctl_cmd(&["status", live_id]).output().unwrap();
        by_process.push(t.elapsed());
        assert!(out.status.success(), "status {live_id}: {out:?}");
        let (t, answer) = d
            .request(&format!("{{\"cmd\":\"status\",\"id\":\"{live_id}\"}}"))
            .expect("status over the socket");
        assert!(answer.contains(live_id.as_str()), "{answer}");
        by_socket.push(t);
    }
    println!(
        "  (5) status {live_id}: supervisorctl {}; the request alone on the socket {}",
        spread(&by_process),
        spread(&by_socket)
    );
    rows.push(Row {
        what: format!(
            "(5) `status JOBID` in {} chains: the socket request",
            s.chains
        ),
        measured: common::secs(median(&by_socket)),
        target: "<= 2 ms".into(),
    });
    rows.push(Row {
        what: "(5) ... the whole `supervisorctl status JOBID`".into(),
        measured: common::secs(median(&by_process)),
        target: "".into(),
    });

    // (6) submit, beside the fake sbatch called directly. The store was built with a
    // "completed" notification queued for every completed chain (none asked for mail,
    // so there is nothing to deliver), which the daemon's loop marks a few pages per
    // cycle after it starts; a daemon in service drained those long ago, so the submits are timed once
    // that backlog is gone (before, they were timed while the loop worked through it).
    let (backlog, t) = (d.unsent_notifications(), Instant::now());
    while d.unsent_notifications() > 0 {
        assert!(
            t.elapsed() < s.limit,
            "notifications not drained within {:?}",
            s.limit
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "  (6) waited {} for the daemon to mark the {backlog} due notifications left from building the store",
        common::secs(t.elapsed())
    );
    let delay: u64 = env_or("BURST_SBATCH_DELAY_MS", 0) as u64;
    std::fs::write(d.bin.join("sbatch_delay_ms"), delay.to_string()).unwrap();
    let (mut submit, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..s.submits {
        let t = Instant::now();
        let out = Command::new(d.bin.join("sbatch"))
            .args(["--parsable", "--comment=ssv-bench-direct", "--wrap", "true"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        direct.push(t.elapsed());
        assert!(out.status.success());
        let t = Instant::now();
        let out = d
            .ctl_cmd(&["submit", "--", "--wrap", "true"])
            .output()
            .unwrap();
        submit.push(t.elapsed());
        assert!(
            out.status.success(),
            "submit failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let ratio = median(&submit).as_secs_f64() / median(&direct).as_secs_f64();
    println!(
        "  (6) submit: {}; direct fake sbatch (sleeping {delay} ms): {}; ratio {ratio:.2}",
        spread(&submit),
        spread(&direct)
    );
    rows.push(Row {
        what: format!(
            "(6) `submit` in {} chains / direct sbatch (fake sbatch {delay} ms)",
            s.chains
        ),
        measured: format!(
            "{} / {} = {ratio:.2}x",
            common::secs(median(&submit)),
            common::secs(median(&direct))
        ),
        target: "<= 3x".into(),
    });
    d.stop();
}

/// Session B: permanent failures among running jobs, then endings in an unknown partition.
fn failures(s: &Sizes, b: &Bins, root: &Path, built: &Path, live: &[LiveJob], rows: &mut Vec<Row>) {
    println!(
        "\nsession B: {} of {} live jobs end FAILED 1:0 (a permanent rule), then {} TIMEOUT in an unlisted partition",
        s.failures, s.live, s.nopart
    );
    let mut d = Daemon::start(b, &root.join("b"), built, &job_list(live, |_| None));
    d.after_cycle(s.limit);
    standby_if_asked(&mut d, b, &root.join("b2"), built, s.limit);
    // Every tenth job fails, spread over the squeue and sacct chunks as a real bad day is.
    let step = (s.live / s.failures).max(1);
    let failed = |k: usize| k.is_multiple_of(step) && k / step < s.failures;
    let list = job_list(live, |k| failed(k).then_some(("FAILED", "1:0", "gpu")));
    let r = d.burst(&list, "failed", s.failures, s.limit);
    r.print("(1)");
    cluster_rows(&d, &r, "(1)", rows);
    rows.push(Row {
        what: format!(
            "(1) {} permanent failures among {} live: decided",
            s.failures, s.live
        ),
        measured: format!(
            "{} ({} from the cycle's first command)",
            common::secs(r.from_swap),
            common::secs(r.from_cycle)
        ),
        target: "<= 2 s".into(),
    });
    rows.push(Row {
        what: "(1) ... daemon CPU time (children: the Slurm commands)".into(),
        measured: format!("{} ({})", common::secs(r.cpu), common::secs(r.child_cpu)),
        target: "".into(),
    });
    rows.push(Row {
        what: "(1) ... Slurm commands in the cycle".into(),
        measured: r.commands(),
        target: format!("<= {}", 2 + s.live.div_ceil(1000)),
    });
    rows.push(Row {
        what: "(1) ... `supervisorctl status c1` during it: median / max".into(),
        measured: r.latency(&r.status),
        target: "< 100 ms".into(),
    });
    rows.push(Row {
        what: "(1) ... `ping` on the socket during it: median / max".into(),
        measured: r.latency(&r.ping),
        target: "< 100 ms".into(),
    });

    // (3) TIMEOUT endings in a partition sinfo does not list, among the jobs still running.
    let ended = |k: usize| !failed(k) && k % step == 1 && k / step < s.nopart;
    let list = job_list(live, |k| {
        if failed(k) {
            Some(("FAILED", "1:0", "gpu"))
        } else if ended(k) {
            Some(("TIMEOUT", "0:0", "scratch"))
        } else {
            None
        }
    });
    // How many of the live jobs that pattern picks (fewer than `nopart` in a small store).
    let nopart = (0..s.live).filter(|&k| ended(k)).count();
    let r = d.burst(&list, "ready", nopart, s.limit);
    r.print("(3)");
    rows.push(Row {
        what: format!("(3) {nopart} endings in a partition sinfo does not list: sinfo calls"),
        measured: format!(
            "{} (in {}; {})",
            r.count("sinfo"),
            common::secs(r.from_cycle),
            r.commands()
        ),
        target: "<= 1".into(),
    });
    d.stop();
}

/// Session C: every live job runs out of memory in the same cycle.
fn oom(s: &Sizes, b: &Bins, root: &Path, built: &Path, live: &[LiveJob], rows: &mut Vec<Row>) {
    println!("\nsession C: all {} live jobs end OUT_OF_MEMORY", s.live);
    let mut d = Daemon::start(b, &root.join("c"), built, &job_list(live, |_| None));
    d.after_cycle(s.limit);
    standby_if_asked(&mut d, b, &root.join("c2"), built, s.limit);
    let list = job_list(live, |_| Some(("OUT_OF_MEMORY", "0:125", "gpu")));
    let r = d.burst(&list, "ready", s.live, s.limit);
    r.print("(2)");
    cluster_rows(&d, &r, "(2)", rows);
    rows.push(Row {
        what: format!("(2) {} OOM endings: all decided (ready, resubmit)", s.live),
        measured: format!(
            "{} ({} from the cycle's first command)",
            common::secs(r.from_swap),
            common::secs(r.from_cycle)
        ),
        target: "<= 10 s".into(),
    });
    rows.push(Row {
        what: "(2) ... sacct calls / all Slurm commands".into(),
        measured: format!(
            "{} / {} ({})",
            r.count("sacct"),
            r.calls.len(),
            r.commands()
        ),
        target: format!("<= 12 sacct; <= {} in all", 2 + s.live.div_ceil(1000)),
    });
    rows.push(Row {
        what: "(2) ... daemon CPU time (children)".into(),
        measured: format!("{} ({})", common::secs(r.cpu), common::secs(r.child_cpu)),
        target: "".into(),
    });
    rows.push(Row {
        what: "(2) ... `supervisorctl status c1` / `ping` during it: max".into(),
        measured: format!(
            "{} / {}",
            common::secs(max(&r.status)),
            common::secs(max(&r.ping))
        ),
        target: "< 100 ms".into(),
    });
    d.stop();
}

/// Cluster mode with `BURST_STANDBY=1`: a second daemon on the same database and fake
/// Slurm, standing by through the burst.
fn standby_if_asked(d: &mut Daemon, b: &Bins, root: &Path, built: &Path, limit: Duration) {
    if b.site.is_some() && std::env::var("BURST_STANDBY").is_ok_and(|v| v == "1") {
        d.add_standby(b, root, built);
        d.after_cycle(limit);
        println!("  a standby (login2) runs beside it");
    }
}

/// The daemon's peak memory after a burst, and in cluster mode the journal's growth and
/// what the standbys did.
fn cluster_rows(d: &Daemon, r: &Burst, label: &str, rows: &mut Vec<Row>) {
    let (rss, hwm) = d.memory();
    println!(
        "  {label} daemon after it: VmRSS {}, VmHWM {}",
        mib(rss),
        mib(hwm)
    );
    rows.push(Row {
        what: format!("{label} ... daemon VmRSS after / VmHWM"),
        measured: format!("{} / {}", mib(rss), mib(hwm)),
        target: "".into(),
    });
    if let Some((entries, bytes)) = r.journal {
        rows.push(Row {
            what: format!("{label} ... journal entries appended (bytes)"),
            measured: format!("{entries} ({:.2} MiB)", bytes as f64 / (1 << 20) as f64),
            target: "".into(),
        });
    }
    if !d.standbys.is_empty() {
        rows.push(Row {
            what: format!("{label} ... the standby: Slurm commands / CPU time"),
            measured: format!("{} / {}", r.others.len(), common::secs(r.standby_cpu)),
            target: "0 commands".into(),
        });
    }
}

/// Session D: Slurm commands a cycle with one daemon, then (cluster mode) with a second
/// one standing by on the same database and the same fake Slurm (counted by the pid that
/// ran each command).
fn two_daemons(
    s: &Sizes,
    b: &Bins,
    root: &Path,
    built: &Path,
    live: &[LiveJob],
    rows: &mut Vec<Row>,
) {
    println!(
        "\nsession D: {} live jobs keep running; one daemon, then two",
        s.live
    );
    let mut d = Daemon::start(b, &root.join("d"), built, &job_list(live, |_| None));
    for _ in 0..3 {
        d.after_cycle(s.limit);
    }
    let (one, _, _) = d.cycles(10, s.limit);
    println!("  one daemon: Slurm commands {one}");
    rows.push(Row {
        what: "(9) Slurm commands a cycle, one daemon".into(),
        measured: one,
        target: "".into(),
    });
    if b.site.is_none() {
        println!("  (a second daemon needs BURST_STORE=mariadb)");
        d.stop();
        return;
    }
    d.add_standby(b, &root.join("d2"), built);
    for _ in 0..2 {
        d.after_cycle(s.limit);
    }
    let (two, others, standby_cpu) = d.cycles(10, s.limit);
    println!(
        "  two daemons: the active one's Slurm commands {two}; the standby's {} (CPU {} over those cycles)",
        others.len(),
        common::secs(standby_cpu)
    );
    rows.push(Row {
        what: "(9) ... two daemons: the active one's".into(),
        measured: two,
        target: "unchanged".into(),
    });
    rows.push(Row {
        what: "(9) ... two daemons: the standby's over those cycles (its CPU)".into(),
        measured: format!("{} ({})", others.len(), common::secs(standby_cpu)),
        target: "0".into(),
    });
    d.stop();
}

/// What one burst cost.
struct Burst {
    from_swap: Duration,
    from_cycle: Duration,
    cpu: Duration,
    child_cpu: Duration,
    calls: Vec<Call>,
    status: Vec<Duration>,
    ping: Vec<Duration>,
    /// Slurm commands other daemons (standbys) ran in the span.
    others: Vec<Call>,
    /// The standbys' CPU time in the span.
    standby_cpu: Duration,
    /// Cluster mode: the journal entries appended in the span, and their bytes.
    journal: Option<(u64, usize)>,
}

impl Burst {
    fn count(&self, name: &str) -> usize {
        self.calls.iter().filter(|c| c.name == name).count()
    }

    /// The commands by kind, e.g. `5 squeue, 5 sacct, 1 sinfo`.
    fn commands(&self) -> String {
        let mut by: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for c in &self.calls {
            let e = by.entry(c.name.as_str()).or_default();
            e.0 += 1;
            e.1 += c.ids;
        }
        let parts: Vec<String> = by
            .iter()
            .map(|(n, (k, ids))| format!("{k} {n} ({ids} ids)"))
            .collect();
        format!("{}: {}", self.calls.len(), parts.join(", "))
    }

    fn latency(&self, t: &[Duration]) -> String {
        if t.is_empty() {
            return "none asked".into();
        }
        format!(
            "{} / {} ({} asked)",
            common::secs(median(t)),
            common::secs(max(t)),
            t.len()
        )
    }

    fn print(&self, label: &str) {
        let wall: u64 = self.calls.iter().map(|c| c.wall_us).sum();
        println!(
            "  {label} decided {} after the swap, {} after the cycle's first command; daemon CPU {} (children {})",
            common::secs(self.from_swap),
            common::secs(self.from_cycle),
            common::secs(self.cpu),
            common::secs(self.child_cpu)
        );
        println!(
            "  {label} Slurm commands: {} (their own wall time {})",
            self.commands(),
            common::secs(Duration::from_micros(wall))
        );
        println!(
            "  {label} status c1: {}; ping: {}",
            self.latency(&self.status),
            self.latency(&self.ping)
        );
        if let Some((entries, bytes)) = self.journal {
            println!(
                "  {label} journal: {entries} entries appended, {:.2} MiB",
                bytes as f64 / (1 << 20) as f64
            );
        }
        if !self.others.is_empty() || !self.standby_cpu.is_zero() {
            println!(
                "  {label} standby: {} Slurm commands, CPU {}",
                self.others.len(),
                common::secs(self.standby_cpu)
            );
        }
    }
}

/// A daemon's fake Slurm: its own, with this job list, or another daemon's bin directory
/// (one Slurm cluster, two login nodes).
enum Fake<'a> {
    Own(&'a str),
    Shared(&'a Path),
}

/// A running daemon with its fake Slurm.
struct Daemon {
    child: Child,
    ctl: PathBuf,
    config: PathBuf,
    socket: PathBuf,
    bin: PathBuf,
    /// The store file the bench reads beside the daemon (in cluster mode, its replica).
    db: PathBuf,
    log: PathBuf,
    /// Cluster mode: the shared database.
    site_db: Option<SiteDb>,
    /// Cluster mode: standbys started beside this daemon, on its database and its fake
    /// Slurm (stopped before it).
    standbys: Vec<Daemon>,
}

impl Daemon {
    /// A daemon on a copy of the built store (in cluster mode, on a copy of its shared
    /// database of its own: `burst_` and the last part of `root`), with a fake Slurm.
    fn start(b: &Bins, root: &Path, built: &Path, jobs: &str) -> Daemon {
        let site_db = b.site.as_ref().map(|site| {
            site.session(
                root.file_name()
                    .and_then(|n| n.to_str())
                    .expect("a session name"),
            )
        });
        Daemon::launch(b, root, built, Fake::Own(jobs), site_db, "login1")
    }

    /// Cluster mode: starts a second daemon (`login2`) in `root`, on this daemon's shared
    /// database and fake Slurm, with its own copy of the built replica; it stands by while
    /// this one holds the lease.
    fn add_standby(&mut self, b: &Bins, root: &Path, built: &Path) {
        let site_db = self
            .site_db
            .clone()
            .expect("a standby needs BURST_STORE=mariadb");
        let d = Daemon::launch(
            b,
            root,
            built,
            Fake::Shared(&self.bin),
            Some(site_db),
            "login2",
        );
        self.standbys.push(d);
    }

    fn launch(
        b: &Bins,
        root: &Path,
        built: &Path,
        fake: Fake<'_>,
        site_db: Option<SiteDb>,
        node: &str,
    ) -> Daemon {
        let state_dir = root.join("state");
        std::fs::create_dir_all(&state_dir).unwrap();
        std::fs::set_permissions(&state_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let db = state_dir.join(if site_db.is_some() {
            "replica.db"
        } else {
            "supervisor.db"
        });
        std::fs::copy(built, &db).expect("copy the store");
        let bin = match fake {
            Fake::Own(jobs) => {
                let bin = root.join("fake-bin");
                fake_slurm::install(&bin);
                fake_slurm::write_jobs(&bin, jobs);
                bin
            }
            Fake::Shared(bin) => bin.to_path_buf(),
        };
        let store = match &site_db {
            None => String::new(),
            Some(db) => format!(
                // No snapshot during a session: the bursts are measured alone (the
                // built journal is past the default 10,000 entries, so the first look,
                // a third of a lease in, would snapshot the whole store).
                "\n[store]\nurl = \"{}\"\npassword_file = {:?}\nnode = {node:?}\n\
                 snapshot_entries = 0\nsnapshot_mib = 0\nsnapshot_interval = \"0s\"\n",
                db.url,
                db.password_file.display().to_string()
            ),
        };
        let config = root.join("supervisor.toml");
        std::fs::write(
            &config,
            format!(
                "state_dir = {:?}\npoll_interval = {:?}\n\n[slurm]\nbin_dir = {:?}\n\n\
                 [retry]\nbackoff_initial = \"1d\"\nbackoff_max = \"1d\"\nbackoff_jitter = 0.0\n\n\
                 [limits]\nmax_open_chains_per_user = 1000000\n\n\
                 [[rules]]\nname = \"bench permanent\"\nkind = \"permanent\"\nexit_codes = [1]\n{store}",
                state_dir.display().to_string(),
                std::env::var("BURST_POLL_INTERVAL").unwrap_or_else(|_| "1s".into()),
                bin.display().to_string()
            ),
        )
        .unwrap();
        let log = root.join("daemon.log");
        let child = Command::new(&b.daemon)
            .arg("--config")
            .arg(&config)
            .env("SLURM_SUPERVISOR_LOG", "info")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("SLURM_SUPERVISOR_FAILPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start slurm-supervisord");
        let mut d = Daemon {
            child,
            ctl: b.ctl.clone(),
            config,
            socket: state_dir.join("supervisor.sock"),
            bin,
            db,
            log,
            site_db,
            standbys: Vec::new(),
        };
        let t = Instant::now();
        while d.request("{\"cmd\":\"ping\"}").is_none() {
            if t.elapsed() > Duration::from_secs(120) || d.child.try_wait().unwrap().is_some() {
                d.fail("the daemon did not answer a ping within 120 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        println!(
            "  daemon answers {} after its start",
            common::secs(t.elapsed())
        );
        d
    }

    fn fail(&mut self, what: &str) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!("{what}; the end of its log:\n{}", tail.join("\n"));
    }

    fn ctl_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.ctl);
        c.arg("--config")
            .arg(&self.config)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    /// One request on the control socket, as `supervisorctl` sends it; its time and answer.
    fn request(&self, json: &str) -> Option<(Duration, String)> {
        request(&self.socket, json)
    }

    /// Waits until a poll cycle has run and the fake has been quiet for a while after it,
    /// so that a job list swapped now is seen whole by the next cycle.
    fn after_cycle(&self, limit: Duration) {
        let t = Instant::now();
        let n0 = fake_slurm::calls(&self.bin).len();
        while !fake_slurm::calls(&self.bin)[n0..]
            .iter()
            .any(|c| c.name == "squeue")
        {
            assert!(t.elapsed() < limit, "no poll cycle within {limit:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        let (mut n, mut quiet) = (fake_slurm::calls(&self.bin).len(), Instant::now());
        while quiet.elapsed() < Duration::from_millis(150) {
            std::thread::sleep(Duration::from_millis(10));
            let m = fake_slurm::calls(&self.bin).len();
            if m != n {
                (n, quiet) = (m, Instant::now());
            }
        }
    }

    /// Notifications due now, neither sent nor given up (read-only, beside the daemon).
    fn unsent_notifications(&self) -> usize {
        let reader = rusqlite::Connection::open_with_flags(
            &self.db,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .expect("read the store");
        reader.busy_timeout(Duration::from_secs(5)).unwrap();
        reader
            .query_row(
                "SELECT count(*) FROM notifications \
                 WHERE sent_at IS NULL AND gave_up_at IS NULL AND next_try <= ?1",
                [unix_now() as i64],
                |r| r.get::<_, i64>(0),
            )
            .unwrap_or(0) as usize
    }

    /// (VmRSS, VmHWM) in bytes.
    fn memory(&self) -> (u64, u64) {
        common::memory(self.child.id())
    }

    /// (own, reaped children's) CPU time, user plus system.
    fn cpu(&self) -> (Duration, Duration) {
        common::cpu(self.child.id())
    }

    /// Swaps the fake's job list, and measures until `expect` more chains are in `state`.
    fn burst(&self, jobs: &str, state: &str, expect: usize, limit: Duration) -> Burst {
        let reader = rusqlite::Connection::open_with_flags(
            &self.db,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .expect("read the store");
        reader.busy_timeout(Duration::from_secs(5)).unwrap();
        let count = || -> usize {
            reader
                .query_row(
                    "SELECT count(*) FROM chains WHERE state = ?1",
                    [state],
                    |r| r.get::<_, i64>(0),
                )
                .unwrap_or(0) as usize
        };
        let base = count();
        self.after_cycle(limit);
        let calls_before = fake_slurm::calls(&self.bin).len();
        let head0 = self
            .site_db
            .as_ref()
            .map(|db| db.connect().journal_head().unwrap());
        let standby0: Vec<Duration> = self.standbys.iter().map(|d| d.cpu().0).collect();
        let cpu0 = self.cpu();
        let swap = unix_now();
        let t0 = Instant::now();
        fake_slurm::write_jobs(&self.bin, jobs);

        // Users asking while the daemon works.
        let stop = Arc::new(AtomicBool::new(false));
        let prober = {
            let stop = stop.clone();
            let socket = self.socket.clone();
            let mut status = self.ctl_cmd(&["status", "c1"]);
            status.stdout(Stdio::null()).stderr(Stdio::null());
            std::thread::spawn(move || {
                let (mut st, mut ping) = (Vec::new(), Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    // Exit 1 is an answer too: the chain asked about has failed.
                    if status
                        .status()
                        .is_ok_and(|s| matches!(s.code(), Some(0 | 1)))
                    {
                        st.push(t.elapsed());
                    }
                    if let Some((t, _)) = request(&socket, "{\"cmd\":\"ping\"}") {
                        ping.push(t);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                (st, ping)
            })
        };
        while count() < base + expect {
            if t0.elapsed() > limit {
                stop.store(true, Ordering::Relaxed);
                let _ = prober.join();
                let n = count() - base;
                // SAFETY: the daemon's own pid; Drop-free kill of a child we started.
                unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
                panic!(
                    "only {n} of {expect} chains reached {state} within {limit:?}; log: {}",
                    self.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let from_swap = t0.elapsed();
        let done = unix_now();
        let cpu1 = self.cpu();
        let standby_cpu = self
            .standbys
            .iter()
            .zip(standby0)
            .map(|(d, c0)| d.cpu().0.saturating_sub(c0))
            .sum();
        stop.store(true, Ordering::Relaxed);
        let (status, ping) = prober.join().unwrap();
        let (calls, others): (Vec<Call>, Vec<Call>) = fake_slurm::calls(&self.bin)
            .into_iter()
            .skip(calls_before)
            .filter(|c| c.start >= swap && c.start <= done)
            .partition(|c| c.ppid == self.child.id() || c.ppid == 0);
        // The entries this burst appended to the shared journal, and their bytes.
        let journal = self.site_db.as_ref().zip(head0).map(|(db, head0)| {
            let mut db = db.connect();
            let head = db.journal_head().unwrap();
            let bytes: usize = db
                .read_after(head0, (head - head0) as usize)
                .unwrap()
                .iter()
                .map(|(_, _, b)| b.len())
                .sum();
            (head - head0, bytes)
        });
        let first = calls.iter().map(|c| c.start).fold(done, f64::min);
        Burst {
            from_swap,
            from_cycle: Duration::from_secs_f64((done - first).max(0.0)),
            cpu: cpu1.0.saturating_sub(cpu0.0),
            child_cpu: cpu1.1.saturating_sub(cpu0.1),
            calls,
            status,
            ping,
            others,
            standby_cpu,
            journal,
        }
    }

    /// Waits for `n` poll cycles; the Slurm commands this daemon ran a cycle (by kind),
    /// the commands its standbys ran, and its standbys' CPU time over them.
    fn cycles(&self, n: usize, limit: Duration) -> (String, Vec<Call>, Duration) {
        let calls0 = fake_slurm::calls(&self.bin).len();
        let standby0: Vec<Duration> = self.standbys.iter().map(|d| d.cpu().0).collect();
        for _ in 0..n {
            self.after_cycle(limit);
        }
        let standby_cpu = self
            .standbys
            .iter()
            .zip(standby0)
            .map(|(d, c0)| d.cpu().0.saturating_sub(c0))
            .sum();
        let (mine, others): (Vec<Call>, Vec<Call>) = fake_slurm::calls(&self.bin)
            .into_iter()
            .skip(calls0)
            .partition(|c| c.ppid == self.child.id());
        let cycles = mine.iter().filter(|c| c.name == "squeue").count().max(1);
        let mut by: BTreeMap<&str, usize> = BTreeMap::new();
        for c in &mine {
            *by.entry(c.name.as_str()).or_default() += 1;
        }
        let kinds: Vec<String> = by.iter().map(|(k, v)| format!("{v} {k}")).collect();
        let per = format!(
            "{:.2} a cycle ({} over {cycles} cycles: {})",
            mine.len() as f64 / cycles as f64,
            mine.len(),
            kinds.join(", ")
        );
        (per, others, standby_cpu)
    }

    /// SIGTERM, as systemd stops it.
    fn stop(mut self) {
        for d in std::mem::take(&mut self.standbys) {
            d.stop();
        }
        // SAFETY: kill(2) with a pid we started and have not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn request(socket: &Path, json: &str) -> Option<(Duration, String)> {
    let t = Instant::now();
    let mut s = UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    s.write_all(format!("{json}\n").as_bytes()).ok()?;
    s.shutdown(std::net::Shutdown::Write).ok()?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).ok()?;
    let took = t.elapsed();
    answer.contains("\"ok\"").then_some(())?;
    Some((took, answer))
}

/// Runs a command to its end; (wall time, bytes on stdout, its peak RSS, success).
// The child is reaped by `wait4` below, which also gives its rusage; std's `wait` cannot.
#[allow(clippy::zombie_processes)]
fn run_measured(cmd: &mut Command) -> (Duration, usize, u64, bool) {
    let t = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the client");
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 1 << 16];
        let mut n = 0;
        while let Ok(k) = out.read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k;
        }
        n
    });
    let mut status = 0;
    // SAFETY: wait4 on the pid of a child we started and that std has not reaped; the
    // rusage is plain data.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    let took = t.elapsed();
    let bytes = reader.join().unwrap_or(0);
    let ok = rc > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    // ru_maxrss is in KiB on Linux.
    (took, bytes, usage.ru_maxrss as u64 * 1024, ok)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Builds the store: `live` chains active (spread evenly), the rest completed. Returns the
/// live jobs, in chain order.
/// With `batch` > 0, every `batch` chains are one transaction (in cluster mode, one
/// journal entry); the rows are the same.
fn build_store(s: &mut Store, chains: usize, live: usize, batch: usize) -> Vec<LiveJob> {
    let now = slurm_supervisor::plumbing::clock::now();
    let start = now - chains as i64 * 30;
    let step = (chains / live.max(1)).max(1);
    let mut out = Vec::new();
    for i in 0..chains {
        if batch > 0 && i % batch == 0 {
            s.begin_batch().unwrap();
        }
        let t = start + i as i64 * 30;
        let new = common::submission(i);
        // The last submissions' request ids, kept as `supervisorctl submit` leaves them:
        // the submitter of (6) has made as many submits as the store keeps ids of, so
        // each of theirs prunes one, as a user's does in service (issue 32).
        let request_id =
            (i + SUBMIT_REQUESTS_KEPT as usize >= chains).then(|| format!("built-{i}"));
        let l = s
            .create_submission_requested(&new, &[], &[], request_id.as_deref(), t, |tag| {
                vec![format!("--comment={tag}"), "train.sh".into()]
            })
            .unwrap();
        let job = (1_000_000 + i).to_string();
        s.launch_submitted(l.id, &job, t + 1).unwrap();
        let batch_ends = batch > 0 && ((i + 1) % batch == 0 || i + 1 == chains);
        if i % step == 0 && out.len() < live {
            out.push(LiveJob { job, tag: l.tag });
            if batch_ends {
                s.end_batch(true).unwrap();
            }
            continue;
        }
        // One chain per submission, so the chain id is the submission id.
        let obs = serde_json::json!({
            "job_id": job,
            "rows": [{"job_id": job, "job_id_raw": job, "state": "COMPLETED", "cancelled_by": null,
                      "exit_code": {"code": 0, "signal": 0}, "node_list": "gpu017",
                      "max_rss_bytes": null, "req_mem_bytes": 17179869184u64,
                      "timelimit_secs": 14400, "elapsed_secs": 9876, "partition": "gpu",
                      "restarts": null, "comment": l.tag}],
            "stderr_tail": null,
            "requeued_by_slurm": false,
        });
        let t_end = Transition {
            attempt: Some(AttemptChange::Ended(Judged {
                n: 1,
                end: AttemptEnd {
                    slurm_state: "COMPLETED".into(),
                    exit_code: "0:0".into(),
                    nodes: Some("gpu017".into()),
                    mem: Some("16G".into()),
                    time_limit: Some("04:00:00".into()),
                    signature: None,
                    signature_text: None,
                },
                observation: obs,
            })),
            ..Transition::of(
                ChainState::Active,
                ChainUpdate {
                    last_classification: Some(Classification::Completed),
                    ..ChainUpdate::to(ChainState::Completed)
                },
                None,
            )
        };
        s.apply_one(l.submission_id, &t_end.finish(), t + 1200)
            .unwrap();
        if batch_ends {
            s.end_batch(true).unwrap();
        }
    }
    out
}

/// The Slurm cluster's name the fake `scontrol show config` gives.
const CLUSTER: &str = "bench";
/// The bound on each call to the database, the builder's and the daemons'.
const DB_TIMEOUT: Duration = Duration::from_secs(10);

/// Cluster mode's shared database: a private MariaDB server (`tests/mariadb/mod.rs`), one
/// database (`burst_build`) holding the built store's journal, and one copy of it per
/// daemon session, so each session starts from the same store as in SQLite mode.
struct Site {
    server: mariadb::MariaDb,
    /// Where the password files go.
    dir: PathBuf,
}

/// One supervisor database on the server, as a daemon's `[store]` names it.
#[derive(Clone)]
struct SiteDb {
    url: StoreUrl,
    password_file: PathBuf,
}

impl SiteDb {
    fn connect(&self) -> ClusterDb {
        let password = read_password_file(&self.password_file).expect("the password file");
        ClusterDb::connect(&self.url, &password, DB_TIMEOUT).expect("connect to MariaDB")
    }
}

impl Site {
    fn start(dir: &Path) -> Site {
        let t = Instant::now();
        let server = mariadb::MariaDb::start();
        println!(
            "  MariaDB ({}) answers on 127.0.0.1:{} after {}",
            server.admin_sql("SELECT VERSION()"),
            server.port(),
            common::secs(t.elapsed())
        );
        Site {
            server,
            dir: dir.to_path_buf(),
        }
    }

    /// A database `burst_NAME` and its user, as docs/cluster.md tells an admin to make them.
    fn database(&self, name: &str) -> SiteDb {
        let password = format!("bench-{name}-pw");
        let url = self.server.supervisor_database(
            &format!("burst_{name}"),
            &format!("ssv_{name}"),
            &password,
        );
        let password_file = self.dir.join(format!("{name}-db-password"));
        std::fs::write(&password_file, format!("{password}\n")).unwrap();
        std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        SiteDb { url, password_file }
    }

    /// Builds the store as a replica at `replica` of a journal in `burst_build`, as the
    /// active daemon would write it (the builder holds the lease, and gives it up at the
    /// end); 500 chains a journal entry.
    fn build(&self, replica: &Path, chains: usize, live: usize) -> Vec<LiveJob> {
        let db = self.database("build");
        let instance = db
            .connect()
            .prepare(CLUSTER)
            .unwrap()
            .expect("a new database is this cluster's")
            .instance;
        let holder = "bench-builder";
        let epoch = match db
            .connect()
            .try_acquire(holder, Duration::from_secs(86_400))
            .unwrap()
        {
            Acquisition::Won(g) => g.epoch,
            Acquisition::Held(v) => panic!("the new database's lease is held: {v:?}"),
        };
        let cell = EpochCell::default();
        cell.set(Some(epoch));
        let connect = {
            let db = db.clone();
            Box::new(move || {
                let password = read_password_file(&db.password_file).expect("the password file");
                ClusterDb::connect(&db.url, &password, DB_TIMEOUT)
            })
        };
        let journal = SharedJournal::new(connect, cell);
        let mut store =
            Store::open_replica(replica, &instance, Box::new(journal)).expect("the replica");
        let out = build_store(&mut store, chains, live, 500);
        drop(store);
        assert!(db.connect().release(holder, epoch).unwrap());
        out
    }

    /// A copy of the built store's shared database for one session (`burst_NAME`): its
    /// journal and `cluster` row; the lease is made anew by the first daemon.
    fn session(&self, name: &str) -> SiteDb {
        let db = self.database(name);
        let t = Instant::now();
        self.server.admin_sql(&format!(
            "CREATE TABLE burst_{name}.journal LIKE burst_build.journal;
             INSERT INTO burst_{name}.journal SELECT * FROM burst_build.journal;
             CREATE TABLE burst_{name}.cluster LIKE burst_build.cluster;
             INSERT INTO burst_{name}.cluster SELECT * FROM burst_build.cluster;"
        ));
        println!(
            "  database burst_{name}: the built journal copied in {}",
            common::secs(t.elapsed())
        );
        db
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

fn median(t: &[Duration]) -> Duration {
    let mut t = t.to_vec();
    t.sort();
    t.get(t.len() / 2).copied().unwrap_or_default()
}

fn max(t: &[Duration]) -> Duration {
    t.iter().max().copied().unwrap_or_default()
}

fn spread(t: &[Duration]) -> String {
    let mut t = t.to_vec();
    t.sort();
    format!(
        "median {}, min {}, max {} ({} runs)",
        common::secs(t[t.len() / 2]),
        common::secs(t[0]),
        common::secs(t[t.len() - 1]),
        t.len()
    )
}
