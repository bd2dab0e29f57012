//! Understanding and rewriting an sbatch command line, without running anything.
//!
//! A user submits with `supervisorctl submit -- <sbatch options> SCRIPT [ARGS]`. To resubmit
//! an attempt the supervisor must know which tokens are options and which is the script,
//! and rebuild the argv with a few overrides (more memory, more time, nodes to avoid, the
//! supervisor's tag) while every other option stays exactly as the user typed it.
//!
//! The option table is sbatch's own, as Slurm 22.05.8 behaves: every option below was
//! probed against the real `sbatch` binary (`--opt --version` shows whether the option
//! swallows the next token, `--opt=x --version` whether it accepts a value at all). Parsing
//! follows getopt_long as sbatch calls it:
//! - options stop at the first non-option token (the script); everything after it belongs
//!   to the script, even tokens starting with `-`;
//! - `--` ends the options, the next token is the script even if it starts with `-`;
//! - a required value is `--opt=v`, `--opt v`, `-ov` or `-o v`; the separate form takes the
//!   next token whatever it looks like (`--job-name --hold` names the job `--hold`);
//! - an optional value (`--exclusive`, `--nice`, `--no-kill`/`-k`, `--get-user-env`,
//!   `--propagate`) is only ever attached: `--nice=5`, `-kfoo`; `--nice 5` makes `5` the script;
//! - a long option may be abbreviated to any unique prefix (`--part=debug`); an ambiguous
//!   one (`--par`: parsable or partition) is an error, as in sbatch;
//! - short flags combine (`-HQ`, `-HJname`).
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

use crate::syntax::{parse_duration, Duration};

// The array syntax is Slurm's as much as sbatch's (squeue prints pending task lists in it),
// so it lives in `crate::syntax`; an `--array` value is read through these names here.
pub use crate::syntax::{
    array_throttle, format_array_list, parse_array_spec, parse_array_spec_limited, MAX_ARRAY_INDEX,
    MAX_ARRAY_TASKS,
};

/// How an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg {
    None,
    Required,
    /// Only when attached: `--opt=value`, `-ovalue`.
    Optional,
}

struct Spec {
    long: &'static str,
    short: Option<char>,
    arg: Arg,
}

const fn req(long: &'static str, short: Option<char>) -> Spec {
    Spec {
        long,
        short,
        arg: Arg::Required,
    }
}
const fn flag(long: &'static str, short: Option<char>) -> Spec {
    Spec {
        long,
        short,
        arg: Arg::None,
    }
}
const fn opt(long: &'static str, short: Option<char>) -> Spec {
    Spec {
        long,
        short,
        arg: Arg::Optional,
    }
}

/// sbatch's options in Slurm 22.05.8, probed against the binary (see the module docs).
const OPTIONS: &[Spec] = &[
    req("account", Some('A')),
    req("acctg-freq", None),
    req("array", Some('a')),
    req("batch", None),
    req("bb", None),
    req("bbf", None),
    req("begin", Some('b')),
    req("chdir", Some('D')),
    req("cluster-constraint", None),
    req("clusters", Some('M')),
    req("comment", None),
    req("constraint", Some('C')),
    req("container", None),
    flag("contiguous", None),
    req("core-spec", Some('S')),
    req("cores-per-socket", None),
    req("cpu-freq", None),
    req("cpus-per-gpu", None),
    req("cpus-per-task", Some('c')),
    req("deadline", None),
    req("delay-boot", None),
    req("dependency", Some('d')),
    req("distribution", Some('m')),
    req("error", Some('e')),
    req("exclude", Some('x')),
    opt("exclusive", None),
    req("export", None),
    req("export-file", None),
    req("extra-node-info", Some('B')),
    opt("get-user-env", None),
    req("gid", None),
    req("gpu-bind", None),
    req("gpu-freq", None),
    req("gpus", Some('G')),
    req("gpus-per-node", None),
    req("gpus-per-socket", None),
    req("gpus-per-task", None),
    req("gres", None),
    req("gres-flags", None),
    flag("help", Some('h')),
    req("hint", None),
    flag("hold", Some('H')),
    flag("ignore-pbs", None),
    req("input", Some('i')),
    req("job-name", Some('J')),
    req("kill-on-invalid-dep", None),
    req("licenses", Some('L')),
    req("mail-type", None),
    req("mail-user", None),
    req("mcs-label", None),
    req("mem", None),
    req("mem-bind", None),
    req("mem-per-cpu", None),
    req("mem-per-gpu", None),
    req("mincpus", None),
    req("network", None),
    opt("nice", None),
    opt("no-kill", Some('k')),
    flag("no-requeue", None),
    req("nodefile", Some('F')),
    req("nodelist", Some('w')),
    req("nodes", Some('N')),
    req("ntasks", Some('n')),
    req("ntasks-per-core", None),
    req("ntasks-per-gpu", None),
    req("ntasks-per-node", None),
    req("ntasks-per-socket", None),
    req("open-mode", None),
    req("output", Some('o')),
    flag("overcommit", Some('O')),
    flag("oversubscribe", Some('s')),
    flag("parsable", None),
    req("partition", Some('p')),
    req("power", None),
    req("prefer", None),
    req("priority", None),
    req("profile", None),
    opt("propagate", None),
    req("qos", Some('q')),
    flag("quiet", Some('Q')),
    flag("reboot", None),
    flag("requeue", None),
    req("reservation", None),
    req("signal", None),
    req("sockets-per-node", None),
    flag("spread-job", None),
    req("switches", None),
    flag("test-only", None),
    req("thread-spec", None),
    req("threads-per-core", None),
    req("time", Some('t')),
    req("time-min", None),
    req("tmp", None),
    req("uid", None),
    flag("usage", None),
    flag("use-min-nodes", None),
    flag("verbose", Some('v')),
    flag("version", Some('V')),
    flag("wait", Some('W')),
    req("wait-all-nodes", None),
    req("wckey", None),
    req("wrap", None),
];

