//! The fiber state of one thread: which fiber runs, the root fiber, the value
//! in flight, and the bookkeeping of fibers that finished or are being dropped.
//!
//! `const`-initialised thread-locals without destructors, so each access is one
//! load from the thread pointer; each operation fetches the state once.

use std::cell::Cell;
use std::rc::Rc;

use super::context::Context;
use super::switch::{FiberInner, Status};
use super::switch_value::{ValueType, NOTHING, UNIT};

/// The fiber state of one thread. `const`-initialised and without a destructor,
/// so its memory lives as long as the thread; each operation fetches it once.
pub(super) struct State {
    /// The running fiber, from `Rc::into_raw`: `State` owns one strong count of it,
    /// handed to the next fiber's owner at each switch.
    ///
    /// # Invariant
    /// Null until the root is made, then always a live `FiberInner`.
    pub(super) current: Cell<*const FiberInner>,
    /// The root fiber, from `Rc::into_raw`; freed by `RootOwner` when the thread exits.
    pub(super) root: Cell<*const FiberInner>,
    /// What the next fiber to wake finds waiting for it: an `Option<T>` in the
    /// sender's frame, of the type `value_type` names; [`NOTHING`]; or, when null,
    /// the error stored in `ERROR`.
    pub(super) value_slot: Cell<*mut ()>,
    pub(super) value_type: Cell<&'static ValueType>,
    /// The strong count of the fiber that switched away last, from `Rc::into_raw`
    /// (or null): the fiber it switched to lets it go once it has taken its value,
    /// on its own stack, since dropping a suspended fiber's last handle unwinds it.
    pub(super) handed_off: Cell<*const FiberInner>,
    /// A fiber that finished and posted its result, waiting for the receiver to reap
    /// it; from `Rc::into_raw`, or null.
    pub(super) dead: Cell<*const FiberInner>,
    /// How many dropped fibers are unwinding right now (they may not switch).
    pub(super) unwinding: Cell<usize>,
    /// Set by `Drop for FiberInner` just before it switches into the fiber it drops.
    pub(super) cancelling: Cell<bool>,
    /// Where a dropped fiber returns once it has unwound: a context on the stack of
    /// the `Drop for FiberInner` that cancelled it, or null.
    pub(super) cancel_return: Cell<*const Context>,
    pub(super) next_id: Cell<u64>,
}

thread_local! {
    pub(super) static STATE: State = const {
        State {
            current: Cell::new(std::ptr::null()),
            root: Cell::new(std::ptr::null()),
            value_slot: Cell::new(NOTHING),
            value_type: Cell::new(UNIT),
            handed_off: Cell::new(std::ptr::null()),
            dead: Cell::new(std::ptr::null()),
            unwinding: Cell::new(0),
            cancelling: Cell::new(false),
            cancel_return: Cell::new(std::ptr::null()),
            next_id: Cell::new(1),
        }
    };
    static ROOT_OWNER: RootOwner = const { RootOwner };
}

/// This thread's fiber state.
///
/// Not inlined on purpose: here, in the crate that defines `STATE`, the access is
/// one load from the thread pointer, whereas code inlined into other crates would
/// reach it through an indirect call.
#[inline(never)]
pub(super) fn state() -> &'static State {
    // SAFETY: `STATE` is `const`-initialised and has no destructor, so its storage is
    // valid from thread start until the thread is gone, after every use of it. `State`
    // is `!Sync` (it holds `Cell`s), so the reference cannot leave this thread.
    STATE.with(|st| unsafe { &*(st as *const State) })
}

/// Runs `f` with this thread's fiber state.
#[inline(always)]
pub(super) fn with_state<R>(f: impl FnOnce(&State) -> R) -> R {
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
    pub(super) fn root_ptr(&self) -> *const FiberInner {
        let root = self.root.get();
        if root.is_null() {
            self.make_root()
        } else {
            root
        }
    }

    #[cold]
    fn make_root(&self) -> *const FiberInner {
        let root = Rc::new(FiberInner::new(0, Context::running(), None, Status::Started));
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
    pub(super) fn current_ptr(&self) -> *const FiberInner {
        let current = self.current.get();
        debug_assert!(!current.is_null(), "the root fiber is made before any switch");
        current
    }

    /// Runs `f` on the running fiber.
    #[inline(always)]
    pub(super) fn with_current<R>(&self, f: impl FnOnce(&FiberInner) -> R) -> R {
        // SAFETY: by the invariant of `current`, the pointer is to a live `FiberInner`, and it
        // stays live during `f`: `State` owns a strong count of it while it runs.
        f(unsafe { &*self.current_ptr() })
    }

    /// The running fiber as an owning handle.
    #[inline(always)]
    pub(super) fn current(&self) -> Rc<FiberInner> {
        // SAFETY: the pointer is a live `FiberInner` (invariant of `current`) owned by an `Rc`,
        // so adding a strong count and making a new `Rc` of it is sound.
        unsafe { rc_from_borrowed(self.current_ptr()) }
    }

    #[inline(always)]
    pub(super) fn unwinding(&self) -> bool {
        self.unwinding.get() > 0
    }
}

/// A new `Rc` for a `FiberInner` that some `Rc` owns.
///
/// # Safety
///
/// `ptr` must point to a live `FiberInner` allocated by an `Rc`.
#[inline(always)]
pub(super) unsafe fn rc_from_borrowed(ptr: *const FiberInner) -> Rc<FiberInner> {
    // SAFETY: guaranteed by the caller.
    unsafe {
        Rc::increment_strong_count(ptr);
        Rc::from_raw(ptr)
    }
}
