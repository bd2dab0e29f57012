//! The endings `poll` found: classified (with the job's output tails, read off the loop),
//! decided by `policy::transition`, and recorded with their observation.

/// How long reading a job's stdout/stderr tail may take.
const OUTPUT_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a partition limit read from sinfo is trusted.
const PARTITION_REFRESH: Duration = Duration::from_secs(3600);
use super::{log_transition, Engine};
use crate::classify::{self, Observation};
use crate::model::Action;
use crate::policy::{self, ChainHistory, Event};
use crate::slurm::types::{JobState, SacctRow};
use crate::slurm::Slurm;
use crate::store::{Attempt, AttemptEnd, StoreError};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tracing::warn;

impl<S: Slurm> Engine<S> {
    async fn partition_max(&mut self, partition: &str) -> Option<u64> {
        let stale = self
            .partitions_read
            .is_none_or(|t| t.elapsed() > PARTITION_REFRESH);
        if stale || !self.partitions.contains_key(partition) {
            match self.slurm.partition_limits().await {
                Ok(p) => {
                    self.partitions = p;
                    self.partitions_read = Some(Instant::now());
                }
                Err(e) => warn!("cannot read partition limits (sinfo): {e}; time escalation uses the config cap only"),
            }
        }
        self.partitions.get(partition).copied().flatten()
    }

    /// Records the requeues and the ending (if any) that the runs of one attempt show.
    pub(super) async fn judge(
        &mut self,
        a: &Attempt,
        runs: &[Vec<SacctRow>],
        still_queued: bool,
        t: i64,
    ) -> Result<(), StoreError> {
        let jid = a.slurm_job_id.clone().unwrap_or_default();
        // After Slurm's job ids wrap around (or its state is reset), an old job with the
        // same id is in sacct too: when some runs carry this attempt's tag, only those are
        // ours. (None carry it when the cluster keeps no comments, or the job was adopted.)
        let tagged = |run: &&Vec<SacctRow>| {
            run.iter()
                .any(|r| !r.is_step() && r.comment.contains(&a.tag))
        };
        let ours: Vec<Vec<SacctRow>> = if runs.iter().any(|r| tagged(&r)) {
            runs.iter().filter(tagged).cloned().collect()
        } else {
            runs.to_vec()
        };
        let runs = ours.as_slice();
        // Every run before the last one ended and was requeued by Slurm itself.
        let requeued_runs = runs.len().saturating_sub(1);
        for run in runs.iter().take(requeued_runs).skip(a.restarts as usize) {
            let obs = Observation {
                job_id: jid.clone(),
                rows: run.clone(),
                stderr_tail: None,
                stdout_tail: None,
                requeued_by_slurm: true,
            };
            let Ok(v) = classify::classify(&obs, &self.config.rules) else {
                continue;
            };
            let Some(chain) = self.store.chain(a.chain_id)? else {
                continue;
            };
            let tr = self.decide(
                &chain,
                Event::Requeued { verdict: &v },
                &policy::Context::at(t),
            );
            let Some(rec) = &tr.record else { continue };
            log_transition(a.chain_id, &jid, &tr);
            self.store.record_requeue(
                a.chain_id,
                a.n,
                &serde_json::to_value(&obs).unwrap_or_default(),
                rec,
                t,
            )?;
        }
        let last = runs.last().expect("runs are never empty");
        let job_row_state = last.iter().find(|r| !r.is_step()).map(|r| r.state);
        if still_queued || !job_row_state.is_some_and(JobState::is_terminal) {
            return Ok(());
        }
        let chain = self
            .store
            .chain(a.chain_id)?
            .expect("an attempt's chain exists");
        let sub = self.store.submission(chain.submission_id)?;
        // Reading the job's files can block (a hung network filesystem): off the loop,
        // with a deadline; past it the ending is judged without them.
        let max_retries = sub.max_retries;
        let (config, run, job) = (self.config.clone(), last.clone(), jid.clone());
        let read = tokio::task::spawn_blocking(move || {
            crate::daemon::evidence::output_tails(&config, &sub, &job, &run)
        });
        let (stderr_tail, stdout_tail) = match tokio::time::timeout(OUTPUT_READ_TIMEOUT, read).await
        {
            Ok(Ok(tails)) => tails,
            _ => {
                warn!(job = %jid, "the job's output files could not be read in time; judging without them");
                (None, None)
            }
        };
        let obs = Observation {
            job_id: jid.clone(),
            rows: last.clone(),
            stderr_tail,
            stdout_tail,
            requeued_by_slurm: false,
        };
        self.record_ending(a, obs, max_retries, t).await
    }

    async fn record_ending(
        &mut self,
        a: &Attempt,
        obs: Observation,
        max_retries: u32,
        t: i64,
    ) -> Result<(), StoreError> {
        let jid = obs.job_id.clone();
        let v = match classify::classify(&obs, &self.config.rules) {
            Ok(v) => v,
            Err(e) => {
                warn!(job = %jid, "cannot classify: {e}");
                return Ok(());
            }
        };
        let by_class: BTreeMap<String, u32> = self
            .store
            .resubmits_by_class(a.chain_id)?
            .into_iter()
            .collect();
        let history = ChainHistory {
            resubmits: by_class.values().sum(),
            resubmits_by_class: by_class,
            max_retries,
            plan: a.plan.clone(),
            agent_retry_of: self
                .store
                .last_decision(a.chain_id)?
                .filter(|d| d.actor != "supervisor" && d.action == Action::Resubmit)
                .map(|d| d.classification),
        };
        let ctx = policy::Context {
            partition_max_secs: self.partition_max(&v.partition).await,
            quarantined: policy::quarantined(
                &self.store.node_failures_since(
                    t - self.config.quarantine.window.0.as_secs() as i64
                        - self.config.quarantine.duration.0.as_secs() as i64,
                )?,
                &self.config,
                t,
            ),
            recent_infra_failures: self
                .store
                .infra_failures_since(t - self.config.breaker.window.0.as_secs() as i64)?,
            now: t,
            jitter: rand::random::<f64>() * 2.0 - 1.0,
        };
        let Some(chain) = self.store.chain(a.chain_id)? else {
            return Ok(());
        };
        let event = Event::Ended {
            verdict: &v,
            history: &history,
        };
        let tr = self.decide(&chain, event, &ctx);
        let job_row = obs.rows.iter().find(|r| !r.is_step());
        let end = AttemptEnd {
            slurm_state: job_row.map(|r| r.state.to_string()).unwrap_or_default(),
            exit_code: v.exit_code.clone(),
            nodes: v.nodes.clone(),
            mem: v.req_mem_bytes.map(|b| format!("{}M", b.div_ceil(1 << 20))),
            time_limit: v.timelimit_secs.map(crate::slurm::parse::format_time_limit),
        };
        let tr = self.with_dependents(a.chain_id, tr)?;
        log_transition(a.chain_id, &jid, &tr);
        self.store.record_ending(
            a.chain_id,
            a.n,
            &serde_json::to_value(&obs).unwrap_or_default(),
            &end,
            &tr,
            t,
        )
    }
}
