//! Low-level JSON writing into a `Vec<u8>`: strings, numbers, base64.

use std::fmt;
use std::io::Write as _;

/// Appends `s` as a JSON string (quoted, escaped).
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    write_escaped(out, s);
    out.push(b'"');
}

/// Which bytes a JSON string cannot hold as they are: `"`, `\` and the
/// control characters below 0x20.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Appends `s` escaped for a JSON string, without quotes. Runs of bytes that
/// need no escaping (nearly all text) are copied whole.
pub(crate) fn write_escaped(out: &mut Vec<u8>, s: &str) {
    write_escaped_utf8(out, s.as_bytes());
}

/// [`write_escaped`] of text the caller knows is UTF-8 (a column that
/// decoded as text): the same bytes. Only ASCII bytes are ever escaped, so a
/// multi-byte character is copied whole.
pub(crate) fn write_escaped_utf8(out: &mut Vec<u8>, s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut rest = s;
    while let Some(i) = find_escape(rest) {
        let (plain, tail) = rest.split_at(i);
        out.extend_from_slice(plain);
        let Some((&b, tail)) = tail.split_first() else {
            return;
        };
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            _ => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
        }
        rest = tail;
    }
    out.extend_from_slice(rest);
}

/// Eight copies of a byte in a `u64`.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

const LOW_BITS: u64 = splat(0x01);
const HIGH_BITS: u64 = splat(0x80);

/// Whether any of the eight bytes of `x` needs escaping (`"`, `\` or below
/// 0x20), with the high bit of the lowest such byte set (bits of bytes after
/// it may be set too: borrows only carry upwards).
///
/// `(v - 0x01…) & !v & 0x80…` is non-zero exactly when a byte of `v` is zero;
/// with `0x20…` instead of `0x01…` when a byte is below 0x20.
#[inline(always)]
fn escape_mask(x: u64) -> u64 {
    let below_space = x.wrapping_sub(splat(0x20)) & !x;
    let quote = x ^ splat(b'"');
    let quote = quote.wrapping_sub(LOW_BITS) & !quote;
    let backslash = x ^ splat(b'\\');
    let backslash = backslash.wrapping_sub(LOW_BITS) & !backslash;
    (below_space | quote | backslash) & HIGH_BITS
}

/// Bytes per step of [`find_escape`]'s wide loop.
const WIDE: usize = 64;

/// The index of the first byte of `s` that needs escaping: 64 bytes at a
/// time while that many are left, then eight at a time, then the last few
/// through the table.
///
/// The wide loop is a plain loop over a fixed-size chunk with no early
/// exit, which the compiler turns into vector compares (SSE2 on x86-64,
/// NEON on aarch64) without `unsafe`. On 960-byte strings out of cache, as
/// a batch's rows are by the time they are encoded, it scans 1.8-2.1x as
/// fast as the word loop alone (which remains for shorter strings and the
/// rest of longer ones).
#[inline]
fn find_escape(s: &[u8]) -> Option<usize> {
    let mut wide = s.chunks_exact(WIDE);
    let mut at = 0;
    for chunk in &mut wide {
        let mut any = false;
        for &b in chunk {
            // Compares, not the table: a lookup per byte would not vectorize.
            any |= (b < 0x20) | (b == b'"') | (b == b'\\');
        }
        if any {
            return find_escape_in_words(chunk).map(|i| at + i);
        }
        at += WIDE;
    }
    find_escape_in_words(wide.remainder()).map(|i| at + i)
}

