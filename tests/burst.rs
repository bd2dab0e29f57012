//! A bad day costs what changed, not what the store holds: the Slurm commands a burst of
//! endings costs are counted (the contract), and every ending still gets its one record.
//! Timings are benchmarks (`benches/burst.rs`, docs/benchmarks.md), not asserted here.

use slurm_supervisor::config::Config;
use slurm_supervisor::daemon::engine::Engine;
use slurm_supervisor::daemon::requests;
use slurm_supervisor::domain::model::ChainState;
use slurm_supervisor::domain::policy::{self, Context, Event};
use slurm_supervisor::protocol::{Request, Response, SubmitRequest};
use slurm_supervisor::slurm::fake::{Command, Ending, FakeSlurm};
use slurm_supervisor::store::{Batch, Store};

const CONFIG: &str = r#"
poll_interval = "1s"

[retry]
backoff_initial = "1h"
backoff_max = "1h"

[breaker]
threshold = 0

[[rules]]
name = "config"
kind = "permanent"
exit_codes = [78]
"#;

struct Burst {
    engine: Engine<FakeSlurm>,
    jobs: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Burst {
    /// `n` supervised jobs, all running, in `partition`.
    async fn new(n: usize, partition: &str) -> Burst {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("state_dir = {:?}\n{CONFIG}", dir.path().join("state"));
        let config = Config::parse(&text, None).unwrap();
        let fake = FakeSlurm::new();
        if partition != "debug" {
            fake.set_unlisted_partition(partition);
        }
        let mut engine = Engine::new(config, Store::in_memory().unwrap(), fake);
        let uid = nix::unistd::getuid().as_raw();
        let mut jobs = Vec::with_capacity(n);
        for _ in 0..n {
            let req = SubmitRequest {
                argv: vec![
                    format!("--partition={partition}"),
                    "--mem=100M".into(),
                    "--time=10".into(),
                    "--wrap=true".into(),
                ],
                cwd: dir.path().display().to_string(),
                env: Vec::new(),
                script: None,
                max_retries: None,
                restartable: false,
                continuation: None,
                request_id: None,
            };
            match requests::handle(&mut engine, Request::Submit(req), uid).await {
                Response::Ok(v) => jobs.push(v["job_id"].as_str().unwrap().to_string()),
                Response::Error(e) => panic!("submit: {e:?}"),
            }
        }
        for j in &jobs {
            assert!(engine.slurm().start(j));
        }
        engine.cycle().await.unwrap();
        Burst {
            engine,
            jobs,
            _dir: dir,
        }
    }

    /// One more supervised job, submitted (not started).
    async fn submit_one(&mut self) -> String {
        let req = SubmitRequest {
            argv: vec!["--mem=100M".into(), "--wrap=true".into()],
            cwd: self._dir.path().display().to_string(),
            env: Vec::new(),
            script: None,
            max_retries: None,
            restartable: false,
            continuation: None,
            request_id: None,
        };
        let uid = nix::unistd::getuid().as_raw();
        match requests::handle(&mut self.engine, Request::Submit(req), uid).await {
            Response::Ok(v) => v["job_id"].as_str().unwrap().to_string(),
            Response::Error(e) => panic!("submit: {e:?}"),
        }
    }

    fn calls(&self, c: Command) -> u32 {
        self.engine.slurm().calls(c)
    }

    /// Turns of the loop until the burst is judged; how many it took.
    async fn settle(&mut self) -> usize {
        let mut turns = 0;
        loop {
            self.engine.cycle().await.unwrap();
            turns += 1;
            if !self.engine.has_backlog() {
                return turns;
            }
            assert!(turns < 100, "the backlog never drains");
        }
    }

    fn in_state(&self, s: ChainState) -> usize {
        self.engine.store().chains_in_state(s).unwrap().len()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_burst_of_endings_costs_one_squeue_and_one_sacct() {
    let mut b = Burst::new(1_200, "debug").await;
    let (squeue, states, sacct, sinfo) = (
        b.calls(Command::Squeue),
        b.calls(Command::JobStates),
        b.calls(Command::Sacct),
        b.calls(Command::PartitionLimits),
    );
    for j in &b.jobs[..1_000] {
        assert!(b.engine.slurm().end(j, Ending::Failed(78)));
    }
    let turns = b.settle().await;
    // One poll found them all; the rest of the burst was judged without asking Slurm.
    // Every job's owner was seen in the first cycle, so the poll's one squeue asked for
    // the states alone (`--only-job-state`).
    assert_eq!(b.calls(Command::JobStates) - states, 1);
    assert_eq!(b.calls(Command::Squeue) - squeue, 0);
    assert_eq!(b.calls(Command::Sacct) - sacct, 1);
    assert!(b.calls(Command::PartitionLimits) - sinfo <= 1);
    assert!(turns >= 2, "judged in batches, the loop free in between");
    assert_eq!(b.in_state(ChainState::Failed), 1_000);
    assert_eq!(b.in_state(ChainState::Active), 200);
    // Still exactly one record per ending.
    for c in b
        .engine
        .store()
        .chains_in_state(ChainState::Failed)
        .unwrap()
    {
        let ds = b.engine.store().decisions(c.id).unwrap();
        assert_eq!(ds.len(), 1, "c{}", c.id);
        assert_eq!(ds[0].reason_code.as_deref(), Some("permanent_not_retried"));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_partition_sinfo_does_not_list_is_asked_about_once() {
    let mut b = Burst::new(100, "hidden").await;
    let sinfo = b.calls(Command::PartitionLimits);
    for j in &b.jobs {
        assert!(b.engine.slurm().end(j, Ending::Timeout));
    }
    b.settle().await;
    assert_eq!(b.in_state(ChainState::Ready), 100, "every timeout retried");
    assert_eq!(b.calls(Command::PartitionLimits) - sinfo, 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_chain_cancelled_between_two_batches_keeps_its_cancel() {
    let mut b = Burst::new(1_200, "debug").await;
    for j in &b.jobs[..1_000] {
        assert!(b.engine.slurm().end(j, Ending::Failed(78)));
    }
    b.engine.cycle().await.unwrap();
    assert!(
        b.engine.has_backlog(),
        "the second half waits for the next turn"
    );
    // Between two turns the loop answers requests: one of the chains whose ending still
    // waits to be judged is cancelled (as `cancel` records it once its scancel went
    // through; Slurm refuses to scancel a job that has ended, so here it is recorded
    // directly).
    let last = b.jobs[999].clone();
    let chain = b.engine.store().resolve(&last).unwrap()[0];
    let c = b.engine.store().chain(chain).unwrap().unwrap();
    let event = Event::Cancelled {
        job: Some(&last),
        actor: "user:test",
    };
    let tr = policy::transition(&c, event, b.engine.config(), &Context::at(1)).unwrap();
    let done = b
        .engine
        .store_mut()
        .apply(&Batch::each(vec![(chain, tr)]), 1)
        .unwrap();
    assert_eq!(done.chains, vec![chain]);
    b.settle().await;
    let store = b.engine.store();
    assert_eq!(
        store.chain(chain).unwrap().unwrap().state,
        ChainState::Cancelled
    );
    let ds = store.decisions(chain).unwrap();
    assert_eq!(ds.len(), 1, "only the cancel: {ds:?}");
    assert_eq!(ds[0].reason_code.as_deref(), Some("cancelled_by_user"));
    assert_eq!(b.in_state(ChainState::Failed), 999);
}

/// A burst of chain endings leaves thousands of notifications with nothing to deliver
/// (no `--mail-type`, no `[notify] command`): they are marked a bounded turn at a time,
/// the loop told there is more, not all in one turn that holds every request up.
#[tokio::test(flavor = "current_thread")]
async fn a_burst_of_silent_notifications_is_marked_over_several_turns() {
    use slurm_supervisor::daemon::notifications::Notifier;
    let mut b = Burst::new(3_000, "debug").await;
    for j in &b.jobs {
        assert!(b.engine.slurm().end(j, Ending::Completed));
    }
    b.settle().await;
    assert_eq!(b.in_state(ChainState::Completed), 3_000);
    let due = |b: &Burst| {
        b.engine
            .store()
            .due_notifications(i64::MAX, 10_000)
            .unwrap()
            .len()
    };
    assert_eq!(due(&b), 3_000);
    let mut notifier = Notifier::default();
    notifier.tick(b.engine.post());
    assert!(
        notifier.has_more() && due(&b) > 0,
        "one turn did not take the whole backlog ({} left)",
        due(&b)
    );
    let mut turns = 1;
    while notifier.has_more() {
        notifier.tick(b.engine.post());
        turns += 1;
        assert!(turns < 10_000);
    }
    assert!(!notifier.busy(), "nothing to deliver");
    assert_eq!(due(&b), 0, "all marked in {turns} turns");
}

/// A chain a cancel holds between two batches (its scancel runs beside the loop) is the
/// cancel's to record: its ending waiting in the backlog is not judged meanwhile. If the
/// scancel then fails, nothing was lost: the next poll finds the ending again.
#[tokio::test(flavor = "current_thread")]
async fn a_chain_held_between_two_batches_is_judged_only_after_its_release() {
    let mut b = Burst::new(1_200, "debug").await;
    for j in &b.jobs[..1_000] {
        assert!(b.engine.slurm().end(j, Ending::Failed(78)));
    }
    b.engine.cycle().await.unwrap();
    assert!(b.engine.has_backlog());
    let last = b.jobs[999].clone();
    let chain = b.engine.store().resolve(&last).unwrap()[0];
    b.engine.desk().holds.hold(&[chain]);
    b.settle().await;
    assert_eq!(
        b.engine.store().chain(chain).unwrap().unwrap().state,
        ChainState::Active,
        "held: its ending waits for the cancel"
    );
    assert!(b.engine.store().decisions(chain).unwrap().is_empty());
    assert_eq!(b.in_state(ChainState::Failed), 999);
    // The cancel's scancel failed: the chain is the cycle's again.
    b.engine.desk().holds.release(&[chain]);
    b.settle().await;
    let ds = b.engine.store().decisions(chain).unwrap();
    assert_eq!(ds.len(), 1, "{ds:?}");
    assert_eq!(ds[0].reason_code.as_deref(), Some("permanent_not_retried"));
    assert_eq!(b.in_state(ChainState::Failed), 1_000);
}

/// The poll's one controller query a cycle: the full listing (each job with its owner)
/// while a live job's owner has not been seen, the states alone after; with a Slurm
/// whose squeue has no `--only-job-state` (22.05), the full listing every cycle.
#[tokio::test(flavor = "current_thread")]
async fn the_poll_asks_for_states_alone_once_every_owner_was_seen() {
    for only_state in [true, false] {
        let mut b = Burst::new(20, "debug").await;
        b.engine.slurm().set_only_job_state(only_state);
        let calls = |b: &Burst| (b.calls(Command::Squeue), b.calls(Command::JobStates));
        let (squeue, states) = calls(&b);
        for _ in 0..3 {
            b.engine.cycle().await.unwrap();
        }
        let (q, s) = calls(&b);
        // Owners seen: the states alone; on 22.05, the full listing every cycle.
        let want = if only_state { (0, 3) } else { (3, 0) };
        assert_eq!((q - squeue, s - states), want, "only_state {only_state}");
        // A new job (its owner not seen yet) brings the full listing back for one cycle.
        let job = b.submit_one().await;
        assert!(b.engine.slurm().start(&job));
        let (squeue, states) = calls(&b);
        for _ in 0..2 {
            b.engine.cycle().await.unwrap();
        }
        let (q, s) = calls(&b);
        // One full listing, then states; on 22.05, the full listing twice.
        let want = if only_state { (1, 1) } else { (2, 0) };
        assert_eq!((q - squeue, s - states), want, "only_state {only_state}");
        assert_eq!(b.in_state(ChainState::Active), 21);
    }
}

/// A job Slurm shows owned by someone else than its chain's owner is never seen as the
/// chain's: the poll keeps asking for the full listing (each job's owner) while it is
/// live, never the states alone, so nothing of another user's job is taken for the chain.
#[tokio::test(flavor = "current_thread")]
async fn a_job_shown_as_another_users_keeps_the_full_listing() {
    let mut b = Burst::new(5, "debug").await;
    let uid = nix::unistd::getuid().as_raw();
    // Before its first poll: the chain's job is someone else's in Slurm.
    let job = b.submit_one().await;
    assert!(b.engine.slurm().start(&job));
    assert!(b.engine.slurm().set_owner(&job, uid + 1));
    let (squeue, states) = (b.calls(Command::Squeue), b.calls(Command::JobStates));
    for _ in 0..3 {
        b.engine.cycle().await.unwrap();
    }
    assert_eq!(
        (
            b.calls(Command::Squeue) - squeue,
            b.calls(Command::JobStates) - states
        ),
        (3, 0)
    );
    // Its ending is not the chain's either.
    assert!(b.engine.slurm().end(&job, Ending::Failed(78)));
    b.engine.cycle().await.unwrap();
    let chain = b.engine.store().resolve(&job).unwrap()[0];
    assert!(b.engine.store().decisions(chain).unwrap().is_empty());
}
