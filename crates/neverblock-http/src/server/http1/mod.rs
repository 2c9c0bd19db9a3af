//! The HTTP/1 driver: one connection's task reads requests in turn (pipelined ones answered in
//! order), gives each to the handler, and writes each response before the next request is read.
//!
//! That task is the connection's only reader and writer (a quiet connection's next task takes over
//! from it, below). While it waits for a request head (for its first byte, or for the rest of it)
//! the connection is idle: the registry may close it then (shutdown, shedding), which the task
//! sees as an end of stream. The first head must arrive whole within the header timeout of the
//! connection's start; later ones within the keep-alive timeout for their first byte and the
//! header timeout from it. A request whose body the handler left unread is drained (up to
//! 256 KiB) after the response, or the connection closes. A handler that panics gets its request a
//! 500 and its connection closed; the panic goes no further.
//!
//! A kept-alive connection that waits a second for its next request gives back its buffers. In
//! cleartext its fiber then ends: the connection's state moves into a task that holds no fiber
//! until the client's next byte (or the keep-alive deadline) starts it, and serves on from there.
//! A cleartext connection between requests, with nothing read ahead, may also move to another loop
//! that holds fewer connections (see `steering`), which serves it on from its next request.

mod body;
mod socket;
mod write;

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};

use neverblock::net::TcpStream;
use neverblock::runtime::{TaskActivity, TaskBuilder};

use super::connection::{Connection, Serving};
use super::exchange::Exchange;
use super::listen;
use super::naming::Answering;
use super::panics::{catch, panic_message};
use super::request::{Request, RequestBody, RequestParts};
use super::response::Response;
use super::timed::{MinRate, TimedStream, WaitLimit};
use super::tls::{TlsInfo, TlsSession};
use super::{steering, ServerLoop};
use crate::wire::body::Decoder;
use crate::wire::head::Head;
use crate::wire::server::{check_request, read_request_head, HeadError, Message, Refusal};
use crate::wire::{BufferedConn, Framing};
use crate::Version;
use body::{BodyState, Http1Body};
use socket::Socket;
use write::{linger, Context, Sent};

/// The most of an unread request body read and dropped to keep the connection (Go's rule), or
/// on HTTP/2 to let the client end its request rather than have its stream reset.
pub(super) const DRAIN_LIMIT: u64 = 256 * 1024;

/// How long a kept-alive connection waits for its next request before it gives back its buffers
/// and its fiber (see [`release_while_idle`], [`wait_fiberless`]): long enough that a client's
/// pause between requests rarely reaches it, short next to keep-alive timeouts.
const IDLE_RELEASE: Duration = Duration::from_secs(1);

/// When a request's head had arrived.
#[derive(Clone, Copy, Debug)]
struct Started {
    at: Instant,
    time: SystemTime,
}

impl Started {
    /// Now, if the server has a response hook to tell it to: without one nobody reads the clocks'
    /// answer.
    fn now(server_loop: &ServerLoop) -> Option<Started> {
        server_loop.config.hook.is_some().then(|| Started { at: Instant::now(), time: SystemTime::now() })
    }
}

/// What the connection is, for every request on it: its two addresses, and its TLS.
#[derive(Clone, Copy, Debug)]
struct Addresses<'c> {
    peer: SocketAddr,
    local: SocketAddr,
    tls: Option<&'c TlsInfo>,
}

/// One HTTP/1 connection between requests: what its fiber works on, and all a connection gone
/// quiet keeps while it waits, fiberless, for the client to speak again.
struct Http1 {
    conn: BufferedConn<Socket>,
    connection: Connection,
    server_loop: Rc<ServerLoop>,
    /// Counts the connection as served in HTTP/1 until it ends.
    _serving: Serving,
}

/// How the next request head is waited for.
#[derive(Clone, Copy, Debug)]
enum HeadWait {
    /// The connection's first: whole within the header timeout of now.
    First,
    /// Between requests: its first byte within the keep-alive timeout (and what the connection
    /// holds for requests given back after [`IDLE_RELEASE`] of it).
    Kept,
    /// Between requests, after the release: idle `since` then, its keep-alive timeout counted
    /// from there.
    Released { since: Instant },
}

/// Why [`serve_until_quiet`] returned.
#[derive(Clone, Copy, Debug)]
enum Quiet {
    /// The connection ended.
    Ended,
    /// It has waited [`IDLE_RELEASE`] for its next request, idle since then, and given back what
    /// it held for requests.
    Idle(Instant),
    /// It is between requests, with nothing read ahead, and goes to this loop.
    Moving(usize),
}

