//! The client role: request heads and bodies out, response heads in.
//!
//! The client sends a request with [`BufferedConn::send_request`] (a body in memory, or streamed
//! from a reader: by its length, or chunked) and reads the answer's head with
//! [`read_response_head`]; the body that follows is read with a [`Decoder`](super::body::Decoder)
//! over the same connection, framed as the head says.

use std::fmt;
use std::io::{self, Read, Write};
use std::mem::MaybeUninit;

use url::{Position, Url};

use super::chunked::{size_line, LAST_CHUNK};
use super::head::Head;
use super::{decimal, elements, is_named, BufferedConn, Framing, Limits, WireError, MAX_HEADERS_CAP};

/// The longest request body sent in one write with its head; a longer one is written after it,
/// not copied.
pub(crate) const COALESCE: usize = 16 * 1024;
/// The most a streamed request body is read at a time: one chunk, or one write.
const PIECE: usize = 32 * 1024;
/// Room for the longest chunk-size line ([`size_line`]: 16 hex digits and CRLF).
const SIZE_LINE_ROOM: usize = 18;
/// The most interim (1xx) responses taken before the final one: without a cap a server could keep a
/// request waiting forever on `100 Continue` after `100 Continue` (Go allows 5; `103 Early Hints`
/// may come several times).
pub(crate) const MAX_INTERIM: usize = 16;

/// What a request sends after its head.
pub(crate) enum Upload<'a> {
    /// Bytes in memory, framed by `Content-Length` unless the caller's fields frame them; they can
    /// be sent again (after a stale connection, or to a redirect's target).
    Bytes(&'a [u8]),
    /// A stream, sent once: `len` bytes under `Content-Length`, or chunked when `len` is unknown.
    /// The caller's `Content-Length` and `Transfer-Encoding` fields are not sent with it.
    Reader { reader: &'a mut dyn Read, len: Option<u64> },
}

impl Upload<'_> {
    /// Whether the body can be sent again.
    pub(crate) fn is_replayable(&self) -> bool {
        matches!(self, Upload::Bytes(_))
    }

    /// Whether there are body bytes to send (a stream of unknown length may have some).
    pub(crate) fn has_bytes(&self) -> bool {
        match self {
            Upload::Bytes(bytes) => !bytes.is_empty(),
            Upload::Reader { len, .. } => *len != Some(0),
        }
    }

    /// What the head announces of this body.
    fn declared(&self) -> Declared {
        match self {
            Upload::Bytes(bytes) => Declared::Bytes(bytes.len()),
            Upload::Reader { len: Some(len), .. } => Declared::Length(*len),
            Upload::Reader { len: None, .. } => Declared::Chunked,
        }
    }
}

impl fmt::Debug for Upload<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Upload::Bytes(bytes) => write!(f, "Bytes({} bytes)", bytes.len()),
            Upload::Reader { len, .. } => f.debug_struct("Reader").field("len", len).finish_non_exhaustive(),
        }
    }
}

/// Why a request could not be sent.
#[derive(Debug)]
pub(crate) enum SendError {
    /// The connection failed (or the peer closed it).
    Conn(io::Error),
    /// The body's reader failed, or ended before its declared length.
    Body(io::Error),
}

impl<S: Write> BufferedConn<S> {
    /// Writes `head` and then `body`, and flushes them: a short body in memory in one write with
    /// the head, a long one after it; a stream piece by piece, at most 32 KiB a write, its first
    /// piece with the head.
    pub(crate) fn send_request(&mut self, head: &RequestHead<'_>, body: &mut Upload<'_>) -> Result<(), SendError> {
        self.out.clear();
        head.write_to(&mut self.out, body.declared());
        self.send_after_out(body)
    }

