//! The job's own output files, read as evidence: where sbatch put them (expanding its
//! filename patterns) and their last lines.

use crate::config::Config;
use crate::domain::sbatch_args::Submitted;
use crate::slurm::jobid::JobId;
use crate::slurm::types::SacctRow;
use crate::store::Submission;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// What the filename patterns of `--output`/`--error` refer to.
pub struct PatternValues<'a> {
    pub job_id_raw: &'a str,
    pub array_job_id: &'a str,
    pub array_task: Option<&'a str>,
    pub user: &'a str,
    pub job_name: &'a str,
    pub first_node: &'a str,
}

/// Expands sbatch's filename patterns (`%j`, `%A`, `%a`, `%u`, `%x`, `%N`, `%%`, with an
/// optional zero-padding width such as `%4a`), as Slurm does for `--output`/`--error`.
pub fn expand_pattern(pattern: &str, v: &PatternValues) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut width = String::new();
        while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(*d);
            chars.next();
        }
        let Some(k) = chars.next() else {
            out.push('%');
            out.push_str(&width);
            break;
        };
        let value: String = match k {
            '%' => "%".into(),
            'j' => v.job_id_raw.into(),
            'A' => v.array_job_id.into(),
            // Slurm prints NO_VAL for %a outside an array.
            'a' => v.array_task.unwrap_or("4294967294").into(),
            'u' => v.user.into(),
            'x' => v.job_name.into(),
            'N' => v.first_node.into(),
            'n' | 't' => "0".into(),
            's' => "batch".into(),
            other => format!("%{width}{other}"),
        };
        // Slurm pads to a few digits; a wider request (a user's `%10000000000j`) is not a
        // width the daemon will allocate for.
        let w: usize = width.parse().unwrap_or(0).min(MAX_PAD);
        if w > 0 && value.chars().all(|c| c.is_ascii_digit()) && value.len() < w {
            out.push_str(&"0".repeat(w - value.len()));
        }
        out.push_str(&value);
        if out.len() > MAX_PATH {
            break;
        }
    }
    out
}

/// The widest zero padding a filename pattern gets.
const MAX_PAD: usize = 16;
/// Longer expansions are cut here (Linux's PATH_MAX); such a path is never opened.
const MAX_PATH: usize = 4096;

/// One of the job's output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Where the job's stdout or stderr went (stderr goes with stdout unless `--error` is given).
pub fn output_path(
    sub: &Submission,
    job_id: &str,
    job_row: &SacctRow,
    stream: Stream,
) -> Option<PathBuf> {
    let s = Submitted::read(&sub.argv, sub.script.as_deref()).ok()?;
    let (base, task) = match JobId::parse(job_id) {
        Ok(j) => (j.base().to_string(), j.task().map(|t| t.to_string())),
        Err(_) => (job_id.to_string(), None),
    };
    let default = if task.is_some() {
        "slurm-%A_%a.out"
    } else {
        "slurm-%j.out"
    };
    let pattern = match stream {
        Stream::Stderr => s.option("error").or_else(|| s.option("output")),
        Stream::Stdout => s.option("output"),
    }
    .unwrap_or(default);
    let script_name =
        sub.script_name
            .as_deref()
            .unwrap_or(if s.cmd.has("wrap") { "wrap" } else { "sbatch" });
    let job_name = s.option("job-name").unwrap_or(script_name);
    let first_node = job_row.node_list.split([',', '[']).next().unwrap_or("");
    let values = PatternValues {
        job_id_raw: &job_row.job_id_raw,
        array_job_id: &base,
        array_task: task.as_deref(),
        user: &sub.user,
        job_name,
        first_node,
    };
    let expanded = expand_pattern(pattern, &values);
    if expanded.len() > MAX_PATH {
        return None;
    }
    let path = PathBuf::from(expanded);
    if path.is_absolute() {
        return Some(path);
    }
    let dir = s
        .option("chdir")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(&sub.cwd));
    let dir = if dir.is_absolute() {
        dir
    } else {
        Path::new(&sub.cwd).join(dir)
    };
    Some(dir.join(path))
}

