//! The HTTP/2 driver, on the `h2` crate: the connection's fiber owns the h2 connection and drives
//! it (`accept` in `neverblock::block_on`, which parks only this fiber), and each stream's handler
//! runs on a fiber of its own, with the same `Request`, `Response` and handler as HTTP/1.
//!
//! Every fiber of a connection is on its loop's thread. A stream's fiber sends its response
//! through h2's shared state, which wakes the connection's `block_on` to write the frames; the
//! connection's reads of WINDOW_UPDATE frames wake a stream waiting for capacity. Windows are
//! 1 MiB for the connection and for each stream (hyper's; the 64 KiB default caps a download at
//! window/RTT), at most 128 streams at once, header lists bounded as HTTP/1's heads are. A
//! connection without streams for the keep-alive timeout, or on a stopping server, is ended with
//! `GOAWAY`, letting streams in flight finish.
//!
//! As in Go's x/net/http2 (`scheduleHandler`), at most [`MAX_STREAMS`] handlers run at once on a
//! connection: a client that resets its streams frees their slots in h2 while their handlers run
//! on (CVE-2023-44487, rapid reset), so streams beyond the cap wait in a queue of
//! [`MAX_WAITING`], each taken by the next handler fiber to finish (one reset meanwhile is
//! dropped unanswered), and a stream beyond the queue ends the connection with `GOAWAY`
//! `ENHANCE_YOUR_CALM`.

mod body;
mod send;
mod stream;
mod tls;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Context, Waker};
use std::time::Instant;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};

use neverblock::bridge::AsyncIo;
use neverblock::net::TcpStream;
use neverblock::sync::Notify;
use tokio::io::{AsyncRead, AsyncWrite};

use super::connection::Connection;
use super::tls::TlsSession;
use super::ServerLoop;
use tls::TlsIo;

/// The receive window of the connection and of each stream.
const WINDOW: u32 = 1 << 20;
/// `SETTINGS_MAX_CONCURRENT_STREAMS`, and the most handlers running at once on a connection.
const MAX_STREAMS: u32 = 128;
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

/// Serves the connection (its TLS handshake made, on an HTTPS listener) until the client or the
/// server ends it and its streams are answered.
pub(super) fn serve(
    stream: Rc<TcpStream>,
    session: Option<TlsSession>,
    connection: Connection,
    server_loop: &Rc<ServerLoop>,
) {
    let socket = AsyncIo::new(stream);
    match session {
        None => drive(socket, connection, server_loop),
        Some(session) => drive(TlsIo::new(socket, session), connection, server_loop),
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
        let mut next = Some(accepted);
        while let Some((request, respond)) = next {
            stream::answer(request, respond, &connection, &server_loop);
            next = active.0.next_waiting();
        }
    });
    if let Err(e) = spawned {
        // The stream's parts went with the closure: h2 resets it when they are dropped.
        log::error!("{peer}: an HTTP/2 stream closed unanswered: {e}");
    }
    true
}

/// Runs the connection over `io`.
fn drive<T: AsyncRead + AsyncWrite + Unpin>(io: T, connection: Connection, server_loop: &Rc<ServerLoop>) {
    let config = &server_loop.config;
    let peer = connection.peer;
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .max_concurrent_streams(MAX_STREAMS)
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
    let streams = Rc::new(Streams::default());
    let mut going_away = false;
    loop {
        let idle = streams.active.get() == 0;
        if idle {
            connection.registered.set_idle_since(Some(Instant::now()));
        }
        if !going_away && server_loop.registry.is_stopping() {
            going_away = true;
            h2.graceful_shutdown();
        }
        let next = neverblock::timeout(config.timeouts.keep_alive, || neverblock::block_on(h2.accept()));
        connection.registered.set_idle_since(None);
        let accepted = match next {
            Ok(Ok(Some(Ok(stream)))) => stream,
            Ok(Ok(Some(Err(e)))) => {
                log::debug!("{peer}: HTTP/2 connection failed: {e}");
                break;
            }
            Ok(Ok(None)) => break,
            Ok(Err(_)) | Err(_) => {
                if idle && streams.active.get() == 0 && !going_away {
                    going_away = true;
                    h2.graceful_shutdown();
                }
                continue;
            }
        };
        if !schedule(accepted, &streams, &connection, server_loop) {
            log::info!(
                "{peer}: more than {} HTTP/2 streams waiting for a handler (rapid reset?); ending the connection",
                MAX_WAITING
            );
            h2.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
            break;
        }
    }
    // Streams still waiting are reset as they are dropped.
    streams.waiting.borrow_mut().clear();
    // Frames still owed go out, and streams in flight finish, before the connection ends.
    if let Err(e) = neverblock::block_on(poll_fn(|cx| h2.poll_closed(cx))).unwrap_or(Ok(())) {
        log::debug!("{peer}: HTTP/2 connection ended: {e}");
    }
    while streams.active.get() > 0 {
        if streams.none.notified().is_err() {
            break;
        }
    }
}
