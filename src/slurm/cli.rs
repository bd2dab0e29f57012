//! The real Slurm commands, run as child processes with timeouts.
//!
//! No shell is involved: every argument goes to the command as one argv element, so a
//! job name with quotes or `$()` is carried byte for byte. stdout and stderr are read
//! concurrently (a child that fills one pipe cannot block), and stderr is kept as
//! evidence in every error.

use super::parse::{self, Parsed};
use super::spawn::{Command, Credentials};
use super::types::{HeldRow, PendingRow, Queue, SacctRow, SqueueRow, TagRow};
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
/// (`daemon::start`); the slurm layer knows nothing of who listens.
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
    /// How many job ids the poll's query names at most (`--jobs=`, and never more than
    /// 64 KiB of them); more are asked for as a listing of every job, filtered by the
    /// daemon. One by default: see [`SlurmCli::poll_query`].
    named_up_to: usize,
}

/// `SlurmCli::only_state` at which the full listing is used for good.
const ONLY_STATE_NO: u8 = 3;

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// A listing's other lines took more than their budget: some were not kept
    /// ([`OtherLines::budget`]).
    others_over: bool,
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
        crate::plumbing::osbytes::truncate(t, MAX),
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
            named_up_to: 1,
        }
    }

    /// The same, telling `observer` of every command it runs.
    pub fn observed_by(self, observer: CommandObserver) -> Self {
        SlurmCli { observer, ..self }
    }

    /// The same, with the poll's query naming up to `ids` jobs (one by default): for tests
    /// and benchmarks that set a listing of every job beside one that names them.
    pub fn naming_jobs_up_to(self, ids: usize) -> Self {
        SlurmCli {
            named_up_to: ids,
            ..self
        }
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
        keep: Keep<'_>,
    ) -> Result<Ran, SlurmError> {
        let start = std::time::Instant::now();
        let ran = self
            .run_unmetered(name, args, timeout, setup, stdin, keep)
            .await;
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
        keep: Keep<'_>,
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
        // Both pipes are read at once, each only up to MAX_OUTPUT kept: a command that
        // prints without end cannot exhaust the daemon's memory. Past the limit the child
        // is killed, so the other pipe closes and reading ends.
        let collect = async {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let stop = || child.kill();
            let read_out = async {
                if let Some(p) = out_pipe.as_mut() {
                    match keep {
                        Keep::All => {
                            p.take(MAX_OUTPUT + 1).read_to_end(&mut out).await?;
                        }
                        Keep::Lines(wanted) => {
                            let mut p = tokio::io::BufReader::with_capacity(64 << 10, p);
                            read_wanted_lines(&mut p, wanted, &mut out, MAX_OUTPUT).await?;
                        }
                    }
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
            stdout: text(stdout),
            stderr: text(stderr),
            others_over: false,
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
            "--local".into(),
            "--noheader".into(),
            "--states=all".into(),
            "--array".into(),
            format!("--format={}", parse::TAG_SQUEUE_FORMAT),
            filter,
        ];
        check_squeue_with(
            self.query("squeue", args).await?,
            parse::parse_tags,
            Parsed::default,
        )
    }

    /// A query whose times are printed as seconds since the epoch (`SLURM_TIME_FORMAT=%s`),
    /// as [`parse::SACCT_FIELDS`] reads them.
    async fn query_epoch_times(&self, name: &str, args: Vec<String>) -> Result<Ran, SlurmError> {
        self.query_keeping(name, args, Keep::All, &[("SLURM_TIME_FORMAT", "%s")])
            .await
    }

    /// One value of `scontrol show config` (`None`: not set, or `(null)`).
    async fn config_value(&self, key: &str) -> Result<Option<String>, SlurmError> {
        let ran = self
            .query("scontrol", vec!["show".into(), "config".into()])
            .await?;
        if ran.code != Some(0) {
            return Err(Self::failure("scontrol", &ran));
        }
        Ok(parse::show_config_value(&ran.stdout, key))
    }

    async fn query(&self, name: &str, args: Vec<String>) -> Result<Ran, SlurmError> {
        self.query_keeping(name, args, Keep::All, &[]).await
    }

    /// A query, with `set` in its environment, of which only the stdout lines `keep` wants
    /// are read into memory.
    async fn query_keeping(
        &self,
        name: &str,
        args: Vec<String>,
        keep: Keep<'_>,
        set: &[(&str, &str)],
    ) -> Result<Ran, SlurmError> {
        let env = own_env(set);
        self.run(
            name,
            &args,
            self.timeout,
            |cmd| {
                cmd.env_clear_with(env);
                Ok(())
            },
            None,
            keep,
        )
        .await
    }
}

/// Reads a listing (`read`) on a blocking thread, not on the task that awaits it: the
/// daemon awaits the poll's squeue on its loop, which answers requests while 100,000 lines
/// are folded into the poll's map (docs/benchmarks.md).
async fn apart<T: Send + 'static>(
    read: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SlurmError> {
    match tokio::task::spawn_blocking(read).await {
        Ok(v) => Ok(v),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // The runtime is shutting down.
        Err(e) => Err(SlurmError::Io {
            command: "squeue".into(),
            source: std::io::Error::other(e),
        }),
    }
}

/// What a command printed, as text: taken as it is when it is UTF-8 (the poll's listing
/// is not copied a second time), each invalid sequence replaced otherwise.
fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The job id a line of squeue begins with, up to the first character that is not a
/// digit: the array's or heterogeneous job's own id for a task or a component.
fn leading_digits(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    &s[..n]
}

/// The ids of `job_ids` (base ids) as the lines of a listing begin with them (their
/// leading digits), to look each line up in.
fn asked_ids(job_ids: &[String]) -> std::collections::HashSet<&[u8]> {
    job_ids
        .iter()
        .map(|i| leading_digits(i.as_bytes()))
        .collect()
}

/// What of a command's stdout is read into memory.
#[derive(Clone, Copy)]
enum Keep<'a> {
    /// All of it (up to [`MAX_OUTPUT`]).
    All,
    /// The lines of a listing of every job this filter keeps; the rest of the output is
    /// read and dropped as it comes, so it may be of any length.
    Lines(&'a LineFilter<'a>),
}

