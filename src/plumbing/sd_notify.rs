//! systemd's readiness protocol: one datagram to `$NOTIFY_SOCKET`; nothing when unset.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. `"READY=1"`) to systemd. Errors are reported, never fatal: a
/// daemon run by hand has no one to notify.
pub fn notify(state: &str) -> std::io::Result<()> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let sock = UnixDatagram::unbound()?;
    let bytes = path.as_encoded_bytes();
    if let Some(abstract_name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), std::path::Path::new(&path))?;
    }
    Ok(())
}
