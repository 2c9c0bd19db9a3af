//! The event loop's waiting half: fd readiness (epoll), deadlines (the timer
//! queue) and wake-ups from other threads (eventfd), behind one `turn`.
//!
//! The boundary a backend must keep (so io_uring can replace epoll later): register
//! interest in an fd under a token, wait with a timeout for a batch of ready
//! tokens, and be woken from another thread. Nothing outside this module and
//! `sys` names epoll.

pub(crate) mod timer;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use crate::sys::epoll::{poll_blocking, Interest, Waker};
use crate::sys::epoll::{Event, Poller};
use timer::{TimerKey, TimerQueue};

/// The token of the cross-thread waker; fds use their own number as token.
const WAKER_TOKEN: u64 = u64::MAX;

/// Who to wake: a task, and which of its parks (so a late wake-up is ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wake {
    pub(crate) task: u64,
    pub(crate) park: u64,
}

/// Readiness of one registered fd, and the tasks waiting for it.
#[derive(Default)]
struct Readiness {
    readable: bool,
    writable: bool,
    readers: Vec<Wake>,
    writers: Vec<Wake>,
}

/// Registered fds by number, hashed by [`FdHasher`].
type FdMap<V> = HashMap<RawFd, V, BuildHasherDefault<FdHasher>>;

/// Hashes an fd with one multiply (Fibonacci hashing): fds are small numbers the
/// kernel hands out, which no one can choose to collide, so SipHash's defence
/// against chosen keys buys nothing on this path, taken on every fd wait.
#[derive(Default)]
struct FdHasher(u64);

impl Hasher for FdHasher {
    fn write(&mut self, _: &[u8]) {
        unreachable!("the map's keys are fds, which hash through write_i32")
    }

    fn write_i32(&mut self, fd: i32) {
        self.0 = u64::from(fd as u32);
    }

    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// One thread's poller, timers and fd readiness.
pub(crate) struct Reactor {
    /// Unique in the process, so an fd can tell whether it is registered with this reactor.
    id: u64,
    poller: Poller,
    waker: Arc<Waker>,
    timers: RefCell<TimerQueue<Wake>>,
    fds: RefCell<FdMap<Readiness>>,
    /// Tasks waiting in `fds`, so the loop can ask without scanning every fd.
    fd_waiters: Cell<usize>,
    events: RefCell<Vec<Event>>,
}

impl std::fmt::Debug for Reactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reactor").field("timers", &self.timers.borrow().len()).finish_non_exhaustive()
    }
}

/// What one `turn` found ready.
pub(crate) struct Turn {
    /// Tasks to make runnable.
    pub(crate) woken: Vec<Wake>,
    /// The cross-thread waker fired.
    pub(crate) remote: bool,
}

impl Reactor {
    pub(crate) fn new() -> io::Result<Reactor> {
        let poller = Poller::new()?;
        let waker = Arc::new(Waker::new(&poller, WAKER_TOKEN)?);
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Ok(Reactor {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            poller,
            waker,
            timers: RefCell::new(TimerQueue::new()),
            fds: RefCell::new(FdMap::default()),
            fd_waiters: Cell::new(0),
            events: RefCell::new(Vec::new()),
        })
    }

