//! `point` as Debezium writes it: `io.debezium.data.geometry.Point`,
//! `{"x":1.5,"y":2.0,"wkb":"<base64>","srid":null}` where `wkb` is the
//! point's little-endian Well-Known Binary.

use super::super::json::write_base64;
use super::java;

/// Parses `(x,y)`, the server's text of a `point`.
pub(crate) fn parse_text(text: &str) -> Option<(f64, f64)> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    let (x, y) = inner.split_once(',')?;
    Some((parse_float(x)?, parse_float(y)?))
}

fn parse_float(s: &str) -> Option<f64> {
    match s.trim() {
        "NaN" => Some(f64::NAN),
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        s => s.parse().ok(),
    }
}

/// Parses the binary send format: two big-endian `float8`.
pub(crate) fn parse_binary(bytes: &[u8]) -> Option<(f64, f64)> {
    let (x, rest) = bytes.split_first_chunk::<8>()?;
    let y: [u8; 8] = rest.try_into().ok()?;
    Some((f64::from_be_bytes(*x), f64::from_be_bytes(y)))
}

/// Writes the `Point` struct.
pub(crate) fn write_point(out: &mut Vec<u8>, x: f64, y: f64) {
    let mut wkb = Vec::with_capacity(21);
    wkb.push(1u8); // little-endian
    wkb.extend_from_slice(&1u32.to_le_bytes()); // Point
    wkb.extend_from_slice(&x.to_le_bytes());
    wkb.extend_from_slice(&y.to_le_bytes());
    out.extend_from_slice(b"{\"x\":");
    java::write_double(out, x);
    out.extend_from_slice(b",\"y\":");
    java::write_double(out, y);
    out.extend_from_slice(b",\"wkb\":");
    write_base64(out, &wkb);
    out.extend_from_slice(b",\"srid\":null}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_struct() {
        assert_eq!(parse_text("(1.5,2)"), Some((1.5, 2.0)));
        assert_eq!(parse_text(" (-1e+20 , 0.25) "), Some((-1e20, 0.25)));
        assert_eq!(
            parse_binary(&[&1.5f64.to_be_bytes()[..], &2f64.to_be_bytes()].concat()),
            Some((1.5, 2.0))
        );
        for bad in ["", "(1)", "1,2", "(a,b)", "(1,2"] {
            assert_eq!(parse_text(bad), None, "{bad}");
        }
        let mut out = Vec::new();
        write_point(&mut out, 1.5, 2.0);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"x":1.5,"y":2.0,"wkb":"AQEAAAAAAAAAAAD4PwAAAAAAAABA","srid":null}"#
        );
    }
}
