//! Keep-alive connections per origin: one lookup per request finds the origin's
//! [`Host`], whose own lock guards its idle connections and whose semaphore caps them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use neverblock::sync::{OwnedPermit, Semaphore};
use neverblock::Elapsed;

use super::conn::Conn;
use super::origin::{Key, Origin, OriginRef};
use crate::wire::BufferedConn;

/// A connection as the pool keeps it: boxed, so taking and returning one moves a pointer.
pub(crate) type PooledConn = Box<BufferedConn<Conn>>;

/// The hosts a client has sent requests to, by origin (scheme, host, port).
#[derive(Debug)]
pub(crate) struct Pool {
    hosts: Mutex<Hosts>,
    per_host: usize,
    idle_timeout: Duration,
}

/// The hosts by origin, and the one found last: a client mostly sends run after
/// run of requests to one origin, and comparing with it spares hashing the origin.
#[derive(Debug, Default)]
struct Hosts {
    by_origin: HashMap<Origin, Arc<Host>>,
    last: Option<Arc<Host>>,
}

/// One origin: its connection slots and its idle connections.
#[derive(Debug)]
pub(crate) struct Host {
    origin: Origin,
    /// One permit per connection in use or being opened (held by the response being read from it).
    slots: Arc<Semaphore>,
    /// Most recently returned last, each stamped under this lock, so the first to
    /// expire are first: reused last, and dropped from the front.
    idle: Mutex<Vec<Idle>>,
    idle_timeout: Duration,
}

/// A kept-alive connection, until when it may be reused (`None`: an idle timeout
/// past the clock's range), and the thread whose loop last used it (its fd is
/// registered with that loop's reactor).
#[derive(Debug)]
struct Idle {
    conn: PooledConn,
    expires: Option<Instant>,
    thread: ThreadId,
}

impl Pool {
    pub(crate) fn new(per_host: usize, idle_timeout: Duration) -> Pool {
        Pool { hosts: Mutex::default(), per_host, idle_timeout }
    }

    /// The host for `origin`, made on its first request. A known origin is found by
    /// its borrowed parts: only a host's first request copies its name.
    pub(crate) fn host(&self, origin: OriginRef<'_>) -> Arc<Host> {
        let mut hosts = lock(&self.hosts);
        if let Some(last) = hosts.last.as_ref().filter(|last| last.origin.parts() == origin) {
            return last.clone();
        }
        let host = match hosts.by_origin.get(&origin as &dyn Key) {
            Some(host) => host.clone(),
            None => self.add(&mut hosts.by_origin, origin),
        };
        hosts.last = Some(host.clone());
        host
    }

    /// Makes the host for `origin`, which `by_origin` does not have, and adds it.
    fn add(&self, by_origin: &mut HashMap<Origin, Arc<Host>>, origin: OriginRef<'_>) -> Arc<Host> {
        let host = Arc::new(Host {
            origin: origin.to_origin(),
            slots: Arc::new(Semaphore::new(self.per_host)),
            idle: Mutex::new(Vec::new()),
            idle_timeout: self.idle_timeout,
        });
        by_origin.insert(host.origin.clone(), host.clone());
        host
    }
}

impl Host {
    /// Where this host's connections go.
    pub(crate) fn origin(&self) -> &Origin {
        &self.origin
    }

    /// A connection slot: hold it while opening or using a connection, until its response has
    /// been read. Parks the fiber while the per-host cap is reached.
    ///
    /// # Errors
    ///
    /// [`Elapsed`] inside an expired `neverblock::timeout`.
    pub(crate) fn slot(&self) -> Result<OwnedPermit, Elapsed> {
        self.slots.clone().acquire_owned()
    }

    /// The most recently used idle connection that has not expired, preferring one
    /// this thread used last (no move to another loop's reactor).
    ///
    /// With `probe`, a non-blocking `peek` first checks that the server has not
    /// closed it, and closed ones are dropped: for a request that could not be
    /// sent again. A replayable request skips that system call; if the server had
    /// closed the connection, the client sends it again on a new one (Go's rule).
    pub(crate) fn take_idle(&self, probe: bool) -> Option<PooledConn> {
        let me = thread::current().id();
        loop {
            let (conn, expired) = {
                let mut idle = lock(&self.idle);
                if idle.is_empty() {
                    return None;
                }
                let expired = Host::expire(&mut idle);
                let pick = idle.iter().rposition(|idle| idle.thread == me).or(idle.len().checked_sub(1));
                (pick.map(|pick| idle.remove(pick).conn), expired)
            };
            // Closing expired connections, and the probe, happen outside the host's lock.
            drop(expired);
            let conn = conn?;
            if !probe || conn.get_ref().looks_idle() {
                return Some(conn);
            }
        }
    }

    /// Takes the expired connections off the front of `idle`, for the caller to
    /// close once the lock is released.
    fn expire(idle: &mut Vec<Idle>) -> Vec<Idle> {
        let now = crate::turn_clock::now();
        match idle.partition_point(|idle| idle.expires.is_some_and(|expires| expires <= now)) {
            0 => Vec::new(),
            expired => idle.drain(..expired).collect(),
        }
    }

    /// Keeps `conn`, whose last response was read to its end, for the next request.
    pub(crate) fn put_idle(&self, conn: PooledConn) {
        let thread = thread::current().id();
        let mut idle = lock(&self.idle);
        idle.push(Idle { conn, expires: crate::turn_clock::now().checked_add(self.idle_timeout), thread });
    }
}

/// Locks `mutex`; a panic elsewhere while it was held leaves a list that is still whole.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
