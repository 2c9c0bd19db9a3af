//! One thread's scheduler: a FIFO run queue of tasks, run on reused worker
//! fibers. A task that parks (or ends) switches straight to the next runnable
//! task, as Go's `schedule` does; the root fiber runs the event loop and is
//! switched to only when nothing is runnable (or only tasks that yielded are
//! left) or every `POLL_EVERY` switches.
//!
//! This file is the switching (wakes, dispatch, the worker fibers); `park.rs`
//! is parking and its words (what a task waits on, why a park ends), `tasks.rs`
//! the task table and `root_loop.rs` the loop the root runs, timed by
//! `turns.rs`; `dump.rs` and `stats.rs` tell what a loop's tasks are doing, in
//! words and in numbers.

mod dump;
pub(crate) mod lock_waits;
mod no_stack;
mod park;
mod root_loop;
mod stats;
mod tasks;
mod turns;

use std::cell::{Cell, RefCell};
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use super::beacon::Beacon;
use super::{running, sentinel, LoopSettings};
use crate::fiber::{self, Fiber, Inherited, PanicPayload, StackError};
use crate::reactor::{Reactor, Turn};
pub(crate) use park::{Primitive, Wait, Woken};
pub use stats::{LoopStats, Parked};
pub(crate) use tasks::TaskLabel;
use tasks::{continue_here, key, live, Task, Tasks};
pub use turns::TurnHistogram;
use turns::Turns;

/// Task switches between two polls for timers and I/O while tasks are runnable (tokio's figure).
const POLL_EVERY: u32 = 61;

/// Idle worker fibers a loop keeps however long they sit unused: as many of its runtime's stack
/// size, and as many of all other sizes together (Go keeps 64 free goroutines a processor).
const IDLE_WORKERS_KEPT: usize = 64;
/// How often a loop about to wait lets go of the idle workers beyond [`IDLE_WORKERS_KEPT`] that sat
/// unused since it last looked: each finishes, and its stack's pages go back to the kernel. A
/// burst of ten thousand tasks leaves that much memory for one to two periods, not for good, and
/// bursts that come back within a period find their workers warm.
const RETIRE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// The most idle workers let go in one turn (a switch and an `madvise` each): more wait for the
/// next turns, so that the end of a burst of a hundred thousand tasks does not hold its loop in one
/// long turn.
const RETIRE_AT_ONCE: usize = 4096;

/// How a task ended.
pub(crate) enum Outcome {
    Returned,
    Panicked(PanicPayload),
    Cancelled,
    /// No stack could be had when the task was to start.
    NoStack(StackError),
}

/// One thread's tasks and event loop.
pub(crate) struct Scheduler {
    root: Fiber<()>,
    reactor: Reactor,
    remote: super::remote::Remote,
    tasks: RefCell<Tasks>,
    /// Worker fibers between tasks, the most recently used last.
    idle_workers: RefCell<Vec<Fiber<()>>>,
    /// Worker fibers between tasks with stacks of other sizes than `stack_size`.
    idle_sized_workers: RefCell<Vec<(usize, Fiber<()>)>>,
    /// The fewest idle workers of each list since the last look for unused ones: those below it,
    /// the least recently used, sat unused all that time.
    idle_low_water: [Cell<usize>; 2],
    /// When the loop next looks for unused idle workers (see [`RETIRE_EVERY`]).
    next_retire: Cell<Option<std::time::Instant>>,
    /// Set while the root switches to an idle worker to let it go: it finishes instead of waiting.
    retiring: Cell<bool>,
    /// Tasks that could not start for want of a stack, logged.
    no_stack: no_stack::NoStackLog,
    /// The usable stack of a task's worker fiber, unless the task asks for another.
    stack_size: usize,
    current: Cell<Option<u64>>,
    next_seq: Cell<u32>,
    /// Switches since the root last polled; at `POLL_EVERY` the next one goes to the root.
    switches: Cell<u32>,
    /// The task whose end ends `run_until_done`.
    main: Cell<u64>,
    /// How the park of the task just continued ends (a `timeout` expired, or not), read when it
    /// was taken off the queue.
    interruption: Cell<Woken>,
    /// Tasks parked on a `Waiter`, which another thread may hold: while there are
    /// any, an idle loop waits rather than report a deadlock.
    waiting: Cell<usize>,
    /// The tasks parked on a lock, and who holds each (`lock_waits.rs`): those held on this
    /// thread can only be released by this loop.
    lock_waits: RefCell<Vec<(u64, lock_waits::Holder)>>,
    /// Live tasks, readable from other threads (for "least loaded" placement).
    live_tasks: Arc<AtomicUsize>,
    /// The loop's turns, timed; their starts and the running task published in its beacon.
    turns: Turns,
}

