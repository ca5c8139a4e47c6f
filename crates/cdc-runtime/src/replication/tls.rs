//! TLS for the replication connection: rustls with the `ring` provider, and
//! certificate checks that follow libpq's `sslmode` semantics.
//!
//! | sslmode | chain checked | host name checked |
//! |---|---|---|
//! | `prefer`, `require` | no | no |
//! | `prefer`, `require` with `sslrootcert` (or `~/.postgresql/root.crt`) | yes | no |
//! | `verify-ca` | yes | no |
//! | `verify-full` | yes | yes |
//!
//! Handshake signatures are always verified, so even without certificate
//! checks the peer must hold the key of the certificate it presents.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::config::{ReplicationConfig, RootCertSource, SslMode};
use super::error::TlsError;

/// How the server certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verification {
    /// Encrypt only.
    None,
    /// Chain to a trusted root, any name.
    Chain,
    /// Chain and host name.
    Full,
}

/// The checks `sslmode` (and whether `sslrootcert` is set) asks for, or `None`
/// when TLS is not attempted.
pub(crate) fn verification_for(mode: SslMode, has_root: bool) -> Option<Verification> {
    match mode {
        SslMode::Disable => None,
        // libpq verifies the chain whenever a root file is present, even for prefer/require.
        SslMode::Prefer | SslMode::Require if has_root => Some(Verification::Chain),
        SslMode::Prefer | SslMode::Require => Some(Verification::None),
        SslMode::VerifyCa => Some(Verification::Chain),
        SslMode::VerifyFull => Some(Verification::Full),
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The libpq default root file, `~/.postgresql/root.crt`, when it exists.
fn default_root_file() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let path = Path::new(&home).join(".postgresql").join("root.crt");
    path.is_file().then_some(path)
}

fn load_roots(source: &RootCertSource) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    match source {
        RootCertSource::File(path) => {
            use rustls::pki_types::pem::PemObject;
            let shown = path.display().to_string();
            let pem = std::fs::read(path).map_err(|source| TlsError::ReadRootCert {
                path: shown.clone(),
                source,
            })?;
            let mut count = 0usize;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| TlsError::InvalidRootCert {
                    path: shown.clone(),
                    reason: e.to_string(),
                })?;
                roots.add(cert).map_err(|e| TlsError::InvalidRootCert {
                    path: shown.clone(),
                    reason: e.to_string(),
                })?;
                count += 1;
            }
            if count == 0 {
                return Err(TlsError::InvalidRootCert {
                    path: shown,
                    reason: "no CERTIFICATE block found".into(),
                });
            }
        }
        RootCertSource::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(TlsError::InvalidRootCert {
                    path: "system".into(),
                    reason: "the operating system's trust store has no usable certificate".into(),
                });
            }
        }
    }
    Ok(roots)
}

/// Builds the rustls client configuration for `config`, or `None` when TLS is disabled.
pub(crate) fn client_config(
    config: &ReplicationConfig,
) -> Result<Option<Arc<ClientConfig>>, TlsError> {
    let mode = config.get_sslmode();
    let root_source = config
        .get_sslrootcert()
        .cloned()
        .or_else(|| default_root_file().map(RootCertSource::File));
    // An explicit or default root file turns on chain checks for prefer/require too (libpq).
    let Some(verification) = verification_for(mode, root_source.is_some()) else {
        return Ok(None);
    };
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::handshake(config.get_host(), e))?;
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ServerCertVerifier> = match verification {
        Verification::None => Arc::new(NoCertificateCheck { algorithms }),
        Verification::Chain | Verification::Full => {
            let source = root_source.ok_or(TlsError::NoRootCertificate {
                sslmode: mode.as_str(),
            })?;
            let roots = Arc::new(load_roots(&source)?);
            if verification == Verification::Chain {
                Arc::new(ChainOnlyCheck { roots, algorithms })
            } else {
                WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| TlsError::InvalidRootCert {
                        path: match &source {
                            RootCertSource::File(p) => p.display().to_string(),
                            RootCertSource::System => "system".into(),
                        },
                        reason: e.to_string(),
                    })?
            }
        }
    };
    let tls = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(Arc::new(tls)))
}

