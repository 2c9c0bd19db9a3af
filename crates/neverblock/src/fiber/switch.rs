//! The switch: how control passes from one fiber to another, under Ruby's rules.
//!
//! Every switch goes straight from the running fiber to its target through
//! [`context::switch`](super::context::switch): Ruby's `resume`, `yield` and
//! `transfer`, and the scheduler's own switch alike; the value travels as the
//! thread's posted value (`switch_value.rs`). The fiber that runs is owned by the thread's
//! `State` (`state.rs`: one strong count, handed over with control); a suspended
//! fiber is owned by its handles and by the links of other fibers, and when the
//! last one goes its stack is unwound (see `Drop for FiberInner`).

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;

use super::context::{self, Context};
use super::error::{FiberError, PanicPayload};
use super::local::Inherited;
use super::rules::View;
use super::stack::PooledStack;
use super::state::{rc_from_borrowed, with_state, State, STATE};
use super::switch_value::{post_error, post_value, receive, NOTHING};

/// The panic payload that unwinds a dropped fiber's stack; the fiber's own root
/// catches it, and the fiber then switches back to the one that dropped it.
struct DropUnwind;

/// Whether `payload` is the unwind of a dropped fiber.
pub(crate) fn is_drop_unwind(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<DropUnwind>()
}

/// The panic payload that unwinds a killed fiber (Ruby's `Fiber#kill`, a cancelled
/// task) from the switch it is suspended in: every destructor on its stack runs,
/// its own root catches it, and it finishes as [`FiberError::Killed`].
pub(crate) struct KillUnwind;

/// Whether `payload` is the unwind of a killed fiber.
pub(crate) fn is_kill_unwind(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<KillUnwind>()
}

/// Unwinds the running fiber, which has been killed.
#[cold]
pub(super) fn kill_unwind() -> ! {
    panic::resume_unwind(Box::new(KillUnwind))
}

/// The untyped state of one fiber, shared by its handles and the links of other fibers.
pub(crate) struct FiberInner {
    id: u64,
    /// Where the fiber continues when switched to (and, before it starts, its body).
    /// Declared before `stack`: a body that never ran is dropped while its stack is there.
    pub(super) context: Context,
    /// The fiber's stack: `None` for the root, and once a finished fiber is reaped.
    ///
    /// # Invariant
    /// Taken for good only when the fiber will never run again: by `reap`, once it
    /// has finished and switched away for good, and by `Drop`. (`retire_stack` takes
    /// it only to mark it, and puts it back at once, running nothing in between.)
    pub(super) stack: Cell<Option<PooledStack>>,
    pub(super) status: Cell<Status>,
    /// The fiber that resumed this one and waits for it to yield or finish. Strong:
    /// the resumer may have no other owner while it waits.
    pub(super) prev: Cell<Option<Rc<FiberInner>>>,
    /// The fiber this one is suspended resuming, or null.
    ///
    /// # Invariant
    /// While set, the target is alive: this fiber is suspended inside `resume` on
    /// it, whose frame holds a handle to it, and it is cleared (by the target's
    /// yield or finish) before that call returns.
    pub(super) resuming: Cell<*const FiberInner>,
    /// Suspended in `yield_now`.
    pub(super) yielding: Cell<bool>,
    /// Killed (`Fiber#kill`, a task's cancellation): at its next switch-in, and at
    /// once if it runs, the fiber unwinds; it may not switch away but to finish.
    pub(super) killed: Cell<bool>,
    /// This fiber's fiber-local values.
    pub(crate) locals: super::local::Locals,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Status {
    Created,
    Started,
    Terminated,
}

/// Whether an `Option<Rc>` cell holds a value, read without moving it.
#[inline(always)]
fn is_set(cell: &Cell<Option<Rc<FiberInner>>>) -> bool {
    // SAFETY: a `Cell` is `!Sync` and no reference into its content is ever handed
    // out, so nothing writes it during this read.
    unsafe { (*cell.as_ptr()).is_some() }
}

impl FiberInner {
    pub(super) fn new(id: u64, context: Context, stack: Option<PooledStack>, status: Status) -> FiberInner {
        FiberInner {
            id,
            context,
            stack: Cell::new(stack),
            status: Cell::new(status),
            prev: Cell::new(None),
            resuming: Cell::new(std::ptr::null()),
            yielding: Cell::new(false),
            killed: Cell::new(false),
            locals: super::local::Locals::default(),
        }
    }

