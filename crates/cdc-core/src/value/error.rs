//! [`ValueError`]: why a column value could not be decoded.

use crate::Oid;

/// How many characters of a bad input are quoted in an error message.
const QUOTE_LIMIT: usize = 64;

/// A column value did not match its type's text or binary format.
///
/// Every variant names the type OID, so a caller can report the column and
/// type; bad text is quoted (truncated to a few dozen characters) so logs stay
/// readable even for multi-megabyte values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// The text form (the type's output function) was malformed.
    #[error("invalid {} text {input:?}: {reason}", super::types::type_label(*type_oid))]
    BadText {
        /// The column's type OID.
        type_oid: Oid,
        /// What was wrong.
        reason: &'static str,
        /// The offending text, lossily converted and truncated.
        input: String,
    },
    /// The binary form (the type's send function) was malformed.
    #[error("invalid {} binary value ({len} bytes): {reason}", super::types::type_label(*type_oid))]
    BadBinary {
        /// The column's type OID.
        type_oid: Oid,
        /// What was wrong.
        reason: &'static str,
        /// The length of the binary value.
        len: usize,
    },
    /// A textual value (text, json, enum label, ...) was not valid UTF-8.
    #[error("{} value is not valid UTF-8 (valid up to byte {valid_up_to})", super::types::type_label(*type_oid))]
    InvalidUtf8 {
        /// The column's type OID.
        type_oid: Oid,
        /// Length of the longest valid UTF-8 prefix.
        valid_up_to: usize,
    },
    /// One element of an array could not be decoded.
    #[error("element {index} of {} array: {source}", super::types::type_label(*type_oid))]
    ArrayElement {
        /// The array's type OID.
        type_oid: Oid,
        /// Zero-based position of the element in row-major order.
        index: usize,
        /// Why the element was rejected.
        source: Box<ValueError>,
    },
}

impl ValueError {
    /// The type OID the error is about (the array's OID for element errors).
    pub fn type_oid(&self) -> Oid {
        match self {
            ValueError::BadText { type_oid, .. }
            | ValueError::BadBinary { type_oid, .. }
            | ValueError::InvalidUtf8 { type_oid, .. }
            | ValueError::ArrayElement { type_oid, .. } => *type_oid,
        }
    }

    pub(crate) fn text(type_oid: Oid, raw: &[u8], reason: &'static str) -> Self {
        ValueError::BadText {
            type_oid,
            reason,
            input: quote(raw),
        }
    }

    pub(crate) fn binary(type_oid: Oid, raw: &[u8], reason: &'static str) -> Self {
        ValueError::BadBinary {
            type_oid,
            reason,
            len: raw.len(),
        }
    }
}

/// The start of `raw` as a string, at most [`QUOTE_LIMIT`] characters, `...` if cut.
fn quote(raw: &[u8]) -> String {
    let lossy = String::from_utf8_lossy(raw);
    let mut out: String = lossy.chars().take(QUOTE_LIMIT).collect();
    if lossy.chars().nth(QUOTE_LIMIT).is_some() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_input_is_truncated_in_the_message() {
        let raw = vec![b'x'; 10_000];
        let err = ValueError::text(23, &raw, "not an integer");
        let msg = err.to_string();
        assert!(msg.len() < 200, "{msg}");
        assert!(msg.contains("int4"), "{msg}");
        assert!(msg.contains("..."), "{msg}");
        assert!(msg.contains("not an integer"), "{msg}");
        assert_eq!(err.type_oid(), 23);
    }

    #[test]
    fn short_input_is_quoted_whole() {
        let err = ValueError::text(1082, b"2024-13-01", "month out of range");
        assert_eq!(
            err.to_string(),
            "invalid date text \"2024-13-01\": month out of range"
        );
        let unknown = ValueError::binary(99999, b"abc", "bad");
        assert_eq!(
            unknown.to_string(),
            "invalid type 99999 binary value (3 bytes): bad"
        );
    }
}
