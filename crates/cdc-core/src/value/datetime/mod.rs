//! `date`, `time`, `timetz`, `timestamp`, `timestamptz`: text in `DateStyle=ISO`, binary as
//! integer days / microseconds since 2000-01-01.
//!
//! Years are astronomical inside this module (year 0 is 1 BC) and shown with a
//! ` BC` suffix like the server does. The proleptic Gregorian calendar is used
//! throughout, as in PostgreSQL. Parsing lives in [`codec`].

mod codec;
mod utc_text;

pub(crate) use codec::{
    date_binary, date_text, parse_fraction_digits, time_binary, time_text, timestamp_binary,
    timestamp_text, timestamptz_binary, timestamptz_text, timetz_binary, timetz_text,
};

pub use utc_text::UtcTimestampText;

use std::fmt;

/// Microseconds in a day.
pub(crate) const USECS_PER_DAY: i64 = 86_400_000_000;
const USECS_PER_SEC: i64 = 1_000_000;
/// Days from 1970-01-01 to 2000-01-01.
const UNIX_TO_PG_EPOCH_DAYS: i64 = 10_957;
/// Julian day of 2000-01-01.
const POSTGRES_EPOCH_JDATE: i64 = 2_451_545;
/// First valid date (Julian day 0, 4714-11-24 BC), in days since 2000-01-01.
const MIN_DATE: i64 = -POSTGRES_EPOCH_JDATE;
/// One past the last valid date (5874898-01-01), in days since 2000-01-01.
const END_DATE: i64 = 2_147_483_494 - POSTGRES_EPOCH_JDATE;
/// First valid timestamp, 4714-11-24 00:00:00 BC.
const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
/// One past the last valid timestamp, 294277-01-01 00:00:00.
const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;
/// `timetz` offsets must stay strictly within this many seconds (PostgreSQL's
/// `TZDISP_LIMIT`, `(MAX_TZDISP_HOUR + 1) * SECS_PER_HOUR`): up to 15:59:59 either way.
const TZDISP_LIMIT: i32 = 16 * 60 * 60;

/// A date/time value that may also be `infinity` or `-infinity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Infinitable<T> {
    /// `-infinity`: before every finite value.
    NegInfinity,
    /// A finite value.
    Finite(T),
    /// `infinity`: after every finite value.
    Infinity,
}

impl<T> Infinitable<T> {
    /// The finite value, if any.
    pub fn finite(self) -> Option<T> {
        match self {
            Infinitable::Finite(v) => Some(v),
            _ => None,
        }
    }
}

impl<T: fmt::Display> fmt::Display for Infinitable<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Infinitable::NegInfinity => f.write_str("-infinity"),
            Infinitable::Finite(v) => v.fmt(f),
            Infinitable::Infinity => f.write_str("infinity"),
        }
    }
}

/// A calendar date (PostgreSQL `date`), 4714-11-24 BC to 5874897-12-31.
///
/// Displays as the server prints it with `DateStyle=ISO`: `2024-01-15`, `0044-03-15 BC`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date(i32);

impl Date {
    /// The date `days` after 2000-01-01 (the binary format), if within PostgreSQL's range.
    pub fn from_days_since_2000(days: i32) -> Option<Date> {
        (MIN_DATE..END_DATE)
            .contains(&i64::from(days))
            .then_some(Date(days))
    }

    /// Days since 2000-01-01 (negative before).
    pub const fn days_since_2000(self) -> i32 {
        self.0
    }

    /// Days since 1970-01-01 (negative before).
    pub fn days_since_unix_epoch(self) -> i64 {
        i64::from(self.0) + UNIX_TO_PG_EPOCH_DAYS
    }

    /// The date for an astronomical year (0 is 1 BC, -1 is 2 BC), month 1-12 and day 1-31.
    pub fn from_ymd(year: i32, month: u32, day: u32) -> Option<Date> {
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(i64::from(year), month) {
            return None;
        }
        let days = days_from_civil(i64::from(year), month, day) - UNIX_TO_PG_EPOCH_DAYS;
        Date::from_days_since_2000(i32::try_from(days).ok()?)
    }

