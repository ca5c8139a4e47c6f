//! The NATS JetStream sink: every record a change event becomes is one
//! message on a subject of its table, published exactly once.
//!
//! # Exactly once without a transaction
//!
//! * Every message carries `Nats-Msg-Id` = `{job}:{commit LSN}:{index}`
//!   (with a suffix for the extra records of a delete's tombstone, a key
//!   change, or a transaction boundary). A replay after a crash or an error
//!   publishes the same ids, and JetStream drops the repeats within the
//!   stream's duplicate window; the sink counts them
//!   ([`NatsSink::duplicates`]). A snapshot read of a table with a key is
//!   known by its snapshot's epoch and its key instead (see `read_id`), so
//!   a chunk read again after a crash repeats none of its rows.
//! * Publishing is asynchronous, with at most
//!   [`max_in_flight`](NatsSinkOptions::max_in_flight) publishes waiting for
//!   their PubAck. [`flush`](Sink::flush) returns only when every message
//!   has its PubAck, so a checkpoint never covers a message JetStream has
//!   not stored.
//! * Every message but the first after connecting carries
//!   `Nats-Expected-Last-Msg-Id`, the id of the message before it. If a
//!   message is lost in flight (a dropped connection, a server restart),
//!   JetStream refuses every later one instead of storing it ahead of the
//!   lost one; the sink reports a transient error, the pipeline
//!   [resets](Sink::reset) it (a new connection) and replays from the last
//!   acknowledged message. So the stream holds the job's messages in
//!   commit order, each once — and a stream takes one job's messages only.
//!   A message refused only because the one before it was a duplicate (a
//!   replay that repeats part of what it delivered) is sent again, chained
//!   to the last message stored (the `publisher` module says how).
//! * The job refuses to start when the checkpoint interval plus
//!   [`DEDUPE_MARGIN`] is not shorter than the stream's duplicate window,
//!   since a replay could then reach back past it.

mod error;
mod options;
mod publisher;
mod stream;
mod subject;
mod tls;

use std::sync::Arc;

use async_nats::jetstream;
use bytes::Bytes;
use tokio::sync::watch;

use crate::encoding::{DebeziumOptions, JsonEncoder, JsonFormat, Record, RecordPart};
use crate::event::{ChangeEvent, Operation, TransactionStatus};

use super::{Sink, SinkError};
pub use error::NatsError;
pub use options::{
    NatsAuth, NatsSinkOptions, NatsStorage, NatsStreamOptions, NatsTls, NatsTlsMode, DEDUPE_MARGIN,
    DEFAULT_SUBJECT,
};
use publisher::{Outgoing, Publisher};
pub use subject::TemplateError;
use subject::{partition_of, SubjectTemplate};

/// The header with the commit LSN of the record's transaction (`X/Y`).
pub const HEADER_COMMIT_LSN: &str = "Pgcdc-Commit-Lsn";
/// The header with the event's operation (`insert`, `update`, ...).
pub const HEADER_OP: &str = "Pgcdc-Op";
/// The header that marks a record other than the event's own change:
/// `tombstone`, `key-delete`, `key-create`.
pub const HEADER_RECORD: &str = "Pgcdc-Record";

/// Publishes change events into a JetStream stream; see the
/// [module docs](self).
pub struct NatsSink {
    options: NatsSinkOptions,
    template: SubjectTemplate,
    encoder: JsonEncoder,
    /// The keys that pick partitions when the payload has none (plain format).
    key_encoder: Option<JsonEncoder>,
    /// The keys in the ids of snapshot reads (Debezium's default key JSON,
    /// whatever the payload's format).
    id_keys: JsonEncoder,
    /// Debezium `key`: payloads are `{"key":…,"value":…}`, with tombstones.
    keyed: bool,
    stream: String,
    conn: Option<Publisher>,
    duplicates: u64,
    unlogged_duplicates: u64,
    unlogged_resent: u64,
    closed: bool,
}

