//! Graceful shutdown: a handle any thread may hold, a controller fiber per loop, and SIGTERM/SIGINT.
//!
//! [`ServerHandle::shutdown`] wakes every loop's controller (a `Notify` each, so a request made
//! before a loop started is kept as a permit). Each controller then stops its accept loop and
//! gives its connections a last call: busy ones finish their response, which goes out with
//! `Connection: close`, and so does the answer to a request that reaches an idle one within
//! [`LAST_CALL`] (a second, or the shutdown timeout if shorter): a client that keeps a
//! connection busy, as a load balancer or a load generator does, gets its last answer there and
//! opens its next connection elsewhere (to the process that took the sockets over, after an
//! upgrade), never a connection closed under a request it just sent. Connections still idle
//! then are closed (RFC 9112 §9.5 lets a server close an idle connection at any time; a client
//! sends a replayable request again). HTTP/2 connections are told `GOAWAY` at once. The
//! controller waits for the busy ones up to the shutdown timeout; past it, or on
//! [`ServerHandle::shutdown_now`] (a second signal), it closes them too. The server's `run`
//! returns once every loop's connections have ended.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use neverblock::sync::Notify;
use neverblock::JoinHandle;

use super::listen::ListeningSockets;
use super::registry::{Counters, Registry};
use crate::error::{Error, ErrorKind};

/// How long the connections closed at the deadline get to end.
const AFTER_DEADLINE: Duration = Duration::from_secs(1);

/// How long an idle connection may still bring a last request once a graceful shutdown has
/// begun (at most the shutdown timeout): time for a busy client's next request to arrive, well
/// under any keep-alive timeout a client counts on.
pub(super) const LAST_CALL: Duration = Duration::from_secs(1);

/// What the handle shares with the running server's loops.
#[derive(Debug)]
pub(super) struct ServerState {
    stopping: AtomicBool,
    forced: AtomicBool,
    /// One per loop: wakes its controller.
    pub(super) controls: Vec<Arc<Notify>>,
    /// One per loop.
    pub(super) counters: Vec<Arc<Counters>>,
    /// Why the server stopped on its own, if it did.
    pub(super) failure: Mutex<Option<String>>,
    /// Duplicates of the sockets it listens on, for [`ServerHandle::sockets`], while it runs and
    /// until its shutdown begins (then nothing holds them open once its loops let go of theirs).
    pub(super) handover: Mutex<Vec<ListeningSockets>>,
    /// How many loops accept connections.
    started: AtomicUsize,
}

impl ServerState {
    pub(super) fn new(loops: usize) -> ServerState {
        ServerState {
            stopping: AtomicBool::new(false),
            forced: AtomicBool::new(false),
            controls: (0..loops).map(|_| Arc::new(Notify::new())).collect(),
            counters: (0..loops).map(|_| Arc::default()).collect(),
            failure: Mutex::new(None),
            handover: Mutex::new(Vec::new()),
            started: AtomicUsize::new(0),
        }
    }

    /// Whether the shutdown has begun (on any loop's behalf).
    pub(super) fn is_stopping(&self) -> bool {
        self.stopping.load(SeqCst)
    }

    /// Starts the shutdown: every loop's controller woken, the sockets kept for a handover let go.
    fn stop(&self) {
        self.stopping.store(true, SeqCst);
        self.handover.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.controls.iter().for_each(|c| c.notify_one());
    }

    /// Counts a loop that accepts connections; once every loop does, calls `ready` (unless the
    /// server is stopping already).
    pub(super) fn loop_started(&self, ready: Option<&(dyn Fn() + Send + Sync)>) {
        let started = self.started.fetch_add(1, SeqCst) + 1;
        if started == self.controls.len() && !self.stopping.load(SeqCst) {
            if let Some(ready) = ready {
                ready();
            }
        }
    }

    /// Stops the server because `why` (a loop cannot go on).
    pub(super) fn fail(&self, why: String) {
        log::error!("{why}; shutting the server down");
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(why);
        self.stop();
    }
}

/// Stops a running [`Server`](super::Server) from any thread; cheap to clone.
///
/// # Examples
///
/// ```
/// use neverblock_http::server::{Response, Server};
///
/// let server = Server::bind("127.0.0.1:0").unwrap();
/// let handle = server.handle();
/// let running = std::thread::spawn(move || server.run(|_: &mut neverblock_http::server::Request<'_>| Response::new(204)));
/// handle.shutdown();
/// running.join().unwrap().unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct ServerHandle {
    pub(super) state: Arc<ServerState>,
}

