//! Keep-alive connections, by origin, with a cap on connections per host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use super::conn::{Conn, Origin};
use super::wire::BufferedConn;
use neverblock::sync::Semaphore;

/// Idle connections and connection slots, per origin (scheme, host, port).
#[derive(Debug)]
pub(crate) struct Pool {
    hosts: Mutex<HashMap<Origin, Host>>,
    per_host: usize,
    idle_timeout: Duration,
}

#[derive(Debug)]
struct Host {
    /// Most recently returned last: reused first, so the oldest expire.
    idle: Vec<Idle>,
    /// One permit per connection in use or being opened.
    slots: Arc<Semaphore>,
}

/// A kept-alive connection, since when, and the thread whose loop last used it
/// (its fd is registered with that loop's reactor).
#[derive(Debug)]
struct Idle {
    conn: BufferedConn<Conn>,
    since: Instant,
    thread: ThreadId,
}

impl Pool {
    pub(crate) fn new(per_host: usize, idle_timeout: Duration) -> Pool {
        Pool { hosts: Mutex::new(HashMap::new()), per_host, idle_timeout }
    }

    /// The semaphore that caps connections to `origin`: hold a permit while using one.
    pub(crate) fn slots(&self, origin: &Origin) -> Arc<Semaphore> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(host) = hosts.get(origin) {
            return host.slots.clone();
        }
        // Only a host's first request pays for copying its origin into the map.
        let slots = Arc::new(Semaphore::new(self.per_host));
        hosts.insert(origin.clone(), Host { idle: Vec::new(), slots: slots.clone() });
        slots
    }

    /// The most recently used idle connection to `origin` that has not expired,
    /// preferring one this thread used last (no move to another loop's reactor).
    ///
    /// With `probe`, a non-blocking `peek` first checks that the server has not
    /// closed it, and closed ones are dropped: for a request that could not be
    /// sent again. A replayable request skips that system call; if the server had
    /// closed the connection, the client sends it again on a new one (Go's rule).
    pub(crate) fn take_idle(&self, origin: &Origin, probe: bool) -> Option<BufferedConn<Conn>> {
        let me = thread::current().id();
        loop {
            let conn = {
                let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
                let host = hosts.get_mut(origin)?;
                let now = Instant::now();
                host.idle.retain(|idle| now.duration_since(idle.since) < self.idle_timeout);
                let newest = host.idle.len().checked_sub(1)?;
                let pick = host.idle.iter().rposition(|idle| idle.thread == me).unwrap_or(newest);
                host.idle.remove(pick).conn
            };
            // The probe, and closing a dead connection, happen outside the pool's lock.
            if !probe || conn.get_ref().looks_idle() {
                return Some(conn);
            }
        }
    }

    /// Keeps `conn`, whose last response was read to its end, for the next request to `origin`.
    pub(crate) fn put_idle(&self, origin: &Origin, conn: BufferedConn<Conn>) {
        let idle = Idle { conn, since: Instant::now(), thread: thread::current().id() };
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(host) = hosts.get_mut(origin) {
            host.idle.push(idle);
        }
    }
}
