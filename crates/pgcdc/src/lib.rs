//! The `pgcdc` command as a library: the `pgcdc.toml` configuration (with
//! `PGCDC_<SECTION>_<KEY>` environment overrides) that builds a
//! [`cdc_runtime::job::Job`], the log set-up, and `pgcdc quickstart`.
//!
//! The binary (`src/main.rs`) is a thin command line over this. Programs
//! that embed pgcdc use [`cdc_runtime`] directly; this crate is for tools
//! that want to read the same configuration files.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let config = pgcdc::config::Config::load("pgcdc.toml".as_ref())?;
//! let progress = pgcdc::run(&config, &pgcdc::RunOptions::default(), async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await?;
//! println!("confirmed {}", progress.confirmed);
//! # Ok(()) }
//! ```
//!
//! # Feature flags
//!
//! - `mimalloc` (default): the binary allocates with mimalloc, returning
//!   freed memory after 10 ms (see [`allocator`]).
// Unsafe only where the allocator is tuned (`allocator`).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod allocator;
pub mod config;
pub mod exit;
pub mod http;
pub mod inspect;
pub mod logging;
pub mod quickstart;
pub mod signal;
pub mod timefmt;

use std::future::Future;

use cdc_runtime::job::JobError;
use cdc_runtime::pipeline::Progress;
use checkpoint_api::CheckpointId;

/// Options of [`run`] beyond the configuration file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Resume from this retained checkpoint instead of the newest.
    pub from_checkpoint: Option<CheckpointId>,
    /// Keep these metrics and health up to date (serve them with
    /// [`http::start`]).
    pub monitor: Option<cdc_runtime::monitor::Monitor>,
    /// Stand by (`pgcdc run --standby`, as `[ha] standby = true`).
    pub standby: bool,
}

/// Runs the job `config` describes until `shutdown` completes, as `pgcdc
/// run` does.
pub async fn run(
    config: &config::Config,
    options: &RunOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<Progress, JobError> {
    use futures_util::future::{FusedFuture, FutureExt};
    let standby;
    let config = if options.standby && !config.ha.standby {
        let mut c = config.clone();
        c.ha.standby = true;
        standby = c;
        &standby
    } else {
        config
    };
    let shutdown = shutdown.fuse();
    futures_util::pin_mut!(shutdown);
    let mut from_checkpoint = options.from_checkpoint;
    let mut restarted: Option<std::time::Instant> = None;
    loop {
        let mut builder = config.job_builder().map_err(config_error)?;
        if let Some(id) = from_checkpoint.take() {
            builder = builder.from_checkpoint(id);
        }
        if let Some(m) = &options.monitor {
            builder = builder.monitor(m.clone());
        }
        match builder.build()?.run(shutdown.as_mut()).await {
            // Lost while streaming: the next start applies on_slot_lost
            // (at most once a minute, so a slot that cannot be re-created
            // does not spin).
            Err(JobError::SlotLost(e))
                if config.source.on_slot_lost == config::SlotLostSetting::Resnapshot
                    && !shutdown.is_terminated()
                    && restarted.is_none_or(|t| t.elapsed() > SLOT_LOST_RESTART_GAP) =>
            {
                tracing::warn!(error = %e, "the replication slot was lost while streaming; starting the job again (source.on_slot_lost = \"resnapshot\")");
                restarted = Some(std::time::Instant::now());
            }
            r => return r,
        }
    }
}

/// The least time between two restarts of a job whose slot was lost while
/// streaming.
const SLOT_LOST_RESTART_GAP: std::time::Duration = std::time::Duration::from_secs(60);

/// A configuration error as the job reports it.
fn config_error(e: config::ConfigFileError) -> JobError {
    match e {
        config::ConfigFileError::Invalid { key, reason, .. } => JobError::Invalid { key, reason },
        other => JobError::Invalid {
            key: "configuration".into(),
            reason: other.to_string(),
        },
    }
}
