//! Applies changes to tables of a target PostgreSQL database.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt::Write as _;

use bytes::BytesMut;
use cdc_core::{Array, Lsn, Value};
use tokio_postgres::types::{to_sql_checked, Format, IsNull, ToSql, Type};
use tokio_postgres::{Client, Statement};

use checkpoint_api::{Checkpoint, CheckpointError, CheckpointMeta, Lease};
use checkpoint_pg::PgCheckpointStore;

use crate::event::{ChangeEvent, Operation, TableSchema};
use crate::replication::ReplicationConfig;
use crate::tls_connect::PgClientSettings;

use super::{Sink, SinkError};

/// A table name on the target (unquoted; the sink quotes it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    /// Schema.
    pub schema: String,
    /// Table.
    pub table: String,
}

impl TableName {
    /// `schema.table`.
    pub fn new(schema: impl Into<String>, table: impl Into<String>) -> Self {
        TableName {
            schema: schema.into(),
            table: table.into(),
        }
    }

    /// The quoted, qualified name: `"schema"."table"`.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.table))
    }
}

/// How source tables map to target tables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgTableSinkOptions {
    /// Target of a source table; tables not listed go to the same
    /// `schema.table` on the target.
    pub tables: HashMap<TableName, TableName>,
    /// Key columns of a source table, overriding its replica identity
    /// (needed for `REPLICA IDENTITY FULL` tables, whose every column is
    /// flagged as key). The target needs a unique index on exactly these.
    pub key_columns: HashMap<TableName, Vec<String>>,
    /// Exactly-once: the name under which the sink records, in the same
    /// transaction as its writes, the `(commit LSN, index)` of the last event
    /// it applied (table `pgcdc.sink_progress` on the target). Events at or
    /// before it are skipped, so a replay after a crash applies nothing twice.
    pub progress: Option<String>,
}

impl PgTableSinkOptions {
    /// Sends changes of `source` to `target`.
    pub fn map_table(mut self, source: TableName, target: TableName) -> Self {
        self.tables.insert(source, target);
        self
    }

    /// Applies every event exactly once, recording progress under `name`
    /// (see [`progress`](Self::progress)).
    pub fn exactly_once(mut self, name: impl Into<String>) -> Self {
        self.progress = Some(name.into());
        self
    }

    /// Uses `columns` as the key of `source`.
    pub fn key(mut self, source: TableName, columns: Vec<String>) -> Self {
        self.key_columns.insert(source, columns);
        self
    }
}

