//! What every task of a loop is doing, in words: the fiber dump, and the report
//! of a deadlock (every task parked on something only another of them could
//! release, and nothing else alive that could: Go's "all goroutines are asleep").

use std::fmt::Write;
use std::time::Duration;

use super::tasks::Task;
use super::{Scheduler, Wait};
use crate::runtime::beacon::now_ns;
use crate::runtime::sentinel::location;

impl Scheduler {
    /// One line per live task of this loop: its number, name and activity, where it
    /// was spawned, and whether it runs, is runnable, or what it is parked on and
    /// for how long (to within a loop turn: a park is dated by its turn's start).
    pub(crate) fn dump(&self) -> String {
        let tasks = self.tasks.borrow();
        let runnable: Vec<u64> = tasks.runnable_entries().map(|turn| turn.task).collect();
        let mut out = format!("loop {} ({} tasks):\n", self.id(), tasks.slab.len());
        let now = now_ns();
        for (_, task) in tasks.slab.iter() {
            let state = if self.current.get() == Some(task.id) {
                "runs".to_string()
            } else if runnable.contains(&task.id) || (task.resume_at.is_none() && task.waits_on == Wait::Nothing) {
                "is runnable".to_string()
            } else {
                let parked = Duration::from_nanos(now.saturating_sub(task.parked_at));
                format!("is parked on {} for {}", task.waits_on, Rounded(parked))
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

/// `task 4294967298 "worker" doing "GET /" (spawned at src/main.rs:10:5)`.
pub(super) fn describe(task: &Task) -> String {
    let mut out = format!("task {}", task.id);
    if let Some(label) = &task.label {
        let _ = label.write(&mut out);
    }
    let _ = write!(out, " (spawned at {})", location(task.spawned_at));
    out
}

/// A park's age as a person reads it: `350ms`, `2.4s`, `3m05s`.
struct Rounded(Duration);

impl std::fmt::Display for Rounded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.0.as_millis();
        match ms {
            0..1_000 => write!(f, "{ms}ms"),
            1_000..60_000 => write!(f, "{:.1}s", self.0.as_secs_f64()),
            _ => write!(f, "{}m{:02}s", ms / 60_000, ms / 1_000 % 60),
        }
    }
}

/// Whether no thread but this one could wake a fiber parked here: the process
/// has no other thread except idle blocking-pool threads and the sentinel (which
/// only reads), and no blocking-pool job is queued or running. (A thread that
/// holds a sync primitive shared with this loop could release it; with none left,
/// nothing can.)
pub(super) fn alone_in_the_process() -> bool {
    if super::super::blocking::jobs_in_flight() > 0 {
        return false;
    }
    let Ok(threads) = std::fs::read_dir("/proc/self/task") else { return false };
    let threads = threads.count();
    threads <= 1 + super::super::blocking::idle_threads() + super::super::sentinel::threads()
}