/// The memory options of which sbatch allows only one (see the module docs).
pub const MEM_OPTIONS: [&str; 3] = ["mem", "mem-per-cpu", "mem-per-gpu"];

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
    BadArray(#[from] crate::syntax::BadArray),
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

/// Parses a command line as sbatch would (the argv after `sbatch`, no program name).
///
/// A missing script is not an error here (`script: None`): sbatch then reads the script
/// from stdin, and a caller that needs a file says so. A script together with `--wrap` is an
/// error, as it is for sbatch; so is `:` (heterogeneous jobs). An unknown option is accepted
/// only in the `--name=value` form, where its value cannot be mistaken for the script; a bare
/// unknown `--name` or `-x` is an error, because whether it takes the next token as its value
/// cannot be known and guessing wrong would mistake an option value for the script.
pub fn parse(argv: &[String]) -> Result<SbatchCommand, ArgsError> {
    let (options, rest) = parse_options(argv)?;
    if let Some(first) = rest.first() {
        if first == ":" {
            return Err(ArgsError::HetJob);
        }
    }
    let mut rest = rest.iter().cloned();
    let (script, script_args) = match rest.next() {
        Some(s) if s == "--" => (rest.next(), rest.collect()),
        Some(s) => (Some(s), rest.collect()),
        None => (None, Vec::new()),
    };
    if options.iter().any(|o| o.name == "wrap") {
        if let Some(s) = script {
            return Err(ArgsError::ScriptWithWrap(s));
        }
    }
    Ok(SbatchCommand {
        options,
        script,
        script_args,
    })
}

/// Parses the tokens of a script's `#SBATCH` lines ([`script_directives`]). Unlike
/// [`parse`], a non-option token is an error, as sbatch rejects it ("Invalid directive
/// found in batch script"), instead of being taken for a script name.
pub fn parse_directives(tokens: &[String]) -> Result<SbatchCommand, ArgsError> {
    let (options, rest) = parse_options(tokens)?;
    if let Some(t) = rest.first() {
        return Err(ArgsError::InvalidDirective(t.clone()));
    }
    Ok(SbatchCommand {
        options,
        script: None,
        script_args: Vec::new(),
    })
}

/// Reads a batch script's `#SBATCH` lines into one parsed set of options.
pub fn parse_script(script: &str) -> Result<SbatchCommand, ArgsError> {
    parse_directives(&try_script_directives(script)?)
}

/// Splits argv into options and the untouched remainder (starting at `--`, the script, or
/// a `:`).
fn parse_options(argv: &[String]) -> Result<(Vec<SbatchOpt>, &[String]), ArgsError> {
    let mut options = Vec::new();
    let mut i = 0;
    while i < argv.len() {
        let tok = &argv[i];
        if tok == "--" || tok == "-" || !tok.starts_with('-') {
            break;
        }
        let next = argv.get(i + 1);
        let used = if let Some(body) = tok.strip_prefix("--") {
            long_option(tok, body, next, &mut options)?
        } else {
            short_options(tok, next, &mut options)?
        };
        i += used;
    }
    Ok((options, &argv[i..]))
}

/// Reads one `--name[=value]` token (and its value token); returns how many tokens it used.
fn long_option(
    tok: &str,
    body: &str,
    next: Option<&String>,
    out: &mut Vec<SbatchOpt>,
) -> Result<usize, ArgsError> {
    let (name, attached) = match body.split_once('=') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (body, None),
    };
    let Some(spec) = lookup_long(name)? else {
        return match attached {
            Some(v) if !name.is_empty() => {
                out.push(SbatchOpt {
                    name: name.to_string(),
                    value: Some(v),
                    raw: vec![tok.to_string()],
                });
                Ok(1)
            }
            _ => Err(ArgsError::UnknownOption(format!("--{name}"))),
        };
    };
    let name = spec.long.to_string();
    match (spec.arg, attached) {
        (Arg::None, Some(_)) => Err(ArgsError::UnexpectedValue(name)),
        (Arg::Required, None) => {
            let v = next.ok_or_else(|| ArgsError::MissingValue(format!("--{name}")))?;
            out.push(SbatchOpt {
                name,
                value: Some(v.clone()),
                raw: vec![tok.to_string(), v.clone()],
            });
            Ok(2)
        }
        (_, value) => {
            out.push(SbatchOpt {
                name,
                value,
                raw: vec![tok.to_string()],
            });
            Ok(1)
        }
    }
}

/// Reads one `-abc` group (and a value token if its last option needs one).
fn short_options(
    tok: &str,
    next: Option<&String>,
    out: &mut Vec<SbatchOpt>,
) -> Result<usize, ArgsError> {
    let group = &tok[1..];
    let alone = group.chars().count() == 1;
    for (at, c) in group.char_indices() {
        let spec = OPTIONS
            .iter()
            .find(|s| s.short == Some(c))
            .ok_or_else(|| ArgsError::UnknownOption(format!("-{c}")))?;
        let name = spec.long.to_string();
        let rest = &group[at + c.len_utf8()..];
        // The token(s) for this option alone: the original when it is alone in its group.
        let own = |tail: &str| {
            if at == 0 {
                tok.to_string()
            } else {
                format!("-{c}{tail}")
            }
        };
        match spec.arg {
            Arg::None => {
                let raw = if alone {
                    tok.to_string()
                } else {
                    format!("-{c}")
                };
                out.push(SbatchOpt {
                    name,
                    value: None,
                    raw: vec![raw],
                });
            }
            Arg::Optional => {
                let value = (!rest.is_empty()).then(|| rest.to_string());
                out.push(SbatchOpt {
                    name,
                    value,
                    raw: vec![own(rest)],
                });
                return Ok(1);
            }
            Arg::Required if !rest.is_empty() => {
                out.push(SbatchOpt {
                    name,
                    value: Some(rest.to_string()),
                    raw: vec![own(rest)],
                });
                return Ok(1);
            }
            Arg::Required => {
                let v = next.ok_or_else(|| ArgsError::MissingValue(format!("-{c}")))?;
                out.push(SbatchOpt {
                    name,
                    value: Some(v.clone()),
                    raw: vec![own(""), v.clone()],
                });
                return Ok(2);
            }
        }
    }
    Ok(1)
}

/// The option `name` stands for: an exact long name, or a unique prefix of one (getopt_long).
fn lookup_long(name: &str) -> Result<Option<&'static Spec>, ArgsError> {
    if name.is_empty() {
        return Ok(None);
    }
    if let Some(s) = OPTIONS.iter().find(|s| s.long == name) {
        return Ok(Some(s));
    }
    let matches: Vec<&Spec> = OPTIONS
        .iter()
        .filter(|s| s.long.starts_with(name))
        .collect();
    match matches.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        many => Err(ArgsError::AmbiguousOption {
            given: format!("--{name}"),
            candidates: many.iter().map(|s| format!("--{}", s.long)).collect(),
        }),
    }
}

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

