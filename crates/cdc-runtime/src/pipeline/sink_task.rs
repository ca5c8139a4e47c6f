//! One task per sink: write batches, flush, acknowledge commit LSNs.

use std::sync::Arc;

use cdc_core::Lsn;
use tokio::sync::{mpsc, watch, Notify};

use crate::event::ChangeEvent;
use crate::sinks::{Sink, SinkError};

/// Flush at least after this many written batches, even when more are queued.
const MAX_BATCHES_PER_FLUSH: u32 = 16;

/// A batch of events shared by all sinks.
#[derive(Debug)]
pub(crate) struct Batch {
    /// The events, possibly ending mid-transaction.
    pub(crate) events: Vec<ChangeEvent>,
    /// The end LSN of the last transaction whose events are all in this or
    /// earlier batches, if a commit was seen since the previous batch.
    pub(crate) commit_end: Option<Lsn>,
}

/// Writes batches to `sink` in order. Flushes whenever the channel is empty
/// (or every [`MAX_BATCHES_PER_FLUSH`] batches), then publishes the end LSN of
/// the last fully written transaction on `ack` (and wakes `acked`). When the channel closes it
/// closes the sink and publishes its final position.
pub(crate) async fn run_sink(
    mut sink: Box<dyn Sink>,
    mut rx: mpsc::Receiver<Arc<Batch>>,
    ack: watch::Sender<Lsn>,
    acked: Arc<Notify>,
) -> Result<(), SinkError> {
    let mut written = Lsn::INVALID;
    let mut unflushed = 0u32;
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
    while let Some(batch) = rx.recv().await {
        if !batch.events.is_empty() {
            sink.write(&batch.events).await?;
            unflushed += 1;
        }
        if let Some(end) = batch.commit_end {
            written = written.max(end);
        }
        if rx.is_empty() || unflushed >= MAX_BATCHES_PER_FLUSH {
            if unflushed > 0 {
                sink.flush().await?;
                unflushed = 0;
            }
            publish(written);
        }
    }
    sink.close().await?;
    publish(written);
    Ok(())
}
