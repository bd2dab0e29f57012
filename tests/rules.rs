//! Rules that learn (docs/rules.md) against the fake Slurm of tests/fake-slurm: an
//! ending's failure signature in `history` and `pending`, the same for the same failure
//! whatever its job id, directory and timestamps, and different for a different error.

mod common;

use common::fake::{start, Fake};
use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// Submits `job.sh` from the folder `dir` of the daemon's work dir; returns its job id.
fn submit_in(d: &Daemon, dir: &str) -> String {
    let cwd = d.work_dir().join(dir);
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::write(cwd.join("job.sh"), "#!/bin/bash\necho hi\n").unwrap();
    let out = d.ctl_in(&["submit", "--", "job.sh"], &cwd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Ends `job` FAILED 1:0 with `stderr` in its output file, and waits for its escalation.
fn fail_with(d: &Daemon, fake: &Fake, job: &str, stderr: &str) {
    fake.ctl(&["finish", job, "FAILED", "1:0", stderr]);
    d.wait_state(job, "pending_failed", Duration::from_secs(60));
}

/// The signature of the latest attempt of the chain of `job` in `pending --json`.
fn pending_signature(d: &Daemon, job: &str) -> (String, String) {
    let pending = d.json(&["pending", "--json"]);
    let row = pending
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["slurm_job_id"] == job)
        .unwrap_or_else(|| panic!("{job} is not pending: {pending:#}"));
    let a = row["evidence"]["attempts"]
        .as_array()
        .unwrap()
        .last()
        .cloned()
        .unwrap();
    let text = |v: &Value| v.as_str().unwrap_or_else(|| panic!("{a:#}")).to_string();
    (text(&a["signature"]), text(&a["signature_text"]))
}

fn checksum_error(dir: &Path, job: &str, at: &str, sum: &str) -> String {
    format!(
        "[{at}] loading {}/ckpt/shard3.pt\n\
         RuntimeError: checkpoint shard 3 has an unexpected checksum {sum} (job {job})\n",
        dir.display()
    )
}

#[test]
fn the_same_failure_is_one_signature_and_two_errors_are_two() {
    let (d, fake) = start("", &[]);
    let (a, b, c) = (
        submit_in(&d, "run-1"),
        submit_in(&d, "exp/run-22"),
        submit_in(&d, "run-3"),
    );
    let w = d.work_dir();
    fail_with(
        &d,
        &fake,
        &a,
        &checksum_error(&w.join("run-1"), &a, "2026-11-28T23:28:53.123Z", "3f2a9bc1"),
    );
    fail_with(
        &d,
        &fake,
        &b,
        &checksum_error(
            &w.join("exp/run-22"),
            &b,
            "2026-12-01T04:05:06Z",
            "0badc0de",
        ),
    );
    fail_with(
        &d,
        &fake,
        &c,
        "NCCL error: watchdog timeout after 1800 seconds\n",
    );
    let (sa, ta) = pending_signature(&d, &a);
    let (sb, tb) = pending_signature(&d, &b);
    let (sc, tc) = pending_signature(&d, &c);
    assert_eq!((&sa, &ta), (&sb, &tb));
    assert_eq!(
        ta,
        "[<time>] loading <dir>/ckpt/shard<n>.pt\n\
         RuntimeError: checkpoint shard <n> has an unexpected checksum <hex> (job <n>)"
    );
    assert_ne!(sa, sc);
    assert_eq!(tc, "NCCL error: watchdog timeout after <n> seconds");
    // `history` shows it by the attempt, in JSON and in text.
    let h = d.history(&a);
    assert_eq!(h["attempts"][0]["signature"], sa.as_str());
    let out = d.ctl(&["history", &a]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("signature {sa}"))
            && text.contains("| RuntimeError: checkpoint shard <n>"),
        "{text}"
    );
}

