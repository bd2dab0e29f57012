//! The notes on a filesystem of their own (`slurm-supervisord --mount-notes`, run as root
//! by the package's unit before the daemon starts: `ExecStartPre=+`).
//!
//! Every opted-in user can write into their own `notes/<uid>/`, and the daemon cannot
//! bound what they write between two scans. On the state directory's filesystem, one user
//! who filled it would stop the store's writes for everyone. So `notes/` gets a small
//! tmpfs of its own ([`OPTIONS`]): filled, it stops only plain sbatch's notes, never the
//! store. The notes are empty files read within a cycle, so a tmpfs loses nothing the
//! daemon needs across its own restarts; across a reboot, notes not yet read are lost (the
//! job_submit mark finds such jobs, when installed: docs/plain-sbatch.md).
//!
//! Mounting is done once, before the daemon takes the spool, and only where `notes/`
//! shares the state directory's filesystem; notes already waiting are carried over by
//! name, each recreated in its user's folder as that user's, never by following anything
//! a user made.

use super::{lock_down, note_job, Spool, SpoolError, MAX_LOCKED};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The tmpfs's options: root's, 0755 (as `notes/` must be: no user creates a name in
/// it), 16 MiB of data in all (a note has none) and 262,144 inodes (notes and users'
/// folders), mounted nosuid, nodev, noexec.
pub const OPTIONS: &str = "mode=0755,uid=0,gid=0,size=16m,nr_inodes=262144";

/// The most waiting notes carried over to the new filesystem; more are not carried (they
/// go with the old tree, logged): they were made before the daemon's last stop, and a site
/// with more has the job_submit mark to find those jobs.
const MAX_CARRIED: usize = 65_536;

/// The most waiting notes of one user carried over, and the most entries of one user's
/// folder read: one user's flood (notes or junk) takes their own share, never the others'
/// (it would otherwise use up [`MAX_CARRIED`] or [`MAX_READ`] before another user's
/// folder is read, and that user's notes would go with the old tree).
const MAX_CARRIED_PER_USER: usize = 4096;
const MAX_READ_PER_USER: usize = 65_536;

/// What `--mount-notes` found or did.
#[derive(Debug, PartialEq, Eq)]
pub enum Mounted {
    /// `notes/` was already on another filesystem than the state directory's (mounted
    /// before, or a spool configured elsewhere): nothing done.
    Apart,
    /// A tmpfs was mounted on `notes/`, with this many waiting notes carried over.
    Now { carried: usize, left: usize },
}

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error(transparent)]
    Spool(#[from] SpoolError),
    #[error("cannot mount a tmpfs on {path} ({OPTIONS}): {source}")]
    Mount {
        path: std::path::PathBuf,
        source: nix::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Puts `spool`'s `notes/` on a tmpfs of its own, unless it is already apart from
/// `state_dir`'s filesystem. Takes the spool's lock (refused while a daemon holds it), so
/// no daemon scans the folder while it moves.
pub fn mount_notes(spool: &Spool, state_dir: &Path) -> Result<Mounted, MountError> {
    mount_notes_with(spool, state_dir, |notes| {
        use nix::mount::MsFlags;
        nix::mount::mount(
            Some("slurm-supervisor-notes"),
            notes,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some(OPTIONS),
        )
    })
}

/// The name a notes folder set aside for the mount starts with (`<it>-<time>-<random>`).
/// One that is still there holds notes not carried yet: a start that stopped part way
/// leaves it, and the next start carries them.
const ASIDE: &str = "notes-unmounted";

/// What a folder set aside is renamed to once its notes are carried, before it is
/// removed: one that cannot be removed (too big to walk, an error) is never carried again.
const CARRIED: &str = "notes-carried";

/// [`mount_notes`], with the mount made by `mount` (the tests' seam).
fn mount_notes_with(
    spool: &Spool,
    state_dir: &Path,
    mount: impl FnOnce(&Path) -> nix::Result<()>,
) -> Result<Mounted, MountError> {
    let _lock = spool.prepare()?;
    let notes = spool.notes();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MountError::Io { path, source }
    };
    let (mounted, fresh) = if super::shares_filesystem(&notes, state_dir) {
        // The old folder moves aside whole (a rename in a folder only root writes), and a
        // new empty one takes its place for the mount. Its notes are read from where it
        // went, once it is closed to its users: none made before then is left behind.
        let aside = spool.set_aside(ASIDE).map_err(io(&notes))?;
        std::fs::create_dir(&notes).map_err(io(&notes))?;
        std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o755))
            .map_err(io(&notes))?;
        // Refused, the notes are carried all the same, into the new folder on the state
        // filesystem as before (the old one's folders are closed to their users already).
        (Some(mount(&notes)), Some(aside))
    } else {
        (None, None)
    };
    // This start's folder set aside, and any an earlier start left there when it stopped
    // between setting its folder aside and removing it.
    let (carried, left) = carry_set_aside(spool, fresh);
    match mounted {
        None => Ok(Mounted::Apart),
        Some(Ok(())) => Ok(Mounted::Now { carried, left }),
        Some(Err(source)) => Err(MountError::Mount {
            path: notes,
            source,
        }),
    }
}

