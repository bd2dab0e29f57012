//! The network listener (`[server] listen`): the control protocol over TCP for clients on
//! other login nodes, each request authenticated by a MUNGE credential bound to it
//! (`protocol::net` has the exchange, docs/security.md the reasoning).
//!
//! A connection is anonymous until its opening credential is decoded, so it first waits in
//! a bounded **pre-authentication pool**: when the pool is full the connection that has
//! waited longest is dropped to make room. A client that speaks the protocol is through it
//! in milliseconds (two round trips to munged: its opening decoded, this daemon's proof
//! made), so idle, trickling or flooding connections only push each other out. Once the
//! opening says who the caller is (and that it was made for this daemon, this
//! connection's nonce and hello, and the address it reached), and the admission rules let
//! that uid in, the connection takes a slot of that uid's share, the same count the Unix
//! socket takes, and only then does the daemon prove itself: an anonymous connection gets
//! a refusal line and no credential of the daemon's. From there it is the Unix socket's
//! path: the same request reader and limits, and the same `server::answer`, once the
//! salt and the request match the opening's commitment.
//!
//! The exchange itself (hello and nonce, the client's opening, the daemon's proof) is
//! `protocol::net`'s. Here: the anonymous connections' calls to munged share
//! [`MUNGE_CALLS_MAX`] places; an opening is checked against the connection's nonce, hello
//! and local address and the daemon's identity; a per-user daemon refuses every uid but its own
//! (`server::owner_only`); root from an origin not in `[server] root_nodes` is no one;
//! TLS is optional (`[server] tls_cert`); and [`Activity`], asked at each connection, says
//! whether this daemon acts (always on one node; in cluster mode the election's role), so
//! a standby's hello names the active daemon. Refusals are logged within bounds
//! (`refusals.rs`); the listeners come from systemd or are bound here (`activation.rs`).

use super::refusals::{self, RefusalLog};
use super::server::{self, read_request, take_slot, Shared};
use crate::domain::request_binding::{self, Nonce};
use crate::plumbing::munge::{Munge, MungeError};
use crate::protocol::net::{
    nonce_from_hex, nonce_hex, salt_from_hex, Hello, MAX_OPENING, PROOF_UID_OF_ROOT, PROVE_FIRST,
    VERSION,
};
use crate::protocol::{ErrorKind, Response};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Semaphore};
use tracing::{debug, warn, Instrument};

/// Whether this daemon acts, asked at each connection. In cluster mode only the daemon
/// holding the lease acts; a standby sends clients to the active one.
pub trait Activity: Send + Sync {
    fn now(&self) -> Role;
}

/// What a daemon is, for a client that has just connected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Active,
    /// Not acting; `active_at` is the `host:port` of the active daemon, when known.
    Standby {
        active_at: Option<String>,
    },
}

/// The one daemon of a single login node (and, until cluster mode's election answers this
/// question, every daemon): always active.
pub struct AlwaysActive;

impl Activity for AlwaysActive {
    fn now(&self) -> Role {
        Role::Active
    }
}

/// Cluster mode's answer: active while this daemon holds the lease; otherwise a standby
/// that names the active daemon's node with this daemon's own port (every login node's
/// daemon listens on the same port; a client follows only to an address of its list, and
/// tries the rest of its list in order anyway).
pub struct ClusterActivity {
    pub cluster: super::cluster::Activity,
    pub port: u16,
}

impl Activity for ClusterActivity {
    fn now(&self) -> Role {
        role_of(
            self.cluster.is_active(),
            || self.cluster.active_node(),
            self.port,
        )
    }
}

/// The role a hello states: active, or a standby naming `node:port`.
fn role_of(active: bool, node: impl FnOnce() -> Option<String>, port: u16) -> Role {
    if active {
        Role::Active
    } else {
        Role::Standby {
            active_at: node().map(|n| format!("{n}:{port}")),
        }
    }
}

/// Connections that have not yet shown a credential, all peers together.
pub const PRE_AUTH_MAX: usize = 256;

