//! Simple scalars: bool, integers, floats, `"char"`, bytea, uuid, pg_lsn, text.

use std::borrow::Cow;
use std::fmt;

use super::error::ValueError;
use crate::{Lsn, Oid};

/// A `uuid`: 16 bytes, displayed in PostgreSQL's lowercase hyphenated form.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// The 16 bytes, in network (display) order.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({self})")
    }
}

/// Borrow `raw` as UTF-8 text.
pub(crate) fn utf8(type_oid: Oid, raw: &[u8]) -> Result<&str, ValueError> {
    std::str::from_utf8(raw).map_err(|e| ValueError::InvalidUtf8 {
        type_oid,
        valid_up_to: e.valid_up_to(),
    })
}

/// Whether `raw` is UTF-8: [`utf8`]'s result without the `&str`. ASCII (most
/// text) is checked a word at a time first.
#[inline]
pub(crate) fn validate_utf8(type_oid: Oid, raw: &[u8]) -> Result<(), ValueError> {
    if raw.is_ascii() {
        Ok(())
    } else {
        utf8(type_oid, raw).map(drop)
    }
}

/// `t` / `f` as `boolout` prints them (the long spellings are accepted too).
pub(crate) fn bool_text(oid: Oid, raw: &[u8]) -> Result<bool, ValueError> {
    match raw {
        b"t" | b"true" => Ok(true),
        b"f" | b"false" => Ok(false),
        _ => Err(ValueError::text(oid, raw, "expected t or f")),
    }
}

/// One byte, non-zero is true (`boolrecv`).
pub(crate) fn bool_binary(oid: Oid, raw: &[u8]) -> Result<bool, ValueError> {
    match raw {
        [b] => Ok(*b != 0),
        _ => Err(ValueError::binary(oid, raw, "expected 1 byte")),
    }
}

/// Up to this many decimal digits fit in a `u64` whatever they are.
const MAX_UNCHECKED_DIGITS: usize = 19;

/// A decimal integer as the server prints it: optional `-`, digits only.
///
/// Parsed in one pass over the digits (this runs for every integer column of
/// every change), with the same results as `str::parse` after the digit check.
pub(crate) fn int_text<T: TryFrom<i64>>(oid: Oid, raw: &[u8]) -> Result<T, ValueError> {
    let (negative, digits) = match raw.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, raw),
    };
    let not_integer = || ValueError::text(oid, raw, "expected a decimal integer");
    let out_of_range = || ValueError::text(oid, raw, "integer out of range");
    let mut magnitude = 0u64;
    if digits.len() <= MAX_UNCHECKED_DIGITS {
        // Cannot overflow: one pass checks and accumulates.
        for &d in digits {
            let digit = d.wrapping_sub(b'0');
            if digit > 9 {
                return Err(not_integer());
            }
            magnitude = magnitude * 10 + u64::from(digit);
        }
        if digits.is_empty() {
            return Err(not_integer());
        }
    } else {
        // Every digit is checked before any overflow is reported.
        if !digits.iter().all(u8::is_ascii_digit) {
            return Err(not_integer());
        }
        for &d in digits {
            magnitude = magnitude
                .checked_mul(10)
                .and_then(|m| m.checked_add(u64::from(d - b'0')))
                .ok_or_else(out_of_range)?;
        }
    }
    let value = if negative {
        // An unsigned type takes no sign, not even on zero (as `str::parse`).
        if T::try_from(-1).is_err() {
            return Err(out_of_range());
        }
        // -2^63 (i64::MIN) has a magnitude one past i64::MAX.
        0i64.checked_sub_unsigned(magnitude)
            .ok_or_else(out_of_range)?
    } else {
        i64::try_from(magnitude).map_err(|_| out_of_range())?
    };
    T::try_from(value).map_err(|_| out_of_range())
}

/// Exactly `N` big-endian bytes.
pub(crate) fn fixed<const N: usize>(oid: Oid, raw: &[u8]) -> Result<[u8; N], ValueError> {
    raw.try_into().map_err(|_| {
        ValueError::binary(
            oid,
            raw,
            match N {
                1 => "expected 1 byte",
                2 => "expected 2 bytes",
                4 => "expected 4 bytes",
                6 => "expected 6 bytes",
                8 => "expected 8 bytes",
                12 => "expected 12 bytes",
                16 => "expected 16 bytes",
                _ => "wrong length",
            },
        )
    })
}