/// A client, a JetStream context on it for the stream, and what counts
/// its disconnects.
struct Connection {
    client: async_nats::Client,
    js: jetstream::Context,
    disconnects: watch::Receiver<u64>,
}

impl std::fmt::Debug for NatsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSink")
            .field("options", &self.options)
            .field("stream", &self.stream)
            .field("conn", &self.conn)
            .field("duplicates", &self.duplicates)
            .finish_non_exhaustive()
    }
}

impl NatsSink {
    /// Connects, creates the stream if it is missing (and allowed) and
    /// checks it: its subjects must cover the sink's, and its duplicate
    /// window must outlast a replay (see [`DEDUPE_MARGIN`]).
    pub async fn connect(options: NatsSinkOptions) -> Result<NatsSink, SinkError> {
        let template = parse_template(&options)?;
        let conn = connect(&options).await?;
        let report = stream::ensure(&conn.js, &options, &template, false).await?;
        tracing::info!("nats sink: {}", report.line);
        let keyed = matches!(&options.format, JsonFormat::Debezium(d) if d.key);
        let key_encoder = match (&options.format, options.partitions > 1) {
            (JsonFormat::Plain, true) => Some(JsonEncoder::new(JsonFormat::Debezium(
                DebeziumOptions::default(),
            ))),
            _ => None,
        };
        let stream = options.stream_name();
        let publisher = publisher_on(conn, &options, &stream).await?;
        Ok(NatsSink {
            encoder: JsonEncoder::new(options.format.clone()),
            stream,
            template,
            key_encoder,
            id_keys: JsonEncoder::new(JsonFormat::Debezium(DebeziumOptions::default())),
            keyed,
            conn: Some(publisher),
            duplicates: 0,
            unlogged_duplicates: 0,
            unlogged_resent: 0,
            closed: false,
            options,
        })
    }

    /// What [`connect`](Self::connect) would do, without creating
    /// anything: one line on the stream (for `pgcdc validate`), or the
    /// error `connect` would stop with.
    pub async fn plan(options: &NatsSinkOptions) -> Result<String, SinkError> {
        let template = parse_template(options)?;
        let conn = connect(options).await?;
        Ok(stream::ensure(&conn.js, options, &template, true)
            .await?
            .line)
    }

    /// Messages JetStream dropped as repeats (a replay after a restart or
    /// an error) since the sink was opened.
    pub fn duplicates(&self) -> u64 {
        self.duplicates + self.conn.as_ref().map_or(0, |c| c.pending_duplicates())
    }

    /// Publishes one record.
    async fn publish(
        &mut self,
        record: &Record<'_>,
        lines: &mut crate::encoding::LineEncoder<'_>,
        subject: &mut String,
        key: &mut Vec<u8>,
    ) -> Result<(), SinkError> {
        let ev = record.event;
        let mut payload = Vec::with_capacity(256);
        if self.keyed {
            payload.extend_from_slice(b"{\"key\":");
            self.encoder.write_key(record, &mut payload);
            payload.extend_from_slice(b",\"value\":");
            lines.write_value(record, &mut payload);
            let at = payload.len();
            payload.extend_from_slice(b",\"headers\":");
            if !self.encoder.write_headers(record, &mut payload) {
                payload.truncate(at);
            }
            payload.push(b'}');
        } else {
            lines.write_value(record, &mut payload);
        }
        // The subject.
        match (&ev.op, &ev.table) {
            (Operation::Transaction, _) => *subject = self.template.transaction_subject(),
            (_, Some(table)) => {
                let partition = if self.options.partitions > 1 {
                    key.clear();
                    let encoder = self.key_encoder.as_ref().unwrap_or(&self.encoder);
                    match encoder.write_key(record, key) {
                        true => partition_of(key, self.options.partitions),
                        false => 0,
                    }
                } else {
                    0
                };
                self.template
                    .render(&table.schema, &table.table, partition, subject);
            }
            (_, None) => *subject = self.template.message_subject(),
        }
        let lsn = ev.source.commit_lsn.to_string();
        let id = read_id(&self.options.job, &self.id_keys, record, key)
            .unwrap_or_else(|| message_id(&self.options.job, &lsn, record));
        let message = Outgoing {
            subject: async_nats::Subject::from(subject.as_str()),
            payload: Bytes::from(payload),
            id,
            lsn,
            op: ev.op.name(),
            record: part_name(record.part),
        };
        let conn = self.conn.as_mut().ok_or(SinkError::Closed)?;
        conn.send(message)
            .await
            .map_err(|e| SinkError::Nats(e).at(ev))?;
        Ok(())
    }

