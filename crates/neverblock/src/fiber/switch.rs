//! The switch: how control and a value pass from one fiber to another.
//!
//! Every switch goes straight from the running fiber to its target through
//! [`context::switch`](super::context::switch): Ruby's `resume`, `yield` and
//! `transfer`, and the scheduler's own switch alike. The fiber that runs is
//! owned by the thread's `State` (one strong count, handed over with control);
//! a suspended fiber is owned by its handles and by the links of other fibers,
//! and when the last one goes its stack is unwound (see `Drop for Core`).
//!
//! Values travel without boxing: the sender leaves the value in an `Option<T>`
//! on its own stack, posts its address and type (the thread's parcel), and
//! switches; the receiver checks the type and takes the value. The sender's
//! stack stays untouched until the sender runs again, which is after the
//! receiver has taken the value: the first thing any fiber does on waking is
//! [`receive`]. The scheduler's switch posts no value, only [`NOTHING`] (one
//! store), which its receiver takes as `()`.
//!
//! The thread's fiber state lives in `const`-initialised thread-locals without
//! destructors, so each access is one load from the thread pointer.

use std::any::{type_name, TypeId};
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;

use super::context::{self, Context};
use super::error::{FiberError, PanicPayload, TypeMismatch};
use super::local::Inherited;
use super::rules::View;
use super::stack::PooledStack;

/// The panic payload that unwinds a dropped fiber's stack; the fiber's own root
/// catches it, and the fiber then switches back to the one that dropped it.
struct DropUnwind;

/// The untyped state of one fiber, shared by its handles and the links of other fibers.
pub(crate) struct Core {
    id: u64,
    /// Where the fiber continues when switched to (and, before it starts, its body).
    /// Declared before `stack`: a body that never ran is dropped while its stack is there.
    context: Context,
    /// The fiber's stack: `None` for the root, and once a finished fiber is reaped.
    ///
    /// # Invariant
    /// Taken only when the fiber will never run again: by `reap`, once it has
    /// finished and switched away for good, and by `Drop`.
    stack: Cell<Option<PooledStack>>,
    status: Cell<Status>,
    /// The fiber that resumed this one and waits for it to yield or finish. Strong:
    /// the resumer may have no other owner while it waits.
    prev: Cell<Option<Rc<Core>>>,
    /// The fiber this one is suspended resuming, or null.
    ///
    /// # Invariant
    /// While set, the target is alive: this fiber is suspended inside `resume` on
    /// it, whose frame holds a handle to it, and it is cleared (by the target's
    /// yield or finish) before that call returns.
    resuming: Cell<*const Core>,
    /// Suspended in `yield_now`.
    yielding: Cell<bool>,
    /// This fiber's fiber-local values.
    pub(crate) locals: super::local::Locals,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Created,
    Started,
    Terminated,
}

/// The type of the value a parcel's slot holds.
#[derive(Clone, Copy)]
struct Kind {
    type_id: TypeId,
    type_name: fn() -> &'static str,
    /// Drops the value in the slot where it lies (when the receiver refuses its type).
    discard: unsafe fn(*mut ()),
}

/// The kind of `()`, what a [`NOTHING`] slot is taken as.
const UNIT: &Kind = &Kind { type_id: TypeId::of::<()>(), type_name: type_name::<()>, discard: discard::<()> };

impl Kind {
    /// The kind of `T`: one static per type, so posting a value stores one pointer.
    fn of<T: 'static>() -> &'static Kind {
        const { &Kind { type_id: TypeId::of::<T>(), type_name: type_name::<T>, discard: discard::<T> } }
    }
}

/// A parcel slot that holds no value: the scheduler's switch, received as `()`.
const NOTHING: *mut () = std::ptr::dangling_mut();

/// Drops the `Option<T>` at `slot` in place, leaving `None`.
///
/// # Safety
///
/// `slot` points to a live `Option<T>` nobody else is using.
unsafe fn discard<T>(slot: *mut ()) {
    // SAFETY: guaranteed by the caller.
    drop(unsafe { (*slot.cast::<Option<T>>()).take() });
}

