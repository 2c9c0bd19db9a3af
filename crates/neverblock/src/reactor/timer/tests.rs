//! The timer queue's behaviour: order, cancellation, keys, scale and memory.

use std::time::{Duration, Instant};

use super::*;

/// `count`, scaled down under Miri, which runs a thousand times slower.
fn scaled(count: u64) -> u64 {
    if cfg!(miri) {
        count / 1000
    } else {
        count
    }
}

/// `base` plus `ms` milliseconds.
fn at(base: Instant, ms: u64) -> Instant {
    base + Duration::from_millis(ms)
}

/// Everything due at `now`, in firing order.
fn expired<T>(q: &mut TimerQueue<T>, now: Instant) -> Vec<T> {
    let mut out = Vec::new();
    q.expire(now, &mut out);
    out
}

/// A small deterministic generator (xorshift64*), so random tests repeat.
struct Rng(u64);

impl Rng {
    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % n
    }
}

#[test]
fn expires_in_deadline_order() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    for ms in [30, 10, 40, 0, 20] {
        q.insert(at(base, ms), ms);
    }
    assert_eq!(q.len(), 5);
    assert_eq!(expired(&mut q, at(base, 100)), [0, 10, 20, 30, 40]);
    assert!(q.is_empty());
}

#[test]
fn only_due_entries_expire() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    for ms in [10, 20, 30] {
        q.insert(at(base, ms), ms);
    }
    assert_eq!(expired(&mut q, at(base, 15)), [10]);
    assert_eq!(q.next_deadline(), Some(at(base, 20)));
    assert_eq!(q.len(), 2);
    assert!(expired(&mut q, at(base, 19)).is_empty());
    assert_eq!(q.len(), 2);
}

#[test]
fn an_entry_due_exactly_now_expires() {
    let now = Instant::now();
    let mut q = TimerQueue::new();
    q.insert(now, "due");
    q.insert(now + Duration::from_nanos(1), "not yet");
    assert_eq!(expired(&mut q, now), ["due"]);
    assert_eq!(q.len(), 1);
}

#[test]
fn equal_deadlines_fire_fifo() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    for i in 0..300u64 {
        q.insert(at(base, i % 3), i);
    }
    let mut want: Vec<u64> = (0..300).collect();
    want.sort_by_key(|i| i % 3);
    assert_eq!(expired(&mut q, at(base, 3)), want);
}

#[test]
fn expire_keeps_what_out_already_held() {
    let now = Instant::now();
    let mut q = TimerQueue::new();
    q.insert(now, 2);
    let mut out = vec![1];
    q.expire(now, &mut out);
    assert_eq!(out, [1, 2]);
}

#[test]
fn cancelled_entry_never_fires() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    q.insert(at(base, 1), "a");
    let b = q.insert(at(base, 2), "b");
    q.insert(at(base, 3), "c");
    assert_eq!(q.cancel(b), Some("b"));
    assert_eq!(q.len(), 2);
    assert_eq!(expired(&mut q, at(base, 10)), ["a", "c"]);
}

#[test]
fn cancel_returns_the_value_once() {
    let mut q = TimerQueue::new();
    let key = q.insert(Instant::now(), String::from("v"));
    assert_eq!(q.cancel(key).as_deref(), Some("v"));
    assert_eq!(q.cancel(key), None);
    assert!(q.is_empty());
}

#[test]
fn cancel_after_fire_returns_none() {
    let now = Instant::now();
    let mut q = TimerQueue::new();
    let key = q.insert(now, 7);
    assert_eq!(expired(&mut q, now), [7]);
    assert_eq!(q.cancel(key), None);
}

#[test]
fn keys_are_not_reused_confusingly() {
    let now = Instant::now();
    let mut q = TimerQueue::new();
    let fired = q.insert(now, 1);
    expired(&mut q, now);
    let cancelled = q.insert(now, 2);
    q.cancel(cancelled);
    let live = q.insert(now, 3);
    assert_ne!(live, fired);
    assert_ne!(live, cancelled);
    assert_eq!(q.cancel(fired), None);
    assert_eq!(q.cancel(cancelled), None);
    assert_eq!(q.len(), 1, "stale keys must not cancel the entry in their old slot");
    assert_eq!(q.cancel(live), Some(3));
}

