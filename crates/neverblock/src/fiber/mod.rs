//! Fibers with Ruby's semantics: `resume`, `yield`, `transfer`.
//!
//! A [`Fiber`] is a function with a stack of its own. Creating one runs nothing;
//! [`Fiber::resume`] runs it until it calls [`yield_now`] or returns, and the value
//! passed to `resume` is the body's argument the first time and the result of
//! `yield_now` after. [`Fiber::transfer`] passes control directly (symmetric
//! coroutines). The rules are MRI 3.1's, and every misuse is a [`FiberError`]
//! value whose text is Ruby's `FiberError` message, returned before anything
//! switches: never a panic in the caller, never a hang.
//!
//! # States and who may switch to whom
//!
//! ```text
//!              resume / transfer                    yield_now
//!   Created ─────────────────────▶ Running ──────────────────────▶ Yielded
//!                                  │  ▲  ▲ ◀────── resume ─────────────┘
//!             resume other fiber   │  │  │
//!   Resuming ◀─────────────────────┘  │  └──── transfer ────── Transferred
//!       └──── it yields / ends ───────┘        (suspended in transfer)
//!   Running ── returns or panics ──▶ Terminated
//! ```
//!
//! - `resume` takes a fiber that is Created or Yielded, never the caller itself, one
//!   already resumed, one Resuming, or one Transferred.
//! - `yield_now` returns to the resumer; a fiber that was started or continued by
//!   `transfer` (and the root) has none, and gets [`FiberError::YieldNotResumed`].
//! - `transfer` takes a fiber that is Created or Transferred (or the caller, which
//!   returns the value at once); never one Yielded or Resuming.
//! - A fiber that finishes returns its value to its resumer; a fiber that was not
//!   resumed returns it to the thread's root fiber (or, if the root is resuming a
//!   chain of fibers, to the last fiber of that chain, as MRI does).
//! - A panic inside a fiber terminates that fiber only; whoever the rules above
//!   return to receives [`FiberError::Panicked`] with the payload.
//! - [`Fiber::raise`] (Ruby's `Fiber#raise`) makes the switch a suspended fiber
//!   waits in return [`FiberError::Raised`], continuing it as `resume` (it
//!   yielded) or `transfer` (it transferred) would; [`Fiber::kill`] (Ruby 3.3's
//!   `Fiber#kill`) unwinds it from there, running its destructors, and it
//!   finishes as [`FiberError::Killed`]. Both follow current MRI: `kill` as since
//!   3.3, `raise` into the running fiber or a resuming one as since 3.4 (see
//!   `interrupt.rs`).
//!
//! **Invariant:** a fiber belongs to the thread that created it and runs only
//! there: `Fiber` is `!Send` (checked at compile time), and so are the stacks.
//!
//! **Invariant:** every switch goes straight from the running fiber to its target
//! (one saved stack pointer each, `context.rs`); fibers never run nested on each
//! other's stacks, so `transfer` can reach any suspended fiber. See `switch.rs`.
//!
//! # Values: `Fiber<T>`
//!
//! Ruby passes any object. Here a `Fiber<T>` receives `T` from `resume` and
//! `transfer` and gives `T` back from `yield_now` and its return value: one type
//! per fiber, chosen by its creator (an enum or `Box<dyn Any>` restores Ruby's
//! freedom where it is wanted). Values move by pointer from the sender's stack to
//! the receiver, with no allocation per switch; the receiver checks the type
//! (one comparison of `TypeId`s), so handles of different `T` to one fiber are
//! caught as [`FiberError::TypeMismatch`] rather than misread.
//!
//! # Stacks
//!
//! Each fiber runs on a pooled stack ([`DEFAULT_STACK_SIZE`] usable bytes unless
//! [`Builder::stack_size`] says otherwise; only touched pages become resident).
//! A guard page below every stack turns an overflow into a stop of the process
//! with the message "a fiber's stack overflowed", never silent corruption. On
//! Linux 6.13+ guard pages are kernel guard regions installed inside large
//! mappings (`MADV_GUARD_INSTALL`): they cost no kernel mapping, so a million
//! fibers fit under the default `vm.max_map_count`. On older kernels each guard
//! page is `mprotect`ed, which splits the mapping: two mappings per stack, about
//! 32,000 fibers at the default limit, after which creation returns
//! [`StackError::MapCountLimit`] naming the setting to raise. The pool never gives
//! up guard pages to go further. Memory and an optional cap
//! ([`set_stack_limit`]) are checked the same way.
//!
//! Dropping the last handle to a suspended fiber unwinds its stack so every
//! destructor on it runs. Those destructors may not switch fibers (they get
//! [`FiberError::Unwinding`]), and meanwhile [`Fiber::current`] names the fiber
//! that dropped it.
//!
//! # Examples
//!
//! ```
//! use neverblock::fiber::{self, Fiber};
//!
//! let squares = Fiber::new(|mut n: u64| {
//!     loop {
//!         n = fiber::yield_now(n * n).unwrap();
//!     }
//! })
//! .unwrap();
//! assert_eq!(squares.resume(3).unwrap(), 9);
//! assert_eq!(squares.resume(4).unwrap(), 16);
//! ```

