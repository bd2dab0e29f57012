//! Phase 0: chains that have waited in `pending_failed` too long. Off unless
//! `escalation.remind_after` or `escalation.expire_after` is set. Each is one indexed read
//! of the waiting chains (`chains_pending_since`), so a cycle pays for the chains that wait,
//! not for all of them; nothing here asks Slurm.
//!
//! A reminder is sent once per chain (not once per period): a person who let one reminder
//! pass is told again only by the expiry, if the admin set one. Expiry is a decision like
//! any other: `policy::transition` with `Event::Expired`, recorded as R3 by `expiry`.

use super::Engine;
use crate::domain::policy::{self, Event};
use crate::slurm::Slurm;
use crate::store::StoreError;
use tracing::{error, info, warn};

impl<S: Slurm> Engine<S> {
    /// Queues the reminders and carries out the expiries due at `t`.
    pub fn age_pending(&mut self, t: i64) -> Result<(), StoreError> {
        let e = &self.config.escalation;
        let (remind, expire) = (e.remind_after, e.expire_after);
        if let Some(after) = expire {
            for w in self.store.chains_to_expire(t - after.as_secs() as i64)? {
                let event = Event::Expired {
                    pending_since: w.pending_since,
                };
                let tr = match policy::transition(
                    &w.chain,
                    event,
                    &self.config,
                    &policy::Context::at(t),
                ) {
                    Ok(tr) => tr,
                    Err(r) => {
                        super::chain_span(w.chain.id)
                            .in_scope(|| error!("expiry does not apply ({r}); leaving it"));
                        continue;
                    }
                };
                let tr = self.with_dependents(w.chain.id, tr)?;
                if self.store.apply_one(w.chain.id, &tr, t)? {
                    if let Some(r) = &tr.record {
                        super::chain_span(w.chain.id).in_scope(
                            || warn!(class = %r.class, action = %r.action, "{}", r.reason),
                        );
                    }
                }
            }
        }
        if let Some(after) = remind {
            for id in self.store.chains_to_remind(t - after.as_secs() as i64)? {
                let Some(chain) = self.store.chain(id)? else {
                    continue;
                };
                let tr = self.decide(&chain, Event::RemindDue, &policy::Context::at(t));
                if self.store.apply_one(id, &tr, t)? {
                    super::chain_span(id).in_scope(|| {
                        info!(
                            "still waiting in pending_failed after {}s; reminding its submitter",
                            after.as_secs()
                        )
                    });
                }
            }
        }
        Ok(())
    }
}
