//! Decision-record invariants (issue 4, "Must hold" 1; docs/guarantees.md "exactly one decision record") as a
//! property test over random sequences of job endings.
//!
//! The real engine and store are driven cycle by cycle against the in-process fake Slurm
//! (`slurm::fake`): a few submissions (plain jobs and two-task arrays), then a random
//! sequence of steps: a job ends in one of Slurm's shapes, one chain's job keeps failing
//! the same way cycle after cycle, Slurm requeues a job itself, Slurm stops answering for
//! a few cycles (all of it, only the queries, or only sbatch), sbatch loses its reply or
//! refuses, the user cancels a chain, an agent resolves a chain (retry, fail, hold), a
//! poll cycle runs. Then everything is let settle, and finally every job still running
//! completes and the engine settles again. Checked throughout:
//!
//! 1. every ended attempt has exactly one decision record for its ending, tied to the
//!    observation of that (chain, attempt); each Slurm requeue adds one `watch` record tied
//!    to its own observation; an attempt sbatch refused has one record, without observation;
//! 2. a success (COMPLETED 0:0 with no OUT_OF_MEMORY step) has none;
//! 3. no record and no observation is ever edited or removed: each snapshot taken after
//!    a cycle is a prefix of every later one;
//! 4. no loop: automatic resubmissions per chain stay within `max_retries` and each class
//!    budget, every attempt after the first follows a resubmit decision, a chain never has
//!    two attempts launching or live at once, attempt numbers are 1..=k without gaps, every
//!    Slurm job belongs to exactly one attempt (nothing submitted twice), and a resubmission
//!    after OOM / TIMEOUT / NODE_FAIL really asks for more memory / more time (within the
//!    partition's MaxTime) / excludes the node;
//! 5. a cycle while Slurm does not answer changes no chain's state and adds no record or
//!    observation (a queries-only outage may still launch a due retry);
//! 6. after settling, each chain's state is the one its last decision says (or
//!    `completed` after a success), and terminal chains never change state;
//! 7. a resolution of a `pending_failed` chain is one new record pointing at the last
//!    one; a resolution of a chain in any other state is refused and writes nothing.
//!
//! Cases are few and short so that the file runs in a few seconds; `PROPTEST_CASES=2000`
//! gives a longer run.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::Value;
use slurm_supervisor::config::Config;
use slurm_supervisor::daemon::engine::Engine;
use slurm_supervisor::daemon::requests;
use slurm_supervisor::domain::model::{Action, ChainState, Classification, RecoveryClass};
use slurm_supervisor::protocol::{
    ErrorKind, Request, Resolution, ResolveAction, Response, SubmitRequest,
};
use slurm_supervisor::slurm::fake::{Command, Ending, FakeJob, FakeSlurm};
use slurm_supervisor::slurm::types::JobState;
use slurm_supervisor::store::{Attempt, AttemptState, Chain, DecisionRecord, Store};
use std::collections::{BTreeMap, HashMap};

const MAX_RETRIES: u32 = 4;
/// Per-class budgets, as in [`config_text`].
const BUDGETS: &[(Classification, u32)] = &[
    (Classification::Preempted, 2),
    (Classification::NodeFail, 2),
    (Classification::BootFail, 1),
    (Classification::Oom, 3),
    (Classification::Timeout, 3),
    (Classification::Transient, 2),
];
/// The `debug` partition's MaxTime in the fake.
const DEBUG_MAX_SECS: u64 = 30 * 60;
/// Cycles allowed for everything to settle once Slurm answers again.
const SETTLE_CYCLES: usize = 8;

const SCRIPT: &[u8] = b"#!/bin/sh\n#SBATCH --partition=debug\n#SBATCH --job-name=prop\ntrue\n";

fn config_text(state_dir: &std::path::Path) -> String {
    format!(
        r#"state_dir = {:?}
poll_interval = "1s"

[retry]
max_retries = {MAX_RETRIES}
backoff_initial = "0s"
backoff_max = "0s"
backoff_jitter = 0.0

[retry.budgets]
preempted = 2
node_fail = 2
boot_fail = 1
oom = 3
timeout = 3
transient = 2

[escalation]
mem_max = "400M"

[breaker]
threshold = 5
window = "10m"

[[rules]]
name = "tempfail"
kind = "transient"
exit_codes = [75]

[[rules]]
name = "config"
kind = "permanent"
exit_codes = [78]
"#,
        state_dir.display().to_string()
    )
}

