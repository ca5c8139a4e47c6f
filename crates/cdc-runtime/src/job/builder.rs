//! [`JobBuilder`]: a job's typed settings, checked before it runs.

use std::path::PathBuf;
use std::time::Duration;

use cdc_core::Lsn;
use checkpoint_api::{CheckpointId, JobName};

use crate::checkpoint::{ConfirmPolicy, DEFAULT_INTERVAL, DEFAULT_KEEP};
use crate::operators::Operator;
use crate::pipeline::{
    DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE, DEFAULT_BYTE_BUDGET, DEFAULT_CHANNEL_CAPACITY,
    DEFAULT_STATUS_INTERVAL,
};
use crate::sinks::{Sink, SinkOptions};
use crate::snapshot::{SnapshotOptions, StartupMode};
use crate::source::{Capture, SourceOptions};

use super::{Job, JobError, StoreOptions};

/// How a job checkpoints: where, how often, how many it keeps.
#[derive(Debug, Clone)]
pub struct CheckpointSettings {
    /// The checkpoint store.
    pub store: StoreOptions,
    /// The job's name in the store (default: the slot's name).
    pub job: Option<JobName>,
    /// Time between checkpoints.
    pub interval: Duration,
    /// Also checkpoint after this many bytes of WAL (`None`: time only).
    pub max_bytes: Option<u64>,
    /// Checkpoints kept (at least 1).
    pub keep: usize,
    /// How far the slot may be confirmed.
    pub confirm: ConfirmPolicy,
    /// Resume even when the slot was confirmed past the newest checkpoint.
    pub trust_slot: bool,
    /// Stand by: wait for the job's lock without a deadline (instead of
    /// [`LOCK_WAIT`](super::LOCK_WAIT)), and take the job over when the
    /// active instance dies or stops beating for
    /// [`takeover_after`](Self::takeover_after).
    pub standby: bool,
    /// How long the active instance's lock session may stay silent before a
    /// standby ends it and takes over (`None`: 2 × `interval`). The active
    /// instance beats every quarter of it, so set the same on both.
    pub takeover_after: Option<Duration>,
}

impl CheckpointSettings {
    /// Checkpoints in `store` every 30 s, keeping 5, named after the slot.
    pub fn new(store: StoreOptions) -> Self {
        CheckpointSettings {
            store,
            job: None,
            interval: DEFAULT_INTERVAL,
            max_bytes: None,
            keep: DEFAULT_KEEP,
            confirm: ConfirmPolicy::OldestRetained,
            trust_slot: false,
            standby: false,
            takeover_after: None,
        }
    }

    /// The takeover timeout: [`takeover_after`](Self::takeover_after), or
    /// 2 × `interval`.
    pub fn takeover_timeout(&self) -> Duration {
        self.takeover_after.unwrap_or(self.interval * 2)
    }
}

/// How a job starts when no checkpoint says where to resume.
#[derive(Debug, Clone, Default)]
pub struct SnapshotSettings {
    /// Snapshot first (the default), stream only, snapshot only, or stream
    /// from `start_lsn`.
    pub mode: StartupMode,
    /// Where to start streaming with [`StartupMode::FromLsn`].
    pub start_lsn: Option<Lsn>,
    /// Chunk size and readers of the snapshot.
    pub options: SnapshotOptions,
}

/// Batching, memory and status settings of the pipeline.
#[derive(Debug, Clone)]
pub struct PipelineTuning {
    /// Change events per batch.
    pub batch_size: usize,
    /// Bytes of row data per batch (see
    /// [`PipelineOptions::batch_bytes`](crate::pipeline::PipelineOptions::batch_bytes)).
    pub batch_bytes: usize,
    /// Bytes of streamed in-progress transactions held in memory.
    pub byte_budget: usize,
    /// The least time between two flushes of a sink while the job catches
    /// up (see
    /// [`PipelineOptions::min_flush_interval`](crate::pipeline::PipelineOptions::min_flush_interval)).
    pub min_flush_interval: Duration,
    /// Whether the server streams large transactions before they commit
    /// (see [`PipelineOptions::stream_in_progress`](crate::pipeline::PipelineOptions::stream_in_progress)).
    pub stream_in_progress: bool,
    /// Where larger ones are spilled (default: the system temp directory).
    pub spill_dir: Option<PathBuf>,
    /// Interval between standby status updates.
    pub status_interval: Duration,
    /// Batches buffered per sink.
    pub channel_capacity: usize,
    /// Log a status line (events/s, unconfirmed bytes, newest checkpoint's
    /// age, snapshot) this often (`None`: never).
    pub status_log_interval: Option<Duration>,
    /// How long one sink operation may take before it fails as transient
    /// and is retried (default
    /// [`DEFAULT_SINK_TIMEOUT`](crate::pipeline::DEFAULT_SINK_TIMEOUT); `None`: no limit).
    pub sink_timeout: Option<Duration>,
}

