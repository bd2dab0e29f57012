//! The architecture's invariants, checked on the source: which parts of the crate never
//! import which (docs/ARCHITECTURE.md, "Architecture invariants", says why), and that the
//! parts form no circle. A failure names the file and line of each import it refuses.
//!
//! No tool is involved: the test reads every file under `src/` (the binaries in `src/bin/`
//! are crates of their own, which nothing imports, and are left out), takes out comments,
//! strings and `#[cfg(test)]` items (unit tests may reach anywhere: `mod tests` blocks and
//! the `tests.rs` files declared under `#[cfg(test)]`), and resolves each path that names
//! a module of the crate: `use crate::x`, `crate::x::` anywhere, `super::` and `self::`
//! from where the file (or inline module) sits, and a path starting with a child
//! module's name. `use` groups (`crate::{a, b::c}`) count once per item. A path in an
//! attribute's string (`#[serde(with = "crate::x")]`) counts as written, and a name a
//! `pub use` gives (`crate::Store` re-exported from `store`) as the part it names.
//! [`NEVER_REACHES`] looks through chains of imports, where a rule sees one at a time.
//! One more rule is on calls, not imports: nothing outside `daemon/engine` calls the
//! engine's accessors ([`ENGINE_ACCESSORS`]), which are the tests'.
//!
//! The parts are the top-level modules, except that `daemon` and `slurm` are split into
//! their sub-modules (`daemon/engine`, `daemon/sbatch`, `slurm/cli`, `slurm/types`, ...),
//! so a rule can name one: `slurm` alone is `slurm/mod.rs` (the `Slurm` trait), and
//! `slurm/*` is every part of it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Modules whose sub-modules are parts of their own.
const SPLIT: &[&str] = &["daemon", "domain", "plumbing", "slurm"];

/// For the circle check, modules whose sub-modules are one part again: slurm's `types`
/// and `jobid` use each other (a row knows its job id, the grouping of rows by job knows
/// rows), which is one concern, not a layering.
const WHOLE_FOR_CIRCLES: &[&str] = &["slurm"];

/// A rule: `from` never imports `never` (`*` is every other part), but the parts in `but`.
/// A name ending in `/*` stands for the module and all its parts.
struct Rule {
    from: &'static [&'static str],
    never: &'static [&'static str],
    but: &'static [&'static str],
    why: &'static str,
}

