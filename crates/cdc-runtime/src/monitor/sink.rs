//! What a sink task reports: commit-to-flush latency, errors, retries and
//! its health.

use std::time::SystemTime;

use cdc_core::PgTimestamp;

use super::health::SinkState;
use super::metrics::{SinkErrorLabels, SinkLabel};
use super::Monitor;

/// The monitor as one sink task sees it.
#[derive(Debug, Clone)]
pub(crate) struct SinkWatch {
    index: usize,
    monitor: Monitor,
    /// Commit times of transactions written and not yet flushed.
    pending: Vec<PgTimestamp>,
    /// The sink's duplicates total when last reported.
    duplicates_seen: u64,
}

impl SinkWatch {
    pub(crate) fn new(index: usize, monitor: Monitor) -> Self {
        SinkWatch {
            index,
            monitor,
            pending: Vec::new(),
            duplicates_seen: 0,
        }
    }

    fn label(&self) -> SinkLabel {
        SinkLabel {
            sink: self.index.to_string(),
        }
    }

    /// Transactions committed at `times` were written.
    pub(crate) fn written(&mut self, times: &[PgTimestamp]) {
        self.pending.extend_from_slice(times);
    }

    /// Everything written is flushed: one latency sample per transaction.
    pub(crate) fn flushed(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let now = SystemTime::now();
        let histogram = self
            .monitor
            .metrics
            .commit_to_flush
            .get_or_create(&self.label());
        for t in self.pending.drain(..) {
            if let Some(at) = t.to_system_time() {
                // A source clock ahead of ours reads as zero.
                histogram.observe(now.duration_since(at).unwrap_or_default().as_secs_f64());
            }
        }
    }

    /// The sink's destination has dropped `total` duplicates since it was
    /// opened.
    pub(crate) fn duplicates(&mut self, total: u64) {
        // A reopened sink counts from 0 again.
        let new = total.checked_sub(self.duplicates_seen).unwrap_or(total);
        self.duplicates_seen = total;
        if new > 0 {
            self.monitor
                .metrics
                .sink_duplicates
                .get_or_create(&self.label())
                .inc_by(new);
        }
    }

    /// A transient error is being retried.
    pub(crate) fn retrying(&self, error: &dyn std::fmt::Display) {
        let m = &self.monitor.metrics;
        m.sink_retries.get_or_create(&self.label()).inc();
        m.sink_errors
            .get_or_create(&SinkErrorLabels {
                sink: self.index.to_string(),
                kind: "transient".into(),
            })
            .inc();
        self.monitor
            .health
            .sink(self.index, SinkState::Retrying(error.to_string()));
    }

    /// The sink recovered from a transient error.
    pub(crate) fn recovered(&self) {
        self.monitor.health.sink(self.index, SinkState::Healthy);
    }

    /// An error stops the sink.
    pub(crate) fn failed(&self, error: &dyn std::fmt::Display) {
        self.monitor
            .metrics
            .sink_errors
            .get_or_create(&SinkErrorLabels {
                sink: self.index.to_string(),
                kind: "permanent".into(),
            })
            .inc();
        self.monitor
            .health
            .sink(self.index, SinkState::Failed(error.to_string()));
    }
}
