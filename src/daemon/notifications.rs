//! Delivering the notifications the store queued (`crate::domain::notification` says what is
//! told, and when): a mail through the site's mail program, and the optional
//! `notify.command` with the event as JSON on stdin.
//!
//! Exactly once, as far as a crash allows: a notification row is written in the same
//! transaction as the decision that calls for it, delivered after that commit, and marked
//! sent once delivered. A crash between delivering and marking sends it again at the next
//! start (at least once in that window); it is never lost. A clean stop lets a batch that
//! is out finish, for a while, and records it. A mail that went out is marked
//! on its own, so a failing command does not mail again on its retry.
//!
//! Delivery runs beside the loop, one batch at a time, each program with
//! `notify.timeout` and bounded output: a stuck mail program holds up no decision. A batch
//! takes at most `PER_OWNER` of one owner's notifications, and delivers the owners side by
//! side, each owner's one after another; an owner's turn starts no program once it has
//! taken `notify.timeout` (what it did not get to stays due, no try counted; a mail that
//! went out is not sent again), so one user's stalled programs delay another user's mail
//! by about two timeouts at most. The
//! loop picks the batch's outcome up after a later cycle and records it (the store has one
//! writer). A failure is logged and retried with backoff up to `notify.max_attempts`.
//!
//! For a system-wide (root) daemon, both programs run as the chain's owner, with a clean
//! environment, like their sbatch. The recipient is the submission's `--mail-user`, else
//! the owner's user name; one that could be read as an option or break a header is not
//! used (the owner's name is). The mail program is called as Slurm calls its `MailProg`:
//! `PROG -s SUBJECT RECIPIENT`, the body on stdin.
//!
//! What delivery may touch is its [`Post`]: the store's notifications, `[notify]`, and the
//! engine's `Runner` for slurm.conf's `MailProg`.

use super::engine::{Post, Runner};
use super::sbatch::run_as;
use crate::config::NotifyConfig;
use crate::domain::notification::{self, Event, Kind};
use crate::domain::sbatch_args::Submitted;
use crate::plumbing::clock::now;
use crate::slurm::{spawn, RunAs, Slurm};
use crate::store::{Notification, Store, StoreError};
use futures_util::StreamExt;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tracing::{debug, info, warn};

/// Notifications taken in one batch.
const BATCH: usize = 200;

/// At most this many of one owner's notifications in a batch: a user with thousands due
/// does not fill it ahead of everyone else's.
const PER_OWNER: usize = 50;

/// Owners whose deliveries run at once in a batch (each owner's one after another).
const OWNERS_AT_ONCE: usize = 32;

/// How long one turn of the loop may spend marking notifications with nothing to deliver
/// (a burst of endings leaves thousands): the rest in the loop's next turns, which come
/// at once when nothing else waits ([`Notifier::has_more`]), so no request or cycle waits
/// behind the whole backlog.
const SILENT_BUDGET: Duration = Duration::from_millis(20);

/// Output kept from a mail program or command (for the log); past it, it is killed.
const MAX_OUTPUT: u64 = 16 * 1024;

/// The mail program when neither `notify.mail_program` nor slurm.conf's `MailProg` names one.
const DEFAULT_MAIL_PROGRAM: &str = "/usr/bin/mail";

/// The first retry of a failed delivery waits this long, doubling each time up to
/// `MAX_BACKOFF`: a mail system that is down for a while is not hammered.
const FIRST_BACKOFF_SECS: i64 = 30;
const MAX_BACKOFF_SECS: i64 = 3600;

/// The `PATH` a program run as a user gets (their own environment is not used).
const CLEAN_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

/// Whether a batch is out and the mail program slurm.conf names, once read.
#[derive(Default)]
pub struct Notifier {
    running: Option<Batch>,
    slurm_mail_prog: Option<PathBuf>,
    /// The last turn stopped at [`SILENT_BUDGET`] with more pages due.
    more: bool,
}

/// A batch being delivered: polled by the loop's `select!` beside everything else (like
/// an sbatch beside the loop), so it never holds a decision up.
type Batch = std::pin::Pin<Box<dyn std::future::Future<Output = Finished>>>;

/// One mail and the notifications it carries (those of one submission and kind), or
/// notifications that only go to the command.
struct Group {
    owner: Option<RunAs>,
    home: Option<String>,
    mail: Option<Mail>,
    items: Vec<Item>,
}

struct Mail {
    to: String,
    subject: String,
    body: String,
}

struct Item {
    id: i64,
    chain: String,
    kind: Kind,
    tries: u32,
    /// Whether this batch mails it (wanted and not mailed yet).
    mail: bool,
    /// The command's stdin, if the command still has to take it.
    command: Option<Vec<u8>>,
}

