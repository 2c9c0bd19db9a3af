//! What a handler returns: a status, header fields, and a body that is bytes (its own or shared
//! with a cache), a stream, or a range of a file the server sends with `sendfile(2)`.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::rc::Rc;

use crate::wire::server::reason_phrase;
use crate::wire::write::is_valid_field;

/// A response: status, header fields, body.
///
/// The server writes `Date` (unless set here), and frames the body itself: `Content-Length` when
/// the body's length is known, else `Transfer-Encoding: chunked` (HTTP/1.1) or the end of the
/// connection (HTTP/1.0), and on HTTP/2 DATA frames until the stream ends; `Content-Length` and
/// `Transfer-Encoding` set here are dropped (but for `Content-Length` with an empty body answering
/// HEAD, which describes the GET response, unless the status is 204). 204 and 304 responses carry
/// no body. `Connection: close` set here closes the connection after the response on HTTP/1.1; on
/// HTTP/2 it and the other connection-specific fields (`Connection`, `Keep-Alive`,
/// `Proxy-Connection`, `Transfer-Encoding`, `Upgrade`) are dropped, as RFC 9113 §8.2.2 requires.
///
/// # Examples
///
/// ```
/// use neverblock_http::server::{Body, Response};
///
/// let hello = Response::new(200).header("Content-Type", "text/plain").body("hello\n");
/// assert_eq!(hello.status(), 200);
/// assert_eq!(hello.header_value("content-type"), Some("text/plain"));
/// assert_eq!(hello.body_ref().len(), Some(6));
///
/// let streamed = Response::new(200).body(Body::reader(std::io::repeat(b'x').take(1000)));
/// assert_eq!(streamed.body_ref().len(), None, "sent chunked");
/// # use std::io::Read;
/// ```
pub struct Response {
    status: u16,
    headers: Vec<(Cow<'static, str>, FieldValue)>,
    /// Whether a field was added that cannot be written (each is checked as it is added, once).
    has_invalid_field: bool,
    body: Body,
}

impl Response {
    /// A response with `status` (200..=999), no fields and an empty body.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Response;
    ///
    /// let gone = Response::new(410);
    /// assert_eq!((gone.status(), gone.body_ref().len()), (410, Some(0)));
    /// ```
    pub fn new(status: u16) -> Response {
        // Room for the fields a response usually gets (the static files' six) in one allocation.
        Response { status, headers: Vec::with_capacity(8), has_invalid_field: false, body: Body::Empty }
    }

    /// The server's own kind of answer: `status` with a line of plain text saying why, as the
    /// server answers what it refuses (`413 Content Too Large: ...`). For handlers that refuse a
    /// request in the same voice.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Body, Response};
    ///
    /// let refused = Response::error(403, "not yours");
    /// assert_eq!(refused.header_value("content-type"), Some("text/plain; charset=utf-8"));
    /// assert!(matches!(refused.body_ref(), Body::Bytes(text) if &text[..] == b"403 Forbidden: not yours\n"));
    /// ```
    pub fn error(status: u16, why: &str) -> Response {
        Response::new(status)
            .header("Content-Type", "text/plain; charset=utf-8")
            .body(format!("{status} {}: {why}\n", reason_phrase(status)))
    }

    /// Adds a header field. Names and values with control bytes (CR, LF, NUL …) are refused when
    /// the response is sent: the server answers 500 instead, and logs why.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Response;
    ///
    /// let cached = Response::new(200).header("Cache-Control", "max-age=60").header("X-Served-By", format!("loop {}", 1));
    /// assert_eq!(cached.header_value("cache-control"), Some("max-age=60"));
    /// ```
    pub fn header(mut self, name: impl Into<Cow<'static, str>>, value: impl Into<Cow<'static, str>>) -> Response {
        self.append_header(name, value);
        self
    }

    /// Sets the body.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Response;
    ///
    /// let hello = Response::new(200).body("hello\n");
    /// assert_eq!(hello.body_ref().len(), Some(6));
    /// ```
    pub fn body(mut self, body: impl Into<Body>) -> Response {
        self.body = body.into();
        self
    }

