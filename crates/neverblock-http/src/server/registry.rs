//! The connections of one loop and which of them are idle, so that a graceful shutdown can close
//! the idle ones after their last call and running out of file descriptors can shed the oldest
//! idle ones (the accept loop does, and so may a handler: [`shed_idle_connections`]).
//!
//! A connection is idle while it waits for a request head (its first, or the next on a kept-alive
//! connection; before its first byte or partway through, as a slow client's): no handler works for
//! it, so closing it loses no work, and RFC 9112 §9.5 lets a server close an idle connection at any
//! time. Those idle longest, the slowest heads among them, go first. Closing is `shutdown(2)`:
//! whatever waits on the socket (the connection's parked fiber, or the fiberless task a quiet
//! connection waits in) wakes to an end of stream and ends, which closes the descriptor.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::Shutdown;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use neverblock::net::TcpStream;
use neverblock::sync::Notify;
use slab::Slab;

/// Counters of one loop, read from any thread (their own cache lines, so loops never share one).
/// Those that change with connections come first, in a line of their own: the other loops read
/// `open` and `incoming` after every response (see `steering`), and a line the loop wrote at
/// every request would be fetched from its CPU each time.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub(super) struct Counters {
    pub(super) open: AtomicU64,
    /// Connections on their way to this loop's registry from another loop: new ones handed over,
    /// or kept-alive ones moving between requests (see `steering`).
    pub(super) incoming: AtomicU64,
    pub(super) accepted: AtomicU64,
    pub(super) shed: AtomicU64,
    /// Connections handed to each protocol's driver, ever and now: `[HTTP/1, HTTP/2]`.
    pub(super) served: [AtomicU64; 2],
    pub(super) serving: [AtomicU64; 2],
    /// Written at every request: in the next line.
    pub(super) requests: AtomicU64,
}

/// How long shedding waits for the connections it closed to end.
pub(super) const SHED_WAIT: Duration = Duration::from_millis(100);

/// Whether `e` says that the process (`EMFILE`) or the system (`ENFILE`) has run out of file
/// descriptors: what [`shed_idle_connections`] is for.
///
/// # Examples
///
/// ```
/// use neverblock_http::server::is_out_of_descriptors;
///
/// assert!(is_out_of_descriptors(&std::io::Error::from_raw_os_error(24)), "EMFILE");
/// assert!(!is_out_of_descriptors(&std::io::Error::from(std::io::ErrorKind::NotFound)));
/// ```
pub fn is_out_of_descriptors(e: &io::Error) -> bool {
    use rustix::io::Errno;
    matches!(e.raw_os_error(), Some(code) if code == Errno::MFILE.raw_os_error() || code == Errno::NFILE.raw_os_error())
}

/// For a handler that ran out of file descriptors (opening a file): closes the connections of its
/// event loop that have waited longest for a request (an eighth of the idle ones, at least one
/// and at most 32, as the accept loop does), waits up to 100 ms for them to end, and returns
/// whether any were closed, so that the handler may try once more. Idle connections lose no work
/// (RFC 9112 §9.5 lets a server close them at any time). Outside a server's loop it does nothing.
///
/// # Examples
///
/// ```
/// use neverblock_http::server::{is_out_of_descriptors, shed_idle_connections, Request, Response};
///
/// fn report(_: &mut Request<'_>) -> Response {
///     let open = || std::fs::File::open("/srv/reports/q3.pdf");
///     let file = match open() {
///         Err(e) if is_out_of_descriptors(&e) && shed_idle_connections() => open(),
///         opened => opened,
///     };
///     match file {
///         Ok(_) => Response::new(200),
///         Err(e) if is_out_of_descriptors(&e) => Response::error(503, "out of file descriptors; try again"),
///         Err(_) => Response::error(404, "no such report"),
///     }
/// }
/// # let _ = report;
/// ```
pub fn shed_idle_connections() -> bool {
    let Some(server_loop) = super::ServerLoop::current() else { return false };
    let registry = &server_loop.registry;
    let before = registry.ended();
    let (shed, oldest) = registry.shed_oldest_idle();
    if shed > 0 {
        log::warn!("out of file descriptors: closed {shed} idle connections (the oldest idle for {oldest:.1?})");
        registry.wait_ended(before, shed, SHED_WAIT);
    }
    shed > 0
}

/// One loop's connections.
#[derive(Debug)]
pub(super) struct Registry {
    entries: RefCell<Slab<Entry>>,
    /// Set once the server shuts down: connections finish their response and close.
    stopping: Cell<bool>,
    /// Set once the shutdown's last call is over: idle connections are closed, and one that would
    /// become idle ends instead.
    idle_closed: Cell<bool>,
    /// How many connections have ended, ever.
    ended: Cell<u64>,
    /// Wakes every fiber waiting for connections to end.
    ended_notify: Notify,
    /// Poked when a connection ends during shutdown (the loop's controller waits on it).
    control: Arc<Notify>,
    counters: Arc<Counters>,
}

#[derive(Debug)]
struct Entry {
    stream: Rc<TcpStream>,
    /// Since when the connection has waited for a request head; `None` while it works on one.
    idle_since: Option<Instant>,
    /// Woken, instead of the connection closed, when the shutdown starts: an HTTP/2 connection
    /// says `GOAWAY` first, idle or not.
    on_stop: Option<Waker>,
}