/// What a batch did, for the loop to record.
pub struct Finished {
    outcomes: Vec<Outcome>,
    /// slurm.conf's `MailProg`, if it was read.
    slurm_mail_prog: Option<PathBuf>,
}

struct Outcome {
    id: i64,
    chain: String,
    kind: Kind,
    tries: u32,
    mail: Option<Result<(), String>>,
    command: Option<Result<(), String>>,
    /// Its command was not run: the owner's turn ran out of time. It stays due.
    deferred: bool,
}

impl Notifier {
    /// Whether a batch is out.
    pub fn busy(&self) -> bool {
        self.running.is_some()
    }

    /// Whether due notifications are left that the last turn had no time for.
    pub fn has_more(&self) -> bool {
        self.more && self.running.is_none()
    }

    /// The batch out, once it is done (pending forever when none is).
    pub async fn done(&mut self) -> Finished {
        match &mut self.running {
            Some(b) => {
                let f = b.await;
                self.running = None;
                f
            }
            None => std::future::pending().await,
        }
    }

    /// Records what a batch did.
    pub fn finish<S>(&mut self, post: Post<'_, S>, done: Finished) {
        if done.slurm_mail_prog.is_some() {
            self.slurm_mail_prog = done.slurm_mail_prog;
        }
        if let Err(e) = record(post.store, post.notify, done.outcomes) {
            warn!("cannot record which notifications went out: {e}; they will be sent again");
        }
    }

    /// At a clean stop: lets a batch that is out finish for up to `grace` and records it,
    /// so a stop right after a delivery does not send it again at the next start; what
    /// does not finish by then is dropped (its programs killed) and sent again.
    pub async fn stop<S>(&mut self, post: Post<'_, S>, grace: Duration) {
        if !self.busy() {
            return;
        }
        match tokio::time::timeout(grace, self.done()).await {
            Ok(done) => self.finish(post, done),
            Err(_) => {
                info!("a notification batch did not finish within {}s of the stop; what it did not deliver is sent at the next start", grace.as_secs());
                self.running = None;
            }
        }
    }

    /// Sends the due notifications out, unless a batch is out already. Called by the loop
    /// after each cycle; does no I/O but the store's.
    pub fn tick<S: Slurm + 'static>(&mut self, post: Post<'_, S>) {
        if self.running.is_some() {
            return;
        }
        // Pages with nothing to deliver (no mail asked for, no command) are only marked,
        // so a burst of them is drained page after page, for at most SILENT_BUDGET a turn.
        let started = std::time::Instant::now();
        self.more = false;
        let groups = loop {
            match prepare(post.store, post.notify) {
                Ok((g, more)) => {
                    if !g.is_empty() || !more {
                        break g;
                    }
                    if started.elapsed() >= SILENT_BUDGET {
                        self.more = true;
                        break g;
                    }
                }
                Err(e) => {
                    warn!("cannot read the notifications to send: {e}");
                    return;
                }
            }
        };
        if groups.is_empty() {
            return;
        }
        let cfg = post.notify.clone();
        let runner = post.runner;
        let known = self.slurm_mail_prog.clone();
        let needs_mail = groups.iter().any(|g| g.mail.is_some());
        self.running = Some(Box::pin(async move {
            let mut found = None;
            let program = match (&cfg.mail_program, needs_mail) {
                (Some(p), _) => p.clone(),
                (None, false) => PathBuf::from(DEFAULT_MAIL_PROGRAM),
                (None, true) => match known {
                    Some(p) => p,
                    None => {
                        let p = slurm_mail_prog(&runner).await;
                        found = p.clone();
                        p.unwrap_or_else(|| PathBuf::from(DEFAULT_MAIL_PROGRAM))
                    }
                },
            };
            let timeout = cfg.timeout.0;
            // Each owner's deliveries one after another, as that owner; the owners side
            // by side. An owner whose programs stall (each up to `notify.timeout`) starts
            // nothing more once their turn has taken `notify.timeout`: the rest of theirs
            // stay due for the next batch, so another user's mail waits at most about two
            // timeouts, not the sum of everyone's.
            let mut by_owner: BTreeMap<Option<u32>, Vec<Group>> = BTreeMap::new();
            for g in groups {
                by_owner
                    .entry(g.owner.as_ref().map(|o| o.uid))
                    .or_default()
                    .push(g);
            }
            let turns = by_owner.into_values().map(|groups| {
                let (program, cfg) = (&program, &cfg);
                async move {
                    let turn_ends = tokio::time::Instant::now() + timeout;
                    let mut outcomes = Vec::new();
                    for g in groups {
                        if tokio::time::Instant::now() >= turn_ends {
                            break;
                        }
                        outcomes.extend(deliver(program, cfg, &g, timeout, turn_ends).await);
                    }
                    outcomes
                }
            });
            let outcomes: Vec<Outcome> = futures_util::stream::iter(turns)
                .buffer_unordered(OWNERS_AT_ONCE)
                .collect::<Vec<Vec<Outcome>>>()
                .await
                .into_iter()
                .flatten()
                .collect();
            Finished {
                outcomes,
                slurm_mail_prog: found,
            }
        }));
    }
}

