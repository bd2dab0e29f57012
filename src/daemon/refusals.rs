//! The network listener's refusal log, bounded: each peer address gets at most
//! `PER_WINDOW` lines per refusal reason in each `WINDOW`; the refusals beyond are
//! counted, and once the window is over one summary line says how many were not logged.
//! A flood of bad connections (a thousand garbage credentials, a port scanner, a client
//! configured with the wrong key) is then a few lines per peer and reason, not a line per
//! connection, and nothing is lost from the count.
//!
//! The state is bounded too: at most `MAX_KEYS` (peer, reason) pairs are tracked; the
//! refusals of further peers share one entry per reason ("other peers"). Entries whose
//! window is over are summed up and forgotten by `ended`, which the listener calls each
//! `WINDOW`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines per (peer, reason) in one window.
pub const PER_WINDOW: u32 = 5;

/// The window over which `PER_WINDOW` lines are allowed.
pub const WINDOW: Duration = Duration::from_secs(10);

/// (peer, reason) pairs tracked at once; beyond, peers share one entry per reason.
pub const MAX_KEYS: usize = 1024;

/// A peer address, or `None`: every peer beyond `MAX_KEYS`.
type Key = (Option<IpAddr>, &'static str);

struct Tally {
    since: Instant,
    logged: u32,
    suppressed: u64,
}

/// What to do with one refusal.
#[derive(Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Log its line.
    pub log: bool,
    /// Refusals of this key left unlogged in its window that has just ended, to be said
    /// before this one's line (0: none).
    pub suppressed_before: u64,
}

/// The summary of one ended window: `peer` (`None`: other peers), `reason`, and how many
/// refusals were not logged in it.
#[derive(Debug, PartialEq, Eq)]
pub struct Summary {
    pub peer: Option<IpAddr>,
    pub reason: &'static str,
    pub suppressed: u64,
}

#[derive(Default)]
pub struct RefusalLog {
    tallies: Mutex<HashMap<Key, Tally>>,
}

impl RefusalLog {
    /// Counts a refusal of `peer` for `reason` at `now`, and says whether it gets a line.
    pub fn admit(&self, peer: IpAddr, reason: &'static str, now: Instant) -> Verdict {
        self.tally(peer, reason, now, PER_WINDOW)
    }

    /// Counts a connection of `peer` that ended for `reason` at `now` without a line of
    /// its own (one that left before sending a credential, one pushed out of the
    /// pre-authentication pool): only the summary says how many.
    pub fn count(&self, peer: IpAddr, reason: &'static str, now: Instant) -> Verdict {
        self.tally(peer, reason, now, 0)
    }

    fn tally(&self, peer: IpAddr, reason: &'static str, now: Instant, lines: u32) -> Verdict {
        let mut t = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        let key = if t.contains_key(&(Some(peer), reason)) || t.len() < MAX_KEYS {
            (Some(peer), reason)
        } else {
            (None, reason)
        };
        let tally = t.entry(key).or_insert(Tally {
            since: now,
            logged: 0,
            suppressed: 0,
        });
        let mut suppressed_before = 0;
        if now.saturating_duration_since(tally.since) >= WINDOW {
            suppressed_before = tally.suppressed;
            *tally = Tally {
                since: now,
                logged: 0,
                suppressed: 0,
            };
        }
        let log = tally.logged < lines;
        if log {
            tally.logged += 1;
        } else {
            tally.suppressed += 1;
        }
        Verdict {
            log,
            suppressed_before,
        }
    }

    /// The windows over at `now` that left refusals unlogged; every entry whose window is
    /// over is forgotten.
    pub fn ended(&self, now: Instant) -> Vec<Summary> {
        let mut t = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        t.retain(|&(peer, reason), tally| {
            if now.saturating_duration_since(tally.since) < WINDOW {
                return true;
            }
            if tally.suppressed > 0 {
                out.push(Summary {
                    peer,
                    reason,
                    suppressed: tally.suppressed,
                });
            }
            false
        });
        out.sort_by_key(|s| (s.peer, s.reason));
        out
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        self.tallies.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n))
    }

    #[test]
    fn a_flood_from_one_peer_is_a_few_lines_and_one_summary_that_counts_the_rest() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        let logged = (0..1000)
            .filter(|_| log.admit(ip(1), "invalid", t0).log)
            .count();
        assert_eq!(logged, PER_WINDOW as usize);
        // Another reason, and another peer, have lines of their own.
        assert!(log.admit(ip(1), "slow", t0).log);
        assert!(log.admit(ip(2), "invalid", t0).log);
        // Within the window: nothing to sum up yet.
        assert_eq!(log.ended(t0 + WINDOW / 2), vec![]);
        assert_eq!(
            log.ended(t0 + WINDOW),
            vec![Summary {
                peer: Some(ip(1)),
                reason: "invalid",
                suppressed: 1000 - PER_WINDOW as u64,
            }]
        );
        assert_eq!(log.keys(), 0, "ended windows are forgotten");
        // A new window: lines again.
        assert!(log.admit(ip(1), "invalid", t0 + WINDOW).log);
    }

    #[test]
    fn a_refusal_after_the_window_says_what_the_window_left_unlogged() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        for _ in 0..(PER_WINDOW + 3) {
            log.admit(ip(1), "body", t0);
        }
        assert_eq!(
            log.admit(ip(1), "body", t0 + WINDOW),
            Verdict {
                log: true,
                suppressed_before: 3
            }
        );
        assert_eq!(log.ended(t0 + WINDOW), vec![], "said once, not twice");
    }

    #[test]
    fn connections_only_counted_get_no_line_and_a_summary() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(!log.count(ip(1), "pushed_out", t0).log);
        }
        assert!(!log.count(ip(1), "silent", t0).log);
        assert_eq!(
            log.ended(t0 + WINDOW),
            vec![
                Summary {
                    peer: Some(ip(1)),
                    reason: "pushed_out",
                    suppressed: 3,
                },
                Summary {
                    peer: Some(ip(1)),
                    reason: "silent",
                    suppressed: 1,
                }
            ]
        );
    }

    #[test]
    fn many_peers_share_one_entry_per_reason_beyond_the_bound() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        for n in 0..(MAX_KEYS as u32 + 500) {
            log.admit(ip(n), "invalid", t0);
        }
        assert_eq!(log.keys(), MAX_KEYS + 1);
        let s = log.ended(t0 + WINDOW);
        assert_eq!(
            s,
            vec![Summary {
                peer: None,
                reason: "invalid",
                suppressed: 500 - PER_WINDOW as u64,
            }]
        );
    }
}
