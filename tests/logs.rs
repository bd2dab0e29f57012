//! The daemon's log under systemd: no colours, and every line about a chain carries the
//! chain and the job as fields of the span it was logged in (journal fields `CHAIN`,
//! `JOB` through the journal's native protocol; `attempt{chain=c1 job=..}` in text).

mod common;

use common::fake::{start, wait_until};
use common::*;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A job that ends out of memory, so its attempt is judged and retried.
fn submit_and_end_in_oom(d: &Daemon, fake: &common::fake::Fake) -> String {
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["--mem=100M", "job.sh"]);
    fake.ctl(&[
        "finish",
        &job,
        "FAILED",
        "0:9",
        "slurmstepd: error: Exceeded job memory limit\n",
    ]);
    wait_until("the retry's sbatch", Duration::from_secs(30), || {
        fake.sbatch_calls().len() == 2
    });
    job
}

/// The daemon's stderr is the journal's stream (JOURNAL_STREAM names it) but the
/// journal's socket is not there: plain text, no colour, no timestamp of its own, and the
/// judged attempt's line names its chain and job through the span.
#[test]
fn under_the_journal_stream_lines_have_no_colour_and_carry_the_attempt_span() {
    let (mut d, fake) = start("", &[]);
    d.kill();
    let log = d.dir.path().join("daemon.log");
    let m = std::fs::metadata(&log).unwrap();
    d.extra_env
        .push(("JOURNAL_STREAM".into(), format!("{}:{}", m.dev(), m.ino())));
    d.spawn();
    let before = std::fs::read(&log).unwrap().len();
    let job = submit_and_end_in_oom(&d, &fake);
    let text = std::fs::read(&log).unwrap()[before..].to_vec();
    assert!(!text.contains(&0x1b), "an ESC byte in:\n{}", d.log());
    let text = String::from_utf8(text).unwrap();
    let judged = text
        .lines()
        .find(|l| l.contains(&format!("attempt{{chain=c1 job={job}}}")) && l.contains("R1"))
        .unwrap_or_else(|| panic!("no judged line with the attempt's span:\n{text}"));
    assert!(judged.contains("cycle{cycle="), "{judged}");
    assert!(judged.contains("action=resubmit"), "{judged}");
    // The journal stamps each line itself.
    assert!(
        judged.trim_start().starts_with("INFO") || judged.trim_start().starts_with("WARN"),
        "{judged}"
    );
    // The submit's request span names the job and the chain once sbatch answered.
    assert!(
        text.lines().any(|l| l.contains("request{cmd=submit")
            && l.contains(&format!("job={job}"))
            && l.contains("submitted")),
        "{text}"
    );
}

/// Anywhere else (stderr a file, no JOURNAL_STREAM) there is no colour either: colour is
/// for a terminal.
#[test]
fn a_log_file_gets_no_colour() {
    let (d, fake) = start("", &[]);
    submit_and_end_in_oom(&d, &fake);
    let log = std::fs::read(d.dir.path().join("daemon.log")).unwrap();
    assert!(!log.contains(&0x1b), "{}", d.log());
    assert!(String::from_utf8_lossy(&log).contains("attempt{chain=c1 job="));
}

/// A private mount namespace with an empty /run, kept by a sleeping process, so a test
/// can be the journal at /run/systemd/journal/socket for a daemon run inside it.
struct Namespace(Child);

impl Namespace {
    fn new() -> Namespace {
        let mut child = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                "mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal && echo ready && exec sleep 600",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux)");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(
            line.trim(),
            "ready",
            "cannot make a mount namespace (this test needs root): {:?}",
            child.try_wait()
        );
        Namespace(child)
    }

    /// A path inside the namespace, as seen from outside it.
    fn path(&self, p: &str) -> std::path::PathBuf {
        std::path::PathBuf::from(format!("/proc/{}/root{p}", self.0.id()))
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One journal entry in the native protocol: `KEY=value` lines, or `KEY`, a 64-bit
/// little-endian length and the value, for values with newlines.
fn parse_entry(mut b: &[u8]) -> HashMap<String, Vec<String>> {
    let mut fields: HashMap<String, Vec<String>> = HashMap::new();
    while let Some(nl) = b.iter().position(|&c| c == b'\n') {
        let line = &b[..nl];
        let (key, value, rest) = match line.iter().position(|&c| c == b'=') {
            Some(eq) => (&line[..eq], &line[eq + 1..], &b[nl + 1..]),
            None => {
                let n = u64::from_le_bytes(b[nl + 1..nl + 9].try_into().unwrap()) as usize;
                let start = nl + 9;
                (line, &b[start..start + n], &b[start + n + 1..])
            }
        };
        fields
            .entry(String::from_utf8_lossy(key).into_owned())
            .or_default()
            .push(String::from_utf8_lossy(value).into_owned());
        b = rest;
    }
    fields
}

/// Under systemd with the journal there, every line goes through the journal's native
/// protocol: the judged attempt's entry has CHAIN and JOB fields from its span, the
/// decision's CLASS and ACTION, a PRIORITY, and no colour anywhere.
#[test]
fn under_systemd_lines_go_to_the_journal_with_chain_and_job_fields() {
    let ns = Namespace::new();
    let journal = UnixDatagram::bind(ns.path("/run/systemd/journal/socket")).unwrap();
    journal
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let (mut d, fake) = start("", &[]);
    d.kill();
    let log = d.dir.path().join("daemon.log");
    let stderr = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let m = std::fs::metadata(&log).unwrap();
    let before = m.len();
    let child = Command::new("nsenter")
        .arg(format!("--target={}", ns.0.id()))
        .args(["--mount", "--", DAEMON, "--config"])
        .arg(&d.config)
        .env("JOURNAL_STREAM", format!("{}:{}", m.dev(), m.ino()))
        .env("SLURM_SUPERVISOR_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    d.child = Some(child);
    wait_for("the daemon to answer", Duration::from_secs(60), || {
        d.ctl(&["status", "--json"]).status.success()
    });
    let job = submit_and_end_in_oom(&d, &fake);
    let mut buf = vec![0u8; 1 << 20];
    let judged = loop {
        let n = journal
            .recv(&mut buf)
            .expect("a journal entry for the judged attempt");
        let e = parse_entry(&buf[..n]);
        assert!(e.values().flatten().all(|v| !v.contains('\x1b')), "{e:?}");
        if e.get("CLASS").is_some_and(|c| c[0] == "R1") {
            break e;
        }
    };
    assert_eq!(judged["CHAIN"], ["c1"], "{judged:?}");
    assert_eq!(judged["JOB"], [job.as_str()], "{judged:?}");
    assert_eq!(judged["ACTION"], ["resubmit"], "{judged:?}");
    assert_eq!(judged["PRIORITY"], ["5"], "{judged:?}");
    assert_eq!(
        judged["SYSLOG_IDENTIFIER"],
        ["slurm-supervisord"],
        "{judged:?}"
    );
    assert!(
        judged["SPAN_NAME"].contains(&"attempt".to_string()),
        "{judged:?}"
    );
    assert!(
        judged["SPAN_NAME"].contains(&"cycle".to_string()),
        "{judged:?}"
    );
    assert!(judged.contains_key("CYCLE"), "{judged:?}");
    assert!(!judged["MESSAGE"][0].is_empty());
    // Nothing was written to stderr: it all went to the journal.
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        before,
        "{}",
        d.log()
    );
}
