//! Writing a response: a head framed for its body, then the body as bytes, a stream (sized,
//! chunked, or up to the end of the connection for HTTP/1.0) or a file range through `sendfile(2)`.
//!
//! A body whose reader fails (an error or a panic) before its first byte went out (its head still queued) is answered with a 500
//! instead, after the responses queued before it; one that fails later ends the connection, so the
//! client sees a response cut short, never one it could take for whole.

use std::io::{self, Read};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use super::socket::Socket;
use crate::server::date;
use crate::server::panics::{catch, panic_message};
use crate::server::response::{Body, Response};
use crate::server::timed::WaitLimit;
use crate::wire::fields::lists;
use crate::wire::is_named;
use crate::wire::server::{reason_phrase, write_status_line};
use crate::wire::write::{
    send_bytes, send_streamed, write_content_length, write_field, Cause, StreamError, Streamed, COALESCE,
};

/// A file range this short, when in the page cache, is copied into the response's one write: a
/// copy of a few pages costs less than the extra calls `sendfile` takes (a write for the head, the
/// page-cache probes, the `sendfile`).
const SMALL_FILE: usize = 16 * 1024;
/// How long a closing connection keeps reading what the client still sends, so the response is
/// not lost to a reset (nginx's `lingering_close`), and how much it reads at most.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

/// How a response is to be framed, from its request.
#[derive(Clone, Copy, Debug)]
pub(super) struct Context {
    /// The request was HEAD: no body follows the head.
    pub(super) head_request: bool,
    /// The request's minor version.
    pub(super) version: u8,
    /// The connection closes after this response.
    pub(super) close: bool,
    /// The connection's first response: a file body's head leaves on its own, and the loop's
    /// other fibers run, before its first piece (see `send_body`).
    pub(super) opening: bool,
}

/// What sending did.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sent {
    /// Body bytes written.
    pub(super) body_bytes: u64,
    /// Whether the whole response went out.
    pub(super) complete: bool,
    /// Whether the connection must close now (asked for, framed by its end, or broken).
    pub(super) close: bool,
}

/// Writes `response` (a 500 instead if it cannot be written as it is) and its body, which is taken.
pub(super) fn send(socket: &Socket, response: &mut Response, cx: Context) -> Sent {
    if let Err(why) = check(response) {
        log::error!("a handler's response cannot be sent ({why}); answering 500 instead");
        *response = Response::error(500, "the handler's response was invalid");
    }
    let mut close = cx.close;
    let status = response.status();
    let no_body = matches!(status, 204 | 304);
    let length = response.body_ref().len();
    // A HEAD response may say the GET response's length (never a 204's: RFC 9110 §8.6).
    let keep_length = cx.head_request
        && status != 204
        && response.body_ref().is_empty()
        && response.header_value("content-length").is_some();
    let chunked = !no_body && length.is_none() && cx.version == 1 && !cx.head_request;
    close |= !no_body && length.is_none() && cx.version == 0;
    // Anything queued before this response ends here.
    let earlier = socket.pending().len();
    {
        let mut out = socket.pending();
        write_status_line(&mut out, status, reason_phrase(status));
        // One pass over the handler's fields: each written but those the server frames with,
        // and what the server must know of them noted on the way.
        let mut has_date = false;
        for (name, value) in response.headers() {
            let write = match FramingField::of(name.as_bytes()) {
                None => true,
                Some(FramingField::Date) => {
                    has_date = true;
                    true
                }
                Some(FramingField::Connection) => {
                    close |= lists(value.as_bytes(), b"close");
                    false
                }
                Some(FramingField::TransferEncoding) => false,
                Some(FramingField::ContentLength) => keep_length,
            };
            if write {
                write_field(&mut out, name, value.as_bytes());
            }
        }
        if !has_date {
            write_field(&mut out, "Date", &date::now());
        }
        match length {
            Some(n) if !no_body && !keep_length => write_content_length(&mut out, n),
            _ if chunked => write_field(&mut out, "Transfer-Encoding", b"chunked"),
            _ => {}
        }
        if close {
            write_field(&mut out, "Connection", b"close");
        } else if cx.version == 0 {
            write_field(&mut out, "Connection", b"keep-alive");
        }
        out.extend_from_slice(b"\r\n");
    }
    let body = response.take_body();
    let written = if no_body || cx.head_request { Ok(0) } else { send_body(socket, body, chunked, cx.opening) };
    // Written now, also when a pipelined request is already buffered: its handler may take long.
    let result = written.and_then(|n| socket.flush().map(|()| n).map_err(|error| Failure { sent: n, error }));
    match result {
        Ok(body_bytes) => Sent { body_bytes, complete: true, close },
        Err(Failure { error, .. }) if socket.pending().len() > earlier => {
            // The head is still queued: nothing of this response has gone out, so a 500 can.
            log::error!("the body of a {status} response failed before its first byte ({error}); answering 500");
            socket.pending().truncate(earlier);
            *response = Response::error(500, "the response body failed");
            send(socket, response, Context { close: true, ..cx })
        }
        Err(Failure { sent, error }) => {
            log::debug!("response {status} cut short after {sent} body bytes: {error}");
            Sent { body_bytes: sent, complete: false, close: true }
        }
    }
}

/// Why a body could not be sent whole, and how much of it was.
struct Failure {
    sent: u64,
    error: io::Error,
}

impl From<io::Error> for Failure {
    fn from(error: io::Error) -> Failure {
        Failure { sent: 0, error }
    }
}

impl From<StreamError> for Failure {
    fn from(e: StreamError) -> Failure {
        let (Cause::Read(error) | Cause::Write(error)) = e.cause;
        Failure { sent: e.sent, error }
    }
}

