//! A server's settings: loops, timeouts, limits, the hooks, signals; and binding its first listener.

use std::fmt;
use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::Duration;

use super::exchange::Exchange;
use super::tls::{Handshake, TlsConfig};
use super::{Handler, Server};
use crate::error::Error;
use crate::wire::{Limits, MAX_HEADERS_CAP};

/// The hook called after each response.
pub(super) type Hook = Arc<dyn Fn(&Exchange<'_>) + Send + Sync>;
/// The hook called after each TLS handshake.
pub(super) type HandshakeHook = Arc<dyn Fn(&Handshake<'_>) + Send + Sync>;
/// The hook called once every loop accepts.
pub(super) type ReadyHook = Arc<dyn Fn() + Send + Sync>;

/// How long a client may take, and how slow it may be.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timeouts {
    pub(super) header: Duration,
    pub(super) keep_alive: Duration,
    pub(super) body: Duration,
    pub(super) send: Duration,
    pub(super) min_rate: u64,
    pub(super) shutdown: Duration,
}

/// What every loop of a running server shares.
pub(super) struct Config {
    pub(super) handler: Arc<dyn Handler>,
    pub(super) hook: Option<Hook>,
    pub(super) handshake_hook: Option<HandshakeHook>,
    pub(super) ready_hook: Option<ReadyHook>,
    pub(super) timeouts: Timeouts,
    pub(super) limits: Limits,
    /// Whether connections may speak HTTP/2 (ALPN `h2`, or the preface in cleartext).
    pub(super) http2: bool,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config").field("timeouts", &self.timeouts).field("limits", &self.limits).finish_non_exhaustive()
    }
}

/// Settings for a [`Server`], then [`bind`](ServerBuilder::bind).
///
/// Defaults: a loop per core; a request head must arrive whole within 20 s of its first byte (of
/// the connection's start, for the first request); an idle kept-alive connection is closed after
/// 60 s; a read of the request body or a write of the response waits at most 30 s, and once that
/// much time has been spent waiting, the client must keep up 500 bytes a second on average
/// (Apache's `MinRate`), so a client that drips a byte per timeout period is dropped; graceful
/// shutdown waits 10 s for requests in flight; request lines up to 8 KiB, heads up to 64 KiB with
/// at most 100 fields, bodies up to 16 MiB; no response hook; signals untouched; a port another
/// process listens on is refused.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use neverblock_http::server::Server;
///
/// let server = Server::builder()
///     .workers(2)
///     .header_timeout(Duration::from_secs(10))
///     .keep_alive_timeout(Duration::from_secs(30))
///     .max_body(1 << 20)
///     .bind("127.0.0.1:0")
///     .unwrap();
/// assert_ne!(server.local_addr().port(), 0);
/// ```
#[derive(Clone)]
pub struct ServerBuilder {
    workers: Option<usize>,
    timeouts: Timeouts,
    limits: Limits,
    hook: Option<Hook>,
    handshake_hook: Option<HandshakeHook>,
    ready_hook: Option<ReadyHook>,
    signals: bool,
    http2: bool,
    reuse_port: bool,
    pin_loops: bool,
    stall_warning: Duration,
}

impl Default for ServerBuilder {
    fn default() -> ServerBuilder {
        ServerBuilder {
            workers: None,
            timeouts: Timeouts {
                header: Duration::from_secs(20),
                keep_alive: Duration::from_secs(60),
                body: Duration::from_secs(30),
                send: Duration::from_secs(30),
                min_rate: 500,
                shutdown: Duration::from_secs(10),
            },
            limits: Limits { max_body: 16 << 20, ..Limits::default() },
            hook: None,
            handshake_hook: None,
            ready_hook: None,
            signals: false,
            http2: true,
            reuse_port: false,
            pin_loops: true,
            stall_warning: neverblock::runtime::DEFAULT_STALL_WARNING,
        }
    }
}

impl fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("workers", &self.workers)
            .field("timeouts", &self.timeouts)
            .field("limits", &self.limits)
            .field("signals", &self.signals)
            .field("http2", &self.http2)
            .field("reuse_port", &self.reuse_port)
            .field("pin_loops", &self.pin_loops)
            .field("stall_warning", &self.stall_warning)
            .finish_non_exhaustive()
    }
}