/// The longest the salt line may be: the salt as hex and its newline.
const SALT_LINE: u64 = 2 * request_binding::SALT_LEN as u64 + 1;

/// The longest munged may take to decode a credential (or make the daemon's proof)
/// before the connection is dropped.
const DECODE_TIMEOUT: Duration = Duration::from_secs(10);

/// Calls to munged under way at once for the listener, all connections together: the
/// node's munged is the one every Slurm command uses, so anonymous connections get a
/// bounded share of it. A connection waits for a place in its pre-authentication time
/// (and pushed out, it stops waiting); a call once started holds its place until munged
/// answers, so never more than this many run.
pub const MUNGE_CALLS_MAX: usize = 8;

/// The daemon's proof's time to live: the client decodes it within milliseconds; the
/// rest is room for clocks a little out of step between login nodes.
const PROOF_TTL: u32 = 60;

/// The network side of a daemon.
pub struct NetServer {
    pub shared: Arc<Shared>,
    pub munge: Arc<Munge>,
    /// The identity bound into credentials (`[server] id`, by default `host:port`).
    pub id: String,
    /// This daemon's uid: credentials must be restricted to it.
    pub uid: u32,
    /// The origins (as MUNGE states them) whose root is an administrator here.
    pub root_nodes: Vec<Ipv4Addr>,
    /// Accounts besides root and the system accounts for which no proof is made (Slurm's
    /// own: `SlurmUser`), see `proof_uid`.
    pub no_proof_for: Vec<u32>,
    pub activity: Arc<dyn Activity>,
    /// TLS around every connection, when `[server] tls_cert` is set.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pool: Arc<PreAuth>,
    /// Calls to munged, `MUNGE_CALLS_MAX` at once.
    munge_calls: MungeCalls,
    /// Bounds the refusal lines per peer and reason (`refusals`).
    refusals: RefusalLog,
}

impl NetServer {
    pub fn new(
        shared: Arc<Shared>,
        munge: Munge,
        id: String,
        root_nodes: Vec<Ipv4Addr>,
        no_proof_for: Vec<u32>,
        activity: Arc<dyn Activity>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Arc<NetServer> {
        Arc::new(NetServer {
            shared,
            munge: Arc::new(munge),
            id,
            uid: nix::unistd::geteuid().as_raw(),
            root_nodes,
            no_proof_for,
            activity,
            tls: tls.map(tokio_rustls::TlsAcceptor::from),
            pool: Arc::new(PreAuth::default()),
            munge_calls: MungeCalls::new(MUNGE_CALLS_MAX),
            refusals: RefusalLog::default(),
        })
    }

    /// Counts a connection that ended without a refusal line of its own (`silent`: it
    /// left before sending a credential; `pushed_out` of the pre-authentication pool): no
    /// line each, but the refusal summary says how many, per peer.
    fn counted(&self, peer: SocketAddr, reason: &'static str) {
        let v = self.refusals.count(peer.ip(), reason, Instant::now());
        if v.suppressed_before > 0 {
            log_suppressed(Some(peer.ip()), reason, v.suppressed_before);
        }
    }

    /// Runs `f` with munged (`MungeCalls::run`), within `DECODE_TIMEOUT`.
    async fn with_munge<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Munge) -> T + Send + 'static,
    ) -> Result<T, Result<Refusal, std::io::Error>> {
        tokio::time::timeout(DECODE_TIMEOUT, self.munge_calls.run(self.munge.clone(), f))
            .await
            .map_err(|_| Ok(Refusal::new("munged", "munged did not answer in time")))?
            .map_err(Err)
    }

    /// Logs a refused connection at warn (`network request refused`, with the peer, the
    /// uid once known, and the stable `reason`), within the refusal log's bounds: a flood
    /// from one peer is a few lines and a summary of the rest, not a line each.
    fn refused(&self, peer: SocketAddr, uid: Option<u32>, reason: &'static str, message: &str) {
        let v = self.refusals.admit(peer.ip(), reason, Instant::now());
        if v.suppressed_before > 0 {
            log_suppressed(Some(peer.ip()), reason, v.suppressed_before);
        }
        if !v.log {
            return;
        }
        match uid {
            Some(uid) => warn!(%peer, uid, reason, "network request refused: {message}"),
            None => warn!(%peer, reason, "network request refused: {message}"),
        }
    }
}

