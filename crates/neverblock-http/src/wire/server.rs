//! The server role: request heads in, checked as strictly as RFC 9112 allows, and response heads
//! out.
//!
//! What a request may not be is refused here, each with the status RFC 9110/9112 names: a request
//! line over the limit (414); a head over the limit or with too many fields (431); a version other
//! than HTTP/1.0 or 1.1 (505); a transfer coding other than `chunked` (501); an `Expect` other than
//! `100-continue` (417); a declared body over the limit (413); and as 400 everything two parsers
//! could read two ways, which is how requests are smuggled: `Transfer-Encoding` together with
//! `Content-Length`, `Content-Length`s that differ or are not plain decimals, `chunked` not last
//! or twice, an empty `Transfer-Encoding`, `Transfer-Encoding` in HTTP/1.0, a `Host` missing (in
//! HTTP/1.1), repeated or not a host, and (by httparse) obsolete line folding, whitespace before a
//! colon, and control bytes in a field.

use std::borrow::Cow;
use std::io::{self, Read};
use std::mem::MaybeUninit;
use std::ops::Range;

use super::fields::{FramingFields, LengthError};
use super::head::Head;
use super::read::{read_head, with_field_slots, Unread};
use super::{every_byte, is_named, BufferedConn, Framing, Limits};

/// A request the server answers itself with `status`, then closes the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) status: u16,
    /// What was wrong, for the response's body and the log.
    pub(crate) why: Cow<'static, str>,
}

impl Refusal {
    fn new(status: u16, why: impl Into<Cow<'static, str>>) -> Refusal {
        Refusal { status, why: why.into() }
    }
}

/// Why no request head could be read.
#[derive(Debug)]
pub(crate) enum HeadError {
    /// The connection closed (or was reset) before any byte of a request.
    Closed,
    /// Reading failed or timed out; `partial` when some of the head had arrived.
    Io { error: io::Error, partial: bool },
    /// The head is not one the server takes.
    Refused(Refusal),
    /// The request line does not end in `HTTP/…`: the client speaks another protocol (HTTP/2
    /// without its preface, say), to which an HTTP/1 answer would mean nothing. RFC 9112 §3's
    /// 400 is a SHOULD; such a client gets the connection closed instead, as RFC 9113 §3.4 asks
    /// of a broken HTTP/2 preface.
    NotHttp,
}

/// What the server needs to know of a request to frame it and answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub(crate) version: u8,
    /// How its body is framed: [`Framing::None`], a length, or chunked.
    pub(crate) framing: Framing,
    /// Whether the client wants the connection kept open after the response.
    pub(crate) keep_alive: bool,
    /// Whether the client waits for `100 Continue` before sending its body.
    pub(crate) expect_continue: bool,
    /// Where the path lies in the target (for `*`: the whole `*`).
    pub(crate) path: Range<usize>,
    /// Where the query lies in the target, after its `?`.
    pub(crate) query: Option<Range<usize>>,
}

/// Reads until a whole request head is buffered, parses it into `head`, and consumes it; returns
/// its minor version.
///
/// # Errors
///
/// See [`HeadError`].
pub(crate) fn read_request_head<S: Read>(
    conn: &mut BufferedConn<S>,
    limits: &Limits,
    head: &mut Head,
) -> Result<u8, HeadError> {
    let parse = |conn: &mut BufferedConn<S>, ended: bool| {
        skip_empty_lines(conn);
        let buf = conn.buffered();
        check_request_line(buf, limits.max_line).map_err(HeadError::Refused)?;
        match ended {
            true => parse_request(buf, limits.max_headers, head).map_err(|e| match e {
                httparse::Error::Version if !ends_in_http(buf) => HeadError::NotHttp,
                e => HeadError::Refused(refusal(e, buf)),
            }),
            false => Ok(None),
        }
    };
    read_head(conn, limits.max_head, parse).map_err(|unread| match unread {
        Unread::Closed(None) => HeadError::Closed,
        Unread::Closed(Some(error)) => HeadError::Io { error, partial: false },
        Unread::CutShort { got } => {
            let error = io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the request head was cut short after {got} bytes"),
            );
            HeadError::Io { error, partial: true }
        }
        Unread::Failed { error, got } => HeadError::Io { error, partial: got > 0 },
        Unread::TooLong => {
            let max = limits.max_head;
            HeadError::Refused(Refusal::new(431, format!("the request head is longer than {max} bytes")))
        }
        Unread::Refused(error) => error,
    })
}

/// Consumes the empty lines before a request line (RFC 9112 §2.2 lets a server skip them), so that
/// however many a client sends, they are neither kept nor parsed again with every read.
fn skip_empty_lines<S>(conn: &mut BufferedConn<S>) {
    let buf = conn.buffered();
    let mut n = 0;
    while let Some(end) = [b"\r\n".as_slice(), b"\n"].iter().find(|end| buf[n..].starts_with(end)) {
        n += end.len();
    }
    conn.consume(n);
}

