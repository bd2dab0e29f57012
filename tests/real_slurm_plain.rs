//! Plain `sbatch`, supervised (docs/plain-sbatch.md), against the real Slurm with the
//! supervisor's cli_filter enabled (scripts/dev-cluster installs it, each cluster with its
//! own spool): an opted-in user's plain `sbatch` of a job that runs out of memory is
//! retried with more memory from the script Slurm kept (the file edited, or gone, by
//! then); one submitted while the daemon is stopped is supervised once it starts; a user
//! who did not opt in, and a submission opted out with `SLURM_SUPERVISOR=off`, are
//! untouched; a note that names another user's job, and a hostile job name and comment,
//! make nothing anyone else's.
//!
//! With the filter, sbatch works as without it: `--parsable` prints the id alone and
//! nothing goes to stderr, `--wait` waits, an array, a heterogeneous job, a
//! `--dependency`, a `--mail-type` and the user's own `--comment` are taken as given. The
//! array and the heterogeneous job are refused whole by the daemon, and their owner sees
//! why (`status JOBID`); what an adopted job's retries lack is in its `history`. The
//! job_submit script marks the opted-in user's jobs (`admin_comment`, in accounting) and
//! no one else's, and a marked job whose note is gone is found by the daemon's listing of
//! marks.
//!
//! One test: one daemon reads a cluster's spool at a time (it is locked; a demo daemon of
//! `scripts/quickstart` left running holds it too: `scripts/quickstart stop`). Its users,
//! ssvpin and ssvpout, are the dev cluster's and no other test's, so no other test's plain
//! sbatch is ever noted.

mod common;

use common::system::{chmod, User};
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const IN: &str = "ssvpin";
const OUT: &str = "ssvpout";

fn spool() -> PathBuf {
    PathBuf::from(format!(
        "/var/spool/slurm-supervisor-dev/{}",
        slurm_version()
    ))
}

/// The notes waiting in the spool that name `job`, in every user's folder.
fn notes_of(job: &str) -> Vec<PathBuf> {
    let folders = std::fs::read_dir(spool().join("notes"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_else(|_| Vec::new());
    folders
        .into_iter()
        .flat_map(|f| std::fs::read_dir(f).into_iter().flatten())
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{job}."))
        })
        .map(|e| e.path())
        .collect()
}

