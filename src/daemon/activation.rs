//! The daemon's TCP listeners: taken from systemd (socket activation) when it passes them,
//! bound here otherwise.
//!
//! **Why.** A port above 1023 is anyone's to bind while the daemon is not holding it (a
//! restart, a crash, a node whose daemon is not running yet). With
//! `slurm-supervisord.socket` systemd binds it at boot and holds it across restarts, so no
//! user can take it from the daemon (docs/security.md, "Holding the port").
//!
//! **The protocol** (sd_listen_fds(3)), with no crate: when `LISTEN_PID` is this process's
//! pid, `LISTEN_FDS` descriptors from 3 on are listening sockets, named in order by the
//! colon-separated `LISTEN_FDNAMES` (`FileDescriptorName=` of the socket unit). The
//! network listener is the one named `server`, the metrics endpoint's `metrics`. They are
//! taken once per process and marked close-on-exec, so no Slurm command inherits them;
//! the variables are left as they are (a child, whose pid is not `LISTEN_PID`, ignores
//! them).
//!
//! **Both families.** Bound here, an IPv6 address listens with `IPV6_V6ONLY` off, so the
//! default `[::]:6827` also takes IPv4 (as `::ffff:a.b.c.d`) and leaves neither family's
//! port free beside the daemon, whatever `net.ipv6.bindv6only` says.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

/// The name of the network listener's descriptor (`FileDescriptorName=server`).
pub const SERVER: &str = "server";

/// The name of the metrics endpoint's descriptor (`FileDescriptorName=metrics`).
pub const METRICS: &str = "metrics";

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const FIRST_FD: i32 = 3;

/// The descriptors systemd passed and no listener has taken yet, by name.
static PASSED: Mutex<Option<BTreeMap<String, Vec<OwnedFd>>>> = Mutex::new(None);

/// Reads what systemd passed to this process, once: descriptors by name.
fn passed_from_env() -> BTreeMap<String, Vec<OwnedFd>> {
    let mut out: BTreeMap<String, Vec<OwnedFd>> = BTreeMap::new();
    let pid_is_mine = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
        .is_some_and(|p| p == std::process::id());
    if !pid_is_mine {
        return out;
    }
    let Some(n) = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.trim().parse::<i32>().ok())
        .filter(|n| (1..=64).contains(n))
    else {
        return out;
    };
    let names: Vec<String> = std::env::var("LISTEN_FDNAMES")
        .map(|s| s.split(':').map(String::from).collect())
        .unwrap_or_default();
    for i in 0..n {
        let fd = FIRST_FD + i;
        // SAFETY: systemd passed descriptors FIRST_FD .. FIRST_FD + n to this pid; nothing
        // else in this process owns them, and each is wrapped exactly once (the map is
        // filled once per process).
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let _ = nix::fcntl::fcntl(
            owned.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        );
        let name = names
            .get(i as usize)
            .cloned()
            .unwrap_or_else(|| "unknown".into());
        out.entry(name).or_default().push(owned);
    }
    out
}

/// Takes the listening socket systemd passed under `name`, if it passed one.
fn take(name: &str) -> Option<Vec<OwnedFd>> {
    let mut passed = PASSED.lock().unwrap_or_else(|e| e.into_inner());
    passed.get_or_insert_with(passed_from_env).remove(name)
}

/// The names of descriptors systemd passed that no listener took.
pub fn left_over() -> Vec<String> {
    let mut passed = PASSED.lock().unwrap_or_else(|e| e.into_inner());
    passed
        .get_or_insert_with(passed_from_env)
        .keys()
        .cloned()
        .collect()
}

/// Why a listener could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("systemd passed {count} sockets named {name:?}; give the socket unit one ListenStream= (BindIPv6Only=both takes both families on one)")]
    Several { name: String, count: usize },
    #[error("systemd passed a socket on {passed} named {name:?}, but the config says {configured}; make the socket unit's ListenStream= and the config agree")]
    Elsewhere {
        name: String,
        passed: SocketAddr,
        configured: SocketAddr,
    },
}

impl ListenError {
    /// Whether the listener could not be had only because another process holds the
    /// port: the daemon then goes on without it and takes it once it is free
    /// ([`listen_when_free`]), so no user who binds a port can keep it from starting.
    pub fn is_taken(&self) -> bool {
        matches!(self, ListenError::Io(e) if e.kind() == std::io::ErrorKind::AddrInUse)
    }
}

