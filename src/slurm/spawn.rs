//! Starting a program without copying the daemon.
//!
//! Rust's `std::process::Command` uses `posix_spawn` (no copy of the caller's memory) only
//! when no `pre_exec` hook, uid or gid is asked for; otherwise it `fork`s, and the kernel
//! copies the daemon's page tables (tens of MiB) for each Slurm command, only for the
//! child's `execve` to tear them down again: about a third of the daemon's time in a burst
//! of submits (docs/benchmarks.md, "Bad days"). The daemon needs such hooks: a Slurm
//! command gets `PR_SET_PDEATHSIG`, and in system mode it runs as the user.
//!
//! [`Command::spawn`] does what glibc's `posix_spawn` does, plus those steps: it starts
//! the child with `clone(CLONE_VM | CLONE_VFORK)`, so the child runs in the daemon's
//! memory on a stack of its own while the calling thread waits, until the child has
//! `execve`d (or failed and exited). Everything the child needs (argv, environment, group
//! list, paths) is prepared before the clone; the child only makes system calls. In order:
//!
//! 1. handlers the daemon installed are reset to the default (a signal arriving before
//!    `execve` must not run the daemon's handler in the child), and SIGPIPE too (the Rust
//!    runtime ignores it; std's `Command` resets it the same way); the pipes onto fds
//!    0-2, every other fd closed (`close_range`): before the user could hold the child
//!    (steps 3 and 5), so a held child keeps no other start's pipe open;
//! 2. its own process group, when asked (notification programs);
//! 3. the user's credentials: supplementary groups, gid, uid, in that order, with the raw
//!    system calls. glibc's `setuid` and friends must not be used: they signal every thread
//!    of the process to change its credentials too, and this child shares the daemon's
//!    thread list in memory. The group list was resolved in the daemon with
//!    `getgrouplist`, on the starter thread before the clone (the group database may be
//!    slow, and no one else waits on that thread): `initgroups` in the child would do NSS
//!    lookups (allocating, taking glibc locks another daemon thread may hold), a possible
//!    deadlock;
//!    Then the process is made not dumpable (see `child_setup`: else, with
//!    fs.suid_dumpable=1, the user could open the daemon's memory through this child);
//! 4. `PR_SET_PDEATHSIG`, after the credentials (changing them clears it), then a check
//!    that the daemon is still its parent (if it died before the `prctl`, no signal comes);
//! 5. `chdir` into the working directory as the user, so a directory the user may not
//!    enter is refused as it would be for them;
//! 6. an empty signal mask, `execve`.
//!
//! A failing step stores its errno where the daemon reads it after the clone returns, and
//! the child exits; [`Command::spawn`] then returns that error (as std does for a failing
//! `pre_exec`). The child is waited for through a pidfd (`CLONE_PIDFD`) registered with
//! tokio, and signalled through it, so a reused pid is never hit.
//!
//! Who waits: until the child execs, the thread that cloned it is suspended, and a user
//! can hold their child there: a working directory on their own FUSE mount or a dead NFS
//! server, or a SIGSTOP (it runs as them). So the clone is never made on the daemon's
//! loop (or on a runtime thread) for a program run as a user: [`Command::spawn`] hands
//! it to a *starter* thread and awaits the answer. A user has at most one child being
//! started at a time (their next start waits for it), and another starter thread is made
//! when every one is busy, up to [`MAX_STARTERS`]: a user who holds their child holds up
//! only their own starts (and whoever awaits one of those: the callers bound the wait by
//! the command's timeout). The daemon's own commands (no credentials given: as the
//! daemon's user, in a directory it chose) cannot be held by anyone else and are cloned
//! on the calling thread. A watchdog thread kills a child that has not exec'd within
//! [`EXEC_DEADLINE`], and `spawn` returns `TimedOut`.
//!
//! PDEATHSIG fires when the *thread* that started the child exits: starter threads never
//! exit, and the daemon's own commands are started from its loop or the runtime's
//! workers, which live as long as the process; so a child dies with the daemon and not
//! before.

use super::RunAs;
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// The child's stack until it calls `execve`. It runs a handful of small frames and
/// system-call wrappers (glibc's `posix_spawn` gives its child 32 KiB plus the argv).
/// A guard page below it (`Stack`) stops an overflow.
const CHILD_STACK: usize = 64 << 10;

/// How long a child may take from its start to `execve` before it is killed. It takes
/// microseconds; only a working directory that does not answer (a FUSE mount of the
/// user's, a dead NFS server) or a SIGSTOP (the child runs as the user) holds it, and its
/// starter thread waits for it meanwhile (`CLONE_VFORK`).
pub const EXEC_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// A child between its start and its `execve`, as the watchdog sees it.
struct Watch {
    /// Written by the kernel (CLONE_PIDFD) before the child runs; -1 until then.
    pidfd: AtomicI32,
    deadline: std::time::Instant,
    state: std::sync::Mutex<WatchState>,
    changed: std::sync::Condvar,
}

#[derive(PartialEq)]
enum WatchState {
    Waiting,
    /// `spawn` is past the clone: the pidfd is its own.
    Finished,
    /// The watchdog killed the child at the deadline.
    Killed,
}

impl Watch {
    /// Called by `spawn` once the clone returned: whether the watchdog killed the child.
    fn finish(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let killed = *state == WatchState::Killed;
        *state = WatchState::Finished;
        self.changed.notify_all();
        killed
    }
}

/// A new watch with `limit` from now, handed to the watchdog thread (started at the first
/// call), which kills the child if `spawn` has not finished by the deadline. One thread
/// for the process: the children are watched in the order they were handed over, each
/// until it exec'd or its deadline. The deadline is taken under the queue's lock, so the
/// queue's order is the deadlines' order (all have the same length): starts run on many
/// threads, and a watch queued behind a later deadline would be killed late.
fn watchdog(limit: std::time::Duration) -> Arc<Watch> {
    static QUEUE: std::sync::OnceLock<
        Option<std::sync::Mutex<std::sync::mpsc::Sender<Arc<Watch>>>>,
    > = std::sync::OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Arc<Watch>>();
        std::thread::Builder::new()
            .name("spawn-watchdog".into())
            .spawn(move || {
                for w in rx {
                    let mut state = w.state.lock().unwrap_or_else(|e| e.into_inner());
                    while *state == WatchState::Waiting {
                        let left = w
                            .deadline
                            .saturating_duration_since(std::time::Instant::now());
                        if left.is_zero() {
                            let fd = w.pidfd.load(Ordering::SeqCst);
                            if fd < 0 {
                                // Not cloned yet (its starter thread was descheduled
                                // between queueing this and the clone): look again
                                // shortly. Given up on, a child held after that would be
                                // watched by no one, and its thread and its user's
                                // starts would wait for good. A clone that fails ends
                                // the watch (`finish`).
                                state = w
                                    .changed
                                    .wait_timeout(state, std::time::Duration::from_millis(10))
                                    .unwrap_or_else(|e| e.into_inner())
                                    .0;
                                continue;
                            }
                            // SAFETY: `spawn` has not finished (checked under the
                            // lock it takes first), so `fd` is still this child's
                            // pidfd; a pidfd names exactly that process.
                            unsafe { kill_by_pidfd(fd) };
                            *state = WatchState::Killed;
                            break;
                        }
                        state = w
                            .changed
                            .wait_timeout(state, left)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
            })
            .ok()
            .map(|_| std::sync::Mutex::new(tx))
    });
    let new = |limit| {
        Arc::new(Watch {
            pidfd: AtomicI32::new(-1),
            deadline: std::time::Instant::now() + limit,
            state: std::sync::Mutex::new(WatchState::Waiting),
            changed: std::sync::Condvar::new(),
        })
    };
    // Without the thread (it could not be started) children are not watched.
    let Some(q) = queue else {
        return new(limit);
    };
    let q = q.lock().unwrap_or_else(|e| e.into_inner());
    let watch = new(limit);
    let _ = q.send(watch.clone());
    watch
}

