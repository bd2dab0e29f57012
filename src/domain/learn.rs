//! Rule proposals: from how people and agents resolved the endings of one failure
//! signature (`crate::domain::signature`), the `[[rules]]` entry that would have decided them, if
//! they agree and their retries worked (docs/rules.md).
//!
//! A **resolution** here is a decision by someone other than the supervisor (a person,
//! or an agent acting as one) that resolved an escalated ending: a retry (`resubmit`) or
//! a `fail`. Resolutions **agree** when they took the same action and, for retries, made
//! the same kind of change ([`Change`]). A **proposal** is made for a signature when at
//! least `agreeing` of its resolutions agree, the rule they imply is one a `[[rules]]`
//! entry may give (`transient` for a retry with nothing changed, `permanent` for a fail:
//! `model::Classification::row`'s `by_rule`), and, for retries, at least `agreeing` of
//! their retries have ended and at least `min_success` of those completed. Resolutions
//! that disagree with it are its **conflicts**: shown, never passed over.
//!
//! Pure: no I/O, no clock; the store reads the history, the daemon's read shows the
//! answer.

use crate::domain::model::{Action, ChainState, Classification};
use serde::{Deserialize, Serialize};

/// What a retry changed, as its resolution asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// The same resources: what a `transient` rule gives.
    Unchanged,
    MoreMemory,
    MoreTime,
    ExcludeNode,
    OtherPartition,
    /// More than one of the above.
    Several,
    /// Not a retry (a `fail`).
    None,
}

impl Change {
    /// The kind of change of a resolution that set `mem`, `time`, `exclude`, `partition`.
    pub fn of(mem: bool, time: bool, exclude: bool, partition: bool) -> Change {
        match (mem, time, exclude, partition) {
            (false, false, false, false) => Change::Unchanged,
            (true, false, false, false) => Change::MoreMemory,
            (false, true, false, false) => Change::MoreTime,
            (false, false, true, false) => Change::ExcludeNode,
            (false, false, false, true) => Change::OtherPartition,
            _ => Change::Several,
        }
    }
}

/// How the retry a resolution caused went: its next attempt's ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Completed,
    Failed,
    /// Not ended yet (or not submitted yet).
    Running,
}

/// One resolution of an ending with the signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    /// The resolution's decision record.
    pub decision: i64,
    /// The chain (`c<N>`) and the attempt whose ending it resolved.
    pub chain: String,
    pub attempt: u32,
    pub at: i64,
    /// `user:<name>`.
    pub actor: String,
    pub action: Action,
    pub change: Change,
    /// For a retry, how it went; `None` for a fail.
    pub outcome: Option<Outcome>,
}

/// Everything known of one signature: its parts, how many endings had it, and their
/// resolutions, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHistory {
    pub signature: String,
    pub text: String,
    pub slurm_state: String,
    pub exit_code: String,
    pub endings: u32,
    pub resolutions: Vec<Resolved>,
}

/// One resolution as the store read it (`Store::signature_resolutions`): the resolved
/// ending's signature and parts, the resolution, and what came after it.
#[derive(Debug, Clone, Copy)]
pub struct ResolutionFacts<'a> {
    pub signature: &'a str,
    pub signature_text: &'a str,
    pub slurm_state: &'a str,
    pub exit_code: &'a str,
    pub decision: i64,
    pub chain: i64,
    pub attempt: u32,
    pub at: i64,
    pub actor: &'a str,
    pub action: Action,
    /// The resolution's inputs (`{"resolution": {...}}`): what it asked to change.
    pub inputs: &'a serde_json::Value,
    /// The next attempt's state and Slurm state (`None` when there is none yet), and
    /// the chain's state now.
    pub next_state: Option<&'a str>,
    pub next_slurm_state: Option<&'a str>,
    pub chain_state: ChainState,
}

/// The resolutions grouped by signature, in the order each signature was first resolved
/// (`endings` is left 0: the caller counts them).
pub fn histories<'a>(rows: impl IntoIterator<Item = ResolutionFacts<'a>>) -> Vec<SignatureHistory> {
    let mut out: Vec<SignatureHistory> = Vec::new();
    for r in rows {
        let resolved = resolved(&r);
        match out.iter_mut().find(|h| h.signature == r.signature) {
            Some(h) => h.resolutions.push(resolved),
            None => out.push(SignatureHistory {
                signature: r.signature.to_string(),
                text: r.signature_text.to_string(),
                slurm_state: r.slurm_state.to_string(),
                exit_code: r.exit_code.to_string(),
                endings: 0,
                resolutions: vec![resolved],
            }),
        }
    }
    out
}

