//! A root daemon in system-wide mode serving real Unix users (alice, bob), with the fake
//! Slurm of tests/fake-slurm, as an admin would run it: started like systemd starts it (a
//! session leader with no terminal, in `/`), one socket for everyone, and a copy of
//! `supervisorctl` that every user can run.

use super::fake::Fake;
use super::{scratch_root, Daemon, CTL, DAEMON};
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub fn chown(p: &Path, user: &str) {
    let u = User::get(user);
    std::os::unix::fs::lchown(p, Some(u.uid), Some(u.gid)).unwrap();
}

/// A Unix user of the test host.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

static USERADD: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl User {
    /// The user, created (`useradd -m`) if missing; the tests run as root.
    pub fn get(name: &str) -> User {
        let _one_at_a_time = USERADD.lock().unwrap_or_else(|e| e.into_inner());
        let find = || nix::unistd::User::from_name(name).ok().flatten();
        let u = match find() {
            Some(u) => u,
            None => {
                let out = Command::new("useradd").args(["-m", name]).output().unwrap();
                find().unwrap_or_else(|| {
                    panic!(
                        "cannot create user {name}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    )
                })
            }
        };
        User {
            name: name.to_string(),
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
        }
    }
}

/// A root daemon in system-wide mode with its fake Slurm; everything is under one
/// temporary folder (removed at the end unless the test failed).
pub struct System {
    pub d: Daemon,
    pub fake: Fake,
    /// A copy of supervisorctl every user can run.
    pub ctl: PathBuf,
    pub socket: PathBuf,
}

impl System {
    /// `slurm` goes into the `[slurm]` section, `extra` at the end of the config.
    pub fn start(slurm: &str, extra: &str) -> System {
        let mut s = Self::prepare(slurm, extra);
        s.spawn();
        s
    }

    /// Everything but starting the daemon.
    pub fn prepare(slurm: &str, extra: &str) -> System {
        if !nix::unistd::geteuid().is_root() {
            panic!("the security tests run a root daemon for real users: run them as root");
        }
        for u in ["alice", "bob"] {
            User::get(u);
        }
        let dir = tempfile::Builder::new()
            .prefix("ssv-sys-")
            .tempdir_in(scratch_root())
            .unwrap();
        let root = dir.path().to_path_buf();
        chmod(&root, 0o755);
        let fake = Fake::new(&root.join("fake"));
        chmod(&root.join("fake"), 0o755);
        // The fake keeps its state beside its links, and runs as each job's owner.
        chmod(&fake.bin, 0o777);
        let run_dir = root.join("run");
        std::fs::create_dir(&run_dir).unwrap();
        chmod(&run_dir, 0o755);
        let socket = run_dir.join("supervisor.sock");
        let ctl = root.join("supervisorctl");
        super::copy_executable(std::path::Path::new(CTL), &ctl);
        std::fs::create_dir(root.join("home")).unwrap();
        chmod(&root.join("home"), 0o755);
        for u in ["alice", "bob"] {
            let h = root.join("home").join(u);
            std::fs::create_dir(&h).unwrap();
            chmod(&h, 0o700);
            chown(&h, u);
        }
        let config = root.join("supervisor.toml");
        // `slurm` (lines of the [slurm] table) may set its own command_timeout.
        let timeout = if slurm.contains("command_timeout") {
            ""
        } else {
            "command_timeout = \"5s\"\n"
        };
        let text = format!(
            "state_dir = {:?}\nsocket = {:?}\npoll_interval = \"1s\"\n\
             [slurm]\nbin_dir = {:?}\n{timeout}sbatch_timeout = \"60s\"\n{slurm}\n\
             [retry]\nbackoff_initial = \"1s\"\nbackoff_max = \"2s\"\nbackoff_jitter = 0.0\n\
             [[rules]]\nname = \"connection-refused\"\nkind = \"transient\"\nstderr = '(?i)connection refused'\n\
             {extra}\n",
            root.join("state").display().to_string(),
            socket.display().to_string(),
            fake.bin.display().to_string(),
        );
        std::fs::write(&config, text).unwrap();
        chmod(&config, 0o644);
        System {
            d: Daemon {
                dir,
                config,
                child: None,
                extra_env: Vec::new(),
                launcher: Vec::new(),
            },
            fake,
            ctl,
            socket,
        }
    }

    pub fn root(&self) -> PathBuf {
        self.d.dir.path().to_path_buf()
    }

    pub fn state_dir(&self) -> PathBuf {
        self.d.state_dir()
    }

    /// A user's own folder (0700, theirs): where they work and submit from.
    pub fn home(&self, user: &str) -> PathBuf {
        self.root().join("home").join(user)
    }

    /// Starts the daemon as systemd would (its own session, no terminal, in `/`) and waits
    /// until it answers.
    pub fn spawn(&mut self) {
        let child = self.daemon_command(&self.d.config.clone()).spawn().unwrap();
        self.d.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.d.ctl(&["status", "--json"]).status.success() {
                return;
            }
            if let Some(status) = self.d.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "slurm-supervisord exited early ({status}); log:\n{}",
                    self.d.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "daemon did not answer within 60s; log:\n{}",
                self.d.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The daemon's command line for `config`, logging to daemon.log, as under systemd.
    pub fn daemon_command(&self, config: &Path) -> Command {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root().join("daemon.log"))
            .unwrap();
        // Under the daemon's launcher, if it has one (e.g. `nsenter --net=...`).
        let mut cmd = match self.d.launcher.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(DAEMON);
                c
            }
            None => Command::new(DAEMON),
        };
        cmd.arg("--config")
            .arg(config)
            .env("SLURM_SUPERVISOR_LOG", "debug")
            .env_remove("NOTIFY_SOCKET")
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in &self.d.extra_env {
            cmd.env(k, v);
        }
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }

    pub fn pid(&self) -> i32 {
        self.d.child.as_ref().expect("daemon running").id() as i32
    }

    /// Whether the daemon process is still running (not exited).
    pub fn alive(&mut self) -> Option<std::process::ExitStatus> {
        self.d
            .child
            .as_mut()
            .expect("daemon running")
            .try_wait()
            .unwrap()
    }

    /// A command run as `user` (uid, gid, no supplementary groups) in their folder, with
    /// the test's environment and the user's HOME/USER/LOGNAME.
    pub fn user_command(&self, user: &str, program: impl AsRef<OsStr>) -> Command {
        let u = User::get(user);
        let mut cmd = Command::new(program);
        cmd.uid(u.uid)
            .gid(u.gid)
            .env("HOME", format!("/home/{user}"))
            .env("USER", user)
            .env("LOGNAME", user)
            .current_dir(self.home(user))
            .stdin(Stdio::null());
        cmd
    }

    /// `supervisorctl --config <the config> <args>` as `user`, in their folder.
    pub fn ctl_command(&self, user: &str, args: &[&str]) -> Command {
        let mut cmd = self.user_command(user, &self.ctl);
        cmd.arg("--config").arg(&self.d.config).args(args);
        cmd
    }

    pub fn as_user(&self, user: &str, args: &[&str]) -> Output {
        self.ctl_command(user, args).output().unwrap()
    }

    /// `as_user`, but killed (and reported as `None`) if it takes longer than `within`.
    pub fn as_user_within(&self, user: &str, args: &[&str], within: Duration) -> Timed {
        run_within(self.ctl_command(user, args), within)
    }

    /// `submit -- <args>` as `user`; returns the job id, failing the test otherwise.
    pub fn submit_as(&self, user: &str, args: &[&str]) -> String {
        let mut all = vec!["submit", "--"];
        all.extend_from_slice(args);
        let out = self.as_user(user, &all);
        assert!(
            out.status.success(),
            "{user}'s submit {args:?} failed ({:?}): {}\nlog:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr),
            super::tail(&self.d.log(), 40)
        );
        let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert!(
            !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()),
            "submit printed {id:?}"
        );
        id
    }

    /// Writes a file owned by `user` (0644) in their folder.
    pub fn write_as(&self, user: &str, name: &str, content: &[u8]) -> PathBuf {
        let p = self.home(user).join(name);
        std::fs::write(&p, content).unwrap();
        chmod(&p, 0o644);
        chown(&p, user);
        p
    }

    /// The JSON of a read command run as `user` (exit 0 or 1).
    pub fn json_as(&self, user: &str, args: &[&str]) -> serde_json::Value {
        let out = self.as_user(user, args);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{user}: {args:?} failed ({:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{user}: {args:?} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// `python3 -c <code> <args>` as `user`.
    pub fn python_as(&self, user: &str, code: &str) -> Command {
        let mut cmd = self.user_command(user, "python3");
        cmd.arg("-c").arg(code);
        cmd
    }

    /// Sends `line` over the control socket as `user` (one connection, as the client does)
    /// and returns the raw answer.
    pub fn raw_request_as(&self, user: &str, line: &[u8]) -> Vec<u8> {
        const SEND: &str = r##"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(60)
s.connect(sys.argv[1])
# The daemon may answer (a refusal) and close before it has read the request: its answer
# is still there to read, as the client reads it.
try:
    s.sendall(sys.stdin.buffer.read())
    s.shutdown(socket.SHUT_WR)
except (BrokenPipeError, ConnectionResetError):
    pass
out = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    out += b
sys.stdout.buffer.write(out)
"##;
        let mut cmd = self.python_as(user, SEND);
        cmd.arg(&self.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(line).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "raw request as {user} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// The fake's sbatch calls made as `user`.
    pub fn sbatch_calls_of(&self, user: &str) -> Vec<serde_json::Value> {
        self.fake
            .sbatch_calls()
            .into_iter()
            .filter(|c| c["user"] == user)
            .collect()
    }

    /// How many times the fake's `cmd` (squeue, sacct, sbatch, ...) has been run.
    pub fn calls(&self, cmd: &str) -> usize {
        std::fs::read_to_string(self.fake.bin.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v["cmd"] == cmd))
            .count()
    }
}

/// What a command bounded in time did: its output, or `None` if it was killed at the
/// deadline; and how long it took.
pub struct Timed {
    pub output: Option<Output>,
    pub took: Duration,
}

/// Runs `cmd` to its end, or kills it after `within`.
pub fn run_within(mut cmd: Command, within: Duration) -> Timed {
    use std::io::Read;
    let start = Instant::now();
    let mut child: Child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drained as the child writes, so a large output cannot block it.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Timed {
                output: Some(Output {
                    status,
                    stdout: out.join().unwrap(),
                    stderr: err.join().unwrap(),
                }),
                took: start.elapsed(),
            };
        }
        if start.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            return Timed {
                output: None,
                took: start.elapsed(),
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Disk space used under `dir` (allocated blocks, as `du` counts them).
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in entries.flatten() {
        let Ok(m) = e.path().symlink_metadata() else {
            continue;
        };
        total += m.blocks() * 512;
        if m.is_dir() {
            total += disk_usage(&e.path());
        }
    }
    total
}

/// Every non-directory under `dir`.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        match p.symlink_metadata() {
            Ok(m) if m.is_dir() => out.extend(files_under(&p)),
            Ok(_) => out.push(p),
            Err(_) => {}
        }
    }
    out
}

