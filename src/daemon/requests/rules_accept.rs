//! `rules accept ID`: a rule proposal (docs/rules.md) put in force by the site's admin:
//! its entry written to a new file in `rules.d/` beside the config and the config checked
//! with it as `validate` checks it; the loop then reloads the config, as on SIGHUP,
//! before answering (`Write::RELOADS`).

use super::Plan;
use crate::config::{Config, RULES_DIR};
use crate::daemon::access::sees_all;
use crate::daemon::engine::Desk;
use crate::protocol::views::RulesAcceptAnswer;
use crate::protocol::{ErrorKind, Request, Response};
use crate::slurm::Slurm;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use tracing::info;

pub struct RulesAccept {
    pub id: String,
    pub despite_conflicts: bool,
}

impl super::Write for RulesAccept {
    const RELOADS: bool = true;

    fn into_request(self) -> Request {
        Request::RulesAccept {
            id: self.id,
            despite_conflicts: self.despite_conflicts,
        }
    }

    async fn begin<S: Slurm>(self, desk: &mut Desk<'_, S>, uid: u32, _: tracing::Span) -> Plan {
        Plan::answered(accept(
            desk.store,
            desk.config,
            uid,
            &self.id,
            self.despite_conflicts,
        ))
    }
}

fn accept(
    store: &crate::store::Store,
    config: &Config,
    uid: u32,
    id: &str,
    despite_conflicts: bool,
) -> Result<RulesAcceptAnswer, Response> {
    // A rule decides everyone's endings: the admin's (root, or the user a per-user daemon
    // runs as) to put in force.
    if !sees_all(uid) {
        return Err(Response::error(
            ErrorKind::Forbidden,
            "only root puts a rule in force for everyone; ask your admin to run `supervisorctl rules accept` \
             (accepting a proposal for your own chains only is not built yet)",
        ));
    }
    let Some(path) = config.path.clone() else {
        return Err(Response::error(
            ErrorKind::Conflict,
            "this daemon runs without a config file, so it has no rules.d/ to write to; start it with --config",
        ));
    };
    if config.cluster.is_some() {
        return Err(Response::error(
            ErrorKind::Conflict,
            "in cluster mode every node reads its own config: write the entry `supervisorctl rules` prints \
             to rules.d/ beside each node's config and reload them",
        ));
    }
    let proposals = crate::daemon::reads::rules::proposals(store, config, None)?;
    let Some(p) = proposals.into_iter().find(|p| p.id == id) else {
        return Err(Response::error(
            ErrorKind::NotFound,
            format!("no rule proposal {id:?}: `supervisorctl rules` lists them (a proposal in force is no longer listed)"),
        ));
    };
    if !p.conflicts.is_empty() && !despite_conflicts {
        let who: Vec<String> = p
            .conflicts
            .iter()
            .map(|r| format!("{} ({} by {})", r.chain, r.action, r.actor))
            .collect();
        return Err(Response::error(
            ErrorKind::Conflict,
            format!(
                "proposal {id} has conflicts: {} resolved it otherwise; read them in `supervisorctl rules`, \
                 then accept with --despite-conflicts if the rule is still right",
                who.join(", ")
            ),
        ));
    }
    let dir = path
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .join(RULES_DIR);
    let file = dir.join(format!("{}.toml", p.rule.name));
    let evidence: Vec<String> = p
        .evidence
        .iter()
        .map(|r| format!("{} by {}", r.chain, r.actor))
        .collect();
    let mut text = format!(
        "# Rule proposal {id}, accepted by uid {uid} at {} (supervisorctl rules accept).\n\
         # Signature: {} {}\n",
        crate::clock::now(),
        p.slurm_state,
        p.exit_code,
    );
    // The text comes from a job's stderr: escaped, as a TOML comment holds no control
    // characters (an ANSI colour would make the file invalid).
    for l in p.signature_text.lines() {
        text.push_str(&format!("#   | {}\n", l.escape_debug()));
    }
    text.push_str(&format!("# Evidence: {}\n", evidence.join(", ")));
    text.push_str(&p.toml);
    let io = |what: &str, e: std::io::Error| {
        let hint = match e.raw_os_error() {
            // The packaged unit lets the daemon write only an existing rules.d/.
            Some(libc::EROFS | libc::EACCES | libc::EPERM) => format!(
                "; create {} (mkdir, as root) and restart the daemon",
                dir.display()
            ),
            _ => String::new(),
        };
        Response::error(
            ErrorKind::Internal,
            format!("cannot {what} {}: {e}{hint}", file.display()),
        )
    };
    if let Err(e) = std::fs::create_dir(&dir) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(io("create the folder of", e));
        }
    }
    // A new file, never one already there (O_EXCL): readable by all, as the config is.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&file)
        .map_err(|e| io("create", e))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| io("write", e))?;
    // Checked as `validate` checks the config; a config that is wrong with it keeps the
    // old rules, and the file goes. (The loop's reload before the answer loads it again.)
    if let Err(e) = Config::load(&path) {
        let _ = std::fs::remove_file(&file);
        return Err(Response::error(
            ErrorKind::Conflict,
            format!("the config with this rule is not valid, so it was not put in force: {e:#}"),
        ));
    }
    info!(proposal = %id, rule = %p.rule.name, file = %file.display(), uid, "rule proposal accepted; the config is reloaded");
    Ok(RulesAcceptAnswer {
        id: id.to_string(),
        name: p.rule.name,
        file: file.display().to_string(),
    })
}
