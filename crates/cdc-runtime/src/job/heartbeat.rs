//! The optional heartbeat: a logical decoding message written into the
//! source's WAL at an interval, so the slot has something of its own
//! database to confirm when only other databases write. The pipeline drops
//! these messages before the sinks.

use std::time::Duration;

use crate::replication::ReplicationConfig;
use crate::tls_connect::PgClientSettings;

use crate::pipeline::HEARTBEAT_PREFIX;

/// Writes a heartbeat every `interval` until dropped (run it as a task and
/// abort it). Failures are logged and retried at the next beat, over a new
/// connection.
pub(super) async fn beat(source: ReplicationConfig, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut client = None;
    loop {
        ticker.tick().await;
        if client.is_none() {
            client = connect(&source).await;
        }
        let Some(c) = client.as_ref() else {
            continue;
        };
        let sent = c
            .execute(
                "SELECT pg_catalog.pg_logical_emit_message(false, $1, '')",
                &[&HEARTBEAT_PREFIX],
            )
            .await;
        if let Err(e) = sent {
            tracing::warn!(error = %e, "heartbeat failed; retrying at the next one");
            client = None;
        }
    }
}

async fn connect(source: &ReplicationConfig) -> Option<tokio_postgres::Client> {
    let settings = match PgClientSettings::new(source) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "heartbeat: no TLS settings");
            return None;
        }
    };
    match settings.connect("pgcdc heartbeat").await {
        Ok(client) => Some(client),
        Err(e) => {
            tracing::warn!(error = %e, "heartbeat: cannot connect");
            None
        }
    }
}
