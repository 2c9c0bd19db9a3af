//! Keep-alive connections, by origin, with a cap on connections per host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::conn::{Conn, Origin};
use super::wire::BufferedConn;
use neverblock::sync::Semaphore;

/// How long a returned connection is trusted without checking that its server kept it open.
const FRESH: Duration = Duration::from_millis(1);

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
    idle: Vec<(BufferedConn<Conn>, Instant)>,
    /// One permit per connection in use or being opened.
    slots: Arc<Semaphore>,
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

    /// The most recently used idle connection to `origin` that has not expired
    /// and that its server has not closed; the others met on the way are closed.
    ///
    /// A connection idle for less than [`FRESH`] is taken without asking the
    /// socket (a system call per request under load): no server's idle timeout
    /// is that short, and the client's retry covers a server that closed anyway.
    pub(crate) fn take_idle(&self, origin: &Origin) -> Option<BufferedConn<Conn>> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        let host = hosts.get_mut(origin)?;
        let now = Instant::now();
        host.idle.retain(|(_, since)| now.duration_since(*since) < self.idle_timeout);
        while let Some((conn, since)) = host.idle.pop() {
            if now.duration_since(since) < FRESH || conn.get_ref().looks_idle() {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps `conn`, whose last response was read to its end, for the next request to `origin`.
    pub(crate) fn put_idle(&self, origin: &Origin, conn: BufferedConn<Conn>) {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(host) = hosts.get_mut(origin) {
            host.idle.push((conn, Instant::now()));
        }
    }
}
