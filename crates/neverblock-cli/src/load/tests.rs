//! Request numbers claimed in batches: every request is claimed once, whichever thread asks.

use super::*;

#[test]
fn threads_claiming_in_batches_claim_every_request_once() {
    for total in [0, 1, BATCH - 1, BATCH, BATCH + 1, 10 * BATCH + 7] {
        let next = Arc::new(AtomicUsize::new(0));
        let threads = [Claims::new(next.clone(), total), Claims::new(next.clone(), total)];
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