/// `float8out` / `float4out`: shortest round-trip digits, `NaN`, `Infinity`, `-Infinity`.
pub(crate) fn float_text<T: std::str::FromStr>(
    oid: Oid,
    raw: &[u8],
    nan: T,
    inf: T,
    neg_inf: T,
) -> Result<T, ValueError> {
    match raw {
        b"NaN" => return Ok(nan),
        b"Infinity" => return Ok(inf),
        b"-Infinity" => return Ok(neg_inf),
        _ => {}
    }
    // Only the characters of a decimal float: refuses Rust's own "inf"/"nan" spellings.
    let plausible = !raw.is_empty()
        && raw.iter().any(u8::is_ascii_digit)
        && raw
            .iter()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    if !plausible {
        return Err(ValueError::text(
            oid,
            raw,
            "expected a floating-point number",
        ));
    }
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ValueError::text(oid, raw, "expected a floating-point number"))
}

/// `charout`: empty for `\0`, `\ooo` for bytes with the high bit set, else the byte itself.
pub(crate) fn char_text(oid: Oid, raw: &[u8]) -> Result<u8, ValueError> {
    match raw {
        [] => Ok(0),
        [b] if b.is_ascii() => Ok(*b),
        [b'\\', a, b, c] => octal(*a, *b, *c).ok_or_else(|| {
            ValueError::text(oid, raw, "expected a backslash and three octal digits")
        }),
        _ => Err(ValueError::text(oid, raw, "expected a single character")),
    }
}