/// Who a program runs as. Its supplementary groups are resolved in the daemon, on the
/// starter thread right before the clone: the group database may be slow (sssd, LDAP),
/// and a start waits on that thread, never on the caller's (the loop).
#[derive(Debug, Clone)]
pub struct Credentials {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    groups: Groups,
    /// Fault injection: the thread that resolved the groups notes itself here.
    #[cfg(test)]
    resolved_on: Option<std::sync::Arc<std::sync::Mutex<Option<std::thread::ThreadId>>>>,
}

#[derive(Debug, Clone)]
enum Groups {
    /// `getgrouplist` of this user name and the primary gid, at each start.
    Of(CString),
    /// Given as they are (tests).
    #[cfg(test)]
    Given(Vec<libc::gid_t>),
}

impl Credentials {
    /// The credentials of `who`: their group list is read from the system's group
    /// database when the program is started.
    pub fn of(who: &RunAs) -> Credentials {
        Credentials {
            uid: who.uid,
            gid: who.gid,
            groups: Groups::Of(who.user.clone()),
            #[cfg(test)]
            resolved_on: None,
        }
    }

    /// The supplementary groups, as `initgroups` would set them (the primary gid
    /// included).
    fn groups(&self) -> io::Result<Vec<libc::gid_t>> {
        #[cfg(test)]
        if let Some(slot) = &self.resolved_on {
            *slot.lock().unwrap() = Some(std::thread::current().id());
        }
        match &self.groups {
            Groups::Of(user) => {
                let groups = nix::unistd::getgrouplist(user, nix::unistd::Gid::from_raw(self.gid))
                    .map_err(io::Error::from)?;
                Ok(groups.into_iter().map(|g| g.as_raw()).collect())
            }
            #[cfg(test)]
            Groups::Given(g) => Ok(g.clone()),
        }
    }
}

/// A program to start: what std's `Command` holds, plus the daemon's own steps.
#[derive(Debug, Clone)]
pub struct Command {
    program: CString,
    argv: Vec<CString>,
    /// `None`: the daemon's own environment, or none at all for a process run as a
    /// user ([`Command::run_as`]).
    env: Option<Vec<CString>>,
    cwd: Option<CString>,
    credentials: Option<Credentials>,
    parent_death: bool,
    process_group: bool,
    stdin: bool,
    /// A NUL byte in an argument, a variable or a path: refused by `spawn`, as std does.
    nul: bool,
    /// How long the child may take to reach `execve` ([`EXEC_DEADLINE`]).
    exec_deadline: std::time::Duration,
    /// Fault injection: the child stops itself (SIGSTOP) right before `execve`.
    #[cfg(test)]
    stop_before_exec: bool,
    /// Fault injection: the child writes a byte to the first fd, then waits for one on
    /// the second, before `execve`.
    #[cfg(test)]
    hold_before_exec: Option<(RawFd, RawFd)>,
    /// Fault injection: the starter thread panics instead of answering.
    #[cfg(test)]
    panic_in_starter: bool,
    /// Fault injection: the starter thread sleeps between queueing the watch and the clone.
    #[cfg(test)]
    delay_before_clone: std::time::Duration,
}

fn cstring(s: &OsStr, nul: &mut bool) -> CString {
    CString::new(s.as_bytes()).unwrap_or_else(|_| {
        *nul = true;
        CString::default()
    })
}

impl Command {
    /// `program` is executed as given (a path; no `$PATH` search), with argv[0] = program.
    pub fn new(program: impl AsRef<OsStr>) -> Command {
        let mut nul = false;
        let program = cstring(program.as_ref(), &mut nul);
        Command {
            argv: vec![program.clone()],
            program,
            env: None,
            cwd: None,
            credentials: None,
            parent_death: false,
            process_group: false,
            stdin: false,
            nul,
            exec_deadline: EXEC_DEADLINE,
            #[cfg(test)]
            stop_before_exec: false,
            #[cfg(test)]
            hold_before_exec: None,
            #[cfg(test)]
            panic_in_starter: false,
            #[cfg(test)]
            delay_before_clone: std::time::Duration::ZERO,
        }
    }

    pub fn args<S: AsRef<OsStr>>(&mut self, args: impl IntoIterator<Item = S>) -> &mut Self {
        for a in args {
            let a = cstring(a.as_ref(), &mut self.nul);
            self.argv.push(a);
        }
        self
    }

