//! slurm-supervisor keeps users' Slurm batch jobs alive through failures that are not
//! their fault, and is honest about the ones that are.
//!
//! The words used throughout:
//! - a **chain** is one supervised piece of work, from its first submission to its end,
//!   with a stable id of the supervisor's own (`c17`);
//! - an **attempt** is one Slurm job (or one array task) run for a chain;
//! - an **observation** is what Slurm said about an attempt when it ended;
//! - a **classification** is the verdict on that ending ([`domain::model::Classification`]);
//! - a **decision** is what the supervisor does about it, with its recovery class
//!   (R1 applied automatically, R2 escalated to an agent, R3 forbidden).
//!
//! The folders are the layers:
//! - [`domain`], the pure core: the vocabulary ([`domain::model`]), the classifier of an
//!   ending, the policy that decides, and the other values and decisions (a continuing
//!   job's progress, pipelines, learned rules, the election, sbatch's command line). No
//!   I/O, no clock, no Slurm command, no SQL;
//! - the edges: [`slurm`], the only code that runs Slurm commands; [`store`], the only
//!   SQL; [`protocol`], what the control socket and the network carry; [`client`], how a
//!   program reaches a daemon; [`metrics`], the Prometheus exposition; [`config`], the
//!   settings as read from their files;
//! - the programs: [`daemon`] (the loop that carries out what the decisions say, its
//!   requests, cluster mode), [`ctl`] (`supervisorctl`), [`mcp`] (its MCP server);
//! - [`plumbing`]: leaves every layer may use and that know none of them (the clock,
//!   logging, MUNGE, TLS, a database's connection settings, systemd's notify, fault
//!   injection).
//!
//! In cluster mode, [`domain::election`] says whether this daemon may act, from what the
//! lease in the shared database (`store::cluster`) answered.

pub mod client;
pub mod config;
pub mod ctl;
pub mod daemon;
pub mod domain;
pub mod mcp;
pub mod metrics;
pub mod plumbing;
pub mod protocol;
pub mod slurm;
pub mod store;
