//! The control socket: one JSON request per connection, one JSON line back.
//!
//! Each caller is identified by the socket's peer credentials (never by the request) and
//! gets a bounded share: at most `limits.connections_per_user` connections at once, a
//! request line of bounded size delivered within `limits.request_timeout`. Read requests
//! are answered here, from a read-only store connection on a blocking thread, so they never
//! wait for the daemon's loop; requests that change something go to the loop
//! (`requests::route` says which). `answer` is the one path from a request line to its
//! answer for every listener, the network's too, and a per-user daemon serves its own uid
//! alone on all of them (`owner_only`). A long list (`status` of every chain, `pending`)
//! is written to the client as it is read (`stream_list`), so an answer nobody reads holds
//! a few chunks.

use super::reads::{self, Read};
use super::requests::{self, Route};
use crate::config::LimitsConfig;
use crate::protocol::{ErrorKind, Request, Response};
use crate::store::Store;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn, Instrument};

/// Read-only store connections for answering reads, kept open between requests (opening
/// one and reading the schema costs more than a small read itself).
pub struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Store>>,
}

/// Idle read connections kept; more are opened when many reads come at once.
const IDLE_READERS: usize = 4;

impl Readers {
    pub fn new(path: PathBuf) -> Readers {
        Readers {
            path,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Runs `f` with a read connection (on the calling, blocking thread).
    fn with<T>(&self, f: impl FnOnce(&Store) -> T) -> Result<T, crate::store::StoreError> {
        let taken = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let store = match taken {
            Some(s) => s,
            None => Store::open_reader(&self.path)?,
        };
        let out = f(&store);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < IDLE_READERS {
            idle.push(store);
        }
        Ok(out)
    }
}

/// A request on its way to the loop.
pub struct Control {
    pub request: Request,
    /// Who sent it, their admin group looked up already (off the loop).
    pub caller: crate::daemon::access::Caller,
    pub reply: oneshot::Sender<Response>,
}

/// Binds the socket, replacing a stale one. Per-user daemons make it owner-only; a
/// daemon running as root (system-wide) lets everyone connect and relies on peer
/// credentials to limit each caller to their own chains.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "another slurm-supervisord is already listening on {}; stop it first",
                    path.display()
                ),
            ))
        }
        Err(_) => {
            let _ = std::fs::remove_file(path);
        }
    }
    let listener = UnixListener::bind(path)?;
    let mode = if nix::unistd::geteuid().is_root() {
        0o666
    } else {
        0o600
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

/// Connections served at once, all users together (each has its own smaller share).
const MAX_CONNECTIONS: usize = 1024;

/// A client must take its answer within this time.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Open connections per uid.
pub(super) type Counts = Arc<Mutex<HashMap<u32, usize>>>;

/// One connection's place in the counts, given back when it ends.
pub(super) struct Slot {
    counts: Counts,
    uid: u32,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.counts.lock().expect("counts lock");
        if let Some(n) = c.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                c.remove(&self.uid);
            }
        }
    }
}

/// Takes a slot for `uid`, or says which limit is reached.
pub(super) fn take_slot(counts: &Counts, uid: u32, per_user: usize) -> Result<Slot, String> {
    let mut c = counts.lock().expect("counts lock");
    let total: usize = c.values().sum();
    if total >= MAX_CONNECTIONS {
        return Err(format!(
            "the daemon is serving {total} connections; try again in a moment"
        ));
    }
    let mine = c.entry(uid).or_insert(0);
    if *mine >= per_user {
        return Err(format!(
            "you have {mine} connections open to the daemon, the most one user may have (limits.connections_per_user = {per_user}); close some and try again"
        ));
    }
    *mine += 1;
    Ok(Slot {
        counts: counts.clone(),
        uid,
    })
}

/// Whether `caller` may use a daemon running as `daemon_uid`: a system-wide (root) daemon
/// serves every uid (each on their own chains); a per-user daemon serves its own user and
/// no one else, root included, over every transport, since everything it does it does as
/// that user (its sbatch runs as the daemon's own uid). The Unix socket's mode (0600) keeps
/// others out already; this holds even where the socket is reachable (root, or a socket
/// path the config put elsewhere), and it is the network listener's only word on it.
pub(super) fn owner_only(daemon_uid: u32, caller: u32) -> Result<(), String> {
    if daemon_uid == 0 || caller == daemon_uid {
        Ok(())
    } else {
        Err(format!(
            "this is uid {daemon_uid}'s own slurm-supervisord: it serves that user only, not uid {caller}; \
             use your own daemon, or the site's system-wide one"
        ))
    }
}

