//! `rules accept ID`: a rule proposal (docs/rules.md) put in force.
//!
//! For everyone, by an admin (root, the daemon's own user, a member of `[learn]
//! admin_group`): its entry written to a new file in `rules.d/` beside the config and the
//! config checked with it as `validate` checks it; the loop then reloads the config, as on
//! SIGHUP, before answering (`Plan::Reload`, only once that file is written: a refused
//! or own-scope request reloads nothing). For the caller's own chains (`--mine`, and
//! what anyone else gets): the rule kept in the store with the caller's data, counted in
//! their totals, and read by the judge for their endings alone. Either way the acceptance
//! is a record of its own (`store/rule_decisions.rs`), as a rejection is
//! (`rules_reject.rs`, which shares the checks here).

use super::Plan;
use crate::config::{is_proposal_id, Config, RULES_DIR};
use crate::daemon::access::{actor, decides_rules_for_everyone, Caller};
use crate::daemon::engine::Desk;
use crate::domain::learn::{self, Proposal, ProposalState, RuleAction, RuleRecord};
use crate::protocol::views::RuleDecisionAnswer;
use crate::protocol::{ErrorKind, Request, Response};
use crate::slurm::Slurm;
use crate::store::{NewRuleDecision, Store};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use tracing::info;

/// The longest reason a decision about a rule may give, in bytes: it is kept for good.
pub const MAX_RULE_REASON_BYTES: usize = 1024;

/// The most rules a user may keep in force for their own chains.
pub const MAX_RULES_PER_USER: usize = 16;

/// The most decisions about rules a user may make for their own chains, ever (they are
/// records, kept for good).
pub const MAX_RULE_DECISIONS_PER_USER: usize = 256;

pub struct RulesAccept {
    pub id: String,
    pub despite_conflicts: bool,
    pub despite_rejection: bool,
    pub mine: bool,
    pub reason: Option<String>,
}

impl super::Write for RulesAccept {
    fn into_request(self) -> Request {
        Request::RulesAccept {
            id: self.id,
            despite_conflicts: self.despite_conflicts,
            despite_rejection: self.despite_rejection,
            mine: self.mine,
            reason: self.reason,
        }
    }

    async fn begin<S: Slurm>(
        self,
        desk: &mut Desk<'_, S>,
        caller: Caller,
        _: tracing::Span,
    ) -> Plan {
        match accept(desk.store, desk.config, &caller, &self) {
            // Its rules.d/ file written: the config is reloaded before the answer.
            Ok(a) if a.file.is_some() => Plan::Reload(Response::answer(&a)),
            answered => Plan::answered(answered),
        }
    }
}

fn usage(m: String) -> Response {
    Response::error(ErrorKind::Usage, m)
}

/// Refuses an id that is not a proposal's (12 hex digits) before anything is looked up.
fn check_id(id: &str) -> Result<(), Response> {
    if is_proposal_id(id) {
        return Ok(());
    }
    let shown: String = id.chars().take(40).collect();
    Err(usage(format!(
        "{shown:?} is not a rule proposal's id: give its 12 hex digits (0-9, a-f) as `supervisorctl rules` lists them"
    )))
}

/// The reason as kept: bounded, and one or more lines of text (no control characters
/// but newlines and tabs), so that what is shown later is what was said.
fn check_reason(reason: Option<&str>) -> Result<String, Response> {
    let r = reason.unwrap_or("").trim();
    if r.len() > MAX_RULE_REASON_BYTES {
        return Err(usage(format!(
            "the --reason is {} bytes; at most {MAX_RULE_REASON_BYTES} are kept with a decision about a rule: say it in a few lines",
            r.len()
        )));
    }
    if r.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(usage(
            "the --reason holds control characters: give it as plain text".into(),
        ));
    }
    Ok(r.to_string())
}

