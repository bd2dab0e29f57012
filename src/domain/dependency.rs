//! Slurm dependency expressions (`--dependency`), read and written back, without running
//! anything: the supervisor rewires a waiting job to a chain's new attempt by rewriting
//! its expression, and resolves chain ids (`afterok:c12`) in a submission's. It also
//! lists the jobs a `--dependency` value names ([`dependency_edges`]), which the store
//! keeps; finding that value in a submission's argv or `#SBATCH` lines is reading its
//! command line (`daemon::sbatch::dependency_rows`), which is not this part's: the store
//! uses this one, and never reaches `sbatch_args` through it.
//!
//! The forms sbatch takes (checked on 22.05.8 and in sbatch(1)):
//! - `kind:job[:job...]`, kinds `after`, `afterany`, `afterburstbuffer`, `aftercorr`,
//!   `afternotok`, `afterok`; `singleton` alone;
//! - clauses joined by `,` (all must hold) or by `?` (any one), never both in one value;
//! - a job is `12`, an array task `12_3`, a whole array `12` or `12_*`, and `after`
//!   takes a delay in minutes: `after:12+5`.
//!
//! squeue's `%E` prints the remaining clauses in the same syntax with each job's state
//! appended (`afterok:879(failed)`, `aftercorr:881_*(unfulfilled)`, `after:889+1(unfulfilled)`)
//! and `(null)` for none: [`Expr::parse`] reads both.

use crate::domain::model::ChainState;
use crate::slurm::jobid::JobId;
use std::collections::HashMap;
use std::fmt;

/// How the clauses combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// `,`: every clause must hold.
    All,
    /// `?`: any one clause.
    Any,
}

/// One job a clause names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// As written: `12`, `12_3`, `12_*`, or a chain id `c7` (the supervisor's own form).
    pub job: String,
    /// `+minutes` of `after`, without the `+`.
    pub delay: Option<String>,
}

impl Target {
    pub fn job(job: impl Into<String>) -> Target {
        Target {
            job: job.into(),
            delay: None,
        }
    }
}

/// One clause: `kind:job[:job...]`, or `singleton`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Clause {
    Singleton,
    Jobs { kind: Kind, targets: Vec<Target> },
}

