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
//! * **confirmed**: the minimum acknowledged position over all sinks, never
//!   moving backward. Only this is sent as `flush`/`apply`, so the server
//!   keeps every transaction that some sink has not made durable; after a
//!   crash or reconnect streaming resumes from here (at-least-once: sinks may
//!   see a transaction twice, identified by `(commit_lsn, index)`).
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
//! jitter and resume from the confirmed position. Everything else (decode or
//! protocol errors, sink errors, spill file errors, authentication, missing
//! slot or publication) stops the pipeline with a [`PipelineError`].
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
use futures_util::FutureExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::event::{ChangeEvent, EventConverter};
use crate::replication::{
    PgOutputOptions, ReplicationConfig, ReplicationConnection, ReplicationError, ReplicationStream,
};
use crate::sinks::{Sink, SinkError};

pub use error::PipelineError;
use sink_task::{run_sink, Batch};
pub use spill::SpillError;
use spill::Spiller;

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
}

impl PipelineOptions {
    /// Options with the defaults (batch 1000, 64 MiB budget, spill files in
    /// the system temporary directory, 10 s status interval, 4 batches per
    /// sink channel, 90 s receive timeout).
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
            batch_size: crate::config::DEFAULT_BATCH_SIZE,
            byte_budget: crate::config::DEFAULT_BYTE_BUDGET,
            spill_dir: std::env::temp_dir(),
            status_interval: crate::config::DEFAULT_STATUS_INTERVAL,
            channel_capacity: 4,
            receive_timeout: Some(Duration::from_secs(90)),
            backoff: Backoff::default(),
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
}

/// A configured pipeline; [`run`](Self::run) streams until shutdown or a
/// definite error.
pub struct Pipeline {
    options: PipelineOptions,
    sinks: Vec<Box<dyn Sink>>,
    progress: watch::Sender<Progress>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("options", &self.options)
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

/// State that lives across reconnects.
struct Shared {
    senders: Vec<mpsc::Sender<Arc<Batch>>>,
    acks: Vec<watch::Receiver<Lsn>>,
    tasks: JoinSet<Result<(), SinkError>>,
    confirmed: Lsn,
    received: Lsn,
    events: u64,
    reconnects: u32,
    progress: watch::Sender<Progress>,
}

impl Shared {
    /// The minimum acknowledged position over all sinks, kept monotonic.
    fn update_confirmed(&mut self) -> Lsn {
        let min = self.acks.iter().map(|a| *a.borrow()).min();
        if let Some(min) = min {
            if min > self.confirmed {
                self.confirmed = min;
            }
        }
        self.publish();
        self.confirmed
    }

