//! A bounds-checked big-endian cursor over a borrowed buffer.

use crate::error::DecodeError;

/// Reads fields front to back; every read is checked and reports the offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// The current offset from the start of the buffer.
    #[inline]
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    #[inline]
    fn end(&self, n: usize) -> DecodeError {
        DecodeError::UnexpectedEnd {
            offset: self.pos,
            needed: n - self.remaining(),
        }
    }

    /// The next `n` bytes.
    #[inline]
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        match self.buf.get(self.pos..).and_then(|rest| rest.get(..n)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(self.end(n)),
        }
    }

    #[inline]
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.bytes(N)?;
        <[u8; N]>::try_from(s).map_err(|_| DecodeError::UnexpectedEnd {
            offset: self.pos,
            needed: N,
        })
    }

    #[inline]
    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        match self.buf.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(self.end(1)),
        }
    }

    #[inline]
    pub(crate) fn i16(&mut self) -> Result<i16, DecodeError> {
        self.array().map(i16::from_be_bytes)
    }

    #[inline]
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_be_bytes)
    }

    #[inline]
    pub(crate) fn i32(&mut self) -> Result<i32, DecodeError> {
        self.array().map(i32::from_be_bytes)
    }

    #[inline]
    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_be_bytes)
    }

    #[inline]
    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        self.array().map(i64::from_be_bytes)
    }

    /// A non-negative Int16 count.
    #[inline]
    pub(crate) fn count16(&mut self) -> Result<u16, DecodeError> {
        let offset = self.pos;
        let v = self.i16()?;
        u16::try_from(v).map_err(|_| DecodeError::NegativeLength {
            value: i64::from(v),
            offset,
        })
    }

    /// A non-negative Int32 length or count.
    #[inline]
    pub(crate) fn len32(&mut self) -> Result<usize, DecodeError> {
        let offset = self.pos;
        let v = self.i32()?;
        usize::try_from(v).map_err(|_| DecodeError::NegativeLength {
            value: i64::from(v),
            offset,
        })
    }

    /// A NUL-terminated UTF-8 string (the terminator is consumed, not returned).
    #[inline]
    pub(crate) fn cstr(&mut self) -> Result<&'a str, DecodeError> {
        let offset = self.pos;
        let rest = self.buf.get(offset..).unwrap_or_default();
        let Some(nul) = rest.iter().position(|&b| b == 0) else {
            // The terminator would be past the end.
            return Err(DecodeError::UnexpectedEnd { offset, needed: 1 });
        };
        let raw = rest.get(..nul).unwrap_or_default();
        let s = std::str::from_utf8(raw).map_err(|_| DecodeError::InvalidUtf8 { offset })?;
        self.pos = offset + nul + 1;
        Ok(s)
    }

    /// The bytes from `start` to the current position.
    #[inline]
    pub(crate) fn since(&self, start: usize) -> &'a [u8] {
        self.buf.get(start..self.pos).unwrap_or_default()
    }

    /// Skips the `count` columns of a pgoutput TupleData (after its Int16
    /// column count), validating each column kind and length.
    #[inline(always)]
    pub(crate) fn skip_tuple_columns(&mut self, count: u16) -> Result<(), DecodeError> {
        let buf = self.buf;
        let mut pos = self.pos;
        for _ in 0..count {
            let Some(&kind) = buf.get(pos) else {
                return Err(DecodeError::UnexpectedEnd {
                    offset: pos,
                    needed: 1,
                });
            };
            match kind {
                b'n' | b'u' => pos += 1,
                b't' | b'b' => {
                    let len_at = pos + 1;
                    let Some(len) = buf
                        .get(len_at..)
                        .and_then(|rest| rest.first_chunk::<4>())
                        .map(|b| i32::from_be_bytes(*b))
                    else {
                        return Err(DecodeError::UnexpectedEnd {
                            offset: len_at,
                            needed: len_at + 4 - buf.len(),
                        });
                    };
                    let Ok(len) = usize::try_from(len) else {
                        return Err(DecodeError::NegativeLength {
                            value: i64::from(len),
                            offset: len_at,
                        });
                    };
                    let data_at = len_at + 4;
                    let end = data_at.saturating_add(len);
                    if end > buf.len() {
                        return Err(DecodeError::UnexpectedEnd {
                            offset: data_at,
                            needed: end - buf.len(),
                        });
                    }
                    pos = end;
                }
                kind => return Err(DecodeError::InvalidColumnKind { kind, offset: pos }),
            }
        }
        self.pos = pos;
        Ok(())
    }

    /// Everything not read yet.
    #[inline]
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        self.pos = self.buf.len();
        rest
    }

    /// Fails with [`DecodeError::TrailingBytes`] unless everything was read.
    #[inline]
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            remaining => Err(DecodeError::TrailingBytes {
                offset: self.pos,
                remaining,
            }),
        }
    }
}
