//! `rules reject ID`: a rule proposal (docs/rules.md) rejected, for everyone by an admin,
//! or for the caller's own chains (`--mine`, and what anyone else gets). The rejection is
//! a record of its own in the store (`store/rule_decisions.rs`): `rules` shows the
//! proposal as rejected with who, when and why, and `rules accept` of it then needs
//! `--despite-rejection`. A rejection of the caller's own accepted rule takes it out of
//! force for them, past the caps on their records (`room_for_own`). An admin's rejection
//! for everyone takes every user's own acceptance made before it out of force too
//! (`learn::standing`). A proposal rejected already (as the caller sees it) is answered as it
//! stands: nothing is written.

use super::rules_accept::{as_things_stand, asked, recorded, room_for_own, scope_name, Asked};
use super::Plan;
use crate::config::Config;
use crate::daemon::access::{actor, Caller};
use crate::daemon::engine::Desk;
use crate::domain::learn::{ProposalState, RuleAction};
use crate::protocol::views::RuleDecisionAnswer;
use crate::protocol::{Request, Response};
use crate::slurm::Slurm;
use crate::store::{NewRuleDecision, Store};
use tracing::info;

pub struct RulesReject {
    pub id: String,
    pub reason: Option<String>,
    pub mine: bool,
}

impl super::Write for RulesReject {
    fn into_request(self) -> Request {
        Request::RulesReject {
            id: self.id,
            reason: self.reason,
            mine: self.mine,
        }
    }

    async fn begin<S: Slurm>(
        self,
        desk: &mut Desk<'_, S>,
        caller: Caller,
        _: tracing::Span,
    ) -> Plan {
        Plan::answered(reject(desk.store, desk.config, &caller, &self))
    }
}

fn reject(
    store: &mut Store,
    config: &Config,
    caller: &Caller,
    req: &RulesReject,
) -> Result<RuleDecisionAnswer, Response> {
    let Asked {
        id,
        reason,
        uid,
        owner,
        p,
        records,
    } = asked(
        store,
        config,
        caller,
        &req.id,
        req.reason.as_deref(),
        req.mine,
    )?;
    let id = id.as_str();
    if p.state == ProposalState::Rejected {
        return Ok(as_things_stand(p, RuleAction::Reject, owner));
    }
    let decision = NewRuleDecision {
        proposal: id,
        owner_uid: owner,
        action: RuleAction::Reject,
        actor: &actor(uid),
        actor_uid: uid,
        reason: &reason,
        rule: None,
        at: crate::plumbing::clock::now(),
    };
    // Taking one of the caller's own rules out of force always passes the caps: it
    // follows an acceptance that counted against them, so these records stay within
    // twice the cap, and a user is never left with a rule they cannot stop.
    if let Some(o) = owner.filter(|_| p.state != ProposalState::Accepted) {
        room_for_own(store, config, o, &records, &decision)?;
    }
    let record = store.record_rule_decision(&decision)?;
    info!(proposal = %id, scope = %scope_name(owner), record, uid, "rule proposal rejected");
    recorded(store, p, RuleAction::Reject, owner, record)
}
