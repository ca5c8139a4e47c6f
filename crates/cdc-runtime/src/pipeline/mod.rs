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
//! `batch_size` events, so they take no more memory however large they are.
//! Streamed in-progress transactions (pgoutput v2+: the server streams a
//! transaction once it outgrows its `logical_decoding_work_mem`) must be held
//! until Stream Commit. They are held in memory up to `byte_budget` bytes in
//! total; past it the largest one is spilled to a temporary file in
//! `spill_dir` and its later changes are appended there. At Stream Commit a
//! spilled transaction is read back one record at a time and shipped in
//! batches; at Stream Abort its file is deleted. A rolled-back
//! subtransaction's changes are skipped on replay. See the `spill` module.

mod error;
mod sink_task;
mod spill;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cdc_core::pgoutput::ProtocolVersion;
use cdc_core::{
    Decoder, Lsn, PgTimestamp, ReplicationMessage, StandbyStatusUpdate, TxnAssembler, TxnEvent,
};
use checkpoint_api::{ProtocolOptions, StreamingMode};
use futures_util::FutureExt;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;

use crate::checkpoint::{CheckpointOptions, CheckpointStats, Coordinator, InSinkSave};
use crate::event::{ChangeEvent, EventConverter};
use crate::operators::Operator;
use crate::replication::{
    PgOutputOptions, ReplicationConfig, ReplicationConnection, ReplicationError, ReplicationStream,
};
use crate::sinks::{Sink, SinkError};
use crate::snapshot::{FromFallback, Snapshot, SnapshotPlan, SnapshotState, WATERMARK_PREFIX};

pub use error::PipelineError;
use sink_task::{run_committing_sink, run_sink, Batch};
pub use spill::SpillError;
use spill::Spiller;

/// The prefix of the heartbeat messages `source.heartbeat_interval_ms`
/// writes; the pipeline drops them before operators and sinks.
pub const HEARTBEAT_PREFIX: &str = "pgcdc.heartbeat";

/// How reconnects are paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub initial: Duration,
    /// The largest delay.
    pub max: Duration,
    /// Give up after this many consecutive failed attempts (`None`: never).
    pub max_attempts: Option<u32>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(30),
            max_attempts: None,
        }
    }
}

impl Backoff {
    /// The delay before attempt `attempt` (1-based): `initial * 2^(attempt-1)`
    /// capped at `max`, then scaled by a random factor in `[0.5, 1.0]`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self
            .initial
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        let capped = exp.min(self.max);
        capped.mul_f64(0.5 + 0.5 * jitter())
    }
}

/// A random number in `[0, 1)` from std's randomly keyed hasher.
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Settings of a [`Pipeline`].
#[derive(Debug, Clone)]
pub struct PipelineOptions {
    /// The replication connection (password never printed).
    pub replication: ReplicationConfig,
    /// The logical replication slot (must exist, plugin pgoutput).
    pub slot: String,
    /// Publications to stream.
    pub publications: Vec<String>,
    /// Where to start if nothing was confirmed yet (`None`: the slot's position).
    pub start_lsn: Option<Lsn>,
    /// The pgoutput protocol version to ask for (`None`: the newest the
    /// server speaks). Version 1 has no streaming of in-progress
    /// transactions: the server holds large ones until they commit.
    pub proto_version: Option<u32>,
    /// Change events per batch.
    pub batch_size: usize,
    /// Bytes of streamed in-progress transactions held in memory; past it
    /// the largest is spilled to a file in `spill_dir`.
    pub byte_budget: usize,
    /// Where spill files go.
    pub spill_dir: PathBuf,
    /// Interval between standby status updates.
    pub status_interval: Duration,
    /// Batches buffered per sink.
    pub channel_capacity: usize,
    /// Fail a silent connection after this long without any message.
    pub receive_timeout: Option<Duration>,
    /// Reconnect pacing.
    pub backoff: Backoff,
    /// After a socket read that brought in less than [`READ_PAUSE_BELOW`]
    /// bytes, wait this long before reading again, so that the next read
    /// takes in what the server sent meanwhile at once: while the server
    /// sends faster than one small read at a time, every read otherwise
    /// costs a system call, a readiness wait and a task wake-up for a few
    /// messages. It adds at most this much latency, and only while data
    /// keeps arriving in small pieces. Zero: read again at once.
    pub read_pause: Duration,
}

/// See [`PipelineOptions::read_pause`].
pub const READ_PAUSE_BELOW: usize = 64 * 1024;

impl PipelineOptions {
    /// Options with the defaults (newest protocol version, batch 1000, 64 MiB
    /// budget, spill files in the system temporary directory, 10 s status
    /// interval, 4 batches per sink channel, 90 s receive timeout, 1 ms read
    /// pause).
    pub fn new(
        replication: ReplicationConfig,
        slot: impl Into<String>,
        publication: impl Into<String>,
    ) -> Self {
        PipelineOptions {
            replication,
            slot: slot.into(),
            publications: vec![publication.into()],
            start_lsn: None,
            proto_version: None,
            batch_size: crate::config::DEFAULT_BATCH_SIZE,
            byte_budget: crate::config::DEFAULT_BYTE_BUDGET,
            spill_dir: std::env::temp_dir(),
            status_interval: crate::config::DEFAULT_STATUS_INTERVAL,
            channel_capacity: 4,
            receive_timeout: Some(Duration::from_secs(90)),
            backoff: Backoff::default(),
            read_pause: Duration::from_millis(1),
        }
    }
}

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

