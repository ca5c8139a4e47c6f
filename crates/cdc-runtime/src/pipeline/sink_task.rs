//! One task per sink: write batches, flush, acknowledge commit LSNs, and
//! ride out transient sink errors.
//!
//! # Transient errors
//!
//! A sink error that the one fault policy ([`cdc_core::fault`], through
//! [`SinkError::fault`]) calls transient (the target's connection was lost,
//! the target restarts, a deadlock, an IO error) is retried here, inside the
//! sink's task, without stopping replication:
//!
//! 1. The task keeps the batches (`Arc<Batch>`, shared with the other sinks,
//!    so no copy) written since the sink's last durable point: its last
//!    successful flush, or for the sink that commits checkpoints its last
//!    committed checkpoint. Up to [`SinkRetry::max_retained_events`] events
//!    and [`SinkRetry::max_retained_bytes`] bytes of them in memory.
//! 2. On a transient error it waits (exponential backoff with jitter,
//!    [`SinkRetry::backoff`]), calls [`Sink::reset`] (the sink discards what
//!    is not durable and reconnects), writes the kept batches again in
//!    order, and carries on with the operation that failed (a write, a
//!    flush, or a checkpoint commit, whose coordinator is answered once, at
//!    the end). The replay is what the sink contract asks after an error;
//!    the exactly-once PostgreSQL sink skips what its progress row says was
//!    applied, so it stays exactly once.
//! 3. It gives up after `backoff.max_attempts` consecutive failures
//!    ([`SinkError::RetriesExhausted`]), and at once on a permanent error.
//!
//! When more than `max_retained_events` events (or `max_retained_bytes`) were
//! written since the durable point (a huge transaction, or a long checkpoint
//! interval), the task keeps none until the next durable point, and a
//! transient error then stops the pipeline as before this policy: the job
//! resumes from its last checkpoint, so nothing is lost either way. A sink
//! that cannot reset (the trait's default) also stops the pipeline on its
//! first error.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use cdc_core::{Fault, Lsn};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::checkpoint::InSinkSave;
use crate::event::ChangeEvent;
use crate::monitor::SinkWatch;
use crate::sinks::{Sink, SinkError};

mod pacing;
mod policy;
use pacing::FlushPacing;
use policy::timed;
pub(crate) use policy::SinkRetry;

/// Flush once this many batches are written after a commit, even when more
/// are queued.
const MAX_BATCHES_PER_FLUSH: u32 = 16;

/// A batch of events shared by all sinks.
#[derive(Debug)]
pub(crate) struct Batch {
    /// The events, possibly ending mid-transaction.
    pub(crate) events: Vec<ChangeEvent>,
    /// The end LSN of the last transaction whose events are all in this or
    /// earlier batches, if a commit was seen since the previous batch.
    pub(crate) commit_end: Option<Lsn>,
    /// Commit times of the transactions that end in this batch (kept only
    /// when the pipeline is monitored).
    pub(crate) commit_times: Vec<cdc_core::PgTimestamp>,
    /// The commit time of the newest transaction that ends in this batch.
    pub(crate) commit_time: Option<cdc_core::PgTimestamp>,
    /// A checkpoint for the sink that commits checkpoints, taken after the
    /// first `.0` events (the others ignore it).
    pub(crate) checkpoint: Option<(usize, Arc<InSinkSave>)>,
}

/// A sink with what it wrote since its last durable point, so that a
/// transient error can be retried by a reset and a replay.
struct Retrying {
    sink: Box<dyn Sink>,
    policy: SinkRetry,
    /// Batches (and the range of their events this sink wrote) since the
    /// last durable point, oldest first.
    retained: Vec<(Arc<Batch>, Range<usize>)>,
    retained_events: usize,
    /// [`ChangeEvent::approx_size`] of those events.
    retained_bytes: usize,
    /// More than `max_retained_events` (or `max_retained_bytes`) were written
    /// since the durable point: nothing is kept, and a transient error is not
    /// retried.
    overflowed: bool,
    /// The sink can reset ([`Sink::can_reset`]); otherwise nothing is kept
    /// and its first error stops the task.
    resettable: bool,
    /// Consecutive failures, reset by an operation that succeeds.
    failures: u32,
    /// Transient errors recovered from, for the log.
    recovered: u64,
    /// Metrics and health, when monitored.
    watch: Option<SinkWatch>,
}

