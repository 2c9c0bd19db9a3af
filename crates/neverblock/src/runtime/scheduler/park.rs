//! Parking: what a parked task waits on ([`Wait`]), why its park ends
//! ([`Woken`]), and the calls that park the running task until a wake-up carrying
//! its turn continues it.

use std::cell::Cell;
use std::fmt;
use std::time::Instant;

use super::tasks::{continue_here, live};
use super::Scheduler;
use crate::fiber;
use crate::reactor::timer::TimerKey;
use crate::reactor::{Alarm, Reactor, Turn, Wake};
use crate::runtime::registration::{Direction, StartWait};

/// Why a park returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// Whatever the task waited for happened (or a spurious wake: callers re-check).
    Ready,
    /// A `timeout` scope around the call has expired.
    TimedOut,
}

/// What a parked task waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Not parked since it last ran (it runs, or waits in the run queue).
    Nothing,
    /// A sleep or a deadline.
    Sleep,
    /// An fd to become readable or writable.
    Fd(Direction),
    /// Its socket to become readable, to start (`TaskBuilder::when_readable`).
    Start(StartWait),
    /// The end of another task of this loop.
    Join(u64),
    /// Another loop of the runtime (its index): the end of a task started there
    /// (`spawn_on`), its statistics (`stats`), or, for a loop's main task, the
    /// end of the runtime's (on loop 0).
    OtherLoop(usize),
    /// A sync primitive.
    Sync(Primitive),
    /// A job on the blocking pool.
    Blocking,
    /// A future's waker, or an fd the future polled (`block_on`).
    Future,
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::Nothing => f.write_str("nothing"),
            Wait::Sleep => f.write_str("a timer"),
            Wait::Fd(Direction::Read) => f.write_str("an fd to become readable"),
            Wait::Fd(Direction::Write) => f.write_str("an fd to become writable"),
            Wait::Start(_) => f.write_str("its socket to become readable, to start"),
            Wait::Join(id) => write!(f, "the end of task {id}"),
            Wait::OtherLoop(index) => write!(f, "an answer from loop {index}"),
            Wait::Sync(primitive) => primitive.fmt(f),
            Wait::Blocking => f.write_str("a blocking-pool job"),
            Wait::Future => f.write_str("a future's waker (block_on)"),
        }
    }
}

/// The sync primitive a task waits on, in words (kept one byte, so a task stays small).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Primitive {
    Mutex,
    Semaphore,
    ChannelMessage,
    ChannelRoom,
    RendezvousReceiver,
    Oneshot,
    Notify,
    WaitGroup,
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Primitive::Mutex => "a Mutex",
            Primitive::Semaphore => "a Semaphore permit",
            Primitive::ChannelMessage => "a channel message",
            Primitive::ChannelRoom => "room in a channel",
            Primitive::RendezvousReceiver => "a rendezvous channel's receiver",
            Primitive::Oneshot => "a oneshot value",
            Primitive::Notify => "a Notify",
            Primitive::WaitGroup => "a WaitGroup",
        })
    }
}

impl Scheduler {
    /// Parks the running task: `register` learns the `Turn` that ends the park.
    /// Returns at once with `TimedOut` inside an expired `timeout` scope.
    ///
    /// # Panics
    ///
    /// Unwinds when the task is cancelled: it is killed at its park point, as
    /// `Fiber::kill` kills a fiber.
    pub(crate) fn park(&self, wait: Wait, register: impl FnOnce(Turn)) -> Woken {
        self.park_unless(wait, |wake| {
            register(wake);
            false
        })
    }

    /// Like [`park`](Self::park), but when `register` returns true (what the task
    /// waits for has already happened) it does not park.
    pub(crate) fn park_unless(&self, wait: Wait, register: impl FnOnce(Turn) -> bool) -> Woken {
        self.park_inner(wait, register, true)
    }

    /// Like [`park_unless`](Self::park_unless), ending at `deadline` too (then
    /// `TimedOut`): one timer entry that wakes this park alone, taken back when the
    /// park ends. No `timeout` scope, so no clock read.
    pub(crate) fn park_unless_until(
        &self,
        wait: Wait,
        register: impl FnOnce(Turn) -> bool,
        deadline: Instant,
    ) -> Woken {
        /// Takes the timer back however the park ends (also on a cancellation's unwind).
        struct Timer<'a>(&'a Reactor, Option<TimerKey>);
        impl Drop for Timer<'_> {
            fn drop(&mut self) {
                if let Some(key) = self.1.take() {
                    self.0.cancel_timer(key);
                }
            }
        }
        let mut timer = Timer(&self.reactor, None);
        let woken = self.park_inner(
            wait,
            |turn| {
                if register(turn) {
                    return true;
                }
                timer.1 = Some(self.reactor.add_timer(deadline, Alarm::Wake(Wake::Continue(turn))));
                false
            },
            true,
        );
        let fired = timer.1.take().is_some_and(|key| !self.reactor.cancel_timer(key));
        if fired {
            Woken::TimedOut
        } else {
            woken
        }
    }

    /// Like [`park_unless`](Self::park_unless), for a wake that may come from another
    /// thread; when not `interruptible`, an expired `timeout` scope does not end it (for
    /// waits on work that cannot be abandoned, such as a blocking-pool job).
    pub(crate) fn park_for_waiter(
        &self,
        wait: Wait,
        register: impl FnOnce(Turn) -> bool,
        interruptible: bool,
    ) -> Woken {
        struct Waiting<'a>(&'a Cell<usize>);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.set(self.0.get() - 1);
            }
        }
        self.waiting.set(self.waiting.get() + 1);
        let _waiting = Waiting(&self.waiting);
        self.park_inner(wait, register, interruptible)
    }

    fn park_inner(&self, wait: Wait, register: impl FnOnce(Turn) -> bool, interruptible: bool) -> Woken {
        let id = self.current.get().expect("park is called from a task");
        let mut tasks = self.tasks.borrow_mut();
        let task = live(&mut tasks.slab, id).expect("the running task is registered");
        if task.cancelled {
            drop(tasks);
            fiber::kill_running(); // cancelled while it ran
        }
        if task.timed_out && interruptible {
            return Woken::TimedOut;
        }
        let turn = Turn { task: id, number: task.turn };
        task.waits_on = wait;
        task.parked_at = self.turns.started();
        let replaced = continue_here(task);
        drop(tasks);
        drop(replaced); // a fiber the task resumed earlier may unwind here, outside the borrow
        if register(turn) {
            self.with_task(id, |task| task.turn += 1); // the wake-ups handed out are stale
            return Woken::Ready;
        }
        self.switch_away()
    }
}
