//! A failure's signature: what makes two endings "the same failure" for a rule learnt
//! from how people and agents resolved them (docs/rules.md).
//!
//! An ending's signature is its Slurm state, its exit code, and the last lines of its
//! stderr with what changes between runs masked: the job's own directories (its working
//! directory, its output files' folders, its owner's home), the names of its owner, job
//! and hosts, timestamps, hexadecimal strings and numbers. Two endings with the same
//! signature failed the same way wherever they happened: for two users, two jobs, two
//! nodes. The signature's `id` is a short hash of the three, the `text` the masked lines
//! a person reads (and a rule's stderr pattern is built from).
//!
//! Pure: no I/O, no clock; the caller gives the directories and names to mask.

use regex::Regex;
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// How many of stderr's last non-empty lines the signature keeps: enough to hold an error
/// and the line or two that say where it came from, few enough that a run's own progress
/// lines before it do not make every ending different.
pub const TAIL_LINES: usize = 4;

/// A masked line longer than this is cut: a signature is a handle, not the evidence.
pub const LINE_CHARS: usize = 200;

/// How many hex digits of the hash make the `id` (48 bits: a site sees a few thousand
/// different failures, not millions).
pub const ID_HEX: usize = 12;

/// What the masks put in place of what they hide.
pub const DIR: &str = "<dir>";
pub const NAME: &str = "<name>";
pub const TIME: &str = "<time>";
pub const DATE: &str = "<date>";
pub const HEX: &str = "<hex>";
pub const NUM: &str = "<n>";

/// An ending's signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// `ID_HEX` hex digits of SHA-256 over the state, exit code and text.
    pub id: String,
    /// The masked stderr lines, joined by `\n` (empty when stderr was not read or empty).
    pub text: String,
}

/// What is specific to one job and is masked as such: its directories (absolute paths:
/// working directory, output folders, home) and names (owner, job name, hosts).
#[derive(Debug, Clone, Default)]
pub struct JobSpecifics<'a> {
    pub dirs: Vec<&'a str>,
    pub names: Vec<&'a str>,
}

/// The signature of an ending in Slurm state `state` (`FAILED`) with exit code
/// `exit_code` (`1:0`) and stderr tail `stderr`.
pub fn signature(
    state: &str,
    exit_code: &str,
    stderr: Option<&str>,
    job: &JobSpecifics,
) -> Signature {
    let text = stderr.map(|s| mask_tail(s, job)).unwrap_or_default();
    Signature {
        id: id_of(state, exit_code, &text),
        text,
    }
}

/// The id of a signature's parts (the hash is over unambiguous, length-prefixed fields).
pub fn id_of(state: &str, exit_code: &str, text: &str) -> String {
    let mut h = Sha256::new();
    for part in [state, exit_code, text] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let digest = h.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    hex[..ID_HEX].to_string()
}

/// The last `TAIL_LINES` non-empty lines of `stderr`, each masked.
pub fn mask_tail(stderr: &str, job: &JobSpecifics) -> String {
    let lines: Vec<String> = stderr
        .lines()
        .map(|l| mask_line(l, job))
        .filter(|l| !l.is_empty())
        .collect();
    let from = lines.len().saturating_sub(TAIL_LINES);
    lines[from..].join("\n")
}

/// What a literal `<` and `>` of stderr become in a signature's text, before any mask:
/// so a placeholder typed into stderr (`<name>`, `<time>`) stays text, never a mask that
/// a rule's pattern reads as a wildcard (`learn::stderr_pattern` matches them as `<`/`>`).
pub const LT: char = '\u{2039}';
pub const GT: char = '\u{203a}';

/// `s` with its `<` and `>` made [`LT`] and [`GT`].
fn neutralise(s: &str) -> String {
    s.replace('<', &LT.to_string())
        .replace('>', &GT.to_string())
}

/// One line with everything that changes between runs masked, its whitespace collapsed.
/// A `<` or `>` of the line itself is kept as [`LT`] or [`GT`]: only a mask writes `<`.
pub fn mask_line(line: &str, job: &JobSpecifics) -> String {
    let mut s = neutralise(line);
    // The job's directories first, longest first, so a folder inside another one is
    // masked whole (and before the numbers in it are).
    // (Neutralised as the line is, to be found in it.)
    let mut dirs: Vec<String> = job
        .dirs
        .iter()
        .map(|d| neutralise(d.trim_end_matches('/')))
        .filter(|d| d.len() > 1 && d.starts_with('/'))
        .collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.len()));
    for d in &dirs {
        s = replace_bounded(&s, d, DIR, |c| c == '/' || !is_path_char(c));
    }
    // Names: whole words only (a user `al` does not mask `total`).
    let mut names: Vec<String> = job
        .names
        .iter()
        .filter(|n| n.len() > 1)
        .map(|n| neutralise(n))
        .collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for n in &names {
        s = replace_bounded(&s, n, NAME, |c| !is_word_char(c));
    }
    for (re, with) in MASKS.iter() {
        s = re.replace_all(&s, *with).into_owned();
    }
    let collapsed = s.split_whitespace().collect::<Vec<_>>().join(" ");
    cut(&collapsed, LINE_CHARS)
}

