//! Pipelines survive retries, with the in-process fake Slurm (the same flows run against
//! the real Slurm in tests/real_slurm.rs): a job waiting on a retried chain is rewired to
//! the new attempt, afterany/afternotok wait for the chain's final outcome, and a job
//! Slurm cancelled for its dependency is brought back. Every change is a record, and
//! the Slurm commands it costs are counted.

use slurm_supervisor::config::Config;
use slurm_supervisor::daemon::engine::Engine;
use slurm_supervisor::daemon::requests;
use slurm_supervisor::domain::model::{Action, ChainState, RecoveryClass};
use slurm_supervisor::protocol::{Request, Response, SubmitRequest};
use slurm_supervisor::slurm::fake::{Command, Ending, FakeSlurm};
use slurm_supervisor::slurm::{RunAs, SbatchRequest, Slurm};
use slurm_supervisor::store::Store;
use std::time::Duration;

const CONFIG: &str = r#"
poll_interval = "1s"

[retry]
backoff_initial = "0s"
backoff_jitter = 0.0

[[rules]]
name = "config"
kind = "permanent"
exit_codes = [78]
"#;

struct Pipe {
    engine: Engine<FakeSlurm>,
    dir: tempfile::TempDir,
    uid: u32,
}

impl Pipe {
    fn new() -> Pipe {
        Pipe::with_retry("")
    }

    /// With more `[retry]` settings.
    fn with_retry(retry: &str) -> Pipe {
        let dir = tempfile::tempdir().unwrap();
        let config = CONFIG.replace("[retry]\n", &format!("[retry]\n{retry}\n"));
        let text = format!("state_dir = {:?}\n{config}", dir.path().join("state"));
        let config = Config::parse(&text, None).unwrap();
        Pipe {
            engine: Engine::new(config, Store::in_memory().unwrap(), FakeSlurm::new()),
            dir,
            uid: nix::unistd::getuid().as_raw(),
        }
    }

    async fn try_submit(&mut self, args: &[&str]) -> Result<String, String> {
        self.try_submit_as(args, None).await
    }

    /// A submission that continues from its checkpoints (docs/continuation.md).
    async fn submit_continuing(&mut self, args: &[&str]) -> String {
        let c = slurm_supervisor::domain::continuation::Continuation::default();
        self.try_submit_as(args, Some(c)).await.unwrap()
    }

    async fn try_submit_as(
        &mut self,
        args: &[&str],
        continuation: Option<slurm_supervisor::domain::continuation::Continuation>,
    ) -> Result<String, String> {
        let mut argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        argv.push("--wrap=true".into());
        let req = SubmitRequest {
            argv,
            cwd: self.dir.path().display().to_string(),
            env: Vec::new(),
            script: None,
            max_retries: None,
            restartable: false,
            continuation,
            request_id: None,
        };
        match requests::handle(&mut self.engine, Request::Submit(req), self.uid).await {
            Response::Ok(v) => Ok(v["job_id"].as_str().unwrap().to_string()),
            Response::Error(e) => Err(e.message),
        }
    }

    async fn submit(&mut self, args: &[&str]) -> String {
        self.try_submit(args).await.unwrap()
    }

    /// A job submitted with plain sbatch, not through the supervisor.
    async fn plain(&self, args: &[&str]) -> String {
        let mut argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        argv.extend(["--parsable".into(), "--wrap=true".into()]);
        self.engine
            .slurm()
            .sbatch(&SbatchRequest {
                argv,
                cwd: self.dir.path().to_path_buf(),
                env: Vec::new(),
                stdin: None,
                run_as: None,
                held: false,
            })
            .await
            .unwrap()
    }

    fn chain_of(&self, job: &str) -> i64 {
        self.engine.store().resolve(job).unwrap()[0]
    }

    fn state(&self, chain: i64) -> ChainState {
        self.engine.store().chain(chain).unwrap().unwrap().state
    }

    /// The chain's current job.
    fn job(&self, chain: i64) -> String {
        let a = self.engine.store().attempts(chain).unwrap();
        a.iter().rev().find_map(|a| a.slurm_job_id.clone()).unwrap()
    }

    fn codes(&self, chain: i64) -> Vec<String> {
        self.engine
            .store()
            .decisions(chain)
            .unwrap()
            .into_iter()
            .filter_map(|d| d.reason_code)
            .collect()
    }

