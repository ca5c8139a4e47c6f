//! `interval`: months, days and microseconds, kept apart as PostgreSQL does.

use std::fmt;

use super::datetime::{parse_fraction_digits, write_fraction};
use super::error::ValueError;
use crate::Oid;

const USECS_PER_SEC: i64 = 1_000_000;
const USECS_PER_MINUTE: i64 = 60 * USECS_PER_SEC;
const USECS_PER_HOUR: i64 = 60 * USECS_PER_MINUTE;

/// A PostgreSQL `interval`: three independent fields, as the server stores them.
///
/// A month is not a fixed number of days and a day is not always 24 hours, so
/// the fields are never folded into each other. Displays in `IntervalStyle`
/// `postgres`, exactly as the server prints it: `1 year 2 mons 3 days 04:05:06.789`,
/// `-1 days +02:03:00`, `00:00:00`. PostgreSQL 17's `infinity` / `-infinity`
/// are the all-`MAX` / all-`MIN` field values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Interval {
    /// Months (a year is 12 of them).
    pub months: i32,
    /// Days.
    pub days: i32,
    /// Microseconds.
    pub micros: i64,
}

impl Interval {
    /// PostgreSQL 17's `infinity` interval.
    pub const INFINITY: Interval = Interval {
        months: i32::MAX,
        days: i32::MAX,
        micros: i64::MAX,
    };
    /// PostgreSQL 17's `-infinity` interval.
    pub const NEG_INFINITY: Interval = Interval {
        months: i32::MIN,
        days: i32::MIN,
        micros: i64::MIN,
    };
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Interval::INFINITY {
            return f.write_str("infinity");
        }
        if *self == Interval::NEG_INFINITY {
            return f.write_str("-infinity");
        }
        // EncodeInterval, INTSTYLE_POSTGRES.
        let mut is_zero = true;
        let mut is_before = false;
        let mut part = |f: &mut fmt::Formatter<'_>, value: i64, unit: &str| -> fmt::Result {
            if value == 0 {
                return Ok(());
            }
            write!(
                f,
                "{}{}{value} {unit}{}",
                if is_zero { "" } else { " " },
                if is_before && value > 0 { "+" } else { "" },
                if value != 1 { "s" } else { "" }
            )?;
            is_before = value < 0;
            is_zero = false;
            Ok(())
        };
        let months = i64::from(self.months);
        part(f, months / 12, "year")?;
        part(f, months % 12, "mon")?;
        part(f, i64::from(self.days), "day")?;
        let t = self.micros;
        let hour = t / USECS_PER_HOUR;
        let min = t % USECS_PER_HOUR / USECS_PER_MINUTE;
        let sec = t % USECS_PER_MINUTE / USECS_PER_SEC;
        let fsec = t % USECS_PER_SEC;
        if is_zero || t != 0 {
            let minus = hour < 0 || min < 0 || sec < 0 || fsec < 0;
            write!(
                f,
                "{}{}{:02}:{:02}:{:02}",
                if is_zero { "" } else { " " },
                if minus {
                    "-"
                } else if is_before {
                    "+"
                } else {
                    ""
                },
                hour.unsigned_abs(),
                min.unsigned_abs(),
                sec.unsigned_abs()
            )?;
            write_fraction(f, fsec.unsigned_abs())?;
        }
        Ok(())
    }
}

impl Interval {
    /// ISO 8601 duration text, exactly as the server prints it with
    /// `IntervalStyle=iso_8601`: `P1Y2M3DT4H5M6.789S`, `P-1DT2H3M`, `PT0S`.
    pub fn iso8601(self) -> Iso8601Interval {
        Iso8601Interval(self)
    }
}

/// [`Display`](fmt::Display)s an [`Interval`] as an ISO 8601 duration (see [`Interval::iso8601`]).
#[derive(Debug, Clone, Copy)]
pub struct Iso8601Interval(Interval);

impl fmt::Display for Iso8601Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let iv = self.0;
        if iv == Interval::INFINITY || iv == Interval::NEG_INFINITY {
            return iv.fmt(f);
        }
        // EncodeInterval, INTSTYLE_ISO_8601.
        let months = i64::from(iv.months);
        let (year, mon, mday) = (months / 12, months % 12, i64::from(iv.days));
        let t = iv.micros;
        let hour = t / USECS_PER_HOUR;
        let min = t % USECS_PER_HOUR / USECS_PER_MINUTE;
        let sec = t % USECS_PER_MINUTE / USECS_PER_SEC;
        let fsec = t % USECS_PER_SEC;
        if year == 0 && mon == 0 && mday == 0 && t == 0 {
            return f.write_str("PT0S");
        }
        let part = |f: &mut fmt::Formatter<'_>, v: i64, unit: char| -> fmt::Result {
            if v != 0 {
                write!(f, "{v}{unit}")?;
            }
            Ok(())
        };
        f.write_str("P")?;
        part(f, year, 'Y')?;
        part(f, mon, 'M')?;
        part(f, mday, 'D')?;
        if t != 0 {
            f.write_str("T")?;
        }
        part(f, hour, 'H')?;
        part(f, min, 'M')?;
        if sec != 0 || fsec != 0 {
            if sec < 0 || fsec < 0 {
                f.write_str("-")?;
            }
            write!(f, "{}", sec.unsigned_abs())?;
            write_fraction(f, fsec.unsigned_abs())?;
            f.write_str("S")?;
        }
        Ok(())
    }
}