/// Refuses (414) a request line longer than `max` bytes, complete or not; blank lines before it
/// are skipped, as RFC 9112 §2.2 allows.
fn check_request_line(buf: &[u8], max: usize) -> Result<(), Refusal> {
    if buf.len() <= max {
        return Ok(()); // no line in it can be longer
    }
    let line = &buf[buf.iter().take_while(|&&b| b == b'\r' || b == b'\n').count()..];
    let scan = &line[..line.len().min(max + 2)];
    let end = scan.iter().position(|&b| b == b'\n').unwrap_or(scan.len());
    if end - usize::from(scan[..end].ends_with(b"\r")) > max {
        return Err(Refusal::new(414, format!("the request line is longer than {max} bytes")));
    }
    Ok(())
}

/// Parses a request head once complete, into `head`; returns its length and minor version. Out of
/// line: the field slots on its stack are not part of the reader's frame while it waits.
#[inline(never)]
fn parse_request(buf: &[u8], max_headers: usize, head: &mut Head) -> Result<Option<(usize, u8)>, httparse::Error> {
    with_field_slots(max_headers, |fields| parse_into(buf, fields, head))
}

/// [`parse_request`] with the fields in `fields`.
fn parse_into<'b>(
    buf: &'b [u8],
    fields: &mut [MaybeUninit<httparse::Header<'b>>],
    head: &mut Head,
) -> Result<Option<(usize, u8)>, httparse::Error> {
    let mut req = httparse::Request::new(&mut []);
    let httparse::Status::Complete(len) =
        httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut req, buf, fields)?
    else {
        return Ok(None);
    };
    head.set_request(&buf[..len], &req);
    // A complete parse has set the version.
    Ok(Some((len, req.version.unwrap_or_default())))
}

/// The refusal for a head httparse rejected; `buf` is the head so far.
fn refusal(e: httparse::Error, buf: &[u8]) -> Refusal {
    match e {
        httparse::Error::TooManyHeaders => Refusal::new(431, "too many header fields"),
        httparse::Error::Version if names_a_version(buf) => Refusal::new(505, "only HTTP/1.0 and HTTP/1.1 are served"),
        e => Refusal::new(400, format!("malformed request head: {e}")),
    }
}

/// The last word of the request line in `buf`, where its version goes.
fn version_word(buf: &[u8]) -> &[u8] {
    let line = buf.split(|&b| b == b'\n').find(|l| !l.trim_ascii().is_empty()).unwrap_or_default();
    line.trim_ascii_end().rsplit(|&b| b == b' ').next().unwrap_or_default()
}

/// Whether the request line in `buf` ends in `HTTP/`, well-formed or not.
fn ends_in_http(buf: &[u8]) -> bool {
    version_word(buf).starts_with(b"HTTP/")
}

/// Whether the request line in `buf` ends in a well-formed `HTTP/<digit>.<digit>` (or `HTTP/<digit>`).
fn names_a_version(buf: &[u8]) -> bool {
    let Some(number) = version_word(buf).strip_prefix(b"HTTP/") else { return false };
    matches!(number, [major] | [major, b'.', b'0'..=b'9'] if major.is_ascii_digit())
}

/// Checks a parsed request's framing, `Host`, `Expect` and target, and says how to answer it.
///
/// # Errors
///
/// The [`Refusal`] to answer it with (see the module's doc).
pub(crate) fn check_request(head: &Head, version: u8, limits: &Limits) -> Result<Message, Refusal> {
    let (mut hosts, mut bad_host, mut expect_continue, mut bad_expect) = (0, None, false, None);
    let fields = FramingFields::of(head, |name, value| {
        if is_named(name, b"host") {
            hosts += 1;
            if !is_valid_host(value) {
                bad_host.get_or_insert(value);
            }
        } else if is_named(name, b"expect") && version == 1 {
            if value.eq_ignore_ascii_case(b"100-continue") {
                expect_continue = true;
            } else {
                bad_expect.get_or_insert(value);
            }
        }
    });
    if let Some(value) = bad_host {
        let value = String::from_utf8_lossy(value);
        return Err(Refusal::new(400, format!("the Host {value:?} is not a host and port")));
    }
    if let Some(value) = bad_expect {
        let value = String::from_utf8_lossy(value);
        return Err(Refusal::new(417, format!("the expectation {value:?} is not one this server meets")));
    }
    if hosts > 1 || (version == 1 && hosts == 0) {
        return Err(Refusal::new(400, "an HTTP/1.1 request needs exactly one Host field"));
    }
    let framing = request_framing(&fields, version, limits)?;
    let (path, query) = target_parts(head.method(), head.target())?;
    Ok(Message {
        version,
        framing,
        keep_alive: fields.keeps_open(version),
        expect_continue: expect_continue && framing != Framing::None,
        path,
        query,
    })
}

