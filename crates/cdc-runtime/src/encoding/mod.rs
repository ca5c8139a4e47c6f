//! JSON encodings of [`ChangeEvent`]s: Debezium's envelope and a plain form.
//!
//! Both write straight into a caller's reused `Vec<u8>`, with no intermediate
//! `serde_json::Value`. [`JsonEncoder::encode_line`] adds the `\n` of JSON lines.
//!
//! # Debezium envelope ([`JsonFormat::Debezium`])
//!
//! The value payload of the Debezium PostgreSQL connector as its JSON converter
//! writes it with `schemas.enable=false`:
//!
//! ```json
//! {"before":null,"after":{"id":1,"name":"a"},
//!  "source":{"version":"2.7.0.Final","connector":"postgresql","name":"app","ts_ms":1700000000000,
//!            "snapshot":"false","db":"appdb","sequence":"[\"22906768\",\"22906880\"]",
//!            "schema":"public","table":"t","txId":755,"lsn":22906880,"xmin":null},
//!  "op":"c","ts_ms":1700000000123,"transaction":{"id":"755:22906880","total_order":1}}
//! ```
//!
//! * `op`: `c` insert, `u` update, `d` delete, `t` truncate (one event per
//!   table, `before` and `after` null), `r` snapshot read, `m` logical message
//!   (no `before`/`after`; a `"message":{"prefix":…,"content":<base64>}` field).
//! * `transaction` is Debezium's transaction metadata block: `id` is
//!   `"<txId>:<commit LSN>"` and `total_order` the event's 1-based position in
//!   its transaction, so `(id, total_order)` identifies an event delivered
//!   again after a restart (deduplicate on it). `data_collection_order` is not
//!   written.
//! * `source.ts_ms` is the commit time, the top-level `ts_ms` the time the
//!   event was encoded. `source.sequence` is `["<commit LSN>","<event LSN>"]`
//!   as decimal strings. **Deviation:** Debezium puts the commit LSN of the
//!   *previous* transaction first; we put this transaction's commit LSN, which
//!   together with the event LSN still orders events.
//! * Values: as the Debezium PostgreSQL connector (2.7) writes them in every
//!   `decimal.handling.mode`, `binary.handling.mode`, `time.precision.mode`,
//!   `interval.handling.mode` and `hstore.handling.mode` (see
//!   [`DebeziumOptions`]); the per-type rules and the deliberate differences
//!   are in the `value` module's docs. An unchanged TOAST column is the
//!   `unavailable.value.placeholder`, typed per column (never null); the
//!   `NOT NULL` columns a `before` does not carry (replica identity not
//!   `FULL`) get their type's default, as Debezium's required fields do.
//!
//! With [`DebeziumOptions::schemas_enable`] each line is what Kafka
//! Connect's JSON converter writes with `schemas.enable=true`:
//! `{"schema":<the envelope's Connect schema>,"payload":<the envelope>}`,
//! the schema Debezium 2.7's (see `connect_schema/`); a logical message's
//! is Debezium's `MessageValue`. Schema changes carry `"schema":null`.
//!
//! # Plain form ([`JsonFormat::Plain`])
//!
//! ```json
//! {"op":"update","schema":"public","table":"t","commit_lsn":"0/15D3A10","lsn":"0/15D3980",
//!  "xid":755,"commit_time":"2023-11-14T22:13:20+00:00","index":0,
//!  "before":null,"after":{"id":1},"unchanged_toast":["doc"]}
//! ```
//!
//! Values: `bool` true/false; integers and floats as numbers (NaN and the
//! infinities as the strings `"NaN"`, `"Infinity"`, `"-Infinity"`);
//! `numeric` as a string with every digit; `bytea` base64; text, json,
//! uuid, network addresses, enums and unknown types as strings; arrays as
//! JSON arrays; dates and times as ISO 8601 strings (`2024-01-15`,
//! `04:05:06.5`, `2024-01-15T04:05:06.5`, `…+00:00`, intervals as
//! `P1Y2M3DT4H5M6S`), and `pg_lsn` as `X/Y`. Unchanged TOAST columns are left
//! out of the row object and listed by name in `unchanged_toast`. A message
//! event has `"message":{"transactional":…,"prefix":…,"content":<base64>}`.

