//! `Mutex`: mutual exclusion whose waiters are parked fibers.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex as StdMutex, MutexGuard as StdGuard};

use super::poison::IgnorePoison;
use super::semaphore::{Permit, Semaphore};
use crate::runtime::scheduler::Primitive;
use crate::Elapsed;

/// A mutex that parks the waiting fiber, not the thread. Built from a one-permit
/// [`Semaphore`] around a `std` mutex that is therefore never contended. A panic
/// while locked does not poison it.
///
/// # Examples
///
/// ```
/// use std::rc::Rc;
/// use neverblock::sync::Mutex;
///
/// let total = neverblock::run(|| {
///     let counter = Rc::new(Mutex::new(0));
///     let workers: Vec<_> = (0..10)
///         .map(|_| {
///             let counter = counter.clone();
///             neverblock::spawn(move || {
///                 let mut n = counter.lock().unwrap();
///                 neverblock::yield_now(); // held across a switch
///                 *n += 1;
///             })
///         })
///         .collect();
///     workers.into_iter().for_each(|w| w.join().unwrap());
///     let n = *counter.lock().unwrap();
///     n
/// });
/// assert_eq!(total, 10);
/// ```
pub struct Mutex<T> {
    gate: Semaphore,
    value: StdMutex<T>,
}

/// Access to a [`Mutex`]'s value; dropping it unlocks.
pub struct MutexGuard<'a, T> {
    value: StdGuard<'a, T>,
    _permit: Permit<'a>,
}

impl<T> Mutex<T> {
    /// A mutex holding `value`.
    pub fn new(value: T) -> Mutex<T> {
        Mutex { gate: Semaphore::named(1, Primitive::Mutex), value: StdMutex::new(value) }
    }

    /// Locks, parking the fiber while another holds the lock.
    ///
    /// # Errors
    ///
    /// [`Elapsed`] inside an expired [`timeout`](crate::timeout).
    pub fn lock(&self) -> Result<MutexGuard<'_, T>, Elapsed> {
        let permit = self.gate.acquire()?;
        let value = self.value.lock().ignore_poison();
        Ok(MutexGuard { value, _permit: permit })
    }

    /// Locks if nobody holds the lock now.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let permit = self.gate.try_acquire()?;
        let value = self.value.lock().ignore_poison();
        Some(MutexGuard { value, _permit: permit })
    }

    /// The value, when the mutex is no longer shared.
    pub fn into_inner(self) -> T {
        self.value.into_inner().ignore_poison()
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mutex").field("locked", &(self.gate.available() == 0)).finish_non_exhaustive()
    }
}

impl<T: fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}
