//! Slurm job ids as Slurm prints them, taken apart in one place.
//!
//! A *job id* here is the text sacct prints as `JobID`/`JobIDRaw`, squeue as `%i`/`%A`,
//! and sbatch `--parsable` as its answer (docs/slurm-observed.md has real output of Slurm
//! 22.05 and 24.11). Its forms:
//!
//! | printed          | names                                                        |
//! |------------------|--------------------------------------------------------------|
//! | `123`            | job 123                                                      |
//! | `123_4`          | task 4 of array job 123                                      |
//! | `14_[3-10%2]`    | the tasks of array 14 that have not started (one row for all) |
//! | `123+1`          | component 1 of heterogeneous job 123                         |
//! | `123.batch`      | a step: `batch`, `extern`, `interactive`, `TBD` (pending), or a number (`123.0`), after a job, task or component (`123_4.batch`, `123+1.0`) |
//! | `123.0+1`        | component 1 of heterogeneous step 0                          |
//!
//! The raw forms (`127`, `127.batch`) are the same shapes. An *attempt* (one submission
//! of a chain) is known by `123` or, for an array task, `123_4`: see [`JobId::attempt_key`].
//!
//! Parsing is strict: numbers are decimal without leading zeros and fit Slurm's 32 bits, a
//! step name is one Slurm prints, and anything else is a [`BadJobId`], never a guess. The
//! ids keep travelling as strings where they are stored or sent (the store, JSON); a
//! [`JobId`] is made where one must be taken apart, and prints back exactly as parsed.
//!
//! The row parsers ([`super::parse`]) accept any id made of the right characters, so a
//! shape not foreseen here does not leave a job unjudged; [`job_part`], [`is_step`] and
//! [`base_job_id`] take such rows' ids apart as well as can be told (at the first `.`),
//! and never guess a task or a component.
//!
//! The module also holds the two groupings of query output by id that the engine uses:
//! [`queued_states`] (squeue) and [`runs_by_job`] (sacct `--duplicates`).

use super::types::{JobState, SacctRow};
use std::collections::HashMap;
use std::fmt;

/// A Slurm job id, parsed: see the module documentation for the forms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobId {
    job: u32,
    names: Names,
    step: Option<Step>,
}

/// What a job id names, before any step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Names {
    /// A job (`123`).
    Job,
    /// One task of an array job (`123_4`).
    Task(u32),
    /// The array's tasks that have not started, as Slurm prints their list (`3-10%2` in
    /// `14_[3-10%2]`). Slurm shortens a long list (`SLURM_BITSTR_LEN`, 64 bytes by default)
    /// and ends it with `...`; such a list is kept but cannot be expanded.
    PendingTasks(String),
    /// One component of a heterogeneous job (`123+1`).
    HetComponent(u32),
}

/// A job step: `.batch`, `.0`, and so on, with the component of a heterogeneous step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Step {
    pub kind: StepKind,
    /// `1` in `123.0+1`.
    pub het_component: Option<u32>,
}

/// Which step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// `batch`: the batch script.
    Batch,
    /// `extern`: the external step (`PrologFlags=Contain`).
    Extern,
    /// `interactive`: salloc's step.
    Interactive,
    /// `TBD`: a step not yet given its id.
    Pending,
    /// A step started by srun: `0`, `1`, ...
    Numbered(u32),
}

/// Text that is not a job id as Slurm prints one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{shown:?} is not a Slurm job id")]
pub struct BadJobId {
    /// The text, cut to a readable length.
    pub shown: String,
}

/// The longest job id accepted; Slurm's are far shorter except for pending task lists,
/// which Slurm itself cuts to 64 bytes unless told otherwise.
const MAX_LEN: usize = 4096;

