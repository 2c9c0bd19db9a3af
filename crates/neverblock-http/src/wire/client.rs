//! The client role: request heads and bodies out, response heads in.
//!
//! The client sends a request with [`BufferedConn::send_request`] (a body in memory, or streamed
//! from a reader: by its length, or chunked) and reads the answer's head with
//! [`read_response_head`]; the body that follows is read with a [`Decoder`](super::body::Decoder)
//! over the same connection, framed as the head says.

use std::fmt;
use std::io::{self, Read, Write};

use url::{Position, Url};

use super::fields::{lists, FramingFields, LengthError};
use super::head::Head;
use super::read::{read_head, with_field_slots, Unread};
use super::write::{
    is_token, is_valid_field, send_bytes, send_streamed, write_content_length, write_field, Cause, Streamed,
};
use super::{every_byte, BufferedConn, Framing, Limits, WireError};

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
    pub(crate) fn send_request<F: AsRef<str>>(
        &mut self,
        head: &RequestHead<'_, F>,
        body: &mut Upload<'_>,
    ) -> Result<(), SendError> {
        self.out.clear();
        head.write_to(&mut self.out, body.declared());
        self.send_staged_and(body)
    }

    /// Writes `head` alone, announcing `body`, and flushes it: for a request that waits for the
    /// server's `100 Continue` before its body ([`send_body`](Self::send_body)).
    pub(crate) fn send_head<F: AsRef<str>>(
        &mut self,
        head: &RequestHead<'_, F>,
        body: &Upload<'_>,
    ) -> Result<(), SendError> {
        self.out.clear();
        head.write_to(&mut self.out, body.declared());
        self.send_staged_and(&mut Upload::Bytes(&[]))
    }

    /// Writes `body`, whose head went out already, and flushes it.
    pub(crate) fn send_body(&mut self, body: &mut Upload<'_>) -> Result<(), SendError> {
        self.out.clear();
        self.send_staged_and(body)
    }

    /// Writes what `out` holds (a head, or nothing), then `body`, and flushes them.
    fn send_staged_and(&mut self, body: &mut Upload<'_>) -> Result<(), SendError> {
        match body {
            Upload::Bytes(bytes) => send_bytes(&mut self.stream, &mut self.out, bytes).map_err(SendError::Conn)?,
            Upload::Reader { reader, len } => {
                let framing = len.map_or(Streamed::Chunked, Streamed::Sized);
                send_streamed(&mut self.stream, &mut self.out, &mut **reader, framing).map_err(|e| match e.cause {
                    Cause::Read(e) => SendError::Body(e),
                    Cause::Write(e) => SendError::Conn(e),
                })?;
            }
        }
        let staged = self.stream.write_all(&self.out);
        self.out.clear();
        staged.and_then(|()| self.stream.flush()).map_err(SendError::Conn)
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

/// A request head: the method, the URL (its host and port are the `Host` value), the request
/// target, and the caller's header fields (`String`s from a client `Request`, or borrowed, from a
/// request the proxy passes on).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestHead<'a, F> {
    pub(crate) method: &'a str,
    /// A parsed URL holds no CR, LF or NUL: the URL standard drops CR and LF, percent-encodes
    /// control characters in paths and queries, and refuses them in hosts.
    pub(crate) url: &'a Url,
    /// The path and query to ask for: the URL's own ([`RequestHead::to`]), or one the caller made,
    /// which [`check`](Self::check) looks at byte by byte.
    pub(crate) target: &'a str,
    pub(crate) headers: &'a [(F, F)],
}

impl<'a, F> RequestHead<'a, F> {
    /// The head of a request for `url`'s path and query.
    pub(crate) fn to(method: &'a str, url: &'a Url, headers: &'a [(F, F)]) -> RequestHead<'a, F> {
        RequestHead { method, url, target: &url[Position::BeforePath..Position::AfterQuery], headers }
    }
}

impl<F: AsRef<str>> RequestHead<'_, F> {
    /// Checks that the method is a token, that the target is visible ASCII or beyond (no blank or
    /// control byte could end the request line early), and that every header field may be written:
    /// a token name, a value without control bytes (no CR, LF or NUL could end the line or the head
    /// early and smuggle in another).
    ///
    /// # Errors
    ///
    /// [`WireError::Malformed`], naming the part.
    pub(crate) fn check(&self) -> Result<(), WireError> {
        let reject = |what: String| Err(WireError::Malformed(format!("malformed request head: {what}")));
        if !is_token(self.method) {
            return reject(format!("the method {:?} is not a token", self.method));
        }
        if self.target.is_empty() || !every_byte(self.target.as_bytes(), |b| b > b' ' && b != 0x7f) {
            return reject(format!("the target {:?} is not one word of visible characters", self.target));
        }
        let mut headers = self.headers.iter().map(|(name, value)| (name.as_ref(), value.as_ref()));
        match headers.find(|&(name, value)| !is_valid_field(name, value)) {
            Some((name, _)) if !is_token(name) => reject(format!("the header name {name:?} is not a token")),
            Some((name, _)) => reject(format!("a control byte in the value of header {name:?}")),
            None => Ok(()),
        }
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
            .filter(|(field, _)| field.as_ref().eq_ignore_ascii_case(name))
            .any(|(_, value)| lists(value.as_ref().as_bytes(), element.as_bytes()))
    }

