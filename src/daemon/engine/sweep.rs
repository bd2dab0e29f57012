//! Cluster mode's sweep of held jobs (docs/cluster.md, "Submission under the epoch").
//!
//! In cluster mode every job is submitted held and released only after a transaction
//! fenced by the daemon's epoch (`daemon::cluster::Guarded`). A daemon deposed between
//! its sbatch and that check leaves a held job no one recorded; one whose release failed
//! leaves a recorded job held. The active daemon looks, in one squeue of the pending jobs,
//! for jobs held by their owner whose comment carries this store's tag:
//! - a job that is its launch's recorded job, recorded recently (however long after its
//!   sbatch) and not held on purpose (a gate, the user's own `--hold`, an in-place
//!   requeue, done or under way), is released if its hold is a daemon's, not its
//!   owner's own `scontrol hold` (Slurm shows both as `JobHeldUser`: see
//!   [`Engine::held_by_the_daemon`]); by the row's own id, never an array's base id
//!   (which would release every task);
//! - a job of a launch that is not an intent and whose recorded job is another (or none)
//!   is a deposed daemon's extra submission: it is cancelled, as its owner, while held,
//!   so it never runs.
//!
//! Each release and cancel is a decision record on the launch's chains
//! (`held_job_released`, `held_job_cancelled`), a log line when it has none left.
//!
//! A tag is the owner's text, and the listing is lines of text in which a comment can run
//! onto a line of its own: a line of the listing only names a candidate. Each candidate is
//! asked about again by its id (`held_job`: the first line of that answer is its own), and
//! acted on only if that answer shows it held by its owner, the owner of the launch its tag
//! names, and the tag in its comment; it is cancelled as that owner (never as root),
//! `--state=PENDING` (never once started). So no user's text can touch another user's job.

