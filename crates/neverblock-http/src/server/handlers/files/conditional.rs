//! Conditional requests (RFC 9110 §13): one small function per precondition, and
//! [`evaluate`] applying them in §13.2.2's order, as Go's `checkPreconditions` does.
//!
//! The order: `If-Match` (412 when false), else `If-Unmodified-Since` (412); then `If-None-Match`
//! (304 for GET and HEAD when false, else 412), else for GET and HEAD `If-Modified-Since` (304);
//! then, for a GET with a `Range`, `If-Range` decides whether the range applies. A date that does
//! not parse makes its field count as absent, and so does an `If-Modified-Since` later than the
//! server's clock (Apache's rule: no client can have seen that date); an entity tag list that does
//! not parse counts as matching nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a representation is compared by.
#[derive(Clone, Copy, Debug)]
pub(super) struct Validators<'a> {
    /// The strong entity tag, quotes included.
    pub(super) etag: &'a str,
    /// The modification time, to the second (as `Last-Modified` says it).
    pub(super) modified: SystemTime,
    /// The server's clock.
    pub(super) now: SystemTime,
}

/// The request's conditional fields.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Conditions<'a> {
    pub(super) if_match: Option<&'a str>,
    pub(super) if_unmodified_since: Option<&'a str>,
    pub(super) if_none_match: Option<&'a str>,
    pub(super) if_modified_since: Option<&'a str>,
    pub(super) if_range: Option<&'a str>,
}

impl Conditions<'_> {
    /// Whether the request has none of the conditional fields.
    pub(super) fn is_empty(&self) -> bool {
        let Conditions { if_match, if_unmodified_since, if_none_match, if_modified_since, if_range } = self;
        [if_match, if_unmodified_since, if_none_match, if_modified_since, if_range].iter().all(|field| field.is_none())
    }
}

/// What the preconditions decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Answer normally; honour the `Range` field only if `range` is true.
    Proceed { range: bool },
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// Evaluates `c` for a request with `method` against `v`, in RFC 9110 §13.2.2's order.
pub(super) fn evaluate(method: &str, c: &Conditions<'_>, v: &Validators<'_>) -> Outcome {
    let safe = method == "GET" || method == "HEAD";
    let held = match c.if_match {
        Some(field) => Some(if_match(field, v.etag)),
        None => c.if_unmodified_since.and_then(|field| if_unmodified_since(field, v.modified)),
    };
    if held == Some(false) {
        return Outcome::Failed;
    }
    match c.if_none_match.map(|field| if_none_match(field, v.etag)) {
        Some(false) if safe => return Outcome::NotModified,
        Some(false) => return Outcome::Failed,
        Some(true) => {}
        None if safe
            && c.if_modified_since.and_then(|field| if_modified_since(field, v.modified, v.now)) == Some(false) =>
        {
            return Outcome::NotModified;
        }
        None => {}
    }
    Outcome::Proceed { range: method == "GET" && c.if_range.is_none_or(|field| if_range(field, v)) }
}

/// `If-Match`: true for `*` or a strong match with any listed tag.
pub(super) fn if_match(field: &str, etag: &str) -> bool {
    field.trim() == "*" || tags(field).any(|tag| strong_match(tag, etag))
}

/// `If-Unmodified-Since`: true if not modified after the date; `None` for a date that does not parse.
pub(super) fn if_unmodified_since(field: &str, modified: SystemTime) -> Option<bool> {
    let date = httpdate::parse_http_date(field.trim()).ok()?;
    Some(to_second(modified) <= date)
}

/// `If-None-Match`: false for `*` or a weak match with any listed tag.
pub(super) fn if_none_match(field: &str, etag: &str) -> bool {
    !(field.trim() == "*" || tags(field).any(|tag| weak_match(tag, etag)))
}

/// `If-Modified-Since`: true if modified after the date; `None` for a date that does not parse or
/// is later than `now`.
pub(super) fn if_modified_since(field: &str, modified: SystemTime, now: SystemTime) -> Option<bool> {
    let date = httpdate::parse_http_date(field.trim()).ok().filter(|&date| date <= now)?;
    Some(to_second(modified) > date)
}

/// `If-Range`: true if the tag matches strongly, or the date is exactly the modification time.
pub(super) fn if_range(field: &str, v: &Validators<'_>) -> bool {
    let field = field.trim();
    if field.starts_with('"') || field.starts_with("W/") {
        return strong_match(field, v.etag);
    }
    httpdate::parse_http_date(field).is_ok_and(|date| date == to_second(v.modified))
}

