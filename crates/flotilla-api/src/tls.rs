//! The client side of the authority's TLS: trust in the authority's private CA alone
//! (pinned by hash), the one unverified discovery request that fetches it, and trust in
//! this host's roots for servers outside the fleet.
//!
//! Trust bootstrap follows kubeadm's discovery (`--discovery-token-ca-cert-hash
//! sha256:…`): the join command carries the SHA-256 of the CA certificate (of its DER
//! encoding, written `sha256:<64 hex>`); the joining agent fetches the CA over a
//! connection it does not yet trust, checks the hash, and from then on trusts that CA
//! alone (no system roots).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Client TLS set-up errors.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM text holds no usable certificate.
    #[error("{path}: {what}")]
    Pem {
        /// The file (or `-` for text given inline).
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The crypto provider every TLS configuration here uses: *ring*.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `sha256:<hex>` of the first certificate in `pem` (DER), the pin agents join with.
///
/// # Errors
/// [`TlsError::Pem`] when `pem` holds no certificate.
pub fn ca_hash(pem: &str) -> Result<String, TlsError> {
    let der = certificates(pem.as_bytes(), Path::new("-"))?
        .into_iter()
        .next()
        .expect("certificates() returns at least one");
    Ok(flotilla_model::digest::sha256_hex(der.as_ref()))
}

/// The certificates of PEM text `pem` (read from `path`, for messages), at least one.
///
/// # Errors
/// [`TlsError::Pem`]: not PEM, or no certificate in it.
pub fn certificates(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            what: format!("not a PEM certificate: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            what: "no certificate in it".into(),
        });
    }
    Ok(certs)
}

/// A client configuration that trusts `ca_pem` alone.
///
/// # Errors
/// [`TlsError`] when `ca_pem` holds no usable certificate.
pub fn client_config(ca_pem: &str) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certificates(ca_pem.as_bytes(), Path::new("-"))? {
        roots.add(c)?;
    }
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A client configuration that trusts this host's root certificates (the system's
/// store, `rustls-native-certs`): for servers outside the fleet (a model API, an
/// artifact's URL). Certificates the store holds but rustls cannot parse are
/// skipped.
///
/// # Errors
/// [`TlsError`] when no protocol version can be had.
pub fn native_roots_config() -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(c);
    }
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Accepts any server certificate, remembering the chain it was shown: used once,
/// to fetch the CA whose hash the caller then checks against its pin.
#[derive(Debug)]
pub(crate) struct Unverified(pub(crate) Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client configuration for the one discovery request.
pub(crate) fn discovery_config() -> Result<rustls::ClientConfig, TlsError> {
    let p = provider();
    Ok(rustls::ClientConfig::builder_with_provider(p.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Unverified(p)))
        .with_no_client_auth())
}
