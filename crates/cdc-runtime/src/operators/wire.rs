//! The little binary format of built-in operator states: little-endian
//! integers and length-prefixed UTF-8 strings. States come back from
//! checkpoints, so reading never trusts a length.

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
    fn an_impossible_count_is_refused() {
        let mut w = Writer::default();
        w.u64(u64::MAX);
        let bytes = w.finish();
        assert_eq!(Reader::new(&bytes).count(1), Err(Malformed));
    }
}
