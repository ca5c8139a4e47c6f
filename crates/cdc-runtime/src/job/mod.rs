//! A whole job as `pgcdc run` runs it: check the server, take the job's
//! lock and lease, recover from the newest checkpoint, open the sinks and
//! operators, and stream until shutdown.
//!
//! [`Job::builder`] takes typed settings: the source, sinks (opened by the
//! job from [`SinkOptions`](crate::sinks::SinkOptions), or your own
//! [`Sink`](crate::sinks::Sink)), operators, checkpoints and the snapshot.
//! `pgcdc.toml` is a thin layer that builds the same thing.
//!
//! ```no_run
//! use cdc_runtime::job::{CheckpointSettings, Job, StoreOptions};
//! use cdc_runtime::sinks::SinkOptions;
//! use cdc_runtime::source::{Capture, SourceOptions, TableRef};
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let db: cdc_runtime::replication::ReplicationConfig =
//!     "host=db.example dbname=app user=cdc".parse()?;
//! let source = SourceOptions::new(
//!     db.clone(),
//!     "pgcdc_app",
//!     "pgcdc_app",
//!     Capture::Tables(vec![TableRef::parse("public.orders")?]),
//! );
//! let job = Job::builder(source)
//!     .sink(SinkOptions::Null)
//!     .checkpoints(CheckpointSettings::new(StoreOptions::new(db)))
//!     .build()?;
//! let progress = job
//!     .run(async {
//!         let _ = tokio::signal::ctrl_c().await;
//!     })
//!     .await?;
//! println!("confirmed {}", progress.confirmed);
//! # Ok(()) }
//! ```

mod builder;
mod heartbeat;
mod liveness;
mod lock;
mod lost_slot;
mod slot_watch;
mod standby;
mod status_log;
mod store;

use std::future::Future;
use std::sync::Arc;

use checkpoint_api::{CheckpointError, JobName, OwnerId};
use tokio::sync::watch;

use crate::checkpoint::{
    recover, slot_state, start_over, CheckpointOptions, RecoveryError, RecoveryOptions, SlotLoss,
    SlotLostError,
};
use crate::pipeline::{Pipeline, PipelineError, PipelineOptions, Progress};
use crate::replication::{ReplicationConnection, ReplicationError};
use crate::setup::{prepare, SetupError, SetupMode};
use crate::sinks::open_sink;
use crate::snapshot::{SnapshotError, SnapshotPlan, SnapshotState, StartupMode};
use crate::tls_connect::PgClientSettings;

use builder::JobSink;
pub use builder::{
    CheckpointSettings, JobBuilder, PipelineTuning, SnapshotSettings, DEFAULT_STATUS_LOG_INTERVAL,
};
use liveness::LockWatch;
pub use lock::{JobLock, LockError, LOCK_APPLICATION_NAME, LOCK_WAIT};
pub use store::StoreOptions;

