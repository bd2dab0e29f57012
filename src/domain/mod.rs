//! The pure core: the product's values and its decisions. Nothing here does I/O, reads a
//! clock, runs a Slurm command or touches the store; each takes what the edges read as
//! values and returns what to do (docs/ARCHITECTURE.md, "Architecture invariants";
//! `tests/architecture.rs` holds the folder to it).

pub mod classify;
pub mod continuation;
pub mod dependency;
pub mod election;
pub mod ids;
pub mod learn;
pub mod model;
pub mod notification;
pub mod policy;
pub mod request_binding;
pub mod sbatch_args;
pub mod signature;
pub mod syntax;
