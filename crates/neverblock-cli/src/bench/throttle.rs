//! A download throttle: a token bucket that starts when the first byte arrives and never banks
//! credit beyond its small capacity.
//!
//! A client that waits (in the server's queue, or for a stalled server) earns nothing it could
//! spend later at full speed: credit stops accruing once the bucket is full, so the wait shows in
//! the client's throughput instead of being made up afterwards: a throttle that banked credit from
//! the request's start would make a queue of waiting downloads look as fast as the bound.

use std::time::{Duration, Instant};

/// Bytes a client may read now, refilled at `rate` bytes a second up to `capacity`; what was read
/// before any credit was earned (the first read, which brings the head) is a debt paid off first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// An empty bucket at `start` (the first byte's arrival): from then on `rate` bytes a second,
    /// so a download is never ahead of its rate by more than its first read.
    pub(crate) fn new(rate: u64, capacity: usize, start: Instant) -> Bucket {
        Bucket { rate: rate as f64, capacity: capacity as f64, tokens: 0.0, last: start }
    }

    /// How many bytes may be read at `now`.
    pub(crate) fn available(&mut self, now: Instant) -> usize {
        let earned = now.saturating_duration_since(self.last).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(self.capacity);
        self.last = self.last.max(now);
        self.tokens.max(0.0) as usize
    }

    /// Takes `n` bytes' worth of tokens (read at the last [`available`](Bucket::available) call, or
    /// before any: a debt).
    pub(crate) fn spend(&mut self, n: usize) {
        self.tokens -= n as f64;
    }

    /// How long until `n` bytes (at most the capacity) may be read, from the last look.
    pub(crate) fn wait_for(&self, n: usize) -> Duration {
        let missing = (n as f64).min(self.capacity) - self.tokens;
        Duration::from_secs_f64((missing / self.rate).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_starts_empty_and_refills_at_its_rate() {
        let start = Instant::now();
        let mut bucket = Bucket::new(1_000_000, 64_000, start);
        assert_eq!(bucket.available(start), 0);
        assert_eq!(bucket.wait_for(32_000), Duration::from_millis(32));
        assert_eq!(bucket.available(start + Duration::from_millis(10)), 10_000);
    }

    #[test]
    fn what_was_read_before_any_credit_is_paid_off_first() {
        let start = Instant::now();
        let mut bucket = Bucket::new(1_000_000, 64_000, start);
        bucket.spend(20_000);
        assert_eq!(bucket.available(start + Duration::from_millis(10)), 0);
        assert_eq!(bucket.wait_for(10_000), Duration::from_millis(20));
        assert_eq!(bucket.available(start + Duration::from_millis(30)), 10_000);
    }

    #[test]
    fn a_bucket_banks_no_more_than_its_capacity_while_the_client_waits() {
        let start = Instant::now();
        let mut bucket = Bucket::new(1_000_000, 64_000, start);
        // A server that stalls for two seconds earns the client 64 kB, not 2 MB.
        assert_eq!(bucket.available(start + Duration::from_secs(2)), 64_000);
        bucket.spend(64_000);
        assert_eq!(bucket.available(start + Duration::from_secs(2)), 0);
    }
}