/// One test at a time reads the cluster's spool (one daemon locks it).
static SPOOL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `user`'s sbatch with `env` added to their environment, in `cwd`.
fn sbatch_as(user: &str, cwd: &Path, env: &[&str], args: &[&str]) -> Output {
    Command::new("runuser")
        .args(["-u", user, "--", "env"])
        .args(env)
        .arg(slurm_cmd("sbatch"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

/// A job id from a successful `sbatch --parsable`, which printed nothing else.
fn job_id(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sbatch failed: {stderr}");
    assert!(
        stderr.is_empty(),
        "sbatch printed something on stderr: {stderr}"
    );
    let id = stdout.trim_end_matches('\n');
    assert!(
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
        "--parsable printed {stdout:?}"
    );
    id.to_string()
}

fn ctl_as(user: &str, ctl: &Path, config: &Path, args: &[&str]) -> Output {
    Command::new("runuser")
        .args(["-u", user, "--"])
        .arg(ctl)
        .arg("--config")
        .arg(config)
        .args(args)
        .current_dir("/")
        .output()
        .unwrap()
}

fn supervised(d: &Daemon, job: &str) -> bool {
    d.ctl(&["status", "--json", job]).status.success()
}

fn home_of(d: &Daemon, user: &str) -> PathBuf {
    let home = d.dir.path().join(user);
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("quick.sh"), "#!/bin/bash\nsleep 1\n").unwrap();
    std::fs::write(home.join("fails.sh"), "#!/bin/bash\nexit 3\n").unwrap();
    std::fs::write(home.join("oom.sh"), format!("#!/bin/bash\n{OOM_ONCE}\n")).unwrap();
    chmod(&home, 0o700);
    run(
        "chown",
        &["-R", &format!("{user}:"), home.to_str().unwrap()],
    );
    home
}

/// The held jobs a run made, cancelled when it ends, failed or not (they would wait
/// forever in the shared cluster).
#[derive(Default)]
struct Held(Vec<String>);

impl Held {
    fn hold(&mut self, job: &str) -> String {
        self.0.push(job.to_string());
        job.to_string()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            let _ = slurm("scancel").args(&self.0).output();
        }
    }
}

#[test]
fn plain_sbatch_of_an_opted_in_user_is_supervised_as_them_and_no_one_elses_is() {
    require_slurm();
    let _one = SPOOL.lock().unwrap_or_else(|e| e.into_inner());
    let (pin, pout) = (User::get(IN), User::get(OUT));
    let extra = format!(
        "[notify]\nmail = false\n[plain_sbatch]\nenabled = true\nadmin_comment = true\nspool = {:?}\n",
        spool().display().to_string()
    );
    let mut held = Held::default();
    let (mut d, ctl) = root_daemon("ssv-plain-", &extra);
    let config = d.config.clone();
    let (home_in, home_out) = (home_of(&d, IN), home_of(&d, OUT));

    let out = ctl_as(IN, &ctl, &config, &["opt-in"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(spool().join(format!("optin/{}", pin.uid))).unwrap(),
        "in\n"
    );

    // Out of memory once, under a name and a comment of the user's own; the script file
    // is removed at once, so the retry can only come from what Slurm kept.
    let oom = job_id(&sbatch_as(
        IN,
        &home_in,
        &[],
        &[
            "--parsable",
            "--mem=100M",
            "--job-name=oom | ssv plain",
            "--comment=mine | keep",
            // The supervisor reads the memory kill in the job's stderr.
            "-o",
            "oom.out",
            "oom.sh",
        ],
    ));
    // The file edited at once: a retry that read it would exit 7.
    std::fs::write(home_in.join("oom.sh"), "#!/bin/bash\nexit 7\n").unwrap();
    // And one whose file is removed at once: a retry that read it would not be.
    std::fs::write(
        home_in.join("gone.sh"),
        format!("#!/bin/bash\n{OOM_ONCE}\n"),
    )
    .unwrap();
    run(
        "chown",
        &[&format!("{IN}:"), home_in.join("gone.sh").to_str().unwrap()],
    );
    let gone = job_id(&sbatch_as(
        IN,
        &home_in,
        &[],
        &["--parsable", "--mem=100M", "-o", "gone.out", "gone.sh"],
    ));
    std::fs::remove_file(home_in.join("gone.sh")).unwrap();

    // Not opted in: the filter leaves no note and the job as it was.
    let theirs = job_id(&sbatch_as(
        OUT,
        &home_out,
        &[],
        &["--parsable", "-o", "/dev/null", "quick.sh"],
    ));
    assert!(
        notes_of(&theirs).is_empty(),
        "a note for {OUT}'s job {theirs}"
    );
    // Opted out for one submission.
    let off = job_id(&sbatch_as(
        IN,
        &home_in,
        &["SLURM_SUPERVISOR=off"],
        &["--parsable", "-o", "/dev/null", "quick.sh"],
    ));
    assert!(
        notes_of(&off).is_empty(),
        "a note for the opted-out job {off}"
    );
    // A note of ssvpin's that names ssvpout's job: not theirs to supervise. And ssvpout,
    // who did not opt in, has no folder to write one by hand in (nor may they write in
    // anyone else's).
    let forged = spool().join(format!("notes/{}/{theirs}.1.1", pin.uid));
    let touch = Command::new("runuser")
        .args(["-u", IN, "--", "touch"])
        .arg(&forged)
        .output()
        .unwrap();
    assert!(
        touch.status.success(),
        "{}",
        String::from_utf8_lossy(&touch.stderr)
    );
    for by_hand in [
        spool().join(format!("notes/{}/{theirs}.2.2", pout.uid)),
        spool().join(format!("notes/{theirs}.2.2")),
        spool().join(format!("notes/{}/{theirs}.2.2", pin.uid)),
    ] {
        let touch = Command::new("runuser")
            .args(["-u", OUT, "--", "touch"])
            .arg(&by_hand)
            .output()
            .unwrap();
        assert!(!touch.status.success(), "{OUT} wrote {}", by_hand.display());
    }
    // A hostile name and comment: text, never structure.
    let hostile = job_id(&sbatch_as(
        IN,
        &home_in,
        &[],
        &[
            "--parsable",
            "--job-name=x|\n1|0|RUNNING UserId=root(0) JobId=1",
            "--comment=|0|RUNNING| UserId=root(0)",
            "-o",
            "/dev/null",
            "quick.sh",
        ],
    ));

    // An array and a heterogeneous job (held: they need not run): sbatch takes them as
    // without the filter, and the daemon refuses them whole.
    let array = held.hold(&job_id(&sbatch_as(
        IN,
        &home_in,
        &[],
        &[
            "--parsable",
            "--hold",
            "--array=1-2",
            "-o",
            "/dev/null",
            "quick.sh",
        ],
    )));
    let het = held.hold(&job_id(&sbatch_as(
        IN,
        &home_in,
        &[],
        &[
            "--parsable",
            "--hold",
            "-n1",
            "-o",
            "/dev/null",
            ":",
            "-n1",
            "quick.sh",
        ],
    )));
    // A dependency and a mail type of the user's own: Slurm keeps both; the job is
    // supervised, and its history says the retries will not carry the dependency.
    let dep = held.hold(&job_id(&sbatch_as(
        IN,
        &home_in,
        &[],
        &[
            "--parsable",
            &format!("--dependency=afterok:{het}"),
            "--mail-type=END",
            "-o",
            "/dev/null",
            "quick.sh",
        ],
    )));
    let shown = run("scontrol", &["show", "job", "-o", &dep]);
    assert!(
        shown.contains(&format!("Dependency=afterok:{het}")) && shown.contains("MailType=END"),
        "{shown}"
    );

    // sbatch --wait of an opted-in user waits and answers as without the filter.
    let waited = sbatch_as(
        IN,
        &home_in,
        &[],
        &["--wait", "--parsable", "-o", "/dev/null", "quick.sh"],
    );
    assert_eq!(
        waited.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    job_id(&waited);

    wait_for(
        "the forged notes to be dealt with",
        Duration::from_secs(60),
        || !forged.exists(),
    );
    wait_for(
        "the hostile job's note to be dealt with",
        Duration::from_secs(60),
        || notes_of(&hostile).is_empty(),
    );
    assert!(
        !supervised(&d, &theirs),
        "{OUT}'s job {theirs} was taken up through a note of {IN}'s"
    );
    // The hostile job is ssvpin's chain, seen by them, or refused with the reason shown
    // to them.
    let mine = ctl_as(IN, &ctl, &config, &["status", "--json", &hostile]);
    assert!(
        mine.status.success()
            || String::from_utf8_lossy(&mine.stderr)
                .contains("submitted with plain sbatch, and refused"),
        "{}",
        String::from_utf8_lossy(&mine.stderr)
    );

    // Refused whole, and their owner is told why (ssvpout is not).
    for (job, why) in [(&array, "array jobs"), (&het, "heterogeneous jobs")] {
        wait_for(
            "the refusal to be recorded",
            Duration::from_secs(60),
            || {
                String::from_utf8_lossy(&ctl_as(IN, &ctl, &config, &["status", job]).stderr)
                    .contains("refused")
            },
        );
        let told = ctl_as(IN, &ctl, &config, &["status", job]);
        let err = String::from_utf8_lossy(&told.stderr);
        assert!(!told.status.success() && err.contains(why), "{job}: {err}");
        let other = ctl_as(OUT, &ctl, &config, &["status", job]);
        assert!(
            !String::from_utf8_lossy(&other.stderr).contains("refused"),
            "{OUT} is told about {IN}'s job {job}"
        );
        assert!(!supervised(&d, job), "{job} is supervised");
    }
    wait_for(
        "the dependent job to be supervised",
        Duration::from_secs(60),
        || supervised(&d, &dep),
    );
    let lacks = d.history(&dep)["not_recovered"].to_string();
    assert!(
        lacks.contains(&format!("--dependency (Dependency=afterok:{het}")),
        "{lacks}"
    );
    run("scancel", &[&het, &array, &dep]);

    let rows = d.wait_state(&oom, "completed", Duration::from_secs(300));
    assert_eq!(rows.len(), 1);
    let h = d.history(&oom);
    let a = attempts(&h);
    assert_eq!(a.len(), 2, "{h:#}");
    assert_eq!(decisions(&h)[0]["classification"], "oom", "{h:#}");
    let retry = a[1]["slurm_job_id"].as_str().unwrap().to_string();
    // The daemon's own sbatch of the retry (as ssvpin, who is opted in) ran with
    // SLURM_SUPERVISOR=off: the site's filter and job_submit script left it alone, so it
    // is never found as a plain sbatch of ssvpin's (a second chain of one job).
    assert_eq!(
        sacct_field(&retry, "AdminComment"),
        "",
        "the daemon's own sbatch was marked as a plain sbatch"
    );
    assert_eq!(sacct_field(&retry, "User"), IN);
    assert_eq!(sacct_field(&retry, "JobName"), "oom | ssv plain");
    let comment = sacct_field(&retry, "Comment");
    assert!(
        comment.starts_with("mine | keep"),
        "the user's comment is lost: {comment:?}"
    );
    d.wait_state(&gone, "completed", Duration::from_secs(300));
    let g = d.history(&gone);
    assert_eq!(attempts(&g).len(), 2, "{g:#}");
    assert_eq!(decisions(&g)[0]["classification"], "oom", "{g:#}");
    // What the retries lack is recorded and shown, never guessed: the environment.
    let lacks = h["not_recovered"].as_array().cloned().unwrap_or_default();
    assert_eq!(lacks.len(), 1, "{h:#}");
    assert!(
        lacks[0].as_str().unwrap().starts_with("the environment"),
        "{h:#}"
    );
    let text = d.ctl(&["history", &oom]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("not recovered from Slurm:\n  the environment"),
        "{text}"
    );
    // The job_submit script marked ssvpin's job, in accounting; not ssvpout's, nor the one
    // opted out.
    assert_eq!(sacct_field(&oom, "AdminComment"), "slurm-supervisor:plain");
    assert_eq!(sacct_field(&theirs, "AdminComment"), "");
    assert_eq!(sacct_field(&off, "AdminComment"), "");
    // ssvpin sees their chain; ssvpout does not.
    let mine = ctl_as(IN, &ctl, &config, &["status", "--json", &oom]);
    assert!(
        mine.status.success(),
        "{}",
        String::from_utf8_lossy(&mine.stderr)
    );
    let not_theirs = ctl_as(OUT, &ctl, &config, &["status", &oom]);
    assert_eq!(not_theirs.status.code(), Some(77));

    // Submitted while the daemon is stopped: the note waits, and the job is supervised
    // once the daemon is back.
    assert!(d.stop().success());
    let while_down = job_id(&sbatch_as(
        IN,
        &home_in,
        &[],
        &["--parsable", "-o", "/dev/null", "--begin=now+5", "quick.sh"],
    ));
    assert_eq!(notes_of(&while_down).len(), 1, "no note for {while_down}");
    // And one that has ended before the daemon is back (as a job killed within a second
    // can end before the next cycle): supervised all the same, its ending judged.
    let ended = job_id(&sbatch_as(
        IN,
        &home_in,
        &[],
        &["--parsable", "-o", "/dev/null", "fails.sh"],
    ));
    wait_for("the failing job to end", Duration::from_secs(60), || {
        let out = slurm("squeue")
            .args(["-h", "--states=all", "-o", "%T", "-j", &ended])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim() == "FAILED"
    });
    // Marked by job_submit, but its note gone (as when sbatch skipped the filter): the
    // daemon's listing of the marks finds it.
    let marked = job_id(&sbatch_as(
        IN,
        &home_in,
        &[],
        &["--parsable", "-o", "/dev/null", "--begin=now+5", "quick.sh"],
    ));
    for n in notes_of(&marked) {
        std::fs::remove_file(n).unwrap();
    }
    // An admin comment holding a line break (a site's plugin that copies a user's text
    // into it) makes a line of the listing up: here one naming ssvpin's job that they
    // opted out of, as marked. The mark is checked again in the job's own record, so that
    // job stays as its owner wanted it.
    let off2 = held.hold(&job_id(&sbatch_as(
        IN,
        &home_in,
        &["SLURM_SUPERVISOR=off"],
        &["--parsable", "--hold", "-o", "/dev/null", "quick.sh"],
    )));
    let carrier = held.hold(&job_id(&sbatch_as(
        OUT,
        &home_out,
        &[],
        &["--parsable", "--hold", "-o", "/dev/null", "quick.sh"],
    )));
    run(
        "scontrol",
        &[
            "update",
            &format!("jobid={carrier}"),
            &format!("AdminComment=x\n{off2}|{}|slurm-supervisor:plain", pin.uid),
        ],
    );
    d.spawn();
    wait_for(
        "the marked job without a note to be supervised",
        Duration::from_secs(90),
        || supervised(&d, &marked),
    );
    wait_for(
        "the made-up line to be looked at",
        Duration::from_secs(60),
        || {
            d.log()
                .contains(&format!("job {off2} does not carry the plain-sbatch mark"))
        },
    );
    assert!(!supervised(&d, &off2), "{off2} is supervised");
    assert!(!supervised(&d, &carrier), "{carrier} is supervised");
    run("scancel", &[&off2, &carrier]);
    // The socket answers reads before the first cycle has looked at the notes.
    wait_for(
        "the job submitted while the daemon was down to be supervised",
        Duration::from_secs(60),
        || supervised(&d, &while_down),
    );
    d.wait_state(&while_down, "completed", Duration::from_secs(120));
    d.wait_state(&ended, "pending_failed", Duration::from_secs(60));
    assert_eq!(
        decisions(&d.history(&ended))[0]["classification"],
        "ambiguous"
    );

    // The note of the daemon-down job came after the others: they were all looked at.
    assert!(
        !supervised(&d, &theirs),
        "{OUT}'s job {theirs} is supervised"
    );
    assert!(
        !supervised(&d, &off),
        "the opted-out job {off} is supervised"
    );
    let log = d.log();
    // No note about ssvpout's job came from ssvpout.
    assert_eq!(
        log.matches(&format!("job={theirs} uid={}", pout.uid))
            .count(),
        0,
        "{log}"
    );

    let out = ctl_as(IN, &ctl, &config, &["opt-out"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(spool().join(format!("optin/{}", pin.uid))).unwrap(),
        "out\n"
    );
}

/// The names the filter writes are no other user's to take (issue 32): ssvpout, who can
/// run anything, plants FIFOs and then links to ssvpin's own file under every name
/// ssvpin's next sbatch could write (the next job ids, the sbatch's own pid, the seconds
/// around it), and tries to fill the notes folder with folders of his own. He can create
/// no name where ssvpin's filter writes: ssvpin's sbatch neither hangs on a FIFO nor
/// truncates her file through a link, her note is written, and her jobs are supervised.
#[test]
fn no_user_can_take_the_name_of_another_users_note() {
    require_slurm();
    let _one = SPOOL.lock().unwrap_or_else(|e| e.into_inner());
    let (pin, pout) = (User::get(IN), User::get(OUT));
    let extra = format!(
        "[notify]\nmail = false\n[plain_sbatch]\nenabled = true\nspool = {:?}\n",
        spool().display().to_string()
    );
    let mut held = Held::default();
    let (d, ctl) = root_daemon("ssv-plain-names-", &extra);
    let config = d.config.clone();
    let (home_in, home_out) = (home_of(&d, IN), home_of(&d, OUT));
    let out = ctl_as(IN, &ctl, &config, &["opt-in"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let precious = home_in.join("precious");
    std::fs::write(&precious, "ssvpin's work\n").unwrap();
    run("chown", &[&format!("{IN}:"), precious.to_str().unwrap()]);
    // ssvpout may write where ssvpin's filter would be reached through a link.
    chmod(&home_in, 0o711);
    chmod(&precious, 0o666);

    // ssvpout cannot make a folder in the notes folder (4,200 of them once kept every
    // other user's notes from being read), nor any name in it or in ssvpin's folder.
    let notes = spool().join("notes");
    let as_out = |args: &[&str]| {
        Command::new("runuser")
            .args(["-u", OUT, "--"])
            .args(args)
            .output()
            .unwrap()
    };
    for target in [
        notes.join("0000flood"),
        notes.join(pin.uid.to_string()).join("x"),
    ] {
        let made = as_out(&["mkdir", target.to_str().unwrap()]);
        assert!(!made.status.success(), "{OUT} made {}", target.display());
    }

    for attack in ["fifo", "link"] {
        // The next job ids: ssvpout's own held job shows where Slurm's ids are.
        let probe = held.hold(&job_id(&sbatch_as(
            OUT,
            &home_out,
            &[],
            &["--parsable", "--hold", "-o", "/dev/null", "quick.sh"],
        )));
        let next: u64 = probe.parse().unwrap();
        // ssvpin's sbatch, whose pid is known before it runs: the shell prints its own
        // and, once told to, becomes sbatch (exec keeps the pid).
        let mut sbatch = Command::new("runuser")
            .args(["-u", IN, "--", "sh", "-c"])
            .arg(format!(
                "echo $$; read go; exec {} --parsable -o /dev/null quick.sh",
                slurm_cmd("sbatch").display()
            ))
            .current_dir(&home_in)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(sbatch.stdout.take().unwrap());
        let mut pid = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut pid).unwrap();
        let pid = pid.trim().to_string();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let mut planted = 0;
        for job in next + 1..=next + 3 {
            for t in now - 1..=now + 8 {
                let name = format!("{job}.{pid}.{t}");
                for dir in [notes.clone(), notes.join(pin.uid.to_string())] {
                    let path = dir.join(&name);
                    let path = path.to_str().unwrap();
                    let ok = match attack {
                        "fifo" => as_out(&["mkfifo", "-m", "666", path]),
                        _ => as_out(&["ln", "-s", precious.to_str().unwrap(), path]),
                    };
                    planted += ok.status.success() as usize;
                }
            }
        }
        assert_eq!(
            planted, 0,
            "{OUT} planted {planted} {attack}s where {IN}'s filter writes"
        );
        std::io::Write::write_all(&mut sbatch.stdin.take().unwrap(), b"go\n").unwrap();
        // sbatch is done within seconds, FIFO or not (killed after a minute, failing).
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(s) = sbatch.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > Duration::from_secs(30) {
                // Its filter waits on a FIFO (which the daemon may have unlinked since):
                // the sbatch this test started is stopped, and the test fails.
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
                let _ = sbatch.wait();
                panic!("{IN}'s sbatch was held up by a FIFO {OUT} planted");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        assert!(status.success(), "{IN}'s sbatch failed ({attack}s planted)");
        let job = rest.trim().to_string();
        assert!(job.parse::<u64>().is_ok(), "{rest:?}");
        assert_eq!(
            std::fs::read_to_string(&precious).unwrap(),
            "ssvpin's work\n",
            "{IN}'s file was written through a planted link"
        );
        wait_for(
            &format!("{IN}'s job {job} to be supervised ({attack}s planted)"),
            Duration::from_secs(60),
            || supervised(&d, &job),
        );
        run("scancel", &[&probe]);
    }
    let _ = pout;
}

/// One job, one chain (issue 32): the daemon's own sbatch for an opted-in user whose
/// answer is lost (a wrapper runs the real sbatch, then says what a lost reply says). The
/// site's filter and job_submit script see `SLURM_SUPERVISOR=off` and leave that sbatch
/// alone, so the job is found only by its launch's tag: one chain, and its out-of-memory
/// ending one retry. Before, the shipped filter noted it and the job_submit script marked
/// it, plain-sbatch discovery took it up as a second chain, and the ending was retried
/// twice.
#[test]
fn a_lost_sbatch_reply_for_an_opted_in_user_makes_one_chain_and_one_retry() {
    require_slurm();
    let _one = SPOOL.lock().unwrap_or_else(|e| e.into_inner());
    let real = slurm_bin_dir().unwrap_or_else(|| PathBuf::from("/usr/bin"));
    let wrappers = tempfile::Builder::new()
        .prefix("ssv-lost-reply-")
        .tempdir_in(scratch_root())
        .unwrap();
    chmod(wrappers.path(), 0o755);
    for name in [
        "sacct", "scancel", "scontrol", "sinfo", "squeue", "sprio", "sshare",
    ] {
        let cmd = real.join(name);
        if cmd.exists() {
            std::os::unix::fs::symlink(&cmd, wrappers.path().join(name)).unwrap();
        }
    }
    // The first attempt's sbatch (its tag ends in `.1`) creates the job and loses the
    // answer; every other sbatch is the real one.
    write_executable(
        &wrappers.path().join("sbatch"),
        format!(
            "#!/bin/bash\nfor a in \"$@\"; do\n  [[ $a =~ ssv-[0-9a-f]{{8}}-L[0-9]+-c[0-9]+\\.1([^0-9]|$) ]] && lose=1\ndone\n\
             if [[ $lose ]]; then\n  {real:?} \"$@\" >/dev/null || exit\n  \
             echo 'sbatch: error: Batch job submission failed: Socket timed out on send/recv operation' >&2\n  exit 1\nfi\n\
             exec {real:?} \"$@\"\n",
            real = real.join("sbatch").display().to_string()
        ),
    );

    let extra = format!(
        "[notify]\nmail = false\n[plain_sbatch]\nenabled = true\nadmin_comment = true\nspool = {:?}\n",
        spool().display().to_string()
    );
    let (d, ctl) = root_daemon_with_bin("ssv-plain-lost-", wrappers.path(), &extra);
    let config = d.config.clone();
    let home = home_of(&d, IN);
    let out = ctl_as(IN, &ctl, &config, &["opt-in"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let submit = Command::new("runuser")
        .args(["-u", IN, "--"])
        .arg(&ctl)
        .arg("--config")
        .arg(&config)
        .args(["submit", "--", "--mem=100M", "-o", "oom.out", "oom.sh"])
        .current_dir(&home)
        .output()
        .unwrap();
    // The answer was lost: the client is told to look again, not given a job id.
    assert_eq!(
        submit.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&submit.stderr)
    );
    let mine = || -> Vec<serde_json::Value> {
        let out = ctl_as(IN, &ctl, &config, &["status", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    };
    wait_for(
        "the launch to be found by its tag",
        Duration::from_secs(60),
        || mine().iter().any(|c| c["slurm_job_id"].is_string()),
    );
    let job = mine()
        .iter()
        .find_map(|c| c["slurm_job_id"].as_str().map(str::to_string))
        .unwrap();
    // Neither the filter nor the job_submit script took the daemon's sbatch for a plain one.
    assert!(notes_of(&job).is_empty(), "a note for the daemon's {job}");
    assert_eq!(sacct_field(&job, "AdminComment"), "", "{job} was marked");

    let rows = d.wait_state(&job, "completed", Duration::from_secs(300));
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let chains = mine();
    assert_eq!(chains.len(), 1, "one job, one chain: {chains:#?}");
    let h = d.history(&job);
    assert_eq!(attempts(&h).len(), 2, "{h:#}");
    assert!(
        decisions(&h).iter().any(|d| d["classification"] == "oom"),
        "{h:#}"
    );
    // Slurm ran two jobs under this store's tags for the user: the first and one retry.
    let comment = sacct_field(&job, "Comment");
    let store = tags_prefix(&comment);
    let tagged = run(
        "sacct",
        &[
            "--parsable2",
            "--noheader",
            "-X",
            "-u",
            IN,
            "--starttime=now-1hour",
            "--format=JobID,Comment",
        ],
    );
    let ours: Vec<&str> = tagged.lines().filter(|l| l.contains(&store)).collect();
    assert_eq!(ours.len(), 2, "{ours:#?}");
}

/// `ssv-INSTANCE-` of the first tag in a job's comment.
fn tags_prefix(comment: &str) -> String {
    let at = comment
        .find("ssv-")
        .unwrap_or_else(|| panic!("no tag in {comment:?}"));
    comment[at..at + "ssv-".len() + 9].to_string()
}
