//! Versioned migrations. `PRAGMA user_version` holds how many have been applied; each
//! runs once, in order, in its own transaction. Never edit a migration that has shipped:
//! add a new one.

pub const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    r#"
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- What the user asked for, kept so that every retry can be rebuilt from it even if the
-- script is edited or deleted afterwards.
CREATE TABLE submissions (
    id          INTEGER PRIMARY KEY,
    owner_uid   INTEGER NOT NULL,
    user        TEXT NOT NULL,
    argv        TEXT NOT NULL,    -- JSON array: the user's sbatch options, script and its args
    cwd         TEXT NOT NULL,
    env         TEXT NOT NULL,    -- JSON array of [name, value]: sbatch exports it to the job
    script_name TEXT,             -- the script's file name; NULL for --wrap
    script      BLOB,             -- the script's content at submission
    max_retries INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);

-- One supervised piece of work; an array submission has one chain per task.
CREATE TABLE chains (
    id                  INTEGER PRIMARY KEY,
    submission_id       INTEGER NOT NULL REFERENCES submissions(id),
    array_task          INTEGER,
    state               TEXT NOT NULL,
    last_classification TEXT,
    plan                TEXT NOT NULL DEFAULT '{}',  -- JSON RetryPlan for the next attempt
    not_before          INTEGER,                     -- state 'ready': resubmit from then on
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
);
CREATE INDEX chains_by_state ON chains(state);
CREATE INDEX chains_by_submission ON chains(submission_id);

-- One sbatch call (one job, or one array covering several chains). The row is written
-- with state 'intent' BEFORE sbatch runs; the tag goes into the job's --comment so a job
-- whose reply was lost can be found again instead of submitted twice.
CREATE TABLE launches (
    id            INTEGER PRIMARY KEY,
    submission_id INTEGER NOT NULL REFERENCES submissions(id),
    tag           TEXT NOT NULL UNIQUE,
    argv          TEXT NOT NULL,   -- JSON: the exact sbatch argv
    state         TEXT NOT NULL,   -- intent | submitted | failed
    job_id        TEXT,
    error         TEXT,
    created_at    INTEGER NOT NULL,
    finished_at   INTEGER
);
CREATE INDEX launches_by_state ON launches(state);

CREATE TABLE attempts (
    chain_id     INTEGER NOT NULL REFERENCES chains(id),
    n            INTEGER NOT NULL,
    launch_id    INTEGER NOT NULL REFERENCES launches(id),
    slurm_job_id TEXT,
    state        TEXT NOT NULL,    -- launching | live | ended | not_submitted
    slurm_state  TEXT,
    exit_code    TEXT,
    nodes        TEXT,
    mem          TEXT,
    time_limit   TEXT,
    plan         TEXT NOT NULL,    -- JSON RetryPlan it was launched with
    restarts     INTEGER NOT NULL DEFAULT 0,
    last_seen    TEXT,             -- the last squeue state seen
    submitted_at INTEGER,
    ended_at     INTEGER,
    PRIMARY KEY (chain_id, n)
);
CREATE INDEX attempts_by_job ON attempts(slurm_job_id);
CREATE INDEX attempts_by_state ON attempts(state);
CREATE INDEX attempts_by_launch ON attempts(launch_id);

-- What Slurm said, unchanged.
CREATE TABLE observations (
    id          INTEGER PRIMARY KEY,
    chain_id    INTEGER NOT NULL REFERENCES chains(id),
    attempt_n   INTEGER NOT NULL,
    observed_at INTEGER NOT NULL,
    body        TEXT NOT NULL      -- JSON classify::Observation
);
CREATE INDEX observations_by_chain ON observations(chain_id);

