//! The `source` block and the envelope fields around it, in the pieces
//! between the values that vary from event to event (the event's LSN, its
//! positions), so that the line encoder renders the pieces once per run
//! of events and the single-event path writes the same bytes.
//!
//! ```text
//! "source":{"version":…,"connector":"postgresql","name":…,"ts_ms":…,"snapshot":…,"db":…,
//!           "sequence":"[<previous commit LSN or null>,\"<LSN>\"]","ts_us":…,"ts_ns":…,
//!           "schema":…,"table":…,"txId":…,"lsn":<LSN>,"xmin":null},
//! "op":…,"ts_ms":…,"ts_us":…,"ts_ns":…,"transaction":null | {"id":"<txId>:<LSN>",…}
//! ```

use cdc_core::{Lsn, Xid};

use super::super::json::{write_int, write_str};
use super::ProcessingTime;
use crate::encoding::DebeziumOptions;
use crate::event::{ChangeEvent, Operation};

/// The part of the `source` block that is the same for every event:
/// `"source":{"version":…,"connector":"postgresql","name":…,"ts_ms":`.
pub(super) fn constant_head(opts: &DebeziumOptions) -> Vec<u8> {
    let mut head = Vec::new();
    head.extend_from_slice(b"\"source\":{\"version\":");
    write_str(&mut head, &opts.version);
    head.extend_from_slice(b",\"connector\":\"postgresql\",\"name\":");
    write_str(&mut head, &opts.name);
    head.extend_from_slice(b",\"ts_ms\":");
    head
}

/// The commit time in microseconds since the Unix epoch (the processing
/// time when the event has none, as Debezium does).
fn commit_micros(ev: &ChangeEvent, now: ProcessingTime) -> i64 {
    ev.source
        .commit_time
        .and_then(|t| t.to_unix_micros())
        .unwrap_or_else(|| now.micros())
}

/// From the constant head to the opening of the event LSN in `sequence`:
/// `<ts_ms>,"snapshot":…,"db":…,"sequence":"[<previous>,\"`.
pub(super) fn to_sequence_lsn(
    out: &mut Vec<u8>,
    constant_head: &[u8],
    ev: &ChangeEvent,
    now: ProcessingTime,
) {
    out.extend_from_slice(constant_head);
    write_int(out, commit_micros(ev, now).div_euclid(1000));
    out.extend_from_slice(b",\"snapshot\":\"");
    out.extend_from_slice(ev.position.snapshot.debezium_value(ev.op).as_bytes());
    out.extend_from_slice(b"\",\"db\":");
    write_str(out, &ev.source.database);
    out.extend_from_slice(b",\"sequence\":\"[");
    match previous_commit(ev) {
        Some(lsn) => {
            out.extend_from_slice(b"\\\"");
            write_int(out, lsn.as_u64());
            out.extend_from_slice(b"\\\",\\\"");
        }
        None => out.extend_from_slice(b"null,\\\""),
    }
}

/// The first element of `source.sequence`: the previous commit's LSN,
/// `null` for snapshot reads (as Debezium's initial snapshot writes).
pub(super) fn previous_commit(ev: &ChangeEvent) -> Option<Lsn> {
    match ev.op {
        Operation::Read => None,
        _ => ev.position.previous_commit,
    }
}

/// From the end of `sequence` to the key of `source.lsn`:
/// `\"]","ts_us":…,"ts_ns":…,"schema":…,"table":…,"txId":…,"lsn":`.
pub(super) fn to_lsn(
    out: &mut Vec<u8>,
    ev: &ChangeEvent,
    schema: &str,
    table: &str,
    now: ProcessingTime,
) {
    let us = commit_micros(ev, now);
    out.extend_from_slice(b"\\\"]\",\"ts_us\":");
    write_int(out, us);
    out.extend_from_slice(b",\"ts_ns\":");
    write_int(out, us.saturating_mul(1000));
    out.extend_from_slice(b",\"schema\":");
    write_str(out, schema);
    out.extend_from_slice(b",\"table\":");
    write_str(out, table);
    out.extend_from_slice(b",\"txId\":");
    write_xid(out, ev.source.xid);
    out.extend_from_slice(b",\"lsn\":");
}

fn write_xid(out: &mut Vec<u8>, xid: Xid) {
    if xid == 0 {
        out.extend_from_slice(b"null");
    } else {
        write_int(out, xid);
    }
}

/// From the end of `source` to the value of `transaction`:
/// `,"xmin":null},"op":…,"ts_ms":…,"ts_us":…,"ts_ns":…,"transaction":`.
pub(super) fn to_transaction(out: &mut Vec<u8>, op_code: &str, now: ProcessingTime) {
    write_op(out, op_code);
    write_times(out, now);
    out.extend_from_slice(b",\"transaction\":");
}

/// The end of `source` and the operation: `,"xmin":null},"op":…`.
pub(crate) fn write_op(out: &mut Vec<u8>, op_code: &str) {
    close(out);
    out.extend_from_slice(b",\"op\":");
    write_str(out, op_code);
}

/// The end of `source`: `,"xmin":null}`.
pub(super) fn close(out: &mut Vec<u8>) {
    out.extend_from_slice(b",\"xmin\":null}");
}

/// `,"ts_ms":…,"ts_us":…,"ts_ns":…` of the processing time.
pub(crate) fn write_times(out: &mut Vec<u8>, now: ProcessingTime) {
    out.extend_from_slice(b",\"ts_ms\":");
    write_int(out, now.millis());
    out.extend_from_slice(b",\"ts_us\":");
    write_int(out, now.micros());
    out.extend_from_slice(b",\"ts_ns\":");
    write_int(out, now.nanos());
}
