//! What the MUNGE credentials of the network exchange (`protocol::net`) say, so that each
//! is good for one connection only.
//!
//! A credential (see `munge`) proves who made it, when, and for which uid; on its own, a
//! captured one could be sent again on another connection, or to the other daemon of an
//! active/standby pair, whose munged has not seen it (MUNGE's replay cache is per host).
//! So each credential's payload names the connection it was made for.
//!
//! The client authenticates first, with its **opening** ([`open`], [`check_opening`]):
//! its credential's payload names a nonce of the client's own (which the daemon's proof
//! must name), the daemon's identity and the nonce that daemon issued, the SHA-256 of the
//! daemon's hello line, the address the client dialled, and a **commitment** to the
//! request ([`commit`]: the SHA-256 of a fresh random salt and the request line), so that
//! nothing of the request itself leaves before the daemon has proved itself. The daemon
//! recomputes everything but the client's nonce and the commitment from its own
//! connection, and takes those two from the payload; once proven, the client sends the
//! salt and the request, and the daemon checks them against the commitment.
//!
//! An opening is a fixed layout of [`OPENING_LEN`] bytes, nothing to parse:
//!
//! | bytes    | what                                                   |
//! |----------|--------------------------------------------------------|
//! | 0..4     | `MAGIC`, `b"SSVB"`: a supervisor binding                |
//! | 4        | [`VERSION`], 2 (1 bound the request body itself)        |
//! | 5..21    | the client's nonce, [`NONCE_LEN`] bytes                 |
//! | 21..53   | SHA-256 of the daemon's identity (UTF-8)                |
//! | 53..69   | the daemon's nonce, [`NONCE_LEN`] bytes                 |
//! | 69..101  | SHA-256 of the hello line (without its newline)         |
//! | 101..119 | the address dialled: 16 bytes of IPv6 (IPv4 as IPv4-mapped), 2 of port, big-endian |
//! | 119..151 | the commitment: SHA-256 of the salt, then the request line without its newline |
//!
//! Hashing the identity keeps the layout fixed whatever its length. A change to the layout
//! is a new version; a daemon refuses versions it does not know.
//!
//! The other way round, the daemon proves itself to the client whose opening it accepted,
//! before the client sends its request ([`prove`], [`check_proof`]): its own credential's
//! payload names the client's nonce, the daemon's identity and nonce, its hello, and the
//! address the connection reached as the daemon sees it (docs/security.md, "The
//! exchange").
//!
//! Pure: no I/O, no clock, no randomness (drawing nonces and salts is the caller's).

use sha2::{Digest, Sha256};

/// The first bytes of every opening: a payload that is not one is refused as such.
const MAGIC: [u8; 4] = *b"SSVB";

/// The layout's version, the byte after [`MAGIC`].
pub const VERSION: u8 = 2;

/// A nonce's length: 128 bits, drawn from the operating system's CSPRNG.
pub const NONCE_LEN: usize = 16;

/// A nonce, the daemon's (in its hello) or the client's (in its opening).
pub type Nonce = [u8; NONCE_LEN];

/// A salt's length: 256 bits, drawn by the client for each request.
pub const SALT_LEN: usize = 32;

/// What the client mixes into its commitment, so that the commitment says nothing of a
/// request one could guess (`ping`).
pub type Salt = [u8; SALT_LEN];

/// The SHA-256 of a salt and a request line.
pub type Commitment = [u8; 32];

/// An opening's length in bytes.
pub const OPENING_LEN: usize = MAGIC.len() + 1 + NONCE_LEN + 32 + NONCE_LEN + 32 + 18 + 32;

/// Why a payload is not a client's opening for this connection. The first that applies,
/// in the order of the variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("the credential's payload is {0} bytes, not an opening of {OPENING_LEN}")]
    Length(usize),
    #[error("the credential's payload is not a request binding")]
    Magic,
    #[error("request binding version {0} is unknown (this daemon reads version {VERSION})")]
    Version(u8),
    #[error("the credential was made for another daemon")]
    Daemon,
    #[error("the credential was made with another nonce")]
    Nonce,
    #[error("the credential was made for another hello")]
    Hello,
    #[error("the credential was made for another address than the one this connection reached (a relay, or a NAT between)")]
    Address,
    #[error("the credential was made for another request body (its salt and request are not the opening's commitment)")]
    Body,
}

