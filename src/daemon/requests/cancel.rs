//! `cancel`: stops a chain (every task of an array together): scancel first, then one
//! transaction; if scancel fails, nothing is recorded (a scancel that gave no answer may
//! have cancelled the jobs all the same: the next poll records that, and the answer says
//! so).
//!
//! A cancel of live jobs is cut in two, as a submit is, so that its scancel never holds up
//! the loop: scancel runs as the jobs' owner, who can hold it (a SIGSTOP to their own
//! process) until `[slurm] command_timeout`. `begin_cancel` checks the request and decides
//! which jobs to cancel; while the scancel runs beside the loop the chains are held
//! (`Holds::hold`: the cycle leaves them alone, and `refuse_held` refuses a second
//! cancel or a resolution); `finish_cancel` decides again from the chains as they are
//! then and records it.

use super::RequestFlight;
use crate::config::Config;
use crate::daemon::access::Caller;
use crate::daemon::access::{actor, chains_for, Handled};
use crate::daemon::engine::{Desk, Holds, Runner};
use crate::plumbing::clock::now;
use crate::protocol::views::CancelAnswer;
use crate::protocol::{ErrorKind, Request, Response};
use crate::slurm::{RunAs, Slurm, SlurmError};
use crate::store::{chain_label, Batch, Chain, Store};
use std::collections::BTreeMap;

/// `cancel ID`.
pub struct Cancel {
    pub id: String,
}

impl super::Write for Cancel {
    fn into_request(self) -> Request {
        Request::Cancel { id: self.id }
    }

    /// Answered now when no job is to be stopped; else the chains held while the
    /// scancels run beside the loop.
    async fn begin<S: Slurm>(
        self,
        desk: &mut Desk<'_, S>,
        Caller { uid, .. }: Caller,
        span: tracing::Span,
    ) -> super::Plan {
        match begin_cancel(desk.store, desk.config, &desk.holds, &self.id, uid, span) {
            Ok(BegunCancel::Scancel(p)) => {
                desk.holds.hold(&p.chains);
                super::Plan::Fly(RequestFlight::Cancel(p))
            }
            Ok(BegunCancel::Done(r)) | Err(r) => super::Plan::Done(r),
        }
    }
}

/// A cancel whose scancel is to run (beside the loop, in the daemon).
#[derive(Debug)]
pub struct PendingCancel {
    /// What the caller named, for the answer.
    id: String,
    uid: u32,
    /// The chains the cancel is for, held until `finish_cancel`.
    pub chains: Vec<i64>,
    /// One scancel per owner: as whom, and the live jobs (an array's tasks together).
    scancels: Vec<(Option<RunAs>, Vec<String>)>,
    /// The request's span (see `requests::span`), entered again when the answer is made.
    pub span: tracing::Span,
}

/// What `begin_cancel` made of a request.
#[derive(Debug)]
pub enum BegunCancel {
    /// No job to stop: the cancel is recorded and answered.
    Done(Response),
    /// Jobs to stop first: run `run_scancels`, then `finish_cancel`.
    Scancel(PendingCancel),
}

/// What a cancel would record now: each open chain's transition (its live attempt ends
/// with it), and the live jobs to scancel, by owner.
type Plan = (
    Vec<(i64, crate::domain::policy::Transition)>,
    BTreeMap<u32, Vec<String>>,
);

fn plan(store: &Store, config: &Config, chains: &[Chain], uid: u32, t: i64) -> Handled<Plan> {
    let who = actor(uid);
    let ctx = crate::domain::policy::Context::at(t);
    let mut live_by_owner: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut items = Vec::with_capacity(chains.len());
    for c in chains {
        let live = store
            .attempts(c.id)?
            .into_iter()
            .find(|a| a.state == crate::store::AttemptState::Live);
        let job = live.as_ref().and_then(|a| a.slurm_job_id.clone());
        let event = crate::domain::policy::Event::Cancelled {
            job: job.as_deref(),
            actor: &who,
        };
        let Ok(tr) = crate::domain::policy::transition(c, event, config, &ctx) else {
            continue; // already ended
        };
        for e in &tr.effects {
            if let crate::domain::policy::Effect::Scancel(j) = e {
                live_by_owner
                    .entry(store.owner_of(c.id)?)
                    .or_default()
                    .push(j.clone());
            }
        }
        items.push((c.id, tr));
    }
    Ok((items, live_by_owner))
}

/// Refuses a request that would change a chain a cancel holds (its scancel has not
/// answered yet): the one check of every request that changes chains.
pub(super) fn refuse_held<'c>(
    holds: &Holds,
    chains: impl IntoIterator<Item = &'c Chain>,
) -> Result<(), Response> {
    match chains.into_iter().find(|c| holds.contains(c.id)) {
        Some(c) => Err(being_cancelled(c.id)),
        None => Ok(()),
    }
}

/// The answer to a request about a chain whose cancel waits for its scancel.
fn being_cancelled(chain: i64) -> Response {
    let c = chain_label(chain);
    Response::error(
        ErrorKind::Unavailable,
        format!(
            "{c} is being cancelled already (its scancel has not answered yet); nothing changed, check `supervisorctl status {c}` in a moment"
        ),
    )
}

fn ended(id: &str) -> Response {
    Response::error(
        ErrorKind::Conflict,
        format!("{id} has already ended; nothing to cancel"),
    )
}

