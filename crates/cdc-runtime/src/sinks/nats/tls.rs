//! TLS to NATS: rustls on the `ring` provider, with the certificate checks
//! of libpq's `sslmode` (see [`NatsTlsMode`]).

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use super::options::{NatsTls, NatsTlsMode};
use crate::replication::tls::{ring_provider, verifier, Verification};

/// The rustls configuration for `tls`, or `None` for `disable`.
pub(super) fn client_config(tls: &NatsTls) -> Result<Option<ClientConfig>, String> {
    let verification = match tls.mode {
        NatsTlsMode::Disable => return Ok(None),
        NatsTlsMode::Require => Verification::None,
        NatsTlsMode::VerifyCa => Verification::Chain,
        NatsTlsMode::VerifyFull => Verification::Full,
    };
    let roots = match &tls.ca_file {
        Some(path) => Some(load_roots(path)?),
        None if verification == Verification::None => None,
        None => {
            return Err(format!(
                "tls = \"{}\" needs tls_ca_file (the CA that signed the server's certificate), or tls = \"require\" to encrypt without checking it",
                tls.mode.as_str()
            ))
        }
    };
    let verifier = verifier(verification, roots).map_err(|e| format!("tls_ca_file: {e}"))?;
    let builder = ClientConfig::builder_with_provider(ring_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    Ok(Some(match &tls.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let certs = read_certs(cert, "tls_cert_file")?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("tls_key_file {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("tls_cert_file and tls_key_file: {e}"))?
        }
    }))
}

fn read_certs(path: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{setting} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{setting} {}: no CERTIFICATE block found",
            path.display()
        ));
    }
    Ok(certs)
}

fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path, "tls_ca_file")? {
        roots
            .add(cert)
            .map_err(|e| format!("tls_ca_file {}: {e}", path.display()))?;
    }
    Ok(roots)
}
