//! One thread's scheduler: a FIFO run queue of tasks, each a fiber, switched to
//! from the root with `transfer` and parked by transferring back (the design of
//! Ruby 3's fiber schedulers).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::panic;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::fiber::{inherited_now, Builder, Fiber, FiberError, Inherited, PanicPayload, StackError};
use crate::reactor::timer::TimerKey;
use crate::reactor::{Reactor, Wake};

/// Batches of runnable fibers between two polls for I/O when none is idle (tokio's figure).
const POLL_EVERY: u32 = 61;

/// `Wake::park` of a timeout scope's timer: it wakes the task whatever it is parked on.
const TIMEOUT: u64 = 0;

/// The payload that unwinds a cancelled task from the call it was parked in.
pub(crate) struct Cancelled;

/// How a task ended.
pub(crate) enum Outcome {
    Returned,
    Panicked(PanicPayload),
    Cancelled,
    /// No stack could be had when the task was to start.
    NoStack(StackError),
}

/// Why a park returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// Whatever the task waited for happened (or a spurious wake: callers re-check).
    Ready,
    /// A `timeout` scope around the call has expired.
    TimedOut,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Runnable,
    Running,
    Parked,
}

struct Task {
    /// What the task runs, until its fiber is made (when it first runs).
    start: Option<(Box<dyn FnOnce()>, Inherited)>,
    /// The task's own fiber, made when it first runs: spawned tasks hold no stack
    /// until then, so short tasks run one after another on a recycled, warm stack.
    main: Option<Fiber<()>>,
    /// The fiber to continue when woken: the task, or a fiber it resumed that parked.
    resume_at: Option<Fiber<()>>,
    state: State,
    /// Counts parks, so that a wake meant for an earlier park is ignored.
    park: u64,
    cancelled: bool,
    /// Deadlines of the `timeout` scopes the task is inside, innermost last.
    deadlines: Vec<(Instant, TimerKey)>,
    timed_out: bool,
    name: Option<Rc<str>>,
    complete: Box<dyn FnOnce(Outcome)>,
}

/// Hashes task ids (sequential `u64`s, never chosen by an adversary) by one multiply.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        bytes.iter().for_each(|b| self.0 = (self.0 << 8 | u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// One thread's tasks and event loop.
pub(crate) struct Scheduler {
    root: Fiber<()>,
    pub(crate) reactor: Reactor,
    remote: super::remote::Remote,
    tasks: RefCell<HashMap<u64, Task, BuildHasherDefault<IdHasher>>>,
    queue: RefCell<VecDeque<u64>>,
    current: Cell<Option<u64>>,
    next_id: Cell<u64>,
    /// Live tasks, readable from other threads (for "least loaded" placement).
    load: Arc<AtomicUsize>,
    thread: std::thread::ThreadId,
}

thread_local! {
    static CONTEXT: RefCell<Option<Rc<Scheduler>>> = const { RefCell::new(None) };
}

/// The scheduler of this thread, when the calling code runs in one of its tasks.
pub(crate) fn in_task() -> Option<Rc<Scheduler>> {
    CONTEXT.try_with(|c| c.borrow().clone()).ok().flatten().filter(|s| s.current.get().is_some())
}

/// The scheduler of this thread, if a runtime runs on it.
pub(crate) fn current() -> Option<Rc<Scheduler>> {
    CONTEXT.try_with(|c| c.borrow().clone()).ok().flatten()
}

impl Scheduler {
    pub(crate) fn new() -> io::Result<Scheduler> {
        let reactor = Reactor::new()?;
        Ok(Scheduler {
            root: Fiber::current(),
            remote: super::remote::Remote::new(reactor.remote_waker()),
            reactor,
            tasks: RefCell::new(HashMap::default()),
            queue: RefCell::new(VecDeque::new()),
            current: Cell::new(None),
            next_id: Cell::new(1),
            load: Arc::new(AtomicUsize::new(0)),
            thread: std::thread::current().id(),
        })
    }

    /// Makes `self` this thread's scheduler until the guard drops.
    pub(crate) fn enter(self: &Rc<Self>) -> impl Drop {
        struct Exit;
        impl Drop for Exit {
            fn drop(&mut self) {
                let _ = CONTEXT.try_with(|c| c.borrow_mut().take());
            }
        }
        CONTEXT.with(|c| *c.borrow_mut() = Some(self.clone()));
        Exit
    }

    /// Adds a task running `body`; `complete` hears how it ended.
    pub(crate) fn spawn(
        &self,
        name: Option<Rc<str>>,
        body: Box<dyn FnOnce()>,
        complete: Box<dyn FnOnce(Outcome)>,
    ) -> u64 {
        let id = self.next_id.replace(self.next_id.get() + 1);
        let task = Task {
            start: Some((body, inherited_now())),
            main: None,
            resume_at: None,
            state: State::Runnable,
            park: 0,
            cancelled: false,
            deadlines: Vec::new(),
            timed_out: false,
            name,
            complete,
        };
        self.tasks.borrow_mut().insert(id, task);
        self.queue.borrow_mut().push_back(id);
        self.load.fetch_add(1, Ordering::Relaxed);
        id
    }

