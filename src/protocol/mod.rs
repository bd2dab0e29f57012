//! The control protocol between `supervisorctl` and the daemon: one JSON request per
//! connection, one JSON line back. The answers' types are in [`views`]; they are also
//! what `--json` prints, so their field names are a stable contract
//! (docs/json-schemas.md).

pub mod net;
pub mod views;

// A resolution, a recover and the resolve action are the product's vocabulary (policy
// decides on them): they live in `crate::domain::model` and travel here as they are.
pub use crate::domain::model::{RecoverRequest, Resolution, ResolveAction};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Submit(SubmitRequest),
    Adopt {
        job_ids: Vec<String>,
    },
    /// The caller's plain `sbatch` submissions are supervised (true) or not (false) from
    /// now on (`supervisorctl opt-in` / `opt-out`).
    PlainOpt {
        opted_in: bool,
    },
    Status {
        id: Option<String>,
    },
    History {
        id: String,
    },
    Pending,
    Classify(Resolution),
    Recover(RecoverRequest),
    Cancel {
        id: String,
    },
    Stats {
        id: Option<String>,
    },
    /// Which daemon acts and what each daemon of the cluster does (`supervisorctl
    /// cluster`).
    Cluster,
    Ping,
    /// The rules in force and the rules proposed from resolutions (`supervisorctl
    /// rules`, docs/rules.md).
    Rules,
    /// Puts a rule proposal in force: its entry written to `rules.d/` beside the config
    /// (`supervisorctl rules accept ID`, docs/rules.md).
    RulesAccept {
        id: String,
        /// Accept it although some resolutions of its signature decided otherwise.
        #[serde(default)]
        despite_conflicts: bool,
        /// Accept it although it was rejected.
        #[serde(default)]
        despite_rejection: bool,
        /// For the caller's own chains only (kept in the store), not for everyone; what a
        /// caller who is not an admin gets either way.
        #[serde(default)]
        mine: bool,
        /// Why (kept in the decision's record).
        #[serde(default)]
        reason: Option<String>,
    },
    /// Rejects a rule proposal: the decision is kept in the store, and `rules` shows the
    /// proposal as rejected (`supervisorctl rules reject ID`, docs/rules.md).
    RulesReject {
        id: String,
        #[serde(default)]
        reason: Option<String>,
        /// For the caller's own chains only; what a caller who is not an admin gets
        /// either way.
        #[serde(default)]
        mine: bool,
    },
}

/// What a request is, as both sides need to know it: said once for each kind, in
/// [`Request::head`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head<'a> {
    /// The request's `cmd`, as it is sent.
    pub cmd: &'static str,
    /// It only reads: any daemon answers it (a standby of cluster mode too, from its
    /// replica), off the daemon's loop, and a client may send it again when its answer
    /// was lost. Every other request changes something: the active daemon's loop answers
    /// it.
    pub read: bool,
    /// The chain or job it names, as the client gave it.
    pub subject: Option<&'a str>,
}

