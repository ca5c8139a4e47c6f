//! The common `numeric` in `precise` mode without allocating: a value whose
//! unscaled integer fits an `i128` (up to 38 digits) is rescaled or
//! stripped with integer arithmetic and written from a stack buffer.
//!
//! [`super::decimal`]'s digit-string path stays the reference: it takes
//! every value this one declines (longer text, more digits), and the tests
//! check that both write the same bytes for the values this one takes.

use super::super::json::write_base64;
use super::decimal::write_variable_scale_with;

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
    pub(super) fn parse(s: &str) -> Option<SmallDecimal> {
        if s.len() > MAX_TEXT {
            return None;
        }
        let (negative, bytes) = match s.as_bytes().split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, s.as_bytes()),
        };
        let mut unscaled: u128 = 0;
        let mut int_digits = 0usize;
        let mut scale = 0i32;
        let mut point = false;
        for &b in bytes {
            match b {
                b'0'..=b'9' => {
                    unscaled = unscaled
                        .checked_mul(10)?
                        .checked_add(u128::from(b - b'0'))?;
                    if point {
                        scale += 1;
                    } else {
                        int_digits += 1;
                    }
                }
                b'.' if !point => point = true,
                _ => return None,
            }
        }
        if int_digits == 0 {
            return None;
        }
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
        while v.scale > 0 && v.unscaled % 10 == 0 {
            v.unscaled /= 10;
            v.scale -= 1;
        }
        v
    }

    /// Writes the unscaled value as Java's `BigInteger.toByteArray()` does
    /// (big-endian two's complement in the fewest bytes), in base64.
    pub(super) fn write_unscaled(&self, out: &mut Vec<u8>) {
        // `fits` holds, so the magnitude converts without loss.
        let magnitude = self.unscaled as i128;
        let value = if self.negative { -magnitude } else { magnitude };
        let bytes = value.to_be_bytes();
        let mut first = 0;
        while first + 1 < bytes.len() {
            let (head, next) = (bytes[first], bytes[first + 1]);
            let redundant = (head == 0 && next & 0x80 == 0) || (head == 0xff && next & 0x80 != 0);
            if !redundant {
                break;
            }
            first += 1;
        }
        write_base64(out, &bytes[first..]);
    }

    /// `{"scale":N,"value":"<base64>"}` of the stripped value.
    pub(super) fn write_variable_scale(&self, out: &mut Vec<u8>) {
        let v = self.stripped();
        write_variable_scale_with(out, v.scale, |out| v.write_unscaled(out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_general_path_parses() {
        let d = |s: &str| SmallDecimal::parse(s);
        assert_eq!(d("-1.50"), Some(SmallDecimal::new(true, 150, 2)));
        assert_eq!(d("007"), Some(SmallDecimal::new(false, 7, 0)));
        assert_eq!(d("1."), Some(SmallDecimal::new(false, 1, 0)));
        assert_eq!(d("-0.00"), Some(SmallDecimal::new(false, 0, 2)));
        for bad in ["", "-", ".5", "1.2.3", "1e5", "+1", " 1", "1_0", "--1"] {
            assert_eq!(d(bad), None, "{bad:?}");
        }
        // 39 nines do not fit an i128; 38 do.
        assert!(d(&"9".repeat(38)).is_some());
        assert_eq!(d(&"9".repeat(39)), None);
        assert_eq!(d(&"0".repeat(MAX_TEXT + 1)), None);
    }

    #[test]
    fn rounds_half_up_and_declines_what_does_not_fit() {
        let d = |s: &str| SmallDecimal::parse(s).unwrap();
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
