//! The engine's Slurm as it is lent to the parts outside the cycle: the engine is the
//! daemon's one way to Slurm, and nothing outside it holds the `Slurm` itself. Two
//! handles, each with the commands its users may run and no other:
//!
//! - [`Runner`], owned (a clone, moved into a future beside the loop): the commands that
//!   run beside the loop, each as the user it is for: a launch's sbatch as its
//!   submission's owner (a retry, a user's submit), a cancel's scancels as the jobs'
//!   owners; and, for the notifications, slurm.conf's `MailProg`.
//! - [`Lookup`], borrowed on the loop: what adoption asks Slurm about a job, as the
//!   daemon (its owner and state, its record, its batch script), and the jobs the
//!   plain-sbatch job_submit script marked.

use crate::daemon::sbatch::{self, LaunchOutcome};
use crate::slurm::types::JobState;
use crate::slurm::{RunAs, Slurm, SlurmError};
use crate::store::{Launch, Submission};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The commands that run beside the loop (see the module's docs), from
/// `Engine::runner`.
#[derive(Clone)]
pub struct Runner<S> {
    slurm: S,
    /// Where a launch's script snapshot is written (`sbatch::sbatch`).
    state_dir: PathBuf,
}

impl<S: Slurm> Runner<S> {
    pub(super) fn new(slurm: S, state_dir: PathBuf) -> Runner<S> {
        Runner { slurm, state_dir }
    }

    /// Runs the sbatch of a recorded launch, as its submission's owner.
    pub async fn sbatch(&self, l: &Launch, sub: &Submission) -> LaunchOutcome {
        sbatch::sbatch(&self.slurm, &self.state_dir, l, sub).await
    }

    /// Cancels live jobs, as their owner (`who`).
    pub async fn scancel(&self, jobs: &[String], who: Option<&RunAs>) -> Result<(), SlurmError> {
        self.slurm.scancel(jobs, who).await
    }

    /// A cycle's poll query ([`super::Engine::cycle_to_poll`]), as the daemon: the
    /// squeue, and the reading and folding of its listing, beside the loop.
    pub async fn poll(&self, ask: super::PollAsk) -> super::PollAnswer {
        ask.ask(&self.slurm).await
    }

    /// What slurm.conf names as `MailProg`, as Slurm prints it.
    pub async fn mail_prog(&self) -> Result<Option<String>, SlurmError> {
        self.slurm.mail_prog().await
    }
}

/// What adoption (`requests/adopt.rs`, and plain sbatch through it) asks Slurm, on the
/// loop, as the daemon: fields Slurm writes where whose job it is matters.
pub struct Lookup<'e, S>(pub(super) &'e S);

impl<S: Slurm> Lookup<'_, S> {
    /// Who owns a job, from every row squeue shows for its id (an array's tasks and a
    /// heterogeneous job's components are rows of their own, all of one owner), and its
    /// state when one row is the job itself: fields Slurm writes, never the job's own
    /// text (`adopt` asks this before anything else). `None` when squeue shows no row, or
    /// rows of more than one owner.
    pub async fn job_owner_of_any(
        &self,
        id: &str,
    ) -> Result<Option<(u32, Option<JobState>)>, SlurmError> {
        let p = self.0.squeue(&[id.to_string()]).await?;
        if !p.errors.is_empty() {
            return Ok(None);
        }
        let Some(first) = p.rows.first() else {
            return Ok(None);
        };
        if p.rows.iter().any(|r| r.uid != first.uid) {
            return Ok(None);
        }
        let mut own = p.rows.iter().filter(|r| r.job_id == id);
        let state = match (own.next(), own.next()) {
            (Some(r), None) => Some(r.state),
            _ => None,
        };
        Ok(Some((first.uid, state)))
    }

    /// What `scontrol show job` says of a job.
    pub async fn show_job(&self, id: &str) -> Result<BTreeMap<String, String>, SlurmError> {
        self.0.show_job(id).await
    }

    /// A job's batch script.
    pub async fn batch_script(&self, id: &str) -> Result<Vec<u8>, SlurmError> {
        self.0.batch_script(id).await
    }

    /// The live jobs whose `AdminComment` is `mark`, with their owners (`daemon::plain`).
    pub async fn marked_jobs(&self, mark: &str) -> Result<Vec<(String, u32)>, SlurmError> {
        self.0.marked_jobs(mark).await
    }
}