/// Checks a cancel and decides what to stop. Chains with no live job are cancelled here
/// and then; otherwise the scancel is left to run beside the loop.
pub fn begin_cancel(
    store: &mut Store,
    config: &Config,
    holds: &Holds,
    id: &str,
    uid: u32,
    span: tracing::Span,
) -> Handled<BegunCancel> {
    let chains = chains_for(store, id, uid)?;
    refuse_held(holds, chains.iter().filter(|c| c.state.is_open()))?;
    for c in chains.iter().filter(|c| c.state.is_open()) {
        // A launch whose sbatch gave no answer may have created a job that the next cycle
        // will find by its tag and adopt; cancelling the chain now would leave that job
        // running and the chain brought back to `active` by the adoption.
        let launching = store
            .attempts(c.id)?
            .iter()
            .any(|a| a.state == crate::store::AttemptState::Launching);
        if launching {
            return Err(Response::error(
                ErrorKind::Unavailable,
                format!(
                    "{} is being submitted and Slurm has not confirmed its job yet; nothing changed, try again after the next poll",
                    chain_label(c.id)
                ),
            ));
        }
    }
    // The chains that have not ended yet, each with its transition; one scancel per
    // owner for every live job of the request (an array's tasks together), then one
    // transaction for all the chains: either all are recorded cancelled or, if scancel
    // fails, none changes.
    let t = now();
    let (items, live_by_owner) = plan(store, config, &chains, uid, t)?;
    if items.is_empty() {
        return Err(ended(id));
    }
    if live_by_owner.is_empty() {
        let done = store.apply(&Batch::each(items), t)?;
        return Ok(BegunCancel::Done(answer(done.chains)));
    }
    let mut scancels = Vec::with_capacity(live_by_owner.len());
    for (owner, jobs) in live_by_owner {
        let who = crate::daemon::sbatch::run_as(owner)
            .map_err(|e| Response::error(ErrorKind::Internal, e))?;
        scancels.push((who, jobs));
    }
    Ok(BegunCancel::Scancel(PendingCancel {
        id: id.to_string(),
        uid,
        chains: items.iter().map(|(c, _)| *c).collect(),
        scancels,
        span,
    }))
}

/// The scancels of a cancel, each as the jobs' owner (beside the loop). The first that
/// fails ends it, saying which, and "nothing changed" only when nothing can have: a
/// scancel that gave no answer (killed at its timeout, its reply lost) may have cancelled
/// its jobs, and so did the scancels before it; the next poll records what Slurm did.
pub async fn run_scancels<S: Slurm>(runner: &Runner<S>, p: &PendingCancel) -> Result<(), String> {
    let mut done: Vec<&str> = Vec::new();
    for (who, jobs) in &p.scancels {
        if let Err(e) = runner.scancel(jobs, who.as_ref()).await {
            let e: SlurmError = e;
            let jobs = jobs.join(" ");
            let unsure = e.may_have_reached_slurm();
            if done.is_empty() && !unsure {
                return Err(format!("scancel {jobs} failed, nothing changed: {e}"));
            }
            let mut what = if unsure {
                format!("scancel {jobs} gave no sure answer ({e}): they may have been cancelled")
            } else {
                format!("scancel {jobs} failed ({e})")
            };
            if !done.is_empty() {
                what.push_str(&format!("; {} were cancelled before it", done.join(" ")));
            }
            return Err(format!(
                "{what}; nothing is recorded yet, the next poll records what Slurm did (see `supervisorctl status {}`)",
                p.id
            ));
        }
        done.extend(jobs.iter().map(String::as_str));
    }
    Ok(())
}

/// Records a cancel whose scancels answered `scancelled`: decided again from the chains as
/// they are now (one may have ended meanwhile; none was relaunched, being cancelling).
pub fn finish_cancel(
    store: &mut Store,
    config: &Config,
    p: &PendingCancel,
    scancelled: Result<(), String>,
) -> Response {
    let result = (|| -> Handled<CancelAnswer> {
        scancelled.map_err(|e| Response::error(ErrorKind::Unavailable, e))?;
        let mut chains = Vec::with_capacity(p.chains.len());
        for &c in &p.chains {
            chains.extend(store.chain(c)?);
        }
        let t = now();
        let (items, live_by_owner) = plan(store, config, &chains, p.uid, t)?;
        // Only the jobs just cancelled can be live still (a cancelling chain gets no new
        // attempt): a chain with another live job is left as it is, never recorded
        // cancelled while a job of its runs.
        let stopped: std::collections::HashSet<&String> =
            p.scancels.iter().flat_map(|(_, jobs)| jobs).collect();
        let unstopped: std::collections::HashSet<&String> = live_by_owner
            .values()
            .flatten()
            .filter(|j| !stopped.contains(j))
            .collect();
        if !unstopped.is_empty() {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!(
                    "{} has a job the cancel did not stop ({}); nothing recorded, cancel again",
                    p.id,
                    unstopped.into_iter().cloned().collect::<Vec<_>>().join(" ")
                ),
            ));
        }
        if items.is_empty() {
            return Err(ended(&p.id));
        }
        Ok(answer_of(store.apply(&Batch::each(items), t)?.chains))
    })();
    result.map(|a| Response::answer(&a)).unwrap_or_else(|e| e)
}

fn answer_of(done: Vec<i64>) -> CancelAnswer {
    CancelAnswer {
        cancelled: done.into_iter().map(chain_label).collect(),
    }
}

fn answer(done: Vec<i64>) -> Response {
    Response::answer(&answer_of(done))
}
