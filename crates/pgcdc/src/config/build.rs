//! The configuration file as typed job settings: `pgcdc.toml` is a thin
//! layer over [`Job::builder`].

use std::time::Duration;

use cdc_runtime::job::{
    CheckpointSettings, Job, JobBuilder, PipelineTuning, SnapshotSettings, StoreOptions,
};
use cdc_runtime::replication::ReplicationConfig;
use cdc_runtime::sinks::{FileSinkOptions, PostgresSinkOptions, SinkOptions, TableName};
use cdc_runtime::source::{Capture, SourceOptions};
use checkpoint_api::JobName;
use checkpoint_pg::PgStoreConfig;

use cdc_runtime::encoding::DebeziumOptions;

use super::{
    invalid, table_ref, CheckpointConfig, Config, ConfigFileError, DroppedColumnsConfig,
    SinkConfig, SourceConfig,
};

impl Config {
    /// The job this configuration describes, ready to [`build`](JobBuilder::build).
    pub fn job_builder(&self) -> Result<JobBuilder, ConfigFileError> {
        let mut builder = Job::builder(self.source.source_options()?)
            .snapshot(SnapshotSettings {
                mode: self.startup_mode()?,
                start_lsn: self.start_lsn()?,
                options: self.snapshot.options(),
            })
            .tuning(PipelineTuning {
                batch_size: self.pipeline.batch_size,
                batch_bytes: self.pipeline.batch_bytes,
                byte_budget: self.pipeline.byte_budget,
                min_flush_interval: Duration::from_millis(self.pipeline.min_flush_interval_ms),
                stream_in_progress: self.pipeline.stream_in_progress,
                spill_dir: self.pipeline.spill_dir.clone(),
                status_interval: self.status_interval(),
                channel_capacity: self.pipeline.channel_capacity,
                status_log_interval: (self.pipeline.status_log_interval_secs > 0)
                    .then(|| Duration::from_secs(self.pipeline.status_log_interval_secs)),
                sink_timeout: (self.pipeline.sink_timeout_secs > 0)
                    .then(|| Duration::from_secs(self.pipeline.sink_timeout_secs)),
            });
        let debezium = self.debezium.options()?;
        for sink in &self.sinks {
            builder = builder.sink(sink.options(&debezium)?);
        }
        for op in &self.operators {
            builder = builder.boxed_operator(op.build()?);
        }
        self.ha.check(self.checkpoint.is_some())?;
        if let Some(cc) = &self.checkpoint {
            builder = builder.checkpoints(CheckpointSettings {
                store: self.store_options(cc)?,
                job: Some(self.job_name(cc)?),
                interval: cc.interval(),
                max_bytes: cc.max_bytes,
                keep: cc.keep,
                confirm: cc.confirm.into(),
                trust_slot: cc.trust_slot,
                standby: self.ha.standby,
                takeover_after: self.ha.takeover_after(),
            });
        }
        Ok(builder)
    }

    /// The job's name in the checkpoint store.
    pub fn job_name(&self, cc: &CheckpointConfig) -> Result<JobName, ConfigFileError> {
        JobName::new(cc.job_name(&self.source))
            .map_err(|e| invalid("checkpoint.job", e.to_string()))
    }

    /// The checkpoint store: `checkpoint.url` (the same keys as the source,
    /// `sslmode` up to `verify-full` included), or the source database with
    /// the source's credentials and TLS settings.
    pub fn store_options(&self, cc: &CheckpointConfig) -> Result<StoreOptions, ConfigFileError> {
        let connection = match &cc.url {
            Some(url) => url.expose().parse::<ReplicationConfig>().map_err(|e| {
                // The parser's errors never echo the password.
                invalid("checkpoint.url", e.to_string())
            })?,
            None => self.source.replication_config()?,
        };
        let mut config = PgStoreConfig::default();
        config.schema = cc.schema.clone();
        config.table = cc.table.clone();
        config.pool.operation_timeout = cc.store_timeout();
        if let Some(threshold) = cc.inline_threshold {
            config.inline_threshold = threshold;
        }
        Ok(StoreOptions { connection, config })
    }
}

impl SourceConfig {
    /// The typed source settings.
    pub fn source_options(&self) -> Result<SourceOptions, ConfigFileError> {
        let capture = if self.schemas.is_empty() {
            Capture::Tables(self.table_refs()?)
        } else {
            Capture::Schemas(self.schemas.clone())
        };
        let mut options = SourceOptions::new(
            self.replication_config()?,
            self.slot.clone(),
            self.publication.clone(),
            capture,
        );
        options.create_slot = self.create_slot;
        options.create_publication = self.create_publication;
        options.failover_slot = self.failover_slot;
        options.filters = self.table_filters()?;
        options.signals = self.signals;
        options.publish_via_partition_root = self.publish_via_partition_root;
        options.capture_ddl = self.capture_ddl;
        options.on_slot_lost = self.on_slot_lost.into();
        options.heartbeat_interval = (self.heartbeat_interval_ms > 0)
            .then(|| Duration::from_millis(self.heartbeat_interval_ms));
        options.receive_timeout =
            (self.receive_timeout_secs > 0).then(|| Duration::from_secs(self.receive_timeout_secs));
        Ok(options)
    }
}

impl SinkConfig {
    /// The typed sink settings, with the `[debezium]` settings for the
    /// Debezium format.
    pub fn options(&self, debezium: &DebeziumOptions) -> Result<SinkOptions, ConfigFileError> {
        Ok(match self {
            SinkConfig::Stdout {
                format,
                schema_changes,
                key,
            } => SinkOptions::Stdout {
                format: format.json_format(debezium, *schema_changes, *key),
            },
            SinkConfig::File {
                path,
                max_file_bytes,
                page_cache_mib,
                direct_io,
                format,
                schema_changes,
                key,
            } => SinkOptions::File {
                options: FileSinkOptions {
                    path: path.clone(),
                    max_file_bytes: *max_file_bytes,
                    page_cache_bytes: page_cache_mib.saturating_mul(1 << 20),
                    direct_io: *direct_io,
                },
                format: format.json_format(debezium, *schema_changes, *key),
            },
            SinkConfig::Postgres {
                url,
                exactly_once,
                name,
                commit_with_checkpoint,
                tables,
                dropped_columns,
            } => {
                let mut pg = PostgresSinkOptions::new(url.expose());
                pg.exactly_once = *exactly_once;
                pg.name = name.clone();
                pg.commit_with_checkpoint = *commit_with_checkpoint;
                pg.dropped_columns = match dropped_columns {
                    DroppedColumnsConfig::Keep => cdc_runtime::sinks::DroppedColumns::Keep,
                    DroppedColumnsConfig::Drop => cdc_runtime::sinks::DroppedColumns::Drop,
                };
                for (source, target) in tables {
                    let parse = |t: &str| {
                        table_ref("sinks.tables", t).map(|t| TableName::new(t.schema, t.table))
                    };
                    pg.tables.push((parse(source)?, parse(target)?));
                }
                SinkOptions::Postgres(pg)
            }
            SinkConfig::Nats(nats) => SinkOptions::Nats(Box::new(nats.options(debezium)?)),
            SinkConfig::Null => SinkOptions::Null,
        })
    }
}
