//! The Debian package (scripts/package) on this machine, against the real Slurm of
//! scripts/dev-cluster: `dpkg -i` puts the binaries, the units (not enabled), the
//! conffile, the empty `rules.d/` beside it, the man pages and the completions where
//! Debian expects them; the installed
//! binaries supervise a job to its end; `dpkg -r` leaves only the conffile and
//! `dpkg --purge` leaves nothing. The package tested is `$SSV_TEST_DEB`, which scripts/test
//! builds with scripts/package.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PACKAGE: &str = "slurm-supervisor";
const DEB_VAR: &str = "SSV_TEST_DEB";
const DAEMON_BIN: &str = "/usr/bin/slurm-supervisord";
const CTL_BIN: &str = "/usr/bin/supervisorctl";
const CONFFILE: &str = "/etc/slurm-supervisor/supervisor.toml";
/// Where `supervisorctl rules accept` writes accepted rules (docs/rules.md): shipped empty,
/// root's, 0755, as the packaged unit's `ReadWritePaths=` expects it.
const RULES_D: &str = "/etc/slurm-supervisor/rules.d";
const BASH_COMPLETION: &str = "/usr/share/bash-completion/completions/supervisorctl";
const SOCKET_UNIT: &str = "/usr/lib/systemd/system/slurm-supervisord.socket";

/// Every file the package must install, with what it is.
const EXPECTED: &[(&str, &str)] = &[
    (DAEMON_BIN, "the daemon"),
    (CTL_BIN, "the client"),
    (
        "/usr/lib/systemd/system/slurm-supervisord.service",
        "the system-wide unit",
    ),
    (
        "/usr/lib/systemd/user/slurm-supervisord.service",
        "the per-user unit",
    ),
    (
        SOCKET_UNIT,
        "the socket unit that holds the network port from boot (docs/security.md)",
    ),
    (CONFFILE, "the conffile"),
    ("/usr/share/man/man8/slurm-supervisord.8.gz", "a man page"),
    ("/usr/share/man/man1/supervisorctl.1.gz", "a man page"),
    (
        "/usr/share/man/man1/supervisorctl-submit.1.gz",
        "a man page",
    ),
    (BASH_COMPLETION, "bash completion"),
    (
        "/usr/share/zsh/vendor-completions/_supervisorctl",
        "zsh completion",
    ),
    (
        "/usr/share/fish/vendor_completions.d/supervisorctl.fish",
        "fish completion",
    ),
    (
        "/usr/share/doc/slurm-supervisor/README.md",
        "the README the units name",
    ),
    (
        "/usr/share/slurm-supervisor/cli_filter.lua",
        "the plain-sbatch cli_filter (docs/plain-sbatch.md)",
    ),
    (
        "/usr/share/slurm-supervisor/job_submit.lua",
        "the plain-sbatch job_submit script, the tamper-proof mark (docs/plain-sbatch.md)",
    ),
    (
        "/usr/share/slurm-supervisor/prometheus/slurm-supervisor.rules.yml",
        "the Prometheus alert and recording rules (docs/metrics.md)",
    ),
    (
        "/usr/share/slurm-supervisor/grafana/slurm-supervisor.json",
        "the Grafana dashboard (docs/metrics.md)",
    ),
];

/// The package file to test, built by scripts/package.
fn deb() -> PathBuf {
    let p = std::env::var_os(DEB_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "this test installs the package ${DEB_VAR}: build it with scripts/package and set \
             {DEB_VAR} to the path it prints (scripts/test does both)"
            )
        });
    assert!(p.is_file(), "{DEB_VAR}={} is not a file", p.display());
    p
}

/// The paths of the package's files and folders (`dpkg -c`), as installed.
fn contents(deb: &Path) -> Vec<String> {
    must("dpkg", &["-c", deb.to_str().unwrap()])
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(|p| {
            let p = p.trim_start_matches('.').trim_end_matches('/');
            if p.is_empty() {
                "/".to_string()
            } else {
                p.to_string()
            }
        })
        .filter(|p| p != "/")
        .collect()
}

fn exists(p: &str) -> bool {
    Path::new(p).symlink_metadata().is_ok()
}

/// One installation at a time on this machine: scripts/test runs the real-Slurm tests
/// against two clusters at once, and both would install the same package.
fn machine_lock() -> nix::fcntl::Flock<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(scratch_root().join("package-test.lock"))
        .unwrap();
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("lock package-test.lock")
}

/// Purges the package when the test ends, passed or not, so that a failure leaves no
/// binaries in /usr/bin behind.
struct PurgeOnDrop;

