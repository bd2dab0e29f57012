//! sacct output (and the other Slurm outputs read line by line): arbitrary bytes, as a
//! lossy string, must never panic, and what comes out must come from what went in.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slurm_supervisor::slurm::parse::{
    parse_duration_secs, parse_mem_bytes, parse_sacct, parse_sbatch_parsable,
    parse_scontrol_record, MAX_ERROR_LINE,
};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines = text.split('\n').count();

    let p = parse_sacct(&text);
    assert!(p.rows.len() + p.errors.len() <= lines);
    for e in &p.errors {
        assert!(e.line_no >= 1 && e.line_no <= lines);
        assert!(e.line.len() <= MAX_ERROR_LINE + 3);
    }
    for r in &p.rows {
        // Text fields are carried through unchanged, never invented.
        assert!(text.contains(r.job_id.as_str()));
        assert!(text.contains(r.job_id_raw.as_str()));
        assert!(text.contains(r.partition.as_str()));
        assert!(r.job_id.starts_with(|c: char| c.is_ascii_digit()));
        if let Some(t) = r.timelimit_secs {
            // Zero is "no limit" and must never come out as a limit.
            assert!(t > 0);
        }
    }

    if let Ok(id) = parse_sbatch_parsable(&text) {
        assert!(!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()));
    }
    for (k, v) in parse_scontrol_record(&text) {
        assert!(text.contains(&format!("{k}=")));
        assert!(text.contains(v.as_str()));
    }
    for field in text.split(['|', '\n', ' ']).take(1_000) {
        let _ = parse_mem_bytes(field);
        let _ = parse_duration_secs(field);
    }
});
