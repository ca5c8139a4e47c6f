//! `numeric`: exact decimals, never routed through a float.

use std::borrow::Cow;
use std::fmt;

use super::digits::leading_digits;
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

/// `-?[0-9]+(\.[0-9]+)?`.
fn is_decimal(s: &[u8]) -> bool {
    let s = s.strip_prefix(b"-").unwrap_or(s);
    let int = leading_digits(s);
    match s.get(int..) {
        _ if int == 0 => false,
        Some([]) => true,
        Some([b'.', frac @ ..]) => !frac.is_empty() && leading_digits(frac) == frac.len(),
        _ => false,
    }
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

/// The checked parts of a `numeric_send` form.
struct BinaryParts<'a> {
    sign: u16,
    weight: i64,
    dscale: usize,
    /// The base-10000 digits, two bytes each, every one below 10000.
    digits: &'a [u8],
}

impl BinaryParts<'_> {
    /// Base-10000 digit `i` (0 is worth `10000^weight`); 0 outside the
    /// digits sent.
    fn digit(&self, i: i64) -> u16 {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.digits.get(i.checked_mul(2)?..)?.first_chunk::<2>())
            .map_or(0, |d| u16::from_be_bytes(*d))
    }
}

/// `numeric_send`: `u16 ndigits, i16 weight, u16 sign, u16 dscale, ndigits x i16`
/// base-10000 digits, the first worth `10000^weight`. Checks everything
/// [`numeric_binary`] needs, in the order it reports errors.
fn numeric_binary_parts(oid: Oid, raw: &[u8]) -> Result<BinaryParts<'_>, ValueError> {
    let bad = |reason| ValueError::binary(oid, raw, reason);
    let Some((header, digits)) = raw.split_first_chunk::<8>() else {
        return Err(bad("shorter than the 8-byte header"));
    };
    let [n0, n1, w0, w1, s0, s1, d0, d1] = *header;
    let ndigits = usize::from(u16::from_be_bytes([n0, n1]));
    let dscale = u16::from_be_bytes([d0, d1]);
    if digits.len() != 2 * ndigits {
        return Err(bad("length does not match the digit count"));
    }
    if dscale & !NUMERIC_DSCALE_MASK != 0 {
        return Err(bad("display scale out of range"));
    }
    if digits
        .chunks_exact(2)
        .any(|d| !(0..NBASE).contains(&i16::from_be_bytes([d[0], d[1]])))
    {
        return Err(bad("digit out of range 0..10000"));
    }
    let sign = u16::from_be_bytes([s0, s1]);
    if !matches!(
        sign,
        NUMERIC_POS | NUMERIC_NEG | NUMERIC_NAN | NUMERIC_PINF | NUMERIC_NINF
    ) {
        return Err(bad("invalid sign"));
    }
    Ok(BinaryParts {
        sign,
        weight: i64::from(i16::from_be_bytes([w0, w1])),
        dscale: usize::from(dscale),
        digits,
    })
}

/// Whether [`numeric_binary`] accepts `raw`, with its error when it does
/// not, without building the decimal.
pub(crate) fn validate_numeric_binary(oid: Oid, raw: &[u8]) -> Result<(), ValueError> {
    numeric_binary_parts(oid, raw).map(drop)
}

/// Decodes `numeric_send`'s form, printed like `get_str_from_var` after
/// `numeric_recv`'s truncation to `dscale`.
pub(crate) fn numeric_binary(oid: Oid, raw: &[u8]) -> Result<Numeric<'static>, ValueError> {
    let parts = numeric_binary_parts(oid, raw)?;
    let negative = match parts.sign {
        NUMERIC_NAN => return Ok(Numeric::NaN),
        NUMERIC_PINF => return Ok(Numeric::Infinity),
        NUMERIC_NINF => return Ok(Numeric::NegInfinity),
        sign => sign == NUMERIC_NEG,
    };
    let (weight, dscale) = (parts.weight, parts.dscale);
    let int_digits = usize::try_from(weight.saturating_add(1)).unwrap_or(0) * 4;
    let mut out = String::with_capacity(int_digits.max(1) + dscale + 5);
    if negative {
        // Dropped below when every digit printed is zero (no `-0`).
        out.push('-');
    }
    // Integer part: base-10000 digits 0..=weight, leading zeros suppressed.
    let mut started = false;
    for i in 0..=weight {
        let d = parts.digit(i);
        if started {
            push4(&mut out, d);
        } else if d != 0 {
            push_digits(&mut out, d);
            started = true;
        }
    }
    if !started {
        out.push('0');
    }
    if dscale > 0 {
        out.push('.');
        let start = out.len();
        let mut i = weight + 1;
        while out.len() - start < dscale {
            push4(&mut out, parts.digit(i));
            i += 1;
        }
        out.truncate(start + dscale);
    }
    if negative && !out.bytes().any(|b| matches!(b, b'1'..=b'9')) {
        out.remove(0);
    }
    Ok(Numeric::Finite(Cow::Owned(out)))
}

/// A base-10000 digit as four decimal digits.
fn push4(out: &mut String, d: u16) {
    for unit in [1000, 100, 10, 1] {
        out.push(decimal_digit(d / unit));
    }
}

/// A nonzero base-10000 digit without leading zeros.
fn push_digits(out: &mut String, d: u16) {
    for unit in [1000, 100, 10, 1] {
        if d >= unit {
            out.push(decimal_digit(d / unit));
        }
    }
}

/// The last decimal digit of `n`.
fn decimal_digit(n: u16) -> char {
    char::from(b'0' + (n % 10) as u8)
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
        fn the_check_reads_the_pattern(text in "-?[0-9]{0,12}[0-9.]{0,12}(-|[0-9.a ]){0,3}") {
            proptest::prop_assert_eq!(is_decimal(text.as_bytes()), is_decimal_by_parts(text.as_bytes()));
        }
    }
}