/// The default interval between status lines in the log (30 s).
pub const DEFAULT_STATUS_LOG_INTERVAL: Duration = Duration::from_secs(30);

impl Default for PipelineTuning {
    fn default() -> Self {
        PipelineTuning {
            batch_size: DEFAULT_BATCH_SIZE,
            batch_bytes: DEFAULT_BATCH_BYTES,
            byte_budget: DEFAULT_BYTE_BUDGET,
            min_flush_interval: crate::pipeline::DEFAULT_MIN_FLUSH_INTERVAL,
            stream_in_progress: crate::pipeline::DEFAULT_STREAM_IN_PROGRESS,
            spill_dir: None,
            status_interval: DEFAULT_STATUS_INTERVAL,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
            status_log_interval: Some(DEFAULT_STATUS_LOG_INTERVAL),
            sink_timeout: Some(crate::pipeline::DEFAULT_SINK_TIMEOUT),
        }
    }
}

/// A sink of a job: opened by the job, or handed over open.
pub(super) enum JobSink {
    Open(SinkOptions),
    Custom(Box<dyn Sink>),
}

impl JobSink {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            JobSink::Open(SinkOptions::Stdout { .. }) => "stdout",
            JobSink::Open(SinkOptions::File { .. }) => "file",
            JobSink::Open(SinkOptions::Postgres(_)) => "postgres",
            JobSink::Open(SinkOptions::Nats(_)) => "nats",
            JobSink::Open(SinkOptions::Null) => "null",
            JobSink::Custom(_) => "custom",
        }
    }
}

/// Builds a [`Job`]; see [`Job::builder`].
pub struct JobBuilder {
    pub(super) source: SourceOptions,
    pub(super) sinks: Vec<JobSink>,
    pub(super) operators: Vec<Box<dyn Operator>>,
    pub(super) checkpoints: Option<CheckpointSettings>,
    pub(super) snapshot: SnapshotSettings,
    pub(super) tuning: PipelineTuning,
    pub(super) from_checkpoint: Option<CheckpointId>,
    pub(super) monitor: Option<crate::monitor::Monitor>,
}

impl std::fmt::Debug for JobBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobBuilder")
            .field("source", &self.source)
            .field(
                "sinks",
                &self.sinks.iter().map(JobSink::kind).collect::<Vec<_>>(),
            )
            .field(
                "operators",
                &self
                    .operators
                    .iter()
                    .map(|o| o.operator_id().to_owned())
                    .collect::<Vec<_>>(),
            )
            .field("checkpoints", &self.checkpoints)
            .field("snapshot", &self.snapshot)
            .field("tuning", &self.tuning)
            .field("from_checkpoint", &self.from_checkpoint)
            .finish()
    }
}

impl JobBuilder {
    pub(super) fn new(source: SourceOptions) -> Self {
        JobBuilder {
            source,
            sinks: Vec::new(),
            operators: Vec::new(),
            checkpoints: None,
            snapshot: SnapshotSettings::default(),
            tuning: PipelineTuning::default(),
            from_checkpoint: None,
            monitor: None,
        }
    }

    /// Adds a sink the job opens when it runs (after its lock is taken).
    pub fn sink(mut self, options: SinkOptions) -> Self {
        self.sinks.push(JobSink::Open(options));
        self
    }

    /// Adds a sink of your own, already open.
    pub fn custom_sink(mut self, sink: impl Sink + 'static) -> Self {
        self.sinks.push(JobSink::Custom(Box::new(sink)));
        self
    }

    /// Adds an operator; operators see the events in the order added. Its
    /// state is checkpointed and restored (needs [`checkpoints`](Self::checkpoints)).
    pub fn operator(mut self, operator: impl Operator + 'static) -> Self {
        self.operators.push(Box::new(operator));
        self
    }

    /// Adds an operator that is already boxed.
    pub fn boxed_operator(mut self, operator: Box<dyn Operator>) -> Self {
        self.operators.push(operator);
        self
    }

    /// Checkpoints as `settings` say; the slot is then confirmed only as
    /// far as durable checkpoints cover. Without: sinks are at least once,
    /// and the slot is confirmed as far as every sink flushed.
    pub fn checkpoints(mut self, settings: CheckpointSettings) -> Self {
        self.checkpoints = Some(settings);
        self
    }

    /// How the job starts when no checkpoint says where to resume.
    pub fn snapshot(mut self, settings: SnapshotSettings) -> Self {
        self.snapshot = settings;
        self
    }