/// The option tokens of a script's `#SBATCH` lines, in order, ready for [`parse_directives`]
/// (or [`parse`]). Lenient: stops at a heterogeneous-job separator (`#SBATCH hetjob`) and at
/// a line with an unmatched quote, keeping what came before; [`try_script_directives`]
/// reports those instead.
pub fn script_directives(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let _ = directives_into(script, &mut out);
    out
}

/// Like [`script_directives`], but an unmatched quote or a `hetjob` separator is an error.
///
/// The rules are sbatch 22.05's (its `_opt_batch_script`/`_get_argument`), checked against
/// the binary:
/// - a directive line starts with `#SBATCH` in the first column (`#SLURM` is still read,
///   with a deprecation warning); ` #SBATCH` with leading blanks and `#sbatch` are comments;
/// - reading stops at the first line that is neither blank nor a comment;
/// - tokens are split on whitespace; `'...'` and `"..."` group, `\` escapes the next
///   character (also inside quotes) but not whitespace (`a\ b` is two tokens, `a` and `b`);
/// - an unquoted `#` ends the line wherever it is, even inside a token;
/// - an empty token (`""`) ends the line too, as sbatch stops reading the line there.
pub fn try_script_directives(script: &str) -> Result<Vec<String>, ArgsError> {
    let mut out = Vec::new();
    directives_into(script, &mut out)?;
    Ok(out)
}

fn directives_into(script: &str, out: &mut Vec<String>) -> Result<(), ArgsError> {
    for (n, line) in script.split('\n').enumerate() {
        let rest = match line
            .strip_prefix("#SBATCH")
            .or_else(|| line.strip_prefix("#SLURM"))
        {
            Some(rest) => rest,
            None => match line.trim_start_matches(is_c_space).chars().next() {
                None | Some('#') => continue,
                Some(_) => break,
            },
        };
        let tokens = directive_tokens(rest)
            .map_err(|quote| ArgsError::UnmatchedQuote { line: n + 1, quote })?;
        if tokens
            .iter()
            .any(|t| t.eq_ignore_ascii_case("hetjob") || t.eq_ignore_ascii_case("packjob"))
        {
            return Err(ArgsError::HetJob);
        }
        out.extend(tokens);
    }
    Ok(())
}

/// C's `isspace` in the "C" locale (Rust's `is_ascii_whitespace` leaves out `\v`).
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// Splits the rest of one `#SBATCH` line; `Err(quote)` for an unmatched quote.
fn directive_tokens(line: &str) -> Result<Vec<String>, char> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| is_c_space(*c)).is_some() {}
        let mut token = String::new();
        let (mut quote, mut escaped) = (None::<char>, false);
        while let Some(&c) = chars.peek() {
            if quote.is_none() && is_c_space(c) {
                break;
            }
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
                chars.next();
                continue;
            } else if let Some(q) = quote {
                if c == q {
                    quote = None;
                    chars.next();
                    continue;
                }
            } else if c == '"' || c == '\'' {
                quote = Some(c);
                chars.next();
                continue;
            } else if c == '#' {
                break;
            }
            token.push(c);
            chars.next();
        }
        if let Some(q) = quote {
            return Err(q);
        }
        // sbatch stops reading the line at the first token that yields nothing: the end of
        // the line, a `#`, or an empty quoted string.
        if token.is_empty() {
            return Ok(tokens);
        }
        tokens.push(token);
    }
}

/// What a resubmission changes. `None`/empty means "as the user gave it".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Overrides {
    /// New memory per node in MiB, emitted as `--mem=<n>M`. Replaces every `--mem`,
    /// `--mem-per-cpu` and `--mem-per-gpu` of the command line. Zero would mean "all of
    /// each node's memory" to Slurm; [`check_overrides`] refuses it.
    pub mem_mb: Option<u64>,
    /// New `--time`, already formatted ([`crate::syntax::format_time_limit`]).
    pub time_limit: Option<String>,
    /// Node names (or hostlist expressions such as `n[1-2]`) to exclude, in addition to the
    /// user's own `-x/--exclude`.
    pub exclude: Vec<String>,
    /// New `--array` spec.
    pub array: Option<String>,
    pub partition: Option<String>,
    /// The full new `--comment` (the user's own comment is not kept unless included here).
    pub comment: Option<String>,
    /// Replaces the script token (e.g. with a snapshot of the script).
    pub script_path: Option<String>,
    /// The full new `--dependency` (the user's, resolved against supervised chains); an
    /// empty one overrides a script's `#SBATCH --dependency` with none.
    pub dependency: Option<String>,
    /// Adds `--hold` (the supervisor releases the job when its gates open).
    pub hold: bool,
    /// The full new `--mail-type` (see [`crate::notification::supervised_mail_type`]).
    pub mail_type: Option<String>,
}