/// The scheduler of this thread, when the calling code runs in one of its tasks.
pub(crate) fn in_task() -> Option<Rc<Scheduler>> {
    running::get(true)
}

/// The scheduler of this thread, if a runtime runs on it.
pub(crate) fn current() -> Option<Rc<Scheduler>> {
    running::get(false)
}

/// Wakes a task of the runtime `scheduler`: directly on its own thread, through
/// its remote queue from any other (nothing, if that runtime has ended).
#[inline(always)]
pub(crate) fn wake_on(scheduler: u64, turn: Turn) {
    if !running::wake_if_here(scheduler, turn) {
        wake_remote(scheduler, turn);
    }
}

/// The other-thread half of [`wake_on`], kept out of the same-thread path.
#[cold]
fn wake_remote(scheduler: u64, turn: Turn) {
    if let Some(remote) = super::remote::find(scheduler) {
        remote.send(Box::new(move |s| s.wake(turn)));
    }
}

impl Scheduler {
    /// A scheduler whose tasks run on stacks of `settings.stack_size` usable bytes unless
    /// they ask for another size, watched by the sentinel if `settings` gives a threshold.
    pub(crate) fn new(settings: LoopSettings) -> io::Result<Scheduler> {
        let LoopSettings { stack_size, stall_warning } = settings;
        let reactor = Reactor::new()?;
        let beacon = Arc::new(Beacon::new(reactor.id(), stall_warning));
        sentinel::watch(&beacon);
        Ok(Scheduler {
            root: Fiber::current(),
            remote: super::remote::Remote::new(reactor.id(), reactor.remote_eventfd()),
            reactor,
            tasks: RefCell::new(Tasks::default()),
            idle_workers: RefCell::new(Vec::new()),
            idle_sized_workers: RefCell::new(Vec::new()),
            idle_low_water: [Cell::new(0), Cell::new(0)],
            next_retire: Cell::new(None),
            retiring: Cell::new(false),
            no_stack: no_stack::NoStackLog::default(),
            stack_size,
            current: Cell::new(None),
            next_seq: Cell::new(1),
            switches: Cell::new(0),
            main: Cell::new(0),
            interruption: Cell::new(Woken::Ready),
            waiting: Cell::new(0),
            lock_waits: RefCell::new(Vec::new()),
            live_tasks: Arc::new(AtomicUsize::new(0)),
            turns: Turns::new(beacon),
        })
    }

    /// Makes `self` this thread's scheduler until the guard drops.
    pub(crate) fn enter(self: &Rc<Self>) -> impl Drop {
        running::enter(self)
    }

    /// When the running turn started: the clock the loop read as the turn began.
    pub(crate) fn turn_started(&self) -> std::time::Instant {
        self.turns.started_at()
    }

    /// The reactor of this thread's loop: for the fd registrations, the one door to it.
    pub(super) fn reactor(&self) -> &Reactor {
        &self.reactor
    }

    /// The reactor, for tests anywhere in the crate to look at what is registered.
    #[cfg(test)]
    pub(crate) fn reactor_for_tests(&self) -> &Reactor {
        &self.reactor
    }

    /// This scheduler's number: unique in the process, never reused (its reactor's).
    pub(crate) fn id(&self) -> u64 {
        self.reactor.id()
    }

    /// Lets the other runnable tasks run, then the loop look for I/O and timers, and continues the
    /// running task behind the tasks that look made runnable.
    pub(crate) fn yield_task(&self) {
        let id = self.current.get().expect("yield is called from a task");
        let mut tasks = self.tasks.borrow_mut();
        let task = live(&mut tasks.slab, id).expect("the running task is registered");
        let turn = Turn { task: id, number: task.turn };
        let replaced = continue_here(task);
        tasks.deferred.push(turn);
        drop(tasks);
        drop(replaced); // a fiber the task resumed earlier may unwind here, outside the borrow
        self.switch_away();
    }

    /// Hands control to whatever runs next and, once the task `id` is continued,
    /// tells it why.
    fn switch_away(&self) -> Woken {
        self.dispatch();
        self.interruption.get()
    }