impl JobId {
    /// Parses one of the printed forms; surrounding whitespace is not accepted.
    pub fn parse(s: &str) -> Result<JobId, BadJobId> {
        let bad = || BadJobId {
            shown: crate::plumbing::osbytes::truncate(s, 64).to_string(),
        };
        if s.len() > MAX_LEN {
            return Err(bad());
        }
        let (head, step) = match s.split_once('.') {
            // A pending task list may end in Slurm's `...`; it holds no step.
            Some(_) if s.ends_with("...]") => (s, None),
            Some((head, step)) => (head, Some(parse_step(step).ok_or_else(bad)?)),
            None => (s, None),
        };
        let (job, names) = if let Some((job, rest)) = head.split_once('_') {
            let names = match rest.strip_prefix('[') {
                Some(list) => {
                    let list = list.strip_suffix(']').ok_or_else(bad)?;
                    if !is_task_list(list) {
                        return Err(bad());
                    }
                    Names::PendingTasks(list.to_string())
                }
                None => Names::Task(number(rest).ok_or_else(bad)?),
            };
            (job, names)
        } else if let Some((job, component)) = head.split_once('+') {
            (job, Names::HetComponent(number(component).ok_or_else(bad)?))
        } else {
            (head, Names::Job)
        };
        let job = number(job).filter(|&j| j > 0).ok_or_else(bad)?;
        if step.is_some() && matches!(names, Names::PendingTasks(_)) {
            return Err(bad());
        }
        Ok(JobId { job, names, step })
    }

    /// The job id itself: the array's for a task or a pending list, the first
    /// component's for a heterogeneous one. `123_4.batch` gives 123.
    pub fn base(&self) -> u32 {
        self.job
    }

    /// What the id names, before any step.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// The array task: 4 for `123_4` and `123_4.batch`.
    pub fn task(&self) -> Option<u32> {
        match self.names {
            Names::Task(t) => Some(t),
            _ => None,
        }
    }

    /// The heterogeneous job's component: 1 for `123+1` and `123+1.batch`.
    pub fn het_component(&self) -> Option<u32> {
        match self.names {
            Names::HetComponent(c) => Some(c),
            _ => None,
        }
    }

    pub fn step(&self) -> Option<&Step> {
        self.step.as_ref()
    }

    /// True for a step's id (`123.batch`, `123_4.0`).
    pub fn is_step(&self) -> bool {
        self.step.is_some()
    }

    /// The id without its step: `123_4.batch` gives `123_4`, `123+1.0` gives `123+1`.
    /// This is how sacct's rows are grouped by the job they belong to.
    pub fn without_step(&self) -> JobId {
        JobId {
            step: None,
            ..self.clone()
        }
    }

    /// The id an attempt is known by: `123` for a job (and its steps), `123_4` for an
    /// array task. `None` for what no attempt is: a pending task list, a heterogeneous
    /// component.
    pub fn attempt_key(&self) -> Option<JobId> {
        matches!(self.names, Names::Job | Names::Task(_)).then(|| self.without_step())
    }

    /// The task ids of a pending task list (`14_[3-5]` gives 3, 4, 5); `None` for any other
    /// id, or a list Slurm shortened. At most [`crate::domain::syntax::MAX_ARRAY_TASKS`].
    pub fn pending_tasks(&self) -> Option<Vec<u32>> {
        match &self.names {
            Names::PendingTasks(list) => crate::domain::syntax::parse_array_spec(list).ok(),
            _ => None,
        }
    }

    /// The ids of the tasks of a pending task list (`14_[3-4]` gives `14_3`, `14_4`);
    /// empty for any other id.
    pub fn pending_task_ids(&self) -> Vec<JobId> {
        self.pending_tasks()
            .unwrap_or_default()
            .into_iter()
            .map(|t| JobId {
                job: self.job,
                names: Names::Task(t),
                step: None,
            })
            .collect()
    }
}

impl std::str::FromStr for JobId {
    type Err = BadJobId;
    fn from_str(s: &str) -> Result<JobId, BadJobId> {
        JobId::parse(s)
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.job)?;
        match &self.names {
            Names::Job => {}
            Names::Task(t) => write!(f, "_{t}")?,
            Names::PendingTasks(list) => write!(f, "_[{list}]")?,
            Names::HetComponent(c) => write!(f, "+{c}")?,
        }
        if let Some(step) = &self.step {
            write!(f, ".{step}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            StepKind::Batch => f.write_str("batch")?,
            StepKind::Extern => f.write_str("extern")?,
            StepKind::Interactive => f.write_str("interactive")?,
            StepKind::Pending => f.write_str("TBD")?,
            StepKind::Numbered(n) => write!(f, "{n}")?,
        }
        if let Some(c) = self.het_component {
            write!(f, "+{c}")?;
        }
        Ok(())
    }
}