/// Opens a file a job controls, for reading, without letting it act on the daemon.
///
/// The path is first opened with `O_PATH` (which opens nothing: no device is woken, no
/// terminal taken, no FIFO waited on), without following a final link; the descriptor is
/// checked with `fstat` (a regular file, owned by `owner` when given); only then is that
/// same inode opened for reading through `/proc/self/fd`, with `O_NOCTTY | O_NONBLOCK`.
/// A path swapped between the two steps changes nothing: the second open is of the
/// descriptor, not of the name.
pub fn open_user_file(path: &Path, owner: Option<u32>) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let refuse =
        |why: &str| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why.to_string());
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)?;
    let meta = handle.metadata()?;
    if !meta.is_file() {
        return Err(refuse("not a regular file"));
    }
    if owner.is_some_and(|uid| meta.uid() != uid) {
        return Err(refuse("not the job owner's file"));
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(&handle);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(format!("/proc/self/fd/{fd}"))
        .or_else(|_| {
            // `O_NOFOLLOW` refuses the /proc magic link on some kernels; the link points
            // at the inode already checked, so it is followed here on purpose.
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
                .open(format!("/proc/self/fd/{fd}"))
        })?;
    let again = f.metadata()?;
    if again.dev() != meta.dev() || again.ino() != meta.ino() || !again.is_file() {
        return Err(refuse("the file changed while it was opened"));
    }
    Ok(f)
}

/// The last `lines` lines (at most `bytes` bytes) of a file; `None` when unreadable.
/// A job controls its output paths, so the file is opened by `open_user_file`: never a
/// link, a device, a FIFO or a terminal, and when `owner` is given (a root daemon reading
/// a user's output), only that user's file.
pub fn tail(path: &Path, lines: usize, bytes: u64, owner: Option<u32>) -> Option<String> {
    let mut f = open_user_file(path, owner).ok()?;
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(bytes);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::with_capacity((len - start).min(bytes) as usize);
    f.take(bytes).read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    let keep = &all[all.len().saturating_sub(lines)..];
    Some(keep.join("\n"))
}

/// The tails of an ended attempt's stderr and, when it is a different file, stdout.
pub fn output_tails(
    config: &Config,
    sub: &Submission,
    job_id: &str,
    run: &[SacctRow],
) -> (Option<String>, Option<String>) {
    let Some(job_row) = run.iter().find(|r| !r.is_step()) else {
        return (None, None);
    };
    // A root daemon reads a user's files only if they are that user's.
    let owner = (nix::unistd::geteuid().is_root() && sub.owner_uid != 0).then_some(sub.owner_uid);
    let read = |p: &Path| {
        tail(
            p,
            config.slurm.stderr_tail_lines,
            config.slurm.stderr_tail_bytes,
            owner,
        )
    };
    // The path was built from the user's (possibly non-UTF-8) options: back to raw bytes.
    let raw = |p: PathBuf| crate::plumbing::osbytes::to_path(&p.to_string_lossy());
    let err = output_path(sub, job_id, job_row, Stream::Stderr).map(raw);
    let out = output_path(sub, job_id, job_row, Stream::Stdout)
        .map(raw)
        .filter(|o| Some(o) != err.as_ref());
    (err.as_deref().and_then(read), out.as_deref().and_then(read))
}

/// A continuing job's working directory: its `--chdir` (from where it was submitted),
/// else where it was submitted.
fn job_dir(sub: &Submission) -> PathBuf {
    let cwd = crate::plumbing::osbytes::to_path(&sub.cwd);
    let chdir = Submitted::read(&sub.argv, sub.script.as_deref())
        .ok()
        .and_then(|s| s.option("chdir").map(crate::plumbing::osbytes::to_path));
    match chdir {
        Some(d) if d.is_absolute() => d,
        Some(d) => cwd.join(d),
        None => cwd,
    }
}

/// The progress path of a continuing submission, in full (`path` is from the job's
/// working directory, or absolute).
pub fn progress_path(sub: &Submission, path: &str) -> PathBuf {
    let p = crate::plumbing::osbytes::to_path(path);
    if p.is_absolute() {
        p
    } else {
        job_dir(sub).join(p)
    }
}

/// A progress file is hashed only up to this size; a larger one is compared by its size
/// and modification time (a checkpoint of gigabytes is not read on every ending).
const HASH_AT_MOST: u64 = 16 << 20;
/// The most entries of a progress folder looked at.
const FOLDER_ENTRIES_AT_MOST: u64 = 10_000;

/// How long reading a progress path may take, the start of its reader included.
pub const PROGRESS_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Filesystems whose files are not a job's work (their sizes say nothing, and reading
/// some waits on other processes): proc, sysfs, cgroup (1 and 2), debugfs, tracefs,
/// securityfs, bpf.
const PSEUDO_FILESYSTEMS: &[i64] = &[
    0x9fa0,
    0x6265_6572,
    0x0027_e0eb,
    0x6367_7270,
    0x6462_6720,
    0x7472_6163,
    0x7363_6673,
    0xcafe_4a11,
];

