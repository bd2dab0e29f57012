//! Chain-level mail end to end: a system-wide (root) daemon against the real Slurm of
//! `scripts/dev-cluster`, mailing through bsd-mailx and a real local MTA (exim4, set up by
//! `scripts/local-mta`) into alice's mailbox, /var/mail/alice. Each test names its jobs
//! uniquely and looks only for mail that names them (other tests mail alice too).

mod common;

use common::system::chmod;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const MIN: Duration = Duration::from_secs(60);
const MAILBOX: &str = "/var/mail/alice";

/// Mail with /usr/bin/mail: the dev cluster's slurm.conf says `MailProg=/bin/true`, so
/// Slurm itself mails nothing there.
const MAILING: &str = "[notify]\nmail_program = \"/usr/bin/mail\"\n";

/// The local MTA must be there: scripts/test runs scripts/local-mta before these tests.
fn require_mta() {
    assert!(
        Path::new("/usr/sbin/exim4").exists() && Path::new("/usr/bin/mail").exists(),
        "no local MTA: run scripts/local-mta (as root) first"
    );
}

/// alice's working directory with `script` as job.sh.
fn alice_home(d: &Daemon, script: &str) -> PathBuf {
    let home = d.dir.path().join("alice");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("job.sh"), script).unwrap();
    chmod(&home, 0o700);
    run("chown", &["-R", "alice:", home.to_str().unwrap()]);
    home
}