/// How often a port that another process held is tried again.
pub const REBIND_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The listener for `addr` once the port is free: tried every [`REBIND_EVERY`] until it
/// is had. Another process holding a port of the daemon's (a user who bound it while the
/// daemon was down, without `slurm-supervisord.socket`) keeps that one listener away,
/// never the daemon: the Unix socket and supervision go on meanwhile, and a squatter on
/// the network port cannot prove itself to clients (docs/security.md, "Holding the port").
pub async fn listen_when_free(name: &'static str, addr: SocketAddr) -> tokio::net::TcpListener {
    loop {
        tokio::time::sleep(REBIND_EVERY).await;
        match listen(name, addr) {
            Ok((l, _)) => {
                tracing::info!(%addr, "the port is free again: listening on it");
                return l;
            }
            Err(e) if e.is_taken() => {}
            Err(e) => tracing::warn!(%addr, "cannot listen on {addr} yet: {e}"),
        }
    }
}

/// Whether a socket systemd bound on `passed` is the config's `configured`: the same
/// address, or, for an address of any host (`0.0.0.0`, `::`), the same port on any host.
fn agrees(passed: SocketAddr, configured: SocketAddr) -> bool {
    passed == configured
        || (passed.port() == configured.port()
            && passed.ip().is_unspecified()
            && configured.ip().is_unspecified())
}

/// The listener for `addr`: systemd's socket named `name` when it passed one (it must be
/// on `addr`), else bound here (both families on `[::]`). The second value says whether it
/// came from systemd.
pub fn listen(
    name: &str,
    addr: SocketAddr,
) -> Result<(tokio::net::TcpListener, bool), ListenError> {
    let (std_listener, inherited) = match take(name) {
        Some(mut fds) => {
            if fds.len() != 1 {
                return Err(ListenError::Several {
                    name: name.into(),
                    count: fds.len(),
                });
            }
            let l = std::net::TcpListener::from(fds.pop().expect("one"));
            let passed = l.local_addr()?;
            if !agrees(passed, addr) {
                return Err(ListenError::Elsewhere {
                    name: name.into(),
                    passed,
                    configured: addr,
                });
            }
            (l, true)
        }
        None => (bind(addr)?, false),
    };
    std_listener.set_nonblocking(true)?;
    Ok((tokio::net::TcpListener::from_std(std_listener)?, inherited))
}

/// Binds `addr` here: `SO_REUSEADDR` (as tokio does), and on an IPv6 address
/// `IPV6_V6ONLY` off, so `[::]` takes both families.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use nix::sys::socket::{
        bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
        SockaddrIn, SockaddrIn6,
    };
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    match addr {
        SocketAddr::V4(a) => bind(fd.as_raw_fd(), &SockaddrIn::from(a))?,
        SocketAddr::V6(a) => {
            setsockopt(&fd, sockopt::Ipv6V6Only, &false)?;
            bind(fd.as_raw_fd(), &SockaddrIn6::from(a))?
        }
    }
    listen(&fd, Backlog::new(1024).map_err(std::io::Error::from)?)?;
    Ok(std::net::TcpListener::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passed_socket_agrees_with_the_config_by_address_or_any_host_and_port() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(agrees(a("[::]:6827"), a("[::]:6827")));
        assert!(agrees(a("[::]:6827"), a("0.0.0.0:6827")));
        assert!(agrees(a("192.0.2.1:6827"), a("192.0.2.1:6827")));
        assert!(!agrees(a("[::]:6828"), a("[::]:6827")));
        assert!(!agrees(a("192.0.2.1:6827"), a("0.0.0.0:6827")));
        assert!(!agrees(a("[::]:6827"), a("192.0.2.1:6827")));
    }

    /// `[::]` bound here takes IPv4 too: nobody can bind the same port on `0.0.0.0`
    /// beside it, and an IPv4 client reaches it.
    #[test]
    fn the_any_address_of_ipv6_takes_both_families() {
        let l = bind("[::]:0".parse().unwrap()).unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(
            std::net::TcpListener::bind(("0.0.0.0", port)).is_err(),
            "the IPv4 port was left free"
        );
        let c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (s, _) = l.accept().unwrap();
        assert_eq!(
            s.local_addr().unwrap().ip(),
            "::ffff:127.0.0.1".parse::<std::net::IpAddr>().unwrap()
        );
        drop(c);
    }
}
