//! The streaming pipeline: replication stream -> decoder -> transactions ->
//! change events -> sinks.
//!
//! ```text
//!  walsender ──CopyData──▶ source task ──Arc<Batch>──▶ [bounded channel] ──▶ sink task 1 ──▶ Sink
//!      ▲                    Decoder                     [bounded channel] ──▶ sink task 2 ──▶ Sink
//!      │                    TxnAssembler                                        │
//!      └─status updates──── EventConverter ◀──────── flushed commit LSN (watch) ─┘
//! ```
//!
//! # What each LSN means
//!
//! * **received**: the highest `wal_start` of an XLogData seen; reported as
//!   the `write` position of standby status updates.
//! * **written** (per sink): the end LSN of the last transaction whose every
//!   event has been handed to the sink's `write`.
//! * **acknowledged** (per sink): `written` as of the sink's last successful
//!   `flush`.
//! * **processed**: the end LSN of the last transaction converted (and seen
//!   by every operator). After a reconnect streaming resumes here, and
//!   transactions that ended at or before it are skipped.
//! * **confirmed**: without checkpoints, the minimum acknowledged position
//!   over all sinks, or, between transactions, the position of the server's
//!   last keepalive once every sink flushed the last commit (so quiet tables
//!   do not hold WAL back); with checkpoints, the position durable
//!   checkpoints allow (see [`crate::checkpoint`]), which is never past what
//!   every sink acknowledged. It never moves backward. Only this is sent as
//!   `flush`/`apply`, so the server keeps every transaction that some sink
//!   has not made durable or no checkpoint covers; after a crash streaming
//!   resumes from there (at-least-once: sinks may see a transaction twice,
//!   identified by `(commit_lsn, index)`).
//!
//! # Two-phase transactions
//!
//! On a slot with `two_phase` enabled the server sends a prepared
//! transaction at PREPARE and its decision later. The assembler holds it
//! (spilled past `byte_budget` like a streamed one) and the pipeline delivers
//! it once, at COMMIT PREPARED, with the commit's LSN and time as its
//! position; a rolled-back one delivers nothing. Other transactions flow
//! meanwhile. Because the server does not send a PREPARE again once the slot
//! is confirmed past it, **confirmed never passes the prepare LSN of an
//! undecided prepared transaction, nor of a committed one until its commit
//! is flushed (or checkpointed)**, and a pipeline resuming from a checkpoint
//! on a two-phase slot starts from the slot's position; see the `prepared`
//! module for the whole rule.
//!
//! # Operators and checkpoints
//!
//! [`Operator`]s see every change event in order and each commit, before
//! the events are batched for the sinks; at a commit they may add derived
//! events. With [`Pipeline::with_checkpoints`], a checkpoint coordinator captures
//! the operators' state at transaction boundaries and saves checkpoints in
//! the background; see [`crate::checkpoint`].
//!
//! # Backpressure
//!
//! Batches go to each sink through a bounded channel. When a channel is
//! full the source waits and does not read the socket, so the walsender
//! blocks on a full TCP window. Status updates still go out while waiting.
//!
//! # Error handling
//!
//! Transient errors of the replication connection (I/O, the walsender being
//! terminated, the server restarting) reconnect with exponential backoff and
//! jitter and resume from the confirmed position. A transient sink error is
//! retried inside its sink task (reset and replay, see `sink_task`) without
//! touching replication. Everything else (decode or protocol errors, sink
//! errors the sink task gave up on, spill file errors, authentication,
//! missing slot or publication) stops the pipeline with a [`PipelineError`].
//! What is transient is decided once, in [`cdc_core::fault`].
//!
//! # Memory
//!
//! Plain transactions are passed on as they arrive, in batches of
//! `batch_size` events or `batch_bytes` of rows, whichever comes first, so
//! they take no more memory however large they are.
//! Streamed in-progress transactions (pgoutput v2+: the server streams a
//! transaction once it outgrows its `logical_decoding_work_mem`) must be held
//! until Stream Commit, and prepared ones (two-phase) until COMMIT PREPARED.
//! They are held in memory up to `byte_budget` bytes in
//! total; past it the largest one is spilled to a temporary file in
//! `spill_dir` and its later changes are appended there. At Stream Commit a
//! spilled transaction is read back one record at a time and shipped in
//! batches; at Stream Abort its file is deleted. A rolled-back
//! subtransaction's changes are skipped on replay. See the `spill` module.
//!
//! # Modules
//!
//! One stage or concern each; this module holds [`Pipeline`] and its `run`,
//! which wires them together.
//!
//! * `options`: [`PipelineOptions`] and [`Backoff`].
//! * `progress`: which LSN may be confirmed when (no IO); `prepared`: how
//!   prepared transactions hold it back (the two-phase rule).
//! * `status`: standby status updates and [`Progress`] snapshots.
//! * `session`: the source session: the reconnect loop, the socket select
//!   loop, and handling each replication message.
//! * `convert`: transaction events to change events, operators, skipping
//!   what was processed before, checkpoint captures at commits.
//! * `snapshot_bridge`: the initial snapshot inside the stream: the
//!   consistent read (fallback) and the watermarks.
//! * `ship`: the pending batch, shipping it to the sinks' channels
//!   (backpressure), and the sink tasks' lifetime.
//! * `sink_task`: one task per sink; `spill`: streamed transactions past
//!   the byte budget.