fn proptest_config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        max_shrink_iters: 2_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---- the generated sequences -------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Sub {
    Single,
    /// `--array=0-1`: two chains in one sbatch.
    Array,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outage {
    /// Every Slurm command fails.
    All,
    /// squeue and sacct fail; sbatch works.
    Queries,
    /// Only sbatch fails.
    Sbatch,
}

#[derive(Debug, Clone)]
enum Step {
    /// Starts the n-th live job (modulo how many there are).
    Start(usize),
    /// Ends the n-th live job.
    End(usize, Ending),
    /// Slurm requeues the n-th live job itself, after a preemption or a node failure.
    Requeue(usize, bool),
    /// One poll cycle.
    Cycle,
    /// Slurm does not answer for this many cycles.
    Outage(Outage, u8),
    /// The next sbatch creates its job, but its reply is lost.
    LoseSbatchReply,
    /// The next sbatch is refused.
    RefuseSbatch,
    /// `supervisorctl cancel` of the n-th chain.
    Cancel(usize),
    /// `supervisorctl cancel` of the n-th chain as the daemon runs it: its scancel beside
    /// the loop, the n-th live job ending on its own (or not) before the scancel, and a
    /// poll cycle before the cancel's answer is recorded. Named by its first job's id
    /// when `true` (an array's tasks together, one of them maybe ready for a retry).
    CancelBesideACycle(usize, bool, Option<(usize, Ending)>),
    /// The n-th chain's job keeps failing the same way: ended, a cycle, again, k times.
    Storm(usize, Ending, u8),
    /// An agent resolves the n-th chain (`classify`), whatever state it is in.
    Resolve(usize, ResolveAction),
}

#[derive(Debug, Clone)]
struct Case {
    subs: Vec<Sub>,
    show_ended_in_squeue: bool,
    steps: Vec<Step>,
}

fn ending() -> impl Strategy<Value = Ending> {
    prop_oneof![
        3 => Just(Ending::Completed),
        4 => select(vec![1, 75, 78]).prop_map(Ending::Failed),
        2 => Just(Ending::OutOfMemory),
        1 => Just(Ending::OutOfMemoryInStep),
        1 => Just(Ending::CompletedWithStepOom),
        2 => Just(Ending::Timeout),
        2 => Just(Ending::NodeFail),
        1 => Just(Ending::BootFail),
        2 => Just(Ending::Preempted),
        1 => select(vec![0u32, 1000]).prop_map(Ending::CancelledBy),
        1 => Just(Ending::Deadline),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..8usize, ending()).prop_map(|(i, e)| Step::End(i, e)),
        6 => Just(Step::Cycle),
        1 => (0..8usize).prop_map(Step::Start),
        2 => (0..8usize, any::<bool>()).prop_map(|(i, nf)| Step::Requeue(i, nf)),
        2 => (select(vec![Outage::All, Outage::Queries, Outage::Sbatch]), 1..4u8)
            .prop_map(|(o, n)| Step::Outage(o, n)),
        1 => Just(Step::LoseSbatchReply),
        1 => Just(Step::RefuseSbatch),
        1 => (0..8usize).prop_map(Step::Cancel),
        1 => (0..8usize, any::<bool>(), prop::option::of((0..8usize, ending())))
            .prop_map(|(i, by_job, e)| Step::CancelBesideACycle(i, by_job, e)),
        1 => (0..8usize, retried_ending(), 2..7u8).prop_map(|(i, e, k)| Step::Storm(i, e, k)),
        2 => (0..8usize, select(vec![ResolveAction::Retry, ResolveAction::Fail, ResolveAction::Hold]))
            .prop_map(|(i, a)| Step::Resolve(i, a)),
    ]
}

/// Endings the supervisor retries by itself, as long as budgets and caps allow.
fn retried_ending() -> impl Strategy<Value = Ending> {
    select(vec![
        Ending::Failed(75),
        Ending::OutOfMemory,
        Ending::Timeout,
        Ending::NodeFail,
        Ending::BootFail,
        Ending::Preempted,
    ])
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(select(vec![Sub::Single, Sub::Single, Sub::Array]), 1..=3),
        any::<bool>(),
        prop::collection::vec(step(), 1..40),
    )
        .prop_map(|(mut subs, show_ended_in_squeue, steps)| {
            // At most four chains.
            while subs
                .iter()
                .map(|s| match s {
                    Sub::Single => 1,
                    Sub::Array => 2,
                })
                .sum::<usize>()
                > 4
            {
                subs.pop();
            }
            Case {
                subs,
                show_ended_in_squeue,
                steps,
            }
        })
}

// ---- the harness -------------------------------------------------------------------

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($fmt)*)));
        }
    };
}

type Checked = Result<(), TestCaseError>;

struct Harness {
    engine: Engine<FakeSlurm>,
    uid: u32,
    work: std::path::PathBuf,
    _dir: tempfile::TempDir,
    /// Every decision record and observation as of the last cycle, by id.
    decisions: Vec<DecisionRecord>,
    observations: Vec<(i64, i64, u32, Value)>,
    /// Chains seen in a terminal state, and that state.
    terminal: HashMap<i64, ChainState>,
    log: Vec<String>,
}

fn store_err(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(format!("store: {e}"))
}

/// A success, as Slurm recorded it: COMPLETED 0:0 and no step killed for memory.
fn fake_success(j: &FakeJob) -> bool {
    j.ended_rows.as_ref().is_some_and(|rows| {
        rows.iter().all(|r| r.state != JobState::OutOfMemory)
            && rows.first().is_some_and(|r| {
                r.state == JobState::Completed && r.exit_code.code == 0 && r.exit_code.signal == 0
            })
    })
}

fn budget(c: Classification) -> Option<u32> {
    BUDGETS.iter().find(|(k, _)| *k == c).map(|(_, b)| *b)
}

