//! Dropping fibers: suspended stacks unwind and their destructors run.

use std::cell::Cell;
use std::rc::Rc;

use neverblock::fiber::{self, Fiber, FiberError};

use crate::support::Tracked;

#[test]
fn dropping_a_yielded_fiber_runs_its_destructors() {
    let drops = Rc::new(Cell::new(0));
    let held = Tracked(drops.clone());
    let f = Fiber::new(move |_: ()| {
        let _on_stack = held;
        fiber::yield_now(()).unwrap();
        unreachable!("never resumed again");
    })
    .unwrap();
    f.resume(()).unwrap();
    assert_eq!(drops.get(), 0);
    drop(f);
    assert_eq!(drops.get(), 1);
}

#[test]
fn dropping_a_transferred_fiber_runs_its_destructors() {
    let drops = Rc::new(Cell::new(0));
    let held = Tracked(drops.clone());
    let root = Fiber::<()>::current();
    let f = Fiber::new(move |_: ()| {
        let _on_stack = held;
        root.transfer(()).unwrap();
    })
    .unwrap();
    f.transfer(()).unwrap();
    drop(f);
    assert_eq!(drops.get(), 1);
}

#[test]
fn dropping_a_fiber_never_started_drops_its_closure() {
    let drops = Rc::new(Cell::new(0));
    let held = Tracked(drops.clone());
    let f = Fiber::new(move |_: ()| drop(held)).unwrap();
    drop(f);
    assert_eq!(drops.get(), 1);
}

#[test]
fn a_chain_of_suspended_fibers_unwinds_from_its_head() {
    let drops = Rc::new(Cell::new(0));
    fn link(n: u32, drops: Rc<Cell<u32>>) -> Fiber<()> {
        Fiber::new(move |_: ()| {
            let _mine = Tracked(drops.clone());
            let next = if n > 0 { Some(link(n - 1, drops)) } else { None };
            if let Some(next) = &next {
                next.resume(()).unwrap();
            }
            fiber::yield_now(()).unwrap();
        })
        .unwrap()
    }
    let head = link(50, drops.clone());
    head.resume(()).unwrap();
    assert_eq!(drops.get(), 0);
    drop(head);
    assert_eq!(drops.get(), 51);
}

#[test]
fn destructors_of_a_dropped_fiber_may_not_switch() {
    struct SwitchOnDrop(Rc<Cell<Option<String>>>);
    impl Drop for SwitchOnDrop {
        fn drop(&mut self) {
            let refused = fiber::yield_now(0u8).unwrap_err();
            self.0.set(Some(refused.to_string()));
        }
    }
    let seen = Rc::new(Cell::new(None));
    let guard = SwitchOnDrop(seen.clone());
    let f = Fiber::new(move |_: u8| {
        let _g = guard;
        fiber::yield_now(1u8).unwrap()
    })
    .unwrap();
    f.resume(0).unwrap();
    drop(f);
    assert_eq!(seen.take().as_deref(), Some("attempt to switch fibers while a dropped or killed fiber unwinds"));
    assert!(matches!(Fiber::new(|x: u8| x).unwrap().resume(2), Ok(2)), "switching works again afterwards");
}

#[test]
fn a_panicking_fiber_drops_what_it_held() {
    let drops = Rc::new(Cell::new(0));
    let held = Tracked(drops.clone());
    let f = Fiber::new(move |_: ()| {
        let _on_stack = held;
        panic!("boom");
    })
    .unwrap();
    assert!(matches!(f.resume(()), Err(FiberError::Panicked(_))));
    assert_eq!(drops.get(), 1);
}
