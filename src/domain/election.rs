//! Who acts in cluster mode: the pure half of the lease (docs/cluster.md, "The lease").
//!
//! The words:
//! - the **lease** is one row in the shared database that names the daemon that acts
//!   (queries Slurm, submits, cancels, rewires, mails) until a time *by the database
//!   server's clock*; `store::cluster::lease` holds its SQL;
//! - its **epoch** is a number that grows by one on every acquisition. It is the fencing
//!   token: every write of the active daemon is checked against it in its own
//!   transaction, so a daemon that was deposed writes nothing;
//! - a daemon's **role** is what it may do now: act (`Active`), only read (`Standby`), or
//!   nothing it cannot undo because it does not know (`Unknown`).
//!
//! The database decides who holds the lease, by its clock alone, and nothing here
//! second-guesses it. What this module decides is when *this* daemon must stop acting, on
//! its own monotonic clock, from facts passed in: when the request that won or renewed
//! the lease was **sent** (never when it was answered: the server may have granted it at
//! any instant between the two, so only the send time is a safe lower bound), how long the
//! server granted it for, a margin for the longest Slurm command in flight (an sbatch
//! started just before the deadline must end before the lease does), and an allowance for
//! the two clocks running at different rates. No wall clock is compared with the
//! server's: a database whose clock is an hour off changes nothing here.
//!
//! No I/O and no clock reads: every `now` is an argument, as in `policy`.

use std::time::{Duration, Instant};

/// The fencing token: grows by one on every acquisition of the lease, never goes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(pub u64);

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// How much faster than this daemon's monotonic clock the database server's clock may
/// run, in parts per million. NTP slews a clock by at most 500 ppm; two clocks slewed in
/// opposite directions differ by 1,000 ppm, and 2,000 leaves room for a crystal outside
/// its rating. On a 30 s lease it costs 60 ms.
pub const DRIFT_PPM: u64 = 2_000;

/// The lease's timing, checked once: a lease that leaves no time to act is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    lease: Duration,
    margin: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    #[error(
        "a lease of {lease:?} with a margin of {margin:?} leaves no time to act: \
         make the lease at least twice the margin, and the margin above zero"
    )]
    NoTimeToAct { lease: Duration, margin: Duration },
}

impl Timing {
    /// `lease`: how long the server grants the lease from each acquisition or renewal.
    /// `margin`: how long before the lease's end (on the local clock) this daemon stops
    /// acting: the time between a check of its role and the step it guards (a store
    /// transaction, the start of a Slurm command). A command that runs longer is started
    /// only if it fits ([`Election::may_start`] with its timeout).
    ///
    /// The margin must be above zero and at most half the lease, so that at least half
    /// of every grant is usable.
    pub fn new(lease: Duration, margin: Duration) -> Result<Timing, TimingError> {
        if margin.is_zero() || margin.saturating_mul(2) > lease {
            return Err(TimingError::NoTimeToAct { lease, margin });
        }
        Ok(Timing { lease, margin })
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }

    pub fn margin(&self) -> Duration {
        self.margin
    }

    /// How long after sending a request that was granted `granted` this daemon may act:
    /// the grant (never more than asked for), less what the server's clock may have
    /// gained on ours meanwhile, less the margin. Zero when nothing is left.
    pub fn usable(&self, granted: Duration) -> Duration {
        let granted = granted.min(self.lease);
        let drift = drift_of(granted);
        granted.saturating_sub(drift).saturating_sub(self.margin)
    }
}

fn drift_of(d: Duration) -> Duration {
    // At most a few minutes' lease: the product fits easily in u128 nanoseconds.
    let nanos = d.as_nanos() * u128::from(DRIFT_PPM) / 1_000_000;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// What this daemon may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// It holds the lease with this epoch, and its local deadline has not passed. `since`
    /// is when it learned it won this epoch (the local clock).
    Active { epoch: Epoch, since: Instant },
    /// Another daemon holds the lease, or this one lost it: read only, no Slurm queries.
    Standby,
    /// It cannot tell: no answer from the database yet, or its own lease's deadline passed
    /// without a renewal it could trust. It acts as a standby does.
    Unknown,
}