#[allow(unsafe_code)]
mod context;
mod error;
#[allow(unsafe_code)]
mod interrupt;
mod local;
mod rules;
#[allow(unsafe_code)]
mod stack;
#[allow(unsafe_code)]
mod state;
#[allow(unsafe_code)]
mod switch;
#[allow(unsafe_code)]
mod switch_value;

use std::fmt;
use std::marker::PhantomData;
use std::rc::Rc;

pub use error::{FiberError, PanicPayload, TypeMismatch};
pub(crate) use interrupt::{clear_killed, kill_running, mark_killed_upward};
pub use local::FiberLocal;
pub(crate) use local::{inherited_now, reset_current as reset_locals, Inherited};
pub use stack::{set_stack_limit, stack_stats, StackError, StackStats, DEFAULT_STACK_SIZE};
pub(crate) use switch::{is_drop_unwind, is_kill_unwind, unwinding_a_dropped_fiber};

use crate::sys::overflow::StackUse;
use switch::FiberInner;

/// A handle to a fiber that receives and gives values of type `T`.
///
/// Handles are cheap to clone and all refer to the same fiber. When the last
/// handle to a suspended fiber is dropped, its stack is unwound.
///
/// A fiber never leaves its thread:
///
/// ```compile_fail
/// let f = neverblock::fiber::Fiber::new(|x: u32| x).unwrap();
/// std::thread::spawn(move || f.resume(1));
/// ```
pub struct Fiber<T> {
    inner: Rc<FiberInner>,
    /// `Rc` already makes `Fiber` `!Send` and `!Sync`; this ties `T` to the handle.
    value: PhantomData<fn(T) -> T>,
}

/// Where a fiber is in its life, as [`Fiber::state`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FiberState {
    /// Made, never switched to.
    Created,
    /// The fiber that is running now.
    Running,
    /// Suspended inside a `resume` of another fiber.
    Resuming,
    /// Suspended in [`yield_now`]: `resume` continues it.
    Yielded,
    /// Suspended in `transfer` (or after one): `transfer` continues it.
    Transferred,
    /// Returned or panicked.
    Terminated,
}

/// Options for a new fiber.
///
/// # Examples
///
/// ```
/// use neverblock::fiber::Builder;
///
/// let f = Builder::new().stack_size(256 * 1024).build(|x: u32| x * 2).unwrap();
/// assert_eq!(f.resume(21).unwrap(), 42);
/// ```
#[derive(Clone, Debug)]
pub struct Builder {
    stack_size: usize,
    force_mprotect: bool,
    /// Runs runtime tasks (a worker fiber), for the overflow message.
    for_tasks: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// Default options: [`DEFAULT_STACK_SIZE`], the cheapest guard pages the kernel offers.
    pub fn new() -> Builder {
        Builder { stack_size: DEFAULT_STACK_SIZE, force_mprotect: false, for_tasks: false }
    }

    /// Usable bytes of stack, rounded up to whole pages (at least one page).
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = bytes;
        self
    }

    /// Makes guard pages with `mprotect` even where the kernel offers guard regions:
    /// the path of kernels before 6.13, with its two mappings per stack.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::Builder;
    ///
    /// let f = Builder::new().mprotect_guards(true).build(|x: u8| x).unwrap();
    /// assert_eq!(f.resume(7).unwrap(), 7);
    /// ```
    pub fn mprotect_guards(mut self, yes: bool) -> Builder {
        self.force_mprotect = yes;
        self
    }

    /// Marks the fiber as a runtime's worker, so a stack overflow names the runtime's settings.
    pub(crate) fn for_tasks(mut self) -> Builder {
        self.for_tasks = true;
        self
    }

    /// Makes a fiber that will run `body` when first resumed or transferred to.
    ///
    /// # Errors
    ///
    /// A [`StackError`] when no stack can be had: `vm.max_map_count`, available
    /// memory or the thread's cap ([`set_stack_limit`]) would be passed.
    pub fn build<T: 'static>(self, body: impl FnOnce(T) -> T + 'static) -> Result<Fiber<T>, StackError> {
        self.build_inheriting(None, body)
    }

    /// Like `build`, with the fiber-local values `inherited` (captured earlier by
    /// [`inherited_now`]) instead of the running fiber's.
    pub(crate) fn build_inheriting<T: 'static>(
        self,
        inherited: Option<Inherited>,
        body: impl FnOnce(T) -> T + 'static,
    ) -> Result<Fiber<T>, StackError> {
        let used = if self.for_tasks { StackUse::Task } else { StackUse::Fiber };
        let stack = stack::allocate(self.stack_size, stack::guard_kind(self.force_mprotect), used)?;
        Ok(Fiber { inner: FiberInner::spawn(stack, inherited, body), value: PhantomData })
    }
}