impl Retrying {
    fn new(sink: Box<dyn Sink>, policy: SinkRetry, watch: Option<SinkWatch>) -> Self {
        Retrying {
            watch,
            resettable: sink.can_reset(),
            sink,
            policy,
            retained: Vec::new(),
            retained_events: 0,
            retained_bytes: 0,
            overflowed: false,
            failures: 0,
            recovered: 0,
        }
    }

    fn retain(&mut self, batch: &Arc<Batch>, range: Range<usize>) {
        if self.overflowed || !self.resettable {
            return;
        }
        self.retained_events += range.len();
        self.retained_bytes += batch
            .events
            .get(range.clone())
            .unwrap_or_default()
            .iter()
            .map(ChangeEvent::approx_size)
            .sum::<usize>();
        if self.retained_events > self.policy.max_retained_events
            || self.retained_bytes > self.policy.max_retained_bytes
        {
            tracing::debug!(
                events = self.policy.max_retained_events,
                bytes = self.policy.max_retained_bytes,
                "more events since the sink's last durable point than are kept for a replay; a transient error before the next one stops the pipeline"
            );
            self.overflowed = true;
            self.retained.clear();
            self.retained_events = 0;
            self.retained_bytes = 0;
            return;
        }
        self.retained.push((Arc::clone(batch), range));
    }

    /// Everything written so far is durable: nothing needs a replay.
    fn durable(&mut self) {
        self.retained.clear();
        self.retained_events = 0;
        self.retained_bytes = 0;
        self.overflowed = false;
        self.failures = 0;
    }

    /// Writes `batch.events[range]`, retrying a transient failure.
    async fn write(&mut self, batch: &Arc<Batch>, range: Range<usize>) -> Result<(), SinkError> {
        let Some(events) = batch.events.get(range.clone()).filter(|e| !e.is_empty()) else {
            return Ok(());
        };
        self.retain(batch, range);
        let limit = self.policy.operation_timeout;
        match timed(limit, "writing", self.sink.write(events)).await {
            Ok(()) => {
                self.failures = 0;
                Ok(())
            }
            Err(e) => {
                let fault = e.fault();
                // The replay writes this batch too: it is retained.
                self.recover(e, fault).await
            }
        }
    }

    /// Flushes, retrying a transient failure.
    async fn flush(&mut self) -> Result<(), SinkError> {
        loop {
            let limit = self.policy.operation_timeout;
            match timed(limit, "flushing", self.sink.flush()).await {
                Ok(()) => {
                    self.durable();
                    if let Some(w) = self.watch.as_mut() {
                        w.flushed();
                        w.duplicates(self.sink.duplicates_dropped());
                    }
                    return Ok(());
                }
                Err(e) => {
                    let fault = e.fault();
                    self.recover(e, fault).await?;
                }
            }
        }
    }

    /// After `error`, backs off, resets the sink and replays what it wrote
    /// since its durable point, until that works. Returns the error that
    /// stops the task: a permanent one, a transient one when nothing could
    /// be kept for a replay or the sink cannot reset, or
    /// [`SinkError::RetriesExhausted`].
    async fn recover(&mut self, error: SinkError, fault: Fault) -> Result<(), SinkError> {
        let result = self.recover_inner(error, fault).await;
        if let Some(w) = &self.watch {
            match &result {
                Ok(()) => w.recovered(),
                Err(e) => w.failed(e),
            }
        }
        result
    }

