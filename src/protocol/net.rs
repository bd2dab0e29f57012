//! The network form of the control protocol: what travels before a request over TCP.
//!
//! On the Unix socket the kernel says who the caller is. Over TCP the caller proves it with
//! a MUNGE credential bound to the request (see `request_binding`). One request per
//! connection, in this order:
//!
//! 1. The daemon sends a [`Hello`] as one JSON line: the protocol version, its identity,
//!    its uid (the one the credential must be restricted to), and a fresh nonce for this
//!    connection only. A daemon that is not the active one (a standby of cluster mode)
//!    says `active: false` and where the active daemon is (`active_at`): a client sends
//!    a change there, and may send a read (`Request::is_read`) to the standby itself,
//!    which answers it from its replica and refuses anything else, as on its Unix socket.
//!    A client that reads a hello of another version says so and sends nothing.
//! 2. A client that means to send a request here authenticates first: its **opening** is
//!    one line, a MUNGE credential (the armoured text, at most `munge::MAX_CREDENTIAL`
//!    bytes) it makes as its own uid, restricted to the hello's `uid` (a client makes none
//!    for a uid that is neither root nor its own), whose payload is
//!    `request_binding::open(a fresh nonce of the client's, hello.daemon, hello.nonce, the
//!    hello line, the address the client dialled, request_binding::commit(a fresh salt,
//!    the request line without its newline))`. Nothing of the request itself is sent yet.
//! 3. The daemon decodes the opening (a bounded number of calls to munged at once, see
//!    `daemon::net`), checks that its payload names this daemon, its nonce, this hello
//!    and the connection's local address as the daemon sees it, and applies the admission
//!    rules (a per-user daemon serves its own uid only; root only from `server.root_nodes`;
//!    the uid's connection share). A connection whose opening does not pass gets one
//!    refusal line (an error answer, as on the Unix socket) and is closed: no proof, and
//!    no credential of the daemon's made for it. Otherwise the daemon proves itself: one
//!    line, a MUNGE credential it makes as its own uid (root for the system-wide service),
//!    restricted to the uid the opening proved (`nobody`, [`PROOF_UID_OF_ROOT`], for
//!    root; never a system account or Slurm's, which could use a credential of root's
//!    against Slurm), whose payload is `request_binding::prove(the client's nonce, its
//!    identity, its nonce, the hello line, the connection's local address as it sees
//!    it)`. The client decodes it with its own munged and goes on only if its maker is
//!    root or the client's own uid (and the hello's `uid`), and the proof names its nonce,
//!    this hello and the address the client is connected to: a program holding the port,
//!    or relaying it to the real daemon, cannot make one.
//! 4. The client sends the salt (hex, [`request_binding::SALT_LEN`] bytes) on one line,
//!    then the request as one JSON line, exactly as on the Unix socket; the daemon checks
//!    them against the opening's commitment.
//! 5. The daemon answers as on the Unix socket: one JSON line (or the streamed list of
//!    `status`), then closes.
//!
//! One credential made by the client and one decoded by the daemon per server a request
//! is sent to (a read that meets a standby first, then the active daemon, makes two), and
//! one made by the daemon (the proof), only for a client that authenticated (or for
//! root's, which asks for it first).
//!
//! **Root's client proves itself last.** A credential root makes restricted to root is
//! one Slurm's root daemons (slurmd; slurmctld where `SlurmUser` is root) take as root's
//! where they do not check its payload (Slurm without the fix for CVE-2023-49933): root's
//! client never gives one to whatever holds the port before it proved it is the daemon.
//! Its first line is [`PROVE_FIRST`] and its nonce (hex); the daemon answers with its
//! proof, restricted to `nobody` as every proof for root is (harmless to whoever asked:
//! no Slurm program decodes as `nobody`); the client checks it as in step 3, then sends
//! its opening (step 2), and the daemon, which proves nothing more, checks it and admits
//! root only (from `server.root_nodes`), then step 4.

