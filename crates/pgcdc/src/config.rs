//! `pgcdc.toml`: the configuration of a pipeline.
//!
//! ```toml
//! [source]
//! host = "db.example"          # or ["primary.example", "standby.example"]: the read-write one is used;
//!                               # or a Unix-domain socket directory, "/var/run/postgresql"
//! port = 5432                   # or one per host: [5432, 5433]
//! database = "app"
//! user = "cdc"
//! password_file = "/run/secrets/pgcdc"   # or password = "...", or password_env = "VAR"
//! sslmode = "verify-full"
//! sslrootcert = "/etc/pgcdc/ca.pem"
//! tables = ["public.orders", "public.customers"]  # or schemas = ["sales"] (PostgreSQL 15+)
//! slot = "pgcdc_app"
//! publication = "pgcdc_app"
//! create_slot = true
//! create_publication = true
//! # failover_slot = true      # default: on for PostgreSQL 17+ (standbys with sync_replication_slots keep the slot)
//! # start_lsn = "0/16B3748"   # default: the slot's confirmed position
//! # heartbeat_interval_ms = 10000  # a WAL heartbeat, when other databases write
//! # on_slot_lost = "fail"         # or "resnapshot": a new slot and snapshot
//!
//! [pipeline]
//! batch_size = 1000
//! # batch_bytes = 1048576      # a batch also ends at this many bytes of rows
//! # stream_in_progress = false  # true: the server streams large transactions before their commit
//! byte_budget = 67108864        # streamed in-progress transactions held in memory, bytes
//! # spill_dir = "/var/tmp/pgcdc" # where larger ones go; default: the system temp directory
//! # min_flush_interval_ms = 5   # while catching up, a sink flushes (fsyncs) at most this often; 0: at every commit
//! status_interval_secs = 10
//! status_log_interval_secs = 30  # a status line in the log (events/s, lag, checkpoint age); 0: off
//! # worker_threads = 2          # runtime threads (default: TOKIO_WORKER_THREADS, else min(cores, 2))
//!
//! [[sinks]]
//! type = "file"
//! path = "/var/lib/pgcdc/changes.jsonl"
//! max_file_bytes = 104857600
//! # direct_io = true           # past the page cache (O_DIRECT) where allowed; false: page_cache_mib (64) of it stays cached
//! format = "debezium"
//! # key = true                  # {"key":…,"value":…} per line (tombstones after deletes)
//!
//! [debezium]                    # Debezium's settings, by its names and with its defaults
//! "topic.prefix" = "app"
//! # "decimal.handling.mode" = "precise"   # or "string", "double"
//! # "tombstones.on.delete" = true
//! # "skipped.operations" = "t"
//!
//! [checkpoint]                  # without this section: no checkpoints
//! job = "app"                   # default: the slot name
//! interval_ms = 30000
//! keep = 5
//!
//! [[operators]]
//! type = "table_counters"
//! id = "counts"
//!
//! [snapshot]
//! mode = "initial"              # initial | latest | snapshot_only | from_lsn
//! chunk_size = 32768            # rows per chunk of a table with a key
//! readers = 2                   # chunks read at once
//!
//! [ha]                          # needs [checkpoint]
//! standby = false               # or `pgcdc run --standby`: wait for the job, take it over
//! # takeover_after_ms = 60000   # default: 2 × checkpoint.interval_ms
//! ```
//!
//! # Environment overrides
//!
//! Every scalar key of `[source]` and `[pipeline]` can be overridden by an
//! environment variable named `PGCDC_<SECTION>_<KEY>` in upper case, e.g.
//! `PGCDC_SOURCE_HOST`, `PGCDC_SOURCE_PASSWORD`, `PGCDC_SOURCE_SLOT`,
//! `PGCDC_PIPELINE_BATCH_SIZE`. List keys (`tables`, `schemas`) take a
//! comma-separated list. The environment wins over the file. Setting
//! `PGCDC_SOURCE_PASSWORD` replaces any `password`, `password_file` or
//! `password_env` from the file.
//!
//! Passwords never appear in `Debug` output or error messages.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use cdc_core::Lsn;
use serde::Deserialize;

use cdc_runtime::replication::SslMode;
pub use cdc_runtime::source::TableRef;

mod build;
mod checkpoint;
mod debezium;
mod env;
mod ha;
mod location;
mod metrics;
mod nats;
mod pipeline;
mod secret;
mod sinks;
mod snapshot;
mod source;

pub use source::{FilteredTable, SlotLostSetting, TableEntry};

