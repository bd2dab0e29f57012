//! `supervisorctl wait`: block until chains have settled, so that a script can wait for
//! its work without parsing any output (as `sbatch --wait` and `hq job wait` do).
//!
//! A chain has *settled* when nothing more happens to it without someone acting:
//! `completed`, `failed`, `cancelled`, or waiting in `pending_failed` for a decision.
//! The exit code says how the chains waited for ended (`Outcome::exit_code`); the
//! question is asked with `status` requests, so `wait` needs no request of its own and
//! sees exactly what `status` shows.

use super::render;
use crate::client::{self, ClientError};
use crate::domain::model::ChainState;
use crate::protocol::views::ChainRow;
use crate::protocol::{decode, ErrorBody, ErrorKind, Request, Response};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Exit code: every chain waited for completed.
pub const EXIT_ALL_COMPLETED: i32 = 0;
/// Exit code: some chain failed or was cancelled, and none waits for a decision.
pub const EXIT_SOME_FAILED: i32 = 1;
/// Exit code: some chain waits in `pending_failed` for a decision (`supervisorctl
/// pending`). It wins over a failure: the batch of work is not finished while one does.
pub const EXIT_SOME_PENDING: i32 = 5;
/// Exit code: `--timeout` passed before every chain settled (as `timeout(1)` exits).
pub const EXIT_TIMED_OUT: i32 = 124;

/// The first pause between two looks, and the longest: a chain that settles is seen
/// within a second at first, and within `MAX_PAUSE` however long the wait, which costs
/// the daemon one read per pause (answered beside its loop).
const FIRST_PAUSE: Duration = Duration::from_secs(1);
const MAX_PAUSE: Duration = Duration::from_secs(5);
/// Up to this many unsettled chains are asked about one by one; more, and one `status`
/// of all the caller's chains is cheaper than that many requests.
const ASK_ONE_BY_ONE: usize = 8;

/// True when nothing more happens to a chain in `state` until someone acts.
pub fn settled(state: ChainState) -> bool {
    !matches!(state, ChainState::Active | ChainState::Ready)
}

/// How the chains waited for stand, by state.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub counts: BTreeMap<&'static str, usize>,
}

impl Outcome {
    pub fn of<'a>(states: impl IntoIterator<Item = &'a ChainState>) -> Outcome {
        let mut counts = BTreeMap::new();
        for s in states {
            *counts.entry(s.as_str()).or_insert(0) += 1;
        }
        Outcome { counts }
    }

    fn count(&self, s: ChainState) -> usize {
        self.counts.get(s.as_str()).copied().unwrap_or(0)
    }

    pub fn unsettled(&self) -> usize {
        self.count(ChainState::Active) + self.count(ChainState::Ready)
    }

    /// The exit code once every chain has settled (see the constants).
    pub fn exit_code(&self) -> i32 {
        if self.count(ChainState::PendingFailed) > 0 {
            EXIT_SOME_PENDING
        } else if self.count(ChainState::Failed) + self.count(ChainState::Cancelled) > 0 {
            EXIT_SOME_FAILED
        } else {
            EXIT_ALL_COMPLETED
        }
    }

    /// "4 completed, 1 failed, 1 pending_failed", in the states' own order.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = ChainState::ALL
            .iter()
            .filter(|s| self.count(**s) > 0)
            .map(|s| format!("{} {}", self.count(*s), s.as_str()))
            .collect();
        parts.join(", ")
    }
}

/// What `wait` was asked to wait for.
pub struct WaitArgs<'a> {
    pub ids: &'a [String],
    pub timeout: Option<Duration>,
    pub json: bool,
    /// Said after the first look's error when the daemon cannot be reached: which config
    /// named the socket.
    pub unreachable_hint: String,
}

/// Why a look at the chains did not give rows.
enum LookError {
    /// The daemon could not be reached (`connect`: not even its socket) or was busy:
    /// worth looking again.
    Unreachable { why: String, connect: bool },
    /// The daemon said no (an unknown id, not yours): final.
    Refused(ErrorBody),
    /// An answer that cannot be read: final.
    Internal(String),
}