    /// The days in `month` (1-12) of the astronomical `year` in the proleptic
    /// Gregorian calendar; 0 for any other month.
    pub fn days_in_month(year: i32, month: u32) -> u32 {
        days_in_month(i64::from(year), month)
    }

    /// `(astronomical year, month 1-12, day 1-31)`.
    pub fn ymd(self) -> (i32, u32, u32) {
        let (y, m, d) = civil_from_days(self.days_since_unix_epoch());
        // The valid range keeps years within i32.
        (i32::try_from(y).unwrap_or(i32::MAX), m, d)
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = self.ymd();
        write_ymd(f, y, m, d)?;
        write_bc(f, y)
    }
}

impl fmt::Debug for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Date({self})")
    }
}

/// `YYYY-MM-DD` with the year as the server writes it (the BC suffix comes last).
fn write_ymd(f: &mut fmt::Formatter<'_>, y: i32, m: u32, d: u32) -> fmt::Result {
    let shown = if y > 0 {
        i64::from(y)
    } else {
        1 - i64::from(y)
    };
    write!(f, "{shown:04}-{m:02}-{d:02}")
}

/// ` BC` after the whole value for years before 1 AD.
fn write_bc(f: &mut fmt::Formatter<'_>, y: i32) -> fmt::Result {
    if y <= 0 {
        f.write_str(" BC")?;
    }
    Ok(())
}

/// A time of day (PostgreSQL `time`), `00:00:00` to `24:00:00` inclusive, in microseconds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(i64);

impl Time {
    /// The time `micros` after midnight, `0..=86_400_000_000` (24:00:00 is valid).
    pub fn from_micros(micros: i64) -> Option<Time> {
        (0..=USECS_PER_DAY)
            .contains(&micros)
            .then_some(Time(micros))
    }

    /// Microseconds since midnight.
    pub const fn micros(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hms(f, self.0)
    }
}

impl fmt::Debug for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Time({self})")
    }
}

/// `HH:MM:SS[.ffffff]` with trailing fractional zeros removed, as `AppendSeconds` does.
pub(crate) fn write_hms(f: &mut fmt::Formatter<'_>, micros: i64) -> fmt::Result {
    let micros = micros.unsigned_abs();
    let secs = micros / 1_000_000;
    write!(
        f,
        "{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )?;
    write_fraction(f, micros % 1_000_000)
}

/// `.ffffff` without trailing zeros; nothing for zero.
pub(crate) fn write_fraction(f: &mut fmt::Formatter<'_>, frac: u64) -> fmt::Result {
    if frac == 0 {
        return Ok(());
    }
    let mut digits = format!("{frac:06}");
    while digits.ends_with('0') {
        digits.pop();
    }
    write!(f, ".{digits}")
}

/// A time of day with a UTC offset (PostgreSQL `timetz`).
///
/// The offset is kept in seconds *east* of UTC (`+05:30` is 19800); the wire
/// format's "seconds west" is converted on decode.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimeTz {
    time: Time,
    utc_offset: i32,
}

impl TimeTz {
    /// A local time and its offset in seconds east of UTC (at most 15:59:59 either way).
    pub fn new(time: Time, utc_offset_seconds: i32) -> Option<TimeTz> {
        (utc_offset_seconds.unsigned_abs() < TZDISP_LIMIT.unsigned_abs()).then_some(TimeTz {
            time,
            utc_offset: utc_offset_seconds,
        })
    }

    /// The local time of day.
    pub const fn time(self) -> Time {
        self.time
    }

    /// Offset in seconds east of UTC (`+05:30` is 19800).
    pub const fn utc_offset_seconds(self) -> i32 {
        self.utc_offset
    }
}

impl fmt::Display for TimeTz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.time)?;
        write_offset(f, self.utc_offset)
    }
}

impl fmt::Debug for TimeTz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TimeTz({self})")
    }
}