    fn publish(&self) {
        self.progress.send_replace(Progress {
            confirmed: self.confirmed,
            received: self.received,
            events: self.events,
            reconnects: self.reconnects,
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
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.events.is_empty() && self.commit_end.is_none()
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
            progress,
        }
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
            progress,
        } = self;
        if sinks.is_empty() {
            return Err(PipelineError::NoSinks);
        }
        let mut shared = Shared {
            senders: Vec::new(),
            acks: Vec::new(),
            tasks: JoinSet::new(),
            confirmed: Lsn::INVALID,
            received: Lsn::INVALID,
            events: 0,
            reconnects: 0,
            progress,
        };
        for sink in sinks {
            let (tx, rx) = mpsc::channel(options.channel_capacity.max(1));
            let (ack_tx, ack_rx) = watch::channel(Lsn::INVALID);
            shared.tasks.spawn(run_sink(sink, rx, ack_tx));
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
        drop(source);
        // Shutdown: close the channels, let every sink drain, flush and close.
        shared.senders.clear();
        while let Some(joined) = shared.tasks.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(PipelineError::Sink(e)),
                Err(_) => return Err(PipelineError::SinkStopped),
            }
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

struct Source<'o> {
    options: &'o PipelineOptions,
    assembler: TxnAssembler,
    converter: EventConverter,
    pending: Pending,
    /// Set once START_REPLICATION succeeded in the current session.
    started: bool,
    spill: Spiller,
}

impl Source<'_> {
    async fn session(
        &mut self,
        shared: &mut Shared,
        mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<SessionEnd, PipelineError> {
        let opts = self.options;
        self.assembler.reset();
        self.spill.clear();
        self.converter.reset();
        self.pending = Pending::default();

        let connect = async {
            let mut conn = ReplicationConnection::connect(&opts.replication).await?;
            let version = conn.server_version_num().await?;
            let pgoutput = PgOutputOptions::for_server(version, opts.publications.iter().cloned());
            let start = if shared.confirmed.is_invalid() {
                opts.start_lsn.unwrap_or(Lsn::INVALID)
            } else {
                shared.confirmed
            };
            tracing::info!(slot = %opts.slot, start = %start, proto_version = pgoutput.get_proto_version(), "starting replication");
            let stream = conn.start_replication(&opts.slot, start, &pgoutput).await?;
            Ok::<_, ReplicationError>((stream, pgoutput.get_proto_version()))
        };
        let (mut stream, proto) = tokio::select! {
            r = connect => r?,
            _ = shutdown.as_mut() => return Err(PipelineError::ShutdownWhileConnecting),
        };
        self.started = true;
        stream.set_receive_timeout(opts.receive_timeout);
        let version = ProtocolVersion::new(proto)
            .map_err(|_| PipelineError::Internal("unsupported pgoutput version"))?;
        let mut decoder = Decoder::new(version);

        let mut ticker = tokio::time::interval(opts.status_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let flush_ready = !self.pending.is_empty();
            tokio::select! {
                biased;
                _ = shutdown.as_mut() => {
                    self.ship(shared, &mut stream, &mut ticker).await?;
                    return Ok(SessionEnd::Shutdown(stream));
                }
                Some(joined) = shared.tasks.join_next() => {
                    return Err(Shared::sink_failure(joined));
                }
                _ = ticker.tick() => shared.send_status(&mut stream).await?,
                msg = stream.next_message() => {
                    let Some(payload) = msg? else {
                        // The server ended the stream: finish reports why.
                        stream.finish().await?;
                        return Err(ReplicationError::StreamEnded.into());
                    };
                    self.handle(shared, &mut stream, &mut ticker, &mut decoder, &payload).await?;
                    if self.pending.events.len() >= opts.batch_size {
                        self.ship(shared, &mut stream, &mut ticker).await?;
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
                if k.reply_requested {
                    shared.send_status(stream).await?;
                }
            }
            ReplicationMessage::XLogData(x) => {
                if x.wal_start > shared.received {
                    shared.received = x.wal_start;
                }
                let msg = decoder.decode(x.data)?;
                if let Some(event) = self.assembler.handle_message(msg)? {
                    self.convert(shared, &event, x.wal_start)?;
                }
                // Spill past the byte budget; ship released and replayed
                // transactions batch by batch.
                loop {
                    self.spill.after_message(&mut self.assembler).await?;
                    while let Some(event) = self.assembler.poll_event() {
                        self.convert(shared, &event, x.wal_start)?;
                        self.ship_full(shared, stream, ticker).await?;
                    }
                    let Some(mut replay) = self.assembler.poll_replay() else {
                        break;
                    };
                    let mut file = self.spill.reader(replay.xid()).await?;
                    while let Some(record) = file.next().await? {
                        match replay.record(record) {
                            Ok(Some(event)) => self.convert(shared, &event, x.wal_start)?,
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

    fn convert(
        &mut self,
        shared: &mut Shared,
        event: &TxnEvent<'_>,
        lsn: Lsn,
    ) -> Result<(), PipelineError> {
        let n = self.converter.handle(
            event,
            self.assembler.relations(),
            Some(lsn),
            &mut self.pending.events,
        )?;
        shared.events = shared.events.saturating_add(n as u64);
        if let TxnEvent::Commit(c) = event {
            self.pending.commit_end = Some(c.end_lsn);
        }
        Ok(())
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
        let batch = Arc::new(Batch {
            events: pending.events,
            commit_end: pending.commit_end,
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

#[cfg(test)]
mod tests {
    use super::*;

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
