//! Work handed to a runtime's thread from other threads: closures queued under a
//! lock, and the loop woken through its eventfd.

use std::sync::{Arc, Mutex};

use super::scheduler::Scheduler;
use crate::sys::epoll::Waker;

type Job = Box<dyn FnOnce(&Scheduler) + Send>;

/// The receiving end, owned by the runtime's thread.
pub(crate) struct Remote {
    inner: Arc<Inner>,
}

/// A sending end: `Send + Sync`, cheap to clone.
#[derive(Clone)]
pub(crate) struct RemoteHandle {
    inner: Arc<Inner>,
}

struct Inner {
    jobs: Mutex<Vec<Job>>,
    waker: Arc<Waker>,
}

impl Remote {
    pub(crate) fn new(waker: Arc<Waker>) -> Remote {
        Remote { inner: Arc::new(Inner { jobs: Mutex::new(Vec::new()), waker }) }
    }

    pub(crate) fn handle(&self) -> RemoteHandle {
        RemoteHandle { inner: self.inner.clone() }
    }

    /// Whether another thread could still hand in work (a handle is alive or work waits).
    pub(crate) fn may_wake(&self) -> bool {
        Arc::strong_count(&self.inner) > 1 || !self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Runs every job handed in so far, on this thread.
    pub(crate) fn drain(&self, scheduler: &Scheduler) {
        let jobs = std::mem::take(&mut *self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner()));
        for job in jobs {
            job(scheduler);
        }
    }
}

impl RemoteHandle {
    /// Queues `job` to run on the runtime's thread and wakes its loop.
    pub(crate) fn send(&self, job: Job) {
        self.inner.jobs.lock().unwrap_or_else(|p| p.into_inner()).push(job);
        // A failed wake means the eventfd is gone with its runtime; the job is dropped with it.
        let _ = self.inner.waker.wake();
    }
}
