//! One task per sink: write batches, flush, acknowledge commit LSNs.

use std::sync::Arc;
use std::time::Duration;

use cdc_core::Lsn;
use tokio::sync::{mpsc, watch, Notify};

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
