//! `FiberError`: one variant per way a switch can fail; `Display` is Ruby's message.

use std::any::Any;
use std::fmt;
use std::sync::Mutex;

use crate::poison::IgnorePoison;

/// Why a [`resume`](super::Fiber::resume), [`transfer`](super::Fiber::transfer) or
/// [`yield_now`](super::yield_now) did not switch, or what ended the fiber it switched to.
///
/// The misuse variants are checked before any switch, so the caller keeps running
/// and nothing changes state. Their `Display` text is MRI 3.1's `FiberError` message.
///
/// # Examples
///
/// ```
/// use neverblock::fiber::{Fiber, FiberError};
///
/// let f = Fiber::new(|x: i32| x).unwrap();
/// assert_eq!(f.resume(1).unwrap(), 1);
/// let err = f.resume(2).unwrap_err();
/// assert!(matches!(err, FiberError::Terminated));
/// assert_eq!(err.to_string(), "attempt to resume a terminated fiber");
/// ```
#[non_exhaustive]
pub enum FiberError {
    /// Resuming a fiber that has finished.
    Terminated,
    /// A fiber resuming itself.
    ResumeCurrent,
    /// Resuming a fiber that was resumed and has not yielded back yet.
    DoubleResume,
    /// Resuming a fiber that is itself resuming another (the root, for instance).
    ResumeResuming,
    /// Resuming a fiber that is suspended in `transfer`.
    ResumeTransferring,
    /// `yield_now` from the root, or from a fiber started or continued by `transfer`.
    YieldNotResumed,
    /// Transferring to a fiber suspended in `yield_now`.
    TransferToYielding,
    /// Transferring to a fiber that is resuming another.
    TransferToResuming,
    /// Transferring to a fiber that has finished (MRI 3.1 says "dead fiber called").
    TransferToTerminated,
    /// The fiber switched to panicked; it is terminated, and this is the payload.
    Panicked(PanicPayload),
    /// The value that arrived is not of the type the receiving call expects
    /// (handles of different value types were mixed on one fiber).
    TypeMismatch(Box<TypeMismatch>),
    /// A switch was attempted by a fiber that is unwinding: a dropped fiber's
    /// destructors, or a killed fiber (which may only finish).
    Unwinding,
    /// [`Fiber::raise`](super::Fiber::raise) into a fiber that never ran (MRI's
    /// "cannot raise exception on unborn fiber").
    RaiseUnborn,
    /// What a pending `resume`, `transfer` or `yield_now` returns when another fiber
    /// raised this error into it with [`Fiber::raise`](super::Fiber::raise). Handle
    /// it, or end the fiber with it ([`FiberError::resume_unwind`]) so that its
    /// resumer gets the payload as [`FiberError::Panicked`].
    Raised(PanicPayload),
    /// The fiber switched to was killed ([`Fiber::kill`](super::Fiber::kill)): it
    /// unwound and terminated without a value (Ruby's `resume` returns `nil`).
    Killed,
    /// [`Fiber::kill`](super::Fiber::kill) of a thread's root fiber, which is the
    /// thread's own stack and cannot be unwound as a fiber.
    KillRoot,
}

impl FiberError {
    /// Ends the calling fiber with this error's payload as a panic, so whoever the
    /// rules return to gets [`FiberError::Panicked`] with it: what a fiber that does
    /// not handle a [`Raised`](FiberError::Raised) error does in Ruby. Any other
    /// error becomes a panic whose message is its text.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::{self, Fiber};
    ///
    /// let f = Fiber::new(|x: u8| match fiber::yield_now(x) {
    ///     Ok(y) => y,
    ///     Err(e) => e.resume_unwind(),
    /// })
    /// .unwrap();
    /// f.resume(1).unwrap();
    /// let payload = f.raise("stop").unwrap_err().into_panic().unwrap();
    /// assert_eq!(payload.downcast_ref::<&str>(), Some(&"stop"));
    /// ```
    pub fn resume_unwind(self) -> ! {
        match self {
            FiberError::Raised(payload) | FiberError::Panicked(payload) => {
                std::panic::resume_unwind(payload.into_inner())
            }
            other => std::panic::panic_any(other.to_string()),
        }
    }

    /// The panic message, when this is a [`FiberError::Panicked`] whose payload is a string.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::Fiber;
    ///
    /// let f = Fiber::new(|_: ()| panic!("boom")).unwrap();
    /// assert_eq!(f.resume(()).unwrap_err().panic_message(), Some("boom"));
    /// ```
    pub fn panic_message(&self) -> Option<&str> {
        match self {
            FiberError::Panicked(payload) => payload.0.message.as_deref(),
            _ => None,
        }
    }

