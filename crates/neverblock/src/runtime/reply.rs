//! A reply from another thread: the one value that work run elsewhere (a
//! blocking-pool job, a task on another loop) hands back to the fiber, or plain
//! thread, that waits for it.
//!
//! The runtime's own return path, below `sync` (whose `oneshot` is the public
//! one): one waiter at most, woken through its [`Waiter`]; a sender dropped
//! without sending ends the wait too, so work that never ran is not waited for.

use std::sync::{Arc, Mutex};

use super::scheduler::{Wait, Woken};
use super::waiter::{self, Waiter};
use crate::poison::IgnorePoison;

/// Makes the two ends of one reply.
pub(crate) fn reply<T>() -> (ReplySender<T>, ReplyReceiver<T>) {
    let state = Arc::new(Mutex::new(ReplyState { value: None, sender_gone: false, waiter: None }));
    (ReplySender { state: state.clone() }, ReplyReceiver { state })
}

/// What both ends share.
struct ReplyState<T> {
    value: Option<T>,
    /// The sender is gone, having sent or not: no value comes after.
    sender_gone: bool,
    /// Who to wake when the value comes or the sender goes.
    waiter: Option<Waiter>,
}

/// Leaves the value; dropping it, sent or not, wakes the receiver.
pub(crate) struct ReplySender<T> {
    state: Arc<Mutex<ReplyState<T>>>,
}

/// Waits for the value.
pub(crate) struct ReplyReceiver<T> {
    state: Arc<Mutex<ReplyState<T>>>,
}

/// Why a reply has no value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NoReply {
    /// The sender was dropped without sending (the work was dropped unrun).
    SenderGone,
    /// A `timeout` scope around the wait expired.
    TimedOut,
}

impl<T> ReplySender<T> {
    /// Leaves `value` for the receiver (dropped with the reply if the receiver is gone).
    pub(crate) fn send(self, value: T) {
        self.state.lock().ignore_poison().value = Some(value);
    }
}

impl<T> Drop for ReplySender<T> {
    fn drop(&mut self) {
        let waiter = {
            let mut state = self.state.lock().ignore_poison();
            state.sender_gone = true;
            state.waiter.take()
        };
        if let Some(waiter) = waiter {
            waiter.wake();
        }
    }
}

impl<T> ReplyReceiver<T> {
    /// Parks the calling fiber (outside a runtime, blocks the thread) until the
    /// value comes, noted as waiting on `why`.
    ///
    /// # Errors
    ///
    /// [`NoReply::SenderGone`] if the sender was dropped without sending;
    /// [`NoReply::TimedOut`] inside an expired `timeout` scope.
    pub(crate) fn wait(self, why: Wait) -> Result<T, NoReply> {
        self.wait_inner(why, true)
    }

    /// Like [`wait`](Self::wait), but an expired `timeout` scope does not end the
    /// wait: for work that cannot be abandoned.
    ///
    /// # Errors
    ///
    /// [`NoReply::SenderGone`] if the sender was dropped without sending.
    pub(crate) fn wait_through_timeouts(self, why: Wait) -> Result<T, NoReply> {
        self.wait_inner(why, false)
    }

    fn wait_inner(self, why: Wait, interruptible: bool) -> Result<T, NoReply> {
        loop {
            let mut state = self.state.lock().ignore_poison();
            if let Some(value) = state.value.take() {
                return Ok(value);
            }
            if state.sender_gone {
                return Err(NoReply::SenderGone);
            }
            // The lock is released once the waiter is in place, before the fiber parks.
            let register = move |w| state.waiter = Some(w);
            let woken = if interruptible {
                waiter::wait(why, register)
            } else {
                waiter::wait_through_timeouts(why, register);
                Woken::Ready
            };
            if woken == Woken::TimedOut {
                return Err(NoReply::TimedOut);
            }
        }
    }
}
