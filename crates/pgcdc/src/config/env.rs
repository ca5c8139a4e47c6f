//! `PGCDC_<SECTION>_<KEY>` environment overrides.

use std::fmt;

use super::{env_bool, invalid, Config, ConfigFileError, Secret, TableEntry};

/// Every environment variable [`Config::apply_env`] reads: the one list the
/// reader is checked against (in debug builds, and by a test that records
/// what it reads) and that [`unknown_env_vars`] warns by.
pub const ENV_VARS: &[&str] = &[
    "PGCDC_SOURCE_HOST",
    "PGCDC_SOURCE_PORT",
    "PGCDC_SOURCE_DATABASE",
    "PGCDC_SOURCE_USER",
    "PGCDC_SOURCE_PASSWORD",
    "PGCDC_SOURCE_PASSWORD_FILE",
    "PGCDC_SOURCE_PASSWORD_ENV",
    "PGCDC_SOURCE_SSLMODE",
    "PGCDC_SOURCE_SSLROOTCERT",
    "PGCDC_SOURCE_SCHEMAS",
    "PGCDC_SOURCE_TABLES",
    "PGCDC_SOURCE_SLOT",
    "PGCDC_SOURCE_PUBLICATION",
    "PGCDC_SOURCE_CREATE_SLOT",
    "PGCDC_SOURCE_CREATE_PUBLICATION",
    "PGCDC_SOURCE_FAILOVER_SLOT",
    "PGCDC_SOURCE_START_LSN",
    "PGCDC_SOURCE_HEARTBEAT_INTERVAL_MS",
    "PGCDC_SOURCE_SIGNALS",
    "PGCDC_SOURCE_CAPTURE_DDL",
    "PGCDC_SOURCE_PUBLISH_VIA_PARTITION_ROOT",
    "PGCDC_SOURCE_RECEIVE_TIMEOUT_SECS",
    "PGCDC_SOURCE_ON_SLOT_LOST",
    "PGCDC_PIPELINE_BATCH_SIZE",
    "PGCDC_PIPELINE_BATCH_BYTES",
    "PGCDC_PIPELINE_BYTE_BUDGET",
    "PGCDC_PIPELINE_MIN_FLUSH_INTERVAL_MS",
    "PGCDC_PIPELINE_STREAM_IN_PROGRESS",
    "PGCDC_PIPELINE_SPILL_DIR",
    "PGCDC_PIPELINE_STATUS_INTERVAL_SECS",
    "PGCDC_PIPELINE_STATUS_LOG_INTERVAL_SECS",
    "PGCDC_PIPELINE_CHANNEL_CAPACITY",
    "PGCDC_PIPELINE_WORKER_THREADS",
    "PGCDC_PIPELINE_SINK_TIMEOUT_SECS",
    "PGCDC_METRICS_LISTEN",
    "PGCDC_CHECKPOINT_JOB",
    "PGCDC_CHECKPOINT_URL",
    "PGCDC_CHECKPOINT_INTERVAL_MS",
    "PGCDC_CHECKPOINT_MAX_BYTES",
    "PGCDC_CHECKPOINT_KEEP",
    "PGCDC_CHECKPOINT_CONFIRM",
    "PGCDC_CHECKPOINT_TRUST_SLOT",
    "PGCDC_CHECKPOINT_STORE_TIMEOUT_SECS",
    "PGCDC_SNAPSHOT_MODE",
    "PGCDC_SNAPSHOT_CHUNK_SIZE",
    "PGCDC_SNAPSHOT_READERS",
    "PGCDC_SNAPSHOT_ON_UNREADABLE_TABLE",
    "PGCDC_HA_STANDBY",
    "PGCDC_HA_TAKEOVER_AFTER_MS",
];

/// `PGCDC_*` variables that are not settings: the test harness's, the
/// benchmarks' and the end-to-end scripts' knobs.
const NOT_SETTINGS_PREFIXES: &[&str] = &[
    "PGCDC_TEST_",
    "PGCDC_BENCH_",
    "PGCDC_E2E_",
    "PGCDC_CHILD_",
    "PGCDC_SPILL_CHILD_",
];
const NOT_SETTINGS: &[&str] = &[
    "PGCDC_PG_BINDIR",
    "PGCDC_BLESS",
    "PGCDC_KEEP_TEST_DIRS",
    "PGCDC_HARNESS_CHILD",
];

/// A `PGCDC_*` environment variable that pgcdc does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownEnvVar {
    /// Its name.
    pub name: String,
    /// The nearest setting's variable, when one is close (a typo).
    pub suggestion: Option<&'static str>,
}