    /// Makes a fiber that will run `body` on `stack` when first switched to.
    pub(crate) fn spawn<T: 'static>(
        stack: PooledStack,
        inherited: Option<Inherited>,
        body: impl FnOnce(T) -> T + 'static,
    ) -> Rc<FiberInner> {
        let start = move || {
            with_state(|st| {
                let outcome = receive::<T>(st).and_then(|arg| {
                    panic::catch_unwind(AssertUnwindSafe(move || body(arg)))
                        .map_err(|payload| FiberError::Panicked(PanicPayload::new(payload)))
                });
                finish(st, outcome)
            })
        };
        // SAFETY: the stack is this fiber's alone (`PooledStack` is owned), and the `FiberInner`
        // keeps it until the fiber has switched away for good (invariant of `stack`) and
        // its context is dropped (declared first, so dropped first).
        let context = unsafe { Context::new(stack.limit(), stack.base(), start) };
        let (id, inherited) = with_state(|st| {
            st.root_ptr();
            let inherited = inherited.unwrap_or_else(|| st.with_current(|me| me.locals.inherited()));
            (st.next_id.replace(st.next_id.get() + 1), inherited)
        });
        let fiber = FiberInner::new(id, context, Some(stack), Status::Created);
        fiber.locals.extend(inherited);
        Rc::new(fiber)
    }

    /// Ends a fiber that never ran (a kill before its start): its body is dropped
    /// unrun, then its stack goes back to the pool.
    pub(super) fn terminate_unborn(&self) {
        debug_assert_eq!(self.status.get(), Status::Created);
        self.status.set(Status::Terminated);
        self.context.discard();
        drop(self.stack.take());
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// What the rules need to know of this fiber, seen from the running fiber.
    #[inline(always)]
    pub(super) fn view_in(&self, st: &State) -> View {
        View {
            created: self.status.get() == Status::Created,
            terminated: self.status.get() == Status::Terminated,
            current: std::ptr::eq(self, st.current_ptr()),
            resumed: is_set(&self.prev),
            resuming: !self.resuming.get().is_null(),
            yielding: self.yielding.get(),
        }
    }

    /// What the rules need to know of this fiber, seen from the running fiber.
    pub(crate) fn view(&self) -> View {
        with_state(|st| self.view_in(st))
    }
}

impl Drop for FiberInner {
    fn drop(&mut self) {
        if self.status.get() != Status::Started || self.id == 0 {
            return; // never ran (its body drops with `context`), finished, or the root
        }
        // Suspended (the running fiber is owned by `State`, so it is not this one):
        // switch into it with `cancelling` set, so it unwinds its stack (running every
        // destructor on it) and switches back here. Those destructors may not switch.
        let _ = STATE.try_with(|st| {
            let back = Context::running();
            let outer = st.cancel_return.replace(&back);
            st.unwinding.set(st.unwinding.get() + 1);
            st.cancelling.set(true);
            // SAFETY: this code runs on the running fiber's stack, and `self` is not that
            // fiber (the running one is owned by `State`): it is suspended in a switch of
            // its own, its stack in place. `back` lives in this frame until the fiber has
            // unwound and switched to it.
            unsafe { context::switch(&back, &self.context) };
            st.unwinding.set(st.unwinding.get() - 1);
            st.cancel_return.set(outer);
        });
    }
}

/// Marks `fiber`'s stack to give its pages back to the kernel once the fiber is gone.
pub(crate) fn retire_stack(fiber: &FiberInner) {
    let mut stack = fiber.stack.take();
    if let Some(stack) = &mut stack {
        stack.retire();
    }
    fiber.stack.set(stack);
}

/// Whether a fiber that finished now, not resumed by any, would hand control to `fiber` (the end
/// of the root's chain of resumes: the root itself unless it resumed a fiber that runs on).
pub(crate) fn finishes_into(fiber: &FiberInner) -> bool {
    with_state(|st| std::ptr::eq(Rc::as_ptr(&end_of_root_chain(st)), fiber))
}

/// The running fiber's usable stack, its low end and its base; `None` on a thread's own stack.
pub(crate) fn current_stack_bounds() -> Option<(usize, usize)> {
    with_current(|me| {
        let stack = me.stack.take();
        let bounds = stack.as_ref().map(|s| (s.limit(), s.base()));
        me.stack.set(stack);
        bounds
    })
}

/// Runs `f` on the running fiber (the root when no fiber runs).
pub(crate) fn with_current<R>(f: impl FnOnce(&FiberInner) -> R) -> R {
    with_state(|st| {
        st.root_ptr();
        st.with_current(f)
    })
}

/// The running fiber (the root when no fiber runs).
pub(crate) fn current() -> Rc<FiberInner> {
    with_state(|st| {
        st.root_ptr();
        st.current()
    })
}

/// Whether a dropped fiber is unwinding on this thread now (code that catches
/// panics on a fiber's stack must let that one through).
pub(crate) fn unwinding_a_dropped_fiber() -> bool {
    with_state(State::unwinding)
}

/// Whether `fiber` is the running fiber.
pub(crate) fn is_current(fiber: &FiberInner) -> bool {
    with_state(|st| std::ptr::eq(fiber, st.current.get()))
}

/// Ruby's `fiber.resume(value)`.
#[inline(always)]
pub(crate) fn resume<T: 'static>(target: &Rc<FiberInner>, value: T) -> Result<T, FiberError> {
    with_state(|st| {
        refuse_while_unwinding(st)?;
        super::rules::check_resume(target.view_in(st))?;
        link_resume(st, target);
        switch(st, target.clone(), value)
    })
}