    /// The status code.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Response;
    ///
    /// assert_eq!(Response::new(404).status(), 404);
    /// ```
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Changes the status code.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Response;
    ///
    /// let mut response = Response::new(200);
    /// response.set_status(503);
    /// assert_eq!(response.status(), 503);
    /// ```
    pub fn set_status(&mut self, status: u16) {
        self.status = status;
    }

    /// The value of the first field called `name` (any case).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Response;
    ///
    /// let response = Response::new(200).header("Content-Type", "text/plain");
    /// assert_eq!(response.header_value("CONTENT-TYPE"), Some("text/plain"));
    /// assert_eq!(response.header_value("etag"), None);
    /// ```
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Every field, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Response;
    ///
    /// let response = Response::new(200).header("Link", "</a.css>").header("Link", "</b.js>");
    /// let links: Vec<&str> = response.headers().filter(|(name, _)| *name == "Link").map(|(_, v)| v).collect();
    /// assert_eq!(links, ["</a.css>", "</b.js>"]);
    /// ```
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers.iter().map(|(n, v)| (&**n, v.as_str()))
    }

    /// Adds a field to a response already built.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Response;
    ///
    /// let mut response = Response::new(200);
    /// response.append_header("Vary", "Accept-Encoding");
    /// assert_eq!(response.header_value("vary"), Some("Accept-Encoding"));
    /// ```
    pub fn append_header(&mut self, name: impl Into<Cow<'static, str>>, value: impl Into<Cow<'static, str>>) {
        let (name, value) = (name.into(), value.into());
        self.has_invalid_field |= !is_valid_field(&name, &value);
        self.headers.push((name, FieldValue::Text(value)));
    }

    /// Adds a field valid by construction (a token for a name, a value from a parser or a
    /// formatter that writes no control byte: one the server made itself, or one the proxy passes
    /// on from a head its parser accepted): not checked again. A value shared with other responses
    /// (an `Rc<str>`, a file's tag say) is not copied.
    pub(crate) fn append_valid_header(&mut self, name: impl Into<Cow<'static, str>>, value: impl Into<FieldValue>) {
        let (name, value) = (name.into(), value.into());
        debug_assert!(is_valid_field(&name, value.as_str()), "{name:?}: {value:?}");
        self.headers.push((name, value));
    }

    /// The first field that cannot be written in a head (a name that is not a token, a value with
    /// a control byte), if one was added and is still there.
    pub(crate) fn invalid_field(&self) -> Option<(&str, &str)> {
        match self.has_invalid_field {
            true => self.headers().find(|(name, value)| !is_valid_field(name, value)),
            false => None,
        }
    }

    /// Removes every field called `name` (any case); returns the first one's value.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Response;
    ///
    /// let mut response = Response::new(200).header("X-Internal", "a").header("x-internal", "b");
    /// assert_eq!(response.remove_header("X-INTERNAL").as_deref(), Some("a"));
    /// assert_eq!(response.headers().count(), 0);
    /// ```
    pub fn remove_header(&mut self, name: &str) -> Option<Cow<'static, str>> {
        // The usual call finds nothing: a look at each name, and no list rewritten.
        if !self.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            return None;
        }
        let mut first = None;
        self.headers.retain_mut(|(n, v)| {
            let matched = n.eq_ignore_ascii_case(name);
            if matched && first.is_none() {
                first = Some(std::mem::replace(v, FieldValue::Text(Cow::Borrowed(""))).into_text());
            }
            !matched
        });
        first
    }

    /// The body.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Body, Response};
    ///
    /// let response = Response::new(200).body(vec![0u8; 3]);
    /// assert!(matches!(response.body_ref(), Body::Bytes(bytes) if bytes.len() == 3));
    /// ```
    pub fn body_ref(&self) -> &Body {
        &self.body
    }

    /// Takes the body out, leaving it empty.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Response;
    ///
    /// let mut response = Response::new(200).body("text");
    /// let body = response.take_body();
    /// assert_eq!((body.len(), response.body_ref().len()), (Some(4), Some(0)));
    /// ```
    pub fn take_body(&mut self) -> Body {
        std::mem::replace(&mut self.body, Body::Empty)
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body", &self.body)
            .finish()
    }
}

