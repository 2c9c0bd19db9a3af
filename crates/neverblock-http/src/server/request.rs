//! What a handler is given, whatever protocol carried the request: its head, where it came from,
//! and its body as a stream.

use std::fmt;
use std::io::{self, BufRead, Read};
use std::net::SocketAddr;
use std::ops::Range;

use super::tls::TlsInfo;
use crate::head_access::head_accessors;
use crate::wire::head::Head;
pub use crate::Version;

/// A request as a handler sees it: the head (method, target, version, header fields), the
/// addresses of both ends, and the body, read as a stream ([`Request::body`]). Nothing in it
/// depends on the protocol that carried it, but [`version`](Request::version), which says which.
///
/// # Examples
///
/// A handler that echoes what was sent to it:
///
/// ```
/// use std::io::Read;
/// use neverblock_http::server::{Request, Response};
///
/// fn echo(request: &mut Request<'_>) -> Response {
///     let mut body = Vec::new();
///     match request.body().read_to_end(&mut body) {
///         Ok(_) => Response::new(200).body(body),
///         // The server answers a body it could not read (400, 413, 408) itself.
///         Err(_) => Response::new(400),
///     }
/// }
/// # let _ = echo;
/// ```
pub struct Request<'a> {
    pub(crate) head: &'a Head,
    pub(crate) parts: &'a RequestParts,
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
    pub(crate) tls: Option<&'a TlsInfo>,
    pub(crate) body: RequestBody<'a>,
}

/// What a protocol's driver made of a request beyond its head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RequestParts {
    pub(crate) version: Version,
    /// Where the path lies in the target (for `*`: the whole `*`).
    pub(crate) path: Range<usize>,
    /// Where the query lies in the target, after its `?`.
    pub(crate) query: Option<Range<usize>>,
    /// The body's length, when the client declared it (0 without a body).
    pub(crate) content_length: Option<u64>,
}

impl RequestParts {
    /// The path of `head`'s target.
    pub(crate) fn path<'h>(&self, head: &'h Head) -> &'h str {
        &head.target()[self.path.clone()]
    }

    /// The query of `head`'s target.
    pub(crate) fn query<'h>(&self, head: &'h Head) -> Option<&'h str> {
        self.query.clone().map(|query| &head.target()[query])
    }
}

head_accessors!(Request<'_>, "neverblock_http::server::Request<'_>", |request| head: Some(request.head), version: Version = request.parts.version);

impl<'a> Request<'a> {
    /// The method, as sent (`GET`, `POST`, …).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     match request.method() {
    ///         "GET" | "HEAD" => Response::new(200).body("hello\n"),
    ///         _ => Response::new(405).header("Allow", "GET, HEAD"),
    ///     }
    /// }
    /// # let _ = handler;
    /// ```
    pub fn method(&self) -> &str {
        self.head.method()
    }

    /// The request target as sent: `/path?query` (origin form), an absolute URL (to a proxy), or `*`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     Response::new(200).body(format!("you sent {}\n", request.target()))
    /// }
    /// # let _ = handler;
    /// ```
    pub fn target(&self) -> &str {
        self.head.target()
    }

    /// The target's path, still percent-encoded (`/a%20b`); empty for an absolute URL without one.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     match request.path() {
    ///         "/" => Response::new(200).body("home\n"),
    ///         _ => Response::new(404),
    ///     }
    /// }
    /// # let _ = handler;
    /// ```
    pub fn path(&self) -> &str {
        self.parts.path(self.head)
    }

    /// The target's query, after the `?`, still percent-encoded.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     let page = request.query().and_then(|q| q.strip_prefix("page=")).unwrap_or("1");
    ///     Response::new(200).body(format!("page {page}\n"))
    /// }
    /// # let _ = handler;
    /// ```
    pub fn query(&self) -> Option<&str> {
        self.parts.query(self.head)
    }

    /// The client's address.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     Response::new(200).body(format!("your address is {}\n", request.peer_addr().ip()))
    /// }
    /// # let _ = handler;
    /// ```
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The address the client connected to.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     Response::new(200).body(format!("served on port {}\n", request.local_addr().port()))
    /// }
    /// # let _ = handler;
    /// ```
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The TLS the request came over, on an HTTPS connection; `None` in cleartext.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     match request.tls() {
    ///         Some(tls) => Response::new(200).body(format!("over {}\n", tls.protocol())),
    ///         None => Response::new(403).body("HTTPS only\n"),
    ///     }
    /// }
    /// # let _ = handler;
    /// ```
    pub fn tls(&self) -> Option<&TlsInfo> {
        self.tls
    }

    /// The body's length, when the client declared it (`Content-Length`; 0 without a body).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     match request.content_length() {
    ///         Some(n) if n > 1024 => Response::new(413),
    ///         _ => Response::new(204),
    ///     }
    /// }
    /// # let _ = handler;
    /// ```
    pub fn content_length(&self) -> Option<u64> {
        self.parts.content_length
    }

    /// The body, to read. On HTTP/1.1 the first read sends `100 Continue` when the client asked
    /// for it; on HTTP/2 (which has no such step) reads take the stream's DATA frames, the
    /// client's window opened again by each frame read.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Read;
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     let mut text = String::new();
    ///     match request.body().read_to_string(&mut text) {
    ///         Ok(_) => Response::new(200).body(text.to_uppercase()),
    ///         Err(_) => Response::new(400),
    ///     }
    /// }
    /// # let _ = handler;
    /// ```
    pub fn body(&mut self) -> &mut RequestBody<'a> {
        &mut self.body
    }
}

impl fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method())
            .field("target", &self.target())
            .field("version", &self.version())
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

