//! `bit(n)` and `varbit(n)` as Debezium writes them: `bit(1)` and
//! `varbit(1)` as a boolean; longer ones as `io.debezium.data.Bits`, the
//! bytes of Java's `BitSet.toByteArray()` (base64 in JSON, whatever
//! `binary.handling.mode` says): the bit string read as a binary number
//! (its last character the lowest bit), little-endian, without high zero
//! bytes (`B'101'` is `[0x05]`, `B'0000000100000010'` is `[0x02, 0x01]`,
//! all zeros is no bytes at all).
//!
//! **Deviation:** a `varbit` without a length, which Debezium reads as a
//! number that overflows past 31 bits, is written as `Bits`.

use super::super::json::write_base64;

/// Whether a `bit`/`varbit` column of type modifier `typmod` is a boolean.
pub(crate) fn is_boolean(typmod: i32) -> bool {
    typmod == 1
}

/// Writes a bit string (`'0'`/`'1'` characters) of a column with type
/// modifier `typmod`; `false` if `text` is not a bit string.
pub(crate) fn write_bits_text(out: &mut Vec<u8>, text: &[u8], typmod: i32) -> bool {
    if !text.iter().all(|b| *b == b'0' || *b == b'1') {
        return false;
    }
    if is_boolean(typmod) {
        let set = text.contains(&b'1');
        out.extend_from_slice(if set { b"true" } else { b"false" });
        return true;
    }
    write_base64(out, &bitset_bytes(text.iter().map(|b| *b == b'1')));
    true
}

/// Writes `bit`/`varbit` in the binary send format (an `int32` bit count,
/// then the bits, most significant first); `false` if malformed.
pub(crate) fn write_bits_binary(out: &mut Vec<u8>, bytes: &[u8], typmod: i32) -> bool {
    let Some((len, data)) = bytes.split_first_chunk::<4>() else {
        return false;
    };
    let Ok(len) = usize::try_from(i32::from_be_bytes(*len)) else {
        return false;
    };
    if data.len() != len.div_ceil(8) {
        return false;
    }
    let bits = (0..len).map(|i| data.get(i / 8).is_some_and(|b| b & (0x80 >> (i % 8)) != 0));
    if is_boolean(typmod) {
        let set = bits.clone().any(|b| b);
        out.extend_from_slice(if set { b"true" } else { b"false" });
        return true;
    }
    write_base64(out, &bitset_bytes(bits));
    true
}

/// `BitSet.toByteArray()` of the number the bits (first = highest) spell.
fn bitset_bytes(bits: impl DoubleEndedIterator<Item = bool>) -> Vec<u8> {
    let mut bytes = Vec::new();
    // From the last bit (bit 0 of the BitSet) upwards.
    for (i, set) in bits.rev().enumerate() {
        if i % 8 == 0 {
            bytes.push(0u8);
        }
        if set {
            if let Some(b) = bytes.last_mut() {
                *b |= 1 << (i % 8);
            }
        }
    }
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bits: &str, typmod: i32) -> String {
        let mut out = Vec::new();
        assert!(write_bits_text(&mut out, bits.as_bytes(), typmod));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn bit_strings_as_debezium_bits() {
        assert_eq!(text("1", 1), "true");
        assert_eq!(text("0", 1), "false");
        // 0b101 = 5.
        assert_eq!(text("101", 3), "\"BQ==\"");
        // 0x0102: little-endian [0x02, 0x01].
        assert_eq!(text("0000000100000010", 16), "\"AgE=\"");
        assert_eq!(text("00000000", 8), "\"\"");
        // High zero bytes dropped: 0x00ff -> [0xff].
        assert_eq!(text("0000000011111111", 16), "\"/w==\"");
        assert_eq!(text("101", -1), "\"BQ==\"");
        let mut out = Vec::new();
        assert!(!write_bits_text(&mut out, b"10x", 3));
    }

    #[test]
    fn binary_form_matches_text_form() {
        // 16 bits 0000000100000010.
        let mut out = Vec::new();
        assert!(write_bits_binary(&mut out, &[0, 0, 0, 16, 0x01, 0x02], 16));
        assert_eq!(out, b"\"AgE=\"");
        // 3 bits 101, padded: 0b1010_0000.
        let mut out = Vec::new();
        assert!(write_bits_binary(&mut out, &[0, 0, 0, 3, 0xa0], 3));
        assert_eq!(out, b"\"BQ==\"");
        let mut out = Vec::new();
        assert!(write_bits_binary(&mut out, &[0, 0, 0, 1, 0x80], 1));
        assert_eq!(out, b"true");
        for bad in [
            &[0u8, 0, 0][..],
            &[0, 0, 0, 9, 0],
            &[0xff, 0xff, 0xff, 0xff],
        ] {
            assert!(!write_bits_binary(&mut Vec::new(), bad, 9));
        }
    }
}
