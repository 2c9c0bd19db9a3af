//! Connections kept on the CPU their packets arrive on, and loops kept even.
//!
//! With its loops pinned, one to a CPU, the server marks each loop's listener with that CPU
//! (`SO_INCOMING_CPU`): the kernel then hands a new connection to the listener of the CPU that
//! took its first packet, and keeps its later packets there too (the network card's receive queue
//! for that flow; on loopback, the client's own CPU). A request's wake-up, its reading, handling
//! and answer then all happen on one CPU, with no wake-up sent to another one and no cache lines
//! moved between them.
//!
//! Steering follows the packets, not the load: when they all arrive on one CPU (a network card
//! with one queue, a client on one thread) one loop would get every connection. So once a loop
//! has held more connections than the loop with the fewest, by more than [`margin`], for
//! [`SETTLE`], it passes its new ones to that loop, as a server with no steering would have spread
//! them, and its kept-alive connections go there too, each between two requests. Nothing waits
//! for the balance: a connection is always answered at once where it is, and moves only when it
//! is idle with nothing read ahead.

use std::cell::Cell;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use neverblock::net::TcpStream;
use neverblock::runtime::{pinned_cpu, spawn_on, turn_start};

use super::registry::Counters;
use super::tls::TlsConfig;
use super::{http1, listen, ServerLoop};

/// How many more connections than the loop with the fewest a loop may hold before it passes new
/// ones on: two, and an eighth of the fewest more. A few long-lived connections from one CPU (a
/// proxy's pool behind a card with one queue) are shared; thousands spread by the clients' CPUs are
/// left alone in the ups and downs of their counts.
fn margin(fewest: u64) -> u64 {
    2 + fewest / 8
}

/// How long a loop must have held more than its share before it passes connections on.
const SETTLE: Duration = Duration::from_millis(10);

/// A gap between two looks at the balance after which what the first saw is no longer taken to
/// have lasted.
const FORGET: Duration = Duration::from_secs(1);

/// `SO_INCOMING_CPU`'s "no CPU" (-1).
const NO_CPU: u32 = u32::MAX;

/// Marks `socket`, a listener this loop holds alone, with the CPU the loop is pinned to, so that
/// the kernel hands it the connections that arrive there; returns whether it did (not when the loop
/// is not pinned, nor when the kernel refuses, which is logged). A socket it does not steer loses
/// any mark it had (one handed over by a process that steered it), or the kernel would go on
/// steering by it with no loop pinned there.
pub(super) fn steer(socket: &StdListener, index: usize, alone: bool) -> bool {
    let cpu = pinned_cpu().filter(|_| alone).and_then(|cpu| u32::try_from(cpu).ok());
    let Some(cpu) = cpu else {
        let _ = rustix::net::sockopt::set_socket_incoming_cpu(socket, NO_CPU);
        return false;
    };
    match rustix::net::sockopt::set_socket_incoming_cpu(socket, cpu) {
        Ok(()) => {
            log::debug!("loop {index} takes the connections that arrive on CPU {cpu}");
            true
        }
        Err(e) => {
            log::info!("loop {index}: connections spread by hash: cannot steer those of CPU {cpu} to it: {e}");
            false
        }
    }
}

/// What a loop remembers of the balance between loops: whether it keeps one at all (it takes the
/// connections of its CPU: one of its listeners is steered), since when it has held more than its
/// share, and when it last looked.
#[derive(Debug)]
pub(super) struct Balance {
    steered: bool,
    uneven_since: Cell<Option<Instant>>,
    looked: Cell<Option<Instant>>,
}

impl Balance {
    /// The balance of a loop that takes the connections of its CPU when `steered`.
    pub(super) fn new(steered: bool) -> Balance {
        Balance { steered, uneven_since: Cell::new(None), looked: Cell::new(None) }
    }

