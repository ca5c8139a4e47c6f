//! Applies changes to tables of a target PostgreSQL database.

use std::collections::HashMap;

use cdc_core::Lsn;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

use checkpoint_api::{Checkpoint, CheckpointError, CheckpointMeta, Lease};
use checkpoint_pg::PgCheckpointStore;

use crate::event::{ChangeEvent, Operation, TableSchema};
use crate::replication::ReplicationConfig;
use crate::tls_connect::PgClientSettings;

use super::{Sink, SinkError};

mod commit;
mod ddl;
mod options;
mod session;
mod statements;
mod text;

use session::{backend_pid, end_session};
use statements::{delete_by_key, upsert};
use text::TextParam;

pub(crate) use cdc_core::sql::quote_ident;
pub use options::{DroppedColumns, PgTableSinkOptions, TableName};

/// Applies change events to tables of a target database, idempotently.
///
/// * Insert, update and snapshot read: `INSERT … ON CONFLICT (key) DO UPDATE
///   SET …` (an upsert), so replaying an event leaves the same row. Unchanged
///   TOAST columns are left out of both the column list and the `SET` list,
///   so the target keeps its value. An update that changed the key first
///   deletes the row under the old key.
/// * Delete: `DELETE … WHERE key = …`. Truncate: `TRUNCATE`. Messages are ignored.
/// * Schema change: the target table follows in the same transaction (see
///   `ddl` and the README's Schema changes section): added columns
///   are added, renamed columns and tables renamed, a type change applied
///   with a cast (`USING col::type`), a dropped column kept or dropped as
///   [`PgTableSinkOptions::dropped_columns`] says. A change the target
///   cannot follow stops the sink with [`SinkError::SchemaChange`].
/// * One transaction per [`write`](Sink::write); the statements of a batch are
///   prepared once per shape and pipelined. A write that returns `Ok` is
///   committed, so [`flush`](Sink::flush) has nothing left to do.
/// * Every identifier is quoted. Values are sent as text parameters (the
///   types' input syntax), typed by the target columns.
///
/// The target tables must exist with a primary key. The key is, in order of
/// preference: the columns configured with [`PgTableSinkOptions::key`], the
/// target table's primary key (looked up once per table), or the source's
/// replica identity columns. (With `REPLICA IDENTITY FULL` the source marks
/// every column as key, so the target's primary key is what makes upserts
/// work there.)
pub struct PgTableSink {
    client: Option<Client>,
    options: PgTableSinkOptions,
    statements: HashMap<String, Statement>,
    /// Primary-key column names of target tables (`None`: the table has none).
    target_keys: HashMap<TableName, Option<Vec<String>>>,
    /// With exactly-once: the last `(commit LSN, index)` applied, once loaded
    /// (`Some(None)`: nothing applied yet).
    applied: Option<Option<(Lsn, u32)>>,
    /// The checkpoint store in the target database, when checkpoints are
    /// committed together with the writes.
    checkpoints: Option<PgCheckpointStore>,
    /// With `checkpoints`: a transaction is open, holding the writes since
    /// the last checkpoint.
    open: bool,
    /// How to connect again on [`Sink::reset`] (`None`: made with
    /// [`PgTableSink::new`] from a client, so it cannot reset).
    config: Option<ReplicationConfig>,
    /// The checkpoint whose `COMMIT` failed with a lost connection: the
    /// server may have committed it anyway, so a retry looks first.
    commit_unknown: Option<checkpoint_api::CheckpointId>,
    /// The server process of `client` (`None` when unknown): a reset ends it
    /// for sure before replaying, so a write that timed out cannot commit
    /// behind the replay's back.
    backend_pid: Option<i32>,
}

const PROGRESS_DDL: &str = "CREATE SCHEMA IF NOT EXISTS pgcdc; \
     CREATE TABLE IF NOT EXISTS pgcdc.sink_progress (\
         sink text PRIMARY KEY, commit_lsn pg_lsn NOT NULL, event_index bigint NOT NULL, \
         updated_at timestamptz NOT NULL DEFAULT now())";
