//! Values in every direction, long chains, and types that do not match.

use std::cell::RefCell;
use std::rc::Rc;

use neverblock::fiber::{self, Fiber, FiberError, FiberState};

#[test]
fn values_flow_in_every_direction() {
    let f = Fiber::new(|first: String| {
        let second = fiber::yield_now(format!("yielded {first}")).unwrap();
        let third = fiber::yield_now(format!("yielded {second}")).unwrap();
        format!("returned {third}")
    })
    .unwrap();
    assert_eq!(f.resume("a".into()).unwrap(), "yielded a");
    assert_eq!(f.resume("b".into()).unwrap(), "yielded b");
    assert_eq!(f.resume("c".into()).unwrap(), "returned c");
}

#[test]
fn states_follow_the_life_of_a_fiber() {
    let root = Fiber::<u8>::current();
    let r = root.clone();
    let f = Fiber::new(move |_: u8| {
        assert_eq!(Fiber::<u8>::current().state(), FiberState::Running);
        assert_eq!(r.state(), FiberState::Resuming);
        fiber::yield_now(1u8).unwrap() + 1
    })
    .unwrap();
    assert_eq!(f.state(), FiberState::Created);
    f.resume(0).unwrap();
    assert_eq!(f.state(), FiberState::Yielded);
    assert_eq!(f.resume(1).unwrap(), 2);
    assert_eq!(f.state(), FiberState::Terminated);
    assert!(!f.is_alive());

    let g = Fiber::new(move |x: u8| root.transfer(x + 1).unwrap()).unwrap();
    assert_eq!(g.transfer(1).unwrap(), 2);
    assert_eq!(g.state(), FiberState::Transferred);
    assert_eq!(g.transfer(7).unwrap(), 7, "g finishes, returning to the root");
    assert_eq!(g.state(), FiberState::Terminated);
}

#[test]
fn nested_resumes_unwind_in_order() {
    fn nest(depth: u32) -> Fiber<u32> {
        Fiber::new(move |x: u32| {
            if depth == 0 {
                fiber::yield_now(x).unwrap()
            } else {
                let inner = nest(depth - 1);
                let got = inner.resume(x + 1).unwrap();
                let got = fiber::yield_now(got).unwrap();
                inner.resume(got).unwrap() + 1
            }
        })
        .unwrap()
    }
    let outer = nest(100);
    assert_eq!(outer.resume(0).unwrap(), 100, "each level adds one on the way down");
    assert_eq!(outer.resume(0).unwrap(), 100, "each level adds one on the way back up");
}

/// The fiber_chain benchmark's shape: every fiber transfers to a new one; the last transfers to the root.
fn chain(t: u64, root: Fiber<u64>) -> Fiber<u64> {
    Fiber::new(move |x: u64| {
        if x > t {
            root.transfer(x).unwrap()
        } else {
            let next = chain(t, root.clone());
            next.transfer(x + 1).unwrap()
        }
    })
    .unwrap()
}

#[test]
fn ten_thousand_deep_transfer_chain_reaches_the_root() {
    let before = fiber::stack_stats();
    let first = chain(10_000, Fiber::current());
    assert_eq!(first.transfer(0).unwrap(), 10_001);
    assert_eq!(fiber::stack_stats().live - before.live, 10_002, "every fiber of the chain stays alive");
    drop(first);
    assert_eq!(fiber::stack_stats().live, before.live, "dropping the head unwinds the whole chain");
}

#[test]
fn panic_kills_only_its_fiber() {
    let bystander = Fiber::new(|mut n: u32| loop {
        n = fiber::yield_now(n + 1).unwrap();
    })
    .unwrap();
    assert_eq!(bystander.resume(1).unwrap(), 2);
    let doomed = Fiber::new(|x: u32| if x > 0 { panic!("fiber {x} failed") } else { 0 }).unwrap();
    let err = doomed.resume(7).unwrap_err();
    assert_eq!(err.panic_message(), Some("fiber 7 failed"));
    assert!(!doomed.is_alive());
    assert_eq!(bystander.resume(10).unwrap(), 11, "the other fiber goes on");
}

#[test]
fn panic_payload_of_any_type_arrives() {
    let f = Fiber::new(|_: ()| std::panic::panic_any(42u16)).unwrap();
    let err = f.resume(()).unwrap_err();
    assert!(matches!(err, FiberError::Panicked(_)));
    assert_eq!(err.panic_message(), None, "not a string payload");
    assert_eq!(err.into_panic().unwrap().downcast_ref::<u16>(), Some(&42));
}

#[test]
fn a_value_of_the_wrong_type_is_refused_by_its_receiver() {
    // A fiber of Strings, and a handle to it typed u64 (taken from inside it).
    let u64_handle: Rc<RefCell<Option<Fiber<u64>>>> = Rc::default();
    let stash = u64_handle.clone();
    let strings = Fiber::new(move |s: String| {
        *stash.borrow_mut() = Some(Fiber::<u64>::current());
        let err = fiber::yield_now(s).unwrap_err();
        format!("refused: {err}")
    })
    .unwrap();
    assert_eq!(strings.resume("hi".into()).unwrap(), "hi");
    let wrong = u64_handle.borrow_mut().take().unwrap();
    // The fiber receives a u64 where it waits for a String: its yield_now gets the error.
    // It then returns a String, which this u64-typed resume refuses in turn.
    let err = wrong.resume(5).unwrap_err();
    let FiberError::TypeMismatch(mismatch) = &err else { panic!("expected a type mismatch: {err}") };
    assert_eq!((mismatch.expected, mismatch.found), ("u64", "alloc::string::String"));
    assert!(!strings.is_alive());

    let err = Fiber::new(|_: u8| fiber::yield_now(1i32).map(|v| v as u8).unwrap_or(0)).unwrap().resume(0).unwrap_err();
    let FiberError::TypeMismatch(mismatch) = &err else { panic!("expected a type mismatch: {err}") };
    assert_eq!((mismatch.expected, mismatch.found), ("u8", "i32"));
}

#[test]
fn fiber_switch_pattern_round_robins_through_yielded_handles() {
    let fibers: Vec<Fiber<usize>> = (0..10usize)
        .map(|i| {
            Fiber::new(move |_: usize| {
                let mut next = (i + 1) % 10;
                loop {
                    fiber::yield_now(next).unwrap();
                    next = (next + 1) % 10;
                }
            })
            .unwrap()
        })
        .collect();
    let mut visited = Vec::new();
    let mut next = 0;
    for _ in 0..10 {
        visited.push(next);
        next = fibers[next].resume(0).unwrap();
    }
    assert_eq!(visited, (0..10).collect::<Vec<_>>());
}
