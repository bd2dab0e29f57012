//! What the submitter is told about a chain, and how: pure, no I/O (the daemon's
//! `notifications` module delivers it).
//!
//! A chain tells its submitter when it needs a person (it enters `pending_failed`, a
//! reminder, an expiry that held it) or ends for good (`completed`, `failed`, or cancelled
//! by the supervisor because a job it waits on failed for good:
//! `dependency_never_satisfied`, what Slurm's `INVALID_DEPEND` mail is for a job), once per
//! event. It honours the submission's own `--mail-type` and `--mail-user`, as Slurm does
//! for a job, with this mapping (see docs/configuration.md, `[notify]`):
//!
//! | event | mailed when `--mail-type` has |
//! |---|---|
//! | `completed` | `END` or `ALL` |
//! | `failed` | `END`, `FAIL` or `ALL` |
//! | `pending_failed`, `reminder`, `expired` | anything but `NONE`, or no `--mail-type` at all |
//! | `dependency_never_satisfied` | `INVALID_DEPEND` or `ALL` |
//!
//! `pending_failed` is mailed without a `--mail-type` because it is the one event that
//! waits for the user: nothing else happens to the chain until someone resolves it, and
//! without the mail no one would know. A user who wants no mail at all says
//! `--mail-type=NONE`.
//!
//! The attempts' own `--mail-type` loses `FAIL`, `REQUEUE` and `END` (and `ALL` becomes
//! `BEGIN,INVALID_DEPEND,STAGE_OUT`, what is left of it): Slurm would mail each failed or
//! requeued attempt (and with `END` alone, every ending, failed ones included), which for a
//! supervised job is noise; the chain-level mail replaces them.

use serde::{Deserialize, Serialize};

/// Something a submitter is told about one chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The chain entered `pending_failed`: it waits for an agent or a person.
    PendingFailed,
    /// The chain completed.
    Completed,
    /// The chain failed for good.
    Failed,
    /// The chain still waits in `pending_failed` after `escalation.remind_after`.
    Reminder,
    /// `escalation.expire_action = "hold"` held the chain for a person.
    Expired,
    /// The supervisor cancelled the chain: a job it waits on failed for good, so its
    /// dependency can never be satisfied.
    DependencyNeverSatisfied,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::PendingFailed => "pending_failed",
            Kind::Completed => "completed",
            Kind::Failed => "failed",
            Kind::Reminder => "reminder",
            Kind::Expired => "expired",
            Kind::DependencyNeverSatisfied => "dependency_never_satisfied",
        }
    }

    /// Every kind.
    pub const ALL: [Kind; 6] = [
        Kind::PendingFailed,
        Kind::Completed,
        Kind::Failed,
        Kind::Reminder,
        Kind::Expired,
        Kind::DependencyNeverSatisfied,
    ];

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether the chain waits for a person after this event.
    pub fn needs_person(self) -> bool {
        matches!(self, Kind::PendingFailed | Kind::Reminder | Kind::Expired)
    }
}

/// The mail types of a `--mail-type` value, upper-cased (Slurm reads them without case).
fn types(given: &str) -> Vec<String> {
    given
        .split(',')
        .map(|t| t.trim().to_ascii_uppercase())
        .filter(|t| !t.is_empty())
        .collect()
}

/// Whether the submitter is mailed about `kind`, given the submission's `--mail-type` in
/// force (`None`: not given). See the module's table.
pub fn wants_mail(kind: Kind, mail_type: Option<&str>) -> bool {
    let Some(given) = mail_type else {
        return kind.needs_person();
    };
    let t = types(given);
    let has = |name: &str| t.iter().any(|x| x == name);
    match kind {
        Kind::Completed => has("END") || has("ALL"),
        Kind::Failed => has("END") || has("FAIL") || has("ALL"),
        Kind::DependencyNeverSatisfied => has("INVALID_DEPEND") || has("ALL"),
        Kind::PendingFailed | Kind::Reminder | Kind::Expired => t.iter().any(|x| x != "NONE"),
    }
}

/// Mail types the supervisor takes over from Slurm for a supervised job.
const TAKEN_OVER: [&str; 3] = ["FAIL", "REQUEUE", "END"];
/// What `ALL` means besides those (sbatch(1): BEGIN, END, FAIL, INVALID_DEPEND, REQUEUE
/// and STAGE_OUT).
const ALL_REST: [&str; 3] = ["BEGIN", "INVALID_DEPEND", "STAGE_OUT"];

