//! Adopting a job that was submitted with plain sbatch: its submission is rebuilt from
//! what Slurm says about it (`scontrol show job`, `scontrol write batch_script`). What it
//! asks Slurm, on the loop as the daemon, is the desk's `Lookup` (`engine/runner.rs`).

use crate::daemon::access::Caller;
use crate::daemon::access::{internal, parse_id, sees_all, Handled};
use crate::daemon::engine::Desk;
use crate::plumbing::clock::now;

use super::Plan;
use crate::domain::sbatch_args;
use crate::protocol::views::AdoptAnswer;
use crate::protocol::{ErrorKind, Request, Response};
use crate::slurm::Slurm;
use crate::store::{chain_label, NewSubmission};

/// Rebuilds an sbatch command line from what `scontrol show job` says about a job that
/// was submitted without the supervisor. Script arguments are split on blanks (scontrol
/// joins them with spaces, so an argument containing one cannot be recovered).
pub fn argv_from_scontrol(
    job: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<String>, String> {
    let set = |k: &str| {
        job.get(k).map(String::as_str).filter(|v| {
            !v.is_empty()
                && !matches!(
                    *v,
                    "(null)" | "N/A" | "UNLIMITED" | "NONE" | "Partition_Limit"
                )
        })
    };
    let mut argv = Vec::new();
    let mut add = |opt: &str, key: &str| {
        if let Some(v) = set(key) {
            argv.push(format!("--{opt}={v}"));
        }
    };
    add("job-name", "JobName");
    add("partition", "Partition");
    add("account", "Account");
    add("qos", "QOS");
    add("time", "TimeLimit");
    add("nodes", "NumNodes");
    add("ntasks", "NumTasks");
    add("cpus-per-task", "CPUs/Task");
    add("mem", "MinMemoryNode");
    add("mem-per-cpu", "MinMemoryCPU");
    add("exclude", "ExcNodeList");
    add("chdir", "WorkDir");
    add("output", "StdOut");
    add("error", "StdErr");
    // Who Slurm mails and when (the chain's own mail follows them too, docs/configuration.md
    // "Notifications"); without a --mail-type scontrol shows NONE, which adds nothing.
    add("mail-type", "MailType");
    if set("MailType").is_some() {
        add("mail-user", "MailUser");
    }
    if set("Requeue") == Some("0") {
        argv.push("--no-requeue".into());
    }
    if set("Comment").is_some() {
        argv.push(format!("--comment={}", job["Comment"]));
    }
    let command = set("Command").ok_or(
        "scontrol shows no Command for it (an interactive or --wrap job cannot be adopted)",
    )?;
    argv.extend(command.split_whitespace().map(str::to_string));
    Ok(argv)
}

/// What an adopted job's retries cannot have exactly as it was submitted: each a sentence
/// for its owner, shown by `history` (docs/plain-sbatch.md "What is rebuilt, and what is
/// not"). Never a guess at the lost value: what Slurm shows of it is quoted as its data.
pub fn not_recovered(job: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    let mut out = vec![
        "the environment sbatch gave the job (no Slurm command gives it back): retries run with only what Slurm sets".to_string(),
    ];
    let command = job.get("Command").map(String::as_str).unwrap_or("");
    if command.split_whitespace().count() > 1 {
        out.push(
            "the script's arguments exactly: Slurm joins them with blanks, so one that held a blank is now several".into(),
        );
    }
    // Options Slurm shows that the rebuilt command line does not carry.
    const NOT_CARRIED: &[(&str, &str)] = &[
        ("Dependency", "--dependency"),
        ("Features", "--constraint"),
        ("TresPerNode", "--gres"),
        ("TresPerJob", "--gpus"),
        ("TresPerTask", "--tres-per-task"),
        ("Licenses", "--licenses"),
        ("Reservation", "--reservation"),
        ("ReqNodeList", "--nodelist"),
        ("Network", "--network"),
        ("Deadline", "--deadline"),
    ];
    for (key, option) in NOT_CARRIED {
        if let Some(v) = job
            .get(*key)
            .map(String::as_str)
            .filter(|v| !v.is_empty() && !matches!(*v, "(null)" | "N/A" | "NONE" | "Unknown"))
        {
            out.push(format!(
                "{option} ({key}={}): retries are submitted without it",
                v.escape_debug()
            ));
        }
    }
    out
}

/// `adopt JOBID...`: jobs submitted with plain sbatch, supervised from now on.
pub struct Adopt {
    pub job_ids: Vec<String>,
}

impl super::Write for Adopt {
    fn into_request(self) -> Request {
        Request::Adopt {
            job_ids: self.job_ids,
        }
    }

    async fn begin<S: Slurm>(
        self,
        desk: &mut Desk<'_, S>,
        Caller { uid, .. }: Caller,
        _: tracing::Span,
    ) -> Plan {
        Plan::answered(adopt(desk, &self.job_ids, uid).await)
    }
}

/// Job ids one `adopt` request may name: each costs two Slurm calls on the daemon's loop.
pub const MAX_ADOPT_IDS: usize = 100;

pub async fn adopt<S: Slurm>(
    desk: &mut Desk<'_, S>,
    job_ids: &[String],
    uid: u32,
) -> Handled<AdoptAnswer> {
    if job_ids.len() > MAX_ADOPT_IDS {
        return Err(Response::error(
            ErrorKind::Usage,
            format!(
                "{} job ids in one adopt; at most {MAX_ADOPT_IDS} at a time",
                job_ids.len()
            ),
        ));
    }
    for id in job_ids {
        if !matches!(parse_id(id)?, crate::domain::ids::IdRef::Job(_)) {
            return Err(Response::error(
                ErrorKind::Usage,
                format!("cannot adopt {id:?}: give the job id of a plain job, e.g. 12345"),
            ));
        }
    }
    let mut adopted = Vec::new();
    for id in job_ids {
        let id = &id.trim().to_string();
        adopted.extend(adopt_job(desk, id, uid, Owner::Caller).await?);
    }
    Ok(AdoptAnswer { adopted })
}

/// Whose job an adoption may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// A caller's request: their own job (root and the daemon's user: anyone's).
    Caller,
    /// A plain-sbatch note (`daemon::plain`): exactly the note's owner's job, root's too.
    Exactly,
    /// A job the plain-sbatch job_submit script marked (`daemon::plain`): exactly that
    /// uid's job, whose record's `AdminComment` is exactly the mark given.
    Marked(&'static str),
}

/// Adopts one live job for `uid` (see [`Owner`]); the chains it made. The one engine of
/// adoption: `adopt` requests and the plain-sbatch notes both come here.
pub async fn adopt_job<S: Slurm>(
    desk: &mut Desk<'_, S>,
    id: &str,
    uid: u32,
    who: Owner,
) -> Handled<Vec<String>> {
    {
        let usage =
            |m: String| Response::error(ErrorKind::Usage, format!("cannot adopt {id}: {m}"));
        let id = &id.to_string();
        // Whose job it is comes first: nothing of another user's job (whether it is an
        // array, heterogeneous, supervised, or there at all) is told to a caller it does
        // not belong to, who gets the answer an unknown job gets. From squeue's fields,
        // which Slurm writes: in `scontrol show job` the owner's own text (name, comment,
        // command, paths) sits among the keys and can hold ` UserId=root(0)`. The user
        // name is the owner uid's account, never a name read from text.
        let unknown = || {
            Response::error(
                ErrorKind::NotFound,
                format!("Slurm shows no live job {id} of yours; only your own pending or running job can be adopted (squeue --me lists them)"),
            )
        };
        let (owner, state) = desk
            .slurm
            .job_owner_of_any(id)
            .await
            .map_err(|e| {
                Response::error(
                    ErrorKind::Unavailable,
                    format!("cannot ask Slurm about {id}: {e}"),
                )
            })?
            .ok_or_else(unknown)?;
        let allowed = match who {
            Owner::Caller => sees_all(uid) || owner == uid,
            Owner::Exactly | Owner::Marked(_) => owner == uid,
        };
        if !allowed {
            return Err(match who {
                Owner::Caller => unknown(),
                // A plain-sbatch note or mark naming another user's job: the daemon's
                // own bookkeeping, never shown to the note's owner (`daemon::plain`).
                Owner::Exactly | Owner::Marked(_) => Response::error(
                    ErrorKind::Forbidden,
                    format!("job {id} belongs to another user"),
                ),
            });
        }
        if !desk.store.resolve(id)?.is_empty() {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!("{id} is already supervised"),
            ));
        }
        let job = desk.slurm.show_job(id).await.map_err(|e| match e {
            // Gone since squeue showed it.
            crate::slurm::SlurmError::Rejected { .. } => unknown(),
            // A record that cannot be read as Slurm wrote it: asking again will not help.
            e @ crate::slurm::SlurmError::Garbage { .. } => {
                Response::error(ErrorKind::Usage, format!("cannot adopt {id}: {e}"))
            }
            e => Response::error(
                ErrorKind::Unavailable,
                format!("cannot ask Slurm about {id}: {e}"),
            ),
        })?;
        if job.contains_key("HetJobId") {
            return Err(usage(
                "heterogeneous jobs are not supervised (its components would be retried apart)"
                    .into(),
            ));
        }
        if job.contains_key("ArrayJobId")
            || job.get("JobId").map(String::as_str) != Some(id.as_str())
        {
            return Err(usage(
                "array jobs cannot be adopted yet; submit arrays with supervisorctl submit".into(),
            ));
        }
        // A job with this store's tag is the job of one of its launches, whose sbatch
        // answer was lost or not recorded yet: reconciliation finds it by that tag and
        // records it on its own chain. Adopted here too, it would be watched and retried
        // twice (docs/guarantees.md).
        let ours = format!("ssv-{}-", desk.store.instance());
        if let Some(tag) = job
            .get("Comment")
            .and_then(|c| crate::daemon::sbatch::tags_in(c).find(|t| t.starts_with(&ours)))
        {
            return Err(Response::error(
                ErrorKind::Conflict,
                format!("{id} carries this supervisor's tag {tag}: it is the job of a supervised chain, recorded on it by the next cycle"),
            ));
        }
        let state = state.ok_or_else(|| {
            Response::error(
                ErrorKind::NotFound,
                format!("squeue shows no single live job {id}; only a pending or running job can be adopted"),
            )
        })?;
        // The listing of marks is a candidate only (an admin comment with a line break could
        // make a line up): the mark must be the record's, which cannot span lines and names
        // each key once.
        if let Owner::Marked(mark) = who {
            if job.get("AdminComment").map(String::as_str) != Some(mark) {
                return Err(Response::error(
                    ErrorKind::Forbidden,
                    format!("job {id} does not carry the plain-sbatch mark"),
                ));
            }
        }
        // A plain-sbatch note may come after its job ended (one killed for memory within a
        // second, before the next cycle): while Slurm still knows the job, its script can
        // be read and the ending is judged by the next poll like any other. A request
        // adopts only a pending or running job.
        if state.is_terminal() && who == Owner::Caller {
            return Err(usage(format!(
                "it is {}; only a pending or running job can be adopted",
                state.as_str()
            )));
        }
        let user = crate::slurm::RunAs::lookup(owner)
            .map(|a| a.user.to_string_lossy().into_owned())
            .ok_or_else(|| {
                usage(format!(
                    "its owner, uid {owner}, has no account on this host; nothing is run on its behalf"
                ))
            })?;
        if let Some(c) = job.get("Comment") {
            crate::domain::sbatch_args::check_comment(c).map_err(|e| usage(e.to_string()))?;
        }
        let argv = argv_from_scontrol(&job).map_err(usage)?;
        let script = desk.slurm.batch_script(id).await.map_err(|e| {
            Response::error(
                ErrorKind::Unavailable,
                format!("cannot read the batch script of {id}: {e}"),
            )
        })?;
        let max = desk.config.limits.max_script_size.0;
        if script.len() as u64 > max {
            return Err(usage(format!(
                "its batch script is {} bytes, more than limits.max_script_size ({max} bytes)",
                script.len()
            )));
        }
        let submitted =
            sbatch_args::Submitted::read(&argv, Some(&script)).map_err(|e| usage(e.to_string()))?;
        // The script's `#SSV` lines (docs/continuation.md). A mistake in them does not leave
        // the job unsupervised: it is supervised without continuation, and `history` says why.
        let (continuation, ssv_error) =
            match crate::domain::continuation::Continuation::from_script(&script) {
                Ok(c) => (c, None),
                Err(e) => (
                    None,
                    Some(format!(
                        "continuation: {e}; the job is supervised without continuation"
                    )),
                ),
            };
        let new = NewSubmission {
            owner_uid: owner,
            user,
            cwd: job.get("WorkDir").cloned().unwrap_or_else(|| "/".into()),
            env: Vec::new(),
            script_name: submitted
                .cmd
                .script
                .as_deref()
                .and_then(|p| std::path::Path::new(p).file_name())
                .map(|n| n.to_string_lossy().into_owned()),
            script: Some(script),
            max_retries: desk.config.retry.max_retries,
            restartable: false,
            array_tasks: None,
            continuation: continuation.map(Box::new),
            argv,
        };
        // An adopted job's submission is kept like a submitted one: it counts in its
        // owner's limits.
        let size = new.script.as_ref().map_or(0, Vec::len)
            + new.cwd.len()
            + new.argv.iter().map(|a| a.len() + 3).sum::<usize>();
        super::submit::check_room(desk.store, &desk.config.limits, owner, 1, size as u64)?;
        let t = now();
        let l = crate::daemon::sbatch::begin_submission(
            desk.store,
            desk.config,
            &new,
            &submitted,
            None,
            t,
        )
        .map_err(internal)?;
        // Said before the job counts as supervised, so no chain of it is ever shown
        // without what its retries lack.
        let mut items = not_recovered(&job);
        items.extend(ssv_error);
        desk.store.note_not_recovered(l.submission_id, &items)?;
        desk.store.launch_submitted(l.id, id, t)?;
        Ok(desk
            .store
            .resolve(id)?
            .into_iter()
            .map(chain_label)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mallory asks to adopt alice's jobs: an array, a plain one, one already supervised.
    /// She learns nothing of them: each answer is the one a job that does not exist gets.
    /// Alice herself is told what her array is.
    #[tokio::test]
    async fn another_users_job_is_answered_as_an_unknown_one() {
        use crate::slurm::fake::FakeSlurm;
        use crate::slurm::SbatchRequest;
        // Alice must have an account on this host (a job is adopted only for one):
        // `nobody`'s, which every host has; mallory's uid needs none.
        let alice = nix::unistd::User::from_name("nobody")
            .unwrap()
            .expect("an account named nobody")
            .uid
            .as_raw();
        let mallory = 1002;
        assert_ne!(alice, mallory);
        let fake = FakeSlurm::new();
        let mut engine = crate::daemon::engine::Engine::new(
            crate::config::Config::parse("", None).unwrap(),
            crate::store::Store::in_memory().unwrap(),
            fake.clone(),
        );
        let submit = |argv: &[&str]| SbatchRequest {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            cwd: "/tmp".into(),
            env: Vec::new(),
            stdin: Some(b"#!/bin/sh\ntrue\n".to_vec()),
            run_as: None,
            held: false,
        };
        let array = fake.sbatch(&submit(&["--array=0-1"])).await.unwrap();
        for t in 0..2 {
            assert!(fake.set_owner(&format!("{array}_{t}"), alice));
        }
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("job.sh");
        std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
        let plain = fake
            .sbatch(&submit(&[script.to_str().unwrap()]))
            .await
            .unwrap();
        assert!(fake.set_owner(&plain, alice));
        let answer = |r: Handled<AdoptAnswer>, id: &str| match r {
            Err(Response::Error(e)) => (e.kind, e.message.replace(id, "ID")),
            other => panic!("{id}: {other:?}"),
        };
        let unknown = answer(
            adopt(&mut engine.desk(), &["4242".into()], mallory).await,
            "4242",
        );
        assert_eq!(unknown.0, ErrorKind::NotFound);
        for id in [&array, &plain] {
            let theirs = answer(
                adopt(&mut engine.desk(), std::slice::from_ref(id), mallory).await,
                id,
            );
            assert_eq!(theirs, unknown, "{id}");
        }
        // Supervised (alice adopted it): still nothing for mallory, not even that.
        adopt(&mut engine.desk(), std::slice::from_ref(&plain), alice)
            .await
            .unwrap();
        let theirs = answer(
            adopt(&mut engine.desk(), std::slice::from_ref(&plain), mallory).await,
            &plain,
        );
        assert_eq!(theirs, unknown);
    }

    fn job(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn what_is_not_carried_is_said_and_defaults_are_not() {
        let all_defaults = not_recovered(&job(&[
            ("Dependency", "(null)"),
            ("Features", "(null)"),
            ("Reservation", "(null)"),
            ("ReqNodeList", "(null)"),
            ("Licenses", "(null)"),
            ("Network", "(null)"),
            ("Deadline", "N/A"),
            ("Command", "/home/me/train.sh"),
        ]));
        assert_eq!(all_defaults.len(), 1, "{all_defaults:?}");
        assert!(all_defaults[0].starts_with("the environment"));
        let some = not_recovered(&job(&[
            ("Dependency", "afterok:12(unfulfilled)"),
            ("TresPerNode", "gres/gpu:1"),
            ("Features", "a\tb"),
            ("Command", "/home/me/train.sh --lr 0.1"),
        ]));
        assert_eq!(some.len(), 5, "{some:?}");
        assert!(some[1].starts_with("the script's arguments"));
        assert!(some
            .iter()
            .any(|s| s.starts_with("--dependency (Dependency=afterok:12(unfulfilled))")));
        assert!(some
            .iter()
            .any(|s| s.starts_with("--gres (TresPerNode=gres/gpu:1)")));
        assert!(some.iter().any(|s| s.starts_with("--constraint")));
    }

    #[test]
    fn the_mail_options_are_carried_and_none_is_nothing() {
        let argv = argv_from_scontrol(&job(&[
            ("JobName", "train"),
            ("MailType", "END,FAIL"),
            ("MailUser", "me@example.org"),
            ("Command", "/home/me/train.sh"),
        ]))
        .unwrap();
        assert_eq!(
            argv,
            [
                "--job-name=train",
                "--mail-type=END,FAIL",
                "--mail-user=me@example.org",
                "/home/me/train.sh"
            ]
        );
        let argv = argv_from_scontrol(&job(&[
            ("MailType", "NONE"),
            ("MailUser", "me"),
            ("Command", "/home/me/train.sh"),
        ]))
        .unwrap();
        assert_eq!(argv, ["/home/me/train.sh"]);
    }
}
