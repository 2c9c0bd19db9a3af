//! What can go wrong with an HTTP request or server, one kind per cause.

use std::fmt;
use std::io;

#[cfg(feature = "client")]
use super::client::DeadlinePassed;
#[cfg(feature = "client")]
use super::wire::WireError;

/// Why a request failed, or a server could not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The URL is not an absolute `http://` or `https://` URL with a host.
    InvalidUrl,
    /// The host name did not resolve.
    Resolve,
    /// The server refused the connection (nothing listens on the port).
    Refused,
    /// Connecting took longer than the connect timeout.
    ConnectTimeout,
    /// One read or write waited longer than the read timeout.
    ReadTimeout,
    /// The whole request, redirects included, took longer than the total timeout.
    TotalTimeout,
    /// The peer reset the connection.
    Reset,
    /// The TLS handshake or a TLS record failed (bad certificate, …).
    Tls,
    /// The response is not HTTP/1.x as RFC 9112 frames it.
    Malformed,
    /// The connection closed before the response was complete.
    Truncated,
    /// The response head or body is larger than the client's limit.
    TooLarge,
    /// More redirects than the client follows.
    TooManyRedirects,
    /// A server could not listen on its address (it does not resolve, is in use, or is not allowed).
    Listen,
    /// A server could not be set up or run (its signal handlers, its event loops).
    Server,
    /// Any other I/O error.
    Io,
}

/// A failed request: its [`ErrorKind`] and a message naming the URL and the cause.
///
/// # Examples
///
/// ```
/// use neverblock_http::{self, ErrorKind};
///
/// let err = neverblock_http::get("ftp://example.com/").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidUrl);
/// assert!(err.to_string().contains("ftp://example.com/"));
/// ```
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<io::Error>,
}

impl Error {
    #[cfg_attr(not(any(feature = "client", feature = "server")), allow(dead_code))]
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into(), source: None }
    }

    /// An error of `kind` caused by `source`: `what` failed.
    #[cfg(any(feature = "client", feature = "server"))]
    pub(crate) fn with_source(kind: ErrorKind, what: String, source: io::Error) -> Error {
        Error { kind, message: format!("{what}: {source}"), source: Some(source) }
    }

    /// Classifies an I/O error from `phase` ("connect to …", "read from …").
    #[cfg(feature = "client")]
    pub(crate) fn io(phase: &str, e: io::Error) -> Error {
        let kind = match e.kind() {
            io::ErrorKind::TimedOut if e.get_ref().is_some_and(|inner| inner.is::<DeadlinePassed>()) => {
                ErrorKind::TotalTimeout
            }
            io::ErrorKind::ConnectionRefused => ErrorKind::Refused,
            io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::BrokenPipe => {
                ErrorKind::Reset
            }
            io::ErrorKind::TimedOut if phase.starts_with("connect") => ErrorKind::ConnectTimeout,
            io::ErrorKind::TimedOut => ErrorKind::ReadTimeout,
            #[cfg(feature = "client")]
            _ if e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) => ErrorKind::Tls,
            _ => ErrorKind::Io,
        };
        Error { kind, message: format!("{phase}: {e}"), source: Some(e) }
    }

    /// Classifies a framing error while reading the response from `url`.
    #[cfg(feature = "client")]
    pub(crate) fn wire(url: &str, e: WireError) -> Error {
        match e {
            WireError::Io(e) => Error::io(&format!("read from {url}"), e),
            WireError::NoResponse(Some(e)) if e.kind() != io::ErrorKind::UnexpectedEof => {
                Error::io(&format!("{url}: the connection was reset before any response"), e)
            }
            WireError::NoResponse(_) => {
                Error::new(ErrorKind::Truncated, format!("{url}: the connection closed before any response"))
            }
            WireError::Malformed(m) => Error::new(ErrorKind::Malformed, format!("{url}: {m}")),
            WireError::Truncated(m) => Error::new(ErrorKind::Truncated, format!("{url}: {m}")),
            WireError::TooLarge(m) => Error::new(ErrorKind::TooLarge, format!("{url}: {m}")),
        }
    }

    /// Why the request failed.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// An [`Error`] as an I/O error, for a `Read` or `Write` that fails with one (as
/// [`ResponseStream`](crate::ResponseStream) does): of the nearest [`io::ErrorKind`], with the
/// `Error` inside, where `get_ref` and `downcast` find it.
///
/// # Examples
///
/// ```
/// use neverblock_http::{Error, ErrorKind};
///
/// let err = neverblock_http::get("http://127.0.0.1:1/").unwrap_err();
/// let io = std::io::Error::from(err);
/// assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
/// let inner = io.get_ref().and_then(|e| e.downcast_ref::<Error>()).unwrap();
/// assert_eq!(inner.kind(), ErrorKind::Refused);
/// ```
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match e.kind {
            ErrorKind::Refused => io::ErrorKind::ConnectionRefused,
            ErrorKind::Reset => io::ErrorKind::ConnectionReset,
            ErrorKind::ConnectTimeout | ErrorKind::ReadTimeout | ErrorKind::TotalTimeout => io::ErrorKind::TimedOut,
            ErrorKind::Truncated => io::ErrorKind::UnexpectedEof,
            ErrorKind::Malformed | ErrorKind::TooLarge | ErrorKind::Tls => io::ErrorKind::InvalidData,
            ErrorKind::InvalidUrl => io::ErrorKind::InvalidInput,
            _ => e.source.as_ref().map_or(io::ErrorKind::Other, io::Error::kind),
        };
        io::Error::new(kind, e)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}
