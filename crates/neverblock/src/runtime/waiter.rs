//! `Waiter`: a `Send` handle that wakes one parked fiber (on whichever thread its
//! runtime runs) or one blocked thread (blocking mode), and `WaitList`, the FIFO
//! of waiters every fiber-aware sync primitive is built on.

use std::collections::VecDeque;
use std::thread::{self, Thread};

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
    pub(crate) fn wake(self) {
        match self {
            Waiter::Fiber { scheduler, turn } => scheduler::wake_on(scheduler, turn),
            Waiter::Thread(t) => t.unpark(),
        }
    }
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
        thread::park();
        return Woken::Ready;
    };
    let scheduler = s.id();
    s.park_for_waiter(why, |turn| register(Waiter::Fiber { scheduler, turn }), interruptible)
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

    /// Wakes the first waiter, if any; true if there was one.
    pub(crate) fn wake_one(&mut self) -> bool {
        self.pop().map(Waiter::wake).is_some()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }
}