-- Append-only: a later fact is a new row, pointing at what it resolves.
CREATE TABLE decisions (
    id             INTEGER PRIMARY KEY,
    chain_id       INTEGER NOT NULL REFERENCES chains(id),
    attempt_n      INTEGER NOT NULL,
    observation_id INTEGER REFERENCES observations(id),
    at             INTEGER NOT NULL,
    classification TEXT NOT NULL,
    class          TEXT NOT NULL,
    action         TEXT NOT NULL,
    reason         TEXT NOT NULL,
    inputs         TEXT NOT NULL,  -- JSON: what the decision was computed from
    resolves       INTEGER REFERENCES decisions(id),
    actor          TEXT NOT NULL
);
CREATE INDEX decisions_by_chain ON decisions(chain_id);
CREATE INDEX decisions_by_time ON decisions(at);
CREATE TRIGGER decisions_no_update BEFORE UPDATE ON decisions
BEGIN SELECT RAISE(ABORT, 'decision records are append-only'); END;
CREATE TRIGGER decisions_no_delete BEFORE DELETE ON decisions
BEGIN SELECT RAISE(ABORT, 'decision records are append-only'); END;
CREATE TRIGGER observations_no_update BEFORE UPDATE ON observations
BEGIN SELECT RAISE(ABORT, 'observations are kept unchanged'); END;
"#,
    // 2: exact lookups by job id, and first submissions whose client is still owed an answer.
    r#"
-- The job id an attempt's id belongs to (`123` for `123_4`), so `status 123` finds every
-- task of array 123 by an exact, indexed match.
ALTER TABLE attempts ADD COLUMN slurm_base_id TEXT;
UPDATE attempts SET slurm_base_id = CASE
    WHEN instr(slurm_job_id, '_') > 0 THEN substr(slurm_job_id, 1, instr(slurm_job_id, '_') - 1)
    ELSE slurm_job_id END
  WHERE slurm_job_id IS NOT NULL;
CREATE INDEX attempts_by_base_job ON attempts(slurm_base_id);

-- 1 while the launch of a first submission has not been promised to its client: such a
-- launch is never submitted later by reconciliation (the client may have been told it
-- failed); a job it did create is found by its tag and adopted.
ALTER TABLE launches ADD COLUMN unpromised INTEGER NOT NULL DEFAULT 0;
"#,
    // 3: the facts queries need from a decision record are columns, written with it.
    r#"
-- The reason's stable name (policy::Reason::code); NULL for records written before.
ALTER TABLE decisions ADD COLUMN reason_code TEXT;
-- 1 for an infrastructure failure (node_fail, boot_fail, transient) the supervisor saw end
-- an attempt: the breaker counts these.
ALTER TABLE decisions ADD COLUMN infra_failure INTEGER NOT NULL DEFAULT 0;
-- The node(s) of a node_fail/boot_fail ending: quarantine counts these.
ALTER TABLE decisions ADD COLUMN failed_nodes TEXT;
-- Records are append-only; the new columns of the old ones are filled once, here.
DROP TRIGGER decisions_no_update;
UPDATE decisions SET infra_failure = 1
  WHERE actor = 'supervisor' AND observation_id IS NOT NULL
    AND classification IN ('node_fail', 'boot_fail', 'transient');
UPDATE decisions SET failed_nodes = json_extract(inputs, '$.verdict.nodes')
  WHERE actor = 'supervisor' AND classification IN ('node_fail', 'boot_fail');
CREATE TRIGGER decisions_no_update BEFORE UPDATE ON decisions
BEGIN SELECT RAISE(ABORT, 'decision records are append-only'); END;
-- The breaker and quarantine read only the rows they count.
CREATE INDEX decisions_infra ON decisions(at) WHERE infra_failure = 1;
CREATE INDEX decisions_failed_nodes ON decisions(at) WHERE failed_nodes IS NOT NULL;
"#,
    // 4: the jobs a submission waits on (`--dependency`), as rows, so "who waits on this
    // chain" is an indexed lookup, not a parse of every submission. Rows for submissions
    // made before are filled in by the reader the store is given
    // (`Store::read_dependencies_with`, see `backfill_dependencies`).
    r#"
