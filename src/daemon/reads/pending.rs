//! `pending`: the chains waiting for an agent or a person, with their evidence. The
//! answer shows each chain's script, so it can be large: `write_all` writes it a chain at
//! a time, holding one chain's view, not the list.

use super::status::StreamError;
use super::{fill, Read};
use crate::daemon::access::sees_all;
use crate::domain::model::ChainState;
use crate::protocol::views::PendingChain;
use crate::protocol::Response;
use crate::store::Store;
use std::io::Write;

/// How `pending` is answered: streamed, a chain at a time.
pub fn read() -> Read {
    Read::List {
        stream: write_all,
        whole: |store, uid| super::answer(pending(store, uid)),
    }
}

fn pending(store: &Store, uid: u32) -> Result<Vec<PendingChain>, Response> {
    let mut out = Vec::new();
    for c in store.chains_in_state(ChainState::PendingFailed)? {
        if sees_all(uid) || store.owner_of(c.id)? == uid {
            out.push(fill::pending_view(store, &c)?);
        }
    }
    Ok(out)
}

/// Writes the answer line of `pending` to `out`, a chain at a time: `{"ok":[chain,...]}`
/// and a newline, the same bytes as the answer built whole (each chain through a JSON
/// value, as `Response::answer` makes it). A store error after the first chain cuts the
/// answer short, which the client reports as an unreadable answer.
pub fn write_all(store: &Store, uid: u32, out: &mut dyn Write) -> Result<(), StreamError> {
    let chains = store.chains_in_state(ChainState::PendingFailed)?;
    out.write_all(b"{\"ok\":[")?;
    let mut first = true;
    for c in chains {
        if !(sees_all(uid) || store.owner_of(c.id)? == uid) {
            continue;
        }
        let value =
            serde_json::to_value(fill::pending_view(store, &c)?).map_err(std::io::Error::from)?;
        if !first {
            out.write_all(b",")?;
        }
        first = false;
        serde_json::to_writer(&mut *out, &value).map_err(std::io::Error::from)?;
    }
    out.write_all(b"]}\n")?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewSubmission;

    fn submission(owner_uid: u32, script: &[u8]) -> NewSubmission {
        NewSubmission {
            owner_uid,
            user: format!("u{owner_uid}"),
            argv: vec!["job.sh".into()],
            cwd: "/tmp".into(),
            env: Vec::new(),
            script_name: Some("job.sh".into()),
            script: Some(script.to_vec()),
            max_retries: 5,
            restartable: false,
            array_tasks: None,
            continuation: None,
        }
    }

    #[test]
    fn the_streamed_list_is_the_same_bytes_as_the_whole_answer() {
        let mut s = Store::in_memory().unwrap();
        for (n, (owner, script)) in [
            (1000, b"#!/bin/sh\necho \"a\"\x00\n".as_slice()),
            (1001, b"#!/bin/sh\nexit 1\n".as_slice()),
            (1000, b"#!/bin/sh\nexit 2\n".as_slice()),
        ]
        .into_iter()
        .enumerate()
        {
            let sub = s
                .create_submission(&submission(owner, script), 10, |_| vec![])
                .unwrap();
            s.launch_submitted(sub.id, &format!("{}", 41 + n), 11)
                .unwrap();
        }
        let to = crate::store::Transition::of(
            ChainState::Active,
            crate::store::ChainUpdate {
                last_classification: Some(crate::domain::model::Classification::Ambiguous),
                ..crate::store::ChainUpdate::to(ChainState::PendingFailed)
            },
            None,
        )
        .finish();
        s.apply(
            &crate::store::Batch::all(vec![(1, to.clone()), (2, to)]),
            15,
        )
        .unwrap();
        for (uid, count) in [(0, 2), (1000, 1), (1001, 1), (1002, 0)] {
            let listed = pending(&s, uid).unwrap();
            assert_eq!(listed.len(), count, "uid {uid}");
            let whole = Response::answer(&listed);
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