/// A certificate verifier for `verification` with `roots` (needed for
/// [`Verification::Chain`] and [`Verification::Full`]), on the `ring`
/// provider: for TLS clients other than the replication connection (the
/// NATS sink), which load their roots themselves.
pub(crate) fn verifier(
    verification: Verification,
    roots: Option<RootCertStore>,
) -> Result<Arc<dyn ServerCertVerifier>, String> {
    let provider = provider();
    let algorithms = provider.signature_verification_algorithms;
    Ok(match (verification, roots) {
        (Verification::None, _) => Arc::new(NoCertificateCheck { algorithms }),
        (Verification::Chain, Some(roots)) => Arc::new(ChainOnlyCheck {
            roots: Arc::new(roots),
            algorithms,
        }),
        (Verification::Full, Some(roots)) => {
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| e.to_string())?
        }
        (_, None) => return Err("certificate checks need trusted root certificates".into()),
    })
}

/// The `ring` crypto provider every TLS client of pgcdc uses.
pub(crate) fn ring_provider() -> Arc<CryptoProvider> {
    provider()
}

/// The TLS server name for `host`: an IP address or a DNS name.
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(host.to_owned()).map_err(|_| TlsError::InvalidServerName(host.into()))
}

/// `sslmode=prefer`/`require`: accept any certificate, but still check the
/// handshake signatures.
struct NoCertificateCheck {
    algorithms: WebPkiSupportedAlgorithms,
}

/// `sslmode=verify-ca`: the chain must lead to a trusted root; the name is not checked.
struct ChainOnlyCheck {
    roots: Arc<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl fmt::Debug for NoCertificateCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NoCertificateCheck")
    }
}

impl fmt::Debug for ChainOnlyCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChainOnlyCheck")
            .field("roots", &self.roots.len())
            .finish()
    }
}

impl ServerCertVerifier for NoCertificateCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl ServerCertVerifier for ChainOnlyCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_to_checks() {
        assert_eq!(verification_for(SslMode::Disable, true), None);
        assert_eq!(
            verification_for(SslMode::Prefer, false),
            Some(Verification::None)
        );
        assert_eq!(
            verification_for(SslMode::Prefer, true),
            Some(Verification::Chain)
        );
        assert_eq!(
            verification_for(SslMode::Require, false),
            Some(Verification::None)
        );
        assert_eq!(
            verification_for(SslMode::Require, true),
            Some(Verification::Chain)
        );
        assert_eq!(
            verification_for(SslMode::VerifyCa, false),
            Some(Verification::Chain)
        );
        assert_eq!(
            verification_for(SslMode::VerifyFull, true),
            Some(Verification::Full)
        );
    }

    #[test]
    fn verify_without_roots_is_a_clear_error() {
        // HOME points nowhere so ~/.postgresql/root.crt cannot be picked up.
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let c = ReplicationConfig::new("u")
            .sslmode(SslMode::VerifyFull)
            .sslrootcert(RootCertSource::File(missing));
        let e = client_config(&c).unwrap_err();
        assert!(matches!(e, TlsError::ReadRootCert { .. }), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a pem").unwrap();
        let c = c.sslrootcert(RootCertSource::File(empty));
        let e = client_config(&c).unwrap_err();
        assert!(matches!(e, TlsError::InvalidRootCert { .. }), "{e}");
    }

    #[test]
    fn server_names() {
        assert!(matches!(
            server_name("127.0.0.1").unwrap(),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("::1").unwrap(),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("db.example").unwrap(),
            ServerName::DnsName(_)
        ));
        assert!(server_name("bad name!").is_err());
    }
}
