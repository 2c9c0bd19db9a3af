//! `date`, `timestamp` and `timestamptz`: [`Date`] and [`Timestamp`] (calendar
//! values without a zone, kept as PostgreSQL keeps them), and `SystemTime` (an instant).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use postgres_protocol::types as wire;

use super::{Format, FromSql, IsNull, ToSql, Type};

/// Days from 1970-01-01 to PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_DAYS: i64 = 10_957;
const MICROS_PER_DAY: i64 = 86_400_000_000;

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let year_of_era = y - era * 400;
    let day_of_year = (153 * i64::from((month + 9) % 12) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date `days` after 1970-01-01: (year, month, day).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (year_of_era + era * 400 + i64::from(month <= 2), month, day)
}

/// A `date`: a day of the proleptic Gregorian calendar, or ±infinity.
///
/// # Examples
///
/// ```
/// use neverblock_pg::types::Date;
///
/// let d = Date::from_ymd(2024, 2, 29).unwrap();
/// assert_eq!(d.ymd(), (2024, 2, 29));
/// assert_eq!(d.to_string(), "2024-02-29");
/// assert_eq!(Date::from_ymd(2023, 2, 29), None);
/// assert_eq!(Date::from_ymd(-43, 3, 15).unwrap().to_string(), "0044-03-15 BC");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    /// Days since 2000-01-01, as PostgreSQL stores it; `i32::MAX`/`MIN` are ±infinity.
    days: i32,
}

impl Date {
    /// `infinity`, later than every date.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::types::{Date, Timestamp};
    /// assert!(Date::INFINITY > Date::from_ymd(9999, 12, 31).unwrap());
    /// ```
    pub const INFINITY: Date = Date { days: i32::MAX };
    /// `-infinity`, earlier than every date.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::types::{Date, Timestamp};
    /// assert!(Date::NEG_INFINITY < Date::from_ymd(-4713, 11, 24).unwrap());
    /// ```
    pub const NEG_INFINITY: Date = Date { days: i32::MIN };

    /// The date `year-month-day` (year 0 is 1 BC), if it exists.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::types::{Date, Timestamp};
    /// assert_eq!(Date::from_ymd(2000, 1, 1).unwrap().to_string(), "2000-01-01");
    /// assert_eq!(Date::from_ymd(2000, 13, 1), None);
    /// ```
    pub fn from_ymd(year: i32, month: u32, day: u32) -> Option<Date> {
        if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
            return None;
        }
        let days = days_from_civil(i64::from(year), month, day);
        let date = Date { days: i32::try_from(days - PG_EPOCH_DAYS).ok()? };
        (date.ymd() == (year, month, day) && date.is_finite()).then_some(date)
    }

    /// (year, month, day); year 0 is 1 BC. Meaningless for ±infinity.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::types::{Date, Timestamp};
    /// assert_eq!(Date::from_ymd(1, 1, 1).unwrap().ymd(), (1, 1, 1));
    /// ```
    pub fn ymd(self) -> (i32, u32, u32) {
        let (y, m, d) = civil_from_days(i64::from(self.days) + PG_EPOCH_DAYS);
        (y as i32, m, d)
    }

    /// Whether this is a real day (not ±infinity).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!neverblock_pg::types::Date::INFINITY.is_finite());
    /// ```
    pub fn is_finite(self) -> bool {
        self != Date::INFINITY && self != Date::NEG_INFINITY
    }
}

fn write_ymd(f: &mut fmt::Formatter<'_>, (y, m, d): (i32, u32, u32)) -> fmt::Result {
    if y > 0 {
        write!(f, "{y:04}-{m:02}-{d:02}")
    } else {
        write!(f, "{:04}-{m:02}-{d:02} BC", 1 - y)
    }
}

impl fmt::Display for Date {
    /// As PostgreSQL prints it (ISO): `2024-02-29`, `0044-03-15 BC`, `infinity`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Date::INFINITY => f.write_str("infinity"),
            Date::NEG_INFINITY => f.write_str("-infinity"),
            date => write_ymd(f, date.ymd()),
        }
    }
}

impl ToSql for Date {
    fn accepts(&self, ty: Type) -> bool {
        ty == Type::DATE
    }
    fn to_sql(&self, _: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        wire::date_to_sql(self.days, out);
        Ok(IsNull::No)
    }
}

