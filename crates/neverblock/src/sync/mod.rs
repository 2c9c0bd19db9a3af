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
pub use semaphore::{OwnedPermit, Permit, Semaphore};
pub use wait_group::WaitGroup;

use crate::runtime::scheduler::{Primitive, Wait, Woken};
use crate::runtime::waiter::{self, WaitList};

/// The lock around a primitive's own state. It is held for a few instructions
/// (plus, when a waiter on another thread is woken, a push to that runtime's
/// locked queue and an eventfd write), never across a switch, so a spin lock (one atomic to take, a plain store to
/// release: half a futex mutex's cost) serves best; a thread that finds it taken
/// yields until it is free. It has no poisoning to get past.
type StateLock<S> = spin::mutex::SpinMutex<S, spin::relax::Yield>;
type StateGuard<'a, S> = spin::mutex::SpinMutexGuard<'a, S, spin::relax::Yield>;

fn lock<S>(m: &StateLock<S>) -> StateGuard<'_, S> {
    m.lock()
}

/// Waits in `list` (inside `state`) until woken. On a timeout, or when the fiber is
/// cancelled, it leaves the line, passing a wake-up it already got to the next waiter.
fn wait_in<S>(
    what: Primitive,
    state: &StateLock<S>,
    guard: StateGuard<'_, S>,
    list: impl Fn(&mut S) -> &mut WaitList,
) -> Woken {
    struct Leave<'a, S, F: Fn(&mut S) -> &mut WaitList> {
        state: &'a StateLock<S>,
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
    let mut leave = Leave { state, list: &list, ticket: None };
    let woken = waiter::wait(Wait::Sync(what), |w| {
        let mut guard = guard;
        leave.ticket = Some(list(&mut guard).push(w));
    });
    if woken == Woken::Ready {
        leave.ticket = None;
    }
    woken
}
