//! A loop's numbers for `runtime::stats` (tasks, run queue, parked tasks by what
//! they wait on, registered fds, pending timers), counted from its task table and
//! reactor when asked: nothing on the park, wake and switch paths keeps them; and
//! its turns' lengths and stalls, which the root keeps once a turn (`turns.rs`).

use super::tasks::key;
use super::{Scheduler, TurnHistogram, Wait};

/// One event loop's numbers at the moment it counted them (see [`stats`](crate::runtime::stats)).
///
/// # Examples
///
/// ```
/// neverblock::run(|| {
///     let here = &neverblock::runtime::stats()[0];
///     assert_eq!((here.index, here.tasks), (0, 1), "the task asking runs, alone");
///     assert_eq!(here.runnable + here.parked.total(), 0);
/// });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoopStats {
    /// The loop's index in its runtime ([`thread_index`](crate::runtime::thread_index) on its thread;
    /// 0 is the thread that called `run`).
    pub index: usize,
    /// Live tasks: spawned and not yet ended. Those neither runnable nor parked run: on
    /// the loop of the task that asked, that task.
    pub tasks: usize,
    /// Tasks waiting for their turn: woken, spawned and not yet started, or yielded and waiting
    /// for the loop's next look for I/O and timers.
    pub runnable: usize,
    /// Tasks parked, by what they wait on.
    pub parked: Parked,
    /// File descriptors registered with the loop's poller: sockets that have waited on it,
    /// and waits of [`io::wait_readable`](crate::io::wait_readable) in progress.
    pub fds: usize,
    /// Timers pending in the loop's timer queue: sleeps and other parks with a deadline,
    /// [`timeout`](crate::timeout) scopes, and sockets' read and write timeouts (one per
    /// socket and direction, which may stay set a while after its wait ended early).
    pub timers: usize,
    /// How long the loop's turns took: the work between two polls, where a fiber that
    /// computes or blocks without parking holds every other fiber of the loop.
    pub turns: TurnHistogram,
    /// Turns longer than the stall threshold ([`Builder::stall_warning`](crate::runtime::Builder::stall_warning);
    /// always 0 with it off), each one a stall the sentinel warned about, or about to.
    pub stalls: u64,
}

/// A loop's parked tasks, by what each waits on (a task waits on one thing at a time).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// neverblock::run(|| {
///     let sleeper = neverblock::spawn(|| neverblock::sleep(Duration::from_millis(20)));
///     neverblock::yield_now();
///     let parked = neverblock::runtime::stats()[0].parked;
///     assert_eq!((parked.sleep, parked.total()), (1, 1));
///     sleeper.join().unwrap();
/// });
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Parked {
    /// A sleep ([`sleep`](crate::sleep), [`sleep_until`](crate::sleep_until)).
    pub sleep: usize,
    /// An fd to become readable or writable (a socket operation, an `io::wait_*`).
    pub fd: usize,
    /// The end of another task of the same loop ([`JoinHandle::join`](crate::JoinHandle::join)).
    pub join: usize,
    /// Another loop: the end of a task started there
    /// ([`RemoteJoinHandle::join`](crate::runtime::RemoteJoinHandle::join)), its answer to
    /// [`stats`](crate::runtime::stats), or, for the main task of every loop but 0, the end
    /// of the runtime.
    pub other_loop: usize,
    /// A [`sync`](crate::sync) primitive: a lock, a permit, a channel, a oneshot value,
    /// a `Notify`, a `WaitGroup`; or a future's waker ([`block_on`](crate::block_on)).
    pub sync: usize,
    /// A job on the blocking pool ([`spawn_blocking`](crate::spawn_blocking), name lookups).
    pub blocking: usize,
}

impl Parked {
    /// Every parked task, whatever it waits on.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock::runtime::Parked::default().total(), 0);
    /// ```
    pub fn total(&self) -> usize {
        let Parked { sleep, fd, join, other_loop, sync, blocking } = *self;
        sleep + fd + join + other_loop + sync + blocking
    }

    /// Counts one task parked on `wait`; `Wait::Nothing` is no park.
    fn count(&mut self, wait: Wait) {
        let counter = match wait {
            Wait::Nothing => return,
            Wait::Sleep => &mut self.sleep,
            Wait::Fd(_) | Wait::Start(_) => &mut self.fd,
            Wait::Join(_) => &mut self.join,
            Wait::OtherLoop(_) => &mut self.other_loop,
            Wait::Sync(_) | Wait::Future => &mut self.sync,
            Wait::Blocking => &mut self.blocking,
        };
        *counter += 1;
    }
}

impl Scheduler {
    /// This loop's numbers, as loop `index` of its runtime. Runs on the loop's
    /// own thread, between tasks or in the task that asks.
    pub(crate) fn stats(&self, index: usize) -> LoopStats {
        let tasks = self.tasks.borrow();
        let running = self.current.get();
        // A task is runnable when the run queue or the yielded list holds an entry under its
        // current turn (the others are stale); they may hold several.
        let mut runnable: Vec<u64> = tasks
            .runnable_entries()
            .filter(|turn| {
                Some(turn.task) != running
                    && tasks.slab.get(key(turn.task)).is_some_and(|t| t.id == turn.task && t.turn == turn.number)
            })
            .map(|turn| turn.task)
            .collect();
        runnable.sort_unstable();
        runnable.dedup();
        let mut parked = Parked::default();
        for (_, task) in tasks.slab.iter() {
            if Some(task.id) != running && runnable.binary_search(&task.id).is_err() {
                parked.count(task.waits_on);
            }
        }
        LoopStats {
            index,
            tasks: tasks.slab.len(),
            runnable: runnable.len(),
            parked,
            fds: self.reactor.registered(),
            timers: self.reactor.pending_timers(),
            turns: self.turns.lengths(),
            stalls: self.turns.stalls(),
        }
    }
}
