//! The runtime: a scheduler and event loop per thread, so that code written in
//! blocking style (sleep, wait for an fd, join another fiber) parks only its fiber.
//!
//! [`run`] starts a runtime on the calling thread and runs a closure in its first
//! fiber; [`spawn`] adds fibers. Each is a *task*, run on a reused worker fiber
//! and switched to with the scheduler's own switch (no value, no Ruby rules to
//! check); a task that must wait leaves a wake-up with whatever it waits for (a
//! timer, an fd, a `JoinHandle`) and switches straight to the next runnable task,
//! or to the root (the event loop) when none is runnable (or only tasks that
//! yielded are left) or every 61 switches.
//! Tasks run in FIFO order; a task that [`yield_now`]s goes behind the tasks the
//! loop's next look for I/O and timers wakes, and I/O is polled at least every 61
//! switches, so nothing starves.
//!
//! Inside a task, fibers may `resume` and `yield` as they please: a fiber a task
//! resumed can park too, and is continued where it parked.
//!
//! **Blocking mode.** Outside a runtime (or on a thread without one) the same
//! calls block the thread the ordinary way: [`sleep`] sleeps the thread,
//! [`yield_now`] yields the thread, [`timeout`] runs its closure and reports
//! whether it overran, [`io::wait_readable`](crate::io::wait_readable) polls.
//!
//! **Cancellation.** [`JoinHandle::cancel`] unwinds the task from the call it is
//! parked in, running every destructor on its stack (and on the stacks of fibers
//! it resumed): whatever it held is released. Dropping a `JoinHandle` detaches.
//!
//! # Examples
//!
//! ```
//! use std::time::{Duration, Instant};
//!
//! let start = Instant::now();
//! let woke: Vec<u32> = neverblock::run(|| {
//!     let sleepers: Vec<_> = (0..100)
//!         .map(|i| neverblock::spawn(move || {
//!             neverblock::sleep(Duration::from_millis(20));
//!             i
//!         }))
//!         .collect();
//!     sleepers.into_iter().map(|h| h.join().unwrap()).collect()
//! });
//! assert_eq!(woke.len(), 100);
//! assert!(start.elapsed() < Duration::from_secs(1), "100 sleeps of 20 ms overlap");
//! ```

mod beacon;
mod blocking;
#[cfg(feature = "hooks")]
pub(crate) mod fd_waits;
mod identities;
mod label;
mod pinning;
pub(crate) mod polling;
pub(crate) mod registration;
mod remote;
mod reply;
#[allow(unsafe_code)]
mod running;
pub(crate) mod scheduler;
mod sentinel;
mod stats;
mod task;
pub(crate) mod task_builder;
mod threads;
mod turn_end;
pub(crate) mod waiter;

use std::fmt;
use std::panic;
use std::rc::Rc;
use std::time::{Duration, Instant};

pub(crate) use beacon::{instant_of, ns_of};
pub(crate) use blocking::spawn_blocking_abandonable;
pub use blocking::{spawn_blocking, MAX_BLOCKING_THREADS};
// Also here, where it first lived; it sits above `sync`, whose `Notify` its workers wait on.
pub use crate::fiber_pool::FiberPool;
pub use label::{TaskActivity, ACTIVITY_BYTES};
pub use pinning::pinned_cpu;
pub use scheduler::{LoopStats, Parked, TurnHistogram};
pub use stats::stats;
pub use task::{JoinError, JoinHandle};
pub use task_builder::TaskBuilder;
pub use threads::{
    available_threads, spawn_least_loaded, spawn_on, thread_count, thread_index, Builder, RemoteJoinHandle,
    DEFAULT_STALL_WARNING,
};
pub use turn_end::at_turn_end;

use label::Label;
use scheduler::{Scheduler, TaskLabel, Woken};
pub(crate) use threads::LoopSettings;

/// Runs `f` in a fiber of a new runtime on this thread, until it returns, and
/// returns its value; fibers still parked then are cancelled (their stacks unwind).
///
/// # Panics
///
/// If `f` panics (with its payload), if called inside a runtime, if the event
/// loop cannot start, or when every fiber is parked and nothing can wake one
/// (a deadlock, as Go reports it).
///
/// # Examples
///
/// ```
/// assert_eq!(neverblock::run(|| 6 * 7), 42);
/// ```
#[track_caller]
pub fn run<T: 'static>(f: impl FnOnce() -> T + 'static) -> T {
    crate::sys::descriptors::grow_table();
    run_with(LoopSettings::default(), f)
}

