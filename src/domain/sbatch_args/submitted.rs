//! A submission as sbatch sees it: the command line, and the script's `#SBATCH` lines
//! under it; and the one thing of a submission the supervisor refuses to carry.

use super::directives::script_directives;
use super::getopt::{parse, parse_directives};
use super::{ArgsError, SbatchCommand, SbatchOpt};

/// A submission as sbatch sees it: the command line and the script's `#SBATCH` lines.
#[derive(Debug, Clone)]
pub struct Submitted {
    pub cmd: SbatchCommand,
    pub directives: SbatchCommand,
}

impl Submitted {
    /// Reads argv strictly; the script's directives leniently (sbatch itself is the judge
    /// of a malformed directive, and reports it to the user).
    pub fn read(argv: &[String], script: Option<&[u8]>) -> Result<Submitted, ArgsError> {
        let cmd = parse(argv)?;
        let directives = script
            .and_then(|s| parse_directives(&script_directives(&String::from_utf8_lossy(s))).ok())
            .unwrap_or_default();
        Ok(Submitted { cmd, directives })
    }

    /// The value of `name` in force (command line over script).
    pub fn option(&self, name: &str) -> Option<&str> {
        effective_option(&self.cmd, &self.directives, name)
    }

    /// True when the option is given at all, on the command line or in the script.
    pub fn has(&self, name: &str) -> bool {
        self.cmd.has(name) || self.directives.has(name)
    }
}

/// A job comment the supervisor refuses to carry: it holds a control character (a newline,
/// a carriage return, a tab, an escape, DEL). The comment is the job owner's text, shown
/// by squeue and sacct to every user and tool on the cluster, where a line break can make
/// it read as rows of its own; the supervisor puts its tag there and reads it back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the job's --comment holds a control character ({found}); write it on one line of printable text")]
pub struct BadComment {
    /// The first such character, escaped (`\n`, `\u{1b}`).
    pub found: String,
}

/// Refuses a comment with a control character (see [`BadComment`]).
pub fn check_comment(comment: &str) -> Result<(), BadComment> {
    match comment.chars().find(|c| c.is_control()) {
        Some(c) => Err(BadComment {
            found: c.escape_default().to_string(),
        }),
        None => Ok(()),
    }
}

/// The value of `name` in force: the command line's last occurrence, else the script's.
///
/// This is per option name. It does not know that `--mem` and `--mem-per-cpu` exclude each
/// other, nor about `SBATCH_*` environment variables or site defaults.
pub fn effective_option<'a>(
    cmd: &'a SbatchCommand,
    directives: &'a SbatchCommand,
    name: &str,
) -> Option<&'a str> {
    match cmd.last(name) {
        Some(o) => o.value.as_deref(),
        None => directives.get(name),
    }
}

/// The `#SBATCH` memory directive that makes a command-line `--mem` fatal in sbatch 22.05
/// (`--mem-per-cpu` or `--mem-per-gpu` in the script), if the script has one. A memory
/// override that adds `--mem` will be refused by sbatch while this is `Some`; the caller
/// must then change the script snapshot or override in the script's own unit.
pub fn script_mem_conflict(directives: &SbatchCommand) -> Option<&SbatchOpt> {
    directives
        .options
        .iter()
        .rev()
        .find(|o| o.name == "mem-per-cpu" || o.name == "mem-per-gpu")
}
