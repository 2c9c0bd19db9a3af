//! A loop per core: `Builder::threads(n)` runs n runtimes on n threads. Fibers
//! never migrate; starting one on another thread is explicit (`spawn_on`,
//! `spawn_least_loaded`), and its result comes back through the cross-thread
//! wake path, as do channel messages.

use std::cell::RefCell;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use super::pinning;
use super::remote::RemoteHandle;
use super::reply::{reply, NoReply, ReplyReceiver, ReplySender};
use super::scheduler::{self, Wait};
use super::JoinError;
use crate::fiber::PanicPayload;

/// How to start a runtime: how many threads, each with its own loop.
///
/// # Examples
///
/// ```
/// let per_thread: Vec<usize> = neverblock::runtime::Builder::new().threads(2).run(|| {
///     let handles: Vec<_> = (0..2).map(|i| neverblock::runtime::spawn_on(i, neverblock::runtime::thread_index)).collect();
///     handles.into_iter().map(|h| h.join().unwrap()).collect()
/// });
/// assert_eq!(per_thread, [0, 1]);
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    threads: usize,
    pin: bool,
    settings: LoopSettings,
}

/// How long a loop may go without coming back to its event loop before the
/// sentinel warns (see [`Builder::stall_warning`]).
pub const DEFAULT_STALL_WARNING: Duration = Duration::from_millis(100);

/// What each loop of a runtime is made with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoopSettings {
    /// Usable bytes of stack for a task that asks for no other size.
    pub(crate) stack_size: usize,
    /// How long a turn may run before the sentinel warns; `None`: no warning.
    pub(crate) stall_warning: Option<Duration>,
}

