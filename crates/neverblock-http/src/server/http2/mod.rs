//! The HTTP/2 driver, on the `h2` crate: the connection's fiber owns the h2 connection and drives
//! it (`accept` in `neverblock::block_on`, which parks only this fiber), and each stream's handler
//! runs on a fiber of its own, with the same `Request`, `Response` and handler as HTTP/1.
//!
//! Every fiber of a connection is on its loop's thread. A stream's fiber sends its response
//! through h2's shared state, which wakes the connection's `block_on` to write the frames (over
//! an [`AsyncIo::batching`] socket, pushed before the fiber waits: a burst of DATA frames leaves
//! in full segments); the
//! connection's reads of WINDOW_UPDATE frames wake a stream waiting for capacity. Windows are
//! 1 MiB for the connection and for each stream (hyper's; the 64 KiB default caps a download at
//! window/RTT), at most 128 streams at once, header lists bounded as HTTP/1's heads are (h2 then
//! answers a longer one 431, and ends the connection with `ENHANCE_YOUR_CALM` for a CONTINUATION
//! flood or a list far longer: an HPACK bomb).
//!
//! A connection without streams for the keep-alive timeout is sent `GOAWAY`, and closed if the
//! client keeps it as long again; a stopping server's registry wakes the connection's fiber,
//! which sends `GOAWAY` at once, letting streams in flight finish. Writes that wait for the
//! client longer than the send timeout (it reads nothing: a SETTINGS or PING flood whose ACKs it
//! never reads, a download it stalls) close the connection, and the last frames owed wait no
//! longer than that either.
//!
//! As in Go's x/net/http2 (`scheduleHandler`), at most [`MAX_STREAMS`] handlers run at once on a
//! connection: a client that resets its streams frees their slots in h2 while their handlers run
//! on (CVE-2023-44487, rapid reset), so streams beyond the cap wait in a queue of
//! [`MAX_WAITING`], each taken by the next handler fiber to finish (one reset meanwhile is
//! dropped unanswered), and a stream beyond the queue ends the connection with `GOAWAY`
//! `ENHANCE_YOUR_CALM`.

mod body;
mod send;
mod stall;
mod stream;
mod tls;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::net::Shutdown;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};

use neverblock::bridge::AsyncIo;
use neverblock::net::TcpStream;
use neverblock::runtime::{TaskActivity, TaskBuilder};
use neverblock::sync::Notify;
use neverblock::JoinHandle;
use tokio::io::{AsyncRead, AsyncWrite};

use super::connection::Connection;
use super::file_piece::FILE_PIECE;
use super::tls::TlsSession;
use super::ServerLoop;
use stall::Watched;
use tls::TlsIo;

/// The receive window of the connection and of each stream.
const WINDOW: u32 = 1 << 20;
/// `SETTINGS_MAX_CONCURRENT_STREAMS`, and the most handlers running at once on a connection.
const MAX_STREAMS: u32 = 128;
/// The most bytes a stream's response may have waiting in h2 for the connection to write them:
/// two file pieces, so a stream reads its file no further ahead than that (h2's default, 400 KiB,
/// let a hundred streams hold 40 MiB between them, each piece a new buffer).
const SEND_BUFFER: usize = 2 * FILE_PIECE;
/// The most streams waiting for a handler fiber: Go's `4 * MaxConcurrentStreams`. A client that
/// keeps to [`MAX_STREAMS`] never gets here; one that resets streams faster than their handlers
/// end does.
const MAX_WAITING: usize = 4 * MAX_STREAMS as usize;
/// The most streams the client may reset before they are accepted (h2's default, as hyper's);
/// beyond it h2 ends the connection with `ENHANCE_YOUR_CALM`. Said here so a new h2 default
/// does not change it silently.
const MAX_PENDING_ACCEPT_RESETS: usize = 20;
/// The most streams h2 may reset for the client's protocol errors before it ends the connection
/// with `ENHANCE_YOUR_CALM` (h2's default).
const MAX_LOCAL_ERROR_RESETS: usize = 1024;

/// The stack of a connection's HTTP/2 driver. h2's polls over rustls reach ~115 KiB in a debug
/// build (h2's handshake alone takes 48 KiB of it), which with the connection's own frames under
/// them is past the runtime's default 128 KiB; a release build needs far less.
const DRIVER_STACK: usize = 256 * 1024;