/// State that lives across reconnects.
struct Shared {
    senders: Vec<mpsc::Sender<Arc<Batch>>>,
    acks: Vec<watch::Receiver<Lsn>>,
    /// Woken whenever a sink acknowledges more.
    acked: Arc<Notify>,
    tasks: JoinSet<Result<(), SinkError>>,
    coordinator: Option<Coordinator>,
    /// Without checkpoints: the server's position from a keepalive between
    /// transactions, and the commit every sink must have flushed before it
    /// may be confirmed (so quiet tables do not hold WAL back).
    idle: Option<(Lsn, Lsn)>,
    confirmed: Lsn,
    received: Lsn,
    events: u64,
    reconnects: u32,
    snapshot: SnapshotState,
    progress: watch::Sender<Progress>,
}

impl Shared {
    /// The minimum acknowledged position over all sinks.
    fn acked(&self) -> Lsn {
        self.acks
            .iter()
            .map(|a| *a.borrow())
            .min()
            .unwrap_or(Lsn::INVALID)
    }

    /// The position that may be confirmed, kept monotonic: what every sink
    /// acknowledged, or with checkpoints what durable checkpoints cover.
    fn update_confirmed(&mut self) -> Lsn {
        // A checkpoint is saved only once every sink acknowledged the
        // transactions it covers, so what checkpoints allow is acknowledged
        // (an idle position beyond the last commit has nothing to flush).
        let allowed = match &self.coordinator {
            Some(c) => c.confirmable(),
            None => {
                let acked = self.acked();
                match self.idle {
                    Some((position, needs_ack)) if acked >= needs_ack => acked.max(position),
                    _ => acked,
                }
            }
        };
        if allowed > self.confirmed {
            self.confirmed = allowed;
        }
        self.publish();
        self.confirmed
    }

    /// Hands the sinks' progress to the coordinator (which may start a save).
    fn poll_checkpoint(&mut self) {
        let acked = self.acked();
        if let Some(c) = self.coordinator.as_mut() {
            c.poll_acks(acked);
        }
    }

    fn publish(&self) {
        self.progress.send_replace(Progress {
            confirmed: self.confirmed,
            received: self.received,
            events: self.events,
            reconnects: self.reconnects,
            checkpoints: self
                .coordinator
                .as_ref()
                .map(Coordinator::stats)
                .unwrap_or_default(),
            snapshot: self.snapshot,
        });
    }

    async fn send_status(&mut self, stream: &mut ReplicationStream) -> Result<(), PipelineError> {
        let confirmed = self.update_confirmed();
        let update = StandbyStatusUpdate {
            write: self.received.max(confirmed),
            flush: confirmed,
            apply: confirmed,
            send_time: PgTimestamp::from_system_time(SystemTime::now())
                .unwrap_or(PgTimestamp::EPOCH),
            reply_requested: false,
        };
        tracing::trace!(flush = %confirmed, write = %update.write, "standby status update");
        stream.send(&update.to_bytes()).await?;
        Ok(())
    }

    /// Shutdown with a sink that commits checkpoints: the final checkpoint
    /// goes to it while the sinks still run (closing it would roll back
    /// what no checkpoint covers).
    async fn final_checkpoint_in_sink(
        &mut self,
        position: Option<Lsn>,
        operators: &[Box<dyn Operator>],
    ) -> Result<(), PipelineError> {
        let Some(c) = self.coordinator.as_mut().filter(|c| c.commits_in_sink()) else {
            return Ok(());
        };
        let Some(save) = c
            .capture_final_in_sink(position, operators)
            .await
            .map_err(PipelineError::Checkpoint)?
        else {
            return Ok(());
        };
        tracing::debug!(checkpoint = %save.checkpoint.id, position = %save.checkpoint.source.commit_end_lsn, "final checkpoint goes to the committing sink");
        let batch = Arc::new(Batch {
            events: Vec::new(),
            commit_end: None,
            checkpoint: Some((0, save)),
        });
        for tx in &self.senders {
            if tx.send(batch.clone()).await.is_err() {
                return Err(self.first_sink_error().await);
            }
        }
        let saved = match self.coordinator.as_mut() {
            Some(c) => c.saved().await,
            None => Ok(()),
        };
        saved.map_err(PipelineError::Checkpoint)
    }

    /// The error of the first sink task that ended.
    async fn first_sink_error(&mut self) -> PipelineError {
        match self.tasks.join_next().await {
            Some(joined) => Self::sink_failure(joined),
            None => PipelineError::SinkStopped,
        }
    }

    /// A sink task ended while streaming: that is always an error.
    fn sink_failure(
        joined: Result<Result<(), SinkError>, tokio::task::JoinError>,
    ) -> PipelineError {
        match joined {
            Ok(Err(e)) => PipelineError::Sink(e),
            Ok(Ok(())) => PipelineError::SinkStopped,
            Err(_) => PipelineError::SinkStopped,
        }
    }
}

