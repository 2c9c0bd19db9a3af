//! The event loop's waiting half: fd readiness (epoll), deadlines (the timer
//! queue) and wake-ups from other threads (an eventfd), behind one `turn`.
//!
//! The boundary a backend must keep (so io_uring can replace epoll later):
//! register an fd under a token, wait with a timeout for a batch of ready
//! tokens, and be woken from another thread. Nothing outside this module and
//! `sys` names epoll, and only `runtime::registration` registers fds.

pub(crate) mod source;
pub(crate) mod timer;

#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use crate::sys::epoll::{poll_blocking, Direction, EventFd};
use crate::sys::epoll::{Event, Poller};
use source::{Sources, Token, Waited};
use timer::{TimerKey, TimerQueue};

/// The epoll token of the cross-thread eventfd; no source's token is this.
const EVENTFD_TOKEN: u64 = u64::MAX;

/// A task's turn: the task, and the number of the park it is in. A wake-up
/// carries the turn it was handed; once the task has moved on to another park,
/// the wake-up is stale and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Turn {
    pub(crate) task: u64,
    pub(crate) number: u64,
}

/// What the loop found for the scheduler to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Continue the task, if it is still in this turn's park.
    Continue(Turn),
    /// A `timeout` scope of the task expired: end whatever park it is in.
    TimeOut(u64),
}

/// What a timer entry does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alarm {
    /// Wakes a task (a sleep, a park with a deadline, a `timeout` scope).
    Wake(Wake),
    /// A source's deadline timer: wakes the fibers parked on that direction whose
    /// deadline has passed.
    SourceDeadline(Token, Direction),
}

/// One thread's poller, timers and registered fds.
pub(crate) struct Reactor {
    /// Unique in the process, so a registration can tell whether it is with this reactor.
    id: u64,
    poller: Poller,
    eventfd: Arc<EventFd>,
    timers: RefCell<TimerQueue<Alarm>>,
    sources: RefCell<Sources>,
    events: RefCell<Vec<Event>>,
    /// Alarms that fired, kept between turns so expiring timers allocates nothing.
    fired: RefCell<Vec<Alarm>>,
}

impl std::fmt::Debug for Reactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reactor").field("id", &self.id).field("timers", &self.timers.borrow().len()).finish()
    }
}

/// What one `turn` found.
pub(crate) struct Found {
    /// Tasks to continue or time out.
    pub(crate) woken: Vec<Wake>,
    /// The cross-thread eventfd fired.
    pub(crate) remote: bool,
}

impl Reactor {
    pub(crate) fn new() -> io::Result<Reactor> {
        let poller = Poller::new()?;
        let eventfd = Arc::new(EventFd::new(&poller, EVENTFD_TOKEN)?);
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Ok(Reactor {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            poller,
            eventfd,
            timers: RefCell::new(TimerQueue::new()),
            sources: RefCell::new(Sources::default()),
            events: RefCell::new(Vec::new()),
            fired: RefCell::new(Vec::new()),
        })
    }

    /// This reactor's number, never 0 and never reused in the process.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The eventfd that wakes this reactor's `turn` from any thread.
    pub(crate) fn remote_eventfd(&self) -> Arc<EventFd> {
        self.eventfd.clone()
    }

    /// Fires `alarm` at `deadline`.
    pub(crate) fn add_timer(&self, deadline: Instant, alarm: Alarm) -> TimerKey {
        self.timers.borrow_mut().insert(deadline, alarm)
    }

    /// Takes back the timer `key`; false if it had already fired.
    pub(crate) fn cancel_timer(&self, key: TimerKey) -> bool {
        self.timers.borrow_mut().cancel(key).is_some()
    }

    pub(crate) fn has_timers(&self) -> bool {
        !self.timers.borrow().is_empty()
    }

    /// How many timers are pending: set, and neither fired nor taken back.
    pub(crate) fn pending_timers(&self) -> usize {
        self.timers.borrow().len()
    }

    /// Whether some fiber is parked on a registered fd.
    pub(crate) fn has_fd_waiters(&self) -> bool {
        self.sources.borrow().has_parked()
    }

    /// How many fds are registered now (the cross-thread eventfd is not a source).
    pub(crate) fn registered(&self) -> usize {
        self.sources.borrow().len()
    }

    /// Registers `fd` (edge-triggered, both directions) as a new source, neither
    /// direction ready until the kernel reports it (it reports what is ready at
    /// once, in the next turn).
    pub(crate) fn register(&self, fd: BorrowedFd<'_>) -> io::Result<Token> {
        let token = self.sources.borrow_mut().insert();
        if let Err(e) = self.poller.add(fd, token.to_raw()) {
            self.sources.borrow_mut().remove(token);
            return Err(e);
        }
        Ok(token)
    }

