//! An HTTP/1.1 and HTTP/2 server in blocking style: a fiber per connection (and per HTTP/2
//! stream) over a loop per core, a handler that reads and writes like plain blocking code, and
//! static files sent by the kernel.
//!
//! A [`Server`] listens with one `SO_REUSEPORT` listener per loop (the kernel spreads connections
//! across them); each accepted connection gets a fiber that reads requests in turn (keep-alive,
//! pipelining answered in order), calls the [`Handler`] with each, and writes its [`Response`]. A
//! handler that parks (a socket, a sleep, a database query) parks only its fiber. Slow clients
//! cost a timer each, never a worker; limits, timeouts and request-smuggling defences answer with
//! the status RFC 9110 names (see [`ServerBuilder`]); graceful shutdown is a [`ServerHandle`] call
//! or a signal. [`StaticFiles`] serves a directory; `Proxy` (with the `client` feature) sends
//! requests on to an upstream; [`XSendfile`] sends the files a handler's answers name; the
//! [`on_response`](ServerBuilder::on_response) hook feeds an [`AccessLog`] and [`Metrics`].
//!
//! # Examples
//!
//! A handler that greets, and one request to it:
//!
//! ```
//! use std::io::{Read, Write};
//! use neverblock_http::server::{Request, Response, Server};
//!
//! let server = Server::builder().workers(1).bind("127.0.0.1:0").unwrap();
//! let (addr, handle) = (server.local_addr(), server.handle());
//! let running = std::thread::spawn(move || {
//!     server.run(|request: &mut Request<'_>| {
//!         let mut name = String::new();
//!         request.body().read_to_string(&mut name).unwrap();
//!         Response::new(200).header("Content-Type", "text/plain").body(format!("hello, {name}"))
//!     })
//! });
//!
//! let mut client = std::net::TcpStream::connect(addr).unwrap();
//! client.write_all(b"POST /greet HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nworld").unwrap();
//! let mut answer = String::new();
//! client.read_to_string(&mut answer).unwrap();
//! assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"));
//! assert!(answer.ends_with("\r\n\r\nhello, world"));
//!
//! handle.shutdown();
//! running.join().unwrap().unwrap();
//! ```

mod config;
mod connection;
mod date;
mod exchange;
mod file_piece;
mod handlers;
mod http1;
mod http2;
mod listen;
mod naming;
mod observers;
mod panics;
mod registry;
mod request;
mod response;
mod shutdown;
mod steering;
mod timed;
mod tls;

use std::cell::RefCell;
use std::fmt;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use neverblock::net::TcpListener;
use neverblock::runtime::{spawn_on, Builder};
use neverblock::JoinHandle;

pub use config::ServerBuilder;
pub use exchange::Exchange;
pub use handlers::{FilesThen, HttpsOnly, StaticFiles, XSendfile};
#[cfg(feature = "client")]
pub use handlers::{Proxy, ProxyEvent, UpstreamFailure};
pub use listen::ListeningSockets;
pub use observers::{AccessLog, Instrumented, LogFormat, Metrics};
pub use registry::{is_out_of_descriptors, shed_idle_connections};
pub use request::{Request, RequestBody, Version};
pub use response::{Body, Response};
pub use shutdown::{ServerHandle, ServerStats};
pub use tls::{Handshake, HandshakeOutcome, TlsBuilder, TlsConfig, TlsInfo};

use crate::error::{Error, ErrorKind};
use config::Config;
use listen::Listener;
use registry::Registry;
use shutdown::{ServerState, Signals};