/// Links `target`, which yielded (or never ran), under the running fiber: what `resume` does
/// before it switches, and `raise` into a yielding fiber.
#[inline(always)]
pub(super) fn link_resume(st: &State, target: &Rc<FiberInner>) {
    let me = st.current();
    me.resuming.set(Rc::as_ptr(target));
    target.prev.set(Some(me));
    target.yielding.set(false);
}

/// Ruby's `fiber.transfer(value)`.
#[inline(always)]
pub(crate) fn transfer<T: 'static>(target: &Rc<FiberInner>, value: T) -> Result<T, FiberError> {
    with_state(|st| {
        refuse_while_unwinding(st)?;
        let view = target.view_in(st);
        super::rules::check_transfer(view)?;
        if view.current {
            return Ok(value);
        }
        switch(st, target.clone(), value)
    })
}

/// The scheduler's switch: hands control to `target`, a fiber waiting in a
/// switch of its own (a parked task's, or a worker's between tasks), without
/// Ruby's rules or a value. Returns when control comes back.
///
/// # Errors
///
/// Refuses, as `transfer` would, a fiber that user code has since moved on with
/// Ruby's switches so that it now waits for a fiber it resumed, waits in a
/// yield, or has finished: continuing it would break those links, or run on a
/// stack that is gone.
#[inline(always)]
pub(crate) fn switch_to(target: Rc<FiberInner>) -> Result<(), FiberError> {
    with_state(|st| {
        refuse_while_unwinding(st)?;
        if std::ptr::eq(Rc::as_ptr(&target), st.current_ptr()) {
            return Ok(());
        }
        // The three states the transfer rules refuse, tested at once on this hot path;
        // the rules themselves say which error it is.
        if !target.resuming.get().is_null() || target.yielding.get() || target.status.get() == Status::Terminated {
            super::rules::check_transfer(target.view_in(st))?;
        }
        st.value_slot.set(NOTHING);
        hand_over(st, target);
        receive(st)
    })
}

/// Ruby's `Fiber.yield(value)`.
#[inline(always)]
pub(crate) fn yield_now<T: 'static>(value: T) -> Result<T, FiberError> {
    with_state(|st| {
        if st.current.get().is_null() {
            // No fiber was ever made on this thread: this is the root, and nothing unwinds.
            return Err(FiberError::YieldNotResumed);
        }
        refuse_while_unwinding(st)?;
        let resumer = st.with_current(|me| {
            super::rules::check_yield(me.view_in(st))?;
            let prev = me.prev.take().expect("the rules passed, so the fiber has a resumer");
            prev.resuming.set(std::ptr::null());
            me.yielding.set(true);
            Ok(prev)
        })?;
        switch(st, resumer, value)
    })
}

#[inline(always)]
pub(super) fn refuse_while_unwinding(st: &State) -> Result<(), FiberError> {
    if st.unwinding() || st.with_current(|me| me.killed.get()) {
        Err(FiberError::Unwinding)
    } else {
        Ok(())
    }
}

/// Hands control and `value` to `target`, and returns the value (or error) that
/// arrives when control comes back to the calling fiber.
#[inline(always)]
fn switch<T: 'static, R: 'static>(st: &State, target: Rc<FiberInner>, value: T) -> Result<R, FiberError> {
    let mut slot = Some(value);
    post_value(st, &mut slot);
    hand_over(st, target);
    receive(st)
}

