//! Request numbers claimed in batches: every request is claimed once, whichever thread asks.

use super::*;

#[test]
fn threads_claiming_in_batches_claim_every_request_once() {
    for total in [0, 1, BATCH - 1, BATCH, BATCH + 1, 10 * BATCH + 7] {
        let next = Arc::new(AtomicUsize::new(0));
        let threads = [Claims::new(next.clone(), total, 2, 1), Claims::new(next.clone(), total, 2, 1)];
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
}

#[test]
fn a_thread_with_one_fiber_claims_one_request_at_a_time() {
    let next = Arc::new(AtomicUsize::new(0));
    let lone = Claims::new(next.clone(), 1000, 4, 1);
    assert!(lone.claim());
    assert_eq!(next.load(Ordering::Relaxed), 1, "nothing held back for a fiber that is busy");
}
