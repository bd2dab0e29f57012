//! `cancel`: stops a chain (every task of an array together): scancel first, then one
//! transaction; if scancel fails, nothing changes.

use crate::daemon::access::{actor, chains_for, Handled};
use crate::daemon::engine::ScancelError;
use crate::daemon::engine::{now, Engine};
use crate::protocol::views::CancelAnswer;
use crate::protocol::{ErrorKind, Response};
use crate::slurm::Slurm;
use crate::store::chain_label;

pub(super) async fn cancel<S: Slurm>(
    engine: &mut Engine<S>,
    id: &str,
    uid: u32,
) -> Handled<CancelAnswer> {
    let chains = chains_for(engine.store(), id, uid)?;
    // A launch whose sbatch gave no answer may have created a job that the next cycle
    // will find by its tag and adopt; cancelling the chain now would leave that job
    // running and the chain brought back to `active` by the adoption.
    for c in chains.iter().filter(|c| c.state.is_open()) {
        let launching = engine
            .store()
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
    let who = actor(uid);
    let ctx = crate::policy::Context::at(t);
    let mut live_by_owner: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
    let mut items = Vec::with_capacity(chains.len());
    for c in &chains {
        let live = engine
            .store()
            .attempts(c.id)?
            .into_iter()
            .find(|a| a.state == crate::store::AttemptState::Live);
        let job = live.as_ref().and_then(|a| a.slurm_job_id.clone());
        let event = crate::policy::Event::Cancelled {
            job: job.as_deref(),
            actor: &who,
        };
        let Ok(tr) = crate::policy::transition(c, event, engine.config(), &ctx) else {
            continue; // already ended
        };
        for e in &tr.effects {
            if let crate::policy::Effect::Scancel(j) = e {
                live_by_owner
                    .entry(engine.store().owner_of(c.id)?)
                    .or_default()
                    .push(j.clone());
            }
        }
        items.push((c.id, live.map(|a| a.n), tr));
    }
    if items.is_empty() {
        return Err(Response::error(
            ErrorKind::Conflict,
            format!("{id} has already ended; nothing to cancel"),
        ));
    }
    for (owner, jobs) in &live_by_owner {
        engine.scancel(*owner, jobs).await.map_err(|e| match e {
            ScancelError::NoAccount(e) => Response::error(ErrorKind::Internal, e),
            ScancelError::Slurm(e) => Response::error(
                ErrorKind::Unavailable,
                format!("scancel {} failed, nothing changed: {e}", jobs.join(" ")),
            ),
        })?;
    }
    let done = engine.store_mut().cancel_chains(&items, t)?;
    Ok(CancelAnswer {
        cancelled: done.into_iter().map(chain_label).collect(),
    })
}
