//! Plain `sbatch`, supervised (docs/plain-sbatch.md). The site's cli_filter
//! (`contrib/cli_filter.lua`, installed as /usr/share/slurm-supervisor/cli_filter.lua) runs
//! inside each user's sbatch; for a user who is opted in it leaves a *note* once Slurm has
//! given the job its id: an empty file named `<job id>.<anything>` in the spool's `notes/`
//! folder (root's, 1733: anyone may create, no one may list or remove another's file).
//! sbatch never waits on the daemon: writing the note is all the filter does.
//!
//! The daemon looks at the folder once a cycle (no Slurm command unless a note is there),
//! and for each note adopts its job through the engine `adopt` uses, as the note's owner:
//! the uid is the file's owner (the kernel's word, never text), the job id its name (digits
//! only; nothing in the file is read), and the job is adopted only if Slurm shows it owned
//! by that same uid, and the uid is opted in. A note about another user's job, a forged
//! note, a symlink or anything else is removed and logged, nothing more.
//!
//! The filter learns who is opted in from files the daemon publishes here: `optin/<uid>`
//! (`in` or `out`, a user's own choice, kept in the store) and `default` (`everyone`,
//! `none`, or `groups GID...`: the config's site default). The daemon decides again itself
//! from the store and config; the files only spare the filter a question to the daemon.

use crate::config::{Config, PlainSbatchConfig};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The most notes looked at in one cycle: each costs three Slurm calls (its owner, its
/// record, its script). More wait for the next cycles.
pub const MAX_NOTES_PER_CYCLE: usize = 32;

/// The most directory entries read in one cycle (junk is removed as it is read, so a user
/// who fills the folder slows only the draining of it).
const MAX_ENTRIES_PER_CYCLE: usize = 4096;

/// A note the filter left: the job it names and who wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub job_id: String,
    pub uid: u32,
    pub name: std::ffi::OsString,
}

/// The spool's paths.
#[derive(Debug, Clone)]
pub struct Spool {
    pub root: PathBuf,
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

impl Spool {
    pub fn of(config: &Config) -> Spool {
        Spool {
            root: config.plain_spool(),
        }
    }

    pub fn notes(&self) -> PathBuf {
        self.root.join("notes")
    }

    fn optin(&self) -> PathBuf {
        self.root.join("optin")
    }

    /// Creates the folders (the spool 0755, `notes/` 1733, `optin/` 0755) or checks the
    /// ones there: each a real folder of the daemon's user. Returns the lock that makes the
    /// spool this daemon's (held while it runs).
    pub fn prepare(&self) -> Result<std::fs::File, SpoolError> {
        let me = nix::unistd::geteuid().as_raw();
        for (dir, mode) in [
            (self.root.clone(), 0o755),
            (self.notes(), 0o1733),
            (self.optin(), 0o755),
        ] {
            let io = |source| SpoolError::Io {
                path: dir.clone(),
                source,
            };
            match std::fs::symlink_metadata(&dir) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::create_dir(&dir).map_err(io)?
                }
                Err(e) => return Err(io(e)),
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
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).map_err(io)?;
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

    /// Publishes who is opted in for the filter: `optin/<uid>` for each user's own choice
    /// (others' files removed) and `default` for the site's. Each file is written whole
    /// and renamed into place, so the filter never reads half of one.
    pub fn publish(&self, choices: &[(u32, bool)], site: &SiteDefault) -> std::io::Result<()> {
        let write = |path: &Path, text: &str| -> std::io::Result<()> {
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
        };
        write(&self.root.join("default"), &site.published())?;
        let keep: std::collections::HashSet<String> =
            choices.iter().map(|(u, _)| u.to_string()).collect();
        for e in std::fs::read_dir(self.optin())? {
            let e = e?;
            if !keep.contains(e.file_name().to_string_lossy().as_ref()) {
                std::fs::remove_file(e.path())?;
            }
        }
        for (uid, opted_in) in choices {
            let text = if *opted_in { "in\n" } else { "out\n" };
            write(&self.optin().join(uid.to_string()), text)?;
        }
        Ok(())
    }

