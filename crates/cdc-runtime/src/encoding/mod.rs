//! JSON encodings of [`ChangeEvent`]s: Debezium's records and a plain form.
//!
//! Both write straight into a caller's reused `Vec<u8>`, with no intermediate
//! `serde_json::Value`. [`JsonEncoder::encode_line`] adds the `\n` of JSON lines.
//!
//! # Debezium ([`JsonFormat::Debezium`])
//!
//! The records of the Debezium PostgreSQL connector as its JSON converter
//! writes them with `schemas.enable=false`: see [`debezium`] for the
//! envelope, keys, tombstones, key changes and transaction metadata.
//! Values: as the Debezium PostgreSQL connector (2.7) writes them in every
//! `decimal.handling.mode`, `binary.handling.mode`, `time.precision.mode`,
//! `interval.handling.mode` and `hstore.handling.mode` (see
//! [`DebeziumOptions`]); the per-type rules and the deliberate differences
//! are in the `value` module's docs. An unchanged TOAST column is the
//! `unavailable.value.placeholder`, typed per column (never null); the
//! `NOT NULL` columns a `before` does not carry (replica identity not
//! `FULL`) get their type's default, as Debezium's required fields do.
//!
//! With [`DebeziumOptions::schemas_enable`] each value (and key) is what
//! Kafka Connect's JSON converter writes with `schemas.enable=true`:
//! `{"schema":<the Connect schema>,"payload":<the value>}`, the schema
//! Debezium 2.7's (see `connect_schema/`); a logical message's is
//! Debezium's `MessageValue`. Schema changes and transaction boundaries
//! carry `"schema":null`; tombstones stay `null`.
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
//! Transaction boundaries are not written.

mod connect_schema;
pub mod debezium;
mod json;
mod options;
mod schema;
mod value;

use cdc_core::{TimestampTz, Value};

use crate::event::{Cell, ChangeEvent, Operation, Row, TableSchema};
pub use debezium::{ProcessingTime, Record, RecordPart, Records};
use json::{write_base64, write_display_str, write_int, write_str};
pub use options::{
    BinaryHandlingMode, DebeziumOptions, DecimalHandlingMode, HstoreHandlingMode,
    IntervalHandlingMode, OptionError, Placeholder, SkippedOperations, TimePrecisionMode, SETTINGS,
    VERSION,
};
pub use value::UNAVAILABLE_VALUE;
use value::{write_cell, ValueStyle};

/// Which JSON shape to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonFormat {
    /// Debezium's change event records (see [`debezium`]).
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
/// #     commit_time: None, database: "db".into(), slot: "s".into() }, index: 0,
/// #   position: Default::default(), boundary: None };
/// let encoder = JsonEncoder::new(JsonFormat::Plain);
/// let mut buf = Vec::new();
/// encoder.encode_line(&event, &mut buf);
/// assert!(buf.ends_with(b"}\n"));
/// ```
#[derive(Debug, Clone)]
pub struct JsonEncoder {
    format: JsonFormat,
    debezium: Option<debezium::Debezium>,
}

impl JsonEncoder {
    /// An encoder for `format`.
    pub fn new(format: JsonFormat) -> Self {
        let debezium = match &format {
            JsonFormat::Debezium(opts) => Some(debezium::Debezium::new(opts.clone())),
            JsonFormat::Plain => None,
        };
        JsonEncoder { format, debezium }
    }

    /// The format.
    pub fn format(&self) -> &JsonFormat {
        &self.format
    }

    /// Appends every record `event` becomes as a JSON line (nothing for an
    /// event the format leaves out, see [`writes`](Self::writes)).
    pub fn encode_line(&self, event: &ChangeEvent, out: &mut Vec<u8>) {
        self.lines_at(self.now()).encode_line(event, out);
    }

    /// Whether this format writes anything for `event`: the Debezium
    /// format leaves out skipped operations (`skipped.operations`),
    /// schema-change events unless [`DebeziumOptions::schema_changes`] is
    /// set and transaction boundaries unless
    /// [`DebeziumOptions::provide_transaction_metadata`] is; the plain
    /// format leaves out transaction boundaries.
    pub fn writes(&self, event: &ChangeEvent) -> bool {
        match &self.debezium {
            Some(d) => d.writes(event),
            None => event.op != Operation::Transaction,
        }
    }

