//! Cluster mode end to end (docs/cluster.md): two daemons, as on two login nodes, on one
//! real MariaDB (a private server, `tests/mariadb/mod.rs`) beside the dev cluster's real
//! Slurm. Exactly one acts; the other answers reads from its replica and refuses writes
//! naming the active node. The active one killed while its chain's job runs is replaced
//! within a lease and a poll, and the chain goes on to complete; the active one stopped
//! (SIGSTOP) past its lease and continued does not act again, and `supervisorctl cluster`
//! on either node shows who acts and each daemon's row. A held job nobody recorded is
//! cancelled, a recorded one left held released, each a decision on the chain, and an
//! owner's own hold left. Ground truth is Slurm's accounting: each attempt has exactly
//! one job.

mod common;
mod mariadb;

use common::{require_slurm, sacct_jobs_with_comment, wait_for, Daemon};
use mariadb::MariaDb;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const PASSWORD: &str = "cluster-test-pw";

/// A shared database, and the `[store]` section that names it.
struct Shared {
    server: MariaDb,
    password_file: PathBuf,
    url: String,
}

impl Shared {
    fn new() -> Shared {
        let server = MariaDb::start();
        let url = server.supervisor_database("supervisor", "ssv", PASSWORD);
        let password_file = server.dir().join("db-password");
        std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
        std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let url = format!(
            "mysql://{}@{}:{}/{}",
            url.user, url.host, url.port, url.database
        );
        Shared {
            server,
            password_file,
            url,
        }
    }

    /// A daemon of node `node` on this database: a 12 s lease (Slurm commands that change
    /// something may take 5 s), polling every second.
    fn daemon(&self, node: &str) -> Daemon {
        self.daemon_with(node, "", "")
    }

    /// [`Shared::daemon`] with more of `[slurm]` (`slurm`) and `extra` at the end of its
    /// config.
    fn daemon_with(&self, node: &str, slurm: &str, extra: &str) -> Daemon {
        Daemon::start(&format!(
            "[slurm]\n{slurm}command_timeout = \"5s\"\n[store]\nurl = {:?}\npassword_file = {:?}\nlease = \"12s\"\nmargin = \"1s\"\ntimeout = \"2s\"\nnode = {node:?}\n{extra}",
            self.url,
            self.password_file.display().to_string()
        ))
    }

    /// The store's instance: every job's tag names it.
    fn instance(&self) -> String {
        self.server
            .admin_sql("SELECT instance FROM supervisor.cluster")
    }

    /// Who holds the lease, by the server's clock.
    fn holder(&self) -> String {
        self.server.admin_sql(
            "SELECT COALESCE(holder, '') FROM supervisor.lease WHERE expires_at > UTC_TIMESTAMP(6)",
        )
    }
}

/// Slurm's commands behind wrappers that note each run (program and arguments, a line
/// each) in `log` and then run the real one: what a daemon ran, as a fact.
fn noting_bin_dir(dir: &Path, log: &Path) -> PathBuf {
    let real = common::slurm_bin_dir().unwrap_or_else(|| "/usr/bin".into());
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for cmd in ["sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo"] {
        common::write_executable(
            &bin.join(cmd),
            format!(
                "#!/bin/sh\necho \"{cmd} $*\" >> {log}\nexec {real}/{cmd} \"$@\"\n",
                log = log.display(),
                real = real.display()
            ),
        );
    }
    bin
}

/// Slurm's accounting holds exactly `n` jobs whose comment holds `needle`: waited for up to
/// a minute (slurmdbd may record a job's comment a moment after its state), then checked
/// once more, so a job too many is seen.
fn accounted(needle: &str, n: usize) {
    wait_for(
        &format!("{n} jobs with {needle} in accounting"),
        Duration::from_secs(60),
        || sacct_jobs_with_comment(needle).len() >= n,
    );
    let jobs = sacct_jobs_with_comment(needle);
    assert_eq!(jobs.len(), n, "{jobs:#?}");
}

fn active(d: &Daemon) -> bool {
    d.log().contains("this daemon is the active one now")
}

/// A script that fails the first time with an error a rule calls transient, once `go`
/// exists in `dir`, and completes the second time.
fn fail_once_when_told(d: &Daemon, dir: &Path) -> PathBuf {
    d.write_script(
        "once.sh",
        &format!(
            "while [ ! -e {dir}/go ]; do sleep 0.2; done\n\
             if [ -e {dir}/failed-once ]; then exit 0; fi\n\
             touch {dir}/failed-once\necho 'connection refused' >&2\nexit 1",
            dir = dir.display()
        ),
    )
}

