//! The control socket: one JSON request per connection, one JSON line back. Each
//! request is handed to the daemon's loop with the caller's uid (from the socket's peer
//! credentials, never from the request) and answered when the loop has handled it.

use crate::protocol::{ErrorKind, Request, Response};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

/// The largest request accepted; a script snapshot travels inside a submit request.
pub const MAX_REQUEST_BYTES: u64 = 32 << 20;

/// A request on its way to the loop.
pub struct Control {
    pub request: Request,
    pub uid: u32,
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

/// At most this many connections are served at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 64;

/// A client must send its request within this time.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Accepts connections until the loop goes away.
pub async fn serve(listener: UnixListener, to_loop: mpsc::Sender<Control>) {
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!("control socket accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let tx = to_loop.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = connection(stream, tx).await {
                debug!("control connection ended with an error: {e}");
            }
        });
    }
}

async fn connection(stream: UnixStream, to_loop: mpsc::Sender<Control>) -> std::io::Result<()> {
    let uid = stream.peer_cred()?.uid();
    let (read, mut write) = stream.into_split();
    let mut line = Vec::new();
    let mut reader = BufReader::new(read.take(MAX_REQUEST_BYTES + 1));
    tokio::time::timeout(READ_TIMEOUT, reader.read_until(b'\n', &mut line))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no request in time"))??;
    let response = if line.len() as u64 > MAX_REQUEST_BYTES {
        Response::error(
            ErrorKind::Usage,
            format!("request larger than {MAX_REQUEST_BYTES} bytes"),
        )
    } else {
        match serde_json::from_slice::<Request>(&line) {
            Err(e) => Response::error(ErrorKind::Usage, format!("malformed request: {e}")),
            Ok(request) => {
                let (reply, answer) = oneshot::channel();
                if to_loop
                    .send(Control {
                        request,
                        uid,
                        reply,
                    })
                    .await
                    .is_err()
                {
                    Response::error(ErrorKind::Unavailable, "the daemon is shutting down")
                } else {
                    answer.await.unwrap_or_else(|_| {
                        Response::error(ErrorKind::Internal, "the daemon dropped the request")
                    })
                }
            }
        }
    };
    let mut out = serde_json::to_vec(&response).expect("responses serialize");
    out.push(b'\n');
    write.write_all(&out).await?;
    write.shutdown().await
}
