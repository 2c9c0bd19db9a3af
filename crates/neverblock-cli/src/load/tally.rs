//! What a load run counts: the latencies of successes, and failures grouped by kind (an error kind
//! or a status) with the first message of each kind, so a summary says why, not only how many.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::histogram::Histogram;

/// Failures of one kind: how many, and the first one's message.
#[derive(Debug, Clone)]
pub(crate) struct Failures {
    pub(crate) count: usize,
    pub(crate) first: String,
    /// When the first one happened, to find the first of all threads.
    at: Instant,
}

/// One thread's answers.
#[derive(Debug, Default)]
pub(super) struct Tally {
    latencies: Histogram,
    errors: BTreeMap<String, Failures>,
}

impl Tally {
    /// Counts a success that took `latency`.
    pub(super) fn success(&mut self, latency: Duration) {
        self.latencies.record(latency);
    }

    /// Counts a failure of `kind` that happened `at`; `message` is asked for only for the first of
    /// its kind.
    pub(super) fn failure(&mut self, kind: String, at: Instant, message: impl FnOnce() -> String) {
        self.errors.entry(kind).and_modify(|f| f.count += 1).or_insert_with(|| Failures {
            count: 1,
            first: message(),
            at,
        });
    }
}

/// What came back from a whole run.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub(crate) elapsed: Duration,
    /// Whether Ctrl-C stopped the run (requests in flight then are not counted).
    pub(crate) interrupted: bool,
    /// Latencies of the requests answered 2xx.
    pub(crate) latencies: Histogram,
    /// Failures by kind or status.
    pub(crate) errors: BTreeMap<String, Failures>,
}

impl Outcome {
    pub(crate) fn ok(&self) -> usize {
        self.latencies.count()
    }

    pub(crate) fn failed(&self) -> usize {
        self.errors.values().map(|f| f.count).sum()
    }

    /// Answered requests per second.
    pub(crate) fn rate(&self) -> f64 {
        self.ok() as f64 / self.elapsed.as_secs_f64()
    }

    /// The `p`-th percentile latency (p in 0..=100), to within 1/256.
    pub(crate) fn percentile(&self, p: f64) -> Option<Duration> {
        self.latencies.percentile(p)
    }

    /// Adds one thread's tally; of two first messages of a kind, the earlier is kept.
    pub(super) fn add(&mut self, tally: Tally) {
        self.latencies.merge(&tally.latencies);
        for (kind, theirs) in tally.errors {
            self.errors
                .entry(kind)
                .and_modify(|mine| {
                    mine.count += theirs.count;
                    if theirs.at < mine.at {
                        (mine.first, mine.at) = (theirs.first.clone(), theirs.at);
                    }
                })
                .or_insert(theirs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_counted_by_kind_and_the_earliest_message_of_each_kept() {
        let start = Instant::now();
        let later = start + Duration::from_millis(5);
        let (mut a, mut b) = (Tally::default(), Tally::default());
        a.failure("Io".into(), later, || "a: too many open files".into());
        a.failure("Io".into(), later, || unreachable!("only the first message is made"));
        a.success(Duration::from_millis(1));
        b.failure("Io".into(), start, || "b: too many open files".into());
        b.failure("status 503".into(), start, || "GET /: 503 Service Unavailable".into());
        let mut outcome = Outcome::default();
        outcome.add(a);
        outcome.add(b);
        assert_eq!((outcome.ok(), outcome.failed()), (1, 4));
        let io = &outcome.errors["Io"];
        assert_eq!((io.count, io.first.as_str()), (3, "b: too many open files"));
        assert_eq!(outcome.errors["status 503"].count, 1);
    }
}
