//! `classify`: an agent's or a person's resolution of a `pending_failed` chain: retry
//! (with resources of their choice), fail, or hold for a person.

use super::resolution::{commit, plan_from, preview, transitions, usage};
use super::Plan;
use crate::daemon::access::Caller;
use crate::daemon::access::{actor, chains_for, Handled};
use crate::daemon::engine::Desk;
use crate::domain::model::Action;
use crate::domain::policy::{self, Event};
use crate::plumbing::clock::now;
use crate::protocol::views::{ClassifyAnswer, ClassifyDryRun, ClassifyReply, PlannedResolution};
use crate::protocol::{ErrorKind, Request, Resolution, ResolveAction, Response};
use crate::slurm::Slurm;
use crate::store::{chain_label, Store};

impl super::Write for Resolution {
    const MAY_MAKE_RETRY_DUE: bool = true;

    fn into_request(self) -> Request {
        Request::Classify(self)
    }

    async fn begin<S: Slurm>(
        self,
        desk: &mut Desk<'_, S>,
        Caller { uid, .. }: Caller,
        _: tracing::Span,
    ) -> Plan {
        Plan::answered(classify(desk, self, uid))
    }
}

fn classify<S>(desk: &mut Desk<'_, S>, r: Resolution, uid: u32) -> Handled<ClassifyReply> {
    super::resolution::check_sizes(
        Some(&r.reason),
        &[r.mem.as_deref(), r.time.as_deref(), r.partition.as_deref()],
        &r.exclude,
    )?;
    if r.reason.trim().is_empty() {
        return Err(usage(
            "a resolution needs a --reason, which is recorded".into(),
        ));
    }
    if r.action != ResolveAction::Retry
        && (r.mem.is_some() || r.time.is_some() || r.partition.is_some() || !r.exclude.is_empty())
    {
        return Err(usage(
            "--mem, --time, --partition and --exclude go with --action retry only".into(),
        ));
    }
    if r.confidence.is_some_and(|c| !(0.0..=1.0).contains(&c)) {
        return Err(usage("--confidence is a number between 0.0 and 1.0".into()));
    }
    let chains = chains_for(desk.store, &r.id, uid)?;
    let extra = plan_from(
        desk.config,
        r.mem.as_deref(),
        r.time.as_deref(),
        r.partition.as_deref(),
        &r.exclude,
    )?;
    let t = now();
    let who = actor(uid);
    let event = Event::Resolved {
        resolution: &r,
        plan: &extra,
        actor: &who,
    };
    let items = transitions(desk.config, &desk.holds, &chains, event, t)?;
    // The action every chain gets (a hold when the resolver was unsure): the same for all.
    let action = items
        .first()
        .map(|(_, tr)| policy::resolution_action(tr))
        .unwrap_or(r.action);
    // A hold of a chain already held changes nothing, so it writes nothing: a record per
    // repeated request would let anyone grow the store (and the journal) without end.
    let (chains, items) = if action == ResolveAction::Hold {
        let mut keep = (Vec::new(), Vec::new());
        for (c, item) in chains.into_iter().zip(items) {
            if !held(desk.store, c.id)? {
                keep.0.push(c);
                keep.1.push(item);
            }
        }
        if keep.0.is_empty() {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!(
                    "{} is already held for a person (its latest decision is a hold); nothing changed: \
                     resolve it with --action retry or --action fail",
                    r.id
                ),
            ));
        }
        keep
    } else {
        (chains, items)
    };
    // A retry is previewed for every chain first, dry run or not: one that sbatch would
    // refuse is turned down here, before any of them is recorded.
    let mut resolutions = Vec::new();
    for (c, (_, tr)) in chains.iter().zip(&items) {
        let would_run = match action {
            ResolveAction::Retry => {
                Some(preview(desk.store, desk.config, c, &c.plan.merged(&extra))?)
            }
            ResolveAction::Fail | ResolveAction::Hold => None,
        };
        resolutions.push(PlannedResolution {
            chain: chain_label(c.id),
            action,
            reason: tr
                .record
                .as_ref()
                .map(|d| d.reason.to_string())
                .unwrap_or_default(),
            would_run,
        });
    }
    if r.dry_run {
        return Ok(ClassifyReply::DryRun(ClassifyDryRun {
            dry_run: true,
            resolutions,
        }));
    }
    let done = commit(
        desk.store,
        &desk.config.limits,
        items,
        t,
        "was resolved by someone else first; nothing changed",
    )?;
    Ok(ClassifyReply::Done(ClassifyAnswer {
        resolved: done,
        action,
    }))
}

/// Whether a chain's latest decision holds it for a person (as the agent and `pending`
/// read it).
fn held(store: &Store, chain: i64) -> Result<bool, Response> {
    Ok(store
        .last_decision(chain)?
        .is_some_and(|d| d.action == Action::Hold))
}
