//! squeue output: arbitrary bytes never panic, and every row read prints back (in
//! SQUEUE_FORMAT) to a line that reads as the same row.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slurm_supervisor::slurm::parse::{parse_squeue, MAX_ERROR_LINE};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines = text.split('\n').count();
    let q = parse_squeue(&text);
    assert!(q.rows.len() + q.errors.len() <= lines);
    for e in &q.errors {
        assert!(e.line_no >= 1 && e.line_no <= lines);
        assert!(e.line.len() <= MAX_ERROR_LINE + 3);
    }
    for r in &q.rows {
        // A row is exactly its six fields, none of which holds `|`, a newline or a CR
        // that survives (one trailing CR is taken for a CRLF line end).
        if r.reason.ends_with('\r') || r.node_list.ends_with('\r') {
            continue;
        }
        let line = [
            r.job_id.as_str(),
            &r.job_id_raw,
            r.state.as_str(),
            &r.reason,
            &r.node_list,
            &r.uid.to_string(),
        ]
        .join("|");
        let again = parse_squeue(&line);
        assert!(again.errors.is_empty(), "{line:?}: {:?}", again.errors);
        assert_eq!(again.rows.as_slice(), std::slice::from_ref(r), "{line:?}");
    }
});
