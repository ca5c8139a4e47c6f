//! `PGCDC_<SECTION>_<KEY>` environment overrides.

use super::{env_bool, invalid, Config, ConfigFileError, Secret};

impl Config {
    /// Applies `PGCDC_<SECTION>_<KEY>` overrides looked up with `env`.
    pub fn apply_env(
        &mut self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigFileError> {
        let s = &mut self.source;
        let var = |key: &str| env(&format!("PGCDC_SOURCE_{}", key.to_ascii_uppercase()));
        if let Some(v) = var("host") {
            s.host = v;
        }
        if let Some(v) = var("port") {
            s.port = v
                .parse()
                .map_err(|_| invalid("PGCDC_SOURCE_PORT", format!("{v:?} is not a port")))?;
        }
        if let Some(v) = var("database") {
            s.database = v;
        }
        if let Some(v) = var("user") {
            s.user = v;
        }
        if let Some(v) = var("password") {
            s.password = Some(Secret(v));
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
            s.tables = list(v);
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
        if let Some(v) = var("start_lsn") {
            s.start_lsn = Some(v);
        }
        if let Some(v) = var("heartbeat_interval_ms") {
            s.heartbeat_interval_ms = v.parse().map_err(|_| {
                invalid(
                    "PGCDC_SOURCE_HEARTBEAT_INTERVAL_MS",
                    format!("{v:?} is not a number of milliseconds"),
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
        if let Some(v) = num("byte_budget")? {
            p.byte_budget = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = env("PGCDC_PIPELINE_SPILL_DIR") {
            p.spill_dir = Some(v.into());
        }
        if let Some(v) = num("status_interval_secs")? {
            p.status_interval_secs = v;
        }
        if let Some(v) = num("channel_capacity")? {
            p.channel_capacity = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = num("worker_threads")? {
            p.worker_threads = Some(usize::try_from(v).unwrap_or(usize::MAX));
        }
        if let Some(c) = self.checkpoint.as_mut() {
            c.apply_env(&env)?;
        }
        self.snapshot.apply_env(&env)?;
        Ok(())
    }
}
