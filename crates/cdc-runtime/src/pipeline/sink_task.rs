//! One task per sink: write batches, flush, acknowledge commit LSNs.

use std::sync::Arc;
use std::time::Duration;

use cdc_core::Lsn;
use tokio::sync::{mpsc, watch, Notify};

use crate::checkpoint::InSinkSave;
use crate::event::ChangeEvent;
use crate::sinks::{Sink, SinkError};

/// Flush once this many batches are written after a commit, even when more
/// are queued.
const MAX_BATCHES_PER_FLUSH: u32 = 16;

/// How long a written commit may wait for its flush, so that a stream of
/// small transactions shares one flush (an fsync for the file sink) instead
/// of paying one each.
const FLUSH_DELAY: Duration = Duration::from_millis(20);

/// A batch of events shared by all sinks.
#[derive(Debug)]
pub(crate) struct Batch {
    /// The events, possibly ending mid-transaction.
    pub(crate) events: Vec<ChangeEvent>,
    /// The end LSN of the last transaction whose events are all in this or
    /// earlier batches, if a commit was seen since the previous batch.
    pub(crate) commit_end: Option<Lsn>,
    /// A checkpoint for the sink that commits checkpoints, taken after the
    /// first `.0` events (the others ignore it).
    pub(crate) checkpoint: Option<(usize, Arc<InSinkSave>)>,
}

/// Writes batches to `sink` in order and acknowledges on `ack` (waking
/// `acked`) the end LSN of the last transaction it has made durable.
///
/// A flush happens only when it can acknowledge something: once a commit has
/// been written, at the latest [`FLUSH_DELAY`] later, or after
/// [`MAX_BATCHES_PER_FLUSH`] more batches. Batches in the middle of a large
/// transaction are written without flushing, since nothing before its commit
/// can be acknowledged anyway. When the channel closes the sink is closed
/// (which flushes) and its final position published.
pub(crate) async fn run_sink(
    mut sink: Box<dyn Sink>,
    mut rx: mpsc::Receiver<Arc<Batch>>,
    ack: watch::Sender<Lsn>,
    acked: Arc<Notify>,
) -> Result<(), SinkError> {
    let mut written = Lsn::INVALID;
    let mut published = Lsn::INVALID;
    let mut dirty = false;
    let mut since_commit = 0u32;
    let mut deadline: Option<tokio::time::Instant> = None;
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
    loop {
        let batch = match deadline {
            Some(at) => tokio::select! {
                biased;
                b = rx.recv() => b,
                _ = tokio::time::sleep_until(at) => {
                    if dirty {
                        sink.flush().await?;
                        dirty = false;
                    }
                    publish(written);
                    published = written;
                    deadline = None;
                    since_commit = 0;
                    continue;
                }
            },
            None => rx.recv().await,
        };
        let Some(batch) = batch else {
            break;
        };
        if !batch.events.is_empty() {
            sink.write(&batch.events).await?;
            dirty = true;
        }
        if let Some(end) = batch.commit_end {
            written = written.max(end);
        }
        if let Some((_, save)) = &batch.checkpoint {
            // Another sink commits this checkpoint: everything before it
            // must be durable here first.
            if dirty {
                sink.flush().await?;
                dirty = false;
            }
            save.peers_flushed.add_permits(1);
            tracing::debug!(checkpoint = %save.checkpoint.id, "sink flushed for a checkpoint another sink commits");
            publish(written);
            published = written;
            deadline = None;
            since_commit = 0;
            continue;
        }
        if written > published {
            since_commit += 1;
            let at = *deadline.get_or_insert_with(|| tokio::time::Instant::now() + FLUSH_DELAY);
            let due = at <= tokio::time::Instant::now() && rx.is_empty();
            if due || since_commit >= MAX_BATCHES_PER_FLUSH {
                if dirty {
                    sink.flush().await?;
                    dirty = false;
                }
                publish(written);
                published = written;
                deadline = None;
                since_commit = 0;
            }
        }
    }
    sink.close().await?;
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
    mut sink: Box<dyn Sink>,
    mut rx: mpsc::Receiver<Arc<Batch>>,
    ack: watch::Sender<Lsn>,
    acked: Arc<Notify>,
    peers: u32,
) -> Result<(), SinkError> {
    while let Some(batch) = rx.recv().await {
        let Some((at, save)) = &batch.checkpoint else {
            if !batch.events.is_empty() {
                sink.write(&batch.events).await?;
            }
            continue;
        };
        let (before, after) = batch.events.split_at((*at).min(batch.events.len()));
        if !before.is_empty() {
            sink.write(before).await?;
        }
        tracing::debug!(checkpoint = %save.checkpoint.id, peers, "checkpoint reached the committing sink; waiting for the other sinks to flush");
        // Never closed: a sink that fails first ends the pipeline, which
        // stops this task.
        if let Ok(permits) = save.peers_flushed.acquire_many(peers).await {
            permits.forget();
        }
        match sink
            .commit_checkpoint(&save.checkpoint, &save.lease, save.keep)
            .await
        {
            Ok(meta) => {
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
            Err(e) => {
                let message = e.to_string();
                save.answer(Err(e));
                return Err(SinkError::Checkpoint(message));
            }
        }
        if !after.is_empty() {
            sink.write(after).await?;
        }
    }
    // Anything written after the last checkpoint is rolled back here.
    sink.close().await
}
