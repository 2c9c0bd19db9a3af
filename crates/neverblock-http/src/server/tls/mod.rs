//! HTTPS: TLS settings for a server's listeners, the handshake each connection on one makes first,
//! and what a handler or a log line is told of it.
//!
//! TLS is rustls' with the `ring` provider, limited to Mozilla's "intermediate" configuration:
//! TLS 1.2 and 1.3; AES-GCM and ChaCha20-Poly1305 suites with ECDHE (RSA or ECDSA) for 1.2;
//! X25519, P-256 and P-384 for key exchange. Certificates are chosen by the name the client asks
//! for (SNI, `certs.rs`) and can be read again at any time ([`TlsConfig::reload`]). Sessions
//! resume from rotating tickets (TLS 1.3 and 1.2) or a session cache (TLS 1.2). The handshake
//! (`accept.rs`) runs on the connection's fiber under a deadline, and a client that speaks plain
//! HTTP to the port is told so in plain HTTP (a 400), as nginx does.
//!
//! Kernel TLS, which would let `sendfile(2)` carry encrypted files, is not used: files are read
//! in pieces and encrypted in user space. The server logs at start whether the kernel offers it
//! ([`neverblock::net::kernel_tls_support`]); this is where it would be switched on after the
//! handshake.

mod accept;
mod certs;
mod names;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::ServerSessionMemoryCache;
use rustls::{CipherSuite, NamedGroup, ServerConfig};

use crate::error::{Error, ErrorKind};
pub(crate) use accept::{handshake, HandshakeEnd, TimedIo, TlsSession};
use certs::{CertPair, CertStore};

/// The cipher suites of Mozilla's "intermediate" configuration that rustls has (it has no DHE).
const INTERMEDIATE_SUITES: [CipherSuite; 9] = [
    CipherSuite::TLS13_AES_128_GCM_SHA256,
    CipherSuite::TLS13_AES_256_GCM_SHA384,
    CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
];
/// Its key-exchange groups.
const INTERMEDIATE_GROUPS: [NamedGroup; 3] = [NamedGroup::X25519, NamedGroup::secp256r1, NamedGroup::secp384r1];
/// The plaintext a connection's TLS session buffers at most, each way.
const BUFFER_LIMIT: usize = 64 * 1024;
/// TLS 1.2 sessions remembered for resumption by their id (TLS 1.3 resumes from tickets).
const SESSION_CACHE: usize = 10_240;

/// TLS settings for HTTPS listeners ([`ServerBuilder::bind_tls`](super::ServerBuilder::bind_tls),
/// [`Server::listen_tls`](super::Server::listen_tls)): certificates and keys from PEM files
/// (RSA, ECDSA P-256 or P-384, Ed25519), the one a client gets chosen by the name it asks for;
/// TLS 1.2 and 1.3 with Mozilla's "intermediate" suites and groups; ALPN `h2`, then `http/1.1`
/// (only `http/1.1` for a server built with [`http2(false)`](super::ServerBuilder::http2)); session
/// resumption; a handshake timeout (10 s by default). Cheap to clone; clones share the
/// certificates, so [`reload`](TlsConfig::reload) reaches every listener that uses them.
///
/// # Examples
///
/// ```no_run
/// use neverblock_http::server::{Server, StaticFiles, TlsConfig};
///
/// let tls = TlsConfig::from_pem_files("/etc/ssl/example.com.pem", "/etc/ssl/example.com.key").unwrap();
/// let server = Server::builder().bind_tls("0.0.0.0:443", &tls).unwrap();
/// server.run(StaticFiles::new("/srv/www").unwrap()).unwrap();
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    inner: Arc<Settings>,
}

struct Settings {
    certs: Arc<CertStore>,
    rustls: Arc<ServerConfig>,
    handshake_timeout: Duration,
}

