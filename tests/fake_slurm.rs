//! End-to-end tests with fake Slurm commands (tests/fake-slurm/fake_slurm.py): the
//! daemon and supervisorctl run for real, Slurm is scripted. Covers what a real Slurm
//! cannot be made to do on demand: garbage output, outages, lost sbatch replies, crashes
//! at named points, bad config.

mod common;

use common::fake::{start, wait_until};
use common::*;
use std::process::Command;
use std::time::Duration;

#[test]
fn a_retry_is_submitted_with_more_memory_through_the_fake() {
    let (d, fake) = start("", &[]);
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&[
        "--mem=100M",
        "--job-name=it's \"quoted\" $(rm -rf /)",
        "job.sh",
        "arg with space",
    ]);
    fake.ctl(&[
        "finish",
        &job,
        "FAILED",
        "0:9",
        "slurmstepd: error: Exceeded job memory limit\n",
    ]);
    wait_until("a second sbatch", Duration::from_secs(20), || {
        fake.sbatch_calls().len() == 2
    });
    let calls = fake.sbatch_calls();
    let argv: Vec<String> = serde_json::from_value(calls[1]["argv"].clone()).unwrap();
    // The user's options survive byte for byte; memory is overridden; the script args stay.
    assert!(
        argv.contains(&"--job-name=it's \"quoted\" $(rm -rf /)".to_string()),
        "{argv:?}"
    );
    assert!(
        argv.contains(&"--mem=328M".to_string())
            || argv
                .iter()
                .any(|a| a.starts_with("--mem=") && a != "--mem=100M"),
        "{argv:?}"
    );
    assert!(!argv.contains(&"--mem=100M".to_string()), "{argv:?}");
    assert_eq!(argv.last().unwrap(), "arg with space");
    let h = d.history(&job);
    assert_eq!(h["decisions"][0]["classification"], "oom");
}

#[test]
fn garbage_from_sacct_decides_nothing_until_sacct_makes_sense() {
    let (d, fake) = start("", &[]);
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["job.sh"]);
    fake.ctl(&["mode", "sacct", "garbage"]);
    fake.ctl(&["finish", &job, "FAILED", "1:0", "Connection refused\n"]);
    // Three cycles read the garbage (each asks sacct again), and decided nothing.
    let asked = fake.calls("sacct");
    wait_until(
        "three sacct calls answered with garbage",
        Duration::from_secs(30),
        || fake.calls("sacct") >= asked + 3,
    );
    assert_eq!(
        d.status(&job)[0]["state"],
        "active",
        "nothing may be decided from garbage"
    );
    assert!(d.log().contains("cannot be read"), "{}", d.log());
    fake.ctl(&["mode", "sacct", "ok"]);
    wait_until("the chain to be judged", Duration::from_secs(20), || {
        d.status(&job)[0]["last_classification"] == "transient"
    });
}

#[test]
fn an_outage_is_not_a_failure_and_is_logged_once() {
    let (d, fake) = start("", &[]);
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["job.sh"]);
    fake.ctl(&["mode", "squeue", "down"]);
    fake.ctl(&["mode", "sacct", "down"]);
    fake.ctl(&["finish", &job, "FAILED", "1:0"]);
    // Three cycles met the outage (each asks squeue, backing off), and it was logged once.
    let asked = fake.calls("squeue");
    wait_until(
        "three squeue calls during the outage",
        Duration::from_secs(60),
        || fake.calls("squeue") >= asked + 3,
    );
    assert_eq!(d.status(&job)[0]["state"], "active");
    let log = d.log();
    assert_eq!(log.matches("slurm is not answering").count(), 1, "{log}");
    fake.ctl(&["mode", "squeue", "ok"]);
    fake.ctl(&["mode", "sacct", "ok"]);
    wait_until("recovery after the outage", Duration::from_secs(60), || {
        d.status(&job)[0]["state"] == "pending_failed"
    });
    assert!(d.log().contains("slurm answers again"));
}