/// The argv for a resubmission: `cmd` with the overrides applied.
///
/// - Every option that is not overridden keeps its raw tokens, in its original order.
/// - An override removes the user's conflicting options (memory: `--mem`, `--mem-per-cpu`,
///   `--mem-per-gpu`; time: `-t/--time`; array: `-a/--array`; partition: `-p/--partition`;
///   comment: `--comment`; mail type: `--mail-type`) and is appended as one `--name=value` token before the script.
/// - Exclusions are merged: the user's exclude list in force (the last `-x/--exclude`, as
///   sbatch keeps only that one) plus the new nodes, deduplicated, as one `--exclude=a,b`.
///   Only the command line is looked at: an `#SBATCH --exclude` in the script is replaced
///   by the command-line one, so the caller should add the script's nodes to
///   `o.exclude` (see [`effective_option`]).
/// - `--parsable` is there exactly once (the first of the user's, or appended).
/// - Then the script (or `o.script_path`), preceded by `--` if it starts with `-` or is
///   `:`, and the script's arguments, unchanged.
///
/// Options given only as `#SBATCH` lines need no removal: the command line wins over them,
/// with one exception, the memory options (see [`script_mem_conflict`]).
///
/// This never fails; [`check_overrides`] tells beforehand whether sbatch would refuse the
/// result for a reason this module can see.
pub fn rebuild(cmd: &SbatchCommand, o: &Overrides) -> Vec<String> {
    let replaced = |name: &str| match name {
        n if MEM_OPTIONS.contains(&n) => o.mem_mb.is_some(),
        "time" => o.time_limit.is_some(),
        "exclude" => !o.exclude.is_empty(),
        "array" => o.array.is_some(),
        "partition" => o.partition.is_some(),
        "comment" => o.comment.is_some(),
        "dependency" => o.dependency.is_some(),
        "mail-type" => o.mail_type.is_some(),
        _ => false,
    };
    let mut out = Vec::new();
    let mut parsable = false;
    for opt in &cmd.options {
        if opt.name == "parsable" {
            if parsable {
                continue;
            }
            parsable = true;
        }
        if !replaced(&opt.name) {
            out.extend(opt.raw.iter().cloned());
        }
    }
    if let Some(mb) = o.mem_mb {
        out.push(format!("--mem={mb}M"));
    }
    if let Some(t) = &o.time_limit {
        out.push(format!("--time={t}"));
    }
    if !o.exclude.is_empty() {
        out.push(format!(
            "--exclude={}",
            merge_node_lists(cmd.get("exclude"), &o.exclude)
        ));
    }
    if let Some(a) = &o.array {
        out.push(format!("--array={a}"));
    }
    if let Some(p) = &o.partition {
        out.push(format!("--partition={p}"));
    }
    if let Some(c) = &o.comment {
        out.push(format!("--comment={c}"));
    }
    if let Some(d) = &o.dependency {
        out.push(format!("--dependency={d}"));
    }
    if o.hold && !cmd.has("hold") {
        out.push("--hold".to_string());
    }
    if let Some(m) = &o.mail_type {
        out.push(format!("--mail-type={m}"));
    }
    if !parsable {
        out.push("--parsable".to_string());
    }
    if let Some(script) = o.script_path.as_ref().or(cmd.script.as_ref()) {
        // `--` keeps a script named `-x` from being read as an option, and one named `:`
        // from being read as a heterogeneous-job separator.
        if script.starts_with('-') || script == ":" {
            out.push("--".to_string());
        }
        out.push(script.clone());
    }
    out.extend(cmd.script_args.iter().cloned());
    out
}

/// Whether sbatch would refuse [`rebuild`]'s result for a reason visible here: memory of
/// zero, a time limit that is not a positive Slurm time, a bad array spec, an empty
/// partition or node name, a user exclude list that is a file (sbatch reads `--exclude`
/// as a file name when it contains `/`, so nodes cannot be added to it), or a script path
/// together with `--wrap`.
pub fn check_overrides(cmd: &SbatchCommand, o: &Overrides) -> Result<(), ArgsError> {
    let bad = |m: String| Err(ArgsError::BadOverride(m));
    if o.mem_mb == Some(0) {
        return bad("--mem=0 would ask for all of each node's memory".into());
    }
    if let Some(t) = &o.time_limit {
        match parse_duration(t) {
            Ok(Duration::Secs(n)) if n > 0 => {}
            _ => return bad(format!("time limit {t:?} is not a positive Slurm time")),
        }
    }
    if let Some(a) = &o.array {
        parse_array_spec(a)?;
    }
    if o.partition.as_deref() == Some("") {
        return bad("empty partition".into());
    }
    if let Some(n) = o
        .exclude
        .iter()
        .find(|n| n.is_empty() || n.contains(|c: char| c.is_whitespace() || c == '/'))
    {
        return bad(format!("{n:?} is not a node name"));
    }
    if !o.exclude.is_empty() {
        if let Some(x) = cmd.get("exclude").filter(|x| x.contains('/')) {
            return bad(format!(
                "the user's --exclude={x} names a file; nodes cannot be added to it"
            ));
        }
    }
    if o.script_path.is_some() && cmd.has("wrap") {
        return bad("a --wrap job has no script to replace".into());
    }
    if o.script_path.as_deref() == Some("") {
        return bad("empty script path".into());
    }
    Ok(())
}

