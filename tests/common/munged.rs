//! A private munged for a test: Debian's, with its own key (1024 random bytes, mode
//! 0400), socket, pid, log and seed files in a temporary folder, stopped when the test
//! ends. The host's munged, and the dev clusters', are never touched.

use slurm_supervisor::plumbing::munge::{Munge, MungeError};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a munged may take to answer after it starts (it takes a few milliseconds).
const START_WITHIN: Duration = Duration::from_secs(30);
/// How long a munged may take to stop on SIGTERM before it is killed.
const STOP_WITHIN: Duration = Duration::from_secs(10);

/// A program of Debian's munge, found where Debian puts it or on PATH; the test fails
/// naming the package when it is missing.
pub fn program(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    [PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")]
        .into_iter()
        .chain(std::env::split_paths(&path))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} is missing: these tests start a private munged; install Debian's \
                 munge (`apt-get install munge`, which scripts/test does) and run them again"
            )
        })
}

/// Waits until `f` holds, looking every 20 ms; panics naming `what` after `within`.
pub fn wait_for(what: &str, within: Duration, f: impl FnMut() -> bool) {
    super::wait_for_every(what, within, Duration::from_millis(20), f)
}

/// A private munged with its own key, answering on its own socket.
pub struct Munged {
    child: Child,
    dir: tempfile::TempDir,
}

impl Munged {
    pub fn start() -> Munged {
        let munged = program("munged");
        let dir = tempfile::Builder::new()
            .prefix("ssv-munged-")
            .tempdir()
            .unwrap();
        // Other users (alice, bob) reach the socket through the folder; munged accepts a
        // folder that only its owner may write.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let key = dir.path().join("munge.key");
        let mut bytes = [0u8; 1024];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .unwrap();
        std::fs::write(&key, bytes).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        let log = std::fs::File::create(dir.path().join("stderr")).unwrap();
        let mut cmd = Command::new(munged);
        cmd.arg("--foreground")
            .arg(format!("--socket={}", dir.path().join("socket").display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--log-file={}", dir.path().join("log").display()))
            .arg(format!("--pid-file={}", dir.path().join("pid").display()))
            .arg(format!("--seed-file={}", dir.path().join("seed").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        // Killed with the test's thread, should the test be killed before `Drop` runs.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start munged: {e}"));
        let mut m = Munged { child, dir };
        let client = m.client();
        wait_for("munged to answer on its socket", START_WITHIN, || {
            if let Some(status) = m.child.try_wait().unwrap() {
                panic!(
                    "munged stopped at start ({status}): {}",
                    std::fs::read_to_string(m.dir.path().join("stderr")).unwrap_or_default()
                );
            }
            match client.encode(b"", None, None) {
                Ok(_) => true,
                Err(MungeError::Socket { .. }) => false,
                Err(e) => panic!("munged answered with an error: {e}"),
            }
        });
        m
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("socket")
    }

    /// This process's client of this munged.
    pub fn client(&self) -> Munge {
        Munge::open(Some(&self.socket())).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs one of munge's commands as `user` (with `user`'s group, or `group` as primary
    /// group) against this munged, `input` on its stdin.
    pub fn run_as(
        &self,
        (user, group): (&str, Option<&str>),
        program_name: &str,
        args: &[&str],
        input: &[u8],
    ) -> Output {
        let mut runuser = Command::new("runuser");
        runuser.args(["-u", user]);
        if let Some(group) = group {
            runuser.args(["-g", group]);
        }
        self.run_under(runuser.arg("--"), user, program_name, args, input)
    }

    /// `program_name` run as `uid` (and gid), which needs no account on this host: Slurm's
    /// own uid, say, where Slurm's packages (which make the account) are not installed.
    pub fn run_as_uid(&self, uid: u32, program_name: &str, args: &[&str], input: &[u8]) -> Output {
        let mut setpriv = Command::new("setpriv");
        setpriv.args([
            format!("--reuid={uid}"),
            format!("--regid={uid}"),
            "--clear-groups".to_string(),
            "--".to_string(),
        ]);
        self.run_under(
            &mut setpriv,
            &format!("uid {uid}"),
            program_name,
            args,
            input,
        )
    }

    fn run_under(
        &self,
        under: &mut Command,
        user: &str,
        program_name: &str,
        args: &[&str],
        input: &[u8],
    ) -> Output {
        let mut child = under
            .arg(program(program_name))
            .arg(format!("--socket={}", self.socket().display()))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {program_name} as {user}: {e}"));
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    }
}

impl Drop for Munged {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + STOP_WITHIN;
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
