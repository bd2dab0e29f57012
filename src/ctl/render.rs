//! Human-readable output of the read commands (the `--json` forms print the daemon's
//! views unchanged).

use serde_json::Value;
use std::fmt::Write;

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn time(v: &Value) -> String {
    v.as_i64().map(format_unix).unwrap_or_else(|| "-".into())
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

pub fn status_table(rows: &[Value]) -> String {
    let mut out = String::new();
    let header = ["CHAIN", "STATE", "JOB", "SLURM", "ATTEMPTS", "LAST"];
    let mut table: Vec<[String; 6]> = vec![header.map(String::from)];
    for r in rows {
        table.push([
            s(&r["id"]),
            s(&r["state"]),
            s(&r["slurm_job_id"]),
            s(&r["slurm_state"]),
            s(&r["attempts"]),
            s(&r["last_classification"]),
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

pub fn history_text(h: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "chain {}  state {}  last {}",
        s(&h["id"]),
        s(&h["state"]),
        s(&h["last_classification"])
    );
    let _ = writeln!(out, "attempts:");
    for a in h["attempts"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  #{} job {}  {} exit {}  nodes {}  mem {}  time {}  submitted {}",
            s(&a["n"]),
            s(&a["slurm_job_id"]),
            s(&a["slurm_state"]),
            s(&a["exit_code"]),
            s(&a["nodes"]),
            s(&a["mem"]),
            s(&a["time_limit"]),
            time(&a["submitted_at"]),
        );
    }
    let _ = writeln!(out, "decisions:");
    for d in h["decisions"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  {}  attempt {}  {} {} -> {}  by {}: {}",
            time(&d["at"]),
            s(&d["attempt"]),
            s(&d["class"]),
            s(&d["classification"]),
            s(&d["action"]),
            s(&d["actor"]),
            s(&d["reason"]),
        );
    }
    out
}

pub fn pending_text(rows: &[Value]) -> String {
    let mut out = String::new();
    if rows.is_empty() {
        out.push_str("nothing is waiting for a decision\n");
    }
    for r in rows {
        let _ = writeln!(
            out,
            "{}  job {}  {}",
            s(&r["id"]),
            s(&r["slurm_job_id"]),
            s(&r["last_classification"])
        );
        let ev = &r["evidence"];
        if let Some(d) = ev["decisions"].as_array().and_then(|d| d.last()) {
            let _ = writeln!(out, "  why: {}", s(&d["reason"]));
        }
        if let Some(tail) = ev["stderr_tail"].as_str() {
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
            s(&r["id"])
        );
    }
    out
}

pub fn stats_text(v: &Value) -> String {
    let t = &v["total"];
    let mut out = String::new();
    let _ = writeln!(
        out,
        "chains: {}  ({})",
        s(&t["chains"]),
        t["by_state"]
            .as_object()
            .map(|m| m
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_default()
    );
    let _ = writeln!(out, "automatic retries: {}", s(&t["automatic_retries"]));
    let _ = writeln!(
        out,
        "agent resolutions: {} ({} retries)",
        s(&t["agent_resolutions"]),
        s(&t["agent_retries"])
    );
    let _ = writeln!(
        out,
        "agent retries that then succeeded: {} chains; did not: {}; still running: {}",
        s(&t["recovered_successfully"]),
        s(&t["not_recovered"]),
        s(&t["recovery_in_progress"])
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
