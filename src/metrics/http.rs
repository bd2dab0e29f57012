//! The HTTP listener for scrapes: HTTP/1.1 (hyper), `GET /metrics` and nothing else.
//!
//! The endpoint has no authentication, so it gives an anonymous client little: a few
//! connections at once (more are closed unanswered), one request per connection, headers
//! of at most `MAX_HEADER_BYTES` that must arrive within `HEADER_TIMEOUT`, and the whole
//! exchange within `CONNECTION_TIMEOUT`. A request body is never read.
//!
//! The connections are shared out by who holds them, so that no one can take them all
//! and blind the endpoint (a tripped breaker included) for the scraper: at most
//! `MAX_PER_PEER` each. A connection from this host is counted against the local user
//! that opened it (its uid, from the kernel's table of TCP sockets,
//! `/proc/net/tcp` and `tcp6`), since every local user comes from the same address; one
//! from elsewhere against its address.

use super::Scraper;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

/// Connections served at once, everyone's together.
const MAX_CONNECTIONS: usize = 64;

/// Connections one peer (a local user, or a remote address) may hold at once: a scraper
/// needs one, a person with curl another.
const MAX_PER_PEER: usize = 4;

/// Connections whose peer is being looked up at once; more are closed unanswered.
const MAX_LOOKUPS: usize = 128;

/// How long finding a local peer's uid in the kernel's TCP tables may take.
const PEER_LOOKUP_TIMEOUT: Duration = Duration::from_secs(1);

/// The request line and headers together, in bytes (Prometheus sends about 300).
const MAX_HEADER_BYTES: usize = 8 << 10;

/// Headers a request may have.
const MAX_HEADERS: usize = 32;

/// The headers must have arrived within this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection is closed after this, answered or not: a client that does not take its
/// answer holds its place no longer.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// What the answer says it is: OpenMetrics text, which Prometheus asks for first.
const CONTENT_TYPE_OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Who holds a connection: the local user that opened it, or the remote address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    LocalUser(u32),
    Remote(IpAddr),
}

/// Connections held, by peer.
#[derive(Default)]
struct Held(Mutex<HashMap<Peer, usize>>);

/// One peer's place, given back when the connection ends.
struct PeerSlot {
    held: Arc<Held>,
    peer: Peer,
}

impl Held {
    fn take(self: &Arc<Self>, peer: Peer) -> Option<PeerSlot> {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(peer).or_insert(0);
        if *n >= MAX_PER_PEER {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            held: self.clone(),
            peer,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut m = self.held.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.peer);
            }
        }
    }
}

/// Who opened the connection from `peer` to `local`: the uid of the socket at `peer`
/// whose other end is `local`, if it is on this host, else the remote address.
fn peer_of(peer: SocketAddr, local: SocketAddr) -> Peer {
    let peer = canonical(peer);
    let local = canonical(local);
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(table) {
            if let Some(uid) = socket_owner(&text, peer, local) {
                return Peer::LocalUser(uid);
            }
        }
    }
    Peer::Remote(peer.ip())
}

/// An IPv4 address that came as IPv6 (`::ffff:a.b.c.d`) as the IPv4 one.
fn canonical(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// In a `/proc/net/tcp` (or `tcp6`) table, the uid of the socket whose local address is
/// `local` and remote address `remote`.
pub fn socket_owner(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (l, r, uid) = (f.get(1)?, f.get(2)?, f.get(7)?);
        (proc_addr(l)? == local && proc_addr(r)? == remote)
            .then(|| uid.parse().ok())
            .flatten()
    })
}

