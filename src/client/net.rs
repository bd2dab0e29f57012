//! The client's side of the network exchange (`protocol::net`): find the active daemon
//! among the configured servers, make a credential for this request as the calling user,
//! send both.
//!
//! Servers are tried in the configured order. A daemon that does not answer is passed
//! over; a standby's "not active, the active daemon is at X" is followed at once, but only
//! to an X of the list (a daemon cannot send a user's script to an address the site did
//! not name) and only to one not tried yet, so a request visits each server at most once.
//!
//! The client authenticates first (`protocol::net`, step 2): its opening credential,
//! restricted to the hello's uid (root's or this user's own, never a third uid's), names
//! this connection and commits to the request without carrying any of it. Before
//! anything of the request leaves, the daemon proves itself (step 3): its own MUNGE
//! credential, made by root or by this user, for this client's nonce, its hello and the
//! address this client is connected to. A daemon that cannot is passed over with the
//! reason, and it has been sent nothing but the opening: no script, no working folder,
//! no environment, not even which command. A daemon that refuses the opening says why
//! on one line, which is this client's answer (an error only: an unproven peer's "ok" is
//! not taken).

use super::{ClientError, NetTarget};
use crate::domain::request_binding;
use crate::plumbing::munge::Munge;
use crate::protocol::net::{hex, Hello, MAX_HELLO, PROOF_UID_OF_ROOT, VERSION};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long a connection to one server may take before the next is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a server may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// A credential's time to live: it is used within milliseconds of being made; the rest is
/// room for clocks a little out of step between login nodes.
pub const CREDENTIAL_TTL: u32 = 60;

/// What `send` returns: the answer to read, and how sending went.
pub type Sent = (Box<dyn BufRead + Send>, std::io::Result<()>);

/// Sends `line` (a request and its newline) to the active daemon of `target`; returns the
/// connection to read the answer from, and how sending went. A read (`read`) goes to the
/// first standby that answered when no daemon acts (during a takeover, or while the shared
/// database is away): it answers from its replica.
pub fn send(
    target: &NetTarget,
    line: &[u8],
    read: bool,
    answer_timeout: Duration,
) -> Result<Sent, ClientError> {
    let munge = Munge::open(target.munge_socket.as_deref())?;
    let tls = match &target.tls_ca {
        None => None,
        Some(ca) => Some(crate::plumbing::tls::client_config(ca)?),
    };
    let me = nix::unistd::geteuid().as_raw();
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let mut queue: VecDeque<String> = target.servers.iter().cloned().collect();
    let mut tried: Vec<String> = Vec::new();
    let mut reasons: Vec<String> = Vec::new();
    let mut standby = None;
    // A refusal before any proof, answered only if no other server serves this client (a
    // program holding the first server's port keeps no one from the others).
    let mut refused = None;
    while let Some(addr) = queue.pop_front() {
        if tried.contains(&addr) {
            continue;
        }
        tried.push(addr.clone());
        let (mut reader, hello) = match hello_from(&addr, tls.as_ref()) {
            Ok(h) => h,
            Err(e) => {
                reasons.push(format!("{addr}: {e}"));
                continue;
            }
        };
        if hello.hello.version != VERSION {
            reasons.push(format!(
                "{addr}: speaks version {} of the network protocol, this supervisorctl version {VERSION}; \
                 install the same slurm-supervisor release on both nodes",
                hello.hello.version
            ));
            continue;
        }
        let (peer, hello_line, hello) = (hello.peer, hello.line, hello.hello);
        if !hello.active {
            match &hello.active_at {
                Some(next) if target.servers.contains(next) && !tried.contains(next) => {
                    reasons.push(format!("{addr}: not active, sent on to {next}"));
                    queue.push_front(next.clone());
                }
                Some(next) if tried.contains(next) => {
                    reasons.push(format!("{addr}: not active; it names {next}, tried already"))
                }
                Some(next) => reasons.push(format!(
                    "{addr}: not active; it names {next}, which is not in [client] servers, so it is not followed"
                )),
                None => reasons.push(format!("{addr}: not active, and knows no active daemon")),
            }
            if read && standby.is_none() && usable(&hello, me).is_ok() {
                match open(&mut reader, &hello, &hello_line, peer, &munge, me, body)? {
                    Opened::Proven(salt) => standby = Some((reader, salt)),
                    Opened::Refused(answer) => reasons.push(format!(
                        "{addr}: refused this client: {}",
                        String::from_utf8_lossy(&answer).trim()
                    )),
                    Opened::Unproven(why) => reasons.push(unproven(&addr, peer, &why)),
                }
            }
            continue;
        }
        if let Err(why) = usable(&hello, me) {
            reasons.push(format!("{addr}: {why}"));
            continue;
        }
        match open(&mut reader, &hello, &hello_line, peer, &munge, me, body)? {
            Opened::Proven(salt) => return request(reader, &salt, line, answer_timeout),
            // The daemon's refusal, as it would answer a request it refused, unless
            // another server serves this client.
            Opened::Refused(answer) => {
                reasons.push(format!(
                    "{addr}: refused this client: {}",
                    String::from_utf8_lossy(&answer).trim()
                ));
                refused.get_or_insert(answer);
            }
            Opened::Unproven(why) => reasons.push(unproven(&addr, peer, &why)),
        }
    }
    match (standby, refused) {
        (Some((reader, salt)), _) => request(reader, &salt, line, answer_timeout),
        (None, Some(answer)) => Ok((Box::new(std::io::Cursor::new(answer)), Ok(()))),
        (None, None) => Err(ClientError::Network(reasons.join("; "))),
    }
}