/// Which lines of a listing of every job (`|`-separated fields, the job id first) are
/// kept, line by line as they are read.
struct LineFilter<'a> {
    /// Whether the job id a line begins with (its leading digits: the array's or
    /// heterogeneous job's own id) is one asked about: such a line is kept whole. A line
    /// that does not begin with a digit is kept too, to be reported as unreadable.
    asked: &'a (dyn Fn(&[u8]) -> bool + Sync),
    /// Which other lines are kept; none without.
    other: Option<OtherLines<'a>>,
}

/// Lines of jobs not asked about that are kept (see [`LineFilter::other`]).
struct OtherLines<'a> {
    /// Whether the line is kept, given its first `fields` fields (fewer if the line has
    /// fewer), its id cut to about [`FIRST_FIELD`] bytes (a pending task list
    /// `12_[1,5,...]`, as Slurm cuts it by default). A line whose first fields take more
    /// than [`LINE_REST`] is dropped unread; a kept line is kept whole.
    keep: &'a (dyn Fn(&[&[u8]]) -> bool + Sync),
    fields: usize,
    /// The most bytes all kept lines may take together: past it, no other line is kept
    /// (the ones kept so far stay) and `over` is set.
    budget: usize,
    over: std::sync::atomic::AtomicBool,
}

/// The most the supervised users' pending jobs may take of the poll's listing
/// ([`Slurm::squeue_with_pending`]): past it they are not read that cycle, and the poll's
/// own jobs are.
const PENDING_BUDGET: usize = 16 << 20;

/// How much of another job's id a kept line keeps (see [`OtherLines::keep`]).
const FIRST_FIELD: usize = 64;

/// The most another job's line may take before it is judged (see [`OtherLines::keep`]).
const LINE_REST: usize = 4 << 10;

/// Where [`read_wanted_lines`] is in a line.
enum At {
    /// Its leading digits (in `line`).
    Digits,
    /// A line asked about, copied to the output as it comes.
    Whole,
    /// Another job's id, past its leading digits (in `line`, up to [`FIRST_FIELD`],
    /// then skipped).
    Id,
    /// Another job's fields after its id, up to those it is judged on (in `line`;
    /// `seps` separators so far).
    Rest { seps: usize },
    /// Another job's line that is kept, copied to the output as it comes from `start`.
    Kept { start: usize },
    /// A line dropped: skipped to its end.
    Dropped,
}

/// `id` (a job id cut short at [`FIRST_FIELD`] bytes) as a whole pending task list:
/// `12_[1,5,...]`, cut after the last whole task.
fn cut_task_list(id: &mut Vec<u8>) {
    if let Some(open) = id.iter().position(|&b| b == b'[') {
        let keep = id[open..]
            .iter()
            .rposition(|&b| b == b',')
            .map_or(open + 1, |p| open + p + 1);
        id.truncate(keep);
        id.extend_from_slice(b"...]");
    }
}

/// Reads `r` to its end, appending to `out` the lines `filter` keeps (with their
/// newlines), until `out` holds more than `limit` bytes. Memory: what is kept, one
/// line of another job's up to where it is judged (at most [`FIRST_FIELD`] and
/// [`LINE_REST`]), and the reader's buffer.
async fn read_wanted_lines<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    filter: &LineFilter<'_>,
    out: &mut Vec<u8>,
    limit: u64,
) -> std::io::Result<()> {
    use std::sync::atomic::Ordering;
    use tokio::io::AsyncBufReadExt;
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let mut at = At::Digits;
    // Whether the current line's id was cut.
    let mut cut = false;
    // Bytes of other jobs' lines kept so far.
    let mut others = 0usize;
    // Whether another line is kept, judged on `line` (its first fields); charged to the
    // budget when it is.
    let judge = |line: &[u8], others: &mut usize| -> bool {
        let Some(o) = &filter.other else {
            return false;
        };
        if o.over.load(Ordering::Relaxed) {
            return false;
        }
        let fields: Vec<&[u8]> = line.split(|&b| b == b'|').take(o.fields).collect();
        if !(o.keep)(&fields) {
            return false;
        }
        if *others + line.len() > o.budget {
            o.over.store(true, Ordering::Relaxed);
            return false;
        }
        *others += line.len();
        true
    };
    // Past the budget while a kept line is copied: it is taken out again.
    let over_budget = |others: usize| filter.other.as_ref().is_some_and(|o| others > o.budget);
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            // A last line without a newline: kept as one with a newline would be, without
            // the newline.
            match at {
                At::Digits if !line.is_empty() && (filter.asked)(&line) => {
                    out.extend_from_slice(&line);
                }
                At::Id | At::Rest { .. } => {
                    if cut && matches!(at, At::Id) {
                        cut_task_list(&mut line);
                    }
                    if judge(&line, &mut others) {
                        out.extend_from_slice(&line);
                    }
                }
                _ => {}
            }
            return Ok(());
        }
        let n = buf.len();
        let mut i = 0;
        while i < n {
            let rest = &buf[i..];
            match at {
                At::Digits => {
                    let d = rest.iter().take_while(|b| b.is_ascii_digit()).count();
                    line.extend_from_slice(&rest[..d]);
                    i += d;
                    if i == n {
                        break;
                    }
                    if line.is_empty() || (filter.asked)(&line) {
                        out.extend_from_slice(&line);
                        line.clear();
                        at = At::Whole;
                    } else if filter.other.is_none() {
                        line.clear();
                        at = At::Dropped;
                    } else {
                        at = At::Id;
                    }
                }
                At::Whole | At::Dropped | At::Kept { .. } => {
                    let nl = rest.iter().position(|&b| b == b'\n');
                    let end = nl.map_or(rest.len(), |p| p + 1);
                    match at {
                        At::Whole => out.extend_from_slice(&rest[..end]),
                        At::Kept { start } => {
                            out.extend_from_slice(&rest[..end]);
                            others += end;
                            if over_budget(others) {
                                if let Some(o) = &filter.other {
                                    o.over.store(true, Ordering::Relaxed);
                                }
                                out.truncate(start);
                                at = At::Dropped;
                            }
                        }
                        _ => {}
                    }
                    i += end;
                    if nl.is_some() {
                        (at, cut) = (At::Digits, false);
                    }
                }
                At::Id => {
                    let stop = rest.iter().position(|&b| b == b'|' || b == b'\n');
                    let end = stop.unwrap_or(rest.len());
                    let room = FIRST_FIELD.saturating_sub(line.len());
                    line.extend_from_slice(&rest[..end.min(room)]);
                    cut |= end > room;
                    i += end;
                    if stop.is_none() {
                        continue;
                    }
                    if cut {
                        cut_task_list(&mut line);
                    }
                    if rest[end] == b'|' {
                        line.push(b'|');
                        at = At::Rest { seps: 1 };
                    } else {
                        if judge(&line, &mut others) {
                            out.extend_from_slice(&line);
                            out.push(b'\n');
                        }
                        line.clear();
                        (at, cut) = (At::Digits, false);
                    }
                    i += 1;
                }
                At::Rest { seps } => {
                    let fields = filter.other.as_ref().map_or(0, |o| o.fields);
                    let stop = rest.iter().position(|&b| b == b'|' || b == b'\n');
                    let end = stop.unwrap_or(rest.len());
                    line.extend_from_slice(&rest[..end]);
                    i += end;
                    if line.len() > FIRST_FIELD + 8 + LINE_REST {
                        line.clear();
                        at = At::Dropped;
                        continue;
                    }
                    let Some(p) = stop else {
                        continue;
                    };
                    i += 1;
                    if rest[p] == b'\n' {
                        if judge(&line, &mut others) {
                            out.extend_from_slice(&line);
                            out.push(b'\n');
                        }
                        line.clear();
                        (at, cut) = (At::Digits, false);
                    } else if seps + 1 >= fields {
                        // Its first fields are read: judged now, the rest copied or skipped.
                        line.push(b'|');
                        at = if judge(&line, &mut others) {
                            let start = out.len();
                            out.extend_from_slice(&line);
                            At::Kept { start }
                        } else {
                            At::Dropped
                        };
                        line.clear();
                    } else {
                        line.push(b'|');
                        at = At::Rest { seps: seps + 1 };
                    }
                }
            }
        }
        r.consume(n);
        if out.len() as u64 > limit {
            return Ok(());
        }
    }
}

