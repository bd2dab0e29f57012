//! Property tests for the parsers of Slurm output and of sbatch command lines.
//!
//! Two kinds of properties:
//! - hostile input (arbitrary bytes made into lossy strings, NUL, `|`, newlines, huge
//!   lines) never panics and never yields a row that was not in the input;
//! - well-formed input generated from known values reads back as exactly those values
//!   (sacct and squeue rows, memory sizes, durations, array specs, `#SBATCH` lines), and
//!   `rebuild` keeps every token it does not override byte for byte and in order.
//!
//! The case counts are kept small so that the whole file runs in a few seconds under
//! `cargo test`; the cargo-fuzz targets in `fuzz/` are for long runs.

use proptest::prelude::*;
use proptest::sample::select;
use slurm_supervisor::domain::sbatch_args::{
    self, format_array_list, parse_array_spec, rebuild, script_directives, Overrides,
};
use slurm_supervisor::slurm::parse::{
    parse_duration_secs, parse_mem_bytes, parse_pending, parse_sacct, parse_sbatch_parsable,
    parse_scontrol_record, parse_scontrol_record_strict, parse_squeue, parse_tags, MAX_ERROR_LINE,
};
use slurm_supervisor::slurm::types::{ExitCode, JobState, SacctRow, SqueueRow, TagRow};

/// `cases` per property, unless `PROPTEST_CASES` asks for a longer run.
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        // A failure is shrunk, but not for ever: CI must stay fast.
        max_shrink_iters: 2_000,
        // Failures are reported with their minimal input; interesting ones become plain
        // tests below rather than a regressions file.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---- hostile text ------------------------------------------------------------------

/// Text as a Slurm command could print it on a bad day: arbitrary bytes (non-UTF-8 ones
/// become U+FFFD, as `String::from_utf8_lossy` makes them), biased towards the bytes that
/// mean something to the parsers.
fn hostile_text() -> impl Strategy<Value = String> {
    let byte = prop_oneof![
        3 => any::<u8>(),
        2 => select(b"|\n\r\0 :;-_.+[]%,=#'\"\\0123456789KMGTPkmgtpnc".to_vec()),
    ];
    let chunk = prop::collection::vec(byte, 0..200);
    prop_oneof![
        // Short junk.
        4 => chunk.clone().prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        // Junk glued to real-looking rows, so that the deeper paths are reached too.
        4 => (chunk.clone(), chunk.clone(), select(REAL_LINES)).prop_map(|(a, b, real)| {
            format!("{}{real}{}", String::from_utf8_lossy(&a), String::from_utf8_lossy(&b))
        }),
        // A huge line: one chunk repeated (up to ~400 KB).
        1 => (chunk, 1..2_000usize).prop_map(|(b, n)| String::from_utf8_lossy(&b).repeat(n)),
    ]
}

/// Real rows (docs/slurm-observed.md and the unit tests) and near misses.
const REAL_LINES: &[&str] = &[
    "117|117|COMPLETED|0:0|n1|269648K|100M|00:01:00|00:01:27|debug|1000|1795611422",
    "117.batch|117.batch|OUT_OF_MEMORY|0:125|n1|4G||||||",
    "14_[3-10%2]|14|PENDING|0:0|None assigned||1G|Partition_Limit|00:00:00|debug|a|b|",
    "9|9|CANCELLED by 1000|0:15|n[1-2]|1.5G|100Mn|1-00:00:00|1-02:03:04|long|1000|1795611422",
    "117|117|RUNNING|None|n1|1000",
    "14_1|15|PENDING|JobArrayTaskLimit||1000",
    "117|117|COMPLETED|0:0|n1|269648K|100M|00:01:00|00:01:27|debug|1000|1795611422",
    "117.batch|117.batch|OUT_OF_MEMORY|0:125|n1|4G|||||||",
    "100|100|RUNNING|None|n1|1000",
    "14_1|15|PENDING|JobArrayTaskLimit||1000",
    "123;cluster",
    "JobId=166 JobName=my job UserId=root(0) TimeLimit=00:05:00 Command=/x a b Power= ",
    "99999999999999999999.999999999P",
    "18446744073709551615-23:59:59",
];