/// What answers requests: any `Fn(&mut Request) -> Response` that may be shared between threads,
/// or a [`StaticFiles`].
///
/// The server calls it on each request's fiber: on HTTP/1.1 the connection's, on HTTP/2 the
/// stream's own (the streams of one connection are handled at once, at most 128), on whichever
/// loop accepted the connection, so it runs on many threads at once; it may park (read a socket,
/// sleep, query a database) and so park only its own fiber. A panic in it, or in the reader of
/// the body it returns before the body's first byte, answers 500; on HTTP/1.1 the connection then
/// closes, on HTTP/2 only that stream ends and the connection goes on.
///
/// # Examples
///
/// ```
/// use neverblock_http::server::{Handler, Request, Response};
///
/// struct Health;
///
/// impl Handler for Health {
///     fn handle(&self, request: &mut Request<'_>) -> Response {
///         match request.path() {
///             "/health" => Response::new(200).body("ok\n"),
///             _ => Response::new(404),
///         }
///     }
/// }
/// # let _ = Health;
/// ```
pub trait Handler: Send + Sync + 'static {
    /// The response to `request`.
    fn handle(&self, request: &mut Request<'_>) -> Response;
}

impl<F> Handler for F
where
    F: Fn(&mut Request<'_>) -> Response + Send + Sync + 'static,
{
    fn handle(&self, request: &mut Request<'_>) -> Response {
        self(request)
    }
}

/// A handler chosen at run time.
///
/// # Examples
///
/// ```
/// use neverblock_http::server::{Handler, Request, Response, StaticFiles};
///
/// let serve_files = std::env::args().any(|arg| arg == "--files");
/// let handler: Box<dyn Handler> = match serve_files {
///     true => Box::new(StaticFiles::new(".").unwrap()),
///     false => Box::new(|_: &mut Request<'_>| Response::new(204)),
/// };
/// # let _ = handler;
/// ```
impl Handler for Box<dyn Handler> {
    fn handle(&self, request: &mut Request<'_>) -> Response {
        (**self).handle(request)
    }
}

/// A bound server, to [`run`](Server::run) with a handler.
///
/// # Examples
///
/// ```no_run
/// use neverblock_http::server::{Server, StaticFiles};
///
/// let server = Server::builder().shutdown_on_signals().bind("127.0.0.1:8080").unwrap();
/// println!("listening on http://{}/", server.local_addr());
/// server.run(StaticFiles::new(".").unwrap()).unwrap();
/// ```
pub struct Server {
    listeners: Vec<Listener>,
    settings: ServerBuilder,
    state: Arc<ServerState>,
    /// SIGTERM and SIGINT, caught from the moment the server is made (when its settings ask).
    signals: Option<(Signals, std::os::unix::net::UnixStream)>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("urls", &self.urls())
            .field("loops", &self.state.controls.len())
            .finish_non_exhaustive()
    }
}

/// What the fibers of one loop share: the server's settings, and the loop's connections.
#[derive(Debug)]
struct ServerLoop {
    config: Arc<Config>,
    registry: Rc<Registry>,
    /// Which loop this is.
    index: usize,
    state: Arc<ServerState>,
    /// Its share of the connections, when it takes those of its CPU.
    balance: steering::Balance,
}

thread_local! {
    /// The server loop running on this thread: what `shed_idle_connections` sheds from, and what a
    /// connection handed over from another loop joins.
    static CURRENT_LOOP: RefCell<Weak<ServerLoop>> = const { RefCell::new(Weak::new()) };
}

impl ServerLoop {
    /// Makes this the server loop of this thread.
    fn make_current(self: &Rc<Self>) {
        CURRENT_LOOP.with(|current| *current.borrow_mut() = Rc::downgrade(self));
    }

    /// The server loop of this thread, while it serves.
    fn current() -> Option<Rc<ServerLoop>> {
        CURRENT_LOOP.with(|current| current.borrow().upgrade())
    }
}

impl Server {
    /// Settings for a new server.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let server = Server::builder().workers(1).bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// A server with the default settings (see [`ServerBuilder`]), listening on `addr`.
    ///
    /// # Errors
    ///
    /// As [`ServerBuilder::bind`].
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let server = Server::bind("127.0.0.1:0").unwrap();
    /// # drop(server);
    /// ```
    pub fn bind(addr: impl std::net::ToSocketAddrs) -> Result<Server, Error> {
        ServerBuilder::default().bind(addr)
    }

