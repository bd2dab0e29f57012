//! Shared harness for the end-to-end tests: a daemon in a temporary state directory,
//! `supervisorctl` as a user would run it, and waiting for chains to reach a state.
#![allow(dead_code)]

pub mod fake;
pub mod munged;
pub mod netns;
pub mod system;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const DAEMON: &str = env!("CARGO_BIN_EXE_slurm-supervisord");
pub const CTL: &str = env!("CARGO_BIN_EXE_supervisorctl");

/// A running daemon with its own state directory; killed when dropped.
pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub child: Option<Child>,
    pub extra_env: Vec<(String, String)>,
    /// A command the daemon is started under (e.g. `setpriv --bounding-set ...`), empty
    /// for none.
    pub launcher: Vec<String>,
}

impl Daemon {
    /// Writes a config with fast polling and short backoffs (`extra` is appended) and
    /// starts the daemon.
    pub fn start(extra: &str) -> Daemon {
        Self::start_with_env(extra, &[])
    }

    pub fn start_with_env(extra: &str, env: &[(&str, &str)]) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("ssv-test-")
            .tempdir_in(scratch_root())
            .expect("temp dir");
        let config = dir.path().join("supervisor.toml");
        let text = format!(
            "state_dir = {:?}\npoll_interval = \"1s\"\n{extra}\n",
            dir.path().join("state").display().to_string()
        );
        // The usual transient rule, as in config/supervisor.toml.
        let text = if text.contains("[[rules]]") {
            text
        } else {
            format!("{text}\n[[rules]]\nname = \"connection-refused\"\nkind = \"transient\"\nstderr = '(?i)connection refused'\n")
        };
        let text = if text.contains("[retry]") {
            text
        } else {
            format!("{text}\n[retry]\nbackoff_initial = \"1s\"\nbackoff_max = \"2s\"\nbackoff_jitter = 0.0\n")
        };
        // Chain-level mail only where a test asks for it (tests/notify.rs,
        // real_slurm_mail.rs): the others would mail root through whatever /usr/bin/mail
        // the machine has.
        let text = if text.contains("[notify]") {
            text
        } else {
            format!("{text}\n[notify]\nmail = false\n")
        };
        let text = with_slurm_bin_dir(text);
        std::fs::write(&config, text).expect("write config");
        let mut d = Daemon {
            dir,
            config,
            child: None,
            launcher: Vec::new(),
            extra_env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        d.spawn();
        d
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn work_dir(&self) -> PathBuf {
        let p = self.dir.path().join("work");
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// Starts (or restarts) the daemon process and waits for its socket to answer.
    pub fn spawn(&mut self) {
        self.spawn_unwaited();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.ctl(&["status", "--json"]).status.success() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "slurm-supervisord exited early ({status}); log:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "daemon did not answer within 60s; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts (or restarts) the daemon process, and returns at once.
    pub fn spawn_unwaited(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("daemon.log"))
            .unwrap();
        let mut cmd = match self.launcher.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(DAEMON);
                c
            }
            None => Command::new(DAEMON),
        };
        cmd.arg("--config")
            .arg(&self.config)
            .env("SLURM_SUPERVISOR_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(log);
        // A daemon whose config names no bin_dir (system_mode.rs writes its own) finds
        // Slurm's commands on PATH: put the selected cluster's first.
        if let Some(dir) = slurm_bin_dir() {
            let path = std::env::var_os("PATH").unwrap_or_default();
            let mut dirs = vec![dir];
            dirs.extend(std::env::split_paths(&path));
            cmd.env("PATH", std::env::join_paths(dirs).unwrap());
        }
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("start slurm-supervisord"));
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits until the daemon dies by itself (a failpoint); panics after `within`.
    pub fn wait_dead(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        let child = self.child.as_mut().expect("daemon running");
        while child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "the daemon did not die within {within:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        self.child = None;
    }

    /// SIGTERM and wait for a clean exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("daemon running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        c.wait().unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    pub fn ctl(&self, args: &[&str]) -> Output {
        self.ctl_in(args, &std::env::temp_dir())
    }

