//! Phase 3: retries whose backoff has passed are launched (an array's ready tasks in one
//! sbatch); what sbatch answers is recorded, and a refusal escalated.

use super::requeue::InPlace;
use super::{
    log_transition, now, Engine, Outage, RetryFlight, MAX_RETRY_FLIGHTS, UNCONFIRMED, UNREACHED,
};
use crate::daemon::sbatch::{self, LaunchOutcome};
use crate::domain::model::ChainState;
use crate::domain::policy::{self, Event};
use crate::slurm::Slurm;
use crate::store::{Batch, Store, StoreError};
use std::collections::{BTreeMap, HashSet};
use tracing::{error, info, Instrument};

impl<S: Slurm> Engine<S> {
    /// Launches due retries outside a poll cycle (after a resolution): interrupted
    /// launches are settled first, so a chain never gets a second launch beside one whose
    /// fate is still unknown.
    pub async fn launch_ready(&mut self, t: i64) -> Result<(), StoreError> {
        if self.reconcile_launches(t).await? {
            self.launch_due(t).await?;
        }
        Ok(())
    }

    /// Launches the retries whose backoff has passed. Ready siblings of one array
    /// submission with the same resources go together in one sbatch (`--array=<list>`).
    pub(super) async fn launch_due(&mut self, t: i64) -> Result<(), StoreError> {
        // A submission with a launch still unsettled gets no second one beside it.
        let unsettled: HashSet<i64> = self
            .store
            .open_launches()?
            .iter()
            .map(|l| l.submission_id)
            .collect();
        // A held chain gets no new attempt while its holder's command runs.
        let mut ready: Vec<_> = self
            .held
            .free(self.store.chains_in_state(ChainState::Ready)?, |c| c.id)
            .into_iter()
            .filter(|c| !unsettled.contains(&c.submission_id))
            .collect();
        // A chain whose job Slurm cancelled for its dependency waits for the chains it
        // waits on to have a live attempt, and ends if one of them failed for good.
        let waiting: Vec<i64> = ready
            .iter()
            .filter(|c| {
                c.last_classification == Some(crate::domain::model::Classification::Cancelled)
            })
            .map(|c| c.id)
            .collect();
        if !waiting.is_empty() {
            let dropped = self.drop_broken(&waiting, t)?;
            let mut keep = Vec::with_capacity(ready.len());
            for c in ready {
                if dropped.contains(&c.id) {
                    continue;
                }
                if waiting.contains(&c.id) && self.waits_for_upstream(c.submission_id)? {
                    continue;
                }
                keep.push(c);
            }
            ready = keep;
        }
        let due_subs: HashSet<i64> = ready
            .iter()
            .filter(|c| c.not_before.unwrap_or(0) <= t)
            .map(|c| c.submission_id)
            .collect();
        let mut groups: BTreeMap<(i64, String), Vec<i64>> = BTreeMap::new();
        for c in ready.iter().filter(|c| due_subs.contains(&c.submission_id)) {
            let key = (
                c.submission_id,
                serde_json::to_string(&c.plan).unwrap_or_default(),
            );
            groups.entry(key).or_default().push(c.id);
        }
        for ((sub_id, _), chains) in groups {
            if self.defer && self.in_flight.retries(None) >= MAX_RETRY_FLIGHTS {
                // The rest stay ready for the next cycle.
                break;
            }
            let sub = self.store.submission(sub_id)?;
            // This user's retries beside the loop are at their bound: next cycle.
            if !self.retry_room(sub.owner_uid) {
                continue;
            }
            // `retry.in_place`: the ended job is requeued under its own id; when that does
            // not happen, the chain is ready again (with a record saying why) and the
            // retry goes ahead as an sbatch right away.
            if let Some((chain, job)) = self.in_place_candidate(&chains)? {
                if let InPlace::Handled = self.requeue_in_place(&sub, &chain, &job, t).await? {
                    continue;
                }
            }
            let l = match sbatch::begin_relaunch(&mut self.store, &self.config, &sub, &chains, t) {
                Ok(l) => l,
                Err(sbatch::PrepareError::Store(e)) => return Err(e),
                Err(e) => {
                    error!(submission = sub_id, "cannot prepare the retry: {e}");
                    self.escalate(&chains, &e.to_string(), t)?;
                    continue;
                }
            };
            crate::plumbing::failpoint::hit("after-intent");
            match self.run_launch(&l, &sub, t).await? {
                None | Some(LaunchOutcome::Submitted(_)) => {}
                Some(LaunchOutcome::Unknown(_)) => return Ok(()),
                Some(LaunchOutcome::Refused { code, stderr }) => {
                    self.launch_refused(&l, code, &stderr, t)?;
                }
            }
        }
        Ok(())
    }