#[test]
fn an_sbatch_refusal_passes_through_and_keeps_nothing() {
    let (d, fake) = start("", &[]);
    d.write_script("job.sh", "echo hi");
    fake.ctl(&["mode", "sbatch", "reject"]);
    let out = d.ctl_in(
        &["submit", "--", "--partition=nope", "job.sh"],
        &d.work_dir(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid partition specified"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    assert_eq!(d.json(&["status", "--json"]), serde_json::json!([]));
}

#[test]
fn a_lost_sbatch_reply_is_found_by_its_tag_not_submitted_twice() {
    let (d, fake) = start("", &[]);
    d.write_script("job.sh", "echo hi");
    fake.ctl(&["mode", "sbatch", "lost-reply"]);
    let out = d.ctl_in(&["submit", "--", "job.sh"], &d.work_dir());
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fake.ctl(&["mode", "sbatch", "ok"]);
    wait_until("the launch to be adopted", Duration::from_secs(20), || {
        d.json(&["status", "--json"])
            .as_array()
            .is_some_and(|a| a.len() == 1 && a[0]["slurm_job_id"].is_string())
    });
    assert_eq!(
        fake.sbatch_calls().len(),
        1,
        "the job Slurm accepted must not be submitted again"
    );
}

#[test]
fn a_bad_config_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(
        &p,
        "poll_interval = \"2s\"\n[retry]\nmax_retries = \"lots\"\n",
    )
    .unwrap();
    let out = Command::new(CTL)
        .arg("--config")
        .arg(&p)
        .arg("validate")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:3:"), "{err}");
    let out = Command::new(DAEMON)
        .arg("--config")
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.toml:3:"));
    let out = Command::new(CTL)
        .arg("--config")
        .arg(dir.path().join("missing.toml"))
        .arg("status")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
}

/// `supervisorctl validate` is the daemon's own check (`slurm-supervisord --validate`, run
/// from beside it): it compiles the rules' stderr patterns, which the client does not.
#[test]
fn validate_compiles_the_rules_patterns_and_needs_the_daemon_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("rules.toml");
    // A socket of its own, so that `status` below finds no daemon whatever runs for $HOME.
    let socket = dir.path().join("none.sock");
    std::fs::write(
        &bad,
        format!(
            "socket = {:?}\n[[rules]]\nname = \"cuda\"\nkind = \"transient\"\nstderr = \"CUDA (error\"\n",
            socket.to_str().unwrap()
        ),
    )
    .unwrap();
    // `ctl` run in the test's folder, with no config from the environment.
    let run = |ctl: &std::path::Path, args: &[&std::ffi::OsStr]| {
        Command::new(ctl)
            .args(args)
            .current_dir(dir.path())
            .env_remove("SLURM_SUPERVISOR_CONFIG")
            .output()
            .unwrap()
    };
    let validate = |ctl: &std::path::Path, config: &std::path::Path| {
        run(
            ctl,
            &["--config".as_ref(), config.as_os_str(), "validate".as_ref()],
        )
    };
    let out = validate(CTL.as_ref(), &bad);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(
        err.contains("rules.toml:5:") && err.contains("invalid stderr regex"),
        "{err}"
    );
    // The other commands read the same file without compiling the pattern (the daemon
    // refuses to start or reload with it): no config error, only no daemon to ask.
    let out = run(
        CTL.as_ref(),
        &["--config".as_ref(), bad.as_os_str(), "status".as_ref()],
    );
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "[[rules]]\nname = \"cuda\"\nkind = \"transient\"\nstderr = \"CUDA error\"\n",
    )
    .unwrap();
    let out = validate(CTL.as_ref(), &good);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{}: ok (1 rules)", good.display())
    );
    // A path that begins with `-` (given as `--config=-x.toml`) is still the daemon's
    // `--config` value, not an option of its own.
    std::fs::copy(&good, dir.path().join("-x.toml")).unwrap();
    let out = run(
        CTL.as_ref(),
        &["--config=-x.toml".as_ref(), "validate".as_ref()],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "-x.toml: ok (1 rules)"
    );
    // A supervisorctl with no daemon beside it, or one it cannot run, says what to run
    // instead; that is no bad config (78, which scripts take as "fix the file") but an
    // internal error (70).
    let alone_dir = dir.path().join("alone");
    std::fs::create_dir(&alone_dir).unwrap();
    let alone = alone_dir.join("supervisorctl");
    copy_executable(std::path::Path::new(CTL), &alone);
    let out = validate(&alone, &good);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{err}");
    assert!(
        err.contains("slurm-supervisord --config FILE --validate")
            && err.contains(&format!(
                "{}",
                alone_dir.join("slurm-supervisord").display()
            )),
        "{err}"
    );
    let stuck = alone_dir.join("slurm-supervisord");
    std::fs::write(&stuck, "not a program").unwrap();
    let out = validate(&alone, &good);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{err}");
    assert!(
        err.contains("cannot be run") && err.contains("slurm-supervisord --config FILE --validate"),
        "{err}"
    );
}