impl Request {
    /// What this request is. The one `match` on a request outside the daemon's dispatch
    /// (`daemon::requests::dispatch`, which says how each is answered); no wildcard, so a
    /// new request is placed here when it is added.
    pub fn head(&self) -> Head<'_> {
        let (cmd, read, subject) = match self {
            Request::Submit(_) => ("submit", false, None),
            Request::Adopt { .. } => ("adopt", false, None),
            Request::PlainOpt { .. } => ("plain_opt", false, None),
            Request::Status { id } => ("status", true, id.as_deref()),
            Request::History { id } => ("history", true, Some(id.as_str())),
            Request::Pending => ("pending", true, None),
            Request::Classify(r) => ("classify", false, Some(r.id.as_str())),
            Request::Recover(r) => ("recover", false, Some(r.id.as_str())),
            Request::Cancel { id } => ("cancel", false, Some(id.as_str())),
            Request::Stats { id } => ("stats", true, id.as_deref()),
            Request::Cluster => ("cluster", true, None),
            Request::Ping => ("ping", true, None),
            Request::Rules => ("rules", true, None),
            Request::RulesAccept { id, .. } => ("rules_accept", false, Some(id.as_str())),
            Request::RulesReject { id, .. } => ("rules_reject", false, Some(id.as_str())),
        };
        Head { cmd, read, subject }
    }

    /// The request's `cmd`, as it is sent.
    pub fn cmd(&self) -> &'static str {
        self.head().cmd
    }

    /// True for the requests whose answer depends on whether the caller decides rules for
    /// everyone (`[learn] admin_group`): the connection looks the caller's groups up, off
    /// the loop, before the request goes on (`daemon::access::Caller`). A request for the
    /// caller's own chains only (`--mine`) needs no lookup.
    pub fn asks_rule_admin(&self) -> bool {
        match self {
            Request::Rules => true,
            Request::RulesAccept { mine, .. } | Request::RulesReject { mine, .. } => !mine,
            _ => false,
        }
    }

    /// True for the requests that only read: answered from the store by any daemon,
    /// a standby of cluster mode too (its replica), off the daemon's loop.
    pub fn is_read(&self) -> bool {
        self.head().read
    }

    /// The chain or job a request names, as the client gave it.
    pub fn subject(&self) -> Option<&str> {
        self.head().subject
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// The sbatch options, the script and its arguments, as the user gave them.
    pub argv: Vec<String>,
    pub cwd: String,
    /// The user's environment (sbatch exports it to the job by default).
    pub env: Vec<(String, String)>,
    /// The script's content, read by the client with the user's own permissions. Sent as
    /// base64 (a JSON array of byte values is accepted too).
    #[serde(default, with = "script_bytes")]
    pub script: Option<Vec<u8>>,
    pub max_retries: Option<u32>,
    /// A rerun of the script is safe even after some of its srun steps completed
    /// (`submit --restartable`); false leaves it to the config's `retry.restartable`.
    #[serde(default)]
    pub restartable: bool,
    /// The job continues from its own checkpoints (`submit --continue`,
    /// docs/continuation.md); the script's `#SSV` lines add to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<crate::domain::continuation::Continuation>,
    /// The client's id for this submission (1 to 64 of `A-Z a-z 0-9 - _`): a retry with
    /// the same id, by the same user, is answered with the first one's job instead of
    /// submitting again (`supervisorctl` sends one over the network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// Whether `id` is a request id the daemon accepts.
pub fn valid_request_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The daemon's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    Ok(serde_json::Value),
    Error(ErrorBody),
}

/// What went wrong, and the exit code the client should use.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub kind: ErrorKind,
    pub message: String,
    /// For `sbatch_failed`: sbatch's own exit code and stderr, passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request is malformed or names something that does not exist.
    Usage,
    /// No chain or job with that id.
    NotFound,
    /// The chain is not in a state where that is allowed.
    Conflict,
    /// Not your chain.
    Forbidden,
    /// sbatch refused the submission.
    SbatchFailed,
    /// Slurm did not answer; try again later.
    Unavailable,
    /// Something broke inside the daemon.
    Internal,
}

impl ErrorKind {
    /// The documented exit code of `supervisorctl` for this error.
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Usage => 2,
            ErrorKind::NotFound => 3,
            ErrorKind::Conflict => 4,
            ErrorKind::Forbidden => 77,
            ErrorKind::SbatchFailed => 1,
            ErrorKind::Unavailable => 75,
            ErrorKind::Internal => 70,
        }
    }
}

impl Response {
    /// A typed answer put on the wire. Serializing the answer types cannot fail (their
    /// maps have string keys); if one ever did, the client is told so, not left waiting.
    pub fn answer<T: Serialize>(answer: &T) -> Response {
        match serde_json::to_value(answer) {
            Ok(v) => Response::Ok(v),
            Err(e) => Response::error(
                ErrorKind::Internal,
                format!("cannot encode the answer: {e}; please report this"),
            ),
        }
    }

    pub fn error(kind: ErrorKind, message: impl Into<String>) -> Response {
        Response::Error(ErrorBody {
            kind,
            message: message.into(),
            exit_code: None,
            stderr: None,
        })
    }
}