impl<T: 'static> Fiber<T> {
    /// Makes a fiber with default options; nothing runs until it is resumed.
    ///
    /// # Errors
    ///
    /// A [`StackError`] when no stack can be had (see [`Builder::build`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::{Fiber, FiberState};
    ///
    /// let f = Fiber::new(|x: i32| x + 1).unwrap();
    /// assert_eq!(f.state(), FiberState::Created);
    /// assert_eq!(f.resume(1).unwrap(), 2);
    /// assert!(!f.is_alive());
    /// ```
    pub fn new(body: impl FnOnce(T) -> T + 'static) -> Result<Fiber<T>, StackError> {
        Builder::new().build(body)
    }

    /// A handle to the running fiber (the thread's root fiber outside any fiber).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::{Fiber, FiberState};
    ///
    /// let root = Fiber::<u32>::current();
    /// assert_eq!(root.state(), FiberState::Running);
    /// let f = Fiber::new(move |x: u32| root.transfer(x + 1).unwrap()).unwrap();
    /// assert_eq!(f.transfer(1).unwrap(), 2);
    /// ```
    pub fn current() -> Fiber<T> {
        Fiber { inner: switch::current(), value: PhantomData }
    }

    /// Runs this fiber until it yields or finishes, and returns what it yielded or returned.
    ///
    /// # Errors
    ///
    /// [`FiberError::Terminated`], [`ResumeCurrent`](FiberError::ResumeCurrent),
    /// [`DoubleResume`](FiberError::DoubleResume),
    /// [`ResumeResuming`](FiberError::ResumeResuming) or
    /// [`ResumeTransferring`](FiberError::ResumeTransferring) before switching;
    /// [`Panicked`](FiberError::Panicked) if the fiber panicked.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::{self, Fiber};
    ///
    /// let f = Fiber::new(|a: String| {
    ///     let b = fiber::yield_now(a + " world").unwrap();
    ///     b + "!"
    /// })
    /// .unwrap();
    /// assert_eq!(f.resume("hello".into()).unwrap(), "hello world");
    /// assert_eq!(f.resume("bye".into()).unwrap(), "bye!");
    /// ```
    #[inline(always)]
    pub fn resume(&self, value: T) -> Result<T, FiberError> {
        switch::resume(&self.inner, value)
    }

    /// Passes control and `value` to this fiber, and returns the value that comes
    /// back when some fiber transfers to the caller (or a fiber the caller's
    /// transfers started finishes, returning to the root).
    ///
    /// # Errors
    ///
    /// [`FiberError::TransferToResuming`],
    /// [`TransferToYielding`](FiberError::TransferToYielding) or
    /// [`TransferToTerminated`](FiberError::TransferToTerminated) before switching;
    /// [`Panicked`](FiberError::Panicked) if a fiber that returns here panicked.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::Fiber;
    ///
    /// let root = Fiber::<u32>::current();
    /// let ping = Fiber::new(move |n: u32| root.transfer(n * 10).unwrap()).unwrap();
    /// assert_eq!(ping.transfer(4).unwrap(), 40);
    /// ```
    #[inline(always)]
    pub fn transfer(&self, value: T) -> Result<T, FiberError> {
        switch::transfer(&self.inner, value)
    }

    /// Whether this is the running fiber.
    pub(crate) fn is_current(&self) -> bool {
        switch::is_current(&self.inner)
    }

    /// Where this fiber is in its life.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::{self, Fiber, FiberState};
    ///
    /// let f = Fiber::new(|x: u8| fiber::yield_now(x).unwrap()).unwrap();
    /// f.resume(1).unwrap();
    /// assert_eq!(f.state(), FiberState::Yielded);
    /// ```
    pub fn state(&self) -> FiberState {
        let view = self.inner.view();
        if view.terminated {
            FiberState::Terminated
        } else if view.current {
            FiberState::Running
        } else if view.created {
            FiberState::Created
        } else if view.resuming {
            FiberState::Resuming
        } else if view.yielding {
            FiberState::Yielded
        } else {
            FiberState::Transferred
        }
    }

    /// Ruby's `alive?`: not terminated.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::Fiber;
    ///
    /// let f = Fiber::new(|x: u8| x).unwrap();
    /// assert!(f.is_alive());
    /// f.resume(0).unwrap();
    /// assert!(!f.is_alive());
    /// ```
    pub fn is_alive(&self) -> bool {
        self.state() != FiberState::Terminated
    }

    /// A number naming this fiber within its thread (the root is 0), for logs.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::Fiber;
    ///
    /// assert_eq!(Fiber::<()>::current().id(), 0);
    /// assert_ne!(Fiber::new(|x: ()| x).unwrap().id(), 0);
    /// ```
    pub fn id(&self) -> u64 {
        self.inner.id()
    }
}

