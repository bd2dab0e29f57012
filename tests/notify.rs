//! Chain-level notifications and the aging of `pending_failed`, end to end on the fake
//! Slurm (tests/fake-slurm): `[notify] command` receiving its JSON, the mail program's
//! argv and body, reminders and expiry (short durations). Delivery to a real mailbox by a
//! real MTA against the real Slurm is in tests/real_slurm_mail.rs.

mod common;

use common::fake::{start, wait_until};
use common::write_executable;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A `[notify]` section whose command appends each event (one JSON document on stdin) as
/// one line of `events.jsonl`, and whose mail program appends its argv and body as one
/// JSON line of `mail.jsonl`, both in `dir`.
fn notify_config(dir: &Path, mail: bool) -> String {
    let record = dir.join("record.py");
    write_executable(
        &record,
        r#"#!/usr/bin/env python3
import json, sys
out, argv = sys.argv[1], sys.argv[2:]
body = sys.stdin.read()
with open(out, "a") as f:
    f.write(json.dumps({"argv": argv, "stdin": body}) + "\n")
"#,
    );
    let mail_prog = dir.join("fake-mail");
    write_executable(
        &mail_prog,
        format!(
            "#!/bin/sh\nexec {} {} \"$@\"\n",
            record.display(),
            dir.join("mail.jsonl").display()
        ),
    );
    format!(
        "[notify]\nmail = {mail}\nmail_program = {:?}\ncommand = [{:?}, {:?}]\n",
        mail_prog.display().to_string(),
        record.display().to_string(),
        dir.join("events.jsonl").display().to_string()
    )
}

fn lines(path: PathBuf) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The events the notify command received, parsed from their stdin.
fn events(dir: &Path) -> Vec<Value> {
    lines(dir.join("events.jsonl"))
        .into_iter()
        .map(|l| serde_json::from_str(l["stdin"].as_str().unwrap()).unwrap())
        .collect()
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect()
}

/// The fields docs/json-schemas.md lists for the notify command's `notification`.
fn documented_fields() -> BTreeSet<String> {
    let doc = include_str!("../docs/json-schemas.md");
    let section = doc
        .split("### `notification`")
        .nth(1)
        .expect("docs/json-schemas.md documents `notification`");
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_notify_command_gets_each_chain_event_once_as_documented_json() {
    let dir = tempfile::tempdir().unwrap();
    let (d, fake) = start(&notify_config(dir.path(), true), &[]);
    d.write_script("job.sh", "echo hi");
    // A hostile --mail-user is not passed to the mail program: the owner is mailed.
    let job = d.submit(&[
        "--job-name=train\nBcc: eve@example.org",
        "--mail-user=-oQ/tmp/evil",
        "job.sh",
    ]);
    fake.ctl(&["finish", &job, "FAILED", "1:0", "something odd happened\n"]);
    d.wait_state(&job, "pending_failed", Duration::from_secs(30));
    wait_until("the pending_failed event", Duration::from_secs(30), || {
        !events(dir.path()).is_empty()
    });
    let chain = d.status(&job)[0]["id"].as_str().unwrap().to_string();
    let e = &events(dir.path())[0];
    assert_eq!(e["event"], "pending_failed", "{e:#}");
    assert_eq!(e["chain"], chain.as_str());
    assert_eq!(e["job"], job.as_str());
    assert_eq!(e["classification"], "ambiguous");
    assert_eq!(e["reason_code"], "needs_agent");
    assert_eq!(e["actor"], "supervisor");
    assert!(
        e["resolve"]
            .as_str()
            .unwrap()
            .starts_with(&format!("supervisorctl classify {chain} --action")),
        "{e:#}"
    );
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .name;
    assert_eq!(e["mail_to"], me.as_str(), "{e:#}");
    let keys: BTreeSet<String> = e.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        documented_fields(),
        "docs/json-schemas.md `notification`"
    );

    // The mail program was called as Slurm calls MailProg, once, to the owner.
    wait_until("the mail", Duration::from_secs(30), || {
        !lines(dir.path().join("mail.jsonl")).is_empty()
    });
    let mails = lines(dir.path().join("mail.jsonl"));
    assert_eq!(mails.len(), 1, "{mails:#?}");
    let argv: Vec<String> = serde_json::from_value(mails[0]["argv"].clone()).unwrap();
    assert_eq!(argv.len(), 3, "{argv:?}");
    assert_eq!(argv[0], "-s");
    assert!(
        argv[1].contains(&chain) && !argv[1].contains('\n'),
        "{argv:?}"
    );
    assert_eq!(argv[2], me);
    let body = mails[0]["stdin"].as_str().unwrap();
    assert!(body.contains("Reason: FAILED with exit code 1:0"), "{body}");
    assert!(
        body.contains(&format!("supervisorctl classify {chain}")),
        "{body}"
    );

    // Resolving it ends the chain: one `failed` event; failed is mailed only for
    // END/FAIL/ALL, and this job asked for no mail type.
    let out = d.ctl(&[
        "classify",
        &chain,
        "--action",
        "fail",
        "--reason",
        "a bug in the job",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the failed event", Duration::from_secs(30), || {
        events(dir.path()).len() >= 2
    });
    let all = events(dir.path());
    assert_eq!(kinds(&all), ["pending_failed", "failed"], "{all:#?}");
    assert_eq!(all[1]["reason"], "a bug in the job");
    assert_eq!(all[1]["resolve"], Value::Null);
    assert_eq!(all[1]["mail_to"], Value::Null);

    // A restart does not deliver them again: they were marked sent. The restarted daemon
    // delivers a new event (a second job's) and still nothing twice.
    let mut d = d;
    d.stop();
    d.spawn();
    let job2 = d.submit(&["--mail-type=END", "job.sh"]);
    fake.ctl(&["finish", &job2, "COMPLETED", "0:0"]);
    d.wait_state(&job2, "completed", Duration::from_secs(30));
    wait_until("the completed event", Duration::from_secs(30), || {
        events(dir.path()).len() >= 3
    });
    let all = events(dir.path());
    assert_eq!(
        kinds(&all),
        ["pending_failed", "failed", "completed"],
        "{all:#?}"
    );
    assert_eq!(
        all[2]["mail_to"],
        me.as_str(),
        "END asks for the completed mail"
    );
    wait_until("the completed mail", Duration::from_secs(30), || {
        lines(dir.path().join("mail.jsonl")).len() >= 2
    });
    // The attempts' own --mail-type lost END (the chain mails it instead).
    let calls = fake.sbatch_calls();
    let argv: Vec<String> = serde_json::from_value(calls[1]["argv"].clone()).unwrap();
    assert!(argv.contains(&"--mail-type=NONE".to_string()), "{argv:?}");
    assert!(!argv.contains(&"--mail-type=END".to_string()), "{argv:?}");
}