mod connect_schema;
mod json;
mod options;
mod schema;
mod value;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use cdc_core::{Lsn, PgTimestamp, TimestampTz, Value, Xid};

use crate::event::{Cell, ChangeEvent, Operation, Row, SourceInfo, TableSchema};
use json::{write_base64, write_display_str, write_int, write_str};
pub use options::{
    BinaryHandlingMode, DebeziumOptions, DecimalHandlingMode, HstoreHandlingMode,
    IntervalHandlingMode, OptionError, Placeholder, SkippedOperations, TimePrecisionMode, SETTINGS,
    VERSION,
};
pub use value::UNAVAILABLE_VALUE;
use value::{write_cell, write_debezium_row, RowKeys, RowRole, ValueStyle};

/// Which JSON shape to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonFormat {
    /// Debezium's change event value (see the module docs).
    Debezium(DebeziumOptions),
    /// pgcdc's plain form (see the module docs).
    Plain,
}

/// Encodes change events as JSON into a reused buffer.
///
/// ```
/// use cdc_runtime::encoding::{JsonEncoder, JsonFormat};
/// # use cdc_runtime::event::{ChangeEvent, Operation, SourceInfo};
/// # let event = ChangeEvent { op: Operation::Message, table: None, before: None, after: None,
/// #   message: Some(cdc_runtime::event::MessagePayload { transactional: false, prefix: "p".into(), content: b"hi".to_vec() }), schema_change: None,
/// #   source: SourceInfo { commit_lsn: cdc_core::Lsn::from_u64(1), lsn: cdc_core::Lsn::from_u64(1), xid: 0,
/// #     commit_time: None, database: "db".into(), slot: "s".into() }, index: 0 };
/// let encoder = JsonEncoder::new(JsonFormat::Plain);
/// let mut buf = Vec::new();
/// encoder.encode_line(&event, &mut buf);
/// assert!(buf.ends_with(b"}\n"));
/// ```
#[derive(Debug, Clone)]
pub struct JsonEncoder {
    format: JsonFormat,
    /// The Debezium `source` block up to its `ts_ms` value, the same for
    /// every event: written once here instead of escaped for each event.
    source_head: Vec<u8>,
    /// The Kafka Connect schemas of the tables seen (`schemas.enable`).
    schemas: connect_schema::SchemaCache,
}

impl JsonEncoder {
    /// An encoder for `format`.
    pub fn new(format: JsonFormat) -> Self {
        let mut source_head = Vec::new();
        if let JsonFormat::Debezium(opts) = &format {
            source_head.extend_from_slice(b"\"source\":{\"version\":");
            write_str(&mut source_head, &opts.version);
            source_head.extend_from_slice(b",\"connector\":\"postgresql\",\"name\":");
            write_str(&mut source_head, &opts.name);
            source_head.extend_from_slice(b",\"ts_ms\":");
        }
        JsonEncoder {
            format,
            source_head,
            schemas: Default::default(),
        }
    }

    /// The format.
    pub fn format(&self) -> &JsonFormat {
        &self.format
    }

    /// Appends `event` as one JSON object followed by `\n` (nothing for an
    /// event the format leaves out, see [`writes`](Self::writes)).
    pub fn encode_line(&self, event: &ChangeEvent, out: &mut Vec<u8>) {
        if !self.writes(event) {
            return;
        }
        self.encode_at(event, self.now_ms(), out);
        out.push(b'\n');
    }

    /// Whether this format writes `event`: the Debezium format leaves
    /// schema-change events out unless
    /// [`DebeziumOptions::schema_changes`] is set.
    pub fn writes(&self, event: &ChangeEvent) -> bool {
        match &self.format {
            JsonFormat::Debezium(opts) => {
                event.op != Operation::SchemaChange || opts.schema_changes
            }
            JsonFormat::Plain => true,
        }
    }

