//! UNSAFE (walks resume links): Ruby's `Fiber#raise` and `Fiber#kill`, an error
//! or an unwind delivered at the switch a suspended fiber waits in, with current
//! MRI's rules for which fibers they reach (`kill` since 3.3; `raise` into the
//! running fiber or a resuming one since 3.4, which refused both before).
//!
//! - `raise` into the running fiber returns the error at once (Ruby raises it
//!   there); into a fiber that is resuming others, it goes to the last of them;
//!   a yielding fiber is resumed with it and a transferring one transferred to;
//!   a fiber that never ran, or has finished, is refused.
//! - `kill` of a fiber that never ran ends it unrun; of a finished one does
//!   nothing; of the running one unwinds it at once; of a suspended one switches
//!   into it so it unwinds there. It kills that fiber and no other (MRI's
//!   `rb_fiber_m_kill`: the fiber is marked killed, then `fiber_raise(fiber, nil)`
//!   reaches it). A fiber resuming others cannot unwind until control comes back
//!   to it, so, as `raise` does, the kill goes to the last fiber of its chain,
//!   which gets [`FiberError::Raised`] with MRI's message for raising nothing
//!   ("unhandled exception"); that fiber may handle it like any raise, and the
//!   killed one unwinds as soon as control returns to it (when the chain below it
//!   yields or ends). A killed fiber runs its destructors, may not switch while it
//!   does, and finishes as [`FiberError::Killed`]. A second kill does nothing and
//!   returns `false`.
//!
//! The runtime cancels a task the same way: it marks the task's fibers killed
//! ([`mark_killed_upward`]) and continues it, so it unwinds from its park.

use std::any::Any;
use std::rc::Rc;

use super::error::{FiberError, PanicPayload};
use super::rules;
use super::state::{rc_from_borrowed, with_state};
use super::switch::{hand_over, kill_unwind, link_resume, refuse_while_unwinding, FiberInner, Status};
use super::switch_value::{post_error, receive};
use super::Fiber;

impl<T: 'static> Fiber<T> {
    /// Ruby's `fiber.raise(error)`: the switch this fiber is suspended in (its
    /// `yield_now`, `transfer` or `resume`) returns [`FiberError::Raised`] with
    /// `error`, and it runs on as if resumed (it yielded) or transferred to (it
    /// transferred) by the caller, who gets back what it yields or returns. A fiber
    /// resuming others passes the error to the last of them. Raised into the
    /// running fiber, the error comes back at once.
    ///
    /// # Errors
    ///
    /// [`FiberError::RaiseUnborn`] for a fiber never run, [`FiberError::Terminated`]
    /// for a finished one, [`FiberError::Unwinding`] from a dropped or killed
    /// fiber; then nothing switches. Otherwise what the fiber gives back: a
    /// [`FiberError::Panicked`] with `error` as payload if it did not handle it and
    /// ended with [`FiberError::resume_unwind`].
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::{self, Fiber, FiberError};
    ///
    /// let worker = Fiber::new(|mut n: u32| loop {
    ///     match fiber::yield_now(n) {
    ///         Ok(next) => n = next,
    ///         Err(FiberError::Raised(e)) => return 1000 + e.message().map_or(0, |m| m.len() as u32),
    ///         Err(other) => other.resume_unwind(),
    ///     }
    /// })
    /// .unwrap();
    /// assert_eq!(worker.resume(1).unwrap(), 1);
    /// assert_eq!(worker.raise("abc").unwrap(), 1003, "the worker handled the error and returned");
    /// assert!(matches!(worker.raise("again"), Err(FiberError::Terminated)));
    /// ```
    pub fn raise<E: Any + Send>(&self, error: E) -> Result<T, FiberError> {
        raise(&self.inner, Box::new(error))
    }

    /// Ruby's `fiber.kill`: ends this fiber, and no other, from where it is
    /// suspended, running every destructor on its stack (not `catch_unwind`
    /// handlers' bodies: code that catches panics must pass on a
    /// [`runtime::is_cancellation`] payload), and returns once control comes back
    /// to the caller. Returns `false` if the fiber was killed already, `true`
    /// otherwise. Killing the running fiber unwinds it at once (the call does not
    /// return).
    ///
    /// Whoever the fiber would have returned to gets [`FiberError::Killed`]: the
    /// caller here, when the fiber was yielding.
    ///
    /// A fiber suspended inside a `resume` of another can only unwind once that
    /// `resume` returns. As MRI does, the kill then goes where [`raise`](Fiber::raise)
    /// would: the last fiber of the chain it is resuming gets [`FiberError::Raised`]
    /// with the message "unhandled exception" (MRI raises `nil` there, which Ruby
    /// turns into a `RuntimeError` of that message); when control comes back to
    /// the killed fiber, it unwinds.
    ///
    /// [`runtime::is_cancellation`]: crate::runtime::is_cancellation
    ///
    /// # Errors
    ///
    /// [`FiberError::KillRoot`] for a thread's root fiber; [`FiberError::Unwinding`]
    /// from a dropped or killed fiber; [`FiberError::Raised`] when the fiber at the
    /// end of the chain the killed one resumes is the caller; what a fiber that
    /// later transfers to the caller sends, if it is not `()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::cell::Cell;
    /// use std::rc::Rc;
    /// use neverblock::fiber::{self, Fiber};
    ///
    /// struct Noted(Rc<Cell<bool>>);
    /// impl Drop for Noted {
    ///     fn drop(&mut self) {
    ///         self.0.set(true);
    ///     }
    /// }
    ///
    /// let cleaned = Rc::new(Cell::new(false));
    /// let held = Noted(cleaned.clone());
    /// let f = Fiber::new(move |_: ()| {
    ///     let _held = held;
    ///     loop {
    ///         fiber::yield_now(()).unwrap();
    ///     }
    /// })
    /// .unwrap();
    /// f.resume(()).unwrap();
    /// assert!(f.kill().unwrap());
    /// assert!(cleaned.get(), "the fiber's destructors ran");
    /// assert!(!f.is_alive());
    /// assert!(!f.kill().unwrap(), "killed already");
    /// ```
    pub fn kill(&self) -> Result<bool, FiberError> {
        kill(&self.inner)
    }
}

