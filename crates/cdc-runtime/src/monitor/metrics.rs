//! The Prometheus metrics of a job, in the Prometheus project's own client
//! (`prometheus-client`): typed label sets, one registry per job, no global
//! state. Names follow Prometheus conventions: base units (`_seconds`,
//! `_bytes`), `_total` for counters, `pgcdc_` first.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use crate::event::{ChangeEvent, Operation};

/// Labels of the change-event counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    /// `schema.table` (empty for messages).
    pub table: String,
    /// `read`, `insert`, `update`, `delete`, `truncate`, `message`,
    /// `schema_change`.
    pub op: String,
}

/// A table label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TableLabel {
    /// `schema.table`.
    pub table: String,
}

/// A sink label: the sink's position in the configuration, from 0.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabel {
    /// The sink's index.
    pub sink: String,
}

/// Labels of sink errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkErrorLabels {
    /// The sink's index.
    pub sink: String,
    /// `transient` or `permanent`.
    pub kind: String,
}

/// Labels of the sink info metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkInfoLabels {
    /// The sink's index.
    pub sink: String,
    /// Its type (`file`, `stdout`, `postgres`, `null`, or `custom`).
    pub r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

fn latency_histogram() -> Histogram {
    // 0.5 ms to about 65 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

/// Every metric a job exports. Cloning shares the metrics.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub(crate) events: Family<EventLabels, Counter>,
    pub(crate) received_lsn: Gauge,
    pub(crate) confirmed_lsn: Gauge,
    pub(crate) source_lag_bytes: Gauge,
    pub(crate) slot_retained_wal_bytes: Gauge,
    pub(crate) commit_to_flush: Family<SinkLabel, Histogram, fn() -> Histogram>,
    pub(crate) checkpoint_duration: Histogram,
    pub(crate) checkpoint_size_bytes: Gauge,
    pub(crate) checkpoints_saved: Counter,
    pub(crate) checkpoints_failed: Counter,
    checkpoint_age: FloatGauge,
    last_checkpoint: Arc<Mutex<Option<SystemTime>>>,
    pub(crate) snapshot_rows: Family<TableLabel, Counter>,
    pub(crate) snapshot_progress: Family<TableLabel, FloatGauge>,
    pub(crate) spilled_bytes: Counter,
    pub(crate) reconnects: Counter,
    pub(crate) sink_errors: Family<SinkErrorLabels, Counter>,
    pub(crate) sink_retries: Family<SinkLabel, Counter>,
    pub(crate) sink_duplicates: Family<SinkLabel, Counter>,
    sink_info: Family<SinkInfoLabels, Gauge>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A new set of metrics, all zero.
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("pgcdc");
        let m = Metrics {
            registry: Arc::new(Registry::default()),
            events: Family::default(),
            received_lsn: Gauge::default(),
            confirmed_lsn: Gauge::default(),
            source_lag_bytes: Gauge::default(),
            slot_retained_wal_bytes: Gauge::default(),
            commit_to_flush: Family::new_with_constructor(latency_histogram),
            checkpoint_duration: latency_histogram(),
            checkpoint_size_bytes: Gauge::default(),
            checkpoints_saved: Counter::default(),
            checkpoints_failed: Counter::default(),
            checkpoint_age: FloatGauge::default(),
            last_checkpoint: Arc::new(Mutex::new(None)),
            snapshot_rows: Family::default(),
            snapshot_progress: Family::default(),
            spilled_bytes: Counter::default(),
            reconnects: Counter::default(),
            sink_errors: Family::default(),
            sink_retries: Family::default(),
            sink_duplicates: Family::default(),
            sink_info: Family::default(),
        };
        r.register(
            "events",
            "Change events handed to the sinks, by table and operation",
            m.events.clone(),
        );
        r.register(
            "received_lsn",
            "The highest WAL position received from the server",
            m.received_lsn.clone(),
        );
        r.register(
            "confirmed_lsn",
            "The WAL position confirmed to the server (the slot's confirmed_flush_lsn)",
            m.confirmed_lsn.clone(),
        );
        r.register_with_unit(
            "source_lag",
            "The server's WAL end minus the confirmed position",
            Unit::Bytes,
            m.source_lag_bytes.clone(),
        );
        r.register_with_unit(
            "slot_retained_wal",
            "WAL the server keeps for the slot (current WAL position minus the slot's restart_lsn)",
            Unit::Bytes,
            m.slot_retained_wal_bytes.clone(),
        );
        r.register_with_unit(
            "commit_to_flush",
            "From a transaction's commit on the source to its flush by a sink",
            Unit::Seconds,
            m.commit_to_flush.clone(),
        );
        r.register_with_unit(
            "checkpoint_duration",
            "From capturing a checkpoint to its being durable",
            Unit::Seconds,
            m.checkpoint_duration.clone(),
        );
        r.register_with_unit(
            "checkpoint_size",
            "Encoded size of the newest checkpoint",
            Unit::Bytes,
            m.checkpoint_size_bytes.clone(),
        );
        r.register(
            "checkpoints_saved",
            "Checkpoints saved",
            m.checkpoints_saved.clone(),
        );
        r.register(
            "checkpoints_failed",
            "Checkpoint saves that failed (retried at the next interval)",
            m.checkpoints_failed.clone(),
        );
        r.register_with_unit(
            "checkpoint_age",
            "Time since the newest checkpoint was saved",
            Unit::Seconds,
            m.checkpoint_age.clone(),
        );
        r.register(
            "snapshot_rows",
            "Rows read by the snapshot, by table",
            m.snapshot_rows.clone(),
        );
        r.register(
            "snapshot_progress_ratio",
            "Snapshot progress by table: rows read over the planner's estimate (1 when done)",
            m.snapshot_progress.clone(),
        );
        r.register_with_unit(
            "spilled",
            "Bytes of in-progress transactions spilled to disk",
            Unit::Bytes,
            m.spilled_bytes.clone(),
        );
        r.register(
            "reconnects",
            "Reconnects of the replication stream",
            m.reconnects.clone(),
        );
        r.register(
            "sink_errors",
            "Sink errors by sink and kind",
            m.sink_errors.clone(),
        );
        r.register(
            "sink_retries",
            "Sink retries after transient errors",
            m.sink_retries.clone(),
        );
        r.register(
            "sink_duplicates_dropped",
            "Records a sink's destination dropped as repeats of ones it already held (a replay after a restart or an error; the NATS sink's JetStream deduplication)",
            m.sink_duplicates.clone(),
        );
        r.register(
            "sink_info",
            "The configured sinks (value 1)",
            m.sink_info.clone(),
        );
        r.register(
            "build",
            "pgcdc's version (value 1)",
            Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            }),
        );
        Metrics {
            registry: Arc::new(r),
            ..m
        }
    }

    /// Names sink `index` of type `kind` in `pgcdc_sink_info`.
    pub fn set_sink(&self, index: usize, kind: &str) {
        self.sink_info
            .get_or_create(&SinkInfoLabels {
                sink: index.to_string(),
                r#type: kind.to_owned(),
            })
            .set(1);
    }

    /// A checkpoint was saved at `at` (for `pgcdc_checkpoint_age_seconds`).
    pub(crate) fn checkpoint_saved_at(&self, at: SystemTime) {
        if let Ok(mut last) = self.last_checkpoint.lock() {
            *last = Some(at);
        }
    }

    /// The metrics in the Prometheus text format (OpenMetrics).
    pub fn encode(&self) -> String {
        let last = self.last_checkpoint.lock().ok().and_then(|l| *l);
        if let Some(at) = last {
            let age = SystemTime::now()
                .duration_since(at)
                .unwrap_or_default()
                .as_secs_f64();
            self.checkpoint_age.set(age);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Counts events by table and operation with one hash lookup per change of
/// table or operation (consecutive events mostly share both).
#[derive(Default)]
pub(crate) struct EventCounts {
    counters: HashMap<(cdc_core::Oid, Operation), Counter>,
    run: Option<((cdc_core::Oid, Operation), u64)>,
}

impl EventCounts {
    /// Counts `events` into `metrics`.
    pub(crate) fn count(&mut self, metrics: &Metrics, events: &[ChangeEvent]) {
        for ev in events {
            // Transaction boundaries are not events.
            if ev.op == Operation::Transaction {
                continue;
            }
            let key = (ev.table.as_ref().map_or(0, |t| t.oid), ev.op);
            match &mut self.run {
                Some((k, n)) if *k == key => *n += 1,
                _ => {
                    self.flush();
                    self.counters.entry(key).or_insert_with(|| {
                        let table = ev
                            .table
                            .as_ref()
                            .map(|t| format!("{}.{}", t.schema, t.table))
                            .unwrap_or_default();
                        metrics
                            .events
                            .get_or_create(&EventLabels {
                                table,
                                op: ev.op.name().to_owned(),
                            })
                            .clone()
                    });
                    self.run = Some((key, 1));
                }
            }
        }
        self.flush();
    }

    fn flush(&mut self) {
        if let Some((key, n)) = self.run.take() {
            if let Some(c) = self.counters.get(&key) {
                c.inc_by(n);
            }
        }
    }
}
