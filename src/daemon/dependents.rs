//! Supervised jobs that wait on another chain through `--dependency`: when a chain fails
//! for good, they will never start, and whoever looks should be told.

use crate::sbatch_args::Submitted;
use crate::slurm::jobid::{base_job_id, JobId};
use crate::store::{Store, StoreError};

/// The job ids a `--dependency` value names (`afterok:12:13,afterany:14_2?singleton`).
pub fn job_ids_in(dependency: &str) -> Vec<String> {
    dependency
        .split([',', '?', ':'])
        // `+` here starts a time (`after:12+30`), not a heterogeneous component.
        .map(|t| t.split('+').next().unwrap_or(t))
        .filter(|t| JobId::parse(t).is_ok_and(|j| j.attempt_key().is_some() && !j.is_step()))
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
        .any(|j| jobs.contains(j) || jobs.iter().any(|o| base_job_id(o) == *j)))
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
