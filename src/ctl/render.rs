//! Human-readable output of the read commands, from the daemon's typed answers (the
//! `--json` forms print the daemon's answer unchanged).

use crate::protocol::views::{ChainHistory, ChainRow, ClusterAnswer, PendingChain, StatsAnswer};
use std::fmt::{Display, Write};

/// An optional value, `-` when there is none.
fn s<T: Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn time(v: Option<i64>) -> String {
    v.map(format_unix).unwrap_or_else(|| "-".into())
}

pub use crate::plumbing::clock::format_unix;

pub fn status_table(rows: &[ChainRow]) -> String {
    let mut out = String::new();
    let header = ["CHAIN", "STATE", "JOB", "SLURM", "ATTEMPTS", "LAST"];
    let mut table: Vec<[String; 6]> = vec![header.map(String::from)];
    for r in rows {
        let c = &r.chain;
        table.push([
            c.id.clone(),
            c.state.to_string(),
            s(c.slurm_job_id.as_ref()),
            s(c.slurm_state.as_ref()),
            // Continuations are attempts too, but not failures: said apart.
            if r.continuations > 0 {
                format!("{} ({} continued)", r.attempts, r.continuations)
            } else {
                r.attempts.to_string()
            },
            s(c.last_classification),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| table.iter().map(|row| row[i].len()).max().unwrap_or(0))
        .collect();
    for row in &table {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

pub fn history_text(h: &ChainHistory) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "chain {}  state {}  last {}",
        h.chain.id,
        h.chain.state,
        s(h.chain.last_classification)
    );
    // The pipeline edges: which chains it waits on, and which wait on it.
    let list = |v: &[String]| v.join(", ");
    if !h.chain.depends_on.is_empty() {
        let _ = writeln!(out, "waits on: {}", list(&h.chain.depends_on));
    }
    if !h.chain.dependents.is_empty() {
        let _ = writeln!(out, "waited on by: {}", list(&h.chain.dependents));
    }
    if !h.not_recovered.is_empty() {
        // Adopted from Slurm: what its retries lack is said, never guessed.
        let _ = writeln!(out, "not recovered from Slurm:");
        for n in &h.not_recovered {
            let _ = writeln!(out, "  {n}");
        }
    }
    let _ = writeln!(out, "attempts:");
    for a in &h.attempts {
        let _ = writeln!(
            out,
            "  #{} job {}{}  {} exit {}  nodes {}  mem {}  time {}  submitted {}",
            a.n,
            s(a.slurm_job_id.as_ref()),
            if a.in_place {
                " (requeued in place)"
            } else {
                ""
            },
            s(a.slurm_state.as_ref()),
            s(a.exit_code.as_ref()),
            s(a.nodes.as_ref()),
            s(a.mem.as_ref()),
            s(a.time_limit.as_ref()),
            time(a.submitted_at),
        );
        if let Some(sig) = &a.signature {
            signature_lines(&mut out, "    ", sig, a.signature_text.as_deref());
        }
    }
    let _ = writeln!(out, "decisions:");
    for d in &h.decisions {
        let _ = writeln!(
            out,
            "  {}  attempt {}  {} {} -> {}  by {}: {}",
            format_unix(d.at),
            d.attempt,
            d.class,
            d.classification,
            d.action,
            d.actor,
            d.reason,
        );
        if let Some(p) = &d.proposal {
            let _ = writeln!(
                out,
                "    by a rule from proposal {p} (`supervisorctl rules --history`)"
            );
        }
    }
    out
}

/// A failure signature (docs/rules.md): its id, then its masked stderr lines.
fn signature_lines(out: &mut String, indent: &str, id: &str, text: Option<&str>) {
    let _ = writeln!(out, "{indent}signature {id}");
    for l in text.unwrap_or_default().lines() {
        let _ = writeln!(out, "{indent}  | {l}");
    }
}

pub fn pending_text(rows: &[PendingChain]) -> String {
    let mut out = String::new();
    if rows.is_empty() {
        out.push_str("nothing is waiting for a decision\n");
    }
    for r in rows {
        let c = &r.row.chain;
        let _ = writeln!(
            out,
            "{}  job {}  {}",
            c.id,
            s(c.slurm_job_id.as_ref()),
            s(c.last_classification)
        );
        let ev = &r.evidence;
        if let Some(d) = ev.decisions.last() {
            let _ = writeln!(out, "  why: {}", d.reason);
        }
        if let Some(a) = ev.attempts.iter().rev().find(|a| a.signature.is_some()) {
            let sig = a.signature.as_deref().unwrap_or_default();
            signature_lines(&mut out, "  ", sig, a.signature_text.as_deref());
        }
        if let Some(tail) = &ev.stderr_tail {
            let _ = writeln!(out, "  stderr (last lines):");
            for l in tail
                .lines()
                .rev()
                .take(10)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
            {
                let _ = writeln!(out, "    {l}");
            }
        }
        let _ = writeln!(
            out,
            "  resolve: supervisorctl classify {} --action retry|fail --reason TEXT",
            c.id
        );
    }
    out
}

pub fn stats_text(v: &StatsAnswer) -> String {
    let t = &v.total;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "chains: {}  ({})",
        t.chains,
        t.by_state
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(out, "automatic retries: {}", t.automatic_retries);
    let _ = writeln!(
        out,
        "agent resolutions: {} ({} retries)",
        t.agent_resolutions, t.agent_retries
    );
    let _ = writeln!(
        out,
        "agent retries that then succeeded: {} chains; did not: {}; still running: {}",
        t.recovered_successfully, t.not_recovered, t.recovery_in_progress
    );
    out
}

/// A length of time ago, for people: `12s`, `5m`, `3h`, `2d`.
fn ago(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s ago"),
        s if s < 7200 => format!("{}m ago", s / 60),
        s if s < 172_800 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86400),
    }
}

