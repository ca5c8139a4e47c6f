//! [`PgStoreConfig`]: names, thresholds, layout, retention and pool settings.

use std::time::Duration;

use checkpoint_api::{DecodeOptions, EncodeOptions};

/// PostgreSQL's identifier limit (`NAMEDATALEN - 1`).
const MAX_IDENT_LEN: usize = 63;

/// Codec block size of [`PgStoreConfig::default`]: a quarter of the default row chunk.
const BLOCK_SIZE: u32 = 256 << 10;

/// Longest suffix appended to the table name (see [`crate::schema::Names`]).
pub(crate) const LONGEST_SUFFIX: &str = "_schema_version";

/// How checkpoints larger than the inline threshold are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LargeLayout {
    /// Rows of a chunks table `(job, checkpoint_id, seq) -> bytea`, written with binary
    /// `COPY` while the next chunk is encoded. The default: faster than large objects.
    #[default]
    ChunkRows,
    /// One PostgreSQL large object per checkpoint, written with `lo_put` in chunks.
    LargeObject,
}

/// The default [`PoolOptions::operation_timeout`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(120);

/// Connection-pool settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolOptions {
    /// Maximum number of connections (default 4).
    pub max_size: usize,
    /// How long to wait for a free connection (default 30 s; `None` waits forever).
    pub wait_timeout: Option<Duration>,
    /// How long to wait for a new connection to be established (default 10 s).
    pub create_timeout: Option<Duration>,
    /// How long the health check of a reused connection may take (default 5 s).
    pub recycle_timeout: Option<Duration>,
    /// How long one store operation (a whole save with its chunks, a load,
    /// a listing, a retention pass) may take before it fails as
    /// [`Unavailable`](checkpoint_api::CheckpointError::Unavailable), so
    /// that a server that stops answering without closing the connection
    /// (a network partition, a stalled host) cannot hang the caller. The
    /// pool's idle connections are dropped then, so the stalled one is not
    /// handed out again. Default 120 s; raise it for states of gigabytes
    /// over slow links. `None` waits forever.
    pub operation_timeout: Option<Duration>,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            max_size: 4,
            wait_timeout: Some(Duration::from_secs(30)),
            create_timeout: Some(Duration::from_secs(10)),
            recycle_timeout: Some(Duration::from_secs(5)),
            operation_timeout: Some(DEFAULT_OPERATION_TIMEOUT),
        }
    }
}

/// Settings of a [`PgCheckpointStore`](crate::PgCheckpointStore).
///
/// Build one with [`PgStoreConfig::default`] and change fields (the struct is
/// `#[non_exhaustive]`, so later versions can add settings).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PgStoreConfig {
    /// Schema holding the tables (default `pgcdc`); created if missing. Any name: it is
    /// always quoted.
    pub schema: String,
    /// Name of the checkpoints table (default `checkpoints`); the other tables are named
    /// after it (`<table>_leases`, `<table>_chunks`, `<table>_large_objects`,
    /// `<table>_schema_version`). Any name of at most 48 bytes: it is always quoted.
    pub table: String,
    /// Envelopes up to this many bytes (uncompressed length) are stored inline in the
    /// metadata row: one statement, where the chunked layouts need a transaction of
    /// several round trips, which only pays off for bigger states. The default,
    /// [`DEFAULT_INLINE_THRESHOLD`], keeps states up to 1 MiB inline: 1 MiB plus 64 KiB
    /// for the checkpoint's own fields (ids, positions, operator names, snapshot progress).
    pub inline_threshold: usize,
    /// How larger checkpoints are stored (default [`LargeLayout::ChunkRows`]).
    pub large_layout: LargeLayout,
    /// Chunk size of the chunk-rows layout (default 1 MiB).
    pub row_chunk_size: usize,
    /// Chunk size (bytes per `lo_put` / `lo_get`) of the large-object layout (default 8 MiB).
    pub large_object_chunk_size: usize,
    /// Keep only the newest N checkpoints of a job: after each save, older ones are deleted
    /// by a statement the store runs after the save returned (usually within 0.1 s), off the
    /// caller's path (see
    /// [`PgCheckpointStore::settle_retention`](crate::PgCheckpointStore::settle_retention)).
    /// Default `Some(5)`; `None` keeps everything. Must be at least 1.
    pub keep_on_save: Option<usize>,
    /// Codec options for writing (default: LZ4 like [`EncodeOptions::default`], but in
    /// blocks of 256 KiB, a quarter of the default row chunk).
    ///
    /// A codec block that straddles two chunks is copied twice on load (staged, then
    /// unpacked); with blocks a quarter of a chunk at most one block in four does, where
    /// 1 MiB blocks in 1 MiB rows all do. That spares about 10% of the client CPU of a big
    /// load, for 0.6% more bytes on compressible state (LZ4 restarts its history at every
    /// block).
    pub encode: EncodeOptions,
    /// Codec options for reading (e.g. the largest checkpoint accepted).
    pub decode: DecodeOptions,
    /// Connection-pool settings.
    pub pool: PoolOptions,
}

