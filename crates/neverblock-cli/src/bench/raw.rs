//! The floor: the same experiments on raw corosensei coroutines with pooled
//! stacks, a manager loop like neverblock's, and no Ruby rules or bookkeeping.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};

/// Reused stacks: after the first run no stack is mapped.
#[derive(Clone)]
pub(crate) struct StackPool {
    free: Rc<RefCell<Vec<DefaultStack>>>,
    size: usize,
}

impl StackPool {
    pub(crate) fn new(size: usize) -> StackPool {
        StackPool { free: Rc::default(), size }
    }

    fn take(&self) -> DefaultStack {
        let reused = self.free.borrow_mut().pop();
        reused.unwrap_or_else(|| DefaultStack::new(self.size).expect("map a coroutine stack"))
    }

    fn give_back<Y, R>(&self, mut coroutine: Coroutine<u64, Y, R, DefaultStack>) {
        coroutine.force_unwind();
        self.free.borrow_mut().push(coroutine.into_stack());
    }
}

type ChainCoroutine = Coroutine<u64, ChainStep, (), DefaultStack>;

/// What a chain coroutine hands the driver: the next coroutine and its value, or the result.
enum ChainStep {
    Next(ChainCoroutine, u64),
    Done(u64),
}

fn chain_link(t: u64, pool: StackPool) -> ChainCoroutine {
    let stack = pool.take();
    Coroutine::with_stack(stack, move |yielder: &Yielder<u64, ChainStep>, x: u64| {
        if x > t {
            yielder.suspend(ChainStep::Done(x));
        } else {
            let next = chain_link(t, pool);
            yielder.suspend(ChainStep::Next(next, x + 1));
        }
    })
}

/// Runs fiber_chain for `t`; returns the result, the run time and the teardown time.
pub(crate) fn chain(t: u64, pool: &StackPool) -> (u64, Duration, Duration) {
    let start = Instant::now();
    let mut alive = Vec::with_capacity(t as usize + 2);
    let mut coroutine = chain_link(t, pool.clone());
    let mut x = 0;
    let result = loop {
        match coroutine.resume(x) {
            CoroutineResult::Yield(ChainStep::Next(next, value)) => {
                alive.push(std::mem::replace(&mut coroutine, next));
                x = value;
            }
            CoroutineResult::Yield(ChainStep::Done(value)) => {
                alive.push(coroutine);
                break value;
            }
            CoroutineResult::Return(()) => unreachable!("chain coroutines never return"),
        }
    };
    let run = start.elapsed();
    let start = Instant::now();
    for coroutine in alive {
        pool.give_back(coroutine);
    }
    (result, run, start.elapsed())
}

/// Runs fiber_switch: `t` coroutines, `rounds` resume+suspend round trips; returns the time.
pub(crate) fn switch(t: usize, rounds: usize, pool: &StackPool) -> Duration {
    let mut coroutines: Vec<Coroutine<u64, usize, (), DefaultStack>> = (0..t)
        .map(|i| {
            Coroutine::with_stack(pool.take(), move |yielder: &Yielder<u64, usize>, _| {
                let mut rng = super::fiber_switch::Rng::new(i as u64);
                loop {
                    yielder.suspend(rng.below(t));
                }
            })
        })
        .collect();
    let mut drive = |rounds: usize| {
        let mut next = 0;
        for _ in 0..rounds {
            next = match coroutines[next].resume(0) {
                CoroutineResult::Yield(i) => i,
                CoroutineResult::Return(()) => unreachable!("switch coroutines never return"),
            };
        }
    };
    drive(rounds);
    let start = Instant::now();
    drive(rounds);
    let elapsed = start.elapsed();
    for coroutine in coroutines {
        pool.give_back(coroutine);
    }
    elapsed
}