    /// Replaces the daemon's environment by exactly these variables.
    pub fn env_clear_with<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        &mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> &mut Self {
        let mut env = Vec::new();
        for (k, v) in vars {
            let mut kv = k.as_ref().as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_ref().as_bytes());
            env.push(CString::new(kv).unwrap_or_else(|_| {
                self.nul = true;
                CString::default()
            }));
        }
        self.env = Some(env);
        self
    }

    /// The working directory, entered after the credentials change.
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.cwd = Some(cstring(dir.as_ref().as_os_str(), &mut self.nul));
        self
    }

    /// Runs as `who` (supplementary groups, gid, uid).
    pub fn run_as(&mut self, who: Credentials) -> &mut Self {
        self.credentials = Some(who);
        self
    }

    /// The child is killed (SIGKILL) when the thread that started it exits.
    pub fn parent_death_kill(&mut self) -> &mut Self {
        self.parent_death = true;
        self
    }

    /// The child leads a new process group (so [`Child::kill_group`] reaches what it
    /// starts).
    pub fn process_group(&mut self) -> &mut Self {
        self.process_group = true;
        self
    }

    /// stdin is a pipe ([`Child::stdin`]); otherwise `/dev/null`.
    pub fn stdin_piped(&mut self) -> &mut Self {
        self.stdin = true;
        self
    }

    /// Starts the program, its stdout and stderr piped. Must be called within a tokio
    /// runtime (the pipes and the pidfd are registered with it). The clone is made on a
    /// starter thread (module docs, "Who waits"); dropping this future before it is
    /// ready never leaves a child behind (one started meanwhile is killed and reaped).
    pub async fn spawn(&self) -> io::Result<Child> {
        if self.nul {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "nul byte found in provided data",
            ));
        }
        // The daemon's own command (no one else's credentials): no other user can hold
        // it before execve, so it is cloned here, without a thread hop. The caller is the
        // loop or a runtime worker, threads that live as long as the process (PDEATHSIG).
        let Some(key) = self.credentials.as_ref().map(|c| Some(c.uid)) else {
            return self.start()?.into_child();
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<io::Result<Started>>();
        let cmd = self.clone();
        starters::run(
            key,
            Box::new(move || {
                // Its caller gave up while it waited its turn: nothing is started.
                if tx.is_closed() {
                    return;
                }
                #[cfg(test)]
                if cmd.panic_in_starter {
                    panic!("fault injection: the starter thread panics");
                }
                // Not taken (the caller gave up meanwhile): `Started` kills and reaps it.
                let _ = tx.send(cmd.start());
            }),
        )?;
        // Its thread dropped the answer (a panic, a bug): that may have been after the
        // clone, so the program may have run.
        let started = rx.await.map_err(|_| {
            may_have_started(io::Error::other("the thread starting the program failed"))
        })??;
        // The program has started: whatever fails now, it may have done its work.
        started.into_child().map_err(may_have_started)
    }

    /// The clone itself, on a starter thread: the child's pid, pidfd and pipes.
    fn start(&self) -> io::Result<Started> {
        if self.nul {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "nul byte found in provided data",
            ));
        }
        let groups = match &self.credentials {
            Some(c) => c.groups()?,
            None => Vec::new(),
        };
        let (child_stdin, parent_stdin) = if self.stdin {
            let (r, w) = pipe_pair()?;
            (r, Some(w))
        } else {
            let null = std::fs::File::open("/dev/null")?;
            (above_stdio(OwnedFd::from(null))?, None)
        };
        let (out_r, out_w) = pipe_pair()?;
        let (err_r, err_w) = pipe_pair()?;

        let inherited;
        let env: &[CString] = match &self.env {
            Some(e) => e,
            // A process of another user's gets none of the daemon's variables (they can
            // read its `/proc/PID/environ`; an `LD_PRELOAD` would load into it), even
            // from a caller that set none.
            None if self.credentials.is_some() => &[],
            None => {
                inherited = std::env::vars_os()
                    .filter_map(|(k, v)| {
                        let mut kv = k.as_bytes().to_vec();
                        kv.push(b'=');
                        kv.extend_from_slice(v.as_bytes());
                        CString::new(kv).ok()
                    })
                    .collect::<Vec<_>>();
                &inherited
            }
        };
        let argv: Vec<*const libc::c_char> = self
            .argv
            .iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let envp: Vec<*const libc::c_char> = env
            .iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let args = ChildArgs {
            program: self.program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            cwd: self.cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            credentials: self.credentials.as_ref().map(|c| (c.uid, c.gid)),
            groups: groups.as_ptr(),
            ngroups: groups.len(),
            parent_death: self.parent_death,
            parent_pid: std::process::id() as libc::pid_t,
            process_group: self.process_group,
            fds: [
                child_stdin.as_raw_fd(),
                out_w.as_raw_fd(),
                err_w.as_raw_fd(),
            ],
            error: AtomicI32::new(0),
            #[cfg(test)]
            stop_before_exec: self.stop_before_exec,
            #[cfg(test)]
            hold_before_exec: self.hold_before_exec,
        };
        let stack = Stack::new()?;
        // Until the child execs this (starter) thread is suspended, and the user may hold
        // the child there: a working directory on their FUSE mount or a dead NFS server,
        // or SIGSTOP (it runs as them). The watchdog kills a child that has not exec'd by
        // the deadline, which frees this thread.
        let watch = watchdog(self.exec_deadline);
        #[cfg(test)]
        std::thread::sleep(self.delay_before_clone);

        // SAFETY: blocking every signal of this thread around the clone means no handler
        // of the daemon runs in the child before it reset them (glibc's posix_spawn does
        // the same); the old mask is restored right after. `all` and `old` are valid
        // sigset_t values.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        // SAFETY: CLONE_PIDFD: the kernel writes the child's pidfd (close-on-exec) into
        // `watch.pidfd`, an aligned i32 that lives as long as `watch`, before the child
        // runs. CLONE_VM | CLONE_VFORK: the child shares this memory and this thread
        // is suspended until the child has called execve or exited, so everything `args`
        // points to (argv, envp, the strings, the groups, the fds) stays alive and
        // unchanged for as long as the child reads it, and `stack` is not used by anyone
        // else meanwhile. `child_main` only makes system calls (no allocation, no lock,
        // no unwinding) and writes nothing but `args.error`. Without CLONE_SIGHAND the
        // child's signal handlers are its own copy, so resetting them leaves the daemon's.
        let pid = unsafe {
            libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
                &args as *const ChildArgs as *mut libc::c_void,
                watch.pidfd.as_ptr(),
            )
        };
        let clone_error = io::Error::last_os_error();
        // SAFETY: restores the mask saved above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        drop(stack);
        // From here on the watchdog never touches the pidfd (it does so only under this
        // lock, before this).
        let killed = watch.finish();
        if pid < 0 {
            return Err(clone_error);
        }
        // SAFETY: the fd CLONE_PIDFD made for this child, owned by nobody else.
        let pidfd = unsafe { OwnedFd::from_raw_fd(watch.pidfd.load(Ordering::SeqCst)) };
        // The child has exec'd or exited: its ends of the pipes are its own now.
        drop((child_stdin, out_w, err_w));
        let failed = args.error.load(Ordering::SeqCst);
        if failed != 0 || killed {
            reap_blocking(pid);
            if failed != 0 && !killed {
                return Err(io::Error::from_raw_os_error(failed));
            }
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "killed: it had not started the program after {}s (held before execve, \
                     e.g. by a working directory that does not answer, or stopped)",
                    self.exec_deadline.as_secs_f64()
                ),
            ));
        }
        // From here on, dropping `started` kills and reaps the process.
        Ok(Started {
            pid,
            pidfd: Some(pidfd),
            stdin: parent_stdin,
            stdout: Some(out_r),
            stderr: Some(err_r),
        })
    }
}

/// An error of [`Command::spawn`] met when the program may have started (it is killed
/// then, but an sbatch may have reached Slurm first): never "it certainly did not run".
#[derive(Debug)]
struct MayHaveStarted(io::Error);

impl std::fmt::Display for MayHaveStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (the program may have started)", self.0)
    }
}

impl std::error::Error for MayHaveStarted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

pub(crate) fn may_have_started(e: io::Error) -> io::Error {
    io::Error::new(e.kind(), MayHaveStarted(e))
}