    /// A server with `settings` that listens nowhere yet, catching its signals already if the
    /// settings ask: a signal sent once its address is known (printed, say) is never lost, even
    /// before it runs.
    fn new(settings: ServerBuilder) -> Result<Server, Error> {
        let state = Arc::new(ServerState::new(settings.loops()));
        let signals = if settings.signals() { Some(Signals::install()?) } else { None };
        Ok(Server { listeners: Vec::new(), settings, state, signals })
    }

    /// Listens on `addr` too, for HTTP in cleartext (see [`ServerBuilder::bind`]).
    ///
    /// # Errors
    ///
    /// As [`ServerBuilder::bind`].
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let server = Server::bind("127.0.0.1:0").unwrap().listen("[::1]:0").unwrap();
    /// assert_eq!(server.urls().len(), 2);
    /// ```
    pub fn listen(mut self, addr: impl std::net::ToSocketAddrs) -> Result<Server, Error> {
        self.listeners.push(Listener::bind(addr, self.settings.loops(), None, self.settings.shares_ports())?);
        Ok(self)
    }

    /// Listens on `addr` too, for HTTPS with `tls` (see [`ServerBuilder::bind_tls`]).
    ///
    /// # Errors
    ///
    /// As [`ServerBuilder::bind`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use neverblock_http::server::{Server, TlsConfig};
    ///
    /// let tls = TlsConfig::from_pem_files("cert.pem", "key.pem").unwrap();
    /// let server = Server::bind("0.0.0.0:80").unwrap().listen_tls("0.0.0.0:443", &tls).unwrap();
    /// assert_eq!(server.urls(), ["http://0.0.0.0:80/", "https://0.0.0.0:443/"]);
    /// ```
    pub fn listen_tls(mut self, addr: impl std::net::ToSocketAddrs, tls: &TlsConfig) -> Result<Server, Error> {
        let listener = Listener::bind(addr, self.settings.loops(), Some(tls.clone()), self.settings.shares_ports())?;
        self.listeners.push(listener);
        Ok(self)
    }

    /// Listens on `sockets` too, bound elsewhere, for HTTP in cleartext (see
    /// [`ServerBuilder::bind_sockets`]).
    ///
    /// # Errors
    ///
    /// As [`ServerBuilder::bind_sockets`].
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let bound_elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let server = Server::bind("127.0.0.1:0").unwrap().listen_sockets(vec![bound_elsewhere]).unwrap();
    /// assert_eq!(server.urls().len(), 2);
    /// ```
    pub fn listen_sockets(mut self, sockets: Vec<std::net::TcpListener>) -> Result<Server, Error> {
        self.listeners.push(Listener::adopt(sockets, None)?);
        Ok(self)
    }

    /// Listens on `sockets` too, bound elsewhere, for HTTPS with `tls` (see
    /// [`ServerBuilder::bind_sockets`]).
    ///
    /// # Errors
    ///
    /// As [`ServerBuilder::bind_sockets`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use neverblock_http::server::{Server, TlsConfig};
    ///
    /// let tls = TlsConfig::from_pem_files("cert.pem", "key.pem").unwrap();
    /// let bound_elsewhere = std::net::TcpListener::bind("0.0.0.0:443").unwrap();
    /// let server = Server::bind("0.0.0.0:80").unwrap().listen_sockets_tls(vec![bound_elsewhere], &tls).unwrap();
    /// # drop(server);
    /// ```
    pub fn listen_sockets_tls(mut self, sockets: Vec<std::net::TcpListener>, tls: &TlsConfig) -> Result<Server, Error> {
        self.listeners.push(Listener::adopt(sockets, Some(tls.clone()))?);
        Ok(self)
    }

