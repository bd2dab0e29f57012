//! Pure parsers for what Slurm's commands print: `sacct --parsable2`, `squeue` with
//! [`SQUEUE_FORMAT`], `sbatch --parsable`, and the units those outputs use.
//!
//! Nothing here runs a command or reads a clock. A row that does not read cleanly becomes
//! a [`RowError`] carrying the line and, when it could be read, the job id: a row is never
//! guessed, because a guessed state would drive a real decision (a resubmission).
//!
//! What was checked against Slurm 22.05.8 (Debian 12) and 24.11.5 (Debian trixie; the
//! differences are in docs/compatibility.md) and shaped this module:
//! - sacct 22.05 has no `Restarts` field: asking for it makes sacct fail outright with
//!   `Invalid field requested: "Restarts"`. [`SACCT_FIELDS`] therefore leaves it out and
//!   [`SacctRow::restarts`] is always `None` from [`parse_sacct`]; `scontrol show job`
//!   is where Slurm reports restarts.
//! - sacct prints `None assigned` as the NodeList of a job that never ran, `Partition_Limit`
//!   as the Timelimit of a job that asked for none, and `CANCELLED by 0` on job rows too.
//! - squeue prints `(null)` for `%k` when a job has no comment (both versions).
//! - 24.11: NODE_FAIL job rows have ExitCode `1:0` (22.05: `0:0`); Timelimit may read
//!   `UNLIMITED` or `365-00:00:00` for jobs without a limit of their own; MaxRSS is empty
//!   for steps under a second. The squeue format asks for no exit code, so squeue's
//!   exit-code column format change in 23.02 does not reach the parser.
//! - sbatch's `--time` and every limit Slurm keeps are whole minutes; sbatch rounds seconds
//!   up (`--time=0:90` becomes `00:02:00`) and reads `0` or `00:00:00` as UNLIMITED.

use super::jobid;
use super::types::{ExitCode, HeldRow, JobState, PendingRow, Queue, SacctRow, SqueueRow, TagRow};
use crate::plumbing::osbytes::shortened as truncate;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::fmt;

// Slurm's durations are read by `sbatch_args` too, so they live in `crate::domain::syntax`.
pub use crate::domain::syntax::{
    format_time_limit, parse_duration, parse_duration_secs, BadDuration, Duration,
};

/// The sacct columns of the poll, in the order [`parse_sacct`] reads them. One sacct covers
/// the jobs of every user, so none of its columns is text a user writes (no `Comment`,
/// `JobName`, `WorkDir`): each field is Slurm's own and holds no `|` and no newline, and a
/// row is exactly these twelve fields or it is not read. `UID` is the owner Slurm
/// recorded; `Submit` is read as seconds since the epoch, which sacct prints when run with
/// `SLURM_TIME_FORMAT=%s`.
pub const SACCT_FIELDS: &str =
    "JobID,JobIDRaw,State,ExitCode,NodeList,MaxRSS,ReqMem,Timelimit,Elapsed,Partition,UID,Submit";

/// How many `|`-separated fields a sacct row has.
const SACCT_COLUMNS: usize = 12;

/// The squeue `--format` of the poll: job id, raw id, long state, reason, nodes, owner's
/// uid. Like [`SACCT_FIELDS`], it covers every user's jobs and carries no text a user
/// writes (the comment is not in it).
pub const SQUEUE_FORMAT: &str = "%i|%A|%T|%r|%N|%U";

/// How many `|`-separated fields a squeue row has.
const SQUEUE_COLUMNS: usize = 6;

/// The squeue `--format` of the poll's state-only query (`--only-job-state`, Slurm 23.11.5
/// and later): job id, raw id, long state. The controller keeps nothing else for it.
pub const STATE_FORMAT: &str = "%i|%A|%T";

/// The squeue `--format` of a tag lookup among one user's jobs (or of one job just
/// submitted): job id, raw id, and the comment, last because it is the owner's text. Read
/// into [`TagRow`]s, which are candidates only (see there).
pub const TAG_SQUEUE_FORMAT: &str = "%i|%A|%k";

/// squeue's `--Format` of the plain-sbatch mark listing (`Slurm::marked_jobs`): each
/// field whole (`:0`), then `|`. The admin comment comes last, so whatever it holds stays
/// in its own field of its line.
pub const MARK_SQUEUE_FORMAT: &str = "JobID:0|,UserID:0|,admin_comment:0";

/// The jobs of a [`MARK_SQUEUE_FORMAT`] listing whose admin comment is exactly `mark`:
/// `(job id, uid)`, the job id without an array task or a heterogeneous component (`12`
/// for `12_3`, `12_[1-5]` and `12+1`), each once. Candidates only: a line is Slurm's, but
/// an admin comment that held a line break could make one up, so whoever acts on a
/// candidate checks the job again (`adopt` reads its owner from squeue and its
/// `AdminComment` from a record that cannot span lines).
pub fn parse_marked(stdout: &str, mark: &str) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> = Vec::new();
    for line in stdout.lines() {
        let mut f = line.splitn(3, '|');
        let (Some(id), Some(uid), Some(comment)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if comment.trim_end() != mark {
            continue;
        }
        let base: String = id.trim().chars().take_while(char::is_ascii_digit).collect();
        let rest = &id.trim()[base.len()..];
        if base.is_empty() || !(rest.is_empty() || rest.starts_with(['_', '+'])) {
            continue;
        }
        let Ok(uid) = uid.trim().parse::<u32>() else {
            continue;
        };
        if !out.iter().any(|(j, u)| *j == base && *u == uid) {
            out.push((base, uid));
        }
    }
    out
}

/// The sacct columns of a tag lookup among one user's jobs (see [`TAG_SQUEUE_FORMAT`]).
pub const TAG_SACCT_FIELDS: &str = "JobID,JobIDRaw,Comment";

/// squeue's format for pending jobs and their dependencies (the dependency last). Every
/// field is Slurm's: `%E` is Slurm's own rendering of the dependency it parsed.
pub const PENDING_FORMAT: &str = "%i|%A|%u|%E";

/// At most this many bytes of an unreadable line are kept in its [`RowError`], so that a
/// runaway line (a comment of megabytes) cannot bloat the evidence stored about it.
pub const MAX_ERROR_LINE: usize = 512;

/// One line of output that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowError {
    /// 1-based line number in the output.
    pub line_no: usize,
    /// The line, cut to [`MAX_ERROR_LINE`] bytes.
    pub line: String,
    /// The first field, when it looks like a job id: the job this row was about.
    pub job_id: Option<String>,
    /// What was wrong with it.
    pub message: String,
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.job_id {
            Some(id) => write!(f, "line {} (job {}): {}", self.line_no, id, self.message),
            None => write!(f, "line {}: {}", self.line_no, self.message),
        }
    }
}

/// The rows of an output that could be read, and the lines that could not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parsed<T> {
    pub rows: Vec<T>,
    pub errors: Vec<RowError>,
}

impl<T> Default for Parsed<T> {
    fn default() -> Self {
        Parsed {
            rows: Vec::new(),
            errors: Vec::new(),
        }
    }
}

/// A whole output that cannot be used at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("sbatch printed no job id; check that --parsable was passed and look at its stderr")]
    EmptySbatchOutput,
    #[error("sbatch printed {line:?}, which is not a job id (expected `123` or `123;cluster`)")]
    BadSbatchOutput { line: String },
    #[error(
        "sbatch printed two different job ids, {first} and {second}; look both up before acting"
    )]
    ConflictingJobIds { first: String, second: String },
}

/// Parses `sacct --parsable2 --noheader --format=<SACCT_FIELDS>` output, with or without
/// `--duplicates` (requeued runs of one job id come as separate rows, oldest first; their
/// order is kept).
pub fn parse_sacct(stdout: &str) -> Parsed<SacctRow> {
    parse_lines(stdout, SACCT_COLUMNS, Trailing::None, |f, _| sacct_row(f))
}

/// Parses `squeue --noheader --states=all --array --format=<SQUEUE_FORMAT>` output.
pub fn parse_squeue(stdout: &str) -> Parsed<SqueueRow> {
    parse_lines(stdout, SQUEUE_COLUMNS, Trailing::None, |f, _| squeue_row(f))
}

/// Parses `squeue --noheader --states=all --format=<SQUEUE_FORMAT>` output (the poll's
/// listing, with `--all` or `--array --jobs=`) into the poll's [`Queue`] as it reads it:
/// each line checked as [`parse_squeue`] checks it, its job id the only text kept (no
/// [`SqueueRow`] is made).
pub fn fold_squeue(stdout: &str) -> Queue {
    let queue = RefCell::new(Queue::with_owners(line_count(stdout)));
    let read = parse_lines(stdout, SQUEUE_COLUMNS, Trailing::None, |f, _| {
        let (state, uid) = squeue_fields(f)?;
        queue.borrow_mut().add(uid, f[0].to_string(), state);
        Ok(())
    });
    let mut queue = queue.into_inner();
    queue.errors = read.errors;
    queue
}

