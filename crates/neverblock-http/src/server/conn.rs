//! One connection's fiber: requests read in turn (pipelined ones answered in order), each given to
//! the handler, each response written before the next request is read.
//!
//! The fiber is the connection's only reader and writer. While it waits for a request head (for
//! its first byte, or for the rest of it) it is idle: the registry may close it then (shutdown,
//! shedding), which it sees as an end of stream. The first head must arrive whole within the
//! header timeout of the connection's start; later ones within the keep-alive timeout for their
//! first byte and the header timeout from it. A request whose body the handler left unread is
//! drained (up to 256 KiB) after the response, or the connection closes. A handler that panics
//! gets its request a 500 and its connection closed; the panic goes no further.

use std::any::Any;
use std::net::SocketAddr;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;
use std::time::{Instant, SystemTime};

use neverblock::net::TcpStream;

use super::exchange::Exchange;
use super::request::{BodyState, Request, RequestBody};
use super::respond::{self, error_response, linger, Context, Sent};
use super::response::Response;
use super::socket::{Budget, Floor, Socket};
use super::Loop;
use crate::wire::body::Decoder;
use crate::wire::head::Head;
use crate::wire::server::{check_request, read_request_head, HeadError, Message, Refusal};
use crate::wire::{BufferedConn, Framing};

/// The most of an unread request body read and dropped to keep the connection (Go's rule).
const DRAIN_LIMIT: u64 = 256 * 1024;

/// When a request's head had arrived.
#[derive(Clone, Copy, Debug)]
struct Started {
    at: Instant,
    time: SystemTime,
}

impl Started {
    /// Now, if the server has a response hook to tell it to: without one nobody reads the clocks'
    /// answer.
    fn now(lp: &Loop) -> Option<Started> {
        lp.config.hook.is_some().then(|| Started { at: Instant::now(), time: SystemTime::now() })
    }
}

/// Serves the connection until it closes, the client asks to close it, or the server stops.
pub(super) fn serve(stream: TcpStream, peer: SocketAddr, lp: &Rc<Loop>) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().unwrap_or(peer);
    let stream = Rc::new(stream);
    let member = lp.registry.enter(stream.clone());
    let socket = Socket::new(stream);
    let mut conn = BufferedConn::new(socket.clone());
    let mut head = Head::default();
    let timeouts = lp.config.timeouts;
    let mut first = true;
    let ends = Ends { peer, local };
    loop {
        if lp.registry.is_stopping() {
            return;
        }
        let now = Instant::now();
        socket.set_read_budget(match (first, conn.has_buffered()) {
            (false, false) => Budget::FirstByte { by: now + timeouts.keep_alive, then: timeouts.header },
            _ => Budget::Until(now + timeouts.header),
        });
        member.set_idle_since(Some(now));
        let read = read_request_head(&mut conn, &lp.config.limits, &mut head);
        member.set_idle_since(None);
        let version = match read {
            Ok(version) => version,
            Err(HeadError::Closed) => return,
            Err(HeadError::Io { error, partial }) => {
                log::debug!("{peer}: reading a request head: {error}");
                if partial && error.kind() == std::io::ErrorKind::TimedOut {
                    let why = format!("the request head did not arrive within {:?}", timeouts.header);
                    count_request(lp);
                    refuse(lp, &socket, &Refusal { status: 408, why: why.into() }, Received::Line(None), ends);
                }
                return;
            }
            Err(HeadError::Refused(refusal)) => {
                count_request(lp);
                let line = request_line(conn.buffered(), refusal.status);
                return refuse(lp, &socket, &refusal, Received::Line(line), ends);
            }
        };
        count_request(lp);
        let message = match check_request(&head, version, &lp.config.limits) {
            Ok(message) => message,
            Err(refusal) => return refuse(lp, &socket, &refusal, Received::Head(&head), ends),
        };
        if !exchange(lp, &mut conn, &head, &message, ends) {
            return;
        }
        first = false;
    }
}

