//! The real Slurm commands, run as child processes with timeouts.
//!
//! No shell is involved: every argument goes to the command as one argv element, so a
//! job name with quotes or `$()` is carried byte for byte. stdout and stderr are read
//! concurrently (a child that fills one pipe cannot block), and stderr is kept as
//! evidence in every error.

use super::parse::{self, Parsed};
use super::spawn::{Command, Credentials};
use super::types::{PendingRow, SacctRow, SqueueRow, StateRow, TagRow};
use super::{RunAs, SbatchRequest, Slurm, SlurmError};
use crate::config::SlurmConfig;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Texts Slurm's clients print when they could not get an answer; anything else from a
/// failing command is taken as Slurm's refusal.
const UNAVAILABLE_MARKERS: &[&str] = &[
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Connection timed out",
    "Problem talking to the database",
    "slurmdbd",
    "Transport endpoint",
    "temporarily unable",
    "Slurm backup controller in standby mode",
    "Zero Bytes were transmitted or received",
    "Communication connection failure",
    "Resource temporarily unavailable",
    // sacct 24.11 with slurmdbd down, before its "Problem talking to the database".
    "_open_persist_conn",
    "Sending PersistInit msg",
    // Rate limiting (rl_enable, 23.02 on): clients print these and retry by themselves
    // without bound (the command timeout stops them); 24.05 on may answer "retry later".
    "Rate limit exceeded",
    "RPC rate limited",
    "retry later",
    "try again later",
];

/// What Slurm says of an id it does not (or no longer) know: squeue when only one id is
/// asked, scontrol, scancel.
pub(crate) const INVALID_JOB_ID: &str = "Invalid job id specified";

/// The most a Slurm command may print on stdout or stderr before it is stopped.
const MAX_OUTPUT: u64 = 64 << 20;

/// Job ids per `scontrol release` call: bounds argv length.
const RELEASE_CHUNK: usize = 5000;

/// The longest `--jobs=` list one query is given, in bytes: far below what a command line
/// may hold, so a chunk is a few thousand ids whatever their length.
const MAX_JOBS_ARG: usize = 64 << 10;

