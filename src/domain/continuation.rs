//! Continuation: a job that checkpoints and meets its time limit is not failing, it is
//! *continued* (docs/continuation.md).
//!
//! A submission says it continues from its own checkpoints with `supervisorctl submit
//! --continue` or with `#SSV` lines in its script (which plain `sbatch` keeps, and which
//! sbatch itself never reads, so sbatch's own options stay exactly sbatch's):
//!
//! ```text
//! #!/bin/bash
//! #SBATCH --time=04:00:00
//! #SSV --continue --progress=checkpoints/ --requeue-exit=85
//! ```
//!
//! What this module holds is pure: the [`Continuation`] a submission carries, read from its
//! script and its command line ([`Continuation::from_script`], [`Continuation::merged`]),
//! and what a progress path looked like ([`Progress`]) and whether it moved
//! ([`Progress::moved_since`]). The daemon reads the path (`daemon::evidence`); policy
//! decides (`policy::transition`).

use serde::{Deserialize, Serialize};

/// The most exit codes one submission may name as "requeue me".
pub const MAX_REQUEUE_EXITS: usize = 8;
/// The longest progress path kept.
pub const MAX_PROGRESS_PATH: usize = 1024;

/// What a continuing submission asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Continuation {
    /// A file or folder, relative to the job's working directory (or absolute), whose
    /// change during an attempt is the evidence of progress. `None`: the attempt's own
    /// length is the only evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Exit codes with which the job says "continue me" (as Slurm's `RequeueExit`, but
    /// the job's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requeue_exit: Vec<u8>,
}

/// Why a continuation request cannot be taken (the user is told, nothing is recorded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContinuationError {
    #[error("#SSV line {line}: unknown option {option:?}; the #SSV options are --continue, --progress=PATH and --requeue-exit=CODE")]
    UnknownOption { line: usize, option: String },
    #[error("#SSV line {line}: {option} needs a value")]
    MissingValue { line: usize, option: String },
    #[error("{0}")]
    Bad(String),
}

