//! Talking to the daemon over its Unix socket.

use crate::protocol::{Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach slurm-supervisord at {path}: {source}; is the daemon running with the same --config?")]
    Connect {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("lost the connection to slurm-supervisord: {0}")]
    Io(#[from] std::io::Error),
    #[error("slurm-supervisord sent an answer that cannot be read: {0}")]
    Garbage(#[from] serde_json::Error),
}

/// How long to wait for an answer: a submit waits for sbatch, which may be slow.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// Sends one request and returns the daemon's response.
pub fn call(socket: &Path, request: &Request) -> Result<Response, ClientError> {
    // The request is ready before the connection is made: the daemon gives a connection
    // only a few seconds to deliver it.
    let mut line = serde_json::to_vec(request)?;
    line.push(b'\n');
    let mut stream = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
        path: socket.display().to_string(),
        source,
    })?;
    stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    // The daemon may answer before it has read everything (a request over its size limit)
    // and close: its answer is still there to read, so a failed write is not the end.
    let sent = stream
        .write_all(&line)
        .and_then(|()| stream.shutdown(std::net::Shutdown::Write));
    let mut answer = String::new();
    let read = BufReader::new(stream).read_line(&mut answer);
    if answer.is_empty() {
        sent?;
        read?;
    }
    Ok(serde_json::from_str(&answer)?)
}