/// Serves the connection (its TLS handshake made, on an HTTPS listener) until the client or the
/// server ends it and its streams are answered, on a fiber of [`DRIVER_STACK`] that this one
/// waits for.
#[inline(never)] // its state stays off the stack of the connection's fiber, which HTTP/1 keeps small
pub(super) fn serve(
    stream: Rc<TcpStream>,
    session: Option<Box<TlsSession>>,
    connection: Connection,
    server_loop: &Rc<ServerLoop>,
) {
    let peer = connection.peer;
    let server_loop = server_loop.clone();
    let driver = TaskBuilder::new().stack_size(DRIVER_STACK).try_spawn(move || {
        let socket = AsyncIo::batching(stream.clone());
        match session {
            None => drive(socket, &stream, connection, &server_loop),
            Some(session) => drive(TlsIo::new(socket, *session), &stream, connection, &server_loop),
        }
    });
    match driver.map(JoinHandle::join) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => log::error!("{peer}: the HTTP/2 connection's fiber failed: {e}"),
        Err(e) => log::error!("{peer}: an HTTP/2 connection closed unserved: {e}"),
    }
}

/// A stream as h2 hands it over: its request and where its answer goes.
type Accepted = (http::Request<RecvStream>, SendResponse<Bytes>);

/// The streams of a connection being answered, and those waiting for a handler fiber.
#[derive(Debug, Default)]
struct Streams {
    /// Handler fibers running, at most [`MAX_STREAMS`].
    active: Cell<usize>,
    /// Streams accepted while [`MAX_STREAMS`] handlers ran, at most [`MAX_WAITING`].
    waiting: RefCell<VecDeque<Accepted>>,
    /// Poked when the last active stream ends.
    none: Notify,
}

impl Streams {
    /// The next waiting stream its client still wants, those it reset meanwhile dropped.
    fn next_waiting(&self) -> Option<Accepted> {
        loop {
            let (request, mut respond) = self.waiting.borrow_mut().pop_front()?;
            let mut cx = Context::from_waker(Waker::noop());
            if respond.poll_reset(&mut cx).is_pending() {
                return Some((request, respond));
            }
        }
    }
}

/// Ends a handler fiber's count when it ends, however it ends.
struct Active(Rc<Streams>);

impl Drop for Active {
    fn drop(&mut self) {
        let streams = &self.0;
        streams.active.set(streams.active.get() - 1);
        if streams.active.get() == 0 {
            streams.none.notify_all();
        }
    }
}

/// Starts a handler fiber for the stream, or queues it while [`MAX_STREAMS`] run; `false` when
/// the queue is full (the client resets streams faster than handlers end). A fiber answers its
/// stream, then the waiting ones, until none waits.
fn schedule(
    accepted: Accepted,
    streams: &Rc<Streams>,
    connection: &Rc<Connection>,
    server_loop: &Rc<ServerLoop>,
) -> bool {
    if streams.active.get() >= MAX_STREAMS as usize {
        let mut waiting = streams.waiting.borrow_mut();
        if waiting.len() >= MAX_WAITING {
            return false;
        }
        waiting.push_back(accepted);
        return true;
    }
    streams.active.set(streams.active.get() + 1);
    let active = Active(streams.clone());
    let peer = connection.peer;
    let (connection, server_loop) = (connection.clone(), server_loop.clone());
    let spawned = neverblock::try_spawn(move || {
        let activity = TaskActivity::current().expect("a stream is answered on a fiber of its loop");
        let mut next = Some(accepted);
        while let Some((request, respond)) = next {
            stream::answer(request, respond, &connection, &server_loop, &activity);
            next = active.0.next_waiting();
        }
    });
    if let Err(e) = spawned {
        // The stream's parts went with the closure: h2 resets it when they are dropped.
        log::error!("{peer}: an HTTP/2 stream closed unanswered: {e}");
    }
    true
}

/// What the connection's fiber wakes up to.
#[expect(clippy::large_enum_variant, reason = "one at a time, moved straight on: boxing would allocate per stream")]
enum Event {
    /// A stream opened by the client.
    Stream(Accepted),
    /// The server began to shut down.
    Stopping,
    /// The connection ended: cleanly (`None`) or not.
    Closed(Option<h2::Error>),
    /// Its wait is over: time to look at the clock.
    Tick,
}

/// `polled`, after sending the last segment of the frames h2 wrote if it is `Pending` (the
/// connection's fiber is about to wait): the socket is [`AsyncIo::batching`], so the kernel
/// holds a partial one back.
fn pushed_if_pending<T>(polled: Poll<T>, socket: &TcpStream, peer: std::net::SocketAddr) -> Poll<T> {
    if polled.is_pending() {
        if let Err(e) = socket.push() {
            log::debug!("{peer}: the socket could not send its last frames at once: {e}");
        }
    }
    polled
}

