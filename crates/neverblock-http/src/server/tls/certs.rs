//! Certificates and their keys: read from PEM files and checked (the key matches, the certificate
//! names some host, its dates), chosen for each handshake by the name the client asks for (SNI),
//! and read again on demand without touching the connections that already have one.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use x509_cert::der::Decode;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::SubjectAltName;

use crate::error::{Error, ErrorKind};

/// A certificate chain and its key, as read from their files.
#[derive(Clone)]
pub(super) struct CertPair {
    pub(super) cert_path: PathBuf,
    pub(super) key_path: PathBuf,
    key: Arc<CertifiedKey>,
    names: Vec<HostName>,
}

/// A name a certificate is for, from its subject alternative names.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostName {
    /// A host name, lowercase, without a trailing dot.
    Exact(String),
    /// `*.rest`: any one label before `rest` (lowercase).
    Wildcard(String),
    /// An IP address.
    Ip(IpAddr),
}

impl CertPair {
    /// Reads the certificate chain at `cert_path` and the key at `key_path`, with `provider`'s
    /// key loader; warns when the certificate has expired or is not valid yet.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Tls`] naming the file: it cannot be read, holds no certificate or no key,
    /// the key is not one the provider takes or does not match the certificate, or the
    /// certificate names no host (no DNS name or IP address among its subject alternative names).
    pub(super) fn load(cert_path: &Path, key_path: &Path, provider: &CryptoProvider) -> Result<CertPair, Error> {
        let tls_error = |message: String| Error::new(ErrorKind::Tls, message);
        let chain = CertificateDer::pem_file_iter(cert_path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| tls_error(format!("{}: cannot read a certificate chain: {e}", cert_path.display())))?;
        let Some(leaf) = chain.first().cloned() else {
            return Err(tls_error(format!("{}: no certificate in the file", cert_path.display())));
        };
        let key = PrivateKeyDer::from_pem_file(key_path)
            .map_err(|e| tls_error(format!("{}: cannot read a private key: {e}", key_path.display())))?;
        let key = CertifiedKey::from_der(chain, key, provider)
            .map_err(|e| tls_error(format!("{} does not go with {}: {e}", key_path.display(), cert_path.display())))?;
        let parsed = x509_cert::Certificate::from_der(&leaf)
            .map_err(|e| tls_error(format!("{}: the certificate cannot be parsed: {e}", cert_path.display())))?;
        let names = names_of(&parsed);
        if names.is_empty() {
            return Err(tls_error(format!(
                "{}: the certificate names no host (no DNS name or IP address among its subject alternative \
                 names), so no client could accept it",
                cert_path.display()
            )));
        }
        warn_if_out_of_date(cert_path, &parsed);
        Ok(CertPair { cert_path: cert_path.to_owned(), key_path: key_path.to_owned(), key: Arc::new(key), names })
    }

    /// Whether this certificate is for `host` (lowercase, no trailing dot), as browsers match:
    /// a wildcard stands for exactly one whole label, the leftmost.
    fn is_for(&self, host: &str) -> bool {
        let ip = host.parse::<IpAddr>().ok();
        self.names.iter().any(|name| match name {
            HostName::Exact(exact) => exact == host,
            HostName::Wildcard(rest) => {
                host.split_once('.').is_some_and(|(label, after)| !label.is_empty() && after == rest)
            }
            HostName::Ip(addr) => ip == Some(*addr),
        })
    }
}

/// The host names and addresses `cert` is for: its subject alternative names (browsers ignore
/// the common name).
fn names_of(cert: &x509_cert::Certificate) -> Vec<HostName> {
    let Ok(Some((_, alt))) = cert.tbs_certificate.get::<SubjectAltName>() else { return Vec::new() };
    alt.0
        .iter()
        .filter_map(|name| match name {
            GeneralName::DnsName(dns) => host_name(dns.as_str()),
            GeneralName::IpAddress(octets) => match octets.as_bytes() {
                &[a, b, c, d] => Some(HostName::Ip(IpAddr::from([a, b, c, d]))),
                bytes => <[u8; 16]>::try_from(bytes).ok().map(|v6| HostName::Ip(IpAddr::from(v6))),
            },
            _ => None,
        })
        .collect()
}

/// What a DNS name of a certificate stands for: a wildcard only as the whole leftmost label.
fn host_name(dns: &str) -> Option<HostName> {
    let dns = dns.trim_end_matches('.').to_ascii_lowercase();
    if let Some(rest) = dns.strip_prefix("*.") {
        return (!rest.is_empty() && !rest.contains('*')).then(|| HostName::Wildcard(rest.to_owned()));
    }
    (!dns.is_empty() && !dns.contains('*')).then_some(HostName::Exact(dns))
}

