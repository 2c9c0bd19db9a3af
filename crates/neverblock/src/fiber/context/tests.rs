use super::*;
use crate::fiber::stack::{allocate, guard_kind, PooledStack};
use std::cell::RefCell;
use std::rc::Rc;

fn stack() -> PooledStack {
    allocate(64 * 1024, guard_kind(false), crate::sys::overflow::StackUse::Fiber).expect("a test stack")
}

/// A context for each of `stacks` running `body(i, contexts)`, plus the test
/// thread's own at index 0. Boxed so the contexts stay put while fibers hold them.
/// A fiber ends by dropping what it holds and switching for good to the context
/// whose index `body` returns.
fn contexts(
    stacks: &[PooledStack],
    body: impl Fn(usize, *const [Context]) -> usize + Clone + 'static,
) -> Box<[Context]> {
    let mut all = vec![Context::running()];
    let at: Rc<Cell<*const [Context]>> = Rc::new(Cell::new(&[] as *const [Context]));
    for (i, s) in stacks.iter().enumerate() {
        let (body, at) = (body.clone(), at.clone());
        let start = move || {
            let all = at.get();
            drop(at);
            let next = body(i + 1, all);
            drop(body);
            // SAFETY: the box of contexts outlives every fiber; `all[next]` waits in a
            // switch, and nothing on this stack is used again.
            unsafe { switch_for_good(&(*all)[next]) }
        };
        // SAFETY: each stack is its own and outlives its context (the caller drops the
        // contexts first).
        all.push(unsafe { Context::new(s.limit(), s.base(), start) });
    }
    let all = all.into_boxed_slice();
    at.set(&*all);
    all
}

#[test]
fn fibers_in_a_ring_switch_straight_to_each_other_and_keep_their_registers() {
    const ROUNDS: u64 = 1000;
    let log = Rc::new(RefCell::new(Vec::new()));
    let stacks = [stack(), stack(), stack()];
    let body_log = log.clone();
    let ring = contexts(&stacks, move |me, all| {
        // SAFETY: the box of contexts outlives every fiber of the ring.
        let all = unsafe { &*all };
        let next = (me + 1) % all.len();
        // Live across every switch, so held in callee-saved registers or on this stack.
        let (mut acc, mut k) = (me as u64, 0u64);
        while k < ROUNDS {
            acc = acc.wrapping_mul(31).wrapping_add(k);
            k += 1;
            // SAFETY: `all[me]` is this fiber's, `all[next]` is suspended or fresh.
            unsafe { switch(&all[me], &all[next]) };
        }
        body_log.borrow_mut().push((me, acc));
        next
    });
    for context in &ring[1..] {
        context.started();
    }
    for _ in 0..=ROUNDS {
        // SAFETY: the ring's fibers are fresh or suspended in `switch`.
        unsafe { switch(&ring[0], &ring[1]) };
    }
    let expected: Vec<(usize, u64)> =
        (1..=3).map(|me| (me, (0..ROUNDS).fold(me as u64, |acc, k| acc.wrapping_mul(31).wrapping_add(k)))).collect();
    assert_eq!(*log.borrow(), expected, "each fiber ran its rounds in ring order with its registers intact");
    assert_eq!(Rc::strong_count(&log), 1, "each fiber dropped what it held before it ended");
    drop(ring);
}

#[test]
fn a_fresh_fiber_starts_on_a_16_byte_aligned_stack() {
    #[repr(align(16))]
    struct Aligned([u8; 16]);
    let seen = Rc::new(Cell::new(usize::MAX));
    let stacks = [stack()];
    let body_seen = seen.clone();
    let contexts = contexts(&stacks, move |_, _| {
        let local = Aligned([0; 16]);
        std::hint::black_box(&local.0);
        body_seen.set(&local as *const Aligned as usize % 16);
        0 // the test thread, waiting in its switch
    });
    contexts[1].started();
    // SAFETY: the fiber is fresh.
    unsafe { switch(&contexts[0], &contexts[1]) };
    assert_eq!(seen.get(), 0, "a 16-aligned local is 16-aligned: the stack pointer was");
}

#[test]
fn a_context_dropped_before_it_runs_drops_its_closure() {
    let held = Rc::new(());
    let stacks = [stack()];
    let body_held = held.clone();
    let contexts = contexts(&stacks, move |_, _| {
        let _ = &body_held;
        unreachable!("never switched to");
    });
    assert_eq!(Rc::strong_count(&held), 2, "the closure holds its clone until dropped");
    drop(contexts);
    assert_eq!(Rc::strong_count(&held), 1, "dropping the unstarted context dropped the closure");
}
