//! Cluster mode's fault rounds (issue 23; docs/cluster.md, "Tests"): two login nodes as
//! network namespaces (tests/common/netns.rs), each with its own root daemon in
//! system-wide mode, on one real MariaDB, beside the dev cluster's real Slurm. Every packet
//! a node sends to Slurm, to the database or to the other node crosses that node's own
//! link, so a cut link cuts the node off while its daemon keeps running. login2's daemon
//! runs with its clock a minute ahead (libfaketime), throughout.
//!
//! Users drive it from both nodes over the network (issue 24: `supervisorctl` with
//! `[client] servers`, MUNGE credentials of a private munged): chains are submitted on
//! either node, followed, classified and cancelled from the other.
//!
//! Each round starts chains whose jobs all fail at one moment with an error the rules call
//! transient (a burst of retries due at once) and hits the active daemon in the middle of
//! that burst: SIGKILL; SIGSTOP past its lease and SIGCONT; its node's links cut and
//! restored; the database stopped for a minute. Ground truth is Slurm's accounting: every
//! attempt of every chain has exactly one job and it ran; every other job the supervisor
//! submitted was cancelled while held, never started; no chain is lost.
//!
//! Needs root, the dev cluster, Debian's mariadb-server, munge, socat and faketime
//! (scripts/test installs them). Every loop is bounded; the namespaces are addressed only
//! from 192.0.2.0/24, and nothing is added to the host's own network.

mod common;
mod mariadb;

use common::munged::Munged;
use common::netns::Nodes;
use common::system::{chmod, chown, User};
use common::{require_slurm, wait_for, Daemon};
use mariadb::MariaDb;
use serde_json::Value;
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

