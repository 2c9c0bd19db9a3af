//! UNSAFE: which scheduler runs on this thread, found in one load.
//!
//! Every park and every wake asks for it, so it is kept twice: the thread-local
//! that owns it, and a plain pointer to it in a `const` thread-local without a
//! destructor, which a read reaches with no lazy-initialisation check and no
//! borrow flag. The pointer is set while the owner holds the scheduler and
//! cleared before the owner lets go of it.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use super::scheduler::Scheduler;
use crate::reactor::source::Token;
use crate::reactor::{Direction, Turn};

thread_local! {
    /// Holds this thread's scheduler from `enter` until its guard drops.
    static OWNER: Cell<Option<Rc<Scheduler>>> = const { Cell::new(None) };
    /// The scheduler `OWNER` holds, or null.
    static RUNNING: Cell<*const Scheduler> = const { Cell::new(std::ptr::null()) };
}

/// Makes `scheduler` this thread's until the guard drops.
pub(super) fn enter(scheduler: &Rc<Scheduler>) -> impl Drop {
    struct Exit;
    impl Drop for Exit {
        fn drop(&mut self) {
            // The pointer goes first: nothing may reach the scheduler through it once
            // the owner's count is gone.
            RUNNING.set(std::ptr::null());
            let _ = OWNER.try_with(Cell::take);
        }
    }
    OWNER.set(Some(scheduler.clone()));
    RUNNING.set(Rc::as_ptr(scheduler));
    Exit
}

/// This thread's scheduler, if a runtime runs on it; `running_task` asks for it
/// only when it is running a task.
#[inline(always)]
pub(super) fn get(running_task: bool) -> Option<Rc<Scheduler>> {
    let scheduler = borrow()?;
    if running_task && scheduler.current_task().is_none() {
        return None;
    }
    let ptr: *const Scheduler = scheduler;
    // SAFETY: `ptr` is `RUNNING`, which `enter` took from the `Rc` that `OWNER` holds and
    // clears before `OWNER` lets go of it: the allocation is alive with a strong count
    // of at least one, so adding the count that `from_raw` takes over is sound.
    unsafe {
        Rc::increment_strong_count(ptr);
        Some(Rc::from_raw(ptr))
    }
}

/// Hands `turn` to this thread's scheduler when it is the one numbered `id`;
/// false when it is not (or no runtime runs here). `Scheduler::wake` only queues
/// work and never switches fibers, so the scheduler is borrowed without a count.
#[inline(always)]
pub(super) fn wake_if_here(id: u64, turn: Turn) -> bool {
    borrow_if(id).map(|scheduler| scheduler.wake(turn)).is_some()
}

/// Whether the fd registered as `token` may be ready for `direction`, when this thread's
/// scheduler is its `home` (`None` otherwise). A read of the reactor's table: no switch.
#[inline(always)]
pub(super) fn fd_may_be_ready(home: u64, token: Token, direction: Direction) -> Option<bool> {
    borrow_if(home).map(|s| s.reactor().is_ready(token, direction))
}

/// Notes that an operation in `direction` on the fd registered as `token` would block, when this
/// thread's scheduler is its `home`. A write to the reactor's table: no switch.
#[inline(always)]
pub(super) fn fd_would_block(home: u64, token: Token, direction: Direction) {
    if let Some(s) = borrow_if(home) {
        s.reactor().clear_ready(token, direction);
    }
}

/// When the running turn of this thread's scheduler began, if one of its tasks runs. A read.
#[inline(always)]
pub(super) fn turn_started_in_task() -> Option<Instant> {
    borrow().filter(|s| s.current_task().is_some()).map(Scheduler::turn_started)
}

/// Whether a task of this thread's scheduler is running (so the caller may park it).
#[cfg(feature = "hooks")]
#[inline(always)]
pub(super) fn runs_task() -> bool {
    borrow().is_some_and(|scheduler| scheduler.current_task().is_some())
}

/// The number of this thread's scheduler, 0 when no runtime runs here.
#[inline(always)]
pub(super) fn id() -> u64 {
    borrow().map_or(0, Scheduler::id)
}

/// [`borrow`], when this thread's scheduler is the one numbered `id` (never 0).
#[inline(always)]
fn borrow_if<'a>(id: u64) -> Option<&'a Scheduler> {
    borrow().filter(|scheduler| scheduler.id() == id)
}

/// This thread's scheduler, borrowed for a call that does not switch fibers.
/// Private: a borrow kept across a switch could outlive the runtime, in a fiber
/// someone continues after it has ended, where an `Rc` from [`get`] keeps it alive.
#[inline(always)]
fn borrow<'a>() -> Option<&'a Scheduler> {
    let ptr = RUNNING.get();
    // SAFETY: non-null, `ptr` points into the `Rc` that `OWNER` holds (see `get`). The
    // callers use the reference only for calls that return without switching fibers
    // (task-state reads, `Scheduler::wake`, `Scheduler::id`, the reactor's readiness
    // table, the turn's start);
    // `OWNER` lets go of it only when `enter`'s guard drops, which happens on the root
    // fiber, after `RUNNING` is null: so not while such a call runs, on any fiber.
    unsafe { ptr.as_ref() }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::{enter, get, wake_if_here};
    use crate::reactor::Turn;
    use crate::runtime::scheduler::Scheduler;

    #[test]
    fn the_scheduler_is_this_threads_until_the_guard_drops_and_no_count_is_left_behind() {
        let scheduler = Rc::new(Scheduler::new(crate::runtime::LoopSettings::default()).unwrap());
        assert!(get(false).is_none());
        let guard = enter(&scheduler);
        let found = get(false).expect("entered");
        assert!(Rc::ptr_eq(&found, &scheduler));
        assert_eq!(Rc::strong_count(&scheduler), 3, "ours, the owner's and the one found");
        drop(found);
        assert!(get(true).is_none(), "no task runs on the root");
        drop(guard);
        assert!(get(false).is_none());
        assert_eq!(Rc::strong_count(&scheduler), 1);
    }

    #[test]
    fn a_wake_is_taken_only_by_the_scheduler_it_names() {
        let turn = Turn { task: 1, number: 1 };
        assert!(!wake_if_here(1, turn), "no runtime here");
        let scheduler = Rc::new(Scheduler::new(crate::runtime::LoopSettings::default()).unwrap());
        let _guard = enter(&scheduler);
        assert!(!wake_if_here(scheduler.id() + 1, turn), "another runtime's wake is not this one's");
        assert!(wake_if_here(scheduler.id(), turn));
    }
}