/// Serves the connection (its TLS handshake made, on an HTTPS listener) until it closes, the
/// client asks to close it, or the server stops.
pub(super) fn serve(
    timed: TimedStream,
    session: Option<Box<TlsSession>>,
    connection: Connection,
    serving: Serving,
    server_loop: &Rc<ServerLoop>,
) {
    serve_from(Http1::new(timed, session, connection, serving, server_loop), HeadWait::First);
}

impl Http1 {
    fn new(
        timed: TimedStream,
        session: Option<Box<TlsSession>>,
        connection: Connection,
        serving: Serving,
        server_loop: &Rc<ServerLoop>,
    ) -> Http1 {
        let conn = BufferedConn::new(Socket::new(timed, session));
        Http1 { conn, connection, server_loop: server_loop.clone(), _serving: serving }
    }
}

/// Serves requests on this fiber from the wait `wait` on. A cleartext connection that goes quiet
/// for [`IDLE_RELEASE`] ends this fiber's part: a task with no fiber takes the connection over
/// until the client sends again (or its keep-alive timeout ends), then serves it on from there.
/// One that moves to another loop ends it too.
fn serve_from(mut http1: Http1, mut wait: HeadWait) {
    let quiet = {
        let socket = http1.conn.get_ref().clone();
        let _close_notify = CloseNotify(&socket);
        loop {
            match serve_until_quiet(&mut http1, wait) {
                Quiet::Idle(since) if !socket.can_wait_fiberless() => {
                    // Over TLS the session may hold what was sent already: this fiber reads on, its
                    // stack trimmed to this frame.
                    neverblock::fiber::trim_stack();
                    wait = HeadWait::Released { since };
                }
                quiet => break quiet,
            }
        }
    };
    match quiet {
        Quiet::Ended => {}
        Quiet::Idle(since) => wait_fiberless(http1, since),
        Quiet::Moving(to) => move_to(http1, to),
    }
}

/// Moves the connection, between requests, to loop `to`: it leaves this loop's registry and
/// counts, and its stream goes there.
fn move_to(http1: Http1, to: usize) {
    let Http1 { conn, connection, server_loop, _serving } = http1;
    let peer = connection.peer;
    drop((connection, _serving));
    match conn.into_inner().into_stream() {
        Some(stream) => steering::move_kept(stream, peer, &server_loop, to),
        None => {
            debug_assert!(false, "another handle on the stream of a connection moving between loops");
            log::error!("connection from {peer} closed: another handle on it kept it from moving to loop {to}");
        }
    }
}

/// Serves `stream`, a cleartext connection from `peer` kept alive by another loop, from its next
/// request on, on `server_loop`: a connection of its own, in a fiber of its own.
pub(super) fn serve_moved(stream: TcpStream, peer: SocketAddr, server_loop: &Rc<ServerLoop>) {
    listen::spawn_connection(stream, peer, server_loop, false, move |stream, registered, server_loop| {
        let local = stream.local_addr().unwrap_or(peer);
        let connection = Connection { peer, local, tls: None, registered };
        let serving = Serving::resume(server_loop, 0);
        let http1 = Http1::new(TimedStream::new(stream), None, connection, serving, server_loop);
        serve_from(http1, HeadWait::Kept);
    });
}

/// Hands the connection, quiet `since`, to a task that starts when the client sends (or at its
/// keep-alive deadline) and serves on.
fn wait_fiberless(http1: Http1, since: Instant) {
    let by = since + http1.server_loop.config.timeouts.keep_alive;
    let waiting = TaskBuilder::new().when_readable(http1.conn.get_ref().stream(), Some(by));
    // Spawned from this connection's task, on its loop: there is a runtime to spawn on.
    drop(waiting.spawn(move || serve_from(http1, HeadWait::Released { since })));
}

