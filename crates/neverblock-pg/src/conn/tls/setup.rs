//! The rustls client settings `sslmode` asks for: which roots, how much of the server's
//! certificate is checked, and the client certificate.
//!
//! `verify-full` is rustls' own webpki check. The modes below it use [`PartialVerifier`], which
//! checks the chain against the roots (`verify-ca`, and every other mode when libpq's root file
//! exists) or nothing (`allow`, `prefer`, `require` without one) — but always the handshake's
//! signature, so the session is at least with the holder of the certificate's key.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::config::{SslMode, SYSTEM_ROOTS};
use crate::{Config, Error};

/// A connection's rustls settings, and where its roots came from (for error messages).
pub(super) struct Settings {
    pub(super) client: Arc<ClientConfig>,
    /// `None` when the certificate is not checked.
    pub(super) roots: Option<String>,
}

/// Builds the settings `config` asks for, reading its certificate and key files.
///
/// # Errors
///
/// [`Error::Config`] naming the setting and the file that is missing (where libpq requires it),
/// unreadable, holds nothing usable, is open to others (a key), or is not the certificate's key.
pub(super) fn settings(config: &Config) -> Result<Settings, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Error::Tls(format!("TLS versions: {e}")))?;
    let (builder, roots) = match roots(config)? {
        Some((store, from)) if config.get_ssl_mode() == SslMode::VerifyFull => {
            let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                .build()
                .map_err(|e| Error::Config(format!("the roots in {from}: {e}")))?;
            (versions.with_webpki_verifier(verifier), Some(from))
        }
        found => {
            let (roots, from) = found.map(|(store, from)| (Arc::new(store), from)).unzip();
            let verifier = PartialVerifier { provider: provider.clone(), roots };
            (versions.dangerous().with_custom_certificate_verifier(Arc::new(verifier)), from)
        }
    };
    let client = match client_certificate(config)? {
        None => builder.with_no_client_auth(),
        Some(ClientCertificate { cert, key, chain, private_key }) => {
            builder.with_client_auth_cert(chain, private_key).map_err(|e| match e {
                rustls::Error::InconsistentKeys(_) => Error::Config(format!(
                    "the key in sslkey {} is not the key of the certificate in sslcert {}",
                    key.display(),
                    cert.display()
                )),
                other => Error::Config(format!("sslcert {} with sslkey {}: {other}", cert.display(), key.display())),
            })?
        }
    };
    Ok(Settings { client: Arc::new(client), roots })
}

/// The roots to check the server's chain against, and where they came from, as libpq finds
/// them: `sslrootcert` (a file, or `system`), else `~/.postgresql/root.crt`. Whenever that file
/// exists the chain is checked, whatever the mode (so `require` acts as `verify-ca`); when it
/// does not, `verify-ca` and `verify-full` fail and the modes below them check nothing.
fn roots(config: &Config) -> Result<Option<(RootCertStore, String)>, Error> {
    let mode = config.get_ssl_mode();
    let path = match config.get_ssl_root_cert() {
        Some(path) if path == Path::new(SYSTEM_ROOTS) => {
            let store = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
            return Ok(Some((store, "the system's roots (sslrootcert=system)".into())));
        }
        Some(path) => Some(path.to_owned()),
        None => home_file("root.crt"),
    };
    let checked = matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull);
    let path = match path {
        Some(path) if exists(&path, "sslrootcert")? => path,
        Some(path) if checked => {
            let given = if config.get_ssl_root_cert().is_some() { "sslrootcert" } else { "libpq's default root file" };
            return Err(Error::Config(format!(
                "sslmode={mode} checks the server's certificate, but {given} {} does not exist: set sslrootcert \
                 to a PEM file of the certificate authorities (or sslrootcert=system for the system's roots), \
                 or choose an sslmode that does not check",
                path.display()
            )));
        }
        None if checked => {
            return Err(Error::Config(format!(
                "sslmode={mode} checks the server's certificate, but sslrootcert is not set and $HOME is not set \
                 to find ~/.postgresql/root.crt: set sslrootcert, or choose an sslmode that does not check"
            )))
        }
        Some(path) => {
            if config.get_ssl_root_cert().is_some() {
                log::warn!(
                    "sslrootcert {} does not exist, so sslmode={mode} does not check the server's certificate (as libpq)",
                    path.display()
                );
            }
            return Ok(None);
        }
        None => return Ok(None),
    };
    let mut store = RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(certificates("sslrootcert", &path)?);
    if added == 0 {
        return Err(Error::Config(format!("sslrootcert {} holds no usable CA certificate", path.display())));
    }
    Ok(Some((store, format!("sslrootcert {}", path.display()))))
}

