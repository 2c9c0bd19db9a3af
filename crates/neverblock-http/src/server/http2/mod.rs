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

mod body;
mod send;
mod stream;
mod tls;

use std::cell::Cell;
use std::future::poll_fn;
use std::rc::Rc;
use std::time::Instant;

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
/// `SETTINGS_MAX_CONCURRENT_STREAMS`.
const MAX_STREAMS: u32 = 128;

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

/// The streams of a connection being answered.
#[derive(Debug, Default)]
struct Streams {
    active: Cell<usize>,
    /// Poked when the last active stream ends.
    none: Notify,
}

/// Ends a stream's count when its fiber ends, however it ends.
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

/// Runs the connection over `io`.
fn drive<T: AsyncRead + AsyncWrite + Unpin>(io: T, connection: Connection, server_loop: &Rc<ServerLoop>) {
    let config = &server_loop.config;
    let peer = connection.peer;
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .max_concurrent_streams(MAX_STREAMS)
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
        let (request, respond) = match next {
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
        streams.active.set(streams.active.get() + 1);
        let active = Active(streams.clone());
        let (connection, server_loop) = (connection.clone(), server_loop.clone());
        let spawned = neverblock::try_spawn(move || {
            let _active = active;
            stream::answer(request, respond, &connection, &server_loop);
        });
        if let Err(e) = spawned {
            // The stream's parts went with the closure: h2 resets it when they are dropped.
            log::error!("{peer}: an HTTP/2 stream closed unanswered: {e}");
        }
    }
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
