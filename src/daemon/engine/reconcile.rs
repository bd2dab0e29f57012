//! Phase 1: launches left as an intent (the daemon died around sbatch, or its answer was
//! lost) are looked up by their tags before anything is submitted again.

/// An interrupted launch older than this that cannot be found is escalated, not repeated:
/// a job it created could have ended and left squeue (Slurm's default MinJobAge is 300 s).
const UNCONFIRMED_AFTER_SECS: i64 = 300;
use super::{Engine, UNREACHED};
use crate::daemon::sbatch::{self, LaunchOutcome};
use crate::domain::policy::{Event, HeldJobSettled};
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
        open.retain(|l| !self.in_flight.contains(l.id));
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
                if let Some(jobs) = found.get(&l.tag) {
                    // More than one job with the tag (a deposed daemon's sbatch, a
                    // database flap): one is adopted, the other held ones cancelled.
                    let Some((job, extra)) = self.choose_job(jobs, sub.owner_uid).await else {
                        continue;
                    };
                    let job = job.as_str();
                    span.record("job", tracing::field::display(job));
                    span.in_scope(|| info!("found the job of an interrupted launch in slurm; adopting it, not submitting again"));
                    match self.store.launch_submitted(l.id, job, t) {
                        Ok(()) => {}
                        // Another chain records this job as its live attempt (one job is
                        // one chain's at most): that launch waits, no one else's does.
                        Err(e) if e.is_constraint() => {
                            span.in_scope(|| tracing::error!("the job found by this launch's tag is recorded on another chain already ({e}); this launch waits, nothing is submitted again"));
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                    // Cluster mode submits every job held and releases it once the job is
                    // recorded: a job of an interrupted launch (a daemon that stopped or
                    // was deposed around its sbatch) is released here, by the daemon that
                    // recorded it. A released job's release changes nothing.
                    let run_as = crate::slurm::RunAs::lookup(sub.owner_uid);
                    if self.config.cluster.is_some()
                        && !crate::daemon::sbatch::holds(&l.argv, sub.script.as_deref())
                    {
                        let base = crate::slurm::jobid::base_job_id(job).to_string();
                        match self.slurm.release(&[base], run_as.as_ref()).await {
                            Ok(()) => self.record_held_job(
                                &l,
                                job,
                                Some(job),
                                HeldJobSettled::Adopted,
                                t,
                            )?,
                            Err(e) => span
                                .in_scope(|| tracing::warn!("cannot release the adopted job: {e}")),
                        }
                    }
                    for other in extra {
                        let Some(run_as) = run_as.as_ref() else {
                            span.in_scope(|| tracing::warn!(other = %other, "a second held job with the launch's tag is left held: its owner is unknown to this node"));
                            continue;
                        };
                        match self.slurm.cancel_pending(&other, Some(run_as)).await {
                            Ok(()) => self.record_held_job(
                                &l,
                                &other,
                                Some(job),
                                HeldJobSettled::Cancelled,
                                t,
                            )?,
                            Err(e) => span.in_scope(|| tracing::warn!(other = %other, "cannot cancel a second held job with the launch's tag: {e}")),
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

    /// Of the jobs Slurm has with one launch's tag (`jobs`, in the order found), the one to
    /// adopt and those to cancel: the first not held by its owner (it runs, ran, or waits
    /// only for resources), else the first; the others that are held, by `owner`, are to be
    /// cancelled while held (they never ran). A second job that is not held cannot be
    /// stopped safely: it is left, and logged. `None` when Slurm did not answer (nothing is
    /// decided; the next cycle looks again).
    async fn choose_job(&self, jobs: &[String], owner: u32) -> Option<(String, Vec<String>)> {
        if let [one] = jobs {
            return Some((one.clone(), Vec::new()));
        }
        let mut held = Vec::with_capacity(jobs.len());
        for j in jobs {
            match self.slurm.held_job(j).await {
                Ok(row) => held.push(row.is_some_and(|r| r.uid == owner)),
                Err(e) => {
                    tracing::warn!(job = %j, "cannot tell whether a job with a launch's tag is held: {e}");
                    return None;
                }
            }
        }
        let pick = held.iter().position(|h| !h).unwrap_or(0);
        let mut extra = Vec::new();
        for (i, j) in jobs.iter().enumerate() {
            if i == pick {
                continue;
            }
            if held[i] {
                extra.push(j.clone());
            } else {
                tracing::error!(job = %j, adopted = %jobs[pick], "two jobs with one launch's tag are not held: the other one is left as it is (it may have run)");
            }
        }
        Some((jobs[pick].clone(), extra))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::engine::sweep::tests::{held_job, waiting_launch};

    /// Two jobs carry one launch's tag (a deposed daemon's sbatch, a database flap): the
    /// one not held is adopted, even when the held one is found first, and the held one is
    /// cancelled while held, with a record on the chain.
    #[tokio::test]
    async fn of_two_jobs_with_one_tag_the_one_not_held_is_adopted_and_the_held_one_cancelled() {
        let (fake, mut engine, l) = waiting_launch();
        let chain = engine.store().launch_chains(l.id).unwrap()[0];
        let stray = held_job(&fake, &l.tag, &[]).await;
        let job = held_job(&fake, &l.tag, &[]).await;
        fake.release(std::slice::from_ref(&job), None)
            .await
            .unwrap();
        assert!(engine.reconcile_launches(20).await.unwrap());
        let adopted = engine.store().launch(l.id).unwrap();
        assert_eq!(adopted.job_id.as_deref(), Some(job.as_str()));
        assert!(
            fake.job(&stray).unwrap().state.is_terminal(),
            "the held one was not cancelled"
        );
        assert!(!fake.job(&job).unwrap().state.is_terminal());
        let records: Vec<(Option<String>, serde_json::Value)> = engine
            .store()
            .decisions(chain)
            .unwrap()
            .into_iter()
            .map(|d| (d.reason_code, d.inputs))
            .collect();
        assert_eq!(
            records,
            [(
                Some("held_job_cancelled".to_string()),
                serde_json::json!({"job": stray, "tag": l.tag, "recorded": job})
            )]
        );
    }

    /// Issue 32's attacking review: a job found by a launch's tag whose id another chain
    /// already records as its live attempt is refused by the store's one live attempt per
    /// job. A user can make that happen to her own jobs: her sbatch (her code, with her
    /// environment) prints garbage so the launch stays an intent, she takes the tag out of
    /// the job's comment (`scontrol update`), leaves a plain-sbatch note for it (adopted
    /// as a second chain: no tag), then puts the tag back. That refusal held up the whole
    /// reconciliation, and so every cycle for every user; it now holds up that launch
    /// alone, which stays an intent.
    #[tokio::test]
    async fn a_job_another_chain_records_holds_up_only_its_own_launch() {
        let (fake, mut engine, victim) = waiting_launch();
        let mut waiting = || {
            engine
                .store_mut()
                .create_submission_waiting(
                    &crate::daemon::engine::sweep::tests::submission(),
                    &[],
                    &[],
                    10,
                    |_| Vec::new(),
                )
                .unwrap()
        };
        let other = waiting();
        let liar = waiting();
        let job = held_job(&fake, &victim.tag, &[]).await;
        let others = held_job(&fake, &other.tag, &[]).await;
        // The lying launch recorded the victim's job id first.
        engine
            .store_mut()
            .launch_submitted(liar.id, &job, 11)
            .unwrap();
        assert!(engine.reconcile_launches(20).await.unwrap());
        assert_eq!(
            engine.store().launch(other.id).unwrap().job_id.as_deref(),
            Some(others.as_str()),
            "the other launch was not reconciled"
        );
        assert_eq!(engine.store().launch(victim.id).unwrap().job_id, None);
    }
}
