//! The one dispatch of a journal operation (`journal::Op`) to the function that ran it
//! first: the writer and every replica apply an operation here, in the caller's
//! transaction, from its values alone (docs/ARCHITECTURE.md, "Architecture invariants").
//! A new write adds its `Op` variant's arm here, beside nothing else.

use super::*;

pub(super) fn set_journal_seq(tx: &Connection, seq: u64) -> Result<()> {
    tx.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES ('journal_seq', ?1)")?
        .execute([seq.to_string()])?;
    Ok(())
}

pub(super) fn journal_seq(conn: &Connection) -> Result<u64> {
    let v: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'journal_seq'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    match v {
        None => Ok(0),
        Some(v) => v
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("journal_seq {v:?} is not a number"))),
    }
}

/// Applies one journal operation in the caller's transaction, with the function that ran
/// it first.
pub(super) fn apply_op(tx: &Connection, instance: &str, op: Op<'_>) -> Result<()> {
    match op {
        Op::CreateSubmission {
            new,
            edges,
            now,
            argv,
            dependencies,
        } => {
            Store::exec_create_submission(tx, instance, &new, &edges, &dependencies, now, |_| {
                argv.into_owned()
            })?;
        }
        Op::BeginRelaunch {
            submission_id,
            chain_ids,
            now,
            argv,
        } => {
            Store::exec_begin_relaunch(tx, instance, submission_id, &chain_ids, now, |_| {
                argv.into_owned()
            })?;
        }
        Op::BeginRequeue {
            submission_id,
            chain_id,
            job_id,
            fields,
            now,
        } => {
            Store::exec_begin_requeue(
                tx,
                instance,
                submission_id,
                chain_id,
                &job_id,
                &fields,
                now,
            )?;
        }
        Op::LaunchSubmitted {
            launch_id,
            job_id,
            now,
        } => exec_launch_submitted(tx, launch_id, &job_id, now, false)?,
        Op::LegacyLaunchSubmitted {
            launch_id,
            job_id,
            now,
        } => {
            // An entry written before migration 14 may make a second live attempt on one
            // job (a plain-sbatch note of the daemon's own job adopted it twice): it is
            // applied as the migration keeps such pairs (`twin`), so a new replica can
            // replay a journal that holds one. The store that writes entries now refuses
            // a second live attempt, so no entry of revision 2 makes one, and one that
            // would is refused with the error its writer got.
            tx.execute_batch("SAVEPOINT replay_launch")?;
            let first = exec_launch_submitted(tx, launch_id, &job_id, now, false);
            let undo = "ROLLBACK TO replay_launch; RELEASE replay_launch";
            match first {
                Ok(()) => tx.execute_batch("RELEASE replay_launch")?,
                Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)))
                    if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE =>
                {
                    tx.execute_batch(undo)?;
                    exec_launch_submitted(tx, launch_id, &job_id, now, true)?
                }
                Err(e) => {
                    tx.execute_batch(undo)?;
                    return Err(e);
                }
            }
        }
        Op::DiscardSubmission { launch_id } => exec_discard_submission(tx, launch_id)?,
        Op::NoteSubmitRequest {
            owner_uid,
            request_id,
            submission_id,
            now,
            keep,
        } => exec_note_submit_request(tx, owner_uid, &request_id, submission_id, now, keep)?,
        Op::NoteLaunchError {
            launch_id,
            error,
            promise,
        } => exec_note_launch_error(tx, launch_id, &error, promise)?,
        Op::SetLastSeen { seen, owned } => exec_set_last_seen(tx, &seen, &owned)?,
        Op::SetPlainOpt { uid, opted_in, now } => {
            opt_in::exec_set_plain_opt(tx, uid, opted_in, now)?
        }
        Op::NoteNotRecovered {
            submission_id,
            items,
        } => opt_in::exec_note_not_recovered(tx, submission_id, &items)?,
        Op::NotePlainRefused {
            job_id,
            owner_uid,
            reason,
            now,
            forget_before,
        } => opt_in::exec_note_plain_refused(tx, &job_id, owner_uid, &reason, now, forget_before)?,
        Op::Apply {
            steps,
            all_or_none,
            failed_launch,
            settled_gates,
            now,
        } => {
            exec_apply(
                tx,
                steps.iter().map(|(c, t)| (*c, t)),
                all_or_none,
                failed_launch.as_ref().map(|(l, e)| (*l, e.as_ref())),
                settled_gates,
                now,
            )?;
        }
        Op::NotificationsSent { items, now } => exec_notifications_sent(tx, &items, now)?,
        Op::NotificationFailed {
            id,
            done,
            error,
            next_try,
            now,
        } => exec_notification_failed(tx, id, done, &error, next_try, now)?,
        Op::NotificationMailed { id } => exec_notification_mailed(tx, id)?,
        Op::RecordRuleDecision {
            proposal,
            owner_uid,
            action,
            actor,
            actor_uid,
            reason,
            rule,
            at,
        } => {
            rule_decisions::exec_record_rule_decision(
                tx,
                &proposal,
                owner_uid,
                &action,
                &actor,
                actor_uid,
                &reason,
                rule.as_deref(),
                at,
            )?;
        }
        Op::AddWaits {
            submission_id,
            edges,
        } => pipeline::insert_waits(tx, submission_id, &edges)?,
        Op::ClearRewires { launch_ids } => pipeline::clear_rewires_in(tx, &launch_ids)?,
    }
    Ok(())
}
