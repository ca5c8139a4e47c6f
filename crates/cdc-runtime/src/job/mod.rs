//! A whole job as `pgcdc run` runs it: check the server, take the job's
//! lock and lease, recover from the newest checkpoint, open the sinks and
//! operators, and stream until shutdown.
//!
//! ```no_run
//! use cdc_runtime::config::Config;
//! use cdc_runtime::job::{run, RunOptions};
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::load("pgcdc.toml".as_ref())?;
//! let progress = run(&config, &RunOptions::default(), async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await?;
//! println!("confirmed {}", progress.confirmed);
//! # Ok(()) }
//! ```

mod heartbeat;
mod lock;
mod store;

use std::future::Future;
use std::sync::Arc;

use checkpoint_api::{CheckpointError, CheckpointId, JobName, OwnerId};

use crate::checkpoint::{
    recover, slot_state, CheckpointOptions, ConfirmPolicy, RecoveryError, RecoveryOptions,
};
use crate::config::{Config, ConfigFileError};
use crate::pipeline::{Pipeline, PipelineError, PipelineOptions, Progress};
use crate::replication::{ReplicationConnection, ReplicationError};
use crate::setup::{prepare, SetupError, SetupMode};
use crate::sinks::open_sink;
use crate::snapshot::{SnapshotError, SnapshotPlan, SnapshotState, StartupMode};
use crate::tls_connect::PgClientSettings;

pub use lock::{JobLock, LockError, LOCK_WAIT};
pub use store::{open_store, store_connection};

/// Options of [`run`] beyond the configuration file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Resume from this retained checkpoint instead of the newest.
    pub from_checkpoint: Option<CheckpointId>,
}

/// Why a job stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigFileError),
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
}

