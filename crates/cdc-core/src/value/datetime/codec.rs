//! Text (`DateStyle=ISO`) and binary decoding of the date/time types.

use super::{
    days_from_civil, days_in_month, Date, Infinitable, Time, TimeTz, Timestamp, TimestampTz,
    END_DATE, END_TIMESTAMP, MIN_DATE, MIN_TIMESTAMP, TZDISP_LIMIT, UNIX_TO_PG_EPOCH_DAYS,
    USECS_PER_DAY, USECS_PER_SEC,
};
use crate::value::error::ValueError;
use crate::Oid;

// ---- text parsing ----

/// A tiny cursor over the ASCII text of a value.
struct Cursor<'s> {
    s: &'s [u8],
}

impl<'s> Cursor<'s> {
    fn peek(&self) -> Option<u8> {
        self.s.first().copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        match self.s.strip_prefix(&[b]) {
            Some(rest) => {
                self.s = rest;
                true
            }
            None => false,
        }
    }

    /// Between `min` and `max` decimal digits as a number.
    fn digits(&mut self, min: usize, max: usize) -> Option<(i64, usize)> {
        let n = self.s.iter().take_while(|b| b.is_ascii_digit()).count();
        if n < min || n > max {
            return None;
        }
        let (digits, rest) = self.s.split_at(n);
        self.s = rest;
        let v = digits.iter().try_fold(0i64, |acc, d| {
            acc.checked_mul(10)?.checked_add(i64::from(d - b'0'))
        })?;
        Some((v, n))
    }

    fn number(&mut self, min: usize, max: usize) -> Option<i64> {
        self.digits(min, max).map(|(v, _)| v)
    }
}

/// Strip a trailing ` BC`.
fn split_bc(s: &[u8]) -> (&[u8], bool) {
    match s.strip_suffix(b" BC") {
        Some(rest) => (rest, true),
        None => (s, false),
    }
}

/// `YYYY-MM-DD` (year of 4+ digits as written, 1 or more), with the BC flag: days since 2000.
fn parse_date(c: &mut Cursor<'_>, bc: bool) -> Result<i64, &'static str> {
    let year = c.number(1, 9).ok_or("expected a year")?;
    let month = c.eat(b'-').then(|| c.number(2, 2)).flatten();
    let day = c.eat(b'-').then(|| c.number(2, 2)).flatten();
    let (Some(month), Some(day)) = (month, day) else {
        return Err("expected YYYY-MM-DD");
    };
    civil_date(year, month, day, bc)
}

/// A date's fields as written (the year counted back from 1 BC when `bc`):
/// days since 2000, checked.
fn civil_date(year: i64, month: i64, day: i64, bc: bool) -> Result<i64, &'static str> {
    if year == 0 {
        return Err("year 0 does not exist");
    }
    let year = if bc { 1 - year } else { year };
    let month = u32::try_from(month).map_err(|_| "month out of range")?;
    if !(1..=12).contains(&month) {
        return Err("month out of range");
    }
    let day = u32::try_from(day).map_err(|_| "day out of range")?;
    if day < 1 || day > days_in_month(year, month) {
        return Err("day out of range");
    }
    let days = days_from_civil(year, month, day) - UNIX_TO_PG_EPOCH_DAYS;
    if !(MIN_DATE..END_DATE).contains(&days) {
        return Err("date out of range");
    }
    Ok(days)
}

