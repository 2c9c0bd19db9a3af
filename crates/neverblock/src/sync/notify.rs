//! `Notify`: wake one or all waiting fibers, with a stored permit for one.

use std::fmt;

use super::{lock, wait_in, StateLock};
use crate::runtime::scheduler::{Primitive, Woken};
use crate::runtime::waiter::WaitList;
use crate::Elapsed;

/// Wakes waiting fibers. A `notify_one` with nobody waiting is kept as a permit
/// that the next `notified` consumes at once (as tokio's `Notify`).
///
/// # Examples
///
/// ```
/// use std::rc::Rc;
/// use neverblock::sync::Notify;
///
/// neverblock::run(|| {
///     let ready = Rc::new(Notify::new());
///     let r = ready.clone();
///     let waiter = neverblock::spawn(move || r.notified().unwrap());
///     neverblock::yield_now();
///     ready.notify_one();
///     waiter.join().unwrap();
/// });
/// ```
pub struct Notify {
    state: StateLock<State>,
}

struct State {
    permit: bool,
    waiters: WaitList,
}

impl Default for Notify {
    fn default() -> Self {
        Notify::new()
    }
}

impl Notify {
    /// A `Notify` with nobody waiting and no permit.
    pub fn new() -> Notify {
        Notify { state: StateLock::new(State { permit: false, waiters: WaitList::default() }) }
    }

    /// Parks the fiber until notified (or takes the stored permit).
    ///
    /// # Errors
    ///
    /// [`Elapsed`] inside an expired [`timeout`](crate::timeout).
    pub fn notified(&self) -> Result<(), Elapsed> {
        let mut state = lock(&self.state);
        if std::mem::take(&mut state.permit) {
            return Ok(());
        }
        match wait_in(Primitive::Notify, &self.state, state, |s| &mut s.waiters) {
            Woken::Ready => Ok(()),
            Woken::TimedOut => Err(Elapsed),
        }
    }

    /// Wakes the first waiter, or stores a permit if none waits.
    pub fn notify_one(&self) {
        let mut state = lock(&self.state);
        if !state.waiters.wake_one() {
            state.permit = true;
        }
    }

    /// Wakes every waiter (stores no permit).
    pub fn notify_all(&self) {
        lock(&self.state).waiters.wake_all();
    }
}

impl fmt::Debug for Notify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notify").field("permit", &lock(&self.state).permit).finish_non_exhaustive()
    }
}
