//! In-place retries (`[retry] in_place`): instead of a new sbatch, the ended job of a
//! ready chain is requeued under its own id, as its owner: `scontrol requeuehold`, then
//! `scontrol update` with the retry's resources, then `scontrol release`. Its job id and its
//! accounting history stay one. (A job waiting on it that Slurm marked
//! `DependencyNeverSatisfied` when it failed is not re-armed by the requeue itself; the
//! rewiring after the launch sets its dependency again: `pipeline::rearm`.)
//!
//! Exactly once: the intent (a launch with `requeue_of`, and the chain's next attempt,
//! `launching`) is recorded before the first scontrol. A daemon that dies in between
//! leaves the intent; the next cycle's reconciliation looks the job up in squeue and
//! finishes from where Slurm has it (ended: from the start; held: update and release;
//! queued or running: done), so a job is never left held. When Slurm refuses a step, a
//! held job is cancelled (as its owner), the refusal is recorded on the chain
//! (`in_place_refused`) and the retry goes ahead as an sbatch; the same job is never tried
//! in place again.

use super::{log_transition, Engine};
use crate::daemon::sbatch::{self, PrepareError};
use crate::domain::model::ChainState;
use crate::domain::policy::{self, AttemptChange, Event, Transition};
use crate::slurm::types::{JobState, SqueueRow};
use crate::slurm::{Slurm, SlurmError};
use crate::store::{AttemptState, Batch, Chain, Launch, StoreError, Submission};
use tracing::{info, warn};

/// Where an in-place requeue stands in Slurm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// The job has ended: requeuehold, update, release.
    Ended,
    /// Requeued and held: update (again: it is idempotent) and release.
    Held,
    /// Released (queued or running): only the record is left.
    Released,
}

/// What came of one try.
pub(super) enum InPlace {
    /// Requeued, or left as an intent for the next cycle to finish (Slurm did not answer).
    Handled,
    /// Not done (refused, or undone): the chain is ready for an sbatch.
    FellBack,
}

/// A job squeue shows pending and held (by `requeuehold`, or by its owner).
fn is_held(r: &SqueueRow) -> bool {
    matches!(
        r.state,
        JobState::Pending | JobState::RequeueHold | JobState::Requeued | JobState::RequeueFed
    ) && r.reason.to_ascii_lowercase().contains("held")
}

impl<S: Slurm> Engine<S> {
    /// The ended job to requeue in place for the relaunch of `chains`, when this retry
    /// may be one: `in_place` is on, it is one chain that is not an array task and was not
    /// cancelled by Slurm for its dependency, its last attempt ended under a job id, and
    /// that job was not refused before.
    pub(super) fn in_place_candidate(
        &self,
        chains: &[i64],
    ) -> Result<Option<(Chain, String)>, StoreError> {
        let [c] = chains else {
            return Ok(None);
        };
        if !self.config.retry.in_place {
            return Ok(None);
        }
        let Some(chain) = self.store.chain(*c)? else {
            return Ok(None);
        };
        if chain.array_task.is_some() || chain.state != ChainState::Ready {
            return Ok(None);
        }
        // A job Slurm cancelled for its dependency (kill_invalid_depend) is resubmitted:
        // requeued, it would keep the dependency Slurm marked failed and be cancelled
        // again; sbatch gets it resolved anew, on the upstreams' latest attempts.
        if chain.last_classification == Some(crate::domain::model::Classification::Cancelled) {
            return Ok(None);
        }
        let last = self.store.attempts(chain.id)?.pop();
        let Some(job) = last
            .filter(|a| a.state == AttemptState::Ended)
            .and_then(|a| a.slurm_job_id)
            .filter(|j| !j.contains('_'))
        else {
            return Ok(None);
        };
        if self.store.requeue_refused_before(&job)? {
            return Ok(None);
        }
        Ok(Some((chain, job)))
    }