/// Places for calls to munged: at most as many blocking calls at once as places.
struct MungeCalls {
    places: Arc<Semaphore>,
}

impl MungeCalls {
    fn new(places: usize) -> MungeCalls {
        MungeCalls {
            places: Arc::new(Semaphore::new(places)),
        }
    }

    /// Runs `f` with `munge` on a blocking thread once a place is free. Waiting for the
    /// place is cancelled with this future (dropped: the connection pushed out or timed
    /// out), and `f` never runs; once started, `f` keeps its place until it returns,
    /// whatever becomes of the future.
    async fn run<M: Send + Sync + 'static, T: Send + 'static>(
        &self,
        munge: Arc<M>,
        f: impl FnOnce(&M) -> T + Send + 'static,
    ) -> std::io::Result<T> {
        let place = self
            .places
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        tokio::task::spawn_blocking(move || {
            let _place = place;
            f(&munge)
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
    }
}

/// The summary of refusals left unlogged in a window (`refusals`). Clients that left
/// before sending a credential (`silent`) are summed up at info: a client that read a
/// standby's hello and went to the active daemon is one.
fn log_suppressed(peer: Option<IpAddr>, reason: &'static str, n: u64) {
    let from = peer.map_or_else(|| "other peers".to_string(), |p| p.to_string());
    if reason == "silent" {
        tracing::info!(
            peer = %from,
            reason,
            suppressed = n,
            "network refusals not logged: {n} more from {from} for {reason} within {:?} (connections that sent no credential)",
            refusals::WINDOW
        );
        return;
    }
    warn!(
        peer = %from,
        reason,
        suppressed = n,
        "network refusals not logged: {n} more from {from} for {reason} within {:?} (at most {} lines per peer and reason)",
        refusals::WINDOW,
        refusals::PER_WINDOW
    );
}

/// The first uid of an ordinary account: below it (root included) are system accounts.
pub const FIRST_USER_UID: u32 = 1000;

/// The uid the daemon's proof is restricted to, for a client whose opening proved it is
/// `claimed` (`PROOF_UID_OF_ROOT` for root).
///
/// A proof is a credential this daemon makes as itself, handed to a client that
/// authenticated (nothing stops a user from then handing it on to her own programs). Made
/// by root and decodable by root or by Slurm's own account, it would be a credential of
/// root's that slurmd (root) or slurmctld and slurmdbd (`SlurmUser`) decode: Slurm before
/// 23.11 does not check a credential's payload, so anyone could speak to it as root. So a
/// system-wide daemon restricts each proof to the uid the client proved it is, and makes
/// none for root, a system account (below `FIRST_USER_UID`) or an account of `refused`
/// (Slurm's). A root client's proof is `nobody`'s (`PROOF_UID_OF_ROOT`), which it decodes
/// as `nobody`. A per-user daemon's proof is made as its user and restricted to that user,
/// the only one it serves (`server::owner_only`).
pub fn proof_uid(daemon_uid: u32, claimed: u32, refused: &[u32]) -> Result<u32, String> {
    if daemon_uid != 0 {
        return Ok(daemon_uid);
    }
    if claimed < FIRST_USER_UID || refused.contains(&claimed) {
        return Err(format!(
            "no proof is made for uid {claimed} (root, a system account or Slurm's): a credential of root's it could decode would speak to Slurm as root"
        ));
    }
    Ok(claimed)
}

/// The daemon's identity when the config names none: its host name and port.
pub fn default_id(port: u16) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    format!("{host}:{port}")
}

/// The pre-authentication pool: each waiting connection's ticket, oldest first.
#[derive(Default)]
struct PreAuth {
    waiting: Mutex<(u64, BTreeMap<u64, oneshot::Sender<()>>)>,
}

/// A connection's place in the pool; leaving the pool (authenticated or gone) drops it.
struct Ticket {
    pool: Arc<PreAuth>,
    id: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut w = self.pool.waiting.lock().unwrap_or_else(|e| e.into_inner());
        w.1.remove(&self.id);
    }
}