/// The `--mail-type` an attempt gets instead of `given`, or `None` to keep it as it is.
/// `FAIL`, `REQUEUE` and `END` are dropped, `ALL` becomes the rest of what it means; what
/// remains of nothing is `NONE`. Unknown types stay (sbatch is their judge).
pub fn supervised_mail_type(given: &str) -> Option<String> {
    let t = types(given);
    if !t
        .iter()
        .any(|x| TAKEN_OVER.contains(&x.as_str()) || x == "ALL")
    {
        return None;
    }
    let mut out: Vec<String> = Vec::new();
    for x in t {
        let add: Vec<String> = if x == "ALL" {
            ALL_REST.iter().map(|s| s.to_string()).collect()
        } else if TAKEN_OVER.contains(&x.as_str()) || x == "NONE" {
            Vec::new()
        } else {
            vec![x]
        };
        for a in add {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    Some(if out.is_empty() {
        "NONE".to_string()
    } else {
        out.join(",")
    })
}

/// The longest recipient accepted.
const MAX_RECIPIENT: usize = 256;

/// A recipient that cannot be taken for an option or break a header: not empty, no
/// leading `-`, no whitespace or control characters, at most 256 bytes.
pub fn valid_recipient(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= MAX_RECIPIENT
        && !r.starts_with('-')
        && !r.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// One line of user-controlled text (a job name) fit for a subject: control characters
/// become spaces, cut to `max` characters.
pub fn one_line(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max)
        .collect()
}

/// One chain's event, with what the mail and the notify command tell of it.
/// Its serialized form is the notify command's stdin (docs/json-schemas.md,
/// `notification`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// What happened (`pending_failed`, `completed`, `failed`, `reminder`, `expired`,
    /// `dependency_never_satisfied`).
    pub event: Kind,
    /// The chain's id (`c17`).
    pub chain: String,
    /// The submitter's user name.
    pub user: String,
    /// The job's `--job-name`, if it has one.
    pub job_name: Option<String>,
    /// The chain's latest Slurm job id.
    pub job: Option<String>,
    /// The chain's classification of the failure (null for a success).
    pub classification: Option<String>,
    /// Why, in a sentence (the decision record's reason).
    pub reason: String,
    /// The reason's stable name (`reason_code`), null for a success.
    pub reason_code: Option<String>,
    /// Who decided: `supervisor`, `user:<name>`, `expiry`.
    pub actor: Option<String>,
    /// When the event happened (unix seconds).
    pub at: i64,
    /// For a chain that waits for a person: the command that resolves it.
    pub resolve: Option<String>,
    /// Who is mailed, or null when no mail is sent for it.
    pub mail_to: Option<String>,
}

/// The command a person runs to resolve a waiting chain.
pub fn resolve_command(chain: &str) -> String {
    format!("supervisorctl classify {chain} --action retry|fail|hold --reason \"...\"")
}

/// A mail's subject and body, for events of the same submission and kind.
pub fn mail_text(events: &[Event]) -> (String, String) {
    let Some(first) = events.first() else {
        return (String::new(), String::new());
    };
    let chains: Vec<&str> = events.iter().map(|e| e.chain.as_str()).collect();
    let name = first
        .job_name
        .as_deref()
        .map(|n| format!(" ({})", one_line(n, 80)))
        .unwrap_or_default();
    let what = match first.event {
        Kind::PendingFailed => "needs you: waits in pending_failed",
        Kind::Reminder => "still needs you: waits in pending_failed",
        Kind::Expired => "held for you: nobody resolved it in time",
        Kind::Completed => "completed",
        Kind::Failed => "failed",
        Kind::DependencyNeverSatisfied => {
            "cancelled: a job it waits on failed for good, so it can never start"
        }
    };
    let label = if chains.len() == 1 {
        format!("chain {}", chains[0])
    } else {
        format!(
            "{} chains ({})",
            chains.len(),
            one_line(&chains.join(","), 60)
        )
    };
    let subject = format!("slurm-supervisor: {label}{name} {what}");
    let mut body = String::new();
    for e in events {
        body.push_str(&format!(
            "Chain {}{}: {}\n",
            e.chain,
            e.job
                .as_deref()
                .map(|j| format!(", Slurm job {j}"))
                .unwrap_or_default(),
            e.event.as_str()
        ));
        if let Some(c) = &e.classification {
            body.push_str(&format!("Classification: {c}\n"));
        }
        body.push_str(&format!("Reason: {}\n", e.reason));
        if let Some(a) = &e.actor {
            body.push_str(&format!("Decided by: {a}\n"));
        }
        if let Some(r) = &e.resolve {
            body.push_str(&format!(
                "To resolve it: {r}\nIts evidence: supervisorctl history {} (or supervisorctl pending)\n",
                e.chain
            ));
        }
        body.push('\n');
    }
    body.push_str(
        "-- \nslurm-supervisor, on behalf of your supervised Slurm jobs. \
This mail follows your job's --mail-type (--mail-type=NONE for none).\n",
    );
    (subject, quote_tildes(&body))
}

/// A line that starts with `~` would be a command to some mail programs reading a
/// terminal; it is indented so it never is one.
fn quote_tildes(body: &str) -> String {
    body.lines()
        .map(|l| {
            if l.starts_with('~') {
                format!(" {l}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mail_types_map_to_chain_events() {
        use Kind::*;
        let cases: &[(Option<&str>, &[Kind])] = &[
            (None, &[PendingFailed, Reminder, Expired]),
            (Some("NONE"), &[]),
            (
                Some("END"),
                &[Completed, Failed, PendingFailed, Reminder, Expired],
            ),
            (Some("fail"), &[Failed, PendingFailed, Reminder, Expired]),
            (
                Some("ALL"),
                &[
                    Completed,
                    Failed,
                    PendingFailed,
                    Reminder,
                    Expired,
                    DependencyNeverSatisfied,
                ],
            ),
            (Some("BEGIN"), &[PendingFailed, Reminder, Expired]),
            (
                Some("BEGIN,END"),
                &[Completed, Failed, PendingFailed, Reminder, Expired],
            ),
            (
                Some("invalid_depend"),
                &[PendingFailed, Reminder, Expired, DependencyNeverSatisfied],
            ),
        ];
        for (given, want) in cases {
            for k in Kind::ALL {
                assert_eq!(
                    wants_mail(k, *given),
                    want.contains(&k),
                    "{given:?} {}",
                    k.as_str()
                );
            }
        }
    }

    #[test]
    fn attempts_lose_the_mails_the_chain_takes_over() {
        let cases = [
            ("FAIL", Some("NONE")),
            ("ALL", Some("BEGIN,INVALID_DEPEND,STAGE_OUT")),
            ("BEGIN,END,FAIL", Some("BEGIN")),
            ("REQUEUE,TIME_LIMIT_80", Some("TIME_LIMIT_80")),
            (
                "all,array_tasks",
                Some("BEGIN,INVALID_DEPEND,STAGE_OUT,ARRAY_TASKS"),
            ),
            ("BEGIN", None),
            ("NONE", None),
            ("TIME_LIMIT", None),
        ];
        for (given, want) in cases {
            assert_eq!(supervised_mail_type(given).as_deref(), want, "{given}");
        }
    }

    #[test]
    fn hostile_recipients_are_refused() {
        assert!(valid_recipient("alice"));
        assert!(valid_recipient("alice@example.org"));
        for bad in [
            "",
            "-oQ/tmp/x",
            "alice\nBcc: eve",
            "alice eve",
            "a\rb",
            &"x".repeat(300),
        ] {
            assert!(!valid_recipient(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_mail_names_the_chain_and_the_way_out_and_cannot_grow_headers() {
        let e = Event {
            event: Kind::PendingFailed,
            chain: "c7".into(),
            user: "alice".into(),
            job_name: Some("train\nBcc: eve@evil".into()),
            job: Some("123".into()),
            classification: Some("ambiguous".into()),
            reason: "weird: waiting for an agent to decide\n~! rm -rf".into(),
            reason_code: Some("needs_agent".into()),
            actor: Some("supervisor".into()),
            at: 0,
            resolve: Some(resolve_command("c7")),
            mail_to: Some("alice".into()),
        };
        let (subject, body) = mail_text(&[e]);
        assert!(!subject.contains('\n'), "{subject}");
        assert!(subject.contains("c7") && subject.contains("pending_failed"));
        assert!(
            body.contains("supervisorctl classify c7 --action"),
            "{body}"
        );
        assert!(body.contains("Classification: ambiguous"));
        assert!(body.contains("\n ~! rm -rf\n"), "{body}");
    }
}