impl Continuation {
    /// The continuation a script's `#SSV` lines ask for, if any. Like `#SBATCH` lines,
    /// they are read from the top of the script up to its first command (blank lines and
    /// comments are skipped); each holds options as `supervisorctl submit` spells them:
    /// `--continue`, `--progress=PATH` (or `--progress PATH`), `--requeue-exit=CODE`.
    /// `--progress` or `--requeue-exit` alone imply `--continue`.
    pub fn from_script(script: &[u8]) -> Result<Option<Continuation>, ContinuationError> {
        let text = String::from_utf8_lossy(script);
        let mut asked = false;
        let mut c = Continuation::default();
        for (n, line) in text.split('\n').enumerate() {
            let line_no = n + 1;
            let Some(rest) = line.strip_prefix("#SSV") else {
                match line.trim_start().chars().next() {
                    None | Some('#') => continue,
                    Some(_) => break,
                }
            };
            if !rest.is_empty() && !rest.starts_with(|ch: char| ch.is_ascii_whitespace()) {
                // `#SSVfoo` is a comment, as `#SBATCHfoo` is not a directive either.
                continue;
            }
            let mut words = rest.split_ascii_whitespace();
            while let Some(w) = words.next() {
                if w.starts_with('#') {
                    break;
                }
                let (name, inline) = match w.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (w, None),
                };
                let mut value = |opt: &str| -> Result<String, ContinuationError> {
                    let missing = || ContinuationError::MissingValue {
                        line: line_no,
                        option: opt.to_string(),
                    };
                    match inline.clone() {
                        Some(v) => Ok(v),
                        // `--progress --continue` names no path: the next option is not one.
                        None => match words.next() {
                            Some(w) if !w.starts_with("--") => Ok(w.to_string()),
                            _ => Err(missing()),
                        },
                    }
                };
                match name {
                    "--continue" if inline.is_none() => asked = true,
                    "--progress" => {
                        c.progress = Some(value("--progress")?);
                        asked = true;
                    }
                    "--requeue-exit" => {
                        c.requeue_exit
                            .extend(parse_exit_codes(&value("--requeue-exit")?)?);
                        asked = true;
                    }
                    _ => {
                        return Err(ContinuationError::UnknownOption {
                            line: line_no,
                            option: w.chars().take(64).collect(),
                        })
                    }
                }
            }
        }
        if !asked {
            return Ok(None);
        }
        c.requeue_exit.sort_unstable();
        c.requeue_exit.dedup();
        c.check()?;
        Ok(Some(c))
    }

    /// The command line's continuation (`submit --continue ...`) over the script's: the
    /// command line's progress path wins, exit codes add up.
    pub fn merged(
        script: Option<Continuation>,
        line: Option<Continuation>,
    ) -> Result<Option<Continuation>, ContinuationError> {
        let merged = match (script, line) {
            (None, None) => return Ok(None),
            (Some(c), None) | (None, Some(c)) => c,
            (Some(s), Some(l)) => {
                let mut requeue_exit = s.requeue_exit;
                requeue_exit.extend(l.requeue_exit);
                Continuation {
                    progress: l.progress.or(s.progress),
                    requeue_exit,
                }
            }
        };
        let mut merged = merged;
        merged.requeue_exit.sort_unstable();
        merged.requeue_exit.dedup();
        merged.check()?;
        Ok(Some(merged))
    }

    /// Bounds what is kept: a path of at most [`MAX_PROGRESS_PATH`] bytes with no NUL
    /// and no `..` component (the path is the job's own folder's), at most
    /// [`MAX_REQUEUE_EXITS`] exit codes, none of them 0 (a success is a success).
    pub fn check(&self) -> Result<(), ContinuationError> {
        if let Some(p) = &self.progress {
            if p.is_empty() {
                return Err(ContinuationError::Bad(
                    "--progress: the path is empty".into(),
                ));
            }
            if p.len() > MAX_PROGRESS_PATH || p.contains('\0') {
                return Err(ContinuationError::Bad(format!(
                    "--progress: the path is longer than {MAX_PROGRESS_PATH} bytes or holds a NUL"
                )));
            }
            if p.split('/').any(|part| part == "..") {
                return Err(ContinuationError::Bad(
                    "--progress: the path may not go up with `..`; name it from the job's working directory or in full".into(),
                ));
            }
        }
        if self.requeue_exit.len() > MAX_REQUEUE_EXITS {
            return Err(ContinuationError::Bad(format!(
                "--requeue-exit: at most {MAX_REQUEUE_EXITS} exit codes"
            )));
        }
        if self.requeue_exit.contains(&0) {
            return Err(ContinuationError::Bad(
                "--requeue-exit: 0 is success; name the code your job exits with to be continued (e.g. 85)".into(),
            ));
        }
        Ok(())
    }
}

/// Exit codes as `--requeue-exit` takes them: `85` or `85,86`.
pub fn parse_exit_codes(s: &str) -> Result<Vec<u8>, ContinuationError> {
    s.split(',')
        .map(|c| {
            c.trim().parse::<u8>().map_err(|_| {
                ContinuationError::Bad(format!(
                    "--requeue-exit: {:?} is not an exit code (1-255)",
                    c.chars().take(32).collect::<String>()
                ))
            })
        })
        .collect()
}

/// What a progress path looked like at one moment, as the daemon read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Progress {
    /// Nothing there (yet).
    Missing,
    /// A regular file: its size, its modification time (nanoseconds since the epoch) and,
    /// when it is small enough to read, the SHA-256 of its content.
    File {
        size: u64,
        mtime_ns: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sha256: Option<String>,
    },
    /// A folder: its entries (not recursively), their total size and the newest
    /// modification time among them and the folder itself.
    Folder {
        entries: u64,
        size: u64,
        newest_mtime_ns: i64,
    },
    /// It could not be read, and why (not the user's, a link, a device, too slow...).
    Unreadable { why: String },
}

impl Progress {
    /// Whether the path shows progress since `before` (what it looked like when the
    /// previous attempt ended, or `None` for a first attempt: then anything newer than
    /// the attempt's start counts, `started_ns`).
    pub fn moved_since(&self, before: Option<&Progress>, started_ns: Option<i64>) -> bool {
        match (self, before) {
            (Progress::Missing | Progress::Unreadable { .. }, _) => false,
            (now, Some(b)) if !matches!(b, Progress::Unreadable { .. }) => now != b,
            (now, _) => match (now.newest_ns(), started_ns) {
                (Some(t), Some(s)) => t >= s,
                // No start to compare with: there is something, so something was done.
                (Some(_), None) => true,
                (None, _) => false,
            },
        }
    }

