//! A system-wide daemon (running as root, for every user of a login node) against the
//! real Slurm: a user reaches it through the socket, may see and touch only their own
//! chains, and every Slurm command for them runs as them, retries included.

mod common;

use common::system::chmod;
use common::*;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

const TRANSIENT_RULE: &str = "[[rules]]\nname = \"connection-refused\"\nkind = \"transient\"\nstderr = 'Connection refused'\n";

fn as_alice(ctl: &Path, config: &Path, cwd: &Path, args: &[&str]) -> Output {
    as_user("alice", ctl, config, cwd, args)
}

fn as_user(user: &str, ctl: &Path, config: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new("runuser")
        .args(["-u", user, "--"])
        .arg(ctl)
        .arg("--config")
        .arg(config)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

/// A Unix user with a Slurm account (scripts/dev-cluster makes alice and bob; this makes
/// sure, so the test does not depend on which version of it ran).
fn ensure_user(user: &str) {
    let known = Command::new("id")
        .arg(user)
        .output()
        .unwrap()
        .status
        .success();
    if !known {
        let _ = Command::new("useradd").args(["-m", user]).output();
    }
    let _ = slurm("sacctmgr")
        .args(["-i", "add", "user", user, "account=default"])
        .output();
}

/// A home for `user` inside the test's directory, with `script` as job.sh.
fn home_of(d: &Daemon, user: &str, script: &str) -> std::path::PathBuf {
    let home = d.dir.path().join(user);
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("job.sh"), script).unwrap();
    chmod(&home, 0o700);
    run(
        "chown",
        &["-R", &format!("{user}:"), home.to_str().unwrap()],
    );
    home
}