/// `ids` cut into lists of at most `max_ids` ids and `MAX_JOBS_ARG` bytes each (joined by
/// commas), in order.
fn id_chunks(ids: &[String], max_ids: usize) -> Vec<&[String]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, id) in ids.iter().enumerate() {
        let add = id.len() + 1;
        if i > start && (i - start >= max_ids.max(1) || bytes + add > MAX_JOBS_ARG) {
            out.push(&ids[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += add;
    }
    if start < ids.len() {
        out.push(&ids[start..]);
    }
    out
}

/// Told of every Slurm command [`SlurmCli`] ran, as it ends: the command's name
/// (`sbatch`), whether it exited 0 (false for a non-zero exit, a signal, a timeout or a
/// failure to start it), and how long it took. The daemon passes its metrics' counter
/// (`daemon_main`); the slurm layer knows nothing of who listens.
pub type CommandObserver = fn(command: &str, ok: bool, elapsed: Duration);

/// The observer of a [`SlurmCli`] no one observes.
fn unobserved(_command: &str, _ok: bool, _elapsed: Duration) {}

/// Runs Slurm's own commands.
#[derive(Debug, Clone)]
pub struct SlurmCli {
    bin_dir: Option<PathBuf>,
    timeout: Duration,
    sbatch_timeout: Duration,
    sacct_chunk: usize,
    observer: CommandObserver,
    /// Whether this squeue's `--only-job-state` (Slurm 23.11.5 on) is used: the failures in
    /// a row so far, or [`ONLY_STATE_NO`] once a squeue refused it (`unrecognized option`)
    /// or it failed that many times in a row. Shared by the clones (the same commands).
    only_state: std::sync::Arc<std::sync::atomic::AtomicU8>,
}

/// `SlurmCli::only_state` at which the full listing is used for good.
const ONLY_STATE_NO: u8 = 3;

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn status(&self) -> String {
        match self.code {
            Some(c) => format!("exit code {c}"),
            None => "killed by a signal".into(),
        }
    }
}

fn trim_evidence(s: &str) -> String {
    const MAX: usize = 4000;
    let t = s.trim();
    if t.len() <= MAX {
        return t.to_string();
    }
    format!(
        "{}... ({} bytes in all)",
        crate::osbytes::truncate(t, MAX),
        t.len()
    )
}

impl SlurmCli {
    pub fn new(config: &SlurmConfig) -> Self {
        SlurmCli {
            bin_dir: config.bin_dir.clone(),
            timeout: config.command_timeout,
            sbatch_timeout: config.sbatch_timeout,
            sacct_chunk: config.sacct_chunk,
            observer: unobserved,
            only_state: Default::default(),
        }
    }

    /// The same, telling `observer` of every command it runs.
    pub fn observed_by(self, observer: CommandObserver) -> Self {
        SlurmCli { observer, ..self }
    }

    fn program(&self, name: &str) -> PathBuf {
        match &self.bin_dir {
            Some(d) => d.join(name),
            None => find_on_path(name).unwrap_or_else(|| PathBuf::from(name)),
        }
    }

    /// Runs one Slurm command, and tells the observer of it (the daemon counts it for its
    /// metrics): every command goes through here.
    async fn run(
        &self,
        name: &str,
        args: &[impl AsRef<std::ffi::OsStr>],
        timeout: Duration,
        setup: impl FnOnce(&mut Command) -> std::io::Result<()>,
        stdin: Option<&[u8]>,
    ) -> Result<Ran, SlurmError> {
        let start = std::time::Instant::now();
        let ran = self.run_unmetered(name, args, timeout, setup, stdin).await;
        let ok = matches!(&ran, Ok(r) if r.code == Some(0));
        (self.observer)(name, ok, start.elapsed());
        ran
    }

    async fn run_unmetered(
        &self,
        name: &str,
        args: &[impl AsRef<std::ffi::OsStr>],
        timeout: Duration,
        setup: impl FnOnce(&mut Command) -> std::io::Result<()>,
        stdin: Option<&[u8]>,
    ) -> Result<Ran, SlurmError> {
        let program = self.program(name);
        let spawn_error = |source| SlurmError::Spawn {
            command: program.display().to_string(),
            source,
        };
        // Started without copying the daemon (`spawn`): a fork of the daemon for every
        // command was a third of its time in a burst of submits.
        let mut cmd = Command::new(&program);
        cmd.args(args);
        if stdin.is_some() {
            cmd.stdin_piped();
        }
        // `setup` may make it run as a user; `spawn` sets PDEATHSIG after that, because
        // changing credentials clears it.
        setup(&mut cmd).map_err(spawn_error)?;
        // If the daemon dies (kill -9), its Slurm commands die with it, so an orphaned
        // sbatch cannot create a job after the restarted daemon looked for its tag. The
        // starter threads that clone them live as long as the process (PDEATHSIG watches
        // the thread that started the child; `spawn`'s module docs).
        cmd.parent_death_kill();
        // The timeout bounds the whole wait, the start included: a start waits its turn
        // behind the same user's (`spawn`: one at a time, each held up to EXEC_DEADLINE),
        // and this may run on the daemon's loop (a cycle's scancel). Cut short, a start
        // may have reached the program (it is then killed): no answer, not a refusal.
        let deadline = tokio::time::Instant::now() + timeout;
        let timed_out = || SlurmError::Timeout {
            command: name.into(),
            secs: timeout.as_secs(),
        };
        // Dropped before it was waited for (a timeout), the child is killed and reaped.
        // A start that never got going is the user's doing (held, or behind their held
        // ones), not Slurm's.
        let mut child = tokio::time::timeout_at(deadline, cmd.spawn())
            .await
            .map_err(|_| SlurmError::Held {
                command: name.into(),
                secs: timeout.as_secs(),
            })?
            .map_err(|e| not_started(name, e).unwrap_or_else(spawn_error))?;
        let (stdin_pipe, mut out_pipe, mut err_pipe) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let feed = async {
            if let (Some(data), Some(mut pipe)) = (stdin, stdin_pipe) {
                // A child that exits without reading its stdin is not an error of ours.
                let _ = pipe.write_all(data).await;
            }
        };
        // Both pipes are read at once, each only up to MAX_OUTPUT: a command that prints
        // without end cannot exhaust the daemon's memory. Past the limit the child is
        // killed, so the other pipe closes and reading ends.
        let collect = async {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let stop = || child.kill();
            let read_out = async {
                if let Some(p) = out_pipe.as_mut() {
                    p.take(MAX_OUTPUT + 1).read_to_end(&mut out).await?;
                    if out.len() as u64 > MAX_OUTPUT {
                        stop();
                    }
                }
                Ok::<_, std::io::Error>(())
            };
            let read_err = async {
                if let Some(p) = err_pipe.as_mut() {
                    p.take(MAX_OUTPUT + 1).read_to_end(&mut err).await?;
                    if err.len() as u64 > MAX_OUTPUT {
                        stop();
                    }
                }
                Ok::<_, std::io::Error>(())
            };
            let read_both = async {
                let (a, b) = tokio::join!(read_out, read_err);
                a.and(b)
            };
            let over = |out: &Vec<u8>, err: &Vec<u8>| {
                out.len() as u64 > MAX_OUTPUT || err.len() as u64 > MAX_OUTPUT
            };
            let ((), read) = tokio::join!(feed, read_both);
            read?;
            if over(&out, &err) {
                let _ = child.wait().await;
                return Ok((None, out, err));
            }
            let status = child.wait().await?;
            Ok::<_, std::io::Error>((Some(status), out, err))
        };
        let (status, stdout, stderr) = match tokio::time::timeout_at(deadline, collect).await {
            // The command was started: whatever failed now, it may have done its work.
            Ok(r) => r.map_err(|source| SlurmError::Io {
                command: name.into(),
                source,
            })?,
            Err(_) => return Err(timed_out()),
        };
        let Some(status) = status else {
            return Err(SlurmError::Garbage {
                command: name.into(),
                message: format!("printed more than {MAX_OUTPUT} bytes; it was stopped"),
            });
        };
        Ok(Ran {
            code: status.code(),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }

    fn failure(name: &str, ran: &Ran) -> SlurmError {
        let stderr = trim_evidence(&ran.stderr);
        if UNAVAILABLE_MARKERS.iter().any(|m| ran.stderr.contains(m)) || ran.code.is_none() {
            SlurmError::Unavailable {
                command: name.into(),
                status: ran.status(),
                stderr,
            }
        } else {
            SlurmError::Rejected {
                command: name.into(),
                status: ran.status(),
                code: ran.code.unwrap_or(1),
                stderr,
            }
        }
    }

    /// squeue with the tag lookups' format, for the jobs `filter` selects (`--user=`,
    /// `--jobs=`).
    async fn squeue_tags_of(&self, filter: String) -> Result<Parsed<TagRow>, SlurmError> {
        let args = vec![
            "--noheader".into(),
            "--states=all".into(),
            "--array".into(),
            format!("--format={}", parse::TAG_SQUEUE_FORMAT),
            filter,
        ];
        check_squeue_with(self.query("squeue", args).await?, parse::parse_tags)
    }

    /// A query whose times are printed as seconds since the epoch (`SLURM_TIME_FORMAT=%s`,
    /// whatever the daemon's own environment says), as [`parse::SACCT_FIELDS`] reads them.
    async fn query_epoch_times(&self, name: &str, args: Vec<String>) -> Result<Ran, SlurmError> {
        let env: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os()
            .filter(|(k, _)| k != "SLURM_TIME_FORMAT")
            .chain([("SLURM_TIME_FORMAT".into(), "%s".into())])
            .collect();
        self.run(
            name,
            &args,
            self.timeout,
            |cmd| {
                cmd.env_clear_with(env);
                Ok(())
            },
            None,
        )
        .await
    }

    async fn query(&self, name: &str, args: Vec<String>) -> Result<Ran, SlurmError> {
        let ran = self
            .run(name, &args, self.timeout, |_| Ok(()), None)
            .await?;
        Ok(ran)
    }
}

/// A start that may have reached the program after all: the watchdog killed a child held
/// before `execve` (`spawn::EXEC_DEADLINE`), and a child killed at that instant may just
/// have started it; or the start failed after the program started (`spawn::may_have_run`:
/// its thread failed, or its pipes could not be registered). For sbatch that is "no
/// answer" (its tag is looked up), never "it certainly did not run" (`Spawn`), which would
/// let a retry submit it twice.
fn not_started(name: &str, e: std::io::Error) -> Result<SlurmError, std::io::Error> {
    if super::spawn::may_have_run(&e) {
        return Ok(SlurmError::Io {
            command: name.into(),
            source: e,
        });
    }
    if e.kind() == std::io::ErrorKind::TimedOut {
        return Ok(SlurmError::Held {
            command: name.into(),
            secs: super::spawn::EXEC_DEADLINE.as_secs(),
        });
    }
    Err(e)
}

/// Makes the child run as `who` (groups, gid, uid, in that order), then enter `cwd` as that
/// user, so a directory the user may not enter is refused as it would be for them. The
/// group list is resolved in the daemon when the child is started (see `spawn`).
fn drop_to(cmd: &mut Command, who: &RunAs, cwd: Option<&Path>) {
    cmd.run_as(Credentials::of(who));
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
}

/// Looks a program up on the daemon's own `$PATH` (never the job's recorded one).
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    super::spawn::find_in(name, &std::env::var_os("PATH")?)
}

fn check_squeue(ran: Ran) -> Result<Parsed<SqueueRow>, SlurmError> {
    check_squeue_with(ran, parse::parse_squeue)
}

fn check_squeue_with<T>(ran: Ran, parse: fn(&str) -> Parsed<T>) -> Result<Parsed<T>, SlurmError> {
    if ran.code == Some(0) {
        return Ok(parse(&ran.stdout));
    }
    if ran.stderr.contains(INVALID_JOB_ID) {
        // The ids asked about are unknown to squeue: finished long ago or never existed.
        // Only sacct can tell which; report them as absent.
        return Ok(Parsed {
            rows: Vec::new(),
            errors: Vec::new(),
        });
    }
    Err(SlurmCli::failure("squeue", &ran))
}

fn check_sacct(ran: Ran) -> Result<Parsed<SacctRow>, SlurmError> {
    check_sacct_with(ran, parse::parse_sacct)
}

fn check_sacct_with<T>(ran: Ran, parse: fn(&str) -> Parsed<T>) -> Result<Parsed<T>, SlurmError> {
    if ran.code == Some(0) {
        return Ok(parse(&ran.stdout));
    }
    // sacct has no "refused" case worth distinguishing: any failure means no answer.
    Err(SlurmError::Unavailable {
        command: "sacct".into(),
        status: ran.status(),
        stderr: trim_evidence(&ran.stderr),
    })
}

impl Slurm for SlurmCli {
    async fn requeue_hold(&self, job_id: &str, run_as: Option<&RunAs>) -> Result<(), SlurmError> {
        self.scontrol_as(&["requeuehold".into(), job_id.into()], run_as)
            .await
    }

    async fn update_job(
        &self,
        job_id: &str,
        fields: &[String],
        run_as: Option<&RunAs>,
    ) -> Result<(), SlurmError> {
        let mut args = vec!["update".to_string(), format!("JobId={job_id}")];
        args.extend(fields.iter().cloned());
        self.scontrol_as(&args, run_as).await
    }

    async fn sbatch(&self, req: &SbatchRequest) -> Result<String, SlurmError> {
        // The user's bytes go back to their raw form here (see `osbytes`).
        use crate::osbytes::to_os;
        let env: Vec<_> = req.env.iter().map(|(k, v)| (to_os(k), to_os(v))).collect();
        let cwd = crate::osbytes::to_path(&req.cwd.to_string_lossy());
        let run_as = req.run_as.clone();
        let argv: Vec<std::ffi::OsString> = req.argv.iter().map(|a| to_os(a)).collect();
        let ran = self
            .run(
                "sbatch",
                &argv,
                self.sbatch_timeout,
                move |cmd| {
                    if let Some(who) = &run_as {
                        drop_to(cmd, who, Some(&cwd));
                    } else {
                        cmd.current_dir(&cwd);
                    }
                    cmd.env_clear_with(env);
                    Ok(())
                },
                req.stdin.as_deref(),
            )
            .await?;
        if ran.code != Some(0) {
            return Err(Self::failure("sbatch", &ran));
        }
        parse::parse_sbatch_parsable(&ran.stdout).map_err(|e| SlurmError::Garbage {
            command: "sbatch".into(),
            message: e.to_string(),
        })
    }

    async fn squeue(&self, job_ids: &[String]) -> Result<Parsed<SqueueRow>, SlurmError> {
        // A squeue of several `--jobs` loads every job (REQUEST_JOB_INFO) and filters before
        // printing: so each call is one controller dump, and its output only the jobs
        // asked about (a listing of every job, `--all --array`, would print one line per
        // pending task of every user's arrays: anyone could make it too big to read).
        // The ids go in as few calls as their length allows (64 KiB of ids, about 8,000
        // jobs, a call); past that, the state-only query (`job_states`) is the one that
        // stays one controller query. One id is a lookup (REQUEST_JOB_INFO_SINGLE).
        // `--local`: no federation query.
        let mut all = Parsed {
            rows: Vec::new(),
            errors: Vec::new(),
        };
        for chunk in id_chunks(job_ids, usize::MAX) {
            let args = vec![
                "--local".into(),
                "--noheader".into(),
                "--states=all".into(),
                "--array".into(),
                format!("--format={}", parse::SQUEUE_FORMAT),
                format!("--jobs={}", chunk.join(",")),
            ];
            let p = check_squeue(self.query("squeue", args).await?)?;
            all.rows.extend(p.rows);
            all.errors.extend(p.errors);
        }
        Ok(all)
    }

    async fn job_states(&self, job_ids: &[String]) -> Result<Option<Parsed<StateRow>>, SlurmError> {
        use std::sync::atomic::Ordering;
        if self.only_state.load(Ordering::Relaxed) >= ONLY_STATE_NO {
            return Ok(None);
        }
        // One REQUEST_JOB_STATE a call: the controller looks each id up, so a list cut in
        // calls of 64 KiB costs what the ids cost.
        let mut all = Parsed {
            rows: Vec::new(),
            errors: Vec::new(),
        };
        for chunk in id_chunks(job_ids, usize::MAX) {
            let args: Vec<String> = vec![
                "--only-job-state".into(),
                "--noheader".into(),
                "--states=all".into(),
                "--array".into(),
                format!("--format={}", parse::STATE_FORMAT),
                format!("--jobs={}", chunk.join(",")),
            ];
            let ran = self.query("squeue", args).await?;
            if ran.code != Some(0) && ran.stderr.contains("unrecognized option") {
                // A squeue from before 23.11.5: the full listing from now on.
                self.only_state.store(ONLY_STATE_NO, Ordering::Relaxed);
                return Ok(None);
            }
            if ran.code != Some(0) {
                // An unknown id is absent, not an error, in this mode: a failure is no
                // answer (the controller's error comes with an empty stderr, or "Unable to
                // query jobs state"). The caller asks for the full listing instead; after a
                // few failures in a row, the full listing is kept.
                let failed = self.only_state.fetch_add(1, Ordering::Relaxed) + 1;
                if failed >= ONLY_STATE_NO {
                    tracing::warn!(
                        "squeue --only-job-state failed {failed} times in a row; the poll asks for the full listing from now on"
                    );
                }
                return Err(SlurmError::Unavailable {
                    command: "squeue".into(),
                    status: ran.status(),
                    stderr: trim_evidence(&ran.stderr),
                });
            }
            self.only_state.store(0, Ordering::Relaxed);
            let p = parse::parse_states(&ran.stdout);
            all.rows.extend(p.rows);
            all.errors.extend(p.errors);
        }
        Ok(Some(all))
    }

    async fn squeue_user(&self, user: &str) -> Result<Parsed<TagRow>, SlurmError> {
        self.squeue_tags_of(format!("--user={user}")).await
    }

    async fn squeue_tags(&self, job_id: &str) -> Result<Parsed<TagRow>, SlurmError> {
        self.squeue_tags_of(format!("--jobs={job_id}")).await
    }

    async fn sacct(&self, job_ids: &[String]) -> Result<Parsed<SacctRow>, SlurmError> {
        let mut all = Parsed {
            rows: Vec::new(),
            errors: Vec::new(),
        };
        for chunk in id_chunks(job_ids, self.sacct_chunk) {
            let args = vec![
                "--parsable2".into(),
                "--noheader".into(),
                "--duplicates".into(),
                format!("--format={}", parse::SACCT_FIELDS),
                format!("--jobs={}", chunk.join(",")),
            ];
            let p = check_sacct(self.query_epoch_times("sacct", args).await?)?;
            all.rows.extend(p.rows);
            all.errors.extend(p.errors);
        }
        Ok(all)
    }

    async fn sacct_user_since(&self, user: &str, since: i64) -> Result<Parsed<TagRow>, SlurmError> {
        let args = vec![
            "--parsable2".into(),
            "--noheader".into(),
            "--duplicates".into(),
            "--allocations".into(),
            format!("--format={}", parse::TAG_SACCT_FIELDS),
            format!("--user={user}"),
            format!("--starttime={}", format_sacct_time(since)),
        ];
        check_sacct_with(self.query("sacct", args).await?, parse::parse_tags)
    }

    async fn scancel(&self, job_ids: &[String], run_as: Option<&RunAs>) -> Result<(), SlurmError> {
        let ran = self.run_as_user("scancel", job_ids, run_as).await?;
        // A job that already ended (or that Slurm forgot) needs no cancelling.
        let gone = ran.stderr.contains(INVALID_JOB_ID)
            || ran.stderr.contains("already completing or completed");
        if ran.code == Some(0) || gone {
            Ok(())
        } else {
            Err(Self::failure("scancel", &ran))
        }
    }

    async fn show_job(
        &self,
        job_id: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, SlurmError> {
        let ran = self
            .query(
                "scontrol",
                vec!["show".into(), "job".into(), "-o".into(), job_id.to_string()],
            )
            .await?;
        if ran.code != Some(0) {
            return Err(Self::failure("scontrol", &ran));
        }
        let garbage = |message: String| SlurmError::Garbage {
            command: "scontrol".into(),
            message,
        };
        // `-o` prints one line per job; a second line is a line break in a value its
        // owner wrote, and the record can no longer be told from that text.
        let lines: Vec<&str> = ran
            .stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        let line = match lines.as_slice() {
            [line] if line.starts_with("JobId=") => *line,
            [] | [_] => {
                return Err(garbage(format!(
                    "no JobId= record in {:?}",
                    trim_evidence(&ran.stdout)
                )))
            }
            _ => {
                return Err(garbage(format!(
                    "the record of job {job_id} spans {} lines: a value its owner wrote (name, comment, command, path) holds a line break",
                    lines.len()
                )))
            }
        };
        parse::parse_scontrol_record_strict(line).map_err(|key| {
            garbage(format!(
                "the record of job {job_id} names {key}= twice: a value its owner wrote holds \" {key}=\""
            ))
        })
    }

    async fn batch_script(&self, job_id: &str) -> Result<Vec<u8>, SlurmError> {
        let args = vec![
            "write".into(),
            "batch_script".into(),
            job_id.to_string(),
            "-".into(),
        ];
        let ran = self
            .run("scontrol", &args, self.timeout, |_| Ok(()), None)
            .await?;
        if ran.code != Some(0) {
            return Err(Self::failure("scontrol", &ran));
        }
        Ok(ran.stdout.into_bytes())
    }

    async fn mail_prog(&self) -> Result<Option<String>, SlurmError> {
        let ran = self
            .query("scontrol", vec!["show".into(), "config".into()])
            .await?;
        if ran.code != Some(0) {
            return Err(Self::failure("scontrol", &ran));
        }
        Ok(parse::show_config_value(&ran.stdout, "MailProg"))
    }

    async fn partition_limits(&self) -> Result<HashMap<String, Option<u64>>, SlurmError> {
        let ran = self
            .query("sinfo", vec!["--noheader".into(), "--format=%R|%l".into()])
            .await?;
        if ran.code != Some(0) {
            return Err(Self::failure("sinfo", &ran));
        }
        let mut out = HashMap::new();
        for line in ran.stdout.lines().filter(|l| !l.trim().is_empty()) {
            let Some((name, limit)) = line.trim().split_once('|') else {
                return Err(SlurmError::Garbage {
                    command: "sinfo".into(),
                    message: format!("no '|' in {line:?}"),
                });
            };
            out.insert(name.to_string(), parse::parse_duration_secs(limit));
        }
        Ok(out)
    }

    async fn pending_of_users(&self, users: &[String]) -> Result<Parsed<PendingRow>, SlurmError> {
        let args = vec![
            "--noheader".into(),
            "--states=PENDING".into(),
            format!("--format={}", parse::PENDING_FORMAT),
            format!("--user={}", users.join(",")),
        ];
        let ran = self.query("squeue", args).await?;
        if ran.code != Some(0) {
            return Err(Self::failure("squeue", &ran));
        }
        Ok(parse::parse_pending(&ran.stdout))
    }

    async fn set_dependency(
        &self,
        job_id: &str,
        dependency: &str,
        run_as: Option<&RunAs>,
    ) -> Result<(), SlurmError> {
        let args = vec![
            "update".to_string(),
            format!("JobId={job_id}"),
            format!("Dependency={dependency}"),
        ];
        self.scontrol_as(&args, run_as).await
    }

    async fn release(&self, job_ids: &[String], run_as: Option<&RunAs>) -> Result<(), SlurmError> {
        // Every chunk is tried: one refused job (released by its owner already) does not
        // keep the others held. The first failure is reported.
        let mut first = None;
        for chunk in id_chunks(job_ids, RELEASE_CHUNK) {
            let args = vec!["release".to_string(), chunk.join(",")];
            if let Err(e) = self.scontrol_as(&args, run_as).await {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl SlurmCli {
    /// Runs a command that changes a user's jobs, as that user when given.
    async fn run_as_user(
        &self,
        name: &str,
        args: &[String],
        run_as: Option<&RunAs>,
    ) -> Result<Ran, SlurmError> {
        let who = run_as.cloned();
        self.run(
            name,
            args,
            self.timeout,
            move |cmd| {
                if let Some(who) = &who {
                    drop_to(cmd, who, None);
                }
                Ok(())
            },
            None,
        )
        .await
    }

    /// An scontrol that changes a user's job, run as that user when given.
    async fn scontrol_as(&self, args: &[String], run_as: Option<&RunAs>) -> Result<(), SlurmError> {
        let ran = self.run_as_user("scontrol", args, run_as).await?;
        if ran.code == Some(0) {
            Ok(())
        } else {
            Err(Self::failure("scontrol", &ran))
        }
    }
}

/// sacct's `--starttime` wants local time as `YYYY-MM-DDTHH:MM:SS`; it also takes
/// `now-<seconds>` relative forms, which avoid any timezone question.
fn format_sacct_time(since: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(since);
    format!("now-{}", (now - since).max(0))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_start_cut_short_by_the_watchdog_is_no_answer_not_a_refusal() {
        let held = std::io::Error::new(std::io::ErrorKind::TimedOut, "held before execve");
        assert!(matches!(
            not_started("sbatch", held),
            Ok(SlurmError::Held { .. })
        ));
        let missing = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert!(
            not_started("sbatch", missing).is_err(),
            "a plain Spawn error"
        );
    }

    #[test]
    fn a_start_that_failed_once_the_program_may_have_run_is_no_answer() {
        // E.g. its starter thread panicked after the clone, or its pipes could not be
        // registered: the sbatch may have run, so it is looked up, never resubmitted.
        let e = crate::slurm::spawn::may_have_started(std::io::Error::other("no thread"));
        assert!(matches!(
            not_started("sbatch", e),
            Ok(SlurmError::Io { .. })
        ));
    }

    #[tokio::test]
    async fn the_timeout_bounds_a_start_waiting_its_turn() {
        // The user has a start under way (held before execve: up to EXEC_DEADLINE, and
        // their next ones wait in turn); a scancel of theirs, maybe on the daemon's loop,
        // waits no longer than its timeout, and is no answer (not "never ran"), held by
        // the user (not a Slurm outage).
        let uid = 65531;
        let _busy = crate::slurm::spawn::occupy_starts_of(uid);
        let cli = SlurmCli {
            bin_dir: Some("/bin".into()),
            timeout: Duration::from_millis(200),
            sbatch_timeout: Duration::from_millis(200),
            sacct_chunk: 100,
            observer: unobserved,
            only_state: Default::default(),
        };
        let who = RunAs {
            uid,
            gid: uid,
            user: std::ffi::CString::new("nobody").unwrap(),
        };
        let ran = tokio::time::timeout(
            Duration::from_secs(60),
            cli.run_as_user("true", &[], Some(&who)),
        )
        .await
        .expect("bounded by the command's timeout");
        assert!(
            matches!(&ran, Err(e @ SlurmError::Held { .. }) if e.may_have_reached_slurm() && !e.is_slurms()),
            "{:?}",
            ran.err()
        );
    }

    use super::*;

    /// A fake `squeue` in a folder of its own: notes each call's arguments in `calls`, and
    /// answers with `body` (a shell `case` on the arguments).
    fn fake_squeue(body: &str) -> (tempfile::TempDir, SlurmCli) {
        let dir = tempfile::tempdir().unwrap();
        let script = format!(
            "#!/bin/sh\necho \"$*\" >> {}/calls\n{body}\n",
            dir.path().display()
        );
        let squeue = dir.path().join("squeue");
        std::fs::write(&squeue, script).unwrap();
        std::fs::set_permissions(&squeue, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let cli = SlurmCli {
            bin_dir: Some(dir.path().to_path_buf()),
            timeout: Duration::from_secs(60),
            sbatch_timeout: Duration::from_secs(60),
            sacct_chunk: 5000,
            observer: unobserved,
            only_state: Default::default(),
        };
        (dir, cli)
    }

    fn calls(dir: &tempfile::TempDir) -> Vec<String> {
        std::fs::read_to_string(dir.path().join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The poll's squeue names the jobs it asks about (squeue filters before printing, so
    /// another user's arrays never reach the daemon), in as few calls as 64 KiB of ids a
    /// call allows; the state-only query is cut the same way (the controller looks each id
    /// up).
    #[tokio::test]
    async fn the_polls_squeue_names_its_jobs_in_calls_of_64_kib() {
        let (dir, cli) = fake_squeue(
            "case \"$*\" in\n  *--only-job-state*) echo '7|7|RUNNING' ;;\n  *) echo '7|7|RUNNING|None|n1|1000' ;;\nesac",
        );
        let ids: Vec<String> = (1..=100_000).map(|i| (1_000_000 + i).to_string()).collect();
        let p = cli.squeue(&ids).await.unwrap();
        let listing = calls(&dir);
        let expected = ids
            .iter()
            .map(|i| i.len() + 1)
            .sum::<usize>()
            .div_ceil(MAX_JOBS_ARG);
        assert!(
            (expected..=expected + 1).contains(&listing.len()),
            "{}",
            listing.len()
        );
        assert!(listing
            .iter()
            .all(|c| c.contains("--local") && c.contains("--jobs=")));
        assert_eq!(p.rows.len(), listing.len());
        let p = cli.job_states(&ids).await.unwrap().expect("supported");
        let all = calls(&dir);
        assert_eq!(all.len(), 2 * listing.len());
        assert!(all[listing.len()..]
            .iter()
            .all(|c| c.contains("--only-job-state") && c.contains("--jobs=")));
        assert_eq!(p.rows[0].state, crate::slurm::types::JobState::Running);
    }

    /// A squeue without `--only-job-state` (22.05) refuses it once, and is not asked again;
    /// one whose state-only query fails is asked again until it has failed three times in a
    /// row (the poll takes the full listing meanwhile).
    #[tokio::test]
    async fn a_squeue_without_the_state_only_query_is_asked_once() {
        let (dir, cli) =
            fake_squeue("echo \"squeue: unrecognized option '--only-job-state'\" >&2\nexit 1");
        let ids = vec!["7".to_string(), "8".to_string()];
        assert!(cli.job_states(&ids).await.unwrap().is_none());
        assert!(cli.job_states(&ids).await.unwrap().is_none());
        assert_eq!(calls(&dir).len(), 1);
        let (dir, cli) = fake_squeue("exit 1");
        for _ in 0..3 {
            assert!(cli.job_states(&ids).await.is_err());
        }
        assert!(cli.job_states(&ids).await.unwrap().is_none());
        assert_eq!(calls(&dir).len(), 3);
    }

    #[test]
    fn job_id_lists_are_cut_by_count_and_by_length() {
        let ids: Vec<String> = (0..12_000).map(|i| (1_000_000 + i).to_string()).collect();
        let chunks = id_chunks(&ids, 5000);
        assert_eq!(
            chunks.iter().map(|c| c.len()).collect::<Vec<_>>(),
            vec![5000, 5000, 2000]
        );
        assert_eq!(chunks.concat(), ids, "every id once, in order");
        let long: Vec<String> = (0..100)
            .map(|i| format!("{i}_{}", "9".repeat(2000)))
            .collect();
        for c in id_chunks(&long, 5000) {
            assert!(c.iter().map(|i| i.len() + 1).sum::<usize>() <= MAX_JOBS_ARG);
        }
        assert!(id_chunks(&[], 10).is_empty());
    }

    fn failed(stderr: &str) -> SlurmError {
        let ran = Ran {
            code: Some(1),
            stdout: String::new(),
            stderr: stderr.into(),
        };
        SlurmCli::failure("sacct", &ran)
    }

    /// What Slurm 22.05 and 24.11 printed when they could not answer (docs/slurm-observed.md,
    /// docs/compatibility.md): never a refusal, never a job's failure.
    #[test]
    fn slurm_not_answering_in_either_version_is_unavailable() {
        for stderr in [
            "sacct: error: Problem talking to the database: Connection refused\n",
            "sacct: error: _open_persist_conn: failed to open persistent connection to host:localhost:7819: Connection refused\n\
             sacct: error: Sending PersistInit msg: Connection refused\n\
             sacct: error: Problem talking to the database: Connection refused\n",
            "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n",
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n",
            "squeue: error: RPC rate limited 3 time(s). Sleeping then trying again.\n",
            "slurm_load_jobs error: Rate limit exceeded, please retry momentarily\n",
            "sbatch: error: Batch job submission failed: Rate limit exceeded, please retry later\n",
            "scontrol: error: Job can not be altered now, try again later\n",
        ] {
            assert!(
                matches!(failed(stderr), SlurmError::Unavailable { .. }),
                "{stderr}"
            );
        }
        assert!(matches!(
            failed("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified\n"),
            SlurmError::Rejected { .. }
        ));
    }
}
