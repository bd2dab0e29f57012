//! Plain `sbatch`, supervised (docs/plain-sbatch.md). The site's cli_filter
//! (`config/slurm/cli_filter.lua`, installed as /usr/share/slurm-supervisor/cli_filter.lua)
//! runs inside each user's sbatch; for a user who is opted in it leaves a *note* once Slurm
//! has given the job its id: an empty file named `<job id>.<anything>` in the user's own
//! notes folder, `notes/<uid>/`. sbatch never waits on the daemon: writing the note is all
//! the filter does.
//!
//! **Invariant:** no user can create a name in the spool that another user's filter will
//! open. `notes/` is the daemon's (0755): no user can create, rename or remove anything in
//! it. Only the daemon creates `notes/<uid>/`, owned by that uid, mode 0700, so only its
//! user (and root) can put anything in it: a link or a FIFO there can only be its user's
//! own, and the filter (Lua 5.1, whose `io.open` can neither refuse a link nor a FIFO)
//! writes only into its own uid's folder. The filter writes nothing unless the daemon has
//! published this layout (the `notes per-user` line of `default`), so a spool of an older
//! daemon, whose `notes/` anyone could write, is never written into.
//!
//! The daemon looks at the folders once a cycle (no Slurm command unless a note is there),
//! fairly: at most [`NOTES_PER_USER_PER_CYCLE`] notes and [`ENTRIES_PER_USER_PER_CYCLE`]
//! entries of one user a cycle, users taken in turn from where the last cycle stopped, so
//! no user's entries delay another's beyond a cycle. It trusts a folder only when its name
//! is a uid and its owner (the kernel's word) is that uid; for each note it adopts the job
//! through the engine `adopt` uses, as the folder's user: the job id is the note's name
//! (digits only; nothing in the file is read), and the job is adopted only if Slurm shows
//! it owned by that same uid, and the uid is opted in. Anything in a folder that is not a
//! note (a link, a FIFO, a folder, a file with content, another name) is removed unread,
//! never followed: nothing but the last component of a path the daemon removes is a
//! user's, and that one is `unlink`ed, never opened.
//!
//! Adoption is `requests/adopt.rs`'s `adopt_job`, the one engine of adoption: it checks
//! with squeue that the job is that uid's and never takes a job with this store's tag. A
//! job the daemon will not supervise (an array, a heterogeneous job, a record it cannot
//! read) is refused whole, runs as submitted, and is recorded (`plain_refused`), so its
//! owner sees why (`access::chains_for`). With `[plain_sbatch] admin_comment`, the jobs
//! the site's job_submit script (`config/slurm/job_submit.lua`) marked are listed too
//! (`Slurm::marked_jobs`, see [`discover`]) and adopted the same way as their owner, the
//! mark checked again in the job's own record.
//!
//! The filter learns who is opted in from files the daemon publishes here: `optin/<uid>`
//! (`in` or `out`, a user's own choice, kept in the store) and `default` (`everyone`,
//! `none`, or `groups GID...`: the config's site default; then `notes per-user`). The
//! daemon decides again itself from the store and config; the files only spare the filter
//! a question to the daemon.
//!
//! Discovery runs after each cycle with a request's `Desk` (adopting is `adopt`'s): the
//! store, the config, and of Slurm what adoption asks (`Lookup`, the marked jobs too).

pub mod mount;

use crate::config::{Config, PlainSbatchConfig};
use crate::daemon::engine::Desk;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The most notes looked at in one cycle, all users together: each costs three Slurm
/// calls (its owner, its record, its script). More wait for the next cycles.
pub const MAX_NOTES_PER_CYCLE: usize = 32;

/// The most notes of one user looked at in one cycle: a user who leaves many waits for
/// the next cycles, and the others' are looked at in this one.
pub const NOTES_PER_USER_PER_CYCLE: usize = 8;

/// The most entries of one user's folder read in one cycle (junk is removed as it is
/// read, so a user who fills their folder slows only the draining of it).
pub const ENTRIES_PER_USER_PER_CYCLE: usize = 64;

/// The line of `default` that tells the filter the notes go into per-user folders the
/// daemon made (config/slurm/cli_filter.lua checks for it).
pub const LAYOUT_LINE: &str = "notes per-user";

/// A note the filter left: the job it names and whose folder it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub job_id: String,
    pub uid: u32,
    pub name: std::ffi::OsString,
}

/// The spool's paths, and where the scan of the notes stands.
#[derive(Debug, Clone)]
pub struct Spool {
    pub root: PathBuf,
    /// The uid after which the next scan starts (users are taken in turn).
    next_after: Option<u32>,
    /// The folders found empty, with the change time they had then: not read again until
    /// it changes (any entry created or removed changes it).
    drained: HashMap<u32, (i64, i64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("plain_sbatch.spool {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("plain_sbatch.spool {path} is {what}; it must be a folder of the daemon's user, not a link, writable by no one else")]
    Unsafe { path: PathBuf, what: String },
    #[error(
        "plain_sbatch.spool {path} is used by another daemon{holder}; one daemon reads a spool"
    )]
    Locked { path: PathBuf, holder: String },
}