/// `\ooo` with the first digit 0-3, as byteaout and charout print it.
fn octal(a: u8, b: u8, c: u8) -> Option<u8> {
    if (b'0'..=b'3').contains(&a) && (b'0'..=b'7').contains(&b) && (b'0'..=b'7').contains(&c) {
        Some(((a - b'0') << 6) | ((b - b'0') << 3) | (c - b'0'))
    } else {
        None
    }
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `byteaout`: `\x` + hex pairs (whitespace between pairs is accepted, as `byteain` does),
/// or the old escape format (`\\`, `\ooo`, other bytes literal).
pub(crate) fn bytea_text(oid: Oid, raw: &[u8]) -> Result<Vec<u8>, ValueError> {
    if let Some(hex) = raw.strip_prefix(b"\\x") {
        let mut out = Vec::with_capacity(hex.len() / 2);
        let mut it = hex
            .iter()
            .copied()
            .filter(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
        while let Some(hi) = it.next() {
            let lo = it
                .next()
                .ok_or_else(|| ValueError::text(oid, raw, "odd number of hex digits"))?;
            match (hex_digit(hi), hex_digit(lo)) {
                (Some(h), Some(l)) => out.push((h << 4) | l),
                _ => return Err(ValueError::text(oid, raw, "invalid hex digit")),
            }
        }
        return Ok(out);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        match raw.get(i + 1..i + 4) {
            Some([b'\\', ..]) => {
                out.push(b'\\');
                i += 2;
            }
            Some(&[a, b, c]) => {
                let byte = octal(a, b, c)
                    .ok_or_else(|| ValueError::text(oid, raw, "invalid escape sequence"))?;
                out.push(byte);
                i += 4;
            }
            _ if raw.get(i + 1) == Some(&b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            _ => return Err(ValueError::text(oid, raw, "invalid escape sequence")),
        }
    }
    Ok(out)
}

/// `uuid_in`: 32 hex digits, optional `-` after any group of four, optional braces.
pub(crate) fn uuid_text(oid: Oid, raw: &[u8]) -> Result<Uuid, ValueError> {
    let bad = || ValueError::text(oid, raw, "expected 32 hexadecimal digits");
    let (mut rest, braces) = match raw.strip_prefix(b"{") {
        Some(r) => (r, true),
        None => (raw, false),
    };
    let mut out = [0u8; 16];
    for (i, slot) in out.iter_mut().enumerate() {
        let (&hi, &lo) = (rest.first().ok_or_else(bad)?, rest.get(1).ok_or_else(bad)?);
        *slot = match (hex_digit(hi), hex_digit(lo)) {
            (Some(h), Some(l)) => (h << 4) | l,
            _ => return Err(bad()),
        };
        rest = rest.get(2..).unwrap_or_default();
        if i % 2 == 1 && i < 15 {
            if let Some(r) = rest.strip_prefix(b"-") {
                rest = r;
            }
        }
    }
    if braces {
        rest = rest.strip_prefix(b"}").ok_or_else(bad)?;
    }
    if !rest.is_empty() {
        return Err(bad());
    }
    Ok(Uuid(out))
}

/// `pg_lsn_out`: `X/Y`.
pub(crate) fn lsn_text(oid: Oid, raw: &[u8]) -> Result<Lsn, ValueError> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ValueError::text(oid, raw, "expected an LSN like 16/B374D848"))
}

/// Text-like values: borrowed when valid UTF-8.
pub(crate) fn text(oid: Oid, raw: &[u8]) -> Result<Cow<'_, str>, ValueError> {
    utf8(oid, raw).map(Cow::Borrowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_rejects_out_of_range_first_digit() {
        assert_eq!(octal(b'3', b'7', b'7'), Some(255));
        assert_eq!(octal(b'4', b'0', b'0'), None);
        assert_eq!(octal(b'0', b'8', b'0'), None);
    }

    #[test]
    fn bytea_escape_trailing_backslash_is_an_error() {
        assert!(bytea_text(17, b"ab\\").is_err());
        assert!(bytea_text(17, b"ab\\1").is_err());
        assert_eq!(bytea_text(17, b"a\\\\").unwrap(), b"a\\");
    }

    /// What `int_text` did before: the digit check, then `str::parse`.
    fn parse_std<T: std::str::FromStr>(raw: &[u8]) -> Option<T> {
        let digits = raw.strip_prefix(b"-").unwrap_or(raw);
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(raw).ok()?.parse().ok()
    }

    fn same_as_std(raw: &[u8]) {
        assert_eq!(
            int_text::<i16>(21, raw).ok(),
            parse_std::<i16>(raw),
            "{raw:?}"
        );
        assert_eq!(
            int_text::<i32>(23, raw).ok(),
            parse_std::<i32>(raw),
            "{raw:?}"
        );
        assert_eq!(
            int_text::<i64>(20, raw).ok(),
            parse_std::<i64>(raw),
            "{raw:?}"
        );
        assert_eq!(
            int_text::<u32>(26, raw).ok(),
            parse_std::<u32>(raw),
            "{raw:?}"
        );
    }

    #[test]
    fn integers_at_the_edges_parse_as_std_does() {
        for text in [
            "0",
            "-0",
            "1",
            "-1",
            "",
            "-",
            "+1",
            " 1",
            "1 ",
            "00042",
            "-00042",
            "32767",
            "32768",
            "-32768",
            "-32769",
            "2147483647",
            "2147483648",
            "-2147483648",
            "-2147483649",
            "4294967295",
            "4294967296",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999999",
            "1e3",
            "12a",
        ] {
            same_as_std(text.as_bytes());
        }
    }

    #[test]
    fn a_non_digit_is_reported_before_an_overflow() {
        let reason = |raw: &[u8]| match int_text::<i64>(20, raw) {
            Err(ValueError::BadText { reason, .. }) => reason,
            other => panic!("{raw:?}: {other:?}"),
        };
        for len in 1..25 {
            let digits = vec![b'9'; len];
            for at in 0..len {
                let mut bad = digits.clone();
                bad[at] = b'x';
                assert_eq!(reason(&bad), "expected a decimal integer", "{bad:?}");
            }
            if len > 18 {
                assert_eq!(reason(&digits), "integer out of range", "{len}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn integers_parse_as_std_does(neg: bool, digits in "[0-9]{1,22}") {
            let text = format!("{}{digits}", if neg { "-" } else { "" });
            same_as_std(text.as_bytes());
        }

        #[test]
        fn any_i64_round_trips(v: i64) {
            proptest::prop_assert_eq!(int_text::<i64>(20, v.to_string().as_bytes()).ok(), Some(v));
        }
    }
}
