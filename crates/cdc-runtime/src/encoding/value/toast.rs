//! The placeholder of an unchanged TOASTed column
//! (`unavailable.value.placeholder`), typed per column as Debezium does
//! (`UnchangedToastedReplicationMessageColumn` and its placeholder list):
//!
//! * `bytea`: with `binary.handling.mode=bytes` the placeholder's bytes
//!   (base64 in JSON); in the other modes its text as it is;
//! * `text[]`, `varchar[]`, `json[]`, `jsonb[]`: an array of the text;
//! * `int4[]`, `date[]`: the placeholder's bytes as numbers (Java bytes are
//!   signed: 0x80 and up are negative); `int8[]` the same;
//! * `hstore`: the placeholder as its key and value (a JSON string or an
//!   object, per `hstore.handling.mode`);
//! * every other type: the text (Debezium's converters hand the marker on
//!   as the placeholder string, whatever the column's schema).

use cdc_core::types;

use super::super::json::{write_base64, write_int, write_str};
use super::debezium::Column;
use super::hstore;
use crate::encoding::{BinaryHandlingMode, DebeziumOptions};

/// Writes the placeholder for column `c`.
pub(crate) fn write_placeholder(out: &mut Vec<u8>, c: Column<'_>, o: &DebeziumOptions) {
    let ph = &o.unavailable_value_placeholder;
    match c.oid {
        types::BYTEA => match o.binary_handling_mode {
            BinaryHandlingMode::Bytes => write_base64(out, ph.bytes()),
            _ => write_str(out, ph.text()),
        },
        types::TEXT_ARRAY | types::VARCHAR_ARRAY | types::JSON_ARRAY | types::JSONB_ARRAY => {
            out.push(b'[');
            write_str(out, ph.text());
            out.push(b']');
        }
        types::INT4_ARRAY | types::DATE_ARRAY | types::INT8_ARRAY => {
            out.push(b'[');
            for (i, b) in ph.bytes().iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_int(out, i8::from_ne_bytes([*b]));
            }
            out.push(b']');
        }
        _ if c.is_hstore() => {
            let text = ph.text().to_owned();
            hstore::write_pairs(
                out,
                vec![(text.clone(), Some(text))],
                o.hstore_handling_mode,
            );
        }
        _ => write_str(out, ph.text()),
    }
}
