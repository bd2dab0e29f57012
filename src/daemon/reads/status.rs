//! `status`: one row per chain, the caller's own (all of them for root). The whole list
//! is written out row by row as it is read (`write_all`): one query, and nothing of it
//! kept, however many chains the store holds.

use super::{fill, Read};
use crate::daemon::access::{chains_for, sees_all};
use crate::protocol::views::ChainRow;
use crate::protocol::Response;
use crate::store::{Store, StoreError};
use std::io::Write;

/// How `status` is answered: every chain of the caller's streamed as it is read, or the
/// chains one id names.
pub fn read(id: Option<String>) -> Read {
    match id {
        None => Read::List {
            stream: write_all,
            whole: |store, uid| super::answer(status(store, None, uid)),
        },
        Some(id) => Read::Store(Box::new(move |store, uid| {
            super::answer(status(store, Some(&id), uid))
        })),
    }
}

fn status(store: &Store, id: Option<&str>, uid: u32) -> Result<Vec<ChainRow>, Response> {
    let chains = match id {
        Some(id) => chains_for(store, id, uid)?,
        None => store.chains(if sees_all(uid) { None } else { Some(uid) })?,
    };
    let rows: Result<Vec<ChainRow>, StoreError> =
        chains.iter().map(|c| fill::chain_view(store, c)).collect();
    Ok(rows?)
}

/// A status row with its keys in the order the whole answer has them (a JSON value's
/// map is sorted), written without building that value. The unit test below holds it to
/// the same bytes as `ChainRow` through a value, so a field added to one and not the other
/// fails it.
#[derive(serde::Serialize)]
struct SortedRow<'a> {
    array_task: Option<u32>,
    attempts: u32,
    continuations: u32,
    created_at: i64,
    dependency_failed: &'a [String],
    dependents: &'a [String],
    depends_on: &'a [String],
    id: &'a str,
    last_classification: Option<crate::domain::model::Classification>,
    next_retry_at: Option<i64>,
    slurm_job_id: Option<&'a str>,
    slurm_state: Option<&'a str>,
    state: crate::domain::model::ChainState,
    submission: i64,
    updated_at: i64,
}

impl<'a> SortedRow<'a> {
    fn of(r: &'a ChainRow) -> SortedRow<'a> {
        let c = &r.chain;
        SortedRow {
            array_task: c.array_task,
            attempts: r.attempts,
            continuations: r.continuations,
            created_at: c.created_at,
            dependency_failed: &c.dependency_failed,
            dependents: &c.dependents,
            depends_on: &c.depends_on,
            id: &c.id,
            last_classification: c.last_classification,
            next_retry_at: c.next_retry_at,
            slurm_job_id: c.slurm_job_id.as_deref(),
            slurm_state: c.slurm_state.as_deref(),
            state: c.state,
            submission: c.submission,
            updated_at: c.updated_at,
        }
    }
}

/// Why a streamed answer stopped.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// Before anything was written: the answer can still be an error.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The client went away, or a write failed: the answer is cut short.
    #[error("writing the answer: {0}")]
    Io(#[from] std::io::Error),
}

/// Writes the answer line of `status` for all of the caller's chains to `out`, a row at
/// a time: `{"ok":[row,row,...]}` and a newline, the same bytes as the answer built whole
/// (each row's keys in the same order). A store error after the first row cuts the answer
/// short, which the client reports as an unreadable answer.
pub fn write_all(store: &Store, uid: u32, out: &mut dyn Write) -> Result<(), StreamError> {
    let waits = store.submissions_with_dependencies()?;
    let members = store.pipeline_members()?;
    let owner = if sees_all(uid) { None } else { Some(uid) };
    out.write_all(b"{\"ok\":[")?;
    let mut first = true;
    store.each_chain_summary(owner, |s| -> Result<(), StreamError> {
        let row = fill::summary_view(store, s, &waits, &members)?;
        if !first {
            out.write_all(b",")?;
        }
        first = false;
        serde_json::to_writer(&mut *out, &SortedRow::of(&row)).map_err(std::io::Error::from)?;
        Ok(())
    })?;
    out.write_all(b"]}\n")?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewSubmission;

    fn submission(argv: &[&str], tasks: Option<Vec<u32>>) -> NewSubmission {
        NewSubmission {
            owner_uid: 1000,
            user: "alice".into(),
            argv: argv.iter().map(|a| a.to_string()).collect(),
            cwd: "/tmp".into(),
            env: Vec::new(),
            script_name: None,
            script: None,
            max_retries: 5,
            restartable: false,
            array_tasks: tasks,
            continuation: None,
        }
    }

    #[test]
    fn the_streamed_list_is_the_same_bytes_as_the_whole_answer() {
        let mut s = Store::in_memory().unwrap();
        let a = s
            .create_submission(&submission(&["--wrap=true"], None), 10, |_| vec![])
            .unwrap();
        s.launch_submitted(a.id, "41", 11).unwrap();
        let arr = s
            .create_submission(
                &submission(&["--wrap=true"], Some(vec![1, 2])),
                12,
                |_| vec![],
            )
            .unwrap();
        s.launch_submitted(arr.id, "42", 13).unwrap();
        // One waiting on the first with --dependency, and one never submitted.
        let waiting = submission(&["--dependency=afterok:41", "--wrap=true"], None);
        let rows = crate::daemon::sbatch::dependency_rows(&waiting.argv, None);
        s.create_submission_waiting(&waiting, &[], &rows, 14, |_| vec![])
            .unwrap();
        s.set_last_seen(&[(1, 1, "RUNNING")], &[]).unwrap();
        // The first fails for good (so the third's dependency failed), an array task
        // waits for a retry.
        let to = |state, not_before| {
            crate::store::Transition::of(
                crate::domain::model::ChainState::Active,
                crate::store::ChainUpdate {
                    last_classification: Some(crate::domain::model::Classification::Oom),
                    not_before,
                    ..crate::store::ChainUpdate::to(state)
                },
                None,
            )
            .finish()
        };
        let moved = s
            .apply(
                &crate::store::Batch::all(vec![
                    (1, to(crate::domain::model::ChainState::Failed, None)),
                    (2, to(crate::domain::model::ChainState::Ready, Some(99))),
                ]),
                15,
            )
            .unwrap()
            .moved;
        assert_eq!(moved, None);
        let rows = status(&s, None, 0).unwrap();
        assert_eq!(rows[3].chain.dependency_failed, vec!["c1"]);
        assert_eq!(rows[1].chain.next_retry_at, Some(99));
        assert_eq!(rows[1].chain.array_task, Some(1));
        for uid in [0, 1000, 1001] {
            let whole = crate::protocol::Response::answer(&status(&s, None, uid).unwrap());
            let mut expected = serde_json::to_vec(&whole).unwrap();
            expected.push(b'\n');
            let mut streamed = Vec::new();
            write_all(&s, uid, &mut streamed).unwrap();
            assert_eq!(
                String::from_utf8(streamed).unwrap(),
                String::from_utf8(expected).unwrap(),
                "uid {uid}"
            );
        }
    }
}
