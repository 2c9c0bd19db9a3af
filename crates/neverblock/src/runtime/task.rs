//! `JoinHandle`: waiting for a spawned fiber's value, or for how it failed.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;

use super::scheduler::{self, Outcome, Scheduler, Wait, Woken};
use crate::fiber::PanicPayload;
use crate::reactor::Turn;

/// Why [`JoinHandle::join`] has no value.
#[derive(Debug)]
#[non_exhaustive]
pub enum JoinError {
    /// The fiber panicked; this is its payload.
    Panicked(PanicPayload),
    /// The fiber was cancelled with [`JoinHandle::cancel`].
    Cancelled,
    /// A [`timeout`](super::timeout) around the `join` expired first; the fiber goes on, detached.
    TimedOut,
    /// The runtime ended before the fiber did.
    RuntimeGone,
    /// No stack could be had when the fiber was to start.
    NoStack(crate::fiber::StackError),
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(p) => {
                write!(f, "the fiber panicked: {}", p.message().unwrap_or("(non-string payload)"))
            }
            JoinError::Cancelled => f.write_str("the fiber was cancelled"),
            JoinError::TimedOut => f.write_str("timed out waiting for the fiber"),
            JoinError::RuntimeGone => f.write_str("the runtime ended before the fiber finished"),
            JoinError::NoStack(e) => write!(f, "the fiber never started: {e}"),
        }
    }
}

impl std::error::Error for JoinError {}

/// Where a task leaves its result and who waits for it.
pub(crate) struct JoinSlot<T> {
    result: RefCell<Option<Result<T, JoinError>>>,
    waiter: Cell<Option<Turn>>,
}

impl<T> JoinSlot<T> {
    fn set(&self, result: Result<T, JoinError>) {
        *self.result.borrow_mut() = Some(result);
    }

    /// Records how the task ended (its value, if any, is already set) and wakes the joiner.
    fn complete(&self, outcome: Outcome, s: &Scheduler) {
        match outcome {
            Outcome::Returned => {}
            Outcome::Panicked(payload) => self.set(Err(JoinError::Panicked(payload))),
            Outcome::Cancelled => self.set(Err(JoinError::Cancelled)),
            Outcome::NoStack(e) => self.set(Err(JoinError::NoStack(e))),
        }
        if let Some(turn) = self.waiter.take() {
            s.wake(turn);
        }
    }
}

/// What the scheduler holds of a task: its closure, run once, and how to report its end.
pub(crate) trait TaskBody {
    /// Runs the task's closure and keeps its value for the joiner.
    fn run(&self);
    /// Records how the task ended and wakes its joiner.
    fn complete(&self, outcome: Outcome, s: &Scheduler);
}

/// A task's closure and its join slot in one allocation, shared by the
/// scheduler (as a [`TaskBody`]) and the `JoinHandle` (as a [`Joinable`]).
struct TaskCell<F, T> {
    body: Cell<Option<F>>,
    slot: JoinSlot<T>,
}

/// The join slot of a task, whatever its closure's type.
pub(crate) trait Joinable<T> {
    fn slot(&self) -> &JoinSlot<T>;
}

impl<F: FnOnce() -> T, T> TaskBody for TaskCell<F, T> {
    fn run(&self) {
        if let Some(body) = self.body.take() {
            self.slot.set(Ok(body()));
        }
    }

    fn complete(&self, outcome: Outcome, s: &Scheduler) {
        self.slot.complete(outcome, s);
    }
}

impl<F, T> Joinable<T> for TaskCell<F, T> {
    fn slot(&self) -> &JoinSlot<T> {
        &self.slot
    }
}

/// Makes what the scheduler runs for `body`, and the slot its joiner reads.
pub(crate) fn task_body<T: 'static>(body: impl FnOnce() -> T + 'static) -> (Rc<dyn TaskBody>, Rc<dyn Joinable<T>>) {
    let cell = Rc::new(TaskCell {
        body: Cell::new(Some(body)),
        slot: JoinSlot { result: RefCell::new(None), waiter: Cell::new(None) },
    });
    (cell.clone(), cell)
}

/// Owns the right to a spawned fiber's result. Dropping it detaches the fiber.
///
/// # Examples
///
/// ```
/// let total = neverblock::run(|| {
///     let handles: Vec<_> = (1..=3u64).map(|i| neverblock::spawn(move || i * 10)).collect();
///     handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
/// });
/// assert_eq!(total, 60);
/// ```
pub struct JoinHandle<T> {
    pub(crate) id: u64,
    pub(crate) cell: Rc<dyn Joinable<T>>,
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle").field("task", &self.id).finish_non_exhaustive()
    }
}

impl<T> JoinHandle<T> {
    fn slot(&self) -> &JoinSlot<T> {
        self.cell.slot()
    }

    /// Waits (parking only the calling fiber) for the fiber to finish and returns its value.
    ///
    /// # Errors
    ///
    /// [`JoinError::Panicked`] with the payload if it panicked, [`JoinError::Cancelled`],
    /// [`JoinError::TimedOut`] inside an expired [`timeout`](super::timeout), or
    /// [`JoinError::RuntimeGone`] when called outside the runtime before the fiber ended.
    pub fn join(self) -> Result<T, JoinError> {
        loop {
            if let Some(result) = self.slot().result.borrow_mut().take() {
                return result;
            }
            let Some(s) = scheduler::in_task() else { return Err(JoinError::RuntimeGone) };
            if s.park(Wait::Join(self.id), |turn| self.slot().waiter.set(Some(turn))) == Woken::TimedOut {
                return Err(JoinError::TimedOut);
            }
        }
    }

    /// Whether the fiber has finished (its result waits for `join`).
    pub fn is_finished(&self) -> bool {
        self.slot().result.borrow().is_some()
    }

    /// Stops the fiber: it unwinds from the call it is parked in (running every
    /// destructor on its stack), or never starts; `join` then returns
    /// [`JoinError::Cancelled`]. A fiber that never parks again cannot be stopped.
    pub fn cancel(&self) {
        if let Some(s) = scheduler::current() {
            s.cancel(self.id);
        }
    }
}