/// Whether `a` and `b` are on one filesystem: the device numbers of each, or of its
/// nearest folder that exists (a state directory not made yet is on its parent's).
fn shares_filesystem(a: &Path, b: &Path) -> bool {
    let dev = |p: &Path| {
        p.ancestors()
            .find_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.dev())
    };
    match (dev(a), dev(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

impl Spool {
    pub fn of(config: &Config) -> Spool {
        Spool::at(config.plain_spool())
    }

    pub fn at(root: PathBuf) -> Spool {
        Spool {
            root,
            next_after: None,
            drained: HashMap::new(),
        }
    }

    pub fn notes(&self) -> PathBuf {
        self.root.join("notes")
    }

    /// A user's own notes folder.
    pub fn folder(&self, uid: u32) -> PathBuf {
        self.notes().join(uid.to_string())
    }

    fn optin(&self) -> PathBuf {
        self.root.join("optin")
    }

    /// Moves `notes/` aside whole (`<prefix>-<time>-<random>`, a rename in a folder only
    /// the daemon writes; the random part keeps two in one second apart) and makes every folder in it the daemon's and 0700 ([`lock_down`]), so that
    /// no user adds to it any more, even through a folder of theirs held open. Returns
    /// where it is and whether the walk saw all of it.
    fn set_aside(&self, prefix: &str) -> std::io::Result<(PathBuf, bool)> {
        let aside = self.root.join(format!(
            "{prefix}-{}-{:08x}",
            crate::plumbing::clock::now(),
            rand::random::<u32>()
        ));
        std::fs::rename(self.notes(), &aside)?;
        let mut seen = 0;
        let failed = lock_down(&aside, &mut seen);
        if failed > 0 {
            tracing::warn!(
                "plain sbatch: {failed} folders of {} could not be closed to their users; one holding such a folder open can still write there (docs/security.md)",
                aside.display()
            );
        }
        Ok((aside, seen <= MAX_LOCKED))
    }

    /// Creates the folders (the spool, `notes/` and `optin/`, each 0755) or checks the
    /// ones there: each a real folder of the daemon's user. A `notes/` of an older version
    /// (1733: anyone could create names in it, plant links and FIFOs, make folders) is
    /// moved aside whole, closed to everyone (0700), and a new one made: nothing in it is
    /// taken up (docs/plain-sbatch.md, upgrading). Returns the lock that makes the spool
    /// this daemon's (held while it runs).
    pub fn prepare(&self) -> Result<std::fs::File, SpoolError> {
        let me = nix::unistd::geteuid().as_raw();
        let io = |dir: &Path| {
            let dir = dir.to_path_buf();
            move |source| SpoolError::Io { path: dir, source }
        };
        if let Ok(m) = std::fs::symlink_metadata(self.notes()) {
            if m.file_type().is_dir() && m.uid() == me && m.mode() & 0o7777 != 0o755 {
                let (aside, _) = self.set_aside("notes-before").map_err(io(&self.notes()))?;
                tracing::warn!(
                    "plain sbatch: the notes folder of an older version, which every user could write, is moved aside to {} (its notes are not taken up; remove it when convenient); install the new cli_filter.lua (docs/plain-sbatch.md)",
                    aside.display()
                );
            }
        }
        for dir in [self.root.clone(), self.notes(), self.optin()] {
            match std::fs::symlink_metadata(&dir) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::create_dir(&dir).map_err(io(&dir))?
                }
                Err(e) => return Err(io(&dir)(e)),
                Ok(m) if !m.file_type().is_dir() => {
                    return Err(SpoolError::Unsafe {
                        path: dir,
                        what: "not a folder".into(),
                    })
                }
                Ok(m) if m.uid() != me => {
                    return Err(SpoolError::Unsafe {
                        path: dir,
                        what: format!("owned by uid {}", m.uid()),
                    })
                }
                Ok(_) => {}
            }
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                .map_err(io(&dir))?;
        }
        let path = self.root.join("lock");
        super::pid_lock::pid_lock(&path).map_err(|e| match e {
            super::pid_lock::PidLock::Held { holder } => SpoolError::Locked {
                path: self.root.clone(),
                holder,
            },
            super::pid_lock::PidLock::Io(source) => SpoolError::Io { path, source },
        })
    }

    /// Makes `uid`'s own notes folder, owned by `uid` and group `gid`, 0700, or puts the
    /// one there right (its mode back to 0700). Only the daemon can create anything in
    /// `notes/`, so the folder it finds is one it made: its owner is checked all the same.
    pub fn make_folder(&self, uid: u32, gid: u32) -> std::io::Result<()> {
        let dir = self.folder(uid);
        match std::fs::symlink_metadata(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&dir)?;
                std::os::unix::fs::lchown(&dir, Some(uid), Some(gid))?;
            }
            Err(e) => return Err(e),
            Ok(m) if m.file_type().is_dir() && m.uid() == uid => {
                if m.mode() & 0o7777 == 0o700 {
                    return Ok(());
                }
            }
            Ok(m) => {
                return Err(std::io::Error::other(format!(
                    "{} is in the way (not a folder of uid {uid}, but of uid {})",
                    dir.display(),
                    m.uid()
                )))
            }
        }
        // A folder (checked above, or made just now), which its user cannot replace: the
        // mode is set on it, never through a link.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
    }

    /// Publishes who is opted in for the filter: `optin/<uid>` for each user's own choice
    /// (others' files removed) and `default` for the site's, with the notes' layout. Each
    /// file is written whole and renamed into place, so the filter never reads half of
    /// one.
    pub fn publish(&self, choices: &[(u32, bool)], site: &SiteDefault) -> std::io::Result<()> {
        replace_file(
            &self.root.join("default"),
            &format!("{}{LAYOUT_LINE}\n", site.published()),
        )?;
        let keep: HashSet<String> = choices.iter().map(|(u, _)| u.to_string()).collect();
        for e in std::fs::read_dir(self.optin())? {
            let e = e?;
            if !keep.contains(e.file_name().to_string_lossy().as_ref()) {
                std::fs::remove_file(e.path())?;
            }
        }
        for (uid, opted_in) in choices {
            replace_file(&self.optin().join(uid.to_string()), choice_text(*opted_in))?;
        }
        Ok(())
    }

    /// Publishes one user's own choice (`None`: none recorded) after a request of theirs:
    /// their `optin/<uid>` only, and only when it says something else than the choice. A
    /// user's `opt-in`, however often repeated, costs one small read and at most one file,
    /// never a rewrite of every user's (that is `publish`, at start and reload).
    pub fn publish_one(&self, uid: u32, choice: Option<bool>) -> std::io::Result<()> {
        let path = self.optin().join(uid.to_string());
        let Some(opted_in) = choice else {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        };
        let text = choice_text(opted_in);
        // lstat first: only a regular file of the daemon's own folder is read.
        let same = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file())
            && std::fs::read(&path).is_ok_and(|b| b == text.as_bytes());
        if same {
            return Ok(());
        }
        replace_file(&path, text)
    }

    /// The users' folders the scan trusts, by uid: a folder named by a uid and owned by
    /// it. Anything else in `notes/` (only the daemon's user can have put it there) is
    /// removed if it can be without looking inside, else left and logged.
    fn folders(&self) -> std::io::Result<Vec<(u32, std::fs::Metadata)>> {
        use std::os::unix::ffi::OsStrExt;
        let dir = self.notes();
        let mut found = Vec::new();
        for e in std::fs::read_dir(&dir)? {
            let Ok(e) = e else { continue };
            let name = e.file_name();
            let path = dir.join(&name);
            // lstat: a link is looked at, never followed.
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            match users_folder(name.as_bytes(), &m) {
                Some(uid) => {
                    // A folder its user opened to others (where they could plant links
                    // and FIFOs for the user's own filter) is closed again each cycle. It
                    // cannot be replaced by its user (`notes/` is the daemon's): the mode
                    // is set on the folder lstat saw.
                    if m.mode() & 0o7777 != 0o700 {
                        if let Err(e) =
                            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
                        {
                            tracing::warn!(
                                "plain sbatch: cannot close {} to others again: {e}",
                                path.display()
                            );
                        }
                    }
                    found.push((uid, m))
                }
                _ => {
                    let removed = if m.file_type().is_dir() {
                        std::fs::remove_dir(&path)
                    } else {
                        std::fs::remove_file(&path)
                    };
                    if let Err(e) = removed {
                        tracing::warn!(
                            "plain sbatch: {} is not a user's notes folder and cannot be removed: {e}",
                            path.display()
                        );
                    }
                }
            }
        }
        found.sort_by_key(|(uid, _)| *uid);
        Ok(found)
    }

    /// Reads the notes waiting, fairly: users in turn from where the last scan stopped,
    /// at most [`NOTES_PER_USER_PER_CYCLE`] notes and [`ENTRIES_PER_USER_PER_CYCLE`]
    /// entries of each, [`MAX_NOTES_PER_CYCLE`] in all, removing on the way every entry
    /// that is not a note: anything but an empty regular file of the folder's user whose
    /// name starts with a job id. Nothing is opened or followed: a note's folder and name
    /// are all it says.
    pub fn scan(&mut self) -> std::io::Result<Vec<Note>> {
        use std::os::unix::ffi::OsStrExt;
        let folders = self.folders()?;
        let present: HashSet<u32> = folders.iter().map(|(u, _)| *u).collect();
        self.drained.retain(|u, _| present.contains(u));
        // In turn: those after the last one served first, then the others.
        let split = folders.partition_point(|(u, _)| Some(*u) <= self.next_after);
        let order = folders[split..].iter().chain(&folders[..split]);
        let mut notes = Vec::new();
        for (uid, m) in order {
            if notes.len() >= MAX_NOTES_PER_CYCLE {
                break;
            }
            let changed = (
                m.mtime() * 1_000_000_000 + m.mtime_nsec(),
                m.ctime() * 1_000_000_000 + m.ctime_nsec(),
            );
            if self.drained.get(uid) == Some(&changed) {
                continue;
            }
            self.next_after = Some(*uid);
            let dir = self.folder(*uid);
            let mut theirs = 0;
            let mut left = false;
            // One user's folder that cannot be read holds up no one else's.
            let entries = match std::fs::read_dir(&dir) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!("plain sbatch: cannot read {}: {e}", dir.display());
                    continue;
                }
            };
            for (read, e) in entries.enumerate() {
                if read >= ENTRIES_PER_USER_PER_CYCLE
                    || theirs >= NOTES_PER_USER_PER_CYCLE
                    || notes.len() >= MAX_NOTES_PER_CYCLE
                {
                    left = true;
                    break;
                }
                let Ok(e) = e else { continue };
                let name = e.file_name();
                let path = dir.join(&name);
                // lstat: a link is looked at, never followed. `notes/<uid>` cannot be
                // replaced by its user (`notes/` is the daemon's), so only the last
                // component of this path is theirs.
                let Ok(em) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                match note_job(*uid, name.as_bytes(), &em) {
                    Some(job_id) => {
                        theirs += 1;
                        notes.push(Note {
                            job_id,
                            uid: *uid,
                            name,
                        });
                    }
                    _ => {
                        tracing::debug!(
                            "plain sbatch: removing {:?} from uid {uid}'s notes folder (not a note)",
                            name
                        );
                        // unlink and rmdir remove the entry itself, never what a link
                        // names; a folder that is not empty stays (it holds up only its
                        // own user's notes).
                        let _ = if em.file_type().is_dir() {
                            std::fs::remove_dir(&path)
                        } else {
                            std::fs::remove_file(&path)
                        };
                    }
                }
            }
            // A folder changed in the last seconds may change again within the same tick
            // of a coarse clock: it is read again whatever its times say.
            let settled = crate::plumbing::clock::now() - m.ctime() >= 2;
            if !left && theirs == 0 && settled {
                // Read whole and nothing in it: not read again until it changes.
                self.drained.insert(*uid, changed);
            } else {
                self.drained.remove(uid);
            }
        }
        Ok(notes)
    }

    /// Removes a note that was dealt with.
    pub fn remove(&self, note: &Note) {
        let _ = std::fs::remove_file(self.folder(note.uid).join(&note.name));
    }
}

