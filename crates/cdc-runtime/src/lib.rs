//! The IO side of pgcdc.
//!
//! `cdc-runtime` owns everything that touches the outside world: sockets,
//! TLS, the tokio runtime, retries, sinks, and whole jobs ([`Job`]).
//! Decoding lives in the sans-IO `cdc-core`; checkpoint storage behind
//! `checkpoint-api`. The `pgcdc` command (CLI, `pgcdc.toml`, logs,
//! quickstart) is the `pgcdc` crate on top of this one; embedders need only
//! this crate.
//!
//! # Replication connection
//!
//! [`replication`] opens a logical replication connection
//! (`replication=database`) on tokio and `postgres-protocol`, since
//! `tokio-postgres` has no replication mode. It authenticates with trust,
//! password, md5 or SCRAM-SHA-256, speaks TLS through rustls (`ring`
//! provider) with libpq's `sslmode` semantics, runs replication commands and
//! streams CopyData payloads with backpressure.
//!
//! ```no_run
//! use cdc_runtime::replication::{
//!     PgOutputOptions, ReplicationConfig, ReplicationConnection, SnapshotAction,
//! };
//!
//! # async fn run() -> Result<(), cdc_runtime::replication::ReplicationError> {
//! let config: ReplicationConfig =
//!     "host=db.example port=5432 dbname=app user=cdc password=secret sslmode=verify-full sslrootcert=/etc/pgcdc/ca.pem"
//!         .parse()?;
//! // `Display` leaves the password out, so the config is safe to log.
//! println!("connecting with {config}");
//!
//! let mut conn = ReplicationConnection::connect(&config).await?;
//! let system = conn.identify_system().await?;
//! println!("system {} at {}", system.system_id, system.xlog_pos);
//!
//! let slot = conn
//!     .create_replication_slot("pgcdc_app", false, SnapshotAction::Nothing)
//!     .await?;
//! let version = conn.server_version_num().await?;
//! let options = PgOutputOptions::for_server(version, ["app_pub"]);
//!
//! let mut stream = conn
//!     .start_replication("pgcdc_app", slot.consistent_point, &options)
//!     .await?;
//! while let Some(payload) = stream.next_message().await? {
//!     // payload[0] is b'w' (XLogData) or b'k' (keepalive): hand it to
//!     // cdc_core's replication framing, and send its standby status updates
//!     // ('r') back with `stream.send(&bytes).await?`.
//!     # let _ = payload;
//!     # break;
//! }
//! let conn = stream.finish().await?;
//! conn.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Jobs
//!
//! [`Job::builder`] runs a whole job the way `pgcdc run` does: it checks the
//! server and creates the publication and slot ([`setup`]), takes the job's
//! lock and lease, recovers from the newest checkpoint (checking it against
//! the slot), takes or resumes the initial snapshot ([`snapshot`]), and
//! streams. Its settings are typed: [`SourceOptions`], sinks as
//! [`SinkOptions`] or your own [`Sink`], [`Operator`]s, [`CheckpointSettings`]
//! and [`SnapshotSettings`]. The `pgcdc` command's `pgcdc.toml` is a thin
//! layer that builds the same thing. `examples/stateful_operator.rs` and
//! `examples/custom_sink.rs` embed a job with an operator and a sink of their
//! own.
//!
//! ```no_run
//! use cdc_runtime::{Capture, Job, SinkOptions, SourceOptions, TableRef};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let db: cdc_runtime::ReplicationConfig = "host=db.example dbname=app user=cdc".parse()?;
//! let tables = Capture::Tables(vec![TableRef::parse("public.orders")?]);
//! let job = Job::builder(SourceOptions::new(db, "pgcdc_app", "pgcdc_app", tables))
//!     .sink(SinkOptions::Null)
//!     .build()?;
//! let progress = job.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! println!("confirmed up to {}", progress.confirmed);
//! # Ok(()) }
//! ```
//!
//! # Pipeline
//!
//! Below the job, [`pipeline`] streams: replication stream -> `cdc_core`
//! decoder and transaction assembler -> [`event::ChangeEvent`] batches ->
//! [`operators`] -> one task per [`sinks::Sink`], joined by bounded channels.
//! Without checkpoints the position confirmed to the slot is the end of the
//! last transaction every sink has flushed; with them, [`checkpoint`] saves
//! the position and every operator's state into a
//! [`checkpoint_api::CheckpointStore`] and confirms only what durable
//! checkpoints cover.
//!
//! ```no_run
//! use cdc_runtime::pipeline::{Pipeline, PipelineOptions};
//! use cdc_runtime::sinks::{NullSink, Sink};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let replication = "host=db.example dbname=app user=cdc".parse()?;
//! let options = PipelineOptions::new(replication, "pgcdc_app", "pgcdc_app");
//! let sinks: Vec<Box<dyn Sink>> = vec![Box::new(NullSink::new())];
//! let pipeline = Pipeline::new(options, sinks);
//! let progress = pipeline.progress();
//! pipeline.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! println!("confirmed up to {}", progress.borrow().confirmed);
//! # Ok(()) }
//! ```

//! # Other PostgreSQL connections
//!
//! [`tls_connect`] gives `tokio-postgres` (the checkpoint store's pool, the
//! PostgreSQL table sink) the replication connection's rustls TLS and
//! `sslmode` / `sslrootcert` meanings.
//!
//! # Feature flags
//!
//! None.
// One `unsafe` block: `setsockopt(SO_RCVLOWAT)` in replication/transport.rs,
// which no safe binding offers.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod checkpoint;
pub mod ddl;
mod disk_full;
pub mod encoding;
pub mod event;
pub mod job;
pub mod keepalive;
pub mod monitor;
pub mod operators;
mod pg_error;
pub mod pipeline;
pub mod replication;
pub mod setup;
pub mod signal;
pub mod sinks;
pub mod snapshot;
pub mod source;
pub mod tls_connect;

pub use event::{ChangeEvent, Operation, Row};
pub use job::{
    CheckpointSettings, Job, JobBuilder, JobError, PipelineTuning, SnapshotSettings, StoreOptions,
};
pub use operators::{CommitContext, Operator, OperatorError};
pub use pipeline::{Pipeline, PipelineError, PipelineOptions, Progress};
pub use replication::{ReplicationConfig, ReplicationConnection, ReplicationError};
pub use sinks::{Sink, SinkError, SinkOptions};
pub use snapshot::{SnapshotOptions, StartupMode};
pub use source::{Capture, OnSlotLost, SourceOptions, TableRef};
