//! What the agent reads: the server's instructions and the tools' descriptions.

pub const INSTRUCTIONS: &str = "\
slurm-supervisor keeps Slurm batch jobs alive. Failures it understands (preemption, node \
failure, out-of-memory, time limit, failures a configured rule recognises) are handled \
automatically. A failure it cannot classify waits in the state `pending_failed` for you to \
decide: retry it (transient) or fail it (permanent).

Work like this: 1. `list_pending_failed` and read each chain's evidence (stderr tail, sacct \
rows, the script, earlier attempts and decisions). 2. Decide per chain; do not repeat a fix \
an earlier attempt already tried. 3. `classify_and_resolve` with dry_run=true, check the \
answer, then the same call with dry_run=false. 4. `get_chain` to confirm the decision is \
recorded. If you cannot tell from the evidence, leave the chain alone: it keeps waiting for \
a person. Every resolution needs a reason, which is recorded with your user name for good.";

pub const LIST_PENDING_FAILED: &str = "\
List the chains waiting in `pending_failed` for a decision, each with its evidence: \
`stderr_tail` (last lines of the job's stderr), `sacct_rows` (state, exit code, MaxRSS vs \
ReqMem, Elapsed vs Timelimit), `nodes`, `attempts` and `decisions` so far (what was already \
tried and why), and the `submission` (sbatch argv, cwd, script text). Read-only. \
Returns {\"chains\": [...], \"count\": n}; each chain has `id`, `state`, `slurm_job_id`, \
`attempts`, `last_classification` and `evidence`.";

pub const LIST_RULE_PROPOSALS: &str = "\
The site's failure rules in force (`rules`: name, kind, exit codes, stderr regex) and the \
rules the supervisor proposes (`proposals`) because people or agents resolved the same \
failure signature the same way several times and the retries worked. Each proposal has its \
`id` (the failure signature, also in each attempt's `signature` in get_chain and \
list_pending_failed), `signature_text` (stderr's last lines, masked), the `rule` it would \
add, its `evidence` (the resolutions: chain, actor, action, outcome), `conflicts` \
(resolutions that decided otherwise) and its `state`: `waiting` for a person's decision, \
`rejected` (by the admin for everyone, or by the user for their own chains) or `accepted` \
(for the user's own chains), with `decided` saying who decided, when and why; \
`decisions` lists every acceptance and rejection you may see. A rule in force that came \
from a proposal names it (`proposal`), as does every decision it makes. Read-only: \
proposals are for the site's admin (or a user, for their own chains) to accept or reject, \
never for an agent, and no tool does either; a pending chain whose signature has a \
proposal was usually resolved as the proposal says, unless it was rejected.";

pub const GET_CHAIN: &str = "\
The full history of one chain: every attempt (job id, Slurm state, exit code, nodes, memory \
and time asked) and every decision record (class R1 automatic / R2 escalated / R3 never \
retried, classification, action, reason, actor, `resolves`: the decision it answers, and \
`proposal`: the rule proposal of the rule that decided it, if any). \
Accepts a chain id or any Slurm job id of its attempts. Read-only. Returns the chain's \
history object; for an array's base job id, {\"chains\": [one history per task]}.";

pub const STATUS: &str = "\
One row per supervised chain: `id`, `state` (active, ready, pending_failed, completed, \
failed, cancelled), `slurm_job_id`, `attempts`, `last_classification`, `next_retry_at`. \
active, ready and pending_failed chains are not finished. Read-only. Returns \
{\"chains\": [...], \"count\": n}.";

pub const CLASSIFY_AND_RESOLVE: &str = "\
Decide one or more `pending_failed` chains: `retry` (transient: resubmit, optionally with \
more `mem` or `time`) or `fail` (permanent: the chain ends, never retried).

Transient, retry: the environment failed, not the work. E.g. `Connection refused` / \
`Connection reset` / `Name or service not known` to a server, NCCL timeouts or `NCCL WARN` \
communicator errors, `Input/output error`, `Stale file handle`, a lost or failing node \
(`NODE FAILURE`, `Bus error` or ECC/GPU `Xid` errors on one node), a license or quota server \
that did not answer. Memory exhausted (MaxRSS near ReqMem, `Killed`, `MemoryError`): retry \
with more `mem`. Ran out of time: retry with more `time`.
Permanent, fail (or leave it for a person to fix first): the work itself is wrong. E.g. \
`SyntaxError`, `ModuleNotFoundError` / `ImportError`, `FileNotFoundError` or `No such file` \
for an input, `command not found`, `Permission denied` on the user's own files, an invalid \
argument, a traceback from a bug in the script (`KeyError`, `TypeError`, `AssertionError`). \
Retrying these fails the same way. If the evidence does not tell, do not resolve: the chain \
keeps waiting for a person.

Rules: `reason` is mandatory and is stored in the decision record with your user name, so \
cite the evidence. Only a chain in `pending_failed` can be resolved; if someone else \
resolved it first, that item comes back with an error of kind `conflict` and nothing is \
changed. ALWAYS call with dry_run=true first, check every item, then repeat with \
dry_run=false. Items are applied in order; one item's error does not stop the others. \
Returns {\"dry_run\", \"results\": [{\"id\", \"ok\": true, \"result\": {...}} or \
{\"id\", \"ok\": false, \"error\": {\"kind\", \"message\"}}], \"succeeded\", \"failed\"}. A \
dry-run retry also shows `would_run`: the exact sbatch command of the new attempt.";

pub const RECOVER: &str = "\
Resubmit a chain by hand: one in `failed` (also after a permanent failure or a spent retry \
budget) or in `pending_failed`, optionally with more `mem` or `time`. Use it when the cause \
has been fixed (e.g. the missing input file now exists) or the failure was transient after \
all. For a `pending_failed` chain prefer classify_and_resolve, which records your reason; \
recover records the reason \"manual recover\". ALWAYS call with dry_run=true first: it \
returns {\"dry_run\": true, \"would_run\": [{\"chain\", \"cwd\", \"command\": [\"sbatch\", ...]}]}; \
then dry_run=false returns {\"recovering\": [chain ids]} and the daemon submits it on its next cycle. \
A chain in any other state comes back as an error of kind `conflict`.";