/// What `optin/<uid>` says for a choice.
fn choice_text(opted_in: bool) -> &'static str {
    if opted_in {
        "in\n"
    } else {
        "out\n"
    }
}

/// Writes `text` whole into a new file beside `path` and renames it into place, so the
/// filter never reads half of one.
fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("new");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// The uid whose own notes folder an entry of `notes/` is, by its name and `lstat`: a
/// folder named by a uid and owned by it (the kernel's word). Anything else is no one's.
fn users_folder(name: &[u8], m: &std::fs::Metadata) -> Option<u32> {
    uid_of_name(name).filter(|&uid| m.file_type().is_dir() && m.uid() == uid)
}

/// The job an entry of `uid`'s folder is a note of, by its name and `lstat`: an empty
/// regular file of that user named by a job id. Anything else is not a note.
fn note_job(uid: u32, name: &[u8], m: &std::fs::Metadata) -> Option<String> {
    job_of_name(name).filter(|_| m.file_type().is_file() && m.uid() == uid && m.len() == 0)
}

/// The most entries of a notes folder set aside ([`Spool::set_aside`]) that are walked;
/// a tree with more is left for the admin (logged), so that a user who filled their folder
/// cannot hold the daemon's start.
pub(super) const MAX_LOCKED: usize = 1 << 20;

/// Makes the folder `dir` and every folder under it the daemon's and 0700, breadth first (every
/// user's folder before anything deeper in any of them): each is opened without following
/// a link and changed through its descriptor, so once a folder is done no one but root
/// changes what is in it, and the paths below it are root's. A folder that cannot be done
/// (a path too long, a name that went away) is counted and the walk goes on; past
/// [`MAX_LOCKED`] entries it stops. Returns how many could not be done.
pub(super) fn lock_down(dir: &Path, seen: &mut usize) -> usize {
    let mut failed = 0;
    let mut queue = std::collections::VecDeque::from([dir.to_path_buf()]);
    while let Some(dir) = queue.pop_front() {
        let locked = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NOCTTY)
            .open(&dir)
            .and_then(|f| {
                let me = nix::unistd::geteuid().as_raw();
                std::os::unix::fs::fchown(&f, Some(me), Some(nix::unistd::getegid().as_raw()))?;
                f.set_permissions(std::fs::Permissions::from_mode(0o700))
            })
            .and_then(|()| std::fs::read_dir(&dir));
        let entries = match locked {
            Ok(entries) => entries,
            Err(_) => {
                failed += 1;
                continue;
            }
        };
        for e in entries {
            *seen += 1;
            if *seen > MAX_LOCKED {
                return failed + 1 + queue.len();
            }
            match e.and_then(|e| Ok((e.file_type()?, e.path()))) {
                Ok((ty, path)) if ty.is_dir() => queue.push_back(path),
                Ok(_) => {}
                Err(_) => failed += 1,
            }
        }
    }
    failed
}