/// Carries the waiting notes of every notes folder set aside for the mount ([`ASIDE`])
/// into `notes/`, then removes the folder. `fresh`: the one this start set aside, closed
/// already, and whether its walk saw all of it. Returns how many notes were carried and
/// how many could not be.
fn carry_set_aside(spool: &Spool, fresh: Option<(std::path::PathBuf, bool)>) -> (usize, usize) {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let prefix = format!("{ASIDE}-");
    // Only the daemon's user creates names in the spool's folder.
    let trees: Vec<_> = std::fs::read_dir(&spool.root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().as_bytes().starts_with(prefix.as_bytes()))
        .map(|e| e.path())
        .filter(|p| {
            std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir() && m.uid() == me)
        })
        .collect();
    let (mut carried, mut left) = (0, 0);
    // Each user's account is looked up once (a lookup may ask a directory server), not
    // once for each of their notes.
    let mut gids: std::collections::HashMap<u32, Option<u32>> = Default::default();
    for tree in trees {
        // One an earlier start left is closed to its users again: that start may have
        // stopped before closing it whole (closing a closed folder changes nothing).
        let whole = match &fresh {
            Some((path, whole)) if *path == tree => *whole,
            _ => {
                let mut seen = 0;
                lock_down(&tree, &mut seen);
                seen <= MAX_LOCKED
            }
        };
        for (uid, name) in waiting_notes(&tree) {
            let gid = *gids
                .entry(uid)
                .or_insert_with(|| crate::slurm::RunAs::lookup(uid).map(|who| who.gid));
            let carried_one = match gid {
                Some(gid) => carry(spool, uid, gid, &name),
                None => Err(std::io::Error::other("no account on this host")),
            };
            match carried_one {
                Ok(()) => carried += 1,
                // Carried by an earlier start that stopped before renaming the folder.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => carried += 1,
                Err(e) => {
                    left += 1;
                    tracing::warn!(
                        "plain sbatch: the note {} of uid {uid} could not be carried to the new notes folder: {e}",
                        Path::new(&name).display()
                    );
                }
            }
        }
        // Renamed first, so its notes are never carried again (a job's id may name
        // another job by the next start); its folders were made the daemon's, so none
        // grows while it goes; one too big to walk whole is left for the admin rather
        // than hold the daemon's start.
        let done = tree.with_file_name(
            tree.file_name()
                .map(|n| n.to_string_lossy().replacen(ASIDE, CARRIED, 1))
                .unwrap_or_default(),
        );
        let removed = std::fs::rename(&tree, &done).and_then(|()| {
            if whole {
                std::fs::remove_dir_all(&done)
            } else {
                Err(std::io::Error::other(
                    "too many entries, left for the admin rather than hold the daemon's start",
                ))
            }
        });
        if let Err(e) = removed {
            tracing::error!(
                "plain sbatch: the notes folder before the mount, {}, could not be removed ({e}); its notes are carried already: remove it",
                done.display()
            );
        }
    }
    (carried, left)
}

