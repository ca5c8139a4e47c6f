//! `[snapshot]`: how a job starts and how the initial snapshot reads.

use serde::Deserialize;

use super::{invalid, ConfigFileError};
use cdc_runtime::snapshot::{
    OnUnreadable, SnapshotOptions, StartupMode, DEFAULT_CHUNK_SIZE, DEFAULT_READERS,
};

/// `mode` as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModeSetting {
    /// Snapshot, then stream.
    Initial,
    /// Stream from the slot's position.
    Latest,
    /// Snapshot, then stop.
    SnapshotOnly,
    /// Stream from `source.start_lsn`.
    FromLsn,
}

impl std::str::FromStr for ModeSetting {
    type Err = ConfigFileError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "initial" => Ok(ModeSetting::Initial),
            "latest" => Ok(ModeSetting::Latest),
            "snapshot_only" => Ok(ModeSetting::SnapshotOnly),
            "from_lsn" => Ok(ModeSetting::FromLsn),
            other => Err(invalid(
                "snapshot.mode",
                format!("{other:?}: use initial, latest, snapshot_only or from_lsn"),
            )),
        }
    }
}

/// `[snapshot]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnapshotConfig {
    /// How the job starts without a checkpoint (default: `initial`, or
    /// `from_lsn` when `source.start_lsn` is set). A checkpoint always wins.
    pub mode: Option<ModeSetting>,
    /// Rows per chunk of a table with a key.
    pub chunk_size: u64,
    /// Chunks read at once, each on its own connection.
    pub readers: usize,
    /// A table that cannot be read (no `SELECT` privilege): `stop` (the
    /// default) or `warn` (go on without its existing rows).
    pub on_unreadable_table: UnreadableSetting,
}

/// `on_unreadable_table` as written in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnreadableSetting {
    /// Stop with an error naming the table and the fix.
    #[default]
    Stop,
    /// Log a warning and go on.
    Warn,
}

impl std::str::FromStr for UnreadableSetting {
    type Err = ConfigFileError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "stop" => Ok(UnreadableSetting::Stop),
            "warn" => Ok(UnreadableSetting::Warn),
            other => Err(invalid(
                "snapshot.on_unreadable_table",
                format!("{other:?}: use stop or warn"),
            )),
        }
    }
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        SnapshotConfig {
            mode: None,
            chunk_size: DEFAULT_CHUNK_SIZE,
            readers: DEFAULT_READERS,
            on_unreadable_table: UnreadableSetting::Stop,
        }
    }
}

impl SnapshotConfig {
    /// The startup mode, given whether `source.start_lsn` is set.
    pub fn startup_mode(&self, has_start_lsn: bool) -> Result<StartupMode, ConfigFileError> {
        let mode = match (self.mode, has_start_lsn) {
            (None, false) | (Some(ModeSetting::Initial), false) => StartupMode::Initial,
            (None, true) | (Some(ModeSetting::FromLsn), true) => StartupMode::FromLsn,
            (Some(ModeSetting::Latest), false) => StartupMode::Latest,
            (Some(ModeSetting::SnapshotOnly), false) => StartupMode::SnapshotOnly,
            (Some(ModeSetting::FromLsn), false) => {
                return Err(invalid("snapshot.mode", "from_lsn needs source.start_lsn"))
            }
            (Some(_), true) => {
                return Err(invalid(
                    "source.start_lsn",
                    "is only used with snapshot.mode = \"from_lsn\"",
                ))
            }
        };
        Ok(mode)
    }

    /// The reader settings.
    pub fn options(&self) -> SnapshotOptions {
        SnapshotOptions {
            chunk_size: self.chunk_size,
            readers: self.readers,
            on_unreadable: match self.on_unreadable_table {
                UnreadableSetting::Stop => OnUnreadable::Stop,
                UnreadableSetting::Warn => OnUnreadable::Warn,
            },
            ..SnapshotOptions::default()
        }
    }

    pub(super) fn check(&self, has_start_lsn: bool) -> Result<(), ConfigFileError> {
        if self.chunk_size == 0 || self.readers == 0 {
            return Err(invalid(
                "snapshot",
                "chunk_size and readers must be positive",
            ));
        }
        self.startup_mode(has_start_lsn).map(|_| ())
    }

    pub(super) fn apply_env(
        &mut self,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigFileError> {
        let var = |key: &str| env(&format!("PGCDC_SNAPSHOT_{}", key.to_ascii_uppercase()));
        if let Some(v) = var("mode") {
            self.mode = Some(v.parse()?);
        }
        if let Some(v) = var("chunk_size") {
            self.chunk_size = v.parse().map_err(|_| {
                invalid(
                    "PGCDC_SNAPSHOT_CHUNK_SIZE",
                    format!("{v:?} is not a number"),
                )
            })?;
        }
        if let Some(v) = var("readers") {
            self.readers = v
                .parse()
                .map_err(|_| invalid("PGCDC_SNAPSHOT_READERS", format!("{v:?} is not a number")))?;
        }
        if let Some(v) = var("on_unreadable_table") {
            self.on_unreadable_table = v.parse()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_defaults_follow_start_lsn_and_conflicts_are_errors() {
        let c = SnapshotConfig::default();
        assert_eq!(c.startup_mode(false).unwrap(), StartupMode::Initial);
        assert_eq!(c.startup_mode(true).unwrap(), StartupMode::FromLsn);
        let latest = SnapshotConfig {
            mode: Some(ModeSetting::Latest),
            ..SnapshotConfig::default()
        };
        assert!(latest.startup_mode(true).is_err());
        let from = SnapshotConfig {
            mode: Some(ModeSetting::FromLsn),
            ..SnapshotConfig::default()
        };
        assert!(from.startup_mode(false).is_err());
        assert!("nope".parse::<ModeSetting>().is_err());
        assert_eq!(
            "snapshot_only".parse::<ModeSetting>().unwrap(),
            ModeSetting::SnapshotOnly
        );
    }

    #[test]
    fn env_overrides_and_zero_sizes_are_refused() {
        let mut c = SnapshotConfig::default();
        let env = |k: &str| match k {
            "PGCDC_SNAPSHOT_MODE" => Some("latest".to_owned()),
            "PGCDC_SNAPSHOT_READERS" => Some("4".to_owned()),
            _ => None,
        };
        c.apply_env(&env).unwrap();
        assert_eq!(c.mode, Some(ModeSetting::Latest));
        assert_eq!(c.readers, 4);
        c.chunk_size = 0;
        assert!(c.check(false).is_err());
    }
}