/// The fiber state of one thread. `const`-initialised and without a destructor,
/// so its memory lives as long as the thread; each operation fetches it once.
struct State {
    /// The running fiber, from `Rc::into_raw`: `State` owns one strong count of it,
    /// handed to the next fiber's owner at each switch.
    ///
    /// # Invariant
    /// Null until the root is made, then always a live `Core`.
    current: Cell<*const Core>,
    /// The root fiber, from `Rc::into_raw`; freed by `RootOwner` when the thread exits.
    root: Cell<*const Core>,
    /// What the next fiber to wake finds waiting for it: an `Option<T>` in the
    /// sender's frame, of the type `parcel_kind` names; [`NOTHING`]; or, when null,
    /// the error stored in `ERROR`.
    parcel_slot: Cell<*mut ()>,
    parcel_kind: Cell<&'static Kind>,
    /// The strong count of the fiber that switched away last, from `Rc::into_raw`
    /// (or null): the fiber it switched to lets it go once it has taken its parcel,
    /// on its own stack, since dropping a suspended fiber's last handle unwinds it.
    handed_off: Cell<*const Core>,
    /// A fiber that finished and posted its result, waiting for the receiver to reap
    /// it; from `Rc::into_raw`, or null.
    dead: Cell<*const Core>,
    /// How many dropped fibers are unwinding right now (they may not switch).
    unwinding: Cell<usize>,
    /// Set by `Drop for Core` just before it switches into the fiber it drops.
    cancelling: Cell<bool>,
    /// Where a dropped fiber returns once it has unwound: a context on the stack of
    /// the `Drop for Core` that cancelled it, or null.
    cancel_return: Cell<*const Context>,
    next_id: Cell<u64>,
}

thread_local! {
    static STATE: State = const {
        State {
            current: Cell::new(std::ptr::null()),
            root: Cell::new(std::ptr::null()),
            parcel_slot: Cell::new(NOTHING),
            parcel_kind: Cell::new(UNIT),
            handed_off: Cell::new(std::ptr::null()),
            dead: Cell::new(std::ptr::null()),
            unwinding: Cell::new(0),
            cancelling: Cell::new(false),
            cancel_return: Cell::new(std::ptr::null()),
            next_id: Cell::new(1),
        }
    };
    /// The error of an error parcel (rare, so kept off `State`).
    static ERROR: RefCell<Option<FiberError>> = const { RefCell::new(None) };
    static ROOT_OWNER: RootOwner = const { RootOwner };
}

/// This thread's fiber state.
///
/// Not inlined on purpose: here, in the crate that defines `STATE`, the access is
/// one load from the thread pointer, whereas code inlined into other crates would
/// reach it through an indirect call.
#[inline(never)]
fn state() -> &'static State {
    // SAFETY: `STATE` is `const`-initialised and has no destructor, so its storage is
    // valid from thread start until the thread is gone, after every use of it. `State`
    // is `!Sync` (it holds `Cell`s), so the reference cannot leave this thread.
    STATE.with(|st| unsafe { &*(st as *const State) })
}

/// Runs `f` with this thread's fiber state.
#[inline(always)]
fn with_state<R>(f: impl FnOnce(&State) -> R) -> R {
    f(state())
}

/// Frees the root fiber when its thread exits.
struct RootOwner;

impl Drop for RootOwner {
    fn drop(&mut self) {
        let _ = STATE.try_with(|st| {
            let root = st.root.replace(std::ptr::null());
            if !root.is_null() {
                let current = st.current.replace(std::ptr::null());
                // SAFETY: `root` and `current` came from `Rc::into_raw` (`make_root`,
                // `hand_over`), and this is the one place that gives those counts back. The
                // thread is exiting on its own stack, so the root runs: `current == root`.
                unsafe {
                    drop(Rc::from_raw(current));
                    drop(Rc::from_raw(root));
                }
            }
        });
    }
}

