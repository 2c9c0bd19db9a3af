//! What a handler is given: the request's head, where it came from, and its body as a stream.

use std::fmt;
use std::io::{self, BufRead, Read};
use std::net::SocketAddr;

use super::socket::Socket;
use crate::wire::body::Decoder;
use crate::wire::head::Head;
use crate::wire::server::Message;
use crate::wire::{BufferedConn, WireError};
pub use crate::Version;

/// A request as a handler sees it: the head (method, target, version, header fields), the
/// addresses of both ends, and the body, read as a stream ([`Request::body`]).
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
    pub(super) head: &'a Head,
    pub(super) message: &'a Message,
    pub(super) peer: SocketAddr,
    pub(super) local: SocketAddr,
    pub(super) body: RequestBody<'a>,
}

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
        &self.head.target()[self.message.path.clone()]
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
        self.message.query.clone().map(|q| &self.head.target()[q])
    }

    /// The HTTP version.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response, Version};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     match request.version() {
    ///         Version::Http10 => Response::new(426).header("Upgrade", "HTTP/1.1"),
    ///         _ => Response::new(204),
    ///     }
    /// }
    /// # let _ = handler;
    /// ```
    pub fn version(&self) -> Version {
        Version::of_minor(self.message.version)
    }

    /// The first field called `name` (any case), if its value is text.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     let agent = request.header("user-agent").unwrap_or("someone");
    ///     Response::new(200).body(format!("hello, {agent}\n"))
    /// }
    /// # let _ = handler;
    /// ```
    pub fn header(&self, name: &str) -> Option<&str> {
        self.header_bytes(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The first field called `name` (any case), as bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     let token = request.header_bytes("x-token").unwrap_or_default();
    ///     Response::new(if token == b"secret" { 204 } else { 403 })
    /// }
    /// # let _ = handler;
    /// ```
    pub fn header_bytes(&self, name: &str) -> Option<&[u8]> {
        self.head.get(name)
    }

    /// Every field, in the order received: names as sent, values without surrounding blanks.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response};
    ///
    /// fn handler(request: &mut Request<'_>) -> Response {
    ///     let names: Vec<&str> = request.headers().map(|(name, _)| name).collect();
    ///     Response::new(200).body(names.join("\n"))
    /// }
    /// # let _ = handler;
    /// ```
    pub fn headers(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.head.fields()
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
        self.message.framing.known_length()
    }

    /// The body, to read. The first read sends `100 Continue` when the client asked for it.
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

/// Where a request's body stands, kept by the connection (so it survives the handler).
#[derive(Debug)]
pub(super) struct BodyState {
    pub(super) decoder: Decoder,
    /// `100 Continue` is owed before the first read.
    pub(super) continue_owed: bool,
    /// Why the body could not be read whole: the status to answer instead (`None`: no answer can
    /// reach the client) and what went wrong.
    pub(super) failure: Option<(Option<u16>, String)>,
}

impl BodyState {
    pub(super) fn new(decoder: Decoder, expect_continue: bool) -> BodyState {
        BodyState { decoder, continue_owed: expect_continue, failure: None }
    }

    /// Records why reading failed, and the error a reader sees.
    fn fail(&mut self, e: WireError) -> io::Error {
        let (status, kind) = match &e {
            WireError::Malformed(_) => (Some(400), io::ErrorKind::InvalidData),
            WireError::TooLarge(_) => (Some(413), io::ErrorKind::InvalidData),
            WireError::Io(e) if e.kind() == io::ErrorKind::TimedOut => (Some(408), io::ErrorKind::TimedOut),
            WireError::Io(e) => (None, e.kind()),
            WireError::Truncated(_) | WireError::NoResponse(_) => (None, io::ErrorKind::UnexpectedEof),
        };
        let why = e.to_string();
        self.failure = Some((status, why.clone()));
        io::Error::new(kind, why)
    }
}

/// A request's body as a stream: `Read` and `BufRead`, decoded from its length or chunks, ending
/// where the body ends (the next pipelined request stays unread).
///
/// Reads park the handler's fiber, each no longer than the server's body timeout, and the body
/// must keep up the server's minimum data rate. A body that turns out malformed (400), longer
/// than the server's limit (413) or too slow (408) fails the read with an error, and the server
/// answers with that status whatever the handler returns, then closes the connection.
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
    pub(super) conn: &'a mut BufferedConn<Socket>,
    pub(super) state: &'a mut BodyState,
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
        self.state.decoder.is_done()
    }
}

impl Read for RequestBody<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for RequestBody<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if let Some((_, why)) = &self.state.failure {
            return Err(io::Error::other(why.clone()));
        }
        if std::mem::take(&mut self.state.continue_owed) {
            // Written with the next read of the socket, which the client's body answers.
            self.conn.get_ref().queue(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        match self.state.decoder.fill_buf(self.conn) {
            Ok(bytes) => Ok(bytes),
            Err(e) => Err(self.state.fail(e)),
        }
    }

    fn consume(&mut self, n: usize) {
        self.state.decoder.consume(self.conn, n);
    }
}

impl fmt::Debug for RequestBody<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestBody").field("state", &self.state).finish_non_exhaustive()
    }
}