    /// The panic's payload, to inspect or to continue the panic with
    /// `std::panic::resume_unwind`, when this is a [`FiberError::Panicked`].
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::Fiber;
    ///
    /// let f = Fiber::new(|_: ()| std::panic::panic_any(7u8)).unwrap();
    /// let payload = f.resume(()).unwrap_err().into_panic().unwrap();
    /// assert_eq!(payload.downcast_ref::<u8>(), Some(&7));
    /// ```
    pub fn into_panic(self) -> Option<Box<dyn Any + Send>> {
        match self {
            FiberError::Panicked(payload) => Some(payload.into_inner()),
            _ => None,
        }
    }
}

/// The types of a [`FiberError::TypeMismatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeMismatch {
    /// The type the receiving call expects.
    pub expected: &'static str,
    /// The type that was sent.
    pub found: &'static str,
}

/// What a fiber panicked with. The payload sits behind a `Mutex` only so that
/// `FiberError` is `Sync` (and so works with `?` into `Box<dyn Error + Send + Sync>`);
/// it is never locked concurrently. Boxed, to keep `FiberError` two words.
pub struct PanicPayload(Box<Panic>);

struct Panic {
    message: Option<String>,
    payload: Mutex<Box<dyn Any + Send>>,
}

impl PanicPayload {
    pub(crate) fn new(payload: Box<dyn Any + Send>) -> PanicPayload {
        let message = payload
            .downcast_ref::<&'static str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned());
        PanicPayload(Box::new(Panic { message, payload: Mutex::new(payload) }))
    }
}

impl PanicPayload {
    /// The panic message, when the payload is a string.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::fiber::{Fiber, FiberError};
    ///
    /// let Err(FiberError::Panicked(p)) = Fiber::new(|_: ()| panic!("oops")).unwrap().resume(()) else { panic!() };
    /// assert_eq!(p.message(), Some("oops"));
    /// ```
    pub fn message(&self) -> Option<&str> {
        self.0.message.as_deref()
    }

    /// The payload itself, to inspect or to continue the panic with `std::panic::resume_unwind`.
    pub fn into_inner(self) -> Box<dyn Any + Send> {
        self.0.payload.into_inner().ignore_poison()
    }

    /// Whether the payload is of type `T`.
    pub(crate) fn is<T: Any>(&self) -> bool {
        self.0.payload.lock().map(|p| p.is::<T>()).unwrap_or(false)
    }
}

impl fmt::Debug for PanicPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PanicPayload").field("message", &self.0.message).finish_non_exhaustive()
    }
}

impl fmt::Display for FiberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FiberError::Terminated => f.write_str("attempt to resume a terminated fiber"),
            FiberError::ResumeCurrent => f.write_str("attempt to resume the current fiber"),
            FiberError::DoubleResume => f.write_str("attempt to resume a resumed fiber (double resume)"),
            FiberError::ResumeResuming => f.write_str("attempt to resume a resuming fiber"),
            FiberError::ResumeTransferring => f.write_str("attempt to resume a transferring fiber"),
            FiberError::YieldNotResumed => f.write_str("attempt to yield on a not resumed fiber"),
            FiberError::TransferToYielding => f.write_str("attempt to transfer to a yielding fiber"),
            FiberError::TransferToResuming => f.write_str("attempt to transfer to a resuming fiber"),
            FiberError::TransferToTerminated => f.write_str("dead fiber called"),
            FiberError::Panicked(_) => match self.panic_message() {
                Some(message) => write!(f, "the fiber panicked: {message}"),
                None => f.write_str("the fiber panicked"),
            },
            FiberError::TypeMismatch(m) => {
                write!(f, "a fiber expected a value of type {} but was sent {}", m.expected, m.found)
            }
            FiberError::Unwinding => f.write_str("attempt to switch fibers while a dropped or killed fiber unwinds"),
            FiberError::RaiseUnborn => f.write_str("cannot raise exception on unborn fiber"),
            FiberError::Raised(payload) => match payload.message() {
                Some(message) => write!(f, "raised into the fiber: {message}"),
                None => f.write_str("an error was raised into the fiber"),
            },
            FiberError::Killed => f.write_str("the fiber was killed"),
            FiberError::KillRoot => f.write_str("attempt to kill a thread's root fiber"),
        }
    }
}

impl fmt::Debug for FiberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FiberError({self})")
    }
}

impl std::error::Error for FiberError {}

#[test]
fn fiber_error_is_two_words() {
    assert_eq!(std::mem::size_of::<FiberError>(), 2 * std::mem::size_of::<usize>());
}