impl State {
    /// The root fiber of this thread, made on first use.
    #[inline(always)]
    fn root_ptr(&self) -> *const Core {
        let root = self.root.get();
        if root.is_null() {
            self.make_root()
        } else {
            root
        }
    }

    #[cold]
    fn make_root(&self) -> *const Core {
        let root = Rc::new(Core::new(0, Context::running(), None, Status::Started));
        self.current.set(Rc::into_raw(root.clone()));
        let root = Rc::into_raw(root);
        self.root.set(root);
        ROOT_OWNER.with(|_| ());
        root
    }

    /// The running fiber, borrowed. Only after the root is made: every fiber
    /// operation starts from a `Fiber` (whose creation makes the root) or from
    /// [`current`] (which makes it); `yield_now` checks first.
    #[inline(always)]
    fn current_ptr(&self) -> *const Core {
        let current = self.current.get();
        debug_assert!(!current.is_null(), "the root fiber is made before any switch");
        current
    }

    /// Runs `f` on the running fiber.
    #[inline(always)]
    fn with_current<R>(&self, f: impl FnOnce(&Core) -> R) -> R {
        // SAFETY: by the invariant of `current`, the pointer is to a live `Core`, and it
        // stays live during `f`: `State` owns a strong count of it while it runs.
        f(unsafe { &*self.current_ptr() })
    }

    /// The running fiber as an owning handle.
    #[inline(always)]
    fn current(&self) -> Rc<Core> {
        // SAFETY: the pointer is a live `Core` (invariant of `current`) owned by an `Rc`,
        // so adding a strong count and making a new `Rc` of it is sound.
        unsafe { rc_from_borrowed(self.current_ptr()) }
    }

    #[inline(always)]
    fn unwinding(&self) -> bool {
        self.unwinding.get() > 0
    }
}

/// A new `Rc` for a `Core` that some `Rc` owns.
///
/// # Safety
///
/// `ptr` must point to a live `Core` allocated by an `Rc`.
#[inline(always)]
unsafe fn rc_from_borrowed(ptr: *const Core) -> Rc<Core> {
    // SAFETY: guaranteed by the caller.
    unsafe {
        Rc::increment_strong_count(ptr);
        Rc::from_raw(ptr)
    }
}

/// Whether an `Option<Rc>` cell holds a value, read without moving it.
#[inline(always)]
fn is_set(cell: &Cell<Option<Rc<Core>>>) -> bool {
    // SAFETY: a `Cell` is `!Sync` and no reference into its content is ever handed
    // out, so nothing writes it during this read.
    unsafe { (*cell.as_ptr()).is_some() }
}

impl Core {
    fn new(id: u64, context: Context, stack: Option<PooledStack>, status: Status) -> Core {
        Core {
            id,
            context,
            stack: Cell::new(stack),
            status: Cell::new(status),
            prev: Cell::new(None),
            resuming: Cell::new(std::ptr::null()),
            yielding: Cell::new(false),
            locals: super::local::Locals::default(),
        }
    }