impl Default for LoopSettings {
    fn default() -> Self {
        LoopSettings { stack_size: crate::fiber::DEFAULT_STACK_SIZE, stall_warning: Some(DEFAULT_STALL_WARNING) }
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

/// One runtime thread, as the others see it.
struct Loop {
    remote: RemoteHandle,
    load: Arc<AtomicUsize>,
}

thread_local! {
    static LOOPS: RefCell<Option<Arc<Vec<Loop>>>> = const { RefCell::new(None) };
    static INDEX: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Builder {
    /// One thread: the calling one (what [`run`](crate::run) does).
    pub fn new() -> Builder {
        Builder { threads: 1, pin: false, settings: LoopSettings::default() }
    }

    /// Runs `n` loops: the calling thread's and `n - 1` more (at least 1). A server
    /// wants one per core: [`available_threads`].
    pub fn threads(mut self, n: usize) -> Builder {
        self.threads = n.max(1);
        self
    }

    /// Usable bytes of stack for every task of the runtime (default
    /// [`DEFAULT_STACK_SIZE`](crate::fiber::DEFAULT_STACK_SIZE), 128 KiB; only the
    /// pages a task touches become resident). One task can ask for its own size
    /// with [`TaskBuilder::stack_size`](super::TaskBuilder::stack_size).
    ///
    /// # Examples
    ///
    /// ```
    /// let sum = neverblock::runtime::Builder::new().stack_size(1 << 20).run(|| {
    ///     let big = [1u8; 512 * 1024]; // more than the default stack holds
    ///     big.iter().map(|&b| u32::from(b)).sum::<u32>()
    /// });
    /// assert_eq!(sum, 512 * 1024);
    /// ```
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.settings.stack_size = bytes;
        self
    }

    /// Warns (a `log` warning, target `neverblock::runtime::sentinel`) when a loop
    /// has not come back to its event loop for longer than `threshold`: a fiber
    /// computed or called something blocking without parking, and every other fiber
    /// of its loop waited. The warning names the task holding the loop (its number,
    /// name, what it said it was doing, where it was spawned) and how long so far; a
    /// second one says when the loop is back, and the total. Default
    /// [`DEFAULT_STALL_WARNING`] (100 ms); `Duration::ZERO` turns it off.
    ///
    /// One sentinel thread watches every loop of the process, looking a few times per
    /// threshold at what each loop publishes (the start of its running turn, once a
    /// turn; the running task's number, one plain store per task switch): the loops do no
    /// more than that. No backtrace of the stalled thread is taken (that would take
    /// unwinding it from a signal handler, which is not safe); the spawn site stands
    /// in for one. Turns longer than the threshold are counted as stalls in
    /// [`stats`](super::stats).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let stalls = neverblock::runtime::Builder::new().stall_warning(Duration::from_millis(20)).run(|| {
    ///     let spin = Instant::now();
    ///     while spin.elapsed() < Duration::from_millis(50) {} // computes without parking: a stall
    ///     neverblock::sleep(Duration::from_millis(1)); // parks: the loop ends the turn and polls
    ///     neverblock::runtime::stats()[0].stalls
    /// });
    /// assert_eq!(stalls, 1);
    /// ```
    pub fn stall_warning(mut self, threshold: Duration) -> Builder {
        self.settings.stall_warning = (!threshold.is_zero()).then_some(threshold);
        self
    }

    /// Pins loop `i` to the `i`-th CPU the calling thread may run on (default: no pinning), when
    /// there are no more loops than such CPUs; [`pinned_cpu`](super::pinned_cpu) says where a
    /// loop runs. A pinned loop keeps its caches and is where the kernel can steer the
    /// connections whose packets its CPU handles (what the HTTP server does); the price is that
    /// the scheduler can no longer move it off a CPU something else keeps busy. The calling
    /// thread, loop 0, gets its CPUs back when [`run`](Builder::run) returns or unwinds; threads
    /// the runtime starts for itself (the blocking pool, the sentinel) run where their loop could
    /// before, but a thread a fiber starts inherits its loop's one CPU, as any thread inherits
    /// its starter's.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::runtime::{pinned_cpu, spawn_on, Builder};
    ///
    /// let runtime = Builder::new().threads(2).pin_threads(true);
    /// let cpus = runtime.run(|| [pinned_cpu(), spawn_on(1, pinned_cpu).join().unwrap()]);
    /// if rustix::thread::sched_getaffinity(None).unwrap().count() >= 2 {
    ///     assert!(cpus[0].is_some() && cpus[0] != cpus[1]);
    /// } else {
    ///     assert_eq!(cpus, [None, None]); // two loops would take turns on one CPU: neither is pinned
    /// }
    /// ```
    pub fn pin_threads(mut self, pin: bool) -> Builder {
        self.pin = pin;
        self
    }

    /// Runs `f` in a fiber on the calling thread's loop; when it returns, the other
    /// loops stop (their fibers are cancelled) and their threads are joined.
    ///
    /// # Panics
    ///
    /// As [`run`](crate::run); also if a thread cannot be started.
    #[track_caller]
    pub fn run<T: 'static>(self, f: impl FnOnce() -> T + 'static) -> T {
        let (ready_tx, ready_rx) = mpsc::channel::<(usize, Loop, ReplySender<()>)>();
        let settings = self.settings;
        // Once, before the loop threads exist, so that none of them waits on a growth.
        crate::sys::descriptors::grow_table();
        let cpus = if self.pin { pinning::plan(self.threads) } else { None };
        let cpu_of = |index: usize| cpus.as_ref().map(|cpus| cpus[index]);
        let (registry_txs, workers): (Vec<_>, Vec<_>) = (1..self.threads)
            .map(|index| {
                let ready = ready_tx.clone();
                let (registry_tx, registry_rx) = reply::<Arc<Vec<Loop>>>();
                let cpu = cpu_of(index);
                let worker = thread::Builder::new()
                    .name(format!("neverblock-{index}"))
                    .spawn(move || worker(index, cpu, settings, ready, registry_rx))
                    .unwrap_or_else(|e| panic!("neverblock: cannot start loop thread {index}: {e}"));
                (registry_tx, worker)
            })
            .unzip();
        drop(ready_tx);
        let pinned = cpu_of(0).and_then(|cpu| pinning::pin(0, cpu));
        let value = super::run_with(settings, move || {
            let s = scheduler::current().expect("inside run");
            let mut loops: Vec<Option<Loop>> = (0..self.threads).map(|_| None).collect();
            loops[0] = Some(Loop { remote: s.remote_handle(), load: s.live_tasks() });
            let mut stops = Vec::new();
            for (index, event_loop, stop) in ready_rx.iter() {
                loops[index] = Some(event_loop);
                stops.push(stop);
            }
            let loops = Arc::new(loops.into_iter().map(|l| l.expect("every loop reported")).collect::<Vec<_>>());
            registry_txs.into_iter().for_each(|tx| tx.send(loops.clone()));
            LOOPS.with(|l| *l.borrow_mut() = Some(loops));
            let value = f();
            LOOPS.with(|l| l.borrow_mut().take());
            drop(stops);
            value
        });
        for worker in workers {
            let _ = worker.join();
        }
        drop(pinned);
        value
    }
}

/// A loop thread: reports its loop, learns the others, runs until told to stop.
fn worker(
    index: usize,
    cpu: Option<usize>,
    settings: LoopSettings,
    ready: mpsc::Sender<(usize, Loop, ReplySender<()>)>,
    registry: ReplyReceiver<Arc<Vec<Loop>>>,
) {
    let _pinned = cpu.and_then(|cpu| pinning::pin(index, cpu));
    super::run_with(settings, move || {
        let s = scheduler::current().expect("inside run");
        INDEX.with(|i| i.set(index));
        let (stop_tx, stop_rx) = reply::<()>();
        ready
            .send((index, Loop { remote: s.remote_handle(), load: s.live_tasks() }, stop_tx))
            .expect("the main loop waits");
        drop(ready);
        let loops = registry.wait(Wait::OtherLoop(0)).ok();
        LOOPS.with(|l| *l.borrow_mut() = loops);
        // Sent by nobody: the stop sender is dropped when the main loop's closure ends.
        let _ = stop_rx.wait(Wait::OtherLoop(0));
        LOOPS.with(|l| l.borrow_mut().take());
    });
}

/// Loops of the running multi-thread runtime (1 for a plain `run`).
///
/// # Examples
///
/// ```
/// assert_eq!(neverblock::run(neverblock::runtime::thread_count), 1);
/// ```
pub fn thread_count() -> usize {
    LOOPS.with(|l| l.borrow().as_ref().map_or(1, |loops| loops.len()))
}

/// The sending ends of the loops of this thread's runtime, in loop order; none
/// when it has one loop (or there is none).
pub(super) fn loop_remotes() -> Vec<RemoteHandle> {
    LOOPS.with(|l| {
        let loops = l.borrow();
        loops.iter().flat_map(|loops| loops.iter()).map(|event_loop| event_loop.remote.clone()).collect()
    })
}

/// Which loop this thread runs (0 is the thread that called `run`).
pub fn thread_index() -> usize {
    INDEX.with(|i| i.get())
}

/// The number of threads a server should run: one per core.
pub fn available_threads() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// Starts `f` in a new fiber on loop `index` (see [`Builder::threads`]).
///
/// # Panics
///
/// Outside a runtime, or if `index` is not a loop of it.
#[track_caller]
pub fn spawn_on<T: Send + 'static>(index: usize, f: impl FnOnce() -> T + Send + 'static) -> RemoteJoinHandle<T> {
    let spawned_at = std::panic::Location::caller();
    let remote = match LOOPS
        .with(|l| l.borrow().as_ref().map(|loops| loops.get(index).map(|event_loop| event_loop.remote.clone())))
    {
        Some(Some(remote)) => remote,
        Some(None) => panic!("neverblock::spawn_on: no loop {index} (there are {})", thread_count()),
        None if index == 0 => scheduler::current().expect("neverblock::spawn_on outside a runtime").remote_handle(),
        None => panic!("neverblock::spawn_on: no loop {index} in a single-thread runtime"),
    };
    let (tx, rx) = reply();
    remote.send(Box::new(move |s| {
        // A task cancelled, dropped or without a stack drops `tx`: its joiner sees it gone.
        let (body, _) = super::task::task_body(move || {
            tx.send(panic::catch_unwind(AssertUnwindSafe(f)).map_err(PanicPayload::new));
        });
        s.spawn(scheduler::TaskLabel::Nothing, body, spawned_at, None, None);
    }));
    RemoteJoinHandle { index, rx }
}

