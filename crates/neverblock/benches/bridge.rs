//! `block_on` round trips beside their floor: two fibers of one loop hand a turn
//! back and forth, each parked in `block_on` on a future the other's wake ends
//! (`block_on`), against the same hand-off on two `Notify`s (`notify`), so a
//! result reads as a ratio `block_on ÷ notify`. One iteration is one round trip.

#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use neverblock::sync::Notify;

/// Whose turn it is, and the waker of the side waiting for its own.
#[derive(Default)]
struct Turns {
    turn: u64,
    wakers: [Option<Waker>; 2],
}

/// Side `me` of the hand-off: waits `iters` times for its turn in `block_on`, then passes it on.
fn side(turns: Rc<RefCell<Turns>>, me: u64, iters: u64) {
    for _ in 0..iters {
        neverblock::block_on(poll_fn(|cx| {
            let mut t = turns.borrow_mut();
            if t.turn % 2 == me {
                return Poll::Ready(());
            }
            t.wakers[me as usize] = Some(cx.waker().clone());
            Poll::Pending
        }))
        .expect("no timeout here");
        let other = {
            let mut t = turns.borrow_mut();
            t.turn += 1;
            t.wakers[1 - me as usize].take()
        };
        if let Some(waker) = other {
            waker.wake();
        }
    }
}

fn block_on_round_trip(iters: u64) -> Duration {
    neverblock::run(move || {
        let turns = Rc::new(RefCell::new(Turns::default()));
        let start = Instant::now();
        let other = {
            let turns = turns.clone();
            neverblock::spawn(move || side(turns, 1, iters))
        };
        side(turns, 0, iters);
        other.join().unwrap();
        start.elapsed()
    })
}

fn notify_round_trip(iters: u64) -> Duration {
    neverblock::run(move || {
        let (ping, pong) = (Rc::new(Notify::new()), Rc::new(Notify::new()));
        let start = Instant::now();
        let other = {
            let (ping, pong) = (ping.clone(), pong.clone());
            neverblock::spawn(move || {
                for _ in 0..iters {
                    ping.notified().unwrap();
                    pong.notify_one();
                }
            })
        };
        for _ in 0..iters {
            ping.notify_one();
            pong.notified().unwrap();
        }
        other.join().unwrap();
        start.elapsed()
    })
}

fn round_trip(c: &mut Criterion) {
    let mut group = c.benchmark_group("round_trip");
    group.bench_function("block_on", |b| b.iter_custom(block_on_round_trip));
    group.bench_function("notify", |b| b.iter_custom(notify_round_trip));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = round_trip
}
criterion_main!(benches);