/// `0100007F:1F90`: the address as the kernel prints it (the in-memory bytes read as one
/// native-endian u32 in hex, four of them for IPv6) and the port in hex.
fn proc_addr(s: &str) -> Option<SocketAddr> {
    let (addr, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |h: &str| u32::from_str_radix(h, 16).ok().map(u32::to_ne_bytes);
    let ip = match addr.len() {
        8 => IpAddr::V4(std::net::Ipv4Addr::from(word(addr)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(&addr[i * 8..i * 8 + 8])?);
            }
            IpAddr::V6(std::net::Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(canonical(SocketAddr::new(ip, port)))
}

/// Serves scrapes until the task is dropped.
pub async fn serve(listener: TcpListener, scraper: Arc<Scraper>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let lookups = Arc::new(Semaphore::new(MAX_LOOKUPS));
    let held = Arc::new(Held::default());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!("metrics listener accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Who it is, found beside the accept loop (which never waits for it): a few
        // lookups at once, each off the runtime's threads (a user can make the kernel's
        // tables long) and for at most `PEER_LOOKUP_TIMEOUT`, past which the peer counts
        // by its address. Only then are its place and a connection slot taken.
        let Ok(looking) = lookups.clone().try_acquire_owned() else {
            debug!(%peer, "metrics connection refused: {MAX_LOOKUPS} are being looked up");
            continue;
        };
        let (scraper, slots, held) = (scraper.clone(), slots.clone(), held.clone());
        tokio::spawn(async move {
            let who = match stream.local_addr() {
                Ok(local) => {
                    let lookup = tokio::task::spawn_blocking(move || peer_of(peer, local));
                    match tokio::time::timeout(PEER_LOOKUP_TIMEOUT, lookup).await {
                        Ok(Ok(who)) => who,
                        _ => Peer::Remote(peer.ip()),
                    }
                }
                Err(_) => Peer::Remote(peer.ip()),
            };
            drop(looking);
            let Some(_place) = held.take(who) else {
                debug!(%peer, ?who, "metrics connection refused: that peer holds {MAX_PER_PEER} already");
                return;
            };
            let Ok(_slot) = slots.try_acquire_owned() else {
                debug!(%peer, "metrics connection refused: {MAX_CONNECTIONS} are being served");
                return;
            };
            let service = hyper::service::service_fn(move |req| answer(req, scraper.clone()));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEADER_BYTES)
                .max_headers(MAX_HEADERS)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_TIMEOUT, conn).await {
                Err(_) => debug!(%peer, "metrics connection timed out"),
                Ok(Err(e)) => debug!(%peer, "metrics connection ended with an error: {e}"),
                Ok(Ok(())) => {}
            }
        });
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{text}\n"))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn answer(
    req: Request<Incoming>,
    scraper: Arc<Scraper>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    if req.uri().path() != "/metrics" {
        return Ok(plain(
            StatusCode::NOT_FOUND,
            "not found: metrics are at /metrics",
        ));
    }
    if req.method() != Method::GET {
        let mut r = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed: use GET",
        );
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET"));
        return Ok(r);
    }
    let scraped = tokio::task::spawn_blocking(move || scraper.scrape()).await;
    Ok(match scraped {
        Ok(Ok(text)) => {
            let mut r = Response::new(Full::new(Bytes::from(text)));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(CONTENT_TYPE_OPENMETRICS),
            );
            r
        }
        Ok(Err(e)) => {
            warn!("metrics scrape failed: {e}");
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot read the store: {e}"),
            )
        }
        Err(e) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the scrape did not finish: {e}"),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection made here is found in the kernel's table as this process's user's.
    #[test]
    fn a_local_connection_is_told_by_its_users_uid() {
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = std::net::TcpListener::bind(bind) else {
                continue; // no IPv6 here
            };
            let server = listener.local_addr().unwrap();
            let client = std::net::TcpStream::connect(server).unwrap();
            let (accepted, peer) = listener.accept().unwrap();
            assert_eq!(peer, client.local_addr().unwrap());
            let me = nix::unistd::getuid().as_raw();
            assert_eq!(
                peer_of(peer, accepted.local_addr().unwrap()),
                Peer::LocalUser(me),
                "{bind}"
            );
        }
        // An address no socket of this host has is a remote peer.
        let far: SocketAddr = "192.0.2.7:40000".parse().unwrap();
        let here: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(peer_of(far, here), Peer::Remote(far.ip()));
    }

    #[test]
    fn proc_net_tcp_addresses_are_read() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
             0: 0100007F:D431 0100007F:238C 01 00000000:00000000 00:00000000 00000000  1002        0 1 1 0 20 4 30 10 -1\n";
        let local: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        let remote: SocketAddr = "127.0.0.1:9100".parse().unwrap();
        if cfg!(target_endian = "little") {
            assert_eq!(socket_owner(table, local, remote), Some(1002));
            assert_eq!(socket_owner(table, remote, local), None);
        }
        assert_eq!(proc_addr("nonsense"), None);
        assert_eq!(proc_addr("0100007F:XYZ"), None);
    }

    #[test]
    fn each_peer_holds_at_most_its_share() {
        let held = Arc::new(Held::default());
        let bob = Peer::LocalUser(1002);
        let mine: Vec<PeerSlot> = (0..MAX_PER_PEER).map(|_| held.take(bob).unwrap()).collect();
        assert!(held.take(bob).is_none());
        assert!(held.take(Peer::LocalUser(0)).is_some());
        drop(mine);
        assert!(held.take(bob).is_some());
    }
}
