//! The times of a log line: the common log format's `[10/Oct/2000:13:55:36 -0700]` in the server's
//! local time zone (made once a second on each thread, as Apache caches it), seconds and fractions
//! since the epoch, and `strftime` patterns.

use std::cell::RefCell;
use std::io::Write;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use jiff::tz::TimeZone;
use jiff::{Timestamp, ZonedDateTime};

const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

thread_local! {
    /// The last second formatted on this thread, and its text.
    static CLF: RefCell<(i64, Vec<u8>)> = const { RefCell::new((i64::MIN, Vec::new())) };
}

/// `at` in the server's time zone (TZ, else /etc/localtime; UTC if neither can be read).
fn local(at: SystemTime) -> Option<ZonedDateTime> {
    Some(Timestamp::try_from(at).ok()?.to_zoned_datetime(system_zone().clone()))
}

/// The server's time zone, read once, as Apache reads it once at start-up (an access log reads it
/// when it is made). Reading and parsing the zone file takes more stack than a fiber has in a
/// debug build, so in a fiber it is read on the blocking pool.
pub(super) fn system_zone() -> &'static TimeZone {
    static ZONE: OnceLock<TimeZone> = OnceLock::new();
    ZONE.get_or_init(|| neverblock::spawn_blocking(TimeZone::system))
}

/// Appends `at` as the common log format's `[day/Mon/year:hh:mm:ss +hhmm]`.
pub(super) fn write_clf(at: SystemTime, out: &mut Vec<u8>) {
    let second = epoch(at).map_or(0, |d| d.as_secs() as i64);
    CLF.with_borrow_mut(|(cached, text)| {
        if *cached != second {
            text.clear();
            format_clf(at, text);
            *cached = second;
        }
        out.extend_from_slice(text);
    });
}

fn format_clf(at: SystemTime, out: &mut Vec<u8>) {
    match local(at) {
        Some(t) => format_zoned(&t, out),
        None => out.extend_from_slice(b"[-]"),
    }
}

/// Appends `t` as `[day/Mon/year:hh:mm:ss +hhmm]`.
fn format_zoned(t: &ZonedDateTime, out: &mut Vec<u8>) {
    let offset = t.offset().seconds();
    let (sign, offset) = if offset < 0 { ('-', -offset) } else { ('+', offset) };
    let month = MONTHS[usize::try_from(t.month() - 1).unwrap_or(0)];
    // Writing to a Vec cannot fail.
    let _ = write!(
        out,
        "[{:02}/{month}/{}:{:02}:{:02}:{:02} {sign}{:02}{:02}]",
        t.day(),
        t.year(),
        t.hour(),
        t.minute(),
        t.second(),
        offset / 3600,
        offset % 3600 / 60
    );
}

/// How a `%{...}t` shows its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape<'a> {
    Clf,
    Seconds,
    Millis,
    Micros,
    MillisFraction,
    MicrosFraction,
    Strftime(&'a str),
}

/// What `%{arg}t` asks for: whether the request's end (not its start), and the shape (Apache's
/// `begin:`/`end:` prefixes, `sec`, `msec`, `usec`, `msec_frac`, `usec_frac`, or a `strftime` pattern).
pub(super) fn parse_arg(arg: &str) -> (bool, Shape<'_>) {
    let (end, rest) = match (arg.strip_prefix("begin"), arg.strip_prefix("end")) {
        (Some(rest), _) => (false, rest),
        (None, Some(rest)) => (true, rest),
        _ => (false, arg),
    };
    let rest = match rest {
        "" => return (end, Shape::Clf),
        _ if rest.len() < arg.len() => match rest.strip_prefix(':') {
            Some(rest) => rest,
            None => return (false, Shape::Strftime(arg)),
        },
        _ => rest,
    };
    let shape = match rest {
        "" => Shape::Clf,
        "sec" => Shape::Seconds,
        "msec" => Shape::Millis,
        "usec" => Shape::Micros,
        "msec_frac" => Shape::MillisFraction,
        "usec_frac" => Shape::MicrosFraction,
        pattern => Shape::Strftime(pattern),
    };
    (end, shape)
}

