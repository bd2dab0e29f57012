//! Network clients (issue 24): a root daemon in system-wide mode with `[server] listen`
//! on loopback, a private munged (tests/common/munged.rs) for it and its clients, the
//! fake Slurm, and real users alice and bob. `supervisorctl` reaches the daemon with a
//! client config that lists the server; the attacks speak the protocol by hand
//! (`protocol::net`), with credentials made by Debian's `munge` command as each user.
//!
//! Covered: a user submits, follows and cancels over the network with the rights of the
//! Unix socket (and no more: bob sees and cancels nothing of alice's); root from an
//! unlisted node is no one, and an administrator once `server.root_nodes` lists it; and
//! the attacks: an opening that does not authenticate (version 2's bare opening, garbage,
//! one for another uid, nonce, hello or address: a refusal and never the daemon's proof),
//! a squatter and a relay on the port, a replayed credential, one for another connection's
//! nonce, an expired one,
//! one restricted to another uid, a body changed after the credential was made, another
//! MUNGE key, garbage and huge lines, slowloris, a thousand connections, clients that
//! never read (a small answer, and one far larger than the sockets' buffers). Each is
//! refused and logged (a flood of them in a bounded number of lines), nothing is done for
//! it, and alice's request meanwhile is answered within bounds. On two login nodes
//! (network namespaces, tests/common/netns.rs): submit, follow, cancel, classify and
//! recover from the other node, and `supervisorctl mcp` there driven by the official MCP
//! client (tests/mcp), each user with their own rights only.
//!
//! Every attack loop is bounded in count and time and aimed at loopback or the test's
//! own namespaces only. Needs root, munge (scripts/test installs it), python3, `ip` and
//! `nsenter`, and the MCP venv (tests/common `mcp_python`).

mod common;
mod mariadb;

use common::munged::Munged;
use common::system::*;
use common::wait_for;
use slurm_supervisor::domain::request_binding;
use slurm_supervisor::protocol::net::Hello;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

/// How a test's daemon starts.
enum Start<'a> {
    /// As root, binding its port itself.
    Root,
    /// As this user: a per-user daemon.
    AsUser(&'a str),
    /// As root, with this listening socket passed as systemd passes it.
    Activated(std::os::fd::OwnedFd),
}

/// A root daemon listening on loopback, its munged, and a client config for users.
struct Net {
    sys: System,
    munged: Munged,
    addr: String,
    client_config: PathBuf,
}

/// A free port of loopback, outside the range the kernel hands out to outgoing
/// connections (so no client of another test takes it meanwhile).
fn free_port(ip: &str) -> u16 {
    let base = 20_000 + (std::process::id() % 500) as u16 * 20;
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    loop {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        assert!(n < 2000, "no free port found");
        let port = base + n % 10_000;
        if std::net::TcpListener::bind((ip, port)).is_ok() {
            return port;
        }
    }
}

impl Net {
    /// `server_extra` goes into `[server]`. A request has 10 s to arrive: the tests make
    /// their credential after reading the hello (`runuser` and `munge`, slow on a busy
    /// machine), and a test of slow requests names a shorter time (`start_with`).
    fn start(server_extra: &str) -> Net {
        Net::start_with(server_extra, "10s")
    }

    fn start_with(server_extra: &str, request_timeout: &str) -> Net {
        Net::start_full(server_extra, request_timeout, "")
    }

    /// `client_extra` goes into the client config's `[client]`.
    fn start_full(server_extra: &str, request_timeout: &str, client_extra: &str) -> Net {
        Net::start_on(
            ("127.0.0.1", 0),
            &[],
            server_extra,
            request_timeout,
            client_extra,
        )
    }

    /// The daemon listening on `ip` (an address of this host), at `port` (0: a free one),
    /// started under `launcher`.
    fn start_on(
        at: (&str, u16),
        launcher: &[String],
        server_extra: &str,
        request_timeout: &str,
        client_extra: &str,
    ) -> Net {
        Net::start_as(
            Start::Root,
            at,
            launcher,
            server_extra,
            request_timeout,
            client_extra,
        )
    }