/// Whether this client makes an opening credential for a hello: its nonce is well
/// formed, and its uid, to which the credential is restricted, is root's or this user's.
fn usable(hello: &Hello, me: u32) -> Result<request_binding::Nonce, String> {
    // A credential restricted to any uid but root's (a system-wide daemon) or the
    // caller's own (a per-user daemon) would let that uid read it: not made.
    if hello.uid != 0 && hello.uid != me {
        return Err(format!(
            "asks for a credential for uid {}, which is neither root nor you; refused",
            hello.uid
        ));
    }
    hello
        .nonce_bytes()
        .ok_or_else(|| "sent no usable nonce".to_string())
}

/// Why a daemon was passed over for want of a proof, and what to check.
fn unproven(addr: &str, peer: SocketAddr, why: &str) -> String {
    format!(
        "{addr} ({peer}) did not prove it is slurm-supervisord: {why}; nothing of the request was sent to it \
         (only this client's opening credential, which only root or you can decode); \
         check on that node that slurm-supervisord runs and holds the port itself \
         (`systemctl status slurm-supervisord.socket slurm-supervisord`, `ss -ltnp 'sport = :{}'`), \
         and that [client] servers names the daemon's own address (no relay or NAT between)",
        peer.port()
    )
}

/// The most characters of a refusal kept from a peer that did not prove itself.
const MAX_REFUSAL_CHARS: usize = 2000;

/// How an opening went.
enum Opened {
    /// The daemon proved itself; the request goes with this salt.
    Proven(request_binding::Salt),
    /// The daemon refused the opening: its error answer, newline included.
    Refused(Vec<u8>),
    /// What answered did not prove it is the daemon, and why.
    Unproven(String),
}