/// The most entries of the users' folders read for waiting notes (a user's junk is
/// skipped, not carried; past this, the rest of the notes are not carried either).
const MAX_READ: usize = 1 << 20;

/// The notes waiting in `tree`, a notes folder set aside and closed ([`ASIDE`]), as the
/// scan would take them: in folders named by their owner's uid (only the daemon made
/// names in `notes/`, each user's folder for that user), empty regular files of that
/// owner named by a job id. Nothing is followed.
fn waiting_notes(tree: &Path) -> Vec<(u32, std::ffi::OsString)> {
    use std::os::unix::ffi::OsStrExt;
    let mut found = Vec::new();
    let mut read = 0;
    let Ok(folders) = std::fs::read_dir(tree) else {
        return found;
    };
    for f in folders.flatten() {
        let dir = f.path();
        let Some(uid) = super::uid_of_name(f.file_name().as_bytes())
            .filter(|_| std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_dir()))
        else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let (mut theirs, mut read_theirs) = (0, 0);
        for e in entries.flatten() {
            read += 1;
            read_theirs += 1;
            if found.len() >= MAX_CARRIED || read > MAX_READ {
                tracing::warn!("plain sbatch: more than {MAX_CARRIED} notes, or {MAX_READ} entries, were waiting; the rest are not carried to the new notes folder");
                return found;
            }
            if theirs >= MAX_CARRIED_PER_USER || read_theirs > MAX_READ_PER_USER {
                tracing::warn!("plain sbatch: uid {uid} had more than {MAX_CARRIED_PER_USER} notes, or {MAX_READ_PER_USER} entries, waiting; the rest of theirs are not carried to the new notes folder");
                break;
            }
            let name = e.file_name();
            let note = std::fs::symlink_metadata(dir.join(&name))
                .ok()
                .and_then(|m| note_job(uid, name.as_bytes(), &m));
            if note.is_some() {
                theirs += 1;
                found.push((uid, name))
            }
        }
    }
    found
}

/// Makes `uid`'s note `name` again in the new `notes/`: its folder (theirs and `gid`'s,
/// 0700) and an empty file of theirs, new (`O_EXCL`, never through a link).
fn carry(spool: &Spool, uid: u32, gid: u32, name: &std::ffi::OsStr) -> std::io::Result<()> {
    spool.make_folder(uid, gid)?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(spool.folder(uid).join(name))?;
    std::os::unix::fs::fchown(&f, Some(uid), Some(gid))
}

#[cfg(test)]
mod tests {
    use super::super::{lock_down, MAX_LOCKED};
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A spool in `dir` with a folder of this test's own user, whose uid is returned.
    fn spool_with_mine(dir: &Path) -> (Spool, u32) {
        let spool = Spool::at(dir.join("spool"));
        drop(spool.prepare().unwrap());
        let me = nix::unistd::geteuid().as_raw();
        spool
            .make_folder(me, nix::unistd::getegid().as_raw())
            .unwrap();
        (spool, me)
    }

    /// The notes folders set aside (or carried) still in the spool.
    fn left_aside(spool: &Spool) -> Vec<String> {
        std::fs::read_dir(&spool.root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("notes-"))
            .collect()
    }

