//! Turning a recorded submission into an sbatch call, and finding a launch again by its
//! tag. The argv is built once, stored with the launch's intent, and reused verbatim if
//! the launch has to be repeated after a crash.

use crate::config::Config;
use crate::domain::dependency::Resolved;
use crate::domain::model::RetryPlan;
use crate::domain::sbatch_args::{self, Overrides, Submitted};
use crate::slurm::jobid::base_job_id;
use crate::slurm::{RunAs, SbatchRequest, Slurm, SlurmError};
use crate::store::{Launch, NewSubmission, Store, StoreError, Submission};
use regex::Regex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What became of one sbatch.
#[derive(Debug)]
pub enum LaunchOutcome {
    Submitted(String),
    /// sbatch answered with a refusal: nothing was created.
    Refused {
        code: i32,
        stderr: String,
    },
    /// No usable answer: the job may or may not exist; the launch stays an intent and is
    /// looked up by its tag before anything is submitted again.
    Unknown(SlurmError),
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the recorded sbatch command cannot be read: {0}")]
    Args(#[from] sbatch_args::ArgsError),
    #[error("its --dependency cannot be sent as it is: {0}")]
    Dependency(#[from] crate::domain::dependency::ResolveError),
    #[error("cannot write the script snapshot {path}: {source}")]
    Snapshot {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn tag_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"ssv-[0-9a-f]{8}-L[0-9]+-c[0-9]+\.[0-9]+").expect("valid regex"))
}

/// The supervisor's tags inside a job comment (a user's own comment may quote an older one).
pub fn tags_in(comment: &str) -> impl Iterator<Item = &str> {
    tag_regex().find_iter(comment).map(|m| m.as_str())
}

/// Where the script snapshot of a launch is written for sbatch to read. The file keeps
/// the script's own name, so Slurm's default job name stays the same.
pub fn snapshot_path(state_dir: &Path, launch_id: i64, script_name: &str) -> PathBuf {
    state_dir
        .join("scripts")
        .join(format!("L{launch_id}"))
        .join(script_name)
}

/// Writes a snapshot where sbatch (running as `owner`, when given) can read it and no one
/// else can. The launch's folder is made anew, root's (0711: no user can list it or plant
/// anything in it), replacing whatever an earlier try left; the file is created fresh
/// (`O_EXCL`, never an existing inode someone may hold open), without following links,
/// and handed to the owner by descriptor (0600).
fn write_snapshot(path: &Path, content: &[u8], owner: Option<&RunAs>) -> Result<(), PrepareError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let err = |source| PrepareError::Snapshot {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().expect("a snapshot path has a folder");
    remove_snapshot(path);
    if let Some(scripts) = dir.parent() {
        std::fs::create_dir_all(scripts).map_err(err)?;
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(err)?;
    if owner.is_some() {
        // Set explicitly: the daemon's umask (077) masks the mode given at creation.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).map_err(err)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)
        .map_err(err)?;
    f.write_all(content).map_err(err)?;
    if let Some(who) = owner {
        std::os::unix::fs::fchown(&f, Some(who.uid), Some(who.gid)).map_err(err)?;
    }
    Ok(())
}

/// Removes a launch's snapshot folder. Only the daemon can create anything in
/// `scripts/`, so what is there is its own.
fn remove_snapshot(path: &Path) {
    if let Some(dir) = path.parent() {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot remove the script snapshot {}: {e}", dir.display()),
        }
    }
}

/// Removes every snapshot folder, at start: each sbatch writes its own afresh, so any
/// folder there is left over from a daemon that stopped mid-launch.
pub fn clear_snapshots(state_dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(state_dir.join("scripts"))? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Who Slurm commands for `owner_uid` run as: the owner themself when the daemon runs as
/// root for other users (system-wide), else the daemon's own user.
pub fn run_as(owner_uid: u32) -> Result<Option<RunAs>, String> {
    if !nix::unistd::geteuid().is_root() || owner_uid == 0 {
        return Ok(None);
    }
    RunAs::lookup(owner_uid).map(Some).ok_or_else(|| {
        format!("uid {owner_uid} has no account on this host; nothing is run as root on its behalf")
    })
}

/// The supervisor's changes to the user's command. Options it sets on the command line
/// replace the script's `#SBATCH` ones, so the script's comment and excluded nodes are
/// carried over into them.
/// The warning a continuing job gets before its time limit (docs/continuation.md):
/// `B:USR1@<continuation.signal_grace>`, unless its command line or script sets a
/// `--signal` of its own.
pub fn warning_signal(
    config: &Config,
    continuation: Option<&crate::domain::continuation::Continuation>,
    s: &Submitted,
    env: &[(String, String)],
) -> Option<String> {
    continuation?;
    // sbatch reads SBATCH_SIGNAL too (under the command line, over the script).
    if s.option("signal").is_some() || env.iter().any(|(k, _)| k == "SBATCH_SIGNAL") {
        return None;
    }
    Some(format!(
        "B:USR1@{}",
        config.continuation.signal_grace.0.as_secs()
    ))
}

/// The supervisor's changes to the user's command. Options it sets on the command line
/// replace the script's `#SBATCH` ones, so the script's comment and excluded nodes are
/// carried over into them. (A continuing job's warning signal is added by [`build_argv`].)
fn overrides(
    s: &Submitted,
    plan: &RetryPlan,
    array: Option<String>,
    tag: &str,
    script_path: Option<&Path>,
    dep: Option<&Resolved>,
    notify_mail: bool,
) -> Overrides {
    let comment = match s.option("comment") {
        Some(c) if !c.is_empty() => format!("{c} {tag}"),
        _ => tag.to_string(),
    };
    let mut exclude = Vec::new();
    if !plan.exclude.is_empty() && s.cmd.get("exclude").is_none() {
        exclude.extend(s.directives.get("exclude").map(str::to_string));
    }
    exclude.extend(plan.exclude.iter().cloned());
    Overrides {
        mem_mb: plan.mem_mb,
        time_limit: plan.time_secs.map(crate::slurm::parse::format_time_limit),
        exclude,
        array,
        partition: plan.partition.clone(),
        comment: Some(comment),
        script_path: script_path.map(|p| p.display().to_string()),
        dependency: dep.filter(|d| d.changed).map(|d| d.expr.to_string()),
        hold: dep.is_some_and(Resolved::held),
        // The chain-level mail replaces Slurm's per-attempt ones (`[notify] mail`); the
        // script's `#SBATCH --mail-type` is overridden from the command line the same way.
        mail_type: if notify_mail {
            s.option("mail-type")
                .and_then(crate::domain::notification::supervised_mail_type)
        } else {
            None
        },
        signal: None,
    }
}

/// A submission's `--dependency` resolved against the supervised chains of its owner it
/// names ([`crate::domain::dependency::resolve`]): chain ids and earlier attempts become the
/// chains' latest jobs, afterany/afternotok on unfinished chains become gates (the job is
/// held). `None` when it has no dependency or one this cannot read (sbatch judges it).
pub fn resolve_dependency(
    store: &Store,
    owner_uid: u32,
    s: &Submitted,
    now: i64,
) -> Result<Option<Resolved>, PrepareError> {
    let Some(value) = s.option("dependency") else {
        return Ok(None);
    };
    let Ok(expr) = crate::domain::dependency::Expr::parse(value) else {
        return Ok(None);
    };
    let jobs: Vec<String> = expr.targets().map(|(_, t)| t.job.clone()).collect();
    let recent = now - crate::store::JOB_IDS_NAME_CHAINS_FOR;
    let Some(facts) = store.upstream_facts(owner_uid, jobs.iter().map(String::as_str), recent)?
    else {
        // Passed to sbatch as the user wrote it: Slurm judges it, per attempt.
        tracing::warn!(
            "a --dependency names more than {} supervised jobs; it is passed to sbatch as it is, without following retries",
            crate::store::MAX_UPSTREAM_CHAINS
        );
        return Ok(None);
    };
    if facts.is_empty()
        && !jobs
            .iter()
            .any(|j| crate::domain::dependency::chain_target(j).is_some())
    {
        return Ok(None);
    }
    Ok(Some(crate::domain::dependency::resolve(&expr, &facts)?))
}

/// The argv of a launch: the user's command with the supervisor's changes.
#[allow(clippy::too_many_arguments)]
fn build_argv(
    s: &Submitted,
    plan: &RetryPlan,
    array: Option<String>,
    tag: &str,
    script_path: Option<&Path>,
    dep: Option<&Resolved>,
    notify_mail: bool,
    signal: Option<String>,
) -> Vec<String> {
    let o = Overrides {
        signal,
        ..overrides(s, plan, array, tag, script_path, dep, notify_mail)
    };
    sbatch_args::rebuild(&s.cmd, &o)
}

/// Refuses, before anything is recorded, a retry that sbatch would refuse for a reason
/// visible here: bad overrides, or new memory for a script that asks for memory per CPU
/// or GPU in `#SBATCH` lines (sbatch 22.05 rejects `--mem` beside those, and the
/// supervisor does not rewrite the user's script).
fn check(s: &Submitted, o: &Overrides) -> Result<(), PrepareError> {
    if o.mem_mb.is_some() {
        if let Some(opt) = sbatch_args::script_mem_conflict(&s.directives) {
            return Err(sbatch_args::ArgsError::BadOverride(format!(
                "the script asks for memory with #SBATCH --{}, and sbatch refuses a per-node --mem beside it; \
                 the memory of this job cannot be raised without editing its script",
                opt.name
            ))
            .into());
        }
    }
    sbatch_args::check_overrides(&s.cmd, o)?;
    Ok(())
}

/// The rows of the jobs a submission waits on (its `--dependency`, command line first,
/// else its script's `#SBATCH` line: kind and job), at most
/// [`crate::domain::dependency::MAX_DEPENDENCY_EDGES`]; nothing when it cannot be read. The
/// store keeps them as given: the writer computes them here, once
/// ([`begin_submission`]), and a store that must read them itself (a store or journal
/// entry from before they were kept) is given this function as its
/// [`crate::store::DependencyReader`] by whoever opens it.
pub fn dependency_rows(argv: &[String], script: Option<&[u8]>) -> Vec<(String, String)> {
    Submitted::read(argv, script)
        .map(|s| dependency_rows_of(&s))
        .unwrap_or_default()
}

/// [`dependency_rows`] of a submission read already.
fn dependency_rows_of(s: &Submitted) -> Vec<(String, String)> {
    s.option("dependency")
        .map(crate::domain::dependency::dependency_edges)
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.kind, e.job))
        .collect()
}

/// Records a new submission and the intent of its first launch, and with `request_id`
/// the request that made it, in one transaction.
pub fn begin_submission(
    store: &mut Store,
    config: &Config,
    new: &NewSubmission,
    submitted: &Submitted,
    request_id: Option<&str>,
    now: i64,
) -> Result<Launch, PrepareError> {
    let dep = resolve_dependency(store, new.owner_uid, submitted, now)?;
    let edges = dep.as_ref().map(|d| d.edges.clone()).unwrap_or_default();
    let signal = warning_signal(config, new.continuation.as_deref(), submitted, &new.env);
    // `submitted` is `new`'s argv and script, read: its rows are read from it, once.
    let rows = dependency_rows_of(submitted);
    let launch = store.create_submission_requested(new, &edges, &rows, request_id, now, |tag| {
        let script = new
            .script_name
            .as_deref()
            .map(|n| snapshot_path(&config.state_dir, launch_id_in(tag), n));
        build_argv(
            submitted,
            &RetryPlan::default(),
            None,
            tag,
            script.as_deref(),
            dep.as_ref(),
            config.notify.mail,
            signal,
        )
    })?;
    Ok(launch)
}

/// The launch id inside a tag (`ssv-<instance>-L<id>-...`).
fn launch_id_in(tag: &str) -> i64 {
    tag.split('-')
        .find_map(|p| p.strip_prefix('L'))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Records the intent of relaunching `chains` (all of submission `sub`) in one sbatch.
pub fn begin_relaunch(
    store: &mut Store,
    config: &Config,
    sub: &Submission,
    chains: &[i64],
    now: i64,
) -> Result<Launch, PrepareError> {
    let submitted = Submitted::read(&sub.argv, sub.script.as_deref())?;
    let mut tasks = Vec::new();
    let mut plan = RetryPlan::default();
    for &c in chains {
        if let Some(ch) = store.chain(c)? {
            tasks.extend(ch.array_task);
            plan = ch.plan;
        }
    }
    let array = if tasks.is_empty() {
        None
    } else {
        tasks.sort_unstable();
        let throttle = submitted
            .option("array")
            .and_then(sbatch_args::array_throttle);
        let list = sbatch_args::format_array_list(&tasks);
        Some(match throttle {
            Some(t) => format!("{list}%{t}"),
            None => list,
        })
    };
    let placeholder = sub
        .script_name
        .as_deref()
        .map(|n| snapshot_path(&config.state_dir, 0, n));
    // The chains it waits on have moved on since it was submitted: their latest jobs.
    let dep = resolve_dependency(store, sub.owner_uid, &submitted, now)?;
    check(
        &submitted,
        &overrides(
            &submitted,
            &plan,
            array.clone(),
            "check",
            placeholder.as_deref(),
            dep.as_ref(),
            config.notify.mail,
        ),
    )?;
    if let Some(d) = &dep {
        store.add_waits(sub.id, &d.edges)?;
    }
    let signal = warning_signal(config, sub.continuation.as_ref(), &submitted, &sub.env);
    let launch = store.begin_relaunch(sub.id, chains, now, |tag| {
        let script = sub
            .script_name
            .as_deref()
            .map(|n| snapshot_path(&config.state_dir, launch_id_in(tag), n));
        build_argv(
            &submitted,
            &plan,
            array,
            tag,
            script.as_deref(),
            dep.as_ref(),
            config.notify.mail,
            signal,
        )
    })?;
    Ok(launch)
}

/// The `scontrol update` fields that give an ended job of `sub` the resources of `plan`
/// when it is requeued in place: what a resubmission would change, checked the same way
/// (a retry sbatch would refuse is not tried in place either). Memory is a number in MB
/// (Slurm refuses `400M` there); excluded nodes are the user's own plus the plan's.
pub fn in_place_fields(sub: &Submission, plan: &RetryPlan) -> Result<Vec<String>, PrepareError> {
    let submitted = Submitted::read(&sub.argv, sub.script.as_deref())?;
    let placeholder = sub
        .script_name
        .as_deref()
        .map(|n| snapshot_path(Path::new("/"), 0, n));
    let o = overrides(
        &submitted,
        plan,
        None,
        "check",
        placeholder.as_deref(),
        None,
        false,
    );
    check(&submitted, &o)?;
    let mut fields = Vec::new();
    if let Some(mb) = plan.mem_mb {
        fields.push(format!("MinMemoryNode={mb}"));
    }
    if let Some(t) = &o.time_limit {
        fields.push(format!("TimeLimit={t}"));
    }
    if !o.exclude.is_empty() {
        let user = submitted
            .cmd
            .get("exclude")
            .or_else(|| submitted.directives.get("exclude"));
        fields.push(format!(
            "ExcNodeList={}",
            sbatch_args::merge_node_lists(user, &o.exclude)
        ));
    }
    if let Some(p) = &plan.partition {
        fields.push(format!("Partition={p}"));
    }
    Ok(fields)
}

/// The argv a retry of `chain` with `plan` would run, for `--dry-run`, or why sbatch would
/// refuse it. The tag is only assigned when the launch is recorded, so it is shown as a
/// placeholder.
pub fn preview_argv(
    store: &Store,
    config: &Config,
    sub: &Submission,
    chain: &crate::store::Chain,
    plan: &RetryPlan,
) -> Result<Vec<String>, PrepareError> {
    let submitted = Submitted::read(&sub.argv, sub.script.as_deref())?;
    let array = chain.array_task.map(|t| t.to_string());
    let script = sub
        .script_name
        .as_deref()
        .map(|n| snapshot_path(&config.state_dir, 0, n));
    let o = overrides(
        &submitted,
        plan,
        array,
        "<tag assigned at launch>",
        script.as_deref(),
        resolve_dependency(
            store,
            sub.owner_uid,
            &submitted,
            crate::plumbing::clock::now(),
        )?
        .as_ref(),
        config.notify.mail,
    );
    check(&submitted, &o)?;
    Ok(sbatch_args::rebuild(&submitted.cmd, &o))
}

/// Whether a launch's job is held by what it is submitted with: `--hold` in its argv (a
/// gate's, the user's own) or in its script's `#SBATCH` lines. Not the environment: the
/// sbatch of Slurm 22.05 and of 24.11 reads no `SBATCH_HOLD` (it is in neither binary's
/// list of input variables), so a user's `SBATCH_HOLD=1` holds nothing there, and taking
/// it for a hold would let any submission skip cluster mode's held sbatch and its fence.
/// Unreadable counts as held: cluster mode then leaves the job as sbatch makes it, and
/// never releases a hold its owner asked for.
pub fn holds(argv: &[String], script: Option<&[u8]>) -> bool {
    Submitted::read(argv, script)
        .map(|s| s.has("hold"))
        .unwrap_or(true)
}

/// Runs the sbatch of a launch. The script snapshot is (re)written just before, so a
/// launch repeated after a crash finds it too, and removed once Slurm has its own copy.
pub async fn sbatch<S: Slurm>(
    slurm: &S,
    state_dir: &Path,
    l: &Launch,
    sub: &Submission,
) -> LaunchOutcome {
    // A script given on stdin (no file name) is fed again on stdin.
    let stdin = match (&sub.script_name, &sub.script) {
        (None, Some(s)) => Some(s.clone()),
        _ => None,
    };
    let owner = match run_as(sub.owner_uid) {
        Ok(o) => o,
        Err(e) => {
            return LaunchOutcome::Refused {
                code: 67,
                stderr: e,
            }
        }
    };
    let snapshot = match (&sub.script_name, &sub.script) {
        (Some(name), Some(content)) => {
            let p = crate::plumbing::osbytes::to_path(
                &snapshot_path(state_dir, l.id, name).to_string_lossy(),
            );
            if let Err(e) = write_snapshot(&p, content, owner.as_ref()) {
                remove_snapshot(&p);
                return LaunchOutcome::Refused {
                    code: 73,
                    stderr: e.to_string(),
                };
            }
            Some(p)
        }
        _ => None,
    };
    crate::plumbing::failpoint::hit("before-sbatch");
    let req = SbatchRequest {
        argv: l.argv.clone(),
        cwd: PathBuf::from(&sub.cwd),
        env: sbatch_env(&sub.env),
        stdin,
        run_as: owner,
        held: holds(&l.argv, sub.script.as_deref()),
    };
    let confirm = req.run_as.is_some();
    let result = slurm.sbatch(&req).await;
    // sbatch has read the script and sent it to Slurm, or never will: whatever it
    // answered, the snapshot is not needed any more (a repeat writes its own).
    if let Some(p) = &snapshot {
        remove_snapshot(p);
    }
    match outcome_of(result) {
        // sbatch ran as the user, in their environment, so what it printed is theirs to
        // choose: the job id is believed only if Slurm (asked by the daemon itself) shows
        // that job carrying this launch's tag. Otherwise the launch stays unsettled and
        // is found by its tag, like any sbatch whose answer was lost.
        LaunchOutcome::Submitted(job) if confirm => confirm_job(slurm, job, &l.tag).await,
        other => other,
    }
}

/// `Submitted(job)` if squeue shows `job` with `tag` in its comment, else `Unknown`. The
/// comment is its owner's text, so this only shows that sbatch did not print just any job
/// id: that the job is the user's own is the poll's check (it watches a job only while
/// Slurm shows it owned by the chain's owner).
async fn confirm_job<S: Slurm>(slurm: &S, job: String, tag: &str) -> LaunchOutcome {
    let base = base_job_id(&job);
    match slurm.squeue_tags(&base).await {
        Ok(p) if p.rows.iter().any(|r| tags_in(&r.comment).any(|t| t == tag)) => {
            LaunchOutcome::Submitted(job)
        }
        Ok(_) => LaunchOutcome::Unknown(SlurmError::Garbage {
            command: "sbatch".into(),
            message: format!(
                "it printed job id {job:?}, but Slurm shows no such job with this launch's tag {tag}"
            ),
        }),
        Err(e) => LaunchOutcome::Unknown(e),
    }
}

/// The environment sbatch runs with: the user's, except which Slurm it talks to and the
/// plain-sbatch switch. The daemon watches the cluster of its own `SLURM_CONF`, so a job
/// must go there; a user's `SLURM_CONF` could also point sbatch at a file that makes it
/// hang. `SLURM_SUPERVISOR=off` keeps the site's cli_filter (and job_submit script) from
/// noting or marking the daemon's own submission as a plain sbatch: the job is this
/// store's already, and a note would make it a second chain (docs/guarantees.md). The
/// job's environment carries it too (docs/plain-sbatch.md).
fn sbatch_env(user: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = user
        .iter()
        .filter(|(k, _)| k != "SLURM_CONF" && k != crate::slurm::PLAIN_SWITCH)
        .cloned()
        .collect();
    if let Ok(conf) = std::env::var("SLURM_CONF") {
        env.push(("SLURM_CONF".into(), conf));
    }
    env.push((crate::slurm::PLAIN_SWITCH.into(), "off".into()));
    env
}

/// What an sbatch's result means for its launch. Only an sbatch that never ran (it could
/// not be started) or that Slurm refused has certainly created nothing.
fn outcome_of(result: Result<String, SlurmError>) -> LaunchOutcome {
    match result {
        Ok(job) => LaunchOutcome::Submitted(job),
        Err(SlurmError::Rejected { code, stderr, .. }) => LaunchOutcome::Refused { code, stderr },
        Err(SlurmError::Spawn { command, source }) => LaunchOutcome::Refused {
            code: 127,
            stderr: format!("cannot run {command}: {source}"),
        },
        Err(e) => LaunchOutcome::Unknown(e),
    }
}

/// Finds the supervisor's tags among one user's jobs (squeue, then sacct since `since`):
/// tag -> every job that carries it, as the id sbatch would have printed, each once, in
/// the order found (the queue's first). A tag has one job but after a daemon was deposed
/// around its sbatch (cluster mode) or a database flap: reconciliation chooses among them
/// (`engine::reconcile`), so none is dropped here.
pub async fn find_tags<S: Slurm>(
    slurm: &S,
    user: &str,
    since: i64,
) -> Result<HashMap<String, Vec<String>>, SlurmError> {
    let mut found: HashMap<String, Vec<String>> = HashMap::new();
    let mut note = |comment: &str, job: &str| {
        let base = base_job_id(job);
        for t in tags_in(comment) {
            let jobs = found.entry(t.to_string()).or_default();
            if !jobs.contains(&base) {
                jobs.push(base.clone());
            }
        }
    };
    let sq = slurm.squeue_user(user).await?;
    for r in &sq.rows {
        note(&r.comment, &r.job_id);
    }
    let sa = slurm.sacct_user_since(user, since).await?;
    for r in &sa.rows {
        note(&r.comment, &r.job_id);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A submission's `--dependency` is read from its command line, else its script; a
    /// hostile one (100,000 jobs) keeps at most `MAX_DEPENDENCY_EDGES` rows.
    #[test]
    fn a_submissions_dependency_rows_are_read_from_its_argv_or_script() {
        let row = |k: &str, j: &str| (k.to_string(), j.to_string());
        assert_eq!(
            dependency_rows(
                &["--dependency=afterok:12:13_2".into(), "job.sh".into()],
                Some(b"#!/bin/sh\n")
            ),
            vec![row("afterok", "12"), row("afterok", "13_2")]
        );
        assert_eq!(
            dependency_rows(
                &["job.sh".into()],
                Some(b"#!/bin/sh\n#SBATCH --dependency=afterany:7\n")
            ),
            vec![row("afterany", "7")]
        );
        assert!(dependency_rows(&["--wrap=true".into()], None).is_empty());
        let huge = format!("--dependency=afterok:{}", vec!["12"; 100_000].join(":"));
        assert_eq!(
            dependency_rows(&[huge, "--wrap=true".into()], None).len(),
            crate::domain::dependency::MAX_DEPENDENCY_EDGES
        );
    }

    #[test]
    fn the_attempts_lose_slurms_fail_mails_unless_notify_mail_is_off() {
        let plan = RetryPlan::default();
        let argv = |cmd: &[&str], script: &[u8], mail: bool| {
            let cmd: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
            let s = Submitted::read(&cmd, Some(script)).unwrap();
            build_argv(&s, &plan, None, "T", None, None, mail, None)
        };
        let a = argv(&["--mail-type=FAIL,BEGIN", "job.sh"], b"#!/bin/sh\n", true);
        assert!(a.contains(&"--mail-type=BEGIN".to_string()), "{a:?}");
        assert!(!a.iter().any(|x| x.contains("FAIL")), "{a:?}");
        // The script's directive is overridden from the command line.
        let a = argv(&["job.sh"], b"#!/bin/sh\n#SBATCH --mail-type=ALL\n", true);
        assert!(
            a.contains(&"--mail-type=BEGIN,INVALID_DEPEND,STAGE_OUT".to_string()),
            "{a:?}"
        );
        // Nothing to take over: the argv is the user's.
        let a = argv(&["--mail-type=BEGIN", "job.sh"], b"#!/bin/sh\n", true);
        assert_eq!(a.iter().filter(|x| x.starts_with("--mail-type")).count(), 1);
        // `[notify] mail = false` leaves it untouched.
        let a = argv(&["--mail-type=FAIL", "job.sh"], b"#!/bin/sh\n", false);
        assert!(a.contains(&"--mail-type=FAIL".to_string()), "{a:?}");
        assert_eq!(a.iter().filter(|x| x.starts_with("--mail-type")).count(), 1);
    }

    #[test]
    fn a_retry_sbatch_would_refuse_is_refused_before_it_is_recorded() {
        let argv = vec!["--time=10".to_string(), "job.sh".to_string()];
        let per_cpu =
            Submitted::read(&argv, Some(b"#!/bin/sh\n#SBATCH --mem-per-cpu=100M\nrun\n")).unwrap();
        let more_mem = RetryPlan {
            mem_mb: Some(400),
            ..Default::default()
        };
        let err = check(
            &per_cpu,
            &overrides(&per_cpu, &more_mem, None, "t", None, None, false),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("--mem-per-cpu"), "{err}");
        // More time is fine for the same script, and more memory for a plain one.
        let more_time = RetryPlan {
            time_secs: Some(1200),
            ..Default::default()
        };
        assert!(check(
            &per_cpu,
            &overrides(&per_cpu, &more_time, None, "t", None, None, false)
        )
        .is_ok());
        let plain = Submitted::read(&argv, Some(b"#!/bin/sh\nrun\n")).unwrap();
        assert!(check(
            &plain,
            &overrides(&plain, &more_mem, None, "t", None, None, false)
        )
        .is_ok());
        let bad_node = RetryPlan {
            exclude: vec!["n 1".into()],
            ..Default::default()
        };
        assert!(check(
            &plain,
            &overrides(&plain, &bad_node, None, "t", None, None, false)
        )
        .is_err());
    }

    #[test]
    fn an_error_after_sbatch_started_may_have_created_the_job() {
        let io = || std::io::Error::new(std::io::ErrorKind::BrokenPipe, "pipe");
        // Reading sbatch's output or waiting for it failed: the job may exist.
        let after = SlurmError::Io {
            command: "sbatch".into(),
            source: io(),
        };
        assert!(after.may_have_reached_slurm());
        assert!(matches!(outcome_of(Err(after)), LaunchOutcome::Unknown(_)));
        // sbatch could not be started at all: nothing can exist.
        let before = SlurmError::Spawn {
            command: "sbatch".into(),
            source: io(),
        };
        assert!(!before.may_have_reached_slurm());
        assert!(matches!(
            outcome_of(Err(before)),
            LaunchOutcome::Refused { code: 127, .. }
        ));
    }

    #[test]
    fn a_snapshot_is_a_new_file_every_time() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let p = snapshot_path(dir.path(), 7, "job.sh");
        std::fs::create_dir_all(dir.path().join("scripts")).unwrap();
        write_snapshot(&p, b"first", None).unwrap();
        // Someone holds the first file open; the next write must not reach it.
        let held = std::fs::File::open(&p).unwrap();
        let first_ino = held.metadata().unwrap().ino();
        write_snapshot(&p, b"second", None).unwrap();
        assert_ne!(std::fs::metadata(&p).unwrap().ino(), first_ino);
        assert_eq!(std::fs::read(&p).unwrap(), b"second");
        let mut old = String::new();
        std::io::Read::read_to_string(&mut &held, &mut old).unwrap();
        assert_eq!(old, "first");
        remove_snapshot(&p);
        assert!(!p.parent().unwrap().exists());
    }

    #[test]
    fn the_daemons_own_sbatch_never_runs_the_plain_sbatch_filter() {
        let env = sbatch_env(&[
            ("SLURM_SUPERVISOR".into(), "on".into()),
            ("HOME".into(), "/home/a".into()),
        ]);
        let switch: Vec<_> = env
            .iter()
            .filter(|(k, _)| k == "SLURM_SUPERVISOR")
            .collect();
        assert_eq!(
            switch,
            [&("SLURM_SUPERVISOR".to_string(), "off".to_string())]
        );
        assert!(env.contains(&("HOME".into(), "/home/a".into())));
    }

    #[test]
    fn only_a_hold_in_the_argv_or_the_script_is_the_users() {
        let argv = vec!["job.sh".to_string()];
        let script = Some(&b"#!/bin/sh\ntrue\n"[..]);
        assert!(!holds(&argv, script));
        assert!(holds(&["--hold".into(), "job.sh".into()], script));
        assert!(holds(
            &argv,
            Some(&b"#!/bin/sh\n#SBATCH --hold\ntrue\n"[..])
        ));
    }

    /// `SBATCH_HOLD=1` in a submission's environment is no hold (Slurm's sbatch does not
    /// read it): cluster mode submits the job held and releases it after its fence, as
    /// any other, so the variable cannot take a submission out from under the fence.
    #[tokio::test]
    async fn sbatch_hold_in_the_environment_holds_nothing() {
        use crate::slurm::fake::FakeSlurm;
        let fake = FakeSlurm::new();
        let dir = tempfile::tempdir().unwrap();
        let config = Config::parse(
            &format!("state_dir = {:?}\n", dir.path().display().to_string()),
            None,
        )
        .unwrap();
        let mut store = Store::in_memory().unwrap();
        let new = NewSubmission {
            owner_uid: nix::unistd::geteuid().as_raw(),
            user: "root".into(),
            argv: vec!["--wrap=true".into()],
            cwd: "/tmp".into(),
            env: vec![("SBATCH_HOLD".into(), "1".into())],
            script_name: None,
            script: None,
            max_retries: 3,
            restartable: false,
            array_tasks: None,
            continuation: None,
        };
        let submitted = Submitted::read(&new.argv, None).unwrap();
        let l = begin_submission(&mut store, &config, &new, &submitted, None, 10).unwrap();
        let sub = store.submission(l.submission_id).unwrap();
        let LaunchOutcome::Submitted(job) = sbatch(&fake, dir.path(), &l, &sub).await else {
            panic!("not submitted")
        };
        assert!(!fake.sbatch_calls()[0].held);
        assert!(!fake.job(&job).unwrap().held);
    }

    #[test]
    fn tags_are_found_in_comments() {
        let all = |c| tags_in(c).collect::<Vec<_>>();
        assert_eq!(
            all("my run ssv-0badcafe-L12-c3.2"),
            vec!["ssv-0badcafe-L12-c3.2"]
        );
        assert_eq!(
            all("ssv-0badcafe-L1-c3.1 ssv-0badcafe-L12-c3.2"),
            vec!["ssv-0badcafe-L1-c3.1", "ssv-0badcafe-L12-c3.2"]
        );
        assert!(all("nothing here").is_empty());
        assert_eq!(launch_id_in("ssv-0badcafe-L12-c3.2"), 12);
    }
}