/// Parses `squeue --only-job-state --noheader --states=all --format=<STATE_FORMAT>`
/// output into a [`Queue`] of states alone, as it reads it.
pub fn fold_states(stdout: &str) -> Queue {
    let queue = RefCell::new(Queue::states_only(line_count(stdout)));
    let read = parse_lines(stdout, 3, Trailing::None, |f, _| {
        let [job_id, job_id_raw, state] = f else {
            unreachable!("parse_lines hands over exactly 3 fields")
        };
        let state = queued_job_state(job_id_raw, state)?;
        queue.borrow_mut().add(0, job_id.to_string(), state);
        Ok(())
    });
    let mut queue = queue.into_inner();
    queue.errors = read.errors;
    queue
}

/// How many lines `text` has (the last one may have no newline): the rows a listing may
/// fold into, so the map they go to is sized once.
fn line_count(text: &str) -> usize {
    text.bytes().filter(|&b| b == b'\n').count() + 1
}

/// Parses the output of a tag lookup: squeue with [`TAG_SQUEUE_FORMAT`] or sacct
/// `--parsable2` with [`TAG_SACCT_FIELDS`]. Every field after the second is the comment.
pub fn parse_tags(stdout: &str) -> Parsed<TagRow> {
    parse_lines(stdout, 2, Trailing::Text, |f, comment| {
        let [job_id, job_id_raw] = f else {
            unreachable!("parse_lines hands over exactly 2 fields")
        };
        if !looks_like_job_id(job_id_raw) {
            return Err(format!(
                "JobIDRaw {:?} is not a job id",
                truncate(job_id_raw, 64)
            ));
        }
        Ok(TagRow {
            job_id: job_id.to_string(),
            job_id_raw: job_id_raw.to_string(),
            // squeue prints `(null)` for a job without a comment.
            comment: if comment == "(null)" {
                String::new()
            } else {
                comment
            },
        })
    })
}

/// The squeue `--format` of cluster mode's sweep of held jobs ([`parse_held`]): the
/// comment last, where its `|` are its own.
pub const HELD_FORMAT: &str = "%i|%A|%r|%U|%k";

/// Parses [`HELD_FORMAT`] output, keeping the jobs their owner holds (`JobHeldUser`)
/// whose comment holds `needle` (the other pending jobs are no one's business here).
pub fn parse_held(stdout: &str, needle: &str) -> Parsed<HeldRow> {
    let mut p = parse_lines(stdout, 4, Trailing::Text, |f, comment| {
        let [job_id, job_id_raw, reason, uid] = f else {
            unreachable!("parse_lines hands over exactly 4 fields")
        };
        if *reason != "JobHeldUser" || !comment.contains(needle) {
            return Ok(None);
        }
        if !looks_like_job_id(job_id_raw) {
            return Err(format!(
                "JobIDRaw {:?} is not a job id",
                truncate(job_id_raw, 64)
            ));
        }
        let uid = uid
            .parse()
            .map_err(|_| format!("UserId {:?} is not a uid", truncate(uid, 64)))?;
        Ok(Some(HeldRow {
            job_id: job_id.to_string(),
            job_id_raw: job_id_raw.to_string(),
            uid,
            comment,
        }))
    });
    Parsed {
        rows: p.rows.drain(..).flatten().collect(),
        errors: p.errors,
    }
}

/// The first line of [`HELD_FORMAT`] output for the one job `id` was asked about: its own
/// line (any line after it may be another job's comment running on). `None` unless that
/// line is job `id`'s (`%A`), held by its owner, and readable.
pub fn parse_held_one(stdout: &str, id: &str) -> Option<HeldRow> {
    let first = stdout.split('\n').next()?;
    let mut f = first.splitn(5, '|');
    let (job_id, raw, reason, uid, comment) =
        (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
    if raw != id || reason != "JobHeldUser" {
        return None;
    }
    Some(HeldRow {
        job_id: job_id.to_string(),
        job_id_raw: raw.to_string(),
        uid: uid.parse().ok()?,
        comment: comment.to_string(),
    })
}

/// The squeue `--format` of a poll that also reads some users' pending jobs (the
/// waiters' report, rewiring): [`SQUEUE_FORMAT`]'s fields, then [`PENDING_FORMAT`]'s `%u`
/// and `%E` (Slurm's rendering of the dependency, last).
pub const SQUEUE_PENDING_FORMAT: &str = "%i|%A|%T|%r|%N|%U|%u|%E";

/// Parses [`SQUEUE_PENDING_FORMAT`] output as it reads it: the jobs `ours(job id)` says
/// were asked about go into the poll's [`Queue`] (as [`fold_squeue`] reads them), and
/// the pending rows of the users `pending_of(user)` names are kept
/// ([`PENDING_FORMAT`]'s). Each line is read once, into what it is kept as; a line that
/// cannot be read is the poll's unless its job id is another's.
/// `ours_about` is about how many of the lines are the poll's (the ids asked): the map
/// is sized for them, not for every line, most of which can be other users' pending jobs.
pub fn fold_squeue_pending(
    stdout: &str,
    ours: impl Fn(&str) -> bool,
    ours_about: usize,
    pending_of: impl Fn(&str) -> bool,
) -> (Queue, Parsed<PendingRow>) {
    let queue = RefCell::new(Queue::with_owners(ours_about.min(line_count(stdout))));
    let pending = RefCell::new(Vec::new());
    let read = parse_lines(stdout, 7, Trailing::Text, |f, dependency| {
        let [job_id, job_id_raw, state, reason, nodes, uid, user] = f else {
            unreachable!("parse_lines hands over exactly 7 fields")
        };
        let (state, uid) = squeue_fields(&[job_id, job_id_raw, state, reason, nodes, uid])?;
        if state == JobState::Pending && pending_of(user) {
            pending.borrow_mut().push(PendingRow {
                job_id: job_id.to_string(),
                job_id_raw: job_id_raw.to_string(),
                user: user.to_string(),
                dependency: no_null(dependency),
            });
        }
        if ours(job_id) {
            queue.borrow_mut().add(uid, job_id.to_string(), state);
        }
        Ok(())
    });
    let mut queue = queue.into_inner();
    let mut pending_errors = Vec::new();
    for e in read.errors {
        match &e.job_id {
            Some(job) if !ours(job) => pending_errors.push(e),
            _ => queue.errors.push(e),
        }
    }
    (
        queue,
        Parsed {
            rows: pending.into_inner(),
            errors: pending_errors,
        },
    )
}

/// A dependency as squeue prints it (`%E`), empty for none (`(null)`).
fn no_null(dependency: String) -> String {
    if dependency == "(null)" {
        String::new()
    } else {
        dependency
    }
}

/// Parses `squeue --noheader --states=PENDING --format=<PENDING_FORMAT>` output.
pub fn parse_pending(stdout: &str) -> Parsed<PendingRow> {
    parse_lines(stdout, 3, Trailing::Text, |f, dependency| {
        let [job_id, job_id_raw, user] = f else {
            unreachable!("parse_lines hands over exactly 3 fields")
        };
        if !looks_like_job_id(job_id_raw) {
            return Err(format!("%A {:?} is not a job id", truncate(job_id_raw, 64)));
        }
        Ok(PendingRow {
            job_id: job_id.to_string(),
            job_id_raw: job_id_raw.to_string(),
            user: user.to_string(),
            dependency: no_null(dependency),
        })
    })
}

/// The value of `key` in `scontrol show config` (`Key   = value` lines); `None` when it is
/// missing or `(null)`.
pub fn show_config_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        let v = v.trim();
        (k.trim() == key && !v.is_empty() && v != "(null)").then(|| v.to_string())
    })
}

/// The uid of a `name(uid)` value, as `scontrol show config` gives `SlurmUser`
/// (`slurm(64030)`).
pub fn uid_in_parentheses(value: &str) -> Option<u32> {
    let inner = value.strip_suffix(')')?.rsplit_once('(')?.1;
    inner.parse().ok()
}

/// [`parse_scontrol_record`], refusing a record that names a key twice: a value its owner
/// wrote (a job name, comment, command or path) holds ` Key=`, so the record cannot be
/// read as Slurm wrote it. Returns the key named twice.
pub fn parse_scontrol_record_strict(
    line: &str,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    let mut seen = std::collections::HashSet::new();
    for key in scontrol_keys(line) {
        if !seen.insert(key) {
            return Err(key.to_string());
        }
    }
    Ok(parse_scontrol_record(line))
}

/// The keys of a `scontrol show job -o` record, in order (with repeats).
fn scontrol_keys(line: &str) -> Vec<&str> {
    scontrol_key_spans(line)
        .into_iter()
        .map(|(start, eq)| &line[start..eq])
        .collect()
}

/// Where each ` Key=` of a record starts, and where its `=` is.
fn scontrol_key_spans(line: &str) -> Vec<(usize, usize)> {
    let mut starts = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let at_boundary = i == 0 || bytes[i - 1] == b' ';
        if at_boundary && bytes[i].is_ascii_uppercase() {
            let mut k = i;
            while k < bytes.len()
                && (bytes[k].is_ascii_alphanumeric() || matches!(bytes[k], b'_' | b':' | b'/'))
            {
                k += 1;
            }
            if k < bytes.len() && bytes[k] == b'=' {
                starts.push((i, k));
                i = k + 1;
                continue;
            }
        }
        i += 1;
    }
    starts
}

