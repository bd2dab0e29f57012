//! Cluster mode's shared database (MariaDB or MySQL; docs/cluster.md): the connection,
//! and everything the daemons share there. `lease.rs`: the lease row that elects the one
//! daemon that acts, and [`fence`], which every write transaction of the active daemon
//! calls; `journal.rs`: the store's journal (every write transaction of the store, which
//! each daemon applies to its own SQLite replica) and the `cluster` row; `snapshot.rs`:
//! the replicas' snapshots and the journal's pruning; `nodes.rs`: each daemon's own row.
//! The chains' tables themselves are each daemon's SQLite replica, never queried here.
//! The address and password file are `crate::plumbing::dbconfig`'s (the config loader reads them
//! too).
//!
//! The `mysql` crate is synchronous, as the SQLite store is: the daemon's loop calls the
//! store in place, and a shared database is one more blocking call with a timeout, not a
//! second runtime (docs/cluster.md, "Store backend").
//!
//! Every transaction here runs at READ COMMITTED. The lease's decisions are all taken on
//! a locking read of its one row, which reads the newest committed version and locks it
//! at any isolation level, so REPEATABLE READ would buy nothing; READ COMMITTED takes no
//! gap locks (no deadlock between daemons that only read the lease and the one that
//! writes it), and a plain read sees what was committed before it, never a snapshot kept
//! from an earlier statement.

pub mod journal;
pub mod lease;
pub mod nodes;
pub mod snapshot;

use crate::domain::election::Epoch;
use crate::store::StoreError;
use mysql::prelude::Queryable;
use mysql::{IsolationLevel, OptsBuilder, TxOpts};
use std::fmt;
use std::time::Duration;

pub use crate::plumbing::dbconfig::{
    read_password_file, Password, PasswordFileError, StoreConfig, StoreUrl, UrlError,
    DEFAULT_PASSWORD_FILE, DEFAULT_PORT,
};
pub use journal::{EpochCell, Identity, Refusal, SharedJournal};
pub use lease::{fence, Acquisition, Grant, LeaseView};
pub use nodes::{Beat, NodeRole, NodeRow};
pub use snapshot::{EntrySizes, Pruned, SnapshotStatus};

/// Why a lease is not the caller's any more (in [`StoreError::Fenced`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// Another acquisition happened since: the lease now has this epoch (and this
    /// holder, unless it was released since).
    Moved {
        epoch: Epoch,
        holder: Option<String>,
    },
    /// Its holder gave it up.
    Released,
    /// Its time ran out by the database server's clock, and nobody has taken it yet.
    Expired,
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fence::Moved {
                epoch,
                holder: Some(h),
            } => write!(f, "was taken over (epoch {epoch}, held by {h})"),
            Fence::Moved {
                epoch,
                holder: None,
            } => write!(f, "was taken over (epoch {epoch}, since released)"),
            Fence::Released => f.write_str("was released"),
            Fence::Expired => f.write_str("expired by the database server's clock"),
        }
    }
}

/// One connection to the shared database.
pub struct ClusterDb {
    pub(super) conn: mysql::Conn,
}

impl fmt::Debug for ClusterDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterDb")
            .field("connection", &self.conn.connection_id())
            .finish()
    }
}

fn tx_options() -> TxOpts {
    TxOpts::default().set_isolation_level(Some(IsolationLevel::ReadCommitted))
}

impl ClusterDb {
    /// Connects over TCP to the server `url` names (never to a local socket instead, even
    /// on the server's own host: the URL is what the admin granted). `timeout` bounds the
    /// connect, every read and write on the connection, and a wait for the lease row's
    /// lock, so a cut network or a stuck server makes a call fail, not hang: the caller's
    /// lease deadline keeps counting meanwhile (`election`).
    pub fn connect(
        url: &StoreUrl,
        password: &Password,
        timeout: Duration,
    ) -> Result<ClusterDb, StoreError> {
        let lock_wait = timeout.as_secs().max(1);
        let opts = OptsBuilder::new()
            .ip_or_hostname(Some(url.host.as_str()))
            .tcp_port(url.port)
            .user(Some(url.user.as_str()))
            .pass(Some(password.expose()))
            .db_name(Some(url.database.as_str()))
            .prefer_socket(false)
            .tcp_connect_timeout(Some(timeout))
            .read_timeout(Some(timeout))
            .write_timeout(Some(timeout))
            .init(vec![
                "SET SESSION sql_mode = 'TRADITIONAL'".to_string(),
                format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}"),
                // A transaction left open by a daemon that stopped (SIGSTOP, a cut
                // network) is rolled back by the server, so it holds the lease row's
                // lock no longer than this, and a standby can take over.
                format!("SET SESSION idle_transaction_timeout = {lock_wait}"),
            ]);
        Ok(ClusterDb {
            conn: mysql::Conn::new(opts)?,
        })
    }

    /// Creates what is missing of the lease's table and row, and of the daemons' own rows
    /// (`nodes`).
    pub fn prepare_lease(&mut self) -> Result<(), StoreError> {
        for sql in lease::CREATE.iter().chain(nodes::CREATE) {
            self.conn.query_drop(sql)?;
        }
        Ok(())
    }
}