impl Mismatch {
    /// A stable name for logs and tests.
    pub fn code(&self) -> &'static str {
        match self {
            Mismatch::Length(_) => "length",
            Mismatch::Magic => "magic",
            Mismatch::Version(_) => "version",
            Mismatch::Daemon => "daemon",
            Mismatch::Nonce => "nonce",
            Mismatch::Hello => "hello",
            Mismatch::Address => "address",
            Mismatch::Body => "body",
        }
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The commitment to `request` (the request line without its newline) under `salt`.
pub fn commit(salt: &Salt, request: &[u8]) -> Commitment {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(request);
    h.finalize().into()
}

/// Whether `request` under `salt` is what `commitment` was made of (`Mismatch::Body` if
/// not). Nothing here is secret once sent, so the comparison need not take constant time.
pub fn check_commitment(
    commitment: &Commitment,
    salt: &Salt,
    request: &[u8],
) -> Result<(), Mismatch> {
    if commit(salt, request) == *commitment {
        Ok(())
    } else {
        Err(Mismatch::Body)
    }
}

/// The payload of a client's opening credential: its `client_nonce`, for the daemon that
/// said `hello_line` (naming `daemon_id` and `daemon_nonce`), reached at `dialled` (the
/// address the client's socket is connected to), for the request `commitment` stands for.
pub fn open(
    client_nonce: &Nonce,
    daemon_id: &str,
    daemon_nonce: &Nonce,
    hello_line: &[u8],
    dialled: std::net::SocketAddr,
    commitment: &Commitment,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(OPENING_LEN);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(client_nonce);
    out.extend_from_slice(&sha256(daemon_id.as_bytes()));
    out.extend_from_slice(daemon_nonce);
    out.extend_from_slice(&sha256(hello_line));
    out.extend_from_slice(&address_bytes(dialled));
    out.extend_from_slice(commitment);
    debug_assert_eq!(out.len(), OPENING_LEN);
    out
}

/// What an accepted opening says that the daemon did not know: the client's nonce (its
/// proof names it) and the commitment to the request to come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    pub client_nonce: Nonce,
    pub commitment: Commitment,
}

/// Whether `payload` (a decoded opening credential's) was made for this connection: for
/// `daemon_id`, which issued `daemon_nonce` and said `hello_line`, reached at `local` (the
/// connection's local address as the daemon sees it). The values compared are not secret,
/// so the comparison need not take constant time.
pub fn check_opening(
    payload: &[u8],
    daemon_id: &str,
    daemon_nonce: &Nonce,
    hello_line: &[u8],
    local: std::net::SocketAddr,
) -> Result<Opened, Mismatch> {
    let Ok(fields) = <&[u8; OPENING_LEN]>::try_from(payload) else {
        return Err(Mismatch::Length(payload.len()));
    };
    let (magic, rest) = fields.split_at(MAGIC.len());
    let (version, rest) = rest.split_at(1);
    let (client_nonce, rest) = rest.split_at(NONCE_LEN);
    let (daemon_hash, rest) = rest.split_at(32);
    let (their_daemon_nonce, rest) = rest.split_at(NONCE_LEN);
    let (hello_hash, rest) = rest.split_at(32);
    let (address, commitment) = rest.split_at(18);
    if magic != MAGIC {
        return Err(Mismatch::Magic);
    }
    if version[0] != VERSION {
        return Err(Mismatch::Version(version[0]));
    }
    if daemon_hash != sha256(daemon_id.as_bytes()) {
        return Err(Mismatch::Daemon);
    }
    if their_daemon_nonce != daemon_nonce {
        return Err(Mismatch::Nonce);
    }
    if hello_hash != sha256(hello_line) {
        return Err(Mismatch::Hello);
    }
    if address != address_bytes(local) {
        return Err(Mismatch::Address);
    }
    Ok(Opened {
        client_nonce: client_nonce.try_into().expect("a nonce's length"),
        commitment: commitment.try_into().expect("a hash's length"),
    })
}