    pub fn ctl_in(&self, args: &[&str], cwd: &Path) -> Output {
        Command::new(CTL)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .output()
            .expect("run supervisorctl")
    }

    /// `supervisorctl submit -- <args>` in the work dir; returns the job id it printed.
    pub fn submit(&self, args: &[&str]) -> String {
        self.submit_with(&[], args)
    }

    /// `supervisorctl submit <opts> -- <args>` in the work dir; returns the job id it printed.
    pub fn submit_with(&self, opts: &[&str], args: &[&str]) -> String {
        let mut all = vec!["submit"];
        all.extend_from_slice(opts);
        all.push("--");
        all.extend_from_slice(args);
        let out = self.ctl_in(&all, &self.work_dir());
        assert!(
            out.status.success(),
            "submit failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert!(
            !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()),
            "submit printed {id:?}"
        );
        id
    }

    /// A read command's JSON. Exit code 1 is allowed: `status ID` says so when the chain failed.
    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.ctl(args);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{args:?} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    pub fn status(&self, id: &str) -> Vec<Value> {
        self.json(&["status", "--json", id])
            .as_array()
            .cloned()
            .unwrap()
    }

    pub fn history(&self, id: &str) -> Value {
        self.json(&["history", "--json", id])
    }

    /// Waits until every chain of `id` is in `state`; panics with the history otherwise.
    pub fn wait_state(&self, id: &str, state: &str, within: Duration) -> Vec<Value> {
        let deadline = Instant::now() + within;
        loop {
            let rows = self.status(id);
            if !rows.is_empty() && rows.iter().all(|r| r["state"] == state) {
                return rows;
            }
            if Instant::now() > deadline {
                panic!(
                    "{id} did not reach {state} within {within:?}: {rows:#?}\nhistory: {:#}\nlog tail:\n{}",
                    self.history(id),
                    tail(&self.log(), 60)
                );
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    pub fn write_script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.work_dir().join(name);
        std::fs::write(&p, format!("#!/bin/bash\n{body}\n")).unwrap();
        p
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "daemon log ({}):\n{}",
                self.dir.path().display(),
                tail(&self.log(), 200)
            );
            // Keep the directory for a post-mortem.
            let p = self.dir.path().to_path_buf();
            std::mem::forget(std::mem::replace(
                &mut self.dir,
                tempfile::tempdir().unwrap(),
            ));
            eprintln!("kept {}", p.display());
        }
    }
}

/// Waits until `f` holds (a fact: a state, a row, a file); panics naming `what` after `within`.
pub fn wait_for(what: &str, within: Duration, f: impl FnMut() -> bool) {
    wait_for_every(what, within, Duration::from_millis(300), f)
}

/// [`wait_for`], looking every `every` (a local server's answer: often).
pub fn wait_for_every(what: &str, within: Duration, every: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(every);
    }
}

/// The job row's State in sacct (`-X`), empty while sacct does not have it yet.
pub fn sacct_state(job: &str) -> String {
    sacct_field(job, "State")
}

/// One field of a job's sacct row (`-X`; the last run's), e.g. `Start`, `End`, `State`;
/// empty while sacct does not have it yet.
pub fn sacct_field(job: &str, field: &str) -> String {
    run(
        "sacct",
        &[
            "--parsable2",
            "--noheader",
            "-X",
            "-j",
            job,
            &format!("--format={field}"),
        ],
    )
    .lines()
    .last()
    .unwrap_or_default()
    .trim()
    .to_string()
}

impl Daemon {
    /// Waits until the daemon has seen `job` RUNNING in squeue.
    pub fn wait_seen_running(&self, job: &str, within: Duration) {
        wait_for(&format!("the daemon to see {job} running"), within, || {
            self.status(job)
                .first()
                .is_some_and(|r| r["slurm_state"] == "RUNNING")
        });
    }
}

pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `content` written to `path` as an executable (mode 0755) by a child `install`, never
/// by this process. A file this process holds open for writing is inherited, for a moment,
/// by every child another test thread forks meanwhile (between its fork and its exec), and
/// executing the file in that moment fails with ETXTBSY ("Text file busy"). A file written
/// by another process is never open for writing here. Every test that runs a program it
/// wrote goes through this or [`copy_executable`].
pub fn write_executable(path: &Path, content: impl AsRef<[u8]>) {
    use std::io::Write;
    let mut child = Command::new("install")
        .args(["-m", "0755", "/dev/stdin"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .expect("run install");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(content.as_ref())
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "install of {} failed", path.display());
}

/// `src` copied to `dst` as an executable (mode 0755) by a child `install`, never by this
/// process (see [`write_executable`]).
pub fn copy_executable(src: &Path, dst: &Path) {
    let status = Command::new("install")
        .args(["-m", "0755"])
        .arg(src)
        .arg(dst)
        .status()
        .expect("run install");
    assert!(status.success(), "install of {} failed", dst.display());
}

/// Where test state goes: under /tmp, which the Slurm job steps can write to.
pub fn scratch_root() -> PathBuf {
    let p = PathBuf::from("/tmp/ssv-tests");
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// The environment variable that says which real Slurm the end-to-end tests use:
/// `22.05` (the default: Debian 12's Slurm on the host, commands on PATH) or `24.11`
/// (Debian trixie's Slurm in the root of `scripts/dev-cluster up --slurm 24.11`, commands
/// in [`SLURM_2411_BIN`]). Every Slurm command the tests run themselves, and every
/// daemon they start, goes to that cluster.
pub const SLURM_VERSION_VAR: &str = "SSV_TEST_SLURM";

/// Where `scripts/dev-cluster up --slurm 24.11` puts the 24.11 client commands.
pub const SLURM_2411_BIN: &str = "/opt/slurm-24.11/bin";

/// Slurm's client commands, which [`run`] sends to the selected cluster.
const SLURM_COMMANDS: &[&str] = &[
    "sacct", "sacctmgr", "salloc", "sbatch", "scancel", "scontrol", "sinfo", "squeue", "srun",
];

/// The Slurm version the tests are asked to use (see [`SLURM_VERSION_VAR`]).
pub fn slurm_version() -> &'static str {
    match std::env::var(SLURM_VERSION_VAR).as_deref() {
        Err(_) | Ok("") | Ok("22.05") => "22.05",
        Ok("24.11") => "24.11",
        Ok(other) => panic!("{SLURM_VERSION_VAR}={other:?}: known versions are 22.05 and 24.11"),
    }
}

/// The directory of the selected cluster's Slurm commands, `None` for the host's own (PATH).
pub fn slurm_bin_dir() -> Option<PathBuf> {
    match slurm_version() {
        "24.11" => Some(PathBuf::from(SLURM_2411_BIN)),
        _ => None,
    }
}

/// How to run Slurm command `name` of the selected cluster.
pub fn slurm_cmd(name: &str) -> PathBuf {
    match slurm_bin_dir() {
        Some(dir) => dir.join(name),
        None => PathBuf::from(name),
    }
}

/// A `Command` for Slurm command `name` of the selected cluster.
pub fn slurm(name: &str) -> Command {
    Command::new(slurm_cmd(name))
}

/// The pid file of one of the selected cluster's daemons (`slurmctld`, `slurmdbd`), as
/// `scripts/dev-cluster` writes it.
pub fn slurm_pidfile(daemon: &str) -> PathBuf {
    let root = match slurm_version() {
        "24.11" => {
            std::env::var("DEV_CLUSTER_TRIXIE_ROOT").unwrap_or_else(|_| "/srv/trixie".into())
        }
        _ => String::new(),
    };
    PathBuf::from(format!("{root}/run/slurm/{daemon}.pid"))
}

/// `scripts/dev-cluster up` for the selected cluster: starts whatever of it is not running.
pub fn dev_cluster_up() {
    let script = format!("{}/scripts/dev-cluster", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(script)
        .args(["up", "--slurm", slurm_version()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dev-cluster up --slurm {}: {}",
        slurm_version(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A daemon config with the selected cluster's `[slurm] bin_dir` added, unless it names one.
fn with_slurm_bin_dir(text: String) -> String {
    let Some(dir) = slurm_bin_dir() else {
        return text;
    };
    if text.contains("bin_dir") {
        return text;
    }
    let line = format!("bin_dir = {:?}\n", dir.display().to_string());
    match text.find("[slurm]\n") {
        Some(i) => {
            let at = i + "[slurm]\n".len();
            format!("{}{line}{}", &text[..at], &text[at..])
        }
        None => format!("{text}\n[slurm]\n{line}"),
    }
}

/// Runs a command and returns its stdout; panics with its stderr on failure. Slurm's
/// commands go to the selected cluster (see [`SLURM_VERSION_VAR`]).
pub fn run(cmd: &str, args: &[&str]) -> String {
    let program = if SLURM_COMMANDS.contains(&cmd) {
        slurm_cmd(cmd)
    } else {
        PathBuf::from(cmd)
    };
    let out = Command::new(&program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `program` (no Slurm command: see [`run`]) with its stdin closed; what it did.
pub fn output(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {program}: {e} (scripts/test installs what the tests need)")
        })
}

/// Runs `program` as [`output`] does, and fails the test unless it succeeds; its stdout.
pub fn must(program: &str, args: &[&str]) -> String {
    let out = output(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fails the test unless the selected dev cluster answers and runs the selected Slurm
/// version: real-Slurm tests never skip silently, nor test another version than asked.
pub fn require_slurm() {
    let v = slurm_version();
    let up = format!("`scripts/dev-cluster up --slurm {v}` (or run scripts/test --slurm {v})");
    let out = slurm("sinfo").arg("--noheader").output();
    match out {
        Ok(o) if o.status.success() && !o.stdout.is_empty() => {}
        Ok(o) => panic!(
            "a real Slurm {v} is needed and sinfo failed: {}; bring one up with {up}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "a real Slurm {v} is needed and {} cannot run ({e}); run {up} first",
            slurm_cmd("sinfo").display()
        ),
    }
    // `slurm 22.05.8` (Debian 12), `slurm-wlm 24.11.5` (Debian trixie).
    let version = run("sinfo", &["--version"]);
    assert!(
        version
            .split_whitespace()
            .nth(1)
            .is_some_and(|n| n.starts_with(&format!("{v}."))),
        "{SLURM_VERSION_VAR} asks for Slurm {v} but {} says {version:?}",
        slurm_cmd("sinfo").display()
    );
}

/// Every sacct row of the jobs with this comment substring (to count submissions).
pub fn sacct_jobs_with_comment(needle: &str) -> Vec<String> {
    sacct_rows_with_comment(needle, "JobID,State,Comment")
}

/// Every sacct row (`fields`, `|`-separated, Comment last) of every user's jobs of the
/// last day whose comment holds `needle`.
pub fn sacct_rows_with_comment(needle: &str, fields: &str) -> Vec<String> {
    let out = run(
        "sacct",
        &[
            "--parsable2",
            "--noheader",
            "--allusers",
            "--duplicates",
            "-X",
            "--starttime=now-1days",
            &format!("--format={fields}"),
        ],
    );
    out.lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// A Python with the official `mcp` package (PyPI), from `SSV_MCP_PYTHON` or the venv
/// that scripts/test makes.
pub fn mcp_python() -> PathBuf {
    let p = std::env::var_os("SSV_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/ssv-mcp-venv/bin/python"));
    let ok = Command::new(&p)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "this test needs a Python with the official `mcp` package at {} (or set SSV_MCP_PYTHON); \
         scripts/test makes one, or: /usr/bin/python3 -m venv /opt/ssv-mcp-venv && \
         /opt/ssv-mcp-venv/bin/pip install 'mcp>=2.3,<3'",
        p.display()
    );
    p
}

/// A root daemon in system-wide mode in a fresh directory everyone may pass through
/// (`prefix` names it), with a copy of supervisorctl every user can run, and `extra`
/// appended to its config. Returns it and that copy.
pub fn root_daemon(prefix: &str, extra: &str) -> (Daemon, PathBuf) {
    root_daemon_under(prefix, extra, &[])
}

/// [`root_daemon`], started under `launcher` (a command that then runs the daemon).
pub fn root_daemon_under(prefix: &str, extra: &str, launcher: &[&str]) -> (Daemon, PathBuf) {
    root_daemon_of(prefix, slurm_bin_dir().as_deref(), extra, launcher)
}

/// [`root_daemon`] whose Slurm commands are those in `bin_dir` (a directory of wrappers
/// that misbehave on purpose).
pub fn root_daemon_with_bin(prefix: &str, bin_dir: &Path, extra: &str) -> (Daemon, PathBuf) {
    root_daemon_of(prefix, Some(bin_dir), extra, &[])
}

fn root_daemon_of(
    prefix: &str,
    bin_dir: Option<&Path>,
    extra: &str,
    launcher: &[&str],
) -> (Daemon, PathBuf) {
    use system::chmod;
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(scratch_root())
        .unwrap();
    chmod(dir.path(), 0o755);
    let run_dir = dir.path().join("run");
    std::fs::create_dir(&run_dir).unwrap();
    chmod(&run_dir, 0o755);
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {:?}\nsocket = {:?}\npoll_interval = \"1s\"\n{}[retry]\nbackoff_initial = \"1s\"\nbackoff_jitter = 0.0\n{extra}",
            dir.path().join("state").display().to_string(),
            run_dir.join("supervisor.sock").display().to_string(),
            bin_dir
                .map(|d| format!("[slurm]\nbin_dir = {:?}\n", d.display().to_string()))
                .unwrap_or_default()
        ),
    )
    .unwrap();
    chmod(&config, 0o644);
    let ctl = dir.path().join("supervisorctl");
    copy_executable(Path::new(CTL), &ctl);
    let mut d = Daemon {
        dir,
        config,
        child: None,
        extra_env: Vec::new(),
        launcher: launcher.iter().map(|s| s.to_string()).collect(),
    };
    d.spawn();
    (d, ctl)
}

// Reading a chain's `history --json` (docs/json-schemas.md).

pub fn decisions(h: &Value) -> Vec<Value> {
    h["decisions"].as_array().cloned().unwrap_or_default()
}

pub fn attempts(h: &Value) -> Vec<Value> {
    h["attempts"].as_array().cloned().unwrap_or_default()
}

pub fn reason_codes(h: &Value) -> Vec<String> {
    decisions(h)
        .iter()
        .filter_map(|d| d["reason_code"].as_str().map(str::to_string))
        .collect()
}

/// When the chain's last attempt ended, as sacct says (`2026-11-22T20:01:02`).
pub fn last_end(d: &Daemon, job: &str) -> String {
    let h = d.history(job);
    let last = attempts(&h)
        .last()
        .and_then(|a| a["slurm_job_id"].as_str().map(str::to_string))
        .expect("an attempt");
    sacct_field(&last, "End")
}

/// Touches 150 MiB and holds it. Under a limit below 200M (`SLURM_MEM_PER_NODE`, or
/// `SLURM_MEM_PER_CPU` for one CPU) it waits to be killed for memory, however late the kill
/// comes: the dev cluster's OverMemoryKill sees the step over its limit within a second, but
/// the kill goes through slurmctld and the node's slurmd, and while a `scripts/dev-cluster up`
/// restarts them (another session switching the cluster's settings) slurmstepd's requests go
/// nowhere; it sends them again every second until they land. A fixed hold (it was 4 s)
/// then ended first and the job COMPLETED under 100M. Never killed within 2 minutes, it exits
/// 1 saying so. With 200M or more (the retry's memory) it holds 4 s and succeeds.
macro_rules! hold_150m {
    () => {
        r#"python3 -c 'import os, sys, time
x = b"a" * (150 * 1024 * 1024)
mem = os.environ.get("SLURM_MEM_PER_NODE") or os.environ.get("SLURM_MEM_PER_CPU") or "0"
if int(mem) >= 200:
    time.sleep(4)
    sys.exit(0)
time.sleep(120)
sys.exit("held 150 MiB for 120 s over a limit of %sM and was not killed for memory" % mem)' || exit 1"#
    };
}
pub const HOLD_150M: &str = hold_150m!();

/// A job that runs out of its 100M once, then completes with the retry's memory.
pub const OOM_ONCE: &str = concat!(hold_150m!(), "\necho done");

/// A plain sbatch job (not supervised) in the daemon's work directory.
pub fn plain_sbatch(d: &Daemon, args: &[&str]) -> String {
    let dir = d.work_dir().display().to_string();
    let mut all = vec!["--parsable", "--chdir", &dir, "-o", "/dev/null"];
    all.extend_from_slice(args);
    run("sbatch", &all).trim().to_string()
}

/// Whether the job ever ran. Not sacct's `Start`: 22.05 sets it to the cancel time of a
/// job Slurm cancelled for its dependency while it waited (24.11 leaves it `None`).
pub fn ran(job: &str) -> bool {
    sacct_field(job, "NodeList") != "None assigned"
}

/// A supervised job waiting `afterok` on one that fails oddly (its chain waits for a
/// person) is cancelled by Slurm for its dependency: the supervisor records that, keeps
/// the job `ready`, and resubmits it when a person has the upstream retried; it runs once,
/// after the retry. `down_args` are the waiting job's extra sbatch options
/// (`--kill-on-invalid-dep=yes` asks per job what `kill_invalid_depend` asks of all).
pub fn a_job_slurm_cancelled_for_its_dependency_comes_back(down_args: &[&str]) {
    const MIN: Duration = Duration::from_secs(60);
    let d = Daemon::start("");
    // Fails oddly the first time (the chain waits for a person), works once retried: so
    // Slurm has surely cancelled the waiting job before the upstream is retried.
    d.write_script(
        "odd.sh",
        "if [ -e marker ]; then echo ok; exit 0; fi\ntouch marker\necho 'the frobnicator is out of phase' >&2\nexit 1",
    );
    let up = d.submit(&["--job-name=ssv-pipe-up", "odd.sh"]);
    let after = format!("--dependency=afterok:{up}");
    let mut args = down_args.to_vec();
    args.extend([after.as_str(), "--job-name=ssv-pipe-killed", "--wrap=true"]);
    let down = d.submit(&args);
    d.wait_state(&up, "pending_failed", 3 * MIN);
    wait_for(
        "Slurm's cancel to be recorded as one for the dependency",
        2 * MIN,
        || reason_codes(&d.history(&down)).contains(&"killed_for_dependency".into()),
    );
    assert!(!ran(&down), "Slurm cancelled it before it ran");
    assert_eq!(
        d.status(&down)[0]["state"],
        "ready",
        "waits for the upstream's retry"
    );
    let out = d.ctl(&[
        "classify",
        &up,
        "--action",
        "retry",
        "--reason",
        "marker exists now",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    d.wait_state(&up, "completed", 3 * MIN);
    d.wait_state(&down, "completed", 3 * MIN);
    let h = d.history(&down);
    let a = attempts(&h);
    assert_eq!(a.len(), 2, "{h:#}");
    assert!(
        a[0]["slurm_state"]
            .as_str()
            .unwrap_or_default()
            .starts_with("CANCELLED"),
        "{h:#}"
    );
    let start = sacct_field(a[1]["slurm_job_id"].as_str().unwrap(), "Start");
    let up_end = last_end(&d, &up);
    assert!(
        start >= up_end,
        "started at {start}, before the retry ended at {up_end}"
    );
}

/// Makes `cmd` run with `mask` as its umask (a user's shell setting).
pub fn with_umask(cmd: &mut Command, mask: libc::mode_t) {
    use std::os::unix::process::CommandExt;
    // SAFETY: umask is async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(mask);
            Ok(())
        });
    }
}
