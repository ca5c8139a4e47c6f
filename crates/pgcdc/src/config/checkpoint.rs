//! `[checkpoint]` and `[[operators]]`.

use std::time::Duration;

use serde::Deserialize;

use super::{env_bool, invalid, ConfigFileError, Secret, SourceConfig};
use cdc_runtime::checkpoint::{ConfirmPolicy, DEFAULT_INTERVAL, DEFAULT_KEEP};
use cdc_runtime::operators::{KeyedAggregate, KeyedAggregateSpec, Operator, TableCounters};

/// `[checkpoint]`: present means the job checkpoints.
///
/// ```toml
/// [checkpoint]
/// job = "orders"            # default: the slot name
/// # url = "postgres://pgcdc@state-db/pgcdc"  # default: the source database
/// interval_ms = 30000
/// keep = 5
/// confirm = "oldest"        # or "newest"
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// The job name (default: the slot name).
    #[serde(default)]
    pub job: Option<String>,
    /// Where checkpoints are stored (libpq URL or key=value; not logged).
    /// Default: the source database with the source's credentials.
    #[serde(default)]
    pub url: Option<Secret>,
    /// Schema of the checkpoint tables (default `pgcdc`).
    #[serde(default = "default_schema")]
    pub schema: String,
    /// Name of the checkpoint table (default `checkpoints`).
    #[serde(default = "default_table")]
    pub table: String,
    /// Milliseconds between checkpoints (default 30000).
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    /// Also checkpoint after this many bytes of WAL.
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// Checkpoints kept (default 5).
    #[serde(default = "default_keep")]
    pub keep: usize,
    /// Encoded checkpoints up to this many bytes are stored inline in their
    /// row; bigger ones in chunks (default: the store's, 1 MiB of state plus 64 KiB).
    #[serde(default)]
    pub inline_threshold: Option<usize>,
    /// How far the slot may be confirmed: `oldest` retained checkpoint
    /// (default) or `newest`.
    #[serde(default)]
    pub confirm: ConfirmSetting,
    /// Resume even when the slot was confirmed past the newest checkpoint.
    #[serde(default)]
    pub trust_slot: bool,
    /// Seconds one checkpoint store operation (a save, a load) may take
    /// before it fails and is retried at the next interval (default 120;
    /// 0: no limit).
    #[serde(default = "default_store_timeout_secs")]
    pub store_timeout_secs: u64,
}

fn default_store_timeout_secs() -> u64 {
    checkpoint_pg::DEFAULT_OPERATION_TIMEOUT.as_secs()
}

fn default_schema() -> String {
    "pgcdc".to_owned()
}
fn default_table() -> String {
    "checkpoints".to_owned()
}
fn default_interval_ms() -> u64 {
    DEFAULT_INTERVAL.as_millis() as u64
}
fn default_keep() -> usize {
    DEFAULT_KEEP
}

/// `checkpoint.confirm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfirmSetting {
    /// The oldest retained checkpoint.
    #[default]
    Oldest,
    /// The newest checkpoint.
    Newest,
}

impl From<ConfirmSetting> for ConfirmPolicy {
    fn from(s: ConfirmSetting) -> Self {
        match s {
            ConfirmSetting::Oldest => ConfirmPolicy::OldestRetained,
            ConfirmSetting::Newest => ConfirmPolicy::Newest,
        }
    }
}

impl CheckpointConfig {
    /// The job name.
    pub fn job_name(&self, source: &SourceConfig) -> String {
        self.job.clone().unwrap_or_else(|| source.slot.clone())
    }

    /// The interval between checkpoints.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// [`store_timeout_secs`](Self::store_timeout_secs) as a limit (`None`: 0).
    pub fn store_timeout(&self) -> Option<Duration> {
        (self.store_timeout_secs > 0).then(|| Duration::from_secs(self.store_timeout_secs))
    }