/// A server's counters, summed over its loops.
///
/// # Examples
///
/// ```
/// let server = neverblock_http::server::Server::bind("127.0.0.1:0").unwrap();
/// let stats = server.handle().stats();
/// assert_eq!((stats.accepted, stats.open, stats.requests, stats.shed), (0, 0, 0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections open now.
    pub open: u64,
    /// Requests answered, by a handler or by the server's refusal (400, 408, 414, 431, …).
    pub requests: u64,
    /// Idle connections closed to free file descriptors.
    pub shed: u64,
    /// Connections served in HTTP/1.x, ever (the others of `accepted` spoke HTTP/2 or ended in
    /// their TLS handshake).
    pub http1_connections: u64,
    /// Connections served in HTTP/2, ever.
    pub http2_connections: u64,
    /// Connections open now that speak HTTP/1.x.
    pub http1_open: u64,
    /// Connections open now that speak HTTP/2.
    pub http2_open: u64,
}

impl ServerHandle {
    /// Starts a graceful shutdown: stop accepting, close idle connections, let requests in flight
    /// finish (up to the shutdown timeout), then make the server's `run` return. Returns at once.
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
    /// assert!(running.join().unwrap().is_ok(), "run returned");
    /// ```
    pub fn shutdown(&self) {
        self.state.stop();
    }

    /// Shuts down without waiting for requests in flight: every connection is closed now.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_http::server::{Request, Response, Server};
    ///
    /// let server = Server::bind("127.0.0.1:0").unwrap();
    /// let handle = server.handle();
    /// let running = std::thread::spawn(move || server.run(|_: &mut Request<'_>| Response::new(204)));
    /// handle.shutdown_now();
    /// running.join().unwrap().unwrap();
    /// ```
    pub fn shutdown_now(&self) {
        self.state.forced.store(true, SeqCst);
        self.shutdown();
    }

    /// Duplicates of the sockets the server listens on, in the order its listeners were added
    /// (none before it runs or once its shutdown has begun): to hand to a process that will
    /// accept on them too, such as its replacement (see [`ListeningSockets`]).
    ///
    /// # Errors
    ///
    /// Duplicating a socket failed (out of descriptors).
    ///
    /// # Examples
    ///
    /// ```
    /// let server = neverblock_http::server::Server::bind("127.0.0.1:0").unwrap();
    /// assert!(server.handle().sockets().unwrap().is_empty(), "not running yet");
    /// ```
    pub fn sockets(&self) -> std::io::Result<Vec<ListeningSockets>> {
        let handover = self.state.handover.lock().unwrap_or_else(|p| p.into_inner());
        handover.iter().map(ListeningSockets::try_clone).collect()
    }

    /// The counters so far.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use neverblock_http::server::{Request, Response, Server};
    ///
    /// let server = Server::builder().workers(1).bind("127.0.0.1:0").unwrap();
    /// let (addr, handle) = (server.local_addr(), server.handle());
    /// let running = std::thread::spawn(move || server.run(|_: &mut Request<'_>| Response::new(204)));
    /// let mut client = std::net::TcpStream::connect(addr).unwrap();
    /// client.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    /// client.read_to_end(&mut Vec::new()).unwrap();
    /// let stats = handle.stats();
    /// assert_eq!((stats.accepted, stats.requests), (1, 1));
    /// handle.shutdown();
    /// running.join().unwrap().unwrap();
    /// ```
    pub fn stats(&self) -> ServerStats {
        let mut stats = ServerStats::default();
        for c in &self.state.counters {
            use std::sync::atomic::Ordering::Relaxed;
            stats.accepted += c.accepted.load(Relaxed);
            stats.open += c.open.load(Relaxed);
            stats.requests += c.requests.load(Relaxed);
            stats.shed += c.shed.load(Relaxed);
            stats.http1_connections += c.served[0].load(Relaxed);
            stats.http2_connections += c.served[1].load(Relaxed);
            stats.http1_open += c.serving[0].load(Relaxed);
            stats.http2_open += c.serving[1].load(Relaxed);
        }
        stats
    }
}

/// A loop's controller: waits for the shutdown, then carries it out on this loop (see the module's
/// doc); returns once the loop's connections have ended.
pub(super) fn control(
    state: &ServerState,
    index: usize,
    registry: &Registry,
    accepts: Vec<JoinHandle<()>>,
    grace: Duration,
) {
    let control = &state.controls[index];
    while !state.stopping.load(SeqCst) {
        let _ = control.notified();
    }
    accepts.iter().for_each(JoinHandle::cancel);
    registry.stop();
    let started = Instant::now();
    let last_call = started + LAST_CALL.min(grace);
    while registry.len() > 0 && !state.forced.load(SeqCst) {
        let left = last_call.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let _ = neverblock::timeout(left, || control.notified());
    }
    let idle = registry.close_idle();
    log::info!(
        "loop {index}: shutting down: {idle} idle connections closed after the last call, {} busy",
        registry.len()
    );
    let mut deadline = started + grace;
    let mut forced = false;
    while registry.len() > 0 {
        let now = Instant::now();
        if !forced && (now >= deadline || state.forced.load(SeqCst)) {
            log::warn!("loop {index}: closing {} connections still busy", registry.len());
            registry.close_all();
            forced = true;
            deadline = now + AFTER_DEADLINE;
        } else if forced && now >= deadline {
            log::warn!("loop {index}: {} connections did not end; leaving them to the runtime", registry.len());
            return;
        }
        let _ = neverblock::timeout(deadline.saturating_duration_since(now), || control.notified());
    }
}

