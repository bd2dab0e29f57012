//! The daemon running an agent command on chains waiting in pending_failed (fake Slurm,
//! a shell script standing in for the AI): it resolves them through supervisorctl, an
//! unsure one is held for a person, and a hanging agent is killed at its timeout while
//! supervision goes on.

mod common;

use common::fake::{start, wait_until};
use common::*;
use std::time::Duration;

fn agent_config(confidence: &str) -> String {
    let script = format!("{}/tests/agents/fake-agent.sh", env!("CARGO_MANIFEST_DIR"));
    format!("[agent]\ncommand = [\"/bin/sh\", {script:?}, {CTL:?}, {confidence:?}]\ninterval = \"1s\"\ntimeout = \"20s\"\nmin_confidence = 0.7\n")
}

#[test]
fn an_agent_command_resolves_a_waiting_chain() {
    let (d, fake) = start(&agent_config("0.9"), &[]);
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["job.sh"]);
    fake.ctl(&["finish", &job, "FAILED", "1:0", "the frobnicator stalled\n"]);
    wait_until("the agent's retry", Duration::from_secs(30), || {
        d.status(&job)[0]["attempts"] == 2
    });
    let h = d.history(&job);
    let last = h["decisions"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["action"], "resubmit", "{h:#}");
    assert_eq!(last["reason"], "fake agent: looks transient");
    assert!(
        last["actor"].as_str().unwrap().starts_with("user:"),
        "{h:#}"
    );
    assert_eq!(h["attempts"][1]["mem"], "1024M");
    assert!(d.log().contains("the agent finished"), "{}", d.log());
    let stats = d.json(&["stats", "--json"]);
    assert_eq!(stats["total"]["agent_retries"], 1, "{stats:#}");
    assert_eq!(stats["total"]["recovery_in_progress"], 1, "{stats:#}");
    // The retried job completes: the agent's retry counts as a success.
    let second = d.status(&job)[0]["slurm_job_id"]
        .as_str()
        .unwrap()
        .to_string();
    fake.ctl(&["finish", &second, "COMPLETED", "0:0"]);
    wait_until("completion", Duration::from_secs(20), || {
        d.status(&job)[0]["state"] == "completed"
    });
    let stats = d.json(&["stats", "--json"]);
    assert_eq!(stats["total"]["recovered_successfully"], 1, "{stats:#}");
    assert_eq!(stats["chains"][0]["recovered_successfully"], true);
}

#[test]
fn an_unsure_agent_holds_the_chain_for_a_person() {
    let (d, fake) = start(&agent_config("0.3"), &[]);
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["job.sh"]);
    fake.ctl(&["finish", &job, "FAILED", "1:0", "the frobnicator stalled\n"]);
    wait_until("the hold", Duration::from_secs(30), || {
        d.history(&job)["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["action"] == "hold")
    });
    let pending = d.json(&["pending", "--json"]);
    assert_eq!(pending[0]["held"], true, "{pending:#}");
    assert_eq!(pending[0]["state"], "pending_failed");
    let held = &d.history(&job)["decisions"][1];
    assert_eq!(held["reason_code"], "held_for_person", "{held:#}");
    // What a person reads says why, with the threshold.
    assert!(
        held["reason"].as_str().unwrap().contains("below 0.7"),
        "{held:#}"
    );
    // A held chain is not handed to the agent again, however many cycles pass (the agent
    // is looked for every second, a cycle a second; a running job of its own makes each
    // cycle ask squeue, which counts them).
    let other = d.submit(&["job.sh"]);
    assert_ne!(other, job);
    let asked = fake.calls("squeue");
    wait_until(
        "three cycles after the hold",
        Duration::from_secs(30),
        || fake.calls("squeue") >= asked + 3,
    );
    assert_eq!(
        d.log().matches("starting the agent").count(),
        1,
        "{}",
        d.log()
    );
    assert_eq!(
        fake.sbatch_calls().len(),
        2,
        "the held chain was not retried"
    );
}

