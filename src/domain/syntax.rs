//! Slurm's small value syntaxes: durations (sbatch `--time`, sacct's Elapsed and
//! Timelimit, scontrol's TimeLimit) and array specs (sbatch `--array`, the task list of a
//! pending array in squeue's job id, `14_[3-10%2]`).
//!
//! Both sides of the supervisor read them: `sbatch_args` in a user's command line and
//! `slurm` in what Slurm's commands print. They live here, below both, so that neither has
//! to import the other for them.
//!
//! **Architecture Invariant:** this module imports nothing of the crate but
//! `osbytes::truncate` (itself a leaf), so anything may use it and it can never be part
//! of a circle. `tests/architecture.rs` checks.

use crate::plumbing::osbytes::shortened as truncate;
use std::fmt::Write as _;
use std::str::FromStr;

// ---- durations --------------------------------------------------------------------------

/// Seconds in a Slurm duration. `None` for a value that means "no limit" (`UNLIMITED`,
/// `INFINITE`, `Partition_Limit`, any case) and for anything unreadable; use
/// [`parse_duration`] to tell those apart.
///
/// The forms are Slurm's (sbatch `--time`): `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`,
/// `D-H:M:S`. Note that a bare number is **minutes** (`--time=90` is 90 minutes) and that
/// two fields without a day are **minutes:seconds** (`30:00` is 30 minutes). sacct's
/// Elapsed and Timelimit are normally `[D-]HH:MM:SS`, which the same rules read. Fields are
/// not range-checked, as Slurm does not check them (`0:0:90` is 90 seconds).
///
/// `0` is returned as `Some(0)`; as a *limit* Slurm reads zero as unlimited, which the
/// caller of a limit must keep in mind.
pub fn parse_duration_secs(s: &str) -> Option<u64> {
    match parse_duration(s) {
        Ok(Duration::Secs(n)) => Some(n),
        _ => None,
    }
}

/// A Slurm duration read by [`parse_duration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Duration {
    Secs(u64),
    /// `UNLIMITED`, `INFINITE` or `Partition_Limit`: no limit of the job's own.
    Unlimited,
}

/// The text was not a Slurm duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a Slurm time (use minutes, M:S, H:M:S or D-H:M:S)")]
pub struct BadDuration(pub String);

