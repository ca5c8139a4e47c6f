//! `numeric` and `money` as Debezium writes them, per `decimal.handling.mode`:
//!
//! * `precise`: Kafka Connect `Decimal`, the base64 of the big-endian
//!   two's-complement unscaled integer (Java's `BigInteger.toByteArray`),
//!   with the column's declared scale; a `numeric` without a declared scale
//!   is `io.debezium.data.VariableScaleDecimal`, `{"scale":N,"value":"…"}`
//!   with trailing zeros stripped. `money` has scale 2
//!   (`money.fraction.digits`).
//! * `string`: Java's `BigDecimal.toString` (`"12.50"`, `"1.0E-7"`); money
//!   `toPlainString`. `NaN`, `Infinity`, `-Infinity` are `"NAN"`,
//!   `"POSITIVE_INFINITY"`, `"NEGATIVE_INFINITY"`.
//! * `double`: a number (`"NaN"`, `"Infinity"` as strings).
//!
//! **Deviation:** in `precise` mode Debezium stops with an error on `NaN`
//! and the infinities ("set decimal handling mode to 'string'"); pgcdc
//! writes `null` so that the stream goes on.

use cdc_core::Numeric;

use super::super::json::{write_base64, write_int, write_str};
use super::java;
use super::small_decimal::SmallDecimal;
use crate::encoding::DecimalHandlingMode;

/// A finite decimal: `unscaled × 10^-scale`, the digits without sign or
/// leading zeros (`"0"` for zero).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decimal {
    negative: bool,
    digits: String,
    scale: i32,
}

/// The most digits a decimal may have here (PostgreSQL's `numeric` has at
/// most 131072 before and 16383 after the point).
const MAX_DIGITS: usize = 150_000;

impl Decimal {
    /// Parses `-?[0-9]+(\.[0-9]+)?`.
    pub(crate) fn parse(s: &str) -> Option<Decimal> {
        let (negative, s) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        if int.is_empty()
            || s.len() > MAX_DIGITS
            || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let mut digits = String::with_capacity(int.len() + frac.len());
        digits.push_str(int);
        digits.push_str(frac);
        Some(Decimal::new(
            negative,
            digits,
            i32::try_from(frac.len()).ok()?,
        ))
    }

    fn new(negative: bool, digits: String, scale: i32) -> Decimal {
        let trimmed = digits.trim_start_matches('0');
        let digits = if trimmed.is_empty() {
            "0".to_owned()
        } else {
            trimmed.to_owned()
        };
        Decimal {
            negative: negative && digits != "0",
            digits,
            scale,
        }
    }

    /// From an integer count of hundredths and similar (`money`'s binary form).
    pub(crate) fn from_unscaled(unscaled: i64, scale: i32) -> Decimal {
        Decimal::new(unscaled < 0, unscaled.unsigned_abs().to_string(), scale)
    }

    fn is_zero(&self) -> bool {
        self.digits == "0"
    }

    /// `BigDecimal.setScale(scale, HALF_UP)`.
    pub(crate) fn with_scale(&self, scale: i32) -> Decimal {
        let diff = i64::from(scale) - i64::from(self.scale);
        if diff >= 0 {
            if self.is_zero() {
                return Decimal {
                    scale,
                    ..self.clone()
                };
            }
            let mut digits = self.digits.clone();
            digits.extend(std::iter::repeat_n(
                '0',
                diff.min(MAX_DIGITS as i64) as usize,
            ));
            return Decimal::new(self.negative, digits, scale);
        }
        let drop = usize::try_from(-diff).unwrap_or(usize::MAX);
        if drop > self.digits.len() {
            return Decimal::new(false, "0".to_owned(), scale);
        }
        let (keep, dropped) = self.digits.split_at(self.digits.len() - drop);
        let mut digits = if keep.is_empty() {
            "0".to_owned()
        } else {
            keep.to_owned()
        };
        if dropped.as_bytes().first().is_some_and(|&d| d >= b'5') {
            digits = increment(&digits);
        }
        Decimal::new(self.negative, digits, scale)
    }

