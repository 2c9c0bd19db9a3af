//! Listening: an address bound on every loop (`SO_REUSEPORT`: the kernel spreads connections
//! across them), cleartext or TLS, and each loop's accept loop on it: a fiber per connection,
//! handed to its protocol's driver, and no lock-out when file descriptors run out.
//!
//! `accept` failing with `EMFILE`/`ENFILE` leaves the connection in the kernel's backlog. Waiting
//! for some connection to close, as a plain accept loop does, lets idle clients that hold every
//! descriptor lock everyone else out; so the loop sheds the connections idle longest first (up to
//! an eighth of the idle ones, at least one and at most 32, as nginx drains reusable connections),
//! waits for them to end, and accepts again, logging a line a second at most while it sheds. With
//! nothing idle to shed it backs off (5 ms doubling to 1 s, as Go's `net/http` does) until a
//! descriptor frees up.

use std::io;
use std::net::{SocketAddr, TcpListener as StdListener, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};

use neverblock::net::TcpListener;
use neverblock::runtime::TaskBuilder;

use super::registry::{is_out_of_descriptors, SHED_WAIT};
use super::tls::TlsConfig;
use super::{connection, naming, ServerLoop};
use crate::error::{Error, ErrorKind};

const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// An address the server listens on: a listener per loop, and the TLS its connections speak.
#[derive(Debug)]
pub(super) struct Listener {
    pub(super) addr: SocketAddr,
    pub(super) tls: Option<TlsConfig>,
    /// One per loop, in loop order.
    pub(super) per_loop: Vec<StdListener>,
}

impl Listener {
    /// Binds `addr` once per loop, `loops` times.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Listen`] if the address does not resolve or cannot be bound (in use, not
    /// allowed), naming it.
    pub(super) fn bind(addr: impl ToSocketAddrs, loops: usize, tls: Option<TlsConfig>) -> Result<Listener, Error> {
        let listen_error = |what: &str, e: io::Error| Error::with_source(ErrorKind::Listen, what.to_owned(), e);
        let addr = addr
            .to_socket_addrs()
            .map_err(|e| listen_error("resolve the address to listen on", e))?
            .next()
            .ok_or_else(|| Error::new(ErrorKind::Listen, "the address to listen on resolves to nothing"))?;
        if addr.port() != 0 {
            // SO_REUSEPORT would let this server silently share a port another one of this
            // user listens on; a plain bind fails if anything listens there already.
            drop(StdListener::bind(addr).map_err(|e| listen_error(&format!("listen on {addr}"), e))?);
        }
        let bind = |addr: SocketAddr| {
            TcpListener::bind_reuse_port(addr)
                .and_then(TcpListener::into_std)
                .map_err(|e| listen_error(&format!("listen on {addr}"), e))
        };
        let first = bind(addr)?;
        // Port 0 means any: the others join the port the first one got.
        let addr = first.local_addr().map_err(|e| listen_error("read the bound address", e))?;
        let mut per_loop = vec![first];
        for _ in 1..loops {
            per_loop.push(bind(addr)?);
        }
        Ok(Listener { addr, tls, per_loop })
    }

    /// `http://ADDR/` or `https://ADDR/`.
    pub(super) fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}/", self.addr)
    }
}

/// Accepts connections until cancelled (a shutdown) or the listener fails; returns the failure.
pub(super) fn accept_loop(listener: TcpListener, tls: Option<TlsConfig>, server_loop: Rc<ServerLoop>) -> io::Error {
    let mut backoff = None::<Duration>;
    let mut shedding = ShedLog::default();
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                if backoff.take().is_some() {
                    log::warn!("accepting again");
                }
                server_loop.registry.counters().accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let name = naming::connection(peer, tls.is_some());
                let (server_loop, tls) = (server_loop.clone(), tls.clone());
                if let Err(e) = TaskBuilder::new()
                    .name(&name)
                    .try_spawn(move || connection::serve(stream, peer, &server_loop, tls.as_ref()))
                {
                    log::error!("connection from {peer} closed unserved: {e}");
                }
            }
            Err(e) if is_out_of_descriptors(&e) => {
                let before = server_loop.registry.ended();
                let (shed, oldest) = server_loop.registry.shed_oldest_idle();
                if shed > 0 {
                    shedding.add(shed, oldest, &e);
                    server_loop.registry.wait_ended(before, shed, SHED_WAIT);
                } else {
                    pause(&mut backoff, &e);
                }
            }
            Err(e) if is_exhaustion(&e) => pause(&mut backoff, &e),
            Err(e) if is_transient(&e) => {}
            Err(e) => return e,
        }
    }
}

/// How often shedding is logged: a line a second at most, however fast descriptors run out.
const SHED_LOG_EVERY: Duration = Duration::from_secs(1);

/// Connections shed since the last log line.
#[derive(Debug, Default)]
struct ShedLog {
    last: Option<Instant>,
    shed: usize,
    oldest: Duration,
}

impl ShedLog {
    /// Counts `shed` more connections (the longest idle for `oldest`), and logs them all once a
    /// second has passed since the last line.
    fn add(&mut self, shed: usize, oldest: Duration, e: &io::Error) {
        self.shed += shed;
        self.oldest = self.oldest.max(oldest);
        let now = Instant::now();
        if self.last.is_none_or(|last| now - last >= SHED_LOG_EVERY) {
            log::warn!(
                "accept: {e}; closed the {} connections idle longest (the oldest idle for {:.1?}) to go on accepting",
                self.shed,
                self.oldest
            );
            *self = ShedLog { last: Some(now), shed: 0, oldest: Duration::ZERO };
        }
    }
}

/// Sleeps the next backoff step, logging the first.
fn pause(backoff: &mut Option<Duration>, e: &io::Error) {
    let pause = backoff.map_or(FIRST_BACKOFF, |b| (b * 2).min(MAX_BACKOFF));
    if backoff.is_none() {
        log::warn!("accept: {e}; nothing idle to close, retrying every {pause:?} or more");
    }
    *backoff = Some(pause);
    neverblock::sleep(pause);
}

/// Out of kernel memory, which frees up as connections close.
fn is_exhaustion(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if code == rustix::io::Errno::NOBUFS.raw_os_error() || code == rustix::io::Errno::NOMEM.raw_os_error())
}

/// A connection that went away before it could be accepted, or a signal.
fn is_transient(e: &io::Error) -> bool {
    use rustix::io::Errno;
    let transient = [Errno::CONNABORTED, Errno::PROTO, Errno::PERM, Errno::INTR];
    e.raw_os_error().is_some_and(|code| transient.iter().any(|t| t.raw_os_error() == code))
}