impl fmt::Display for UnknownEnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ignoring unknown environment variable {}", self.name)?;
        match self.suggestion {
            Some(s) => write!(f, "; did you mean {s}?"),
            None => f.write_str(
                "; settings are PGCDC_SOURCE_*, PGCDC_PIPELINE_*, PGCDC_CHECKPOINT_* and PGCDC_SNAPSHOT_*",
            ),
        }
    }
}

/// The `PGCDC_*` names among `names` that are not settings ([`ENV_VARS`]),
/// test or benchmark knobs, or `password_env` (the variable the file names
/// for the password), each with the nearest setting when it is within a
/// third of the name's length in edits.
pub fn unknown_env_vars<'a>(
    names: impl IntoIterator<Item = &'a str>,
    password_env: Option<&str>,
) -> Vec<UnknownEnvVar> {
    names
        .into_iter()
        .filter(|n| n.starts_with("PGCDC_"))
        .filter(|n| !ENV_VARS.contains(n) && Some(*n) != password_env)
        .filter(|n| !NOT_SETTINGS.contains(n))
        .filter(|n| !NOT_SETTINGS_PREFIXES.iter().any(|p| n.starts_with(p)))
        .map(|name| {
            let suggestion = ENV_VARS
                .iter()
                .map(|known| (edit_distance(name, known), *known))
                .min()
                .filter(|(d, _)| *d <= name.len() / 3)
                .map(|(_, known)| known);
            UnknownEnvVar {
                name: name.to_owned(),
                suggestion,
            }
        })
        .collect()
}

/// Levenshtein distance (insertions, deletions, substitutions) in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