    /// `stripTrailingZeros()`, then a negative scale back to 0 (Debezium's
    /// `VariableScaleDecimal`).
    fn stripped(&self) -> Decimal {
        if self.is_zero() {
            return Decimal::new(false, "0".to_owned(), 0);
        }
        let trimmed = self.digits.trim_end_matches('0');
        let removed = (self.digits.len() - trimmed.len()) as i64;
        let scale = i64::from(self.scale) - removed;
        if scale >= 0 {
            Decimal::new(self.negative, trimmed.to_owned(), scale as i32)
        } else {
            self.with_scale(0)
        }
    }

    /// Java's `BigDecimal.toString()`: plain unless the exponent is
    /// positive or the adjusted exponent is below -6.
    pub(crate) fn java_string(&self) -> String {
        let adjusted = -i64::from(self.scale) + self.digits.len() as i64 - 1;
        if self.scale >= 0 && adjusted >= -6 {
            return self.plain_string();
        }
        let mut s = String::new();
        if self.negative {
            s.push('-');
        }
        let (first, rest) = self.digits.split_at(1);
        s.push_str(first);
        if !rest.is_empty() {
            s.push('.');
            s.push_str(rest);
        }
        s.push('E');
        if adjusted > 0 {
            s.push('+');
        }
        s.push_str(&adjusted.to_string());
        s
    }

    /// Java's `BigDecimal.toPlainString()`.
    pub(crate) fn plain_string(&self) -> String {
        let mut s = String::new();
        if self.negative {
            s.push('-');
        }
        if self.scale <= 0 {
            s.push_str(&self.digits);
            if !self.is_zero() {
                s.extend(std::iter::repeat_n('0', self.scale.unsigned_abs() as usize));
            }
            return s;
        }
        let scale = self.scale as usize;
        if self.digits.len() > scale {
            let (int, frac) = self.digits.split_at(self.digits.len() - scale);
            s.push_str(int);
            s.push('.');
            s.push_str(frac);
        } else {
            s.push_str("0.");
            s.extend(std::iter::repeat_n('0', scale - self.digits.len()));
            s.push_str(&self.digits);
        }
        s
    }

    /// Java's `BigDecimal.doubleValue()` (correctly rounded).
    pub(crate) fn to_f64(&self) -> f64 {
        let text = format!(
            "{}{}e{}",
            if self.negative { "-" } else { "" },
            self.digits,
            -i64::from(self.scale)
        );
        text.parse().unwrap_or(0.0)
    }

    /// The unscaled value as Java's `BigInteger.toByteArray()`: big-endian
    /// two's complement in the fewest bytes.
    pub(crate) fn unscaled_bytes(&self) -> Vec<u8> {
        // Little-endian base-2^32 limbs of the magnitude.
        let mut limbs: Vec<u32> = vec![0];
        for chunk in self.digits.as_bytes().chunks(9) {
            let mut mul = 1u64;
            let mut add = 0u64;
            for &d in chunk {
                mul *= 10;
                add = add * 10 + u64::from(d - b'0');
            }
            let mut carry = add;
            for limb in &mut limbs {
                let v = u64::from(*limb) * mul + carry;
                *limb = v as u32;
                carry = v >> 32;
            }
            if carry > 0 {
                limbs.push(carry as u32);
            }
        }
        let mut bytes: Vec<u8> = limbs.iter().rev().flat_map(|l| l.to_be_bytes()).collect();
        let first = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
        bytes.drain(..first);
        if bytes.is_empty() {
            return vec![0];
        }
        if !self.negative {
            if bytes[0] & 0x80 != 0 {
                bytes.insert(0, 0);
            }
            return bytes;
        }
        // Two's complement: invert, add one.
        for b in &mut bytes {
            *b = !*b;
        }
        for b in bytes.iter_mut().rev() {
            let (v, overflow) = b.overflowing_add(1);
            *b = v;
            if !overflow {
                break;
            }
        }
        if bytes[0] & 0x80 == 0 {
            bytes.insert(0, 0xff);
        }
        bytes
    }
}

