//! A loop's beacon: what its thread publishes for the sentinel thread to read, in
//! atomics the loop alone writes (Relaxed, but for the turn's start): when its
//! running turn started, which task runs now, and how long its last stall lasted.
//!
//! The loop writes the turn's start once a turn (a turn reads the clock anyway) and
//! the running task's number at each task switch: one plain store to a cache line
//! no other thread writes, read by the sentinel a few times per threshold. The
//! task's spawn site and label are written once, when it is spawned, into the
//! beacon's `Identities`. Nothing here is ever locked or waited on.

use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::identities::Identities;
use super::label::Label;

/// `turn_started` while the loop waits in its poller: no turn runs, nothing is held.
pub(crate) const WAITING: u64 = 0;

/// What `now_ns` counts from: the first clock read of the process.
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds on the monotonic clock (`Instant`'s) since the process first read it, as one
/// number every thread can compare. Read through the C library's clock (the vDSO), which tools
/// that emulate the CPU, such as Valgrind, also provide; never 0 (`WAITING`).
pub(crate) fn now_ns() -> u64 {
    ns_of(Instant::now())
}

/// `instant` as a [`now_ns`] reading (one before the first clock read counts as that read), so that
/// an instant fits one atomic word: a socket's deadline, a turn's start.
pub(crate) fn ns_of(instant: Instant) -> u64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(instant.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX).saturating_add(1)
}

/// The instant a [`now_ns`] reading stands for.
pub(crate) fn instant_of(ns: u64) -> Instant {
    *EPOCH.get_or_init(Instant::now) + Duration::from_nanos(ns.saturating_sub(1))
}

/// What one loop publishes; shared by the loop (which writes) and the sentinel (which reads).
#[derive(Debug)]
#[repr(align(128))] // its own cache lines: the loop's stores never share one with other data
pub(crate) struct Beacon {
    /// The loop's number (its scheduler's id, as the fiber dump names loops).
    pub(crate) loop_id: u64,
    /// The name of the loop's thread.
    pub(crate) thread: Box<str>,
    /// How long a turn may run before the sentinel warns; `None`: it does not watch this loop.
    pub(crate) threshold: Option<Duration>,
    /// When the running turn started (`now_ns`), or `WAITING`. Stored with `Release` after
    /// `stall_*`, so a sentinel that sees a turn end sees that turn's length.
    turn_started: AtomicU64,
    /// The running task's number; 0 while the loop does its own work between tasks.
    task: AtomicU64,
    /// The last turn longer than the threshold: when it started, and its length in nanoseconds.
    stall_started: AtomicU64,
    stall_length: AtomicU64,
    /// The loop has stopped for good (its `run` is over).
    ended: AtomicBool,
    /// Who the loop's tasks are, by number.
    pub(crate) identities: Identities,
}

/// The running task as a beacon shows it, read on another thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Running {
    pub(crate) task: u64,
    pub(crate) site: Option<&'static Location<'static>>,
    pub(crate) label: usize,
}

impl Beacon {
    pub(crate) fn new(loop_id: u64, threshold: Option<Duration>) -> Beacon {
        let thread = std::thread::current();
        Beacon {
            loop_id,
            thread: thread.name().unwrap_or("unnamed").into(),
            threshold,
            turn_started: AtomicU64::new(WAITING),
            task: AtomicU64::new(0),
            stall_started: AtomicU64::new(0),
            stall_length: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            identities: Identities::new(),
        }
    }

    /// A turn starts at `now`, with the loop's own work (no task runs yet).
    #[inline]
    pub(crate) fn turn_starts(&self, now: u64) {
        self.running(0);
        self.turn_started.store(now, Ordering::Release);
    }

    /// The loop waits in its poller: no turn runs.
    #[inline]
    pub(crate) fn waits(&self) {
        self.turn_started.store(WAITING, Ordering::Release);
    }

    /// The turn that started at `started` ran `length` nanoseconds, more than the threshold;
    /// published before the next `turn_starts` or `waits`.
    pub(crate) fn stalled(&self, started: u64, length: u64) {
        self.stall_length.store(length, Ordering::Relaxed);
        self.stall_started.store(started, Ordering::Relaxed);
    }

    /// The loop has stopped for good: after its last turn, nothing more to watch.
    pub(crate) fn ends(&self) {
        self.waits();
        self.ended.store(true, Ordering::Release);
    }

    pub(crate) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Task `task` runs now (a task switch), or none (0): the loop's own work.
    #[inline(always)]
    pub(crate) fn running(&self, task: u64) {
        self.task.store(task, Ordering::Relaxed);
    }

    /// When the running turn started, or `WAITING`.
    pub(crate) fn turn_started(&self) -> u64 {
        self.turn_started.load(Ordering::Acquire)
    }

    /// The task running now (as last published: check `turn_started` around it).
    pub(crate) fn running_now(&self) -> Running {
        let task = self.task.load(Ordering::Relaxed);
        let identity = self.identities.find(task);
        Running { task, site: identity.map(|found| found.site), label: identity.map_or(0, |found| found.label) }
    }

    /// The length of the turn that started at `started`, if it was the last stall published.
    pub(crate) fn stall_length(&self, started: u64) -> Option<Duration> {
        (self.stall_started.load(Ordering::Relaxed) == started)
            .then(|| Duration::from_nanos(self.stall_length.load(Ordering::Relaxed)))
    }
}

/// The label key a beacon publishes for `label`.
pub(crate) fn label_key(label: Option<&std::sync::Arc<Label>>) -> usize {
    label.map_or(0, Label::key)
}
