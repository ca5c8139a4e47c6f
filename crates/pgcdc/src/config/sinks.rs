//! `[[sinks]]`: where changes go, and the JSON shape they are written in.

use std::path::PathBuf;

use cdc_runtime::encoding::{DebeziumOptions, JsonFormat};
use serde::Deserialize;

use super::Secret;

/// The JSON shape written by a sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Debezium's change event value.
    #[default]
    Debezium,
    /// pgcdc's plain JSON.
    Plain,
}

impl Format {
    /// The encoder format: the Debezium format takes the `[debezium]`
    /// settings, with the sink's own `schema_changes` and `key` on top (the
    /// plain format always writes schema changes and never keys).
    pub fn json_format(
        self,
        debezium: &DebeziumOptions,
        schema_changes: bool,
        key: bool,
    ) -> JsonFormat {
        match self {
            Format::Debezium => JsonFormat::Debezium(DebeziumOptions {
                schema_changes: schema_changes || debezium.schema_changes,
                key: key || debezium.key,
                ..debezium.clone()
            }),
            Format::Plain => JsonFormat::Plain,
        }
    }
}

/// `dropped_columns` of a PostgreSQL sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DroppedColumnsConfig {
    /// Keep the target column (made nullable).
    #[default]
    Keep,
    /// Drop the target column too.
    Drop,
}

/// One `[[sinks]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SinkConfig {
    /// JSON lines on standard output.
    Stdout {
        /// JSON shape.
        #[serde(default)]
        format: Format,
        /// Write schema-change events in the Debezium format too.
        #[serde(default)]
        schema_changes: bool,
        /// Debezium format: one `{"key":…,"value":…}` object per line,
        /// and a tombstone (`"value":null`) after each delete.
        #[serde(default)]
        key: bool,
    },
    /// JSON lines in size-rotated files.
    File {
        /// Base path (files are `<path>.000001`, …).
        path: PathBuf,
        /// Rotate before a file exceeds this many bytes (0: never).
        #[serde(default)]
        max_file_bytes: u64,
        /// The newest fsynced output kept in the page cache, MiB; older
        /// pages are dropped (0: keep everything).
        #[serde(default = "default_page_cache_mib")]
        page_cache_mib: u64,
        /// Write past the page cache (`O_DIRECT`) where the filesystem
        /// allows it (default true).
        #[serde(default = "default_direct_io")]
        direct_io: bool,
        /// JSON shape.
        #[serde(default)]
        format: Format,
        /// Write schema-change events in the Debezium format too.
        #[serde(default)]
        schema_changes: bool,
        /// Debezium format: one `{"key":…,"value":…}` object per line,
        /// and a tombstone (`"value":null`) after each delete.
        #[serde(default)]
        key: bool,
    },
    /// Applied to tables of a PostgreSQL database (same names).
    Postgres {
        /// Target connection string (libpq key=value or URL; not logged).
        url: Secret,
        /// Apply every event exactly once: the sink records its progress in
        /// `pgcdc.sink_progress` on the target, in the same transaction as
        /// its writes, and skips what it already applied.
        #[serde(default)]
        exactly_once: bool,
        /// The name of its progress row (default: the slot name).
        #[serde(default)]
        name: Option<String>,
        /// Commit the sink's writes and each checkpoint in one transaction.
        /// By default this happens whenever the sink is exactly-once and the
        /// checkpoint store is in the target database; `false` turns it off
        /// (writes then commit batch by batch, and the progress row keeps
        /// them exactly once); `true` makes it required, refusing to start
        /// otherwise.
        #[serde(default)]
        commit_with_checkpoint: Option<bool>,
        /// Target tables by source table (`"public.orders" = "replica.orders"`);
        /// tables not listed go to the same name on the target.
        #[serde(default)]
        tables: std::collections::BTreeMap<String, String>,
        /// What a source `DROP COLUMN` does to the target column: `keep`
        /// (default; made nullable) or `drop`.
        #[serde(default)]
        dropped_columns: DroppedColumnsConfig,
    },
    /// Published into a NATS JetStream stream.
    Nats(Box<super::NatsSinkConfig>),
    /// Discards events (benchmarks).
    Null,
}

fn default_direct_io() -> bool {
    true
}

fn default_page_cache_mib() -> u64 {
    cdc_runtime::sinks::DEFAULT_PAGE_CACHE_BYTES >> 20
}