fn look(socket: &client::Endpoint, id: Option<&str>) -> Result<Vec<ChainRow>, LookError> {
    let request = Request::Status {
        id: id.map(str::to_string),
    };
    match client::call(socket, &request) {
        Ok(Response::Ok(v)) => decode(v).map_err(|e| LookError::Internal(e.to_string())),
        Ok(Response::Error(e)) if e.kind == ErrorKind::Unavailable => Err(LookError::Unreachable {
            why: e.message,
            connect: false,
        }),
        Ok(Response::Error(e)) => Err(LookError::Refused(e)),
        Err(e @ ClientError::Garbage(_)) => Err(LookError::Internal(e.to_string())),
        Err(e) => Err(LookError::Unreachable {
            connect: matches!(e, ClientError::Connect { .. }),
            why: e.to_string(),
        }),
    }
}

/// The chains' current rows, asked one by one (by chain id) while there are few, else
/// with one `status` of everything the caller sees.
fn look_at(socket: &client::Endpoint, chains: &[String]) -> Result<Vec<ChainRow>, LookError> {
    if chains.len() > ASK_ONE_BY_ONE {
        let wanted: std::collections::HashSet<&str> = chains.iter().map(String::as_str).collect();
        return Ok(look(socket, None)?
            .into_iter()
            .filter(|r| wanted.contains(r.chain.id.as_str()))
            .collect());
    }
    let mut rows = Vec::with_capacity(chains.len());
    for c in chains {
        rows.extend(look(socket, Some(c))?);
    }
    Ok(rows)
}

/// The one-line progress display, redrawn in place on a terminal.
struct Progress {
    on: bool,
    drawn: bool,
}

impl Progress {
    fn show(&mut self, started: Instant, rows: &BTreeMap<String, ChainRow>, note: &str) {
        if !self.on {
            return;
        }
        let outcome = Outcome::of(rows.values().map(|r| &r.chain.state));
        let secs = started.elapsed().as_secs();
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[Kwaiting for {} of {} chains ({}) {}:{:02}{}",
            outcome.unsettled(),
            rows.len(),
            outcome.summary(),
            secs / 60,
            secs % 60,
            note
        );
        let _ = err.flush();
        self.drawn = true;
    }