/// The architecture invariants. Keep in step with docs/ARCHITECTURE.md.
const RULES: &[Rule] = &[
    Rule {
        from: &["domain/*"],
        never: &[
            "store",
            "protocol",
            "daemon/*",
            "ctl",
            "mcp",
            "client",
            "metrics",
            "slurm/cli",
            "slurm/spawn",
            "slurm/fake",
        ],
        but: &[],
        why: "the domain is the pure core: it takes what the edges read as values (Slurm's \
              rows, the settings) and reaches no database, socket, program or Slurm command",
    },
    Rule {
        from: &["plumbing/*"],
        never: &["*"],
        but: &[],
        why: "plumbing is the leaves every layer may use (clock, logging, MUNGE, TLS, ...): \
              it knows none of the parts that use it",
    },
    Rule {
        from: &["domain/model"],
        never: &["*"],
        but: &[],
        why: "model is the vocabulary every layer speaks; it knows none of them",
    },
    Rule {
        from: &["domain/syntax"],
        never: &["*"],
        but: &["plumbing/osbytes"],
        why: "Slurm's value syntaxes sit below both sbatch_args and slurm, which share them; \
              they know neither (osbytes, a leaf, cuts an error's text)",
    },
    Rule {
        from: &["plumbing/osbytes", "plumbing/clock"],
        never: &["*"],
        but: &[],
        why: "leaves: raw bytes in strings and the wall clock are used everywhere",
    },
    Rule {
        from: &["domain/continuation"],
        never: &["*"],
        but: &[],
        why: "what a continuing job asked for and what its progress path looked like are \
              values: reading the path is the daemon's, deciding is policy's",
    },
    Rule {
        from: &["domain/election"],
        never: &["*"],
        but: &[],
        why: "election decides from the lease's answers and the monotonic time it is \
              given: it reads no database, no clock and knows no other part",
    },
    Rule {
        from: &["plumbing/tls", "plumbing/dbconfig"],
        never: &["*"],
        but: &[],
        why: "leaves: reading a TLS key and certificate, and a database's connection \
              settings, know nothing of the supervisor that uses them",
    },
    Rule {
        from: &["plumbing/munge"],
        never: &["*"],
        but: &[],
        why: "munge speaks to libmunge and knows nothing of the supervisor: what a \
              credential's payload means and who may do what are above it",
    },
    Rule {
        from: &["domain/signature"],
        never: &["*"],
        but: &[],
        why: "a failure's signature is masked text and a hash of what it is given: it \
              reads no output file and knows no ending's source, so every writer computes \
              the same one",
    },
    Rule {
        from: &["domain/learn"],
        never: &[
            "store",
            "protocol",
            "daemon/*",
            "slurm/*",
            "metrics",
            "domain/policy",
            "domain/classify",
        ],
        but: &[],
        why: "a rule proposal is decided from the resolutions it is given: it reads no \
              store, speaks no protocol and decides no ending",
    },
    Rule {
        from: &["domain/request_binding"],
        never: &["*"],
        but: &[],
        why: "a request binding is bytes and hashes: it obtains no credential (munge), \
              reads no protocol and issues no nonce",
    },
    Rule {
        from: &["domain/sbatch_args"],
        never: &["*"],
        but: &["domain/syntax"],
        why: "sbatch_args knows sbatch's command line, not the jobs it makes: \
              job ids, dependencies, the store and the chains are others'",
    },
    Rule {
        from: &["domain/policy"],
        never: &["store", "protocol", "daemon/*", "slurm/*", "metrics"],
        but: &[],
        why: "policy decides from the values it is given: it reads no store, speaks no \
              protocol, runs nothing and counts nothing",
    },
    Rule {
        from: &["domain/classify"],
        never: &[
            "store",
            "daemon/*",
            "domain/policy",
            "metrics",
            "slurm",
            "slurm/cli",
            "slurm/spawn",
            "slurm/fake",
        ],
        but: &[],
        why: "classify is a pure function of what Slurm printed (slurm's rows and job \
              ids) and the rules: it reaches no Slurm command and no store, and does not \
              know what will be decided",
    },
    Rule {
        from: &["slurm/*"],
        never: &[
            "metrics",
            "daemon/*",
            "store",
            "domain/policy",
            "domain/classify",
            "domain/sbatch_args",
        ],
        but: &[],
        why: "slurm runs Slurm's commands and reads what they print; who observes them \
              and what the supervisor makes of the answers are above it",
    },
    Rule {
        from: &["metrics"],
        never: &["daemon/*"],
        but: &[],
        why: "the metrics are counted by whoever observes and read from the store; they \
              do not reach into the daemon",
    },
    Rule {
        from: &["store"],
        never: &["domain/sbatch_args", "daemon/*", "slurm/*"],
        but: &[],
        why: "the store keeps what it is given; reading argv and running Slurm happen \
              before it",
    },
    Rule {
        from: &["domain/dependency"],
        never: &["store", "domain/policy", "daemon/*", "domain/sbatch_args"],
        but: &[],
        why: "dependency's decisions (resolve, rewire) take what the store read as values; \
              finding a submission's --dependency in its command line is daemon/sbatch's",
    },
    Rule {
        from: &["domain/notification", "protocol"],
        never: &["store", "domain/policy", "daemon/*", "slurm/*", "metrics"],
        but: &[],
        why: "values and their text only: what a chain's notification says, what the \
              control protocol carries",
    },
    Rule {
        from: &["client"],
        never: &[
            "daemon/*",
            "store",
            "domain/policy",
            "slurm/*",
            "metrics",
            "domain/classify",
            "ctl",
            "mcp",
        ],
        but: &[],
        why: "the client reaches a daemon by its protocol (socket, network, MUNGE, TLS); \
              supervisorctl and the MCP server stand on it, and nothing of the daemon's \
              inside is its business",
    },
    Rule {
        from: &["ctl", "mcp"],
        never: &["daemon/*", "store", "domain/policy", "slurm/*", "metrics"],
        but: &[],
        why: "supervisorctl and its MCP server are clients: they speak the protocol and \
              hold none of the daemon's parts",
    },
    Rule {
        from: &["daemon/sbatch"],
        never: &["daemon/engine", "daemon/requests", "daemon"],
        but: &[],
        why: "the mechanics of one sbatch are the engine's and the requests' tool; they \
              do not call back into them",
    },
    Rule {
        from: &["daemon/engine"],
        never: &[
            "daemon/requests",
            "daemon/reads",
            "daemon/server",
            "daemon/net",
            "daemon/cluster",
            "daemon",
        ],
        but: &[],
        why: "the engine carries transitions out; the loop, the requests, the network \
              server and cluster mode call it, never the other way",
    },
    Rule {
        from: &["daemon/reads"],
        never: &["daemon/engine", "daemon/requests", "daemon/sbatch"],
        but: &[],
        why: "reads answer from the store (a snapshot or the replica) beside the loop: \
              they run no transition and no Slurm command",
    },
];

/// Parts `from` never reaches through any chain of imports (a rule above sees one
/// import at a time): `(from, never, why)`.
const NEVER_REACHES: &[(&str, &str, &str)] = &[
    (
        "domain/policy",
        "store",
        "decisions are pure: no chain of imports takes policy to the database",
    ),
    (
        "domain/policy",
        "slurm/cli",
        "decisions are pure: no chain of imports takes policy to a Slurm command",
    ),
    (
        "domain/classify",
        "store",
        "classify is a pure function of what Slurm printed and the rules",
    ),
    (
        "domain/classify",
        "slurm/cli",
        "classify is a pure function of what Slurm printed and the rules",
    ),
    (
        "daemon/reads",
        "daemon/engine",
        "reads answer from the store beside the loop, through whatever part they use",
    ),
    (
        "daemon/reads",
        "daemon/sbatch",
        "reads answer from the store beside the loop: no sbatch through any part",
    ),
    (
        "store",
        "domain/sbatch_args",
        "the store keeps the values it is given: a submission's dependency rows are read \
         from its command line above it, and the reader is handed to it as a value \
         (Store::read_dependencies_with), never reached through an import",
    ),
];

/// Imports a rule forbids that are allowed all the same: `(file, part it imports, why)`.
/// An exception that no longer matches an import fails the test, so none outlives its
/// reason.
const EXCEPTIONS: &[(&str, &str, &str)] = &[(
    "src/slurm/fake.rs",
    "domain/sbatch_args",
    "the in-process fake plays sbatch, so it reads a command line as sbatch does; \
     compiled only for tests (the fake-slurm feature)",
)];

