//! What a MUNGE credential's payload says, so that it is good for one request only.
//!
//! A credential (see `munge`) proves who made it, when, and for which uid; on its own, a
//! captured one could be sent again with another request, or to the other daemon of an
//! active/standby pair, whose munged has not seen it (MUNGE's replay cache is per host).
//! So the client signs a **binding** as the credential's payload: the SHA-256 of the
//! request's body, the identity of the daemon it is for, and a **nonce** that daemon
//! issued. The daemon recomputes the binding from the request it received, its own
//! identity and the nonce it issued, and accepts the credential only if they are equal.
//!
//! The binding is a fixed layout of [`BINDING_LEN`] bytes, nothing to parse:
//!
//! | bytes  | what                                        |
//! |--------|---------------------------------------------|
//! | 0..4   | `MAGIC`, `b"SSVB"`: a supervisor binding    |
//! | 4      | [`VERSION`], 1                              |
//! | 5..37  | SHA-256 of the request body                 |
//! | 37..69 | SHA-256 of the daemon's identity (UTF-8)    |
//! | 69..85 | the nonce, [`NONCE_LEN`] bytes              |
//!
//! Hashing the identity keeps the layout fixed whatever its length. A change to the layout
//! is a new version; a daemon refuses versions it does not know.
//!
//! The other way round, a daemon proves itself to a client before the client sends
//! anything ([`prove`], [`check_proof`]): its own credential's payload names the nonce the
//! client opened with, the daemon's identity and nonce, its hello, and the address the
//! connection reached as the daemon sees it (docs/security.md, "The exchange").
//!
//! Pure: no I/O, no clock, no randomness (issuing nonces is the caller's).

use sha2::{Digest, Sha256};

/// The first bytes of every binding: a payload that is not one is refused as such.
const MAGIC: [u8; 4] = *b"SSVB";

/// The layout's version, the byte after [`MAGIC`].
pub const VERSION: u8 = 1;

/// A nonce's length: 128 bits, drawn by the daemon from the operating system's CSPRNG.
pub const NONCE_LEN: usize = 16;

/// A daemon-issued nonce.
pub type Nonce = [u8; NONCE_LEN];

/// A binding's length in bytes.
pub const BINDING_LEN: usize = MAGIC.len() + 1 + 32 + 32 + NONCE_LEN;

/// Why a payload does not bind a credential to this request. The first that applies, in
/// the order of the variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("the credential's payload is {0} bytes, not a binding of {BINDING_LEN}")]
    Length(usize),
    #[error("the credential's payload is not a request binding")]
    Magic,
    #[error("request binding version {0} is unknown (this daemon reads version {VERSION})")]
    Version(u8),
    #[error("the credential was made for another request body")]
    Body,
    #[error("the credential was made for another daemon")]
    Daemon,
    #[error("the credential was made with another nonce")]
    Nonce,
}

impl Mismatch {
    /// A stable name for logs and tests.
    pub fn code(&self) -> &'static str {
        match self {
            Mismatch::Length(_) => "length",
            Mismatch::Magic => "magic",
            Mismatch::Version(_) => "version",
            Mismatch::Body => "body",
            Mismatch::Daemon => "daemon",
            Mismatch::Nonce => "nonce",
        }
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The payload a client signs for `body`, sent to `daemon_id` with the `nonce` it issued.
pub fn bind(body: &[u8], daemon_id: &str, nonce: &Nonce) -> Vec<u8> {
    let mut out = Vec::with_capacity(BINDING_LEN);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&sha256(body));
    out.extend_from_slice(&sha256(daemon_id.as_bytes()));
    out.extend_from_slice(nonce);
    debug_assert_eq!(out.len(), BINDING_LEN);
    out
}

/// Whether `payload` (a decoded credential's) binds it to `body`, received by `daemon_id`,
/// which issued `nonce`. The values compared are not secret (anyone can hash a body they
/// saw), so the comparison need not take constant time.
pub fn check(payload: &[u8], body: &[u8], daemon_id: &str, nonce: &Nonce) -> Result<(), Mismatch> {
    check_fields(payload, Some(body), daemon_id, nonce)
}

/// [`check`] of everything but the body: whether `payload` was made for `daemon_id` and
/// the `nonce` it issued. A daemon asks this before it reads a request's body, so that a
/// credential made for another connection holds nothing of the caller's share meanwhile;
/// [`check`] follows once the body is in.
pub fn check_issued(payload: &[u8], daemon_id: &str, nonce: &Nonce) -> Result<(), Mismatch> {
    check_fields(payload, None, daemon_id, nonce)
}