    /// Moves the publisher's counts into the sink's.
    fn count(&mut self) {
        if let Some(conn) = self.conn.as_mut() {
            let d = conn.take_duplicates();
            self.duplicates += d;
            self.unlogged_duplicates += d;
            self.unlogged_resent += conn.take_resent();
        }
    }
}

/// The id of a snapshot read whose read has an epoch
/// ([`Position::read_epoch`](crate::event::Position::read_epoch)) and whose
/// table has a key: `{job}:read:{epoch}:{"schema"}.{"table"}:{key JSON}`.
/// A chunk read again after a crash (its rows delivered before the crash,
/// but no checkpoint covered them) gives its rows the same ids, so
/// JetStream drops those it already holds; a row that appeared meanwhile is
/// new. `None`: use the position's id.
fn read_id(
    job: &str,
    keys: &JsonEncoder,
    record: &Record<'_>,
    buf: &mut Vec<u8>,
) -> Option<String> {
    let ev = record.event;
    if ev.op != Operation::Read
        || record.part != RecordPart::Change
        || ev.position.read_epoch == cdc_core::Lsn::INVALID
    {
        return None;
    }
    let table = ev.table.as_ref()?;
    buf.clear();
    if !keys.write_key(record, buf) {
        return None;
    }
    let key = std::str::from_utf8(buf).ok()?;
    let schema = serde_json::to_string(&*table.schema).ok()?;
    let name = serde_json::to_string(&*table.table).ok()?;
    Some(format!(
        "{job}:read:{}:{schema}.{name}:{key}",
        ev.position.read_epoch
    ))
}

/// `{job}:{commit LSN}:{index}`, and a suffix for the records an event
/// becomes besides its own change.
fn message_id(job: &str, commit_lsn: &str, record: &Record<'_>) -> String {
    let ev = record.event;
    let suffix = match (ev.op, record.part) {
        (Operation::Transaction, _) => match ev.boundary.as_deref().map(|b| b.status) {
            Some(TransactionStatus::End) => ":end",
            _ => ":begin",
        },
        (_, RecordPart::Change) => "",
        (_, RecordPart::Tombstone) => ":tombstone",
        (_, RecordPart::KeyChangeDelete) => ":key-delete",
        (_, RecordPart::KeyChangeCreate) => ":key-create",
    };
    format!("{job}:{commit_lsn}:{}{suffix}", ev.index)
}

fn part_name(part: RecordPart) -> Option<&'static str> {
    match part {
        RecordPart::Change => None,
        RecordPart::Tombstone => Some("tombstone"),
        RecordPart::KeyChangeDelete => Some("key-delete"),
        RecordPart::KeyChangeCreate => Some("key-create"),
    }
}

fn parse_template(options: &NatsSinkOptions) -> Result<SubjectTemplate, SinkError> {
    if options.job.is_empty() || options.job.contains(['\r', '\n']) {
        return Err(SinkError::Nats(NatsError::permanent(
            "job",
            format!("the job name {:?} cannot start a Nats-Msg-Id: it must be non-empty and on one line", options.job),
        )));
    }
    SubjectTemplate::parse(&options.subject, &options.prefix, options.partitions)
        .map_err(|e| SinkError::Nats(NatsError::permanent("subject", e.to_string())))
}

