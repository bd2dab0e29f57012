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
//! A tag is the owner's text, and the listing is lines of text in which a comment can run
//! onto a line of its own: a line of the listing only names a candidate. Each candidate is
//! asked about again by its id (`held_job`: the first line of that answer is its own), and
//! acted on only if that answer shows it held by its owner, the owner of the launch its tag
//! names, and the tag in its comment; it is cancelled as that owner (never as root),
//! `--state=PENDING` (never once started). So no user's text can touch another user's job.

use super::Engine;
use crate::daemon::sbatch::holds;
use crate::daemon::sbatch::tags_in;
use crate::slurm::jobid::base_job_id;
use crate::slurm::{RunAs, Slurm};
use crate::store::{LaunchState, StoreError};
use tracing::{info, warn};

/// Candidates one sweep looks at, at most (each costs a squeue; the rest wait a lease).
const MAX_PER_SWEEP: usize = 64;

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
        for candidate in held.rows.iter().take(MAX_PER_SWEEP) {
            let id = &candidate.job_id_raw;
            // The listing names candidates; Slurm, asked about the one job, says what it is.
            let row = match self.slurm.held_job(id).await {
                Ok(Some(row)) => row,
                Ok(None) => continue,
                Err(e) => {
                    warn!(job = %id, "cannot look at a held job: {e}");
                    continue;
                }
            };
            let base = base_job_id(&row.job_id);
            for tag in tags_in(&row.comment).filter(|t| t.starts_with(&needle)) {
                let Some(launch) = self.store.launch_by_tag(tag)? else {
                    continue;
                };
                let sub = self.store.submission(launch.submission_id)?;
                if sub.owner_uid != row.uid {
                    continue;
                }
                // As the owner, never as root: an owner the system does not know is left.
                let Some(run_as) = RunAs::lookup(sub.owner_uid) else {
                    warn!(job = %id, uid = sub.owner_uid, "a held job's owner is unknown to this node; left as it is");
                    break;
                };
                let recorded = launch.job_id.as_deref().map(base_job_id);
                match launch.state {
                    // Reconciliation's: it adopts (and releases) the job, or submits again.
                    LaunchState::Intent => {}
                    LaunchState::Submitted if recorded.as_deref() == Some(base.as_str()) => {
                        if launch.requeue_of.is_some()
                            || holds(&launch.argv, sub.script.as_deref())
                            || t - launch.created_at > recent
                        {
                            break;
                        }
                        match self
                            .slurm
                            .release(std::slice::from_ref(&base), Some(&run_as))
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
                    _ => match self.slurm.cancel_pending(id, Some(&run_as)).await {
                        Ok(()) => {
                            swept.cancelled += 1;
                            warn!(
                                job = %id,
                                launch = launch.id,
                                tag,
                                recorded = recorded.as_deref().unwrap_or("none"),
                                "cancelled a held job nobody recorded: the submission of a daemon deposed before it could record it; it never ran"
                            );
                        }
                        Err(e) => warn!(job = %id, "cannot cancel an unrecorded held job: {e}"),
                    },
                }
                break;
            }
        }
        Ok(swept)
    }
}
