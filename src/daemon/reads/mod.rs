//! Read requests (status, history, pending, stats, rules, cluster, ping), one file each. They
//! change nothing, so the control socket answers them itself from a read-only store
//! connection, off the daemon's loop: no poll cycle, sbatch or other user's request can
//! hold them up. Each file says how it is answered as a [`Read`]; the daemon's one
//! dispatch (`requests::dispatch`) names it for its request.

pub mod cluster;
pub mod fill;
pub mod history;
pub mod pending;
pub mod ping;
pub mod rules;
pub mod stats;
pub mod status;

use crate::protocol::Response;
use crate::store::Store;
use serde::Serialize;

/// How a read is answered, never by the engine: by any daemon (a standby of cluster mode
/// too), off its loop.
pub enum Read {
    /// Made whole from a read-only store connection (the replica, on a standby).
    Store(Whole),
    /// A list that can be long: written to the client as it is read from the store
    /// (`server::stream_list`), or made whole where no client's socket waits for it (the
    /// in-process tests' `requests::handle`).
    List {
        stream: ListWriter,
        whole: fn(&Store, u32) -> Response,
    },
    /// Made whole from a read-only store connection and the config in force (the rules).
    WithConfig(WithConfig),
    /// From what this node knows of the cluster (the lease thread's view; `None` on a
    /// single node), not from the store.
    Node(fn(Option<&super::cluster::Activity>, u32) -> Response),
}

/// A read's answer for a caller, made whole from the store (on a blocking thread).
pub type Whole = Box<dyn FnOnce(&Store, u32) -> Response + Send>;

/// A read's answer made from the store and the config in force.
pub type WithConfig = Box<
    dyn FnOnce(&Store, &crate::config::Config, &crate::daemon::access::Caller) -> Response + Send,
>;

/// Writes one list answer to a client as it is made.
pub type ListWriter = fn(&Store, u32, &mut dyn std::io::Write) -> Result<(), status::StreamError>;

/// A typed answer, or the refusal, as the wire's JSON.
fn answer<T: Serialize>(result: Result<T, Response>) -> Response {
    match result {
        Ok(v) => Response::answer(&v),
        Err(r) => r,
    }
}
