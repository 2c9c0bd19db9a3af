//! Tasks that could not start for want of a stack. Each one's joiner gets the error; the loop also
//! says so in the log, so that a detached task (a connection's) is not lost unseen: the first such
//! task of each second at once, and those after it within that second counted into the next line
//! (a run of them that stops within the second shows in its first line alone).

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::fiber::StackError;

/// The least time between two lines.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// One loop's log of tasks that could not start.
#[derive(Debug, Default)]
pub(super) struct NoStackLog {
    /// When the last line was logged.
    last: Cell<Option<Instant>>,
    /// Tasks that could not start since that line, not yet in one.
    unlogged: Cell<usize>,
}

impl NoStackLog {
    /// Notes, at `now`, a task that could not start for `error`; logs a line (naming the task with
    /// `describe`, and counting those since the last line) unless one was logged within a second.
    pub(super) fn note(&self, now: Instant, error: &StackError, describe: impl FnOnce() -> String) {
        let failed = self.unlogged.get() + 1;
        if self.last.get().is_some_and(|last| now < last + LOG_EVERY) {
            self.unlogged.set(failed);
            return;
        }
        self.last.set(Some(now));
        self.unlogged.set(0);
        log::warn!("{failed} task(s) could not start since the last such line, the last {}: {error}", describe());
    }
}