/// `existing` (a Slurm node list such as `n1,n[3-4]`) with `new` names appended, skipping
/// names already present. Commas inside brackets belong to a hostlist range, not the list.
pub fn merge_node_lists(existing: Option<&str>, new: &[String]) -> String {
    let mut names: Vec<String> = Vec::new();
    let mut push = |n: &str| {
        if !n.is_empty() && !names.iter().any(|m| m == n) {
            names.push(n.to_string());
        }
    };
    if let Some(list) = existing {
        let (mut depth, mut start) = (0i32, 0);
        for (i, c) in list.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                ',' if depth <= 0 => {
                    push(&list[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        push(&list[start..]);
    }
    for n in new {
        push(n);
    }
    names.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &[&str]) -> Vec<String> {
        s.iter().map(|t| t.to_string()).collect()
    }

    /// (name, value, raw) of one option.
    type OptRow = (String, Option<String>, Vec<String>);

    fn opts(cmd: &SbatchCommand) -> Vec<OptRow> {
        cmd.options
            .iter()
            .map(|o| (o.name.clone(), o.value.clone(), o.raw.clone()))
            .collect()
    }

    fn o(name: &str, value: Option<&str>, raw: &[&str]) -> OptRow {
        (name.to_string(), value.map(str::to_string), argv(raw))
    }

    #[test]
    fn table_has_no_duplicates_and_known_shorts() {
        for (i, a) in OPTIONS.iter().enumerate() {
            for b in &OPTIONS[i + 1..] {
                assert_ne!(a.long, b.long);
                assert!(
                    a.short.is_none() || a.short != b.short,
                    "{} and {}",
                    a.long,
                    b.long
                );
            }
        }
        // getopt string of sbatch 22.05.8, probed letter by letter: these take a value ...
        for c in "aAbBcCdDeFGiJLmMnNopqStwx".chars() {
            let s = OPTIONS.iter().find(|s| s.short == Some(c)).unwrap();
            assert_eq!(s.arg, Arg::Required, "-{c}");
        }
        // ... these take none, -k an optional one, and nothing else exists.
        for c in "hHOQsvVW".chars() {
            assert_eq!(
                OPTIONS.iter().find(|s| s.short == Some(c)).unwrap().arg,
                Arg::None,
                "-{c}"
            );
        }
        assert_eq!(
            OPTIONS.iter().find(|s| s.short == Some('k')).unwrap().arg,
            Arg::Optional
        );
        assert_eq!(
            OPTIONS.iter().filter(|s| s.short.is_some()).count(),
            25 + 8 + 1
        );
    }

    #[test]
    fn parses_the_usual_forms() {
        // (argv, options, script, script arguments)
        type Case<'a> = (&'a [&'a str], Vec<OptRow>, Option<&'a str>, &'a [&'a str]);
        let cases: &[Case] = &[
            (
                &[
                    "--mem=100M",
                    "--time",
                    "10",
                    "-J",
                    "name",
                    "job.sh",
                    "a",
                    "b",
                ],
                vec![
                    o("mem", Some("100M"), &["--mem=100M"]),
                    o("time", Some("10"), &["--time", "10"]),
                    o("job-name", Some("name"), &["-J", "name"]),
                ],
                Some("job.sh"),
                &["a", "b"],
            ),
            (
                &["-Jname", "-t5", "-p", "debug", "job.sh"],
                vec![
                    o("job-name", Some("name"), &["-Jname"]),
                    o("time", Some("5"), &["-t5"]),
                    o("partition", Some("debug"), &["-p", "debug"]),
                ],
                Some("job.sh"),
                &[],
            ),
            // Combined flags, the last one taking the rest of the token or the next one.
            (
                &["-HQ", "-HvJname", "-Ht", "5", "job.sh"],
                vec![
                    o("hold", None, &["-H"]),
                    o("quiet", None, &["-Q"]),
                    o("hold", None, &["-H"]),
                    o("verbose", None, &["-v"]),
                    o("job-name", Some("name"), &["-Jname"]),
                    o("hold", None, &["-H"]),
                    o("time", Some("5"), &["-t", "5"]),
                ],
                Some("job.sh"),
                &[],
            ),
            // Script arguments are the script's, even when they look like options.
            (
                &["--hold", "job.sh", "--mem=1G", "-J", "x", "--", ":"],
                vec![o("hold", None, &["--hold"])],
                Some("job.sh"),
                &["--mem=1G", "-J", "x", "--", ":"],
            ),
            // `--` ends the options; the script may then start with `-`.
            (
                &["--hold", "--", "-weird.sh", "x"],
                vec![o("hold", None, &["--hold"])],
                Some("-weird.sh"),
                &["x"],
            ),
            (&["--", "job.sh"], vec![], Some("job.sh"), &[]),
            // A separate value is taken whatever it looks like.
            (
                &["--job-name", "--hold", "-o", "-", "job.sh"],
                vec![
                    o("job-name", Some("--hold"), &["--job-name", "--hold"]),
                    o("output", Some("-"), &["-o", "-"]),
                ],
                Some("job.sh"),
                &[],
            ),
            // Optional values are attached only.
            (
                &[
                    "--exclusive",
                    "--nice=5",
                    "-k",
                    "--exclusive=user",
                    "-kon",
                    "job.sh",
                ],
                vec![
                    o("exclusive", None, &["--exclusive"]),
                    o("nice", Some("5"), &["--nice=5"]),
                    o("no-kill", None, &["-k"]),
                    o("exclusive", Some("user"), &["--exclusive=user"]),
                    o("no-kill", Some("on"), &["-kon"]),
                ],
                Some("job.sh"),
                &[],
            ),
            (
                &["--nice", "5", "job.sh"],
                vec![o("nice", None, &["--nice"])],
                Some("5"),
                &["job.sh"],
            ),
            // -kH is no-kill with the value "H", as getopt reads it.
            (
                &["-kH", "job.sh"],
                vec![o("no-kill", Some("H"), &["-kH"])],
                Some("job.sh"),
                &[],
            ),
            (
                &["-Hk", "job.sh"],
                vec![o("hold", None, &["-H"]), o("no-kill", None, &["-k"])],
                Some("job.sh"),
                &[],
            ),
            // Unique prefixes resolve to the canonical name; the raw token stays as typed.
            (
                &[
                    "--part=debug",
                    "--threads",
                    "2",
                    "--exclus",
                    "--job=x",
                    "job.sh",
                ],
                vec![
                    o("partition", Some("debug"), &["--part=debug"]),
                    o("threads-per-core", Some("2"), &["--threads", "2"]),
                    o("exclusive", None, &["--exclus"]),
                    o("job-name", Some("x"), &["--job=x"]),
                ],
                Some("job.sh"),
                &[],
            ),
            // An exact name wins over the longer names it prefixes.
            (
                &["--mem=1", "--time=2", "--gpus=1", "--export=NONE", "job.sh"],
                vec![
                    o("mem", Some("1"), &["--mem=1"]),
                    o("time", Some("2"), &["--time=2"]),
                    o("gpus", Some("1"), &["--gpus=1"]),
                    o("export", Some("NONE"), &["--export=NONE"]),
                ],
                Some("job.sh"),
                &[],
            ),
            // Empty attached values are values.
            (
                &["--comment=", "job.sh"],
                vec![o("comment", Some(""), &["--comment="])],
                Some("job.sh"),
                &[],
            ),
            // Unknown options are kept only in the =value form.
            (
                &["--tres-per-task=cpu=2", "job.sh"],
                vec![o(
                    "tres-per-task",
                    Some("cpu=2"),
                    &["--tres-per-task=cpu=2"],
                )],
                Some("job.sh"),
                &[],
            ),
            // No script: sbatch would read stdin.
            (
                &["--mem=1G"],
                vec![o("mem", Some("1G"), &["--mem=1G"])],
                None,
                &[],
            ),
            (&[], vec![], None, &[]),
            (
                &["--hold", "--"],
                vec![o("hold", None, &["--hold"])],
                None,
                &[],
            ),
            // `-` alone is not an option: it is the script's name.
            (&["-", "x"], vec![], Some("-"), &["x"]),
            // --wrap: no script.
            (
                &["--wrap", "echo hi; sleep 1", "-p", "debug"],
                vec![
                    o(
                        "wrap",
                        Some("echo hi; sleep 1"),
                        &["--wrap", "echo hi; sleep 1"],
                    ),
                    o("partition", Some("debug"), &["-p", "debug"]),
                ],
                None,
                &[],
            ),
        ];
        for (args, want_opts, script, script_args) in cases {
            let cmd = parse(&argv(args)).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert_eq!(opts(&cmd), *want_opts, "{args:?}");
            assert_eq!(cmd.script.as_deref(), *script, "{args:?}");
            assert_eq!(cmd.script_args, argv(script_args), "{args:?}");
        }
    }

    #[test]
    fn parse_errors() {
        let cases: &[(&[&str], ArgsError)] = &[
            (
                &["--frobnicate", "job.sh"],
                ArgsError::UnknownOption("--frobnicate".into()),
            ),
            (&["-I", "job.sh"], ArgsError::UnknownOption("-I".into())),
            (&["-Hu", "job.sh"], ArgsError::UnknownOption("-u".into())),
            (&["--=x", "job.sh"], ArgsError::UnknownOption("--".into())),
            (
                &["--par", "job.sh"],
                ArgsError::AmbiguousOption {
                    given: "--par".into(),
                    candidates: vec!["--parsable".into(), "--partition".into()],
                },
            ),
            (
                &["--ti=5", "job.sh"],
                ArgsError::AmbiguousOption {
                    given: "--ti".into(),
                    candidates: vec!["--time".into(), "--time-min".into()],
                },
            ),
            (
                &["--exclu", "job.sh"],
                ArgsError::AmbiguousOption {
                    given: "--exclu".into(),
                    candidates: vec!["--exclude".into(), "--exclusive".into()],
                },
            ),
            (&["--time"], ArgsError::MissingValue("--time".into())),
            (&["-H", "-J"], ArgsError::MissingValue("-J".into())),
            (
                &["--hold=yes", "job.sh"],
                ArgsError::UnexpectedValue("hold".into()),
            ),
            (&["-N1", ":", "-N2", "job.sh"], ArgsError::HetJob),
            (
                &["--wrap=true", "job.sh"],
                ArgsError::ScriptWithWrap("job.sh".into()),
            ),
            (
                &["--wrap=true", "--", "job.sh"],
                ArgsError::ScriptWithWrap("job.sh".into()),
            ),
        ];
        for (args, want) in cases {
            assert_eq!(parse(&argv(args)), Err(want.clone()), "{args:?}");
        }
    }

    #[test]
    fn get_has_and_effective() {
        let cmd = parse(&argv(&[
            "-t",
            "5",
            "--time=7",
            "--hold",
            "-x",
            "a",
            "--exclude=b",
            "job.sh",
        ]))
        .unwrap();
        assert_eq!(cmd.get("time"), Some("7"));
        assert_eq!(cmd.get("exclude"), Some("b"));
        assert_eq!(cmd.get("hold"), None);
        assert!(cmd.has("hold"));
        assert!(!cmd.has("mem"));
        let dir = parse_directives(&argv(&["--mem=2G", "--time=60", "--array=1-3"])).unwrap();
        assert_eq!(effective_option(&cmd, &dir, "time"), Some("7"));
        assert_eq!(effective_option(&cmd, &dir, "mem"), Some("2G"));
        assert_eq!(effective_option(&cmd, &dir, "array"), Some("1-3"));
        assert_eq!(effective_option(&cmd, &dir, "partition"), None);
    }

    #[test]
    fn directives_follow_sbatch() {
        // Every expectation below was checked with `sbatch -v` on 22.05.8.
        let script = [
            "#!/bin/sh",
            "# a comment",
            "#SBATCH --job-name=a#b --comment=\"x y\" --mem 100",
            "  #SBATCH --time=5",
            "#sbatch --qos=low",
            "#SBATCH -e e\\\"f #SBATCH --nice=3",
            "#SLURM --wckey=w",
            "\t",
            "#SBATCH\t--account=a'b c'd --mail-user=\"q\\\"x\" --partition='p#1' # trailing",
            "#SBATCH --comment \"\" --begin=now",
            "#SBATCH --qos=q -x a -x b",
            "echo hi",
            "#SBATCH --wckey=late",
            "",
        ]
        .join("\n");
        let script = script.as_str();
        let want = argv(&[
            "--job-name=a",
            "-e",
            "e\"f",
            "--wckey=w",
            "--account=ab cd",
            "--mail-user=q\"x",
            "--partition=p#1",
            "--comment",
            "--qos=q",
            "-x",
            "a",
            "-x",
            "b",
        ]);
        assert_eq!(script_directives(script), want);
        assert_eq!(try_script_directives(script), Ok(want.clone()));
        let cmd = parse_directives(&want).unwrap();
        assert_eq!(cmd.get("job-name"), Some("a"));
        assert_eq!(
            cmd.get("comment"),
            Some("--qos=q"),
            "the value comes from the next line, as in sbatch"
        );
        assert_eq!(cmd.get("qos"), None);
        assert_eq!(cmd.get("exclude"), Some("b"));
        assert_eq!(cmd.get("partition"), Some("p#1"));
        assert_eq!(cmd.get("time"), None);
        assert_eq!(cmd.get("wckey"), Some("w"));
    }

    #[test]
    fn directive_edge_cases() {
        let cases: &[(&str, Result<&[&str], ArgsError>)] = &[
            ("", Ok(&[])),
            ("#!/bin/bash\necho\n#SBATCH --mem=1G\n", Ok(&[])),
            ("#SBATCH --mem=1G", Ok(&["--mem=1G"])),
            (
                "#SBATCH --mem=1G\r\n#SBATCH -t 5\r\n",
                Ok(&["--mem=1G", "-t", "5"]),
            ),
            (
                "#SBATCH --array=1-10%2 # ten tasks\n",
                Ok(&["--array=1-10%2"]),
            ),
            ("#SBATCH -J a\\ b\n", Ok(&["-J", "a", "b"])),
            (
                "#SBATCH --comment='$(rm -rf ~)'\n",
                Ok(&["--comment=$(rm -rf ~)"]),
            ),
            (
                "#SBATCH --comment='unclosed\n",
                Err(ArgsError::UnmatchedQuote {
                    line: 1,
                    quote: '\'',
                }),
            ),
            (
                "#!/bin/sh\n#SBATCH -N1\n#SBATCH hetjob\n#SBATCH -N2\n",
                Err(ArgsError::HetJob),
            ),
            (
                "#SBATCH --job-name=myhetjob\n",
                Ok(&["--job-name=myhetjob"]),
            ),
        ];
        for (script, want) in cases {
            let want = want.clone().map(argv);
            assert_eq!(try_script_directives(script), want, "{script:?}");
        }
        // The lenient form keeps what came before the problem.
        assert_eq!(
            script_directives("#SBATCH -N1\n#SBATCH hetjob\n#SBATCH -N2\n"),
            argv(&["-N1"])
        );
        assert_eq!(
            script_directives("#SBATCH -N1\n#SBATCH -J 'x\n"),
            argv(&["-N1"])
        );
        assert_eq!(
            parse_directives(&argv(&["--mem=1G", "oops"])),
            Err(ArgsError::InvalidDirective("oops".into()))
        );
        let cmd =
            parse_script("#!/bin/sh\n#SBATCH --mem-per-cpu=1G\n#SBATCH -t 10\ntrue\n").unwrap();
        assert_eq!(
            script_mem_conflict(&cmd).map(|o| o.name.as_str()),
            Some("mem-per-cpu")
        );
        let cmd = parse_script("#!/bin/sh\n#SBATCH --mem=1G\ntrue\n").unwrap();
        assert_eq!(script_mem_conflict(&cmd), None);
    }

    fn rebuilt(args: &[&str], o: &Overrides) -> Vec<String> {
        rebuild(&parse(&argv(args)).unwrap(), o)
    }

    #[test]
    fn rebuild_without_overrides_keeps_everything() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["job.sh"], &["--parsable", "job.sh"]),
            (&["--parsable", "job.sh"], &["--parsable", "job.sh"]),
            (
                &["--parsable", "-J", "x", "--parsable", "job.sh"],
                &["--parsable", "-J", "x", "job.sh"],
            ),
            (
                &[
                    "-J",
                    "n",
                    "--mem",
                    "1G",
                    "-t5",
                    "--part=debug",
                    "job.sh",
                    "-x",
                    "y",
                ],
                &[
                    "-J",
                    "n",
                    "--mem",
                    "1G",
                    "-t5",
                    "--part=debug",
                    "--parsable",
                    "job.sh",
                    "-x",
                    "y",
                ],
            ),
            (&["--", "-weird.sh"], &["--parsable", "--", "-weird.sh"]),
            (&["--wrap", "echo hi"], &["--wrap", "echo hi", "--parsable"]),
            (&["--mem=1G"], &["--mem=1G", "--parsable"]),
        ];
        for (args, want) in cases {
            assert_eq!(rebuilt(args, &Overrides::default()), argv(want), "{args:?}");
        }
    }

    #[test]
    fn rebuild_with_overrides() {
        let all = Overrides {
            mem_mb: Some(400),
            time_limit: Some("00:02:00".into()),
            exclude: vec!["n1".into()],
            array: Some("3,5".into()),
            partition: Some("long".into()),
            comment: Some("mine ssv-0a1b2c3d-L2-c1.2".into()),
            script_path: Some("/state/scripts/L2/job.sh".into()),
            dependency: None,
            hold: false,
            mail_type: None,
        };
        let cases: &[(&[&str], &Overrides, &[&str])] = &[
            (
                // The user's dependency, in any form, is replaced by the resolved one; a
                // hold is added once.
                &[
                    "-d",
                    "afterok:c7",
                    "--dependency=afternotok:12",
                    "-H",
                    "job.sh",
                ],
                &Overrides {
                    dependency: Some("afterok:30".into()),
                    hold: true,
                    ..Default::default()
                },
                &["-H", "--dependency=afterok:30", "--parsable", "job.sh"],
            ),
            (
                &["job.sh"],
                &Overrides {
                    dependency: Some(String::new()),
                    hold: true,
                    ..Default::default()
                },
                &["--dependency=", "--hold", "--parsable", "job.sh"],
            ),
            (
                &[
                    "--mem=100M",
                    "-J",
                    "keep",
                    "--mem-per-cpu",
                    "50",
                    "--mem-per-gpu=1G",
                    "job.sh",
                    "arg",
                ],
                &Overrides {
                    mem_mb: Some(400),
                    ..Default::default()
                },
                &["-J", "keep", "--mem=400M", "--parsable", "job.sh", "arg"],
            ),
            (
                &["-t", "1", "--time=2", "-Ht3", "--time-min=1", "job.sh"],
                &Overrides {
                    time_limit: Some("1-00:00:00".into()),
                    ..Default::default()
                },
                &[
                    "-H",
                    "--time-min=1",
                    "--time=1-00:00:00",
                    "--parsable",
                    "job.sh",
                ],
            ),
            (
                &["-x", "n9", "--exclude=n[3-4],n5", "job.sh"],
                &Overrides {
                    exclude: vec!["n1".into(), "n5".into(), "n1".into(), "n[6-7]".into()],
                    ..Default::default()
                },
                &["--exclude=n[3-4],n5,n1,n[6-7]", "--parsable", "job.sh"],
            ),
            (
                &["job.sh"],
                &Overrides {
                    exclude: vec!["n1".into()],
                    ..Default::default()
                },
                &["--exclude=n1", "--parsable", "job.sh"],
            ),
            (
                &[
                    "-a",
                    "1-10%2",
                    "--array=1-3",
                    "-p",
                    "debug",
                    "--partition=x",
                    "--comment",
                    "old",
                    "--parsable",
                    "job.sh",
                ],
                &Overrides {
                    array: Some("3,5%2".into()),
                    partition: Some("long".into()),
                    comment: Some("new".into()),
                    ..Default::default()
                },
                &[
                    "--parsable",
                    "--array=3,5%2",
                    "--partition=long",
                    "--comment=new",
                    "job.sh",
                ],
            ),
            (
                &[
                    "--mem=1G",
                    "-t",
                    "5",
                    "-x",
                    "n2",
                    "-a",
                    "1-9",
                    "-p",
                    "d",
                    "--comment=c",
                    "-J",
                    "j",
                    "job.sh",
                    "--",
                    "a b",
                ],
                &all,
                &[
                    "-J",
                    "j",
                    "--mem=400M",
                    "--time=00:02:00",
                    "--exclude=n2,n1",
                    "--array=3,5",
                    "--partition=long",
                    "--comment=mine ssv-0a1b2c3d-L2-c1.2",
                    "--parsable",
                    "/state/scripts/L2/job.sh",
                    "--",
                    "a b",
                ],
            ),
            // A script read from stdin gets its snapshot as a file.
            (
                &["-J", "j"],
                &Overrides {
                    script_path: Some("/s/L1/stdin.sh".into()),
                    ..Default::default()
                },
                &["-J", "j", "--parsable", "/s/L1/stdin.sh"],
            ),
            // Found by fuzzing: a script named `:` (only reachable after `--`) kept its
            // `--`, or the rebuilt line would read as a heterogeneous job.
            (
                &["--", ":", "a"],
                &Overrides::default(),
                &["--parsable", "--", ":", "a"],
            ),
            // A replacement script starting with `-` is protected by `--`.
            (
                &["job.sh"],
                &Overrides {
                    script_path: Some("-x.sh".into()),
                    ..Default::default()
                },
                &["--parsable", "--", "-x.sh"],
            ),
        ];
        for (args, ov, want) in cases {
            assert_eq!(rebuilt(args, ov), argv(want), "{args:?}");
        }
    }

    /// Hostile bytes in values and script arguments come back byte-identical.
    #[test]
    fn rebuild_keeps_hostile_values_intact() {
        let hostile = [
            "--job-name=$(rm -rf ~)",
            "--comment",
            "a \"quoted\" 'thing'; `id` && echo\nnewline\ttab",
            "-o",
            "out dir/%j \\ $HOME.log",
            "-J",
            " leading and trailing ",
            "--export=ALL,X=a b,Y=$(z)",
            "--wrap=",
        ];
        let mut args: Vec<&str> = hostile.to_vec();
        args.pop(); // no --wrap with a script
        args.extend([
            "my job.sh",
            "--mem=1G",
            "$(echo pwned)",
            "",
            "a\nb",
            "-",
            "--",
        ]);
        let cmd = parse(&argv(&args)).unwrap();
        assert_eq!(
            cmd.get("comment"),
            Some("a \"quoted\" 'thing'; `id` && echo\nnewline\ttab")
        );
        assert_eq!(cmd.get("job-name"), Some(" leading and trailing "));
        assert_eq!(cmd.script.as_deref(), Some("my job.sh"));
        assert_eq!(
            cmd.script_args,
            argv(&["--mem=1G", "$(echo pwned)", "", "a\nb", "-", "--"])
        );

        let mut want = argv(&hostile[..hostile.len() - 1]);
        want.push("--parsable".into());
        want.extend(argv(&[
            "my job.sh",
            "--mem=1G",
            "$(echo pwned)",
            "",
            "a\nb",
            "-",
            "--",
        ]));
        assert_eq!(rebuild(&cmd, &Overrides::default()), want);

        // An override value with the same bytes is one token, never split or quoted.
        let ov = Overrides {
            comment: Some("x'\"; $(y)\nz|w".into()),
            ..Default::default()
        };
        let out = rebuild(&cmd, &ov);
        assert!(
            out.contains(&"--comment=x'\"; $(y)\nz|w".to_string()),
            "{out:?}"
        );
        assert!(
            !out.iter().any(|t| t == "--comment"),
            "the user's comment is replaced"
        );
        // Re-parsing the rebuilt argv gives the same script and arguments.
        let again = parse(&out).unwrap();
        assert_eq!(again.script, cmd.script);
        assert_eq!(again.script_args, cmd.script_args);
        assert_eq!(again.get("comment"), Some("x'\"; $(y)\nz|w"));
    }

    #[test]
    fn overrides_are_checked() {
        let cmd = parse(&argv(&["-x", "/etc/nodes", "job.sh"])).unwrap();
        let wrap = parse(&argv(&["--wrap=true"])).unwrap();
        let plain = parse(&argv(&["job.sh"])).unwrap();
        let cases: &[(&SbatchCommand, Overrides, Option<&str>)] = &[
            (&plain, Overrides::default(), None),
            (
                &plain,
                Overrides {
                    mem_mb: Some(1),
                    time_limit: Some("1-00:00:00".into()),
                    ..Default::default()
                },
                None,
            ),
            (
                &plain,
                Overrides {
                    mem_mb: Some(0),
                    ..Default::default()
                },
                Some("all of each node"),
            ),
            (
                &plain,
                Overrides {
                    time_limit: Some("UNLIMITED".into()),
                    ..Default::default()
                },
                Some("positive"),
            ),
            (
                &plain,
                Overrides {
                    time_limit: Some("00:00:00".into()),
                    ..Default::default()
                },
                Some("positive"),
            ),
            (
                &plain,
                Overrides {
                    time_limit: Some("soon".into()),
                    ..Default::default()
                },
                Some("positive"),
            ),
            (
                &plain,
                Overrides {
                    array: Some("1-".into()),
                    ..Default::default()
                },
                Some("array"),
            ),
            (
                &plain,
                Overrides {
                    partition: Some(String::new()),
                    ..Default::default()
                },
                Some("partition"),
            ),
            (
                &plain,
                Overrides {
                    exclude: vec!["".into()],
                    ..Default::default()
                },
                Some("node name"),
            ),
            (
                &plain,
                Overrides {
                    exclude: vec!["n1 n2".into()],
                    ..Default::default()
                },
                Some("node name"),
            ),
            (
                &cmd,
                Overrides {
                    exclude: vec!["n1".into()],
                    ..Default::default()
                },
                Some("names a file"),
            ),
            (&cmd, Overrides::default(), None),
            (
                &wrap,
                Overrides {
                    script_path: Some("/x.sh".into()),
                    ..Default::default()
                },
                Some("--wrap"),
            ),
            (
                &plain,
                Overrides {
                    script_path: Some(String::new()),
                    ..Default::default()
                },
                Some("empty script"),
            ),
        ];
        for (cmd, ov, want) in cases {
            match (check_overrides(cmd, ov), want) {
                (Ok(()), None) => {}
                (Err(e), Some(w)) => assert!(e.to_string().contains(w), "{ov:?}: {e}"),
                (got, _) => panic!("{ov:?}: unexpected {got:?}"),
            }
        }
    }
}
