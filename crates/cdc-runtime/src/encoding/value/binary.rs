//! `bytea` per `binary.handling.mode`: `bytes` (the JSON converter writes
//! base64), `base64`, `base64-url-safe` (Java's URL encoder, with padding)
//! and `hex` (lower-case).

use super::super::json::write_base64;
use crate::encoding::BinaryHandlingMode;

/// Writes `bytes` as a JSON string in `mode`'s encoding.
pub(crate) fn write_binary(out: &mut Vec<u8>, bytes: &[u8], mode: BinaryHandlingMode) {
    match mode {
        BinaryHandlingMode::Bytes | BinaryHandlingMode::Base64 => write_base64(out, bytes),
        BinaryHandlingMode::Base64UrlSafe => {
            let start = out.len();
            write_base64(out, bytes);
            for b in out.get_mut(start..).unwrap_or_default() {
                match *b {
                    b'+' => *b = b'-',
                    b'/' => *b = b'_',
                    _ => {}
                }
            }
        }
        BinaryHandlingMode::Hex => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.reserve(bytes.len() * 2 + 2);
            out.push(b'"');
            for b in bytes {
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
            out.push(b'"');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode() {
        let bytes = [0xfb, 0xff, 0x00, 0x68, 0x69];
        let w = |mode| {
            let mut out = Vec::new();
            write_binary(&mut out, &bytes, mode);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(w(BinaryHandlingMode::Bytes), "\"+/8AaGk=\"");
        assert_eq!(w(BinaryHandlingMode::Base64), "\"+/8AaGk=\"");
        assert_eq!(w(BinaryHandlingMode::Base64UrlSafe), "\"-_8AaGk=\"");
        assert_eq!(w(BinaryHandlingMode::Hex), "\"fbff006869\"");
    }
}