/// Serves requests until the connection ends, has waited [`IDLE_RELEASE`] for a next one and
/// given back what it held for them, or is to move to another loop.
fn serve_until_quiet(http1: &mut Http1, mut wait: HeadWait) -> Quiet {
    let Http1 { conn, connection, server_loop, .. } = http1;
    let Connection { peer, local, tls: tls_info, registered } = &*connection;
    let socket = conn.get_ref().clone();
    let mut head = Head::default();
    let timeouts = server_loop.config.timeouts;
    let addresses = Addresses { peer: *peer, local: *local, tls: tls_info.as_ref() };
    let activity = TaskActivity::current().expect("a connection is served on a fiber of its loop");
    let mut opening = matches!(wait, HeadWait::First);
    loop {
        if server_loop.registry.is_idle_closed() {
            return Quiet::Ended;
        }
        let now = crate::turn_clock::now();
        if matches!(wait, HeadWait::Kept) && conn.has_buffered() {
            wait = HeadWait::First; // pipelined: the next head is there, whole within the header timeout
        }
        let first_byte_by = |by| WaitLimit::FirstByte { by, then: timeouts.header };
        // A kept-alive connection between requests waits for the next one's first byte; once it
        // has waited `IDLE_RELEASE`, it gives back what it holds for requests and waits on.
        let (limit, idle_since, release) = match wait {
            HeadWait::First => (WaitLimit::Until(now + timeouts.header), now, false),
            HeadWait::Kept if timeouts.keep_alive > IDLE_RELEASE => (first_byte_by(now + IDLE_RELEASE), now, true),
            HeadWait::Kept => (first_byte_by(now + timeouts.keep_alive), now, false),
            HeadWait::Released { since } => (first_byte_by(since + timeouts.keep_alive), since, false),
        };
        socket.set_read_limit(limit);
        registered.set_idle_since(Some(idle_since));
        let read = read_request_head(conn, &server_loop.config.limits, &mut head);
        if release {
            if let Err(HeadError::Io { error, partial: false }) = &read {
                if error.kind() == std::io::ErrorKind::TimedOut {
                    release_while_idle(conn, &mut head);
                    return Quiet::Idle(now);
                }
            }
        }
        registered.set_idle_since(None);
        let version = match read {
            Ok(version) => version,
            Err(HeadError::Closed) => return Quiet::Ended,
            Err(HeadError::NotHttp) => {
                log::debug!("{peer}: not HTTP; closed unanswered");
                return Quiet::Ended;
            }
            Err(HeadError::Io { error, partial }) => {
                log::debug!("{peer}: reading a request head: {error}");
                if partial && error.kind() == std::io::ErrorKind::TimedOut {
                    let why = format!("the request head did not arrive within {:?}", timeouts.header);
                    count_request(server_loop);
                    let refusal = Refusal { status: 408, why: why.into() };
                    refuse(server_loop, &socket, &refusal, Received::Line(None), addresses);
                }
                return Quiet::Ended;
            }
            Err(HeadError::Refused(refusal)) => {
                count_request(server_loop);
                let line = request_line(conn.buffered(), refusal.status);
                refuse(server_loop, &socket, &refusal, Received::Line(line), addresses);
                return Quiet::Ended;
            }
        };
        count_request(server_loop);
        let message = match check_request(&head, version, &server_loop.config.limits) {
            Ok(message) => message,
            Err(refusal) => {
                refuse(server_loop, &socket, &refusal, Received::Head(&head), addresses);
                return Quiet::Ended;
            }
        };
        let answering = Answering::start(&activity, head.method(), head.target());
        let answered = answer(server_loop, conn, &head, &message, addresses, opening);
        opening = false;
        drop(answering);
        if !answered {
            return Quiet::Ended;
        }
        if !conn.has_buffered() && socket.can_wait_fiberless() {
            if let Some(to) = server_loop.balance.elsewhere(server_loop) {
                return Quiet::Moving(to);
            }
        }
        wait = HeadWait::Kept;
    }
}

/// Gives back what a kept-alive connection holds for its requests, once it has waited
/// [`IDLE_RELEASE`] for the next: the read and write buffers and the last head's. A connection
/// that only paused gets them back at its next request, for an allocation.
fn release_while_idle(conn: &mut BufferedConn<Socket>, head: &mut Head) {
    conn.release_buffer();
    conn.get_ref().release_queue();
    *head = Head::default();
}

/// Sends a TLS session's `close_notify` when the connection's fiber ends, however it ends but by
/// an unwind (which may not park).
struct CloseNotify<'s>(&'s Socket);

impl Drop for CloseNotify<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.0.close_notify();
        }
    }
}

