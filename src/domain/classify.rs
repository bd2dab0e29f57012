//! The verdict on a finished attempt: pure, no I/O, no clock.
//!
//! Input is what Slurm said (the sacct rows of one run of one job, job row and step rows,
//! plus the tail of its stderr); output is a [`Classification`] with the facts that led
//! there. The table it implements is docs/design.md's ("What happens to an ending"); the
//! order of the checks matters and is explained beside each. What real Slurm prints for
//! each case is in docs/slurm-observed.md.

use crate::config::Rule;
use crate::domain::model::Classification;
use crate::slurm::jobid::{JobId, StepKind};
use crate::slurm::types::{JobState, SacctRow};
use serde::{Deserialize, Serialize};

/// Texts slurmstepd and the kernel write when a job is killed for memory. The first is
/// what Slurm's OverMemoryKill prints (no cgroups); the others cover cgroup kills that
/// surface as a plain signal 9.
const MEMORY_KILL_MARKERS: &[&str] = &[
    "Exceeded job memory limit",
    "Exceeded step memory limit",
    "exceeded memory limit",
    "oom-kill event",
    "oom_kill event",
    "Out Of Memory",
];

/// What Slurm said about one run of an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The attempt's job id as the supervisor knows it (`123` or `123_4`).
    pub job_id: String,
    /// The sacct rows of this run: its job row and its step rows, unchanged.
    pub rows: Vec<SacctRow>,
    /// The last lines of the job's stderr file, when it could be read.
    pub stderr_tail: Option<String>,
    /// The last lines of its stdout file, when that is a different file from stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_tail: Option<String>,
    /// True when Slurm put the job back in the queue itself under the same id after this
    /// run ended (preemption or node failure with requeue allowed).
    pub requeued_by_slurm: bool,
}

/// The verdict and the facts it rests on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub classification: Classification,
    /// One sentence for a person: why this classification.
    pub reason: String,
    /// The rule that matched, for `transient`/`permanent`.
    pub rule: Option<String>,
    /// The rule proposal the matching rule was accepted from (docs/rules.md), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<String>,
    /// The matching rule's owner when it is a user's own rule (docs/rules.md): its
    /// retries count for that user's rule only, never for a config rule of its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_owner_uid: Option<u32>,
    pub state: JobState,
    pub exit_code: String,
    /// Nodes the run used (sacct NodeList), `None` when it never got any.
    pub nodes: Option<String>,
    pub req_mem_bytes: Option<u64>,
    /// The largest MaxRSS over all rows.
    pub max_rss_bytes: Option<u64>,
    pub timelimit_secs: Option<u64>,
    pub elapsed_secs: Option<u64>,
    pub partition: String,
    /// The srun steps (`123.0`, `123_4.1`) that COMPLETED in a run that did not
    /// complete: running the script again would repeat what they did (see
    /// [`completed_steps`]). Empty for a success, and for a job with only its batch step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub completed_steps: Vec<String>,
}

/// Why an observation could not be classified. Nothing is decided from it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassifyError {
    #[error("sacct returned no job row for {0}")]
    NoJobRow(String),
    #[error("job {job} is still {state} in sacct; it has not ended")]
    NotEnded { job: String, state: JobState },
}

/// The srun steps of a run that COMPLETED, in step order: numbered steps (`123.0`,
/// `123_4.1`, `123.0+1`), never `batch`, `extern` or `interactive`. In a run that failed
/// (or was killed for memory or time), these had finished their work before the ending, so
/// a rerun of the script would do it again: a *partial execution*.
pub fn completed_steps(rows: &[SacctRow]) -> Vec<String> {
    let mut steps: Vec<(u32, &str)> = rows
        .iter()
        .filter(|r| r.state == JobState::Completed)
        .filter_map(|r| {
            let id = JobId::parse(&r.job_id).ok()?;
            match id.step()?.kind {
                StepKind::Numbered(n) => Some((n, r.job_id.as_str())),
                _ => None,
            }
        })
        .collect();
    steps.sort();
    steps.into_iter().map(|(_, id)| id.to_string()).collect()
}