/// Two costs every start of every `supervisorctl` command would pay (docs/benchmarks.md,
/// (6)): relocating the regex engine's Unicode tables, and loading libgcc_s.so.1, whose
/// constructor probes the CPU. Read from the binaries' symbol tables and dynamic sections.
#[test]
fn the_client_links_no_regex_engine_and_no_libgcc_s() {
    let run = |tool: &str, args: &[&str], bin: &str| {
        let out = Command::new(tool)
            .args(args)
            .arg(bin)
            .output()
            .unwrap_or_else(|e| panic!("{tool} (binutils) runs: {e}"));
        assert!(
            out.status.success(),
            "{tool} {bin}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The regex parser (the daemon: about a thousand symbols; the client: none).
    let engine = |bin: &str| {
        run("nm", &["--demangle"], bin)
            .lines()
            .filter(|l| {
                l.contains("regex_syntax::ast::parse::")
                    || l.contains("regex_syntax::hir::translate::")
            })
            .count()
    };
    // The daemon compiles rules, so it has it; were it not so, this test could not fail.
    assert!(engine(DAEMON) > 0);
    assert_eq!(
        engine(CTL),
        0,
        "supervisorctl links the regex engine (through Config::parse?): use ClientConfig"
    );
    let needed = |bin: &str| -> Vec<String> {
        run("readelf", &["--dynamic"], bin)
            .lines()
            .filter(|l| l.contains("(NEEDED)"))
            .map(str::to_string)
            .collect()
    };
    let ctl = needed(CTL);
    assert!(ctl.iter().any(|l| l.contains("libc.so")), "{ctl:?}");
    assert!(
        !ctl.iter().any(|l| l.contains("libgcc_s")),
        "supervisorctl loads libgcc_s: {ctl:?}"
    );
}

/// The signal handlers are installed before the socket exists: a SIGTERM the moment the
/// socket appears (a stop during start-up, `systemctl stop` right after start) ends the
/// daemon cleanly, never by the signal's default action. Before, they were installed by a
/// task that first ran when the loop first gave way, after the socket answered and the
/// first cycle ran (`tests/package.rs` stops a daemon as soon as it answers). Ten starts,
/// each stopped the moment its socket is bound.
#[test]
fn a_sigterm_as_soon_as_the_socket_exists_stops_cleanly() {
    use std::os::unix::process::ExitStatusExt;
    let (mut d, _fake) = start("", &[]);
    assert!(d.stop().success());
    let socket = d.state_dir().join("supervisor.sock");
    for round in 0..10 {
        let _ = std::fs::remove_file(&socket);
        d.spawn_unwaited();
        let child = d.child.as_mut().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        // Spins, not sleeps (the signal must come as soon as the socket is bound; a
        // yielding loop let the daemon past its start-up in three rounds of four, on a
        // busy machine): for the few milliseconds the daemon takes to bind.
        while std::fs::symlink_metadata(&socket).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "round {round}: the daemon exited early ({status}):\n{}",
                    d.log()
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: no socket within 60 s:\n{}",
                d.log()
            );
            std::hint::spin_loop();
        }
        let status = d.stop();
        assert!(
            status.success(),
            "round {round}: a SIGTERM as the socket appeared ended the daemon with {status} (signal {:?}):\n{}",
            status.signal(),
            tail(&d.log(), 30)
        );
    }
}

