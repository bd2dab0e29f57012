//! Metrics for Prometheus: `GET /metrics` on `[metrics] listen` (off by default).
//!
//! Two kinds of values are served:
//! - counted in this process as things happen: every Slurm command run (the daemon's
//!   `slurm::cli::SlurmCli` is built observed by [`slurm_command`]) and every poll
//!   cycle's duration and whether it failed (the daemon's loop calls [`observe_cycle`]). They live in
//!   process-wide statics because a command observer is a plain `fn`, called from
//!   wherever the engine runs a command; a
//!   histogram's update is a few atomic additions, never a lock held across I/O;
//! - read from the store when a scrape comes, on a blocking thread, over the scraper's
//!   own read-only connection (never the loop's writer): chains by state, how long the
//!   oldest `pending_failed` chain has waited, the breaker's count, quarantined nodes,
//!   and the totals of decision records. Decisions are
//!   append-only, so those totals are kept here and each scrape reads only the records
//!   written since the one before (the first scrape reads them all, once).
//!
//! The exposition is the OpenMetrics text format, which Prometheus scrapes natively.

pub mod http;

use crate::config::Config;
use crate::domain::model::{Action, ActorKind, ChainState, Classification, RecoveryClass};
use crate::store::{RuleRetry, SignatureResolution, Store, StoreError};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// Every metric's name starts with this.
pub const PREFIX: &str = "slurm_supervisor";

/// The Slurm commands the daemon runs; their series exist (at 0) before the first call,
/// so `rate()` sees the first one.
const SLURM_COMMANDS: &[&str] = &["sbatch", "squeue", "sacct", "scancel", "sinfo", "scontrol"];

