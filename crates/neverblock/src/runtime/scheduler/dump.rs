//! What every task of a loop is doing, in words: the fiber dump, and the report
//! of a deadlock (every task parked on something only another of them could
//! release, and nothing else alive that could: Go's "all goroutines are asleep").

use std::fmt::{self, Write};
use std::panic::Location;

use super::tasks::Task;
use super::Scheduler;
use crate::reactor::Direction;

/// What a parked task waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Not parked since it last ran (it runs, or waits in the run queue).
    Nothing,
    /// A sleep or a deadline.
    Sleep,
    /// An fd to become readable or writable.
    Fd(Direction),
    /// The end of another task.
    Join(u64),
    /// A sync primitive.
    Sync(Primitive),
    /// A job on the blocking pool.
    Blocking,
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::Nothing => f.write_str("nothing"),
            Wait::Sleep => f.write_str("a timer"),
            Wait::Fd(Direction::Read) => f.write_str("an fd to become readable"),
            Wait::Fd(Direction::Write) => f.write_str("an fd to become writable"),
            Wait::Join(id) => write!(f, "the end of task {id}"),
            Wait::Sync(primitive) => primitive.fmt(f),
            Wait::Blocking => f.write_str("a blocking-pool job"),
        }
    }
}

/// The sync primitive a task waits on, in words (kept one byte, so a task stays small).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Primitive {
    Mutex,
    Semaphore,
    ChannelMessage,
    ChannelRoom,
    RendezvousReceiver,
    Oneshot,
    Notify,
    WaitGroup,
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Primitive::Mutex => "a Mutex",
            Primitive::Semaphore => "a Semaphore permit",
            Primitive::ChannelMessage => "a channel message",
            Primitive::ChannelRoom => "room in a channel",
            Primitive::RendezvousReceiver => "a rendezvous channel's receiver",
            Primitive::Oneshot => "a oneshot value",
            Primitive::Notify => "a Notify",
            Primitive::WaitGroup => "a WaitGroup",
        })
    }
}

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
