//! Transaction metadata (`provide.transaction.metadata`): the
//! `transaction` block of every change record of a transaction, and the
//! BEGIN and END records.
//!
//! Debezium's PostgreSQL connector names a transaction `"<txId>:<LSN>"`
//! with the LSN of the record being written: each change record's own
//! `source.lsn`, the BEGIN's and the COMMIT's position in the stream for
//! the BEGIN and END records. So `id` differs from record to record of a
//! transaction; `txId` (and `total_order`) tie them together.

use super::super::json::{write_int, write_str};
use crate::encoding::DebeziumOptions;
use crate::event::{ChangeEvent, Operation, TransactionBoundary};

/// Whether `ev`'s records carry a `transaction` block (else it is `null`):
/// with the option on, for every change of a transaction; never for
/// snapshot reads (Debezium's snapshot runs outside the streamed
/// transactions) or events outside a transaction (xid 0).
pub(super) fn has_block(opts: &DebeziumOptions, ev: &ChangeEvent) -> bool {
    opts.provide_transaction_metadata
        && ev.source.xid != 0
        && !matches!(ev.op, Operation::Read | Operation::Transaction)
}

/// The block up to the LSN in its id: `{"id":"<txId>:`.
pub(super) fn write_open(out: &mut Vec<u8>, ev: &ChangeEvent) {
    out.extend_from_slice(b"{\"id\":\"");
    write_int(out, ev.source.xid);
    out.push(b':');
}

/// The block after the LSN: `","total_order":…,"data_collection_order":…}`.
pub(super) fn write_close(out: &mut Vec<u8>, ev: &ChangeEvent) {
    out.extend_from_slice(b"\",\"total_order\":");
    write_int(out, u64::from(ev.index) + 1);
    out.extend_from_slice(b",\"data_collection_order\":");
    write_int(out, u64::from(ev.position.table_index) + 1);
    out.push(b'}');
}

/// The whole block (or `null`).
pub(super) fn write_block(out: &mut Vec<u8>, opts: &DebeziumOptions, ev: &ChangeEvent) {
    if has_block(opts, ev) {
        write_open(out, ev);
        write_int(out, ev.source.lsn.as_u64());
        write_close(out, ev);
    } else {
        out.extend_from_slice(b"null");
    }
}

/// A BEGIN or END record's key: `{"id":"<txId>:<LSN>"}`.
pub(super) fn write_key(out: &mut Vec<u8>, ev: &ChangeEvent) {
    out.extend_from_slice(b"{\"id\":\"");
    write_int(out, ev.source.xid);
    out.push(b':');
    write_int(out, ev.source.lsn.as_u64());
    out.extend_from_slice(b"\"}");
}

/// A BEGIN or END record's value:
/// `{"status":…,"id":…,"ts_ms":<commit time>,"event_count":…,"data_collections":…}`.
pub(super) fn write_value(
    out: &mut Vec<u8>,
    ev: &ChangeEvent,
    b: &TransactionBoundary,
    now_ms: i64,
) {
    out.extend_from_slice(b"{\"status\":");
    write_str(out, b.status.name());
    out.extend_from_slice(b",\"id\":\"");
    write_int(out, ev.source.xid);
    out.push(b':');
    write_int(out, ev.source.lsn.as_u64());
    out.extend_from_slice(b"\",\"ts_ms\":");
    let ms = ev
        .source
        .commit_time
        .and_then(|t| t.to_unix_micros())
        .map_or(now_ms, |us| us.div_euclid(1000));
    write_int(out, ms);
    match b.status {
        crate::event::TransactionStatus::Begin => {
            out.extend_from_slice(b",\"event_count\":null,\"data_collections\":null}");
        }
        crate::event::TransactionStatus::End => {
            out.extend_from_slice(b",\"event_count\":");
            write_int(out, b.event_count);
            out.extend_from_slice(b",\"data_collections\":[");
            for (i, (name, count)) in b.data_collections.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"data_collection\":");
                write_str(out, name);
                out.extend_from_slice(b",\"event_count\":");
                write_int(out, *count);
                out.push(b'}');
            }
            out.extend_from_slice(b"]}");
        }
    }
}
