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
//! - `mimalloc` (default): the binary allocates with mimalloc.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

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
    let standby;
    let config = if options.standby && !config.ha.standby {
        let mut c = config.clone();
        c.ha.standby = true;
        standby = c;
        &standby
    } else {
        config
    };
    let mut builder = config.job_builder().map_err(config_error)?;
    if let Some(id) = options.from_checkpoint {
        builder = builder.from_checkpoint(id);
    }
    if let Some(m) = &options.monitor {
        builder = builder.monitor(m.clone());
    }
    builder.build()?.run(shutdown).await
}

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