impl FromSql<'_> for Date {
    fn accepts(ty: Type, format: Format) -> bool {
        ty == Type::DATE && format == Format::Binary
    }
    fn from_sql(_: Type, raw: &[u8]) -> Result<Date, String> {
        wire::date_from_sql(raw).map(|days| Date { days }).map_err(|e| e.to_string())
    }
}

/// A `timestamp` (without time zone): a date and a time of day to the microsecond, or ±infinity.
///
/// # Examples
///
/// ```
/// use neverblock_pg::types::{Date, Timestamp};
///
/// let t = Timestamp::new(Date::from_ymd(1999, 12, 31).unwrap(), 23, 59, 59, 500_000).unwrap();
/// assert_eq!(t.to_string(), "1999-12-31 23:59:59.5");
/// assert_eq!(t.date().ymd(), (1999, 12, 31));
/// assert_eq!(t.time(), (23, 59, 59, 500_000));
/// assert_eq!(Timestamp::new(Date::from_ymd(2000, 1, 1).unwrap(), 24, 0, 0, 0), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    /// Microseconds since 2000-01-01 00:00:00, as PostgreSQL stores it; `i64::MAX`/`MIN` are ±infinity.
    micros: i64,
}

impl Timestamp {
    /// `infinity`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::types::{Date, Timestamp};
    /// assert_eq!(Timestamp::INFINITY.to_string(), "infinity");
    /// ```
    pub const INFINITY: Timestamp = Timestamp { micros: i64::MAX };
    /// `-infinity`.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::types::{Date, Timestamp};
    /// assert_eq!(Timestamp::NEG_INFINITY.to_string(), "-infinity");
    /// ```
    pub const NEG_INFINITY: Timestamp = Timestamp { micros: i64::MIN };

    /// `date` at `hour:minute:second.micro`, if those are a time of day.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::types::{Date, Timestamp};
    /// let t = Timestamp::new(Date::from_ymd(2024, 1, 2).unwrap(), 3, 4, 5, 6).unwrap();
    /// assert_eq!(t.to_string(), "2024-01-02 03:04:05.000006");
    /// ```
    pub fn new(date: Date, hour: u32, minute: u32, second: u32, micro: u32) -> Option<Timestamp> {
        if !date.is_finite() || hour > 23 || minute > 59 || second > 59 || micro > 999_999 {
            return None;
        }
        let time = ((i64::from(hour) * 60 + i64::from(minute)) * 60 + i64::from(second)) * 1_000_000 + i64::from(micro);
        Some(Timestamp { micros: i64::from(date.days) * MICROS_PER_DAY + time })
    }

    /// The date. Meaningless for ±infinity.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::types::{Date, Timestamp};
    /// let d = Date::from_ymd(2024, 1, 2).unwrap();
    /// assert_eq!(Timestamp::new(d, 23, 0, 0, 0).unwrap().date(), d);
    /// ```
    pub fn date(self) -> Date {
        Date { days: self.micros.div_euclid(MICROS_PER_DAY) as i32 }
    }

    /// (hour, minute, second, microsecond). Meaningless for ±infinity.
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::types::{Date, Timestamp};
    /// let d = Date::from_ymd(2024, 1, 2).unwrap();
    /// assert_eq!(Timestamp::new(d, 23, 1, 2, 3).unwrap().time(), (23, 1, 2, 3));
    /// ```
    pub fn time(self) -> (u32, u32, u32, u32) {
        let t = self.micros.rem_euclid(MICROS_PER_DAY);
        let secs = t / 1_000_000;
        ((secs / 3600) as u32, (secs / 60 % 60) as u32, (secs % 60) as u32, (t % 1_000_000) as u32)
    }

    /// The UTC calendar reading of an instant (what a `timestamptz` shows in zone UTC).
    ///
    /// # Examples
    ///
    /// ```
    /// use neverblock_pg::types::Timestamp;
    /// let epoch = Timestamp::from_system_time(std::time::UNIX_EPOCH);
    /// assert_eq!(epoch.to_string(), "1970-01-01 00:00:00");
    /// ```
    pub fn from_system_time(t: SystemTime) -> Timestamp {
        Timestamp { micros: micros_since_pg_epoch(t) }
    }

    /// Whether this is a real time (not ±infinity).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!neverblock_pg::types::Timestamp::NEG_INFINITY.is_finite());
    /// ```
    pub fn is_finite(self) -> bool {
        self != Timestamp::INFINITY && self != Timestamp::NEG_INFINITY
    }
}