/// [`run`] with a loop made to `settings`.
#[track_caller]
pub(crate) fn run_with<T: 'static>(settings: LoopSettings, f: impl FnOnce() -> T + 'static) -> T {
    assert!(scheduler::current().is_none(), "neverblock::run was called inside a runtime");
    let scheduler =
        Rc::new(Scheduler::new(settings).unwrap_or_else(|e| panic!("neverblock: cannot start the event loop: {e}")));
    let _entered = scheduler.enter();
    let handle = spawn_in(&scheduler, TaskLabel::Nothing, None, None, f);
    let ended = scheduler.run_until_done(handle.id);
    scheduler.drop_tasks();
    turn_end::end_turn(); // the last turn ends with the loop
    if let Err(e) = ended {
        panic!("neverblock: {e}");
    }
    // No task runs now: `join` takes the result as it is, or reports it missing.
    match handle.join() {
        Ok(value) => value,
        Err(JoinError::Panicked(payload)) => panic::resume_unwind(payload.into_inner()),
        Err(other) => panic!("neverblock: the main fiber did not finish: {other}"),
    }
}

/// Starts `f` in a new fiber of this thread's runtime. It takes a worker fiber
/// (and its stack) when it first runs, so a burst of short tasks runs on one
/// recycled, warm stack; if no stack can be had then, its `join` returns
/// [`JoinError::NoStack`].
///
/// # Panics
///
/// Outside a runtime (see [`try_spawn`]).
///
/// # Examples
///
/// ```
/// neverblock::run(|| {
///     let h = neverblock::spawn(|| "done");
///     assert_eq!(h.join().unwrap(), "done");
/// });
/// ```
#[track_caller]
pub fn spawn<T: 'static>(f: impl FnOnce() -> T + 'static) -> JoinHandle<T> {
    try_spawn(f).unwrap_or_else(|e| panic!("neverblock::spawn: {e}"))
}

/// Like [`spawn`], with an error instead of a panic.
///
/// # Errors
///
/// [`SpawnError::NoRuntime`] outside a runtime.
///
/// # Examples
///
/// ```
/// assert!(neverblock::try_spawn(|| ()).is_err(), "no runtime here");
/// ```
#[track_caller]
pub fn try_spawn<T: 'static>(f: impl FnOnce() -> T + 'static) -> Result<JoinHandle<T>, SpawnError> {
    let scheduler = scheduler::current().ok_or(SpawnError::NoRuntime)?;
    let label = scheduler.inherited_label();
    Ok(spawn_in(&scheduler, label, None, None, f))
}

/// Like [`spawn`], naming the fiber (see [`current_task_name`]).
///
/// # Examples
///
/// ```
/// neverblock::run(|| {
///     let h = neverblock::spawn_named("worker", || neverblock::current_task_name());
///     assert_eq!(h.join().unwrap().as_deref(), Some("worker"));
/// });
/// ```
#[track_caller]
pub fn spawn_named<T: 'static>(name: &str, f: impl FnOnce() -> T + 'static) -> JoinHandle<T> {
    let scheduler = scheduler::current().expect("neverblock::spawn_named outside a runtime");
    spawn_in(&scheduler, TaskLabel::Own(Label::new(Some(name.into()))), None, None, f)
}

#[track_caller]
fn spawn_in<T: 'static>(
    scheduler: &Scheduler,
    label: TaskLabel,
    stack_size: Option<usize>,
    start: Option<task_builder::StartWhenReady>,
    f: impl FnOnce() -> T + 'static,
) -> JoinHandle<T> {
    let (job, cell) = task::task_body(f);
    let id = scheduler.spawn(label, job, std::panic::Location::caller(), stack_size, start);
    JoinHandle { id, cell }
}

/// Why a fiber could not be spawned.
#[derive(Debug)]
#[non_exhaustive]
pub enum SpawnError {
    /// No runtime runs on this thread.
    NoRuntime,
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::NoRuntime => f.write_str("no neverblock runtime runs on this thread"),
        }
    }
}

impl std::error::Error for SpawnError {}

/// Lets the other runnable fibers run, then the loop look for ready I/O and due
/// timers, and continues behind the fibers that look made runnable (as tokio's
/// `yield_now` does). A fiber that yields between pieces of long work, such as a
/// large file sent a piece at a time, so lets connections that just became ready
/// go first. Alone on its loop, a yield costs that look: a non-blocking `epoll_wait`
/// while fibers wait on descriptors. Outside a runtime, yields the thread.
///
/// # Examples
///
/// ```
/// use std::cell::RefCell;
/// use std::rc::Rc;
///
/// let order = Rc::new(RefCell::new(Vec::new()));
/// let o = order.clone();
/// neverblock::run(move || {
///     let o2 = o.clone();
///     let other = neverblock::spawn(move || o2.borrow_mut().push("other"));
///     neverblock::yield_now();
///     o.borrow_mut().push("main");
///     other.join().unwrap();
/// });
/// assert_eq!(*order.borrow(), ["other", "main"]);
/// ```
pub fn yield_now() {
    match scheduler::in_task() {
        Some(s) => s.yield_task(),
        None => std::thread::yield_now(),
    }
}

