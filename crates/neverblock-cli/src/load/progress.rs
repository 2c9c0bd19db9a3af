//! The progress line: requests finished and failed so far, counted by each thread on a cache line
//! of its own and summed once a second.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// One thread's finished and failed requests. Only that thread writes them (a load and a store,
/// no locked instruction), on a line no other thread writes; the progress line reads them all.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Counts {
    finished: AtomicUsize,
    failed: AtomicUsize,
}

impl Counts {
    /// Counts one finished request, failed or not. Call only from the thread these counts are for.
    pub(super) fn finish(&self, failed: bool) {
        bump(&self.finished);
        if failed {
            bump(&self.failed);
        }
    }
}

/// Adds one to a counter that only the calling thread writes.
fn bump(counter: &AtomicUsize) {
    counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// Prints `finished/total done, failed errors, rate/s` on stderr every second until cancelled.
pub(super) fn report(counts: &[Counts], total: usize, started: Instant) {
    loop {
        neverblock::sleep(Duration::from_secs(1));
        let sum =
            |field: fn(&Counts) -> &AtomicUsize| counts.iter().map(|c| field(c).load(Ordering::Relaxed)).sum::<usize>();
        let (finished, failed) = (sum(|c| &c.finished), sum(|c| &c.failed));
        let rate = finished as f64 / started.elapsed().as_secs_f64();
        eprint!("\r{finished}/{total} done, {failed} errors, {rate:.0}/s   ");
    }
}
