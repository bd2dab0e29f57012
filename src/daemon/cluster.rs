//! Cluster mode in the daemon (docs/cluster.md): the lease kept beside the loop, the
//! store as a replica of the shared journal, and the rule that only the active daemon
//! touches Slurm.
//!
//! - A thread of its own keeps the lease (`lease_thread`): it acquires it while nobody
//!   holds it, renews it a third of its usable time after each grant, and feeds every
//!   answer to the pure [`Election`], which says on this daemon's monotonic clock whether
//!   it may act. The database's calls are blocking and bounded by `store.timeout`; on
//!   their own thread, a slow database never holds the loop, and the loop never holds a
//!   renewal.
//! - The loop asks [`Cluster::before_cycle`] before each cycle. Active under an epoch it
//!   has not acted under yet (a takeover, or the first grant), it first applies every
//!   journal entry it has not (so its replica holds everything the previous active
//!   daemon wrote), and only then lets the journal append under that epoch: the cycle
//!   that follows reconciles launches by their tags, as after a crash. Otherwise it is a
//!   standby: it applies what was appended since, and does nothing else (no Slurm query,
//!   no mail, no agent).
//! - Every Slurm command of the daemon goes through [`Guarded`], which runs it only
//!   while the election says this daemon acts, and a command that changes Slurm only if
//!   its timeout ends before the lease's local deadline. Every sbatch submits its job
//!   held; [`Guarded`] releases it only
//!   after a transaction fenced by the epoch the sbatch started under, and remembers
//!   which jobs it released ([`Releases`]) for the sweep of held jobs
//!   (`engine/sweep.rs`).
//! - The writes are fenced by the database itself: the journal appends under the epoch
//!   in a transaction that locks the lease row, so a deposed daemon's write is refused
//!   and rolled back in its replica.
//! - A thread of its own (`snapshot_thread`), while this daemon acts, asks every third of
//!   a lease whether a snapshot is due (`snapshot_if_due`, after
//!   `dbconfig::SnapshotPolicy`), writes it and prunes the journal.
//! - A standby answers a write with where the active daemon is (or that none acts now);
//!   `supervisorctl cluster` is answered from the lease and every daemon's row as the
//!   lease thread, which writes this daemon's row, last read them ([`Cluster::seen`]).

use crate::config::ClusterConfig;
use crate::domain::election::{Answer, Election, Epoch, Role};
use crate::protocol::views::{ClusterAnswer, LeaseAnswer, NodeAnswer};
use crate::slurm::parse::Parsed;
use crate::slurm::types::{HeldRow, PendingRow, Queue, SacctRow, SqueueRow, TagRow};
use crate::slurm::{PolledWithPending, RunAs, SbatchRequest, Slurm, SlurmError};
use crate::store::cluster::{
    read_password_file, Acquisition, Beat, ClusterDb, EntrySizes, EpochCell, LeaseView, NodeRole,
    NodeRow, Password, SharedJournal,
};
use crate::store::{DependencyReader, Store, StoreError};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Why cluster mode cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What the lease thread last learned, for the loop and for `status`.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// The lease as the database last showed it, and when it was read.
    pub view: Option<LeaseView>,
    pub view_at: Option<Instant>,
    /// Every daemon's row (`store::cluster::nodes`) as last read, and when.
    pub nodes: Vec<NodeRow>,
    pub nodes_at: Option<Instant>,
    /// Why the last call to the database failed, if it did.
    pub error: Option<String>,
}

/// This daemon's own facts for its row in the shared database and for `cluster`: its
/// node, when it started, and when its loop last turned.
#[derive(Debug, Clone)]
struct Me {
    node: String,
    holder: String,
    started: Instant,
    last_cycle: Arc<Mutex<Option<Instant>>>,
    lease: Duration,
}

impl Me {
    fn beat(&self, role: NodeRole, epoch: Option<Epoch>) -> Beat<'_> {
        let now = Instant::now();
        Beat {
            node: &self.node,
            holder: &self.holder,
            role,
            epoch,
            started_ago: now.saturating_duration_since(self.started),
            last_cycle_ago: lock(&self.last_cycle).map(|t| now.saturating_duration_since(t)),
        }
    }
}

/// The role a daemon's row states, from what its election says now.
fn node_role(role: Role) -> (NodeRole, Option<Epoch>) {
    match role {
        Role::Active { epoch, .. } => (NodeRole::Active, Some(epoch)),
        Role::Standby => (NodeRole::Standby, None),
        Role::Unknown => (NodeRole::Unknown, None),
    }
}

/// This daemon's part in cluster mode.
pub struct Cluster {
    /// This daemon's name on the lease: `NODE:PID:RANDOM`, unique per start.
    pub holder: String,
    election: Arc<Mutex<Election>>,
    epoch: EpochCell,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The epoch the loop acts under (its replica caught up under it).
    acting: Option<Epoch>,
    /// Times this daemon took the lease (for the metrics).
    pub takeovers: u64,
    fence_check: FenceCheck,
    /// When the last sweep of held jobs ran (`None`: due at the next cycle).
    last_sweep: Option<Instant>,
    /// Whether this node can act: its replica caught up at the last try (and the shared
    /// database was checked to be this cluster's). The lease thread acquires and renews
    /// only while it can: a node that cannot apply the journal (a full disk, an entry of
    /// a later format) gives the lease up to one that can.
    healthy: Arc<AtomicBool>,
    /// The shared database was not reached at start: its `cluster` row is checked when it
    /// answers, before this node may act.
    unchecked: Option<(String, crate::config::ClusterConfig)>,
    lease: Duration,
    me: Me,
    releases: Releases,
    /// The thread that snapshots the store and prunes the journal while this daemon acts.
    snapshots: Option<std::thread::JoinHandle<()>>,
}

