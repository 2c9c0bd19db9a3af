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
//! with one queue, a client on one thread) one loop would get every connection. So a loop that
//! has held more than [`MARGIN`] connections more than the loop with the fewest for [`SETTLE`]
//! passes its new ones to that loop, as a server with no steering would have spread them.

use std::cell::RefCell;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use neverblock::net::TcpStream;
use neverblock::runtime::{pinned_cpu, spawn_on, turn_start};

use super::tls::TlsConfig;
use super::{listen, ServerLoop};

/// How many more open connections than the loop with the fewest a loop may hold before it passes
/// new ones on: enough that the uneven spread of a few clients' CPUs does not move connections
/// off their CPU, few enough that one busy CPU's connections are soon shared.
pub(super) const MARGIN: u64 = 16;

/// How long a loop must have held more than its share before it passes connections on.
pub(super) const SETTLE: Duration = Duration::from_millis(10);

thread_local! {
    /// This thread's loop, for connections handed to it.
    static CURRENT: RefCell<Weak<ServerLoop>> = const { RefCell::new(Weak::new()) };
}

/// Makes `server_loop` the loop connections handed to this thread join.
pub(super) fn make_current(server_loop: &Rc<ServerLoop>) {
    CURRENT.with(|current| *current.borrow_mut() = Rc::downgrade(server_loop));
}

/// Marks `socket`, a listener this loop holds alone, with the CPU the loop is pinned to, so that
/// the kernel hands it the connections that arrive there; returns whether it did (not when the loop
/// is not pinned, nor when the kernel refuses, which is logged).
pub(super) fn steer(socket: &StdListener, index: usize) -> bool {
    let Some(cpu) = pinned_cpu() else { return false };
    let Ok(value) = u32::try_from(cpu) else { return false };
    match rustix::net::sockopt::set_socket_incoming_cpu(socket, value) {
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

/// What an accept loop remembers of the balance between loops: since when its loop has held
/// more than its share.
#[derive(Debug, Default)]
pub(super) struct Balance {
    uneven_since: Option<Instant>,
}

impl Balance {
    /// The loop a connection just accepted by `server_loop` should go to instead: the one with
    /// the fewest open connections, once `server_loop` has held more than [`MARGIN`] more than
    /// it for [`SETTLE`]. Clients on several CPUs that connect at once do not arrive at once: the
    /// connections of one CPU may all be accepted before another's, and are left where they are.
    pub(super) fn elsewhere(&mut self, server_loop: &ServerLoop) -> Option<usize> {
        let open = |index: usize| server_loop.state.counters[index].open.load(Relaxed);
        let loops = server_loop.state.counters.len();
        let fewest = (0..loops).min_by_key(|&index| open(index))?;
        if open(server_loop.index) <= open(fewest) + MARGIN {
            self.uneven_since = None;
            return None;
        }
        let now = turn_start().unwrap_or_else(Instant::now);
        let since = *self.uneven_since.get_or_insert(now);
        (now.duration_since(since) >= SETTLE).then_some(fewest)
    }
}

/// Hands `stream`, accepted here from `peer`, to loop `to`, which serves it as one of its own; a
/// loop that has stopped closes it.
pub(super) fn hand_over(stream: TcpStream, peer: SocketAddr, tls: Option<TlsConfig>, to: usize) {
    let stream = match stream.into_std() {
        Ok(stream) => stream,
        Err(e) => return log::error!("connection from {peer} closed unserved: cannot hand it to loop {to}: {e}"),
    };
    drop(spawn_on(to, move || {
        let Some(server_loop) = CURRENT.with(|current| current.borrow().upgrade()) else { return };
        match TcpStream::from_std(stream) {
            Ok(stream) => listen::serve_accepted(stream, peer, &server_loop, tls),
            Err(e) => log::error!("connection from {peer} closed unserved: {e}"),
        }
    }));
}