pub use checkpoint::{CheckpointConfig, ConfirmSetting, OperatorConfig};
pub use debezium::DebeziumConfig;
pub use env::{unknown_env_vars, UnknownEnvVar, ENV_VARS};
pub use ha::HaConfig;
pub use location::{line_column, Location};
pub use metrics::{MetricsConfig, DEFAULT_METRICS_LISTEN};
pub use nats::{NatsSinkConfig, StorageConfig, StreamConfig, TlsModeConfig};
pub use pipeline::{default_worker_threads, PipelineConfig, DEFAULT_WORKER_THREADS};
pub use secret::Secret;
pub use sinks::{DroppedColumnsConfig, Format, SinkConfig};
pub use snapshot::{ModeSetting, SnapshotConfig};

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not match the schema.
    #[error("{}{}{message}", where_(path, location.as_ref()), key_prefix(key.as_deref()))]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where in the file, when the parser says.
        location: Option<Location>,
        /// The setting, e.g. `checkpoint.interval_ms` or `sinks[1].type`,
        /// when the error is inside one.
        key: Option<String>,
        /// The parser's message (never a password: serde does not echo
        /// string values back).
        message: String,
    },
    /// A setting has an invalid value.
    #[error("{}invalid {key}: {reason}", location.as_ref().map(|l| format!("{l}: ")).unwrap_or_default())]
    Invalid {
        /// The setting, e.g. `source.port` or `PGCDC_SOURCE_PORT`.
        key: String,
        /// Why.
        reason: String,
        /// Where the file sets it, when it does (see [`Config::load`]).
        location: Option<Location>,
    },
}

fn where_(path: &Path, location: Option<&Location>) -> String {
    match location {
        Some(l) => format!("{l}: "),
        None => format!("{}: ", path.display()),
    }
}

fn key_prefix(key: Option<&str>) -> String {
    key.map(|k| format!("{k}: ")).unwrap_or_default()
}

/// serde's type names in range errors, in words (`expected u64` says
/// nothing to someone who wrote `-5`).
fn plain_message(message: &str) -> String {
    message
        .replace("expected u64", "expected a non-negative integer")
        .replace("expected usize", "expected a non-negative integer")
        .replace("expected u16", "expected an integer from 0 to 65535")
}

/// An environment variable's boolean (`true/1/yes/on`, `false/0/no/off`).
fn env_bool(key: &'static str, v: String) -> Result<bool, ConfigFileError> {
    match v.as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(invalid(key, format!("{v:?} is not a boolean"))),
    }
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigFileError {
    ConfigFileError::Invalid {
        key: key.into(),
        reason: reason.into(),
        location: None,
    }
}

/// The whole `pgcdc.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where changes come from.
    pub source: SourceConfig,
    /// Batching, budgets and status updates.
    #[serde(default)]
    pub pipeline: PipelineConfig,
    /// Where changes go (at least one).
    pub sinks: Vec<SinkConfig>,
    /// Checkpoints (absent: none; the slot follows the sinks).
    #[serde(default)]
    pub checkpoint: Option<CheckpointConfig>,
    /// Stateful operators, run in order before the sinks.
    #[serde(default)]
    pub operators: Vec<OperatorConfig>,
    /// The startup mode and the initial snapshot.
    #[serde(default)]
    pub snapshot: SnapshotConfig,
    /// The monitoring endpoint.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// A hot standby instance.
    #[serde(default)]
    pub ha: HaConfig,
    /// The settings of the Debezium format, under Debezium's names.
    #[serde(default)]
    pub debezium: DebeziumConfig,
}