/// A request's body as a stream: `Read` and `BufRead`, ending where the body ends: on HTTP/1.1
/// decoded from its length or chunks (the next pipelined request stays unread), on HTTP/2 the
/// stream's DATA frames until the client ends the stream.
///
/// Reads park the handler's fiber, each no longer than the server's body timeout; on HTTP/1.1
/// the body must also keep up the server's minimum data rate. A body that turns out malformed
/// (400), longer than the server's limit (413) or too slow (408) fails the read with an error,
/// and the server answers with that status whatever the handler returns; on HTTP/1.1 it then
/// closes the connection, on HTTP/2 only the stream ends (a stream the client reset fails the
/// read and is not answered). What the handler leaves unread is read and dropped after the
/// response, up to 256 KiB (on HTTP/1.1 the connection closes beyond that, on HTTP/2 the stream
/// is reset with `NO_ERROR`).
///
/// # Examples
///
/// ```
/// use std::io::BufRead;
/// use neverblock_http::server::{Request, Response};
///
/// fn count_lines(request: &mut Request<'_>) -> Response {
///     let lines = request.body().lines().map_while(Result::ok).count();
///     Response::new(200).body(format!("{lines} lines\n"))
/// }
/// # let _ = count_lines;
/// ```
pub struct RequestBody<'a> {
    pub(crate) source: &'a mut dyn BodySource,
}

/// Where a protocol's driver reads a request's body from.
pub(crate) trait BodySource: BufRead {
    /// Whether the whole body has been read.
    fn is_finished(&self) -> bool;
}

impl RequestBody<'_> {
    /// Whether the whole body has been read.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Read;
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     let mut first = [0u8; 16];
    ///     let n = request.body().read(&mut first).unwrap_or(0);
    ///     let more = !request.body().is_finished();
    ///     Response::new(200).body(format!("{n} bytes first; more to come: {more}\n"))
    /// }
    /// # let _ = handler;
    /// ```
    pub fn is_finished(&self) -> bool {
        self.source.is_finished()
    }
}

impl Read for RequestBody<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.source.read(buf)
    }
}

/// `Read::read` for a body read through its buffer: what `fill_buf` lends, copied and consumed.
pub(crate) fn read_buffered(body: &mut impl BufRead, buf: &mut [u8]) -> io::Result<usize> {
    let available = body.fill_buf()?;
    let n = available.len().min(buf.len());
    buf[..n].copy_from_slice(&available[..n]);
    body.consume(n);
    Ok(n)
}

impl BufRead for RequestBody<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.source.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        self.source.consume(n);
    }
}

impl fmt::Debug for RequestBody<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestBody").field("finished", &self.is_finished()).finish_non_exhaustive()
    }
}