/// What every listener's connections share: the way to the loop, the limits, the read
/// connections, and one count of open connections per uid, so that a user's share is the
/// same whichever way (Unix socket or network) they come.
pub struct Shared {
    pub(super) to_loop: mpsc::Sender<Control>,
    pub(super) limits: LimitsConfig,
    pub(super) readers: Arc<Readers>,
    pub(super) counts: Counts,
    /// Cluster mode's roles, for `cluster` (`None`: a single node).
    pub(super) cluster: Option<super::cluster::Activity>,
    /// The daemon's own uid: a per-user daemon (not 0) serves it alone (`owner_only`).
    pub(super) daemon_uid: u32,
    /// The config in force, for the reads that show it (`rules`); replaced on reload.
    pub(super) config: std::sync::RwLock<Arc<crate::config::Config>>,
}

impl Shared {
    /// The config in force (a reload replaces it: [`Shared::set_config`]).
    pub fn config_in_force(&self) -> Arc<crate::config::Config> {
        self.config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The config a reload put in force, for the reads that show it.
    pub fn set_config(&self, config: &crate::config::Config) {
        *self
            .config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(config.clone());
    }

    pub fn new(
        to_loop: mpsc::Sender<Control>,
        limits: LimitsConfig,
        db_path: PathBuf,
        cluster: Option<super::cluster::Activity>,
        config: &crate::config::Config,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            to_loop,
            limits,
            readers: Arc::new(Readers::new(db_path)),
            counts: Arc::default(),
            cluster,
            daemon_uid: nix::unistd::geteuid().as_raw(),
            config: std::sync::RwLock::new(Arc::new(config.clone())),
        })
    }
}

/// Accepts connections until the loop goes away.
pub async fn serve(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                warn!("control socket accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if shared.to_loop.is_closed() {
            return;
        }
        let Ok(uid) = stream.peer_cred().map(|c| c.uid()) else {
            continue;
        };
        if let Err(why) = owner_only(shared.daemon_uid, uid) {
            warn!(uid, "control socket request refused: {why}");
            let (_, mut write) = stream.into_split();
            tokio::spawn(async move {
                let _ = write_answer(&mut write, &Response::error(ErrorKind::Forbidden, why)).await;
            });
            continue;
        }
        let slot = take_slot(&shared.counts, uid, shared.limits.connections_per_user);
        let shared = shared.clone();
        let span = tracing::debug_span!("connection", uid);
        tokio::spawn(
            async move {
                let result = match slot {
                    Ok(slot) => connection(stream, uid, &shared, slot).await,
                    Err(why) => {
                        debug!("connection refused: {why}");
                        let (_, mut write) = stream.into_split();
                        write_answer(&mut write, &Response::error(ErrorKind::Unavailable, why))
                            .await
                    }
                };
                if let Err(e) = result {
                    debug!("control connection ended with an error: {e}");
                }
            }
            .instrument(span),
        );
    }
}

/// A response as the line that goes back.
fn line_of(response: &Response) -> Vec<u8> {
    let mut out = serde_json::to_vec(response).expect("responses serialize");
    out.push(b'\n');
    out
}

pub(super) async fn write_answer<W: AsyncWrite + Unpin>(
    write: &mut W,
    response: &Response,
) -> std::io::Result<()> {
    write_line(write, line_of(response)).await
}

/// Writes an answer; a client that does not take it within `WRITE_TIMEOUT` is dropped.
pub(super) async fn write_line<W: AsyncWrite + Unpin>(
    write: &mut W,
    out: Vec<u8>,
) -> std::io::Result<()> {
    tokio::time::timeout(WRITE_TIMEOUT, async {
        write.write_all(&out).await?;
        write.shutdown().await
    })
    .await
    .map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client did not read its answer",
        )
    })?
}

/// The longest a streamed answer may take to send, however slowly its client reads.
const STREAM_DEADLINE: Duration = Duration::from_secs(120);

/// Bytes of a streamed answer handed from the blocking thread to the socket at a time.
const STREAM_CHUNK: usize = 64 << 10;

/// A `std::io::Write` on a blocking thread whose bytes go, in chunks, to an async task
/// that writes them to the socket; a few chunks in flight at most, so a slow client holds
/// back the producer instead of filling the daemon's memory.
struct ChunkWriter {
    to_socket: mpsc::Sender<Vec<u8>>,
    buf: Vec<u8>,
    /// Whether a chunk has gone to the client (after which the answer cannot turn into
    /// an error any more).
    sent: bool,
}

impl ChunkWriter {
    fn sent_any(&self) -> bool {
        self.sent
    }
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= STREAM_CHUNK {
            self.flush()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(STREAM_CHUNK));
        self.sent = true;
        self.to_socket.blocking_send(chunk).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
        })
    }
}

