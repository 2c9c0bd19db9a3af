//! Fiber-aware synchronisation: each primitive parks the waiting *fiber*, never
//! the thread, and works across threads (a fiber on another runtime thread, or a
//! plain thread in blocking mode, is woken through its own loop).
//!
//! Every wait honours an enclosing [`timeout`](crate::timeout) (returning
//! [`Elapsed`](crate::Elapsed) or a `TimedOut` error) and cancellation (the
//! cancelled fiber leaves the line, passing on any wake-up it was handed), and
//! wakes waiters in arrival order.

mod channel;
mod mutex;
mod notify;
mod oneshot;
mod semaphore;
mod wait_group;

pub use channel::{bounded, unbounded, Receiver, RecvError, SendError, Sender, TryRecvError};
pub use mutex::{Mutex, MutexGuard};
pub use notify::Notify;
pub use oneshot::{oneshot, OneshotReceiver, OneshotSender};
pub use semaphore::{Permit, Semaphore};
pub use wait_group::WaitGroup;

use std::sync::{Mutex as StdMutex, MutexGuard as StdGuard};

use crate::runtime::scheduler::Woken;
use crate::runtime::waiter::{self, WaitList};

/// Locks an internal state mutex; a panic elsewhere never poisons the primitive.
fn lock<T>(m: &StdMutex<T>) -> StdGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits in `list` (inside `state`) until woken. On a timeout, or when the fiber is
/// cancelled, it leaves the line, passing a wake-up it already got to the next waiter.
fn wait_in<S>(state: &StdMutex<S>, guard: StdGuard<'_, S>, list: impl Fn(&mut S) -> &mut WaitList) -> Woken {
    struct Leave<'a, S, F: Fn(&mut S) -> &mut WaitList> {
        state: &'a StdMutex<S>,
        list: &'a F,
        ticket: Option<u64>,
    }
    impl<S, F: Fn(&mut S) -> &mut WaitList> Drop for Leave<'_, S, F> {
        fn drop(&mut self) {
            let Some(ticket) = self.ticket else { return };
            let mut state = lock(self.state);
            let list = (self.list)(&mut state);
            let next = if list.leave(ticket) { None } else { list.pop() };
            drop(state);
            if let Some(next) = next {
                next.wake();
            }
        }
    }
    let mut guard = Some(guard);
    let mut leave = Leave { state, list: &list, ticket: None };
    let woken = waiter::wait(|w| {
        let mut g = guard.take().expect("registered once");
        leave.ticket = Some(list(&mut g).push(w));
    });
    if woken == Woken::Ready {
        leave.ticket = None;
    }
    woken
}