    /// Appends the head to `out`: the request line, `Host`, the header fields, and the framing of
    /// `body`. Write only a head that passed [`check`](Self::check).
    pub(crate) fn write_to(&self, out: &mut Vec<u8>, body: Declared) {
        // The host, and the port unless it is the scheme's default (which the URL does not keep).
        let host = &self.url[Position::BeforeHost..Position::AfterPort];
        for part in [self.method, " ", self.target, " HTTP/1.1\r\nHost: ", host, "\r\n"] {
            out.extend_from_slice(part.as_bytes());
        }
        let is_framing =
            |name: &str| name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("transfer-encoding");
        let streamed = !matches!(body, Declared::Bytes(_));
        for (name, value) in self.headers.iter().filter(|(name, _)| !(streamed && is_framing(name.as_ref()))) {
            write_field(out, name.as_ref(), value.as_ref().as_bytes());
        }
        match body {
            Declared::Bytes(len) => {
                let framed = self.headers.iter().any(|(name, _)| is_framing(name.as_ref()));
                if !framed && (len > 0 || matches!(self.method, "POST" | "PUT" | "PATCH")) {
                    write_content_length(out, len as u64);
                }
            }
            Declared::Length(len) => write_content_length(out, len),
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
        let StatusHead { status, version, head } = read_one_head(conn, limits, interim == 0)?;
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
    let fields = FramingFields::of(&head, |_, _| {});
    let no_body = request_was_head || matches!(status, 101 | 204 | 304);
    let keep_alive = persistent(&fields, version);
    let framing = if no_body { Framing::None } else { framing(&fields)? };
    Ok(Answer::Final(ResponseHead { status, version, head, framing, keep_alive }))
}

/// Whether the connection stays open after this response: as its sender says (RFC 9112 §9.3),
/// and never when the framing is suspect (§6.1): `Transfer-Encoding` with `Content-Length` (a
/// sign of request smuggling), or `Transfer-Encoding` in HTTP/1.0, which does not have it (what
/// the sender meant to end the message may be left in the connection).
fn persistent(fields: &FramingFields<'_>, version: u8) -> bool {
    let suspect = fields.codings > 0 && (version == 0 || !matches!(fields.length, Ok(None)));
    fields.keeps_open(version) && !suspect
}

/// How a response's body is framed (RFC 9112 §6.3): chunked when that is the last transfer coding,
/// until the connection closes for any other coding; else by `Content-Length`, or until the
/// connection closes without one.
fn framing(fields: &FramingFields<'_>) -> Result<Framing, WireError> {
    if fields.codings > 0 {
        return Ok(if fields.chunked_last { Framing::Chunked } else { Framing::Close });
    }
    match &fields.length {
        Ok(length) => Ok(length.map_or(Framing::Close, Framing::Length)),
        Err(LengthError::Invalid(value)) => {
            Err(WireError::Malformed(format!("malformed response head: invalid Content-Length {value:?}")))
        }
        Err(LengthError::Differ(first, n)) => {
            Err(WireError::Malformed(format!("malformed response head: Content-Length {first} and {n}")))
        }
    }
}

/// A response head as read: its status code, minor version and fields.
struct StatusHead {
    status: u16,
    version: u8,
    head: Head,
}

/// Reads one response head and consumes it.
///
/// With `fresh`, a connection that closes (EOF, reset, aborted, broken pipe) before any byte
/// arrived is [`WireError::NoResponse`].
fn read_one_head<S: Read>(conn: &mut BufferedConn<S>, limits: &Limits, fresh: bool) -> Result<StatusHead, WireError> {
    let parse = |conn: &mut BufferedConn<S>, ended: bool| match ended {
        true => parse_response(conn.buffered(), limits.max_headers),
        false => Ok(None),
    };
    read_head(conn, limits.max_head, parse).map_err(|unread| match unread {
        Unread::Closed(e) if fresh => WireError::NoResponse(e),
        Unread::Closed(_) => WireError::Truncated("response head cut short after 0 bytes".to_owned()),
        Unread::CutShort { got } => WireError::Truncated(format!("response head cut short after {got} bytes")),
        Unread::Failed { error, .. } => WireError::Io(error),
        Unread::TooLong => {
            WireError::Malformed(format!("malformed response head: longer than {} bytes", limits.max_head))
        }
        Unread::Refused(e) => WireError::Malformed(format!("malformed response head: {e}")),
    })
}

/// Parses a response head, once complete, and copies it out of the read buffer: its length, and
/// the head.
fn parse_response(buf: &[u8], max_headers: usize) -> Result<Option<(usize, StatusHead)>, httparse::Error> {
    with_field_slots(max_headers, |fields| {
        let mut res = httparse::Response::new(&mut []);
        let httparse::Status::Complete(len) = httparse::ParserConfig::default()
            // RFC 9112 §5.2: a user agent must accept obsolete line folding in a response, and
            // replace each fold with spaces (`Head::of_response` does).
            .allow_obsolete_multiline_headers_in_responses(true)
            .parse_response_with_uninit_headers(&mut res, buf, fields)?
        else {
            return Ok(None);
        };
        // A complete parse has set the code and the version.
        let (status, version) = (res.code.unwrap_or_default(), res.version.unwrap_or_default());
        Ok(Some((len, StatusHead { status, version, head: Head::of_response(&buf[..len], &res) })))
    })
}