#[test]
fn a_hanging_agent_is_killed_and_supervision_goes_on() {
    let (d, fake) = start(
        "[agent]\ncommand = [\"sleep\", \"1000\"]\ninterval = \"1s\"\ntimeout = \"2s\"\n",
        &[],
    );
    d.write_script("job.sh", "echo hi");
    let stuck = d.submit(&["job.sh"]);
    fake.ctl(&["finish", &stuck, "FAILED", "1:0", "odd\n"]);
    wait_until("pending_failed", Duration::from_secs(20), || {
        d.status(&stuck)[0]["state"] == "pending_failed"
    });
    // While the agent hangs, other work is still watched and finished.
    let other = d.submit(&["job.sh"]);
    fake.ctl(&["finish", &other, "COMPLETED", "0:0"]);
    wait_until("the other job to complete", Duration::from_secs(20), || {
        d.status(&other)[0]["state"] == "completed"
    });
    wait_until("the timeout kill", Duration::from_secs(20), || {
        d.log().contains("was killed; supervision goes on")
    });
}

/// The agent gets only the environment it is given (a few variables, the config's path and
/// what `[agent] env` names), none of the daemon's fds but 0-2, and at its timeout
/// everything it started is killed with it.
#[test]
fn the_agent_gets_a_clean_environment_and_its_children_die_at_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("agent-env");
    let pidfile = dir.path().join("child.pid");
    let script = dir.path().join("agent.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nenv > {out:?}.tmp\nfor f in /proc/$$/fd/*; do echo \"$f $(readlink $f)\"; done >> {out:?}.fds\nmv {out:?}.tmp {out:?}\nsleep 1000 &\necho $! > {pidfile:?}.tmp\nmv {pidfile:?}.tmp {pidfile:?}\nwait\n"
        ),
    )
    .unwrap();
    let (d, fake) = start(
        &format!(
            "[agent]\ncommand = [\"/bin/sh\", {:?}]\ninterval = \"1s\"\ntimeout = \"6s\"\nenv = [\"SSV_AGENT_KEY\"]\n",
            script.display().to_string()
        ),
        &[
            ("SSV_AGENT_KEY", "for-the-agent"),
            ("SSV_NOT_FOR_THE_AGENT", "secret"),
            ("NOTIFY_SOCKET", "/nonexistent/notify"),
        ],
    );
    d.write_script("job.sh", "echo hi");
    let job = d.submit(&["job.sh"]);
    fake.ctl(&["finish", &job, "FAILED", "1:0", "odd\n"]);
    wait_until("the agent's environment", Duration::from_secs(30), || {
        out.exists() && pidfile.exists()
    });
    let env = std::fs::read_to_string(&out).unwrap();
    assert!(env.contains("SSV_AGENT_KEY=for-the-agent"), "{env}");
    assert!(env.contains("SLURM_SUPERVISOR_CONFIG="), "{env}");
    for absent in [
        "SSV_NOT_FOR_THE_AGENT",
        "NOTIFY_SOCKET",
        "SLURM_SUPERVISOR_LOG",
    ] {
        assert!(!env.contains(absent), "{absent} reached the agent:\n{env}");
    }
    // Pipes, the shell's own script and this loop's output aside, nothing of the daemon's (its
    // store, log, sockets, state) is open in it.
    let fds = std::fs::read_to_string(format!("{}.fds", out.display())).unwrap();
    for line in fds.lines() {
        let target = line.split_once(' ').map(|(_, t)| t).unwrap_or("");
        assert!(
            target.starts_with("pipe:") || target.ends_with("agent.sh") || target.ends_with(".fds"),
            "the agent has a fd of the daemon's: {line}\n{fds}"
        );
    }
    let child: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until(
        "the agent's child to be killed",
        Duration::from_secs(30),
        || {
            !std::path::Path::new(&format!("/proc/{child}")).exists()
                || std::fs::read_to_string(format!("/proc/{child}/stat"))
                    .is_ok_and(|s| s.contains(") Z "))
        },
    );
    assert!(
        d.log().contains("was killed; supervision goes on"),
        "{}",
        d.log()
    );
}
