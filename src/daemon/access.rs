//! Who may see and act on what: the caller's uid (from the socket's peer credentials)
//! against each chain's owner. Shared by every request handler, so nothing imports the
//! dispatcher for it.

use crate::ids::IdRef;
use crate::protocol::{ErrorKind, Response};
use crate::store::{Chain, Store, StoreError};

/// A request handler's answer: the JSON value, or the error response.
pub type Handled<T> = Result<T, Response>;

pub fn internal(e: impl std::fmt::Display) -> Response {
    Response::error(ErrorKind::Internal, e.to_string())
}

impl From<StoreError> for Response {
    fn from(e: StoreError) -> Self {
        internal(e)
    }
}

/// Root and the daemon's own user see every chain; anyone else only their own.
pub fn sees_all(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::getuid().as_raw()
}

/// Checks the form of a user-given id before anything is looked up.
pub fn parse_id(id: &str) -> Result<IdRef, Response> {
    IdRef::parse(id).map_err(|e| Response::error(ErrorKind::Usage, e))
}

/// The chains an id names that this caller may act on.
pub fn chains_for(store: &Store, id: &str, uid: u32) -> Result<Vec<Chain>, Response> {
    parse_id(id)?;
    let ids = store.resolve(id)?;
    if ids.is_empty() {
        // A plain-sbatch job the daemon did not supervise: its note's owner (and root)
        // learns why here (docs/plain-sbatch.md).
        let refusal = store
            .plain_refusals(id.trim())?
            .into_iter()
            .find(|r| r.owner_uid == uid || sees_all(uid));
        if let Some(r) = refusal {
            return Err(Response::error(
                ErrorKind::NotFound,
                format!(
                    "job {} is not supervised: it was submitted with plain sbatch, and refused: {}",
                    id.trim(),
                    r.reason
                ),
            ));
        }
        return Err(Response::error(
            ErrorKind::NotFound,
            format!(
                "no chain or job {:?} is supervised here: see `supervisorctl status` for the ids",
                id.trim()
            ),
        ));
    }
    // A job id can name chains of two users (Slurm reuses ids after a wrap or a reset):
    // the caller gets their own, and 77 only when none of them is theirs.
    let mut out = Vec::new();
    for i in ids {
        if sees_all(uid) || store.owner_of(i)? == uid {
            out.extend(store.chain(i)?);
        }
    }
    if out.is_empty() {
        return Err(Response::error(
            ErrorKind::Forbidden,
            format!("{} belongs to another user", id.trim()),
        ));
    }
    Ok(out)
}

/// The account name of `uid` (its number if the system knows none), for records and
/// actors; access is decided on uids, never on names. The account is the kept one of
/// `RunAs::lookup`, so a submit asks NSS for it at most once a minute.
pub fn user_name(uid: u32) -> String {
    crate::slurm::RunAs::lookup(uid)
        .map(|who| who.user.to_string_lossy().into_owned())
        .unwrap_or_else(|| uid.to_string())
}

/// The actor recorded for a person's decision.
pub fn actor(uid: u32) -> String {
    format!("user:{}", user_name(uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_account_is_named_and_an_unknown_one_numbered() {
        let me = nix::unistd::getuid().as_raw();
        let name = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .map(|u| u.name)
            .expect("the test's own account");
        // The second answer is the kept one; both are the account's.
        assert_eq!(user_name(me), name);
        assert_eq!(user_name(me), name);
        assert_eq!(actor(me), format!("user:{name}"));
        // No account: the number, not kept (asked again next time).
        assert_eq!(user_name(4_000_000_123), "4000000123");
    }
}
