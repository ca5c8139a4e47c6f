//! The signal table of on-demand snapshots (see [`crate::signal`]).

use super::{rows, SetupError, SetupMode};
use crate::replication::ReplicationConnection;

/// Creates the signal table when it is missing (see [`crate::signal`]). A
/// role that may not create it gets a warning, not an error: streaming
/// works without it.
pub(super) async fn signal_table(
    conn: &mut ReplicationConnection,
    mode: SetupMode,
) -> Result<SignalTable, SetupError> {
    let exists = rows(conn, crate::signal::EXISTS_SQL).await?;
    if exists
        .first()
        .and_then(|r| r.first().cloned().flatten())
        .as_deref()
        == Some("t")
    {
        return Ok(SignalTable::Exists);
    }
    if mode != SetupMode::Create {
        return Ok(SignalTable::Missing);
    }
    match conn.simple_query(crate::signal::SETUP_SQL).await {
        Ok(_) => {
            tracing::info!(
                table = crate::signal::SIGNAL_TABLE,
                "created the signal table (on-demand snapshots: pgcdc snapshot --table ...)"
            );
            Ok(SignalTable::Created)
        }
        Err(e) if e.is_transient() => Err(e.into()),
        Err(e) => {
            // The failed transaction block must end before the next query.
            let _ = conn.simple_query("ROLLBACK").await;
            tracing::warn!(error = %e, "could not create the signal table pgcdc.signals, so on-demand snapshots (pgcdc snapshot) are unavailable; run pgcdc once as a role that may create schemas in this database, or set source.signals = false");
            Ok(SignalTable::Missing)
        }
    }
}

/// Whether the signal table is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SignalTable {
    /// Not wanted (`source.signals = false`).
    #[default]
    Off,
    /// It exists.
    Exists,
    /// Created now (with [`SetupMode::Plan`]: never).
    Created,
    /// It does not exist (and could not be created, or was not to be).
    Missing,
}
