//! Numbers as the Debezium connector's JSON converter (Jackson) writes them:
//! Java's `Double.toString` and `Float.toString` (`1.0`, `1234.11`,
//! `1.0E10`, `1.0E-5`), and NaN and the infinities as the strings `"NaN"`,
//! `"Infinity"`, `"-Infinity"` (Jackson quotes non-numeric numbers).

use std::io::Write as _;

/// Appends `v` as Java's `Double.toString` writes it (shortest digits that
/// read back as `v`).
pub(crate) fn write_double(out: &mut Vec<u8>, v: f64) {
    if !v.is_finite() {
        write_non_finite(out, v.is_nan(), v > 0.0);
        return;
    }
    write_java(out, &format!("{v:e}"), v == 0.0 && v.is_sign_negative());
}

/// Appends `v` as Java's `Float.toString` writes it.
pub(crate) fn write_float(out: &mut Vec<u8>, v: f32) {
    if !v.is_finite() {
        write_non_finite(out, v.is_nan(), v > 0.0);
        return;
    }
    write_java(out, &format!("{v:e}"), v == 0.0 && v.is_sign_negative());
}

fn write_non_finite(out: &mut Vec<u8>, nan: bool, positive: bool) {
    out.extend_from_slice(match (nan, positive) {
        (true, _) => b"\"NaN\"",
        (false, true) => b"\"Infinity\"",
        (false, false) => b"\"-Infinity\"",
    });
}

/// `sci` is Rust's shortest `{:e}` form (`-1.2345e6`, `1e-7`, `0e0`).
fn write_java(out: &mut Vec<u8>, sci: &str, negative_zero: bool) {
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (negative_zero, mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    if negative {
        out.push(b'-');
    }
    if digits == "0" {
        out.extend_from_slice(b"0.0");
        return;
    }
    // The value is 0.d1d2d3… × 10^(exp + 1).
    if (-3..7).contains(&exp) {
        if exp < 0 {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-exp - 1) as usize));
            out.extend_from_slice(digits.as_bytes());
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.extend_from_slice(digits.as_bytes());
                out.extend(std::iter::repeat_n(b'0', int_len - digits.len()));
                out.extend_from_slice(b".0");
            } else {
                let (int, frac) = digits.split_at(int_len);
                out.extend_from_slice(int.as_bytes());
                out.push(b'.');
                out.extend_from_slice(frac.as_bytes());
            }
        }
    } else {
        let (first, rest) = digits.split_at(1);
        out.extend_from_slice(first.as_bytes());
        out.push(b'.');
        out.extend_from_slice(if rest.is_empty() { "0" } else { rest }.as_bytes());
        let _ = write!(out, "E{exp}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(v: f64) -> String {
        let mut out = Vec::new();
        write_double(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    fn f(v: f32) -> String {
        let mut out = Vec::new();
        write_float(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn doubles_as_java_writes_them() {
        for (v, java) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (1234.11, "1234.11"),
            (-0.25, "-0.25"),
            (0.001, "0.001"),
            (0.0001, "1.0E-4"),
            (1.0e7, "1.0E7"),
            (9_999_999.0, "9999999.0"),
            (123_456_789.5, "1.234567895E8"),
            (1.0e-300, "1.0E-300"),
            (f64::MAX, "1.7976931348623157E308"),
            (100.0, "100.0"),
            (0.1, "0.1"),
        ] {
            assert_eq!(d(v), java, "{v}");
        }
        assert_eq!(d(f64::NAN), "\"NaN\"");
        assert_eq!(d(f64::NEG_INFINITY), "\"-Infinity\"");
    }

    #[test]
    fn floats_as_java_writes_them() {
        assert_eq!(f(1.5), "1.5");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(3.4028235e38), "3.4028235E38");
        assert_eq!(f(f32::INFINITY), "\"Infinity\"");
    }
}