    /// The address it listens on first (with the port picked, for port 0).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let server = Server::bind("127.0.0.1:0").unwrap();
    /// assert_ne!(server.local_addr().port(), 0, "port 0 picked a free port");
    /// ```
    pub fn local_addr(&self) -> SocketAddr {
        self.listeners.first().expect("a server is made by binding an address").addr
    }

    /// Where it listens, as URLs (`http://127.0.0.1:8080/`, `https://[::]:8443/`), in the order the
    /// listeners were added.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::Server;
    ///
    /// let server = Server::bind("127.0.0.1:0").unwrap();
    /// assert_eq!(server.urls(), [format!("http://{}/", server.local_addr())]);
    /// ```
    pub fn urls(&self) -> Vec<String> {
        self.listeners.iter().map(Listener::url).collect()
    }

    /// A handle to shut it down with, from any thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response, Server};
    ///
    /// let server = Server::bind("127.0.0.1:0").unwrap();
    /// let handle = server.handle();
    /// let running = std::thread::spawn(move || server.run(|_: &mut Request<'_>| Response::new(204)));
    /// handle.shutdown();
    /// running.join().unwrap().unwrap();
    /// ```
    pub fn handle(&self) -> ServerHandle {
        ServerHandle { state: self.state.clone() }
    }

    /// Serves requests with `handler` on the server's loops (this thread is the first), until it
    /// is shut down (by a [`ServerHandle`], or a signal with
    /// [`shutdown_on_signals`](ServerBuilder::shutdown_on_signals)) and its connections have ended.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Server`] if the signals cannot be registered, a listener fails for good, or a
    /// loop cannot start.
    ///
    /// # Panics
    ///
    /// If called inside a neverblock runtime (the server runs its own).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use neverblock_http::server::{Request, Response, Server};
    ///
    /// let server = Server::builder().workers(1).bind("127.0.0.1:0").unwrap();
    /// let (addr, handle) = (server.local_addr(), server.handle());
    /// let running = std::thread::spawn(move || server.run(|_: &mut Request<'_>| Response::new(200).body("up\n")));
    /// let mut client = std::net::TcpStream::connect(addr).unwrap();
    /// client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    /// let mut answer = String::new();
    /// client.read_to_string(&mut answer).unwrap();
    /// assert!(answer.ends_with("\r\n\r\nup\n"));
    /// handle.shutdown();
    /// running.join().unwrap().unwrap();
    /// ```
    pub fn run(self, handler: impl Handler) -> Result<(), Error> {
        let Server { listeners, settings, state, signals } = self;
        let config = Arc::new(settings.config(Arc::new(handler)));
        let handle = ServerHandle { state: state.clone() };
        if listeners.iter().any(|listener| listener.tls.is_some()) {
            match neverblock::net::kernel_tls_support() {
                Ok(()) => log::info!("the kernel offers TLS (kTLS); files over HTTPS are still encrypted here"),
                Err(e) => log::info!("no kernel TLS ({e}); files over HTTPS are read and encrypted in pieces"),
            }
        }
        let loops = settings.loops();
        let handover = listeners.iter().map(ListeningSockets::of).collect::<std::io::Result<Vec<_>>>();
        *state.handover.lock().unwrap_or_else(|p| p.into_inner()) = handover.map_err(server_error)?;
        let mut per_loop: Vec<Vec<LoopListener>> = (0..loops).map(|_| Vec::new()).collect();
        for listener in listeners {
            let tls =
                listener.tls.as_ref().map(|tls| if settings.speaks_http2() { tls.clone() } else { tls.without_h2() });
            // Fewer sockets than loops are shared between loops, and a shared one cannot be
            // steered to the CPU of any one of them.
            let alone = listener.sockets.len() >= loops;
            for (index, sockets) in listener.per_loop(loops).map_err(server_error)?.into_iter().enumerate() {
                per_loop[index].extend(sockets.into_iter().map(|socket| LoopListener {
                    socket,
                    tls: tls.clone(),
                    alone,
                }));
            }
        }
        let pin = settings.pins_loops() && per_loop.iter().flatten().any(|listener| listener.alone) && {
            // A loop on every CPU (the default): with fewer, pinned loops would all crowd the first
            // CPUs, beside any other server's; one loop has no other to take its CPU's connections.
            let cpus = rustix::thread::sched_getaffinity(None).map_or(0, |set| set.count() as usize);
            loops > 1 && loops == cpus
        };
        let runtime = Builder::new().threads(loops).pin_threads(pin).stall_warning(settings.stall_threshold());
        let ended = runtime.run(move || {
            let (guard, reader) = signals.map_or((None, None), |(guard, reader)| (Some(guard), Some(reader)));
            let watcher =
                reader.map(|reader| neverblock::spawn_named("signals", move || Signals::watch(reader, handle)));
            let mut per_loop = per_loop.into_iter().enumerate();
            let first = per_loop.next();
            let others: Vec<_> = per_loop
                .map(|(index, listeners)| {
                    let (config, state) = (config.clone(), state.clone());
                    spawn_on(index, move || serve_loop(index, listeners, config, state))
                })
                .collect();
            if let Some((index, listeners)) = first {
                serve_loop(index, listeners, config, state.clone());
            }
            for loop_ in others {
                if let Err(e) = loop_.join() {
                    state.fail(format!("a loop ended abnormally: {e}"));
                }
            }
            if let Some(watcher) = watcher {
                watcher.cancel();
            }
            drop(guard);
            state.handover.lock().unwrap_or_else(|p| p.into_inner()).clear();
            state.failure.lock().unwrap_or_else(|p| p.into_inner()).take()
        });
        match ended {
            Some(why) => Err(Error::new(ErrorKind::Server, why)),
            None => Ok(()),
        }
    }
}