/// A connection's entry in the registry, for as long as it is held; dropping it ends the entry.
#[derive(Debug)]
pub(super) struct Registered {
    registry: Rc<Registry>,
    key: usize,
}

impl Registry {
    pub(super) fn new(control: Arc<Notify>, counters: Arc<Counters>) -> Registry {
        Registry {
            entries: RefCell::new(Slab::new()),
            stopping: Cell::new(false),
            idle_closed: Cell::new(false),
            ended: Cell::new(0),
            ended_notify: Notify::new(),
            control,
            counters,
        }
    }

    pub(super) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Registers a new connection, busy.
    pub(super) fn enter(self: &Rc<Self>, stream: Rc<TcpStream>) -> Registered {
        let key = self.entries.borrow_mut().insert(Entry { stream, idle_since: None, on_stop: None });
        self.counters.open.fetch_add(1, Relaxed);
        Registered { registry: self.clone(), key }
    }

    /// How many connections there are.
    pub(super) fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    pub(super) fn is_stopping(&self) -> bool {
        self.stopping.get()
    }

    /// Whether the shutdown's last call is over: a connection about to wait for a request ends.
    pub(super) fn is_idle_closed(&self) -> bool {
        self.idle_closed.get()
    }

    /// Starts the shutdown: every response from now on closes its connection (the last call),
    /// and the connections that asked to be told are woken.
    pub(super) fn stop(&self) {
        self.stopping.set(true);
        for (_, entry) in self.entries.borrow().iter() {
            if let Some(waker) = &entry.on_stop {
                waker.wake_by_ref();
            }
        }
    }

    /// Ends the last call: closes the idle connections (but those that asked to be told, which end
    /// themselves); returns how many.
    pub(super) fn close_idle(&self) -> usize {
        self.idle_closed.set(true);
        let mut closed = 0;
        for (_, entry) in self.entries.borrow_mut().iter_mut() {
            if entry.on_stop.is_none() && entry.idle_since.take().is_some() {
                let _ = entry.stream.shutdown(Shutdown::Both);
                closed += 1;
            }
        }
        closed
    }

    /// Closes every connection, busy or not: their reads and writes fail from now on.
    pub(super) fn close_all(&self) {
        for (_, entry) in self.entries.borrow_mut().iter_mut() {
            entry.idle_since = None;
            let _ = entry.stream.shutdown(Shutdown::Both);
        }
    }

    /// Closes the connections idle longest: an eighth of the idle ones, at least one, at most 32
    /// (nginx's batch when it drains reusable connections); returns how many and how long the
    /// longest had been idle.
    pub(super) fn shed_oldest_idle(&self) -> (usize, Duration) {
        let mut entries = self.entries.borrow_mut();
        let mut idle: Vec<(Instant, usize)> =
            entries.iter().filter_map(|(key, e)| e.idle_since.map(|since| (since, key))).collect();
        let n = (idle.len() / 8).clamp(1, 32).min(idle.len());
        if n == 0 {
            return (0, Duration::ZERO);
        }
        if n < idle.len() {
            idle.select_nth_unstable(n - 1);
        }
        let oldest = idle[..n].iter().map(|&(since, _)| since).min().map_or(Duration::ZERO, |s| s.elapsed());
        for &(_, key) in &idle[..n] {
            let entry = &mut entries[key];
            entry.idle_since = None;
            let _ = entry.stream.shutdown(Shutdown::Both);
        }
        self.counters.shed.fetch_add(n as u64, Relaxed);
        (n, oldest)
    }

    /// Parks until `n` more connections have ended than had when [`ended`](Registry::ended)
    /// returned `since`, or until `limit` passes.
    pub(super) fn wait_ended(&self, since: u64, n: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.ended.get() < since + n as u64 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || neverblock::timeout(left, || self.ended_notify.notified()).is_err() {
                return;
            }
        }
    }

    /// How many connections have ended so far.
    pub(super) fn ended(&self) -> u64 {
        self.ended.get()
    }
}

impl Registered {
    /// Marks the connection idle (waiting for a request) since `since`, or busy (`None`).
    pub(super) fn set_idle_since(&self, since: Option<Instant>) {
        if let Some(entry) = self.registry.entries.borrow_mut().get_mut(self.key) {
            entry.idle_since = since;
        }
    }

    /// Has `waker` woken when the shutdown starts, and the connection left open for its driver
    /// to end (until the shutdown's deadline closes every connection); the last waker given wins.
    pub(super) fn wake_on_stop(&self, waker: &Waker) {
        if let Some(entry) = self.registry.entries.borrow_mut().get_mut(self.key) {
            if !entry.on_stop.as_ref().is_some_and(|old| old.will_wake(waker)) {
                entry.on_stop = Some(waker.clone());
            }
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let registry = &self.registry;
        registry.entries.borrow_mut().remove(self.key);
        registry.counters.open.fetch_sub(1, Relaxed);
        registry.ended.set(registry.ended.get() + 1);
        registry.ended_notify.notify_all();
        if registry.stopping.get() {
            registry.control.notify_one();
        }
    }
}
