//! Attacks on a root daemon in system-wide mode (issue 7), by real users alice and bob,
//! with the fake Slurm. One test per numbered item of the issue, each run as the attack
//! and asserting the fixed behaviour, plus the variations an attacker tries next.
//!
//! Needs root (the daemon runs as root and acts as alice and bob; users are created with
//! `useradd -m` if missing). Run with `cargo test --test security -- --test-threads=8`.

mod common;

use common::fake::wait_until;
use common::system::*;
use common::*;
use serde_json::{json, Value};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// Small helpers

fn err_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn out_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A helper process run as a user, driven through its stdin and reporting JSON lines.
struct Helper {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Helper {
    fn start(mut cmd: Command) -> Helper {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Helper {
            child,
            stdin,
            stdout,
        }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.stdout.read_line(&mut l).unwrap();
        l
    }

    fn json_line(&mut self) -> Value {
        let l = self.line();
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("helper printed {l:?}: {e}"))
    }

    /// Closes its stdin (the signal to stop) and returns its last JSON line.
    fn finish(mut self) -> Value {
        drop(self.stdin.take());
        let v = self.json_line();
        let _ = self.child.wait();
        v
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts that `user`'s command (`args`) succeeds within `within` (`during`: what was going
/// on, for the message).
fn answers_quickly(sys: &System, user: &str, args: &[&str], within: Duration, during: &str) {
    let t = sys.as_user_within(user, args, within.max(Duration::from_secs(10)));
    match &t.output {
        None => panic!(
            "{user}'s `{}` got no answer within {:?} while {during}",
            args.join(" "),
            t.took
        ),
        Some(o) => {
            assert!(
                o.status.success(),
                "{user}'s `{}` failed while {during} ({:?}): {}",
                args.join(" "),
                o.status.code(),
                err_text(o)
            );
            assert!(
                t.took <= within,
                "{user}'s `{}` took {:?} (more than {within:?}) while {during}",
                args.join(" "),
                t.took
            );
        }
    }
}

/// Every string inside a JSON value.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// The pending rows of `user`, by Slurm job id.
fn pending_by_job(sys: &System, user: &str) -> std::collections::HashMap<String, Value> {
    sys.json_as(user, &["pending", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["slurm_job_id"].as_str().unwrap_or("").to_string(),
                r.clone(),
            )
        })
        .collect()
}

/// Whether a piece of evidence is absent (null or empty).
fn absent(v: &Value) -> bool {
    v.is_null() || v.as_str().is_some_and(|s| s.is_empty())
}

/// The request `supervisorctl submit -- <args>` sends, caught on a socket of our own.
fn capture_submit(sys: &System, user: &str, args: &[&OsStr], cwd: &Path) -> Value {
    use std::os::unix::net::UnixListener;
    let dir = tempfile::Builder::new()
        .prefix("capture-")
        .tempdir_in(sys.root())
        .unwrap();
    chmod(dir.path(), 0o755);
    let sock = dir.path().join("c.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    chmod(&sock, 0o666);
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = {:?}\nsocket = {:?}\n",
            dir.path().join("state").display().to_string(),
            sock.display().to_string()
        ),
    )
    .unwrap();
    chmod(&cfg, 0o644);
    let mut cmd = sys.user_command(user, &sys.ctl);
    cmd.arg("--config")
        .arg(&cfg)
        .args(["submit", "--"])
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut conn, _) = loop {
        match listener.accept() {
            Ok(c) => break c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "the client never connected");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    conn.set_nonblocking(false).unwrap();
    let mut line = Vec::new();
    BufReader::new(&conn).read_until(b'\n', &mut line).unwrap();
    conn.write_all(b"{\"error\":{\"kind\":\"usage\",\"message\":\"captured\"}}\n")
        .unwrap();
    drop(conn);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", err_text(&out));
    serde_json::from_slice(&line)
        .unwrap_or_else(|e| panic!("the client sent {:?}: {e}", String::from_utf8_lossy(&line)))
}

/// A text field of a request as bytes: a JSON string, or an array of byte values.
fn field_bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Array(a) if a.iter().all(Value::is_u64) => {
            a.iter().map(|x| x.as_u64().unwrap() as u8).collect()
        }
        other => panic!(
            "a request field is neither a string nor bytes (update this test to the protocol): {other}"
        ),
    }
}

/// `bytes` in the form `like` has (a string stays a string).
fn same_form(like: &Value, bytes: &[u8]) -> Value {
    match like {
        Value::String(_) => Value::String(String::from_utf8(bytes.to_vec()).unwrap()),
        _ => json!(bytes),
    }
}

fn raw_json(sys: &System, user: &str, request: &Value) -> Value {
    let mut line = serde_json::to_vec(request).unwrap();
    line.push(b'\n');
    let answer = sys.raw_request_as(user, &line);
    serde_json::from_slice(&answer).unwrap_or_else(|e| {
        panic!(
            "the daemon answered {:?}: {e}",
            String::from_utf8_lossy(&answer)
        )
    })
}

/// Seconds since the epoch, as the fake's logs have them.
fn wall_clock() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn script(body: &str) -> Vec<u8> {
    format!("#!/bin/bash\n{body}\n").into_bytes()
}

// ---------------------------------------------------------------------------------------
// Item 1: script snapshots

/// Run as bob: opens every path it can (read-write if it may), then, until its stdin
/// closes, reads each descriptor over and over; whatever is neither bob's own script nor
/// his payload is recorded as seen, and replaced by his payload.
const SNAPSHOT_THIEF: &str = r##"
import json, os, sys, threading, time
own = bytes.fromhex(sys.argv[1])
EVIL = b"#!/bin/bash\necho bob was here; touch /tmp/ssv-owned-by-bob\n"
fds = {}
for p in sys.argv[2:]:
    for flags in (os.O_RDWR, os.O_RDONLY):
        try:
            fds[p] = (os.open(p, flags | os.O_NOFOLLOW | os.O_NONBLOCK), flags == os.O_RDWR)
            break
        except OSError:
            pass
print(json.dumps({"opened": sorted(fds)}), flush=True)
seen, changed, stop = [], [], False
def attack():
    while not stop:
        for p, (fd, rw) in fds.items():
            try:
                data = os.pread(fd, 1 << 20, 0)
            except OSError:
                continue
            if data and data != EVIL and data != own:
                if data.hex() not in seen:
                    seen.append(data.hex())
                if rw:
                    try:
                        os.ftruncate(fd, 0)
                        os.pwrite(fd, EVIL, 0)
                        changed.append(p)
                    except OSError:
                        pass
        time.sleep(0.0002)
t = threading.Thread(target=attack)
t.start()
sys.stdin.read()
stop = True
t.join()
print(json.dumps({"seen": seen, "changed": sorted(set(changed))}), flush=True)
"##;

/// Whether `user` can open `path` for reading.
fn can_open(sys: &System, user: &str, path: &Path) -> bool {
    sys.python_as(
        user,
        "import os,sys\nos.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)",
    )
    .arg(path)
    .stderr(Stdio::null())
    .status()
    .unwrap()
    .success()
}

#[test]
fn item01_a_refused_submission_leaves_no_snapshot_for_its_owner_to_hold() {
    let sys = System::start("", "");
    let scripts_dir = sys.state_dir().join("scripts");
    // bob's submission is refused by sbatch.
    sys.fake.ctl(&["mode", "sbatch@bob", "reject"]);
    let bob_script = script("echo bob's own job");
    sys.write_as("bob", "job.sh", &bob_script);
    let out = sys.as_user("bob", &["submit", "--", "job.sh"]);
    assert!(!out.status.success(), "sbatch refused bob's submission");
    let left_after_refusal = files_under(&scripts_dir);

    // bob holds whatever he can open there: what is left, and the paths he can guess.
    let mut candidates: Vec<PathBuf> = left_after_refusal.clone();
    for n in 1..=20 {
        candidates.push(scripts_dir.join(format!("L{n}")).join("job.sh"));
    }
    let mut cmd = sys.python_as("bob", SNAPSHOT_THIEF);
    cmd.arg(hex(&bob_script)).args(&candidates);
    let mut thief = Helper::start(cmd);
    let opened = thief.json_line();

    // alice submits a script of the same name, twice; the second sbatch waits at a gate
    // until bob has looked, so a snapshot (if any) exists while he looks for it.
    let alice_script = script("echo alice secret 7f3a; ./train --data /home/alice/private");
    sys.write_as("alice", "job.sh", &alice_script);
    sys.submit_as("alice", &["job.sh"]);
    let left_after_alice = files_under(&scripts_dir);
    let mut slow = sys.ctl_command("alice", &["submit", "--", "job.sh"]);
    let gate = sys.fake.gate("alice");
    slow.env("SSV_FAKE_SBATCH_GATE", &gate)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let slow = slow.spawn().unwrap();
    wait_until("alice's second sbatch", Duration::from_secs(30), || {
        sys.sbatch_calls_of("alice").len() == 2
    });
    let during: Vec<(PathBuf, bool)> = files_under(&scripts_dir)
        .into_iter()
        .map(|p| {
            let ok = can_open(&sys, "bob", &p);
            (p, ok)
        })
        .collect();
    let placement: Vec<String> = files_under(&scripts_dir)
        .iter()
        .filter_map(|p| {
            let dir = p.parent()?.metadata().ok()?;
            (dir.uid() != 0 || dir.mode() & 0o022 != 0).then(|| {
                format!(
                    "{} (folder uid {}, mode {:o})",
                    p.display(),
                    dir.uid(),
                    dir.mode()
                )
            })
        })
        .collect();
    sys.fake.open(&gate);
    let slow = slow.wait_with_output().unwrap();
    assert!(slow.status.success(), "{}", err_text(&slow));
    let left_at_end = files_under(&scripts_dir);
    let stolen = thief.finish();

    // alice's sbatch read alice's bytes, every time.
    let calls = sys.sbatch_calls_of("alice");
    assert_eq!(calls.len(), 2);
    for c in &calls {
        let given: Vec<&Value> = c["scripts"].as_array().unwrap().iter().collect();
        assert!(
            !given.is_empty(),
            "the fake sbatch, running as alice, could not read the script it was given: {c:#}"
        );
        for s in given {
            assert_eq!(
                s["head_hex"].as_str().unwrap(),
                hex(&alice_script),
                "alice's sbatch did not run alice's script (bob's thief: {stolen}): {c:#}"
            );
        }
    }
    // bob neither saw nor changed alice's script through a descriptor of his.
    assert!(
        stolen["seen"].as_array().unwrap().is_empty() && stolen["changed"].as_array().unwrap().is_empty(),
        "bob read alice's script through descriptors he opened ({opened}) after his refused submission: {stolen}"
    );
    assert!(
        during.iter().all(|(_, ok)| !ok),
        "bob could open alice's snapshot during her sbatch: {during:?}"
    );
    assert!(
        placement.is_empty(),
        "snapshots in folders others can write: {placement:?}"
    );
    // No snapshot is left once sbatch has answered, whatever it answered.
    assert!(
        left_after_refusal.is_empty(),
        "bob's refused submission left {left_after_refusal:?}"
    );
    assert!(left_after_alice.is_empty(), "left {left_after_alice:?}");
    assert!(left_at_end.is_empty(), "left {left_at_end:?}");
    // bob can plant nothing where the daemon keeps its snapshots.
    for d in [sys.state_dir(), scripts_dir.clone()] {
        let planted = sys
            .python_as(
                "bob",
                "import os,sys\nos.mkdir(os.path.join(sys.argv[1], 'L99'))",
            )
            .arg(&d)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(
            !planted.success(),
            "bob could create a folder in {}",
            d.display()
        );
    }
}

// ---------------------------------------------------------------------------------------
// Item 2: output paths the daemon reads as evidence

/// A new pseudo-terminal whose slave belongs to `owner`: (master, slave path).
fn open_pty(owner: &str) -> (std::fs::File, PathBuf) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain libc calls on a descriptor we own; the name buffer is ours.
    unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert_eq!(libc::grantpt(fd), 0);
        assert_eq!(libc::unlockpt(fd), 0);
        let mut buf = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(fd, buf.as_mut_ptr(), buf.len()), 0);
        let name = std::ffi::CStr::from_ptr(buf.as_ptr())
            .to_str()
            .unwrap()
            .to_string();
        let master = std::fs::File::from_raw_fd(fd);
        chown(Path::new(&name), owner);
        (master, PathBuf::from(name))
    }
}