/// `cluster`'s exit code: 1 when no daemon acts (the lease is free or expired, or this
/// daemon has not read it), 0 otherwise, a single node included: a check for monitoring.
pub fn cluster_exit(v: &ClusterAnswer) -> i32 {
    let acts = v.mode == "single" || v.lease.as_ref().is_some_and(|l| l.active_node.is_some());
    if acts {
        0
    } else {
        1
    }
}

/// `cluster`: the lease, then one line per daemon.
pub fn cluster_text(v: &ClusterAnswer) -> String {
    let mut out = String::new();
    if v.mode == "single" {
        let _ = writeln!(
            out,
            "single node: the daemon on {} keeps its store in SQLite and always acts (cluster mode is off: no [store] section)",
            v.answered_by
        );
        return out;
    }
    match &v.lease {
        Some(l) => match &l.active_node {
            Some(node) => {
                let _ = writeln!(
                    out,
                    "active: {node}, epoch {}, since {}, lease left {}s",
                    l.epoch,
                    time(l.since),
                    l.left_secs
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "active: none (the lease of epoch {} is free or expired; a standby takes it within a third of a lease)",
                    l.epoch
                );
            }
        },
        None => {
            let _ = writeln!(
                out,
                "active: not known yet (this daemon has not read the lease)"
            );
        }
    }
    if let Some(e) = &v.error {
        let _ = writeln!(
            out,
            "the shared database, last time {} asked: {e}",
            v.answered_by
        );
    }
    let _ = writeln!(
        out,
        "{:<20} {:<8} {:>6}  {:<10} {:<11} HEARTBEAT",
        "NODE", "ROLE", "EPOCH", "STARTED", "LAST CYCLE"
    );
    for n in &v.nodes {
        let heartbeat = if n.this {
            "(answering)".to_string()
        } else if n.silent {
            format!("{} (silent)", ago(n.heartbeat_secs_ago))
        } else {
            ago(n.heartbeat_secs_ago)
        };
        let _ = writeln!(
            out,
            "{:<20} {:<8} {:>6}  {:<10} {:<11} {heartbeat}",
            n.node,
            n.role,
            s(n.epoch),
            ago(n.started_secs_ago),
            n.last_cycle_secs_ago.map_or_else(|| "-".to_string(), ago),
        );
    }
    out
}