fn connector(
    config: &ClusterConfig,
    password: Password,
) -> impl FnMut() -> Result<ClusterDb, StoreError> + Send + 'static {
    let (url, timeout) = (config.url.clone(), config.timeout);
    move || ClusterDb::connect(&url, &password, timeout)
}

impl Cluster {
    /// Opens this node's replica of the shared store of Slurm cluster `cluster_name`
    /// (applying every entry it lacks) and starts keeping the lease. The database must be
    /// this cluster's and hold no later journal format; the password file must be the
    /// daemon's own. `dependencies` reads a submission's `--dependency` from its command
    /// line (`daemon::sbatch::dependency_rows`), for the replica to upgrade what an earlier
    /// version wrote ([`Store::read_dependencies_with`]).
    pub fn start(
        config: &ClusterConfig,
        cluster_name: &str,
        replica: &Path,
        dependencies: DependencyReader,
    ) -> Result<(Store, Cluster), ClusterError> {
        let password = read_password_file(&config.password_file)
            .map_err(|e| ClusterError::Config(e.to_string()))?;
        let mut first = connector(config, password.clone());
        let prepared = first().and_then(|mut db| {
            let id = db.prepare(cluster_name)?;
            Ok(id.map(|id| (id, db.journal_head())))
        });
        let epoch = EpochCell::default();
        let journal =
            SharedJournal::new(Box::new(connector(config, password.clone())), epoch.clone());
        let mut unchecked = None;
        let store = match prepared {
            Ok(Ok((identity, head))) => {
                let mut store =
                    Store::open_replica_as_it_is(replica, &identity.instance, Box::new(journal))?;
                // Before catching up: an entry of revision 1 has its rows read by it.
                store.read_dependencies_with(dependencies)?;
                let head = head?;
                // Compared before catching up: the journal only grows, so a replica that
                // applied more than the journal held when it was read is ahead of it. (After
                // catching up, entries the active daemon appended meanwhile would make a
                // healthy replica look ahead: found by `benches/burst.rs`, a standby started
                // during a burst, and by the fault rounds, a node restarted at a takeover.)
                if store.journal_seq() > head {
                    return Err(ClusterError::Config(format!(
                        "this node's replica has applied journal entry {}, and the shared journal ends at {head}: the database is older than the replica (restored from a backup?); move {} away to make a new replica from the database",
                        store.journal_seq(),
                        replica.display()
                    )));
                }
                store.catch_up()?;
                store
            }
            Ok(Err(refusal)) => return Err(ClusterError::Config(refusal.to_string())),
            // The database does not answer: a replica this node made before lets it start
            // as a standby (it answers reads, and acts once the database answers and it
            // holds the lease); without one there is nothing to serve.
            Err(e) => match Store::instance_of(replica)? {
                Some(instance) => {
                    warn!("cannot reach the shared database ({e}): standing by on this node's replica until it answers");
                    unchecked = Some((cluster_name.to_string(), config.clone()));
                    let mut store =
                        Store::open_replica_as_it_is(replica, &instance, Box::new(journal))?;
                    store.read_dependencies_with(dependencies)?;
                    store
                }
                None => {
                    return Err(ClusterError::Config(format!(
                        "cannot reach the shared database at {}:{} ({e}), and this node has no replica of it yet: check [store] url, the server and the network (the daemon tries again when restarted)",
                        config.url.host, config.url.port
                    )))
                }
            },
        };
        let holder = format!(
            "{}:{}:{:04x}",
            config.node,
            std::process::id(),
            rand::random::<u16>()
        );
        let me = Me {
            node: config.node.clone(),
            holder: holder.clone(),
            started: Instant::now(),
            last_cycle: Arc::default(),
            lease: config.timing.lease(),
        };
        let election = Arc::new(Mutex::new(Election::new(config.timing)));
        let healthy = Arc::new(AtomicBool::new(unchecked.is_none()));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (election, seen, stop, me, healthy) = (
                election.clone(),
                seen.clone(),
                stop.clone(),
                me.clone(),
                healthy.clone(),
            );
            let connect = connector(config, password.clone());
            let lease = config.timing.lease();
            std::thread::Builder::new()
                .name("lease".into())
                .spawn(move || lease_thread(connect, me, lease, election, seen, stop, healthy))
                .map_err(|e| {
                    ClusterError::Config(format!("cannot start the lease's thread: {e}"))
                })?
        };
        let snapshots = {
            let (epoch, stop, policy) = (epoch.clone(), stop.clone(), config.snapshot);
            // The active daemon looks whether a snapshot is due every third of a lease:
            // two small queries.
            let check = config.timing.lease() / 3;
            let connect = connector(config, password.clone());
            let replica = replica.to_path_buf();
            std::thread::Builder::new()
                .name("snapshot".into())
                .spawn(move || snapshot_thread(connect, replica, epoch, policy, check, stop))
                .map_err(|e| {
                    ClusterError::Config(format!("cannot start the snapshots' thread: {e}"))
                })?
        };
        let fence_check: FenceCheck = {
            let db: Mutex<Option<ClusterDb>> = Mutex::new(None);
            let connect = Mutex::new(connector(config, password.clone()));
            Arc::new(move |e: Epoch| {
                let mut db = lock(&db);
                if db.is_none() {
                    *db = Some((lock(&connect))()?);
                }
                let out = db.as_mut().expect("connected above").fenced(e, |_| Ok(()));
                if matches!(out, Err(StoreError::Mysql(_))) {
                    *db = None;
                }
                out
            })
        };
        info!(
            holder = %holder,
            instance = %store.instance(),
            journal = store.journal_seq(),
            "cluster mode: replica of the shared store opened; standing by until this daemon holds the lease"
        );
        Ok((
            store,
            Cluster {
                holder,
                election,
                epoch,
                seen,
                stop,
                thread: Some(thread),
                acting: None,
                takeovers: 0,
                fence_check,
                last_sweep: None,
                lease: config.timing.lease(),
                healthy,
                unchecked,
                me,
                releases: Releases::default(),
                snapshots: Some(snapshots),
            },
        ))
    }

    /// What this daemon may do now.
    pub fn role(&self) -> Role {
        lock(&self.election).role(Instant::now())
    }

    /// A handle for [`Guarded`].
    pub fn guard(&self) -> Guard {
        Guard(
            self.election.clone(),
            self.fence_check.clone(),
            self.epoch.clone(),
            self.releases.clone(),
        )
    }

    /// What the lease thread last saw.
    pub fn seen(&self) -> Seen {
        lock(&self.seen).clone()
    }

    /// Who acts, as a standby tells a user: the active daemon's node, if one acts.
    pub fn active_node(&self) -> Option<String> {
        active_node_of(&self.seen())
    }

    /// A handle the network listener asks, at each connection, whether this daemon is the
    /// active one and, if not, where that one is (`daemon::net`).
    pub fn activity(&self) -> Activity {
        Activity {
            election: self.election.clone(),
            seen: self.seen.clone(),
            me: self.me.clone(),
            acting: self.epoch.clone(),
        }
    }

    /// The loop turned: a poll cycle when active, a catch-up of the replica when standing
    /// by (this daemon's "last cycle" in its row and in `cluster`).
    pub fn turned(&self) {
        *lock(&self.me.last_cycle) = Some(Instant::now());
    }

    /// The answer to a request that changes something, while this daemon does not act.
    pub fn not_active(&self) -> String {
        match self.active_node() {
            Some(node) => {
                format!("not active; the active daemon is on {node}: run supervisorctl there")
            }
            None => {
                let why = self
                    .seen()
                    .error
                    .map(|e| format!(" (the shared database: {e})"))
                    .unwrap_or_default();
                format!("not active, and no daemon acts right now{why}; try again in a minute")
            }
        }
    }

    /// Called by the loop before each cycle; true when this daemon acts in it. A daemon
    /// that has just become active applies the rest of the journal first; a standby
    /// applies what was appended since.
    pub fn before_cycle(&mut self, store: &mut Store) -> Result<bool, StoreError> {
        let ready = self.check(store);
        self.healthy.store(ready.is_ok(), Ordering::SeqCst);
        if let Err(e) = ready {
            lock(&self.seen).error = Some(e.to_string());
            if let Some(epoch) = self.acting.take() {
                warn!(epoch = epoch.0, "this daemon is not the active one any more: it cannot act on its replica ({e})");
            }
            self.epoch.set(None);
            crate::metrics::cluster_role(None, store.journal_seq());
            return Err(e);
        }
        match self.role() {
            Role::Active { epoch, .. } => {
                if self.acting != Some(epoch) {
                    self.epoch.set(None);
                    let applied = store.catch_up()?;
                    self.epoch.set(Some(epoch));
                    self.acting = Some(epoch);
                    self.takeovers += 1;
                    self.last_sweep = None;
                    crate::metrics::cluster_takeover();
                    info!(
                        epoch = epoch.0,
                        applied,
                        journal = store.journal_seq(),
                        "this daemon is the active one now (epoch {epoch}): it reconciles and acts"
                    );
                }
                crate::metrics::cluster_role(Some(epoch.0), store.journal_seq());
                Ok(true)
            }
            role => {
                if let Some(epoch) = self.acting.take() {
                    warn!(
                        epoch = epoch.0,
                        ?role,
                        "this daemon is not the active one any more: it stands by"
                    );
                }
                self.epoch.set(None);
                crate::metrics::cluster_role(None, store.journal_seq());
                Ok(false)
            }
        }
    }

    /// Whether this node's replica may be acted on: the shared database checked to be
    /// this cluster's (once, if it was not reached at start), and every entry applied
    /// (an append whose fate was not known is settled here too).
    fn check(&mut self, store: &mut Store) -> Result<(), StoreError> {
        if let Some((cluster_name, config)) = &self.unchecked {
            let password = read_password_file(&config.password_file)
                .map_err(|e| StoreError::Busy(e.to_string()))?;
            let identity = connector(config, password)()?.prepare(cluster_name)?;
            match identity {
                Ok(id) if id.instance == store.instance() => {}
                Ok(id) => {
                    return Err(StoreError::Corrupt(format!(
                        "this node's replica is of store instance {}, and the shared database's is {}: it is not a replica of this database (move {} away and restart to make a new one)",
                        store.instance(),
                        id.instance,
                        "state_dir/replica.db"
                    )))
                }
                Err(refusal) => return Err(StoreError::Busy(refusal.to_string())),
            }
            info!("the shared database answers again, and is this cluster's");
            self.unchecked = None;
        }
        store.catch_up().map(|_| ())
    }

    /// A write was refused by the fence: this daemon stops acting now, without waiting for
    /// its next renewal to say so.
    pub fn deposed(&mut self) {
        let now = Instant::now();
        lock(&self.election).observe(now, now, Answer::Lost);
        self.epoch.set(None);
    }

    /// Whether the sweep of held jobs is due (at the first cycle of each tenure, then
    /// once a lease); marks it done.
    pub fn sweep_due(&mut self) -> bool {
        let due = self.last_sweep.is_none_or(|at| at.elapsed() >= self.lease);
        if due {
            self.last_sweep = Some(Instant::now());
        }
        due
    }

    /// The lease's length.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The epoch this daemon acts under, if it does: it holds the lease under that epoch
    /// now, and its replica caught up under it.
    pub fn acting(&self) -> Option<Epoch> {
        match (self.role(), self.acting) {
            (Role::Active { epoch, .. }, Some(acting)) if epoch == acting => Some(acting),
            _ => None,
        }
    }
}