/// Writes `body` after the queued head; returns how many body bytes went out.
fn send_body(socket: &Socket, body: Body, chunked: bool, opening: bool) -> Result<u64, Failure> {
    match body {
        Body::Empty => Ok(0),
        Body::Bytes(bytes) => send_in_memory(socket, &bytes),
        Body::Shared(bytes) => send_in_memory(socket, &bytes),
        Body::Reader { reader, len } => {
            let framing = match len {
                Some(len) => Streamed::Sized(len),
                None if chunked => Streamed::Chunked,
                None => Streamed::UntilClose,
            };
            with_queue(socket, |out, staged| Ok(send_streamed(out, staged, &mut Guarded(reader), framing)?))
        }
        Body::File { file, offset, len } if len <= SMALL_FILE as u64 && queue_cached(socket, &file, offset, len) => {
            Ok(len)
        }
        Body::File { file, offset, len } => {
            if opening {
                // A new connection's head leaves at once, and the loop's other fibers run before
                // the first piece: in a burst of new connections, each has its first byte before
                // any piece (up to 512 KiB) takes its time. Kept-alive ones send head and piece
                // back to back, as the client reads them.
                socket.flush().map_err(|error| Failure { sent: 0, error })?;
                neverblock::yield_now();
            }
            let mut sent = 0;
            while sent < len {
                let n = socket.send_file(&file, offset + sent, usize::try_from(len - sent).unwrap_or(usize::MAX));
                match n {
                    Ok(0) => return Err(Failure { sent, error: short("the file", len) }),
                    Ok(n) => sent += n as u64,
                    Err(error) => return Err(Failure { sent, error }),
                }
                if sent < len {
                    // One piece at a time: the loop's other fibers run between pieces.
                    neverblock::yield_now();
                }
            }
            Ok(sent)
        }
    }
}

/// Writes `bytes` after the queued head. A short body joins the head in the queue, as
/// `send_bytes` would stage it, without taking the queue out of the socket.
fn send_in_memory(socket: &Socket, bytes: &[u8]) -> Result<u64, Failure> {
    if bytes.len() <= COALESCE {
        socket.queue(bytes);
        return Ok(bytes.len() as u64);
    }
    with_queue(socket, |out, staged| {
        send_bytes(out, staged, bytes)?;
        Ok(bytes.len() as u64)
    })
}

/// Runs `send` with the socket and its queue taken out of it as the staging buffer (the head, and
/// whatever `send` stages after it, go out in its first write), then puts back what is still to
/// be written.
fn with_queue(
    socket: &Socket,
    send: impl FnOnce(&mut Socket, &mut Vec<u8>) -> Result<u64, Failure>,
) -> Result<u64, Failure> {
    let mut staged = socket.take_pending();
    let mut out = socket.clone();
    let sent = send(&mut out, &mut staged);
    socket.give_back(staged);
    sent
}

/// Appends `len` bytes of `file` from `offset` to the queued response if they are all in the page
/// cache (`preadv2` with `RWF_NOWAIT` never waits for a disk); returns whether it did.
fn queue_cached(socket: &Socket, file: &std::fs::File, offset: u64, len: u64) -> bool {
    let mut out = socket.pending();
    let start = out.len();
    // `len` is at most `SMALL_FILE`.
    out.resize(start + len as usize, 0);
    let mut slice = [io::IoSliceMut::new(&mut out[start..])];
    let read = rustix::io::preadv2(file, &mut slice, offset, rustix::io::ReadWriteFlags::NOWAIT);
    if read.is_ok_and(|n| n as u64 == len) {
        return true;
    }
    out.truncate(start);
    false
}

/// A handler's body reader, whose panics (the handler's code failing) come out as errors, so the
/// client gets a 500 as for a panic in the handler, or a response cut short.
struct Guarded(Box<dyn Read>);

impl Read for Guarded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        catch(|| self.0.read(buf)).unwrap_or_else(|payload| {
            Err(io::Error::other(format!("the body's reader panicked: {}", panic_message(&*payload))))
        })
    }
}

fn short(what: &str, len: u64) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("{what} ended before its {len} bytes"))
}

/// Why `response` cannot be sent as it is.
fn check(response: &Response) -> Result<(), String> {
    if !(200..=999).contains(&response.status()) {
        return Err(format!("status {} is not a final status", response.status()));
    }
    match response.invalid_field() {
        Some((name, value)) => Err(format!("invalid header field {name:?}: {value:?}")),
        None => Ok(()),
    }
}

/// The fields of a handler's response the server looks at as it writes the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FramingField {
    Date,
    Connection,
    TransferEncoding,
    ContentLength,
}

impl FramingField {
    /// Which of them `name` is, if any: told apart by length first, so most names are passed over
    /// with one comparison.
    fn of(name: &[u8]) -> Option<FramingField> {
        let (field, text): (FramingField, &[u8]) = match name.len() {
            4 => (FramingField::Date, b"date"),
            10 => (FramingField::Connection, b"connection"),
            14 => (FramingField::ContentLength, b"content-length"),
            17 => (FramingField::TransferEncoding, b"transfer-encoding"),
            _ => return None,
        };
        is_named(name, text).then_some(field)
    }
}

/// Closes the connection gently: sends what is queued, ends the sending side, and reads (and drops)
/// what the client still sends for a short while, so the response reaches it before the close.
pub(super) fn linger(socket: &Socket) {
    if socket.flush().is_err() {
        return;
    }
    socket.close_notify();
    if socket.stream().shutdown(Shutdown::Write).is_err() {
        return;
    }
    socket.set_read_limit(WaitLimit::Until(Instant::now() + LINGER));
    let mut sink = [0u8; 8 * 1024];
    let mut reader = socket.clone();
    let mut drained = 0;
    while drained < LINGER_BYTES {
        match reader.read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(n) => drained += n,
        }
    }
}