    /// The loop a connection of `server_loop` (new, or kept alive between requests) should go to:
    /// the one with the fewest connections, once `server_loop` has held more than [`margin`] more
    /// than it for [`SETTLE`]; `None` while the loops are even, before then, when the loop does not
    /// steer, or while the server stops. Clients on several CPUs that connect at once do not arrive
    /// at once (one CPU's connections may all be accepted before another's): by the time the
    /// imbalance has lasted, the other loops have theirs, and each connection stays on its CPU.
    pub(super) fn elsewhere(&self, server_loop: &ServerLoop) -> Option<usize> {
        if !self.steered {
            return None;
        }
        let now = turn_start().unwrap_or_else(Instant::now);
        let looked = self.looked.replace(Some(now));
        let Some(to) = emptier(server_loop) else {
            self.uneven_since.set(None);
            return None;
        };
        if looked.is_none_or(|looked| now.duration_since(looked) > FORGET) {
            self.uneven_since.set(None);
        }
        let since = self.uneven_since.get().unwrap_or(now);
        self.uneven_since.set(Some(since));
        (now >= since + SETTLE).then_some(to)
    }
}

/// The loop with the fewest connections (open, and on their way to it), when `server_loop` holds
/// more than [`margin`] more; never once the server's shutdown has begun (another loop may have
/// ended its part of it already, and serves no more).
fn emptier(server_loop: &ServerLoop) -> Option<usize> {
    if server_loop.state.is_stopping() {
        return None;
    }
    let counters = &server_loop.state.counters;
    let held = |index: usize| counters[index].open.load(Relaxed) + counters[index].incoming.load(Relaxed);
    let fewest = (0..counters.len()).min_by_key(|&index| held(index))?;
    let fewest_held = held(fewest);
    (held(server_loop.index) > fewest_held + margin(fewest_held)).then_some(fewest)
}

/// One connection counted in a loop's `incoming` until this drops: when the connection has entered
/// the loop's registry, or was closed on its way.
struct Incoming(Arc<Counters>);

impl Incoming {
    fn to(counters: &Arc<Counters>) -> Incoming {
        counters.incoming.fetch_add(1, Relaxed);
        Incoming(counters.clone())
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        self.0.incoming.fetch_sub(1, Relaxed);
    }
}

/// Hands `stream`, accepted by `server_loop` from `peer`, to loop `to`, which serves it as one of
/// its own.
pub(super) fn hand_over(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsConfig>,
    server_loop: &ServerLoop,
    to: usize,
) {
    pass(stream, peer, server_loop, to, move |stream, there| listen::serve_accepted(stream, peer, there, tls));
}

/// Moves `stream`, a cleartext HTTP/1 connection from `peer` kept alive by `server_loop` and idle
/// between requests, to loop `to`, which serves its next request.
pub(super) fn move_kept(stream: TcpStream, peer: SocketAddr, server_loop: &ServerLoop, to: usize) {
    pass(stream, peer, server_loop, to, move |stream, there| http1::serve_moved(stream, peer, there));
}

/// Passes `stream` to loop `to`, counted in its `incoming` on the way, where `serve` takes it; back
/// to `server_loop` if `to` has ended its part of a shutdown that began meanwhile.
fn pass(
    stream: TcpStream,
    peer: SocketAddr,
    server_loop: &ServerLoop,
    to: usize,
    serve: impl FnOnce(TcpStream, &Rc<ServerLoop>) + Send + 'static,
) {
    let stream = match stream.into_std() {
        Ok(stream) => stream,
        Err(e) => return log::error!("connection from {peer} closed: cannot hand it to loop {to}: {e}"),
    };
    let (from, incoming) = (server_loop.index, Incoming::to(&server_loop.state.counters[to]));
    drop(spawn_on(to, move || {
        match ServerLoop::current() {
            Some(there) => adopt(stream, peer, &there, serve),
            None => drop(spawn_on(from, move || match ServerLoop::current() {
                Some(back) => adopt(stream, peer, &back, serve),
                None => log::warn!("connection from {peer} closed: the server's loops no longer serve"),
            })),
        }
        drop(incoming);
    }));
}

/// Serves `stream`, given back to std by another loop, on `server_loop`.
fn adopt(
    stream: std::net::TcpStream,
    peer: SocketAddr,
    server_loop: &Rc<ServerLoop>,
    serve: impl FnOnce(TcpStream, &Rc<ServerLoop>),
) {
    match TcpStream::from_std(stream) {
        Ok(stream) => serve(stream, server_loop),
        Err(e) => log::error!("connection from {peer} closed: {e}"),
    }
}