/// The batch being filled.
#[derive(Default)]
struct Pending {
    events: Vec<ChangeEvent>,
    commit_end: Option<Lsn>,
    /// How many of `events` belong to committed transactions (or are
    /// non-transactional messages); the rest belong to the open one.
    committed: usize,
    /// A checkpoint for the sink that commits checkpoints, taken after the
    /// first `.0` events.
    checkpoint: Option<(usize, Arc<InSinkSave>)>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.events.is_empty() && self.commit_end.is_none() && self.checkpoint.is_none()
    }

    /// Sends `save` (if any) after the events pending now.
    fn checkpoint_here(&mut self, save: Option<Arc<InSinkSave>>) {
        if let Some(save) = save {
            self.checkpoint = Some((self.events.len(), save));
        }
    }
}

/// How a streaming session ended without an error.
enum SessionEnd {
    Shutdown(ReplicationStream),
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
        let coordinator =
            checkpoints.map(|c| Coordinator::new(c, &options.slot, &options.publications));
        let mut start = options.start_lsn;
        if let Some(resume) = coordinator.as_ref().and_then(Coordinator::resume) {
            restore_operators(resume, &mut operators)?;
            start = start.or(Some(resume.source.commit_end_lsn));
        }
        let resumed_snapshot = coordinator
            .as_ref()
            .and_then(Coordinator::resume)
            .and_then(|c| c.snapshot.as_ref());
        let snapshot = match snapshot {
            Some(_) if resumed_snapshot.is_some_and(|p| p.complete) => None,
            Some(plan) => {
                let s = Snapshot::new(
                    plan.tables,
                    plan.replication,
                    plan.options,
                    resumed_snapshot,
                )?;
                Some(s)
            }
            None => None,
        };
        let snapshot_state = match &snapshot {
            None => SnapshotState::None,
            Some(s) if s.is_complete() => SnapshotState::Complete,
            Some(_) => SnapshotState::Running,
        };
        let mut shared = Shared {
            senders: Vec::new(),
            acks: Vec::new(),
            acked: Arc::new(Notify::new()),
            tasks: JoinSet::new(),
            coordinator,
            idle: None,
            confirmed: Lsn::INVALID,
            received: Lsn::INVALID,
            events: 0,
            reconnects: 0,
            snapshot: snapshot_state,
            progress,
        };
        let committing = committing_sink(&sinks, shared.coordinator.is_some())?;
        if let (Some(_), Some(c)) = (committing, shared.coordinator.as_mut()) {
            c.commit_in_sink();
        }
        let peers = u32::try_from(sinks.len().saturating_sub(1)).unwrap_or(u32::MAX);
        for (i, sink) in sinks.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel(options.channel_capacity.max(1));
            let (ack_tx, ack_rx) = watch::channel(Lsn::INVALID);
            let acked = shared.acked.clone();
            if committing == Some(i) {
                shared
                    .tasks
                    .spawn(run_committing_sink(sink, rx, ack_tx, acked, peers));
            } else {
                shared.tasks.spawn(run_sink(sink, rx, ack_tx, acked));
            }
            shared.senders.push(tx);
            shared.acks.push(ack_rx);
        }
        let mut source = Source {
            options: &options,
            assembler: TxnAssembler::new(),
            converter: EventConverter::new(
                options.replication.get_dbname().to_owned(),
                options.slot.clone(),
            ),
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
        };
        tokio::pin!(shutdown);
        let mut attempt = 0u32;
        let stream = loop {
            match source.session(&mut shared, shutdown.as_mut()).await {
                Ok(SessionEnd::Shutdown(stream)) => break Some(stream),
                Err(PipelineError::ShutdownWhileConnecting) => break None,
                Err(e) if e.is_transient() => {
                    // A session that got as far as streaming resets the count.
                    if std::mem::take(&mut source.started) {
                        attempt = 0;
                    }
                    attempt = attempt.saturating_add(1);
                    if let Some(max) = options.backoff.max_attempts {
                        if attempt > max {
                            return Err(PipelineError::RetriesExhausted {
                                attempts: attempt - 1,
                                last: Box::new(e),
                            });
                        }
                    }
                    let delay = options.backoff.delay(attempt);
                    tracing::warn!(error = %e, attempt, delay_ms = delay.as_millis() as u64,
                        resume_from = %shared.confirmed, "replication interrupted; reconnecting");
                    shared.reconnects = shared.reconnects.saturating_add(1);
                    shared.publish();
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = shutdown.as_mut() => break None,
                    }
                }
                Err(e) => {
                    shared.senders.clear();
                    shared.tasks.abort_all();
                    return Err(e);
                }
            }
        };
        // Shutdown: the final checkpoint covers the last commit (operators
        // hold only committed state), or the idle position between
        // transactions.
        let final_position = source.final_position();
        let operators = std::mem::take(&mut source.operators);
        let snapshot_progress = source.snapshot.as_ref().map(Snapshot::progress);
        drop(source);
        if let Some(c) = shared.coordinator.as_mut() {
            if let Some(p) = snapshot_progress.clone() {
                c.set_snapshot(p);
            }
        }
        shared
            .final_checkpoint_in_sink(final_position, &operators)
            .await?;
        // Shutdown: close the channels, let every sink drain, flush and close.
        shared.senders.clear();
        while let Some(joined) = shared.tasks.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(PipelineError::Sink(e)),
                Err(_) => return Err(PipelineError::SinkStopped),
            }
        }
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
        tracing::info!(confirmed = %shared.confirmed, events = shared.events, "pipeline stopped");
        let last = *shared.progress.borrow();
        Ok(last)
    }
}

