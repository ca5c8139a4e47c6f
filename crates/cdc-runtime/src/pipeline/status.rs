//! What the pipeline reports, and when: standby status updates to the
//! server and [`Progress`] snapshots to watchers, both from the
//! [`LsnProgress`](super::progress::LsnProgress) that [`Shared`] keeps
//! across reconnects. Here the sinks' acknowledgements (watch channels) and
//! the coordinator's confirmable position are fed into it, and the wall
//! clock is read.

use std::time::SystemTime;

use cdc_core::{Lsn, PgTimestamp};

use super::{PipelineError, Progress, Shared};
use crate::checkpoint::Coordinator;
use crate::replication::ReplicationStream;

impl Shared {
    /// Feeds what the sinks acknowledged and what checkpoints allow now
    /// into the LSN accounting.
    fn observe_acks(&mut self) {
        for (i, ack) in self.acks.iter().enumerate() {
            self.lsn.handle_ack(i, *ack.borrow());
        }
        if let Some(c) = &self.coordinator {
            self.lsn.handle_checkpoint_confirmable(c.confirmable());
        }
    }

    /// The position that may be confirmed, kept monotonic: what every sink
    /// acknowledged, or with checkpoints what durable checkpoints cover.
    pub(super) fn update_confirmed(&mut self) -> Lsn {
        self.observe_acks();
        let confirmed = self.lsn.poll_confirmed();
        self.publish();
        confirmed
    }

    /// Hands the sinks' progress to the coordinator (which may start a save).
    pub(super) fn poll_checkpoint(&mut self) {
        self.observe_acks();
        let acked = self.lsn.acked();
        if let Some(c) = self.coordinator.as_mut() {
            c.poll_acks(acked);
        }
    }

    pub(super) fn publish(&self) {
        if let Some(m) = &self.monitor {
            let (received, confirmed) = (self.lsn.received(), self.lsn.confirmed());
            m.metrics.received_lsn.set(lsn_gauge(received));
            m.metrics.confirmed_lsn.set(lsn_gauge(confirmed));
            let end = self.server_wal_end.max(received);
            m.metrics.source_lag_bytes.set(lsn_gauge(Lsn::from_u64(
                end.as_u64().saturating_sub(confirmed.as_u64()),
            )));
            m.health.stream_position(
                received,
                self.server_wal_end,
                confirmed,
                self.events,
                std::time::Instant::now(),
            );
        }
        self.progress.send_replace(Progress {
            confirmed: self.lsn.confirmed(),
            received: self.lsn.received(),
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

    pub(super) async fn send_status(
        &mut self,
        stream: &mut ReplicationStream,
    ) -> Result<(), PipelineError> {
        let confirmed = self.update_confirmed();
        let now = PgTimestamp::from_system_time(SystemTime::now()).unwrap_or(PgTimestamp::EPOCH);
        let update = self.lsn.status_update(now);
        tracing::trace!(flush = %confirmed, write = %update.write, "standby status update");
        stream.send(&update.to_bytes()).await?;
        Ok(())
    }
}

/// An LSN (or a byte count) as a gauge value.
fn lsn_gauge(lsn: Lsn) -> i64 {
    i64::try_from(lsn.as_u64()).unwrap_or(i64::MAX)
}