/// A decision about a rule proposal in one line: what, for whom, who, when, why. The
/// reason is a user's text: shown escaped, on the line.
fn rule_record_line(r: &crate::domain::learn::RuleRecord) -> String {
    let why = if r.reason.is_empty() {
        String::new()
    } else {
        format!(": {:?}", r.reason)
    };
    let whom = if r.owner_uid.is_none() {
        "everyone".to_string()
    } else {
        format!("the chains of {}", r.scope)
    };
    format!(
        "{}ed for {whom} by {} at {} (record {}){why}",
        r.action.as_str(),
        r.actor,
        format_unix(r.at),
        r.id
    )
}

/// `rules accept|reject`'s answer.
pub fn rule_decision_text(a: &crate::protocol::views::RuleDecisionAnswer) -> String {
    use crate::domain::learn::RuleAction;
    let what = match (a.action, a.changed, &a.file) {
        (RuleAction::Accept, true, Some(file)) => {
            return format!("rule {} is in force, from {file}", a.name)
        }
        (RuleAction::Accept, true, None) => format!("rule {} is in force for your chains", a.name),
        (RuleAction::Reject, true, _) if a.scope == "mine" => {
            format!("proposal {} is rejected for your chains", a.id)
        }
        (RuleAction::Reject, true, _) => format!("proposal {} is rejected for everyone", a.id),
        (_, false, _) => format!("proposal {} stands as it was; nothing changed", a.id),
    };
    match &a.record {
        Some(r) => format!("{what}: {}", rule_record_line(r)),
        None => what,
    }
}