/// Classifies one ended run. `rules` are the config's failure rules, first match wins.
pub fn classify(obs: &Observation, rules: &[Rule]) -> Result<Verdict, ClassifyError> {
    let job = obs
        .rows
        .iter()
        .find(|r| !r.is_step() && r.job_id == obs.job_id)
        .or_else(|| obs.rows.iter().find(|r| !r.is_step()))
        .ok_or_else(|| ClassifyError::NoJobRow(obs.job_id.clone()))?;
    if !job.state.is_terminal() && !obs.requeued_by_slurm {
        return Err(ClassifyError::NotEnded {
            job: obs.job_id.clone(),
            state: job.state,
        });
    }
    let nodes = Some(job.node_list.trim())
        .filter(|n| !n.is_empty() && *n != "None assigned" && *n != "(null)")
        .map(str::to_string);
    let max_rss_bytes = obs.rows.iter().filter_map(|r| r.max_rss_bytes).max();
    let stderr = obs.stderr_tail.as_deref().unwrap_or("");
    let verdict = |classification, reason: String, rule: Option<&Rule>| Verdict {
        classification,
        reason,
        rule: rule.map(|r| r.name.clone()),
        proposal: rule.and_then(|r| r.proposal.clone()),
        rule_owner_uid: rule.and_then(|r| r.owner_uid),
        state: job.state,
        exit_code: job.exit_code.to_string(),
        nodes: nodes.clone(),
        req_mem_bytes: job.req_mem_bytes,
        max_rss_bytes,
        timelimit_secs: job.timelimit_secs,
        elapsed_secs: job.elapsed_secs,
        partition: job.partition.clone(),
        completed_steps: if classification == Classification::Completed {
            Vec::new()
        } else {
            completed_steps(&obs.rows)
        },
    };

    // A run that Slurm requeued itself is classified by how it ended; the caller keeps
    // watching the same job id instead of resubmitting.
    if obs.requeued_by_slurm {
        let c = match job.state {
            JobState::NodeFail => Classification::NodeFail,
            JobState::BootFail => Classification::BootFail,
            _ => Classification::Preempted,
        };
        let why = if job.state == JobState::Requeued {
            // `scontrol requeue`: by the job itself (Lightning's auto-requeue), its owner
            // or an admin; not a preemption, though it is watched the same way.
            "REQUEUED by `scontrol requeue` (the job itself, its owner or an admin), and Slurm runs it again under the same id".to_string()
        } else {
            format!(
                "{} and Slurm requeued the job itself under the same id",
                job.state
            )
        };
        return Ok(verdict(c, why, None));
    }

    // A user's cancel comes first: `CANCELLED by N` on the job row is a person's choice,
    // even if a step also shows a memory kill on its way down.
    if job.state == JobState::Cancelled {
        let by = job
            .cancelled_by
            .map(|u| format!(" by uid {u}"))
            .unwrap_or_default();
        return Ok(verdict(
            Classification::Cancelled,
            format!("cancelled{by}"),
            None,
        ));
    }

    // OOM in either shape: OUT_OF_MEMORY on any row (cgroup enforcement, sometimes only
    // on a step while the job row says FAILED or even COMPLETED), or a signal-9 death with
    // a memory-kill message in stderr (OverMemoryKill without cgroups: FAILED 0:9).
    if let Some(r) = obs.rows.iter().find(|r| r.state == JobState::OutOfMemory) {
        return Ok(verdict(
            Classification::Oom,
            format!("{} is OUT_OF_MEMORY ({})", r.job_id, r.exit_code),
            None,
        ));
    }
    let killed_by_9 = obs.rows.iter().any(|r| r.exit_code.signal == 9);
    if killed_by_9 {
        if let Some(m) = MEMORY_KILL_MARKERS.iter().find(|m| stderr.contains(**m)) {
            return Ok(verdict(
                Classification::Oom,
                format!("killed by signal 9 and stderr says {m:?}"),
                None,
            ));
        }
    }

    // OverMemoryKill without cgroups kills a step's processes one at a time
    // (proctrack/linuxproc): a batch script whose program went first can exit with its own
    // code before its turn comes (`python3 big.py || exit 1`: FAILED 1:0, no signal on any
    // row; seen on 22.05 under load). Slurm's own accounting still shows the run over what
    // it asked for, and slurmstepd's line says why: both are needed, as the line alone is
    // the job's own stderr, which its program can print. The line must be slurmstepd's
    // (a program's own "Out Of Memory" about its heap is not a kill), and the request a
    // real one: a job that asked for no memory (ReqMem 0) had no limit to be killed at.
    if job.state == JobState::Failed {
        if let (Some(rss), Some(req)) = (max_rss_bytes, job.req_mem_bytes) {
            if req > 0 && rss > req {
                let stepd = MEMORY_KILL_MARKERS.iter().find(|m| {
                    stderr
                        .lines()
                        .any(|l| l.trim_start().starts_with("slurmstepd") && l.contains(**m))
                });
                if let Some(m) = stepd {
                    return Ok(verdict(
                        Classification::Oom,
                        format!(
                            "used {} MiB, over the {} MiB it asked for, and stderr says {m:?}",
                            rss >> 20,
                            req >> 20
                        ),
                        None,
                    ));
                }
            }
        }
    }

    let simple = match job.state {
        JobState::Completed if job.exit_code.code == 0 && job.exit_code.signal == 0 => Some((
            Classification::Completed,
            "completed with exit code 0:0".to_string(),
        )),
        JobState::Preempted => Some((
            Classification::Preempted,
            "preempted, and not requeued by Slurm".into(),
        )),
        JobState::NodeFail => Some((
            Classification::NodeFail,
            format!(
                "node failure on {}",
                nodes.as_deref().unwrap_or("an unknown node")
            ),
        )),
        JobState::BootFail => Some((
            Classification::BootFail,
            format!(
                "node {} failed to boot",
                nodes.as_deref().unwrap_or("unknown")
            ),
        )),
        JobState::Timeout => Some((
            Classification::Timeout,
            format!(
                "hit its time limit ({})",
                job.timelimit_secs
                    .map(crate::domain::syntax::format_time_limit)
                    .unwrap_or_else(|| "unknown".into())
            ),
        )),
        JobState::Deadline => Some((Classification::Deadline, "reached its --deadline".into())),
        _ => None,
    };
    if let Some((c, reason)) = simple {
        return Ok(verdict(c, reason, None));
    }

    // FAILED (or an odd ending such as COMPLETED with a non-zero code, SPECIAL_EXIT,
    // REVOKED): the configured rules decide, and nothing matching means a person or an
    // agent must look.
    let code = job.exit_code.code;
    for rule in rules {
        let code_ok = rule.exit_codes.is_empty() || rule.exit_codes.contains(&code);
        let text_ok = rule.stderr.as_ref().is_none_or(|re| re.is_match(stderr));
        if code_ok && text_ok {
            let from = rule.proposal.as_ref().map_or_else(String::new, |p| {
                format!(" (accepted from rule proposal {p})")
            });
            return Ok(verdict(
                rule.kind,
                format!(
                    "{} {} matched rule {:?}{from}",
                    job.state, job.exit_code, rule.name
                ),
                Some(rule),
            ));
        }
    }
    Ok(verdict(
        Classification::Ambiguous,
        format!(
            "{} with exit code {} and no rule matched",
            job.state, job.exit_code
        ),
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::slurm::parse::parse_sacct;

    fn rules() -> Vec<Rule> {
        Config::parse(include_str!("../../config/supervisor.toml"), None)
            .unwrap()
            .rules
    }

    fn obs(job_id: &str, sacct: &str, stderr: Option<&str>) -> Observation {
        let parsed = parse_sacct(sacct);
        assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
        Observation {
            job_id: job_id.into(),
            rows: parsed.rows,
            stderr_tail: stderr.map(str::to_string),
            stdout_tail: None,
            requeued_by_slurm: false,
        }
    }

    /// Columns: JobID|JobIDRaw|State|ExitCode|NodeList|MaxRSS|ReqMem|Timelimit|Elapsed|Partition|Restarts|Comment
    #[test]
    fn table_from_real_rows() {
        let cases: &[(&str, &str, Option<&str>, Classification)] = &[
            ("1", "1|1|COMPLETED|0:0|n1||100M|00:10:00|00:00:01|debug|1000|1795611422\n1.batch|1.batch|COMPLETED|0:0|n1|1024K||||||1795611422\n", None, Classification::Completed),
            ("2", "2|2|FAILED|1:0|n1||100M|00:10:00|00:00:01|debug|1000|1795611422\n2.batch|2.batch|FAILED|1:0|n1|1024K||||||1795611422\n", Some("something odd happened\n"), Classification::Ambiguous),
            ("2", "2|2|FAILED|1:0|n1||100M|00:10:00|00:00:01|debug|1000|1795611422\n", Some("ModuleNotFoundError: No module named 'torch'\n"), Classification::Permanent),
            ("2", "2|2|FAILED|1:0|n1||100M|00:10:00|00:00:01|debug|1000|1795611422\n", Some("ConnectionError: Connection refused\n"), Classification::Transient),
            ("2", "2|2|FAILED|127:0|n1||100M|00:10:00|00:00:01|debug|1000|1795611422\n", Some("foo: command not found\n"), Classification::Permanent),
            // OverMemoryKill without cgroups: FAILED 0:9, step CANCELLED by 0, message in stderr.
            ("3", "3|3|FAILED|0:9|n1||100M|00:10:00|00:00:03|debug|1000|1795611422\n3.batch|3.batch|CANCELLED by 0|0:9|n1|269648K||||||1795611422\n",
             Some("slurmstepd-vm: error: StepId=3.batch exceeded memory limit (276119552 > 104857600), being killed\nslurmstepd-vm: error: Exceeded job memory limit\n"), Classification::Oom),
            // The same 0:9 without a memory message is not guessed to be OOM.
            ("3", "3|3|FAILED|0:9|n1||100M|00:10:00|00:00:03|debug|1000|1795611422\n", Some("Killed\n"), Classification::Ambiguous),
            // cgroup shapes: OUT_OF_MEMORY 0:125 on the job row, or only on a step row.
            ("123", "123|123|OUT_OF_MEMORY|0:125|n1||4G|01:00:00|00:10:00|debug|1000|1795611422\n", None, Classification::Oom),
            ("123", "123|123|FAILED|1:0|n1||4G|01:00:00|00:10:00|debug|1000|1795611422\n123.0|123.0|OUT_OF_MEMORY|0:125|n1|4194304K||||||1795611422\n", None, Classification::Oom),
            ("123", "123|123|COMPLETED|0:0|n1||4G|01:00:00|00:10:00|debug|1000|1795611422\n123.0|123.0|OUT_OF_MEMORY|0:125|n1|4194304K||||||1795611422\n", None, Classification::Oom),
            ("8", "8|8|TIMEOUT|0:0|n1||100M|00:01:00|00:01:27|debug|1000|1795611422\n8.batch|8.batch|CANCELLED|0:15|n1|1024K||||||1795611422\n", Some("*** JOB 8 ON vm CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***\n"), Classification::Timeout),
            ("12", "12|12|PREEMPTED|0:0|n1||100M|00:10:00|00:00:20|debug|1000|1795611422\n12.batch|12.batch|CANCELLED|0:15|n1|1024K||||||1795611422\n", None, Classification::Preempted),
            ("7", "7|7|NODE_FAIL|0:0|n1||100M|00:10:00|00:00:20|debug|1000|1795611422\n7.batch|7.batch|CANCELLED|0:15|n1|1024K||||||1795611422\n", None, Classification::NodeFail),
            ("9", "9|9|BOOT_FAIL|0:0|n2||100M|00:10:00|00:00:00|debug|1000|1795611422\n", None, Classification::BootFail),
            ("4", "4|4|CANCELLED by 0|0:0|n1||100M|00:10:00|00:00:05|debug|1000|1795611422\n", None, Classification::Cancelled),
            ("5", "5|5|DEADLINE|0:0|None assigned||100M|00:10:00|00:00:00|debug|1000|1795611422\n", None, Classification::Deadline),
            ("14_3", "14_3|17|FAILED|3:0|n2||100M|00:10:00|00:00:01|debug|1000|1795611422\n14_3.batch|17.batch|FAILED|3:0|n2|1024K||||||1795611422\n", None, Classification::Ambiguous),
        ];
        let rules = rules();
        for (job, sacct, stderr, want) in cases {
            let v = classify(&obs(job, sacct, *stderr), &rules).unwrap();
            assert_eq!(v.classification, *want, "{job}: {sacct} -> {}", v.reason);
        }
    }

    /// The endings Slurm 24.11.5 printed on `scripts/dev-cluster up --slurm 24.11`
    /// (docs/slurm-observed.md), classified as their 22.05 counterparts are.
    #[test]
    fn table_from_real_rows_slurm_24_11() {
        let oom_stderr = "\
slurmstepd-n1: error: StepId=53.batch exceeded memory limit (167526400 > 104857600), being killed
slurmstepd-n1: error: Exceeded job memory limit
slurmstepd-n1: error: *** JOB 53 ON n1 CANCELLED AT 2026-11-22T14:45:53 ***
slurmstepd-n1: error: StepId=53.batch exceeded memory limit (167526400 > 104857600), being killed
slurmstepd-n1: error: Exceeded job memory limit
";
        let node_fail_stderr = "slurmstepd-n1: error: *** JOB 55 ON n1 CANCELLED AT 2026-11-22T14:45:55 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\nTerminated\n";
        let cases: &[(&str, &str, Option<&str>, Classification)] = &[
            ("43", "43|43|COMPLETED|0:0|n1||1000M|00:30:00|00:00:00|debug|1000|1795611422\n43.batch|43.batch|COMPLETED|0:0|n1||||00:00:00|||1795611422\n", None, Classification::Completed),
            ("44", "44|44|FAILED|1:0|n1||1000M|00:30:00|00:00:00|debug|1000|1795611422\n44.batch|44.batch|FAILED|1:0|n1||||00:00:00|||1795611422\n", Some("boom\n"), Classification::Ambiguous),
            // OOM: the slurmstepd-<node>: prefix, the message twice, a CANCELLED line between.
            ("53", "53|53|FAILED|0:9|n1||100M|00:30:00|00:00:01|debug|1000|1795611422\n53.batch|53.batch|CANCELLED by 0|0:9|n1|163600K|||00:00:01|||1795611422\n", Some(oom_stderr), Classification::Oom),
            // NODE_FAIL 1:0 with a CANCELLED batch step without exit code, and "Terminated".
            ("55", "55|55|NODE_FAIL|1:0|n1||1000M|00:30:00|00:00:03|debug|1000|1795611422\n55.batch|55.batch|CANCELLED||n1||||00:00:03|||1795611422\n", Some(node_fail_stderr), Classification::NodeFail),
            ("22", "22|22|NODE_FAIL|1:0|n1||7231M|UNLIMITED|00:00:00|debug|1000|1795611422\n22.batch|22.batch|CANCELLED||n1||||00:00:00|||1795611422\n", None, Classification::NodeFail),
            ("46", "46|46|TIMEOUT|0:0|n1||1000M|00:01:00|00:01:04|debug|1000|1795611422\n46.batch|46.batch|CANCELLED|0:15|n1|3328K|||00:01:05|||1795611422\n", Some("slurmstepd-n1: error: *** JOB 46 ON n1 CANCELLED AT 2026-11-22T14:45:37 DUE TO TIME LIMIT ***\n"), Classification::Timeout),
            // Ended just before the sweep: TIMEOUT 0:0 over a COMPLETED step, no stderr line.
            ("20", "20|20|TIMEOUT|0:0|n1||7231M|00:01:00|00:01:15|debug|1000|1795611422\n20.batch|20.batch|COMPLETED|0:0|n1|3328K|||00:01:15|||1795611422\n", Some(""), Classification::Timeout),
            ("49_2", "49_2|51|FAILED|1:0|n2||1000M|00:30:00|00:00:00|debug|1000|1795611422\n49_2.batch|51.batch|FAILED|1:0|n2||||00:00:00|||1795611422\n", None, Classification::Ambiguous),
        ];
        let rules = rules();
        for (job, sacct, stderr, want) in cases {
            let v = classify(&obs(job, sacct, *stderr), &rules).unwrap();
            assert_eq!(v.classification, *want, "{job}: {sacct} -> {}", v.reason);
        }
        // A NODE_FAIL is a node failure whatever its exit code, even where a rule would
        // match that code, and names its node.
        let everything_permanent = Config::parse(
            "[[rules]]\nname = \"exit-1\"\nkind = \"permanent\"\nexit_codes = [1]\n",
            None,
        )
        .unwrap()
        .rules;
        let v = classify(
            &obs("55", cases[3].1, Some(node_fail_stderr)),
            &everything_permanent,
        )
        .unwrap();
        assert_eq!(v.classification, Classification::NodeFail);
        assert_eq!(v.nodes.as_deref(), Some("n1"));
        assert_eq!(v.exit_code, "1:0");
        // Requeued by Slurm after the node failure (sacct -D's first run of job 46).
        let mut o = obs(
            "46",
            "46|46|NODE_FAIL|1:0|n1||1000M|00:01:00|00:00:03|debug|1000|1795611422\n46.batch|46.batch|CANCELLED||n1||||00:00:03|||1795611422\n",
            None,
        );
        o.requeued_by_slurm = true;
        assert_eq!(
            classify(&o, &rules).unwrap().classification,
            Classification::NodeFail
        );
    }

    /// A rule accepted from a rule proposal names it in its verdict (the decision's
    /// inputs) and its reason; a rule of the site's own names none.
    #[test]
    fn a_rule_from_a_proposal_names_it() {
        let rules = Config::parse(
            "[[rules]]\nname = \"learnt-0123456789ab\"\nkind = \"transient\"\nexit_codes = [1]\nproposal = \"0123456789ab\"\n\
             [[rules]]\nname = \"mine\"\nkind = \"permanent\"\nexit_codes = [2]\n",
            None,
        )
        .unwrap()
        .rules;
        let failed = |code: &str| {
            obs(
                "49",
                &format!("49|49|FAILED|{code}|n2||1000M|00:30:00|00:00:00|debug|1000|1795611422\n"),
                None,
            )
        };
        let v = classify(&failed("1:0"), &rules).unwrap();
        assert_eq!(v.rule.as_deref(), Some("learnt-0123456789ab"));
        assert_eq!(v.proposal.as_deref(), Some("0123456789ab"));
        assert!(
            v.reason
                .ends_with("(accepted from rule proposal 0123456789ab)"),
            "{}",
            v.reason
        );
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["proposal"], "0123456789ab");
        let v = classify(&failed("2:0"), &rules).unwrap();
        assert_eq!(
            (v.rule.as_deref(), v.proposal.as_deref()),
            (Some("mine"), None)
        );
        assert!(serde_json::to_value(&v).unwrap().get("proposal").is_none());
        // What a rules.d file may say is checked: not a proposal's id, not a rule.
        let bad = Config::parse(
            "[[rules]]\nname = \"x\"\nkind = \"transient\"\nexit_codes = [1]\nproposal = \"../etc\"\n",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            bad.contains("is not a rule proposal's id") && bad.starts_with("<config>:5:"),
            "{bad}"
        );
    }

    /// docs/slurm-observed.md (k): srun step 0 completed, step 1 killed for memory, on
    /// 22.05 and 24.11 alike; with and without `set -e` in the script.
    #[test]
    fn completed_srun_steps_are_named() {
        let stderr = "slurmstepd-n1: error: StepId=878.1 exceeded memory limit (170913792 > 104857600), being killed\nslurmstepd-n1: error: Exceeded job memory limit\nsrun: error: n1: task 0: Killed\n";
        for (job, sacct) in [
            ("878", "878|878|FAILED|9:0|n1||100M|00:30:00|00:00:01|debug|1000|1795611422\n878.batch|878.batch|FAILED|9:0|n1|12072K|||00:00:01|||1795611422\n878.0|878.0|COMPLETED|0:0|n1||||00:00:00|||1795611422\n878.1|878.1|CANCELLED by 0|0:9|n1|166908K|||00:00:01|||1795611422\n"),
            ("877", "877|877|COMPLETED|0:0|n1||200M|00:30:00|00:00:02|debug|1000|1795611422\n877.batch|877.batch|COMPLETED|0:0|n1|12060K|||00:00:02|||1795611422\n877.0|877.0|COMPLETED|0:0|n1||||00:00:00|||1795611422\n877.1|877.1|CANCELLED by 0|0:9|n1|269372K|||00:00:02|||1795611422\n"),
        ] {
            let v = classify(&obs(job, sacct, Some(stderr)), &rules()).unwrap();
            assert_eq!(v.classification, Classification::Oom, "{job}");
            assert_eq!(v.completed_steps, vec![format!("{job}.0")], "{job}");
        }
        // Only the batch (and extern) step: not partial. A success: nothing to repeat.
        let o = obs("3", "3|3|FAILED|0:9|n1||100M|00:10:00|00:00:03|debug|1000|1795611422\n3.batch|3.batch|CANCELLED by 0|0:9|n1|269648K||||||1795611422\n3.extern|3.extern|COMPLETED|0:0|n1|1024K||||||1795611422\n", Some("Exceeded job memory limit"));
        assert!(classify(&o, &[]).unwrap().completed_steps.is_empty());
        let o = obs("1", "1|1|COMPLETED|0:0|n1||100M|00:10:00|00:00:01|debug|1000|1795611422\n1.batch|1.batch|COMPLETED|0:0|n1|1024K||||||1795611422\n1.0|1.0|COMPLETED|0:0|n1|1024K||||||1795611422\n", None);
        assert!(classify(&o, &[]).unwrap().completed_steps.is_empty());
        // Array task steps and step order (10 after 2), a timeout of the batch step.
        let o = obs("14_3", "14_3|17|TIMEOUT|0:0|n2||100M|00:01:00|00:01:05|debug|1000|1795611422\n14_3.batch|17.batch|CANCELLED|0:15|n2|1024K||||||1795611422\n14_3.10|17.10|COMPLETED|0:0|n2|1024K||||||1795611422\n14_3.2|17.2|COMPLETED|0:0|n2|1024K||||||1795611422\n14_3.11|17.11|CANCELLED|0:15|n2|1024K||||||1795611422\n", None);
        let v = classify(&o, &[]).unwrap();
        assert_eq!(v.classification, Classification::Timeout);
        assert_eq!(
            v.completed_steps,
            vec!["14_3.2".to_string(), "14_3.10".into()]
        );
    }

    /// A job whose shell outlived its program killed for memory (FAILED 1:0, no signal on
    /// any row: the real rows of a CI run on 22.05) is an OOM when Slurm's accounting shows
    /// it over its request and slurmstepd said why; either alone is not.
    #[test]
    fn a_shell_that_outlived_its_program_killed_for_memory_is_an_oom() {
        let over = "3726|3726|FAILED|1:0|n2||100M|00:30:00|00:00:01|debug|0|1795932089\n3726.batch|3726.batch|FAILED|1:0|n2|164864K||||||1795932089\n";
        let under = "3726|3726|FAILED|1:0|n2||100M|00:30:00|00:00:01|debug|0|1795932089\n3726.batch|3726.batch|FAILED|1:0|n2|64864K||||||1795932089\n";
        let said = "slurm_script: line 2: 12345 Killed python3 -c big\nslurmstepd-n2: error: StepId=3726.batch exceeded memory limit (172879872 > 104857600), being killed\nslurmstepd-n2: error: Exceeded job memory limit\n";
        let v = classify(&obs("3726", over, Some(said)), &rules()).unwrap();
        assert_eq!(v.classification, Classification::Oom, "{}", v.reason);
        assert_eq!(
            v.reason,
            "used 161 MiB, over the 100 MiB it asked for, and stderr says \"Exceeded job memory limit\""
        );
        for (rows, stderr) in [
            (under, Some(said)),
            (over, Some("Traceback: MemoryError\n")),
            (over, None),
        ] {
            let v = classify(&obs("3726", rows, stderr), &rules()).unwrap();
            assert_eq!(v.classification, Classification::Ambiguous, "{stderr:?}");
        }
    }

    /// The FAILED-and-over-its-request OOM needs slurmstepd's own line, not a program's
    /// words that happen to match (a runtime's "Out Of Memory" about its own heap), and a
    /// request to be over: a job that asked for no memory (ReqMem 0, no limit to kill
    /// it) is not an OOM by this rule, whatever it used.
    #[test]
    fn a_failed_job_over_its_request_is_an_oom_only_by_slurmstepds_line_and_a_real_request() {
        let over = "3726|3726|FAILED|1:0|n2||100M|00:30:00|00:00:01|debug|0|1795932089\n3726.batch|3726.batch|FAILED|1:0|n2|164864K||||||1795932089\n";
        let no_request = "3726|3726|FAILED|1:0|n2||0|00:30:00|00:00:01|debug|0|1795932089\n3726.batch|3726.batch|FAILED|1:0|n2|164864K||||||1795932089\n";
        let stepd = "slurmstepd-n2: error: Exceeded job memory limit\n";
        let own =
            "solver: Out Of Memory in the cache of step 3 (raise CACHE_MB)\nsolver: giving up\n";
        for (rows, stderr) in [(over, own), (no_request, stepd), (no_request, own)] {
            let v = classify(&obs("3726", rows, Some(stderr)), &rules()).unwrap();
            assert_eq!(
                v.classification,
                Classification::Ambiguous,
                "{rows:?} {stderr:?}: {}",
                v.reason
            );
        }
        let v = classify(&obs("3726", over, Some(stepd)), &rules()).unwrap();
        assert_eq!(v.classification, Classification::Oom, "{}", v.reason);
    }

    #[test]
    fn facts_are_carried() {
        let o = obs("3", "3|3|FAILED|0:9|n1||100M|00:10:00|00:00:03|debug|1000|1795611422\n3.batch|3.batch|CANCELLED by 0|0:9|n1|269648K||||||1795611422\n", Some("Exceeded job memory limit"));
        let v = classify(&o, &[]).unwrap();
        assert_eq!(v.req_mem_bytes, Some(100 << 20));
        assert_eq!(v.max_rss_bytes, Some(269648 * 1024));
        assert_eq!(v.timelimit_secs, Some(600));
        assert_eq!(v.nodes.as_deref(), Some("n1"));
        let o = obs(
            "5",
            "5|5|DEADLINE|0:0|None assigned||100M|00:10:00|00:00:00|debug|1000|1795611422\n",
            None,
        );
        assert_eq!(classify(&o, &[]).unwrap().nodes, None);
    }

    #[test]
    fn requeued_runs_are_marked() {
        let mut o = obs(
            "4",
            "4|4|PREEMPTED|0:0|n1||100M|00:10:00|00:00:20|debug|1000|1795611422\n",
            None,
        );
        o.requeued_by_slurm = true;
        let v = classify(&o, &[]).unwrap();
        assert_eq!(v.classification, Classification::Preempted);
        assert!(v.reason.contains("requeued"));
    }

    #[test]
    fn live_or_missing_jobs_are_not_classified() {
        let o = obs(
            "4",
            "4|4|RUNNING|0:0|n1||100M|00:10:00|00:00:20|debug|1000|1795611422\n",
            None,
        );
        assert!(matches!(
            classify(&o, &[]),
            Err(ClassifyError::NotEnded { .. })
        ));
        let o = Observation {
            job_id: "4".into(),
            rows: vec![],
            stderr_tail: None,
            stdout_tail: None,
            requeued_by_slurm: false,
        };
        assert_eq!(classify(&o, &[]), Err(ClassifyError::NoJobRow("4".into())));
    }
}