/// Parks the calling fiber for `duration` (one timer entry, never a thread);
/// outside a runtime, sleeps the thread. Inside an expired [`timeout`] it returns early.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let start = Instant::now();
/// neverblock::run(|| neverblock::sleep(Duration::from_millis(5)));
/// assert!(start.elapsed() >= Duration::from_millis(5));
/// ```
pub fn sleep(duration: Duration) {
    sleep_until(Instant::now() + duration)
}

/// Parks the calling fiber until `deadline` (see [`sleep`]).
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let deadline = Instant::now() + Duration::from_millis(3);
/// neverblock::run(move || neverblock::sleep_until(deadline));
/// assert!(Instant::now() >= deadline);
/// ```
pub fn sleep_until(deadline: Instant) {
    let Some(s) = scheduler::in_task() else {
        let until = waiter::thread_deadline().map_or(deadline, |scope| scope.min(deadline));
        #[allow(clippy::disallowed_methods)] // blocking mode: no runtime, so blocking the thread is the point
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
        return;
    };
    // Ends when the timer fires or an enclosing `timeout` expires (both `TimedOut`);
    // a spurious wake-up parks again.
    while Instant::now() < deadline {
        if s.park_unless_until(scheduler::Wait::Sleep, |_| false, deadline) == Woken::TimedOut {
            return;
        }
    }
}

/// Whether a payload caught with [`std::panic::catch_unwind`] is the runtime's
/// own unwind, not a panic: a cancelled task leaving the call it was parked in
/// ([`JoinHandle::cancel`]), or a dropped fiber's stack being unwound. Code that
/// catches panics (a server answering 500 for a panicking handler) must pass
/// those on with [`std::panic::resume_unwind`], so the fiber ends as it was told.
///
/// # Examples
///
/// ```
/// use std::panic::{self, AssertUnwindSafe};
///
/// neverblock::run(|| {
///     let caught = panic::catch_unwind(|| panic!("a bug")).unwrap_err();
///     assert!(!neverblock::runtime::is_cancellation(&*caught));
///     let task = neverblock::spawn(|| {
///         let parked = panic::catch_unwind(AssertUnwindSafe(|| neverblock::sleep(std::time::Duration::from_secs(60))));
///         let payload = parked.unwrap_err();
///         assert!(neverblock::runtime::is_cancellation(&*payload));
///         panic::resume_unwind(payload);
///     });
///     neverblock::yield_now();
///     task.cancel();
///     assert!(matches!(task.join(), Err(neverblock::JoinError::Cancelled)));
/// });
/// ```
pub fn is_cancellation(payload: &(dyn std::any::Any + Send)) -> bool {
    crate::fiber::is_kill_unwind(payload) || crate::fiber::is_drop_unwind(payload)
}

/// What every fiber of the runtime on this thread is doing: one line per task
/// with its number, name, where it was spawned, and whether it runs, is
/// runnable, or what it is parked on (a timer, an fd, a Mutex, a channel, the
/// end of another task, …). `None` outside a runtime.
///
/// # Examples
///
/// ```
/// neverblock::run(|| {
///     let sleeper = neverblock::spawn_named("sleeper", || neverblock::sleep(std::time::Duration::from_millis(50)));
///     neverblock::yield_now();
///     let dump = neverblock::runtime::dump().unwrap();
///     assert!(dump.contains("\"sleeper\""), "{dump}");
///     assert!(dump.contains("is parked on a timer"), "{dump}");
///     sleeper.join().unwrap();
/// });
/// ```
pub fn dump() -> Option<String> {
    scheduler::current().map(|s| s.dump())
}

/// [`dump`] for every loop of every runtime in the process, from any thread (a
/// thread that watches for `SIGQUIT`, say): each loop writes its own part when
/// its event loop next turns; one that does not within `wait` (busy in a long
/// computation) is named as not answering.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// neverblock::runtime::Builder::new().threads(2).run(|| {
///     // From a thread of the blocking pool: this fiber parks meanwhile, so its loop answers too.
///     let dump = neverblock::spawn_blocking(|| neverblock::runtime::dump_process(Duration::from_secs(5)));
///     assert_eq!(dump.matches(" tasks):").count(), 2, "{dump}");
///     assert!(!dump.contains("did not answer"), "{dump}");
/// });
/// ```
pub fn dump_process(wait: std::time::Duration) -> String {
    let here = scheduler::current();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut asked = Vec::new();
    for (id, remote) in remote::all() {
        match &here {
            Some(s) if s.id() == id => {
                let _ = tx.send((id, s.dump()));
            }
            _ => {
                let tx = tx.clone();
                remote.send(Box::new(move |s| drop(tx.send((s.id(), s.dump())))));
                asked.push(id);
            }
        }
    }
    drop(tx);
    let deadline = Instant::now() + wait;
    let mut parts = Vec::new();
    while let Ok((id, part)) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        asked.retain(|&a| a != id);
        parts.push((id, part));
    }
    parts.sort_by_key(|(id, _)| *id);
    if parts.is_empty() && asked.is_empty() {
        return "no neverblock runtime runs in this process\n".to_string();
    }
    let mut out: String = parts.into_iter().map(|(_, part)| part).collect();
    for id in asked {
        out.push_str(&format!("loop {id}: did not answer within {wait:?}\n"));
    }
    out
}