/// One record of `scontrol show job -o` (`Key=value Key=value ...` on one line) as a map.
/// A value runs until the next ` Key=`, so values with spaces (`JobName=my job`) survive;
/// a value that itself contains ` Word=` cannot be told apart, as in scontrol's own output.
pub fn parse_scontrol_record(line: &str) -> std::collections::BTreeMap<String, String> {
    let starts = scontrol_key_spans(line);
    let mut out = std::collections::BTreeMap::new();
    for (n, &(key_start, eq)) in starts.iter().enumerate() {
        let end = starts
            .get(n + 1)
            .map(|&(next, _)| next)
            .unwrap_or(line.len());
        out.insert(
            line[key_start..eq].to_string(),
            line[eq + 1..end].trim().to_string(),
        );
    }
    out
}

/// Reads the job id from `sbatch --parsable` output: `123`, or `123;cluster` on a
/// multi-cluster setup. Blank lines and surrounding whitespace are tolerated; the same id
/// repeated is tolerated; anything else is an error, because a wrong id here would make
/// the supervisor watch a job that is not the one it submitted.
pub fn parse_sbatch_parsable(stdout: &str) -> Result<String, ParseError> {
    let mut found: Option<String> = None;
    for line in stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let bad = || ParseError::BadSbatchOutput {
            line: truncate(line, MAX_ERROR_LINE),
        };
        let (id, cluster) = match line.split_once(';') {
            Some((id, cluster)) => (id, Some(cluster)),
            None => (line, None),
        };
        if let Some(c) = cluster {
            if c.is_empty() || c.contains(|ch: char| ch.is_whitespace() || ch == ';') {
                return Err(bad());
            }
        }
        match parse_digits_u64(id) {
            Some(n) if n > 0 && n <= u64::from(u32::MAX) => {}
            _ => return Err(bad()),
        }
        match &found {
            None => found = Some(id.to_string()),
            Some(first) if first == id => {}
            Some(first) => {
                return Err(ParseError::ConflictingJobIds {
                    first: first.clone(),
                    second: id.to_string(),
                })
            }
        }
    }
    found.ok_or(ParseError::EmptySbatchOutput)
}

/// Bytes in a memory size as Slurm prints or takes it: `269648K`, `100M`, `2G`, `1T`,
/// `1.5G`, `0`.
///
/// - Units are 1024-based: K, M, G, T, P (either case), optionally followed by `B`
///   (`100MB`, which sbatch accepts too).
/// - A bare number is **megabytes**, as sbatch's `--mem` reads it (`--mem=100` is 100 MiB).
///   sacct prints MaxRSS with a unit (`269648K`) except for `0`, so this is only a
///   question for user-given values.
/// - Slurm before 21.08 printed ReqMem with a trailing `n` (per node) or `c` (per CPU),
///   `100Mn`/`100Mc`; the suffix is accepted and dropped, so the caller cannot tell per-node
///   from per-CPU with such a value.
/// - A fraction is accepted (sacct prints `1.50G` with `--units`) and rounded up to a byte.
///
/// Returns `None` for anything else, including blank, negative or overflowing values.
pub fn parse_mem_bytes(s: &str) -> Option<u64> {
    let s = s.strip_suffix(['n', 'c']).unwrap_or(s);
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(digits_end);
    let unit = match unit.len() {
        2 if unit.ends_with(['B', 'b']) => &unit[..1],
        _ => unit,
    };
    let mult: u128 = match unit {
        "" => 1 << 20,
        "K" | "k" => 1 << 10,
        "M" | "m" => 1 << 20,
        "G" | "g" => 1 << 30,
        "T" | "t" => 1 << 40,
        "P" | "p" => 1 << 50,
        _ => return None,
    };
    let (whole, frac) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    if whole.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole = u128::from(parse_digits_u64(whole)?);
    let scale = 10u128.pow(frac.len() as u32);
    let frac = if frac.is_empty() {
        0
    } else {
        u128::from(parse_digits_u64(frac)?)
    };
    // whole * scale + frac fits in u128 (below 2^64 * 10^9); times the unit it may not.
    let bytes = (whole * scale + frac).checked_mul(mult)?.div_ceil(scale);
    u64::try_from(bytes).ok()
}

// ---- internals --------------------------------------------------------------------------

/// Whether a row ends in a field that may hold `|` itself (joined back from every field
/// past the fixed ones), or is exactly its fixed fields.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Trailing {
    None,
    Text,
}

/// Splits output into lines, skips blank ones, and hands each line's fields to `row`
/// (with [`Trailing::Text`], the fixed ones, then the rest joined back with `|`).
fn parse_lines<T>(
    stdout: &str,
    fixed: usize,
    trailing: Trailing,
    row: impl Fn(&[&str], String) -> Result<T, String>,
) -> Parsed<T> {
    let mut out = Parsed {
        rows: Vec::new(),
        errors: Vec::new(),
    };
    for (i, line) in stdout.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('|').collect();
        let first = fields[0];
        let job_id = looks_like_job_id(first).then(|| first.to_string());
        let result = match trailing {
            Trailing::None if fields.len() != fixed => Err(format!(
                "expected {fixed} fields separated by '|', found {}",
                fields.len()
            )),
            Trailing::Text if fields.len() <= fixed => Err(format!(
                "expected at least {} fields separated by '|', found {}",
                fixed + 1,
                fields.len()
            )),
            _ if job_id.is_none() => Err(format!("{:?} is not a job id", truncate(first, 64))),
            Trailing::None => row(&fields, String::new()),
            Trailing::Text => row(&fields[..fixed], fields[fixed..].join("|")),
        };
        match result {
            Ok(r) => out.rows.push(r),
            Err(message) => out.errors.push(RowError {
                line_no: i + 1,
                line: truncate(line, MAX_ERROR_LINE),
                job_id,
                message,
            }),
        }
    }
    out
}

fn sacct_row(f: &[&str]) -> Result<SacctRow, String> {
    let [job_id, job_id_raw, state, exit, nodes, max_rss, req_mem, timelimit, elapsed, partition, uid, submit] =
        f
    else {
        unreachable!("parse_lines hands over exactly SACCT_COLUMNS fields")
    };
    if !looks_like_job_id(job_id_raw) {
        return Err(format!(
            "JobIDRaw {:?} is not a job id",
            truncate(job_id_raw, 64)
        ));
    }
    let (state, cancelled_by) = parse_state(state)?;
    let timelimit_secs = match parse_duration(timelimit) {
        _ if timelimit.is_empty() => None,
        // Zero minutes is how Slurm stores "no limit"; a zero here must never become a
        // limit that a retry multiplies.
        Ok(Duration::Secs(0)) | Ok(Duration::Unlimited) => None,
        Ok(Duration::Secs(n)) => Some(n),
        Err(_) => {
            return Err(format!(
                "Timelimit {:?} is not a Slurm time",
                truncate(timelimit, 64)
            ))
        }
    };
    let elapsed_secs = match parse_duration(elapsed) {
        _ if elapsed.is_empty() => None,
        Ok(Duration::Secs(n)) => Some(n),
        _ => {
            return Err(format!(
                "Elapsed {:?} is not a Slurm time",
                truncate(elapsed, 64)
            ))
        }
    };
    let uid = match *uid {
        "" => None,
        u => Some(parse_uid(u).ok_or_else(|| format!("UID {:?} is not a uid", truncate(u, 64)))?),
    };
    // A job that never got a submit time prints `Unknown` (`None` with %s).
    let submit = match *submit {
        "" | "Unknown" | "None" => None,
        t => Some(
            parse_digits_u64(t)
                .and_then(|n| i64::try_from(n).ok())
                .ok_or_else(|| {
                    format!(
                        "Submit {:?} is not seconds since the epoch (is SLURM_TIME_FORMAT=%s set?)",
                        truncate(t, 64)
                    )
                })?,
        ),
    };
    Ok(SacctRow {
        job_id: job_id.to_string(),
        job_id_raw: job_id_raw.to_string(),
        state,
        cancelled_by,
        // sacct leaves ExitCode empty on the `.batch` step of a job killed by NODE_FAIL: the
        // step never returned. Only there is blank read as 0:0 (the step's state says what
        // happened); a job row without one is still an error.
        exit_code: match *exit {
            "" if jobid::is_step(job_id) => ExitCode::default(),
            _ => parse_exit_code(exit)?,
        },
        node_list: nodes.to_string(),
        max_rss_bytes: optional_mem("MaxRSS", max_rss)?,
        req_mem_bytes: optional_mem("ReqMem", req_mem)?,
        timelimit_secs,
        elapsed_secs,
        partition: partition.to_string(),
        // Not a sacct field in Slurm 22.05; see the module documentation.
        restarts: None,
        uid,
        submit,
    })
}

/// A squeue row's `%A` checked to be a job id, and its `%T` read.
fn queued_job_state(job_id_raw: &str, state: &str) -> Result<JobState, String> {
    if !looks_like_job_id(job_id_raw) {
        return Err(format!("%A {:?} is not a job id", truncate(job_id_raw, 64)));
    }
    JobState::parse(state).ok_or_else(|| format!("unknown job state {:?}", truncate(state, 64)))
}

