//! What `classify` and `recover` share: the resources a resolver asks for, the preview of
//! the retry, and the transitions of every chain a request names, committed as one
//! transaction. Each resolution is a new decision record pointing at the one it
//! resolves; a chain changes only if it is still where the caller saw it, so two
//! resolvers racing cannot both win.

use crate::config::{Config, LimitsConfig};
use crate::daemon::access::internal;
use crate::daemon::engine::{self, Holds};
use crate::daemon::sbatch;
use crate::domain::model::RetryPlan;
use crate::domain::policy::{self, Event, Transition};
use crate::protocol::views::SbatchPreview;
use crate::protocol::{ErrorKind, Response};
use crate::store::{chain_label, Chain, Store};

pub(super) fn usage(m: String) -> Response {
    Response::error(ErrorKind::Usage, m)
}

/// The longest `--reason` a resolution may give, in bytes: it is stored in the decision
/// record for good (records are never edited), and shown in `history`, `pending` and the
/// agent's prompt. A paragraph fits; a file pasted in does not.
pub const MAX_REASON_BYTES: usize = 4096;

/// The longest `--mem`, `--time`, `--partition` value, or node name in `--exclude`.
const MAX_FIELD_BYTES: usize = 256;

/// The most nodes one `--exclude` may name.
const MAX_EXCLUDED: usize = 1024;

/// Refuses a resolution whose text is larger than anything it needs to be: every string a
/// user gives a resolution is stored, so each is bounded here, before anything is decided.
pub(super) fn check_sizes(
    reason: Option<&str>,
    fields: &[Option<&str>],
    exclude: &[String],
) -> Result<(), Response> {
    if let Some(r) = reason.filter(|r| r.len() > MAX_REASON_BYTES) {
        return Err(usage(format!(
            "the --reason is {} bytes; at most {MAX_REASON_BYTES} are kept in a decision record: say it in a paragraph, and point at a file for the rest",
            r.len()
        )));
    }
    if let Some(f) = fields.iter().flatten().find(|f| f.len() > MAX_FIELD_BYTES) {
        return Err(usage(format!(
            "a value of {} bytes is not a memory size, time, partition or node name (at most {MAX_FIELD_BYTES})",
            f.len()
        )));
    }
    if exclude.len() > MAX_EXCLUDED || exclude.iter().any(|n| n.len() > MAX_FIELD_BYTES) {
        return Err(usage(format!(
            "--exclude names {} nodes; at most {MAX_EXCLUDED}, each at most {MAX_FIELD_BYTES} bytes",
            exclude.len()
        )));
    }
    Ok(())
}

/// The resources a resolver asked for, checked against the admin's caps.
pub(super) fn plan_from(
    config: &crate::config::Config,
    mem: Option<&str>,
    time: Option<&str>,
    partition: Option<&str>,
    exclude: &[String],
) -> Result<RetryPlan, Response> {
    let mut plan = RetryPlan {
        partition: partition.map(str::to_string),
        exclude: exclude.to_vec(),
        ..Default::default()
    };
    if let Some(m) = mem {
        let bytes = crate::config::parse_mem_size(m).map_err(usage)?;
        if bytes > config.escalation.mem_max_bytes {
            return Err(usage(format!(
                "--mem {m} is above the admin cap escalation.mem_max ({} MiB)",
                config.escalation.mem_max_bytes >> 20
            )));
        }
        plan.mem_mb = Some(bytes.div_ceil(1 << 20));
    }
    if let Some(t) = time {
        let secs = crate::slurm::parse::parse_duration_secs(t).ok_or_else(|| {
            usage(format!(
                "invalid time limit {t:?}: use Slurm's form, e.g. 30, 2:00:00 or 1-00:00:00"
            ))
        })?;
        if secs > config.escalation.time_max.as_secs() {
            return Err(usage(format!(
                "--time {t} is above the admin cap escalation.time_max ({}s)",
                config.escalation.time_max.as_secs()
            )));
        }
        plan.time_secs = Some(secs);
    }
    Ok(plan)
}

