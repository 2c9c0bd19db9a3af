//! The end of a loop's turn: callbacks a task leaves for its loop to run before it next looks
//! for I/O or timers, for state that is true for one turn only.
//!
//! A turn is what a loop does between two looks at the reactor: every task that was runnable
//! has had its go (or 61 task switches have passed, tokio's figure). Something that happened
//! meanwhile outside the loop (a file renamed, a setting changed) reaches a parked task only
//! through such a look, so what a turn's tasks learnt about the world may be shared among them
//! and must be forgotten when the turn ends: the static file handler keeps the files it opened
//! this way. The callbacks are plain function pointers, kept in a thread-local list: no
//! allocation per registration, one check of an empty list per turn when nobody registers.

use std::cell::RefCell;

thread_local! {
    /// The callbacks to run when this thread's loop ends its turn, each once.
    static DUE: RefCell<Vec<fn()>> = const { RefCell::new(Vec::new()) };
}

/// Runs `callback` once on this thread's loop when its turn ends: after the running task and
/// the others the loop continues before it next asks the reactor for I/O or timers, before it
/// does (whether that wait blocks or not), or when the loop itself ends. Registered again before
/// then, it still runs once; registered while the turn's callbacks run, it runs at the end of
/// the next turn. It runs on the loop's root, where nothing may park: it should be short and
/// not block, and a panic in it is logged and goes no further.
///
/// Returns whether it was registered: `false` on a thread no runtime runs on, where there is
/// no loop to end a turn.
///
/// # Examples
///
/// A value worked out once a turn, however many tasks ask for it:
///
/// ```
/// use std::cell::{Cell, RefCell};
/// use std::time::Duration;
///
/// thread_local! {
///     static WORKED_OUT: Cell<u32> = const { Cell::new(0) };
///     static THIS_TURN: RefCell<Option<u32>> = const { RefCell::new(None) };
/// }
///
/// fn forget() {
///     THIS_TURN.set(None);
/// }
///
/// fn value() -> u32 {
///     THIS_TURN.with_borrow_mut(|kept| {
///         *kept.get_or_insert_with(|| {
///             neverblock::runtime::at_turn_end(forget);
///             WORKED_OUT.set(WORKED_OUT.get() + 1);
///             42
///         })
///     })
/// }
///
/// neverblock::run(|| {
///     let askers: Vec<_> = (0..10).map(|_| neverblock::spawn(value)).collect();
///     assert!(askers.into_iter().all(|asker| asker.join().unwrap() == 42));
///     assert_eq!(WORKED_OUT.get(), 1, "the ten tasks ran in one turn");
///     neverblock::sleep(Duration::from_millis(1)); // the loop waits: the turn ends
///     assert_eq!(value(), 42);
///     assert_eq!(WORKED_OUT.get(), 2);
/// });
/// assert!(!neverblock::runtime::at_turn_end(forget), "no loop here");
/// ```
pub fn at_turn_end(callback: fn()) -> bool {
    if super::scheduler::current().is_none() {
        return false;
    }
    DUE.with_borrow_mut(|due| {
        // By address: the same function may have two (then it runs twice, which a callback
        // that forgets state tolerates), and two identical ones one (then either does both's job).
        if !due.iter().any(|&f| std::ptr::fn_addr_eq(f, callback)) {
            due.push(callback);
        }
    });
    true
}

/// Runs the callbacks registered on this thread since the last call: the loop's turn ends. One
/// check when there are none.
#[inline]
pub(crate) fn end_turn() {
    if DUE.with_borrow(Vec::is_empty) {
        return;
    }
    run_due();
}

/// Runs the callbacks due now; those registered meanwhile wait for the next turn's end.
#[cold]
fn run_due() {
    let mut due = DUE.take();
    for &callback in &due {
        if let Err(payload) = std::panic::catch_unwind(callback) {
            let why = crate::fiber::PanicPayload::new(payload);
            log::error!("a callback at the end of a loop's turn panicked: {}", why.message().unwrap_or("(no message)"));
        }
    }
    due.clear();
    // The list keeps its allocation, with whatever the callbacks registered for the next turn.
    DUE.with_borrow_mut(|next| {
        due.append(next);
        *next = due;
    });
}