CREATE TABLE dependencies (
    submission_id INTEGER NOT NULL REFERENCES submissions(id),
    kind          TEXT NOT NULL,   -- afterok, afterany, afternotok, aftercorr, after, ...
    job_id        TEXT NOT NULL    -- the job it names: 12, or 12_3 for one array task
);
CREATE INDEX dependencies_by_job ON dependencies(job_id);
CREATE INDEX dependencies_by_submission ON dependencies(submission_id);
-- A user's submissions by id, without reading their (large) rows: the per-user limit on
-- unfinished chains is counted at every submit.
CREATE INDEX submissions_by_owner ON submissions(owner_uid);
INSERT INTO meta (key, value) VALUES ('dependencies_backfill', 'pending');
"#,
    // 5: pipelines. The supervised chains a supervised submission waits on, resolved when
    // it is submitted (`depends_on`, `dependents`); afterany/afternotok on a chain that has
    // not ended are gates the supervisor opens once it has. And the launches that gave a
    // chain a new job: the jobs still waiting on its earlier attempts are rewired to it.
    r#"
CREATE TABLE waits_on (
    submission_id  INTEGER NOT NULL REFERENCES submissions(id),
    upstream_chain INTEGER NOT NULL REFERENCES chains(id),
    kind           TEXT NOT NULL,   -- afterok, afterany, afternotok, aftercorr, after, ...
    target         TEXT NOT NULL,   -- the job as named (c7, 12, 12_*): an array's tasks are one condition
    gate           TEXT,            -- NULL (Slurm's to wait on), or closed | opened | never
    PRIMARY KEY (submission_id, upstream_chain, kind)
);
CREATE INDEX waits_on_by_upstream ON waits_on(upstream_chain);
CREATE INDEX waits_on_closed ON waits_on(upstream_chain) WHERE gate = 'closed';
CREATE TABLE rewires (
    launch_id  INTEGER PRIMARY KEY REFERENCES launches(id),
    created_at INTEGER NOT NULL
);
"#,
    // 6: notifications (an outbox, written in the transaction of the decision that calls
    // for one, delivered after commit and marked) and the age of a pending_failed chain.
    r#"
CREATE TABLE notifications (
    id          INTEGER PRIMARY KEY,
    chain_id    INTEGER NOT NULL REFERENCES chains(id),
    kind        TEXT NOT NULL,     -- pending_failed | completed | failed | reminder | expired
    decision_id INTEGER REFERENCES decisions(id),  -- the decision it tells of (NULL: a success)
    created_at  INTEGER NOT NULL,
    tries       INTEGER NOT NULL DEFAULT 0,
    next_try    INTEGER NOT NULL,  -- not delivered before this time (backoff after a failure)
    sent_at     INTEGER,           -- delivered, or nothing to deliver
    gave_up_at  INTEGER,           -- notify.max_attempts failed deliveries
    error       TEXT,              -- the last failure
    mail_done   INTEGER NOT NULL DEFAULT 0,  -- its mail went out (a retry does not resend it)
    command_done INTEGER NOT NULL DEFAULT 0  -- notify.command took it
);
CREATE INDEX notifications_due ON notifications(next_try) WHERE sent_at IS NULL AND gave_up_at IS NULL;
CREATE INDEX notifications_by_chain ON notifications(chain_id);
-- When the chain entered pending_failed (NULL in any other state); whether its reminder
-- went out; whether escalation.expire_action resolved it (a hold keeps it pending_failed).
ALTER TABLE chains ADD COLUMN pending_since INTEGER;
ALTER TABLE chains ADD COLUMN reminded INTEGER NOT NULL DEFAULT 0;
ALTER TABLE chains ADD COLUMN expired INTEGER NOT NULL DEFAULT 0;
UPDATE chains SET pending_since = updated_at WHERE state = 'pending_failed';
CREATE INDEX chains_pending_since ON chains(pending_since) WHERE state = 'pending_failed';
"#,
    // 7: a chain's owner beside its state, so the per-user limit on unfinished chains
    // (counted at every submit) reads only that user's unfinished chains in a partial
    // index, not every submission of theirs and each of its chains. The index's list of
    // states is `open_states()` in store/mod.rs, word for word (SQLite uses a partial index
    // only for a query that repeats its WHERE; a unit test checks the plan).
    r#"
ALTER TABLE chains ADD COLUMN owner_uid INTEGER;
UPDATE chains SET owner_uid = (SELECT owner_uid FROM submissions WHERE submissions.id = chains.submission_id);
CREATE INDEX chains_open_by_owner ON chains(owner_uid) WHERE state IN ('active', 'ready', 'pending_failed');
"#,
    // 8: partial executions and in-place requeues.
    r#"
-- The submission said a rerun of its script is safe even after some of its srun steps
-- completed (`supervisorctl submit --restartable`).
ALTER TABLE submissions ADD COLUMN restartable INTEGER NOT NULL DEFAULT 0;
-- A launch that requeues this ended job in place (scontrol requeuehold, update, release)
-- instead of running sbatch; NULL for an sbatch. Its intent is written first, like an
-- sbatch's, and finished or undone after a crash.
ALTER TABLE launches ADD COLUMN requeue_of TEXT;
-- The runs of the attempt's job id (sacct --duplicates) that belong to earlier attempts:
-- an attempt requeued in place keeps its job id, and its own runs come after these.
ALTER TABLE attempts ADD COLUMN first_run INTEGER NOT NULL DEFAULT 0;
CREATE INDEX launches_by_requeue ON launches(requeue_of) WHERE requeue_of IS NOT NULL;
"#,
    // 9: jobs submitted with plain sbatch that wait afterany/afternotok on a chain's
    // current job, once reported (`plain_job_not_held`): never twice. `job_id` is the
    // plain job's id without its array task (`12` for `12_[1-5]` and `12_3`), so an array
    // whose pending record Slurm splits is not reported again.
    r#"
CREATE TABLE plain_waiters (
    job_id TEXT NOT NULL,
    chain_id INTEGER NOT NULL REFERENCES chains(id),
    noted_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, chain_id)
) WITHOUT ROWID;
"#,
    // 10: whether Slurm has shown the attempt's job owned by the chain's owner (the poll's
    // full squeue, `%U`). A job's owner never changes, so from then on the poll may ask
    // only for its state (`squeue --only-job-state`, which shows no owner).
    r#"
