//! Talking to the daemon over its Unix socket, or over the network to the cluster's
//! active daemon (`net`): one request, one answer. Both clients use it, `supervisorctl`
//! (`ctl`) and its MCP server (`mcp`), which `ctl` starts.

mod net;

use crate::config::ClientConfig;
use crate::protocol::{Request, Response};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// Where requests go.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// The daemon's Unix socket on this node.
    Unix(PathBuf),
    /// The cluster's daemons over TCP, tried in order, each request with a MUNGE
    /// credential.
    Network(NetTarget),
}

/// The daemons a network client may talk to.
#[derive(Debug, Clone)]
pub struct NetTarget {
    /// `host:port`, in the order they are tried; a standby's redirect is followed only to
    /// one of these.
    pub servers: Vec<String>,
    /// munged's socket, when not libmunge's default.
    pub munge_socket: Option<PathBuf>,
    /// The CA certificates (PEM) to check servers against; `Some`: TLS to every server.
    pub tls_ca: Option<PathBuf>,
}

impl Endpoint {
    /// The network when the config lists servers, else the Unix socket.
    pub fn of(config: &ClientConfig) -> Endpoint {
        if config.net.servers.is_empty() {
            Endpoint::Unix(config.socket.clone())
        } else {
            Endpoint::Network(NetTarget {
                servers: config.net.servers.clone(),
                munge_socket: config.net.munge_socket.clone(),
                tls_ca: config.net.tls_ca.clone(),
            })
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "{}", p.display()),
            Endpoint::Network(t) => write!(f, "{}", t.servers.join(", ")),
        }
    }
}

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
    /// No daemon of the list took the request; each one's reason.
    #[error("no active slurm-supervisord took the request: {0}")]
    Network(String),
    #[error("cannot make a MUNGE credential: {0}")]
    Munge(#[from] crate::plumbing::munge::MungeError),
    #[error("[client] tls_ca: {0}")]
    Tls(#[from] crate::plumbing::tls::TlsError),
}

impl ClientError {
    /// The request went out and its answer did not come back (the connection broke or
    /// closed first): the request may or may not have been acted on.
    pub fn answer_lost(&self) -> bool {
        matches!(self, ClientError::Io(_)) && !self.timed_out()
    }

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
type Answer = (Box<dyn BufRead + Send>, std::io::Result<()>);

fn send(endpoint: &Endpoint, request: &Request) -> Result<Answer, ClientError> {
    // The request is ready before the connection is made: the daemon gives a connection
    // only a few seconds to deliver it.
    let mut line = serde_json::to_vec(request)?;
    line.push(b'\n');
    match endpoint {
        Endpoint::Unix(socket) => {
            let (r, sent) = send_unix(socket, &line)?;
            Ok((Box::new(r), sent))
        }
        Endpoint::Network(target) => net::send(target, &line, request.is_read(), ANSWER_TIMEOUT),
    }
}

fn send_unix(
    socket: &std::path::Path,
    line: &[u8],
) -> Result<(BufReader<UnixStream>, std::io::Result<()>), ClientError> {
    let mut stream = UnixStream::connect(socket).map_err(|source| ClientError::Connect {
        path: socket.display().to_string(),
        source,
    })?;
    stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    let sent = stream
        .write_all(line)
        .and_then(|()| stream.shutdown(std::net::Shutdown::Write));
    Ok((BufReader::new(stream), sent))
}

/// How many times a network request whose answer was lost is sent again: a submit with a
/// request id (the daemon answers a retry with the first one's job) and the reads.
const NETWORK_RETRIES: usize = 2;

/// Sends one request and returns the daemon's response.
pub fn call(endpoint: &Endpoint, request: &Request) -> Result<Response, ClientError> {
    let retries = match (endpoint, request) {
        (Endpoint::Network(_), Request::Submit(s)) if s.request_id.is_some() => NETWORK_RETRIES,
        (Endpoint::Network(_), r) if r.is_read() => NETWORK_RETRIES,
        _ => 0,
    };
    let mut tries = 0;
    loop {
        match call_once(endpoint, request) {
            Err(e) if tries < retries && e.answer_lost() => tries += 1,
            other => return other,
        }
    }
}

fn call_once(endpoint: &Endpoint, request: &Request) -> Result<Response, ClientError> {
    let (mut reader, sent) = send(endpoint, request)?;
    let mut answer = String::new();
    let read = reader.read_line(&mut answer);
    if answer.is_empty() {
        sent?;
        read?;
        return Err(ClientError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the daemon closed the connection without answering",
        )));
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

/// How much of a streamed answer is read at a time.
const STREAM_READ: usize = 1 << 16;

/// The bytes every successful answer starts with.
const OK_PREFIX: &[u8] = b"{\"ok\":";

/// Sends one request and writes the value of a successful answer to `out` as it arrives,
/// as the daemon wrote it (compact JSON on one line): a list of 100,000 chains goes
/// through without being held or parsed again (re-printing it indented took longer than
/// the daemon's whole answer, docs/benchmarks.md). An error answer is returned whole. An
/// answer cut short is an error, after what came of it was written.
pub fn call_streamed(
    endpoint: &Endpoint,
    request: &Request,
    out: &mut dyn Write,
) -> Result<Streamed, ClientError> {
    let (mut reader, sent) = send(endpoint, request)?;
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
    // The value goes to `out` as it arrives; its end is found by its brackets (outside
    // strings), and what follows it must be the answer's closing brace alone.
    let mut frame = Frame::default();
    let mut tail = Vec::new();
    let mut buf = vec![0u8; STREAM_READ];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        let chunk = &buf[..n];
        if frame.done {
            tail.extend_from_slice(chunk);
            continue;
        }
        match frame.end_in(chunk) {
            Some(end) => {
                out.write_all(&chunk[..end])?;
                tail.extend_from_slice(&chunk[end..]);
            }
            None => out.write_all(chunk)?,
        }
        if tail.len() > 64 {
            break;
        }
    }
    if !frame.done || tail.trim_ascii() != b"}" {
        return Err(ClientError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the answer was cut short",
        )));
    }
    Ok(Streamed::Written)
}

