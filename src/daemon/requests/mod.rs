//! Control requests, one file each, and their one dispatch ([`dispatch`]): the only
//! `match` on a request in the daemon. Each arm names the file that answers its request,
//! as a read ([`Read`], from `reads`: answered by the control socket itself, off the
//! loop, from a read-only store connection, never the engine) or as a request that
//! changes something ([`Write`], from this folder: handled on the daemon's loop, which
//! reads from the type what follows it: due retries launched, a plain-sbatch choice
//! published). The socket routes a request with [`route`], the loop begins it with
//! [`on_loop`]. A new request is its file, its `mod` line and one line in [`dispatch`],
//! besides its `Request` variant on the wire (docs/ARCHITECTURE.md, "Where to change
//! what").
//!
//! One path for every request that changes something, the daemon's and the tests'
//! alike, as mini-redis parses a command once and applies it: [`begin`] checks it and does
//! what can be done on the loop, and comes back with a [`Plan`]: answered now, or a Slurm
//! command to run beside the loop, a *flight* as the daemon calls every such command
//! ([`RequestFlight`]: a submit's sbatch, a cancel's scancels, run as the caller, who
//! could hold them), whose answer ([`Landed`]) [`finish`] records and turns into the
//! answer. The daemon runs [`fly`] beside its loop; [`handle`] (the in-process tests)
//! awaits it in place. The answer is the truth: a submission the client is told
//! failed is never submitted later.
//!
//! What a request may touch is its [`Desk`] (borrowed from the engine's fields,
//! `engine/contexts.rs`): the store, the config, the chains requests hold, the submits in
//! flight, the callers' write rate, and of Slurm only what adoption asks on the loop
//! (`Lookup`); its Slurm command beside the loop runs through the engine's [`Runner`], as
//! the caller. Helpers take the fields they use, so each signature says what it touches.
//!
//! Who may send what follows from the split: a read, anyone, to any daemon (a standby of
//! cluster mode too); a write, the active daemon only, within the caller's write rate
//! (`rate.rs`, taken by [`on_loop`]; reads are not counted), each file checking which
//! chains its caller may touch (`access`). `submit.rs` and `cancel.rs` are two halves
//! around their Slurm command; a cancel holds its chains meanwhile (`engine/held.rs`),
//! and `cancel::refuse_held` is the one check, in every request that changes chains, that
//! none of them is held. `resolution.rs` holds what `classify` and `recover` share.
//!
//! **Invariant:** a request that would change nothing writes nothing (no row, no journal
//! entry): it is refused or answered as things stand (`tests/writes.rs`).

pub mod adopt;
pub mod cancel;
mod classify;
mod plain_opt;
mod recover;
mod resolution;
mod rules_accept;
mod rules_reject;
pub mod submit;

use super::access::Caller;
use super::engine::{Desk, Engine, Runner};
use super::reads::{self, Read};
use super::sbatch::LaunchOutcome;
use crate::protocol::{Request, Response};
use crate::slurm::Slurm;
use std::future::Future;
use std::pin::Pin;

pub use cancel::PendingCancel;
use cancel::{finish_cancel, run_scancels};
use submit::finish_submit;
pub use submit::PendingSubmit;

/// Every control request, to the file that answers it: the one `match` on a request in
/// the daemon. A read names how it is answered (`reads`), a request that changes
/// something is its [`Write`]. A new request is its file and one line here (and its
/// `mod` line).
fn dispatch<T: To>(request: Request, to: T) -> T::Out {
    match request {
        Request::Ping => to.read(reads::ping::read()),
        Request::Status { id } => to.read(reads::status::read(id)),
        Request::History { id } => to.read(reads::history::read(id)),
        Request::Pending => to.read(reads::pending::read()),
        Request::Stats { id } => to.read(reads::stats::read(id)),
        Request::Cluster => to.read(reads::cluster::read()),
        Request::Rules => to.read(reads::rules::read()),
        Request::RulesAccept {
            id,
            despite_conflicts,
            despite_rejection,
            mine,
            reason,
        } => to.write(rules_accept::RulesAccept {
            id,
            despite_conflicts,
            despite_rejection,
            mine,
            reason,
        }),
        Request::RulesReject { id, reason, mine } => {
            to.write(rules_reject::RulesReject { id, reason, mine })
        }
        Request::Submit(r) => to.write(r),
        Request::Adopt { job_ids } => to.write(adopt::Adopt { job_ids }),
        Request::PlainOpt { opted_in } => to.write(plain_opt::PlainOpt { opted_in }),
        Request::Classify(r) => to.write(r),
        Request::Recover(r) => to.write(r),
        Request::Cancel { id } => to.write(cancel::Cancel { id }),
    }
}

