//! The switch: how control and a value pass from one fiber to another.
//!
//! Following the FiberManager design of TruffleRuby's fibres, every fiber's
//! coroutine is resumed by one loop, [`drive`], running on the root fiber's
//! (the thread's own) stack. A fiber that resumes, transfers to or yields to
//! another suspends itself to that loop, naming the fiber to run next; the loop
//! resumes it. Symmetric `transfer` thus needs nothing from the coroutine library
//! beyond `resume`/`suspend`, and a switch to or from the root costs one context
//! switch, between two fibers two.
//!
//! Values travel without boxing: the sender leaves the value in an `Option<T>`
//! on its own stack, posts a [`Delivery`] naming its address and type, and
//! switches; the receiver checks the type and takes the value. The sender's
//! stack stays untouched until the sender runs again, which is after the
//! receiver has taken the value: the first thing any fiber does on waking is
//! [`receive`].

use std::any::{type_name, TypeId};
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;

use corosensei::{Coroutine, CoroutineResult, Yielder};

use super::error::FiberError;
use super::rules::View;
use super::stack::PooledStack;

/// A fiber's coroutine: it is resumed with nothing and suspends naming the fiber to run next.
type Body = Coroutine<(), Rc<Core>, (), PooledStack>;

/// The untyped state of one fiber, shared by its handles and the links of other fibers.
pub(crate) struct Core {
    id: u64,
    /// `None` for the root fiber, and for a fiber once it has been reaped.
    body: RefCell<Option<Body>>,
    /// Set by the fiber itself when it starts; valid while its body runs.
    ///
    /// # Invariant
    /// Dereferenced only by the fiber itself, on its own stack, where the
    /// `Yielder` corosensei passed to the body lives until the body returns.
    yielder: Cell<*const Yielder<(), Rc<Core>>>,
    status: Cell<Status>,
    /// The fiber that resumed this one and waits for it to yield or finish.
    prev: RefCell<Option<Rc<Core>>>,
    /// The fiber this one is suspended resuming.
    resuming: RefCell<Option<Rc<Core>>>,
    /// Suspended in `yield_now`.
    yielding: Cell<bool>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Created,
    Started,
    Terminated,
}

/// What the next fiber to wake finds waiting for it.
enum Delivery {
    /// A value of type `type_id` at `slot`, an `Option` of that type on the sender's stack.
    Value { type_id: TypeId, type_name: &'static str, slot: *mut () },
    /// No value: the switch reports an error (the fiber switched to panicked, for instance).
    Error(FiberError),
}

/// The fiber state of one thread.
struct Thread {
    root: Rc<Core>,
    current: RefCell<Rc<Core>>,
    delivery: Cell<Option<Delivery>>,
    /// A fiber that finished and posted its result, waiting for the receiver to reap it.
    dead: Cell<Option<Rc<Core>>>,
    /// How many dropped fibers are unwinding right now (they may not switch).
    unwinding: Cell<usize>,
    next_id: Cell<u64>,
}

thread_local! {
    static THREAD: Thread = {
        let root = Rc::new(Core::new(0, None, Status::Started));
        Thread {
            current: RefCell::new(root.clone()),
            root,
            delivery: Cell::new(None),
            dead: Cell::new(None),
            unwinding: Cell::new(0),
            next_id: Cell::new(1),
        }
    };
}

impl Core {
    fn new(id: u64, body: Option<Body>, status: Status) -> Core {
        Core {
            id,
            body: RefCell::new(body),
            yielder: Cell::new(std::ptr::null()),
            status: Cell::new(status),
            prev: RefCell::new(None),
            resuming: RefCell::new(None),
            yielding: Cell::new(false),
        }
    }