ALTER TABLE attempts ADD COLUMN owner_seen INTEGER NOT NULL DEFAULT 0;
"#,
    // 11: the request ids of submissions (`submit` over the network): a retried submit
    // whose answer was lost names the submission it made, never a second one. Per owner:
    // one user's id says nothing of, and never meets, another's. No foreign key: a
    // submission sbatch refused is discarded, and its id then names nothing.
    r#"
CREATE TABLE submit_requests (
    owner_uid     INTEGER NOT NULL,
    request_id    TEXT NOT NULL,
    submission_id INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (owner_uid, request_id)
) WITHOUT ROWID;
"#,
    // 12: who chose to have their plain `sbatch` submissions supervised, or not
    // (`supervisorctl opt-in` / `opt-out`, docs/plain-sbatch.md). A user with no row
    // follows the config's site default (`[plain_sbatch] everyone`, `groups`).
    r#"
CREATE TABLE plain_opt (
    uid       INTEGER PRIMARY KEY,
    opted_in  INTEGER NOT NULL,   -- 1 opt-in, 0 opt-out
    chosen_at INTEGER NOT NULL
);
"#,
    // 13: plain `sbatch` (docs/plain-sbatch.md). What could not be recovered exactly from
    // Slurm for an adopted job (a JSON array of sentences; no row for a submission the
    // supervisor was given whole), shown by `history`. And the plain-sbatch jobs the
    // daemon did not supervise, with why, shown to their owner by `status JOBID`; a row is
    // the note's owner's (the uid that left the note) and is dropped after 30 days.
    r#"
