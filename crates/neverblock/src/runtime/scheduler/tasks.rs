//! The task table: each live task's state (its body, the fiber it continues at,
//! its turn number, its `timeout` scopes), the run queue, and what happens when a
//! task is spawned, cancelled, timed out or ends.

use std::num::NonZeroU32;
use std::panic::Location;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use slab::Slab;

use super::{Outcome, Scheduler, Wait, POLL_EVERY};
use crate::fiber::{inherited_now, Fiber, Inherited, PanicPayload};
use crate::fifo::Fifo;
use crate::reactor::timer::TimerKey;
use crate::reactor::{Alarm, Turn, Wake};
use crate::runtime::beacon::label_key;
use crate::runtime::label::Label;
use crate::runtime::task::TaskBody;
use crate::runtime::task_builder::StartWhenReady;

/// A new task's turn number (`Task::turn`).
pub(super) const FIRST_TURN: u64 = 0;

pub(super) struct Task {
    /// `seq << 32 | slab key`: unique among live tasks, and a wake for an ended
    /// task never finds the next task in its slab entry.
    pub(super) id: u64,
    /// What the task runs and the fiber-local values it starts with, until a
    /// worker fiber takes them up.
    pub(super) start: Option<(Rc<dyn TaskBody>, Inherited)>,
    /// The fiber to continue when woken: the worker running the task, or a fiber
    /// the task resumed that parked. `None` until the task starts.
    pub(super) resume_at: Option<Fiber<()>>,
    /// The number of the task's turn: taken afresh each time it is continued (and
    /// when a park turns out not to be needed), handed to the wake-ups of its next
    /// park. A queue entry or wake-up under an older number is stale.
    pub(super) turn: u64,
    pub(super) cancelled: bool,
    /// Deadlines of the `timeout` scopes the task is inside, innermost last.
    pub(super) deadlines: Vec<(Instant, TimerKey)>,
    pub(super) timed_out: bool,
    /// Its name and activity; shared with the tasks that inherited it unless `own_label`. (A
    /// `TaskLabel` here would take 16 bytes where these take 9, and a task over 128 bytes pays a
    /// `memcpy` call per move.)
    pub(super) label: Option<Arc<Label>>,
    pub(super) own_label: bool,
    /// When the loop turn in which it last parked started (`beacon::now_ns`): a park's age, to
    /// within a turn, without a clock read per park.
    pub(super) parked_at: u64,
    /// Where `spawn` was called, for dumps and deadlock reports.
    pub(super) spawned_at: &'static Location<'static>,
    /// What the task waits for while parked.
    pub(super) waits_on: Wait,
    /// The usable stack it asked for in KiB, if not its runtime's (four bytes: a task is
    /// moved whole in and out of the slab, and kept under 128 bytes it moves without a memcpy call).
    pub(super) stack_kib: Option<NonZeroU32>,
}

impl Task {
    /// The stack its worker must have: the size it asked for, else the runtime's `default`.
    pub(super) fn stack_size(&self, default: usize) -> usize {
        self.stack_kib.map_or(default, |kib| kib.get() as usize * 1024)
    }
}

/// The label a new task starts with.
#[derive(Debug)]
pub(crate) enum TaskLabel {
    /// None: no name, no activity.
    Nothing,
    /// One of its own (`spawn_named`).
    Own(Arc<Label>),
    /// Its spawner's, shared until it says what it does ([`TaskActivity`](crate::runtime::TaskActivity)).
    Inherited(Arc<Label>),
}

/// The live tasks and the run queue, under one borrow.
#[derive(Default)]
pub(super) struct Tasks {
    pub(super) slab: Slab<Task>,
    /// Tasks to continue, in order, each under the turn it was made runnable in:
    /// an entry is stale once its number is not its task's `turn`. Wake-ups are
    /// queued unchecked, so a task may have more than one entry; the first one
    /// taken off continues it, which makes the rest stale.
    pub(super) queue: Fifo<Turn>,
    /// Tasks that yielded, in order: they join the back of `queue` after the loop's next look for
    /// I/O and timers, behind the tasks that look makes runnable.
    pub(super) deferred: Vec<Turn>,
}