/// The deadline of a [`timeout`] passed before its closure finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// Runs `f` in the calling fiber with a deadline: once `duration` has passed,
/// whatever `f` is parked on (a sleep, a join, an fd, a channel) returns at once
/// with a timed-out error, and so does every later park inside `f`. One timer
/// entry, never a thread. Returns `Err(Elapsed)` if the deadline passed before
/// `f` returned (its value is dropped).
///
/// Outside a runtime (blocking mode) the same waits of this crate's own end at the
/// deadline: a sleep, an fd's (a socket read, write, accept or connect), a sync
/// primitive's and a name lookup's ([`net::ToSocketAddrs`](crate::net::ToSocketAddrs));
/// other blocking calls and plain computation run unbounded, and the result then
/// only says whether `f` overran.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// neverblock::run(|| {
///     let slow = neverblock::timeout(Duration::from_millis(5), || neverblock::sleep(Duration::from_secs(10)));
///     assert_eq!(slow, Err(neverblock::Elapsed));
///     assert_eq!(neverblock::timeout(Duration::from_secs(1), || 7), Ok(7));
/// });
/// ```
pub fn timeout<T>(duration: Duration, f: impl FnOnce() -> T) -> Result<T, Elapsed> {
    let deadline = Instant::now() + duration;
    let Some(s) = scheduler::in_task() else {
        let scope = waiter::thread_scope(deadline);
        let value = f();
        drop(scope);
        return if Instant::now() > deadline { Err(Elapsed) } else { Ok(value) };
    };
    /// Closes the scope if `f` unwinds (a panic, or the task's cancellation).
    struct Scope(Option<Rc<Scheduler>>);
    impl Drop for Scope {
        fn drop(&mut self) {
            if let Some(s) = self.0.take() {
                s.pop_deadline();
            }
        }
    }
    s.push_deadline(deadline);
    let mut scope = Scope(Some(s));
    let value = f();
    let expired = scope.0.take().expect("the scope is open until here").pop_deadline();
    if expired {
        Err(Elapsed)
    } else {
        Ok(value)
    }
}

/// The number of the running task, unique within its runtime, for logs.
///
/// # Examples
///
/// ```
/// assert_eq!(neverblock::current_task_id(), None);
/// neverblock::run(|| assert!(neverblock::current_task_id().is_some()));
/// ```
pub fn current_task_id() -> Option<u64> {
    scheduler::in_task().and_then(|s| s.current_task())
}

/// The name the running task was spawned with ([`spawn_named`]); spawned
/// tasks inherit their spawner's name.
///
/// # Examples
///
/// ```
/// neverblock::run(|| assert_eq!(neverblock::current_task_name(), None));
/// ```
pub fn current_task_name() -> Option<String> {
    let s = scheduler::in_task()?;
    s.task_label(s.current_task()?)?.name().map(|n| n.to_string())
}

/// When the calling loop's running turn began: the clock the loop reads once a turn, as it comes
/// back from looking for events. A time with no clock read, for deadlines that need no finer grain
/// than a turn (a server's timeouts, as nginx's cached time serves its own); `None` outside a
/// runtime's task.
///
/// # Examples
///
/// ```
/// use std::time::Instant;
///
/// assert!(neverblock::runtime::turn_start().is_none());
/// let before = Instant::now();
/// neverblock::run(move || {
///     let start = neverblock::runtime::turn_start().unwrap();
///     assert!(before <= start && start <= Instant::now());
///     neverblock::sleep(std::time::Duration::from_millis(5));
///     assert!(neverblock::runtime::turn_start().unwrap() >= start + std::time::Duration::from_millis(5));
/// });
/// ```
pub fn turn_start() -> Option<Instant> {
    running::turn_started_in_task()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_cancelled_sleep_takes_its_timer_back() {
        crate::run(|| {
            let sleeper = crate::spawn(|| crate::sleep(Duration::from_secs(3600)));
            crate::yield_now();
            sleeper.cancel();
            assert!(sleeper.join().is_err(), "cancelled while asleep");
            let s = super::scheduler::current().expect("inside run");
            assert!(!s.reactor().has_timers(), "no timer is left to hold the loop awake");
        });
    }
}