    /// From a task's fiber: switches straight to the next runnable task (Go's
    /// scheduler does the same), or to the root when none is runnable or it is
    /// time to poll. Returns when the calling fiber is switched to again.
    fn dispatch(&self) {
        let next = self.next_fiber().unwrap_or_else(|| self.root.clone());
        next.switch_to().expect("a task or the root waits in a switch");
    }

    /// Takes the next runnable task off the queue (giving a fresh one a worker
    /// fiber), makes it current and returns the fiber to continue; `None` (with no
    /// current task) when the root should run: the queue is empty, or the loop has
    /// not polled for `POLL_EVERY` switches. Always inlined, so that a park's
    /// [`dispatch`](Self::dispatch) makes one call, the switch.
    #[inline(always)]
    fn next_fiber(&self) -> Option<Fiber<()>> {
        while !self.root_due() {
            let mut tasks = self.tasks.borrow_mut();
            let Some(Turn { task: id, number }) = tasks.queue.pop_front() else { break };
            let Some(task) = live(&mut tasks.slab, id) else { continue };
            if task.turn != number {
                continue;
            }
            if let Some(fiber) = &task.resume_at {
                let fiber = fiber.clone();
                self.claim(task, id);
                return Some(fiber);
            }
            drop(tasks);
            if let Some(worker) = self.first_run(id) {
                return Some(worker);
            }
        }
        self.current.set(None);
        None
    }

    /// Gives the task `id`, runnable and never run, a worker fiber and makes it
    /// current; or, if it was cancelled first or no stack can be had, ends it.
    #[cold]
    fn first_run(&self, id: u64) -> Option<Fiber<()>> {
        let mut tasks = self.tasks.borrow_mut();
        let task = live(&mut tasks.slab, id).expect("the caller found it runnable");
        if let Wait::Start(wait) = task.waits_on {
            wait.take_back(self, id); // gone already unless it was cancelled first
        }
        let outcome = if task.cancelled {
            Outcome::Cancelled // cancelled before it ever ran: it never will
        } else {
            match self.worker(task.stack_size(self.stack_size)) {
                Ok(worker) => {
                    task.resume_at = Some(worker.clone());
                    self.claim(task, id);
                    return Some(worker);
                }
                Err(e) => {
                    self.no_stack.note(self.turns.started_at(), &e, || dump::describe(task));
                    Outcome::NoStack(e)
                }
            }
        };
        let mut task = tasks.slab.remove(key(id));
        drop(tasks);
        let (body, _) = task.start.take().expect("a task that never ran has its body");
        // Its closure may be dropped here, on whichever fiber dispatches: as on
        // the root, no task is current while that runs.
        let dispatching = self.current.take();
        self.end(&task, &*body, outcome);
        drop((task, body));
        self.current.set(dispatching);
        None
    }

    /// On a worker whose task just ended: if the next task in line has never run,
    /// makes it current on this same fiber (no switch) and returns true.
    fn start_next_here(&self, my_stack_size: usize) -> bool {
        if self.root_due() {
            return false;
        }
        let mut tasks = self.tasks.borrow_mut();
        let tasks = &mut *tasks;
        let Some(&Turn { task: id, number }) = tasks.queue.front() else { return false };
        let Some(task) = live(&mut tasks.slab, id) else { return false };
        if task.turn != number || task.resume_at.is_some() || task.cancelled {
            return false;
        }
        // A task of the runtime's size runs only on a worker of that size, as a sized one does.
        if task.stack_size(self.stack_size) != my_stack_size {
            return false;
        }
        tasks.queue.pop_front();
        task.resume_at = Some(Fiber::current());
        self.claim(task, id);
        true
    }

    /// Makes `task` (`id`, just taken off the queue) the running one under a new
    /// turn, and notes why its park ends. A cancelled task's fibers are killed, so
    /// it unwinds from its park as soon as it is switched to.
    fn claim(&self, task: &mut Task, id: u64) {
        task.turn += 1;
        task.waits_on = Wait::Nothing;
        if task.cancelled {
            if let Some(fiber) = &task.resume_at {
                fiber::mark_killed_upward(fiber);
            }
        }
        self.interruption.set(if task.timed_out { Woken::TimedOut } else { Woken::Ready });
        self.switches.set(self.switches.get() + 1);
        self.current.set(Some(id));
        self.turns.beacon().running(id);
    }

