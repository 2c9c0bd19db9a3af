//! Work handed to a runtime's thread from other threads: closures queued under a
//! lock, and the loop woken through its eventfd. Every live runtime is listed
//! by its id, so a waiter needs to carry only that id to wake a fiber from
//! another thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::scheduler::Scheduler;
use crate::poison::IgnorePoison;
use crate::reactor::EventFd;

type RemoteCall = Box<dyn FnOnce(&Scheduler) + Send>;

/// The runtimes alive in the process, by id (a handful: one per runtime thread).
static LIVE: Mutex<Vec<(u64, Weak<Inner>)>> = Mutex::new(Vec::new());

/// The receiving end, owned by the runtime's thread.
pub(crate) struct Remote {
    id: u64,
    inner: Arc<Inner>,
}

/// A sending end: `Send + Sync`, cheap to clone.
#[derive(Clone)]
pub(crate) struct RemoteHandle {
    inner: Arc<Inner>,
}

struct Inner {
    jobs: Mutex<Vec<RemoteCall>>,
    /// Set with every job, cleared when the jobs are taken: read without the lock.
    pending: AtomicBool,
    eventfd: Arc<EventFd>,
}

impl Remote {
    /// The receiving end of the runtime `id`, listed so [`find`] reaches it.
    pub(crate) fn new(id: u64, eventfd: Arc<EventFd>) -> Remote {
        let inner = Arc::new(Inner { jobs: Mutex::new(Vec::new()), pending: AtomicBool::new(false), eventfd });
        LIVE.lock().ignore_poison().push((id, Arc::downgrade(&inner)));
        Remote { id, inner }
    }

    pub(crate) fn handle(&self) -> RemoteHandle {
        RemoteHandle { inner: self.inner.clone() }
    }

    /// Whether another thread could still hand in work (a handle is alive or work waits).
    pub(crate) fn may_wake(&self) -> bool {
        Arc::strong_count(&self.inner) > 1 || self.has_work()
    }

    /// Whether work has been handed in and not yet run.
    pub(crate) fn has_work(&self) -> bool {
        self.inner.pending.load(Ordering::Acquire)
    }

    /// Runs every job handed in so far, on this thread.
    pub(crate) fn drain(&self, scheduler: &Scheduler) {
        let jobs = {
            let mut jobs = self.inner.jobs.lock().ignore_poison();
            self.inner.pending.store(false, Ordering::Release);
            std::mem::take(&mut *jobs)
        };
        for job in jobs {
            job(scheduler);
        }
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        LIVE.lock().ignore_poison().retain(|(id, _)| *id != self.id);
    }
}

/// Every live runtime, by id, with its sending end.
pub(crate) fn all() -> Vec<(u64, RemoteHandle)> {
    let live = LIVE.lock().ignore_poison();
    live.iter().filter_map(|(id, inner)| Some((*id, RemoteHandle { inner: inner.upgrade()? }))).collect()
}

/// The sending end of the live runtime `id`, if it is still running.
pub(crate) fn find(id: u64) -> Option<RemoteHandle> {
    let live = LIVE.lock().ignore_poison();
    let inner = live.iter().find(|(live_id, _)| *live_id == id)?.1.upgrade()?;
    Some(RemoteHandle { inner })
}

impl RemoteHandle {
    /// Queues `job` to run on the runtime's thread and wakes its loop.
    pub(crate) fn send(&self, job: RemoteCall) {
        {
            let mut jobs = self.inner.jobs.lock().ignore_poison();
            jobs.push(job);
            self.inner.pending.store(true, Ordering::Release);
        }
        // A failed wake means the eventfd is gone with its runtime; the job is dropped with it.
        let _ = self.inner.eventfd.wake();
    }
}