/// SIGTERM and SIGINT, delivered as bytes on a socket a fiber waits on (signal-hook's self-pipe),
/// for as long as this lives; once no server watches them, they take their default action again.
#[derive(Debug)]
pub(super) struct Signals {
    ids: Vec<signal_hook::SigId>,
}

/// The process's servers that watch signals, and the flag that, once none does, has signal-hook
/// run the signals' default action (signal-hook keeps its handler installed for good: without an
/// action of ours it would ignore them).
struct Watchers {
    count: usize,
    default: Option<Arc<AtomicBool>>,
}

static WATCHERS: Mutex<Watchers> = Mutex::new(Watchers { count: 0, default: None });

impl Signals {
    /// Registers the signals; returns the guard and the socket their bytes arrive on.
    ///
    /// The pipes come first: a signal may stop taking its default action only once it reaches
    /// one. (The other order lost a SIGTERM sent in between: the handler was in, told not to
    /// act, and had no pipe to write to yet.)
    pub(super) fn install() -> Result<(Signals, UnixStream), Error> {
        let fail = |e| Error::with_source(ErrorKind::Server, "register SIGTERM and SIGINT".to_owned(), e);
        let (reader, writer) = UnixStream::pair().map_err(fail)?;
        reader.set_nonblocking(true).map_err(fail)?;
        WATCHERS.lock().unwrap_or_else(|p| p.into_inner()).count += 1;
        // From here on, dropping the guard (on an error too) undoes the count.
        let mut signals = Signals { ids: Vec::new() };
        for signal in SIGNALS {
            let writer = writer.try_clone().map_err(fail)?;
            signals.ids.push(signal_hook::low_level::pipe::register(signal, writer).map_err(fail)?);
        }
        let mut watchers = WATCHERS.lock().unwrap_or_else(|p| p.into_inner());
        match &watchers.default {
            Some(default) => default.store(false, SeqCst),
            None => {
                let default = Arc::new(AtomicBool::new(false));
                for signal in SIGNALS {
                    signal_hook::flag::register_conditional_default(signal, default.clone()).map_err(fail)?;
                }
                watchers.default = Some(default);
            }
        }
        drop(watchers);
        Ok((signals, reader))
    }

    /// Waits for signals on `reader`: the first starts a graceful shutdown, the next closes every
    /// connection. Runs until cancelled.
    pub(super) fn watch(reader: UnixStream, handle: super::ServerHandle) {
        let mut reader = match neverblock::net::UnixStream::from_std(reader) {
            Ok(reader) => reader,
            Err(e) => return log::error!("cannot wait for signals: {e}"),
        };
        let mut signals = 0;
        let mut bytes = [0u8; 16];
        // A byte a signal; two signals may come in one read.
        while let Ok(n @ 1..) = reader.read(&mut bytes) {
            if signals == 0 {
                log::warn!("signal received: shutting down gracefully (another closes every connection now)");
                handle.shutdown();
            }
            signals += n;
            if signals > 1 {
                log::warn!("signal received again: closing every connection now");
                handle.shutdown_now();
            }
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
        let mut watchers = WATCHERS.lock().unwrap_or_else(|p| p.into_inner());
        watchers.count = watchers.count.saturating_sub(1);
        if let (0, Some(default)) = (watchers.count, &watchers.default) {
            default.store(true, SeqCst);
        }
    }
}

/// The signals a server shuts down on.
const SIGNALS: [i32; 2] = [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT];

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn two_signals_read_at_once_close_every_connection() {
        let (reader, mut writer) = UnixStream::pair().unwrap();
        reader.set_nonblocking(true).unwrap();
        // Both bytes wait before the watcher reads: it gets them in one read.
        writer.write_all(&[15, 15]).unwrap();
        drop(writer);
        let handle = super::super::ServerHandle { state: Arc::new(ServerState::new(1)) };
        let watched = handle.clone();
        neverblock::run(move || Signals::watch(reader, watched));
        assert!(handle.state.stopping.load(SeqCst) && handle.state.forced.load(SeqCst));
    }
}
