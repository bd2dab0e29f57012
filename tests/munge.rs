//! The MUNGE binding (`src/plumbing/munge.rs`) against a real munged: Debian's, started by each test
//! with its own key (1024 random bytes, mode 0400), socket, pid, log and seed files in a
//! temporary folder, and stopped when the test ends. The host's munged, and the dev
//! clusters', are never touched.
//!
//! Covered: a credential decodes to its maker's uid and gid and carries any payload bytes
//! exactly; one restricted to a uid is decoded by that uid only, not even by root; one made
//! by another user (alice, through the `munge` command) decodes to that user; a
//! second decode is a replay; a credential past its time to live is expired; one made
//! with another key is invalid; garbage, NULs and oversized input are refused without a
//! panic; no munged at the socket is a socket error; a client serves threads at once; no
//! buffer leaks.
//!
//! Needs root (to act as alice and bob, created with `useradd -m` if missing, as
//! tests/security.rs does). Without munged or libmunge the tests fail, saying what to install (a test that skips
//! would pass having tested nothing). `scripts/test` installs Debian's munge, which brings
//! libmunge2.

mod common;

use common::munged::{wait_for, Munged};
use common::system::User;
use slurm_supervisor::plumbing::munge::{Decoded, Munge, MungeError, MAX_CREDENTIAL, MAX_PAYLOAD};
use std::path::Path;
use std::time::{Duration, Instant};