    /// The kinds of the chain's notifications waiting to be delivered.
    fn notified(&self, chain: i64) -> Vec<String> {
        self.engine
            .store()
            .due_notifications(i64::MAX, 1000)
            .unwrap()
            .into_iter()
            .filter(|n| n.chain_id == chain)
            .map(|n| n.kind)
            .collect()
    }

    fn dependency(&self, job: &str) -> String {
        self.engine.slurm().job(job).unwrap().dependency
    }

    async fn cycle(&mut self) {
        self.engine.cycle().await.unwrap();
    }
}

/// Whatever a test did (rewirings, holds, releases, cancels, retries), each user's
/// totals are what the rows say (issue 32).
impl Drop for Pipe {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let t = self.engine.store().recount_user_totals().unwrap();
            assert_eq!(t.kept, t.counted, "the users' totals differ from the rows");
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn waiting_jobs_follow_a_retried_chain_to_its_new_attempt() {
    let mut p = Pipe::new();
    let up = p.submit(&["--mem=100M"]).await;
    let c_up = p.chain_of(&up);
    let down = p.submit(&[&format!("--dependency=afterok:{up}")]).await;
    let c_down = p.chain_of(&down);
    // A chain id names its latest job; a plain sbatch job waits on the attempt itself.
    let by_chain = p
        .submit(&[&format!("--dependency=afterok:c{c_up},singleton")])
        .await;
    assert_eq!(p.dependency(&by_chain), format!("afterok:{up},singleton"));
    let plain = p.plain(&[&format!("--dependency=afterok:{up}")]).await;
    // One squeue of the owners' pending jobs in the first cycle (then every ten poll
    // intervals, and in a cycle after a retry), shared by the rewiring and the report of
    // plain afterany/afternotok jobs.
    let before = p.engine.slurm().calls(Command::PendingOfUsers);
    p.cycle().await;
    assert_eq!(p.engine.slurm().calls(Command::PendingOfUsers), before + 1);
    assert_eq!(
        p.engine.slurm().calls(Command::SetDependency),
        0,
        "no retry, nothing rewired"
    );

    assert!(p.engine.slurm().end(&up, Ending::OutOfMemory));
    p.cycle().await; // judged: ready, resubmitted at once (no backoff here)
    let up2 = p.job(c_up);
    assert_ne!(up2, up, "the OOM was retried");
    let before = p.engine.slurm().calls(Command::PendingOfUsers);
    p.cycle().await; // the waiting jobs are rewired to the new attempt
    for j in [&down, &plain] {
        assert_eq!(p.dependency(j), format!("afterok:{up2}"), "{j}");
    }
    assert_eq!(p.dependency(&by_chain), format!("afterok:{up2},singleton"));
    assert_eq!(p.engine.slurm().calls(Command::PendingOfUsers), before + 1);
    assert_eq!(p.engine.slurm().calls(Command::SetDependency), 3);
    // Recorded on the waiting chain, and for the plain job on the upstream chain.
    assert!(
        p.codes(c_down).contains(&"rewired".to_string()),
        "{:?}",
        p.codes(c_down)
    );
    let d = p.engine.store().decisions(c_down).unwrap();
    let rewired = d.iter().find(|d| d.action == Action::Rewire).unwrap();
    assert_eq!(rewired.inputs["rewired"][0][0], format!("c{c_up}"));
    assert!(p.codes(c_up).contains(&"plain_job_rewired".to_string()));
    // Once is enough: the next cycle asks nothing.
    p.cycle().await;
    assert_eq!(p.engine.slurm().calls(Command::PendingOfUsers), before + 1);
    assert_eq!(p.engine.slurm().calls(Command::SetDependency), 3);
    // status shows the edges both ways.
    let status = p.engine.store().dependents(c_up).unwrap();
    assert!(status.contains(&c_down), "{status:?}");
    assert_eq!(
        p.engine
            .store()
            .depends_on(
                p.engine
                    .store()
                    .chain(c_down)
                    .unwrap()
                    .unwrap()
                    .submission_id
            )
            .unwrap(),
        vec![c_up]
    );
}

#[tokio::test(flavor = "current_thread")]
async fn waiting_jobs_follow_a_continued_chain_and_wait_for_its_final_success() {
    let mut p = Pipe::new();
    let mut config = p.engine.config().clone();
    config.continuation.min_attempt = slurm_supervisor::config::Dur(Duration::ZERO);
    p.engine.set_config(config);
    let up = p.submit_continuing(&["--time=1"]).await;
    let c_up = p.chain_of(&up);
    let ok = p.submit(&[&format!("--dependency=afterok:{up}")]).await;
    let any = p.submit(&[&format!("--dependency=afterany:c{c_up}")]).await;
    let c_ok = p.chain_of(&ok);
    p.cycle().await;
    // The time limit: continued, not failed; the waiting jobs follow the new attempt.
    assert!(p.engine.slurm().end(&up, Ending::Timeout));
    p.cycle().await;
    assert_eq!(p.codes(c_up), vec!["continued"]);
    let up2 = p.job(c_up);
    assert_ne!(up2, up);
    p.cycle().await;
    assert_eq!(p.dependency(&ok), format!("afterok:{up2}"));
    assert!(p.codes(c_ok).contains(&"rewired".to_string()));
    // afterany waits for the chain's final outcome, across continuations.
    assert!(
        p.engine.slurm().job(&any).unwrap().held,
        "held while continued"
    );
    assert!(p.engine.slurm().end(&up2, Ending::Completed));
    p.cycle().await;
    p.cycle().await;
    assert_eq!(p.state(c_up), ChainState::Completed);
    assert!(
        !p.engine.slurm().job(&any).unwrap().held,
        "released at the end"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn afterany_and_afternotok_wait_for_the_final_outcome() {
    let mut p = Pipe::new();
    let up = p.submit(&["--mem=100M"]).await;
    let c_up = p.chain_of(&up);
    let any = p.submit(&[&format!("--dependency=afterany:{up}")]).await;
    let notok = p
        .submit(&[&format!("--dependency=afternotok:c{c_up}")])
        .await;
    let (c_any, c_notok) = (p.chain_of(&any), p.chain_of(&notok));
    // Held, and not Slurm's to wait on: the first attempt's failure must not start them.
    for j in [&any, &notok] {
        let fj = p.engine.slurm().job(j).unwrap();
        assert!(fj.held, "{j} is held");
        assert_eq!(fj.dependency, "", "{j}");
        assert!(!p.engine.slurm().start(j), "a held job does not start");
    }
    assert!(p.engine.slurm().end(&up, Ending::OutOfMemory));
    p.cycle().await;
    p.cycle().await;
    assert!(
        p.engine.slurm().job(&any).unwrap().held,
        "still held while retried"
    );
    assert_eq!(p.engine.slurm().calls(Command::Release), 0);
    // The retry completes: afterany holds, afternotok never can.
    let up2 = p.job(c_up);
    assert!(p.engine.slurm().end(&up2, Ending::Completed));
    p.cycle().await;
    assert_eq!(p.state(c_up), ChainState::Completed);
    p.cycle().await;
    assert!(!p.engine.slurm().job(&any).unwrap().held, "released");
    assert!(p.codes(c_any).contains(&"released".to_string()));
    assert_eq!(p.state(c_any), ChainState::Active);
    assert_eq!(p.state(c_notok), ChainState::Cancelled);
    assert!(p
        .codes(c_notok)
        .contains(&"dependency_never_satisfied".to_string()));
    assert_eq!(
        p.engine.slurm().job(&notok).unwrap().state,
        slurm_supervisor::slurm::types::JobState::Cancelled
    );
    // Decided once.
    let releases = p.engine.slurm().calls(Command::Release);
    p.cycle().await;
    assert_eq!(p.engine.slurm().calls(Command::Release), releases);
    // Against a chain that completed already: afternotok can never hold.
    let e = p
        .try_submit(&[&format!("--dependency=afternotok:c{c_up}")])
        .await
        .unwrap_err();
    assert!(e.contains("can never be satisfied"), "{e}");
    let e = p
        .try_submit(&["--dependency=afterok:c999"])
        .await
        .unwrap_err();
    assert!(e.contains("names no chain of yours"), "{e}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_fallback_runs_when_the_chain_fails_for_good() {
    let mut p = Pipe::new();
    let up = p.submit(&[]).await;
    let c_up = p.chain_of(&up);
    let fallback = p.submit(&[&format!("--dependency=afternotok:{up}")]).await;
    let c_fb = p.chain_of(&fallback);
    // A permanent failure: the chain fails for good at once.
    assert!(p.engine.slurm().end(&up, Ending::Failed(78)));
    p.cycle().await;
    assert_eq!(p.state(c_up), ChainState::Failed);
    p.cycle().await;
    assert!(
        !p.engine.slurm().job(&fallback).unwrap().held,
        "the fallback is released"
    );
    assert!(p.codes(c_fb).contains(&"released".to_string()));
}

/// An upstream that ran out of memory, and its waiting job that Slurm cancelled at once
/// for it (kill_invalid_depend): (upstream, its chain, waiting job, its chain).
async fn killed_for_dependency(p: &mut Pipe) -> (String, i64, String, i64) {
    let up = p.submit(&["--mem=100M"]).await;
    let c_up = p.chain_of(&up);
    let down = p
        .submit(&[
            "--kill-on-invalid-dep=yes",
            &format!("--dependency=afterok:{up}"),
        ])
        .await;
    let c_down = p.chain_of(&down);
    assert!(p.engine.slurm().end(&up, Ending::OutOfMemory));
    assert!(p.engine.slurm().end(&down, Ending::CancelledForDependency));
    (up, c_up, down, c_down)
}

#[tokio::test(flavor = "current_thread")]
async fn a_job_slurm_cancelled_for_its_dependency_is_brought_back() {
    let mut p = Pipe::new();
    let (up, c_up, down, c_down) = killed_for_dependency(&mut p).await;
    p.cycle().await;
    assert!(
        p.codes(c_down)
            .contains(&"killed_for_dependency".to_string()),
        "{:?}",
        p.codes(c_down)
    );
    let up2 = p.job(c_up);
    assert_ne!(up2, up);
    p.cycle().await;
    let down2 = p.job(c_down);
    assert_ne!(down2, down, "resubmitted");
    assert_eq!(p.dependency(&down2), format!("afterok:{up2}"));
    assert_eq!(p.state(c_down), ChainState::Active);
}

/// Regression: with `in_place`, the job Slurm cancelled for its dependency was requeued in
/// place, kept the dependency Slurm had marked failed, was cancelled again at once and
/// recorded as a user's cancel. It is resubmitted instead.
#[tokio::test(flavor = "current_thread")]
async fn in_place_a_job_slurm_cancelled_for_its_dependency_is_resubmitted() {
    let mut p = Pipe::with_retry("in_place = true");
    let (up, c_up, down, c_down) = killed_for_dependency(&mut p).await;
    p.cycle().await;
    p.cycle().await;
    assert_eq!(p.job(c_up), up, "the upstream is requeued in place");
    let down2 = p.job(c_down);
    assert_ne!(down2, down, "resubmitted, not requeued");
    assert_eq!(p.dependency(&down2), format!("afterok:{up}"));
    assert_eq!(p.state(c_down), ChainState::Active);
}

#[tokio::test(flavor = "current_thread")]
async fn aftercorr_follows_only_the_retried_task() {
    let mut p = Pipe::new();
    let up = p.submit(&["--mem=100M", "--array=1-3"]).await;
    let down = p
        .submit(&["--array=1-3", &format!("--dependency=aftercorr:{up}")])
        .await;
    let c_down2 = p.chain_of(&format!("{down}_2"));
    assert!(p.engine.slurm().end(&format!("{up}_1"), Ending::Completed));
    assert!(p
        .engine
        .slurm()
        .end(&format!("{up}_2"), Ending::OutOfMemory));
    assert!(p.engine.slurm().end(&format!("{up}_3"), Ending::Completed));
    p.cycle().await;
    let new2 = p.job(p.chain_of(&format!("{up}_2")));
    assert!(
        !new2.starts_with(&format!("{up}_")),
        "task 2 retried: {new2}"
    );
    p.cycle().await;
    assert_eq!(
        p.dependency(&format!("{down}_2")),
        format!("afterok:{new2}")
    );
    for t in [1, 3] {
        assert_eq!(
            p.dependency(&format!("{down}_{t}")),
            format!("aftercorr:{up}"),
            "task {t}"
        );
    }
    assert!(p.codes(c_down2).contains(&"rewired".to_string()));
}

// What a review found; each of these failed before its fix.

fn held(p: &Pipe, j: &str) -> bool {
    p.engine.slurm().job(j).unwrap().held
}

#[tokio::test(flavor = "current_thread")]
async fn afternotok_on_an_array_holds_when_any_task_failed() {
    let mut p = Pipe::new();
    let up = p.submit(&["--array=1-2"]).await;
    let fb = p.submit(&[&format!("--dependency=afternotok:{up}")]).await;
    let c_fb = p.chain_of(&fb);
    assert!(p.engine.slurm().end(&format!("{up}_1"), Ending::Completed));
    p.cycle().await;
    // Task 2 may still fail: not refused, still held.
    let late = p.submit(&[&format!("--dependency=afternotok:{up}")]).await;
    p.cycle().await;
    assert_eq!(p.state(c_fb), ChainState::Active);
    assert!(held(&p, &fb));
    assert!(p.engine.slurm().end(&format!("{up}_2"), Ending::Failed(78)));
    p.cycle().await;
    p.cycle().await;
    for j in [&fb, &late] {
        assert!(
            !held(&p, j),
            "{j}: Slurm's afternotok:<array> holds, task 2 failed"
        );
    }
    assert!(p.codes(c_fb).contains(&"released".to_string()));
}

#[tokio::test(flavor = "current_thread")]
async fn a_gate_is_not_decided_while_the_first_sbatch_is_unsettled() {
    let mut p = Pipe::new();
    let up = p.submit(&["--mem=100M"]).await;
    let c_up = p.chain_of(&up);
    let req = SubmitRequest {
        argv: vec![
            format!("--dependency=afternotok:c{c_up}"),
            "--wrap=true".to_string(),
        ],
        cwd: p.dir.path().display().to_string(),
        env: Vec::new(),
        script: None,
        max_retries: None,
        restartable: false,
        continuation: None,
        request_id: None,
    };
    let command = match requests::begin(
        &mut p.engine.desk(),
        Request::Submit(req),
        p.uid,
        tracing::Span::none(),
    )
    .await
    {
        requests::Plan::Fly(c) => c,
        other => panic!("{other:?}"),
    };
    let c_down = p
        .engine
        .store()
        .open_chains_of_submission(command.submission().unwrap().id)
        .unwrap()[0]
        .0;
    // The upstream completes while the downstream's sbatch is in flight.
    assert!(p.engine.slurm().end(&up, Ending::Completed));
    p.cycle().await;
    p.cycle().await;
    assert_eq!(p.state(c_down), ChainState::Active, "not decided yet");
    let landed = requests::fly(&p.engine.runner(), command).await;
    let job = match requests::finish(&mut p.engine.desk(), landed) {
        Response::Ok(v) => v["job_id"].as_str().unwrap().to_string(),
        Response::Error(e) => panic!("{e:?}"),
    };
    p.cycle().await;
    assert_eq!(p.state(c_down), ChainState::Cancelled);
    assert_eq!(
        p.engine.slurm().job(&job).unwrap().state,
        slurm_supervisor::slurm::types::JobState::Cancelled
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_job_cancelled_for_another_reason_is_not_brought_back() {
    let mut p = Pipe::new();
    let up = p.submit(&["--mem=100M"]).await;
    let down = p
        .submit(&[
            "--kill-on-invalid-dep=yes",
            &format!("--dependency=afterok:{up}"),
        ])
        .await;
    let c_down = p.chain_of(&down);
    // The upstream is fine (running); Slurm cancels the waiting job for something else
    // it waits on (a plain job that failed).
    assert!(p.engine.slurm().start(&up));
    assert!(p.engine.slurm().end(&down, Ending::CancelledForDependency));
    p.cycle().await;
    p.cycle().await;
    assert_eq!(p.state(c_down), ChainState::Cancelled);
    assert_eq!(p.engine.store().attempts(c_down).unwrap().len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_fallback_retried_after_its_upstream_was_recovered_is_held_again() {
    let mut p = Pipe::new();
    let up = p.submit(&[]).await;
    let c_up = p.chain_of(&up);
    let fb = p
        .submit(&["--mem=100M", &format!("--dependency=afternotok:c{c_up}")])
        .await;
    let c_fb = p.chain_of(&fb);
    assert!(p.engine.slurm().end(&up, Ending::Failed(78)));
    p.cycle().await;
    p.cycle().await;
    assert!(!held(&p, &fb), "released");
    // A person recovers the upstream; the fallback runs out of memory and is retried.
    let r = Request::Recover(slurm_supervisor::protocol::RecoverRequest {
        id: format!("c{c_up}"),
        mem: None,
        time: None,
        reason: None,
        dry_run: false,
    });
    assert!(matches!(
        requests::handle(&mut p.engine, r, p.uid).await,
        Response::Ok(_)
    ));
    p.cycle().await;
    assert!(p.engine.slurm().end(&fb, Ending::OutOfMemory));
    p.cycle().await;
    p.cycle().await;
    let fb2 = p.job(c_fb);
    assert_ne!(fb2, fb);
    assert!(held(&p, &fb2), "the upstream is open again: held");
    // It fails for good again: the retried fallback is released.
    let up2 = p.job(c_up);
    assert!(p.engine.slurm().end(&up2, Ending::Failed(78)));
    for _ in 0..3 {
        p.cycle().await;
    }
    assert!(!held(&p, &fb2));
}

#[tokio::test(flavor = "current_thread")]
async fn a_big_supervised_array_can_be_waited_on() {
    let mut p = Pipe::new();
    let up = p.submit(&["--array=0-1000"]).await;
    let down = p.submit(&[&format!("--dependency=afterok:{up}")]).await;
    assert_eq!(p.dependency(&down), format!("afterok:{up}"));
}

#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_held_job_gets_one_record() {
    let mut p = Pipe::new();
    let up = p.submit(&[]).await;
    let c_up = p.chain_of(&up);
    let notok = p
        .submit(&[&format!("--dependency=afternotok:c{c_up}")])
        .await;
    let c = p.chain_of(&notok);
    assert!(p.engine.slurm().end(&up, Ending::Completed));
    for _ in 0..3 {
        p.cycle().await;
    }
    assert_eq!(p.codes(c), vec!["dependency_never_satisfied".to_string()]);
    // Its submitter is told, once: the supervisor cancelled it (Slurm's INVALID_DEPEND).
    assert_eq!(
        p.notified(c),
        vec!["dependency_never_satisfied".to_string()]
    );
    assert_eq!(p.notified(c_up), vec!["completed".to_string()]);
    // A chain its user cancels is not news to them.
    let mine = p.submit(&[]).await;
    let c_mine = p.chain_of(&mine);
    let r = requests::handle(
        &mut p.engine,
        Request::Cancel {
            id: format!("c{c_mine}"),
        },
        p.uid,
    )
    .await;
    assert!(matches!(r, Response::Ok(_)), "{r:?}");
    assert_eq!(p.state(c_mine), ChainState::Cancelled);
    assert!(p.notified(c_mine).is_empty());
}

/// A chain its user is cancelling (the scancel runs beside the loop) is the cancel's to
/// record: the gate that closes for good meanwhile does not cancel it for the supervisor
/// as well, so its user is not told "dependency never satisfied" of their own cancel, and
/// the cancel is recorded as theirs (not refused as "already ended").
#[tokio::test(flavor = "current_thread")]
async fn a_chain_being_cancelled_by_its_user_is_not_cancelled_for_its_dependency() {
    let mut p = Pipe::new();
    let up = p.submit(&[]).await;
    let c_up = p.chain_of(&up);
    let notok = p
        .submit(&[&format!("--dependency=afternotok:c{c_up}")])
        .await;
    let c = p.chain_of(&notok);
    let request = Request::Cancel {
        id: format!("c{c}"),
    };
    let command =
        match requests::begin(&mut p.engine.desk(), request, p.uid, tracing::Span::none()).await {
            requests::Plan::Fly(c) => c,
            other => panic!("{other:?}"),
        };
    // Its dependency can never hold now, while its scancel runs.
    assert!(p.engine.slurm().end(&up, Ending::Completed));
    for _ in 0..3 {
        p.cycle().await;
    }
    assert!(
        p.notified(c).is_empty(),
        "nothing is told of a chain being cancelled: {:?}",
        p.notified(c)
    );
    let landed = requests::fly(&p.engine.runner(), command).await;
    let r = requests::finish(&mut p.engine.desk(), landed);
    assert!(matches!(r, Response::Ok(_)), "{r:?}");
    assert_eq!(p.state(c), ChainState::Cancelled);
    let actors: Vec<String> = p
        .engine
        .store()
        .decisions(c)
        .unwrap()
        .into_iter()
        .map(|d| d.actor)
        .collect();
    assert_eq!(actors.len(), 1, "one record: {actors:?}");
    assert_ne!(actors[0], "supervisor", "the user's cancel: {actors:?}");
    assert!(p.notified(c).is_empty(), "{:?}", p.notified(c));
    // Later cycles change nothing.
    p.cycle().await;
    assert!(p.notified(c).is_empty(), "{:?}", p.notified(c));
}

/// Plain-sbatch jobs waiting afterany/afternotok on a supervised job cannot be held back:
/// Slurm starts them when that attempt ends. They are reported on the upstream chain,
/// once each, in the same squeue of pending jobs the rewiring reads; afterok (rewired
/// instead), supervised jobs (held instead) and another user's jobs are not.
#[tokio::test(flavor = "current_thread")]
async fn plain_afterany_jobs_are_reported_on_the_upstream_chain_once() {
    let mut p = Pipe::new();
    let up = p.submit(&["--mem=100M"]).await;
    let c_up = p.chain_of(&up);
    let any = p.plain(&[&format!("--dependency=afterany:{up}")]).await;
    let notok = p
        .plain(&[&format!("--dependency=afterok:{up}?afternotok:{up}")])
        .await;
    let ok = p.plain(&[&format!("--dependency=afterok:{up}")]).await;
    let held = p.submit(&[&format!("--dependency=afterany:{up}")]).await;
    let other = p
        .engine
        .slurm()
        .sbatch(&SbatchRequest {
            argv: vec![
                format!("--dependency=afterany:{up}"),
                "--parsable".into(),
                "--wrap=true".into(),
            ],
            cwd: p.dir.path().to_path_buf(),
            env: Vec::new(),
            stdin: None,
            run_as: Some(RunAs {
                uid: 4242,
                gid: 4242,
                user: std::ffi::CString::new("mallory").unwrap(),
            }),
            held: false,
        })
        .await
        .unwrap();
    let before = p.engine.slurm().calls(Command::PendingOfUsers);
    p.cycle().await;
    assert_eq!(
        p.engine.slurm().calls(Command::PendingOfUsers) - before,
        1,
        "one squeue of pending jobs a cycle"
    );
    let noted = |p: &Pipe| -> Vec<String> {
        p.engine
            .store()
            .decisions(c_up)
            .unwrap()
            .into_iter()
            .filter(|d| d.reason_code.as_deref() == Some("plain_job_not_held"))
            .map(|d| {
                assert_eq!(d.class, RecoveryClass::R3);
                assert_eq!(d.action, Action::None);
                d.inputs["job"].as_str().unwrap().to_string()
            })
            .collect()
    };
    let mut jobs = noted(&p);
    jobs.sort();
    let mut want = vec![any.clone(), notok.clone()];
    want.sort();
    assert_eq!(
        jobs, want,
        "not {ok} (afterok), {held} (held) or {other} (another user's)"
    );
    // Once each, however many cycles see them.
    p.cycle().await;
    p.cycle().await;
    assert_eq!(noted(&p).len(), 2);
    // Nothing about them is changed in Slurm.
    assert_eq!(p.dependency(&any), format!("afterany:{up}"));
}

/// The squeue of pending jobs is also run only to report plain afterany/afternotok jobs,
/// when no rewiring waits on it: that it fails must not hold the rest of the cycle back
/// (a due retry is launched all the same), and it is not asked again every cycle.
#[tokio::test(flavor = "current_thread")]
async fn a_broken_pending_squeue_does_not_stop_retries() {
    let mut p = Pipe::new();
    let up = p.submit(&["--mem=100M"]).await;
    let c_up = p.chain_of(&up);
    p.engine
        .slurm()
        .set_unavailable(Command::PendingOfUsers, true);
    assert!(p.engine.slurm().end(&up, Ending::OutOfMemory));
    p.cycle().await; // judged: ready, resubmitted at once (no backoff here)
    p.cycle().await;
    assert_ne!(
        p.job(c_up),
        up,
        "the OOM is retried although the pending squeue fails"
    );
    assert_eq!(p.state(c_up), ChainState::Active);
}

/// A report is recorded once per job and chain even when later squeues see the job
/// again (here: the cycles after a retry of another chain of the same user, which ask at
/// once, whatever the interval).
#[tokio::test(flavor = "current_thread")]
async fn a_plain_afterany_job_seen_again_is_not_reported_again() {
    let mut p = Pipe::new();
    let up = p.submit(&["--mem=100M"]).await;
    let c_up = p.chain_of(&up);
    let other = p.submit(&["--mem=100M"]).await;
    let c_other = p.chain_of(&other);
    let any = p.plain(&[&format!("--dependency=afterany:{up}")]).await;
    p.cycle().await;
    let noted = |p: &Pipe| {
        p.codes(c_up)
            .iter()
            .filter(|c| *c == "plain_job_not_held")
            .count()
    };
    assert_eq!(noted(&p), 1);
    let before = p.engine.slurm().calls(Command::PendingOfUsers);
    assert!(p.engine.slurm().end(&other, Ending::OutOfMemory));
    p.cycle().await; // judged and resubmitted
    p.cycle().await; // the rewiring's squeue, which sees `any` again
    assert_ne!(p.job(c_other), other);
    assert!(
        p.engine.slurm().calls(Command::PendingOfUsers) > before,
        "the pending jobs were read again"
    );
    assert_eq!(noted(&p), 1, "{any} reported once");
}

/// Many pending afterany jobs that wait on nothing supervised (here 10,000, one user's
/// array, each task listed by itself) use up one look's budget: the rest are looked at
/// in the next look, not never (the budget started over from the same first rows).
#[tokio::test(flavor = "current_thread")]
async fn plain_waiters_beyond_one_looks_budget_are_reported_later() {
    let mut p = Pipe::new();
    let up = p.submit(&["--mem=100M"]).await;
    let c_up = p.chain_of(&up);
    let other = p.submit(&["--mem=100M"]).await;
    let unsupervised = p.plain(&[]).await;
    p.plain(&[
        "--array=0-9999",
        &format!("--dependency=afterany:{unsupervised}"),
    ])
    .await;
    // Job ids past the first array's, in number and as text.
    p.plain(&["--array=0-9999"]).await;
    let any = p.plain(&[&format!("--dependency=afterany:{up}")]).await;
    let noted = |p: &Pipe| {
        p.codes(c_up)
            .iter()
            .filter(|c| *c == "plain_job_not_held")
            .count()
    };
    p.cycle().await;
    // A second look: the rewiring's, in the cycle after a retry of the other chain.
    assert!(p.engine.slurm().end(&other, Ending::OutOfMemory));
    p.cycle().await;
    let before = p.engine.slurm().calls(Command::PendingOfUsers);
    p.cycle().await;
    assert_eq!(p.engine.slurm().calls(Command::PendingOfUsers), before + 1);
    assert_eq!(noted(&p), 1, "{any} reported");
}

/// A plain job waiting on a whole supervised array of 1,500 tasks is reported once, on
/// the first task's chain, not once per task: one plain job costs one record.
#[tokio::test(flavor = "current_thread")]
async fn a_plain_job_waiting_on_a_big_array_is_reported_once() {
    let mut p = Pipe::new();
    let array = p.submit(&["--array=0-1499"]).await;
    let tasks = p.engine.store().resolve(&array).unwrap();
    assert_eq!(tasks.len(), 1500);
    let other = p.submit(&["--mem=100M"]).await;
    p.plain(&[&format!("--dependency=afterany:{array}")]).await;
    let noted = |p: &Pipe| {
        tasks
            .iter()
            .map(|&c| {
                p.codes(c)
                    .iter()
                    .filter(|c| *c == "plain_job_not_held")
                    .count()
            })
            .collect::<Vec<_>>()
    };
    p.cycle().await;
    let n = noted(&p);
    assert_eq!(n.iter().sum::<usize>(), 1, "one record for one plain job");
    assert_eq!(n[0], 1, "on the first task's chain");
    assert!(p.engine.slurm().end(&other, Ending::OutOfMemory));
    p.cycle().await;
    p.cycle().await; // a second look, the rewiring's
    assert_eq!(noted(&p).iter().sum::<usize>(), 1, "still one");
}
