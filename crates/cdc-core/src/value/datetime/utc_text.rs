//! The commonest `timestamptz` text, recognised without decoding it.
//!
//! A server whose `TimeZone` is UTC writes every `timestamptz` from year 1 to
//! 9999 as `YYYY-MM-DD HH:MM:SS[.f…]+00`. Such text names its instant in its
//! own digits, so checking the ranges of those digits is all that decoding
//! it would check: validating a row and writing the value as text in another
//! form both skip the calendar arithmetic of [`super::codec`].

use super::super::digits::Pattern;
use super::Date;

/// `timestamptz` text in the server's UTC form, its fields range-checked:
/// a real day of a real month in years 1 to 9999, hour 0–23, minute and
/// second 0–59, and up to six fraction digits.
///
/// Any text this accepts decodes as a `timestamptz` (to the instant its
/// digits name); text it declines may or may not, and is for the decoder.
///
/// ```
/// use cdc_core::UtcTimestampText;
///
/// let t = UtcTimestampText::parse(b"2024-02-29 12:30:05.25+00").unwrap();
/// assert_eq!(t.date(), b"2024-02-29");
/// assert_eq!(t.clock(), b"12:30:05");
/// assert_eq!(t.fraction(), b"25");
/// // Another offset, a day that does not exist, or a leap second: decode these.
/// assert!(UtcTimestampText::parse(b"2024-02-29 12:30:05+02").is_none());
/// assert!(UtcTimestampText::parse(b"2023-02-29 12:30:05+00").is_none());
/// assert!(UtcTimestampText::parse(b"2024-06-30 23:59:60+00").is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTimestampText<'a> {
    date_time: &'a [u8; 19],
    fraction: &'a [u8],
}

impl<'a> UtcTimestampText<'a> {
    /// `raw` if it is a `timestamptz` in the server's UTC form with fields
    /// in range; `None` for anything else.
    #[inline]
    pub fn parse(raw: &'a [u8]) -> Option<Self> {
        let (date_time, rest) = raw.split_first_chunk::<19>()?;
        let fraction = match rest.strip_suffix(b"+00")? {
            [] => &[][..],
            [b'.', digits @ ..] if (1..=6).contains(&digits.len()) => digits,
            _ => return None,
        };
        if !fraction.iter().all(u8::is_ascii_digit) {
            return None;
        }
        // Three overlapping words: `YYYY-MM-`, `DD HH:MM` and `HH:MM:SS`.
        const YMD: Pattern = Pattern::new(b"0000-00-");
        const DHM: Pattern = Pattern::new(b"00 00:00");
        const HMS: Pattern = Pattern::new(b"00:00:00");
        let (ymd, dhm, hms) = (
            date_time.first_chunk::<8>()?,
            date_time.get(8..)?.first_chunk::<8>()?,
            date_time.last_chunk::<8>()?,
        );
        let [y0, y1, y2, y3, _, m0, m1, _] = YMD.digits(*ymd)?;
        let [d0, d1, _, h0, h1, _, i0, i1] = DHM.digits(*dhm)?;
        let [.., s0, s1] = HMS.digits(*hms)?;
        let two = |a: u8, b: u8| u32::from(a) * 10 + u32::from(b);
        let year = two(y0, y1) * 100 + two(y2, y3);
        let (month, day) = (two(m0, m1), two(d0, d1));
        // Year 0 is not the server's: it writes 1 BC as `0001-… BC`. Month
        // 13 has no days. Below 10000, the year fits an i32. Every month
        // has 28 days, so only the last few need the calendar.
        let real_day = |day: u32| {
            let in_month = || i32::try_from(year).map_or(0, |y| Date::days_in_month(y, month));
            (1..=12).contains(&month) && day != 0 && (day <= 28 || day <= in_month())
        };
        let in_range = year != 0
            && real_day(day)
            && two(h0, h1) <= 23
            && two(i0, i1) <= 59
            && two(s0, s1) <= 59;
        in_range.then_some(UtcTimestampText {
            date_time,
            fraction,
        })
    }

