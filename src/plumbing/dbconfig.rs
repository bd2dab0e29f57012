//! The shared database's address and password (`[store] url` and `password_file`), read by
//! the config loader and by `store::cluster`; it imports nothing of the crate.
//!
//! The URL names the user, the server and the database, never the password: the config
//! file is readable by every user of a login node (supervisorctl reads it), so the
//! password lives in a file only the daemon's user (root) can read, and a file that
//! anyone else could read is refused with the command that fixes it.

use serde::Deserialize;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Where the password is read from when the config names no `password_file`.
pub const DEFAULT_PASSWORD_FILE: &str = "/etc/slurm-supervisor/db-password";

/// The MySQL/MariaDB port a URL without one means.
pub const DEFAULT_PORT: u16 = 3306;

/// A password file is a line, not a document: anything longer is a wrong path.
const MAX_PASSWORD_FILE: u64 = 4096;

/// The `[store]` section of cluster mode, as written (the config loader, `config.rs`,
/// reads the durations and checks them together: `config::ClusterConfig`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `mysql://USER@HOST:PORT/DB`.
    pub url: StoreUrl,
    /// A file holding the password, owned by the daemon's user and readable by no one else.
    #[serde(default = "default_password_file")]
    pub password_file: PathBuf,
    /// How long each grant of the lease lasts (`"30s"`).
    pub lease: Option<String>,
    /// How long before its lease ends a daemon stops acting.
    pub margin: Option<String>,
    /// The bound on every call to the database.
    pub timeout: Option<String>,
    /// The name other nodes' users are told to find the active daemon by (this host's
    /// name by default).
    pub node: Option<String>,
    /// A snapshot of the store is made once this many journal entries follow the last
    /// one (0: never by count).
    pub snapshot_entries: Option<u64>,
    /// ... or once the entries after it hold this many MiB (0: never by size).
    pub snapshot_mib: Option<u64>,
    /// ... or once the last one is this old and an entry follows it (`"0s"`: never by age).
    pub snapshot_interval: Option<String>,
}

/// When the active daemon snapshots the store and prunes the journal (docs/cluster.md,
/// "Snapshots"): whichever of the three comes first; a zero turns that one off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPolicy {
    pub entries: u64,
    pub bytes: u64,
    pub interval: std::time::Duration,
}

/// Ten thousand entries: a few minutes of a write storm, a day or more of a busy cluster.
pub const DEFAULT_SNAPSHOT_ENTRIES: u64 = 10_000;
/// 256 MiB of entries (submissions carry their scripts).
pub const DEFAULT_SNAPSHOT_MIB: u64 = 256;
/// A day: a quiet cluster's journal is still cut back daily.
pub const DEFAULT_SNAPSHOT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(86_400);

impl Default for SnapshotPolicy {
    fn default() -> SnapshotPolicy {
        SnapshotPolicy {
            entries: DEFAULT_SNAPSHOT_ENTRIES,
            bytes: DEFAULT_SNAPSHOT_MIB << 20,
            interval: DEFAULT_SNAPSHOT_INTERVAL,
        }
    }
}

impl SnapshotPolicy {
    /// Why a snapshot is due, if one is: `entries` entries of `bytes` follow the newest
    /// snapshot, made `age` ago (`None`: there is none).
    pub fn due(
        &self,
        entries: u64,
        bytes: u64,
        age: Option<std::time::Duration>,
    ) -> Option<&'static str> {
        if entries == 0 {
            return None;
        }
        if self.entries > 0 && entries >= self.entries {
            return Some("entries");
        }
        if self.bytes > 0 && bytes >= self.bytes {
            return Some("size");
        }
        if !self.interval.is_zero() && age.is_none_or(|a| a >= self.interval) {
            return Some("interval");
        }
        None
    }
}

fn default_password_file() -> PathBuf {
    PathBuf::from(DEFAULT_PASSWORD_FILE)
}

/// `mysql://USER@HOST[:PORT]/DB`, parsed strictly: no password, no options.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct StoreUrl {
    pub user: String,
    /// A host name, an IPv4 address, or an IPv6 address (written in brackets in the URL).
    pub host: String,
    pub port: u16,
    pub database: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("store url {url:?}: {why}; write it as mysql://USER@HOST:PORT/DB")]