/// `digits + 1` (decimal digits, no sign).
fn increment(digits: &str) -> String {
    let mut bytes = digits.as_bytes().to_vec();
    for b in bytes.iter_mut().rev() {
        if *b == b'9' {
            *b = b'0';
        } else {
            *b += 1;
            return String::from_utf8(bytes).unwrap_or_default();
        }
    }
    let mut s = String::from("1");
    s.push_str(std::str::from_utf8(&bytes).unwrap_or_default());
    s
}

/// The declared scale of a `numeric(p,s)` column, `None` without a
/// modifier (PostgreSQL 15 scales may be negative).
pub(crate) fn numeric_scale(typmod: i32) -> Option<i32> {
    if typmod < 4 {
        return None;
    }
    let t = typmod - 4;
    Some(((t & 0x7ff) ^ 1024) - 1024)
}

/// Writes a `numeric` of a column with type modifier `typmod`.
pub(crate) fn write_numeric(
    out: &mut Vec<u8>,
    n: &Numeric<'_>,
    typmod: i32,
    mode: DecimalHandlingMode,
) {
    if let (Numeric::Finite(s), DecimalHandlingMode::Precise) = (n, mode) {
        if write_small_precise(out, s.as_bytes(), typmod) {
            return;
        }
    }
    write_numeric_digits(out, n, typmod, mode)
}

/// A finite `numeric`'s text in `precise` mode, when its unscaled integer
/// fits an `i128` (see [`SmallDecimal`]), as [`write_numeric`] writes it;
/// false, writing nothing, for anything else. `text` need not have been
/// decoded: what [`SmallDecimal::parse`] takes is `numeric_out`'s form.
pub(crate) fn write_small_precise(out: &mut Vec<u8>, text: &[u8], typmod: i32) -> bool {
    let Some(value) = SmallDecimal::parse(text) else {
        return false;
    };
    match numeric_scale(typmod) {
        None => value.write_variable_scale(out),
        Some(scale) => match value.with_scale(scale) {
            Some(value) => value.write_unscaled(out),
            None => return false,
        },
    }
    true
}

/// [`write_numeric`] through the digit string, for any size.
fn write_numeric_digits(
    out: &mut Vec<u8>,
    n: &Numeric<'_>,
    typmod: i32,
    mode: DecimalHandlingMode,
) {
    let finite = match n {
        Numeric::Finite(s) => Decimal::parse(s),
        _ => None,
    };
    let Some(value) = finite else {
        let special = match n {
            Numeric::NaN => Special::NaN,
            Numeric::Infinity => Special::Infinity,
            Numeric::NegInfinity => Special::NegInfinity,
            // Not in numeric_out's form: written as text rather than lost.
            Numeric::Finite(s) => return write_str(out, s),
        };
        return write_special(out, special, mode);
    };
    match numeric_scale(typmod) {
        Some(scale) => write_decimal(out, &value.with_scale(scale), mode),
        None => match mode {
            DecimalHandlingMode::Precise => write_variable_scale(out, &value),
            _ => write_decimal(out, &value, mode),
        },
    }
}

/// A decimal with a fixed scale: Connect `Decimal`, string or double.
pub(crate) fn write_decimal(out: &mut Vec<u8>, value: &Decimal, mode: DecimalHandlingMode) {
    match mode {
        DecimalHandlingMode::Precise => write_base64(out, &value.unscaled_bytes()),
        DecimalHandlingMode::String => write_str(out, &value.java_string()),
        DecimalHandlingMode::Double => java::write_double(out, value.to_f64()),
    }
}

/// `io.debezium.data.VariableScaleDecimal`: `{"scale":N,"value":"<base64>"}`.
pub(crate) fn write_variable_scale(out: &mut Vec<u8>, value: &Decimal) {
    let v = value.stripped();
    write_variable_scale_with(out, v.scale, |out| write_base64(out, &v.unscaled_bytes()));
}