CREATE TABLE not_recovered (
    submission_id INTEGER PRIMARY KEY,
    items         TEXT NOT NULL
);
CREATE TABLE plain_refused (
    job_id    TEXT NOT NULL,
    owner_uid INTEGER NOT NULL,
    reason    TEXT NOT NULL,
    noted_at  INTEGER NOT NULL,
    PRIMARY KEY (job_id, owner_uid)
) WITHOUT ROWID;
CREATE INDEX plain_refused_by_time ON plain_refused(noted_at);
"#,
    // 14: one Slurm job is the live attempt of one chain at most: the store refuses a
    // second (docs/guarantees.md), whatever code asks for it. Before this, a plain-sbatch
    // note of the daemon's own job whose sbatch answer was lost could adopt it as a second
    // chain beside the one reconciliation recorded it on. Such pairs already in a store
    // are kept as they are (`twin = 1` on the later chain's attempt: no decision is made
    // for them here), and end as they would have; no new one can be made.
    r#"
ALTER TABLE attempts ADD COLUMN twin INTEGER NOT NULL DEFAULT 0;
UPDATE attempts SET twin = 1
 WHERE state = 'live' AND slurm_job_id IS NOT NULL
   AND EXISTS (SELECT 1 FROM attempts o
                WHERE o.slurm_job_id = attempts.slurm_job_id AND o.state = 'live'
                  AND (o.chain_id < attempts.chain_id
                       OR (o.chain_id = attempts.chain_id AND o.n < attempts.n)));
CREATE UNIQUE INDEX attempts_one_live_per_job ON attempts(slurm_job_id)
 WHERE state = 'live' AND twin = 0;
"#,
    // 15: each user's totals, which the per-user limits read in one row (a submit no longer
    // sums every unfinished submission of its user): unfinished chains, the bytes of the
    // submissions with an unfinished chain (script, argv, environment, working directory;
    // an array's once), and the bytes of the decision records of unfinished chains (reason
    // and inputs). Changed by every write that changes them, in its own transaction, on
    // the writer and on every replica that applies its journal entry alike: a chain
    // inserted or removed by the triggers below, a chain's state and its decision
    // records by `apply_in` and `exec_launch_submitted` (store/apply.rs, store/launches.rs;
    // `TotalsDelta` in store/totals.rs: an UPDATE trigger on `chains` costs every ending,
    // even when it does nothing). A row whose totals are all zero is removed, so the table
    // is exactly what
    // `Store::recount_user_totals` computes from the rows. Filled (and refilled whenever
    // the `meta` row `user_totals` is missing) at open. The list of open states is
    // `open_states()` in store/mod.rs, word for word (a unit test checks).
    r#"