/// The controlling terminal of a process (field 7 of /proc/PID/stat; 0: none).
pub fn tty_nr(pid: i32) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) is in parentheses and may hold spaces.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    after
        .split_whitespace()
        .nth(4)
        .and_then(|f| f.parse().ok())
        .unwrap_or(-1)
}

/// A small tmpfs mounted for one test (needs root), unmounted on drop.
pub struct Mount(pub PathBuf);

impl Mount {
    pub fn tmpfs(at: &Path, size: &str) -> Mount {
        std::fs::create_dir_all(at).unwrap();
        super::run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0711"),
                "tmpfs",
                at.to_str().unwrap(),
            ],
        );
        Mount(at.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the filesystem of `dir` to the last byte with `dir/filler`; returns it.
pub fn fill(dir: &Path) -> PathBuf {
    let f = dir.join("filler");
    let _ = Command::new("dd")
        .args([
            "if=/dev/zero",
            &format!("of={}", f.display()),
            "bs=4k",
            "oflag=append",
            "conv=notrunc",
        ])
        .output();
    f
}

/// A FUSE mount (needs root) that never answers: its connection is never initialised,
/// so every request into it (a `chdir` below it, by any user: `allow_other`) waits until
/// the connection is aborted, as on a user's hung FUSE mount or a dead NFS server. The
/// test must not touch it itself. Dropping it aborts the connection (the waiting calls
/// fail) and unmounts it.
pub struct HungMount {
    pub dir: PathBuf,
    fuse: Option<std::fs::File>,
}

impl HungMount {
    pub fn new(at: &Path) -> HungMount {
        use std::os::fd::AsRawFd;
        std::fs::create_dir_all(at).unwrap();
        if !Path::new("/dev/fuse").exists() {
            // A fresh machine may not have loaded the module yet.
            let _ = Command::new("modprobe").arg("fuse").status();
        }
        let fuse = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .expect("/dev/fuse (the fuse module) is needed");
        let opts = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions",
            fuse.as_raw_fd()
        );
        let c = |s: &str| std::ffi::CString::new(s).unwrap();
        let (src, dir, fstype, data) =
            (c("ssv-hung"), c(at.to_str().unwrap()), c("fuse"), c(&opts));
        // SAFETY: valid C strings; a new mount with its own fd.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                dir.as_ptr(),
                fstype.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )
        };
        assert_eq!(r, 0, "mount fuse: {}", std::io::Error::last_os_error());
        HungMount {
            dir: at.to_path_buf(),
            fuse: Some(fuse),
        }
    }
}

impl Drop for HungMount {
    fn drop(&mut self) {
        // Closing the device aborts the connection: whatever waits in it fails at once.
        drop(self.fuse.take());
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}
