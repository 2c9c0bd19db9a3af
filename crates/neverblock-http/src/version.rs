//! The HTTP version of a message, shared by both roles.

use std::fmt;

/// The HTTP version of a request or response.
///
/// # Examples
///
/// ```
/// use neverblock_http::Version;
///
/// assert_eq!(Version::Http11.to_string(), "HTTP/1.1");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Version {
    /// HTTP/1.0: the connection closes after the message unless it asked to keep it.
    Http10,
    /// HTTP/1.1.
    Http11,
    /// HTTP/2 (RFC 9113): the server's streams over TLS (ALPN `h2`) or by prior knowledge.
    Http2,
}

impl Version {
    /// The version of a message whose version line says `HTTP/1.<minor>` (httparse reads 0 or 1).
    #[cfg_attr(not(any(feature = "client", feature = "server")), allow(dead_code))]
    pub(crate) fn of_minor(minor: u8) -> Version {
        if minor == 0 {
            Version::Http10
        } else {
            Version::Http11
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
            Version::Http2 => "HTTP/2.0",
        })
    }
}