/// `fiber.raise(error)` (see [`Fiber::raise`]).
fn raise<T: 'static>(target: &Rc<FiberInner>, error: Box<dyn Any + Send>) -> Result<T, FiberError> {
    with_state(|st| {
        refuse_while_unwinding(st)?;
        let target = end_of_resumes(target);
        let view = target.view_in(st);
        if view.current {
            return Err(FiberError::Raised(PanicPayload::new(error)));
        }
        if view.created {
            return Err(FiberError::RaiseUnborn);
        }
        if view.terminated {
            return Err(FiberError::Terminated);
        }
        if view.yielding {
            rules::check_resume(view)?;
            link_resume(st, &target);
        }
        post_error(st, FiberError::Raised(PanicPayload::new(error)));
        hand_over(st, target);
        receive(st)
    })
}

/// `fiber.kill` (see [`Fiber::kill`]).
fn kill(target: &Rc<FiberInner>) -> Result<bool, FiberError> {
    with_state(|st| {
        if target.killed.get() {
            return Ok(false);
        }
        if target.id() == 0 {
            return Err(FiberError::KillRoot);
        }
        refuse_while_unwinding(st)?;
        target.killed.set(true);
        match target.status.get() {
            Status::Created => {
                target.terminate_unborn();
                return Ok(true);
            }
            Status::Terminated => return Ok(true),
            Status::Started => {}
        }
        if std::ptr::eq(Rc::as_ptr(target), st.current_ptr()) {
            kill_unwind();
        }
        // A killed fiber unwinds as soon as it is switched to, whatever it is sent; the last
        // of a chain it resumes gets what MRI's `raise nil` gives there.
        match raise::<()>(target, Box::new(UNHANDLED)) {
            Ok(()) | Err(FiberError::Killed) => Ok(true),
            Err(e) => Err(e),
        }
    })
}

/// The message of the error a kill raises in the last fiber of the chain a killed fiber resumes:
/// MRI raises `nil` there, which Ruby turns into a `RuntimeError` of this message.
const UNHANDLED: &str = "unhandled exception";

/// Marks `fiber` killed, with every fiber up its chain of resumers (the ones that
/// resumed it, and resumed those, up to one that was not resumed), without
/// switching: when each is next switched to, it unwinds. A task's cancellation.
pub(crate) fn mark_killed_upward(fiber: &Fiber<()>) {
    let mut fiber = fiber.inner.clone();
    loop {
        fiber.killed.set(true);
        let prev = fiber.prev.take();
        fiber.prev.set(prev.clone());
        match prev {
            Some(p) => fiber = p,
            None => return,
        }
    }
}

/// Kills the running fiber and the fibers up its chain of resumers, and unwinds
/// it now: a task cancelled while it runs, at its next park.
pub(crate) fn kill_running() -> ! {
    mark_killed_upward(&Fiber::current());
    kill_unwind()
}

/// Lets the running fiber switch again after it caught its own kill's unwind:
/// a worker fiber that ran a cancelled task, going on to the next one.
pub(crate) fn clear_killed() {
    super::switch::with_current(|me| me.killed.set(false));
}

/// The fiber `target` resumed, if it is suspended resuming one.
fn next_resumed(target: &FiberInner) -> Option<Rc<FiberInner>> {
    let next = target.resuming.get();
    // SAFETY: a non-null `resuming` is alive by its invariant (the resumer's frame holds
    // a handle to it until the link is cleared), and every `FiberInner` is allocated by an `Rc`.
    (!next.is_null()).then(|| unsafe { rc_from_borrowed(next) })
}

/// The last fiber of the chain `target` is resuming: `target` itself if it resumes none.
fn end_of_resumes(target: &Rc<FiberInner>) -> Rc<FiberInner> {
    let mut fiber = target.clone();
    while let Some(next) = next_resumed(&fiber) {
        fiber = next;
    }
    fiber
}
