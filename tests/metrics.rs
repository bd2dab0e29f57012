//! The Prometheus endpoint end to end: the real daemon with `[metrics] listen` against the
//! fake Slurm commands (tests/fake-slurm/fake_slurm.py), scraped over HTTP, the scrape read
//! by a real parser (the Python `prometheus_client` package's OpenMetrics parser, from the
//! venv scripts/test makes) and its numbers checked against `supervisorctl status --json`.

mod common;

use common::fake::start;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A port nothing listens on now (the kernel's pick, given back).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 request; the status code, the headers and the body.
fn http(port: u16, request: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a header and a body");
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (code, head.to_string(), body.to_string())
}

fn get(port: u16, path: &str) -> (u16, String, String) {
    http(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
    )
}

/// A Python with `prometheus_client` (PyPI), from `SSV_MCP_PYTHON` or the venv scripts/test makes.
fn python() -> PathBuf {
    let p = std::env::var_os("SSV_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/ssv-mcp-venv/bin/python"));
    let ok = Command::new(&p)
        .args(["-c", "import prometheus_client"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "this test needs a Python with the `prometheus_client` package at {} (or set SSV_MCP_PYTHON); \
         scripts/test makes one, or: /opt/ssv-mcp-venv/bin/pip install prometheus_client",
        p.display()
    );
    p
}

/// The scrape as the Prometheus client library's OpenMetrics parser reads it: every
/// sample as (name, labels) -> value. A scrape it refuses fails the test with its reason.
fn parse(body: &str) -> BTreeMap<(String, BTreeMap<String, String>), f64> {
    const READ: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    if not family.documentation:
        sys.exit(f"{family.name} has no help text")
    for s in family.samples:
        out.append([s.name, s.labels, s.value])
print(json.dumps(out))
"#;
    let mut child = Command::new(python())
        .args(["-c", READ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the scrape: {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<(String, BTreeMap<String, String>, f64)> =
        serde_json::from_slice(&out.stdout).unwrap();
    rows.into_iter().map(|(n, l, v)| ((n, l), v)).collect()
}

fn sample(
    samples: &BTreeMap<(String, BTreeMap<String, String>), f64>,
    name: &str,
    labels: &[(&str, &str)],
) -> f64 {
    let key = (
        name.to_string(),
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    *samples
        .get(&key)
        .unwrap_or_else(|| panic!("no sample {key:?} in {samples:#?}"))
}

#[test]
fn a_scrape_parses_and_agrees_with_status() {
    let port = free_port();
    let (d, fake) = start(
        &format!("\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
        &[],
    );
    d.write_script("job.sh", "echo hi");
    let done: Vec<String> = (0..3).map(|_| d.submit(&["job.sh"])).collect();
    let odd = d.submit(&["job.sh"]);
    let running = d.submit(&["job.sh"]);
    for job in &done {
        fake.ctl(&["finish", job, "COMPLETED", "0:0"]);
    }
    // An ending no rule recognises: it waits for an agent.
    fake.ctl(&[
        "finish",
        &odd,
        "FAILED",
        "1:0",
        "RuntimeError: shard 7 checksum mismatch\n",
    ]);
    for job in &done {
        d.wait_state(job, "completed", Duration::from_secs(30));
    }
    d.wait_state(&odd, "pending_failed", Duration::from_secs(30));
    assert_eq!(d.status(&running)[0]["state"], "active");

    let (code, head, body) = get(port, "/metrics");
    assert_eq!(code, 200, "{head}\n{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    let samples = parse(&body);

    // Chains by state: every state is there, and each count is what status shows.
    let status = d.json(&["status", "--json"]);
    let mut by_state: BTreeMap<String, f64> = BTreeMap::new();
    for row in status.as_array().unwrap() {
        *by_state
            .entry(row["state"].as_str().unwrap().to_string())
            .or_default() += 1.0;
    }
    assert_eq!(by_state.get("completed"), Some(&3.0), "{status:#}");
    for state in [
        "active",
        "ready",
        "pending_failed",
        "completed",
        "failed",
        "cancelled",
    ] {
        assert_eq!(
            sample(&samples, "slurm_supervisor_chains", &[("state", state)]),
            by_state.get(state).copied().unwrap_or(0.0),
            "chains in {state}"
        );
    }

    // The ambiguous ending, judged and escalated (R2) to an agent.
    assert_eq!(
        sample(
            &samples,
            "slurm_supervisor_endings_total",
            &[("classification", "ambiguous")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &samples,
            "slurm_supervisor_decisions_total",
            &[("class", "R2"), ("action", "escalate")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &samples,
            "slurm_supervisor_resolutions_total",
            &[("action", "resubmit")]
        ),
        0.0
    );
    assert_eq!(
        sample(
            &samples,
            "slurm_supervisor_decisions_by_actor_total",
            &[("actor", "supervisor")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &samples,
            "slurm_supervisor_decisions_by_actor_total",
            &[("actor", "user")]
        ),
        0.0
    );

    // Slurm commands were run and counted; the fake answered them all.
    for command in ["sbatch", "squeue", "sacct"] {
        let calls = sample(
            &samples,
            "slurm_supervisor_slurm_commands_total",
            &[("command", command)],
        );
        assert!(calls > 0.0, "{command}: {calls}");
        assert_eq!(
            sample(
                &samples,
                "slurm_supervisor_slurm_command_duration_seconds_count",
                &[("command", command)]
            ),
            calls,
            "{command}: one latency per call"
        );
    }
    assert_eq!(
        sample(
            &samples,
            "slurm_supervisor_slurm_commands_total",
            &[("command", "sbatch")]
        ),
        5.0
    );
    assert!(
        sample(
            &samples,
            "slurm_supervisor_poll_cycle_duration_seconds_count",
            &[]
        ) >= 1.0
    );
    assert_eq!(sample(&samples, "slurm_supervisor_breaker_open", &[]), 0.0);
    assert_eq!(
        sample(&samples, "slurm_supervisor_quarantined_nodes", &[]),
        0.0
    );
    let db = std::fs::metadata(d.state_dir().join("supervisor.db"))
        .unwrap()
        .len();
    assert!(sample(&samples, "slurm_supervisor_store_size_bytes", &[]) >= db as f64);

    // An agent's resubmission is a resolution; once its retry completes, it is counted
    // among the resubmitted chains that completed.
    let out = d.ctl(&[
        "classify",
        &odd,
        "--action",
        "retry",
        "--reason",
        "the shard was re-downloaded",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::fake::wait_until("the agent's retry", Duration::from_secs(30), || {
        fake.sbatch_calls().len() == 6
    });
    let retry = fake
        .jobs()
        .keys()
        .filter_map(|k| k.parse::<u64>().ok())
        .max()
        .unwrap()
        .to_string();
    fake.ctl(&["finish", &retry, "COMPLETED", "0:0"]);
    d.wait_state(&odd, "completed", Duration::from_secs(30));
    let samples = parse(&get(port, "/metrics").2);
    assert_eq!(
        sample(
            &samples,
            "slurm_supervisor_resolutions_total",
            &[("action", "resubmit")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &samples,
            "slurm_supervisor_resolution_resubmitted_chains",
            &[("state", "completed")]
        ),
        1.0
    );
    // The agent's resolution is a user's decision, without the user's name.
    assert_eq!(
        sample(
            &samples,
            "slurm_supervisor_decisions_by_actor_total",
            &[("actor", "user")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &samples,
            "slurm_supervisor_chains",
            &[("state", "completed")]
        ),
        4.0
    );
    assert_eq!(
        sample(
            &samples,
            "slurm_supervisor_slurm_commands_total",
            &[("command", "sbatch")]
        ),
        6.0
    );
}

#[test]
fn only_get_metrics_is_served() {
    let port = free_port();
    let (_d, _fake) = start(
        &format!("\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
        &[],
    );
    assert_eq!(get(port, "/").0, 404);
    assert_eq!(get(port, "/metrics/../etc").0, 404);
    let (code, head, _) = http(
        port,
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(code, 405, "{head}");
    // Headers past the limit are refused, not buffered.
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Junk: {}\r\n\r\n",
        "a".repeat(64 << 10)
    );
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(big.as_bytes());
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
    // The endpoint still answers after all that.
    assert_eq!(get(port, "/metrics").0, 200);
}

/// An address this host does not have stops the daemon, naming the key. (A port another
/// process holds does not: the daemon goes on and takes it once it is free, so no user
/// can keep it from starting: tests/net.rs,
/// `a_user_holding_the_ports_keeps_the_daemon_from_neither_starting_nor_listening`.)
#[test]
fn an_address_that_cannot_be_had_stops_the_daemon_naming_the_key() {
    // TEST-NET-1 (RFC 5737): no host has it.
    let (host, port) = ("192.0.2.1", 9464);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {:?}\n[metrics]\nlisten = \"{host}:{port}\"\n",
            dir.path().join("state").display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(common::DAEMON)
        .arg("--config")
        .arg(&config)
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot serve metrics on {host}:{port} (metrics.listen)"
        )),
        "{stderr}"
    );
    assert!(
        !dir.path().join("state/supervisor.sock").exists(),
        "the control socket was left behind"
    );
}

/// Issue 21, item 7: any local user could blind the endpoint by holding its 8 connections
/// (0 of 20 scrapes answered, a tripped breaker hidden with them). Connections are now
/// shared out by who holds them: bob's idle ones get at most his share, and a scrape by
/// another user (here root) is answered while he holds them.
#[test]
fn one_local_user_holding_connections_does_not_blind_the_endpoint() {
    if !nix::unistd::geteuid().is_root() {
        panic!("this test opens connections as the user bob: run it as root");
    }
    let port = free_port();
    let (_d, _fake) = start(
        &format!("\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
        &[],
    );
    assert_eq!(get(port, "/metrics").0, 200);
    // bob opens 20 connections and sends nothing; he says how many the daemon closed
    // (refused: the socket reads end-of-file) once at least 12 are (before, 8 were held
    // and 12 refused; now he gets his share, 4), or after 20 s. The rest he holds idle
    // until the daemon's header timeout.
    let holder = format!(
        "import socket, select, sys, time\n\
         socks = [socket.create_connection(('127.0.0.1', {port})) for _ in range(20)]\n\
         closed, end = set(), time.time() + 20\n\
         while len(closed) < 12 and time.time() < end:\n    \
             for s in select.select([s for s in socks if s not in closed], [], [], 0.2)[0]:\n        \
                 if s.recv(1) == b'': closed.add(s)\n\
         print(len(closed), flush=True)\n\
         sys.stdin.read()\n"
    );
    // Created if missing (a new machine has no bob before the real-Slurm tests).
    let bob = common::system::User::get("bob");
    let mut bob = Command::new("runuser")
        .args(["-u", &bob.name, "--", "/usr/bin/python3", "-c", &holder])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(bob.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let closed: usize = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("bob said {line:?}"));
    // While bob still holds his: root is answered, every time.
    for _ in 0..5 {
        assert_eq!(
            get(port, "/metrics").0,
            200,
            "a scrape was refused while bob held connections"
        );
    }
    drop(bob.stdin.take());
    let _ = bob.wait();
    assert!(
        closed >= 12,
        "bob kept {} of 20 idle connections",
        20 - closed
    );
}