    /// Writes `head` alone, announcing `body`, and flushes it: for a request that waits for the
    /// server's `100 Continue` before its body ([`send_body`](Self::send_body)).
    pub(crate) fn send_head(&mut self, head: &RequestHead<'_>, body: &Upload<'_>) -> Result<(), SendError> {
        self.out.clear();
        head.write_to(&mut self.out, body.declared());
        self.stream.write_all(&self.out).map_err(SendError::Conn)?;
        self.out.clear();
        self.stream.flush().map_err(SendError::Conn)
    }

    /// Writes `body`, whose head went out already, and flushes it.
    pub(crate) fn send_body(&mut self, body: &mut Upload<'_>) -> Result<(), SendError> {
        self.out.clear();
        self.send_after_out(body)
    }

    /// Writes what `out` holds (a head, or nothing), then `body`, and flushes them.
    fn send_after_out(&mut self, body: &mut Upload<'_>) -> Result<(), SendError> {
        match body {
            Upload::Bytes(bytes) => {
                let coalesce = bytes.len() <= COALESCE;
                if coalesce {
                    self.out.extend_from_slice(bytes);
                }
                self.stream.write_all(&self.out).map_err(SendError::Conn)?;
                if !coalesce {
                    self.stream.write_all(bytes).map_err(SendError::Conn)?;
                }
            }
            Upload::Reader { reader, len: Some(len) } => self.send_sized(&mut **reader, *len)?,
            Upload::Reader { reader, len: None } => self.send_chunked(&mut **reader)?,
        }
        self.stream.flush().map_err(SendError::Conn)
    }

    /// Sends what `out` holds (the head), then exactly `len` bytes of `reader`, in pieces.
    fn send_sized(&mut self, reader: &mut dyn Read, len: u64) -> Result<(), SendError> {
        let mut left = len;
        loop {
            if left > 0 {
                let at = self.out.len();
                let want = usize::try_from(left).unwrap_or(usize::MAX).min(PIECE);
                self.out.resize(at + want, 0);
                let n = read_some(reader, &mut self.out[at..])?;
                self.out.truncate(at + n);
                if n == 0 {
                    let sent = len - left;
                    let why = format!("the request body ended after {sent} of its {len} bytes");
                    return Err(SendError::Body(io::Error::new(io::ErrorKind::UnexpectedEof, why)));
                }
                left -= n as u64;
            }
            self.stream.write_all(&self.out).map_err(SendError::Conn)?;
            self.out.clear();
            if left == 0 {
                return Ok(());
            }
        }
    }

    /// Sends what `out` holds (the head), then `reader`'s bytes as chunks, one a read, then the
    /// last chunk.
    fn send_chunked(&mut self, reader: &mut dyn Read) -> Result<(), SendError> {
        loop {
            // [head] [room for the size line] [data] CRLF: the size line is written at the end of
            // its room, against the data, and the gap left before it closed up.
            let at = self.out.len();
            self.out.resize(at + SIZE_LINE_ROOM + PIECE, 0);
            let n = read_some(reader, &mut self.out[at + SIZE_LINE_ROOM..])?;
            if n == 0 {
                self.out.truncate(at);
                self.out.extend_from_slice(LAST_CHUNK);
                self.stream.write_all(&self.out).map_err(SendError::Conn)?;
                self.out.clear();
                return Ok(());
            }
            let start = at + size_line(n, &mut self.out[at..at + SIZE_LINE_ROOM]);
            let end = at + SIZE_LINE_ROOM + n;
            self.out.truncate(end);
            self.out.extend_from_slice(b"\r\n");
            let frame = if at == 0 {
                &self.out[start..]
            } else {
                self.out.copy_within(start.., at);
                self.out.truncate(self.out.len() - (start - at));
                &self.out[..]
            };
            self.stream.write_all(frame).map_err(SendError::Conn)?;
            self.out.clear();
        }
    }
}

/// One read of a request body's reader, retried when interrupted.
fn read_some(reader: &mut dyn Read, buf: &mut [u8]) -> Result<usize, SendError> {
    loop {
        match reader.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(SendError::Body(e)),
        }
    }
}