/// Resolves the chain of `job` with `action` (`retry` or `fail`); for a retry, ends the
/// retry's job `state` (`COMPLETED`, or `FAILED` with another error) and returns its id.
fn resolve(d: &Daemon, fake: &Fake, job: &str, action: &str, state: &str) -> Option<String> {
    let out = d.ctl(&[
        "classify",
        job,
        "--action",
        action,
        "--reason",
        "seen before",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if action != "retry" {
        return None;
    }
    let mut retry = String::new();
    wait_for("the retry's job", Duration::from_secs(60), || {
        let row = &d.status(job)[0];
        match row["slurm_job_id"].as_str() {
            Some(j) if j != job && row["state"] == "active" => {
                retry = j.to_string();
                true
            }
            _ => false,
        }
    });
    match state {
        "COMPLETED" => {
            fake.ctl(&["finish", &retry, "COMPLETED", "0:0"]);
            d.wait_state(job, "completed", Duration::from_secs(60));
        }
        _ => fail_with(d, fake, &retry, "something else went wrong\n"),
    }
    Some(retry)
}

/// The value of the metric line `name` (with its labels, as served) in a scrape.
fn metric(port: u16, name: &str) -> f64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    let full = format!("slurm_supervisor_{name} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&full))
        .unwrap_or_else(|| panic!("no {full:?} in {body}"))
        .trim()
        .parse()
        .unwrap()
}

fn proposals(d: &Daemon) -> Vec<Value> {
    d.json(&["rules", "--json"])["proposals"]
        .as_array()
        .cloned()
        .unwrap()
}

#[test]
fn agreeing_resolutions_whose_retries_worked_make_a_proposal_and_others_none() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (d, fake) = start(&format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"), &[]);
    let w = d.work_dir();
    let checksum = |dir: &str, job: &str| {
        checksum_error(&w.join(dir), job, "2026-11-28T23:28:53Z", "3f2a9bc1")
    };
    // Three chains, the same failure, each retried by a person, each retry completing.
    let mut evidence = Vec::new();
    for (i, dir) in ["a", "b", "c"].into_iter().enumerate() {
        let job = submit_in(&d, dir);
        fail_with(&d, &fake, &job, &checksum(dir, &job));
        if i < 2 {
            assert!(
                proposals(&d).is_empty(),
                "fewer than 3 resolutions propose nothing"
            );
        }
        resolve(&d, &fake, &job, "retry", "COMPLETED");
        evidence.push(d.status(&job)[0]["id"].as_str().unwrap().to_string());
    }
    // A signature resolved twice with retry and once with fail; and one whose three
    // retries failed.
    for action in ["retry", "retry", "fail"] {
        let job = submit_in(&d, "split");
        fail_with(&d, &fake, &job, "NCCL watchdog timeout after 1800 s\n");
        resolve(&d, &fake, &job, action, "COMPLETED");
    }
    for _ in 0..3 {
        let job = submit_in(&d, "bad");
        fail_with(&d, &fake, &job, "Segmentation fault at 0x7ffd1234\n");
        resolve(&d, &fake, &job, "retry", "FAILED");
    }
    // The fourth occurrence still waits: nothing is accepted by itself.
    let fourth = submit_in(&d, "d");
    fail_with(&d, &fake, &fourth, &checksum("d", &fourth));
    let (sig, _) = pending_signature(&d, &fourth);
    let all = proposals(&d);
    assert_eq!(all.len(), 1, "{all:#?}");
    let p = &all[0];
    assert_eq!(p["id"], sig.as_str());
    assert_eq!(p["rule"]["kind"], "transient");
    assert_eq!(p["rule"]["exit_codes"], serde_json::json!([1]));
    assert_eq!(p["rule"]["change"], "unchanged");
    assert_eq!(
        (p["completed"].as_u64(), p["failed"].as_u64()),
        (Some(3), Some(0))
    );
    // Four endings had it: the three resolved and the one pending.
    assert_eq!(p["endings"], 4);
    let chains: Vec<&str> = p["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["chain"].as_str().unwrap())
        .collect();
    assert_eq!(
        chains,
        evidence.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert!(p["evidence"][0]["actor"]
        .as_str()
        .unwrap()
        .starts_with("user:"));
    assert_eq!(p["conflicts"], serde_json::json!([]));
    // The pattern it would add matches the fourth's stderr.
    let re = regex::Regex::new(p["rule"]["stderr"].as_str().unwrap()).unwrap();
    assert!(re.is_match(&checksum("d", &fourth)));
    let text = String::from_utf8(d.ctl(&["rules"]).stdout).unwrap();
    assert!(
        text.contains(&format!("{sig}  FAILED 1:0  would add: kind transient"))
            && text.contains("retries: 3 completed, 0 failed, 0 running; 4 endings"),
        "{text}"
    );

    assert_eq!(metric(port, "rule_proposals"), 1.0);
    assert_eq!(metric(port, "rules{source=\"rules_d\"}"), 0.0);

    // `rules accept` as the admin (here the daemon's own user, as root is for a system
    // daemon) writes the entry to rules.d/ beside the config and puts it in force at
    // once: no longer proposed, and the next ending with the signature is retried by it
    // at once, its record naming the proposal.
    let name = p["rule"]["name"].as_str().unwrap().to_string();
    assert_eq!(name, format!("learnt-{sig}"));
    let out = d.ctl(&["rules", "accept", "0000deadbeef"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no rule proposal"));
    let out = d.ctl(&["rules", "accept", &sig]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = d
        .config
        .parent()
        .unwrap()
        .join(format!("rules.d/{name}.toml"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("rule {name} is in force, from {}", file.display())
    );
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        written.contains(&format!("# Rule proposal {sig}, accepted by uid"))
            && written.contains(&format!("proposal = \"{sig}\"")),
        "{written}"
    );
    // In force at once (the daemon reloaded before answering), so no longer proposed.
    assert_eq!(d.ctl(&["rules", "accept", &sig]).status.code(), Some(3));
    let answer = d.json(&["rules", "--json"]);
    let learnt: Vec<&Value> = answer["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == name.as_str())
        .collect();
    assert_eq!(learnt.len(), 1, "{answer:#}");
    assert!(learnt[0]["source"]
        .as_str()
        .unwrap()
        .ends_with(&format!("rules.d/{name}.toml")));
    assert_eq!(answer["proposals"], serde_json::json!([]));
    assert_eq!(metric(port, "rule_proposals"), 0.0);
    assert_eq!(metric(port, "rules{source=\"rules_d\"}"), 1.0);
    assert_eq!(metric(port, "rules_not_working"), 0.0);
    let fifth = submit_in(&d, "e");
    fake.ctl(&["finish", &fifth, "FAILED", "1:0", &checksum("e", &fifth)]);
    let mut last = Value::Null;
    wait_for("the rule's decision", Duration::from_secs(60), || {
        last = d.history(&fifth)["decisions"]
            .as_array()
            .and_then(|v| v.last().cloned())
            .unwrap_or(Value::Null);
        !last.is_null()
    });
    assert_eq!(last["actor"], "supervisor");
    assert_eq!(last["action"], "resubmit");
    assert_eq!(last["classification"], "transient");
    assert!(last["reason"].as_str().unwrap().contains(&name), "{last:#}");
    // It names its proposal as a field of its own, in the record's inputs too, and in
    // the text of `history`.
    assert_eq!(last["proposal"], sig.as_str(), "{last:#}");
    assert_eq!(last["inputs"]["verdict"]["proposal"], sig.as_str());
    let text = String::from_utf8(d.ctl(&["history", &fifth]).stdout).unwrap();
    assert!(
        text.contains(&format!("by a rule from proposal {sig}")),
        "{text}"
    );
    // The acceptance is a record of its own, shown by `rules --history` and `--json`.
    let records = d.json(&["rules", "--json"])["decisions"].clone();
    assert_eq!(records.as_array().unwrap().len(), 1, "{records:#}");
    assert_eq!(
        (
            &records[0]["proposal"],
            &records[0]["action"],
            &records[0]["owner_uid"],
            &records[0]["scope"]
        ),
        (
            &Value::from(sig.as_str()),
            &Value::from("accept"),
            &Value::Null,
            &Value::from("everyone")
        )
    );
    assert!(records[0]["actor"].as_str().unwrap().starts_with("user:"));
    assert_eq!(records[0]["rule"]["name"], name.as_str());
    let text = String::from_utf8(d.ctl(&["rules", "--history"]).stdout).unwrap();
    assert!(
        text.contains(&format!("{sig}  accepted for everyone by user:")),
        "{text}"
    );
    // Counted as an ending a rule decided, apart from the people's and agents' resolutions.
    assert_eq!(
        metric(port, "rule_decisions_total{action=\"resubmit\"}"),
        1.0
    );
    assert_eq!(metric(port, "rule_decisions_total{action=\"fail\"}"), 0.0);
    // `rules` counts the rule's retries (this one not made yet: its backoff runs).
    let answer = d.json(&["rules", "--json"]);
    let learnt = answer["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name.as_str())
        .cloned()
        .unwrap();
    assert_eq!(
        (&learnt["completed"], &learnt["failed"], &learnt["running"]),
        (
            &serde_json::json!(0),
            &serde_json::json!(0),
            &serde_json::json!(1)
        ),
        "{learnt:#}"
    );
    assert_eq!(learnt["not_working"], false);
    // The fourth, judged before the rule, still waits for a person or agent.
    assert_eq!(d.status(&fourth)[0]["state"], "pending_failed");
}

#[test]
fn a_proposal_with_a_conflict_is_shown_so_and_not_accepted_without_saying_so() {
    let (d, fake) = start("", &[]);
    let mut chains = Vec::new();
    for action in ["retry", "fail", "retry", "retry"] {
        let job = submit_in(&d, "x");
        // In colour: a TOML comment holds no control character, the accepted file must
        // still be valid.
        fail_with(
            &d,
            &fake,
            &job,
            "\x1b[31mOSError: [Errno 5] Input/output error\x1b[0m\n",
        );
        resolve(&d, &fake, &job, action, "COMPLETED");
        chains.push(d.status(&job)[0]["id"].as_str().unwrap().to_string());
    }
    let all = proposals(&d);
    assert_eq!(all.len(), 1, "{all:#?}");
    let p = &all[0];
    let id = p["id"].as_str().unwrap();
    assert_eq!(p["evidence"].as_array().unwrap().len(), 3);
    assert_eq!(p["conflicts"][0]["chain"], chains[1].as_str());
    assert_eq!(p["conflicts"][0]["action"], "fail");
    let text = String::from_utf8(d.ctl(&["rules"]).stdout).unwrap();
    assert!(
        text.contains("CONFLICT") && text.contains("conflict: "),
        "{text}"
    );
    let out = d.ctl(&["rules", "accept", id]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has conflicts")
            && err.contains(&chains[1])
            && err.contains("--despite-conflicts"),
        "{err}"
    );
    assert!(!d.config.parent().unwrap().join("rules.d").exists());
    let out = d.ctl(&["rules", "accept", id, "--despite-conflicts"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(proposals(&d), Vec::<Value>::new());
    // The rule it wrote matches that coloured stderr.
    let rules = d.json(&["rules", "--json"])["rules"].clone();
    let learnt = rules
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == format!("learnt-{id}").as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{rules:#}"));
    let re = regex::Regex::new(learnt["stderr"].as_str().unwrap()).unwrap();
    assert!(re.is_match("\x1b[31mOSError: [Errno 5] Input/output error\x1b[0m\n"));
}

/// `[learn] stop_not_working`: a rule whose retries stopped working no longer decides.
#[test]
fn a_rule_whose_retries_stopped_working_is_reported_and_can_stop_by_itself() {
    let (d, fake) = start(
        "[retry]\nbackoff_initial = \"1s\"\nbackoff_jitter = 0.0\n\
         [learn]\nagreeing = 2\nstop_not_working = true\n\
         [[rules]]\nname = \"io\"\nkind = \"transient\"\nstderr = \"Input/output error\"\n",
        &[],
    );
    let io = "OSError: [Errno 5] Input/output error\n";
    // Twice the rule retries, and twice its retry fails otherwise.
    for _ in 0..2 {
        let job = submit_in(&d, "x");
        fake.ctl(&["finish", &job, "FAILED", "1:0", io]);
        let mut retry = String::new();
        wait_for("the rule's retry", Duration::from_secs(60), || {
            let row = &d.status(&job)[0];
            match row["slurm_job_id"].as_str() {
                Some(j) if j != job && row["state"] == "active" => {
                    retry = j.to_string();
                    true
                }
                _ => false,
            }
        });
        fail_with(&d, &fake, &retry, "something else went wrong\n");
    }
    let rules = d.json(&["rules", "--json"])["rules"].clone();
    assert_eq!(rules[0]["name"], "io");
    assert_eq!(
        (&rules[0]["completed"], &rules[0]["failed"]),
        (&serde_json::json!(0), &serde_json::json!(2))
    );
    assert_eq!(rules[0]["not_working"], true);
    let text = String::from_utf8(d.ctl(&["rules"]).stdout).unwrap();
    assert!(text.contains("NOT WORKING"), "{text}");
    // The next ending it would have matched is judged without it: it waits for a person.
    let job = submit_in(&d, "y");
    fail_with(&d, &fake, &job, io);
    let last = d.history(&job)["decisions"][0].clone();
    assert_eq!(last["classification"], "ambiguous", "{last:#}");
    assert!(d.log().contains("no longer decides"));
}

/// Makes a proposal: `n` chains fail with `stderr` in folder `dir`, each retried by a
/// person, each retry completing; returns the proposal's id.
fn make_proposal(d: &Daemon, fake: &Fake, dir: &str, stderr: &str, n: usize) -> String {
    let mut sig = String::new();
    for _ in 0..n {
        let job = submit_in(d, dir);
        fail_with(d, fake, &job, stderr);
        sig = pending_signature(d, &job).0;
        resolve(d, fake, &job, "retry", "COMPLETED");
    }
    let all = proposals(d);
    assert!(all.iter().any(|p| p["id"] == sig.as_str()), "{all:#?}");
    sig
}

fn err(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `rules reject`: kept in the store, shown with who, when and why; a second rejection
/// writes nothing; an acceptance of it then needs --despite-rejection; what a user sends
/// is checked as data.
#[test]
fn a_rejection_is_kept_shown_and_asked_about_before_an_acceptance() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (d, fake) = start(
        &format!("[learn]\nagreeing = 2\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
        &[],
    );
    let sig = make_proposal(&d, &fake, "x", "OSError: [Errno 5] Input/output error\n", 2);
    assert_eq!(metric(port, "rule_proposals"), 1.0);
    assert_eq!(proposals(&d)[0]["state"], "waiting");
    assert_eq!(proposals(&d)[0]["decided"], Value::Null);

    // What a user sends is data: a bad id, a reason too long or with control characters.
    for (args, what) in [
        (
            vec!["rules", "reject", "ZZZ"],
            "is not a rule proposal's id",
        ),
        (
            vec!["rules", "reject", "0123456789AB"],
            "is not a rule proposal's id",
        ),
        (
            vec!["rules", "accept", "../../etc/pa"],
            "is not a rule proposal's id",
        ),
    ] {
        let out = d.ctl(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(err(&out).contains(what), "{}", err(&out));
    }
    let long = "x".repeat(1025);
    let out = d.ctl(&["rules", "reject", &sig, "--reason", &long]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = d.ctl(&["rules", "reject", &sig, "--reason", "a\x1b[2Jb"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(err(&out).contains("control characters"));
    assert_eq!(
        d.json(&["rules", "--json"])["decisions"],
        serde_json::json!([])
    );

    let out = d.ctl(&["rules", "reject", &sig, "--reason", "the disk was replaced"]);
    assert!(out.status.success(), "{}", err(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with(&format!(
            "proposal {sig} is rejected for everyone: rejected for everyone by user:"
        )) && said.contains("\"the disk was replaced\""),
        "{said}"
    );
    let answer = d.json(&["rules", "--json"]);
    let p = &answer["proposals"][0];
    assert_eq!(p["id"], sig.as_str());
    assert_eq!(p["state"], "rejected");
    assert_eq!(p["decided"]["action"], "reject");
    assert_eq!(p["decided"]["reason"], "the disk was replaced");
    assert!(p["decided"]["actor"].as_str().unwrap().starts_with("user:"));
    assert!(p["decided"]["at"].as_i64().unwrap() > 0);
    let records = answer["decisions"].as_array().unwrap().clone();
    assert_eq!(records.len(), 1);
    assert_eq!(
        metric(port, "rule_proposals"),
        0.0,
        "a rejected proposal waits no more"
    );
    let text = String::from_utf8(d.ctl(&["rules"]).stdout).unwrap();
    assert!(
        text.contains("REJECTED: rejected for everyone by user:"),
        "{text}"
    );

    // Again: as things stand, nothing written.
    let out = d.ctl(&["rules", "--json", "reject", &sig, "--reason", "again"]);
    assert!(out.status.success(), "{}", err(&out));
    let again: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again["changed"], false);
    assert_eq!(again["record"]["id"], records[0]["id"]);
    assert_eq!(
        d.json(&["rules", "--json"])["decisions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Accepting it now needs saying so.
    let out = d.ctl(&["rules", "accept", &sig]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(
        err(&out).contains("was rejected by user:") && err(&out).contains("--despite-rejection"),
        "{}",
        err(&out)
    );
    assert!(!d.config.parent().unwrap().join("rules.d").exists());
    let out = d.ctl(&[
        "rules",
        "accept",
        &sig,
        "--despite-rejection",
        "--reason",
        "back again",
    ]);
    assert!(out.status.success(), "{}", err(&out));
    let answer = d.json(&["rules", "--json"]);
    assert_eq!(answer["proposals"], serde_json::json!([]));
    let actions: Vec<&str> = answer["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["reject", "accept"]);
    assert_eq!(answer["decisions"][1]["reason"], "back again");
    assert!(answer["rules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["proposal"] == sig.as_str()));
    // In force for everyone: no longer listed, so neither accepted nor rejected again.
    assert_eq!(d.ctl(&["rules", "reject", &sig]).status.code(), Some(3));
}

/// System-wide mode with real users: alice accepts a proposal made from her own chains
/// for her own chains only (kept in the store: her later endings are decided by it, bob's
/// never); bob cannot decide it at all; carol, a member of `[learn] admin_group`, rejects
/// and accepts it for everyone as root can. (As root: the users and the group are made.)
#[test]
fn a_users_rule_decides_their_own_endings_and_the_admin_group_decides_for_everyone() {
    use common::system::{chmod, chown, System, User};
    let group = "ssvruleadm";
    let out = std::process::Command::new("groupadd")
        .args(["-f", group])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    User::get("carol");
    let out = std::process::Command::new("usermod")
        .args(["-aG", group, "carol"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let sys = System::start(
        "",
        &format!("[learn]\nagreeing = 2\nadmin_group = \"{group}\"\n"),
    );
    std::fs::create_dir(sys.home("carol")).unwrap();
    chmod(&sys.home("carol"), 0o700);
    chown(&sys.home("carol"), "carol");
    sys.write_as("alice", "job.sh", b"#!/bin/bash\necho hi\n");
    sys.write_as("bob", "job.sh", b"#!/bin/bash\necho hi\n");
    let stderr = "RuntimeError: checkpoint shard 3 has an unexpected checksum 3f2a9bc1\n";
    let fail = |job: &str| {
        sys.fake.ctl(&["finish", job, "FAILED", "1:0", stderr]);
    };
    let within = Duration::from_secs(60);
    for _ in 0..2 {
        let job = sys.submit_as("alice", &["job.sh"]);
        fail(&job);
        sys.d.wait_state(&job, "pending_failed", within);
        let out = sys.as_user(
            "alice",
            &["classify", &job, "--action", "retry", "--reason", "seen it"],
        );
        assert!(out.status.success(), "{}", err(&out));
        let mut retry = String::new();
        wait_for("the retry", within, || {
            let row = &sys.d.status(&job)[0];
            match row["slurm_job_id"].as_str() {
                Some(j) if j != job && row["state"] == "active" => {
                    retry = j.to_string();
                    true
                }
                _ => false,
            }
        });
        sys.fake.ctl(&["finish", &retry, "COMPLETED", "0:0"]);
        sys.d.wait_state(&job, "completed", within);
    }
    let mine = sys.json_as("alice", &["rules", "--json"]);
    let sig = mine["proposals"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{mine:#}"))
        .to_string();
    // Bob sees no proposal from alice's chains, and can decide none.
    assert_eq!(
        sys.json_as("bob", &["rules", "--json"])["proposals"],
        serde_json::json!([])
    );
    for args in [["rules", "accept", &sig], ["rules", "reject", &sig]] {
        let out = sys.as_user("bob", &args);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {out:?}");
        assert!(err(&out).contains("made from your chains"), "{}", err(&out));
    }

    // Alice, who is no admin, accepts it: for her own chains (no --mine needed).
    let out = sys.as_user("alice", &["rules", "--json", "accept", &sig]);
    assert!(out.status.success(), "{}", err(&out));
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&a["scope"], &a["changed"], &a["file"]),
        (&Value::from("mine"), &Value::from(true), &Value::Null)
    );
    assert_eq!(a["record"]["scope"], "user:alice");
    assert!(!sys.d.config.parent().unwrap().join("rules.d").exists());
    let again = sys.as_user("alice", &["rules", "--json", "accept", &sig]);
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(
        (&again["changed"], &again["record"]["id"]),
        (&Value::from(false), &a["record"]["id"])
    );
    let view = sys.json_as("alice", &["rules", "--json"]);
    assert_eq!(view["proposals"][0]["state"], "accepted");
    let own = view["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["source"] == "user:alice")
        .cloned();
    assert_eq!(
        own.unwrap_or_default()["proposal"],
        sig.as_str(),
        "{view:#}"
    );
    assert!(sys.json_as("bob", &["rules", "--json"])["rules"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["source"] != "user:alice"));

    // Her next such ending is decided by it at once, naming the proposal; bob's waits.
    let hers = sys.submit_as("alice", &["job.sh"]);
    let his = sys.submit_as("bob", &["job.sh"]);
    fail(&hers);
    fail(&his);
    sys.d.wait_state(&his, "pending_failed", within);
    let mut last = Value::Null;
    wait_for("the rule's decision", within, || {
        last = sys.d.history(&hers)["decisions"]
            .as_array()
            .and_then(|v| v.last().cloned())
            .unwrap_or(Value::Null);
        !last.is_null()
    });
    assert_eq!(
        (&last["action"], &last["classification"]),
        (&Value::from("resubmit"), &Value::from("transient")),
        "{last:#}"
    );
    assert_eq!(last["proposal"], sig.as_str());
    let bobs = sys.d.history(&his)["decisions"][0].clone();
    assert_eq!(
        (&bobs["classification"], &bobs["proposal"]),
        (&Value::from("ambiguous"), &Value::Null),
        "{bobs:#}"
    );

    // Carol, of the admin group, rejects it for everyone: newer than alice's own
    // acceptance, it takes her rule out of force too (docs/rules.md).
    let out = sys.as_user(
        "carol",
        &["rules", "reject", &sig, "--reason", "not for everyone yet"],
    );
    assert!(out.status.success(), "{}", err(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("rejected for everyone by user:carol"));
    let root_view = sys.d.json(&["rules", "--json"]);
    assert_eq!(
        root_view["proposals"][0]["state"], "rejected",
        "{root_view:#}"
    );
    assert_eq!(
        sys.json_as("carol", &["rules", "--json"])["proposals"][0]["state"],
        "rejected"
    );
    let alices = sys.json_as("alice", &["rules", "--json"]);
    assert_eq!(
        (
            &alices["proposals"][0]["state"],
            &alices["proposals"][0]["decided"]["actor"]
        ),
        (&Value::from("rejected"), &Value::from("user:carol")),
        "{alices:#}"
    );
    // Bob, not of the group, sees the decisions for everyone but not alice's own.
    let bob_records = sys.json_as("bob", &["rules", "--json"])["decisions"].clone();
    assert_eq!(bob_records.as_array().unwrap().len(), 1, "{bob_records:#}");
    assert_eq!(bob_records[0]["actor"], "user:carol");
    // Then accepts it for everyone (with the rules.d/ file): bob's next one is retried.
    let out = sys.as_user("carol", &["rules", "accept", &sig, "--despite-rejection"]);
    assert!(out.status.success(), "{}", err(&out));
    let next = sys.submit_as("bob", &["job.sh"]);
    fail(&next);
    wait_for("the rule's decision on bob's chain", within, || {
        sys.d.history(&next)["decisions"][0]["proposal"] == sig.as_str()
    });
}

// Users' own rules and the daemon's config, against what an unprivileged user may send
// (the attacking review of the rules' admin, each failing before its fix).

mod own_rules {
    use super::common::system::System;
    use super::common::*;
    use serde_json::Value;
    use std::time::Duration;

    const WITHIN: Duration = Duration::from_secs(60);
    const STDERR: &str = "RuntimeError: checkpoint shard 3 has an unexpected checksum 3f2a9bc1\n";

    fn err(out: &std::process::Output) -> String {
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// The retry of `job` once the daemon made it; its job id.
    fn retry_of(sys: &System, job: &str) -> String {
        let mut retry = String::new();
        wait_for("the retry", WITHIN, || {
            let row = &sys.d.status(job)[0];
            match row["slurm_job_id"].as_str() {
                Some(j) if j != job && row["state"] == "active" => {
                    retry = j.to_string();
                    true
                }
                _ => false,
            }
        });
        retry
    }

    /// `user`'s `job.sh` fails with STDERR; they retry it; the retry completes.
    fn fail_and_retry(sys: &System, user: &str) {
        let job = sys.submit_as(user, &["job.sh"]);
        sys.fake.ctl(&["finish", &job, "FAILED", "1:0", STDERR]);
        sys.d.wait_state(&job, "pending_failed", WITHIN);
        let out = sys.as_user(
            user,
            &["classify", &job, "--action", "retry", "--reason", "seen it"],
        );
        assert!(out.status.success(), "{}", err(&out));
        let retry = retry_of(sys, &job);
        sys.fake.ctl(&["finish", &retry, "COMPLETED", "0:0"]);
        sys.d.wait_state(&job, "completed", WITHIN);
    }

    /// The proposal STDERR makes from `user`'s own chains (two agreeing retries).
    fn proposal_of(sys: &System, user: &str) -> String {
        for _ in 0..2 {
            fail_and_retry(sys, user);
        }
        let mine = sys.json_as(user, &["rules", "--json"]);
        mine["proposals"][0]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{mine:#}"))
            .to_string()
    }

    /// `user` accepts `sig` for their own chains.
    fn accept_mine(sys: &System, user: &str, sig: &str) {
        let out = sys.as_user(user, &["rules", "--json", "accept", sig]);
        assert!(out.status.success(), "{}", err(&out));
        let a: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(a["scope"], "mine");
    }

    /// The decision on `user`'s next ending with STDERR.
    fn next_decision(sys: &System, user: &str) -> Value {
        let job = sys.submit_as(user, &["job.sh"]);
        sys.fake.ctl(&["finish", &job, "FAILED", "1:0", STDERR]);
        let mut last = Value::Null;
        wait_for("a decision on the ending", WITHIN, || {
            last = sys.d.history(&job)["decisions"]
                .as_array()
                .and_then(|v| v.last().cloned())
                .unwrap_or(Value::Null);
            !last.is_null()
        });
        last
    }

    fn reloads(sys: &System) -> usize {
        sys.d.log().matches("config reloaded").count()
    }

    /// Any user may send `rules accept`: only a rules.d/ file written (an admin's
    /// acceptance for everyone) reloads the root daemon's config, never a refusal, a
    /// rate-limited request or a user's acceptance for their own chains.
    #[test]
    fn only_a_rules_d_file_written_reloads_the_config_never_a_users_request() {
        let sys = System::start("", "[learn]\nagreeing = 2\n");
        sys.write_as("alice", "job.sh", b"#!/bin/bash\necho hi\n");
        let mut codes = Vec::new();
        for _ in 0..5 {
            let out = sys.as_user("alice", &["rules", "accept", "000000000000"]);
            codes.push(out.status.code());
        }
        codes.push(
            sys.as_user("alice", &["rules", "accept", "not-an-id"])
                .status
                .code(),
        );
        assert!(codes.iter().all(|c| *c != Some(0)), "{codes:?}");
        let sig = proposal_of(&sys, "alice");
        accept_mine(&sys, "alice", &sig);
        // Her acceptance again (as it stands) and her rejection: no reload either.
        accept_mine(&sys, "alice", &sig);
        let out = sys.as_user("alice", &["rules", "reject", &sig]);
        assert!(out.status.success(), "{}", err(&out));
        // The answer comes after a reload (daemon/mod.rs), so the log holds any now.
        assert_eq!(reloads(&sys), 0, "alice's requests reloaded the config");
        // Root's acceptance for everyone writes its file, and reloads.
        let out = sys.d.ctl(&["rules", "accept", &sig, "--despite-rejection"]);
        assert!(out.status.success(), "{}", err(&out));
        assert_eq!(reloads(&sys), 1, "{}", tail(&sys.d.log(), 10));
    }

    /// Bob's own rule `learnt-<sig>` whose retries fail stops his rule only: alice's own
    /// rule of the same name still decides her endings.
    #[test]
    fn a_users_own_rule_that_stopped_working_stops_no_one_elses_rule_of_its_name() {
        let sys = System::start("", "[learn]\nagreeing = 2\nstop_not_working = true\n");
        for u in ["alice", "bob"] {
            sys.write_as(u, "job.sh", b"#!/bin/bash\necho hi\n");
        }
        let sig = proposal_of(&sys, "alice");
        accept_mine(&sys, "alice", &sig);
        assert_eq!(proposal_of(&sys, "bob"), sig, "one signature for both");
        accept_mine(&sys, "bob", &sig);
        // Bob's rule retries his endings at once; he has its retries fail.
        for _ in 0..2 {
            let job = sys.submit_as("bob", &["job.sh"]);
            sys.fake.ctl(&["finish", &job, "FAILED", "1:0", STDERR]);
            let retry = retry_of(&sys, &job);
            sys.fake
                .ctl(&["finish", &retry, "FAILED", "2:0", "something else\n"]);
            sys.d.wait_state(&job, "pending_failed", WITHIN);
        }
        let own = |user: &str| {
            let view = sys.json_as(user, &["rules", "--json"]);
            view["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["source"] == format!("user:{user}"))
                .cloned()
                .unwrap_or_else(|| panic!("{view:#}"))
        };
        let bobs = own("bob");
        assert_eq!(
            (&bobs["failed"], &bobs["not_working"]),
            (&Value::from(2), &Value::from(true)),
            "{bobs:#}"
        );
        let hers = own("alice");
        assert_eq!(
            (&hers["failed"], &hers["not_working"]),
            (&Value::from(0), &Value::from(false)),
            "{hers:#}"
        );
        let last = next_decision(&sys, "alice");
        assert_eq!(
            (&last["classification"], &last["proposal"]),
            (&Value::from("transient"), &Value::from(sig.as_str())),
            "bob's failing retries took alice's own rule out: {last:#}\nlog:\n{}",
            tail(&sys.d.log(), 10)
        );
        // Bob's own rule, stopped, decides his no more.
        let last = next_decision(&sys, "bob");
        assert!(last["proposal"].is_null(), "{last:#}");
    }

    /// At the cap of decisions about rules a user still takes their own rule out of
    /// force (and may accept no more); the refusal reads as one sentence.
    #[test]
    fn at_the_cap_of_decisions_a_user_still_rejects_their_own_rule_in_force() {
        let sys = System::start("", "[learn]\nagreeing = 2\n");
        sys.write_as("alice", "job.sh", b"#!/bin/bash\necho hi\n");
        let sig = proposal_of(&sys, "alice");
        // 256 records, the last an acceptance: her rule is in force at the cap.
        for i in 0..128 {
            let out = sys.as_user("alice", &["rules", "reject", &sig]);
            assert!(out.status.success(), "{i}: {}", err(&out));
            let out = sys.as_user("alice", &["rules", "accept", &sig, "--despite-rejection"]);
            assert!(out.status.success(), "{i}: {}", err(&out));
        }
        let out = sys.as_user("alice", &["rules", "reject", &sig]);
        assert!(
            out.status.success(),
            "her own rule outlived the cap: {}",
            err(&out)
        );
        let last = next_decision(&sys, "alice");
        assert!(last["proposal"].is_null(), "{last:#}");
        // Past the cap she accepts nothing more.
        let out = sys.as_user("alice", &["rules", "accept", &sig, "--despite-rejection"]);
        let refused = err(&out);
        assert!(
            !out.status.success() && refused.contains("the most a user may (256;"),
            "{refused}"
        );
        assert!(!refused.contains("  "), "stray spaces: {refused:?}");
    }

    /// An admin's rejection for everyone takes a user's own rule out of force (the user
    /// sees who rejected it, and why), and the user's own rejection then stands as it is.
    #[test]
    fn an_admins_rejection_for_everyone_takes_a_users_own_rule_out_of_force() {
        let sys = System::start("", "[learn]\nagreeing = 2\n");
        sys.write_as("alice", "job.sh", b"#!/bin/bash\necho hi\n");
        let sig = proposal_of(&sys, "alice");
        accept_mine(&sys, "alice", &sig);
        let out = sys.d.ctl(&["rules", "reject", &sig, "--reason", "harmful"]);
        assert!(out.status.success(), "{}", err(&out));
        let view = sys.json_as("alice", &["rules", "--json"]);
        let p = &view["proposals"][0];
        assert_eq!(
            (&p["state"], &p["decided"]["reason"], &p["decided"]["scope"]),
            (
                &Value::from("rejected"),
                &Value::from("harmful"),
                &Value::from("everyone")
            ),
            "{view:#}"
        );
        assert!(
            !view["rules"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["source"] == "user:alice"),
            "{view:#}"
        );
        let out = sys.as_user("alice", &["rules", "reject", &sig]);
        assert!(out.status.success(), "{}", err(&out));
        let last = next_decision(&sys, "alice");
        assert!(
            last["proposal"].is_null(),
            "root rejected it for everyone; her ending was still decided by it: {last:#}"
        );
    }
}