/// One resolution as `propose` weighs it: the kind of change it asked for (from the
/// resolution stored in its inputs), and how the retry it caused went.
fn resolved(r: &ResolutionFacts) -> Resolved {
    let asked = &r.inputs["resolution"];
    let set = |k: &str| !asked[k].is_null();
    let exclude = asked["exclude"].as_array().is_some_and(|v| !v.is_empty());
    let change = match r.action {
        Action::Resubmit => Change::of(set("mem"), set("time"), exclude, set("partition")),
        _ => Change::None,
    };
    let outcome = (r.action == Action::Resubmit)
        .then(|| outcome(r.next_state, r.next_slurm_state, r.chain_state));
    Resolved {
        decision: r.decision,
        chain: crate::domain::model::chain_label(r.chain),
        attempt: r.attempt,
        at: r.at,
        actor: r.actor.to_string(),
        action: r.action,
        change,
        outcome,
    }
}

/// How a retry went, from the attempt it made (its state and Slurm state, `None` when
/// there is none yet) and its chain's state now.
pub fn outcome(next: Option<&str>, next_slurm: Option<&str>, chain: ChainState) -> Outcome {
    match (next, next_slurm) {
        (Some("ended"), Some("COMPLETED")) => Outcome::Completed,
        (Some("ended" | "not_submitted"), _) => Outcome::Failed,
        (Some(_), _) => Outcome::Running,
        (None, _) if chain.is_open() => Outcome::Running,
        // Closed with no retry made: completed some other way, or cancelled first.
        (None, _) if chain == ChainState::Completed => Outcome::Completed,
        (None, _) => Outcome::Failed,
    }
}

/// The `[learn]` thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    pub agreeing: u32,
    pub min_success: f64,
}

impl From<&crate::config::LearnConfig> for Thresholds {
    fn from(c: &crate::config::LearnConfig) -> Self {
        Thresholds {
            agreeing: c.agreeing,
            min_success: c.min_success,
        }
    }
}

/// The `[[rules]]` entry a proposal would add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProposedRule {
    pub name: String,
    pub kind: Classification,
    pub exit_codes: Vec<i32>,
    /// A regex over stderr, built from the signature's masked lines.
    pub stderr: String,
    /// What a retry by the rule changes (`unchanged` for `transient`, `none` for
    /// `permanent`).
    pub change: Change,
}

/// A proposed rule and its evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// The proposal's id: its signature's.
    pub id: String,
    pub signature_text: String,
    pub slurm_state: String,
    pub exit_code: String,
    pub rule: ProposedRule,
    /// The agreeing resolutions it rests on.
    pub evidence: Vec<Resolved>,
    /// Of their retries: how many completed, failed, and are still running.
    pub completed: u32,
    pub failed: u32,
    pub running: u32,
    /// How many endings had the signature (those the rule would have matched).
    pub endings: u32,
    /// Resolutions of the same signature that decided otherwise.
    pub conflicts: Vec<Resolved>,
    /// The entry as a `rules.d/` file holds it (docs/rules.md): TOML, `[[rules]]`.
    pub toml: String,
    /// Where it stands for the caller ([`standing`]): waiting for a decision, rejected,
    /// or accepted for the caller's own chains (one accepted for everyone is in force and
    /// no longer proposed).
    #[serde(default)]
    pub state: ProposalState,
    /// The decision it stands by, if any: who, when, why.
    #[serde(default)]
    pub decided: Option<RuleRecord>,
}

/// Where a proposal stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposalState {
    #[default]
    Waiting,
    Rejected,
    /// Accepted for one user's chains (for everyone it is in force, and not listed).
    Accepted,
}

/// What a decision about a rule proposal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleAction {
    Accept,
    Reject,
}

impl RuleAction {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleAction::Accept => "accept",
            RuleAction::Reject => "reject",
        }
    }

    pub fn parse(s: &str) -> Option<RuleAction> {
        match s {
            "accept" => Some(RuleAction::Accept),
            "reject" => Some(RuleAction::Reject),
            _ => None,
        }
    }
}

