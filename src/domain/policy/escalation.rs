//! Resource escalation: the resources of the next automatic attempt.
//!
//! Memory after an OOM is the larger of ReqMem times a factor and MaxRSS times a
//! headroom, capped; time after a TIMEOUT is the limit times a factor, capped by the admin
//! and by the partition's MaxTime, in whole minutes; a failed node is excluded; nodes in
//! quarantine are avoided by every retry.

use super::reason::{Change, Reason};
use super::table::Resources;
use super::{ChainHistory, Context};
use crate::config::Config;
use crate::domain::classify::Verdict;
use crate::domain::model::RetryPlan;

const MIB: u64 = 1024 * 1024;

/// The changes for the next attempt (on top of the chain's plan so far) and how the reason
/// tells them; or why no better resources can be computed.
pub fn next_resources(
    resources: Resources,
    verdict: &Verdict,
    history: &ChainHistory,
    config: &Config,
    ctx: &Context,
) -> Result<(RetryPlan, Vec<Change>), Reason> {
    let mut next = RetryPlan::default();
    let mut changes = Vec::new();
    match resources {
        Resources::Unchanged => {}
        Resources::MoreMemory => {
            let (from_mib, to_mib) = more_memory(verdict, history, config)?;
            next.mem_mb = Some(to_mib);
            changes.push(Change::Memory { from_mib, to_mib });
        }
        Resources::MoreTime => {
            let (from_secs, to_secs) = more_time(verdict, history, config, ctx)?;
            next.time_secs = Some(to_secs);
            changes.push(Change::TimeLimit { from_secs, to_secs });
        }
        Resources::ExcludeNode => {
            if let Some(n) = &verdict.nodes {
                next.exclude.push(n.clone());
                changes.push(Change::Exclude(n.clone()));
            }
        }
    }
    let fresh: Vec<String> = ctx
        .quarantined
        .iter()
        .filter(|n| !history.plan.exclude.contains(n) && !next.exclude.contains(n))
        .cloned()
        .collect();
    if !fresh.is_empty() {
        next.exclude.extend(fresh.iter().cloned());
        changes.push(Change::AvoidQuarantined(fresh));
    }
    Ok((next, changes))
}

/// Memory in MiB: (now, next).
fn more_memory(
    verdict: &Verdict,
    history: &ChainHistory,
    config: &Config,
) -> Result<(u64, u64), Reason> {
    let e = &config.escalation;
    let current = verdict
        .req_mem_bytes
        .or(history.plan.mem_mb.map(|m| m * MIB))
        .ok_or_else(|| Reason::MemoryUnknown {
            verdict: verdict.reason.clone(),
        })?;
    let by_factor = current as f64 * e.mem_factor;
    let by_rss = verdict.max_rss_bytes.unwrap_or(0) as f64 * e.mem_headroom;
    let want = by_factor.max(by_rss).min(e.mem_max_bytes as f64) as u64;
    let (from_mib, to_mib) = (current.div_ceil(MIB), want.div_ceil(MIB));
    if to_mib <= from_mib {
        return Err(Reason::MemoryAtCap {
            verdict: verdict.reason.clone(),
            mib: from_mib,
        });
    }
    Ok((from_mib, to_mib))
}

/// Time limit in seconds: (now, next).
fn more_time(
    verdict: &Verdict,
    history: &ChainHistory,
    config: &Config,
    ctx: &Context,
) -> Result<(u64, u64), Reason> {
    let current = verdict
        .timelimit_secs
        .or(history.plan.time_secs)
        .ok_or_else(|| Reason::TimeLimitUnknown {
            verdict: verdict.reason.clone(),
        })?;
    let mut cap = config.escalation.time_max.as_secs();
    if let Some(p) = ctx.partition_max_secs {
        cap = cap.min(p);
    }
    let want = ((current as f64 * config.escalation.time_factor) as u64).min(cap);
    // Slurm limits are whole minutes.
    let want = want / 60 * 60;
    if want <= current {
        return Err(Reason::TimeLimitAtCap {
            verdict: verdict.reason.clone(),
            secs: current,
            partition_max_secs: ctx.partition_max_secs,
        });
    }
    Ok((current, want))
}
