//! What a running job shows of itself: Prometheus metrics and health.
//!
//! A [`Monitor`] given to [`crate::job::JobBuilder::monitor`] is updated by
//! the pipeline while the job runs; an HTTP endpoint (the `pgcdc` binary
//! serves one) reads it: [`Metrics::encode`] for `/metrics`,
//! [`Health::readiness`] for `/readyz`.
//!
//! ```
//! use cdc_runtime::monitor::Monitor;
//!
//! let monitor = Monitor::new();
//! let text = monitor.metrics.encode();
//! assert!(text.contains("pgcdc_build_info"));
//! assert!(!monitor.health.readiness(std::time::Instant::now()).ready);
//! ```

mod health;
mod metrics;
mod sink;

pub use health::{
    CheckpointEntry, Health, Readiness, SinkState, SnapshotEntry, StatusReport, STALL,
};
pub(crate) use metrics::EventCounts;
pub use metrics::{EventLabels, Metrics, SinkErrorLabels, SinkInfoLabels, SinkLabel, TableLabel};
pub(crate) use sink::SinkWatch;

/// Metrics and health of one job. Cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct Monitor {
    /// The Prometheus metrics.
    pub metrics: Metrics,
    /// What readiness depends on.
    pub health: Health,
}

impl Monitor {
    /// A monitor for a job about to start.
    pub fn new() -> Self {
        Self::default()
    }
}