/// How a request's body is framed (RFC 9112 §6.3, a server's rules): by `chunked` as the last and
/// only-once transfer coding, or by one `Content-Length`, or it has none. Whatever two parsers
/// could read two ways is refused.
fn request_framing(fields: &FramingFields<'_>, version: u8, limits: &Limits) -> Result<Framing, Refusal> {
    if fields.codings > 0 && version == 0 {
        return Err(Refusal::new(400, "Transfer-Encoding in an HTTP/1.0 request"));
    }
    if fields.empty_coding_field {
        return Err(Refusal::new(400, "an empty Transfer-Encoding"));
    }
    if fields.chunked > 1 {
        return Err(Refusal::new(400, "chunked applied twice"));
    }
    let length = match &fields.length {
        Ok(length) => *length,
        Err(LengthError::Invalid(value)) => return Err(Refusal::new(400, format!("invalid Content-Length {value:?}"))),
        Err(LengthError::Differ(..)) => return Err(Refusal::new(400, "Content-Length fields that differ")),
    };
    match (fields.codings, length) {
        (0, None) => Ok(Framing::None),
        (0, Some(n)) if n > limits.max_body => {
            let max = limits.max_body;
            Err(Refusal::new(413, format!("the body of {n} bytes is longer than the limit of {max}")))
        }
        (0, Some(n)) => Ok(Framing::Length(n)),
        (_, Some(_)) => Err(Refusal::new(400, "both Transfer-Encoding and Content-Length")),
        (_, None) if fields.other_coding.is_some() => {
            let coding = String::from_utf8_lossy(fields.other_coding.unwrap_or_default());
            Err(Refusal::new(501, format!("the transfer coding {coding:?} is not implemented")))
        }
        (_, None) if fields.chunked_last => Ok(Framing::Chunked),
        (_, None) => Err(Refusal::new(400, "chunked is not the last transfer coding")),
    }
}

/// Whether `value` may be a `Host` field's (RFC 9112 §3.2): `uri-host [":" port]`, whose bytes are
/// those of a registered name, an IP literal in brackets, or an IPv4 address (empty is allowed:
/// a target without an authority). Only the bytes are checked, as Go's `ValidHostHeader` does.
fn is_valid_host(value: &[u8]) -> bool {
    every_byte(value, |b| HOST_BYTES[usize::from(b)])
}

/// The bytes a `Host` value may hold: letters, digits and `-._~%!$&'()*+,;=:[]`, one lookup a byte.
const HOST_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let others = b"-._~%!$&'()*+,;=:[]";
    let mut i = 0;
    while i < others.len() {
        table[others[i] as usize] = true;
        i += 1;
    }
    table
};

/// Where the path and the query lie in `target`, by its form (RFC 9112 §3.2): origin (`/a?b`),
/// absolute (`http://h/a?b`), or `*` for `OPTIONS`. `CONNECT`'s authority form is not served.
pub(crate) fn target_parts(method: &str, target: &str) -> Result<(Range<usize>, Option<Range<usize>>), Refusal> {
    if method == "CONNECT" {
        return Err(Refusal::new(501, "CONNECT is not implemented"));
    }
    if target == "*" {
        return match method {
            "OPTIONS" => Ok((0..1, None)),
            _ => Err(Refusal::new(400, "the target * is only for OPTIONS")),
        };
    }
    let start = if target.starts_with('/') {
        0
    } else {
        let scheme = target.find("://").filter(|&i| {
            let scheme = &target[..i];
            scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
        });
        let Some(scheme_end) = scheme else { return Err(Refusal::new(400, "the request target has no path")) };
        let authority = scheme_end + 3;
        target[authority..].find(['/', '?']).map_or(target.len(), |i| authority + i)
    };
    // A byte search: a `str` search for a `char` costs several times more on a short target.
    Ok(match target.as_bytes()[start..].iter().position(|&b| b == b'?') {
        Some(q) => (start..start + q, Some(start + q + 1..target.len())),
        None => (start..target.len(), None),
    })
}

/// Appends a status line, `HTTP/1.1 <status> <reason>`.
pub(crate) fn write_status_line(out: &mut Vec<u8>, status: u16, reason: &str) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(&three_digits(status));
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `status` (100..=999) as three ASCII digits.
fn three_digits(status: u16) -> [u8; 3] {
    let s = status.clamp(100, 999);
    [b'0' + (s / 100) as u8, b'0' + (s / 10 % 10) as u8, b'0' + (s % 10) as u8]
}

/// The reason phrase RFC 9110 gives `status`; empty for a code it does not name.
pub(crate) fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

#[cfg(test)]
mod tests;