    async fn recover_inner(
        &mut self,
        mut error: SinkError,
        mut fault: Fault,
    ) -> Result<(), SinkError> {
        loop {
            if fault == Fault::Permanent || !self.resettable {
                return Err(error);
            }
            if self.overflowed {
                tracing::warn!(%error, limit = self.policy.max_retained_events,
                    "transient sink error, but more events were written since the sink's last durable point than are kept for a replay; stopping (the job resumes from its last checkpoint)");
                return Err(error);
            }
            self.failures = self.failures.saturating_add(1);
            // A full disk is retried for as long as it lasts: giving up
            // would only move the wait to a restart.
            let disk_full = error.is_disk_full();
            if let Some(max) = self.policy.backoff.max_attempts.filter(|_| !disk_full) {
                if self.failures > max {
                    return Err(SinkError::RetriesExhausted {
                        attempts: self.failures - 1,
                        last: Box::new(error),
                    });
                }
            }
            if let Some(w) = &self.watch {
                w.retrying(&error);
            }
            let delay = self.policy.backoff.delay(self.failures);
            if disk_full {
                tracing::warn!(%error, attempt = self.failures, delay_ms = delay.as_millis() as u64,
                    replay_events = self.retained_events, "sink's file system is full (ENOSPC); free space there: retrying with backoff until it is, nothing is lost meanwhile");
            } else {
                tracing::warn!(%error, attempt = self.failures, delay_ms = delay.as_millis() as u64,
                    replay_events = self.retained_events, "transient sink error; resetting the sink and replaying");
            }
            tokio::time::sleep(delay).await;
            let limit = self.policy.operation_timeout;
            match timed(limit, "reconnecting", self.sink.reset()).await {
                Ok(()) => {}
                Err(SinkError::ResetUnsupported) => return Err(error),
                Err(e) => {
                    fault = e.fault();
                    error = e;
                    continue;
                }
            }
            match self.replay().await {
                Ok(()) => {
                    self.recovered += 1;
                    tracing::info!(
                        events = self.retained_events,
                        recovered = self.recovered,
                        "sink recovered from a transient error"
                    );
                    return Ok(());
                }
                Err(e) => {
                    fault = e.fault();
                    error = e;
                }
            }
        }
    }

    async fn replay(&mut self) -> Result<(), SinkError> {
        let limit = self.policy.operation_timeout;
        for (batch, range) in &self.retained {
            if let Some(events) = batch.events.get(range.clone()) {
                timed(limit, "writing", self.sink.write(events)).await?;
            }
        }
        Ok(())
    }

    /// Flushes (retrying) and closes the sink.
    async fn close(mut self, dirty: bool) -> Result<(), SinkError> {
        if dirty {
            self.flush().await?;
        }
        self.sink.close().await
    }
}

/// Flushes `sink` if it wrote anything since its last flush, noting the
/// flush's start as `at` for the pacing.
async fn flush_if_dirty(
    sink: &mut Retrying,
    dirty: &mut bool,
    pacing: &mut FlushPacing,
    at: Instant,
) -> Result<(), SinkError> {
    if *dirty {
        pacing.started(at);
        sink.flush().await?;
        *dirty = false;
    }
    Ok(())
}

/// Writes batches to `sink` in order and acknowledges on `ack` (waking
/// `acked`) the end LSN of the last transaction it has made durable.
///
/// A flush happens only when it can acknowledge something: once a commit has
/// been written and no batch is queued behind it, or after
/// [`MAX_BATCHES_PER_FLUSH`] more batches. That is group commit: the
/// batches that arrive while a flush (an fsync for the file sink) runs
/// queue up and share the next one, so flushes get rarer as traffic grows.
/// While the job catches up with fast commits, flushes also start at least
/// `min_flush_interval` apart (see [`FlushPacing`] and
/// [`PipelineOptions::min_flush_interval`](super::PipelineOptions::min_flush_interval)):
/// a flush due sooner is held until then, and the batches that arrive
/// meanwhile share it; a job that keeps up pays no wait. Batches in the middle of
/// a large transaction are written without flushing, since nothing before its
/// commit can be acknowledged anyway. When the channel closes the sink is
/// closed (which flushes) and its final position published.
pub(crate) async fn run_sink(
    sink: Box<dyn Sink>,
    rx: mpsc::Receiver<Arc<Batch>>,
    ack: watch::Sender<Lsn>,
    acked: Arc<Notify>,
    retry: SinkRetry,
    watch: Option<SinkWatch>,
    min_flush_interval: Duration,
) -> Result<(), SinkError> {
    run_sink_with(sink, rx, ack, acked, retry, watch, min_flush_interval).await
}