/// Like [`parse_duration_secs`], but says whether the text meant "no limit" or was not a
/// duration at all.
pub fn parse_duration(s: &str) -> Result<Duration, BadDuration> {
    let bad = || BadDuration(truncate(s, 64));
    if ["UNLIMITED", "INFINITE", "Partition_Limit"]
        .iter()
        .any(|w| w.eq_ignore_ascii_case(s))
    {
        return Ok(Duration::Unlimited);
    }
    let (days, rest) = match s.split_once('-') {
        Some((d, rest)) => (Some(digits::<u64>(d).ok_or_else(bad)?), rest),
        None => (None, s),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(digits::<u64>)
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    let (h, m, sec) = match (days, parts.as_slice()) {
        (None, [m]) => (0, *m, 0),
        (None, [m, s]) => (0, *m, *s),
        (_, [h, m, s]) => (*h, *m, *s),
        (Some(_), [h]) => (*h, 0, 0),
        (Some(_), [h, m]) => (*h, *m, 0),
        _ => return Err(bad()),
    };
    let total = days
        .unwrap_or(0)
        .checked_mul(86_400)
        .and_then(|d| d.checked_add(h.checked_mul(3_600)?))
        .and_then(|t| t.checked_add(m.checked_mul(60)?))
        .and_then(|t| t.checked_add(sec))
        .ok_or_else(bad)?;
    Ok(Duration::Secs(total))
}

/// A time limit as sbatch `--time` takes it: `HH:MM:SS`, or `D-HH:MM:SS` from one day on.
///
/// Slurm keeps limits in whole minutes, so seconds are rounded **up** to the next minute
/// (never give a job less than asked). A limit of zero minutes means UNLIMITED to Slurm,
/// so anything under a minute, zero included, becomes one minute.
pub fn format_time_limit(secs: u64) -> String {
    let minutes = secs.div_ceil(60).max(1);
    let (days, rem) = (minutes / 1_440, minutes % 1_440);
    let (h, m) = (rem / 60, rem % 60);
    if days > 0 {
        format!("{days}-{h:02}:{m:02}:00")
    } else {
        format!("{h:02}:{m:02}:00")
    }
}

// ---- array specs ------------------------------------------------------------------------

/// No more tasks than this in one `--array` spec. Slurm's own ceiling is the site's
/// MaxArraySize (at most 4000001); a million tasks is already far past any sane use, and
/// the limit keeps a typo (`1-100000000`) from allocating gigabytes here.
pub const MAX_ARRAY_TASKS: usize = 1_000_000;

/// The largest array index Slurm can accept: MaxArraySize is at most 4000001.
pub const MAX_ARRAY_INDEX: u32 = 4_000_000;

/// An `--array` spec (or a pending task list) that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid array spec {spec:?}: {reason}")]
pub struct BadArray {
    pub spec: String,
    pub reason: String,
}

/// The task ids of an `--array` spec: `1-10`, `0,6,16-32`, `0-15:4`, `1-10%2` (the `%N`
/// throttle is dropped here; read it with [`array_throttle`]). Sorted, without duplicates.
pub fn parse_array_spec(spec: &str) -> Result<Vec<u32>, BadArray> {
    parse_array_spec_limited(spec, MAX_ARRAY_TASKS)
}

/// `parse_array_spec` with at most `max_tasks` tasks; the count is checked before any
/// task list is built, so a huge spec costs nothing.
pub fn parse_array_spec_limited(spec: &str, max_tasks: usize) -> Result<Vec<u32>, BadArray> {
    let max_tasks = max_tasks.min(MAX_ARRAY_TASKS);
    let bad = |reason: &str| BadArray {
        spec: spec.to_string(),
        reason: reason.to_string(),
    };
    let body = match spec.split_once('%') {
        Some((body, throttle)) => {
            digits::<u32>(throttle).ok_or_else(|| bad("the throttle after % must be a number"))?;
            body
        }
        None => spec,
    };
    if body.is_empty() {
        return Err(bad("no task ids"));
    }
    let mut ranges = Vec::new();
    let mut total = 0usize;
    for part in body.split(',') {
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (
                r,
                Some(
                    digits::<u32>(s)
                        .filter(|s| *s > 0)
                        .ok_or_else(|| bad("a step must be a number above 0"))?,
                ),
            ),
            None => (part, None),
        };
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (a, b),
            None if step.is_some() => return Err(bad("a step needs a range, e.g. 0-15:4")),
            None => (range, range),
        };
        let first: u32 = digits(first).ok_or_else(|| bad("task ids must be numbers"))?;
        let last: u32 = digits(last).ok_or_else(|| bad("task ids must be numbers"))?;
        if first > last {
            return Err(bad("a range must go upwards"));
        }
        if last > MAX_ARRAY_INDEX {
            return Err(bad(&format!(
                "task ids above {MAX_ARRAY_INDEX} are beyond any Slurm's MaxArraySize"
            )));
        }
        let step = step.unwrap_or(1);
        total += ((last - first) / step) as usize + 1;
        if total > max_tasks {
            return Err(bad(&format!("more than {max_tasks} tasks")));
        }
        ranges.push((first, last, step));
    }
    let mut tasks = Vec::with_capacity(total);
    for (first, last, step) in ranges {
        tasks.extend((first..=last).step_by(step as usize));
    }
    tasks.sort_unstable();
    tasks.dedup();
    Ok(tasks)
}

/// The `%N` throttle of an array spec (`1-10%2` gives 2); `None` without one or when it
/// is not a number.
pub fn array_throttle(spec: &str) -> Option<u32> {
    spec.split_once('%').and_then(|(_, t)| digits(t))
}