/// Authenticates to the daemon (`protocol::net` step 2), committing to `body`, and checks
/// its proof (step 3). Root's client asks for the proof first and authenticates only to a
/// daemon that made it ([`crate::protocol::net::PROVE_FIRST`]). `Err` only for this
/// client's own trouble (its munged).
fn open(
    reader: &mut BufReader<Conn>,
    hello: &Hello,
    hello_line: &[u8],
    peer: SocketAddr,
    munge: &Munge,
    me: u32,
    body: &[u8],
) -> Result<Opened, ClientError> {
    let Some(daemon_nonce) = hello.nonce_bytes() else {
        return Ok(Opened::Unproven("its hello has no usable nonce".into()));
    };
    let client_nonce: request_binding::Nonce = rand::random();
    let salt: request_binding::Salt = rand::random();
    let opening = || -> Result<Vec<u8>, ClientError> {
        let payload = request_binding::open(
            &client_nonce,
            &hello.daemon,
            &daemon_nonce,
            hello_line,
            peer,
            &request_binding::commit(&salt, body),
        );
        let cred = munge.encode(&payload, Some(hello.uid), Some(CREDENTIAL_TTL))?;
        let mut line = Vec::with_capacity(cred.len() + 1);
        line.extend_from_slice(cred.as_bytes());
        line.push(b'\n');
        Ok(line)
    };
    // Root's credential, restricted to root, is one Slurm's root daemons would take as
    // root's where they do not check its payload: never handed to whatever holds the
    // port before it proved it is the daemon.
    let first = if me == 0 {
        format!(
            "{}{}\n",
            crate::protocol::net::PROVE_FIRST,
            hex(&client_nonce)
        )
        .into_bytes()
    } else {
        opening()?
    };
    let conn = reader.get_mut();
    if let Err(e) = conn.write_all(&first).and_then(|()| conn.flush()) {
        return Ok(Opened::Unproven(format!("the connection broke ({e})")));
    }
    let mut line = Vec::new();
    if let Err(e) = reader
        .take(crate::plumbing::munge::MAX_CREDENTIAL as u64 + 2)
        .read_until(b'\n', &mut line)
    {
        return Ok(Opened::Unproven(format!("no proof came ({e})")));
    }
    let Some(proof) = line.strip_suffix(b"\n") else {
        return Ok(Opened::Unproven(if line.is_empty() {
            "it closed the connection instead of proving itself".into()
        } else {
            "what it sent is not a proof".into()
        }));
    };
    if let Ok(crate::protocol::Response::Error(e)) =
        serde_json::from_slice::<crate::protocol::Response>(proof)
    {
        // Nothing proved who sent it: a daemon's refusal is a `forbidden` error and its
        // message, and only that is kept (no exit code, no stderr, no control
        // character): whatever holds the port can make it say anything else.
        if e.kind != crate::protocol::ErrorKind::Forbidden {
            return Ok(Opened::Unproven(
                "it answered with an error a daemon does not give before proving itself".into(),
            ));
        }
        let message: String = e
            .message
            .chars()
            .filter(|c| !c.is_control())
            .take(MAX_REFUSAL_CHARS)
            .collect();
        let mut answer = serde_json::to_vec(&crate::protocol::Response::error(
            crate::protocol::ErrorKind::Forbidden,
            message,
        ))
        .expect("an answer serializes");
        answer.push(b'\n');
        return Ok(Opened::Refused(answer));
    }
    // The proof is restricted to this uid; root has it made for `nobody` (a daemon makes
    // none that root could decode) and decodes it as `nobody`.
    let decoded = if me == 0 {
        decode_as(PROOF_UID_OF_ROOT, munge, proof)?
    } else {
        munge.decode(proof)
    };
    let d = match decoded {
        Ok(d) => d,
        Err(
            e @ (crate::plumbing::munge::MungeError::Socket { .. }
            | crate::plumbing::munge::MungeError::Library { .. }
            | crate::plumbing::munge::MungeError::NoContext),
        ) => return Err(ClientError::Munge(e)),
        Err(e) => {
            return Ok(Opened::Unproven(format!(
                "its proof is not a credential this node's munged accepts ({e})"
            )))
        }
    };
    if d.uid != 0 && d.uid != me {
        return Ok(Opened::Unproven(format!(
            "its proof was made by uid {}, which is neither root (the system-wide daemon) nor you (your own daemon)",
            d.uid
        )));
    }
    if d.uid != hello.uid {
        return Ok(Opened::Unproven(format!(
            "its hello names uid {}, its proof was made by uid {}",
            hello.uid, d.uid
        )));
    }
    if let Err(m) = request_binding::check_proof(
        &d.payload,
        &client_nonce,
        &hello.daemon,
        &daemon_nonce,
        hello_line,
        peer,
    ) {
        return Ok(Opened::Unproven(m.to_string()));
    }
    if me == 0 {
        // Proven: now root authenticates.
        let line = opening()?;
        let conn = reader.get_mut();
        if let Err(e) = conn.write_all(&line).and_then(|()| conn.flush()) {
            return Ok(Opened::Unproven(format!("the connection broke ({e})")));
        }
    }
    Ok(Opened::Proven(salt))
}

/// Decodes `cred` as `uid` (root's client decodes its proof as `nobody`): Debian's
/// `unmunge`, run as that uid (with its primary group), against `munge`'s socket.
/// `Err` is this client's own trouble (no `unmunge`); a credential munged refuses is
/// `Ok(Err(_))`. The origin is not read (a proof's is not checked).
fn decode_as(
    uid: u32,
    munge: &Munge,
    cred: &[u8],
) -> Result<Result<crate::plumbing::munge::Decoded, crate::plumbing::munge::MungeError>, ClientError>
{
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let program = ["/usr/bin/unmunge", "/usr/local/bin/unmunge"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .ok_or_else(|| {
            ClientError::Network(
                "root's supervisorctl checks the daemon's proof with unmunge as nobody: install Debian's munge package".into(),
            )
        })?;
    let mut cmd = Command::new(program);
    cmd.uid(uid)
        .gid(uid)
        .arg("--numeric")
        .arg("--keys=UID,GID")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(socket) = munge.socket() {
        cmd.arg(format!("--socket={}", socket.to_string_lossy()));
    }
    let mut child = cmd.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(cred);
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
        // unmunge exits with MUNGE's error number.
        return Ok(Err(crate::plumbing::munge::MungeError::of_code(
            out.status.code().unwrap_or(-1),
            said,
        )));
    }
    // "UID: 0\nGID: 0\n\n" then the payload.
    let text = out.stdout;
    let Some(at) = text.windows(2).position(|w| w == b"\n\n") else {
        return Ok(Err(crate::plumbing::munge::MungeError::Contract(
            "unmunge printed no metadata",
        )));
    };
    let meta = String::from_utf8_lossy(&text[..at]).into_owned();
    let field = |key: &str| -> Option<u32> {
        meta.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
    };
    let (Some(uid), Some(gid)) = (field("UID:"), field("GID:")) else {
        return Ok(Err(crate::plumbing::munge::MungeError::Contract(
            "unmunge printed no UID or GID",
        )));
    };
    Ok(Ok(crate::plumbing::munge::Decoded {
        uid,
        gid,
        payload: text[at + 2..].to_vec(),
        origin: std::net::Ipv4Addr::UNSPECIFIED,
    }))
}