/// Restores every operator from `resume`; an operator without state starts
/// empty, state without an operator is dropped (both logged).
fn restore_operators(
    resume: &checkpoint_api::Checkpoint,
    operators: &mut [Box<dyn Operator>],
) -> Result<(), PipelineError> {
    for op in operators.iter_mut() {
        match resume.operator(op.operator_id()) {
            Some(state) => state
                .restore_into(op.as_mut())
                .map_err(PipelineError::Restore)?,
            None => tracing::warn!(operator = op.operator_id(), checkpoint = %resume.id,
                "the checkpoint holds no state for this operator; it starts empty"),
        }
    }
    for state in &resume.operators {
        if !operators.iter().any(|o| o.operator_id() == state.id) {
            tracing::warn!(operator = %state.id, kind = %state.kind, checkpoint = %resume.id,
                "the checkpoint holds state of an operator that is no longer configured; dropping it");
        }
    }
    Ok(())
}

struct Source<'o> {
    options: &'o PipelineOptions,
    assembler: TxnAssembler,
    converter: EventConverter,
    pending: Pending,
    /// Set once START_REPLICATION succeeded in the current session.
    started: bool,
    operators: Vec<Box<dyn Operator>>,
    /// End of the last transaction converted; transactions ending at or
    /// before it are skipped, and reconnects resume here.
    processed: Lsn,
    /// The server's position from its last keepalive between transactions.
    idle_position: Lsn,
    /// Inside a transaction that ended at or before `processed`.
    skipping: bool,
    /// The initial snapshot, while it runs.
    snapshot: Option<Snapshot>,
    spill: Spiller,
}