impl Drop for Cluster {
    /// Stops the lease's thread, which gives the lease up if it holds it: a daemon stopped
    /// cleanly is replaced at once, not a lease later.
    fn drop(&mut self) {
        self.epoch.set(None);
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(t) = self.snapshots.take() {
            let _ = t.join();
        }
    }
}

/// The node of the lease's holder (`NODE:PID:RANDOM`), if one holds it.
fn active_node_of(seen: &Seen) -> Option<String> {
    let holder = seen.view.as_ref()?.active()?.to_string();
    // NODE:PID:RANDOM; a node name has no ':' but an IPv6 one, so cut from the right.
    let mut parts = holder.rsplitn(3, ':');
    let (_, _, node) = (parts.next(), parts.next(), parts.next());
    Some(node.unwrap_or(&holder).to_string())
}

/// Whether this daemon is the active one now, and the active one's node: shared with the
/// lease's thread, read from any thread.
#[derive(Clone)]
pub struct Activity {
    election: Arc<Mutex<Election>>,
    seen: Arc<Mutex<Seen>>,
    me: Me,
    /// The epoch the loop acts under (set by `before_cycle`).
    acting: EpochCell,
}

impl Activity {
    /// True once the loop acts under the lease this daemon holds: between winning the
    /// lease and the loop's next turn a request would be refused by the loop, so a client
    /// is not told it reached the active daemon until then.
    pub fn is_active(&self) -> bool {
        let role = lock(&self.election).role(Instant::now());
        match role {
            Role::Active { epoch, .. } => self.acting.get() == Some(epoch),
            _ => false,
        }
    }