    /// Runs the sbatch of a recorded launch and records what happened; or, when launches
    /// are deferred, leaves it to take off beside the loop (`None`).
    pub async fn run_launch(
        &mut self,
        l: &crate::store::Launch,
        sub: &crate::store::Submission,
        t: i64,
    ) -> Result<Option<LaunchOutcome>, StoreError> {
        if self.defer {
            self.in_flight.start_retry(l.id, sub.owner_uid);
            self.takeoff.push(RetryFlight {
                launch: l.clone(),
                sub: sub.clone(),
            });
            return Ok(None);
        }
        let outcome = sbatch::sbatch(&self.slurm, &self.config.state_dir, l, sub)
            .instrument(super::launch_span(l))
            .await;
        let _span = super::launch_span(l).entered();
        self.record_launch(l, &outcome, t, false)?;
        Ok(Some(outcome))
    }

    /// Records what an sbatch answered (see [`record_launch`]).
    pub(super) fn record_launch(
        &mut self,
        l: &crate::store::Launch,
        outcome: &LaunchOutcome,
        t: i64,
        promise: bool,
    ) -> Result<(), StoreError> {
        record_launch(&mut self.store, &mut self.outage, l, outcome, t, promise)
    }

    /// Records what a retry's sbatch beside the loop answered, as `run_launch` would have.
    pub fn land(&mut self, f: &RetryFlight, outcome: LaunchOutcome) -> Result<(), StoreError> {
        self.in_flight.end(f.launch.id);
        let _span = super::launch_span(&f.launch).entered();
        let t = now();
        self.record_launch(&f.launch, &outcome, t, false)?;
        if let LaunchOutcome::Refused { code, stderr } = outcome {
            self.launch_refused(&f.launch, code, &stderr, t)?;
        }
        Ok(())
    }

    /// sbatch refused a launch for good: its attempts are marked not submitted and their
    /// chains wait in `pending_failed`, with sbatch's answer as the evidence.
    pub(super) fn launch_refused(
        &mut self,
        l: &crate::store::Launch,
        code: i32,
        stderr: &str,
        t: i64,
    ) -> Result<(), StoreError> {
        let event = |n| Event::RetryRefused {
            code,
            stderr,
            argv: &l.argv,
            n,
        };
        self.escalate_launch(l, stderr, event, t)
    }

    /// Ends a launch that will not run (`error` is noted on it) and gives each of its
    /// chains the transition of its attempt's `event`, in one transaction.
    pub(super) fn escalate_launch<'e>(
        &mut self,
        l: &crate::store::Launch,
        error: &str,
        event: impl Fn(u32) -> Event<'e>,
        t: i64,
    ) -> Result<(), StoreError> {
        let ctx = policy::Context::at(t);
        let mut steps = Vec::new();
        for (c, n) in self.store.launch_attempts(l.id)? {
            let Some(chain) = self.store.chain(c)? else {
                continue;
            };
            let tr = policy::transition(&chain, event(n), &self.config, &ctx)
                .expect("an escalation applies to any chain");
            super::chain_span(c).in_scope(|| log_transition(&tr));
            steps.push((c, tr));
        }
        let batch = Batch {
            failed_launch: Some((l.id, error.to_string())),
            ..Batch::each(steps)
        };
        self.store.apply(&batch, t)?;
        Ok(())
    }

    /// Retries that could not be prepared: their chains (still `ready`) wait for an
    /// agent, all in one transaction.
    fn escalate(&mut self, chains: &[i64], error: &str, t: i64) -> Result<(), StoreError> {
        let ctx = policy::Context::at(t);
        let mut items = Vec::new();
        for &c in chains {
            let Some(chain) = self.store.chain(c)? else {
                continue;
            };
            if chain.state != ChainState::Ready {
                continue;
            }
            let tr = self.decide(&chain, Event::RetryUnprepared { error }, &ctx);
            let _span = super::chain_span(c).entered();
            log_transition(&tr);
            items.push((c, tr));
        }
        self.store.apply(&Batch::all(items), t)?;
        Ok(())
    }
}