const PROGRESS_UPSERT: &str = "INSERT INTO pgcdc.sink_progress (sink, commit_lsn, event_index) \
     VALUES ($1, $2::pg_lsn, $3::bigint) ON CONFLICT (sink) DO UPDATE \
     SET commit_lsn = EXCLUDED.commit_lsn, event_index = EXCLUDED.event_index, updated_at = now()";

impl std::fmt::Debug for PgTableSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTableSink")
            .field("open", &self.client.is_some())
            .field("options", &self.options)
            .field("prepared_statements", &self.statements.len())
            .finish()
    }
}

impl PgTableSink {
    /// A sink writing through `client`.
    pub fn new(client: Client, options: PgTableSinkOptions) -> Self {
        PgTableSink {
            client: Some(client),
            options,
            statements: HashMap::new(),
            target_keys: HashMap::new(),
            applied: None,
            checkpoints: None,
            open: false,
            config: None,
            commit_unknown: None,
            backend_pid: None,
        }
    }

    /// Commits checkpoints together with the writes from now on: the sink
    /// keeps one transaction open from one checkpoint to the next, and
    /// [`Sink::commit_checkpoint`] writes the checkpoint into `store` inside
    /// it and commits both. Delivery is then exactly once, and the target
    /// shows the changes of a checkpoint all at once, when it commits.
    ///
    /// Refused unless the sink is exactly-once (its progress row also makes
    /// replays from older checkpoints safe) and `store` keeps its tables in
    /// the target database.
    pub async fn commit_with_checkpoints(
        &mut self,
        store: PgCheckpointStore,
    ) -> Result<(), SinkError> {
        if self.options.progress.is_none() {
            return Err(SinkError::NotCommitting(
                "the sink is not exactly-once (set exactly_once = true)".into(),
            ));
        }
        if !self.same_database(&store).await? {
            return Err(SinkError::NotCommitting(
                "the checkpoint store is in another database than the sink's target".into(),
            ));
        }
        self.checkpoints = Some(store);
        Ok(())
    }

    /// Whether `store` keeps its tables in this sink's target database.
    pub async fn same_database(&self, store: &PgCheckpointStore) -> Result<bool, SinkError> {
        let client = self.client.as_ref().ok_or(SinkError::Closed)?;
        let mine = checkpoint_pg::database_identity(client).await?;
        let theirs = store
            .database_identity()
            .await
            .map_err(|e| SinkError::NotCommitting(e.to_string()))?;
        Ok(mine == theirs)
    }

    /// After a failed statement: the open transaction is gone, and so is
    /// the progress it recorded.
    async fn abandon(&mut self) {
        if std::mem::take(&mut self.open) {
            if let Some(client) = self.client.as_ref() {
                let _ = client.batch_execute("ROLLBACK").await;
            }
        }
        self.applied = None;
    }

    /// With exactly-once, the position recorded by earlier writes (loaded
    /// once; the progress table is created if missing).
    async fn load_progress(&mut self) -> Result<Option<(Lsn, u32)>, SinkError> {
        let Some(name) = self.options.progress.clone() else {
            return Ok(None);
        };
        if let Some(applied) = self.applied {
            return Ok(applied);
        }
        let client = self.client.as_ref().ok_or(SinkError::Closed)?;
        client.batch_execute(PROGRESS_DDL).await?;
        let row = client
            .query_opt(
                "SELECT commit_lsn::text, event_index FROM pgcdc.sink_progress WHERE sink = $1",
                &[&name],
            )
            .await?;
        let applied = match row {
            Some(r) => {
                let lsn: String = r.get(0);
                let index: i64 = r.get(1);
                let lsn = lsn.parse::<Lsn>().map_err(|_| {
                    SinkError::Malformed("pgcdc.sink_progress holds an invalid LSN")
                })?;
                let index = u32::try_from(index).map_err(|_| {
                    SinkError::Malformed("pgcdc.sink_progress holds an invalid index")
                })?;
                Some((lsn, index))
            }
            None => None,
        };
        if let Some((lsn, index)) = applied {
            tracing::info!(sink = %name, commit_lsn = %lsn, index, "postgres sink resumes after its recorded progress");
        }
        self.applied = Some(applied);
        Ok(applied)
    }

