//! TLS for network clients, with rustls (ring; no OpenSSL): the listener's configuration
//! from the site's certificate and key, the client's from the site's CA. MUNGE still
//! authenticates every request; TLS only keeps the wire private (docs/security.md).

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no {what} in PEM form")]
    Empty { path: String, what: &'static str },
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("{path} may be read by others than its owner (mode {mode:04o}): a private key must not be; `chmod 600 {path}`")]
    KeyReadable { path: String, mode: u32 },
    #[error("{path} belongs to uid {owner}, not to this daemon's uid {me}: `chown` it to the daemon's user and `chmod 600 {path}`")]
    KeyOwner { path: String, owner: u32, me: u32 },
}

/// Whether the private key at `path` (opened as `file`) is the daemon's alone: owned by
/// its uid, and no permission for group or others. A key others could read would let
/// them read every client's requests, or answer as the daemon over TLS.
fn key_is_private(path: &Path, file: &std::fs::File) -> Result<(), TlsError> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(TlsError::KeyOwner {
            path: path.display().to_string(),
            owner: meta.uid(),
            me,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(TlsError::KeyReadable {
            path: path.display().to_string(),
            mode,
        });
    }
    Ok(())
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read = |source| TlsError::Read {
        path: path.display().to_string(),
        source,
    };
    let mut r = std::io::BufReader::new(std::fs::File::open(path).map_err(read)?);
    let certs = rustls_pemfile::certs(&mut r)
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            path: path.display().to_string(),
            what: "certificate",
        });
    }
    Ok(certs)
}

/// The listener's TLS configuration: `cert` (the chain, PEM) and `key` (PEM, the
/// daemon's own file: owned by its uid, mode 0600 or stricter).
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let read = |source| TlsError::Read {
        path: key.display().to_string(),
        source,
    };
    let file = std::fs::File::open(key).map_err(read)?;
    key_is_private(key, &file)?;
    let chain = certs(cert)?;
    let mut r = std::io::BufReader::new(file);
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut r)
        .map_err(read)?
        .ok_or_else(|| TlsError::Empty {
            path: key.display().to_string(),
            what: "private key",
        })?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    Ok(Arc::new(config))
}

/// The client's TLS configuration: servers are checked against the CAs in `ca` (PEM).
pub fn client_config(ca: &Path) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(ca)? {
        roots.add(c)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_key_others_may_read_is_refused_saying_chmod_600() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("server.key");
        std::fs::write(&key, "not even a key").unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620] {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = server_config(&dir.path().join("cert.pem"), &key).unwrap_err();
            let text = e.to_string();
            assert!(
                matches!(e, TlsError::KeyReadable { .. }) && text.contains("chmod 600"),
                "{mode:o}: {text}"
            );
        }
        // Private: the key passes, and the next thing wrong is the missing certificate.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = server_config(&dir.path().join("cert.pem"), &key).unwrap_err();
        assert!(
            matches!(e, TlsError::Read { ref path, .. } if path.ends_with("cert.pem")),
            "{e}"
        );
    }

    #[test]
    fn a_key_of_another_uid_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (key, owner) = if nix::unistd::geteuid().is_root() {
            let key = dir.path().join("server.key");
            std::fs::write(&key, "not even a key").unwrap();
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&key, Some(65534), None).unwrap();
            (key, 65534)
        } else {
            // Any file of root's, which this uid cannot own.
            (std::path::PathBuf::from("/etc/passwd"), 0)
        };
        let e = server_config(&dir.path().join("cert.pem"), &key).unwrap_err();
        assert!(
            matches!(e, TlsError::KeyOwner { owner: o, .. } if o == owner),
            "{e}"
        );
    }
}