/// Where [`dispatch`] takes a request: the control socket ([`route`]) or the loop
/// ([`on_loop`]).
trait To {
    type Out;
    fn read(self, read: Read) -> Self::Out;
    fn write<W: Write>(self, write: W) -> Self::Out;
}

/// A request that changes something: handled on the active daemon's loop, counted by its
/// caller's write rate (`rate.rs`); each checks in its own file who may do it to which
/// chains (`access`). Its constants say what follows it on the loop.
pub trait Write: Sized + 'static {
    /// It may make a retry due at once (a resolution, a recover): the loop launches due
    /// retries right after answering, not at the next cycle. Other requests make no Slurm
    /// call outside the poll cadence.
    const MAY_MAKE_RETRY_DUE: bool = false;
    /// It changes the caller's plain-sbatch choice: the loop publishes the caller's opt-in
    /// file for the filter before answering, so an sbatch right after `opt-in` is noted.
    const CHANGES_OPT_IN: bool = false;
    /// What the client is told when the daemon stops before answering.
    const LOST: &'static str = "the daemon stopped before answering; whether the change was made shows in `supervisorctl status` \
                                 once it runs again (a cancel's scancel may have reached Slurm: its jobs are then recorded cancelled)";

    /// The request as it came, for the socket to hand to the loop.
    fn into_request(self) -> Request;

    /// Checks it for its caller and does what can be done on the loop (see [`begin`]).
    fn begin<S: Slurm>(
        self,
        desk: &mut Desk<'_, S>,
        caller: Caller,
        span: tracing::Span,
    ) -> impl Future<Output = Plan>;
}

/// How the control socket answers a request.
pub enum Route {
    /// Itself, off the loop.
    Read(Read),
    /// On the loop: the request goes there as it came; `lost` is the answer if the daemon
    /// stops first.
    Loop {
        request: Request,
        lost: &'static str,
    },
}

/// How the control socket answers `request`.
pub fn route(request: Request) -> Route {
    struct Socket;
    impl To for Socket {
        type Out = Route;
        fn read(self, read: Read) -> Route {
            Route::Read(read)
        }
        fn write<W: Write>(self, write: W) -> Route {
            Route::Loop {
                request: write.into_request(),
                lost: W::LOST,
            }
        }
    }
    dispatch(request, Socket)
}

/// What the loop does after answering a request (the request's [`Write`] constants).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct After {
    /// Launch the retries due now.
    pub launch: bool,
    /// Publish the caller's plain-sbatch choice (before the answer).
    pub publish_opt_in: bool,
}

/// A request begun on the loop: its plan and what follows it.
pub struct Begun {
    pub plan: Plan,
    pub after: After,
}

/// Begins a request on the loop (the rate checked, then [`Write::begin`]; a read, which
/// the socket answers itself, is answered here from the desk's store for the in-process
/// tests) and says what follows it.
pub async fn on_loop<S: Slurm>(
    desk: &mut Desk<'_, S>,
    request: Request,
    caller: Caller,
    span: tracing::Span,
) -> Begun {
    struct Loop<'a, 'e, S: Slurm> {
        desk: &'a mut Desk<'e, S>,
        caller: Caller,
        span: tracing::Span,
    }
    impl<'a, 'e, S: Slurm> To for Loop<'a, 'e, S> {
        type Out = Pin<Box<dyn Future<Output = Begun> + 'a>>;
        fn read(self, read: Read) -> Self::Out {
            let answer = answer_read(self.desk.store, self.desk.config, read, self.caller);
            Box::pin(std::future::ready(Begun {
                plan: Plan::Done(answer),
                after: After::default(),
            }))
        }
        fn write<W: Write>(self, write: W) -> Self::Out {
            let after = After {
                launch: W::MAY_MAKE_RETRY_DUE,
                publish_opt_in: W::CHANGES_OPT_IN,
            };
            Box::pin(async move {
                let per_minute = self.desk.rate.per_minute();
                let plan = match self
                    .desk
                    .rate
                    .take(self.caller.uid, std::time::Instant::now())
                {
                    Err(wait) => Plan::Done(too_many(per_minute, wait)),
                    Ok(()) => write.begin(self.desk, self.caller, self.span).await,
                };
                Begun { plan, after }
            })
        }
    }
    dispatch(request, Loop { desk, caller, span }).await
}