/// A publisher on `conn` for the sink's stream.
async fn publisher_on(
    conn: Connection,
    options: &NatsSinkOptions,
    stream: &str,
) -> Result<Publisher, SinkError> {
    Publisher::new(
        conn.client,
        conn.disconnects,
        options.max_in_flight,
        options.ack_timeout,
        stream.to_owned(),
    )
    .await
    .map_err(SinkError::Nats)
}

/// A client and a JetStream context for `options`.
async fn connect(options: &NatsSinkOptions) -> Result<Connection, SinkError> {
    use crate::sinks::nats::options::NatsAuth;
    let servers = &options.servers;
    let (tx, rx) = watch::channel(0u64);
    let tx = Arc::new(tx);
    let mut connect = async_nats::ConnectOptions::new()
        .name("pgcdc")
        // The sink's subjects are percent-encoded by the template.
        .skip_subject_validation(true)
        .connection_timeout(options.ack_timeout)
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                match event {
                    async_nats::Event::Disconnected => {
                        tracing::warn!("nats sink: disconnected from the server");
                        tx.send_modify(|n| *n += 1);
                    }
                    async_nats::Event::Connected => tracing::info!("nats sink: connected"),
                    other => tracing::info!("nats sink: {other}"),
                }
            }
        });
    connect = match &options.auth {
        NatsAuth::None => connect,
        NatsAuth::UserPassword { user, password } => {
            connect.user_and_password(user.clone(), password.clone())
        }
        NatsAuth::Token(token) => connect.token(token.clone()),
        NatsAuth::NkeySeedFile(path) => {
            let seed = tokio::fs::read_to_string(path).await.map_err(|e| {
                SinkError::Nats(NatsError::permanent(
                    "connect",
                    format!("reading nkey_seed_file {}: {e}", path.display()),
                ))
            })?;
            connect.nkey(seed.trim().to_owned())
        }
        NatsAuth::CredentialsFile(path) => connect.credentials_file(path).await.map_err(|e| {
            SinkError::Nats(NatsError::permanent(
                "connect",
                format!("reading credentials_file {}: {e}", path.display()),
            ))
        })?,
    };
    if let Some(config) = tls::client_config(&options.tls)
        .map_err(|e| SinkError::Nats(NatsError::permanent("connect", e)))?
    {
        connect = connect.require_tls(true).tls_client_config(config);
    }
    let addrs: Vec<async_nats::ServerAddr> = servers
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .map_err(|e| {
            SinkError::Nats(NatsError::permanent(
                "connect",
                format!(
                    "servers {servers:?}: {e}; write them as nats://host:port or tls://host:port"
                ),
            ))
        })?;
    let client = connect
        .connect(addrs)
        .await
        .map_err(|e| SinkError::Nats(NatsError::connect(servers, &options.auth, &e)))?;
    let js = jetstream::ContextBuilder::new()
        .timeout(options.ack_timeout)
        .build(client.clone());
    Ok(Connection {
        client,
        js,
        disconnects: rx,
    })
}

