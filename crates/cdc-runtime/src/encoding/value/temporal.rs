//! Dates, times and intervals as Debezium writes them.
//!
//! `time.precision.mode`:
//!
//! | type | `adaptive` | `adaptive_time_microseconds` | `connect` |
//! |---|---|---|---|
//! | `date` | days since 1970-01-01 | days | Connect `Date`: ms since the epoch |
//! | `time(0..3)` | ms since midnight | µs | Connect `Time`: ms |
//! | `time(4..6)`, `time` | µs | µs | ms |
//! | `timestamp(0..3)` | ms since the epoch | ms | ms |
//! | `timestamp(4..6)`, `timestamp` | µs | µs | ms |
//! | `timestamptz` | `ZonedTimestamp` | same | same |
//! | `timetz` | `ZonedTime` | same | same |
//!
//! Sub-unit digits are dropped towards negative infinity (Java's
//! `Instant.toEpochMilli`). `ZonedTimestamp` is ISO 8601 in UTC with the
//! fraction written out to the column's precision (`timestamptz` alone: 6,
//! `2024-01-15T04:05:06.000000Z`; `timestamptz(0)`: none); `ZonedTime` is
//! `HH:MM:SS[.fraction]Z` in UTC with trailing zeros trimmed.
//!
//! Infinities (the sentinels of the PostgreSQL JDBC driver): `timestamp`
//! `infinity` is 9223372036825200000 µs (9223372036825200 ms),
//! `-infinity` -9223372036832400000 µs; `date` `infinity` is the epoch day
//! of -5877611-06-21 (-2147472692) and `-infinity` of -5877611-06-22
//! (-2147472691), as Debezium maps them; `timestamptz` infinities are the
//! strings `"infinity"` and `"-infinity"`.
//!
//! `interval.handling.mode`: `numeric` is `io.debezium.time.MicroDuration`,
//! computed as Debezium does in doubles with a month of 365.25/12 days and
//! truncated; `string` is `io.debezium.time.Interval`,
//! `P<y>Y<m>M<d>DT<h>H<m>M<s>S` with every field (`P0Y0M0DT0H0M0S`) and the
//! seconds' trailing zeros stripped. **Deviation:** PostgreSQL 17's infinite
//! intervals (which Debezium cannot read) are `"infinity"`/`"-infinity"`.

use std::fmt;

use cdc_core::{
    Date, Infinitable, Interval, Time, TimeTz, Timestamp, TimestampTz, UtcTimestampText,
};

use super::super::json::{write_display_str, write_int, write_str};
use crate::encoding::{IntervalHandlingMode, TimePrecisionMode};

const MICROS_PER_DAY: i64 = 86_400_000_000;
const MILLIS_PER_DAY: i64 = 86_400_000;
/// `PGStatement.DATE_POSITIVE_INFINITY`, read as microseconds.
pub(crate) const TIMESTAMP_INFINITY_MICROS: i64 = 9_223_372_036_825_200_000;
/// `PGStatement.DATE_NEGATIVE_INFINITY`, read as microseconds.
pub(crate) const TIMESTAMP_NEG_INFINITY_MICROS: i64 = -9_223_372_036_832_400_000;
/// The epoch day of -5877611-06-21, Debezium's `date` `infinity`.
pub(crate) const DATE_INFINITY_DAYS: i64 = -2_147_472_692;
/// The epoch day of -5877611-06-22, Debezium's `date` `-infinity`.
pub(crate) const DATE_NEG_INFINITY_DAYS: i64 = -2_147_472_691;
/// `MicroDuration.DAYS_PER_MONTH_AVG`.
const DAYS_PER_MONTH_AVG: f64 = 365.25 / 12.0;

/// Whether a `time(p)`/`timestamp(p)` of type modifier `typmod` has at most
/// millisecond precision (no modifier means 6).
fn millis_precision(typmod: i32) -> bool {
    (0..=3).contains(&typmod)
}

