//! A latency histogram (HdrHistogram's log-linear layout): recording is a few
//! instructions and no allocation, and percentiles are exact to 1/256.

use std::time::Duration;

/// Buckets below 256 ns hold one nanosecond each; above, each power of two is cut into 128.
const SUB_BITS: u32 = 7;
/// Enough buckets for any `u64` of nanoseconds.
const BUCKETS: usize = index(u64::MAX) + 1;

/// Latencies by bucket, their count, and the largest exactly.
#[derive(Clone, Debug)]
pub(crate) struct Histogram {
    counts: Vec<u64>,
    total: usize,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram { counts: vec![0; BUCKETS], total: 0, max: 0 }
    }
}

impl Histogram {
    /// Counts one latency.
    pub(crate) fn record(&mut self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[index(nanos)] += 1;
        self.total += 1;
        self.max = self.max.max(nanos);
    }

    /// Adds `other`'s latencies to these.
    pub(crate) fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// How many latencies were recorded.
    pub(crate) fn count(&self) -> usize {
        self.total
    }

    /// The `p`-th percentile (p in 0..=100): the latency ranked `round((count - 1) · p / 100)`
    /// from the fastest, as the middle of its bucket (within 1/256 of it, and never above the
    /// largest); the 100th is the largest, exactly.
    pub(crate) fn percentile(&self, p: f64) -> Option<Duration> {
        let last = self.total.checked_sub(1)?;
        let rank = ((last as f64) * p / 100.0).round() as usize;
        if rank >= last {
            return Some(Duration::from_nanos(self.max));
        }
        let mut seen = 0;
        let bucket = self.counts.iter().position(|&n| {
            seen += n as usize;
            seen > rank
        })?;
        let (low, width) = bounds(bucket);
        Some(Duration::from_nanos((low + width / 2).min(self.max)))
    }
}

/// The bucket of `nanos`: its power of two above 255 (0 below), then its 8 leading bits.
const fn index(nanos: u64) -> usize {
    let shift = (63 - (nanos | 255).leading_zeros()) - SUB_BITS;
    ((shift as usize) << SUB_BITS) + (nanos >> shift) as usize
}

/// The lowest value of `bucket` and how many values it holds.
fn bounds(bucket: usize) -> (u64, u64) {
    let shift = (bucket >> SUB_BITS).saturating_sub(1);
    let low = ((bucket - (shift << SUB_BITS)) as u64) << shift;
    (low, 1 << shift)
}

#[cfg(test)]
mod tests;