/// Logs a warning, with the date, for a certificate that has expired or is not valid yet.
fn warn_if_out_of_date(path: &Path, cert: &x509_cert::Certificate) {
    let validity = &cert.tbs_certificate.validity;
    let now = SystemTime::now();
    let (not_before, not_after) = (validity.not_before.to_system_time(), validity.not_after.to_system_time());
    if now > not_after {
        let date = httpdate::fmt_http_date(not_after);
        log::warn!("{}: the certificate expired on {date}; clients will refuse it", path.display());
    } else if now < not_before {
        let date = httpdate::fmt_http_date(not_before);
        log::warn!("{}: the certificate is not valid before {date}; clients will refuse it", path.display());
    }
}

/// The certificates a server offers, the first being the one for clients that name no host or one
/// none is for. Read again by [`reload`](CertStore::reload); each handshake takes the set current
/// when it starts.
pub(super) struct CertStore {
    pairs: RwLock<Arc<[CertPair]>>,
    provider: Arc<CryptoProvider>,
}

impl CertStore {
    pub(super) fn new(pairs: Vec<CertPair>, provider: Arc<CryptoProvider>) -> CertStore {
        CertStore { pairs: RwLock::new(pairs.into()), provider }
    }

    fn current(&self) -> Arc<[CertPair]> {
        self.pairs.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads every certificate and key again. A pair that fails keeps its old certificate and key;
    /// its error is logged and returned, naming the file.
    pub(super) fn reload(&self) -> Vec<Error> {
        let mut failures = Vec::new();
        let pairs: Vec<CertPair> = self
            .current()
            .iter()
            .map(|old| match CertPair::load(&old.cert_path, &old.key_path, &self.provider) {
                Ok(new) => new,
                Err(e) => {
                    log::error!("reloading {}: {e}; the old certificate stays", old.cert_path.display());
                    failures.push(e);
                    old.clone()
                }
            })
            .collect();
        *self.pairs.write().unwrap_or_else(|p| p.into_inner()) = pairs.into();
        failures
    }

    /// The pair for `server_name` (as the client sent it), else the first.
    fn choose(&self, server_name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let pairs = self.current();
        let host = server_name.map(|name| name.trim_end_matches('.').to_ascii_lowercase());
        let chosen = host.and_then(|host| pairs.iter().find(|pair| pair.is_for(&host))).or(pairs.first());
        chosen.map(|pair| pair.key.clone())
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.choose(client_hello.server_name())
    }
}

impl fmt::Debug for CertStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files: Vec<_> = self.current().iter().map(|pair| pair.cert_path.clone()).collect();
        f.debug_struct("CertStore").field("certificates", &files).finish()
    }
}

impl fmt::Debug for CertPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertPair").field("cert", &self.cert_path).field("names", &self.names).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair_for(names: &[&str]) -> CertPair {
        let names = names
            .iter()
            .map(|name| name.parse().map_or_else(|_| host_name(name).expect("a host name"), HostName::Ip))
            .collect();
        let params = rcgen::CertificateParams::new(vec!["unused.test".to_owned()]).unwrap();
        let key_pair = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key_pair).unwrap();
        let der = PrivateKeyDer::try_from(key_pair.serialize_der()).unwrap();
        let provider = rustls::crypto::ring::default_provider();
        let key = CertifiedKey::from_der(vec![cert.der().clone()], der, &provider).unwrap();
        CertPair { cert_path: PathBuf::new(), key_path: PathBuf::new(), key: Arc::new(key), names }
    }

    #[test]
    fn a_wildcard_stands_for_one_whole_leftmost_label_as_browsers_read_it() {
        let pair = pair_for(&["*.example.com", "example.org", "192.0.2.7"]);
        for host in ["a.example.com", "www.example.com", "example.org", "192.0.2.7"] {
            assert!(pair.is_for(host), "{host}");
        }
        for host in ["example.com", "a.b.example.com", ".example.com", "example.org.evil", "192.0.2.8", "xexample.com"]
        {
            assert!(!pair.is_for(host), "{host}");
        }
    }

    #[test]
    fn sni_picks_the_pair_naming_the_host_and_the_first_answers_the_rest() {
        let store = CertStore::new(
            vec![pair_for(&["first.test"]), pair_for(&["*.second.test"])],
            Arc::new(rustls::crypto::ring::default_provider()),
        );
        let first = store.current()[0].key.clone();
        let second = store.current()[1].key.clone();
        let chosen = |name: Option<&str>| store.choose(name).unwrap();
        assert!(Arc::ptr_eq(&chosen(Some("www.second.test")), &second));
        assert!(Arc::ptr_eq(&chosen(Some("WWW.Second.Test.")), &second), "any case, a trailing dot");
        assert!(Arc::ptr_eq(&chosen(Some("first.test")), &first));
        assert!(Arc::ptr_eq(&chosen(Some("unknown.test")), &first), "an unknown name gets the first");
        assert!(Arc::ptr_eq(&chosen(None), &first), "no name gets the first");
    }
}