/// Why a job stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// A setting is invalid.
    #[error("invalid {key}: {reason}")]
    Invalid {
        /// The setting, e.g. `checkpoint.keep`.
        key: String,
        /// Why.
        reason: String,
    },
    /// The source could not be reached.
    #[error("cannot connect to the source: {0}")]
    Connect(#[from] ReplicationError),
    /// The source is not ready for streaming.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The checkpoint store failed.
    #[error("checkpoint store: {0}")]
    Store(#[from] CheckpointError),
    /// Another instance runs the job.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// Another instance took the job over while this one ran (it was
    /// frozen, or cut off from the checkpoint database): this one stopped at
    /// once, without a final checkpoint.
    #[error("fenced: another instance took over job {job:?} ({reason}); this instance stopped without writing a checkpoint")]
    Fenced {
        /// The job.
        job: String,
        /// What showed it.
        reason: String,
    },
    /// The job cannot resume.
    #[error(transparent)]
    Recovery(#[from] RecoveryError),
    /// A sink could not be opened.
    #[error("{0}")]
    Sink(String),
    /// The pipeline stopped with an error.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The initial snapshot could not be planned.
    #[error("initial snapshot: {0}")]
    Snapshot(#[from] SnapshotError),
    /// The replication slot is lost: found at start with
    /// `source.on_slot_lost = "fail"`, or while streaming (running the job
    /// again then applies `on_slot_lost`).
    #[error(transparent)]
    SlotLost(#[from] SlotLostError),
}

/// A job ready to run; see the [module docs](self).
#[derive(Debug)]
pub struct Job {
    builder: JobBuilder,
}

impl Job {
    /// Starts building a job that captures `source`.
    pub fn builder(source: crate::source::SourceOptions) -> JobBuilder {
        JobBuilder::new(source)
    }

    /// Runs the job until `shutdown` completes (then: final checkpoint,
    /// clean end of the stream) or a definite error.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<Progress, JobError> {
        self.run_watched(shutdown, None).await
    }

    /// Like [`run`](Self::run), publishing the pipeline's progress on
    /// `progress` while it runs.
    pub async fn run_with_progress(
        self,
        shutdown: impl Future<Output = ()>,
        progress: watch::Sender<Progress>,
    ) -> Result<Progress, JobError> {
        self.run_watched(shutdown, Some(progress)).await
    }

    async fn run_watched(
        self,
        shutdown: impl Future<Output = ()>,
        watched: Option<watch::Sender<Progress>>,
    ) -> Result<Progress, JobError> {
        // Shutdown is heard while the job starts too (connecting, waiting for
        // the lock, recovering, creating the slot): stopping then streams
        // nothing, and what was set up stays for the next start.
        tokio::pin!(shutdown);
        let started = tokio::select! {
            started = start(self.builder) => started?,
            _ = shutdown.as_mut() => {
                tracing::info!("shutdown requested while the job was starting; stopped before streaming");
                return Ok(Progress::default());
            }
        };
        let Some(Started {
            pipeline,
            mode,
            created_slot,
            replication: rc,
            slot,
            checkpoints,
            status_log_interval,
            mut lock,
            _heartbeat,
            _slot_watch,
        }) = started
        else {
            return Ok(Progress::default());
        };
        // Another instance taking the job over stops this one at once:
        // the pipeline (and its sink tasks) is dropped mid-stream, with no
        // flush and no final checkpoint.
        let fenced = async {
            match lock.as_mut() {
                Some(l) => {
                    let reason = l.lost().await;
                    JobError::Fenced {
                        job: l.job().to_owned(),
                        reason,
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::pin!(fenced);
        let _status_log = status_log_interval
            .filter(|d| !d.is_zero())
            .map(|every| AbortOnDrop(tokio::spawn(status_log::run(pipeline.progress(), every))));
        let _forward = watched.map(|tx| {
            let mut rx = pipeline.progress();
            AbortOnDrop(tokio::spawn(async move {
                while rx.changed().await.is_ok() {
                    let p = *rx.borrow_and_update();
                    tx.send_replace(p);
                }
            }))
        });
        let progress = if mode == StartupMode::SnapshotOnly {
            // Stop once the snapshot is complete (the final checkpoint records it).
            let mut watch = pipeline.progress();
            let done = async move {
                let _ = watch
                    .wait_for(|p| p.snapshot == SnapshotState::Complete)
                    .await;
            };
            let run = pipeline.run(async {
                tokio::select! {
                    _ = shutdown.as_mut() => {}
                    _ = done => tracing::info!("snapshot_only: the snapshot is complete; stopping"),
                }
            });
            let progress = tokio::select! {
                p = run => p.map_err(fenced_save)?,
                e = fenced.as_mut() => return Err(e),
            };
            if progress.snapshot == SnapshotState::Complete && created_slot {
                let mut conn = ReplicationConnection::connect(&rc).await?;
                conn.drop_replication_slot(&slot, true).await?;
                let _ = conn.close().await;
                tracing::info!(slot = %slot, "snapshot_only: dropped the slot created for it");
            }
            progress
        } else {
            tokio::select! {
                p = pipeline.run(shutdown) => p.map_err(|e| match fenced_save(e) {
                    JobError::Pipeline(e) => lost_slot::streaming_error(&slot, e),
                    other => other,
                })?,
                e = fenced.as_mut() => return Err(e),
            }
        };
        if progress.snapshot == SnapshotState::Running && !checkpoints {
            tracing::warn!(slot = %slot,
                "the initial snapshot did not finish, and without checkpoints nothing records how far it got: the next start streams without it. Drop the slot to take the snapshot again, or configure checkpoints so a snapshot resumes");
        }
        tracing::info!(confirmed = %progress.confirmed, events = progress.events,
            reconnects = progress.reconnects, checkpoints = progress.checkpoints.saved, "stopped cleanly");
        Ok(progress)
    }
}

/// A job that has started: its pipeline is built and nothing streams yet.
struct Started {
    pipeline: Pipeline,
    mode: StartupMode,
    created_slot: bool,
    replication: crate::replication::ReplicationConfig,
    slot: String,
    checkpoints: bool,
    status_log_interval: Option<std::time::Duration>,
    lock: Option<LockWatch>,
    _heartbeat: Option<AbortOnDrop>,
    _slot_watch: Option<AbortOnDrop>,
}

/// Everything before streaming: the slot's state, the lock and lease,
/// recovery, the server's set-up, the snapshot plan, the sinks. `None`:
/// there is nothing to do (`snapshot_only` with no snapshot to take).
async fn start(builder: JobBuilder) -> Result<Option<Started>, JobError> {
    let fingerprint = builder.fingerprint();
    let JobBuilder {
        source,
        sinks: job_sinks,
        operators,
        checkpoints,
        snapshot: snapshot_settings,
        tuning,
        from_checkpoint,
        monitor,
    } = builder;
    let mode = snapshot_settings.mode;
    let rc = source.replication.clone();
    // The job's lock comes first: a standby waits for it before it opens
    // anything on the source.
    let mut locked = None;
    if let Some(cc) = &checkpoints {
        let store = cc.store.open().await?;
        let job = match &cc.job {
            Some(j) => j.clone(),
            None => JobName::new(source.slot.clone()).map_err(|e| JobError::Invalid {
                key: "checkpoint.job".into(),
                reason: e.to_string(),
            })?,
        };
        let (lock, took_over) = if cc.standby {
            standby::stand_by(store.pool(), job.as_str(), cc.takeover_timeout()).await?
        } else {
            (JobLock::acquire(store.pool(), job.as_str()).await?, false)
        };
        if cc.standby {
            tracing::info!(job = %job, took_over, "took the job's lock: this instance runs the job now");
        }
        let lock = LockWatch::start(
            lock,
            store.pool().clone(),
            liveness::beat_period(cc.takeover_timeout()),
        );
        locked = Some((store, job, lock));
    }
    tracing::info!(connection = %rc, "connecting");
    let mut conn = ReplicationConnection::connect(&rc).await?;
    let mut checkpointing = None;
    // The slot as it was before anything is created: a job with a
    // checkpoint must not silently get a new slot, and an invalidated slot
    // is never streamed from.
    let slot_before = slot_state(&mut conn, &source.slot).await?;
    let mut lost = lost_slot::check(&source, slot_before.as_ref())?;
    if let (Some(cc), Some((store, job, lock))) = (&checkpoints, locked) {
        let owner = OwnerId::new(owner_id()).map_err(|e| JobError::Invalid {
            key: "checkpoint.job".into(),
            reason: e.to_string(),
        })?;
        let options = RecoveryOptions {
            job,
            owner,
            from_checkpoint,
            trust_slot: cc.trust_slot,
        };
        let recovered = match lost {
            Some(_) => start_over(&store, &options).await?,
            None => match recover(&store, &source.slot, slot_before.as_ref(), &options).await {
                // Gone while a checkpoint exists (e.g. not synchronized to
                // a promoted standby): lost too, under `resnapshot`.
                Err(RecoveryError::SlotMissing { id, lsn, .. })
                    if source.on_slot_lost == crate::source::OnSlotLost::Resnapshot =>
                {
                    lost = Some(SlotLoss::Missing {
                        checkpoint: id,
                        lsn,
                    });
                    start_over(&store, &options).await?
                }
                r => r?,
            },
        };
        if let Some(cp) = recovered.checkpoint.as_ref().map(|c| &c.checkpoint) {
            if !cp.config_fingerprint.is_empty() && cp.config_fingerprint != fingerprint {
                tracing::info!(checkpoint = %cp.id,
                        "the job's configuration (tables, operators or sinks) changed since this checkpoint was taken");
            }
        }
        if cc.standby {
            // The lease is ours (the old instance is fenced): end its
            // walsender if the server has not noticed it is gone.
            standby::end_old_walsender(&mut conn, slot_before.as_ref()).await?;
        }
        checkpointing = Some((store, lock, recovered, cc));
    }

    if let Some(loss) = &lost {
        lost_slot::start_over(&mut conn, &source.slot, loss, slot_before.is_some()).await?;
    }
    let report = prepare(&mut conn, &source, SetupMode::Create).await?;
    let _ = conn.close().await;

    // Which published tables not recorded as read are read. A restored
    // checkpoint with snapshot progress: those it does not record (tables
    // added since), as the mode allows (an unfinished snapshot always
    // continues). A first start: all of them, as the mode says. Without
    // checkpoints nothing records that a snapshot finished, so the tables
    // are read only with a new slot.
    let read_unrecorded = match checkpointing.as_ref().map(|c| &c.2.checkpoint) {
        // Starting over after a lost slot: every table, whatever the mode.
        _ if lost.is_some() => true,
        Some(Some(cp)) => match &cp.checkpoint.snapshot {
            Some(p) => !p.complete || mode.snapshots(),
            None => {
                if mode.snapshots() {
                    tracing::info!(checkpoint = %cp.checkpoint.id, "the checkpoint records no snapshot: the published tables are taken as they are; tables added from now on are read");
                }
                false
            }
        },
        Some(None) => mode.snapshots(),
        None if mode.snapshots() && !report.created_slot => {
            tracing::info!(slot = %source.slot, "the slot exists and no checkpoint records a snapshot: streaming without one");
            false
        }
        None => mode.snapshots(),
    };
    if mode == StartupMode::SnapshotOnly && !read_unrecorded {
        tracing::info!("snapshot_only: there is no snapshot to take; stopping");
        return Ok(None);
    }
    let snapshot = snapshot_plan(
        &source,
        &snapshot_settings,
        read_unrecorded,
        mode.snapshots(),
    )
    .await?;

    let sink_kinds: Vec<String> = job_sinks.iter().map(|s| s.kind().to_owned()).collect();
    // Debezium's transaction metadata needs the boundary events.
    let transaction_markers = job_sinks.iter().any(|s| match s {
        JobSink::Open(o) => matches!(o.json_format(),
            Some(crate::encoding::JsonFormat::Debezium(d)) if d.provide_transaction_metadata),
        JobSink::Custom(_) => false,
    });
    let mut sinks: Vec<Box<dyn crate::sinks::Sink>> = Vec::with_capacity(job_sinks.len());
    // The job's name and checkpoint interval, for sinks that need them
    // (the NATS sink's message ids and its duplicate window rule).
    let job_name = checkpoints
        .as_ref()
        .and_then(|cc| cc.job.as_ref().map(|j| j.as_str().to_owned()))
        .unwrap_or_else(|| source.slot.clone());
    for s in job_sinks {
        match s {
            JobSink::Custom(sink) => sinks.push(sink),
            JobSink::Open(mut options) => {
                if let crate::sinks::SinkOptions::Nats(nats) = &mut options {
                    if nats.job.is_empty() {
                        nats.job = job_name.clone();
                    }
                    nats.checkpoint_interval = checkpoints.as_ref().map(|cc| cc.interval);
                }
                // One sink at most commits the checkpoints with its writes.
                let store = match sinks.iter().any(|s| s.commits_checkpoints()) {
                    true => None,
                    false => checkpointing.as_ref().map(|c| &c.0),
                };
                sinks.push(
                    open_sink(&options, &source.slot, store)
                        .await
                        .map_err(JobError::Sink)?,
                );
            }
        }
    }

    let mut po = PipelineOptions::new(rc.clone(), &source.slot, &source.publication);
    po.start_lsn = match mode {
        StartupMode::FromLsn if lost.is_none() => snapshot_settings.start_lsn,
        _ => None,
    };
    po.batch_size = tuning.batch_size;
    po.batch_bytes = tuning.batch_bytes;
    po.byte_budget = tuning.byte_budget;
    po.min_flush_interval = tuning.min_flush_interval;
    po.stream_in_progress = tuning.stream_in_progress;
    if let Some(dir) = &tuning.spill_dir {
        po.spill_dir = dir.clone();
    }
    po.status_interval = tuning.status_interval;
    po.channel_capacity = tuning.channel_capacity;
    po.sink_timeout = tuning.sink_timeout;
    po.receive_timeout = source.receive_timeout;
    po.monitor = monitor.clone();
    po.transaction_markers = transaction_markers;
    let slot_watch = monitor.as_ref().map(|m| {
        let kinds: Vec<&str> = sink_kinds.iter().map(String::as_str).collect();
        m.health.set_sinks(&kinds);
        for (i, k) in kinds.iter().enumerate() {
            m.metrics.set_sink(i, k);
        }
        if let Some(cc) = &checkpoints {
            m.health.set_checkpoint_interval(cc.interval);
        }
        let job = checkpoints
            .as_ref()
            .and_then(|cc| cc.job.as_ref().map(|j| j.as_str().to_owned()))
            .unwrap_or_else(|| source.slot.clone());
        m.health.set_names(&job, &source.slot);
        AbortOnDrop(tokio::spawn(slot_watch::watch(
            rc.clone(),
            source.slot.clone(),
            m.metrics.clone(),
        )))
    });

    let mut held = None;
    let mut pipeline = match checkpointing {
        Some((store, lock, recovered, cc)) => {
            held = Some(lock);
            // A restored checkpoint wins over a configured start position.
            if recovered.checkpoint.is_some() {
                po.start_lsn = recovered.start_lsn;
            }
            let copts = CheckpointOptions {
                store: Arc::new(store),
                lease: recovered.lease,
                interval: cc.interval,
                max_bytes: cc.max_bytes,
                keep: cc.keep,
                confirm: cc.confirm,
                retained: recovered.retained,
                resume: recovered.checkpoint.map(|c| c.checkpoint),
                next_id: recovered.next_id,
                config_fingerprint: fingerprint,
            };
            Pipeline::new(po, sinks)
                .with_operators(operators)
                .with_checkpoints(copts)
        }
        None => Pipeline::new(po, sinks).with_operators(operators),
    };
    pipeline = pipeline.with_snapshot(snapshot);
    let heartbeat = source
        .heartbeat_interval
        .filter(|d| !d.is_zero())
        .map(|every| AbortOnDrop(tokio::spawn(heartbeat::beat(rc.clone(), every))));
    Ok(Some(Started {
        pipeline,
        mode,
        created_slot: report.created_slot,
        replication: rc,
        slot: source.slot,
        checkpoints: checkpoints.is_some(),
        status_log_interval: tuning.status_log_interval,
        lock: held,
        _heartbeat: heartbeat,
        _slot_watch: slot_watch,
    }))
}

/// The published tables, read from the source's catalog, and those of
/// them the job's role may not read.
async fn snapshot_plan(
    source: &crate::source::SourceOptions,
    settings: &SnapshotSettings,
    read_unrecorded: bool,
    read_new_tables: bool,
) -> Result<SnapshotPlan, JobError> {
    let rc = &source.replication;
    let client_settings =
        PgClientSettings::new(rc).map_err(|e| SnapshotError::Connect(e.to_string()))?;
    let client = crate::snapshot::connect(&client_settings).await?;
    let tables =
        crate::snapshot::published_tables(&client, std::slice::from_ref(&source.publication))
            .await?;
    let oids: Vec<cdc_core::Oid> = tables.iter().map(|t| t.oid).collect();
    let unreadable = client
        .query(
            "SELECT o FROM unnest($1::oid[]) o WHERE NOT pg_catalog.has_table_privilege(o, 'SELECT')",
            &[&oids],
        )
        .await
        .map_err(SnapshotError::from)?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<Vec<cdc_core::Oid>, _>>()
        .map_err(SnapshotError::from)?;
    let mut plan = SnapshotPlan::new(tables, rc.clone(), settings.options.clone());
    plan.read_unrecorded = read_unrecorded;
    plan.read_new_tables = read_new_tables;
    plan.unreadable = unreadable;
    Ok(plan)
}

/// A checkpoint save refused for a stale epoch is a takeover, reported as
/// such; other pipeline errors pass through.
fn fenced_save(e: PipelineError) -> JobError {
    match e {
        PipelineError::Checkpoint(CheckpointError::Fenced { job, held, current }) => {
            JobError::Fenced {
                job: job.as_str().to_owned(),
                reason: format!(
                    "its checkpoint save under epoch {held} was refused: the job's epoch is {current} now"
                ),
            }
        }
        other => JobError::Pipeline(other),
    }
}

/// Aborts a background task when the job ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Who this process is, as the checkpoint lease records it.
fn owner_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".to_owned());
    format!("pgcdc@{host}:{}", std::process::id())
}
