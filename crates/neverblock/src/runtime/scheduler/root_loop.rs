//! The root's loop: what the root fiber runs between tasks. It continues the
//! runnable tasks, then asks the reactor for what is ready (without a system
//! call while tasks are runnable and nobody waits for I/O), until the main task
//! ends or nothing can ever wake a parked one.

use std::io;
use std::time::Duration;

use super::Scheduler;
use crate::reactor::Wake;

/// How often a loop whose tasks all wait on sync primitives, which another
/// thread might release, looks again whether any thread is left that could.
const STALLED_RECHECK: Duration = Duration::from_secs(1);

impl Scheduler {
    /// Does what the loop found: continues a task, or ends its park because a
    /// `timeout` scope of it expired.
    fn take_wake(&self, wake: Wake) {
        match wake {
            Wake::Continue(turn) => self.wake(turn),
            Wake::TimeOut(task) => self.interrupt(task, |task| task.timed_out = true),
        }
    }

    /// Runs tasks until `main` has finished.
    ///
    /// # Errors
    ///
    /// When every task is parked and nothing (timer, fd, other thread) can wake
    /// one, or when the poller fails.
    pub(crate) fn run_until_done(&self, main: u64) -> io::Result<()> {
        self.main.set(main);
        loop {
            self.switches.set(0);
            if let Some(next) = self.next_fiber() {
                next.switch_to().expect("a task waits in a switch");
            }
            if let Some(id) = self.current.take() {
                // The task handed control to the root without parking (a raw transfer):
                // nothing will wake it (no wake-up carries its turn), so it stays parked for good.
                log::error!("task {id} transferred to the scheduler without parking; it stays parked");
            }
            if self.with_task(main, |_| ()).is_none() {
                return Ok(());
            }
            let idle = self.tasks.borrow().queue.is_empty();
            // Parked for good unless another thread wakes one of them: tasks on sync
            // primitives another thread could hold, checked again every second. A lock held on
            // this thread only this loop can release.
            let stalled =
                idle && !self.reactor.has_timers() && !self.reactor.has_fd_waiters() && !self.remote.may_wake();
            let wakeable_elsewhere = self.waiting.get().saturating_sub(self.parked_on_own_locks());
            if stalled && (wakeable_elsewhere == 0 || super::dump::alone_in_the_process()) {
                return Err(io::Error::new(io::ErrorKind::Deadlock, self.deadlock_report()));
            }
            // While tasks are runnable and nobody waits for an fd or has handed in
            // work, only the due timers are looked at: no system call.
            let found = if idle || self.reactor.has_fd_waiters() || self.remote.has_work() {
                let timeout = match (idle, stalled) {
                    (false, _) => Some(Duration::ZERO),
                    (true, true) => Some(STALLED_RECHECK),
                    (true, false) => None,
                };
                self.reactor.turn(timeout)?
            } else {
                self.reactor.expire_timers()
            };
            for wake in found.woken {
                self.take_wake(wake);
            }
            if found.remote {
                self.remote.drain(self);
            }
        }
    }

    /// Drops every task left (each unwinds its stack) and the idle workers,
    /// outside any borrow.
    pub(crate) fn drop_tasks(&self) {
        let tasks = std::mem::take(&mut *self.tasks.borrow_mut());
        drop(tasks);
        let idle = std::mem::take(&mut *self.idle_workers.borrow_mut());
        drop(idle);
        let idle = std::mem::take(&mut *self.idle_sized_workers.borrow_mut());
        drop(idle);
    }
}