    /// Makes a fiber that will run `body` on `stack` when first switched to.
    pub(crate) fn spawn<T: 'static>(stack: PooledStack, body: impl FnOnce(T) -> T + 'static) -> Rc<Core> {
        let coroutine = Coroutine::with_stack(stack, move |yielder: &Yielder<(), Rc<Core>>, ()| {
            current().yielder.set(yielder);
            let outcome = receive::<T>().and_then(|arg| {
                panic::catch_unwind(AssertUnwindSafe(move || body(arg))).map_err(|payload| {
                    // A dropped fiber unwinds by a panic that must reach corosensei.
                    if unwinding() {
                        panic::resume_unwind(payload);
                    }
                    FiberError::Panicked(payload)
                })
            });
            finish(outcome);
        });
        let id = THREAD.with(|t| t.next_id.replace(t.next_id.get() + 1));
        Rc::new(Core::new(id, Some(coroutine), Status::Created))
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn is_root(&self) -> bool {
        self.id == 0
    }

    /// What the rules need to know of this fiber, seen from the running fiber.
    pub(crate) fn view(self: &Rc<Core>) -> View {
        View {
            created: self.status.get() == Status::Created,
            terminated: self.status.get() == Status::Terminated,
            current: THREAD.with(|t| Rc::ptr_eq(self, &t.current.borrow())),
            resumed: self.prev.borrow().is_some(),
            resuming: self.resuming.borrow().is_some(),
            yielding: self.yielding.get(),
        }
    }

    /// Links `self` as resumed by the running fiber, which becomes resuming it.
    pub(crate) fn link_resume(self: &Rc<Core>) {
        let current = current();
        *current.resuming.borrow_mut() = Some(self.clone());
        *self.prev.borrow_mut() = Some(current);
        self.yielding.set(false);
    }

    /// Unlinks the running fiber from its resumer for a yield, and returns the resumer.
    pub(crate) fn unlink_yield(&self) -> Option<Rc<Core>> {
        let prev = self.prev.borrow_mut().take()?;
        prev.resuming.borrow_mut().take();
        self.yielding.set(true);
        Some(prev)
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        let Some(body) = self.body.get_mut().take() else { return };
        if !body.started() || body.done() {
            return;
        }
        // Suspended: corosensei unwinds the stack so that its destructors run.
        // Those destructors may not switch fibers; see `unwinding`.
        let _ = THREAD.try_with(|t| t.unwinding.set(t.unwinding.get() + 1));
        struct Done;
        impl Drop for Done {
            fn drop(&mut self) {
                let _ = THREAD.try_with(|t| t.unwinding.set(t.unwinding.get() - 1));
            }
        }
        let _done = Done;
        drop(body);
    }
}

/// The running fiber (the root when no fiber runs).
pub(crate) fn current() -> Rc<Core> {
    THREAD.with(|t| t.current.borrow().clone())
}

/// Whether a dropped fiber's destructors are running: no switch may happen then.
pub(crate) fn unwinding() -> bool {
    THREAD.with(|t| t.unwinding.get() > 0)
}

/// Hands control and `value` to `target`, and returns the value (or error) that
/// arrives when control comes back to the calling fiber.
pub(crate) fn switch<T: 'static, R: 'static>(target: Rc<Core>, value: T) -> Result<R, FiberError> {
    let mut slot = Some(value);
    post(Delivery::Value {
        type_id: TypeId::of::<T>(),
        type_name: type_name::<T>(),
        slot: (&mut slot as *mut Option<T>).cast(),
    });
    hand_over(target);
    receive()
}

fn post(delivery: Delivery) {
    THREAD.with(|t| t.delivery.set(Some(delivery)));
}

/// Gives control to `target`: from the root by driving fibers until control comes
/// back, from a fiber by suspending to the loop that drives it.
fn hand_over(target: Rc<Core>) {
    if target.status.get() == Status::Created {
        target.status.set(Status::Started);
    }
    let me = current();
    if me.is_root() {
        drive(target);
    } else {
        let yielder = me.yielder.get();
        drop(me);
        // SAFETY: `me` is the running fiber and this code runs on its stack, so its
        // body has started (setting `yielder`) and not returned (the `Yielder` is live).
        unsafe { (*yielder).suspend(target) };
    }
}

/// The fiber manager: on the root's stack, resumes fibers until one hands control to the root.
///
/// **Invariant:** every fiber's coroutine is resumed here and nowhere else, except
/// by [`reap`] and by unwinding on drop, during which the fiber makes no switch.
fn drive(mut next: Rc<Core>) {
    while !next.is_root() {
        THREAD.with(|t| *t.current.borrow_mut() = next.clone());
        let step = next
            .body
            .borrow_mut()
            .as_mut()
            .expect("a fiber that is switched to has passed the rules, so it is not terminated")
            .resume(());
        next = match step {
            CoroutineResult::Yield(to) => to,
            CoroutineResult::Return(()) => unreachable!("a fiber's body returns only when reaped"),
        };
    }
    THREAD.with(|t| *t.current.borrow_mut() = t.root.clone());
}

/// Takes what the switch that woke the calling fiber delivered to it.
fn receive<R: 'static>() -> Result<R, FiberError> {
    let delivery = THREAD.with(|t| t.delivery.take()).expect("every switch posts a delivery");
    let received = match delivery {
        Delivery::Error(e) => Err(e),
        Delivery::Value { type_id, slot, .. } if type_id == TypeId::of::<R>() => {
            // SAFETY: `slot` is the address of an `Option<R>` (the type ids match) in
            // the sender's frame. The sender is suspended inside `switch` or `finish`
            // and touches the slot again only after it runs again, which needs a
            // switch by a fiber that is running, which can only be after this returns.
            let value = unsafe { (*slot.cast::<Option<R>>()).take() };
            Ok(value.expect("a delivered value is taken once"))
        }
        Delivery::Value { type_name: found, .. } => Err(FiberError::TypeMismatch { expected: type_name::<R>(), found }),
    };
    reap();
    received
}