    pub fn active_node(&self) -> Option<String> {
        active_node_of(&lock(&self.seen))
    }

    /// `cluster`'s answer: the lease and every daemon's row as the lease thread last read
    /// them (at most a third of a lease ago), aged since, with this daemon's own row as it
    /// is now.
    pub fn answer(&self) -> ClusterAnswer {
        let now = Instant::now();
        let role = lock(&self.election).role(now);
        let seen = lock(&self.seen).clone();
        cluster_answer(&self.me, role, &seen, now)
    }
}

fn secs(d: Duration) -> u64 {
    d.as_secs()
}

/// `cluster`'s answer from what this daemon knows at `now` (pure, for the tests).
fn cluster_answer(me: &Me, role: Role, seen: &Seen, now: Instant) -> ClusterAnswer {
    let since =
        |at: Option<Instant>| at.map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
    let lease = seen.view.as_ref().map(|v| {
        let left = v.left.saturating_sub(since(seen.view_at));
        LeaseAnswer {
            active_node: (!left.is_zero()).then(|| active_node_of(seen)).flatten(),
            epoch: v.epoch.0,
            since: v.since.and_then(|t| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .map(|d| d.as_secs() as i64)
            }),
            left_secs: secs(left),
        }
    });
    let aged = since(seen.nodes_at);
    let mut nodes: Vec<NodeAnswer> = seen
        .nodes
        .iter()
        .filter(|r| r.node != me.node)
        .map(|r| {
            let heartbeat = r.updated_ago + aged;
            NodeAnswer {
                node: r.node.clone(),
                role: r.role.as_str().to_string(),
                epoch: (r.role == NodeRole::Active).then_some(r.epoch),
                started_secs_ago: secs(r.started_ago + aged),
                last_cycle_secs_ago: r.last_cycle_ago.map(|d| secs(d + aged)),
                heartbeat_secs_ago: secs(heartbeat),
                silent: heartbeat > me.lease && r.role != NodeRole::Stopped,
                this: false,
            }
        })
        .collect();
    let (own, epoch) = node_role(role);
    let beat = me.beat(own, epoch);
    nodes.push(NodeAnswer {
        node: me.node.clone(),
        role: own.as_str().to_string(),
        epoch: epoch.map(|e| e.0),
        started_secs_ago: secs(beat.started_ago),
        last_cycle_secs_ago: beat.last_cycle_ago.map(secs),
        heartbeat_secs_ago: 0,
        silent: false,
        this: true,
    });
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    ClusterAnswer {
        mode: "cluster".into(),
        answered_by: me.node.clone(),
        lease,
        nodes,
        error: seen.error.clone(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How often the lease thread looks at its stop flag while it waits.
const TICK: Duration = Duration::from_millis(50);

fn lease_thread(
    mut connect: impl FnMut() -> Result<ClusterDb, StoreError>,
    me: Me,
    lease: Duration,
    election: Arc<Mutex<Election>>,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    healthy: Arc<AtomicBool>,
) {
    let holder = me.holder.clone();
    let mut db: Option<ClusterDb> = None;
    let mut first = true;
    while !stop.load(Ordering::SeqCst) {
        let next = lock(&election).next_request(Instant::now());
        if !first {
            while Instant::now() < next && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(TICK.min(next.saturating_duration_since(Instant::now())));
            }
            if stop.load(Ordering::SeqCst) {
                break;
            }
        }
        first = false;
        let sent = Instant::now();
        let held = lock(&election).epoch();
        // A node that cannot act on its replica does not hold the lease: it gives it up
        // (another node takes over at once) and does not take it.
        if !healthy.load(Ordering::SeqCst) {
            if let (Some(epoch), Some(conn)) = (held, db.as_mut()) {
                if conn.release(&holder, epoch).unwrap_or(false) {
                    warn!(
                        epoch = epoch.0,
                        "gave the lease up: this node cannot act on its replica"
                    );
                }
            }
            if held.is_some() {
                lock(&election).observe(sent, Instant::now(), Answer::Lost);
            }
            continue;
        }
        let failed = |db: &mut Option<ClusterDb>, e: StoreError| {
            lock(&seen).error = Some(e.to_string());
            *db = None;
            Answer::NoAnswer
        };
        if db.is_none() {
            match connect() {
                Ok(c) => db = Some(c),
                Err(e) => {
                    let answer = failed(&mut db, e);
                    lock(&election).observe(sent, Instant::now(), answer);
                    continue;
                }
            }
        }
        let answer = match db.as_mut() {
            None => Answer::NoAnswer,
            Some(conn) => {
                let answer = match held {
                    Some(epoch) => match conn.renew(&holder, epoch, lease) {
                        Ok(g) => Ok(Answer::Holds {
                            epoch: g.epoch,
                            granted: g.granted,
                        }),
                        Err(StoreError::Fenced { why, .. }) => {
                            warn!(epoch = epoch.0, "the lease {why}: this daemon stops acting");
                            Ok(Answer::Lost)
                        }
                        Err(e) => Err(e),
                    },
                    None => match conn.try_acquire(&holder, lease) {
                        Ok(Acquisition::Won(g)) => {
                            info!(epoch = g.epoch.0, "won the lease");
                            Ok(Answer::Holds {
                                epoch: g.epoch,
                                granted: g.granted,
                            })
                        }
                        Ok(Acquisition::Held(_)) => Ok(Answer::HeldByOther),
                        Err(e) => Err(e),
                    },
                };
                match answer {
                    Ok(a) => {
                        let view = conn.read().ok();
                        let mut s = lock(&seen);
                        s.error = None;
                        if view.is_some() {
                            s.view = view;
                            s.view_at = Some(Instant::now());
                        }
                        a
                    }
                    Err(e) => failed(&mut db, e),
                }
            }
        };
        lock(&election).observe(sent, Instant::now(), answer);
        // This daemon's row, and every daemon's, after the lease's call (never before it:
        // the row waits, the lease does not).
        if let Some(conn) = db.as_mut() {
            let (role, epoch) = node_role(lock(&election).role(Instant::now()));
            match conn
                .heartbeat(&me.beat(role, epoch))
                .and_then(|()| conn.nodes())
            {
                Ok(nodes) => {
                    let mut s = lock(&seen);
                    s.nodes = nodes;
                    s.nodes_at = Some(Instant::now());
                }
                Err(e) => {
                    tracing::debug!("cannot write or read the daemons' rows: {e}");
                    if matches!(e, StoreError::Mysql(_)) {
                        db = None;
                    }
                }
            }
        }
    }
    // A clean stop: give the lease up so another daemon takes over at once.
    let held = lock(&election).epoch();
    if let (Some(epoch), Some(conn)) = (held, db.as_mut()) {
        match conn.release(&holder, epoch) {
            Ok(true) => info!(epoch = epoch.0, "gave the lease up"),
            Ok(false) => {}
            Err(e) => warn!("cannot give the lease up ({e}); it ends by itself"),
        }
    }
    if let Some(conn) = db.as_mut() {
        let _ = conn.heartbeat(&me.beat(NodeRole::Stopped, None));
    }
}

/// Snapshots the store and prunes the journal when `policy` says so, while this daemon
/// acts (docs/cluster.md, "Snapshots"). Off the loop: the snapshot is read from the
/// replica's file on a connection of its own (WAL: the loop writes on meanwhile), and
/// written to the shared database a part at a time, so neither the loop nor the lease
/// waits for it. Made under the epoch the loop acts under: a daemon deposed meanwhile
/// cannot publish it (the publication is fenced), and its parts are dropped later.
fn snapshot_thread(
    mut connect: impl FnMut() -> Result<ClusterDb, StoreError>,
    replica: std::path::PathBuf,
    acting: EpochCell,
    policy: crate::plumbing::dbconfig::SnapshotPolicy,
    check: Duration,
    stop: Arc<AtomicBool>,
) {
    let mut db: Option<ClusterDb> = None;
    let mut sizes = EntrySizes::default();
    let mut next = Instant::now() + check;
    while !stop.load(Ordering::SeqCst) {
        if Instant::now() < next {
            std::thread::sleep(TICK.min(next.saturating_duration_since(Instant::now())));
            continue;
        }
        next = Instant::now() + check;
        let Some(epoch) = acting.get() else {
            sizes = EntrySizes::default();
            continue;
        };
        if db.is_none() {
            match connect() {
                Ok(c) => db = Some(c),
                Err(e) => {
                    tracing::debug!("snapshot: cannot connect: {e}");
                    continue;
                }
            }
        }
        let conn = db.as_mut().expect("connected above");
        let stopping = || stop.load(Ordering::SeqCst);
        let made = conn.snapshot_if_due(
            epoch,
            &policy,
            &mut sizes,
            Some(&replica),
            |dest| Store::snapshot_file(&replica, dest),
            &stopping,
        );
        match made {
            Ok(None) => {}
            Ok(Some((seq, why, pruned))) => info!(
                snapshot = seq,
                why,
                pruned_through = pruned.through,
                entries_pruned = pruned.entries,
                snapshots_dropped = pruned.snapshots,
                "snapshot of the store at journal entry {seq} written to the shared database; the journal is pruned through entry {}",
                pruned.through
            ),
            Err(e) => {
                warn!("the snapshot of the store was not written: {e}; the next check tries again");
                if matches!(e, StoreError::Mysql(_)) {
                    db = None;
                }
            }
        }
    }
}

/// How many times a held job's release is asked for.
const RELEASE_TRIES: u32 = 3;

/// Proves, by a transaction fenced by this daemon's epoch, that it still holds the lease.
type FenceCheck = Arc<dyn Fn(Epoch) -> Result<(), StoreError> + Send + Sync>;

/// The election, as the Slurm commands ask it, the fence check a held job's release
/// waits for, and what became of the releases after sbatch.
#[derive(Clone)]
pub struct Guard(Arc<Mutex<Election>>, FenceCheck, EpochCell, Releases);

/// The jobs this daemon submitted held, by base id: whether it released them at once
/// (true) or left them held (false), and when. The sweep of held jobs reads it: a job
/// this daemon released that is held again was held by its owner, and stays held.
#[derive(Clone, Default)]
pub struct Releases(Arc<Mutex<HashMap<String, (bool, Instant)>>>);

/// How long [`Releases`] remembers a job: longer than the sweep looks back
/// (`slurm.sbatch_timeout` + two leases).
const REMEMBER_RELEASES: Duration = Duration::from_secs(6 * 3600);

impl Releases {
    fn note(&self, job: &str, released: bool) {
        let now = Instant::now();
        let mut m = lock(&self.0);
        m.retain(|_, (_, at)| now.saturating_duration_since(*at) < REMEMBER_RELEASES);
        m.insert(job.to_string(), (released, now));
    }

    fn get(&self, job: &str) -> Option<bool> {
        lock(&self.0).get(job).map(|(released, _)| *released)
    }
}

impl Guard {
    fn may_query(&self) -> bool {
        lock(&self.0).role(Instant::now()).is_active()
    }

    fn may_change(&self, takes: Duration) -> bool {
        lock(&self.0).may_start(Instant::now(), takes)
    }
}

/// A Slurm that runs commands only while this daemon acts (cluster mode), or always
/// (`guard` `None`: a single node's daemon).
#[derive(Clone)]
pub struct Guarded<S> {
    inner: S,
    guard: Option<Guard>,
    /// The longest a command that changes Slurm may take (`slurm.command_timeout`; an
    /// sbatch is held, so a late one changes nothing).
    takes: Duration,
}

impl<S> Guarded<S> {
    pub fn new(inner: S, guard: Option<Guard>, takes: Duration) -> Guarded<S> {
        Guarded {
            inner,
            guard,
            takes,
        }
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn query(&self, command: &str) -> Result<(), SlurmError> {
        match &self.guard {
            Some(g) if !g.may_query() => Err(SlurmError::NotActive {
                command: command.into(),
            }),
            _ => Ok(()),
        }
    }

    fn change(&self, command: &str) -> Result<(), SlurmError> {
        match &self.guard {
            Some(g) if !g.may_change(self.takes) => Err(SlurmError::NotActive {
                command: command.into(),
            }),
            _ => Ok(()),
        }
    }
}

impl<S: Slurm> Slurm for Guarded<S> {
    /// In cluster mode a job is submitted held (`--hold`), and released only once a
    /// transaction fenced by this daemon's epoch has shown it still holds the lease: the
    /// sbatch of a daemon deposed meanwhile (stopped, cut off) leaves a held job that never
    /// runs, which the active daemon finds by its tag (docs/cluster.md). A job the argv
    /// holds already (a gate, the user's own `--hold`) is submitted as it is.
    async fn sbatch(&self, req: &SbatchRequest) -> Result<String, SlurmError> {
        let Some(guard) = &self.guard else {
            return self.inner.sbatch(req).await;
        };
        self.query("sbatch")?;
        // The tenure the sbatch starts in: its job is released only if that tenure still
        // holds the lease when sbatch has answered (not a later one of this daemon's).
        let Some(tenure) = guard.2.get() else {
            return Err(SlurmError::NotActive {
                command: "sbatch".into(),
            });
        };
        if req.held {
            return self.inner.sbatch(req).await;
        }
        let mut held = req.clone();
        held.argv.insert(0, "--hold".into());
        let id = self.inner.sbatch(&held).await?;
        let check = guard.1.clone();
        let fenced = tokio::task::spawn_blocking(move || check(tenure))
            .await
            .unwrap_or_else(|e| {
                Err(StoreError::Busy(format!(
                    "the fence check did not finish: {e}"
                )))
            });
        let base = id.split(';').next().unwrap_or(&id).to_string();
        let mut released = false;
        match fenced {
            Ok(()) if guard.may_change(self.takes) => {
                // `scontrol release` of a released job changes nothing: a release whose
                // answer was lost is asked again.
                for n in 1..=RELEASE_TRIES {
                    match self
                        .inner
                        .release(std::slice::from_ref(&base), req.run_as.as_ref())
                        .await
                    {
                        Ok(()) => {
                            released = true;
                            break;
                        }
                        Err(e) if n < RELEASE_TRIES && self.change("scontrol").is_ok() => {
                            warn!(job = %base, "releasing the held job failed ({e}); asking again");
                        }
                        Err(e) => {
                            warn!(job = %base, "the held job was not released: {e}; the next takeover or restart releases it");
                            break;
                        }
                    }
                }
            }
            Ok(()) => warn!(job = %base, "the job stays held: this daemon's lease is about to end"),
            Err(e) => warn!(job = %base, "the job stays held: {e}"),
        }
        guard.3.note(&base, released);
        Ok(id)
    }
    async fn squeue(&self, job_ids: &[String]) -> Result<Parsed<SqueueRow>, SlurmError> {
        self.query("squeue")?;
        self.inner.squeue(job_ids).await
    }
    async fn poll_queue(&self, job_ids: &[String]) -> Result<Queue, SlurmError> {
        self.query("squeue")?;
        self.inner.poll_queue(job_ids).await
    }
    async fn job_states(&self, job_ids: &[String]) -> Result<Option<Queue>, SlurmError> {
        self.query("squeue")?;
        self.inner.job_states(job_ids).await
    }
    async fn squeue_user(&self, user: &str) -> Result<Parsed<TagRow>, SlurmError> {
        self.query("squeue")?;
        self.inner.squeue_user(user).await
    }
    async fn squeue_tags(&self, job_id: &str) -> Result<Parsed<TagRow>, SlurmError> {
        self.query("squeue")?;
        self.inner.squeue_tags(job_id).await
    }
    async fn sacct(&self, job_ids: &[String]) -> Result<Parsed<SacctRow>, SlurmError> {
        self.query("sacct")?;
        self.inner.sacct(job_ids).await
    }
    async fn sacct_user_since(&self, user: &str, since: i64) -> Result<Parsed<TagRow>, SlurmError> {
        self.query("sacct")?;
        self.inner.sacct_user_since(user, since).await
    }
    async fn scancel(&self, job_ids: &[String], run_as: Option<&RunAs>) -> Result<(), SlurmError> {
        self.change("scancel")?;
        self.inner.scancel(job_ids, run_as).await
    }
    async fn show_job(
        &self,
        job_id: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, SlurmError> {
        self.query("scontrol")?;
        self.inner.show_job(job_id).await
    }
    async fn marked_jobs(&self, mark: &str) -> Result<Vec<(String, u32)>, SlurmError> {
        self.query("squeue")?;
        self.inner.marked_jobs(mark).await
    }
    async fn batch_script(&self, job_id: &str) -> Result<Vec<u8>, SlurmError> {
        self.query("scontrol")?;
        self.inner.batch_script(job_id).await
    }
    async fn partition_limits(&self) -> Result<HashMap<String, Option<u64>>, SlurmError> {
        self.query("sinfo")?;
        self.inner.partition_limits().await
    }
    async fn pending_of_users(&self, users: &[String]) -> Result<Parsed<PendingRow>, SlurmError> {
        self.query("squeue")?;
        self.inner.pending_of_users(users).await
    }
    async fn squeue_with_pending(
        &self,
        job_ids: &[String],
        users: &[String],
    ) -> Result<PolledWithPending, SlurmError> {
        self.query("squeue")?;
        self.inner.squeue_with_pending(job_ids, users).await
    }
    async fn set_dependency(
        &self,
        job_id: &str,
        dependency: &str,
        run_as: Option<&RunAs>,
    ) -> Result<(), SlurmError> {
        self.change("scontrol")?;
        self.inner.set_dependency(job_id, dependency, run_as).await
    }
    async fn release(&self, job_ids: &[String], run_as: Option<&RunAs>) -> Result<(), SlurmError> {
        self.change("scontrol")?;
        self.inner.release(job_ids, run_as).await
    }
    async fn mail_prog(&self) -> Result<Option<String>, SlurmError> {
        self.inner.mail_prog().await
    }
    async fn cluster_name(&self) -> Result<Option<String>, SlurmError> {
        self.inner.cluster_name().await
    }
    async fn slurm_user_uid(&self) -> Result<Option<u32>, SlurmError> {
        self.inner.slurm_user_uid().await
    }
    async fn held_with(&self, needle: &str) -> Result<Parsed<HeldRow>, SlurmError> {
        self.query("squeue")?;
        self.inner.held_with(needle).await
    }
    async fn held_job(&self, job_id: &str) -> Result<Option<HeldRow>, SlurmError> {
        self.query("squeue")?;
        self.inner.held_job(job_id).await
    }
    fn released_after_submit(&self, job_id: &str) -> Option<bool> {
        match &self.guard {
            Some(g) => g.3.get(job_id),
            None => self.inner.released_after_submit(job_id),
        }
    }
    async fn cancel_pending(&self, job_id: &str, run_as: Option<&RunAs>) -> Result<(), SlurmError> {
        self.change("scancel")?;
        self.inner.cancel_pending(job_id, run_as).await
    }
    async fn requeue_hold(&self, job_id: &str, run_as: Option<&RunAs>) -> Result<(), SlurmError> {
        self.change("scontrol")?;
        self.inner.requeue_hold(job_id, run_as).await
    }
    async fn update_job(
        &self,
        job_id: &str,
        fields: &[String],
        run_as: Option<&RunAs>,
    ) -> Result<(), SlurmError> {
        self.change("scontrol")?;
        self.inner.update_job(job_id, fields, run_as).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(node: &str, role: NodeRole, epoch: u64, updated: u64) -> NodeRow {
        NodeRow {
            node: node.into(),
            holder: format!("{node}:1:0001"),
            role,
            epoch,
            started_ago: Duration::from_secs(3600),
            last_cycle_ago: Some(Duration::from_secs(1)),
            updated_ago: Duration::from_secs(updated),
        }
    }

    /// Every daemon's row is shown, aged since it was read; this daemon's own is its state
    /// now (not the row it wrote a while ago); a row not written for a lease is silent, and
    /// a stopped one is not.
    #[test]
    fn the_answer_shows_every_daemon_and_this_one_as_it_is_now() {
        let now = Instant::now();
        let read = now - Duration::from_secs(5);
        let me = Me {
            node: "login2".into(),
            holder: "login2:7:0002".into(),
            started: now - Duration::from_secs(60),
            last_cycle: Arc::new(Mutex::new(Some(now - Duration::from_secs(2)))),
            lease: Duration::from_secs(60),
        };
        let seen = Seen {
            view: Some(LeaseView {
                epoch: Epoch(7),
                holder: Some("login1:1:0001".into()),
                since: Some(std::time::UNIX_EPOCH + Duration::from_secs(1_795_000_000)),
                left: Duration::from_secs(40),
            }),
            view_at: Some(read),
            nodes: vec![
                row("login1", NodeRole::Active, 7, 3),
                row("login2", NodeRole::Active, 6, 100),
                row("login3", NodeRole::Standby, 0, 58),
                row("login4", NodeRole::Stopped, 0, 9000),
            ],
            nodes_at: Some(read),
            error: None,
        };
        let a = cluster_answer(&me, Role::Standby, &seen, now);
        assert_eq!(a.mode, "cluster");
        assert_eq!(a.answered_by, "login2");
        let lease = a.lease.unwrap();
        assert_eq!(lease.active_node.as_deref(), Some("login1"));
        assert_eq!((lease.epoch, lease.left_secs), (7, 35));
        assert_eq!(lease.since, Some(1_795_000_000));
        type Shown<'a> = (&'a str, &'a str, Option<u64>, u64, bool, bool);
        let by: Vec<Shown> = a
            .nodes
            .iter()
            .map(|n| {
                (
                    n.node.as_str(),
                    n.role.as_str(),
                    n.epoch,
                    n.heartbeat_secs_ago,
                    n.silent,
                    n.this,
                )
            })
            .collect();
        assert_eq!(
            by,
            [
                ("login1", "active", Some(7), 8, false, false),
                ("login2", "standby", None, 0, false, true),
                ("login3", "standby", None, 63, true, false),
                ("login4", "stopped", None, 9005, false, false),
            ]
        );
        let own = &a.nodes[1];
        assert_eq!(
            (own.started_secs_ago, own.last_cycle_secs_ago),
            (60, Some(2))
        );
        assert_eq!(a.nodes[0].last_cycle_secs_ago, Some(6));
        // The lease ran out since it was read: nobody is named active.
        let later = cluster_answer(&me, Role::Standby, &seen, now + Duration::from_secs(40));
        assert_eq!(later.lease.unwrap().active_node, None);
    }
}
