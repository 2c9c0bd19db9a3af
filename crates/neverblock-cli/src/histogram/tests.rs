//! Buckets cover every value once, within 1/128, and percentiles rank as a sorted list would.

use super::*;

#[test]
fn every_value_falls_in_a_bucket_no_wider_than_a_128th_of_it() {
    let values = (0..1024).chain((10..64).flat_map(|bits| [(1 << bits) - 1, 1 << bits, (1 << bits) + 12_345]));
    for nanos in values.chain([u64::MAX]) {
        let bucket = index(nanos);
        let (low, width) = bounds(bucket);
        assert!(bucket < BUCKETS, "{nanos}");
        assert!(low <= nanos && nanos - low < width, "{nanos} is not in [{low}, {low} + {width})");
        assert!(width == 1 || width <= nanos / 128, "{nanos}: width {width}");
    }
    assert_eq!((index(255), index(256), index(257)), (255, 256, 256), "two nanoseconds a bucket from 256");
}

#[test]
fn percentiles_rank_like_a_sorted_list_within_a_256th() {
    let mut histogram = Histogram::default();
    let mut other = Histogram::default();
    for micros in 1..=1000u64 {
        let target = if micros % 2 == 0 { &mut histogram } else { &mut other };
        target.record(Duration::from_micros(micros * 7));
    }
    histogram.merge(&other);
    assert_eq!(histogram.count(), 1000);
    for (p, rank) in [(0.0, 0), (50.0, 500), (90.0, 899), (99.0, 989)] {
        let exact = Duration::from_micros((rank + 1) * 7).as_secs_f64();
        let got = histogram.percentile(p).unwrap().as_secs_f64();
        assert!((got - exact).abs() <= exact / 256.0, "p{p}: {got} for {exact}");
    }
    assert_eq!(histogram.percentile(100.0), Some(Duration::from_micros(7000)), "the largest, exactly");
    assert_eq!(Histogram::default().percentile(50.0), None);
}

#[test]
fn below_256_ns_percentiles_are_exact_ranks() {
    let mut histogram = Histogram::default();
    (0..100).for_each(|nanos| histogram.record(Duration::from_nanos(nanos)));
    for (p, nanos) in [(0.0, 0), (50.0, 50), (90.0, 89), (99.0, 98), (100.0, 99)] {
        assert_eq!(histogram.percentile(p), Some(Duration::from_nanos(nanos)), "p{p}");
    }
}