/// The uid a folder's name is: digits only, no leading zero (but `0` itself).
fn uid_of_name(name: &[u8]) -> Option<u32> {
    if name.is_empty() || name.len() > 10 || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if name[0] == b'0' && name.len() > 1 {
        return None;
    }
    std::str::from_utf8(name).ok()?.parse().ok()
}

/// The job id a note's name starts with: 1 to 10 digits, then `.` and at most 64 bytes
/// more (the filter writes `<job id>.<pid>.<time>`). Anything else is not a note.
pub fn job_of_name(name: &[u8]) -> Option<String> {
    let dot = name.iter().position(|&b| b == b'.')?;
    let (id, rest) = name.split_at(dot);
    if id.is_empty() || id.len() > 10 || !id.iter().all(u8::is_ascii_digit) || rest.len() > 65 {
        return None;
    }
    if id[0] == b'0' {
        return None;
    }
    String::from_utf8(id.to_vec()).ok()
}

/// The site's default, with group names turned into gids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SiteDefault {
    None,
    Everyone,
    Groups(Vec<u32>),
}

impl SiteDefault {
    /// From the config; a group that does not exist is left out and returned by name.
    pub fn of(c: &PlainSbatchConfig) -> (SiteDefault, Vec<String>) {
        if c.everyone {
            return (SiteDefault::Everyone, Vec::new());
        }
        if c.groups.is_empty() {
            return (SiteDefault::None, Vec::new());
        }
        let mut gids = Vec::new();
        let mut unknown = Vec::new();
        for g in &c.groups {
            match nix::unistd::Group::from_name(g).ok().flatten() {
                Some(gr) => gids.push(gr.gid.as_raw()),
                None => unknown.push(g.clone()),
            }
        }
        (SiteDefault::Groups(gids), unknown)
    }

    /// The `default` file's text, as the filter reads it.
    pub fn published(&self) -> String {
        match self {
            SiteDefault::None => "none\n".into(),
            SiteDefault::Everyone => "everyone\n".into(),
            SiteDefault::Groups(g) => {
                let gids: Vec<String> = g.iter().map(u32::to_string).collect();
                format!("groups {}\n", gids.join(" "))
            }
        }
    }
}

/// Whether a user's plain sbatch submissions are supervised: their own choice if they made
/// one, else the site's default (`groups`: the groups of the uid's account, its primary
/// one included).
pub fn opted_in(
    choice: Option<bool>,
    site: &SiteDefault,
    groups_of: impl FnOnce() -> Vec<u32>,
) -> bool {
    match (choice, site) {
        (Some(c), _) => c,
        (None, SiteDefault::None) => false,
        (None, SiteDefault::Everyone) => true,
        (None, SiteDefault::Groups(g)) => groups_of().iter().any(|x| g.contains(x)),
    }
}

/// Whether a daemon running as `daemon_uid` may take up a note of `note_uid`'s: a root
/// daemon anyone's (it runs each user's commands as them), a per-user daemon only its own
/// user's (it runs every command as itself: another user's job would be retried with
/// their script as this daemon's user).
pub fn may_take(note_uid: u32, daemon_uid: u32) -> bool {
    daemon_uid == 0 || note_uid == daemon_uid
}

/// The groups of a uid's account (none when it has no account).
pub fn groups_of_uid(uid: u32) -> Vec<u32> {
    let Some(u) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
    else {
        return Vec::new();
    };
    let Ok(name) = std::ffi::CString::new(u.name) else {
        return Vec::new();
    };
    nix::unistd::getgrouplist(&name, u.gid)
        .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_else(|_| vec![u.gid.as_raw()])
}

/// A daemon's plain-sbatch side: its spool (locked for it) and the site's default.
#[derive(Debug)]
pub struct Plain {
    pub spool: Spool,
    pub site: SiteDefault,
    /// Notes whose adoption Slurm did not answer, and how many times: one that keeps
    /// failing (a job whose script can no longer be read) is given up after
    /// [`MAX_TRIES`].
    tries: std::collections::HashMap<std::ffi::OsString, u32>,
    /// `[plain_sbatch] admin_comment`: the job_submit script's marks are listed too.
    marks: Option<Marks>,
    /// The users this daemon has looked at since the opt-in files were last published:
    /// whose notes folder exists if they are opted in (made when first seen).
    seen: HashSet<u32>,
    _lock: std::fs::File,
}

/// The admin_comment mark the job_submit script sets (config/slurm/job_submit.lua, MARK).
pub const MARK: &str = "slurm-supervisor:plain";

/// The longest time between two listings of the marks (one squeue each): as the poll's
/// listing of the owners' pending jobs, every ten poll intervals, at most a minute apart.
/// A job that ended is still listed while the controller keeps it (`MinJobAge`, 300 s by
/// default), so one killed within a second is found all the same.
const MARKS_AT_MOST_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The discovery of marked jobs: when it last listed them, and the jobs of that listing it
/// left alone (not opted in, or not theirs: asked about once, not every listing).
#[derive(Debug)]
struct Marks {
    every: std::time::Duration,
    last: Option<std::time::Instant>,
    left_alone: std::collections::HashSet<(String, u32)>,
}

/// Cycles a note is tried while Slurm does not answer about its job.
const MAX_TRIES: u32 = 20;