/// How a `VariableScaleDecimal` object opens, before its scale.
pub(super) const VARIABLE_SCALE_OPEN: &[u8] = b"{\"scale\":";
/// The key between its scale and its value.
pub(super) const VARIABLE_SCALE_VALUE: &[u8] = b",\"value\":";

/// The `VariableScaleDecimal` object around a value (already stripped)
/// that `write_value` writes as base64.
pub(super) fn write_variable_scale_with(
    out: &mut Vec<u8>,
    scale: i32,
    write_value: impl FnOnce(&mut Vec<u8>),
) {
    out.extend_from_slice(VARIABLE_SCALE_OPEN);
    write_int(out, scale);
    out.extend_from_slice(VARIABLE_SCALE_VALUE);
    write_value(out);
    out.push(b'}');
}

#[derive(Debug, Clone, Copy)]
enum Special {
    NaN,
    Infinity,
    NegInfinity,
}

fn write_special(out: &mut Vec<u8>, special: Special, mode: DecimalHandlingMode) {
    match mode {
        DecimalHandlingMode::String => write_str(
            out,
            match special {
                Special::NaN => "NAN",
                Special::Infinity => "POSITIVE_INFINITY",
                Special::NegInfinity => "NEGATIVE_INFINITY",
            },
        ),
        DecimalHandlingMode::Double => java::write_double(
            out,
            match special {
                Special::NaN => f64::NAN,
                Special::Infinity => f64::INFINITY,
                Special::NegInfinity => f64::NEG_INFINITY,
            },
        ),
        DecimalHandlingMode::Precise => out.extend_from_slice(b"null"),
    }
}

/// Debezium's `money.fraction.digits` default.
pub(crate) const MONEY_SCALE: i32 = 2;

/// Parses `money` as the server prints it under any `lc_monetary`:
/// `$1,234.11`, `-$1,234.11`, `($1,234.11)`, `1.234,11 €`, `¥1,234`,
/// `-1 234,56 kr`. The sign is a `-` or parentheses anywhere; currency
/// symbols, spaces and group separators are dropped; the decimal separator
/// is the last `.` or `,` unless it only groups thousands (one kind of
/// separator, each followed by three digits, more than once or after a
/// one-to-three-digit head). `None` when no digits are left or the text is
/// too long to be money.
pub(crate) fn parse_money(text: &str) -> Option<Decimal> {
    if text.len() > 64 {
        return None;
    }
    let negative = text.contains('-') || text.contains('(');
    // Digits and separators only, in order.
    let kept: Vec<char> = text
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
        .collect();
    let kept: String = kept.into_iter().collect();
    let kept = kept.trim_matches(|c| c == '.' || c == ',');
    if !kept.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let decimal_at = kept.rfind(['.', ',']).filter(|&at| {
        let sep = kept.as_bytes()[at];
        let groups: Vec<&str> = kept.split(['.', ',']).collect();
        let one_kind = !kept.bytes().any(|b| (b == b'.' || b == b',') && b != sep);
        let thousands = one_kind
            && groups.len() >= 2
            && groups.iter().skip(1).all(|g| g.len() == 3)
            && (groups.len() > 2 || groups.first().is_some_and(|g| g.len() <= 3));
        // A single `.` or `,` followed by three digits after a short head is
        // a group separator (`$1,234`); a decimal comma with three fraction
        // digits (a currency with frac_digits 3) is not told apart.
        !thousands
    });
    let (int, frac) = match decimal_at {
        Some(at) => (&kept[..at], &kept[at + 1..]),
        None => (kept, ""),
    };
    let int: String = int.chars().filter(char::is_ascii_digit).collect();
    let int = if int.is_empty() { "0".to_owned() } else { int };
    let mut s = String::new();
    if negative {
        s.push('-');
    }
    s.push_str(&int);
    if !frac.is_empty() {
        s.push('.');
        s.push_str(frac);
    }
    Decimal::parse(&s)
}