    /// Ends the source `token`. `fd` is given when the fd stays open, to take it
    /// out of the poller; an fd about to be closed needs no system call, since
    /// closing it does that (and an event still arriving for it, from a duplicate
    /// of the fd elsewhere, names a generation no source has). Fibers still parked
    /// on it are woken, to try their operation again.
    pub(crate) fn deregister(&self, token: Token, fd: Option<BorrowedFd<'_>>) -> Vec<Turn> {
        if let Some(fd) = fd {
            self.poller.delete(fd);
        }
        let (timers, woken) = self.sources.borrow_mut().remove(token);
        for key in timers {
            self.cancel_timer(key);
        }
        woken
    }

    /// Whether an operation in `direction` on `token` is worth trying: the kernel
    /// reported it ready and none has returned `WouldBlock` since.
    pub(crate) fn is_ready(&self, token: Token, direction: Direction) -> bool {
        self.sources.borrow_mut().is_ready(token, direction)
    }

    /// Notes that an operation in `direction` on `token` would block.
    pub(crate) fn clear_ready(&self, token: Token, direction: Direction) {
        self.sources.borrow_mut().clear_ready(token, direction);
    }

    /// For a registered `token`: true when `direction` is ready already; else
    /// parks `turn` on it until the kernel reports readiness or `deadline` passes
    /// (the source's deadline timer is armed if none fires early enough).
    pub(crate) fn wait(&self, token: Token, direction: Direction, turn: Turn, deadline: Option<Instant>) -> bool {
        let waited = self.sources.borrow_mut().wait(token, direction, turn, deadline);
        match waited {
            Waited::Ready => true,
            Waited::Parked { arm: None } => false,
            Waited::Parked { arm: Some(at) } => {
                let key = self.add_timer(at, Alarm::SourceDeadline(token, direction));
                let replaced = self.sources.borrow_mut().set_timer(token, direction, key, at);
                if let Some(old) = replaced {
                    self.cancel_timer(old);
                }
                false
            }
        }
    }

    /// Takes back the wait `task` left on `token` (its park ended another way).
    pub(crate) fn unwait(&self, token: Token, direction: Direction, task: u64) {
        self.sources.borrow_mut().unwait(token, direction, task);
    }

    /// The tasks whose timers are due, without asking the poller (no system call).
    pub(crate) fn expire_timers(&self) -> Found {
        let mut found = Found { woken: Vec::new(), remote: false };
        self.expire_into(&mut found.woken);
        found
    }

    /// Adds what the due timers wake to `woken` (reads the clock only when there
    /// are timers); a source's deadline timer is re-armed for the fibers still waiting.
    fn expire_into(&self, woken: &mut Vec<Wake>) {
        if self.timers.borrow().is_empty() {
            return;
        }
        let now = Instant::now();
        let mut fired = self.fired.borrow_mut();
        self.timers.borrow_mut().expire(now, &mut fired);
        let mut turns = Vec::new();
        for alarm in fired.drain(..) {
            match alarm {
                Alarm::Wake(wake) => woken.push(wake),
                Alarm::SourceDeadline(token, direction) => {
                    let again = self.sources.borrow_mut().deadline(token, direction, now, &mut turns);
                    if let Some(at) = again {
                        let key = self.add_timer(at, Alarm::SourceDeadline(token, direction));
                        self.sources.borrow_mut().set_timer(token, direction, key, at);
                    }
                }
            }
        }
        woken.extend(turns.into_iter().map(Wake::Continue));
    }

    /// Waits for readiness, a deadline or a remote wake (at most `timeout`, `None`
    /// for until something happens) and returns who to wake.
    pub(crate) fn turn(&self, timeout: Option<Duration>) -> io::Result<Found> {
        let next_deadline = self.timers.borrow().next_deadline();
        let timeout = match (timeout, next_deadline) {
            (t, None) => t,
            (None, Some(d)) => Some(d.saturating_duration_since(Instant::now())),
            (Some(t), Some(d)) => Some(t.min(d.saturating_duration_since(Instant::now()))),
        };
        let mut events = self.events.borrow_mut();
        self.poller.wait(&mut events, timeout)?;
        let mut found = Found { woken: Vec::new(), remote: false };
        let mut turns = Vec::new();
        let mut sources = self.sources.borrow_mut();
        for event in events.iter() {
            if event.token == EVENTFD_TOKEN {
                self.eventfd.reset()?;
                found.remote = true;
                continue;
            }
            sources.ready(event, &mut turns);
        }
        drop(sources);
        found.woken.extend(turns.into_iter().map(Wake::Continue));
        self.expire_into(&mut found.woken);
        Ok(found)
    }

    /// How many timers were ever set.
    #[cfg(test)]
    pub(crate) fn timers_set(&self) -> u64 {
        self.timers.borrow().inserted()
    }
}
