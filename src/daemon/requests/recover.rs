//! `recover`: a person asks for a failed or `pending_failed` chain to be retried.

use super::resolution::{commit, plan_from, preview, transitions};
use super::Plan;
use crate::daemon::access::Caller;
use crate::daemon::access::{actor, chains_for, Handled};
use crate::daemon::engine::Desk;
use crate::domain::policy::Event;
use crate::plumbing::clock::now;
use crate::protocol::views::{RecoverAnswer, RecoverDryRun, RecoverReply, SbatchPreview};
use crate::protocol::{RecoverRequest, Request, Response};
use crate::slurm::Slurm;

impl super::Write for RecoverRequest {
    const MAY_MAKE_RETRY_DUE: bool = true;

    fn into_request(self) -> Request {
        Request::Recover(self)
    }

    async fn begin<S: Slurm>(
        self,
        desk: &mut Desk<'_, S>,
        Caller { uid, .. }: Caller,
        _: tracing::Span,
    ) -> Plan {
        Plan::answered(recover(desk, self, uid))
    }
}

fn recover<S>(desk: &mut Desk<'_, S>, r: RecoverRequest, uid: u32) -> Handled<RecoverReply> {
    super::resolution::check_sizes(
        r.reason.as_deref(),
        &[r.mem.as_deref(), r.time.as_deref()],
        &[],
    )?;
    let chains = chains_for(desk.store, &r.id, uid)?;
    let extra = plan_from(desk.config, r.mem.as_deref(), r.time.as_deref(), None, &[])?;
    let t = now();
    let who = actor(uid);
    let event = Event::Recovered {
        request: &r,
        plan: &extra,
        actor: &who,
    };
    let items = transitions(desk.config, &desk.holds, &chains, event, t)?;
    // Previewed first, dry run or not, so a retry sbatch would refuse is turned down here.
    let previews: Result<Vec<SbatchPreview>, Response> = chains
        .iter()
        .map(|c| preview(desk.store, desk.config, c, &c.plan.merged(&extra)))
        .collect();
    let previews = previews?;
    if r.dry_run {
        return Ok(RecoverReply::DryRun(RecoverDryRun {
            dry_run: true,
            would_run: previews,
        }));
    }
    let done = commit(
        desk.store,
        &desk.config.limits,
        items,
        t,
        "changed state meanwhile; look again",
    )?;
    Ok(RecoverReply::Done(RecoverAnswer { recovering: done }))
}