    /// Makes a fiber that will run `body` on `stack` when first switched to.
    pub(crate) fn spawn<T: 'static>(
        stack: PooledStack,
        inherited: Option<Inherited>,
        body: impl FnOnce(T) -> T + 'static,
    ) -> Rc<Core> {
        let start = move || {
            with_state(|st| {
                let outcome = receive::<T>(st).and_then(|arg| {
                    panic::catch_unwind(AssertUnwindSafe(move || body(arg)))
                        .map_err(|payload| FiberError::Panicked(PanicPayload::new(payload)))
                });
                finish(st, outcome)
            })
        };
        // SAFETY: the stack is this fiber's alone (`PooledStack` is owned), and the core
        // keeps it until the fiber has switched away for good (invariant of `stack`) and
        // its context is dropped (declared first, so dropped first).
        let context = unsafe { Context::new(stack.limit(), stack.base(), start) };
        let (id, inherited) = with_state(|st| {
            st.root_ptr();
            let inherited = inherited.unwrap_or_else(|| st.with_current(|me| me.locals.inherited()));
            (st.next_id.replace(st.next_id.get() + 1), inherited)
        });
        let core = Core::new(id, context, Some(stack), Status::Created);
        core.locals.extend(inherited);
        Rc::new(core)
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// What the rules need to know of this fiber, seen from the running fiber.
    #[inline(always)]
    fn view_in(&self, st: &State) -> View {
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

impl Drop for Core {
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

/// Runs `f` on the running fiber (the root when no fiber runs).
pub(crate) fn with_current<R>(f: impl FnOnce(&Core) -> R) -> R {
    with_state(|st| {
        st.root_ptr();
        st.with_current(f)
    })
}

/// The running fiber (the root when no fiber runs).
pub(crate) fn current() -> Rc<Core> {
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

/// Whether `core` is the running fiber.
pub(crate) fn is_current(core: &Core) -> bool {
    with_state(|st| std::ptr::eq(core, st.current.get()))
}

/// Ruby's `fiber.resume(value)`.
#[inline(always)]
pub(crate) fn resume<T: 'static>(target: &Rc<Core>, value: T) -> Result<T, FiberError> {
    with_state(|st| {
        refuse_while_unwinding(st)?;
        super::rules::check_resume(target.view_in(st))?;
        let me = st.current();
        me.resuming.set(Rc::as_ptr(target));
        target.prev.set(Some(me));
        target.yielding.set(false);
        switch(st, target.clone(), value)
    })
}

/// Ruby's `fiber.transfer(value)`.
#[inline(always)]
pub(crate) fn transfer<T: 'static>(target: &Rc<Core>, value: T) -> Result<T, FiberError> {
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
pub(crate) fn switch_to(target: Rc<Core>) -> Result<(), FiberError> {
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
        st.parcel_slot.set(NOTHING);
        hand_over(st, target);
        receive(st)
    })
}

/// Ruby's `Fiber.yield(value)`.
#[inline(always)]
pub(crate) fn yield_now<T: 'static>(value: T) -> Result<T, FiberError> {
    with_state(|st| {
        refuse_while_unwinding(st)?;
        if st.current.get().is_null() {
            // No fiber was ever made on this thread: this is the root.
            return Err(FiberError::YieldNotResumed);
        }
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
fn refuse_while_unwinding(st: &State) -> Result<(), FiberError> {
    if st.unwinding() {
        Err(FiberError::Unwinding)
    } else {
        Ok(())
    }
}

/// Hands control and `value` to `target`, and returns the value (or error) that
/// arrives when control comes back to the calling fiber.
#[inline(always)]
fn switch<T: 'static, R: 'static>(st: &State, target: Rc<Core>, value: T) -> Result<R, FiberError> {
    let mut slot = Some(value);
    post_value(st, &mut slot);
    hand_over(st, target);
    receive(st)
}

#[inline(always)]
fn post_value<T: 'static>(st: &State, slot: &mut Option<T>) {
    st.parcel_slot.set((slot as *mut Option<T>).cast());
    st.parcel_kind.set(Kind::of::<T>());
}

fn post_error(st: &State, error: FiberError) {
    ERROR.with(|e| *e.borrow_mut() = Some(error));
    st.parcel_slot.set(std::ptr::null_mut());
}

/// Makes `target` the running fiber (`State` takes its strong count) and returns
/// the one that ran, whose count the caller now holds.
#[inline(always)]
fn make_current(st: &State, target: Rc<Core>) -> *const Core {
    if target.status.get() != Status::Started {
        assert!(target.status.get() == Status::Created, "a finished fiber is never switched to");
        target.status.set(Status::Started);
        target.context.started();
    }
    st.current.replace(Rc::into_raw(target))
}

/// Gives control to `target`; returns when some fiber switches back. The switched-to
/// fiber lets go of this one's strong count once it has taken its parcel (`receive`).
#[inline(always)]
fn hand_over(st: &State, target: Rc<Core>) {
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

/// Takes what the switch that woke the calling fiber delivered to it, then lets go
/// of the fiber that switched here and reaps a finished one (also if dropping a
/// refused value panics).
#[inline(always)]
fn receive<R: 'static>(st: &State) -> Result<R, FiberError> {
    let _settle = Settle(st);
    let slot = st.parcel_slot.get();
    if slot.is_null() {
        return Err(ERROR.with(|e| e.borrow_mut().take()).expect("an error parcel has its error"));
    }
    if slot == NOTHING {
        return unit::<R>().ok_or_else(|| mismatch::<R>(UNIT));
    }
    let kind = st.parcel_kind.get();
    if kind.type_id != TypeId::of::<R>() {
        // SAFETY: `slot` is an untouched `Option` of the posted type, which `discard`
        // was made for (the sender is suspended, as below). Dropped here, the sender's
        // frame may be abandoned.
        unsafe { (kind.discard)(slot) };
        return Err(mismatch::<R>(kind));
    }
    // SAFETY: `slot` is the address of an `Option<R>` (the type ids match) in the
    // sender's frame. The sender is suspended inside `switch` or `finish` and touches
    // the slot again only after it runs again, which needs a switch by a fiber that is
    // running, which can only be after this returns; `_settle`, which may unwind or
    // free the sender, runs after this too.
    let value = unsafe { (*slot.cast::<Option<R>>()).take() };
    Ok(value.expect("a posted value is taken once"))
}

/// `()` as an `R`, when `R` is `()` (what a [`NOTHING`] parcel delivers).
#[inline(always)]
fn unit<R: 'static>() -> Option<R> {
    let mut unit = Some(());
    (&mut unit as &mut dyn std::any::Any).downcast_mut::<Option<R>>().and_then(Option::take)
}

#[cold]
fn mismatch<R>(found: &Kind) -> FiberError {
    FiberError::TypeMismatch(Box::new(TypeMismatch { expected: type_name::<R>(), found: (found.type_name)() }))
}

/// Lets go of the fiber that switched here (`handed_off`) and reaps a finished
/// one, once the value it delivered is taken.
struct Settle<'a>(&'a State);