/// A field's value: text the response owns or borrows for good, or shared with other responses.
pub(crate) enum FieldValue {
    Text(Cow<'static, str>),
    Shared(Rc<str>),
}

impl FieldValue {
    fn as_str(&self) -> &str {
        match self {
            FieldValue::Text(text) => text,
            FieldValue::Shared(shared) => shared,
        }
    }

    fn into_text(self) -> Cow<'static, str> {
        match self {
            FieldValue::Text(text) => text,
            FieldValue::Shared(shared) => Cow::Owned(shared.to_string()),
        }
    }
}

impl From<&'static str> for FieldValue {
    fn from(text: &'static str) -> FieldValue {
        FieldValue::Text(Cow::Borrowed(text))
    }
}

impl From<String> for FieldValue {
    fn from(text: String) -> FieldValue {
        FieldValue::Text(Cow::Owned(text))
    }
}

impl From<Cow<'static, str>> for FieldValue {
    fn from(text: Cow<'static, str>) -> FieldValue {
        FieldValue::Text(text)
    }
}

impl From<Rc<str>> for FieldValue {
    fn from(shared: Rc<str>) -> FieldValue {
        FieldValue::Shared(shared)
    }
}

impl fmt::Debug for FieldValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// A response body.
///
/// # Examples
///
/// ```
/// use neverblock_http::server::Body;
///
/// let path = std::env::temp_dir().join(format!("body-doc-{}", std::process::id()));
/// std::fs::write(&path, b"0123456789").unwrap();
/// let tail = Body::file(std::fs::File::open(&path).unwrap(), 4, 6);
/// assert_eq!(tail.len(), Some(6));
/// assert_eq!(Body::from("text").len(), Some(4));
/// # std::fs::remove_file(path).unwrap();
/// ```
#[non_exhaustive]
pub enum Body {
    /// No body.
    Empty,
    /// These bytes.
    Bytes(Cow<'static, [u8]>),
    /// These bytes, shared with whoever else holds them (a cache of the handler's): sent as
    /// [`Bytes`](Body::Bytes) are, without a copy of their own for the response.
    Shared(Rc<[u8]>),
    /// What `reader` yields: `len` bytes, or (`None`) until it ends, sent chunked (on HTTP/2, in
    /// DATA frames either way).
    Reader {
        /// Read on the request's fiber, in pieces of up to 32 KiB. If it fails (an error, a
        /// panic, or fewer than `len` bytes) before the first piece, the client gets a 500 instead;
        /// after, the response is cut short: on HTTP/1.1 the connection closes, on HTTP/2 the
        /// stream is reset (`INTERNAL_ERROR`).
        reader: Box<dyn Read>,
        /// How many bytes it yields, when known.
        len: Option<u64>,
    },
    /// `len` bytes of `file` from `offset`, sent by the kernel (`sendfile(2)`) in bounded pieces;
    /// a piece not in the page cache is read into it on the blocking pool first. Over TLS and on
    /// HTTP/2, where the kernel cannot send the file itself, it is read in pieces the same way
    /// (at once from the page cache, else on the blocking pool) and sent encrypted or in frames.
    File {
        /// The open file.
        file: Rc<File>,
        /// Where the range starts.
        offset: u64,
        /// How long it is.
        len: u64,
    },
}

impl Body {
    /// A stream of unknown length, sent chunked.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Body;
    ///
    /// let lines = Body::reader(std::io::Cursor::new(b"one\ntwo\n".to_vec()));
    /// assert_eq!(lines.len(), None);
    /// ```
    pub fn reader(reader: impl Read + 'static) -> Body {
        Body::Reader { reader: Box::new(reader), len: None }
    }

    /// A stream of exactly `len` bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Read;
    /// use neverblock_http::server::Body;
    ///
    /// let zeros = Body::sized_reader(std::io::repeat(0).take(1 << 20), 1 << 20);
    /// assert_eq!(zeros.len(), Some(1 << 20));
    /// ```
    pub fn sized_reader(reader: impl Read + 'static, len: u64) -> Body {
        Body::Reader { reader: Box::new(reader), len: Some(len) }
    }