fn check_parsed_rows_come_from_input<T>(
    input: &str,
    rows: &[T],
    errors: &[slurm_supervisor::slurm::parse::RowError],
) {
    let lines = input.split('\n').count();
    for e in errors {
        assert!(e.line_no >= 1 && e.line_no <= lines, "{e:?}");
        assert!(e.line.len() <= MAX_ERROR_LINE + 3, "error line not cut");
    }
    assert!(rows.len() + errors.len() <= lines);
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn slurm_output_parsers_never_panic(text in hostile_text()) {
        let p = parse_sacct(&text);
        check_parsed_rows_come_from_input(&text, &p.rows, &p.errors);
        let q = parse_squeue(&text);
        check_parsed_rows_come_from_input(&text, &q.rows, &q.errors);
        if let Ok(id) = parse_sbatch_parsable(&text) {
            prop_assert!(!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()), "{id:?}");
        }
        for (k, v) in parse_scontrol_record(&text) {
            let key = format!("{k}=");
            prop_assert!(!k.is_empty() && text.contains(&key));
            prop_assert!(text.contains(v.as_str()));
        }
        for field in text.split(['|', '\n', ' ']).take(500) {
            let _ = parse_mem_bytes(field);
            let _ = parse_duration_secs(field);
        }
        let _ = parse_mem_bytes(&text);
        let _ = parse_duration_secs(&text);
    }

    #[test]
    fn sbatch_parsers_never_panic(
        argv in prop::collection::vec(hostile_token(), 0..12),
        script in hostile_text(),
        spec in prop_oneof![hostile_text(), "[0-9,:%-]{0,30}"],
        ov in overrides(),
    ) {
        if let Ok(cmd) = sbatch_args::parse(&argv) {
            let checked = sbatch_args::check_overrides(&cmd, &ov);
            let out = rebuild(&cmd, &ov);
            // What check_overrides accepts reads back with the same script arguments.
            if checked.is_ok() {
                let again = sbatch_args::parse(&out).expect("a rebuilt command line parses");
                prop_assert_eq!(again.script_args, cmd.script_args);
            }
        }
        let tokens = script_directives(&script);
        let _ = sbatch_args::parse_directives(&tokens);
        let _ = sbatch_args::try_script_directives(&script);
        let _ = sbatch_args::parse_script(&script);
        let _ = sbatch_args::Submitted::read(&argv, Some(script.as_bytes()));
        if let Ok(tasks) = parse_array_spec(&spec) {
            prop_assert!(!tasks.is_empty() && tasks.len() <= sbatch_args::MAX_ARRAY_TASKS);
            prop_assert!(tasks.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates");
            prop_assert!(tasks.iter().all(|&t| t <= sbatch_args::MAX_ARRAY_INDEX));
        }
        let _ = sbatch_args::array_throttle(&spec);
    }
}

/// One argv token: hostile text, or something option-shaped.
fn hostile_token() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => "[-a-zA-Z=:]{0,12}",
        1 => select(&["--", "-", ":", "--wrap", "--wrap=x", "-HJ", "--par", "--mem", "-k", "--nice"][..])
            .prop_map(str::to_string),
        1 => prop::collection::vec(any::<u8>(), 0..20)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

// ---- sacct and squeue round trips -------------------------------------------------

/// Free text without a line break: node lists, reasons, partitions.
fn field_text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_\\[\\],() .-]{0,16}"
}

/// A comment: user text, with `|`, quotes, `$()`, tabs and non-ASCII characters, but no
/// line break (sacct would print one as a line break, which no parser can undo).
fn comment_text() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just(String::new()),
        1 => "ssv-[0-9a-f]{8}-L[0-9]{1,5}-c[0-9]{1,5}\\.[0-9]{1,2}",
        4 => "[^\n\r]{0,40}",
        2 => "[|a b'\"$()`;\t|]{0,20}",
    ]
    // squeue's `(null)` is its way of saying "no comment", a known ambiguity.
    .prop_filter("not squeue's no-comment marker", |c| c != "(null)")
}

fn job_id() -> impl Strategy<Value = String> {
    "[1-9][0-9]{0,9}(_[0-9]{1,4}|_\\[[0-9]{1,3}-[0-9]{1,3}(%[0-9])?\\]|\\+[0-9])?"
}