/// The body a head announces.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Declared {
    /// Bytes in memory: `Content-Length` (when there are any, or the method expects a body) unless
    /// the caller's fields already frame them.
    Bytes(usize),
    /// A stream of this length: `Content-Length`, in place of any the caller gave.
    Length(u64),
    /// A stream of unknown length: `Transfer-Encoding: chunked`, in place of any framing the caller gave.
    Chunked,
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

    /// Whether the request asks to close the connection after its answer (`close` in a
    /// `Connection` field): then no other request may follow it there (RFC 9112 §9.6).
    pub(crate) fn asks_close(&self) -> bool {
        self.field_lists("connection", "close")
    }

    /// Whether the request asks the server for `100 Continue` before its body (`Expect:
    /// 100-continue`, RFC 9110 §10.1.1).
    pub(crate) fn expects_continue(&self) -> bool {
        self.field_lists("expect", "100-continue")
    }

    /// Whether a field called `name` (lowercase) lists `element`, in any case.
    fn field_lists(&self, name: &str, element: &str) -> bool {
        self.headers
            .iter()
            .filter(|(field, _)| is_named(field.as_bytes(), name.as_bytes()))
            .any(|(_, value)| elements(value.as_bytes()).any(|e| e.eq_ignore_ascii_case(element.as_bytes())))
    }

    /// Appends the head to `out`: the request line, `Host`, the header fields, and the framing of
    /// `body`. Write only a head that passed [`check`](Self::check).
    pub(crate) fn write_to(&self, out: &mut Vec<u8>, body: Declared) {
        let target = &self.url[Position::BeforePath..Position::AfterQuery];
        // The host, and the port unless it is the scheme's default (which the URL does not keep).
        let host = &self.url[Position::BeforeHost..Position::AfterPort];
        for part in [self.method, " ", target, " HTTP/1.1\r\nHost: ", host, "\r\n"] {
            out.extend_from_slice(part.as_bytes());
        }
        let is_framing =
            |name: &str| name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("transfer-encoding");
        let streamed = !matches!(body, Declared::Bytes(_));
        for (name, value) in self.headers.iter().filter(|(name, _)| !(streamed && is_framing(name))) {
            for part in [name, ": ", value, "\r\n"] {
                out.extend_from_slice(part.as_bytes());
            }
        }
        // Writing to a Vec cannot fail.
        match body {
            Declared::Bytes(len) => {
                let framed = self.headers.iter().any(|(name, _)| is_framing(name));
                if !framed && (len > 0 || matches!(self.method, "POST" | "PUT" | "PATCH")) {
                    let _ = write!(out, "Content-Length: {len}\r\n");
                }
            }
            Declared::Length(len) => {
                let _ = write!(out, "Content-Length: {len}\r\n");
            }
            Declared::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// A final response's head: what it says, and how its body is framed.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    /// The status code, 101 or 200..=999.
    pub(crate) status: u16,
    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub(crate) version: u8,
    /// The reason phrase and header fields (obsolete line folds replaced by spaces).
    pub(crate) head: Head,
    /// How the body that follows is framed ([`Framing::None`] after a HEAD request, and for 101,
    /// 204 and 304).
    pub(crate) framing: Framing,
    /// Whether the server lets the connection carry another request (its version and `Connection`
    /// fields, and the framing's soundness, say so).
    pub(crate) keep_alive: bool,
}

impl ResponseHead {
    /// Whether the connection may carry another request once the body has been read to its end:
    /// the server keeps it open, the body's end is framed, and the protocol was not switched.
    pub(crate) fn reusable_after_body(&self) -> bool {
        self.keep_alive && self.status != 101 && self.framing != Framing::Close
    }
}

/// Reads the final response's head, skipping up to [`MAX_INTERIM`] interim 1xx responses (other
/// than 101, which is final).
///
/// # Errors
///
/// [`WireError::NoResponse`] if the connection closed before any byte of the response;
/// [`WireError::Truncated`] if it closed later, inside a head; [`WireError::Malformed`] for an
/// invalid head or framing, a head longer than `limits.max_head` or with more than
/// `limits.max_headers` fields; [`WireError::TooLarge`] after more than [`MAX_INTERIM`] interim
/// responses; [`WireError::Io`] for any other stream error, such as `TimedOut`.
pub(crate) fn read_response_head<S: Read>(
    conn: &mut BufferedConn<S>,
    request_was_head: bool,
    limits: &Limits,
) -> Result<ResponseHead, WireError> {
    match read_until(conn, request_was_head, limits, false)? {
        Answer::Final(head) => Ok(head),
        Answer::Continue => unreachable!("interim responses are skipped"),
    }
}

/// What the server answered a request that waits for `100 Continue` before its body.
#[derive(Debug)]
pub(crate) enum Answer {
    /// `100 Continue`: send the body.
    Continue,
    /// A final response, given without the body.
    Final(ResponseHead),
}

/// Reads the server's answer to a head that asked for `100 Continue`: that, or the final
/// response; other interim responses are skipped, up to [`MAX_INTERIM`].
///
/// # Errors
///
/// As [`read_response_head`].
pub(crate) fn read_continue<S: Read>(
    conn: &mut BufferedConn<S>,
    request_was_head: bool,
    limits: &Limits,
) -> Result<Answer, WireError> {
    read_until(conn, request_was_head, limits, true)
}

/// Reads response heads until a final one, or, with `to_continue`, a `100 Continue`.
fn read_until<S: Read>(
    conn: &mut BufferedConn<S>,
    request_was_head: bool,
    limits: &Limits,
    to_continue: bool,
) -> Result<Answer, WireError> {
    let mut interim = 0;
    let (status, version, head) = loop {
        let (status, version, head) = read_head(conn, limits, interim == 0)?;
        if status < 100 {
            return Err(WireError::Malformed(format!("malformed response head: status code {status}")));
        }
        if status >= 200 || status == 101 {
            break (status, version, head);
        }
        if status == 100 && to_continue {
            return Ok(Answer::Continue);
        }
        interim += 1;
        if interim > MAX_INTERIM {
            return Err(WireError::TooLarge(format!(
                "more than {MAX_INTERIM} interim (1xx) responses before the final one"
            )));
        }
    };
    let rules = Rules::of(&head, "response");
    let no_body = request_was_head || matches!(status, 101 | 204 | 304);
    let keep_alive = rules.persistent(version);
    let framing = if no_body { Framing::None } else { framing(rules)? };
    Ok(Answer::Final(ResponseHead { status, version, head, framing, keep_alive }))
}

/// What a head says about its body's framing and its connection, gathered in one pass over its
/// fields.
struct Rules<'a> {
    /// The last element of the last `Transfer-Encoding` field (empty elements ignored, RFC 9110
    /// §5.6.1); `None` if there is no such field.
    coding: Option<&'a [u8]>,
    /// The number every `Content-Length` element gives (`None`: no such field), or the first
    /// element that is not a number or disagrees.
    length: Result<Option<u64>, WireError>,
    /// Whether a `Connection` element, in any of its fields, is `close`, and whether one is
    /// `keep-alive`.
    close: bool,
    keep_alive: bool,
}