impl Tasks {
    /// Every entry of the run queue and of the yielded tasks (stale ones too).
    pub(super) fn runnable_entries(&self) -> impl Iterator<Item = &Turn> {
        self.queue.iter().chain(&self.deferred)
    }

    /// Whether nothing is queued or yielded.
    pub(super) fn nothing_runnable(&self) -> bool {
        self.queue.is_empty() && self.deferred.is_empty()
    }

    /// Puts the yielded tasks at the back of the run queue: the loop has looked for I/O and timers.
    pub(super) fn requeue_deferred(&mut self) {
        self.queue.extend(self.deferred.drain(..));
    }
}

impl Scheduler {
    /// Adds a task running `body`, spawned at `spawned_at`: runnable, or, with `start`, parked
    /// without a fiber until its socket is ready or its deadline.
    pub(crate) fn spawn(
        &self,
        label: TaskLabel,
        body: Rc<dyn TaskBody>,
        spawned_at: &'static Location<'static>,
        stack_size: Option<usize>,
        start: Option<StartWhenReady>,
    ) -> u64 {
        let seq = self.next_seq.get();
        self.next_seq.set(seq.checked_add(1).unwrap_or(1));
        let mut tasks = self.tasks.borrow_mut();
        let tasks = &mut *tasks;
        let entry = tasks.slab.vacant_entry();
        let id = u64::from(seq) << 32 | entry.key() as u64;
        let (label, own_label) = match label {
            TaskLabel::Nothing => (None, false),
            TaskLabel::Own(label) => (Some(label), true),
            TaskLabel::Inherited(label) => (Some(label), false),
        };
        self.turns.beacon().identities.spawned(id, spawned_at, label_key(label.as_ref()));
        entry.insert(Task {
            id,
            start: Some((body, inherited_now())),
            resume_at: None,
            turn: FIRST_TURN,
            cancelled: false,
            deadlines: Vec::new(),
            timed_out: false,
            label,
            own_label,
            parked_at: 0,
            spawned_at,
            waits_on: Wait::Nothing,
            stack_kib: stack_size.map(|bytes| {
                let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
                NonZeroU32::new(kib).unwrap_or(NonZeroU32::MIN)
            }),
        });
        let turn = Turn { task: id, number: FIRST_TURN };
        match start.and_then(|start| start.interest.park_unstarted(self, turn, start.deadline)) {
            Some(wait) => {
                let task = &mut tasks.slab[key(id)];
                task.waits_on = Wait::Start(wait);
                task.parked_at = self.turns.started();
            }
            None => tasks.queue.push_back(turn),
        }
        self.live_tasks.store(self.live_tasks.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        id
    }

    pub(crate) fn current_task(&self) -> Option<u64> {
        self.current.get()
    }

    /// The label of task `id`, if it has one.
    pub(crate) fn task_label(&self, id: u64) -> Option<Arc<Label>> {
        self.with_task(id, |t| t.label.clone()).flatten()
    }

    /// The label a task spawned now inherits: the running task's, if any.
    pub(crate) fn inherited_label(&self) -> TaskLabel {
        match self.current.get().and_then(|id| self.task_label(id)) {
            Some(label) => TaskLabel::Inherited(label),
            None => TaskLabel::Nothing,
        }
    }

    /// The running task's own label: made now if it has none, or has its spawner's (keeping
    /// the name), and published as the running task's.
    pub(crate) fn own_label(&self) -> Arc<Label> {
        let id = self.current.get().expect("a task runs");
        let label = self
            .with_task(id, |task| match &task.label {
                Some(label) if task.own_label => label.clone(),
                inherited => {
                    let label = Label::new(inherited.as_ref().and_then(|label| label.name().cloned()));
                    task.label = Some(label.clone());
                    task.own_label = true;
                    label
                }
            })
            .expect("the running task is registered");
        self.turns.beacon().identities.labelled(id, label_key(Some(&label)));
        label
    }

    pub(super) fn with_task<R>(&self, id: u64, f: impl FnOnce(&mut Task) -> R) -> Option<R> {
        live(&mut self.tasks.borrow_mut().slab, id).map(f)
    }

    /// Reports how a task ended: its timers go, its joiner hears.
    pub(super) fn end(&self, task: &Task, body: &dyn TaskBody, outcome: Outcome) {
        self.live_tasks.store(self.live_tasks.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        for (_, key) in &task.deadlines {
            self.reactor.cancel_timer(*key);
        }
        if task.id == self.main.get() {
            self.switches.set(POLL_EVERY); // back to the root, which returns
        }
        body.complete(outcome, self);
    }

    /// Ends the task `id`, which ran `body` to its end on the running worker.
    pub(super) fn finish(&self, id: u64, body: &dyn TaskBody, ran: std::thread::Result<()>) {
        let task = self.tasks.borrow_mut().slab.remove(key(id));
        let outcome = match ran {
            Ok(()) => Outcome::Returned,
            Err(payload) if task.cancelled || crate::fiber::is_kill_unwind(&*payload) => Outcome::Cancelled,
            Err(payload) => Outcome::Panicked(PanicPayload::new(payload)),
        };
        self.end(&task, body, outcome);
    }

    /// Asks a task to stop: it unwinds from the call it is parked in (at once if
    /// it never ran); nothing if the task is already gone.
    pub(crate) fn cancel(&self, id: u64) {
        self.interrupt(id, |task| task.cancelled = true);
    }

    /// Marks task `id` with `mark` and, unless it is the running one, queues it
    /// under its turn: a parked task is continued, and an entry for a task already
    /// queued is one more of the same turn.
    #[cold]
    pub(super) fn interrupt(&self, id: u64, mark: impl FnOnce(&mut Task)) {
        let mut tasks = self.tasks.borrow_mut();
        let tasks = &mut *tasks;
        let Some(task) = live(&mut tasks.slab, id) else { return };
        mark(task);
        if self.current.get() != Some(id) {
            tasks.queue.push_back(Turn { task: id, number: task.turn });
        }
    }

    /// Enters a `timeout` scope ending at `deadline` for the running task.
    pub(crate) fn push_deadline(&self, deadline: Instant) {
        let id = self.current.get().expect("timeout is called from a task");
        let key = self.reactor.add_timer(deadline, Alarm::Wake(Wake::TimeOut(id)));
        self.with_task(id, |task| {
            task.deadlines.push((deadline, key));
            task.timed_out |= deadline <= Instant::now();
        })
        .expect("the running task is registered");
    }

    /// Leaves the innermost `timeout` scope; returns whether its deadline passed.
    pub(crate) fn pop_deadline(&self) -> bool {
        let id = self.current.get().expect("timeout is called from a task");
        let now = Instant::now();
        let (deadline, key) = self
            .with_task(id, |task| {
                let (deadline, key) = task.deadlines.pop().expect("scopes are balanced");
                task.timed_out = task.deadlines.iter().any(|(d, _)| *d <= now);
                (deadline, key)
            })
            .expect("the running task is registered");
        self.reactor.cancel_timer(key);
        deadline <= now
    }
}

/// The slab slot of task `id` (its low 32 bits).
pub(super) fn key(id: u64) -> usize {
    id as u32 as usize
}

/// Task `id`, if it is still alive (its slot may hold a later task).
pub(super) fn live(tasks: &mut Slab<Task>, id: u64) -> Option<&mut Task> {
    tasks.get_mut(key(id)).filter(|t| t.id == id)
}

/// Points a task that is about to wait at the running fiber (its worker, or a
/// fiber it resumed), where it continues when woken. Returns the handle it
/// replaces, for the caller to drop once its borrow of the task ends.
pub(super) fn continue_here(task: &mut Task) -> Option<Fiber<()>> {
    if task.resume_at.as_ref().is_some_and(Fiber::is_current) {
        return None;
    }
    task.resume_at.replace(Fiber::current())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_task_moves_without_a_memcpy_call() {
        // Larger, a spawn-and-join pays a memcpy call for each move in and out of the slab.
        assert!(std::mem::size_of::<super::Task>() <= 128, "{} bytes", std::mem::size_of::<super::Task>());
    }
}
