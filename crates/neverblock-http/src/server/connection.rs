//! A connection from its accept to its protocol's driver: registered with the loop, its TLS
//! handshake made (on an HTTPS listener), then served in HTTP/2 when ALPN chose `h2` or a
//! cleartext connection opens with HTTP/2's preface (prior knowledge), in HTTP/1.1 otherwise.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use neverblock::net::TcpStream;

use super::panics::{catch, panic_message};
use super::registry::Registered;
use super::timed::TimedStream;
use super::tls::{self, Handshake, HandshakeEnd, HandshakeOutcome, TlsConfig, TlsInfo, TlsSession};
use super::{http1, http2, ServerLoop};

/// What a protocol's driver is given of its connection, beside the stream.
#[derive(Debug)]
pub(super) struct Connection {
    pub(super) peer: SocketAddr,
    pub(super) local: SocketAddr,
    /// The TLS the connection speaks, on an HTTPS listener.
    pub(super) tls: Option<TlsInfo>,
    /// Its entry in the loop's registry (idle or busy), until it ends.
    pub(super) registered: Registered,
}

/// Serves the connection (after its TLS handshake, on an HTTPS listener) with the driver of the
/// protocol it speaks, until it ends. The accept loop registered it, so a shutdown that begins
/// before this fiber first runs still gives it its last call.
pub(super) fn serve(
    stream: Rc<TcpStream>,
    registered: Registered,
    peer: SocketAddr,
    server_loop: &Rc<ServerLoop>,
    tls: Option<&TlsConfig>,
) {
    let started = Instant::now();
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().unwrap_or(peer);
    // Accepted before the shutdown began, run after its last call: the closing of idle connections
    // missed it, and a handshake or a peek would wait for its deadline.
    if server_loop.registry.is_idle_closed() {
        return;
    }
    let timed = TimedStream::new(stream.clone());
    let (session, tls_info) = match tls {
        None => (None, None),
        Some(config) => match handshake(&timed, config, &registered, server_loop, peer, started) {
            Some((session, info)) => (Some(session), Some(info)),
            None => return,
        },
    };
    let connection = Connection { peer, local, tls: tls_info, registered };
    let http2 = server_loop.config.http2
        && match &session {
            Some(session) => session.alpn_protocol() == Some(b"h2"),
            None => {
                connection.registered.set_idle_since(Some(started));
                let preface = opens_with_preface(&stream, server_loop.config.timeouts.header);
                connection.registered.set_idle_since(None);
                preface
            }
        };
    let serving = Serving::start(server_loop, usize::from(http2));
    if http2 {
        http2::serve(stream, session, connection, server_loop);
        drop(serving);
    } else {
        // The stream's handles are the driver's alone, so a kept-alive connection can move to
        // another loop between requests (see `steering`).
        drop(stream);
        http1::serve(timed, session, connection, serving, server_loop);
    }
}

/// Makes the TLS handshake of a connection on an HTTPS listener, reporting how it went; `None`
/// when it gave no session. Out of line, and the session boxed, so that the handshake's state
/// (a session is over a kilobyte) is not part of every connection's stack frame: the pages an
/// idle kept-alive connection's fiber has touched stay resident while it waits.
#[inline(never)]
fn handshake(
    timed: &TimedStream,
    config: &TlsConfig,
    registered: &Registered,
    server_loop: &ServerLoop,
    peer: SocketAddr,
    started: Instant,
) -> Option<(Box<TlsSession>, TlsInfo)> {
    // Idle until the handshake's first byte: a shutdown or shedding may close it.
    registered.set_idle_since(Some(started));
    let handshake = tls::handshake(timed, config, started);
    registered.set_idle_since(None);
    match handshake {
        Ok((session, info)) => {
            report_handshake(server_loop, HandshakeOutcome::Completed, Some(&info), peer, started);
            Some((Box::new(session), info))
        }
        Err(end) => {
            handshake_failed(server_loop, end, peer, started);
            None
        }
    }
}

/// A connection counted as served in its protocol (`0`: HTTP/1, `1`: HTTP/2) and as open in it
/// until this drops, however its driver ends (an HTTP/1 connection's may outlive its first fiber).
pub(super) struct Serving(Rc<ServerLoop>, usize);

impl Serving {
    fn start(server_loop: &Rc<ServerLoop>, protocol: usize) -> Serving {
        server_loop.registry.counters().served[protocol].fetch_add(1, Relaxed);
        Serving::resume(server_loop, protocol)
    }

    /// A connection served before, by another loop, counted as open here (and not served again).
    pub(super) fn resume(server_loop: &Rc<ServerLoop>, protocol: usize) -> Serving {
        server_loop.registry.counters().serving[protocol].fetch_add(1, Relaxed);
        Serving(server_loop.clone(), protocol)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.registry.counters().serving[self.1].fetch_sub(1, Relaxed);
    }
}

/// What an HTTP/2 client with prior knowledge sends first (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the connection's first bytes are HTTP/2's preface, looked at without reading them:
/// as soon as they differ from it, or its 24 bytes are there. Waits at most `limit` for them
/// (a preface split across segments is looked at again each millisecond).
fn opens_with_preface(stream: &TcpStream, limit: Duration) -> bool {
    let mut first = [0u8; PREFACE.len()];
    let peeked = neverblock::timeout(limit, || loop {
        match stream.peek(&mut first) {
            Ok(n) if n > 0 && first[..n] == PREFACE[..n] && n < PREFACE.len() => {
                neverblock::sleep(Duration::from_millis(1));
            }
            Ok(n) => return n == PREFACE.len() && first == *PREFACE,
            Err(_) => return false,
        }
    });
    peeked.unwrap_or(false)
}

/// Logs and reports a handshake that gave no session.
fn handshake_failed(server_loop: &ServerLoop, end: HandshakeEnd, peer: SocketAddr, started: Instant) {
    let outcome = match &end {
        HandshakeEnd::PlainHttp => HandshakeOutcome::PlainHttp,
        HandshakeEnd::TimedOut => HandshakeOutcome::TimedOut,
        HandshakeEnd::Closed => HandshakeOutcome::Closed,
        HandshakeEnd::Failed(why) => {
            log::debug!("{peer}: TLS handshake failed: {why}");
            HandshakeOutcome::Failed
        }
    };
    log::debug!("{peer}: no TLS session: {outcome:?} after {:?}", started.elapsed());
    report_handshake(server_loop, outcome, None, peer, started);
}

/// Calls the server's handshake hook, if it has one.
fn report_handshake(
    server_loop: &ServerLoop,
    outcome: HandshakeOutcome,
    tls: Option<&TlsInfo>,
    peer: SocketAddr,
    started: Instant,
) {
    if let Some(hook) = &server_loop.config.handshake_hook {
        let handshake = Handshake { outcome, tls, peer, duration: started.elapsed() };
        if let Err(payload) = catch(|| hook(&handshake)) {
            log::error!("the handshake hook panicked after {peer}: {}", panic_message(&*payload));
        }
    }
}
