//! The daemon: one tokio loop over a closed set of events.
//!
//! Cadence: a poll cycle every `poll_interval` (longer while Slurm is not answering);
//! control requests that change something are handled between cycles, in arrival order,
//! on the same loop, so the store has one writer and no decision races another (reads are
//! answered by the control socket itself, off the loop: `server`). A cycle's squeue runs
//! beside the loop (`Landing::Polled`; at 100,000 live jobs its listing takes as long to
//! read as a submit takes whole), and requests are handled meanwhile; the cycle goes on
//! on the loop when it lands. Shutdown and reload come in
//! as events from whoever runs the loop (signals in the binary, channels in tests).
//!
//! The loop owns the engine and hands each part the context that names what it may touch
//! (`engine/contexts.rs`): a request or plain sbatch's adoptions a `Desk`, notification
//! delivery a `Post`, the agent an `AgentView`, its own work on the store and config an
//! `Upkeep`; what runs beside it (a retry's or submit's sbatch, a cancel's scancels) runs
//! through the engine's `Runner`, as the user it is for.

pub mod access;
pub mod activation;
pub mod agent;
pub mod cluster;
pub mod engine;
pub mod evidence;
pub mod net;
pub mod notifications;
pub mod pid_lock;
pub mod plain;
pub mod program;
pub mod rate;
pub mod reads;
mod refusals;
pub mod requests;
pub mod sbatch;
pub mod server;
pub mod start;

use crate::config::Config;
use crate::slurm::Slurm;
use crate::store::{Store, StoreError};
use engine::Engine;
use std::os::unix::fs::PermissionsExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{error, info, warn, Instrument};

