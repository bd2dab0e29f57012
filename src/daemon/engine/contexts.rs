//! What the parts of the daemon outside the cycle may touch of the engine, one struct per
//! kind of caller, each borrowing only the engine's fields it names (disjointly, so the
//! rest stay the cycle's):
//!
//! - [`Desk`]: a request that changes something (`requests`), and plain sbatch's
//!   adoptions, which are `adopt`'s: the store, the config, what adoption asks Slurm
//!   ([`Lookup`]), the chains requests hold ([`Holds`]), the submits in flight
//!   ([`Flights`]) and the callers' write rate.
//! - [`Post`]: notification delivery (`notifications`): the store, `[notify]`, and a
//!   [`Runner`] for slurm.conf's `MailProg`.
//! - [`AgentView`]: the agent (`agent`): the store to read, `[agent]` and the config's
//!   path.
//! - [`Upkeep`]: the loop's own work on the store and config (`daemon/mod.rs`: a journal
//!   entry settled, the replica brought up to date, the log folded at a stop, a reload).
//! - [`Runner`]: the commands that run beside the loop (a launch's sbatch, a cancel's
//!   scancels), as the users they are for.
//!
//! Nothing outside the engine calls `Engine::store`, `store_mut`, `config` or `slurm`
//! (`tests/architecture.rs`); those are for the tests to look inside.

use super::runner::{Lookup, Runner};
use super::{held::Held, launch, Engine, Found, Outage};
use crate::config::{AgentConfig, Config, NotifyConfig};
use crate::daemon::rate::WriteRate;
use crate::daemon::sbatch::LaunchOutcome;
use crate::slurm::Slurm;
use crate::store::{Launch, Store, StoreError};
use std::collections::{HashMap, VecDeque};
use std::path::Path;

impl<S: Slurm> Engine<S> {
    /// What a request that changes something may touch.
    pub fn desk(&mut self) -> Desk<'_, S> {
        Desk {
            store: &mut self.store,
            config: &self.config,
            slurm: Lookup(&self.slurm),
            holds: Holds {
                held: &mut self.held,
                backlog: &mut self.backlog,
            },
            flights: &mut self.in_flight,
            rate: &mut self.write_rate,
            outage: &mut self.outage,
        }
    }

    /// What notification delivery may touch.
    pub fn post(&mut self) -> Post<'_, S>
    where
        S: Clone,
    {
        Post {
            runner: self.runner(),
            store: &mut self.store,
            notify: &self.config.notify,
        }
    }

    /// What the agent may read.
    pub fn agent_view(&self) -> AgentView<'_> {
        AgentView {
            store: &self.store,
            agent: &self.config.agent,
            config_path: self.config.path.as_deref(),
        }
    }

    /// The loop's own work on the store and the config.
    pub fn upkeep(&mut self) -> Upkeep<'_> {
        Upkeep {
            store: &mut self.store,
            config: &self.config,
        }
    }

    /// The commands that run beside the loop, to move into a future there.
    pub fn runner(&self) -> Runner<S>
    where
        S: Clone,
    {
        Runner::new(self.slurm.clone(), self.config.state_dir.clone())
    }
}

/// What a request that changes something may touch (`requests`; plain sbatch's adoptions
/// too). Its Slurm commands run beside the loop through a [`Runner`]; on the loop it asks
/// Slurm only what adoption asks ([`Lookup`]).
pub struct Desk<'e, S> {
    pub store: &'e mut Store,
    pub config: &'e Config,
    pub slurm: Lookup<'e, S>,
    pub holds: Holds<'e>,
    pub flights: &'e mut Flights,
    pub rate: &'e mut WriteRate,
    /// For a submit's sbatch that gave no clear answer: an outage, as the cycle's.
    outage: &'e mut Outage,
}

impl<S> Desk<'_, S> {
    /// Records what a submit's sbatch answered: a job, or no clear answer (the launch
    /// stays an intent; `promise` makes an unpromised first submission one to finish
    /// later), as the cycle records a retry's. A refusal is for the caller to record.
    pub fn record_launch(
        &mut self,
        l: &Launch,
        outcome: &LaunchOutcome,
        t: i64,
        promise: bool,
    ) -> Result<(), StoreError> {
        launch::record_launch(self.store, self.outage, l, outcome, t, promise)
    }
}

/// The chains requests hold while their Slurm command runs beside the loop (a cancel's
/// scancel): the cycle leaves them alone meanwhile (`held.rs`).
pub struct Holds<'e> {
    held: &'e mut Held,
    backlog: &'e mut VecDeque<Found>,
}

impl Holds<'_> {
    /// Holds chains until [`Holds::release`]. Their endings waiting to be judged are the
    /// request's to record (the next poll finds them again if its command fails); the
    /// requeues Slurm made of a job still queued stay.
    pub fn hold(&mut self, chains: &[i64]) {
        self.held.hold(chains);
        let held = &self.held;
        self.backlog
            .retain(|f| f.still_queued || !held.contains(f.attempt.chain_id));
    }

    /// The request's command has answered: the cycle acts on its chains again.
    pub fn release(&mut self, chains: &[i64]) {
        self.held.release(chains);
    }

    /// Whether a request holds the chain (its cancel's scancel has not answered yet).
    pub fn contains(&self, chain: i64) -> bool {
        self.held.contains(chain)
    }
}

/// Launches whose sbatch runs beside the loop right now: whose, and whether a user's
/// submit (true) or a retry. Reconciliation leaves them alone: their fate is about to be
/// known. Requests mark their submits; the cycle its retries.
#[derive(Debug, Default)]
pub struct Flights(HashMap<i64, (u32, bool)>);

impl Flights {
    /// How many of `uid`'s submits are waiting for their sbatch.
    pub fn submits_of(&self, uid: u32) -> usize {
        self.0
            .values()
            .filter(|&&(u, submit)| submit && u == uid)
            .count()
    }

    /// Marks a user's submit as running beside the loop.
    pub fn start_submit(&mut self, launch_id: i64, uid: u32) {
        self.0.insert(launch_id, (uid, true));
    }

    /// A launch's sbatch beside the loop has answered.
    pub fn end(&mut self, launch_id: i64) {
        self.0.remove(&launch_id);
    }

    /// Marks a retry of `uid`'s as running beside the loop.
    pub(super) fn start_retry(&mut self, launch_id: i64, uid: u32) {
        self.0.insert(launch_id, (uid, false));
    }

    pub(super) fn contains(&self, launch_id: i64) -> bool {
        self.0.contains_key(&launch_id)
    }

    /// Retries beside the loop: all of them, or `uid`'s.
    pub(super) fn retries(&self, uid: Option<u32>) -> usize {
        self.0
            .values()
            .filter(|&&(u, submit)| !submit && uid.is_none_or(|uid| u == uid))
            .count()
    }
}

/// What notification delivery may touch (`notifications`).
pub struct Post<'e, S> {
    pub store: &'e mut Store,
    pub notify: &'e NotifyConfig,
    /// For slurm.conf's `MailProg`, asked beside the loop.
    pub runner: Runner<S>,
}

/// What the agent may read (`agent`).
pub struct AgentView<'e> {
    pub store: &'e Store,
    pub agent: &'e AgentConfig,
    /// The config file the agent's `supervisorctl` is pointed at.
    pub config_path: Option<&'e Path>,
}

/// The loop's own work on the store and the config (`daemon/mod.rs`).
pub struct Upkeep<'e> {
    pub store: &'e mut Store,
    pub config: &'e Config,
}
