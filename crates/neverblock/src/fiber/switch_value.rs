//! The value a switch carries: how a value travels with control from one fiber
//! to another.
//!
//! Values travel without boxing: the sender leaves the value in an `Option<T>`
//! on its own stack, posts its address and type in the thread's `State`, and
//! switches; the receiver checks the type and takes the value. The sender's
//! stack stays untouched until the sender runs again, which is after the
//! receiver has taken the value: the first thing any fiber does on waking is
//! [`receive`]. The scheduler's switch posts no value, only [`NOTHING`] (one
//! store), which its receiver takes as `()`.

use std::any::{type_name, TypeId};
use std::cell::RefCell;
use std::rc::Rc;

use super::error::{FiberError, TypeMismatch};
use super::state::State;

thread_local! {
    /// The error a switch carries instead of a value (rare, so kept off `State`).
    static ERROR: RefCell<Option<FiberError>> = const { RefCell::new(None) };
}

/// The type of the value a posted slot holds.
#[derive(Clone, Copy)]
pub(super) struct ValueType {
    type_id: TypeId,
    type_name: fn() -> &'static str,
    /// Drops the value in the slot where it lies (when the receiver refuses its type).
    discard: unsafe fn(*mut ()),
}

/// The type of `()`, what a [`NOTHING`] slot is taken as.
pub(super) const UNIT: &ValueType =
    &ValueType { type_id: TypeId::of::<()>(), type_name: type_name::<()>, discard: discard::<()> };

impl ValueType {
    /// The type of `T`: one static per type, so posting a value stores one pointer.
    pub(super) fn of<T: 'static>() -> &'static ValueType {
        const { &ValueType { type_id: TypeId::of::<T>(), type_name: type_name::<T>, discard: discard::<T> } }
    }
}

/// A posted slot that holds no value: the scheduler's switch, received as `()`.
pub(super) const NOTHING: *mut () = std::ptr::dangling_mut();

/// Drops the `Option<T>` at `slot` in place, leaving `None`.
///
/// # Safety
///
/// `slot` points to a live `Option<T>` nobody else is using.
unsafe fn discard<T>(slot: *mut ()) {
    // SAFETY: guaranteed by the caller.
    drop(unsafe { (*slot.cast::<Option<T>>()).take() });
}

#[inline(always)]
pub(super) fn post_value<T: 'static>(st: &State, slot: &mut Option<T>) {
    st.value_slot.set((slot as *mut Option<T>).cast());
    st.value_type.set(ValueType::of::<T>());
}

pub(super) fn post_error(st: &State, error: FiberError) {
    ERROR.with(|e| *e.borrow_mut() = Some(error));
    st.value_slot.set(std::ptr::null_mut());
}

/// Takes what the switch that woke the calling fiber delivered to it, then lets go
/// of the fiber that switched here and reaps a finished one (also if dropping a
/// refused value panics).
#[inline(always)]
pub(super) fn receive<R: 'static>(st: &State) -> Result<R, FiberError> {
    let _release = ReleaseSender(st);
    let slot = st.value_slot.get();
    if st.with_current(|me| me.killed.get()) {
        drop_unreceived(st, slot);
        super::switch::kill_unwind();
    }
    if slot.is_null() {
        return Err(ERROR.with(|e| e.borrow_mut().take()).expect("a switch that carries an error has it stored"));
    }
    if slot == NOTHING {
        return unit::<R>().ok_or_else(|| mismatch::<R>(UNIT));
    }
    let sent = st.value_type.get();
    if sent.type_id != TypeId::of::<R>() {
        // SAFETY: `slot` is an untouched `Option` of the posted type, which `discard`
        // was made for (the sender is suspended, as below). Dropped here, the sender's
        // frame may be abandoned.
        unsafe { (sent.discard)(slot) };
        return Err(mismatch::<R>(sent));
    }
    // SAFETY: `slot` is the address of an `Option<R>` (the type ids match) in the
    // sender's frame. The sender is suspended inside `switch` or `finish` and touches
    // the slot again only after it runs again, which needs a switch by a fiber that is
    // running, which can only be after this returns; `_release`, which may unwind or
    // free the sender, runs after this too.
    let value = unsafe { (*slot.cast::<Option<R>>()).take() };
    Ok(value.expect("a posted value is taken once"))
}

/// Drops what a switch delivered without taking it: its error, or the value in
/// the sender's slot.
#[cold]
fn drop_unreceived(st: &State, slot: *mut ()) {
    if slot.is_null() {
        drop(ERROR.with(|e| e.borrow_mut().take()));
    } else if slot != NOTHING {
        // SAFETY: `slot` is an untouched `Option` of the posted type in the suspended
        // sender's frame, as in `receive`.
        unsafe { (st.value_type.get().discard)(slot) };
    }
}

/// `()` as an `R`, when `R` is `()` (what a [`NOTHING`] slot delivers).
#[inline(always)]
fn unit<R: 'static>() -> Option<R> {
    let mut unit = Some(());
    (&mut unit as &mut dyn std::any::Any).downcast_mut::<Option<R>>().and_then(Option::take)
}

#[cold]
fn mismatch<R>(found: &ValueType) -> FiberError {
    FiberError::TypeMismatch(Box::new(TypeMismatch { expected: type_name::<R>(), found: (found.type_name)() }))
}

/// Lets go of the fiber that switched here (`handed_off`) and reaps a finished
/// one, once the value it delivered is taken.
struct ReleaseSender<'a>(&'a State);

impl Drop for ReleaseSender<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        let st = self.0;
        let left = st.handed_off.replace(std::ptr::null());
        if !left.is_null() {
            // SAFETY: a non-null `handed_off` is a strong count from `hand_over`, given
            // back once, here, on the stack of the fiber it switched to.
            drop(unsafe { Rc::from_raw(left) });
        }
        if !st.dead.get().is_null() {
            reap(st);
        }
    }
}

/// Gives a fiber that finished its stack back to the pool, now that its result is
/// taken and it has switched away for good.
#[cold]
fn reap(st: &State) {
    // SAFETY: a non-null `dead` came from `Rc::into_raw` in `finish`; taking it here
    // gives that strong count back exactly once.
    let dead = unsafe { Rc::from_raw(st.dead.replace(std::ptr::null())) };
    st.with_current(|me| dead.context.retire(&me.context));
    drop(dead.stack.take());
}