#[test]
fn sighup_reloads_and_a_bad_reload_keeps_the_old_config() {
    let (d, _fake) = start("", &[]);
    let pid = d.child.as_ref().unwrap().id() as i32;
    let good = std::fs::read_to_string(&d.config).unwrap();
    std::fs::write(
        &d.config,
        format!("{good}\n[[rules]]\nname = \"broken\"\nkind = \"transient\"\nstderr = \"(\"\n"),
    )
    .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    wait_until("the refusal", Duration::from_secs(10), || {
        d.log().contains("new config refused")
    });
    std::fs::write(&d.config, &good).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    wait_until("the reload", Duration::from_secs(10), || {
        d.log().contains("config reloaded")
    });
    assert!(d.ctl(&["status"]).status.success());
}

#[test]
fn recover_dry_run_shows_the_exact_sbatch_then_recover_runs_it() {
    let (d, fake) = start(
        "[[rules]]\nname = \"perm\"\nkind = \"permanent\"\nexit_codes = [2]\n",
        &[],
    );
    d.write_script("job.sh", "#SBATCH --comment='from the script'\necho hi");
    let job = d.submit(&["--time=10", "job.sh", "x y"]);
    fake.ctl(&["finish", &job, "FAILED", "2:0"]);
    wait_until("failed", Duration::from_secs(20), || {
        d.status(&job)[0]["state"] == "failed"
    });
    let out = d.ctl(&[
        "recover",
        &job,
        "--mem",
        "2G",
        "--time",
        "1:00:00",
        "--dry-run",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = String::from_utf8(out.stdout).unwrap();
    // The user's --time=10 gives way to the new limit; everything else is theirs.
    assert!(
        shown.contains("sbatch --mem=2048M --time=01:00:00 "),
        "{shown}"
    );
    assert!(!shown.contains("--time=10"), "{shown}");
    assert!(
        shown.contains("'--comment=from the script <tag assigned at launch>'"),
        "{shown}"
    );
    assert!(shown.trim_end().ends_with("job.sh 'x y')"), "{shown}");
    assert_eq!(fake.sbatch_calls().len(), 1, "a dry run submits nothing");
    let out = d.ctl(&["recover", &job, "--mem", "2G"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the recovery sbatch", Duration::from_secs(20), || {
        fake.sbatch_calls().len() == 2
    });
    let argv: Vec<String> = serde_json::from_value(fake.sbatch_calls()[1]["argv"].clone()).unwrap();
    assert!(argv.contains(&"--mem=2048M".to_string()), "{argv:?}");
    assert!(
        argv.iter()
            .any(|a| a.starts_with("--comment=from the script ssv-")),
        "{argv:?}"
    );
    let h = d.history(&job);
    let last = h["decisions"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (
            last["class"].as_str(),
            last["action"].as_str(),
            last["reason_code"].as_str(),
            last["reason"].as_str()
        ),
        (
            Some("R2"),
            Some("resubmit"),
            Some("recover"),
            Some("manual recover")
        )
    );
    // Only failed or pending_failed chains can be recovered.
    assert_eq!(d.ctl(&["recover", &job]).status.code(), Some(4));
}

#[test]
fn a_failed_chain_names_the_jobs_that_depend_on_it() {
    let (d, fake) = start(
        "[[rules]]\nname = \"perm\"\nkind = \"permanent\"\nexit_codes = [2]\n",
        &[],
    );
    d.write_script("job.sh", "echo hi");
    let a = d.submit(&["--mem=300M", "job.sh"]);
    let b = d.submit(&[&format!("--dependency=afterok:{a}"), "job.sh"]);
    fake.ctl(&["finish", &a, "FAILED", "2:0"]);
    wait_until("a to fail", Duration::from_secs(20), || {
        d.status(&a)[0]["state"] == "failed"
    });
    let h = d.history(&a);
    let b_chain = d.status(&b)[0]["id"].clone();
    assert_eq!(
        h["decisions"][0]["inputs"]["dependents"],
        serde_json::json!([b_chain]),
        "{h:#}"
    );
    assert_eq!(
        d.status(&b)[0]["dependency_failed"],
        serde_json::json!([h["id"]])
    );
    // The evidence of a waiting chain shows what it used against what it asked for.
    fake.ctl(&["finish", &b, "FAILED", "1:0", "odd\n"]);
    wait_until("b to wait", Duration::from_secs(20), || {
        d.status(&b)[0]["state"] == "pending_failed"
    });
    let p = d.json(&["pending", "--json"]);
    let usage = &p[0]["evidence"]["usage"];
    assert_eq!(usage["mem_requested_bytes"], 100 << 20, "{p:#}");
    assert_eq!(usage["max_rss_bytes"], 262144 << 10, "{p:#}");
    assert_eq!(usage["time_limit_secs"], 600);
}

#[test]
fn systemd_hears_ready_after_the_first_cycle_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let (mut d, _fake) = start("", &[("NOTIFY_SOCKET", sock_path.to_str().unwrap())]);
    let mut buf = [0u8; 64];
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1");
    assert!(d.stop().success(), "a clean exit on SIGTERM");
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"STOPPING=1");
    assert!(
        !d.state_dir().join("supervisor.sock").exists(),
        "the socket is removed"
    );
}