/// Starts `f` on the loop with the fewest live fibers.
///
/// # Panics
///
/// Outside a runtime.
#[track_caller]
pub fn spawn_least_loaded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> RemoteJoinHandle<T> {
    let index = LOOPS.with(|l| {
        l.borrow()
            .as_ref()
            .map_or(0, |loops| (0..loops.len()).min_by_key(|&i| loops[i].load.load(Ordering::Relaxed)).unwrap_or(0))
    });
    spawn_on(index, f)
}

/// The result of a fiber started on another loop; `Send`, so any fiber may join it.
pub struct RemoteJoinHandle<T> {
    /// The loop the fiber runs on.
    index: usize,
    rx: ReplyReceiver<Result<T, PanicPayload>>,
}

impl<T> RemoteJoinHandle<T> {
    /// Parks the calling fiber until the remote fiber finishes.
    ///
    /// # Errors
    ///
    /// [`JoinError::Panicked`], [`JoinError::TimedOut`] inside an expired
    /// [`timeout`](crate::timeout), or [`JoinError::RuntimeGone`] if its loop
    /// stopped before the fiber finished.
    pub fn join(self) -> Result<T, JoinError> {
        match self.rx.wait(Wait::OtherLoop(self.index)) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(payload)) => Err(JoinError::Panicked(payload)),
            Err(NoReply::TimedOut) => Err(JoinError::TimedOut),
            Err(NoReply::SenderGone) => Err(JoinError::RuntimeGone),
        }
    }
}

impl<T> fmt::Debug for RemoteJoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RemoteJoinHandle")
    }
}
