//! Opening a sink from typed options ([`SinkOptions`]), as a job does.

use crate::encoding::{JsonEncoder, JsonFormat};

use super::{
    FileSink, FileSinkOptions, JsonLinesSink, NullSink, PgTableSink, PgTableSinkOptions, Sink,
    SinkError, TableName,
};

/// A sink a job opens itself (custom sinks are handed over already open).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SinkOptions {
    /// JSON lines on standard output.
    Stdout {
        /// Debezium envelopes or plain events.
        format: JsonFormat,
    },
    /// JSON lines in fsynced, rotated files.
    File {
        /// Where and when to rotate.
        options: FileSinkOptions,
        /// Debezium envelopes or plain events.
        format: JsonFormat,
    },
    /// Rows applied to PostgreSQL tables.
    Postgres(PostgresSinkOptions),
    /// Messages published into a NATS JetStream stream.
    Nats(Box<super::NatsSinkOptions>),
    /// Discards everything (for benchmarks and tests).
    Null,
}

impl SinkOptions {
    /// The JSON format of a stdout or file sink.
    pub fn json_format(&self) -> Option<&JsonFormat> {
        match self {
            SinkOptions::Stdout { format } | SinkOptions::File { format, .. } => Some(format),
            SinkOptions::Nats(nats) => Some(&nats.format),
            SinkOptions::Postgres(_) | SinkOptions::Null => None,
        }
    }
}

/// Settings of a PostgreSQL table sink opened by a job.
#[derive(Clone)]
pub struct PostgresSinkOptions {
    /// The target database, as a libpq connection string or URL (it may
    /// hold a password; it is never printed).
    pub url: String,
    /// Exactly once: the sink records its position in a progress row in the
    /// same transaction as its writes.
    pub exactly_once: bool,
    /// The progress row's name (default: the job's slot).
    pub name: Option<String>,
    /// Commit the job's checkpoints in the sink's transactions: `None` does
    /// so when the checkpoint store is in the target database.
    pub commit_with_checkpoint: Option<bool>,
    /// Source table to target table, for tables whose target name differs.
    pub tables: Vec<(TableName, TableName)>,
    /// What a source `DROP COLUMN` does to the target column.
    pub dropped_columns: super::DroppedColumns,
}

impl PostgresSinkOptions {
    /// A sink into the database at `url`, at least once, same table names.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresSinkOptions {
            url: url.into(),
            exactly_once: false,
            name: None,
            commit_with_checkpoint: None,
            tables: Vec::new(),
            dropped_columns: super::DroppedColumns::Keep,
        }
    }
}

impl std::fmt::Debug for PostgresSinkOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSinkOptions")
            .field("url", &"***")
            .field("exactly_once", &self.exactly_once)
            .field("name", &self.name)
            .field("commit_with_checkpoint", &self.commit_with_checkpoint)
            .field("tables", &self.tables)
            .field("dropped_columns", &self.dropped_columns)
            .finish()
    }
}

/// Opens the sink `options` describe (`default_name`: the name of an
/// exactly-once PostgreSQL sink's progress row when none is set). With
/// `checkpoints`, the job's checkpoint store, an exactly-once PostgreSQL sink
/// whose target is the store's database commits the checkpoints with its
/// writes (unless told not to).
pub async fn open_sink(
    options: &SinkOptions,
    default_name: &str,
    checkpoints: Option<&checkpoint_pg::PgCheckpointStore>,
) -> Result<Box<dyn Sink>, String> {
    Ok(match options {
        SinkOptions::Stdout { format } => {
            Box::new(JsonLinesSink::stdout(JsonEncoder::new(format.clone())))
        }
        SinkOptions::File { options, format } => Box::new(
            FileSink::open(options.clone(), JsonEncoder::new(format.clone()))
                .await
                .map_err(|e| format!("file sink: {e}"))?,
        ),
        SinkOptions::Postgres(pg) => {
            let mut options = PgTableSinkOptions {
                dropped_columns: pg.dropped_columns,
                ..PgTableSinkOptions::default()
            };
            for (source, target) in &pg.tables {
                options = options.map_table(source.clone(), target.clone());
            }
            if pg.exactly_once {
                options = options
                    .exactly_once(pg.name.clone().unwrap_or_else(|| default_name.to_owned()));
            }
            let mut sink = PgTableSink::connect(&pg.url, options)
                .await
                .map_err(|e| format!("postgres sink: {e}"))?;
            bind_checkpoints(
                &mut sink,
                pg.exactly_once,
                pg.commit_with_checkpoint,
                checkpoints,
            )
            .await
            .map_err(|e| format!("postgres sink: {e}"))?;
            Box::new(sink)
        }
        SinkOptions::Nats(nats) => Box::new(
            super::NatsSink::connect((**nats).clone())
                .await
                .map_err(|e| format!("nats sink: {e}"))?,
        ),
        SinkOptions::Null => Box::new(NullSink::new()),
    })
}

/// Lets `sink` commit the checkpoints with its writes when it can and is
/// allowed to (see [`PostgresSinkOptions::commit_with_checkpoint`]).
async fn bind_checkpoints(
    sink: &mut PgTableSink,
    exactly_once: bool,
    wanted: Option<bool>,
    store: Option<&checkpoint_pg::PgCheckpointStore>,
) -> Result<(), SinkError> {
    let (true, Some(store), true) = (exactly_once, store, wanted != Some(false)) else {
        if wanted == Some(true) {
            return Err(SinkError::NotCommitting(
                "commit_with_checkpoint needs exactly_once = true and a [checkpoint] section"
                    .into(),
            ));
        }
        return Ok(());
    };
    if wanted.is_none() && !sink.same_database(store).await? {
        tracing::info!(
            "postgres sink: the checkpoint store is in another database; writes commit batch by batch, made exactly-once by the sink's progress row"
        );
        return Ok(());
    }
    sink.commit_with_checkpoints(store.clone()).await?;
    tracing::info!(
        "postgres sink: the checkpoint store is in the target database; the sink's writes and each checkpoint commit in one transaction"
    );
    Ok(())
}
