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

/// The listener's TLS configuration: `cert` (the chain, PEM) and `key` (PEM).
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certs(cert)?;
    let read = |source| TlsError::Read {
        path: key.display().to_string(),
        source,
    };
    let mut r = std::io::BufReader::new(std::fs::File::open(key).map_err(read)?);
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