impl Harness {
    fn new(show_ended_in_squeue: bool) -> Result<Harness, TestCaseError> {
        let dir = tempfile::tempdir().map_err(store_err)?;
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).map_err(store_err)?;
        let config = Config::parse(&config_text(&dir.path().join("state")), None)
            .map_err(|e| TestCaseError::fail(format!("config: {e}")))?;
        let fake = FakeSlurm::new();
        fake.show_ended_in_squeue(show_ended_in_squeue);
        let engine = Engine::new(config, Store::in_memory().map_err(store_err)?, fake);
        Ok(Harness {
            engine,
            uid: nix::unistd::getuid().as_raw(),
            work,
            _dir: dir,
            decisions: Vec::new(),
            observations: Vec::new(),
            terminal: HashMap::new(),
            log: Vec::new(),
        })
    }

    fn fake(&self) -> &FakeSlurm {
        self.engine.slurm()
    }

    fn store(&self) -> &Store {
        self.engine.store()
    }

    async fn submit(&mut self, sub: Sub) -> Checked {
        let mut argv: Vec<String> = vec!["--mem=100M".into(), "--time=10".into()];
        if let Sub::Array = sub {
            argv.push("--array=0-1".into());
        }
        argv.push("job.sh".into());
        let req = SubmitRequest {
            argv,
            cwd: self.work.display().to_string(),
            env: Vec::new(),
            script: Some(SCRIPT.to_vec()),
            max_retries: None,
            restartable: false,
            continuation: None,
            request_id: None,
        };
        match requests::handle(&mut self.engine, Request::Submit(req), self.uid).await {
            Response::Ok(_) => Ok(()),
            Response::Error(e) => Err(TestCaseError::fail(format!("submit: {e:?}"))),
        }
    }

    fn chains(&self) -> Result<Vec<Chain>, TestCaseError> {
        self.store().chains(None).map_err(store_err)
    }

    fn all_decisions(&self) -> Result<Vec<DecisionRecord>, TestCaseError> {
        let mut all = Vec::new();
        for c in self.chains()? {
            all.extend(self.store().decisions(c.id).map_err(store_err)?);
        }
        all.sort_by_key(|d| d.id);
        Ok(all)
    }

    fn all_observations(&self) -> Result<Vec<(i64, i64, u32, Value)>, TestCaseError> {
        let mut all = Vec::new();
        for c in self.chains()? {
            for (id, n, _, body) in self.store().observations(c.id).map_err(store_err)? {
                all.push((id, c.id, n, body));
            }
        }
        all.sort_by_key(|o| o.0);
        Ok(all)
    }

    fn states(&self) -> Result<Vec<(i64, ChainState)>, TestCaseError> {
        Ok(self.chains()?.iter().map(|c| (c.id, c.state)).collect())
    }

    /// One chain's story, for failure messages.
    fn describe(&self, chain: i64) -> String {
        let mut out = String::new();
        if let Ok(Some(c)) = self.store().chain(chain) {
            out.push_str(&format!("chain c{} is {} ({:?})\n", c.id, c.state, c.plan));
        }
        for a in self.store().attempts(chain).unwrap_or_default() {
            out.push_str(&format!(
                "  attempt {} job {:?} {:?} slurm {:?} {:?} restarts {}\n",
                a.n, a.slurm_job_id, a.state, a.slurm_state, a.exit_code, a.restarts
            ));
        }
        for d in self.store().decisions(chain).unwrap_or_default() {
            out.push_str(&format!(
                "  decision {} on attempt {} obs {:?}: {} {} {} by {}: {}\n",
                d.id,
                d.attempt_n,
                d.observation_id,
                d.classification,
                d.class,
                d.action,
                d.actor,
                d.reason
            ));
        }
        out.push_str("  steps: ");
        out.push_str(&self.log.join("; "));
        out
    }

    /// Begins a cancel of `id` as the daemon's loop does, expecting scancels to run.
    async fn begin_scancel(&mut self, id: &str) -> requests::RequestFlight {
        let request = Request::Cancel { id: id.to_string() };
        match requests::begin(
            &mut self.engine.desk(),
            request,
            self.uid,
            tracing::Span::none(),
        )
        .await
        {
            requests::Plan::Fly(c) => c,
            other => panic!("no scancel: {other:?}"),
        }
    }

    /// Runs a request's Slurm command as the daemon does beside its loop.
    async fn fly(&self, command: requests::RequestFlight) -> requests::Landed {
        requests::fly(&self.engine.runner(), command).await
    }

    /// Runs one cycle and checks what must hold after every cycle.
    async fn cycle(&mut self) -> Checked {
        self.engine
            .cycle()
            .await
            .map_err(|e| TestCaseError::fail(format!("cycle: {e}")))?;
        self.after_cycle()
    }

    fn after_cycle(&mut self) -> Checked {
        // 3: append-only.
        let decisions = self.all_decisions()?;
        ensure!(
            decisions.len() >= self.decisions.len()
                && decisions[..self.decisions.len()] == self.decisions[..],
            "a decision record was edited or removed:\nbefore {:#?}\nafter {:#?}",
            self.decisions,
            decisions
        );
        self.decisions = decisions;
        let observations = self.all_observations()?;
        ensure!(
            observations.len() >= self.observations.len()
                && observations[..self.observations.len()] == self.observations[..],
            "an observation was edited or removed"
        );
        self.observations = observations;

        for c in self.chains()? {
            // 6: terminal stays terminal.
            if let Some(was) = self.terminal.get(&c.id) {
                ensure!(
                    *was == c.state,
                    "c{} was {was} and is now {}:\n{}",
                    c.id,
                    c.state,
                    self.describe(c.id)
                );
            } else if !c.state.is_open() {
                self.terminal.insert(c.id, c.state);
            }
            self.check_chain_structure(&c)?;
        }
        Ok(())
    }

    /// 4 (the parts that hold at every moment) and 1 (record shapes).
    fn check_chain_structure(&self, c: &Chain) -> Checked {
        let attempts = self.store().attempts(c.id).map_err(store_err)?;
        let decisions = self.store().decisions(c.id).map_err(store_err)?;
        let observations = self.store().observations(c.id).map_err(store_err)?;
        let why = || self.describe(c.id);

        for (i, a) in attempts.iter().enumerate() {
            ensure!(
                a.n == i as u32 + 1,
                "attempt numbers have a gap:\n{}",
                why()
            );
        }
        let open = attempts
            .iter()
            .filter(|a| matches!(a.state, AttemptState::Live | AttemptState::Launching))
            .count();
        ensure!(
            open <= 1,
            "c{} has {open} attempts launching or live at once:\n{}",
            c.id,
            why()
        );

        // Budgets and the cap on resubmissions.
        let auto: Vec<&DecisionRecord> = decisions
            .iter()
            .filter(|d| d.action == Action::Resubmit && d.actor == "supervisor")
            .collect();
        ensure!(
            auto.len() as u32 <= MAX_RETRIES,
            "c{} was resubmitted {} times, max_retries is {MAX_RETRIES}:\n{}",
            c.id,
            auto.len(),
            why()
        );
        let mut by_class: BTreeMap<&str, u32> = BTreeMap::new();
        for d in &auto {
            *by_class.entry(d.classification.as_str()).or_default() += 1;
            let b = budget(d.classification);
            ensure!(
                b.is_some(),
                "c{} was resubmitted automatically after {}:\n{}",
                c.id,
                d.classification,
                why()
            );
        }
        for (class, n) in &by_class {
            let b = budget(class.parse().expect("known")).unwrap_or(0);
            ensure!(
                *n <= b,
                "c{} got {n} {class} resubmissions, the budget is {b}:\n{}",
                c.id,
                why()
            );
        }
        let resubmits = decisions
            .iter()
            .filter(|d| d.action == Action::Resubmit)
            .count();
        ensure!(
            attempts.len() <= 1 + resubmits,
            "c{} has {} attempts after {resubmits} resubmit decisions:\n{}",
            c.id,
            attempts.len(),
            why()
        );

        // Record shapes: classes go with actions, observations belong to their attempt.
        let obs: HashMap<i64, (u32, bool)> = observations
            .iter()
            .map(|(id, n, _, body)| (*id, (*n, body["requeued_by_slurm"] == Value::Bool(true))))
            .collect();
        let mut used = HashMap::new();
        for d in &decisions {
            if let Some(r) = d.resolves {
                ensure!(
                    r < d.id && decisions.iter().any(|e| e.id == r),
                    "decision {} resolves {r}, which is not an earlier record of c{}:\n{}",
                    d.id,
                    c.id,
                    why()
                );
            }
            let expected_class = match d.action {
                Action::Resubmit if d.actor == "supervisor" => Some(RecoveryClass::R1),
                Action::Resubmit => Some(RecoveryClass::R2),
                Action::Watch => Some(RecoveryClass::R1),
                Action::Escalate | Action::Hold => Some(RecoveryClass::R2),
                Action::Fail | Action::Cancel => Some(RecoveryClass::R3),
                _ => None,
            };
            if let Some(k) = expected_class {
                ensure!(
                    d.class == k,
                    "decision {} is {} {}:\n{}",
                    d.id,
                    d.class,
                    d.action,
                    why()
                );
            }
            if let Some(o) = d.observation_id {
                let Some((n, requeued)) = obs.get(&o) else {
                    return Err(TestCaseError::fail(format!(
                        "decision {} points at observation {o} of another chain:\n{}",
                        d.id,
                        why()
                    )));
                };
                ensure!(
                    *n == d.attempt_n,
                    "decision {} is about attempt {} but its observation about {n}:\n{}",
                    d.id,
                    d.attempt_n,
                    why()
                );
                ensure!(
                    *requeued == (d.action == Action::Watch),
                    "decision {} ({}) does not match its observation (requeued: {requeued}):\n{}",
                    d.id,
                    d.action,
                    why()
                );
                ensure!(
                    used.insert(o, d.id).is_none(),
                    "observation {o} has two decision records:\n{}",
                    why()
                );
            }
        }

        for a in &attempts {
            self.check_attempt_records(c, a, &decisions, &observations)?;
        }
        Ok(())
    }

    /// 1 and 2 for one attempt.
    fn check_attempt_records(
        &self,
        c: &Chain,
        a: &Attempt,
        decisions: &[DecisionRecord],
        observations: &[(i64, u32, i64, Value)],
    ) -> Checked {
        let why = || self.describe(c.id);
        let mine: Vec<&DecisionRecord> = decisions.iter().filter(|d| d.attempt_n == a.n).collect();
        let watch: Vec<&&DecisionRecord> =
            mine.iter().filter(|d| d.action == Action::Watch).collect();
        let ending: Vec<&&DecisionRecord> = mine
            .iter()
            .filter(|d| d.observation_id.is_some() && d.action != Action::Watch)
            .collect();
        let requeue_obs = observations
            .iter()
            .filter(|(_, n, _, b)| *n == a.n && b["requeued_by_slurm"] == Value::Bool(true))
            .count();
        let end_obs: Vec<i64> = observations
            .iter()
            .filter(|(_, n, _, b)| *n == a.n && b["requeued_by_slurm"] != Value::Bool(true))
            .map(|(id, ..)| *id)
            .collect();
        ensure!(
            watch.len() as u32 == a.restarts && requeue_obs == watch.len(),
            "attempt {} of c{} has {} restarts, {} watch records, {requeue_obs} requeue observations:\n{}",
            a.n,
            c.id,
            a.restarts,
            watch.len(),
            why()
        );
        let job = a.slurm_job_id.as_deref().and_then(|j| self.fake().job(j));
        if let Some(j) = &job {
            ensure!(
                a.restarts as usize <= j.requeued_runs.len(),
                "attempt {} of c{} has {} watch records but Slurm requeued it {} times:\n{}",
                a.n,
                c.id,
                a.restarts,
                j.requeued_runs.len(),
                why()
            );
        }
        match a.state {
            AttemptState::Live | AttemptState::Launching => {
                ensure!(
                    ending.is_empty() && end_obs.is_empty(),
                    "attempt {} of c{} is {:?} but has an ending record:\n{}",
                    a.n,
                    c.id,
                    a.state,
                    why()
                );
            }
            AttemptState::NotSubmitted => {
                let recs: Vec<_> = mine
                    .iter()
                    .filter(|d| d.observation_id.is_none() && d.actor == "supervisor")
                    .collect();
                ensure!(
                    recs.len() == 1
                        && recs[0].action == Action::Escalate
                        && end_obs.is_empty()
                        && ending.is_empty(),
                    "attempt {} of c{} was refused by sbatch and needs exactly one escalation record:\n{}",
                    a.n,
                    c.id,
                    why()
                );
            }
            AttemptState::Ended if end_obs.is_empty() => {
                // Ended by `supervisorctl cancel`: its record is the user's cancel.
                let recs: Vec<_> = mine
                    .iter()
                    .filter(|d| {
                        d.observation_id.is_none()
                            && d.action == Action::Cancel
                            && d.actor.starts_with("user:")
                    })
                    .collect();
                ensure!(
                    recs.len() == 1 && ending.is_empty() && a.slurm_state.as_deref() == Some("CANCELLED"),
                    "attempt {} of c{} ended without an observation and without exactly one cancel record:\n{}",
                    a.n,
                    c.id,
                    why()
                );
            }
            AttemptState::Ended => {
                ensure!(
                    end_obs.len() == 1,
                    "attempt {} of c{} has {} ending observations:\n{}",
                    a.n,
                    c.id,
                    end_obs.len(),
                    why()
                );
                let Some(j) = &job else {
                    return Err(TestCaseError::fail(format!(
                        "attempt {} of c{} ended but Slurm never had its job:\n{}",
                        a.n,
                        c.id,
                        why()
                    )));
                };
                ensure!(
                    !j.is_live() && a.slurm_state.as_deref() == Some(j.state.as_str()),
                    "attempt {} of c{} was recorded as {:?} but Slurm says {}:\n{}",
                    a.n,
                    c.id,
                    a.slurm_state,
                    j.state,
                    why()
                );
                ensure!(
                    a.restarts as usize == j.requeued_runs.len(),
                    "attempt {} of c{} ended with {} of its {} requeues recorded:\n{}",
                    a.n,
                    c.id,
                    a.restarts,
                    j.requeued_runs.len(),
                    why()
                );
                if fake_success(j) {
                    ensure!(
                        ending.is_empty(),
                        "the success of attempt {} of c{} has a decision record:\n{}",
                        a.n,
                        c.id,
                        why()
                    );
                } else {
                    ensure!(
                        ending.len() == 1 && ending[0].observation_id == Some(end_obs[0]),
                        "the ending of attempt {} of c{} has {} records (want exactly one, tied to observation {}):\n{}",
                        a.n,
                        c.id,
                        ending.len(),
                        end_obs[0],
                        why()
                    );
                    self.check_fix_applied(c, a, j, ending[0])?;
                }
            }
        }
        Ok(())
    }

    /// 4: a resubmission after OOM, TIMEOUT or a node failure changes what failed.
    fn check_fix_applied(
        &self,
        c: &Chain,
        a: &Attempt,
        j: &FakeJob,
        d: &DecisionRecord,
    ) -> Checked {
        if d.action != Action::Resubmit {
            return Ok(());
        }
        let next = self
            .store()
            .attempts(c.id)
            .map_err(store_err)?
            .into_iter()
            .find(|n| n.n == a.n + 1);
        let Some(next_job) = next
            .and_then(|n| n.slurm_job_id)
            .and_then(|id| self.fake().job(&id))
        else {
            return Ok(());
        };
        let why = || self.describe(c.id);
        match d.classification {
            Classification::Oom => ensure!(
                next_job.req_mem_bytes > j.req_mem_bytes,
                "after oom attempt {} of c{} got {} bytes, not more than {}:\n{}",
                a.n + 1,
                c.id,
                next_job.req_mem_bytes,
                j.req_mem_bytes,
                why()
            ),
            Classification::Timeout => {
                let (before, after) = (
                    j.timelimit_secs.unwrap_or(u64::MAX),
                    next_job.timelimit_secs.unwrap_or(u64::MAX),
                );
                ensure!(
                    after > before && after <= DEBUG_MAX_SECS,
                    "after timeout attempt {} of c{} got {after}s (was {before}s, partition max {DEBUG_MAX_SECS}s):\n{}",
                    a.n + 1,
                    c.id,
                    why()
                );
            }
            Classification::NodeFail | Classification::BootFail => {
                let node = j
                    .ended_rows
                    .as_ref()
                    .and_then(|r| r.first())
                    .map(|r| r.node_list.clone())
                    .unwrap_or_default();
                ensure!(
                    next_job.exclude.contains(&node),
                    "after a failure of {node} attempt {} of c{} excludes only {:?}:\n{}",
                    a.n + 1,
                    c.id,
                    next_job.exclude,
                    why()
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// Runs cycles with Slurm answering until nothing is left to do.
    async fn settle(&mut self) -> Checked {
        for c in Command::ALL {
            self.fake().set_unavailable(c, false);
        }
        for _ in 0..SETTLE_CYCLES {
            self.cycle().await?;
            if self.settled()? {
                return Ok(());
            }
        }
        let chains: Vec<String> = self.chains()?.iter().map(|c| self.describe(c.id)).collect();
        Err(TestCaseError::fail(format!(
            "not settled after {SETTLE_CYCLES} cycles with Slurm answering:\n{}",
            chains.join("\n")
        )))
    }

    fn settled(&self) -> Result<bool, TestCaseError> {
        for c in self.chains()? {
            if c.state == ChainState::Ready {
                return Ok(false);
            }
            for a in self.store().attempts(c.id).map_err(store_err)? {
                match a.state {
                    AttemptState::Launching => return Ok(false),
                    AttemptState::Live => {
                        let j = a.slurm_job_id.as_deref().and_then(|j| self.fake().job(j));
                        if j.is_none_or(|j| !j.is_live()) {
                            return Ok(false);
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(true)
    }

    /// 6 and the Slurm side of 4, once settled.
    fn check_settled(&self) -> Checked {
        // Every Slurm job belongs to exactly one attempt: nothing was submitted twice,
        // no job whose sbatch reply was lost was left behind.
        let mut owners: HashMap<String, Vec<(i64, u32)>> = HashMap::new();
        for c in self.chains()? {
            for a in self.store().attempts(c.id).map_err(store_err)? {
                if let Some(j) = a.slurm_job_id {
                    owners.entry(j).or_default().push((c.id, a.n));
                }
            }
        }
        for (id, j) in self.fake().jobs() {
            let o = owners.get(&id).cloned().unwrap_or_default();
            ensure!(
                o.len() == 1,
                "Slurm job {id} ({}, comment {:?}) belongs to attempts {o:?}; steps: {}",
                j.state,
                j.comment,
                self.log.join("; ")
            );
        }

        for c in self.chains()? {
            let why = || self.describe(c.id);
            let attempts = self.store().attempts(c.id).map_err(store_err)?;
            let decisions = self.store().decisions(c.id).map_err(store_err)?;
            let last = attempts.last().expect("a chain has an attempt");
            if last.state == AttemptState::Live {
                ensure!(
                    c.state == ChainState::Active,
                    "c{} has a live attempt but is {}:\n{}",
                    c.id,
                    c.state,
                    why()
                );
                continue;
            }
            ensure!(
                c.state != ChainState::Active && c.state != ChainState::Ready,
                "c{} is {} with no live attempt after settling:\n{}",
                c.id,
                c.state,
                why()
            );
            let after_last: Vec<&DecisionRecord> = decisions
                .iter()
                .filter(|d| d.attempt_n == last.n && d.action != Action::Watch)
                .collect();
            let success = last.state == AttemptState::Ended
                && last
                    .slurm_job_id
                    .as_deref()
                    .and_then(|j| self.fake().job(j))
                    .is_some_and(|j| fake_success(&j))
                && after_last.is_empty();
            let want = if success {
                ChainState::Completed
            } else {
                match decisions.iter().rev().find(|d| d.action != Action::Watch) {
                    Some(d) => match d.action {
                        Action::Escalate | Action::Hold => ChainState::PendingFailed,
                        Action::Fail => ChainState::Failed,
                        Action::Cancel => ChainState::Cancelled,
                        other => {
                            return Err(TestCaseError::fail(format!(
                                "c{} ends on a {other} decision with nothing live:\n{}",
                                c.id,
                                why()
                            )))
                        }
                    },
                    None => {
                        return Err(TestCaseError::fail(format!(
                            "c{} has ended without success and without a record:\n{}",
                            c.id,
                            why()
                        )))
                    }
                }
            };
            ensure!(
                c.state == want,
                "c{} is {} but its last decision says {want}:\n{}",
                c.id,
                c.state,
                why()
            );
            if success {
                ensure!(
                    c.last_classification == Some(Classification::Completed),
                    "c{} completed but shows {:?}",
                    c.id,
                    c.last_classification
                );
            }
        }
        Ok(())
    }

    /// The n-th live job, if any.
    fn pick_job(&self, i: usize) -> Option<String> {
        let live = self.fake().live_jobs();
        (!live.is_empty()).then(|| live[i % live.len()].clone())
    }

    async fn run_step(&mut self, step: &Step) -> Checked {
        match step {
            Step::Start(i) => {
                if let Some(j) = self.pick_job(*i) {
                    self.fake().start(&j);
                    self.log.push(format!("start {j}"));
                }
            }
            Step::End(i, e) => {
                if let Some(j) = self.pick_job(*i) {
                    self.fake().end(&j, *e);
                    self.log.push(format!("end {j} {e:?}"));
                }
            }
            Step::Requeue(i, node_fail) => {
                if let Some(j) = self.pick_job(*i) {
                    let how = if *node_fail {
                        JobState::NodeFail
                    } else {
                        JobState::Preempted
                    };
                    self.fake().requeue(&j, how);
                    self.log.push(format!("requeue {j} after {how}"));
                }
            }
            Step::Cycle => {
                self.log.push("cycle".into());
                self.cycle().await?;
            }
            Step::Outage(kind, cycles) => {
                self.log.push(format!("{kind:?} down for {cycles} cycles"));
                let down: &[Command] = match kind {
                    Outage::All => &Command::ALL,
                    Outage::Queries => &[
                        Command::Squeue,
                        Command::JobStates,
                        Command::SqueueUser,
                        Command::Sacct,
                        Command::SacctUserSince,
                    ],
                    Outage::Sbatch => &[Command::Sbatch],
                };
                for c in down {
                    self.fake().set_unavailable(*c, true);
                }
                for _ in 0..*cycles {
                    let states = self.states()?;
                    let (nd, no) = (self.decisions.len(), self.observations.len());
                    self.cycle().await?;
                    let after = self.states()?;
                    if *kind != Outage::Sbatch {
                        // 5: nothing is decided from a query that got no answer. While
                        // only the queries fail, sbatch still answers: a due retry may be
                        // launched, or refused (a record without an observation).
                        let sbatch_answers = *kind == Outage::Queries;
                        let added = &self.decisions[nd..];
                        ensure!(
                            self.observations.len() == no
                                && (added.is_empty()
                                    || sbatch_answers
                                        && added.iter().all(|d| {
                                            d.observation_id.is_none()
                                                && d.action == Action::Escalate
                                        })),
                            "a record was added while Slurm did not answer ({kind:?}): {added:#?}\nsteps: {}",
                            self.log.join("; ")
                        );
                        for ((id, s0), (_, s1)) in states.iter().zip(&after) {
                            let launched = sbatch_answers
                                && *s0 == ChainState::Ready
                                && matches!(*s1, ChainState::Active | ChainState::PendingFailed);
                            ensure!(
                                s0 == s1 || launched,
                                "c{id} went from {s0} to {s1} while Slurm did not answer ({kind:?}):\n{}",
                                self.describe(*id)
                            );
                        }
                    }
                }
                for c in down {
                    self.fake().set_unavailable(*c, false);
                }
            }
            Step::LoseSbatchReply => {
                self.log.push("sbatch loses its next reply".into());
                self.fake().lose_next_sbatch_reply();
            }
            Step::RefuseSbatch => {
                self.log.push("sbatch refuses next".into());
                self.fake().refuse_next_sbatch(
                    "sbatch: error: Batch job submission failed: Requested node configuration is not available",
                );
            }
            Step::Cancel(i) => {
                let chains = self.chains()?;
                let c = &chains[i % chains.len()];
                let r = requests::handle(
                    &mut self.engine,
                    Request::Cancel {
                        id: format!("c{}", c.id),
                    },
                    self.uid,
                )
                .await;
                let ok = matches!(r, Response::Ok(_));
                self.log.push(format!(
                    "cancel c{} ({})",
                    c.id,
                    if ok { "ok" } else { "refused" }
                ));
                if ok {
                    let now = self
                        .store()
                        .chain(c.id)
                        .map_err(store_err)?
                        .expect("exists");
                    ensure!(
                        now.state == ChainState::Cancelled,
                        "cancel of c{} answered ok but it is {}",
                        c.id,
                        now.state
                    );
                }
                // The cancel is not a cycle, but what it wrote must hold up too.
                self.after_cycle()?;
            }
            Step::CancelBesideACycle(i, by_job, ends) => {
                let chains = self.chains()?;
                let c = &chains[i % chains.len()];
                let first_job = self
                    .store()
                    .attempts(c.id)
                    .map_err(store_err)?
                    .into_iter()
                    .find_map(|a| a.slurm_job_id)
                    .map(|j| slurm_supervisor::slurm::jobid::base_job_id(&j));
                let id = match first_job {
                    Some(j) if *by_job => j,
                    _ => format!("c{}", c.id),
                };
                let request = Request::Cancel { id: id.clone() };
                let begun = requests::begin(
                    &mut self.engine.desk(),
                    request,
                    self.uid,
                    tracing::Span::none(),
                )
                .await;
                let command = match begun {
                    requests::Plan::Fly(c) => c,
                    requests::Plan::Done(r) | requests::Plan::Reload(r) => {
                        self.log.push(format!("cancel {id} (no scancel: {r:?})"));
                        return self.after_cycle();
                    }
                };
                let held = command.chains().to_vec();
                if let Some((j, ending)) = ends {
                    let live = self.fake().live_jobs();
                    if !live.is_empty() {
                        let job = live[j % live.len()].clone();
                        self.log.push(format!("{job} ends {ending:?}"));
                        self.fake().end(&job, *ending);
                    }
                }
                let landed = self.fly(command).await;
                let scancelled_ok = matches!(landed, requests::Landed::Cancel(_, Ok(())));
                let attempts = |h: &Self| -> Result<usize, TestCaseError> {
                    let mut n = 0;
                    for &c in &held {
                        n += h.store().attempts(c).map_err(store_err)?.len();
                    }
                    Ok(n)
                };
                let before = attempts(self)?;
                self.cycle().await?;
                // No retry of a chain being cancelled is launched beside its scancel.
                ensure!(
                    attempts(self)? == before,
                    "a chain of cancel {id} ({held:?}) got a new attempt while its scancel ran",
                );
                let r = requests::finish(&mut self.engine.desk(), landed);
                let ok = matches!(r, Response::Ok(_));
                self.log.push(format!(
                    "cancel {id} beside a cycle (scancel {}, {})",
                    if scancelled_ok { "ok" } else { "failed" },
                    if ok { "ok" } else { "refused" }
                ));
                // A scancel that went through is recorded as the user's cancel, never
                // taken by the cycle beside it for an ending of the job's own.
                ensure!(
                    ok == scancelled_ok,
                    "cancel of {id}: scancel ok {scancelled_ok}, answered {r:?}"
                );
                if ok {
                    for &c in &held {
                        let now = self.store().chain(c).map_err(store_err)?.expect("exists");
                        ensure!(
                            now.state == ChainState::Cancelled,
                            "cancel of {id} answered ok but c{c} is {}",
                            now.state
                        );
                    }
                }
                self.after_cycle()?;
            }
            Step::Resolve(i, action) => {
                let chains = self.chains()?;
                let c = chains[i % chains.len()].clone();
                let before = self.store().last_decision(c.id).map_err(store_err)?;
                let count = self.store().decisions(c.id).map_err(store_err)?.len();
                let r = Resolution {
                    id: format!("c{}", c.id),
                    action: *action,
                    mem: None,
                    time: None,
                    partition: None,
                    exclude: Vec::new(),
                    reason: "property test".into(),
                    confidence: None,
                    dry_run: false,
                };
                let answer =
                    requests::handle(&mut self.engine, Request::Classify(r), self.uid).await;
                self.log
                    .push(format!("resolve c{} {action:?} ({})", c.id, c.state));
                let after = self.store().decisions(c.id).map_err(store_err)?;
                let now = self
                    .store()
                    .chain(c.id)
                    .map_err(store_err)?
                    .expect("exists");
                let already_held = before.as_ref().is_some_and(|d| d.action == Action::Hold);
                if c.state == ChainState::PendingFailed
                    && *action == ResolveAction::Hold
                    && already_held
                {
                    // A hold of a chain already held changes nothing, so it writes nothing.
                    ensure!(
                        matches!(&answer, Response::Error(e) if e.kind == ErrorKind::Conflict)
                            && after.len() == count
                            && now.state == c.state,
                        "holding the held c{} gave {answer:?}:\n{}",
                        c.id,
                        self.describe(c.id)
                    );
                } else if c.state == ChainState::PendingFailed {
                    // A later fact is a new record pointing at the one it resolves.
                    ensure!(
                        matches!(answer, Response::Ok(_)) && after.len() == count + 1,
                        "resolving pending_failed c{} gave {answer:?}:\n{}",
                        c.id,
                        self.describe(c.id)
                    );
                    let d = after.last().expect("just added");
                    let want = match action {
                        ResolveAction::Retry => ChainState::Ready,
                        ResolveAction::Fail => ChainState::Failed,
                        ResolveAction::Hold => ChainState::PendingFailed,
                    };
                    ensure!(
                        d.resolves == before.map(|b| b.id)
                            && d.actor.starts_with("user:")
                            && d.observation_id.is_none()
                            && now.state == want,
                        "the resolution of c{} is not a new record resolving the last one:\n{}",
                        c.id,
                        self.describe(c.id)
                    );
                } else {
                    // Only a chain waiting for a decision can be resolved.
                    ensure!(
                        matches!(&answer, Response::Error(e) if e.kind == ErrorKind::Conflict)
                            && after.len() == count
                            && now.state == c.state,
                        "resolving c{} in state {} gave {answer:?}:\n{}",
                        c.id,
                        c.state,
                        self.describe(c.id)
                    );
                }
                self.after_cycle()?;
            }
            Step::Storm(i, e, k) => {
                let chains = self.chains()?;
                let c = chains[i % chains.len()].id;
                for _ in 0..*k {
                    let job = self
                        .store()
                        .attempts(c)
                        .map_err(store_err)?
                        .into_iter()
                        .find(|a| a.state == AttemptState::Live)
                        .and_then(|a| a.slurm_job_id);
                    let Some(j) = job else { break };
                    if !self.fake().end(&j, *e) {
                        break;
                    }
                    self.log.push(format!("end {j} {e:?}; cycle"));
                    self.cycle().await?;
                }
            }
        }
        Ok(())
    }
}

async fn run(case: Case) -> Checked {
    let mut h = Harness::new(case.show_ended_in_squeue)?;
    for s in &case.subs {
        h.submit(*s).await?;
    }
    h.after_cycle()?;
    for step in &case.steps {
        h.run_step(step).await?;
    }
    h.settle().await?;
    h.check_settled()?;
    // Every job still running completes: now every requeue must have its record too
    // (a requeue that happened between two polls is only seen once the job leaves the
    // queue), and every chain reaches a state its records explain.
    for j in h.fake().live_jobs() {
        h.fake().end(&j, Ending::Completed);
    }
    h.log.push("everything completes".into());
    h.settle().await?;
    h.check_settled()?;
    for c in h.chains()? {
        ensure!(
            !matches!(c.state, ChainState::Active | ChainState::Ready),
            "c{} is still {} after every job ended:\n{}",
            c.id,
            c.state,
            h.describe(c.id)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config(48))]

    #[test]
    fn decision_records_hold_over_random_endings(case in case()) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(run(case))?;
    }
}

/// An array's task made ready for a retry (an agent's `classify`) just before a cancel of
/// the whole array (by its job id) while its other task runs: the cycle beside the
/// cancel's scancel launches no retry of it, and the cancel records both.
#[test]
fn a_task_ready_for_a_retry_is_not_relaunched_beside_its_arrays_cancel() {
    let case = Case {
        subs: vec![Sub::Array],
        show_ended_in_squeue: false,
        steps: vec![
            Step::End(1, Ending::Failed(1)),
            Step::Cycle,
            Step::Resolve(1, ResolveAction::Retry),
            Step::CancelBesideACycle(0, true, None),
        ],
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if let Err(e) = rt.block_on(run(case)) {
        panic!("{e}");
    }
}

/// A cancel of chain `c` whose scancel fails (Slurm requeues `requeue`, if given, while it
/// runs) with a cycle beside it; then, the cancel answered, the next poll records the
/// chain's one requeue.
async fn cancel_failing_beside_a_cycle(h: &mut Harness, c: i64, requeue: Option<&str>) {
    let command = h.begin_scancel(&format!("c{c}")).await;
    h.fake().set_unavailable(Command::Scancel, true);
    if let Some(job) = requeue {
        assert!(h.fake().requeue(job, JobState::NodeFail));
    }
    let landed = h.fly(command).await;
    assert!(matches!(landed, requests::Landed::Cancel(_, Err(_))));
    h.cycle().await.unwrap();
    let r = requests::finish(&mut h.engine.desk(), landed);
    assert!(matches!(r, Response::Error(_)), "{r:?}");
    h.fake().set_unavailable(Command::Scancel, false);
    h.cycle().await.unwrap();
    let attempts = h.store().attempts(c).unwrap();
    assert_eq!(
        (attempts.len(), attempts[0].restarts),
        (1, 1),
        "the requeue is recorded:\n{}",
        h.describe(c)
    );
}

/// Slurm requeues a job (node failure) while a cancel's scancel runs, and the scancel
/// fails: the poll that saw the requeue left it to the cancel, so the next poll after the
/// cancel sees it again and records it, as it would have without the cancel.
#[tokio::test(flavor = "current_thread")]
async fn a_requeue_seen_during_a_failed_cancel_is_recorded_by_the_next_poll() {
    let mut h = Harness::new(false).unwrap();
    h.submit(Sub::Single).await.unwrap();
    let job = h.fake().live_jobs()[0].clone();
    h.fake().start(&job);
    h.cycle().await.unwrap();
    let c = h.chains().unwrap()[0].id;
    cancel_failing_beside_a_cycle(&mut h, c, Some(&job)).await;
}

/// The same when the poll that saw the requeue found more endings than one turn judges
/// (`JUDGE_BATCH`, 500): the cancel begins while the requeue waits in the backlog.
#[tokio::test(flavor = "current_thread")]
async fn a_requeue_in_the_backlog_when_a_cancel_begins_is_recorded() {
    let mut h = Harness::new(false).unwrap();
    let req = SubmitRequest {
        argv: vec!["--array=0-500".into(), "job.sh".into()],
        cwd: h.work.display().to_string(),
        env: Vec::new(),
        script: Some(SCRIPT.to_vec()),
        max_retries: None,
        restartable: false,
        continuation: None,
        request_id: None,
    };
    let r = requests::handle(&mut h.engine, Request::Submit(req), h.uid).await;
    assert!(matches!(r, Response::Ok(_)), "{r:?}");
    // The last task's chain (after 500 others in the backlog) runs, is seen running.
    let jobs = h.fake().live_jobs();
    assert_eq!(jobs.len(), 501);
    let job = jobs[500].clone();
    h.fake().start(&job);
    h.cycle().await.unwrap();
    let c = h.chains().unwrap().iter().map(|c| c.id).max().unwrap();
    for j in &jobs[..500] {
        h.fake().end(j, Ending::Completed);
    }
    assert!(h.fake().requeue(&job, JobState::NodeFail));
    // One turn: the poll finds 501, the first 500 are judged; the requeue waits.
    h.cycle().await.unwrap();
    assert!(h.engine.has_backlog());
    cancel_failing_beside_a_cycle(&mut h, c, None).await;
}

/// While an array's cancel waits for its scancel, a task of it waiting in `pending_failed`
/// is not resolved (nothing changes; the resolver is told why), and the cancel records
/// both tasks cancelled.
#[tokio::test(flavor = "current_thread")]
async fn a_chain_being_cancelled_is_not_resolved_meanwhile() {
    let mut h = Harness::new(false).unwrap();
    h.submit(Sub::Array).await.unwrap();
    let jobs = h.fake().live_jobs();
    h.fake().end(&jobs[1], Ending::Failed(1));
    h.cycle().await.unwrap();
    let chains = h.chains().unwrap();
    let waiting = chains
        .iter()
        .find(|c| c.state == ChainState::PendingFailed)
        .expect("a task waits for a person")
        .id;
    let array = slurm_supervisor::slurm::jobid::base_job_id(&jobs[0]);
    let command = h.begin_scancel(&array).await;
    let count = h.store().decisions(waiting).unwrap().len();
    let r = Resolution {
        id: format!("c{waiting}"),
        action: ResolveAction::Retry,
        mem: None,
        time: None,
        partition: None,
        exclude: Vec::new(),
        reason: "meanwhile".into(),
        confidence: None,
        dry_run: false,
    };
    match requests::handle(&mut h.engine, Request::Classify(r), h.uid).await {
        Response::Error(e) => {
            assert_eq!(e.kind, ErrorKind::Unavailable, "{e:?}");
            assert!(e.message.contains("being cancelled"), "{e:?}");
        }
        other => panic!("resolved while being cancelled: {other:?}"),
    }
    assert_eq!(h.store().decisions(waiting).unwrap().len(), count);
    let landed = h.fly(command).await;
    let r = requests::finish(&mut h.engine.desk(), landed);
    assert!(matches!(r, Response::Ok(_)), "{r:?}");
    for c in h.chains().unwrap() {
        assert_eq!(c.state, ChainState::Cancelled, "c{}", c.id);
    }
}