    /// `start_on`, the daemon started as `how` says.
    fn start_as(
        how: Start,
        (ip, port): (&str, u16),
        launcher: &[String],
        server_extra: &str,
        request_timeout: &str,
        client_extra: &str,
    ) -> Net {
        let munged = Munged::start();
        let port = if port == 0 {
            free_port(if ip.contains(':') { "::" } else { ip })
        } else {
            port
        };
        let addr = if ip.contains(':') {
            format!("[{ip}]:{port}")
        } else {
            format!("{ip}:{port}")
        };
        let extra = format!(
            "[server]\nlisten = {addr:?}\nid = \"login1\"\nmunge_socket = {:?}\n{server_extra}\n",
            munged.socket().display().to_string()
        );
        let mut sys = System::prepare("", &extra);
        // The request time the test asks for (short for the slow attacks, so they end soon).
        let text = std::fs::read_to_string(&sys.d.config).unwrap();
        let text = if text.contains("[limits]") {
            text.replace(
                "[limits]",
                &format!("[limits]\nrequest_timeout = {request_timeout:?}"),
            )
        } else {
            format!("{text}\n[limits]\nrequest_timeout = {request_timeout:?}\n")
        };
        std::fs::write(&sys.d.config, text).unwrap();
        sys.d.launcher = launcher.to_vec();
        match how {
            Start::Root => sys.spawn(),
            Start::Activated(listener) => {
                // As systemd passes a socket: descriptor 3, LISTEN_PID (the daemon's pid:
                // the shell's, which exec keeps), LISTEN_FDS, LISTEN_FDNAMES.
                use std::os::fd::AsRawFd;
                use std::os::unix::process::CommandExt;
                sys.d.launcher = [
                    "sh",
                    "-c",
                    "export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=server; exec \"$@\"",
                    "sh",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                let mut cmd = sys.daemon_command(&sys.d.config.clone());
                let fd = listener.as_raw_fd();
                // SAFETY: dup2 and fcntl are async-signal-safe.
                unsafe {
                    cmd.pre_exec(move || {
                        if fd == 3 {
                            libc::fcntl(3, libc::F_SETFD, 0);
                        } else if libc::dup2(fd, 3) < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                sys.d.child = Some(cmd.spawn().unwrap());
                drop(listener);
                wait_for(
                    "the activated daemon to answer",
                    Duration::from_secs(60),
                    || {
                        if let Some(st) = sys.d.child.as_mut().unwrap().try_wait().unwrap() {
                            panic!("the daemon exited ({st}); log:\n{}", sys.d.log());
                        }
                        sys.d.ctl(&["status", "--json"]).status.success()
                    },
                );
            }
            Start::AsUser(user) => {
                // Its state and its socket's folder are the user's; it answers its own
                // user only, so it is that user who waits for it.
                let state = sys.root().join("state");
                std::fs::create_dir(&state).unwrap();
                chown(&state, user);
                chown(&sys.root().join("run"), user);
                // setpriv execs the daemon (runuser would fork and wait for it), so the
                // child the test kills at its end is the daemon itself, not a parent that
                // leaves it running.
                sys.d.launcher = [
                    "setpriv",
                    "--reuid",
                    user,
                    "--regid",
                    user,
                    "--init-groups",
                    "--",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                let child = sys
                    .daemon_command(&sys.d.config.clone())
                    .env("HOME", format!("/home/{user}"))
                    .env("USER", user)
                    .env("LOGNAME", user)
                    .spawn()
                    .unwrap();
                sys.d.child = Some(child);
                wait_for(
                    &format!("{user}'s own daemon to answer her"),
                    Duration::from_secs(60),
                    || sys.as_user(user, &["status", "--json"]).status.success(),
                );
            }
        }
        let client_config = sys.root().join("client.toml");
        std::fs::write(
            &client_config,
            format!(
                "[client]\nservers = [{addr:?}]\nmunge_socket = {:?}\n{client_extra}\n",
                munged.socket().display().to_string()
            ),
        )
        .unwrap();
        chmod(&client_config, 0o644);
        Net {
            sys,
            munged,
            addr,
            client_config,
        }
    }

    /// `supervisorctl` as `user` over the network.
    fn ctl(&self, user: &str, args: &[&str]) -> Output {
        let mut cmd = self.sys.user_command(user, &self.sys.ctl);
        if user == "root" {
            cmd.current_dir(self.sys.root());
        }
        cmd.arg("--config").arg(&self.client_config).args(args);
        cmd.output().unwrap()
    }

    fn ctl_ok(&self, user: &str, args: &[&str]) -> String {
        let out = self.ctl(user, args);
        assert!(
            out.status.success(),
            "{user}: {args:?} over the network failed ({:?}): {}\nlog:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr),
            common::tail(&self.sys.d.log(), 30)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// alice's `status --json` over the network answers within `within`.
    fn alice_is_served_within(&self, within: Duration) {
        let start = Instant::now();
        let out = run_within(
            {
                let mut cmd = self.sys.user_command("alice", &self.sys.ctl);
                cmd.arg("--config")
                    .arg(&self.client_config)
                    .args(["status", "--json"]);
                cmd
            },
            within,
        );
        let out = out
            .output
            .unwrap_or_else(|| panic!("alice was not answered within {within:?}"));
        assert!(
            out.status.success(),
            "alice's status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(start.elapsed() <= within);
    }

    /// A connection with the daemon's hello read, and nothing sent yet (`Net::send` opens
    /// it, reads the daemon's proof and sends the request).
    fn connect(&self) -> (TcpStream, BufReader<TcpStream>, Hi) {
        let (s, r, hello) = connect_to(&self.addr);
        assert!(
            hello.active && hello.uid == 0 && hello.daemon == "login1",
            "{hello:?}"
        );
        (s, r, hello)
    }

    /// A credential made by `user` with this test's munged (or `munged`), restricted to
    /// `restrict`, living `ttl` seconds, holding `payload`.
    fn cred_with(munged: &Munged, user: &str, payload: &[u8], restrict: u32, ttl: u32) -> Vec<u8> {
        let out = munged.run_as(
            (user, None),
            "munge",
            &[
                &format!("--restrict-uid={restrict}"),
                &format!("--ttl={ttl}"),
            ],
            payload,
        );
        Self::made(out, user)
    }

    /// The credential `munge` printed, once it said it made one.
    fn made(out: std::process::Output, maker: &str) -> Vec<u8> {
        assert!(out.status.success(), "munge as {maker}: {out:?}");
        out.stdout.trim_ascii_end().to_vec()
    }

    /// An opening credential by `user` for this connection's hello, committed to `body`.
    fn cred_for(&self, user: &str, hello: &Hi, body: &[u8]) -> Vec<u8> {
        Self::cred_with(&self.munged, user, &hello.opening(body), 0, 60)
    }

    /// The same, made by `uid`, which needs no account on this host.
    fn cred_by_uid(&self, uid: u32, hello: &Hi, body: &[u8]) -> Vec<u8> {
        let payload = hello.opening(body);
        let out = self
            .munged
            .run_as_uid(uid, "munge", &["--restrict-uid=0", "--ttl=60"], &payload);
        Self::made(out, &format!("uid {uid}"))
    }

    /// Sends a credential as the opening line; if the daemon proves itself, sends the
    /// salt and the body. Returns what the daemon said after the opening (a refusal), or
    /// its answer to the body (until it closes).
    fn send(conn: (TcpStream, BufReader<TcpStream>), cred: &[u8], body: &[u8]) -> String {
        Self::send_seeing(conn, cred, body).1
    }

    /// [`Net::send`], with everything the daemon sent, its proof line included: where a
    /// test asserts that no proof came.
    fn send_all(conn: (TcpStream, BufReader<TcpStream>), cred: &[u8], body: &[u8]) -> String {
        let (first, answer) = Self::send_seeing(conn, cred, body);
        if first.starts_with("MUNGE:") {
            format!("{first}{answer}")
        } else {
            answer
        }
    }

    /// What the daemon sent first, and its answer (all of it, when no proof came first).
    fn send_seeing(
        conn: (TcpStream, BufReader<TcpStream>),
        cred: &[u8],
        body: &[u8],
    ) -> (String, String) {
        let (mut s, mut r) = conn;
        let mut out = cred.to_vec();
        out.push(b'\n');
        let _ = s.write_all(&out);
        let mut first = String::new();
        let _ = r.read_line(&mut first);
        if !first.starts_with("MUNGE:") {
            let mut all = first.clone();
            let _ = r.read_to_string(&mut all);
            return (first, all);
        }
        let _ = s.write_all(&salted(body));
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut answer = String::new();
        let _ = r.read_to_string(&mut answer);
        (first, answer)
    }

    /// Waits until the daemon's log has a refusal with `reason`.
    fn logged_refusal(&self, reason: &str) {
        wait_for(
            &format!("the refusal ({reason}) in the daemon's log"),
            Duration::from_secs(10),
            || self.sys.d.log().lines().any(|l| is_refusal(l, reason)),
        );
    }

    /// The refusal lines with `reason` in the daemon's log.
    fn refusals(&self, reason: &str) -> usize {
        refusal_lines(&self.sys.d.log(), reason)
    }

    /// Waits until the daemon's log has at least `n` refusals with `reason`.
    fn logged_refusals(&self, reason: &str, n: usize) {
        wait_for(
            &format!("{n} refusals ({reason}) in the daemon's log"),
            Duration::from_secs(10),
            || self.refusals(reason) >= n,
        );
    }

    fn logged_pushed_out(&self) {
        wait_for(
            "a connection pushed out in the daemon's log",
            Duration::from_secs(10),
            || {
                self.sys
                    .d
                    .log()
                    .contains("pushed out of the pre-authentication pool")
            },
        );
    }
}

const PING: &[u8] = br#"{"cmd":"ping"}"#;

/// The salt these tests commit their requests with (a client draws a fresh one each
/// time; a fixed one lets `Net::send` follow any credential).
const SALT: request_binding::Salt = [0x5a; request_binding::SALT_LEN];

/// The salt line and the body line a client sends once the daemon proved itself.
fn salted(body: &[u8]) -> Vec<u8> {
    let mut out = slurm_supervisor::protocol::net::hex(&SALT).into_bytes();
    out.push(b'\n');
    out.extend_from_slice(body);
    out.push(b'\n');
    out
}

/// A hello as a client reads it: what it says, its line (without the newline) and the
/// address the client dialled, which an opening names.
#[derive(Debug)]
struct Hi {
    hello: Hello,
    line: Vec<u8>,
    dialled: std::net::SocketAddr,
}

impl std::ops::Deref for Hi {
    type Target = Hello;
    fn deref(&self) -> &Hello {
        &self.hello
    }
}

impl Hi {
    fn of(mut line: Vec<u8>, dialled: std::net::SocketAddr) -> Hi {
        let hello: Hello = serde_json::from_slice(&line)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&line)));
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        Hi {
            hello,
            line,
            dialled,
        }
    }

    /// The payload of an opening for this hello committed to `body`, as a client makes it.
    fn opening(&self, body: &[u8]) -> Vec<u8> {
        self.opening_as(&self.daemon, &self.line, self.dialled, body)
    }

    /// The same with another daemon's identity, hello line or dialled address.
    fn opening_as(
        &self,
        daemon: &str,
        line: &[u8],
        dialled: std::net::SocketAddr,
        body: &[u8],
    ) -> Vec<u8> {
        request_binding::open(
            &rand::random(),
            daemon,
            &self.nonce_bytes().unwrap(),
            line,
            dialled,
            &request_binding::commit(&SALT, body),
        )
    }
}

/// A connection to `addr` with the hello read, nothing sent.
fn connect_to(addr: &str) -> (TcpStream, BufReader<TcpStream>, Hi) {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).unwrap();
    let hi = Hi::of(line, s.peer_addr().unwrap());
    (s, r, hi)
}

/// Whether a log line is a refusal with `reason`.
fn is_refusal(line: &str, reason: &str) -> bool {
    line.contains("network request refused")
        && (line.contains(&format!("reason={reason} "))
            || line.contains(&format!("reason=\"{reason}\"")))
}

/// How many lines of `log` are refusals with `reason`.
fn refusal_lines(log: &str, reason: &str) -> usize {
    log.lines().filter(|l| is_refusal(l, reason)).count()
}

/// The numbers of the summaries of refusals with `reason` left unlogged (`suppressed=N`).
fn suppressed_counts(log: &str, reason: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| {
            l.contains("network refusals not logged")
                && (l.contains(&format!("reason={reason} "))
                    || l.contains(&format!("reason=\"{reason}\"")))
        })
        .map(|l| {
            let at = l.find("suppressed=").expect("a summary has its count") + "suppressed=".len();
            l[at..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect::<String>()
                .parse()
                .unwrap()
        })
        .collect()
}

fn submit_body(script: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "cmd": "submit",
        "argv": ["job.sh"],
        "cwd": "/tmp",
        "env": [],
        "script": script.as_bytes(),
        "max_retries": null,
    }))
    .unwrap()
}

fn forbidden(answer: &str, says: &str) {
    let v: serde_json::Value = serde_json::from_str(answer.trim())
        .unwrap_or_else(|e| panic!("not an answer ({e}): {answer:?}"));
    assert_eq!(v["error"]["kind"], "forbidden", "{answer}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains(says),
        "{answer}"
    );
}

#[test]
fn a_user_submits_follows_and_cancels_over_the_network_with_her_rights_only() {
    let n = Net::start("");
    n.sys.write_as("alice", "job.sh", b"#!/bin/sh\nsleep 600\n");
    let job = n
        .ctl_ok("alice", &["submit", "--", "job.sh"])
        .trim()
        .to_string();
    assert!(
        job.chars().all(|c| c.is_ascii_digit()) && !job.is_empty(),
        "{job}"
    );
    assert_eq!(n.sys.sbatch_calls_of("alice").len(), 1);
    let status: serde_json::Value =
        serde_json::from_str(&n.ctl_ok("alice", &["status", "--json"])).unwrap();
    assert_eq!(status.as_array().unwrap().len(), 1, "{status}");
    assert_eq!(status[0]["slurm_job_id"], job.as_str());
    let history: serde_json::Value =
        serde_json::from_str(&n.ctl_ok("alice", &["history", "--json", &job])).unwrap();
    assert_eq!(history["attempts"][0]["slurm_job_id"], job.as_str());
    // The same daemon over the Unix socket shows the same chain.
    let local = n.sys.json_as("alice", &["status", "--json"]);
    assert_eq!(local, status);
    // bob over the network: none of it is his.
    let bobs: serde_json::Value =
        serde_json::from_str(&n.ctl_ok("bob", &["status", "--json"])).unwrap();
    assert_eq!(bobs, serde_json::json!([]));
    let out = n.ctl("bob", &["cancel", &job]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    let out = n.ctl("bob", &["history", "--json", &job]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    // alice cancels it.
    n.ctl_ok("alice", &["cancel", &job]);
    wait_for("alice's chain cancelled", Duration::from_secs(30), || {
        let s: serde_json::Value =
            serde_json::from_str(&n.ctl_ok("alice", &["status", "--json"])).unwrap();
        s[0]["state"] == "cancelled"
    });
    // Through the environment variable as well (the config's list replaced).
    let mut cmd = n.sys.user_command("alice", &n.sys.ctl);
    let empty = n.sys.root().join("empty.toml");
    std::fs::write(
        &empty,
        format!(
            "[client]\nmunge_socket = {:?}\n",
            n.munged.socket().display().to_string()
        ),
    )
    .unwrap();
    chmod(&empty, 0o644);
    cmd.arg("--config")
        .arg(&empty)
        .env("SLURM_SUPERVISOR_SERVERS", &n.addr)
        .args(["status", "--json"]);
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let via_env: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(via_env[0]["slurm_job_id"], job.as_str());
}

#[test]
fn root_on_a_node_not_listed_is_no_one_and_an_administrator_once_listed() {
    let n = Net::start("");
    n.sys.write_as("alice", "job.sh", b"#!/bin/sh\nsleep 600\n");
    let job = n
        .ctl_ok("alice", &["submit", "--", "job.sh"])
        .trim()
        .to_string();
    let out = n.ctl("root", &["status", "--json"]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("server.root_nodes"),
        "{out:?}"
    );
    n.logged_refusal("root_elsewhere");
    let out = n.ctl("root", &["cancel", &job]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert_eq!(n.sys.calls("scancel"), 0);
    // Listed: the origin munged states for this host.
    let probe = n.munged.client().encode(b"", None, None).unwrap();
    let origin = n.munged.client().decode(&probe).unwrap().origin;
    drop(n);
    let n = Net::start(&format!("root_nodes = [\"{origin}\"]\n"));
    n.sys.write_as("alice", "job.sh", b"#!/bin/sh\nsleep 600\n");
    let job = n
        .ctl_ok("alice", &["submit", "--", "job.sh"])
        .trim()
        .to_string();
    let all: serde_json::Value =
        serde_json::from_str(&n.ctl_ok("root", &["status", "--json"])).unwrap();
    assert_eq!(all[0]["slurm_job_id"], job.as_str(), "{all}");
}

#[test]
fn replayed_and_other_connections_credentials_are_refused() {
    let n = Net::start("");
    let (s, r, hello) = n.connect();
    let cred = n.cred_for("alice", &hello, PING);
    let ok = Net::send((s, r), &cred, PING);
    assert!(ok.starts_with("{\"ok\""), "{ok}");
    // The same credential and body on a new connection: munged has seen it.
    let (s, r, _) = n.connect();
    forbidden(&Net::send((s, r), &cred, PING), "replayed");
    n.logged_refusal("replayed");
    // A fresh credential, but made for another connection's nonce.
    let (_s1, _r1, first) = n.connect();
    let (s2, r2, _second) = n.connect();
    let for_first = n.cred_for("alice", &first, PING);
    forbidden(&Net::send((s2, r2), &for_first, PING), "another nonce");
    n.logged_refusal("nonce");
    // Made for another daemon (login2), with this connection's nonce.
    let (s, r, hello) = n.connect();
    let payload = hello.opening_as("login2", &hello.line, hello.dialled, PING);
    let cred = Net::cred_with(&n.munged, "alice", &payload, 0, 60);
    forbidden(&Net::send((s, r), &cred, PING), "another daemon");
    n.logged_refusal("daemon");
    n.alice_is_served_within(Duration::from_secs(10));
}

#[test]
fn a_changed_body_an_expired_credential_another_uid_and_another_key_are_refused() {
    let n = Net::start("");
    n.sys.write_as("alice", "job.sh", b"#!/bin/sh\nsleep 600\n");
    // Made for a ping, sent with a submit: nothing is submitted.
    let (s, r, hello) = n.connect();
    let cred = n.cred_for("alice", &hello, PING);
    forbidden(
        &Net::send((s, r), &cred, &submit_body("echo evil\n")),
        "another request body",
    );
    n.logged_refusal("body");
    // One byte of a submit changed after the credential was made.
    let (s, r, hello) = n.connect();
    let body = submit_body("echo good\n");
    let cred = n.cred_for("alice", &hello, &body);
    let mut changed = body.clone();
    let at = changed.len() - 3;
    changed[at] ^= 0x01;
    let answer = Net::send((s, r), &cred, &changed);
    assert!(answer.contains("\"forbidden\""), "{answer}");
    n.logged_refusals("body", 2);
    // Restricted to bob: the root daemon cannot decode it.
    let (s, r, hello) = n.connect();
    let payload = hello.opening(PING);
    let bob = User::get("bob");
    let cred = Net::cred_with(&n.munged, "alice", &payload, bob.uid, 60);
    forbidden(&Net::send((s, r), &cred, PING), "not for this uid");
    n.logged_refusal("unauthorized");
    // Another MUNGE key (another cluster's munged).
    let other = Munged::start();
    let (s, r, hello) = n.connect();
    let payload = hello.opening(PING);
    let cred = Net::cred_with(&other, "alice", &payload, 0, 60);
    forbidden(&Net::send((s, r), &cred, PING), "invalid credential");
    n.logged_refusal("invalid");
    // Expired: a time to live of one second, sent once it has passed.
    let (s, r, hello) = n.connect();
    let payload = hello.opening(PING);
    let made = std::time::SystemTime::now();
    let cred = Net::cred_with(&n.munged, "alice", &payload, 0, 1);
    // The credential's clock counts whole seconds: past made + 1 s by a full second.
    wait_for(
        "the credential's time to live to pass",
        Duration::from_secs(10),
        || made.elapsed().unwrap() >= Duration::from_secs(3),
    );
    // A fresh connection: its nonce would not match either, but munged's verdict comes
    // first: expired.
    drop((s, r));
    let (s, r, _) = n.connect();
    forbidden(&Net::send((s, r), &cred, PING), "expired");
    n.logged_refusal("expired");
    assert!(
        n.sys.sbatch_calls_of("alice").is_empty(),
        "a refused submit ran sbatch"
    );
    n.alice_is_served_within(Duration::from_secs(10));
}

#[test]
fn garbage_huge_and_slow_lines_are_refused_without_holding_anyone_up() {
    let n = Net::start("");
    // Garbage: not a credential.
    let (s, r, _) = n.connect();
    forbidden(&Net::send((s, r), b"\x00\xffGET / HTTP/1.1", PING), "");
    n.logged_refusal("nul");
    let (s, r, _) = n.connect();
    forbidden(
        &Net::send((s, r), b"MUNGE:AAAA:", PING),
        "invalid credential",
    );
    n.logged_refusal("invalid");
    // A line far longer than any credential: refused after MAX_CREDENTIAL bytes, the rest
    // unread.
    let (mut s, mut r, _) = n.connect();
    let huge = vec![b'A'; 64 << 10];
    let _ = s.write_all(&huge);
    let mut answer = String::new();
    let _ = r.read_to_string(&mut answer);
    forbidden(&answer, "at most");
    n.logged_refusal("too_long");
    // A valid credential with a body over the size limit: the Unix socket's answer.
    let (s, r, hello) = n.connect();
    let cred = n.cred_for("alice", &hello, b"x");
    let answer = Net::send((s, r), &cred, &vec![b'x'; 21 << 20]);
    assert!(answer.contains("request larger than"), "{answer}");
    n.logged_refusal("too_large");
    // Slowloris: a credential trickled a byte at a time is cut off at the request timeout
    // (1 s on this daemon; twice that at most), while alice is served.
    let n = Net::start_with("", "1s");
    let start = Instant::now();
    let (mut s, _r, _) = n.connect();
    let mut cut_off = false;
    for i in 0..100 {
        if s.write_all(&[b"MUNGE:"[i % 6]]).is_err() {
            cut_off = true;
            break;
        }
        if i == 2 {
            n.alice_is_served_within(Duration::from_secs(10));
        }
        // A trickle: one byte each 100 ms, bounded at 100 bytes.
        std::thread::sleep(Duration::from_millis(100));
        let mut probe = [0u8; 1];
        s.set_nonblocking(true).unwrap();
        let closed = s.peek(&mut probe).is_ok();
        s.set_nonblocking(false).unwrap();
        if closed {
            cut_off = true;
            break;
        }
    }
    assert!(cut_off, "a trickling connection was never cut off");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    n.logged_refusal("slow");
}

#[test]
fn a_thousand_idle_connections_hold_up_no_one() {
    // Idle connections that are not cut off by time while the thousand arrive, however
    // slowly the daemon accepts them: the pool alone must make room.
    let n = Net::start_with("", "30s");
    // Room for the thousand connections in this process.
    let lim = libc::rlimit {
        rlim_cur: 8192,
        rlim_max: 8192,
    };
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    let mut idle = Vec::with_capacity(1000);
    for _ in 0..1000 {
        match TcpStream::connect(&n.addr) {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connection {} failed: {e}", idle.len()),
        }
    }
    // With all of them open (most pushed out by newer ones), alice is answered.
    n.alice_is_served_within(Duration::from_secs(10));
    // The oldest were pushed out: the daemon closed them (EOF after the hello).
    let first = &mut idle[0];
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut all = Vec::new();
    let read = first.read_to_end(&mut all);
    assert!(read.is_ok(), "{read:?}");
    assert!(
        all.ends_with(b"\n") && all.starts_with(b"{\"version\""),
        "{all:?}"
    );
    drop(idle);
    n.logged_pushed_out();
}

#[test]
fn a_user_holding_connections_he_never_finishes_fills_only_his_own_share() {
    // Time enough to make all the credentials before the first connection gives up.
    let n = Net::start_with("", "20s");
    // bob: a credential on each of twelve connections (his share is eight), then neither
    // the request nor a read of any answer.
    let mut held = Vec::new();
    for _ in 0..12 {
        held.push(n.connect());
    }
    let body = br#"{"cmd":"status","id":null}"#;
    for (s, _, hello) in &mut held {
        let mut line = n.cred_for("bob", hello, body);
        line.push(b'\n');
        s.write_all(&line).unwrap();
    }
    let refused = || {
        n.sys
            .d
            .log()
            .lines()
            .filter(|l| l.contains("network request refused") && l.contains("\"connections\""))
            .count()
    };
    // Twelve asked, eight held: four refused (never more, so waiting for four is exact).
    wait_for("bob's four refusals", Duration::from_secs(10), || {
        refused() >= 4
    });
    assert_eq!(refused(), 4, "{}", n.sys.d.log());
    // alice, over the network and over the Unix socket, is served meanwhile.
    n.alice_is_served_within(Duration::from_secs(10));
    let local = n
        .sys
        .as_user_within("alice", &["status", "--json"], Duration::from_secs(10));
    assert!(local.output.is_some_and(|o| o.status.success()));
    // bob's own Unix-socket connections count against the same share: full.
    let out = n.sys.as_user("bob", &["status", "--json"]);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("connections_per_user"),
        "{out:?}"
    );
    drop(held);
    // Given back when they close.
    wait_for("bob's share back", Duration::from_secs(10), || {
        n.sys.as_user("bob", &["status", "--json"]).status.success()
    });
}

/// A submit sent again with its request id (its answer lost) is answered with the first
/// one's job; the same id from another user is another user's submission, which neither
/// sees nor meets the first.
#[test]
fn a_retried_submit_submits_once_and_a_request_id_is_its_owners_alone() {
    let n = Net::start("");
    let body = |user: &str| {
        serde_json::to_vec(&serde_json::json!({
            "cmd": "submit",
            "argv": ["job.sh"],
            "cwd": n.sys.home(user).display().to_string(),
            "env": [],
            "script": b"#!/bin/sh\nsleep 600\n",
            "max_retries": null,
            "request_id": "retry-1",
        }))
        .unwrap()
    };
    let submit = |user: &str| {
        let (s, r, hello) = n.connect();
        let b = body(user);
        let cred = n.cred_for(user, &hello, &b);
        let answer = Net::send((s, r), &cred, &b);
        let v: serde_json::Value = serde_json::from_str(answer.trim())
            .unwrap_or_else(|e| panic!("{user}'s submit: {e}: {answer}"));
        v["ok"]["job_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{user}'s submit: {answer}"))
            .to_string()
    };
    let first = submit("alice");
    let again = submit("alice");
    assert_eq!(first, again);
    assert_eq!(n.sys.sbatch_calls_of("alice").len(), 1);
    let bobs = submit("bob");
    assert_ne!(bobs, first);
    assert_eq!(n.sys.sbatch_calls_of("bob").len(), 1);
    // And bob's retry is his own job again.
    assert_eq!(submit("bob"), bobs);
    assert_eq!(n.sys.fake.sbatch_calls().len(), 2);
}

/// A CA and a certificate for 127.0.0.1 signed by it, made with the openssl command in
/// `dir`; returns (ca.pem, cert.pem, key.pem).
fn certificates(dir: &std::path::Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the openssl command (Debian's openssl)");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    let ca_key = format!("{name}-ca.key");
    let ca = format!("{name}-ca.pem");
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &ca_key,
        "-out",
        &ca,
        "-days",
        "1",
        "-subj",
        &format!("/CN={name} test CA"),
    ]);
    run(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=login1",
    ]);
    std::fs::write(
        dir.join("ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "ext",
    ]);
    for f in [&ca, "server.pem"] {
        chmod(&dir.join(f), 0o644);
    }
    // The daemon refuses a key others may read.
    chmod(&dir.join("server.key"), 0o600);
    (
        dir.join(&ca),
        dir.join("server.pem"),
        dir.join("server.key"),
    )
}