/// The masks applied after the job's own directories and names, in order: timestamps
/// before the numbers they are made of, hex before decimal.
static MASKS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    let m = |re: &str, with| (Regex::new(re).expect("a signature mask"), with);
    vec![
        // ISO 8601 and `date`-like times: 2026-11-28T23:28:53.123+01:00, 2026/11/28 23:28:53.
        m(
            r"\d{4}[-/]\d{2}[-/]\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?",
            TIME,
        ),
        // Sat Nov 28 23:28:53 (UTC) 2026, as `date` and glibc's ctime print it.
        m(
            r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) +(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} +\d{2}:\d{2}:\d{2}(?: +[A-Z]{2,5})?(?: +\d{4})?",
            TIME,
        ),
        // A time of day alone: 23:28:53, 23:28:53.123.
        m(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b", TIME),
        // 0x-prefixed hex, and words of hex digits with both a digit and a letter a-f
        // (checksums, addresses, uuids' parts): a word of letters alone stays a word (so
        // a checksum that happens to have no digit, rare past a few characters, is kept).
        m(r"\b0[xX][0-9a-fA-F]+\b", HEX),
        m(
            r"\b(?:[0-9a-fA-F]*[0-9][0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*|[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*[0-9][0-9a-fA-F]*)\b",
            HEX,
        ),
        // Numbers, also inside names (node017, shard3, slurm-12345.out).
        m(r"\d+(?:\.\d+)?", NUM),
    ]
});