impl Drop for PurgeOnDrop {
    fn drop(&mut self) {
        let _ = output("dpkg", &["--purge", PACKAGE]);
    }
}

/// The installed daemon, killed when dropped.
struct Running {
    child: Child,
    log: PathBuf,
}

impl Running {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("daemon log:\n{}", tail(&self.log(), 100));
        }
    }
}

fn ctl(config: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new(CTL_BIN)
        .arg("--config")
        .arg(config)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("run the installed supervisorctl")
}

/// The system-wide daemon started as its unit starts it (`--config` the conffile, as
/// root), and a user's `supervisorctl` with no `--config` and no `SLURM_SUPERVISOR_CONFIG`
/// reaches it through the site's config: `status` answers, and `wait` has nothing to wait
/// for. The selected cluster's commands are the daemon's (the conffile's `[slurm]` gets
/// its `bin_dir` for 24.11, as a site with that Slurm would write).
fn a_users_plain_supervisorctl_finds_the_system_service() {
    if let Some(dir) = slurm_bin_dir() {
        let conf = std::fs::read_to_string(CONFFILE).unwrap();
        let conf = conf.replacen(
            "[slurm]\n",
            &format!("[slurm]\nbin_dir = {:?}\n", dir.display().to_string()),
            1,
        );
        std::fs::write(CONFFILE, conf).unwrap();
    }
    // The unit's RuntimeDirectory=, made here as systemd would (and removed after).
    let run_dir = Path::new("/run/slurm-supervisor");
    let made_run_dir = !run_dir.exists();
    if made_run_dir {
        std::fs::create_dir(run_dir).unwrap();
        std::fs::set_permissions(run_dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let logs = tempfile::Builder::new()
        .prefix("ssv-package-system-")
        .tempdir_in(scratch_root())
        .unwrap();
    let log = logs.path().join("daemon.log");
    let mut daemon = Running {
        child: Command::new(DAEMON_BIN)
            .args(["--config", CONFFILE])
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the installed slurm-supervisord as the system service"),
        log,
    };
    let alice = nix::unistd::User::from_name("alice")
        .unwrap()
        .expect("the dev cluster's user alice");
    let plain = |args: &[&str]| {
        use std::os::unix::process::CommandExt;
        Command::new(CTL_BIN)
            .args(args)
            .uid(alice.uid.as_raw())
            .gid(alice.gid.as_raw())
            .env_remove("SLURM_SUPERVISOR_CONFIG")
            .env("HOME", "/nonexistent")
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .expect("run the installed supervisorctl as alice")
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        let out = plain(&["status"]);
        if out.status.success() {
            break out;
        }
        if let Some(status) = daemon.child.try_wait().unwrap() {
            panic!("the system service exited ({status}):\n{}", daemon.log());
        }
        assert!(
            Instant::now() < deadline,
            "alice's plain `supervisorctl status` did not reach the system service within 90s: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let table = String::from_utf8_lossy(&status.stdout);
    assert!(table.starts_with("CHAIN"), "status printed {table:?}");
    let wait = plain(&["wait", "--timeout", "10s"]);
    assert_eq!(
        wait.status.code(),
        Some(0),
        "alice's plain `supervisorctl wait`: {}",
        String::from_utf8_lossy(&wait.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&wait.stdout).trim(),
        "no open chains to wait for"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let stopped = daemon.child.wait().unwrap();
    assert!(
        stopped.success(),
        "the system service stopped with {stopped}:\n{}",
        daemon.log()
    );
    if made_run_dir {
        let _ = std::fs::remove_dir_all(run_dir);
    }
}

/// The program of each `ExecStart=`/`ExecStartPre=` line of a unit: its first word without
/// systemd's prefixes (`+` runs it with full privileges, `-` ignores its failure, ...).
fn exec_programs(unit: &str) -> Vec<String> {
    std::fs::read_to_string(unit)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("ExecStart=") || l.starts_with("ExecStartPre="))
        .filter_map(|l| l.split_once('=')?.1.split_whitespace().next())
        .map(|w| w.trim_start_matches(['+', '-', '@', '!', ':']).to_string())
        .collect()
}

#[test]
fn the_package_installs_supervises_a_job_and_purges_clean() {
    require_slurm();
    let deb = deb();
    let _one_at_a_time = machine_lock();
    // A previous run that died half-way may have left it installed.
    must("dpkg", &["--purge", PACKAGE]);
    let files = contents(&deb);
    let before: BTreeMap<&str, bool> = files.iter().map(|p| (p.as_str(), exists(p))).collect();
    assert!(
        !exists(CTL_BIN) && !exists(DAEMON_BIN),
        "{CTL_BIN} or {DAEMON_BIN} exists without the package: remove it, the test installs its own"
    );

    let _purge = PurgeOnDrop;
    must("dpkg", &["-i", deb.to_str().unwrap()]);
    let listed = must("dpkg", &["-L", PACKAGE]);
    let listed: Vec<&str> = listed.lines().collect();
    for (path, what) in EXPECTED {
        assert!(
            listed.contains(path),
            "dpkg -L {PACKAGE} lacks {what} {path}:\n{}",
            listed.join("\n")
        );
        assert!(exists(path), "{what} {path} is listed but not installed");
    }
    // MUNGE's library is loaded only for network clients ([server] listen, [client]
    // servers): recommended, not a dependency.
    let recommends = must("dpkg-deb", &["-f", deb.to_str().unwrap(), "Recommends"]);
    assert!(
        recommends.split(',').any(|r| r.trim() == "libmunge2"),
        "the package does not recommend libmunge2: {recommends:?}"
    );
    let depends = must("dpkg-deb", &["-f", deb.to_str().unwrap(), "Depends"]);
    assert!(
        !depends.contains("munge"),
        "libmunge is a dependency: {depends:?}"
    );
    // rules.d: the package's own folder, empty, root's, 0755 (not a conffile: a folder).
    assert!(
        listed.contains(&RULES_D),
        "dpkg -L {PACKAGE} lacks {RULES_D}:\n{}",
        listed.join("\n")
    );
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = std::fs::symlink_metadata(RULES_D).unwrap();
        assert!(meta.is_dir(), "{RULES_D} as installed: {meta:?}");
        assert_eq!(
            meta.permissions().mode() & 0o7777,
            0o755,
            "{RULES_D}'s mode"
        );
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{RULES_D}'s owner");
        assert_eq!(
            std::fs::read_dir(RULES_D).unwrap().count(),
            0,
            "{RULES_D} is not empty"
        );
    }
    let conffiles = must("dpkg-query", &["-W", "-f=${Conffiles}", PACKAGE]);
    assert!(
        conffiles.contains(CONFFILE),
        "{CONFFILE} is not a conffile: {conffiles:?}"
    );
    // Installed, not enabled: the daemon needs its config first.
    for wants in [
        "/etc/systemd/system/multi-user.target.wants/slurm-supervisord.service",
        "/etc/systemd/user/default.target.wants/slurm-supervisord.service",
        "/etc/systemd/system/sockets.target.wants/slurm-supervisord.socket",
    ] {
        assert!(!exists(wants), "the package enabled the unit: {wants}");
    }
    // The socket unit holds both families of the shipped address for the daemon.
    let socket = std::fs::read_to_string(SOCKET_UNIT).unwrap();
    for line in [
        "\nListenStream=[::]:6827\n",
        "\nBindIPv6Only=both\n",
        "\nFileDescriptorName=server\n",
        "\nService=slurm-supervisord.service\n",
    ] {
        assert!(socket.contains(line), "{SOCKET_UNIT} lacks {line:?}");
    }
    // The units run the installed daemon.
    // The system-wide unit also puts the plain-sbatch notes on a filesystem of their own
    // (`--mount-notes`); the per-user one has no need.
    for (unit, lines) in [
        ("/usr/lib/systemd/system/slurm-supervisord.service", 3),
        ("/usr/lib/systemd/user/slurm-supervisord.service", 2),
    ] {
        let programs = exec_programs(unit);
        assert_eq!(programs.len(), lines, "{unit}: {programs:?}");
        for p in programs {
            assert_eq!(p, DAEMON_BIN, "{unit} runs {p}");
        }
    }
    // The conffile is the system-wide daemon's, and both binaries accept it.
    let conf = std::fs::read_to_string(CONFFILE).unwrap();
    for line in [
        "\nstate_dir = \"/var/lib/slurm-supervisor\"\n",
        "\nsocket = \"/run/slurm-supervisor/supervisor.sock\"\n",
    ] {
        assert!(conf.contains(line), "{CONFFILE} lacks {line:?}");
    }
    must(DAEMON_BIN, &["--config", CONFFILE, "--validate"]);
    must(CTL_BIN, &["--config", CONFFILE, "validate"]);
    // Without --config, supervisorctl checks the site's file too.
    must(CTL_BIN, &["validate"]);
    a_users_plain_supervisorctl_finds_the_system_service();

    // Man pages: valid gzip, and roff pages of the right program.
    let pages: Vec<&str> = listed
        .iter()
        .copied()
        .filter(|p| p.starts_with("/usr/share/man/") && p.ends_with(".gz"))
        .collect();
    assert!(pages.len() >= 3, "man pages: {pages:?}");
    for page in &pages {
        must("gzip", &["-t", page]);
        let roff = must("gzip", &["-dc", page]);
        let name = Path::new(page)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .split('.')
            .next()
            .unwrap()
            .to_string();
        assert!(
            roff.contains(&format!(".TH {name} ")),
            "{page} is not the man page of {name}:\n{roff}"
        );
    }
    // Completions: the bash one parses, and each is what the installed binary prints.
    must("bash", &["-n", BASH_COMPLETION]);
    for (shell, path) in [
        ("bash", BASH_COMPLETION),
        ("zsh", "/usr/share/zsh/vendor-completions/_supervisorctl"),
        (
            "fish",
            "/usr/share/fish/vendor_completions.d/supervisorctl.fish",
        ),
    ] {
        let printed = must(CTL_BIN, &["completions", shell]);
        assert_eq!(
            printed,
            std::fs::read_to_string(path).unwrap(),
            "`supervisorctl completions {shell}` differs from {path}"
        );
    }

    // The installed binaries supervise a job on the real Slurm.
    let dir = tempfile::Builder::new()
        .prefix("ssv-package-")
        .tempdir_in(scratch_root())
        .unwrap();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {:?}\npoll_interval = \"1s\"\n{}",
            dir.path().join("state").display().to_string(),
            slurm_bin_dir()
                .map(|d| format!("[slurm]\nbin_dir = {:?}\n", d.display().to_string()))
                .unwrap_or_default()
        ),
    )
    .unwrap();
    let log = dir.path().join("daemon.log");
    let mut daemon = Running {
        child: Command::new(DAEMON_BIN)
            .arg("--config")
            .arg(&config)
            .env("SLURM_SUPERVISOR_LOG", "debug")
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the installed slurm-supervisord"),
        log,
    };
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ctl(&config, &work, &["status", "--json"]).status.success() {
        if let Some(status) = daemon.child.try_wait().unwrap() {
            panic!("the installed daemon exited ({status}):\n{}", daemon.log());
        }
        assert!(
            Instant::now() < deadline,
            "the installed daemon did not answer within 60s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = ctl(
        &config,
        &work,
        &["submit", "--", "--job-name=ssv-package", "--wrap", "true"],
    );
    assert!(
        out.status.success(),
        "submit failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(
        !job.is_empty() && job.chars().all(|c| c.is_ascii_digit()),
        "submit printed {job:?}"
    );
    wait_for(
        &format!("job {job} to complete under the installed daemon"),
        Duration::from_secs(90),
        || {
            let out = ctl(&config, &work, &["status", "--json", &job]);
            serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .ok()
                .and_then(|v| v.get(0).map(|r| r["state"] == "completed"))
                .unwrap_or(false)
        },
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = daemon.child.wait().unwrap();
    assert!(
        status.success(),
        "the installed daemon stopped with {status}:\n{}",
        daemon.log()
    );

    // Removed: everything but the conffile is gone.
    must("dpkg", &["-r", PACKAGE]);
    let state = must("dpkg-query", &["-W", "-f=${db:Status-Abbrev}", PACKAGE]);
    assert_eq!(state.trim(), "rc", "after dpkg -r");
    assert!(exists(CONFFILE), "dpkg -r removed the conffile");
    for (path, what) in EXPECTED.iter().filter(|(p, _)| *p != CONFFILE) {
        assert!(!exists(path), "dpkg -r left {what} {path}");
    }
    assert!(!exists(RULES_D), "dpkg -r left the empty {RULES_D}");

    // Purged: the machine is as it was before, and dpkg knows nothing of the package.
    must("dpkg", &["--purge", PACKAGE]);
    assert!(
        !output("dpkg", &["-L", PACKAGE]).status.success(),
        "dpkg -L still knows {PACKAGE} after the purge"
    );
    let left: Vec<&str> = before
        .iter()
        .filter(|(p, existed)| !**existed && exists(p))
        .map(|(p, _)| *p)
        .collect();
    assert!(left.is_empty(), "the purge left {left:?}");
    assert!(
        !exists("/etc/slurm-supervisor"),
        "the purge left /etc/slurm-supervisor"
    );
    // Nor any trace of the unit: a mask from `dpkg -r`, deb-systemd-helper's records.
    let traces: Vec<PathBuf> = ["/etc/systemd", "/var/lib/systemd"]
        .iter()
        .flat_map(|d| common::system::files_under(Path::new(d)))
        .filter(|p| p.to_string_lossy().contains("slurm-supervisord"))
        .collect();
    assert!(traces.is_empty(), "the purge left {traces:?}");
}