/// `[source]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// Host name or IP address (default `localhost`); several, tried in
    /// order for the one that accepts writes (libpq's
    /// `target_session_attrs=read-write`), as `["a", "b"]` or `"a,b"`.
    #[serde(default = "default_host", deserialize_with = "source::host_list")]
    pub host: String,
    /// Port (default 5432): one for every host, or one per host (`[5432, 5433]`).
    #[serde(default)]
    pub port: source::Ports,
    /// Database to capture.
    pub database: String,
    /// User (needs the REPLICATION attribute).
    pub user: String,
    /// The password, inline.
    #[serde(default)]
    pub password: Option<Secret>,
    /// A file holding the password (trailing newline ignored).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// The name of an environment variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// libpq's sslmode (default `prefer`).
    #[serde(default)]
    pub sslmode: Option<String>,
    /// Trusted CA certificates (PEM file, or `system`).
    #[serde(default)]
    pub sslrootcert: Option<String>,
    /// Capture every table of these schemas (`FOR TABLES IN SCHEMA`, PostgreSQL 15+).
    #[serde(default)]
    pub schemas: Vec<String>,
    /// Capture these tables: `schema.table` (or `table` for `public`), or
    /// `{ name = "schema.table", where = "...", columns = [...] }` for a row
    /// filter and a column list (PostgreSQL 15+).
    #[serde(default)]
    pub tables: Vec<TableEntry>,
    /// The replication slot.
    pub slot: String,
    /// The publication.
    pub publication: String,
    /// Create the slot when it does not exist (default true).
    #[serde(default = "yes")]
    pub create_slot: bool,
    /// Create the publication when it does not exist (default true).
    #[serde(default = "yes")]
    pub create_publication: bool,
    /// Make the slot a failover slot (PostgreSQL 17+) that standbys with
    /// `sync_replication_slots = on` keep a copy of (default: on for 17+,
    /// off below; `true` on an older server is an error).
    #[serde(default)]
    pub failover_slot: Option<bool>,
    /// Where to start (`X/Y`); default: the slot's confirmed position.
    #[serde(default)]
    pub start_lsn: Option<String>,
    /// Write a heartbeat message into the source's WAL this often
    /// (milliseconds; `0`, the default: never), so the slot advances even
    /// when only other databases of the server write.
    #[serde(default)]
    pub heartbeat_interval_ms: u64,
    /// Seconds without any message from the server (not even a keepalive)
    /// after which the replication connection is taken for dead and
    /// reconnected (default 90; keep it above the server's
    /// `wal_sender_timeout / 2`; 0: wait forever).
    #[serde(default = "default_receive_timeout_secs")]
    pub receive_timeout_secs: u64,
    /// Create the signal table `pgcdc.signals` for on-demand snapshots
    /// (default true).
    #[serde(default = "yes")]
    pub signals: bool,
    /// Publish partitioned tables' changes under the partitioned table's
    /// name (default true; PostgreSQL 13+).
    #[serde(default = "yes")]
    pub publish_via_partition_root: bool,
    /// Install event triggers that write each `ALTER TABLE` and `DROP
    /// TABLE` into the WAL, so schema changes are known at their own LSN
    /// (default false; installing needs a superuser once).
    #[serde(default)]
    pub capture_ddl: bool,
    /// The slot was invalidated by the server, or is gone while the job has
    /// a checkpoint: `fail` (the default) stops with the reason and the way
    /// out; `resnapshot` creates a new slot and reads every table again.
    #[serde(default)]
    pub on_slot_lost: SlotLostSetting,
}

fn default_host() -> String {
    "localhost".to_owned()
}
fn default_receive_timeout_secs() -> u64 {
    cdc_runtime::pipeline::DEFAULT_RECEIVE_TIMEOUT.as_secs()
}
fn yes() -> bool {
    true
}