/// Whether an error of [`Command::spawn`] came when the program may already have started
/// (not one of the errors before it could have: a missing program, a refused `chdir`, a
/// clone that failed, a child killed before `execve`, which is `TimedOut`).
pub fn may_have_run(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.is::<MayHaveStarted>())
}

/// A child a starter thread started, on its way to the caller.
struct Started {
    pid: libc::pid_t,
    /// Taken by `into_child`; while set, dropping this kills and reaps the child.
    pidfd: Option<OwnedFd>,
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
}

impl Started {
    /// The child, registered with the caller's runtime.
    fn into_child(mut self) -> io::Result<Child> {
        let pidfd = self.pidfd.take().expect("set until taken");
        let mut child = Child {
            pid: self.pid,
            pidfd: None,
            status: None,
            stdin: None,
            stdout: None,
            stderr: None,
        };
        // From here on, dropping `child` kills and reaps the process.
        // SAFETY: an OwnedFd's fd stays the same and open while the AsyncFd owns it.
        let pidfd =
            unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) };
        child.pidfd = Some(pidfd.map_err(io::Error::from)?);
        child.stdin = self.stdin.take().map(sender).transpose()?;
        child.stdout = self.stdout.take().map(receiver).transpose()?;
        child.stderr = self.stderr.take().map(receiver).transpose()?;
        Ok(child)
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let Some(pidfd) = self.pidfd.take() else {
            return;
        };
        // SAFETY: the pidfd CLONE_PIDFD made for this child, still open.
        unsafe { kill_by_pidfd(pidfd.as_raw_fd()) };
        // On a starter thread, with no runtime: a thread of its own reaps it if need be.
        if !matches!(try_reap(self.pid), Ok(Some(_))) {
            reap_on_a_thread(self.pid);
        }
    }
}

/// SIGKILL through a pidfd, which names exactly its process, even after it exited.
///
/// # Safety
/// `fd` is an open pidfd.
unsafe fn kill_by_pidfd(fd: RawFd) {
    libc::syscall(
        libc::SYS_pidfd_send_signal,
        fd as libc::c_long,
        libc::SIGKILL as libc::c_long,
        std::ptr::null::<libc::siginfo_t>(),
        0 as libc::c_long,
    );
}

/// Reaps `pid` (killed) on a thread of its own, where no runtime can wait for it.
fn reap_on_a_thread(pid: libc::pid_t) {
    let _ = std::thread::Builder::new()
        .name("reap".into())
        .spawn(move || reap_blocking(pid));
}

/// The most threads starting children at once: a user has at most one child being
/// started at a time, so it takes this many users each holding theirs before a start
/// waits for a thread.
pub const MAX_STARTERS: usize = 64;

/// Marks a user as having a start under way until dropped (their next ones wait).
#[cfg(test)]
pub(crate) use starters::occupy as occupy_starts_of;

/// The starter threads (module docs, "Who waits").
mod starters {
    use super::MAX_STARTERS;
    use std::collections::VecDeque;
    use std::io;
    use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

    /// Whose child a start makes: a user's (one at a time), or the daemon's own (None).
    pub type Key = Option<libc::uid_t>;
    pub type Job = Box<dyn FnOnce() + Send>;

    struct Pool {
        state: Mutex<State>,
        work: Condvar,
    }

    #[derive(Default)]
    struct State {
        queue: VecDeque<(Key, Job)>,
        /// The users one of whose children a thread is starting now.
        busy: Vec<libc::uid_t>,
        idle: usize,
        threads: usize,
    }

    impl State {
        fn runnable(&self, key: Key) -> bool {
            key.is_none_or(|u| !self.busy.contains(&u))
        }
    }

    /// Marks `uid` as having a start under way until dropped, as a held one would.
    #[cfg(test)]
    pub fn occupy(uid: libc::uid_t) -> Occupied {
        lock(pool()).busy.push(uid);
        Occupied(uid)
    }

    #[cfg(test)]
    pub struct Occupied(libc::uid_t);

    #[cfg(test)]
    impl Drop for Occupied {
        fn drop(&mut self) {
            let p = pool();
            let mut s = lock(p);
            if let Some(at) = s.busy.iter().position(|b| *b == self.0) {
                s.busy.swap_remove(at);
            }
            p.work.notify_all();
        }
    }

    /// How many starts of `key` wait in the queue.
    #[cfg(test)]
    pub fn waiting(key: Key) -> usize {
        lock(pool()).queue.iter().filter(|(k, _)| *k == key).count()
    }

    fn pool() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| Pool {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
        })
    }

    fn lock(p: &Pool) -> MutexGuard<'_, State> {
        p.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `job`; a thread runs it once no other start of the same user is under way.
    pub fn run(key: Key, job: Job) -> io::Result<()> {
        let p = pool();
        let mut s = lock(p);
        s.queue.push_back((key, job));
        let runnable = s.queue.iter().filter(|(k, _)| s.runnable(*k)).count();
        if runnable > s.idle && s.threads < MAX_STARTERS {
            let made = std::thread::Builder::new()
                .name("spawn-starter".into())
                .stack_size(256 << 10)
                .spawn(move || work(p));
            match made {
                Ok(_) => s.threads += 1,
                // With no thread at all nothing would ever run it.
                Err(e) if s.threads == 0 => {
                    s.queue.pop_back();
                    return Err(e);
                }
                // The threads there are run it in turn.
                Err(_) => {}
            }
        }
        p.work.notify_all();
        Ok(())
    }

    /// A starter thread's life: it never ends (PDEATHSIG watches the thread that started a
    /// child, module docs).
    fn work(p: &'static Pool) {
        let mut s = lock(p);
        loop {
            let next = s.queue.iter().position(|(k, _)| s.runnable(*k));
            let Some(i) = next else {
                s.idle += 1;
                s = p.work.wait(s).unwrap_or_else(|e| e.into_inner());
                s.idle -= 1;
                continue;
            };
            let (key, job) = s.queue.remove(i).expect("found above");
            if let Some(u) = key {
                s.busy.push(u);
            }
            drop(s);
            // A panic (a bug) must not leave the user marked busy for good; the job's
            // caller then sees its answer dropped.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            s = lock(p);
            if let Some(u) = key {
                if let Some(at) = s.busy.iter().position(|b| *b == u) {
                    s.busy.swap_remove(at);
                }
            }
            // That user's next start may run now, on any thread.
            p.work.notify_all();
        }
    }
}