/// Upper bounds (seconds) of the Slurm command latency buckets: a healthy controller
/// answers in tens of milliseconds, a sick one runs into `slurm.command_timeout` (30 s
/// by default, at most a day).
const COMMAND_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Upper bounds (seconds) of the poll cycle buckets: a cycle is one squeue, some sacct
/// and the store's writes, so mostly the commands' time.
const CYCLE_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabel {
    command: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabel {
    source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassificationLabel {
    classification: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabel {
    class: &'static str,
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActorLabel {
    actor: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabel {
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

fn command_histogram() -> Histogram {
    Histogram::new(COMMAND_BUCKETS.iter().copied())
}

/// What this process counted itself. The families are handles on shared counts: a
/// clone registered in a scrape's registry shows the same values.
struct Live {
    slurm_calls: Family<CommandLabel, Counter>,
    slurm_failures: Family<CommandLabel, Counter>,
    slurm_seconds: Family<CommandLabel, Histogram, fn() -> Histogram>,
    cycle_seconds: Histogram,
    /// Cycles that ended with Slurm not answering or the store failing.
    cycle_failures: Counter,
    notifications_sent: Family<ChannelLabel, Counter>,
    notifications_failed: Family<ChannelLabel, Counter>,
    /// Cluster mode: 1 while this daemon acts.
    cluster_active: Gauge,
    /// Cluster mode: the epoch it acts under (0 while it does not).
    cluster_epoch: Gauge,
    /// Cluster mode: the journal entries its replica has applied.
    cluster_journal: Gauge,
    /// Cluster mode: the times it took the lease.
    cluster_takeovers: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabel {
    channel: &'static str,
}

/// The ways a notification goes out.
const CHANNELS: &[&str] = &["mail", "command"];

static LIVE: LazyLock<Live> = LazyLock::new(|| {
    let live = Live {
        slurm_calls: Family::default(),
        slurm_failures: Family::default(),
        slurm_seconds: Family::new_with_constructor(command_histogram),
        cycle_seconds: Histogram::new(CYCLE_BUCKETS.iter().copied()),
        cycle_failures: Counter::default(),
        notifications_sent: Family::default(),
        notifications_failed: Family::default(),
        cluster_active: Gauge::default(),
        cluster_epoch: Gauge::default(),
        cluster_journal: Gauge::default(),
        cluster_takeovers: Counter::default(),
    };
    for channel in CHANNELS {
        drop(
            live.notifications_sent
                .get_or_create(&ChannelLabel { channel }),
        );
        drop(
            live.notifications_failed
                .get_or_create(&ChannelLabel { channel }),
        );
    }
    for c in SLURM_COMMANDS {
        let label = CommandLabel {
            command: (*c).to_string(),
        };
        drop(live.slurm_calls.get_or_create(&label));
        drop(live.slurm_failures.get_or_create(&label));
        drop(live.slurm_seconds.get_or_create(&label));
    }
    live
});

/// Counts one run of a Slurm command: `ok` is false when it did not exit 0 (a non-zero
/// exit, a signal, a timeout, or a failure to start it).
pub fn slurm_command(command: &str, ok: bool, elapsed: Duration) {
    let label = CommandLabel {
        command: command.to_string(),
    };
    LIVE.slurm_calls.get_or_create(&label).inc();
    if !ok {
        LIVE.slurm_failures.get_or_create(&label).inc();
    }
    LIVE.slurm_seconds
        .get_or_create(&label)
        .observe(elapsed.as_secs_f64());
}

/// Counts one delivery of a notification by `channel` (`mail` or `command`): a mail
/// may carry several chains' notifications.
pub fn notification(channel: &'static str, ok: bool) {
    let label = ChannelLabel { channel };
    if ok {
        LIVE.notifications_sent.get_or_create(&label).inc();
    } else {
        LIVE.notifications_failed.get_or_create(&label).inc();
    }
}

/// Cluster mode: what this daemon's role is now (`epoch` while it acts), and how far its
/// replica has applied the journal.
pub fn cluster_role(epoch: Option<u64>, journal: u64) {
    LIVE.cluster_active.set(i64::from(epoch.is_some()));
    LIVE.cluster_epoch
        .set(epoch.map_or(0, |e| i64::try_from(e).unwrap_or(i64::MAX)));
    LIVE.cluster_journal
        .set(i64::try_from(journal).unwrap_or(i64::MAX));
}

/// Cluster mode: this daemon took the lease (its first grant, or a takeover).
pub fn cluster_takeover() {
    LIVE.cluster_takeovers.inc();
}

/// Records how long one poll cycle took, and whether it failed (`ok` false: it ended
/// with Slurm not answering, so nothing was decided, or with an error of the store).
pub fn observe_cycle(elapsed: Duration, ok: bool) {
    LIVE.cycle_seconds.observe(elapsed.as_secs_f64());
    if !ok {
        LIVE.cycle_failures.inc();
    }
}

/// The totals of decision records read so far, and how far they go.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Totals {
    /// The newest decision record counted.
    pub seen: i64,
    /// Endings the supervisor judged (its own records about an observation).
    pub endings: HashMap<Classification, u64>,
    /// Every record, by recovery class and action.
    pub decisions: HashMap<(RecoveryClass, Action), u64>,
    /// Every record, by who made it.
    pub by_actor: HashMap<ActorKind, u64>,
    /// Resolutions by an agent or a person (resubmit, fail, hold).
    pub resolutions: HashMap<Action, u64>,
    /// Endings a `[[rules]]` entry decided by itself (resubmit, fail): with the
    /// resolutions, the share of endings a rule decided against an agent or a person.
    pub rule_decisions: HashMap<Action, u64>,
    /// The chains an agent or a person resubmitted.
    pub resubmitted: BTreeSet<i64>,
    /// The wall time of the attempts that were continued (docs/continuation.md).
    pub continued_seconds: u64,
}

impl Totals {
    /// Adds the decision records written since the last call.
    pub fn catch_up(&mut self, store: &Store) -> Result<(), StoreError> {
        let upto = store.last_decision_id()?;
        if upto <= self.seen {
            return Ok(());
        }
        // Both read before anything is added, so a failed read counts nothing twice.
        let tallies = store.decision_tallies(self.seen, upto)?;
        let resubmitted = store.chains_resubmitted_by_resolution(self.seen, upto)?;
        let continued = store.continued_secs(self.seen, upto)?;
        for t in tallies {
            let by_supervisor = t.actor == ActorKind::Supervisor;
            if by_supervisor && t.observed {
                *self.endings.entry(t.classification).or_default() += t.count;
            }
            *self.decisions.entry((t.class, t.action)).or_default() += t.count;
            *self.by_actor.entry(t.actor).or_default() += t.count;
            if !by_supervisor && is_resolution(t.action) {
                *self.resolutions.entry(t.action).or_default() += t.count;
            }
            if t.by_rule {
                *self.rule_decisions.entry(t.action).or_default() += t.count;
            }
        }
        self.resubmitted.extend(resubmitted);
        self.continued_seconds += continued;
        self.seen = upto;
        Ok(())
    }
}

/// The actions that resolve a chain waiting in `pending_failed` (a cancel is the user's
/// own, not a resolution).
fn is_resolution(a: Action) -> bool {
    matches!(a, Action::Resubmit | Action::Fail | Action::Hold)
}

/// Everything a scrape reads from the store and the disk, at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub chains: HashMap<ChainState, u64>,
    /// How long (seconds) the chain that entered `pending_failed` first, of those in it
    /// now, has waited there; 0 when none waits.
    pub pending_failed_oldest: u64,
    pub totals: Totals,
    /// The chains an agent or a person resubmitted, by the state they are in now.
    pub resubmitted_by_state: HashMap<ChainState, u64>,
    /// Infrastructure failures within `breaker.window`.
    pub infra_failures: u32,
    pub quarantined: Vec<String>,
    /// The database file and its write-ahead log.
    pub store_bytes: u64,
    /// Rules that learn (docs/rules.md): proposals waiting (not in force), and the rules
    /// in force whose retries stopped working.
    pub rule_proposals: u64,
    pub rules_not_working: u64,
}

impl Snapshot {
    /// Reads the store (in one read transaction) as of `now`, bringing `totals` and
    /// `rules` up to date.
    pub fn read(
        store: &Store,
        totals: &mut Totals,
        rules: &mut RuleFacts,
        config: &Config,
        db_path: &Path,
        now: i64,
    ) -> Result<Snapshot, StoreError> {
        store.read_snapshot(|store| {
            totals.catch_up(store)?;
            let (rule_proposals, rules_not_working) = rules.counts(store, config, totals.seen)?;
            let resubmitted: Vec<i64> = totals.resubmitted.iter().copied().collect();
            let q = &config.quarantine;
            let failures = store.node_failures_since(
                now - q.window.0.as_secs() as i64 - q.duration.0.as_secs() as i64,
            )?;
            Ok(Snapshot {
                chains: store.chain_counts_by_state()?.into_iter().collect(),
                pending_failed_oldest: store
                    .oldest_pending_since()?
                    .map_or(0, |since| u64::try_from(now - since).unwrap_or(0)),
                totals: totals.clone(),
                resubmitted_by_state: store
                    .chain_counts_by_state_of(&resubmitted)?
                    .into_iter()
                    .collect(),
                infra_failures: crate::domain::policy::breaker_failures(
                    &store.infra_failures_by_owner_since(
                        now - config.breaker.window.0.as_secs() as i64,
                    )?,
                    config.breaker.threshold,
                    config.breaker.min_users_here(),
                ),
                quarantined: crate::domain::policy::quarantined(&failures, config, now),
                store_bytes: store_bytes(db_path),
                rule_proposals,
                rules_not_working,
            })
        })
    }
}

/// What the rule metrics are made of (docs/rules.md), kept from one scrape to the next
/// so that a scrape reads what changed, not every resolution and retry again: the
/// resolutions with a signature and the rules' automatic retries among the decision
/// records written since the scrape before (records are append-only), and how each retry
/// whose attempt had not ended is going now (an attempt that ended, or was never
/// submitted, stays so). The decisions about rules (few: a rejection hides a proposal) are
/// read whole each time. The counts are made anew only when one of those, or the rules
/// and thresholds in force, changed; `supervisorctl rules` reads the same facts whole
/// (`daemon/reads/rules.rs`), and the counts are what it would list.
#[derive(Debug, Default)]
pub struct RuleFacts {
    /// The newest decision record read.
    seen: i64,
    resolutions: Vec<SignatureResolution>,
    retries: Vec<RuleRetry>,
    /// The decisions about rules (`rules accept`, `rules reject`), oldest first.
    records: Vec<crate::domain::learn::RuleRecord>,
    /// The counts made from the facts (proposals waiting, rules not working), and the
    /// rules and thresholds they were made under; `None` once a fact changed.
    counts: Option<(RulesInForce, u64, u64)>,
}

/// What of the config the rule counts depend on: `[learn]`'s thresholds and the names of
/// the rules in force.
#[derive(Debug, Clone, PartialEq)]
struct RulesInForce {
    thresholds: crate::domain::learn::Thresholds,
    names: Vec<String>,
}

/// A retry's attempt that ended or was never submitted: how the retry went is settled.
fn settled(next_state: Option<&str>) -> bool {
    matches!(next_state, Some("ended" | "not_submitted"))
}

impl RuleFacts {
    /// The rules proposed from every chain's resolutions, not in force and not rejected
    /// for everyone (those waiting for an admin's decision), and the rules in force whose
    /// automatic retries stopped working (`learn::not_working`), with the
    /// facts brought up to the decision records `<= upto` and to how the retries are going
    /// now. Everything is read before anything is kept, so a failed read changes nothing.
    pub fn counts(
        &mut self,
        store: &Store,
        config: &Config,
        upto: i64,
    ) -> Result<(u64, u64), StoreError> {
        let (new_resolutions, new_retries) = if upto > self.seen {
            (
                store.signature_resolutions_between(None, self.seen, upto)?,
                store.rule_retries_between(None, self.seen, upto)?,
            )
        } else {
            (Vec::new(), Vec::new())
        };
        // Only a resubmit has a retry whose outcome counts.
        let open: Vec<usize> = (self.resolutions.iter().enumerate())
            .filter(|(_, r)| r.action == Action::Resubmit && !settled(r.next_state.as_deref()))
            .map(|(i, _)| i)
            .collect();
        let open_retries: Vec<usize> = (self.retries.iter().enumerate())
            .filter(|(_, r)| !settled(r.next_state.as_deref()))
            .map(|(i, _)| i)
            .collect();
        let keys: Vec<(i64, u32)> = (open.iter().map(|&i| &self.resolutions[i]))
            .map(|r| (r.chain_id, r.attempt_n + 1))
            .chain(
                open_retries
                    .iter()
                    .map(|&i| (self.retries[i].chain_id, self.retries[i].attempt_n + 1)),
            )
            .collect();
        let progress = store.retry_progress(&keys)?;
        let records = store.rule_decisions(None)?;

        let mut changed =
            !new_resolutions.is_empty() || !new_retries.is_empty() || records != self.records;
        self.records = records;
        let (of_resolutions, of_retries) = progress.split_at(open.len());
        for (&i, p) in open.iter().zip(of_resolutions) {
            let r = &mut self.resolutions[i];
            changed |= progress_into(
                p,
                (
                    &mut r.next_state,
                    &mut r.next_slurm_state,
                    &mut r.chain_state,
                ),
            );
        }
        for (&i, p) in open_retries.iter().zip(of_retries) {
            let r = &mut self.retries[i];
            changed |= progress_into(
                p,
                (
                    &mut r.next_state,
                    &mut r.next_slurm_state,
                    &mut r.chain_state,
                ),
            );
        }
        self.resolutions.extend(new_resolutions);
        self.retries.extend(new_retries);
        self.seen = self.seen.max(upto);

        let t = crate::domain::learn::Thresholds::from(&config.learn);
        let in_force = RulesInForce {
            thresholds: t,
            names: config.rules.iter().map(|r| r.name.clone()).collect(),
        };
        if let Some((was, proposals, not_working)) = &self.counts {
            if !changed && *was == in_force {
                return Ok((*proposals, *not_working));
            }
        }
        let proposals = crate::domain::learn::histories(
            self.resolutions.iter().map(SignatureResolution::facts),
        )
        .iter()
        .filter_map(|h| crate::domain::learn::propose(h, t))
        .filter(|p| !in_force.names.contains(&p.rule.name))
        .filter(|p| {
            crate::domain::learn::standing(&self.records, &p.id, None)
                .is_none_or(|d| d.action != crate::domain::learn::RuleAction::Reject)
        })
        .count() as u64;
        let outcomes = crate::domain::learn::tally(self.retries.iter().map(RuleRetry::outcome));
        let not_working = crate::domain::learn::not_working_rules(&outcomes, t)
            .iter()
            // A user's own rule of a name in force is not that rule (`learn::RuleKey`).
            .filter(|(name, owner)| owner.is_none() && in_force.names.contains(name))
            .count() as u64;
        self.counts = Some((in_force, proposals, not_working));
        Ok((proposals, not_working))
    }
}

/// Sets a kept retry's facts to `p`; true when that changed them.
fn progress_into(
    p: &crate::store::RetryProgress,
    (next_state, next_slurm_state, chain_state): (
        &mut Option<String>,
        &mut Option<String>,
        &mut ChainState,
    ),
) -> bool {
    let changed = *next_state != p.next_state
        || *next_slurm_state != p.next_slurm_state
        || *chain_state != p.chain_state;
    next_state.clone_from(&p.next_state);
    next_slurm_state.clone_from(&p.next_slurm_state);
    *chain_state = p.chain_state;
    changed
}

/// The size of the store on disk: the database file and its write-ahead log (a file
/// that is not there counts 0).
fn store_bytes(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    [db.to_path_buf(), PathBuf::from(wal)]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

fn gauge(v: u64) -> Gauge {
    let g = Gauge::default();
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
    g
}

/// The exposition of `snap` and of this process's own counts, with `config`'s breaker.
pub fn encode(snap: &Snapshot, config: &Config) -> String {
    let mut r = Registry::with_prefix(PREFIX);

    let chains = Family::<StateLabel, Gauge>::default();
    for s in ChainState::ALL {
        let n = snap.chains.get(s).copied().unwrap_or(0);
        chains
            .get_or_create(&StateLabel { state: s.as_str() })
            .set(n as i64);
    }
    r.register("chains", "Chains in each state, now", chains);
    r.register_with_unit(
        "pending_failed_oldest",
        "How long the chain that has waited longest in pending_failed, of those waiting now, has waited for an agent or a person (0: none waits)",
        Unit::Seconds,
        gauge(snap.pending_failed_oldest),
    );

    let endings = Family::<ClassificationLabel, Counter>::default();
    for c in Classification::ALL {
        let n = snap.totals.endings.get(c).copied().unwrap_or(0);
        endings
            .get_or_create(&ClassificationLabel {
                classification: c.as_str(),
            })
            .inc_by(n);
    }
    r.register(
        "endings",
        "Attempt endings the supervisor judged, by classification (its decision records about an observation, Slurm's requeues included); a success leaves no decision record, so completed chains are in chains{state=\"completed\"}",
        endings,
    );

    let decisions = Family::<DecisionLabel, Counter>::default();
    for class in RecoveryClass::ALL {
        for action in Action::ALL {
            let n = snap
                .totals
                .decisions
                .get(&(*class, *action))
                .copied()
                .unwrap_or(0);
            decisions
                .get_or_create(&DecisionLabel {
                    class: class.as_str(),
                    action: action.as_str(),
                })
                .inc_by(n);
        }
    }
    r.register(
        "decisions",
        "Decision records, by anyone, by recovery class (R1 automatic, R2 escalated, R3 forbidden) and action",
        decisions,
    );

    let continuations: Counter = Counter::default();
    continuations.inc_by(
        RecoveryClass::ALL
            .iter()
            .map(|c| {
                snap.totals
                    .decisions
                    .get(&(*c, Action::Continue))
                    .copied()
                    .unwrap_or(0)
            })
            .sum(),
    );
    r.register(
        "continuations",
        "Attempts of jobs that checkpoint continued after their time limit, a preemption or their own exit code (docs/continuation.md): not failures",
        continuations,
    );
    let continued: Counter = Counter::default();
    continued.inc_by(snap.totals.continued_seconds);
    r.register(
        "continued_seconds",
        "Wall time of the attempts that were continued",
        continued,
    );

    let by_actor = Family::<ActorLabel, Counter>::default();
    for a in ActorKind::ALL {
        let n = snap.totals.by_actor.get(a).copied().unwrap_or(0);
        by_actor
            .get_or_create(&ActorLabel { actor: a.as_str() })
            .inc_by(n);
    }
    r.register(
        "decisions_by_actor",
        "Decision records by who made them: supervisor (the daemon itself), user (a person or an agent, as a user), expiry (escalation.expire_after)",
        by_actor,
    );

    let resolutions = Family::<ActionLabel, Counter>::default();
    for a in [Action::Resubmit, Action::Fail, Action::Hold] {
        let n = snap.totals.resolutions.get(&a).copied().unwrap_or(0);
        resolutions
            .get_or_create(&ActionLabel { action: a.as_str() })
            .inc_by(n);
    }
    r.register(
        "resolutions",
        "Resolutions of failed chains by an agent or a person (decisions whose actor is not the supervisor), by action",
        resolutions,
    );

    let rule_decisions = Family::<ActionLabel, Counter>::default();
    for a in [Action::Resubmit, Action::Fail] {
        let n = snap.totals.rule_decisions.get(&a).copied().unwrap_or(0);
        rule_decisions
            .get_or_create(&ActionLabel { action: a.as_str() })
            .inc_by(n);
    }
    r.register(
        "rule_decisions",
        "Endings a failure rule ([[rules]], in the config or rules.d) decided by itself, by action: resubmit (transient) or fail (permanent); against resolutions_total, the share of endings decided by a rule rather than by an agent or a person",
        rule_decisions,
    );

    let resubmitted = Family::<StateLabel, Gauge>::default();
    for s in ChainState::ALL {
        let n = snap.resubmitted_by_state.get(s).copied().unwrap_or(0);
        resubmitted
            .get_or_create(&StateLabel { state: s.as_str() })
            .set(n as i64);
    }
    r.register(
        "resolution_resubmitted_chains",
        "Chains an agent or a person resubmitted, by the state they are in now (completed: the retry they asked for worked)",
        resubmitted,
    );

    r.register(
        "slurm_commands",
        "Slurm commands run, by command",
        LIVE.slurm_calls.clone(),
    );
    r.register(
        "slurm_command_failures",
        "Slurm commands that did not exit 0 (non-zero exit, signal, timeout, or could not be started), by command; squeue and scancel also exit non-zero for job ids Slurm no longer knows",
        LIVE.slurm_failures.clone(),
    );
    r.register_with_unit(
        "slurm_command_duration",
        "How long Slurm commands took, from start to exit, by command",
        Unit::Seconds,
        LIVE.slurm_seconds.clone(),
    );
    r.register(
        "notifications_sent",
        "Notifications delivered, by channel (mail: one mail, which may name several chains of one submission; command: one run of notify.command)",
        LIVE.notifications_sent.clone(),
    );
    r.register(
        "notification_failures",
        "Deliveries of notifications that failed (non-zero exit, timeout, could not start), by channel; each is retried with backoff up to notify.max_attempts",
        LIVE.notifications_failed.clone(),
    );
    if config.cluster.is_some() {
        r.register(
            "cluster_active",
            "Cluster mode: 1 while this daemon holds the lease and acts, else 0 (a standby); exactly one daemon of a cluster shows 1",
            LIVE.cluster_active.clone(),
        );
        r.register(
            "cluster_epoch",
            "Cluster mode: the lease's epoch this daemon acts under (0 while it stands by); it grows by one at every takeover",
            LIVE.cluster_epoch.clone(),
        );
        r.register(
            "cluster_journal_entries",
            "Cluster mode: the shared journal's entries this node's replica has applied",
            LIVE.cluster_journal.clone(),
        );
        r.register(
            "cluster_takeovers",
            "Cluster mode: the times this daemon took the lease (its first grant included)",
            LIVE.cluster_takeovers.clone(),
        );
    }
    r.register_with_unit(
        "poll_cycle_duration",
        "How long each poll cycle took (squeue, sacct, judging endings, launching due retries)",
        Unit::Seconds,
        LIVE.cycle_seconds.clone(),
    );
    r.register(
        "poll_cycle_failures",
        "Poll cycles that ended without an answer from Slurm (nothing was decided; polling backs off) or with an error of the store",
        LIVE.cycle_failures.clone(),
    );

    let b = &config.breaker;
    r.register(
        "breaker_infra_failures",
        "Infrastructure failures (node_fail, boot_fail, transient) across all chains within breaker.window, each user's counted at most breaker.threshold / breaker.min_users in a daemon for several users",
        gauge(u64::from(snap.infra_failures)),
    );
    r.register(
        "breaker_threshold",
        "breaker.threshold: infrastructure failures within the window that stop automatic retries of them (0: the breaker is off)",
        gauge(u64::from(b.threshold)),
    );
    let open = b.threshold > 0 && snap.infra_failures >= b.threshold;
    r.register(
        "breaker_open",
        "1 while the infrastructure failures within breaker.window are at or over breaker.threshold (such failures are escalated, not retried), else 0",
        gauge(u64::from(open)),
    );

    r.register(
        "quarantined_nodes",
        "Nodes quarantined now (excluded from every retry)",
        gauge(snap.quarantined.len() as u64),
    );
    let nodes = Family::<NodeLabel, Gauge>::default();
    for n in &snap.quarantined {
        nodes.get_or_create(&NodeLabel { node: n.clone() }).set(1);
    }
    r.register(
        "quarantined_node",
        "1 for each node quarantined now, named by the node label",
        nodes,
    );

    let rules = Family::<SourceLabel, Gauge>::default();
    for source in ["config", "rules_d"] {
        let n = config
            .rules
            .iter()
            .filter(|r| (r.source.is_some()) == (source == "rules_d"))
            .count();
        rules.get_or_create(&SourceLabel { source }).set(n as i64);
    }
    r.register(
        "rules",
        "Failure rules in force, by where they are written: the config file, or a rules.d file beside it (where accepted proposals go, docs/rules.md)",
        rules,
    );
    r.register(
        "rule_proposals",
        "Rules proposed from agreeing resolutions of one failure signature whose retries worked, not in force (supervisorctl rules)",
        gauge(snap.rule_proposals),
    );
    r.register(
        "rules_not_working",
        "Rules in force whose automatic retries stopped working: at least learn.agreeing ended and fewer than learn.min_success of them completed",
        gauge(snap.rules_not_working),
    );

    r.register_with_unit(
        "store_size",
        "Size of the store on disk: the SQLite file and its write-ahead log",
        Unit::Bytes,
        gauge(snap.store_bytes),
    );

    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r)
        .expect("encoding into a String cannot fail");
    out
}

/// Answers scrapes: the scraper's read connection and the totals, behind one lock, so
/// scrapes run one at a time and never on the daemon's loop.
pub struct Scraper {
    db_path: PathBuf,
    config: Mutex<Arc<Config>>,
    state: Mutex<ScrapeState>,
}

#[derive(Default)]
struct ScrapeState {
    store: Option<Store>,
    totals: Totals,
    rules: RuleFacts,
}

impl Scraper {
    pub fn new(config: &Config) -> Scraper {
        Scraper {
            db_path: config.db_path(),
            config: Mutex::new(Arc::new(config.clone())),
            state: Mutex::default(),
        }
    }

    /// A reloaded config: the breaker and quarantine settings scrapes use from now on.
    pub fn set_config(&self, config: &Config) {
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(config.clone());
    }

    /// One scrape's exposition (blocking: call it on a blocking thread).
    pub fn scrape(&self) -> Result<String, StoreError> {
        let config = self
            .config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *guard;
        let store = match state.store.take() {
            Some(s) => s,
            None => Store::open_reader(&self.db_path)?,
        };
        let snap = Snapshot::read(
            &store,
            &mut state.totals,
            &mut state.rules,
            &config,
            &self.db_path,
            crate::plumbing::clock::now(),
        );
        // A connection that failed is opened anew next time.
        if snap.is_ok() {
            state.store = Some(store);
        }
        Ok(encode(&snap?, &config))
    }
}

#[cfg(test)]
mod tests;