/// With `tls_cert` and `tls_key` every connection is TLS: a client with the site's CA is
/// served, the daemon says nothing in clear, and a client without TLS, or trusting
/// another CA, gets nothing.
#[test]
fn with_tls_the_wire_is_encrypted_and_only_a_client_trusting_the_site_ca_is_served() {
    let dir = tempfile::Builder::new()
        .prefix("ssv-tls-")
        .tempdir_in(common::scratch_root())
        .unwrap();
    chmod(dir.path(), 0o755);
    let (ca, cert, key) = certificates(dir.path(), "site");
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    chmod(&other, 0o755);
    let (other_ca, _, _) = certificates(&other, "other");
    let n = Net::start_full(
        &format!(
            "tls_cert = {:?}\ntls_key = {:?}\n",
            cert.display().to_string(),
            key.display().to_string()
        ),
        "10s",
        &format!("tls_ca = {:?}\n", ca.display().to_string()),
    );
    n.sys.write_as("alice", "job.sh", b"#!/bin/sh\nsleep 600\n");
    let job = n
        .ctl_ok("alice", &["submit", "--", "job.sh"])
        .trim()
        .to_string();
    let status: serde_json::Value =
        serde_json::from_str(&n.ctl_ok("alice", &["status", "--json"])).unwrap();
    assert_eq!(status[0]["slurm_job_id"], job.as_str());
    // A plain connection hears no hello in clear; its garbage is a failed handshake.
    let mut s = TcpStream::connect(&n.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"{\"cmd\":\"ping\"}\n").unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(
        !got.starts_with(b"{"),
        "a plain client was answered in clear: {got:?}"
    );
    n.logged_refusal("tls");
    // A client without TLS: the daemon's bytes are not a hello.
    let plain = n.sys.root().join("plain.toml");
    std::fs::write(
        &plain,
        format!(
            "[client]\nservers = [{:?}]\nmunge_socket = {:?}\n",
            n.addr,
            n.munged.socket().display().to_string()
        ),
    )
    .unwrap();
    chmod(&plain, 0o644);
    // A client that trusts another CA refuses the daemon's certificate.
    let wrong = n.sys.root().join("wrong.toml");
    std::fs::write(
        &wrong,
        format!(
            "[client]\nservers = [{:?}]\nmunge_socket = {:?}\ntls_ca = {:?}\n",
            n.addr,
            n.munged.socket().display().to_string(),
            other_ca.display().to_string()
        ),
    )
    .unwrap();
    chmod(&wrong, 0o644);
    for config in [&plain, &wrong] {
        let mut cmd = n.sys.user_command("alice", &n.sys.ctl);
        cmd.arg("--config").arg(config).args(["status", "--json"]);
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(75), "{config:?}: {out:?}");
    }
    assert_eq!(n.sys.sbatch_calls_of("alice").len(), 1);
}

