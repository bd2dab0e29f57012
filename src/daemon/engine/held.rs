//! Chains a request holds while its Slurm command runs beside the loop (a `cancel`'s
//! scancel, run as the jobs' owner). The cycle acts only on the chains nobody holds and
//! asks here which those are; a request that would change a held chain is refused
//! (`requests::cancel::refuse_held`).
//!
//! Holding a chain takes it out of the phases that would record its ending or start its
//! next attempt: the poll notes nothing of it (not even the
//! state seen: if the holder's command fails, the next poll finds what happened
//! meanwhile, and tells a requeue by the state last seen), its ending waiting in the
//! backlog is the holder's to record (found again by the next poll if the holder's
//! command fails), it gets no new attempt, and its submission's gates wait. Only the
//! requeues Slurm made of a job still in the queue are recorded all the same: the next
//! poll would not see them again. The ageing of a `pending_failed` chain (reminder,
//! expiry) and the notes on waiting jobs go on: the cancel decides again from the chain
//! as it finds it when its scancel answers.

use std::collections::HashSet;

#[derive(Debug, Default)]
pub struct Held(HashSet<i64>);

impl Held {
    pub fn hold(&mut self, chains: &[i64]) {
        self.0.extend(chains);
    }

    pub fn release(&mut self, chains: &[i64]) {
        for c in chains {
            self.0.remove(c);
        }
    }

    pub fn contains(&self, chain: i64) -> bool {
        self.0.contains(&chain)
    }

    /// Whether any of `chains` is held.
    pub fn any(&self, chains: impl IntoIterator<Item = i64>) -> bool {
        chains.into_iter().any(|c| self.contains(c))
    }

    /// The items whose chain nobody holds: what the cycle may act on.
    pub fn free<T>(&self, mut items: Vec<T>, chain: impl Fn(&T) -> i64) -> Vec<T> {
        items.retain(|i| !self.contains(chain(i)));
        items
    }
}
