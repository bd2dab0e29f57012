//! A system-wide daemon (running as root, for every user of a login node) against the
//! real Slurm: a user reaches it through the socket, may see and touch only their own
//! chains, and every Slurm command for them runs as them, retries included.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn as_alice(ctl: &Path, config: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new("runuser")
        .args(["-u", "alice", "--"])
        .arg(ctl)
        .arg("--config")
        .arg(config)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

#[test]
fn a_root_daemon_acts_for_each_user_as_that_user() {
    require_slurm();
    assert!(
        Command::new("id")
            .arg("alice")
            .output()
            .unwrap()
            .status
            .success(),
        "user alice is made by scripts/dev-cluster up"
    );
    let dir = tempfile::Builder::new()
        .prefix("ssv-system-")
        .tempdir_in(scratch_root())
        .unwrap();
    chmod(dir.path(), 0o755);
    let run_dir = dir.path().join("run");
    std::fs::create_dir(&run_dir).unwrap();
    chmod(&run_dir, 0o755);
    let config = dir.path().join("supervisor.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = {:?}\nsocket = {:?}\npoll_interval = \"1s\"\n[retry]\nbackoff_initial = \"1s\"\nbackoff_jitter = 0.0\n\
             [[rules]]\nname = \"connection-refused\"\nkind = \"transient\"\nstderr = 'Connection refused'\n",
            dir.path().join("state").display().to_string(),
            run_dir.join("supervisor.sock").display().to_string()
        ),
    )
    .unwrap();
    chmod(&config, 0o644);
    // A copy of supervisorctl that alice can run wherever this checkout lives.
    let ctl = dir.path().join("supervisorctl");
    std::fs::copy(CTL, &ctl).unwrap();
    chmod(&ctl, 0o755);
    let mut d = Daemon {
        dir,
        config: config.clone(),
        child: None,
        extra_env: Vec::new(),
    };
    d.spawn();

    let home = d.dir.path().join("alice");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(
        home.join("job.sh"),
        "#!/bin/bash\nid -un >> whoami.txt\nif [ ! -e once ]; then touch once; echo 'Connection refused' >&2; exit 1; fi\necho ok\n",
    )
    .unwrap();
    run("chown", &["-R", "alice:", home.to_str().unwrap()]);
    let out = as_alice(
        &ctl,
        &config,
        &home,
        &["submit", "--", "--job-name=ssv-alice", "job.sh"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let alice_job = String::from_utf8(out.stdout).unwrap().trim().to_string();

    // root's own chain, which alice must not see or touch.
    d.write_script("root.sh", "sleep 60");
    let root_job = d.submit(&["--job-name=ssv-root", "root.sh"]);
    let out = as_alice(&ctl, &config, &home, &["status", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows:#}");
    assert_eq!(rows[0]["slurm_job_id"], alice_job.as_str());
    assert_eq!(
        as_alice(&ctl, &config, &home, &["cancel", &root_job])
            .status
            .code(),
        Some(77)
    );
    assert_eq!(
        as_alice(&ctl, &config, &home, &["history", &root_job])
            .status
            .code(),
        Some(77)
    );

    d.wait_state(&alice_job, "completed", 3 * Duration::from_secs(60));
    let h = d.history(&alice_job);
    assert_eq!(h["attempts"].as_array().unwrap().len(), 2, "{h:#}");
    // Both attempts ran as alice, and Slurm has them as hers.
    assert_eq!(
        std::fs::read_to_string(home.join("whoami.txt")).unwrap(),
        "alice\nalice\n"
    );
    for a in h["attempts"].as_array().unwrap() {
        let user = run(
            "sacct",
            &[
                "--parsable2",
                "--noheader",
                "-X",
                "-j",
                a["slurm_job_id"].as_str().unwrap(),
                "--format=User",
            ],
        );
        assert_eq!(user.trim(), "alice", "{a}");
    }
    run("scancel", &[&root_job]);
}
