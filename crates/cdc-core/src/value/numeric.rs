//! `numeric`: exact decimals, never routed through a float.

use std::borrow::Cow;
use std::fmt;

use super::error::ValueError;
use crate::Oid;

/// A `numeric` value: an exact decimal string, or one of the special values.
///
/// The finite form is always `-?[0-9]+(\.[0-9]+)?`, exactly as `numeric_out`
/// prints it (the scale, i.e. trailing zeros, is kept): `"-1.50"`, `"0.000"`,
/// `"100000"`. It borrows from the column text when decoded from text and is
/// built from the base-10000 digits when decoded from binary.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Numeric<'a> {
    /// `NaN`
    NaN,
    /// `Infinity`
    Infinity,
    /// `-Infinity`
    NegInfinity,
    /// A finite decimal, e.g. `-123.4500`.
    Finite(Cow<'a, str>),
}

impl<'a> Numeric<'a> {
    /// Validate a decimal string in `numeric_out`'s form (also `NaN`, `Infinity`, `-Infinity`).
    pub fn parse(s: &'a str) -> Option<Self> {
        match s {
            "NaN" => Some(Numeric::NaN),
            "Infinity" => Some(Numeric::Infinity),
            "-Infinity" => Some(Numeric::NegInfinity),
            _ if is_decimal(s.as_bytes()) => Some(Numeric::Finite(Cow::Borrowed(s))),
            _ => None,
        }
    }

    /// The text PostgreSQL prints: the decimal, or `NaN` / `Infinity` / `-Infinity`.
    pub fn as_str(&self) -> &str {
        match self {
            Numeric::NaN => "NaN",
            Numeric::Infinity => "Infinity",
            Numeric::NegInfinity => "-Infinity",
            Numeric::Finite(s) => s,
        }
    }

    /// Digits after the decimal point (the display scale), `None` for special values.
    pub fn scale(&self) -> Option<usize> {
        match self {
            Numeric::Finite(s) => Some(s.split_once('.').map_or(0, |(_, f)| f.len())),
            _ => None,
        }
    }

    /// The same value with no borrow.
    pub fn into_owned(self) -> Numeric<'static> {
        match self {
            Numeric::NaN => Numeric::NaN,
            Numeric::Infinity => Numeric::Infinity,
            Numeric::NegInfinity => Numeric::NegInfinity,
            Numeric::Finite(s) => Numeric::Finite(Cow::Owned(s.into_owned())),
        }
    }
}

impl fmt::Display for Numeric<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `-?[0-9]+(\.[0-9]+)?`, in one pass.
fn is_decimal(s: &[u8]) -> bool {
    let s = s.strip_prefix(b"-").unwrap_or(s);
    // Digits before the point, and after it once it is seen.
    let (mut int, mut frac) = (0usize, None::<usize>);
    for &b in s {
        match (b, &mut frac) {
            (b'0'..=b'9', None) => int += 1,
            (b'0'..=b'9', Some(n)) => *n += 1,
            (b'.', None) => frac = Some(0),
            _ => return false,
        }
    }
    int > 0 && frac != Some(0)
}

/// Whether [`numeric_text`] accepts `raw`, with its error when it does not,
/// without checking UTF-8 first: a decimal is ASCII by its pattern.
pub(crate) fn validate_numeric_text(oid: Oid, raw: &[u8]) -> Result<(), ValueError> {
    if is_decimal(raw) || matches!(raw, b"NaN" | b"Infinity" | b"-Infinity") {
        Ok(())
    } else {
        numeric_text(oid, raw).map(drop)
    }
}

pub(crate) fn numeric_text(oid: Oid, raw: &[u8]) -> Result<Numeric<'_>, ValueError> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(Numeric::parse)
        .ok_or_else(|| ValueError::text(oid, raw, "expected a decimal number, NaN or Infinity"))
}

const NUMERIC_POS: u16 = 0x0000;
const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_NAN: u16 = 0xC000;
const NUMERIC_PINF: u16 = 0xD000;
const NUMERIC_NINF: u16 = 0xF000;
const NUMERIC_DSCALE_MASK: u16 = 0x3FFF;
const NBASE: i16 = 10000;