/// Two login nodes as network namespaces: alice submits on one, and follows and cancels
/// the chain from the other; bob, on the other, sees and cancels nothing of hers. The
/// daemon's log shows each request came from its node's address.
#[test]
fn two_login_nodes_a_user_submits_on_one_and_follows_and_cancels_from_the_other() {
    let nodes = common::netns::Nodes::two();
    // login1's daemon, in login1's namespace: the port is its own.
    let n = Net::start_on(
        (&nodes.nodes[0].addr, 6827),
        &nodes.prefix(0, "root"),
        "",
        "5s",
        "",
    );
    let ctl = |node: usize, user: &str, args: &[&str]| {
        let mut cmd = nodes.command(node, user, &n.sys.home(user));
        cmd.env("HOME", n.sys.home(user));
        cmd.arg(&n.sys.ctl)
            .arg("--config")
            .arg(&n.client_config)
            .args(args);
        cmd.output().unwrap()
    };
    let ok = |node: usize, user: &str, args: &[&str]| {
        let out = ctl(node, user, args);
        assert!(
            out.status.success(),
            "{user} on node {node}: {args:?}: {out:?}\nlog:\n{}",
            common::tail(&n.sys.d.log(), 30)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    n.sys.write_as("alice", "job.sh", b"#!/bin/sh\nsleep 600\n");
    let job = ok(0, "alice", &["submit", "--", "job.sh"])
        .trim()
        .to_string();
    let status: serde_json::Value =
        serde_json::from_str(&ok(1, "alice", &["status", "--json"])).unwrap();
    assert_eq!(status[0]["slurm_job_id"], job.as_str(), "{status}");
    let history: serde_json::Value =
        serde_json::from_str(&ok(1, "alice", &["history", "--json", &job])).unwrap();
    assert_eq!(history["attempts"][0]["slurm_job_id"], job.as_str());
    let bobs: serde_json::Value =
        serde_json::from_str(&ok(1, "bob", &["status", "--json"])).unwrap();
    assert_eq!(bobs, serde_json::json!([]));
    assert_eq!(ctl(1, "bob", &["cancel", &job]).status.code(), Some(77));
    ok(1, "alice", &["cancel", &job]);
    wait_for("alice's chain cancelled", Duration::from_secs(30), || {
        let s: serde_json::Value =
            serde_json::from_str(&ok(1, "alice", &["status", "--json"])).unwrap();
        s[0]["state"] == "cancelled"
    });
    // Each node's requests came over its own address: login2's over the link.
    let log = n.sys.d.log();
    for node in &nodes.nodes {
        assert!(
            log.lines()
                .any(|l| l.contains("network request authenticated")
                    && l.contains(&format!("peer={}:", node.addr))),
            "no request from {} in the log",
            node.addr
        );
    }
}

/// A thousand bad credentials from one peer: each is refused, and the log has a few lines
/// for them (at most five per peer and reason in each ten seconds) and summaries that
/// count the rest: lines and counts add up to the thousand, and a flood cannot flood the
/// journal. Connections that leave without a credential have no line each and are
/// counted in the summary (`silent`).
#[test]
fn a_flood_of_bad_credentials_is_a_few_log_lines_and_a_count_of_the_rest() {
    const FLOOD: u64 = 1000;
    // Connections that read the hello and leave: no line each, counted in the summary.
    const SILENT: u64 = 20;
    let n = Net::start("");
    for _ in 0..SILENT {
        let s = TcpStream::connect(&n.addr).unwrap();
        let mut r = BufReader::new(s);
        let mut hello = String::new();
        r.read_line(&mut hello).unwrap();
        assert!(hello.starts_with("{\"version\""), "{hello}");
    }
    let start = Instant::now();
    for i in 0..FLOOD {
        let (s, r, _) = n.connect();
        forbidden(
            &Net::send((s, r), b"MUNGE:AAAA:", PING),
            "invalid credential",
        );
        if i == FLOOD / 2 {
            n.alice_is_served_within(Duration::from_secs(10));
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the flood is taking too long: {i} connections in {:?}",
            start.elapsed()
        );
    }
    let took = start.elapsed();
    // Every refusal is accounted for once the last window is summed up (a second after
    // it ends).
    wait_for(
        "the flood's refusals all counted in the log",
        Duration::from_secs(30),
        || {
            let log = n.sys.d.log();
            refusal_lines(&log, "invalid") as u64
                + suppressed_counts(&log, "invalid").iter().sum::<u64>()
                == FLOOD
                && suppressed_counts(&log, "silent").iter().sum::<u64>() == SILENT
        },
    );
    assert_eq!(refusal_lines(&n.sys.d.log(), "silent"), 0);
    let log = n.sys.d.log();
    let lines = refusal_lines(&log, "invalid") as u64;
    let summaries = suppressed_counts(&log, "invalid").len() as u64;
    // The windows the flood spanned (ten seconds each), and the one it may have begun in.
    let windows = took.as_secs() / 10 + 2;
    assert!(
        (1..=5 * windows).contains(&lines) && summaries <= windows,
        "{lines} refusal lines and {summaries} summaries for {FLOOD} refusals in {took:?}:\n{}",
        common::tail(&log, 40)
    );
}

/// Runs `f` on a thread inside node `k`'s network namespace: the sockets it makes are
/// that node's (and may be used from any thread afterwards).
fn on_node<T: Send>(nodes: &common::netns::Nodes, k: usize, f: impl FnOnce() -> T + Send) -> T {
    use std::os::fd::AsRawFd;
    let path = format!("/run/netns/{}", nodes.nodes[k].ns);
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let ns = std::fs::File::open(&path).unwrap();
                // SAFETY: a valid namespace descriptor; only this thread moves.
                let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .unwrap()
    })
}

/// A TCP connection to `addr` whose receive buffer is as small as the kernel allows, so
/// that an answer nobody reads fills the buffers soon.
fn connect_small_buffer(addr: std::net::SocketAddrV4) -> TcpStream {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor this function owns until it hands it to
    // the TcpStream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let size: libc::c_int = 4096;
        let rc = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &size as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "SO_RCVBUF: {}", std::io::Error::last_os_error());
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*addr.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let rc = libc::connect(
            fd,
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "connect {addr}: {}", std::io::Error::last_os_error());
        TcpStream::from_raw_fd(fd)
    }
}

/// One line from `s`, a byte at a time (nothing after it is taken).
fn line_of(s: &mut TcpStream) -> Vec<u8> {
    let mut b = [0u8; 1];
    let mut line = Vec::new();
    while !line.ends_with(b"\n") {
        assert!(line.len() < 8192, "no line: {line:?}");
        s.read_exact(&mut b).unwrap();
        line.push(b[0]);
    }
    line
}

/// Reads the daemon's hello, a byte at a time (nothing after it is taken).
fn read_hello(s: &mut TcpStream) -> Hi {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let line = line_of(s);
    Hi::of(line, s.peer_addr().unwrap())
}

/// The daemon's resident memory, in bytes.
fn rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// Two login nodes: login1's daemon on 192.0.2.201:6827 (in its namespace), `extra` in
/// its `[server]`.
fn two_nodes(extra: &str) -> (common::netns::Nodes, Net) {
    let nodes = common::netns::Nodes::two();
    let n = Net::start_on(
        (&nodes.nodes[0].addr, 6827),
        &nodes.prefix(0, "root"),
        extra,
        "5s",
        "",
    );
    (nodes, n)
}

impl Net {
    /// `supervisorctl` as `user` on node `k`, over the network.
    fn ctl_on(&self, nodes: &common::netns::Nodes, k: usize, user: &str, args: &[&str]) -> Output {
        let mut cmd = nodes.command(k, user, &self.sys.home(user));
        cmd.env("HOME", self.sys.home(user));
        cmd.arg(&self.sys.ctl)
            .arg("--config")
            .arg(&self.client_config)
            .args(args);
        cmd.output().unwrap()
    }

