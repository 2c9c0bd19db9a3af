//! An HTTP/2 response: its head as a HEADERS frame (connection-specific fields dropped, the body's
//! length as `content-length`), then its body in DATA frames as the client's windows allow: each
//! piece waits for capacity (`reserve_capacity`, then `poll_capacity` in `block_on`), no longer
//! than the send timeout, so a client that never opens its window loses the stream.

use std::borrow::Cow;
use std::future::poll_fn;
use std::io::{self, Read};
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::SendStream;
use http::header::{HeaderName, HeaderValue};

use crate::server::date;
use crate::server::file_piece::read_piece;
use crate::server::panics::{catch, panic_message};
use crate::server::response::{Body, Response};
use crate::wire::is_named;

/// How much of a streamed or file body is read at a time.
const PIECE: usize = 32 * 1024;
/// Fields that mean something only on an HTTP/1 connection (RFC 9113 §8.2.2).
const CONNECTION_FIELDS: [&[u8]; 5] =
    [b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"];

/// What sending did.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sent {
    pub(super) body_bytes: u64,
    pub(super) complete: bool,
}

/// Sends `response` (a 500 instead if it cannot be sent as it is) on the stream, and its body,
/// which is taken; none for a HEAD request. With `hold_end` (the request is still coming), the
/// stream is not ended: a complete response gives it back, for [`end_held`] once the request
/// has come.
pub(super) fn send(
    respond: &mut SendResponse<Bytes>,
    response: &mut Response,
    head_request: bool,
    hold_end: bool,
    timeout: Duration,
) -> (Sent, Option<SendStream<Bytes>>) {
    let head = match head_of(response, head_request) {
        Ok(head) => head,
        Err(why) => {
            log::error!("a handler's response cannot be sent ({why}); answering 500 instead");
            *response = Response::error(500, "the handler's response was invalid");
            head_of(response, head_request).expect("the server's own error response is valid")
        }
    };
    let status = response.status();
    let mut body = if head_request || matches!(status, 204 | 304) { Body::Empty } else { response.take_body() };
    // A stream's first piece is read before the head goes: a reader failing there gets a 500.
    let first = match first_piece(&mut body) {
        Ok(first) => first,
        Err(e) => {
            log::error!("the body of a {status} response failed before its first byte ({e}); answering 500");
            *response = Response::error(500, "the response body failed");
            return send(respond, response, head_request, hold_end, timeout);
        }
    };
    let end = body.is_empty() && first.as_ref().is_none_or(Bytes::is_empty);
    let mut stream = match respond.send_response(head, end && !hold_end) {
        Ok(stream) => stream,
        Err(e) => {
            log::debug!("the response {status} could not be sent: {e}");
            return (Sent { body_bytes: 0, complete: false }, None);
        }
    };
    let held = |stream| hold_end.then_some(stream);
    if end {
        return (Sent { body_bytes: 0, complete: true }, held(stream));
    }
    let len = body.len();
    let mut out = Out { stream: &mut stream, sent: 0, len, ended: false, hold_end, timeout };
    let result = first.map_or(Ok(()), |piece| out.piece(piece)).and_then(|()| out.body(body));
    // A body whose last piece could not say so (a reader without a length) ends with an empty
    // frame, unless the end is held.
    let ended = out.ended || hold_end;
    match result.and_then(|()| if ended { Ok(()) } else { out.send(Bytes::new(), true) }) {
        Ok(()) => (Sent { body_bytes: out.sent, complete: true }, held(stream)),
        Err(e) => {
            let sent = out.sent;
            log::debug!("response {status} cut short after {sent} body bytes: {e}");
            stream.send_reset(h2::Reason::INTERNAL_ERROR);
            (Sent { body_bytes: sent, complete: false }, None)
        }
    }
}

/// Ends a stream whose complete response [`send`] held open while its request came.
pub(super) fn end_held(mut stream: SendStream<Bytes>) {
    if let Err(e) = stream.send_data(Bytes::new(), true) {
        log::debug!("a response's held end could not be sent: {e}");
    }
}