/// The entity tags of a list (`"a", W/"b"`); stops at the first that does not parse.
fn tags(field: &str) -> impl Iterator<Item = &str> {
    let mut rest = field;
    std::iter::from_fn(move || {
        rest = rest.trim_start_matches([' ', '\t', ',']);
        if rest.is_empty() {
            return None;
        }
        let start = if rest.starts_with("W/") { 2 } else { 0 };
        let close = rest.get(start..)?.strip_prefix('"')?.find('"')? + start + 2;
        let (tag, after) = rest.split_at(close);
        rest = after;
        Some(tag)
    })
}

/// Strong comparison: both strong and the same.
fn strong_match(a: &str, b: &str) -> bool {
    a == b && a.starts_with('"')
}

/// Weak comparison: the same once any `W/` is dropped.
fn weak_match(a: &str, b: &str) -> bool {
    a.trim_start_matches("W/") == b.trim_start_matches("W/")
}

/// `t` without its fraction of a second, as an HTTP date carries it.
pub(super) fn to_second(t: SystemTime) -> SystemTime {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    UNIX_EPOCH + Duration::from_secs(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETAG: &str = "\"abc\"";

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn date(secs: u64) -> String {
        httpdate::fmt_http_date(at(secs))
    }

    #[test]
    fn each_rule_alone() {
        assert!(if_match("*", ETAG) && if_match("\"x\", \"abc\"", ETAG));
        assert!(!if_match("W/\"abc\"", ETAG), "If-Match compares strongly");
        assert!(!if_match("abc", ETAG), "an unquoted tag matches nothing");
        assert!(!if_none_match("W/\"abc\"", ETAG) && !if_none_match("*", ETAG));
        assert!(if_none_match("\"x\",\"y\"", ETAG));
        let modified = at(1_000_000) + Duration::from_millis(700);
        assert_eq!(if_unmodified_since(&date(1_000_000), modified), Some(true), "to the second");
        assert_eq!(if_unmodified_since(&date(999_999), modified), Some(false));
        assert_eq!(if_unmodified_since("yesterday", modified), None);
        let now = at(2_000_000);
        assert_eq!(if_modified_since(&date(1_000_000), modified, now), Some(false));
        assert_eq!(if_modified_since(&date(999_999), modified, now), Some(true));
        assert_eq!(if_modified_since(&date(2_000_001), modified, now), None, "a date from the future");
        let v = Validators { etag: ETAG, modified, now };
        assert!(if_range(ETAG, &v) && if_range(&date(1_000_000), &v));
        assert!(!if_range("W/\"abc\"", &v) && !if_range(&date(1_000_001), &v) && !if_range("junk", &v));
    }

    #[test]
    fn rules_apply_in_rfc_9110_order() {
        let v = Validators { etag: ETAG, modified: at(1_000_000), now: at(2_000_000) };
        let (old, new) = (date(999_000), date(1_001_000));
        let c = |f: fn(&mut Conditions<'static>)| {
            let mut c = Conditions::default();
            f(&mut c);
            c
        };
        let cases: Vec<(&str, Conditions<'_>, Outcome)> = vec![
            ("GET", Conditions::default(), Outcome::Proceed { range: true }),
            ("GET", c(|c| c.if_match = Some("\"other\"")), Outcome::Failed),
            (
                "GET",
                Conditions { if_match: Some(ETAG), if_unmodified_since: Some(&old), ..Default::default() },
                Outcome::Proceed { range: true },
            ),
            ("GET", Conditions { if_unmodified_since: Some(&old), ..Default::default() }, Outcome::Failed),
            ("GET", c(|c| c.if_none_match = Some("\"abc\"")), Outcome::NotModified),
            ("HEAD", c(|c| c.if_none_match = Some("*")), Outcome::NotModified),
            ("POST", c(|c| c.if_none_match = Some("\"abc\"")), Outcome::Failed),
            (
                "GET",
                Conditions { if_none_match: Some("\"x\""), if_modified_since: Some(&new), ..Default::default() },
                Outcome::Proceed { range: true },
            ),
            ("GET", Conditions { if_modified_since: Some(&new), ..Default::default() }, Outcome::NotModified),
            (
                "GET",
                Conditions { if_modified_since: Some(&old), ..Default::default() },
                Outcome::Proceed { range: true },
            ),
            (
                "POST",
                Conditions { if_modified_since: Some(&new), ..Default::default() },
                Outcome::Proceed { range: false },
            ),
            ("GET", c(|c| c.if_range = Some("\"stale\"")), Outcome::Proceed { range: false }),
            ("HEAD", Conditions::default(), Outcome::Proceed { range: false }),
            (
                "GET",
                Conditions { if_match: Some("\"x\""), if_none_match: Some("\"abc\""), ..Default::default() },
                Outcome::Failed,
            ),
        ];
        for (method, conditions, expected) in cases {
            assert_eq!(evaluate(method, &conditions, &v), expected, "{method} {conditions:?}");
        }
    }
}
