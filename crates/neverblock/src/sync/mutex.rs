//! `Mutex`: mutual exclusion whose waiters are parked fibers.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex as StdMutex, MutexGuard as StdGuard};

use std::sync::atomic::Ordering;

use super::semaphore::{Permit, Semaphore};
use crate::poison::IgnorePoison;
use crate::runtime::scheduler::lock_waits::{self, Holder};
use crate::runtime::scheduler::Primitive;
use crate::Elapsed;

/// A mutex that parks the waiting fiber, not the thread. Built from a one-permit
/// [`Semaphore`] around a `std` mutex that is therefore never contended. A panic
/// while locked does not poison it.
///
/// A guard never leaves the thread that locked it, so a fiber that waits for a lock held on its
/// own thread (by its own task, or by a fiber that locked it and yielded) can be woken by nothing
/// but its own loop: when every task of that loop is parked so, the runtime reports the deadlock
/// (see [`run`](crate::run)) however many other threads the process has.
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
    /// Which loop's thread holds the lock (0: free, or held outside a runtime), for the deadlock
    /// check of a loop whose tasks wait on it.
    holder: Holder,
    value: StdMutex<T>,
}

/// Access to a [`Mutex`]'s value; dropping it unlocks.
pub struct MutexGuard<'a, T> {
    value: StdGuard<'a, T>,
    holder: &'a Holder,
    _permit: Permit<'a>,
}

impl<T> Mutex<T> {
    /// A mutex holding `value`.
    pub fn new(value: T) -> Mutex<T> {
        Mutex { gate: Semaphore::named(1, Primitive::Mutex), holder: Holder::default(), value: StdMutex::new(value) }
    }

    /// Locks, parking the fiber while another holds the lock.
    ///
    /// # Errors
    ///
    /// [`Elapsed`] inside an expired [`timeout`](crate::timeout).
    pub fn lock(&self) -> Result<MutexGuard<'_, T>, Elapsed> {
        let permit = self.gate.acquire_noting(|| lock_waits::note(&self.holder))?;
        Ok(self.guard(permit))
    }

    /// Locks if nobody holds the lock now.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let permit = self.gate.try_acquire()?;
        Some(self.guard(permit))
    }

    /// The guard of the lock `permit` took, which this thread now holds.
    fn guard<'a>(&'a self, permit: Permit<'a>) -> MutexGuard<'a, T> {
        let value = self.value.lock().ignore_poison();
        self.holder.store(lock_waits::holder_here(), Ordering::Relaxed);
        MutexGuard { value, holder: &self.holder, _permit: permit }
    }

    /// The value, when the mutex is no longer shared.
    pub fn into_inner(self) -> T {
        self.value.into_inner().ignore_poison()
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        // Before the permit goes (the fields drop after this): a holder on another thread may
        // take it next.
        self.holder.store(0, Ordering::Relaxed);
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