/// The daemon's answer did not have the shape this client expects.
#[derive(Debug, thiserror::Error)]
#[error("the daemon's answer is not what this supervisorctl understands ({0}); are the daemon and supervisorctl the same version?")]
pub struct UnexpectedAnswer(#[from] serde_json::Error);

/// Reads an `Ok` answer's value as the type the request promises.
pub fn decode<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, UnexpectedAnswer> {
    Ok(serde_json::from_value(value)?)
}

/// A script's bytes on the wire: base64 text, four characters for three bytes, quick to
/// write and to read however big the script (an array of numbers is up to four times the
/// script and slow to parse). An array of byte values is still read. (The store's journal
/// writes a submission's script the same way.)
pub mod script_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_some(&base64::engine::general_purpose::STANDARD.encode(b)),
            None => s.serialize_none(),
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Wire {
        Base64(String),
        Bytes(Vec<u8>),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<Wire>::deserialize(d)? {
            None => Ok(None),
            Some(Wire::Bytes(b)) => Ok(Some(b)),
            Some(Wire::Base64(t)) => base64::engine::general_purpose::STANDARD
                .decode(t)
                .map(Some)
                .map_err(|e| serde::de::Error::custom(format!("script is not valid base64: {e}"))),
        }
    }
}

/// One request of each kind as a client sends it, for the tests of both sides.
#[cfg(test)]
pub(crate) const ONE_OF_EACH: &[&str] = &[
    r#"{"cmd":"submit","argv":["job.sh"],"cwd":"/tmp","env":[],"script":"IyEvYmluL3NoCg==","max_retries":null,"restartable":false,"request_id":"r1"}"#,
    r#"{"cmd":"adopt","job_ids":["12"]}"#,
    r#"{"cmd":"plain_opt","opted_in":true}"#,
    r#"{"cmd":"status","id":null}"#,
    r#"{"cmd":"status","id":"c1"}"#,
    r#"{"cmd":"history","id":"c1"}"#,
    r#"{"cmd":"pending"}"#,
    r#"{"cmd":"classify","id":"c1","action":"retry","mem":null,"time":null,"partition":null,"exclude":[],"reason":"r","confidence":null,"dry_run":false}"#,
    r#"{"cmd":"recover","id":"c1","mem":null,"time":null,"reason":null,"dry_run":false}"#,
    r#"{"cmd":"cancel","id":"c1"}"#,
    r#"{"cmd":"stats","id":null}"#,
    r#"{"cmd":"cluster"}"#,
    r#"{"cmd":"ping"}"#,
    r#"{"cmd":"rules"}"#,
    r#"{"cmd":"rules_accept","id":"0123456789ab","despite_conflicts":false,"despite_rejection":false,"mine":false,"reason":null}"#,
    r#"{"cmd":"rules_reject","id":"0123456789ab","reason":"r","mine":false}"#,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Which kind of request `r` is. Exhaustive, so a new kind must be numbered here, and
    /// then `ONE_OF_EACH` must hold one of it (the test below).
    fn kind(r: &Request) -> usize {
        match r {
            Request::Submit(_) => 0,
            Request::Adopt { .. } => 1,
            Request::PlainOpt { .. } => 2,
            Request::Status { .. } => 3,
            Request::History { .. } => 4,
            Request::Pending => 5,
            Request::Classify(_) => 6,
            Request::Recover(_) => 7,
            Request::Cancel { .. } => 8,
            Request::Stats { .. } => 9,
            Request::Cluster => 10,
            Request::Ping => 11,
            Request::Rules => 12,
            Request::RulesAccept { .. } => 13,
            Request::RulesReject { .. } => 14,
        }
    }
    const KINDS: usize = 15;

    #[test]
    fn one_of_each_holds_every_kind_of_request() {
        let mut seen = [false; KINDS];
        for line in ONE_OF_EACH {
            let k = kind(&serde_json::from_str(line).unwrap());
            assert!(k < KINDS, "raise KINDS for kind {k}");
            seen[k] = true;
        }
        let missing: Vec<usize> = (0..KINDS).filter(|k| !seen[*k]).collect();
        assert!(
            missing.is_empty(),
            "ONE_OF_EACH lacks the kinds {missing:?}"
        );
    }

    #[test]
    fn each_request_reads_back_as_it_was_sent_and_its_head_names_its_cmd() {
        for line in ONE_OF_EACH {
            let sent: serde_json::Value = serde_json::from_str(line).unwrap();
            let request: Request = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_value(&request).unwrap(), sent, "{line}");
            assert_eq!(sent["cmd"], request.head().cmd, "{line}");
        }
    }
}