    /// Appends every event of `events` as a JSON line, with one processing
    /// time (Debezium's top-level `ts_ms`) for all of them: the clock is read
    /// once per call instead of once per event.
    pub fn encode_lines(&self, events: &[ChangeEvent], out: &mut Vec<u8>) {
        let mut lines = self.lines(self.now_ms());
        for event in events {
            lines.encode_line(event, out);
        }
    }

    /// An encoder for a run of events with one processing time `now_ms`
    /// (see [`now_ms`](Self::now_ms)). It writes the same bytes as
    /// [`encode_line_at`](Self::encode_line_at), but renders what consecutive
    /// events share (the Debezium `source` block of their transaction and
    /// table, the transaction id, the column names) once instead of for every
    /// event.
    pub fn lines(&self, now_ms: i64) -> LineEncoder<'_> {
        LineEncoder {
            encoder: self,
            now_ms,
            envelope: Envelope::default(),
        }
    }

    /// Like [`encode_line`](Self::encode_line) with the processing time
    /// given (see [`now_ms`](Self::now_ms)).
    pub fn encode_line_at(&self, event: &ChangeEvent, now_ms: i64, out: &mut Vec<u8>) {
        if !self.writes(event) {
            return;
        }
        self.encode_at(event, now_ms, out);
        out.push(b'\n');
    }

    /// Appends `event` as one JSON object (no newline).
    pub fn encode(&self, event: &ChangeEvent, out: &mut Vec<u8>) {
        self.encode_at(event, self.now_ms(), out);
    }

    /// The processing time to pass to [`encode_at`](Self::encode_at) and
    /// [`encode_line_at`](Self::encode_line_at): milliseconds since the Unix
    /// epoch for the Debezium format, 0 for the plain format, which does not
    /// write it (so it does not read the clock).
    pub fn now_ms(&self) -> i64 {
        match self.format {
            JsonFormat::Debezium(_) => now_ms(),
            JsonFormat::Plain => 0,
        }
    }

    /// Like [`encode`](Self::encode) with the processing time (Debezium's
    /// top-level `ts_ms`) given, for reproducible output.
    pub fn encode_at(&self, event: &ChangeEvent, now_ms: i64, out: &mut Vec<u8>) {
        match &self.format {
            JsonFormat::Debezium(opts) if opts.schemas_enable => {
                connect_schema::write_event_wrapped(&self.schemas, event, opts, out, |out| {
                    self.encode_payload(event, now_ms, out)
                });
            }
            _ => self.encode_payload(event, now_ms, out),
        }
    }

    /// [`encode_at`](Self::encode_at) without the Kafka Connect wrapper.
    fn encode_payload(&self, event: &ChangeEvent, now_ms: i64, out: &mut Vec<u8>) {
        match &self.format {
            JsonFormat::Debezium(_) if event.op == Operation::SchemaChange => {
                schema::debezium_schema_change(event, &self.source_head, now_ms, out);
            }
            JsonFormat::Debezium(opts) => debezium(event, opts, &self.source_head, now_ms, out),
            JsonFormat::Plain => plain(event, out),
        }
    }
}

/// Encodes events as JSON lines with one processing time; see
/// [`JsonEncoder::lines`].
#[derive(Debug)]
pub struct LineEncoder<'e> {
    encoder: &'e JsonEncoder,
    now_ms: i64,
    envelope: Envelope,
}

impl LineEncoder<'_> {
    /// The processing time this encoder writes.
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// Appends `event` as one JSON object followed by `\n`.
    pub fn encode_line(&mut self, event: &ChangeEvent, out: &mut Vec<u8>) {
        if !self.encoder.writes(event) {
            return;
        }
        match (&self.encoder.format, event.table.as_ref()) {
            (JsonFormat::Debezium(opts), Some(table))
                if !matches!(event.op, Operation::Message | Operation::SchemaChange) =>
            {
                self.envelope
                    .prepare(event, table, &self.encoder.source_head, self.now_ms);
                if opts.schemas_enable {
                    let envelope = &self.envelope;
                    let schemas = &self.encoder.schemas;
                    connect_schema::write_event_wrapped(schemas, event, opts, out, |out| {
                        envelope.write(event, opts, out)
                    });
                } else {
                    self.envelope.write(event, opts, out);
                }
            }
            _ => self.encoder.encode_at(event, self.now_ms, out),
        }
        out.push(b'\n');
    }
}