#[test]
fn a_job_slurm_lost_is_escalated_not_guessed() {
    let (d, fake) = start("lost_job_after = \"3s\"\n", &[]);
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["job.sh"]);
    fake.ctl(&["lose", &job]);
    wait_until("the escalation", Duration::from_secs(30), || {
        d.status(&job)[0]["state"] == "pending_failed"
    });
    let h = d.history(&job);
    assert_eq!(h["attempts"][0]["slurm_state"], "LOST", "{h:#}");
    let dec = &h["decisions"][0];
    assert_eq!(
        (dec["class"].as_str(), dec["action"].as_str()),
        (Some("R2"), Some("escalate"))
    );
    assert_eq!(dec["reason_code"], "job_lost", "{h:#}");
    assert_eq!(fake.sbatch_calls().len(), 1, "nothing resubmitted");
}

#[test]
fn a_clean_stop_leaves_the_store_in_one_file() {
    let (mut d, _fake) = start("", &[]);
    d.submit(&["--wrap", "true"]);
    // A read keeps a read-only connection open in the daemon until it stops.
    assert!(d.ctl(&["status", "--json"]).status.success());
    assert!(d.stop().success());
    let wal = d.state_dir().join("supervisor.db-wal");
    let left = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(left, 0, "everything committed is in supervisor.db itself");
}

/// A submission whose working directory does not exist on the daemon's node (it came from
/// another login node, over the network in cluster mode) is refused before sbatch starts,
/// naming the directory and the node; nothing is submitted, anywhere.
#[test]
fn a_working_directory_the_daemons_node_lacks_is_refused_naming_it_and_the_node() {
    use std::io::{BufRead, Write};
    let (d, fake) = start("", &[]);
    let missing = d.dir.path().join("on-login2-only");
    let request = serde_json::json!({
        "cmd": "submit",
        "argv": ["--wrap=true"],
        "cwd": missing.display().to_string(),
        "env": [],
        "max_retries": null,
    });
    // The default socket, in the state directory (`start` names none).
    let mut socket =
        std::os::unix::net::UnixStream::connect(d.state_dir().join("supervisor.sock")).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    writeln!(socket, "{request}").unwrap();
    socket.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    std::io::BufReader::new(socket)
        .read_line(&mut answer)
        .unwrap();
    let host = nix::unistd::gethostname().unwrap();
    assert!(
        answer.contains(&format!(
            "the working directory {} does not exist on {}",
            missing.display(),
            host.to_string_lossy()
        )),
        "{answer}"
    );
    assert!(fake.sbatch_calls().is_empty(), "{:?}", fake.sbatch_calls());
    let all = d.json(&["status", "--json"]);
    assert_eq!(all, serde_json::json!([]), "a chain was kept");
}