/// Where a streamed JSON value (an object or an array) ends: its brackets counted outside
/// strings, one chunk at a time.
#[derive(Default)]
struct Frame {
    depth: u64,
    in_string: bool,
    escaped: bool,
    done: bool,
}

impl Frame {
    /// The index just past the value's last byte, if it ends in `chunk`.
    fn end_in(&mut self, chunk: &[u8]) -> Option<usize> {
        for (i, &b) in chunk.iter().enumerate() {
            if self.in_string {
                match b {
                    _ if self.escaped => self.escaped = false,
                    b'\\' => self.escaped = true,
                    b'"' => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        self.done = true;
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end of a value is found whatever its strings hold and however it is cut into
    /// chunks.
    #[test]
    fn a_values_end_is_found_outside_its_strings_across_chunks() {
        let value = br#"{"chains":[{"name":"a}b]\"{[","x":[]},{"y":{"z":"\\"}}]}"#;
        for cut in 0..=value.len() {
            let mut f = Frame::default();
            let (a, b) = value.split_at(cut);
            let end = match f.end_in(a) {
                Some(e) => Some(e),
                None => f.end_in(b).map(|e| cut + e),
            };
            assert_eq!(end, Some(value.len()), "cut at {cut}");
        }
        let mut f = Frame::default();
        assert_eq!(f.end_in(br#"{"a":[1,2],"b":"}"#), None);
    }

    /// A streamed answer is written as it came; one that stops after a whole row (its
    /// last byte a closing brace) is still cut short.
    #[test]
    fn a_streamed_answer_is_written_whole_or_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let answers: Vec<&[u8]> = vec![
            b"{\"ok\":{\"chains\":[{\"a\":\"}\"},{\"b\":[]}]}}\n",
            b"{\"ok\":{\"chains\":[{\"a\":\"}\"},{\"b\":[]}",
            b"{\"ok\":{\"chains\":[{\"a\":\"}\"}]}",
        ];
        let serve = std::thread::spawn(move || {
            for a in answers {
                let (mut s, _) = listener.accept().unwrap();
                let mut line = Vec::new();
                BufReader::new(&mut s).read_until(b'\n', &mut line).unwrap();
                s.write_all(a).unwrap();
            }
        });
        let request = Request::Status { id: None };
        let socket = Endpoint::Unix(socket);
        let mut out = Vec::new();
        assert!(matches!(
            call_streamed(&socket, &request, &mut out),
            Ok(Streamed::Written)
        ));
        assert_eq!(out, b"{\"chains\":[{\"a\":\"}\"},{\"b\":[]}]}");
        for _ in 0..2 {
            let mut out = Vec::new();
            assert!(call_streamed(&socket, &request, &mut out).is_err());
        }
        serve.join().unwrap();
    }
}
