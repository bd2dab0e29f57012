//! How fast sacct and squeue output is read (issue 10: the sacct parser keeps at least
//! 1M rows/s). Run with `cargo bench --bench parse`; `cargo test --benches` runs a small
//! smoke version. The rows are the shapes real Slurm prints (docs/slurm-observed.md): a job
//! row with the supervisor's tag in its comment, then its `.batch` and `.extern` steps.

use slurm_supervisor::slurm::parse::{
    fold_squeue, fold_squeue_pending, fold_states, parse_sacct, parse_squeue,
};
use std::time::Instant;

fn sacct_output(jobs: usize) -> String {
    let mut out = String::with_capacity(jobs * 3 * 110);
    for i in 0..jobs {
        let id = 1_000_000 + i;
        out.push_str(&format!(
            "{id}|{id}|OUT_OF_MEMORY|0:125|n{}||4000M|01:00:00|00:12:31|debug|1000|1795611422\n",
            i % 64
        ));
        out.push_str(&format!(
            "{id}.batch|{id}.batch|OUT_OF_MEMORY|0:125|n{}|4100M||||||1795611422\n",
            i % 64
        ));
        out.push_str(&format!(
            "{id}.extern|{id}.extern|COMPLETED|0:0|n{}|0||||||1795611422\n",
            i % 64
        ));
    }
    out
}

fn squeue_output(jobs: usize) -> String {
    let mut out = String::with_capacity(jobs * 60);
    for i in 0..jobs {
        let id = 1_000_000 + i;
        out.push_str(&format!("{id}|{id}|RUNNING|None|n{}|1000\n", i % 64));
    }
    out
}

/// The poll's state-only query (`%i|%A|%T`).
fn states_output(jobs: usize) -> String {
    let mut out = String::with_capacity(jobs * 30);
    for i in 0..jobs {
        let id = 1_000_000 + i;
        out.push_str(&format!("{id}|{id}|RUNNING\n"));
    }
    out
}

/// The poll's listing that reads the owners' pending jobs too (`%i|%A|%T|%r|%N|%U|%u|%E`):
/// every tenth job pending on a dependency.
fn pending_output(jobs: usize) -> String {
    let mut out = String::with_capacity(jobs * 80);
    for i in 0..jobs {
        let id = 1_000_000 + i;
        if i % 10 == 0 {
            out.push_str(&format!(
                "{id}|{id}|PENDING|Dependency||1000|alice|afterok:{}(unfulfilled)\n",
                id - 1
            ));
        } else {
            out.push_str(&format!(
                "{id}|{id}|RUNNING|None|n{}|1000|alice|(null)\n",
                i % 64
            ));
        }
    }
    out
}

/// Best of `repeats` runs of `f`, in seconds.
fn best(repeats: usize, mut f: impl FnMut() -> usize) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut n = 0;
    for _ in 0..repeats {
        let start = Instant::now();
        n = f();
        best = best.min(start.elapsed().as_secs_f64());
    }
    (best, n)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let jobs = if bench { 200_000 } else { 2_000 };
    let repeats = if bench { 5 } else { 1 };

    let sacct = sacct_output(jobs);
    let (secs, rows) = best(repeats, || {
        let p = parse_sacct(&sacct);
        assert!(p.errors.is_empty(), "{:?}", p.errors.first());
        p.rows.len()
    });
    assert_eq!(rows, jobs * 3);
    println!(
        "sacct:  {rows} rows ({:.1} MiB) in {:.1} ms: {:.2} M rows/s",
        sacct.len() as f64 / (1 << 20) as f64,
        secs * 1e3,
        rows as f64 / secs / 1e6
    );

    let squeue = squeue_output(jobs);
    let (secs, rows) = best(repeats, || {
        let p = parse_squeue(&squeue);
        assert!(p.errors.is_empty(), "{:?}", p.errors.first());
        p.rows.len()
    });
    assert_eq!(rows, jobs);
    println!(
        "squeue: {rows} rows ({:.1} MiB) in {:.1} ms: {:.2} M rows/s",
        squeue.len() as f64 / (1 << 20) as f64,
        secs * 1e3,
        rows as f64 / secs / 1e6
    );

    // The poll's listing read into the map it keeps (each job's state by owner) as it
    // goes, no row made on the way.
    let (secs, rows) = best(repeats, || {
        let q = fold_squeue(&squeue);
        assert!(q.errors.is_empty(), "{:?}", q.errors.first());
        q.len()
    });
    assert_eq!(rows, jobs);
    println!(
        "squeue folded into the poll's map: {rows} rows ({:.1} MiB) in {:.1} ms: {:.2} M rows/s",
        squeue.len() as f64 / (1 << 20) as f64,
        secs * 1e3,
        rows as f64 / secs / 1e6
    );

    let states = states_output(jobs);
    let (secs, rows) = best(repeats, || {
        let q = fold_states(&states);
        assert!(q.errors.is_empty(), "{:?}", q.errors.first());
        q.len()
    });
    assert_eq!(rows, jobs);
    println!(
        "squeue --only-job-state: {rows} rows ({:.1} MiB) in {:.1} ms: {:.2} M rows/s",
        states.len() as f64 / (1 << 20) as f64,
        secs * 1e3,
        rows as f64 / secs / 1e6
    );

    let pending = pending_output(jobs);
    let (secs, rows) = best(repeats, || {
        let (q, p) = fold_squeue_pending(&pending, |_| true, usize::MAX, |u| u == "alice");
        assert!(q.errors.is_empty() && p.errors.is_empty());
        assert_eq!(p.rows.len(), jobs.div_ceil(10));
        q.len()
    });
    assert_eq!(rows, jobs);
    println!(
        "squeue with pending jobs: {rows} rows ({:.1} MiB) in {:.1} ms: {:.2} M rows/s",
        pending.len() as f64 / (1 << 20) as f64,
        secs * 1e3,
        rows as f64 / secs / 1e6
    );
}