/// Lets a fiber that finished return from its body, now that its result is taken;
/// its stack goes back to the pool.
fn reap() {
    let Some(dead) = THREAD.with(|t| t.dead.take()) else { return };
    let body = dead.body.borrow_mut().take();
    if let Some(mut body) = body {
        let step = body.resume(());
        debug_assert!(matches!(step, CoroutineResult::Return(())));
    }
}

/// Ends the running fiber: posts its result to the fiber Ruby's rules return to
/// (its resumer, else the end of the root's chain of resumes) and switches there.
fn finish<T: 'static>(outcome: Result<T, FiberError>) {
    let me = current();
    me.status.set(Status::Terminated);
    let resumer = me.prev.borrow_mut().take();
    let next = match resumer {
        Some(prev) => {
            prev.resuming.borrow_mut().take();
            prev
        }
        None => end_of_root_chain(),
    };
    let mut slot;
    match outcome {
        Ok(value) => {
            slot = Some(value);
            post(Delivery::Value {
                type_id: TypeId::of::<T>(),
                type_name: type_name::<T>(),
                slot: (&mut slot as *mut Option<T>).cast(),
            });
        }
        Err(e) => post(Delivery::Error(e)),
    }
    let yielder = me.yielder.get();
    THREAD.with(|t| t.dead.set(Some(me)));
    // SAFETY: as in `hand_over`: this is the running fiber, on its own stack, inside its body.
    unsafe { (*yielder).suspend(next) };
}

/// Where a fiber that was not resumed returns when it finishes: the root, or the
/// last fiber of the chain the root is resuming (MRI's `return_fiber`).
fn end_of_root_chain() -> Rc<Core> {
    let mut fiber = THREAD.with(|t| t.root.clone());
    loop {
        let next = fiber.resuming.borrow().clone();
        match next {
            Some(next) => fiber = next,
            None => return fiber,
        }
    }
}
