//! HTTP/1.1 framing (RFC 9112), both ways, over blocking `Read`/`Write`: one buffer, one set of
//! limits, one body decoder, one set of message rules, and a module per role.
//!
//! As hyper's `proto/h1/role.rs` has one transaction trait with two roles, this module has two
//! role files over shared parts, and each role states only what differs: [`client`] sends
//! requests and reads response heads; [`server`] reads request heads and writes response heads.
//! Both read heads with one loop ([`read`]) through a [`BufferedConn`], which keeps the bytes it
//! read past the end of one message for the next, so neither pipelining nor where the stream
//! happens to split its reads changes what is parsed; both read the framing and connection fields
//! with one pass ([`fields`]); both write fields and bodies with one set of writers ([`write`]);
//! both decode bodies with [`body::Decoder`] (a length, chunked, or until the connection closes)
//! and frame them as RFC 9112 §6.3 says, first rule that applies: none after a HEAD request and
//! for 1xx, 204 and 304 responses; chunked if the final transfer coding is `chunked`; else
//! (responses only) until the connection closes; `Content-Length` bytes; else until close
//! (responses) or none (requests).
//!
//! Invariant: a message is handed on only once its head was read whole, and a connection counts as
//! reusable only if its last body's end was framed; so whatever a reusable connection has
//! buffered is the start of the next message.

pub(crate) mod body;
pub(crate) mod chunked;
#[cfg(feature = "client")]
pub(crate) mod client;
pub(crate) mod fields;
pub(crate) mod head;
pub(crate) mod read;
#[cfg(feature = "server")]
pub(crate) mod server;
pub(crate) mod write;

use std::fmt;
use std::io::{self, Read};

/// The most [`BufferedConn`] asks its stream for at a time.
const READ_CHUNK: usize = 64 * 1024;
/// What it asks for first (Go's `bufio` size): a read that fills it doubles the
/// next, up to [`READ_CHUNK`], so a short message on a fresh connection costs no
/// 64 KiB buffer to zero and a long body is still read in large chunks.
const FIRST_READ: usize = 4 * 1024;
/// The most header fields a head may have, whatever [`Limits::max_headers`] says.
pub(crate) const MAX_HEADERS_CAP: usize = 256;

/// A stream, the bytes read from it that no message has consumed yet, and a buffer messages are
/// written into (kept, so sending allocates only on a connection's first message).
pub(crate) struct BufferedConn<S> {
    /// The connection.
    stream: S,
    /// The message being sent (the client's requests).
    #[cfg_attr(not(feature = "client"), allow(dead_code))]
    out: Vec<u8>,
    /// `buf[start..end]` holds the unconsumed bytes; the rest is room to read into.
    buf: Vec<u8>,
    /// Where the unconsumed bytes begin.
    start: usize,
    /// Where the unconsumed bytes end.
    end: usize,
    /// How much the next read asks for.
    chunk: usize,
}

impl<S> BufferedConn<S> {
    /// Wraps `stream`; allocates the buffer on the first read.
    pub(crate) fn new(stream: S) -> Self {
        BufferedConn { stream, out: Vec::new(), buf: Vec::new(), start: 0, end: 0, chunk: FIRST_READ }
    }

    /// The stream.
    pub(crate) fn get_ref(&self) -> &S {
        &self.stream
    }

    /// The stream, to change its settings (reading or writing it directly would bypass the buffer).
    #[cfg(feature = "client")]
    pub(crate) fn get_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// The stream, given up with the buffer (whose unconsumed bytes, if any, are lost: callers
    /// check [`has_buffered`](Self::has_buffered) first).
    pub(crate) fn into_inner(self) -> S {
        self.stream
    }

    /// Whether bytes were read from the stream that no message consumed (e.g. a pipelined one).
    pub(crate) fn has_buffered(&self) -> bool {
        self.start < self.end
    }

    /// The unconsumed bytes.
    pub(crate) fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Lets go of the read buffer's allocation when nothing is buffered (a connection long idle);
    /// the next read allocates a first-sized one again.
    #[cfg(feature = "server")]
    pub(crate) fn release_buffer(&mut self) {
        if !self.has_buffered() {
            self.buf = Vec::new();
            self.start = 0;
            self.end = 0;
            self.chunk = FIRST_READ;
        }
    }

    /// Marks the first `n` buffered bytes as consumed.
    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.start);
        self.start += n;
    }
}

