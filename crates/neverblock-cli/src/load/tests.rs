//! Request numbers claimed in batches: every request is claimed once, whichever thread asks.

use super::*;

#[test]
fn threads_claiming_in_batches_claim_every_request_once() {
    for total in [0, 1, BATCH - 1, BATCH, BATCH + 1, 10 * BATCH + 7] {
        let next = Arc::new(AtomicUsize::new(0));
        // Two threads of BATCH fibers each: batches of up to BATCH, cut short at the end.
        let threads = [Claims::new(next.clone(), total, 2, BATCH), Claims::new(next.clone(), total, 2, BATCH)];
        let mut claimed = 0;
        // The threads take turns, three claims each, until neither gets one.
        loop {
            let got: usize = threads.iter().map(|claims| (0..3).filter(|_| claims.claim()).count()).sum();
            if got == 0 {
                break;
            }
            claimed += got;
        }
        assert_eq!(claimed, total);
    }
}

#[test]
fn with_a_fiber_per_request_each_claim_is_one_request() {
    let next = Arc::new(AtomicUsize::new(0));
    let (a, b) = (Claims::new(next.clone(), 1000, 1000, 500), Claims::new(next.clone(), 1000, 1000, 500));
    assert!(a.claim());
    assert_eq!(next.load(Ordering::Relaxed), 1, "no numbers held back for a thread's busy fibers");
    assert!(b.claim());
    assert_eq!(next.load(Ordering::Relaxed), 2);
    let many = Claims::new(Arc::new(AtomicUsize::new(0)), 500_000, 128, 64);
    assert!(many.claim());
    assert_eq!(many.next.load(Ordering::Relaxed), BATCH, "a long run still claims in full batches");
    for _ in 1..BATCH {
        assert!(many.claim());
    }
    assert_eq!(many.next.load(Ordering::Relaxed), BATCH, "the rest of a batch is served from the thread's hand");
    assert!(many.claim());
    assert_eq!(many.next.load(Ordering::Relaxed), 2 * BATCH, "then the next batch is claimed");
}

#[test]
fn a_thread_with_one_fiber_claims_one_request_at_a_time() {
    let next = Arc::new(AtomicUsize::new(0));
    let lone = Claims::new(next.clone(), 1000, 4, 1);
    assert!(lone.claim());
    assert_eq!(next.load(Ordering::Relaxed), 1, "nothing held back for a fiber that is busy");
}