    /// Reads the notes waiting (at most [`MAX_NOTES_PER_CYCLE`]), removing on the way
    /// every entry that is not one: anything but a regular file, a name that does not
    /// start with a job id. Nothing is opened: a note's owner and name are all it says.
    pub fn scan(&self) -> std::io::Result<Vec<Note>> {
        use std::os::unix::ffi::OsStrExt;
        let dir = self.notes();
        let mut notes = Vec::new();
        for e in std::fs::read_dir(&dir)?.take(MAX_ENTRIES_PER_CYCLE) {
            let Ok(e) = e else { continue };
            let name = e.file_name();
            let path = dir.join(&name);
            // lstat: a link is looked at, never followed.
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let job = job_of_name(name.as_bytes());
            match job {
                Some(job_id) if m.file_type().is_file() => {
                    notes.push(Note {
                        job_id,
                        uid: m.uid(),
                        name,
                    });
                    if notes.len() >= MAX_NOTES_PER_CYCLE {
                        break;
                    }
                }
                _ => {
                    tracing::debug!(
                        "plain sbatch: removing {:?} from the notes folder (not a note; uid {})",
                        name,
                        m.uid()
                    );
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        Ok(notes)
    }

    /// Removes a note that was dealt with.
    pub fn remove(&self, note: &Note) {
        let _ = std::fs::remove_file(self.notes().join(&note.name));
    }
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
            _lock: lock,
        };
        p.reload(config, store);
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

    /// Publishes the opt-in files from the store (after a user's choice). A failure is
    /// logged: the filter then goes by the files as they were, and the daemon still
    /// decides from the store.
    pub fn publish(&self, store: &crate::store::Store) {
        let result = store.plain_opts().map_err(|e| e.to_string()).and_then(|c| {
            self.spool
                .publish(&c, &self.site)
                .map_err(|e| e.to_string())
        });
        if let Err(e) = result {
            tracing::error!(
                "cannot publish who is opted in to plain sbatch in {}: {e}",
                self.spool.root.display()
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
    engine: &mut crate::daemon::engine::Engine<S>,
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
        if !take(engine, plain, &note.job_id, note.uid, Some(&note))
            .instrument(span)
            .await?
        {
            return Ok(());
        }
    }
    discover_marks(engine, plain).await
}

/// The marked jobs: one listing when it is due, then each new candidate adopted as its
/// owner (at most [`MAX_NOTES_PER_CYCLE`] a cycle; the rest at the next listing).
async fn discover_marks<S: crate::slurm::Slurm>(
    engine: &mut crate::daemon::engine::Engine<S>,
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
    let listed = match engine.slurm().marked_jobs(MARK).await {
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
            || !engine.store().resolve(&job_id)?.is_empty()
            || engine
                .store()
                .plain_refusals(&job_id)?
                .iter()
                .any(|r| r.owner_uid == uid)
        {
            continue;
        }
        taken += 1;
        let span = tracing::info_span!("plain_sbatch_mark", job = %job_id, uid);
        if !take(engine, plain, &job_id, uid, None)
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
    engine: &mut crate::daemon::engine::Engine<S>,
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
    if !engine.store().resolve(job_id)?.is_empty() {
        return done(plain, false);
    }
    if !may_take(uid, nix::unistd::geteuid().as_raw()) {
        tracing::warn!(
            "a plain-sbatch job of another user than this per-user daemon's; left alone"
        );
        return done(plain, true);
    }
    if !plain.opted_in(engine.store(), uid)? {
        tracing::info!("a plain-sbatch job of a user who is not opted in; left alone");
        return done(plain, true);
    }
    let who = match note {
        Some(_) => Owner::Exactly,
        None => Owner::Marked(MARK),
    };
    let key: std::ffi::OsString = match note {
        Some(n) => n.name.clone(),
        None => format!("mark:{job_id}").into(),
    };
    let refused = match adopt_job(engine, job_id, uid, who).await {
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
    engine
        .store_mut()
        .note_plain_refused(job_id, uid, &refused, crate::clock::now())?;
    done(plain, false)
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn the_spool_keeps_notes_and_drops_everything_else() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spool {
            root: dir.path().join("spool"),
        };
        let _lock = s.prepare().unwrap();
        assert!(matches!(s.prepare(), Err(SpoolError::Locked { .. })));
        let mode = std::fs::metadata(s.notes()).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o1733);
        std::fs::write(s.notes().join("42.1.2"), b"ignored content").unwrap();
        std::fs::write(s.notes().join("junk"), b"").unwrap();
        std::fs::create_dir(s.notes().join("43.1")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", s.notes().join("44.1")).unwrap();
        let notes = s.scan().unwrap();
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].job_id, "42");
        assert_eq!(notes[0].uid, nix::unistd::geteuid().as_raw());
        let left: Vec<_> = std::fs::read_dir(s.notes())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        // The folder is not removed (remove_file refuses it); it is no note either.
        assert!(left.contains(&"42.1.2".to_string()));
        assert!(!left.contains(&"junk".to_string()));
        assert!(!left.contains(&"44.1".to_string()));
        assert!(std::path::Path::new("/etc/passwd").exists());
        s.remove(&notes[0]);
        assert!(!s.notes().join("42.1.2").exists());
    }

    #[test]
    fn publishing_writes_the_choices_and_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spool {
            root: dir.path().join("spool"),
        };
        let _lock = s.prepare().unwrap();
        s.publish(
            &[(1000, true), (1001, false)],
            &SiteDefault::Groups(vec![5, 6]),
        )
        .unwrap();
        let read = |p: &str| std::fs::read_to_string(s.root.join(p)).unwrap();
        assert_eq!(read("optin/1000"), "in\n");
        assert_eq!(read("optin/1001"), "out\n");
        assert_eq!(read("default"), "groups 5 6\n");
        let mode = std::fs::metadata(s.root.join("optin/1000"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        s.publish(&[(1001, true)], &SiteDefault::None).unwrap();
        assert!(!s.root.join("optin/1000").exists());
        assert_eq!(read("optin/1001"), "in\n");
        assert_eq!(read("default"), "none\n");
    }
}