/// Makes `target` the running fiber (`State` takes its strong count) and returns
/// the one that ran, whose count the caller now holds.
#[inline(always)]
fn make_current(st: &State, target: Rc<FiberInner>) -> *const FiberInner {
    if target.status.get() != Status::Started {
        assert!(target.status.get() == Status::Created, "a finished fiber is never switched to");
        target.status.set(Status::Started);
        target.context.started();
    }
    st.current.replace(Rc::into_raw(target))
}

/// Gives control to `target`; returns when some fiber switches back. The switched-to
/// fiber lets go of this one's strong count once it has taken its value (`receive`).
#[inline(always)]
pub(super) fn hand_over(st: &State, target: Rc<FiberInner>) {
    let me = make_current(st, target);
    st.handed_off.set(me);
    // SAFETY: `me` ran until now (this is its stack) and is alive: the strong count in
    // `handed_off` is let go only by the fiber switched to, after this switch. The new
    // current fiber is suspended in a switch of its own (or fresh), with its stack.
    unsafe { context::switch(&(*me).context, &(*st.current.get()).context) };
    if st.cancelling.get() {
        st.cancelling.set(false);
        cancel();
    }
}

/// Unwinds the stack of a fiber being dropped, up to its own root.
#[cold]
fn cancel() -> ! {
    panic::resume_unwind(Box::new(DropUnwind))
}

/// Marks `me` finished and returns the fiber Ruby's rules hand control to: its
/// resumer, else the end of the root's chain of resumes (MRI's `return_fiber`).
fn terminate(st: &State, me: &FiberInner) -> Rc<FiberInner> {
    me.status.set(Status::Terminated);
    match me.prev.take() {
        Some(prev) => {
            prev.resuming.set(std::ptr::null());
            prev
        }
        None => end_of_root_chain(st),
    }
}

/// Ends the running fiber: posts its result and switches to where the rules say,
/// for good. A fiber that was being dropped (cancelled) switches back to the
/// `Drop` that cancelled it: nobody waits for its result.
fn finish<T: 'static>(st: &State, outcome: Result<T, FiberError>) -> ! {
    if st.unwinding() {
        if let Err(FiberError::Panicked(payload)) = &outcome {
            if !payload.is::<DropUnwind>() {
                log::error!("a dropped fiber panicked while unwinding; the panic is discarded");
            }
        }
        drop(outcome);
        let back = st.cancel_return.get();
        // SAFETY: a fiber unwinds only when `Drop for FiberInner` switched into it, setting
        // `cancel_return` to a context in its own frame, which waits there; nothing on
        // this stack is used again (the dropped fiber's `FiberInner` frees it once back).
        unsafe { context::switch_for_good(&*back) }
    }
    let next = st.with_current(|me| terminate(st, me));
    // Killed, it ends as killed, whatever its body did with the unwind.
    // (The outcome replaced is dropped here: this frame is never left.)
    let outcome = if st.with_current(|me| me.killed.get()) {
        drop(outcome);
        Err(FiberError::Killed)
    } else {
        outcome
    };
    let mut slot;
    match outcome {
        Ok(value) => {
            slot = Some(value);
            post_value(st, &mut slot);
        }
        Err(e) => post_error(st, e),
    }
    let me = make_current(st, next);
    st.dead.set(me);
    // SAFETY: as in `hand_over`; this fiber is in `dead` until the fiber switched to has
    // taken the value (the only thing on this stack still used) and reaped it.
    unsafe { context::switch(&(*me).context, &(*st.current.get()).context) };
    unreachable!("a finished fiber is reaped, never switched to")
}

/// Where a fiber that was not resumed returns when it finishes: the root, or the
/// last fiber of the chain the root is resuming.
fn end_of_root_chain(st: &State) -> Rc<FiberInner> {
    let mut fiber = st.root_ptr();
    loop {
        // SAFETY: `fiber` is the root (alive until the thread exits) or a fiber that a
        // live fiber is resuming, alive by the invariant of `resuming`.
        let next = unsafe { (*fiber).resuming.get() };
        if next.is_null() {
            // SAFETY: as above, and every `FiberInner` is allocated by an `Rc`.
            return unsafe { rc_from_borrowed(fiber) };
        }
        fiber = next;
    }
}