#[test]
fn the_active_daemon_killed_mid_chain_is_replaced_and_the_chain_completes_with_one_job_per_attempt()
{
    require_slurm();
    let shared = Shared::new();
    let mut a = shared.daemon("loginA");
    wait_for("loginA to act", Duration::from_secs(30), || active(&a));
    let flags = tempfile::tempdir_in(common::scratch_root()).unwrap();
    let ran = flags.path().join("loginB-ran");
    let bin = noting_bin_dir(flags.path(), &ran);
    let b = shared.daemon_with(
        "loginB",
        &format!("bin_dir = {:?}\n", bin.display().to_string()),
        "",
    );
    assert!(
        shared.holder().starts_with("loginA:"),
        "{}",
        shared.holder()
    );

    let script = fail_once_when_told(&a, flags.path());
    let job = a.submit(&["--time=2", "--mem=50M", script.to_str().unwrap()]);
    a.wait_seen_running(&job, Duration::from_secs(120));

    // The standby answers reads from its replica, and refuses writes naming the active node.
    wait_for(
        "loginB's replica to show the chain",
        Duration::from_secs(30),
        || b.ctl(&["status", "--json", &job]).status.success(),
    );
    let refused = b.ctl(&["cancel", &job]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("the active daemon is on loginA"), "{said}");
    // The standby ran no Slurm command but the one that names the cluster, at its start.
    let standby_ran = std::fs::read_to_string(&ran).unwrap_or_default();
    assert_eq!(standby_ran.trim(), "scontrol show config", "{standby_ran}");

    // loginA dies; loginB takes over within the lease and a poll.
    a.kill();
    wait_for("loginB to take over", Duration::from_secs(30), || {
        active(&b)
    });
    std::fs::write(flags.path().join("go"), "").unwrap();
    let rows = b.wait_state(&job, "completed", Duration::from_secs(240));
    assert_eq!(rows.len(), 1);
    let h = b.history(&job);
    let attempts = common::attempts(&h);
    assert_eq!(attempts.len(), 2, "{h:#}");

    // Slurm's accounting: exactly one job for each attempt.
    accounted(&format!("ssv-{}-", shared.instance()), 2);
}

#[test]
fn an_active_daemon_stopped_past_its_lease_does_not_act_when_it_continues() {
    require_slurm();
    let shared = Shared::new();
    let a = shared.daemon("loginA");
    wait_for("loginA to act", Duration::from_secs(30), || active(&a));
    let b = shared.daemon("loginB");
    let pid = nix::unistd::Pid::from_raw(a.child.as_ref().unwrap().id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    wait_for("loginB to take over", Duration::from_secs(30), || {
        active(&b)
    });
    assert!(
        shared.holder().starts_with("loginB:"),
        "{}",
        shared.holder()
    );
    // What an admin sees on loginB: it acts; loginA, stopped, still says active in its
    // row, which nobody has written for more than a lease.
    wait_for(
        "loginB's view to show it active and loginA silent",
        Duration::from_secs(30),
        || {
            let v = b.json(&["cluster", "--json"]);
            v["lease"]["active_node"] == "loginB"
                && node(&v, "loginA")["silent"] == true
                && node(&v, "loginB")["role"] == "active"
        },
    );
    let v = b.json(&["cluster", "--json"]);
    assert_eq!(node(&v, "loginB")["this"], true);
    assert_eq!(node(&v, "loginB")["epoch"], v["lease"]["epoch"]);
    assert_eq!(node(&v, "loginA")["role"], "active", "{v}");
    let text = String::from_utf8_lossy(&b.ctl(&["cluster"]).stdout).into_owned();
    assert!(text.starts_with("active: loginB, epoch "), "{text}");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    wait_for("loginA to stand by", Duration::from_secs(30), || {
        a.log().contains("not the active one any more")
    });
    // The standby answers it too, and shows its own row as it is now.
    wait_for(
        "loginA's view to show it standing by and loginB active",
        Duration::from_secs(30),
        || {
            let v = a.json(&["cluster", "--json"]);
            v["lease"]["active_node"] == "loginB"
                && node(&v, "loginA")["role"] == "standby"
                && node(&v, "loginA")["this"] == true
                && node(&v, "loginB")["silent"] == false
        },
    );
    // loginA refuses writes and names loginB; loginB acts.
    let refused = a.ctl_in(&["submit", "--", "--wrap=true"], &a.work_dir());
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("the active daemon is on loginB"), "{said}");
    let job = b.submit(&["--time=1", "--mem=50M", "--wrap=true"]);
    b.wait_state(&job, "completed", Duration::from_secs(120));
    accounted(&format!("ssv-{}-", shared.instance()), 1);
}