#[test]
fn mail_off_leaves_the_argv_alone_and_mails_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (d, fake) = start(&notify_config(dir.path(), false), &[]);
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["--mail-type=ALL", "job.sh"]);
    fake.ctl(&["finish", &job, "FAILED", "1:0", "something odd happened\n"]);
    wait_until("the pending_failed event", Duration::from_secs(30), || {
        !events(dir.path()).is_empty()
    });
    assert_eq!(events(dir.path())[0]["mail_to"], Value::Null);
    assert!(lines(dir.path().join("mail.jsonl")).is_empty());
    let argv: Vec<String> = serde_json::from_value(fake.sbatch_calls()[0]["argv"].clone()).unwrap();
    assert!(argv.contains(&"--mail-type=ALL".to_string()), "{argv:?}");
}

#[test]
fn an_unresolved_chain_is_reminded_once_then_failed_by_expiry() {
    let dir = tempfile::tempdir().unwrap();
    // First only the reminder (expiry far away), so the two cannot meet in one cycle
    // whatever the machine's load; then a reload brings the expiry near.
    let notify = notify_config(dir.path(), false);
    let cfg = |expire: &str| {
        format!(
            "{notify}\n[escalation]\nremind_after = \"1s\"\nexpire_after = \"{expire}\"\nexpire_action = \"fail\"\n"
        )
    };
    let (d, fake) = start(&cfg("1d"), &[]);
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["job.sh"]);
    fake.ctl(&["finish", &job, "FAILED", "1:0", "something odd happened\n"]);
    wait_until("the reminder", Duration::from_secs(60), || {
        events(dir.path()).len() >= 2
    });
    assert_eq!(kinds(&events(dir.path())), ["pending_failed", "reminder"]);
    assert_eq!(d.status(&job)[0]["state"], "pending_failed");
    let text = std::fs::read_to_string(&d.config)
        .unwrap()
        .replace("expire_after = \"1d\"", "expire_after = \"2s\"");
    std::fs::write(&d.config, text).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.child.as_ref().unwrap().id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    d.wait_state(&job, "failed", Duration::from_secs(60));
    let h = d.history(&job);
    let decisions = h["decisions"].as_array().unwrap();
    let last = decisions.last().unwrap();
    assert_eq!(last["class"], "R3", "{last:#}");
    assert_eq!(last["actor"], "expiry");
    assert_eq!(last["action"], "fail");
    assert_eq!(last["reason_code"], "expired");
    assert_eq!(last["resolves"], decisions[decisions.len() - 2]["id"]);
    assert!(
        last["reason"]
            .as_str()
            .unwrap()
            .contains("escalation.expire_after"),
        "{last:#}"
    );
    wait_until("the failed event", Duration::from_secs(30), || {
        events(dir.path()).len() >= 3
    });
    let all = events(dir.path());
    assert_eq!(
        kinds(&all),
        ["pending_failed", "reminder", "failed"],
        "one reminder only: {all:#?}"
    );
    assert_eq!(all[2]["reason_code"], "expired");
    assert_eq!(all[2]["actor"], "expiry");
}

