//! The counters behind the metrics: one shard per event loop, so the loops of a busy server never
//! write the same cache line; a page sums them.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Methods counted by name; any other is `other`.
pub(super) const METHODS: [&str; 10] =
    ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "other"];
/// Status classes, `1xx` to `9xx` (a handler may answer up to 999).
pub(super) const CLASSES: usize = 9;
/// The request-duration histogram's upper bounds, in seconds (`+Inf` after them): Prometheus'
/// defaults, with a millisecond below them and half and whole minutes above for downloads.
pub(super) const BOUNDS: [f64; 14] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
/// How an upstream failed.
pub(super) const UPSTREAM_ERRORS: [&str; 4] = ["refused", "reset", "timeout", "other"];
/// How a TLS handshake ended.
pub(super) const HANDSHAKE_OUTCOMES: [&str; 5] = ["completed", "plain_http", "timed_out", "closed", "failed"];
/// The TLS version a handshake agreed on (`none` when it did not complete).
pub(super) const TLS_VERSIONS: [&str; 3] = ["TLSv1.3", "TLSv1.2", "none"];

/// The versions requests are counted by.
pub(super) const VERSIONS: [&str; 3] = ["HTTP/1.0", "HTTP/1.1", "HTTP/2.0"];

/// Handshake counts by outcome, version and whether they resumed a session.
pub(super) type Handshakes<T> = [[[T; 2]; TLS_VERSIONS.len()]; HANDSHAKE_OUTCOMES.len()];

/// One loop's counters, alone on its cache lines.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(super) struct Shard {
    requests: [[AtomicU64; CLASSES]; METHODS.len()],
    by_version: [AtomicU64; VERSIONS.len()],
    body_bytes: AtomicU64,
    /// Cumulative counts are made when the page is; these count each bucket alone (the last is +Inf).
    buckets: [AtomicU64; BOUNDS.len() + 1],
    duration_micros: AtomicU64,
    proxied: AtomicU64,
    upstream_errors: [AtomicU64; UPSTREAM_ERRORS.len()],
    handshakes: Handshakes<AtomicU64>,
}

/// Every shard, and the gauges (rarely written: twice a download or a proxied request).
#[derive(Debug)]
pub(super) struct Counters {
    shards: Box<[Shard]>,
    pub(super) downloads: AtomicI64,
    pub(super) proxied_in_flight: AtomicI64,
}

/// The counters summed over the shards.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) requests: [[u64; CLASSES]; METHODS.len()],
    pub(super) by_version: [u64; VERSIONS.len()],
    pub(super) body_bytes: u64,
    pub(super) buckets: [u64; BOUNDS.len() + 1],
    pub(super) duration_micros: u64,
    pub(super) proxied: u64,
    pub(super) upstream_errors: [u64; UPSTREAM_ERRORS.len()],
    pub(super) handshakes: Handshakes<u64>,
}

impl Counters {
    pub(super) fn new(shards: usize) -> Counters {
        Counters {
            shards: (0..shards.max(1)).map(|_| Shard::default()).collect(),
            downloads: AtomicI64::new(0),
            proxied_in_flight: AtomicI64::new(0),
        }
    }

    /// This loop's shard.
    fn shard(&self) -> &Shard {
        &self.shards[neverblock::runtime::thread_index() % self.shards.len()]
    }

    /// Counts a request answered with `status` after `duration`, its body `body_bytes` long.
    pub(super) fn request(&self, method: &str, status: u16, body_bytes: u64, duration: Duration) {
        let shard = self.shard();
        let method = METHODS.iter().position(|m| *m == method).unwrap_or(METHODS.len() - 1);
        let class = usize::from(status / 100).clamp(1, CLASSES) - 1;
        shard.requests[method][class].fetch_add(1, Relaxed);
        shard.body_bytes.fetch_add(body_bytes, Relaxed);
        let seconds = duration.as_secs_f64();
        let bucket = BOUNDS.iter().position(|&bound| seconds <= bound).unwrap_or(BOUNDS.len());
        shard.buckets[bucket].fetch_add(1, Relaxed);
        shard.duration_micros.fetch_add(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }

    /// Counts a request (an HTTP/2 stream, a message on an HTTP/1 connection) in `VERSIONS[version]`.
    pub(super) fn version(&self, version: usize) {
        self.shard().by_version[version].fetch_add(1, Relaxed);
    }

    /// Counts a request sent to the upstream.
    #[cfg(feature = "client")]
    pub(super) fn proxied(&self) {
        self.shard().proxied.fetch_add(1, Relaxed);
    }

    /// Counts an upstream failure of kind `UPSTREAM_ERRORS[kind]`.
    #[cfg(feature = "client")]
    pub(super) fn upstream_error(&self, kind: usize) {
        self.shard().upstream_errors[kind].fetch_add(1, Relaxed);
    }

    /// Counts a TLS handshake that ended as `HANDSHAKE_OUTCOMES[outcome]`, agreeing on
    /// `TLS_VERSIONS[version]`, resumed or not.
    pub(super) fn handshake(&self, outcome: usize, version: usize, resumed: bool) {
        self.shard().handshakes[outcome][version][usize::from(resumed)].fetch_add(1, Relaxed);
    }

    pub(super) fn totals(&self) -> Totals {
        let mut t = Totals::default();
        let add = |total: &mut u64, counter: &AtomicU64| *total += counter.load(Relaxed);
        for shard in self.shards.iter() {
            for (total, row) in t.requests.iter_mut().zip(&shard.requests) {
                total.iter_mut().zip(row).for_each(|(t, c)| add(t, c));
            }
            t.by_version.iter_mut().zip(&shard.by_version).for_each(|(t, c)| add(t, c));
            t.buckets.iter_mut().zip(&shard.buckets).for_each(|(t, c)| add(t, c));
            t.upstream_errors.iter_mut().zip(&shard.upstream_errors).for_each(|(t, c)| add(t, c));
            for (total, counted) in t.handshakes.iter_mut().flatten().zip(shard.handshakes.iter().flatten()) {
                total.iter_mut().zip(counted).for_each(|(t, c)| add(t, c));
            }
            add(&mut t.body_bytes, &shard.body_bytes);
            add(&mut t.duration_micros, &shard.duration_micros);
            add(&mut t.proxied, &shard.proxied);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_land_in_their_method_class_and_bucket() {
        let counters = Counters::new(2);
        counters.request("GET", 200, 10, Duration::from_micros(500));
        counters.request("GET", 204, 0, Duration::from_millis(7));
        counters.request("BREW", 418, 5, Duration::from_secs(100));
        counters.request("POST", 999, 0, Duration::from_millis(60));
        let t = counters.totals();
        assert_eq!(t.requests[0][1], 2, "GET 2xx");
        assert_eq!(t.requests[METHODS.len() - 1][3], 1, "other 4xx");
        assert_eq!(t.requests[2][8], 1, "POST 9xx");
        assert_eq!(t.body_bytes, 15);
        assert_eq!((t.buckets[0], t.buckets[2], t.buckets[5], t.buckets[BOUNDS.len()]), (1, 1, 1, 1));
        assert_eq!(t.duration_micros, 500 + 7_000 + 100_000_000 + 60_000);
    }
}
