//! Talking to the daemon over its Unix socket.

use crate::protocol::{Request, Response};
use std::io::{BufRead, BufReader, Read, Write};
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

impl ClientError {
    /// The daemon is there but did not answer in time (it may still act on the request).
    pub fn timed_out(&self) -> bool {
        matches!(self, ClientError::Io(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
    }
}

/// How long to wait for an answer: a submit waits for sbatch, which may be slow.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// Sends one request; returns the connection to read the answer from, and how sending
/// went. The daemon may answer before it has read everything (a request over its size
/// limit) and close: its answer is still there to read, so a failed write is not the end.
fn send(
    socket: &Path,
    request: &Request,
) -> Result<(BufReader<UnixStream>, std::io::Result<()>), ClientError> {
    // The request is ready before the connection is made: the daemon gives a connection
    // only a few seconds to deliver it.
    let mut line = serde_json::to_vec(request)?;
    line.push(b'\n');
    let mut stream = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
        path: socket.display().to_string(),
        source,
    })?;
    stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    let sent = stream
        .write_all(&line)
        .and_then(|()| stream.shutdown(std::net::Shutdown::Write));
    Ok((BufReader::new(stream), sent))
}

/// Sends one request and returns the daemon's response.
pub fn call(socket: &Path, request: &Request) -> Result<Response, ClientError> {
    let (mut reader, sent) = send(socket, request)?;
    let mut answer = String::new();
    let read = reader.read_line(&mut answer);
    if answer.is_empty() {
        sent?;
        read?;
    }
    Ok(serde_json::from_str(&answer)?)
}

/// What a streamed answer turned out to be.
pub enum Streamed {
    /// The answer's value went to `out`.
    Written,
    /// The daemon answered with an error (or something else): here it is, whole.
    Other(Response),
}

/// The bytes every successful answer starts with.
const OK_PREFIX: &[u8] = b"{\"ok\":";

/// Sends one request and writes the value of a successful answer to `out`, pretty-printed
/// as it arrives: a list of 100,000 chains goes through without being held. An error
/// answer is returned whole. An answer cut short is an error, after what came of it was
/// written.
pub fn call_streamed(
    socket: &Path,
    request: &Request,
    out: &mut dyn Write,
) -> Result<Streamed, ClientError> {
    let (mut reader, sent) = send(socket, request)?;
    let mut head = Vec::with_capacity(OK_PREFIX.len());
    let read = (&mut reader)
        .take(OK_PREFIX.len() as u64)
        .read_to_end(&mut head);
    if head.is_empty() {
        sent?;
        read?;
    }
    if head != OK_PREFIX {
        let mut rest = Vec::new();
        reader.read_until(b'\n', &mut rest)?;
        head.extend(rest);
        return Ok(Streamed::Other(serde_json::from_slice(&head)?));
    }
    {
        let mut de = serde_json::Deserializer::from_reader(&mut reader);
        let mut ser = serde_json::Serializer::pretty(&mut *out);
        serde_transcode::transcode(&mut de, &mut ser)?;
    }
    let mut tail = Vec::new();
    reader.read_to_end(&mut tail)?;
    if tail.trim_ascii() != b"}" {
        return Err(ClientError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the answer was cut short",
        )));
    }
    Ok(Streamed::Written)
}
