//! Debezium's change event records, as the PostgreSQL connector (2.7)
//! writes them through Kafka Connect's JSON converter with
//! `schemas.enable=false`.
//!
//! # Records
//!
//! An event becomes the records Debezium emits for it
//! ([`JsonEncoder::records`](super::JsonEncoder::records)):
//!
//! * one record for an insert, update, snapshot read, truncate, logical
//!   message, schema change, or transaction boundary;
//! * a delete: its record, then a *tombstone* (the key, a `null` value)
//!   when `tombstones.on.delete` is on (the default);
//! * an update that changes the row's key (a key column differs between
//!   the old row and the new one): a `d` record with the old row (keyed by
//!   the old key, header `__debezium.newkey` = the new key), the tombstone,
//!   and a `c` record with the new row (keyed by the new key, header
//!   `__debezium.oldkey` = the old key), as Debezium's
//!   `RelationalChangeRecordEmitter` does;
//! * nothing for an operation in `skipped.operations` (`t` by default),
//!   for schema changes unless `schema.changes` is on, and for transaction
//!   boundaries unless `provide.transaction.metadata` is on.
//!
//! The key is the table's [`key_columns`](crate::event::TableSchema::key_columns)
//! (the primary key when the catalog facts know one, else the replica
//! identity) as an object, `null` when the table has none and for
//! truncates; `{"prefix":…}` for a logical message; `{"id":…}` for a
//! transaction boundary. With `key` on, each JSON line is
//! `{"key":…,"value":…}` (with `"headers":{…}` when the record has
//! headers) and a tombstone is `{"key":…,"value":null}`; without, a line is
//! the value alone and tombstones are not written.
//!
//! # Value
//!
//! ```json
//! {"before":null,"after":{"id":1,"name":"a"},
//!  "source":{"version":"0.1.0","connector":"postgresql","name":"app","ts_ms":1700000000000,
//!            "snapshot":"false","db":"appdb","sequence":"[\"22906768\",\"22906880\"]",
//!            "ts_us":1700000000000000,"ts_ns":1700000000000000000,
//!            "schema":"public","table":"t","txId":755,"lsn":22906880,"xmin":null},
//!  "op":"c","ts_ms":1700000000123,"ts_us":1700000000123456,"ts_ns":1700000000123456789,
//!  "transaction":null}
//! ```
//!
//! * `op`: `c` insert, `u` update, `d` delete, `t` truncate (one event per
//!   table, `before` and `after` null), `r` snapshot read, `m` logical
//!   message (no `before`/`after`; a `"message":{"prefix":…,"content":<base64>}`
//!   field).
//! * `source.ts_ms`/`ts_us`/`ts_ns`: the commit time (the processing time
//!   when there is none); the top-level ones: the processing time.
//! * `source.version`: pgcdc's version; `source.name`: `topic.prefix`.
//! * `source.snapshot`: `"false"` for changes; for snapshot reads `"first"`
//!   (the snapshot's first), `"first_in_data_collection"`,
//!   `"last_in_data_collection"`, `"last"` (the snapshot's last), `"true"`,
//!   or `"incremental"` for reads done on demand (see
//!   [`SnapshotMark`](crate::event::SnapshotMark)).
//! * `source.sequence`: `["<end LSN of the previous transaction's commit>","<event LSN>"]`
//!   as decimal strings, `[null,"<LSN>"]` for snapshot reads and when the
//!   previous commit is not known (the first transaction after a start
//!   without a checkpoint).
//! * `transaction`: `null` unless `provide.transaction.metadata`; then, for
//!   changes of a transaction, `{"id":"<txId>:<event LSN>","total_order":…,
//!   "data_collection_order":…}`: the event's 1-based position in its
//!   transaction and among the transaction's events of its table. Snapshot
//!   reads carry `null`. BEGIN and END records
//!   (`{"status":"BEGIN","id":"<txId>:<LSN of BEGIN>","ts_ms":<commit time>,
//!   "event_count":null,"data_collections":null}`, and for END the counts)
//!   come before and after the transaction's records.
//! * Values: see [`super`] and `value.rs`; an unchanged TOAST column is
//!   the `unavailable.value.placeholder`.

mod envelope;
mod key;
mod source;
#[cfg(test)]
mod tests;
mod transaction;

use std::time::{SystemTime, UNIX_EPOCH};