/// Applies change events to tables of a target database, idempotently.
///
/// * Insert, update and snapshot read: `INSERT … ON CONFLICT (key) DO UPDATE
///   SET …` (an upsert), so replaying an event leaves the same row. Unchanged
///   TOAST columns are left out of both the column list and the `SET` list,
///   so the target keeps its value. An update that changed the key first
///   deletes the row under the old key.
/// * Delete: `DELETE … WHERE key = …`. Truncate: `TRUNCATE`. Messages are ignored.
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
    async fn learn_target_keys(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
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
        let mut sink = Self::new(client, options);
        sink.config = Some(config.clone());
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
            Operation::Message => {}
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

fn delete_by_key(
    target: &str,
    table: &TableSchema,
    keys: &[usize],
    row: &[Value<'_>],
) -> Result<(String, Vec<TextParam>), SinkError> {
    let mut sql = format!("DELETE FROM {target} WHERE ");
    let mut params = Vec::with_capacity(keys.len());
    for (n, &k) in keys.iter().enumerate() {
        let (col, v) = column(table, row, k)?;
        if n > 0 {
            sql.push_str(" AND ");
        }
        let _ = write!(sql, "{} = ${}", quote_ident(&col.name), n + 1);
        params.push(TextParam(pg_text(table, &col.name, v)?));
    }
    Ok((sql, params))
}

fn upsert(
    target: &str,
    table: &TableSchema,
    keys: &[usize],
    row: &[Value<'_>],
) -> Result<(String, Vec<TextParam>), SinkError> {
    let mut cols = String::new();
    let mut values = String::new();
    let mut set = String::new();
    let mut params = Vec::with_capacity(row.len());
    for (i, col) in table.columns.iter().enumerate() {
        let v = row
            .get(i)
            .ok_or(SinkError::Malformed("row shorter than its table"))?;
        if matches!(v, Value::UnchangedToast) {
            if keys.contains(&i) {
                return Err(SinkError::Malformed(
                    "key column is an unchanged TOAST value",
                ));
            }
            continue;
        }
        let name = quote_ident(&col.name);
        if !params.is_empty() {
            cols.push(',');
            values.push(',');
        }
        params.push(TextParam(pg_text(table, &col.name, v)?));
        cols.push_str(&name);
        let _ = write!(values, "${}", params.len());
        if !keys.contains(&i) {
            if !set.is_empty() {
                set.push(',');
            }
            let _ = write!(set, "{name} = EXCLUDED.{name}");
        }
    }
    let key_list = keys
        .iter()
        .filter_map(|&k| table.columns.get(k))
        .map(|c| quote_ident(&c.name))
        .collect::<Vec<_>>()
        .join(",");
    let action = if set.is_empty() {
        "NOTHING".to_owned()
    } else {
        format!("UPDATE SET {set}")
    };
    Ok((
        format!(
            "INSERT INTO {target} ({cols}) VALUES ({values}) ON CONFLICT ({key_list}) DO {action}"
        ),
        params,
    ))
}

fn column<'a>(
    table: &'a TableSchema,
    row: &'a [Value<'a>],
    i: usize,
) -> Result<(&'a crate::event::ColumnSchema, &'a Value<'a>), SinkError> {
    match (table.columns.get(i), row.get(i)) {
        (Some(c), Some(v)) => Ok((c, v)),
        _ => Err(SinkError::Malformed("row shorter than its table")),
    }
}

#[async_trait::async_trait]
impl Sink for PgTableSink {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        if self.client.is_none() {
            return Err(SinkError::Closed);
        }
        self.learn_target_keys(batch).await?;
        let applied = self.load_progress().await?;
        // Exactly-once: what a previous write already committed is skipped.
        let fresh = |ev: &&ChangeEvent| match applied {
            Some(pos) => (ev.source.commit_lsn, ev.index) > pos,
            None => true,
        };
        let mut ops = Vec::new();
        // The event each statement applies (none for the progress row).
        let mut owners: Vec<Option<&ChangeEvent>> = Vec::new();
        let mut last = None;
        for ev in batch.iter().filter(fresh) {
            self.plan(ev, &mut ops).map_err(|e| e.at(ev))?;
            owners.resize(ops.len(), Some(ev));
            last = Some((ev.source.commit_lsn, ev.index));
        }
        if let (Some(name), Some((lsn, index))) = (&self.options.progress, last) {
            ops.push((
                PROGRESS_UPSERT.to_owned(),
                vec![
                    TextParam(Some(name.clone())),
                    TextParam(Some(lsn.to_string())),
                    TextParam(Some(index.to_string())),
                ],
            ));
        }
        if ops.is_empty() {
            return Ok(());
        }
        let applied = self.execute(&ops).await;
        if let Err((failed, e)) = applied {
            self.abandon().await;
            return Err(
                match failed.and_then(|i| owners.get(i).copied().flatten()) {
                    Some(ev) => e.at(ev),
                    None => e,
                },
            );
        }
        if self.options.progress.is_some() && last.is_some() {
            self.applied = Some(last);
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
        self.client = Some(Self::open_client(&config).await?);
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

impl PgTableSink {
    /// [`Sink::commit_checkpoint`] without the clean-up after an error.
    async fn save_and_commit(
        &mut self,
        checkpoint: &Checkpoint,
        lease: &Lease,
        keep: usize,
    ) -> Result<CheckpointMeta, CheckpointError> {
        let (Some(store), Some(client)) = (self.checkpoints.as_ref(), self.client.as_ref()) else {
            return Err(CheckpointError::Backend {
                message: "the postgres sink is closed or does not commit checkpoints".into(),
                source: None,
            });
        };
        if self.commit_unknown.take() == Some(checkpoint.id) {
            // The last attempt's COMMIT lost its connection, maybe after the
            // server committed. If it did, the replay before this retry was
            // skipped by the progress row it committed: nothing is left to
            // write, and saving the checkpoint again would be refused.
            use checkpoint_api::CheckpointStore as _;
            if let Some(meta) = store
                .list(&checkpoint.job)
                .await?
                .into_iter()
                .find(|m| m.describes(checkpoint))
            {
                tracing::info!(checkpoint = %checkpoint.id, "the checkpoint's interrupted COMMIT had succeeded");
                return Ok(meta);
            }
        }
        if !self.open {
            client
                .batch_execute("BEGIN")
                .await
                .map_err(|e| txn_error("begin", e))?;
            self.open = true;
        }
        let meta = store.save_in(client, lease, checkpoint, keep).await?;
        self.open = false;
        if let Err(e) = client.batch_execute("COMMIT").await {
            if crate::pg_error::fault(&e).is_transient() {
                self.commit_unknown = Some(checkpoint.id);
            }
            return Err(txn_error("commit", e));
        }
        Ok(meta)
    }

    /// Runs `ops` in order, pipelined: in a transaction of their own, or
    /// when checkpoints are committed with the writes, in the open one. On
    /// an error, the index of the statement that failed, if one did.
    async fn execute(
        &mut self,
        ops: &[(String, Vec<TextParam>)],
    ) -> Result<(), (Option<usize>, SinkError)> {
        let client = self.client.as_ref().ok_or((None, SinkError::Closed))?;
        let own_transaction = self.checkpoints.is_none();
        if own_transaction || !self.open {
            client
                .batch_execute("BEGIN")
                .await
                .map_err(|e| (None, e.into()))?;
            self.open = true;
        }
        for (i, (sql, _)) in ops.iter().enumerate() {
            if !self.statements.contains_key(sql) {
                let stmt = client.prepare(sql).await.map_err(|e| (Some(i), e.into()))?;
                self.statements.insert(sql.clone(), stmt);
            }
        }
        let mut calls = Vec::with_capacity(ops.len());
        for (sql, params) in ops {
            let stmt = self
                .statements
                .get(sql)
                .ok_or((None, SinkError::Malformed("statement not prepared")))?;
            let refs: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
            calls.push((stmt, refs));
        }
        // tokio-postgres pipelines requests polled together; they run in
        // order, so the first error to arrive is the first statement that
        // failed (the ones after it fail as "in failed transaction").
        futures_util::future::try_join_all(calls.iter().enumerate().map(|(i, (stmt, refs))| {
            use futures_util::TryFutureExt as _;
            client
                .execute(*stmt, refs)
                .map_err(move |e| (Some(i), SinkError::from(e)))
        }))
        .await?;
        if own_transaction {
            self.open = false;
            client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| (None, e.into()))?;
        }
        Ok(())
    }
}

/// A parameter sent in text format, whatever the column type.
#[derive(Debug)]
struct TextParam(Option<String>);

impl ToSql for TextParam {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match &self.0 {
            None => Ok(IsNull::Yes),
            Some(s) => {
                out.extend_from_slice(s.as_bytes());
                Ok(IsNull::No)
            }
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> Format {
        Format::Text
    }

    to_sql_checked!();
}

pub(crate) use cdc_core::sql::quote_ident;

/// The value in its type's text input syntax (`None` for NULL).
fn pg_text(table: &TableSchema, column: &str, v: &Value<'_>) -> Result<Option<String>, SinkError> {
    let unrepresentable = || SinkError::Unrepresentable {
        schema: table.schema.clone(),
        table: table.table.clone(),
        column: column.into(),
        type_name: v.type_name(),
    };
    if v.is_null() {
        return Ok(None);
    }
    let mut s = String::new();
    write_text(&mut s, v).ok_or_else(unrepresentable)?;
    Ok(Some(s))
}

fn write_text(s: &mut String, v: &Value<'_>) -> Option<()> {
    match v {
        Value::Null | Value::UnchangedToast | Value::OtherBinary { .. } => return None,
        Value::Bool(b) => s.push(if *b { 't' } else { 'f' }),
        Value::Int2(x) => write!(s, "{x}").ok()?,
        Value::Int4(x) => write!(s, "{x}").ok()?,
        Value::Int8(x) => write!(s, "{x}").ok()?,
        Value::Oid(x) => write!(s, "{x}").ok()?,
        Value::Float4(x) => write_float(s, f64::from(*x), || x.to_string()),
        Value::Float8(x) => write_float(s, *x, || x.to_string()),
        Value::Numeric(n) => s.push_str(n.as_str()),
        Value::Text(t) | Value::Json(t) | Value::Jsonb(t) => s.push_str(t),
        Value::Other { text, .. } => s.push_str(text),
        Value::Char(0) => {}
        Value::Char(c) if c.is_ascii() => s.push(char::from(*c)),
        Value::Char(c) => write!(s, "\\{c:03o}").ok()?,
        Value::Bytea(b) => {
            s.reserve(2 + b.len() * 2);
            s.push_str("\\x");
            for byte in b.iter() {
                write!(s, "{byte:02x}").ok()?;
            }
        }
        Value::Uuid(x) => write!(s, "{x}").ok()?,
        Value::Date(x) => write!(s, "{x}").ok()?,
        Value::Time(x) => write!(s, "{x}").ok()?,
        Value::TimeTz(x) => write!(s, "{x}").ok()?,
        Value::Timestamp(x) => write!(s, "{x}").ok()?,
        Value::TimestampTz(x) => write!(s, "{x}").ok()?,
        Value::Interval(x) => write!(s, "{x}").ok()?,
        Value::Inet(x) => write!(s, "{x}").ok()?,
        Value::MacAddr(x) => write!(s, "{x}").ok()?,
        Value::MacAddr8(x) => write!(s, "{x}").ok()?,
        Value::PgLsn(x) => write!(s, "{x}").ok()?,
        Value::Array(a) => write_array(s, a)?,
        #[allow(unreachable_patterns)]
        _ => return None,
    }
    Some(())
}

fn write_float(s: &mut String, x: f64, finite: impl FnOnce() -> String) {
    if x.is_nan() {
        s.push_str("NaN");
    } else if x == f64::INFINITY {
        s.push_str("Infinity");
    } else if x == f64::NEG_INFINITY {
        s.push_str("-Infinity");
    } else {
        s.push_str(&finite());
    }
}

/// An array literal: `[2:3]={"a","b"}`, elements quoted, `NULL` unquoted.
fn write_array(s: &mut String, a: &Array<'_>) -> Option<()> {
    let dims = a.dims();
    if dims.iter().any(|d| d.lower_bound != 1) {
        for d in dims {
            let upper = i64::from(d.lower_bound) + i64::from(d.len) - 1;
            write!(s, "[{}:{}]", d.lower_bound, upper).ok()?;
        }
        s.push('=');
    }
    let lens: Vec<usize> = dims
        .iter()
        .map(|d| usize::try_from(d.len).unwrap_or(0))
        .collect();
    let mut elements = a.elements().iter();
    write_array_dim(s, &lens, &mut elements)
}

fn write_array_dim<'v>(
    s: &mut String,
    dims: &[usize],
    elements: &mut impl Iterator<Item = &'v Value<'v>>,
) -> Option<()> {
    s.push('{');
    if let Some((&len, inner)) = dims.split_first() {
        for i in 0..len {
            if i > 0 {
                s.push(',');
            }
            if inner.is_empty() {
                let v = elements.next()?;
                if v.is_null() {
                    s.push_str("NULL");
                } else {
                    let mut text = String::new();
                    write_text(&mut text, v)?;
                    s.push('"');
                    for c in text.chars() {
                        if c == '"' || c == '\\' {
                            s.push('\\');
                        }
                        s.push(c);
                    }
                    s.push('"');
                }
            } else {
                write_array_dim(s, inner, elements)?;
            }
        }
    }
    s.push('}');
    Some(())
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