/// `needle` replaced by `with` wherever the character after it (if any) is a boundary
/// for `boundary` and the one before is not a word character.
fn replace_bounded(s: &str, needle: &str, with: &str, boundary: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(needle) {
        let before_ok = rest[..i]
            .chars()
            .next_back()
            .or_else(|| out.chars().next_back())
            .is_none_or(|c| !is_word_char(c));
        let after = &rest[i + needle.len()..];
        let after_ok = after.chars().next().is_none_or(&boundary);
        if before_ok && after_ok {
            out.push_str(&rest[..i]);
            out.push_str(with);
        } else {
            out.push_str(&rest[..i + needle.len()]);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-' || c == '.'
}

fn is_path_char(c: char) -> bool {
    is_word_char(c) || c == '/'
}

fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> JobSpecifics<'static> {
        JobSpecifics {
            dirs: vec!["/home/alice", "/scratch/alice/run-17"],
            names: vec!["alice", "train-big", "gpu017"],
        }
    }

    fn bob() -> JobSpecifics<'static> {
        JobSpecifics {
            dirs: vec!["/home/bob", "/work/bob/exp2"],
            names: vec!["bob", "finetune", "node-a3"],
        }
    }

    #[test]
    fn the_same_failure_for_two_users_is_one_signature() {
        let a = "epoch 12 step 4000 loss 0.313\n\
                 [2026-11-28T23:28:53.123Z] loading /scratch/alice/run-17/ckpt/shard3.pt on gpu017\n\
                 RuntimeError: checkpoint shard 3 has an unexpected checksum 3f2a9bc1 (job 81234)\n";
        let b = "[2026-12-01T04:05:06.999Z] loading /work/bob/exp2/ckpt/shard3.pt on node-a3\n\
                 RuntimeError: checkpoint shard 3 has an unexpected checksum 0badc0de (job 5)\n";
        let (sa, sb) = (
            signature("FAILED", "1:0", Some(a), &alice()),
            signature("FAILED", "1:0", Some(b), &bob()),
        );
        // Alice's has one line more before them; the last lines agree.
        let sa_tail = signature(
            "FAILED",
            "1:0",
            Some(a.lines().skip(1).collect::<Vec<_>>().join("\n").as_str()),
            &alice(),
        );
        assert_eq!(sa_tail, sb);
        assert_eq!(
            sb.text,
            "[<time>] loading <dir>/ckpt/shard<n>.pt on <name>\n\
             RuntimeError: checkpoint shard <n> has an unexpected checksum <hex> (job <n>)"
        );
        assert_ne!(sa.id, sb.id, "a different tail is a different signature");
        assert_eq!(sa.id.len(), ID_HEX);
    }

    #[test]
    fn two_different_errors_are_two_signatures() {
        let j = alice();
        let a = signature("FAILED", "1:0", Some("NCCL timeout after 1800 s"), &j);
        let b = signature("FAILED", "1:0", Some("CUDA out of memory"), &j);
        assert_ne!(a.id, b.id);
    }

    #[test]
    fn state_and_exit_code_are_part_of_it() {
        let j = JobSpecifics::default();
        let s = Some("boom");
        let base = signature("FAILED", "1:0", s, &j);
        assert_ne!(base.id, signature("FAILED", "2:0", s, &j).id);
        assert_ne!(base.id, signature("NODE_FAIL", "1:0", s, &j).id);
        assert_eq!(base, signature("FAILED", "1:0", s, &j));
        // No stderr and an empty one are the same: nothing to tell them apart by.
        assert_eq!(
            signature("FAILED", "1:0", None, &j),
            signature("FAILED", "1:0", Some("\n  \n"), &j)
        );
    }

    #[test]
    fn the_hash_fields_cannot_run_into_each_other() {
        assert_ne!(id_of("FAILED", "1:0x", ""), id_of("FAILED", "1:0", "x"));
    }

    #[test]
    fn timestamps_in_their_usual_forms() {
        let j = JobSpecifics::default();
        for (line, want) in [
            ("at 2026-11-28T23:28:53Z x", "at <time> x"),
            ("at 2026-11-28T23:28:53.5+01:00 x", "at <time> x"),
            ("at 2026/11/28 23:28:53 x", "at <time> x"),
            ("at 2026-11-28 x", "at <time> x"),
            ("Sat Nov 28 23:28:53 UTC 2026: x", "<time>: x"),
            ("Sat Nov  8 23:28:53 2026: x", "<time>: x"),
            ("[23:28:53.123] x", "[<time>] x"),
            (
                "slurmstepd: error: *** JOB 123 ON n1 CANCELLED AT 2026-11-28T23:28:53 ***",
                "slurmstepd: error: *** JOB <n> ON n<n> CANCELLED AT <time> ***",
            ),
        ] {
            assert_eq!(mask_line(line, &j), want, "{line}");
        }
    }

    #[test]
    fn hex_numbers_and_words() {
        let j = JobSpecifics::default();
        for (line, want) in [
            ("at 0x7ffd1234 x", "at <hex> x"),
            ("sha 3f2a9bc1d0e4 x", "sha <hex> x"),
            (
                "uuid 123e4567-e89b-12d3-a456-426614174000",
                "uuid <hex>-<hex>-<hex>-<hex>-<n>",
            ),
            ("decade added facade", "decade added facade"),
            ("rank 7 of 64, 3.25 GiB", "rank <n> of <n>, <n> GiB"),
            ("slurm-12345_7.out", "slurm-<n>_<n>.out"),
            ("  many   spaces\there  ", "many spaces here"),
        ] {
            assert_eq!(mask_line(line, &j), want, "{line}");
        }
    }

    #[test]
    fn the_jobs_directories_are_masked_at_path_boundaries_only() {
        let j = JobSpecifics {
            dirs: vec!["/home/al/", "/home/al/proj"],
            names: vec!["al"],
        };
        for (line, want) in [
            ("open /home/al/proj/x.dat failed", "open <dir>/x.dat failed"),
            ("open /home/al/y failed", "open <dir>/y failed"),
            ("in /home/al", "in <dir>"),
            ("open /home/alan/y", "open /home/alan/y"),
            ("open /data/home/al/y", "open /data/home/<name>/y"),
            ("total for al: al's", "total for <name>: <name>'s"),
            ("'/home/al/proj'", "'<dir>'"),
            ("cannot write /tmp/al/x", "cannot write /tmp/<name>/x"),
        ] {
            assert_eq!(mask_line(line, &j), want, "{line}");
        }
    }

    #[test]
    fn only_the_last_lines_count_and_long_lines_are_cut() {
        let j = JobSpecifics::default();
        let many: String = (0..10)
            .map(|i| format!("line {}\n", "x".repeat(i + 1)))
            .collect();
        let t = mask_tail(&many, &j);
        assert_eq!(t.lines().count(), TAIL_LINES);
        assert!(t.ends_with(&format!("line {}", "x".repeat(10))));
        let long = "y".repeat(1000);
        assert_eq!(mask_line(&long, &j).chars().count(), LINE_CHARS);
        // Not on a char boundary: a multi-byte character is never split.
        let wide = "é".repeat(1000);
        assert_eq!(mask_line(&wide, &j).chars().count(), LINE_CHARS);
    }

    proptest::proptest! {
        /// Whatever the job ids, addresses and timestamps in a line, its mask is the same.
        #[test]
        fn what_changes_between_runs_does_not_change_it(
            n in 0u64..u64::MAX, m in 0u64..u64::MAX, r in 0u32..100_000,
            y in 1970u32..2100, mo in 1u32..13, d in 1u32..29,
            h in 0u32..24, mi in 0u32..60, s in 0u32..60,
        ) {
            let line = format!(
                "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02} job {n} at {m:#x} rank{r}: failed"
            );
            proptest::prop_assert_eq!(
                mask_line(&line, &JobSpecifics::default()),
                "<time> job <n> at <hex> rank<n>: failed"
            );
        }
    }
}
