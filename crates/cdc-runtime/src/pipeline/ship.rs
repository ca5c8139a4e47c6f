//! Shipping: the pending batch, sending it to every sink's bounded
//! channel (waiting for space is the backpressure that stops reading the
//! socket, while status updates still go out), and the sink tasks'
//! lifetime: spawning them, the one sink that may commit checkpoints, the
//! final checkpoint it commits, and draining them at shutdown.

use std::sync::Arc;

use cdc_core::Lsn;
use futures_util::FutureExt;
use tokio::sync::{mpsc, watch};

use super::session::Source;
use super::sink_task::{run_committing_sink, run_sink, Batch};
use super::{PipelineError, Shared};
use crate::checkpoint::InSinkSave;
use crate::event::ChangeEvent;
use crate::operators::Operator;
use crate::replication::ReplicationStream;
use crate::sinks::{Sink, SinkError};

/// The batch being filled.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) events: Vec<ChangeEvent>,
    pub(super) commit_end: Option<Lsn>,
    /// Commit times of the transactions that end in `events`, for the
    /// commit-to-flush latency.
    pub(super) commit_times: Vec<cdc_core::PgTimestamp>,
    /// The commit time of the newest transaction that ends in `events`.
    pub(super) commit_time: Option<cdc_core::PgTimestamp>,
    /// How many of `events` belong to committed transactions (or are
    /// non-transactional messages); the rest belong to the open one.
    pub(super) committed: usize,
    /// A checkpoint for the sink that commits checkpoints, taken after the
    /// first `.0` events.
    pub(super) checkpoint: Option<(usize, Arc<InSinkSave>)>,
    /// The converter's [`row_bytes`](crate::event::EventConverter::row_bytes)
    /// when this batch began.
    pub(super) row_bytes_at: usize,
}

impl Pending {
    pub(super) fn is_empty(&self) -> bool {
        self.events.is_empty() && self.commit_end.is_none() && self.checkpoint.is_none()
    }

    /// Sends `save` (if any) after the events pending now.
    pub(super) fn checkpoint_here(&mut self, save: Option<Arc<InSinkSave>>) {
        if let Some(save) = save {
            self.checkpoint = Some((self.events.len(), save));
        }
    }
}

impl Source<'_> {
    /// Ships the pending batch once it is full; sends a status update when
    /// one is due even if the sinks keep up (a long replay does not read
    /// the socket, and the server must still hear from us).
    pub(super) async fn ship_full(
        &mut self,
        shared: &mut Shared,
        stream: &mut ReplicationStream,
        ticker: &mut tokio::time::Interval,
    ) -> Result<(), PipelineError> {
        if !self.batch_full() {
            return Ok(());
        }
        self.ship(shared, stream, ticker).await?;
        if ticker.tick().now_or_never().is_some() {
            shared.send_status(stream).await?;
        }
        Ok(())
    }

    /// Whether the pending batch holds `batch_size` events, or rows of
    /// `batch_bytes` (as sent).
    pub(super) fn batch_full(&self) -> bool {
        self.pending.events.len() >= self.options.batch_size
            || self
                .converter
                .row_bytes()
                .wrapping_sub(self.pending.row_bytes_at)
                >= self.options.batch_bytes
    }

    /// Sends the pending batch to every sink, waiting for channel space
    /// (backpressure) while still sending status updates.
    pub(super) async fn ship(
        &mut self,
        shared: &mut Shared,
        stream: &mut ReplicationStream,
        ticker: &mut tokio::time::Interval,
    ) -> Result<(), PipelineError> {
        if self.pending.is_empty() {
            // Rows made for no event (none is pending) count towards no batch.
            self.pending.row_bytes_at = self.converter.row_bytes();
            return Ok(());
        }
        self.facts.fill(&self.pending.events).await;
        let pending = std::mem::take(&mut self.pending);
        // What stays open continues in the next batch.
        self.pending.committed = 0;
        self.pending.row_bytes_at = self.converter.row_bytes();
        // Room for as many events as this batch held (at most a full batch):
        // one allocation per batch instead of the doublings of a `Vec`
        // grown from empty, each copying the events so far.
        self.pending.events = Vec::with_capacity(pending.events.len().min(self.options.batch_size));
        if let Some(m) = &shared.monitor {
            shared.event_counts.count(&m.metrics, &pending.events);
        }
        let batch = Arc::new(Batch {
            events: pending.events,
            commit_end: pending.commit_end,
            commit_times: pending.commit_times,
            commit_time: pending.commit_time,
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

impl Shared {
    /// Spawns one task per sink, with a channel of `capacity` batches each
    /// (the sink that commits checkpoints, if any, gets its own kind).
    pub(super) fn spawn_sinks(
        &mut self,
        sinks: Vec<Box<dyn Sink>>,
        capacity: usize,
        timeout: Option<std::time::Duration>,
        min_flush_interval: std::time::Duration,
    ) -> Result<(), PipelineError> {
        let retry = super::sink_task::SinkRetry::with_timeout(timeout);
        let committing = committing_sink(&sinks, self.coordinator.is_some())?;
        if let (Some(_), Some(c)) = (committing, self.coordinator.as_mut()) {
            c.commit_in_sink();
        }
        let peers = u32::try_from(sinks.len().saturating_sub(1)).unwrap_or(u32::MAX);
        for (i, sink) in sinks.into_iter().enumerate() {
            let (tx, rx) = mpsc::channel(capacity.max(1));
            let (ack_tx, ack_rx) = watch::channel(Lsn::INVALID);
            let acked = self.acked.clone();
            let watch = self
                .monitor
                .as_ref()
                .map(|m| crate::monitor::SinkWatch::new(i, m.clone()));
            if committing == Some(i) {
                self.tasks.spawn(run_committing_sink(
                    sink, rx, ack_tx, acked, peers, retry, watch,
                ));
            } else {
                self.tasks.spawn(run_sink(
                    sink,
                    rx,
                    ack_tx,
                    acked,
                    retry,
                    watch,
                    min_flush_interval,
                ));
            }
            self.senders.push(tx);
            self.acks.push(ack_rx);
        }
        Ok(())
    }

    /// Shutdown: closes the channels and lets every sink drain, flush and
    /// close.
    pub(super) async fn close_sinks(&mut self) -> Result<(), PipelineError> {
        self.senders.clear();
        while let Some(joined) = self.tasks.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(PipelineError::Sink(e)),
                Err(_) => return Err(PipelineError::SinkStopped),
            }
        }
        Ok(())
    }

    /// Shutdown with a sink that commits checkpoints: the final checkpoint
    /// goes to it while the sinks still run (closing it would roll back
    /// what no checkpoint covers).
    pub(super) async fn final_checkpoint_in_sink(
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
            commit_times: Vec::new(),
            commit_time: None,
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
    pub(super) async fn first_sink_error(&mut self) -> PipelineError {
        match self.tasks.join_next().await {
            Some(joined) => Self::sink_failure(joined),
            None => PipelineError::SinkStopped,
        }
    }

    /// A sink task ended while streaming: that is always an error.
    pub(super) fn sink_failure(
        joined: Result<Result<(), SinkError>, tokio::task::JoinError>,
    ) -> PipelineError {
        match joined {
            Ok(Err(e)) => PipelineError::Sink(e),
            Ok(Ok(())) => PipelineError::SinkStopped,
            Err(_) => PipelineError::SinkStopped,
        }
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
    fn pending_with_only_a_commit_is_not_empty() {
        let mut p = Pending::default();
        assert!(p.is_empty());
        p.commit_end = Some(Lsn::from_u64(10));
        assert!(!p.is_empty());
    }
}