/// Sends the salt of the opening's commitment and the request, on a connection whose
/// daemon proved itself.
fn request(
    mut reader: BufReader<Conn>,
    salt: &request_binding::Salt,
    line: &[u8],
    answer_timeout: Duration,
) -> Result<Sent, ClientError> {
    let conn = reader.get_mut();
    conn.tcp().set_read_timeout(Some(answer_timeout))?;
    let mut out = Vec::with_capacity(2 * salt.len() + 1 + line.len());
    out.extend_from_slice(hex(salt).as_bytes());
    out.push(b'\n');
    out.extend_from_slice(line);
    let sent = conn.write_all(&out).and_then(|()| conn.end_request());
    Ok((Box::new(reader), sent))
}

/// A connection to a daemon: plain TCP, or TLS over it.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(t) => &t.sock,
        }
    }

    /// Says the request is complete: the write side is shut (plain TCP). Over TLS the
    /// daemon reads the request by its newline, and the connection stays whole for the
    /// answer.
    fn end_request(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.shutdown(std::net::Shutdown::Write),
            Conn::Tls(t) => t.flush(),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(t) => t.flush(),
        }
    }
}

/// A hello as read: the line (without its newline, as the proof names it), what it says,
/// and the address the connection reached.
struct HelloRead {
    line: Vec<u8>,
    hello: Hello,
    peer: SocketAddr,
}