/// Appends `at` in `shape`; returns false if it cannot be shown (a pattern `strftime` refuses).
pub(super) fn write_shaped(at: SystemTime, shape: Shape<'_>, out: &mut Vec<u8>) -> bool {
    let since = epoch(at).unwrap_or_default();
    // Writing to a Vec cannot fail.
    let _ = match shape {
        Shape::Clf => {
            write_clf(at, out);
            Ok(())
        }
        Shape::Seconds => write!(out, "{}", since.as_secs()),
        Shape::Millis => write!(out, "{}", since.as_millis()),
        Shape::Micros => write!(out, "{}", since.as_micros()),
        Shape::MillisFraction => write!(out, "{:03}", since.subsec_millis()),
        Shape::MicrosFraction => write!(out, "{:06}", since.subsec_micros()),
        Shape::Strftime(pattern) => {
            let Some(text) = local(at).and_then(|t| jiff::fmt::strtime::format(pattern, &t).ok()) else {
                return false;
            };
            out.extend_from_slice(text.as_bytes());
            Ok(())
        }
    };
    true
}

/// Whether `pattern` is one `strftime` can show.
pub(super) fn is_valid_strftime(pattern: &str) -> bool {
    jiff::fmt::strtime::format(pattern, &Timestamp::UNIX_EPOCH.to_zoned_datetime(TimeZone::UTC)).is_ok()
}

fn epoch(at: SystemTime) -> Option<std::time::Duration> {
    at.duration_since(UNIX_EPOCH).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_arguments_read_as_apache_reads_them() {
        assert_eq!(parse_arg(""), (false, Shape::Clf));
        assert_eq!(parse_arg("end"), (true, Shape::Clf));
        assert_eq!(parse_arg("msec"), (false, Shape::Millis));
        assert_eq!(parse_arg("end:usec_frac"), (true, Shape::MicrosFraction));
        assert_eq!(parse_arg("begin:%Y"), (false, Shape::Strftime("%Y")));
        assert_eq!(parse_arg("%d/%b/%Y"), (false, Shape::Strftime("%d/%b/%Y")));
        assert_eq!(parse_arg("endless"), (false, Shape::Strftime("endless")));
    }

    #[test]
    fn the_common_log_format_shows_local_time_and_its_offset() {
        let shown = |offset_seconds: i32| {
            let offset = jiff::tz::Offset::from_seconds(offset_seconds).unwrap();
            let at = Timestamp::from_second(971_211_336).unwrap().to_zoned_datetime(TimeZone::fixed(offset));
            let mut out = Vec::new();
            format_zoned(&at, &mut out);
            String::from_utf8(out).unwrap()
        };
        // Apache's documented example: 13:55:36 at -0700 is 20:55:36 UTC.
        assert_eq!(shown(-7 * 3600), "[10/Oct/2000:13:55:36 -0700]");
        assert_eq!(shown(0), "[10/Oct/2000:20:55:36 +0000]");
        assert_eq!(shown(5 * 3600 + 1800), "[11/Oct/2000:02:25:36 +0530]");
        assert_eq!(shown(-(3 * 3600 + 1800)), "[10/Oct/2000:17:25:36 -0330]");
    }

    #[test]
    fn epoch_shapes_count_from_1970() {
        let at = UNIX_EPOCH + std::time::Duration::from_micros(1_700_000_000_123_456);
        let shown = |shape| {
            let mut out = Vec::new();
            assert!(write_shaped(at, shape, &mut out));
            String::from_utf8(out).unwrap()
        };
        assert_eq!(shown(Shape::Seconds), "1700000000");
        assert_eq!(shown(Shape::Millis), "1700000000123");
        assert_eq!(shown(Shape::Micros), "1700000000123456");
        assert_eq!(shown(Shape::MillisFraction), "123");
        assert_eq!(shown(Shape::MicrosFraction), "123456");
    }
}