/// Runs the job `config` describes until `shutdown` completes (then: final
/// checkpoint, clean end of the stream) or a definite error.
pub async fn run(
    config: &Config,
    options: &RunOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<Progress, JobError> {
    let source = &config.source;
    let mode = config.startup_mode()?;
    let rc = source.replication_config()?;
    tracing::info!(connection = %rc, "connecting");
    let mut conn = ReplicationConnection::connect(&rc).await?;
    // The slot as it was before anything is created: a job with a
    // checkpoint must not silently get a new slot.
    let slot_before = slot_state(&mut conn, &source.slot).await?;

    let mut checkpointing = None;
    if let Some(cc) = &config.checkpoint {
        let store = open_store(config, cc).await?;
        let job = JobName::new(cc.job_name(source)).map_err(|e| ConfigFileError::Invalid {
            key: "checkpoint.job".into(),
            reason: e.to_string(),
        })?;
        let lock = JobLock::acquire(store.pool(), job.as_str()).await?;
        let owner = OwnerId::new(owner_id()).map_err(|e| ConfigFileError::Invalid {
            key: "checkpoint.job".into(),
            reason: e.to_string(),
        })?;
        let recovered = recover(
            &store,
            &source.slot,
            slot_before.as_ref(),
            &RecoveryOptions {
                job,
                owner,
                from_checkpoint: options.from_checkpoint,
                trust_slot: cc.trust_slot,
            },
        )
        .await?;
        checkpointing = Some((store, lock, recovered, cc));
    } else if options.from_checkpoint.is_some() {
        return Err(ConfigFileError::Invalid {
            key: "--from-checkpoint".into(),
            reason: "the configuration has no [checkpoint] section".into(),
        }
        .into());
    }

    let report = prepare(&mut conn, source, SetupMode::Create).await?;
    let _ = conn.close().await;

    // A restored checkpoint decides: continue its snapshot if unfinished.
    // Otherwise the mode does; without checkpoints nothing records that a
    // snapshot finished, so it is taken only with a new slot.
    let snapshot_wanted = match checkpointing.as_ref().map(|c| &c.2.checkpoint) {
        Some(Some(cp)) => cp.checkpoint.snapshot.as_ref().is_some_and(|p| !p.complete),
        Some(None) => mode.snapshots(),
        None if mode.snapshots() && !report.created_slot => {
            tracing::info!(slot = %source.slot, "the slot exists and no checkpoint records a snapshot: streaming without one");
            false
        }
        None => mode.snapshots(),
    };
    let snapshot = if snapshot_wanted {
        Some(snapshot_plan(config, &rc).await?)
    } else {
        None
    };
    if mode == StartupMode::SnapshotOnly && snapshot.is_none() {
        tracing::info!("snapshot_only: there is no snapshot to take; stopping");
        return Ok(Progress::default());
    }

    let mut sinks: Vec<Box<dyn crate::sinks::Sink>> = Vec::with_capacity(config.sinks.len());
    for s in &config.sinks {
        // One sink at most commits the checkpoints with its writes.
        let store = match sinks.iter().any(|s| s.commits_checkpoints()) {
            true => None,
            false => checkpointing.as_ref().map(|c| &c.0),
        };
        sinks.push(
            open_sink(s, &source.slot, store)
                .await
                .map_err(JobError::Sink)?,
        );
    }
    let operators = config
        .operators
        .iter()
        .map(|o| o.build())
        .collect::<Result<Vec<_>, _>>()?;

    let mut po = PipelineOptions::new(rc.clone(), &source.slot, &source.publication);
    po.start_lsn = match mode {
        StartupMode::FromLsn => config.start_lsn()?,
        _ => None,
    };
    po.batch_size = config.pipeline.batch_size;
    po.byte_budget = config.pipeline.byte_budget;
    if let Some(dir) = &config.pipeline.spill_dir {
        po.spill_dir = dir.clone();
    }
    po.status_interval = config.status_interval();
    po.channel_capacity = config.pipeline.channel_capacity;

    let mut _lock = None;
    let mut pipeline = match checkpointing {
        Some((store, lock, recovered, cc)) => {
            _lock = Some(lock);
            // A restored checkpoint wins over a configured start position.
            if recovered.checkpoint.is_some() {
                po.start_lsn = recovered.start_lsn;
            }
            let confirm: ConfirmPolicy = cc.confirm.into();
            let copts = CheckpointOptions {
                store: Arc::new(store),
                lease: recovered.lease,
                interval: cc.interval(),
                max_bytes: cc.max_bytes,
                keep: cc.keep,
                confirm,
                retained: recovered.retained,
                resume: recovered.checkpoint.map(|c| c.checkpoint),
                next_id: recovered.next_id,
                config_fingerprint: bytes::Bytes::new(),
            };
            Pipeline::new(po, sinks)
                .with_operators(operators)
                .with_checkpoints(copts)
        }
        None => Pipeline::new(po, sinks).with_operators(operators),
    };
    if let Some(plan) = snapshot {
        pipeline = pipeline.with_snapshot(plan);
    }
    let _heartbeat = (source.heartbeat_interval_ms > 0).then(|| {
        AbortOnDrop(tokio::spawn(heartbeat::beat(
            rc.clone(),
            std::time::Duration::from_millis(source.heartbeat_interval_ms),
        )))
    });
    let progress = if mode == StartupMode::SnapshotOnly {
        // Stop once the snapshot is complete (the final checkpoint records it).
        let mut watch = pipeline.progress();
        let done = async move {
            let _ = watch
                .wait_for(|p| p.snapshot == SnapshotState::Complete)
                .await;
        };
        let progress = pipeline
            .run(async {
                tokio::select! {
                    _ = shutdown => {}
                    _ = done => tracing::info!("snapshot_only: the snapshot is complete; stopping"),
                }
            })
            .await?;
        if progress.snapshot == SnapshotState::Complete && report.created_slot {
            let mut conn = ReplicationConnection::connect(&rc).await?;
            conn.drop_replication_slot(&source.slot, true).await?;
            let _ = conn.close().await;
            tracing::info!(slot = %source.slot, "snapshot_only: dropped the slot created for it");
        }
        progress
    } else {
        pipeline.run(shutdown).await?
    };
    if progress.snapshot == SnapshotState::Running && config.checkpoint.is_none() {
        tracing::warn!(slot = %source.slot,
            "the initial snapshot did not finish, and without a [checkpoint] section nothing records how far it got: the next start streams without it. Drop the slot to take the snapshot again, or configure [checkpoint] so a snapshot resumes");
    }
    tracing::info!(confirmed = %progress.confirmed, events = progress.events,
        reconnects = progress.reconnects, checkpoints = progress.checkpoints.saved, "stopped cleanly");
    Ok(progress)
}

/// The published tables, read from the source's catalog.
async fn snapshot_plan(
    config: &Config,
    rc: &crate::replication::ReplicationConfig,
) -> Result<SnapshotPlan, JobError> {
    let settings = PgClientSettings::new(rc).map_err(|e| SnapshotError::Connect(e.to_string()))?;
    let client = crate::snapshot::connect(&settings).await?;
    let tables = crate::snapshot::published_tables(
        &client,
        std::slice::from_ref(&config.source.publication),
    )
    .await?;
    Ok(SnapshotPlan {
        tables,
        replication: rc.clone(),
        options: config.snapshot.options(),
    })
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