/// Counts a request answered, by the handler or by a refusal.
fn count_request(lp: &Loop) {
    lp.registry.counters().requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// The connection's two addresses.
#[derive(Clone, Copy, Debug)]
struct Ends {
    peer: SocketAddr,
    local: SocketAddr,
}

/// Answers one request; returns whether the connection may carry another.
fn exchange(lp: &Loop, conn: &mut BufferedConn<Socket>, head: &Head, message: &Message, ends: Ends) -> bool {
    let started = Started::now(lp);
    let config = &lp.config;
    let socket = conn.get_ref().clone();
    let decoder = Decoder::new(message.framing, &config.limits, "request")
        .expect("check_request refused bodies over this same limit");
    let mut state = BodyState::new(decoder, message.expect_continue);
    socket.set_read_budget(Budget::Floor(Floor::new(config.timeouts.body, config.timeouts.min_rate)));
    // The `100 Continue` a body's first read sends is bounded like a response.
    socket.set_write_budget(Budget::Floor(Floor::new(config.timeouts.send, config.timeouts.min_rate)));
    let mut close = false;
    let mut response = if head.target() == "*" {
        // `OPTIONS *` asks about the server itself: nothing to add to a plain 200.
        Response::new(200)
    } else {
        let body = RequestBody { conn: &mut *conn, state: &mut state };
        let mut request = Request { head, message, peer: ends.peer, local: ends.local, body };
        match catch(|| config.handler.handle(&mut request)) {
            Ok(response) => response,
            Err(payload) => {
                let text = panic_message(&*payload);
                log::error!("the handler panicked on {} {}: {text}; answering 500", head.method(), head.target());
                close = true;
                error_response(500, "the handler failed")
            }
        }
    };
    if let Some((status, why)) = state.failure.take() {
        log::debug!("{}: the request body of {} {} failed: {why}", ends.peer, head.method(), head.target());
        let Some(status) = status else { return false };
        response = error_response(status, &why);
        close = true;
    }
    let body_done = state.decoder.is_done();
    let drainable = match message.framing {
        Framing::Length(len) => len - state.decoder.consumed() <= DRAIN_LIMIT,
        _ => true,
    };
    close |= !message.keep_alive || lp.registry.is_stopping() || (!body_done && (state.continue_owed || !drainable));
    socket.set_write_budget(Budget::Floor(Floor::new(config.timeouts.send, config.timeouts.min_rate)));
    let cx = Context { head_request: head.method() == "HEAD", version: message.version, close };
    let sent = respond::send(&socket, &mut response, cx);
    report(lp, Received::Head(head), Some(message), &response, sent, ends, started);
    if !sent.complete {
        return false;
    }
    if sent.close {
        if !body_done || conn.has_buffered() {
            linger(&socket);
        }
        return false;
    }
    body_done || drain(conn, &mut state, &socket)
}

/// Reads and drops the rest of an unread request body, up to [`DRAIN_LIMIT`]; returns whether it
/// ended. When it did not (too long, malformed, cut short), the connection closes gently: what
/// the client still sends must not reset it while the response is on its way.
fn drain(conn: &mut BufferedConn<Socket>, state: &mut BodyState, socket: &Socket) -> bool {
    let mut drained = 0;
    while drained <= DRAIN_LIMIT {
        match state.decoder.fill_buf(conn) {
            Ok([]) => return true,
            Ok(bytes) => {
                let n = bytes.len();
                state.decoder.consume(conn, n);
                drained += n as u64;
            }
            Err(_) => break,
        }
    }
    linger(socket);
    false
}

/// What arrived of a request: a head the server parsed, or (refused before that) perhaps its first line.
#[derive(Clone, Copy, Debug)]
enum Received<'a> {
    Head(&'a Head),
    Line(Option<&'a [u8]>),
}

/// The request line at the start of `buffered`, if it arrived whole (not for 414: too long to be).
fn request_line(buffered: &[u8], status: u16) -> Option<&[u8]> {
    let end = buffered.iter().position(|&b| b == b'\n').filter(|_| status != 414)?;
    Some(buffered[..end].strip_suffix(b"\r").unwrap_or(&buffered[..end]))
}

/// Answers a request the server will not take, and closes the connection.
fn refuse(lp: &Loop, socket: &Socket, refusal: &Refusal, head: Received<'_>, ends: Ends) {
    let started = Started::now(lp);
    log::debug!("{}: refused with {}: {}", ends.peer, refusal.status, refusal.why);
    let mut response = error_response(refusal.status, &refusal.why);
    let timeouts = lp.config.timeouts;
    socket.set_write_budget(Budget::Floor(Floor::new(timeouts.send, timeouts.min_rate)));
    let cx = Context { head_request: false, version: 1, close: true };
    let sent = respond::send(socket, &mut response, cx);
    report(lp, head, None, &response, sent, ends, started);
    if sent.complete {
        linger(socket);
    }
}

/// Calls the server's response hook, if it has one.
fn report(
    lp: &Loop,
    head: Received<'_>,
    message: Option<&Message>,
    response: &Response,
    sent: Sent,
    ends: Ends,
    started: Option<Started>,
) {
    if let (Some(hook), Some(started)) = (&lp.config.hook, started) {
        let (head, line) = match head {
            Received::Head(head) => (Some(head), None),
            Received::Line(line) => (None, line),
        };
        let exchange = Exchange {
            head,
            line,
            message,
            response,
            peer: ends.peer,
            local: ends.local,
            body_bytes: sent.body_bytes,
            complete: sent.complete,
            started: started.time,
            duration: started.at.elapsed(),
        };
        // The response is out already: a hook that fails loses its own line or count, not the
        // connection.
        if let Err(payload) = catch(|| hook(&exchange)) {
            log::error!(
                "the response hook panicked after {} {}: {}",
                ends.peer,
                response.status(),
                panic_message(&*payload)
            );
        }
    }
}

/// Runs `f`, catching a panic of the code it calls (a handler's, a hook's): its payload. The
/// runtime's own unwinds (a cancelled task, a dropped fiber) go on, so the fiber still ends.
pub(super) fn catch<T>(f: impl FnOnce() -> T) -> Result<T, Box<dyn Any + Send>> {
    panic::catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        if neverblock::runtime::is_cancellation(&*payload) {
            panic::resume_unwind(payload);
        }
        payload
    })
}

/// The message of a panic raised with `panic!` (a `&str` or `String` payload), or a
/// placeholder for any other payload (`panic_any`).
pub(super) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a payload that is not a message)")
}