/// Ruby's `Fiber.yield`: suspends the running fiber, gives `value` to whoever
/// resumed it, and returns the value passed to the next `resume`.
///
/// # Errors
///
/// [`FiberError::YieldNotResumed`] from the root, or from a fiber that was started
/// or continued by `transfer`; nothing switches then.
///
/// # Examples
///
/// ```
/// use neverblock::fiber::{self, Fiber, FiberError};
///
/// let counter = Fiber::new(|start: u32| {
///     let mut n = start;
///     loop {
///         n += fiber::yield_now(n).unwrap();
///     }
/// })
/// .unwrap();
/// assert_eq!(counter.resume(10).unwrap(), 10);
/// assert_eq!(counter.resume(5).unwrap(), 15);
/// assert!(matches!(fiber::yield_now(1u32), Err(FiberError::YieldNotResumed)));
/// ```
#[inline(always)]
pub fn yield_now<T: 'static>(value: T) -> Result<T, FiberError> {
    switch::yield_now(value)
}

/// Gives the kernel back the pages of the running fiber's stack below the frames it uses now, and
/// returns how many bytes that was (0 on a thread's own stack, or when nothing lies that deep).
///
/// A fiber's stack keeps every page it ever touched. One that goes deep once (a large handler)
/// and then waits long at a shallow depth (an idle connection between requests) can hand those
/// pages back: they cost nothing until a call reaches that deep again, and then read as zeros
/// (a page fault each). One `madvise(2)` call; worth it before a long wait, not before every one.
///
/// # Examples
///
/// ```
/// use neverblock::fiber::{self, Fiber};
///
/// #[inline(never)]
/// fn deep(n: usize) -> u8 {
///     let scratch = std::hint::black_box([n as u8; 32 * 1024]);
///     scratch[n]
/// }
///
/// let f = Fiber::new(|n: usize| {
///     let value = deep(n);
///     let trimmed = fiber::trim_stack();
///     assert!(trimmed >= 16 * 1024, "{trimmed}");
///     usize::from(value + deep(n))
/// })
/// .unwrap();
/// assert_eq!(f.resume(7).unwrap(), 14);
/// assert_eq!(fiber::trim_stack(), 0, "not on a fiber");
/// ```
pub fn trim_stack() -> usize {
    switch::current_stack_bounds().map_or(0, stack::trim_below_here)
}

impl Fiber<()> {
    /// Switches to this fiber for the scheduler, which knows it waits in a switch
    /// of its own: Ruby's rules are not checked and no value passes.
    #[inline(always)]
    pub(crate) fn switch_to(self) -> Result<(), FiberError> {
        switch::switch_to(self.inner)
    }

    /// Marks this fiber's stack to give its pages back to the kernel once the fiber is gone (a
    /// runtime's worker let go after sitting idle), rather than wait warm in the pool.
    pub(crate) fn retire_stack(&self) {
        switch::retire_stack(&self.inner);
    }

    /// Whether a fiber that finished now, resumed by none, would hand control to this one.
    pub(crate) fn is_where_finished_fibers_return(&self) -> bool {
        switch::finishes_into(&self.inner)
    }
}

impl<T> Clone for Fiber<T> {
    fn clone(&self) -> Self {
        Fiber { inner: self.inner.clone(), value: PhantomData }
    }
}

impl<T> fmt::Debug for Fiber<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fiber").field("id", &self.inner.id()).finish_non_exhaustive()
    }
}
