//! `[retry] in_place`: a retry requeues the ended job under its own id (scontrol
//! requeuehold, update, release) instead of a new sbatch; a refusal falls back to sbatch
//! with a record saying why; an interrupted requeue is finished by the next cycle. The
//! real engine and store against the in-process fake Slurm; the real-Slurm case is in
//! `real_slurm.rs`.

use slurm_supervisor::config::Config;
use slurm_supervisor::daemon::engine::Engine;
use slurm_supervisor::daemon::requests;
use slurm_supervisor::domain::model::{Action, ChainState, RecoveryClass};
use slurm_supervisor::protocol::{Request, Response, SubmitRequest};
use slurm_supervisor::slurm::fake::{Command, Ending, FakeSlurm};
use slurm_supervisor::slurm::types::JobState;
use slurm_supervisor::store::{Attempt, Chain, DecisionRecord, Store};

const SCRIPT: &[u8] = b"#!/bin/sh\n#SBATCH --job-name=inplace\ntrue\n";

struct Harness {
    engine: Engine<FakeSlurm>,
    work: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new(in_place: bool) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let text = format!(
            "state_dir = {:?}\npoll_interval = \"1s\"\n[retry]\nbackoff_initial = \"0s\"\nbackoff_max = \"0s\"\nbackoff_jitter = 0.0\nin_place = {in_place}\n",
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

    async fn submit(&mut self, argv: &[&str]) -> String {
        let req = SubmitRequest {
            argv: argv.iter().map(|s| s.to_string()).collect(),
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

    async fn cycle(&mut self) {
        self.engine.cycle().await.unwrap();
    }

    fn chain(&self) -> Chain {
        self.engine.store().chains(None).unwrap().remove(0)
    }

    fn attempts(&self) -> Vec<Attempt> {
        self.engine.store().attempts(self.chain().id).unwrap()
    }

    fn decisions(&self) -> Vec<DecisionRecord> {
        self.engine.store().decisions(self.chain().id).unwrap()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn an_oom_job_is_requeued_under_its_own_id_with_more_memory() {
    rt().block_on(async {
        let mut h = Harness::new(true);
        let job = h.submit(&["--mem=100M", "job.sh"]).await;
        h.cycle().await;
        assert!(h.fake().end(&job, Ending::OutOfMemory));
        h.cycle().await;
        // No sbatch beside the first; the same job is queued again, released, with more memory.
        assert_eq!(h.fake().sbatch_calls().len(), 1);
        assert_eq!(
            (
                h.fake().calls(Command::RequeueHold),
                h.fake().calls(Command::UpdateJob),
                h.fake().calls(Command::Release)
            ),
            (1, 1, 1)
        );
        let j = h.fake().job(&job).unwrap();
        assert_eq!((j.state, j.held), (JobState::Pending, false));
        assert!(j.req_mem_bytes >= 200 << 20, "{}", j.req_mem_bytes >> 20);
        let a = h.attempts();
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].slurm_job_id.as_deref(), Some(job.as_str()));
        assert!(a[1].in_place && !a[0].in_place);
        assert_eq!(a[1].first_run, 1);
        assert_eq!(h.chain().state, ChainState::Active);
        // It completes: the requeued (earlier) run is not taken for a requeue by Slurm.
        assert!(h.fake().end(&job, Ending::Completed));
        h.cycle().await;
        assert_eq!(h.chain().state, ChainState::Completed);
        let d = h.decisions();
        assert_eq!(d.len(), 1, "{d:#?}");
        assert_eq!(
            (d[0].class, d[0].action),
            (RecoveryClass::R1, Action::Resubmit)
        );
        assert_eq!(h.attempts()[1].slurm_state.as_deref(), Some("COMPLETED"));
    });
}

#[test]
fn a_refused_change_falls_back_to_sbatch_and_says_why() {
    rt().block_on(async {
        let mut h = Harness::new(true);
        h.fake()
            .refuse_update("MinMemoryNode=", "Access/permission denied for job");
        let job = h.submit(&["--mem=100M", "job.sh"]).await;
        h.cycle().await;
        assert!(h.fake().end(&job, Ending::OutOfMemory));
        h.cycle().await;
        // The held job was cancelled, not left held; a new job carries the retry.
        let j = h.fake().job(&job).unwrap();
        assert_eq!(j.state, JobState::Cancelled, "{j:?}");
        let calls = h.fake().sbatch_calls();
        assert_eq!(calls.len(), 2);
        assert!(
            calls[1].mem.as_deref().is_some_and(|m| m != "100M"),
            "{calls:?}"
        );
        let a = h.attempts();
        assert_eq!(a.len(), 2, "{a:#?}");
        assert!(!a[1].in_place);
        assert_ne!(a[1].slurm_job_id.as_deref(), Some(job.as_str()));
        let d = h.decisions();
        assert_eq!(d.len(), 2, "{d:#?}");
        assert_eq!(d[0].action, Action::Resubmit);
        assert_eq!(d[1].reason_code.as_deref(), Some("in_place_refused"));
        assert_eq!((d[1].class, d[1].action), (RecoveryClass::R1, Action::None));
        assert!(
            d[1].reason.contains("Access/permission denied"),
            "{}",
            d[1].reason
        );
        // The note is passed over where the chain's latest decision matters (an agent's
        // retry stays the agent's).
        assert_eq!(
            h.engine
                .store()
                .last_decision(h.chain().id)
                .unwrap()
                .map(|x| x.id),
            Some(d[0].id)
        );
        // The budget counted one resubmission, not two.
        assert_eq!(
            h.engine.store().resubmits_by_class(h.chain().id).unwrap(),
            vec![("oom".to_string(), 1)]
        );
        // The new job fails again: this time no requeue of the cancelled job is tried;
        // the next retry is in place on the new job.
        let job2 = a[1].slurm_job_id.clone().unwrap();
        assert!(h.fake().end(&job2, Ending::OutOfMemory));
        h.fake().refuse_update("Nothing=", "");
        h.cycle().await;
        let a = h.attempts();
        assert_eq!(a.len(), 3);
        assert_eq!(a[2].slurm_job_id.as_deref(), Some(job2.as_str()));
        assert!(a[2].in_place);
    });
}

#[test]
fn an_interrupted_requeue_is_finished_not_left_held() {
    rt().block_on(async {
        let mut h = Harness::new(true);
        let job = h.submit(&["--mem=100M", "job.sh"]).await;
        h.cycle().await;
        assert!(h.fake().end(&job, Ending::OutOfMemory));
        // Slurm stops answering right after requeuehold: the job sits held.
        h.fake().set_unavailable(Command::UpdateJob, true);
        h.cycle().await;
        assert!(h.fake().job(&job).unwrap().held);
        assert_eq!(h.attempts().len(), 2);
        assert_eq!(h.chain().state, ChainState::Ready);
        // Back: the next cycle finds it held, updates and releases it.
        h.fake().set_unavailable(Command::UpdateJob, false);
        h.cycle().await;
        let j = h.fake().job(&job).unwrap();
        assert_eq!((j.state, j.held), (JobState::Pending, false));
        assert!(j.req_mem_bytes >= 200 << 20);
        assert_eq!(h.fake().calls(Command::RequeueHold), 1);
        assert_eq!(h.chain().state, ChainState::Active);
        assert_eq!(h.fake().sbatch_calls().len(), 1);
        assert_eq!(h.decisions().len(), 1);
    });
}

#[test]
fn without_in_place_a_retry_is_a_new_job() {
    rt().block_on(async {
        let mut h = Harness::new(false);
        let job = h.submit(&["--mem=100M", "job.sh"]).await;
        h.cycle().await;
        assert!(h.fake().end(&job, Ending::OutOfMemory));
        h.cycle().await;
        assert_eq!(h.fake().sbatch_calls().len(), 2);
        assert_eq!(h.fake().calls(Command::RequeueHold), 0);
    });
}

#[test]
fn a_requeue_released_and_run_while_the_daemon_was_down_is_not_resubmitted() {
    rt().block_on(async {
        use slurm_supervisor::slurm::Slurm;
        let mut h = Harness::new(true);
        let job = h.submit(&["--mem=100M", "job.sh"]).await;
        h.cycle().await;
        assert!(h.fake().end(&job, Ending::OutOfMemory));
        // The release reaches Slurm but its answer is lost: the intent stays open.
        h.fake().set_unavailable(Command::Release, true);
        h.cycle().await;
        assert_eq!(h.chain().state, ChainState::Ready);
        h.fake().set_unavailable(Command::Release, false);
        h.fake()
            .release(std::slice::from_ref(&job), None)
            .await
            .unwrap();
        // It runs to its end and leaves squeue before the daemon looks again.
        assert!(h.fake().end(&job, Ending::Completed));
        h.cycle().await;
        h.cycle().await;
        assert_eq!(
            h.fake().sbatch_calls().len(),
            1,
            "never resubmitted beside it"
        );
        assert_eq!(h.chain().state, ChainState::Completed);
        assert_eq!(h.attempts().len(), 2);
    });
}