impl PreAuth {
    /// A place for a new connection, and the signal that it was pushed out; the
    /// longest-waiting connection is pushed out when the pool is full.
    fn enter(self: &Arc<Self>) -> (Ticket, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        while w.1.len() >= PRE_AUTH_MAX {
            // Dropping its sender tells it.
            w.1.pop_first();
        }
        let id = w.0;
        w.0 += 1;
        w.1.insert(id, tx);
        (
            Ticket {
                pool: self.clone(),
                id,
            },
            rx,
        )
    }
}

/// Accepts connections until the loop goes away.
pub async fn serve(listener: TcpListener, net: Arc<NetServer>) {
    // The summaries of refusals left unlogged, once their window is over.
    let summaries = net.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            if summaries.shared.to_loop.is_closed() {
                return;
            }
            for s in summaries.refusals.ended(Instant::now()) {
                log_suppressed(s.peer, s.reason, s.suppressed);
            }
        }
    });
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!("network accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if net.shared.to_loop.is_closed() {
            return;
        }
        let _ = stream.set_nodelay(true);
        // The address this connection reached, as this side sees it: the proof names it.
        let Ok(local) = stream.local_addr() else {
            continue;
        };
        let net = net.clone();
        let span = tracing::debug_span!("net", %peer);
        tokio::spawn(
            async move {
                if let Err(e) = connection(stream, peer, local, &net).await {
                    debug!("network connection ended with an error: {e}");
                }
            }
            .instrument(span),
        );
    }
}

/// Why a network request was refused before it was read: a stable code for logs and
/// tests, and what the client is told.
#[derive(Debug)]
struct Refusal {
    code: &'static str,
    message: String,
}

impl Refusal {
    fn new(code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }
}

/// The pre-authentication part: the hello, the opening, its checks, a slot, the proof.
struct Authenticated {
    uid: u32,
    gid: u32,
    origin: Ipv4Addr,
    /// What the opening committed the request to.
    commitment: request_binding::Commitment,
    slot: server::Slot,
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    net: &NetServer,
) -> std::io::Result<()> {
    // The TLS handshake is part of the anonymous wait: in the pool, and bounded in time.
    let (ticket, mut pushed_out) = net.pool.enter();
    let Some(acceptor) = &net.tls else {
        return connection_on(stream, (peer, local), net, ticket, pushed_out).await;
    };
    let within = net.shared.limits.request_timeout.0;
    let accepted = tokio::select! {
        a = tokio::time::timeout(within, acceptor.accept(stream)) => a,
        _ = &mut pushed_out => {
            debug!("pushed out of the pre-authentication pool by newer connections");
            net.counted(peer, "pushed_out");
            return Ok(());
        }
    };
    match accepted {
        Err(_) => {
            net.refused(
                peer,
                None,
                "slow",
                &format!("no TLS handshake within {within:?} (limits.request_timeout)"),
            );
            Ok(())
        }
        Ok(Err(e)) => {
            net.refused(peer, None, "tls", &format!("TLS handshake failed: {e}"));
            Ok(())
        }
        Ok(Ok(tls)) => connection_on(tls, (peer, local), net, ticket, pushed_out).await,
    }
}