/// `HH:MM:SS[.f{1,6}]` as microseconds since midnight; `max_hour` 24 for `time`, 23 otherwise.
fn parse_time(c: &mut Cursor<'_>, max_hour: i64) -> Result<i64, &'static str> {
    let h = c.number(2, 2);
    let m = c.eat(b':').then(|| c.number(2, 2)).flatten();
    let s = c.eat(b':').then(|| c.number(2, 2)).flatten();
    let (Some(h), Some(m), Some(s)) = (h, m, s) else {
        return Err("expected HH:MM:SS");
    };
    clock_time(c, [h, m, s], max_hour)
}

/// The time of day from its hour, minute and second and the `[.f{1,6}]`
/// that may follow them in `c`: microseconds since midnight, checked.
fn clock_time(c: &mut Cursor<'_>, [h, m, s]: [i64; 3], max_hour: i64) -> Result<i64, &'static str> {
    let frac = if c.eat(b'.') { parse_fraction(c)? } else { 0 };
    if h > max_hour || m > 59 || s > 59 {
        return Err("time field out of range");
    }
    let micros = ((h * 60 + m) * 60 + s) * USECS_PER_SEC + frac;
    if micros > USECS_PER_DAY {
        return Err("time field out of range");
    }
    Ok(micros)
}

/// Year, month, day, hour, minute and second as written, and the text after them.
type Fields<'s> = Option<([i64; 6], &'s [u8])>;

/// A reader of [`Fields`] (see [`fixed_date_time`]).
type FixedReader = fn(&[u8]) -> Fields<'_>;

/// `YYYY-MM-DD HH:MM:SS` at fixed places (a four-digit year), the shape
/// nearly every timestamp the server writes has: its six fields and the
/// rest of the text, read without the cursor's steps per byte. `None` for
/// any other shape, which the cursor then reads.
fn fixed_date_time(s: &[u8]) -> Fields<'_> {
    let (head, rest) = s.split_first_chunk::<19>()?;
    let [y0, y1, y2, y3, b'-', mo0, mo1, b'-', d0, d1, b' ', h0, h1, b':', mi0, mi1, b':', s0, s1] =
        *head
    else {
        return None;
    };
    // Each byte's distance from '0': all fourteen must be digits.
    let d =
        [y0, y1, y2, y3, mo0, mo1, d0, d1, h0, h1, mi0, mi1, s0, s1].map(|b| b.wrapping_sub(b'0'));
    // A third digit of seconds: the cursor rejects it.
    if d.iter().any(|&v| v > 9) || rest.first().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let [y0, y1, y2, y3, mo0, mo1, d0, d1, h0, h1, mi0, mi1, s0, s1] = d.map(i64::from);
    Some((
        [
            ((y0 * 10 + y1) * 10 + y2) * 10 + y3,
            mo0 * 10 + mo1,
            d0 * 10 + d1,
            h0 * 10 + h1,
            mi0 * 10 + mi1,
            s0 * 10 + s1,
        ],
        rest,
    ))
}

/// 1 to 6 fractional digits as microseconds.
pub(crate) fn parse_fraction_digits(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 6 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits
        .iter()
        .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
    Some(v * 10i64.pow(6 - digits.len() as u32))
}

