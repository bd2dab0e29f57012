//! How the daemon starts Slurm's commands (`src/slurm/spawn.rs`), with real processes and
//! real users: in system mode a command runs with the user's uid, gid, supplementary
//! groups and working directory; a directory the user may not enter is refused; an
//! sbatch still running when the daemon is killed (kill -9) dies with it, so it cannot
//! create a job behind a restarted daemon's back; and a user's sbatch held before it
//! starts (a hung FUSE folder) holds up no one else.
//!
//! Needs root (users are created with `useradd -m` if missing).

mod common;

use common::fake::wait_until;
use common::system::*;
use common::with_umask;
use slurm_supervisor::slurm::cli::SlurmCli;
use slurm_supervisor::slurm::{RunAs, SbatchRequest, Slurm, SlurmError};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const USER: &str = "ssvspawn";
const GROUP: &str = "ssvspawn-extra";

/// The test user, member of one more group than their own.
fn user_with_a_group() -> (User, u32) {
    let u = User::get(USER);
    let out = Command::new("groupadd")
        .args(["-f", GROUP])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("usermod")
        .args(["-a", "-G", GROUP, USER])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gid = nix::unistd::Group::from_name(GROUP)
        .unwrap()
        .expect("the group exists")
        .gid
        .as_raw();
    (u, gid)
}

/// A folder with a fake `sbatch` (a shell script) that writes who and where it runs to
/// `ran` in its working directory and prints a job id.
fn fake_sbatch() -> (tempfile::TempDir, SlurmCli) {
    let dir = tempfile::Builder::new()
        .prefix("ssv-spawn-")
        .tempdir_in(common::scratch_root())
        .unwrap();
    chmod(dir.path(), 0o755);
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    chmod(&bin, 0o755);
    let sbatch = bin.join("sbatch");
    common::write_executable(
        &sbatch,
        "#!/bin/sh\n{ id -u; id -g; id -G; pwd; cat; } > ran\necho 4242\n",
    );
    let mut cfg = slurm_supervisor::config::Config::defaults().slurm;
    cfg.bin_dir = Some(bin);
    (dir, SlurmCli::new(&cfg))
}

fn request(u: &User, cwd: PathBuf) -> SbatchRequest {
    SbatchRequest {
        argv: vec!["job.sh".into()],
        cwd,
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        stdin: Some(b"the script\n".to_vec()),
        run_as: Some(RunAs {
            uid: u.uid,
            gid: u.gid,
            user: std::ffi::CString::new(u.name.clone()).unwrap(),
        }),
        held: false,
    }
}

#[tokio::test]
async fn an_sbatch_for_a_user_runs_with_their_uid_gid_groups_and_folder() {
    let (u, extra) = user_with_a_group();
    let (dir, cli) = fake_sbatch();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    chmod(&work, 0o700);
    std::os::unix::fs::chown(&work, Some(u.uid), Some(u.gid)).unwrap();

    let id = cli.sbatch(&request(&u, work.clone())).await.unwrap();
    assert_eq!(id, "4242");
    let ran = std::fs::read_to_string(work.join("ran")).unwrap();
    let lines: Vec<&str> = ran.lines().collect();
    assert_eq!(lines.len(), 5, "{ran}");
    assert_eq!(lines[0], u.uid.to_string(), "uid");
    assert_eq!(lines[1], u.gid.to_string(), "gid");
    let mut groups: Vec<u32> = lines[2]
        .split_whitespace()
        .map(|g| g.parse().unwrap())
        .collect();
    groups.sort();
    let mut want = vec![u.gid, extra];
    want.sort();
    assert_eq!(groups, want, "exactly the user's groups, none of root's");
    assert_eq!(Path::new(lines[3]), std::fs::canonicalize(&work).unwrap());
    assert_eq!(lines[4], "the script", "stdin delivered");
}

#[tokio::test]
async fn a_folder_the_user_may_not_enter_is_refused_and_nothing_runs() {
    let (u, _) = user_with_a_group();
    let (dir, cli) = fake_sbatch();
    // root's own folder (0700): the daemon (root) could enter it, the user cannot.
    let closed = dir.path().join("closed");
    std::fs::create_dir(&closed).unwrap();
    chmod(&closed, 0o700);
    match cli.sbatch(&request(&u, closed.clone())).await {
        Err(SlurmError::Spawn { source, .. }) => {
            assert_eq!(
                source.kind(),
                std::io::ErrorKind::PermissionDenied,
                "{source}"
            )
        }
        other => panic!("expected a refusal to start, got {other:?}"),
    }
    assert!(!closed.join("ran").exists(), "the sbatch never ran");
    // The same folder opened to the user: it runs.
    std::os::unix::fs::chown(&closed, Some(u.uid), Some(u.gid)).unwrap();
    assert_eq!(
        cli.sbatch(&request(&u, closed.clone())).await.unwrap(),
        "4242"
    );
}

/// The processes whose parent is `pid`, with their command lines.
fn children_of(pid: i32) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // Fields after the command name in parentheses: state, ppid, ...
        let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
        let ppid: i32 = rest
            .split(' ')
            .nth(1)
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
        if ppid == pid {
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            out.push((p, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    out
}

/// Gone, or a zombie nobody reaped yet: it runs no more.
fn dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat[stat.rfind(')').map_or(0, |i| i + 2)..].starts_with('Z'),
    }
}