fn step_suffix() -> impl Strategy<Value = Option<String>> {
    prop::option::weighted(
        0.3,
        select(&["batch", "extern", "0", "12", "interactive"][..]).prop_map(str::to_string),
    )
}

fn state() -> impl Strategy<Value = (JobState, Option<u32>, String)> {
    prop_oneof![
        4 => select(&JobState::ALL[..]).prop_map(|(s, t)| (s, None, t.to_string())),
        1 => any::<u32>().prop_map(|uid| (JobState::Cancelled, Some(uid), format!("CANCELLED by {uid}"))),
    ]
}

/// A memory size as sacct prints it, and its value in bytes.
fn mem() -> impl Strategy<Value = (String, Option<u64>)> {
    prop_oneof![
        1 => Just((String::new(), None)),
        1 => Just(("0".to_string(), Some(0))),
        6 => (0u64..10_000_000, select(&[("K", 10u32), ("M", 20), ("G", 30), ("T", 40)][..]), select(&["", "n", "c"][..]))
            .prop_map(|(n, (unit, shift), suffix)| (format!("{n}{unit}{suffix}"), Some(n << shift))),
    ]
}

fn hms(secs: u64) -> String {
    let (d, rem) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (rem / 3_600, rem % 3_600 / 60, rem % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// A duration as sacct prints it, and its value (`None` for blank / unlimited).
fn duration(zero_is_unlimited: bool) -> impl Strategy<Value = (String, Option<u64>)> {
    prop_oneof![
        1 => Just((String::new(), None)),
        1 => select(&["UNLIMITED", "Partition_Limit", "INFINITE"][..]).prop_map(|s| (s.to_string(), None)),
        6 => (0u64..400 * 86_400).prop_map(move |s| {
            (hms(s), if s == 0 && zero_is_unlimited { None } else { Some(s) })
        }),
    ]
    .prop_filter("Elapsed is never unlimited", move |(s, v)| {
        zero_is_unlimited || v.is_some() || s.is_empty()
    })
}

#[derive(Debug, Clone)]
struct SacctCase {
    line: String,
    row: SacctRow,
}

fn sacct_case() -> impl Strategy<Value = SacctCase> {
    (
        (job_id(), step_suffix(), "[1-9][0-9]{0,9}", state()),
        (
            prop::option::weighted(0.9, (0i32..=255, 0i32..=127)),
            field_text(),
            mem(),
            mem(),
        ),
        (
            duration(true),
            duration(false),
            "[a-z0-9_]{0,10}",
            prop::option::of(any::<u32>()),
            prop::option::of(0i64..4_000_000_000),
        ),
    )
        .prop_map(
            |(
                (id, step, raw, (state, cancelled_by, state_text)),
                (exit, nodes, (rss, rss_b), (req, req_b)),
                ((tl, tl_s), (el, el_s), partition, uid, submit),
            )| {
                // A blank ExitCode is accepted only on a step row.
                let exit = if step.is_none() {
                    exit.or(Some((0, 0)))
                } else {
                    exit
                };
                let (job_id, job_id_raw) = match &step {
                    Some(s) => (format!("{id}.{s}"), format!("{raw}.{s}")),
                    None => (id, raw),
                };
                let exit_text = exit.map(|(c, s)| format!("{c}:{s}")).unwrap_or_default();
                let line = [
                    job_id.as_str(),
                    &job_id_raw,
                    &state_text,
                    &exit_text,
                    &nodes,
                    &rss,
                    &req,
                    &tl,
                    &el,
                    &partition,
                    &uid.map(|u| u.to_string()).unwrap_or_default(),
                    &submit.map(|t| t.to_string()).unwrap_or_default(),
                ]
                .join("|");
                let (code, signal) = exit.unwrap_or((0, 0));
                SacctCase {
                    line,
                    row: SacctRow {
                        job_id,
                        job_id_raw,
                        state,
                        cancelled_by,
                        exit_code: ExitCode { code, signal },
                        node_list: nodes,
                        max_rss_bytes: rss_b,
                        req_mem_bytes: req_b,
                        timelimit_secs: tl_s,
                        elapsed_secs: el_s,
                        partition,
                        restarts: None,
                        uid,
                        submit,
                    },
                }
            },
        )
}

fn squeue_case() -> impl Strategy<Value = (String, SqueueRow)> {
    (
        job_id(),
        "[1-9][0-9]{0,9}",
        select(&JobState::ALL[..]),
        field_text(),
        field_text(),
        any::<u32>(),
    )
        .prop_map(|(id, raw, (state, text), reason, nodes, uid)| {
            let line = [id.as_str(), &raw, text, &reason, &nodes, &uid.to_string()].join("|");
            let row = SqueueRow {
                job_id: id,
                job_id_raw: raw,
                state,
                reason,
                node_list: nodes,
                uid,
            };
            (line, row)
        })
}

fn tag_case() -> impl Strategy<Value = (String, TagRow)> {
    (
        job_id(),
        "[1-9][0-9]{0,9}",
        prop_oneof![3 => comment_text(), 1 => Just("(null)".to_string())],
    )
        .prop_map(|(id, raw, comment)| {
            let line = [id.as_str(), &raw, &comment].join("|");
            let row = TagRow {
                job_id: id,
                job_id_raw: raw,
                comment: if comment == "(null)" {
                    String::new()
                } else {
                    comment
                },
            };
            (line, row)
        })
}

/// Text a user can put in a comment, a job name, a working directory or an output path
/// (which squeue and sacct print as given): any byte but NUL, newlines and `|` included,
/// and lines copied from real rows, so that it can look like rows of its own.
fn user_text() -> impl Strategy<Value = String> {
    let byte = prop_oneof![
        3 => 1u8..=255,
        2 => select(b"|\n\r :;-_.+[]%,=#'\"\\0123456789".to_vec()),
    ];
    prop_oneof![
        2 => prop::collection::vec(byte, 0..120).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        2 => (select(REAL_LINES), select(REAL_LINES)).prop_map(|(a, b)| format!("x\n{a}\n{b}")),
        1 => (select(REAL_LINES), prop::collection::vec(1u8..=255, 0..40))
            .prop_map(|(a, b)| format!("{}\n{a}", String::from_utf8_lossy(&b))),
    ]
}

/// Joins lines as a command prints them, with the odd blank line and CRLF.
fn join_lines(lines: &[String], crlf: bool, blank_every: usize) -> String {
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        if blank_every > 0 && i % blank_every == 0 {
            out.push('\n');
        }
        out.push_str(l);
        out.push_str(if crlf { "\r\n" } else { "\n" });
    }
    out
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn sacct_rows_round_trip(
        cases in prop::collection::vec(sacct_case(), 0..8),
        crlf in any::<bool>(),
        blank_every in 0usize..4,
    ) {
        let lines: Vec<String> = cases.iter().map(|c| c.line.clone()).collect();
        let p = parse_sacct(&join_lines(&lines, crlf, blank_every));
        prop_assert!(p.errors.is_empty(), "{:?}", p.errors);
        let want: Vec<SacctRow> = cases.into_iter().map(|c| c.row).collect();
        prop_assert_eq!(p.rows, want);
    }

    #[test]
    fn squeue_rows_round_trip(
        cases in prop::collection::vec(squeue_case(), 0..8),
        crlf in any::<bool>(),
        blank_every in 0usize..4,
    ) {
        let lines: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
        let q = parse_squeue(&join_lines(&lines, crlf, blank_every));
        prop_assert!(q.errors.is_empty(), "{:?}", q.errors);
        let want: Vec<SqueueRow> = cases.into_iter().map(|c| c.1).collect();
        prop_assert_eq!(q.rows, want);
    }

    #[test]
    fn tag_rows_round_trip(
        cases in prop::collection::vec(tag_case(), 0..8),
        crlf in any::<bool>(),
        blank_every in 0usize..4,
    ) {
        let lines: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
        let q = parse_tags(&join_lines(&lines, crlf, blank_every));
        prop_assert!(q.errors.is_empty(), "{:?}", q.errors);
        let want: Vec<TagRow> = cases.into_iter().map(|c| c.1).collect();
        prop_assert_eq!(q.rows, want);
    }

    /// What a user writes never reaches the rows the poll reads: with the poll's formats
    /// (no comment, job name or path in them) the user's text is not in the output at all,
    /// so this is the other side of that, the tag lookups: a comment holding every byte a
    /// user can write, newlines and copies of real rows included, yields rows only for
    /// lines it makes, and each such row is a candidate whose job id a user chose.
    /// The row of the real job (the line the comment starts on) always reads as that job.
    #[test]
    fn a_users_text_in_a_tag_lookup_is_confined_to_its_own_lines(
        id in "[1-9][0-9]{0,6}",
        text in user_text(),
    ) {
        let out = format!("{id}|{id}|{text}\n");
        let p = parse_tags(&out);
        // The first line is the real job's: its id is Slurm's, whatever follows.
        let first = text.split('\n').next().unwrap_or("");
        if !first.contains('\r') {
            prop_assert_eq!(&p.rows[0].job_id, &id);
        }
        // Every other row came from a line of the user's text.
        let lines = out.split('\n').count() - 1;
        prop_assert!(p.rows.len() + p.errors.len() <= lines);
    }

    /// A `scontrol show job -o` record with a user's text in its name, comment and paths
    /// is either refused (a key named twice) or keeps the keys Slurm wrote: the owner read
    /// from it is never one the user wrote. (`adopt` takes the owner from squeue anyway.)
    #[test]
    fn a_users_text_in_a_scontrol_record_never_changes_its_owner(
        name in user_text(),
        comment in user_text(),
        dir in user_text(),
    ) {
        // scontrol -o prints one line a job; a line break is refused before this parser,
        // so here it stands for a blank, which can start a key.
        let one = |t: &str| t.replace(['\n', '\r'], " ");
        let (name, comment, dir) = (one(&name), one(&comment), one(&dir));
        let line = format!(
            "JobId=5 JobName={name} UserId=bob(1002) GroupId=bob(1002) JobState=RUNNING Comment={comment} WorkDir={dir} StdOut={dir}/out"
        );
        if let Ok(m) = parse_scontrol_record_strict(&line) {
            prop_assert_eq!(m.get("UserId").map(String::as_str), Some("bob(1002)"));
            prop_assert_eq!(m.get("JobId").map(String::as_str), Some("5"));
        }
    }

    /// The pending-jobs query's last field is Slurm's rendering of a dependency; a row is
    /// never made of less than four fields.
    #[test]
    fn pending_rows_have_their_four_fields(text in user_text()) {
        let p = parse_pending(&text);
        for r in &p.rows {
            prop_assert!(!r.job_id.is_empty() && !r.job_id_raw.is_empty());
        }
    }

    /// A bad row among good ones costs only itself.
    #[test]
    fn a_bad_row_does_not_hide_good_ones(
        good in prop::collection::vec(sacct_case(), 1..5),
        bad in "[^\n]{0,60}",
        at in 0usize..5,
    ) {
        let mut lines: Vec<String> = good.iter().map(|c| c.line.clone()).collect();
        let at = at.min(lines.len());
        lines.insert(at, bad.clone());
        let p = parse_sacct(&lines.join("\n"));
        let want: Vec<SacctRow> = good.into_iter().map(|c| c.row).collect();
        // The junk line either is an error or (rarely) a valid row of its own.
        let mut rows = p.rows.clone();
        if rows.len() == want.len() + 1 {
            rows.remove(at);
        } else {
            prop_assert_eq!(p.errors.len() + usize::from(bad.trim().is_empty()), 1, "{:?}", p.errors);
        }
        prop_assert_eq!(rows, want);
    }

    #[test]
    fn sbatch_parsable_round_trip(id in 1u32.., cluster in prop::option::of("[a-z0-9_-]{1,10}"), pad in "[ \t\n]{0,3}") {
        let out = match &cluster {
            Some(c) => format!("{pad}{id};{c}{pad}\n"),
            None => format!("{pad}{id}{pad}\n"),
        };
        prop_assert_eq!(parse_sbatch_parsable(&out), Ok(id.to_string()));
    }

    #[test]
    fn memory_sizes_round_trip(n in 0u64..(1 << 40), unit in select(&[("K", 10u32), ("M", 20), ("G", 30), ("T", 40), ("P", 50), ("", 20)][..]), b in any::<bool>()) {
        let (u, shift) = unit;
        let text = format!("{n}{u}{}", if b && !u.is_empty() { "B" } else { "" });
        let want = u64::try_from(u128::from(n) << shift).ok();
        prop_assert_eq!(parse_mem_bytes(&text), want, "{}", text);
    }

    #[test]
    fn durations_round_trip(secs in 0u64..10_000 * 86_400) {
        prop_assert_eq!(parse_duration_secs(&hms(secs)), Some(secs));
        let minutes = secs / 60;
        prop_assert_eq!(parse_duration_secs(&minutes.to_string()), Some(minutes * 60));
    }

    #[test]
    fn scontrol_records_round_trip(
        fields in prop::collection::btree_map(
            "[A-Z][A-Za-z/:_]{0,12}",
            prop_oneof![Just(String::new()), "[a-z0-9()/,.:-]{1,12}( [a-z0-9]{1,5}){0,2}"],
            0..10,
        ),
    ) {
        let line = fields.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        prop_assert_eq!(parse_scontrol_record(&line), fields);
    }
}

// ---- sbatch command lines ---------------------------------------------------------

/// What an option is, for what `rebuild` does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Mem,
    Time,
    Exclude,
    Array,
    Partition,
    Comment,
    Parsable,
    Other,
}