/// [`run_sink`] with a retry policy.
pub(crate) async fn run_sink_with(
    sink: Box<dyn Sink>,
    mut rx: mpsc::Receiver<Arc<Batch>>,
    ack: watch::Sender<Lsn>,
    acked: Arc<Notify>,
    retry: SinkRetry,
    watch: Option<SinkWatch>,
    min_flush_interval: Duration,
) -> Result<(), SinkError> {
    let mut sink = Retrying::new(sink, retry, watch);
    let mut written = Lsn::INVALID;
    let mut published = Lsn::INVALID;
    let mut dirty = false;
    let mut since_commit = 0u32;
    let publish = |lsn: Lsn| {
        let moved = ack.send_if_modified(|cur| {
            if lsn > *cur {
                *cur = lsn;
                true
            } else {
                false
            }
        });
        if moved {
            acked.notify_one();
        }
    };
    let mut pacing = FlushPacing::new(min_flush_interval);
    // A flush that is due but held back by the pacing, until then.
    let mut held: Option<Instant> = None;
    loop {
        let next = match held {
            None => rx.recv().await,
            Some(at) => tokio::select! {
                next = rx.recv() => next,
                () = tokio::time::sleep_until(at) => {
                    held = None;
                    // Paced from when it was due, not from when the timer
                    // (rounded up to its millisecond) fired, so that the
                    // flushes of a steady stream do not drift later and
                    // later after its commits.
                    flush_if_dirty(&mut sink, &mut dirty, &mut pacing, at).await?;
                    publish(written);
                    published = written;
                    since_commit = 0;
                    continue;
                }
            },
        };
        let Some(batch) = next else { break };
        if !batch.events.is_empty() {
            sink.write(&batch, 0..batch.events.len()).await?;
            dirty = true;
        }
        if let Some(w) = sink.watch.as_mut() {
            w.written(&batch.commit_times);
        }
        if let Some(end) = batch.commit_end {
            written = written.max(end);
            let age = batch
                .commit_time
                .and_then(cdc_core::PgTimestamp::to_system_time)
                .and_then(|t| std::time::SystemTime::now().duration_since(t).ok());
            pacing.committed(Instant::now(), age);
        }
        if let Some((_, save)) = &batch.checkpoint {
            // Another sink commits this checkpoint: everything before it
            // must be durable here first, at once.
            held = None;
            flush_if_dirty(&mut sink, &mut dirty, &mut pacing, Instant::now()).await?;
            save.peers_flushed.add_permits(1);
            tracing::debug!(checkpoint = %save.checkpoint.id, "sink flushed for a checkpoint another sink commits");
            publish(written);
            published = written;
            since_commit = 0;
            continue;
        }
        if written > published {
            since_commit += 1;
            // A batch still queued is written first and shares the flush; the
            // channel never stays non-empty without a next batch to take (or
            // its close, which flushes).
            if rx.is_empty() || since_commit >= MAX_BATCHES_PER_FLUSH {
                let now = Instant::now();
                if since_commit < MAX_BATCHES_PER_FLUSH {
                    // Catching up, with commits coming faster than the
                    // pacing allows: hold the flush, so that what arrives
                    // meanwhile shares it.
                    held = pacing.hold_until(now);
                    if held.is_some() {
                        continue;
                    }
                }
                held = None;
                flush_if_dirty(&mut sink, &mut dirty, &mut pacing, now).await?;
                publish(written);
                published = written;
                since_commit = 0;
            }
        }
    }
    sink.close(dirty).await?;
    publish(written);
    Ok(())
}