mod convert;
mod ddl;
mod defaults;
mod error;
mod facts;
mod failover;
mod options;
mod partitions;
mod prepared;
mod progress;
mod requests;
mod session;
mod ship;
mod sink_task;
mod snapshot_bridge;
mod spill;
mod status;
mod visibility;

use std::future::Future;
use std::sync::Arc;

use cdc_core::{Lsn, TxnAssembler};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;

use crate::checkpoint::{CheckpointOptions, CheckpointStats, Coordinator};
use crate::event::EventConverter;
use crate::operators::Operator;
use crate::sinks::{Sink, SinkError};
use crate::snapshot::{Snapshot, SnapshotPlan, SnapshotState};

pub use convert::HEARTBEAT_PREFIX;
pub use defaults::{
    DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE, DEFAULT_BYTE_BUDGET, DEFAULT_CHANNEL_CAPACITY,
    DEFAULT_MIN_FLUSH_INTERVAL, DEFAULT_RECEIVE_TIMEOUT, DEFAULT_SINK_TIMEOUT,
    DEFAULT_STATUS_INTERVAL,
};
pub use error::PipelineError;
pub use options::{Backoff, PipelineOptions, DEFAULT_STREAM_IN_PROGRESS, READ_PAUSE_BELOW};
pub use spill::SpillError;

use progress::LsnProgress;
use session::Source;
use ship::Pending;
use sink_task::Batch;
use spill::Spiller;

/// Progress of a running pipeline, observable through [`Pipeline::progress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// The position confirmed to the server (flushed by every sink).
    pub confirmed: Lsn,
    /// The highest WAL position received.
    pub received: Lsn,
    /// Change events handed to the sinks.
    pub events: u64,
    /// Reconnects so far.
    pub reconnects: u32,
    /// Checkpoints taken (all zero without checkpoints).
    pub checkpoints: CheckpointStats,
    /// The initial snapshot.
    pub snapshot: SnapshotState,
}

/// A configured pipeline; [`run`](Self::run) streams until shutdown or a
/// definite error.
pub struct Pipeline {
    options: PipelineOptions,
    sinks: Vec<Box<dyn Sink>>,
    operators: Vec<Box<dyn Operator>>,
    checkpoints: Option<CheckpointOptions>,
    snapshot: Option<SnapshotPlan>,
    progress: watch::Sender<Progress>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("options", &self.options)
            .field("sinks", &self.sinks.len())
            .field("operators", &self.operators.len())
            .field("checkpoints", &self.checkpoints.is_some())
            .field("snapshot", &self.snapshot.is_some())
            .finish()
    }
}

/// State that lives across reconnects: the sinks' channels and tasks, the
/// checkpoint coordinator, the LSN accounting and what is reported.
struct Shared {
    senders: Vec<mpsc::Sender<Arc<Batch>>>,
    acks: Vec<watch::Receiver<Lsn>>,
    /// Woken whenever a sink acknowledges more.
    acked: Arc<Notify>,
    tasks: JoinSet<Result<(), SinkError>>,
    coordinator: Option<Coordinator>,
    /// Received, acknowledged, idle and confirmed positions.
    lsn: LsnProgress,
    events: u64,
    reconnects: u32,
    snapshot: SnapshotState,
    progress: watch::Sender<Progress>,
    /// Metrics and health, when monitored.
    monitor: Option<crate::monitor::Monitor>,
    /// The server's WAL end, from XLogData and keepalives.
    server_wal_end: Lsn,
    /// Counts shipped events by table and operation.
    event_counts: crate::monitor::EventCounts,
}

impl Pipeline {
    /// A pipeline feeding `sinks` (at least one).
    pub fn new(options: PipelineOptions, sinks: Vec<Box<dyn Sink>>) -> Self {
        let (progress, _) = watch::channel(Progress::default());
        Pipeline {
            options,
            sinks,
            operators: Vec::new(),
            checkpoints: None,
            snapshot: None,
            progress,
        }
    }

    /// Runs `operators` over the stream, in order, before the sinks.
    pub fn with_operators(mut self, operators: Vec<Box<dyn Operator>>) -> Self {
        self.operators = operators;
        self
    }

    /// Takes checkpoints as `options` say, restoring the operators from
    /// `options.resume` first. The slot is then confirmed only as far as
    /// durable checkpoints allow.
    pub fn with_checkpoints(mut self, options: CheckpointOptions) -> Self {
        self.checkpoints = Some(options);
        self
    }

    /// Takes the initial snapshot of `plan`'s tables while streaming,
    /// continuing the progress of the checkpoint it resumes from (none if
    /// that checkpoint's snapshot is complete). See [`crate::snapshot`].
    pub fn with_snapshot(mut self, plan: SnapshotPlan) -> Self {
        self.snapshot = Some(plan);
        self
    }