/// A decision about a rule proposal (`supervisorctl rules accept|reject`): a record of its
/// own, belonging to no chain, never edited; a later decision is a new record
/// (docs/rules.md, "Decisions about rules").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleRecord {
    pub id: i64,
    pub proposal: String,
    /// Whose endings it is about: `None`, everyone's (an admin's decision); a uid, that
    /// user's chains only.
    pub owner_uid: Option<u32>,
    /// `everyone`, or `user:<name>` of `owner_uid` (for people; decided on the uid).
    #[serde(default)]
    pub scope: String,
    pub action: RuleAction,
    /// `user:<name>` of who decided, and their uid.
    pub actor: String,
    pub actor_uid: u32,
    pub at: i64,
    /// Why, as they said it (may be empty).
    pub reason: String,
    /// For an acceptance, the entry put in force.
    pub rule: Option<ProposedRule>,
}

/// The decision a proposal stands by for `viewer` (`None`: a view of everyone's, as an
/// admin's): the viewer's own latest decision about it for their chains, else the latest
/// one for everyone; but a rejection for everyone newer than the viewer's own acceptance
/// wins over it (an admin takes a user's own rule out of force so; the user may accept it
/// again, `--despite-rejection`, after reading who rejected it and why). `records` are
/// oldest first.
pub fn standing<'a>(
    records: &'a [RuleRecord],
    proposal: &str,
    viewer: Option<u32>,
) -> Option<&'a RuleRecord> {
    let latest = |owner: Option<u32>| {
        records
            .iter()
            .rev()
            .find(|r| r.proposal == proposal && r.owner_uid == owner)
    };
    let everyone = latest(None);
    match viewer.and_then(|v| latest(Some(v))) {
        Some(own) if own.action == RuleAction::Accept && rejected_after(everyone, own.id) => {
            everyone
        }
        Some(own) => Some(own),
        None => everyone,
    }
}

/// Whether `everyone`'s latest decision is a rejection made after the record `id`.
fn rejected_after(everyone: Option<&RuleRecord>, id: i64) -> bool {
    everyone.is_some_and(|e| e.action == RuleAction::Reject && e.id > id)
}

/// The state a decision leaves a proposal in.
pub fn state_of(decided: Option<&RuleRecord>) -> ProposalState {
    match decided.map(|r| r.action) {
        None => ProposalState::Waiting,
        Some(RuleAction::Reject) => ProposalState::Rejected,
        Some(RuleAction::Accept) => ProposalState::Accepted,
    }
}

/// The rules `owner` accepted for their own chains and has not rejected since, nor an
/// admin for everyone since ([`standing`]): each proposal's latest record of theirs, when
/// it is an acceptance, in the order accepted. `records` are the ones `owner` sees (theirs
/// and everyone's), oldest first.
pub fn accepted_by(records: &[RuleRecord], owner: u32) -> Vec<&RuleRecord> {
    let mine: Vec<&RuleRecord> = records
        .iter()
        .filter(|r| r.owner_uid == Some(owner))
        .collect();
    mine.iter()
        .enumerate()
        .filter(|(i, r)| {
            r.action == RuleAction::Accept
                && r.rule.is_some()
                && !mine[i + 1..]
                    .iter()
                    .any(|later| later.proposal == r.proposal)
                && !rejected_after(standing(records, &r.proposal, None), r.id)
        })
        .map(|(_, r)| *r)
        .collect()
}

/// The most memory a rule's compiled stderr pattern may take (`regex`'s size limit): a
/// proposal's pattern comes from a job's stderr, which its user wrote.
pub const RULE_PATTERN_SIZE_LIMIT: usize = 256 << 10;

/// A rule's stderr pattern compiled within [`RULE_PATTERN_SIZE_LIMIT`]; an acceptance of
/// one that fails is refused (`rules accept`).
pub fn compile_rule_pattern(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(pattern)
        .size_limit(RULE_PATTERN_SIZE_LIMIT)
        .build()
}

/// A user's accepted rule as the classifier takes it (`config::Rule`, named by its
/// proposal); `None` when its pattern does not compile within the limit (it did when it
/// was accepted).
pub fn rule_in_force(r: &RuleRecord) -> Option<crate::config::Rule> {
    let p = r.rule.as_ref()?;
    Some(crate::config::Rule {
        name: p.name.clone(),
        kind: p.kind,
        exit_codes: p.exit_codes.clone(),
        stderr: Some(compile_rule_pattern(&p.stderr).ok()?),
        source: None,
        proposal: Some(r.proposal.clone()),
        owner_uid: r.owner_uid,
    })
}