/// What a Debezium envelope of a row event depends on besides the event's
/// own LSN, index and rows.
#[derive(Debug, Clone)]
struct EnvelopeKey {
    table: Arc<TableSchema>,
    database: Arc<str>,
    commit_lsn: Lsn,
    xid: Xid,
    commit_time: Option<PgTimestamp>,
    op: Operation,
}

impl EnvelopeKey {
    fn matches(&self, ev: &ChangeEvent, table: &Arc<TableSchema>) -> bool {
        let s = &ev.source;
        Arc::ptr_eq(&self.table, table)
            && Arc::ptr_eq(&self.database, &s.database)
            && self.commit_lsn == s.commit_lsn
            && self.xid == s.xid
            && self.commit_time == s.commit_time
            && self.op == ev.op
    }
}

/// The Debezium envelope of the last row event, rendered in the pieces
/// between the values that change from event to event, so that events of
/// the same transaction, table and operation copy them.
#[derive(Debug, Default)]
struct Envelope {
    key: Option<EnvelopeKey>,
    /// `"source":{…,"ts_ms":<commit>,"snapshot":…,"db":…,"sequence":"[\"<commit LSN>\",\"`
    head: Vec<u8>,
    /// `\"]","schema":…,"table":…,"txId":…,"lsn":`
    middle: Vec<u8>,
    /// `,"xmin":null},"op":…,"ts_ms":<now>,"transaction":{"id":"…","total_order":`
    tail: Vec<u8>,
    /// The column keys of the table's rows.
    keys: RowKeys,
}

impl Envelope {
    /// Renders the pieces for `ev` unless the last event's fit.
    fn prepare(
        &mut self,
        ev: &ChangeEvent,
        table: &Arc<TableSchema>,
        source_head: &[u8],
        now_ms: i64,
    ) {
        if self.key.as_ref().is_some_and(|k| k.matches(ev, table)) {
            return;
        }
        let s = &ev.source;
        let same_table = self
            .key
            .as_ref()
            .is_some_and(|k| Arc::ptr_eq(&k.table, table));
        if !same_table {
            self.keys = RowKeys::new(table);
        }
        self.head.clear();
        source_to_sequence(&mut self.head, source_head, ev, now_ms);
        self.middle.clear();
        sequence_to_lsn(&mut self.middle, &table.schema, &table.table, s.xid);
        self.tail.clear();
        lsn_to_ts_ms(&mut self.tail, ev, now_ms);
        transaction_to_total_order(&mut self.tail, s);

        self.key = Some(EnvelopeKey {
            table: table.clone(),
            database: s.database.clone(),
            commit_lsn: s.commit_lsn,
            xid: s.xid,
            commit_time: s.commit_time,
            op: ev.op,
        });
    }

    /// Writes `ev` (a row event of the table [`prepare`](Self::prepare) saw)
    /// as [`debezium`] would.
    fn write(&self, ev: &ChangeEvent, opts: &DebeziumOptions, out: &mut Vec<u8>) {
        let lsn = ev.source.lsn.as_u64();
        out.extend_from_slice(b"{\"before\":");
        self.write_row(out, ev.before.as_ref(), RowRole::Before, opts);
        out.extend_from_slice(b",\"after\":");
        self.write_row(out, ev.after.as_ref(), RowRole::After, opts);
        out.push(b',');
        out.extend_from_slice(&self.head);
        let lsn_at = out.len();
        write_int(out, lsn);
        let lsn_text = lsn_at..out.len();
        out.extend_from_slice(&self.middle);
        // The same digits again (`source.lsn`), copied rather than rendered.
        out.extend_from_within(lsn_text);
        out.extend_from_slice(&self.tail);
        write_int(out, u64::from(ev.index) + 1);
        out.extend_from_slice(b"}}");
    }

