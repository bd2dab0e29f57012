//! The ids a user gives to name what the supervisor watches: a chain (`c17`), a Slurm job
//! (`123`, or every task of array 123) or an array task (`123_4`), as `status`, `history`,
//! `cancel`, `classify`, `recover` and `adopt` take them.
//!
//! Apart from `model` because the job half is read by `slurm::jobid`, the one place a job
//! id is taken apart, and `model` imports nothing of the crate.

use crate::slurm::jobid::{JobId, Names};

/// An id a user gave for a chain: `c17`, a job id `123` (a job, or every task of array
/// 123) or an array task `123_4`. Parsed strictly, so an id can never act as a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdRef {
    Chain(i64),
    Job(String),
    Task(String),
}

/// The longest id accepted (Slurm's job ids are 32-bit, array tasks too).
const MAX_ID_LEN: usize = 32;

impl IdRef {
    pub fn parse(id: &str) -> Result<IdRef, String> {
        let id = id.trim();
        let bad = || {
            let shown: String = id.chars().take(40).collect();
            let more = if id.chars().count() > 40 { "..." } else { "" };
            format!("{shown:?}{more} is not a chain id (c17) or a Slurm job id (123, or 123_4 for an array task)")
        };
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
        if id.len() > MAX_ID_LEN {
            return Err(bad());
        }
        if let Some(n) = id.strip_prefix('c') {
            return match n.parse::<i64>() {
                Ok(v) if digits(n) => Ok(IdRef::Chain(v)),
                _ => Err(bad()),
            };
        }
        match JobId::parse(id) {
            Ok(j) if j.is_step() => Err(bad()),
            Ok(j) => match j.names() {
                Names::Job => Ok(IdRef::Job(id.to_string())),
                Names::Task(_) => Ok(IdRef::Task(id.to_string())),
                Names::PendingTasks(_) | Names::HetComponent(_) => Err(bad()),
            },
            Err(_) => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::IdRef;

    #[test]
    fn ids_are_parsed_strictly() {
        assert_eq!(IdRef::parse("c17"), Ok(IdRef::Chain(17)));
        assert_eq!(IdRef::parse(" 123 "), Ok(IdRef::Job("123".into())));
        assert_eq!(IdRef::parse("123_4"), Ok(IdRef::Task("123_4".into())));
        for bad in [
            "1%", "1_", "%", "_", "c", "c-1", "c1x", "12_3_4", "", "1 2", "c+1",
        ] {
            assert!(IdRef::parse(bad).is_err(), "{bad:?}");
        }
        let huge = "9".repeat(100_000);
        let err = IdRef::parse(&huge).unwrap_err();
        assert!(err.len() < 200, "{err}");
    }
}
