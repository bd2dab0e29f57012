//! The cycle cut in two, end to end with fake Slurm commands: what the daemon
//! does with a cycle's squeue out when it is told to stop.

mod common;

use common::fake::wait_until;
use common::*;
use std::time::{Duration, Instant};

/// A SIGTERM while the cycle's squeue is out (stopped: it answers nothing until killed)
/// stops the daemon at once: it waits neither for the squeue's timeout nor for a landing.
#[test]
fn a_shutdown_while_the_cycles_squeue_is_out_does_not_wait_for_it() {
    let root = tempfile::Builder::new()
        .prefix("ssv-fake-")
        .tempdir_in(scratch_root())
        .unwrap()
        .keep();
    let fake = common::fake::Fake::new(&root);
    let mut d = Daemon::start(&format!(
        "[slurm]\nbin_dir = {:?}\ncommand_timeout = \"60s\"\n",
        fake.bin.display().to_string()
    ));
    d.write_script("job.sh", "echo hi");
    d.submit(&["job.sh"]);
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .map_or_else(|| nix::unistd::getuid().to_string(), |u| u.name);
    let squeues = || -> Vec<i64> {
        std::fs::read_to_string(fake.bin.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|c| c["cmd"] == "squeue")
            .filter_map(|c| c["pid"].as_i64())
            .collect()
    };
    let stopped = |pid: i64| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    };
    fake.ctl(&["mode", &format!("squeue@{me}"), "stop"]);
    wait_until(
        "a cycle's squeue that does not answer",
        Duration::from_secs(20),
        || squeues().last().is_some_and(|&pid| stopped(pid)),
    );
    let pid = *squeues().last().unwrap();
    let start = Instant::now();
    let status = d.stop();
    let took = start.elapsed();
    assert!(status.success(), "{status:?}\n{}", d.log());
    assert!(
        took < Duration::from_secs(30),
        "the daemon took {took:?} to stop with its squeue out:\n{}",
        d.log()
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") T"),
        "the stopped squeue was left behind"
    );
    fake.ctl(&["mode", &format!("squeue@{me}"), "ok"]);
}