impl Plain {
    /// Prepares and locks the spool and publishes who is opted in, when the config turns
    /// plain sbatch on; `None` when it does not.
    pub fn start(
        config: &Config,
        store: &crate::store::Store,
    ) -> Result<Option<Plain>, SpoolError> {
        if !config.plain_sbatch.enabled {
            return Ok(None);
        }
        if config.cluster.is_some() && !config.plain_sbatch.admin_comment {
            tracing::warn!(
                "cluster mode: only this login node's plain-sbatch notes are read, and only while this daemon acts; a job submitted with plain sbatch on another login node is found only by the job_submit mark: install config/slurm/job_submit.lua and set plain_sbatch.admin_comment = true (docs/plain-sbatch.md)"
            );
        }
        let spool = Spool::of(config);
        let lock = spool.prepare()?;
        if nix::unistd::geteuid().is_root() {
            if shares_filesystem(&spool.notes(), &config.state_dir) {
                tracing::warn!(
                    notes = %spool.notes().display(),
                    state_dir = %config.state_dir.display(),
                    "the plain-sbatch notes are on the state directory's filesystem: each user's notes folder is theirs, so a user can fill that filesystem and stop the store's writes; run `slurm-supervisord --mount-notes` as root before the daemon starts (the package's unit does), or put the spool on another filesystem ([plain_sbatch] spool) (docs/plain-sbatch.md)"
                );
            } else {
                tracing::info!(
                    notes = %spool.notes().display(),
                    "the plain-sbatch notes are on a filesystem of their own, apart from the state directory's"
                );
            }
        }
        let marks = config.plain_sbatch.admin_comment.then(|| Marks {
            every: (config.poll_interval * 10).min(MARKS_AT_MOST_EVERY),
            last: None,
            left_alone: Default::default(),
        });
        let mut p = Plain {
            spool,
            site: SiteDefault::None,
            tries: Default::default(),
            marks,
            seen: HashSet::new(),
            _lock: lock,
        };
        p.reload(config, store);
        // A per-user daemon's own user has met it.
        let me = nix::unistd::geteuid().as_raw();
        if me != 0 {
            p.seen(store, me);
        }
        Ok(Some(p))
    }

    /// Takes the config's site default again (a reload) and publishes the opt-in files.
    pub fn reload(&mut self, config: &Config, store: &crate::store::Store) {
        let (site, unknown) = SiteDefault::of(&config.plain_sbatch);
        if !unknown.is_empty() {
            tracing::warn!(groups = ?unknown, "plain_sbatch.groups names groups this host does not know; their members are not opted in");
        }
        self.site = site;
        self.publish(store);
    }

    /// Publishes the opt-in files from the store (after a user's choice), and makes the
    /// notes folder of each user who opted in. A failure is logged: the filter then goes
    /// by the files as they were, and the daemon still decides from the store.
    pub fn publish(&mut self, store: &crate::store::Store) {
        self.seen.clear();
        let result = store.plain_opts().map_err(|e| e.to_string()).and_then(|c| {
            self.spool
                .publish(&c, &self.site)
                .map_err(|e| e.to_string())?;
            Ok(c)
        });
        match result {
            Ok(choices) => {
                for (uid, _) in choices.iter().filter(|(_, opted_in)| *opted_in) {
                    self.make_folder(*uid);
                    self.seen.insert(*uid);
                }
            }
            Err(e) => tracing::error!(
                "cannot publish who is opted in to plain sbatch in {}: {e}",
                self.spool.root.display()
            ),
        }
    }

    /// Publishes `uid`'s own choice after a request of theirs (`Spool::publish_one`: their
    /// file only, and only when it changed), and makes their notes folder if they are
    /// opted in. O(1) whatever the number of users: a user who repeats `opt-in` makes the
    /// daemon rewrite no one's file.
    pub fn publish_choice(&mut self, store: &crate::store::Store, uid: u32) {
        let result = store
            .plain_opt(uid)
            .map_err(|e| e.to_string())
            .and_then(|choice| {
                self.spool
                    .publish_one(uid, choice)
                    .map_err(|e| e.to_string())?;
                Ok(choice)
            });
        match result {
            Ok(choice) => {
                self.seen.remove(&uid);
                if choice == Some(true) {
                    self.make_folder(uid);
                    self.seen.insert(uid);
                }
            }
            Err(e) => tracing::error!(
                "cannot publish uid {uid}'s plain-sbatch choice in {}: {e}",
                self.spool.root.display()
            ),
        }
    }

    /// A user the daemon meets (a request of theirs, a job of theirs the job_submit
    /// script marked): their notes folder is made, once, if the site's default opts them
    /// in. A user opted in by the site's default (`everyone`, `groups`) who has never met
    /// the daemon has no folder yet, so the filter leaves no note for them (it writes only
    /// into the user's own folder); the job_submit mark finds their jobs, and the first
    /// one found makes their folder (docs/plain-sbatch.md).
    pub fn seen(&mut self, store: &crate::store::Store, uid: u32) {
        if !self.seen.insert(uid) {
            return;
        }
        match self.opted_in(store, uid) {
            Ok(true) => self.make_folder(uid),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!("cannot tell whether uid {uid} is opted in to plain sbatch: {e}");
                self.seen.remove(&uid);
            }
        }
    }

    /// Makes `uid`'s notes folder (logged when it cannot be). A per-user daemon makes its
    /// own user's only: it takes no one else's notes.
    fn make_folder(&self, uid: u32) {
        if !may_take(uid, nix::unistd::geteuid().as_raw()) {
            return;
        }
        let Some(who) = crate::slurm::RunAs::lookup(uid) else {
            tracing::warn!("uid {uid} has no account on this host: no plain-sbatch notes folder is made for it");
            return;
        };
        if let Err(e) = self.spool.make_folder(uid, who.gid) {
            tracing::error!(
                "cannot make the plain-sbatch notes folder of uid {uid} in {}: {e}",
                self.spool.notes().display()
            );
        }
    }

    /// Whether `uid`'s plain sbatch submissions are supervised.
    pub fn opted_in(
        &self,
        store: &crate::store::Store,
        uid: u32,
    ) -> Result<bool, crate::store::StoreError> {
        Ok(opted_in(store.plain_opt(uid)?, &self.site, || {
            groups_of_uid(uid)
        }))
    }
}

/// Adopts the jobs of the notes waiting (at most [`MAX_NOTES_PER_CYCLE`] a cycle), each as
/// its note's owner. A note is removed once dealt with, whatever came of it, except when
/// Slurm did not answer: it is looked at again next cycle (so a note left while the daemon
/// was down or Slurm was not answering is taken when both are back). With
/// `[plain_sbatch] admin_comment`, the jobs the job_submit script marked are listed too
/// (one squeue, at most every [`MARKS_AT_MOST_EVERY`]) and adopted the same way, each as
/// its owner.
pub async fn discover<S: crate::slurm::Slurm>(
    desk: &mut Desk<'_, S>,
    plain: &mut Plain,
) -> Result<(), crate::store::StoreError> {
    use tracing::Instrument;
    let notes = match plain.spool.scan() {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(
                "cannot read the plain-sbatch notes in {}: {e}",
                plain.spool.notes().display()
            );
            Vec::new()
        }
    };
    for note in notes {
        let span = tracing::info_span!("plain_sbatch", job = %note.job_id, uid = note.uid);
        if !take(desk, plain, &note.job_id, note.uid, Some(&note))
            .instrument(span)
            .await?
        {
            return Ok(());
        }
    }
    discover_marks(desk, plain).await
}

