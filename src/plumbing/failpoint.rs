//! Named points where tests can make the daemon die, to prove crash safety.
//!
//! `SLURM_SUPERVISOR_FAILPOINT=<name>` makes the process kill itself with SIGKILL the
//! first time it reaches that point: no destructor, no flush, as a power cut would.
//! Unset (always, outside tests), a failpoint costs one environment lookup.
//! Points: `after-intent`, `before-sbatch`, `after-sbatch`, `after-requeuehold`, and cluster
//! mode's `snapshot-mid-parts`, `snapshot-before-prune` (`store::cluster::snapshot`).

/// Dies here if the environment names this failpoint.
pub fn hit(name: &str) {
    if std::env::var_os("SLURM_SUPERVISOR_FAILPOINT").is_some_and(|v| v == name) {
        tracing::error!("failpoint {name} reached: killing the daemon");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}
