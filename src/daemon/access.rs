//! Who may see and act on what: the caller's uid (from the socket's peer credentials)
//! against each chain's owner. Shared by every request handler, so nothing imports the
//! dispatcher for it.

use crate::domain::ids::IdRef;
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

/// How long a caller's groups may take to look up (NSS: LDAP, sssd) before the caller is
/// taken for no member of `[learn] admin_group`.
pub const GROUPS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// What the connection found of a caller's membership of `[learn] admin_group`, before
/// the request reached the loop (the lookup asks NSS, which may be slow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// A member (primary or supplementary group, as this node's NSS says).
    Member,
    /// Not a member; or not asked: no group configured, a request that needs no answer,
    /// or a network origin not in `[server] root_nodes` (there the group gives no rights).
    NotMember,
    /// The lookup took longer than [`GROUPS_TIMEOUT`].
    TimedOut,
}

/// Who sent a request: their uid (the socket's peer credentials, or MUNGE's), and their
/// membership of `[learn] admin_group` as the connection found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub admin_group: Membership,
}

impl Caller {
    /// `uid`, their groups looked up in place (blocking: the in-process tests' path) when
    /// a group is configured.
    pub fn looked_up(uid: u32, learn: &crate::config::LearnConfig) -> Caller {
        let admin_group = if !sees_all(uid) && rule_admin(false, learn.admin_gid, || groups_of(uid))
        {
            Membership::Member
        } else {
            Membership::NotMember
        };
        Caller { uid, admin_group }
    }

    /// `uid`, their groups looked up on a blocking thread within [`GROUPS_TIMEOUT`] when a
    /// group is configured, the request asks (`Request::asks_rule_admin`) and the group
    /// gives rights where the request came from (`group_counts`: the local Unix socket,
    /// or a `[server] root_nodes` origin): the async threads and the loop never wait on
    /// NSS.
    pub async fn find(
        uid: u32,
        learn: &crate::config::LearnConfig,
        asks: bool,
        group_counts: bool,
    ) -> Caller {
        let admin_group = match learn.admin_gid {
            Some(g) if asks && group_counts && !sees_all(uid) => {
                let lookup = tokio::task::spawn_blocking(move || groups_of(uid).contains(&g));
                match tokio::time::timeout(GROUPS_TIMEOUT, lookup).await {
                    Ok(Ok(true)) => Membership::Member,
                    Ok(_) => Membership::NotMember,
                    Err(_) => {
                        tracing::warn!(uid, "looking up the caller's groups for [learn] admin_group took longer than {GROUPS_TIMEOUT:?}: taken for no member");
                        Membership::TimedOut
                    }
                }
            }
            _ => Membership::NotMember,
        };
        Caller { uid, admin_group }
    }
}

/// Whether `caller` decides rule proposals for everyone (docs/rules.md): root, the
/// daemon's own user, or a member of `[learn] admin_group` as the connection found
/// (`Caller::find`; nothing is looked up here, on the loop). A lookup that timed out is
/// an error that says so: no member, and the caller told why.
pub fn decides_rules_for_everyone(caller: &Caller) -> Result<bool, String> {
    match caller.admin_group {
        _ if sees_all(caller.uid) => Ok(true),
        Membership::Member => Ok(true),
        Membership::NotMember => Ok(false),
        Membership::TimedOut => Err(format!(
            "looking up your groups for [learn] admin_group took longer than {}s (this node's NSS: LDAP, sssd), \
             so you were taken for no member of it and nothing was decided: try again, or add --mine to decide for your own chains",
            GROUPS_TIMEOUT.as_secs()
        )),
    }
}

/// The decision of [`Caller::looked_up`], apart from its lookups: an admin
/// already, or a member of the admin group (`groups` gives the caller's gids, primary
/// first; asked only when a group is configured).
pub fn rule_admin(
    sees_all: bool,
    admin_gid: Option<u32>,
    groups: impl FnOnce() -> Vec<u32>,
) -> bool {
    sees_all || admin_gid.is_some_and(|g| groups().contains(&g))
}

/// The gids `uid` belongs to on this node (primary and supplementary); none for an
/// account this node does not know.
fn groups_of(uid: u32) -> Vec<u32> {
    let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) else {
        return Vec::new();
    };
    let Ok(name) = std::ffi::CString::new(u.name.as_bytes()) else {
        return vec![u.gid.as_raw()];
    };
    match nix::unistd::getgrouplist(&name, u.gid) {
        Ok(gids) => gids.into_iter().map(|g| g.as_raw()).collect(),
        Err(_) => vec![u.gid.as_raw()],
    }
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
    fn the_admin_group_decides_rules_for_everyone_and_no_one_else_does() {
        let never = || -> Vec<u32> { panic!("the groups are not looked up") };
        assert!(rule_admin(true, None, never));
        assert!(rule_admin(true, Some(50), never));
        assert!(!rule_admin(false, None, never));
        // A member by a supplementary group, or by the primary one.
        assert!(rule_admin(false, Some(50), || vec![1000, 50]));
        assert!(rule_admin(false, Some(50), || vec![50]));
        assert!(!rule_admin(false, Some(50), || vec![1000, 51]));
        assert!(!rule_admin(false, Some(50), Vec::new));
        // This process's own account: its primary group is found for it.
        let me = nix::unistd::getuid().as_raw();
        let gid = nix::unistd::getgid().as_raw();
        assert!(groups_of(me).contains(&gid));
        assert_eq!(groups_of(4_000_000_123), Vec::<u32>::new());
    }

    /// The connection looks the caller's groups up (off the loop) only for a request
    /// whose answer depends on them, and only where the group gives rights: the local
    /// socket or a `[server] root_nodes` origin, never another MUNGE origin.
    #[tokio::test]
    async fn the_admin_group_is_looked_up_off_the_loop_and_counts_only_where_root_would() {
        let nobody = nix::unistd::User::from_name("nobody")
            .unwrap()
            .expect("an account `nobody` on this node");
        assert!(!sees_all(nobody.uid.as_raw()), "the test runs as nobody");
        let learn = crate::config::LearnConfig {
            admin_gid: Some(nobody.gid.as_raw()),
            ..Default::default()
        };
        let uid = nobody.uid.as_raw();
        let found = |asks, counts| Caller::find(uid, &learn, asks, counts);
        let member = found(true, true).await;
        assert_eq!(member.admin_group, Membership::Member);
        assert_eq!(decides_rules_for_everyone(&member), Ok(true));
        // From a network origin root_nodes does not list: no rights from the group.
        let elsewhere = found(true, false).await;
        assert_eq!(elsewhere.admin_group, Membership::NotMember);
        assert_eq!(decides_rules_for_everyone(&elsewhere), Ok(false));
        // A request that does not ask: nothing looked up.
        assert_eq!(found(false, true).await.admin_group, Membership::NotMember);
        // In place, for the in-process tests: the same answer.
        assert_eq!(Caller::looked_up(uid, &learn), member);
        // A lookup that timed out: no member, and told why.
        let slow = Caller {
            uid,
            admin_group: Membership::TimedOut,
        };
        let e = decides_rules_for_everyone(&slow).unwrap_err();
        assert!(e.contains("took longer than 5s"), "{e}");
    }

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