pub struct UrlError {
    pub url: String,
    pub why: &'static str,
}

impl TryFrom<String> for StoreUrl {
    type Error = UrlError;
    fn try_from(s: String) -> Result<StoreUrl, UrlError> {
        s.parse()
    }
}

impl FromStr for StoreUrl {
    type Err = UrlError;

    fn from_str(url: &str) -> Result<StoreUrl, UrlError> {
        let bad = |why| UrlError {
            url: url.to_string(),
            why,
        };
        let rest = url
            .strip_prefix("mysql://")
            .or_else(|| url.strip_prefix("mariadb://"))
            .ok_or_else(|| bad("it does not start with mysql://"))?;
        if rest.contains(['?', '#']) {
            return Err(bad("it has options, which are not read"));
        }
        let (authority, database) = rest
            .split_once('/')
            .ok_or_else(|| bad("it names no database"))?;
        let (user, hostport) = authority
            .rsplit_once('@')
            .ok_or_else(|| bad("it names no user"))?;
        if user.contains(':') {
            return Err(bad(
                "it holds a password: put the password in the file that password_file names",
            ));
        }
        if !is_name(user, 80) {
            return Err(bad(
                "the user must be letters, digits, '_', '-' or '.' (at most 80)",
            ));
        }
        // MariaDB's database names are identifiers; ours stays a plain one, so it never
        // needs quoting in a grant an admin copies from docs/cluster.md.
        if !is_name(database, 64) || database.contains(['-', '.']) {
            return Err(bad(
                "the database must be letters, digits or '_' (at most 64)",
            ));
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("an IPv6 address lacks its ']'"))?;
            if host.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad("the address in brackets is not IPv6"));
            }
            match after {
                "" => (host, None),
                p => (
                    host,
                    Some(
                        p.strip_prefix(':')
                            .ok_or_else(|| bad("something follows the IPv6 address"))?,
                    ),
                ),
            }
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty()
            || !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'))
        {
            return Err(bad("the host is empty or not a host name"));
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad("the port is not a number from 1 to 65535"))?,
        };
        Ok(StoreUrl {
            user: user.to_string(),
            host: host.to_string(),
            port,
            database: database.to_string(),
        })
    }
}

fn is_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        write!(
            f,
            "mysql://{}@{host}:{}/{}",
            self.user, self.port, self.database
        )
    }
}

/// The database password. Its `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(..)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PasswordFileError {
    #[error("cannot read the database password file {path}: {source}")]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the database password file {path} can be read by others (mode {mode:04o}); \
         run `chmod 600 {path}` and start again"
    )]
    ReadableByOthers { path: PathBuf, mode: u32 },
    #[error(
        "the database password file {path} belongs to uid {owner}, not to this daemon's \
         user (uid {me}); run `chown {me} {path}` and start again"
    )]
    NotOwned { path: PathBuf, owner: u32, me: u32 },
    #[error("the database password file {path} is not a regular file")]
    NotAFile { path: PathBuf },
    #[error(
        "the database password file {path} holds no password (or more than one line); \
         write the password alone on its first line"
    )]
    Malformed { path: PathBuf },
}

