//! For the metrics: how much WAL the server keeps for the slot, read from
//! `pg_replication_slots` at an interval over an ordinary connection.

use std::time::Duration;

use crate::monitor::Metrics;
use crate::replication::ReplicationConfig;
use crate::tls_connect::PgClientSettings;

/// How often the slot's retained WAL is read.
pub(super) const EVERY: Duration = Duration::from_secs(10);

/// Sets `pgcdc_slot_retained_wal_bytes` every [`EVERY`] until dropped (run
/// it as a task and abort it). Failures are logged at debug and retried at
/// the next tick over a new connection.
pub(super) async fn watch(source: ReplicationConfig, slot: String, metrics: Metrics) {
    let mut ticker = tokio::time::interval(EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut client = None;
    loop {
        ticker.tick().await;
        if client.is_none() {
            client = match PgClientSettings::new(&source) {
                Ok(s) => s.connect("pgcdc metrics").await.ok(),
                Err(_) => None,
            };
        }
        let Some(c) = client.as_ref() else {
            continue;
        };
        let read = c
            .query_opt(
                "SELECT (pg_catalog.pg_current_wal_lsn() - restart_lsn)::int8 \
                 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await;
        match read {
            Ok(Some(row)) => {
                if let Ok(Some(bytes)) = row.try_get::<_, Option<i64>>(0) {
                    metrics.slot_retained_wal_bytes.set(bytes);
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, "metrics: cannot read the slot's retained WAL; retrying");
                client = None;
            }
        }
    }
}