/// The row of `name` in `supervisorctl cluster --json`'s answer (null until the answering
/// daemon has read a row of that node: the waits below go on waiting then).
fn node(v: &serde_json::Value, name: &str) -> serde_json::Value {
    v["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["node"] == name))
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

/// The tag of this store in `job`'s comment, as squeue shows it.
fn tag_of(shared: &Shared, job: &str) -> String {
    let comment = common::run("squeue", &["--noheader", "--jobs", job, "--format=%k"]);
    comment
        .split_whitespace()
        .find(|w| w.starts_with(&format!("ssv-{}-", shared.instance())))
        .unwrap_or_else(|| panic!("no tag in the job's comment {comment:?}"))
        .to_string()
}

/// What a deposed daemon leaves when its sbatch outlived its lease: a held job with a
/// launch's `tag` that nobody recorded. Its id.
fn stray_held(tag: &str) -> String {
    common::run(
        "sbatch",
        &[
            "--parsable",
            "--hold",
            "--time=1",
            "--mem=50M",
            &format!("--comment={tag}"),
            "--wrap=true",
        ],
    )
    .trim()
    .to_string()
}

/// What squeue says a job waits for (`%r`), empty once it is not pending.
fn reason(job: &str) -> String {
    common::run("squeue", &["--noheader", "--jobs", job, "--format=%T|%r"])
        .trim()
        .to_string()
}

#[test]
fn a_new_active_daemon_cancels_a_held_job_nobody_recorded_and_releases_a_recorded_one_left_held() {
    require_slurm();
    let shared = Shared::new();
    // The sweep releases a recorded job only while its launch is recent (sbatch_timeout
    // and two leases); later a hold is its owner's and is left without a word. Every wait
    // below together outlasts the default 60 s on a busy machine, so the launch is kept
    // recent for the whole test.
    let recent = "sbatch_timeout = \"600s\"\n";
    let mut a = shared.daemon_with("loginA", recent, "");
    wait_for("loginA to act", Duration::from_secs(30), || active(&a));
    let b = shared.daemon_with("loginB", recent, "");
    let script = a.write_script("sleepy.sh", "sleep 120");
    // Pending (it may start in an hour), so a hold keeps it from running.
    let job = a.submit(&[
        "--time=3",
        "--mem=50M",
        "--begin=now+1hour",
        script.to_str().unwrap(),
    ]);
    let tag = tag_of(&shared, &job);
    // What a deposed daemon leaves when its sbatch outlived its lease: a job with the
    // launch's tag, submitted held, that nobody recorded.
    let stray = stray_held(&tag);
    // And the recorded job held again, as when its release failed.
    common::run("scontrol", &["uhold", &job]);
    assert!(
        reason(&stray).ends_with("|JobHeldUser"),
        "{}",
        reason(&stray)
    );
    assert!(reason(&job).ends_with("|JobHeldUser"), "{}", reason(&job));

    a.kill();
    wait_for("loginB to take over", Duration::from_secs(30), || {
        active(&b)
    });
    wait_for(
        "the stray job to be cancelled",
        Duration::from_secs(60),
        || common::sacct_state(&stray).starts_with("CANCELLED"),
    );
    wait_for(
        "the recorded job to be released",
        Duration::from_secs(60),
        || !reason(&job).ends_with("|JobHeldUser"),
    );
    // Both are decisions on the chain, in its history.
    wait_for(
        "both decisions in the chain's history",
        Duration::from_secs(30),
        || {
            let h = b.history(&job);
            let has = |code: &str, j: &str| {
                h["decisions"].as_array().is_some_and(|d| {
                    d.iter()
                        .any(|d| d["reason_code"] == code && d["inputs"]["job"] == j)
                })
            };
            has("held_job_cancelled", &stray) && has("held_job_released", &job)
        },
    );
    // Its owner holds it now (Slurm shows the same JobHeldUser as a daemon's hold): the
    // next sweeps leave it held.
    common::run("scontrol", &["uhold", &job]);
    assert!(reason(&job).ends_with("|JobHeldUser"), "{}", reason(&job));
    wait_for(
        "a sweep to leave the owner's hold",
        Duration::from_secs(60),
        || b.log().contains("is held by its owner"),
    );
    assert!(reason(&job).ends_with("|JobHeldUser"), "{}", reason(&job));
    // The stray never ran.
    assert_eq!(
        common::sacct_field(&stray, "Elapsed"),
        "00:00:00",
        "{stray}"
    );
    let start = common::sacct_field(&stray, "Start");
    assert!(
        ["None", "Unknown"].contains(&start.as_str()),
        "{stray} started at {start}"
    );
    common::run("scancel", &[&job]);
}

/// A user's own hold in cluster mode (issue 32): the daemon submits every job held and
/// releases it after the fence, but not one its owner asked to be held (`--hold`), and the
/// sweep of held jobs leaves it too. A stray held job under the same tag, which the sweep
/// cancels, shows a sweep has looked at both. `SBATCH_HOLD=1` in the submitter's
/// environment is no hold: Slurm's sbatch does not read it, so that job runs, as the
/// user's own sbatch would have run it, and under the fence as any other.
#[test]
fn a_users_own_hold_is_kept_in_cluster_mode_and_sbatch_hold_is_no_hold() {
    require_slurm();
    let shared = Shared::new();
    let flags = tempfile::tempdir_in(common::scratch_root()).unwrap();
    let ran = flags.path().join("loginA-ran");
    let bin = noting_bin_dir(flags.path(), &ran);
    let a = shared.daemon_with(
        "loginA",
        &format!("bin_dir = {:?}\n", bin.display().to_string()),
        "",
    );
    wait_for("loginA to act", Duration::from_secs(30), || active(&a));
    let submit = |args: &[&str]| {
        let out = std::process::Command::new(common::CTL)
            .arg("--config")
            .arg(&a.config)
            .arg("submit")
            .arg("--")
            .args(args)
            .env("SBATCH_HOLD", "1")
            .current_dir(a.work_dir())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let held = submit(&["--hold", "--time=1", "--mem=50M", "--wrap=true"]);
    let runs = submit(&["--time=1", "--mem=50M", "--wrap=true"]);
    // Both were submitted held (the user's own --hold, the daemon's), and only the job
    // the user did not hold was released after the fence: SBATCH_HOLD took neither out
    // from under it.
    let log = std::fs::read_to_string(&ran).unwrap();
    let sbatches: Vec<&str> = log.lines().filter(|l| l.starts_with("sbatch ")).collect();
    assert_eq!(sbatches.len(), 2, "{log}");
    assert!(
        sbatches.iter().all(|l| l.split(' ').any(|a| a == "--hold")),
        "{log}"
    );
    let released = |job: &str| log.lines().any(|l| l == format!("scontrol release {job}"));
    assert!(released(&runs) && !released(&held), "{log}");
    assert!(reason(&held).ends_with("|JobHeldUser"), "{}", reason(&held));
    let tag = tag_of(&shared, &held);
    let stray = stray_held(&tag);
    wait_for(
        "a sweep to cancel the stray job",
        Duration::from_secs(60),
        || common::sacct_state(&stray).starts_with("CANCELLED"),
    );
    assert!(reason(&held).ends_with("|JobHeldUser"), "{}", reason(&held));
    assert_eq!(
        a.status(&held)[0]["state"],
        "active",
        "{:#}",
        a.history(&held)
    );
    a.wait_state(&runs, "completed", Duration::from_secs(120));
    common::run("scancel", &[&held]);
}

/// The hello of the daemon at `addr` (`protocol::net`).
fn hello(addr: &str) -> slurm_supervisor::protocol::net::Hello {
    use std::io::BufRead;
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut line = String::new();
    std::io::BufReader::new(s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

/// Network clients in cluster mode (issue 24): two daemons, nodes `127.0.0.1` and
/// `127.0.0.2`, each listening on its own loopback address and the same port with a private
/// munged. The standby's hello names the active daemon; a client whose list starts with the
/// standby is served by the active one; once the active one is killed and the standby
/// takes over, the same client is served by it.
#[test]
fn a_network_client_reaches_whichever_daemon_is_active() {
    require_slurm();
    let shared = Shared::new();
    let munged = common::munged::Munged::start();
    let probe = munged.client().encode(b"", None, None).unwrap();
    let origin = munged.client().decode(&probe).unwrap().origin;
    let port = (21_000..31_000)
        .map(|p| p + (std::process::id() % 500) as u16 * 17 % 10_000)
        .find(|&p| {
            ["127.0.0.1", "127.0.0.2"]
                .iter()
                .all(|ip| std::net::TcpListener::bind((*ip, p)).is_ok())
        })
        .expect("a free port");
    let socket = munged.socket().display().to_string();
    // The tests run as root: root of this host is listed.
    let server = |ip: &str| {
        format!(
            "[server]\nlisten = \"{ip}:{port}\"\nmunge_socket = {socket:?}\nroot_nodes = [\"{origin}\"]\n"
        )
    };
    let mut a = shared.daemon_with("127.0.0.1", "", &server("127.0.0.1"));
    wait_for("a to act", Duration::from_secs(60), || active(&a));
    let b = shared.daemon_with("127.0.0.2", "", &server("127.0.0.2"));
    let (at_a, at_b) = (format!("127.0.0.1:{port}"), format!("127.0.0.2:{port}"));
    wait_for("b's hello to name a", Duration::from_secs(30), || {
        let h = hello(&at_b);
        !h.active && h.active_at.as_deref() == Some(at_a.as_str())
    });
    assert!(hello(&at_a).active);
    let client = b.dir.path().join("client.toml");
    std::fs::write(
        &client,
        format!("[client]\nservers = [{at_b:?}, {at_a:?}]\nmunge_socket = {socket:?}\n"),
    )
    .unwrap();
    let status = |what: &str| {
        let out = std::process::Command::new(common::CTL)
            .arg("--config")
            .arg(&client)
            .args(["status", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    status("while a acts");
    assert!(a.log().contains("network request authenticated"));
    assert!(!b.log().contains("network request authenticated"));
    // a dies: b takes over, and the same client reaches it.
    a.kill();
    wait_for("b to act", Duration::from_secs(60), || active(&b));
    wait_for("b's hello to say active", Duration::from_secs(30), || {
        hello(&at_b).active
    });
    status("once b acts");
    assert!(b.log().contains("network request authenticated"));
}

#[test]
fn a_daemon_whose_database_does_not_answer_at_start_stands_by_on_its_replica_and_says_why() {
    require_slurm();
    let mut shared = Shared::new();
    let mut a = shared.daemon("loginA");
    wait_for("loginA to act", Duration::from_secs(30), || active(&a));
    let job = a.submit(&["--time=1", "--mem=50M", "--wrap=true"]);
    a.wait_state(&job, "completed", Duration::from_secs(120));
    assert!(a.stop().success());
    // The database stops answering; the daemon starts again on the replica it made.
    shared.server.stop();
    a.spawn();
    wait_for(
        "loginA to say why it stands by",
        Duration::from_secs(30),
        || a.log().contains("cannot reach the shared database"),
    );
    // Reads from the replica; writes refused, saying why.
    assert_eq!(a.status(&job)[0]["state"], "completed");
    let refused = a.ctl_in(&["submit", "--", "--wrap=true"], &a.work_dir());
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("not active, and no daemon acts right now (the shared database:"),
        "{said}"
    );
}

#[test]
fn a_daemon_without_a_replica_whose_database_does_not_answer_does_not_start_and_says_why() {
    require_slurm();
    // Nothing listens on this port: bound and closed by this test.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir_in(common::scratch_root()).unwrap();
    let password_file = dir.path().join("db-password");
    std::fs::write(&password_file, "pw\n").unwrap();
    std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {:?}\n[slurm]\nbin_dir = {:?}\ncommand_timeout = \"5s\"\n[store]\nurl = \"mysql://ssv@127.0.0.1:{port}/supervisor\"\npassword_file = {:?}\nlease = \"12s\"\nmargin = \"1s\"\ntimeout = \"2s\"\n",
            dir.path().join("state").display().to_string(),
            common::slurm_bin_dir()
                .unwrap_or_else(|| "/usr/bin".into())
                .display()
                .to_string(),
            password_file.display().to_string()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(common::DAEMON)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("cannot reach the shared database at 127.0.0.1")
            && said.contains("this node has no replica of it yet"),
        "{said}"
    );
}

#[test]
fn while_the_database_is_down_nobody_acts_and_afterwards_the_chain_goes_on_with_nothing_lost() {
    require_slurm();
    let mut shared = Shared::new();
    let a = shared.daemon("loginA");
    wait_for("loginA to act", Duration::from_secs(30), || active(&a));
    let b = shared.daemon("loginB");
    let flags = tempfile::tempdir_in(common::scratch_root()).unwrap();
    let script = fail_once_when_told(&a, flags.path());
    let job = a.submit(&["--time=2", "--mem=50M", script.to_str().unwrap()]);
    a.wait_seen_running(&job, Duration::from_secs(120));
    let tag = format!("ssv-{}-", shared.instance());

    shared.server.stop();
    // Within its lease the active daemon stops acting; the attempt then fails, and nobody
    // may retry it while the database is down.
    wait_for("loginA to stop acting", Duration::from_secs(30), || {
        a.log().contains("not the active one any more")
    });
    std::fs::write(flags.path().join("go"), "").unwrap();
    wait_for(
        "the first attempt to fail in Slurm",
        Duration::from_secs(60),
        || common::sacct_state(&job).starts_with("FAILED"),
    );
    // Two more cycles on each node, after the failure, with the database down...
    let stale = |d: &Daemon| {
        d.log()
            .matches("cannot bring this node's replica up to date")
            .count()
    };
    let submitted = |d: &Daemon| d.log().matches(": submitted").count();
    let (a0, b0) = (stale(&a), stale(&b));
    let (sa, sb) = (submitted(&a), submitted(&b));
    wait_for(
        "two more cycles on each node",
        Duration::from_secs(60),
        || stale(&a) >= a0 + 2 && stale(&b) >= b0 + 2,
    );
    // ...and no retry was submitted: neither daemon submitted anything, and Slurm's
    // accounting, once it has the first job's comment (slurmdbd may record it a moment
    // after the job's state), holds that job only.
    assert_eq!((submitted(&a), submitted(&b)), (sa, sb));
    accounted(&tag, 1);

    shared.server.restart();
    // Someone acts again, and the chain is retried once and completes.
    wait_for("a daemon to act again", Duration::from_secs(60), || {
        shared.holder().len() > 1
    });
    let who = if shared.holder().starts_with("loginA:") {
        &a
    } else {
        &b
    };
    who.wait_state(&job, "completed", Duration::from_secs(240));
    accounted(&tag, 2);
}

#[test]
fn two_daemons_started_at_the_same_instant_elect_one_and_only_it_acts() {
    require_slurm();
    let shared = Shared::new();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| shared.daemon("loginA"));
        let b = s.spawn(|| shared.daemon("loginB"));
        (a.join().unwrap(), b.join().unwrap())
    });
    wait_for("one of them to act", Duration::from_secs(30), || {
        active(&a) || active(&b)
    });
    let (acting, standing) = if active(&a) { (&a, &b) } else { (&b, &a) };
    // A submission to each: one is taken, the other refused naming the active node.
    let job = acting.submit(&["--time=1", "--mem=50M", "--wrap=true"]);
    let refused = standing.ctl_in(&["submit", "--", "--wrap=true"], &standing.work_dir());
    assert!(!refused.status.success());
    acting.wait_state(&job, "completed", Duration::from_secs(120));
    wait_for(
        "the standby's replica to show it completed",
        Duration::from_secs(30),
        || {
            standing.ctl(&["status", "--json", &job]).status.success()
                && standing.status(&job)[0]["state"] == "completed"
        },
    );
    assert!(!active(standing), "both daemons acted:\n{}", standing.log());
    accounted(&format!("ssv-{}-", shared.instance()), 1);
    // The standby stopped cleanly says so in its row, as the active daemon shows it.
    let (acting, mut standing) = if active(&a) { (a, b) } else { (b, a) };
    let name = |d: &Daemon| {
        let v = d.json(&["cluster", "--json"]);
        v["answered_by"].as_str().unwrap().to_string()
    };
    let standing_node = name(&standing);
    assert!(standing.stop().success());
    wait_for("the stopped standby's row", Duration::from_secs(30), || {
        node(&acting.json(&["cluster", "--json"]), &standing_node)["role"] == "stopped"
    });
}