/// Writes `money` (already parsed) per `decimal.handling.mode`.
pub(crate) fn write_money(out: &mut Vec<u8>, value: &Decimal, mode: DecimalHandlingMode) {
    match mode {
        DecimalHandlingMode::Precise => {
            write_base64(out, &value.with_scale(MONEY_SCALE).unscaled_bytes())
        }
        DecimalHandlingMode::String => write_str(out, &value.plain_string()),
        DecimalHandlingMode::Double => java::write_double(out, value.to_f64()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Decimal {
        Decimal::parse(s).unwrap()
    }

    fn out(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut v = Vec::new();
        f(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn unscaled_bytes_match_big_integer_to_byte_array() {
        for (s, bytes) in [
            ("0", vec![0u8]),
            ("1", vec![1]),
            ("127", vec![0x7f]),
            ("128", vec![0x00, 0x80]),
            ("255", vec![0x00, 0xff]),
            ("256", vec![0x01, 0x00]),
            ("-1", vec![0xff]),
            ("-128", vec![0x80]),
            ("-129", vec![0xff, 0x7f]),
            ("-256", vec![0xff, 0x00]),
            ("-32768", vec![0x80, 0x00]),
            ("-32769", vec![0xff, 0x7f, 0xff]),
            ("12.34", vec![0x04, 0xd2]),
            ("4294967296", vec![0x01, 0, 0, 0, 0]),
            ("18446744073709551616", vec![0x01, 0, 0, 0, 0, 0, 0, 0, 0]),
        ] {
            assert_eq!(dec(s).unscaled_bytes(), bytes, "{s}");
        }
    }

    proptest::proptest! {
        #[test]
        fn unscaled_bytes_of_any_i64(v: i64) {
            let d = Decimal::from_unscaled(v, 0);
            let bytes = d.unscaled_bytes();
            // Sign-extend back to an i64.
            let mut full = if bytes[0] & 0x80 != 0 { [0xffu8; 8] } else { [0u8; 8] };
            proptest::prop_assert!(bytes.len() <= 8);
            full[8 - bytes.len()..].copy_from_slice(&bytes);
            proptest::prop_assert_eq!(i64::from_be_bytes(full), v);
            // Fewest bytes: the first two bytes are not a redundant sign.
            if bytes.len() > 1 {
                let redundant = (bytes[0] == 0 && bytes[1] & 0x80 == 0)
                    || (bytes[0] == 0xff && bytes[1] & 0x80 != 0);
                proptest::prop_assert!(!redundant);
            }
        }
    }

    #[test]
    fn java_strings() {
        for (s, java) in [
            ("12.50", "12.50"),
            ("-0.001", "-0.001"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1E-7"),
            ("0.00000010", "1.0E-7"),
            ("-0.00000012", "-1.2E-7"),
            ("0", "0"),
            ("0.00", "0.00"),
            ("100", "100"),
        ] {
            assert_eq!(dec(s).java_string(), java, "{s}");
        }
        assert_eq!(dec("12300").with_scale(-2).java_string(), "1.23E+4");
        assert_eq!(dec("12300").with_scale(-2).plain_string(), "12300");
    }

    #[test]
    fn scales_round_half_up_and_strip() {
        assert_eq!(dec("1.005").with_scale(2).plain_string(), "1.01");
        assert_eq!(dec("-1.005").with_scale(2).plain_string(), "-1.01");
        assert_eq!(dec("9.999").with_scale(2).plain_string(), "10.00");
        assert_eq!(dec("1.5").with_scale(3).plain_string(), "1.500");
        assert_eq!(dec("0.004").with_scale(2).plain_string(), "0.00");
        let s = dec("1.500").stripped();
        assert_eq!((s.digits.as_str(), s.scale), ("15", 1));
        let s = dec("100.00").stripped();
        assert_eq!((s.digits.as_str(), s.scale), ("100", 0));
        let s = dec("0.000").stripped();
        assert_eq!((s.digits.as_str(), s.scale), ("0", 0));
    }

    #[test]
    fn numeric_in_every_mode() {
        let n = |s: &'static str| Numeric::parse(s).unwrap();
        let w = |v: &Numeric<'_>, typmod, mode| out(|o| write_numeric(o, v, typmod, mode));
        use DecimalHandlingMode::*;
        // numeric(10,2): typmod (10 << 16 | 2) + 4.
        let t = (10 << 16 | 2) + 4;
        assert_eq!(w(&n("1234.11"), t, Precise), "\"AeIT\"");
        assert_eq!(w(&n("1234.11"), t, String), "\"1234.11\"");
        assert_eq!(w(&n("1234.11"), t, Double), "1234.11");
        assert_eq!(w(&n("1.5"), -1, Precise), r#"{"scale":1,"value":"Dw=="}"#);
        assert_eq!(w(&n("-1.50"), -1, String), "\"-1.50\"");
        assert_eq!(w(&n("NaN"), -1, String), "\"NAN\"");
        assert_eq!(w(&n("Infinity"), t, String), "\"POSITIVE_INFINITY\"");
        assert_eq!(w(&n("-Infinity"), t, Double), "\"-Infinity\"");
        assert_eq!(w(&n("NaN"), t, Double), "\"NaN\"");
        assert_eq!(w(&n("NaN"), t, Precise), "null");
        assert_eq!(numeric_scale(-1), None);
        // numeric(5,-2) on PostgreSQL 15.
        assert_eq!(numeric_scale((5 << 16 | (-2i32 & 0x7ff)) + 4), Some(-2));
    }

    proptest::proptest! {
        /// The integer fast path writes what the digit-string path writes,
        /// for any value and any declared scale (or none).
        #[test]
        fn small_numerics_are_written_as_the_digit_path_writes_them(
            text in "-?[0-9]{1,40}(\\.[0-9]{0,30})?",
            scale in proptest::option::of(-10i32..50),
        ) {
            let typmod = scale.map_or(-1, |s| ((1000 << 16) | (s & 0x7ff)) + 4);
            let n = Numeric::Finite(std::borrow::Cow::Borrowed(&text));
            let fast = out(|o| write_numeric(o, &n, typmod, DecimalHandlingMode::Precise));
            let digits = out(|o| write_numeric_digits(o, &n, typmod, DecimalHandlingMode::Precise));
            proptest::prop_assert_eq!(fast, digits, "{} {:?}", text, scale);
        }
    }

    #[test]
    fn money_under_any_locale() {
        for (text, plain) in [
            ("$1,234.11", "1234.11"),
            ("-$1,234.11", "-1234.11"),
            ("($1,234.11)", "-1234.11"),
            ("$0.00", "0.00"),
            ("1.234,11 €", "1234.11"),
            ("-1 234,56 kr", "-1234.56"),
            ("¥1,234", "1234"),
            ("$92,233,720,368,547,758.07", "92233720368547758.07"),
            ("-$92,233,720,368,547,758.08", "-92233720368547758.08"),
            ("€ 5", "5"),
        ] {
            assert_eq!(
                parse_money(text).map(|d| d.plain_string()).as_deref(),
                Some(plain),
                "{text}"
            );
        }
        for bad in ["", "$", "--", "abc", &"9".repeat(100)] {
            assert_eq!(parse_money(bad), None, "{bad}");
        }
        let m = parse_money("$1,234.11").unwrap();
        use DecimalHandlingMode::*;
        assert_eq!(out(|o| write_money(o, &m, Precise)), "\"AeIT\"");
        assert_eq!(out(|o| write_money(o, &m, String)), "\"1234.11\"");
        assert_eq!(out(|o| write_money(o, &m, Double)), "1234.11");
        let yen = parse_money("¥1,234").unwrap();
        // 123400 hundredths.
        assert_eq!(out(|o| write_money(o, &yen, Precise)), "\"AeII\"");
    }

    proptest::proptest! {
        #[test]
        fn money_parsing_never_panics(text in "\\PC{0,40}") {
            let _ = parse_money(&text);
        }
    }
}