    pub(crate) fn current_task(&self) -> Option<u64> {
        self.current.get()
    }

    pub(crate) fn task_name(&self, id: u64) -> Option<Rc<str>> {
        self.tasks.borrow().get(&id).and_then(|t| t.name.clone())
    }

    /// Parks the running task: `register` learns the `Wake` that ends the park.
    /// Returns at once with `TimedOut` inside an expired `timeout` scope.
    ///
    /// # Panics
    ///
    /// Unwinds with [`Cancelled`] when the task is cancelled.
    pub(crate) fn park(&self, register: impl FnOnce(Wake)) -> Woken {
        self.park_unless(|wake| {
            register(wake);
            false
        })
    }

    /// Like [`park`](Self::park), but when `register` returns true (what the task
    /// waits for has already happened) it does not park.
    pub(crate) fn park_unless(&self, register: impl FnOnce(Wake) -> bool) -> Woken {
        self.park_inner(register, true)
    }

    /// Like [`park`](Self::park), but an expired `timeout` scope does not end it
    /// (for waits on work that cannot be abandoned, such as a blocking-pool job).
    pub(crate) fn park_through_timeouts(&self, register: impl FnOnce(Wake)) {
        self.park_inner(
            |wake| {
                register(wake);
                false
            },
            false,
        );
    }

    fn park_inner(&self, register: impl FnOnce(Wake) -> bool, interruptible: bool) -> Woken {
        let id = self.current.get().expect("park is called from a task");
        let wake = {
            let mut tasks = self.tasks.borrow_mut();
            let task = tasks.get_mut(&id).expect("the running task is registered");
            if task.timed_out && interruptible {
                return Woken::TimedOut;
            }
            task.park += 1;
            task.state = State::Parked;
            task.resume_at = Some(Fiber::current());
            Wake { task: id, park: task.park }
        };
        if register(wake) {
            let mut tasks = self.tasks.borrow_mut();
            let task = tasks.get_mut(&id).expect("the running task is registered");
            task.park += 1;
            task.state = State::Running;
            return Woken::Ready;
        }
        self.switch_to_root(id)
    }

    /// Puts the running task at the back of the run queue and lets the others run.
    pub(crate) fn yield_task(&self) {
        let id = self.current.get().expect("yield is called from a task");
        {
            let mut tasks = self.tasks.borrow_mut();
            let task = tasks.get_mut(&id).expect("the running task is registered");
            task.state = State::Runnable;
            task.resume_at = Some(Fiber::current());
        }
        self.queue.borrow_mut().push_back(id);
        self.switch_to_root(id);
    }

    fn switch_to_root(&self, id: u64) -> Woken {
        self.root.transfer(()).expect("the scheduler waits in transfer");
        let tasks = self.tasks.borrow();
        let task = tasks.get(&id).expect("a woken task is registered");
        if task.cancelled {
            drop(tasks);
            panic::resume_unwind(Box::new(Cancelled));
        }
        if task.timed_out {
            Woken::TimedOut
        } else {
            Woken::Ready
        }
    }

    /// Makes a parked task runnable, if `wake` is for its current park.
    pub(crate) fn wake(&self, wake: Wake) {
        let mut tasks = self.tasks.borrow_mut();
        let Some(task) = tasks.get_mut(&wake.task) else { return };
        if wake.park == TIMEOUT {
            task.timed_out = true;
        } else if wake.park != task.park {
            return;
        }
        if task.state == State::Parked {
            task.state = State::Runnable;
            self.queue.borrow_mut().push_back(wake.task);
        }
    }

    /// Asks a task to stop: it unwinds from the call it is parked in (at once if
    /// it never ran). Returns false if the task is already gone.
    pub(crate) fn cancel(&self, id: u64) -> bool {
        let mut tasks = self.tasks.borrow_mut();
        let Some(task) = tasks.get_mut(&id) else { return false };
        task.cancelled = true;
        if task.state == State::Parked {
            task.state = State::Runnable;
            self.queue.borrow_mut().push_back(id);
        }
        true
    }

    /// Enters a `timeout` scope ending at `deadline` for the running task.
    pub(crate) fn push_deadline(&self, deadline: Instant) {
        let id = self.current.get().expect("timeout is called from a task");
        let key = self.reactor.add_timer(deadline, Wake { task: id, park: TIMEOUT });
        let mut tasks = self.tasks.borrow_mut();
        let task = tasks.get_mut(&id).expect("the running task is registered");
        task.deadlines.push((deadline, key));
        task.timed_out |= deadline <= Instant::now();
    }

    /// Leaves the innermost `timeout` scope; returns whether its deadline passed.
    pub(crate) fn pop_deadline(&self) -> bool {
        let id = self.current.get().expect("timeout is called from a task");
        let mut tasks = self.tasks.borrow_mut();
        let task = tasks.get_mut(&id).expect("the running task is registered");
        let (deadline, key) = task.deadlines.pop().expect("scopes are balanced");
        self.reactor.cancel_timer(key);
        let now = Instant::now();
        task.timed_out = task.deadlines.iter().any(|(d, _)| *d <= now);
        deadline <= now
    }

