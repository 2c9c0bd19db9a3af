//! Ruby's `Fiber#kill` (3.3 and later) and the cases of `Fiber#raise` where MRI 3.4 changed
//! the earlier answer (the running fiber, a resuming one: refused before), after
//! ruby/spec's `core/fiber/kill_spec.rb` and `raise_spec.rb`. The installed MRI is
//! older, so these are checked here only; the cases all versions share are in the
//! live cross-check (`fiber_rules`).

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::rc::Rc;

use neverblock::fiber::{self, Fiber, FiberError};

use crate::support::Tracked;

/// A fiber that yields `()` forever, holding `held` on its stack.
fn yielder(held: Tracked) -> Fiber<()> {
    Fiber::new(move |_: ()| {
        let _held = held;
        loop {
            fiber::yield_now(()).unwrap();
        }
    })
    .unwrap()
}

#[test]
fn a_fiber_never_resumed_is_killed_without_running_and_its_body_is_dropped() {
    let (ran, dropped) = (Rc::new(Cell::new(false)), Rc::new(Cell::new(0)));
    let (flag, held) = (ran.clone(), Tracked(dropped.clone()));
    let f = Fiber::new(move |_: ()| {
        let _held = held;
        flag.set(true);
    })
    .unwrap();
    assert!(f.is_alive());
    assert!(f.kill().unwrap());
    assert!(!f.is_alive());
    assert!(!ran.get(), "the body never runs");
    assert_eq!(dropped.get(), 1, "what the body captured is dropped at the kill");
    assert!(matches!(f.resume(()), Err(FiberError::Terminated)));
}

#[test]
fn a_yielding_fiber_is_killed_and_its_destructors_run() {
    let dropped = Rc::new(Cell::new(0));
    let f = yielder(Tracked(dropped.clone()));
    f.resume(()).unwrap();
    assert!(f.kill().unwrap());
    assert!(!f.is_alive());
    assert_eq!(dropped.get(), 1, "the ensure-like destructor ran");
}

#[test]
fn a_second_kill_does_nothing_and_says_so() {
    let f = yielder(Tracked(Rc::new(Cell::new(0))));
    f.resume(()).unwrap();
    assert!(f.kill().unwrap());
    assert!(!f.kill().unwrap());
    let finished = Fiber::new(|x: u8| x).unwrap();
    finished.resume(1).unwrap();
    assert!(finished.kill().unwrap(), "a finished fiber is killed as it is");
    assert!(!finished.kill().unwrap());
}

#[test]
fn a_fiber_can_kill_itself_and_its_resumer_hears_it_was_killed() {
    let after = Rc::new(Cell::new(false));
    let flag = after.clone();
    let f = Fiber::new(move |_: ()| {
        let _ = Fiber::<()>::current().kill();
        flag.set(true);
    })
    .unwrap();
    assert!(matches!(f.resume(()), Err(FiberError::Killed)));
    assert!(!after.get(), "kill of the running fiber does not return");
    assert!(!f.is_alive());
}

#[test]
fn killing_a_fiber_that_is_resuming_the_caller_raises_in_the_caller_and_kills_only_the_target() {
    // MRI: `rb_fiber_m_kill` marks the parent killed and raises nil into the last fiber of its
    // chain, the running child, where Ruby makes it a RuntimeError "unhandled exception".
    let log = Rc::new(RefCell::new(Vec::new()));
    let parent_slot: Rc<RefCell<Option<Fiber<()>>>> = Rc::new(RefCell::new(None));
    let (slot, child_log, parent_log) = (parent_slot.clone(), log.clone(), log.clone());
    let dropped = Rc::new(Cell::new(0));
    let held = Tracked(dropped.clone());
    let parent = Fiber::new(move |_: ()| {
        let _held = held;
        let child = Fiber::new(move |_: ()| {
            let parent = slot.borrow().clone().expect("set before the resume");
            let killed = parent.kill();
            let raised = match &killed {
                Err(FiberError::Raised(e)) => e.message().unwrap_or_default().to_owned(),
                other => format!("{other:?}"),
            };
            child_log.borrow_mut().push(format!("child continued after: {raised}"));
        })
        .unwrap();
        let _ = child.resume(());
        parent_log.borrow_mut().push("parent continued".to_owned());
    })
    .unwrap();
    *parent_slot.borrow_mut() = Some(parent.clone());
    assert!(matches!(parent.resume(()), Err(FiberError::Killed)));
    assert!(!parent.is_alive());
    assert_eq!(dropped.get(), 1, "the parent unwound once control came back to it");
    assert_eq!(*log.borrow(), ["child continued after: unhandled exception"], "only the parent was killed");
}