/// `+HH`, `+HH:MM` or `+HH:MM:SS` as `EncodeTimezone` prints an offset east of UTC.
fn write_offset(f: &mut fmt::Formatter<'_>, east: i32) -> fmt::Result {
    let sign = if east >= 0 { '+' } else { '-' };
    let abs = east.unsigned_abs();
    let (h, m, s) = (abs / 3600, abs / 60 % 60, abs % 60);
    if s != 0 {
        write!(f, "{sign}{h:02}:{m:02}:{s:02}")
    } else if m != 0 {
        write!(f, "{sign}{h:02}:{m:02}")
    } else {
        write!(f, "{sign}{h:02}")
    }
}

/// A date and time without time zone (PostgreSQL `timestamp`), microsecond precision.
///
/// Displays as `2024-01-15 04:05:06.123456`, `0044-03-15 04:05:06 BC`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The timestamp `micros` after 2000-01-01 00:00:00 (the binary format), if in range.
    pub fn from_micros_since_2000(micros: i64) -> Option<Timestamp> {
        (MIN_TIMESTAMP..END_TIMESTAMP)
            .contains(&micros)
            .then_some(Timestamp(micros))
    }

    /// A date plus a time of day (24:00:00 rolls over to the next day).
    pub fn new(date: Date, time: Time) -> Option<Timestamp> {
        i64::from(date.0)
            .checked_mul(USECS_PER_DAY)
            .and_then(|d| d.checked_add(time.0))
            .and_then(Timestamp::from_micros_since_2000)
    }

    /// Microseconds since 2000-01-01 00:00:00.
    pub const fn micros_since_2000(self) -> i64 {
        self.0
    }

    /// Microseconds since 1970-01-01 00:00:00, `None` if that does not fit in an `i64`.
    pub fn micros_since_unix_epoch(self) -> Option<i64> {
        self.0.checked_add(UNIX_TO_PG_EPOCH_DAYS * USECS_PER_DAY)
    }

    /// The calendar date.
    pub fn date(self) -> Date {
        Date(i32::try_from(self.0.div_euclid(USECS_PER_DAY)).unwrap_or(i32::MAX))
    }

    /// The time of day.
    pub fn time(self) -> Time {
        Time(self.0.rem_euclid(USECS_PER_DAY))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_timestamp(f, self.0, " ", "")
    }
}

/// `DATE<sep>TIME<zone>[ BC]`, as `EncodeDateTime` lays a timestamp out.
fn write_timestamp(f: &mut fmt::Formatter<'_>, micros: i64, sep: &str, zone: &str) -> fmt::Result {
    let ts = Timestamp(micros);
    let (y, m, d) = ts.date().ymd();
    write_ymd(f, y, m, d)?;
    f.write_str(sep)?;
    write_hms(f, ts.time().0)?;
    f.write_str(zone)?;
    write_bc(f, y)
}

/// [`Display`](fmt::Display)s a timestamp the way PostgreSQL's `to_json` does
/// (ISO 8601 with a `T`; see [`Timestamp::json_text`], [`TimestampTz::json_text`]).
#[derive(Debug, Clone, Copy)]
pub struct JsonText {
    micros: i64,
    zone: &'static str,
}

impl fmt::Display for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_timestamp(f, self.micros, "T", self.zone)
    }
}

impl Timestamp {
    /// The text PostgreSQL's `to_json` gives this value: `2024-01-15T04:05:06.123456`,
    /// `0044-03-15T04:05:06 BC`.
    pub fn json_text(self) -> JsonText {
        JsonText {
            micros: self.0,
            zone: "",
        }
    }
}

impl TimestampTz {
    /// The text PostgreSQL's `to_json` gives this value with `TimeZone=UTC`:
    /// `2024-01-15T04:05:06.123456+00:00`.
    pub fn json_text(self) -> JsonText {
        JsonText {
            micros: self.0,
            zone: "+00:00",
        }
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

/// An instant (PostgreSQL `timestamptz`), stored as UTC microseconds.
///
/// The server prints it in the session's `TimeZone`; decoding applies the
/// printed offset, so the value is the same instant whatever the zone.
/// Displays in UTC: `2024-06-01 06:30:00+00`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimestampTz(i64);

impl TimestampTz {
    /// The instant `micros` after 2000-01-01 00:00:00 UTC (the binary format), if in range.
    pub fn from_micros_since_2000(micros: i64) -> Option<TimestampTz> {
        Timestamp::from_micros_since_2000(micros).map(|t| TimestampTz(t.0))
    }

    /// Microseconds since 2000-01-01 00:00:00 UTC.
    pub const fn micros_since_2000(self) -> i64 {
        self.0
    }

    /// Microseconds since 1970-01-01 00:00:00 UTC, `None` if that does not fit in an `i64`.
    pub fn micros_since_unix_epoch(self) -> Option<i64> {
        self.utc().micros_since_unix_epoch()
    }

    /// The same instant as a UTC wall-clock timestamp.
    pub const fn utc(self) -> Timestamp {
        Timestamp(self.0)
    }
}

impl fmt::Display for TimestampTz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_timestamp(f, self.0, " ", "+00")
    }
}