/// What a retry of `chain` with `plan` would run; a retry sbatch would refuse is a usage
/// error, before anything is recorded.
pub(super) fn preview(
    store: &Store,
    config: &Config,
    c: &Chain,
    plan: &RetryPlan,
) -> Result<SbatchPreview, Response> {
    let sub = store.submission(c.submission_id)?;
    let argv = sbatch::preview_argv(store, config, &sub, c, plan).map_err(|e| match e {
        sbatch::PrepareError::Args(e) => usage(format!("{}: {e}", chain_label(c.id))),
        sbatch::PrepareError::Dependency(e) => {
            usage(format!("{}: --dependency: {e}", chain_label(c.id)))
        }
        e => internal(e),
    })?;
    Ok(SbatchPreview {
        chain: chain_label(c.id),
        cwd: crate::plumbing::osbytes::escape(&sub.cwd).into_owned(),
        command: std::iter::once("sbatch".to_string())
            .chain(
                argv.iter()
                    .map(|a| crate::plumbing::osbytes::escape(a).into_owned()),
            )
            .collect(),
    })
}

/// The transitions of `event` for every chain, or the first chain's refusal as a conflict.
/// A chain whose cancel is under way (its scancel runs) is not resolved meanwhile.
pub(super) fn transitions(
    config: &Config,
    holds: &Holds,
    chains: &[Chain],
    event: Event,
    t: i64,
) -> Result<Vec<(i64, Transition)>, Response> {
    super::cancel::refuse_held(holds, chains)?;
    let ctx = policy::Context::at(t);
    chains
        .iter()
        .map(|c| {
            policy::transition(c, event, config, &ctx)
                .map(|tr| (c.id, tr))
                .map_err(|r| {
                    Response::error(ErrorKind::Conflict, format!("{} {r}", chain_label(c.id)))
                })
        })
        .collect()
}

/// Refuses records that would take a user past `limits.max_stored_bytes_per_user`: those
/// of resolutions that keep a chain open (a retry, a hold) count in its owner's totals.
/// A resolution that ends a chain frees what it kept, and is never refused for room.
fn room_for_records(
    store: &Store,
    limits: &LimitsConfig,
    items: &[(i64, Transition)],
) -> Result<(), Response> {
    let mut by_owner: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
    for (c, tr) in items {
        let Some(d) = tr.record.as_ref().filter(|_| tr.update.state.is_open()) else {
            continue;
        };
        let bytes =
            d.reason.to_string().len() + serde_json::to_string(&d.inputs).map_or(0, |s| s.len());
        *by_owner.entry(store.owner_of(*c)?).or_default() += bytes as u64;
    }
    for (owner, bytes) in by_owner {
        let totals = store.user_totals(owner)?;
        super::submit::check_bytes(limits, &totals, bytes, "this decision record")?;
    }
    Ok(())
}

/// Records the transitions of a request as one transaction: an array's chains change
/// together or not at all.
pub(super) fn commit(
    store: &mut Store,
    limits: &LimitsConfig,
    items: Vec<(i64, Transition)>,
    t: i64,
    moved: &str,
) -> Result<Vec<String>, Response> {
    room_for_records(store, limits, &items)?;
    let mut ready = Vec::with_capacity(items.len());
    for (c, tr) in items {
        let with = engine::chain_span(c).in_scope(|| engine::with_dependents(store, c, tr))?;
        ready.push((c, with));
    }
    let ready = crate::store::Batch::all(ready);
    if let Some(c) = store.apply(&ready, t)?.moved {
        return Err(Response::error(
            ErrorKind::Conflict,
            format!("{} {moved}", chain_label(c)),
        ));
    }
    Ok(ready
        .steps
        .into_iter()
        .map(|(c, _)| chain_label(c))
        .collect())
}
