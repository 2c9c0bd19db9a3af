//! Listening: an address bound on every loop (`SO_REUSEPORT`: the kernel spreads connections
//! across them) or sockets handed over by another process, cleartext or TLS, and each loop's
//! accept loop on them: a fiber per connection, handed to its protocol's driver, and no lock-out
//! when file descriptors run out.
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

use neverblock::net::{TcpListener, TcpStream};
use neverblock::runtime::TaskBuilder;

use super::registry::{is_out_of_descriptors, Registered, SHED_WAIT};
use super::steering;
use super::tls::TlsConfig;
use super::{connection, naming, ServerLoop};
use crate::error::{Error, ErrorKind};

const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// An address the server listens on: its sockets (one per loop when bound here; as many as were
/// handed over when adopted), and the TLS its connections speak.
#[derive(Debug)]
pub(super) struct Listener {
    pub(super) addr: SocketAddr,
    pub(super) tls: Option<TlsConfig>,
    pub(super) sockets: Vec<StdListener>,
}

impl Listener {
    /// Binds `addr` once per loop, `loops` times; with `shared`, beside other processes that
    /// listen there with `SO_REUSEPORT` (else a port in use is an error).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Listen`] if the address does not resolve or cannot be bound (in use, not
    /// allowed), naming it.
    pub(super) fn bind(
        addr: impl ToSocketAddrs,
        loops: usize,
        tls: Option<TlsConfig>,
        shared: bool,
    ) -> Result<Listener, Error> {
        let addr = addr
            .to_socket_addrs()
            .map_err(|e| listen_error("resolve the address to listen on", e))?
            .next()
            .ok_or_else(|| Error::new(ErrorKind::Listen, "the address to listen on resolves to nothing"))?;
        if addr.port() != 0 && !shared {
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
        let mut sockets = vec![first];
        for _ in 1..loops {
            sockets.push(bind(addr)?);
        }
        Ok(Listener { addr, tls, sockets })
    }

    /// Listens on sockets bound elsewhere (handed over by systemd, or by the process this one
    /// replaces), all listening TCP sockets on one address.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Listen`] for no socket, one that is not a listening TCP socket, or sockets on
    /// different addresses.
    pub(super) fn adopt(sockets: Vec<StdListener>, tls: Option<TlsConfig>) -> Result<Listener, Error> {
        let mut addr = None;
        for socket in &sockets {
            let local = listening_tcp(socket)?;
            match addr {
                Some(first) if first != local => {
                    let why = format!("sockets handed over together listen on {first} and {local}");
                    return Err(Error::new(ErrorKind::Listen, why));
                }
                _ => addr = Some(local),
            }
        }
        let addr = addr.ok_or_else(|| Error::new(ErrorKind::Listen, "no socket to listen on was handed over"))?;
        Ok(Listener { addr, tls, sockets })
    }

    /// `http://ADDR/` or `https://ADDR/`.
    pub(super) fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}/", self.addr)
    }

    /// Its sockets dealt out to `loops` loops: socket `i` to loop `i % loops`, and a loop left
    /// without one (fewer sockets than loops) given a duplicate of socket `loop % sockets`, so
    /// that every socket is accepted on and every loop accepts.
    ///
    /// # Errors
    ///
    /// Duplicating a socket failed (out of descriptors).
    pub(super) fn per_loop(self, loops: usize) -> io::Result<Vec<Vec<StdListener>>> {
        let mut per_loop: Vec<Vec<StdListener>> = (0..loops).map(|_| Vec::new()).collect();
        let count = self.sockets.len();
        for (index, sockets) in per_loop.iter_mut().enumerate().skip(count) {
            sockets.push(self.sockets[index % count].try_clone()?);
        }
        for (index, socket) in self.sockets.into_iter().enumerate() {
            per_loop[index % loops].push(socket);
        }
        Ok(per_loop)
    }
}

/// One address a running server listens on, with duplicates of its sockets: what
/// [`ServerHandle::sockets`](super::ServerHandle::sockets) gives, to hand to another process
/// (which then accepts on the very sockets this server accepts on, so no connection is refused
/// while both run, nor lost when this one stops).
///
/// # Examples
///
/// ```
/// use neverblock_http::server::{Request, Response, Server};
///
/// let (ready, serving) = std::sync::mpsc::channel();
/// let server = Server::builder().workers(2).on_ready(move || ready.send(()).unwrap()).bind("127.0.0.1:0").unwrap();
/// let handle = server.handle();
/// let running = std::thread::spawn(move || server.run(|_: &mut Request<'_>| Response::new(204)));
/// serving.recv().unwrap();
/// let listening = handle.sockets().unwrap();
/// assert_eq!((listening.len(), listening[0].sockets.len(), listening[0].tls), (1, 2, false));
/// handle.shutdown();
/// running.join().unwrap().unwrap();
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct ListeningSockets {
    /// `http://ADDR/` or `https://ADDR/`.
    pub url: String,
    /// Whether its connections speak TLS.
    pub tls: bool,
    /// Its sockets: one per loop when the server bound them, else those it was given.
    pub sockets: Vec<StdListener>,
}

