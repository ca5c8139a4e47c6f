//! Regression tests for bugs found by the fuzz targets (`fuzz/`) and by the
//! captured-fixture test (`fixtures_decode.rs`), each with the input that
//! exposed it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cdc_core::{decode_binary, decode_text, types, Value};

/// `timetz` offsets go up to 15:59:59 either way (PostgreSQL's
/// `TZDISP_LIMIT` is 16 hours, exclusive). A PostgreSQL 15 server printed
/// `24:00:00-15:59` and sent zone 57540 (seconds west) in binary for the
/// fixture row `'24:00:00-15:59'::timetz`; both were rejected as out of range.
#[test]
fn timetz_offset_of_15_59_is_valid() {
    let Value::TimeTz(t) = decode_text(types::TIMETZ, b"24:00:00-15:59").unwrap() else {
        panic!("not a timetz");
    };
    assert_eq!(t.utc_offset_seconds(), -(15 * 3600 + 59 * 60));

    // The bytes from inserts-all-types-binary-v1.bin: 24:00:00 in µs, zone 57540 west.
    let mut raw = 86_400_000_000i64.to_be_bytes().to_vec();
    raw.extend_from_slice(&57_540i32.to_be_bytes());
    assert_eq!(
        decode_binary(types::TIMETZ, &raw).unwrap(),
        Value::TimeTz(t)
    );

    // The last valid offset, and the first invalid one, both ways.
    let Value::TimeTz(t) = decode_text(types::TIMETZ, b"12:00:00+15:59:59").unwrap() else {
        panic!("not a timetz");
    };
    assert_eq!(t.utc_offset_seconds(), 57_599);
    assert!(decode_text(types::TIMETZ, b"12:00:00+16:00").is_err());
    assert!(decode_text(types::TIMETZ, b"12:00:00-16:00").is_err());
    let mut raw = 0i64.to_be_bytes().to_vec();
    raw.extend_from_slice(&57_600i32.to_be_bytes());
    assert!(decode_binary(types::TIMETZ, &raw).is_err());
    raw[8..].copy_from_slice(&(-57_599i32).to_be_bytes());
    assert!(decode_binary(types::TIMETZ, &raw).is_ok());
}
