//! `Range: bytes=…` (RFC 9110 §14): one range is served as a 206; several that overlap or touch are
//! merged and served as one; several apart are answered with the whole file (200), which RFC 9110
//! allows, rather than `multipart/byteranges`: browsers and download tools ask for one range,
//! and a whole file is never more than the client could have fetched anyway. So no set of ranges,
//! however many or overlapping, makes a response longer than the file; and a field with more than
//! [`MAX_RANGES`] ranges is not even looked at.

use std::ops::Range;

/// The most ranges one field may list before it is ignored.
pub(super) const MAX_RANGES: usize = 16;

/// What to send for a `Range` field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Selection {
    /// The whole file (no field, a field not understood, or ranges that are not one).
    Whole,
    /// This part of it (206).
    Part(Range<u64>),
    /// Nothing the file has (416).
    Unsatisfiable,
}

/// What `field` asks of a file of `size` bytes.
pub(super) fn select(field: &str, size: u64) -> Selection {
    let Some(specs) = strip_unit(field.trim()) else { return Selection::Whole };
    let mut ranges = Vec::new();
    let mut seen = 0;
    for spec in specs.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        seen += 1;
        if seen > MAX_RANGES {
            return Selection::Whole;
        }
        match parse(spec, size) {
            Spec::Invalid => return Selection::Whole,
            Spec::Outside => {}
            Spec::Within(range) => ranges.push(range),
        }
    }
    if seen == 0 || size == 0 {
        // No range at all is no range field. And some clients send a range with every request: an empty file is simply sent whole (Go's rule).
        return Selection::Whole;
    }
    ranges.sort_by_key(|r| r.start);
    let mut merged = ranges.into_iter();
    let Some(mut one) = merged.next() else { return Selection::Unsatisfiable };
    for next in merged {
        if next.start > one.end {
            return Selection::Whole;
        }
        one.end = one.end.max(next.end);
    }
    Selection::Part(one)
}

/// The field's ranges after `bytes=` (the unit in any case).
fn strip_unit(field: &str) -> Option<&str> {
    let (unit, specs) = field.split_once('=')?;
    unit.trim().eq_ignore_ascii_case("bytes").then_some(specs)
}

enum Spec {
    Invalid,
    /// Valid, but nothing of the file.
    Outside,
    Within(Range<u64>),
}

/// One `first-last`, `first-` or `-suffix`.
fn parse(spec: &str, size: u64) -> Spec {
    let Some((first, last)) = spec.split_once('-') else { return Spec::Invalid };
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        return match number(last) {
            Some(0) => Spec::Outside,
            Some(suffix) => Spec::Within(size.saturating_sub(suffix)..size),
            None => Spec::Invalid,
        };
    }
    let Some(start) = number(first) else { return Spec::Invalid };
    let end = match (last.is_empty(), number(last)) {
        (true, _) => None,
        (false, Some(end)) if end >= start => Some(end),
        (false, _) => return Spec::Invalid,
    };
    if start >= size {
        return Spec::Outside;
    }
    Spec::Within(start..end.map_or(size, |end| end.saturating_add(1).min(size)))
}

/// A run of decimal digits; one too long for a u64 is past the end of any file.
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Selection::*;

    #[test]
    fn ranges_select_one_part_the_whole_or_nothing() {
        let cases: &[(&str, Selection)] = &[
            ("bytes=0-99", Part(0..100)),
            ("bytes=10-", Part(10..1000)),
            ("bytes=-100", Part(900..1000)),
            ("bytes=-5000", Part(0..1000)),
            ("bytes=990-5000", Part(990..1000)),
            ("Bytes = 1-1", Part(1..2)),
            ("bytes=0-9, 5-19", Part(0..20)),
            ("bytes=10-19,0-9", Part(0..20)),
            ("bytes=0-0,0-0,0-0", Part(0..1)),
            ("bytes=0-9, 100-109", Whole),
            ("bytes=1000-", Unsatisfiable),
            ("bytes=-0", Unsatisfiable),
            ("bytes=5000-6000, 2000-", Unsatisfiable),
            ("bytes=5000-6000, 0-1", Part(0..2)),
            ("bytes=99999999999999999999999-", Unsatisfiable),
            ("bytes=9-1", Whole),
            ("bytes=a-b", Whole),
            ("bytes=1-2-3", Whole),
            ("bytes=", Whole),
            ("items=0-1", Whole),
            ("bytes 0-1", Whole),
        ];
        for (field, expected) in cases {
            assert_eq!(&select(field, 1000), expected, "{field:?}");
        }
    }

    #[test]
    fn many_ranges_never_amplify_the_response() {
        let overlapping = format!("bytes={}", vec!["0-"; MAX_RANGES].join(","));
        assert_eq!(select(&overlapping, 1000), Part(0..1000), "merged into one whole-file range");
        let too_many = format!("bytes={}", vec!["0-1"; MAX_RANGES + 1].join(","));
        assert_eq!(select(&too_many, 1000), Whole);
    }

    #[test]
    fn an_empty_file_is_sent_whole() {
        assert_eq!(select("bytes=0-", 0), Whole);
    }
}