/// The proposal one signature's history makes under `t`, if any.
pub fn propose(h: &SignatureHistory, t: Thresholds) -> Option<Proposal> {
    // Only FAILED endings: a `[[rules]]` entry is matched against those alone.
    if h.slurm_state != "FAILED" {
        return None;
    }
    let code: i32 = h.exit_code.split(':').next()?.parse().ok()?;
    let key = |r: &Resolved| (r.action, r.change);
    let mut groups: Vec<((Action, Change), u32)> = Vec::new();
    for r in &h.resolutions {
        match groups.iter_mut().find(|(k, _)| *k == key(r)) {
            Some((_, n)) => *n += 1,
            None => groups.push((key(r), 1)),
        }
    }
    // The largest group; on a tie, the one whose first resolution came first (groups are
    // in that order, and `max_by_key` keeps the last of equals).
    let &(best, n) = groups.iter().rev().max_by_key(|g| g.1)?;
    if n < t.agreeing {
        return None;
    }
    let kind = match best {
        (Action::Resubmit, Change::Unchanged) => Classification::Transient,
        (Action::Fail, _) => Classification::Permanent,
        // A retry that changed resources is not a kind a rule may give.
        _ => return None,
    };
    let (evidence, conflicts): (Vec<Resolved>, Vec<Resolved>) =
        h.resolutions.iter().cloned().partition(|r| key(r) == best);
    let count = |o| evidence.iter().filter(|r| r.outcome == Some(o)).count() as u32;
    let (completed, failed, running) = (
        count(Outcome::Completed),
        count(Outcome::Failed),
        count(Outcome::Running),
    );
    if kind == Classification::Transient && !worked(completed, failed, t) {
        return None;
    }
    let rule = ProposedRule {
        name: format!("learnt-{}", h.signature),
        kind,
        exit_codes: vec![code],
        stderr: stderr_pattern(&h.text),
        change: best.1,
    };
    Some(Proposal {
        toml: rule_toml(&rule, &h.signature),
        state: ProposalState::Waiting,
        decided: None,
        id: h.signature.clone(),
        signature_text: h.text.clone(),
        slurm_state: h.slurm_state.clone(),
        exit_code: h.exit_code.clone(),
        rule,
        evidence,
        completed,
        failed,
        running,
        endings: h.endings,
        conflicts,
    })
}

/// Retries worked: at least `agreeing` ended, and at least `min_success` of them
/// completed.
fn worked(completed: u32, failed: u32, t: Thresholds) -> bool {
    let ended = completed + failed;
    ended >= t.agreeing && f64::from(completed) >= t.min_success * f64::from(ended)
}

/// A rule in force whose retries stopped working: at least `agreeing` ended, and fewer
/// than `min_success` of them completed (`rules` reports it; nothing stops it yet).
pub fn not_working(completed: u32, failed: u32, t: Thresholds) -> bool {
    completed + failed >= t.agreeing && !worked(completed, failed, t)
}

/// A rule as its retries are counted: its name, and its owner for a user's own rule
/// (`None`: the config's or `rules.d/`'s). A user's own rule and a rule of the same name
/// for everyone, or another user's, are counted apart: one's retries never stop another.
pub type RuleKey = (String, Option<u32>);

/// How the automatic retries each rule gave went: completed, failed, running, by rule.
pub type RuleOutcomes = std::collections::BTreeMap<RuleKey, (u32, u32, u32)>;

/// Tallies the retries rules gave, each as (the rule's name, its owner for a user's own
/// rule, its outcome).
pub fn tally<'a>(
    retries: impl IntoIterator<Item = (&'a str, Option<u32>, Outcome)>,
) -> RuleOutcomes {
    let mut out = RuleOutcomes::new();
    for (rule, owner, o) in retries {
        let n = out.entry((rule.to_string(), owner)).or_default();
        match o {
            Outcome::Completed => n.0 += 1,
            Outcome::Failed => n.1 += 1,
            Outcome::Running => n.2 += 1,
        }
    }
    out
}

/// The rules of `outcomes` whose retries stopped working ([`not_working`]).
pub fn not_working_rules(outcomes: &RuleOutcomes, t: Thresholds) -> Vec<RuleKey> {
    outcomes
        .iter()
        .filter(|(_, (ok, bad, _))| not_working(*ok, *bad, t))
        .map(|(key, _)| key.clone())
        .collect()
}