/// [`find_escape`] eight bytes at a time, then the last few through the table.
#[inline]
fn find_escape_in_words(s: &[u8]) -> Option<usize> {
    let mut chunks = s.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        // Little-endian: the first byte is the lowest, whatever the host.
        let mask = escape_mask(u64::from_le_bytes(word));
        if mask != 0 {
            return Some(at + (mask.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| NEEDS_ESCAPE[usize::from(b)])
        .map(|i| at + i)
}

/// Appends the `Display` text of `v` as a JSON string. The texts this crate
/// displays (dates, addresses, LSNs) never need escaping, but they are escaped
/// anyway through a small stack buffer when they might.
pub(crate) fn write_display_str(out: &mut Vec<u8>, v: impl fmt::Display) {
    out.push(b'"');
    let start = out.len();
    let _ = write!(out, "{v}");
    if out
        .get(start..)
        .is_some_and(|t| t.iter().any(|&b| b == b'"' || b == b'\\' || b < 0x20))
    {
        let text = out.split_off(start);
        write_escaped(out, &String::from_utf8_lossy(&text));
    }
    out.push(b'"');
}

/// An integer [`write_int`] can write.
pub(crate) trait JsonInt: Copy {
    /// Appends the decimal digits (with a leading `-` if negative).
    fn write_to(self, out: &mut Vec<u8>);
}

macro_rules! json_int {
    (unsigned: $($u:ty),*; signed: $($i:ty),*) => {
        $(impl JsonInt for $u {
            fn write_to(self, out: &mut Vec<u8>) {
                write_u64(out, u64::from(self));
            }
        })*
        $(impl JsonInt for $i {
            fn write_to(self, out: &mut Vec<u8>) {
                if self < 0 {
                    out.push(b'-');
                }
                write_u64(out, u64::from(self.unsigned_abs()));
            }
        })*
    };
}

json_int!(unsigned: u8, u16, u32, u64; signed: i8, i16, i32, i64);

/// Appends `v` as a bare JSON number (integers only): the same text as its
/// `Display`, without going through `core::fmt` (this runs several times for
/// every event).
pub(crate) fn write_int(out: &mut Vec<u8>, v: impl JsonInt) {
    v.write_to(out);
}

/// `"00" "01" … "99"`: two digits at a time.
const DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Appends the decimal digits of `n` (no sign, no leading zeros).
///
/// The digits are put at the front of a 20-byte buffer, all 20 bytes are
/// appended and the rest cut off again: a copy of a fixed size is a few
/// moves, where one of the digits' own length is a call to `memmove`
/// (a twentieth of the Debezium writer's time on 1 KB rows, measured).
fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    // u64::MAX has 20 digits.
    let mut buf = [0u8; 20];
    let len = n.checked_ilog10().map_or(1, |l| l as usize + 1);
    let mut at = len;
    let mut put_pair = |at: &mut usize, pair: u64| {
        let i = (pair as usize) * 2;
        *at -= 2;
        buf[*at..*at + 2].copy_from_slice(&DIGIT_PAIRS[i..i + 2]);
    };
    while n >= 100 {
        put_pair(&mut at, n % 100);
        n /= 100;
    }
    if n >= 10 {
        put_pair(&mut at, n);
    } else {
        buf[0] = b'0' + n as u8;
    }
    let end = out.len() + len;
    out.extend_from_slice(&buf);
    out.truncate(end);
}

/// Appends an `f64` as a JSON number, or `"NaN"`, `"Infinity"`, `"-Infinity"`.
pub(crate) fn write_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v == f64::INFINITY {
        out.extend_from_slice(b"\"Infinity\"");
    } else if v == f64::NEG_INFINITY {
        out.extend_from_slice(b"\"-Infinity\"");
    } else {
        let _ = write!(out, "{v}");
    }
}

/// Appends an `f32` as a JSON number (its shortest decimal form), or a string
/// for NaN and infinities.
pub(crate) fn write_f32(out: &mut Vec<u8>, v: f32) {
    if v.is_finite() {
        let _ = write!(out, "{v}");
    } else {
        write_f64(out, f64::from(v));
    }
}

/// Appends `bytes` as a JSON string in standard base64 (with padding).
pub(crate) fn write_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    let start = out.len() + 1;
    let len = base64_len(bytes.len());
    // The quotes around the symbols come from the fill.
    out.resize(start + len + 1, b'"');
    if let Some(symbols) = out.get_mut(start..start + len) {
        base64_into(symbols, bytes);
    }
}