// ---- reading the source -----------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// A string literal's text (escapes left as written): a path in an attribute's string
    /// (`#[serde(with = "crate::x")]`) is read from it.
    Str(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The tokens of `text` that are code, each with its line: comments, string and char
/// literals and lifetimes are left out; numbers are kept as identifiers (harmless).
fn tokens(text: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            }
        } else if ch == '"' {
            let (start, l) = (i + 1, line);
            i = skip_string(&c, i + 1, &mut line);
            let end = i.saturating_sub(1).max(start);
            out.push((Tok::Str(c[start..end].iter().collect()), l));
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{1b}') or a lifetime ('a, 'static).
            if at(i + 1) == '\\' {
                // The quote, the backslash and the escaped character, then on to the end.
                i += 3;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            let hashes = c[i..].iter().take_while(|&&h| h == '#').count();
            if raw_prefix && at(i + hashes) == '"' {
                // A raw string: ends at `"` followed by as many `#`.
                i += hashes + 1;
                loop {
                    if i >= c.len() {
                        break;
                    }
                    if c[i] == '"'
                        && c[i + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&h| h == '#')
                            .count()
                            == hashes
                    {
                        i += 1 + hashes;
                        break;
                    }
                    line += usize::from(c[i] == '\n');
                    i += 1;
                }
            } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                i = skip_string(&c, i + 1, &mut line);
            } else if word == "b" && at(i) == '\'' {
                i += 1;
                while i < c.len() && c[i] != '\'' {
                    i += if c[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            } else if word == "r" && hashes == 1 {
                // A raw identifier, `r#type`.
                i += 1;
                let start = i;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                out.push((Tok::Ident(c[start..i].iter().collect()), line));
            } else {
                out.push((Tok::Ident(word), line));
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// Skips a `"..."` body from `i` (after the quote); returns the index after the closing one.
fn skip_string(c: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < c.len() {
        match c[i] {
            '\\' => {
                *line += usize::from(c.get(i + 1) == Some(&'\n'));
                i += 2;
            }
            '"' => return i + 1,
            ch => {
                *line += usize::from(ch == '\n');
                i += 1;
            }
        }
    }
    i
}

/// One path to a module of the crate, where it is written.
#[derive(Debug, Clone)]
struct Ref {
    line: usize,
    /// The path, resolved from the crate's root (`["daemon", "engine", "Engine"]`).
    path: Vec<String>,
}

/// What one file says: the paths it writes, and the child modules it declares under
/// `#[cfg(test)]` (test code, whose files are left out).
struct Scanned {
    refs: Vec<Ref>,
    test_children: Vec<String>,
    /// `pub use` items: the name they give (resolved from the crate's root, as
    /// `["store", "Transition"]`) and what it names (`["domain/policy", "Transition"]`).
    reexports: Vec<(Vec<String>, Vec<String>)>,
}

fn is_ident(t: Option<&(Tok, usize)>, s: &str) -> bool {
    matches!(t, Some((Tok::Ident(w), _)) if w == s)
}

fn is_punct(t: Option<&(Tok, usize)>, p: char) -> bool {
    matches!(t, Some((Tok::Punct(q), _)) if *q == p)
}

/// Index after the `[...]` (or `{...}`, `(...)`) that opens at `i`.
fn skip_group(toks: &[(Tok, usize)], mut i: usize) -> usize {
    let mut depth = 0i32;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Punct('[' | '{' | '(') => depth += 1,
            Tok::Punct(']' | '}' | ')') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// `#[cfg(test)]` at `i`: the item after it (and its other attributes) is test code.
/// The index after that item, and the child module it declares if it is `mod x;`.
fn test_item(toks: &[(Tok, usize)], i: usize) -> Option<(usize, Option<String>)> {
    if !is_punct(toks.get(i), '#') || !is_punct(toks.get(i + 1), '[') {
        return None;
    }
    let end = skip_group(toks, i + 1);
    let attr: Vec<&Tok> = toks[i + 2..end - 1].iter().map(|t| &t.0).collect();
    let cfg_test = attr
        == [
            &Tok::Ident("cfg".into()),
            &Tok::Punct('('),
            &Tok::Ident("test".into()),
            &Tok::Punct(')'),
        ];
    if !cfg_test {
        return None;
    }
    let mut j = end;
    while is_punct(toks.get(j), '#') {
        j = skip_group(toks, j + 1);
    }
    // The item: up to its `;` or through its `{...}`, whichever comes first.
    let start = j;
    while j < toks.len() && !is_punct(toks.get(j), ';') && !is_punct(toks.get(j), '{') {
        j += if is_punct(toks.get(j), '(') || is_punct(toks.get(j), '[') {
            skip_group(toks, j) - j
        } else {
            1
        };
    }
    if is_punct(toks.get(j), ';') {
        let child = (start..j)
            .find(|&k| is_ident(toks.get(k), "mod"))
            .and_then(|k| match toks.get(k + 1) {
                Some((Tok::Ident(name), _)) => Some(name.clone()),
                _ => None,
            });
        Some((j + 1, child))
    } else {
        Some((skip_group(toks, j), None))
    }
}

/// Reads the paths of a file whose module is `module` (`["daemon", "engine"]`).
fn scan(text: &str, module: &[String]) -> Scanned {
    let toks = tokens(text);
    let mut refs = Vec::new();
    let mut test_children = Vec::new();
    let mut reexports = Vec::new();
    // Child modules declared in this file: a path may start with one's name.
    let children: BTreeSet<String> = toks
        .windows(3)
        .filter_map(|w| match (&w[0].0, &w[1].0, &w[2].0) {
            (Tok::Ident(m), Tok::Ident(name), Tok::Punct(';' | '{')) if m == "mod" => {
                Some(name.clone())
            }
            _ => None,
        })
        .collect();
    // Inline modules we are in: (name, brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        if let Some((next, child)) = test_item(&toks, i) {
            test_children.extend(child);
            i = next;
            continue;
        }
        if is_punct(toks.get(i), '#') && is_punct(toks.get(i + 1), '[') {
            // A path an attribute names in a string (`#[serde(with = "crate::x")]`); the
            // attribute's other paths are read as any code's.
            let end = skip_group(&toks, i + 1);
            let here: Vec<String> = module
                .iter()
                .cloned()
                .chain(inline.iter().map(|(n, _)| n.clone()))
                .collect();
            for (t, line) in &toks[i + 2..end.saturating_sub(1)] {
                if let Tok::Str(text) = t {
                    if let Some(path) = string_path(text, &here) {
                        refs.push(Ref { line: *line, path });
                    }
                }
            }
            i += 2;
            continue;
        }
        match &toks[i].0 {
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
                continue;
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                continue;
            }
            Tok::Ident(m) if m == "mod" => {
                if let (Some((Tok::Ident(name), _)), true) =
                    (toks.get(i + 1), is_punct(toks.get(i + 2), '{'))
                {
                    inline.push((name.clone(), depth + 1));
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        let here: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        // `pub use` (or `pub(crate) use`, ...): a name other parts may reach this by.
        if is_ident(toks.get(i), "use")
            && (is_ident(toks.get(i.wrapping_sub(1)), "pub")
                || is_punct(toks.get(i.wrapping_sub(1)), ')')
                    && (2..=4).any(|k| is_ident(toks.get(i.wrapping_sub(k)), "pub")))
        {
            let base = match toks.get(i + 1).map(|t| &t.0) {
                Some(Tok::Ident(w)) if w == "crate" => Some((Vec::new(), i + 3)),
                Some(Tok::Ident(w)) if w == "super" || w == "self" => Some((here.clone(), i + 1)),
                Some(Tok::Ident(w)) if inline.is_empty() && children.contains(w) => {
                    Some((here.clone(), i + 1))
                }
                _ => None,
            };
            if let Some((base, from)) = base {
                let mut items = Vec::new();
                path_items(&toks, from, base, &mut items);
                for (target, name) in items {
                    if let Some(name) = name {
                        let mut alias = here.clone();
                        alias.push(name);
                        reexports.push((alias, target));
                    }
                }
            }
        }
        // Not a path's start: inside one (`a::crate`), a macro's `$crate`, a field, or the
        // scope of a `pub(in crate::x)`.
        let after_sep = i > 0 && matches!(toks[i - 1].0, Tok::PathSep | Tok::Punct('$' | '.'))
            || i > 1 && is_ident(toks.get(i - 1), "in") && is_punct(toks.get(i - 2), '(');
        let start = match &toks[i].0 {
            Tok::Ident(w) if !after_sep && matches!(toks.get(i + 1), Some((Tok::PathSep, _))) => {
                match w.as_str() {
                    "crate" => Some((Vec::new(), i + 2)),
                    "super" | "self" => Some((here.clone(), i)),
                    w if inline.is_empty() && children.contains(w) => Some((here.clone(), i)),
                    _ => None,
                }
            }
            _ => None,
        };
        let Some((base, from)) = start else {
            i += 1;
            continue;
        };
        let line = toks[i].1;
        let (paths, end) = read_path(&toks, from, base);
        refs.extend(paths.into_iter().map(|path| Ref { line, path }));
        i = end.max(i + 1);
    }
    Scanned {
        refs,
        test_children,
        reexports,
    }
}

/// The path a string names, if it is one of the crate's (`crate::x::y`, `super::x`,
/// `self::x`) resolved from `here`.
fn string_path(text: &str, here: &[String]) -> Option<Vec<String>> {
    let toks = tokens(text);
    let base = match toks.first().map(|t| &t.0) {
        Some(Tok::Ident(w)) if w == "crate" => (Vec::new(), 2),
        Some(Tok::Ident(w)) if w == "super" || w == "self" => (here.to_vec(), 0),
        _ => return None,
    };
    if !matches!(toks.get(1), Some((Tok::PathSep, _))) {
        return None;
    }
    let (paths, _) = read_path(&toks, base.1, base.0);
    paths.into_iter().next()
}

/// The paths of a `use` tree (or of any path) from `i` onto `base`, each with the name it
/// gives: `a::B` gives `B`, `a::B as C` gives `C`, `a::{self, B}` gives `a` and `B`; a glob
/// (`a::*`), `as _` and a path that goes on past a name (`a::B::<T>`, `a::f()`) give none,
/// but are paths all the same. Returns the index after them.
fn path_items(
    toks: &[(Tok, usize)],
    mut i: usize,
    mut base: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    loop {
        match toks.get(i).map(|t| &t.0) {
            Some(Tok::Ident(w)) => {
                match w.as_str() {
                    "super" => {
                        base.pop();
                    }
                    "self" => {}
                    _ => base.push(w.clone()),
                }
                i += 1;
                if matches!(toks.get(i), Some((Tok::PathSep, _))) {
                    i += 1;
                    continue;
                }
                let name = if is_ident(toks.get(i), "as") {
                    i += 2;
                    match toks.get(i - 1).map(|t| &t.0) {
                        Some(Tok::Ident(n)) if n != "_" => Some(n.clone()),
                        _ => None,
                    }
                } else {
                    base.last().cloned()
                };
                out.push((base, name));
                return i;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match toks.get(i).map(|t| &t.0) {
                        None => return i,
                        Some(Tok::Punct('}')) => return i + 1,
                        Some(Tok::Punct(',')) => i += 1,
                        _ => i = path_items(toks, i, base.clone(), out).max(i + 1),
                    }
                }
            }
            Some(Tok::Punct('*')) => {
                out.push((base, None));
                return i + 1;
            }
            _ => {
                out.push((base, None));
                return i;
            }
        }
    }
}

/// Reads a path from `i` onto `base` (`super` goes up, `self` stays, a `{...}` group gives
/// one path per item); returns the paths and the index after them.
fn read_path(toks: &[(Tok, usize)], i: usize, base: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let mut items = Vec::new();
    let end = path_items(toks, i, base, &mut items);
    (items.into_iter().map(|(path, _)| path).collect(), end)
}

// ---- the parts and their imports --------------------------------------------------------

/// A file's module path: `src/daemon/engine/mod.rs` is `daemon::engine`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().unwrap();
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// Every `.rs` file under `dir`, but `src/bin`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "bin") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// One import of one part by another, where it is written.
#[derive(Debug, Clone)]
struct Import {
    file: String,
    line: usize,
    from: String,
    to: String,
    /// As written.
    path: String,
    /// What it names once `pub use` names are followed.
    resolved: String,
}

struct Crate {
    imports: Vec<Import>,
    parts: BTreeSet<String>,
}

fn read_crate() -> Crate {
    read_crate_with(&[])
}

/// What `path` names once the `pub use` names on its way are followed (`crate::Store`
/// re-exported from `store` is `store::Store`).
fn resolve(path: &[String], aliases: &BTreeMap<Vec<String>, Vec<String>>) -> Vec<String> {
    let mut p = path.to_vec();
    for _ in 0..8 {
        let Some(k) = (1..=p.len()).rev().find(|&k| aliases.contains_key(&p[..k])) else {
            break;
        };
        let mut next = aliases[&p[..k]].clone();
        next.extend_from_slice(&p[k..]);
        if next == p {
            break;
        }
        p = next;
    }
    p
}

/// [`read_crate`], with each `(file, text)` of `extra` added at the end of that file under
/// `src/` (a file that does not exist is read as if it held the text alone).
fn read_crate_with(extra: &[(&str, &str)]) -> Crate {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .map(|f| module_of(f.strip_prefix(&src).unwrap()))
        .collect();
    let part = |path: &[String]| -> String {
        match path {
            [] => "crate".to_string(),
            [top, sub, ..]
                if SPLIT.contains(&top.as_str())
                    && modules.contains(&vec![top.clone(), sub.clone()]) =>
            {
                format!("{top}/{sub}")
            }
            [top, ..] => top.clone(),
        }
    };
    let mut scanned = Vec::new();
    let mut test_modules: BTreeSet<Vec<String>> = BTreeSet::new();
    let mut aliases: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    for (file, _) in extra {
        let f = src.join(file);
        if !files.contains(&f) {
            files.push(f);
        }
    }
    for f in &files {
        let module = module_of(f.strip_prefix(&src).unwrap());
        let mut text = std::fs::read_to_string(f).unwrap_or_default();
        for (file, added) in extra {
            if src.join(file) == *f {
                text.push('\n');
                text.push_str(added);
            }
        }
        let s = scan(&text, &module);
        aliases.extend(s.reexports.iter().cloned());
        for c in &s.test_children {
            let mut m = module.clone();
            m.push(c.clone());
            test_modules.insert(m);
        }
        scanned.push((f, module, s));
    }
    let mut imports = Vec::new();
    let mut parts = BTreeSet::new();
    for (f, module, s) in scanned {
        if test_modules.iter().any(|t| module.starts_with(t)) {
            continue;
        }
        let from = part(&module);
        parts.insert(from.clone());
        let mut seen = BTreeSet::new();
        for r in s.refs {
            let path = resolve(&r.path, &aliases);
            // A path written twice on one line is one import.
            if !seen.insert((r.line, path.clone())) {
                continue;
            }
            let to = part(&path);
            if to != from {
                imports.push(Import {
                    file: f.strip_prefix(root).unwrap().display().to_string(),
                    line: r.line,
                    from: from.clone(),
                    to,
                    path: format!("crate::{}", r.path.join("::")),
                    resolved: path.join("::"),
                });
            }
        }
    }
    Crate { imports, parts }
}

/// `name` is what `pattern` names: the part itself, or with `x/*` any part of `x`.
fn covers(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix("/*") {
        Some(module) => name == module || name.starts_with(&format!("{module}/")),
        None => pattern == name,
    }
}

/// Whether a rule forbids `from` importing `to`.
fn forbids(rule: &Rule, from: &str, to: &str) -> bool {
    rule.from.iter().any(|p| covers(p, from))
        && !rule.from.iter().any(|p| covers(p, to))
        && rule.never.iter().any(|p| *p == "*" || covers(p, to))
        && !rule.but.iter().any(|p| covers(p, to))
}

#[test]
fn no_part_imports_what_the_rules_forbid() {
    let report = forbidden(&read_crate());
    assert!(
        report.is_empty(),
        "forbidden imports (the rules are in tests/architecture.rs, their reasons in \
         docs/ARCHITECTURE.md, \"Architecture invariants\"):\n\n{report}"
    );
}

/// What [`RULES`] and [`NEVER_REACHES`] find in `c`, one paragraph a broken rule.
fn forbidden(c: &Crate) -> String {
    let mut used = vec![false; EXCEPTIONS.len()];
    let mut report = String::new();
    for rule in RULES {
        let mut lines = String::new();
        for i in c.imports.iter().filter(|i| forbids(rule, &i.from, &i.to)) {
            if let Some(k) = EXCEPTIONS
                .iter()
                .position(|(file, to, _)| *file == i.file && covers(to, &i.to))
            {
                used[k] = true;
                continue;
            }
            let via = if i.resolved == i.path.trim_start_matches("crate::") {
                String::new()
            } else {
                format!(", which is crate::{}", i.resolved)
            };
            let _ = writeln!(
                lines,
                "  {}:{}: {} imports {} ({}{via})",
                i.file, i.line, i.from, i.to, i.path
            );
        }
        if !lines.is_empty() {
            let never = if rule.never == ["*"] {
                match rule.but {
                    [] => "anything of the crate".to_string(),
                    but => format!("anything of the crate but {}", but.join(", ")),
                }
            } else {
                rule.never.join(", ")
            };
            let _ = writeln!(
                report,
                "{} never imports {never}: {}\n{lines}",
                rule.from.join(", "),
                rule.why.split_whitespace().collect::<Vec<_>>().join(" ")
            );
        }
    }
    for (k, (file, to, _)) in EXCEPTIONS.iter().enumerate() {
        if !used[k] {
            let _ = writeln!(
                report,
                "the exception for {file} importing {to} is no longer needed: remove it from EXCEPTIONS\n"
            );
        }
    }
    // Reached through any chain of imports: the shortest chain, each step where it is.
    let mut edges: BTreeMap<&str, BTreeMap<&str, &Import>> = BTreeMap::new();
    for i in &c.imports {
        edges
            .entry(i.from.as_str())
            .or_default()
            .entry(i.to.as_str())
            .or_insert(i);
    }
    for (from, never, why) in NEVER_REACHES {
        let mut back: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue: std::collections::VecDeque<&str> = c
            .parts
            .iter()
            .map(String::as_str)
            .filter(|p| covers(from, p))
            .collect();
        let starts: Vec<&str> = queue.iter().copied().collect();
        let mut found = None;
        while let Some(n) = queue.pop_front() {
            if covers(never, n) {
                found = Some(n);
                break;
            }
            for &m in edges.get(n).map(|e| e.keys()).into_iter().flatten() {
                if !starts.contains(&m) && !back.contains_key(m) {
                    back.insert(m, n);
                    queue.push_back(m);
                }
            }
        }
        let Some(mut n) = found else { continue };
        let mut steps = Vec::new();
        while let Some(&prev) = back.get(n) {
            let i = edges[prev][n];
            steps.push(format!(
                "  {} -> {}: {}:{} ({})",
                prev, n, i.file, i.line, i.path
            ));
            n = prev;
        }
        steps.reverse();
        let _ = writeln!(
            report,
            "{from} never reaches {never}, through any part: {}\n{}\n",
            why.split_whitespace().collect::<Vec<_>>().join(" "),
            steps.join("\n")
        );
    }
    report
}

/// The holes an earlier reading of the rules left (issue 33), each added to the real
/// source in turn: every one is refused now, naming the file the import is in.
#[test]
fn the_rules_refuse_each_hole_they_once_let_through() {
    let holes: &[(&str, &str, &str)] = &[
        (
            "plumbing/tls.rs",
            "fn probe() { crate::config::Config::defaults(); }",
            "plumbing/tls imports config",
        ),
        (
            "client/mod.rs",
            "use crate::daemon::server::Server;",
            "client imports daemon/server",
        ),
        (
            "client/net.rs",
            "use crate::store::Store;",
            "client imports store",
        ),
        (
            "daemon/engine/mod.rs",
            "use crate::daemon::net::Listener;",
            "daemon/engine imports daemon/net",
        ),
        (
            "daemon/reads/mod.rs",
            "use crate::daemon::engine::Engine;",
            "daemon/reads imports daemon/engine",
        ),
        (
            "domain/policy/mod.rs",
            "#[derive(serde::Serialize)]\nstruct Probe {\n    #[serde(with = \"crate::store::probe\")]\n    at: u8,\n}",
            "domain/policy imports store",
        ),
        (
            "lib.rs",
            "pub use crate::store::Store as ProbeStore;",
            "",
        ),
        (
            "domain/ids.rs",
            "use crate::protocol::Request;",
            "domain/ids imports protocol",
        ),
        (
            "plumbing/logging.rs",
            "use crate::config::Config;",
            "plumbing/logging imports config",
        ),
        (
            "domain/dependency.rs",
            "use crate::store::Probe;",
            "domain/policy never reaches store",
        ),
        // The import dependency.rs had before its argv reading moved to daemon/sbatch:
        // the store reached sbatch_args through it.
        (
            "domain/dependency.rs",
            "use crate::domain::sbatch_args::Submitted;",
            "store never reaches domain/sbatch_args",
        ),
    ];
    assert!(
        forbidden(&read_crate()).is_empty(),
        "the crate breaks a rule already"
    );
    for (file, text, want) in holes {
        if want.is_empty() {
            continue;
        }
        let report = forbidden(&read_crate_with(&[(file, text)]));
        assert!(
            report.contains(want) && report.contains(&format!("src/{file}")),
            "{text:?} added to src/{file} is not refused as {want:?}:\n{report}"
        );
    }
    // A root re-export used from policy is the part it names.
    let report = forbidden(&read_crate_with(&[
        ("lib.rs", holes[6].1),
        ("domain/policy/mod.rs", "fn probe(_: crate::ProbeStore) {}"),
    ]));
    assert!(
        report.contains("domain/policy imports store")
            && report.contains("which is crate::store::Store"),
        "{report}"
    );
}

/// `Engine`'s accessors: for tests to look inside the engine. The daemon's parts reach
/// its fields only through the context that names what each may touch
/// (`daemon/engine/contexts.rs`: a request's `Desk`, notification delivery's `Post`, the
/// agent's `AgentView`, the loop's `Upkeep`), and its Slurm only through its `Runner` or
/// a `Lookup` (docs/ARCHITECTURE.md, "Architecture invariants").
const ENGINE_ACCESSORS: &[&str] = &["store", "store_mut", "config", "slurm"];

/// Where code outside `daemon/engine` (test code left out) calls a method named as one of
/// [`ENGINE_ACCESSORS`] with no argument, one line a call; `extra` is added as in
/// [`read_crate_with`]. No other type of the crate has such a method (one that did would
/// be refused too: name it otherwise), so each is the engine's.
fn accessor_calls(extra: &[(&str, &str)]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for (file, _) in extra {
        let f = src.join(file);
        if !files.contains(&f) {
            files.push(f);
        }
    }
    files.sort();
    let mut texts = Vec::new();
    let mut test_modules: BTreeSet<Vec<String>> = BTreeSet::new();
    for f in &files {
        let module = module_of(f.strip_prefix(&src).unwrap());
        let mut text = std::fs::read_to_string(f).unwrap_or_default();
        for (file, added) in extra {
            if src.join(file) == *f {
                text.push('\n');
                text.push_str(added);
            }
        }
        for c in scan(&text, &module).test_children {
            let mut m = module.clone();
            m.push(c);
            test_modules.insert(m);
        }
        texts.push((f, module, text));
    }
    let mut report = String::new();
    for (f, module, text) in texts {
        if module.starts_with(&["daemon".to_string(), "engine".to_string()])
            || test_modules.iter().any(|t| module.starts_with(t))
        {
            continue;
        }
        let toks = tokens(&text);
        let mut i = 0;
        while i < toks.len() {
            if let Some((next, _)) = test_item(&toks, i) {
                i = next;
                continue;
            }
            if let (Some((Tok::Punct('.'), _)), Some((Tok::Ident(name), line))) =
                (toks.get(i), toks.get(i + 1))
            {
                if ENGINE_ACCESSORS.contains(&name.as_str())
                    && is_punct(toks.get(i + 2), '(')
                    && is_punct(toks.get(i + 3), ')')
                {
                    let _ = writeln!(
                        report,
                        "{}:{line}: .{name}()",
                        f.strip_prefix(root).unwrap().display()
                    );
                }
            }
            i += 1;
        }
    }
    report
}

#[test]
fn nothing_outside_the_engine_calls_its_accessors() {
    let report = accessor_calls(&[]);
    assert!(
        report.is_empty(),
        "Engine's store(), store_mut(), config() and slurm() are for tests; the daemon's \
         parts take the context that names what they touch (daemon/engine/contexts.rs: \
         Desk, Post, AgentView, Upkeep) and run Slurm through the engine's Runner or a \
         Lookup. Called at:\n\n{report}"
    );
    // Each call is found where the daemon's code could make one, and none in test code
    // or in the engine itself.
    let probe = "fn probe<S: crate::slurm::Slurm>(e: &crate::daemon::engine::Engine<S>) { let _ = e.store(); }";
    for (file, found) in [
        ("daemon/agent.rs", true),
        ("daemon/requests/probe.rs", true),
        ("daemon/engine/mod.rs", false),
    ] {
        let report = accessor_calls(&[(file, probe)]);
        assert_eq!(
            report.contains(&format!("src/{file}:")) && report.contains(".store()"),
            found,
            "{file}: {report}"
        );
    }
    let in_tests = format!("#[cfg(test)]\nmod probe_tests {{\n    {probe}\n}}");
    assert!(accessor_calls(&[("daemon/agent.rs", &in_tests)]).is_empty());
}

/// The part a circle is looked for in: a part of a module in [`WHOLE_FOR_CIRCLES`] is
/// the module.
fn whole(part: &str) -> &str {
    match part.split_once('/') {
        Some((module, _)) if WHOLE_FOR_CIRCLES.contains(&module) => module,
        _ => part,
    }
}

#[test]
fn the_parts_form_no_circle() {
    let c = read_crate();
    // Each edge with the first place that makes it.
    let mut edges: BTreeMap<&str, BTreeMap<&str, &Import>> = BTreeMap::new();
    for i in &c.imports {
        let (from, to) = (whole(&i.from), whole(&i.to));
        if from != to {
            edges.entry(from).or_default().entry(to).or_insert(i);
        }
    }
    let mut report = String::new();
    for component in circles(&edges) {
        // One circle through the component's first part, by the shortest way back.
        let start = component[0];
        let mut back: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        'search: while let Some(n) = queue.pop_front() {
            for &m in edges.get(n).map(|e| e.keys()).into_iter().flatten() {
                if !component.contains(&m) || back.contains_key(m) {
                    continue;
                }
                back.insert(m, n);
                if m == start {
                    break 'search;
                }
                queue.push_back(m);
            }
        }
        let mut path = vec![start];
        let mut n = back[start];
        while n != start {
            path.push(n);
            n = back[n];
        }
        path.push(start);
        path.reverse();
        let _ = writeln!(report, "{}:", path.join(" -> "));
        for w in path.windows(2) {
            let i = edges[w[0]][w[1]];
            let _ = writeln!(
                report,
                "  {} -> {}: {}:{} ({})",
                w[0], w[1], i.file, i.line, i.path
            );
        }
        report.push('\n');
    }
    assert!(
        report.is_empty(),
        "the crate's parts import each other in a circle; take the import that does not \
         belong out of each:\n\n{report}"
    );
}

/// The strongly connected components of more than one part (Tarjan), each sorted.
fn circles<'a>(edges: &BTreeMap<&'a str, BTreeMap<&'a str, &Import>>) -> Vec<Vec<&'a str>> {
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(
        n: &'a str,
        edges: &BTreeMap<&'a str, BTreeMap<&'a str, &Import>>,
        s: &mut State<'a>,
    ) {
        let i = s.index.len();
        s.index.insert(n, i);
        s.low.insert(n, i);
        s.stack.push(n);
        for &m in edges.get(n).map(|e| e.keys()).into_iter().flatten() {
            if !s.index.contains_key(m) {
                visit(m, edges, s);
                let low = s.low[n].min(s.low[m]);
                s.low.insert(n, low);
            } else if s.stack.contains(&m) {
                let low = s.low[n].min(s.index[m]);
                s.low.insert(n, low);
            }
        }
        if s.low[n] == s.index[n] {
            let mut component = Vec::new();
            while let Some(m) = s.stack.pop() {
                component.push(m);
                if m == n {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for &n in edges.keys() {
        if !s.index.contains_key(n) {
            visit(n, edges, &mut s);
        }
    }
    s.out
}

/// A rule naming a part that does not exist would check nothing.
#[test]
fn every_rule_names_parts_that_exist() {
    let c = read_crate();
    let mut unknown = Vec::new();
    for rule in RULES {
        for p in rule.from.iter().chain(rule.never).chain(rule.but) {
            if *p != "*" && !c.parts.iter().any(|part| covers(p, part)) {
                unknown.push(*p);
            }
        }
    }
    for (from, never, _) in NEVER_REACHES {
        for p in [from, never] {
            if !c.parts.iter().any(|part| covers(p, part)) {
                unknown.push(*p);
            }
        }
    }
    for (file, to, _) in EXCEPTIONS {
        if !Path::new(env!("CARGO_MANIFEST_DIR")).join(file).exists() {
            unknown.push(file);
        }
        if !c.parts.iter().any(|part| covers(to, part)) {
            unknown.push(to);
        }
    }
    assert!(
        unknown.is_empty(),
        "the rules name parts or files that do not exist: {unknown:?}"
    );
}

/// The reader of paths, on a file written for it: what it must find and what it must not.
#[test]
fn the_scanner_finds_paths_as_rust_resolves_them() {
    let text = r##"
//! A doc comment naming crate::store::Store is no import.
use crate::domain::model::ChainState;
use crate::{config::Config, slurm::{self, jobid::JobId}};
use super::sibling::Thing;
use super::super::far::Away as Near;
use self::child::Item;
/* crate::domain::policy::transition in a block comment, /* nested crate::metrics */ */
fn f() {
    let _ = "crate::store::in_a_string";
    let _ = r#"crate::store::in_a_raw_string "quoted""#;
    let _ = ['c', '\'', '"'];
    let _: &'static str = "";
    crate::plumbing::clock::now();
    child::call();
    other::crate_like::path();
}
mod inline {
    use super::super::up::There;
}
#[cfg(test)]
mod tests {
    use crate::store::Store;
}
#[cfg(test)]
mod declared_tests;
#[cfg(test)]
use crate::metrics::OnlyInTests;
mod child;
pub(in crate::daemon) fn scoped() {}
"##;
    let module = vec!["daemon".to_string(), "engine".to_string()];
    let s = scan(text, &module);
    let got: Vec<(usize, String)> = s.refs.iter().map(|r| (r.line, r.path.join("::"))).collect();
    let want: Vec<(usize, String)> = [
        (3, "domain::model::ChainState"),
        (4, "config::Config"),
        (4, "slurm"),
        (4, "slurm::jobid::JobId"),
        (5, "daemon::sibling::Thing"),
        (6, "far::Away"),
        (7, "daemon::engine::child::Item"),
        (14, "plumbing::clock::now"),
        (15, "daemon::engine::child::call"),
        (19, "daemon::up::There"),
    ]
    .into_iter()
    .map(|(l, p)| (l, p.to_string()))
    .collect();
    assert_eq!(got, want);
    assert_eq!(s.test_children, vec!["declared_tests".to_string()]);
}