/// The default [`PgStoreConfig::inline_threshold`]: 1 MiB of state plus 64 KiB for the
/// checkpoint's own fields around it.
pub const DEFAULT_INLINE_THRESHOLD: usize = (1 << 20) + (64 << 10);

impl Default for PgStoreConfig {
    fn default() -> Self {
        PgStoreConfig {
            schema: "pgcdc".into(),
            table: "checkpoints".into(),
            inline_threshold: DEFAULT_INLINE_THRESHOLD,
            large_layout: LargeLayout::default(),
            row_chunk_size: 1 << 20,
            large_object_chunk_size: 8 << 20,
            keep_on_save: Some(5),
            encode: EncodeOptions::default().with_block_size(BLOCK_SIZE),
            decode: DecodeOptions::default().with_max_uncompressed_len(4 << 30),
            pool: PoolOptions::default(),
        }
    }
}

/// A [`PgStoreConfig`] that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A schema or table name is empty, too long or contains a NUL byte.
    #[error("invalid {what} name {name:?}: must be 1 to {max} bytes without NUL")]
    InvalidName {
        /// `schema` or `table`.
        what: &'static str,
        /// The name.
        name: String,
        /// The longest allowed.
        max: usize,
    },
    /// A size setting is out of range.
    #[error("invalid setting {what}: {reason}")]
    InvalidSetting {
        /// The setting.
        what: &'static str,
        /// Why.
        reason: &'static str,
    },
}

impl PgStoreConfig {
    /// Checks names and sizes.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_name("schema", &self.schema, MAX_IDENT_LEN)?;
        check_name("table", &self.table, MAX_IDENT_LEN - LONGEST_SUFFIX.len())?;
        if self.row_chunk_size == 0 || self.row_chunk_size > 512 << 20 {
            return Err(ConfigError::InvalidSetting {
                what: "row_chunk_size",
                reason: "must be 1 byte to 512 MiB",
            });
        }
        if self.large_object_chunk_size == 0 || self.large_object_chunk_size > 512 << 20 {
            return Err(ConfigError::InvalidSetting {
                what: "large_object_chunk_size",
                reason: "must be 1 byte to 512 MiB",
            });
        }
        if self.inline_threshold > 512 << 20 {
            return Err(ConfigError::InvalidSetting {
                what: "inline_threshold",
                reason: "must be at most 512 MiB",
            });
        }
        if self.keep_on_save == Some(0) {
            return Err(ConfigError::InvalidSetting {
                what: "keep_on_save",
                reason: "must keep at least the checkpoint just saved",
            });
        }
        if self.pool.max_size == 0 {
            return Err(ConfigError::InvalidSetting {
                what: "pool.max_size",
                reason: "must be at least 1",
            });
        }
        Ok(())
    }
}

fn check_name(what: &'static str, name: &str, max: usize) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > max || name.contains('\0') {
        return Err(ConfigError::InvalidName {
            what,
            name: name.to_owned(),
            max,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_limits_enforced() {
        assert_eq!(PgStoreConfig::default().validate(), Ok(()));
        assert_eq!(
            PgStoreConfig::default().encode,
            EncodeOptions::default().with_block_size(256 << 10)
        );
        let mut c = PgStoreConfig {
            table: "t".repeat(49),
            ..PgStoreConfig::default()
        };
        assert!(matches!(c.validate(), Err(ConfigError::InvalidName { .. })));
        c.table = "t".repeat(48);
        assert_eq!(c.validate(), Ok(()));
        c.schema = "a\0b".into();
        assert!(c.validate().is_err());
        let mut c = PgStoreConfig {
            keep_on_save: Some(0),
            ..PgStoreConfig::default()
        };
        assert!(c.validate().is_err());
        c.keep_on_save = None;
        c.row_chunk_size = 0;
        assert!(c.validate().is_err());
    }
}
