//! One process's exclusive hold on a file: a state directory and a plain-sbatch spool
//! each belong to one daemon this way.

/// Why [`pid_lock`] did not take its lock.
pub(crate) enum PidLock {
    /// Another process holds it: `holder` is " (pid N)" from the file, or empty.
    Held {
        holder: String,
    },
    Io(std::io::Error),
}

/// An exclusive `flock` on the file at `path` (created 0600, never through a link), held
/// while the returned file is open; the file then holds this process's pid, for the
/// message another process that finds it held prints. A state directory and a plain-sbatch
/// spool each belong to one daemon this way.
pub(crate) fn pid_lock(path: &std::path::Path) -> Result<std::fs::File, PidLock> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)
        .map_err(PidLock::Io)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    } != 0
    {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(PidLock::Io(e));
        }
        let mut pid = String::new();
        let _ = (&f).take(32).read_to_string(&mut pid);
        let holder = match pid.trim() {
            "" => String::new(),
            p => format!(" (pid {p})"),
        };
        return Err(PidLock::Held { holder });
    }
    f.set_len(0).map_err(PidLock::Io)?;
    f.rewind().map_err(PidLock::Io)?;
    writeln!(f, "{}", std::process::id()).map_err(PidLock::Io)?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_lock_is_one_holders_and_names_it_to_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = pid_lock(&path).ok().expect("the first takes it");
        match pid_lock(&path) {
            Err(PidLock::Held { holder }) => {
                assert_eq!(holder, format!(" (pid {})", std::process::id()))
            }
            Err(PidLock::Io(e)) => panic!("expected it held; {e}"),
            Ok(_) => panic!("two holders of one lock"),
        }
        drop(held);
        assert!(
            pid_lock(&path).is_ok(),
            "free again once its holder closed it"
        );
        // Never through a link.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(pid_lock(&link), Err(PidLock::Io(_))));
    }
}