/// A read answered whole from `store`, where no client's socket waits (the socket streams
/// lists and answers `cluster` from the lease thread's view).
fn answer_read(
    store: &crate::store::Store,
    config: &crate::config::Config,
    read: Read,
    caller: Caller,
) -> Response {
    let uid = caller.uid;
    match read {
        Read::Store(answer) => answer(store, uid),
        Read::WithConfig(answer) => answer(store, config, &caller),
        Read::List { whole, .. } => whole(store, uid),
        Read::Node(_) => Response::error(
            crate::protocol::ErrorKind::Internal,
            "cluster is answered by the control socket, not the loop",
        ),
    }
}

/// The span of one control request handled on the loop: its `cmd`, the caller's uid, the
/// chain or job it names as given (`subject`), and the `chain` and `job` a submit made once
/// they are known. (Not `target`: the journal has a `TARGET` field, the code's module.)
pub fn span(request: &Request, uid: u32) -> tracing::Span {
    let span = tracing::info_span!(
        "request",
        cmd = %request.cmd(),
        uid,
        subject = tracing::field::Empty,
        chain = tracing::field::Empty,
        job = tracing::field::Empty,
    );
    if let Some(t) = request.subject() {
        span.record("subject", t);
    }
    span
}

/// What a request that changes something comes to on the loop, as mini-redis applies a
/// parsed command: answered now, or a Slurm command to run beside the loop (as the
/// caller's user, who could hold it) whose answer [`finish`] then records. The chains or
/// launch it concerns are marked meanwhile (a submit's launch in flight, a cancel's chains
/// held), so the cycle leaves them alone.
#[derive(Debug)]
pub enum Plan {
    /// Answered now.
    Done(Response),
    /// Answered now, after a file of the config was written (`rules accept` for everyone,
    /// its `rules.d/` file): the loop reloads the config, as on SIGHUP, before the answer
    /// goes, so a client told the rule is in force reads it so. Only a file written makes
    /// a reload: a refused or own-scope request never does (any user may send one).
    Reload(Response),
    /// A Slurm command to run beside the loop.
    Fly(RequestFlight),
}

impl Plan {
    /// A request's typed answer, or its refusal, answered now.
    fn answered<T: serde::Serialize>(result: Result<T, Response>) -> Plan {
        Plan::Done(match result {
            Ok(a) => Response::answer(&a),
            Err(e) => e,
        })
    }
}

/// A request's Slurm command, to run beside the loop (its flight).
#[derive(Debug)]
pub enum RequestFlight {
    /// A submission whose intent is recorded: its sbatch is to run.
    Submit(Box<PendingSubmit>),
    /// A cancel of live jobs: its scancels are to run.
    Cancel(PendingCancel),
}

impl RequestFlight {
    /// The chains it holds (a cancel's), for the cycle to leave alone.
    pub fn chains(&self) -> &[i64] {
        match self {
            RequestFlight::Cancel(p) => &p.chains,
            RequestFlight::Submit(_) => &[],
        }
    }

    /// The submission whose sbatch it is to run, if it is a submit's.
    pub fn submission(&self) -> Option<&crate::store::Submission> {
        match self {
            RequestFlight::Submit(p) => Some(&p.sub),
            RequestFlight::Cancel(_) => None,
        }
    }
}

/// A request's flight, landed: its Slurm command, answered.
#[derive(Debug)]
pub enum Landed {
    Submit(Box<PendingSubmit>, LaunchOutcome),
    Cancel(PendingCancel, Result<(), String>),
}

/// Checks a request and does what can be done on the loop ([`on_loop`]'s plan), for the
/// in-process tests: the caller's groups looked up in place (the daemon's connection looks
/// them up before the loop, `Caller::find`). Reads are answered off the loop (`reads`).
pub async fn begin<S: Slurm>(
    desk: &mut Desk<'_, S>,
    request: Request,
    uid: u32,
    span: tracing::Span,
) -> Plan {
    let caller = Caller::looked_up(uid, &desk.config.learn);
    on_loop(desk, request, caller, span).await.plan
}