/// The first bytes of a daemon's proof: its own credential's payload.
const PROOF_MAGIC: [u8; 4] = *b"SSVP";

/// The proof layout's version, the byte after [`PROOF_MAGIC`].
pub const PROOF_VERSION: u8 = 1;

/// A proof's length in bytes: magic, version, the client's nonce, the SHA-256 of the
/// daemon's identity, the daemon's nonce, the SHA-256 of the hello line, and the address
/// (16 bytes of IPv6, an IPv4 address as IPv4-mapped, and 2 of port, big-endian).
pub const PROOF_LEN: usize = PROOF_MAGIC.len() + 1 + NONCE_LEN + 32 + NONCE_LEN + 32 + 18;

/// Why a daemon's credential does not prove it answered this client's connection. The
/// first that applies, in the order of the variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProofMismatch {
    #[error("its credential's payload is {0} bytes, not a proof of {PROOF_LEN}")]
    Length(usize),
    #[error("its credential's payload is not a daemon's proof")]
    Magic,
    #[error("its proof is of version {0}, this supervisorctl reads version {PROOF_VERSION}")]
    Version(u8),
    #[error("its proof was made for another connection's nonce (a replay, or a relay)")]
    Nonce,
    #[error("its proof names another daemon than its hello")]
    Daemon,
    #[error("its proof was made for another hello")]
    Hello,
    #[error("its proof was made on another address than the one this client is connected to (a relay, or a NAT between them)")]
    Address,
}

impl ProofMismatch {
    /// A stable name for logs and tests.
    pub fn code(&self) -> &'static str {
        match self {
            ProofMismatch::Length(_) => "length",
            ProofMismatch::Magic => "magic",
            ProofMismatch::Version(_) => "version",
            ProofMismatch::Nonce => "nonce",
            ProofMismatch::Daemon => "daemon",
            ProofMismatch::Hello => "hello",
            ProofMismatch::Address => "address",
        }
    }
}

/// An address as a proof holds it: an IPv4 address as IPv4-mapped IPv6 (so a dual-stack
/// listener's `::ffff:a.b.c.d` and the client's `a.b.c.d` are one), then the port.
fn address_bytes(addr: std::net::SocketAddr) -> [u8; 18] {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        std::net::IpAddr::V6(v6) => v6,
    };
    let mut out = [0u8; 18];
    out[..16].copy_from_slice(&ip.octets());
    out[16..].copy_from_slice(&addr.port().to_be_bytes());
    out
}

/// What a daemon proves itself with on one connection: the payload of a credential it
/// makes as its own uid, for the `client_nonce` the client opened with, naming its
/// identity, the nonce it issued, the hello line it sent (without its newline), and the
/// local address of the connection as it sees it (`getsockname`).
pub fn prove(
    client_nonce: &Nonce,
    daemon_id: &str,
    daemon_nonce: &Nonce,
    hello_line: &[u8],
    local: std::net::SocketAddr,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(PROOF_LEN);
    out.extend_from_slice(&PROOF_MAGIC);
    out.push(PROOF_VERSION);
    out.extend_from_slice(client_nonce);
    out.extend_from_slice(&sha256(daemon_id.as_bytes()));
    out.extend_from_slice(daemon_nonce);
    out.extend_from_slice(&sha256(hello_line));
    out.extend_from_slice(&address_bytes(local));
    debug_assert_eq!(out.len(), PROOF_LEN);
    out
}

