//! Parsing the messages of `COPY ... TO STDOUT (FORMAT binary)` (the
//! initial snapshot reads tables of common types this way: no text to
//! split, unescape or parse into numbers, on either side).
//!
//! ```
//! use cdc_core::copy_binary::{CopyBinaryReader, SIGNATURE};
//!
//! // The header, then one row of two fields: 42::int4 and NULL.
//! let mut msg = SIGNATURE.to_vec();
//! msg.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]); // flags, header extension length
//! msg.extend_from_slice(&[0, 2, 0, 0, 0, 4, 0, 0, 0, 42, 0xff, 0xff, 0xff, 0xff]);
//! let mut reader = CopyBinaryReader::new();
//! let row = reader.parse(&msg, 2)?.expect("a row");
//! let fields: Vec<_> = row.fields().collect();
//! assert_eq!(fields, [Some(&[0, 0, 0, 42][..]), None]);
//! // The trailer: no row, and the copy is over.
//! assert!(reader.parse(&[0xff, 0xff], 2)?.is_none());
//! assert!(reader.is_finished());
//! # Ok::<(), cdc_core::copy_binary::CopyBinaryError>(())
//! ```
//!
//! The server sends one CopyData message per row; the file header (the
//! 11-byte signature, a flags word and a header extension) comes in front
//! of the first row (or of the trailer, for no rows), and the trailer, a
//! field count of -1, in a message of its own. A row is a 16-bit field count
//! and, per field, a 32-bit length (-1 for `NULL`) and that many bytes in
//! the type's send format. Fields are borrowed from the message.

use core::num::TryFromIntError;

/// The signature that starts a binary COPY stream.
pub const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// Flags bit 16: every row carries an OID field (`WITH OIDS`, gone since
/// PostgreSQL 12); not supported.
const FLAG_OIDS: u32 = 1 << 16;

/// A binary COPY message that is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CopyBinaryError {
    /// The first message does not start with [`SIGNATURE`].
    #[error("the binary COPY stream does not start with the PGCOPY signature")]
    BadSignature,
    /// The header sets a critical flag this parser does not know.
    #[error("the binary COPY header has unsupported flags {0:#x}")]
    UnsupportedFlags(u32),
    /// The message ended inside a header, count, length or field.
    #[error("a binary COPY message ends early: {needed} more bytes needed")]
    UnexpectedEnd {
        /// Bytes missing at the point the message ended.
        needed: usize,
    },
    /// The row had another number of fields than the query's columns.
    #[error("a binary COPY row has {got} fields, expected {expected}")]
    FieldCount {
        /// Columns of the query.
        expected: usize,
        /// Fields in the row.
        got: i16,
    },
    /// A field length below -1.
    #[error("a binary COPY field has length {0}")]
    BadLength(i32),
    /// Bytes after a row or the trailer in the same message.
    #[error("{0} bytes after the end of a binary COPY row")]
    TrailingBytes(usize),
    /// A message after the trailer.
    #[error("a binary COPY message after the trailer")]
    AfterTrailer,
}

/// Parses the messages of one binary COPY, in order.
#[derive(Debug, Clone, Default)]
pub struct CopyBinaryReader {
    header_seen: bool,
    finished: bool,
}

impl CopyBinaryReader {
    /// A reader expecting the header.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the trailer has been read.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Parses one CopyData message: a row of `expected` fields, or `None`
    /// for the trailer. The whole message is checked here, so the row's
    /// fields iterate without errors.
    pub fn parse<'a>(
        &mut self,
        msg: &'a [u8],
        expected: usize,
    ) -> Result<Option<BinaryRow<'a>>, CopyBinaryError> {
        if self.finished {
            return Err(CopyBinaryError::AfterTrailer);
        }
        let mut buf = Buf(msg);
        if !self.header_seen {
            let signature = buf.take(SIGNATURE.len())?;
            if signature != SIGNATURE {
                return Err(CopyBinaryError::BadSignature);
            }
            let flags = u32::from_be_bytes(buf.array()?);
            // Bits 16-31 are critical: an unknown one must not be ignored.
            if flags & (0xffff_0000 | FLAG_OIDS) != 0 {
                return Err(CopyBinaryError::UnsupportedFlags(flags));
            }
            let extension = u32::from_be_bytes(buf.array()?) as usize;
            buf.take(extension)?;
            self.header_seen = true;
        }
        let count = i16::from_be_bytes(buf.array()?);
        if count == -1 {
            if !buf.0.is_empty() {
                return Err(CopyBinaryError::TrailingBytes(buf.0.len()));
            }
            self.finished = true;
            return Ok(None);
        }
        if usize::try_from(count).ok() != Some(expected) {
            return Err(CopyBinaryError::FieldCount {
                expected,
                got: count,
            });
        }
        let fields = buf.0;
        for _ in 0..expected {
            let len = i32::from_be_bytes(buf.array()?);
            match len {
                -1 => {}
                n if n < -1 => return Err(CopyBinaryError::BadLength(n)),
                n => {
                    buf.take(n as usize)?;
                }
            }
        }
        if !buf.0.is_empty() {
            return Err(CopyBinaryError::TrailingBytes(buf.0.len()));
        }
        Ok(Some(BinaryRow {
            fields,
            count: expected,
        }))
    }
}

/// One row of a binary COPY, checked by [`CopyBinaryReader::parse`].
#[derive(Debug, Clone, Copy)]
pub struct BinaryRow<'a> {
    fields: &'a [u8],
    count: usize,
}

