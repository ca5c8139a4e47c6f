//! One row of `COPY ... TO STDOUT` (text format): the parser never panics,
//! and what it parses escapes back to a row that parses to the same fields.
#![no_main]

use cdc_core::copy_text::{escape, fields, parse_row};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&n, row)) = data.split_first() else {
        return;
    };
    let mut out = Vec::new();
    let _ = parse_row(row, usize::from(n % 8), &mut out);
    let Ok(parsed) = fields(row).collect::<Result<Vec<_>, _>>() else {
        return;
    };
    let mut line = Vec::new();
    for (i, f) in parsed.iter().enumerate() {
        if i > 0 {
            line.push(b'\t');
        }
        escape(f.as_deref(), &mut line);
    }
    line.push(b'\n');
    let again = fields(&line).collect::<Result<Vec<_>, _>>();
    assert_eq!(again.ok(), Some(parsed), "escaped row parses differently");
});
