//! `TaskBuilder`: a task with a name or a stack size of its own, or one that starts when a socket
//! turns readable.

use std::time::Instant;

use super::label::Label;
use super::registration::Interest;
use super::{scheduler, spawn_in, JoinHandle, SpawnError, TaskLabel};
use crate::net::Pollable;

/// Options for one task: a name (see [`current_task_name`](super::current_task_name))
/// and the usable size of its stack, when the runtime's default
/// ([`Builder::stack_size`](super::Builder::stack_size)) is not enough for it.
///
/// # Examples
///
/// ```
/// use neverblock::runtime::TaskBuilder;
///
/// neverblock::run(|| {
///     let deep = TaskBuilder::new().name("deep").stack_size(1 << 20).spawn(|| {
///         let big = [7u8; 512 * 1024]; // would overflow the default 128 KiB stack
///         big[std::hint::black_box(100)]
///     });
///     assert_eq!(deep.join().unwrap(), 7);
/// });
/// ```
#[derive(Clone, Debug, Default)]
pub struct TaskBuilder {
    name: Option<Box<str>>,
    stack_size: Option<usize>,
    start: Option<StartWhenReady>,
}

/// When a task made by [`TaskBuilder::when_readable`] starts: on readiness of a socket registered
/// with one loop, or at a deadline.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StartWhenReady {
    /// The loop whose reactor `interest` belongs to.
    pub(crate) scheduler: u64,
    pub(crate) interest: Interest,
    pub(crate) deadline: Option<Instant>,
}

impl TaskBuilder {
    /// The spawner's name, and the runtime's stack size.
    pub fn new() -> TaskBuilder {
        TaskBuilder::default()
    }

    /// Names the task.
    pub fn name(mut self, name: &str) -> TaskBuilder {
        self.name = Some(name.into());
        self
    }

    /// Usable bytes of stack for this task (rounded up to whole pages). Tasks
    /// asking for the same size share the workers that carry them.
    pub fn stack_size(mut self, bytes: usize) -> TaskBuilder {
        self.stack_size = Some(bytes);
        self
    }

    /// Starts the task only once `socket` turns readable (data, end of stream, or an error to
    /// report), or at `deadline`, whichever comes first. Until then it holds no fiber and no
    /// stack: such a task costs the memory of its closure, where a task parked in a read keeps
    /// its fiber's stack pages. The task must find out
    /// itself which it was (a read that would block, or a deadline passed): a start promises
    /// neither.
    ///
    /// The socket is waited on through the calling task's loop, so the task must be spawned on
    /// that loop; if it is called outside a task, if the task is spawned elsewhere, or if the
    /// socket cannot be registered there (it is another live loop's, or the poller refuses it),
    /// the task starts at once, as [`spawn`](crate::spawn)'s do. Cancelled before it starts, it
    /// ends without running.
    ///
    /// # Examples
    ///
    /// A connection that has gone quiet waits for its next message without a fiber:
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use std::time::{Duration, Instant};
    /// use neverblock::net::UnixStream;
    /// use neverblock::runtime::TaskBuilder;
    ///
    /// neverblock::run(|| {
    ///     let (quiet, mut peer) = UnixStream::pair().unwrap();
    ///     let by = Instant::now() + Duration::from_secs(60);
    ///     let next = TaskBuilder::new().when_readable(&quiet, Some(by)).spawn(move || {
    ///         let mut byte = [0];
    ///         (&quiet).read_exact(&mut byte).map(|()| byte[0])
    ///     });
    ///     neverblock::sleep(Duration::from_millis(10));
    ///     peer.write_all(b"!").unwrap();
    ///     assert_eq!(next.join().unwrap().unwrap(), b'!');
    /// });
    /// ```
    pub fn when_readable(mut self, socket: &impl Pollable, deadline: Option<Instant>) -> TaskBuilder {
        self.start = scheduler::in_task().and_then(|s| {
            let interest = socket.read_interest()?;
            Some(StartWhenReady { scheduler: s.id(), interest, deadline })
        });
        self
    }

    /// Starts the task on this thread's runtime (see [`spawn`](crate::spawn)).
    ///
    /// # Panics
    ///
    /// Outside a runtime (see [`try_spawn`](TaskBuilder::try_spawn)).
    #[track_caller]
    pub fn spawn<T: 'static>(self, f: impl FnOnce() -> T + 'static) -> JoinHandle<T> {
        self.try_spawn(f).unwrap_or_else(|e| panic!("neverblock::TaskBuilder::spawn: {e}"))
    }

    /// Like [`spawn`](TaskBuilder::spawn), with an error instead of a panic.
    ///
    /// # Errors
    ///
    /// [`SpawnError::NoRuntime`] outside a runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock::runtime::TaskBuilder;
    ///
    /// assert!(TaskBuilder::new().try_spawn(|| ()).is_err(), "no runtime here");
    /// ```
    #[track_caller]
    pub fn try_spawn<T: 'static>(self, f: impl FnOnce() -> T + 'static) -> Result<JoinHandle<T>, SpawnError> {
        let scheduler = scheduler::current().ok_or(SpawnError::NoRuntime)?;
        let label = match self.name {
            Some(name) => TaskLabel::Own(Label::new(Some(name.into()))),
            None => scheduler.inherited_label(),
        };
        let start = self.start.filter(|start| start.scheduler == scheduler.id());
        Ok(spawn_in(&scheduler, label, self.stack_size, start, f))
    }
}