/// A compact `--array` list for task ids: `[1, 2, 3, 5]` gives `1-3,5`. The input need not
/// be sorted; duplicates are dropped. An empty input gives an empty string, which is not a
/// valid spec: there is nothing to submit.
pub fn format_array_list(tasks: &[u32]) -> String {
    let mut sorted = tasks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

// ---- internals --------------------------------------------------------------------------

/// ASCII digits only (no sign, no blank), as a number; `None` when it does not fit.
fn digits<T: FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let cases: &[(&str, Option<u64>)] = &[
            ("5", Some(300)),       // minutes
            ("90", Some(5_400)),    // minutes
            ("30:00", Some(1_800)), // minutes:seconds
            ("0:90", Some(90)),     // fields are not range-checked
            ("00:01:00", Some(60)), // hours:minutes:seconds
            ("00:01:27", Some(87)),
            ("25:00:00", Some(90_000)),
            ("1-2", Some(93_600)),        // days-hours
            ("1-2:3", Some(93_780)),      // days-hours:minutes
            ("1-02:03:04", Some(93_784)), // days-hours:minutes:seconds
            ("1-00:00:00", Some(86_400)),
            ("0", Some(0)),
            ("UNLIMITED", None),
            ("infinite", None),
            ("INFINITE", None),
            ("Partition_Limit", None),
            ("", None),
            ("1:2:3:4", None),
            ("1-2:3:4:5", None),
            ("-5", None),
            ("5m", None),
            (" 5", None),
            ("1--2", None),
            ("a:b", None),
            ("99999999999999999999", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_duration_secs(s), *want, "{s:?}");
        }
        assert_eq!(parse_duration("UNLIMITED"), Ok(Duration::Unlimited));
        assert_eq!(parse_duration("Partition_Limit"), Ok(Duration::Unlimited));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn time_limits_for_sbatch() {
        let cases: &[(u64, &str)] = &[
            (0, "00:01:00"), // zero would mean UNLIMITED to Slurm
            (1, "00:01:00"),
            (59, "00:01:00"),
            (60, "00:01:00"),
            (61, "00:02:00"),
            (87, "00:02:00"),
            (3_600, "01:00:00"),
            (86_399, "1-00:00:00"),
            (86_400, "1-00:00:00"),
            (93_784, "1-02:04:00"),
            (10 * 86_400 + 5 * 3_600, "10-05:00:00"),
        ];
        for (secs, want) in cases {
            assert_eq!(format_time_limit(*secs), *want, "{secs}");
            // What is printed reads back as at least what was asked.
            let back = parse_duration_secs(want).unwrap();
            assert!(
                back >= *secs && back < secs + 60 || *secs == 0,
                "{secs} -> {want} -> {back}"
            );
        }
    }

    #[test]
    fn array_specs() {
        let cases: &[(&str, Result<Vec<u32>, &str>)] = &[
            ("1-10", Ok((1..=10).collect())),
            ("0,6,16-32", Ok([0, 6].into_iter().chain(16..=32).collect())),
            ("0-15:4", Ok(vec![0, 4, 8, 12])),
            ("1-10%2", Ok((1..=10).collect())),
            ("3-10%0", Ok((3..=10).collect())),
            ("7", Ok(vec![7])),
            ("5,1,3,1", Ok(vec![1, 3, 5])),
            (
                "0-4000000:1000000",
                Ok(vec![0, 1_000_000, 2_000_000, 3_000_000, 4_000_000]),
            ),
            ("0-999999", Ok((0..=999_999).collect())),
            ("", Err("no task ids")),
            ("%2", Err("no task ids")),
            ("1-10%", Err("throttle")),
            ("1-10%x", Err("throttle")),
            ("1-10%2%3", Err("throttle")),
            ("10-1", Err("upwards")),
            ("1-", Err("numbers")),
            ("a-b", Err("numbers")),
            ("1,,2", Err("numbers")),
            ("1 -3", Err("numbers")),
            ("-1", Err("numbers")),
            ("0-15:0", Err("step")),
            ("0-15:", Err("step")),
            ("5:2", Err("range")),
            ("0-1000000", Err("more than")),
            ("0-600000,0-600000", Err("more than")),
            ("4000001", Err("MaxArraySize")),
            ("0-99999999999", Err("numbers")),
        ];
        for (spec, want) in cases {
            match (parse_array_spec(spec), want) {
                (Ok(got), Ok(w)) => assert_eq!(&got, w, "{spec:?}"),
                (Err(BadArray { spec: s, reason }), Err(w)) => {
                    assert_eq!(&s, spec);
                    assert!(reason.contains(w), "{spec:?}: {reason}");
                }
                (got, _) => panic!("{spec:?}: unexpected {got:?}"),
            }
        }
        assert_eq!(array_throttle("1-10%2"), Some(2));
        assert_eq!(array_throttle("1-10"), None);
        assert_eq!(array_throttle("1-10%x"), None);
    }

    #[test]
    fn array_lists() {
        let cases: &[(&[u32], &str)] = &[
            (&[1, 2, 3, 5], "1-3,5"),
            (&[], ""),
            (&[7], "7"),
            (&[4, 5], "4-5"),
            (&[5, 3, 4, 4, 10, 1], "1,3-5,10"),
            (&[0, 2, 4], "0,2,4"),
            (&[u32::MAX - 1, u32::MAX], "4294967294-4294967295"),
        ];
        for (tasks, want) in cases {
            assert_eq!(format_array_list(tasks), *want, "{tasks:?}");
        }
        // It reads back as the same set.
        let tasks = vec![0, 1, 2, 9, 11, 12, 100];
        assert_eq!(parse_array_spec(&format_array_list(&tasks)).unwrap(), tasks);
    }
}