/// Like [`run_sink`], for the sink that commits checkpoints in the same
/// transaction as its writes. It never flushes on its own: what it wrote
/// becomes durable only with a checkpoint. At a checkpoint in the batch
/// stream it writes the events before it, waits until each of the `peers`
/// other sinks flushed everything before it, commits the checkpoint with its
/// writes, answers the coordinator and acknowledges the position.
/// A failed commit ends the task with an error: the sink's writes since the
/// last checkpoint were rolled back, so the job must resume from it.
pub(crate) async fn run_committing_sink(
    sink: Box<dyn Sink>,
    rx: mpsc::Receiver<Arc<Batch>>,
    ack: watch::Sender<Lsn>,
    acked: Arc<Notify>,
    peers: u32,
    retry: SinkRetry,
    watch: Option<SinkWatch>,
) -> Result<(), SinkError> {
    run_committing_sink_with(sink, rx, ack, acked, peers, retry, watch).await
}

/// [`run_committing_sink`] with a retry policy.
pub(crate) async fn run_committing_sink_with(
    sink: Box<dyn Sink>,
    mut rx: mpsc::Receiver<Arc<Batch>>,
    ack: watch::Sender<Lsn>,
    acked: Arc<Notify>,
    peers: u32,
    retry: SinkRetry,
    watch: Option<SinkWatch>,
) -> Result<(), SinkError> {
    let mut sink = Retrying::new(sink, retry, watch);
    while let Some(batch) = rx.recv().await {
        // Durable with the next checkpoint's commit.
        if let Some(w) = sink.watch.as_mut() {
            w.written(&batch.commit_times);
        }
        let Some((at, save)) = &batch.checkpoint else {
            sink.write(&batch, 0..batch.events.len()).await?;
            continue;
        };
        let at = (*at).min(batch.events.len());
        sink.write(&batch, 0..at).await?;
        tracing::debug!(checkpoint = %save.checkpoint.id, peers, "checkpoint reached the committing sink; waiting for the other sinks to flush");
        // Never closed: a sink that fails first ends the pipeline, which
        // stops this task. Acquired once: a retried commit does not wait
        // for the peers again.
        if let Ok(permits) = save.peers_flushed.acquire_many(peers).await {
            permits.forget();
        }
        let committed = loop {
            let commit = sink
                .sink
                .commit_checkpoint(&save.checkpoint, &save.lease, save.keep);
            let commit = match sink.policy.operation_timeout {
                None => commit.await,
                Some(after) => tokio::time::timeout(after, commit).await.unwrap_or_else(|e| {
                    Err(checkpoint_api::CheckpointError::unavailable(
                        format!("committing the checkpoint with the sink's writes: no answer within {} s (pipeline.sink_timeout_secs)", after.as_secs_f64()),
                        e,
                    ))
                }),
            };
            match commit {
                Ok(meta) => {
                    if let Some(w) = sink.watch.as_mut() {
                        w.flushed();
                    }
                    break Ok(meta);
                }
                Err(e) => {
                    // Rolled back with the writes since the last checkpoint:
                    // a transient failure is retried by replaying them and
                    // committing again.
                    let fault = if e.is_retryable() {
                        Fault::Transient
                    } else {
                        Fault::Permanent
                    };
                    let failed = SinkError::Checkpoint(e.to_string());
                    match sink.recover(failed, fault).await {
                        Ok(()) => continue,
                        Err(stop) => break Err((e, stop)),
                    }
                }
            }
        };
        match committed {
            Ok(meta) => {
                sink.durable();
                save.answer(Ok(meta));
                let moved = ack.send_if_modified(|cur| {
                    let moved = save.needs_ack > *cur;
                    if moved {
                        *cur = save.needs_ack;
                    }
                    moved
                });
                if moved {
                    acked.notify_one();
                }
            }
            Err((e, stop)) => {
                save.answer(Err(e));
                return Err(stop);
            }
        }
        sink.write(&batch, at..batch.events.len()).await?;
    }
    // Anything written after the last checkpoint is rolled back here.
    sink.sink.close().await
}

#[cfg(test)]
mod tests;