impl Config {
    /// Applies `PGCDC_<SECTION>_<KEY>` overrides looked up with `env` (only
    /// the names in [`ENV_VARS`]).
    pub fn apply_env(
        &mut self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigFileError> {
        let env = |name: &str| {
            debug_assert!(ENV_VARS.contains(&name), "{name} is missing from ENV_VARS");
            env(name)
        };
        let s = &mut self.source;
        let var = |key: &str| env(&format!("PGCDC_SOURCE_{}", key.to_ascii_uppercase()));
        if let Some(v) = var("host") {
            s.host = v;
        }
        if let Some(v) = var("port") {
            s.port = v.parse().map_err(|e| invalid("PGCDC_SOURCE_PORT", e))?;
        }
        if let Some(v) = var("database") {
            s.database = v;
        }
        if let Some(v) = var("user") {
            s.user = v;
        }
        if let Some(v) = var("password") {
            s.password = Some(Secret::new(v));
            s.password_file = None;
            s.password_env = None;
        }
        if let Some(v) = var("password_file") {
            s.password_file = Some(v.into());
        }
        if let Some(v) = var("password_env") {
            s.password_env = Some(v);
        }
        if let Some(v) = var("sslmode") {
            s.sslmode = Some(v);
        }
        if let Some(v) = var("sslrootcert") {
            s.sslrootcert = Some(v);
        }
        let list = |v: String| -> Vec<String> {
            v.split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(str::to_owned)
                .collect()
        };
        if let Some(v) = var("schemas") {
            s.schemas = list(v);
        }
        if let Some(v) = var("tables") {
            s.tables = list(v).into_iter().map(TableEntry::from).collect();
        }
        if let Some(v) = var("slot") {
            s.slot = v;
        }
        if let Some(v) = var("publication") {
            s.publication = v;
        }
        if let Some(v) = var("create_slot") {
            s.create_slot = env_bool("PGCDC_SOURCE_CREATE_SLOT", v)?;
        }
        if let Some(v) = var("create_publication") {
            s.create_publication = env_bool("PGCDC_SOURCE_CREATE_PUBLICATION", v)?;
        }
        if let Some(v) = var("failover_slot") {
            s.failover_slot = Some(env_bool("PGCDC_SOURCE_FAILOVER_SLOT", v)?);
        }
        if let Some(v) = var("start_lsn") {
            s.start_lsn = Some(v);
        }
        if let Some(v) = var("signals") {
            s.signals = env_bool("PGCDC_SOURCE_SIGNALS", v)?;
        }
        if let Some(v) = var("capture_ddl") {
            s.capture_ddl = env_bool("PGCDC_SOURCE_CAPTURE_DDL", v)?;
        }
        if let Some(v) = var("publish_via_partition_root") {
            s.publish_via_partition_root = env_bool("PGCDC_SOURCE_PUBLISH_VIA_PARTITION_ROOT", v)?;
        }
        if let Some(v) = var("on_slot_lost") {
            s.on_slot_lost = v.parse()?;
        }
        if let Some(v) = var("heartbeat_interval_ms") {
            s.heartbeat_interval_ms = v.parse().map_err(|_| {
                invalid(
                    "PGCDC_SOURCE_HEARTBEAT_INTERVAL_MS",
                    format!("{v:?} is not a number of milliseconds"),
                )
            })?;
        }
        if let Some(v) = var("receive_timeout_secs") {
            s.receive_timeout_secs = v.parse().map_err(|_| {
                invalid(
                    "PGCDC_SOURCE_RECEIVE_TIMEOUT_SECS",
                    format!("{v:?} is not a number of seconds"),
                )
            })?;
        }
        let p = &mut self.pipeline;
        let num = |key: &str| -> Result<Option<u64>, ConfigFileError> {
            let name = format!("PGCDC_PIPELINE_{}", key.to_ascii_uppercase());
            match env(&name) {
                None => Ok(None),
                Some(v) => v
                    .parse()
                    .map(Some)
                    .map_err(|_| invalid(name, format!("{v:?} is not a number"))),
            }
        };
        if let Some(v) = num("batch_size")? {
            p.batch_size = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = num("batch_bytes")? {
            p.batch_bytes = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = num("byte_budget")? {
            p.byte_budget = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = num("min_flush_interval_ms")? {
            p.min_flush_interval_ms = v;
        }
        if let Some(v) = env("PGCDC_PIPELINE_STREAM_IN_PROGRESS") {
            p.stream_in_progress = env_bool("PGCDC_PIPELINE_STREAM_IN_PROGRESS", v)?;
        }
        if let Some(v) = env("PGCDC_PIPELINE_SPILL_DIR") {
            p.spill_dir = Some(v.into());
        }
        if let Some(v) = num("status_interval_secs")? {
            p.status_interval_secs = v;
        }
        if let Some(v) = num("status_log_interval_secs")? {
            p.status_log_interval_secs = v;
        }
        if let Some(v) = num("channel_capacity")? {
            p.channel_capacity = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = num("sink_timeout_secs")? {
            p.sink_timeout_secs = v;
        }
        if let Some(v) = num("worker_threads")? {
            p.worker_threads = Some(usize::try_from(v).unwrap_or(usize::MAX));
        }
        if let Some(v) = env("PGCDC_METRICS_LISTEN") {
            self.metrics.listen = v;
        }
        if let Some(c) = self.checkpoint.as_mut() {
            c.apply_env(&env)?;
        }
        self.snapshot.apply_env(&env)?;
        self.ha.apply_env(&env)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_reader_reads_exactly_the_listed_variables() {
        let mut c = Config::parse(
            "[source]\ndatabase = \"d\"\nuser = \"u\"\nslot = \"s\"\npublication = \"p\"\n\
             [checkpoint]\n[[sinks]]\ntype = \"null\"\n",
        )
        .unwrap();
        let asked = RefCell::new(BTreeSet::new());
        c.apply_env(|name| {
            asked.borrow_mut().insert(name.to_owned());
            None
        })
        .unwrap();
        let listed: BTreeSet<String> = ENV_VARS.iter().map(|s| s.to_string()).collect();
        assert_eq!(asked.into_inner(), listed);
    }

    #[test]
    fn unknown_variables_are_named_with_the_nearest_setting() {
        let names = [
            "PGCDC_SOURCE_PASWORD",
            "PGCDC_SOURCE_HOST",
            "PGCDC_PIPELINE_BATCHSIZE",
            "PGCDC_SORCE_HOST",
            "PGCDC_WHATEVER",
            "PGCDC_TEST_DATABASE_URL",
            "PGCDC_PG_BINDIR",
            "PGCDC_BENCH_REPS",
            "PGCDC_MY_DB_PASSWORD",
            "HOME",
        ];
        let unknown = unknown_env_vars(names, Some("PGCDC_MY_DB_PASSWORD"));
        let got: Vec<(&str, Option<&str>)> = unknown
            .iter()
            .map(|u| (u.name.as_str(), u.suggestion))
            .collect();
        assert_eq!(
            got,
            [
                ("PGCDC_SOURCE_PASWORD", Some("PGCDC_SOURCE_PASSWORD")),
                (
                    "PGCDC_PIPELINE_BATCHSIZE",
                    Some("PGCDC_PIPELINE_BATCH_SIZE")
                ),
                ("PGCDC_SORCE_HOST", Some("PGCDC_SOURCE_HOST")),
                ("PGCDC_WHATEVER", None),
            ]
        );
        assert_eq!(
            unknown[0].to_string(),
            "ignoring unknown environment variable PGCDC_SOURCE_PASWORD; did you mean PGCDC_SOURCE_PASSWORD?"
        );
        assert!(unknown[3].to_string().contains("PGCDC_SOURCE_*"));
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("PASWORD", "PASSWORD"), 1);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
