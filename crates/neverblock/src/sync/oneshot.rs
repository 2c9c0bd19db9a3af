//! One value, once: a `OneshotSender` and the `OneshotReceiver` that waits for it.

use std::fmt;
use std::sync::Arc;

use super::{lock, wait_in, RecvError, StateLock};
use crate::runtime::scheduler::{Primitive, Woken};
use crate::runtime::waiter::WaitList;

/// Makes a channel for exactly one value.
///
/// # Examples
///
/// ```
/// neverblock::run(|| {
///     let (tx, rx) = neverblock::sync::oneshot();
///     neverblock::spawn(move || tx.send(42));
///     assert_eq!(rx.recv(), Ok(42));
/// });
/// ```
pub fn oneshot<T>() -> (OneshotSender<T>, OneshotReceiver<T>) {
    let shared =
        Arc::new(StateLock::new(State { value: None, sender: true, receiver: true, waiters: WaitList::default() }));
    (OneshotSender { shared: shared.clone() }, OneshotReceiver { shared })
}

struct State<T> {
    value: Option<T>,
    sender: bool,
    /// The receiver is alive: a value sent now can still be received.
    receiver: bool,
    waiters: WaitList,
}

/// Sends the one value.
pub struct OneshotSender<T> {
    shared: Arc<StateLock<State<T>>>,
}

/// Waits for the one value.
pub struct OneshotReceiver<T> {
    shared: Arc<StateLock<State<T>>>,
}

impl<T> OneshotSender<T> {
    /// Delivers `value`.
    ///
    /// # Errors
    ///
    /// Gives `value` back when the receiver is gone, so a value that must not be
    /// lost (a pooled connection handed to a waiter that gave up) can go elsewhere.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, rx) = neverblock::sync::oneshot();
    /// drop(rx);
    /// assert_eq!(tx.send(7), Err(7));
    /// ```
    pub fn send(self, value: T) -> Result<(), T> {
        let mut state = lock(&self.shared);
        if !state.receiver {
            return Err(value);
        }
        state.value = Some(value);
        state.waiters.wake_all();
        Ok(())
    }
}

impl<T> Drop for OneshotSender<T> {
    fn drop(&mut self) {
        let mut state = lock(&self.shared);
        state.sender = false;
        state.waiters.wake_all();
    }
}

impl<T> Drop for OneshotReceiver<T> {
    fn drop(&mut self) {
        lock(&self.shared).receiver = false;
    }
}

impl<T> OneshotReceiver<T> {
    /// Parks until the value arrives.
    ///
    /// # Errors
    ///
    /// [`RecvError::Disconnected`] if the sender was dropped without sending;
    /// [`RecvError::TimedOut`] inside an expired [`timeout`](crate::timeout).
    pub fn recv(self) -> Result<T, RecvError> {
        loop {
            let mut state = lock(&self.shared);
            if let Some(value) = state.value.take() {
                return Ok(value);
            }
            if !state.sender {
                return Err(RecvError::Disconnected);
            }
            if wait_in(Primitive::Oneshot, &self.shared, state, |s| &mut s.waiters) == Woken::TimedOut {
                return Err(RecvError::TimedOut);
            }
        }
    }
}

impl<T> fmt::Debug for OneshotSender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OneshotSender")
    }
}

impl<T> fmt::Debug for OneshotReceiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OneshotReceiver")
    }
}
