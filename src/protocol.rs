//! The control protocol between `supervisorctl` and the daemon: one JSON request per
//! connection, one JSON line back. The answers' types are in [`views`]; they are also
//! what `--json` prints, so their field names are a stable contract
//! (docs/json-schemas.md).

pub mod net;
pub mod views;

// A resolution, a recover and the resolve action are the product's vocabulary (policy
// decides on them): they live in `crate::model` and travel here as they are.
pub use crate::model::{RecoverRequest, Resolution, ResolveAction};

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
}

impl Request {
    /// The request's `cmd`, as it is sent.
    pub fn cmd(&self) -> &'static str {
        match self {
            Request::Submit(_) => "submit",
            Request::Adopt { .. } => "adopt",
            Request::PlainOpt { .. } => "plain_opt",
            Request::Status { .. } => "status",
            Request::History { .. } => "history",
            Request::Pending => "pending",
            Request::Classify(_) => "classify",
            Request::Recover(_) => "recover",
            Request::Cancel { .. } => "cancel",
            Request::Stats { .. } => "stats",
            Request::Cluster => "cluster",
            Request::Ping => "ping",
        }
    }

    /// True for the requests that only read: answered from the store by any daemon,
    /// a standby of cluster mode too (its replica), off the daemon's loop.
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Request::Ping
                | Request::Status { .. }
                | Request::History { .. }
                | Request::Pending
                | Request::Stats { .. }
                | Request::Cluster
        )
    }

    /// The chain or job a request names, as the client gave it.
    pub fn subject(&self) -> Option<&str> {
        match self {
            Request::Classify(r) => Some(&r.id),
            Request::Recover(r) => Some(&r.id),
            Request::Cancel { id } | Request::History { id } => Some(id),
            Request::Status { id } | Request::Stats { id } => id.as_deref(),
            _ => None,
        }
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
