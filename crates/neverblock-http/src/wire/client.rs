//! The client role: request heads out, whole responses in.
//!
//! The client sends a request with [`BufferedConn::send_request`] and reads the answer with
//! [`read_response`]. A response is returned only once it was read whole, and reports its
//! connection as reusable only if its end was framed and the server did not ask to close.

use std::io::{self, Read, Write};
use std::mem::MaybeUninit;

use url::{Position, Url};

use super::body::Decoder;
use super::head::Head;
use super::{decimal, elements, is_named, BufferedConn, Framing, Limits, WireError, MAX_HEADERS_CAP};

/// The longest request body sent in one write with its head; a longer one is written after it,
/// not copied.
pub(crate) const COALESCE: usize = 16 * 1024;

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

/// A final response, read whole.
#[derive(Debug)]
pub(crate) struct ReceivedResponse {
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
/// for invalid framing, a head longer than `limits.max_head` or with more than
/// `limits.max_headers` fields; [`WireError::TooLarge`] for a body longer than `limits.max_body`;
/// [`WireError::Io`] for any other stream error, such as `TimedOut`.
pub(crate) fn read_response<S: Read>(
    conn: &mut BufferedConn<S>,
    request_was_head: bool,
    limits: &Limits,
) -> Result<ReceivedResponse, WireError> {
    let mut fresh = true;
    let mut res = loop {
        let res = read_head(conn, limits, fresh)?.ok_or(WireError::NoResponse)?;
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
    let framing = if no_body { Framing::None } else { framing(rules)? };
    res.body = read_body(conn, framing, limits)?;
    res.reusable = res.status != 101 && framing != Framing::Close && persistent;
    Ok(res)
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
            if is_named(name, b"transfer-encoding") {
                rules.coding = elements(value).next_back();
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

    /// Whether the connection stays open after this message: by default in HTTP/1.1 and only on
    /// request in HTTP/1.0, and never when `Transfer-Encoding` and `Content-Length` disagree about
    /// the framing (RFC 9112 §6.1: a sign of request smuggling).
    fn persistent(&self, version: u8) -> bool {
        let ambiguous = self.coding.is_some() && !matches!(self.length, Ok(None));
        let open = if version == 1 { !self.close } else { self.keep_alive };
        open && !ambiguous
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

/// Parses a response head, once complete, and copies it out of the read buffer.
fn parse_response(buf: &[u8], max_headers: usize) -> Result<Option<(usize, ReceivedResponse)>, httparse::Error> {
    // httparse writes each field before it is read, so the array needs no initializing.
    let mut fields = [const { MaybeUninit::uninit() }; MAX_HEADERS_CAP];
    let mut res = httparse::Response::new(&mut []);
    let httparse::Status::Complete(len) = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut res,
        buf,
        &mut fields[..max_headers.min(MAX_HEADERS_CAP)],
    )?
    else {
        return Ok(None);
    };
    Ok(Some((
        len,
        ReceivedResponse {
            // A complete parse has set the code and the version.
            status: res.code.unwrap_or_default(),
            version: res.version.unwrap_or_default(),
            head: Head::of_response(&buf[..len], &res),
            body: Vec::new(),
            reusable: false,
        },
    )))
}

/// Reads until a complete response head is buffered, and consumes it.
///
/// Returns `Ok(None)` if `fresh` and the connection closed (EOF, reset, aborted, broken pipe)
/// before any byte arrived.
fn read_head<S: Read>(
    conn: &mut BufferedConn<S>,
    limits: &Limits,
    fresh: bool,
) -> Result<Option<ReceivedResponse>, WireError> {
    // Bytes at the end of the buffer not yet parsed; a head can only have ended if they hold a LF.
    let mut new = conn.buffered().len();
    loop {
        let buf = conn.buffered();
        if buf[buf.len() - new..].contains(&b'\n') {
            match parse_response(buf, limits.max_headers) {
                Ok(Some((len, head))) if len <= limits.max_head => {
                    conn.consume(len);
                    return Ok(Some(head));
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
            Ok(0) if fresh && got == 0 => return Ok(None),
            Ok(0) => return Err(WireError::Truncated(format!("response head cut short after {got} bytes"))),
            Ok(n) => n,
            Err(e) if fresh && got == 0 && super::is_disconnect(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
    }
}

/// Reads and consumes a body framed by `framing`.
fn read_body<S: Read>(conn: &mut BufferedConn<S>, framing: Framing, limits: &Limits) -> Result<Vec<u8>, WireError> {
    let mut decoder = Decoder::new(framing, limits, "response")?;
    let mut body = match framing {
        // Room for the whole body up front, but never more than 1 MiB on a length's word.
        Framing::Length(n) => Vec::with_capacity(usize::try_from(n).unwrap_or(usize::MAX).min(1 << 20)),
        _ => Vec::new(),
    };
    loop {
        let bytes = decoder.fill_buf(conn)?;
        if bytes.is_empty() {
            return Ok(body);
        }
        body.extend_from_slice(bytes);
        let n = bytes.len();
        decoder.consume(conn, n);
    }
}
