//! Waits on fds that the waiting code does not own (libc's calls, taken over by
//! [`hooks`](crate::hooks)): a registration of its own for each wait, and the
//! waits in progress listed by fd, so that closing an fd first wakes and
//! deregisters every fiber parked on it.
//!
//! A socket of [`net`](crate::net) keeps its registration for its life, and its
//! owner drops it before the fd closes. A hooked fd has no owner to tell the loop:
//! its number may be closed by another fiber or thread mid-wait and reused at
//! once, so a wait never outlives its park, and a close ends the waits on it
//! before the fd goes (the parked fiber is told, and touches the number no more).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::registration::{park, Direction};
use super::scheduler::{self, Scheduler, Woken};
use crate::reactor::source::Token;

/// How a wait on an fd ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FdWaited {
    /// The fd may be ready (or the wake was spurious): the caller tries again.
    Ready,
    /// The deadline passed.
    Deadline,
    /// A [`timeout`](crate::timeout) scope around the call expired.
    TimedOut,
    /// A watched fd was closed meanwhile: its number may already name another file.
    Closed,
}

/// Whether the calling code runs in a task of this thread's loop, so that a wait parks
/// its fiber: false on a plain thread, the blocking pool, the loop's own root.
#[inline(always)]
pub(crate) fn may_park() -> bool {
    super::running::runs_task()
}

/// One wait in progress: where its registration is, and whether a close ended it.
struct Wait {
    scheduler: u64,
    token: Token,
    /// The fd registered: a watched one, or one standing for them (a duplicate, an epoll set).
    registered: RawFd,
    closed: bool,
}

#[derive(Default)]
struct Waits {
    next: u64,
    waits: BTreeMap<u64, Wait>,
    /// (watched fd, wait) pairs.
    by_fd: BTreeSet<(RawFd, u64)>,
}

/// The waits in progress, in every loop of the process (a close on any thread ends them).
static WAITS: spin::Mutex<Waits> = spin::Mutex::new(Waits { next: 0, waits: BTreeMap::new(), by_fd: BTreeSet::new() });
/// How many waits are in `WAITS`: a close reads this alone while none is.
static IN_PROGRESS: AtomicUsize = AtomicUsize::new(0);

/// Parks the running task until `fd` is ready for `direction`, `deadline` passes,
/// a `timeout` scope expires, or one of `watched` is closed through [`close`]. `fd`
/// is a watched fd or one that stands for them (an epoll set of theirs).
///
/// # Errors
///
/// The reactor's, when `fd` cannot be registered (a regular file: `EPERM`).
///
/// # Panics
///
/// Outside a task (see [`may_park`]); unwinds a cancelled task.
pub(crate) fn wait(
    watched: &[RawFd],
    fd: BorrowedFd<'_>,
    direction: Direction,
    deadline: Option<Instant>,
) -> io::Result<FdWaited> {
    let s = scheduler::in_task().expect("fd_waits::wait is called from a task");
    let (token, duplicate) = match s.reactor().register(fd) {
        Ok(token) => (token, None),
        // Registered with this loop already (a socket of `net`, or a second hooked wait on
        // the fd): a duplicate is a separate entry of the poller.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::EXIST.raw_os_error()) => {
            let duplicate = rustix::io::fcntl_dupfd_cloexec(fd, 0)?;
            (s.reactor().register(duplicate.as_fd())?, Some(duplicate))
        }
        Err(e) => return Err(e),
    };
    let registered = duplicate.as_ref().map_or(fd, AsFd::as_fd);
    let id = enter(watched, Wait { scheduler: s.id(), token, registered: registered.as_raw_fd(), closed: false });
    let mut leave = Leave { s: &s, id, token, registered, closed: None };
    let woken = park(&s, token, direction, deadline);
    let closed = leave.now();
    Ok(match woken {
        _ if closed => FdWaited::Closed,
        Woken::TimedOut => FdWaited::TimedOut,
        Woken::Ready if deadline.is_some_and(|d| Instant::now() >= d) => FdWaited::Deadline,
        Woken::Ready => FdWaited::Ready,
    })
}

/// Takes a wait off the list and deregisters it, unless a close has (also on a
/// cancellation's unwind).
struct Leave<'a> {
    s: &'a Scheduler,
    id: u64,
    token: Token,
    registered: BorrowedFd<'a>,
    /// Whether a close ended the wait, once it has left.
    closed: Option<bool>,
}

impl Leave<'_> {
    /// Leaves now; true if a close ended the wait.
    fn now(&mut self) -> bool {
        *self.closed.get_or_insert_with(|| {
            let closed = leave(self.id);
            if !closed {
                for turn in self.s.reactor().deregister(self.token, Some(self.registered)) {
                    self.s.wake(turn);
                }
            }
            closed
        })
    }
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.now();
    }
}

fn enter(watched: &[RawFd], wait: Wait) -> u64 {
    let mut waits = WAITS.lock();
    waits.next += 1;
    let id = waits.next;
    waits.waits.insert(id, wait);
    for &fd in watched {
        waits.by_fd.insert((fd, id));
    }
    IN_PROGRESS.fetch_add(1, Ordering::Release);
    id
}

/// Takes the wait `id` off the list; true if a close ended it.
fn leave(id: u64) -> bool {
    let mut waits = WAITS.lock();
    let wait = waits.waits.remove(&id).expect("a wait leaves once");
    waits.by_fd.retain(|&(_, of)| of != id);
    IN_PROGRESS.fetch_sub(1, Ordering::Release);
    wait.closed
}

/// Holds the lock over the waits until dropped, as another thread does for an instant while a
/// wait enters or leaves.
#[cfg(test)]
pub(crate) fn hold_lock() -> impl Sized {
    WAITS.lock()
}

/// Ends every wait on `fd`, which is about to be closed: each is deregistered (by
/// its own loop, if that runs on another thread) and its fiber woken, to be told
/// the fd is gone. Costs one atomic load while no wait is in progress.
pub(crate) fn close(fd: BorrowedFd<'_>) {
    if IN_PROGRESS.load(Ordering::Acquire) == 0 {
        return;
    }
    let raw = fd.as_raw_fd();
    let ended: Vec<(u64, Token, RawFd)> = {
        let mut guard = WAITS.lock();
        let Waits { waits, by_fd, .. } = &mut *guard;
        by_fd
            .range((raw, 0)..=(raw, u64::MAX))
            .filter_map(|&(_, id)| {
                let wait = waits.get_mut(&id)?;
                (!std::mem::replace(&mut wait.closed, true)).then_some((wait.scheduler, wait.token, wait.registered))
            })
            .collect()
    };
    for (home, token, registered) in ended {
        // Only `fd` itself is known to be open here; a duplicate or an epoll set standing for it
        // leaves the poller when its fiber closes it, right after waking.
        let fd = (registered == raw).then_some(fd);
        match scheduler::current() {
            Some(s) if s.id() == home => {
                for turn in s.reactor().deregister(token, fd) {
                    s.wake(turn);
                }
            }
            _ => {
                if let Some(remote) = super::remote::find(home) {
                    remote.send(Box::new(move |s| {
                        for turn in s.reactor().deregister(token, None) {
                            s.wake(turn);
                        }
                    }));
                }
            }
        }
    }
}
