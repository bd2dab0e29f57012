//! A command line read as sbatch reads it: getopt_long, as sbatch calls it, over the
//! option table of `options.rs`.
//!
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

use super::directives::try_script_directives;
use super::options::{Arg, Spec, OPTIONS};
use super::{ArgsError, SbatchCommand, SbatchOpt};

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

/// Parses the tokens of a script's `#SBATCH` lines ([`script_directives`](super::script_directives)). Unlike
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