use super::{log_transition, Engine};
use crate::daemon::sbatch::holds;
use crate::daemon::sbatch::tags_in;
use crate::domain::policy::{self, Event, HeldJobSettled};
use crate::slurm::jobid::base_job_id;
use crate::slurm::{RunAs, Slurm};
use crate::store::{Batch, Launch, LaunchState, StoreError};
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
    /// One sweep of held jobs (see the module's doc). `recent`: how long after it was
    /// recorded a job that is held is taken to be one whose release failed (later, a hold
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
        // Jobs held for an in-place requeue under way (`scontrol requeuehold` done, its
        // update and release not yet): the requeue releases them once its changes are
        // made; released here, one would run again unchanged.
        let requeuing: std::collections::HashSet<String> = if held.rows.is_empty() {
            Default::default()
        } else {
            self.store
                .open_launches()?
                .into_iter()
                .filter_map(|l| l.requeue_of)
                .collect()
        };
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
                        // Recent from when the job was recorded, not from the launch:
                        // a deposed daemon's job adopted (and its release failed) long
                        // after its sbatch is this daemon's to release all the same.
                        let recorded_at = launch.recorded_at.unwrap_or(launch.created_at);
                        if launch.requeue_of.is_some()
                            || requeuing.contains(&row.job_id)
                            || requeuing.contains(&base)
                            || holds(&launch.argv, sub.script.as_deref())
                            || t - recorded_at > recent
                        {
                            break;
                        }
                        if !self.held_by_the_daemon(&launch, &base, &row.job_id)? {
                            info!(job = %row.job_id, launch = launch.id, "a recorded job is held by its owner (not left held by a daemon): left held");
                            break;
                        }
                        // The row's own id, never the array's base id (which would release
                        // every task, those their owner holds too).
                        match self
                            .slurm
                            .release(std::slice::from_ref(&row.job_id), Some(&run_as))
                            .await
                        {
                            Ok(()) => {
                                swept.released += 1;
                                self.record_held_job(
                                    &launch,
                                    &row.job_id,
                                    recorded.as_deref(),
                                    HeldJobSettled::Released,
                                    t,
                                )?;
                            }
                            Err(e) => {
                                warn!(job = %row.job_id, "cannot release a recorded job left held: {e}")
                            }
                        }
                    }
                    _ => match self.slurm.cancel_pending(id, Some(&run_as)).await {
                        Ok(()) => {
                            swept.cancelled += 1;
                            self.record_held_job(
                                &launch,
                                id,
                                recorded.as_deref(),
                                HeldJobSettled::Cancelled,
                                t,
                            )?;
                        }
                        Err(e) => warn!(job = %id, "cannot cancel an unrecorded held job: {e}"),
                    },
                }
                break;
            }
        }
        Ok(swept)
    }

    /// Whether the hold on `launch`'s recorded job `base` (the row `job`) is a daemon's,
    /// left when its release after sbatch failed, rather than its owner's own `scontrol
    /// hold`. Slurm cannot tell the two apart: both are `JobHeldUser` with priority 0
    /// (the daemon submits as the owner). So: a job this daemon released after its sbatch
    /// was held by its owner since; one it left held is the daemon's; one submitted by
    /// another daemon (or before a restart) is the daemon's only until it has been released
    /// once with a record: a hold after that is its owner's.
    fn held_by_the_daemon(
        &self,
        launch: &Launch,
        base: &str,
        job: &str,
    ) -> Result<bool, StoreError> {
        if let Some(released) = self.slurm.released_after_submit(base) {
            return Ok(!released);
        }
        for (c, _) in self.store.launch_attempts(launch.id)? {
            let settled_before = self.store.decisions(c)?.iter().any(|d| {
                matches!(
                    d.reason_code.as_deref(),
                    Some("held_job_released" | "held_job_adopted")
                ) && d.inputs.get("tag").and_then(|v| v.as_str()) == Some(launch.tag.as_str())
                    && d.inputs
                        .get("job")
                        .and_then(|v| v.as_str())
                        // A record of the array's base (adopted whole) counts for its tasks.
                        .is_some_and(|j| j == job || j == base)
            });
            if settled_before {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Records what the active daemon did with a held job of `launch` (`job`) on each of
    /// the launch's chains, in one transaction; a launch with no chain left gets a log
    /// line instead.
    pub(super) fn record_held_job(
        &mut self,
        launch: &Launch,
        job: &str,
        recorded: Option<&str>,
        settled: HeldJobSettled,
        t: i64,
    ) -> Result<(), StoreError> {
        let ctx = policy::Context::at(t);
        let mut steps = Vec::new();
        for (c, _) in self.store.launch_attempts(launch.id)? {
            let Some(chain) = self.store.chain(c)? else {
                continue;
            };
            let event = Event::HeldJob {
                job,
                tag: &launch.tag,
                recorded,
                settled,
            };
            let tr = self.decide(&chain, event, &ctx);
            super::attempt_span(c, job).in_scope(|| log_transition(&tr));
            steps.push((c, tr));
        }
        if steps.is_empty() {
            warn!(
                job,
                launch = launch.id,
                tag = %launch.tag,
                recorded = recorded.unwrap_or("none"),
                ?settled,
                "a held job of a launch with no chain left was settled (no chain to record it on)"
            );
            return Ok(());
        }
        self.store.apply(&Batch::each(steps), t)?;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::Config;
    use crate::slurm::fake::FakeSlurm;
    use crate::slurm::SbatchRequest;
    use crate::store::{NewSubmission, Store};

    pub(crate) fn submission() -> NewSubmission {
        crate::daemon::engine::launch::tests::submission(nix::unistd::getuid().as_raw())
    }

    /// An engine on the in-process fake with one submission waiting to be launched.
    pub(crate) fn waiting_launch() -> (FakeSlurm, Engine<FakeSlurm>, crate::store::Launch) {
        let fake = FakeSlurm::new();
        let mut engine = Engine::new(
            Config::parse("", None).unwrap(),
            Store::in_memory().unwrap(),
            fake.clone(),
        );
        let l = engine
            .store_mut()
            .create_submission_waiting(&submission(), &[], &[], 10, |_| Vec::new())
            .unwrap();
        (fake, engine, l)
    }

    /// A job with `tag` in its comment, as a daemon submits it in cluster mode (held).
    pub(crate) async fn held_job(fake: &FakeSlurm, tag: &str, more: &[&str]) -> String {
        let mut argv = vec![format!("--comment={tag}"), "--hold".to_string()];
        argv.extend(more.iter().map(|s| s.to_string()));
        argv.push("--wrap=true".into());
        fake.sbatch(&SbatchRequest {
            argv,
            cwd: "/tmp".into(),
            env: Vec::new(),
            stdin: None,
            run_as: None,
            held: false,
        })
        .await
        .unwrap()
    }

    fn codes(engine: &Engine<FakeSlurm>, chain: i64) -> Vec<(String, String)> {
        engine
            .store()
            .decisions(chain)
            .unwrap()
            .into_iter()
            .filter_map(|d| {
                let code = d.reason_code?;
                let job = d.inputs.get("job")?.as_str()?.to_string();
                Some((code, job))
            })
            .collect()
    }

    /// The stray job of a deposed daemon is cancelled while held and the recorded job left
    /// held is released, each with a record on the chain; the recorded job held again
    /// later (its owner's `scontrol hold`) stays held.
    #[tokio::test]
    async fn the_sweep_records_what_it_does_and_leaves_an_owners_own_hold() {
        let (fake, mut engine, l) = waiting_launch();
        let chain = engine.store().launch_chains(l.id).unwrap()[0];
        let stray = held_job(&fake, &l.tag, &[]).await;
        let job = held_job(&fake, &l.tag, &[]).await;
        engine.store_mut().launch_submitted(l.id, &job, 11).unwrap();
        let swept = engine.sweep_held(12, 100).await.unwrap();
        assert_eq!(
            swept,
            Swept {
                released: 1,
                cancelled: 1
            }
        );
        assert!(fake.job(&stray).unwrap().state.is_terminal());
        assert!(!fake.job(&job).unwrap().held);
        assert_eq!(
            codes(&engine, chain),
            [
                ("held_job_cancelled".to_string(), stray.clone()),
                ("held_job_released".to_string(), job.clone()),
            ]
        );
        // Its owner holds it: the next sweep leaves it held, and records nothing.
        assert!(fake.hold(&job));
        assert_eq!(engine.sweep_held(13, 100).await.unwrap(), Swept::default());
        assert!(fake.job(&job).unwrap().held);
        assert_eq!(codes(&engine, chain).len(), 2);
    }

    /// A deposed daemon's job adopted long after its launch was made (the new daemon took
    /// over a minute later), whose release at adoption failed, is released by the next
    /// sweep: the window runs from when the job was recorded, not from the launch (seen on
    /// real Slurm: the job stayed held for good, its chain never went on).
    #[tokio::test]
    async fn a_job_adopted_long_after_its_launch_is_released_by_the_sweep() {
        let (fake, mut engine, l) = waiting_launch();
        assert_eq!(l.created_at, 10);
        let chain = engine.store().launch_chains(l.id).unwrap()[0];
        let job = held_job(&fake, &l.tag, &[]).await;
        engine
            .store_mut()
            .launch_submitted(l.id, &job, 200)
            .unwrap();
        assert_eq!(engine.store().launch(l.id).unwrap().recorded_at, Some(200));
        assert_eq!(engine.sweep_held(210, 100).await.unwrap().released, 1);
        assert!(!fake.job(&job).unwrap().held);
        assert_eq!(
            codes(&engine, chain),
            [("held_job_released".to_string(), job.clone())]
        );
        // Past the window from its record, a hold is its owner's: left held.
        assert!(fake.hold(&job));
        assert_eq!(engine.sweep_held(400, 100).await.unwrap(), Swept::default());
        assert!(fake.job(&job).unwrap().held);
    }

    /// A job held for an in-place requeue that is not finished (its `scontrol update`
    /// failed, or the daemon that began it was deposed) is the requeue's to release, once
    /// its changes are made: the sweep leaves it held, however recently it was recorded,
    /// even on a daemon that does not know it released the job after its sbatch.
    #[tokio::test]
    async fn a_job_held_for_an_unfinished_requeue_in_place_is_left_to_it() {
        let (fake, mut engine, l) = waiting_launch();
        let chain = engine.store().launch_chains(l.id).unwrap()[0];
        let job = held_job(&fake, &l.tag, &[]).await;
        engine.store_mut().launch_submitted(l.id, &job, 11).unwrap();
        // It ran and ended (released long ago, as far as Slurm is concerned); the chain's
        // retry requeues it in place: `scontrol requeuehold` left it held, and the
        // update that was to follow has not been made.
        let requeue = engine
            .store_mut()
            .begin_requeue(l.submission_id, chain, &job, &["TimeLimit=20".into()], 20)
            .unwrap();
        assert!(fake.job(&job).unwrap().held);
        assert_eq!(engine.sweep_held(30, 100).await.unwrap(), Swept::default());
        assert!(
            fake.job(&job).unwrap().held,
            "released before its requeue's changes"
        );
        assert!(codes(&engine, chain).is_empty());
        // Closed (undone), it holds the job no more: a hold left then is the sweep's.
        let failed = crate::store::Batch {
            failed_launch: Some((requeue.id, "refused".into())),
            ..crate::store::Batch::each(Vec::new())
        };
        engine.store_mut().apply(&failed, 31).unwrap();
        assert_eq!(engine.sweep_held(32, 100).await.unwrap().released, 1);
        assert!(!fake.job(&job).unwrap().held);
    }

    /// An array's held task is released by its own id: never by the array's base id, which
    /// would release the tasks its owner holds too.
    #[tokio::test]
    async fn the_sweep_never_releases_an_arrays_base_id() {
        let (fake, mut engine, l) = waiting_launch();
        let base = held_job(&fake, &l.tag, &["--array=0-2"]).await;
        engine
            .store_mut()
            .launch_submitted(l.id, &base, 11)
            .unwrap();
        // Task 0 released once by the sweep (its release after sbatch failed).
        for t in ["1", "2"] {
            fake.release(&[format!("{base}_{t}")], None).await.unwrap();
        }
        assert_eq!(engine.sweep_held(12, 100).await.unwrap().released, 1);
        // Then its owner holds task 0 again, and task 1: only task 1 is released.
        assert!(fake.hold(&format!("{base}_0")));
        assert!(fake.hold(&format!("{base}_1")));
        assert_eq!(engine.sweep_held(13, 100).await.unwrap().released, 1);
        assert!(
            fake.job(&format!("{base}_0")).unwrap().held,
            "the owner's hold was released"
        );
        assert!(!fake.job(&format!("{base}_1")).unwrap().held);
        assert!(!fake.job(&format!("{base}_2")).unwrap().held);
    }
}