const PASSWORD: &str = "rounds-test-pw";
/// Every daemon's network port (each on its own node's address).
const PORT: u16 = 6827;
/// The lease: Slurm commands that change something may take 5 s.
const LEASE: Duration = Duration::from_secs(12);
/// libfaketime on login2's daemon: its wall clock a minute ahead (its monotonic clock is
/// left alone, as NTP leaves it). The commands it runs as a user do not inherit the
/// preload (`slurm::cli::user_env`): libfaketime's shared memory is named by the pid, and
/// one left by another user's process of that pid made the command die before it ran (a
/// release lost, seen in a CI run).
const SKEW: &str = "+60s";
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The two nodes, the database, the daemons, and the users' side.
/// (Fields drop in this order: the daemons first, the folders they live in last.)
struct Cluster {
    daemons: Vec<Daemon>,
    nodes: Nodes,
    db: MariaDb,
    munged: Munged,
    /// Everything else: the daemons' folders, the users' homes, supervisorctl (kept when
    /// the test fails).
    root: PathBuf,
    ctl: PathBuf,
    /// The database's port (as relayed to each node).
    db_port: u16,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.daemons.clear();
        if std::thread::panicking() {
            eprintln!("kept {}", self.root.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// A port from `scontrol show config`'s line `key = value`.
fn config_port(key: &str) -> u16 {
    let out = common::run("scontrol", &["show", "config"]);
    out.lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {key} in scontrol show config"))
}

impl Cluster {
    fn start() -> Cluster {
        let db = MariaDb::start();
        let url = db.supervisor_database("supervisor", "ssv", PASSWORD);
        let nodes = Nodes::two_with_services(&[
            config_port("SlurmctldPort"),
            config_port("AccountingStoragePort"),
            url.port,
        ]);
        let munged = Munged::start();
        for u in ["alice", "bob"] {
            User::get(u);
        }
        let root = tempfile::Builder::new()
            .prefix("ssv-rounds-")
            .tempdir_in(common::scratch_root())
            .unwrap()
            .keep();
        chmod(&root, 0o755);
        let ctl = root.join("supervisorctl");
        common::copy_executable(Path::new(common::CTL), &ctl);
        for u in ["alice", "bob"] {
            let h = root.join("home").join(u);
            std::fs::create_dir_all(&h).unwrap();
            chmod(h.parent().unwrap(), 0o755);
            chmod(&h, 0o700);
            chown(&h, u);
        }
        // Slurm's commands behind wrappers: sbatch takes 4 s longer while `slow` exists,
        // and notes each such start in `sbatch-started` (the wrapper runs as the job's
        // owner).
        let bin = root.join("bin");
        std::fs::create_dir(&bin).unwrap();
        chmod(&bin, 0o755);
        let started = root.join("sbatch-started");
        std::fs::write(&started, "").unwrap();
        chmod(&started, 0o666);
        let real = common::slurm_bin_dir().unwrap_or_else(|| "/usr/bin".into());
        for cmd in ["sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo"] {
            let slow = if cmd == "sbatch" {
                format!(
                    "if [ -e {slow} ]; then echo $$ >> {started}; sleep 4; fi\n",
                    slow = root.join("slow").display(),
                    started = started.display()
                )
            } else {
                String::new()
            };
            common::write_executable(
                &bin.join(cmd),
                format!("#!/bin/sh\n{slow}exec {}/{cmd} \"$@\"\n", real.display()),
            );
        }
        let password_file = root.join("db-password");
        std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
        std::fs::set_permissions(&password_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut c = Cluster {
            daemons: Vec::new(),
            nodes,
            db,
            munged,
            root,
            ctl,
            db_port: url.port,
        };
        for k in 0..2 {
            let d = c.daemon(k, &url.port.to_string(), &password_file);
            c.daemons.push(d);
            // Each node's users list their own node first, then the other.
            let servers = [k, 1 - k].map(|j| format!("{}:{PORT}", c.nodes.nodes[j].addr));
            let client = c.client_config(k);
            std::fs::write(
                &client,
                format!(
                    "[client]\nservers = {servers:?}\nmunge_socket = {:?}\n",
                    c.munged.socket().display().to_string()
                ),
            )
            .unwrap();
            chmod(&client, 0o644);
        }
        c
    }

    fn client_config(&self, k: usize) -> PathBuf {
        self.root.join(format!("client{k}.toml"))
    }

    /// login(k+1)'s daemon, in its namespace, started (and waited for on its socket).
    fn daemon(&self, k: usize, db_port: &str, password_file: &Path) -> Daemon {
        let node = format!("login{}", k + 1);
        let dir = tempfile::Builder::new()
            .prefix(&format!("{node}-"))
            .tempdir_in(&self.root)
            .unwrap();
        chmod(dir.path(), 0o755);
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        chmod(&run, 0o755);
        let bin_dir = self.root.join("bin");
        let config = dir.path().join("supervisor.toml");
        // The rounds' transient failures are a storm by design: the breaker (which would
        // pause retries after 10 in ten minutes) is set out of their way.
        std::fs::write(
            &config,
            format!(
                "state_dir = {state:?}\nsocket = {socket:?}\npoll_interval = \"1s\"\n\
                 [slurm]\nbin_dir = {bin:?}\ncommand_timeout = \"5s\"\nsbatch_timeout = \"20s\"\n\
                 [retry]\nbackoff_initial = \"1s\"\nbackoff_max = \"2s\"\nbackoff_jitter = 0.0\n\
                 [notify]\nmail = false\n\
                 [breaker]\nthreshold = 1000\n\
                 [server]\nlisten = \"{addr}:{PORT}\"\nid = {node:?}\nmunge_socket = {munge:?}\n\
                 [store]\nurl = \"mysql://ssv@127.0.0.1:{db_port}/supervisor\"\npassword_file = {pw:?}\n\
                 lease = \"{lease}s\"\nmargin = \"1s\"\ntimeout = \"2s\"\nnode = {node:?}\n\
                 [[rules]]\nname = \"connection-refused\"\nkind = \"transient\"\nstderr = '(?i)connection refused'\n",
                state = dir.path().join("state").display().to_string(),
                socket = run.join("supervisor.sock").display().to_string(),
                bin = bin_dir.display().to_string(),
                addr = self.nodes.nodes[k].addr,
                munge = self.munged.socket().display().to_string(),
                pw = password_file.display().to_string(),
                lease = LEASE.as_secs(),
            ),
        )
        .unwrap();
        chmod(&config, 0o644);
        let mut launcher = self.nodes.prefix(k, "root");
        if k == 1 {
            launcher.extend(
                [
                    "env",
                    &format!("LD_PRELOAD={LIBFAKETIME}"),
                    &format!("FAKETIME={SKEW}"),
                    "FAKETIME_DONT_FAKE_MONOTONIC=1",
                ]
                .map(String::from),
            );
        }
        let mut d = Daemon {
            dir,
            config,
            child: None,
            extra_env: Vec::new(),
            launcher,
        };
        d.spawn();
        d
    }

    /// The node whose daemon holds the lease now (by the server's clock), if any.
    fn holder(&self) -> Option<usize> {
        let h = self.db.admin_sql(
            "SELECT COALESCE(holder, '') FROM supervisor.lease WHERE expires_at > UTC_TIMESTAMP(6)",
        );
        (0..2).find(|k| h.starts_with(&format!("login{}:", k + 1)))
    }

    /// How many times each node's daemon has said it became the active one.
    fn tenures(&self) -> [usize; 2] {
        [0, 1].map(|k| self.said(k, "this daemon is the active one now"))
    }

    /// Waits until a daemon (not `not`) holds the lease and has said it acts since
    /// `since` (counts of [`Cluster::tenures`]; None: ever); returns its node.
    fn wait_active(
        &self,
        since: Option<[usize; 2]>,
        not: Option<usize>,
        within: Duration,
    ) -> usize {
        let since = since.unwrap_or([0, 0]);
        let mut who = None;
        wait_for("a daemon to act", within, || {
            let now = self.tenures();
            who = self
                .holder()
                .filter(|k| Some(*k) != not)
                .filter(|k| now[*k] > since[*k]);
            who.is_some()
        });
        who.unwrap()
    }

    /// `supervisorctl` as `user` on node `k`, over the network.
    fn ctl(&self, k: usize, user: &str, args: &[&str]) -> Output {
        let home = self.root.join("home").join(user);
        let mut cmd = self.nodes.command(k, user, &home);
        cmd.env("HOME", &home)
            .arg(&self.ctl)
            .arg("--config")
            .arg(self.client_config(k))
            .args(args);
        cmd.output().unwrap()
    }

    fn ok(&self, k: usize, user: &str, args: &[&str]) -> String {
        let out = self.ctl(k, user, args);
        assert!(
            out.status.success(),
            "{user} on login{}: {args:?}: {}\n{}",
            k + 1,
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, k: usize, user: &str, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(k, user, args)).unwrap()
    }

    /// The ends of both daemons' logs, for a failure's message.
    fn logs(&self) -> String {
        self.daemons
            .iter()
            .enumerate()
            .map(|(k, d)| format!("login{} log:\n{}\n", k + 1, common::tail(&d.log(), 40)))
            .collect()
    }

    /// A folder of `user`'s for one chain's marks.
    fn user_dir(&self, user: &str, name: &str) -> PathBuf {
        let d = self.root.join("home").join(user).join(name);
        std::fs::create_dir(&d).unwrap();
        chown(&d, user);
        d
    }

    /// A script of `user`'s that waits for `go`, then fails once with `error` on stderr,
    /// and completes the second time.
    fn fail_once_script(&self, user: &str, name: &str, go: &Path, error: &str) -> PathBuf {
        let dir = self.user_dir(user, name);
        let script = dir.join("job.sh");
        common::write_executable(
            &script,
            format!(
                "#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.2; done\n\
                 if [ -e {dir}/failed-once ]; then exit 0; fi\n\
                 touch {dir}/failed-once\necho '{error}' >&2\nexit 1\n",
                go = go.display(),
                dir = dir.display()
            ),
        );
        chown(&script, user);
        script
    }

    /// `user` submits `script` on node `k`; returns the chain's id (its first job's).
    fn submit(&self, k: usize, user: &str, script: &Path) -> String {
        let dir = script.parent().unwrap().display().to_string();
        self.ok(
            k,
            user,
            &[
                "submit",
                "--",
                "--time=3",
                "--mem=50M",
                &format!("--chdir={dir}"),
                &format!("--output={dir}/out.%j"),
                script.to_str().unwrap(),
            ],
        )
        .trim()
        .to_string()
    }

    /// A chain's state and its job's Slurm state, as `user` sees them from node `k`;
    /// empty while no daemon acts (a network client asks the active one).
    fn state(&self, k: usize, user: &str, chain: &str) -> (String, String) {
        let out = self.ctl(k, user, &["status", "--json", chain]);
        if !out.status.success() {
            return Default::default();
        }
        let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
        (
            rows[0]["state"].as_str().unwrap_or_default().to_string(),
            rows[0]["slurm_state"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    }

    /// The chain's attempts' job ids, from its history as `user` sees it from node `k`.
    fn attempts(&self, k: usize, user: &str, chain: &str) -> Vec<String> {
        let h = self.json(k, user, &["history", "--json", chain]);
        common::attempts(&h)
            .iter()
            .map(|a| a["slurm_job_id"].as_str().unwrap().to_string())
            .collect()
    }

    /// How many jobs the daemon of node `k` has submitted by its log.
    fn submitted(&self, k: usize) -> usize {
        self.daemons[k]
            .log()
            .lines()
            .filter(|l| l.trim_end().ends_with(": submitted"))
            .count()
    }

    /// How many lines of node `k`'s daemon's log (over all its runs) contain `what`.
    fn said(&self, k: usize, what: &str) -> usize {
        self.daemons[k]
            .log()
            .lines()
            .filter(|l| l.contains(what))
            .count()
    }

    fn instance(&self) -> String {
        self.db.admin_sql("SELECT instance FROM supervisor.cluster")
    }
}

/// One row of Slurm's accounting for a job the supervisor submitted.
#[derive(Debug)]
struct Row {
    job: String,
    state: String,
    start: String,
}

impl Row {
    fn ran(&self) -> bool {
        !matches!(self.start.as_str(), "Unknown" | "None" | "")
    }
}

/// Every job of this store's instance in Slurm's accounting (its tag names the instance).
fn accounting(instance: &str) -> Vec<Row> {
    common::sacct_rows_with_comment(&format!("ssv-{instance}-"), "JobID,State,Start,Comment")
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.splitn(4, '|').collect();
            Row {
                job: f[0].to_string(),
                state: f[1].to_string(),
                start: f[2].to_string(),
            }
        })
        .collect()
}

/// The ground truth after a round: each attempt of every chain so far has exactly one
/// job, which ran; every other job of the instance was cancelled without ever starting
/// (waiting for the active daemon's sweep to cancel what a deposed one left held).
fn check_accounting(c: &Cluster, attempts: &BTreeSet<String>) {
    let instance = c.instance();
    let mut last;
    // Every attempt's job in accounting (slurmdbd may record a comment a moment after
    // the state), and every other job cancelled without having started.
    let settled = |rows: &[Row]| {
        attempts.iter().all(|a| rows.iter().any(|r| &r.job == a))
            && rows
                .iter()
                .filter(|r| !attempts.contains(&r.job))
                .all(|r| r.state.starts_with("CANCELLED") && !r.ran())
    };
    let deadline = Instant::now() + LEASE * 3 + Duration::from_secs(30);
    loop {
        last = accounting(&instance);
        if settled(&last) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    for a in attempts {
        let rows: Vec<&Row> = last.iter().filter(|r| &r.job == a).collect();
        assert_eq!(rows.len(), 1, "attempt job {a}: {rows:?}");
        assert!(rows[0].ran(), "attempt job {a} never ran: {rows:?}");
    }
    let extra: Vec<&Row> = last.iter().filter(|r| !attempts.contains(&r.job)).collect();
    assert!(
        settled(&last),
        "jobs of no attempt that ran or were not cancelled: {extra:#?}\n{}",
        c.logs()
    );
    eprintln!(
        "accounting: {} attempts, each one job that ran; {} other jobs, all cancelled while held",
        attempts.len(),
        extra.len()
    );
}

/// The faults.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Kill,
    Stop,
    Cut,
    Database,
    /// The active node loses the database (its relay stopped: what it sends waits,
    /// unanswered) while Slurm still answers it, in the middle of its retries' sbatch
    /// (4 s slower): a deposed daemon's jobs are submitted, held, and never recorded.
    Partition,
}

/// One round: three chains submitted from both nodes (alice twice, bob once), their jobs
/// failing at one moment; `fault` hits the active daemon once it has submitted the first
/// retry of that burst. Returns every attempt's job id.
fn round(c: &mut Cluster, n: usize, fault: Fault) -> BTreeSet<String> {
    let start = Instant::now();
    let active = c.wait_active(None, None, LEASE * 3);
    let other = 1 - active;
    eprintln!("round {n}: {fault:?}, login{} active", active + 1);
    let go_dir = c.root.join(format!("round{n}"));
    std::fs::create_dir(&go_dir).unwrap();
    chmod(&go_dir, 0o755);
    let go = go_dir.join("go");
    let who = [("alice", active), ("bob", other), ("alice", other)];
    let chains: Vec<(&str, usize, String)> = who
        .iter()
        .enumerate()
        .map(|(i, &(user, k))| {
            let script = c.fail_once_script(user, &format!("r{n}c{i}"), &go, "connection refused");
            (user, k, c.submit(k, user, &script))
        })
        .collect();
    // Followed from the node each was not submitted on.
    for (user, k, chain) in &chains {
        wait_for(
            &format!("chain {chain} running"),
            Duration::from_secs(180),
            || c.state(1 - k, user, chain).1 == "RUNNING",
        );
    }
    let before = c.submitted(active);
    let slow = c.root.join("slow");
    let started = || {
        std::fs::read_to_string(c.root.join("sbatch-started"))
            .unwrap()
            .lines()
            .count()
    };
    let started_before = started();
    if matches!(fault, Fault::Partition) {
        std::fs::write(&slow, "").unwrap();
    }
    let adopted = c.said(other, "adopting it, not submitting again");
    std::fs::write(&go, "").unwrap();
    if matches!(fault, Fault::Partition) {
        wait_for(
            "the burst's first retry's sbatch to start",
            Duration::from_secs(60),
            || started() > started_before,
        );
    } else {
        wait_for(
            "the burst's first retry submitted",
            Duration::from_secs(60),
            || c.submitted(active) > before,
        );
    }
    let hit = Instant::now();
    let tenures = c.tenures();
    let stood_by = c.said(active, "not the active one any more");
    let pid = nix::unistd::Pid::from_raw(c.daemons[active].child.as_ref().unwrap().id() as i32);
    use nix::sys::signal::{kill, Signal};
    // The other node's daemon acts within the lease, a third of one and a poll.
    let taken_over = |c: &Cluster| {
        let now = c.wait_active(Some(tenures), Some(active), LEASE * 3);
        assert_eq!(now, other);
        eprintln!(
            "round {n}: login{} took over in {:?}",
            other + 1,
            hit.elapsed()
        );
    };
    match fault {
        Fault::Kill => {
            c.daemons[active].kill();
            eprintln!(
                "round {n}: killed; the journal ends at entry {}",
                c.db.admin_sql("SELECT GREATEST(COALESCE(MAX(seq), 0), (SELECT through_seq FROM supervisor.journal_pruned)) FROM supervisor.journal")
            );
            taken_over(c);
            // The node comes back: its daemon stands by.
            c.daemons[active].spawn();
        }
        Fault::Stop => {
            kill(pid, Signal::SIGSTOP).unwrap();
            taken_over(c);
            kill(pid, Signal::SIGCONT).unwrap();
            wait_for("the continued daemon to stand by", LEASE * 2, || {
                c.said(active, "not the active one any more") > stood_by
            });
        }
        Fault::Cut => {
            c.nodes.cut(active);
            taken_over(c);
            wait_for("the cut-off daemon to stop acting", LEASE * 2, || {
                c.said(active, "not the active one any more") > stood_by
            });
            c.nodes.restore(active);
        }
        Fault::Partition => {
            c.nodes.pause_port(active, c.db_port);
            taken_over(c);
            std::fs::remove_file(&slow).unwrap();
            wait_for("the cut-off daemon to stop acting", LEASE * 2, || {
                c.said(active, "not the active one any more") > stood_by
            });
            // What it sent meanwhile reaches the database now: fenced off.
            c.nodes.resume_port(active, c.db_port);
            // The jobs its sbatch made, held and unrecorded, are found by their tags (at
            // least the first: its sbatch ended after the database was gone).
            wait_for(
                "the new active daemon to adopt a held job",
                LEASE * 2,
                || c.said(other, "adopting it, not submitting again") > adopted,
            );
            let now_adopted = c.said(other, "adopting it, not submitting again");
            eprintln!(
                "round {n}: {} sbatch started slowly; the new active daemon adopted {} held jobs of the deposed one",
                started() - started_before,
                now_adopted - adopted
            );
        }
        Fault::Database => {
            c.db.stop();
            // A minute without the database: nobody submits anything.
            let counts = |c: &Cluster| (c.submitted(0), c.submitted(1));
            let at_stop = counts(c);
            let until = Instant::now() + Duration::from_secs(60);
            // Once every lease has ended nobody acts, and users on either node still
            // read their chains: from the standbys' replicas.
            let mut read = false;
            while Instant::now() < until {
                std::thread::sleep(Duration::from_secs(2));
                if !read && hit.elapsed() > LEASE + Duration::from_secs(4) {
                    for (user, k, chain) in &chains {
                        for node in [*k, 1 - k] {
                            let rows = c.json(node, user, &["status", "--json", chain]);
                            assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
                        }
                    }
                    read = true;
                }
            }
            assert!(read, "the outage ended before every lease had");
            let settled = counts(c);
            c.db.restart();
            let back = Instant::now();
            // The server answers each node again, through its link.
            for k in 0..2 {
                wait_for(
                    "the database to answer the node",
                    Duration::from_secs(30),
                    || {
                        let out = c
                            .nodes
                            .command(k, "root", std::path::Path::new("/"))
                            .arg(mariadb::program("mariadb"))
                            .args([
                                "--no-defaults",
                                &format!("--host={}", c.nodes.services_addr(k)),
                                &format!("--port={}", c.db.port()),
                                "--user=ssv",
                                &format!("--password={PASSWORD}"),
                                "--execute=SELECT 1",
                            ])
                            .output()
                            .unwrap();
                        if !out.status.success() {
                            eprintln!("login{}: {}", k + 1, String::from_utf8_lossy(&out.stderr));
                        }
                        out.status.success()
                    },
                );
            }
            let now = c.wait_active(Some(tenures), None, LEASE * 3);
            eprintln!(
                "round {n}: login{} acts again {:?} after the database came back",
                now + 1,
                back.elapsed()
            );
            eprintln!(
                "round {n}: submissions during the outage: {at_stop:?} -> {settled:?} (only those in flight at the stop)"
            );
            // At most the ones already under way when it stopped: no new decision.
            assert!(
                settled.0 + settled.1 <= at_stop.0 + at_stop.1 + chains.len(),
                "{at_stop:?} -> {settled:?}\n{}",
                c.logs()
            );
        }
    }
    // Every chain completes, followed from either node.
    let mut attempts = BTreeSet::new();
    for (user, k, chain) in &chains {
        wait_for(
            &format!("chain {chain} completed"),
            Duration::from_secs(300),
            || c.state(*k, user, chain).0 == "completed",
        );
        let a = c.attempts(1 - k, user, chain);
        assert_eq!(a.len(), 2, "chain {chain}: attempts {a:?}\n{}", c.logs());
        attempts.extend(a);
    }
    eprintln!("round {n}: done in {:?}", start.elapsed());
    attempts
}

#[test]
fn two_daemons_pass_the_fault_rounds_with_nothing_lost_or_doubled() {
    require_slurm();
    let mut c = Cluster::start();
    let mut attempts = BTreeSet::new();
    let only = std::env::var("SSV_ROUNDS").unwrap_or_default();
    for (n, fault) in [
        Fault::Kill,
        Fault::Cut,
        Fault::Partition,
        Fault::Stop,
        Fault::Database,
    ]
    .into_iter()
    .enumerate()
    .filter(|(_, f)| only.is_empty() || only.contains(&format!("{f:?}")))
    {
        attempts.extend(round(&mut c, n + 1, fault));
        check_accounting(&c, &attempts);
    }
    // Both nodes were hit: each acted in some round, and each was deposed in one.
    for k in 0..2 {
        assert!(
            c.daemons[k]
                .log()
                .contains("this daemon is the active one now"),
            "login{} never acted",
            k + 1
        );
    }
}

/// A user submits on one node, and follows, classifies and cancels from the other, with
/// her rights only: bob on the other node sees nothing of hers and changes nothing.
#[test]
fn a_user_follows_classifies_and_cancels_from_the_other_node() {
    require_slurm();
    let c = Cluster::start();
    let active = c.wait_active(None, None, LEASE * 3);
    let other = 1 - active;
    let go_dir = c.root.join("go");
    std::fs::create_dir(&go_dir).unwrap();
    chmod(&go_dir, 0o755);
    std::fs::write(go_dir.join("go"), "").unwrap();
    // An error no rule knows: the chain waits for an agent.
    let odd = c.fail_once_script("alice", "odd", &go_dir.join("go"), "something odd happened");
    let chain = c.submit(other, "alice", &odd);
    wait_for(
        "the chain to wait for an agent",
        Duration::from_secs(180),
        || c.state(active, "alice", &chain).0 == "pending_failed",
    );
    assert_eq!(
        c.json(active, "bob", &["status", "--json"]),
        serde_json::json!([])
    );
    let refused = c.ctl(
        active,
        "bob",
        &[
            "classify", "--action", "retry", "--reason", "mine now", &chain,
        ],
    );
    assert!(!refused.status.success(), "bob classified alice's chain");
    c.ok(
        active,
        "alice",
        &[
            "classify",
            "--action",
            "retry",
            "--reason",
            "a passing glitch",
            &chain,
        ],
    );
    wait_for("the retry to complete", Duration::from_secs(180), || {
        c.state(other, "alice", &chain).0 == "completed"
    });
    assert_eq!(c.attempts(active, "alice", &chain).len(), 2);

    // A chain submitted on the active node, cancelled from the other.
    let go2 = go_dir.join("never");
    let long = c.fail_once_script("alice", "long", &go2, "unused");
    let chain2 = c.submit(active, "alice", &long);
    wait_for("the second chain running", Duration::from_secs(180), || {
        c.state(other, "alice", &chain2).1 == "RUNNING"
    });
    assert!(!c.ctl(other, "bob", &["cancel", &chain2]).status.success());
    c.ok(other, "alice", &["cancel", &chain2]);
    wait_for("the chain cancelled", Duration::from_secs(60), || {
        c.state(active, "alice", &chain2).0 == "cancelled"
    });
    wait_for(
        "Slurm to have cancelled its job",
        Duration::from_secs(60),
        || common::sacct_state(&chain2).starts_with("CANCELLED"),
    );
}

/// `scripts/dev-cluster login-nodes --slurm V`, removed again when dropped.
struct DevLoginNodes;

impl DevLoginNodes {
    fn command(what: &str) -> std::process::Command {
        let mut cmd = std::process::Command::new(format!(
            "{}/scripts/dev-cluster",
            env!("CARGO_MANIFEST_DIR")
        ));
        cmd.args([what, "--slurm", common::slurm_version()])
            .env("SLURM_SUPERVISORD", common::DAEMON);
        cmd
    }
}

impl Drop for DevLoginNodes {
    fn drop(&mut self) {
        let _ = Self::command("login-nodes-down").output();
    }
}

/// The README's way to try cluster mode: `scripts/dev-cluster login-nodes` brings up two
/// login nodes with a daemon each; a user submits on one and follows the chain to its end
/// from the other, and `login-nodes-down` takes them away.
#[test]
fn the_dev_clusters_two_login_nodes_come_up_and_serve_a_user_on_each() {
    require_slurm();
    let tag = common::slurm_version().replace('.', "");
    let root = match common::slurm_version() {
        "24.11" => {
            std::env::var("DEV_CLUSTER_TRIXIE_ROOT").unwrap_or_else(|_| "/srv/trixie".into())
        }
        _ => String::new(),
    };
    let etc = format!(
        "{root}/etc/slurm-supervisor-dev/{}",
        common::slurm_version()
    );
    let up = DevLoginNodes::command("login-nodes").output().unwrap();
    let _down = DevLoginNodes;
    assert!(
        up.status.success(),
        "dev-cluster login-nodes: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let ctl = |node: usize, args: &[&str]| {
        let out = std::process::Command::new("nsenter")
            .arg(format!("--net=/run/netns/ssv{tag}-l{node}"))
            .args([
                "--",
                "runuser",
                "-u",
                "alice",
                "--",
                common::CTL,
                "--config",
            ])
            .arg(format!("{etc}/client-login{node}.toml"))
            .args(args)
            .current_dir("/tmp")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "login{node}: {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let job = ctl(2, &["submit", "--", "--time=1", "--mem=50M", "--wrap=true"])
        .trim()
        .to_string();
    wait_for(
        "the chain completed, seen from login1",
        Duration::from_secs(120),
        || {
            let rows: Value = serde_json::from_str(&ctl(1, &["status", "--json", &job])).unwrap();
            rows[0]["state"] == "completed"
        },
    );
    drop(_down);
    let gone = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&gone.stdout).contains(&format!("ssv{tag}-")),
        "namespaces left: {}",
        String::from_utf8_lossy(&gone.stdout)
    );
}