    /// [`write_debezium_row`] with the column names rendered already.
    fn write_row(
        &self,
        out: &mut Vec<u8>,
        row: Option<&Row>,
        role: RowRole,
        opts: &DebeziumOptions,
    ) {
        match &self.key {
            Some(key) => write_debezium_row(out, &key.table, row, role, opts, Some(&self.keys)),
            None => out.extend_from_slice(b"null"),
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn pg_time_ms(t: PgTimestamp) -> Option<i64> {
    t.to_unix_micros().map(|m| m.div_euclid(1000))
}

/// A plain row object `{"col":value,…}`; with `skip_toast`, unchanged TOAST
/// columns are left out.
fn write_row(out: &mut Vec<u8>, table: Option<&TableSchema>, row: Option<&Row>, skip_toast: bool) {
    let (Some(table), Some(row)) = (table, row) else {
        out.extend_from_slice(b"null");
        return;
    };
    out.push(b'{');
    let mut first = true;
    for (col, cell) in table.columns.iter().zip(row.cells()) {
        if skip_toast && is_unchanged_toast(cell) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        write_str(out, &col.name);
        out.push(b':');
        write_cell(out, col, None, cell, ValueStyle::Plain);
    }
    out.push(b'}');
}

fn is_unchanged_toast(cell: Cell<'_>) -> bool {
    matches!(
        cell,
        Cell::Value(Value::UnchangedToast) | Cell::Wire(cdc_core::TupleValue::UnchangedToast)
    )
}

fn debezium(
    ev: &ChangeEvent,
    opts: &DebeziumOptions,
    source_head: &[u8],
    now_ms: i64,
    out: &mut Vec<u8>,
) {
    let table = ev.table.as_deref();
    out.push(b'{');
    if ev.op != Operation::Message {
        let write = |out: &mut Vec<u8>, r: Option<&Row>, role: RowRole| match table {
            Some(t) => write_debezium_row(out, t, r, role, opts, None),
            None => out.extend_from_slice(b"null"),
        };
        out.extend_from_slice(b"\"before\":");
        write(out, ev.before.as_ref(), RowRole::Before);
        out.extend_from_slice(b",\"after\":");
        write(out, ev.after.as_ref(), RowRole::After);
        out.push(b',');
    }
    let s = &ev.source;
    source_to_sequence(out, source_head, ev, now_ms);
    write_int(out, s.lsn.as_u64());
    sequence_to_lsn(
        out,
        table.map_or("", |t| &t.schema),
        table.map_or("", |t| &t.table),
        s.xid,
    );
    write_int(out, s.lsn.as_u64());
    lsn_to_ts_ms(out, ev, now_ms);
    if let Some(m) = &ev.message {
        out.extend_from_slice(b",\"message\":{\"prefix\":");
        write_str(out, &m.prefix);
        out.extend_from_slice(b",\"content\":");
        write_base64(out, &m.content);
        out.push(b'}');
    }
    // Debezium's transaction metadata block: `total_order` is the event's
    // 1-based position in its transaction, so `(id, total_order)` (commit LSN
    // and event index) identifies an event that a restart delivered again.
    transaction_to_total_order(out, s);
    write_int(out, u64::from(ev.index) + 1);
    out.extend_from_slice(b"}}");
}

// The parts of a Debezium envelope between the values that vary per event (the
// event LSN, twice, and the event's position in its transaction), shared by
// `debezium` and the line encoder, which renders them once per run of events.

/// From the `source` block's constant head to the opening of the event LSN in
/// `sequence`.
fn source_to_sequence(out: &mut Vec<u8>, source_head: &[u8], ev: &ChangeEvent, now_ms: i64) {
    let s = &ev.source;
    out.extend_from_slice(source_head);
    write_int(out, s.commit_time.and_then(pg_time_ms).unwrap_or(now_ms));
    out.extend_from_slice(if ev.op == Operation::Read {
        b",\"snapshot\":\"true\""
    } else {
        b",\"snapshot\":\"false\""
    });
    out.extend_from_slice(b",\"db\":");
    write_str(out, &s.database);
    out.extend_from_slice(b",\"sequence\":\"[\\\"");
    write_int(out, s.commit_lsn.as_u64());
    out.extend_from_slice(b"\\\",\\\"");
}

/// From the end of `sequence` to the key of `source.lsn`.
fn sequence_to_lsn(out: &mut Vec<u8>, schema: &str, table: &str, xid: Xid) {
    out.extend_from_slice(b"\\\"]\",\"schema\":");
    write_str(out, schema);
    out.extend_from_slice(b",\"table\":");
    write_str(out, table);
    out.extend_from_slice(b",\"txId\":");
    if xid == 0 {
        out.extend_from_slice(b"null");
    } else {
        write_int(out, xid);
    }
    out.extend_from_slice(b",\"lsn\":");
}

/// From the end of `source` to the envelope's `ts_ms` value.
fn lsn_to_ts_ms(out: &mut Vec<u8>, ev: &ChangeEvent, now_ms: i64) {
    out.extend_from_slice(b",\"xmin\":null},\"op\":");
    write_str(out, ev.op.debezium_code());
    out.extend_from_slice(b",\"ts_ms\":");
    write_int(out, now_ms);
}

/// The `transaction` block up to the value of `total_order`.
fn transaction_to_total_order(out: &mut Vec<u8>, s: &SourceInfo) {
    out.extend_from_slice(b",\"transaction\":{\"id\":\"");
    if s.xid != 0 {
        write_int(out, s.xid);
        out.push(b':');
    }
    write_int(out, s.commit_lsn.as_u64());
    out.extend_from_slice(b"\",\"total_order\":");
}

fn plain(ev: &ChangeEvent, out: &mut Vec<u8>) {
    let table = ev.table.as_deref();
    let s = &ev.source;
    out.extend_from_slice(b"{\"op\":");
    write_str(out, ev.op.name());
    out.extend_from_slice(b",\"schema\":");
    opt_str(out, table.map(|t| &*t.schema));
    out.extend_from_slice(b",\"table\":");
    opt_str(out, table.map(|t| &*t.table));
    out.extend_from_slice(b",\"commit_lsn\":");
    write_display_str(out, s.commit_lsn);
    out.extend_from_slice(b",\"lsn\":");
    write_display_str(out, s.lsn);
    out.extend_from_slice(b",\"xid\":");
    write_int(out, s.xid);
    out.extend_from_slice(b",\"commit_time\":");
    match s
        .commit_time
        .and_then(|t| TimestampTz::from_micros_since_2000(t.as_pg_micros()))
    {
        Some(t) => write_display_str(out, t.json_text()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"index\":");
    write_int(out, ev.index);
    out.extend_from_slice(b",\"before\":");
    write_row(out, table, ev.before.as_ref(), true);
    out.extend_from_slice(b",\"after\":");
    write_row(out, table, ev.after.as_ref(), true);
    if let (Some(table), Some(after)) = (table, ev.after.as_ref()) {
        let mut toast = table
            .columns
            .iter()
            .zip(after.cells())
            .filter(|(_, cell)| is_unchanged_toast(*cell))
            .peekable();
        if toast.peek().is_some() {
            out.extend_from_slice(b",\"unchanged_toast\":[");
            for (i, (col, _)) in toast.enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, &col.name);
            }
            out.push(b']');
        }
    }
    if let Some(change) = &ev.schema_change {
        schema::plain_schema_change(out, table, change);
    }
    if let Some(m) = &ev.message {
        out.extend_from_slice(b",\"message\":{\"transactional\":");
        out.extend_from_slice(if m.transactional { b"true" } else { b"false" });
        out.extend_from_slice(b",\"prefix\":");
        write_str(out, &m.prefix);
        out.extend_from_slice(b",\"content\":");
        write_base64(out, &m.content);
        out.push(b'}');
    }
    out.push(b'}');
}

fn opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => write_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

#[cfg(test)]
mod tests;
