//! Ignoring lock poisoning, in one place.
//!
//! A std lock is poisoned when a thread panics while holding it. Every std lock
//! in this crate guards state that each critical section leaves consistent at
//! every step (a queue, a slot, a user's value handed out whole), and a panic
//! must stay in the fiber or job that raised it, so a poisoned lock is used as
//! it is.

use std::sync::{LockResult, PoisonError};

/// The value of a [`LockResult`], poisoned or not.
pub(crate) trait IgnorePoison<T> {
    /// The guard (or value) whether or not a panic poisoned the lock.
    fn ignore_poison(self) -> T;
}

impl<T> IgnorePoison<T> for LockResult<T> {
    fn ignore_poison(self) -> T {
        self.unwrap_or_else(PoisonError::into_inner)
    }
}
