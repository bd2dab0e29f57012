//! Rules that learn (docs/rules.md) against the real Slurm of `scripts/dev-cluster`
//! (22.05 and 24.11), as issue 35 asks to see it: the same ambiguous failure in three
//! chains, each resolved by `classify --action retry` as an agent would, each retry
//! completing; a fourth occurrence still waits (nothing is automatic), a proposal holds
//! the three as its evidence, `rules accept` as root puts it in force, and the next
//! occurrence is retried by the rule at once, its record naming the proposal.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const MIN: Duration = Duration::from_secs(60);

/// Fails the first time it runs under its job name with a checkpoint error whose job
/// id, timestamp and checksum change from run to run; completes the second time.
const FLAKY: &str = r#"m=".ran-$SLURM_JOB_NAME"
if [ -e "$m" ]; then echo "resumed fine"; exit 0; fi
touch "$m"
echo "[$(date -Is)] loading $PWD/ckpt/shard3.pt" >&2
echo "RuntimeError: checkpoint shard 3 has an unexpected checksum $(printf %x $RANDOM)a1 (job $SLURM_JOB_ID)" >&2
exit 1"#;

/// Submits one chain of the flaky job, named `ssv-rules-<tag>-<pid>`.
fn submit(d: &Daemon, tag: &str) -> String {
    let name = format!("ssv-rules-{tag}-{}", std::process::id());
    d.submit(&[&format!("--job-name={name}"), "--time=2", "flaky.sh"])
}

/// The signature of the latest attempt of the chain of `job`, from `pending --json`.
fn pending_signature(d: &Daemon, job: &str) -> String {
    let pending = d.json(&["pending", "--json"]);
    let row = pending
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["slurm_job_id"] == job)
        .cloned()
        .unwrap_or_else(|| panic!("{job} is not pending: {pending:#}"));
    row["evidence"]["attempts"]
        .as_array()
        .and_then(|a| a.last())
        .and_then(|a| a["signature"].as_str())
        .unwrap_or_else(|| panic!("no signature: {row:#}"))
        .to_string()
}

fn proposals(d: &Daemon) -> Vec<Value> {
    d.json(&["rules", "--json"])["proposals"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn three_agreeing_resolutions_make_a_proposal_that_root_accepts_and_the_rule_retries_the_next() {
    require_slurm();
    let d = Daemon::start("");
    d.write_script("flaky.sh", FLAKY);

    // Three chains meet the same failure; each is escalated, not retried blindly.
    let first: Vec<String> = ["a", "b", "c"].iter().map(|t| submit(&d, t)).collect();
    for job in &first {
        d.wait_state(job, "pending_failed", 4 * MIN);
    }
    let sig = pending_signature(&d, &first[0]);
    for job in &first[1..] {
        assert_eq!(
            pending_signature(&d, job),
            sig,
            "one failure, one signature"
        );
    }
    assert!(
        proposals(&d).is_empty(),
        "nothing resolved, nothing proposed"
    );

    // An agent resolves each with a retry; each retry completes.
    for job in &first {
        let out = d.ctl(&[
            "classify",
            job,
            "--action",
            "retry",
            "--reason",
            "checkpoint read glitch, the shard is fine on a second read",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for job in &first {
        d.wait_state(job, "completed", 4 * MIN);
    }

    // The fourth occurrence still waits for a person or an agent.
    let fourth = submit(&d, "d");
    d.wait_state(&fourth, "pending_failed", 4 * MIN);
    assert_eq!(pending_signature(&d, &fourth), sig);
    let all = proposals(&d);
    assert_eq!(all.len(), 1, "{all:#?}");
    let p = &all[0];
    assert_eq!(p["id"], sig.as_str());
    assert_eq!(p["rule"]["kind"], "transient");
    assert_eq!(p["rule"]["exit_codes"], serde_json::json!([1]));
    assert_eq!(
        (p["completed"].as_u64(), p["failed"].as_u64()),
        (Some(3), Some(0)),
        "{p:#}"
    );
    let mut evidence: Vec<String> = p["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["chain"].as_str().unwrap().to_string())
        .collect();
    evidence.sort();
    let mut chains: Vec<String> = first
        .iter()
        .map(|j| d.status(j)[0]["id"].as_str().unwrap().to_string())
        .collect();
    chains.sort();
    assert_eq!(evidence, chains);
    assert_eq!(p["conflicts"], serde_json::json!([]));
    // The pattern it would add matches what the fourth printed.
    let re = regex::Regex::new(p["rule"]["stderr"].as_str().unwrap()).unwrap();
    let out_file = d.work_dir().join(format!("slurm-{fourth}.out"));
    let printed = std::fs::read_to_string(&out_file).unwrap();
    assert!(re.is_match(&printed), "{re} against {printed:?}");

    // Root accepts it; it is in force at once.
    let out = d.ctl(&["rules", "accept", &sig]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = format!("learnt-{sig}");
    assert!(proposals(&d).is_empty());

    // The next occurrence is retried by the rule at once, and the retry completes.
    let fifth = submit(&d, "e");
    d.wait_state(&fifth, "completed", 4 * MIN);
    let h = d.history(&fifth);
    let decs = decisions(&h);
    assert_eq!(decs.len(), 1, "{h:#}");
    assert_eq!(decs[0]["actor"], "supervisor");
    assert_eq!(decs[0]["action"], "resubmit");
    assert_eq!(decs[0]["classification"], "transient");
    assert!(
        decs[0]["reason"].as_str().unwrap().contains(&name),
        "{:#}",
        decs[0]
    );
    // Naming its proposal as a field of the record (docs/rules.md).
    assert_eq!(decs[0]["proposal"], sig.as_str(), "{:#}", decs[0]);
    assert_eq!(attempts(&h).len(), 2, "{h:#}");
    // The fourth, judged before the rule existed, still waits.
    assert_eq!(d.status(&fourth)[0]["state"], "pending_failed");
}