    /// The records `event` becomes (none when the format leaves it out;
    /// in the plain format, one). A sink that carries keys natively writes
    /// each with [`write_key`](Self::write_key),
    /// [`write_value`](LineEncoder::write_value) and
    /// [`write_headers`](Self::write_headers); a sink without keys skips
    /// tombstones.
    pub fn records<'e>(&self, event: &'e ChangeEvent) -> Records<'e> {
        match &self.debezium {
            Some(d) => d.records(event),
            None if self.writes(event) => Records::one(event),
            None => Records::none(event),
        }
    }

    /// Appends the record's key as JSON (`null` when it has none, and in
    /// the plain format); returns whether it has one.
    pub fn write_key(&self, record: &Record<'_>, out: &mut Vec<u8>) -> bool {
        match &self.debezium {
            Some(d) => d.write_key(record, out),
            None => {
                out.extend_from_slice(b"null");
                false
            }
        }
    }

    /// Appends the record's headers as a JSON object if it has any (a key
    /// change's `__debezium.newkey` / `__debezium.oldkey`); returns whether
    /// it wrote them.
    pub fn write_headers(&self, record: &Record<'_>, out: &mut Vec<u8>) -> bool {
        self.debezium
            .as_ref()
            .is_some_and(|d| d.write_headers(record, out))
    }

    /// Appends every event of `events` as JSON lines, with one processing
    /// time (Debezium's top-level `ts_ms`) for all of them: the clock is read
    /// once per call instead of once per event.
    pub fn encode_lines(&self, events: &[ChangeEvent], out: &mut Vec<u8>) {
        let mut lines = self.lines_at(self.now());
        for event in events {
            lines.encode_line(event, out);
        }
    }

    /// [`lines_at`](Self::lines_at) with the processing time in
    /// milliseconds since the Unix epoch.
    pub fn lines(&self, now_ms: i64) -> LineEncoder<'_> {
        self.lines_at(ProcessingTime::from_unix_millis(now_ms))
    }

    /// An encoder for a run of events with one processing time `now`
    /// (see [`now`](Self::now)). It writes the same bytes as
    /// [`encode_line_at`](Self::encode_line_at), but renders what consecutive
    /// events share (the Debezium `source` block of their transaction and
    /// table, the transaction id, the column names) once instead of for every
    /// event.
    pub fn lines_at(&self, now: ProcessingTime) -> LineEncoder<'_> {
        LineEncoder {
            encoder: self,
            now,
            envelope: debezium::Envelope::default(),
        }
    }

    /// Like [`encode_line`](Self::encode_line) with the processing time
    /// given in milliseconds since the Unix epoch.
    pub fn encode_line_at(&self, event: &ChangeEvent, now_ms: i64, out: &mut Vec<u8>) {
        self.lines(now_ms).encode_line(event, out);
    }

    /// Appends `event` as one JSON object (no newline): in the Debezium
    /// format the value of the event's own record (an update is not split
    /// at a key change, no tombstone follows a delete: see
    /// [`records`](Self::records)).
    pub fn encode(&self, event: &ChangeEvent, out: &mut Vec<u8>) {
        self.lines_at(self.now()).encode(event, out);
    }

    /// The processing time to encode with: now for the Debezium format,
    /// the epoch for the plain format, which does not write it (so it does
    /// not read the clock).
    pub fn now(&self) -> ProcessingTime {
        match self.format {
            JsonFormat::Debezium(_) => ProcessingTime::now(),
            JsonFormat::Plain => ProcessingTime::EPOCH,
        }
    }

    /// [`now`](Self::now) in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        self.now().millis()
    }

    /// Like [`encode`](Self::encode) with the processing time (Debezium's
    /// top-level `ts_ms`) given in milliseconds, for reproducible output.
    pub fn encode_at(&self, event: &ChangeEvent, now_ms: i64, out: &mut Vec<u8>) {
        self.lines(now_ms).encode(event, out);
    }
}

/// Encodes events as JSON lines with one processing time; see
/// [`JsonEncoder::lines_at`].
#[derive(Debug)]
pub struct LineEncoder<'e> {
    encoder: &'e JsonEncoder,
    now: ProcessingTime,
    envelope: debezium::Envelope,
}

impl LineEncoder<'_> {
    /// The processing time this encoder writes, in milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.now.millis()
    }

    /// The processing time this encoder writes.
    pub fn now(&self) -> ProcessingTime {
        self.now
    }

    /// Appends every record `event` becomes as a JSON line.
    pub fn encode_line(&mut self, event: &ChangeEvent, out: &mut Vec<u8>) {
        match &self.encoder.debezium {
            Some(d) => d.write_lines(event, self.now, &mut self.envelope, out),
            None if self.encoder.writes(event) => {
                plain(event, out);
                out.push(b'\n');
            }
            None => {}
        }
    }

    /// Appends the value of `record` (`null` for a tombstone).
    pub fn write_value(&mut self, record: &Record<'_>, out: &mut Vec<u8>) {
        match &self.encoder.debezium {
            Some(d) => d.write_value(record, self.now, &mut self.envelope, out),
            None => plain(record.event, out),
        }
    }

    /// Appends `event` as one JSON object (see [`JsonEncoder::encode`]).
    pub fn encode(&mut self, event: &ChangeEvent, out: &mut Vec<u8>) {
        let record = Record {
            event,
            part: RecordPart::Change,
        };
        self.write_value(&record, out);
    }
}

/// A plain row object `{"col":value,…}`; with `skip_toast`, unchanged
/// TOAST columns are left out.
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