/// The child's stack: fresh anonymous memory with an inaccessible page below it, so an
/// overflow faults in the child instead of writing over the daemon's heap.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = CHILD_STACK + page;
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of the mapping made above.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The highest address (the stack grows down on every architecture Linux runs this
    /// on), page-aligned and so 16-byte aligned.
    fn top(&self) -> *mut libc::c_void {
        (self.base as usize + self.len) as *mut libc::c_void
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used (the child has exec'd or
        // exited when `spawn` drops it).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// What the child reads, in the daemon's memory (shared until `execve`).
struct ChildArgs {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    credentials: Option<(libc::uid_t, libc::gid_t)>,
    groups: *const libc::gid_t,
    ngroups: usize,
    parent_death: bool,
    parent_pid: libc::pid_t,
    process_group: bool,
    fds: [RawFd; 3],
    /// The errno of the step that failed; 0 while none has.
    error: AtomicI32,
    #[cfg(test)]
    stop_before_exec: bool,
    #[cfg(test)]
    hold_before_exec: Option<(RawFd, RawFd)>,
}

/// The child's whole life before `execve`.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` of `spawn`, alive while the parent is suspended.
    let args = unsafe { &*(arg as *const ChildArgs) };
    // SAFETY: see `child_setup`.
    let errno = unsafe { child_setup(args) };
    args.error.store(errno.max(1), Ordering::SeqCst);
    // SAFETY: _exit runs no atexit handler and flushes nothing of the daemon's.
    unsafe { libc::_exit(127) }
}

fn errno() -> libc::c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The raw system calls that set credentials. On 32-bit x86 and ARM the plain numbers
/// are the old 16-bit-id calls, which would cut a uid or gid above 65535 down to another
/// one's: the `32` calls take full ids (glibc uses them there too).
mod ids {
    #[cfg(any(target_arch = "x86", target_arch = "arm"))]
    pub const SETGROUPS: libc::c_long = libc::SYS_setgroups32;
    #[cfg(any(target_arch = "x86", target_arch = "arm"))]
    pub const SETRESGID: libc::c_long = libc::SYS_setresgid32;
    #[cfg(any(target_arch = "x86", target_arch = "arm"))]
    pub const SETRESUID: libc::c_long = libc::SYS_setresuid32;
    #[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
    pub const SETGROUPS: libc::c_long = libc::SYS_setgroups;
    #[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
    pub const SETRESGID: libc::c_long = libc::SYS_setresgid;
    #[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
    pub const SETRESUID: libc::c_long = libc::SYS_setresuid;
}

/// The steps of the module docs; returns the errno of the one that failed (execve returns
/// only on failure).
///
/// # Safety
/// Called only in the child of `spawn`'s clone, with the pointers of `args` valid. Every
/// call here is a system call or glibc's thin wrapper of one (async-signal-safe, no lock,
/// no allocation); the credentials change through raw `syscall`s (see the module docs).
unsafe fn child_setup(args: &ChildArgs) -> libc::c_int {
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let mut old: libc::sigaction = std::mem::zeroed();
        // glibc refuses its own internal signals (32, 33): nothing to reset there.
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
            continue;
        }
        if sig == libc::SIGPIPE
            || (old.sa_sigaction != libc::SIG_IGN && old.sa_sigaction != libc::SIG_DFL)
        {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            if libc::sigaction(sig, &dfl, std::ptr::null_mut()) != 0 {
                return errno();
            }
        }
    }
    for (target, &fd) in args.fds.iter().enumerate() {
        // Every source fd is above 2 (`above_stdio`), so no dup2 overwrites another's.
        if libc::dup2(fd, target as libc::c_int) < 0 {
            return errno();
        }
    }
    // Nothing of the daemon's but fds 0-2 reaches the program, even an fd a library or
    // whoever started the daemon left open without O_CLOEXEC (it may be a file only root
    // could open). The child has its own fd table (no CLONE_FILES): the daemon keeps its
    // fds. Closed before the credentials change, the first step the user can hold the
    // child at (SIGSTOP, a FUSE working directory): starts run at once on several
    // threads, and a held child with a copy of another start's pipe would hold up that
    // command's reader (the daemon's own squeue, another user's sbatch) until it is
    // killed. A kernel older than 5.9 has no close_range; O_CLOEXEC alone holds there.
    #[allow(unused_mut)]
    let mut from: libc::c_uint = 3;
    #[cfg(test)]
    if let Some((a, b)) = args.hold_before_exec {
        // Fault injection's own fds stay, until execve.
        for keep in [a.min(b) as libc::c_uint, a.max(b) as libc::c_uint] {
            if keep > from {
                libc::syscall(
                    libc::SYS_close_range,
                    from as libc::c_long,
                    (keep - 1) as libc::c_long,
                    0 as libc::c_long,
                );
            }
            from = keep + 1;
        }
    }
    if libc::syscall(
        libc::SYS_close_range,
        from as libc::c_long,
        libc::c_uint::MAX as libc::c_long,
        0 as libc::c_long,
    ) != 0
        && errno() != libc::ENOSYS
    {
        return errno();
    }
    if args.process_group && libc::setpgid(0, 0) != 0 {
        return errno();
    }
    if let Some((uid, gid)) = args.credentials {
        let (uid, gid) = (uid as libc::c_long, gid as libc::c_long);
        if libc::syscall(ids::SETGROUPS, args.ngroups as libc::c_long, args.groups) != 0
            || libc::syscall(ids::SETRESGID, gid, gid, gid) != 0
            || libc::syscall(ids::SETRESUID, uid, uid, uid) != 0
        {
            return errno();
        }
        // This process now runs as the user in the daemon's memory until execve, and the
        // user may send it signals or hold it in `chdir` (a FUSE or hung NFS folder). The
        // credential change made that memory as dumpable as fs.suid_dumpable says: at 1,
        // the user could open /proc/PID/mem of this child and so read and write the root
        // daemon's memory (the open keeps the memory, even after execve). Not dumpable,
        // only root may. The daemon's memory is left so (as suid_dumpable 0 or 2 leaves
        // it anyway after the first such child); the program's own after execve is not.
        if libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong) != 0 {
            return errno();
        }
    }
    if args.parent_death {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return errno();
        }
        if libc::getppid() != args.parent_pid {
            // The daemon died before the prctl: no signal will come, so do not run.
            return libc::ESRCH;
        }
    }
    if !args.cwd.is_null() && libc::chdir(args.cwd) != 0 {
        return errno();
    }
    #[cfg(test)]
    if let Some((started, release)) = args.hold_before_exec {
        let mut b = 1u8;
        libc::write(started, &b as *const u8 as *const libc::c_void, 1);
        libc::read(release, &mut b as *mut u8 as *mut libc::c_void, 1);
    }
    let mut empty: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut empty);
    if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) != 0 {
        return errno();
    }
    #[cfg(test)]
    if args.stop_before_exec {
        // A raw kill of the child's own pid: glibc's raise would take the daemon thread's
        // tid from the shared thread pointer.
        libc::syscall(
            libc::SYS_kill,
            libc::syscall(libc::SYS_getpid),
            libc::SIGSTOP as libc::c_long,
        );
    }
    libc::execve(args.program, args.argv, args.envp);
    errno()
}