#[derive(Debug, Clone)]
struct GenOpt {
    kind: Kind,
    tokens: Vec<String>,
}

/// Any value, including ones that look like options, shell syntax or line breaks.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9_.,:/%=\\[\\]-]{0,12}",
        1 => "[-$()`'\" \n\t;|&*?~#\\\\]{0,12}",
        1 => Just("--".to_string()),
        1 => Just("--hold".to_string()),
        1 => "[^\0]{0,10}",
    ]
}

/// One option in one of the spellings getopt accepts (never a combined short group).
fn gen_opt() -> impl Strategy<Value = GenOpt> {
    // (kind, long spellings, short letter or ' ', takes a value)
    const TABLE: &[(Kind, &[&str], char, bool)] = &[
        (Kind::Mem, &["mem"], ' ', true),
        (Kind::Mem, &["mem-per-cpu", "mem-per-c"], ' ', true),
        (Kind::Mem, &["mem-per-gpu"], ' ', true),
        (Kind::Time, &["time"], 't', true),
        (Kind::Exclude, &["exclude", "exclud"], 'x', true),
        (Kind::Array, &["array", "arr"], 'a', true),
        (Kind::Partition, &["partition", "part"], 'p', true),
        (Kind::Comment, &["comment", "comm"], ' ', true),
        (Kind::Parsable, &["parsable", "parsa"], ' ', false),
        (Kind::Other, &["job-name"], 'J', true),
        (Kind::Other, &["output"], 'o', true),
        (Kind::Other, &["export"], ' ', true),
        (Kind::Other, &["time-min"], ' ', true),
        (Kind::Other, &["hold"], 'H', false),
        (Kind::Other, &["requeue"], ' ', false),
        (Kind::Other, &["quiet"], 'Q', false),
    ];
    (select(TABLE), 0usize..4, 0usize..3, value()).prop_map(|(entry, form, spelling, v)| {
        let (kind, longs, short, takes) = entry;
        let long = longs[spelling % longs.len()];
        let has_short = short != ' ';
        let tokens = match (takes, form) {
            (false, f) if f % 2 == 1 && has_short => vec![format!("-{short}")],
            (false, _) => vec![format!("--{long}")],
            (true, 0) => vec![format!("--{long}={v}")],
            (true, 1) => vec![format!("--{long}"), v],
            (true, 2) if has_short => vec![format!("-{short}"), v],
            // Attached short value: only when not empty (`-t` alone takes the next token).
            (true, 3) if has_short && !v.is_empty() => vec![format!("-{short}{v}")],
            (true, _) => vec![format!("--{long}"), v],
        };
        GenOpt { kind, tokens }
    })
}