/// `rule`, proposed as `proposal`, as a `[[rules]]` entry of a config or `rules.d/` file
/// (its `proposal` key names it in every decision the rule makes).
pub fn rule_toml(rule: &ProposedRule, proposal: &str) -> String {
    #[derive(Serialize)]
    struct Entry<'a> {
        name: &'a str,
        kind: &'a str,
        exit_codes: &'a [i32],
        stderr: &'a str,
        proposal: &'a str,
    }
    #[derive(Serialize)]
    struct File<'a> {
        rules: [Entry<'a>; 1],
    }
    let file = File {
        rules: [Entry {
            name: &rule.name,
            kind: rule.kind.as_str(),
            exit_codes: &rule.exit_codes,
            stderr: &rule.stderr,
            proposal,
        }],
    };
    // Strings, integers and one array of tables: nothing TOML cannot write.
    toml::to_string(&file).unwrap_or_default()
}

/// A regex over stderr that matches the lines a signature's masked `text` came from:
/// the text's words literally, each mask by what it hides, any whitespace by any.
pub fn stderr_pattern(text: &str) -> String {
    use crate::domain::signature::{DATE, DIR, HEX, NAME, NUM, TIME};
    let masks: [(&str, &str); 6] = [
        (TIME, r"\S+(?:[ T]\S+)*?"),
        (DATE, r"\S+"),
        (DIR, r"/\S*?"),
        (NAME, r"[\w.-]+?"),
        (HEX, r"(?:0[xX])?[0-9a-fA-F]+"),
        (NUM, r"[0-9]+(?:\.[0-9]+)?"),
    ];
    let mut out = String::new();
    let mut rest = text;
    'outer: while !rest.is_empty() {
        for (mask, re) in masks {
            if let Some(after) = rest.strip_prefix(mask) {
                out.push_str(re);
                rest = after;
                continue 'outer;
            }
        }
        let c = rest.chars().next().unwrap_or(' ');
        if c == crate::domain::signature::LT || c == crate::domain::signature::GT {
            // A `<` or `>` of stderr itself (`signature::mask_line`), matched as it was.
            out.push_str(if c == crate::domain::signature::LT {
                "[<\u{2039}]"
            } else {
                "[>\u{203a}]"
            });
            rest = &rest[c.len_utf8()..];
        } else if c.is_whitespace() {
            out.push_str(r"\s+");
            rest = rest.trim_start();
        } else {
            out.push_str(&regex::escape(&c.to_string()));
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::signature::{signature, JobSpecifics};

    const T: Thresholds = Thresholds {
        agreeing: 3,
        min_success: 0.8,
    };

    fn r(n: i64, action: Action, change: Change, outcome: Option<Outcome>) -> Resolved {
        Resolved {
            decision: n,
            chain: format!("c{n}"),
            attempt: 1,
            at: n,
            actor: "user:alice".into(),
            action,
            change,
            outcome,
        }
    }

    fn retry(n: i64, o: Outcome) -> Resolved {
        r(n, Action::Resubmit, Change::Unchanged, Some(o))
    }

    fn history(resolutions: Vec<Resolved>) -> SignatureHistory {
        SignatureHistory {
            signature: "0123456789ab".into(),
            text: "RuntimeError: checkpoint shard <n> has an unexpected checksum <hex>".into(),
            slurm_state: "FAILED".into(),
            exit_code: "1:0".into(),
            endings: 4,
            resolutions,
        }
    }

    #[test]
    fn three_agreeing_retries_that_completed_make_a_transient_rule() {
        use Outcome::Completed;
        let p = propose(
            &history(vec![
                retry(1, Completed),
                retry(2, Completed),
                retry(3, Completed),
            ]),
            T,
        )
        .unwrap();
        assert_eq!(p.id, "0123456789ab");
        assert_eq!(p.rule.kind, Classification::Transient);
        assert_eq!(p.rule.exit_codes, vec![1]);
        assert_eq!(p.rule.change, Change::Unchanged);
        assert_eq!((p.completed, p.failed, p.running), (3, 0, 0));
        assert_eq!(p.evidence.len(), 3);
        assert!(p.conflicts.is_empty());
    }

    #[test]
    fn disagreement_failed_retries_and_too_few_make_none() {
        use Outcome::*;
        // Twice retry, once fail: two agree, fewer than three.
        let split = vec![
            retry(1, Completed),
            retry(2, Completed),
            r(3, Action::Fail, Change::None, None),
        ];
        assert_eq!(propose(&history(split), T), None);
        // Three retries that failed.
        let failed = vec![retry(1, Failed), retry(2, Failed), retry(3, Failed)];
        assert_eq!(propose(&history(failed), T), None);
        // Two of three completed: below 0.8.
        let mostly = vec![retry(1, Completed), retry(2, Completed), retry(3, Failed)];
        assert_eq!(propose(&history(mostly.clone()), T), None);
        assert!(propose(
            &history(mostly),
            Thresholds {
                min_success: 0.6,
                ..T
            }
        )
        .is_some());
        // Three retries, one still running: not enough have ended.
        let running = vec![retry(1, Completed), retry(2, Completed), retry(3, Running)];
        assert_eq!(propose(&history(running), T), None);
        // Agreeing retries that added memory: no rule may give that.
        let mem = (1..=3)
            .map(|n| r(n, Action::Resubmit, Change::MoreMemory, Some(Completed)))
            .collect();
        assert_eq!(propose(&history(mem), T), None);
        // Not a FAILED ending.
        let mut node_fail = history((1..=3).map(|n| retry(n, Completed)).collect());
        node_fail.slurm_state = "NODE_FAIL".into();
        assert_eq!(propose(&node_fail, T), None);
    }

    #[test]
    fn a_proposal_shows_its_conflicts() {
        use Outcome::Completed;
        let p = propose(
            &history(vec![
                retry(1, Completed),
                r(2, Action::Fail, Change::None, None),
                retry(3, Completed),
                retry(4, Completed),
            ]),
            T,
        )
        .unwrap();
        assert_eq!(
            p.evidence.iter().map(|r| r.decision).collect::<Vec<_>>(),
            [1, 3, 4]
        );
        assert_eq!(
            p.conflicts.iter().map(|r| r.decision).collect::<Vec<_>>(),
            [2]
        );
    }

    #[test]
    fn the_entry_is_a_valid_config_with_the_rule() {
        use Outcome::Completed;
        let p = propose(&history((1..=3).map(|n| retry(n, Completed)).collect()), T).unwrap();
        let c = crate::config::Config::parse(&p.toml, None).unwrap();
        assert_eq!(c.rules.len(), 1, "{}", p.toml);
        let r = &c.rules[0];
        assert_eq!(
            (r.name.as_str(), r.kind),
            ("learnt-0123456789ab", Classification::Transient)
        );
        assert_eq!(r.exit_codes, vec![1]);
        assert_eq!(r.proposal.as_deref(), Some("0123456789ab"));
        assert!(r
            .stderr
            .as_ref()
            .unwrap()
            .is_match("RuntimeError: checkpoint shard 7 has an unexpected checksum 0badc0de"));
    }

    #[test]
    fn retries_are_tallied_by_rule() {
        use Outcome::*;
        let t = tally([
            ("io", None, Failed),
            ("io", None, Failed),
            ("nccl", None, Completed),
            ("io", None, Completed),
            ("io", None, Failed),
            ("nccl", None, Running),
        ]);
        assert_eq!(t[&("io".to_string(), None)], (1, 3, 0));
        assert_eq!(t[&("nccl".to_string(), None)], (1, 0, 1));
        assert_eq!(not_working_rules(&t, T), [("io".to_string(), None)]);
    }

    /// Bob's own rule `learnt-<sig>` failing stops neither alice's own rule of that name
    /// nor a rule of that name for everyone: each is counted by its own retries.
    #[test]
    fn a_users_own_rules_retries_count_for_that_users_rule_alone() {
        use Outcome::*;
        let name = "learnt-0123456789ab";
        let t = tally([
            (name, Some(2000), Failed),
            (name, Some(2000), Failed),
            (name, Some(2000), Failed),
            (name, Some(1000), Completed),
            (name, Some(1000), Completed),
            (name, None, Completed),
        ]);
        assert_eq!(t[&(name.to_string(), Some(2000))], (0, 3, 0));
        assert_eq!(t[&(name.to_string(), Some(1000))], (2, 0, 0));
        assert_eq!(t[&(name.to_string(), None)], (1, 0, 0));
        assert_eq!(not_working_rules(&t, T), [(name.to_string(), Some(2000))]);
    }

    #[test]
    fn a_rule_is_not_working_once_enough_retries_failed() {
        assert!(!not_working(0, 2, T), "too few ended to say");
        assert!(not_working(1, 2, T));
        assert!(!not_working(4, 1, T));
        assert!(not_working(3, 1, T));
    }

    #[test]
    fn agreeing_fails_make_a_permanent_rule() {
        let p = propose(
            &history(
                (1..=3)
                    .map(|n| r(n, Action::Fail, Change::None, None))
                    .collect(),
            ),
            T,
        )
        .unwrap();
        assert_eq!(p.rule.kind, Classification::Permanent);
        assert!(Classification::Permanent.row().by_rule && Classification::Transient.row().by_rule);
    }

    #[test]
    fn the_pattern_matches_the_stderr_the_signature_came_from() {
        let job_a = JobSpecifics {
            dirs: vec!["/home/alice/run-1"],
            names: vec!["alice", "gpu017"],
        };
        let job_b = JobSpecifics {
            dirs: vec!["/scratch/bob"],
            names: vec!["bob", "node-a3"],
        };
        let a = "[2026-11-28T23:28:53.123Z] loading /home/alice/run-1/ckpt/shard3.pt on gpu017\n\
                 RuntimeError: checkpoint shard 3 has an unexpected checksum 3f2a9bc1 (job 81234)\n";
        let b = "[2026-12-01 04:05:06] loading /scratch/bob/ckpt/shard12.pt on node-a3\n\
                 RuntimeError:   checkpoint shard 12 has an unexpected checksum 0xdead (job 5)\n";
        let sa = signature("FAILED", "1:0", Some(a), &job_a);
        assert_eq!(sa, signature("FAILED", "1:0", Some(b), &job_b));
        let pattern = stderr_pattern(&sa.text);
        let re = regex::Regex::new(&pattern).unwrap();
        assert!(re.is_match(a), "{pattern}");
        assert!(re.is_match(b), "{pattern}");
        assert!(!re.is_match("RuntimeError: NCCL timeout"), "{pattern}");
        // What a rule matches is literal where the text is: no regex syntax leaks in.
        assert_eq!(
            stderr_pattern("a.b (x) <n>"),
            r"a\.b\s+\(x\)\s+[0-9]+(?:\.[0-9]+)?"
        );
    }

    fn record(id: i64, proposal: &str, owner: Option<u32>, action: RuleAction) -> RuleRecord {
        let rule = (action == RuleAction::Accept).then(|| ProposedRule {
            name: format!("learnt-{proposal}"),
            kind: Classification::Transient,
            exit_codes: vec![1],
            stderr: "shard [0-9]+".into(),
            change: Change::Unchanged,
        });
        RuleRecord {
            id,
            proposal: proposal.into(),
            owner_uid: owner,
            scope: String::new(),
            action,
            actor: "user:root".into(),
            actor_uid: 0,
            at: id,
            reason: String::new(),
            rule,
        }
    }

    #[test]
    fn a_proposal_stands_by_the_viewers_own_latest_decision_else_everyones() {
        use RuleAction::*;
        let records = [
            record(1, "aaaaaaaaaaaa", None, Reject),
            record(2, "aaaaaaaaaaaa", Some(1000), Accept),
            record(3, "bbbbbbbbbbbb", Some(1000), Reject),
            record(4, "bbbbbbbbbbbb", None, Reject),
        ];
        let at = |p, v| standing(&records, p, v).map(|r| r.id);
        // The admin's view: everyone's decisions only.
        assert_eq!(at("aaaaaaaaaaaa", None), Some(1));
        assert_eq!(
            state_of(standing(&records, "aaaaaaaaaaaa", None)),
            ProposalState::Rejected
        );
        // Alice accepted it for her chains after the admin rejected it for everyone.
        assert_eq!(at("aaaaaaaaaaaa", Some(1000)), Some(2));
        assert_eq!(
            state_of(standing(&records, "aaaaaaaaaaaa", Some(1000))),
            ProposalState::Accepted
        );
        // Bob sees the admin's rejection.
        assert_eq!(at("aaaaaaaaaaaa", Some(2000)), Some(1));
        assert_eq!(at("bbbbbbbbbbbb", Some(1000)), Some(3));
        assert_eq!(at("cccccccccccc", Some(1000)), None);
        assert_eq!(state_of(None), ProposalState::Waiting);
    }

    /// An admin's rejection for everyone, newer than a user's own acceptance, takes the
    /// user's rule out of force; the user's acceptance after it puts it back.
    #[test]
    fn a_rejection_for_everyone_after_a_users_own_acceptance_takes_it_out_of_force() {
        use RuleAction::*;
        let mut records = vec![
            record(1, "aaaaaaaaaaaa", Some(1000), Accept),
            record(2, "bbbbbbbbbbbb", Some(1000), Accept),
            record(3, "aaaaaaaaaaaa", None, Reject),
        ];
        let ids = |records: &[RuleRecord]| {
            accepted_by(records, 1000)
                .iter()
                .map(|r| r.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&records), [2]);
        assert_eq!(
            standing(&records, "aaaaaaaaaaaa", Some(1000)).map(|r| r.id),
            Some(3)
        );
        assert_eq!(
            state_of(standing(&records, "aaaaaaaaaaaa", Some(1000))),
            ProposalState::Rejected
        );
        records.push(record(4, "aaaaaaaaaaaa", Some(1000), Accept));
        assert_eq!(ids(&records), [2, 4]);
        assert_eq!(
            standing(&records, "aaaaaaaaaaaa", Some(1000)).map(|r| r.id),
            Some(4)
        );
        // An acceptance for everyone after it does not take it out.
        records.push(record(5, "bbbbbbbbbbbb", None, Accept));
        assert_eq!(ids(&records), [2, 4]);
    }

    #[test]
    fn a_users_rules_are_their_latest_acceptances_and_no_one_elses() {
        use RuleAction::*;
        let records = [
            record(1, "aaaaaaaaaaaa", Some(1000), Accept),
            record(2, "bbbbbbbbbbbb", Some(1000), Accept),
            record(3, "aaaaaaaaaaaa", Some(1000), Reject),
            record(4, "cccccccccccc", Some(2000), Accept),
            record(5, "dddddddddddd", None, Accept),
        ];
        let ids = |owner| {
            accepted_by(&records, owner)
                .iter()
                .map(|r| r.id)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            ids(1000),
            [2],
            "a rejection after an acceptance takes it out"
        );
        assert_eq!(ids(2000), [4]);
        assert_eq!(
            ids(3000),
            Vec::<i64>::new(),
            "an admin's record is no user's rule"
        );
        let rule = rule_in_force(accepted_by(&records, 2000)[0]).unwrap();
        assert_eq!(rule.name, "learnt-cccccccccccc");
        assert_eq!(rule.proposal.as_deref(), Some("cccccccccccc"));
        assert!(rule.stderr.unwrap().is_match("shard 12"));
    }

    /// Placeholders typed into stderr (`<time>`, `<name>`) stay text: they neither make
    /// the signature of a real timestamp nor a pattern that matches anything.
    #[test]
    fn placeholders_typed_into_stderr_are_text_not_wildcards() {
        use crate::domain::signature::{signature, JobSpecifics};
        let typed = signature("FAILED", "1:0", Some("<time>\n"), &JobSpecifics::default());
        let real = signature(
            "FAILED",
            "1:0",
            Some("2026-11-28T23:28:53Z\n"),
            &JobSpecifics::default(),
        );
        assert_ne!(typed.text, real.text);
        assert_ne!(typed.id, real.id);
        let re = regex::Regex::new(&stderr_pattern(&typed.text)).unwrap();
        assert!(!re.is_match("Segmentation fault (core dumped)\n"));
        // What was typed is still matched as it was.
        assert!(re.is_match("<time>\n"));
        let named = signature(
            "FAILED",
            "1:0",
            Some("error in <module> of alice: <name>\n"),
            &JobSpecifics {
                dirs: vec![],
                names: vec!["alice"],
            },
        );
        assert_eq!(
            named.text,
            "error in \u{2039}module\u{203a} of <name>: \u{2039}name\u{203a}"
        );
        let re = regex::Regex::new(&stderr_pattern(&named.text)).unwrap();
        assert!(re.is_match("error in <module> of bob: <name>"));
        assert!(!re.is_match("error in <module> of bob: anything"));
    }

    /// A rule's pattern is compiled within a bound: what a proposal makes of stderr
    /// compiles, a pattern past the bound is refused rather than run every batch.
    #[test]
    fn a_rules_pattern_is_compiled_within_a_size_limit() {
        let line = "2026-11-28T23:28:53Z ".repeat(10);
        let text = crate::domain::signature::mask_tail(
            &format!("{line}\n{line}\n{line}\n{line}\n"),
            &crate::domain::signature::JobSpecifics::default(),
        );
        assert!(compile_rule_pattern(&stderr_pattern(&text)).is_ok());
        let e = compile_rule_pattern(&r"\w{1000}".repeat(8)).unwrap_err();
        assert!(e.to_string().contains("size limit"), "{e}");
    }
}