    /// Requeues `job`, the ended job of `chain`, in place with the chain's plan.
    pub(super) async fn requeue_in_place(
        &mut self,
        sub: &Submission,
        chain: &Chain,
        job: &str,
        t: i64,
    ) -> Result<InPlace, StoreError> {
        let fields = match sbatch::in_place_fields(sub, &chain.plan) {
            Ok(f) => f,
            Err(PrepareError::Store(e)) => return Err(e),
            // The sbatch path prepares it again and escalates what it cannot.
            Err(_) => return Ok(InPlace::FellBack),
        };
        let l = self
            .store
            .begin_requeue(sub.id, chain.id, job, &fields, t)?;
        crate::plumbing::failpoint::hit("after-intent");
        self.requeue_steps(&l, sub, Stage::Ended, t).await
    }

    /// Finishes (or undoes) an in-place requeue left as an intent, from where Slurm has
    /// the job now.
    pub(super) async fn resume_requeue(&mut self, l: &Launch, t: i64) -> Result<(), StoreError> {
        let job = l.requeue_of.clone().unwrap_or_default();
        let sub = self.store.submission(l.submission_id)?;
        let sq = match self.slurm.squeue(std::slice::from_ref(&job)).await {
            Ok(p) if p.errors.is_empty() => p,
            Ok(_) => return Ok(()),
            Err(e) => {
                self.slurm_down("squeue", &e);
                return Ok(());
            }
        };
        let row = sq.rows.iter().find(|r| r.job_id == job);
        // A chain cancelled meanwhile gets no requeue: a job held or queued for it is
        // cancelled, and the intent closed.
        let ready = match self.store.launch_chains(l.id)?.first() {
            Some(c) => self
                .store
                .chain(*c)?
                .is_some_and(|c| c.state == ChainState::Ready),
            None => false,
        };
        if !ready {
            let live = row.is_some_and(|r| !r.state.is_terminal());
            self.undo(
                l,
                &sub,
                "the chain is no longer waiting for this retry",
                live,
                t,
            )
            .await?;
            return Ok(());
        }
        let stage = match row {
            None => {
                // Gone from squeue. A job still held would be there: if sacct has a run
                // after the ones the earlier attempts had, it was released and ran while
                // the daemon was down. It is recorded as this attempt (the poll judges its
                // ending), never resubmitted beside it.
                match self.released_while_down(l, &job).await? {
                    Some(true) => {
                        self.store.launch_submitted(l.id, &job, t)?;
                        return Ok(());
                    }
                    Some(false) => {}
                    None => return Ok(()),
                }
                let why = format!("Slurm no longer knows job {job}");
                self.undo(l, &sub, &why, false, t).await?;
                return Ok(());
            }
            Some(r) if r.state.is_terminal() => Stage::Ended,
            Some(r) if is_held(r) => Stage::Held,
            Some(_) => Stage::Released,
        };
        super::launch_span(l)
            .in_scope(|| info!(requeue_of = %job, "finishing an interrupted in-place requeue"));
        self.requeue_steps(l, &sub, stage, t).await?;
        Ok(())
    }

    /// Whether sacct shows a run of `job` after those of the attempts before this
    /// requeue (`None`: sacct did not answer clearly; nothing is decided).
    async fn released_while_down(
        &mut self,
        l: &Launch,
        job: &str,
    ) -> Result<Option<bool>, StoreError> {
        let Some(chain) = self.store.launch_chains(l.id)?.first().copied() else {
            return Ok(Some(false));
        };
        let first_run = self
            .store
            .attempts(chain)?
            .iter()
            .rev()
            .find(|a| a.launch_id == l.id)
            .map_or(0, |a| a.first_run as usize);
        let sa = match self.slurm.sacct(&[job.to_string()]).await {
            Ok(p) if p.errors.is_empty() => p,
            Ok(_) => return Ok(None),
            Err(e) => {
                self.slurm_down("sacct", &e);
                return Ok(None);
            }
        };
        let runs = crate::slurm::jobid::runs_by_job(&sa.rows)
            .get(job)
            .map_or(0, Vec::len);
        Ok(Some(runs > first_run))
    }