    /// Batching, memory and status settings.
    pub fn tuning(mut self, tuning: PipelineTuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// Resumes from this retained checkpoint instead of the newest (newer
    /// ones are deleted).
    pub fn from_checkpoint(mut self, id: CheckpointId) -> Self {
        self.from_checkpoint = Some(id);
        self
    }

    /// Keeps `monitor`'s metrics and health up to date while the job runs
    /// (see [`crate::monitor`]).
    pub fn monitor(mut self, monitor: crate::monitor::Monitor) -> Self {
        self.monitor = Some(monitor);
        self
    }

    /// Checks the settings and builds the job. Each error names the setting.
    pub fn build(self) -> Result<Job, JobError> {
        let s = &self.source;
        if self.sinks.is_empty() {
            return Err(invalid("sinks", "add at least one sink"));
        }
        if s.slot.is_empty() || s.publication.is_empty() {
            return Err(invalid("source.slot", "slot and publication must be named"));
        }
        match &s.capture {
            Capture::Tables(t) if t.is_empty() => {
                return Err(invalid(
                    "source.tables",
                    "list the tables (or schemas) to capture",
                ))
            }
            Capture::Schemas(x) if x.is_empty() => {
                return Err(invalid(
                    "source.schemas",
                    "list the schemas (or tables) to capture",
                ))
            }
            _ => {}
        }
        let t = &self.tuning;
        if t.batch_size == 0
            || t.batch_bytes == 0
            || t.byte_budget == 0
            || t.status_interval.is_zero()
        {
            return Err(invalid(
                "pipeline",
                "batch_size, batch_bytes, byte_budget and status_interval must be positive",
            ));
        }
        if t.channel_capacity == 0 {
            return Err(invalid("pipeline.channel_capacity", "must be positive"));
        }
        match (self.snapshot.mode, self.snapshot.start_lsn) {
            (StartupMode::FromLsn, None) => {
                return Err(invalid("snapshot.mode", "from_lsn needs a start LSN"))
            }
            (StartupMode::FromLsn, Some(_)) | (_, None) => {}
            (_, Some(_)) => {
                return Err(invalid(
                    "source.start_lsn",
                    "is only used with the from_lsn startup mode",
                ))
            }
        }
        let o = &self.snapshot.options;
        if o.chunk_size == 0 || o.readers == 0 {
            return Err(invalid(
                "snapshot",
                "chunk_size and readers must be positive",
            ));
        }
        match &self.checkpoints {
            Some(c) => {
                if c.interval.is_zero() {
                    return Err(invalid("checkpoint.interval", "must be positive"));
                }
                if c.keep == 0 {
                    return Err(invalid(
                        "checkpoint.keep",
                        "must keep at least 1 checkpoint",
                    ));
                }
                if c.takeover_after.is_some_and(|d| d.is_zero()) {
                    return Err(invalid("ha.takeover_after_ms", "must be positive"));
                }
                if c.max_bytes == Some(0) {
                    return Err(invalid("checkpoint.max_bytes", "must be positive when set"));
                }
                if c.job.is_none() {
                    JobName::new(s.slot.clone())
                        .map_err(|e| invalid("checkpoint.job", e.to_string()))?;
                }
            }
            None if !self.operators.is_empty() => {
                return Err(invalid(
                    "operators",
                    "stateful operators need checkpoints, or their state is lost on every restart",
                ))
            }
            None if self.from_checkpoint.is_some() => {
                return Err(invalid("--from-checkpoint", "the job takes no checkpoints"))
            }
            None => {}
        }
        let mut ids = std::collections::HashSet::new();
        for op in &self.operators {
            if !ids.insert(op.operator_id().to_owned()) {
                return Err(invalid(
                    "operators.id",
                    format!("{:?} is used by two operators", op.operator_id()),
                ));
            }
        }
        Ok(Job { builder: self })
    }

    /// What identifies this job's configuration in its checkpoints: source,
    /// slot, publication, captured tables, operators and sinks (not the
    /// credentials, not the tuning).
    pub(super) fn fingerprint(&self) -> bytes::Bytes {
        let s = &self.source;
        let mut text = format!(
            "v1\nslot={}\npublication={}\ndatabase={}\n",
            s.slot,
            s.publication,
            s.replication.get_dbname()
        );
        match &s.capture {
            Capture::Tables(t) => {
                let mut t: Vec<String> = t.iter().map(ToString::to_string).collect();
                t.sort();
                text.push_str(&format!("tables={}\n", t.join(",")));
            }
            Capture::Schemas(x) => text.push_str(&format!("schemas={}\n", x.join(","))),
        }
        for op in &self.operators {
            text.push_str(&format!("operator={}:{}\n", op.operator_id(), op.kind()));
        }
        for sink in &self.sinks {
            text.push_str(&format!("sink={}\n", sink.kind()));
        }
        let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
        bytes::Bytes::copy_from_slice(digest.as_ref())
    }
}

fn invalid(key: &str, reason: impl Into<String>) -> JobError {
    JobError::Invalid {
        key: key.to_owned(),
        reason: reason.into(),
    }
}