impl fmt::Display for Timestamp {
    /// As PostgreSQL prints it (ISO): `2024-02-29 13:05:00.25`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Timestamp::INFINITY => return f.write_str("infinity"),
            Timestamp::NEG_INFINITY => return f.write_str("-infinity"),
            _ => {}
        }
        let (y, mo, d) = self.date().ymd();
        let (h, mi, s, us) = self.time();
        let (bc, y) = if y > 0 { ("", y) } else { (" BC", 1 - y) };
        write!(f, "{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")?;
        if us > 0 {
            let fraction = format!("{us:06}");
            write!(f, ".{}", fraction.trim_end_matches('0'))?;
        }
        f.write_str(bc)
    }
}

impl ToSql for Timestamp {
    fn accepts(&self, ty: Type) -> bool {
        ty == Type::TIMESTAMP
    }
    fn to_sql(&self, _: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        wire::timestamp_to_sql(self.micros, out);
        Ok(IsNull::No)
    }
}

impl FromSql<'_> for Timestamp {
    fn accepts(ty: Type, format: Format) -> bool {
        ty == Type::TIMESTAMP && format == Format::Binary
    }
    fn from_sql(_: Type, raw: &[u8]) -> Result<Timestamp, String> {
        wire::timestamp_from_sql(raw).map(|micros| Timestamp { micros }).map_err(|e| e.to_string())
    }
}

/// Microseconds from 2000-01-01 UTC to `t` (saturating far outside PostgreSQL's range).
fn micros_since_pg_epoch(t: SystemTime) -> i64 {
    let unix_micros = match t.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_micros()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_micros()).map_or(i64::MIN, |m| -m),
    };
    unix_micros.saturating_sub(PG_EPOCH_DAYS * MICROS_PER_DAY)
}

/// `timestamptz`: an instant; sent and read in UTC, whatever the session's zone.
impl ToSql for SystemTime {
    fn accepts(&self, ty: Type) -> bool {
        ty == Type::TIMESTAMPTZ
    }
    fn to_sql(&self, _: Type, out: &mut BytesMut) -> Result<IsNull, String> {
        wire::timestamp_to_sql(micros_since_pg_epoch(*self), out);
        Ok(IsNull::No)
    }
}

impl FromSql<'_> for SystemTime {
    fn accepts(ty: Type, format: Format) -> bool {
        ty == Type::TIMESTAMPTZ && format == Format::Binary
    }
    fn from_sql(_: Type, raw: &[u8]) -> Result<SystemTime, String> {
        let micros = wire::timestamp_from_sql(raw).map_err(|e| e.to_string())?;
        if micros == i64::MAX || micros == i64::MIN {
            return Err("an infinite timestamptz has no SystemTime; read it as a String".into());
        }
        let unix_micros = micros + PG_EPOCH_DAYS * MICROS_PER_DAY;
        let offset = Duration::from_micros(unix_micros.unsigned_abs());
        let t = if unix_micros >= 0 { UNIX_EPOCH.checked_add(offset) } else { UNIX_EPOCH.checked_sub(offset) };
        t.ok_or_else(|| "the timestamptz is out of SystemTime's range".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_day_of_four_centuries_round_trips_through_the_calendar() {
        let start = days_from_civil(1900, 1, 1);
        for days in start..start + 146_097 {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(days_from_civil(2000, 1, 1), PG_EPOCH_DAYS);
        assert_eq!(civil_from_days(0), (1970, 1, 1));
    }

    #[test]
    fn timestamps_before_the_epoch_split_into_date_and_time_downwards() {
        let t = Timestamp { micros: -1 };
        assert_eq!(t.date().ymd(), (1999, 12, 31));
        assert_eq!(t.time(), (23, 59, 59, 999_999));
    }

    #[test]
    fn system_times_round_trip_to_the_microsecond() {
        for t in [UNIX_EPOCH, UNIX_EPOCH - Duration::from_micros(1), UNIX_EPOCH + Duration::from_secs(2_000_000_000)] {
            let mut out = BytesMut::new();
            t.to_sql(Type::TIMESTAMPTZ, &mut out).unwrap();
            assert_eq!(SystemTime::from_sql(Type::TIMESTAMPTZ, &out), Ok(t));
        }
    }
}