use serde::{Deserialize, Serialize};

/// The version of this exchange; a client refuses a hello of another. 3: the client
/// authenticates first and the daemon proves itself to it only then (2: the daemon proved
/// itself to anyone before the client authenticated; 1 had no proof). A client and a
/// daemon talk only when they speak the same version.
pub const VERSION: u32 = 3;

/// The longest opening line a daemon reads: the credential and its newline.
pub const MAX_OPENING: u64 = crate::plumbing::munge::MAX_CREDENTIAL as u64 + 2;

/// The first line of root's client, before its nonce: prove yourself first (see the
/// module's doc). A credential's armoured text starts with `MUNGE:`, never with this.
pub const PROVE_FIRST: &str = "PROVE:";

/// The uid a root client has its proof restricted to, and decodes it as (`nobody`): a
/// daemon makes no proof that root could decode (see `daemon::net::proof_uid`).
pub const PROOF_UID_OF_ROOT: u32 = 65534;

/// The longest hello line a client reads, newline included.
pub const MAX_HELLO: usize = 4096;

/// What the daemon says first on every connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    /// The daemon's identity, which the credential's binding names.
    pub daemon: String,
    /// The daemon's uid: the credential is restricted to it.
    pub uid: u32,
    /// Whether this daemon acts; a standby answers reads only, and says where to go.
    pub active: bool,
    /// The nonce for this connection's one request, as hex (`request_binding::NONCE_LEN`
    /// bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// From a standby: the `host:port` of the active daemon, when it knows one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_at: Option<String>,
}

impl Hello {
    /// The nonce as bytes, if it is well formed.
    pub fn nonce_bytes(&self) -> Option<crate::domain::request_binding::Nonce> {
        nonce_from_hex(self.nonce.as_deref()?)
    }
}

/// A nonce from its hex form, if it is well formed.
pub fn nonce_from_hex(text: &str) -> Option<crate::domain::request_binding::Nonce> {
    let mut out = [0u8; crate::domain::request_binding::NONCE_LEN];
    if text.len() != out.len() * 2 {
        return None;
    }
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A nonce as the hello carries it.
pub fn nonce_hex(nonce: &crate::domain::request_binding::Nonce) -> String {
    hex(nonce)
}

/// Bytes as lowercase hex (a nonce, a salt).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A salt from its line (without the newline), if it is well formed.
pub fn salt_from_hex(text: &[u8]) -> Option<crate::domain::request_binding::Salt> {
    let mut out = [0u8; crate::domain::request_binding::SALT_LEN];
    if text.len() != out.len() * 2 {
        return None;
    }
    for (i, b) in out.iter_mut().enumerate() {
        let pair = std::str::from_utf8(text.get(2 * i..2 * i + 2)?).ok()?;
        *b = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_goes_there_and_back_and_a_bad_one_is_none() {
        let n: crate::domain::request_binding::Nonce = std::array::from_fn(|i| (i * 17) as u8);
        let mut h = Hello {
            version: VERSION,
            daemon: "login1:6827".into(),
            uid: 0,
            active: true,
            nonce: Some(nonce_hex(&n)),
            active_at: None,
        };
        assert_eq!(h.nonce_bytes(), Some(n));
        for bad in ["", "00", "zz".repeat(16).as_str(), "é".repeat(16).as_str()] {
            h.nonce = Some(bad.to_string());
            assert_eq!(h.nonce_bytes(), None, "{bad:?}");
        }
        h.nonce = None;
        assert_eq!(h.nonce_bytes(), None);
        let salt: crate::domain::request_binding::Salt = std::array::from_fn(|i| (i * 7) as u8);
        assert_eq!(salt_from_hex(hex(&salt).as_bytes()), Some(salt));
        for bad in [&b""[..], b"00", &[b'z'; 64], &[b'0'; 65]] {
            assert_eq!(salt_from_hex(bad), None);
        }
    }
}
