//! `Semaphore`: at most n holders; the rest wait in line.

use std::fmt;
use std::sync::Arc;

use super::{lock, wait_in, StateLock};
use crate::runtime::scheduler::{Primitive, Woken};
use crate::runtime::waiter::WaitList;
use crate::Elapsed;

/// A counting semaphore whose waiters are parked fibers (or blocked threads).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use neverblock::sync::Semaphore;
///
/// let sem = Arc::new(Semaphore::new(2));
/// neverblock::run(move || {
///     let a = sem.acquire().unwrap();
///     let _b = sem.acquire().unwrap();
///     assert!(sem.try_acquire().is_none());
///     drop(a);
///     assert!(sem.try_acquire().is_some());
/// });
/// ```
pub struct Semaphore {
    state: StateLock<State>,
    /// What a fiber parked on it waits for, in a deadlock report.
    what: Primitive,
}

struct State {
    permits: usize,
    waiters: WaitList,
}

/// One permit; dropping it gives it back.
pub struct Permit<'a> {
    semaphore: &'a Semaphore,
}

impl Semaphore {
    /// A semaphore with `permits` permits.
    pub fn new(permits: usize) -> Semaphore {
        Semaphore::named(permits, Primitive::Semaphore)
    }

    /// A semaphore whose waiters wait on `what`, in a deadlock report.
    pub(crate) fn named(permits: usize, what: Primitive) -> Semaphore {
        Semaphore { state: StateLock::new(State { permits, waiters: WaitList::default() }), what }
    }

    /// Takes a permit, parking the fiber while none is free.
    ///
    /// # Errors
    ///
    /// [`Elapsed`] inside an expired [`timeout`](crate::timeout).
    pub fn acquire(&self) -> Result<Permit<'_>, Elapsed> {
        self.take(|| ())?;
        Ok(Permit { semaphore: self })
    }

    /// Like [`acquire`](Semaphore::acquire), holding what `note` returns while the fiber is parked.
    pub(crate) fn acquire_noting<N>(&self, note: impl Fn() -> N) -> Result<Permit<'_>, Elapsed> {
        self.take(note)?;
        Ok(Permit { semaphore: self })
    }

    /// Like [`acquire`](Semaphore::acquire), for a permit that holds the semaphore
    /// itself: it can be kept in a struct or moved to another fiber or thread.
    ///
    /// # Errors
    ///
    /// [`Elapsed`] inside an expired [`timeout`](crate::timeout).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use neverblock::sync::Semaphore;
    ///
    /// neverblock::run(|| {
    ///     let slots = Arc::new(Semaphore::new(1));
    ///     let held = slots.acquire_owned().unwrap();
    ///     assert_eq!(slots.available(), 0);
    ///     let other = neverblock::spawn(move || drop(held)); // given back by another fiber
    ///     other.join().unwrap();
    ///     assert_eq!(slots.available(), 1);
    /// });
    /// ```
    pub fn acquire_owned(self: &Arc<Self>) -> Result<OwnedPermit, Elapsed> {
        self.take(|| ())?;
        Ok(OwnedPermit { semaphore: Some(self.clone()) })
    }

    /// Adds `n` permits, waking as many waiters as can now take one.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::sync::Semaphore;
    ///
    /// let gate = Semaphore::new(0);
    /// gate.add_permits(2);
    /// assert_eq!(gate.available(), 2);
    /// ```
    pub fn add_permits(&self, n: usize) {
        let mut state = lock(&self.state);
        state.permits += n;
        let woken: Vec<_> = (0..n).map_while(|_| state.waiters.pop()).collect();
        drop(state);
        woken.into_iter().for_each(|w| w.wake());
    }

    /// Takes a permit (parking while none is free, holding what `note` returns meanwhile) without a
    /// guard to give it back.
    fn take<N>(&self, note: impl Fn() -> N) -> Result<(), Elapsed> {
        loop {
            let mut state = lock(&self.state);
            if state.permits > 0 && state.waiters.is_empty() {
                state.permits -= 1;
                return Ok(());
            }
            if state.permits > 0 {
                // Waiters are in line, but a permit is free: wake the first, then queue.
                if let Some(first) = state.waiters.pop() {
                    first.wake();
                }
            }
            let _noted = note();
            if wait_in(self.what, &self.state, state, |s| &mut s.waiters) == Woken::TimedOut {
                return Err(Elapsed);
            }
            let mut state = lock(&self.state);
            if state.permits > 0 {
                state.permits -= 1;
                return Ok(());
            }
        }
    }

    /// Takes a permit if one is free now.
    pub fn try_acquire(&self) -> Option<Permit<'_>> {
        let mut state = lock(&self.state);
        (state.permits > 0).then(|| {
            state.permits -= 1;
            Permit { semaphore: self }
        })
    }

    /// Permits free now.
    pub fn available(&self) -> usize {
        lock(&self.state).permits
    }

    fn release(&self) {
        let mut state = lock(&self.state);
        state.permits += 1;
        let next = state.waiters.pop();
        drop(state);
        if let Some(next) = next {
            next.wake();
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.semaphore.release();
    }
}

/// A permit that holds its semaphore ([`Semaphore::acquire_owned`]); dropping it
/// gives it back.
pub struct OwnedPermit {
    /// `None` once forgotten.
    semaphore: Option<Arc<Semaphore>>,
}

impl OwnedPermit {
    /// Keeps the permit taken for good: the semaphore has one permit fewer.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use neverblock::sync::Semaphore;
    ///
    /// let gate = Arc::new(Semaphore::new(1));
    /// gate.acquire_owned().unwrap().forget();
    /// assert_eq!(gate.available(), 0);
    /// ```
    pub fn forget(mut self) {
        self.semaphore = None;
    }
}

impl Drop for OwnedPermit {
    fn drop(&mut self) {
        if let Some(semaphore) = self.semaphore.take() {
            semaphore.release();
        }
    }
}

impl fmt::Debug for OwnedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnedPermit")
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore").field("available", &self.available()).finish_non_exhaustive()
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Permit")
    }
}