impl<'a> Rules<'a> {
    /// The rules of `head`; `side` names the message in errors.
    fn of(head: &'a Head, side: &str) -> Rules<'a> {
        let mut rules = Rules { coding: None, length: Ok(None), close: false, keep_alive: false };
        for (name, value) in head.raw_fields() {
            if is_named(name, b"transfer-encoding") {
                if let Some(last) = elements(value).rfind(|coding| !coding.is_empty()) {
                    rules.coding = Some(last);
                }
            } else if is_named(name, b"content-length") {
                elements(value).for_each(|element| rules.add_length(element, side));
            } else if is_named(name, b"connection") {
                for element in elements(value) {
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

    /// Whether the connection stays open after this message (RFC 9112 §9.3): never when a
    /// `Connection` element is `close`, whatever else it lists; otherwise by default in HTTP/1.1
    /// and only on request (`keep-alive`) in HTTP/1.0. And never when the framing is suspect (§6.1):
    /// `Transfer-Encoding` with `Content-Length` (a sign of request smuggling), or
    /// `Transfer-Encoding` in HTTP/1.0, which does not have it (what the sender meant to end the
    /// message may be left in the connection).
    fn persistent(&self, version: u8) -> bool {
        let suspect = self.coding.is_some() && (version == 0 || !matches!(self.length, Ok(None)));
        let open = !self.close && (version == 1 || self.keep_alive);
        open && !suspect
    }
}

/// How a response's body is framed, by `Transfer-Encoding` then `Content-Length`;
/// [`Framing::Close`] if by neither.
fn framing(rules: Rules<'_>) -> Result<Framing, WireError> {
    match rules.coding {
        Some(coding) if coding.eq_ignore_ascii_case(b"chunked") => Ok(Framing::Chunked),
        Some(_) => Ok(Framing::Close),
        None => rules.length.map(|length| length.map_or(Framing::Close, Framing::Length)),
    }
}

/// Parses a response head, once complete, and copies it out of the read buffer: its length, status
/// code, minor version and head.
fn parse_response(buf: &[u8], max_headers: usize) -> Result<Option<(usize, u16, u8, Head)>, httparse::Error> {
    // httparse writes each field before it is read, so the array needs no initializing.
    let mut fields = [const { MaybeUninit::uninit() }; MAX_HEADERS_CAP];
    let mut res = httparse::Response::new(&mut []);
    let httparse::Status::Complete(len) = httparse::ParserConfig::default()
        // RFC 9112 §5.2: a user agent must accept obsolete line folding in a response, and replace
        // each fold with spaces (`Head::of_response` does).
        .allow_obsolete_multiline_headers_in_responses(true)
        .parse_response_with_uninit_headers(&mut res, buf, &mut fields[..max_headers.min(MAX_HEADERS_CAP)])?
    else {
        return Ok(None);
    };
    // A complete parse has set the code and the version.
    Ok(Some((len, res.code.unwrap_or_default(), res.version.unwrap_or_default(), Head::of_response(&buf[..len], &res))))
}

/// Reads until a complete response head is buffered, and consumes it: its status code, minor
/// version and head.
///
/// With `fresh`, a connection that closes (EOF, reset, aborted, broken pipe) before any byte
/// arrived is [`WireError::NoResponse`].
fn read_head<S: Read>(conn: &mut BufferedConn<S>, limits: &Limits, fresh: bool) -> Result<(u16, u8, Head), WireError> {
    // Bytes at the end of the buffer not yet parsed; a head can only have ended if they hold a LF.
    let mut new = conn.buffered().len();
    loop {
        let buf = conn.buffered();
        if buf[buf.len() - new..].contains(&b'\n') {
            match parse_response(buf, limits.max_headers) {
                Ok(Some((len, status, version, head))) if len <= limits.max_head => {
                    conn.consume(len);
                    return Ok((status, version, head));
                }
                Ok(_) => {}
                Err(e) => return Err(WireError::Malformed(format!("malformed response head: {e}"))),
            }
        }
        let got = buf.len();
        if got > limits.max_head {
            let max = limits.max_head;
            return Err(WireError::Malformed(format!("malformed response head: longer than {max} bytes")));
        }
        new = match conn.fill() {
            Ok(0) if fresh && got == 0 => return Err(WireError::NoResponse(None)),
            Ok(0) => return Err(WireError::Truncated(format!("response head cut short after {got} bytes"))),
            Ok(n) => n,
            Err(e) if fresh && got == 0 && super::is_disconnect(&e) => return Err(WireError::NoResponse(Some(e))),
            Err(e) => return Err(e.into()),
        };
    }
}