/// Whose endings a decision by `caller` is about: `None`, everyone's (an admin who did
/// not ask for their own only); otherwise the caller's own chains. A caller who is not an
/// admin never decides for everyone; one whose groups could not be looked up in time is
/// told so, and nothing is decided.
fn owner_of_decision(caller: &Caller, mine: bool) -> Result<Option<u32>, Response> {
    if mine {
        return Ok(Some(caller.uid));
    }
    let everyone = decides_rules_for_everyone(caller)
        .map_err(|m| Response::error(ErrorKind::Unavailable, m))?;
    Ok((!everyone).then_some(caller.uid))
}

/// The scope's name in answers.
pub(super) fn scope_name(owner: Option<u32>) -> String {
    if owner.is_some() { "mine" } else { "everyone" }.to_string()
}

/// The proposal `id` as `owner` sees it (every chain's for everyone), with where it
/// stands ([`learn::standing`]) and the records it was read from.
fn find(
    store: &Store,
    config: &Config,
    id: &str,
    owner: Option<u32>,
) -> Result<(Proposal, Vec<RuleRecord>), Response> {
    let records = store.rule_decisions(owner)?;
    let mut proposals =
        crate::daemon::reads::rules::proposals(store, config, owner, &records, Some(id))?;
    let Some(i) = proposals.iter().position(|p| p.id == id) else {
        let whose = if owner.is_some() {
            " made from your chains' resolutions"
        } else {
            ""
        };
        return Err(Response::error(
            ErrorKind::NotFound,
            format!("no rule proposal {id}{whose}: `supervisorctl rules` lists them (a proposal in force for everyone is no longer listed)"),
        ));
    };
    Ok((proposals.swap_remove(i), records))
}

/// The answer to a decision that stands already (`p` is in the state it asks for): nothing
/// written, the standing record shown.
pub(super) fn as_things_stand(
    p: Proposal,
    action: RuleAction,
    owner: Option<u32>,
) -> RuleDecisionAnswer {
    RuleDecisionAnswer {
        id: p.id,
        name: p.rule.name,
        action,
        scope: scope_name(owner),
        changed: false,
        record: p.decided.map(shown),
        file: None,
    }
}

/// The decision `d` as the answer shows it (with its scope's name).
fn shown(mut r: RuleRecord) -> RuleRecord {
    r.scope = crate::daemon::reads::rules::scope(r.owner_uid);
    r
}