    fn ctl_on_ok(
        &self,
        nodes: &common::netns::Nodes,
        k: usize,
        user: &str,
        args: &[&str],
    ) -> String {
        let out = self.ctl_on(nodes, k, user, args);
        assert!(
            out.status.success(),
            "{user} on node {k}: {args:?}: {out:?}\nlog:\n{}",
            common::tail(&self.sys.d.log(), 30)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// alice's jobs `n` submitted and ended in failures no rule knows: each chain waits
    /// for an agent (`pending_failed`). Returns the job ids.
    fn pending_of_alice(&self, count: usize) -> Vec<String> {
        self.sys.write_as("alice", "job.sh", b"#!/bin/sh\nexit 1\n");
        let jobs: Vec<String> = (0..count)
            .map(|_| self.sys.submit_as("alice", &["job.sh"]))
            .collect();
        for j in &jobs {
            self.sys.fake.ctl(&["finish", j, "FAILED", "1:0"]);
        }
        for j in &jobs {
            self.sys
                .d
                .wait_state(j, "pending_failed", Duration::from_secs(30));
        }
        jobs
    }

    /// The network requests the daemon authenticated from `addr`.
    fn requests_from(&self, addr: &str) -> usize {
        self.sys
            .d
            .log()
            .lines()
            .filter(|l| {
                l.contains("network request authenticated") && l.contains(&format!("peer={addr}:"))
            })
            .count()
    }
}

/// From login2, over the network: alice classifies and recovers her chains with
/// `supervisorctl`, and bob, refused every one of those on her chains, changes nothing.
#[test]
fn two_login_nodes_a_user_classifies_and_recovers_from_the_other_and_bob_is_refused() {
    let (nodes, n) = two_nodes("");
    let jobs = n.pending_of_alice(2);
    let (a, b) = (&jobs[0], &jobs[1]);
    let before = n.sys.d.history(a);
    let login2 = nodes.nodes[1].addr.clone();
    // bob on login2: every change to her chains refused, dry runs included.
    for args in [
        vec!["classify", a, "--action", "fail", "--reason", "bob's"],
        vec![
            "classify", a, "--action", "retry", "--mem", "2G", "--reason", "bob's",
        ],
        vec![
            "classify",
            a,
            "--action",
            "fail",
            "--reason",
            "bob's",
            "--dry-run",
        ],
        vec!["recover", a],
        vec!["recover", a, "--dry-run"],
    ] {
        let out = n.ctl_on(&nodes, 1, "bob", &args);
        assert_eq!(out.status.code(), Some(77), "bob {args:?}: {out:?}");
    }
    let from_login2 = n.requests_from(&login2);
    assert!(from_login2 >= 5, "bob's requests did not come from login2");
    assert_eq!(n.sys.d.history(a)["decisions"], before["decisions"]);
    assert_eq!(n.sys.sbatch_calls_of("alice").len(), 2);
    // alice on login2: A retried with more memory, B failed, then recovered by hand.
    n.ctl_on_ok(
        &nodes,
        1,
        "alice",
        &[
            "classify",
            a,
            "--action",
            "retry",
            "--mem",
            "2G",
            "--reason",
            "a lost connection: transient",
        ],
    );
    wait_for("A resubmitted with 2G", Duration::from_secs(30), || {
        n.sys.sbatch_calls_of("alice").len() == 3
    });
    let retry = &n.sys.sbatch_calls_of("alice")[2];
    assert!(
        retry["argv"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x == "--mem=2048M"),
        "{retry}"
    );
    n.ctl_on_ok(
        &nodes,
        1,
        "alice",
        &[
            "classify",
            b,
            "--action",
            "fail",
            "--reason",
            "a bug: permanent",
        ],
    );
    n.sys.d.wait_state(b, "failed", Duration::from_secs(30));
    let dry = n.ctl_on_ok(
        &nodes,
        1,
        "alice",
        &["recover", b, "--mem", "3G", "--dry-run"],
    );
    assert!(dry.contains("sbatch"), "{dry}");
    assert_eq!(
        n.sys.sbatch_calls_of("alice").len(),
        3,
        "a dry run ran sbatch"
    );
    n.ctl_on_ok(&nodes, 1, "alice", &["recover", b, "--mem", "3G"]);
    wait_for("B recovered", Duration::from_secs(30), || {
        n.sys.sbatch_calls_of("alice").len() == 4
    });
    // Her decisions name her as the actor, and all of it came from login2.
    let h = n.sys.d.history(a);
    assert!(
        h["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["reason"] == "a lost connection: transient"
                && d["actor"].as_str().is_some_and(|s| s.starts_with("user:"))),
        "{h:#}"
    );
    assert!(n.requests_from(&login2) >= from_login2 + 4);
    // And bob still can change nothing of hers, whatever its state now.
    let out = n.ctl_on(&nodes, 1, "bob", &["recover", b]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert_eq!(n.sys.sbatch_calls_of("alice").len(), 4);
}

/// A copy of an MCP client script of tests/mcp every user can read.
fn mcp_script(n: &Net, name: &str) -> PathBuf {
    let copy = n.sys.root().join(name);
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/mcp")
            .join(name),
        &copy,
    )
    .unwrap();
    chmod(&copy, 0o755);
    copy
}

/// The official MCP client (tests/mcp) as `user` on node `k`, driving `supervisorctl
/// mcp` there, which reaches the daemon over the network; its JSON.
fn mcp_on(
    n: &Net,
    nodes: &common::netns::Nodes,
    k: usize,
    user: &str,
    script: &str,
    args: &[&str],
) -> serde_json::Value {
    let python = common::mcp_python();
    let script = mcp_script(n, script);
    let mut cmd = nodes.command(k, user, &n.sys.home(user));
    cmd.env("HOME", n.sys.home(user));
    cmd.arg(&python)
        .arg(&script)
        .arg(&n.sys.ctl)
        .arg(&n.client_config)
        .args(args);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{user}'s MCP client on node {k} failed: {}\n{}\nlog:\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout),
        common::tail(&n.sys.d.log(), 30)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the MCP client printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// `supervisorctl mcp` on login2, over the network: alice's agent (the official Python
/// SDK's client) lists her chains waiting for an agent, reads them, and resolves them;
/// bob's agent, on the same node, gets none of it and changes nothing.
#[test]
fn two_login_nodes_an_agent_on_the_other_node_has_its_users_rights_only() {
    let (nodes, n) = two_nodes("");
    let jobs = n.pending_of_alice(2);
    let (job_a, job_b) = (&jobs[0], &jobs[1]);
    let chains: Vec<String> = jobs
        .iter()
        .map(|j| n.sys.d.status(j)[0]["id"].as_str().unwrap().to_string())
        .collect();
    let before: Vec<serde_json::Value> = jobs.iter().map(|j| n.sys.d.history(j)).collect();
    let login2 = nodes.nodes[1].addr.clone();
    // bob's agent first, while her chains wait: every tool on each of her ids refused.
    let ids: Vec<&str> = jobs
        .iter()
        .chain(chains.iter())
        .map(String::as_str)
        .collect();
    let v = mcp_on(&n, &nodes, 1, "bob", "probe.py", &ids);
    assert_eq!(v["pending"]["structured"]["count"], 0, "{v:#}");
    for id in &ids {
        for (tool, r) in v["ids"][id].as_object().unwrap() {
            let failed = r["is_error"] == true
                || r["structured"]["results"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().all(|x| x["ok"] == false));
            assert!(failed, "bob's {tool} on {id} was not refused: {r:#}");
        }
    }
    let text = v.to_string();
    for j in &jobs {
        assert!(
            !text.contains(&format!("\"slurm_job_id\":\"{j}\"")),
            "bob's agent saw alice's job {j}: {text}"
        );
    }
    for (j, h) in jobs.iter().zip(&before) {
        assert_eq!(n.sys.d.history(j)["decisions"], h["decisions"]);
        assert_eq!(n.sys.d.status(j)[0]["state"], "pending_failed");
    }
    let bobs = n.requests_from(&login2);
    assert!(bobs > ids.len(), "bob's agent did not come from login2");
    // alice's agent: lists, reads, dry-runs, resolves A (retry, more memory), B (fail),
    // previews a recover of B, reads A's history.
    let v = mcp_on(&n, &nodes, 1, "alice", "client.py", &[job_a, job_b]);
    assert_eq!(v["server"]["name"], "slurm-supervisor");
    assert_eq!(v["pending"]["structured"]["count"], 2, "{:#}", v["pending"]);
    let (a, b) = (
        v["chain_a"].as_str().unwrap(),
        v["chain_b"].as_str().unwrap(),
    );
    assert_eq!((a, b), (chains[0].as_str(), chains[1].as_str()));
    assert_eq!(v["dry_run"]["is_error"], false, "{:#}", v["dry_run"]);
    assert_eq!(
        v["after_dry_run"]["structured"]["chains"][0]["state"],
        "pending_failed"
    );
    assert_eq!(v["resolve"]["is_error"], false, "{:#}", v["resolve"]);
    assert_eq!(v["second"]["is_error"], true, "a second resolution refused");
    assert_eq!(v["batch"]["structured"]["succeeded"], 1, "{:#}", v["batch"]);
    assert_eq!(v["recover_b"]["is_error"], false, "{:#}", v["recover_b"]);
    let decisions = v["history_a"]["structured"]["decisions"]
        .as_array()
        .unwrap();
    assert!(
        decisions
            .iter()
            .any(|d| d["action"] == "resubmit" && d["actor"].as_str().unwrap().starts_with("user:")),
        "{decisions:#?}"
    );
    // The daemon carries it out: A back to Slurm with 2G (as alice), B failed.
    wait_for("A resubmitted", Duration::from_secs(30), || {
        n.sys.sbatch_calls_of("alice").len() == 3
    });
    assert!(n.sys.sbatch_calls_of("alice")[2]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x == "--mem=2048M"));
    assert_eq!(n.sys.d.status(job_b)[0]["state"], "failed");
    // Every tool call went over the network from login2.
    assert!(
        n.requests_from(&login2) >= bobs + 8,
        "alice's agent did not come from login2"
    );
}

/// bob, on login2, asks for his chains waiting for an agent (`pending`, which shows each
/// chain's script) on every connection of his share and never reads the answers, which
/// are far larger than the sockets' buffers (the Unix socket's test of the same, in
/// tests/security.rs, `item03_answers_nobody_reads_do_not_block_the_daemon`): the daemon
/// serves alice meanwhile over the network and the Unix socket as fast as ever, streams
/// each answer (holding a few chunks of it, not the whole), drops bob's connections once
/// they have not taken their answers for the write timeout (30 s), logging it, and gives
/// bob his share back.
#[test]
fn two_login_nodes_a_client_that_never_reads_a_large_answer_holds_up_no_one() {
    let (nodes, n) = two_nodes("");
    let daemon: std::net::SocketAddrV4 = format!("{}:6827", nodes.nodes[0].addr).parse().unwrap();
    // bob's two chains waiting for an agent, each with a script of 700 KB of NUL bytes,
    // which `pending` shows as `\u0000` each: an answer of over 8 MB, more than any
    // socket's buffers hold (4 MiB at most here, net.ipv4.tcp_wmem), from a small request.
    let mut big = b"#!/bin/sh\nexit 1\n".to_vec();
    big.extend(std::iter::repeat_n(0u8, 700_000));
    n.sys.write_as("bob", "big.sh", &big);
    n.sys.write_as("alice", "job.sh", b"#!/bin/sh\nsleep 600\n");
    let jobs: Vec<String> = (0..2)
        .map(|_| n.sys.submit_as("bob", &["big.sh"]))
        .collect();
    for j in &jobs {
        n.sys.fake.ctl(&["finish", j, "FAILED", "1:0"]);
    }
    for j in &jobs {
        n.sys
            .d
            .wait_state(j, "pending_failed", Duration::from_secs(30));
    }
    let body = br#"{"cmd":"pending"}"#;
    // bob's whole answer, read as a client does: its size.
    let whole = on_node(&nodes, 1, || {
        let mut s = TcpStream::connect(daemon).unwrap();
        let hello = read_hello(&mut s);
        let cred = n.cred_for("bob", &hello, body);
        let r = BufReader::new(s.try_clone().unwrap());
        Net::send((s, r), &cred, body)
    });
    let rows: serde_json::Value = serde_json::from_str(whole.trim())
        .unwrap_or_else(|e| panic!("bob's status ({e}): {}", &whole[..whole.len().min(300)]));
    assert_eq!(
        rows["ok"].as_array().map(Vec::len),
        Some(2),
        "{}",
        &whole[..300]
    );
    assert!(whole.len() > 8 << 20, "{} bytes", whole.len());
    let pid = n.sys.pid();
    let rss_before = rss(pid);
    // His share: eight connections, each asking and never reading. (The connection
    // above may still hold its slot for a moment: one refused is replaced; a peek tells
    // an answer from a refusal without taking anything.)
    let deaf: Vec<TcpStream> = on_node(&nodes, 1, || {
        let mut held = Vec::new();
        for _ in 0..12 {
            let mut s = connect_small_buffer(daemon);
            let hello = read_hello(&mut s);
            let mut out = n.cred_for("bob", &hello, body);
            out.push(b'\n');
            s.write_all(&out).unwrap();
            // A connection refused for bob's share gets no proof: the next one is tried.
            if !line_of(&mut s).starts_with(b"MUNGE:") {
                continue;
            }
            s.write_all(&salted(body)).unwrap();
            let mut first = [0u8; 6];
            let got = s.peek(&mut first).unwrap();
            if first[..got].starts_with(b"{\"ok\"") {
                held.push(s);
            }
            if held.len() == 8 {
                break;
            }
        }
        held
    });
    assert_eq!(deaf.len(), 8, "bob's share is eight connections");
    let started = Instant::now();
    // They are held: bob's share is full (his Unix-socket request is refused for it).
    wait_for("bob's share full", Duration::from_secs(10), || {
        n.sys.as_user("bob", &["status", "--json"]).status.code() == Some(75)
    });
    // Meanwhile alice, over the network from login2 and over the Unix socket, is served
    // within the Unix socket's bounds, for as long as the daemon holds bob's answers.
    let mut rss_peak = rss_before;
    let mut rounds = 0;
    let (mut slowest_net, mut slowest_unix) = (Duration::ZERO, Duration::ZERO);
    while n.refusals("unread") == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "bob's connections were not dropped within 90 s:\n{}",
            common::tail(&n.sys.d.log(), 30)
        );
        // Held behind bob's answers, alice would wait for them to be dropped (30 s,
        // `WRITE_TIMEOUT`): the bounds leave a busy machine room and still tell the two
        // apart. The Unix socket's (tests/security.rs, item03): 8 s; over the network,
        // with a credential to make and a connection to set up, 12 s.
        let t = Instant::now();
        let out = n.ctl_on(&nodes, 1, "alice", &["status", "--json"]);
        assert!(out.status.success(), "{out:?}");
        slowest_net = slowest_net.max(t.elapsed());
        assert!(t.elapsed() < Duration::from_secs(12), "{:?}", t.elapsed());
        let t = Instant::now();
        let local = n
            .sys
            .as_user_within("alice", &["status", "--json"], Duration::from_secs(8));
        assert!(local.output.is_some_and(|o| o.status.success()));
        slowest_unix = slowest_unix.max(t.elapsed());
        rss_peak = rss_peak.max(rss(pid));
        rounds += 1;
    }
    eprintln!("{rounds} rounds; alice's slowest answer: network {slowest_net:?}, Unix socket {slowest_unix:?}");
    assert!(rounds > 0);
    // Every one of them dropped (the refusal lines and the summary of those beyond
    // them, at most five lines per peer and reason in ten seconds).
    wait_for(
        "bob's eight connections dropped",
        Duration::from_secs(90),
        || {
            let log = n.sys.d.log();
            refusal_lines(&log, "unread") as u64
                + suppressed_counts(&log, "unread").iter().sum::<u64>()
                == 8
        },
    );
    // Dropped after the write timeout (30 s), not before.
    assert!(
        started.elapsed() >= Duration::from_secs(25),
        "dropped after {:?}",
        started.elapsed()
    );
    // What each deaf client can still read is what the kernel holds: less than the
    // answer, which the daemon gave up on (an unterminated line).
    for mut s in deaf {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        assert!(
            got.len() < whole.len() && !got.ends_with(b"\n"),
            "a deaf client got {} of {} bytes",
            got.len(),
            whole.len()
        );
    }
    // The daemon streamed each answer (a few chunks and one chain's view at a time), so
    // it never held the eight answers it could not send: built whole, as before, they
    // took more than their 67 MB (79 MB measured); streamed, about 23 MB in all.
    let grew = rss_peak.saturating_sub(rss_before);
    eprintln!(
        "daemon RSS before {rss_before}, peak {rss_peak} (+{grew}); answer {} bytes",
        whole.len()
    );
    assert!(
        grew < 4 * whole.len() as u64,
        "the daemon's memory grew by {grew} bytes for eight unread answers of {} bytes",
        whole.len()
    );
    // bob's share comes back, and alice's work goes on.
    wait_for("bob's share back", Duration::from_secs(30), || {
        n.sys.as_user("bob", &["status", "--json"]).status.success()
    });
    n.ctl_on_ok(&nodes, 1, "alice", &["submit", "--", "job.sh"]);
}