/// The daemon's environment for its own Slurm commands, with `set` added: without what
/// would change what the commands print or ask (`SQUEUE_*` such as `SQUEUE_USERS` or
/// `SQUEUE_ALL`, `SACCT_*`, `SCONTROL_*`, `SCANCEL_*`, `SLURM_TIME_FORMAT`,
/// `SLURM_BITSTR_LEN`, `SLURM_CLUSTERS`): their output is read in the daemon's formats
/// whatever environment it was started with. `SLURM_CONF` stays.
fn own_env(set: &[(&str, &str)]) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    own_env_of(std::env::vars_os(), set)
}

/// [`own_env`] of the environment `vars`.
fn own_env_of(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    set: &[(&str, &str)],
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    const PREFIXES: &[&str] = &["SQUEUE_", "SACCT_", "SCONTROL_", "SCANCEL_", "SINFO_"];
    const NAMES: &[&str] = &[
        "SLURM_TIME_FORMAT",
        "SLURM_BITSTR_LEN",
        "SLURM_CLUSTERS",
        // Which controller is asked, and as whom: the daemon's own config and MUNGE.
        "SLURM_CONF_SERVER",
        "SLURM_JWT",
        "SLURM_SACK_KEY",
        "SLURM_SACK_JWKS",
    ];
    let mut env = env_keeping(vars, |k| {
        !PREFIXES.iter().any(|p| k.starts_with(p)) && !NAMES.contains(&k)
    });
    env.extend(set.iter().map(|(k, v)| ((*k).into(), (*v).into())));
    env
}

/// The variables of `vars` whose name `keep` keeps, in their order.
fn env_keeping(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    keep: impl Fn(&str) -> bool,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    vars.filter(|(k, _)| keep(&k.to_string_lossy())).collect()
}

/// The environment of a Slurm command the daemon runs as a user (`scontrol` and `scancel`
/// on their job): only what finds Slurm's commands, their libraries and their config, and
/// the locale. Never the root daemon's own environment: the user can read
/// `/proc/PID/environ` of a process that runs as them, and a site's unit may give the
/// daemon variables that are not for users. Nor its preloads: `LD_PRELOAD` is the
/// daemon's (a site's allocator; a test's libfaketime, whose shared memory a process of
/// another uid cannot open, so the command died before it ran).
fn user_env() -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    user_env_of(std::env::vars_os())
}

/// [`user_env`] of the environment `vars`.
fn user_env_of(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    env_keeping(vars, |k| USER_ENV.contains(&k) || k.starts_with("LC_"))
}

/// What [`user_env`] keeps, with the locale's `LC_*`.
const USER_ENV: &[&str] = &[
    "PATH",
    "SLURM_CONF",
    "LD_LIBRARY_PATH",
    "TZ",
    "LANG",
    "LANGUAGE",
];

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