impl<'a> BinaryRow<'a> {
    /// Number of fields.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the row has no fields.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The fields in order, `None` for `NULL`.
    pub fn fields(&self) -> impl Iterator<Item = Option<&'a [u8]>> + 'a {
        let mut buf = Buf(self.fields);
        (0..self.count).map_while(move |_| {
            let len = i32::from_be_bytes(buf.array().ok()?);
            // Checked by `parse`: -1 or a length that fits.
            Some(usize::try_from(len).ok().and_then(|n| buf.take(n).ok()))
        })
    }
}

/// The unread rest of a message.
struct Buf<'a>(&'a [u8]);

impl<'a> Buf<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CopyBinaryError> {
        if self.0.len() < n {
            return Err(CopyBinaryError::UnexpectedEnd {
                needed: n - self.0.len(),
            });
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CopyBinaryError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
}

/// Encodes one row as the server does (for tests and fuzzing); with
/// `header`, the file header goes in front.
///
/// # Errors
/// More than `i16::MAX` fields, or a field longer than `i32::MAX` bytes,
/// which the format cannot express; `out` is then left as it was.
pub fn encode_row(
    header: bool,
    fields: &[Option<&[u8]>],
    out: &mut Vec<u8>,
) -> Result<(), TryFromIntError> {
    let start = out.len();
    let written = write_row(header, fields, out);
    if written.is_err() {
        out.truncate(start);
    }
    written
}

fn write_row(
    header: bool,
    fields: &[Option<&[u8]>],
    out: &mut Vec<u8>,
) -> Result<(), TryFromIntError> {
    if header {
        out.extend_from_slice(SIGNATURE);
        out.extend_from_slice(&[0; 8]);
    }
    out.extend_from_slice(&i16::try_from(fields.len())?.to_be_bytes());
    for f in fields {
        match f {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(b) => {
                out.extend_from_slice(&i32::try_from(b.len())?.to_be_bytes());
                out.extend_from_slice(b);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(header: bool, fields: &[Option<&[u8]>]) -> Vec<u8> {
        let mut v = Vec::new();
        encode_row(header, fields, &mut v).unwrap();
        v
    }

    fn fields<'a>(
        r: &mut CopyBinaryReader,
        msg: &'a [u8],
        n: usize,
    ) -> Option<Vec<Option<&'a [u8]>>> {
        r.parse(msg, n).unwrap().map(|row| row.fields().collect())
    }

    #[test]
    fn rows_the_format_cannot_express_are_refused_and_write_nothing() {
        let mut out = b"kept".to_vec();
        let too_many = vec![None; 32_768];
        assert!(encode_row(true, &too_many, &mut out).is_err());
        assert_eq!(out, b"kept");
        encode_row(false, &too_many[1..], &mut out).unwrap();
        assert_eq!(&out[4..6], &i16::MAX.to_be_bytes());
    }

    #[test]
    fn header_rows_and_trailer() {
        let mut r = CopyBinaryReader::new();
        let first = row(true, &[Some(b"ab"), None, Some(b"")]);
        assert_eq!(
            fields(&mut r, &first, 3),
            Some(vec![Some(&b"ab"[..]), None, Some(&b""[..])])
        );
        let second = row(false, &[None, Some(b"x"), None]);
        assert_eq!(
            fields(&mut r, &second, 3),
            Some(vec![None, Some(&b"x"[..]), None])
        );
        assert_eq!(fields(&mut r, &[0xff, 0xff], 3), None);
        assert!(r.is_finished());
        assert_eq!(
            r.parse(&second, 3).map(|r| r.is_some()),
            Err(CopyBinaryError::AfterTrailer)
        );
    }

    #[test]
    fn an_empty_result_is_header_and_trailer_in_one_message() {
        let mut msg = SIGNATURE.to_vec();
        msg.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 2, 9, 9, 0xff, 0xff]);
        let mut r = CopyBinaryReader::new();
        assert_eq!(fields(&mut r, &msg, 1), None);
        assert!(r.is_finished());
    }

    #[test]
    fn malformed_messages_are_typed_errors() {
        let parse = |msg: &[u8]| CopyBinaryReader::new().parse(msg, 1).map(|r| r.is_some());
        assert_eq!(
            parse(b"PGCOPY\n\xff\r\n\x01"),
            Err(CopyBinaryError::BadSignature)
        );
        let mut oids = SIGNATURE.to_vec();
        oids.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            parse(&oids),
            Err(CopyBinaryError::UnsupportedFlags(FLAG_OIDS))
        );
        let good = row(true, &[Some(b"abc")]);
        assert_eq!(parse(&good), Ok(true));
        for cut in 0..good.len() {
            assert!(
                matches!(
                    parse(&good[..cut]),
                    Err(CopyBinaryError::UnexpectedEnd { .. })
                ),
                "cut at {cut}"
            );
        }
        let mut long = good.clone();
        long.push(0);
        assert_eq!(parse(&long), Err(CopyBinaryError::TrailingBytes(1)));
        let mut trailer = row(true, &[]);
        trailer.truncate(SIGNATURE.len() + 8);
        trailer.extend_from_slice(&[0xff, 0xff, 0]);
        assert_eq!(parse(&trailer), Err(CopyBinaryError::TrailingBytes(1)));
        assert_eq!(
            parse(&row(true, &[None, None])),
            Err(CopyBinaryError::FieldCount {
                expected: 1,
                got: 2
            })
        );
        let mut bad = row(true, &[]);
        bad[SIGNATURE.len() + 9] = 1; // one field...
        bad.extend_from_slice(&(-2i32).to_be_bytes()); // ...of length -2
        assert_eq!(parse(&bad), Err(CopyBinaryError::BadLength(-2)));
    }
}