    /// Looks up (once) the primary key of every target table in `batch`.
    async fn learn_target_keys(&mut self, batch: &[&ChangeEvent]) -> Result<(), SinkError> {
        for ev in batch {
            let Some(table) = ev.table.as_deref() else {
                continue;
            };
            let target = self.target(table);
            if self.target_keys.contains_key(&target) {
                continue;
            }
            let client = self.client.as_ref().ok_or(SinkError::Closed)?;
            let rows = client
                .query(
                    "SELECT a.attname::text FROM pg_catalog.pg_index i \
                     JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
                     WHERE i.indisprimary AND i.indrelid = to_regclass($1) \
                     ORDER BY array_position(i.indkey::int2[], a.attnum)",
                    &[&target.quoted()],
                )
                .await?;
            let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
            self.target_keys
                .insert(target, (!names.is_empty()).then_some(names));
        }
        Ok(())
    }

    /// Connects (`config` in libpq `key=value` or URL form, with the keys and
    /// the TLS meanings of the replication connection: `sslmode` up to
    /// `verify-full`, `sslrootcert`; see [`crate::tls_connect`]) and drives the
    /// connection on a spawned tokio task.
    pub async fn connect(config: &str, options: PgTableSinkOptions) -> Result<Self, SinkError> {
        let config: ReplicationConfig = config.parse()?;
        Self::connect_with(&config, options).await
    }

    /// Connects with `config` (see [`PgTableSink::connect`]).
    pub async fn connect_with(
        config: &ReplicationConfig,
        options: PgTableSinkOptions,
    ) -> Result<Self, SinkError> {
        let client = Self::open_client(config).await?;
        let backend_pid = backend_pid(&client).await;
        let mut sink = Self::new(client, options);
        sink.config = Some(config.clone());
        sink.backend_pid = backend_pid;
        Ok(sink)
    }