/// Runs the connection over `io`, the TLS session's or the socket's own.
fn drive<T: AsyncRead + AsyncWrite + Unpin>(
    io: T,
    socket: &TcpStream,
    connection: Connection,
    server_loop: &Rc<ServerLoop>,
) {
    let config = &server_loop.config;
    let (keep_alive, send_timeout) = (config.timeouts.keep_alive, config.timeouts.send);
    let peer = connection.peer;
    let (io, stall) = Watched::new(io);
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .max_concurrent_streams(MAX_STREAMS)
        .max_send_buffer_size(SEND_BUFFER)
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESETS)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
        .max_header_list_size(u32::try_from(config.limits.max_head).unwrap_or(u32::MAX));
    let handshake = neverblock::timeout(config.timeouts.header, || neverblock::block_on(builder.handshake(io)));
    let mut h2 = match handshake {
        Ok(Ok(Ok(h2))) => h2,
        Ok(Ok(Err(e))) => return log::debug!("{peer}: HTTP/2 handshake failed: {e}"),
        Ok(Err(_)) | Err(_) => return log::debug!("{peer}: no HTTP/2 preface within {:?}", config.timeouts.header),
    };
    let connection = Rc::new(connection);
    let registered = &connection.registered;
    let streams = Rc::new(Streams::default());
    // Since when the connection has had no stream, and since its GOAWAY.
    let (mut idle_since, mut going_away) = (None::<Instant>, None::<Instant>);
    let stalled = loop {
        let now = Instant::now();
        idle_since = (streams.active.get() == 0).then(|| idle_since.unwrap_or(now));
        registered.set_idle_since(idle_since);
        // Quiet since the later of the two: the client has the keep-alive timeout to open a
        // stream, then as long again to close the connection after its GOAWAY.
        let quiet = idle_since.map(|idle| going_away.map_or(idle, |gone| gone.max(idle)));
        let wait =
            quiet.map_or(send_timeout, |quiet| send_timeout.min((quiet + keep_alive).saturating_duration_since(now)));
        let stop_told = going_away.is_some();
        let event = neverblock::timeout(wait, || {
            neverblock::block_on(poll_fn(|cx| {
                if !stop_told && server_loop.registry.is_stopping() {
                    return Poll::Ready(Event::Stopping);
                }
                registered.wake_on_stop(cx.waker());
                pushed_if_pending(h2.poll_accept(cx), socket, peer).map(|next| match next {
                    Some(Ok(accepted)) => Event::Stream(accepted),
                    Some(Err(e)) => Event::Closed(Some(e)),
                    None => Event::Closed(None),
                })
            }))
        });
        registered.set_idle_since(None);
        match event.unwrap_or(Ok(Event::Tick)).unwrap_or(Event::Tick) {
            Event::Stream(accepted) => {
                if !schedule(accepted, &streams, &connection, server_loop) {
                    log::info!(
                        "{peer}: more than {MAX_WAITING} HTTP/2 streams waiting for a handler (rapid reset?); \
                         ending the connection"
                    );
                    h2.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                    break false;
                }
            }
            Event::Stopping => {
                going_away = Some(now);
                h2.graceful_shutdown();
            }
            Event::Closed(None) => break false,
            Event::Closed(Some(e)) => {
                log::debug!("{peer}: HTTP/2 connection failed: {e}");
                break false;
            }
            Event::Tick => {
                if let Some(waited) = stall.waited().filter(|waited| *waited >= send_timeout) {
                    log::info!("{peer}: the client has read nothing for {waited:?} (a flood?); closing the connection");
                    break true;
                }
                match quiet {
                    Some(quiet) if quiet.elapsed() >= keep_alive && going_away.is_none() => {
                        going_away = Some(Instant::now());
                        h2.graceful_shutdown();
                    }
                    Some(quiet) if quiet.elapsed() >= keep_alive => {
                        log::debug!("{peer}: the client kept the connection {keep_alive:?} after its GOAWAY");
                        break false;
                    }
                    _ => {}
                }
            }
        }
    };
    // Streams still waiting are reset as they are dropped.
    streams.waiting.borrow_mut().clear();
    if stalled {
        let _ = socket.shutdown(Shutdown::Both);
    } else {
        // Frames still owed go out, and streams in flight finish, for as long as a write may wait.
        let closed = neverblock::timeout(send_timeout, || {
            neverblock::block_on(poll_fn(|cx| pushed_if_pending(h2.poll_closed(cx), socket, peer)))
        });
        if let Ok(Ok(Err(e))) = closed {
            log::debug!("{peer}: HTTP/2 connection ended: {e}");
        }
    }
    // The streams' handles fail from here on, so their fibers end soon.
    drop(h2);
    while streams.active.get() > 0 {
        if streams.none.notified().is_err() {
            break;
        }
    }
}
