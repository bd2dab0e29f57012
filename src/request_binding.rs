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
//! Pure: no I/O, no clock, no randomness (issuing nonces is the daemon's).

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

#[cfg(test)]
mod tests {
    use super::*;

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
