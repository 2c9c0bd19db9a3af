//! HTTP/1.1 framing (RFC 9112): request heads out, whole messages in, over blocking `Read`/`Write`.
//!
//! The client sends a request with [`BufferedConn::send_request`] and reads the answer with
//! [`read_response`], through a [`BufferedConn`], which keeps the bytes it read past the end of
//! one message for the next, so neither pipelining nor where the stream happens to split its reads
//! changes what is parsed.
//!
//! A body is framed as RFC 9112 §6.3 says, first rule that applies: none after a HEAD request and
//! for 1xx, 204 and 304; chunked if the final transfer coding is `chunked`, else (responses only)
//! until the connection closes; `Content-Length` bytes; else until close (responses) or none
//! (requests).
//!
//! Invariant: a message is returned only once it was read whole, and reports its connection as
//! reusable only if its end was framed and the peer did not ask to close; so whatever a reusable
//! connection has buffered is the start of the next message.

use std::fmt;
use std::io::{self, Read, Write};
use std::mem::MaybeUninit;

use url::{Position, Url};

use super::head::Head;

/// The most [`BufferedConn`] asks its stream for at a time.
const READ_CHUNK: usize = 64 * 1024;
/// What it asks for first (Go's `bufio` size): a read that fills it doubles the
/// next, up to [`READ_CHUNK`], so a short response on a fresh connection costs no
/// 64 KiB buffer to zero and a long body is still read in large chunks.
const FIRST_READ: usize = 4 * 1024;
/// The most header fields one head may have.
const MAX_HEADERS: usize = 100;
/// The longest chunk-size line accepted, extensions and CRLF included.
const MAX_CHUNK_LINE: usize = 4096;
/// The longest request body sent in one write with its head; a longer one is written after it,
/// not copied.
const COALESCE: usize = 16 * 1024;

/// A stream, the bytes read from it that no message has consumed yet, and the buffer requests
/// are written into (kept, so sending allocates only on a connection's first request).
pub(crate) struct BufferedConn<S> {
    /// The connection.
    stream: S,
    /// The request being sent.
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

    /// Whether bytes were read from the stream that no message consumed (e.g. a pipelined one).
    pub(crate) fn has_buffered(&self) -> bool {
        self.start < self.end
    }

    /// The unconsumed bytes.
    fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Marks the first `n` buffered bytes as consumed.
    fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.start);
        self.start += n;
    }
}