/// `date`.
pub(crate) fn write_date(out: &mut Vec<u8>, d: &Infinitable<Date>, mode: TimePrecisionMode) {
    let days = match d {
        Infinitable::Finite(d) => d.days_since_unix_epoch(),
        Infinitable::Infinity => DATE_INFINITY_DAYS,
        Infinitable::NegInfinity => DATE_NEG_INFINITY_DAYS,
    };
    match mode {
        TimePrecisionMode::Connect => write_int(out, days.saturating_mul(MILLIS_PER_DAY)),
        _ => write_int(out, days),
    }
}

/// `time` of type modifier `typmod`.
pub(crate) fn write_time(out: &mut Vec<u8>, t: Time, typmod: i32, mode: TimePrecisionMode) {
    let micros = t.micros();
    let millis = match mode {
        TimePrecisionMode::Adaptive => millis_precision(typmod),
        TimePrecisionMode::AdaptiveTimeMicroseconds => false,
        TimePrecisionMode::Connect => true,
    };
    write_int(
        out,
        if millis {
            micros.div_euclid(1000)
        } else {
            micros
        },
    );
}

/// `timestamp` of type modifier `typmod`.
pub(crate) fn write_timestamp(
    out: &mut Vec<u8>,
    ts: &Infinitable<Timestamp>,
    typmod: i32,
    mode: TimePrecisionMode,
) {
    let micros = match ts {
        Infinitable::Finite(ts) => match ts.micros_since_unix_epoch() {
            Some(m) => m,
            // Out of range for the epoch arithmetic: as text, not lost.
            None => return write_display_str(out, ts.json_text()),
        },
        Infinitable::Infinity => TIMESTAMP_INFINITY_MICROS,
        Infinitable::NegInfinity => TIMESTAMP_NEG_INFINITY_MICROS,
    };
    let millis = match mode {
        TimePrecisionMode::Connect => true,
        _ => millis_precision(typmod),
    };
    write_int(
        out,
        if millis {
            micros.div_euclid(1000)
        } else {
            micros
        },
    );
}

/// `timestamptz` of type modifier `typmod`: `ZonedTimestamp`.
pub(crate) fn write_timestamptz(out: &mut Vec<u8>, ts: &Infinitable<TimestampTz>, typmod: i32) {
    match ts {
        Infinitable::Finite(ts) => {
            let zoned = ZonedTimestamp {
                ts: *ts,
                width: fraction_width(typmod),
            };
            if !zoned.write_common(out) {
                write_display_str(out, zoned);
            }
        }
        Infinitable::Infinity => write_str(out, "infinity"),
        Infinitable::NegInfinity => write_str(out, "-infinity"),
    }
}

/// A `timestamptz`'s text as the server writes it with `TimeZone` UTC
/// (`YYYY-MM-DD HH:MM:SS[.f…]+00`, years 1 to 9999, up to six fraction
/// digits) copied into the `ZonedTimestamp` that [`write_timestamptz`]
/// writes for it, without decoding: the date and clock are the text's own
/// digits, so only their ranges are checked. Returns false, writing
/// nothing, for any other text, which the caller decodes.
pub(crate) fn copy_utc_timestamptz(out: &mut Vec<u8>, raw: &[u8], typmod: i32) -> bool {
    let Some(text) = UtcTimestampText::parse(raw) else {
        return false;
    };
    // The fraction as six digits, as the decoded value's microseconds.
    let mut micros = [b'0'; 6];
    let fraction = text.fraction();
    if let Some(head) = micros.get_mut(..fraction.len()) {
        head.copy_from_slice(fraction);
    }
    let keep = match fraction_width(typmod) {
        // Trimmed of trailing zeros.
        0 => micros.len() - micros.iter().rev().take_while(|&&b| b == b'0').count(),
        w => w.min(micros.len()),
    };
    out.push(b'"');
    out.extend_from_slice(text.date());
    out.push(b'T');
    out.extend_from_slice(text.clock());
    if let Some(kept @ [_, ..]) = micros.get(..keep) {
        out.push(b'.');
        out.extend_from_slice(kept);
    }
    out.extend_from_slice(b"Z\"");
    true
}