/// A step after the `.`: `batch`, `0`, `0+1`.
fn parse_step(s: &str) -> Option<Step> {
    let (name, het_component) = match s.split_once('+') {
        Some((name, c)) => (name, Some(number(c)?)),
        None => (s, None),
    };
    let kind = match name {
        "batch" => StepKind::Batch,
        "extern" => StepKind::Extern,
        "interactive" => StepKind::Interactive,
        "TBD" => StepKind::Pending,
        n => StepKind::Numbered(number(n)?),
    };
    Some(Step {
        kind,
        het_component,
    })
}

/// A decimal number as Slurm prints one: digits, no sign, no leading zero, 32 bits.
fn number(s: &str) -> Option<u32> {
    let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.parse().ok()
}

/// The shape of a pending task list: `3-10%2`, `3,5,7-9`, optionally cut by Slurm with a
/// trailing `...`. What it means is checked only when it is expanded.
fn is_task_list(list: &str) -> bool {
    let body = list.strip_suffix("...").unwrap_or(list);
    body.starts_with(|c: char| c.is_ascii_digit())
        && body
            .bytes()
            .all(|b| b.is_ascii_digit() || b",-%:".contains(&b))
}

/// The job id `id` belongs to, as text: `123_4` and `123_4.batch` give `123`, `123+1`
/// gives `123`. Text that is not a job id is kept whole.
pub fn base_job_id(id: &str) -> String {
    JobId::parse(id).map_or_else(|_| id.to_string(), |j| j.base().to_string())
}

/// `id` without its step, as text: `123_4.batch` gives `123_4`. Text that is not a job id
/// (an unreadable sacct row's first column) gives what comes before its first `.`, so
/// that the job such a row seems to belong to can still be held back, not judged on
/// partial rows.
pub fn job_part(id: &str) -> String {
    match JobId::parse(id) {
        Ok(j) => j.without_step().to_string(),
        Err(_) => id.split('.').next().unwrap_or(id).to_string(),
    }
}

/// True for a step's id (`123.batch`, `123_4.0`). Text that is not a job id is a step's
/// when it holds a `.`, as [`job_part`] reads it.
pub fn is_step(id: &str) -> bool {
    match JobId::parse(id) {
        Ok(j) => j.is_step(),
        Err(_) => id.contains('.'),
    }
}

/// The state squeue shows for each attempt id. Rows for array tasks that have not
/// started yet may come as a range (`14_[3-10%2]`); they are expanded.
pub fn queued_states<'a>(
    rows: impl IntoIterator<Item = (&'a str, JobState)>,
) -> HashMap<String, JobState> {
    let mut out = HashMap::new();
    for (job_id, state) in rows {
        queued_state_into(&mut out, job_id.to_string(), state);
    }
    out
}

/// Adds what one squeue row shows to `out` (see [`queued_states`]). The row's job id is
/// taken, not copied: the poll hands over each row as it goes, so a cycle never holds a
/// second copy of every id.
pub fn queued_state_into(out: &mut HashMap<String, JobState>, job_id: String, state: JobState) {
    queued_ids(job_id, |id| {
        out.insert(id, state);
    });
}

/// The ids one squeue row's job id stands for, each handed to `each`: the id itself, or
/// each task of a range of pending tasks (`14_[3-10%2]`). The id is taken, not copied,
/// when it is one job's.
pub fn queued_ids(job_id: String, mut each: impl FnMut(String)) {
    if !job_id.contains('[') {
        // No task list: the row's own job (most rows, read without parsing).
        each(job_id);
        return;
    }
    match JobId::parse(&job_id) {
        Ok(id) if matches!(id.names(), Names::PendingTasks(_)) => {
            for t in id.pending_task_ids() {
                each(t.to_string());
            }
        }
        _ => each(job_id),
    }
}

