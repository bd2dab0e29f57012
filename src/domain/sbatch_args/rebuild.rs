//! The argv of a retry: the user's command line, every token as they wrote it, with the
//! few options the supervisor overrides.

use super::options::MEM_OPTIONS;
use super::{parse_array_spec, ArgsError, SbatchCommand};
use crate::domain::syntax::{parse_duration, Duration};

/// What a resubmission changes. `None`/empty means "as the user gave it".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Overrides {
    /// New memory per node in MiB, emitted as `--mem=<n>M`. Replaces every `--mem`,
    /// `--mem-per-cpu` and `--mem-per-gpu` of the command line. Zero would mean "all of
    /// each node's memory" to Slurm; [`check_overrides`] refuses it.
    pub mem_mb: Option<u64>,
    /// New `--time`, already formatted ([`crate::domain::syntax::format_time_limit`]).
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
    /// The full new `--mail-type` (see [`crate::domain::notification::supervised_mail_type`]).
    pub mail_type: Option<String>,
    /// Adds `--signal=<this>` when the command line sets none (a continuing job's
    /// warning; the caller leaves it out when the script sets one).
    pub signal: Option<String>,
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
///   `o.exclude` (see [`effective_option`](super::effective_option)).
/// - `--parsable` is there exactly once (the first of the user's, or appended).
/// - Then the script (or `o.script_path`), preceded by `--` if it starts with `-` or is
///   `:`, and the script's arguments, unchanged.
///
/// Options given only as `#SBATCH` lines need no removal: the command line wins over them,
/// with one exception, the memory options (see [`script_mem_conflict`](super::script_mem_conflict)).
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
    if let Some(sig) = o.signal.as_ref().filter(|_| !cmd.has("signal")) {
        out.push(format!("--signal={sig}"));
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