/// Options with unknown names are kept too, but only in `--name=value` form.
fn gen_any_opt() -> impl Strategy<Value = GenOpt> {
    prop_oneof![
        6 => gen_opt(),
        1 => ("x-[a-z]{1,8}", value()).prop_map(|(n, v)| GenOpt { kind: Kind::Other, tokens: vec![format!("--{n}={v}")] }),
        1 => select(&["--nice=5", "--exclusive", "--exclusive=user", "-k", "-kfoo", "--propagate=ALL"][..])
            .prop_map(|t| GenOpt { kind: Kind::Other, tokens: vec![t.to_string()] }),
    ]
}

fn script_name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_./ $'\"()]{1,16}".prop_filter("a script name, not an option", |s| {
        !s.starts_with('-') && s != ":"
    })
}

fn overrides() -> impl Strategy<Value = Overrides> {
    (
        prop::option::of(1u64..1_000_000),
        prop::option::of("[0-9]{1,2}:[0-9]{2}:[0-9]{2}"),
        prop::collection::vec("[a-z]{1,3}[0-9]{1,2}", 0..3),
        prop::option::of("[0-9]{1,3}(,[0-9]{1,3}){0,3}"),
        prop::option::of("[a-z]{1,8}"),
        prop::option::of("[^\0]{0,20}"),
        prop::option::of(prop_oneof![
            "/state/scripts/L[0-9]/job\\.sh",
            "-[a-z]{1,4}\\.sh"
        ]),
    )
        .prop_map(
            |(mem_mb, time_limit, exclude, array, partition, comment, script_path)| Overrides {
                mem_mb,
                time_limit,
                exclude,
                array,
                partition,
                comment,
                script_path,
                dependency: None,
                hold: false,
                mail_type: None,
                signal: None,
            },
        )
}

