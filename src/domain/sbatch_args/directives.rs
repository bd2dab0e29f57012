//! The `#SBATCH` lines of a batch script, split into option tokens as sbatch splits them
//! (the rules are on [`try_script_directives`]).

use super::ArgsError;

/// The option tokens of a script's `#SBATCH` lines, in order, ready for [`parse_directives`](super::parse_directives)
/// (or [`parse`](super::parse)). Lenient: stops at a heterogeneous-job separator (`#SBATCH hetjob`) and at
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