impl Config {
    /// Reads `path` and applies the process environment.
    ///
    /// Errors name `file:line:column` and the key. Every `PGCDC_*`
    /// environment variable that is not a setting is logged as a warning
    /// with the nearest setting's name (see [`unknown_env_vars`]).
    pub fn load(path: &Path) -> Result<Config, ConfigFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config = Config::parse_file(path, &text)?;
        let env_names: Vec<String> = std::env::vars_os()
            .filter_map(|(name, _)| name.into_string().ok())
            .collect();
        let password_env = config.source.password_env.clone();
        for unknown in unknown_env_vars(
            env_names.iter().map(String::as_str),
            password_env.as_deref(),
        ) {
            tracing::warn!("{unknown}");
        }
        config.apply_env(|name| std::env::var(name).ok())?;
        config
            .check()
            .map_err(|e| locate_invalid(e, path, &text, |name| std::env::var_os(name).is_some()))?;
        Ok(config)
    }

    /// Parses TOML text (no environment, no checks).
    pub fn parse(text: &str) -> Result<Config, ConfigFileError> {
        Config::parse_file(Path::new("<config>"), text)
    }

    /// Parses `text`, the contents of `path`: errors say where in it.
    fn parse_file(path: &Path, text: &str) -> Result<Config, ConfigFileError> {
        toml::from_str(text).map_err(|e| {
            let at = e.span().map(|span| span.start);
            ConfigFileError::Parse {
                path: path.to_owned(),
                location: at.map(|at| Location::at(path, text, at)),
                key: at.and_then(|at| location::key_path_at(text, at)),
                message: plain_message(e.message()),
            }
        })
    }

    /// Checks values that serde cannot: at least one sink, tables or
    /// schemas, non-zero sizes, a valid start LSN and sslmode.
    pub fn check(&self) -> Result<(), ConfigFileError> {
        let s = &self.source;
        if self.sinks.is_empty() {
            return Err(invalid("sinks", "configure at least one [[sinks]] entry"));
        }
        self.debezium.options()?;
        if s.tables.is_empty() && s.schemas.is_empty() {
            return Err(invalid(
                "source.tables",
                "list the tables (or source.schemas) to capture",
            ));
        }
        if !s.tables.is_empty() && !s.schemas.is_empty() {
            return Err(invalid(
                "source.tables",
                "set either source.tables or source.schemas, not both",
            ));
        }
        for t in &s.tables {
            table_ref("source.tables", t.name())?;
            if let TableEntry::Filtered(f) = t {
                if f.row_filter.as_deref().is_some_and(|w| w.trim().is_empty()) {
                    return Err(invalid(
                        "source.tables.where",
                        format!(
                            "the condition of {} is empty; leave `where` out to capture every row",
                            f.name
                        ),
                    ));
                }
                if f.columns.as_ref().is_some_and(|c| c.is_empty()) {
                    return Err(invalid("source.tables.columns", format!("the column list of {} is empty; leave `columns` out to capture every column", f.name)));
                }
            }
        }
        if s.slot.is_empty() || s.publication.is_empty() {
            return Err(invalid("source.slot", "slot and publication must be named"));
        }
        let p = &self.pipeline;
        if p.batch_size == 0
            || p.batch_bytes == 0
            || p.byte_budget == 0
            || p.status_interval_secs == 0
        {
            return Err(invalid(
                "pipeline",
                "batch_size, batch_bytes, byte_budget and status_interval_secs must be positive",
            ));
        }
        if p.channel_capacity == 0 {
            return Err(invalid("pipeline.channel_capacity", "must be positive"));
        }
        if p.worker_threads.is_some_and(|n| n == 0 || n > 1024) {
            return Err(invalid(
                "pipeline.worker_threads",
                "must be between 1 and 1024",
            ));
        }
        self.start_lsn()?;
        self.snapshot.check(s.start_lsn.is_some())?;
        self.ha.check(self.checkpoint.is_some())?;
        if let Some(c) = &self.checkpoint {
            c.check()?;
            checkpoint_api::JobName::new(c.job_name(s))
                .map_err(|e| invalid("checkpoint.job", e.to_string()))?;
        }
        for sink in &self.sinks {
            if let SinkConfig::Postgres {
                exactly_once,
                commit_with_checkpoint: Some(true),
                ..
            } = sink
            {
                if !exactly_once || self.checkpoint.is_none() {
                    return Err(invalid(
                        "sinks.commit_with_checkpoint",
                        "needs exactly_once = true and a [checkpoint] section in the sink's target database",
                    ));
                }
            }
        }
        checkpoint::check_operators(&self.operators)?;
        if !self.operators.is_empty() && self.checkpoint.is_none() {
            return Err(invalid(
                "operators",
                "stateful operators need a [checkpoint] section, or their state is lost on every restart",
            ));
        }
        if let Some(mode) = &s.sslmode {
            SslMode::from_str(mode).map_err(|e| invalid("source.sslmode", e.to_string()))?;
        }
        Ok(())
    }

    /// How the job starts when no checkpoint says where it is.
    pub fn startup_mode(&self) -> Result<cdc_runtime::snapshot::StartupMode, ConfigFileError> {
        self.snapshot.startup_mode(self.source.start_lsn.is_some())
    }

    /// The configured start position, if any.
    pub fn start_lsn(&self) -> Result<Option<Lsn>, ConfigFileError> {
        self.source
            .start_lsn
            .as_deref()
            .map(|v| {
                v.parse::<Lsn>()
                    .map_err(|e| invalid("source.start_lsn", e.to_string()))
            })
            .transpose()
    }

    /// The status update interval.
    pub fn status_interval(&self) -> Duration {
        Duration::from_secs(self.pipeline.status_interval_secs)
    }
}

/// Adds to a [`ConfigFileError::Invalid`] about a file key (`checkpoint.keep`)
/// where `text`, the contents of `path`, sets it; or, when the environment
/// variable for that key is set (`is_set`), names the variable instead,
/// since its value is the one that was checked.
fn locate_invalid(
    e: ConfigFileError,
    path: &Path,
    text: &str,
    is_set: impl Fn(&str) -> bool,
) -> ConfigFileError {
    let ConfigFileError::Invalid {
        key,
        reason,
        location: None,
    } = e
    else {
        return e;
    };
    if key.starts_with("PGCDC_") {
        return ConfigFileError::Invalid {
            key,
            reason,
            location: None,
        };
    }
    let var = format!("PGCDC_{}", key.replace('.', "_").to_ascii_uppercase());
    if ENV_VARS.contains(&var.as_str()) && is_set(&var) {
        return ConfigFileError::Invalid {
            key: format!("{key} (from {var})"),
            reason,
            location: None,
        };
    }
    let location = location::key_offset(text, &key).map(|at| Location::at(path, text, at));
    ConfigFileError::Invalid {
        key,
        reason,
        location,
    }
}

/// Parses a `[source] tables` entry (`schema.table` or `table`).
pub fn table_ref(key: &str, s: &str) -> Result<TableRef, ConfigFileError> {
    TableRef::parse(s).map_err(|e| invalid(key, e.to_string()))
}

#[cfg(test)]
mod tests;
