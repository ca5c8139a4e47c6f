//! pgcdc checkpoints in PostgreSQL tables: atomic, verified, fenced, retained, and fast for
//! big states.
//!
//! [`PgCheckpointStore`] implements [`checkpoint_api::CheckpointStore`] over a
//! deadpool-postgres pool. It only moves bytes: encoding, chunking and checksums are
//! `checkpoint-api`'s codec.
//!
//! # Layout
//!
//! All tables live in one schema (default `pgcdc`) and are named after one configurable
//! table name (default `checkpoints`); every name is quoted, so any name works.
//!
//! * `<table>`: one row per checkpoint, primary key `(job, checkpoint_id)`, with the commit
//!   end LSN, creation time, format version, stored size, CRC32C, storage kind, chunk size
//!   and count, and the writer's epoch. Envelopes up to
//!   [`PgStoreConfig::inline_threshold`] (1 MiB of state) are stored in its `data` column (`BYTEA`).
//! * `<table>_chunks`: bigger envelopes, by default ([`LargeLayout::ChunkRows`]), as rows
//!   `(job, checkpoint_id, seq) -> bytea` written with binary `COPY` while the next chunk is
//!   being encoded on a blocking thread. No foreign key ties them to their checkpoint row:
//!   the statements that delete checkpoint rows (retention, delete) delete their chunks
//!   too, and [`PgCheckpointStore::vacuum`] removes chunks whose row was deleted by hand.
//! * With [`LargeLayout::LargeObject`], bigger envelopes go to one large object each,
//!   written with pipelined `lo_put` calls; `<table>_large_objects` records every large
//!   object the store creates, in the same transaction, so [`PgCheckpointStore::vacuum`]
//!   can find orphans without touching anybody else's large objects.
//! * `<table>_leases`: one row per job with its fencing epoch, the highest id ever saved,
//!   the newest stored checkpoint's LSN and the lowest id any of its checkpoint rows may
//!   have. A save checks its id and LSN against the row and moves both in the one UPDATE
//!   that fences it, so it reads nothing else. Retention deletes from that lowest id up,
//!   so its cost does not grow with the index entries of rows deleted earlier, which stay
//!   until `VACUUM` (for long when a long transaction holds it back). Taking a lease reads
//!   the newest LSN from the checkpoints table again: rows deleted by hand while no
//!   writer held the job count as they are. A row deleted by hand (not through
//!   [`CheckpointStore::delete`](checkpoint_api::CheckpointStore::delete)) while a writer holds
//!   the lease still counts for that writer until the next lease: its saves may not go
//!   below that row's LSN, which a writer's saves never do, since they only move forward.
//! * `<table>_schema_version`: applied migrations. The store creates and upgrades the schema
//!   itself, in one transaction under an advisory lock, so concurrent starts are safe.
//!
//! # Guarantees
//!
//! * A save is one transaction: chunks, metadata row and the lease's highest id commit
//!   together or not at all. A small (inline) save is one statement, so one round trip with
//!   a cached prepared statement; so is loading an inline checkpoint.
//! * Retention ([`PgStoreConfig::keep_on_save`], default 5: older rows deleted with their
//!   chunk rows, their large objects unlinked) runs after a save returned (usually within
//!   0.1 s), in a transaction and a task of its own, one at a time per store, so the save does not wait
//!   for deletes (a 1 MiB state is some 500 TOAST rows). A job may so hold one checkpoint
//!   more than it keeps for a moment, or a few more if the process ends first (the next
//!   retention deletes them); never fewer.
//!   [`PgCheckpointStore::settle_retention`] waits for it. [`PgCheckpointStore::save_in`]
//!   applies retention inside the caller's transaction instead.
//! * [`PgCheckpointStore::save_in`] writes a checkpoint inside a transaction the caller
//!   opened on its own connection to the same database, without committing: the caller's
//!   writes and the checkpoint then commit together (pgcdc's PostgreSQL sink does this for
//!   exactly-once delivery).
//! * The save locks the job's lease row (`FOR UPDATE`) and checks its epoch: a writer whose
//!   lease was taken over gets [`CheckpointError::Fenced`](checkpoint_api::CheckpointError).
//!   Taking a lease, deleting and retention lock that row in a statement of their own
//!   before they read the checkpoints table, so they see every save of the job that was
//!   in flight when they started.
//! * Loads read in one `REPEATABLE READ` snapshot, check chunk lengths against the metadata
//!   and the envelope's CRC32C; `latest` skips a corrupt checkpoint with a `tracing` warning
//!   naming it and returns the newest valid one.
//! * The rules themselves (which epoch fences a writer, when a save would move the job
//!   backward, which checkpoints `latest` skips) are `checkpoint-api`'s pure functions
//!   ([`checkpoint_api::fencing`], [`checkpoint_api::LatestScan`]), the same ones the
//!   in-memory store runs; this crate reads their inputs from the tables.
//! * Errors: connection loss, shutdown, overload, serialization failures and pool timeouts
//!   are `Unavailable` (retryable); everything else is definite.
//!
//! # Example
//!
//! ```no_run
//! use checkpoint_api::{
//!     Checkpoint, CheckpointId, CheckpointStore, JobName, OwnerId, ProtocolOptions,
//!     SourcePosition, Timestamp,
//! };
//! use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pg: tokio_postgres::Config = "host=localhost user=pgcdc dbname=app".parse()?;
//! let mut config = PgStoreConfig::default();
//! config.table = "orders pipeline \"checkpoints\"".into(); // quoted for you
//! let store = PgCheckpointStore::connect(pg, config).await?;
//!
//! let job = JobName::new("orders-to-kafka")?;
//! let lease = store.acquire_lease(&job, &OwnerId::new("host-1:4242")?).await?;
//! let cp = Checkpoint::new(
//!     job.clone(),
//!     CheckpointId::FIRST,
//!     Timestamp::from_system_time(std::time::SystemTime::now()),
//!     SourcePosition {
//!         commit_end_lsn: "16/B374D848".parse()?,
//!         slot: "pgcdc".into(),
//!         publications: vec!["orders".into()],
//!         protocol: ProtocolOptions::default(),
//!     },
//! );
//! store.save(&lease, &cp).await?;
//! let latest = store.latest(&job).await?;
//! assert_eq!(latest.checkpoint.map(|s| s.checkpoint), Some(cp));
//! store.vacuum().await?; // unlink orphaned large objects, if any
//! # Ok(()) }
//! ```
//!
//! # TLS
//!
//! [`PgCheckpointStore::connect`] connects without TLS;
//! [`PgCheckpointStore::connect_with_tls`] takes any `tokio_postgres` TLS connector, and
//! [`PgCheckpointStore::from_pool`] any pool. `cdc-runtime`'s `tls_connect` module has a
//! rustls connector with libpq's `sslmode` meanings (up to `verify-full`) and opens the
//! store with the source connection's settings. A server that does not offer TLS when it
//! is required, or whose certificate is refused, is a definite (not retryable) error.
//!
//! # Feature flags
//!
//! None.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod error;
mod identity;
mod schema;
mod sql;
mod store;

pub use config::{
    ConfigError, LargeLayout, PgStoreConfig, PoolOptions, DEFAULT_INLINE_THRESHOLD,
    DEFAULT_OPERATION_TIMEOUT,
};
pub use error::pg_fault;
pub use identity::{database_identity, DatabaseIdentity};
pub use schema::{quote_ident, SCHEMA_VERSION};
pub use store::PgCheckpointStore;