/// Serves one connection on any byte stream (plain TCP, or TLS over it).
async fn connection_on<S: AsyncRead + AsyncWrite + Unpin + Send>(
    stream: S,
    (peer, local): (SocketAddr, SocketAddr),
    net: &NetServer,
    ticket: Ticket,
    pushed_out: oneshot::Receiver<()>,
) -> std::io::Result<()> {
    let (read, mut write) = tokio::io::split(stream);
    let mut reader = BufReader::new(read);
    let nonce: Nonce = rand::random();
    let authenticated = tokio::select! {
        a = handshake(&mut reader, &mut write, &nonce, local, net) => a,
        _ = pushed_out => {
            debug!("pushed out of the pre-authentication pool by newer connections");
            net.counted(peer, "pushed_out");
            return Ok(());
        }
    };
    drop(ticket);
    let a = match authenticated {
        Ok(a) => a,
        Err(Err(e)) => {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                net.counted(peer, "silent");
            }
            return Err(e);
        }
        Err(Ok(r)) => {
            net.refused(peer, None, r.code, &r.message);
            return server::write_answer(
                &mut write,
                &Response::error(ErrorKind::Forbidden, r.message),
            )
            .await;
        }
    };
    // From here on the caller is a uid with a slot of its share, as on the Unix socket. It
    // sends the salt of its commitment, then the request.
    let salt_line = match line_in_time(&mut reader, SALT_LINE, net, "salt").await {
        Ok(line) => line,
        Err(Ok(r)) => {
            net.refused(peer, Some(a.uid), r.code, &r.message);
            return server::write_answer(
                &mut write,
                &Response::error(ErrorKind::Forbidden, r.message),
            )
            .await;
        }
        Err(Err(e)) => return Err(e),
    };
    // Nothing: a client that did not take this daemon's proof (it says why on its side).
    if salt_line.is_empty() {
        net.counted(peer, "silent");
        return Ok(());
    }
    let Some(salt) = salt_line.strip_suffix(b"\n").and_then(salt_from_hex) else {
        let message = format!(
            "expected the salt of the opening's commitment, {} bytes as hex, on one line",
            request_binding::SALT_LEN
        );
        net.refused(peer, Some(a.uid), "salt", &message);
        return server::write_answer(&mut write, &Response::error(ErrorKind::Forbidden, message))
            .await;
    };
    let max = net.shared.limits.max_request_bytes();
    let mut line = Vec::new();
    let got = read_request(
        &mut (&mut reader).take(max + 1),
        &mut line,
        net.shared.limits.request_timeout.0,
    )
    .await;
    match &got {
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => net.refused(
            peer,
            Some(a.uid),
            "slow",
            &format!(
                "no complete request in time (limits.request_timeout = {:?})",
                net.shared.limits.request_timeout.0
            ),
        ),
        Ok(()) if line.len() as u64 > max => net.refused(
            peer,
            Some(a.uid),
            "too_large",
            &format!("request larger than {max} bytes (limits.max_script_size sets it)"),
        ),
        _ => {}
    }
    if got.is_ok() && line.len() as u64 <= max {
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        if let Err(m) = request_binding::check_commitment(&a.commitment, &salt, body) {
            net.refused(peer, Some(a.uid), m.code(), &m.to_string());
            return server::write_answer(
                &mut write,
                &Response::error(ErrorKind::Forbidden, format!("credential refused: {m}")),
            )
            .await;
        }
    }
    debug!(%peer, uid = a.uid, gid = a.gid, origin = %a.origin, "network request authenticated");
    let _slot = a.slot;
    // The Unix socket's path, its write timeouts included: a client that does not take
    // its answer is dropped, and that is logged as a refusal too.
    // `[learn] admin_group` gives its rights only from an origin `[server] root_nodes`
    // lists, as root's are (docs/security.md): a MUNGE credential from any other node
    // proves the uid, not the groups this node's NSS gives it.
    let group_counts = net.root_nodes.contains(&a.origin);
    let answered = server::answer(got, line, a.uid, group_counts, &net.shared, &mut write).await;
    if let Err(e) = &answered {
        if e.kind() == std::io::ErrorKind::TimedOut {
            net.refused(
                peer,
                Some(a.uid),
                "unread",
                &format!("{e}; connection dropped"),
            );
        }
    }
    answered
}

