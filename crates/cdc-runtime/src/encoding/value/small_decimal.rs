//! The common `numeric` in `precise` mode without allocating: a value whose
//! unscaled integer fits an `i128` (up to 38 digits) is rescaled or
//! stripped with integer arithmetic and written from a stack buffer.
//!
//! [`super::decimal`]'s digit-string path stays the reference: it takes
//! every value this one declines (longer text, more digits), and the tests
//! check that both write the same bytes for the values this one takes.

use super::super::json::{base64_into, write_base64};
use super::decimal::{write_variable_scale_with, VARIABLE_SCALE_OPEN, VARIABLE_SCALE_VALUE};
use cdc_core::leading_digits;

/// The longest text taken here; longer values (many leading or trailing
/// zeros, or many digits) go the general way.
const MAX_TEXT: usize = 64;

/// A finite decimal `±unscaled × 10^-scale`, `unscaled ≤ i128::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SmallDecimal {
    negative: bool,
    unscaled: u128,
    scale: i32,
}

impl SmallDecimal {
    /// Parses `-?[0-9]+(\.[0-9]*)?` (what [`super::decimal::Decimal::parse`]
    /// accepts); `None` for anything else or a value too large for an
    /// `i128`.
    pub(super) fn parse(s: &[u8]) -> Option<SmallDecimal> {
        if s.len() > MAX_TEXT {
            return None;
        }
        let (negative, bytes) = match s.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, s),
        };
        let (int, rest) = bytes.split_at_checked(leading_digits(bytes))?;
        let frac = match rest {
            [] => rest,
            [b'.', frac @ ..] if leading_digits(frac) == frac.len() => frac,
            _ => return None,
        };
        if int.is_empty() {
            return None;
        }
        let scale = i32::try_from(frac.len()).ok()?;
        // Every byte is a digit now. Up to 19 digits cannot overflow a u64,
        // whose arithmetic costs a fraction of the u128's checked steps.
        let digit = |b: u8| b.wrapping_sub(b'0');
        let unscaled = if int.len() + frac.len() <= 19 {
            let small =
                |acc: u64, part: &[u8]| part.iter().fold(acc, |v, &b| v * 10 + u64::from(digit(b)));
            u128::from(small(small(0, int), frac))
        } else {
            let big = |acc: u128, part: &[u8]| {
                part.iter().try_fold(acc, |v, &b| {
                    v.checked_mul(10)?.checked_add(u128::from(digit(b)))
                })
            };
            big(big(0, int)?, frac)?
        };
        Some(SmallDecimal::new(negative, unscaled, scale)).filter(SmallDecimal::fits)
    }

    fn new(negative: bool, unscaled: u128, scale: i32) -> SmallDecimal {
        SmallDecimal {
            negative: negative && unscaled != 0,
            unscaled,
            scale,
        }
    }

    fn fits(&self) -> bool {
        self.unscaled <= i128::MAX as u128
    }

    /// `BigDecimal.setScale(scale, HALF_UP)`; `None` when the result would
    /// not fit.
    pub(super) fn with_scale(self, scale: i32) -> Option<SmallDecimal> {
        let diff = i64::from(scale) - i64::from(self.scale);
        if diff >= 0 {
            let factor = 10u128.checked_pow(u32::try_from(diff).ok()?)?;
            let unscaled = self.unscaled.checked_mul(factor)?;
            return Some(SmallDecimal::new(self.negative, unscaled, scale)).filter(Self::fits);
        }
        let Some(divisor) = u32::try_from(-diff)
            .ok()
            .and_then(|drop| 10u128.checked_pow(drop))
        else {
            // 10^39 and beyond: more than twice any value held here.
            return Some(SmallDecimal::new(false, 0, scale));
        };
        let (quotient, rest) = (self.unscaled / divisor, self.unscaled % divisor);
        // `rest < divisor ≤ 10^38`, so doubling it cannot overflow.
        let unscaled = quotient + u128::from(rest * 2 >= divisor);
        Some(SmallDecimal::new(self.negative, unscaled, scale))
    }

    /// `stripTrailingZeros()`, with a negative scale brought back to 0
    /// (Debezium's `VariableScaleDecimal`).
    pub(super) fn stripped(self) -> SmallDecimal {
        if self.unscaled == 0 {
            return SmallDecimal::new(false, 0, 0);
        }
        let mut v = self;
        // A u128 division is a library call; most values fit a u64, where
        // dividing by 10 is a multiply, so they finish there.
        while v.scale > 0 && u64::try_from(v.unscaled).is_err() && v.unscaled % 10 == 0 {
            v.unscaled /= 10;
            v.scale -= 1;
        }
        if let Ok(mut small) = u64::try_from(v.unscaled) {
            while v.scale > 0 && small % 10 == 0 {
                small /= 10;
                v.scale -= 1;
            }
            v.unscaled = u128::from(small);
        }
        v
    }

    /// The unscaled value as Java's `BigInteger.toByteArray()` gives it
    /// (big-endian two's complement in the fewest bytes): the bytes of
    /// the returned array from the returned index on.
    fn unscaled_bytes(&self) -> ([u8; 16], usize) {
        // `fits` holds, so the magnitude converts without loss.
        let magnitude = self.unscaled as i128;
        let value = if self.negative { -magnitude } else { magnitude };
        // The leading bits that only repeat the sign; the bytes kept hold
        // the rest and one sign bit.
        let sign_bits = if value < 0 {
            value.leading_ones()
        } else {
            value.leading_zeros()
        };
        let len = ((128 - sign_bits) / 8 + 1).min(16) as usize;
        (value.to_be_bytes(), 16 - len)
    }

    /// Writes the unscaled value (see [`Self::unscaled_bytes`]) in base64.
    pub(super) fn write_unscaled(&self, out: &mut Vec<u8>) {
        let (bytes, from) = self.unscaled_bytes();
        write_base64(out, bytes.get(from..).unwrap_or(&bytes));
    }

    /// `{"scale":N,"value":"<base64>"}` of the stripped value. This runs for
    /// every `numeric` of every row, so a scale below 100 (any value from
    /// text short enough for here but the longest) is put together on the
    /// stack and appended with one copy of a fixed size.
    pub(super) fn write_variable_scale(&self, out: &mut Vec<u8>) {
        let v = self.stripped();
        let scale = match u8::try_from(v.scale) {
            Ok(scale) if scale < 100 => scale,
            _ => return write_variable_scale_with(out, v.scale, |out| v.write_unscaled(out)),
        };
        let (bytes, from) = v.unscaled_bytes();
        let bytes = bytes.get(from..).unwrap_or(&bytes);
        let scale_digits = [b'0' + scale / 10, b'0' + scale % 10];
        let scale_text = scale_digits
            .get(usize::from(scale < 10)..)
            .unwrap_or_default();
        // `{"scale":` 9, two digits, `,"value":"` 10, 24 symbols, `"}` 2.
        let mut text = [0u8; 48];
        let mut at = 0;
        let put = |text: &mut [u8; 48], at: &mut usize, part: &[u8]| {
            if let Some(slot) = text.get_mut(*at..*at + part.len()) {
                slot.copy_from_slice(part);
                *at += part.len();
            }
        };
        put(&mut text, &mut at, VARIABLE_SCALE_OPEN);
        put(&mut text, &mut at, scale_text);
        put(&mut text, &mut at, VARIABLE_SCALE_VALUE);
        put(&mut text, &mut at, b"\"");
        at += text
            .get_mut(at..)
            .map_or(0, |rest| base64_into(rest, bytes));
        put(&mut text, &mut at, b"\"}");
        let start = out.len();
        out.extend_from_slice(&text);
        out.truncate(start + at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_general_path_parses() {
        let d = |s: &str| SmallDecimal::parse(s.as_bytes());
        assert_eq!(d("-1.50"), Some(SmallDecimal::new(true, 150, 2)));
        assert_eq!(d("007"), Some(SmallDecimal::new(false, 7, 0)));
        assert_eq!(d("1."), Some(SmallDecimal::new(false, 1, 0)));
        assert_eq!(d("-0.00"), Some(SmallDecimal::new(false, 0, 2)));
        for bad in [
            "", "-", ".5", "1.2.3", "1e5", "+1", " 1", "1_0", "--1", "1:5", "1/5", "1.:", "/",
        ] {
            assert_eq!(d(bad), None, "{bad:?}");
        }
        // 39 nines do not fit an i128; 38 do.
        assert!(d(&"9".repeat(38)).is_some());
        assert_eq!(d(&"9".repeat(39)), None);
        assert_eq!(d(&"0".repeat(MAX_TEXT + 1)), None);
    }

    #[test]
    fn strips_trailing_zeros_down_to_scale_zero() {
        let stripped = |s: &str| SmallDecimal::parse(s.as_bytes()).map(SmallDecimal::stripped);
        let v = |unscaled: u128, scale| Some(SmallDecimal::new(false, unscaled, scale));
        assert_eq!(stripped("1.0"), v(1, 0));
        assert_eq!(stripped("1.50"), v(15, 1));
        assert_eq!(stripped("100.00"), v(100, 0));
        assert_eq!(stripped("-0.000"), v(0, 0));
        assert_eq!(stripped("-2.500"), Some(SmallDecimal::new(true, 25, 1)));
        // Past a u64 with the zeros, within one once they are gone.
        assert_eq!(
            stripped("12345678901234567.000000"),
            v(12_345_678_901_234_567, 0)
        );
        // Past a u64 either way.
        assert_eq!(
            stripped("123456789012345678901.2300"),
            v(12_345_678_901_234_567_890_123, 2)
        );
    }

    #[test]
    fn rounds_half_up_and_declines_what_does_not_fit() {
        let d = |s: &str| SmallDecimal::parse(s.as_bytes()).unwrap();
        assert_eq!(d("1.005").with_scale(2), Some(d("1.01")));
        assert_eq!(d("-1.005").with_scale(2), Some(d("-1.01")));
        assert_eq!(d("-0.004").with_scale(2), Some(d("0.00")));
        assert_eq!(d("0.5").with_scale(0), Some(d("1")));
        assert_eq!(d("0.05").with_scale(0), Some(d("0")));
        assert_eq!(d("1").with_scale(-1), Some(SmallDecimal::new(false, 0, -1)));
        assert_eq!(d("1").with_scale(60), None);
        assert_eq!(
            d("1.5").with_scale(i32::MIN),
            Some(SmallDecimal::new(false, 0, i32::MIN))
        );
    }
}