/// The first executable file `name` in the directories of `path` (a `$PATH` value).
pub fn find_in(name: &str, path: &OsStr) -> Option<std::path::PathBuf> {
    std::env::split_paths(path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A started program. Dropping it before it was waited for kills it (SIGKILL) and reaps
/// it beside the caller (a task woken by its pidfd), as tokio's `kill_on_drop` does.
#[derive(Debug)]
pub struct Child {
    pid: libc::pid_t,
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
}

impl Child {
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// SIGKILL to the program, unless it was already waited for.
    pub fn kill(&self) {
        if self.status.is_some() {
            return;
        }
        match &self.pidfd {
            // SAFETY: the child's pidfd, open while the AsyncFd owns it.
            Some(fd) => unsafe { kill_by_pidfd(fd.get_ref().as_raw_fd()) },
            // Only if registering the pidfd failed, right after the start.
            // SAFETY: not reaped yet, so the pid still names our child.
            None => unsafe {
                libc::kill(self.pid, libc::SIGKILL);
            },
        }
    }

    /// SIGKILL to the program's process group (started with [`Command::process_group`]),
    /// unless the program was already waited for: its group id is its pid, which is free
    /// for another process (another user's) once reaped, so the group is only signalled
    /// while the program is not reaped ([`Child::exited`] waits for its end and keeps
    /// it so).
    pub fn kill_group(&self) {
        if self.status.is_some() {
            return;
        }
        // SAFETY: the group is the one the child made (its pgid is its pid), and the
        // child, alive or a zombie, still holds that pid.
        unsafe { libc::killpg(self.pid, libc::SIGKILL) };
    }

    /// Waits for the program to exit; its exit status.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        let s = self.exit(try_reap).await?;
        self.status = Some(s);
        Ok(s)
    }

    /// Waits for the program to exit, without reaping it: its pid, and so its process
    /// group id, stays its own (for [`Child::kill_group`]) until [`Child::wait`] or drop.
    pub async fn exited(&mut self) -> io::Result<ExitStatus> {
        self.exit(peek_exit).await
    }

    async fn exit(
        &self,
        look: fn(libc::pid_t) -> io::Result<Option<ExitStatus>>,
    ) -> io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let Some(fd) = &self.pidfd else {
            return Err(io::Error::other("no pidfd"));
        };
        loop {
            let mut ready = fd.readable().await?;
            if let Some(s) = look(self.pid)? {
                return Ok(s);
            }
            ready.clear_ready();
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        self.kill();
        if let Ok(Some(_)) = try_reap(self.pid) {
            return;
        }
        // Killed, it exits at once unless stuck in the kernel (a dead NFS server): it is
        // reaped by a task woken by its pidfd, so the daemon's loop never waits, and a
        // child stuck for hours costs no thread. A task still waiting when the runtime
        // shuts down leaves a zombie until the daemon exits.
        let pid = self.pid;
        if let (Some(fd), Ok(rt)) = (self.pidfd.take(), tokio::runtime::Handle::try_current()) {
            rt.spawn(async move {
                while let Ok(mut ready) = fd.readable().await {
                    match try_reap(pid) {
                        Ok(None) => ready.clear_ready(),
                        _ => return,
                    }
                }
            });
            return;
        }
        // No runtime (or no pidfd): a thread of its own.
        reap_on_a_thread(pid);
    }
}

fn try_reap(pid: libc::pid_t) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our unreaped child; `status` is a valid out pointer.
        match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
            0 => return Ok(None),
            p if p == pid => return Ok(Some(ExitStatus::from_raw(status))),
            _ if errno() == libc::EINTR => continue,
            _ => return Err(io::Error::last_os_error()),
        }
    }
}

/// The exit status of our child `pid` if it has exited, leaving it unreaped (`WNOWAIT`).
fn peek_exit(pid: libc::pid_t) -> io::Result<Option<ExitStatus>> {
    loop {
        // SAFETY: all-zero is a valid siginfo_t; waitid fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is our unreaped child; `info` is a valid out pointer.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if r < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return Err(io::Error::last_os_error());
        }
        // SAFETY: waitid filled the SIGCHLD fields (si_pid 0: not exited yet).
        let (who, status) = unsafe { (info.si_pid(), info.si_status()) };
        if who == 0 {
            return Ok(None);
        }
        // Back to the wait status `waitpid` would give.
        let raw = match info.si_code {
            libc::CLD_EXITED => (status & 0xff) << 8,
            libc::CLD_DUMPED => status | 0x80,
            _ => status,
        };
        return Ok(Some(ExitStatus::from_raw(raw)));
    }
}

fn reap_blocking(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: as in `try_reap`.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && errno() == libc::EINTR {}
}

/// A pipe, both ends close-on-exec and above fd 2: (read end, write end).
fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    Ok((above_stdio(r)?, above_stdio(w)?))
}

/// `fd` itself if above 2, else a close-on-exec copy that is (a daemon started with fd 0,
/// 1 or 2 closed gets such fds for its pipes, and the child's dup2s onto 0-2 would then
/// overwrite one another).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on a valid fd returns a new fd that we own.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on a valid fd we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The daemon's (nonblocking) end of a pipe it writes to.
fn sender(fd: OwnedFd) -> io::Result<pipe::Sender> {
    set_nonblocking(&fd)?;
    pipe::Sender::from_owned_fd(fd)
}