/// One line of at most `max` bytes from the client, within `limits.request_timeout`; a
/// client that sends no `what` in time is refused as `slow`.
async fn line_in_time<R>(
    reader: &mut R,
    max: u64,
    net: &NetServer,
    what: &str,
) -> Result<Vec<u8>, Result<Refusal, std::io::Error>>
where
    R: tokio::io::AsyncBufRead + Unpin,
{
    let mut line = Vec::new();
    let limit = net.shared.limits.request_timeout.0;
    match read_request(&mut reader.take(max), &mut line, limit).await {
        Ok(()) => Ok(line),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(Ok(Refusal::new(
            "slow",
            format!("no {what} in time (limits.request_timeout = {limit:?})"),
        ))),
        Err(e) => Err(Err(e)),
    }
}

/// Says hello, reads and checks the client's opening credential, takes a slot for its
/// uid, and only then proves this daemon to it. A standby says so and where the active
/// daemon is, and goes on: it answers reads from its replica and refuses changes, as on
/// its Unix socket. `Err(Ok(_))`: refused (no proof made); `Err(Err(_))`: the connection
/// broke (`UnexpectedEof`: the client left before sending an opening).
async fn handshake<R, W>(
    reader: &mut R,
    write: &mut W,
    nonce: &Nonce,
    local: SocketAddr,
    net: &NetServer,
) -> Result<Authenticated, Result<Refusal, std::io::Error>>
where
    R: tokio::io::AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let role = net.activity.now();
    let hello = Hello {
        version: VERSION,
        daemon: net.id.clone(),
        uid: net.uid,
        active: role == Role::Active,
        nonce: Some(nonce_hex(nonce)),
        active_at: match &role {
            Role::Active => None,
            Role::Standby { active_at } => active_at.clone(),
        },
    };
    let hello_line = serde_json::to_vec(&hello).expect("a hello serializes");
    // The hello and the proof are small: they fit the socket's buffer, so a client that
    // never reads them does not hold this up.
    send_line(write, &hello_line).await?;
    // The client's opening: its credential.
    let line = line_in_time(reader, MAX_OPENING, net, "opening").await?;
    // Nothing at all: a client that read a standby's hello and went to the active daemon
    // with its change, one that only looked, or one of another version. Not a refusal.
    if line.is_empty() {
        return Err(Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the client left after the hello",
        )));
    }
    let Some(first) = line.strip_suffix(b"\n") else {
        return Err(Ok(unreadable_opening(&line)));
    };
    // Root's client asks for the proof first (`protocol::net::PROVE_FIRST`): made for
    // `nobody`, as every proof for root, before anything says who asks; root's opening
    // comes after it.
    let (cred, proven_first) = match first.strip_prefix(PROVE_FIRST.as_bytes()) {
        Some(hex) => {
            let client_nonce = std::str::from_utf8(hex)
                .ok()
                .and_then(nonce_from_hex)
                .ok_or_else(|| {
                    Ok(Refusal::new(
                        "opening",
                        "expected a client nonce (hex) after PROVE:".to_string(),
                    ))
                })?;
            // Only the system-wide daemon serves root (a per-user daemon, its own user).
            server::owner_only(net.uid, 0).map_err(|why| Ok(Refusal::new("owner", why)))?;
            let for_uid = proof_uid(net.uid, PROOF_UID_OF_ROOT, &net.no_proof_for)
                .map_err(|why| Ok(Refusal::new("proof_uid", why)))?;
            prove(
                write,
                net,
                &client_nonce,
                nonce,
                &hello_line,
                local,
                for_uid,
            )
            .await?;
            let line = line_in_time(reader, MAX_OPENING, net, "opening").await?;
            let Some(cred) = line.strip_suffix(b"\n") else {
                return Err(Ok(unreadable_opening(&line)));
            };
            (cred.to_vec(), Some(client_nonce))
        }
        None => (first.to_vec(), None),
    };
    let decoded = net.with_munge(move |m| m.decode(cred)).await?;
    let d = match decoded {
        Ok(d) => d,
        Err(
            e @ (MungeError::Socket { .. } | MungeError::Library { .. } | MungeError::NoContext),
        ) => {
            // The daemon's own trouble, not the caller's: said as such (and logged
            // as the refusal `munged`).
            return Err(Ok(Refusal::new(
                "munged",
                format!("the daemon cannot check credentials now ({e}); try again later"),
            )));
        }
        Err(e) => {
            return Err(Ok(Refusal::new(
                e.code(),
                format!("credential refused: {e}"),
            )))
        }
    };
    let opened = request_binding::check_opening(&d.payload, &net.id, nonce, &hello_line, local)
        .map_err(|m| Ok(Refusal::new(m.code(), format!("credential refused: {m}"))))?;
    // After a proof asked for first: root's opening, for that nonce, and no other's.
    if let Some(asked) = proven_first {
        if d.uid != 0 || opened.client_nonce != asked {
            return Err(Ok(Refusal::new(
                "opening",
                "only root's client asks for the proof first, and its opening names the nonce it asked with"
                    .to_string(),
            )));
        }
    }
    // A per-user daemon serves its own user only (as its Unix socket does).
    server::owner_only(net.uid, d.uid).map_err(|why| Ok(Refusal::new("owner", why)))?;
    if d.uid == 0 && !net.root_nodes.contains(&d.origin) {
        return Err(Ok(Refusal::new(
            "root_elsewhere",
            format!(
                "root on {} is not an administrator of this daemon (server.root_nodes does not list it)",
                d.origin
            ),
        )));
    }
    // The proof is for the uid the opening proved; root decodes it as `nobody`.
    let claimed = if d.uid == 0 { PROOF_UID_OF_ROOT } else { d.uid };
    let for_uid = proof_uid(net.uid, claimed, &net.no_proof_for)
        .map_err(|why| Ok(Refusal::new("proof_uid", why)))?;
    let slot = take_slot(
        &net.shared.counts,
        d.uid,
        net.shared.limits.connections_per_user,
    )
    .map_err(|why| Ok(Refusal::new("connections", why)))?;
    if proven_first.is_none() {
        prove(
            write,
            net,
            &opened.client_nonce,
            nonce,
            &hello_line,
            local,
            for_uid,
        )
        .await?;
    }
    Ok(Authenticated {
        uid: d.uid,
        gid: d.gid,
        origin: d.origin,
        commitment: opened.commitment,
        slot,
    })
}