/// A per-user daemon (alice's own, listening) serves alice alone, over every transport:
/// bob's credential restricted to alice's uid (MUNGE lets its maker choose the decoder) is
/// refused and nothing is submitted, as is root's, even from a node `root_nodes` lists;
/// on its Unix socket root is refused too. Before issue 32, bob's submit was sbatched as
/// alice.
#[test]
fn a_per_user_daemon_serves_its_own_user_only() {
    let probe = Munged::start();
    let origin = probe
        .client()
        .decode(probe.client().encode(b"", None, None).unwrap())
        .unwrap()
        .origin;
    drop(probe);
    let n = Net::start_as(
        Start::AsUser("alice"),
        ("127.0.0.1", 0),
        &[],
        &format!("root_nodes = [\"{origin}\"]\n"),
        "10s",
        "",
    );
    let alice = User::get("alice");
    n.sys.write_as("alice", "job.sh", b"#!/bin/sh\nsleep 600\n");
    // alice over the network: her own daemon proves itself as her, and takes her submit.
    let job = n
        .ctl_ok("alice", &["submit", "--", "job.sh"])
        .trim()
        .to_string();
    assert!(
        !job.is_empty() && job.chars().all(|c| c.is_ascii_digit()),
        "{job}"
    );
    assert_eq!(n.sys.sbatch_calls_of("alice").len(), 1);
    // bob (and root) with credentials made for alice's uid, bound to this connection.
    for (user, says) in [("bob", "not uid"), ("root", "not uid 0")] {
        let (s, r, hello) = connect_to(&n.addr);
        assert_eq!(hello.uid, alice.uid, "{:?}", *hello);
        let body = submit_body("echo not alice's\n");
        let cred = Net::cred_with(&n.munged, user, &hello.opening(&body), alice.uid, 60);
        let answer = Net::send_all((s, r), &cred, &body);
        // Refused at the opening: no proof of alice's daemon for them.
        assert!(!answer.contains("MUNGE:"), "{answer}");
        forbidden(&answer, says);
        forbidden(&answer, "own slurm-supervisord");
    }
    n.logged_refusals("owner", 2);
    assert_eq!(
        n.sys.fake.sbatch_calls().len(),
        1,
        "a refused submit ran sbatch: {:?}",
        n.sys.fake.sbatch_calls()
    );
    // The Unix socket: root reaches it (its mode does not hold root back) and is refused.
    let out = n.sys.d.ctl(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("serves that user only"),
        "{out:?}"
    );
    // alice, on both, is still served.
    let mine: serde_json::Value =
        serde_json::from_str(&n.ctl_ok("alice", &["status", "--json"])).unwrap();
    assert_eq!(mine[0]["slurm_job_id"], job.as_str(), "{mine}");
    assert!(n
        .sys
        .as_user("alice", &["status", "--json"])
        .status
        .success());
}