/// `supervisorctl cluster` on a single node says so (cluster mode's view is
/// tests/real_slurm_cluster.rs's).
#[test]
fn cluster_on_a_single_node_says_it_always_acts() {
    let (d, _fake) = start("", &[]);
    let out = d.ctl(&["cluster"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("single node: the daemon on "), "{text}");
    let v = d.json(&["cluster", "--json"]);
    assert_eq!(v["mode"], "single");
    assert_eq!(v["lease"], serde_json::Value::Null);
    assert_eq!(v["nodes"], serde_json::json!([]));
}

/// A submit's intent is committed (synced: docs/guarantees.md) before its sbatch runs,
/// so a daemon that dies meanwhile finds the job by its tag; the job sbatch answered is
/// committed before the client is told, so `status JOBID` right after finds its chain.
#[test]
fn a_submits_intent_is_committed_before_its_sbatch_runs_and_its_job_before_the_answer() {
    let (d, fake) = start("", &[]);
    // The sbatch waits at a gate until the intent has been looked at.
    let gate = fake.gate("submit");
    let slow = Command::new(CTL)
        .arg("--config")
        .arg(&d.config)
        .args(["submit", "--", "--wrap", "true"])
        .current_dir(d.work_dir())
        .env("SSV_FAKE_SBATCH_GATE", &gate)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(
        "the submit's sbatch to start",
        Duration::from_secs(30),
        || fake.sbatch_calls().len() == 1,
    );
    let reader =
        slurm_supervisor::store::Store::open_reader(&d.state_dir().join("supervisor.db")).unwrap();
    let open = reader.open_launches().unwrap();
    assert_eq!(open.len(), 1, "the intent is committed while sbatch runs");
    let argv = fake.sbatch_calls()[0]["argv"].to_string();
    assert!(
        argv.contains(&open[0].tag),
        "{argv} carries {}",
        open[0].tag
    );
    fake.open(&gate);
    let out = slow.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(reader.open_launches().unwrap().is_empty(), "landed");
    assert_eq!(
        reader.resolve(&job).unwrap().len(),
        1,
        "recorded before the answer"
    );
    assert_eq!(d.status(&job).len(), 1);
}

/// A cycle's squeue runs beside the loop (issue 32: at 100,000 live jobs a submit waited
/// for the cycle's squeue and the reading of its listing): a submit is answered while the
/// cycle's squeue has not answered yet, no other cycle starts meanwhile, and the cycle
/// ends when the squeue is given up on.
#[test]
fn a_submit_is_answered_while_the_cycles_squeue_has_not_answered() {
    let root = tempfile::Builder::new()
        .prefix("ssv-fake-")
        .tempdir_in(scratch_root())
        .unwrap()
        .keep();
    let fake = common::fake::Fake::new(&root);
    // A squeue that does not answer is given up on after 15 s: longer than any submit.
    let d = Daemon::start(&format!(
        "[slurm]\nbin_dir = {:?}\ncommand_timeout = \"15s\"\nsbatch_timeout = \"10s\"\n",
        fake.bin.display().to_string()
    ));
    d.write_script("job.sh", "echo hi");
    // The daemon's first squeue stops itself once it is logged (as a user may stop their
    // own process), before it takes the fake's lock: it answers nothing until it is killed.
    // The first: the listing of the first cycle with a live job (its owner not seen yet), so
    // its loss is an outage; a later cycle's would be the state-only query, which a full
    // listing follows at once (`PollAsk::ask`; a CI run stopped that one, and waited for an
    // outage that never came).
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .map_or_else(|| nix::unistd::getuid().to_string(), |u| u.name);
    // The pids of the daemon's squeue calls, in order.
    let squeues = || -> Vec<i64> {
        std::fs::read_to_string(fake.bin.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|c| c["cmd"] == "squeue")
            .filter_map(|c| c["pid"].as_i64())
            .collect()
    };
    let stopped = |pid: i64| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    };
    fake.ctl(&["mode", &format!("squeue@{me}"), "stop"]);
    let first = d.submit(&["job.sh"]);
    wait_until(
        "a cycle's squeue that does not answer",
        Duration::from_secs(20),
        || squeues().last().is_some_and(|&pid| stopped(pid)),
    );
    let calls = squeues().len();
    let second = d.submit(&["job.sh"]);
    assert_ne!(first, second);
    assert_eq!(
        squeues().len(),
        calls,
        "no other cycle started while the stopped squeue was out"
    );
    assert!(
        stopped(*squeues().last().unwrap()),
        "the squeue was still out when the submit was answered"
    );
    assert!(
        !d.log().contains("slurm is not answering"),
        "the submit waited for the cycle's squeue: {}",
        d.log()
    );
    // The stopped squeue is killed at its timeout (no answer: the cycle decides nothing),
    // and a later cycle's squeue answers.
    let stopped_pid = *squeues().last().unwrap();
    fake.ctl(&["mode", &format!("squeue@{me}"), "ok"]);
    wait_until(
        "the cycle after the squeue that did not answer",
        Duration::from_secs(60),
        || {
            let log = d.log();
            log.contains("slurm is not answering (squeue)") && log.contains("slurm answers again")
        },
    );
    assert!(!stopped(stopped_pid));
    assert!(squeues().len() > calls, "a later squeue was asked");
    let status = d.json(&["status", "--json"]);
    assert_eq!(status.as_array().map(Vec::len), Some(2), "{status}");
    assert!(
        status
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["state"] == "active"),
        "{status}"
    );
}