#[test]
fn killing_a_fiber_resuming_a_suspended_chain_raises_at_its_end_and_the_target_unwinds_on_return() {
    // The root transfers to `outer`, which resumes `inner`, which transfers back to the root:
    // `outer` is resuming `inner`, and `inner` waits in its transfer.
    let root = Fiber::<()>::current();
    let log = Rc::new(RefCell::new(Vec::new()));
    let inner_log = log.clone();
    let inner = Fiber::new(move |_: ()| match root.transfer(()) {
        Err(FiberError::Raised(e)) => {
            inner_log.borrow_mut().push(format!("inner handled: {}", e.message().unwrap_or_default()));
        }
        other => inner_log.borrow_mut().push(format!("inner got {other:?}")),
    })
    .unwrap();
    let dropped = Rc::new(Cell::new(0));
    let (held, outer_log, resumed) = (Tracked(dropped.clone()), log.clone(), inner.clone());
    let outer = Fiber::new(move |_: ()| {
        let _held = held;
        let _ = resumed.resume(());
        outer_log.borrow_mut().push("outer continued".to_owned());
    })
    .unwrap();
    outer.transfer(()).unwrap();
    assert!(outer.kill().unwrap(), "control came back to the root when outer ended");
    assert_eq!(*log.borrow(), ["inner handled: unhandled exception"], "inner went on; outer did not");
    assert_eq!(dropped.get(), 1, "outer unwound when inner's end returned control to it");
    assert!(!inner.is_alive() && !outer.is_alive());
}

#[test]
fn public_fiber_calls_on_a_thread_that_never_made_a_fiber_return_errors() {
    let outcomes = std::thread::spawn(|| {
        let yielded = fiber::yield_now(1u32).map_err(|e| e.to_string());
        let killed = Fiber::<()>::current().kill().map_err(|e| e.to_string());
        (yielded, killed)
    })
    .join()
    .expect("no call panicked");
    assert_eq!(outcomes.0, Err("attempt to yield on a not resumed fiber".to_owned()));
    assert_eq!(outcomes.1, Err(FiberError::KillRoot.to_string()));
}

#[test]
fn a_killed_fiber_entered_by_transfer_returns_control_where_a_transferred_fiber_ends() {
    let states = Rc::new(RefCell::new(Vec::new()));
    let seen = states.clone();
    let runner = Fiber::new(move |_: ()| {
        let doomed = Fiber::new(|_: ()| {
            let _ = Fiber::<()>::current().kill();
            unreachable!("killed");
        })
        .unwrap();
        let came_back = doomed.transfer(());
        seen.borrow_mut().push(format!("runner resumed: {}", came_back.unwrap_err()));
    })
    .unwrap();
    runner.resume(()).unwrap();
    assert_eq!(*states.borrow(), ["runner resumed: the fiber was killed"]);
}

#[test]
fn a_killed_fiber_may_not_switch_while_it_unwinds_and_ends_killed_even_if_it_catches() {
    let refused = Rc::new(RefCell::new(None));
    let seen = refused.clone();
    let f = Fiber::new(move |_: ()| {
        let caught = panic::catch_unwind(AssertUnwindSafe(|| loop {
            fiber::yield_now(()).unwrap();
        }));
        assert!(neverblock::runtime::is_cancellation(&*caught.unwrap_err()));
        *seen.borrow_mut() = Some(fiber::yield_now(()).unwrap_err().to_string());
    })
    .unwrap();
    f.resume(()).unwrap();
    assert!(f.kill().unwrap());
    assert_eq!(refused.borrow().as_deref(), Some("attempt to switch fibers while a dropped or killed fiber unwinds"));
    assert!(!f.is_alive());
}

#[test]
fn the_root_fiber_cannot_be_killed() {
    assert!(matches!(Fiber::<()>::current().kill(), Err(FiberError::KillRoot)));
}

#[test]
fn raising_into_the_running_fiber_returns_the_error_there() {
    let f = Fiber::new(|_: u8| match Fiber::<u8>::current().raise("here") {
        Err(FiberError::Raised(e)) => e.message().map_or(0, |m| m.len() as u8),
        _ => 0,
    })
    .unwrap();
    assert_eq!(f.resume(0).unwrap(), 4, "MRI 3.4 raises it in place (earlier versions refused)");
}

#[test]
fn raising_into_a_resuming_fiber_reaches_the_last_fiber_it_resumed() {
    // The root resumes `outer`, which resumes `inner`, which transfers back to the root:
    // `outer` is resuming `inner`, and `inner` waits in its transfer.
    let root = Fiber::<u8>::current();
    let inner = Fiber::new(move |_: u8| match root.transfer(1) {
        Err(FiberError::Raised(e)) => root.transfer(e.message().map_or(0, |m| m.len() as u8)).unwrap(),
        _ => 0,
    })
    .unwrap();
    let held = inner.clone();
    let outer = Fiber::new(move |_: u8| held.resume(0).unwrap_or(99)).unwrap();
    assert_eq!(outer.transfer(0).unwrap(), 1);
    assert_eq!(outer.raise("abcde").unwrap(), 5, "inner got it (MRI before 3.4 refused: a resuming fiber)");
    // Both finish: inner returns to outer, which resumed it; outer, transferred to, to the root.
    assert_eq!(inner.transfer(0).unwrap(), 0);
    assert!(!inner.is_alive() && !outer.is_alive());
}