/// What the progress path `full` looks like now ([`crate::domain::continuation::Progress`]), read
/// with this process's own rights: the daemon runs it in a child as the job's owner
/// (`slurm-supervisord --read-progress`, [`read_progress_as`]), so the path is walked as
/// they could walk it. The last component is never followed, nothing but a regular file
/// or a folder is looked at (not on proc, sys and the like), a file is hashed up to its
/// own size (at most 16 MiB), and a folder's entries are counted without following any
/// link, at most [`FOLDER_ENTRIES_AT_MOST`] of them.
pub fn progress_at(full: &Path) -> crate::domain::continuation::Progress {
    use crate::domain::continuation::Progress;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let unreadable = |why: String| Progress::Unreadable { why };
    let handle = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(full)
    {
        Ok(h) => h,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Progress::Missing,
        Err(e) => return unreadable(e.to_string()),
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&handle);
    let mut fs = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `fd` is open for the duration of the call and `fs` is written by it.
    if unsafe { libc::fstatfs(fd, fs.as_mut_ptr()) } == 0 {
        // SAFETY: fstatfs succeeded, so it filled `fs`.
        // `f_type`'s width differs between architectures.
        #[allow(clippy::unnecessary_cast)]
        let kind = unsafe { fs.assume_init() }.f_type as i64;
        if PSEUDO_FILESYSTEMS.contains(&kind) {
            return unreadable("on a pseudo-filesystem (proc, sys, cgroup...)".into());
        }
    }
    let meta = match handle.metadata() {
        Ok(m) => m,
        Err(e) => return unreadable(e.to_string()),
    };
    let mtime_ns = |m: &std::fs::Metadata| m.mtime() * 1_000_000_000 + m.mtime_nsec();
    if meta.is_file() {
        let sha256 = (meta.len() <= HASH_AT_MOST)
            .then(|| {
                use sha2::Digest;
                let mut f = open_user_file(full, None).ok()?;
                let again = f.metadata().ok()?;
                if again.ino() != meta.ino() || again.dev() != meta.dev() {
                    return None;
                }
                let mut h = sha2::Sha256::new();
                std::io::copy(&mut (&mut f).take(meta.len()), &mut h).ok()?;
                Some(
                    h.finalize()
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>(),
                )
            })
            .flatten();
        return Progress::File {
            size: meta.len(),
            mtime_ns: mtime_ns(&meta),
            sha256,
        };
    }
    if !meta.is_dir() {
        return unreadable("neither a regular file nor a folder".into());
    }
    // The folder already checked, through its descriptor: a name swapped since changes
    // nothing.
    let entries = match std::fs::read_dir(format!("/proc/self/fd/{fd}")) {
        Ok(e) => e,
        Err(e) => return unreadable(e.to_string()),
    };
    let (mut count, mut size, mut newest) = (0u64, 0u64, mtime_ns(&meta));
    for entry in entries.take(FOLDER_ENTRIES_AT_MOST as usize).flatten() {
        // `DirEntry::metadata` does not follow a link.
        if let Ok(m) = entry.metadata() {
            count += 1;
            if m.is_file() {
                size = size.saturating_add(m.len());
            }
            newest = newest.max(mtime_ns(&m));
        }
    }
    Progress::Folder {
        entries: count,
        size,
        newest_mtime_ns: newest,
    }
}

/// `slurm-supervisord --read-progress PATH`: prints [`progress_at`] as JSON (the child the
/// daemon starts as the job's owner). Returns the exit code.
pub fn read_progress_main(path: &Path) -> i32 {
    let p = progress_at(path);
    match serde_json::to_string(&p) {
        Ok(json) => {
            println!("{json}");
            0
        }
        Err(_) => 70,
    }
}