impl ServerBuilder {
    /// Runs `n` loops, one thread each, each accepting on its own listener (`SO_REUSEPORT`)
    /// (default: [`available_threads`](neverblock::runtime::available_threads)).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let server = Server::builder().workers(2).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn workers(mut self, n: usize) -> ServerBuilder {
        self.workers = Some(n.max(1));
        self
    }

    /// With a loop on every CPU the process may use (the default number) and two or more, pins
    /// each loop to a CPU of its own and has the kernel hand each loop the connections whose
    /// packets arrive on its CPU, on the listeners it holds alone (default: on; kernels since late
    /// 2022 steer them, older ones spread them by hash). A request is then woken, read, handled
    /// and answered on the CPU that received it, with no wake-up sent to another CPU. A loop that
    /// holds more than its share for 10 ms (every packet arriving on one CPU, from a network card
    /// with one queue) passes new connections to the loop with the fewest, and moves its cleartext
    /// HTTP/1 connections there between requests (those are then served on another CPU than the
    /// one their packets arrive on); no connection waits for that. A thread a handler
    /// starts inherits its loop's one CPU. Off, or with fewer loops than CPUs: the loops run
    /// wherever the scheduler puts them, and the kernel spreads connections by a hash of their
    /// addresses; a machine whose CPUs other busy processes share may prefer that.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let server = Server::builder().workers(2).pin_loops(false).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn pin_loops(mut self, pin: bool) -> ServerBuilder {
        self.pin_loops = pin;
        self
    }

    /// How long a request head may take from its first byte (a new connection's first head: from
    /// the connection's start). Past it, the client gets 408 and the connection closes.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    /// use std::time::Duration;
    ///
    /// let server = Server::builder().header_timeout(Duration::from_secs(5)).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn header_timeout(mut self, timeout: Duration) -> ServerBuilder {
        self.timeouts.header = timeout;
        self
    }

    /// How long a kept-alive connection may wait for its next request.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    /// use std::time::Duration;
    ///
    /// let server = Server::builder().keep_alive_timeout(Duration::from_secs(15)).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn keep_alive_timeout(mut self, timeout: Duration) -> ServerBuilder {
        self.timeouts.keep_alive = timeout;
        self
    }

    /// How long one read of a request body may wait (and the grace before the minimum rate).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    /// use std::time::Duration;
    ///
    /// let server = Server::builder().body_timeout(Duration::from_secs(10)).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn body_timeout(mut self, timeout: Duration) -> ServerBuilder {
        self.timeouts.body = timeout;
        self
    }

    /// How long one write of a response may wait (and the grace before the minimum rate).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    /// use std::time::Duration;
    ///
    /// let server = Server::builder().send_timeout(Duration::from_secs(10)).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn send_timeout(mut self, timeout: Duration) -> ServerBuilder {
        self.timeouts.send = timeout;
        self
    }

    /// The minimum average rate, in bytes a second, of a body in either direction while the server
    /// waits on the client, once the body or send timeout has been spent waiting (0: none).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    /// // Uploads and downloads slower than 10 kB/s, once the grace is spent, are dropped.
    /// let server = Server::builder().min_data_rate(10_000).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn min_data_rate(mut self, bytes_per_second: u64) -> ServerBuilder {
        self.timeouts.min_rate = bytes_per_second;
        self
    }

    /// How long a graceful shutdown waits for requests in flight before closing their connections.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    /// use std::time::Duration;
    ///
    /// let server = Server::builder().shutdown_timeout(Duration::from_secs(30)).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn shutdown_timeout(mut self, timeout: Duration) -> ServerBuilder {
        self.timeouts.shutdown = timeout;
        self
    }

    /// The longest request line (method, target, version); longer ones get 414.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let server = Server::builder().max_request_line(2048).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn max_request_line(mut self, bytes: usize) -> ServerBuilder {
        self.limits.max_line = bytes;
        self
    }

    /// The longest request head; longer ones get 431.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let server = Server::builder().max_head(16 * 1024).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn max_head(mut self, bytes: usize) -> ServerBuilder {
        self.limits.max_head = bytes;
        self
    }

    /// The most header fields in a request (at most 256); more get 431.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let server = Server::builder().max_headers(50).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn max_headers(mut self, n: usize) -> ServerBuilder {
        self.limits.max_headers = n.clamp(1, MAX_HEADERS_CAP);
        self
    }

    /// The longest request body; longer ones get 413.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    /// // Uploads up to 100 MiB.
    /// let server = Server::builder().max_body(100 << 20).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn max_body(mut self, bytes: u64) -> ServerBuilder {
        self.limits.max_body = bytes;
        self
    }

    /// Calls `hook` after each response, on the connection's fiber, with the request and what was
    /// sent: the place for access logs and metrics. It should not block for long. A hook that
    /// panics is logged as an error and loses that call only: the connection goes on.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Exchange, Server};
    ///
    /// let server = Server::builder()
    ///     .on_response(|x: &Exchange<'_>| log::info!("{} {} {} {}", x.method(), x.target(), x.status(), x.body_bytes()))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn on_response(mut self, hook: impl Fn(&Exchange<'_>) + Send + Sync + 'static) -> ServerBuilder {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Calls `hook` after each TLS handshake on an HTTPS listener, however it ended, on the
    /// connection's fiber: the place for handshake metrics. It should not block for long; a hook
    /// that panics is logged and loses that call only.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Handshake, Server};
    ///
    /// let server = Server::builder()
    ///     .on_handshake(|h: &Handshake<'_>| log::debug!("{} {:?} in {:?}", h.peer_addr(), h.outcome(), h.duration()))
    ///     .bind("127.0.0.1:0")
    ///     .unwrap();
    /// # drop(server);
    /// ```
    pub fn on_handshake(mut self, hook: impl Fn(&Handshake<'_>) + Send + Sync + 'static) -> ServerBuilder {
        self.handshake_hook = Some(Arc::new(hook));
        self
    }

    /// Calls `hook` once, when every loop of the running server accepts connections on its
    /// listeners (not at all if the server stops first): the moment to tell whoever waits for the
    /// server to serve, such as the process it replaces. It runs on one of the loops and should
    /// not block for long.
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
    /// handle.shutdown();
    /// running.join().unwrap().unwrap();
    /// ```
    pub fn on_ready(mut self, hook: impl Fn() + Send + Sync + 'static) -> ServerBuilder {
        self.ready_hook = Some(Arc::new(hook));
        self
    }

    /// Binds with `SO_REUSEPORT` beside other processes (of the same user) that listen on the same
    /// port that way, the kernel spreading connections over all of them (default: off, and a port
    /// in use is an error). Each process's own loops share the port this way in any case.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let first = Server::builder().workers(1).reuse_port(true).bind("127.0.0.1:0").unwrap();
    /// let second = Server::builder().workers(1).reuse_port(true).bind(first.local_addr()).unwrap();
    /// assert_eq!(first.local_addr(), second.local_addr());
    /// ```
    pub fn reuse_port(mut self, shared: bool) -> ServerBuilder {
        self.reuse_port = shared;
        self
    }

    /// Shuts the server down gracefully on SIGTERM or SIGINT; a second signal closes every
    /// connection at once. The signals are caught from the moment the server is bound, so one sent
    /// as soon as its address is known is never lost (if it comes before [`run`](Server::run), the
    /// run shuts down as it starts). Once the server has returned, or is dropped without running,
    /// the signals act as by default again.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let server = Server::builder().shutdown_on_signals().bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn shutdown_on_signals(mut self) -> ServerBuilder {
        self.signals = true;
        self
    }

    /// Whether connections may speak HTTP/2 (default: yes): over TLS when the client's ALPN offers
    /// `h2` (preferred over `http/1.1`), in cleartext when a connection opens with HTTP/2's
    /// preface (prior knowledge; there is no `Upgrade: h2c`). Off, TLS offers only `http/1.1` and
    /// a preface is answered as HTTP/1.1 answers it: `505 HTTP Version Not
    /// Supported`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let http1_only = Server::builder().http2(false).bind("127.0.0.1:0").unwrap();
    /// # drop(http1_only);
    /// ```
    pub fn http2(mut self, enabled: bool) -> ServerBuilder {
        self.http2 = enabled;
        self
    }

    /// Warns when a loop has not come back to its event loop for longer than `threshold`: a
    /// handler computed or blocked without parking, and every connection of its loop waited. The
    /// warning names the connection (`http 203.0.113.7:50312`) and the request it was answering
    /// (`GET /report`); see [`Builder::stall_warning`](neverblock::runtime::Builder::stall_warning).
    /// Default 100 ms; `Duration::ZERO` turns it off.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use neverblock_http::server::Server;
    ///
    /// let patient = Server::builder().stall_warning(Duration::from_secs(1)).bind("127.0.0.1:0").unwrap();
    /// # drop(patient);
    /// ```
    pub fn stall_warning(mut self, threshold: Duration) -> ServerBuilder {
        self.stall_warning = threshold;
        self
    }

    /// Listens on `addr` for HTTP in cleartext (a listener per loop, all on one port; port 0 picks a
    /// free one). More listeners, cleartext or TLS, can be added to the server
    /// ([`Server::listen`], [`Server::listen_tls`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Listen`](crate::ErrorKind::Listen) if the address does not resolve or cannot be bound (in use, not
    /// allowed), naming it.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    /// use neverblock_http::ErrorKind;
    ///
    /// let server = Server::builder().workers(1).bind("127.0.0.1:0").unwrap();
    /// let taken = Server::builder().bind(server.local_addr()).unwrap_err();
    /// assert_eq!(taken.kind(), ErrorKind::Listen, "the port is in use");
    /// ```
    pub fn bind(self, addr: impl ToSocketAddrs) -> Result<Server, Error> {
        Server::new(self)?.listen(addr)
    }

    /// Listens on `addr` for HTTPS with `tls` (see [`bind`](ServerBuilder::bind)): each connection
    /// makes a TLS handshake first, under the handshake timeout, then speaks HTTP/2 (ALPN `h2`)
    /// or HTTP/1.1 as a cleartext one does, to the same handlers.
    ///
    /// # Errors
    ///
    /// As [`bind`](ServerBuilder::bind).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use neverblock_http::server::{Server, TlsConfig};
    ///
    /// let tls = TlsConfig::from_pem_files("cert.pem", "key.pem").unwrap();
    /// let server = Server::builder().bind_tls("0.0.0.0:443", &tls).unwrap().listen("0.0.0.0:80").unwrap();
    /// # drop(server);
    /// ```
    pub fn bind_tls(self, addr: impl ToSocketAddrs, tls: &TlsConfig) -> Result<Server, Error> {
        Server::new(self)?.listen_tls(addr, tls)
    }

    /// Listens for HTTP in cleartext on `sockets`, bound elsewhere: handed over by systemd's
    /// socket activation or by the process this one replaces (see
    /// [`ServerHandle::sockets`](super::ServerHandle::sockets)). They are dealt out to the loops
    /// (a loop left without one accepts on a duplicate of another), so every socket is accepted
    /// on, however many there are.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Listen`](crate::ErrorKind::Listen) for no socket, one that is not a listening
    /// TCP socket, or sockets on different addresses.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let bound_elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let addr = bound_elsewhere.local_addr().unwrap();
    /// let server = Server::builder().workers(2).bind_sockets(vec![bound_elsewhere]).unwrap();
    /// assert_eq!(server.local_addr(), addr);
    /// ```
    pub fn bind_sockets(self, sockets: Vec<std::net::TcpListener>) -> Result<Server, Error> {
        Server::new(self)?.listen_sockets(sockets)
    }

    /// Listens for HTTPS with `tls` on `sockets`, bound elsewhere (see
    /// [`bind_sockets`](ServerBuilder::bind_sockets)).
    ///
    /// # Errors
    ///
    /// As [`bind_sockets`](ServerBuilder::bind_sockets).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use neverblock_http::server::{Server, TlsConfig};
    ///
    /// let tls = TlsConfig::from_pem_files("cert.pem", "key.pem").unwrap();
    /// let bound_elsewhere = std::net::TcpListener::bind("0.0.0.0:443").unwrap();
    /// let server = Server::builder().bind_sockets_tls(vec![bound_elsewhere], &tls).unwrap();
    /// # drop(server);
    /// ```
    pub fn bind_sockets_tls(self, sockets: Vec<std::net::TcpListener>, tls: &TlsConfig) -> Result<Server, Error> {
        Server::new(self)?.listen_sockets_tls(sockets, tls)
    }

    /// Whether the loops are pinned to CPUs.
    pub(super) fn pins_loops(&self) -> bool {
        self.pin_loops
    }

    /// How many loops the server runs.
    pub(super) fn loops(&self) -> usize {
        self.workers.unwrap_or_else(neverblock::runtime::available_threads)
    }

    /// The settings a running server shares, with its handler.
    pub(super) fn config(&self, handler: Arc<dyn Handler>) -> Config {
        Config {
            handler,
            hook: self.hook.clone(),
            handshake_hook: self.handshake_hook.clone(),
            ready_hook: self.ready_hook.clone(),
            timeouts: self.timeouts,
            limits: self.limits,
            http2: self.http2,
        }
    }

    pub(super) fn speaks_http2(&self) -> bool {
        self.http2
    }

    pub(super) fn signals(&self) -> bool {
        self.signals
    }

    pub(super) fn shares_ports(&self) -> bool {
        self.reuse_port
    }

    pub(super) fn stall_threshold(&self) -> Duration {
        self.stall_warning
    }
}