fn replaced(kind: Kind, o: &Overrides) -> bool {
    match kind {
        Kind::Mem => o.mem_mb.is_some(),
        Kind::Time => o.time_limit.is_some(),
        Kind::Exclude => !o.exclude.is_empty(),
        Kind::Array => o.array.is_some(),
        Kind::Partition => o.partition.is_some(),
        Kind::Comment => o.comment.is_some(),
        Kind::Parsable | Kind::Other => false,
    }
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn rebuild_keeps_what_it_does_not_override(
        opts in prop::collection::vec(gen_any_opt(), 0..10),
        script in prop::option::of(script_name()),
        dashdash in any::<bool>(),
        args in prop::collection::vec(prop_oneof![value(), hostile_token()], 0..6),
        ov in overrides(),
    ) {
        let mut argv: Vec<String> = opts.iter().flat_map(|o| o.tokens.clone()).collect();
        if let Some(s) = &script {
            if dashdash {
                argv.push("--".into());
            }
            argv.push(s.clone());
            argv.extend(args.iter().cloned());
        }
        let cmd = sbatch_args::parse(&argv).expect("generated command lines parse");
        prop_assert_eq!(cmd.options.len(), opts.len());
        prop_assert_eq!(&cmd.script, &script);
        let args = if script.is_some() { args } else { Vec::new() };
        prop_assert_eq!(&cmd.script_args, &args);

        let out = rebuild(&cmd, &ov);

        // Every option that is not overridden, with its exact tokens, in its order (only
        // the first --parsable is kept) ...
        let mut kept: Vec<String> = Vec::new();
        let mut parsable = false;
        for o in &opts {
            if o.kind == Kind::Parsable {
                if parsable {
                    continue;
                }
                parsable = true;
            }
            if !replaced(o.kind, &ov) {
                kept.extend(o.tokens.iter().cloned());
            }
        }
        prop_assert_eq!(&out[..kept.len().min(out.len())], &kept[..]);
        // ... then only the supervisor's own `--name=value` tokens ...
        let script_out = ov.script_path.clone().or(script.clone());
        let tail_len = script_out.as_ref().map_or(0, |s| 1 + usize::from(s.starts_with('-'))) + args.len();
        prop_assert!(out.len() >= kept.len() + tail_len);
        let added = &out[kept.len()..out.len() - tail_len];
        for t in added {
            prop_assert!(
                ["--mem=", "--time=", "--exclude=", "--array=", "--partition=", "--comment="]
                    .iter()
                    .any(|p| t.starts_with(p)) || t == "--parsable",
                "unexpected token {:?} in {:?}", t, out
            );
        }
        // ... then the script and its arguments, untouched.
        let tail = &out[out.len() - tail_len..];
        if let Some(s) = &script_out {
            let at = usize::from(s.starts_with('-'));
            prop_assert_eq!(&tail[at], s);
            prop_assert_eq!(&tail[at + 1..], &args[..]);
        }
        // And sbatch would read it back the same way.
        let again = sbatch_args::parse(&out).expect("the rebuilt command line parses");
        prop_assert_eq!(again.options.iter().filter(|o| o.name == "parsable").count(), 1);
        prop_assert_eq!(&again.script, &script_out);
        prop_assert_eq!(&again.script_args, &args);
        if let Some(c) = &ov.comment {
            prop_assert_eq!(again.get("comment"), Some(c.as_str()));
        }
    }

    #[test]
    fn array_lists_round_trip(tasks in prop::collection::vec(
        prop_oneof![0u32..100, 0u32..=sbatch_args::MAX_ARRAY_INDEX], 1..60)
    ) {
        let mut want = tasks.clone();
        want.sort_unstable();
        want.dedup();
        let spec = format_array_list(&tasks);
        prop_assert_eq!(parse_array_spec(&spec).expect("a formatted list parses"), want);
    }

    #[test]
    fn array_ranges_with_steps(first in 0u32..5_000, len in 0u32..5_000, step in 1u32..50, throttle in prop::option::of(0u32..100)) {
        let last = first + len;
        let mut spec = format!("{first}-{last}:{step}");
        if let Some(t) = throttle {
            spec.push_str(&format!("%{t}"));
        }
        let want: Vec<u32> = (first..=last).step_by(step as usize).collect();
        prop_assert_eq!(parse_array_spec(&spec).unwrap(), want);
        prop_assert_eq!(sbatch_args::array_throttle(&spec), throttle);
    }

    /// `#SBATCH` lines written with plain and quoted tokens read back as those tokens.
    #[test]
    fn script_directives_round_trip(
        lines in prop::collection::vec(prop::collection::vec(
            prop_oneof![
                3 => "[a-zA-Z0-9=_.,:/%-]{1,12}".prop_map(|t| (t.clone(), t)),
                1 => "[a-zA-Z0-9 =_.,:/%-]{1,12}".prop_map(|t| (format!("\"{t}\""), t)),
                1 => "[a-zA-Z0-9 =_.$,:/%-]{1,12}".prop_map(|t| (format!("'{t}'"), t)),
            ], 0..4), 0..6),
        body in "[a-z]{1,10}",
    ) {
        let mut script = String::from("#!/bin/bash\n");
        let mut want = Vec::new();
        for toks in &lines {
            script.push_str("#SBATCH");
            for (written, read) in toks {
                script.push(' ');
                script.push_str(written);
                want.push(read.clone());
            }
            script.push_str(" # a comment\n\n");
        }
        script.push_str(&format!("{body}\n#SBATCH --never-read\n"));
        prop_assert_eq!(script_directives(&script), want);
    }
}