/// Whether `payload` (of the daemon's decoded credential) proves that the daemon which
/// sent `hello_line` (naming `daemon_id` and `daemon_nonce`) answered this client's
/// connection: made for its `client_nonce`, at the `peer` address the client is
/// connected to. Who made the credential is the caller's to check.
pub fn check_proof(
    payload: &[u8],
    client_nonce: &Nonce,
    daemon_id: &str,
    daemon_nonce: &Nonce,
    hello_line: &[u8],
    peer: std::net::SocketAddr,
) -> Result<(), ProofMismatch> {
    let Ok(fields) = <&[u8; PROOF_LEN]>::try_from(payload) else {
        return Err(ProofMismatch::Length(payload.len()));
    };
    let (magic, rest) = fields.split_at(PROOF_MAGIC.len());
    let (version, rest) = rest.split_at(1);
    let (their_client_nonce, rest) = rest.split_at(NONCE_LEN);
    let (daemon_hash, rest) = rest.split_at(32);
    let (their_daemon_nonce, rest) = rest.split_at(NONCE_LEN);
    let (hello_hash, address) = rest.split_at(32);
    if magic != PROOF_MAGIC {
        return Err(ProofMismatch::Magic);
    }
    if version[0] != PROOF_VERSION {
        return Err(ProofMismatch::Version(version[0]));
    }
    if their_client_nonce != client_nonce {
        return Err(ProofMismatch::Nonce);
    }
    if daemon_hash != sha256(daemon_id.as_bytes()) || their_daemon_nonce != daemon_nonce {
        return Err(ProofMismatch::Daemon);
    }
    if hello_hash != sha256(hello_line) {
        return Err(ProofMismatch::Hello);
    }
    if address != address_bytes(peer) {
        return Err(ProofMismatch::Address);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_checks_against_its_connection_and_nothing_else() {
        let client: Nonce = [1; NONCE_LEN];
        let daemon: Nonce = [2; NONCE_LEN];
        let hello = br#"{"version":3}"#;
        let at: std::net::SocketAddr = "192.0.2.1:6827".parse().unwrap();
        let p = prove(&client, DAEMON, &daemon, hello, at);
        assert_eq!(p.len(), PROOF_LEN);
        let code =
            |client: &Nonce, id: &str, daemon: &Nonce, hello: &[u8], at: &str| match check_proof(
                &p,
                client,
                id,
                daemon,
                hello,
                at.parse().unwrap(),
            ) {
                Ok(()) => "ok",
                Err(m) => m.code(),
            };
        assert_eq!(
            code(&client, DAEMON, &daemon, hello, "192.0.2.1:6827"),
            "ok"
        );
        // A dual-stack listener sees the client's IPv4 address as IPv4-mapped.
        assert_eq!(
            code(&client, DAEMON, &daemon, hello, "[::ffff:192.0.2.1]:6827"),
            "ok"
        );
        assert_eq!(
            code(&daemon, DAEMON, &daemon, hello, "192.0.2.1:6827"),
            "nonce"
        );
        assert_eq!(
            code(&client, "other", &daemon, hello, "192.0.2.1:6827"),
            "daemon"
        );
        assert_eq!(
            code(&client, DAEMON, &client, hello, "192.0.2.1:6827"),
            "daemon"
        );
        assert_eq!(
            code(&client, DAEMON, &daemon, b"{}", "192.0.2.1:6827"),
            "hello"
        );
        assert_eq!(
            code(&client, DAEMON, &daemon, hello, "192.0.2.1:6828"),
            "address"
        );
        assert_eq!(
            code(&client, DAEMON, &daemon, hello, "192.0.2.2:6827"),
            "address"
        );
        assert_eq!(
            code(&client, DAEMON, &daemon, hello, "[::1]:6827"),
            "address"
        );
        let mut q = p.clone();
        q[0] = b'X';
        assert_eq!(
            check_proof(&q, &client, DAEMON, &daemon, hello, at),
            Err(ProofMismatch::Magic)
        );
        q = p.clone();
        q[4] = 9;
        assert_eq!(
            check_proof(&q, &client, DAEMON, &daemon, hello, at),
            Err(ProofMismatch::Version(9))
        );
    }

    const DAEMON: &str = "cluster-a/login1";

    #[test]
    fn an_opening_checks_against_its_connection_and_nothing_else() {
        let client: Nonce = [1; NONCE_LEN];
        let daemon: Nonce = [2; NONCE_LEN];
        let hello = br#"{"version":3}"#;
        let at: std::net::SocketAddr = "192.0.2.1:6827".parse().unwrap();
        let salt: Salt = [3; SALT_LEN];
        let c = commit(&salt, b"{\"cmd\":\"ping\"}");
        let p = open(&client, DAEMON, &daemon, hello, at, &c);
        assert_eq!(p.len(), OPENING_LEN);
        assert_eq!(&p[0..4], b"SSVB");
        assert_eq!(p[4], 2);
        let code = |id: &str, daemon: &Nonce, hello: &[u8], at: &str| match check_opening(
            &p,
            id,
            daemon,
            hello,
            at.parse().unwrap(),
        ) {
            Ok(o) => {
                assert_eq!(o.client_nonce, client);
                assert_eq!(o.commitment, c);
                "ok"
            }
            Err(m) => m.code(),
        };
        assert_eq!(code(DAEMON, &daemon, hello, "192.0.2.1:6827"), "ok");
        assert_eq!(
            code(DAEMON, &daemon, hello, "[::ffff:192.0.2.1]:6827"),
            "ok"
        );
        assert_eq!(code("other", &daemon, hello, "192.0.2.1:6827"), "daemon");
        assert_eq!(code(DAEMON, &client, hello, "192.0.2.1:6827"), "nonce");
        assert_eq!(code(DAEMON, &daemon, b"{}", "192.0.2.1:6827"), "hello");
        assert_eq!(code(DAEMON, &daemon, hello, "192.0.2.1:6828"), "address");
        assert_eq!(code(DAEMON, &daemon, hello, "[::1]:6827"), "address");
        // The commitment holds the request under its salt, and nothing else.
        assert_eq!(check_commitment(&c, &salt, b"{\"cmd\":\"ping\"}"), Ok(()));
        assert_eq!(
            check_commitment(&c, &salt, b"{\"cmd\":\"ping\"} "),
            Err(Mismatch::Body)
        );
        assert_eq!(
            check_commitment(&c, &[4; SALT_LEN], b"{\"cmd\":\"ping\"}"),
            Err(Mismatch::Body)
        );
        // An opening is not a proof, nor the other way round.
        assert_eq!(
            check_proof(&p, &client, DAEMON, &daemon, hello, at),
            Err(ProofMismatch::Length(OPENING_LEN))
        );
        let q = prove(&client, DAEMON, &daemon, hello, at);
        assert_eq!(
            check_opening(&q, DAEMON, &daemon, hello, at),
            Err(Mismatch::Length(PROOF_LEN))
        );
    }

    #[test]
    fn truncated_changed_and_garbage_openings_are_refused_without_panicking() {
        let (daemon, hello): (Nonce, &[u8]) = ([2; NONCE_LEN], b"h");
        let at: std::net::SocketAddr = "192.0.2.1:6827".parse().unwrap();
        let p = open(&[1; NONCE_LEN], DAEMON, &daemon, hello, at, &[5; 32]);
        for n in 0..p.len() {
            assert_eq!(
                check_opening(&p[..n], DAEMON, &daemon, hello, at),
                Err(Mismatch::Length(n))
            );
        }
        let mut longer = p.clone();
        longer.push(0);
        assert_eq!(
            check_opening(&longer, DAEMON, &daemon, hello, at),
            Err(Mismatch::Length(OPENING_LEN + 1))
        );
        assert_eq!(
            check_opening(&[0; OPENING_LEN], DAEMON, &daemon, hello, at),
            Err(Mismatch::Magic)
        );
        // Any one byte changed is refused by the field that holds it, but the client's
        // nonce and the commitment, which the daemon takes from the opening.
        for i in 0..p.len() {
            let mut q = p.clone();
            q[i] ^= 0x80;
            let want = match i {
                0..4 => "magic",
                4 => "version",
                5..21 => "ok",
                21..53 => "daemon",
                53..69 => "nonce",
                69..101 => "hello",
                101..119 => "address",
                _ => "ok",
            };
            let got = match check_opening(&q, DAEMON, &daemon, hello, at) {
                Ok(_) => "ok",
                Err(m) => m.code(),
            };
            assert_eq!(got, want, "byte {i}");
        }
        let mut q = p.clone();
        q[4] = 1;
        assert_eq!(
            check_opening(&q, DAEMON, &daemon, hello, at),
            Err(Mismatch::Version(1))
        );
    }
}
