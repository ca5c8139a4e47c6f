//! The envelope of a row record (`c`, `u`, `d`, `r`, `t`), rendered in the
//! pieces between the values that change from event to event, so that
//! consecutive events of the same transaction, table and operation copy
//! them. The single-event path renders the pieces for its one event, so
//! both write the same bytes.

use std::sync::Arc;

use cdc_core::{Lsn, PgTimestamp, Xid};

use super::super::json::write_int;
use super::{source, transaction, ProcessingTime};
use crate::encoding::value::{write_debezium_row, RowKeys, RowRole};
use crate::encoding::DebeziumOptions;
use crate::event::{ChangeEvent, Operation, Row, SnapshotMark, TableSchema};

/// What a row record's envelope depends on besides the event's own LSN,
/// positions and rows.
#[derive(Debug, Clone)]
struct Key {
    table: Arc<TableSchema>,
    database: Arc<str>,
    commit_lsn: Lsn,
    xid: Xid,
    commit_time: Option<PgTimestamp>,
    previous_commit: Option<Lsn>,
    snapshot: SnapshotMark,
    event_op: Operation,
    record_op: &'static str,
}

impl Key {
    fn matches(&self, ev: &ChangeEvent, table: &Arc<TableSchema>, record_op: &str) -> bool {
        let s = &ev.source;
        Arc::ptr_eq(&self.table, table)
            && Arc::ptr_eq(&self.database, &s.database)
            && self.commit_lsn == s.commit_lsn
            && self.xid == s.xid
            && self.commit_time == s.commit_time
            && self.previous_commit == ev.position.previous_commit
            && self.snapshot == ev.position.snapshot
            && self.event_op == ev.op
            && self.record_op == record_op
    }
}

/// The pieces of the last row record's envelope.
#[derive(Debug, Default)]
pub(crate) struct Envelope {
    key: Option<Key>,
    /// `"source":{…,"sequence":"[<previous>,\"`
    head: Vec<u8>,
    /// `\"]","ts_us":…,"schema":…,"table":…,"txId":…,"lsn":`
    middle: Vec<u8>,
    /// `,"xmin":null},"op":…,"ts_ms":…,"ts_us":…,"ts_ns":…,"transaction":`
    /// and `{"id":"<txId>:` when the record has a transaction block.
    tail: Vec<u8>,
    /// Whether the record has a transaction block.
    block: bool,
    /// The column names of the table's rows, rendered.
    names: RowKeys,
}

impl Envelope {
    /// Renders the pieces for a record of `ev` with operation `record_op`
    /// unless the last record's fit.
    pub(crate) fn prepare(
        &mut self,
        opts: &DebeziumOptions,
        constant_head: &[u8],
        ev: &ChangeEvent,
        table: &Arc<TableSchema>,
        record_op: &'static str,
        now: ProcessingTime,
    ) {
        if self
            .key
            .as_ref()
            .is_some_and(|k| k.matches(ev, table, record_op))
        {
            return;
        }
        let same_table = self
            .key
            .as_ref()
            .is_some_and(|k| Arc::ptr_eq(&k.table, table));
        if !same_table {
            self.names = RowKeys::new(table);
        }
        self.head.clear();
        source::to_sequence_lsn(&mut self.head, constant_head, ev, now);
        self.middle.clear();
        source::to_lsn(&mut self.middle, ev, &table.schema, &table.table, now);
        self.tail.clear();
        source::to_transaction(&mut self.tail, record_op, now);
        self.block = transaction::has_block(opts, ev);
        if self.block {
            transaction::write_open(&mut self.tail, ev);
        } else {
            self.tail.extend_from_slice(b"null");
        }
        self.key = Some(Key {
            table: table.clone(),
            database: ev.source.database.clone(),
            commit_lsn: ev.source.commit_lsn,
            xid: ev.source.xid,
            commit_time: ev.source.commit_time,
            previous_commit: ev.position.previous_commit,
            snapshot: ev.position.snapshot,
            event_op: ev.op,
            record_op,
        });
    }

    /// Writes the record [`prepare`](Self::prepare) was called for, with
    /// rows `before` and `after`.
    pub(crate) fn write(
        &self,
        opts: &DebeziumOptions,
        ev: &ChangeEvent,
        before: Option<&Row>,
        after: Option<&Row>,
        out: &mut Vec<u8>,
    ) {
        out.extend_from_slice(b"{\"before\":");
        self.write_row(opts, out, before, RowRole::Before);
        out.extend_from_slice(b",\"after\":");
        self.write_row(opts, out, after, RowRole::After);
        out.push(b',');
        out.extend_from_slice(&self.head);
        let lsn_at = out.len();
        write_int(out, ev.source.lsn.as_u64());
        let lsn_text = lsn_at..out.len();
        out.extend_from_slice(&self.middle);
        // The same digits again (`source.lsn`), copied rather than rendered.
        out.extend_from_within(lsn_text.clone());
        out.extend_from_slice(&self.tail);
        if self.block {
            out.extend_from_within(lsn_text);
            transaction::write_close(out, ev);
        }
        out.push(b'}');
    }

    /// A row object with the column names rendered already: the one
    /// place rows call the value writer.
    fn write_row(
        &self,
        opts: &DebeziumOptions,
        out: &mut Vec<u8>,
        row: Option<&Row>,
        role: RowRole,
    ) {
        match &self.key {
            Some(key) => write_debezium_row(out, &key.table, row, role, opts, Some(&self.names)),
            None => out.extend_from_slice(b"null"),
        }
    }
}