fn code<T: std::fmt::Debug>(r: Result<T, MungeError>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

#[test]
fn a_credential_decodes_to_its_maker_and_carries_any_bytes_exactly() {
    let m = Munged::start();
    let c = m.client();
    let payload: Vec<u8> = [b"ok\0".as_slice(), &[0xff, 0xfe, 0x80, 0xc3], b"\0tail"]
        .concat()
        .into_iter()
        .chain(0..=255)
        .collect();
    assert!(std::str::from_utf8(&payload).is_err());
    let cred = c.encode(&payload, None, None).unwrap();
    assert!(cred.starts_with("MUNGE:") && cred.ends_with(':'), "{cred}");
    let d = c.decode(&cred).unwrap();
    let me = Decoded {
        uid: nix::unistd::geteuid().as_raw(),
        gid: nix::unistd::getegid().as_raw(),
        payload,
        origin: d.origin,
    };
    assert_eq!(d, me);
    // The largest payload the binding signs, and no payload at all.
    let big = vec![0xa5; MAX_PAYLOAD];
    let cred = c.encode(&big, None, Some(60)).unwrap();
    assert!(cred.len() <= MAX_CREDENTIAL, "{} bytes", cred.len());
    assert_eq!(c.decode(cred.as_bytes()).unwrap().payload, big);
    let cred = c.encode(b"", None, None).unwrap();
    assert_eq!(c.decode(&cred).unwrap().payload, b"");
}

#[test]
fn a_credential_restricted_to_alice_is_decoded_by_alice_only_not_even_by_root() {
    let (alice, bob) = (User::get("alice"), User::get("bob"));
    let m = Munged::start();
    let cred = m
        .client()
        .encode(b"for alice", Some(alice.uid), None)
        .unwrap();
    assert_eq!(code(m.client().decode(&cred)), "unauthorized");
    let by_bob = m.run_as(("bob", None), "unmunge", &[], cred.as_bytes());
    assert!(!by_bob.status.success(), "bob decoded alice's credential");
    assert!(
        String::from_utf8_lossy(&by_bob.stderr).contains(&format!("UID={}", bob.uid)),
        "{by_bob:?}"
    );
    let by_alice = m.run_as(("alice", None), "unmunge", &[], cred.as_bytes());
    assert!(by_alice.status.success(), "{by_alice:?}");
    let out = String::from_utf8_lossy(&by_alice.stdout);
    assert!(
        out.contains(&format!("UID_RESTRICTION: alice ({})", alice.uid)),
        "{out}"
    );
    assert!(out.ends_with("\nfor alice"), "{out}");
    // Alice's decode is the first: the refusals above did not consume the credential.
    assert!(out.contains("Success"), "{out}");
}

#[test]
fn a_credential_alice_made_decodes_to_her_uid_and_gid() {
    let (alice, bob) = (User::get("alice"), User::get("bob"));
    let m = Munged::start();
    // With bob's group as her primary group, so that a uid read as a gid shows.
    let out = m.run_as(
        ("alice", Some("bob")),
        "munge",
        &["--string=from alice"],
        b"",
    );
    assert!(out.status.success(), "{out:?}");
    // The credential as bytes, as it would come off the network (with munge's newline).
    let d = m.client().decode(&out.stdout).unwrap();
    assert_eq!(
        d,
        Decoded {
            uid: alice.uid,
            gid: bob.gid,
            payload: b"from alice".to_vec(),
            origin: d.origin,
        }
    );
}

/// The origin address is the one munged signs into the credential: `unmunge` (which reads
/// it with the same option) prints it as the encode host's address.
#[test]
fn a_credential_says_the_address_of_the_host_that_made_it() {
    let m = Munged::start();
    let cred = m.client().encode(b"where", None, None).unwrap();
    let out = m.run_as(("root", None), "unmunge", &[], cred.as_bytes());
    assert!(out.status.success(), "{out:?}");
    let meta = String::from_utf8_lossy(&out.stdout);
    let line = meta
        .lines()
        .find(|l| l.starts_with("ENCODE_HOST:"))
        .unwrap_or_else(|| panic!("no ENCODE_HOST in {meta}"));
    let addr = line
        .rsplit_once('(')
        .and_then(|(_, a)| a.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    // unmunge decoded it first: this decode is a replay, which still says where it came
    // from; so decode a second credential of the same host instead.
    let again = m.client().encode(b"where", None, None).unwrap();
    let d = m.client().decode(&again).unwrap();
    assert_eq!(d.origin.to_string(), addr, "{meta}");
}

#[test]
fn a_credential_decoded_twice_is_replayed() {
    let m = Munged::start();
    let c = m.client();
    let cred = c.encode(b"once", None, None).unwrap();
    assert_eq!(c.decode(&cred).unwrap().payload, b"once");
    assert_eq!(c.decode(&cred), Err(MungeError::Replayed));
    // Another client of the same munged sees the same replay cache.
    assert_eq!(m.client().decode(&cred), Err(MungeError::Replayed));
}

#[test]
fn a_credential_past_its_time_to_live_is_expired() {
    let m = Munged::start();
    let c = m.client();
    let made = Instant::now();
    let cred = c.encode(b"short", None, Some(1)).unwrap();
    let mut answers = vec![code(c.decode(&cred))];
    // munged counts whole seconds: a credential made at second t with a time to live of 1
    // is expired from second t + 2, so within three seconds; munged checks the time before
    // the replay cache, so each look after the first says replayed until then.
    wait_for("the credential to expire", Duration::from_secs(10), || {
        answers.push(code(c.decode(&cred)));
        answers.last() == Some(&"expired")
    });
    answers.dedup();
    assert_eq!(answers, ["ok", "replayed", "expired"]);
    assert!(
        made.elapsed() >= Duration::from_secs(1),
        "{:?}",
        made.elapsed()
    );
}

#[test]
fn a_credential_of_another_key_is_invalid() {
    let a = Munged::start();
    let b = Munged::start();
    let from_b = b.client().encode(b"other site", None, None).unwrap();
    match a.client().decode(&from_b) {
        Err(MungeError::Invalid { code, .. }) => assert_eq!(code, 14, "EMUNGE_CRED_INVALID"),
        other => panic!("{other:?}"),
    }
    // The credential itself is good: b decodes it.
    assert_eq!(b.client().decode(&from_b).unwrap().payload, b"other site");
}

#[test]
fn garbage_nul_and_oversized_input_are_refused_without_a_panic() {
    let m = Munged::start();
    let c = m.client();
    let good = c.encode(b"payload", None, None).unwrap();
    // One character of the armoured body changed: the MAC no longer matches.
    let mut tampered = good.clone().into_bytes();
    let mid = tampered.len() / 2;
    tampered[mid] = if tampered[mid] == b'A' { b'B' } else { b'A' };
    let garbage: &[(&[u8], &str)] = &[
        (b"", "other"),
        (b"   ", "other"),
        (b"hello", "invalid"),
        (b"MUNGE:", "invalid"),
        (b"MUNGE::", "invalid"),
        (b"MUNGE:AAAA:", "invalid"),
        (b"MUNGE:\xff\xfe\x80:", "invalid"),
        (&[0xff; 300], "invalid"),
        (&tampered, "invalid"),
        (b"MUNGE:\0:", "nul"),
        (&[b'A'; MAX_CREDENTIAL + 1], "too_long"),
    ];
    for (input, want) in garbage {
        let got = c.decode(input);
        assert_eq!(
            code(got.clone()),
            *want,
            "{:?}: {got:?}",
            String::from_utf8_lossy(&input[..input.len().min(40)])
        );
    }
    // Refusals do not use the good credential up.
    assert_eq!(c.decode(&good).unwrap().payload, b"payload");
    assert_eq!(
        code(c.encode(&vec![0; MAX_PAYLOAD + 1], None, None)),
        "too_long"
    );
}

#[test]
fn no_munged_at_the_socket_is_a_socket_error() {
    let dir = tempfile::tempdir().unwrap();
    let c = Munge::open(Some(&dir.path().join("no-socket"))).unwrap();
    assert_eq!(code(c.encode(b"", None, None)), "socket");
    assert_eq!(code(c.decode("MUNGE:AAAA:")), "socket");
    assert_eq!(
        code(Munge::open(Some(Path::new("/a\0b")))),
        "nul",
        "a path with a NUL"
    );
}

#[test]
fn a_client_is_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Munge>();
    let m = Munged::start();
    let c = m.client();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let c = &c;
            s.spawn(move || {
                for i in 0..25u8 {
                    let cred = c.encode(&[t, i], None, None).unwrap();
                    assert_eq!(c.decode(&cred).unwrap().payload, [t, i]);
                }
            });
        }
    });
}

/// Every buffer libmunge returns is freed: the credential, the payload of a good decode and
/// that of a replayed one (which libmunge returns too). Leaking them would cost some 14 KiB
/// a round, 55 MiB over the rounds below; the process's resident size may move by a few
/// pages only (other tests run in this process at the same time, hence the margin).
#[test]
fn encoding_and_decoding_leak_no_memory() {
    fn resident_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
    let m = Munged::start();
    let c = m.client();
    let payload = vec![0x5a; MAX_PAYLOAD];
    let rounds = |n: usize| {
        for _ in 0..n {
            let cred = c.encode(&payload, None, None).unwrap();
            assert_eq!(c.decode(&cred).unwrap().payload.len(), MAX_PAYLOAD);
            assert_eq!(c.decode(&cred), Err(MungeError::Replayed));
            assert_eq!(code(c.decode("MUNGE:AAAA:")), "invalid");
        }
    };
    // Warm up: the allocator's arenas and the library's own first allocations.
    rounds(500);
    let before = resident_kib();
    rounds(4000);
    let after = resident_kib();
    assert!(
        after < before + 16 * 1024,
        "resident size grew from {before} KiB to {after} KiB over 4000 rounds"
    );
}