fn as_alice(d: &Daemon, ctl: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new("runuser")
        .args(["-u", "alice", "--"])
        .arg(ctl)
        .arg("--config")
        .arg(&d.config)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

fn submit_as_alice(d: &Daemon, ctl: &Path, cwd: &Path, args: &[&str]) -> String {
    let mut all = vec!["submit", "--"];
    all.extend_from_slice(args);
    let out = as_alice(d, ctl, cwd, &all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A job name no other test uses.
fn unique_name(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("ssv-mail-{what}-{}-{nanos}", std::process::id())
}

/// The messages in alice's mailbox that contain `needle`.
fn mails_naming(needle: &str) -> Vec<String> {
    let text = std::fs::read_to_string(MAILBOX).unwrap_or_default();
    let mut messages = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line.starts_with("From ") && !current.is_empty() {
            messages.push(std::mem::take(&mut current));
        }
        current.push_str(line);
        current.push('\n');
    }
    if !current.is_empty() {
        messages.push(current);
    }
    messages.retain(|m| m.contains(needle));
    messages
}

fn subject(mail: &str) -> &str {
    mail.lines()
        .find_map(|l| l.strip_prefix("Subject: "))
        .unwrap_or_default()
}

fn wait_mails(needle: &str, n: usize, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let m = mails_naming(needle);
        if m.len() >= n {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "fewer than {n} mails naming {needle} in {MAILBOX} within {within:?}: {m:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The `MailType` Slurm holds for a job (empty when none).
fn slurm_mail_types(job: &str) -> Vec<String> {
    let out = slurm("scontrol")
        .args(["show", "job", job])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("MailType="))
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default()
}

/// Whether the store marked the chain's notification of `kind` sent, and with a mail.
fn notification_row(d: &Daemon, chain: &str, kind: &str) -> Option<(bool, bool)> {
    let id: i64 = chain.trim_start_matches('c').parse().unwrap();
    let db = rusqlite::Connection::open_with_flags(
        d.state_dir().join("supervisor.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .ok()?;
    db.query_row(
        "SELECT sent_at IS NOT NULL, mail_done FROM notifications WHERE chain_id = ?1 AND kind = ?2",
        rusqlite::params![id, kind],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .ok()
}

/// A chain that needs alice (an ambiguous failure) mails her once, naming the chain and
/// the way to resolve it; resolving it as failed mails her once more (her `FAIL`), and
/// Slurm's own per-attempt mail type lost FAIL.
#[test]
fn a_chain_in_pending_failed_mails_its_owner_once() {
    require_slurm();
    require_mta();
    let (d, ctl) = root_daemon("ssv-mail-", MAILING);
    let home = alice_home(
        &d,
        "#!/bin/bash\necho 'the frobnicator is out of phase' >&2\nexit 1\n",
    );
    let name = unique_name("pending");
    let job = submit_as_alice(
        &d,
        &ctl,
        &home,
        &[
            &format!("--job-name={name}"),
            "--mail-type=FAIL",
            "-o",
            "/dev/null",
            "job.sh",
        ],
    );
    assert!(
        slurm_mail_types(&job).is_empty(),
        "FAIL is the chain's to mail, not Slurm's: {:?}",
        slurm_mail_types(&job)
    );
    let rows = d.wait_state(&job, "pending_failed", 3 * MIN);
    let chain = rows[0]["id"].as_str().unwrap().to_string();
    let mails = wait_mails(&name, 1, MIN);
    let m = &mails[0];
    assert!(
        subject(m).contains(&format!("chain {chain} ")) && subject(m).contains("pending_failed"),
        "{m}"
    );
    assert!(
        m.contains(&format!("supervisorctl classify {chain} --action")),
        "{m}"
    );
    assert!(m.contains("Classification: ambiguous"), "{m}");
    assert!(m.contains(&format!("Slurm job {job}")), "{m}");

    let out = as_alice(
        &d,
        &ctl,
        &home,
        &["classify", &chain, "--action", "fail", "--reason", "my bug"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The failed mail comes after the pending_failed one: once it is there, a second
    // pending_failed mail would be too.
    let mails = wait_mails(&name, 2, MIN);
    let subjects: Vec<&str> = mails.iter().map(|m| subject(m)).collect();
    assert_eq!(mails.len(), 2, "{subjects:#?}");
    assert_eq!(
        subjects
            .iter()
            .filter(|s| s.contains("pending_failed"))
            .count(),
        1,
        "{subjects:#?}"
    );
    assert!(subjects[1].ends_with(" failed"), "{subjects:#?}");
    assert!(mails[1].contains("Reason: my bug"), "{}", mails[1]);
}

/// An OOM is retried and the chain completes: Slurm holds no FAIL/END/REQUEUE mail type
/// for either attempt (the chain's mail replaces them); alice gets one mail, the
/// completed one her `ALL` asks for, and none for a chain whose `FAIL` does not ask for it.
#[test]
fn a_retried_attempt_mails_nothing_and_completed_is_mailed_only_for_end() {
    require_slurm();
    require_mta();
    let (d, ctl) = root_daemon("ssv-mail-", MAILING);
    // Touches 150 MiB, so --mem=100M is exceeded and OverMemoryKill fires (slurmstepd
    // says so in the job's output, which the classifier reads: it is kept).
    let home = alice_home(&d, &format!("#!/bin/bash\n{HOLD_150M}\necho done\n"));
    let all = unique_name("oom-all");
    let fail = unique_name("oom-fail");
    let job_all = submit_as_alice(
        &d,
        &ctl,
        &home,
        &[
            &format!("--job-name={all}"),
            "--mail-type=ALL",
            "--mem=100M",
            "job.sh",
        ],
    );
    let job_fail = submit_as_alice(
        &d,
        &ctl,
        &home,
        &[
            &format!("--job-name={fail}"),
            "--mail-type=FAIL",
            "--mem=100M",
            "job.sh",
        ],
    );
    let types = slurm_mail_types(&job_all);
    assert!(types.contains(&"BEGIN".to_string()), "{types:?}");
    for taken in ["FAIL", "END", "REQUEUE", "ALL"] {
        assert!(!types.contains(&taken.to_string()), "{types:?}");
    }
    assert!(slurm_mail_types(&job_fail).is_empty());
    // Each retry is looked at as soon as its chain completed, well within MinJobAge
    // (30 s on the dev clusters), while `scontrol show job` still knows it: both chains
    // are watched at once, so the one that completes first is not left waiting for the
    // other (and forgotten by slurmctld meanwhile).
    let mut chains = [None, None];
    let deadline = Instant::now() + 4 * MIN;
    while chains.iter().any(Option::is_none) {
        for (i, (job, keeps_begin)) in [(&job_all, true), (&job_fail, false)]
            .into_iter()
            .enumerate()
        {
            if chains[i].is_none() {
                chains[i] = retry_checked(&d, job, keeps_begin);
            }
        }
        assert!(
            Instant::now() < deadline,
            "the chains of {job_all} and {job_fail} did not both complete within 4 minutes: {chains:?}\n{:#}\n{:#}\nlog tail:\n{}",
            d.history(&job_all),
            d.history(&job_fail),
            tail(&d.log(), 60)
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let [Some(chain_all), Some(chain_fail)] = chains else {
        unreachable!()
    };

    // The completed mail of the chain whose ALL asks for it.
    let mails = wait_mails(&all, 1, MIN);
    assert_eq!(mails.len(), 1, "{mails:#?}");
    assert!(
        subject(&mails[0]).contains(&format!("chain {chain_all} ")),
        "{}",
        mails[0]
    );
    assert!(subject(&mails[0]).ends_with(" completed"), "{}", mails[0]);
    // The other chain's completed notification was handled, without a mail.
    let deadline = Instant::now() + MIN;
    while notification_row(&d, &chain_fail, "completed").is_none_or(|(sent, _)| !sent) {
        assert!(
            Instant::now() < deadline,
            "the completed notification of {chain_fail} was never handled"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        notification_row(&d, &chain_fail, "completed"),
        Some((true, false)),
        "FAIL does not ask for the completed mail"
    );
    assert!(mails_naming(&fail).is_empty(), "{:#?}", mails_naming(&fail));
    assert_eq!(mails_naming(&all).len(), 1);
}

/// Once `job`'s chain has completed (None before): its chain, after checking that it was
/// retried once and that its retry asks Slurm for BEGIN mail only if `keeps_begin`, and
/// never for FAIL, END, REQUEUE or ALL (the chain's own mails are the daemon's).
fn retry_checked(d: &Daemon, job: &str, keeps_begin: bool) -> Option<String> {
    let rows = d.status(job);
    if rows.is_empty() || rows.iter().any(|r| r["state"] != "completed") {
        return None;
    }
    let chain = rows[0]["id"].as_str().unwrap().to_string();
    let h = d.history(job);
    let attempts = h["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "retried once: {h:#}");
    assert_eq!(attempts[0]["slurm_state"], "FAILED", "{h:#}");
    let retry = attempts[1]["slurm_job_id"].as_str().unwrap();
    let out = slurm("scontrol")
        .args(["show", "job", retry])
        .output()
        .unwrap();
    assert!(out.status.success(), "scontrol show job {retry}: {out:?}");
    let t = slurm_mail_types(retry);
    assert_eq!(
        t.contains(&"BEGIN".to_string()),
        keeps_begin,
        "{chain}: {t:?}"
    );
    assert!(
        !t.iter()
            .any(|x| ["FAIL", "END", "REQUEUE", "ALL"].contains(&x.as_str())),
        "{chain}: {t:?}"
    );
    Some(chain)
}