/// The fraction digits of a `timestamptz(p)`: p, or 6 without a modifier.
fn fraction_width(typmod: i32) -> usize {
    usize::try_from(typmod)
        .ok()
        .filter(|p| *p <= 6)
        .unwrap_or(6)
}

/// `timetz`: `ZonedTime`.
pub(crate) fn write_timetz(out: &mut Vec<u8>, t: TimeTz) {
    write_display_str(out, ZonedTime(t));
}

/// `interval` per `interval.handling.mode`.
pub(crate) fn write_interval(out: &mut Vec<u8>, iv: Interval, mode: IntervalHandlingMode) {
    if iv == Interval::INFINITY || iv == Interval::NEG_INFINITY {
        return write_display_str(out, iv);
    }
    let f = Fields::of(iv);
    match mode {
        IntervalHandlingMode::Numeric => write_int(out, f.micro_duration()),
        IntervalHandlingMode::String => write_display_str(out, f),
    }
}

/// An interval as the PostgreSQL JDBC driver's `PGInterval` splits the
/// server's text: years and months, days, and hours, minutes and seconds
/// each carrying the sign of the time part.
#[derive(Debug, Clone, Copy)]
struct Fields {
    years: i64,
    months: i64,
    days: i64,
    hours: i64,
    minutes: i64,
    /// Seconds with the fraction, in microseconds.
    second_micros: i64,
}

impl Fields {
    fn of(iv: Interval) -> Fields {
        let months = i64::from(iv.months);
        let t = iv.micros;
        Fields {
            years: months / 12,
            months: months % 12,
            days: i64::from(iv.days),
            hours: t / 3_600_000_000,
            minutes: t % 3_600_000_000 / 60_000_000,
            second_micros: t % 60_000_000,
        }
    }

    /// `MicroDuration.durationMicros`: doubles, then `(long)`.
    fn micro_duration(self) -> i64 {
        let seconds = self.second_micros as f64 / 1e6;
        let days = (self.years * 12 + self.months) as f64 * DAYS_PER_MONTH_AVG + self.days as f64;
        let total =
            ((days * 24.0 + self.hours as f64) * 60.0 + self.minutes as f64) * 60.0 + seconds;
        // `as` truncates and saturates like Java's `(long)`.
        (total * 1e6) as i64
    }
}

/// `io.debezium.time.Interval.toIsoString`.
impl fmt::Display for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "P{}Y{}M{}DT{}H{}M",
            self.years, self.months, self.days, self.hours, self.minutes
        )?;
        let s = self.second_micros;
        if s < 0 {
            f.write_str("-")?;
        }
        let (whole, frac) = (s.unsigned_abs() / 1_000_000, s.unsigned_abs() % 1_000_000);
        write!(f, "{whole}")?;
        if frac != 0 {
            let digits = format!("{frac:06}");
            write!(f, ".{}", digits.trim_end_matches('0'))?;
        }
        f.write_str("S")
    }
}

/// Debezium `ZonedTime`: the UTC time, `HH:MM:SS[.fraction]Z`.
struct ZonedTime(TimeTz);

impl fmt::Display for ZonedTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros = self.0.time().micros() - i64::from(self.0.utc_offset_seconds()) * 1_000_000;
        // 24:00:00 (the end of the day) stays as it is at UTC.
        let micros = if micros == MICROS_PER_DAY {
            micros
        } else {
            micros.rem_euclid(MICROS_PER_DAY)
        };
        write_hms(f, micros, None)?;
        f.write_str("Z")
    }
}

