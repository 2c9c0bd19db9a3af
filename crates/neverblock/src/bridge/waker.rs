//! The waker of a `block_on`: a flag and the parked fiber (or thread) to wake.

use std::sync::Arc;
use std::task::Wake;

use crate::runtime::registration::{self, Interest};
use crate::runtime::scheduler::Woken;
use crate::runtime::waiter::Waiter;

/// Held for a few instructions, never across a switch (as the sync primitives' lock).
type Lock<S> = spin::mutex::SpinMutex<S, spin::relax::Yield>;

/// What a `block_on`'s waker sets, and who it wakes.
#[derive(Default)]
pub(super) struct Signal {
    state: Lock<State>,
}

#[derive(Default)]
struct State {
    /// Woken since the poll began: the next park returns at once.
    woken: bool,
    /// The park in progress, if any.
    waiter: Option<Waiter>,
}

impl Signal {
    /// Forgets earlier wakes, before a poll: wakes from now on count.
    pub(super) fn arm(&self) {
        self.state.lock().woken = false;
    }

    /// Parks until woken since the last [`arm`](Self::arm), or until one of
    /// `interests` is ready (at once if woken already).
    pub(super) fn park(&self, interests: &[Interest]) -> Woken {
        /// Forgets the park's waiter however it ends (also on a cancellation's unwind).
        struct Forget<'a>(&'a Signal);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.state.lock().waiter = None;
            }
        }
        let _forget = Forget(self);
        registration::wait_any(interests, |waiter| {
            let mut state = self.state.lock();
            if state.woken {
                return Some(waiter);
            }
            state.waiter = Some(waiter);
            None
        })
    }
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let waiter = {
            let mut state = self.state.lock();
            state.woken = true;
            state.waiter.take()
        };
        if let Some(waiter) = waiter {
            waiter.wake();
        }
    }
}