/// Counts a request answered, by the handler or by a refusal.
fn count_request(server_loop: &ServerLoop) {
    server_loop.registry.counters().requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// What a handler and the hook are told of `message`.
fn parts_of(message: &Message) -> RequestParts {
    RequestParts {
        version: Version::of_minor(message.version),
        path: message.path.clone(),
        query: message.query.clone(),
        content_length: message.framing.known_length(),
    }
}

/// Answers one request (the connection's first when `opening`); returns whether the connection may
/// carry another.
fn answer(
    server_loop: &ServerLoop,
    conn: &mut BufferedConn<Socket>,
    head: &Head,
    message: &Message,
    addresses: Addresses<'_>,
    opening: bool,
) -> bool {
    let started = Started::now(server_loop);
    let config = &server_loop.config;
    let socket = conn.get_ref().clone();
    let decoder = Decoder::new(message.framing, &config.limits, "request")
        .expect("check_request refused bodies over this same limit");
    let mut state = BodyState::new(decoder, message.expect_continue);
    let parts = parts_of(message);
    socket.set_read_limit(WaitLimit::MinRate(MinRate::new(config.timeouts.body, config.timeouts.min_rate)));
    // The `100 Continue` a body's first read sends is bounded like a response.
    socket.set_write_limit(WaitLimit::MinRate(MinRate::new(config.timeouts.send, config.timeouts.min_rate)));
    let mut close = false;
    let mut response = if head.target() == "*" {
        // `OPTIONS *` asks about the server itself: nothing to add to a plain 200.
        Response::new(200)
    } else {
        let mut source = Http1Body { conn: &mut *conn, state: &mut state };
        let body = RequestBody { source: &mut source };
        let mut request =
            Request { head, parts: &parts, peer: addresses.peer, local: addresses.local, tls: addresses.tls, body };
        match catch(|| config.handler.handle(&mut request)) {
            Ok(response) => response,
            Err(payload) => {
                let text = panic_message(&*payload);
                log::error!("the handler panicked on {} {}: {text}; answering 500", head.method(), head.target());
                close = true;
                Response::error(500, "the handler failed")
            }
        }
    };
    if let Some((status, why)) = state.failure.take() {
        log::debug!("{}: the request body of {} {} failed: {why}", addresses.peer, head.method(), head.target());
        let Some(status) = status else { return false };
        response = Response::error(status, &why);
        close = true;
    }
    let body_done = state.decoder.is_done();
    let drainable = match message.framing {
        Framing::Length(len) => len - state.decoder.consumed() <= DRAIN_LIMIT,
        _ => true,
    };
    close |=
        !message.keep_alive || server_loop.registry.is_stopping() || (!body_done && (state.continue_due || !drainable));
    socket.set_write_limit(WaitLimit::MinRate(MinRate::new(config.timeouts.send, config.timeouts.min_rate)));
    let cx = Context { head_request: head.method() == "HEAD", version: message.version, close, opening };
    let sent = write::send(&socket, &mut response, cx);
    if let Some(started) = started {
        report(server_loop, Received::Head(head), Some(&parts), &response, sent, addresses, started);
    }
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

/// Answers a request the server will not take, and closes the connection. Out of line, so that
/// its frame is no part of `serve`'s, which an idle connection keeps on its stack.
#[inline(never)]
fn refuse(server_loop: &ServerLoop, socket: &Socket, refusal: &Refusal, head: Received<'_>, addresses: Addresses<'_>) {
    let started = Started::now(server_loop);
    log::debug!("{}: refused with {}: {}", addresses.peer, refusal.status, refusal.why);
    let mut response = Response::error(refusal.status, &refusal.why);
    let timeouts = server_loop.config.timeouts;
    socket.set_write_limit(WaitLimit::MinRate(MinRate::new(timeouts.send, timeouts.min_rate)));
    let cx = Context { head_request: false, version: 1, close: true, opening: false };
    let sent = write::send(socket, &mut response, cx);
    if let Some(started) = started {
        report(server_loop, head, None, &response, sent, addresses, started);
    }
    if sent.complete {
        linger(socket);
    }
}

/// Calls the server's response hook, if it has one.
fn report(
    server_loop: &ServerLoop,
    head: Received<'_>,
    parts: Option<&RequestParts>,
    response: &Response,
    sent: Sent,
    addresses: Addresses<'_>,
    started: Started,
) {
    if let Some(hook) = &server_loop.config.hook {
        let (head, line) = match head {
            Received::Head(head) => (Some(head), None),
            Received::Line(line) => (None, line),
        };
        let exchange = Exchange {
            head,
            line,
            parts,
            response,
            peer: addresses.peer,
            local: addresses.local,
            tls: addresses.tls,
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
                addresses.peer,
                response.status(),
                panic_message(&*payload)
            );
        }
    }
}