/// sbatch that could not start because its program is there but its working directory is
/// not (`chdir` failed with ENOENT before anything ran): the submission came from a node
/// whose directory this node does not have (cluster mode: a login node without the shared
/// file system the submitter's folder is on). Said as such, naming the directory and this
/// node; anything else is returned as it was.
fn no_such_directory(e: SlurmError, dir: &Path) -> SlurmError {
    match e {
        SlurmError::Spawn { command, source }
            if source.kind() == std::io::ErrorKind::NotFound
                && Path::new(&command).is_file()
                && !dir.is_dir() =>
        {
            let node = nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "this node".into());
            SlurmError::Spawn {
                command,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "the working directory {} does not exist on {node}, the node whose daemon runs sbatch (as you); nothing was submitted: submit from a directory that exists on {node} too (a shared file system), or on {node} itself",
                        crate::plumbing::osbytes::escape(&dir.to_string_lossy())
                    ),
                ),
            }
        }
        e => e,
    }
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
    check_squeue_with(ran, parse::parse_squeue, Parsed::default)
}

/// What squeue answered, read with `parse`; `none()` when it knows none of the ids asked.
fn check_squeue_with<T>(ran: Ran, parse: fn(&str) -> T, none: fn() -> T) -> Result<T, SlurmError> {
    if ran.code == Some(0) {
        return Ok(parse(&ran.stdout));
    }
    if ran.stderr.contains(INVALID_JOB_ID) {
        // The ids asked about are unknown to squeue: finished long ago or never existed.
        // Only sacct can tell which; report them as absent.
        return Ok(none());
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
        use crate::plumbing::osbytes::to_os;
        // The site's plain-sbatch filter is never run for the daemon's own sbatch: its
        // job is recorded already (`super::PLAIN_SWITCH`).
        let env: Vec<_> = req
            .env
            .iter()
            .filter(|(k, _)| k != super::PLAIN_SWITCH)
            .map(|(k, v)| (to_os(k), to_os(v)))
            .chain(std::iter::once((
                super::PLAIN_SWITCH.into(),
                std::ffi::OsString::from("off"),
            )))
            .collect();
        let cwd = crate::plumbing::osbytes::to_path(&req.cwd.to_string_lossy());
        let run_as = req.run_as.clone();
        let argv: Vec<std::ffi::OsString> = req.argv.iter().map(|a| to_os(a)).collect();
        let dir = cwd.clone();
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
                Keep::All,
            )
            .await
            .map_err(|e| no_such_directory(e, &dir))?;
        if ran.code != Some(0) {
            return Err(Self::failure("sbatch", &ran));
        }
        parse::parse_sbatch_parsable(&ran.stdout).map_err(|e| SlurmError::Garbage {
            command: "sbatch".into(),
            message: e.to_string(),
        })
    }

    async fn squeue(&self, job_ids: &[String]) -> Result<Parsed<SqueueRow>, SlurmError> {
        // One REQUEST_JOB_INFO (the whole job table) and one REQUEST_PARTITION_INFO
        // whatever is asked, so one call: every job, read a line at a time and kept only
        // for the jobs asked about (one job alone is named: a lookup). That listing has no
        // `--array`: a pending array is one line whatever its size (its task list whole,
        // `SLURM_BITSTR_LEN=0`), so no user's arrays can make it long. `--local`: no
        // federation query.
        let mut args: Vec<String> = vec![
            "--local".into(),
            "--noheader".into(),
            "--states=all".into(),
            format!("--format={}", parse::SQUEUE_FORMAT),
        ];
        let ran = self.poll_query(job_ids, &mut args).await?;
        check_squeue(ran)
    }

    async fn poll_queue(&self, job_ids: &[String]) -> Result<Queue, SlurmError> {
        // The listing `squeue` asks for; its lines go into the map the poll keeps as they
        // are read, each job's id the only text copied.
        let mut args: Vec<String> = vec![
            "--local".into(),
            "--noheader".into(),
            "--states=all".into(),
            format!("--format={}", parse::SQUEUE_FORMAT),
        ];
        let ran = self.poll_query(job_ids, &mut args).await?;
        apart(move || check_squeue_with(ran, parse::fold_squeue, || Queue::with_owners(0))).await?
    }

    async fn job_states(&self, job_ids: &[String]) -> Result<Option<Queue>, SlurmError> {
        use std::sync::atomic::Ordering;
        if self.only_state.load(Ordering::Relaxed) >= ONLY_STATE_NO {
            return Ok(None);
        }
        // One REQUEST_JOB_STATE: the jobs named, or every job's id and state (what the
        // controller keeps for this query alone) kept for the jobs asked about, as for
        // `squeue`.
        let mut args: Vec<String> = vec![
            "--only-job-state".into(),
            "--noheader".into(),
            "--states=all".into(),
            format!("--format={}", parse::STATE_FORMAT),
        ];
        let ran = self.poll_query(job_ids, &mut args).await?;
        if ran.code != Some(0) && ran.stderr.contains("unrecognized option") {
            // A squeue from before 23.11.5: the full listing from now on.
            self.only_state.store(ONLY_STATE_NO, Ordering::Relaxed);
            return Ok(None);
        }
        if ran.code != Some(0) {
            // An unknown id is absent, not an error, in this mode: a failure is no answer
            // (the controller's error comes with an empty stderr, or "Unable to query jobs
            // state"). The caller asks for the full listing instead; after a few failures
            // in a row, the full listing is kept.
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
        Ok(Some(apart(move || parse::fold_states(&ran.stdout)).await?))
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
            // A job array whose tasks Slurm shows apart, or a heterogeneous job: one line
            // per task or component. The first one's record is given (its ArrayJobId= or
            // HetJobId= says what the job is, for the caller to refuse it); a first line
            // that cannot be read as a record is the line break below.
            [first, ..]
                if first.starts_with("JobId=")
                    && parse::parse_scontrol_record_strict(first).is_ok_and(|r| {
                        r.contains_key("ArrayJobId") || r.contains_key("HetJobId")
                    }) =>
            {
                *first
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

    async fn marked_jobs(&self, mark: &str) -> Result<Vec<(String, u32)>, SlurmError> {
        // One REQUEST_JOB_INFO: every job (`--all`), each field whole (`:0`), ended jobs
        // the controller still knows too (one killed within a second of its start). Read a
        // line at a time: only the lines whose admin comment is the mark are kept, so no
        // one's jobs can make the answer too big.
        let mut args = vec![
            "--local".into(),
            "--noheader".into(),
            "--states=all".into(),
            format!("--Format={}", parse::MARK_SQUEUE_FORMAT),
        ];
        let marked = |f: &[&[u8]]| f.len() == 3 && f[2].trim_ascii_end() == mark.as_bytes();
        let other = OtherLines {
            keep: &marked,
            fields: 3,
            budget: PENDING_BUDGET,
            over: Default::default(),
        };
        let ran = self
            .list_every_job(&|_: &[u8]| false, &mut args, Some(other))
            .await?;
        if ran.code != Some(0) {
            return Err(Self::failure("squeue", &ran));
        }
        Ok(parse::parse_marked(&ran.stdout, mark))
    }

    async fn batch_script(&self, job_id: &str) -> Result<Vec<u8>, SlurmError> {
        let args = vec![
            "write".into(),
            "batch_script".into(),
            job_id.to_string(),
            "-".into(),
        ];
        let ran = self.query("scontrol", args).await?;
        if ran.code != Some(0) {
            return Err(Self::failure("scontrol", &ran));
        }
        Ok(ran.stdout.into_bytes())
    }

    async fn mail_prog(&self) -> Result<Option<String>, SlurmError> {
        self.config_value("MailProg").await
    }

    async fn held_with(&self, needle: &str) -> Result<Parsed<HeldRow>, SlurmError> {
        let args = vec![
            "--local".into(),
            "--noheader".into(),
            "--all".into(),
            "--states=PENDING".into(),
            format!("--format={}", parse::HELD_FORMAT),
        ];
        let ran = self.query("squeue", args).await?;
        if ran.code != Some(0) {
            return Err(Self::failure("squeue", &ran));
        }
        Ok(parse::parse_held(&ran.stdout, needle))
    }

    async fn held_job(&self, job_id: &str) -> Result<Option<HeldRow>, SlurmError> {
        let args = vec![
            "--local".into(),
            "--noheader".into(),
            format!("--jobs={job_id}"),
            format!("--format={}", parse::HELD_FORMAT),
        ];
        let ran = self.query("squeue", args).await?;
        if ran.code != Some(0) {
            if ran.stderr.contains(INVALID_JOB_ID) {
                return Ok(None);
            }
            return Err(Self::failure("squeue", &ran));
        }
        Ok(parse::parse_held_one(&ran.stdout, job_id))
    }

    async fn cancel_pending(&self, job_id: &str, run_as: Option<&RunAs>) -> Result<(), SlurmError> {
        let args = ["--state=PENDING".to_string(), job_id.to_string()];
        let ran = self.run_as_user("scancel", &args, run_as).await?;
        let gone = ran.stderr.contains(INVALID_JOB_ID);
        if ran.code == Some(0) || gone {
            Ok(())
        } else {
            Err(Self::failure("scancel", &ran))
        }
    }

    async fn slurm_user_uid(&self) -> Result<Option<u32>, SlurmError> {
        Ok(self
            .config_value("SlurmUser")
            .await?
            .as_deref()
            .and_then(parse::uid_in_parentheses))
    }

    async fn cluster_name(&self) -> Result<Option<String>, SlurmError> {
        self.config_value("ClusterName").await
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

    async fn squeue_with_pending(
        &self,
        job_ids: &[String],
        users: &[String],
    ) -> Result<super::PolledWithPending, SlurmError> {
        // One squeue of every job (one REQUEST_JOB_INFO, one REQUEST_PARTITION_INFO) for
        // both: the lines of the jobs asked about, and the pending lines of these users
        // (a pending array's task list of theirs cut as Slurm cuts it by default).
        let mut args: Vec<String> = vec![
            "--local".into(),
            "--noheader".into(),
            "--states=all".into(),
            format!("--format={}", parse::SQUEUE_PENDING_FORMAT),
        ];
        let names: std::collections::HashSet<&[u8]> = users.iter().map(|u| u.as_bytes()).collect();
        // Judged on `%i` to `%u`; the dependency, last, comes whole with a line kept.
        let pending_of_theirs =
            |f: &[&[u8]]| f.len() >= 7 && f[2] == b"PENDING" && names.contains(f[6]);
        let other = OtherLines {
            keep: &pending_of_theirs,
            fields: 7,
            budget: PENDING_BUDGET,
            over: Default::default(),
        };
        // The ids asked about, built once: which lines the listing keeps, and which of
        // those are the poll's.
        let asked = asked_ids(job_ids);
        let is_asked = |id: &[u8]| asked.contains(id);
        let ran = self
            .list_every_job(&is_asked, &mut args, Some(other))
            .await?;
        if ran.code != Some(0) {
            return Err(Self::failure("squeue", &ran));
        }
        // Folded on the awaiting task, not `apart`: which lines are the poll's is told by
        // the asked ids, which borrow `job_ids` (this listing is asked every ten poll
        // intervals and after a retry's launch, the others every cycle).
        let (queue, pending) = parse::fold_squeue_pending(
            &ran.stdout,
            |job| asked.contains(leading_digits(job.as_bytes())),
            asked.len(),
            |user| names.contains(user.as_bytes()),
        );
        if ran.others_over {
            return Ok((
                queue,
                Err(SlurmError::Garbage {
                    command: "squeue".into(),
                    message: format!(
                        "the pending jobs of the supervised users take more than {} MiB of squeue's listing; they were not all read",
                        PENDING_BUDGET >> 20
                    ),
                }),
            ));
        }
        Ok((queue, Ok(pending)))
    }

    async fn pending_of_users(&self, users: &[String]) -> Result<Parsed<PendingRow>, SlurmError> {
        // `--local`: no federation query.
        let args = vec![
            "--local".into(),
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
    /// Runs the poll's one squeue with `args`, for `job_ids` (base ids): naming them
    /// (`--array --jobs=`) when there are at most [`SlurmCli::named_up_to`], else listing
    /// every job (`--all`) and keeping only the lines of the jobs asked about.
    ///
    /// Both are one controller query, but squeue matches each job it got against each id
    /// it was given: with 6,000 jobs in the controller and the 6,000 named, squeue took
    /// 0.6 s of CPU a call on 22.05 and 24.11 alike (the state-only query too), the
    /// listing of every job 0.02-0.05 s, and naming two ids about the same
    /// (docs/benchmarks.md). One id alone is a lookup (REQUEST_JOB_INFO_SINGLE).
    async fn poll_query(
        &self,
        job_ids: &[String],
        args: &mut Vec<String>,
    ) -> Result<Ran, SlurmError> {
        let bytes: usize = job_ids.iter().map(|i| i.len() + 1).sum();
        if job_ids.len() <= self.named_up_to && bytes <= MAX_JOBS_ARG {
            args.push("--array".into());
            args.push(format!("--jobs={}", job_ids.join(",")));
            return self.query("squeue", std::mem::take(args)).await;
        }
        let asked = asked_ids(job_ids);
        self.list_every_job(&|id| asked.contains(id), args, None)
            .await
    }

    /// Runs squeue with `args` and `--all` (every job, no `--array`), keeping only the
    /// lines whose job id `asked` (see [`LineFilter::asked`]) and the ones `other` keeps.
    async fn list_every_job(
        &self,
        asked: &(dyn Fn(&[u8]) -> bool + Sync),
        args: &mut Vec<String>,
        other: Option<OtherLines<'_>>,
    ) -> Result<Ran, SlurmError> {
        args.push("--all".into());
        let filter = LineFilter { asked, other };
        // Every pending task list whole (`SLURM_BITSTR_LEN=0`; 64 bytes and `...` by
        // default), so the line of a pending array of the daemon's shows each of its tasks.
        let set = [("SLURM_BITSTR_LEN", "0")];
        let mut ran = self
            .query_keeping("squeue", std::mem::take(args), Keep::Lines(&filter), &set)
            .await?;
        ran.others_over = filter
            .other
            .is_some_and(|o| o.over.load(std::sync::atomic::Ordering::Relaxed));
        Ok(ran)
    }

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
                match &who {
                    Some(who) => {
                        drop_to(cmd, who, None);
                        cmd.env_clear_with(user_env());
                    }
                    None => {
                        cmd.env_clear_with(own_env(&[]));
                    }
                }
                Ok(())
            },
            None,
            Keep::All,
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
            named_up_to: 1,
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

    /// A submission whose working directory this node does not have (it came from another
    /// login node) is refused before sbatch runs, naming the directory and this node.
    #[tokio::test]
    async fn a_working_directory_this_node_lacks_is_refused_naming_it_and_the_node() {
        let dir = tempfile::tempdir().unwrap();
        let ran = dir.path().join("ran");
        let sbatch = dir.path().join("sbatch");
        write_executable(
            &sbatch,
            format!("#!/bin/sh\ntouch {}\necho 1\n", ran.display()),
        );
        let cli = cli_in(dir.path());
        let req = |cwd: &Path| SbatchRequest {
            argv: vec!["--wrap=true".into()],
            cwd: cwd.to_path_buf(),
            env: Vec::new(),
            stdin: None,
            run_as: None,
            held: false,
        };
        let missing = dir.path().join("on-login2-only");
        let e = cli.sbatch(&req(&missing)).await.unwrap_err();
        let host = nix::unistd::gethostname().unwrap();
        let said = e.to_string();
        assert!(
            said.contains(&format!(
                "the working directory {} does not exist on {}",
                missing.display(),
                host.to_string_lossy()
            )),
            "{said}"
        );
        assert!(!e.may_have_reached_slurm());
        assert!(!ran.exists(), "sbatch ran somewhere else");
        // The same sbatch in a directory that exists runs.
        assert_eq!(cli.sbatch(&req(dir.path())).await.unwrap(), "1");
        assert!(ran.exists());
    }

    /// `content` written to `path` as an executable by a child `install`, never by this
    /// process: a file this process holds open for writing is inherited for a moment by
    /// every child another test thread forks, and executing it then fails with ETXTBSY.
    fn write_executable(path: &std::path::Path, content: String) {
        use std::io::Write;
        let mut child = std::process::Command::new("install")
            .args(["-m", "0755", "/dev/stdin"])
            .arg(path)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(content.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success());
    }

    /// A fake `squeue` in a folder of its own: notes each call's arguments in `calls`, and
    /// answers with `body` (a shell `case` on the arguments).
    /// The real commands' runner with its programs in `dir` (the tests' fakes).
    fn cli_in(dir: &Path) -> SlurmCli {
        SlurmCli {
            bin_dir: Some(dir.to_path_buf()),
            timeout: Duration::from_secs(60),
            sbatch_timeout: Duration::from_secs(60),
            sacct_chunk: 5000,
            observer: unobserved,
            only_state: Default::default(),
            named_up_to: 1,
        }
    }

    fn fake_squeue(body: &str) -> (tempfile::TempDir, SlurmCli) {
        let dir = tempfile::tempdir().unwrap();
        let script = format!(
            "#!/bin/sh\necho \"$*\" >> {}/calls\n{body}\n",
            dir.path().display()
        );
        let squeue = dir.path().join("squeue");
        write_executable(&squeue, script);
        let cli = cli_in(dir.path());
        (dir, cli)
    }

    fn calls(dir: &tempfile::TempDir) -> Vec<String> {
        std::fs::read_to_string(dir.path().join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The poll's squeue is one call whatever the number of jobs: one job is named (a
    /// lookup, `--array` shows its tasks), more are asked for as a listing of every job
    /// (one line a job record, no `--array`) of which the lines of the jobs asked about
    /// are kept. The state-only query the same.
    #[tokio::test]
    async fn the_polls_squeue_is_one_call_at_any_scale() {
        // Every job of the controller, ours (1_000_001..) among 200,000 of other users, a
        // pending array of ours with its task list whole, and one of someone else's whose
        // line is 4 MiB long.
        let (dir, cli) = fake_squeue(
            "case \"$*\" in\n  *--only-job-state*) echo '7|7|RUNNING' ;;\n  *--all*) seq 2000001 2200000 | sed 's/$/|1|PENDING|None||1001/'; printf '3000000_[%s]|3000000|PENDING|None||1001\\n' \"$(seq -s, 1 2 1200000)\"; seq 1000001 1100000 | sed 's/$/|1|RUNNING|None|n1|1000/'; echo '1000005_[2,4,9]|5|PENDING|None||1000' ;;\n  *) echo '7|7|RUNNING|None|n1|1000' ;;\nesac",
        );
        let ids: Vec<String> = (1..=100_000).map(|i| (1_000_000 + i).to_string()).collect();
        let q = cli.poll_queue(&ids).await.unwrap();
        let listing = calls(&dir);
        assert_eq!(listing.len(), 1, "{listing:?}");
        assert!(listing[0].contains("--local") && listing[0].contains("--all"));
        assert!(!listing[0].contains("--jobs") && !listing[0].contains("--array"));
        assert!(q.errors.is_empty(), "{:?}", &q.errors[..1]);
        assert_eq!(
            q.len(),
            100_003,
            "ours only, the array's line among them (its three tasks)"
        );
        assert!(q.iter().all(|(_, uid, _)| uid == Some(1000)));
        use crate::slurm::types::JobState;
        assert_eq!(q.state(1000, "1000005_9"), Some(JobState::Pending));
        assert_eq!(q.state(1000, "1000005"), Some(JobState::Running));
        // The rows `squeue` reads of the same listing are the same jobs.
        let p = cli.squeue(&ids).await.unwrap();
        assert_eq!(p.rows.len(), 100_001);
        assert_eq!(p.rows.last().unwrap().job_id, "1000005_[2,4,9]");

        let p = cli.job_states(&ids[..1]).await.unwrap().expect("supported");
        let all = calls(&dir);
        assert_eq!(all.len(), 3);
        assert!(all[2].contains("--only-job-state") && all[2].contains("--array"));
        assert!(all[2].ends_with("--jobs=1000001"));
        assert_eq!(p.state(0, "7"), Some(JobState::Running));
        cli.job_states(&ids).await.unwrap().expect("supported");
        let all = calls(&dir);
        assert_eq!(all.len(), 4);
        assert!(all[3].contains("--only-job-state") && !all[3].contains("--jobs"));
        cli.poll_queue(&ids[..2]).await.unwrap();
        assert!(!calls(&dir)[4].contains("--jobs"));
        let cli = cli.naming_jobs_up_to(2);
        cli.poll_queue(&ids[..2]).await.unwrap();
        assert!(calls(&dir)[5].ends_with("--array --jobs=1000001,1000002"));
        cli.poll_queue(&ids).await.unwrap();
        assert!(!calls(&dir)[6].contains("--jobs"), "never past 64 KiB");
    }

    /// The poll that reads some users' pending jobs too is one squeue: the jobs asked
    /// about, and those users' pending lines; nobody else's, however long.
    #[tokio::test]
    async fn the_poll_with_pending_jobs_is_one_call() {
        let (dir, cli) = fake_squeue(
            "echo '7|7|RUNNING|None|n1|1000|alice|(null)'\n\
             echo '8|8|PENDING|Dependency||1000|alice|afterany:7(unfulfilled)'\n\
             echo '9|9|PENDING|Dependency||1001|bob|afterany:7(unfulfilled)'\n\
             printf '13|13|PENDING|Dependency||1000|alice|%s\\n' \"$(seq -s, 100000 100700 | sed 's/,/(unfulfilled),afterany:/g')\"\n\
             printf '10_[%s]|10|PENDING|None||1000|alice|(null)\\n' \"$(seq -s, 1 2 20000)\"\n\
             echo '11|11|RUNNING|None|n1|1000|alice|(null)'",
        );
        let ids = vec!["7".to_string(), "12".to_string()];
        let (queue, pending) = cli
            .squeue_with_pending(&ids, &["alice".to_string()])
            .await
            .unwrap();
        let pending = pending.unwrap();
        assert_eq!(calls(&dir).len(), 1);
        assert!(calls(&dir)[0].contains("--all") && calls(&dir)[0].contains("%u|%E"));
        let jobs: Vec<&str> = queue.iter().map(|(id, _, _)| id).collect();
        assert_eq!(jobs, ["7"]);
        let waiting: Vec<(&str, &str)> = pending
            .rows
            .iter()
            .map(|r| (r.job_id.as_str(), r.dependency.as_str()))
            .collect();
        // The first 64 bytes of the id, cut after its last whole task.
        let cut = "10_[1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31,33,35,37,39,41,...]";
        assert_eq!(waiting[1].0, "13");
        assert!(
            waiting[1].1.len() > 10_000 && waiting[1].1.ends_with("afterany:100700"),
            "an owner's long dependency is read whole"
        );
        assert_eq!(
            [waiting[0], waiting[2]],
            [("8", "afterany:7(unfulfilled)"), (cut, "")],
            "alice's pending jobs (a long task list cut as Slurm does), and no one else's"
        );
    }

    /// The lines of a listing are kept by the job id they begin with, whole whatever their
    /// length; another job's line is judged on its first fields, its task list cut short,
    /// dropped unread if those take more than 4 KiB, kept whole (a long last field too)
    /// within its budget; however the output is cut into reads.
    #[tokio::test]
    async fn wanted_lines_are_kept_whole_and_the_others_cut_or_dropped() {
        let long_list = "1,".repeat(10_000);
        let ours = format!("12_[{long_list}3]|x|y");
        let theirs = format!("13_[{long_list}3]|keep|z");
        let too_long = format!("14|keep{}|z", "y".repeat(5000));
        let long_last = format!("15|keep|{}", "d,".repeat(5000));
        let input = format!(
            "7|a|b\n{ours}\n77|b|c\n77|keep|c\n{theirs}\n{too_long}\n{long_last}\n16|keep\n12|c|d\n\nzz|d\n{}7|e|f\n7",
            "8".repeat(40)
        );
        let asked = |id: &[u8]| id == b"12" || id == b"7";
        let keep = |f: &[&[u8]]| f.len() >= 2 && f[1] == b"keep" && f.len() <= 2;
        let filter = |budget: usize| LineFilter {
            asked: &asked,
            other: Some(OtherLines {
                keep: &keep,
                fields: 2,
                budget,
                over: Default::default(),
            }),
        };
        // The first 64 bytes of the id, cut after its last whole task.
        let cut = format!("13_[{}...]|keep|z", "1,".repeat(30));
        for cap in [1, 3, 31, 32, 33, 4096, 1 << 16] {
            let mut r = tokio::io::BufReader::with_capacity(cap, input.as_bytes());
            let mut out = Vec::new();
            let f = filter(1 << 20);
            read_wanted_lines(&mut r, &f, &mut out, MAX_OUTPUT)
                .await
                .unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("7|a|b\n{ours}\n77|keep|c\n{cut}\n{long_last}\n16|keep\n12|c|d\n\nzz|d\n7"),
                "buffer of {cap}"
            );
            assert!(!f.other.unwrap().over.into_inner());
        }
        // Past the budget, no other line is kept, and it is said; the asked ones are.
        let mut r = tokio::io::BufReader::with_capacity(7, input.as_bytes());
        let mut out = Vec::new();
        let f = filter(200);
        read_wanted_lines(&mut r, &f, &mut out, MAX_OUTPUT)
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("7|a|b\n{ours}\n77|keep|c\n{cut}\n12|c|d\n\nzz|d\n7")
        );
        assert!(f.other.unwrap().over.into_inner());
        let only_asked = LineFilter {
            asked: &asked,
            other: None,
        };
        for (input, kept) in [
            ("7|a\n7|b", "7|a\n7|b"),
            ("7|a\n8|b", "7|a\n"),
            ("7|a\n77|keep", "7|a\n"),
        ] {
            let mut out = Vec::new();
            read_wanted_lines(&mut input.as_bytes(), &only_asked, &mut out, MAX_OUTPUT)
                .await
                .unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), kept, "{input:?}");
        }
    }

    #[test]
    fn the_daemons_queries_do_not_take_its_environments_formats() {
        let vars = [
            ("PATH", "/usr/bin"),
            ("SLURM_CONF", "/etc/slurm/slurm.conf"),
            ("SQUEUE_USERS", "alice"),
            ("SQUEUE_ALL", "1"),
            ("SQUEUE_FORMAT2", "name"),
            ("SACCT_FEDERATION", "1"),
            ("SCANCEL_INTERACTIVE", "1"),
            ("SCONTROL_LOCAL", "1"),
            ("SLURM_TIME_FORMAT", "relative"),
            ("SLURM_BITSTR_LEN", "8"),
            ("SLURM_CLUSTERS", "other"),
            ("SINFO_PARTITION", "nosuch"),
            ("SLURM_CONF_SERVER", "elsewhere"),
            ("SLURM_JWT", "token"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        let env = own_env_of(vars.into_iter(), &[("SLURM_BITSTR_LEN", "0")]);
        let names: Vec<String> = env
            .iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect();
        assert_eq!(
            names,
            [
                "PATH=/usr/bin",
                "SLURM_CONF=/etc/slurm/slurm.conf",
                "SLURM_BITSTR_LEN=0"
            ]
        );
    }

    #[test]
    fn a_command_run_as_a_user_gets_none_of_the_daemons_own_environment() {
        let vars = [
            ("PATH", "/usr/bin"),
            ("SLURM_CONF", "/etc/slurm/slurm.conf"),
            ("LD_LIBRARY_PATH", "/opt/slurm/lib"),
            ("LC_ALL", "C.UTF-8"),
            (
                "LD_PRELOAD",
                "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
            ),
            ("FAKETIME_SHARED", "/faketime_sem_1 /faketime_shm_1"),
            (
                "CREDENTIALS_DIRECTORY",
                "/run/credentials/slurm-supervisord.service",
            ),
            ("SITE_TOKEN", "secret"),
            ("HOME", "/root"),
            ("SQUEUE_USERS", "alice"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        let names: Vec<String> = user_env_of(vars.into_iter())
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["PATH", "SLURM_CONF", "LD_LIBRARY_PATH", "LC_ALL"]);
    }

    /// The same, seen by the command itself: an scontrol run as a user (here root, as the
    /// suite runs) has none of the test process's own variables but the kept ones.
    #[tokio::test]
    async fn an_scontrol_run_as_a_user_sees_only_the_kept_variables() {
        let dir = tempfile::tempdir().unwrap();
        let seen = dir.path().join("env");
        write_executable(
            &dir.path().join("scontrol"),
            format!("#!/bin/sh\nenv > {}\n", seen.display()),
        );
        let cli = cli_in(dir.path());
        let me = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .expect("the user running the tests has a passwd entry");
        let who = RunAs {
            uid: me.uid.as_raw(),
            gid: me.gid.as_raw(),
            user: std::ffi::CString::new(me.name).unwrap(),
        };
        cli.release(&["7".to_string()], Some(&who)).await.unwrap();
        let env = std::fs::read_to_string(&seen).unwrap();
        let names: Vec<&str> = env
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, _)| k)
            .collect();
        // The shell's own (PWD) aside, every name is a kept one.
        let strays: Vec<&&str> = names
            .iter()
            .filter(|k| !USER_ENV.contains(k) && **k != "PWD" && !k.starts_with("LC_"))
            .collect();
        assert!(strays.is_empty(), "{strays:?} in {env}");
        // Not vacuous: the test process has variables of its own (cargo sets these).
        assert!(
            std::env::var_os("CARGO_MANIFEST_DIR").is_some() || std::env::var_os("HOME").is_some()
        );
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
            others_over: false,
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