/// Records what an sbatch answered: a job, or no clear answer (the launch stays an
/// intent; `promise` makes an unpromised first submission one to finish later; Slurm's
/// silence counts in the `outage`). A refusal is for the caller to record. The cycle's
/// retries and the requests' submits alike (`Desk::record_launch`).
pub(super) fn record_launch(
    store: &mut Store,
    outage: &mut Outage,
    l: &crate::store::Launch,
    outcome: &LaunchOutcome,
    t: i64,
    promise: bool,
) -> Result<(), StoreError> {
    match outcome {
        LaunchOutcome::Submitted(job) => {
            crate::plumbing::failpoint::hit("after-sbatch");
            // sbatch runs as the user, with the user's environment, and the user can
            // change her job's comment: a job (with this launch's tag) that another
            // chain records as its live attempt is refused by the store (one job is
            // one chain's); the launch stays an intent, and no other launch or cycle
            // is held up.
            if let Err(e) = store.launch_submitted(l.id, job, t) {
                if !e.is_constraint() {
                    return Err(e);
                }
                tracing::error!(job = %job, "sbatch answered a job another chain records already ({e}); the launch is settled by its tag");
                return Ok(());
            }
            tracing::Span::current().record("job", tracing::field::display(job));
            info!("submitted");
        }
        LaunchOutcome::Unknown(e) => {
            outage.down("sbatch", e);
            let kind = if e.may_have_reached_slurm() {
                UNCONFIRMED
            } else {
                UNREACHED
            };
            store.note_launch_error(l.id, &format!("{kind}: {e}"), promise)?;
        }
        LaunchOutcome::Refused { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::Config;
    use crate::daemon::engine::MAX_RETRY_FLIGHTS_PER_USER;
    use crate::slurm::fake::FakeSlurm;
    use crate::slurm::SlurmError;
    use crate::store::{NewSubmission, Store};
    use std::time::Duration;

    /// A submission of uid `uid` (user `u<uid>`): `sbatch --wrap true` in /tmp.
    pub(crate) fn submission(uid: u32) -> NewSubmission {
        NewSubmission {
            owner_uid: uid,
            user: format!("u{uid}"),
            argv: vec!["--wrap".into(), "true".into()],
            cwd: "/tmp".into(),
            env: Vec::new(),
            script_name: None,
            script: None,
            max_retries: 3,
            restartable: false,
            array_tasks: None,
            continuation: None,
        }
    }

    /// One user's retries beside the loop are bounded (their starts may all be held, one
    /// after the other): the places left are everyone else's.
    #[tokio::test]
    async fn one_users_retries_take_at_most_their_share_of_the_flights() {
        let config = Config::parse("", None).unwrap();
        let mut engine = Engine::new(config, Store::in_memory().unwrap(), FakeSlurm::new());
        engine.defer_launches();
        for n in 0..MAX_RETRY_FLIGHTS_PER_USER {
            assert!(engine.retry_room(1000), "after {n}");
            let new = submission(1000);
            let l = engine
                .store_mut()
                .create_submission_waiting(&new, &[], &[], 1, |t| vec![t.to_string()])
                .unwrap();
            let sub = new.stored_as(l.submission_id, 1);
            assert!(engine.run_launch(&l, &sub, 2).await.unwrap().is_none());
        }
        assert!(!engine.retry_room(1000));
        assert!(engine.retry_room(1001));
        assert_eq!(engine.take_flights().len(), MAX_RETRY_FLIGHTS_PER_USER);
    }

    /// A user's sbatch held before it started (their folder does not answer) says nothing
    /// about Slurm: polling keeps its pace for everyone. A timeout does back it off.
    #[test]
    fn a_start_held_in_the_users_folder_is_no_slurm_outage() {
        let config = Config::parse("poll_interval = \"10s\"\n", None).unwrap();
        let mut engine = Engine::new(config, Store::in_memory().unwrap(), FakeSlurm::new());
        let new = submission(1000);
        let l = engine
            .store_mut()
            .create_submission_waiting(&new, &[], &[], 1, |t| vec![t.to_string()])
            .unwrap();
        let held = SlurmError::Held {
            command: "sbatch".into(),
            secs: 10,
        };
        engine
            .record_launch(&l, &LaunchOutcome::Unknown(held), 2, true)
            .unwrap();
        assert_eq!(engine.next_interval(), Duration::from_secs(10));
        let timeout = SlurmError::Timeout {
            command: "sbatch".into(),
            secs: 60,
        };
        engine
            .record_launch(&l, &LaunchOutcome::Unknown(timeout), 3, true)
            .unwrap();
        assert!(engine.next_interval() > Duration::from_secs(10));
    }
}