use super::connect_schema::{self, SchemaCache};
use super::json::{write_base64, write_str};
use super::value::{write_cell_as, TextKind, ValueStyle};
use super::DebeziumOptions;
use crate::event::{Cell, ChangeEvent, ColumnFacts, ColumnSchema, Operation};
pub(crate) use envelope::Envelope;
pub(crate) use key::key_changed;

/// When events are encoded (Debezium's top-level `ts_ms`, `ts_us`,
/// `ts_ns`): nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ProcessingTime {
    nanos: i64,
}

impl ProcessingTime {
    /// The Unix epoch (what the plain format, which writes no time, uses).
    pub const EPOCH: ProcessingTime = ProcessingTime { nanos: 0 };

    /// Now, from the system clock.
    pub fn now() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        ProcessingTime { nanos }
    }

    /// `nanos` nanoseconds after the Unix epoch.
    pub const fn from_unix_nanos(nanos: i64) -> Self {
        ProcessingTime { nanos }
    }

    /// `millis` milliseconds after the Unix epoch.
    pub const fn from_unix_millis(millis: i64) -> Self {
        ProcessingTime {
            nanos: millis.saturating_mul(1_000_000),
        }
    }

    /// Nanoseconds since the Unix epoch.
    pub const fn nanos(self) -> i64 {
        self.nanos
    }

    /// Microseconds since the Unix epoch (rounded down).
    pub const fn micros(self) -> i64 {
        self.nanos.div_euclid(1_000)
    }

    /// Milliseconds since the Unix epoch (rounded down).
    pub const fn millis(self) -> i64 {
        self.nanos.div_euclid(1_000_000)
    }
}

/// Which of the records an event becomes (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordPart {
    /// The event's own record.
    Change,
    /// A key change's first record: `op` `d` with the old row, keyed by
    /// the old key, header `__debezium.newkey`.
    KeyChangeDelete,
    /// The tombstone after a delete: the deleted row's key, a `null` value.
    Tombstone,
    /// A key change's last record: `op` `c` with the new row, keyed by the
    /// new key, header `__debezium.oldkey`.
    KeyChangeCreate,
}

/// One record an event becomes.
#[derive(Debug, Clone, Copy)]
pub struct Record<'e> {
    /// The event.
    pub event: &'e ChangeEvent,
    /// Which of its records.
    pub part: RecordPart,
}

impl Record<'_> {
    /// Whether the record is a tombstone (a `null` value).
    pub fn is_tombstone(&self) -> bool {
        self.part == RecordPart::Tombstone
    }
}

/// The records an event becomes, in order.
#[derive(Debug, Clone)]
pub struct Records<'e> {
    event: &'e ChangeEvent,
    parts: [Option<RecordPart>; 3],
    next: usize,
}

impl<'e> Records<'e> {
    pub(crate) fn none(event: &'e ChangeEvent) -> Self {
        Records {
            event,
            parts: [None; 3],
            next: 0,
        }
    }

    pub(crate) fn one(event: &'e ChangeEvent) -> Self {
        Records {
            event,
            parts: [Some(RecordPart::Change), None, None],
            next: 0,
        }
    }
}

impl<'e> Iterator for Records<'e> {
    type Item = Record<'e>;

    fn next(&mut self) -> Option<Record<'e>> {
        while let Some(slot) = self.parts.get(self.next) {
            self.next += 1;
            if let Some(part) = *slot {
                return Some(Record {
                    event: self.event,
                    part,
                });
            }
        }
        None
    }
}

/// The one place the Debezium records' keys call the value writer
/// (`value/`): a column's value, as the options say (rows go through
/// `value::write_debezium_row`, see [`Envelope`]).
#[inline]
fn write_cell(
    out: &mut Vec<u8>,
    col: &ColumnSchema,
    facts: Option<&ColumnFacts>,
    cell: Cell<'_>,
    opts: &DebeziumOptions,
) {
    write_cell_as(
        out,
        col,
        TextKind::of(col.type_oid),
        facts,
        cell,
        ValueStyle::Debezium(opts),
    );
}

/// The Debezium format: its options and what they render to once.
#[derive(Debug, Clone)]
pub(crate) struct Debezium {
    opts: DebeziumOptions,
    /// The `source` block up to its `ts_ms` value, the same for every event.
    head: Vec<u8>,
    /// The Kafka Connect schemas of the tables seen (`schemas.enable`).
    schemas: SchemaCache,
}

