//! `TaskBuilder`: a task with a name or a stack size of its own.

use super::label::Label;
use super::{scheduler, spawn_in, JoinHandle, SpawnError, TaskLabel};

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
        Ok(spawn_in(&scheduler, label, self.stack_size, f))
    }
}