/// The marked jobs: one listing when it is due, then each new candidate adopted as its
/// owner (at most [`MAX_NOTES_PER_CYCLE`] a cycle; the rest at the next listing).
async fn discover_marks<S: crate::slurm::Slurm>(
    desk: &mut Desk<'_, S>,
    plain: &mut Plain,
) -> Result<(), crate::store::StoreError> {
    use tracing::Instrument;
    let Some(m) = plain.marks.as_mut() else {
        return Ok(());
    };
    if m.last.is_some_and(|t| t.elapsed() < m.every) {
        return Ok(());
    }
    m.last = Some(std::time::Instant::now());
    let listed = match desk.slurm.marked_jobs(MARK).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(
                "cannot list the jobs with the plain-sbatch mark: {e}; listed again later"
            );
            return Ok(());
        }
    };
    {
        let now_listed: std::collections::HashSet<&(String, u32)> = listed.iter().collect();
        m.left_alone.retain(|j| now_listed.contains(j));
    }
    let mut taken = 0;
    for (job_id, uid) in listed {
        if taken >= MAX_NOTES_PER_CYCLE {
            // More wait: the next cycle lists again.
            if let Some(m) = plain.marks.as_mut() {
                m.last = None;
            }
            break;
        }
        let seen = plain
            .marks
            .as_ref()
            .is_some_and(|m| m.left_alone.contains(&(job_id.clone(), uid)));
        if seen
            || !desk.store.resolve(&job_id)?.is_empty()
            || desk
                .store
                .plain_refusals(&job_id)?
                .iter()
                .any(|r| r.owner_uid == uid)
        {
            continue;
        }
        taken += 1;
        let span = tracing::info_span!("plain_sbatch_mark", job = %job_id, uid);
        if !take(desk, plain, &job_id, uid, None)
            .instrument(span)
            .await?
        {
            // Slurm did not answer: asked again at the next listing, not sooner (a
            // controller that does not answer gets no more queries for it).
            break;
        }
    }
    Ok(())
}

