//! slurm-supervisor keeps users' Slurm batch jobs alive through failures that are not
//! their fault, and is honest about the ones that are.
//!
//! The words used throughout:
//! - a **chain** is one supervised piece of work, from its first submission to its end,
//!   with a stable id of the supervisor's own (`c17`);
//! - an **attempt** is one Slurm job (or one array task) run for a chain;
//! - an **observation** is what Slurm said about an attempt when it ended;
//! - a **classification** is the verdict on that ending ([`model::Classification`]);
//! - a **decision** is what the supervisor does about it, with its recovery class
//!   (R1 applied automatically, R2 escalated to an agent, R3 forbidden).
//!
//! `classify` and `policy` are pure; `slurm` is the only code that runs Slurm commands;
//! `store` holds the only SQL; `daemon` carries out what the decisions say. In cluster
//! mode, `election` (pure) says whether this daemon may act, from what the lease in the
//! shared database (`store::cluster`) answered.

pub mod classify;
pub mod client;
pub mod clock;
pub mod config;
pub mod continuation;
pub mod ctl;
pub mod daemon;
pub mod daemon_main;
pub mod dbconfig;
pub mod dependency;
pub mod election;
pub mod failpoint;
pub mod ids;
pub mod learn;
pub mod logging;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod munge;
pub mod notification;
pub mod osbytes;
pub mod policy;
pub mod protocol;
pub mod request_binding;
pub mod sbatch_args;
pub mod sd_notify;
pub mod signature;
pub mod slurm;
pub mod store;
pub mod syntax;
pub mod tls;