    /// The scontrol steps from `stage` on, each as the job's owner.
    async fn requeue_steps(
        &mut self,
        l: &Launch,
        sub: &Submission,
        stage: Stage,
        t: i64,
    ) -> Result<InPlace, StoreError> {
        let job = l.requeue_of.clone().unwrap_or_default();
        let who = match sbatch::run_as(sub.owner_uid) {
            Ok(w) => w,
            Err(e) => return self.undo(l, sub, &e, false, t).await,
        };
        if stage == Stage::Ended {
            match self.slurm.requeue_hold(&job, who.as_ref()).await {
                Ok(()) => {}
                Err(e @ SlurmError::Rejected { .. }) => {
                    return self.undo(l, sub, &e.to_string(), false, t).await;
                }
                Err(e) => {
                    self.slurm_down("scontrol requeuehold", &e);
                    return Ok(InPlace::Handled);
                }
            }
            crate::plumbing::failpoint::hit("after-requeuehold");
        }
        if stage != Stage::Released {
            if !l.argv.is_empty() {
                match self.slurm.update_job(&job, &l.argv, who.as_ref()).await {
                    Ok(()) => {}
                    Err(e @ SlurmError::Rejected { .. }) => {
                        return self.undo(l, sub, &e.to_string(), true, t).await;
                    }
                    Err(e) => {
                        self.slurm_down("scontrol update", &e);
                        return Ok(InPlace::Handled);
                    }
                }
            }
            match self
                .slurm
                .release(std::slice::from_ref(&job), who.as_ref())
                .await
            {
                Ok(()) => {}
                Err(e @ SlurmError::Rejected { .. }) => {
                    return self.undo(l, sub, &e.to_string(), true, t).await;
                }
                Err(e) => {
                    self.slurm_down("scontrol release", &e);
                    return Ok(InPlace::Handled);
                }
            }
        }
        self.store.launch_submitted(l.id, &job, t)?;
        super::launch_span(l)
            .in_scope(|| info!(requeue_of = %job, changes = ?l.argv, "requeued in place"));
        Ok(InPlace::Handled)
    }

    /// An in-place requeue that does not happen: a job left in the queue for it (`live`)
    /// is cancelled as its owner first (if Slurm does not answer, the intent stays for
    /// the next cycle), then the intent is closed and the refusal recorded.
    async fn undo(
        &mut self,
        l: &Launch,
        sub: &Submission,
        error: &str,
        live: bool,
        t: i64,
    ) -> Result<InPlace, StoreError> {
        let job = l.requeue_of.clone().unwrap_or_default();
        if live {
            // As its owner, never as root: an owner whose account cannot be looked up
            // keeps the intent open until it can.
            let who = match sbatch::run_as(sub.owner_uid) {
                Ok(who) => who,
                Err(e) => {
                    super::launch_span(l).in_scope(|| warn!(requeue_of = %job, "cannot cancel the job held for an in-place requeue as its owner: {e}; trying again next cycle"));
                    return Ok(InPlace::Handled);
                }
            };
            if let Err(e) = self
                .slurm
                .scancel(std::slice::from_ref(&job), who.as_ref())
                .await
            {
                super::launch_span(l).in_scope(|| warn!(requeue_of = %job, "cannot cancel the job held for an in-place requeue: {e}; trying again next cycle"));
                return Ok(InPlace::Handled);
            }
        }
        super::launch_span(l).in_scope(
            || warn!(requeue_of = %job, "no in-place requeue: {error}; resubmitting instead"),
        );
        let ctx = policy::Context::at(t);
        let mut steps = Vec::new();
        for (c, n) in self.store.launch_attempts(l.id)? {
            let Some(chain) = self.store.chain(c)? else {
                continue;
            };
            let event = Event::InPlaceRefused {
                job: &job,
                error,
                n,
            };
            // A chain that is no longer ready keeps its state; the attempt that was to run
            // the requeue goes all the same (nothing of it ran).
            let tr = match policy::transition(&chain, event, &self.config, &ctx) {
                Ok(tr) => {
                    super::attempt_span(c, &job).in_scope(|| log_transition(&tr));
                    tr
                }
                Err(_) => Transition {
                    attempt: Some(AttemptChange::Withdrawn { n }),
                    ..Transition::none(&chain)
                },
            };
            steps.push((c, tr));
        }
        let batch = Batch {
            failed_launch: Some((l.id, error.to_string())),
            ..Batch::each(steps)
        };
        self.store.apply(&batch, t)?;
        Ok(InPlace::FellBack)
    }
}
