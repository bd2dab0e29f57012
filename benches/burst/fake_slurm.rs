//! The fake Slurm of `benches/burst.rs`: the bench executable itself, called through
//! symlinks named `sbatch`, `squeue`, `sacct`, `sinfo`, `scancel` and `scontrol` in a
//! bin directory that the daemon's `[slurm] bin_dir` points at. A Rust process starts in
//! about a millisecond, so 10,000 jobs cost what the daemon does with them, not what an
//! interpreter's start-up costs.
//!
//! Everything lives in the symlinks' directory (found from `argv[0]`, since the daemon
//! clears sbatch's environment):
//! - `jobs.txt`, one job a line, `JOBID|STATE|EXIT|PARTITION|COMMENT[|UID]`, which the
//!   bench rewrites (write and rename) between phases; sbatch appends the jobs it creates,
//!   with the uid it ran as (a line without one is the built store's owner, the user running the bench);
//! - `calls.log`, where every call appends one line, `START_UNIX_SECS NAME IDS WALL_US PPID`
//!   (IDS: how many job ids the call was asked about; PPID: the daemon that ran it, when
//!   two share the fake), in one `O_APPEND` write;
//! - `next_id`, sbatch's counter (under `flock`), and `sbatch_delay_ms`, an optional
//!   sleep that makes sbatch as slow as a real one.
//!
//! Answers follow docs/slurm-observed.md: squeue lists only queued jobs (ended ones are
//! past MinJobAge), and one unknown id alone is `Invalid job id specified`, exit 1; sacct
//! prints the job row and, once ended, its `.batch` step.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The commands the fake answers to.
pub const COMMANDS: &[&str] = &["sbatch", "squeue", "sacct", "sinfo", "scancel", "scontrol"];

/// Runs as a fake command when the process was called by one of their names; returns
/// None otherwise (the process is the bench itself).
pub fn dispatch() -> Option<i32> {
    let argv0 = PathBuf::from(std::env::args_os().next()?);
    let name = argv0.file_name()?.to_str()?.to_string();
    if !COMMANDS.contains(&name.as_str()) {
        return None;
    }
    let here = argv0.parent().map(Path::to_path_buf).unwrap_or_default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let t = Instant::now();
    let mut out = String::new();
    let mut err = String::new();
    let (code, ids) = match name.as_str() {
        "squeue" => squeue(&here, &args, &mut out, &mut err),
        "sacct" => sacct(&here, &args, &mut out),
        "sinfo" => {
            out.push_str("debug|30:00\ngpu|2-00:00:00\n");
            (0, 0)
        }
        "sbatch" => sbatch(&here, &args, &mut out),
        "scancel" => (0, args.len()),
        // `scontrol show config`: cluster mode learns the Slurm cluster's name at start.
        "scontrol" if args.first().is_some_and(|a| a == "show") => {
            out.push_str(
                "Configuration data as of 2026-11-26T00:00:00\nClusterName             = bench\n",
            );
            (0, 0)
        }
        _ => (0, 0),
    };
    let _ = std::io::stdout().write_all(out.as_bytes());
    let _ = std::io::stderr().write_all(err.as_bytes());
    // The caller's pid last: several daemons may share one fake Slurm (cluster mode).
    let line = format!(
        "{:.6} {name} {ids} {} {}\n",
        start.as_secs_f64(),
        t.elapsed().as_micros(),
        std::os::unix::process::parent_id()
    );
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(here.join("calls.log"))
    {
        let _ = f.write_all(line.as_bytes());
    }
    Some(code)
}

/// The value of `--NAME=V` or `--NAME V`.
fn opt<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let long = format!("--{name}");
    let eq = format!("--{name}=");
    let mut val = None;
    for (i, a) in args.iter().enumerate() {
        if let Some(v) = a.strip_prefix(&eq) {
            val = Some(v);
        } else if *a == long {
            val = args.get(i + 1).map(String::as_str);
        }
    }
    val
}

struct Job<'a> {
    state: &'a str,
    exit: &'a str,
    partition: &'a str,
    comment: &'a str,
    uid: u32,
}

/// The owner of the bench's built store (`benches/common`: the user who runs the bench),
/// for lines without a uid.
fn store_owner() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

fn jobs(text: &str) -> HashMap<&str, Job<'_>> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(6, '|');
            Some((
                f.next()?,
                Job {
                    state: f.next()?,
                    exit: f.next()?,
                    partition: f.next()?,
                    comment: f.next().unwrap_or(""),
                    uid: f
                        .next()
                        .and_then(|u| u.parse().ok())
                        .unwrap_or_else(store_owner),
                },
            ))
        })
        .collect()
}

fn queued(state: &str) -> bool {
    matches!(state, "PENDING" | "RUNNING")
}

