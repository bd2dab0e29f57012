//! Human-readable output of the read commands, from the daemon's typed answers (the
//! `--json` forms print the daemon's answer unchanged).

use crate::protocol::views::{ChainHistory, ChainRow, PendingChain, StatsAnswer};
use std::fmt::{Display, Write};

/// An optional value, `-` when there is none.
fn s<T: Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn time(v: Option<i64>) -> String {
    v.map(format_unix).unwrap_or_else(|| "-".into())
}

/// `YYYY-MM-DD HH:MM:SS` in UTC, without a date crate.
pub fn format_unix(t: i64) -> String {
    let days = t.div_euclid(86400);
    let secs = t.rem_euclid(86400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

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
            r.attempts.to_string(),
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
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_times_format() {
        assert_eq!(format_unix(0), "1970-01-01 00:00:00Z");
        assert_eq!(format_unix(1_795_000_000), "2026-11-18 11:06:40Z");
    }
}