/// Makes this daemon's proof for `client_nonce` (`request_binding::prove`), restricted to
/// `for_uid`, and sends it.
async fn prove<W: AsyncWrite + Unpin>(
    write: &mut W,
    net: &NetServer,
    client_nonce: &Nonce,
    nonce: &Nonce,
    hello_line: &[u8],
    local: SocketAddr,
    for_uid: u32,
) -> Result<(), Result<Refusal, std::io::Error>> {
    let payload = request_binding::prove(client_nonce, &net.id, nonce, hello_line, local);
    let proof = net
        .with_munge(move |m| m.encode(&payload, Some(for_uid), Some(PROOF_TTL)))
        .await?
        .map_err(|e| {
            Ok(Refusal::new(
                "munged",
                format!("the daemon cannot prove itself now ({e}); try again later"),
            ))
        })?;
    send_line(write, proof.as_bytes()).await
}

/// The refusal of an opening line that did not end (too long, or cut short).
fn unreadable_opening(line: &[u8]) -> Refusal {
    Refusal::new(
        if line.len() as u64 >= MAX_OPENING {
            "too_long"
        } else {
            "truncated"
        },
        format!(
            "expected an opening: a MUNGE credential of at most {} bytes on one line (version {VERSION} of the network protocol)",
            crate::plumbing::munge::MAX_CREDENTIAL
        ),
    )
}