fn squeue_row(f: &[&str]) -> Result<SqueueRow, String> {
    let (state, uid) = squeue_fields(f)?;
    let [job_id, job_id_raw, _, reason, nodes, _] = f else {
        unreachable!("squeue_fields checked SQUEUE_COLUMNS fields")
    };
    Ok(SqueueRow {
        job_id: job_id.to_string(),
        job_id_raw: job_id_raw.to_string(),
        state,
        reason: reason.to_string(),
        node_list: nodes.to_string(),
        uid,
    })
}

/// What a poll row says, read in place: its `%T` and `%U`, its `%A` checked to be a job
/// id. The fields the poll does not keep (`%r`, `%N`) are not copied.
fn squeue_fields(f: &[&str]) -> Result<(JobState, u32), String> {
    let [_, job_id_raw, state, _, _, uid] = f else {
        unreachable!("parse_lines hands over exactly SQUEUE_COLUMNS fields")
    };
    let state = queued_job_state(job_id_raw, state)?;
    let uid = parse_uid(uid).ok_or_else(|| format!("%U {:?} is not a uid", truncate(uid, 64)))?;
    Ok((state, uid))
}

/// A uid as Slurm prints one: digits that fit in 32 bits.
fn parse_uid(s: &str) -> Option<u32> {
    parse_digits_u64(s).and_then(|n| u32::try_from(n).ok())
}

/// `COMPLETED`, or `CANCELLED by 1000` (the uid of whoever cancelled).
fn parse_state(s: &str) -> Result<(JobState, Option<u32>), String> {
    let unknown = || format!("unknown job state {:?}", truncate(s, 64));
    match s.split_once(" by ") {
        Some(("CANCELLED", uid)) => {
            let uid = parse_digits_u64(uid)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(unknown)?;
            Ok((JobState::Cancelled, Some(uid)))
        }
        Some(_) => Err(unknown()),
        None => Ok((JobState::parse(s).ok_or_else(unknown)?, None)),
    }
}

/// `code:signal`, both non-negative integers.
fn parse_exit_code(s: &str) -> Result<ExitCode, String> {
    let bad = || format!("ExitCode {:?} is not code:signal", truncate(s, 64));
    let (code, signal) = s.split_once(':').ok_or_else(bad)?;
    let num = |t: &str| parse_digits_u64(t).and_then(|n| i32::try_from(n).ok());
    Ok(ExitCode {
        code: num(code).ok_or_else(bad)?,
        signal: num(signal).ok_or_else(bad)?,
    })
}

fn optional_mem(column: &str, s: &str) -> Result<Option<u64>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    parse_mem_bytes(s)
        .map(Some)
        .ok_or_else(|| format!("{column} {:?} is not a memory size", truncate(s, 64)))
}

/// Only ASCII digits (no sign, no spaces, not empty), as Slurm prints numbers.
fn parse_digits_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// True for the shapes Slurm prints as a job id: it starts with a digit and holds only
/// digits, letters (step names), and `_ . + [ ] - % ,` (arrays, steps, het components).
/// Rows are accepted on this loose check, not on [`jobid::JobId::parse`]: a row whose id
/// Slurm prints in a shape not foreseen there is still read (and taken apart by the
/// lenient [`jobid::job_part`] and [`jobid::is_step`]), not left unjudged.
fn looks_like_job_id(s: &str) -> bool {
    s.len() <= 256
        && s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.+[]-%,".contains(c))
}

#[cfg(test)]
mod tests {
    #[test]
    fn slurm_user_is_read_with_its_uid() {
        let text = "ClusterName             = dev\nSlurmUser               = slurm(64030)\n";
        assert_eq!(
            show_config_value(text, "SlurmUser")
                .as_deref()
                .and_then(uid_in_parentheses),
            Some(64030)
        );
        for bad in ["slurm", "slurm()", "slurm(x)", "(", ""] {
            assert_eq!(uid_in_parentheses(bad), None, "{bad}");
        }
    }

    use super::*;

    #[test]
    fn show_config_values() {
        // `scontrol show config` of 22.05 and 24.11 (docs/slurm-observed.md).
        let text = "Configuration data as of 2026-11-22T20:13:04\n\
AccountingStorageBackupHost = (null)\n\
MailDomain              = (null)\n\
MailProg                = /bin/true\n\
MaxArraySize            = 1001\n";
        assert_eq!(
            show_config_value(text, "MailProg").as_deref(),
            Some("/bin/true")
        );
        assert_eq!(show_config_value(text, "MailDomain"), None);
        assert_eq!(show_config_value(text, "Nope"), None);
    }

    const K: u64 = 1 << 10;
    const M: u64 = 1 << 20;
    const G: u64 = 1 << 30;

    /// A job row as the tests expect it; fields not given are the usual blank/None.
    fn row(job_id: &str, raw: &str, state: JobState, exit: (i32, i32)) -> SacctRow {
        SacctRow {
            job_id: job_id.into(),
            job_id_raw: raw.into(),
            state,
            cancelled_by: None,
            exit_code: ExitCode {
                code: exit.0,
                signal: exit.1,
            },
            node_list: String::new(),
            max_rss_bytes: None,
            req_mem_bytes: None,
            timelimit_secs: None,
            elapsed_secs: None,
            partition: String::new(),
            restarts: None,
            uid: None,
            submit: None,
        }
    }

    fn one(line: &str) -> SacctRow {
        let p = parse_sacct(line);
        assert!(p.errors.is_empty(), "{line}: {:?}", p.errors);
        assert_eq!(p.rows.len(), 1, "{line}");
        p.rows.into_iter().next().unwrap()
    }

    #[test]
    fn fields_constant_matches_the_fixed_count() {
        assert_eq!(SACCT_FIELDS.split(',').count(), SACCT_COLUMNS);
        assert_eq!(SQUEUE_FORMAT.split('|').count(), SQUEUE_COLUMNS);
        // The poll's queries cover every user's jobs: nothing a user writes is in them.
        for user_text in [
            "Comment",
            "JobName",
            "WorkDir",
            "StdOut",
            "StdErr",
            "Reason",
            "Constraints",
        ] {
            assert!(
                !SACCT_FIELDS.split(',').any(|f| f == user_text),
                "{user_text}"
            );
        }
        for user_text in ["%k", "%j", "%Z", "%o", "%f", "%y"] {
            assert!(!SQUEUE_FORMAT.contains(user_text), "{user_text}");
        }
        // The tag lookups read the comment, last.
        assert!(TAG_SQUEUE_FORMAT.ends_with("|%k"));
        assert!(TAG_SACCT_FIELDS.ends_with(",Comment"));
        assert!(
            !SACCT_FIELDS.contains("Restarts"),
            "sacct 22.05 rejects Restarts"
        );
    }

    /// Every ending in docs/slurm-observed.md, as sacct --parsable2 prints it with SACCT_FIELDS.
    #[test]
    fn sacct_failure_shapes_from_the_notes() {
        let out = "\
1|1|COMPLETED|0:0|n1||100M|00:10:00|00:00:01|debug|1000|1795611422
1.batch|1.batch|COMPLETED|0:0|n1|1024K|||00:00:01|||1795611422
2|2|FAILED|1:0|n1||100M|00:10:00|00:00:01|debug|1000|1795611422
2.batch|2.batch|FAILED|1:0|n1|2048K|||00:00:01|||1795611422
3|3|FAILED|0:9|vm||100M|00:30:00|00:00:03|debug|1000|1795611422
3.batch|3.batch|CANCELLED by 0|0:9|vm|269648K|||00:00:03|||1795611422
8|8|TIMEOUT|0:0|vm||100M|00:01:00|00:01:27|debug|1000|1795611422
8.batch|8.batch|CANCELLED|0:15|vm|3132K|||00:01:27|||1795611422
4|4|PREEMPTED|0:0|n1||1000M|00:30:00|00:00:29|debug|1000|1795611422
4|4|PENDING|0:0|None assigned||1000M|00:30:00|00:00:00|debug|1000|1795611422
12|12|PREEMPTED|0:0|n2||1000M|Partition_Limit|00:00:01|debug|1000|1795611422
12.batch|12.batch|CANCELLED|0:15|n2|3168K|||00:00:01|||1795611422
7|7|NODE_FAIL|0:0|n1||100M|00:10:00|00:00:20|debug|1000|1795611422
7.batch|7.batch|CANCELLED|0:15|n1|1024K|||00:00:20|||1795611422
5|5|CANCELLED by 1000|0:0|None assigned||1000M|01:40:00|00:00:00|debug|1000|1795611422
";
        let p = parse_sacct(out);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let got: Vec<(&str, JobState, Option<u32>, String)> = p
            .rows
            .iter()
            .map(|r| {
                (
                    r.job_id.as_str(),
                    r.state,
                    r.cancelled_by,
                    r.exit_code.to_string(),
                )
            })
            .collect();
        use JobState::*;
        let want = vec![
            ("1", Completed, None, "0:0".to_string()),
            ("1.batch", Completed, None, "0:0".into()),
            ("2", Failed, None, "1:0".into()),
            ("2.batch", Failed, None, "1:0".into()),
            ("3", Failed, None, "0:9".into()),
            ("3.batch", Cancelled, Some(0), "0:9".into()),
            ("8", Timeout, None, "0:0".into()),
            ("8.batch", Cancelled, None, "0:15".into()),
            ("4", Preempted, None, "0:0".into()),
            ("4", Pending, None, "0:0".into()),
            ("12", Preempted, None, "0:0".into()),
            ("12.batch", Cancelled, None, "0:15".into()),
            ("7", NodeFail, None, "0:0".into()),
            ("7.batch", Cancelled, None, "0:15".into()),
            ("5", Cancelled, Some(1000), "0:0".into()),
        ];
        assert_eq!(got, want);

        // The OOM step carries the evidence: MaxRSS above ReqMem.
        let oom_job = &p.rows[4];
        assert_eq!(oom_job.req_mem_bytes, Some(100 * M));
        assert_eq!(oom_job.max_rss_bytes, None);
        assert_eq!(oom_job.node_list, "vm");
        assert_eq!(p.rows[5].max_rss_bytes, Some(269_648 * K));
        assert_eq!(p.rows[5].req_mem_bytes, None);
        assert_eq!(p.rows[5].partition, "");
        // TIMEOUT: Elapsed past Timelimit.
        assert_eq!(p.rows[6].timelimit_secs, Some(60));
        assert_eq!(p.rows[6].elapsed_secs, Some(87));
        assert_eq!(p.rows[7].timelimit_secs, None);
        // Never-run job: NodeList kept as printed.
        assert_eq!(p.rows[9].node_list, "None assigned");
        assert_eq!(
            p.rows[10].timelimit_secs, None,
            "Partition_Limit is no limit of the job's own"
        );
        assert_eq!(p.rows[14].timelimit_secs, Some(100 * 60));
    }

