//! Requests that change something, against the engine with the in-process fake Slurm and
//! a store that journals (as in cluster mode) into memory: a request that changes nothing
//! writes nothing (no row, no journal entry), every byte a user makes the service keep
//! counts in their limit (decision records too), and each user's rate of such requests
//! is bounded (issue 32).

use slurm_supervisor::config::Config;
use slurm_supervisor::daemon::engine::Engine;
use slurm_supervisor::daemon::requests;
use slurm_supervisor::domain::model::ChainState;
use slurm_supervisor::protocol::{
    ErrorKind, Request, Resolution, ResolveAction, Response, SubmitRequest,
};
use slurm_supervisor::slurm::fake::{Ending, FakeSlurm};
use slurm_supervisor::store::journal::MemoryJournal;
use slurm_supervisor::store::Store;

struct Daemon {
    engine: Engine<FakeSlurm>,
    journal: MemoryJournal,
    dir: tempfile::TempDir,
    uid: u32,
}

impl Daemon {
    /// A daemon with `extra` config (whole tables) on a journaled store.
    fn new(extra: &str) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "state_dir = {:?}\npoll_interval = \"1s\"\n{extra}",
            dir.path().join("state")
        );
        let config = Config::parse(&text, None).unwrap();
        let journal = MemoryJournal::default();
        let store = Store::in_memory_replica("0a1b2c3d", Box::new(journal.clone())).unwrap();
        Daemon {
            engine: Engine::new(config, store, FakeSlurm::new()),
            journal,
            dir,
            uid: nix::unistd::getuid().as_raw(),
        }
    }

    async fn ask(&mut self, r: Request) -> Response {
        requests::handle(&mut self.engine, r, self.uid).await
    }

    fn submit_request(&self, script: Vec<u8>) -> Request {
        Request::Submit(SubmitRequest {
            argv: vec!["job.sh".into()],
            cwd: self.dir.path().display().to_string(),
            env: Vec::new(),
            script: Some(script),
            max_retries: None,
            restartable: false,
            continuation: None,
            request_id: None,
        })
    }

    /// Submits a job whose chain ends in `pending_failed` (an ending no rule knows); its
    /// chain id.
    async fn pending_chain(&mut self, script: Vec<u8>) -> i64 {
        let r = self.submit_request(script);
        let Response::Ok(v) = self.ask(r).await else {
            panic!("submit refused")
        };
        let job = v["job_id"].as_str().unwrap().to_string();
        let chain = self.engine.store().resolve(&job).unwrap()[0];
        assert!(self.engine.slurm().end(&job, Ending::Failed(3)));
        for _ in 0..3 {
            self.engine.cycle().await.unwrap();
        }
        assert_eq!(self.state(chain), ChainState::PendingFailed);
        chain
    }

    fn state(&self, chain: i64) -> ChainState {
        self.engine.store().chain(chain).unwrap().unwrap().state
    }

    fn decisions(&self, chain: i64) -> usize {
        self.engine.store().decisions(chain).unwrap().len()
    }

    fn entries(&self) -> usize {
        self.journal.entries.lock().unwrap().len()
    }
}

/// Whatever a test did, each user's totals are what the rows say.
impl Drop for Daemon {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let t = self.engine.store().recount_user_totals().unwrap();
            assert_eq!(t.kept, t.counted, "the users' totals differ from the rows");
        }
    }
}

fn classify(chain: i64, action: ResolveAction, reason: &str) -> Request {
    Request::Classify(Resolution {
        id: format!("c{chain}"),
        action,
        mem: None,
        time: None,
        partition: None,
        exclude: Vec::new(),
        reason: reason.into(),
        confidence: None,
        dry_run: false,
    })
}