/// A client certificate to send, its private key, and the files they came from.
struct ClientCertificate {
    cert: PathBuf,
    key: PathBuf,
    chain: Vec<CertificateDer<'static>>,
    private_key: PrivateKeyDer<'static>,
}

/// The client certificate as libpq finds it: `sslcert`, else `~/.postgresql/postgresql.crt`;
/// none when that file does not exist (then `sslkey` is not read). Its key is `sslkey`, else
/// `~/.postgresql/postgresql.key`, and must exist and be closed to others (libpq's rule: no
/// access for group or others, or group read alone when root owns the file).
fn client_certificate(config: &Config) -> Result<Option<ClientCertificate>, Error> {
    let Some(cert) = config.get_ssl_cert().map(Path::to_owned).or_else(|| home_file("postgresql.crt")) else {
        return Ok(None);
    };
    if !exists(&cert, "sslcert")? {
        if config.get_ssl_cert().is_some() {
            log::warn!("sslcert {} does not exist, so no client certificate is sent (as libpq)", cert.display());
        }
        return Ok(None);
    }
    let chain = certificates("sslcert", &cert)?;
    let key = config.get_ssl_key().map(Path::to_owned).or_else(|| home_file("postgresql.key")).ok_or_else(|| {
        Error::Config(format!(
            "sslcert {} needs its private key: set sslkey ($HOME is not set to find ~/.postgresql/postgresql.key)",
            cert.display()
        ))
    })?;
    if !exists(&key, "sslkey")? {
        return Err(Error::Config(format!(
            "sslcert {} needs its private key, and sslkey {} does not exist",
            cert.display(),
            key.display()
        )));
    }
    check_key_access(&key)?;
    let private_key = private_key(&key)?;
    Ok(Some(ClientCertificate { cert, key, chain, private_key }))
}

/// `~/.postgresql/NAME`, libpq's default place for TLS files; `None` without `$HOME`.
fn home_file(name: &str) -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| Path::new(&home).join(".postgresql").join(name))
}

/// Whether the file of setting `key` exists: `false` when it or a directory on its path is
/// missing, as libpq's `stat` check; another failure (no permission) is an error.
fn exists(path: &Path, key: &str) -> Result<bool, Error> {
    match std::fs::metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => Ok(false),
        Err(e) => Err(Error::Config(format!("{key} {}: {e}", path.display()))),
    }
}

/// libpq's rule for a private key file: a regular file with no access for group or others, or
/// group read alone when root owns it.
fn check_key_access(path: &Path) -> Result<(), Error> {
    let meta = std::fs::metadata(path).map_err(|e| Error::Config(format!("sslkey {}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(Error::Config(format!("sslkey {} is not a regular file", path.display())));
    }
    let others = if meta.uid() == 0 { 0o037 } else { 0o077 };
    if meta.mode() & others != 0 {
        return Err(Error::Config(format!(
            "sslkey {} has group or world access (mode {:03o}): a private key file must be u=rw (0600) or less, \
             or u=rw,g=r (0640) or less when root owns it, as libpq requires",
            path.display(),
            meta.mode() & 0o777
        )));
    }
    Ok(())
}

/// Every certificate in the PEM file at `path`, given as the setting `key`.
fn certificates(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let unreadable = |e: rustls::pki_types::pem::Error| Error::Config(format!("{key} {}: {e}", path.display()));
    let certs =
        CertificateDer::pem_file_iter(path).map_err(unreadable)?.collect::<Result<Vec<_>, _>>().map_err(unreadable)?;
    if certs.is_empty() {
        return Err(Error::Config(format!("{key} {} holds no PEM certificate", path.display())));
    }
    Ok(certs)
}

/// The private key in the PEM file at `path` (`sslkey`).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => Error::Config(format!(
            "sslkey {} holds no private key (PEM: PKCS#8, PKCS#1 or SEC1; encrypted keys are not supported)",
            path.display()
        )),
        other => Error::Config(format!("sslkey {}: {other}", path.display())),
    })
}

/// The checks below `verify-full`: the chain against `roots` (`verify-ca`), or nothing at all
/// (`roots` is `None`). The handshake's signatures are always checked against the certificate's key.
#[derive(Debug)]
struct PartialVerifier {
    provider: Arc<CryptoProvider>,
    roots: Option<Arc<RootCertStore>>,
}

impl ServerCertVerifier for PartialVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            let algorithms = self.provider.signature_verification_algorithms.all;
            rustls::client::verify_server_cert_signed_by_trust_anchor(&cert, roots, intermediates, now, algorithms)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}