impl Debezium {
    pub(crate) fn new(opts: DebeziumOptions) -> Self {
        let head = source::constant_head(&opts);
        Debezium {
            opts,
            head,
            schemas: SchemaCache::default(),
        }
    }

    /// Whether `ev` becomes any record.
    pub(crate) fn writes(&self, ev: &ChangeEvent) -> bool {
        match ev.op {
            Operation::SchemaChange => self.opts.schema_changes,
            Operation::Transaction => self.opts.provide_transaction_metadata,
            op => !self.opts.skipped_operations.skips(op),
        }
    }

    /// The records `ev` becomes.
    pub(crate) fn records<'e>(&self, ev: &'e ChangeEvent) -> Records<'e> {
        if !self.writes(ev) {
            return Records::none(ev);
        }
        let tombstone = self
            .opts
            .tombstones_on_delete
            .then_some(RecordPart::Tombstone);
        let parts = match ev.op {
            Operation::Delete => [Some(RecordPart::Change), tombstone, None],
            Operation::Update if key_changed(ev) => [
                Some(RecordPart::KeyChangeDelete),
                tombstone,
                Some(RecordPart::KeyChangeCreate),
            ],
            _ => [Some(RecordPart::Change), None, None],
        };
        Records {
            event: ev,
            parts,
            next: 0,
        }
    }

    /// Writes the record's key (`null` when it has none; with
    /// `schemas.enable`, wrapped with its Connect schema); returns whether
    /// it has one.
    pub(crate) fn write_key(&self, rec: &Record<'_>, out: &mut Vec<u8>) -> bool {
        if !self.opts.schemas_enable {
            return self.write_key_payload(rec, out);
        }
        let ev = rec.event;
        let schema: Vec<u8> = match (ev.op, &ev.table) {
            (Operation::Transaction, _) => {
                let mut schema = Vec::new();
                connect_schema::write_transaction_key_schema(&mut schema);
                schema
            }
            (Operation::Message, _) => {
                let mut schema = Vec::new();
                connect_schema::write_message_key_schema(&mut schema);
                schema
            }
            (Operation::Truncate | Operation::SchemaChange, _) | (_, None) => b"null".to_vec(),
            (_, Some(table)) => self.schemas.get(table, &self.opts).key.to_vec(),
        };
        let mut has = false;
        connect_schema::write_wrapped(out, &schema, |out| has = self.write_key_payload(rec, out));
        has
    }

    /// [`write_key`](Self::write_key) without the Connect wrapper.
    fn write_key_payload(&self, rec: &Record<'_>, out: &mut Vec<u8>) -> bool {
        let ev = rec.event;
        match (ev.op, ev.table.as_deref()) {
            (Operation::Transaction, _) => {
                transaction::write_key(out, ev);
                true
            }
            (Operation::Message, _) => match &ev.message {
                Some(m) => {
                    out.extend_from_slice(b"{\"prefix\":");
                    write_str(out, &m.prefix);
                    out.push(b'}');
                    true
                }
                None => {
                    out.extend_from_slice(b"null");
                    false
                }
            },
            (Operation::Truncate | Operation::SchemaChange, _) | (_, None) => {
                out.extend_from_slice(b"null");
                false
            }
            (_, Some(table)) => {
                key::write_row_key(out, table, key::key_row(ev, rec.part), &self.opts)
            }
        }
    }

    /// Writes the record's headers as an object if it has any; returns
    /// whether it wrote them.
    pub(crate) fn write_headers(&self, rec: &Record<'_>, out: &mut Vec<u8>) -> bool {
        key::write_headers(out, rec.event, rec.part, &self.opts)
    }

    /// Writes the record's value (`null` for a tombstone; with
    /// `schemas.enable`, wrapped with its Connect schema), with `cache`
    /// holding the pieces of the last row record.
    pub(crate) fn write_value(
        &self,
        rec: &Record<'_>,
        now: ProcessingTime,
        cache: &mut Envelope,
        out: &mut Vec<u8>,
    ) {
        let ev = rec.event;
        if rec.is_tombstone() || !self.opts.schemas_enable {
            return self.write_payload(rec, now, cache, out);
        }
        let payload = |out: &mut Vec<u8>| self.write_payload(rec, now, cache, out);
        if ev.op == Operation::Transaction {
            let mut schema = Vec::new();
            connect_schema::write_transaction_value_schema(&mut schema);
            connect_schema::write_wrapped(out, &schema, payload);
        } else {
            connect_schema::write_event_wrapped(&self.schemas, ev, &self.opts, out, payload);
        }
    }

    /// [`write_value`](Self::write_value) without the Connect wrapper.
    fn write_payload(
        &self,
        rec: &Record<'_>,
        now: ProcessingTime,
        cache: &mut Envelope,
        out: &mut Vec<u8>,
    ) {
        let ev = rec.event;
        let (op, before, after) = match rec.part {
            RecordPart::Tombstone => {
                out.extend_from_slice(b"null");
                return;
            }
            RecordPart::KeyChangeDelete => ("d", ev.before.as_ref(), None),
            RecordPart::KeyChangeCreate => ("c", None, ev.after.as_ref()),
            RecordPart::Change => (ev.op.debezium_code(), ev.before.as_ref(), ev.after.as_ref()),
        };
        match (ev.op, &ev.table) {
            (Operation::Transaction, _) => match &ev.boundary {
                Some(b) => transaction::write_value(out, ev, b, now.millis()),
                None => out.extend_from_slice(b"null"),
            },
            (Operation::SchemaChange, _) => {
                super::schema::debezium_schema_change(self, ev, now, out)
            }
            (Operation::Message, _) | (_, None) => self.write_tableless(ev, now, out),
            (_, Some(table)) => {
                cache.prepare(&self.opts, &self.head, ev, table, op, now);
                cache.write(&self.opts, ev, before, after, out);
            }
        }
    }

    /// A record without a table (a logical message), in the field order
    /// of Debezium's message value: `op`, `ts_ms` (the commit time, or
    /// the processing time outside a transaction), `source` (with empty
    /// `schema` and `table`), `transaction`, `message`.
    fn write_tableless(&self, ev: &ChangeEvent, now: ProcessingTime, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"op\":");
        write_str(out, ev.op.debezium_code());
        out.extend_from_slice(b",\"ts_ms\":");
        let ms = ev
            .source
            .commit_time
            .and_then(|t| t.to_unix_micros())
            .map_or(now.millis(), |us| us.div_euclid(1000));
        super::json::write_int(out, ms);
        out.push(b',');
        self.write_source(ev, "", "", now, out);
        source::close(out);
        self.write_transaction(ev, out);
        if let Some(m) = &ev.message {
            out.extend_from_slice(b",\"message\":{\"prefix\":");
            write_str(out, &m.prefix);
            out.extend_from_slice(b",\"content\":");
            write_base64(out, &m.content);
            out.push(b'}');
        }
        out.push(b'}');
    }

    /// `"source":{…}` (without the `}` and what follows: see
    /// [`source::write_op`]).
    pub(crate) fn write_source(
        &self,
        ev: &ChangeEvent,
        schema: &str,
        table: &str,
        now: ProcessingTime,
        out: &mut Vec<u8>,
    ) {
        source::to_sequence_lsn(out, &self.head, ev, now);
        super::json::write_int(out, ev.source.lsn.as_u64());
        source::to_lsn(out, ev, schema, table, now);
        super::json::write_int(out, ev.source.lsn.as_u64());
    }

    /// `,"transaction":<block>` of `ev`.
    pub(crate) fn write_transaction(&self, ev: &ChangeEvent, out: &mut Vec<u8>) {
        out.extend_from_slice(b",\"transaction\":");
        transaction::write_block(out, &self.opts, ev);
    }

    /// Appends every record of `ev` as a JSON line (see the module docs for
    /// keys and tombstones).
    pub(crate) fn write_lines(
        &self,
        ev: &ChangeEvent,
        now: ProcessingTime,
        cache: &mut Envelope,
        out: &mut Vec<u8>,
    ) {
        for rec in self.records(ev) {
            if !self.opts.key {
                if rec.is_tombstone() {
                    continue;
                }
                self.write_value(&rec, now, cache, out);
            } else {
                out.extend_from_slice(b"{\"key\":");
                self.write_key(&rec, out);
                out.extend_from_slice(b",\"value\":");
                self.write_value(&rec, now, cache, out);
                let at = out.len();
                out.extend_from_slice(b",\"headers\":");
                if !self.write_headers(&rec, out) {
                    out.truncate(at);
                }
                out.push(b'}');
            }
            out.push(b'\n');
        }
    }
}

pub(crate) use source::{write_op, write_times};
