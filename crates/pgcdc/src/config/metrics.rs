//! `[metrics]`: where the monitoring endpoint listens.

use serde::Deserialize;

/// `[metrics]`: the HTTP endpoint with `/metrics`, `/healthz`, `/readyz`
/// and the status page.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `host:port` to listen on (default `127.0.0.1:9187`); `""` turns the
    /// endpoint off; port 0 picks a free port (logged); a missing host
    /// means `127.0.0.1`.
    pub listen: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: DEFAULT_METRICS_LISTEN.to_owned(),
        }
    }
}

/// The default `[metrics] listen`.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9187";