/// Connects to `addr` (`host:port`; over TLS the certificate must name `host`) and reads
/// its hello.
fn hello_from(
    addr: &str,
    tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
) -> std::io::Result<(BufReader<Conn>, HelloRead)> {
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(stream) => {
                stream.set_read_timeout(Some(HELLO_TIMEOUT))?;
                // The address this socket is connected to: the daemon's proof must name it.
                let peer = stream.peer_addr()?;
                stream.set_write_timeout(Some(HELLO_TIMEOUT))?;
                let _ = stream.set_nodelay(true);
                let conn = match tls {
                    None => Conn::Plain(stream),
                    Some(config) => {
                        let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
                        let host = host.trim_start_matches('[').trim_end_matches(']');
                        let name = rustls::pki_types::ServerName::try_from(host.to_string())
                            .map_err(|e| {
                                std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
                            })?;
                        let c = rustls::ClientConnection::new(config.clone(), name)
                            .map_err(std::io::Error::other)?;
                        Conn::Tls(Box::new(rustls::StreamOwned::new(c, stream)))
                    }
                };
                let mut reader = BufReader::new(conn);
                let mut line = Vec::new();
                (&mut reader)
                    .take(MAX_HELLO as u64)
                    .read_until(b'\n', &mut line)?;
                let hello: Hello = serde_json::from_slice(&line).map_err(|e| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("not a slurm-supervisord hello ({e})"),
                    )
                })?;
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                return Ok((reader, HelloRead { line, hello, peer }));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the name resolves to no address",
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server that says `hello` to every connection (`{}` stands for its own address),
    /// keeps it open until the client leaves, and counts them.
    fn standby(hello: String) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (c, me) = (count.clone(), addr.clone());
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = s.write_all(format!("{}\n", hello.replace("{}", &me)).as_bytes());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s, &mut std::io::sink());
                });
            }
        });
        (addr, count)
    }

    fn not_active(at: Option<&str>) -> String {
        serde_json::to_string(&Hello {
            version: VERSION,
            daemon: "d".into(),
            uid: 0,
            active: false,
            nonce: None,
            active_at: at.map(String::from),
        })
        .unwrap()
    }

    fn target(servers: &[&str]) -> NetTarget {
        NetTarget {
            servers: servers.iter().map(|s| s.to_string()).collect(),
            // No munged is needed: nothing here gets as far as a credential.
            munge_socket: Some("/nonexistent/munge.socket".into()),
            tls_ca: None,
        }
    }

    fn reasons(t: &NetTarget) -> String {
        match send(t, b"{\"cmd\":\"ping\"}\n", false, Duration::from_secs(5)) {
            Err(ClientError::Network(r)) => r,
            Err(ClientError::Munge(e)) if e.code() == "library" => {
                panic!("these tests need libmunge2 installed: {e}")
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("a request went through with no active daemon"),
        }
    }

    /// Standbys that name each other: each is asked once, then the client stops.
    #[test]
    fn standbys_naming_each_other_are_each_asked_once() {
        // A port bound and closed: nothing listens there.
        let dead = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        // Each names itself ("{}") and the other is listed: a loop either way.
        let (a, a_count) = standby(not_active(Some("{}")));
        let (b, b_count) = standby(not_active(Some(&a)));
        let r = reasons(&target(&[&dead, &a, &b]));
        assert_eq!(a_count.load(std::sync::atomic::Ordering::SeqCst), 1, "{r}");
        assert_eq!(b_count.load(std::sync::atomic::Ordering::SeqCst), 1, "{r}");
        assert!(r.starts_with(&format!("{dead}: ")), "{r}");
        assert!(
            r.contains(&format!("{a}: not active; it names {a}, tried already")),
            "{r}"
        );
        assert!(
            r.contains(&format!("{b}: not active; it names {a}, tried already")),
            "{r}"
        );
    }

    /// With no daemon acting, a read goes to the first standby that sent a nonce (it
    /// answers from its replica), once it has proved itself; a change does not.
    #[test]
    fn a_read_falls_back_to_a_standby_and_a_change_does_not() {
        let me = nix::unistd::geteuid().as_raw();
        let hello = serde_json::to_string(&Hello {
            version: VERSION,
            daemon: "d".into(),
            uid: me,
            active: false,
            nonce: Some("00".repeat(crate::domain::request_binding::NONCE_LEN)),
            active_at: None,
        })
        .unwrap();
        // The client opens before any proof; here no munged makes its credential.
        let (a, _) = standby(format!("{hello}\nMUNGE:AAAA:"));
        let t = target(&[&a]);
        let line = b"{\"cmd\":\"status\"}\n";
        // The read gets as far as making its opening for the standby (no munged here).
        match send(&t, line, true, Duration::from_secs(5)) {
            Err(ClientError::Munge(_)) => {}
            Err(e) => panic!("the read was not sent to the standby: {e}"),
            Ok(_) => panic!("a proof was checked without munged"),
        }
        match send(&t, line, false, Duration::from_secs(5)) {
            Err(ClientError::Network(r)) => {
                assert!(r.contains("not active, and knows no active daemon"), "{r}")
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("a change went to a standby"),
        }
    }

    /// A redirect to an address the config does not list is not followed.
    #[test]
    fn a_redirect_off_the_list_is_not_followed() {
        let (elsewhere, elsewhere_count) = standby(not_active(None));
        let (a, _) = standby(not_active(Some(&elsewhere)));
        let r = reasons(&target(&[&a]));
        assert!(r.contains("which is not in [client] servers"), "{r}");
        assert_eq!(elsewhere_count.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    /// A redirect to a listed server is followed first, before the rest of the list.
    #[test]
    fn a_redirect_is_followed_before_the_rest_of_the_list() {
        let (last, last_count) = standby(not_active(None));
        let (active, active_count) = standby(not_active(None));
        let (first, _) = standby(not_active(Some(&active)));
        let r = reasons(&target(&[&first, &last, &active]));
        assert_eq!(
            active_count.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{r}"
        );
        assert_eq!(
            last_count.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "{r}"
        );
        let (i, j) = (
            r.find(&format!("{active}:")).unwrap(),
            r.find(&format!("{last}:")).unwrap(),
        );
        assert!(i < j, "{r}");
    }

    /// A hello asking for a credential restricted to some third uid gets none.
    #[test]
    fn a_credential_for_a_third_uid_is_not_made() {
        let me = nix::unistd::geteuid().as_raw();
        let other = if me == 4_000_000 {
            4_000_001
        } else {
            4_000_000
        };
        let hello = serde_json::to_string(&Hello {
            version: VERSION,
            daemon: "d".into(),
            uid: other,
            active: true,
            nonce: Some("00".repeat(16)),
            active_at: None,
        })
        .unwrap();
        let (a, _) = standby(hello);
        let r = reasons(&target(&[&a]));
        assert!(
            r.contains(&format!("uid {other}, which is neither root nor you")),
            "{r}"
        );
    }
}