/// `numeric_send`: `u16 ndigits, i16 weight, u16 sign, u16 dscale, ndigits x i16` base-10000
/// digits, the first worth `10000^weight`. Printed like `get_str_from_var` after
/// `numeric_recv`'s truncation to `dscale`.
pub(crate) fn numeric_binary(oid: Oid, raw: &[u8]) -> Result<Numeric<'static>, ValueError> {
    let bad = |reason| ValueError::binary(oid, raw, reason);
    let word = |i: usize| -> Option<[u8; 2]> { raw.get(i..i + 2).and_then(|s| s.try_into().ok()) };
    let (Some(n), Some(w), Some(s), Some(d)) = (word(0), word(2), word(4), word(6)) else {
        return Err(bad("shorter than the 8-byte header"));
    };
    let ndigits = usize::from(u16::from_be_bytes(n));
    let weight = i64::from(i16::from_be_bytes(w));
    let sign = u16::from_be_bytes(s);
    let dscale = u16::from_be_bytes(d);
    if raw.len() != 8 + 2 * ndigits {
        return Err(bad("length does not match the digit count"));
    }
    if dscale & !NUMERIC_DSCALE_MASK != 0 {
        return Err(bad("display scale out of range"));
    }
    let mut digits = Vec::with_capacity(ndigits);
    for chunk in raw.get(8..).unwrap_or_default().chunks_exact(2) {
        let d = i16::from_be_bytes([chunk[0], chunk[1]]);
        if !(0..NBASE).contains(&d) {
            return Err(bad("digit out of range 0..10000"));
        }
        digits.push(d as u16);
    }
    let negative = match sign {
        NUMERIC_POS => false,
        NUMERIC_NEG => true,
        NUMERIC_NAN => return Ok(Numeric::NaN),
        NUMERIC_PINF => return Ok(Numeric::Infinity),
        NUMERIC_NINF => return Ok(Numeric::NegInfinity),
        _ => return Err(bad("invalid sign")),
    };
    let dscale = usize::from(dscale);
    let digit = |i: i64| -> u16 {
        usize::try_from(i)
            .ok()
            .and_then(|i| digits.get(i))
            .copied()
            .unwrap_or(0)
    };
    // Integer part: base-10000 digits 0..=weight, leading decimal zeros suppressed.
    let mut int = String::new();
    for i in 0..=weight {
        push4(&mut int, digit(i));
    }
    let int = int.trim_start_matches('0');
    let mut out = String::with_capacity(int.len() + dscale + 3);
    out.push_str(if int.is_empty() { "0" } else { int });
    if dscale > 0 {
        out.push('.');
        let mut i = weight + 1;
        let start = out.len();
        while out.len() - start < dscale {
            push4(&mut out, digit(i));
            i += 1;
        }
        out.truncate(start + dscale);
    }
    if negative && out.bytes().any(|b| matches!(b, b'1'..=b'9')) {
        out.insert(0, '-');
    }
    Ok(Numeric::Finite(Cow::Owned(out)))
}

fn push4(out: &mut String, d: u16) {
    use fmt::Write;
    let _ = write!(out, "{d:04}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pattern, read the plain way.
    fn is_decimal_by_parts(s: &[u8]) -> bool {
        let s = s.strip_prefix(b"-").unwrap_or(s);
        let (int, frac) = match s.iter().position(|&b| b == b'.') {
            Some(p) => (s.get(..p).unwrap_or_default(), s.get(p + 1..)),
            None => (s, None),
        };
        let digits = |d: &[u8]| !d.is_empty() && d.iter().all(u8::is_ascii_digit);
        digits(int) && frac.is_none_or(digits)
    }

    #[test]
    fn decimals_in_numeric_outs_form_only() {
        for good in [
            "0",
            "-1",
            "1.5",
            "-0.000",
            "123456789012345678901234567890.1",
        ] {
            assert!(is_decimal(good.as_bytes()), "{good}");
        }
        for bad in [
            "", "-", ".", "1.", ".5", "-.5", "1.2.3", "--1", "+1", "1e5", " 1", "1 ", "NaN",
        ] {
            assert!(!is_decimal(bad.as_bytes()), "{bad}");
        }
    }

    proptest::proptest! {
        /// Validating accepts exactly what decoding accepts, with its error.
        #[test]
        fn validating_agrees_with_decoding(
            text in "-?[0-9.]{0,6}(-|[0-9.a ]){0,3}|NaN|-?Infinity|Inf|[\\PC]{0,4}",
        ) {
            let oid = crate::types::NUMERIC;
            proptest::prop_assert_eq!(
                validate_numeric_text(oid, text.as_bytes()),
                numeric_text(oid, text.as_bytes()).map(drop)
            );
        }

        #[test]
        fn the_one_pass_check_reads_the_pattern(text in "-?[0-9.]{0,6}(-|[0-9.a ]){0,3}") {
            proptest::prop_assert_eq!(is_decimal(text.as_bytes()), is_decimal_by_parts(text.as_bytes()));
        }
    }
}