    /// Whether the next switch should go to the root, to poll.
    fn root_due(&self) -> bool {
        self.switches.get() >= POLL_EVERY
    }

    /// An idle worker fiber with a stack of `size` usable bytes, or a new one.
    fn worker(&self, size: usize) -> Result<Fiber<()>, StackError> {
        let idle = if size == self.stack_size {
            let mut idle = self.idle_workers.borrow_mut();
            let worker = idle.pop();
            removed(&self.idle_low_water[0], worker.is_some().then_some(idle.len()), idle.len());
            worker
        } else {
            let mut sized = self.idle_sized_workers.borrow_mut();
            let i = sized.iter().rposition(|(s, _)| *s == size);
            let worker = i.map(|i| sized.remove(i).1);
            removed(&self.idle_low_water[1], i, sized.len());
            worker
        };
        match idle {
            Some(worker) => Ok(worker),
            None => fiber::Builder::new()
                .stack_size(size)
                .for_tasks()
                .build_inheriting(Some(Inherited::default()), move |()| work(size)),
        }
    }

    /// Keeps a worker fiber whose task ended, with a stack of `size` usable bytes, for the next.
    fn idle(&self, worker: Fiber<()>, size: usize) {
        if size == self.stack_size {
            self.idle_workers.borrow_mut().push(worker);
        } else {
            self.idle_sized_workers.borrow_mut().push((size, worker));
        }
    }

    /// How long an idle loop may wait before it next looks for unused idle workers: until the
    /// next look while more than [`IDLE_WORKERS_KEPT`] wait, else for ever (`None`).
    fn next_retirement_in(&self) -> Option<std::time::Duration> {
        let excess = self.idle_workers.borrow().len() > IDLE_WORKERS_KEPT
            || self.idle_sized_workers.borrow().len() > IDLE_WORKERS_KEPT;
        let next = self.next_retire.get().filter(|_| excess)?;
        Some(next.saturating_duration_since(self.turns.started_at()))
    }

    /// From the root, about to wait: once every [`RETIRE_EVERY`], lets go of the idle workers
    /// beyond [`IDLE_WORKERS_KEPT`] that sat unused since the last time. Each is switched to and
    /// finishes, its stack marked to give its pages back.
    fn retire_unused_workers(&self) {
        let now = self.turns.started_at();
        if self.next_retire.get().is_some_and(|next| now < next) {
            return;
        }
        let mut retired = Vec::new();
        let left_over = {
            let mut idle = self.idle_workers.borrow_mut();
            let (n, left) = unused_beyond_kept(&self.idle_low_water[0], idle.len(), RETIRE_AT_ONCE);
            retired.extend(idle.drain(..n));
            let mut sized = self.idle_sized_workers.borrow_mut();
            let (m, sized_left) = unused_beyond_kept(&self.idle_low_water[1], sized.len(), RETIRE_AT_ONCE - n);
            retired.extend(sized.drain(..m).map(|(_, worker)| worker));
            left || sized_left
        };
        // Unused ones beyond this turn's share stay under the mark: the next turn goes on.
        self.next_retire.set(Some(if left_over { now } else { now + RETIRE_EVERY }));
        // A worker that finishes hands control to the end of the thread's root chain: the scheduler's
        // root unless `run` was called inside a fiber entered by `transfer`. There, each is dropped
        // instead (its unwind comes back here), which costs more.
        let finish = self.root.is_where_finished_fibers_return();
        for worker in retired {
            worker.retire_stack();
            if finish {
                self.retiring.set(true);
                if let Err(e) = worker.switch_to() {
                    log::error!("an idle worker could not be let go: {e}");
                }
            }
        }
        self.retiring.set(false);
    }

    /// Makes a parked task runnable, if `turn` is its current park's (which the
    /// queue checks when the task's turn comes).
    #[inline(always)]
    pub(crate) fn wake(&self, turn: Turn) {
        self.tasks.borrow_mut().queue.push_back(turn);
    }

    /// The count of live tasks, shared with other threads.
    pub(crate) fn live_tasks(&self) -> Arc<AtomicUsize> {
        self.live_tasks.clone()
    }

    /// A handle that hands work to this scheduler's loop from any thread.
    pub(crate) fn remote_handle(&self) -> super::remote::RemoteHandle {
        self.remote.handle()
    }
}

