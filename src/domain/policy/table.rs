//! The disposition table's readings for policy. The table itself is the model's
//! (`Classification::row`): the config reads it too (default budgets, what a rule may give).

use crate::config::Config;
use crate::domain::model::Classification;
pub use crate::domain::model::{Disposition, Never, Resources};

/// What an ending of classification `c` gets by default.
pub fn disposition(c: Classification) -> Disposition {
    c.row().disposition
}

/// Classifications that point at the cluster rather than the job; a burst of them across
/// chains opens the breaker.
pub fn is_infrastructure(c: Classification) -> bool {
    c.row().infrastructure
}

/// The automatic resubmissions one chain gets for classification `c`: the admin's
/// `[retry.budgets]`, else the table's default.
pub fn budget(config: &Config, c: Classification) -> u32 {
    config.retry.budgets.get(c).unwrap_or(c.row().budget)
}
