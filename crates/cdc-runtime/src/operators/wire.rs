//! The little binary format of built-in operator states: little-endian
//! integers, LEB128 variable-length integers, and length-prefixed UTF-8
//! strings and byte strings. States come back from checkpoints, so reading
//! never trusts a length.

use bytes::{BufMut, Bytes, BytesMut};

/// Appends fields to a state.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    buf: BytesMut,
}

impl Writer {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Writer {
            buf: BytesMut::with_capacity(n),
        }
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.buf.put_u64_le(v);
    }

    pub(crate) fn i64(&mut self, v: i64) {
        self.buf.put_i64_le(v);
    }

    pub(crate) fn i128(&mut self, v: i128) {
        self.buf.put_i128_le(v);
    }

    pub(crate) fn str(&mut self, s: &str) {
        self.buf.put_u32_le(s.len() as u32);
        self.buf.put_slice(s.as_bytes());
    }

    /// A LEB128 integer (1 byte below 128).
    pub(crate) fn uvarint(&mut self, v: u128) {
        put_uvarint(&mut self.buf, v);
    }

    /// Bytes prefixed with their length as a [`uvarint`](Self::uvarint).
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        put_uvarint(&mut self.buf, b.len() as u128);
        self.buf.put_slice(b);
    }

    pub(crate) fn finish(self) -> Bytes {
        self.buf.freeze()
    }
}

/// Reads fields of a state; every read fails cleanly on short input.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

/// The state ended early or held invalid text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.buf.len() < n {
            return Err(Malformed);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        self.take(N)?.try_into().map_err(|_| Malformed)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, Malformed> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    pub(crate) fn i128(&mut self) -> Result<i128, Malformed> {
        Ok(i128::from_le_bytes(self.array()?))
    }

    pub(crate) fn str(&mut self) -> Result<&'a str, Malformed> {
        let len = u32::from_le_bytes(self.array()?) as usize;
        std::str::from_utf8(self.take(len)?).map_err(|_| Malformed)
    }

    /// A LEB128 integer written by [`Writer::uvarint`]; refuses overlong
    /// and non-canonical encodings.
    pub(crate) fn uvarint(&mut self) -> Result<u128, Malformed> {
        take_uvarint(&mut self.buf)
    }

    /// Bytes written by [`Writer::bytes`].
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let len = usize::try_from(self.uvarint()?).map_err(|_| Malformed)?;
        self.take(len)
    }

    /// A count of items that each take at least `min_item` bytes: refuses
    /// counts the remaining input cannot hold, so a corrupt count cannot
    /// make the caller reserve memory.
    pub(crate) fn count(&mut self, min_item: usize) -> Result<usize, Malformed> {
        let n = usize::try_from(self.u64()?).map_err(|_| Malformed)?;
        if n.saturating_mul(min_item.max(1)) > self.buf.len() {
            return Err(Malformed);
        }
        Ok(n)
    }

    pub(crate) fn finish(self) -> Result<(), Malformed> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(Malformed)
        }
    }
}

/// Appends `v` in LEB128: seven bits a byte, low bits first, the high bit
/// set on every byte but the last.
pub(crate) fn put_uvarint(buf: &mut impl BufMut, mut v: u128) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// Reads a LEB128 integer from the front of `buf` and advances it. Only the
/// encoding [`put_uvarint`] writes is accepted (no trailing zero groups, no
/// bits past 128), so equal values always have equal bytes.
pub(crate) fn take_uvarint(buf: &mut &[u8]) -> Result<u128, Malformed> {
    let mut v: u128 = 0;
    for (i, &b) in buf.iter().enumerate() {
        let shift = 7 * i as u32;
        let bits = u128::from(b & 0x7f);
        if shift >= 128 || bits.leading_zeros() < shift {
            return Err(Malformed);
        }
        v |= bits << shift;
        if b & 0x80 == 0 {
            if b == 0 && i > 0 {
                return Err(Malformed);
            }
            *buf = &buf[i + 1..];
            return Ok(v);
        }
    }
    Err(Malformed)
}

/// Maps signed to unsigned so small magnitudes get short varints.
pub(crate) fn zigzag(v: i128) -> u128 {
    ((v << 1) ^ (v >> 127)) as u128
}

/// The inverse of [`zigzag`].
pub(crate) fn unzigzag(v: u128) -> i128 {
    ((v >> 1) as i128) ^ -((v & 1) as i128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut w = Writer::default();
        w.u64(2);
        w.str("public.t");
        w.i64(-5);
        w.i128(1 << 100);
        let bytes = w.finish();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.count(4), Ok(2));
        assert_eq!(r.str(), Ok("public.t"));
        assert_eq!(r.i64(), Ok(-5));
        assert_eq!(r.i128(), Ok(1 << 100));
        assert_eq!(r.finish(), Ok(()));
        for cut in 0..bytes.len() {
            let mut r = Reader::new(&bytes[..cut]);
            let all = (|| {
                r.count(4)?;
                r.str()?;
                r.i64()?;
                r.i128()
            })();
            assert_eq!(all, Err(Malformed), "cut at {cut}");
        }
    }

    #[test]
    fn varints_round_trip_and_only_canonical_forms_are_read() {
        for v in [0, 1, 127, 128, 300, u64::MAX as u128, u128::MAX] {
            let mut w = Writer::default();
            w.uvarint(v);
            w.bytes(b"xy");
            let bytes = w.finish();
            let mut r = Reader::new(&bytes);
            assert_eq!(r.uvarint(), Ok(v));
            assert_eq!(r.bytes(), Ok(&b"xy"[..]));
            assert_eq!(r.finish(), Ok(()));
            for cut in 0..bytes.len() - 3 {
                assert_eq!(Reader::new(&bytes[..cut]).uvarint(), Err(Malformed));
            }
        }
        for i in [0, 1, -1, 63, -64, 64, i128::MAX, i128::MIN] {
            assert_eq!(unzigzag(zigzag(i)), i);
        }
        assert!(zigzag(-1) < 2 && zigzag(1) < 3);
        // u128::MAX is 18 full groups and a last byte of 2 bits; a third
        // bit, a 20th byte, or a trailing zero group (0 in two bytes) is
        // refused.
        let max = [&[0xff; 18][..], &[0x03]].concat();
        assert_eq!(take_uvarint(&mut &max[..]), Ok(u128::MAX));
        let past = [&[0xff; 18][..], &[0x07]].concat();
        let long = [&[0x80; 19][..], &[0x01]].concat();
        for bad in [
            &past[..],
            &long[..],
            &[0x80, 0x00][..],
            &[0x81, 0x80, 0x00][..],
        ] {
            assert_eq!(take_uvarint(&mut &bad[..]), Err(Malformed), "{bad:?}");
        }
    }

    #[test]
    fn an_impossible_count_is_refused() {
        let mut w = Writer::default();
        w.u64(u64::MAX);
        let bytes = w.finish();
        assert_eq!(Reader::new(&bytes).count(1), Err(Malformed));
    }
}
