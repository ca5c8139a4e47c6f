//! Parsing rows of `COPY ... TO STDOUT` in text format (the initial
//! snapshot reads tables this way).
//!
//! ```
//! use cdc_core::copy_text::parse_row;
//!
//! let mut fields = Vec::new();
//! parse_row(b"42\t\\N\ta\\tb\n", 3, &mut fields).unwrap();
//! assert_eq!(fields[0].as_deref(), Some(&b"42"[..]));
//! assert_eq!(fields[1], None);
//! assert_eq!(fields[2].as_deref(), Some(&b"a\tb"[..]));
//! ```
//!
//! The server sends one CopyData message per row: fields separated by a tab,
//! the row ended by a newline, `\N` for `NULL`, and backslash escapes for
//! backslash, tab, newline and the other control characters (`\b \f \n \r
//! \t \v \\`, and on input also octal `\NNN` and hex `\xHH`). Fields without
//! a backslash are borrowed from the message; only escaped ones are copied.

use std::borrow::Cow;

/// A COPY row that is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CopyTextError {
    /// The row had another number of fields than the query's columns.
    #[error("a COPY row has {got} fields, expected {expected}")]
    FieldCount {
        /// Columns of the query.
        expected: usize,
        /// Fields in the row.
        got: usize,
    },
    /// A backslash ended the row.
    #[error("a COPY row ends in the middle of an escape sequence")]
    TrailingBackslash,
}

/// The fields of one text-format COPY row (`None` for `NULL`), in order.
pub fn fields(row: &[u8]) -> impl Iterator<Item = Result<Option<Cow<'_, [u8]>>, CopyTextError>> {
    let row = row.strip_suffix(b"\n").unwrap_or(row);
    let row = row.strip_suffix(b"\r").unwrap_or(row);
    row.split(|&b| b == b'\t').map(unescape)
}

/// Splits one text-format COPY row into its `expected` fields (`None` for
/// `NULL`), appending them to `out` (cleared first).
pub fn parse_row<'a>(
    row: &'a [u8],
    expected: usize,
    out: &mut Vec<Option<Cow<'a, [u8]>>>,
) -> Result<(), CopyTextError> {
    out.clear();
    if expected == 0 && matches!(row, b"" | b"\n") {
        return Ok(());
    }
    for field in fields(row) {
        out.push(field?);
    }
    if out.len() != expected {
        return Err(CopyTextError::FieldCount {
            expected,
            got: out.len(),
        });
    }
    Ok(())
}

fn unescape(field: &[u8]) -> Result<Option<Cow<'_, [u8]>>, CopyTextError> {
    if field == b"\\N" {
        return Ok(None);
    }
    if !field.contains(&b'\\') {
        return Ok(Some(Cow::Borrowed(field)));
    }
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let b = field[i];
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some(&c) = field.get(i) else {
            return Err(CopyTextError::TrailingBackslash);
        };
        i += 1;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut v = u32::from(c - b'0');
                for _ in 0..2 {
                    match field.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push((v & 0xff) as u8);
            }
            b'x' if field.get(i).is_some_and(u8::is_ascii_hexdigit) => {
                let mut v = 0u32;
                for _ in 0..2 {
                    match field.get(i).and_then(|d| (*d as char).to_digit(16)) {
                        Some(d) => {
                            v = v * 16 + d;
                            i += 1;
                        }
                        None => break,
                    }
                }
                out.push(v as u8);
            }
            other => out.push(other),
        }
    }
    Ok(Some(Cow::Owned(out)))
}

/// Escapes `field` as the server's COPY TO does (for tests and fuzzing).
pub fn escape(field: Option<&[u8]>, out: &mut Vec<u8>) {
    let Some(field) = field else {
        out.extend_from_slice(b"\\N");
        return;
    };
    for &b in field {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            8 => out.extend_from_slice(b"\\b"),
            12 => out.extend_from_slice(b"\\f"),
            11 => out.extend_from_slice(b"\\v"),
            _ => out.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fields(row: &[u8], n: usize) -> Result<Vec<Option<Vec<u8>>>, CopyTextError> {
        let mut out = Vec::new();
        parse_row(row, n, &mut out)?;
        Ok(out.into_iter().map(|f| f.map(Cow::into_owned)).collect())
    }

    #[test]
    fn plain_null_and_escaped_fields() {
        let got = fields(b"1\t\\N\ta\\tb\\\\c\\nd\t\n", 4).unwrap();
        assert_eq!(
            got,
            vec![
                Some(b"1".to_vec()),
                None,
                Some(b"a\tb\\c\nd".to_vec()),
                Some(Vec::new())
            ]
        );
    }

    #[test]
    fn octal_and_hex_escapes() {
        let got = fields(b"\\101\\x42\\7\\xg\n", 1).unwrap();
        assert_eq!(got, vec![Some(b"AB\x07xg".to_vec())]);
    }

    #[test]
    fn wrong_field_count_and_trailing_backslash_are_errors() {
        assert_eq!(
            fields(b"1\t2\n", 3),
            Err(CopyTextError::FieldCount {
                expected: 3,
                got: 2
            })
        );
        assert_eq!(fields(b"ab\\\n", 1), Err(CopyTextError::TrailingBackslash));
    }

    #[test]
    fn unescaped_fields_are_borrowed() {
        let row = b"12\tabc\n".to_vec();
        let mut out = Vec::new();
        parse_row(&row, 2, &mut out).unwrap();
        assert!(out.iter().all(|f| matches!(f, Some(Cow::Borrowed(_)))));
    }

    proptest! {
        #[test]
        fn escape_then_parse_is_identity(
            row in proptest::collection::vec(
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)), 1..6)
        ) {
            let mut line = Vec::new();
            for (i, f) in row.iter().enumerate() {
                if i > 0 {
                    line.push(b'\t');
                }
                escape(f.as_deref(), &mut line);
            }
            line.push(b'\n');
            let got = fields(&line, row.len()).unwrap();
            prop_assert_eq!(got, row);
        }

        #[test]
        fn arbitrary_bytes_never_panic(line in proptest::collection::vec(any::<u8>(), 0..64), n in 0usize..5) {
            let mut out = Vec::new();
            let _ = parse_row(&line, n, &mut out);
        }
    }
}
