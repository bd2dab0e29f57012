//! `cluster`: which daemon acts and what each daemon of the cluster does, from the lease
//! thread's view (`cluster::Activity`), not the store: nodes and times only, so anyone may
//! read it and a standby answers it too. On a single node, that this one always acts.

use super::Read;
use crate::daemon::cluster::Activity;
use crate::protocol::views::ClusterAnswer;
use crate::protocol::Response;

pub fn read() -> Read {
    Read::Node(|cluster, uid| Response::answer(&answer(cluster, uid)))
}

/// `cluster`'s answer for `uid`: every daemon's role in cluster mode; on a single node,
/// that this one always acts. The shared database's last error is root's to read: its
/// text may name the server, the account and what the server said of them; anyone else
/// is told only that there is one.
fn answer(cluster: Option<&Activity>, uid: u32) -> ClusterAnswer {
    let whole = match cluster {
        Some(c) => c.answer(),
        None => ClusterAnswer {
            mode: "single".into(),
            answered_by: nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            lease: None,
            nodes: Vec::new(),
            error: None,
        },
    };
    as_read_by(whole, uid)
}

/// `cluster`'s answer as `uid` may read it: the database's error text is root's.
fn as_read_by(mut a: ClusterAnswer, uid: u32) -> ClusterAnswer {
    if uid != 0 && a.error.is_some() {
        a.error = Some(CLUSTER_ERROR_HIDDEN.to_string());
    }
    a
}

/// What `cluster` says of the shared database's last error to anyone but root.
pub const CLUSTER_ERROR_HIDDEN: &str =
    "the shared database could not be read (its error is shown to root only: see the daemon's log)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_databases_error_text_is_roots_to_read() {
        let answer = ClusterAnswer {
            mode: "cluster".into(),
            answered_by: "login1".into(),
            lease: None,
            nodes: Vec::new(),
            error: Some("Access denied for user 'ssv'@'login1' (using password: YES)".into()),
        };
        let root = as_read_by(answer.clone(), 0);
        assert_eq!(root.error, answer.error);
        let alice = as_read_by(answer.clone(), 1000);
        assert_eq!(alice.error.as_deref(), Some(CLUSTER_ERROR_HIDDEN));
        let fine = ClusterAnswer {
            error: None,
            ..answer
        };
        assert_eq!(as_read_by(fine, 1000).error, None);
    }
}
