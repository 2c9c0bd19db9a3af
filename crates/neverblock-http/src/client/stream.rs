//! [`ResponseStream`]: a response whose head has arrived and whose body is read as a stream from
//! its connection, which goes back to the pool once the body has been read to its end.

use std::fmt;
use std::io::{self, BufRead, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use neverblock::sync::OwnedPermit;
use url::Url;

use super::message::Response;
use super::pool::{Host, PooledConn};
use crate::error::{Error, ErrorKind};
use crate::head_access::head_accessors;
use crate::wire::body::Decoder;
use crate::wire::client::ResponseHead;
use crate::wire::head::Head;
use crate::wire::{Limits, WireError};
use crate::Version;

/// A response as it arrives: returned by [`Client::send`](super::Client::send) once its head has
/// been read, with the body still on the connection, read through [`Read`] or [`BufRead`] (decoded:
/// chunked framing removed, a `Content-Length` body ended at its length, a close-delimited one at
/// the end of the connection).
///
/// The connection goes back to the client's keep-alive pool as soon as the body has been read to
/// its end (a read returns 0, or the last byte of a body of known length is consumed); a stream
/// dropped before that closes its connection instead, so nothing unread is ever left for the next
/// request. Until then it holds one of its host's connections
/// ([`max_connections_per_host`](super::ClientBuilder::max_connections_per_host)).
///
/// Reads are bounded as the request was: each waits at most the read timeout, and none goes past
/// the total timeout. A failed read's [`io::Error`] carries the client's [`Error`] (see
/// `From<Error> for io::Error`); [`copy_to`](ResponseStream::copy_to) and
/// [`into_response`](ResponseStream::into_response) return it directly. The client's
/// [`max_body`](super::ClientBuilder::max_body) bounds only what `into_response` keeps in memory: a
/// body read as a stream may be of any length.
///
/// # Examples
///
/// A download that keeps no more than one read's worth of it in memory:
///
/// ```
/// use std::io::{Read, Write};
/// use neverblock_http::{Client, Request};
/// use neverblock::net::TcpListener;
///
/// neverblock::run(|| {
///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
///     let url = format!("http://{}/big", listener.local_addr().unwrap());
///     neverblock::spawn(move || {
///         let (mut conn, _) = listener.accept().unwrap();
///         let _ = conn.read(&mut [0; 1024]).unwrap();
///         conn.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
///         for _ in 0..100 {
///             conn.write_all(b"400\r\n").unwrap();
///             conn.write_all(&[b'x'; 0x400]).unwrap();
///             conn.write_all(b"\r\n").unwrap();
///         }
///         conn.write_all(b"0\r\n\r\n").unwrap();
///     });
///     let mut response = Client::new().send(&Request::new("GET", url.as_str())).unwrap();
///     assert_eq!((response.status(), response.header("transfer-encoding")), (200, Some("chunked")));
///     let mut counted = 0;
///     let mut buf = [0; 8192];
///     loop {
///         match response.read(&mut buf).unwrap() {
///             0 => break,
///             n => counted += n,
///         }
///     }
///     assert_eq!(counted, 100 * 1024);
/// });
/// ```
pub struct ResponseStream {
    status: u16,
    version: Version,
    head: Head,
    url: Arc<Url>,
    /// The body's length when its framing gives it: `Some(0)` for no body.
    length: Option<u64>,
    /// The most [`into_response`](ResponseStream::into_response) keeps.
    max_body: u64,
    body: Body,
}

/// Where the body is.
enum Body {
    /// Being read from its connection.
    Open(Box<Lease>),
    /// Read to its end: the connection went back to the pool, or was closed.
    Done,
    /// Reading failed with this error (kind and message); the connection was closed.
    Failed(ErrorKind, String),
}

/// A connection lent to one response until its body ends.
struct Lease {
    conn: PooledConn,
    decoder: Decoder,
    host: Arc<Host>,
    /// The host's connection slot, given back when the lease ends.
    slot: OwnedPermit,
    /// Whether the connection may carry another request once the body has ended.
    reusable: bool,
    /// The request's total timeout and its deadline, to name a timeout they cause.
    total: Option<(Duration, Instant)>,
}

head_accessors!(ResponseStream, "neverblock_http::ResponseStream", |stream| head: Some(&stream.head), version: Version = stream.version);

impl ResponseStream {
    /// The response whose head `head` is, its body still to come on `conn`, which holds the
    /// host's `slot` until the body ends. `limits` bound the trailers; the body itself is not bounded.
    pub(super) fn new(
        url: Arc<Url>,
        head: ResponseHead,
        conn: PooledConn,
        (host, slot): (Arc<Host>, OwnedPermit),
        limits: &Limits,
        total: Option<(Duration, Instant)>,
    ) -> ResponseStream {
        let unbounded = Limits { max_body: u64::MAX, ..*limits };
        let length = head.framing.known_length();
        let reusable = head.reusable_after_body();
        let decoder = Decoder::new(head.framing, &unbounded, "response").expect("no length is over u64::MAX");
        let lease = Lease { conn, decoder, host, slot, reusable, total };
        let mut stream = ResponseStream {
            status: head.status,
            version: Version::of_minor(head.version),
            head: head.head,
            url,
            length,
            max_body: limits.max_body,
            body: Body::Open(Box::new(lease)),
        };
        if let Body::Open(lease) = &stream.body {
            if lease.decoder.is_done() {
                stream.finish();
            }
        }
        stream
    }

    /// The status code.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let client = neverblock_http::Client::new();
    /// let response = client.send(&neverblock_http::Request::new("GET", "http://127.0.0.1:8080/")).unwrap();
    /// if response.status() == 404 {
    ///     println!("not there");
    /// }
    /// ```
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The reason phrase (empty if the server sent none, or one that is not text).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let response = neverblock_http::Client::new()
    ///     .send(&neverblock_http::Request::new("GET", "http://127.0.0.1:8080/"))
    ///     .unwrap();
    /// println!("{} {}", response.status(), response.reason());
    /// ```
    pub fn reason(&self) -> &str {
        self.head.reason()
    }

    /// The response's head, as received.
    pub(crate) fn head(&self) -> &Head {
        &self.head
    }

    /// How long the body is, when its framing says: `Some(n)` for a `Content-Length` body,
    /// `Some(0)` when there is none (a HEAD request, 1xx, 204, 304); `None` for a chunked body or
    /// one that ends when the connection closes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let response = neverblock_http::Client::new()
    ///     .send(&neverblock_http::Request::new("GET", "http://127.0.0.1:8080/"))
    ///     .unwrap();
    /// match response.content_length() {
    ///     Some(n) => println!("{n} bytes to come"),
    ///     None => println!("a stream of unknown length"),
    /// }
    /// ```
    pub fn content_length(&self) -> Option<u64> {
        self.length
    }

    /// The URL that answered (the last one, after redirects).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let response = neverblock_http::Client::new()
    ///     .send(&neverblock_http::Request::new("GET", "http://127.0.0.1:8080/"))
    ///     .unwrap();
    /// assert_eq!(response.url(), "http://127.0.0.1:8080/");
    /// ```
    pub fn url(&self) -> &str {
        self.url.as_str()
    }

    /// Writes the rest of the body to `out` as it arrives, one read at a time; returns how many
    /// bytes were written. `std::io::sink()` as `out` reads a body to its end and drops it, which
    /// gives the connection back to the pool.
    ///
    /// # Errors
    ///
    /// The body's failure, as [`ErrorKind`] says (a timeout, a connection cut short, broken
    /// framing); `ErrorKind::Io` if `out` fails (the connection is then closed when the stream is
    /// dropped).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let mut response = neverblock_http::Client::new()
    ///     .send(&neverblock_http::Request::new("GET", "http://127.0.0.1:8080/big.iso"))
    ///     .unwrap();
    /// let mut file = std::fs::File::create("big.iso").unwrap();
    /// let written = response.copy_to(&mut file).unwrap();
    /// println!("{written} bytes saved");
    /// ```
    pub fn copy_to<W: Write + ?Sized>(&mut self, out: &mut W) -> Result<u64, Error> {
        let url = self.url.clone();
        let mut copied = 0;
        loop {
            let bytes = self.fill()?;
            if bytes.is_empty() {
                return Ok(copied);
            }
            let n = bytes.len();
            out.write_all(bytes)
                .map_err(|e| Error::with_source(ErrorKind::Io, format!("{url}: writing the response body"), e))?;
            self.advance(n);
            copied += n as u64;
        }
    }

    /// Reads the rest of the body and returns the whole response, as
    /// [`Client::request`](super::Client::request) does.
    ///
    /// # Errors
    ///
    /// `ErrorKind::TooLarge` for a body longer than the client's
    /// [`max_body`](super::ClientBuilder::max_body) (refused before it is read when its length is
    /// known); otherwise as [`copy_to`](ResponseStream::copy_to).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use neverblock_http::{Client, Request};
    ///
    /// let response = Client::new().send(&Request::new("GET", "http://127.0.0.1:8080/")).unwrap();
    /// let whole = if response.status() == 200 { Some(response.into_response().unwrap()) } else { None };
    /// # drop(whole);
    /// ```
    pub fn into_response(mut self) -> Result<Response, Error> {
        let max = self.max_body;
        let too_large = |url: &Url| {
            Error::new(ErrorKind::TooLarge, format!("{url}: response body longer than the limit of {max} bytes"))
        };
        if self.length.is_some_and(|n| n > max) {
            return Err(too_large(&self.url));
        }
        // Room for the whole body up front, but never more than 1 MiB on a length's word.
        let room = self.length.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX).min(1 << 20));
        let mut body = Vec::with_capacity(room);
        loop {
            let bytes = self.fill()?;
            if bytes.is_empty() {
                break;
            }
            if (body.len() + bytes.len()) as u64 > max {
                return Err(too_large(&self.url));
            }
            body.extend_from_slice(bytes);
            let n = bytes.len();
            self.advance(n);
        }
        let ResponseStream { status, version, head, url, .. } = self;
        Ok(Response { status, version, head, body, url })
    }

    /// Reads the body to its end and drops it, if that takes no more than `limit` bytes: then the
    /// connection goes back to the pool; else it is closed with the stream. For a redirect's body,
    /// which nobody reads.
    pub(super) fn skip_body(mut self, limit: u64) {
        let mut skipped = 0;
        while skipped <= limit {
            match self.fill() {
                Ok([]) | Err(_) => return,
                Ok(bytes) => {
                    let n = bytes.len();
                    self.advance(n);
                    skipped += n as u64;
                }
            }
        }
    }

    /// The next decoded bytes of the body; empty at its end, which gives the connection back.
    fn fill(&mut self) -> Result<&[u8], Error> {
        let lease = match &mut self.body {
            Body::Open(lease) => lease,
            Body::Done => return Ok(&[]),
            Body::Failed(kind, message) => return Err(Error::new(*kind, message.clone())),
        };
        let got = lease.decoder.fill_buf(&mut lease.conn).map(<[u8]>::len);
        match got {
            Err(e) => Err(self.fail(e)),
            Ok(0) => {
                self.finish();
                Ok(&[])
            }
            // The decoder lends a prefix of the connection's buffer: lend it again from here, so
            // that the other arms may change the body's state.
            Ok(n) => match &self.body {
                Body::Open(lease) => Ok(&lease.conn.buffered()[..n]),
                _ => unreachable!("the body is open: it was just read"),
            },
        }
    }

    /// Marks `n` bytes [`fill`](Self::fill) lent as read; the last byte of a body of known length
    /// ends it.
    fn advance(&mut self, n: usize) {
        if let Body::Open(lease) = &mut self.body {
            lease.decoder.consume(&mut lease.conn, n);
            if lease.decoder.is_done() {
                self.finish();
            }
        }
    }

    /// Ends the lease of a body read to its end: its connection goes back to the pool when the
    /// server keeps it open and nothing past the body was read, else it is closed; then its slot is
    /// freed.
    fn finish(&mut self) {
        if let Body::Open(lease) = std::mem::replace(&mut self.body, Body::Done) {
            let Lease { conn, host, slot, reusable, .. } = *lease;
            if reusable && !conn.has_buffered() {
                host.put_idle(conn);
            }
            drop(slot);
        }
    }

    /// Ends the lease after `e`, closing the connection; returns the error.
    fn fail(&mut self, e: WireError) -> Error {
        let total = match &self.body {
            Body::Open(lease) => lease.total,
            _ => None,
        };
        let error = super::name_total_timeout(Error::wire(self.url.as_str(), e), self.url.as_str(), total);
        self.body = Body::Failed(error.kind(), error.to_string());
        error
    }
}

impl Read for ResponseStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let bytes = self.fill()?;
        let n = bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        self.advance(n);
        Ok(n)
    }
}

impl BufRead for ResponseStream {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        Ok(self.fill()?)
    }

    fn consume(&mut self, n: usize) {
        self.advance(n);
    }
}

impl fmt::Debug for ResponseStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let body = match &self.body {
            Body::Open(lease) if lease.reusable => "being read (keep-alive)",
            Body::Open(_) => "being read",
            Body::Done => "read to its end",
            Body::Failed(..) => "failed",
        };
        f.debug_struct("ResponseStream")
            .field("status", &self.status)
            .field("version", &self.version)
            .field("head", &self.head)
            .field("content_length", &self.length)
            .field("body", &body)
            .field("url", &self.url.as_str())
            .finish()
    }
}