impl<S: Read> BufferedConn<S> {
    /// Reads up to `chunk` (at most [`READ_CHUNK`]) more bytes after the buffered ones; `Ok(0)` at EOF.
    ///
    /// Moves the buffered bytes to the front when the room behind them runs low, and grows the
    /// buffer only when they fill it (a long head) or the reads grow.
    fn fill(&mut self) -> io::Result<usize> {
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

impl<S: Write> BufferedConn<S> {
    /// Writes `head` and then `body` (in one write if the body is short), and flushes them.
    pub(crate) fn send_request(&mut self, head: &RequestHead<'_>, body: &[u8]) -> io::Result<()> {
        self.out.clear();
        head.write_to(&mut self.out, body.len());
        let coalesce = body.len() <= COALESCE;
        if coalesce {
            self.out.extend_from_slice(body);
        }
        self.stream.write_all(&self.out)?;
        if !coalesce {
            self.stream.write_all(body)?;
        }
        self.stream.flush()
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

/// Size limits on what [`read_response`] accepts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// The longest head (start line and header section) or trailer section, in bytes.
    pub(crate) max_head: usize,
    /// The longest body, in bytes, after removing chunked framing.
    pub(crate) max_body: usize,
}

impl Default for Limits {
    /// 64 KiB heads, 1 GiB bodies.
    fn default() -> Self {
        Limits { max_head: 64 * 1024, max_body: 1 << 30 }
    }
}

/// A final response, read whole.
#[derive(Debug)]
pub(crate) struct Response {
    /// The status code, 101 or 200..=999.
    pub(crate) status: u16,
    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub(crate) version: u8,
    /// The reason phrase and header fields.
    pub(crate) head: Head,
    /// The body, with any chunked framing removed.
    pub(crate) body: Vec<u8>,
    /// Whether the connection may carry another request: the body's end was framed and the
    /// server did not ask to close.
    pub(crate) reusable: bool,
}

/// Why a message could not be written or read.
#[derive(Debug)]
pub(crate) enum WireError {
    /// The stream failed, other than by closing before any byte of a response.
    Io(io::Error),
    /// The connection closed (EOF, reset, aborted, broken pipe) before any byte of the response
    /// arrived: a kept-alive connection the server had already closed, so the request may be retried.
    NoResponse,
    /// The bytes are not valid HTTP/1.1, or a request head to write contains CR, LF or NUL.
    Malformed(String),
    /// The connection closed partway through a message.
    Truncated(String),
    /// A body is longer than [`Limits::max_body`].
    TooLarge(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Io(e) => write!(f, "I/O error: {e}"),
            WireError::NoResponse => f.write_str("connection closed before any byte of the response arrived"),
            WireError::Malformed(msg) | WireError::Truncated(msg) | WireError::TooLarge(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for WireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WireError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> Self {
        WireError::Io(e)
    }
}

/// A request head: the method, the URL (its path and query are the request target, its host and
/// port the `Host` value), and the caller's header fields.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestHead<'a> {
    pub(crate) method: &'a str,
    /// A parsed URL holds no CR, LF or NUL: the URL standard drops CR and LF, percent-encodes
    /// control characters in paths and queries, and refuses them in hosts.
    pub(crate) url: &'a Url,
    pub(crate) headers: &'a [(String, String)],
}

impl RequestHead<'_> {
    /// Checks that neither the method nor a header field contains CR, LF or NUL, which could end
    /// the line or the head early and smuggle in another. Nothing else is checked.
    ///
    /// # Errors
    ///
    /// [`WireError::Malformed`], naming the part.
    pub(crate) fn check(&self) -> Result<(), WireError> {
        let bad = |s: &str| s.bytes().any(|b| matches!(b, b'\r' | b'\n' | b'\0'));
        let reject =
            |what: String| Err(WireError::Malformed(format!("malformed request head: CR, LF or NUL in {what}")));
        if bad(self.method) {
            return reject("the method".to_owned());
        }
        for (name, value) in self.headers {
            if bad(name) {
                return reject("a header name".to_owned());
            }
            if bad(value) {
                return reject(format!("the value of header {name:?}"));
            }
        }
        Ok(())
    }

    /// Appends the head to `out`: the request line, `Host`, the header fields, and
    /// `Content-Length` when there is a body or the method expects one, unless the fields already
    /// frame the body. Write only a head that passed [`check`](Self::check).
    pub(crate) fn write_to(&self, out: &mut Vec<u8>, body_len: usize) {
        let target = &self.url[Position::BeforePath..Position::AfterQuery];
        // The host, and the port unless it is the scheme's default (which the URL does not keep).
        let host = &self.url[Position::BeforeHost..Position::AfterPort];
        for part in [self.method, " ", target, " HTTP/1.1\r\nHost: ", host, "\r\n"] {
            out.extend_from_slice(part.as_bytes());
        }
        for (name, value) in self.headers {
            for part in [name, ": ", value, "\r\n"] {
                out.extend_from_slice(part.as_bytes());
            }
        }
        let framed = self
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("transfer-encoding"));
        if !framed && (body_len > 0 || matches!(self.method, "POST" | "PUT" | "PATCH")) {
            // Writing to a Vec cannot fail.
            let _ = write!(out, "Content-Length: {body_len}\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// Reads the final response to one request, skipping interim 1xx responses other than 101.
///
/// # Errors
///
/// [`WireError::NoResponse`] if the connection closed before any byte of the response;
/// [`WireError::Truncated`] if it closed later, before the response ended; [`WireError::Malformed`]
/// for invalid framing, a head longer than `limits.max_head` or with more than 100 fields;
/// [`WireError::TooLarge`] for a body longer than `limits.max_body`; [`WireError::Io`] for any
/// other stream error, such as `TimedOut`.
pub(crate) fn read_response<S: Read>(
    conn: &mut BufferedConn<S>,
    request_was_head: bool,
    limits: &Limits,
) -> Result<Response, WireError> {
    let mut fresh = true;
    let mut res = loop {
        let res = read_head(conn, limits, fresh, "response", parse_response)?.ok_or(WireError::NoResponse)?;
        if res.status < 100 {
            return Err(WireError::Malformed(format!("malformed response head: status code {}", res.status)));
        }
        if res.status >= 200 || res.status == 101 {
            break res;
        }
        fresh = false;
    };
    let rules = Rules::of(&res.head, "response");
    let no_body = request_was_head || matches!(res.status, 101 | 204 | 304);
    let persistent = rules.persistent(res.version);
    let framing = if no_body { Framing::None } else { rules.framing()? };
    res.body = read_body(conn, framing, limits, "response")?;
    res.reusable = res.status != 101 && framing != Framing::Close && persistent;
    Ok(res)
}

/// How a message's body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    /// There is no body.
    None,
    /// After this many bytes.
    Length(u64),
    /// With a zero-size chunk and a trailer section.
    Chunked,
    /// When the connection closes.
    Close,
}

/// What a head says about its body's framing and its connection, gathered in one pass over its
/// fields.
struct Rules<'a> {
    /// The last element of the last `Transfer-Encoding` field; `None` if there is no such field.
    coding: Option<&'a [u8]>,
    /// The number every `Content-Length` element gives (`None`: no such field), or the first
    /// element that is not a number or disagrees.
    length: Result<Option<u64>, WireError>,
    /// Whether a `Connection` element is `close`, and whether one is `keep-alive`.
    close: bool,
    keep_alive: bool,
}

impl<'a> Rules<'a> {
    /// The rules of `head`; `side` names the message in errors.
    fn of(head: &'a Head, side: &str) -> Rules<'a> {
        let mut rules = Rules { coding: None, length: Ok(None), close: false, keep_alive: false };
        for (name, value) in head.raw_fields() {
            let elements = || value.split(|&b| b == b',').map(<[u8]>::trim_ascii);
            if is_named(name, b"transfer-encoding") {
                rules.coding = elements().next_back();
            } else if is_named(name, b"content-length") {
                elements().for_each(|element| rules.add_length(element, side));
            } else if is_named(name, b"connection") {
                for element in elements() {
                    rules.close |= element.eq_ignore_ascii_case(b"close");
                    rules.keep_alive |= element.eq_ignore_ascii_case(b"keep-alive");
                }
            }
        }
        rules
    }

    /// Takes in one `Content-Length` element: a number, the same as any before it.
    fn add_length(&mut self, element: &[u8], side: &str) {
        let Ok(length) = self.length else { return };
        self.length = match (decimal(element), length) {
            (None, _) => {
                let value = String::from_utf8_lossy(element);
                Err(WireError::Malformed(format!("malformed {side} head: invalid Content-Length {value:?}")))
            }
            (Some(n), Some(first)) if n != first => {
                Err(WireError::Malformed(format!("malformed {side} head: Content-Length {first} and {n}")))
            }
            (n, _) => Ok(n),
        };
    }

    /// How the body is framed, by `Transfer-Encoding` then `Content-Length`; [`Framing::Close`]
    /// if by neither.
    fn framing(self) -> Result<Framing, WireError> {
        match self.coding {
            Some(coding) if coding.eq_ignore_ascii_case(b"chunked") => Ok(Framing::Chunked),
            Some(_) => Ok(Framing::Close),
            None => self.length.map(|length| length.map_or(Framing::Close, Framing::Length)),
        }
    }

    /// Whether the connection stays open after this message: by default in HTTP/1.1 and only on
    /// request in HTTP/1.0, and never when `Transfer-Encoding` and `Content-Length` disagree about
    /// the framing (RFC 9112 §6.1: a sign of request smuggling).
    fn persistent(&self, version: u8) -> bool {
        let ambiguous = self.coding.is_some() && !matches!(self.length, Ok(None));
        let open = if version == 1 { !self.close } else { self.keep_alive };
        open && !ambiguous
    }
}

/// Whether `name`, a field name (a token, as httparse checked), is `lower`, a name of lowercase
/// letters and `-`, in any case. Setting bit 5 lowercases a letter and leaves `-` as it is, and
/// makes no other token character a letter or `-`: one OR a byte, not `eq_ignore_ascii_case`'s two
/// conversions.
fn is_named(name: &[u8], lower: &[u8]) -> bool {
    debug_assert!(lower.iter().all(|&b| b.is_ascii_lowercase() || b == b'-'), "{lower:?}");
    name.len() == lower.len() && name.iter().zip(lower).all(|(&n, &l)| n | 0x20 == l)
}

/// The number `digits` spells in decimal; `None` if it is empty, has anything but digits, or
/// overflows.
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        let digit = d.checked_sub(b'0').filter(|&d| d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// What a head parser returns: the head's length and the message, once complete.
type Parsed<T> = Result<Option<(usize, T)>, httparse::Error>;

/// Parses a response head, once complete, and copies it out of the read buffer.
fn parse_response(buf: &[u8]) -> Parsed<Response> {
    // httparse writes each field before it is read, so the array needs no initializing.
    let mut fields = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    let httparse::Status::Complete(len) =
        httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut res, buf, &mut fields)?
    else {
        return Ok(None);
    };
    Ok(Some((
        len,
        Response {
            // A complete parse has set the code and the version.
            status: res.code.unwrap_or_default(),
            version: res.version.unwrap_or_default(),
            head: Head::new(&buf[..len], &res),
            body: Vec::new(),
            reusable: false,
        },
    )))
}

/// Reads until `parse` finds a complete head, and consumes it.
///
/// Returns `Ok(None)` if `fresh` and the connection closed (EOF, reset, aborted, broken pipe)
/// before any byte arrived. `side` names the message in errors.
fn read_head<S: Read, T>(
    conn: &mut BufferedConn<S>,
    limits: &Limits,
    fresh: bool,
    side: &str,
    parse: fn(&[u8]) -> Parsed<T>,
) -> Result<Option<T>, WireError> {
    // Bytes at the end of the buffer not yet parsed; a head can only have ended if they hold a LF.
    let mut new = conn.buffered().len();
    loop {
        let buf = conn.buffered();
        if buf[buf.len() - new..].contains(&b'\n') {
            match parse(buf) {
                Ok(Some((len, head))) if len <= limits.max_head => {
                    conn.consume(len);
                    return Ok(Some(head));
                }
                Ok(_) => {}
                Err(e) => return Err(WireError::Malformed(format!("malformed {side} head: {e}"))),
            }
        }
        let got = buf.len();
        if got > limits.max_head {
            return Err(WireError::Malformed(format!("malformed {side} head: longer than {} bytes", limits.max_head)));
        }
        new = match conn.fill() {
            Ok(0) if fresh && got == 0 => return Ok(None),
            Ok(0) => return Err(WireError::Truncated(format!("{side} head cut short after {got} bytes"))),
            Ok(n) => n,
            Err(e) if fresh && got == 0 && is_disconnect(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
    }
}

/// Whether `e` says the peer closed the connection.
pub(crate) fn is_disconnect(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof)
}

/// Reads and consumes a body framed by `framing`. `side` names the message in errors.
fn read_body<S: Read>(
    conn: &mut BufferedConn<S>,
    framing: Framing,
    limits: &Limits,
    side: &str,
) -> Result<Vec<u8>, WireError> {
    let too_large = || WireError::TooLarge(format!("{side} body longer than the limit of {} bytes", limits.max_body));
    let mut body = Vec::new();
    match framing {
        Framing::None => {}
        Framing::Length(n) => {
            let n = usize::try_from(n).ok().filter(|&n| n <= limits.max_body).ok_or_else(too_large)?;
            // Room for the whole body up front, but never more than 1 MiB on a length's word.
            body = Vec::with_capacity(n.min(16 * READ_CHUNK));
            let got = take(conn, &mut body, n)?;
            if got < n {
                return Err(WireError::Truncated(format!("{side} body cut short: got {got} of {n} bytes")));
            }
        }
        Framing::Chunked => loop {
            let line = read_line(conn, MAX_CHUNK_LINE, side, "a chunk size line")?;
            let size = chunk_size(&conn.buffered()[..line - 2]).ok_or_else(|| {
                let line = String::from_utf8_lossy(&conn.buffered()[..(line - 2).min(32)]);
                WireError::Malformed(format!("malformed {side} body: invalid chunk size line {line:?}"))
            })?;
            conn.consume(line);
            if size == 0 {
                read_trailers(conn, limits, side)?;
                break;
            }
            let size =
                usize::try_from(size).ok().filter(|&n| n <= limits.max_body - body.len()).ok_or_else(too_large)?;
            let got = take(conn, &mut body, size)?;
            if got < size {
                return Err(WireError::Truncated(format!(
                    "{side} body cut short in a chunk: got {got} of {size} bytes"
                )));
            }
            while conn.buffered().len() < 2 {
                if conn.fill()? == 0 {
                    return Err(WireError::Truncated(format!("{side} body cut short after a chunk")));
                }
            }
            if !conn.buffered().starts_with(b"\r\n") {
                return Err(WireError::Malformed(format!("malformed {side} body: chunk data not followed by CRLF")));
            }
            conn.consume(2);
        },
        Framing::Close => loop {
            let buf = conn.buffered();
            if body.len() + buf.len() > limits.max_body {
                return Err(too_large());
            }
            body.extend_from_slice(buf);
            conn.consume(buf.len());
            if conn.fill()? == 0 {
                break;
            }
        },
    }
    Ok(body)
}

/// Moves `n` bytes from the connection into `out`; returns how many there were before EOF.
fn take<S: Read>(conn: &mut BufferedConn<S>, out: &mut Vec<u8>, n: usize) -> io::Result<usize> {
    let mut got = 0;
    while got < n {
        if !conn.has_buffered() && conn.fill()? == 0 {
            break;
        }
        let buf = conn.buffered();
        let k = buf.len().min(n - got);
        out.extend_from_slice(&buf[..k]);
        conn.consume(k);
        got += k;
    }
    Ok(got)
}

/// Reads until the buffer starts with a whole CRLF-terminated line of at most `max` bytes, and
/// returns its length, CRLF included; does not consume it. `what` names the line in errors.
fn read_line<S: Read>(conn: &mut BufferedConn<S>, max: usize, side: &str, what: &str) -> Result<usize, WireError> {
    let mut searched = 0;
    loop {
        let buf = conn.buffered();
        let lf = buf[searched..].iter().position(|&b| b == b'\n').map(|i| searched + i);
        if lf.map_or(buf.len(), |lf| lf + 1) > max {
            return Err(WireError::Malformed(format!("malformed {side} body: {what} longer than {max} bytes")));
        }
        if let Some(lf) = lf {
            if lf == 0 || buf[..lf - 1].contains(&b'\r') || buf[lf - 1] != b'\r' {
                return Err(WireError::Malformed(format!("malformed {side} body: bare CR or LF in {what}")));
            }
            return Ok(lf + 1);
        }
        searched = buf.len();
        if conn.fill()? == 0 {
            return Err(WireError::Truncated(format!("{side} body cut short in {what}")));
        }
    }
}

/// Parses a chunk-size line without its CRLF: hex digits, then optional whitespace and `;` extensions.
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let rest = &line[digits..];
    let blanks = rest.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    if digits == 0 || rest.get(blanks).is_some_and(|&b| b != b';') {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(&line[..digits]).ok()?, 16).ok()
}

/// Reads and discards a trailer section, which may not be longer than a head.
fn read_trailers<S: Read>(conn: &mut BufferedConn<S>, limits: &Limits, side: &str) -> Result<(), WireError> {
    let mut total = 0;
    loop {
        let line = read_line(conn, limits.max_head, side, "a trailer field")?;
        conn.consume(line);
        if line == 2 {
            return Ok(());
        }
        total += line;
        if total > limits.max_head {
            let max = limits.max_head;
            return Err(WireError::Malformed(format!(
                "malformed {side} body: trailer section longer than {max} bytes"
            )));
        }
    }
}

#[cfg(test)]
mod tests;
