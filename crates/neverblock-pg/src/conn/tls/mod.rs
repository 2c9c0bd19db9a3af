//! TLS to the server, set up as libpq does: on a fresh TCP socket an `SSLRequest`, one byte
//! back (`S`: go ahead, `N`: no TLS here), then a rustls handshake (TLS 1.2 or 1.3, SNI when the
//! host is a name) whose certificate checks follow `sslmode`. On a unix socket `sslmode` is
//! ignored, as libpq documents: PostgreSQL offers no TLS there, and the session is cleartext
//! whatever the mode.
//!
//! Cancel requests ([`CancelToken`](crate::CancelToken)) stay in cleartext whatever `sslmode`
//! says, as libpq's `PQcancel` does: the postmaster takes them before any TLS, `pg_hba.conf` does
//! not apply to them, and they carry nothing but the backend's key.

mod binding;
mod setup;
mod stream;
#[cfg(test)]
mod tests;

use std::io::{Read, Write};

use bytes::BytesMut;
use neverblock::net::TcpStream;
use postgres_protocol::message::frontend;
use rustls::pki_types::ServerName;
use rustls::{CertificateError, ClientConnection};

use super::socket::TcpOrUnixStream;
use crate::config::{ChannelBinding, Host, SslMode, SYSTEM_ROOTS};
use crate::{Config, Error};
pub(crate) use stream::TlsStream;

/// What one connection attempt asks of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encryption {
    Cleartext,
    /// TLS if the server offers it, else cleartext.
    IfOffered,
    Required,
}

impl Encryption {
    /// The first attempt of `mode` (`allow` starts in cleartext).
    pub(crate) fn first(mode: SslMode) -> Encryption {
        match mode {
            SslMode::Disable | SslMode::Allow => Encryption::Cleartext,
            SslMode::Prefer => Encryption::IfOffered,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Encryption::Required,
        }
    }

    /// libpq's second attempt after a failed one: `allow` tries TLS when the server refused
    /// the cleartext login; `prefer` tries cleartext when the TLS attempt failed (its handshake,
    /// or the server refused the login over TLS) — unless `channel_binding=require`, which
    /// cleartext cannot meet.
    pub(crate) fn retry(config: &Config, failure: &Error, over_tls: bool) -> Option<Encryption> {
        let tcp = matches!(config.get_host(), Host::Tcp(..));
        match (config.get_ssl_mode(), failure) {
            (SslMode::Allow, Error::Db(_)) if tcp => Some(Encryption::IfOffered),
            (SslMode::Prefer, Error::Db(_) | Error::Tls(_))
                if over_tls && config.get_channel_binding() != ChannelBinding::Require =>
            {
                Some(Encryption::Cleartext)
            }
            _ => None,
        }
    }
}

/// Refuses settings that cannot work whatever the server says.
///
/// # Errors
///
/// [`Error::Config`]: `sslrootcert=system` with a mode weaker than `verify-full` (libpq refuses
/// it too).
pub(crate) fn check(config: &Config) -> Result<(), Error> {
    let mode = config.get_ssl_mode();
    if config.get_ssl_root_cert() == Some(SYSTEM_ROOTS.as_ref()) && mode != SslMode::VerifyFull {
        return Err(Error::Config(format!(
            "sslmode={mode} is too weak for sslrootcert=system: the system's roots vouch for any \
             host they signed, so only verify-full (the default with them) checks anything"
        )));
    }
    Ok(())
}

/// Asks the server on `socket` for TLS as `want` says: returns the TLS stream, or the socket as
/// it was when TLS is not wanted, not offered, or on a unix socket (where `sslmode` is ignored).
///
/// # Errors
///
/// [`Error::Tls`] when `want` is [`Encryption::Required`] and the server has no TLS, or the
/// handshake fails (an untrusted certificate, one that does not name the host, …);
/// [`Error::Config`] for certificate and key files; I/O errors as [`Error::io`].
pub(crate) fn negotiate(socket: TcpOrUnixStream, config: &Config, want: Encryption) -> Result<TcpOrUnixStream, Error> {
    let (tcp, host) = match (socket, config.get_host()) {
        (TcpOrUnixStream::Tcp(tcp), Host::Tcp(host, _)) if want != Encryption::Cleartext => (tcp, host),
        (socket, _) => return Ok(socket),
    };
    let mut request = BytesMut::with_capacity(8);
    frontend::ssl_request(&mut request);
    (&tcp).write_all(&request).map_err(Error::io)?;
    // Exactly one byte: anything the server sent after it, before the handshake, is not to be trusted.
    let mut answer = [0u8; 1];
    (&tcp).read_exact(&mut answer).map_err(Error::io)?;
    match answer[0] {
        b'S' => handshake(tcp, host, config, &setup::settings(config)?),
        b'N' if want == Encryption::IfOffered => Ok(TcpOrUnixStream::Tcp(tcp)),
        b'N' => Err(Error::Tls(format!(
            "the server at {} does not accept TLS (its ssl setting is off), and sslmode={} demands it",
            config.get_host(),
            config.get_ssl_mode()
        ))),
        other => Err(Error::protocol(format!("the server answered the TLS request with {other:#04x}, not S or N"))),
    }
}

/// The rustls handshake on `tcp`, the server's `S` just read.
fn handshake(
    tcp: TcpStream,
    host: &str,
    config: &Config,
    settings: &setup::Settings,
) -> Result<TcpOrUnixStream, Error> {
    let name = ServerName::try_from(host.to_owned())
        .map_err(|_| Error::Config(format!("{host:?} is neither a host name nor an address TLS can check")))?;
    let mut session = ClientConnection::new(settings.client.clone(), name)
        .map_err(|e| Error::Tls(format!("cannot start TLS with {}: {e}", config.get_host())))?;
    while session.is_handshaking() {
        session.complete_io(&mut &tcp).map_err(|e| handshake_failed(e, config, settings))?;
    }
    Ok(TcpOrUnixStream::Tls(Box::new(TlsStream::new(tcp, session))))
}

/// Says why the handshake failed in the terms of the settings: which roots, which host.
fn handshake_failed(e: std::io::Error, config: &Config, settings: &setup::Settings) -> Error {
    let server = config.get_host();
    let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) else {
        return match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                Error::Tls(format!("the server at {server} closed the connection during the TLS handshake"))
            }
            _ => Error::io(e),
        };
    };
    let roots = settings.roots.as_deref().unwrap_or("no roots");
    Error::Tls(match tls {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            format!("the certificate of the server at {server} is not trusted: it is not signed by a root of {roots}")
        }
        rustls::Error::InvalidCertificate(
            e @ (CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }),
        ) => format!(
            "the certificate of the server at {server} does not name the host: {e} \
             (sslmode=verify-full checks the name, verify-ca only the chain)"
        ),
        rustls::Error::InvalidCertificate(e) => {
            format!("the certificate of the server at {server} is refused ({roots}): {e}")
        }
        rustls::Error::AlertReceived(alert) => {
            format!("the server at {server} ended the TLS handshake with the alert {alert:?}")
        }
        other => format!("the TLS handshake with the server at {server} failed: {other}"),
    })
}