    /// Watches the pipeline's progress.
    pub fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// Streams until `shutdown` completes (then: stop reading, flush the
    /// sinks, send a final status update, end the stream with CopyDone) or a
    /// definite error occurs. Returns the final progress.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<Progress, PipelineError> {
        let Pipeline {
            options,
            sinks,
            mut operators,
            checkpoints,
            snapshot,
            progress,
        } = self;
        if sinks.is_empty() {
            return Err(PipelineError::NoSinks);
        }
        let mut coordinator =
            checkpoints.map(|c| Coordinator::new(c, &options.slot, &options.publications));
        if let (Some(c), Some(m)) = (coordinator.as_mut(), options.monitor.as_ref()) {
            c.set_monitor(m.clone());
        }
        let mut start = options.start_lsn;
        let mut lsn = LsnProgress::new(sinks.len(), coordinator.is_some());
        if let Some(resume) = coordinator.as_ref().and_then(Coordinator::resume) {
            convert::restore_operators(resume, &mut operators)?;
            let position = start.unwrap_or(resume.source.commit_end_lsn);
            start = Some(position);
            lsn.handle_resume(position);
        }
        let mut snapshot = snapshot_bridge::start_snapshot(snapshot, coordinator.as_ref())?;
        if let (Some(s), Some(m)) = (snapshot.as_mut(), options.monitor.as_ref()) {
            s.monitor = Some(m.clone());
        }
        let partitions = snapshot.as_ref().and_then(|s| {
            partitions::PartitionWatch::spawn(s.client_settings().clone(), s.partitioned_tables())
        });
        let snapshot_state = snapshot_bridge::snapshot_state(snapshot.as_ref());
        let mut shared = Shared {
            senders: Vec::new(),
            acks: Vec::new(),
            acked: Arc::new(Notify::new()),
            tasks: JoinSet::new(),
            coordinator,
            lsn,
            events: 0,
            reconnects: 0,
            snapshot: snapshot_state,
            progress,
            monitor: options.monitor.clone(),
            server_wal_end: Lsn::INVALID,
            event_counts: crate::monitor::EventCounts::default(),
        };
        shared.spawn_sinks(
            sinks,
            options.channel_capacity,
            options.sink_timeout,
            options.min_flush_interval,
        )?;
        let mut source = Source {
            options: &options,
            assembler: TxnAssembler::new(),
            converter: EventConverter::new(
                options.replication.get_dbname().to_owned(),
                options.slot.clone(),
            )
            .with_transaction_markers(options.transaction_markers),
            pending: Pending::default(),
            started: false,
            operators,
            processed: start.unwrap_or(Lsn::INVALID),
            idle_position: Lsn::INVALID,
            skipping: false,
            snapshot,
            spill: Spiller::new(
                options.spill_dir.clone(),
                &options.slot,
                options.byte_budget,
            ),
            asked: Vec::new(),
            snapshot_failure: None,
            appeared: Default::default(),
            partitions,
            server: None,
            facts: facts::FactsLookup::new(&options.replication, options.receive_timeout),
        };
        source.spill.spilled = options
            .monitor
            .as_ref()
            .map(|m| m.metrics.spilled_bytes.clone());
        if let Some(resume) = shared.coordinator.as_ref().and_then(Coordinator::resume) {
            // The schemas in force at the resumed position: the replay is
            // compared with them, so no schema change is missed or repeated.
            source.converter.restore_relations(&resume.relations);
            // The commit before the next transaction: the position resumed
            // from (a commit's end, or a position between transactions
            // after it).
            if let Some(position) = start {
                source.converter.set_previous_commit(position);
            }
        }
        tokio::pin!(shutdown);
        let stream = source.stream(&mut shared, shutdown.as_mut()).await?;
        // Shutdown: the final checkpoint covers the last commit (operators
        // hold only committed state), or the idle position between
        // transactions.
        let final_position = source.final_position();
        let relations = source.converter.relation_versions();
        let operators = std::mem::take(&mut source.operators);
        let snapshot_progress = source.snapshot.as_ref().map(Snapshot::progress);
        drop(source);
        if let Some(c) = shared.coordinator.as_mut() {
            if let Some(p) = snapshot_progress.clone() {
                c.set_snapshot(p);
            }
            c.set_relations(relations);
        }
        shared
            .final_checkpoint_in_sink(final_position, &operators)
            .await?;
        shared.close_sinks().await?;
        if let Some(c) = shared.coordinator.as_mut() {
            if let Some(p) = snapshot_progress {
                c.set_snapshot(p);
            }
            c.finish_final(final_position, &operators)
                .await
                .map_err(PipelineError::Checkpoint)?;
        }
        shared.update_confirmed();
        if let Some(mut stream) = stream {
            shared.send_status(&mut stream).await?;
            let conn = stream.finish().await?;
            conn.close().await?;
        }
        tracing::info!(confirmed = %shared.lsn.confirmed(), events = shared.events, "pipeline stopped");
        let last = *shared.progress.borrow();
        Ok(last)
    }
}
