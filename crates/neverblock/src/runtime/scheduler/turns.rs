//! A loop's turns: a turn is the work the root does between two polls (continuing
//! tasks, firing timers, running what other threads handed in), timed with one
//! clock read per turn (two when the loop is about to wait), into a histogram of
//! turn lengths and a count of stalls (turns over the stall threshold); the start
//! of each turn is published in the loop's beacon for the sentinel thread.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::runtime::beacon::{instant_of, now_ns, Beacon};

/// The upper bounds of the turn-length buckets, in nanoseconds (the last bucket is unbounded).
const BOUNDS_NS: [u64; 11] = [
    10_000,
    50_000,
    100_000,
    500_000,
    1_000_000,
    5_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
    500_000_000,
    1_000_000_000,
];

/// How long a loop's turns took: counts in buckets by length, and their sum.
/// A turn is the work between two polls of the loop's poller; its time waiting in
/// the poller is not part of it. A long turn is a fiber that computed or blocked
/// without parking: every other fiber of the loop waited that long.
///
/// # Examples
///
/// ```
/// neverblock::run(|| {
///     for _ in 0..3 {
///         neverblock::sleep(std::time::Duration::from_millis(1)); // the loop waits, then turns
///     }
///     let turns = &neverblock::runtime::stats()[0].turns;
///     assert!(turns.count() >= 3);
///     let (bound, cumulative) = turns.buckets().last().unwrap();
///     assert_eq!((bound, cumulative), (None, turns.count()), "the last bucket holds every turn");
/// });
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnHistogram {
    counts: [u64; BOUNDS_NS.len() + 1],
    sum_ns: u64,
}

/// The bucket a turn of `length_ns` falls in.
fn bucket(length_ns: u64) -> usize {
    BOUNDS_NS.iter().position(|&bound| length_ns <= bound).unwrap_or(BOUNDS_NS.len())
}

impl TurnHistogram {
    /// Each bucket's upper bound (`None`: unbounded) and how many turns took at most
    /// that long (cumulative, as Prometheus counts), shortest first.
    ///
    /// # Examples
    ///
    /// ```
    /// let empty = neverblock::runtime::TurnHistogram::default();
    /// let (first, _) = empty.buckets().next().unwrap();
    /// assert_eq!(first, Some(std::time::Duration::from_micros(10)));
    /// ```
    pub fn buckets(&self) -> impl Iterator<Item = (Option<Duration>, u64)> + '_ {
        let bounds = BOUNDS_NS.iter().map(|&ns| Some(Duration::from_nanos(ns))).chain([None]);
        bounds.zip(self.counts.iter().scan(0, |total, &count| {
            *total += count;
            Some(*total)
        }))
    }

    /// Turns counted.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock::runtime::TurnHistogram::default().count(), 0);
    /// ```
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Their total length.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(neverblock::runtime::TurnHistogram::default().sum(), std::time::Duration::ZERO);
    /// ```
    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.sum_ns)
    }
}

/// One loop's turn clock (used on its own thread only).
pub(super) struct Turns {
    beacon: Arc<Beacon>,
    /// Turns longer than this are stalls; 0: none is.
    threshold_ns: u64,
    /// When the running turn started (`now_ns`), and as an `Instant`: made once a turn, it is read
    /// many times (by every timeout an I/O call sets).
    started: Cell<u64>,
    started_at: Cell<Instant>,
    /// Turns by `bucket`, and their total length in nanoseconds.
    counts: [Cell<u64>; BOUNDS_NS.len() + 1],
    sum_ns: Cell<u64>,
    stalls: Cell<u64>,
}

impl Turns {
    pub(super) fn new(beacon: Arc<Beacon>) -> Turns {
        let threshold_ns = beacon.threshold.map_or(0, |t| t.as_nanos().try_into().unwrap_or(u64::MAX));
        let now = now_ns();
        Turns {
            beacon,
            threshold_ns,
            started: Cell::new(now),
            started_at: Cell::new(instant_of(now)),
            counts: Default::default(),
            sum_ns: Cell::new(0),
            stalls: Cell::new(0),
        }
    }

    pub(super) fn beacon(&self) -> &Beacon {
        &self.beacon
    }

    /// When the running turn started: what a task parked in it counts its park from.
    #[inline(always)]
    pub(super) fn started(&self) -> u64 {
        self.started.get()
    }

    /// When the running turn started, as an `Instant`.
    #[inline(always)]
    pub(super) fn started_at(&self) -> Instant {
        self.started_at.get()
    }

    /// A turn starts now (the loop starts, or comes back from waiting in its poller).
    pub(super) fn start(&self) {
        self.set_started(now_ns());
    }

    fn set_started(&self, now: u64) {
        self.started.set(now);
        self.started_at.set(instant_of(now));
        self.beacon.turn_starts(now);
    }

    /// The running turn ends now and the loop goes to wait in its poller.
    pub(super) fn end_and_wait(&self) {
        self.end(now_ns());
        self.beacon.waits();
    }

    /// The running turn ends now and so does the loop.
    pub(super) fn end_and_stop(&self) {
        self.end(now_ns());
        self.beacon.ends();
    }

    /// The running turn ends now and the next one starts at once (the loop polled without waiting).
    pub(super) fn next(&self) {
        let now = now_ns();
        self.end(now);
        self.set_started(now);
    }

    fn end(&self, now: u64) {
        let started = self.started.get();
        let length = now.saturating_sub(started);
        let count = &self.counts[bucket(length)];
        count.set(count.get() + 1);
        self.sum_ns.set(self.sum_ns.get().saturating_add(length));
        if self.threshold_ns > 0 && length > self.threshold_ns {
            self.stalls.set(self.stalls.get() + 1);
            self.beacon.stalled(started, length);
        }
    }

    /// The turns' lengths so far.
    pub(super) fn lengths(&self) -> TurnHistogram {
        TurnHistogram { counts: self.counts.each_ref().map(Cell::get), sum_ns: self.sum_ns.get() }
    }

    /// Turns longer than the stall threshold so far.
    pub(super) fn stalls(&self) -> u64 {
        self.stalls.get()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::Turns;
    use crate::runtime::beacon::Beacon;

    #[test]
    fn buckets_are_cumulative_and_the_last_is_unbounded() {
        let turns = Turns::new(Arc::new(Beacon::new(1, Some(Duration::from_secs(1)))));
        for ns in [5_000, 10_000, 10_001, 2_000_000_000] {
            turns.started.set(1);
            turns.end(1 + ns);
        }
        assert_eq!(turns.stalls(), 1, "one turn took more than the second allowed");
        let histogram = turns.lengths();
        let buckets: Vec<_> = histogram.buckets().map(|(_, n)| n).collect();
        assert_eq!((buckets[0], buckets[1], buckets[buckets.len() - 2], buckets[buckets.len() - 1]), (2, 3, 3, 4));
        assert_eq!(histogram.count(), 4);
        assert_eq!(histogram.sum().as_nanos(), 2_000_025_001);
    }
}