    /// A new connection to the target, driven on a spawned task.
    async fn open_client(config: &ReplicationConfig) -> Result<Client, SinkError> {
        let settings = PgClientSettings::new(config)?;
        let (client, connection) = settings.config.connect(settings.tls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "target database connection ended");
            }
        });
        Ok(client)
    }

    fn target(&self, table: &TableSchema) -> TableName {
        let source = TableName::new(&*table.schema, &*table.table);
        match self.options.tables.get(&source) {
            Some(t) => t.clone(),
            None => source,
        }
    }

    /// Indexes of the key columns of `table`.
    fn key_indexes(&self, table: &TableSchema) -> Result<Vec<usize>, SinkError> {
        let source = TableName::new(&*table.schema, &*table.table);
        let target_pk = self
            .target_keys
            .get(&self.target(table))
            .and_then(Option::as_ref)
            .and_then(|names| {
                names
                    .iter()
                    .map(|n| table.column_index(n))
                    .collect::<Option<Vec<usize>>>()
            });
        let keys: Vec<usize> = match (self.options.key_columns.get(&source), target_pk) {
            (Some(names), _) => names
                .iter()
                .map(|n| table.column_index(n))
                .collect::<Option<_>>()
                .ok_or(SinkError::Malformed("configured key column not in table"))?,
            (None, Some(pk)) => pk,
            (None, None) => (0..table.columns.len())
                .filter(|&i| table.columns.get(i).is_some_and(|c| c.is_key))
                .collect(),
        };
        if keys.is_empty() {
            return Err(SinkError::NoKey {
                schema: table.schema.clone(),
                table: table.table.clone(),
            });
        }
        Ok(keys)
    }

    /// Applies `events` in one transaction (the open one when checkpoints
    /// are committed with the writes), with `progress` as the last
    /// statement: row changes pipelined in runs, a schema change between
    /// two runs. On an error, the event that failed, if known.
    async fn apply<'e>(
        &mut self,
        events: &[&'e ChangeEvent],
        progress: Option<(String, Vec<TextParam>)>,
    ) -> Result<(), (Option<&'e ChangeEvent>, SinkError)> {
        self.begin().await.map_err(|e| (None, e))?;
        let mut progress = progress;
        let mut start = 0;
        for (i, ev) in events.iter().enumerate() {
            if ev.op != Operation::SchemaChange {
                continue;
            }
            let run = events.get(start..i).unwrap_or_default();
            self.run_dml(run, None).await?;
            self.follow_schema_change(ev)
                .await
                .map_err(|e| (Some(*ev), e))?;
            start = i + 1;
        }
        let run = events.get(start..).unwrap_or_default();
        self.run_dml(run, progress.take()).await?;
        self.end().await.map_err(|e| (None, e))
    }

    /// Plans and runs the row changes of `events`, then `extra`.
    async fn run_dml<'e>(
        &mut self,
        events: &[&'e ChangeEvent],
        extra: Option<(String, Vec<TextParam>)>,
    ) -> Result<(), (Option<&'e ChangeEvent>, SinkError)> {
        self.learn_target_keys(events)
            .await
            .map_err(|e| (None, e))?;
        let mut ops = Vec::new();
        // The event each statement applies (none for the progress row).
        let mut owners: Vec<Option<&ChangeEvent>> = Vec::new();
        for ev in events {
            self.plan(ev, &mut ops).map_err(|e| (Some(*ev), e))?;
            owners.resize(ops.len(), Some(*ev));
        }
        ops.extend(extra);
        if ops.is_empty() {
            return Ok(());
        }
        self.execute(&ops)
            .await
            .map_err(|(failed, e)| (failed.and_then(|i| owners.get(i).copied().flatten()), e))
    }

    /// The statements (SQL, text parameters) that apply `ev`.
    fn plan(
        &self,
        ev: &ChangeEvent,
        ops: &mut Vec<(String, Vec<TextParam>)>,
    ) -> Result<(), SinkError> {
        let Some(table) = ev.table.as_deref() else {
            return Ok(()); // messages
        };
        let target = self.target(table).quoted();
        match ev.op {
            Operation::Message | Operation::SchemaChange | Operation::Transaction => {}
            Operation::Truncate => ops.push((format!("TRUNCATE {target}"), Vec::new())),
            Operation::Delete => {
                let before = ev
                    .before_values()
                    .ok_or(SinkError::Malformed("delete without a row"))?;
                let keys = self.key_indexes(table)?;
                ops.push(delete_by_key(&target, table, &keys, &before)?);
            }
            Operation::Create | Operation::Update | Operation::Read => {
                let after = ev
                    .after_values()
                    .ok_or(SinkError::Malformed("upsert without a row"))?;
                let after = &after[..];
                let keys = self.key_indexes(table)?;
                if let Some(before) = ev.before_values() {
                    let before = &before[..];
                    let moved = keys.iter().any(|&k| {
                        let old = before.get(k);
                        old.is_some_and(|v| !v.is_null()) && old != after.get(k)
                    });
                    if moved {
                        ops.push(delete_by_key(&target, table, &keys, before)?);
                    }
                }
                ops.push(upsert(&target, table, &keys, after)?);
            }
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Sink for PgTableSink {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        if self.client.is_none() {
            return Err(SinkError::Closed);
        }
        let applied = self.load_progress().await?;
        // Exactly-once: what a previous write already committed is skipped.
        let fresh: Vec<&ChangeEvent> = batch
            .iter()
            .filter(|ev| match applied {
                Some(pos) => (ev.source.commit_lsn, ev.index) > pos,
                None => true,
            })
            .collect();
        let Some(last) = fresh.last().map(|ev| (ev.source.commit_lsn, ev.index)) else {
            return Ok(());
        };
        let progress = self.options.progress.clone().map(|name| {
            (
                PROGRESS_UPSERT.to_owned(),
                vec![
                    TextParam(Some(name)),
                    TextParam(Some(last.0.to_string())),
                    TextParam(Some(last.1.to_string())),
                ],
            )
        });
        if let Err((ev, e)) = self.apply(&fresh, progress).await {
            self.abandon().await;
            return Err(match ev {
                Some(ev) => e.at(ev),
                None => e,
            });
        }
        if self.options.progress.is_some() {
            self.applied = Some(Some(last));
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        if self.client.is_none() {
            return Err(SinkError::Closed);
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        if self.open {
            tracing::info!(
                "postgres sink: rolling back the writes no checkpoint covers; they are replayed from the last checkpoint"
            );
            self.abandon().await;
        }
        self.client = None;
        self.statements.clear();
        self.target_keys.clear();
        self.applied = None;
        Ok(())
    }

    fn commits_checkpoints(&self) -> bool {
        self.checkpoints.is_some()
    }

    async fn commit_checkpoint(
        &mut self,
        checkpoint: &Checkpoint,
        lease: &Lease,
        keep: usize,
    ) -> Result<CheckpointMeta, CheckpointError> {
        let result = self.save_and_commit(checkpoint, lease, keep).await;
        if result.is_err() {
            // Whatever failed, the writes since the last checkpoint are gone
            // with the checkpoint (a failed COMMIT rolls back too).
            self.open = true;
            self.abandon().await;
        }
        result
    }

    /// Drops the connection (the server rolls back its open transaction:
    /// with checkpoints committed in the sink, the writes since the last
    /// checkpoint), forgets the prepared statements, the target keys and the
    /// exactly-once position, and connects again. The next write reloads
    /// the position from the progress row, so replayed events that were
    /// committed before are skipped: exactly once survives the reset.
    fn can_reset(&self) -> bool {
        true
    }

    async fn reset(&mut self) -> Result<(), SinkError> {
        let config = self.config.clone().ok_or(SinkError::ResetUnsupported)?;
        if self.open && self.client.as_ref().is_some_and(|c| !c.is_closed()) {
            // Best effort on a connection that may be wedged: dropping it
            // rolls back too.
            let _ = tokio::time::timeout(RESET_ROLLBACK_TIMEOUT, self.abandon()).await;
        }
        self.open = false;
        self.client = None;
        self.statements.clear();
        self.target_keys.clear();
        self.applied = None;
        let client = Self::open_client(&config).await?;
        // A statement that timed out was abandoned, not cancelled: its
        // session may still be running it, and could commit after the
        // replay read the progress row. End that session and wait until it
        // is gone, so what it did is decided before anything is replayed.
        if let Some(old) = self.backend_pid.take() {
            end_session(&client, old).await?;
        }
        self.backend_pid = backend_pid(&client).await;
        self.client = Some(client);
        tracing::info!("postgres sink reconnected; replaying from its last durable position");
        Ok(())
    }
}

/// How long [`Sink::reset`] waits for the old connection's `ROLLBACK`.
const RESET_ROLLBACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A failed `BEGIN` or `COMMIT` of a checkpoint's transaction, judged by the
/// one fault policy (a deferred constraint failing at `COMMIT` is not
/// retryable; a lost connection is).
fn txn_error(what: &'static str, e: tokio_postgres::Error) -> CheckpointError {
    let message = format!("{what}: {}", crate::pg_error::describe(&e));
    if crate::pg_error::fault(&e).is_transient() {
        CheckpointError::unavailable(message, e)
    } else {
        CheckpointError::backend(message, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_identifiers() {
        assert_eq!(quote_ident("a b"), "\"a b\"");
        assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
        assert_eq!(TableName::new("s", "t\"x").quoted(), "\"s\".\"t\"\"x\"");
    }
}