CREATE TABLE user_totals (
    owner_uid      INTEGER PRIMARY KEY,
    open_chains    INTEGER NOT NULL DEFAULT 0,
    open_bytes     INTEGER NOT NULL DEFAULT 0,
    decision_bytes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX chains_open_by_submission ON chains(submission_id) WHERE state IN ('active', 'ready', 'pending_failed');

CREATE TRIGGER user_totals_chain_opened AFTER INSERT ON chains
WHEN NEW.state IN ('active', 'ready', 'pending_failed')
BEGIN
    INSERT OR IGNORE INTO user_totals (owner_uid)
        SELECT owner_uid FROM submissions WHERE id = NEW.submission_id;
    UPDATE user_totals SET
        open_chains = open_chains + 1,
        open_bytes = open_bytes + CASE
            WHEN EXISTS (SELECT 1 FROM chains WHERE submission_id = NEW.submission_id
                         AND state IN ('active', 'ready', 'pending_failed') AND id <> NEW.id) THEN 0
            ELSE (SELECT COALESCE(octet_length(script), 0) + octet_length(argv) + octet_length(env) + octet_length(cwd)
                  FROM submissions WHERE id = NEW.submission_id) END,
        decision_bytes = decision_bytes + (SELECT COALESCE(SUM(octet_length(reason) + octet_length(inputs)), 0)
                                           FROM decisions WHERE chain_id = NEW.id)
    WHERE owner_uid = (SELECT owner_uid FROM submissions WHERE id = NEW.submission_id);
END;

-- A discarded submission (sbatch refused its first launch): its chains go before it.
CREATE TRIGGER user_totals_chain_removed AFTER DELETE ON chains
WHEN OLD.state IN ('active', 'ready', 'pending_failed')
BEGIN
    UPDATE user_totals SET
        open_chains = open_chains - 1,
        open_bytes = open_bytes - CASE
            WHEN EXISTS (SELECT 1 FROM chains WHERE submission_id = OLD.submission_id
                         AND state IN ('active', 'ready', 'pending_failed')) THEN 0
            ELSE (SELECT COALESCE(octet_length(script), 0) + octet_length(argv) + octet_length(env) + octet_length(cwd)
                  FROM submissions WHERE id = OLD.submission_id) END,
        decision_bytes = decision_bytes - (SELECT COALESCE(SUM(octet_length(reason) + octet_length(inputs)), 0)
                                           FROM decisions WHERE chain_id = OLD.id)
    WHERE owner_uid = (SELECT owner_uid FROM submissions WHERE id = OLD.submission_id);
END;

CREATE TRIGGER user_totals_emptied AFTER UPDATE ON user_totals
WHEN NEW.open_chains = 0 AND NEW.open_bytes = 0 AND NEW.decision_bytes = 0
BEGIN
    DELETE FROM user_totals WHERE owner_uid = NEW.owner_uid;
END;
"#,
    // 16: continuation (docs/continuation.md): what a continuing submission asked for
    // (JSON `continuation::Continuation`: its progress path and its "continue me" exit
    // codes); NULL for every other submission.
    r#"
ALTER TABLE submissions ADD COLUMN continuation TEXT;
"#,
    // 17: failure signatures (src/domain/signature.rs, docs/rules.md): an ended attempt's
    // signature, its id and its masked stderr lines, as the daemon computed them when it
    // judged the ending; NULL for attempts judged before. And an index of resolutions.
    r#"
ALTER TABLE attempts ADD COLUMN signature TEXT;
ALTER TABLE attempts ADD COLUMN signature_text TEXT;
CREATE INDEX attempts_by_signature ON attempts(signature) WHERE signature IS NOT NULL;
-- The resolutions alone (a person's or an agent's decisions are few beside the rest),
-- which `rules` and the metrics read for proposals.
CREATE INDEX decisions_resolutions ON decisions(resolves) WHERE resolves IS NOT NULL;
"#,
    // 18: decisions about rule proposals (docs/rules.md, "Decisions about rules"): every
    // `rules accept` and `rules reject`, a record of its own that belongs to no chain,
    // never edited (a later decision is a new row); `owner_uid` NULL for everyone's (an
    // admin's), a uid for that user's own chains, whose acceptance keeps the rule itself
    // (`rule`, JSON `learn::ProposedRule`). A user's records count in their totals
    // (`rule_bytes`: reason and rule), kept by the write that adds one
    // (store/rule_decisions.rs); the emptied row's trigger counts the new column.
    r#"
CREATE TABLE rule_decisions (
    id        INTEGER PRIMARY KEY,
    proposal  TEXT NOT NULL,
    owner_uid INTEGER,
    action    TEXT NOT NULL,
    actor     TEXT NOT NULL,
    actor_uid INTEGER NOT NULL,
    reason    TEXT NOT NULL,
    rule      TEXT,
    at        INTEGER NOT NULL
);
CREATE INDEX rule_decisions_by_owner ON rule_decisions(owner_uid, proposal);
ALTER TABLE user_totals ADD COLUMN rule_bytes INTEGER NOT NULL DEFAULT 0;
DROP TRIGGER user_totals_emptied;
CREATE TRIGGER user_totals_emptied AFTER UPDATE ON user_totals
WHEN NEW.open_chains = 0 AND NEW.open_bytes = 0 AND NEW.decision_bytes = 0 AND NEW.rule_bytes = 0
BEGIN
    DELETE FROM user_totals WHERE owner_uid = NEW.owner_uid;
END;
"#,
    // 19: a user's request ids in the order a submit prunes them (the newest
    // `SUBMIT_REQUESTS_KEPT` are kept): without it every submit sorted all of the user's
    // ids, 0.3 ms at 300 and over 1 ms at 1,000 (docs/benchmarks.md, issue 32).
    r#"
CREATE INDEX submit_requests_by_age ON submit_requests(owner_uid, created_at, submission_id);
"#,
];
