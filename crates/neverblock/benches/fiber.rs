//! Fiber micro-benchmarks, each beside its floor: the same work on raw
//! `corosensei` coroutines (reused stacks, no Ruby rules), so a result reads as a
//! ratio `neverblock ÷ corosensei`.
//!
//! - `create_resume_finish`: make a fiber, run it to completion, recycle its stack.
//! - `resume_yield`: one resume + yield round trip.
//! - `transfer_ring`: one `transfer` in a ring of 64 fibers (the raw floor suspends
//!   to a manager loop naming the next coroutine, which is what `transfer` does).

#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::hint::black_box;

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};
use criterion::{criterion_group, criterion_main, Criterion};
use neverblock::fiber::{self, Fiber};

fn create_resume_finish(c: &mut Criterion) {
    let mut group = c.benchmark_group("create_resume_finish");
    group
        .bench_function("neverblock", |b| b.iter(|| Fiber::new(|x: u64| x + 1).unwrap().resume(black_box(1)).unwrap()));
    let mut stacks = vec![DefaultStack::new(fiber::DEFAULT_STACK_SIZE).unwrap()];
    group.bench_function("corosensei", |b| {
        b.iter(|| {
            let stack = stacks.pop().unwrap();
            let mut co = Coroutine::with_stack(stack, |_: &Yielder<u64, ()>, x: u64| x + 1);
            let result = co.resume(black_box(1));
            stacks.push(co.into_stack());
            result
        })
    });
    group.finish();
}

fn resume_yield(c: &mut Criterion) {
    let mut group = c.benchmark_group("resume_yield");
    let echo = Fiber::new(|mut x: u64| loop {
        x = fiber::yield_now(x + 1).unwrap();
    })
    .unwrap();
    group.bench_function("neverblock", |b| b.iter(|| echo.resume(black_box(1)).unwrap()));
    let mut co = Coroutine::with_stack(
        DefaultStack::new(fiber::DEFAULT_STACK_SIZE).unwrap(),
        |y: &Yielder<u64, u64>, mut x: u64| loop {
            x = y.suspend(x + 1);
        },
    );
    group.bench_function("corosensei", |b| {
        b.iter(|| match co.resume(black_box(1)) {
            CoroutineResult::Yield(v) => v,
            CoroutineResult::Return(()) => unreachable!(),
        })
    });
    group.finish();
}

const RING: usize = 64;

fn transfer_ring(c: &mut Criterion) {
    let mut group = c.benchmark_group("transfer_ring");
    let root = Fiber::<u64>::current();
    let mut ring: Vec<Fiber<u64>> = Vec::new();
    let slots: std::rc::Rc<std::cell::RefCell<Vec<Fiber<u64>>>> = Default::default();
    for i in 0..RING {
        let slots = slots.clone();
        let root = root.clone();
        ring.push(
            Fiber::new(move |mut hops: u64| loop {
                hops = if hops == 0 {
                    root.transfer(0).unwrap()
                } else {
                    let next = slots.borrow()[(i + 1) % RING].clone();
                    next.transfer(hops - 1).unwrap()
                };
            })
            .unwrap(),
        );
    }
    *slots.borrow_mut() = ring.clone();
    group.bench_function("neverblock_1000_hops", |b| b.iter(|| ring[0].transfer(black_box(1000)).unwrap()));

    type Hop = Coroutine<u64, (usize, u64), (), DefaultStack>;
    let mut coroutines: Vec<Hop> = (0..RING)
        .map(|i| {
            Coroutine::with_stack(
                DefaultStack::new(fiber::DEFAULT_STACK_SIZE).unwrap(),
                move |y: &Yielder<u64, (usize, u64)>, mut hops: u64| loop {
                    hops = if hops == 0 { y.suspend((usize::MAX, 0)) } else { y.suspend(((i + 1) % RING, hops - 1)) };
                },
            )
        })
        .collect();
    group.bench_function("corosensei_1000_hops", |b| {
        b.iter(|| {
            let (mut next, mut hops) = (0, black_box(1000));
            while next != usize::MAX {
                (next, hops) = match coroutines[next].resume(hops) {
                    CoroutineResult::Yield(step) => step,
                    CoroutineResult::Return(()) => unreachable!(),
                };
            }
        })
    });
    group.finish();
    drop(slots.borrow_mut().drain(..));
}

criterion_group! {
    name = benches;
    config = Criterion::default();
    targets = create_resume_finish, resume_yield, transfer_ring
}
criterion_main!(benches);
