//! The authority's TLS: its private CA (made by `flotilla serve init` with rcgen) and
//! the server certificate the CA signs; the client side that pins the CA is
//! `flotilla_api::tls` (re-exported here).
//!
//! Trust bootstrap follows kubeadm's discovery (`--discovery-token-ca-cert-hash
//! sha256:…`): the join command carries the SHA-256 of the CA certificate (of its
//! DER encoding, written `sha256:<64 hex>`); the joining agent fetches the CA over a
//! connection it does not yet trust, checks the hash, and from then on trusts that CA
//! alone (no system roots). A user's own certificate (`--tls-cert/--tls-key`) is
//! served as given; its chain's last certificate is then the pin.
//!
//! Files in the authority directory (all PEM; keys owner-only, mode 0600):
//! `ca.pem`, `ca.key`, `server.pem` (server certificate then CA), `server.key`.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
    SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;

pub use flotilla_api::tls::{ca_hash, certificates, client_config, native_roots_config, provider};
use std::path::{Path, PathBuf};

/// CA certificate file name in the authority directory.
pub const CA_CERT: &str = "ca.pem";
/// CA private key file name.
pub const CA_KEY: &str = "ca.key";
/// Server certificate chain file name (leaf, then CA).
pub const SERVER_CERT: &str = "server.pem";
/// Server private key file name.
pub const SERVER_KEY: &str = "server.key";

/// TLS set-up errors.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Reading or writing a file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Certificate generation failed.
    #[error("making a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A PEM file holds no usable certificate or key.
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
    /// The client side refused (a certificate, the configuration).
    #[error(transparent)]
    Client(#[from] flotilla_api::tls::TlsError),
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn write(path: &Path, text: &str, private: bool) -> Result<(), TlsError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(&tmp)
        .map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// The CA certificate's parameters: subject `CN=Flotilla authority CA`, a CA that
/// signs only end-entity certificates (path length 0), valid until 2125.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "Flotilla authority CA");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_after = rcgen::date_time_ymd(2125, 1, 1);
    params
}

/// What `flotilla serve init` made (or found).
#[derive(Debug, Clone)]
pub struct CaInfo {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// Its pin, `sha256:<hex>`.
    pub ca_hash: String,
    /// Whether it was made now (`false`: it existed and was kept).
    pub created: bool,
    /// The names and addresses the server certificate is valid for.
    pub names: Vec<String>,
}

/// Makes the authority's CA and a server certificate for `names` (DNS names or IP
/// addresses; `localhost`, `127.0.0.1` and `::1` are always included) in `dir`.
/// An existing CA is kept (agents pin it); the server certificate is made anew only
/// when `names` asks for more than the existing one has (`reissue`), signed by the
/// same CA.
///
/// # Errors
/// [`TlsError`] on file or generation errors.
pub fn init(dir: &Path, names: &[String]) -> Result<CaInfo, TlsError> {
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut all: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    for n in names {
        if !all.contains(n) {
            all.push(n.clone());
        }
    }
    let ca_path = dir.join(CA_CERT);
    let ca_key_path = dir.join(CA_KEY);
    let names_path = dir.join("server.names");
    let (ca_key, ca_pem, created) = if ca_path.exists() && ca_key_path.exists() {
        let key = KeyPair::from_pem(&String::from_utf8_lossy(&read(&ca_key_path)?))?;
        let pem = String::from_utf8_lossy(&read(&ca_path)?).into_owned();
        (key, pem, false)
    } else {
        let key = KeyPair::generate()?;
        let cert = ca_params().self_signed(&key)?;
        write(&ca_key_path, &key.serialize_pem(), true)?;
        write(&ca_path, &cert.pem(), false)?;
        (key, cert.pem(), true)
    };
    let had: Vec<String> = std::fs::read_to_string(&names_path)
        .map(|s| s.lines().map(str::to_string).collect())
        .unwrap_or_default();
    let reissue = created
        || !dir.join(SERVER_CERT).exists()
        || !dir.join(SERVER_KEY).exists()
        || all.iter().any(|n| !had.contains(n));
    if reissue {
        // The issuer is described by the same parameters the CA was made from (its
        // subject name and key), so the new certificate chains to the kept CA.
        let issuer = rcgen::Issuer::new(ca_params(), &ca_key);
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "Flotilla authority");
        params.distinguished_name = dn;
        params.subject_alt_names = all
            .iter()
            .map(|n| match n.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => Ok(SanType::DnsName(n.clone().try_into()?)),
            })
            .collect::<Result<_, rcgen::Error>>()?;
        params.not_after = rcgen::date_time_ymd(2125, 1, 1);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &issuer)?;
        write(&dir.join(SERVER_KEY), &key.serialize_pem(), true)?;
        write(
            &dir.join(SERVER_CERT),
            &format!("{}{}", cert.pem(), ca_pem),
            false,
        )?;
        write(&names_path, &(all.join("\n") + "\n"), false)?;
    }
    Ok(CaInfo {
        ca_hash: ca_hash(&ca_pem)?,
        ca_pem,
        created,
        names: all,
    })
}

/// A rustls server configuration from a PEM chain and key file.
///
/// # Errors
/// [`TlsError`] when the files are unreadable or hold no certificate / key.
pub fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, TlsError> {
    let chain = certificates(&read(cert)?, cert)?;
    let key_der = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| TlsError::Pem {
        path: key.to_path_buf(),
        what: format!("no private key in it: {e}"),
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)?;
    // HTTP/2 first: a browser keeps at most six HTTP/1.1 connections to one origin,
    // and every dashboard page holds one open for its event stream, so the seventh
    // tab (or a page after a few others) would wait for a free connection. Over
    // HTTP/2 the streams share one connection. Clients that offer only HTTP/1.1
    // (agents, the CLI, scripts) get it.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The pin of a served chain: the hash of its last certificate (the CA for a chain
/// `serve init` made).
///
/// # Errors
/// [`TlsError`] when the file is unreadable or holds no certificate.
pub fn chain_pin(cert: &Path) -> Result<(String, String), TlsError> {
    let chain = certificates(&read(cert)?, cert)?;
    let last = chain.last().expect("non-empty");
    let pem = pem_of(last.as_ref());
    Ok((flotilla_model::digest::sha256_hex(last.as_ref()), pem))
}

/// PEM text (RFC 7468) of one DER certificate.
pub fn pem_of(der: &[u8]) -> String {
    pem::encode(&pem::Pem::new("CERTIFICATE", der.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_keeps_the_ca_and_reissues_for_new_names() {
        let dir = tempfile::tempdir().unwrap();
        let a = init(dir.path(), &[]).unwrap();
        assert!(a.created);
        let b = init(dir.path(), &["10.213.77.1".into()]).unwrap();
        assert!(!b.created);
        assert_eq!(a.ca_hash, b.ca_hash, "the pin survives a reissue");
        assert!(b.names.contains(&"10.213.77.1".to_string()));
        let (pin, pem) = chain_pin(&dir.path().join(SERVER_CERT)).unwrap();
        assert_eq!(pin, a.ca_hash);
        assert_eq!(ca_hash(&pem).unwrap(), a.ca_hash, "pem_of round-trips");
        server_config(&dir.path().join(SERVER_CERT), &dir.path().join(SERVER_KEY)).unwrap();
        client_config(&a.ca_pem).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(dir.path().join(CA_KEY))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