impl<S: Read> BufferedConn<S> {
    /// Reads up to `chunk` (at most [`READ_CHUNK`]) more bytes after the buffered ones; `Ok(0)` at EOF.
    ///
    /// Moves the buffered bytes to the front when the room behind them runs low, and grows the
    /// buffer only when they fill it (a long head) or the reads grow.
    pub(crate) fn fill(&mut self) -> io::Result<usize> {
        let chunk = self.chunk;
        if self.buf.len() - self.end < chunk {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() - self.end < chunk {
                self.buf.resize(self.end + chunk, 0);
            }
        }
        loop {
            match self.stream.read(&mut self.buf[self.end..self.end + chunk]) {
                Ok(n) => {
                    self.end += n;
                    if n == chunk {
                        self.chunk = (chunk * 2).min(READ_CHUNK);
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for BufferedConn<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferedConn")
            .field("stream", &self.stream)
            .field("buffered", &(self.end - self.start))
            .finish()
    }
}

/// Size limits on what is read: one set for both roles.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// The longest request line (the server answers 414 past it).
    #[cfg_attr(not(feature = "server"), allow(dead_code))]
    pub(crate) max_line: usize,
    /// The longest head (start line and header section) or trailer section, in bytes.
    pub(crate) max_head: usize,
    /// The most header fields in one head (at most [`MAX_HEADERS_CAP`]).
    pub(crate) max_headers: usize,
    /// The longest body, in bytes, after removing chunked framing.
    pub(crate) max_body: u64,
}

impl Default for Limits {
    /// 8 KiB request lines, 64 KiB heads, 100 fields, 1 GiB bodies.
    fn default() -> Self {
        Limits { max_line: 8 * 1024, max_head: 64 * 1024, max_headers: 100, max_body: 1 << 30 }
    }
}

/// How a message's body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// There is no body.
    None,
    /// After this many bytes.
    Length(u64),
    /// With a zero-size chunk and a trailer section.
    Chunked,
    /// When the connection closes (responses only).
    #[cfg_attr(not(feature = "client"), allow(dead_code))]
    Close,
}

impl Framing {
    /// The body's length when the framing says it: 0 for none, `n` for a `Content-Length` body;
    /// `None` for a chunked body or one that ends when the connection closes.
    pub(crate) fn known_length(self) -> Option<u64> {
        match self {
            Framing::None => Some(0),
            Framing::Length(n) => Some(n),
            Framing::Chunked | Framing::Close => None,
        }
    }
}

/// Why a message could not be written or read.
#[derive(Debug)]
pub(crate) enum WireError {
    /// The stream failed, other than by closing before any byte of a response.
    Io(io::Error),
    /// The connection closed before any byte of the response arrived, at its end (`None`) or with
    /// this error (reset, aborted, broken pipe): a kept-alive connection the server had already
    /// closed, so the request may be retried.
    #[cfg_attr(not(feature = "client"), allow(dead_code))]
    NoResponse(Option<io::Error>),
    /// The bytes are not valid HTTP/1.1, or a request head to write contains CR, LF or NUL.
    Malformed(String),
    /// The connection closed partway through a message.
    Truncated(String),
    /// A body is longer than [`Limits::max_body`], or a server sent more interim responses than
    /// the client takes.
    TooLarge(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Io(e) => write!(f, "I/O error: {e}"),
            WireError::NoResponse(None) => f.write_str("connection closed before any byte of the response arrived"),
            WireError::NoResponse(Some(e)) => {
                write!(f, "connection ended before any byte of the response arrived: {e}")
            }
            WireError::Malformed(msg) | WireError::Truncated(msg) | WireError::TooLarge(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for WireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WireError::Io(e) | WireError::NoResponse(Some(e)) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> Self {
        WireError::Io(e)
    }
}

/// The elements of a comma-separated field value, without surrounding blanks (empty ones too).
pub(crate) fn elements(value: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

/// Whether every byte of `bytes` passes `ok`. Each byte is looked at, without a branch each, so the
/// compiler checks many at once: for the fields of a head, which are valid in the usual case and
/// so read whole anyway.
#[inline]
pub(crate) fn every_byte(bytes: &[u8], ok: impl Fn(u8) -> bool) -> bool {
    bytes.iter().fold(true, |valid, &b| valid & ok(b))
}

/// Whether `name`, a field name (a token, as httparse checked), is `lower`, a name of lowercase
/// letters and `-`, in any case. Setting bit 5 lowercases a letter and leaves `-` as it is, and
/// makes no other token character a letter or `-`: one OR a byte, not `eq_ignore_ascii_case`'s two
/// conversions.
pub(crate) fn is_named(name: &[u8], lower: &[u8]) -> bool {
    debug_assert!(lower.iter().all(|&b| b.is_ascii_lowercase() || b == b'-'), "{lower:?}");
    name.len() == lower.len() && name.iter().zip(lower).all(|(&n, &l)| n | 0x20 == l)
}

/// The number `digits` spells in decimal; `None` if it is empty, has anything but digits, or
/// overflows.
pub(crate) fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        let digit = d.checked_sub(b'0').filter(|&d| d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// Whether `e` says the peer closed the connection.
pub(crate) fn is_disconnect(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof)
}

#[cfg(all(test, feature = "client"))]
mod tests;
