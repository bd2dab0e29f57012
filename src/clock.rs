//! The wall clock, in unix seconds: the one reading of the time the daemon takes for what
//! it records and decides (`now`, passed on as a value). classify and policy never call
//! it; the time is one of their inputs.
//!
//! A leaf: it imports nothing of the crate, so the engine, the requests, the sbatch
//! mechanics, the notifications and the metrics all read the same clock without
//! importing one another.

/// Unix time in seconds.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
