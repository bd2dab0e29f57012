//! Each daemon's row of its own in the shared database (the table `node`): its role, the
//! epoch it acts under, when it started and when its loop last turned, written by its
//! lease thread after each call to the lease, and timed by the database server's clock
//! alone (the daemon sends how long ago, never a time of its own). Any daemon reads every
//! row, so each one, the standbys too, can say what every daemon of the cluster does
//! (`supervisorctl cluster`, docs/cluster.md "What admins see").
//!
//! One row per `[store] node`: a node's daemon started again takes its row over. A row
//! whose daemon stopped cleanly says `stopped`; one whose daemon died stops being
//! updated, which its age shows.

use super::ClusterDb;
use crate::domain::election::Epoch;
use crate::store::StoreError;
use mysql::prelude::Queryable;
use serde::{Deserialize, Serialize};
use std::time::Duration;

type Result<T> = std::result::Result<T, StoreError>;

/// The table, created if missing (harmless twice, or from two daemons).
pub(super) const CREATE: &[&str] = &["CREATE TABLE IF NOT EXISTS node (
        node VARCHAR(255) NOT NULL PRIMARY KEY,
        holder VARCHAR(255) NOT NULL,
        role VARCHAR(16) NOT NULL,
        epoch BIGINT UNSIGNED NOT NULL,
        started_at DATETIME(6) NOT NULL,
        last_cycle DATETIME(6) NULL,
        updated_at DATETIME(6) NOT NULL
    ) ENGINE=InnoDB"];

/// What a daemon is, as its own row says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeRole {
    /// It holds the lease and acts.
    Active,
    /// Another daemon holds the lease (or nobody does yet): it answers reads only.
    Standby,
    /// Its lease's local deadline passed without a renewal (the database did not answer
    /// in time): it does not act until it hears again.
    Unknown,
    /// It stopped cleanly (and gave the lease up if it held it).
    Stopped,
}

impl NodeRole {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeRole::Active => "active",
            NodeRole::Standby => "standby",
            NodeRole::Unknown => "unknown",
            NodeRole::Stopped => "stopped",
        }
    }

    fn parse(s: &str) -> Result<NodeRole> {
        Ok(match s {
            "active" => NodeRole::Active,
            "standby" => NodeRole::Standby,
            "unknown" => NodeRole::Unknown,
            "stopped" => NodeRole::Stopped,
            other => {
                return Err(StoreError::Corrupt(format!(
                    "the shared database's node table has a role {other:?} this program does not know; upgrade slurm-supervisor on this node"
                )))
            }
        })
    }
}

/// One daemon's heartbeat, as it writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beat<'a> {
    /// `[store] node`.
    pub node: &'a str,
    /// Its name on the lease (`NODE:PID:RANDOM`).
    pub holder: &'a str,
    pub role: NodeRole,
    /// The epoch it acts under (`None` unless active).
    pub epoch: Option<Epoch>,
    /// How long ago it started (its monotonic clock).
    pub started_ago: Duration,
    /// How long ago its loop last turned (a poll cycle when active, a catch-up of its
    /// replica when standing by); `None` before the first.
    pub last_cycle_ago: Option<Duration>,
}

/// One daemon's row, read by the server's clock: every age is as of the read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    pub node: String,
    pub holder: String,
    pub role: NodeRole,
    /// 0 when it does not act.
    pub epoch: u64,
    /// How long ago it started.
    pub started_ago: Duration,
    /// How long ago its loop last turned.
    pub last_cycle_ago: Option<Duration>,
    /// How long ago it last wrote its row.
    pub updated_ago: Duration,
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn ago(us: Option<i64>) -> Option<Duration> {
    us.map(|us| Duration::from_micros(us.max(0).unsigned_abs()))
}

impl ClusterDb {
    /// Writes (or takes over) `beat.node`'s row, its times counted back from the server's
    /// clock now.
    pub fn heartbeat(&mut self, beat: &Beat<'_>) -> Result<()> {
        self.conn.exec_drop(
            "INSERT INTO node (node, holder, role, epoch, started_at, last_cycle, updated_at)
             VALUES (?, ?, ?, ?,
                 TIMESTAMPADD(MICROSECOND, -?, UTC_TIMESTAMP(6)),
                 IF(? IS NULL, NULL, TIMESTAMPADD(MICROSECOND, -?, UTC_TIMESTAMP(6))),
                 UTC_TIMESTAMP(6))
             ON DUPLICATE KEY UPDATE holder = VALUES(holder), role = VALUES(role),
                 epoch = VALUES(epoch), started_at = VALUES(started_at),
                 last_cycle = VALUES(last_cycle), updated_at = VALUES(updated_at)",
            (
                beat.node,
                beat.holder,
                beat.role.as_str(),
                beat.epoch.map_or(0, |e| e.0),
                micros(beat.started_ago),
                beat.last_cycle_ago.map(micros),
                beat.last_cycle_ago.map(micros).unwrap_or(0),
            ),
        )?;
        Ok(())
    }

    /// Every daemon's row, by node name.
    pub fn nodes(&mut self) -> Result<Vec<NodeRow>> {
        type Row = (
            String,
            String,
            String,
            u64,
            Option<i64>,
            Option<i64>,
            Option<i64>,
        );
        let rows: Vec<Row> = self.conn.exec(
            "SELECT node, holder, role, epoch,
                 TIMESTAMPDIFF(MICROSECOND, started_at, UTC_TIMESTAMP(6)),
                 TIMESTAMPDIFF(MICROSECOND, last_cycle, UTC_TIMESTAMP(6)),
                 TIMESTAMPDIFF(MICROSECOND, updated_at, UTC_TIMESTAMP(6))
             FROM node ORDER BY node",
            (),
        )?;
        rows.into_iter()
            .map(|(node, holder, role, epoch, started, last, updated)| {
                Ok(NodeRow {
                    node,
                    holder,
                    role: NodeRole::parse(&role)?,
                    epoch,
                    started_ago: ago(started).unwrap_or_default(),
                    last_cycle_ago: ago(last),
                    updated_ago: ago(updated).unwrap_or_default(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_reads_back_as_written_and_an_unknown_one_is_refused() {
        for r in [
            NodeRole::Active,
            NodeRole::Standby,
            NodeRole::Unknown,
            NodeRole::Stopped,
        ] {
            assert_eq!(NodeRole::parse(r.as_str()).unwrap(), r);
        }
        let e = NodeRole::parse("leader").unwrap_err().to_string();
        assert!(e.contains("\"leader\""), "{e}");
    }
}
