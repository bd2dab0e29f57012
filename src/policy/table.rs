//! The disposition table: what each classification of an ending gets by default, one row
//! per classification, as docs/design.md's table reads ("Classification").

use crate::model::{Action, ChainState, Classification};

/// The default answer to an ending of one classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// The work is done: no record, the chain completes.
    Done,
    /// Never retried (R3): the chain ends in `state` with `action`, for `why`.
    Stop {
        action: Action,
        state: ChainState,
        why: Never,
    },
    /// An agent decides (R2, `pending_failed`).
    AskAgent,
    /// Resubmitted automatically (R1), after the guards, with `resources` changed.
    Retry { resources: Resources },
}

/// Why an ending is never retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Never {
    /// Someone cancelled it.
    Cancelled,
    /// Its deadline passed.
    Deadline,
    /// A rule says the error is permanent.
    Permanent,
}

/// Which resources a retry of a classification changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resources {
    /// The same resources (preemption, a transient failure a rule recognised).
    Unchanged,
    /// More memory (OOM).
    MoreMemory,
    /// A longer time limit, never above the partition's MaxTime (TIMEOUT).
    MoreTime,
    /// The failed node(s) excluded (NODE_FAIL, BOOT_FAIL).
    ExcludeNode,
}

/// The table. A new classification is a new row here; the compiler finds every other
/// place that must know about it.
pub fn disposition(c: Classification) -> Disposition {
    use Classification as C;
    use Disposition::*;
    match c {
        C::Completed => Done,
        C::Preempted => Retry {
            resources: Resources::Unchanged,
        },
        C::NodeFail | C::BootFail => Retry {
            resources: Resources::ExcludeNode,
        },
        C::Oom => Retry {
            resources: Resources::MoreMemory,
        },
        C::Timeout => Retry {
            resources: Resources::MoreTime,
        },
        C::Cancelled => Stop {
            action: Action::Cancel,
            state: ChainState::Cancelled,
            why: Never::Cancelled,
        },
        C::Deadline => Stop {
            action: Action::Fail,
            state: ChainState::Failed,
            why: Never::Deadline,
        },
        C::Permanent => Stop {
            action: Action::Fail,
            state: ChainState::Failed,
            why: Never::Permanent,
        },
        C::Transient => Retry {
            resources: Resources::Unchanged,
        },
        C::Ambiguous => AskAgent,
    }
}

/// Classifications that point at the cluster rather than the job; a burst of them across
/// chains opens the breaker.
pub fn is_infrastructure(c: Classification) -> bool {
    use Classification as C;
    match c {
        C::NodeFail | C::BootFail | C::Transient => true,
        C::Completed
        | C::Preempted
        | C::Oom
        | C::Timeout
        | C::Cancelled
        | C::Deadline
        | C::Permanent
        | C::Ambiguous => false,
    }
}