/// Parse `IntervalStyle=postgres` output: `[+-]N year(s)`, `[+-]N mon(s)`, `[+-]N day(s)`,
/// then an optional `[+-]H+:MM:SS[.ffffff]`, separated by single spaces.
pub(crate) fn interval_text(oid: Oid, raw: &[u8]) -> Result<Interval, ValueError> {
    parse(raw).map_err(|reason| ValueError::text(oid, raw, reason))
}

fn parse(raw: &[u8]) -> Result<Interval, &'static str> {
    match raw {
        b"infinity" => return Ok(Interval::INFINITY),
        b"-infinity" => return Ok(Interval::NEG_INFINITY),
        b"" => return Err("empty interval"),
        _ => {}
    }
    let (mut months, mut days, mut micros) = (0i64, 0i64, 0i64);
    let mut tokens = raw.split(|&b| b == b' ');
    while let Some(tok) = tokens.next() {
        if tok.contains(&b':') {
            micros = parse_time(tok)?;
            if tokens.next().is_some() {
                return Err("unexpected text after the time part");
            }
            break;
        }
        let n = parse_int(tok).ok_or("expected a number")?;
        let add = |acc: i64, v: Option<i64>| v.and_then(|v| acc.checked_add(v));
        match tokens.next().ok_or("expected a unit after a number")? {
            b"year" | b"years" => {
                months = add(months, n.checked_mul(12)).ok_or("years out of range")?
            }
            b"mon" | b"mons" => months = add(months, Some(n)).ok_or("months out of range")?,
            b"day" | b"days" => days = add(days, Some(n)).ok_or("days out of range")?,
            _ => return Err("unknown unit (expected year, mon or day)"),
        }
    }
    Ok(Interval {
        months: i32::try_from(months).map_err(|_| "months out of range")?,
        days: i32::try_from(days).map_err(|_| "days out of range")?,
        micros,
    })
}

/// `[+-]digits` as an `i64`.
fn parse_int(tok: &[u8]) -> Option<i64> {
    let (neg, digits) = sign(tok);
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits.iter().try_fold(0i64, |acc, d| {
        acc.checked_mul(10)?.checked_add(i64::from(d - b'0'))
    })?;
    Some(if neg { -v } else { v })
}

fn sign(tok: &[u8]) -> (bool, &[u8]) {
    match tok.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, tok),
    }
}

/// `[+-]H+:MM:SS[.f{1,6}]` as signed microseconds.
fn parse_time(tok: &[u8]) -> Result<i64, &'static str> {
    let (neg, body) = sign(tok);
    let mut parts = body.splitn(3, |&b| b == b':');
    let (Some(h), Some(m), Some(s)) = (parts.next(), parts.next(), parts.next()) else {
        return Err("expected H:MM:SS");
    };
    let (s, frac) = match s.iter().position(|&b| b == b'.') {
        Some(p) => (
            s.get(..p).unwrap_or_default(),
            parse_fraction_digits(s.get(p + 1..).unwrap_or_default())
                .ok_or("expected 1 to 6 fractional digits")?,
        ),
        None => (s, 0),
    };
    let num = |d: &[u8], max_len: usize| -> Option<i64> {
        if d.is_empty() || d.len() > max_len || !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        parse_int(d)
    };
    let h = num(h, 19).ok_or("expected hours")?;
    let (Some(m), Some(s)) = (num(m, 2).filter(|m| *m < 60), num(s, 2).filter(|s| *s < 60)) else {
        return Err("minutes or seconds out of range");
    };
    let total = i128::from(h) * i128::from(USECS_PER_HOUR)
        + i128::from(m * USECS_PER_MINUTE + s * USECS_PER_SEC + frac);
    i64::try_from(if neg { -total } else { total }).map_err(|_| "time part out of range")
}

/// `i64` microseconds, `i32` days, `i32` months.
pub(crate) fn interval_binary(bytes: [u8; 16]) -> Interval {
    let [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p] = bytes;
    Interval {
        micros: i64::from_be_bytes([a, b, c, d, e, f, g, h]),
        days: i32::from_be_bytes([i, j, k, l]),
        months: i32::from_be_bytes([m, n, o, p]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_time_parts_round_trip() {
        for micros in [i64::MIN, i64::MAX, -1, 1, 0] {
            let iv = Interval {
                months: 0,
                days: 0,
                micros,
            };
            assert_eq!(parse(iv.to_string().as_bytes()), Ok(iv), "{iv}");
        }
        let iv = Interval {
            months: i32::MIN,
            days: i32::MIN + 1,
            micros: 5,
        };
        assert_eq!(parse(iv.to_string().as_bytes()), Ok(iv), "{iv}");
    }
}