/// The head h2 sends for `response`, or why it cannot be sent.
fn head_of(response: &Response, head_request: bool) -> Result<http::Response<()>, String> {
    let status = response.status();
    if !(200..=999).contains(&status) {
        return Err(format!("status {status} is not a final status"));
    }
    let mut head = http::Response::new(());
    *head.status_mut() = http::StatusCode::from_u16(status).map_err(|e| e.to_string())?;
    let fields = head.headers_mut();
    let no_body = matches!(status, 204 | 304);
    // A HEAD response may say the GET response's length (never a 204's).
    let keep_length = head_request
        && status != 204
        && response.body_ref().is_empty()
        && response.header_value("content-length").is_some();
    for (name, value) in response.headers() {
        let name_bytes = name.as_bytes();
        if CONNECTION_FIELDS.iter().any(|field| is_named(name_bytes, field))
            || (!keep_length && is_named(name_bytes, b"content-length"))
        {
            continue;
        }
        let name = HeaderName::from_bytes(name_bytes).map_err(|_| format!("invalid header field name {name:?}"))?;
        let value = HeaderValue::from_str(value).map_err(|_| format!("invalid header field {name}: {value:?}"))?;
        fields.append(name, value);
    }
    if !fields.contains_key(http::header::DATE) {
        let now = date::now();
        fields.insert(http::header::DATE, HeaderValue::from_bytes(&now).map_err(|e| e.to_string())?);
    }
    if let Some(len) = response.body_ref().len().filter(|_| !no_body && !keep_length) {
        fields.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    Ok(head)
}

/// Reads a stream body's first piece (a sized one is cut at its length from now on); `None` for
/// other bodies.
fn first_piece(body: &mut Body) -> io::Result<Option<Bytes>> {
    match body {
        Body::Reader { reader, len } => {
            if let Some(len) = *len {
                let whole = std::mem::replace(reader, Box::new(io::empty()));
                *reader = Box::new(whole.take(len));
            }
            read_guarded(reader.as_mut()).map(Some)
        }
        _ => Ok(None),
    }
}

/// Up to [`PIECE`] bytes of a handler's reader, whose panics come out as errors.
fn read_guarded(reader: &mut dyn Read) -> io::Result<Bytes> {
    let mut piece = vec![0u8; PIECE];
    let n = catch(|| reader.read(&mut piece)).unwrap_or_else(|payload| {
        Err(io::Error::other(format!("the body's reader panicked: {}", panic_message(&*payload))))
    })?;
    piece.truncate(n);
    Ok(Bytes::from(piece))
}

/// A response body on its way out.
struct Out<'s> {
    stream: &'s mut SendStream<Bytes>,
    sent: u64,
    /// The body's length, when known: the piece that reaches it ends the stream.
    len: Option<u64>,
    /// Whether the body's last frame went (it ended the stream unless `hold_end`).
    ended: bool,
    /// Whether the stream stays open after the body.
    hold_end: bool,
    timeout: Duration,
}

impl Out<'_> {
    /// Sends the rest of `body`; its last piece ends the stream when its length is known.
    fn body(&mut self, body: Body) -> io::Result<()> {
        match body {
            Body::Empty => Ok(()),
            Body::Bytes(Cow::Borrowed(bytes)) => self.piece(Bytes::from_static(bytes)),
            Body::Bytes(Cow::Owned(bytes)) => self.piece(Bytes::from(bytes)),
            // h2 takes only what may cross threads: a copy, as a shared body is a short one.
            Body::Shared(bytes) => self.piece(Bytes::copy_from_slice(&bytes)),
            Body::Reader { mut reader, len } => loop {
                if len.is_some_and(|len| self.sent >= len) {
                    return Ok(());
                }
                let piece = read_guarded(reader.as_mut())?;
                if piece.is_empty() {
                    return match len {
                        Some(len) => Err(short("the body's reader", len)),
                        None => Ok(()),
                    };
                }
                self.piece(piece)?;
            },
            Body::File { file, offset, len } => {
                let start = self.sent;
                while self.sent - start < len {
                    let done = self.sent - start;
                    let want = usize::try_from(len - done).unwrap_or(usize::MAX).min(PIECE * 2);
                    let piece = read_piece(&file, offset + done, want)?;
                    if piece.is_empty() {
                        return Err(short("the file", len));
                    }
                    self.piece(Bytes::from_owner(piece))?;
                }
                Ok(())
            }
        }
    }

    /// Sends the body's next piece, the stream ended with it if it completes the body's length.
    fn piece(&mut self, data: Bytes) -> io::Result<()> {
        let end = self.len.is_some_and(|len| self.sent + data.len() as u64 >= len);
        self.send(data, end)
    }

    /// Sends `data` as the client's windows let it, in as many frames as that takes; `end` ends
    /// the stream with its last frame (unless its end is held).
    fn send(&mut self, mut data: Bytes, end: bool) -> io::Result<()> {
        self.ended = end;
        let end = end && !self.hold_end;
        if data.is_empty() {
            return self.stream.send_data(data, end).map_err(io::Error::other);
        }
        while !data.is_empty() {
            self.stream.reserve_capacity(data.len());
            let capacity = match self.stream.capacity() {
                0 => self.wait_capacity()?,
                n => n,
            };
            let frame = data.split_to(capacity.min(data.len()));
            let n = frame.len() as u64;
            self.stream.send_data(frame, end && data.is_empty()).map_err(io::Error::other)?;
            self.sent += n;
        }
        Ok(())
    }

    /// Waits, at most the send timeout, until the windows give the stream some capacity.
    fn wait_capacity(&mut self) -> io::Result<usize> {
        let stream = &mut *self.stream;
        let polled = neverblock::timeout(self.timeout, || neverblock::block_on(poll_fn(|cx| stream.poll_capacity(cx))));
        match polled {
            Ok(Ok(Some(Ok(n)))) => Ok(n),
            Ok(Ok(Some(Err(e)))) => Err(io::Error::other(e)),
            Ok(Ok(None)) => Err(io::Error::new(io::ErrorKind::ConnectionReset, "the stream was closed")),
            Ok(Err(_)) | Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client's window stayed shut for {:?}", self.timeout),
            )),
        }
    }
}

fn short(what: &str, len: u64) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("{what} ended before its {len} bytes"))
}