fn accept(
    store: &mut Store,
    config: &Config,
    caller: &Caller,
    req: &RulesAccept,
) -> Result<RuleDecisionAnswer, Response> {
    let Asked {
        id,
        reason,
        uid,
        owner,
        p,
        records,
    } = asked(
        store,
        config,
        caller,
        &req.id,
        req.reason.as_deref(),
        req.mine,
    )?;
    let id = id.as_str();
    // `Accepted` is only ever the caller's own acceptance for their chains (one for
    // everyone is in force, or waits again: `reads::rules::proposals`).
    if p.state == ProposalState::Accepted {
        // Accepted for the caller's chains already: as things stand, nothing written.
        return Ok(as_things_stand(p, RuleAction::Accept, owner));
    }
    if p.state == ProposalState::Rejected && !req.despite_rejection {
        let d = p
            .decided
            .as_ref()
            .expect("a rejected proposal has its record");
        let why = if d.reason.is_empty() {
            String::new()
        } else {
            format!(": {:?}", d.reason)
        };
        return Err(Response::error(
            ErrorKind::Conflict,
            format!(
                "proposal {id} was rejected by {} at {} (record {}){why}; accept it with --despite-rejection if it is right after all",
                d.actor,
                crate::daemon::reads::rules::when(d.at),
                d.id
            ),
        ));
    }
    if !p.conflicts.is_empty() && !req.despite_conflicts {
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
    // Its pattern comes from a job's stderr (its user's text): compiled now, within a
    // bound, so a rule put in force is one the judge can run.
    if let Err(e) = learn::compile_rule_pattern(&p.rule.stderr) {
        return Err(Response::error(
            ErrorKind::Conflict,
            format!(
                "proposal {id}'s stderr pattern cannot be put in force: {}; write a shorter `[[rules]]` entry for this failure by hand (docs/rules.md)",
                first_line(&e.to_string())
            ),
        ));
    }
    let decision = NewRuleDecision {
        proposal: id,
        owner_uid: owner,
        action: RuleAction::Accept,
        actor: &actor(uid),
        actor_uid: uid,
        reason: &reason,
        rule: Some(&p.rule),
        at: crate::plumbing::clock::now(),
    };
    let (record, file) = match owner {
        Some(o) => (accept_for_own(store, config, o, &records, &decision)?, None),
        None => {
            let file = write_rules_d(config, uid, &p)?;
            match store.record_rule_decision(&decision) {
                Ok(r) => (r, Some(file)),
                Err(e) => {
                    // Not recorded, so not in force either.
                    let _ = std::fs::remove_file(&file);
                    return Err(e.into());
                }
            }
        }
    };
    info!(proposal = %id, rule = %p.rule.name, scope = %scope_name(owner), record, uid, "rule proposal accepted");
    let mut answer = recorded(store, p, RuleAction::Accept, owner, record)?;
    answer.file = file.map(|f| f.display().to_string());
    Ok(answer)
}

/// What a `rules accept|reject` asks, checked: the proposal `id` as the caller sees it,
/// the decisions about it, and whose chains the decision is for.
pub(super) struct Asked {
    pub id: String,
    pub reason: String,
    pub uid: u32,
    pub owner: Option<u32>,
    pub p: Proposal,
    pub records: Vec<RuleRecord>,
}

pub(super) fn asked(
    store: &Store,
    config: &Config,
    caller: &Caller,
    id: &str,
    reason: Option<&str>,
    mine: bool,
) -> Result<Asked, Response> {
    check_id(id)?;
    let reason = check_reason(reason)?;
    let owner = owner_of_decision(caller, mine)?;
    let (p, records) = find(store, config, id, owner)?;
    Ok(Asked {
        id: id.to_string(),
        reason,
        uid: caller.uid,
        owner,
        p,
        records,
    })
}

/// The answer to a decision just recorded (record `record`), read back as it is kept.
pub(super) fn recorded(
    store: &Store,
    p: Proposal,
    action: RuleAction,
    owner: Option<u32>,
    record: i64,
) -> Result<RuleDecisionAnswer, Response> {
    let record = store
        .rule_decisions(owner)?
        .into_iter()
        .find(|r| r.id == record)
        .map(shown);
    Ok(RuleDecisionAnswer {
        id: p.id,
        name: p.rule.name,
        action,
        scope: scope_name(owner),
        changed: true,
        record,
        file: None,
    })
}

/// The first line of a message, cut to a few hundred characters.
fn first_line(m: &str) -> String {
    m.lines().next().unwrap_or("").chars().take(300).collect()
}

/// A user's acceptance for their own chains: within their number of rules and their
/// stored bytes, recorded in the store with the rule.
fn accept_for_own(
    store: &mut Store,
    config: &Config,
    owner: u32,
    visible: &[RuleRecord],
    d: &NewRuleDecision,
) -> Result<i64, Response> {
    let mine: Vec<RuleRecord> = visible
        .iter()
        .filter(|r| r.owner_uid == Some(owner))
        .cloned()
        .collect();
    let n = learn::accepted_by(&mine, owner).len();
    if n >= MAX_RULES_PER_USER {
        return Err(Response::error(
            ErrorKind::Unavailable,
            format!(
                "you keep {n} rules for your own chains, the most a user may ({MAX_RULES_PER_USER}): \
                 reject one of them first (`supervisorctl rules reject ID --mine`), or ask your admin to accept it for everyone"
            ),
        ));
    }
    room_for_own(store, config, owner, visible, d)?;
    Ok(store.record_rule_decision(d)?)
}

/// Refuses a user's decision for their own chains past their number of such records or
/// their stored bytes (`limits.max_stored_bytes_per_user`, which counts them).
pub(super) fn room_for_own(
    store: &Store,
    config: &Config,
    owner: u32,
    visible: &[RuleRecord],
    d: &NewRuleDecision,
) -> Result<(), Response> {
    let made = visible
        .iter()
        .filter(|r| r.owner_uid == Some(owner))
        .count();
    if made >= MAX_RULE_DECISIONS_PER_USER {
        return Err(Response::error(
            ErrorKind::Unavailable,
            format!(
                "you have made {made} decisions about rules for your own chains, the most a user may \
                 ({MAX_RULE_DECISIONS_PER_USER}; they are kept for good): ask your admin to decide this one for everyone \
                 (rejecting one of your own rules in force is still allowed)"
            ),
        ));
    }
    let bytes = d.reason.len()
        + d.rule
            .map_or(0, |r| serde_json::to_string(r).map_or(0, |s| s.len()));
    let totals = store.user_totals(owner)?;
    super::submit::check_bytes(
        &config.limits,
        &totals,
        bytes as u64,
        "this decision about a rule",
    )
}

/// Writes the proposal's entry to a new file of `rules.d/` beside the config and checks
/// the config with it; the file's path. In cluster mode, and without a config file, it
/// is refused.
fn write_rules_d(config: &Config, uid: u32, p: &Proposal) -> Result<std::path::PathBuf, Response> {
    let id = &p.id;
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
             to rules.d/ beside each node's config and reload them (a user's acceptance for their own chains, \
             `--mine`, is kept in the shared store and works here)",
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
        crate::plumbing::clock::now(),
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
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_user_sends_is_checked_as_data() {
        assert!(check_id("0123456789ab").is_ok());
        for bad in [
            "",
            "0123456789AB",
            "0123456789a",
            "0123456789abc",
            "../../etc/x",
            "0123456789a\n",
            "g123456789ab",
        ] {
            let e = check_id(bad).unwrap_err();
            assert!(
                format!("{e:?}").contains("is not a rule proposal's id"),
                "{bad:?}: {e:?}"
            );
        }
        // A long id is not echoed whole.
        let long = "x".repeat(100_000);
        assert!(format!("{:?}", check_id(&long).unwrap_err()).len() < 400);
        assert_eq!(check_reason(None).unwrap(), "");
        assert_eq!(
            check_reason(Some("  seen it\n\ttwice ")).unwrap(),
            "seen it\n\ttwice"
        );
        assert!(check_reason(Some(&"x".repeat(MAX_RULE_REASON_BYTES))).is_ok());
        let e = check_reason(Some(&"x".repeat(MAX_RULE_REASON_BYTES + 1))).unwrap_err();
        assert!(format!("{e:?}").contains("at most 1024"), "{e:?}");
        let e = check_reason(Some("\x1b[31mred")).unwrap_err();
        assert!(format!("{e:?}").contains("control characters"), "{e:?}");
    }

    #[test]
    fn only_an_admin_decides_for_everyone_and_only_when_not_asking_for_their_own() {
        use crate::daemon::access::Membership::*;
        let me = nix::unistd::getuid().as_raw();
        let who = |uid, admin_group| Caller { uid, admin_group };
        let owner = |c, mine| owner_of_decision(&c, mine).map_err(|e| format!("{e:?}"));
        assert_eq!(owner(who(me, NotMember), false), Ok(None));
        assert_eq!(owner(who(me, NotMember), true), Ok(Some(me)));
        // Anyone else: their own chains, whatever they asked.
        let other = 4_000_000_123;
        assert_eq!(owner(who(other, NotMember), false), Ok(Some(other)));
        assert_eq!(owner(who(other, NotMember), true), Ok(Some(other)));
        // A member of the admin group, as the connection found: everyone's.
        assert_eq!(owner(who(other, Member), false), Ok(None));
        assert_eq!(owner(who(other, Member), true), Ok(Some(other)));
        // Their groups not looked up in time: told so, nothing decided; `--mine` needs
        // no lookup.
        let e = owner(who(other, TimedOut), false).unwrap_err();
        assert!(
            e.contains("took longer than") && e.contains("--mine"),
            "{e}"
        );
        assert_eq!(owner(who(other, TimedOut), true), Ok(Some(other)));
    }
}