/// One group's mail and commands, as its owner: what came of each of its notifications.
/// Past `turn_ends` no command is started: those items come back `deferred`.
async fn deliver(
    program: &std::path::Path,
    cfg: &crate::config::NotifyConfig,
    g: &Group,
    timeout: Duration,
    turn_ends: tokio::time::Instant,
) -> Vec<Outcome> {
    let mailed = match &g.mail {
        Some(m) => {
            let argv = vec![
                program.display().to_string(),
                "-s".to_string(),
                m.subject.clone(),
                m.to.clone(),
            ];
            let r = run(&argv, m.body.as_bytes(), g, timeout).await;
            crate::metrics::notification("mail", r.is_ok());
            Some(r)
        }
        None => None,
    };
    let mut outcomes = Vec::new();
    for it in g.items.iter() {
        let mut deferred = false;
        let command = match (&cfg.command, &it.command) {
            (Some(_), Some(_)) if tokio::time::Instant::now() >= turn_ends => {
                deferred = true;
                None
            }
            (Some(argv), Some(input)) => {
                let r = run(argv, input, g, timeout).await;
                crate::metrics::notification("command", r.is_ok());
                Some(r)
            }
            _ => None,
        };
        outcomes.push(Outcome {
            id: it.id,
            chain: it.chain.clone(),
            kind: it.kind,
            tries: it.tries,
            mail: if it.mail { mailed.clone() } else { None },
            command,
            deferred,
        });
    }
    outcomes
}

/// slurm.conf's `MailProg`, if Slurm says and it is an absolute path.
async fn slurm_mail_prog<S: Slurm>(runner: &Runner<S>) -> Option<PathBuf> {
    match runner.mail_prog().await {
        Ok(Some(p)) if p.starts_with('/') => Some(PathBuf::from(p)),
        Ok(_) => None,
        Err(e) => {
            debug!("cannot read MailProg from slurm ({e}); mailing with {DEFAULT_MAIL_PROGRAM}");
            None
        }
    }
}