/// Debezium `ZonedTimestamp`: ISO 8601 in UTC, the fraction `width` digits
/// long (trimmed of trailing zeros when 0).
struct ZonedTimestamp {
    ts: TimestampTz,
    width: usize,
}

impl fmt::Display for ZonedTimestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ts = self.ts.utc();
        let (y, m, d) = ts.date().ymd();
        if y < 0 {
            // ISO 8601 expanded year: 1 BC is year 0, 2 BC is -0001.
            write!(f, "{y:05}-{m:02}-{d:02}T")?;
        } else if y > 9999 {
            write!(f, "+{y}-{m:02}-{d:02}T")?;
        } else {
            write!(f, "{y:04}-{m:02}-{d:02}T")?;
        }
        write_hms(f, ts.time().micros(), Some(self.width).filter(|w| *w > 0))?;
        f.write_str("Z")
    }
}

impl ZonedTimestamp {
    /// Writes the quoted text straight into `out` for years 0 to 9999 (no
    /// formatter, no allocation: a timestamp per row is common) and returns
    /// true; false, writing nothing, for the others.
    fn write_common(&self, out: &mut Vec<u8>) -> bool {
        let ts = self.ts.utc();
        let (y, m, d) = ts.date().ymd();
        let Ok(y) = u32::try_from(y) else {
            return false;
        };
        if y > 9999 {
            return false;
        }
        let micros = ts.time().micros();
        let (Ok(secs), Ok(frac)) = (
            u32::try_from(micros / 1_000_000),
            u32::try_from(micros % 1_000_000),
        ) else {
            return false;
        };
        out.push(b'"');
        digits(out, y, 4);
        out.push(b'-');
        digits(out, m, 2);
        out.push(b'-');
        digits(out, d, 2);
        out.push(b'T');
        digits(out, secs / 3600, 2);
        out.push(b':');
        digits(out, secs / 60 % 60, 2);
        out.push(b':');
        digits(out, secs % 60, 2);
        let start = out.len();
        out.push(b'.');
        digits(out, frac, 6);
        let keep = match self.width {
            0 => {
                // Trimmed of trailing zeros, and no point without digits.
                let fraction = out.get(start + 1..).unwrap_or_default();
                let kept =
                    fraction.len() - fraction.iter().rev().take_while(|&&b| b == b'0').count();
                if kept == 0 {
                    0
                } else {
                    kept + 1
                }
            }
            w => w.min(6) + 1,
        };
        out.truncate(start + keep);
        out.extend_from_slice(b"Z\"");
        true
    }
}