impl Drop for Settle<'_> {
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

/// Marks `me` finished and returns the fiber Ruby's rules hand control to: its
/// resumer, else the end of the root's chain of resumes (MRI's `return_fiber`).
fn terminate(st: &State, me: &Core) -> Rc<Core> {
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
        // SAFETY: a fiber unwinds only when `Drop for Core` switched into it, setting
        // `cancel_return` to a context in its own frame, which waits there; nothing on
        // this stack is used again (the dropped core frees it once back).
        unsafe { context::switch_for_good(&*back) }
    }
    let next = st.with_current(|me| terminate(st, me));
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
    // taken the parcel (the only thing on this stack still used) and reaped it.
    unsafe { context::switch(&(*me).context, &(*st.current.get()).context) };
    unreachable!("a finished fiber is reaped, never switched to")
}

/// Where a fiber that was not resumed returns when it finishes: the root, or the
/// last fiber of the chain the root is resuming.
fn end_of_root_chain(st: &State) -> Rc<Core> {
    let mut fiber = st.root_ptr();
    loop {
        // SAFETY: `fiber` is the root (alive until the thread exits) or a fiber that a
        // live fiber is resuming, alive by the invariant of `resuming`.
        let next = unsafe { (*fiber).resuming.get() };
        if next.is_null() {
            // SAFETY: as above, and every `Core` is allocated by an `Rc`.
            return unsafe { rc_from_borrowed(fiber) };
        }
        fiber = next;
    }
}