/// Writes `line` and its newline within the write timeout.
async fn send_line<W: AsyncWrite + Unpin>(
    write: &mut W,
    line: &[u8],
) -> Result<(), Result<Refusal, std::io::Error>> {
    let mut out = Vec::with_capacity(line.len() + 1);
    out.extend_from_slice(line);
    out.push(b'\n');
    tokio::time::timeout(server::WRITE_TIMEOUT, async {
        tokio::io::AsyncWriteExt::write_all(write, &out).await?;
        tokio::io::AsyncWriteExt::flush(write).await
    })
    .await
    .map_err(|_| {
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the daemon's line not taken",
        ))
    })?
    .map_err(Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls wait for a place: never more than the places run at once, and a call whose
    /// connection went away while it waited never runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_to_munged_are_bounded_and_a_call_given_up_while_waiting_never_runs() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let calls = Arc::new(MungeCalls::new(3));
        let state = Arc::new((
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        ));
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let call = |calls: Arc<MungeCalls>| {
            let (state, release_rx) = (state.clone(), release_rx.clone());
            async move {
                calls
                    .run(Arc::new(()), move |_: &()| {
                        // (running now, most at once, ever started)
                        let now = state.0.fetch_add(1, SeqCst) + 1;
                        state.1.fetch_max(now, SeqCst);
                        state.2.fetch_add(1, SeqCst);
                        let _ = release_rx.lock().unwrap().recv();
                        state.0.fetch_sub(1, SeqCst);
                    })
                    .await
            }
        };
        let running: Vec<_> = (0..3).map(|_| tokio::spawn(call(calls.clone()))).collect();
        while state.0.load(SeqCst) < 3 {
            tokio::task::yield_now().await;
        }
        // Two more wait for a place; one of them is given up (its connection pushed out).
        let waiting = tokio::spawn(call(calls.clone()));
        let given_up = tokio::spawn(call(calls.clone()));
        tokio::task::yield_now().await;
        given_up.abort();
        assert!(given_up.await.unwrap_err().is_cancelled());
        for _ in 0..4 {
            release_tx.send(()).unwrap();
        }
        for r in running {
            r.await.unwrap().unwrap();
        }
        waiting.await.unwrap().unwrap();
        assert_eq!(state.1.load(SeqCst), 3, "at most the places at once");
        assert_eq!(state.2.load(SeqCst), 4, "the given-up call never started");
    }

    #[test]
    fn no_proof_is_made_that_root_or_slurm_could_decode() {
        let slurm = 64030;
        // A system-wide daemon: the client's own uid, never root's, a system account's
        // or Slurm's.
        assert_eq!(proof_uid(0, 1000, &[slurm]), Ok(1000));
        assert_eq!(proof_uid(0, 65534, &[slurm]), Ok(65534));
        for refused in [0, 1, 999, slurm] {
            let e = proof_uid(0, refused, &[slurm]).unwrap_err();
            assert!(e.contains(&format!("uid {refused}")), "{e}");
        }
        // A per-user daemon: its own uid, whoever asks.
        assert_eq!(proof_uid(1000, 0, &[slurm]), Ok(1000));
        assert_eq!(proof_uid(1000, 1001, &[slurm]), Ok(1000));
    }

    #[test]
    fn a_standby_names_the_active_node_with_its_own_port() {
        assert_eq!(role_of(true, || Some("login2".into()), 6827), Role::Active);
        assert_eq!(
            role_of(false, || Some("login2".into()), 6827),
            Role::Standby {
                active_at: Some("login2:6827".into())
            }
        );
        assert_eq!(
            role_of(false, || None, 6827),
            Role::Standby { active_at: None }
        );
    }

    #[test]
    fn a_full_pool_pushes_out_the_longest_waiting_connection() {
        let pool = Arc::new(PreAuth::default());
        let mut held: Vec<_> = (0..PRE_AUTH_MAX).map(|_| pool.enter()).collect();
        for (_, rx) in &mut held {
            assert!(rx
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Empty));
        }
        let newest = pool.enter();
        assert_eq!(
            held[0].1.try_recv(),
            Err(oneshot::error::TryRecvError::Closed),
            "the oldest is pushed out"
        );
        assert_eq!(
            held[1].1.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        );
        // One that leaves gives its place back: no one else is pushed out for the next.
        drop(held.remove(5));
        let _next = pool.enter();
        assert_eq!(
            held[1].1.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        );
        assert_eq!(pool.waiting.lock().unwrap().1.len(), PRE_AUTH_MAX);
        drop(newest);
    }
}