/// A list answer (`status` of every chain, `pending`) written to the client as it is read
/// from the store: however many chains, and however slowly the client reads, the daemon
/// holds a few chunks of the answer (and the one element being written) at a time.
async fn stream_list<W: AsyncWrite + Unpin>(
    write: &mut W,
    readers: Arc<Readers>,
    uid: u32,
    write_all: reads::ListWriter,
) -> std::io::Result<()> {
    let (to_socket, mut chunks) = mpsc::channel::<Vec<u8>>(4);
    let producer = tokio::task::spawn_blocking(move || {
        let mut out = ChunkWriter {
            to_socket,
            buf: Vec::with_capacity(STREAM_CHUNK),
            sent: false,
        };
        let written = readers.with(|store| write_all(store, uid, &mut out));
        let written = match written {
            Ok(w) => w,
            Err(e) => Err(reads::status::StreamError::Store(e)),
        };
        match written {
            Ok(()) => Ok(()),
            // Nothing reached the client yet: the answer is still an error.
            Err(reads::status::StreamError::Store(e)) if !out.sent_any() => {
                out.buf.clear();
                let line = line_of(&Response::error(ErrorKind::Internal, e.to_string()));
                std::io::Write::write_all(&mut out, &line)
                    .and_then(|()| std::io::Write::flush(&mut out))
            }
            Err(e) => Err(std::io::Error::other(e.to_string())),
        }
    });
    // However slowly the client reads, the answer's thread and connection are given
    // back after STREAM_DEADLINE (the whole list takes well under a second to send).
    let deadline = tokio::time::Instant::now() + STREAM_DEADLINE;
    let slow = || {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client did not read its answer",
        )
    };
    loop {
        let next = tokio::time::timeout_at(deadline, chunks.recv())
            .await
            .map_err(|_| slow())?;
        let Some(chunk) = next else { break };
        tokio::time::timeout_at(
            deadline.min(tokio::time::Instant::now() + WRITE_TIMEOUT),
            write.write_all(&chunk),
        )
        .await
        .map_err(|_| slow())??;
    }
    let produced = producer
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    match produced {
        Ok(()) => write.shutdown().await,
        // Cut short: the client sees an answer it cannot read, never a partial list
        // taken for the whole.
        Err(e) => {
            warn!("a list answer was cut short: {e}");
            Err(e)
        }
    }
}

/// The longest a whole request may take to arrive, however big.
const MAX_REQUEST_TIME: Duration = Duration::from_secs(60);

/// Each MiB of request that has arrived gives the rest of it this much more time: a
/// request must flow at 1 MiB/s at least, which any local client does many times over.
const TIME_PER_MIB: Duration = Duration::from_secs(1);

/// Reads one request line. Its first byte must come within `within`; from then on the
/// line has `within` plus `TIME_PER_MIB` for each MiB that has arrived (never more than
/// `MAX_REQUEST_TIME`): a client that trickles or stops holds its slot only briefly, a
/// big script that flows has the time it needs.
pub(super) async fn read_request<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    within: Duration,
) -> std::io::Result<()> {
    let mut start = tokio::time::Instant::now();
    let mut first = true;
    loop {
        let allowed =
            (within + TIME_PER_MIB * (line.len() >> 20) as u32).min(MAX_REQUEST_TIME.max(within));
        let buf = match tokio::time::timeout_at(start + allowed, reader.fill_buf()).await {
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no complete request in time",
                ))
            }
            Ok(b) => b?,
        };
        if buf.is_empty() {
            return Ok(());
        }
        if first {
            start = tokio::time::Instant::now();
            first = false;
        }
        let (used, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..used]);
        reader.consume(used);
        if done {
            return Ok(());
        }
    }
}

/// Requests up to this size are parsed on the thread that read them.
const PARSE_IN_PLACE_BYTES: usize = 16 << 10;

async fn connection(
    stream: UnixStream,
    uid: u32,
    shared: &Shared,
    _slot: Slot,
) -> std::io::Result<()> {
    let max = shared.limits.max_request_bytes();
    let (read, mut write) = stream.into_split();
    let mut line = Vec::new();
    let mut reader = BufReader::new(read.take(max + 1));
    let got = read_request(&mut reader, &mut line, shared.limits.request_timeout.0).await;
    // Over the local socket the admin group gives its rights (`access::Caller::find`).
    answer(got, line, uid, true, shared, &mut write).await
}