/// Deals with one note's job (`note`), or one marked job (`None`); false when Slurm did
/// not answer (the rest wait for the next cycle).
async fn take<S: crate::slurm::Slurm>(
    desk: &mut Desk<'_, S>,
    plain: &mut Plain,
    job_id: &str,
    uid: u32,
    note: Option<&Note>,
) -> Result<bool, crate::store::StoreError> {
    use crate::daemon::requests::adopt::{adopt_job, Owner};
    use crate::protocol::{ErrorKind, Response};
    let done = |plain: &mut Plain, left_alone: bool| {
        match note {
            Some(n) => plain.spool.remove(n),
            None if left_alone => {
                if let Some(m) = plain.marks.as_mut() {
                    m.left_alone.insert((job_id.to_string(), uid));
                }
            }
            None => {}
        }
        Ok(true)
    };
    if !desk.store.resolve(job_id)?.is_empty() {
        return done(plain, false);
    }
    if !may_take(uid, nix::unistd::geteuid().as_raw()) {
        tracing::warn!(
            "a plain-sbatch job of another user than this per-user daemon's; left alone"
        );
        return done(plain, true);
    }
    if !plain.opted_in(desk.store, uid)? {
        tracing::info!("a plain-sbatch job of a user who is not opted in; left alone");
        return done(plain, true);
    }
    let who = match note {
        Some(_) => Owner::Exactly,
        None => Owner::Marked(MARK),
    };
    // A user marked by the job_submit script (opted in): their notes folder is made, so
    // their next sbatch leaves a note too.
    plain.seen(desk.store, uid);
    let key: std::ffi::OsString = match note {
        Some(n) => {
            let mut k = std::ffi::OsString::from(format!("{}/", n.uid));
            k.push(&n.name);
            k
        }
        None => format!("mark:{job_id}").into(),
    };
    let refused = match adopt_job(desk, job_id, uid, who).await {
        Ok(chains) => {
            // What Slurm could not give back is recorded with the chain (`history` shows
            // it), never guessed (docs/plain-sbatch.md).
            tracing::info!(
                chains = ?chains,
                "supervising a job submitted with plain sbatch; what could not be recovered from Slurm is in its history"
            );
            plain.tries.remove(&key);
            return done(plain, false);
        }
        Err(Response::Error(e)) if e.kind == ErrorKind::Unavailable => {
            let n = plain.tries.entry(key.clone()).or_default();
            *n += 1;
            if *n < MAX_TRIES {
                tracing::warn!(
                    "cannot adopt a plain-sbatch job now: {}; tried again later",
                    e.message
                );
                return Ok(false);
            }
            plain.tries.remove(&key);
            format!("{} ({MAX_TRIES} tries)", e.message)
        }
        // Another user's job (or one without the mark): nothing of it is the note's owner's
        // to see, and nothing is recorded. Already supervised: nothing to say.
        Err(Response::Error(e)) if matches!(e.kind, ErrorKind::Forbidden | ErrorKind::Conflict) => {
            tracing::warn!("a plain-sbatch job left alone: {}", e.message);
            return done(plain, true);
        }
        Err(Response::Error(e)) => e.message,
        Err(Response::Ok(_)) => return done(plain, true),
    };
    // Refused: the job runs as submitted, unsupervised (never half-supervised: no chain
    // was made); its owner sees why with `supervisorctl status JOBID`.
    tracing::warn!("a plain-sbatch job is not supervised: {refused}");
    desk.store
        .note_plain_refused(job_id, uid, &refused, crate::plumbing::clock::now())?;
    done(plain, false)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_spool_on_the_state_directorys_filesystem_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        assert!(super::shares_filesystem(&a, &b));
        // /proc is another filesystem than any temporary folder.
        assert!(!super::shares_filesystem(&a, std::path::Path::new("/proc")));
        // A folder not made yet is on its nearest existing parent's filesystem.
        assert!(super::shares_filesystem(
            &a,
            &dir.path().join("missing/deeper")
        ));
        assert!(!super::shares_filesystem(
            std::path::Path::new("/proc/missing"),
            &a
        ));
    }

    use super::*;

    #[test]
    fn a_note_name_is_a_job_id_and_little_else() {
        assert_eq!(job_of_name(b"123.456.789"), Some("123".into()));
        assert_eq!(job_of_name(b"4294967295.1"), Some("4294967295".into()));
        for bad in [
            &b"123"[..],
            b".1",
            b"12a.1",
            b"012.1",
            b"12345678901.1",
            b"-1.2",
            b"1_2.3",
            b"../1.2",
            b"1\n2.3",
        ] {
            assert_eq!(job_of_name(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        let long = [b"1.".to_vec(), vec![b'x'; 65]].concat();
        assert_eq!(job_of_name(&long), None);
    }

    #[test]
    fn a_per_user_daemon_takes_its_own_users_notes_only() {
        assert!(may_take(1000, 0));
        assert!(may_take(0, 0));
        assert!(may_take(1000, 1000));
        assert!(!may_take(1001, 1000));
        assert!(!may_take(0, 1000));
    }

    #[test]
    fn a_users_choice_wins_over_the_site_default() {
        let none = || -> Vec<u32> { panic!("groups not needed") };
        assert!(opted_in(Some(true), &SiteDefault::None, none));
        assert!(!opted_in(Some(false), &SiteDefault::Everyone, none));
        assert!(!opted_in(None, &SiteDefault::None, none));
        assert!(opted_in(None, &SiteDefault::Everyone, none));
        assert!(opted_in(None, &SiteDefault::Groups(vec![7, 9]), || vec![
            1, 9
        ]));
        assert!(!opted_in(None, &SiteDefault::Groups(vec![7]), || vec![
            1, 9
        ]));
    }

    /// A spool in a fresh folder, prepared (locked). The tests make folders of other uids,
    /// so they run as root, as the system-wide daemon does (scripts/test runs them so).
    fn spool() -> (tempfile::TempDir, Spool, std::fs::File) {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the spool's tests make folders of other users: run them as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let s = Spool::at(dir.path().join("spool"));
        let lock = s.prepare().unwrap();
        (dir, s, lock)
    }

    /// An empty file `name` in `uid`'s folder, as the filter leaves it (owned by `uid`).
    fn note(s: &Spool, uid: u32, name: &str) {
        let p = s.folder(uid).join(name);
        std::fs::write(&p, b"").unwrap();
        std::os::unix::fs::lchown(&p, Some(uid), Some(uid)).unwrap();
    }

    #[test]
    fn the_spool_keeps_notes_and_drops_everything_else_without_following_links() {
        let (_dir, mut s, _lock) = spool();
        assert!(matches!(s.prepare(), Err(SpoolError::Locked { .. })));
        for p in [s.root.clone(), s.notes()] {
            let m = std::fs::symlink_metadata(&p).unwrap();
            assert_eq!(m.mode() & 0o7777, 0o755, "{}", p.display());
        }
        s.make_folder(1001, 1001).unwrap();
        let m = std::fs::symlink_metadata(s.folder(1001)).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o7777), (1001, 0o700));
        let f = s.folder(1001);
        note(&s, 1001, "42.1.2");
        // Not notes: a file with content, another name, a folder with something in it, a
        // link to a file and one to a folder, a FIFO, a note of another uid's in it.
        std::fs::write(f.join("43.1.1"), b"content").unwrap();
        std::fs::write(f.join("junk"), b"").unwrap();
        std::fs::create_dir(f.join("44.1")).unwrap();
        std::fs::write(f.join("44.1").join("keep"), b"").unwrap();
        let victim = _dir.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("45.1.1"), b"precious").unwrap();
        std::os::unix::fs::symlink(victim.join("45.1.1"), f.join("45.1.1")).unwrap();
        std::os::unix::fs::symlink(&victim, f.join("46.1.1")).unwrap();
        nix::unistd::mkfifo(
            &f.join("47.1.1"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        std::fs::write(f.join("48.1.1"), b"").unwrap();
        std::os::unix::fs::lchown(f.join("48.1.1"), Some(1002), Some(1002)).unwrap();
        // In `notes/` itself: only the daemon's user can write there; what is not a user's
        // folder is removed, and a folder named by a uid but not owned by it is not one.
        std::fs::write(s.notes().join("49.1.1"), b"").unwrap();
        std::fs::create_dir(s.notes().join("1003")).unwrap();
        let notes = s.scan().unwrap();
        assert_eq!(
            notes,
            vec![Note {
                job_id: "42".into(),
                uid: 1001,
                name: "42.1.2".into()
            }]
        );
        let left = |d: &Path| -> Vec<String> {
            let mut v: Vec<_> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        // The folder with something in it stays (it holds up only its own user).
        assert_eq!(left(&f), ["42.1.2", "44.1"]);
        assert_eq!(left(&s.notes()), ["1001"]);
        // Nothing a link named was touched.
        assert_eq!(std::fs::read(victim.join("45.1.1")).unwrap(), b"precious");
        assert_eq!(left(&victim), ["45.1.1"]);
        s.remove(&notes[0]);
        assert!(left(&f) == ["44.1"]);
        // A folder its user opened to others is closed again.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o777)).unwrap();
        s.make_folder(1001, 1001).unwrap();
        let m = std::fs::symlink_metadata(&f).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o700);
    }

    /// Issue 32's attacking review: a user's `opt-in` no longer puts every user's folder
    /// right (it publishes the asker's file only), so the scan does: a folder its user
    /// opened to others is 0700 again after the next cycle's scan, before anything in it
    /// is taken.
    #[test]
    fn the_scan_closes_a_folder_its_user_opened_to_others() {
        let (_dir, mut s, _lock) = spool();
        s.make_folder(1001, 1001).unwrap();
        let f = s.folder(1001);
        for mode in [0o777, 0o1777, 0o755, 0o711] {
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            s.scan().unwrap();
            let m = std::fs::symlink_metadata(&f).unwrap();
            assert_eq!(m.mode() & 0o7777, 0o700, "{mode:o}");
        }
    }

    #[test]
    fn an_older_versions_notes_folder_is_moved_aside_whole() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spool::at(dir.path().join("spool"));
        std::fs::create_dir_all(s.notes()).unwrap();
        std::fs::set_permissions(s.notes(), std::fs::Permissions::from_mode(0o1733)).unwrap();
        std::fs::create_dir(s.notes().join("4200")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", s.notes().join("50.1.1")).unwrap();
        let _lock = s.prepare().unwrap();
        let m = std::fs::symlink_metadata(s.notes()).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o755);
        assert_eq!(std::fs::read_dir(s.notes()).unwrap().count(), 0);
        let aside: Vec<_> = std::fs::read_dir(&s.root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("notes-before-"))
            .collect();
        assert_eq!(aside.len(), 1);
        let m = std::fs::symlink_metadata(&aside[0]).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o700);
        assert!(std::path::Path::new("/etc/passwd").exists());
    }

    /// One user's flood of notes and junk delays no one else's notes beyond their turn:
    /// each user gets at most their share of a cycle, users are taken in turn, and a user
    /// who leaves more waits for the next cycles.
    #[test]
    fn the_scan_is_fair_between_users() {
        let (_dir, mut s, _lock) = spool();
        // Mallory (1001, first in every order) leaves 500 notes and 500 links; 40 other
        // users leave one note each.
        s.make_folder(1001, 1001).unwrap();
        for i in 0..500 {
            note(&s, 1001, &format!("{}.1.1", 100 + i));
            std::os::unix::fs::symlink(
                "/etc/passwd",
                s.folder(1001).join(format!("{}.2.2", 100 + i)),
            )
            .unwrap();
        }
        let others: Vec<u32> = (2000..2040).collect();
        for &u in &others {
            s.make_folder(u, u).unwrap();
            note(&s, u, &format!("{u}.1.1"));
        }
        let mut waiting: HashSet<u32> = others.iter().copied().collect();
        let mut hers = 0;
        let mut cycles = 0;
        while !waiting.is_empty() {
            cycles += 1;
            assert!(
                cycles <= 2,
                "{} users still wait after {cycles} cycles",
                waiting.len()
            );
            let notes = s.scan().unwrap();
            assert!(notes.len() <= MAX_NOTES_PER_CYCLE);
            let mallorys = notes.iter().filter(|n| n.uid == 1001).count();
            assert!(mallorys <= NOTES_PER_USER_PER_CYCLE, "{mallorys}");
            hers += mallorys;
            for n in &notes {
                waiting.remove(&n.uid);
                s.remove(n);
            }
        }
        // Mallory's notes are taken too, a share a cycle, and her links go.
        for _ in 0..200 {
            let notes = s.scan().unwrap();
            if notes.is_empty() {
                break;
            }
            hers += notes.len();
            for n in &notes {
                s.remove(n);
            }
        }
        assert_eq!(hers, 500);
        assert_eq!(std::fs::read_dir(s.folder(1001)).unwrap().count(), 0);
        assert!(std::path::Path::new("/etc/passwd").exists());
    }

    /// The daemon's own sbatch whose answer was lost, for a user who is opted in: a note
    /// (and, before SLURM_SUPERVISOR=off, the site's filter wrote one) names its job
    /// before reconciliation has found it by its tag. In the daemon's cycle order the job
    /// is one chain, and its out-of-memory ending one retry.
    #[tokio::test]
    async fn a_lost_sbatch_answer_makes_one_chain_and_one_retry() {
        use crate::slurm::fake::{Ending, FakeSlurm};
        let (dir, _, lock) = spool();
        drop(lock);
        let config = Config::parse(
            &format!(
                "state_dir = {:?}\n[retry]\nbackoff_initial = \"0s\"\nbackoff_jitter = 0.0\nin_place = false\n[plain_sbatch]\nenabled = true\nspool = {:?}\n",
                dir.path().display().to_string(),
                dir.path().join("spool").display().to_string(),
            ),
            None,
        )
        .unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        let mut store = crate::store::Store::in_memory().unwrap();
        store.set_plain_opt(uid, true, 1).unwrap();
        let plain = Plain::start(&config, &store).unwrap().unwrap();
        let notes = plain.spool.folder(uid);
        let fake = FakeSlurm::new();
        let mut engine = crate::daemon::engine::Engine::new(config, store, fake.clone());
        let new = crate::store::NewSubmission {
            owner_uid: uid,
            user: "root".into(),
            argv: vec!["--mem=100M".into(), "job.sh".into()],
            cwd: "/tmp".into(),
            env: Vec::new(),
            script_name: Some("job.sh".into()),
            script: Some(b"#!/bin/sh\ntrue\n".to_vec()),
            max_retries: 3,
            restartable: false,
            array_tasks: None,
            continuation: None,
        };
        let submitted =
            crate::domain::sbatch_args::Submitted::read(&new.argv, new.script.as_deref()).unwrap();
        let t = crate::plumbing::clock::now();
        let desk = engine.desk();
        let l = crate::daemon::sbatch::begin_submission(
            desk.store,
            desk.config,
            &new,
            &submitted,
            None,
            t,
        )
        .unwrap();
        let sub = desk.store.submission(l.submission_id).unwrap();
        fake.lose_next_sbatch_reply();
        engine.run_launch(&l, &sub, t).await.unwrap();
        let job = fake.live_jobs()[0].clone();
        assert!(engine.desk().store.resolve(&job).unwrap().is_empty());
        std::fs::write(notes.join(format!("{job}.1.1")), b"").unwrap();
        let mut plain = Some(plain);
        for _ in 0..2 {
            crate::daemon::timed_cycle(&mut engine, &mut plain)
                .await
                .unwrap();
        }
        assert_eq!(engine.desk().store.resolve(&job).unwrap().len(), 1);
        assert_eq!(std::fs::read_dir(&notes).unwrap().count(), 0);
        assert!(fake.end(&job, Ending::OutOfMemory));
        for _ in 0..3 {
            crate::daemon::timed_cycle(&mut engine, &mut plain)
                .await
                .unwrap();
        }
        assert_eq!(fake.sbatch_calls().len(), 2, "{:#?}", fake.sbatch_calls());
    }

    #[test]
    fn publishing_writes_the_choices_and_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spool::at(dir.path().join("spool"));
        let _lock = s.prepare().unwrap();
        s.publish(
            &[(1000, true), (1001, false)],
            &SiteDefault::Groups(vec![5, 6]),
        )
        .unwrap();
        let read = |p: &str| std::fs::read_to_string(s.root.join(p)).unwrap();
        assert_eq!(read("optin/1000"), "in\n");
        assert_eq!(read("optin/1001"), "out\n");
        assert_eq!(read("default"), "groups 5 6\nnotes per-user\n");
        let mode = std::fs::metadata(s.root.join("optin/1000"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        s.publish(&[(1001, true)], &SiteDefault::None).unwrap();
        assert!(!s.root.join("optin/1000").exists());
        assert_eq!(read("optin/1001"), "in\n");
        assert_eq!(read("default"), "none\nnotes per-user\n");
    }
}