impl TlsConfig {
    /// TLS with one certificate chain and its key, from PEM files, and the defaults.
    ///
    /// # Errors
    ///
    /// As [`TlsBuilder::build`].
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::TlsConfig;
    ///
    /// let missing = TlsConfig::from_pem_files("/no/such/cert.pem", "/no/such/key.pem").unwrap_err();
    /// assert!(missing.to_string().contains("/no/such/cert.pem"), "{missing}");
    /// ```
    pub fn from_pem_files(cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<TlsConfig, Error> {
        TlsConfig::builder().cert_pair(cert, key).build()
    }

    /// Settings to build, certificates first.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use neverblock_http::server::TlsConfig;
    ///
    /// let tls = TlsConfig::builder()
    ///     .cert_pair("/etc/ssl/example.com.pem", "/etc/ssl/example.com.key")
    ///     .cert_pair("/etc/ssl/example.org.pem", "/etc/ssl/example.org.key")
    ///     .handshake_timeout(Duration::from_secs(5))
    ///     .build()
    ///     .unwrap();
    /// # drop(tls);
    /// ```
    pub fn builder() -> TlsBuilder {
        TlsBuilder { pairs: Vec::new(), handshake_timeout: Duration::from_secs(10) }
    }

    /// Reads every certificate and key again, from the files they were first read from: new
    /// handshakes get the new ones at once, connections already open go on as they were. A pair
    /// that fails to load keeps its old certificate and key; its error is logged, naming the file,
    /// and returned.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use neverblock_http::server::TlsConfig;
    ///
    /// let tls = TlsConfig::from_pem_files("/etc/ssl/example.com.pem", "/etc/ssl/example.com.key").unwrap();
    /// // Later, once the files were renewed:
    /// for error in tls.reload() {
    ///     eprintln!("kept the old certificate: {error}");
    /// }
    /// ```
    pub fn reload(&self) -> Vec<Error> {
        self.inner.certs.reload()
    }

    pub(crate) fn handshake_timeout(&self) -> Duration {
        self.inner.handshake_timeout
    }

    /// The same settings (sharing the certificates) offering only `http/1.1` by ALPN: for a server
    /// that does not speak HTTP/2.
    pub(crate) fn without_h2(&self) -> TlsConfig {
        let mut rustls = ServerConfig::clone(&self.inner.rustls);
        rustls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let settings = Settings {
            certs: self.inner.certs.clone(),
            rustls: Arc::new(rustls),
            handshake_timeout: self.inner.handshake_timeout,
        };
        TlsConfig { inner: Arc::new(settings) }
    }

    pub(crate) fn rustls(&self) -> &Arc<ServerConfig> {
        &self.inner.rustls
    }
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("certs", &self.inner.certs)
            .field("handshake_timeout", &self.inner.handshake_timeout)
            .finish_non_exhaustive()
    }
}

/// Settings for a [`TlsConfig`], then [`build`](TlsBuilder::build).
#[derive(Clone, Debug)]
pub struct TlsBuilder {
    pairs: Vec<(PathBuf, PathBuf)>,
    handshake_timeout: Duration,
}

impl TlsBuilder {
    /// Adds a certificate chain (PEM, the server's certificate first) and its private key (PEM:
    /// PKCS#8, PKCS#1 or SEC1). A client is given the first pair whose certificate names the host
    /// it asks for (a wildcard `*.example.com` standing for one label, as browsers read it); a
    /// client that asks for none, or for one no certificate names, is given the first pair.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use neverblock_http::server::TlsConfig;
    ///
    /// let tls = TlsConfig::builder().cert_pair("fullchain.pem", "privkey.pem").build().unwrap();
    /// # drop(tls);
    /// ```
    pub fn cert_pair(mut self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> TlsBuilder {
        self.pairs.push((cert.as_ref().to_owned(), key.as_ref().to_owned()));
        self
    }

    /// How long a client may take over its handshake, from its connection's start (default 10 s);
    /// past it the connection closes. A slow handshake costs a timer, not a worker.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use neverblock_http::server::TlsConfig;
    ///
    /// let tls = TlsConfig::builder().cert_pair("cert.pem", "key.pem").handshake_timeout(Duration::from_secs(3)).build();
    /// # drop(tls);
    /// ```
    pub fn handshake_timeout(mut self, timeout: Duration) -> TlsBuilder {
        self.handshake_timeout = timeout;
        self
    }

    /// Reads the certificates and keys and makes the settings. Logs a warning, with its date, for a
    /// certificate that has expired or is not valid yet.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Tls`], naming the file: no pair was given; a file cannot be read or holds no
    /// certificate (or key); a key does not match its certificate or is of a kind not supported;
    /// a certificate names no host (no DNS name or IP address among its subject alternative names).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::TlsConfig;
    ///
    /// let none = TlsConfig::builder().build().unwrap_err();
    /// assert_eq!(none.kind(), neverblock_http::ErrorKind::Tls);
    /// ```
    pub fn build(self) -> Result<TlsConfig, Error> {
        if self.pairs.is_empty() {
            return Err(Error::new(ErrorKind::Tls, "TLS needs a certificate and its key"));
        }
        let provider = Arc::new(intermediate_provider());
        let pairs =
            self.pairs.iter().map(|(cert, key)| CertPair::load(cert, key, &provider)).collect::<Result<Vec<_>, _>>()?;
        let certs = Arc::new(CertStore::new(pairs, provider.clone()));
        let tls_error = |e: rustls::Error| Error::new(ErrorKind::Tls, format!("TLS settings: {e}"));
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(tls_error)?
            .with_no_client_auth()
            .with_cert_resolver(certs.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
        config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(tls_error)?;
        let settings = Settings { certs, rustls: Arc::new(config), handshake_timeout: self.handshake_timeout };
        Ok(TlsConfig { inner: Arc::new(settings) })
    }
}

/// The `ring` provider, limited to Mozilla's "intermediate" suites and groups.
fn intermediate_provider() -> CryptoProvider {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.retain(|suite| INTERMEDIATE_SUITES.contains(&suite.suite()));
    provider.kx_groups.retain(|group| INTERMEDIATE_GROUPS.contains(&group.name()));
    provider
}

/// What TLS a connection speaks: for a handler ([`Request::tls`](super::Request::tls)), the
/// hook ([`Exchange::tls`](super::Exchange::tls)) and the access log (`%{SSL_PROTOCOL}x`,
/// `%{SSL_CIPHER}x`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsInfo {
    protocol: &'static str,
    cipher: &'static str,
    server_name: Option<String>,
    resumed: bool,
}

impl TlsInfo {
    /// The protocol version as Apache's mod_ssl names it: `TLSv1.2` or `TLSv1.3`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     let protocol = request.tls().map_or("none", |tls| tls.protocol());
    ///     Response::new(200).body(format!("TLS: {protocol}\n"))
    /// }
    /// # let _ = handler;
    /// ```
    pub fn protocol(&self) -> &str {
        self.protocol
    }