    /// A few words for a person: what the path looked like.
    pub fn describe(&self) -> String {
        // Unix seconds and milliseconds: what `stat -c %.3Y` prints.
        let at = |ns: i64| {
            format!(
                "{}.{:03}",
                ns.div_euclid(1_000_000_000),
                ns.rem_euclid(1_000_000_000) / 1_000_000
            )
        };
        match self {
            Progress::Missing => "missing".into(),
            Progress::File {
                size,
                mtime_ns,
                sha256,
            } => {
                let hash = sha256
                    .as_deref()
                    .map(|h| format!(", sha256 {}", &h[..h.len().min(12)]))
                    .unwrap_or_default();
                format!("{size} bytes, modified {}{hash}", at(*mtime_ns))
            }
            Progress::Folder {
                entries,
                size,
                newest_mtime_ns,
            } => format!(
                "{entries} entries, {size} bytes, newest {}",
                at(*newest_mtime_ns)
            ),
            Progress::Unreadable { why } => format!("unreadable: {why}"),
        }
    }

    fn newest_ns(&self) -> Option<i64> {
        match self {
            Progress::File { mtime_ns, .. } => Some(*mtime_ns),
            Progress::Folder {
                newest_mtime_ns, ..
            } => Some(*newest_mtime_ns),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(s: &str) -> Result<Option<Continuation>, ContinuationError> {
        Continuation::from_script(s.as_bytes())
    }

    #[test]
    fn ssv_lines_are_read_up_to_the_first_command() {
        let c = script(
            "#!/bin/bash\n#SBATCH --time=1\n\n#SSV --continue --progress=ckpt/state.txt\n#SSV --requeue-exit 85,86 # why\necho hi\n#SSV --progress=later\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.progress.as_deref(), Some("ckpt/state.txt"));
        assert_eq!(c.requeue_exit, vec![85, 86]);
        assert_eq!(script("#!/bin/sh\necho\n#SSV --continue\n").unwrap(), None);
        assert_eq!(
            script("#!/bin/sh\n#SSVx --continue\n#ssv --continue\n").unwrap(),
            None
        );
        assert_eq!(
            script("#SSV --progress=p\n")
                .unwrap()
                .unwrap()
                .progress
                .as_deref(),
            Some("p")
        );
    }

    #[test]
    fn bad_ssv_lines_say_what_is_wrong() {
        let e = script("#!/bin/sh\n#SSV --contineu\n").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        assert!(e.to_string().contains("--contineu"), "{e}");
        assert!(script("#SSV --progress\n").is_err());
        assert!(script("#SSV --requeue-exit=0\n").is_err());
        assert!(script("#SSV --requeue-exit=300\n").is_err());
        assert!(script("#SSV --progress=../../etc/shadow\n").is_err());
        assert!(script("#SSV --continue=yes\n").is_err());
        // An option where the path should be is no path.
        assert!(script("#SSV --progress --continue\n").is_err());
        // Repeated codes are one.
        let many = format!("#SSV {}\n", "--requeue-exit=85 ".repeat(9));
        assert_eq!(script(&many).unwrap().unwrap().requeue_exit, vec![85]);
    }

    #[test]
    fn the_command_line_wins_over_the_script() {
        let s = Continuation {
            progress: Some("a".into()),
            requeue_exit: vec![85],
        };
        let l = Continuation {
            progress: Some("b".into()),
            requeue_exit: vec![85, 86],
        };
        let m = Continuation::merged(Some(s), Some(l)).unwrap().unwrap();
        assert_eq!(m.progress.as_deref(), Some("b"));
        assert_eq!(m.requeue_exit, vec![85, 86]);
        assert_eq!(Continuation::merged(None, None).unwrap(), None);
    }

    #[test]
    fn progress_is_a_change_or_something_new() {
        let f = |size, t| Progress::File {
            size,
            mtime_ns: t,
            sha256: None,
        };
        assert!(f(2, 20).moved_since(Some(&f(1, 10)), None));
        assert!(!f(1, 10).moved_since(Some(&f(1, 10)), None));
        assert!(!Progress::Missing.moved_since(Some(&f(1, 10)), None));
        // A first attempt: written after it started.
        assert!(f(1, 20).moved_since(None, Some(15)));
        assert!(!f(1, 10).moved_since(None, Some(15)));
        assert!(f(1, 20).moved_since(Some(&Progress::Missing), Some(25)));
        assert!(!Progress::Missing.moved_since(None, Some(1)));
    }
}