/// Inputs the properties above would rarely generate, kept as plain regression cases.
#[test]
fn extreme_inputs_do_not_panic() {
    let huge_comment = format!("1|1|{}", "|".repeat(1 << 20));
    let p = parse_tags(&huge_comment);
    assert_eq!(p.rows.len(), 1);
    assert_eq!(p.rows[0].comment.len(), 1 << 20);
    // A poll row with anything more than its twelve fields is not a row.
    let extra = format!(
        "1|1|COMPLETED|0:0|n1||1G|00:10:00|00:00:01|debug|1000|1795611422|{}",
        "|".repeat(1 << 20)
    );
    let p = parse_sacct(&extra);
    assert_eq!((p.rows.len(), p.errors.len()), (0, 1));
    for s in [
        "18446744073709551615.999999999P",
        "18446744073709551615P",
        "99999999999999999999.999999999P",
        "18446744073709551615.9T",
        "0.999999999P",
    ] {
        let _ = parse_mem_bytes(s);
    }
    for s in [
        "18446744073709551615-23:59:59",
        "213503982334601-07:00:16",
        "0-18446744073709551615:0:0",
    ] {
        assert_eq!(parse_duration_secs(s), None, "{s}");
    }
    assert!(parse_array_spec("0-4294967295:4294967295").is_err());
    assert!(parse_array_spec(&"1,".repeat(1_000_000)).is_err());
    let nul = "\0|\0|\0|\0|\0|\0|\0|\0|\0|\0|\0|\0\n".repeat(1000);
    assert_eq!(parse_sacct(&nul).errors.len(), 1000);
    let _ = sbatch_args::parse(&["-".repeat(100_000)]);
    let _ = script_directives(&format!("#SBATCH {}\n", "\"".repeat(100_001)));
}
