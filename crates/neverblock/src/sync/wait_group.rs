//! `WaitGroup`: wait until a count of outstanding jobs reaches zero.

use std::fmt;

use super::{lock, wait_in, StateLock};
use crate::runtime::scheduler::{Primitive, Woken};
use crate::runtime::waiter::WaitList;
use crate::Elapsed;

/// Go's `sync.WaitGroup`: `add` before starting work, `done` when it ends, `wait`
/// parks until the count is zero.
///
/// # Examples
///
/// ```
/// use std::rc::Rc;
/// use neverblock::sync::WaitGroup;
///
/// neverblock::run(|| {
///     let wg = Rc::new(WaitGroup::new());
///     for _ in 0..5 {
///         wg.add(1);
///         let wg = wg.clone();
///         neverblock::spawn(move || wg.done());
///     }
///     wg.wait().unwrap();
///     assert_eq!(wg.count(), 0);
/// });
/// ```
pub struct WaitGroup {
    state: StateLock<State>,
}

struct State {
    count: usize,
    waiters: WaitList,
}

impl Default for WaitGroup {
    fn default() -> Self {
        WaitGroup::new()
    }
}

impl WaitGroup {
    /// A group with a count of zero.
    pub fn new() -> WaitGroup {
        WaitGroup { state: StateLock::new(State { count: 0, waiters: WaitList::default() }) }
    }

    /// Adds `n` outstanding jobs.
    pub fn add(&self, n: usize) {
        lock(&self.state).count += n;
    }

    /// Marks one job done; at zero, wakes every waiter.
    ///
    /// # Panics
    ///
    /// If the count is already zero.
    pub fn done(&self) {
        let mut state = lock(&self.state);
        state.count = state.count.checked_sub(1).expect("WaitGroup::done called more often than add");
        if state.count == 0 {
            state.waiters.wake_all();
        }
    }

    /// The outstanding count.
    pub fn count(&self) -> usize {
        lock(&self.state).count
    }

    /// Parks until the count is zero.
    ///
    /// # Errors
    ///
    /// [`Elapsed`] inside an expired [`timeout`](crate::timeout).
    pub fn wait(&self) -> Result<(), Elapsed> {
        loop {
            let state = lock(&self.state);
            if state.count == 0 {
                return Ok(());
            }
            if wait_in(Primitive::WaitGroup, &self.state, state, |s| &mut s.waiters) == Woken::TimedOut {
                return Err(Elapsed);
            }
        }
    }
}

impl fmt::Debug for WaitGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitGroup").field("count", &self.count()).finish_non_exhaustive()
    }
}
