//! Waits on a lock held on this loop's own thread. A lock's guard cannot leave the thread that
//! took it, so only a fiber of this loop can release such a lock: a task parked on one is stuck
//! unless this loop runs, not wakeable from another thread, when the loop looks for a deadlock.

use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::Scheduler;

/// Which loop's thread holds a lock: its scheduler's number, 0 when the lock is free or held
/// outside a runtime.
pub(crate) type Holder = Arc<AtomicU64>;

/// What a lock's holder records: the number of this thread's loop, 0 outside a runtime.
pub(crate) fn holder_here() -> u64 {
    super::super::running::id()
}

/// A task's wait on a lock, noted with its loop until it ends.
pub(crate) struct LockWait {
    scheduler: Rc<Scheduler>,
    task: u64,
}

/// Notes that the running task is about to park on the lock whose holder `holder` records; `None`
/// outside a task. Dropping the note ends it.
pub(crate) fn note(holder: &Holder) -> Option<LockWait> {
    let scheduler = super::in_task()?;
    let task = scheduler.current_task()?;
    scheduler.lock_waits.borrow_mut().push((task, holder.clone()));
    Some(LockWait { scheduler, task })
}

impl Drop for LockWait {
    fn drop(&mut self) {
        let mut waits = self.scheduler.lock_waits.borrow_mut();
        if let Some(at) = waits.iter().position(|(task, _)| *task == self.task) {
            waits.swap_remove(at);
        }
    }
}

impl Scheduler {
    /// How many of this loop's tasks are parked on locks held on this loop's thread.
    pub(super) fn parked_on_own_locks(&self) -> usize {
        let me = self.id();
        self.lock_waits.borrow().iter().filter(|(_, holder)| holder.load(Ordering::Relaxed) == me).count()
    }
}