/// The daemon is still running, and keeps running for a moment (signals are delivered
/// asynchronously).
fn still_running(sys: &mut System, tty: i64, after: &str) {
    for _ in 0..10 {
        if let Some(st) = sys.alive() {
            panic!(
                "the daemon exited ({st}) after {after}; its controlling terminal was tty_nr {tty} \
                 (0: none); log tail:\n{}",
                tail(&sys.d.log(), 20)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn item02_a_terminal_as_output_never_becomes_the_daemons() {
    let mut sys = System::start("", "");
    let pid = sys.pid();
    assert_eq!(
        tty_nr(pid),
        0,
        "started without a terminal, as under systemd"
    );
    let (mut bob_master, bob_pts) = open_pty("bob");
    // The same through another user's terminal (bob cannot type on it, alice can).
    let (mut alice_master, alice_pts) = open_pty("alice");
    sys.write_as("bob", "job.sh", &script("exit 1"));
    let bob_pts_s = bob_pts.display().to_string();
    let alice_pts_s = alice_pts.display().to_string();
    let j1 = sys.submit_as("bob", &["-o", &bob_pts_s, "-e", &bob_pts_s, "job.sh"]);
    let j2 = sys.submit_as(
        "bob",
        &[
            &format!("--output={alice_pts_s}"),
            &format!("--error={bob_pts_s}"),
            "job.sh",
        ],
    );
    let j3 = sys.submit_as(
        "bob",
        &["--error=/dev/tty", "--output=/dev/console", "job.sh"],
    );
    for j in [&j1, &j2, &j3] {
        sys.fake.ctl(&["finish", j, "FAILED", "1:0"]);
    }
    for j in [&j1, &j2, &j3] {
        sys.d
            .wait_state(j, "pending_failed", Duration::from_secs(30));
    }
    let tty_after_evidence = tty_nr(pid);
    // bob types ^C on his terminal, alice on hers; then both close them.
    bob_master.write_all(b"\x03").unwrap();
    alice_master.write_all(b"\x03").unwrap();
    still_running(
        &mut sys,
        tty_after_evidence,
        "bob typed ^C on the terminal he gave as his job's output",
    );
    drop(bob_master);
    drop(alice_master);
    still_running(
        &mut sys,
        tty_after_evidence,
        "bob closed the terminal he gave as his job's output",
    );
    answers_quickly(
        &sys,
        "alice",
        &["status", "--json"],
        Duration::from_secs(2),
        "bob's terminals were closed",
    );
    assert_eq!(
        tty_after_evidence, 0,
        "reading bob's job output made {bob_pts_s} (or {alice_pts_s}) the daemon's controlling terminal"
    );
    assert_eq!(tty_nr(pid), 0);
    for (j, row) in pending_by_job(&sys, "bob") {
        let ev = &row["evidence"];
        assert!(
            absent(&ev["stderr_tail"]) && absent(&ev["stdout_tail"]),
            "evidence of {j} read from a terminal: {ev:#}"
        );
    }
}

/// Run as bob: opens a FIFO read-write (so it never blocks) and puts data in it, so a
/// reader would find something; holds it until stdin closes.
const FIFO_FEEDER: &str = r##"
import json, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_NONBLOCK)
os.write(fd, b"FIFO-DATA-READ-BY-DAEMON\n")
print(json.dumps({"ok": True}), flush=True)
sys.stdin.read()
print(json.dumps({"ok": True}), flush=True)
"##;

#[test]
fn item02_device_files_fifos_and_links_as_output_are_never_read() {
    let sys = System::start("", "");
    let bob = sys.home("bob");
    let alice = sys.home("alice");
    sys.write_as("alice", "secret.txt", b"ALICE-SECRET-1\n");
    let root_file = sys.root().join("root-secret.txt");
    std::fs::write(&root_file, "ROOT-SECRET-2\n").unwrap();
    chmod(&root_file, 0o600);
    std::fs::hard_link(&root_file, bob.join("root-link")).unwrap();
    std::os::unix::fs::symlink(alice.join("secret.txt"), bob.join("alice-link")).unwrap();
    chown(&bob.join("alice-link"), "bob");
    std::os::unix::fs::symlink(&alice, bob.join("via")).unwrap();
    chown(&bob.join("via"), "bob");
    nix::unistd::mkfifo(
        &bob.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    chown(&bob.join("fifo"), "bob");
    sys.write_as("bob", "own.txt", b"BOB-OWN-OUTPUT\n");
    let mut cmd = sys.python_as("bob", FIFO_FEEDER);
    cmd.arg(bob.join("fifo"));
    let mut feeder = Helper::start(cmd);
    feeder.json_line();
    sys.write_as("bob", "job.sh", &script("exit 1"));

    let p = |n: &str| bob.join(n).display().to_string();
    let cases: Vec<(&str, String)> = vec![
        ("/dev/zero", "/dev/zero".into()),
        ("/dev/urandom", "/dev/urandom".into()),
        ("/dev/stderr", "/dev/stderr".into()),
        ("/proc/self/environ", "/proc/self/environ".into()),
        ("a FIFO holding data", p("fifo")),
        ("a symlink to alice's file", p("alice-link")),
        ("a hard link to root's file", p("root-link")),
        (
            "a path through a symlink to alice's folder",
            format!("{}/secret.txt", p("via")),
        ),
        ("bob's own file (control)", p("own.txt")),
    ];
    let mut jobs = Vec::new();
    for (what, path) in &cases {
        let j = sys.submit_as("bob", &["-o", path, "-e", path, "job.sh"]);
        jobs.push((j, *what));
    }
    for (j, _) in &jobs {
        sys.fake.ctl(&["finish", j, "FAILED", "1:0"]);
    }
    for (j, _) in &jobs {
        sys.d
            .wait_state(j, "pending_failed", Duration::from_secs(30));
    }
    answers_quickly(
        &sys,
        "alice",
        &["status", "--json"],
        Duration::from_secs(2),
        "bob's odd outputs were judged",
    );
    let rows = pending_by_job(&sys, "bob");
    for (j, what) in &jobs {
        let ev = &rows[j]["evidence"];
        let err = ev["stderr_tail"].as_str().unwrap_or("");
        if what.contains("control") {
            assert!(
                err.contains("BOB-OWN-OUTPUT"),
                "bob's own output is evidence: {ev:#}"
            );
            continue;
        }
        assert!(
            absent(&ev["stderr_tail"]) && absent(&ev["stdout_tail"]),
            "{what} was read as evidence of {j}: {ev:#}"
        );
    }
    assert_eq!(tty_nr(sys.pid()), 0);
    feeder.finish();
}

/// Run as bob: swaps what his output paths are, as fast as it can, until stdin closes:
/// `out.txt` is his own file, a symlink to alice's secret, or a FIFO; `sub` is a symlink
/// to his own folder or to alice's.
const SWAPPER: &str = r##"
import json, os, sys, threading
d, secret, alice_dir = sys.argv[1], sys.argv[2], sys.argv[3]
own_dir = os.path.join(d, "own")
P, D, T = os.path.join(d, "out.txt"), os.path.join(d, "sub"), os.path.join(d, ".tmp")
stop = False
def watch():
    global stop
    sys.stdin.read()
    stop = True
threading.Thread(target=watch, daemon=True).start()
print(json.dumps({"ok": True}), flush=True)
n = 0
while not stop:
    for make in (
        lambda: open(T, "w").write("BOB-OK\n"),
        lambda: os.symlink(secret, T),
        lambda: os.mkfifo(T),
    ):
        try:
            os.unlink(T)
        except FileNotFoundError:
            pass
        make()
        os.rename(T, P)
    for target in (own_dir, alice_dir):
        try:
            os.unlink(T)
        except FileNotFoundError:
            pass
        os.symlink(target, T)
        os.rename(T, D)
    n += 1
print(json.dumps({"rounds": n}), flush=True)
"##;

#[test]
fn item02_an_output_path_swapped_between_check_and_use_is_never_followed() {
    let sys = System::start("", "");
    let bob = sys.home("bob");
    let alice = sys.home("alice");
    sys.write_as("alice", "out.txt", b"ALICE-SECRET-3\n");
    std::fs::create_dir(bob.join("own")).unwrap();
    chown(&bob.join("own"), "bob");
    let own_out = bob.join("own").join("out.txt");
    std::fs::write(&own_out, "BOB-OK\n").unwrap();
    chown(&own_out, "bob");
    sys.write_as("bob", "job.sh", &script("exit 1"));
    let out = bob.join("out.txt").display().to_string();
    let through = bob.join("sub").join("out.txt").display().to_string();
    let mut jobs = Vec::new();
    for i in 0..16 {
        let path = if i % 2 == 0 { &out } else { &through };
        jobs.push(sys.submit_as("bob", &["-o", path, "job.sh"]));
    }
    let mut cmd = sys.python_as("bob", SWAPPER);
    cmd.arg(&bob).arg(alice.join("out.txt")).arg(&alice);
    let mut swapper = Helper::start(cmd);
    swapper.json_line();
    for j in &jobs {
        sys.fake.ctl(&["finish", j, "FAILED", "1:0"]);
    }
    for j in &jobs {
        sys.d
            .wait_state(j, "pending_failed", Duration::from_secs(60));
    }
    let rounds = swapper.finish();
    answers_quickly(
        &sys,
        "alice",
        &["status", "--json"],
        Duration::from_secs(2),
        "bob swapped his outputs",
    );
    let rows = pending_by_job(&sys, "bob");
    for j in &jobs {
        let ev = &rows[j]["evidence"];
        for k in ["stderr_tail", "stdout_tail"] {
            let s = ev[k].as_str().unwrap_or("");
            assert!(
                s.is_empty() || s.trim() == "BOB-OK",
                "{j}'s {k} is {s:?} (swapper: {rounds}): only bob's own file may be read"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Item 3: one user starving everyone

/// Run as bob: keeps `want` connections open without sending anything, reopening each
/// as the daemon closes it, until stdin closes; reports what the daemon said.
const IDLER: &str = r##"
import json, selectors, socket, sys, threading, time
path, want = sys.argv[1], int(sys.argv[2])
sel = selectors.DefaultSelector()
n_open, closed, lines, errors, stop = 0, 0, {}, {}, False
def watch():
    global stop
    sys.stdin.read()
    stop = True
threading.Thread(target=watch, daemon=True).start()
def connect():
    global n_open
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(path)
    except OSError as e:
        s.close()
        errors[e.strerror] = errors.get(e.strerror, 0) + 1
        return False
    sel.register(s, selectors.EVENT_READ)
    n_open += 1
    return True
t0, ready = time.time(), False
while not stop:
    while n_open < want and not stop:
        if not connect():
            break
    if not ready and (n_open >= want or time.time() - t0 > 3):
        print(json.dumps({"open": n_open}), flush=True)
        ready = True
    for key, _ in sel.select(timeout=0.05):
        s = key.fileobj
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if data:
            l = data.decode(errors="replace").strip()[:300]
            lines[l] = lines.get(l, 0) + 1
        sel.unregister(s)
        s.close()
        n_open -= 1
        closed += 1
print(json.dumps({"open": n_open, "closed": closed, "lines": lines, "errors": errors}), flush=True)
"##;

#[test]
fn item03_idle_connections_of_one_user_do_not_delay_another() {
    let sys = System::start("", "");
    sys.write_as("alice", "job.sh", &script("echo hi"));
    let mut cmd = sys.python_as("bob", IDLER);
    cmd.arg(&sys.socket).arg("600");
    let mut idler = Helper::start(cmd);
    let started = idler.json_line();
    for _ in 0..3 {
        answers_quickly(
            &sys,
            "alice",
            &["status", "--json"],
            Duration::from_secs(2),
            &format!("bob held idle connections ({started})"),
        );
    }
    let t = run_within(
        sys.ctl_command("alice", &["submit", "--", "job.sh"]),
        Duration::from_secs(30),
    );
    let report = idler.finish();
    let o = t.output.unwrap_or_else(|| {
        panic!(
            "alice's submit got no answer within 30s while bob held 600 idle connections: {report}"
        )
    });
    assert!(o.status.success(), "{}", err_text(&o));
    assert!(
        t.took < Duration::from_secs(5),
        "alice's submit took {:?} while bob held 600 idle connections",
        t.took
    );
    let said: Vec<&String> = report["lines"].as_object().unwrap().keys().collect();
    assert!(
        said.iter().any(|l| l.contains("limits.connections_per_user")),
        "bob's connections over the limit are told so, naming limits.connections_per_user: {report}"
    );
}

/// Run as bob: one connection that sends a byte at a time (never a newline), and one that
/// sends 100 MB without a newline; reports how long the daemon kept each.
const SLOW_AND_FAT: &str = r##"
import json, socket, sys, time
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
t0 = time.time()
slow = None
while time.time() - t0 < 30:
    try:
        s.send(b"{")
    except OSError:
        slow = time.time() - t0
        break
    s.settimeout(0.3)
    try:
        if s.recv(4096) == b"":
            slow = time.time() - t0
            break
        slow = time.time() - t0
        break
    except socket.timeout:
        pass
f = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
f.connect(path)
f.settimeout(30)
sent, chunk = 0, b"x" * (1 << 20)
try:
    while sent < (100 << 20):
        f.sendall(chunk)
        sent += len(chunk)
except OSError:
    pass
answer = b""
try:
    answer = f.recv(4096)
except OSError:
    pass
print(json.dumps({"slow_closed_after": slow, "fat_sent": sent, "fat_answer": answer.decode(errors="replace")}), flush=True)
"##;

#[test]
fn item03_slow_and_oversized_requests_are_cut_off() {
    let sys = System::start("", "");
    let mut cmd = sys.python_as("bob", SLOW_AND_FAT);
    cmd.arg(&sys.socket);
    let mut h = Helper::start(cmd);
    answers_quickly(
        &sys,
        "alice",
        &["status", "--json"],
        Duration::from_secs(2),
        "bob trickled a request",
    );
    let r = h.json_line();
    let slow = r["slow_closed_after"].as_f64();
    assert!(
        slow.is_some_and(|s| s < 8.0),
        "a connection that never finishes its request line is closed after limits.request_timeout (5s): {r}"
    );
    assert!(
        r["fat_sent"].as_u64().unwrap() < 100 << 20,
        "a 100 MB request line is cut off before it is all read: {r}"
    );
    answers_quickly(
        &sys,
        "alice",
        &["status", "--json"],
        Duration::from_secs(2),
        "bob sent a huge request",
    );
}

/// Run as bob: asks for something large on `n` connections and never reads the answers,
/// holding the connections until stdin closes. The daemon answers a connection over bob's
/// share with its refusal and closes it, which may be before the request is sent: such a
/// send fails (broken pipe) and the connection is counted as refused, not as a failure.
const DEAF: &str = r##"
import json, socket, sys
path, n = sys.argv[1], int(sys.argv[2])
held, refused = [], 0
for _ in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(path)
    try:
        s.sendall(b'{"cmd":"pending"}\n')
    except (BrokenPipeError, ConnectionResetError):
        refused += 1
    held.append(s)
print(json.dumps({"held": len(held), "refused_before_sending": refused}), flush=True)
sys.stdin.read()
print(json.dumps({"done": True}), flush=True)
"##;

#[test]
fn item03_answers_nobody_reads_do_not_block_the_daemon() {
    // The fake's commands get time to spare: building bob's answers takes CPU from them.
    let sys = System::start("command_timeout = \"30s\"", "");
    // Scripts of 200 KB of NUL bytes make bob's `pending` answer (which shows them, each
    // byte as `\u0000`) 2.4 MB, far larger than a socket's buffer (about 200 KB), from
    // small requests. (Larger ones only cost CPU, which the rest of the test needs.)
    let mut big = script("exit 1");
    big.extend(std::iter::repeat_n(0u8, 200_000));
    sys.write_as("bob", "big.sh", &big);
    sys.write_as("alice", "job.sh", &script("echo hi"));
    let jobs: Vec<String> = (0..2).map(|_| sys.submit_as("bob", &["big.sh"])).collect();
    for job in &jobs {
        sys.fake.ctl(&["finish", job, "FAILED", "1:0"]);
    }
    for job in &jobs {
        sys.d
            .wait_state(job, "pending_failed", Duration::from_secs(30));
    }
    let mut cmd = sys.python_as("bob", DEAF);
    cmd.arg(&sys.socket).arg("40");
    let mut deaf = Helper::start(cmd);
    deaf.json_line();
    // For as long as the daemon may be busy with bob's answers. Held behind them, alice
    // would wait until they are dropped (30 s, `WRITE_TIMEOUT`): the bounds leave a busy
    // machine room and still tell the two apart.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        answers_quickly(
            &sys,
            "alice",
            &["status", "--json"],
            Duration::from_secs(8),
            "bob left large answers unread",
        );
    }
    answers_quickly(
        &sys,
        "alice",
        &["submit", "--", "job.sh"],
        Duration::from_secs(15),
        "bob left large answers unread",
    );
    // The daemon's own work goes on: a job that ends is judged.
    let j = sys.submit_as("alice", &["job.sh"]);
    sys.fake.ctl(&["finish", &j, "FAILED", "1:0"]);
    sys.d
        .wait_state(&j, "pending_failed", Duration::from_secs(30));
    deaf.finish();
    // bob's own slots come back once his deaf connections are gone: each is given back
    // when its answer (still being built on a busy machine) is done with,
    // and until then bob is told, with exit code 75, to close some and try again.
    wait_until(
        "bob's connection slots to come back",
        Duration::from_secs(120),
        || {
            let o = sys.as_user("bob", &["status", "--json"]);
            let refused =
                o.status.code() == Some(75) && err_text(&o).contains("limits.connections_per_user");
            assert!(
                o.status.success() || refused,
                "bob's `status --json` failed otherwise than by his share ({:?}): {}",
                o.status.code(),
                err_text(&o)
            );
            o.status.success()
        },
    );
    // (His answer is MBs of JSON, so this asks only that it comes, not how fast.)
    answers_quickly(
        &sys,
        "bob",
        &["pending", "--json"],
        Duration::from_secs(60),
        "bob's unread answers were dropped",
    );
}

/// The calls of the fake's `cmd` (`calls.log`): who ran each (uid) and its pid, in order.
fn calls_of(sys: &System, cmd: &str) -> Vec<(u64, i32)> {
    std::fs::read_to_string(sys.fake.bin.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["cmd"] == cmd)
        .filter_map(|v| Some((v["uid"].as_u64()?, v["pid"].as_i64()? as i32)))
        .collect()
}

/// Whether process `pid` is stopped (state `T` in /proc/PID/stat).
fn is_stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
        .unwrap_or(false)
}

#[test]
fn item03_a_cancel_whose_scancel_its_owner_stops_does_not_delay_another() {
    // The daemon would kill the stopped scancel only after [slurm] command_timeout: long
    // enough here that everything below happens while it is held, however slow the host.
    let sys = System::start("command_timeout = \"300s\"", "");
    sys.write_as("alice", "job.sh", &script("echo hi"));
    sys.write_as("bob", "job.sh", &script("echo hi"));
    let job = sys.submit_as("bob", &["job.sh"]);
    let bob = User::get("bob").uid as u64;
    // bob stops his own scancel (it runs as him).
    sys.fake.ctl(&["mode", "scancel@bob", "stop"]);
    let mut c = sys.ctl_command("bob", &["cancel", &job]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut held = c.spawn().unwrap();
    let mut scancel = 0;
    wait_until(
        "bob's scancel to stop",
        Duration::from_secs(60),
        || match calls_of(&sys, "scancel").first() {
            Some(&(uid, pid)) if uid == bob && is_stopped(pid) => {
                scancel = pid;
                true
            }
            _ => false,
        },
    );
    // alice is answered while bob's cancel still waits for his scancel (awaited on the
    // daemon's loop, her submit would wait for it too).
    let t = sys.as_user_within(
        "alice",
        &["submit", "--", "job.sh"],
        Duration::from_secs(60),
    );
    let o = t.output.unwrap_or_else(|| {
        panic!(
            "alice's submit got no answer within {:?} while bob's scancel was stopped",
            t.took
        )
    });
    assert!(o.status.success(), "{}", err_text(&o));
    assert!(
        held.try_wait().unwrap().is_none() && is_stopped(scancel),
        "bob's cancel was answered before alice's submit, or his scancel ran"
    );
    // A second cancel of the same chain meanwhile is told to wait; nothing else starts.
    let again = sys
        .as_user_within("bob", &["cancel", &job], Duration::from_secs(60))
        .output
        .expect("a second cancel is answered at once");
    assert_eq!(again.status.code(), Some(75), "{}", err_text(&again));
    assert!(
        err_text(&again).contains("being cancelled already"),
        "{}",
        err_text(&again)
    );
    assert!(held.try_wait().unwrap().is_none());
    // Once bob lets his scancel go on, the cancel goes through.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(scancel),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    let first = held.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", err_text(&first));
    let state = sys.json_as("bob", &["status", &job, "--json"])[0]["state"].clone();
    assert_eq!(state, "cancelled");
    assert_eq!(
        sys.fake.jobs()[&job]["state"],
        "CANCELLED by 0",
        "the job was cancelled in Slurm"
    );
    let callers: Vec<u64> = calls_of(&sys, "scancel").iter().map(|c| c.0).collect();
    assert_eq!(callers, vec![bob], "one scancel, bob's");
}

/// root (an admin) cancelling bob's chain: the scancel, now run beside the loop, still
/// runs as bob, never as root.
#[test]
fn an_admins_cancel_of_a_users_chain_runs_scancel_as_the_user() {
    let sys = System::start("", "");
    sys.write_as("bob", "job.sh", &script("echo hi"));
    let job = sys.submit_as("bob", &["job.sh"]);
    let o = Command::new(&sys.ctl)
        .arg("--config")
        .arg(&sys.d.config)
        .args(["cancel", &job])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", err_text(&o));
    let callers: Vec<u64> = calls_of(&sys, "scancel").iter().map(|c| c.0).collect();
    assert_eq!(
        callers,
        vec![User::get("bob").uid as u64],
        "one scancel, as bob"
    );
    let state = sys.json_as("bob", &["status", &job, "--json"])[0]["state"].clone();
    assert_eq!(state, "cancelled");
}

/// A cancel whose scancel went through but whose answer was lost is not told "nothing
/// changed": its jobs may have been cancelled, and the next poll records that they were.
#[test]
fn a_cancel_whose_scancel_reply_is_lost_does_not_say_nothing_changed() {
    let sys = System::start("", "");
    sys.write_as("bob", "job.sh", &script("echo hi"));
    let job = sys.submit_as("bob", &["job.sh"]);
    sys.fake.ctl(&["mode", "scancel", "lost-reply"]);
    let o = sys.as_user("bob", &["cancel", &job]);
    assert_eq!(o.status.code(), Some(75), "{}", err_text(&o));
    assert!(
        !err_text(&o).contains("nothing changed")
            && err_text(&o).contains("may have been cancelled"),
        "{}",
        err_text(&o)
    );
    assert_eq!(sys.fake.jobs()[&job]["state"], "CANCELLED by 0");
    wait_until(
        "the poll to record the cancel",
        Duration::from_secs(20),
        || sys.json_as("bob", &["status", &job, "--json"])[0]["state"] == "cancelled",
    );
}

#[test]
fn item03_a_slow_sbatch_of_one_user_does_not_delay_another() {
    let sys = System::start("", "");
    sys.write_as("alice", "job.sh", &script("echo hi"));
    sys.write_as("bob", "job.sh", &script("echo hi"));
    // bob's sbatch calls wait at a gate the test opens only at its end: a daemon whose
    // loop waited for them would keep alice waiting until then, so the bounds below (10 s,
    // 15 s for a submit) leave room for a busy machine and still tell the two apart.
    let gate = sys.fake.gate("bob");
    let slow_submit = || {
        let mut c = sys.ctl_command("bob", &["submit", "--", "job.sh"]);
        c.env("SSV_FAKE_SBATCH_GATE", &gate)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c.spawn().unwrap()
    };
    let mut slow = vec![slow_submit()];
    wait_until("bob's sbatch to start", Duration::from_secs(20), || {
        sys.sbatch_calls_of("bob").len() == 1
    });
    answers_quickly(
        &sys,
        "alice",
        &["status", "--json"],
        Duration::from_secs(10),
        "bob's sbatch hung",
    );
    answers_quickly(
        &sys,
        "alice",
        &["submit", "--", "job.sh"],
        Duration::from_secs(15),
        "bob's sbatch hung",
    );
    // Four of bob's submissions may wait on sbatch at once; the fifth is told to come back.
    for _ in 0..3 {
        slow.push(slow_submit());
    }
    let four = || sys.sbatch_calls_of("bob").len() == 4;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !four() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        four(),
        "four of bob's sbatch calls run at once ({} started)",
        sys.sbatch_calls_of("bob").len()
    );
    let mut fifth = sys.ctl_command("bob", &["submit", "--", "job.sh"]);
    fifth.env("SSV_FAKE_SBATCH_GATE", &gate);
    let t = run_within(fifth, Duration::from_secs(10));
    let o = t.output.expect("bob's fifth submit is answered at once");
    assert_eq!(o.status.code(), Some(75), "{}", err_text(&o));
    assert!(
        err_text(&o).contains("limits.submits_in_flight_per_user"),
        "{}",
        err_text(&o)
    );
    assert_eq!(
        sys.sbatch_calls_of("bob").len(),
        4,
        "the fifth never reached sbatch"
    );
    answers_quickly(
        &sys,
        "alice",
        &["status", "--json"],
        Duration::from_secs(10),
        "bob had four sbatch calls hanging",
    );
    sys.fake.open(&gate);
    for mut c in slow {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn item03_a_huge_array_is_refused_at_once_and_stores_nothing() {
    let sys = System::start("", "");
    sys.write_as("bob", "job.sh", &script("echo hi"));
    sys.write_as(
        "bob",
        "arr.sh",
        &script("#SBATCH --array=0-999999\necho hi"),
    );
    let before = disk_usage(&sys.state_dir());
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        (vec!["--array=0-999999", "job.sh"], vec![]),
        (vec!["-a", "0-999999%4", "job.sh"], vec![]),
        (vec!["--array=0-9999,10000-20000", "job.sh"], vec![]),
        (vec!["--array=1-4000000:2", "job.sh"], vec![]),
        (vec!["job.sh"], vec![("SBATCH_ARRAY_INX", "0-999999")]),
        (vec!["arr.sh"], vec![]),
    ];
    for (i, (args, env)) in cases.iter().enumerate() {
        let mut all = vec!["submit", "--"];
        all.extend_from_slice(args);
        let mut cmd = sys.ctl_command("bob", &all);
        cmd.envs(env.iter().copied());
        let bob = std::thread::scope(|s| {
            let h = s.spawn(|| run_within(cmd, Duration::from_secs(60)));
            if i == 0 {
                answers_quickly(
                    &sys,
                    "alice",
                    &["status", "--json"],
                    Duration::from_secs(2),
                    "bob submitted a million-task array",
                );
            }
            h.join().unwrap()
        });
        let o = bob
            .output
            .unwrap_or_else(|| panic!("{args:?} {env:?}: no answer within 60s"));
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?} {env:?} is refused as too large ({:?}): {}",
            bob.took,
            err_text(&o)
        );
        assert!(
            err_text(&o).contains("limits.max_array_tasks"),
            "{}",
            err_text(&o)
        );
        assert!(
            bob.took < Duration::from_secs(3),
            "{args:?} took {:?}",
            bob.took
        );
    }
    assert!(sys.sbatch_calls_of("bob").is_empty(), "sbatch never ran");
    let grown = disk_usage(&sys.state_dir()).saturating_sub(before);
    assert!(grown < 5 << 20, "the state directory grew by {grown} bytes");
    // A reasonable array is fine.
    sys.submit_as("bob", &["--array=0-9%2", "job.sh"]);
}

#[test]
fn item03_open_chains_per_user_are_capped() {
    let sys = System::start("", "[limits]\nmax_open_chains_per_user = 3\n");
    sys.write_as("bob", "job.sh", &script("echo hi"));
    sys.write_as("alice", "job.sh", &script("echo hi"));
    let jobs: Vec<String> = (0..3).map(|_| sys.submit_as("bob", &["job.sh"])).collect();
    let o = sys.as_user("bob", &["submit", "--", "job.sh"]);
    assert_eq!(o.status.code(), Some(75), "{}", err_text(&o));
    assert!(
        err_text(&o).contains("limits.max_open_chains_per_user"),
        "{}",
        err_text(&o)
    );
    let o = sys.as_user("bob", &["submit", "--", "--array=0-1", "job.sh"]);
    assert_eq!(o.status.code(), Some(75), "{}", err_text(&o));
    assert_eq!(sys.sbatch_calls_of("bob").len(), 3);
    // Someone else is not affected, and a finished chain frees a place.
    sys.submit_as("alice", &["job.sh"]);
    assert!(sys.as_user("bob", &["cancel", &jobs[0]]).status.success());
    sys.submit_as("bob", &["job.sh"]);
}

// ---------------------------------------------------------------------------------------
// Item 4: disk fill

/// 15 MB: a script of NUL bytes travels as two characters a byte in today's request.
fn big_script() -> Vec<u8> {
    let mut s = script("echo big");
    s.resize(15_000_000, 0);
    s
}

#[test]
fn item04_oversized_scripts_are_refused_without_filling_the_disk() {
    let sys = System::start("", "");
    sys.fake.ctl(&["mode", "sbatch@bob", "reject"]);
    sys.write_as("bob", "big.sh", &big_script());
    sys.write_as("bob", "small.sh", &script("echo small"));
    let before = disk_usage(&sys.state_dir());
    for i in 0..10 {
        let o = sys.as_user("bob", &["submit", "--", "big.sh"]);
        assert_eq!(
            o.status.code(),
            Some(2),
            "submission {i} of a 15 MB script: {}",
            err_text(&o)
        );
        assert!(
            err_text(&o).contains("limits.max_script_size"),
            "{}",
            err_text(&o)
        );
    }
    // Through the socket, without supervisorctl's help, a script over the limit that fits
    // in a request: the daemon itself refuses it.
    let mut req = capture_submit(&sys, "bob", &[OsStr::new("small.sh")], &sys.home("bob"));
    let mut over = script("echo over");
    over.resize(5_000_000, 0);
    let bytes: Vec<Value> = over.into_iter().map(|b| json!(b)).collect();
    // supervisorctl sends base64; the daemon reads an array of byte values too.
    assert!(req["script"].is_string(), "{req}");
    req["script"] = Value::Array(bytes);
    let answer = raw_json(&sys, "bob", &req);
    assert_eq!(answer["error"]["kind"], "usage", "{answer}");
    assert!(
        answer.to_string().contains("limits.max_script_size"),
        "{answer}"
    );
    let grown = disk_usage(&sys.state_dir()).saturating_sub(before);
    assert!(grown < 5 << 20, "the state directory grew by {grown} bytes");
    assert!(files_under(&sys.state_dir().join("scripts")).is_empty());
}

#[test]
fn item04_refused_large_scripts_leave_nothing_behind() {
    // (A debug-built client takes seconds to send 15 MB; the limit under test is the size.)
    let sys = System::start(
        "",
        "[limits]\nmax_script_size = \"20M\"\nrequest_timeout = \"60s\"\n",
    );
    sys.fake.ctl(&["mode", "sbatch@bob", "reject"]);
    sys.write_as("bob", "big.sh", &big_script());
    let before = disk_usage(&sys.state_dir());
    for i in 0..10 {
        let o = sys.as_user("bob", &["submit", "--", "big.sh"]);
        assert_eq!(
            o.status.code(),
            Some(1),
            "submission {i}: sbatch refused it: {}",
            err_text(&o)
        );
        let left = files_under(&sys.state_dir().join("scripts"));
        assert!(left.is_empty(), "submission {i} left {left:?}");
    }
    assert_eq!(sys.sbatch_calls_of("bob").len(), 10);
    let grown = disk_usage(&sys.state_dir()).saturating_sub(before);
    // At most what one refused submission needs while it is tried, never ten of them.
    // (SQLite reuses the pages a discarded submission freed; WAL and free pages may hold
    // about one or two scripts' worth.)
    assert!(
        grown < 64 << 20,
        "the state directory grew by {grown} bytes for ten refused 15 MB scripts"
    );
    assert!(sys
        .d
        .json(&["status", "--json"])
        .as_array()
        .unwrap()
        .is_empty());
}

// ---------------------------------------------------------------------------------------
// Item 5: one state directory, one daemon

#[test]
fn item05_a_second_daemon_on_the_same_state_dir_refuses_to_start() {
    let mut sys = System::start("", "");
    sys.write_as("bob", "job.sh", &script("echo hi"));
    let job = sys.submit_as("bob", &["job.sh"]);
    let first = sys.pid();
    let text = std::fs::read_to_string(&sys.d.config).unwrap();
    let link = sys.root().join("state-link");
    std::os::unix::fs::symlink(sys.state_dir(), &link).unwrap();
    for (n, state) in [(2, sys.state_dir()), (3, link.clone())] {
        let cfg = sys.root().join(format!("second-{n}.toml"));
        std::fs::write(
            &cfg,
            text.replace(
                &sys.socket.display().to_string(),
                &sys.root()
                    .join("run")
                    .join(format!("second-{n}.sock"))
                    .display()
                    .to_string(),
            )
            .replace(
                &format!("state_dir = {:?}", sys.state_dir().display().to_string()),
                &format!("state_dir = {:?}", state.display().to_string()),
            ),
        )
        .unwrap();
        let mut cmd = Command::new(DAEMON);
        cmd.arg("--config").arg(&cfg).current_dir("/");
        let t = run_within(cmd, Duration::from_secs(15));
        let o = t.output.unwrap_or_else(|| {
            panic!(
                "a second daemon on {} (socket second-{n}.sock) was still running after 15s",
                state.display()
            )
        });
        assert!(!o.status.success(), "{}", err_text(&o));
        assert!(
            err_text(&o).contains(&first.to_string()),
            "the refusal names the running daemon's pid {first}: {}",
            err_text(&o)
        );
    }
    // The first keeps working, and a retry is submitted once.
    assert!(sys.alive().is_none());
    sys.fake.ctl(&["finish", &job, "NODE_FAIL", "0:0"]);
    wait_until("the retry", Duration::from_secs(30), || {
        sys.d.status(&job)[0]["attempts"] == 2
    });
    // A few more cycles for a second daemon (if any) to act.
    let cycles = sys.calls("squeue");
    wait_until("three more cycles", Duration::from_secs(30), || {
        sys.calls("squeue") >= cycles + 3
    });
    assert_eq!(sys.sbatch_calls_of("bob").len(), 2);
    let h = sys.d.history(&job);
    assert_eq!(h["decisions"].as_array().unwrap().len(), 1, "{h:#}");
}

// ---------------------------------------------------------------------------------------
// Item 6: what the client was told is the truth

#[test]
fn item06_a_submission_reported_failed_on_a_full_disk_is_never_submitted_later() {
    let mut sys = System::prepare("", "");
    let state = sys.state_dir();
    let _m = Mount::tmpfs(&state, "8m");
    sys.spawn();
    sys.write_as("bob", "job.sh", &script("echo hi"));
    let mut big = script("echo big");
    big.resize(200_000, b'#');
    sys.write_as("bob", "big.sh", &big);
    let kept = sys.submit_as("bob", &["--job-name=kept", "job.sh"]);
    let filler = fill(&state);
    let full = std::fs::metadata(&filler).unwrap().len();
    let mut told = Vec::new();
    let mut i = 0;
    for free in [0u64, 4096, 16384, 65536, 262144] {
        for s in ["job.sh", "big.sh"] {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&filler)
                .unwrap();
            f.set_len(full.saturating_sub(free)).unwrap();
            drop(f);
            let name = format!("--job-name=told-{i}");
            let o = sys.as_user("bob", &["submit", "--", &name, s]);
            told.push((
                i,
                o.status.code(),
                out_text(&o).trim().to_string(),
                err_text(&o),
                wall_clock(),
            ));
            i += 1;
        }
    }
    std::fs::remove_file(&filler).unwrap();
    let after = sys.submit_as("bob", &["--job-name=after", "job.sh"]);
    let cycles = sys.calls("squeue");
    wait_until("five cycles with space", Duration::from_secs(60), || {
        sys.calls("squeue") >= cycles + 5
    });

    let failed: Vec<_> = told
        .iter()
        .filter(|(_, c, ..)| !matches!(c, Some(0) | Some(75)))
        .collect();
    assert!(
        told.iter().any(|(_, c, ..)| *c != Some(0)),
        "the full disk was never felt by a submission: {told:?}"
    );
    let calls = sys.sbatch_calls_of("bob");
    let jobs = sys.fake.jobs();
    for (i, code, _, err, answered_at) in &failed {
        let name = format!("told-{i}");
        let later: Vec<&Value> = calls
            .iter()
            .filter(|c| {
                c["argv"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a == &json!(format!("--job-name={name}")))
                    && c["at"].as_f64().unwrap() > *answered_at
            })
            .collect();
        assert!(
            later.is_empty(),
            "{name} was reported failed ({code:?}: {err}) and submitted afterwards: {later:#?}"
        );
        for (id, j) in &jobs {
            if j["name"] == name.as_str() {
                assert!(
                    j["state"].as_str().unwrap().starts_with("CANCELLED"),
                    "{name} was reported failed ({code:?}: {err}) but Slurm has job {id}: {j}"
                );
            }
        }
    }
    let all = sys.d.json(&["status", "--json"]);
    let known: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["slurm_job_id"].as_str())
        .collect();
    for (i, code, out, ..) in &told {
        if *code == Some(0) {
            assert!(
                known.contains(&out.as_str()),
                "told-{i} was accepted as {out} and is lost: {all:#}"
            );
        }
    }
    assert!(
        known.contains(&kept.as_str()) && known.contains(&after.as_str()),
        "{all:#}"
    );
}

// ---------------------------------------------------------------------------------------
// Item 7: garbage from squeue

#[test]
fn item07_garbage_from_squeue_is_not_a_lost_job() {
    let sys = System::start("lost_job_after = \"3s\"", "");
    sys.write_as("bob", "job.sh", &script("sleep 100"));
    let job = sys.submit_as("bob", &["job.sh"]);
    sys.fake.ctl(&["run", &job, "n1"]);
    wait_until(
        "the job to be seen running",
        Duration::from_secs(20),
        || sys.d.status(&job)[0]["slurm_state"] == "RUNNING",
    );
    sys.fake.ctl(&["mode", "squeue", "garbage"]);
    let start = Instant::now();
    let calls = sys.calls("squeue");
    // The attack needs time: longer than lost_job_after, over several cycles.
    wait_until(
        "squeue garbage for 3x lost_job_after",
        Duration::from_secs(60),
        || start.elapsed() > Duration::from_secs(9) && sys.calls("squeue") >= calls + 3,
    );
    let row = &sys.d.status(&job)[0];
    let h = sys.d.history(&job);
    assert_eq!(
        row["state"], "active",
        "garbage from squeue decided something: {h:#}"
    );
    assert!(h["decisions"].as_array().unwrap().is_empty(), "{h:#}");
    assert_ne!(h["attempts"][0]["slurm_state"], "LOST", "{h:#}");
    sys.fake.ctl(&["mode", "squeue", "ok"]);
    sys.fake.ctl(&["finish", &job, "COMPLETED", "0:0"]);
    sys.d.wait_state(&job, "completed", Duration::from_secs(30));
}

// ---------------------------------------------------------------------------------------
// Item 8: bounded config values

const HUGE: &str = "\"10000000000000000000s\"";

fn bad_configs() -> Vec<(&'static str, String)> {
    let mut v: Vec<(&str, String)> = vec![("poll_interval", format!("poll_interval = {HUGE}\n"))];
    for (section, key) in [
        ("slurm", "command_timeout"),
        ("slurm", "sbatch_timeout"),
        ("slurm", "lost_job_after"),
        ("retry", "backoff_initial"),
        ("retry", "backoff_max"),
        ("escalation", "time_max"),
        ("breaker", "window"),
        ("quarantine", "window"),
        ("quarantine", "duration"),
        ("agent", "interval"),
        ("agent", "timeout"),
        ("limits", "request_timeout"),
    ] {
        v.push((key, format!("[{section}]\n{key} = {HUGE}\n")));
    }
    v.push(("mem_max", "[escalation]\nmem_max = \"16000000T\"\n".into()));
    v.push((
        "max_script_size",
        "[limits]\nmax_script_size = \"16000000T\"\n".into(),
    ));
    v.push((
        "stderr_tail_bytes",
        "[slurm]\nstderr_tail_bytes = 9223372036854775807\n".into(),
    ));
    v.push((
        "stderr_tail_lines",
        "[slurm]\nstderr_tail_lines = 9223372036854775807\n".into(),
    ));
    v
}

#[test]
fn item08_huge_durations_and_sizes_are_refused_by_validation() {
    let dir = tempfile::Builder::new()
        .prefix("ssv-cfg-")
        .tempdir_in(scratch_root())
        .unwrap();
    for (n, (key, text)) in bad_configs().into_iter().enumerate() {
        let cfg = dir.path().join(format!("bad-{n}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "state_dir = {:?}\n{text}",
                dir.path().join("state").display().to_string()
            ),
        )
        .unwrap();
        for (what, mut cmd) in [
            ("slurm-supervisord --validate", {
                let mut c = Command::new(DAEMON);
                c.arg("--config").arg(&cfg).arg("--validate");
                c
            }),
            ("supervisorctl validate", {
                let mut c = Command::new(CTL);
                c.arg("--config").arg(&cfg).arg("validate");
                c
            }),
            // `validate` runs the daemon's check; the client's own reading of the file
            // (every command but `validate`) must refuse it too.
            ("supervisorctl status", {
                let mut c = Command::new(CTL);
                c.arg("--config").arg(&cfg).arg("status");
                c
            }),
        ] {
            let o = cmd.output().unwrap();
            assert_eq!(
                o.status.code(),
                Some(78),
                "{what} with {text:?}: {}{}",
                out_text(&o),
                err_text(&o)
            );
            assert!(
                err_text(&o).contains(key),
                "{what} names {key}: {}",
                err_text(&o)
            );
        }
    }
    // The daemon itself refuses to start on it, without panicking.
    let cfg = dir.path().join("bad-0.toml");
    let t = run_within(
        {
            let mut c = Command::new(DAEMON);
            c.arg("--config").arg(&cfg);
            c
        },
        Duration::from_secs(10),
    );
    let o = t.output.expect("the daemon stops at once on a bad config");
    assert_eq!(o.status.code(), Some(78), "{}", err_text(&o));
}

#[test]
fn item08_a_reload_with_an_out_of_range_value_keeps_the_daemon_running() {
    let mut sys = System::start("", "");
    let good = std::fs::read_to_string(&sys.d.config).unwrap();
    sys.write_as("bob", "job.sh", &script("exit 1"));
    for (key, replace) in [
        (
            "poll_interval",
            ("poll_interval = \"1s\"", format!("poll_interval = {HUGE}")),
        ),
        (
            "lost_job_after",
            ("[slurm]\n", format!("[slurm]\nlost_job_after = {HUGE}\n")),
        ),
        (
            "backoff_initial",
            (
                "backoff_initial = \"1s\"",
                format!("backoff_initial = {HUGE}"),
            ),
        ),
    ] {
        let before = sys.d.log().len();
        std::fs::write(&sys.d.config, good.replacen(replace.0, &replace.1, 1)).unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(sys.pid()),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let died = loop {
            if let Some(st) = sys.alive() {
                break Some(st);
            }
            if sys.d.log()[before..].contains(key) {
                break None;
            }
            assert!(Instant::now() < deadline, "the reload was not handled");
            std::thread::sleep(Duration::from_millis(50));
        };
        if let Some(st) = died {
            panic!(
                "the daemon died ({st}) on SIGHUP with {key} out of range:\n{}",
                tail(&sys.d.log()[before..], 20)
            );
        }
        // The clients read the file too (for the socket) and refuse it as it stands; put
        // the good one back for them. The daemon keeps what it had either way.
        std::fs::write(&sys.d.config, &good).unwrap();
        // Through more than one cycle with whatever config the daemon kept.
        let job = sys.submit_as("bob", &["job.sh"]);
        sys.fake.ctl(&["finish", &job, "FAILED", "1:0"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = sys.alive() {
                panic!(
                    "the daemon died ({st}) after SIGHUP with {key} out of range:\n{}",
                    tail(&sys.d.log()[before..], 20)
                );
            }
            if sys.d.status(&job)[0]["state"] == "pending_failed" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon stopped working after SIGHUP with {key} out of range"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

// ---------------------------------------------------------------------------------------
// Item 9: a state file that is not a healthy store

/// Starts the daemon on `sys`'s config with a systemd notify socket; returns how it
/// exited (`None`: it was still running after 20 s) and whether it said READY.
fn start_expecting_refusal(sys: &System) -> (Option<std::process::ExitStatus>, bool) {
    use std::os::unix::net::UnixDatagram;
    let notify = sys.root().join("notify.sock");
    let _ = std::fs::remove_file(&notify);
    let sock = UnixDatagram::bind(&notify).unwrap();
    sock.set_nonblocking(true).unwrap();
    let mut cmd = sys.daemon_command(&sys.d.config);
    cmd.env("NOTIFY_SOCKET", &notify);
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ready = false;
    let status = loop {
        let mut buf = [0u8; 256];
        if let Ok(n) = sock.recv(&mut buf) {
            ready |= String::from_utf8_lossy(&buf[..n]).contains("READY=1");
        }
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut buf = [0u8; 256];
    while let Ok(n) = sock.recv(&mut buf) {
        ready |= String::from_utf8_lossy(&buf[..n]).contains("READY=1");
    }
    (status, ready)
}

fn assert_refused(sys: &System, db: &Path, before: &[u8], what: &str) {
    let log_before = sys.d.log().len();
    let (status, ready) = start_expecting_refusal(sys);
    let log = sys.d.log()[log_before..].to_string();
    let st = status.unwrap_or_else(|| {
        panic!(
            "the daemon kept running on {what} (READY sent: {ready}):\n{}",
            tail(&log, 20)
        )
    });
    assert!(!st.success(), "the daemon exited {st} on {what}:\n{log}");
    assert!(!ready, "the daemon said READY on {what}:\n{log}");
    assert!(
        log.contains("supervisor.db"),
        "the daemon says which file is wrong and why:\n{log}"
    );
    assert_eq!(
        std::fs::read(db).unwrap(),
        before,
        "{what} is left byte for byte as it was"
    );
}

#[test]
fn item09_an_empty_state_file_stops_the_daemon_and_is_left_as_it_was() {
    let mut sys = System::start("", "");
    sys.write_as("bob", "job.sh", &script("echo hi"));
    sys.submit_as("bob", &["job.sh"]);
    assert!(sys.d.stop().success());
    let db = sys.state_dir().join("supervisor.db");
    for f in ["supervisor.db-wal", "supervisor.db-shm"] {
        let _ = std::fs::remove_file(sys.state_dir().join(f));
    }
    std::fs::write(&db, b"").unwrap();
    assert_refused(&sys, &db, b"", "a 0-byte supervisor.db");
}

#[test]
fn item09_corrupt_pages_stop_the_daemon_before_ready() {
    let mut sys = System::start("", "");
    let mut big = script("echo hi");
    big.resize(300_000, b'#');
    sys.write_as("bob", "job.sh", &big);
    for _ in 0..4 {
        sys.submit_as("bob", &["job.sh"]);
    }
    assert!(sys.d.stop().success());
    let db = sys.state_dir().join("supervisor.db");
    for f in ["supervisor.db-wal", "supervisor.db-shm"] {
        let _ = std::fs::remove_file(sys.state_dir().join(f));
    }
    let clean = std::fs::read(&db).unwrap();
    let page = match u16::from_be_bytes([clean[16], clean[17]]) {
        1 => 65536,
        n => n as usize,
    };
    let pages = clean.len() / page;
    assert!(pages > 8, "a store of {pages} pages");
    // Overwrite pages in the middle until SQLite's own check sees the damage.
    let check = |bytes: &[u8]| -> String {
        let copy = sys.root().join("check.db");
        std::fs::write(&copy, bytes).unwrap();
        let out = Command::new("python3")
            .args([
                "-c",
                "import sqlite3,sys\ntry:\n  c=sqlite3.connect('file:'+sys.argv[1]+'?immutable=1',uri=True)\n  print(c.execute('pragma quick_check').fetchone()[0])\nexcept Exception as e:\n  print('error', e)",
            ])
            .arg(&copy)
            .output()
            .unwrap();
        out_text(&out).trim().to_string()
    };
    let mut corrupt = None;
    for first in (2..pages - 2).rev() {
        let mut b = clean.clone();
        for x in &mut b[first * page..(first + 2) * page] {
            *x = 0x5a;
        }
        if check(&b) != "ok" {
            corrupt = Some(b);
            break;
        }
    }
    let corrupt = corrupt.expect("some damage SQLite's quick_check sees");
    std::fs::write(&db, &corrupt).unwrap();
    assert_refused(&sys, &db, &corrupt, "a supervisor.db with corrupt pages");
}

// ---------------------------------------------------------------------------------------
// Item 10: ids are exact

#[test]
fn item10_ids_are_exact_matches() {
    let sys = System::start("", "");
    sys.write_as("alice", "job.sh", &script("echo hi"));
    let array = sys.submit_as("alice", &["--array=0-2", "job.sh"]);
    let single = sys.submit_as("alice", &["job.sh"]);
    let chain = sys.json_as("alice", &["status", "--json", &single])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let patterns = [
        "1%",
        "1_",
        "%",
        "_",
        "c%",
        "c1%",
        &format!("{array}_%"),
        &format!("{array}%"),
    ];
    for p in patterns {
        for cmd in [
            vec!["status", p],
            vec!["history", p],
            vec!["cancel", p],
            vec!["stats", p],
        ] {
            let o = sys.as_user("bob", &cmd);
            assert_eq!(
                o.status.code(),
                Some(2),
                "bob's {cmd:?} is not a valid id (exit 2), never a pattern: {}{}",
                out_text(&o),
                err_text(&o)
            );
        }
    }
    let long = "1".repeat(100_000);
    let t = sys.as_user_within("bob", &["status", &long], Duration::from_secs(10));
    let o = t.output.expect("a 100,000-digit id is answered");
    assert_eq!(o.status.code(), Some(2), "{}", err_text(&o));
    assert!(t.took < Duration::from_secs(2), "took {:?}", t.took);
    let e = err_text(&o);
    assert!(
        !e.contains("LIKE") && !e.contains("SQL") && !e.contains("pattern") && e.len() < 1000,
        "a clear message, no SQL error: {e}"
    );
    // An exact id of alice's: bob is told it is not his, and nothing else.
    for id in [
        array.clone(),
        format!("{array}_1"),
        single.clone(),
        chain.clone(),
    ] {
        for cmd in [
            vec!["status", "--json", &id],
            vec!["history", "--json", &id],
            vec!["stats", "--json", &id],
            vec!["cancel", &id],
        ] {
            let o = sys.as_user("bob", &cmd);
            assert_eq!(o.status.code(), Some(77), "bob's {cmd:?}: {}", err_text(&o));
            assert!(
                o.stdout.is_empty(),
                "bob's {cmd:?} printed {}",
                out_text(&o)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Item 11: impossible cwd, environment or arguments in a raw request

#[test]
fn item11_submit_requests_with_impossible_paths_env_or_args_are_refused() {
    let sys = System::start("", "");
    sys.write_as("bob", "job.sh", &script("echo hi"));
    let req = capture_submit(
        &sys,
        "bob",
        &[
            OsStr::new("--job-name=raw"),
            OsStr::new("job.sh"),
            OsStr::new("arg"),
        ],
        &sys.home("bob"),
    );
    let cwd = field_bytes(&req["cwd"]);
    let env0 = req["env"][0].clone();
    assert!(
        env0.as_array().is_some_and(|p| p.len() == 2) && req["argv"].is_array(),
        "env is a list of [name, value] and argv a list (update this test to the protocol): {req}"
    );
    let with_env = |k: &[u8], v: &[u8]| {
        let mut r = req.clone();
        r["env"]
            .as_array_mut()
            .unwrap()
            .push(json!([same_form(&env0[0], k), same_form(&env0[1], v)]));
        r
    };
    let with_argv = |from: &[u8], to: &[u8]| {
        let mut r = req.clone();
        let mut found = false;
        for a in r["argv"].as_array_mut().unwrap() {
            if field_bytes(a) == from {
                *a = same_form(a, to);
                found = true;
            }
        }
        assert!(found, "{req}");
        r
    };
    let with_cwd = |c: &[u8]| {
        let mut r = req.clone();
        r["cwd"] = same_form(&req["cwd"], c);
        r
    };
    let mut nul_cwd = cwd.clone();
    nul_cwd.extend_from_slice(b"\0/../../alice");
    let cases: Vec<(&str, Value)> = vec![
        ("a cwd with a NUL byte", with_cwd(&nul_cwd)),
        ("a relative cwd", with_cwd(b"home/bob")),
        ("an empty cwd", with_cwd(b"")),
        ("an env name with '='", with_env(b"SSV_A=B", b"1")),
        ("an env name with NUL", with_env(b"SSV_A\0B", b"1")),
        ("an env value with NUL", with_env(b"SSV_V", b"a\0b")),
        (
            "an option with NUL",
            with_argv(b"--job-name=raw", b"--job-name=ra\0w"),
        ),
        ("a script argument with NUL", with_argv(b"arg", b"a\0rg")),
    ];
    for (what, r) in &cases {
        let answer = raw_json(&sys, "bob", r);
        assert_eq!(
            answer["error"]["kind"], "usage",
            "{what}: refused as a usage error: {answer}"
        );
        assert!(
            sys.sbatch_calls_of("bob").is_empty(),
            "{what}: sbatch ran: {:#?}",
            sys.sbatch_calls_of("bob")
        );
    }
    // The request itself is fine.
    let answer = raw_json(&sys, "bob", &req);
    assert!(answer["ok"]["job_id"].is_string(), "{answer}");
    let calls = sys.sbatch_calls_of("bob");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["cwd"], sys.home("bob").display().to_string());
}

// ---------------------------------------------------------------------------------------
// Non-UTF-8 bytes are carried exactly

#[test]
fn non_utf8_bytes_are_carried_exactly_to_sbatch_and_shown_escaped() {
    let sys = System::start("", "");
    let dir = sys.home("bob").join(OsStr::from_bytes(b"d\xff\xfe-dir"));
    std::fs::create_dir(&dir).unwrap();
    chown(&dir, "bob");
    let job = dir.join("job.sh");
    std::fs::write(&job, script("exit 1")).unwrap();
    chown(&job, "bob");
    let name = b"--job-name=n\xfe\xff".as_slice();
    let arg = b"arg\xff\x80".as_slice();
    let value = b"v\xfe\xff".as_slice();
    let mut cmd = sys.user_command("bob", &sys.ctl);
    cmd.arg("--config")
        .arg(&sys.d.config)
        .args(["submit", "--"])
        .arg(OsStr::from_bytes(name))
        .arg("job.sh")
        .arg(OsStr::from_bytes(arg))
        .env("SSV_BYTES", OsStr::from_bytes(value))
        .current_dir(&dir);
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "non-UTF-8 bytes are carried, not refused: {}",
        err_text(&o)
    );
    let id = out_text(&o).trim().to_string();
    let calls = sys.sbatch_calls_of("bob");
    assert_eq!(calls.len(), 1);
    let c = &calls[0];
    let argv: Vec<&str> = c["argv_hex"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(argv.contains(&hex(name).as_str()), "{c:#}");
    assert_eq!(argv.last().unwrap(), &hex(arg), "{c:#}");
    assert_eq!(c["env_hex"]["SSV_BYTES"], hex(value), "{c:#}");
    assert_eq!(c["cwd_hex"], hex(dir.as_os_str().as_bytes()), "{c:#}");
    assert_eq!(c["uid"], User::get("bob").uid);
    sys.fake.ctl(&["finish", &id, "FAILED", "1:0"]);
    sys.d
        .wait_state(&id, "pending_failed", Duration::from_secs(30));
    let mut shown = Vec::new();
    for args in [
        vec!["status", "--json"],
        vec!["history", "--json", &id],
        vec!["pending", "--json"],
    ] {
        let v = sys.json_as("bob", &args);
        strings(&v, &mut shown);
    }
    for args in [vec!["status"], vec!["history", &id], vec!["pending"]] {
        let o = sys.as_user("bob", &args);
        assert!(o.status.success(), "{args:?}: {}", err_text(&o));
    }
    assert!(
        !shown.iter().any(|s| s.contains('\u{fffd}')),
        "bytes are shown escaped, not replaced: {shown:#?}"
    );
    let escaped = |s: &str| {
        let l = s.to_ascii_lowercase();
        l.contains("\\xfe\\xff") || l.contains("%fe%ff")
    };
    assert!(
        shown.iter().any(|s| escaped(s)),
        "the job name's bytes are shown escaped (\\xfe\\xff): {shown:#?}"
    );
}

// ---------------------------------------------------------------------------------------
// Found by a review of the fixes: each was a way in that the items above did not name.

/// A job controls its output pattern; an absurd zero-padding width (`%10000000000000j`)
/// once made the daemon allocate terabytes and abort, again on every restart.
#[test]
fn review_an_absurd_output_pattern_width_does_not_kill_the_daemon() {
    let mut sys = System::start("", "");
    sys.write_as("bob", "job.sh", &script("echo hi"));
    let job = sys.submit_as("bob", &["--output=/tmp/x-%10000000000000j.out", "job.sh"]);
    sys.fake.ctl(&["finish", &job, "FAILED", "1:0"]);
    // The ending is judged (its output read) and recorded, and the daemon lives on.
    wait_until("the ending to be judged", Duration::from_secs(30), || {
        sys.d.status(&job)[0]["state"] == "pending_failed"
    });
    assert!(sys.alive().is_none(), "{}", tail(&sys.d.log(), 20));
}

/// sbatch runs as the user, in their environment, so what it prints is theirs to choose:
/// bob's sbatch prints alice's job id. The daemon must not file alice's job under bob.
#[test]
fn review_a_job_id_printed_by_a_users_sbatch_is_not_believed_without_its_tag() {
    let sys = System::start("", "");
    sys.write_as("alice", "job.sh", &script("echo hi"));
    let alice_job = sys.submit_as("alice", &["job.sh"]);
    // The fake sbatch is Python: sitecustomize on bob's PYTHONPATH stands for LD_PRELOAD.
    let evil = sys.home("bob").join("evil");
    std::fs::create_dir(&evil).unwrap();
    std::fs::write(
        evil.join("sitecustomize.py"),
        format!("import os, sys\nif os.path.basename(sys.argv[0]) == 'sbatch':\n    sys.stdout.write('{alice_job}\\n'); sys.stdout.flush(); os._exit(0)\n"),
    )
    .unwrap();
    chown(&evil, "bob");
    chown(&evil.join("sitecustomize.py"), "bob");
    sys.write_as("bob", "job.sh", &script("echo hi"));
    let mut c = sys.ctl_command("bob", &["submit", "--", "job.sh"]);
    c.env("PYTHONPATH", &evil);
    let o = c.output().unwrap();
    assert!(
        !o.status.success(),
        "bob's submit was accepted as job {}",
        String::from_utf8_lossy(&o.stdout)
    );
    // alice's job is still hers alone; bob's chains name none of it.
    let mine = sys.as_user("alice", &["status", "--json", &alice_job]);
    assert!(
        mine.status.success(),
        "{}",
        String::from_utf8_lossy(&mine.stderr)
    );
    let theirs = sys.as_user("bob", &["status", "--json"]);
    let text = String::from_utf8_lossy(&theirs.stdout);
    let rows: Value = serde_json::from_str(&text).unwrap();
    for r in rows.as_array().unwrap() {
        assert_ne!(r["slurm_job_id"], alice_job.as_str(), "{text}");
    }
}

/// What is checked must be what sbatch gets: a name given twice in the environment (the
/// check reads one, sbatch the other) is refused, and so is `SBATCH_WAIT` set empty.
#[test]
fn review_an_environment_name_given_twice_or_an_empty_sbatch_wait_is_refused() {
    let sys = System::start("", "");
    sys.write_as("bob", "job.sh", &script("echo hi"));
    let home = sys.home("bob");
    for env in [
        json!([
            ["SBATCH_ARRAY_INX", "0-1"],
            ["SBATCH_ARRAY_INX", "0-999999"]
        ]),
        json!([["SBATCH_WAIT", ""]]),
    ] {
        let req = json!({"cmd": "submit", "argv": ["job.sh"], "cwd": home.display().to_string(),
            "env": env, "script": script("echo hi"), "max_retries": null});
        let out = sys.raw_request_as("bob", format!("{req}\n").as_bytes());
        let answer: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(answer["error"]["kind"], "usage", "{env}: {answer}");
    }
    assert!(sys.sbatch_calls_of("bob").is_empty());
}

/// A retry's sbatch runs as its user, in their stored environment, which they can make
/// slow (here the fake's sleep; in life `LD_PRELOAD`, `--export-file` naming a FIFO). It
/// runs beside the daemon's loop, so it holds up no one else's submit.
#[test]
fn review_a_slow_retry_sbatch_of_one_user_does_not_delay_another() {
    let sys = System::start("", "");
    sys.write_as("alice", "job.sh", &script("echo hi"));
    sys.write_as("bob", "job.sh", &script("echo hi"));
    let mut c = sys.ctl_command("bob", &["submit", "--", "job.sh"]);
    c.env("SSV_FAKE_SBATCH_SLEEP", "25");
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let job = String::from_utf8_lossy(&o.stdout).trim().to_string();
    sys.fake.ctl(&["finish", &job, "NODE_FAIL", "0:0"]);
    wait_until(
        "bob's retry sbatch to start",
        Duration::from_secs(30),
        || sys.sbatch_calls_of("bob").len() == 2,
    );
    // Waiting for bob's retry would take its sleep's 25 s.
    answers_quickly(
        &sys,
        "alice",
        &["submit", "--", "job.sh"],
        Duration::from_secs(12),
        "bob's retry sbatch was slow",
    );
}

// ---------------------------------------------------------------------------------------
// Round two (issue 21): what one user writes never becomes another user's truth.

/// Waits until the daemon has polled `n` more times (squeue calls) than it had.
fn polls_pass(sys: &System, n: usize) {
    let start = sys.calls("squeue");
    wait_until(&format!("{n} more polls"), Duration::from_secs(60), || {
        sys.calls("squeue") >= start + n
    });
}

/// Item 1, the critical one: bob's comment holds newlines and rows of his own making, as
/// `scontrol update jobid=J comment="$(printf 'x\n100|100|OUT_OF_MEMORY|...')"` lets him
/// write (confirmed on 22.05 and 24.11: squeue and sacct print the newline as is). Before,
/// one squeue and one sacct covered every user's jobs and ended with the comment: each
/// line of bob's comment was a row, alice's running job was judged OOM and a second copy
/// of it submitted. Now the poll's queries carry no text a user writes: alice's job is
/// untouched, and bob cannot put such a comment in through the supervisor at all.
#[test]
fn round2_item1_a_newline_in_bobs_comment_forges_nothing_about_alices_job() {
    let sys = System::start("", "");
    let alice = User::get("alice").uid;
    sys.write_as("alice", "job.sh", &script("sleep 100"));
    sys.write_as("bob", "job.sh", &script("sleep 100"));
    let a = sys.submit_as("alice", &["job.sh"]);
    let b = sys.submit_as("bob", &["job.sh"]);
    sys.fake.ctl(&["run", &a, "n1"]);
    sys.fake.ctl(&["run", &b, "n2"]);
    wait_until("both jobs seen running", Duration::from_secs(20), || {
        sys.d.status(&a)[0]["slurm_state"] == "RUNNING"
            && sys.d.status(&b)[0]["slurm_state"] == "RUNNING"
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // Rows about alice's job in the shapes the daemon read, with alice's uid where a uid
    // goes and her tag where a comment goes (anyone can read it: `squeue -o %k`).
    let tag = sys.d.history(&a)["attempts"][0]["tag"]
        .as_str()
        .unwrap()
        .to_string();
    // A sacct row of the old shape (comment last) reads as a squeue row too, whose state
    // is OUT_OF_MEMORY: before, one poll saw alice's job ended and judged the forged run.
    let forged = format!(
        "mine\n\
         {a}|{a}|OUT_OF_MEMORY|0:125|n1||100M|00:10:00|00:00:05|debug|{tag}\n\
         {a}.batch|{a}.batch|OUT_OF_MEMORY|0:125|n1|300000K|||||\n\
         {a}|{a}|OUT_OF_MEMORY|0:125|n1||100M|00:10:00|00:00:05|debug|{alice}|{now}\n\
         {a}.batch|{a}.batch|OUT_OF_MEMORY|0:125|n1|300000K||||||{now}"
    );
    sys.fake.ctl(&["comment", &b, &forged]);
    polls_pass(&sys, 3);
    // bob's job ends and stays in squeue for a while (MinJobAge), so one poll's squeue
    // lists it, with his comment, beside alice's, and its sacct asks about it: before, a
    // forged row said alice's job had ended, and the same sacct held the forged OOM run.
    sys.fake.ctl(&["linger", &b]);
    sys.fake.ctl(&["finish", &b, "COMPLETED", "0:0"]);
    sys.d.wait_state(&b, "completed", Duration::from_secs(30));
    polls_pass(&sys, 3);
    let h = sys.d.history(&a);
    assert_eq!(
        h["state"], "active",
        "alice's running job was judged: {h:#}"
    );
    assert!(h["decisions"].as_array().unwrap().is_empty(), "{h:#}");
    assert_eq!(h["attempts"].as_array().unwrap().len(), 1, "{h:#}");
    assert_eq!(h["attempts"][0]["slurm_state"], "RUNNING", "{h:#}");
    assert_eq!(
        sys.sbatch_calls_of("alice").len(),
        1,
        "a second copy of alice's job was submitted"
    );
    // And when alice's job really ends, its own ending is what is judged (before, bob's
    // unreadable rows about it left it unjudged for as long as his job was listed).
    sys.fake.ctl(&["finish", &a, "COMPLETED", "0:0"]);
    sys.d.wait_state(&a, "completed", Duration::from_secs(30));
    let h = sys.d.history(&a);
    assert_eq!(h["last_classification"], "completed", "{h:#}");
    assert!(h["decisions"].as_array().unwrap().is_empty(), "{h:#}");
    assert_eq!(sys.sbatch_calls_of("alice").len(), 1);

    // Through the supervisor, such a comment is refused, on the command line or in the
    // script, with what to do.
    for args in [
        vec!["--comment=mine\nforged", "job.sh"],
        vec!["--comment=tab\there", "job.sh"],
    ] {
        let out = sys.as_user("bob", &[&["submit", "--"][..], &args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", err_text(&out));
        assert!(
            err_text(&out).contains("control character"),
            "{}",
            err_text(&out)
        );
    }
    sys.write_as(
        "bob",
        "esc.sh",
        b"#!/bin/sh\n#SBATCH --comment=a\x1b[2Jb\nsleep 1\n",
    );
    let out = sys.as_user("bob", &["submit", "--", "esc.sh"]);
    assert_eq!(out.status.code(), Some(2), "{}", err_text(&out));
    assert_eq!(sys.sbatch_calls_of("bob").len(), 1);
}

/// The net under item 1: however a job id came to a chain (what a user's sbatch printed,
/// a tag found in a comment, which its owner writes), the daemon acts on a job only while
/// Slurm shows it owned by the chain's owner. Here Slurm shows alice's chain's job owned
/// by bob: its OOM ending is neither judged nor retried for alice, and after
/// `lost_job_after` her chain waits for a person, saying why in the log.
#[test]
fn round2_item1_a_job_slurm_shows_owned_by_another_user_is_never_acted_on() {
    let sys = System::start("lost_job_after = \"3s\"", "");
    let bob = User::get("bob").uid;
    sys.write_as("alice", "job.sh", &script("sleep 100"));
    let a = sys.submit_as("alice", &["job.sh"]);
    sys.fake.ctl(&["run", &a, "n1"]);
    wait_until("alice's job seen running", Duration::from_secs(20), || {
        sys.d.status(&a)[0]["slurm_state"] == "RUNNING"
    });
    sys.fake.ctl(&["owner", &a, &bob.to_string()]);
    sys.fake.ctl(&["finish", &a, "OUT_OF_MEMORY", "0:125"]);
    sys.d
        .wait_state(&a, "pending_failed", Duration::from_secs(60));
    let h = sys.d.history(&a);
    let kinds: Vec<&str> = h["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["classification"].as_str())
        .collect();
    assert!(
        !kinds.contains(&"oom"),
        "bob's job was judged for alice: {h:#}"
    );
    assert_eq!(sys.sbatch_calls_of("alice").len(), 1, "{h:#}");
    assert!(
        sys.d.log().contains(&format!("owned by uid {bob}")),
        "{}",
        tail(&sys.d.log(), 30)
    );
}

/// Item 4: a resolution's text is bounded before anything is stored. Before, 20 classify
/// requests with a 15 MiB `reason` each grew the state directory from 1 MB to 632 MB.
#[test]
fn round2_item4_a_huge_reason_is_refused_and_stores_nothing() {
    let sys = System::start("", "");
    sys.write_as("bob", "job.sh", &script("exit 1"));
    let job = sys.submit_as("bob", &["job.sh"]);
    sys.fake
        .ctl(&["finish", &job, "FAILED", "1:0", "something no rule knows\n"]);
    sys.d
        .wait_state(&job, "pending_failed", Duration::from_secs(30));
    let db = sys.d.state_dir().join("supervisor.db");
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let wal = sys.d.state_dir().join("supervisor.db-wal");
    let before = size(&db) + size(&wal);
    let huge = "x".repeat(15 << 20);
    for action in ["hold", "retry", "fail"] {
        let answer = raw_json(
            &sys,
            "bob",
            &json!({"cmd": "classify", "id": job, "action": action, "reason": huge}),
        );
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(answer["error"]["kind"], "usage", "{action}: {message}");
        assert!(message.contains("at most 4096"), "{message}");
    }
    let after = size(&db) + size(&wal);
    assert!(
        after < before + (1 << 20),
        "the state grew from {before} to {after} bytes"
    );
    // A reason of the largest size kept is taken.
    let out = sys.as_user(
        "bob",
        &[
            "classify",
            &job,
            "--action",
            "hold",
            "--reason",
            &"y".repeat(4096),
        ],
    );
    assert!(out.status.success(), "{}", err_text(&out));
    let out = sys.as_user("bob", &["recover", &job, "--reason", &"z".repeat(4097)]);
    assert_eq!(out.status.code(), Some(2), "{}", err_text(&out));
}

/// Item 5: ten of bob's jobs failing with "Connection refused" (a transient rule, which his
/// own stderr satisfies at will) used to open the breaker for everyone, and alice's node
/// failure was escalated instead of retried. One user's failures now count at most
/// threshold / min_users: alice's NODE_FAIL is retried.
#[test]
fn round2_item5_one_users_failures_do_not_open_the_breaker_for_another() {
    let sys = System::start(
        "",
        "[breaker]\nthreshold = 10\nwindow = \"10m\"\n[quarantine]\nthreshold = 0\n\
         [retry.budgets]\ntransient = 0\n",
    );
    sys.write_as("bob", "job.sh", &script("exit 1"));
    let bobs: Vec<String> = (0..10).map(|_| sys.submit_as("bob", &["job.sh"])).collect();
    for j in &bobs {
        // His job's output, his own file (sbatch's default slurm-%j.out).
        sys.write_as("bob", &format!("slurm-{j}.out"), b"Connection refused\n");
        sys.fake.ctl(&["finish", j, "FAILED", "1:0"]);
    }
    wait_until("bob's ten failures judged", Duration::from_secs(60), || {
        bobs.iter()
            .all(|j| sys.d.status(j)[0]["last_classification"] == "transient")
    });
    sys.write_as("alice", "job.sh", &script("sleep 100"));
    let a = sys.submit_as("alice", &["job.sh"]);
    sys.fake.ctl(&["run", &a, "n1"]);
    sys.fake.ctl(&["finish", &a, "NODE_FAIL", "0:0"]);
    wait_until(
        "alice's node failure judged",
        Duration::from_secs(30),
        || sys.d.status(&a)[0]["last_classification"] == "node_fail",
    );
    let h = sys.d.history(&a);
    let first = &h["decisions"][0];
    assert_eq!(
        first["action"], "resubmit",
        "bob opened the breaker for alice: {h:#}"
    );
}

/// Item 6: notifications used to go out one at a time for all users, so bob's stalled
/// mail programs (each running as him up to `[notify] timeout`) held alice's mail behind
/// every one of his. Owners are now delivered side by side, and an owner's turn in a batch
/// starts nothing more once it has taken `notify.timeout`: alice's mail goes out before
/// bob's third stalled one has even started.
#[test]
fn round2_item6_one_users_stalled_mail_does_not_hold_up_anothers() {
    let (_tools, prog, log) = stalling_program();
    let sys = System::start(
        "",
        &format!(
            "[notify]\nmail_program = {:?}\ntimeout = \"2s\"\nmax_attempts = 1\n",
            prog.display().to_string()
        ),
    );
    let ended = |user: &str| -> String {
        sys.write_as(user, "job.sh", &script("exit 1"));
        let j = sys.submit_as(user, &["job.sh"]);
        sys.fake.ctl(&["finish", &j, "FAILED", "1:0"]);
        j
    };
    // Ten of bob's chains wait for a decision (a mail each: ten submissions), then alice's.
    let bobs: Vec<String> = (0..10).map(|_| ended("bob")).collect();
    for j in &bobs {
        sys.d
            .wait_state(j, "pending_failed", Duration::from_secs(30));
    }
    let a = ended("alice");
    sys.d
        .wait_state(&a, "pending_failed", Duration::from_secs(30));
    // What had started by the time alice's notification was queued.
    assert_alice_waited_behind_at_most_two_of_bobs(&log);
}

/// Item 4, the other half: what a user's unfinished work keeps in the store is counted
/// against their own limit (`[limits] max_stored_bytes_per_user`): past it their submit is
/// refused (75, naming the key), someone else's is not, and work that ends frees its share.
#[test]
fn round2_item4_what_a_user_stores_is_counted_against_their_own_limit() {
    let sys = System::start(
        "",
        "[limits]\nmax_stored_bytes_per_user = \"1M\"\nmax_script_size = \"1M\"\n",
    );
    let big = {
        let mut s = script("sleep 100");
        s.extend(std::iter::repeat_n(b'#', 600 << 10));
        s.push(b'\n');
        s
    };
    sys.write_as("bob", "big.sh", &big);
    sys.write_as("alice", "big.sh", &big);
    let first = sys.submit_as("bob", &["big.sh"]);
    let out = sys.as_user("bob", &["submit", "--", "big.sh"]);
    assert_eq!(out.status.code(), Some(75), "{}", err_text(&out));
    assert!(
        err_text(&out).contains("limits.max_stored_bytes_per_user"),
        "{}",
        err_text(&out)
    );
    assert_eq!(sys.sbatch_calls_of("bob").len(), 1);
    // alice has her own share.
    sys.submit_as("alice", &["big.sh"]);
    // bob's first chain ends: his share is free again.
    sys.fake.ctl(&["finish", &first, "COMPLETED", "0:0"]);
    sys.d
        .wait_state(&first, "completed", Duration::from_secs(30));
    sys.submit_as("bob", &["big.sh"]);
}

/// Item 8: a user's own sbatch runs their retry in their environment, so what it prints
/// on stderr is theirs; it became the decision's reason and was logged as is, a newline
/// starting a line that looked like the daemon's. Each logged event is now one line.
#[test]
fn round2_item8_a_users_sbatch_output_cannot_forge_a_log_line() {
    let sys = System::start("", "");
    // The fake sbatch is Python: sitecustomize on bob's PYTHONPATH stands for LD_PRELOAD.
    // Once `refuse` exists, his sbatch prints a forged line and fails.
    let evil = sys.home("bob").join("evil");
    std::fs::create_dir(&evil).unwrap();
    let marker = evil.join("refuse");
    std::fs::write(
        evil.join("sitecustomize.py"),
        format!(
            "import os, sys\nif os.path.basename(sys.argv[0]) == 'sbatch' and os.path.exists({marker:?}):\n    sys.stderr.write('sbatch: error: no\\n2026-01-01T00:00:00.000000Z  INFO forged: every chain is fine\\r\\x1b[2K\\n'); sys.stderr.flush(); os._exit(1)\n",
            marker = marker.display().to_string()
        ),
    )
    .unwrap();
    chown(&evil, "bob");
    chown(&evil.join("sitecustomize.py"), "bob");
    sys.write_as("bob", "job.sh", &script("exit 1"));
    let mut c = sys.ctl_command("bob", &["submit", "--", "job.sh"]);
    c.env("PYTHONPATH", &evil);
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", err_text(&out));
    let job = String::from_utf8(out.stdout).unwrap().trim().to_string();
    std::fs::write(&marker, "").unwrap();
    // A transient failure: the retry's sbatch, in bob's environment, is refused.
    sys.write_as("bob", &format!("slurm-{job}.out"), b"Connection refused\n");
    sys.fake.ctl(&["finish", &job, "FAILED", "1:0"]);
    wait_until(
        "the refused retry to be logged",
        Duration::from_secs(60),
        || sys.d.log().contains("forged: every chain is fine"),
    );
    let log = sys.d.log();
    for line in log.lines() {
        assert!(
            !line.starts_with("2026-01-01T00:00:00"),
            "a line of bob's making in the log: {line:?}\n{}",
            tail(&log, 20)
        );
        assert!(!line.contains('\r') && !line.contains('\x1b'), "{line:?}");
    }
}

/// The owner check is per attempt, not per job id (the review of round two): bob's sbatch
/// (his environment: sitecustomize stands for LD_PRELOAD) writes his job's comment with a
/// line that maps his launch's tag to alice's running job, and its answer is lost, so the
/// tag lookup gives his chain her job id. The store holds one live attempt per Slurm job
/// (issue 32), so while her chain's attempt is live his launch waits, unrecorded; once
/// hers has ended his chain may record the id, and then sees only the rows Slurm shows
/// owned by bob: nothing of hers (no state, no ending), and after `lost_job_after` it
/// waits for a person.
#[test]
fn round2_two_chains_of_two_users_holding_one_job_id_each_see_only_their_own() {
    let sys = System::start("lost_job_after = \"3s\"", "");
    sys.write_as("alice", "job.sh", &script("sleep 100"));
    sys.write_as("bob", "job.sh", &script("sleep 100"));
    let a = sys.submit_as("alice", &["job.sh"]);
    sys.fake.ctl(&["run", &a, "n1"]);
    // The comment is his from the job's first moment: no lookup can see it otherwise.
    let evil = sys.home("bob").join("evil");
    std::fs::create_dir(&evil).unwrap();
    std::fs::write(
        evil.join("sitecustomize.py"),
        format!(
            "import os, sys\nif os.path.basename(sys.argv[0]) == 'sbatch':\n    sys.argv = [('--comment=mine\\n{a}|{a}|' + x[len('--comment='):]) if x.startswith('--comment=') else x for x in sys.argv]\n"
        ),
    )
    .unwrap();
    chown(&evil, "bob");
    chown(&evil.join("sitecustomize.py"), "bob");
    sys.fake.ctl(&["mode", "sbatch@bob", "lost-reply"]);
    let mut c = sys.ctl_command("bob", &["submit", "--", "job.sh"]);
    c.env("PYTHONPATH", &evil);
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", err_text(&out));
    sys.fake.ctl(&["mode", "sbatch@bob", "ok"]);
    let bobs = || sys.json_as("bob", &["status", "--json"]);
    // His launch's tag lookup names her job, which her chain's live attempt holds: the
    // store refuses a second live attempt on it, and his launch waits unrecorded.
    wait_until(
        "bob's launch refused the job another chain records",
        Duration::from_secs(60),
        || sys.d.log().contains("is recorded on another chain already"),
    );
    assert_ne!(bobs()[0]["slurm_job_id"], a.as_str(), "{:#}", bobs());
    // alice's job runs, then completes: her chain sees it; bob's sees none of it.
    let alices = || sys.json_as("alice", &["status", "--json", &a]);
    sys.fake.ctl(&["finish", &a, "COMPLETED", "0:0"]);
    wait_until("alice's chain to complete", Duration::from_secs(30), || {
        alices()[0]["state"] == "completed"
    });
    // Her attempt has ended: his launch may now record the id (root sees both chains
    // under it; each user sees their own).
    wait_until(
        "bob's launch settled by its tag",
        Duration::from_secs(60),
        || bobs()[0]["slurm_job_id"] == a.as_str(),
    );
    wait_until(
        "bob's chain to wait for a person",
        Duration::from_secs(60),
        || bobs()[0]["state"] == "pending_failed",
    );
    let row = &bobs()[0];
    assert_ne!(row["slurm_state"], "RUNNING", "{row:#}");
    assert_ne!(row["slurm_state"], "COMPLETED", "{row:#}");
    assert_ne!(row["last_classification"], "completed", "{row:#}");
    assert_eq!(alices().as_array().unwrap().len(), 1);
}

/// Item 6, with the review's case: one of bob's submissions is an array of 20 tasks that
/// all wait for a decision, so one group of 20 events, each given to `[notify] command`,
/// which stalls for him. His turn starts no program once it has taken `notify.timeout`
/// (the rest of his stay due): alice's event goes out before his third command starts.
#[test]
fn round2_item6_one_users_many_stalled_commands_do_not_hold_up_anothers() {
    let (_tools, prog, log) = stalling_program();
    let sys = System::start(
        "",
        &format!(
            "[notify]\nmail = false\ncommand = [{:?}]\ntimeout = \"2s\"\nmax_attempts = 1\n",
            prog.display().to_string()
        ),
    );
    sys.write_as("bob", "job.sh", &script("exit 1"));
    let base = sys.submit_as("bob", &["--array=0-19", "job.sh"]);
    for t in 0..20 {
        sys.fake
            .ctl(&["finish", &format!("{base}_{t}"), "FAILED", "1:0"]);
    }
    wait_until(
        "bob's 20 tasks to wait for a decision",
        Duration::from_secs(60),
        || {
            let rows = sys.d.status(&base);
            rows.len() == 20 && rows.iter().all(|r| r["state"] == "pending_failed")
        },
    );
    sys.write_as("alice", "job.sh", &script("exit 1"));
    let a = sys.submit_as("alice", &["job.sh"]);
    sys.fake.ctl(&["finish", &a, "FAILED", "1:0"]);
    sys.d
        .wait_state(&a, "pending_failed", Duration::from_secs(30));
    assert_alice_waited_behind_at_most_two_of_bobs(&log);
}

/// A program for `[notify]` that logs `start USER` and `done USER`, and stalls for bob
/// (killed at the timeout): its folder (kept while the first value lives), path and log.
fn stalling_program() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tools = tempfile::Builder::new()
        .prefix("ssv-notify-")
        .tempdir_in(scratch_root())
        .unwrap();
    chmod(tools.path(), 0o777);
    let log = tools.path().join("program.log");
    std::fs::write(&log, "").unwrap();
    chmod(&log, 0o666);
    let prog = tools.path().join("program.sh");
    write_executable(
        &prog,
        format!(
            "#!/bin/sh\necho \"start $(id -un)\" >> {log}\ncat > /dev/null\n[ \"$(id -un)\" = bob ] && sleep 60\necho \"done $(id -un)\" >> {log}\n",
            log = log.display()
        ),
    );
    (tools, prog, log)
}

/// Called once alice's notification is queued: waits for it to be delivered, and checks
/// that at most two of bob's stalled programs started meanwhile.
fn assert_alice_waited_behind_at_most_two_of_bobs(log: &Path) {
    let queued = std::fs::read_to_string(log).unwrap().lines().count();
    wait_until("alice's notification", Duration::from_secs(60), || {
        std::fs::read_to_string(log).unwrap().contains("done alice")
    });
    let text = std::fs::read_to_string(log).unwrap();
    let before_alice = text
        .lines()
        .skip(queued)
        .take_while(|l| *l != "done alice")
        .filter(|l| *l == "start bob")
        .count();
    assert!(
        before_alice <= 2,
        "alice's notification waited behind {before_alice} of bob's stalled programs:\n{text}"
    );
}

/// Turns plain sbatch on in a prepared system's config, its spool in the system's folder;
/// returns the spool.
fn plain_sbatch_on(sys: &System) -> PathBuf {
    let spool = sys.root().join("spool");
    let text = std::fs::read_to_string(&sys.d.config).unwrap();
    std::fs::write(
        &sys.d.config,
        format!(
            "{text}\n[plain_sbatch]\nenabled = true\nspool = {:?}\n",
            spool.display().to_string()
        ),
    )
    .unwrap();
    spool
}

/// Issue 32's attacking review: a user's `opt-in`, repeated, makes the daemon rewrite no
/// other user's published choice nor the site's default (it used to rewrite every user's
/// `optin/<uid>` and `default` on the loop for each request: O(users) file writes per
/// request, a request that changes nothing), and not even the asker's own file when the
/// choice is the one published.
#[test]
fn review_a_repeated_opt_in_rewrites_no_one_elses_published_choice() {
    let mut sys = System::prepare("", "");
    let spool = plain_sbatch_on(&sys);
    sys.spawn();
    let ino = |p: &Path| std::fs::symlink_metadata(p).unwrap().ino();
    let file_of = |user: &str| spool.join("optin").join(User::get(user).uid.to_string());
    let opt = |user: &str, what: &str| {
        let out = sys.as_user(user, &[what]);
        assert!(out.status.success(), "{user} {what}: {}", err_text(&out));
    };
    // Published before the answer.
    opt("bob", "opt-in");
    let bob = ino(&file_of("bob"));
    let default = ino(&spool.join("default"));
    opt("alice", "opt-in");
    let alice = ino(&file_of("alice"));
    assert_eq!(std::fs::read(file_of("alice")).unwrap(), b"in\n");
    for _ in 0..3 {
        opt("alice", "opt-in");
    }
    assert_eq!(ino(&file_of("bob")), bob, "bob's file was rewritten");
    assert_eq!(
        ino(&spool.join("default")),
        default,
        "default was rewritten"
    );
    assert_eq!(
        ino(&file_of("alice")),
        alice,
        "alice's unchanged file was rewritten"
    );
    // A change is published at once, and only the asker's.
    opt("alice", "opt-out");
    assert_eq!(std::fs::read(file_of("alice")).unwrap(), b"out\n");
    assert_eq!(std::fs::read(file_of("bob")).unwrap(), b"in\n");
    assert_eq!(ino(&file_of("bob")), bob, "bob's file was rewritten");
}

/// Issue 32's attacking review: `opt-in` and `opt-out` in turn each changed the choice, so
/// within the write rate one user made 3,000 kept changes a minute (in cluster mode as many
/// journal entries, applied by every node). A change of choice has a rate of its own, a
/// dozen an hour; the choice already made is answered and takes none; bob's are his own.
#[test]
fn a_users_plain_sbatch_choice_changes_a_dozen_times_an_hour_at_most() {
    let mut sys = System::prepare("", "");
    let spool = plain_sbatch_on(&sys);
    sys.spawn();
    let published = |user: &str| {
        std::fs::read_to_string(spool.join("optin").join(User::get(user).uid.to_string())).unwrap()
    };
    let opt = |user: &str, what: &str| sys.as_user(user, &[what]);
    for k in 0..12 {
        let what = if k % 2 == 0 { "opt-in" } else { "opt-out" };
        let out = opt("alice", what);
        assert!(out.status.success(), "change {k}: {}", err_text(&out));
    }
    assert_eq!(published("alice"), "out\n");
    // The choice already made is answered, however often.
    for _ in 0..3 {
        let out = opt("alice", "opt-out");
        assert!(out.status.success(), "{}", err_text(&out));
    }
    // A thirteenth change is refused, nothing done, and said so.
    let out = opt("alice", "opt-in");
    assert_eq!(out.status.code(), Some(75), "{}", err_text(&out));
    let said = err_text(&out);
    assert!(
        said.contains("may change 12 times an hour") && said.contains("try again in"),
        "{said}"
    );
    assert_eq!(published("alice"), "out\n");
    // bob's choices are his own.
    let out = opt("bob", "opt-in");
    assert!(out.status.success(), "{}", err_text(&out));
    assert_eq!(published("bob"), "in\n");
}

// Continuation (docs/continuation.md): a progress path is read as the job's owner, in a
// child the daemon can kill (issue 34's attacking review).

/// bob names, as his job's progress path, a path inside alice's home (0700: he can
/// neither list nor search it). The root daemon resolves it as root and writes what it
/// found into bob's `history`: an existing name of alice's ("not the job owner's") must
/// read exactly like one that does not exist ("missing"), or bob can probe any name on
/// the login node.
#[test]
fn a_progress_path_in_a_folder_bob_cannot_search_tells_him_nothing() {
    let sys = System::start("", "[continuation]\nmin_attempt = \"1s\"\n");
    let secret = sys.home("alice").join("secret-project");
    std::fs::write(&secret, b"alice's").unwrap();
    chown(&secret, "alice");
    sys.write_as("bob", "job.sh", b"#!/bin/sh\necho hi\n");
    assert!(
        !std::os::unix::process::CommandExt::uid(
            &mut std::process::Command::new("test"),
            User::get("bob").uid
        )
        .arg("-e")
        .arg(&secret)
        .status()
        .unwrap()
        .success(),
        "bob can see alice's file himself: the test proves nothing"
    );
    let submit = |progress: &Path| bob_submits_with_progress(&sys, progress);
    let there = submit(&secret);
    let not_there = submit(&sys.home("alice").join("no-such-file"));
    for j in [&there, &not_there] {
        sys.fake.ctl(&["finish", j, "TIMEOUT", "0:0"]);
    }
    for j in [&there, &not_there] {
        sys.d
            .wait_state(j, "pending_failed", Duration::from_secs(30));
    }
    // What bob himself reads.
    let seen = |j: &str| -> (Value, String) {
        let h = sys.json_as("bob", &["history", "--json", j]);
        let ds = decisions(&h);
        let last = ds.last().unwrap_or_else(|| panic!("{h:#}"));
        let reason = last["reason"].as_str().unwrap_or("").replace(j, "J");
        (
            last["inputs"]["history"]["continuation"]["now"].clone(),
            reason.replace(secret.to_str().unwrap(), "P").replace(
                sys.home("alice").join("no-such-file").to_str().unwrap(),
                "P",
            ),
        )
    };
    let (a, b) = (seen(&there), seen(&not_there));
    assert_eq!(
        a, b,
        "bob's history tells an existing file in alice's private folder from a missing one"
    );
}

/// bob's `submit --progress PROGRESS -- --time=1 job.sh`; the job id it printed.
fn bob_submits_with_progress(sys: &System, progress: &Path) -> String {
    let out = sys.as_user(
        "bob",
        &[
            "submit",
            "--progress",
            progress.to_str().unwrap(),
            "--",
            "--time=1",
            "job.sh",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The daemon's threads now waiting in a FUSE request (`wchan`).
fn threads_in_fuse_of(pid: i32) -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let wchan = std::fs::read_to_string(t.path().join("wchan")).unwrap_or_default();
        if wchan.contains("fuse") || wchan.contains("request_wait_answer") {
            out.push(format!("{}: {wchan}", t.file_name().to_string_lossy()));
        }
    }
    out
}

/// A continuing job's progress path on a mount that never answers (a dead NFS server):
/// the reader is killed after 10 s each time, and the ending waits for it three polls,
/// then is judged without it (`no_progress`, saying why). Before, the blocking thread
/// reading it was not given back; it waited as long as the mount did. Each such ending
/// kept one more, up to tokio's 512, after which every `spawn_blocking` of the daemon
/// (everyone's status/history reads, the metrics scrape, the cluster's fence check
/// before a release) waited behind them.
#[test]
fn a_hung_progress_read_keeps_no_daemon_thread() {
    let sys = System::start("", "[continuation]\nmin_attempt = \"1s\"\n");
    let hung = HungMount::new(&sys.root().join("hung"));
    sys.write_as("bob", "job.sh", b"#!/bin/sh\necho hi\n");
    let job = bob_submits_with_progress(&sys, &hung.dir.join("ckpt"));
    sys.fake.ctl(&["finish", &job, "TIMEOUT", "0:0"]);
    sys.d
        .wait_state(&job, "pending_failed", Duration::from_secs(120));
    let last = decisions(&sys.d.history(&job)).pop().unwrap();
    assert_eq!(last["reason_code"], "no_progress", "{last:#}");
    assert!(
        last["reason"]
            .as_str()
            .unwrap()
            .contains("at 4 polls in a row"),
        "{last:#}"
    );
    let pid = sys.pid();
    // Given back within 20 s of the judgement, or never.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let stuck = loop {
        let stuck = threads_in_fuse_of(pid);
        if stuck.is_empty() || std::time::Instant::now() > deadline {
            break stuck;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        stuck.is_empty(),
        "the ending was judged, but daemon threads still wait on the hung mount: {stuck:?}"
    );
}

/// `slurm-supervisord --mount-notes` for a system's config, as the package's unit runs it
/// (as root, before the daemon).
fn mount_notes(sys: &System) -> Output {
    Command::new(DAEMON)
        .arg("--config")
        .arg(&sys.d.config)
        .arg("--mount-notes")
        .output()
        .unwrap()
}

/// Review 19: at the first start with a state directory configured where none is yet
/// (the unit's StateDirectory= makes only the package's), `--mount-notes` failed and the
/// unit never started the daemon. It makes the state directory as the daemon would.
#[test]
fn mount_notes_at_the_first_start_makes_the_state_directory() {
    let sys = System::prepare("", "");
    let spool = plain_sbatch_on(&sys);
    assert!(!sys.state_dir().exists());
    let out = mount_notes(&sys);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{said}{}", err_text(&out));
    let _m = Mount(spool.join("notes"));
    assert!(said.contains("0 waiting notes carried over"), "{said}");
    let m = std::fs::metadata(sys.state_dir()).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o711);
}

/// Issue 32: every opted-in user writes into their own notes folder, and the daemon cannot
/// bound what they write there between two scans, so notes on the state directory's
/// filesystem let one user fill it and stop the store's writes for everyone.
/// `slurm-supervisord --mount-notes` (the package's unit runs it, as root, before the
/// daemon) puts `notes/` on a small tmpfs of its own, carrying over the notes already
/// waiting; alice filling it then fills that tmpfs alone, and the daemon, which warned
/// before, says the notes are apart and goes on reading them.
#[test]
fn mounted_notes_keep_a_user_who_fills_them_off_the_state_filesystem() {
    let mut sys = System::prepare("", "");
    let spool = plain_sbatch_on(&sys);
    const SHARED: &str = "the plain-sbatch notes are on the state directory's filesystem";
    const APART: &str = "the plain-sbatch notes are on a filesystem of their own";
    sys.spawn();
    for user in ["alice", "bob"] {
        let out = sys.as_user(user, &["opt-in"]);
        assert!(out.status.success(), "{}", err_text(&out));
    }
    assert_eq!(sys.d.stop().code(), Some(0));
    assert_eq!(sys.d.log().matches(SHARED).count(), 1, "{}", sys.d.log());
    let alice = User::get("alice");
    let notes = spool.join("notes");
    let folder = notes.join(alice.uid.to_string());
    // A note left while the daemon is down, by alice in her own folder.
    let waiting = folder.join("4242.17.1700000000");
    let touched = sys.user_command("alice", "touch").arg(&waiting).status();
    assert!(touched.unwrap().success());
    let mount_notes = || mount_notes(&sys);
    let out = mount_notes();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{said}{}", err_text(&out));
    let _m = Mount(notes.clone());
    assert!(said.contains("1 waiting notes carried over"), "{said}");
    let dev = |p: &Path| std::fs::metadata(p).unwrap().dev();
    assert_ne!(dev(&notes), dev(&sys.state_dir()), "{said}");
    let mounted = |p: &Path| {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.split(' ').nth(4) == Some(p.to_str().unwrap()) && l.contains(" - tmpfs "))
            .count()
    };
    assert_eq!(mounted(&notes), 1);
    // The note waits in alice's folder, hers as before, and the folder is closed to others.
    let m = std::fs::symlink_metadata(&waiting).unwrap();
    assert!(m.file_type().is_file() && m.len() == 0 && m.uid() == alice.uid);
    let f = std::fs::symlink_metadata(&folder).unwrap();
    assert_eq!((f.uid(), f.mode() & 0o7777), (alice.uid, 0o700));
    // Again: nothing more is mounted.
    let out = mount_notes();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success() && said.contains("already on a filesystem of its own"),
        "{said}"
    );
    assert_eq!(mounted(&notes), 1);
    // alice writes all she can: the tmpfs fills, and it alone.
    let filler = folder.join("filler");
    let dd = sys
        .user_command("alice", "dd")
        .args(["if=/dev/zero", "bs=1M", "count=64"])
        .arg(format!("of={}", filler.display()))
        .output()
        .unwrap();
    assert!(
        !dd.status.success(),
        "alice wrote 64 MiB into her notes folder"
    );
    assert!(
        String::from_utf8_lossy(&dd.stderr).contains("No space left on device"),
        "{}",
        err_text(&dd)
    );
    let written = std::fs::metadata(&filler).unwrap();
    assert!(written.len() <= 16 << 20, "{} bytes", written.len());
    assert_eq!(written.dev(), dev(&notes));
    // The daemon says the notes are apart, and its scan reads them: the filler, not a
    // note, is removed unread.
    sys.spawn();
    // bob's folder is made again at the start (his choice is in the store), and a note is
    // an empty file: his is written all the same.
    let bobs_folder = notes.join(User::get("bob").uid.to_string());
    wait_until("bob's folder made again", Duration::from_secs(30), || {
        bobs_folder.is_dir()
    });
    let bobs = bobs_folder.join("4343.18.1700000000");
    let touched = sys.user_command("bob", "touch").arg(&bobs).status();
    assert!(touched.unwrap().success(), "bob's note was not written");
    wait_until(
        "the filler removed by the scan",
        Duration::from_secs(30),
        || !filler.exists(),
    );
    let log = sys.d.log();
    assert_eq!(log.matches(SHARED).count(), 1, "{log}");
    assert_eq!(log.matches(APART).count(), 1, "{log}");
}