/// A listening socket a loop accepts on.
struct LoopListener {
    socket: std::net::TcpListener,
    tls: Option<TlsConfig>,
    /// Whether no other loop accepts on it.
    alone: bool,
}

/// Runs one loop: an accept loop in a fiber for each of its listeners, and its controller here
/// until the loop's part of the shutdown is done.
fn serve_loop(index: usize, listeners: Vec<LoopListener>, config: Arc<Config>, state: Arc<ServerState>) {
    let grace = config.timeouts.shutdown;
    let registry = Rc::new(Registry::new(state.controls[index].clone(), state.counters[index].clone()));
    let listeners: Vec<_> = listeners
        .into_iter()
        .map(|LoopListener { socket, tls, alone }| (steering::steer(&socket, index, alone), socket, tls))
        .collect();
    let balance = steering::Balance::new(listeners.iter().any(|(steered, ..)| *steered));
    let server_loop = Rc::new(ServerLoop { config, registry: registry.clone(), index, state: state.clone(), balance });
    server_loop.make_current();
    let accepts: Vec<JoinHandle<()>> = listeners
        .into_iter()
        .map(|(steered, listener, tls)| match TcpListener::from_std(listener) {
            Ok(listener) => {
                let (failed, server_loop) = (state.clone(), server_loop.clone());
                let scheme = if tls.is_some() { "https" } else { "http" };
                let url =
                    listener.local_addr().map_or_else(|_| format!("{scheme}://?/"), |a| format!("{scheme}://{a}/"));
                neverblock::spawn_named(&naming::accept_loop(&url), move || {
                    let error = listen::accept_loop(listener, tls, server_loop, steered);
                    failed.fail(format!("accepting on loop {index} failed: {error}"));
                })
            }
            Err(e) => {
                state.fail(format!("loop {index} cannot use its listener: {e}"));
                neverblock::spawn(|| ())
            }
        })
        .collect();
    state.loop_started(server_loop.config.ready_hook.as_deref());
    shutdown::control(&state, index, &registry, accepts, grace);
}

/// A failure to start serving.
fn server_error(e: std::io::Error) -> Error {
    Error::with_source(ErrorKind::Server, "start the server's loops".to_owned(), e)
}
