//! `FiberPool`: NeverBlock's pool — at most n jobs run at once, each on one of n
//! reused worker fibers; the rest wait in line, first come first served.
//!
//! It is built on the public API of `runtime` and `sync` (its idle workers wait
//! on a `Notify`), so it sits above both.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;

use crate::sync::Notify;
use crate::Elapsed;

type Job = Box<dyn FnOnce()>;

/// Runs jobs on at most `size` worker fibers, which are kept and reused (a fiber
/// and its stack cost more to make than to reuse). Jobs beyond `size` queue in
/// FIFO order. A job that panics is counted and its worker goes on. Use it from
/// inside a runtime; dropping the pool lets its idle workers end.
///
/// # Examples
///
/// ```
/// use std::cell::Cell;
/// use std::rc::Rc;
/// use std::time::Duration;
/// use neverblock::FiberPool;
///
/// neverblock::run(|| {
///     let pool = FiberPool::new(20);
///     let done = Rc::new(Cell::new(0));
///     for _ in 0..100 {
///         let done = done.clone();
///         pool.spawn(move || {
///             neverblock::sleep(Duration::from_millis(1));
///             done.set(done.get() + 1);
///         });
///     }
///     assert!(pool.busy() + pool.queued() <= 100);
///     pool.wait_idle().unwrap();
///     assert_eq!(done.get(), 100);
///     assert_eq!(pool.completed(), 100);
/// });
/// ```
pub struct FiberPool {
    state: Rc<PoolState>,
}

/// The pool's queue and counters, shared by the handle and every worker fiber.
struct PoolState {
    size: usize,
    queue: RefCell<VecDeque<Job>>,
    workers: Cell<usize>,
    idle_workers: Cell<usize>,
    busy: Cell<usize>,
    completed: Cell<u64>,
    panicked: Cell<u64>,
    closed: Cell<bool>,
    work: Notify,
    idle: Notify,
}

impl FiberPool {
    /// A pool of at most `size` concurrent jobs (at least 1).
    pub fn new(size: usize) -> FiberPool {
        FiberPool {
            state: Rc::new(PoolState {
                size: size.max(1),
                queue: RefCell::new(VecDeque::new()),
                workers: Cell::new(0),
                idle_workers: Cell::new(0),
                busy: Cell::new(0),
                completed: Cell::new(0),
                panicked: Cell::new(0),
                closed: Cell::new(false),
                work: Notify::new(),
                idle: Notify::new(),
            }),
        }
    }

    /// Queues `job`; it starts as soon as a worker is free.
    ///
    /// # Panics
    ///
    /// Outside a runtime (workers are fibers of this thread's runtime).
    pub fn spawn(&self, job: impl FnOnce() + 'static) {
        let state = &self.state;
        state.queue.borrow_mut().push_back(Box::new(job));
        if state.idle_workers.get() > 0 {
            state.work.notify_one();
        } else if state.workers.get() < state.size {
            state.workers.set(state.workers.get() + 1);
            let worker = state.clone();
            drop(crate::spawn(move || worker.work()));
        }
    }

    /// Parks until every job submitted so far has finished.
    ///
    /// # Errors
    ///
    /// [`Elapsed`] inside an expired [`timeout`](crate::timeout).
    pub fn wait_idle(&self) -> Result<(), Elapsed> {
        while self.busy() + self.queued() > 0 {
            self.state.idle.notified()?;
        }
        Ok(())
    }

    /// Jobs running now.
    pub fn busy(&self) -> usize {
        self.state.busy.get()
    }

    /// Jobs waiting for a worker.
    pub fn queued(&self) -> usize {
        self.state.queue.borrow().len()
    }

    /// Jobs finished (returned or panicked).
    pub fn completed(&self) -> u64 {
        self.state.completed.get()
    }

    /// Jobs that panicked.
    pub fn panicked(&self) -> u64 {
        self.state.panicked.get()
    }

    /// Worker fibers alive (at most the pool's size).
    pub fn workers(&self) -> usize {
        self.state.workers.get()
    }
}

impl PoolState {
    /// A worker: runs queued jobs one after another on this same fiber.
    fn work(&self) {
        loop {
            let job = self.queue.borrow_mut().pop_front();
            match job {
                Some(job) => {
                    self.busy.set(self.busy.get() + 1);
                    if panic::catch_unwind(AssertUnwindSafe(job)).is_err() {
                        self.panicked.set(self.panicked.get() + 1);
                    }
                    self.busy.set(self.busy.get() - 1);
                    self.completed.set(self.completed.get() + 1);
                    if self.busy.get() == 0 && self.queue.borrow().is_empty() {
                        self.idle.notify_all();
                    }
                }
                None if self.closed.get() => break,
                None => {
                    self.idle_workers.set(self.idle_workers.get() + 1);
                    let woken = self.work.notified();
                    self.idle_workers.set(self.idle_workers.get() - 1);
                    if woken.is_err() {
                        break;
                    }
                }
            }
        }
        self.workers.set(self.workers.get() - 1);
    }
}

impl Drop for FiberPool {
    fn drop(&mut self) {
        self.state.closed.set(true);
        self.state.work.notify_all();
    }
}

impl fmt::Debug for FiberPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FiberPool")
            .field("size", &self.state.size)
            .field("busy", &self.busy())
            .field("queued", &self.queued())
            .field("completed", &self.completed())
            .finish()
    }
}