fn parse_fraction(c: &mut Cursor<'_>) -> Result<i64, &'static str> {
    let n = c.s.iter().take_while(|b| b.is_ascii_digit()).count();
    let (digits, rest) = c.s.split_at(n);
    c.s = rest;
    parse_fraction_digits(digits).ok_or("expected 1 to 6 fractional digits")
}

/// `+HH`, `+HH:MM`, `+HH:MM:SS` (or `-`): seconds east of UTC.
fn parse_offset(c: &mut Cursor<'_>) -> Result<i32, &'static str> {
    let sign = match c.peek() {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ => return Err("expected a UTC offset"),
    };
    c.s = c.s.get(1..).unwrap_or_default();
    let h = c.number(1, 2).ok_or("expected offset hours")?;
    let mut m = 0;
    let mut s = 0;
    if c.eat(b':') {
        m = c.number(2, 2).ok_or("expected offset minutes")?;
        if c.eat(b':') {
            s = c.number(2, 2).ok_or("expected offset seconds")?;
        }
    }
    if m > 59 || s > 59 {
        return Err("offset field out of range");
    }
    let secs = sign * ((h * 60 + m) * 60 + s);
    i32::try_from(secs)
        .ok()
        .filter(|s| s.unsigned_abs() < TZDISP_LIMIT.unsigned_abs())
        .ok_or("offset out of range")
}

fn finish<T>(c: &Cursor<'_>, v: T) -> Result<T, &'static str> {
    if c.s.is_empty() {
        Ok(v)
    } else {
        Err("unexpected trailing characters")
    }
}

fn infinity<T>(raw: &[u8]) -> Option<Infinitable<T>> {
    match raw {
        b"infinity" => Some(Infinitable::Infinity),
        b"-infinity" => Some(Infinitable::NegInfinity),
        _ => None,
    }
}

pub(crate) fn date_text(oid: Oid, raw: &[u8]) -> Result<Infinitable<Date>, ValueError> {
    if let Some(inf) = infinity(raw) {
        return Ok(inf);
    }
    let (body, bc) = split_bc(raw);
    let mut c = Cursor { s: body };
    parse_date(&mut c, bc)
        .and_then(|d| finish(&c, d))
        .and_then(|d| i32::try_from(d).map_err(|_| "date out of range"))
        .map(|d| Infinitable::Finite(Date(d)))
        .map_err(|reason| ValueError::text(oid, raw, reason))
}

pub(crate) fn time_text(oid: Oid, raw: &[u8]) -> Result<Time, ValueError> {
    let mut c = Cursor { s: raw };
    parse_time(&mut c, 24)
        .and_then(|t| finish(&c, Time(t)))
        .map_err(|reason| ValueError::text(oid, raw, reason))
}

pub(crate) fn timetz_text(oid: Oid, raw: &[u8]) -> Result<TimeTz, ValueError> {
    let mut c = Cursor { s: raw };
    let parsed = parse_time(&mut c, 24).and_then(|t| {
        let off = parse_offset(&mut c)?;
        finish(
            &c,
            TimeTz {
                time: Time(t),
                utc_offset: off,
            },
        )
    });
    parsed.map_err(|reason| ValueError::text(oid, raw, reason))
}

/// `DATE TIME[OFFSET][ BC]` as local microseconds since 2000 and the offset (0 if absent).
fn parse_timestamp(raw: &[u8], with_offset: bool) -> Result<i64, &'static str> {
    parse_timestamp_with(raw, with_offset, fixed_date_time)
}

/// [`parse_timestamp`] with the fast reader of the date and time given
/// (tests pass one that never reads, to compare with the cursor).
fn parse_timestamp_with(
    raw: &[u8],
    with_offset: bool,
    fixed: FixedReader,
) -> Result<i64, &'static str> {
    let (body, bc) = split_bc(raw);
    let mut c = Cursor { s: body };
    let (days, time) = match fixed(body) {
        Some(([year, month, day, h, m, s], rest)) => {
            c.s = rest;
            (
                civil_date(year, month, day, bc)?,
                clock_time(&mut c, [h, m, s], 23)?,
            )
        }
        None => {
            let days = parse_date(&mut c, bc)?;
            if !c.eat(b' ') {
                return Err("expected a space between date and time");
            }
            (days, parse_time(&mut c, 23)?)
        }
    };
    let offset = if with_offset {
        parse_offset(&mut c)?
    } else {
        0
    };
    finish(&c, ())?;
    let micros = i128::from(days) * i128::from(USECS_PER_DAY) + i128::from(time)
        - i128::from(offset) * i128::from(USECS_PER_SEC);
    i64::try_from(micros)
        .ok()
        .filter(|m| (MIN_TIMESTAMP..END_TIMESTAMP).contains(m))
        .ok_or("timestamp out of range")
}

pub(crate) fn timestamp_text(oid: Oid, raw: &[u8]) -> Result<Infinitable<Timestamp>, ValueError> {
    if let Some(inf) = infinity(raw) {
        return Ok(inf);
    }
    parse_timestamp(raw, false)
        .map(|t| Infinitable::Finite(Timestamp(t)))
        .map_err(|reason| ValueError::text(oid, raw, reason))
}

pub(crate) fn timestamptz_text(
    oid: Oid,
    raw: &[u8],
) -> Result<Infinitable<TimestampTz>, ValueError> {
    if let Some(inf) = infinity(raw) {
        return Ok(inf);
    }
    parse_timestamp(raw, true)
        .map(|t| Infinitable::Finite(TimestampTz(t)))
        .map_err(|reason| ValueError::text(oid, raw, reason))
}

// ---- binary ----

pub(crate) fn date_binary(oid: Oid, bytes: [u8; 4]) -> Result<Infinitable<Date>, ValueError> {
    match i32::from_be_bytes(bytes) {
        i32::MAX => Ok(Infinitable::Infinity),
        i32::MIN => Ok(Infinitable::NegInfinity),
        d => Date::from_days_since_2000(d)
            .map(Infinitable::Finite)
            .ok_or_else(|| ValueError::binary(oid, &bytes, "date out of range")),
    }
}

pub(crate) fn time_binary(oid: Oid, bytes: [u8; 8]) -> Result<Time, ValueError> {
    Time::from_micros(i64::from_be_bytes(bytes))
        .ok_or_else(|| ValueError::binary(oid, &bytes, "time out of range"))
}

/// `i64` microseconds, then `i32` zone in seconds *west* of UTC.
pub(crate) fn timetz_binary(oid: Oid, bytes: [u8; 12]) -> Result<TimeTz, ValueError> {
    let (t, z) = bytes.split_at(8);
    let micros = t.try_into().map(i64::from_be_bytes).unwrap_or(-1);
    let west = z.try_into().map(i32::from_be_bytes).unwrap_or(i32::MIN);
    let time = Time::from_micros(micros)
        .ok_or_else(|| ValueError::binary(oid, &bytes, "time out of range"))?;
    west.checked_neg()
        .and_then(|east| TimeTz::new(time, east))
        .ok_or_else(|| ValueError::binary(oid, &bytes, "time zone offset out of range"))
}

fn micros_binary(oid: Oid, bytes: [u8; 8]) -> Result<Infinitable<i64>, ValueError> {
    match i64::from_be_bytes(bytes) {
        i64::MAX => Ok(Infinitable::Infinity),
        i64::MIN => Ok(Infinitable::NegInfinity),
        t if (MIN_TIMESTAMP..END_TIMESTAMP).contains(&t) => Ok(Infinitable::Finite(t)),
        _ => Err(ValueError::binary(oid, &bytes, "timestamp out of range")),
    }
}

pub(crate) fn timestamp_binary(
    oid: Oid,
    bytes: [u8; 8],
) -> Result<Infinitable<Timestamp>, ValueError> {
    Ok(match micros_binary(oid, bytes)? {
        Infinitable::Finite(t) => Infinitable::Finite(Timestamp(t)),
        Infinitable::Infinity => Infinitable::Infinity,
        Infinitable::NegInfinity => Infinitable::NegInfinity,
    })
}

pub(crate) fn timestamptz_binary(
    oid: Oid,
    bytes: [u8; 8],
) -> Result<Infinitable<TimestampTz>, ValueError> {
    Ok(match micros_binary(oid, bytes)? {
        Infinitable::Finite(t) => Infinitable::Finite(TimestampTz(t)),
        Infinitable::Infinity => Infinitable::Infinity,
        Infinitable::NegInfinity => Infinitable::NegInfinity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_cursor(raw: &[u8], with_offset: bool) -> Result<i64, &'static str> {
        parse_timestamp_with(raw, with_offset, |_| None)
    }

    #[test]
    fn the_fixed_reader_takes_the_common_shape_only() {
        let (fields, rest) = fixed_date_time(b"2026-12-05 19:45:07.25+00").unwrap_or_default();
        assert_eq!(fields, [2026, 12, 5, 19, 45, 7]);
        assert_eq!(rest, b".25+00");
        for other in [
            &b"10000-01-01 00:00:00+00"[..],
            b"999-01-01 00:00:00",
            b"2026-1-05 19:45:07",
            b"2026-12-05T19:45:07",
            b"2026-12-05 19:45:070",
            b"2026-12-05 19:45:0",
            b"2026-12-05 1a:45:07",
            b"2026-12-05 1::45:07",
            b"2026-12-05 /0:45:07",
            b"",
        ] {
            assert_eq!(
                fixed_date_time(other),
                None,
                "{:?}",
                String::from_utf8_lossy(other)
            );
        }
        assert_eq!(parse_timestamp(b"2000-01-01 00:00:00+00", true), Ok(0));
        assert_eq!(
            parse_timestamp(b"2000-01-01 00:00:01.5-01", true),
            Ok(3_601_500_000)
        );
        assert!(parse_timestamp(b"2026-12-05 19:45:070+00", true).is_err());
        assert!(parse_timestamp(b"2026-02-29 00:00:00", false).is_err());
        assert!(parse_timestamp(b"0000-01-01 00:00:00", false).is_err());
    }

    /// Timestamps of the server's shapes and near misses: digits, field
    /// widths, separators, fractions, offsets and ` BC` varied at random.
    fn timestamp_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let digits = |n: std::ops::RangeInclusive<usize>| {
            // Now and then the bytes either side of the digits.
            proptest::collection::vec(
                prop_oneof![40 => b'0'..=b'9', 1 => Just(b'/'), 1 => Just(b':')],
                n,
            )
            .prop_map(|d| String::from_utf8(d).unwrap_or_default())
        };
        // Mostly the usual width, sometimes another.
        let field = |usual: usize, other: std::ops::RangeInclusive<usize>| prop_oneof![12 => digits(usual..=usual), 1 => digits(other)];
        let sep = |usual: char| prop_oneof![12 => Just(usual), 1 => any::<char>()];
        (
            (
                field(4, 1..=6),
                sep('-'),
                field(2, 1..=3),
                sep('-'),
                field(2, 1..=3),
            ),
            (
                sep(' '),
                field(2, 1..=3),
                sep(':'),
                field(2, 1..=3),
                sep(':'),
                field(2, 1..=3),
            ),
            proptest::option::of(digits(0..=8)),
            proptest::option::of(("[+-]", field(2, 1..=3), proptest::option::of(digits(2..=2)))),
            any::<bool>(),
        )
            .prop_map(
                |((y, s1, mo, s2, d), (s3, h, s4, mi, s5, sec), frac, offset, bc)| {
                    let mut t = format!("{y}{s1}{mo}{s2}{d}{s3}{h}{s4}{mi}{s5}{sec}");
                    if let Some(f) = frac {
                        t.push('.');
                        t.push_str(&f);
                    }
                    if let Some((sign, oh, om)) = offset {
                        t.push_str(&sign);
                        t.push_str(&oh);
                        if let Some(om) = om {
                            t.push(':');
                            t.push_str(&om);
                        }
                    }
                    if bc {
                        t.push_str(" BC");
                    }
                    t
                },
            )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]
        /// The fixed reader changes nothing: the same value or the same
        /// error as the cursor, on any text.
        #[test]
        fn the_fixed_reader_agrees_with_the_cursor(text in timestamp_text(), with_offset: bool) {
            proptest::prop_assert_eq!(
                parse_timestamp(text.as_bytes(), with_offset),
                by_cursor(text.as_bytes(), with_offset),
                "{:?}", text
            );
        }
    }
}