#[test]
fn a_users_sbatch_dies_with_the_killed_daemon_and_creates_no_job() {
    let mut sys = System::start("", "");
    sys.write_as("alice", "job.sh", b"#!/bin/bash\necho hi\n");
    let mut submit = sys.ctl_command("alice", &["submit", "--", "job.sh"]);
    submit
        .env("SSV_FAKE_SBATCH_SLEEP", "600")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut submit = submit.spawn().unwrap();
    wait_until("alice's sbatch to start", Duration::from_secs(30), || {
        sys.sbatch_calls_of("alice").len() == 1
    });
    let daemon = sys.pid();
    let sbatch: Vec<i32> = children_of(daemon)
        .into_iter()
        .filter(|(_, cmd)| cmd.contains("sbatch"))
        .map(|(p, _)| p)
        .collect();
    assert_eq!(
        sbatch.len(),
        1,
        "one sbatch child: {:?}",
        children_of(daemon)
    );
    let sbatch = sbatch[0];
    let alice = User::get("alice");
    let owner = std::fs::metadata(format!("/proc/{sbatch}")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(owner.uid(), alice.uid, "the sbatch runs as alice");

    sys.d.kill();
    wait_until(
        "the orphaned sbatch to be killed",
        Duration::from_secs(30),
        || dead(sbatch),
    );
    assert!(
        sys.fake.jobs().is_empty(),
        "no job was created: {:?}",
        sys.fake.jobs()
    );
    let _ = submit.kill();
    let _ = submit.wait();
}

/// What a root daemon hands a user's sbatch besides uid and gid: no capability of root's
/// (permitted, effective, inheritable or ambient), and the submitter's umask for the job,
/// never the daemon's own 077 (sbatch gives the job its own umask as SLURM_UMASK unless
/// that is set; a retry's job must create its files as the user's first one did).
#[test]
fn a_users_sbatch_has_no_capability_and_the_submitters_umask() {
    let sys = System::start("", "");
    sys.write_as("alice", "job.sh", b"#!/bin/bash\necho hi\n");
    let mut submit = sys.ctl_command("alice", &["submit", "--", "job.sh"]);
    with_umask(&mut submit, 0o027);
    let out = submit.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = sys.sbatch_calls_of("alice");
    assert_eq!(calls.len(), 1, "{calls:?}");
    let c = &calls[0];
    let status = &c["status"];
    for cap in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert_eq!(status[cap], "0000000000000000", "{cap}: {status}");
    }
    let alice = User::get("alice");
    let uids = format!("{0}\t{0}\t{0}\t{0}", alice.uid);
    assert_eq!(
        status["Uid"],
        uids.as_str(),
        "real, effective, saved, fs uid"
    );
    let gids = format!("{0}\t{0}\t{0}\t{0}", alice.gid);
    assert_eq!(
        status["Gid"],
        gids.as_str(),
        "real, effective, saved, fs gid"
    );
    let job_umask = match c["slurm_umask"].as_str() {
        Some(m) => u32::from_str_radix(m, 8).unwrap(),
        None => c["umask"].as_u64().unwrap() as u32,
    };
    assert_eq!(job_umask, 0o027, "the job's umask is the submitter's: {c}");
}

/// A user can hold their sbatch before it starts: a working directory on their own FUSE
/// mount (or on a dead NFS server) makes its `chdir` wait. The daemon clones it on a
/// thread of its own (`spawn`'s starter threads), so meanwhile another user's submit is
/// answered; the held one is killed after 10 s, and its submit is told sbatch gave no
/// clear answer (it may have run: the tag is looked up before anything is sent again).
/// Before the starter threads the daemon's loop waited out those 10 s, and every other
/// request with it.
#[test]
fn a_submit_from_a_hung_folder_holds_up_no_one_elses() {
    let sys = System::start("", "");
    let hung = HungMount::new(&sys.root().join("hung"));
    let request = serde_json::json!({
        "cmd": "submit",
        "argv": ["--wrap", "true"],
        "cwd": hung.dir.join("below"),
        "env": [["PATH", "/usr/bin:/bin"]],
        "max_retries": null,
    });
    let line = format!("{request}\n");
    let alice = User::get("alice");
    let daemon = sys.pid();
    // A child of the daemon running as alice that has not exec'd (a clone of the daemon).
    let held = || {
        children_of(daemon).into_iter().find(|(p, cmd)| {
            use std::os::unix::fs::MetadataExt;
            cmd.contains("slurm-supervisord")
                && std::fs::metadata(format!("/proc/{p}")).is_ok_and(|m| m.uid() == alice.uid)
        })
    };
    std::thread::scope(|s| {
        let answer = s.spawn(|| sys.raw_request_as("alice", line.as_bytes()));
        wait_until(
            "alice's sbatch to be held in its chdir",
            Duration::from_secs(30),
            || held().is_some(),
        );
        let (pid, _) = held().unwrap();
        let job = sys.submit_as("bob", &["--wrap", "true"]);
        let status = sys.as_user("bob", &["status", &job]);
        assert!(
            status.status.success(),
            "{}",
            String::from_utf8_lossy(&status.stderr)
        );
        assert!(
            held().is_some_and(|(p, _)| p == pid) && !dead(pid),
            "bob's submit was answered only after alice's held sbatch was killed"
        );
        assert!(sys.sbatch_calls_of("alice").is_empty());
        let answer: serde_json::Value =
            serde_json::from_slice(&answer.join().unwrap()).expect("a JSON answer");
        assert_eq!(answer["error"]["kind"], "unavailable", "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("no clear answer")),
            "{answer}"
        );
    });
    assert!(held().is_none(), "the held sbatch was killed and reaped");
    // Alice's folder is no Slurm outage: polling does not back off for everyone.
    let log = sys.d.log();
    assert!(log.contains("was held before it started"), "{log}");
    assert!(!log.contains("slurm is not answering"), "{log}");
}
