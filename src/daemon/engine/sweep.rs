//! Cluster mode's sweep of held jobs (docs/cluster.md, "Submission under the epoch").
//!
//! In cluster mode every job is submitted held and released only after a transaction
//! fenced by the daemon's epoch (`daemon::cluster::Guarded`). A daemon deposed between
//! its sbatch and that check leaves a held job no one recorded; one whose release failed
//! leaves a recorded job held. The active daemon looks, in one squeue of the pending jobs,
//! for jobs held by their owner whose comment carries this store's tag:
//! - a job that is its launch's recorded job, of a launch made recently and not held on
//!   purpose (a gate, the user's own `--hold`, an in-place requeue), is released;
//! - a job of a launch that is not an intent and whose recorded job is another (or none)
//!   is a deposed daemon's extra submission: it is cancelled, as its owner, while held,
//!   so it never runs.
//!
//! A tag is the owner's text: it only ever acts on a job whose owner (from Slurm) is the
//! owner of the launch it names, so no user's comment can touch another user's job.

use super::Engine;
use crate::daemon::cluster::holds;
use crate::daemon::sbatch::tags_in;
use crate::slurm::jobid::base_job_id;
use crate::slurm::{RunAs, Slurm};
use crate::store::{LaunchState, StoreError};
use tracing::{info, warn};

/// What a sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub released: u32,
    pub cancelled: u32,
}

impl<S: Slurm> Engine<S> {
    /// One sweep of held jobs (see the module's doc). `recent`: how long after its launch
    /// a recorded job that is held is taken to be one whose release failed (later, a hold
    /// is its owner's own `scontrol hold`, which the sweep leaves alone).
    pub async fn sweep_held(&mut self, t: i64, recent: i64) -> Result<Swept, StoreError> {
        let needle = format!("ssv-{}-", self.store.instance());
        let held = match self.slurm.held_with(&needle).await {
            Ok(p) => p,
            Err(e) => {
                warn!("cannot list the held jobs for the sweep: {e}");
                return Ok(Swept::default());
            }
        };
        let mut swept = Swept::default();
        tracing::debug!(held = held.rows.len(), "the sweep of held jobs");
        for row in &held.rows {
            let base = base_job_id(&row.job_id);
            for tag in tags_in(&row.comment).filter(|t| t.starts_with(&needle)) {
                let Some(launch) = self.store.launch_by_tag(tag)? else {
                    continue;
                };
                let owner = self.store.submission(launch.submission_id)?.owner_uid;
                if owner != row.uid {
                    continue;
                }
                let run_as = RunAs::lookup(owner);
                let recorded = launch.job_id.as_deref().map(base_job_id);
                match launch.state {
                    // Reconciliation's: it adopts (and releases) the job, or submits again.
                    LaunchState::Intent => {}
                    LaunchState::Submitted if recorded.as_deref() == Some(base.as_str()) => {
                        if launch.requeue_of.is_some()
                            || holds(&launch.argv)
                            || t - launch.created_at > recent
                        {
                            continue;
                        }
                        match self
                            .slurm
                            .release(std::slice::from_ref(&base), run_as.as_ref())
                            .await
                        {
                            Ok(()) => {
                                swept.released += 1;
                                info!(job = %base, launch = launch.id, "released a recorded job left held");
                            }
                            Err(e) => {
                                warn!(job = %base, "cannot release a recorded job left held: {e}")
                            }
                        }
                    }
                    _ => match self
                        .slurm
                        .scancel(std::slice::from_ref(&base), run_as.as_ref())
                        .await
                    {
                        Ok(()) => {
                            swept.cancelled += 1;
                            warn!(
                                job = %base,
                                launch = launch.id,
                                tag,
                                recorded = recorded.as_deref().unwrap_or("none"),
                                "cancelled a held job nobody recorded: the submission of a daemon deposed before it could record it; it never ran"
                            );
                        }
                        Err(e) => warn!(job = %base, "cannot cancel an unrecorded held job: {e}"),
                    },
                }
                break;
            }
        }
        Ok(swept)
    }
}
