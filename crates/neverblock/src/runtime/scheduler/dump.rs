//! What every task of a loop is doing, in words: the fiber dump, and the report
//! of a deadlock (every task parked on something only another of them could
//! release, and nothing else alive that could: Go's "all goroutines are asleep").

use std::fmt::Write;
use std::panic::Location;

use super::tasks::Task;
use super::Scheduler;

impl Scheduler {
    /// One line per live task of this loop: its number, name, where it was
    /// spawned, and whether it runs, is runnable, or what it is parked on.
    pub(crate) fn dump(&self) -> String {
        let tasks = self.tasks.borrow();
        let runnable: Vec<u64> = tasks.queue.iter().map(|turn| turn.task).collect();
        let mut out = format!("loop {} ({} tasks):\n", self.id(), tasks.slab.len());
        for (_, task) in tasks.slab.iter() {
            let state = if self.current.get() == Some(task.id) {
                "runs".to_string()
            } else if runnable.contains(&task.id) || task.resume_at.is_none() {
                "is runnable".to_string()
            } else {
                format!("is parked on {}", task.waits_on)
            };
            let _ = writeln!(out, "  {} {state}", describe(task));
        }
        out
    }

    /// The deadlock report: the parked tasks and what each waits on.
    pub(super) fn deadlock_report(&self) -> String {
        let tasks = self.tasks.borrow();
        let mut out = String::from("every fiber is parked and nothing can wake one (deadlock):");
        for (_, task) in tasks.slab.iter() {
            let _ = write!(out, "\n  {} waits on {}", describe(task), task.waits_on);
        }
        out
    }
}

/// `task 4294967298 "worker" (spawned at src/main.rs:10:5)`.
fn describe(task: &Task) -> String {
    let name = task.name.as_deref().map(|n| format!(" {n:?}")).unwrap_or_default();
    format!("task {}{name} (spawned at {})", task.id, location(task.spawned_at))
}

fn location(at: &Location<'_>) -> String {
    format!("{}:{}:{}", at.file(), at.line(), at.column())
}

/// Whether no thread but this one could wake a fiber parked here: the process
/// has no other thread except idle blocking-pool threads, and no blocking-pool
/// job is queued or running. (A thread that holds a sync primitive shared with
/// this loop could release it; with none left, nothing can.)
pub(super) fn alone_in_the_process() -> bool {
    if super::super::blocking::jobs_in_flight() > 0 {
        return false;
    }
    let Ok(threads) = std::fs::read_dir("/proc/self/task") else { return false };
    let threads = threads.count();
    threads <= 1 + super::super::blocking::idle_threads()
}