/// The answer to a request past its user's rate: nothing was done, try again later (exit
/// 75, as for a daemon that is busy).
fn too_many(per_minute: u32, wait: std::time::Duration) -> Response {
    Response::error(
        crate::protocol::ErrorKind::Unavailable,
        format!(
            "you have made more requests that change something than limits.write_requests_per_minute = {per_minute} allows; \
             nothing was done: try again in {:.1}s",
            wait.as_secs_f64().max(0.1)
        ),
    )
}

/// Runs a request's Slurm command, as the caller (beside the loop, in the daemon).
pub async fn fly<S: Slurm>(runner: &Runner<S>, command: RequestFlight) -> Landed {
    match command {
        RequestFlight::Submit(p) => {
            let outcome = runner.sbatch(&p.launch, &p.sub).await;
            Landed::Submit(p, outcome)
        }
        RequestFlight::Cancel(p) => {
            let scancelled = run_scancels(runner, &p).await;
            Landed::Cancel(p, scancelled)
        }
    }
}

/// Records what a plan's Slurm command answered, and makes the answer (in the request's
/// span); the launch or chains it marked are the cycle's again.
pub fn finish<S>(desk: &mut Desk<'_, S>, landed: Landed) -> Response {
    match landed {
        Landed::Submit(p, outcome) => {
            let _span = p.span.clone().entered();
            desk.flights.end(p.launch.id);
            finish_submit(desk, &p, outcome)
        }
        Landed::Cancel(p, scancelled) => {
            let _span = p.span.clone().entered();
            desk.holds.release(&p.chains);
            finish_cancel(desk.store, desk.config, &p, scancelled)
        }
    }
}

/// Handles one request to completion (reads too), through the same [`begin`], [`fly`]
/// and [`finish`] as the daemon's loop, with the Slurm command awaited in place: the
/// in-process tests drive it.
pub async fn handle<S: Slurm + Clone>(
    engine: &mut Engine<S>,
    request: Request,
    uid: u32,
) -> Response {
    let span = tracing::Span::current();
    match begin(&mut engine.desk(), request, uid, span).await {
        Plan::Done(answered) | Plan::Reload(answered) => answered,
        Plan::Fly(command) => {
            let landed = fly(&engine.runner(), command).await;
            finish(&mut engine.desk(), landed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ONE_OF_EACH;

    /// What [`dispatch`] says of a request: a read or not, what follows it on the loop,
    /// and what its client is told if the daemon stops first.
    struct Probe;
    impl To for Probe {
        type Out = (bool, After, Option<&'static str>);
        fn read(self, _: Read) -> Self::Out {
            (true, After::default(), None)
        }
        fn write<W: Write>(self, _: W) -> Self::Out {
            let after = After {
                launch: W::MAY_MAKE_RETRY_DUE,
                publish_opt_in: W::CHANGES_OPT_IN,
            };
            (false, after, Some(W::LOST))
        }
    }

    fn request(line: &str) -> Request {
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn the_dispatch_reads_what_the_protocol_calls_a_read_and_hands_the_rest_on_as_it_came() {
        for line in ONE_OF_EACH {
            let sent = request(line);
            match route(sent.clone()) {
                Route::Read(_) => assert!(sent.is_read(), "{line} is answered as a read"),
                Route::Loop { request, .. } => {
                    assert!(!sent.is_read(), "{line} goes to the loop");
                    assert_eq!(
                        serde_json::to_value(&request).unwrap(),
                        serde_json::to_value(&sent).unwrap(),
                        "{line} reaches the loop as it came"
                    );
                }
            }
        }
    }

    #[test]
    fn resolutions_launch_due_retries_and_an_opt_in_is_published_after_its_answer() {
        for line in ONE_OF_EACH {
            let r = request(line);
            let cmd = r.cmd();
            let (read, after, lost) = dispatch(r, Probe);
            let launch = matches!(cmd, "classify" | "recover");
            let publish_opt_in = cmd == "plain_opt";
            assert_eq!(
                after,
                After {
                    launch,
                    publish_opt_in,
                },
                "{line}"
            );
            match lost {
                None => assert!(read),
                Some(lost) => assert_eq!(
                    lost.contains("nothing will be submitted later"),
                    cmd == "submit",
                    "{line}: {lost}"
                ),
            }
        }
    }
}