/// `rules`: the rules in force, then each proposal with its evidence and conflicts, and
/// with `history` every decision about a proposal the caller may see.
pub fn rules_text(v: &crate::protocol::views::RulesAnswer, history: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "rules in force:");
    if v.rules.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for r in &v.rules {
        let codes: Vec<String> = r.exit_codes.iter().map(i32::to_string).collect();
        let _ = writeln!(
            out,
            "  {} ({})  kind {}  exit codes [{}]  stderr {}",
            r.name,
            r.source,
            r.kind,
            codes.join(", "),
            r.stderr
                .as_deref()
                .map_or("-".to_string(), |s| format!("{s:?}")),
        );
        if r.completed + r.failed + r.running > 0 {
            let _ = writeln!(
                out,
                "    its retries: {} completed, {} failed, {} running{}",
                r.completed,
                r.failed,
                r.running,
                if r.not_working {
                    "  NOT WORKING: check the rule"
                } else {
                    ""
                }
            );
        }
    }
    let _ = writeln!(out, "proposals:");
    if v.proposals.is_empty() {
        let _ = writeln!(
            out,
            "  none yet: when `[learn] agreeing` (3) resolutions of one failure signature (`history` shows it) \
             agree, and most retries they caused completed, the rule that would decide it is proposed here \
             (docs/rules.md)"
        );
    }
    for p in &v.proposals {
        let conflict = if p.conflicts.is_empty() {
            ""
        } else {
            "  CONFLICT: resolved otherwise too"
        };
        let _ = writeln!(
            out,
            "  {}  {} {}  would add: kind {}  exit codes {:?}  change {}{}",
            p.id,
            p.slurm_state,
            p.exit_code,
            p.rule.kind,
            p.rule.exit_codes,
            serde_json::to_value(p.rule.change)
                .ok()
                .and_then(|c| c.as_str().map(str::to_string))
                .unwrap_or_default(),
            conflict,
        );
        let state = match p.state {
            crate::domain::learn::ProposalState::Waiting => "WAITING for a decision",
            crate::domain::learn::ProposalState::Rejected => "REJECTED",
            crate::domain::learn::ProposalState::Accepted => "ACCEPTED for your chains",
        };
        match &p.decided {
            Some(d) => {
                let _ = writeln!(out, "    {state}: {}", rule_record_line(d));
            }
            None => {
                let _ = writeln!(out, "    {state}");
            }
        }
        signature_lines(&mut out, "    ", &p.id, Some(&p.signature_text));
        let _ = writeln!(out, "    stderr pattern: {:?}", p.rule.stderr);
        let _ = writeln!(
            out,
            "    to put it in force, write this to rules.d/{}.toml beside the config and reload:",
            p.rule.name
        );
        for l in p.toml.lines() {
            let _ = writeln!(out, "      {l}");
        }
        let _ = writeln!(
            out,
            "    retries: {} completed, {} failed, {} running; {} endings had this signature",
            p.completed, p.failed, p.running, p.endings
        );
        for (what, list) in [("evidence", &p.evidence), ("conflict", &p.conflicts)] {
            for r in list.iter() {
                let _ = writeln!(
                    out,
                    "    {what}: {} attempt {}  {} by {}  ({})",
                    r.chain,
                    r.attempt,
                    r.action,
                    r.actor,
                    r.outcome.map_or("no retry".to_string(), |o| {
                        serde_json::to_value(o)
                            .ok()
                            .and_then(|o| o.as_str().map(str::to_string))
                            .unwrap_or_default()
                    }),
                );
            }
        }
    }
    if history {
        let _ = writeln!(out, "decisions about rules:");
        if v.decisions.is_empty() {
            let _ = writeln!(out, "  none");
        }
        for d in &v.decisions {
            let _ = writeln!(out, "  {}  {}", d.proposal, rule_record_line(d));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_view_names_the_active_node_and_every_daemon() {
        use crate::protocol::views::{LeaseAnswer, NodeAnswer};
        let node = |name: &str, role: &str, epoch, this, silent| NodeAnswer {
            node: name.into(),
            role: role.into(),
            epoch,
            started_secs_ago: 7200,
            last_cycle_secs_ago: Some(1),
            heartbeat_secs_ago: 130,
            silent,
            this,
        };
        let v = ClusterAnswer {
            mode: "cluster".into(),
            answered_by: "login2".into(),
            lease: Some(LeaseAnswer {
                active_node: Some("login1".into()),
                epoch: 4,
                since: Some(1_795_000_000),
                left_secs: 41,
            }),
            nodes: vec![
                node("login1", "active", Some(4), false, false),
                node("login2", "standby", None, true, false),
                node("login3", "standby", None, false, true),
            ],
            error: None,
        };
        let text = cluster_text(&v);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "active: login1, epoch 4, since 2026-11-18 11:06:40Z, lease left 41s"
        );
        assert!(
            lines[2].starts_with("login1 ") && lines[2].contains(" active "),
            "{text}"
        );
        assert!(
            lines[2].contains("2h ago") && lines[2].ends_with("2m ago"),
            "{text}"
        );
        assert!(lines[3].ends_with("(answering)"), "{text}");
        assert!(lines[4].ends_with("2m ago (silent)"), "{text}");
        let single = ClusterAnswer {
            mode: "single".into(),
            answered_by: "login1".into(),
            lease: None,
            nodes: Vec::new(),
            error: None,
        };
        assert!(cluster_text(&single).starts_with("single node: the daemon on login1"));
        assert_eq!((cluster_exit(&v), cluster_exit(&single)), (0, 0));
        let nobody = ClusterAnswer {
            lease: Some(LeaseAnswer {
                active_node: None,
                epoch: 4,
                since: None,
                left_secs: 0,
            }),
            ..v.clone()
        };
        assert!(cluster_text(&nobody).starts_with("active: none"));
        assert_eq!(cluster_exit(&nobody), 1);
    }

    #[test]
    fn unix_times_format() {
        assert_eq!(format_unix(0), "1970-01-01 00:00:00Z");
        assert_eq!(format_unix(1_795_000_000), "2026-11-18 11:06:40Z");
    }
}