/// The runs of each job in sacct `--duplicates` output: a job row starts a run, its step
/// rows follow it. Earlier runs of a job are ones Slurm requeued.
pub fn runs_by_job(rows: &[SacctRow]) -> HashMap<String, Vec<Vec<SacctRow>>> {
    let mut out: HashMap<String, Vec<Vec<SacctRow>>> = HashMap::new();
    // Array tasks that never started have no rows of their own, only a range row
    // (`14_[3-10%2]`); if the array ended (cancelled, deadline) that row is their ending.
    let mut ranges = Vec::new();
    for r in rows {
        let key = r.job_part();
        if let Ok(id) = JobId::parse(&key) {
            if matches!(id.names(), Names::PendingTasks(_)) && !ranges.contains(&id) {
                ranges.push(id);
            }
        }
        let runs = out.entry(key).or_default();
        if !r.is_step() || runs.is_empty() {
            runs.push(Vec::new());
        }
        runs.last_mut().expect("just pushed").push(r.clone());
    }
    for range in ranges {
        let runs = out[&range.to_string()].clone();
        for t in range.pending_task_ids() {
            out.entry(t.to_string()).or_insert_with(|| runs.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::parse::{parse_sacct, parse_squeue};

    fn id(s: &str) -> JobId {
        JobId::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    fn step(kind: StepKind, het_component: Option<u32>) -> Option<Step> {
        Some(Step {
            kind,
            het_component,
        })
    }

    #[test]
    fn every_printed_form_parses_and_prints_back() {
        use Names::*;
        use StepKind::*;
        let cases = [
            ("123", 123, Job, None),
            ("4294967295", u32::MAX, Job, None),
            ("123_4", 123, Task(4), None),
            ("123_0", 123, Task(0), None),
            ("14_[3-10%2]", 14, PendingTasks("3-10%2".into()), None),
            ("14_[3,5,7-9]", 14, PendingTasks("3,5,7-9".into()), None),
            ("14_[1-7:2]", 14, PendingTasks("1-7:2".into()), None),
            ("14_[1,3,5,...]", 14, PendingTasks("1,3,5,...".into()), None),
            ("123+0", 123, HetComponent(0), None),
            ("3.batch", 3, Job, step(Batch, None)),
            ("3.extern", 3, Job, step(Extern, None)),
            ("3.interactive", 3, Job, step(Interactive, None)),
            ("3.TBD", 3, Job, step(Pending, None)),
            ("123.0", 123, Job, step(Numbered(0), None)),
            ("123.17", 123, Job, step(Numbered(17), None)),
            ("123_4.batch", 123, Task(4), step(Batch, None)),
            ("123+1.batch", 123, HetComponent(1), step(Batch, None)),
            ("123+1.0", 123, HetComponent(1), step(Numbered(0), None)),
            ("123.0+1", 123, Job, step(Numbered(0), Some(1))),
        ];
        for (text, job, names, st) in cases {
            let got = id(text);
            assert_eq!(
                (got.base(), got.names(), got.step()),
                (job, &names, st.as_ref()),
                "{text}"
            );
            assert_eq!(got.to_string(), text);
            assert_eq!(text.parse::<JobId>().as_ref(), Ok(&got));
        }
    }

    #[test]
    fn garbage_is_refused() {
        let huge = "9".repeat(100_000);
        for bad in [
            "",
            " ",
            " 123",
            "123 ",
            "0",
            "01",
            "1_",
            "_1",
            "1_01",
            "1_2_3",
            "1__2",
            "1+",
            "1+x",
            "1_2+3",
            "1.",
            ".1",
            "1.batch.0",
            "1.Batch",
            "1.frob",
            "1.01",
            "1.0+",
            "1_[x]",
            "1_[]",
            "1_[1-3",
            "1_1-3]",
            "1_[-3]",
            "1_[1-3].batch",
            "1_[1-3]x",
            "abc",
            "12a",
            "-5",
            "+5",
            "4294967296",
            "1_4294967296",
            "18446744073709551616",
            "1٣",
            huge.as_str(),
        ] {
            let err = JobId::parse(bad).expect_err(bad);
            assert!(err.to_string().len() < 100, "{err}");
        }
    }

    #[test]
    fn parts_for_the_daemon() {
        let t = id("123_4.batch");
        assert_eq!(
            (t.base(), t.task(), t.het_component()),
            (123, Some(4), None)
        );
        assert!(t.is_step());
        assert_eq!(t.without_step().to_string(), "123_4");
        assert_eq!(
            t.attempt_key().map(|k| k.to_string()).as_deref(),
            Some("123_4")
        );
        assert_eq!(id("123.extern").attempt_key(), Some(id("123")));
        assert_eq!(id("123").attempt_key(), Some(id("123")));
        assert!(!id("123").is_step());
        assert_eq!(id("14_[3-4]").attempt_key(), None);
        let het = id("123+1.0");
        assert_eq!(
            (het.base(), het.het_component(), het.task()),
            (123, Some(1), None)
        );
        assert_eq!(het.without_step().to_string(), "123+1");
        assert_eq!(het.attempt_key(), None);
    }

    #[test]
    fn base_job_ids() {
        for (id, base) in [
            ("123", "123"),
            ("123_4", "123"),
            ("123_4.batch", "123"),
            ("14_[3-4%1]", "14"),
            ("123+1", "123"),
            ("abc", "abc"),
        ] {
            assert_eq!(base_job_id(id), base, "{id}");
        }
    }

    #[test]
    fn job_parts() {
        assert_eq!(job_part("123_4.batch"), "123_4");
        assert_eq!(job_part("123+1.0"), "123+1");
        assert_eq!(job_part("14_[1,3,...]"), "14_[1,3,...]");
        assert_eq!(job_part("123.weird"), "123");
        assert_eq!(job_part("abc"), "abc");
        for (id, step) in [
            ("123", false),
            ("123_4.batch", true),
            ("14_[1,3,...]", false),
            ("9999999999.batch", true),
            ("abc", false),
        ] {
            assert_eq!(is_step(id), step, "{id}");
        }
    }

    #[test]
    fn pending_task_lists_expand() {
        let ids = |s: &str| -> Vec<String> {
            id(s)
                .pending_task_ids()
                .iter()
                .map(|t| t.to_string())
                .collect()
        };
        assert_eq!(ids("14_[3-5%2]"), ["14_3", "14_4", "14_5"]);
        assert_eq!(ids("14_[1,7-9:2]"), ["14_1", "14_7", "14_9"]);
        assert_eq!(id("14_[3-4]").pending_tasks(), Some(vec![3, 4]));
        // What cannot be expanded is not guessed at.
        assert!(ids("14_[1,3,5,...]").is_empty());
        assert!(ids("14_[5-3]").is_empty());
        assert!(ids("14_[0-99999999]").is_empty());
        assert!(ids("14").is_empty());
        assert!(ids("14_3").is_empty());
    }

    #[test]
    fn runs_split_requeues_and_expand_unstarted_array_tasks() {
        let rows = parse_sacct(
            "4|4|PREEMPTED|0:0|n1||100M|00:10:00|00:00:20|debug|1000|1795611422\n4.batch|4.batch|CANCELLED|0:15|n1|1024K||||||1795611422\n4|4|PENDING|0:0|None assigned||100M|00:10:00|00:00:00|debug|1000|1795611422\n\
             14_1|15|COMPLETED|0:0|n1||100M|00:10:00|00:00:01|debug|1000|1795611422\n14_[3-4%1]|14|CANCELLED by 0|0:0|None assigned||100M|00:10:00|00:00:00|debug|1000|1795611422\n",
        )
        .rows;
        let runs = runs_by_job(&rows);
        assert_eq!(runs["4"].len(), 2);
        assert_eq!(runs["4"][0].len(), 2, "the step belongs to the first run");
        assert_eq!(runs["14_1"].len(), 1);
        assert_eq!(runs["14_3"][0][0].state, JobState::Cancelled);
        assert!(runs.contains_key("14_4"));
        assert!(!runs.contains_key("14_2"));
    }

    #[test]
    fn queued_states_expand_unstarted_array_tasks() {
        let rows = parse_squeue(
            "14_[3-4%1]|14|PENDING|JobArrayTaskLimit||1000\n14_1|15|RUNNING|None|n1|1000\n20|20|PENDING|Priority||1000\n",
        )
        .rows;
        let q = queued_states(rows.iter().map(|r| (r.job_id.as_str(), r.state)));
        let mut got: Vec<(&str, JobState)> = q.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        got.sort_by_key(|(k, _)| *k);
        assert_eq!(
            got,
            [
                ("14_1", JobState::Running),
                ("14_3", JobState::Pending),
                ("14_4", JobState::Pending),
                ("20", JobState::Pending),
            ]
        );
    }
}
