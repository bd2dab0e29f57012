//! A private MariaDB server for one test: Debian's `mariadbd` on a fresh data directory
//! (`mariadb-install-db`) in a temporary folder, its own socket there, listening on
//! 127.0.0.1 on a free port, stopped (and its folder removed) when dropped. The server a
//! site runs, or the dev cluster's (`scripts/dev-cluster`), is never touched: every option
//! file is ignored (`--no-defaults`).
//!
//! Without the server's programs the test fails, saying what to install, as the real-Slurm
//! tests fail without their cluster: a test that skips would pass having tested nothing.
//! `scripts/test` installs Debian's mariadb-server before it runs any test.

#![allow(dead_code)]

use slurm_supervisor::store::cluster::StoreUrl;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// What the supervisor's database user may do, as docs/cluster.md tells admins to grant
/// it (`the_grants_are_those_the_docs_give` checks that the doc says exactly this).
pub const GRANTS: &str = "SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX";

/// How long a server may take to answer after it starts (it takes about a second).
const START_WITHIN: Duration = Duration::from_secs(60);
/// How long a server may take to stop on SIGTERM before it is killed.
const STOP_WITHIN: Duration = Duration::from_secs(30);

/// A program of Debian's mariadb-server (or its client), found on PATH or where Debian
/// puts it; the test fails naming the package when it is missing.
pub fn program(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} is missing: these tests start a private MariaDB server; install \
                 Debian's mariadb-server (`apt-get install mariadb-server`, which \
                 scripts/test does) and run them again"
            )
        })
}

/// Waits until `f` holds (a fact: a server answering, a lease expired by the server's
/// clock), looking every 20 ms; panics naming `what` after `within`.
pub fn wait_for(what: &str, within: Duration, f: impl FnMut() -> bool) {
    crate::common::wait_for_every(what, within, Duration::from_millis(20), f)
}

fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// The name of this process's user, whom the server's admin account is for (through the
/// socket, by `unix_socket` authentication): root in scripts/test and CI.
fn me() -> (String, bool) {
    let uid = nix::unistd::geteuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| panic!("uid {uid} has no name: MariaDB's socket login needs one"));
    (user, uid.is_root())
}

pub struct MariaDb {
    server: Child,
    dir: tempfile::TempDir,
    port: u16,
    admin: String,
}

impl MariaDb {
    /// A fresh server, answering.
    pub fn start() -> MariaDb {
        let (admin, root) = me();
        let dir = tempfile::Builder::new()
            .prefix("ssv-mariadb-")
            .tempdir()
            .unwrap();
        let data = dir.path().join("data");
        // A temporary folder of its own: servers bootstrapped side by side in one /tmp
        // collide on their temporary tables' names ("Unknown table 'mysql.tmp_user_sys'").
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let mut install = Command::new(program("mariadb-install-db"));
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--user={admin}"))
            .args([
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
                "--innodb-log-file-size=8M",
            ]);
        let out = output(&mut install);
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The port is free when asked for, and may be taken before the server binds it:
        // then the server stops at once saying so, and another port is tried.
        for _ in 0..5 {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .unwrap()
                .port();
            if let Some(server) = Self::spawn(dir.path(), &data, port, root) {
                return MariaDb {
                    server,
                    dir,
                    port,
                    admin,
                };
            }
        }
        panic!("mariadbd found no free port in five tries");
    }

    /// Starts mariadbd and waits until it answers; `None` if it could not bind `port`.
    fn spawn(dir: &Path, data: &Path, port: u16, root: bool) -> Option<Child> {
        let log = dir.join("mariadbd.log");
        let mut cmd = Command::new(program("mariadbd"));
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", dir.join("tmp").display()))
            .arg(format!("--socket={}", dir.join("sock").display()))
            .arg(format!("--pid-file={}", dir.join("pid").display()))
            .arg(format!("--log-error={}", log.display()))
            .arg(format!("--port={port}"))
            .args([
                "--bind-address=127.0.0.1",
                "--innodb-log-file-size=8M",
                "--innodb-buffer-pool-size=16M",
                "--skip-log-bin",
                "--skip-name-resolve",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if root {
            cmd.arg("--user=root");
        }
        // Killed with the test's thread, should the test itself be killed before its
        // `Drop` runs (a harness timeout, a Ctrl-C).
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let mut server = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start mariadbd: {e}"));
        let deadline = Instant::now() + START_WITHIN;
        loop {
            if let Some(status) = server.try_wait().unwrap() {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains("Address already in use") {
                    return None;
                }
                panic!("mariadbd stopped at start ({status}); its log:\n{text}");
            }
            let ping = Command::new(program("mariadb-admin"))
                .arg("--no-defaults")
                .arg(format!("--socket={}", dir.join("sock").display()))
                .args(["--connect-timeout=2", "ping"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if ping.is_ok_and(|s| s.success()) {
                return Some(server);
            }
            if Instant::now() > deadline {
                let _ = server.kill();
                let _ = server.wait();
                panic!(
                    "mariadbd did not answer within {START_WITHIN:?}; its log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs SQL as the server's admin (through the socket) and returns what it printed,
    /// tab-separated, without column names. Panics with the server's message on error.
    pub fn admin_sql(&self, sql: &str) -> String {
        let out = output(
            Command::new(program("mariadb"))
                .arg("--no-defaults")
                .arg(format!(
                    "--socket={}",
                    self.dir.path().join("sock").display()
                ))
                .arg(format!("--user={}", self.admin))
                .args(["--batch", "--skip-column-names", "--execute", sql]),
        );
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    /// A database and a user of the supervisor's, as docs/cluster.md tells an admin to
    /// make them (the user may connect only from 127.0.0.1, and has only [`GRANTS`] on
    /// its database); returns the `[store] url` that names them.
    pub fn supervisor_database(&self, database: &str, user: &str, password: &str) -> StoreUrl {
        self.admin_sql(&format!(
            "CREATE DATABASE {database};
             CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{password}';
             GRANT {GRANTS} ON {database}.* TO '{user}'@'127.0.0.1';"
        ));
        format!("mysql://{user}@127.0.0.1:{}/{database}", self.port)
            .parse()
            .unwrap()
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        self.stop();
    }
}

impl MariaDb {
    /// Starts the stopped server again, on the same data and port.
    pub fn restart(&mut self) {
        let (_, root) = me();
        let data = self.dir.path().join("data");
        self.server = Self::spawn(self.dir.path(), &data, self.port, root)
            .unwrap_or_else(|| panic!("mariadbd could not have its port {} again", self.port));
    }

    /// Stops the server (SIGTERM; SIGKILL after a while), keeping its folder: a database
    /// that stopped answering.
    pub fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.server.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + STOP_WITHIN;
        loop {
            match self.server.try_wait() {
                Ok(Some(_)) => return,
                Err(e) if e.kind() != ErrorKind::Interrupted => return,
                _ => {}
            }
            if Instant::now() > deadline {
                let _ = self.server.kill();
                let _ = self.server.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
