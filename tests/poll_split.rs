//! The cycle cut in two (`cycle_to_poll`, the squeue, `cycle_from_poll`): what
//! happens on the loop between the question and the answer. The real engine and store
//! against the in-process fake Slurm.

use slurm_supervisor::config::Config;
use slurm_supervisor::daemon::engine::Engine;
use slurm_supervisor::daemon::requests;
use slurm_supervisor::domain::model::ChainState;
use slurm_supervisor::plumbing::clock::now;
use slurm_supervisor::protocol::{Request, Response, SubmitRequest};
use slurm_supervisor::slurm::fake::{Ending, FakeSlurm};
use slurm_supervisor::store::Store;

const SCRIPT: &[u8] = b"#!/bin/sh\n#SBATCH --job-name=split\ntrue\n";

struct Harness {
    engine: Engine<FakeSlurm>,
    work: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new(extra: &str) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let text = format!(
            "state_dir = {:?}\npoll_interval = \"1s\"\n{extra}",
            dir.path().join("state").display().to_string()
        );
        let config = Config::parse(&text, None).unwrap();
        let engine = Engine::new(config, Store::in_memory().unwrap(), FakeSlurm::new());
        Harness {
            engine,
            work,
            _dir: dir,
        }
    }

    fn fake(&self) -> &FakeSlurm {
        self.engine.slurm()
    }

    async fn submit(&mut self) -> String {
        let req = SubmitRequest {
            argv: vec!["job.sh".into()],
            cwd: self.work.display().to_string(),
            env: Vec::new(),
            script: Some(SCRIPT.to_vec()),
            max_retries: None,
            restartable: false,
            continuation: None,
            request_id: None,
        };
        let uid = nix::unistd::getuid().as_raw();
        match requests::handle(&mut self.engine, Request::Submit(req), uid).await {
            Response::Ok(_) => {}
            Response::Error(e) => panic!("submit: {e:?}"),
        }
        self.fake().live_jobs().last().cloned().expect("a job")
    }

    fn chains(&self) -> Vec<slurm_supervisor::store::Chain> {
        self.engine.store().chains(None).unwrap()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A retry launched while the cycle's squeue is out is not in its listing: the landing
/// leaves it for the next cycle (not missing, not ended).
#[test]
fn a_retry_launched_while_the_squeue_is_out_is_left_for_the_next_cycle() {
    rt().block_on(async {
        let mut h = Harness::new(
            "[retry]\nbackoff_initial = \"1h\"\nbackoff_max = \"1h\"\nbackoff_jitter = 0.0\n[slurm]\nlost_job_after = \"1s\"\n",
        );
        let a = h.submit().await;
        let b = h.submit().await;
        h.engine.cycle().await.unwrap();
        assert!(h.fake().end(&b, Ending::OutOfMemory));
        h.engine.cycle().await.unwrap();
        let chains = h.chains();
        assert_eq!(chains[1].state, ChainState::Ready, "{chains:?}");
        let ask = h.engine.cycle_to_poll().await.unwrap().expect("a question");
        let answer = ask.ask(h.engine.slurm()).await;
        // Meanwhile a request launches the due retry (as `nudge` or a resolution does).
        h.engine.launch_ready(now() + 7200).await.unwrap();
        let b2 = h.fake().live_jobs().last().cloned().unwrap();
        assert_ne!(b2, b);
        assert_ne!(b2, a);
        h.engine.cycle_from_poll(answer).await.unwrap();
        // Much later (past lost_job_after) cycles see it normally.
        let chains = h.chains();
        assert_eq!(chains[1].state, ChainState::Active, "{chains:?}");
        h.engine.cycle().await.unwrap();
        let chains = h.chains();
        assert_eq!(chains[1].state, ChainState::Active, "{chains:?}");
    });
}

/// One squeue a cycle, and that squeue beside the loop: a retry launched while the
/// cycle's squeue is out (a request's `launch_ready`) makes a rewiring wait. The landing
/// must not ask Slurm for the owners' pending jobs itself (a second controller query in
/// the cycle, run on the loop); between two whole cycles the next cycle's poll reads them
/// in its one query.
#[test]
fn the_landing_makes_no_second_squeue_for_a_retry_launched_meanwhile() {
    use slurm_supervisor::slurm::fake::Command;
    rt().block_on(async {
        let mut h = Harness::new(
            "[retry]\nbackoff_initial = \"1h\"\nbackoff_max = \"1h\"\nbackoff_jitter = 0.0\n",
        );
        let _a = h.submit().await;
        let b = h.submit().await;
        // The first cycle reads the owners' pending jobs (the waiters' report is due).
        h.engine.cycle().await.unwrap();
        assert!(h.fake().end(&b, Ending::OutOfMemory));
        h.engine.cycle().await.unwrap();
        assert_eq!(h.chains()[1].state, ChainState::Ready);
        let queries = |h: &Harness| {
            [Command::Squeue, Command::JobStates, Command::PendingOfUsers]
                .map(|c| h.fake().calls(c))
        };
        let ask = h.engine.cycle_to_poll().await.unwrap().expect("a question");
        let answer = ask.ask(h.engine.slurm()).await;
        // Meanwhile a request launches the due retry (`nudge`, a resolution: `after.launch`).
        h.engine.launch_ready(now() + 7200).await.unwrap();
        let before = queries(&h);
        h.engine.cycle_from_poll(answer).await.unwrap();
        assert_eq!(
            queries(&h),
            before,
            "the landing ran a squeue of its own [squeue, --only-job-state, pending of users]"
        );
    });
}