/// The daemon's (nonblocking) end of a pipe it reads.
fn receiver(fd: OwnedFd) -> io::Result<pipe::Receiver> {
    set_nonblocking(&fd)?;
    pipe::Receiver::from_owned_fd(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn output(child: &mut Child) -> (ExitStatus, Vec<u8>, Vec<u8>) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (mut o, mut e) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let (a, b) = tokio::join!(o.read_to_end(&mut out), e.read_to_end(&mut err));
        a.unwrap();
        b.unwrap();
        (child.wait().await.unwrap(), out, err)
    }

    #[tokio::test]
    async fn runs_with_args_env_cwd_and_stdin_and_reports_the_exact_status() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("/bin/sh");
        cmd.args([
            "-c",
            "pwd; echo \"$A|$B\"; cat; echo to-err >&2; exit 7",
            "a b",
        ])
        .env_clear_with([("A", "1"), ("B", "x y")])
        .current_dir(dir.path())
        .stdin_piped();
        let mut child = cmd.spawn().await.unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"from stdin\n").await.unwrap();
        drop(stdin);
        let (status, out, err) = output(&mut child).await;
        assert_eq!(status.code(), Some(7));
        let cwd = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("{}\n1|x y\nfrom stdin\n", cwd.display())
        );
        assert_eq!(err, b"to-err\n");
    }

    #[tokio::test]
    async fn a_signal_death_has_no_code_and_sigpipe_is_default_in_the_child() {
        let mut child = Command::new("/bin/sh")
            .args(["-c", "kill -PIPE $$"])
            .spawn()
            .await
            .unwrap();
        let (status, _, _) = output(&mut child).await;
        assert_eq!(status.code(), None);
        assert_eq!(status.signal(), Some(libc::SIGPIPE));
    }

    #[tokio::test]
    async fn a_missing_program_or_directory_is_an_error_of_spawn() {
        let e = Command::new("/nonexistent/program")
            .spawn()
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(!may_have_run(&e), "it certainly did not run");
        let e = Command::new("/bin/true")
            .current_dir("/nonexistent/dir")
            .spawn()
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(!may_have_run(&e), "it certainly did not run");
        let e = Command::new("/bin/true")
            .args(["a\0b"])
            .spawn()
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[tokio::test]
    async fn no_fd_of_the_daemon_reaches_the_program_even_one_without_cloexec() {
        // An fd some library (or whoever started the daemon) left open across exec: the
        // program must not get it (it may be a file only root could open).
        // SAFETY: a plain open; the fd is closed below.
        let leaky = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
        assert!(leaky > 2, "{leaky}");
        let mut child = Command::new("/bin/sh")
            .args([
                "-c",
                &format!("ls /proc/self/fd/; test ! -e /proc/self/fd/{leaky}"),
            ])
            .spawn()
            .await
            .unwrap();
        let (status, out, _) = output(&mut child).await;
        // SAFETY: the fd opened above.
        unsafe { libc::close(leaky) };
        assert!(
            status.success(),
            "fd {leaky} reached the child; its fds: {}",
            String::from_utf8_lossy(&out)
        );
    }

    #[tokio::test]
    async fn a_child_held_before_execve_is_killed_at_the_deadline_and_frees_the_caller() {
        // The child stops itself before execve (as a user's SIGSTOP or a FUSE working
        // directory would hold it); without the watchdog this spawn never returns.
        let mut cmd = Command::new("/bin/true");
        cmd.exec_deadline = std::time::Duration::from_millis(300);
        cmd.stop_before_exec = true;
        cmd.parent_death_kill();
        let e = cmd.spawn().await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        // The next one starts and runs as usual.
        let mut child = Command::new("/bin/true").spawn().await.unwrap();
        let (status, _, _) = output(&mut child).await;
        assert!(status.success());
    }

    #[tokio::test]
    async fn a_child_cloned_after_its_deadline_is_still_killed() {
        // Its starter thread is descheduled between queueing the watch and the clone,
        // past the deadline: the watchdog must not give up on it, or a held child would
        // hold its thread (and its user's starts) for good.
        if not_root() {
            return;
        }
        let mut cmd = as_user(65529);
        cmd.exec_deadline = std::time::Duration::from_millis(50);
        cmd.delay_before_clone = std::time::Duration::from_millis(300);
        cmd.stop_before_exec = true;
        cmd.parent_death_kill();
        let e = tokio::time::timeout(std::time::Duration::from_secs(60), cmd.spawn())
            .await
            .expect("the watchdog killed it")
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    }

    #[tokio::test]
    async fn a_starter_thread_that_fails_is_no_refusal_and_the_pool_goes_on() {
        // A panic (a bug) on the starter thread may come after the clone: the program may
        // have run, so this is never "it did not run" (cli.rs would count an sbatch so as
        // certainly not submitted, and submit it again).
        if not_root() {
            return;
        }
        let mut cmd = as_user(65527);
        cmd.panic_in_starter = true;
        let e = cmd.spawn().await.unwrap_err();
        assert!(may_have_run(&e), "{e}");
        // The user is not left marked as starting one.
        runs(&as_user(65527)).await;
    }

    /// Holds `cmd`'s child before `execve`: the first file becomes readable once it is
    /// held, and writing to the second lets it go on.
    fn hold(cmd: &mut Command) -> (std::fs::File, std::fs::File, [OwnedFd; 2]) {
        let (started_r, started_w) = pipe_pair().unwrap();
        let (release_r, release_w) = pipe_pair().unwrap();
        cmd.hold_before_exec = Some((started_w.as_raw_fd(), release_r.as_raw_fd()));
        // Held as long as the test needs, however slow the machine: the watchdog must
        // not end it at EXEC_DEADLINE (10 s) while the other starts are checked (`runs`
        // gives up well before this).
        cmd.exec_deadline = std::time::Duration::from_secs(120);
        // Should the test fail while it is held, dropping the release file lets it go on
        // (it keeps no copy of it), and it goes with the test process anyway.
        cmd.parent_death_kill();
        (started_r.into(), release_w.into(), [started_w, release_r])
    }

    async fn until_held(mut started: std::fs::File) {
        use std::io::Read;
        tokio::task::spawn_blocking(move || started.read_exact(&mut [0u8]))
            .await
            .unwrap()
            .unwrap();
    }

    async fn runs(cmd: &Command) {
        let start = tokio::time::timeout(std::time::Duration::from_secs(30), cmd.spawn());
        let mut child = start
            .await
            .expect("this start waited for the held one")
            .unwrap();
        assert!(output(&mut child).await.0.success());
    }

    /// True (and says the test is skipped) when not root: taking a user's credentials
    /// needs root.
    fn not_root() -> bool {
        // SAFETY: no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            eprintln!("skipped: taking a user's credentials needs root");
        }
        !root
    }

    /// `/bin/true` as `uid` (whose gid is taken to be the same number).
    fn as_user(uid: libc::uid_t) -> Command {
        let mut c = Command::new("/bin/true");
        c.run_as(Credentials {
            uid,
            gid: uid,
            groups: Groups::Given(vec![uid]),
            resolved_on: None,
        });
        c
    }

    /// A program run as a user is never given the daemon's own environment, even by a
    /// caller that set none: the user can read `/proc/PID/environ` of their process, and
    /// the daemon's `LD_PRELOAD` would load into it. It gets none at all.
    #[tokio::test(flavor = "current_thread")]
    async fn a_program_run_as_a_user_without_an_environment_gets_none_of_the_daemons() {
        if not_root() {
            return;
        }
        assert!(
            std::env::vars_os().next().is_some(),
            "the test process has variables of its own"
        );
        let mut cmd = Command::new("/usr/bin/env");
        cmd.run_as(Credentials {
            uid: 65534,
            gid: 65534,
            groups: Groups::Given(vec![65534]),
            resolved_on: None,
        });
        let mut child = cmd.spawn().await.unwrap();
        let (status, out, err) = output(&mut child).await;
        assert!(status.success(), "{}", String::from_utf8_lossy(&err));
        let names: Vec<String> = String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_string()))
            .collect();
        assert!(names.is_empty(), "{names:?}");
        // The daemon's own commands (no credentials) keep its environment.
        let mut child = Command::new("/usr/bin/env").spawn().await.unwrap();
        let (_, out, _) = output(&mut child).await;
        assert!(!out.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_start_held_before_execve_holds_up_no_other_start() {
        if not_root() {
            return;
        }
        // A user's FUSE working directory or SIGSTOP holds their child before execve;
        // the daemon's own commands and other users' start meanwhile.
        let mut cmd = as_user(65534);
        let (started, mut release, _ends) = hold(&mut cmd);
        let held = tokio::spawn(async move { cmd.spawn().await });
        until_held(started).await;
        runs(&Command::new("/bin/true")).await;
        runs(&as_user(65532)).await;
        assert!(
            !held.is_finished(),
            "held before execve, it cannot have started"
        );
        std::io::Write::write_all(&mut release, b"x").unwrap();
        let mut child = held.await.unwrap().unwrap();
        assert!(output(&mut child).await.0.success());
    }

    /// The group database may be slow (sssd, LDAP): a user's group list is looked up on
    /// the starter thread, never on the caller's (the daemon's loop), and it is the one
    /// the system's group database gives.
    #[tokio::test(flavor = "current_thread")]
    async fn a_users_groups_are_looked_up_on_the_starter_thread() {
        if not_root() {
            return;
        }
        let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
        let who = RunAs {
            uid: nobody.uid.as_raw(),
            gid: nobody.gid.as_raw(),
            user: CString::new(nobody.name.clone()).unwrap(),
        };
        let mut creds = Credentials::of(&who);
        let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
        creds.resolved_on = Some(slot.clone());
        let mut cmd = Command::new("/usr/bin/id");
        cmd.args(["-G"]).run_as(creds);
        let mut child = cmd.spawn().await.unwrap();
        let (status, out, _) = output(&mut child).await;
        assert!(status.success());
        let looked_up_on = slot.lock().unwrap().expect("the groups were looked up");
        assert_ne!(
            looked_up_on,
            std::thread::current().id(),
            "on the caller's thread"
        );
        let want: Vec<String> = nix::unistd::getgrouplist(&who.user, nobody.gid)
            .unwrap()
            .iter()
            .map(|g| g.as_raw().to_string())
            .collect();
        let mut got: Vec<&str> = std::str::from_utf8(&out)
            .unwrap()
            .split_whitespace()
            .collect();
        let mut want: Vec<&str> = want.iter().map(String::as_str).collect();
        got.sort();
        want.sort();
        got.dedup();
        want.dedup();
        assert_eq!(got, want);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_child_holds_no_copy_of_the_daemons_other_fds() {
        // Starts run at once on several threads: a child is cloned while another start's
        // pipes are open in the daemon. Held (a user's FUSE working directory, SIGSTOP),
        // it must not keep that pipe's write end open, or the daemon's own command
        // reading it (a squeue) would wait for the held child, up to EXEC_DEADLINE.
        use std::io::Read;
        if not_root() {
            return;
        }
        let (r, w) = pipe_pair().unwrap();
        let mut cmd = as_user(65528);
        let (started, mut release, _ends) = hold(&mut cmd);
        let held = tokio::spawn(async move { cmd.spawn().await });
        until_held(started).await;
        drop(w);
        let mut r = std::fs::File::from(r);
        let read = tokio::task::spawn_blocking(move || r.read(&mut [0u8]));
        let eof = tokio::time::timeout(std::time::Duration::from_secs(30), read).await;
        std::io::Write::write_all(&mut release, b"x").unwrap();
        let mut child = held.await.unwrap().unwrap();
        assert!(output(&mut child).await.0.success());
        assert!(
            matches!(eof, Ok(Ok(Ok(0)))),
            "the other pipe's reader saw no end while the child was held: {eof:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_users_next_start_waits_for_their_held_one() {
        if not_root() {
            return;
        }
        // A uid no other test starts as, so the queue seen below is this test's.
        let uid = 65533;
        let mut first = as_user(uid);
        let (started, mut release, _ends) = hold(&mut first);
        let first = tokio::spawn(async move { first.spawn().await });
        until_held(started).await;
        let second = tokio::spawn(async move { as_user(uid).spawn().await });
        // The second waits in the queue (it is not started) while the first is held.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while starters::waiting(Some(uid)) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the second start was not queued"
            );
            tokio::task::yield_now().await;
        }
        assert!(!second.is_finished());
        // Someone else's start is not held up meanwhile.
        runs(&Command::new("/bin/true")).await;
        assert_eq!(starters::waiting(Some(uid)), 1);
        std::io::Write::write_all(&mut release, b"x").unwrap();
        for start in [first, second] {
            let mut child = start.await.unwrap().unwrap();
            assert!(output(&mut child).await.0.success());
        }
    }

    /// `exited` gives the status and leaves the program unreaped, so its process group
    /// is still its own to kill: what it left running (here a `sleep` holding stdout) dies.
    /// Once reaped (`wait`), its group is never signalled: the number may be another's.
    #[tokio::test]
    async fn the_group_is_killed_only_while_its_leader_is_unreaped() {
        let start = || async {
            let mut cmd = Command::new("/bin/sh");
            cmd.args(["-c", "sleep 600 & exit 3"]).process_group();
            cmd.spawn().await.unwrap()
        };
        let mut child = start().await;
        let status = child.exited().await.unwrap();
        assert_eq!(status.code(), Some(3));
        // Still a zombie of ours: the waitid probe (WNOWAIT) sees it.
        assert_eq!(
            peek_exit(child.pid).unwrap().map(|s| s.code()),
            Some(Some(3))
        );
        child.kill_group();
        let mut out = child.stdout.take().unwrap();
        let eof = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            out.read_to_end(&mut Vec::new()),
        )
        .await;
        assert!(
            matches!(eof, Ok(Ok(0))),
            "the sleep it left was killed: {eof:?}"
        );
        assert_eq!(child.wait().await.unwrap().code(), Some(3));

        let mut child = start().await;
        assert_eq!(child.wait().await.unwrap().code(), Some(3));
        let pgid = child.pid;
        child.kill_group();
        // SAFETY: signal 0 only probes; the group is the sleep's, left by the test.
        let alive = unsafe { libc::killpg(pgid, 0) } == 0;
        // SAFETY: the test's own leftover (its group still exists, so not reused).
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
        assert!(alive, "a reaped leader's group is not signalled");
    }

    #[tokio::test]
    async fn kill_ends_it_and_dropping_reaps_it() {
        let mut child = Command::new("/bin/sleep")
            .args(["600"])
            .spawn()
            .await
            .unwrap();
        child.kill();
        let (status, _, _) = output(&mut child).await;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        let child = Command::new("/bin/sleep")
            .args(["600"])
            .spawn()
            .await
            .unwrap();
        let pid = child.id() as i32;
        drop(child);
        // Reaped by the runtime's task: once reaped, the pid is no child of ours. The probe
        // does not reap it itself (WNOWAIT), so only `Child`'s reaping can end the loop.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            // ECHILD once reaped.
            if let Err(e) = peek_exit(pid) {
                assert_eq!(e.raw_os_error(), Some(libc::ECHILD));
                break;
            }
            assert!(std::time::Instant::now() < deadline, "not reaped");
            tokio::task::yield_now().await;
        }
    }
}