impl Role {
    pub fn is_active(&self) -> bool {
        matches!(self, Role::Active { .. })
    }
}

/// What the database answered to an acquisition or a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// This daemon holds the lease under `epoch`, for `granted` from the server's
    /// decision (by the server's clock).
    Holds { epoch: Epoch, granted: Duration },
    /// Another daemon holds the lease.
    HeldByOther,
    /// The lease this daemon held is gone (another epoch, released, or expired by the
    /// server's clock): it must stop at once, whatever its local deadline says.
    Lost,
    /// No answer: the database could not be reached, or the request timed out. What the
    /// daemon knew stays as it was, and its deadline still runs.
    NoAnswer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    Nothing,
    Holding {
        epoch: Epoch,
        since: Instant,
        /// When this daemon must have stopped acting (local monotonic clock).
        deadline: Instant,
        /// When the request behind `deadline` was sent: the next renewal is due a third
        /// of the usable time after it.
        sent: Instant,
    },
    Other,
}

/// This daemon's view of the lease, fed with every answer of the database.
#[derive(Debug, Clone)]
pub struct Election {
    timing: Timing,
    known: Known,
}

impl Election {
    pub fn new(timing: Timing) -> Election {
        Election {
            timing,
            known: Known::Nothing,
        }
    }

    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// Takes in the answer to a request sent at `sent` and answered at `answered` (both
    /// on the local monotonic clock).
    pub fn observe(&mut self, sent: Instant, answered: Instant, answer: Answer) {
        let answered = answered.max(sent);
        self.known = match (answer, self.known) {
            (Answer::Holds { epoch, granted }, known) => {
                let deadline = sent + self.timing.usable(granted);
                match known {
                    // The same tenure: a renewal's answer can arrive after a later one's
                    // (two requests in flight), and either is proof until its deadline.
                    Known::Holding {
                        epoch: held,
                        since,
                        deadline: before,
                        sent: sent_before,
                    } if held == epoch => Known::Holding {
                        epoch,
                        since,
                        deadline: deadline.max(before),
                        sent: sent.max(sent_before),
                    },
                    _ => Known::Holding {
                        epoch,
                        since: answered,
                        deadline,
                        sent,
                    },
                }
            }
            (Answer::HeldByOther | Answer::Lost, _) => Known::Other,
            (Answer::NoAnswer, Known::Holding { .. }) => self.known,
            (Answer::NoAnswer, Known::Nothing | Known::Other) => Known::Nothing,
        };
    }

    /// What this daemon may do at `now`.
    pub fn role(&self, now: Instant) -> Role {
        match self.known {
            Known::Holding {
                epoch,
                since,
                deadline,
                ..
            } if now < deadline => Role::Active { epoch, since },
            Known::Holding { .. } | Known::Nothing => Role::Unknown,
            Known::Other => Role::Standby,
        }
    }

    /// When this daemon must have stopped acting, while it holds a lease.
    pub fn deadline(&self) -> Option<Instant> {
        match self.known {
            Known::Holding { deadline, .. } => Some(deadline),
            _ => None,
        }
    }

    /// The epoch whose lease this daemon believes it holds (its deadline may have passed).
    pub fn epoch(&self) -> Option<Epoch> {
        match self.known {
            Known::Holding { epoch, .. } => Some(epoch),
            _ => None,
        }
    }

    /// Whether something that takes at most `takes` (a Slurm command's timeout, a
    /// transaction) may start at `now`: it must end before the deadline.
    pub fn may_start(&self, now: Instant, takes: Duration) -> bool {
        self.role(now).is_active() && self.deadline().is_some_and(|d| now + takes < d)
    }