    pub(super) fn apply_env(
        &mut self,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigFileError> {
        let var = |key: &str| env(&format!("PGCDC_CHECKPOINT_{}", key.to_ascii_uppercase()));
        let num = |key: &str| -> Result<Option<u64>, ConfigFileError> {
            match var(key) {
                None => Ok(None),
                Some(v) => v.parse().map(Some).map_err(|_| {
                    invalid(
                        format!("PGCDC_CHECKPOINT_{}", key.to_ascii_uppercase()),
                        format!("{v:?} is not a number"),
                    )
                }),
            }
        };
        if let Some(v) = var("job") {
            self.job = Some(v);
        }
        if let Some(v) = var("url") {
            self.url = Some(Secret::new(v));
        }
        if let Some(v) = num("interval_ms")? {
            self.interval_ms = v;
        }
        if let Some(v) = num("max_bytes")? {
            self.max_bytes = Some(v);
        }
        if let Some(v) = num("keep")? {
            self.keep = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = var("confirm") {
            self.confirm = match v.as_str() {
                "oldest" => ConfirmSetting::Oldest,
                "newest" => ConfirmSetting::Newest,
                _ => {
                    return Err(invalid(
                        "PGCDC_CHECKPOINT_CONFIRM",
                        format!("{v:?} is neither \"oldest\" nor \"newest\""),
                    ))
                }
            };
        }
        if let Some(v) = num("store_timeout_secs")? {
            self.store_timeout_secs = v;
        }
        if let Some(v) = var("trust_slot") {
            self.trust_slot = env_bool("PGCDC_CHECKPOINT_TRUST_SLOT", v)?;
        }
        Ok(())
    }

    pub(super) fn check(&self) -> Result<(), ConfigFileError> {
        if self.interval_ms == 0 {
            return Err(invalid("checkpoint.interval_ms", "must be positive"));
        }
        if self.keep == 0 {
            return Err(invalid(
                "checkpoint.keep",
                "must keep at least 1 checkpoint",
            ));
        }
        if self.max_bytes == Some(0) {
            return Err(invalid("checkpoint.max_bytes", "must be positive when set"));
        }
        if let Some(job) = &self.job {
            checkpoint_api::JobName::new(job.clone())
                .map_err(|e| invalid("checkpoint.job", e.to_string()))?;
        }
        Ok(())
    }
}

/// One `[[operators]]` entry.
///
/// ```toml
/// [[operators]]
/// type = "table_counters"
/// id = "counts"
///
/// [[operators]]
/// type = "keyed_aggregate"
/// id = "order_totals"          # emitted as table pgcdc.order_totals
/// table = "public.orders"      # any replica identity; one remembered row per source row
/// key = "customer_id"
/// value = "amount"
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum OperatorConfig {
    /// Per-table counts by operation.
    TableCounters {
        /// Operator id.
        id: String,
    },
    /// Count and sum of `value` grouped by `key` over `table`.
    KeyedAggregate {
        /// Operator id.
        id: String,
        /// `schema.table` or `table` (schema `public`).
        table: String,
        /// Grouping column.
        key: String,
        /// Summed column.
        value: String,
    },
}

impl OperatorConfig {
    /// The operator's id.
    pub fn id(&self) -> &str {
        match self {
            OperatorConfig::TableCounters { id } | OperatorConfig::KeyedAggregate { id, .. } => id,
        }
    }

    /// Builds the operator.
    pub fn build(&self) -> Result<Box<dyn Operator>, ConfigFileError> {
        Ok(match self {
            OperatorConfig::TableCounters { id } => Box::new(TableCounters::new(id.clone())),
            OperatorConfig::KeyedAggregate {
                id,
                table,
                key,
                value,
            } => {
                let t = super::table_ref("operators.table", table)?;
                Box::new(KeyedAggregate::new(KeyedAggregateSpec {
                    id: id.clone(),
                    schema: t.schema,
                    table: t.table,
                    key: key.clone(),
                    value: value.clone(),
                }))
            }
        })
    }
}

/// Checks operator ids: valid and unique.
pub(super) fn check_operators(ops: &[OperatorConfig]) -> Result<(), ConfigFileError> {
    let mut seen = std::collections::HashSet::new();
    for op in ops {
        let id = op.id();
        if id.is_empty()
            || id.len() > checkpoint_api::MAX_NAME_LEN
            || id.chars().any(char::is_control)
        {
            return Err(invalid(
                "operators.id",
                format!("{id:?} is not a valid operator id"),
            ));
        }
        if !seen.insert(id) {
            return Err(invalid("operators.id", format!("{id:?} is used twice")));
        }
        op.build()?;
    }
    Ok(())
}
