use std::time::{Duration, Instant};

use super::*;

fn at(base: Instant, ms: u64) -> Instant {
    base + Duration::from_millis(ms)
}

#[test]
fn expires_in_deadline_order_and_only_when_due() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    for ms in [30, 10, 20] {
        q.insert(at(base, ms), ms);
    }
    let mut out = Vec::new();
    q.expire(at(base, 15), &mut out);
    assert_eq!(out, [10]);
    assert_eq!(q.next_deadline(), Some(at(base, 20)));
    q.expire(at(base, 100), &mut out);
    assert_eq!(out, [10, 20, 30]);
    assert!(q.is_empty());
    assert_eq!(q.next_deadline(), None);
}

#[test]
fn equal_deadlines_fire_fifo() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    for i in 0..100 {
        q.insert(base, i);
    }
    let mut out = Vec::new();
    q.expire(base, &mut out);
    assert_eq!(out, (0..100).collect::<Vec<_>>());
}

#[test]
fn cancelled_entry_never_fires_and_cancel_after_fire_is_none() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    let a = q.insert(at(base, 1), "a");
    let b = q.insert(at(base, 2), "b");
    assert_eq!(q.cancel(a), Some("a"));
    assert_eq!(q.cancel(a), None);
    assert_eq!(q.next_deadline(), Some(at(base, 2)));
    let mut out = Vec::new();
    q.expire(at(base, 5), &mut out);
    assert_eq!(out, ["b"]);
    assert_eq!(q.cancel(b), None, "already fired");
}

#[test]
fn a_reused_slot_is_not_cancelled_by_an_old_key() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    let old = q.insert(base, 1);
    q.cancel(old);
    let new = q.insert(base, 2);
    assert_eq!(q.cancel(old), None);
    assert_eq!(q.len(), 1);
    assert_eq!(q.cancel(new), Some(2));
}

#[test]
fn a_hundred_thousand_timers_expire_in_order() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    for i in (0..100_000u64).rev() {
        q.insert(base + Duration::from_micros(i), i);
    }
    let mut out = Vec::new();
    q.expire(base + Duration::from_secs(1), &mut out);
    assert_eq!(out, (0..100_000).collect::<Vec<_>>());
}

#[test]
fn memory_stays_bounded_under_insert_cancel_churn() {
    let base = Instant::now();
    let mut q = TimerQueue::new();
    let _keep = q.insert(at(base, 1_000_000), 0u32);
    for i in 0..200_000u32 {
        let key = q.insert(at(base, u64::from(i)), i);
        q.cancel(key);
    }
    assert_eq!(q.len(), 1);
    assert!(q.heap_len() < 200, "stale entries are purged: {}", q.heap_len());
    assert!(q.slots.len() < 10, "slots are reused: {}", q.slots.len());
}
