//! `Waiter`: a `Send` handle that wakes one parked fiber (on whichever thread its
//! runtime runs) or one blocked thread (blocking mode), and `WaitList`, the FIFO
//! of waiters every fiber-aware sync primitive is built on.

use std::cell::Cell;
use std::collections::VecDeque;
use std::thread::{self, Thread};
use std::time::Instant;

use super::scheduler::{self, Wait, Woken};
use crate::reactor::Turn;

/// Wakes one parked fiber or blocked thread, from any thread.
pub(crate) enum Waiter {
    /// A fiber parked in the runtime `scheduler` (its id).
    Fiber {
        scheduler: u64,
        turn: Turn,
    },
    Thread(Thread),
}

impl Waiter {
    /// Always inlined: a wake on the waker's own thread (the common case: a channel's
    /// receiver waking its sender) is then a check of the scheduler's number and a push to
    /// its run queue, with no call and no copy of the waiter.
    #[inline(always)]
    pub(crate) fn wake(self) {
        match self {
            Waiter::Fiber { scheduler, turn } => scheduler::wake_on(scheduler, turn),
            Waiter::Thread(t) => unpark(t),
        }
    }
}

/// Wakes a thread blocked outside a runtime: kept out of the inlined [`Waiter::wake`].
#[cold]
fn unpark(thread: Thread) {
    thread.unpark();
}

/// Parks the calling fiber (or, outside a runtime, blocks the thread) after
/// handing `register` the waiter that ends the wait. Callers re-check their
/// condition afterwards: a wake can be spurious.
///
/// # Panics
///
/// Unwinds a cancelled task (see `JoinHandle::cancel`).
pub(crate) fn wait(why: Wait, register: impl FnOnce(Waiter)) -> Woken {
    wait_inner(why, register, true)
}

/// Like [`wait`], but an expired `timeout` scope does not end the wait: for work
/// that cannot be abandoned. Wakes can still be spurious.
pub(crate) fn wait_through_timeouts(why: Wait, register: impl FnOnce(Waiter)) {
    wait_inner(why, register, false);
}

fn wait_inner(why: Wait, register: impl FnOnce(Waiter), interruptible: bool) -> Woken {
    let Some(s) = scheduler::in_task() else {
        register(Waiter::Thread(thread::current()));
        let Some(deadline) = thread_deadline().filter(|_| interruptible) else {
            thread::park();
            return Woken::Ready;
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if !left.is_zero() {
            thread::park_timeout(left);
        }
        return if Instant::now() >= deadline { Woken::TimedOut } else { Woken::Ready };
    };
    let scheduler = s.id();
    let register = |turn| {
        register(Waiter::Fiber { scheduler, turn });
        false
    };
    s.park_for_waiter(why, register, interruptible)
}

thread_local! {
    /// The deadline of the innermost [`timeout`](crate::timeout) scope open on this thread outside
    /// a runtime (an outer scope's, when that one ends sooner).
    static THREAD_DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The deadline of the `timeout` scopes open on this thread outside a runtime, if any: waits on
/// fds, on sync primitives and for name lookups end there.
pub(crate) fn thread_deadline() -> Option<Instant> {
    THREAD_DEADLINE.get()
}

/// Opens a `timeout` scope ending at `deadline` on this thread, outside a runtime, until the
/// returned guard drops (also when its closure unwinds).
pub(crate) fn thread_scope(deadline: Instant) -> impl Drop {
    struct Scope(Option<Instant>);
    impl Drop for Scope {
        fn drop(&mut self) {
            THREAD_DEADLINE.set(self.0);
        }
    }
    let outer = THREAD_DEADLINE.get();
    THREAD_DEADLINE.set(Some(outer.map_or(deadline, |outer| outer.min(deadline))));
    Scope(outer)
}

/// Waiters in arrival order, each under a ticket so it can leave the line.
#[derive(Default)]
pub(crate) struct WaitList {
    waiters: VecDeque<(u64, Waiter)>,
    next: u64,
}

impl WaitList {
    /// Joins the line; the ticket is for [`leave`](Self::leave).
    pub(crate) fn push(&mut self, waiter: Waiter) -> u64 {
        self.next += 1;
        self.waiters.push_back((self.next, waiter));
        self.next
    }

    /// Leaves the line without being woken. False if already woken: the caller
    /// then owns a wake-up it will not use, and should pass it on.
    pub(crate) fn leave(&mut self, ticket: u64) -> bool {
        let before = self.waiters.len();
        self.waiters.retain(|(t, _)| *t != ticket);
        self.waiters.len() != before
    }

    /// Takes the first waiter, to wake once the caller's lock is released.
    pub(crate) fn pop(&mut self) -> Option<Waiter> {
        self.waiters.pop_front().map(|(_, w)| w)
    }

    /// Wakes every waiter. Waking only queues work (on this thread's scheduler or
    /// another thread's inbox), so callers may do it under their own lock.
    pub(crate) fn wake_all(&mut self) {
        while let Some((_, waiter)) = self.waiters.pop_front() {
            waiter.wake();
        }
    }

    /// Wakes the first waiter, if any; true if there was one. The look is inlined, the
    /// wake not: a channel's send and receive each ask a list that is nearly always empty.
    #[inline(always)]
    pub(crate) fn wake_one(&mut self) -> bool {
        if self.waiters.is_empty() {
            return false;
        }
        self.wake_first();
        true
    }

    /// Wakes the first waiter, which the caller saw there.
    #[inline(never)]
    fn wake_first(&mut self) {
        if let Some(waiter) = self.pop() {
            waiter.wake();
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }
}
