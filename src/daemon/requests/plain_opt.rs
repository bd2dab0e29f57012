//! `opt-in` / `opt-out`: a user's choice for their plain `sbatch` submissions, recorded;
//! the loop then publishes it for the filter (`daemon::plain`) before answering.

use super::Plan;
use crate::config::PlainSbatchConfig;
use crate::daemon::access::Caller;
use crate::daemon::engine::Desk;
use crate::daemon::rate::{WriteRate, CHOICES_PER_HOUR};
use crate::protocol::views::PlainOptAnswer;
use crate::protocol::{ErrorKind, Request, Response};
use crate::slurm::Slurm;
use crate::store::Store;

/// The caller's plain `sbatch` submissions are supervised (true) or not (false) from now
/// on.
pub struct PlainOpt {
    pub opted_in: bool,
}

impl super::Write for PlainOpt {
    const CHANGES_OPT_IN: bool = true;

    fn into_request(self) -> Request {
        Request::PlainOpt {
            opted_in: self.opted_in,
        }
    }

    async fn begin<S: Slurm>(
        self,
        desk: &mut Desk<'_, S>,
        Caller { uid, .. }: Caller,
        _: tracing::Span,
    ) -> Plan {
        Plan::answered(plain_opt(
            desk.store,
            &desk.config.plain_sbatch,
            desk.rate,
            uid,
            self.opted_in,
            std::time::Instant::now(),
        ))
    }
}

/// Records a user's plain-sbatch choice.
fn plain_opt(
    store: &mut Store,
    plain_sbatch: &PlainSbatchConfig,
    rate: &mut WriteRate,
    uid: u32,
    opted_in: bool,
    now: std::time::Instant,
) -> Result<PlainOptAnswer, Response> {
    // A choice this daemon would never read changes nothing: refused, so nothing is kept
    // (each one a journal entry every node applies, in cluster mode).
    if !plain_sbatch.enabled {
        return Err(Response::error(
            ErrorKind::Conflict,
            "this daemon does not supervise plain sbatch submissions ([plain_sbatch] enabled = false), \
             so your choice would change nothing and is not recorded; submit with `supervisorctl submit`, \
             or ask your admin to enable plain sbatch",
        ));
    }
    // The same choice again is answered as it stands, and writes nothing; a change is
    // kept for good (a journal entry every node applies), so it has a rate of its own.
    if store.plain_opt(uid)? != Some(opted_in) {
        if let Err(wait) = rate.take_choice(uid, now) {
            return Err(Response::error(
                ErrorKind::Unavailable,
                format!(
                    "your plain-sbatch choice may change {CHOICES_PER_HOUR} times an hour, and you have changed it that often; \
                     it stays as it was: try again in {} s",
                    wait.as_secs() + 1
                ),
            ));
        }
    }
    store.set_plain_opt(uid, opted_in, crate::plumbing::clock::now())?;
    Ok(PlainOptAnswer {
        uid,
        opted_in,
        enabled: true,
    })
}