/// What can happen to the daemon from outside.
#[derive(Debug)]
pub enum Event {
    /// Re-read the config file (SIGHUP).
    Reload,
    /// Stop cleanly (SIGTERM, SIGINT).
    Shutdown,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot prepare the state directory {path}: {source}")]
    StateDir {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the state directory {path} is in use by another slurm-supervisord{holder}; stop it first, or give this one its own state_dir")]
    Locked {
        path: std::path::PathBuf,
        holder: String,
    },
    #[error(transparent)]
    PlainSpool(#[from] plain::SpoolError),
    #[error("cannot open the control socket {path}: {source}")]
    Socket {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot serve metrics on {addr} (metrics.listen): {source}; choose a free address or remove [metrics] listen")]
    Metrics {
        addr: std::net::SocketAddr,
        #[source]
        source: activation::ListenError,
    },
    #[error("cannot listen for network clients on {addr} (server.listen): {source}; choose a free address or remove [server] listen")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: activation::ListenError,
    },
    #[error("systemd passed this daemon a socket named {name:?} (slurm-supervisord.socket, FileDescriptorName=), but the config has no {key}: set {key} to the socket's address, or `systemctl disable --now slurm-supervisord.socket`")]
    Unused { name: String, key: &'static str },
    #[error("server.tls_cert, server.tls_key: {0}")]
    Tls(#[from] crate::plumbing::tls::TlsError),
    #[error("server.listen needs MUNGE to authenticate network clients: {0}")]
    Munge(#[from] crate::plumbing::munge::MungeError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cluster mode ([store]): {0}")]
    Cluster(String),
}

/// Everything the daemon creates is private (umask 077). A per-user daemon's state
/// directory is 0700. A system-wide (root) daemon's is 0711, and so is its `scripts/`:
/// users may pass through to the script snapshot that belongs to them (0711 root-owned
/// folder, 0600 file owned by them) so their own sbatch can read it, and can list or read
/// nothing else.
pub(crate) fn prepare_state_dir(config: &Config) -> Result<(), DaemonError> {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let err = |source| DaemonError::StateDir {
        path: config.state_dir.clone(),
        source,
    };
    let mode = if nix::unistd::geteuid().is_root() {
        0o711
    } else {
        0o700
    };
    let scripts = config.state_dir.join("scripts");
    std::fs::create_dir_all(&scripts).map_err(err)?;
    std::fs::set_permissions(&config.state_dir, std::fs::Permissions::from_mode(mode))
        .map_err(err)?;
    std::fs::set_permissions(&scripts, std::fs::Permissions::from_mode(mode)).map_err(err)?;
    Ok(())
}

/// The state directory belongs to one daemon at a time: an exclusive `flock` on
/// `supervisor.lock`, held for the daemon's life (the kernel lets it go when the process
/// ends, however it ends). The file holds the holder's pid, for the message a second
/// daemon prints.
fn lock_state_dir(config: &Config) -> Result<std::fs::File, DaemonError> {
    let path = config.state_dir.join("supervisor.lock");
    pid_lock::pid_lock(&path).map_err(|e| match e {
        pid_lock::PidLock::Held { holder } => DaemonError::Locked {
            path: config.state_dir.clone(),
            holder,
        },
        pid_lock::PidLock::Io(source) => DaemonError::StateDir { path, source },
    })
}

/// A flight (a Slurm command run beside the loop) back with its answer.
enum Landing {
    /// A user's request (a submit's sbatch, a cancel's scancels), whose client waits for
    /// the answer.
    Request(
        requests::Landed,
        tokio::sync::oneshot::Sender<crate::protocol::Response>,
    ),
    /// A retry (or a launch repeated after a crash).
    Retry(Box<engine::RetryFlight>, sbatch::LaunchOutcome),
    /// A cycle's poll query: its squeue, and the listing read and folded.
    Polled(Box<engine::PollAnswer>),
}

type InFlight = std::pin::Pin<Box<dyn std::future::Future<Output = Landing>>>;

/// Starts the retries the engine has left to take off, beside the loop.
fn dispatch<S: Slurm + Clone + 'static>(
    engine: &mut Engine<S>,
    in_flight: &mut futures_util::stream::FuturesUnordered<InFlight>,
) {
    for f in engine.take_flights() {
        let runner = engine.runner();
        in_flight.push(Box::pin(async move {
            let outcome = runner.sbatch(&f.launch, &f.sub).await;
            Landing::Retry(Box::new(f), outcome)
        }));
    }
}

/// How long a clean stop waits for a notification batch that is out to finish (its
/// outcome is then recorded instead of delivered again at the next start).
const NOTIFY_STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs the daemon until a `Shutdown` event (or until `events` closes): the loop where it
/// is awaited, and what serves requests (the socket, the network, metrics) and runs the
/// agent on `beside`, a runtime of worker threads.
pub async fn run<S: Slurm + Clone + 'static>(
    config: Config,
    slurm: S,
    mut events: mpsc::Receiver<Event>,
    beside: tokio::runtime::Handle,
) -> Result<(), DaemonError> {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    prepare_state_dir(&config)?;
    let _lock = lock_state_dir(&config)?;
    sbatch::clear_snapshots(&config.state_dir).map_err(|source| DaemonError::StateDir {
        path: config.state_dir.join("scripts"),
        source,
    })?;
    let (store, mut cluster) = match &config.cluster {
        None => {
            let mut store = Store::open(&config.db_path())?;
            store.read_dependencies_with(sbatch::dependency_rows)?;
            (store, None)
        }
        Some(cc) => {
            let name = slurm
                .cluster_name()
                .await
                .map_err(|e| DaemonError::Cluster(format!("cannot learn this node's Slurm ClusterName: {e}")))?
                .ok_or_else(|| DaemonError::Cluster("slurm.conf names no ClusterName: cluster mode needs it, to keep one cluster's store apart from another's".into()))?;
            let (store, c) =
                cluster::Cluster::start(cc, &name, &config.db_path(), sbatch::dependency_rows)
                    .map_err(|e| DaemonError::Cluster(e.to_string()))?;
            (store, Some(c))
        }
    };
    // Slurm's own account (SlurmUser, and the account named `slurm`): the network
    // listener makes no proof of itself that it could decode (`net::proof_uid`).
    let slurm_uids = match config.server.listen {
        None => Vec::new(),
        Some(_) => {
            let mut uids: Vec<u32> = nix::unistd::User::from_name("slurm")
                .ok()
                .flatten()
                .map(|u| u.uid.as_raw())
                .into_iter()
                .collect();
            match slurm.slurm_user_uid().await {
                Ok(Some(uid)) => uids.push(uid),
                Ok(None) => {}
                Err(e) => warn!("cannot learn SlurmUser from scontrol ({e}); the network listener makes no proof for the account named slurm or any system account"),
            }
            uids
        }
    };
    // Every Slurm command goes through the guard: in cluster mode it runs only while this
    // daemon acts.
    let slurm = cluster::Guarded::new(
        slurm,
        cluster.as_ref().map(cluster::Cluster::guard),
        config.slurm.command_timeout,
    );
    // The metrics endpoint, if asked for, beside the control socket: scrapes read the
    // store over their own read-only connection and never wait for this loop. Bound
    // before the socket, so an address that cannot be had leaves nothing behind.
    // Each TCP listener is systemd's socket when it passed one (socket activation: it
    // holds the port from boot, across restarts), else bound here (`activation`).
    let metrics_listener = match config.metrics.listen {
        None => None,
        Some(addr) => Some((
            addr,
            match made_beside(&beside, || activation::listen(activation::METRICS, addr)) {
                Ok((l, _)) => Some(l),
                Err(e) if e.is_taken() => {
                    error!(%addr, "cannot serve metrics on {addr} (metrics.listen): {e}; another process holds the port (`ss -ltnp 'sport = :{}'`): serving without metrics, and taking the port once it is free (hold it with a socket unit, docs/security.md)", addr.port());
                    None
                }
                Err(source) => return Err(DaemonError::Metrics { addr, source }),
            },
        )),
    };
    // The network listener, if asked for: bound (and libmunge loaded) before the socket
    // too, for the same reason.
    let net_listener = match config.server.listen {
        None => None,
        Some(addr) => {
            let munge = crate::plumbing::munge::Munge::open(config.server.munge_socket.as_deref())?;
            let tls = match &config.server.tls {
                None => None,
                Some(f) => Some(crate::plumbing::tls::server_config(&f.cert, &f.key)?),
            };
            let listener = match made_beside(&beside, || {
                activation::listen(activation::SERVER, addr)
            }) {
                Ok((listener, inherited)) => {
                    if inherited {
                        info!(%addr, "network listener from systemd (slurm-supervisord.socket)");
                    }
                    Some(listener)
                }
                // Another process holds the port: it keeps the network listener away
                // until it lets go, never the daemon.
                Err(e) if e.is_taken() => {
                    error!(%addr, "cannot listen for network clients on {addr} (server.listen): {e}; another process holds the port (`ss -ltnp 'sport = :{}'`): serving the Unix socket and supervising meanwhile, and taking the port once it is free; enable slurm-supervisord.socket so that no one can hold it (docs/security.md, \"Holding the port\")", addr.port());
                    None
                }
                Err(source) => return Err(DaemonError::Listen { addr, source }),
            };
            Some((addr, munge, tls, listener))
        }
    };
    // A socket systemd passed that no listener took: the unit and the config disagree.
    if let Some(name) = activation::left_over().into_iter().next() {
        let key = match name.as_str() {
            activation::METRICS => "[metrics] listen",
            _ => "[server] listen",
        };
        return Err(DaemonError::Unused { name, key });
    }
    let listener = made_beside(&beside, || server::bind(&config.socket)).map_err(|source| {
        DaemonError::Socket {
            path: config.socket.clone(),
            source,
        }
    })?;
    let socket_path = config.socket.clone();
    let (ctl_tx, mut ctl_rx) = mpsc::channel(64);
    let shared = server::Shared::new(
        ctl_tx,
        config.limits.clone(),
        config.db_path(),
        cluster.as_ref().map(cluster::Cluster::activity),
        &config,
    );
    let server = beside.spawn(server::serve(listener, shared.clone()));
    let net_server = net_listener.map(|(addr, munge, tls, listener)| {
        let id = config
            .server
            .id
            .clone()
            .unwrap_or_else(|| net::default_id(addr.port()));
        info!(%addr, daemon = %id, tls = tls.is_some(), "serving network clients (MUNGE)");
        let served = net::NetServer::new(
            shared.clone(),
            munge,
            id,
            config.server.root_nodes.clone(),
            slurm_uids.clone(),
            match &cluster {
                None => std::sync::Arc::new(net::AlwaysActive) as std::sync::Arc<dyn net::Activity>,
                Some(c) => std::sync::Arc::new(net::ClusterActivity {
                    cluster: c.activity(),
                    port: addr.port(),
                }),
            },
            tls,
        );
        beside.spawn(async move {
            let listener = match listener {
                Some(l) => l,
                None => activation::listen_when_free(activation::SERVER, addr).await,
            };
            net::serve(listener, served).await
        })
    });
    let (metrics_server, scraper) = match metrics_listener {
        None => (None, None),
        Some((addr, listener)) => {
            let scraper = std::sync::Arc::new(crate::metrics::Scraper::new(&config));
            info!(%addr, "serving metrics at /metrics");
            (
                Some(beside.spawn({
                    let scraper = scraper.clone();
                    async move {
                        let listener = match listener {
                            Some(l) => l,
                            None => activation::listen_when_free(activation::METRICS, addr).await,
                        };
                        crate::metrics::http::serve(listener, scraper).await
                    }
                })),
                Some(scraper),
            )
        }
    };
    // Plain sbatch (`plain`): the spool is this daemon's while it runs.
    let mut plain = plain::Plain::start(&config, &store)?;
    let mut engine = Engine::new(config, store, slurm);

    // READY only after the store is open and the first reconciliation ran (in cluster
    // mode: if this daemon acts; a standby is ready to answer reads).
    if acts(&mut cluster, &mut engine) {
        if let Err(e) = timed_cycle(&mut engine, &mut plain).await {
            error!("first cycle failed: {e}");
            note_fenced(&mut cluster, &e);
            if e.is_corruption() {
                return Err(e.into());
            }
        }
    }
    if let Some(c) = &cluster {
        c.turned();
    }
    if let Err(e) = crate::plumbing::sd_notify::notify("READY=1") {
        warn!("cannot notify systemd: {e}");
    }
    info!(socket = %socket_path.display(), poll_interval = ?engine.upkeep().config.poll_interval, "slurm-supervisord ready");

    let mut agent = agent::Runner::beside(beside.clone());
    let mut notifier = notifications::Notifier::default();
    if acting(&cluster) {
        agent.maybe_start(engine.agent_view());
        notifier.tick(engine.post());
    }
    // From here on every sbatch runs beside the loop: one user's slow sbatch (a busy
    // controller, or anything in their own environment) holds up no one else.
    engine.defer_launches();
    let mut in_flight: FuturesUnordered<InFlight> = FuturesUnordered::new();
    let mut next = Instant::now() + engine.next_interval();
    // The cycle whose poll query runs beside the loop, if one does: meanwhile requests
    // are answered, and no other cycle starts.
    let mut cycling: Option<Cycle> = None;
    let result = loop {
        // What is waiting is served before a new cycle starts (a submit's answer, a
        // request), so none of it waits behind a whole cycle; requests give way once the
        // cycle is overdue by a poll interval, so a flood of them cannot stop polling.
        let overdue =
            cycling.is_none() && Instant::now() > next + engine.upkeep().config.poll_interval;
        tokio::select! {
            biased;
            ev = events.recv() => match ev {
                Some(Event::Reload) => {
                    reload(&mut engine, &mut plain);
                    shared.set_config(engine.upkeep().config);
                    if let Some(s) = &scraper {
                        s.set_config(engine.upkeep().config);
                    }
                }
                Some(Event::Shutdown) | None => break Ok(()),
            },
            Some(landing) = in_flight.next(), if !in_flight.is_empty() => match landing {
                Landing::Request(landed, reply) => {
                    let _ = reply.send(requests::finish(&mut engine.desk(), landed));
                }
                Landing::Retry(f, outcome) => {
                    if let Err(e) = engine.land(&f, outcome) {
                        // The launch stays an intent; reconciliation settles it by its tag.
                        let _span = engine::launch_span(&f.launch).entered();
                        error!("cannot record what a retry's sbatch answered: {e}");
                        if e.is_corruption() {
                            break Err(e.into());
                        }
                    }
                }
                Landing::Polled(answer) => {
                    let Some(c) = cycling.take() else {
                        continue;
                    };
                    let result = engine.cycle_from_poll(*answer).instrument(c.span.clone()).await;
                    let result = c.end(&mut engine, &mut plain, result).await;
                    if let Err(e) = after_cycle(&mut engine, &mut cluster, &mut in_flight, &mut agent, &mut notifier, result).await {
                        break Err(e);
                    }
                    next = Instant::now() + engine.next_interval();
                }
            },
            done = notifier.done(), if notifier.busy() => {
                notifier.finish(engine.post(), done);
                if acting(&cluster) {
                    notifier.tick(engine.post());
                }
            }
            Some(ctl) = ctl_rx.recv(), if !overdue => {
                if let Some(c) = cluster.as_ref().filter(|_| !acting(&cluster)) {
                    let _ = ctl.reply.send(crate::protocol::Response::error(crate::protocol::ErrorKind::Unavailable, c.not_active()));
                    continue;
                }
                // An append whose fate is not known yet: settled before any request decides.
                let store = engine.upkeep().store;
                if store.journal_unsure() {
                    if let Err(e) = store.catch_up() {
                        let _ = ctl.reply.send(crate::protocol::Response::error(crate::protocol::ErrorKind::Unavailable, format!("the shared database does not answer ({e}); try again in a minute")));
                        continue;
                    }
                }
                let uid = ctl.caller.uid;
                let span = requests::span(&ctl.request, uid);
                // What follows the answer is the request's to say (`requests::Write`):
                // due retries launched, a plain-sbatch choice published.
                let begun = requests::on_loop(&mut engine.desk(), ctl.request, ctl.caller, span.clone()).instrument(span.clone()).await;
                let after = begun.after;
                let (response, reload_config) = match begun.plan {
                    requests::Plan::Done(response) => (response, false),
                    requests::Plan::Reload(response) => (response, true),
                    // A submit's sbatch, a cancel's scancels: as the user, who could hold
                    // them (a slow controller, a SIGSTOP to their own process), so beside
                    // the loop, holding up no one else.
                    requests::Plan::Fly(command) => {
                        let (runner, reply) = (engine.runner(), ctl.reply);
                        in_flight.push(Box::pin(async move {
                            Landing::Request(requests::fly(&runner, command).await, reply)
                        }.instrument(span)));
                        continue;
                    }
                };
                // Published before the answer: an sbatch right after `opt-in` is noted.
                // Only the asker's own file, and only if it changed: a repeated `opt-in`
                // rewrites no one's (issue 32's attacking review).
                if let (true, Some(p)) = (after.publish_opt_in, &mut plain) {
                    p.publish_choice(engine.upkeep().store, uid);
                }

                // A user met: their notes folder is made if the site opts them in.
                if let Some(p) = &mut plain {
                    p.seen(engine.upkeep().store, uid);
                }
                // An accepted rule's file was written (and only then: `Plan::Reload`):
                // taken as a SIGHUP's reload is, before the answer, so a client told it
                // is in force reads it so.
                if reload_config {
                    reload(&mut engine, &mut plain);
                    shared.set_config(engine.upkeep().config);
                    if let Some(s) = &scraper {
                        s.set_config(engine.upkeep().config);
                    }
                }
                let _ = ctl.reply.send(response);
                if after.launch {
                    if let Err(e) = engine.launch_ready(crate::plumbing::clock::now()).await {
                        error!("launching due retries failed: {e}");
                    }
                    dispatch(&mut engine, &mut in_flight);
                }
            }
            _ = tokio::time::sleep_until(next), if cycling.is_none() => {
                let acts_now = acts(&mut cluster, &mut engine);
                // The choices other nodes' users made, applied from the journal, published
                // in this node's spool for its own cli_filter (a standby's too).
                if let Some(p) = &mut plain {
                    let store = engine.upkeep().store;
                    match store.take_replicated_opt_ins() {
                        Some(uids) => {
                            for uid in uids {
                                p.publish_choice(store, uid);
                            }
                        }
                        None => p.publish(store),
                    }
                }
                if acts_now {
                    // The cycle up to its poll; the poll's squeue, and the reading of its
                    // listing, beside the loop; the rest when it lands (`Landing::Polled`).
                    let c = Cycle::start();
                    match engine.cycle_to_poll().instrument(c.span.clone()).await {
                        Ok(Some(ask)) => {
                            let runner = engine.runner();
                            in_flight.push(Box::pin(async move {
                                Landing::Polled(Box::new(runner.poll(ask).await))
                            }.instrument(c.span.clone())));
                            cycling = Some(c);
                            continue;
                        }
                        Ok(None) => {
                            let result = c.end(&mut engine, &mut plain, Ok(())).await;
                            if let Err(e) = after_cycle(&mut engine, &mut cluster, &mut in_flight, &mut agent, &mut notifier, result).await {
                                break Err(e);
                            }
                        }
                        Err(e) => {
                            let result = c.end(&mut engine, &mut plain, Err(e)).await;
                            if let Err(e) = after_cycle(&mut engine, &mut cluster, &mut in_flight, &mut agent, &mut notifier, result).await {
                                break Err(e);
                            }
                        }
                    }
                } else if let Some(c) = &cluster {
                    c.turned();
                }
                next = Instant::now() + engine.next_interval();
            }
            // Last: a backlog of notifications is marked a turn at a time, after
            // everything above that is ready.
            // `yield_now`, not a future that is always ready: the loop's own runtime drives
            // its timers, pipes and signals only when the loop gives way (review 20).
            _ = tokio::task::yield_now(), if notifier.has_more() && acting(&cluster) => {
                notifier.tick(engine.post());
            }
        }
    };
    info!("stopping");
    let _ = crate::plumbing::sd_notify::notify("STOPPING=1");
    let grace = NOTIFY_STOP_GRACE.min(engine.upkeep().config.notify.timeout.0);
    notifier.stop(engine.post(), grace).await;
    server.abort();
    if let Some(n) = net_server {
        n.abort();
    }
    if let Some(m) = metrics_server {
        m.abort();
    }
    let _ = std::fs::remove_file(&socket_path);
    // Everything committed goes into the database file itself, so the store is one file
    // again when the daemon is stopped (read connections may still be open, which would
    // keep SQLite from doing it when the last connection closes).
    if let Err(e) = engine.upkeep().store.checkpoint() {
        warn!("cannot fold the write-ahead log into the store at shutdown: {e}");
    }
    result
}

/// Runs `make`, whose tokio objects (the listeners) then belong to `beside`'s runtime, not
/// the loop's: the loop's runtime drives them only when the loop gives way, and a listener
/// there would accept nothing while the loop works (review 20).
fn made_beside<T>(beside: &tokio::runtime::Handle, make: impl FnOnce() -> T) -> T {
    let _in = beside.enter();
    make()
}

/// Whether this daemon acts in the coming cycle: always on a single node; in cluster mode
/// while it holds the lease (its replica brought up to date first, `Cluster::before_cycle`).
fn acts<S: Slurm>(cluster: &mut Option<cluster::Cluster>, engine: &mut Engine<S>) -> bool {
    match cluster {
        None => true,
        Some(c) => match c.before_cycle(engine.upkeep().store) {
            Ok(acts) => acts,
            Err(e) => {
                warn!("cannot bring this node's replica up to date: {e}; not acting this cycle");
                false
            }
        },
    }
}

/// Whether this daemon acts now (always on a single node).
fn acting(cluster: &Option<cluster::Cluster>) -> bool {
    cluster
        .as_ref()
        .is_none_or(|c| c.acting().is_some() && c.role().is_active())
}

/// A write refused by the fence: this daemon is not the active one any more.
fn note_fenced(cluster: &mut Option<cluster::Cluster>, e: &StoreError) {
    if let (Some(c), StoreError::Fenced { .. }) = (cluster.as_mut(), e) {
        warn!("{e}");
        c.deposed();
    }
}

/// One poll cycle, timed for the metrics (failed cycles too: a slow failure is news), and
/// counted as failed when it ends with Slurm not answering or the store failing. Its
/// lines are in a `cycle` span numbered from 1 at start (journal field `CYCLE`).
async fn timed_cycle<S: Slurm>(
    engine: &mut Engine<S>,
    plain: &mut Option<plain::Plain>,
) -> Result<(), StoreError> {
    let c = Cycle::start();
    let result = engine.cycle().instrument(c.span.clone()).await;
    c.end(engine, plain, result).await
}

/// A poll cycle under way: when it started, and its span.
struct Cycle {
    start: std::time::Instant,
    span: tracing::Span,
}

impl Cycle {
    fn start() -> Cycle {
        static CYCLES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = CYCLES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        Cycle {
            start: std::time::Instant::now(),
            span: tracing::info_span!("cycle", cycle = n),
        }
    }

    /// Ends the cycle whose phases gave `result`: plain sbatch's discovery, the metrics,
    /// the memory it freed given back.
    async fn end<S: Slurm>(
        self,
        engine: &mut Engine<S>,
        plain: &mut Option<plain::Plain>,
        result: Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        // Plain-sbatch jobs after reconciliation: a job of this store's own whose sbatch
        // answer was lost is recorded on its chain (found by its tag) before any note or
        // mark of it is looked at, and is never adopted as a second chain (the tag check
        // in `adopt_job` and the store's one-live-attempt-per-job constraint hold it too).
        // The next cycle's poll watches what was adopted.
        let result = match (result, plain) {
            (Ok(()), Some(p)) => {
                plain::discover(&mut engine.desk(), p)
                    .instrument(self.span)
                    .await
            }
            (result, _) => result,
        };
        crate::metrics::observe_cycle(
            self.start.elapsed(),
            result.is_ok() && engine.slurm_answering(),
        );
        give_back_freed_memory();
        result
    }
}

/// What follows a cycle in the loop: its failure logged (a corrupt store stops the
/// daemon), cluster mode's sweep when due, the retries it made due taken off, the agent
/// and the notifications started.
async fn after_cycle<S: Slurm + Clone + 'static>(
    engine: &mut Engine<S>,
    cluster: &mut Option<cluster::Cluster>,
    in_flight: &mut futures_util::stream::FuturesUnordered<InFlight>,
    agent: &mut agent::Runner,
    notifier: &mut notifications::Notifier,
    result: Result<(), StoreError>,
) -> Result<(), DaemonError> {
    if let Err(e) = result {
        error!("poll cycle failed: {e}; trying again next cycle");
        note_fenced(cluster, &e);
        if e.is_corruption() {
            return Err(e.into());
        }
    }
    // Launches the cycle recorded (under the fence) take off as before: in cluster mode
    // their sbatch holds the job until a fence check releases it.
    dispatch(engine, in_flight);
    // The cycle's squeue ran beside the loop, and the lease may have been lost since the
    // cycle began (or the fence just said so): a standby sweeps, starts the agent and
    // mails nothing (docs/cluster.md).
    if acting(cluster) {
        let sweep = cluster
            .as_mut()
            .and_then(|c| c.sweep_due().then(|| c.lease()));
        if let Some(lease) = sweep {
            let recent = (engine.upkeep().config.slurm.sbatch_timeout + 2 * lease).as_secs() as i64;
            if let Err(e) = engine
                .sweep_held(crate::plumbing::clock::now(), recent)
                .await
            {
                warn!("the sweep of held jobs failed: {e}");
                note_fenced(cluster, &e);
            }
        }
        agent.maybe_start(engine.agent_view());
        notifier.tick(engine.post());
    }
    if let Some(c) = cluster {
        c.turned();
    }
    Ok(())
}

/// Hands the memory a cycle freed back to the system. A cycle's squeue listing, its rows
/// and the map they become are freed at its end, but glibc keeps freed memory in its
/// arenas (one per thread that allocated), so the resident set stayed at the biggest
/// cycle's and wandered with which thread read the listing. `malloc_trim` returns the
/// free pages of every arena (docs/benchmarks.md, "The daemon at 100,000 live jobs").
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas; it
    // touches no memory in use and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn reload<S: Slurm>(engine: &mut Engine<S>, plain: &mut Option<plain::Plain>) {
    let old = engine.upkeep().config;
    let Some(path) = old.path.clone() else {
        warn!("reload asked but the daemon runs without a config file; nothing to reload");
        return;
    };
    match Config::load(&path) {
        Err(e) => error!("new config refused, keeping the old one: {e}"),
        Ok(new) => {
            if new.state_dir != old.state_dir || new.socket != old.socket {
                warn!("state_dir and socket changes take effect only after a restart; keeping the old ones");
            }
            if new.server != old.server {
                warn!("[server] changes take effect only after a restart; keeping the old ones");
            }
            if new.metrics != old.metrics {
                warn!(
                    "metrics.listen changes take effect only after a restart; keeping the old one"
                );
            }
            // The control socket holds the limits it started with; the loop keeps the same
            // ones, so one set is in force until a restart.
            let kept = Config {
                state_dir: old.state_dir.clone(),
                socket: old.socket.clone(),
                limits: old.limits.clone(),
                metrics: old.metrics.clone(),
                server: old.server.clone(),
                ..new
            };
            engine.set_config(kept);
            if let Some(p) = plain {
                let upkeep = engine.upkeep();
                p.reload(upkeep.config, upkeep.store);
            }
            info!(path = %path.display(), "config reloaded");
        }
    }
}