impl Source<'_> {
    async fn session(
        &mut self,
        shared: &mut Shared,
        mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<SessionEnd, PipelineError> {
        let opts = self.options;
        self.abort_open_transaction();

        let connect = async {
            let mut conn = ReplicationConnection::connect(&opts.replication).await?;
            let version = conn.server_version_num().await?;
            let mut pgoutput =
                PgOutputOptions::for_server(version, opts.publications.iter().cloned());
            if let Some(v) = opts.proto_version {
                pgoutput = pgoutput.proto_version(v)?;
            }
            let start = self.processed.max(shared.confirmed);
            tracing::info!(slot = %opts.slot, start = %start, proto_version = pgoutput.get_proto_version(), "starting replication");
            let stream = conn.start_replication(&opts.slot, start, &pgoutput).await?;
            Ok::<_, ReplicationError>((stream, pgoutput))
        };
        let (mut stream, pgoutput) = tokio::select! {
            r = connect => r?,
            _ = shutdown.as_mut() => return Err(PipelineError::ShutdownWhileConnecting),
        };
        self.started = true;
        let proto = pgoutput.get_proto_version();
        if let Some(c) = shared.coordinator.as_mut() {
            c.set_protocol(ProtocolOptions {
                proto_version: proto,
                binary: pgoutput.get_binary(),
                messages: pgoutput.get_messages(),
                streaming: if pgoutput.get_streaming() {
                    StreamingMode::On
                } else {
                    StreamingMode::Off
                },
                two_phase: pgoutput.get_two_phase(),
                origin: None,
            });
        }
        stream.set_receive_timeout(opts.receive_timeout);
        let version = ProtocolVersion::new(proto)
            .map_err(|_| PipelineError::Internal("unsupported pgoutput version"))?;
        let mut decoder = Decoder::new(version);

        let mut ticker = tokio::time::interval(opts.status_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut checkpoint_ticker = tokio::time::interval(
            shared
                .coordinator
                .as_ref()
                .map_or(Duration::from_secs(3600), Coordinator::tick_period),
        );
        checkpoint_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Armed after a small read (see `PipelineOptions::read_pause`); one
        // timer, reset each time.
        let pause = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(pause);
        let mut paused = false;
        loop {
            // Shipped when the socket runs dry only if a sink could acknowledge
            // something or a checkpoint waits for the sink that commits it;
            // events of an open transaction wait for a full batch.
            let flush_ready = self.pending.commit_end.is_some()
                || self.pending.committed > 0
                || self.pending.checkpoint.is_some();
            let saving = shared
                .coordinator
                .as_ref()
                .is_some_and(Coordinator::is_saving);
            let waiting = shared
                .coordinator
                .as_ref()
                .is_some_and(Coordinator::is_waiting);
            tokio::select! {
                biased;
                _ = shutdown.as_mut() => {
                    self.ship(shared, &mut stream, &mut ticker).await?;
                    return Ok(SessionEnd::Shutdown(stream));
                }
                Some(joined) = shared.tasks.join_next() => {
                    return Err(Shared::sink_failure(joined));
                }
                e = snapshot_failed(&mut self.snapshot) => return Err(PipelineError::Snapshot(e)),
                saved = checkpoint_saved(&mut shared.coordinator), if saving => {
                    saved.map_err(PipelineError::Checkpoint)?;
                    // Let the slot move right away.
                    shared.send_status(&mut stream).await?;
                }
                _ = shared.acked.notified(), if waiting => shared.poll_checkpoint(),
                _ = checkpoint_ticker.tick() => {
                    self.checkpoint_between_transactions(shared)?;
                    shared.poll_checkpoint();
                }
                _ = ticker.tick() => shared.send_status(&mut stream).await?,
                _ = &mut pause, if paused => paused = false,
                msg = stream.next_message(), if !paused => {
                    let Some(payload) = msg? else {
                        // The server ended the stream: finish reports why.
                        stream.finish().await?;
                        return Err(ReplicationError::StreamEnded.into());
                    };
                    let mut bytes = payload.len();
                    self.handle(shared, &mut stream, &mut ticker, &mut decoder, &payload).await?;
                    // What the same socket read brought in, without a select round each.
                    let mut drained = false;
                    while self.pending.events.len() < opts.batch_size {
                        let Some(payload) = stream.buffered_message()? else {
                            drained = true;
                            break;
                        };
                        bytes += payload.len();
                        self.handle(shared, &mut stream, &mut ticker, &mut decoder, &payload).await?;
                    }
                    if self.pending.events.len() >= opts.batch_size {
                        self.ship(shared, &mut stream, &mut ticker).await?;
                    }
                    if drained && bytes < READ_PAUSE_BELOW && !opts.read_pause.is_zero() {
                        pause.as_mut().reset(tokio::time::Instant::now() + opts.read_pause);
                        paused = true;
                    }
                }
                // Nothing more to read right now: hand over what we have.
                _ = std::future::ready(()), if flush_ready => {
                    self.ship(shared, &mut stream, &mut ticker).await?;
                }
            }
        }
    }

    async fn handle(
        &mut self,
        shared: &mut Shared,
        stream: &mut ReplicationStream,
        ticker: &mut tokio::time::Interval,
        decoder: &mut Decoder,
        payload: &[u8],
    ) -> Result<(), PipelineError> {
        match ReplicationMessage::parse(payload)? {
            ReplicationMessage::PrimaryKeepalive(k) => {
                tracing::trace!(slot = %self.options.slot, wal_end = %k.wal_end, reply = k.reply_requested, open = ?self.converter.open_transaction(), "keepalive");
                // Between transactions everything before the server's
                // position has been sent: a checkpoint may record it.
                if self.converter.open_transaction().is_none()
                    && !self.skipping
                    && k.wal_end > self.idle_position
                {
                    self.idle_position = k.wal_end;
                    shared.idle = Some((k.wal_end, self.processed));
                }
                if k.reply_requested {
                    shared.send_status(stream).await?;
                }
            }
            ReplicationMessage::XLogData(x) => {
                tracing::trace!(slot = %self.options.slot, wal_start = %x.wal_start, wal_end = %x.wal_end, "xlogdata");
                if x.wal_start > shared.received {
                    shared.received = x.wal_start;
                }
                if let Some(c) = shared.coordinator.as_mut() {
                    c.add_bytes(x.data.len());
                }
                let msg = decoder.decode(x.data)?;
                if let Some(event) = self.assembler.handle_message(msg)? {
                    self.before_event(shared, stream, ticker, &event).await?;
                    self.convert(shared, &event, x.wal_start)?;
                }
                // Spill past the byte budget; ship released and replayed
                // transactions batch by batch.
                loop {
                    self.spill.after_message(&mut self.assembler).await?;
                    while let Some(event) = self.assembler.poll_event() {
                        self.before_event(shared, stream, ticker, &event).await?;
                        self.convert(shared, &event, x.wal_start)?;
                        self.ship_full(shared, stream, ticker).await?;
                    }
                    let Some(mut replay) = self.assembler.poll_replay() else {
                        break;
                    };
                    let mut file = self.spill.reader(replay.xid()).await?;
                    while let Some(record) = file.next().await? {
                        match replay.record(record) {
                            Ok(Some(event)) => {
                                self.before_event(shared, stream, ticker, &event).await?;
                                self.convert(shared, &event, x.wal_start)?
                            }
                            Ok(None) => {}
                            Err(e) => return Err(file.corrupt(e).into()),
                        }
                        self.ship_full(shared, stream, ticker).await?;
                    }
                    replay.finish().map_err(|e| file.corrupt(e))?;
                }
            }
        }
        Ok(())
    }

    /// Before a transaction that commits at or after the consistent point
    /// of the snapshot's consistent read, emits the rows of that read.
    async fn before_event(
        &mut self,
        shared: &mut Shared,
        stream: &mut ReplicationStream,
        ticker: &mut tokio::time::Interval,
        event: &TxnEvent<'_>,
    ) -> Result<(), PipelineError> {
        let TxnEvent::Begin(begin) = event else {
            return Ok(());
        };
        if begin.final_lsn < self.processed
            || !self
                .snapshot
                .as_ref()
                .is_some_and(Snapshot::fallback_running)
        {
            return Ok(());
        }
        // Wait for the consistent point (the reader is creating its slot).
        let point = loop {
            if let Some(p) = self.snapshot.as_ref().and_then(Snapshot::fallback_point) {
                break p;
            }
            self.fallback_message(shared, stream, ticker).await?;
        };
        if begin.final_lsn < point {
            return Ok(());
        }
        tracing::info!(consistent_point = %point, "snapshot: emitting the consistent read");
        let mut ctx = crate::operators::CommitContext {
            source: self.converter.snapshot_source(point),
            next_index: 0,
        };
        let mut added = 0u64;
        loop {
            let Some(msg) = self.fallback_message(shared, stream, ticker).await? else {
                break;
            };
            let Some(s) = self.snapshot.as_mut() else {
                break;
            };
            match msg {
                FromFallback::Rows { table, rows } => {
                    let schema = s.fallback_schema(table).map_err(PipelineError::Snapshot)?;
                    let start = self.pending.events.len();
                    for row in rows {
                        self.pending.events.push(ChangeEvent {
                            op: crate::event::Operation::Read,
                            table: Some(schema.clone()),
                            before: None,
                            after: Some(crate::event::Row::from_values(row)),
                            message: None,
                            source: ctx.source.clone(),
                            index: ctx.next_index,
                        });
                        ctx.next_index = ctx.next_index.saturating_add(1);
                    }
                    for ev in &self.pending.events[start..] {
                        for op in self.operators.iter_mut() {
                            op.on_event(ev).map_err(PipelineError::Operator)?;
                        }
                    }
                    added += (self.pending.events.len() - start) as u64;
                    // The rows are one unit with no commit until the end.
                    self.pending.committed = self.pending.events.len();
                    if self.pending.events.len() >= self.options.batch_size {
                        self.ship(shared, stream, ticker).await?;
                    }
                }
                FromFallback::TableDone { table, rows } => s.fallback_table_done(table, rows),
                FromFallback::Point(_) => {}
                FromFallback::Done => {
                    s.fallback_finished();
                    if s.is_complete() {
                        shared.snapshot = SnapshotState::Complete;
                    }
                    added += self.commit_operators(&mut ctx)? as u64;
                    self.pending.committed = self.pending.events.len();
                    self.pending.commit_end = Some(point);
                    self.processed = self.processed.max(point);
                    break;
                }
            }
        }
        shared.events = shared.events.saturating_add(added);
        Ok(())
    }

    /// Tells every operator the transaction of `ctx` committed; their
    /// derived events follow its events, numbered on. Returns how many.
    fn commit_operators(
        &mut self,
        ctx: &mut crate::operators::CommitContext,
    ) -> Result<usize, PipelineError> {
        let mut added = 0;
        for op in self.operators.iter_mut() {
            let before = self.pending.events.len();
            op.on_commit(ctx, &mut self.pending.events)
                .map_err(PipelineError::Operator)?;
            let derived = self.pending.events.len() - before;
            ctx.next_index = ctx.next_index.saturating_add(derived as u32);
            added += derived;
        }
        Ok(added)
    }

    /// The next message of the consistent read, sending status updates
    /// while waiting; `None` once it is over.
    async fn fallback_message(
        &mut self,
        shared: &mut Shared,
        stream: &mut ReplicationStream,
        ticker: &mut tokio::time::Interval,
    ) -> Result<Option<FromFallback>, PipelineError> {
        let Some(s) = self.snapshot.as_mut() else {
            return Ok(None);
        };
        loop {
            tokio::select! {
                msg = s.fallback_next() => return Ok(Some(msg.map_err(PipelineError::Snapshot)?)),
                _ = ticker.tick() => shared.send_status(stream).await?,
            }
        }
    }

    fn convert(
        &mut self,
        shared: &mut Shared,
        event: &TxnEvent<'_>,
        lsn: Lsn,
    ) -> Result<(), PipelineError> {
        // Transactions the pipeline already processed (before a reconnect
        // or up to the checkpoint it resumed from) are skipped: a commit
        // record that starts before `processed` ends at or before it.
        match event {
            TxnEvent::Begin(b) if b.final_lsn < self.processed => {
                self.skipping = true;
                return Ok(());
            }
            TxnEvent::Message(m) if m.lsn < self.processed => return Ok(()),
            _ if self.skipping => {
                if matches!(event, TxnEvent::Commit(_)) {
                    self.skipping = false;
                }
                return Ok(());
            }
            _ => {}
        }
        let commit = match event {
            TxnEvent::Commit(_) => self.converter.open_commit_context(),
            _ => None,
        };
        let start = self.pending.events.len();
        let n = match event {
            // The snapshot's watermarks: never passed on; a high watermark
            // brings its chunk's rows into this transaction.
            // Heartbeats only move the stream on.
            TxnEvent::Change(cdc_core::Change::Message(m)) | TxnEvent::Message(m)
                if m.prefix == HEARTBEAT_PREFIX =>
            {
                0
            }
            TxnEvent::Change(cdc_core::Change::Message(m)) | TxnEvent::Message(m)
                if m.prefix == WATERMARK_PREFIX =>
            {
                let merged = match (self.snapshot.as_mut(), m.transactional) {
                    (Some(s), true) => s
                        .on_watermark(&m.prefix, &m.content)
                        .map_err(PipelineError::Snapshot)?,
                    _ => None,
                };
                match merged {
                    Some((table, rows)) => {
                        self.converter
                            .push_reads(&table, rows, &mut self.pending.events)?
                    }
                    None => 0,
                }
            }
            _ => {
                let mut n = self.converter.handle(
                    event,
                    self.assembler.relations(),
                    Some(lsn),
                    &mut self.pending.events,
                )?;
                if let (Some(s), TxnEvent::Change(_)) = (self.snapshot.as_mut(), event) {
                    // Held back only with checkpoints: they restart an
                    // interrupted consistent read, which then contains the
                    // held changes. Without, the slot would move past them
                    // and a crash would lose them, so they are passed on
                    // (and may arrive again in the read).
                    if shared.coordinator.is_some() && s.holds_keyless() {
                        let mut i = start;
                        while i < self.pending.events.len() {
                            if s.holds(&self.pending.events[i]) {
                                self.pending.events.remove(i);
                                n -= 1;
                            } else {
                                i += 1;
                            }
                        }
                    }
                    for ev in &self.pending.events[start..] {
                        s.on_change(ev);
                    }
                }
                n
            }
        };
        let in_txn = self.converter.open_transaction().is_some();
        if in_txn || matches!(event, TxnEvent::Commit(_)) {
            for ev in &self.pending.events[start..] {
                for op in self.operators.iter_mut() {
                    op.on_event(ev).map_err(PipelineError::Operator)?;
                }
            }
        }
        let mut added = n;
        if let TxnEvent::Commit(c) = event {
            if let Some(mut ctx) = commit {
                added += self.commit_operators(&mut ctx)?;
            }
            self.pending.commit_end = Some(c.end_lsn);
            self.processed = self.processed.max(c.end_lsn);
            if let Some(s) = self.snapshot.as_mut() {
                s.on_commit();
                if s.is_complete() && shared.snapshot != SnapshotState::Complete {
                    shared.snapshot = SnapshotState::Complete;
                }
            }
            if let Some(coord) = shared.coordinator.as_mut() {
                if coord.wants_capture() {
                    if let Some(s) = &self.snapshot {
                        coord.set_snapshot(s.progress());
                    }
                    let save = coord
                        .capture(c.end_lsn, c.end_lsn, &self.operators)
                        .map_err(PipelineError::Checkpoint)?;
                    self.pending.checkpoint_here(save);
                }
            }
        }
        if !in_txn {
            self.pending.committed = self.pending.events.len();
        }
        shared.events = shared.events.saturating_add(added as u64);
        Ok(())
    }

    /// On a checkpoint tick: between transactions, capture right away (at
    /// the idle position if the server reported a newer one); inside one the
    /// next commit captures.
    fn checkpoint_between_transactions(
        &mut self,
        shared: &mut Shared,
    ) -> Result<(), PipelineError> {
        let Some(coord) = shared.coordinator.as_mut() else {
            return Ok(());
        };
        coord.tick();
        if coord.wants_capture() && self.converter.open_transaction().is_none() && !self.skipping {
            let position = self.processed.max(self.idle_position);
            if !position.is_invalid() {
                if let Some(s) = &self.snapshot {
                    coord.set_snapshot(s.progress());
                }
                let save = coord
                    .capture(position, self.processed, &self.operators)
                    .map_err(PipelineError::Checkpoint)?;
                self.pending.checkpoint_here(save);
            }
        }
        Ok(())
    }

    /// The connection dropped: the server will send the open transaction
    /// again, so forget its events that are not shipped yet and its effect
    /// on the operators. Events of committed transactions stay pending.
    fn abort_open_transaction(&mut self) {
        if self.converter.open_transaction().is_some() {
            for op in self.operators.iter_mut() {
                op.on_abort();
            }
        }
        self.pending.events.truncate(self.pending.committed);
        self.assembler.reset();
        self.spill.clear();
        self.converter.reset();
        self.skipping = false;
        if let Some(s) = self.snapshot.as_mut() {
            s.restart();
        }
    }

    /// Where a final checkpoint may be taken: the last commit, or the idle
    /// position when no transaction is open.
    fn final_position(&self) -> Option<Lsn> {
        let open = self.converter.open_transaction().is_some() || self.skipping;
        let position = if open {
            self.processed
        } else {
            self.processed.max(self.idle_position)
        };
        (!position.is_invalid()).then_some(position)
    }

    /// Ships the pending batch once it is full; sends a status update when
    /// one is due even if the sinks keep up (a long replay does not read
    /// the socket, and the server must still hear from us).
    async fn ship_full(
        &mut self,
        shared: &mut Shared,
        stream: &mut ReplicationStream,
        ticker: &mut tokio::time::Interval,
    ) -> Result<(), PipelineError> {
        if self.pending.events.len() < self.options.batch_size {
            return Ok(());
        }
        self.ship(shared, stream, ticker).await?;
        if ticker.tick().now_or_never().is_some() {
            shared.send_status(stream).await?;
        }
        Ok(())
    }

    /// Sends the pending batch to every sink, waiting for channel space
    /// (backpressure) while still sending status updates.
    async fn ship(
        &mut self,
        shared: &mut Shared,
        stream: &mut ReplicationStream,
        ticker: &mut tokio::time::Interval,
    ) -> Result<(), PipelineError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        // What stays open continues in the next batch.
        self.pending.committed = 0;
        // Room for as many events as this batch held (at most a full batch):
        // one allocation per batch instead of the doublings of a `Vec`
        // grown from empty, each copying the events so far.
        self.pending.events = Vec::with_capacity(pending.events.len().min(self.options.batch_size));
        let batch = Arc::new(Batch {
            events: pending.events,
            commit_end: pending.commit_end,
            checkpoint: pending.checkpoint,
        });
        // Events of a transaction not yet committed carry on into the next
        // batch; the next commit marks its own end.
        for i in 0..shared.senders.len() {
            let Some(tx) = shared.senders.get(i).cloned() else {
                break;
            };
            loop {
                tokio::select! {
                    permit = tx.reserve() => {
                        match permit {
                            Ok(permit) => permit.send(batch.clone()),
                            // The sink task ended: report its error.
                            Err(_) => return Err(shared.first_sink_error().await),
                        }
                        break;
                    }
                    _ = ticker.tick() => shared.send_status(stream).await?,
                }
            }
        }
        shared.publish();
        Ok(())
    }
}