/// The number of base64 symbols (padding included) of `n` bytes.
pub(crate) fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Writes `bytes` in standard base64 (with padding) at the start of
/// `dst`, as far as it has room for whole groups of four symbols
/// ([`base64_len`] is enough); returns the number written.
#[inline]
pub(crate) fn base64_into(dst: &mut [u8], bytes: &[u8]) -> usize {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sym = |v: u32| ALPHABET[(v & 63) as usize];
    let mut written = 0;
    for (group, slot) in bytes.chunks(3).zip(dst.chunks_exact_mut(4)) {
        let byte = |i: usize| u32::from(group.get(i).copied().unwrap_or(0));
        let n = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        slot.copy_from_slice(&[sym(n >> 18), sym(n >> 12), sym(n >> 6), sym(n)]);
        // One byte makes two symbols, two make three; the rest is padding.
        if let Some(pad) = slot.get_mut(group.len() + 1..) {
            pad.fill(b'=');
        }
        written += 4;
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut v = Vec::new();
        f(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn escapes_like_serde_json() {
        for text in [
            "plain",
            "a\"b\\c",
            "line\nbreak\ttab\r",
            "\u{1}\u{1f}\u{7f}",
            "é€😀",
            "",
        ] {
            let ours = s(|o| write_str(o, text));
            assert_eq!(ours, serde_json::to_string(text).unwrap(), "{text:?}");
        }
    }

    #[test]
    fn finds_the_first_byte_to_escape_at_every_position() {
        let specials = [b'"', b'\\', 0x00, 0x1f, b'\n', 0x08];
        let plain = [
            b' ', b'!', b'#', b'[', b']', b'~', 0x7f, 0x80, 0xff, 0x21, 0x5b, 0x5d,
        ];
        for len in (0..40).chain([63, 64, 65, 127, 128, 130, 200]) {
            for at in 0..=len {
                for &special in &specials {
                    for &filler in &plain {
                        let mut text = vec![filler; len];
                        if at < len {
                            text[at] = special;
                            // A second one later must not hide the first.
                            if at + 3 < len {
                                text[at + 3] = b'"';
                            }
                        }
                        let want = text.iter().position(|&b| NEEDS_ESCAPE[usize::from(b)]);
                        assert_eq!(find_escape(&text), want, "{text:?}");
                    }
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn escape_scan_matches_the_table(text: Vec<u8>) {
            let want = text.iter().position(|&b| NEEDS_ESCAPE[usize::from(b)]);
            proptest::prop_assert_eq!(find_escape(&text), want);
        }

        /// Long text, mostly plain, as rows carry it: every wide chunk
        /// and its tail are scanned, with every control character.
        #[test]
        fn escape_scan_matches_the_table_on_long_text(
            mut text in proptest::collection::vec(0x20u8..=0xff, 0..400),
            specials in proptest::collection::vec((0usize..400, 0u8..0x20), 0..3),
            quote in proptest::option::of(0usize..400),
        ) {
            for (at, b) in specials {
                if let Some(slot) = text.get_mut(at) {
                    *slot = b;
                }
            }
            if let Some(slot) = quote.and_then(|at| text.get_mut(at)) {
                *slot = b'"';
            }
            let want = text.iter().position(|&b| NEEDS_ESCAPE[usize::from(b)]);
            proptest::prop_assert_eq!(find_escape(&text), want);
        }

        #[test]
        fn escapes_any_text_like_serde_json(text: String) {
            proptest::prop_assert_eq!(s(|o| write_str(o, &text)), serde_json::to_string(&text).unwrap());
        }
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (raw, enc) in cases {
            assert_eq!(s(|o| write_base64(o, raw.as_bytes())), format!("\"{enc}\""));
        }
        assert_eq!(s(|o| write_base64(o, &[0xff, 0xfe, 0x00])), "\"//4A\"");
    }

    fn int_text(v: impl JsonInt) -> String {
        s(|o| write_int(o, v))
    }

    #[test]
    fn integers_at_the_edges_match_display() {
        for v in [
            0u64,
            1,
            9,
            10,
            99,
            100,
            101,
            999,
            1000,
            10_000_000_000,
            u64::MAX,
        ] {
            assert_eq!(int_text(v), v.to_string());
            assert_eq!(
                int_text(v - u64::from(v > 0)),
                (v - u64::from(v > 0)).to_string()
            );
        }
        for v in [i64::MIN, i64::MIN + 1, -100, -10, -9, -1, 0, i64::MAX] {
            assert_eq!(int_text(v), v.to_string());
        }
        assert_eq!(int_text(i32::MIN), i32::MIN.to_string());
        assert_eq!(int_text(i16::MIN), i16::MIN.to_string());
        assert_eq!(int_text(i8::MIN), i8::MIN.to_string());
        assert_eq!(int_text(u32::MAX), u32::MAX.to_string());
        assert_eq!(int_text(u16::MAX), u16::MAX.to_string());
        assert_eq!(int_text(u8::MAX), u8::MAX.to_string());
        // Every power of ten and its neighbours (digit-count boundaries).
        let mut p = 1u64;
        while let Some(next) = p.checked_mul(10) {
            for v in [p - 1, p, p + 1, next - 1] {
                assert_eq!(int_text(v), v.to_string());
            }
            p = next;
        }
    }

    proptest::proptest! {
        #[test]
        fn unsigned_integers_match_display(v: u64, w: u32, x: u16) {
            proptest::prop_assert_eq!(int_text(v), v.to_string());
            proptest::prop_assert_eq!(int_text(w), w.to_string());
            proptest::prop_assert_eq!(int_text(x), x.to_string());
        }

        #[test]
        fn signed_integers_match_display(v: i64, w: i32, x: i16) {
            proptest::prop_assert_eq!(int_text(v), v.to_string());
            proptest::prop_assert_eq!(int_text(w), w.to_string());
            proptest::prop_assert_eq!(int_text(x), x.to_string());
        }

        #[test]
        fn integers_append_to_what_is_there(v: i64, prefix in "[a-z]{0,5}") {
            let mut out = prefix.clone().into_bytes();
            write_int(&mut out, v);
            proptest::prop_assert_eq!(String::from_utf8(out).unwrap(), format!("{prefix}{v}"));
        }
    }

    #[test]
    fn floats() {
        assert_eq!(s(|o| write_f64(o, f64::NAN)), "\"NaN\"");
        assert_eq!(s(|o| write_f64(o, f64::NEG_INFINITY)), "\"-Infinity\"");
        assert_eq!(s(|o| write_f32(o, f32::INFINITY)), "\"Infinity\"");
        assert_eq!(s(|o| write_f32(o, 0.1)), "0.1");
        let big = s(|o| write_f64(o, 1e300));
        assert_eq!(serde_json::from_str::<f64>(&big).unwrap(), 1e300);
    }
}