    /// When to send the next request: a holder renews a third of its usable time after
    /// its last granted request was sent, so two more tries fit before the deadline; a
    /// standby or a daemon that does not know tries to acquire every third of a lease. A
    /// time already past means now.
    pub fn next_request(&self, now: Instant) -> Instant {
        let usable = self.timing.usable(self.timing.lease);
        match self.known {
            Known::Holding { sent, .. } => sent + usable / 3,
            Known::Nothing | Known::Other => now + self.timing.lease / 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A 30 s lease, a 5 s margin: usable 30 s - 60 ms (drift) - 5 s.
    fn election() -> Election {
        Election::new(Timing::new(30 * S, 5 * S).unwrap())
    }

    fn holds(epoch: u64) -> Answer {
        Answer::Holds {
            epoch: Epoch(epoch),
            granted: 30 * S,
        }
    }

    #[test]
    fn a_lease_too_short_for_its_margin_is_refused() {
        assert_eq!(
            Timing::new(10 * S, 6 * S),
            Err(TimingError::NoTimeToAct {
                lease: 10 * S,
                margin: 6 * S
            })
        );
        assert!(Timing::new(10 * S, Duration::ZERO).is_err());
        assert!(Timing::new(10 * S, 5 * S).is_ok());
    }

    #[test]
    fn usable_time_is_the_grant_less_drift_and_margin() {
        let t = Timing::new(30 * S, 5 * S).unwrap();
        assert_eq!(t.usable(30 * S), 25 * S - ms(60));
        // A server that grants more than asked is held to what was asked.
        assert_eq!(t.usable(300 * S), 25 * S - ms(60));
        // A grant shorter than the margin leaves nothing.
        assert_eq!(t.usable(4 * S), Duration::ZERO);
    }

    #[test]
    fn nothing_known_is_unknown_and_never_active() {
        let e = election();
        let t0 = Instant::now();
        assert_eq!(e.role(t0), Role::Unknown);
        assert!(!e.may_start(t0, ms(1)));
        assert_eq!(e.deadline(), None);
    }

    #[test]
    fn an_acquisition_makes_it_active_until_the_deadline_counted_from_the_send() {
        let mut e = election();
        let t0 = Instant::now();
        // Sent at t0, answered 2 s later: the deadline counts from t0, not from t0 + 2 s.
        e.observe(t0, t0 + 2 * S, holds(7));
        let deadline = t0 + 25 * S - ms(60);
        assert_eq!(e.deadline(), Some(deadline));
        assert_eq!(
            e.role(t0 + 2 * S),
            Role::Active {
                epoch: Epoch(7),
                since: t0 + 2 * S
            }
        );
        assert!(e.role(deadline - ms(1)).is_active());
        // The deadline itself is past: half-open.
        assert_eq!(e.role(deadline), Role::Unknown);
    }

    #[test]
    fn a_renewal_keeps_the_epoch_and_since_and_moves_the_deadline() {
        let mut e = election();
        let t0 = Instant::now();
        e.observe(t0, t0 + ms(10), holds(7));
        e.observe(t0 + 8 * S, t0 + 8 * S + ms(10), holds(7));
        assert_eq!(e.deadline(), Some(t0 + 33 * S - ms(60)));
        assert_eq!(
            e.role(t0 + 30 * S),
            Role::Active {
                epoch: Epoch(7),
                since: t0 + ms(10)
            }
        );
    }

    #[test]
    fn a_renewal_answered_late_does_not_extend_past_its_send_time() {
        let mut e = election();
        let t0 = Instant::now();
        e.observe(t0, t0, holds(3));
        // The renewal was sent at 20 s and its answer only came at 46 s: the server granted
        // it somewhere in between, so the lease may end as early as 20 s + 30 s; the daemon
        // may act until 20 s + 25 s - drift, which is already past when the answer comes.
        e.observe(t0 + 20 * S, t0 + 46 * S, holds(3));
        assert_eq!(e.deadline(), Some(t0 + 45 * S - ms(60)));
        assert_eq!(e.role(t0 + 46 * S), Role::Unknown);
        // A later renewal, answered in time, makes it active again under the same epoch:
        // nobody else can have acted, as the epoch did not move.
        e.observe(t0 + 47 * S, t0 + 47 * S + ms(5), holds(3));
        assert!(e.role(t0 + 48 * S).is_active());
    }

    #[test]
    fn an_earlier_renewal_answered_after_a_later_one_does_not_shorten_the_deadline() {
        let mut e = election();
        let t0 = Instant::now();
        e.observe(t0, t0, holds(3));
        e.observe(t0 + 10 * S, t0 + 11 * S, holds(3));
        e.observe(t0 + 5 * S, t0 + 12 * S, holds(3));
        assert_eq!(e.deadline(), Some(t0 + 35 * S - ms(60)));
    }

    #[test]
    fn a_paused_daemon_is_not_active_when_it_resumes() {
        let mut e = election();
        let t0 = Instant::now();
        e.observe(t0, t0 + ms(3), holds(4));
        // SIGSTOPped for two minutes, then continued: the monotonic clock kept running.
        assert_eq!(e.role(t0 + 120 * S), Role::Unknown);
        assert!(!e.may_start(t0 + 120 * S, ms(1)));
        // Its renewal is refused (a standby took over): it stays out.
        e.observe(t0 + 120 * S, t0 + 120 * S + ms(2), Answer::Lost);
        assert_eq!(e.role(t0 + 120 * S + ms(2)), Role::Standby);
        assert_eq!(e.deadline(), None);
    }

    #[test]
    fn a_lost_lease_stops_it_at_once_before_its_deadline() {
        let mut e = election();
        let t0 = Instant::now();
        e.observe(t0, t0, holds(4));
        e.observe(t0 + S, t0 + S, Answer::Lost);
        assert_eq!(e.role(t0 + S), Role::Standby);
    }

    #[test]
    fn no_answer_keeps_a_holder_acting_only_until_its_deadline() {
        let mut e = election();
        let t0 = Instant::now();
        e.observe(t0, t0, holds(4));
        // The database is unreachable: each try times out.
        e.observe(t0 + 8 * S, t0 + 13 * S, Answer::NoAnswer);
        e.observe(t0 + 16 * S, t0 + 21 * S, Answer::NoAnswer);
        assert!(e.role(t0 + 21 * S).is_active());
        assert_eq!(e.role(t0 + 25 * S), Role::Unknown);
    }

    #[test]
    fn no_answer_makes_a_standby_unknown() {
        let mut e = election();
        let t0 = Instant::now();
        e.observe(t0, t0, Answer::HeldByOther);
        assert_eq!(e.role(t0), Role::Standby);
        e.observe(t0 + S, t0 + 2 * S, Answer::NoAnswer);
        assert_eq!(e.role(t0 + 2 * S), Role::Unknown);
    }

    #[test]
    fn a_new_epoch_starts_a_new_tenure() {
        let mut e = election();
        let t0 = Instant::now();
        e.observe(t0, t0, holds(4));
        e.observe(t0 + S, t0 + S, Answer::Lost);
        e.observe(t0 + 40 * S, t0 + 41 * S, holds(6));
        assert_eq!(
            e.role(t0 + 41 * S),
            Role::Active {
                epoch: Epoch(6),
                since: t0 + 41 * S
            }
        );
        assert_eq!(e.deadline(), Some(t0 + 65 * S - ms(60)));
    }

    #[test]
    fn the_server_granting_less_than_asked_is_believed() {
        // The database's clock is never compared with ours, but the length it says it
        // granted is: a server that granted 6 s leaves 1 s - drift after the margin.
        let mut e = election();
        let t0 = Instant::now();
        e.observe(
            t0,
            t0,
            Answer::Holds {
                epoch: Epoch(1),
                granted: 6 * S,
            },
        );
        assert_eq!(e.deadline(), Some(t0 + S - ms(12)));
    }

    #[test]
    fn a_command_may_start_only_if_it_ends_before_the_deadline() {
        let mut e = election();
        let t0 = Instant::now();
        e.observe(t0, t0, holds(1));
        let deadline = e.deadline().unwrap();
        assert!(e.may_start(deadline - 3 * S, 2 * S));
        assert!(!e.may_start(deadline - 2 * S, 2 * S));
    }

    #[test]
    fn renewals_are_due_a_third_of_the_usable_time_after_the_last_grant_was_sent() {
        let mut e = election();
        let t0 = Instant::now();
        assert_eq!(e.next_request(t0), t0 + 10 * S);
        e.observe(t0, t0 + S, holds(1));
        assert_eq!(e.next_request(t0 + S), t0 + (25 * S - ms(60)) / 3);
    }
}