/// The due notifications (a page of them) as deliveries, and whether the page was full.
/// Those with nothing to deliver (no mail wanted, no command) are marked sent here.
fn prepare(store: &mut Store, cfg: &NotifyConfig) -> Result<(Vec<Group>, bool), StoreError> {
    let t = now();
    let due = store.due_notifications_fair(t, BATCH, PER_OWNER)?;
    // A page cut short by the per-owner share may still leave more due.
    let full = due.len() == BATCH || due.len() >= PER_OWNER;
    let mut groups: BTreeMap<(i64, &'static str), Group> = BTreeMap::new();
    let mut mailed: BTreeMap<(i64, &'static str), Vec<Event>> = BTreeMap::new();
    let mut nothing = Vec::new();
    // Groups go out in the order of their first notification (the oldest first).
    let mut order = Vec::new();
    for n in due {
        let Some(kind) = Kind::parse(&n.kind) else {
            crate::daemon::engine::chain_span(n.chain_id)
                .in_scope(|| warn!(kind = %n.kind, "a notification of an unknown kind is dropped"));
            nothing.push(n.id);
            continue;
        };
        let Some((sub_id, owner_uid, event, mail_wanted)) = describe(store, &n, kind, cfg.mail)?
        else {
            nothing.push(n.id);
            continue;
        };
        let mail = mail_wanted && !n.mail_done;
        let command = match &cfg.command {
            Some(_) if !n.command_done => Some(serde_json::to_vec(&event).unwrap_or_default()),
            _ => None,
        };
        if !mail && command.is_none() {
            nothing.push(n.id);
            continue;
        }
        let owner = match run_as(owner_uid) {
            Ok(o) => o,
            Err(e) => {
                // Nothing is run as root for an account that is gone.
                crate::daemon::engine::chain_span(n.chain_id)
                    .in_scope(|| warn!("notification not sent: {e}"));
                nothing.push(n.id);
                continue;
            }
        };
        let key = (sub_id, kind.as_str());
        if !groups.contains_key(&key) {
            order.push(key);
        }
        let g = groups.entry(key).or_insert_with(|| Group {
            home: owner.as_ref().and_then(|o| {
                nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(o.uid))
                    .ok()
                    .flatten()
                    .map(|u| u.dir.display().to_string())
            }),
            owner,
            mail: None,
            items: Vec::new(),
        });
        if mail && g.mail.is_none() {
            g.mail = Some(Mail {
                to: event.mail_to.clone().unwrap_or_default(),
                subject: String::new(),
                body: String::new(),
            });
        }
        g.items.push(Item {
            id: n.id,
            chain: event.chain.clone(),
            kind,
            tries: n.tries,
            mail,
            command,
        });
        if mail {
            mailed
                .entry((sub_id, kind.as_str()))
                .or_default()
                .push(event);
        }
    }
    let nothing: Vec<(i64, (bool, bool))> =
        nothing.into_iter().map(|id| (id, (false, false))).collect();
    store.notifications_sent(&nothing, t)?;
    // One mail per submission and kind, made of every event it carries.
    for (key, g) in groups.iter_mut() {
        if let (Some(m), Some(events)) = (&mut g.mail, mailed.get(key)) {
            (m.subject, m.body) = notification::mail_text(events);
        }
    }
    let out = order
        .into_iter()
        .filter_map(|k| groups.remove(&k))
        .collect();
    Ok((out, full))
}

/// One notification as an event: its submission, owner, what it tells, and whether it is
/// mailed. `None` when its chain is gone.
fn describe(
    store: &Store,
    n: &Notification,
    kind: Kind,
    mail_on: bool,
) -> Result<Option<(i64, u32, Event, bool)>, StoreError> {
    let Some(chain) = store.chain(n.chain_id)? else {
        return Ok(None);
    };
    let sub = store.submission(chain.submission_id)?;
    let decision = match n.decision_id {
        Some(id) if kind != Kind::Completed => store.decision(id)?,
        _ => None,
    };
    let job = store
        .attempts(chain.id)?
        .into_iter()
        .rev()
        .find_map(|a| a.slurm_job_id);
    let submitted = Submitted::read(&sub.argv, sub.script.as_deref()).ok();
    let opt = |name: &str| {
        submitted
            .as_ref()
            .and_then(|s| s.option(name))
            .map(str::to_string)
    };
    let mail_type = opt("mail-type");
    let to = match opt("mail-user") {
        Some(u) if notification::valid_recipient(&u) => u,
        Some(u) => {
            crate::daemon::engine::chain_span(chain.id).in_scope(|| {
                warn!(mail_user = ?u, "--mail-user is not a usable address; mailing the owner instead")
            });
            sub.user.clone()
        }
        None => sub.user.clone(),
    };
    let mailed = mail_on
        && notification::wants_mail(kind, mail_type.as_deref())
        && notification::valid_recipient(&to);
    let label = crate::store::chain_label(chain.id);
    let event = Event {
        event: kind,
        chain: label.clone(),
        user: sub.user.clone(),
        job_name: opt("job-name"),
        job,
        classification: decision.as_ref().map(|d| d.classification.to_string()),
        reason: decision
            .as_ref()
            .map_or_else(|| "completed".to_string(), |d| d.reason.clone()),
        reason_code: decision.as_ref().and_then(|d| d.reason_code.clone()),
        actor: decision.as_ref().map(|d| d.actor.clone()),
        at: n.created_at,
        resolve: kind
            .needs_person()
            .then(|| notification::resolve_command(&label)),
        mail_to: mailed.then_some(to),
    };
    Ok(Some((sub.id, sub.owner_uid, event, mailed)))
}

/// Records a batch's outcomes: sent, or failed and retried later, or given up.
fn record(store: &mut Store, cfg: &NotifyConfig, outcomes: Vec<Outcome>) -> Result<(), StoreError> {
    let t = now();
    let max = cfg.max_attempts;
    let mut sent = Vec::new();
    for o in outcomes {
        // Not finished for want of time: a mail that went out is kept; the rest is done in
        // a later batch, no try counted. (A failed mail is a failure like any other.)
        if o.deferred && !matches!(o.mail, Some(Err(_))) {
            if matches!(o.mail, Some(Ok(()))) {
                store.notification_mailed(o.id)?;
            }
            continue;
        }
        let failed: Vec<String> = [("mail", &o.mail), ("command", &o.command)]
            .into_iter()
            .filter_map(|(what, r)| match r {
                Some(Err(e)) => Some(format!("{what}: {e}")),
                _ => None,
            })
            .collect();
        if failed.is_empty() {
            let span = tracing::info_span!("chain", chain = %o.chain);
            span.in_scope(|| {
                info!(
                    kind = o.kind.as_str(),
                    mail = o.mail.is_some(),
                    command = o.command.is_some(),
                    "notification sent"
                )
            });
            sent.push((o.id, (o.mail.is_some(), o.command.is_some())));
            continue;
        }
        let error = failed.join("; ");
        let done = (
            matches!(o.mail, Some(Ok(()))),
            matches!(o.command, Some(Ok(()))),
        );
        let tries = o.tries + 1;
        if tries >= max {
            tracing::info_span!("chain", chain = %o.chain).in_scope(|| {
                warn!(
                    kind = o.kind.as_str(),
                    "notification given up after {tries} failed deliveries: {error}"
                )
            });
            store.notification_failed(o.id, done, &error, None, t)?;
        } else {
            let wait = (FIRST_BACKOFF_SECS << (tries - 1).min(16)).min(MAX_BACKOFF_SECS);
            tracing::info_span!("chain", chain = %o.chain).in_scope(|| {
                warn!(
                    kind = o.kind.as_str(),
                    "notification not delivered ({error}); trying again in {wait}s"
                )
            });
            store.notification_failed(o.id, done, &error, Some(t + wait), t)?;
        }
    }
    store.notifications_sent(&sent, t)
}

/// Runs `argv` (no shell) with `input` on stdin, as the group's owner when there is one
/// (then with a clean environment), within `timeout`, its output bounded. Ok when it
/// exits 0.
async fn run(argv: &[String], input: &[u8], g: &Group, timeout: Duration) -> Result<(), String> {
    // Started without copying the daemon, as the Slurm commands are (`slurm::spawn`). A
    // bare name is looked up on the PATH the program gets.
    let program = if argv[0].contains('/') {
        PathBuf::from(&argv[0])
    } else {
        let path = match &g.owner {
            Some(_) => Some(std::ffi::OsString::from(CLEAN_PATH)),
            None => std::env::var_os("PATH"),
        };
        path.and_then(|p| spawn::find_in(&argv[0], &p))
            .unwrap_or_else(|| PathBuf::from(&argv[0]))
    };
    let mut cmd = spawn::Command::new(&program);
    cmd.args(&argv[1..]);
    if let Some(who) = &g.owner {
        let name = who.user.to_string_lossy().into_owned();
        cmd.env_clear_with([
            ("PATH", CLEAN_PATH),
            ("USER", name.as_str()),
            ("LOGNAME", name.as_str()),
            ("HOME", g.home.as_deref().unwrap_or("/")),
        ]);
        // The group list is resolved by the daemon when it is started, never by
        // initgroups in the child.
        cmd.run_as(spawn::Credentials::of(who));
    }
    // The timeout bounds the whole wait, the start included: a start of the user's waits
    // its turn behind theirs under way (`spawn`: one at a time, each held up to
    // EXEC_DEADLINE), and the batches of everyone else wait for this one. Its own process
    // group: a timeout kills what it started too (sendmail).
    let ran = super::program::run(cmd, &argv[0], input, timeout, MAX_OUTPUT).await?;
    if ran.status.success() {
        if !ran.stderr.is_empty() {
            debug!(program = %argv[0], stderr = %String::from_utf8_lossy(&ran.stderr), "notification program wrote to stderr");
        }
        Ok(())
    } else {
        Err(format!(
            "{} failed ({}): {}",
            argv[0],
            ran.status,
            crate::plumbing::osbytes::truncate(String::from_utf8_lossy(&ran.stderr).trim(), 500)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_timeout_bounds_a_start_waiting_its_turn() {
        // The user has a start under way (held before execve, their next ones wait in
        // turn): their notification program gives up at its timeout, and the batches of
        // everyone else, which wait for this one, wait no longer.
        let uid = 65530;
        let _busy = spawn::occupy_starts_of(uid);
        let g = Group {
            owner: Some(RunAs {
                uid,
                gid: uid,
                user: std::ffi::CString::new("nobody").unwrap(),
            }),
            home: None,
            mail: None,
            items: Vec::new(),
        };
        let argv = ["/bin/true".to_string()];
        let ran = tokio::time::timeout(
            Duration::from_secs(60),
            run(&argv, b"", &g, Duration::from_millis(200)),
        )
        .await
        .expect("bounded by the program's timeout");
        let e = ran.unwrap_err();
        assert!(e.contains("did not finish within"), "{e}");
    }
}