    fn clear(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

/// Runs `supervisorctl wait`; returns the exit code.
pub fn run(socket: &client::Endpoint, args: WaitArgs<'_>) -> i32 {
    let started = Instant::now();
    let deadline = args.timeout.and_then(|t| started.checked_add(t));
    // The chains to wait for: those the ids name (an array's job id names all its tasks),
    // or every open chain the caller sees. A daemon that cannot be reached now is an
    // error at once: there is nothing to wait for yet.
    let first = if args.ids.is_empty() {
        look(socket, None).map(|rows| {
            rows.into_iter()
                .filter(|r| r.chain.state.is_open())
                .collect::<Vec<_>>()
        })
    } else {
        args.ids.iter().try_fold(Vec::new(), |mut all, id| {
            all.extend(look(socket, Some(id))?);
            Ok(all)
        })
    };
    let first = match first {
        Ok(rows) => rows,
        Err(e) => {
            let unreachable = matches!(e, LookError::Unreachable { connect: true, .. });
            let code = look_failed(e);
            if unreachable {
                eprintln!("supervisorctl: {}", args.unreachable_hint);
            }
            return code;
        }
    };
    // Keyed by chain id: an id named twice, or a job id and its chain, is one chain.
    let mut rows: BTreeMap<String, ChainRow> =
        first.into_iter().map(|r| (r.chain.id.clone(), r)).collect();
    let mut progress = Progress {
        on: !args.json && std::io::stderr().is_terminal(),
        drawn: false,
    };
    let mut pause = FIRST_PAUSE;
    let mut unreachable_said = false;
    loop {
        let open: Vec<String> = rows
            .values()
            .filter(|r| !settled(r.chain.state))
            .map(|r| r.chain.id.clone())
            .collect();
        if open.is_empty() {
            break;
        }
        progress.show(started, &rows, "");
        if deadline.is_some_and(|d| Instant::now() + pause > d) {
            if let Some(d) = deadline {
                std::thread::sleep(d.saturating_duration_since(Instant::now()));
            }
            progress.clear();
            return timed_out(&rows, args.json);
        }
        std::thread::sleep(pause);
        pause = (pause * 3 / 2).min(MAX_PAUSE);
        match look_at(socket, &open) {
            Ok(now) => {
                unreachable_said = false;
                for r in now {
                    rows.insert(r.chain.id.clone(), r);
                }
            }
            // A daemon being restarted (or busy) is waited for, within the timeout.
            Err(LookError::Unreachable { why, .. }) => {
                if progress.on {
                    progress.show(started, &rows, " (daemon unreachable, still waiting)");
                } else if !unreachable_said {
                    eprintln!("supervisorctl: {why}; still waiting");
                }
                unreachable_said = true;
            }
            Err(e) => {
                progress.clear();
                return look_failed(e);
            }
        }
    }
    progress.clear();
    let outcome = Outcome::of(rows.values().map(|r| &r.chain.state));
    print_rows(&rows, args.json);
    if !args.json {
        if rows.is_empty() {
            println!("no open chains to wait for");
        } else {
            println!("settled: {}", outcome.summary());
            if outcome.exit_code() == EXIT_SOME_PENDING {
                println!("waiting for a decision: see `supervisorctl pending`");
            }
        }
    }
    outcome.exit_code()
}

fn print_rows(rows: &BTreeMap<String, ChainRow>, json: bool) {
    let mut list: Vec<&ChainRow> = rows.values().collect();
    // Chain ids sort as their numbers do (c9 before c10).
    list.sort_by_key(|r| (r.chain.id.len(), r.chain.id.clone()));
    if json {
        match serde_json::to_string(&list) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("supervisorctl: cannot encode the rows: {e}"),
        }
    } else if !list.is_empty() {
        let owned: Vec<ChainRow> = list.into_iter().cloned().collect();
        print!("{}", render::status_table(&owned));
    }
}

fn timed_out(rows: &BTreeMap<String, ChainRow>, json: bool) -> i32 {
    let outcome = Outcome::of(rows.values().map(|r| &r.chain.state));
    print_rows(rows, json);
    eprintln!(
        "supervisorctl: timed out with {} of {} chains still active or ready ({})",
        outcome.unsettled(),
        rows.len(),
        outcome.summary()
    );
    EXIT_TIMED_OUT
}

fn look_failed(e: LookError) -> i32 {
    match e {
        LookError::Unreachable { why, .. } => {
            eprintln!("supervisorctl: {why}");
            ErrorKind::Unavailable.exit_code()
        }
        LookError::Refused(body) => {
            eprintln!("supervisorctl: {}", body.message);
            body.kind.exit_code()
        }
        LookError::Internal(why) => {
            eprintln!("supervisorctl: {why}");
            ErrorKind::Internal.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ChainState::*;

    #[test]
    fn only_active_and_ready_are_waited_for() {
        let waited: Vec<ChainState> = ChainState::ALL
            .iter()
            .copied()
            .filter(|s| !settled(*s))
            .collect();
        assert_eq!(waited, [Active, Ready]);
    }

    #[test]
    fn the_exit_code_says_how_the_chains_ended() {
        let code = |states: &[ChainState]| Outcome::of(states).exit_code();
        assert_eq!(code(&[]), EXIT_ALL_COMPLETED);
        assert_eq!(code(&[Completed, Completed]), EXIT_ALL_COMPLETED);
        assert_eq!(code(&[Completed, Failed]), EXIT_SOME_FAILED);
        assert_eq!(code(&[Cancelled, Completed]), EXIT_SOME_FAILED);
        // A decision still to make wins: the work is not finished.
        assert_eq!(code(&[Failed, PendingFailed, Completed]), EXIT_SOME_PENDING);
        assert_eq!(code(&[PendingFailed]), EXIT_SOME_PENDING);
        let codes = [
            EXIT_ALL_COMPLETED,
            EXIT_SOME_FAILED,
            EXIT_SOME_PENDING,
            EXIT_TIMED_OUT,
        ];
        // None of them is one of the codes every command may exit with.
        for k in [
            ErrorKind::Usage,
            ErrorKind::NotFound,
            ErrorKind::Conflict,
            ErrorKind::Forbidden,
            ErrorKind::Unavailable,
            ErrorKind::Internal,
        ] {
            assert!(!codes.contains(&k.exit_code()), "{k:?}");
        }
    }

    #[test]
    fn the_summary_counts_states_in_their_order() {
        let o = Outcome::of(&[PendingFailed, Completed, Failed, Completed, Active]);
        assert_eq!(
            o.summary(),
            "1 active, 1 pending_failed, 2 completed, 1 failed"
        );
        assert_eq!(o.unsettled(), 1);
    }
}