impl fmt::Debug for TimestampTz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TimestampTz({self})")
    }
}

// ---- calendar arithmetic (Howard Hinnant's civil-from-days algorithms) ----

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days since 1970-01-01 of an astronomical y-m-d (month and day already validated).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Astronomical `(y, m, d)` of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // Both are small and non-negative by construction.
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_in_month_follows_the_gregorian_leap_rule() {
        let feb = |y| Date::days_in_month(y, 2);
        assert_eq!(
            (feb(2024), feb(2023), feb(1900), feb(2000), feb(0)),
            (29, 28, 28, 29, 29)
        );
        assert_eq!(
            (Date::days_in_month(2024, 4), Date::days_in_month(2024, 12)),
            (30, 31)
        );
        assert_eq!(
            (Date::days_in_month(2024, 0), Date::days_in_month(2024, 13)),
            (0, 0)
        );
    }

    #[test]
    fn calendar_edges_match_postgres_epochs() {
        assert_eq!(
            Date::from_ymd(2000, 1, 1).map(Date::days_since_2000),
            Some(0)
        );
        assert_eq!(
            Date::from_ymd(1970, 1, 1).map(Date::days_since_2000),
            Some(-10957)
        );
        // Julian day 0 = 4714-11-24 BC = astronomical -4713.
        assert_eq!(
            Date::from_ymd(-4713, 11, 24).map(Date::days_since_2000),
            Some(-2_451_545)
        );
        assert_eq!(Date::from_ymd(-4713, 11, 23), None);
        assert!(Date::from_ymd(5_874_897, 12, 31).is_some());
        assert_eq!(Date::from_ymd(5_874_898, 1, 1), None);
        assert_eq!(Date::from_ymd(2023, 2, 29), None);
        assert!(Date::from_ymd(2024, 2, 29).is_some());
        assert!(Date::from_ymd(0, 2, 29).is_some(), "1 BC is a leap year");
    }

    #[test]
    fn constructors_reject_out_of_range_without_panicking() {
        let noon = Time::from_micros(12 * 3600 * USECS_PER_SEC).unwrap();
        assert!(TimeTz::new(noon, i32::MIN).is_none());
        assert!(TimeTz::new(noon, i32::MAX).is_none());
        assert!(TimeTz::new(noon, TZDISP_LIMIT).is_none());
        assert!(TimeTz::new(noon, -(TZDISP_LIMIT - 1)).is_some());
        assert!(Time::from_micros(-1).is_none());
        assert!(Date::from_ymd(i32::MIN, 1, 1).is_none());
        assert!(Date::from_ymd(i32::MAX, 12, 31).is_none());
        assert!(Date::from_ymd(2024, 0, 1).is_none());
        assert!(Date::from_days_since_2000(i32::MIN).is_none());
        assert!(Timestamp::from_micros_since_2000(i64::MAX).is_none());
        let last = Date::from_ymd(5_874_897, 12, 31).unwrap();
        let end = Time::from_micros(USECS_PER_DAY).unwrap();
        assert!(Timestamp::new(last, end).is_none(), "beyond 294276 AD");
    }

    #[test]
    fn civil_round_trip_over_a_wide_range() {
        let mut z = -2_451_545 - UNIX_TO_PG_EPOCH_DAYS;
        while z < 2_145_031_949 {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
            z += 9_973;
        }
    }
}