/// Answers one request line that `read_request` read (`got` says how that went) for the
/// caller `uid`, whichever way it came: this is the one path from a read line to its
/// answer, for the Unix socket and for an authenticated network connection alike.
/// `group_counts`: membership of `[learn] admin_group` gives its rights to this caller
/// (the local socket, a `[server] root_nodes` origin), as root's are given.
pub(super) async fn answer<W: AsyncWrite + Unpin>(
    got: std::io::Result<()>,
    line: Vec<u8>,
    uid: u32,
    group_counts: bool,
    shared: &Shared,
    write: &mut W,
) -> std::io::Result<()> {
    let limits = &shared.limits;
    let max = limits.max_request_bytes();
    let readers = shared.readers.clone();
    let to_loop = &shared.to_loop;
    let response = match got {
        Err(why) if why.kind() == std::io::ErrorKind::TimedOut => Response::error(
            ErrorKind::Usage,
            format!(
                "{why} (limits.request_timeout = {:?})",
                limits.request_timeout.0
            ),
        ),
        Err(e) => return Err(e),
        Ok(()) if line.len() as u64 > max => Response::error(
            ErrorKind::Usage,
            format!("request larger than {max} bytes (limits.max_script_size sets it)"),
        ),
        // Parsing a big request (a script) is work for a blocking thread, not for the
        // threads that accept and read everyone's requests; a small one (microseconds) is
        // parsed in place, sparing two thread hops on every submit.
        Ok(()) => {
            let parsed = if line.len() <= PARSE_IN_PLACE_BYTES {
                serde_json::from_slice::<Request>(&line)
            } else {
                tokio::task::spawn_blocking(move || serde_json::from_slice::<Request>(&line))
                    .await
                    .map_err(|e| std::io::Error::other(e.to_string()))?
            };
            match parsed {
                Err(e) => Response::error(ErrorKind::Usage, format!("malformed request: {e}")),
                Ok(request) => {
                    // The caller's groups, when the answer depends on them: looked up here,
                    // on a blocking thread within a timeout, never on the loop.
                    let asks = request.asks_rule_admin();
                    let caller = crate::daemon::access::Caller::find(
                        uid,
                        &shared.config_in_force().learn,
                        asks,
                        group_counts,
                    )
                    .await;
                    match requests::route(request) {
                        Route::Read(Read::List { stream, .. }) => {
                            return stream_list(write, readers, uid, stream).await;
                        }
                        // Nodes and times only: anyone may read it, a standby answers it too.
                        Route::Read(Read::Node(answer)) => answer(shared.cluster.as_ref(), uid),
                        Route::Read(Read::WithConfig(answer)) => {
                            let config = shared.config_in_force();
                            let out = tokio::task::spawn_blocking(move || {
                                line_of(
                                    &readers
                                        .with(|store| answer(store, &config, &caller))
                                        .unwrap_or_else(|e| {
                                            Response::error(ErrorKind::Internal, e.to_string())
                                        }),
                                )
                            })
                            .await
                            .unwrap_or_else(|e| {
                                line_of(&Response::error(ErrorKind::Internal, e.to_string()))
                            });
                            return write_line(write, out).await;
                        }
                        Route::Read(Read::Store(answer)) => {
                            // The query and the JSON of a big answer are work for a blocking
                            // thread, not for the threads that accept and read everyone's
                            // requests.
                            let out = tokio::task::spawn_blocking(move || {
                                line_of(&readers.with(|store| answer(store, uid)).unwrap_or_else(
                                    |e| Response::error(ErrorKind::Internal, e.to_string()),
                                ))
                            })
                            .await
                            .unwrap_or_else(|e| {
                                line_of(&Response::error(ErrorKind::Internal, e.to_string()))
                            });
                            return write_line(write, out).await;
                        }
                        Route::Loop { request, lost } => {
                            let (reply, answer) = oneshot::channel();
                            if to_loop
                                .send(Control {
                                    request,
                                    caller,
                                    reply,
                                })
                                .await
                                .is_err()
                            {
                                Response::error(
                                    ErrorKind::Unavailable,
                                    "the daemon is shutting down",
                                )
                            } else {
                                answer.await.unwrap_or_else(|_| {
                                    Response::error(ErrorKind::Unavailable, lost)
                                })
                            }
                        }
                    }
                }
            }
        }
    };
    write_answer(write, &response).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_per_user_daemon_serves_its_own_uid_only_and_root_serves_everyone() {
        assert!(owner_only(0, 0).is_ok());
        assert!(owner_only(0, 1000).is_ok());
        assert!(owner_only(1000, 1000).is_ok());
        let e = owner_only(1000, 1001).unwrap_err();
        assert!(
            e.contains("uid 1000's own slurm-supervisord") && e.contains("not uid 1001"),
            "{e}"
        );
        assert!(
            owner_only(1000, 0).is_err(),
            "root is not the per-user daemon's user"
        );
    }
}
