//! Supervised jobs that wait on another chain through `--dependency`: when a chain fails
//! for good, they will never start, and whoever looks should be told.

use crate::sbatch_args::Submitted;
use crate::store::{Store, StoreError};

/// The job ids a `--dependency` value names (`afterok:12:13,afterany:14_2?singleton`).
pub fn job_ids_in(dependency: &str) -> Vec<String> {
    dependency
        .split([',', '?', ':'])
        .map(|t| t.split('+').next().unwrap_or(t))
        .filter(|t| {
            t.starts_with(|c: char| c.is_ascii_digit())
                && t.chars().all(|c| c.is_ascii_digit() || c == '_')
        })
        .map(str::to_string)
        .collect()
}

/// The open chains whose submission depends on one of `chain_id`'s jobs.
pub fn of(store: &Store, chain_id: i64) -> Result<Vec<i64>, StoreError> {
    let ours: Vec<String> = store
        .attempts(chain_id)?
        .into_iter()
        .filter_map(|a| a.slurm_job_id)
        .collect();
    if ours.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for c in store
        .chains(None)?
        .into_iter()
        .filter(|c| c.state.is_open() && c.id != chain_id)
    {
        if depends_on_any(store, c.submission_id, &ours)? {
            out.push(c.id);
        }
    }
    Ok(out)
}

/// The failed chains that `submission_id` depends on.
pub fn failed_dependencies(store: &Store, submission_id: i64) -> Result<Vec<i64>, StoreError> {
    let sub = store.submission(submission_id)?;
    let Some(dep) = Submitted::read(&sub.argv, sub.script.as_deref())
        .ok()
        .and_then(|s| s.option("dependency").map(str::to_string))
    else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for id in job_ids_in(&dep) {
        for c in store.resolve(&id)? {
            if store
                .chain(c)?
                .is_some_and(|c| c.state == crate::model::ChainState::Failed)
                && !out.contains(&c)
            {
                out.push(c);
            }
        }
    }
    Ok(out)
}

fn depends_on_any(store: &Store, submission_id: i64, jobs: &[String]) -> Result<bool, StoreError> {
    let sub = store.submission(submission_id)?;
    let Some(dep) = Submitted::read(&sub.argv, sub.script.as_deref())
        .ok()
        .and_then(|s| s.option("dependency").map(str::to_string))
    else {
        return Ok(false);
    };
    Ok(job_ids_in(&dep)
        .iter()
        .any(|j| jobs.contains(j) || jobs.iter().any(|o| o.split('_').next() == Some(j.as_str()))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependency_values_name_their_jobs() {
        assert_eq!(
            job_ids_in("afterok:12:13,afterany:14_2"),
            vec!["12", "13", "14_2"]
        );
        assert_eq!(job_ids_in("afterok:12?afternotok:15"), vec!["12", "15"]);
        assert!(job_ids_in("singleton").is_empty());
        assert_eq!(job_ids_in("after:12+5"), vec!["12"]);
    }
}