    /// A handle that wakes this reactor's `turn` from any thread.
    pub(crate) fn remote_waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }

    /// Wakes `wake` at `deadline`.
    pub(crate) fn add_timer(&self, deadline: Instant, wake: Wake) -> TimerKey {
        self.timers.borrow_mut().insert(deadline, wake)
    }

    /// Takes back the timer `key`; false if it had already fired.
    pub(crate) fn cancel_timer(&self, key: TimerKey) -> bool {
        self.timers.borrow_mut().cancel(key).is_some()
    }

    pub(crate) fn has_timers(&self) -> bool {
        !self.timers.borrow().is_empty()
    }

    /// Whether a timer is due now (reads the clock only when there are timers).
    pub(crate) fn timer_due(&self) -> bool {
        let next = self.timers.borrow_mut().next_deadline();
        next.is_some_and(|d| d <= Instant::now())
    }

    /// Whether some task waits for an fd.
    pub(crate) fn has_fd_waiters(&self) -> bool {
        self.fd_waiters.get() > 0
    }

    /// This reactor's number, never 0 and never reused in the process.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Adds `fd` to the poller (both directions, edge-triggered). An `EEXIST` means
    /// it is still registered and keeps what was cached; success means it is new,
    /// or a new file under a reused number (the kernel drops closed fds from epoll
    /// by itself), so what was cached for the number is stale and forgotten.
    pub(crate) fn register(&self, fd: RawFd) -> io::Result<()> {
        match self.poller.add(fd, fd as u64, Interest::BOTH) {
            Ok(()) => {
                let stale = self.fds.borrow_mut().insert(fd, Readiness::default());
                if let Some(stale) = stale {
                    self.fd_waiters.set(self.fd_waiters.get() - stale.readers.len() - stale.writers.len());
                }
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Forgets `fd`, and removes it from the poller when `from_poller` (the fd
    /// stays open). An fd about to be closed needs no removal: closing it does that,
    /// and an event that still arrives for its number (from a duplicate of it
    /// elsewhere) is only a spurious wake, since every wait re-tries its operation.
    pub(crate) fn deregister(&self, fd: RawFd, from_poller: bool) {
        if from_poller {
            self.poller.delete(fd);
        }
        if let Some(stale) = self.fds.borrow_mut().remove(&fd) {
            self.fd_waiters.set(self.fd_waiters.get() - stale.readers.len() - stale.writers.len());
        }
    }

    /// For a registered `fd`: readiness already seen (and consumed), or `wake`
    /// queued for the next edge. Returns true when the caller may go on without parking.
    pub(crate) fn wait_fd(&self, fd: RawFd, interest: Interest, wake: Wake) -> bool {
        let mut fds = self.fds.borrow_mut();
        let readiness = fds.entry(fd).or_default();
        let (ready, waiters) = if interest.readable {
            (&mut readiness.readable, &mut readiness.readers)
        } else {
            (&mut readiness.writable, &mut readiness.writers)
        };
        if std::mem::take(ready) {
            return true;
        }
        waiters.push(wake);
        self.fd_waiters.set(self.fd_waiters.get() + 1);
        false
    }

    /// For any `fd`, registered or not: [`register`](Self::register) unless
    /// readiness for `interest` is cached (so it is registered).
    pub(crate) fn register_unless_ready(&self, fd: RawFd, interest: Interest) -> io::Result<()> {
        let cached =
            self.fds.borrow().get(&fd).is_some_and(|r| if interest.readable { r.readable } else { r.writable });
        if cached {
            Ok(())
        } else {
            self.register(fd)
        }
    }

    /// Takes back the wake-ups `task` left waiting on `fd` (its park ended
    /// another way: a timeout, a cancellation), so none outlives its park.
    pub(crate) fn unwait(&self, fd: RawFd, interest: Interest, task: u64) {
        let mut fds = self.fds.borrow_mut();
        let Some(readiness) = fds.get_mut(&fd) else { return };
        let waiters = if interest.readable { &mut readiness.readers } else { &mut readiness.writers };
        let before = waiters.len();
        waiters.retain(|w| w.task != task);
        self.fd_waiters.set(self.fd_waiters.get() - (before - waiters.len()));
    }

    /// The tasks whose timers are due, without asking the poller (no system call).
    pub(crate) fn expire_timers(&self) -> Turn {
        let mut turn = Turn { woken: Vec::new(), remote: false };
        self.expire_into(&mut turn.woken);
        turn
    }

    /// Adds the tasks whose timers are due to `woken` (reads the clock only when there are timers).
    fn expire_into(&self, woken: &mut Vec<Wake>) {
        let mut timers = self.timers.borrow_mut();
        if !timers.is_empty() {
            timers.expire(Instant::now(), woken);
        }
    }

    /// Waits for readiness, a deadline or a remote wake (at most `timeout`, `None`
    /// for until something happens) and returns who to wake.
    pub(crate) fn turn(&self, timeout: Option<Duration>) -> io::Result<Turn> {
        let next_deadline = self.timers.borrow_mut().next_deadline();
        let timeout = match (timeout, next_deadline) {
            (t, None) => t,
            (None, Some(d)) => Some(d.saturating_duration_since(Instant::now())),
            (Some(t), Some(d)) => Some(t.min(d.saturating_duration_since(Instant::now()))),
        };
        let mut events = self.events.borrow_mut();
        self.poller.wait(&mut events, timeout)?;
        let mut turn = Turn { woken: Vec::new(), remote: false };
        let mut fds = self.fds.borrow_mut();
        for event in events.iter() {
            if event.token == WAKER_TOKEN {
                self.waker.reset()?;
                turn.remote = true;
                continue;
            }
            let Some(readiness) = fds.get_mut(&(event.token as RawFd)) else { continue };
            if event.readable || event.hangup {
                if readiness.readers.is_empty() {
                    readiness.readable = true;
                }
                turn.woken.append(&mut readiness.readers);
            }
            if event.writable || event.hangup {
                if readiness.writers.is_empty() {
                    readiness.writable = true;
                }
                turn.woken.append(&mut readiness.writers);
            }
        }
        self.fd_waiters.set(self.fd_waiters.get() - turn.woken.len());
        self.expire_into(&mut turn.woken);
        Ok(turn)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    use super::*;

    #[test]
    fn a_wait_taken_back_leaves_no_waiter_behind() {
        let reactor = Reactor::new().unwrap();
        let (a, _b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        reactor.register(fd).unwrap();
        assert!(!reactor.wait_fd(fd, Interest::READABLE, Wake { task: 7, park: 1 }), "nothing to read yet");
        assert!(reactor.has_fd_waiters());
        reactor.unwait(fd, Interest::READABLE, 8);
        assert!(reactor.has_fd_waiters(), "another task's wait is not this one's to take back");
        reactor.unwait(fd, Interest::READABLE, 7);
        assert!(!reactor.has_fd_waiters(), "the wait was taken back");
    }

    #[test]
    fn fd_hashes_spread_over_the_buckets_a_map_uses() {
        use std::hash::BuildHasher;
        let hasher = BuildHasherDefault::<FdHasher>::default();
        // hashbrown picks a bucket from the low bits and a tag from the top 7.
        let buckets: std::collections::HashSet<u64> = (0..1024).map(|fd: RawFd| hasher.hash_one(fd) & 1023).collect();
        assert_eq!(buckets.len(), 1024, "1024 consecutive fds take 1024 distinct buckets");
        let tags: std::collections::HashSet<u64> = (0..1024).map(|fd: RawFd| hasher.hash_one(fd) >> 57).collect();
        assert!(tags.len() > 100, "the tags vary too: {}", tags.len());
    }
}
