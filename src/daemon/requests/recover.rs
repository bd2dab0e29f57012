//! `recover`: a person asks for a failed or `pending_failed` chain to be retried.

use super::resolution::{commit, plan_from, preview, transitions};
use super::Plan;
use crate::clock::now;
use crate::daemon::access::{actor, chains_for, Handled};
use crate::daemon::engine::Engine;
use crate::policy::Event;
use crate::protocol::views::{RecoverAnswer, RecoverDryRun, RecoverReply, SbatchPreview};
use crate::protocol::{RecoverRequest, Request, Response};
use crate::slurm::Slurm;

impl super::Write for RecoverRequest {
    const MAY_MAKE_RETRY_DUE: bool = true;

    fn into_request(self) -> Request {
        Request::Recover(self)
    }

    async fn begin<S: Slurm>(self, engine: &mut Engine<S>, uid: u32, _: tracing::Span) -> Plan {
        Plan::answered(recover(engine, self, uid))
    }
}

fn recover<S: Slurm>(engine: &mut Engine<S>, r: RecoverRequest, uid: u32) -> Handled<RecoverReply> {
    super::resolution::check_sizes(
        r.reason.as_deref(),
        &[r.mem.as_deref(), r.time.as_deref()],
        &[],
    )?;
    let chains = chains_for(engine.store(), &r.id, uid)?;
    let extra = plan_from(
        engine.config(),
        r.mem.as_deref(),
        r.time.as_deref(),
        None,
        &[],
    )?;
    let t = now();
    let who = actor(uid);
    let event = Event::Recovered {
        request: &r,
        plan: &extra,
        actor: &who,
    };
    let items = transitions(engine, &chains, event, t)?;
    // Previewed first, dry run or not, so a retry sbatch would refuse is turned down here.
    let previews: Result<Vec<SbatchPreview>, Response> = chains
        .iter()
        .map(|c| preview(engine, c, &c.plan.merged(&extra)))
        .collect();
    let previews = previews?;
    if r.dry_run {
        return Ok(RecoverReply::DryRun(RecoverDryRun {
            dry_run: true,
            would_run: previews,
        }));
    }
    let done = commit(engine, items, t, "changed state meanwhile; look again")?;
    Ok(RecoverReply::Done(RecoverAnswer { recovering: done }))
}