#[test]
fn next_deadline_skips_cancelled_entries() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    assert_eq!(q.next_deadline(), None);
    let keys: Vec<_> = (0..4).map(|ms| q.insert(at(base, ms), ms)).collect();
    q.cancel(keys[0]);
    q.cancel(keys[1]);
    assert_eq!(q.next_deadline(), Some(at(base, 2)));
    q.cancel(keys[3]);
    assert_eq!(expired(&mut q, at(base, 2)), [2]);
    assert_eq!(q.next_deadline(), None, "a cancelled entry is no deadline");
    assert!(q.is_empty());
}

#[test]
fn values_need_no_traits() {
    struct Opaque(u8);
    let now = Instant::now();
    let mut q: TimerQueue<Opaque> = TimerQueue::new();
    let key = q.insert(now, Opaque(1));
    q.insert(now, Opaque(2));
    assert_eq!(q.cancel(key).map(|o| o.0), Some(1));
    assert_eq!(expired(&mut q, now).iter().map(|o| o.0).collect::<Vec<_>>(), [2]);
}

#[test]
fn a_hundred_thousand_timers_expire_in_order() {
    let base = Instant::now();
    let count = scaled(100_000);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut q = TimerQueue::new();
    let mut want = Vec::new();
    for i in 0..count {
        let deadline = base + Duration::from_micros(rng.below(10_000));
        q.insert(deadline, (deadline, i));
        want.push((deadline, i));
    }
    want.sort();
    let mut got = Vec::new();
    for ms in 1..=10 {
        let now = at(base, ms);
        let batch = expired(&mut q, now);
        assert!(batch.iter().all(|&(d, _)| d <= now));
        assert!(q.next_deadline().is_none_or(|d| d > now));
        got.extend(batch);
    }
    assert!(q.is_empty());
    assert_eq!(got, want);
}

#[test]
fn memory_stays_bounded_under_insert_cancel_churn() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    for ms in 0..10 {
        q.insert(at(base, 500 + ms), ms);
    }
    for i in 0..scaled(1_000_000) {
        // Alternately before the live entries (cleaned off the top at once) and
        // behind them (stale until a purge).
        let key = q.insert(at(base, if i % 2 == 0 { i % 500 } else { 1_000 + i % 500 }), 99);
        assert_eq!(q.cancel(key), Some(99));
    }
    assert_eq!(q.len(), 10);
    assert!(q.storage_len() < 100, "storage grew to {}", q.storage_len());
    assert_eq!(q.next_deadline(), Some(at(base, 500)));
    assert_eq!(expired(&mut q, at(base, 10_000)), (0..10).collect::<Vec<_>>());
}

#[test]
fn stale_entries_never_outnumber_live_ones() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    q.insert(base, 0);
    let keys: Vec<_> = (1..=1000).map(|ms| q.insert(at(base, ms), ms)).collect();
    for key in keys.into_iter().rev() {
        q.cancel(key);
        assert!(q.heap.len() <= 2 * q.len() + 1, "{} heap entries for {} live", q.heap.len(), q.len());
    }
    assert_eq!(q.len(), 1);
}

#[test]
fn matches_a_naive_model_under_random_operations() {
    let base = Instant::now();
    let mut rng = Rng(42);
    let mut q = TimerQueue::new();
    // (deadline, insertion number, key), kept in firing order.
    let mut model: Vec<(Instant, u64, TimerKey)> = Vec::new();
    let mut keys = Vec::new();
    let mut now = base;
    for i in 0..scaled(20_000) {
        match rng.below(10) {
            0..=4 => {
                let deadline = now + Duration::from_micros(rng.below(2_000));
                let key = q.insert(deadline, i);
                keys.push(key);
                let at = model.partition_point(|&(d, n, _)| (d, n) < (deadline, i));
                model.insert(at, (deadline, i, key));
            }
            5..=7 if !keys.is_empty() => {
                // Any key ever issued: live, fired or cancelled.
                let key = keys[rng.below(keys.len() as u64) as usize];
                let pos = model.iter().position(|&(_, _, k)| k == key);
                assert_eq!(q.cancel(key), pos.map(|p| model.remove(p).1));
            }
            _ => {
                now += Duration::from_micros(rng.below(500));
                let due = model.partition_point(|&(d, _, _)| d <= now);
                let want: Vec<u64> = model.drain(..due).map(|(_, n, _)| n).collect();
                assert_eq!(expired(&mut q, now), want);
            }
        }
        assert_eq!(q.len(), model.len());
        assert_eq!(q.next_deadline(), model.first().map(|&(d, _, _)| d));
    }
}