/// Review 20: with the loop on a runtime of its own, the listeners were made on the loop's
/// runtime, which drives them only when the loop gives way: while the loop waited on a
/// store write (another process held SQLite's write lock), no new connection was
/// accepted, and a `status` took as long as the wait. The listeners are now the worker
/// threads' own, and reads are answered throughout.
#[test]
fn reads_are_answered_while_the_loop_waits_on_the_store() {
    let (d, _fake) = start("", &[]);
    d.write_script("job.sh", "echo hi");
    // Another writer holds the store: the submit's intent waits for it, and so does the loop.
    let holder = rusqlite::Connection::open(d.state_dir().join("supervisor.db")).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (config, work) = (d.config.clone(), d.work_dir());
    let submit = std::thread::spawn(move || {
        Command::new(CTL)
            .arg("--config")
            .arg(&config)
            .args(["submit", "--", "job.sh"])
            .current_dir(&work)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    });
    // Reads for four seconds of the hold (the store waits up to ten for a lock).
    let (start, mut worst, mut reads) = (std::time::Instant::now(), Duration::ZERO, 0);
    while start.elapsed() < Duration::from_secs(4) {
        let t = std::time::Instant::now();
        let out = d.ctl(&["status", "--json"]);
        assert!(out.status.success(), "{out:?}");
        worst = worst.max(t.elapsed());
        reads += 1;
    }
    let waited = !submit.is_finished();
    holder.execute_batch("ROLLBACK").unwrap();
    assert!(
        worst < Duration::from_secs(2),
        "{reads} reads while the loop waited on the store, the slowest {worst:?}"
    );
    assert!(waited, "the submit did not wait for the store");
    let out = submit.join().unwrap();
    assert!(out.status.success(), "{out:?}");
}