    /// Runs tasks until `main` has finished.
    ///
    /// # Errors
    ///
    /// When every task is parked and nothing (timer, fd, other thread) can wake
    /// one, or when the poller fails.
    pub(crate) fn run_until_done(&self, main: u64) -> io::Result<()> {
        let remote = &self.remote;
        let mut batches_since_poll = 0;
        loop {
            // Run only the tasks runnable now: a task that yields goes behind timers and I/O.
            let batch = self.queue.borrow().len();
            for _ in 0..batch {
                let Some(id) = self.queue.borrow_mut().pop_front() else { break };
                self.run_task(id);
            }
            if !self.tasks.borrow().contains_key(&main) {
                return Ok(());
            }
            let idle = self.queue.borrow().is_empty();
            // While fibers are runnable, poll for I/O only every `POLL_EVERY` batches
            // (a system call each time), or when a timer is due: nothing starves, and
            // busy loops do not pay a syscall per switch.
            batches_since_poll += 1;
            if !idle
                && batches_since_poll < POLL_EVERY
                && !(self.reactor.has_timers() && self.reactor.timer_due(Instant::now()))
            {
                continue;
            }
            batches_since_poll = 0;
            if idle && !self.reactor.has_timers() && !self.reactor.has_fd_waiters() && !remote.may_wake() {
                return Err(io::Error::new(
                    io::ErrorKind::Deadlock,
                    "every fiber is parked and nothing can wake one (deadlock)",
                ));
            }
            let turn = self.reactor.turn(if idle { None } else { Some(std::time::Duration::ZERO) })?;
            for wake in turn.woken {
                self.wake(wake);
            }
            if turn.remote {
                remote.drain(self);
            }
        }
    }

    fn run_task(&self, id: u64) {
        let fiber = {
            let mut tasks = self.tasks.borrow_mut();
            let Some(task) = tasks.get_mut(&id) else { return };
            if task.state != State::Runnable {
                return;
            }
            if let Some((body, inherited)) = task.start.take() {
                let made = if task.cancelled {
                    Err(Outcome::Cancelled) // cancelled before it ever ran: it never will
                } else {
                    Builder::new().build_inheriting(Some(inherited), move |()| body()).map_err(Outcome::NoStack)
                };
                match made {
                    Ok(fiber) => {
                        task.main = Some(fiber.clone());
                        task.resume_at = Some(fiber);
                    }
                    Err(outcome) => {
                        let task = tasks.remove(&id).expect("present above");
                        drop(tasks);
                        self.load.fetch_sub(1, Ordering::Relaxed);
                        (task.complete)(outcome);
                        return;
                    }
                }
            }
            task.state = State::Running;
            task.resume_at.clone().expect("a started task has a fiber to continue")
        };
        self.current.set(Some(id));
        let result = fiber.transfer(());
        self.current.set(None);
        let mut tasks = self.tasks.borrow_mut();
        let Some(task) = tasks.get_mut(&id) else { return };
        if task.main.as_ref().is_some_and(Fiber::is_alive) {
            if task.state == State::Running {
                // The task handed control to the root without parking (a raw transfer):
                // nothing will wake it, so it stays parked for good.
                task.state = State::Parked;
                eprintln!("neverblock: task {id} transferred to the scheduler without parking; it stays parked");
            }
            return;
        }
        let task = tasks.remove(&id).expect("present above");
        drop(tasks);
        self.load.fetch_sub(1, Ordering::Relaxed);
        for (_, key) in &task.deadlines {
            self.reactor.cancel_timer(*key);
        }
        let outcome = match result {
            Ok(()) => Outcome::Returned,
            Err(FiberError::Panicked(payload)) if task.cancelled || payload.is::<Cancelled>() => Outcome::Cancelled,
            Err(FiberError::Panicked(payload)) => Outcome::Panicked(payload),
            Err(other) => unreachable!("a task's fiber ends by returning or panicking, not {other}"),
        };
        (task.complete)(outcome);
    }

    /// Drops every task left (each unwinds its stack), outside any borrow.
    pub(crate) fn drop_tasks(&self) {
        let tasks = std::mem::take(&mut *self.tasks.borrow_mut());
        self.queue.borrow_mut().clear();
        for (_, task) in tasks {
            drop(task);
        }
    }

    /// The thread this scheduler runs on.
    pub(crate) fn thread(&self) -> std::thread::ThreadId {
        self.thread
    }

    /// The count of live tasks, shared with other threads.
    pub(crate) fn load(&self) -> Arc<AtomicUsize> {
        self.load.clone()
    }

    /// A handle that hands work to this scheduler's loop from any thread.
    pub(crate) fn remote_handle(&self) -> super::remote::RemoteHandle {
        self.remote.handle()
    }
}