/// What a program on a daemon's address saw of a client's connection.
struct Seen {
    /// Every byte the client sent.
    bytes: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Seen {
    fn bytes(&self) -> Vec<u8> {
        self.bytes.lock().unwrap().clone()
    }

    /// What the client sent after its opening line.
    fn after_opening(&self) -> Vec<u8> {
        let b = self.bytes();
        match b.iter().position(|&c| c == b'\n') {
            Some(i) => b[i + 1..].to_vec(),
            None => Vec::new(),
        }
    }
}

/// A squatter on a free port of loopback: it says a system-wide daemon's hello (uid 0),
/// reads the client's opening, and "proves itself" with a credential `maker` makes (the
/// right layout for this hello and address; the client's nonce it cannot know, as the
/// opening is restricted to root), or with no `maker` answers at once with a submit's
/// answer of its own, job 4242, as before issue 32 a client took it. Whatever follows, it
/// answers that way too.
fn squatter(n: &Net, maker: Option<&str>) -> (String, Seen) {
    // (`maker` [`FORGED_ERROR`]: it answers with an error line of its own making.)
    // Port 0: bound at once, by the kernel's choice (a port probed free and bound later
    // can be taken in between by a process of another test run).
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let bytes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = bytes.clone();
    let socket = n.munged.socket();
    let maker = maker.map(str::to_string);
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let nonce: request_binding::Nonce = rand::random();
        let hello = serde_json::to_vec(&Hello {
            version: slurm_supervisor::protocol::net::VERSION,
            daemon: "login1".into(),
            uid: 0,
            active: true,
            nonce: Some(slurm_supervisor::protocol::net::nonce_hex(&nonce)),
            active_at: None,
        })
        .unwrap();
        let mut out = hello.clone();
        out.push(b'\n');
        s.write_all(&out).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut line = Vec::new();
        if r.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
            return;
        }
        seen.lock().unwrap().extend_from_slice(&line);
        const ANSWER: &[u8] = b"{\"ok\":{\"chains\":[\"c1\"],\"job_id\":\"4242\"}}\n";
        match maker.as_deref() {
            None => s.write_all(ANSWER).unwrap(),
            // A refusal in the daemon's form, saying what a submit that worked says, in
            // colour, with the exit code of success.
            Some(FORGED_ERROR) => s
                .write_all(
                    b"{\"error\":{\"kind\":\"sbatch_failed\",\"message\":\"\\u001b[32mok\",\"exit_code\":0,\"stderr\":\"Submitted batch job 4242\\n\"}}\n",
                )
                .unwrap(),
            Some(maker) => {
                let payload =
                    request_binding::prove(&rand::random(), "login1", &nonce, &hello, addr);
                let mut made = std::process::Command::new("runuser");
                made.args(["-u", maker, "--"])
                    .arg(common::munged::program("munge"))
                    .arg(format!("--socket={}", socket.display()))
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped());
                let mut child = made.spawn().unwrap();
                child.stdin.take().unwrap().write_all(&payload).unwrap();
                let proof = child.wait_with_output().unwrap().stdout;
                s.write_all(proof.trim_ascii_end()).unwrap();
                s.write_all(b"\n").unwrap();
            }
        }
        // Whatever comes next is what the client would give away.
        let mut rest = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => {
                    rest.extend_from_slice(&buf[..k]);
                    seen.lock().unwrap().extend_from_slice(&buf[..k]);
                    if rest.iter().filter(|&&c| c == b'\n').count() >= 2 {
                        let _ = s.write_all(ANSWER);
                        break;
                    }
                }
            }
        }
    });
    (addr.to_string(), Seen { bytes })
}

/// A relay on a free port of loopback that forwards each connection to `to` (the real
/// daemon) and back, keeping what the client sent.
fn relay(to: &str) -> (String, Seen) {
    // Port 0: bound at once, by the kernel's choice (a port probed free and bound later
    // can be taken in between by a process of another test run).
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let bytes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = bytes.clone();
    let to = to.to_string();
    std::thread::spawn(move || {
        for client in l.incoming() {
            let Ok(mut client) = client else { return };
            let Ok(mut daemon) = TcpStream::connect(&to) else {
                return;
            };
            let (mut c2, mut d2) = (client.try_clone().unwrap(), daemon.try_clone().unwrap());
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(k) = c2.read(&mut buf) {
                    if k == 0 {
                        let _ = d2.shutdown(std::net::Shutdown::Write);
                        break;
                    }
                    seen.lock().unwrap().extend_from_slice(&buf[..k]);
                    if d2.write_all(&buf[..k]).is_err() {
                        break;
                    }
                }
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut daemon, &mut client);
                let _ = client.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (addr, Seen { bytes })
}

/// `supervisorctl submit` as alice through a client config listing only `server`.
fn submit_to(n: &Net, server: &str) -> Output {
    let config = n
        .sys
        .root()
        .join(format!("client-{}.toml", server.replace(':', "-")));
    std::fs::write(
        &config,
        format!(
            "[client]\nservers = [{server:?}]\nmunge_socket = {:?}\n",
            n.munged.socket().display().to_string()
        ),
    )
    .unwrap();
    chmod(&config, 0o644);
    let mut cmd = n.sys.user_command("alice", &n.sys.ctl);
    cmd.arg("--config")
        .arg(&config)
        .env("ALICES_TOKEN", "secret-token-of-alice")
        .args(["submit", "--", "job.sh"]);
    cmd.output().unwrap()
}

/// What [`squatter`] is told to answer with an error of its own making.
const FORGED_ERROR: &str = "forged-error";

/// An error line from a peer that proved nothing is no daemon's answer: a squatter's
/// "refusal" that says a job was submitted, with exit code 0 and a colour escape, makes
/// the client exit 0 and print nothing of it but a bare message; and a squatter on the
/// first server's port keeps no client from the daemon on the next one.
#[test]
fn a_squatters_error_line_is_no_success_and_blocks_no_other_server() {
    let n = Net::start("");
    n.sys.write_as("alice", "job.sh", b"#!/bin/sh\nsleep 600\n");
    let (at, _seen) = squatter(&n, Some(FORGED_ERROR));
    let out = submit_to(&n, &at);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !all.contains("Submitted batch job") && !all.contains('\u{1b}'),
        "{all:?}"
    );
    // The squatter first, the daemon next: served by the daemon.
    let (at, _seen) = squatter(&n, Some(FORGED_ERROR));
    let config = n.sys.root().join("client-squatter-first.toml");
    std::fs::write(
        &config,
        format!(
            "[client]\nservers = [{at:?}, {:?}]\nmunge_socket = {:?}\n",
            n.addr,
            n.munged.socket().display().to_string()
        ),
    )
    .unwrap();
    chmod(&config, 0o644);
    let out = n
        .sys
        .user_command("alice", &n.sys.ctl)
        .arg("--config")
        .arg(&config)
        .args(["submit", "--", "job.sh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !job.is_empty() && job.bytes().all(|b| b.is_ascii_digit()),
        "{out:?}"
    );
}

/// Root's client asks for the daemon's proof first (`protocol::net::PROVE_FIRST`): a
/// squatter, whether it answers at once or "proves" itself with bob's credential, gets
/// root's `PROVE:` line and nonce and no credential at all (before, root's opening: a
/// credential root made, restricted to root, which Slurm's root daemons without the fix
/// for CVE-2023-49933 take as root's).
#[test]
fn roots_client_gives_a_squatter_no_credential() {
    let n = Net::start("");
    for maker in [None, Some("bob")] {
        let (at, seen) = squatter(&n, maker);
        let config = n.sys.root().join("client-root.toml");
        std::fs::write(
            &config,
            format!(
                "[client]\nservers = [{at:?}]\nmunge_socket = {:?}\n",
                n.munged.socket().display().to_string()
            ),
        )
        .unwrap();
        let out = std::process::Command::new(&n.sys.ctl)
            .arg("--config")
            .arg(&config)
            .args(["status", "--json"])
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(0), "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("did not prove it is slurm-supervisord"),
            "{err}"
        );
        let all = String::from_utf8_lossy(&seen.bytes()).into_owned();
        assert!(
            all.starts_with(slurm_supervisor::protocol::net::PROVE_FIRST)
                && !all.contains("MUNGE:"),
            "root's client gave the squatter {all:?}"
        );
    }
}

/// The daemon proves itself before a client sends any of its request: a program holding
/// a daemon's port that answers itself (before issue 32 `submit` printed its job 4242 and
/// exited 0), at once or after a proof right in layout but made by bob, is refused with
/// the address and what to check, and gets only alice's opening credential, restricted
/// to root (neither bob nor alice can decode it): no script, no environment, not even the
/// command. A relay to the real daemon gets the same: the daemon refuses the opening, made
/// for the relay's address (before protocol version 3, it was the client that refused the
/// daemon's proof, made for the daemon's own address). Nothing is submitted. The real
/// daemon, dialled directly, is served.
#[test]
fn a_squatter_a_relay_and_a_daemon_of_another_user_are_refused() {
    let n = Net::start("");
    n.sys.write_as(
        "alice",
        "job.sh",
        b"#!/bin/sh\n# SECRET-SCRIPT-OF-ALICE\nsleep 600\n",
    );
    let check = |out: &Output, seen: &Seen, says: &[&str]| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        for s in says {
            assert!(err.contains(s), "{s:?} not in {err}");
        }
        let after = seen.after_opening();
        assert!(
            after.is_empty(),
            "the client sent on: {:?}",
            String::from_utf8_lossy(&after)
        );
        let all = String::from_utf8_lossy(&seen.bytes()).into_owned();
        assert!(
            !all.contains("SECRET-SCRIPT")
                && !all.contains("secret-token")
                && !all.contains("submit"),
            "{all}"
        );
        // The opening: one credential, which only root decodes.
        let opening = all.trim_end();
        assert!(
            opening.starts_with("MUNGE:") && !opening.contains('\n'),
            "{all}"
        );
        for user in ["bob", "alice"] {
            let out = n
                .munged
                .run_as((user, None), "unmunge", &[], opening.as_bytes());
            assert!(!out.status.success(), "{user} decoded the opening: {out:?}");
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
                "{out:?}"
            );
        }
    };
    let unproven = |server: &str| {
        vec![
            format!("{server} ({server}) did not prove it is slurm-supervisord"),
            "nothing of the request was sent to it".to_string(),
            "ss -ltnp".to_string(),
        ]
    };
    let (at, seen) = squatter(&n, Some("bob"));
    let out = submit_to(&n, &at);
    let mut says = unproven(&at);
    says.push("neither root".into());
    check(
        &out,
        &seen,
        &says.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let (at, seen) = squatter(&n, None);
    let out = submit_to(&n, &at);
    let mut says = unproven(&at);
    says.push("its proof is not a credential".into());
    check(
        &out,
        &seen,
        &says.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let (at, seen) = relay(&n.addr);
    let out = submit_to(&n, &at);
    check(&out, &seen, &["another address", "a relay"]);
    n.logged_refusal("address");
    assert!(
        n.sys.fake.sbatch_calls().is_empty(),
        "{:?}",
        n.sys.fake.sbatch_calls()
    );
    // The daemon itself is proven and served.
    let out = submit_to(&n, &n.addr);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(n.sys.sbatch_calls_of("alice").len(), 1);
}

/// A daemon and a client of different versions of the exchange say so: a client of
/// version 2 (which opened with a bare nonce) meets this daemon's version in the hello it
/// reads, and a hello of version 2 gets this client's clear error.
#[test]
fn a_peer_of_another_protocol_version_is_told_so() {
    let n = Net::start("");
    let (_s, _r, hello) = n.connect();
    assert_eq!(hello.version, 3);
    // Port 0: bound at once, by the kernel's choice (a port probed free and bound later
    // can be taken in between by a process of another test run).
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let at = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let _ = s.write_all(
            b"{\"version\":2,\"daemon\":\"login1\",\"uid\":0,\"active\":true,\"nonce\":\"00000000000000000000000000000000\"}\n",
        );
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    n.sys.write_as("alice", "job.sh", b"#!/bin/sh\nsleep 600\n");
    let out = submit_to(&n, &at);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(
        err.contains("speaks version 2 of the network protocol, this supervisorctl version 3"),
        "{err}"
    );
}

/// The port cannot be taken from the daemon. Bound by the daemon itself, `[::]` takes both
/// families: nobody can bind the port on 0.0.0.0 (or `[::]`) beside it (before issue 32
/// the shipped `0.0.0.0:6827` left `[::]:6827` to anyone), and clients of either family
/// are served (and proven: the proof's address is the IPv4-mapped one). Passed by systemd
/// (socket activation, as `slurm-supervisord.socket` does), the socket is held by its
/// holder whether or not the daemon runs, and the daemon serves on it.
#[test]
fn the_daemon_holds_both_families_and_takes_its_port_from_systemd() {
    let n = Net::start_on(("::", 0), &[], "", "10s", "");
    let port: u16 = n.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    for other in [format!("0.0.0.0:{port}"), format!("[::]:{port}")] {
        assert!(
            std::net::TcpListener::bind(&other).is_err(),
            "{other} could be bound beside the daemon"
        );
    }
    n.sys.write_as("alice", "job.sh", b"#!/bin/sh\nsleep 600\n");
    for at in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        let out = submit_to(&n, &at);
        assert!(out.status.success(), "{at}: {out:?}");
    }
    drop(n);
    // Socket activation: the test holds the port, as systemd does from boot.
    let l = slurm_supervisor::daemon::activation::bind("[::]:0".parse().unwrap()).unwrap();
    let port = l.local_addr().unwrap().port();
    let held = l.try_clone().unwrap();
    let n = Net::start_as(
        Start::Activated(std::os::fd::OwnedFd::from(l)),
        ("::", port),
        &[],
        "",
        "10s",
        "",
    );
    assert!(
        n.sys.d.log().contains("network listener from systemd"),
        "{}",
        n.sys.d.log()
    );
    n.sys.write_as("alice", "job.sh", b"#!/bin/sh\nsleep 600\n");
    let out = submit_to(&n, &format!("127.0.0.1:{port}"));
    assert!(out.status.success(), "{out:?}");
    assert_eq!(n.sys.sbatch_calls_of("alice").len(), 1);
    drop(n);
    // The daemon gone, the port is still held: nobody else can bind it meanwhile.
    assert!(std::net::TcpListener::bind(("0.0.0.0", port)).is_err());
    drop(held);
}