/// Reads a continuing job's progress path as its owner (`owner`; `None`: as the daemon's
/// own user, a per-user daemon): the daemon's own binary, started as them
/// (`--read-progress`), with [`PROGRESS_READ_TIMEOUT`]. So a user learns nothing through
/// it of a path they could not walk themselves, and a hung read holds no thread of the
/// daemon's. `Err` (why) when the reader overran (a hung network filesystem): it is
/// killed, and the caller decides whether to ask again later.
pub async fn read_progress_as(
    full: &Path,
    owner: Option<&crate::slurm::RunAs>,
) -> Result<crate::domain::continuation::Progress, String> {
    use crate::domain::continuation::Progress;
    use crate::slurm::spawn;
    let mut cmd = spawn::Command::new("/proc/self/exe");
    cmd.args([std::ffi::OsStr::new("--read-progress"), full.as_os_str()]);
    cmd.env_clear_with([("PATH", "/usr/bin:/bin")]);
    if let Some(who) = owner {
        cmd.run_as(spawn::Credentials::of(who));
    }
    let started = tokio::time::Instant::now();
    let ran = super::program::run(
        cmd,
        "the progress reader",
        b"",
        PROGRESS_READ_TIMEOUT,
        64 << 10,
    )
    .await;
    Ok(match ran {
        Ok(r) if r.status.success() => {
            serde_json::from_slice(&r.stdout).unwrap_or_else(|e| Progress::Unreadable {
                why: format!("the progress reader answered nothing readable ({e})"),
            })
        }
        Ok(r) => Progress::Unreadable {
            why: format!("the progress reader failed ({})", r.status),
        },
        Err(e) if started.elapsed() >= PROGRESS_READ_TIMEOUT => return Err(e),
        Err(e) => Progress::Unreadable { why: e },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_path_on_proc_or_sys_is_not_read() {
        use crate::domain::continuation::Progress;
        for p in ["/proc/self/status", "/proc/self/maps", "/sys/kernel"] {
            assert!(
                matches!(progress_at(Path::new(p)), Progress::Unreadable { .. }),
                "{p}: {:?}",
                progress_at(Path::new(p))
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ckpt");
        std::fs::write(&f, b"42\n").unwrap();
        let Progress::File { size, sha256, .. } = progress_at(&f) else {
            panic!("{:?}", progress_at(&f));
        };
        assert_eq!(size, 3);
        assert!(sha256.is_some());
        assert_eq!(progress_at(&dir.path().join("none")), Progress::Missing);
        assert!(matches!(
            progress_at(dir.path()),
            Progress::Folder { entries: 1, .. }
        ));
        // A link is never followed.
        std::os::unix::fs::symlink(&f, dir.path().join("link")).unwrap();
        assert!(matches!(
            progress_at(&dir.path().join("link")),
            Progress::Unreadable { .. }
        ));
    }

    fn values() -> PatternValues<'static> {
        PatternValues {
            job_id_raw: "17",
            array_job_id: "14",
            array_task: Some("3"),
            user: "alice",
            job_name: "train",
            first_node: "n1",
        }
    }

    #[test]
    fn patterns_expand_like_slurm() {
        assert_eq!(
            expand_pattern("slurm-%A_%a.out", &values()),
            "slurm-14_3.out"
        );
        assert_eq!(expand_pattern("%x-%j.err", &values()), "train-17.err");
        assert_eq!(
            expand_pattern("/tmp/%u/%N/%4a.log", &values()),
            "/tmp/alice/n1/0003.log"
        );
        assert_eq!(expand_pattern("100%%-%q", &values()), "100%-%q");
        assert_eq!(expand_pattern("end%", &values()), "end%");
        // A user's absurd width is capped, and an absurd length cut short.
        let wide = expand_pattern("x-%10000000000000j.out", &values());
        assert_eq!(wide, format!("x-{}17.out", "0".repeat(MAX_PAD - 2)));
        assert!(expand_pattern(&"%99x".repeat(10_000), &values()).len() <= MAX_PATH + MAX_PAD + 8);
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "a\nb\nc\nd\n").unwrap();
        assert_eq!(tail(&p, 2, 1000, None).as_deref(), Some("c\nd"));
        assert_eq!(tail(&p, 10, 4, None).as_deref(), Some("c\nd"));
        assert_eq!(tail(&dir.path().join("missing"), 2, 10, None), None);
        // Not followed: a link, a FIFO, another user's file.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert_eq!(tail(&link, 2, 1000, None), None);
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(tail(&fifo, 2, 1000, None), None);
        // Devices are never opened for reading: not a terminal, not an endless stream.
        for dev in [
            "/dev/zero",
            "/dev/urandom",
            "/dev/null",
            "/dev/tty",
            "/dev/ptmx",
        ] {
            assert_eq!(tail(Path::new(dev), 2, 1000, None), None, "{dev}");
        }
        assert_eq!(tail(dir.path(), 2, 1000, None), None, "a directory");
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(tail(&p, 2, 1000, Some(me + 1)), None);
        assert!(tail(&p, 2, 1000, Some(me)).is_some());
    }
}
