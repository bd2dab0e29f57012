//! The per-user rate of requests that change something (`[limits]
//! write_requests_per_minute`): a token bucket per uid, as Slurm's own `rl_*` limiter
//! does for RPCs. Each user's bucket holds a minute's worth of requests and refills at
//! that rate, so a burst of a minute's worth goes through at once and a user who keeps
//! asking gets that many a minute, however many connections they use. Reads do not take
//! from it: they are answered off the loop and write nothing.
//!
//! Pure: the time is given ([`Instant`]), so the tests move it by hand.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The most users whose buckets are kept; past it, the full ones (users who have not
/// asked for a while) are dropped, which changes nothing for them.
const KEPT: usize = 4096;

/// How many times an hour a user's plain-sbatch choice (`opt-in`, `opt-out`) may change.
/// Each change is kept (in cluster mode a journal entry every node applies and every new
/// node replays until a snapshot prunes it), so turning it on and off in a loop, within
/// the write rate, would make thousands a minute; a person changes it a few times a day.
/// Asking for the choice already made changes nothing and takes nothing.
pub const CHOICES_PER_HOUR: u32 = 12;

#[derive(Debug)]
pub struct WriteRate {
    per_minute: u32,
    writes: Buckets,
    choices: Buckets,
}

/// A token bucket per uid: each holds `full` and refills `full` per `window`.
#[derive(Debug)]
struct Buckets {
    full: f64,
    per_sec: f64,
    buckets: HashMap<u32, Bucket>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl WriteRate {
    pub fn new(per_minute: u32) -> WriteRate {
        let per_minute = per_minute.max(1);
        WriteRate {
            per_minute,
            writes: Buckets::new(per_minute, Duration::from_secs(60)),
            choices: Buckets::new(CHOICES_PER_HOUR, Duration::from_secs(3600)),
        }
    }

    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Takes one request of `uid`'s at `now`; when the bucket is empty, how long until it
    /// holds one again.
    pub fn take(&mut self, uid: u32, now: Instant) -> Result<(), Duration> {
        self.writes.take(uid, now)
    }

    /// Takes one change of `uid`'s plain-sbatch choice ([`CHOICES_PER_HOUR`]).
    pub fn take_choice(&mut self, uid: u32, now: Instant) -> Result<(), Duration> {
        self.choices.take(uid, now)
    }
}

impl Buckets {
    fn new(full: u32, window: Duration) -> Buckets {
        let full = f64::from(full.max(1));
        Buckets {
            full,
            per_sec: full / window.as_secs_f64(),
            buckets: HashMap::new(),
        }
    }

    fn take(&mut self, uid: u32, now: Instant) -> Result<(), Duration> {
        let (full, per_sec) = (self.full, self.per_sec);
        if self.buckets.len() >= KEPT && !self.buckets.contains_key(&uid) {
            self.buckets.retain(|_, b| {
                b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * per_sec < full
            });
        }
        let b = self.buckets.entry(uid).or_insert(Bucket {
            tokens: full,
            at: now,
        });
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * per_sec).min(full);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / per_sec))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minutes_worth_goes_at_once_then_the_refill_rate() {
        let t0 = Instant::now();
        let mut r = WriteRate::new(60);
        for _ in 0..60 {
            assert!(r.take(1000, t0).is_ok());
        }
        let wait = r.take(1000, t0).unwrap_err();
        assert!(wait <= Duration::from_secs(1) && wait > Duration::from_millis(900));
        // Another user has a bucket of their own.
        assert!(r.take(1001, t0).is_ok());
        // One a second comes back.
        let t1 = t0 + Duration::from_secs(1);
        assert!(r.take(1000, t1).is_ok());
        assert!(r.take(1000, t1).is_err());
        // Never more than a minute's worth, however long the user waited.
        let t2 = t1 + Duration::from_secs(3600);
        for _ in 0..60 {
            assert!(r.take(1000, t2).is_ok());
        }
        assert!(r.take(1000, t2).is_err());
    }

    #[test]
    fn the_buckets_kept_are_bounded() {
        let t0 = Instant::now();
        let mut r = WriteRate::new(10);
        for uid in 0..(KEPT as u32 * 2) {
            r.take(uid, t0 + Duration::from_secs(60 * u64::from(uid)))
                .unwrap();
        }
        assert!(r.writes.buckets.len() <= KEPT);
        // A user still in the middle of a burst keeps their bucket.
        let mut r = WriteRate::new(1);
        r.take(7, t0).unwrap();
        for uid in 10..(KEPT as u32 + 10) {
            r.take(uid, t0).unwrap();
        }
        assert!(r.take(7, t0).is_err());
    }

    #[test]
    fn a_choice_changes_a_dozen_times_an_hour_apart_from_the_writes() {
        let t0 = Instant::now();
        let mut r = WriteRate::new(3000);
        for _ in 0..CHOICES_PER_HOUR {
            assert!(r.take_choice(1000, t0).is_ok());
        }
        let wait = r.take_choice(1000, t0).unwrap_err();
        assert!(wait > Duration::from_secs(299) && wait <= Duration::from_secs(300));
        // The writes' bucket is another, and so is another user's.
        assert!(r.take(1000, t0).is_ok());
        assert!(r.take_choice(1001, t0).is_ok());
        assert!(r.take_choice(1000, t0 + Duration::from_secs(300)).is_ok());
        assert!(r.take_choice(1000, t0 + Duration::from_secs(300)).is_err());
    }
}
