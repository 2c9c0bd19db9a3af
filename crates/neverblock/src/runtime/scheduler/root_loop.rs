//! The root's loop: what the root fiber runs between tasks. It continues the
//! runnable tasks, then asks the reactor for what is ready (without a system
//! call while tasks are runnable and nobody waits for I/O), until the main task
//! ends or nothing can ever wake a parked one.

use std::io;
use std::time::Duration;

use super::tasks::key;
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
    /// one, when the poller fails, or when a task cannot be continued where it waits.
    pub(crate) fn run_until_done(&self, main: u64) -> io::Result<()> {
        self.main.set(main);
        self.turns.start();
        let ended = self.run_turns(main);
        self.turns.end_and_stop();
        ended
    }

    /// The loop of [`run_until_done`](Self::run_until_done): a turn per poll.
    fn run_turns(&self, main: u64) -> io::Result<()> {
        loop {
            self.switches.set(0);
            if let Some(next) = self.next_fiber() {
                if let Err(e) = next.switch_to() {
                    return Err(io::Error::other(format!("a task could not be continued: {e}")));
                }
            }
            self.turns.beacon().running(0);
            if let Some(id) = self.current.take() {
                // The task handed control to the root without parking (a raw transfer):
                // nothing will wake it (no wake-up carries its turn), so it stays parked for good.
                log::error!("task {id} transferred to the scheduler without parking; it stays parked");
            }
            if self.with_task(main, |_| ()).is_none() {
                return Ok(());
            }
            let idle = self.tasks.borrow().nothing_runnable();
            // Parked for good unless another thread wakes one of them: tasks on sync
            // primitives another thread could hold, checked again every second. A lock held on
            // this thread only this loop can release.
            let stalled =
                idle && !self.reactor.has_timers() && !self.reactor.has_fd_waiters() && !self.remote.may_wake();
            let wakeable_elsewhere = self.waiting.get().saturating_sub(self.parked_on_own_locks());
            if stalled && (wakeable_elsewhere == 0 || super::dump::alone_in_the_process()) {
                return Err(io::Error::new(io::ErrorKind::Deadlock, self.deadlock_report()));
            }
            crate::runtime::turn_end::end_turn();
            // While tasks are runnable and nobody waits for an fd or has handed in
            // work, only the due timers are looked at: no system call.
            let found = if idle || self.reactor.has_fd_waiters() || self.remote.has_work() {
                if idle {
                    self.retire_unused_workers();
                }
                let timeout = match (idle, stalled) {
                    (false, _) => Some(Duration::ZERO),
                    (true, true) => Some(STALLED_RECHECK),
                    (true, false) => self.next_retirement_in(),
                };
                if idle {
                    // The turn ends before the wait: a loop's time waiting is no part of a turn.
                    self.turns.end_and_wait();
                    let found = self.reactor.turn(timeout);
                    self.turns.start();
                    found?
                } else {
                    let found = self.reactor.turn(timeout)?;
                    self.turns.next();
                    found
                }
            } else {
                let found = self.reactor.expire_timers();
                self.turns.next();
                found
            };
            for wake in found.woken {
                self.take_wake(wake);
            }
            if found.remote {
                self.remote.drain(self);
            }
            self.tasks.borrow_mut().requeue_deferred();
        }
    }

    /// Ends every task left when `run` returns (detached ones, or all of them after a
    /// deadlock): each is cancelled and continued until it has unwound, so everything its
    /// fibers own is dropped, a task parked in a fiber it resumed too (dropping alone would
    /// leak those two: each holds the other). Then drops what is left and the idle workers,
    /// outside any borrow.
    pub(crate) fn drop_tasks(&self) {
        let left: Vec<u64> = self.tasks.borrow().slab.iter().map(|(_, task)| task.id).collect();
        for id in left {
            self.cancel(id);
        }
        loop {
            self.tasks.borrow_mut().requeue_deferred();
            self.switches.set(0);
            let Some(next) = self.next_fiber() else { break };
            let switched = next.switch_to();
            if let (Err(_), Some(id)) = (switched, self.current.take()) {
                // Where it waits cannot be continued (that fiber has finished): dropped as it is.
                let task = self.tasks.borrow_mut().slab.try_remove(key(id));
                drop(task);
            }
        }
        let tasks = std::mem::take(&mut *self.tasks.borrow_mut());
        drop(tasks);
        let idle = std::mem::take(&mut *self.idle_workers.borrow_mut());
        drop(idle);
        let idle = std::mem::take(&mut *self.idle_sized_workers.borrow_mut());
        drop(idle);
    }
}
