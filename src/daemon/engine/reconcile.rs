//! Phase 1: launches left as an intent (the daemon died around sbatch, or its answer was
//! lost) are looked up by their tags before anything is submitted again.

/// An interrupted launch older than this that cannot be found is escalated, not repeated:
/// a job it created could have ended and left squeue (Slurm's default MinJobAge is 300 s).
const UNCONFIRMED_AFTER_SECS: i64 = 300;
use super::{Engine, UNREACHED};
use crate::daemon::sbatch::{self, LaunchOutcome};
use crate::policy::Event;
use crate::slurm::Slurm;
use crate::store::StoreError;
use std::collections::BTreeMap;
use tracing::info;

impl<S: Slurm> Engine<S> {
    /// Resolves launches left in `intent` (the daemon died around sbatch, or sbatch's
    /// answer was lost) by looking their tags up in Slurm. Found: adopted. Not found in
    /// a successful lookup: submitted again, with the same tag. Returns false when Slurm
    /// did not answer.
    pub async fn reconcile_launches(&mut self, t: i64) -> Result<bool, StoreError> {
        let mut open = self.store.open_launches()?;
        open.retain(|l| !self.in_flight.contains_key(&l.id));
        // In-place requeues are finished (or undone) from where Slurm has their job.
        let (requeues, open): (Vec<_>, Vec<_>) =
            open.into_iter().partition(|l| l.requeue_of.is_some());
        for l in &requeues {
            self.resume_requeue(l, t).await?;
        }
        if open.is_empty() {
            return Ok(true);
        }
        let mut by_user: BTreeMap<String, Vec<_>> = BTreeMap::new();
        for l in open {
            let sub = self.store.submission(l.submission_id)?;
            by_user.entry(sub.user.clone()).or_default().push((l, sub));
        }
        for (user, launches) in by_user {
            let since = launches
                .iter()
                .map(|(l, _)| l.created_at)
                .min()
                .unwrap_or(t)
                - 600;
            // One user's lookup failing holds up only that user's launches: their chains
            // keep their open launch, which `launch_due` respects.
            let found = match sbatch::find_tags(&self.slurm, &user, since).await {
                Ok(f) => f,
                Err(e) => {
                    self.slurm_down("tag lookup", &e);
                    continue;
                }
            };
            for (l, sub) in launches {
                // Not entered across the sbatch below: `run_launch` has its own.
                let span = super::launch_span(&l);
                if let Some(job) = found.get(&l.tag) {
                    span.record("job", tracing::field::display(job));
                    span.in_scope(|| info!("found the job of an interrupted launch in slurm; adopting it, not submitting again"));
                    self.store.launch_submitted(l.id, job, t)?;
                    // Cluster mode submits every job held and releases it once the job is
                    // recorded: a job of an interrupted launch (a daemon that stopped or
                    // was deposed around its sbatch) is released here, by the daemon that
                    // recorded it. A released job's release changes nothing.
                    if self.config.cluster.is_some() && !crate::daemon::cluster::holds(&l.argv) {
                        let run_as = crate::slurm::RunAs::lookup(sub.owner_uid);
                        let base = crate::slurm::jobid::base_job_id(job).to_string();
                        if let Err(e) = self.slurm.release(&[base], run_as.as_ref()).await {
                            span.in_scope(|| tracing::warn!("cannot release the adopted job: {e}"));
                        }
                    }
                    continue;
                }
                // A first submission whose client was never told it would be submitted
                // (the daemon stopped, or the answer was a failure) is not submitted now:
                // the user may already have submitted it again.
                if l.unpromised {
                    span.in_scope(|| info!("an interrupted first submission is not in slurm; its client was not told it would be submitted, so it is dropped"));
                    self.store.discard_submission(l.id)?;
                    continue;
                }
                // A job that may exist but is not found any more could have finished and
                // left squeue (and sacct may not keep comments): submitting again could
                // duplicate it, so a person or agent decides.
                let unreached = l.error.as_deref().is_some_and(|e| e.starts_with(UNREACHED));
                if !unreached && t - l.created_at > UNCONFIRMED_AFTER_SECS {
                    let event = |n| Event::LaunchUnconfirmed {
                        tag: &l.tag,
                        last_error: l.error.as_deref(),
                        argv: &l.argv,
                        n,
                    };
                    span.in_scope(|| self.escalate_launch(&l, "unconfirmed", event, t))?;
                    continue;
                }
                if !self.retry_room(sub.owner_uid) {
                    continue;
                }
                span.in_scope(|| info!("an interrupted launch is not in slurm; submitting it now"));
                match self.run_launch(&l, &sub, t).await? {
                    None | Some(LaunchOutcome::Submitted(_) | LaunchOutcome::Unknown(_)) => {}
                    // Left as an intent, it would be tried again every cycle.
                    Some(LaunchOutcome::Refused { code, stderr }) => {
                        self.launch_refused(&l, code, &stderr, t)?
                    }
                }
            }
        }
        Ok(true)
    }
}