    /// The cipher suite as OpenSSL names it (`TLS_AES_128_GCM_SHA256`,
    /// `ECDHE-RSA-AES128-GCM-SHA256`).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Request;
    ///
    /// fn cipher<'r>(request: &'r Request<'_>) -> &'r str {
    ///     request.tls().map_or("-", |tls| tls.cipher())
    /// }
    /// # let _ = cipher;
    /// ```
    pub fn cipher(&self) -> &str {
        self.cipher
    }

    /// The host name the client asked for (SNI), if it sent one.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Request;
    ///
    /// fn asked_for<'r>(request: &'r Request<'_>) -> Option<&'r str> {
    ///     request.tls().and_then(|tls| tls.server_name())
    /// }
    /// # let _ = asked_for;
    /// ```
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// Whether the handshake resumed an earlier session (a ticket or a cached session).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Request;
    ///
    /// fn resumed(request: &Request<'_>) -> bool {
    ///     request.tls().is_some_and(|tls| tls.resumed())
    /// }
    /// # let _ = resumed;
    /// ```
    pub fn resumed(&self) -> bool {
        self.resumed
    }
}

/// How a TLS handshake ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HandshakeOutcome {
    /// It completed: the connection speaks TLS.
    Completed,
    /// The client spoke plain HTTP to the port, and was answered 400 in plain HTTP.
    PlainHttp,
    /// The client did not finish it within the handshake timeout.
    TimedOut,
    /// The client closed the connection before it finished.
    Closed,
    /// It failed: bytes that are not TLS, or a handshake rustls refused (its alert was sent).
    Failed,
}

/// A finished TLS handshake, as the [`on_handshake`](super::ServerBuilder::on_handshake) hook
/// sees it: for metrics.
#[derive(Debug)]
pub struct Handshake<'a> {
    pub(crate) outcome: HandshakeOutcome,
    pub(crate) tls: Option<&'a TlsInfo>,
    pub(crate) peer: SocketAddr,
    pub(crate) duration: Duration,
}

impl Handshake<'_> {
    /// How it ended.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Handshake, HandshakeOutcome, Server};
    ///
    /// let server = Server::builder()
    ///     .on_handshake(|h: &Handshake<'_>| {
    ///         if h.outcome() != HandshakeOutcome::Completed {
    ///             log::debug!("{}: TLS handshake {:?}", h.peer_addr(), h.outcome());
    ///         }
    ///     })
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn outcome(&self) -> HandshakeOutcome {
        self.outcome
    }

    /// What the connection speaks, once the handshake completed.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Handshake, Server};
    ///
    /// let server = Server::builder()
    ///     .on_handshake(|h: &Handshake<'_>| log::info!("{:?}", h.tls().map(|tls| tls.protocol())))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn tls(&self) -> Option<&TlsInfo> {
        self.tls
    }

    /// The client's address.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Handshake, Server};
    ///
    /// let server = Server::builder().on_handshake(|h: &Handshake<'_>| log::info!("{}", h.peer_addr())).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// How long it took, from the connection's start.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Handshake, Server};
    ///
    /// let server = Server::builder().on_handshake(|h: &Handshake<'_>| log::info!("{:?}", h.duration())).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn duration(&self) -> Duration {
        self.duration
    }
}