fn error(r: Response) -> (ErrorKind, String) {
    match r {
        Response::Error(e) => (e.kind, e.message),
        Response::Ok(v) => panic!("answered {v}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_hold_of_a_held_chain_writes_nothing() {
    let mut d = Daemon::new("");
    let c = d.pending_chain(b"#!/bin/sh\nexit 3\n".to_vec()).await;
    let reason = "x".repeat(4000);
    assert!(matches!(
        d.ask(classify(c, ResolveAction::Hold, &reason)).await,
        Response::Ok(_)
    ));
    let (records, entries) = (d.decisions(c), d.entries());
    for _ in 0..50 {
        let (kind, message) = error(d.ask(classify(c, ResolveAction::Hold, &reason)).await);
        assert_eq!(kind, ErrorKind::Conflict);
        assert!(message.contains("already held"), "{message}");
    }
    // An unsure retry becomes a hold: of a held chain, nothing either.
    let mut unsure = classify(c, ResolveAction::Retry, "maybe");
    if let Request::Classify(r) = &mut unsure {
        r.confidence = Some(0.1);
    }
    assert_eq!(error(d.ask(unsure).await).0, ErrorKind::Conflict);
    assert_eq!(d.decisions(c), records, "no decision record");
    assert_eq!(d.entries(), entries, "no journal entry");
    // A real change still goes through.
    assert!(matches!(
        d.ask(classify(c, ResolveAction::Fail, "gave up")).await,
        Response::Ok(_)
    ));
    assert_eq!(d.state(c), ChainState::Failed);
    // And what is already the case is refused without a write, as before: a cancel of
    // an ended chain, a resolution of a chain not pending_failed.
    let entries = d.entries();
    for _ in 0..10 {
        let cancel = Request::Cancel {
            id: format!("c{c}"),
        };
        assert_eq!(error(d.ask(cancel).await).0, ErrorKind::Conflict);
        assert_eq!(
            error(d.ask(classify(c, ResolveAction::Fail, "again")).await).0,
            ErrorKind::Conflict
        );
    }
    assert_eq!(d.entries(), entries);
}

#[tokio::test(flavor = "current_thread")]
async fn an_opt_in_that_changes_nothing_writes_nothing() {
    let mut d = Daemon::new("[plain_sbatch]\nenabled = true\n");
    assert!(matches!(
        d.ask(Request::PlainOpt { opted_in: true }).await,
        Response::Ok(_)
    ));
    let entries = d.entries();
    assert_eq!(entries, 1);
    for _ in 0..50 {
        let Response::Ok(v) = d.ask(Request::PlainOpt { opted_in: true }).await else {
            panic!("refused")
        };
        assert_eq!(v["opted_in"], true);
    }
    assert_eq!(d.entries(), entries, "no journal entry");
    assert!(matches!(
        d.ask(Request::PlainOpt { opted_in: false }).await,
        Response::Ok(_)
    ));
    assert_eq!(d.entries(), entries + 1);
    assert_eq!(d.engine.store().plain_opt(d.uid).unwrap(), Some(false));
}

#[tokio::test(flavor = "current_thread")]
async fn an_opt_in_where_plain_sbatch_is_off_is_refused_and_writes_nothing() {
    let mut d = Daemon::new("");
    for opted_in in [true, false, true] {
        let (kind, message) = error(d.ask(Request::PlainOpt { opted_in }).await);
        assert_eq!(kind, ErrorKind::Conflict);
        assert!(
            message.contains("[plain_sbatch] enabled = false"),
            "{message}"
        );
    }
    assert_eq!(d.entries(), 0);
    assert_eq!(d.engine.store().plain_opt(d.uid).unwrap(), None);
}

#[tokio::test(flavor = "current_thread")]
async fn decision_records_count_in_the_users_stored_bytes() {
    // 1 MiB is the least the limit may be; the script takes nearly all of it, and the
    // first decision record (the escalation to pending_failed) the rest.
    let mut d = Daemon::new("[limits]\nmax_stored_bytes_per_user = \"1M\"\n");
    let mut script = b"#!/bin/sh\nexit 3\n".to_vec();
    script.resize((1 << 20) - 6000, b'#');
    let c = d.pending_chain(script).await;
    let totals = d.engine.store().user_totals(d.uid).unwrap();
    assert!(totals.decision_bytes > 0, "{totals:?}");
    let (records, entries) = (d.decisions(c), d.entries());
    let (kind, message) = error(
        d.ask(classify(c, ResolveAction::Hold, &"y".repeat(4000)))
            .await,
    );
    assert_eq!(kind, ErrorKind::Unavailable);
    assert!(
        message.contains("limits.max_stored_bytes_per_user"),
        "{message}"
    );
    assert_eq!((d.decisions(c), d.entries()), (records, entries));
    // A submit that the submissions alone leave room for is refused: the records take it.
    assert!(totals.decision_bytes > 200, "{totals:?}");
    let cwd = d.dir.path().display().to_string().len() as u64;
    let room = (1u64 << 20) - totals.open_bytes - 200 - cwd - "job.sh".len() as u64 - 3;
    let r = d.submit_request(vec![b'#'; room as usize]);
    let (kind, message) = error(d.ask(r).await);
    assert_eq!(kind, ErrorKind::Unavailable);
    assert!(message.contains("decision records"), "{message}");
    // Ending the chain frees what it kept, and is never refused for room.
    assert!(matches!(
        d.ask(classify(c, ResolveAction::Fail, "no room")).await,
        Response::Ok(_)
    ));
    assert_eq!(d.engine.store().user_totals(d.uid).unwrap().kept_bytes(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_users_requests_that_change_something_are_rate_limited() {
    let mut d = Daemon::new("[limits]\nwrite_requests_per_minute = 3\n");
    let mut refused = Vec::new();
    for _ in 0..5 {
        // Each an opt-in where plain sbatch is off: refused for that, until the rate is.
        let (kind, message) = error(d.ask(Request::PlainOpt { opted_in: true }).await);
        refused.push((
            kind,
            message.contains("limits.write_requests_per_minute = 3"),
        ));
    }
    assert_eq!(
        refused,
        [
            (ErrorKind::Conflict, false),
            (ErrorKind::Conflict, false),
            (ErrorKind::Conflict, false),
            (ErrorKind::Unavailable, true),
            (ErrorKind::Unavailable, true),
        ]
    );
    // A submit is refused before anything is kept; reads are not counted.
    let r = d.submit_request(b"#!/bin/sh\ntrue\n".to_vec());
    assert_eq!(error(d.ask(r).await).0, ErrorKind::Unavailable);
    assert_eq!(d.entries(), 0);
    for _ in 0..10 {
        assert!(matches!(d.ask(Request::Ping).await, Response::Ok(_)));
        assert!(matches!(
            d.ask(Request::Status { id: None }).await,
            Response::Ok(_)
        ));
    }
    // Another user has a rate of their own.
    let other = d.uid + 1;
    let (kind, _) =
        error(requests::handle(&mut d.engine, Request::PlainOpt { opted_in: true }, other).await);
    assert_eq!(kind, ErrorKind::Conflict);
}