/// Which sink commits checkpoints with its writes, if any: at most one may,
/// and only when the pipeline takes checkpoints (otherwise its writes would
/// never commit).
fn committing_sink(
    sinks: &[Box<dyn Sink>],
    checkpoints: bool,
) -> Result<Option<usize>, PipelineError> {
    let mut committing = sinks
        .iter()
        .enumerate()
        .filter(|(_, s)| s.commits_checkpoints())
        .map(|(i, _)| i);
    let first = committing.next();
    if committing.next().is_some() {
        return Err(PipelineError::Sink(SinkError::NotCommitting(
            "only one sink can commit the checkpoints".into(),
        )));
    }
    if first.is_some() && !checkpoints {
        return Err(PipelineError::Sink(SinkError::NotCommitting(
            "the pipeline takes no checkpoints, so the sink's writes would never commit".into(),
        )));
    }
    Ok(first)
}

/// Waits for a snapshot reader to fail (pending without a snapshot).
async fn snapshot_failed(snapshot: &mut Option<Snapshot>) -> crate::snapshot::SnapshotError {
    match snapshot.as_mut() {
        Some(s) => s.failed().await,
        None => std::future::pending().await,
    }
}

/// Waits for the coordinator's running save.
async fn checkpoint_saved(
    coordinator: &mut Option<Coordinator>,
) -> Result<(), checkpoint_api::CheckpointError> {
    match coordinator.as_mut() {
        Some(c) => c.saved().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::NullSink;

    /// A sink that claims to commit checkpoints (nothing else is used here).
    struct Committing;

    #[async_trait::async_trait]
    impl Sink for Committing {
        async fn write(&mut self, _: &[ChangeEvent]) -> Result<(), SinkError> {
            Ok(())
        }
        async fn flush(&mut self) -> Result<(), SinkError> {
            Ok(())
        }
        async fn close(&mut self) -> Result<(), SinkError> {
            Ok(())
        }
        fn commits_checkpoints(&self) -> bool {
            true
        }
    }

    #[test]
    fn at_most_one_sink_commits_checkpoints_and_only_with_checkpoints() {
        let null = || Box::new(NullSink::new()) as Box<dyn Sink>;
        let committing = || Box::new(Committing) as Box<dyn Sink>;
        assert_eq!(committing_sink(&[null(), null()], true).unwrap(), None);
        assert_eq!(
            committing_sink(&[null(), committing()], true).unwrap(),
            Some(1)
        );
        let two = committing_sink(&[committing(), committing()], true).unwrap_err();
        assert!(two.to_string().contains("only one sink"), "{two}");
        let without = committing_sink(&[committing()], false).unwrap_err();
        assert!(without.to_string().contains("never commit"), "{without}");
    }

    #[test]
    fn backoff_grows_exponentially_with_jitter_and_a_cap() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            max_attempts: None,
        };
        for (attempt, full) in [
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1000),
            (40, 1000),
        ] {
            let d = b.delay(attempt);
            let full = Duration::from_millis(full);
            assert!(
                d >= full / 2 && d <= full,
                "attempt {attempt}: {d:?} vs {full:?}"
            );
        }
        // Jitter: not every delay is the same.
        let delays: std::collections::HashSet<_> = (0..20).map(|_| b.delay(3)).collect();
        assert!(delays.len() > 1);
    }

    #[test]
    fn pending_with_only_a_commit_is_not_empty() {
        let mut p = Pending::default();
        assert!(p.is_empty());
        p.commit_end = Some(Lsn::from_u64(10));
        assert!(!p.is_empty());
    }
}