/// Reads the password from `path`: a regular file owned by this process's user, with no
/// permission for group or others, holding the password on one line (a final newline is
/// not part of it). The checks are made on the opened descriptor, so the file read is
/// the file checked.
pub fn read_password_file(path: &Path) -> Result<Password, PasswordFileError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let unreadable = |source| PasswordFileError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    // Never wait on a FIFO nor take a terminal: the path is checked once it is open.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK)
        .open(path)
        .map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(PasswordFileError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(PasswordFileError::NotOwned {
            path: path.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(PasswordFileError::ReadableByOthers {
            path: path.to_path_buf(),
            mode,
        });
    }
    let mut text = String::new();
    file.take(MAX_PASSWORD_FILE + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    let line = text
        .strip_suffix('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .unwrap_or(&text);
    if line.is_empty() || line.contains('\n') || text.len() as u64 > MAX_PASSWORD_FILE {
        return Err(PasswordFileError::Malformed {
            path: path.to_path_buf(),
        });
    }
    Ok(Password(line.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn url(s: &str) -> Result<StoreUrl, &'static str> {
        s.parse::<StoreUrl>().map_err(|e| e.why)
    }

    #[test]
    fn a_url_names_user_host_port_and_database() {
        assert_eq!(
            url("mysql://ssv@db1.cluster:3307/supervisor"),
            Ok(StoreUrl {
                user: "ssv".into(),
                host: "db1.cluster".into(),
                port: 3307,
                database: "supervisor".into()
            })
        );
        let u = url("mysql://ssv@[fd00::5]/supervisor").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("fd00::5", DEFAULT_PORT));
        assert_eq!(u.to_string(), "mysql://ssv@[fd00::5]:3306/supervisor");
        assert_eq!(
            url("mariadb://ssv@127.0.0.1/s").unwrap().to_string(),
            "mysql://ssv@127.0.0.1:3306/s"
        );
    }

    #[test]
    fn a_url_with_a_password_or_options_or_parts_missing_is_refused() {
        for (bad, why) in [
            ("mysql://ssv:secret@db/s", "it holds a password"),
            ("postgres://ssv@db/s", "it does not start with mysql://"),
            ("mysql://db/s", "it names no user"),
            ("mysql://ssv@db", "it names no database"),
            ("mysql://ssv@db/s?ssl=1", "it has options"),
            ("mysql://ssv@db:0/s", "the port is not a number"),
            ("mysql://ssv@db:99999/s", "the port is not a number"),
            ("mysql://ssv@/s", "the host is empty"),
            ("mysql://ssv@db/my-db", "the database must be"),
            ("mysql://ss v@db/s", "the user must be"),
            ("mysql://ssv@[db]/s", "the address in brackets is not IPv6"),
        ] {
            let got = url(bad).unwrap_err();
            assert!(got.starts_with(why), "{bad}: {got}");
        }
    }

    #[test]
    fn the_store_section_rejects_a_typo_and_defaults_the_password_file() {
        let c: StoreConfig = toml::from_str("url = \"mysql://ssv@db/s\"\n").unwrap();
        assert_eq!(c.password_file, Path::new(DEFAULT_PASSWORD_FILE));
        let e = toml::from_str::<StoreConfig>(
            "url = \"mysql://ssv@db/s\"\npasword_file = \"/etc/x\"\n",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("unknown field `pasword_file`"),
            "{e}"
        );
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = toml::from_str::<StoreConfig>("url = \"mysql://ssv:pw@db/s\"\n").unwrap_err();
        assert!(e.to_string().contains("it holds a password"), "{e}");
    }

    fn password_file(text: &str, mode: u32) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db-password");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    #[test]
    fn a_private_password_file_is_read_without_its_newline() {
        let (_d, path) = password_file("s3cret pass\n", 0o600);
        let p = read_password_file(&path).unwrap();
        assert_eq!(p.expose(), "s3cret pass");
        assert_eq!(format!("{p:?}"), "Password(..)");
        let (_d, path) = password_file("crlf\r\n", 0o400);
        assert_eq!(read_password_file(&path).unwrap().expose(), "crlf");
    }

    #[test]
    fn a_password_file_others_can_read_is_refused_with_the_chmod_to_run() {
        for mode in [0o644, 0o640, 0o604, 0o620] {
            let (_d, path) = password_file("pw\n", mode);
            let e = read_password_file(&path).unwrap_err();
            assert!(
                matches!(e, PasswordFileError::ReadableByOthers { mode: m, .. } if m == mode),
                "{e}"
            );
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("run `chmod 600 {}`", path.display())),
                "{msg}"
            );
        }
    }

    #[test]
    fn an_empty_or_multiline_or_missing_password_file_is_refused() {
        for text in ["", "\n", "a\nb\n"] {
            let (_d, path) = password_file(text, 0o600);
            assert!(matches!(
                read_password_file(&path),
                Err(PasswordFileError::Malformed { .. })
            ));
        }
        let e = read_password_file(Path::new("/nonexistent/db-password")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot read the database password file /nonexistent/db-password"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            read_password_file(dir.path()),
            Err(PasswordFileError::NotAFile { .. })
        ));
    }
}