/// Notes a list whose low-water mark is `low`, now `len` long, after the worker at `at` (if any)
/// was taken out of it: one taken below the mark brings the mark down one, so that those above it,
/// used since the mark was set, stay above it as they slide down.
fn removed(low: &Cell<usize>, at: Option<usize>, len: usize) {
    if at.is_some_and(|at| at < low.get()) {
        low.set(low.get() - 1);
    }
    low.set(low.get().min(len));
}

/// How many of a list of `len` idle workers, the least recently used first, to let go now: those
/// that sat unused since its low-water mark `low` was last reset, beyond those kept, at most
/// `most`; and whether unused ones are left over. Resets the mark to the whole list that stays,
/// for the next period; or, with some left over, to them, for the next turn to let go.
fn unused_beyond_kept(low: &Cell<usize>, len: usize, most: usize) -> (usize, bool) {
    let below = low.get().min(len);
    let unused = below.saturating_sub(IDLE_WORKERS_KEPT);
    let now = unused.min(most);
    let left_over = now < unused;
    low.set(if left_over { below - now } else { len - now });
    (now, left_over)
}

/// The body of every worker fiber: runs the task it was switched to for, then
/// the next one it is given, on the same stack, until the worker is let go
/// (it returns) or dropped.
fn work(stack_size: usize) {
    let s = current().expect("a worker runs inside its runtime");
    loop {
        let id = s.current.get().expect("a worker is switched to for a task");
        let (body, inherited) =
            s.with_task(id, |task| task.start.take()).flatten().expect("a task starts on a worker once");
        fiber::reset_locals(inherited);
        let ran = panic::catch_unwind(AssertUnwindSafe(|| {
            body.run();
            fiber::reset_locals(Inherited::default());
        }));
        if fiber::unwinding_a_dropped_fiber() {
            // The worker itself is being dropped (its runtime ends), even if the task
            // caught that unwind: let it end, touching nothing of the scheduler.
            match ran {
                Err(payload) => panic::resume_unwind(payload),
                Ok(()) => return,
            }
        }
        if ran.is_err() {
            // A cancelled task's worker was killed with it; it lives on for the next task.
            fiber::clear_killed();
            fiber::reset_locals(Inherited::default());
        }
        s.finish(id, &*body, ran);
        // The value or payload is the joiner's now; an idle worker keeps nothing of it.
        drop(body);
        if !s.start_next_here(stack_size) {
            s.idle(Fiber::current(), stack_size);
            s.dispatch();
            if s.retiring.replace(false) {
                // Let go after sitting idle (see `retire_unused_workers`): finishing hands control
                // back to the root, which switched here; the stack, marked retired, gives its pages back.
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::{removed, unused_beyond_kept, IDLE_WORKERS_KEPT as KEPT};

    #[test]
    fn a_worker_taken_from_the_middle_leaves_those_used_since_the_mark_above_it() {
        // 200 idle, the first 100 unused since the mark: one taken at index 5 leaves 99 unused,
        // and the worker that was at index 100, used in this period, is not counted among them.
        let low = Cell::new(100);
        removed(&low, Some(5), 199);
        assert_eq!(low.get(), 99);
        // Taken above the mark, or none found: the mark stays, within the list.
        removed(&low, Some(150), 198);
        assert_eq!(low.get(), 99);
        removed(&low, None, 50);
        assert_eq!(low.get(), 50);
    }

    #[test]
    fn idle_workers_unused_for_a_period_are_let_go_a_share_a_turn_and_used_ones_stay() {
        // A burst's workers all came back idle within the period (the mark stayed at 0): none goes,
        // and the mark now covers all of them for the next period.
        let low = Cell::new(0);
        assert_eq!(unused_beyond_kept(&low, 1000, 4096), (0, false));
        assert_eq!(low.get(), 1000);
        // A whole period unused: all but those kept go, in shares of at most `most` a turn.
        assert_eq!(unused_beyond_kept(&low, 1000, 400), (400, true));
        assert_eq!(unused_beyond_kept(&low, 600, 400), (400, true));
        assert_eq!(unused_beyond_kept(&low, 200, 400), (200 - KEPT, false));
        assert_eq!(low.get(), KEPT, "what stays starts the next period");
        // Half the list used during a period (the mark at 500 of 1000): only the other half goes.
        let low = Cell::new(500);
        assert_eq!(unused_beyond_kept(&low, 1000, 4096), (500 - KEPT, false));
        assert_eq!(low.get(), 1000 - (500 - KEPT));
    }
}