    #[test]
    fn only_the_notes_a_scan_would_take_are_carried() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, me) = spool_with_mine(dir.path());
        let f = spool.folder(me);
        std::fs::write(f.join("42.1.1"), b"").unwrap();
        std::fs::write(f.join("43.1.1"), b"not empty").unwrap();
        std::fs::write(f.join("junk"), b"").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", f.join("44.1.1")).unwrap();
        std::fs::create_dir(f.join("45.1.1")).unwrap();
        // A folder not named by a uid is no one's; a note of another user in one's folder
        // is not one.
        std::fs::create_dir(spool.notes().join("junk")).unwrap();
        std::fs::write(spool.notes().join("junk").join("46.1.1"), b"").unwrap();
        std::fs::create_dir(spool.notes().join((me + 1).to_string())).unwrap();
        std::fs::write(spool.notes().join((me + 1).to_string()).join("47.1.1"), b"").unwrap();
        let got = waiting_notes(&spool.notes());
        assert_eq!(got, vec![(me, std::ffi::OsString::from("42.1.1"))]);
    }

    /// A mount refused (here by the seam) leaves the notes where they were, on the state
    /// filesystem: each waiting note is carried into the new folder all the same, its
    /// user's folder theirs again (the old tree's were closed as it was set aside), and
    /// the refusal is the answer.
    #[test]
    fn a_refused_mount_carries_the_notes_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let (spool, me) = spool_with_mine(dir.path());
        std::fs::write(spool.folder(me).join("42.1.1"), b"").unwrap();
        let got = mount_notes_with(&spool, dir.path(), |_| Err(nix::Error::EPERM));
        assert!(matches!(got, Err(MountError::Mount { .. })), "{got:?}");
        let folder = std::fs::symlink_metadata(spool.folder(me)).unwrap();
        assert_eq!((folder.uid(), folder.mode() & 0o7777), (me, 0o700));
        assert!(spool.folder(me).join("42.1.1").is_file());
        let left = left_aside(&spool);
        assert!(left.is_empty(), "{left:?}");
    }

    /// Session 20: a start that stopped between setting the notes aside and carrying them
    /// (a crash, a kill) left them in the closed folder for good, and their jobs went
    /// unsupervised. The next start carries them: here both when it mounts and when the
    /// notes are apart already.
    #[test]
    fn notes_a_stopped_start_set_aside_are_carried_by_the_next() {
        let stopped_after_setting_aside = |dir: &Path| {
            let (spool, me) = spool_with_mine(dir);
            std::fs::write(spool.folder(me).join("42.1.1"), b"").unwrap();
            spool.set_aside(ASIDE).unwrap();
            (spool, me)
        };
        // On the state filesystem: the next start mounts.
        let dir = tempfile::tempdir().unwrap();
        let (spool, me) = stopped_after_setting_aside(dir.path());
        let got = mount_notes_with(&spool, dir.path(), |_| Ok(())).unwrap();
        assert_eq!(
            got,
            Mounted::Now {
                carried: 1,
                left: 0
            }
        );
        assert!(spool.folder(me).join("42.1.1").is_file());
        assert_eq!(left_aside(&spool), Vec::<String>::new());
        // Apart already (the spool on /dev/shm, the state in the temporary directory).
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        let (spool, me) = stopped_after_setting_aside(shm.path());
        assert!(!crate::daemon::plain::shares_filesystem(
            shm.path(),
            dir.path()
        ));
        let got = mount_notes_with(&spool, dir.path(), |_| panic!("nothing to mount")).unwrap();
        assert_eq!(got, Mounted::Apart);
        assert!(spool.folder(me).join("42.1.1").is_file());
        assert_eq!(left_aside(&spool), Vec::<String>::new());
        // A folder whose notes were carried but that could not be removed is not carried
        // again: the note the scan took meanwhile stays taken.
        std::fs::remove_file(spool.folder(me).join("42.1.1")).unwrap();
        let kept = spool.root.join(format!("{CARRIED}-1-0"));
        std::fs::create_dir_all(kept.join(me.to_string())).unwrap();
        std::fs::write(kept.join(me.to_string()).join("42.1.1"), b"").unwrap();
        mount_notes_with(&spool, dir.path(), |_| panic!("nothing to mount")).unwrap();
        assert!(!spool.folder(me).join("42.1.1").exists());
    }

    /// Review 19: the bounds were for all users together, so one user who left 65,536
    /// notes (or a million entries) before an upgrade used them up before another user's
    /// folder was read, whenever hers came first, and that user's waiting notes went with
    /// the old tree. Each user's flood now takes their own share only.
    #[test]
    fn one_users_flood_of_notes_leaves_another_users_note_carried() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the test makes folders of other users: run it as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::at(dir.path().join("spool"));
        drop(spool.prepare().unwrap());
        for u in [4101, 4102] {
            spool.make_folder(u, u).unwrap();
        }
        // The flood is in the folder read first, whatever the filesystem's order.
        let order: Vec<u32> = std::fs::read_dir(spool.notes())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
            .collect();
        let (mallory, alice) = (order[0], order[1]);
        let note = |uid: u32, name: String| {
            let p = spool.folder(uid).join(name);
            std::fs::write(&p, b"").unwrap();
            std::os::unix::fs::lchown(&p, Some(uid), Some(uid)).unwrap();
        };
        for i in 0..=MAX_CARRIED {
            note(mallory, format!("{}.1.1", 100 + i));
        }
        note(alice, "42.1.1".into());
        let got = waiting_notes(&spool.notes());
        assert!(
            got.contains(&(alice, "42.1.1".into())),
            "alice's note is not carried: {} notes found, all mallory's",
            got.len()
        );
        let hers = got.iter().filter(|(u, _)| *u == mallory).count();
        assert_eq!(hers, MAX_CARRIED_PER_USER);
    }

    #[test]
    fn the_old_tree_is_made_roots_top_down_and_never_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("old");
        std::fs::create_dir_all(top.join("1000/deeper")).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&outside, top.join("1000/link")).unwrap();
        let mut seen = 0;
        assert_eq!(lock_down(&top, &mut seen), 0);
        assert_eq!(seen, 2 + 1);
        for d in [top.clone(), top.join("1000"), top.join("1000/deeper")] {
            let m = std::fs::symlink_metadata(&d).unwrap();
            assert_eq!(m.mode() & 0o7777, 0o700, "{}", d.display());
        }
        // The folder a link names is not touched.
        let m = std::fs::metadata(&outside).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o755);
        // A tree past the bound is refused, not walked to its end.
        let mut seen = MAX_LOCKED;
        assert!(lock_down(&top, &mut seen) > 0);
    }

    /// Review 19: a chain of folders deeper than a path can name, in one user's folder,
    /// stopped the walk at its first error and left every other user's folder theirs.
    #[test]
    fn a_folder_the_walk_cannot_reach_stops_it_for_no_one_else() {
        use nix::fcntl::{openat, OFlag};
        use nix::sys::stat::{mkdirat, Mode};
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("old");
        std::fs::create_dir_all(top.join("1000")).unwrap();
        // Other users' folders, some listed after 1000's whatever the listing's order.
        let others: Vec<_> = (1001..1021).map(|u| top.join(u.to_string())).collect();
        for o in &others {
            std::fs::create_dir(o).unwrap();
            std::fs::set_permissions(o, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        // 2,100 levels of `d`: past PATH_MAX from the top.
        let open = |at: i32, name: &str| {
            let fd = openat(
                Some(at),
                name,
                OFlag::O_DIRECTORY | OFlag::O_RDONLY,
                Mode::empty(),
            )
            .unwrap();
            // SAFETY: a descriptor openat just returned, owned by nothing else.
            unsafe { OwnedFd::from_raw_fd(fd) }
        };
        let mut at = open(libc::AT_FDCWD, top.join("1000").to_str().unwrap());
        for _ in 0..2100 {
            mkdirat(Some(at.as_raw_fd()), "d", Mode::from_bits_truncate(0o755)).unwrap();
            at = open(at.as_raw_fd(), "d");
        }
        drop(at);
        let failed = lock_down(&top, &mut 0);
        assert!(failed > 0);
        for o in &others {
            let m = std::fs::symlink_metadata(o).unwrap();
            assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o700), "{}", o.display());
        }
        std::fs::remove_dir_all(&top).unwrap();
    }
}