    /// Rows recorded on the dev cluster (docs/slurm-observed.md), verbatim.
    #[test]
    fn sacct_rows_recorded_on_the_dev_cluster() {
        let out = "\
133|133|NODE_FAIL|0:0|n1||1000M|00:30:00|00:00:02|debug|1000|1795611422
133.batch|133.batch|CANCELLED||n1||||00:00:02|||1795611422
108|108|FAILED|0:9|n2||100M|00:30:00|00:00:01|debug|1000|1795611422
108.batch|108.batch|CANCELLED by 0|0:9|n2|424496K|||00:00:01|||1795611422
110_[1-4%1]|110|PENDING|0:0|None assigned||1000M|Partition_Limit|00:00:00|debug|1000|1795611422
123_1|127|COMPLETED|0:0|n2||1000M|00:30:00|00:00:05|debug|1000|1795611422
123_1.batch|127.batch|COMPLETED|0:0|n2|3296K|||00:00:05|||1795611422
123_2.batch|128.batch|RUNNING|0:0|n2||||00:00:05|||1795611422
130|130|PREEMPTED|0:0|n1||1000M|Partition_Limit|00:00:01|debug|1000|1795611422
111|111|FAILED|1:0|None assigned||999999999M|Partition_Limit|00:00:00|debug|1000|1795611422
109|109|COMPLETED|0:0|n1||1000M|00:30:00|00:00:05|debug|1000|1795611422
131|131|PENDING|0:0|n2||16?||00:00:02||1000|1795611422
";
        let p = parse_sacct(out);
        let got: Vec<(&str, &str, JobState, String)> = p
            .rows
            .iter()
            .map(|r| {
                (
                    r.job_id.as_str(),
                    r.job_id_raw.as_str(),
                    r.state,
                    r.exit_code.to_string(),
                )
            })
            .collect();
        use JobState::*;
        assert_eq!(
            got,
            vec![
                ("133", "133", NodeFail, "0:0".to_string()),
                ("133.batch", "133.batch", Cancelled, "0:0".into()),
                ("108", "108", Failed, "0:9".into()),
                ("108.batch", "108.batch", Cancelled, "0:9".into()),
                ("110_[1-4%1]", "110", Pending, "0:0".into()),
                ("123_1", "127", Completed, "0:0".into()),
                ("123_1.batch", "127.batch", Completed, "0:0".into()),
                ("123_2.batch", "128.batch", Running, "0:0".into()),
                ("130", "130", Preempted, "0:0".into()),
                ("111", "111", Failed, "1:0".into()),
                ("109", "109", Completed, "0:0".into()),
            ]
        );
        assert_eq!(p.rows[3].max_rss_bytes, Some(424_496 * K));
        assert_eq!(p.rows[3].cancelled_by, Some(0));
        assert_eq!(p.rows[9].req_mem_bytes, Some(999_999_999 * M));
        assert_eq!(
            (p.rows[10].uid, p.rows[10].submit),
            (Some(1000), Some(1795611422))
        );
        assert_eq!((p.rows[1].uid, p.rows[1].submit), (None, Some(1795611422)));
        // The stub row sacct shows for a few seconds after a job starts or ends is not data.
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        assert_eq!(
            (p.errors[0].line_no, p.errors[0].job_id.as_deref()),
            (12, Some("131"))
        );
        assert!(
            p.errors[0].message.contains("ReqMem"),
            "{}",
            p.errors[0].message
        );
        // A job row without an exit code is not given one.
        let p =
            parse_sacct("133|133|NODE_FAIL||n1||1000M|00:30:00|00:00:02|debug|1000|1795611422\n");
        assert!(p.rows.is_empty());
        assert!(
            p.errors[0].message.contains("ExitCode"),
            "{}",
            p.errors[0].message
        );
    }

