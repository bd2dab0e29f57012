//! Understanding and rewriting an sbatch command line, without running anything.
//!
//! A user submits with `supervisorctl submit -- <sbatch options> SCRIPT [ARGS]`. To resubmit
//! an attempt the supervisor must know which tokens are options and which is the script,
//! and rebuild the argv with a few overrides (more memory, more time, nodes to avoid, the
//! supervisor's tag) while every other option stays exactly as the user typed it.
//!
//! One concern per file, the public names re-exported here:
//! - `options.rs`: sbatch's option table, which options exist and how each takes a value,
//!   probed against the real binary;
//! - `getopt.rs`: a command line read as sbatch's getopt_long reads it ([`parse`]), and a
//!   script's directive tokens read the same way ([`parse_directives`], [`parse_script`]);
//! - `directives.rs`: the lexer of a script's `#SBATCH` lines ([`script_directives`]);
//! - `submitted.rs`: a submission as sbatch sees it, the command line over the script
//!   ([`Submitted`], [`effective_option`]), and the comment the supervisor refuses to carry
//!   ([`check_comment`]);
//! - `rebuild.rs`: the argv of a retry, the user's with a few [`Overrides`] ([`rebuild`],
//!   [`check_overrides`]).
//!
//! Array specs (`--array`) are read by `crate::domain::syntax`, whose parser Slurm's side shares;
//! its names are re-exported here.
//!
//! Things that differ from what one might expect, checked on 22.05.8:
//! - In `#SBATCH` lines an unquoted, unescaped `#` ends the line *wherever it is*, not only
//!   after whitespace: `#SBATCH --job-name=a#b --mem=1G` sets the name `a` and no memory.
//! - `--mem`, `--mem-per-cpu` and `--mem-per-gpu` are mutually exclusive across the command
//!   line *and* the script: `sbatch --mem=2G job.sh` where job.sh says
//!   `#SBATCH --mem-per-cpu=1G` fails with "--mem, --mem-per-cpu, and --mem-per-gpu are
//!   mutually exclusive". (An `SBATCH_MEM_PER_CPU` environment variable, by contrast, is
//!   overridden by a command-line `--mem`.) See [`script_mem_conflict`].
//! - sbatch 22.05 has no `-I`, `-u` or `-r` short options.
//! - Environment variables (`SBATCH_TIMELIMIT`, `SBATCH_PARTITION`, ...) override `#SBATCH`
//!   lines and are overridden by the command line; this module sees neither environment nor
//!   site defaults, so an "effective" value here is only what the argv and script say.
//!
//! **Architecture Invariant:** sbatch_args imports nothing of the crate but `syntax`: it
//! knows sbatch's command line, not the jobs it makes (job ids, dependencies, the store
//! and the chains are others'). `tests/architecture.rs` checks.

mod directives;
mod getopt;
mod options;
mod rebuild;
mod submitted;
#[cfg(test)]
mod tests;

pub use directives::{script_directives, try_script_directives};
pub use getopt::{parse, parse_directives, parse_script};
pub use options::MEM_OPTIONS;
pub use rebuild::{check_overrides, merge_node_lists, rebuild, Overrides};
pub use submitted::{check_comment, effective_option, script_mem_conflict, BadComment, Submitted};

// The array syntax is Slurm's as much as sbatch's (squeue prints pending task lists in it),
// so it lives in `crate::domain::syntax`; an `--array` value is read through these names here.
pub use crate::domain::syntax::{
    array_throttle, format_array_list, parse_array_spec, parse_array_spec_limited, MAX_ARRAY_INDEX,
    MAX_ARRAY_TASKS,
};

/// Why an sbatch command line (or `#SBATCH` block, or override) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("unknown sbatch option {0}: check its spelling against `sbatch --help`; an option this version does not know must be written as --name=value")]
    UnknownOption(String),
    #[error("sbatch option {given} is ambiguous ({}): spell it out", candidates.join(", "))]
    AmbiguousOption {
        given: String,
        candidates: Vec<String>,
    },
    #[error("sbatch option {0} needs a value")]
    MissingValue(String),
    #[error("sbatch option --{0} takes no value")]
    UnexpectedValue(String),
    #[error("heterogeneous jobs (`:` on the command line, `#SBATCH hetjob` in a script) are not supported; submit each component on its own")]
    HetJob,
    #[error("--wrap takes the command itself; {0:?} would be a script, which sbatch refuses with --wrap")]
    ScriptWithWrap(String),
    #[error("the script's #SBATCH lines hold {0:?}, which is not an option (sbatch rejects the script with \"Invalid directive\")")]
    InvalidDirective(String),
    #[error("#SBATCH line {line}: unmatched {quote} quote (sbatch rejects the script)")]
    UnmatchedQuote { line: usize, quote: char },
    #[error(transparent)]
    BadArray(#[from] crate::domain::syntax::BadArray),
    #[error("invalid override: {0}")]
    BadOverride(String),
}

/// One option as the user gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SbatchOpt {
    /// The canonical long name without dashes (`mem`, `time`, `job-name`), whatever form or
    /// abbreviation was used. An option unknown to the table (only accepted as `--name=value`)
    /// keeps the name as written.
    pub name: String,
    pub value: Option<String>,
    /// The exact argv tokens (one or two). Combined short flags (`-HQ`) are the one exception:
    /// each option of the group gets its own token (`-H`, `-Q`), which getopt reads the same way.
    pub raw: Vec<String>,
}

/// An sbatch command line split into options, script and script arguments.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SbatchCommand {
    pub options: Vec<SbatchOpt>,
    /// `None` with `--wrap`, or when sbatch would read the script from stdin.
    pub script: Option<String>,
    pub script_args: Vec<String>,
}

impl SbatchCommand {
    /// The value of the last occurrence of `name` (a canonical long name), as sbatch lets the
    /// last one win. `None` when absent or when the option carries no value (use [`Self::has`]).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .rev()
            .find(|o| o.name == name)
            .and_then(|o| o.value.as_deref())
    }

    /// True when `name` (a canonical long name) was given at all, with or without a value.
    pub fn has(&self, name: &str) -> bool {
        self.options.iter().any(|o| o.name == name)
    }

    /// The last occurrence of `name`.
    pub fn last(&self, name: &str) -> Option<&SbatchOpt> {
        self.options.iter().rev().find(|o| o.name == name)
    }
}