    /// `YYYY-MM-DD`.
    pub fn date(&self) -> &'a [u8] {
        &self.date_time[..10]
    }

    /// `HH:MM:SS`.
    pub fn clock(&self) -> &'a [u8] {
        &self.date_time[11..]
    }

    /// The fraction's digits as written (none to six; the server trims
    /// trailing zeros).
    pub fn fraction(&self) -> &'a [u8] {
        self.fraction
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_text, types, validate_text, TimestampTz, Value};
    use proptest::prelude::*;

    /// The instant the fields name, from the calendar (the reference).
    fn instant(t: &UtcTimestampText<'_>) -> Option<i64> {
        let num = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u32>().ok();
        let d = t.date();
        let c = t.clock();
        let date = Date::from_ymd(
            i32::try_from(num(&d[..4])?).ok()?,
            num(&d[5..7])?,
            num(&d[8..10])?,
        )?;
        let secs = i64::from(num(&c[..2])? * 3600 + num(&c[3..5])? * 60 + num(&c[6..8])?);
        let mut frac = [b'0'; 6];
        frac[..t.fraction().len()].copy_from_slice(t.fraction());
        let micros = i64::from(num(&frac)?);
        Some((date.days_since_unix_epoch() - 10_957) * 86_400_000_000 + secs * 1_000_000 + micros)
    }

    /// The fields read one at a time, the plain way (the reference for the
    /// word-at-a-time check).
    fn by_fields(raw: &[u8]) -> Option<UtcTimestampText<'_>> {
        let (date_time, rest) = raw.split_first_chunk::<19>()?;
        let fraction = match rest.strip_suffix(b"+00")? {
            [] => &[][..],
            [b'.', digits @ ..] if (1..=6).contains(&digits.len()) => digits,
            _ => return None,
        };
        let [y0, y1, y2, y3, b'-', m0, m1, b'-', d0, d1, b' ', h0, h1, b':', i0, i1, b':', s0, s1] =
            *date_time
        else {
            return None;
        };
        let fields = [y0, y1, y2, y3, m0, m1, d0, d1, h0, h1, i0, i1, s0, s1];
        if !fields.iter().all(u8::is_ascii_digit) || !fraction.iter().all(u8::is_ascii_digit) {
            return None;
        }
        // The calendar decides the date; the clock's fields are read as numbers.
        let num = |at: usize, len: usize| -> Option<u32> {
            std::str::from_utf8(date_time.get(at..at + len)?)
                .ok()?
                .parse()
                .ok()
        };
        let year = i32::try_from(num(0, 4)?).ok()?;
        let real_date = year != 0 && Date::from_ymd(year, num(5, 2)?, num(8, 2)?).is_some();
        let clock_ok = num(11, 2)? < 24 && num(14, 2)? < 60 && num(17, 2)? < 60;
        (real_date && clock_ok).then_some(UtcTimestampText {
            date_time,
            fraction,
        })
    }

    fn digits(n: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(0u8..10, n)
            .prop_map(|d| d.into_iter().map(|d| char::from(b'0' + d)).collect())
    }

    /// Text of the UTC shape whose fields run to just past their ranges at
    /// both ends (so that in range and out of it are both common), with
    /// none to seven fraction digits.
    fn shaped() -> impl Strategy<Value = String> {
        let year = prop_oneof![
            Just(0u32),
            Just(1),
            Just(1900),
            Just(2000),
            Just(2023),
            Just(2024),
            Just(9999),
            0u32..10_000
        ];
        (
            year,
            0u32..14,
            0u32..33,
            0u32..26,
            0u32..62,
            0u32..62,
            0usize..8,
        )
            .prop_flat_map(|(y, mo, d, h, mi, s, n)| (Just((y, mo, d, h, mi, s)), digits(n)))
            .prop_map(|((y, mo, d, h, mi, s), frac)| {
                let frac = if frac.is_empty() {
                    String::new()
                } else {
                    format!(".{frac}")
                };
                format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}{frac}+00")
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// What is accepted decodes, to the instant its digits name; the
        /// validator using it agrees with decoding, error included.
        #[test]
        fn accepted_text_decodes_to_its_fields(text in shaped(), flip in any::<(usize, u8)>()) {
            let mut raw = text.into_bytes();
            if flip.1 % 4 == 0 {
                let at = flip.0 % raw.len();
                raw[at] = flip.1;
            }
            prop_assert_eq!(UtcTimestampText::parse(&raw), by_fields(&raw));
            let decoded = decode_text(types::TIMESTAMPTZ, &raw);
            if let Some(t) = UtcTimestampText::parse(&raw) {
                let want = instant(&t).and_then(TimestampTz::from_micros_since_2000);
                prop_assert!(want.is_some(), "{:?}", String::from_utf8_lossy(&raw));
                let got = match &decoded {
                    Ok(Value::TimestampTz(ts)) => ts.finite(),
                    _ => None,
                };
                prop_assert_eq!(got, want, "{:?}", String::from_utf8_lossy(&raw));
            }
            prop_assert_eq!(
                validate_text(types::TIMESTAMPTZ, &raw).err(),
                decoded.err()
            );
        }
    }

    /// Every byte value in every place of a few accepted texts: the
    /// word-at-a-time check agrees with the reference on each.
    #[test]
    fn every_single_byte_change_is_judged_as_the_reference_does() {
        for text in ["2024-02-29 12:30:05.25+00", "0999-10-19 19:09:59+00"] {
            for at in 0..text.len() {
                for b in 0..=u8::MAX {
                    let mut raw = text.as_bytes().to_vec();
                    raw[at] = b;
                    assert_eq!(UtcTimestampText::parse(&raw), by_fields(&raw), "{raw:?}");
                }
            }
        }
    }

    #[test]
    fn declines_what_it_cannot_vouch_for() {
        for text in [
            "2023-02-29 00:00:00+00",
            "1900-02-29 00:00:00+00",
            "2024-04-31 00:00:00+00",
            "2024-13-01 00:00:00+00",
            "2024-00-01 00:00:00+00",
            "2024-01-00 00:00:00+00",
            "0000-01-01 00:00:00+00",
            "2024-01-01 24:00:00+00",
            "2024-01-01 00:60:00+00",
            "2024-01-01 00:00:60+00",
            "2024-01-01 00:00:00+02",
            "2024-01-01 00:00:00+00:30",
            "2024-01-01 00:00:00.+00",
            "2024-01-01 00:00:00.1234567+00",
            "2024-01-01 00:00:00+00 BC",
            "12024-01-01 00:00:00+00",
            "2024-01-01T00:00:00+00",
            "2024-01-01 00:00:0a+00",
            "infinity",
            "",
        ] {
            assert!(UtcTimestampText::parse(text.as_bytes()).is_none(), "{text}");
        }
        let t = UtcTimestampText::parse(b"0001-01-01 00:00:00+00").unwrap();
        assert_eq!((t.date(), t.fraction()), (&b"0001-01-01"[..], &b""[..]));
        assert!(UtcTimestampText::parse(b"9999-12-31 23:59:59.999999+00").is_some());
        assert!(UtcTimestampText::parse(b"2000-02-29 00:00:00+00").is_some());
    }
}