/// In cluster mode `supervisorctl cluster` tells anyone the daemons' roles, but the shared
/// database's last error (which may name the server, the account and what the server said
/// of them) only to root: alice is told there is one. Before issue 32 she read its text.
#[test]
fn the_shared_databases_error_is_shown_to_root_only() {
    let mut db = mariadb::MariaDb::start();
    let url = db.supervisor_database("supervisor", "ssv", "net-test-pw");
    let password_file = db.dir().join("db-password");
    std::fs::write(&password_file, "net-test-pw\n").unwrap();
    chmod(&password_file, 0o600);
    let n = Net::start(&format!(
        "[store]\nurl = \"mysql://{}@{}:{}/{}\"\npassword_file = {:?}\nlease = \"12s\"\nmargin = \"1s\"\ntimeout = \"2s\"\nnode = \"login1\"\n",
        url.user,
        url.host,
        url.port,
        url.database,
        password_file.display().to_string()
    ));
    let cluster_as = |user: &str| -> serde_json::Value {
        let out = n.sys.as_user(user, &["cluster", "--json"]);
        assert!(out.status.success(), "{user}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let roots = |n: &Net| -> serde_json::Value {
        let out = n.sys.d.ctl(&["cluster", "--json"]);
        assert!(out.status.success(), "root: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(roots(&n)["mode"], "cluster");
    assert_eq!(cluster_as("alice")["error"], serde_json::Value::Null);
    db.stop();
    wait_for(
        "the daemon to see the database gone",
        Duration::from_secs(30),
        || !roots(&n)["error"].is_null(),
    );
    let root_sees = roots(&n)["error"].as_str().unwrap().to_string();
    let alice_sees = cluster_as("alice")["error"].as_str().unwrap().to_string();
    assert!(!root_sees.contains("shown to root only"), "{root_sees}");
    assert!(
        alice_sees.contains("could not be read") && alice_sees.contains("shown to root only"),
        "{alice_sees}"
    );
    assert!(!alice_sees.contains(&url.port.to_string()), "{alice_sees}");
}

/// The daemon's proof is a credential of root's: it is made only for a client whose
/// opening authenticated it, restricted to the uid the opening proved, so only that uid
/// decodes it, and never for root (whose client has it made for `nobody`), a system
/// account or Slurm's own account (`SlurmUser`), which could use a credential of root's to
/// speak to Slurm as root.
#[test]
fn a_daemons_proof_is_for_its_client_alone_never_for_root_or_slurm() {
    let n = Net::start("");
    let open_with = |cred: &dyn Fn(&Hi) -> Vec<u8>| -> String {
        let (mut s, mut r, hello) = n.connect();
        let mut line = cred(&hello);
        line.push(b'\n');
        s.write_all(&line).unwrap();
        let mut answer = String::new();
        r.read_line(&mut answer).unwrap();
        answer
    };
    let open_as = |user: &str| open_with(&|hello| n.cred_for(user, hello, PING));
    // A system account and the fake's SlurmUser (slurm(64030)): no proof. Made by uid:
    // a new machine has no account named slurm before Slurm's packages are installed.
    for uid in [1, 64030] {
        let answer = open_with(&|hello| n.cred_by_uid(uid, hello, PING));
        forbidden(&answer, &format!("no proof is made for uid {uid}"));
    }
    n.logged_refusals("proof_uid", 2);
    // alice's: alice decodes it, bob cannot.
    let proof = open_as("alice");
    assert!(proof.starts_with("MUNGE:"), "{proof}");
    let bob = n
        .munged
        .run_as(("bob", None), "unmunge", &[], proof.trim().as_bytes());
    assert!(!bob.status.success(), "bob decoded alice's proof: {bob:?}");
    let by_alice = n.munged.run_as(
        ("alice", None),
        "unmunge",
        &["--numeric"],
        proof.trim().as_bytes(),
    );
    assert!(by_alice.status.success(), "{by_alice:?}");
    assert!(
        String::from_utf8_lossy(&by_alice.stdout).contains("UID:             0"),
        "{by_alice:?}"
    );
}

/// Issue 32's last high finding: before protocol version 3 the daemon proved itself to
/// anyone, before they authenticated: an opening naming alice's uid, sent by someone with
/// no account, got a credential made by root and restricted to alice, which alice's srun
/// or salloc on a Slurm without the fix of CVE-2023-49933 takes for a message from root.
/// Now a connection whose opening does not authenticate it gets a refusal line and never
/// a credential of the daemon's: version 2's bare opening, garbage, a credential
/// restricted to another uid than the daemon's, one made for another connection's nonce,
/// another hello or another address, and root from a node `root_nodes` does not list.
#[test]
fn an_opening_that_does_not_authenticate_gets_a_refusal_and_never_a_proof() {
    let n = Net::start("");
    let alice = User::get("alice");
    let refused = |line: &[u8], says: &str| {
        let (mut s, mut r, _) = n.connect();
        let mut out = line.to_vec();
        out.push(b'\n');
        s.write_all(&out).unwrap();
        let mut answer = String::new();
        let _ = r.read_to_string(&mut answer);
        assert!(!answer.contains("MUNGE:"), "a proof for {says:?}: {answer}");
        assert_eq!(answer.lines().count(), 1, "{answer}");
        forbidden(&answer, says);
    };
    // Version 2's opening: a nonce and the uid to make the proof for, alice's.
    let v2 = format!(
        "{{\"nonce\":\"{}\",\"uid\":{}}}",
        "ab".repeat(request_binding::NONCE_LEN),
        alice.uid
    );
    refused(v2.as_bytes(), "credential refused");
    refused(b"hello", "credential refused");
    // alice's credentials, each wrong in one way.
    let (_s, _r, other) = n.connect();
    let (s, r, hello) = n.connect();
    let bob = User::get("bob").uid;
    let cred = Net::cred_with(&n.munged, "alice", &hello.opening(PING), bob, 60);
    forbidden(&Net::send((s, r), &cred, PING), "not for this uid");
    let cred = n.cred_for("alice", &other, PING);
    drop((_s, _r));
    refused(&cred, "another nonce");
    let (s, r, hello) = n.connect();
    let payload = hello.opening_as(&hello.daemon, b"{}", hello.dialled, PING);
    let cred = Net::cred_with(&n.munged, "alice", &payload, 0, 60);
    let answer = Net::send_all((s, r), &cred, PING);
    assert!(!answer.contains("MUNGE:"), "{answer}");
    forbidden(&answer, "another hello");
    let (s, r, hello) = n.connect();
    let payload = hello.opening_as(
        &hello.daemon,
        &hello.line,
        "127.0.0.1:1".parse().unwrap(),
        PING,
    );
    let cred = Net::cred_with(&n.munged, "alice", &payload, 0, 60);
    let answer = Net::send_all((s, r), &cred, PING);
    assert!(!answer.contains("MUNGE:"), "{answer}");
    forbidden(&answer, "another address");
    // Root, from a node not listed: no one, and no proof.
    let (s, r, hello) = n.connect();
    let cred = n.cred_for("root", &hello, PING);
    let answer = Net::send_all((s, r), &cred, PING);
    assert!(!answer.contains("MUNGE:"), "{answer}");
    forbidden(&answer, "not an administrator");
    for reason in [
        "unauthorized",
        "nonce",
        "hello",
        "address",
        "root_elsewhere",
    ] {
        n.logged_refusal(reason);
    }
    // alice herself is proven and served.
    n.alice_is_served_within(Duration::from_secs(10));
}

/// Issue 32's attacking review: a user who binds the daemon's network port (or its
/// metrics port) while the daemon is down, with no socket unit holding them, used to keep
/// the daemon from starting at all (it stopped when it could not bind): no supervision
/// and no Unix socket for anyone. Now it starts, serves the Unix socket, and takes each
/// port once the squatter lets go.
#[test]
fn a_user_holding_the_ports_keeps_the_daemon_from_neither_starting_nor_listening() {
    let port = free_port("127.0.0.1");
    let metrics_port = free_port("127.0.0.1");
    // mallory's: bound first (as anyone may bind a port above 1023).
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let metrics_squatter = std::net::TcpListener::bind(("127.0.0.1", metrics_port)).unwrap();
    // The daemon starts (`start_on` waits for its Unix socket's answer).
    let n = Net::start_on(
        ("127.0.0.1", port),
        &[],
        &format!("[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"),
        "10s",
        "",
    );
    let log = n.sys.d.log();
    assert!(
        log.contains("another process holds the port"),
        "{}",
        common::tail(&log, 20)
    );
    drop(squatter);
    drop(metrics_squatter);
    wait_for(
        "the daemon to take its network port",
        Duration::from_secs(30),
        || n.ctl("alice", &["status", "--json"]).status.success(),
    );
    wait_for(
        "the daemon to take its metrics port",
        Duration::from_secs(30),
        || {
            let Ok(mut s) = TcpStream::connect(("127.0.0.1", metrics_port)) else {
                return false;
            };
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            answer.starts_with("HTTP/1.1 200")
        },
    );
}