impl ListeningSockets {
    /// Duplicates of `listener`'s sockets.
    pub(super) fn of(listener: &Listener) -> io::Result<ListeningSockets> {
        Ok(ListeningSockets {
            url: listener.url(),
            tls: listener.tls.is_some(),
            sockets: duplicates(&listener.sockets)?,
        })
    }

    /// Duplicates of these.
    pub(super) fn try_clone(&self) -> io::Result<ListeningSockets> {
        Ok(ListeningSockets { url: self.url.clone(), tls: self.tls, sockets: duplicates(&self.sockets)? })
    }
}

/// A duplicate of each of `sockets`.
fn duplicates(sockets: &[StdListener]) -> io::Result<Vec<StdListener>> {
    sockets.iter().map(StdListener::try_clone).collect()
}

/// The address of `socket`, a listening TCP socket.
fn listening_tcp(socket: &StdListener) -> Result<SocketAddr, Error> {
    use rustix::net::{sockopt, SocketType};
    let what = "check a socket handed over";
    let stream = sockopt::socket_type(socket).map_err(|e| listen_error(what, e.into()))? == SocketType::STREAM;
    let listening = sockopt::socket_acceptconn(socket).map_err(|e| listen_error(what, e.into()))?;
    let addr = socket.local_addr().ok().filter(|_| stream && listening);
    addr.ok_or_else(|| Error::new(ErrorKind::Listen, "a socket handed over is not a listening TCP socket"))
}

/// A failure to listen: what was being done, and why it failed.
fn listen_error(what: &str, e: io::Error) -> Error {
    Error::with_source(ErrorKind::Listen, what.to_owned(), e)
}

/// Accepts connections until cancelled (a shutdown) or the listener fails; returns the failure.
/// On a listener `steered` to this loop's CPU, a loop that has held more than its share of
/// connections for a while passes new ones to the loop with the fewest (see [`steering`]).
pub(super) fn accept_loop(
    listener: TcpListener,
    tls: Option<TlsConfig>,
    server_loop: Rc<ServerLoop>,
    steered: bool,
) -> io::Error {
    let mut backoff = None::<Duration>;
    let mut shedding = ShedLog::default();
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                if backoff.take().is_some() {
                    log::warn!("accepting again");
                }
                server_loop.registry.counters().accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match steered.then(|| server_loop.balance.elsewhere(&server_loop)).flatten() {
                    None => serve_accepted(stream, peer, &server_loop, tls.clone()),
                    Some(to) => steering::hand_over(stream, peer, tls.clone(), &server_loop, to),
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

/// Serves `stream`, a connection from `peer`, on `server_loop`, in a fiber of its own.
pub(super) fn serve_accepted(
    stream: TcpStream,
    peer: SocketAddr,
    server_loop: &Rc<ServerLoop>,
    tls: Option<TlsConfig>,
) {
    spawn_connection(stream, peer, server_loop, tls.is_some(), move |stream, registered, server_loop| {
        connection::serve(stream, registered, peer, server_loop, tls.as_ref());
    });
}

/// Enters `stream`, a connection from `peer` (over TLS when `tls`), in `server_loop`'s registry at
/// once, and serves it there with `serve` in a fiber of its own: a shutdown that begins before the
/// fiber first runs still finds the connection.
pub(super) fn spawn_connection(
    stream: TcpStream,
    peer: SocketAddr,
    server_loop: &Rc<ServerLoop>,
    tls: bool,
    serve: impl FnOnce(Rc<TcpStream>, Registered, &Rc<ServerLoop>) + 'static,
) {
    let name = naming::connection(peer, tls);
    let stream = Rc::new(stream);
    let registered = server_loop.registry.enter(stream.clone());
    let server_loop = server_loop.clone();
    if let Err(e) = TaskBuilder::new().name(&name).try_spawn(move || serve(stream, registered, &server_loop)) {
        log::error!("connection from {peer} closed unserved: {e}");
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