/// Appends `v` in exactly `width` decimal digits (zero-padded; `v` must fit,
/// `width` at most 10). Built on the stack and appended whole: growing
/// `out` with zeros first cost a `memset` call per field.
#[inline]
fn digits(out: &mut Vec<u8>, mut v: u32, width: usize) {
    let mut buf = [b'0'; 10];
    let width = width.min(buf.len());
    let start = buf.len() - width;
    for slot in buf.get_mut(start..).unwrap_or_default().iter_mut().rev() {
        // `v % 10` is below 10.
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out.extend_from_slice(buf.get(start..).unwrap_or_default());
}

/// `HH:MM:SS`, then the fraction: `width` digits, or trimmed when `None`.
fn write_hms(f: &mut fmt::Formatter<'_>, micros: i64, width: Option<usize>) -> fmt::Result {
    let secs = micros / 1_000_000;
    let frac = micros % 1_000_000;
    write!(
        f,
        "{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )?;
    let digits = format!("{frac:06}");
    match width {
        Some(w) => write!(f, ".{}", digits.get(..w.min(6)).unwrap_or_default()),
        None if frac != 0 => write!(f, ".{}", digits.trim_end_matches('0')),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut v = Vec::new();
        f(&mut v);
        String::from_utf8(v).unwrap()
    }

    fn value(oid: cdc_core::Oid, text: &str) -> cdc_core::Value<'static> {
        cdc_core::decode_text(oid, text.as_bytes())
            .unwrap()
            .into_owned()
    }

    fn iv(text: &str) -> Interval {
        match value(cdc_core::types::INTERVAL, text) {
            cdc_core::Value::Interval(iv) => iv,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn intervals_in_both_modes() {
        use IntervalHandlingMode::*;
        let w = |text, mode| out(|o| write_interval(o, iv(text), mode));
        assert_eq!(
            w("1 year 2 mons 3 days 04:05:06.78", String),
            "\"P1Y2M3DT4H5M6.78S\""
        );
        assert_eq!(w("00:00:00", String), "\"P0Y0M0DT0H0M0S\"");
        assert_eq!(w("-1 days +02:03:00", String), "\"P0Y0M-1DT2H3M0S\"");
        assert_eq!(w("-01:02:03.5", String), "\"P0Y0M0DT-1H-2M-3.5S\"");
        assert_eq!(w("-1 years -2 mons", String), "\"P-1Y-2M0DT0H0M0S\"");
        assert_eq!(w("1 mon 2 days 00:00:01", Numeric), "2802601000000");
        assert_eq!(w("00:00:06.78", Numeric), "6780000");
        assert_eq!(w("1 year", Numeric), "31557600000000");
        assert_eq!(w("-00:00:01.5", Numeric), "-1500000");
        assert_eq!(w("infinity", Numeric), "\"infinity\"");
    }

    #[test]
    fn timestamps_in_every_mode() {
        use cdc_core::types::*;
        use TimePrecisionMode::*;
        let ts = |text: &str| match value(TIMESTAMP, text) {
            cdc_core::Value::Timestamp(t) => t,
            other => panic!("{other:?}"),
        };
        let w = |text, typmod, mode| out(|o| write_timestamp(o, &ts(text), typmod, mode));
        let t = "2024-01-15 04:05:06.123456";
        assert_eq!(w(t, -1, Adaptive), "1705291506123456");
        assert_eq!(w(t, 6, AdaptiveTimeMicroseconds), "1705291506123456");
        assert_eq!(w(t, 3, Adaptive), "1705291506123");
        assert_eq!(w(t, -1, Connect), "1705291506123");
        assert_eq!(w("1969-12-31 23:59:59.9995", -1, Connect), "-1");
        assert_eq!(w("infinity", -1, Adaptive), "9223372036825200000");
        assert_eq!(w("-infinity", -1, Adaptive), "-9223372036832400000");
        assert_eq!(w("infinity", 3, Adaptive), "9223372036825200");
        assert_eq!(w("-infinity", -1, Connect), "-9223372036832400");
    }

    #[test]
    fn dates_and_times_in_every_mode() {
        use cdc_core::types::*;
        use TimePrecisionMode::*;
        let date = |text: &str| match value(DATE, text) {
            cdc_core::Value::Date(d) => d,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            out(|o| write_date(o, &date("2024-01-15"), Adaptive)),
            "19737"
        );
        assert_eq!(
            out(|o| write_date(o, &date("2024-01-15"), Connect)),
            "1705276800000"
        );
        assert_eq!(
            out(|o| write_date(o, &date("infinity"), Adaptive)),
            "-2147472692"
        );
        assert_eq!(
            out(|o| write_date(o, &date("-infinity"), Adaptive)),
            "-2147472691"
        );
        let time = |text: &str| match value(TIME, text) {
            cdc_core::Value::Time(t) => t,
            other => panic!("{other:?}"),
        };
        let t = time("04:05:06.789");
        assert_eq!(out(|o| write_time(o, t, -1, Adaptive)), "14706789000");
        assert_eq!(out(|o| write_time(o, t, 3, Adaptive)), "14706789");
        assert_eq!(
            out(|o| write_time(o, t, 3, AdaptiveTimeMicroseconds)),
            "14706789000"
        );
        assert_eq!(out(|o| write_time(o, t, 6, Connect)), "14706789");
    }

    /// The direct path writes what the formatter writes, wherever it applies.
    #[test]
    fn zoned_timestamps_written_directly_match_the_formatter() {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut direct_seen = 0;
        for i in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Across years -4713..294276, and many whole seconds and round fractions.
            let micros = (x % 600_000_000_000_000_000) as i64 - 211_813_488_000_000_000;
            let micros = match i % 4 {
                0 => micros,
                1 => micros - micros.rem_euclid(1_000_000),
                2 => micros - micros.rem_euclid(1_000),
                _ => micros - micros.rem_euclid(100_000),
            };
            let Some(ts) = TimestampTz::from_micros_since_2000(micros) else {
                continue;
            };
            for width in [0, 1, 3, 6] {
                let zoned = ZonedTimestamp { ts, width };
                let mut direct = Vec::new();
                if zoned.write_common(&mut direct) {
                    direct_seen += 1;
                    let mut formatted = Vec::new();
                    write_display_str(&mut formatted, ZonedTimestamp { ts, width });
                    assert_eq!(
                        String::from_utf8(direct).unwrap(),
                        String::from_utf8(formatted).unwrap(),
                        "{micros} width {width}"
                    );
                } else {
                    assert!(direct.is_empty());
                }
            }
        }
        assert!(direct_seen > 10_000, "{direct_seen}");
    }

    #[test]
    fn zoned_timestamps_keep_the_column_precision() {
        use cdc_core::types::*;
        let tstz = |text: &str| match value(TIMESTAMPTZ, text) {
            cdc_core::Value::TimestampTz(t) => t,
            other => panic!("{other:?}"),
        };
        let w = |text, typmod| out(|o| write_timestamptz(o, &tstz(text), typmod));
        assert_eq!(
            w("2024-01-15 04:05:06+00", -1),
            "\"2024-01-15T04:05:06.000000Z\""
        );
        assert_eq!(
            w("2024-01-15 04:05:06.5+02", -1),
            "\"2024-01-15T02:05:06.500000Z\""
        );
        assert_eq!(
            w("2024-01-15 04:05:06.5+02", 3),
            "\"2024-01-15T02:05:06.500Z\""
        );
        assert_eq!(w("2024-01-15 04:05:06+00", 0), "\"2024-01-15T04:05:06Z\"");
        assert_eq!(w("infinity", -1), "\"infinity\"");
        assert_eq!(w("-infinity", 2), "\"-infinity\"");
        let ttz = |text: &str| match value(TIMETZ, text) {
            cdc_core::Value::TimeTz(t) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            out(|o| write_timetz(o, ttz("04:05:06+02"))),
            "\"02:05:06Z\""
        );
        assert_eq!(
            out(|o| write_timetz(o, ttz("04:05:06.120-01:30"))),
            "\"05:35:06.12Z\""
        );
        assert_eq!(
            out(|o| write_timetz(o, ttz("00:30:00+01"))),
            "\"23:30:00Z\""
        );
    }

    /// The decoding path for a `timestamptz`'s text: what the copy must
    /// match, or `None` where the text does not decode.
    fn decoded_timestamptz(raw: &[u8], typmod: i32) -> Option<String> {
        match cdc_core::decode_text(cdc_core::types::TIMESTAMPTZ, raw).ok()? {
            cdc_core::Value::TimestampTz(ts) => Some(out(|o| write_timestamptz(o, &ts, typmod))),
            _ => None,
        }
    }

    /// The text the server writes for `ts` with `TimeZone` UTC (years 1 to
    /// 9999): ISO date and clock, the fraction trimmed, `+00`.
    fn server_text(ts: TimestampTz) -> String {
        ZonedTimestamp { ts, width: 0 }
            .to_string()
            .replace('T', " ")
            .replace('Z', "+00")
    }

    proptest::proptest! {
        /// The server's UTC text is copied, and the copy is what decoding
        /// writes; text changed in one byte is copied only where decoding
        /// writes the same, and never where it does not decode.
        #[test]
        fn utc_text_copies_as_decoding_writes(
            // 0001-01-01 up to 10000-01-01, in microseconds since 2000.
            micros in -63_082_281_600_000_000_i64..252_455_616_000_000_000,
            round in proptest::sample::select(vec![1_i64, 10, 1_000, 100_000, 1_000_000, 86_400_000_000]),
            typmod in -1_i32..=7,
            change in proptest::option::of((0_usize..40, proptest::sample::select(b"0123456789-: .+T/x".to_vec()))),
        ) {
            let ts = TimestampTz::from_micros_since_2000(micros - micros.rem_euclid(round)).unwrap();
            let text = server_text(ts);
            let mut copied = Vec::new();
            proptest::prop_assert!(copy_utc_timestamptz(&mut copied, text.as_bytes(), typmod), "{text}");
            proptest::prop_assert_eq!(
                Some(String::from_utf8(copied).unwrap()),
                decoded_timestamptz(text.as_bytes(), typmod),
                "{}", text
            );
            if let Some((at, byte)) = change {
                let mut raw = text.into_bytes();
                match raw.get_mut(at) {
                    Some(b) => *b = byte,
                    None => raw.push(byte),
                }
                let mut copied = Vec::new();
                if copy_utc_timestamptz(&mut copied, &raw, typmod) {
                    proptest::prop_assert_eq!(
                        Some(String::from_utf8(copied).unwrap()),
                        decoded_timestamptz(&raw, typmod),
                        "{}", String::from_utf8_lossy(&raw)
                    );
                } else {
                    proptest::prop_assert!(copied.is_empty());
                }
            }
        }
    }

    #[test]
    fn utc_text_copies_only_the_servers_shape() {
        let copy = |text: &str, typmod| {
            let mut o = Vec::new();
            copy_utc_timestamptz(&mut o, text.as_bytes(), typmod)
                .then(|| String::from_utf8(o).unwrap())
        };
        assert_eq!(
            copy("2024-02-29 23:59:59.5+00", -1).as_deref(),
            Some("\"2024-02-29T23:59:59.500000Z\"")
        );
        assert_eq!(
            copy("2024-02-29 23:59:59.5+00", 0).as_deref(),
            Some("\"2024-02-29T23:59:59.5Z\"")
        );
        assert_eq!(
            copy("2024-02-29 23:59:59.000120+00", 3).as_deref(),
            Some("\"2024-02-29T23:59:59.000Z\"")
        );
        assert_eq!(
            copy("2024-01-15 04:05:06+00", 0).as_deref(),
            Some("\"2024-01-15T04:05:06Z\"")
        );
        for other in [
            "2023-02-29 00:00:00+00", // not a leap year
            "1900-02-29 00:00:00+00", // nor is 1900
            "2024-04-31 00:00:00+00",
            "2024-13-01 00:00:00+00",
            "2024-00-01 00:00:00+00",
            "2024-01-00 00:00:00+00",
            "0000-01-01 00:00:00+00",
            "2024-01-15 24:00:00+00",
            "2024-01-15 23:60:00+00",
            "2024-01-15 23:59:60+00",
            "2024-01-15 04:05:06+02", // another zone: decoded
            "2024-01-15 04:05:06+00:30",
            "2024-01-15 04:05:06.+00",
            "2024-01-15 04:05:06.1234567+00",
            "2024-01-15 04:05:06+00 BC",
            "12024-01-15 04:05:06+00",
            "2024-01-15T04:05:06+00",
            "infinity",
            "",
        ] {
            assert_eq!(copy(other, -1), None, "{other}");
        }
        assert!(
            copy("2000-02-29 00:00:00+00", -1).is_some(),
            "2000 is a leap year"
        );
    }
}
