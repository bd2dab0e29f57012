//! Arguments, paths and environment values that are not UTF-8, carried byte-exact.
//!
//! sbatch takes any bytes but NUL, and a user who swaps `sbatch` for `supervisorctl submit`
//! must lose none of them. Inside the supervisor (the protocol, the store, the sbatch
//! command-line parser) such a value is a `String` in which each byte that is not part of
//! valid UTF-8 stands as one character of the private-use range U+10FF80..=U+10FFFF
//! (byte `b` as U+10FF00 + `b`). The mapping is one-to-one: a real character of that range
//! in the input is itself written as its four bytes, so `decode(encode(b)) == b` for every
//! byte string. Bytes go back to their raw form only where they leave for the operating
//! system (the argv, environment and working directory of sbatch, and paths opened), and
//! are shown as `\xNN` to people.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

const BASE: u32 = 0x10_FF00;

fn stand_in(b: u8) -> char {
    char::from_u32(BASE + u32::from(b)).expect("U+10FF80..=U+10FFFF are characters")
}

fn is_stand_in(c: char) -> bool {
    (BASE + 0x80..=BASE + 0xFF).contains(&(c as u32))
}

/// Bytes as a `String`, losslessly.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if is_stand_in(c) {
                let mut buf = [0u8; 4];
                c.encode_utf8(&mut buf)
                    .bytes()
                    .for_each(|b| out.push(stand_in(b)));
            } else {
                out.push(c);
            }
        }
        chunk.invalid().iter().for_each(|&b| out.push(stand_in(b)));
    }
    out
}

/// The bytes an `encode`d string stands for.
pub fn decode(s: &str) -> Vec<u8> {
    if !s.chars().any(is_stand_in) {
        return s.as_bytes().to_vec();
    }
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        if is_stand_in(c) {
            out.push((c as u32 - BASE) as u8);
        } else {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    out
}

pub fn from_os(s: &OsStr) -> String {
    encode(s.as_bytes())
}

pub fn to_os(s: &str) -> OsString {
    OsString::from_vec(decode(s))
}

pub fn to_path(s: &str) -> PathBuf {
    PathBuf::from(to_os(s))
}

/// For people and JSON: each byte that is not UTF-8 as `\xNN`.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_stand_in) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_stand_in(c) {
            out.push_str(&format!("\\x{:02x}", c as u32 - BASE));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The longest start of `s` that is at most `max` bytes and ends at a character boundary
/// (so a stand-in or any other character is never split). The one place that cuts text to
/// a byte budget: error lines, evidence, prompts.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` cut to `max` bytes (at a character boundary), with `...` when something was cut:
/// how a value is shown in a message.
pub fn shortened(s: &str, max: usize) -> String {
    let cut = truncate(s, max);
    if cut.len() == s.len() {
        s.to_string()
    } else {
        format!("{cut}...")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_string_round_trips() {
        let real_stand_in = "\u{10FF80}x\u{10FFFF}".as_bytes().to_vec();
        for bytes in [
            b"plain".to_vec(),
            b"--job-name=\xff\xfe".to_vec(),
            "caf\u{e9}".as_bytes().to_vec(),
            b"\xc3".to_vec(),
            b"a\x80b\xbf".to_vec(),
            real_stand_in.clone(),
            Vec::new(),
        ] {
            assert_eq!(decode(&encode(&bytes)), bytes, "{bytes:?}");
        }
        assert_eq!(encode(b"plain"), "plain");
        assert_eq!(escape(&encode(b"a\xffb")), "a\\xffb");
        assert_eq!(
            escape(&encode(&real_stand_in)),
            "\\xf4\\x8f\\xbe\\x80x\\xf4\\x8f\\xbf\\xbf"
        );
    }

    #[test]
    fn random_bytes_round_trip() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        for _ in 0..2000 {
            let len = (seed % 24) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            assert_eq!(decode(&encode(&bytes)), bytes);
        }
    }

    #[test]
    fn truncate_cuts_at_a_character_boundary() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abc", 10), "abc");
        assert_eq!(truncate("abc", 2), "ab");
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate("é", 0), "");
        let stand_in = encode(b"a\xff");
        assert_eq!(truncate(&stand_in, 4), "a");
        assert_eq!(truncate(&stand_in, 5), stand_in);
    }
}
