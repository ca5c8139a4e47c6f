//! `[ha]`: a hot standby instance.

use std::time::Duration;

use serde::Deserialize;

use super::{env_bool, invalid, ConfigFileError};

/// `[ha]`: run as a standby that takes the job over when the active
/// instance dies or freezes (needs `[checkpoint]`: the lock and the lease
/// live in the checkpoint database).
///
/// ```toml
/// [ha]
/// standby = true               # or `pgcdc run --standby`
/// takeover_after_ms = 60000    # default: 2 × checkpoint.interval_ms
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HaConfig {
    /// Wait for the job's lock without a deadline and take over.
    pub standby: bool,
    /// How long the active instance may stay silent before a standby takes
    /// the job over (milliseconds; default 2 × `checkpoint.interval_ms`).
    pub takeover_after_ms: Option<u64>,
}

impl HaConfig {
    /// The takeover timeout, when set.
    pub fn takeover_after(&self) -> Option<Duration> {
        self.takeover_after_ms.map(Duration::from_millis)
    }

    pub(super) fn apply_env(
        &mut self,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigFileError> {
        if let Some(v) = env("PGCDC_HA_STANDBY") {
            self.standby = env_bool("PGCDC_HA_STANDBY", v)?;
        }
        if let Some(v) = env("PGCDC_HA_TAKEOVER_AFTER_MS") {
            let ms = v.parse().map_err(|_| {
                invalid(
                    "PGCDC_HA_TAKEOVER_AFTER_MS",
                    format!("{v:?} is not a number"),
                )
            })?;
            self.takeover_after_ms = Some(ms);
        }
        Ok(())
    }

    pub(super) fn check(&self, checkpoints: bool) -> Result<(), ConfigFileError> {
        if self.takeover_after_ms == Some(0) {
            return Err(invalid("ha.takeover_after_ms", "must be positive"));
        }
        if self.standby && !checkpoints {
            return Err(invalid(
                "ha.standby",
                "a standby needs [checkpoint]: the job's lock and lease live in the checkpoint database",
            ));
        }
        Ok(())
    }
}