fn squeue(here: &Path, args: &[String], out: &mut String, err: &mut String) -> (i32, usize) {
    use std::fmt::Write;
    let text = std::fs::read_to_string(here.join("jobs.txt")).unwrap_or_default();
    let all = jobs(&text);
    let tags = opt(args, "format").is_some_and(|f| f.contains("%k"));
    let pending_too = opt(args, "format").is_some_and(|f| f.contains("%E"));
    // `--only-job-state` (Slurm 23.11.5 on): ids and state alone.
    let only_state = args.iter().any(|a| a == "--only-job-state");
    let row = |out: &mut String, id: &str, j: &Job| {
        if only_state {
            let _ = writeln!(out, "{id}|{id}|{}", j.state);
            return;
        }
        let node = if j.state == "RUNNING" { "gpu017" } else { "" };
        let reason = if j.state == "RUNNING" {
            "None"
        } else {
            "Priority"
        };
        if tags {
            // A tag lookup: `%i|%A|%k`.
            let _ = writeln!(out, "{id}|{id}|{}", j.comment);
        } else if pending_too {
            // The poll that reads pending jobs too: `%i|%A|%T|%r|%N|%U|%u|%E`; the
            // bench's jobs wait on nothing.
            let _ = writeln!(
                out,
                "{id}|{id}|{}|{reason}|{node}|{}|alice|(null)",
                j.state, j.uid
            );
        } else {
            // The poll: `%i|%A|%T|%r|%N|%U`, nothing a user wrote.
            let _ = writeln!(out, "{id}|{id}|{}|{reason}|{node}|{}", j.state, j.uid);
        }
    };
    if opt(args, "states") == Some("PENDING") {
        // Pending jobs with their dependencies (rewiring after a retry): the bench's
        // jobs wait on nothing.
        return (0, 0);
    }
    let Some(ids) = opt(args, "jobs") else {
        // By user (a tag lookup): every queued job.
        for (id, j) in all.iter().filter(|(_, j)| queued(j.state)) {
            row(out, id, j);
        }
        return (0, 0);
    };
    let ids: Vec<&str> = ids.split(',').filter(|s| !s.is_empty()).collect();
    // (With --only-job-state an unknown id is simply absent.)
    if ids.len() == 1 && !only_state && !all.get(ids[0]).is_some_and(|j| queued(j.state)) {
        err.push_str("slurm_load_jobs error: Invalid job id specified\n");
        return (1, 1);
    }
    for id in &ids {
        if let Some(j) = all.get(id).filter(|j| queued(j.state)) {
            row(out, id, j);
        }
    }
    (0, ids.len())
}

fn sacct(here: &Path, args: &[String], out: &mut String) -> (i32, usize) {
    use std::fmt::Write;
    let Some(ids) = opt(args, "jobs") else {
        // By user since a time (a tag lookup): the bench's jobs are not looked up so.
        return (0, 0);
    };
    // The poll's columns end in UID and Submit; the fake keeps no submit time (an empty
    // one: every run of a job id is that job's).
    let text = std::fs::read_to_string(here.join("jobs.txt")).unwrap_or_default();
    let all = jobs(&text);
    let ids: Vec<&str> = ids.split(',').filter(|s| !s.is_empty()).collect();
    for id in &ids {
        let Some(j) = all.get(id) else { continue };
        let _ = writeln!(
            out,
            "{id}|{id}|{}|{}|gpu017||16G|04:00:00|01:00:00|{}|{}|",
            j.state, j.exit, j.partition, j.uid
        );
        if !queued(j.state) {
            // The batch step of a timed-out job is cancelled by the signal.
            let (state, exit) = if j.state == "TIMEOUT" {
                ("CANCELLED", "0:15")
            } else {
                (j.state, j.exit)
            };
            let _ = writeln!(
                out,
                "{id}.batch|{id}.batch|{state}|{exit}|gpu017|9437184K|||01:00:00|||"
            );
        }
    }
    (0, ids.len())
}

fn sbatch(here: &Path, args: &[String], out: &mut String) -> (i32, usize) {
    use std::os::fd::AsRawFd;
    let Ok(lock) = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(here.join("sbatch.lock"))
    else {
        return (1, 0);
    };
    // SAFETY: flock on a descriptor we own; released when it is closed.
    unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    let counter = here.join("next_id");
    let id: u64 = std::fs::read_to_string(&counter)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(50_000_000);
    let _ = std::fs::write(&counter, format!("{}\n", id + 1));
    let comment = opt(args, "comment").unwrap_or("").replace(['\n', '|'], " ");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .open(here.join("jobs.txt"))
    {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let _ = f.write_all(format!("{id}|RUNNING|0:0|gpu|{comment}|{uid}\n").as_bytes());
    }
    drop(lock);
    let delay: u64 = std::fs::read_to_string(here.join("sbatch_delay_ms"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if delay > 0 {
        std::thread::sleep(std::time::Duration::from_millis(delay));
    }
    out.push_str(&format!("{id}\n"));
    (0, 0)
}

/// One line of `calls.log`.
#[derive(Debug, Clone)]
pub struct Call {
    pub start: f64,
    pub name: String,
    pub ids: usize,
    pub wall_us: u64,
    /// The process that ran the command (the daemon).
    pub ppid: u32,
}

/// Reads `calls.log` (a line being written is skipped).
pub fn calls(bin: &Path) -> Vec<Call> {
    let text = std::fs::read_to_string(bin.join("calls.log")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            Some(Call {
                start: f.next()?.parse().ok()?,
                name: f.next()?.to_string(),
                ids: f.next()?.parse().ok()?,
                wall_us: f.next()?.parse().ok()?,
                ppid: f.next().and_then(|p| p.parse().ok()).unwrap_or(0),
            })
        })
        .collect()
}

/// Makes the bin directory: symlinks to this executable, an empty job list.
pub fn install(bin: &Path) {
    std::fs::create_dir_all(bin).unwrap();
    let me = std::env::current_exe().expect("the bench's own path");
    for name in COMMANDS {
        let link = bin.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&me, &link).unwrap();
    }
    write_jobs(bin, "");
}

/// Replaces the job list at once (write and rename), so no call sees half of it.
pub fn write_jobs(bin: &Path, text: &str) {
    let tmp = bin.join("jobs.txt.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, bin.join("jobs.txt")).unwrap();
}