/// alice and bob submit at the same time to one root daemon; bob then tries to reach
/// alice's chain, her script and her output through every command, MCP included, and
/// through the evidence the daemon reads for his own job. He gets nothing of hers, and
/// nothing of hers changes.
#[test]
fn bob_cannot_reach_alices_work_through_the_root_daemon() {
    require_slurm();
    ensure_user("alice");
    ensure_user("bob");
    let (d, ctl) = root_daemon("ssv-two-users-", TRANSIENT_RULE);
    let config = d.config.clone();
    let secret = "ALICE-SECRET-7f3a";
    let alice = home_of(
        &d,
        "alice",
        &format!("#!/bin/bash\necho '{secret} in stdout'\necho '{secret} in stderr: shard checksum mismatch' >&2\nexit 3\n"),
    );
    let bob = home_of(&d, "bob", "#!/bin/bash\necho bob was here\n");
    let alice_out = alice.join("alice.out");
    let (a_ctl, a_cfg, a_home) = (ctl.clone(), config.clone(), alice.clone());
    let a_out = alice_out.display().to_string();
    let alice_submit = std::thread::spawn(move || {
        as_user(
            "alice",
            &a_ctl,
            &a_cfg,
            &a_home,
            &[
                "submit",
                "--",
                "--job-name=ssv-alice",
                "-o",
                &a_out,
                "job.sh",
            ],
        )
    });
    let bob_submit = as_user(
        "bob",
        &ctl,
        &config,
        &bob,
        &["submit", "--", "--job-name=ssv-bob", "job.sh"],
    );
    let alice_submit = alice_submit.join().unwrap();
    for out in [&alice_submit, &bob_submit] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let alice_job = String::from_utf8_lossy(&alice_submit.stdout)
        .trim()
        .to_string();
    let rows = d.wait_state(&alice_job, "pending_failed", Duration::from_secs(180));
    let alice_chain = rows[0]["id"].as_str().unwrap().to_string();
    let before = d.history(&alice_chain);
    // The positive control: alice herself sees her evidence, so a leak would show.
    let mine = as_user("alice", &ctl, &config, &alice, &["pending", "--json"]);
    assert!(
        String::from_utf8_lossy(&mine.stdout).contains(secret),
        "{}",
        String::from_utf8_lossy(&mine.stdout)
    );

    // bob's job writes where alice's output is: the daemon must not read her file as his
    // evidence (owner check), whatever Slurm does with his job.
    std::fs::write(bob.join("steal.sh"), "#!/bin/bash\necho nothing\nexit 3\n").unwrap();
    run("chown", &["bob:", bob.join("steal.sh").to_str().unwrap()]);
    let a_path = alice_out.display().to_string();
    let steal = as_user(
        "bob",
        &ctl,
        &config,
        &bob,
        &[
            "submit",
            "--",
            "--job-name=ssv-steal",
            "-o",
            &a_path,
            "-e",
            &a_path,
            "steal.sh",
        ],
    );
    assert!(
        steal.status.success(),
        "{}",
        String::from_utf8_lossy(&steal.stderr)
    );
    let steal_job = String::from_utf8_lossy(&steal.stdout).trim().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while d.status(&steal_job)[0]["state"] == "active" {
        assert!(
            std::time::Instant::now() < deadline,
            "bob's job never ended"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // Every command, by job id and by chain id: another user's chain (77), no data.
    let ids = [alice_job.as_str(), alice_chain.as_str()];
    for id in ids {
        for args in [
            vec!["status", id],
            vec!["status", "--json", id],
            vec!["history", id],
            vec!["history", "--json", id],
            vec!["stats", id],
            vec!["cancel", id],
            vec!["classify", id, "--action", "fail", "--reason", "mine now"],
            vec![
                "classify",
                id,
                "--action",
                "retry",
                "--reason",
                "mine now",
                "--dry-run",
            ],
            vec!["recover", id, "--dry-run"],
            vec!["recover", id],
        ] {
            let out = as_user("bob", &ctl, &config, &bob, &args);
            assert_eq!(
                out.status.code(),
                Some(77),
                "bob {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let all = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                !all.contains(secret),
                "bob {args:?} got alice's data: {all}"
            );
        }
    }
    let adopt = as_user("bob", &ctl, &config, &bob, &["adopt", &alice_job]);
    assert!(!adopt.status.success());
    for args in [
        vec!["status", "--json"],
        vec!["pending", "--json"],
        vec!["stats", "--json"],
    ] {
        let out = as_user("bob", &ctl, &config, &bob, &args);
        assert!(
            out.status.success(),
            "bob {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains(secret), "bob {args:?}: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let rows = v.as_array().cloned().unwrap_or_default();
        let chains = v["chains"].as_array().cloned().unwrap_or_default();
        for r in rows.iter().chain(chains.iter()) {
            let named = [&r["id"], &r["chain"], &r["slurm_job_id"]];
            assert!(
                !named
                    .iter()
                    .any(|x| **x == alice_chain.as_str() || **x == alice_job.as_str()),
                "bob {args:?} sees alice's chain: {r:#}"
            );
        }
    }
    // Her script: the snapshots are gone once sbatch has its copy, and the folder is
    // closed to others anyway.
    let scripts = d.state_dir().join("scripts");
    assert_eq!(
        std::fs::read_dir(&scripts).unwrap().count(),
        0,
        "snapshots left behind"
    );
    let ls = Command::new("runuser")
        .args(["-u", "bob", "--", "ls"])
        .arg(&scripts)
        .output()
        .unwrap();
    assert!(!ls.status.success(), "bob can list the snapshot folder");
    let cat = Command::new("runuser")
        .args(["-u", "bob", "--", "cat"])
        .arg(&alice_out)
        .output()
        .unwrap();
    assert!(
        !cat.status.success(),
        "the test's own premise: bob cannot read alice's output"
    );

    // MCP, as bob's agent would: every tool that takes an id, for real.
    let python = mcp_python();
    let probe = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/probe.py");
    let copy = d.dir.path().join("probe.py");
    std::fs::copy(&probe, &copy).unwrap();
    chmod(&copy, 0o755);
    let out = Command::new("runuser")
        .args(["-u", "bob", "--"])
        .arg(&python)
        .arg(&copy)
        .arg(&ctl)
        .arg(&config)
        .args(ids)
        .current_dir(&bob)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the MCP probe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains(secret),
        "bob's agent got alice's data: {text}"
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for id in ids {
        for (tool, r) in v["ids"][id].as_object().unwrap() {
            let failed = r["is_error"] == true
                || r["structured"]["results"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().all(|x| x["ok"] == false));
            assert!(failed, "bob's {tool} on {id} was not refused: {r:#}");
        }
    }
    // Nothing of alice's changed.
    let after = d.history(&alice_chain);
    assert_eq!(after["decisions"], before["decisions"]);
    assert_eq!(d.status(&alice_chain)[0]["state"], "pending_failed");
}

#[test]
fn a_root_daemon_acts_for_each_user_as_that_user() {
    require_slurm();
    ensure_user("alice");
    let (d, ctl) = root_daemon("ssv-system-", TRANSIENT_RULE);
    let config = d.config.clone();

    let home = d.dir.path().join("alice");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(
        home.join("job.sh"),
        "#!/bin/bash\nid -un >> whoami.txt\nif [ ! -e once ]; then touch once; echo 'Connection refused' >&2; exit 1; fi\necho ok\n",
    )
    .unwrap();
    run("chown", &["-R", "alice:", home.to_str().unwrap()]);
    let out = as_alice(
        &ctl,
        &config,
        &home,
        &["submit", "--", "--job-name=ssv-alice", "job.sh"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let alice_job = String::from_utf8(out.stdout).unwrap().trim().to_string();

    // root's own chain, which alice must not see or touch.
    d.write_script("root.sh", "sleep 60");
    let root_job = d.submit(&["--job-name=ssv-root", "root.sh"]);
    let out = as_alice(&ctl, &config, &home, &["status", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows:#}");
    assert_eq!(rows[0]["slurm_job_id"], alice_job.as_str());
    assert_eq!(
        as_alice(&ctl, &config, &home, &["cancel", &root_job])
            .status
            .code(),
        Some(77)
    );
    assert_eq!(
        as_alice(&ctl, &config, &home, &["history", &root_job])
            .status
            .code(),
        Some(77)
    );

    d.wait_state(&alice_job, "completed", 3 * Duration::from_secs(60));
    let h = d.history(&alice_job);
    assert_eq!(h["attempts"].as_array().unwrap().len(), 2, "{h:#}");
    // Both attempts ran as alice, and Slurm has them as hers.
    assert_eq!(
        std::fs::read_to_string(home.join("whoami.txt")).unwrap(),
        "alice\nalice\n"
    );
    for a in h["attempts"].as_array().unwrap() {
        let user = run(
            "sacct",
            &[
                "--parsable2",
                "--noheader",
                "-X",
                "-j",
                a["slurm_job_id"].as_str().unwrap(),
                "--format=User",
            ],
        );
        assert_eq!(user.trim(), "alice", "{a}");
    }
    run("scancel", &[&root_job]);
}

/// Issue 21, item 1, on the real Slurm: Slurm takes a newline in a comment
/// (`scontrol update jobid=J comment=...` by the job's owner, confirmed on 22.05 and 24.11:
/// squeue and sacct print it as is). bob writes rows about alice's running job into his own
/// supervised job's comment, and his job ends, so the poll's sacct is asked about it too.
/// alice's job is not judged, not resubmitted, and runs on as hers.
#[test]
fn a_newline_in_bobs_comment_forges_nothing_about_alices_job_on_real_slurm() {
    require_slurm();
    ensure_user("alice");
    ensure_user("bob");
    let (d, ctl) = root_daemon("ssv-forge-", "");
    let config = d.config.clone();
    // Long enough that alice's job is still running whatever the queue makes bob's wait
    // (both are cancelled at the end).
    let alice_home = home_of(&d, "alice", "#!/bin/bash\nsleep 600\n");
    let bob_home = home_of(&d, "bob", "#!/bin/bash\nsleep 600\n");
    let submit = |user: &str, home: &Path| {
        let out = as_user(
            user,
            &ctl,
            &config,
            home,
            &["submit", "--", "--job-name=ssv-forge", "job.sh"],
        );
        assert!(
            out.status.success(),
            "{user}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let a = submit("alice", &alice_home);
    let b = submit("bob", &bob_home);
    // Cancelled however the test ends: a failed check must not leave two ten-minute jobs
    // holding the cluster's CPUs from the other tests.
    struct Cancel<'a>(&'a [&'a str]);
    impl Drop for Cancel<'_> {
        fn drop(&mut self) {
            let _ = slurm("scancel").args(self.0).output();
        }
    }
    let _cancel = Cancel(&[&a, &b]);
    let alice_uid = run("id", &["-u", "alice"]).trim().to_string();
    wait_for("both jobs running", Duration::from_secs(300), || {
        d.status(&a)[0]["slurm_state"] == "RUNNING" && d.status(&b)[0]["slurm_state"] == "RUNNING"
    });
    let forged = format!(
        "mine\n{a}|{a}|FAILED|None|n1|{alice_uid}\n\
         {a}|{a}|OUT_OF_MEMORY|0:125|n1||100M|00:10:00|00:00:05|debug|{alice_uid}|1795611422\n\
         {a}|{a}|OUT_OF_MEMORY|0:125|n1||100M|00:10:00|00:00:05|debug|forged"
    );
    // As bob, with Slurm's own scontrol: Slurm accepts it.
    let out = Command::new("runuser")
        .args(["-u", "bob", "--"])
        .arg(slurm_cmd("scontrol"))
        .args([
            "update",
            &format!("jobid={b}"),
            &format!("comment={forged}"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scontrol update comment as bob: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = run("squeue", &["--noheader", "-j", &b, "-o", "%k"]);
    assert!(
        shown.lines().count() > 1,
        "Slurm {} no longer prints a comment's newline as is: {shown:?}",
        slurm_version()
    );
    let cancel = Command::new("runuser")
        .args(["-u", "bob", "--"])
        .arg(slurm_cmd("scancel"))
        .arg(&b)
        .output()
        .unwrap();
    assert!(cancel.status.success());
    // bob's chain is recorded cancelled from the poll's sacct answer about his job: the
    // answer that, with the comment in it, held the forged rows, judged in the same cycle.
    d.wait_state(&b, "cancelled", Duration::from_secs(120));
    let h = d.history(&a);
    assert_eq!(h["state"], "active", "alice's job was judged: {h:#}");
    assert!(decisions(&h).is_empty(), "{h:#}");
    assert_eq!(attempts(&h).len(), 1, "{h:#}");
    assert_eq!(
        run("squeue", &["--noheader", "-j", &a, "-o", "%T"]).trim(),
        "RUNNING"
    );
    let _ = as_user("alice", &ctl, &config, &alice_home, &["cancel", &a]);
}

/// Issue 21, items 2 and 3, on the real Slurm: in `scontrol show job` the owner's own text
/// (job name, comment, command, paths) sits among the keys, so bob could write
/// ` UserId=root(0)` there and a root `adopt` took the owner from it: his script would
/// have been retried as root. The owner now comes from squeue's `%U` and the user name
/// from that uid's account; a record that names a key twice is refused; and a plain job
/// of bob's adopted by root is bob's, under his own name.
#[test]
fn adopt_takes_the_owner_from_slurm_never_from_the_jobs_text() {
    require_slurm();
    ensure_user("bob");
    ensure_user("alice");
    let (d, ctl) = root_daemon("ssv-adopt-owner-", "");
    let config = d.config.clone();
    let home = home_of(&d, "bob", "#!/bin/bash\nsleep 120\n");
    let plain = |opts: &[&str]| -> String {
        let out = Command::new("runuser")
            .args(["-u", "bob", "--"])
            .arg(slurm_cmd("sbatch"))
            .args(["--parsable", "-o", "/dev/null"])
            .args(opts)
            .arg("job.sh")
            .current_dir(&home)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "bob's sbatch {opts:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let forged_comment = plain(&["--comment=mine UserId=root(0) GroupId=root(0)"]);
    let forged_name = plain(&["--job-name=x UserId=root(0)"]);
    let honest = plain(&["--job-name=ssv-bobs"]);
    for job in [&forged_comment, &forged_name] {
        let out = d.ctl(&["adopt", job]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "root adopted {job}: {err}");
        assert!(err.contains("UserId= twice"), "{err}");
    }
    let out = d.ctl(&["adopt", &honest]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // bob's, and he sees it as his; root's adopt did not make it root's.
    let rows = as_user("bob", &ctl, &config, &home, &["status", "--json", &honest]);
    assert!(
        rows.status.success(),
        "bob cannot see the chain of his own job: {}",
        String::from_utf8_lossy(&rows.stderr)
    );
    let alices = as_user("alice", &ctl, &config, Path::new("/"), &["status", &honest]);
    assert_eq!(
        alices.status.code(),
        Some(77),
        "alice sees bob's adopted chain"
    );
    for job in [&forged_comment, &forged_name, &honest] {
        let _ = slurm("scancel").arg(job.as_str()).output();
    }
}

/// The system-wide unit's `CapabilityBoundingSet=` is all a root daemon needs: under
/// exactly that set (`setpriv --bounding-set`, as systemd applies it), alice's job that
/// fails once with a transient error is read as evidence, retried as her with her script
/// snapshot, and completes.
#[test]
fn the_units_capability_bounding_set_is_enough_for_the_root_daemon() {
    require_slurm();
    ensure_user("alice");
    let unit = std::fs::read_to_string(format!(
        "{}/systemd/slurm-supervisord.service",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let caps: Vec<String> = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit sets CapabilityBoundingSet=")
        .split_whitespace()
        .map(|c| c.to_lowercase())
        .collect();
    let set = std::iter::once("-all".to_string())
        .chain(
            caps.iter()
                .map(|c| format!("+{}", c.trim_start_matches("cap_"))),
        )
        .collect::<Vec<_>>()
        .join(",");
    let (mut d, ctl) = root_daemon_under(
        "ssv-caps-",
        TRANSIENT_RULE,
        &["setpriv", "--bounding-set", &set, "--"],
    );
    // The daemon really runs with that bounding set.
    let pid = d.child.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let bnd = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    // capability(7) numbers: the bit of each in CapBnd.
    let bits = [
        "cap_chown",
        "cap_dac_override",
        "cap_dac_read_search",
        "cap_fowner",
        "cap_fsetid",
        "cap_kill",
        "cap_setgid",
        "cap_setuid",
    ];
    let want: u64 = caps
        .iter()
        .map(|c| {
            1u64 << bits
                .iter()
                .position(|n| n == c)
                .expect("a known capability")
        })
        .sum();
    assert_eq!(bnd, want, "the daemon's CapBnd is {bnd:#x}, not {want:#x}");
    let config = d.config.clone();
    let home = home_of(
        &d,
        "alice",
        "#!/bin/bash\nif [ ! -e once ]; then touch once; echo 'Connection refused' >&2; exit 1; fi\necho ok\n",
    );
    let out = as_alice(
        &ctl,
        &config,
        &home,
        &["submit", "--", "--job-name=ssv-caps", "job.sh"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = String::from_utf8(out.stdout).unwrap().trim().to_string();
    d.wait_state(&job, "completed", 3 * Duration::from_secs(60));
    let h = d.history(&job);
    assert_eq!(attempts(&h).len(), 2, "{h:#}");
    assert_eq!(decisions(&h)[0]["classification"], "transient", "{h:#}");
    assert!(
        !d.log().contains("Operation not permitted"),
        "{}",
        tail(&d.log(), 40)
    );
    assert!(d.stop().success(), "{}", tail(&d.log(), 40));
}

/// Network clients against the real Slurm (issue 24): the root daemon listens on loopback
/// (`[server] listen`) with a private munged (tests/common/munged.rs); alice, with a
/// client config that lists it, submits, follows, classifies and cancels over TCP, and
/// every Slurm command still runs as her. (The two-login-node path runs with the fake
/// Slurm in tests/net.rs: a network namespace cannot reach this cluster's controller.)
#[test]
fn a_user_submits_follows_classifies_and_cancels_over_the_network() {
    require_slurm();
    ensure_user("alice");
    ensure_user("bob");
    let munged = common::munged::Munged::start();
    let port = (20_000..30_000)
        .map(|p| p + (std::process::id() % 500) as u16 * 13 % 10_000)
        .find(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        .expect("a free port");
    let socket = munged.socket().display().to_string();
    let (d, ctl) = root_daemon(
        "ssv-net-",
        &format!("[server]\nlisten = \"127.0.0.1:{port}\"\nmunge_socket = {socket:?}\n"),
    );
    let client = d.dir.path().join("client.toml");
    std::fs::write(
        &client,
        format!("[client]\nservers = [\"127.0.0.1:{port}\"]\nmunge_socket = {socket:?}\n"),
    )
    .unwrap();
    chmod(&client, 0o644);
    let alice = home_of(
        &d,
        "alice",
        "#!/bin/bash\necho 'not a known failure' >&2\nexit 3\n",
    );
    std::fs::write(alice.join("long.sh"), "#!/bin/bash\nsleep 600\n").unwrap();
    run(
        "chown",
        &["alice:", alice.join("long.sh").to_str().unwrap()],
    );
    // Exit 1 is a read's answer about a failed chain.
    let ok = |user: &str, args: &[&str]| {
        let out = as_user(user, &ctl, &client, &alice, args);
        assert!(
            matches!(out.status.code(), Some(0 | 1)) && !out.stdout.is_empty(),
            "{user} {args:?} over the network: {}\nlog:\n{}",
            String::from_utf8_lossy(&out.stderr),
            tail(&d.log(), 30)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let job = ok("alice", &["submit", "--", "--job-name=ssv-net", "job.sh"])
        .trim()
        .to_string();
    // Ambiguous: waits for a decision, which alice makes over the network.
    d.wait_state(&job, "pending_failed", Duration::from_secs(180));
    let pending: serde_json::Value =
        serde_json::from_str(&ok("alice", &["pending", "--json"])).unwrap();
    assert_eq!(pending[0]["slurm_job_id"], job.as_str(), "{pending}");
    ok(
        "alice",
        &[
            "classify",
            &job,
            "--action",
            "fail",
            "--reason",
            "from login2",
        ],
    );
    let status: serde_json::Value =
        serde_json::from_str(&ok("alice", &["status", "--json", &job])).unwrap();
    assert_eq!(status[0]["state"], "failed", "{status}");
    let history: serde_json::Value =
        serde_json::from_str(&ok("alice", &["history", "--json", &job])).unwrap();
    assert!(
        decisions(&history).iter().any(|d| d["reason"]
            .as_str()
            .is_some_and(|r| r.contains("from login2"))),
        "{history}"
    );
    // A long job, cancelled over the network: Slurm's accounting says so.
    let long = ok(
        "alice",
        &["submit", "--", "--job-name=ssv-net-long", "long.sh"],
    )
    .trim()
    .to_string();
    wait_for(
        "Slurm's accounting to show the job as alice's",
        Duration::from_secs(60),
        || sacct_field(&long, "User").trim() == "alice",
    );
    ok("alice", &["cancel", &long]);
    wait_for("Slurm to say cancelled", Duration::from_secs(60), || {
        sacct_state(&long).starts_with("CANCELLED")
    });
    // bob over the network: none of it.
    let out = as_user(
        "bob",
        &ctl,
        &client,
        d.dir.path(),
        &["history", "--json", &job],
    );
    assert_eq!(out.status.code(), Some(77), "{out:?}");
}