    /// Rows Slurm 24.11.5 (Debian trixie) printed on `scripts/dev-cluster up --slurm 24.11`
    /// (docs/slurm-observed.md, "Slurm 24.11"), verbatim, and those of its 22.05 sections.
    #[test]
    fn sacct_rows_recorded_on_slurm_24_11() {
        let out = "\
43|43|COMPLETED|0:0|n1||1000M|00:30:00|00:00:00|debug|1000|1795611422
43.batch|43.batch|COMPLETED|0:0|n1||||00:00:00|||1795611422
53|53|FAILED|0:9|n1||100M|00:30:00|00:00:01|debug|1000|1795611422
53.batch|53.batch|CANCELLED by 0|0:9|n1|163600K|||00:00:01|||1795611422
55|55|NODE_FAIL|1:0|n1||1000M|00:30:00|00:00:03|debug|1000|1795611422
55.batch|55.batch|CANCELLED||n1||||00:00:03|||1795611422
46|46|NODE_FAIL|1:0|n1||1000M|00:01:00|00:00:03|debug|1000|1795611422
46.batch|46.batch|CANCELLED||n1||||00:00:03|||1795611422
46|46|TIMEOUT|0:0|n1||1000M|00:01:00|00:01:04|debug|1000|1795611422
46.batch|46.batch|CANCELLED|0:15|n1|3328K|||00:01:05|||1795611422
20|20|TIMEOUT|0:0|n1||7231M|00:01:00|00:01:15|debug|1000|1795611422
20.batch|20.batch|COMPLETED|0:0|n1|3328K|||00:01:15|||1795611422
57|57|PENDING|0:0|None assigned||1000M|UNLIMITED|00:00:00|debug|1000|1795611422
22|22|NODE_FAIL|1:0|n1||7231M|UNLIMITED|00:00:00|debug|1000|1795611422
22.batch|22.batch|CANCELLED||n1||||00:00:00|||1795611422
23|23|COMPLETED|0:0|n2||7231M|365-00:00:00|00:00:05|debug|1000|1795611422
24|24|PENDING|0:0|None assigned||7231M|Partition_Limit|00:00:00|debug|1000|1795611422
49_2|51|FAILED|1:0|n2||1000M|00:30:00|00:00:00|debug|1000|1795611422
49_3|49|COMPLETED|0:0|n1||1000M|00:30:00|00:00:00|debug|1000|1795611422
47|47|COMPLETED|0:0|n2||1000M|00:30:00|00:00:01|debug|1000|1795611422
";
        let p = parse_sacct(out);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        /// JobID, State, ExitCode, MaxRSS bytes, Timelimit seconds.
        type Seen<'a> = (&'a str, JobState, String, Option<u64>, Option<u64>);
        let got: Vec<Seen> = p
            .rows
            .iter()
            .map(|r| {
                (
                    r.job_id.as_str(),
                    r.state,
                    r.exit_code.to_string(),
                    r.max_rss_bytes,
                    r.timelimit_secs,
                )
            })
            .collect();
        use JobState::*;
        assert_eq!(
            got,
            vec![
                // MaxRSS is empty for a step under a second.
                ("43", Completed, "0:0".to_string(), None, Some(1800)),
                ("43.batch", Completed, "0:0".into(), None, None),
                ("53", Failed, "0:9".into(), None, Some(1800)),
                ("53.batch", Cancelled, "0:9".into(), Some(163_600 * K), None),
                // NODE_FAIL has exit code 1:0 in 24.11 (0:0 in 22.05); its batch step an
                // empty one, read as 0:0.
                ("55", NodeFail, "1:0".into(), None, Some(1800)),
                ("55.batch", Cancelled, "0:0".into(), None, None),
                // The same with requeue allowed (`-D`: the node failure, then the rerun).
                ("46", NodeFail, "1:0".into(), None, Some(60)),
                ("46.batch", Cancelled, "0:0".into(), None, None),
                ("46", Timeout, "0:0".into(), None, Some(60)),
                ("46.batch", Cancelled, "0:15".into(), Some(3328 * K), None),
                // Ended just before the time-limit sweep: TIMEOUT over a COMPLETED step.
                ("20", Timeout, "0:0".into(), None, Some(60)),
                ("20.batch", Completed, "0:0".into(), Some(3328 * K), None),
                // Timelimit UNLIMITED, 365-00:00:00 (backfill-started), Partition_Limit.
                ("57", Pending, "0:0".into(), None, None),
                ("22", NodeFail, "1:0".into(), None, None),
                ("22.batch", Cancelled, "0:0".into(), None, None),
                ("23", Completed, "0:0".into(), None, Some(365 * 86_400)),
                ("24", Pending, "0:0".into(), None, None),
                ("49_2", Failed, "1:0".into(), None, Some(1800)),
                ("49_3", Completed, "0:0".into(), None, Some(1800)),
                ("47", Completed, "0:0".into(), None, Some(1800)),
            ]
        );
        assert_eq!(p.rows[4].node_list, "n1");
        assert_eq!(p.rows[5].elapsed_secs, Some(3));
        assert_eq!(p.rows[17].job_id_raw, "51");
        assert_eq!(
            p.rows[18].job_id_raw, "49",
            "the last task carries the base id"
        );
        for limit in ["UNLIMITED", "Partition_Limit"] {
            assert_eq!(parse_duration(limit), Ok(Duration::Unlimited), "{limit}");
        }
        assert_eq!(
            parse_duration("365-00:00:00"),
            Ok(Duration::Secs(365 * 86_400))
        );
    }

    /// squeue 24.11 prints `(null)` for a job without a comment, as 22.05 does (the tag
    /// lookups' format).
    #[test]
    fn tag_rows_recorded_on_slurm_24_11() {
        let p = parse_tags("57|57|(null)\n54|54|(null)\n55|55|ssv-0a1b2c3d-L1-c1.1\n");
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let got: Vec<(&str, &str)> = p
            .rows
            .iter()
            .map(|r| (r.job_id.as_str(), r.comment.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![("57", ""), ("54", ""), ("55", "ssv-0a1b2c3d-L1-c1.1")]
        );
    }

    #[test]
    fn sacct_full_row_is_read_field_by_field() {
        let r =
            one("14_3|17|FAILED|3:0|n[1-2]|1.5G|4000M|1-00:00:00|1-02:03:04|long|1001|1795611422");
        let mut want = row("14_3", "17", JobState::Failed, (3, 0));
        want.node_list = "n[1-2]".into();
        want.max_rss_bytes = Some(3 * G / 2);
        want.req_mem_bytes = Some(4000 * M);
        want.timelimit_secs = Some(86_400);
        want.elapsed_secs = Some(86_400 + 2 * 3_600 + 3 * 60 + 4);
        want.partition = "long".into();
        want.uid = Some(1001);
        want.submit = Some(1_795_611_422);
        assert_eq!(r, want);
    }

    /// cgroup enforcement: OUT_OF_MEMORY 0:125 sometimes only on a step row.
    #[test]
    fn sacct_cgroup_oom_on_a_step_row() {
        for job_line in [
            "123|123|FAILED|1:0|n1||4G|01:00:00|00:10:00|debug|1000|1795611422",
            "123|123|COMPLETED|0:0|n1||4G|01:00:00|00:10:00|debug|1000|1795611422",
        ] {
            let out = format!(
                "{job_line}\n123.batch|123.batch|COMPLETED|0:0|n1|1024K|||00:10:00|||1795611422\n\
                 123.extern|123.extern|COMPLETED|0:0|n1|0|||00:10:00|||1795611422\n\
                 123.0|123.0|OUT_OF_MEMORY|0:125|n1|4194304K|||00:09:59|||1795611422\n"
            );
            let p = parse_sacct(&out);
            assert!(p.errors.is_empty(), "{:?}", p.errors);
            assert_eq!(p.rows.len(), 4);
            assert!(!p.rows[0].is_step());
            assert_eq!(p.rows[0].req_mem_bytes, Some(4 * G));
            let step = &p.rows[3];
            assert!(step.is_step());
            assert_eq!(step.job_part(), "123");
            assert_eq!(step.state, JobState::OutOfMemory);
            assert_eq!(
                step.exit_code,
                ExitCode {
                    code: 0,
                    signal: 125
                }
            );
            assert_eq!(step.max_rss_bytes, Some(4 * G));
            assert_eq!(p.rows[2].max_rss_bytes, Some(0));
        }
    }

    #[test]
    fn sacct_job_id_shapes() {
        let cases = [
            // JobID, JobIDRaw, State
            ("14_1", "15", "COMPLETED"),
            ("14_[3-10]", "14", "PENDING"),
            ("14_[3-10%2]", "14", "PENDING"),
            ("14_[3,5,7-9]", "14", "PENDING"),
            ("3.batch", "3.batch", "COMPLETED"),
            ("3.extern", "3.extern", "COMPLETED"),
            ("123.0", "123.0", "FAILED"),
            ("123_4.batch", "127.batch", "FAILED"),
            ("123+0", "123", "COMPLETED"),
            ("123+1.batch", "124.batch", "COMPLETED"),
        ];
        for (id, raw, state) in cases {
            let r = one(&format!("{id}|{raw}|{state}|0:0|n1||||00:00:00|||"));
            assert_eq!(
                (r.job_id.as_str(), r.job_id_raw.as_str(), r.state.as_str()),
                (id, raw, state)
            );
        }
        assert_eq!(
            one("123_4.batch|127.batch|FAILED|0:0||||||||1795611422").job_part(),
            "123_4"
        );
    }

    #[test]
    fn sacct_units_in_columns() {
        // (MaxRSS, ReqMem, Timelimit, Elapsed) -> parsed
        type Want = (Option<u64>, Option<u64>, Option<u64>, Option<u64>);
        let cases: &[(&str, &str, &str, &str, Want)] = &[
            (
                "269648K",
                "100M",
                "00:01:00",
                "00:01:27",
                (Some(269_648 * K), Some(100 * M), Some(60), Some(87)),
            ),
            (
                "1.5G",
                "2G",
                "1-00:00:00",
                "1-02:03:04",
                (Some(3 * G / 2), Some(2 * G), Some(86_400), Some(93_784)),
            ),
            (
                "0",
                "100Mn",
                "30:00",
                "00:00:00",
                (Some(0), Some(100 * M), Some(1_800), Some(0)),
            ),
            (
                "",
                "100Mc",
                "UNLIMITED",
                "",
                (None, Some(100 * M), None, None),
            ),
            (
                "",
                "",
                "Partition_Limit",
                "00:00:01",
                (None, None, None, Some(1)),
            ),
            (
                "",
                "999999999M",
                "",
                "00:00:00",
                (None, Some(999_999_999 * M), None, Some(0)),
            ),
        ];
        for (rss, req, tl, el, want) in cases {
            let r = one(&format!(
                "1|1|COMPLETED|0:0|n1|{rss}|{req}|{tl}|{el}|debug|1000|1795611422"
            ));
            assert_eq!(
                (
                    r.max_rss_bytes,
                    r.req_mem_bytes,
                    r.timelimit_secs,
                    r.elapsed_secs
                ),
                *want,
                "{rss} {req} {tl} {el}"
            );
        }
    }

    #[test]
    fn a_tag_lookups_comment_keeps_its_pipes_and_spaces() {
        let p = parse_tags("9|9|a|b||c ssv-00000000-L1-c1.1 |\n10|10|(null)\n");
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        assert_eq!(p.rows[0].comment, "a|b||c ssv-00000000-L1-c1.1 |");
        assert_eq!(p.rows[1].comment, "");
    }

    /// The attack of issue 21: bob's comment holds a newline and rows of his own making
    /// about alice's job. In the poll's queries there is no comment to hold it; in a tag
    /// lookup the forged lines read as rows (candidates about any job), which is why those
    /// are believed only through the poll's own rows (tests/security.rs).
    #[test]
    fn a_comment_with_a_newline_cannot_be_part_of_a_poll_row() {
        let forged = "first\n999|999|RUNNING|None|n1|1000\n100|100|OUT_OF_MEMORY|0:125|n1||100M|01:00:00|00:00:05|debug|1000|1795611422";
        // As squeue printed it on 22.05 with the comment last (the old format): the
        // forged lines are rows of the tag format, never of the poll's.
        let tags = parse_tags(&format!("5|5|{forged}\n"));
        assert_eq!(tags.rows[0].job_id, "5");
        assert_eq!(tags.rows[0].comment, "first");
        // The poll's rows are exactly their fields: a real row has no room for text.
        let sq = parse_squeue("5|5|RUNNING|None|n1|1001|first\n");
        assert!(sq.rows.is_empty() && sq.errors.len() == 1, "{sq:?}");
        let sa = parse_sacct("5|5|FAILED|1:0|n1||1G|00:10:00|00:00:05|debug|1001|1795611422|x\n");
        assert!(sa.rows.is_empty() && sa.errors.len() == 1, "{sa:?}");
    }

    #[test]
    fn sacct_garbage_becomes_row_errors_not_rows() {
        let huge = format!(
            "77|77|FAILED|1:0|n1||1G|00:10:00|{}|debug|1000|1795611422",
            "9".repeat(100_000)
        );
        let out = format!(
            "\n\
             10|10|FROBNICATED|0:0|n1||1G|00:10:00|00:00:01|debug|1000|1795611422\n\
             11|11|FAILED|one:0|n1||1G|00:10:00|00:00:01|debug|1000|1795611422\n\
             12|12|FAILED\n\
             hello world\n\
             13|13|FAILED|1:0|n1|lots|1G|00:10:00|00:00:01|debug|1000|1795611422\n\
             14|14|FAILED|1:0|n1||1G|soon|00:00:01|debug|1000|1795611422\n\
             15|15|CANCELLED by root|0:0|n1||1G|00:10:00|00:00:01|debug|1000|1795611422\n\
             16|16|FAILED|-1:0|n1||1G|00:10:00|00:00:01|debug|1000|1795611422\n\
             {huge}\n\
             17|17|COMPLETED|0:0|n1||1G|00:10:00|00:00:01|debug|1000|1795611422\n\
             \n"
        );
        let p = parse_sacct(&out);
        assert_eq!(p.rows.len(), 1, "only the good row survives: {:?}", p.rows);
        assert_eq!(p.rows[0].job_id, "17");
        let got: Vec<(usize, Option<&str>, bool)> = p
            .errors
            .iter()
            .map(|e| {
                (
                    e.line_no,
                    e.job_id.as_deref(),
                    e.line.len() <= MAX_ERROR_LINE + 3,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (2, Some("10"), true),
                (3, Some("11"), true),
                (4, Some("12"), true),
                (5, None, true),
                (6, Some("13"), true),
                (7, Some("14"), true),
                (8, Some("15"), true),
                (9, Some("16"), true),
                (10, Some("77"), true),
            ]
        );
        assert!(
            p.errors[0].message.contains("FROBNICATED"),
            "{}",
            p.errors[0].message
        );
        assert!(
            p.errors[1].message.contains("ExitCode"),
            "{}",
            p.errors[1].message
        );
        assert!(
            p.errors[2].message.contains("fields"),
            "{}",
            p.errors[2].message
        );
        assert!(
            p.errors[4].message.contains("MaxRSS"),
            "{}",
            p.errors[4].message
        );
        assert!(
            p.errors[5].message.contains("Timelimit"),
            "{}",
            p.errors[5].message
        );
        assert!(
            p.errors[8].message.contains("Elapsed"),
            "{}",
            p.errors[8].message
        );
        assert!(p.errors[8].line.ends_with("..."));
        assert_eq!(
            p.errors[0].to_string(),
            "line 2 (job 10): unknown job state \"FROBNICATED\""
        );
    }

    #[test]
    fn sacct_wrong_column_counts() {
        // Too few or too many fields is an error: the column set is fixed in one place.
        let p = parse_sacct("1|1|COMPLETED|0:0|n1||1G|00:10:00|00:00:01|debug\n");
        assert_eq!(p.rows.len(), 0);
        assert_eq!(p.errors[0].job_id.as_deref(), Some("1"));
        let p = parse_sacct("1|1|COMPLETED|0:0|n1||1G|00:10:00|00:00:01|debug|0|1|\n");
        assert_eq!((p.rows.len(), p.errors.len()), (0, 1));
        // An old row with the comment last is not read as a row with a uid.
        let p = parse_sacct(
            "1|1|COMPLETED|0:0|n1||1G|00:10:00|00:00:01|debug|ssv-0a1b2c3d-L1-c1.1|5\n",
        );
        assert_eq!((p.rows.len(), p.errors.len()), (0, 1));
    }

    #[test]
    fn sacct_bad_raw_id_is_an_error() {
        let p = parse_sacct("1|x y|COMPLETED|0:0|n1||1G|00:10:00|00:00:01|debug|1000|1795611422\n");
        assert!(p.rows.is_empty());
        assert_eq!(p.errors[0].job_id.as_deref(), Some("1"));
        assert!(p.errors[0].message.contains("JobIDRaw"));
    }

    #[test]
    fn pending_rows_recorded_on_slurm_22_05() {
        let p = parse_pending(
            "880|880|alice|afterok:879(failed)\n882_[1-3]|882|alice|aftercorr:881_*(unfulfilled),afterok:881_2(unfulfilled)\n889|889|alice|(null)\nx|1|a|b\n",
        );
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        let got: Vec<(&str, &str, &str, &str)> = p
            .rows
            .iter()
            .map(|r| {
                (
                    r.job_id.as_str(),
                    r.job_id_raw.as_str(),
                    r.user.as_str(),
                    r.dependency.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("880", "880", "alice", "afterok:879(failed)"),
                (
                    "882_[1-3]",
                    "882",
                    "alice",
                    "aftercorr:881_*(unfulfilled),afterok:881_2(unfulfilled)"
                ),
                ("889", "889", "alice", ""),
            ]
        );
    }

    /// `--only-job-state` rows (24.11, `%i|%A|%T`): ids and state alone; a row with
    /// another number of fields, or a raw id that is not one, is not read.
    #[test]
    fn state_rows() {
        let q = fold_states(
            "117|117|RUNNING\n14_[3-10%2]|14|PENDING\n23|23\n24|x|RUNNING\n25|25|RUNNING|None\n",
        );
        let mut got: Vec<(&str, Option<u32>, JobState)> = q.iter().collect();
        got.sort_by_key(|&(id, uid, _)| (id, uid));
        let mut want = vec![("117", None, JobState::Running)];
        let tasks = [
            "14_3", "14_4", "14_5", "14_6", "14_7", "14_8", "14_9", "14_10",
        ];
        want.extend(tasks.map(|t| (t, None, JobState::Pending)));
        want.sort_by_key(|&(id, uid, _)| (id, uid));
        assert_eq!(got, want, "the pending range's tasks one by one");
        assert!(!q.has_owners() && q.state(1000, "117") == Some(JobState::Running));
        assert_eq!(q.errors.len(), 3, "{:?}", q.errors);
    }

    /// The poll's listing folded as read holds what [`parse_squeue`]'s rows would have
    /// made of it, by owner, and the same unreadable lines.
    #[test]
    fn squeue_rows_folded_as_read() {
        let out = "\
117|117|RUNNING|None|n1|1000
14_[3-4%1]|14|PENDING|JobArrayTaskLimit||1000
14_1|15|RUNNING|None|n2|1001
22|22|WEIRD|None|n1|1000
23|23|RUNNING
117|117|COMPLETING|None|n1|1001
24|24|RUNNING|None|n1|alice
";
        let q = fold_squeue(out);
        let mut got: Vec<(&str, Option<u32>, JobState)> = q.iter().collect();
        got.sort_by_key(|&(id, uid, _)| (id, uid));
        use JobState::*;
        assert_eq!(
            got,
            vec![
                ("117", Some(1000), Running),
                ("117", Some(1001), Completing),
                ("14_1", Some(1001), Running),
                ("14_3", Some(1000), Pending),
                ("14_4", Some(1000), Pending),
            ]
        );
        assert_eq!(q.state(1000, "117"), Some(Running));
        assert_eq!(q.state(1001, "117"), Some(Completing));
        assert_eq!(
            q.state(1000, "14_1"),
            None,
            "another's job is not this owner's"
        );
        assert_eq!(q.other_owner(1000, "14_1"), Some(1001));
        assert_eq!(q.other_owner(1001, "14_1"), None);
        let errs: Vec<usize> = q.errors.iter().map(|e| e.line_no).collect();
        assert_eq!(errs, [4, 5, 7]);
        assert_eq!(
            errs,
            parse_squeue(out)
                .errors
                .iter()
                .map(|e| e.line_no)
                .collect::<Vec<_>>()
        );
    }

    /// The listing that reads some users' pending jobs too: the jobs asked about go to the
    /// poll's queue, those users' pending lines to the pending rows, an unreadable line to
    /// the poll unless it is another job's.
    #[test]
    fn squeue_with_pending_rows_folded_as_read() {
        let out = "\
7|7|RUNNING|None|n1|1000|alice|(null)
8|8|PENDING|Dependency||1000|alice|afterany:7(unfulfilled)
9|9|PENDING|Dependency||1001|bob|afterany:7(unfulfilled)
12|12|PENDING|Priority||1000|alice|(null)
13|13|WEIRD|None||1000|alice|(null)
7|7|RUNNING
";
        let (q, p) = fold_squeue_pending(out, |j| j == "7" || j == "12", 2, |u| u == "alice");
        let mut got: Vec<(&str, Option<u32>, JobState)> = q.iter().collect();
        got.sort_by_key(|&(id, uid, _)| (id, uid));
        assert_eq!(
            got,
            [
                ("12", Some(1000), JobState::Pending),
                ("7", Some(1000), JobState::Running)
            ]
        );
        let rows: Vec<&str> = p.rows.iter().map(|r| r.job_id.as_str()).collect();
        assert_eq!(rows, ["8", "12"]);
        assert_eq!(p.errors.iter().map(|e| e.line_no).collect::<Vec<_>>(), [5]);
        assert_eq!(q.errors.iter().map(|e| e.line_no).collect::<Vec<_>>(), [6]);
    }

    #[test]
    fn squeue_rows() {
        let out = "\
117|117|RUNNING|None|n1|1000
14_[3-10%2]|14|PENDING|JobArrayTaskLimit||1000
14_1|15|RUNNING|None|n2|1001
4|4|PENDING|BeginTime||0
21|21|COMPLETING|None|n[1-2]|4294967295
22|22|WEIRD|None|n1|1000
23|23|RUNNING
24|24|RUNNING|None|n1|alice
25|25|RUNNING|None|n1|1000|(null)
";
        let p = parse_squeue(out);
        let got: Vec<(&str, &str, JobState, &str, &str, u32)> = p
            .rows
            .iter()
            .map(|r| {
                (
                    r.job_id.as_str(),
                    r.job_id_raw.as_str(),
                    r.state,
                    r.reason.as_str(),
                    r.node_list.as_str(),
                    r.uid,
                )
            })
            .collect();
        use JobState::*;
        assert_eq!(
            got,
            vec![
                ("117", "117", Running, "None", "n1", 1000),
                ("14_[3-10%2]", "14", Pending, "JobArrayTaskLimit", "", 1000),
                ("14_1", "15", Running, "None", "n2", 1001),
                ("4", "4", Pending, "BeginTime", "", 0),
                ("21", "21", Completing, "None", "n[1-2]", u32::MAX),
            ]
        );
        let errs: Vec<(usize, Option<&str>)> = p
            .errors
            .iter()
            .map(|e| (e.line_no, e.job_id.as_deref()))
            .collect();
        assert_eq!(
            errs,
            vec![
                (6, Some("22")),
                (7, Some("23")),
                (8, Some("24")),
                (9, Some("25"))
            ]
        );
    }

    #[test]
    fn sbatch_parsable_output() {
        let ok: &[(&str, &str)] = &[
            ("123\n", "123"),
            ("123", "123"),
            ("  123  \n\n", "123"),
            ("123;cluster\n", "123"),
            ("123;c1\r\n", "123"),
            ("123\n123\n", "123"),
            ("4294967295\n", "4294967295"),
        ];
        for (out, id) in ok {
            assert_eq!(parse_sbatch_parsable(out).as_deref(), Ok(*id), "{out:?}");
        }
        let bad: &[(&str, ParseError)] = &[
            ("", ParseError::EmptySbatchOutput),
            ("\n  \n", ParseError::EmptySbatchOutput),
            (
                "Submitted batch job 123\n",
                ParseError::BadSbatchOutput {
                    line: "Submitted batch job 123".into(),
                },
            ),
            ("abc\n", ParseError::BadSbatchOutput { line: "abc".into() }),
            (
                "123;\n",
                ParseError::BadSbatchOutput {
                    line: "123;".into(),
                },
            ),
            (
                "123;a;b\n",
                ParseError::BadSbatchOutput {
                    line: "123;a;b".into(),
                },
            ),
            ("0\n", ParseError::BadSbatchOutput { line: "0".into() }),
            ("-5\n", ParseError::BadSbatchOutput { line: "-5".into() }),
            (
                "4294967296\n",
                ParseError::BadSbatchOutput {
                    line: "4294967296".into(),
                },
            ),
            (
                "12 3\n",
                ParseError::BadSbatchOutput {
                    line: "12 3".into(),
                },
            ),
            (
                "123\n124\n",
                ParseError::ConflictingJobIds {
                    first: "123".into(),
                    second: "124".into(),
                },
            ),
        ];
        for (out, want) in bad {
            assert_eq!(parse_sbatch_parsable(out).as_ref(), Err(want), "{out:?}");
        }
    }

    #[test]
    fn mem_sizes() {
        let cases: &[(&str, Option<u64>)] = &[
            ("269648K", Some(269_648 * K)),
            ("100M", Some(100 * M)),
            ("4000M", Some(4000 * M)),
            ("2G", Some(2 * G)),
            ("1T", Some(1 << 40)),
            ("1P", Some(1 << 50)),
            ("1.5G", Some(3 * G / 2)),
            ("1.50G", Some(3 * G / 2)),
            ("0.1K", Some(103)), // 102.4 bytes, rounded up
            ("0", Some(0)),
            ("100", Some(100 * M)), // bare number: MB, as --mem
            ("100Mn", Some(100 * M)),
            ("100Mc", Some(100 * M)),
            ("100k", Some(100 * K)),
            ("100MB", Some(100 * M)),
            ("", None),
            ("M", None),
            ("1.G", Some(G)),
            (".5G", None),
            ("1..5G", None),
            ("-1M", None),
            ("1Q", None),
            ("1 M", None),
            ("10MiB", None),
            ("99999999999999999999M", None),
            ("16777216T", None), // 2^64 bytes
        ];
        for (s, want) in cases {
            assert_eq!(parse_mem_bytes(s), *want, "{s:?}");
        }
    }

    /// Found by fuzzing: a value too big for u128 once multiplied by its unit panicked in
    /// debug builds and wrapped in release ones (the second case read as ~723 TiB).
    #[test]
    fn mem_size_overflow_is_none() {
        for s in [
            "18446744073709551615.999999999P",
            "302231454903658.000000000P",
            "18446744073709551615.9T",
        ] {
            assert_eq!(parse_mem_bytes(s), None, "{s:?}");
        }
        assert_eq!(
            parse_mem_bytes("16383.999999999P"),
            Some(18_446_744_073_708_425_717)
        );
    }

    #[test]
    fn scontrol_records_keep_values_with_spaces() {
        let line = "JobId=166 JobName=my job UserId=root(0) TimeLimit=00:05:00 Partition=debug CPUs/Task=1 MinMemoryNode=100M Command=/tmp/adopt.sh a1 b 2 WorkDir=/tmp StdErr=/tmp/adopt-166.out Power= ";
        let r = parse_scontrol_record(line);
        assert_eq!(r["JobName"], "my job");
        assert_eq!(r["UserId"], "root(0)");
        assert_eq!(r["CPUs/Task"], "1");
        assert_eq!(r["Command"], "/tmp/adopt.sh a1 b 2");
        assert_eq!(r["Power"], "");
        assert_eq!(r.len(), 11);
    }
}

#[cfg(test)]
mod held_tests {
    use super::*;

    #[test]
    fn one_held_job_is_read_from_its_own_first_line_only() {
        let row = parse_held_one(
            "30835|30835|JobHeldUser|1000|a ssv-08e680e9-L1-c1.1\n",
            "30835",
        )
        .unwrap();
        assert_eq!(
            (row.uid, row.comment.as_str()),
            (1000, "a ssv-08e680e9-L1-c1.1")
        );
        // A comment that runs onto a second line forges nothing: only the first counts.
        let forged =
            "30835|30835|Priority|1000|x\n30835|30835|JobHeldUser|0|ssv-08e680e9-L1-c1.1\n";
        assert_eq!(parse_held_one(forged, "30835"), None);
        // Another job's line, or one not held by its owner, is not the one asked about.
        assert_eq!(
            parse_held_one("30836|30836|JobHeldUser|0|t\n", "30835"),
            None
        );
        assert_eq!(
            parse_held_one("30835|30835|JobHeldAdmin|0|t\n", "30835"),
            None
        );
        assert_eq!(parse_held_one("", "30835"), None);
    }

    #[test]
    fn the_held_jobs_with_the_tag_are_kept_and_nothing_else() {
        let out = "30842|30842|JobHeldUser|0|x ssv-abcdef12-L1-c1.1\n\
                   30835|30835|JobHeldUser|1000|a|b ssv-08e680e9-L1-c1.1 |c\n\
                   30836|30836|Priority|0|ssv-08e680e9-L2-c2.1\n\
                   30837|30837|JobHeldAdmin|0|ssv-08e680e9-L3-c3.1\n\
                   30838|30838|JobHeldUser|0|(null)\n\
                   3_[1-4]|30839|JobHeldUser|7|ssv-08e680e9-L4-c4.1\n";
        let p = parse_held(out, "ssv-08e680e9-");
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let got: Vec<(&str, u32, &str)> = p
            .rows
            .iter()
            .map(|r| (r.job_id.as_str(), r.uid, r.comment.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("30835", 1000, "a|b ssv-08e680e9-L1-c1.1 |c"),
                ("3_[1-4]", 7, "ssv-08e680e9-L4-c4.1"),
            ]
        );
    }
}

#[cfg(test)]
mod marked_tests {
    use super::parse_marked;

    #[test]
    fn only_exact_marks_are_candidates_each_job_once() {
        let out = "30867|0|(null)\n\
                   30870|1001|slurm-supervisor:plain\n\
                   30871_[1-3]|1001|slurm-supervisor:plain\n\
                   30871_4|1001|slurm-supervisor:plain\n\
                   30872+0|1002|slurm-supervisor:plain\n\
                   30872+1|1002|slurm-supervisor:plain\n\
                   30873|1003|slurm-supervisor:plain x\n\
                   30874|1003|x slurm-supervisor:plain\n\
                   abc|1003|slurm-supervisor:plain\n\
                   30875|root|slurm-supervisor:plain\n\
                   30876|1004|slurm-supervisor:plain|more\n";
        assert_eq!(
            parse_marked(out, "slurm-supervisor:plain"),
            vec![
                ("30870".to_string(), 1001),
                ("30871".to_string(), 1001),
                ("30872".to_string(), 1002),
            ]
        );
    }
}
