//! The unit tests of sbatch_args, in the order of its files: the option table, getopt,
//! the `#SBATCH` lexer, the submission, the rebuild for a retry.

use super::options::{Arg, OPTIONS};
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
    let cmd = parse_script("#!/bin/sh\n#SBATCH --mem-per-cpu=1G\n#SBATCH -t 10\ntrue\n").unwrap();
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
        signal: None,
    };
    let cases: &[(&[&str], &Overrides, &[&str])] = &[
        (
            // A continuing job's warning is added; a user's own --signal is kept.
            &["job.sh"],
            &Overrides {
                signal: Some("B:USR1@90".into()),
                ..Default::default()
            },
            &["--signal=B:USR1@90", "--parsable", "job.sh"],
        ),
        (
            &["--signal=USR2@30", "job.sh"],
            &Overrides {
                signal: Some("B:USR1@90".into()),
                ..Default::default()
            },
            &["--signal=USR2@30", "--parsable", "job.sh"],
        ),
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