#[async_trait::async_trait]
impl Sink for NatsSink {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        if self.closed {
            return Err(SinkError::Closed);
        }
        let encoder = self.encoder.clone();
        let mut lines = encoder.lines_at(encoder.now());
        let mut subject = String::new();
        let mut key = Vec::new();
        for ev in batch {
            for record in encoder.records(ev) {
                if record.is_tombstone() && !self.keyed {
                    continue;
                }
                self.publish(&record, &mut lines, &mut subject, &mut key)
                    .await?;
            }
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        if self.closed {
            return Err(SinkError::Closed);
        }
        let flushed = match self.conn.as_mut() {
            Some(conn) => conn.flush().await.map_err(SinkError::Nats),
            None => Err(SinkError::Closed),
        };
        self.count();
        flushed?;
        if self.unlogged_resent > 0 {
            tracing::info!(
                stream = %self.stream,
                "nats sink: sent {} messages again that JetStream refused after a duplicate (a replay that repeats part of what it delivered, such as a snapshot chunk read again)",
                self.unlogged_resent
            );
            self.unlogged_resent = 0;
        }
        if self.unlogged_duplicates > 0 {
            tracing::info!(
                stream = %self.stream,
                total = self.duplicates,
                "nats sink: JetStream dropped {} duplicate messages (a replay)",
                self.unlogged_duplicates
            );
            self.unlogged_duplicates = 0;
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        if self.closed {
            return Ok(());
        }
        let flushed = self.flush().await;
        self.closed = true;
        self.conn = None;
        flushed
    }

    fn can_reset(&self) -> bool {
        true
    }

    fn duplicates_dropped(&self) -> u64 {
        self.duplicates()
    }

    async fn reset(&mut self) -> Result<(), SinkError> {
        // What is in flight is replayed: the ids make repeats harmless.
        self.count();
        self.conn = None;
        let conn = connect(&self.options).await?;
        self.conn = Some(publisher_on(conn, &self.options, &self.stream).await?);
        self.closed = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cdc_core::{Lsn, Value};

    use super::*;
    use crate::event::{ColumnSchema, Position, Row, SourceInfo, TableSchema};

    fn read(epoch: Lsn, key: i64, commit: u64) -> ChangeEvent {
        let table = Arc::new(TableSchema {
            facts: Default::default(),
            oid: 1,
            schema: "public".into(),
            table: "my \"t\"".into(),
            columns: vec![ColumnSchema {
                name: "id".into(),
                type_oid: cdc_core::types::INT8,
                type_modifier: -1,
                is_key: true,
            }],
        });
        ChangeEvent {
            op: Operation::Read,
            table: Some(table),
            before: None,
            after: Some(Row::from_values(vec![Value::Int8(key)])),
            message: None,
            schema_change: None,
            source: SourceInfo {
                commit_lsn: Lsn::from_u64(commit),
                lsn: Lsn::from_u64(commit),
                xid: 3,
                commit_time: None,
                database: "db".into(),
                slot: "s".into(),
            },
            index: 4,
            position: Position {
                read_epoch: epoch,
                ..Position::default()
            },
            boundary: None,
        }
    }

    fn id_of(ev: &ChangeEvent) -> String {
        let keys = JsonEncoder::new(JsonFormat::Debezium(DebeziumOptions::default()));
        let record = keys.records(ev).next().unwrap();
        let mut buf = Vec::new();
        read_id("job", &keys, &record, &mut buf)
            .unwrap_or_else(|| message_id("job", &ev.source.commit_lsn.to_string(), &record))
    }

    #[test]
    fn a_read_with_an_epoch_is_known_by_its_key_not_by_where_it_was_merged() {
        let epoch = Lsn::from_u64(0x1_0000_00A0);
        assert_eq!(
            id_of(&read(epoch, 7, 0x500)),
            r#"job:read:1/A0:"public"."my \"t\"":{"id":7}"#
        );
        // Read again after a crash, merged into another transaction.
        assert_eq!(id_of(&read(epoch, 7, 0x900)), id_of(&read(epoch, 7, 0x500)));
        assert_ne!(id_of(&read(epoch, 8, 0x500)), id_of(&read(epoch, 7, 0x500)));
        // Another snapshot of the same rows.
        assert_ne!(
            id_of(&read(Lsn::from_u64(0x200), 7, 0x500)),
            id_of(&read(epoch, 7, 0x500))
        );
        // No epoch: the position's id.
        assert_eq!(id_of(&read(Lsn::INVALID, 7, 0x500)), "job:0/500:4");
    }
}