    /// `len` bytes of `file` from `offset`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Body;
    ///
    /// let path = std::env::temp_dir().join(format!("body-file-doc-{}", std::process::id()));
    /// std::fs::write(&path, b"0123456789").unwrap();
    /// let middle = Body::file(std::fs::File::open(&path).unwrap(), 2, 5);
    /// assert_eq!(middle.len(), Some(5));
    /// # std::fs::remove_file(path).unwrap();
    /// ```
    pub fn file(file: File, offset: u64, len: u64) -> Body {
        Body::File { file: Rc::new(file), offset, len }
    }

    /// The body's length, when known.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Body;
    ///
    /// assert_eq!(Body::from("four").len(), Some(4));
    /// assert_eq!(Body::reader(std::io::empty()).len(), None);
    /// ```
    pub fn len(&self) -> Option<u64> {
        match self {
            Body::Empty => Some(0),
            Body::Bytes(bytes) => Some(bytes.len() as u64),
            Body::Shared(bytes) => Some(bytes.len() as u64),
            Body::Reader { len, .. } => *len,
            Body::File { len, .. } => Some(*len),
        }
    }

    /// Whether the body is known to be empty.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Body;
    ///
    /// assert!(Body::Empty.is_empty() && Body::from("").is_empty());
    /// assert!(!Body::reader(std::io::empty()).is_empty(), "its length is not known");
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::Empty => f.write_str("Empty"),
            Body::Bytes(bytes) => write!(f, "Bytes({} bytes)", bytes.len()),
            Body::Shared(bytes) => write!(f, "Shared({} bytes)", bytes.len()),
            Body::Reader { len, .. } => f.debug_struct("Reader").field("len", len).finish_non_exhaustive(),
            Body::File { offset, len, .. } => f.debug_struct("File").field("offset", offset).field("len", len).finish(),
        }
    }
}

impl From<Vec<u8>> for Body {
    fn from(bytes: Vec<u8>) -> Body {
        Body::Bytes(Cow::Owned(bytes))
    }
}

impl From<&'static [u8]> for Body {
    fn from(bytes: &'static [u8]) -> Body {
        Body::Bytes(Cow::Borrowed(bytes))
    }
}

/// The bytes a cache keeps, shared by every response that sends them.
///
/// # Examples
///
/// ```
/// use std::rc::Rc;
/// use neverblock_http::server::{Body, Response};
///
/// let page: Rc<[u8]> = Rc::from(&b"<p>rendered once</p>"[..]);
/// let answer = Response::new(200).body(Rc::clone(&page));
/// assert!(matches!(answer.body_ref(), Body::Shared(bytes) if Rc::ptr_eq(bytes, &page)));
/// ```
impl From<Rc<[u8]>> for Body {
    fn from(bytes: Rc<[u8]>) -> Body {
        Body::Shared(bytes)
    }
}

impl From<String> for Body {
    fn from(text: String) -> Body {
        Body::Bytes(Cow::Owned(text.into_bytes()))
    }
}

impl From<&'static str> for Body {
    fn from(text: &'static str) -> Body {
        Body::Bytes(Cow::Borrowed(text.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_field_is_known_until_it_is_removed() {
        let mut response = Response::new(200).header("X-Ok", "fine");
        assert_eq!(response.invalid_field(), None);
        response.append_header("X-Bad", "a\r\nSet-Cookie: stolen=1");
        response.append_header("Bad Name", "v");
        assert_eq!(response.invalid_field(), Some(("X-Bad", "a\r\nSet-Cookie: stolen=1")));
        assert_eq!(response.remove_header("x-bad").as_deref(), Some("a\r\nSet-Cookie: stolen=1"));
        assert_eq!(response.invalid_field(), Some(("Bad Name", "v")));
        response.remove_header("bad name");
        assert_eq!(response.invalid_field(), None);
    }

    #[test]
    fn a_shared_value_reads_and_is_removed_as_text() {
        let tag: Rc<str> = Rc::from("\"1-2-3.4\"");
        let mut response = Response::new(200);
        response.append_valid_header("ETag", Rc::clone(&tag));
        assert_eq!((response.header_value("etag"), Rc::strong_count(&tag)), (Some("\"1-2-3.4\""), 2));
        assert_eq!(response.remove_header("ETag").as_deref(), Some("\"1-2-3.4\""));
        assert_eq!((response.headers().count(), Rc::strong_count(&tag)), (0, 1));
    }
}
