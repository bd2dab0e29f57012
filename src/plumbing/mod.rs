//! Leaves that every layer may use and that know none of them: the wall clock, logging,
//! raw bytes in strings, MUNGE, TLS keys, a database's connection settings, systemd's
//! notify socket, fault injection for tests. None imports another part of the crate
//! (`tests/architecture.rs`).

pub mod clock;
pub mod dbconfig;
pub mod failpoint;
pub mod logging;
pub mod munge;
pub mod osbytes;
pub mod sd_notify;
pub mod tls;