fn check_fields(
    payload: &[u8],
    body: Option<&[u8]>,
    daemon_id: &str,
    nonce: &Nonce,
) -> Result<(), Mismatch> {
    let Ok(fields) = <&[u8; BINDING_LEN]>::try_from(payload) else {
        return Err(Mismatch::Length(payload.len()));
    };
    let (magic, rest) = fields.split_at(MAGIC.len());
    let (version, rest) = rest.split_at(1);
    let (body_hash, rest) = rest.split_at(32);
    let (daemon_hash, their_nonce) = rest.split_at(32);
    if magic != MAGIC {
        return Err(Mismatch::Magic);
    }
    if version[0] != VERSION {
        return Err(Mismatch::Version(version[0]));
    }
    if body.is_some_and(|body| body_hash != sha256(body)) {
        return Err(Mismatch::Body);
    }
    if daemon_hash != sha256(daemon_id.as_bytes()) {
        return Err(Mismatch::Daemon);
    }
    if their_nonce != nonce {
        return Err(Mismatch::Nonce);
    }
    Ok(())
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
        let hello = br#"{"version":2}"#;
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
        // A binding is not a proof, nor the other way round.
        let b = bind(BODY, DAEMON, &NONCE);
        assert_eq!(
            check_proof(&b, &client, DAEMON, &daemon, hello, at),
            Err(ProofMismatch::Length(BINDING_LEN))
        );
        assert_eq!(
            check(&p, BODY, DAEMON, &NONCE),
            Err(Mismatch::Length(PROOF_LEN))
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

    const BODY: &[u8] = b"{\"submit\":{\"argv\":[\"job.sh\"]}}";
    const DAEMON: &str = "cluster-a/login1";
    const NONCE: Nonce = [7; NONCE_LEN];

    fn check_code(payload: &[u8], body: &[u8], daemon: &str, nonce: &Nonce) -> &'static str {
        match check(payload, body, daemon, nonce) {
            Ok(()) => "ok",
            Err(m) => m.code(),
        }
    }

    #[test]
    fn a_binding_checks_against_what_it_was_made_for_and_nothing_else() {
        let p = bind(BODY, DAEMON, &NONCE);
        assert_eq!(p.len(), BINDING_LEN);
        let mut other_nonce = NONCE;
        other_nonce[NONCE_LEN - 1] ^= 1;
        let mut longer_body = BODY.to_vec();
        longer_body.push(b' ');
        let table: &[(&[u8], &str, &Nonce, &str)] = &[
            (BODY, DAEMON, &NONCE, "ok"),
            (
                b"{\"submit\":{\"argv\":[\"evil.sh\"]}}",
                DAEMON,
                &NONCE,
                "body",
            ),
            (&longer_body, DAEMON, &NONCE, "body"),
            (b"", DAEMON, &NONCE, "body"),
            (BODY, "cluster-a/login2", &NONCE, "daemon"),
            (BODY, "", &NONCE, "daemon"),
            (BODY, DAEMON, &other_nonce, "nonce"),
        ];
        for (body, daemon, nonce, want) in table {
            assert_eq!(
                check_code(&p, body, daemon, nonce),
                *want,
                "body {:?}, daemon {daemon:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        let p = bind(b"abc", "d", &NONCE);
        assert_eq!(&p[0..4], b"SSVB");
        assert_eq!(p[4], 1);
        // SHA-256("abc"), FIPS 180-2's example.
        assert_eq!(
            p[5..37],
            [
                0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde, 0x5d, 0xae,
                0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61,
                0xf2, 0x00, 0x15, 0xad
            ]
        );
        assert_eq!(p[37..69], sha256(b"d"));
        assert_eq!(p[69..], NONCE);
    }

    #[test]
    fn truncated_extended_and_garbage_payloads_are_refused_without_panicking() {
        let p = bind(BODY, DAEMON, &NONCE);
        for n in 0..p.len() {
            assert_eq!(
                check(&p[..n], BODY, DAEMON, &NONCE),
                Err(Mismatch::Length(n))
            );
        }
        let mut longer = p.clone();
        longer.push(0);
        assert_eq!(
            check(&longer, BODY, DAEMON, &NONCE),
            Err(Mismatch::Length(BINDING_LEN + 1))
        );
        assert_eq!(
            check(&[0xff; BINDING_LEN], BODY, DAEMON, &NONCE),
            Err(Mismatch::Magic)
        );
        assert_eq!(
            check(&[0; BINDING_LEN], BODY, DAEMON, &NONCE),
            Err(Mismatch::Magic)
        );
        // Any one byte changed is refused, by the field that holds it.
        for i in 0..p.len() {
            let mut q = p.clone();
            q[i] ^= 0x80;
            let want = match i {
                0..4 => "magic",
                4 => "version",
                5..37 => "body",
                37..69 => "daemon",
                _ => "nonce",
            };
            assert_eq!(check_code(&q, BODY, DAEMON, &NONCE), want, "byte {i}");
        }
    }

    #[test]
    fn the_issued_check_looks_at_everything_but_the_body() {
        let p = bind(BODY, DAEMON, &NONCE);
        assert_eq!(check_issued(&p, DAEMON, &NONCE), Ok(()));
        let mut other_nonce = NONCE;
        other_nonce[0] ^= 1;
        assert_eq!(check_issued(&p, DAEMON, &other_nonce), Err(Mismatch::Nonce));
        assert_eq!(check_issued(&p, "other", &NONCE), Err(Mismatch::Daemon));
        assert_eq!(
            check_issued(&p[1..], DAEMON, &NONCE),
            Err(Mismatch::Length(84))
        );
        let mut q = p.clone();
        q[10] ^= 1;
        assert_eq!(check_issued(&q, DAEMON, &NONCE), Ok(()));
        assert_eq!(check(&q, BODY, DAEMON, &NONCE), Err(Mismatch::Body));
    }

    #[test]
    fn an_unknown_version_is_refused_by_its_number() {
        let mut p = bind(BODY, DAEMON, &NONCE);
        for v in [0, 2, 255] {
            p[4] = v;
            assert_eq!(check(&p, BODY, DAEMON, &NONCE), Err(Mismatch::Version(v)));
        }
    }
}
