//! Messages of a binary `COPY ... TO STDOUT`: the reader never panics, and a
//! row it accepts re-encodes to a message that parses to the same fields.
#![no_main]

use cdc_core::copy_binary::{encode_row, CopyBinaryReader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First byte: expected field count; then u16-length-prefixed messages.
    let Some((&n, mut rest)) = data.split_first() else {
        return;
    };
    let expected = usize::from(n % 8);
    let mut reader = CopyBinaryReader::new();
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let (msg, tail) = rest[2..].split_at(len);
        rest = tail;
        let Ok(Some(row)) = reader.parse(msg, expected) else {
            continue;
        };
        let fields: Vec<Option<&[u8]>> = row.fields().collect();
        assert_eq!(fields.len(), row.len());
        // Re-encoded as the first message of a new stream (with the header).
        let mut again = Vec::new();
        encode_row(true, &fields, &mut again).expect("a parsed row can be encoded");
        let reparsed = CopyBinaryReader::new()
            .parse(&again, expected)
            .ok()
            .flatten()
            .map(|r| r.fields().collect::<Vec<_>>());
        assert_eq!(
            reparsed.as_ref(),
            Some(&fields),
            "row re-encodes differently"
        );
    }
});