#[test]
fn an_expiry_hold_keeps_the_chain_for_a_person_and_tells_so() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        "{}\n[escalation]\nexpire_after = \"2s\"\nexpire_action = \"hold\"\n",
        notify_config(dir.path(), false)
    );
    let (d, fake) = start(&cfg, &[]);
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["job.sh"]);
    fake.ctl(&["finish", &job, "FAILED", "1:0", "something odd happened\n"]);
    wait_until("the expired event", Duration::from_secs(60), || {
        events(dir.path()).len() >= 2
    });
    let all = events(dir.path());
    assert_eq!(kinds(&all), ["pending_failed", "expired"], "{all:#?}");
    assert!(all[1]["resolve"].as_str().unwrap().contains("classify"));
    assert_eq!(d.status(&job)[0]["state"], "pending_failed");
    let h = d.history(&job);
    let expired: Vec<&Value> = h["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["actor"] == "expiry")
        .collect();
    assert_eq!(expired.len(), 1, "{h:#}");
    assert_eq!(expired[0]["class"], "R3");
    assert_eq!(expired[0]["action"], "hold");
    assert_eq!(expired[0]["reason_code"], "expired");
    // A person still resolves it.
    let chain = d.status(&job)[0]["id"].as_str().unwrap().to_string();
    let out = d.ctl(&["classify", &chain, "--action", "fail", "--reason", "seen"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    d.wait_state(&job, "failed", Duration::from_secs(30));
    let h = d.history(&job);
    assert_eq!(
        h["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["actor"] == "expiry")
            .count(),
        1,
        "expired once: {h:#}"
    );
}

/// A failed delivery is retried with backoff: the command fails once, then takes the
/// event; the mail, which went out the first time, is not sent again.
#[test]
fn a_failed_delivery_is_retried_and_what_went_out_is_not_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let flaky = dir.path().join("flaky");
    let once = dir.path().join("failed-once");
    write_executable(
        &flaky,
        format!(
            "#!/bin/sh\nif [ ! -e {once} ]; then : > {once}; exit 3; fi\nexec {} {}\n",
            dir.path().join("record.py").display(),
            dir.path().join("events.jsonl").display(),
            once = once.display(),
        ),
    );
    let cfg = notify_config(dir.path(), true).replace(
        &format!(
            "command = [{:?}, {:?}]",
            dir.path().join("record.py").display().to_string(),
            dir.path().join("events.jsonl").display().to_string()
        ),
        &format!("command = [{:?}]", flaky.display().to_string()),
    );
    assert!(cfg.contains("flaky"), "{cfg}");
    let (d, fake) = start(&cfg, &[]);
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["job.sh"]);
    fake.ctl(&["finish", &job, "FAILED", "1:0", "something odd happened\n"]);
    wait_until("the retried delivery", Duration::from_secs(120), || {
        !events(dir.path()).is_empty()
    });
    assert!(once.exists());
    assert_eq!(kinds(&events(dir.path())), ["pending_failed"]);
    assert_eq!(lines(dir.path().join("mail.jsonl")).len(), 1);
    let log = d.log();
    assert!(log.contains("notification not delivered"), "{log}");
    assert!(log.contains("trying again in 30s"), "{log}");
}

/// A mail program that never returns is killed after `notify.timeout` (what it started
/// too), the notification is given up after `max_attempts`, and the daemon went on
/// deciding meanwhile.
#[test]
fn a_stuck_mail_program_is_killed_and_holds_nothing_up() {
    let dir = tempfile::tempdir().unwrap();
    let stuck = dir.path().join("stuck-mail");
    let pids = dir.path().join("pids");
    write_executable(
        &stuck,
        format!(
            "#!/bin/sh\nsleep 600 &\necho $$ $! >> {}\nwait\n",
            pids.display()
        ),
    );
    let cfg = format!(
        "[notify]\nmail_program = {:?}\ntimeout = \"2s\"\nmax_attempts = 1\n",
        stuck.display().to_string()
    );
    let (d, fake) = start(&cfg, &[]);
    d.write_script("job.sh", "echo hi");
    let first = d.submit(&["job.sh"]);
    let second = d.submit(&["job.sh"]);
    fake.ctl(&["finish", &first, "FAILED", "1:0", "odd\n"]);
    wait_until("the mail program to start", Duration::from_secs(30), || {
        pids.exists()
    });
    // The loop goes on while the mail program hangs.
    fake.ctl(&["finish", &second, "COMPLETED", "0:0"]);
    d.wait_state(&second, "completed", Duration::from_secs(30));
    wait_until(
        "the notification to be given up",
        Duration::from_secs(60),
        || d.log().contains("given up after 1 failed deliveries"),
    );
    assert!(d.log().contains("did not finish within 2s and was killed"));
    let text = std::fs::read_to_string(&pids).unwrap();
    let pids: Vec<i32> = text
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    wait_until(
        "the mail program and its child to be gone",
        Duration::from_secs(10),
        || {
            pids.iter().all(|p| {
                // Gone, or a zombie its parent has not reaped yet.
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .map_or(true, |s| s.split_whitespace().nth(2) == Some("Z"))
            })
        },
    );
}

/// A chain the supervisor cancels because what it waits on can never happen (afternotok
/// on a chain that completed) is news to its submitter: the notify command hears of it
/// always, the mail goes out for `--mail-type=INVALID_DEPEND` (what Slurm mails for a job
/// whose dependency can never be satisfied). The upstream's own completion is no mail.
#[test]
fn a_chain_cancelled_for_a_dependency_that_can_never_hold_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let (d, fake) = start(&notify_config(dir.path(), true), &[]);
    d.write_script("job.sh", "echo hi");
    let up = d.submit(&["job.sh"]);
    let c_up = d.status(&up)[0]["id"].as_str().unwrap().to_string();
    let down = d.submit(&[
        "--mail-type=INVALID_DEPEND",
        &format!("--dependency=afternotok:{c_up}"),
        "job.sh",
    ]);
    let c_down = d.status(&down)[0]["id"].as_str().unwrap().to_string();
    fake.ctl(&["finish", &up, "COMPLETED", "0:0"]);
    d.wait_state(&down, "cancelled", Duration::from_secs(30));
    let told = |dir: &Path| {
        events(dir)
            .into_iter()
            .find(|e| e["event"] == "dependency_never_satisfied")
    };
    wait_until(
        "the dependency_never_satisfied event",
        Duration::from_secs(30),
        || told(dir.path()).is_some(),
    );
    let e = told(dir.path()).unwrap();
    assert_eq!(e["chain"], c_down.as_str(), "{e:#}");
    assert_eq!(e["reason_code"], "dependency_never_satisfied", "{e:#}");
    assert_eq!(e["actor"], "supervisor", "{e:#}");
    assert_eq!(e["resolve"], Value::Null, "{e:#}");
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .name;
    assert_eq!(e["mail_to"], me.as_str(), "{e:#}");
    wait_until("its mail", Duration::from_secs(30), || {
        !lines(dir.path().join("mail.jsonl")).is_empty()
    });
    let mails = lines(dir.path().join("mail.jsonl"));
    assert_eq!(mails.len(), 1, "only the cancelled chain's: {mails:#?}");
    let argv: Vec<String> = serde_json::from_value(mails[0]["argv"].clone()).unwrap();
    assert!(
        argv[1].contains(&c_down) && argv[1].contains("can never start"),
        "{argv:?}"
    );
    // Told once.
    let all = events(dir.path());
    assert_eq!(
        kinds(&all)
            .iter()
            .filter(|k| *k == "dependency_never_satisfied")
            .count(),
        1,
        "{all:#?}"
    );
}
