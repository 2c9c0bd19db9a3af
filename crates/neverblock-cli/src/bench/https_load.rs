//! HTTPS for the load generator ([`http_load`](super::http_load)): the client's TLS settings
//! (rustls with the `ring` provider, TLS 1.3 alone), a TLS connection over the runtime's
//! `TcpStream`, and how often a load's connections handshake: once each, kept alive for request
//! after request, or a new connection for every request, its handshake full (the client keeps no
//! ticket) or resumed from a ticket the same client got on an earlier connection.

use std::io::{self, Read, Write};
use std::sync::Arc;

use neverblock::net::TcpStream;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{ring, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, HandshakeKind, SignatureScheme, StreamOwned};

/// The name the client asks for (SNI), which the benchmark's certificates carry.
const SERVER_NAME: &str = "localhost";
/// TLS 1.3 tickets a client keeps (rustls' memory store keeps at most 8 per server).
const TICKETS_KEPT: usize = 8;

/// How often a load's connections handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Handshakes {
    /// Once per connection, which is kept alive for request after request.
    PerConnection,
    /// A new connection for every request, each a full handshake: the client keeps no ticket.
    FullPerRequest,
    /// A new connection for every request, each resumed from a ticket the same client got on an
    /// earlier connection (TLS 1.3 PSK with ECDHE, as browsers resume); one that does not resume
    /// is a failed exchange.
    ResumedPerRequest,
}

impl Handshakes {
    /// How a row names it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Handshakes::PerConnection => "kept-alive",
            Handshakes::FullPerRequest => "new+full-handshake",
            Handshakes::ResumedPerRequest => "new+resumed",
        }
    }

    /// Whether every request goes on a new connection, closed once its response is read.
    pub(crate) fn connection_per_request(self) -> bool {
        self != Handshakes::PerConnection
    }
}

/// A load's TLS settings.
#[derive(Clone, Debug)]
pub(crate) struct Tls {
    config: Arc<ClientConfig>,
    pub(crate) handshakes: Handshakes,
}

impl Tls {
    /// TLS 1.3 with the provider's default suites and groups, ALPN `http/1.1`, the server's
    /// certificate taken on trust ([`SignatureChecked`]), and no ticket kept across connections
    /// unless `handshakes` resumes.
    pub(crate) fn new(handshakes: Handshakes) -> Tls {
        let provider = Arc::new(ring::default_provider());
        let verifier = Arc::new(SignatureChecked(provider.signature_verification_algorithms));
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("ring's provider has TLS 1.3 suites")
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config.resumption = Resumption::disabled();
        Tls { config: Arc::new(config), handshakes }
    }

    /// The settings of one client (a connection fiber of the load). When resuming, each client
    /// has a ticket store of its own and resumes from the tickets its own earlier connections
    /// got: rustls' store keeps 8 TLS 1.3 tickets per server, and a ticket resumes once, so one
    /// store shared by a load's connections (100 in flight) would run dry and turn resumptions
    /// into full handshakes.
    pub(crate) fn client(&self) -> Arc<ClientConfig> {
        if self.handshakes != Handshakes::ResumedPerRequest {
            return self.config.clone();
        }
        let mut config = (*self.config).clone();
        config.resumption = Resumption::in_memory_sessions(TICKETS_KEPT);
        Arc::new(config)
    }
}

/// A TLS connection, its handshake done; reads and writes plaintext.
#[derive(Debug)]
pub(crate) struct TlsConnection(StreamOwned<ClientConnection, TcpStream>);

impl TlsConnection {
    /// Makes the handshake over `tcp` with a client's settings (from [`Tls::client`]).
    pub(crate) fn handshake(client: &Arc<ClientConfig>, tcp: TcpStream) -> io::Result<TlsConnection> {
        let name = ServerName::try_from(SERVER_NAME).expect("a DNS name");
        let conn = ClientConnection::new(client.clone(), name).map_err(io::Error::other)?;
        let mut stream = StreamOwned::new(conn, tcp);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(TlsConnection(stream))
    }

    /// Whether the handshake was the one `handshakes` asks for: full, or resumed once the client
    /// is `warm` (an earlier connection of its read a response, and with it the server's tickets).
    /// Asked once the response is read, so that a connection that should have resumed still brings
    /// the client the tickets that come after the handshake.
    pub(crate) fn check(&self, handshakes: Handshakes, warm: bool) -> io::Result<()> {
        let kind = self.0.conn.handshake_kind();
        let expected = match handshakes {
            Handshakes::PerConnection => true,
            Handshakes::FullPerRequest => kind == Some(HandshakeKind::Full),
            Handshakes::ResumedPerRequest => !warm || kind == Some(HandshakeKind::Resumed),
        };
        match expected {
            true => Ok(()),
            false => Err(io::Error::other(format!("a {} handshake, not {}", shown(kind), handshakes.label()))),
        }
    }

    /// What the handshake agreed: version, cipher suite, key exchange group and its kind, e.g.
    /// `TLSv1_3 TLS13_AES_256_GCM_SHA384 X25519 Full`.
    pub(crate) fn describe(&self) -> String {
        let conn = &self.0.conn;
        format!(
            "{} {} {} {}",
            shown(conn.protocol_version()),
            shown(conn.negotiated_cipher_suite().map(|suite| suite.suite())),
            shown(conn.negotiated_key_exchange_group().map(|group| group.name())),
            shown(conn.handshake_kind()),
        )
    }

    /// Ends the connection as a TLS client does: close_notify, then the socket's close.
    pub(crate) fn close(mut self) {
        self.0.conn.send_close_notify();
        let _ = self.0.conn.write_tls(&mut self.0.sock);
    }
}

impl Read for TlsConnection {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for TlsConnection {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// A value's debug form, `?` for none.
fn shown(value: Option<impl std::fmt::Debug>) -> String {
    value.map_or_else(|| "?".to_owned(), |v| format!("{v:?}"))
}

/// Takes the server's certificate on trust but checks the handshake's signature with it.
///
/// The benchmark's certificates are self-signed, and a load generator need not build a chain to a
/// trusted root (h2load does not verify at all). It must still do the cryptography a real client
/// does on every full handshake: the server's signature over the handshake is checked against the
/// certificate's public key by the provider's `verify_tls13_signature` (what rustls' own WebPKI
/// verifier calls), so a handshake costs this client what it costs a browser, less the chain.
#[derive(Debug)]
struct SignatureChecked(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for SignatureChecked {
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
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