/// The dependency kinds that name jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    After,
    AfterAny,
    AfterBurstBuffer,
    AfterCorr,
    AfterNotOk,
    AfterOk,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::After,
        Kind::AfterAny,
        Kind::AfterBurstBuffer,
        Kind::AfterCorr,
        Kind::AfterNotOk,
        Kind::AfterOk,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::After => "after",
            Kind::AfterAny => "afterany",
            Kind::AfterBurstBuffer => "afterburstbuffer",
            Kind::AfterCorr => "aftercorr",
            Kind::AfterNotOk => "afternotok",
            Kind::AfterOk => "afterok",
        }
    }

    pub fn from_name(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The kinds that wait on how the upstream *ended*: for a supervised upstream they
    /// mean the chain's final outcome, which Slurm cannot know, so the supervisor holds
    /// the waiting job until the chain has ended for good.
    pub fn is_about_outcome(self) -> bool {
        matches!(self, Kind::AfterAny | Kind::AfterNotOk)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A whole `--dependency` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr {
    pub join: Join,
    pub clauses: Vec<Clause>,
}

/// Why a value is not a dependency expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DepError {
    #[error("{0:?} mixes ',' and '?' (sbatch takes one or the other)")]
    MixedJoins(String),
    #[error("{0:?} is not a dependency kind (after, afterany, afterburstbuffer, aftercorr, afternotok, afterok, singleton)")]
    UnknownKind(String),
    #[error("the clause {0:?} names no job")]
    NoJob(String),
    #[error("{0:?} is not a job id")]
    BadJob(String),
    #[error("a dependency of more than {MAX_TARGETS} jobs is not rewritten")]
    TooLong,
}

/// The most jobs an expression may name here (as [`MAX_DEPENDENCY_EDGES`]):
/// a hostile value cannot become an unbounded amount of work.
pub const MAX_TARGETS: usize = 1000;

impl Expr {
    /// Reads an sbatch `--dependency` value or squeue's `%E` column (`(null)` and empty
    /// are no dependency: no clause).
    pub fn parse(s: &str) -> Result<Expr, DepError> {
        let s = s.trim();
        let empty = Expr {
            join: Join::All,
            clauses: Vec::new(),
        };
        if s.is_empty() || s == "(null)" {
            return Ok(empty);
        }
        let join = match (s.contains(','), s.contains('?')) {
            (true, true) => return Err(DepError::MixedJoins(s.to_string())),
            (false, true) => Join::Any,
            _ => Join::All,
        };
        let sep = if join == Join::Any { '?' } else { ',' };
        let mut clauses = Vec::new();
        let mut count = 0usize;
        for part in s.split(sep) {
            let part = part.trim();
            if strip_state(part) == "singleton" {
                clauses.push(Clause::Singleton);
                continue;
            }
            let mut tokens = part.split(':');
            let name = tokens.next().unwrap_or_default();
            let kind = Kind::from_name(name)
                .ok_or_else(|| DepError::UnknownKind(name.chars().take(64).collect::<String>()))?;
            let mut targets = Vec::new();
            for t in tokens {
                count += 1;
                if count > MAX_TARGETS {
                    return Err(DepError::TooLong);
                }
                let t = strip_state(t.trim());
                let (job, delay) = match t.split_once('+') {
                    Some((j, d)) => (j, Some(d.to_string())),
                    None => (t, None),
                };
                if !is_job_token(job) {
                    return Err(DepError::BadJob(job.chars().take(64).collect()));
                }
                if delay
                    .as_deref()
                    .is_some_and(|d| d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()))
                {
                    return Err(DepError::BadJob(t.chars().take(64).collect()));
                }
                targets.push(Target {
                    job: job.to_string(),
                    delay,
                });
            }
            if targets.is_empty() {
                return Err(DepError::NoJob(part.chars().take(64).collect()));
            }
            clauses.push(Clause::Jobs { kind, targets });
        }
        Ok(Expr { join, clauses })
    }

    pub fn is_empty(&self) -> bool {
        self.clauses.is_empty()
    }

    /// Every (kind, target) the expression names.
    pub fn targets(&self) -> impl Iterator<Item = (Kind, &Target)> {
        self.clauses.iter().flat_map(|c| match c {
            Clause::Singleton => Vec::new(),
            Clause::Jobs { kind, targets } => targets.iter().map(|t| (*kind, t)).collect(),
        })
    }

    /// Replaces each target by what `f` gives for it: itself (`None`), others, or none.
    /// A clause left without a job is dropped. Returns whether anything changed.
    pub fn map_targets(&mut self, mut f: impl FnMut(Kind, &Target) -> Option<Vec<Target>>) -> bool {
        let mut changed = false;
        for c in &mut self.clauses {
            if let Clause::Jobs { kind, targets } = c {
                let mut out = Vec::with_capacity(targets.len());
                for t in targets.iter() {
                    match f(*kind, t) {
                        Some(new) => {
                            changed = true;
                            for n in new {
                                if !out.contains(&n) {
                                    out.push(n);
                                }
                            }
                        }
                        None => {
                            if !out.contains(t) {
                                out.push(t.clone());
                            }
                        }
                    }
                }
                *targets = out;
            }
        }
        self.clauses
            .retain(|c| !matches!(c, Clause::Jobs { targets, .. } if targets.is_empty()));
        changed
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sep = if self.join == Join::Any { "?" } else { "," };
        for (i, c) in self.clauses.iter().enumerate() {
            if i > 0 {
                f.write_str(sep)?;
            }
            match c {
                Clause::Singleton => f.write_str("singleton")?,
                Clause::Jobs { kind, targets } => {
                    f.write_str(kind.as_str())?;
                    for t in targets {
                        write!(f, ":{}", t.job)?;
                        if let Some(d) = &t.delay {
                            write!(f, "+{d}")?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

// ---- the edges a submission keeps ------------------------------------------------------
//
// The store keeps every job a submission's `--dependency` names as a `dependencies` row,
// so that who waits on a chain is one indexed read. Unlike `Expr::parse`, which refuses
// what it could not write back, this reads leniently: whatever names a job is kept.

/// One edge of a `--dependency` value: the kind (`afterok`, `afterany`, `aftercorr`, ...)
/// and the job it names (`12`, or `12_3` for one array task).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyEdge {
    pub kind: String,
    pub job: String,
}

/// The jobs a `--dependency` value names, with their kinds
/// (`afterok:12:13,afterany:14_2?singleton`, `after:12+30`). `singleton` names no job;
/// tokens that are not job ids (steps, ranges, garbage) are left out.
pub fn dependency_edges(dependency: &str) -> Vec<DependencyEdge> {
    let mut out = Vec::new();
    for group in dependency.split([',', '?']) {
        let mut tokens = group.split(':');
        let kind = tokens.next().unwrap_or_default().trim();
        // Only Slurm's own kinds: anything else names nothing (and a hostile "kind" is
        // never copied into every edge).
        if Kind::from_name(kind).is_none() {
            continue;
        }
        for t in tokens {
            if out.len() >= MAX_DEPENDENCY_EDGES {
                return out;
            }
            // `+` here starts a time (`after:12+30`), not a heterogeneous component.
            let t = t.split('+').next().unwrap_or(t).trim();
            let ok = JobId::parse(t).is_ok_and(|j| j.attempt_key().is_some() && !j.is_step());
            if ok {
                out.push(DependencyEdge {
                    kind: kind.to_string(),
                    job: t.to_string(),
                });
            }
        }
    }
    out
}

/// The most dependency edges kept for one submission. A `--dependency` naming more jobs
/// still reaches sbatch as given; only the first ones are kept as rows, so a hostile
/// submission (a 2 MiB list of ids) cannot turn into millions of rows.
pub const MAX_DEPENDENCY_EDGES: usize = 1000;

// ---- supervised upstreams ---------------------------------------------------------------

/// A supervised chain that a dependency names, as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub chain: i64,
    pub state: ChainState,
    /// The Slurm job id of its latest attempt (`None` while its first sbatch is unsettled).
    pub latest_job: Option<String>,
}

/// What the store knows of each target of an expression (keyed by [`Target::job`]):
/// the chains it names, of the same owner. A target that names no supervised chain is
/// absent (or empty) and left as it is.
pub type Facts = HashMap<String, Vec<Upstream>>;

/// A supervised submission's dependency, resolved against the chains it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// What sbatch gets.
    pub expr: Expr,
    /// Whether `expr` differs from what the user wrote (then it replaces theirs).
    pub changed: bool,
    /// Every supervised chain it waits on (`depends_on`), some of them gates.
    pub edges: Vec<Edge>,
}

impl Resolved {
    /// Held by the supervisor until its gates open.
    pub fn held(&self) -> bool {
        self.edges.iter().any(|e| e.gate)
    }
}

/// One supervised chain a submission waits on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Edge {
    pub kind: Kind,
    pub chain: i64,
    /// The job as the user named it (`c7`, `12`, `12_*`): the tasks of one whole array
    /// are one condition (afternotok on an array holds when any task failed).
    pub target: String,
    /// `afterany`/`afternotok` on a chain not ended for good: the supervisor holds the
    /// job and decides when the chain (every chain of `target`) has ended.
    pub gate: bool,
}

/// Why a supervised submission's dependency cannot be sent as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("{0} names no chain of yours (see supervisorctl status)")]
    UnknownChain(String),
    #[error("{job} has no Slurm job yet; submit again in a moment")]
    NoJobYet { job: String },
    #[error("{kind}:{job} can never be satisfied: c{chain} {state}")]
    Never {
        kind: Kind,
        job: String,
        chain: i64,
        state: ChainState,
    },
    #[error("afterany/afternotok on a supervised job wait for its chain's final outcome and cannot be combined with '?'; use ',' or submit the alternatives separately")]
    OutcomeWithAny,
}

/// The latest attempts of `ups` in place of `t`, or `None` when `t` already names them.
fn latest_targets(t: &Target, ups: &[Upstream]) -> Option<Vec<Target>> {
    let jobs: Vec<&str> = ups.iter().filter_map(|u| u.latest_job.as_deref()).collect();
    if jobs.is_empty() || jobs.len() < ups.len() {
        return None;
    }
    let base = whole_array_base(&t.job);
    let same = jobs
        .iter()
        .all(|j| *j == t.job || j.split('_').next() == Some(base) && !t.job.contains('_'));
    let same =
        same || (t.job.ends_with("_*") && jobs.iter().all(|j| j.split('_').next() == Some(base)));
    if same {
        return None;
    }
    Some(
        jobs.into_iter()
            .map(|j| Target {
                job: j.to_string(),
                delay: t.delay.clone(),
            })
            .collect(),
    )
}

/// Resolves a supervised submission's dependency (at its first sbatch and at every
/// retry): chain ids and earlier attempts become the chains' latest jobs; a clause on a
/// chain that completed is dropped (it holds); one that can never hold is an error; and
/// `afterany`/`afternotok` on a chain that has not ended for good become gates (the
/// supervisor holds the job and decides when the chain has ended).
pub fn resolve(expr: &Expr, facts: &Facts) -> Result<Resolved, ResolveError> {
    let mut out = expr.clone();
    let mut edges: Vec<Edge> = Vec::new();
    let mut error = None;
    let changed = out.map_targets(|kind, t| {
        let ups = facts.get(&t.job).map(Vec::as_slice).unwrap_or_default();
        if ups.is_empty() {
            if chain_target(&t.job).is_some() {
                error.get_or_insert(ResolveError::UnknownChain(t.job.clone()));
            }
            return None;
        }
        let gated = kind.is_about_outcome() && ups.iter().any(|u| u.state.is_open());
        for u in ups {
            if !edges.iter().any(|e| e.kind == kind && e.chain == u.chain) {
                edges.push(Edge {
                    kind,
                    chain: u.chain,
                    target: t.job.clone(),
                    gate: gated,
                });
            }
        }
        if kind.is_about_outcome() {
            if expr.join == Join::Any {
                error.get_or_insert(ResolveError::OutcomeWithAny);
                return None;
            }
            // Every chain of the target ended: afterany holds; afternotok holds when one
            // of them did not complete, and never can when all did.
            let all_completed = ups.iter().all(|u| u.state == ChainState::Completed);
            if !gated && kind == Kind::AfterNotOk && all_completed {
                error.get_or_insert(ResolveError::Never {
                    kind,
                    job: t.job.clone(),
                    chain: ups[0].chain,
                    state: ups[0].state,
                });
            }
            // Held by the supervisor instead, or already satisfied: not Slurm's to wait on.
            return Some(Vec::new());
        }
        let mut keep = Vec::new();
        for u in ups {
            match u.state {
                ChainState::Completed => {}
                ChainState::Failed | ChainState::Cancelled
                    if matches!(kind, Kind::AfterOk | Kind::AfterCorr) =>
                {
                    error.get_or_insert(ResolveError::Never {
                        kind,
                        job: t.job.clone(),
                        chain: u.chain,
                        state: u.state,
                    });
                }
                _ => match &u.latest_job {
                    Some(j) => keep.push(Target {
                        job: j.clone(),
                        delay: t.delay.clone(),
                    }),
                    None => {
                        error.get_or_insert(ResolveError::NoJobYet { job: t.job.clone() });
                    }
                },
            }
        }
        if keep.len() == ups.len() && latest_targets(t, ups).is_none() {
            // Nothing dropped and it names the latest jobs already (for a whole array whose
            // tasks are all still its own, the task mapping of aftercorr stays Slurm's).
            return None;
        }
        Some(keep)
    });
    if let Some(e) = error {
        return Err(e);
    }
    Ok(Resolved {
        expr: out,
        changed,
        edges,
    })
}

/// One target moved to a chain's new attempt: (upstream chain, earlier job, new job).
pub type Rewiring = (i64, String, String);

/// A waiting job's expression (squeue's `%E`) with every earlier attempt of a chain
/// replaced by the chain's latest job; `None` when nothing names an earlier attempt.
///
/// `aftercorr` on a whole array keeps its task mapping: for the waiting job's array task
/// `task`, the counterpart task's chain is looked up, and if that task was retried, the
/// clause becomes `afterok` on its new job (the other tasks still follow the array).
/// Without a task (not an array task) it is left as it is.
pub fn rewire(expr: &Expr, facts: &Facts, task: Option<u32>) -> Option<(Expr, Vec<Rewiring>)> {
    let mut out = expr.clone();
    let mut changes = Vec::new();
    let mut corr = Vec::new();
    let changed = out.map_targets(|kind, t| {
        let ups = facts.get(&t.job)?;
        let whole_array = !t.job.contains('_') || t.job.ends_with("_*");
        let array = ups
            .iter()
            .any(|u| u.latest_job.as_deref().is_some_and(|j| j.contains('_')));
        if kind == Kind::AfterCorr && whole_array && array {
            let task = task?;
            let base = whole_array_base(&t.job);
            let u = ups.iter().find(|u| {
                u.latest_job
                    .as_deref()
                    .and_then(|j| j.split_once('_'))
                    .is_some_and(|(_, k)| k.parse() == Ok(task))
            })?;
            let j = u.latest_job.clone()?;
            if j.split('_').next() == Some(base) {
                return None;
            }
            changes.push((u.chain, format!("{base}_{task}"), j.clone()));
            corr.push(Target::job(j));
            return Some(Vec::new());
        }
        let new = latest_targets(t, ups)?;
        for u in ups {
            if let Some(j) = &u.latest_job {
                if *j != t.job {
                    changes.push((u.chain, t.job.clone(), j.clone()));
                }
            }
        }
        Some(new)
    });
    if !corr.is_empty() {
        out.clauses.push(Clause::Jobs {
            kind: Kind::AfterOk,
            targets: corr,
        });
    }
    changed.then_some((out, changes))
}

/// squeue's `(state)` after a job, removed.
fn strip_state(t: &str) -> &str {
    match t.find('(') {
        Some(i) if t.ends_with(')') => &t[..i],
        _ => t,
    }
}

/// `12`, `12_3`, `12_*`, or a chain id `c7`.
fn is_job_token(t: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(n) = t.strip_prefix('c') {
        return digits(n);
    }
    match t.split_once('_') {
        Some((b, task)) => digits(b) && (task == "*" || digits(task)),
        None => digits(t),
    }
}

/// The chain id a target names (`c7` -> 7).
pub fn chain_target(job: &str) -> Option<i64> {
    job.strip_prefix('c')?.parse().ok()
}

/// A whole array named by its base: `12_*` is read as `12`.
pub fn whole_array_base(job: &str) -> &str {
    job.strip_suffix("_*").unwrap_or(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependency_values_name_their_jobs() {
        let jobs = |d: &str| {
            dependency_edges(d)
                .into_iter()
                .map(|e| e.job)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            jobs("afterok:12:13,afterany:14_2"),
            vec!["12", "13", "14_2"]
        );
        assert_eq!(jobs("afterok:12?afternotok:15"), vec!["12", "15"]);
        assert!(jobs("singleton").is_empty());
        let huge = format!("afterok:{}", vec!["12"; 100_000].join(":"));
        assert_eq!(dependency_edges(&huge).len(), MAX_DEPENDENCY_EDGES);
        // A "kind" that is not one is no dependency (and is never copied per token).
        let hostile = format!("{}:1:1:1", "a".repeat(1 << 20));
        assert!(dependency_edges(&hostile).is_empty());
        assert_eq!(jobs("after:12+5"), vec!["12"]);
        assert_eq!(
            dependency_edges("afterok:12,afternotok:13")
                .into_iter()
                .map(|e| e.kind)
                .collect::<Vec<_>>(),
            vec!["afterok", "afternotok"]
        );
    }

    fn round(s: &str) -> String {
        Expr::parse(s).unwrap().to_string()
    }

    #[test]
    fn every_sbatch_form_reads_and_writes_back() {
        for s in [
            "afterok:12",
            "afterok:12:13,afterany:14",
            "afterok:12?afternotok:13",
            "after:12+5:13",
            "aftercorr:12",
            "afterok:12_3",
            "afterok:12_*",
            "singleton",
            "afterok:12,singleton",
            "afterburstbuffer:9",
            "afterok:c7",
        ] {
            assert_eq!(round(s), s, "{s}");
        }
        assert!(Expr::parse("").unwrap().is_empty());
        assert!(Expr::parse("(null)").unwrap().is_empty());
    }

    #[test]
    fn squeue_states_are_dropped() {
        assert_eq!(round("afterok:879(failed)"), "afterok:879");
        assert_eq!(
            round("aftercorr:881_*(unfulfilled),afterok:881_2(unfulfilled)"),
            "aftercorr:881_*,afterok:881_2"
        );
        assert_eq!(
            round("afterany:879(unfulfilled)?afternotok:881_*(unfulfilled)"),
            "afterany:879?afternotok:881_*"
        );
        assert_eq!(round("after:889+1(unfulfilled)"), "after:889+1");
    }

    #[test]
    fn bad_values_are_errors_not_guesses() {
        assert!(matches!(
            Expr::parse("afterok:1,afterok:2?afterok:3"),
            Err(DepError::MixedJoins(_))
        ));
        assert!(matches!(
            Expr::parse("afterwards:1"),
            Err(DepError::UnknownKind(_))
        ));
        assert!(matches!(Expr::parse("afterok"), Err(DepError::NoJob(_))));
        assert!(matches!(
            Expr::parse("afterok:x1"),
            Err(DepError::BadJob(_))
        ));
        assert!(matches!(
            Expr::parse("afterok:1.batch"),
            Err(DepError::BadJob(_))
        ));
        assert!(matches!(Expr::parse("after:1+x"), Err(DepError::BadJob(_))));
        let huge = format!("afterok:{}", vec!["12"; 5000].join(":"));
        assert_eq!(Expr::parse(&huge), Err(DepError::TooLong));
        let hostile = format!("{}:1", "a".repeat(1 << 20));
        match Expr::parse(&hostile) {
            Err(DepError::UnknownKind(k)) => assert!(k.len() <= 64),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn targets_are_replaced_kept_or_dropped() {
        let mut e = Expr::parse("afterok:12:13,after:12+5,afterany:14").unwrap();
        let changed = e.map_targets(|kind, t| match (kind, t.job.as_str()) {
            // The delay stays with the job it was given for.
            (_, "12") => Some(vec![Target {
                job: "20".into(),
                delay: t.delay.clone(),
            }]),
            (Kind::AfterAny, "14") => Some(Vec::new()),
            _ => None,
        });
        assert!(changed);
        assert_eq!(e.to_string(), "afterok:20:13,after:20+5");
        // Nothing to change: unchanged, and said so.
        assert!(!e.map_targets(|_, _| None));
        // An array's tasks: one target becomes several, duplicates folded.
        let mut e = Expr::parse("afterok:12_*?singleton").unwrap();
        e.map_targets(|_, t| {
            (whole_array_base(&t.job) == "12").then(|| {
                vec![
                    Target::job("12_1"),
                    Target::job("30_2"),
                    Target::job("30_2"),
                ]
            })
        });
        assert_eq!(e.to_string(), "afterok:12_1:30_2?singleton");
        // A clause whose every job is dropped goes; the others stay.
        let mut e = Expr::parse("afternotok:c4,afterok:9").unwrap();
        e.map_targets(|k, _| k.is_about_outcome().then(Vec::new));
        assert_eq!(e.to_string(), "afterok:9");
        assert_eq!(chain_target("c4"), Some(4));
        assert_eq!(chain_target("4"), None);
    }

    fn up(chain: i64, state: ChainState, job: &str) -> Upstream {
        Upstream {
            chain,
            state,
            latest_job: Some(job.to_string()),
        }
    }

    #[test]
    fn a_submission_waits_on_the_chains_latest_jobs() {
        use ChainState::*;
        let facts: Facts = HashMap::from([
            ("c7".to_string(), vec![up(7, Active, "30")]),
            ("12".to_string(), vec![up(7, Active, "30")]),
            ("30".to_string(), vec![up(7, Active, "30")]),
            ("13".to_string(), vec![up(8, Completed, "13")]),
            ("14".to_string(), vec![up(9, Ready, "14")]),
            ("15".to_string(), vec![up(10, Failed, "15")]),
            ("16".to_string(), vec![up(11, Completed, "16")]),
            (
                "20_*".to_string(),
                vec![up(12, Active, "20_1"), up(13, Active, "31_2")],
            ),
            (
                "20".to_string(),
                vec![up(12, Active, "20_1"), up(13, Active, "20_2")],
            ),
        ]);
        let r = |s: &str| resolve(&Expr::parse(s).unwrap(), &facts);
        // A chain id and an earlier attempt name the latest job; the latest stays as it is.
        let x = r("afterok:c7:99").unwrap();
        assert_eq!(x.expr.to_string(), "afterok:30:99");
        assert!(x.changed);
        assert_eq!(
            x.edges
                .iter()
                .map(|e| (e.kind, e.chain, e.gate))
                .collect::<Vec<_>>(),
            vec![(Kind::AfterOk, 7, false)]
        );
        assert_eq!(r("afterok:12").unwrap().expr.to_string(), "afterok:30");
        let same = r("afterok:30,singleton").unwrap();
        assert!(!same.changed, "{same:?}");
        // A completed chain's clause holds already; a delay stays with its job.
        assert_eq!(
            r("afterok:13:14,after:c7+5").unwrap().expr.to_string(),
            "afterok:14,after:30+5"
        );
        // afterany/afternotok on an unfinished chain: held, gated, not Slurm's to wait on.
        let g = r("afternotok:c7,afterok:99").unwrap();
        assert_eq!(g.expr.to_string(), "afterok:99");
        assert_eq!(
            g.edges
                .iter()
                .map(|e| (e.kind, e.chain, e.gate))
                .collect::<Vec<_>>(),
            vec![(Kind::AfterNotOk, 7, true)]
        );
        assert!(g.held());
        // ... on a chain that ended: satisfied, or never.
        let done = r("afterany:13,afternotok:15").unwrap();
        assert!(done.expr.is_empty() && !done.held());
        assert!(matches!(
            r("afternotok:16"),
            Err(ResolveError::Never { chain: 11, .. })
        ));
        assert!(matches!(
            r("afterok:15"),
            Err(ResolveError::Never { chain: 10, .. })
        ));
        assert!(matches!(
            r("afterok:c99"),
            Err(ResolveError::UnknownChain(_))
        ));
        assert_eq!(
            r("afterany:c7?afterok:99"),
            Err(ResolveError::OutcomeWithAny)
        );
        // afternotok on a whole array: one condition over its tasks, as in Slurm (any task
        // not completed), gated while one is open.
        let arr = |states: [ChainState; 2]| -> Facts {
            HashMap::from([(
                "40".to_string(),
                vec![up(20, states[0], "40_1"), up(21, states[1], "40_2")],
            )])
        };
        let notok = Expr::parse("afternotok:40").unwrap();
        let r2 = resolve(&notok, &arr([Completed, Failed])).unwrap();
        assert!(r2.expr.is_empty() && !r2.held(), "{r2:?}");
        let r2 = resolve(&notok, &arr([Completed, Active])).unwrap();
        assert!(
            r2.held() && r2.edges.iter().all(|e| e.gate && e.target == "40"),
            "{r2:?}"
        );
        assert!(matches!(
            resolve(&notok, &arr([Completed, Completed])),
            Err(ResolveError::Never { .. })
        ));
        // A whole array whose task 2 was retried: its tasks' latest jobs.
        assert_eq!(
            r("afterok:20_*").unwrap().expr.to_string(),
            "afterok:20_1:31_2"
        );
        // ... and one whose tasks are all its own stays (aftercorr keeps Slurm's mapping).
        assert_eq!(r("aftercorr:20").unwrap().expr.to_string(), "aftercorr:20");
        assert_eq!(r("afterok:20").unwrap().expr.to_string(), "afterok:20");
    }

    #[test]
    fn a_waiting_job_is_rewired_to_the_new_attempt() {
        use ChainState::*;
        let facts: Facts = HashMap::from([
            ("879".to_string(), vec![up(3, Active, "889")]),
            (
                "881_*".to_string(),
                vec![up(4, Active, "881_1"), up(5, Active, "890_2")],
            ),
            ("881_2".to_string(), vec![up(5, Active, "890_2")]),
            ("889".to_string(), vec![up(3, Active, "889")]),
        ]);
        let w = |s: &str| rewire(&Expr::parse(s).unwrap(), &facts, None);
        let (e, ch) = w("afterok:879(failed)").unwrap();
        assert_eq!(e.to_string(), "afterok:889");
        assert_eq!(ch, vec![(3, "879".to_string(), "889".to_string())]);
        let (e, _) = w("after:879+1(unfulfilled),afterok:77(unfulfilled)").unwrap();
        assert_eq!(e.to_string(), "after:889+1,afterok:77");
        let (e, _) = w("afterok:881_*(unfulfilled)?afterok:881_2(failed)").unwrap();
        assert_eq!(e.to_string(), "afterok:881_1:890_2?afterok:890_2");
        // Already on the latest attempt, or not a supervised job: nothing to do.
        assert!(w("afterok:889(unfulfilled)").is_none());
        assert!(w("afterok:77(unfulfilled)").is_none());
        assert!(w("").is_none());
    }

    #[test]
    fn aftercorr_keeps_its_task_mapping() {
        use ChainState::*;
        // Array 881's task 2 was retried as 890_2; tasks 1 and 3 are still 881's.
        let ups = vec![
            up(4, Active, "881_1"),
            up(5, Active, "890_2"),
            up(6, Active, "881_3"),
        ];
        let facts: Facts = HashMap::from([("881_*".to_string(), ups)]);
        let w = |s: &str, task| rewire(&Expr::parse(s).unwrap(), &facts, task);
        let (e, ch) = w("aftercorr:881_*(unfulfilled)", Some(2)).unwrap();
        assert_eq!(e.to_string(), "afterok:890_2");
        assert_eq!(ch, vec![(5, "881_2".to_string(), "890_2".to_string())]);
        let (e, _) = w("aftercorr:881_*(unfulfilled),afterok:77", Some(2)).unwrap();
        assert_eq!(e.to_string(), "afterok:77,afterok:890_2");
        // Its counterpart was not retried, or no task: Slurm's mapping stays.
        assert!(w("aftercorr:881_*(unfulfilled)", Some(3)).is_none());
        assert!(w("aftercorr:881_*(unfulfilled)", None).is_none());
    }
}
