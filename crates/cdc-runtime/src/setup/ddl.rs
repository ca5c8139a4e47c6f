//! DDL capture's event triggers (see [`crate::ddl`]).

use super::{rows, SetupError, SetupMode};
use crate::replication::ReplicationConnection;

/// Installs DDL capture when it is missing or of another version. Asked
/// for explicitly (`capture_ddl = true`), so a role that may not install it
/// is an error that names the fix.
pub(super) async fn ddl_capture(
    conn: &mut ReplicationConnection,
    version: u32,
    mode: SetupMode,
) -> Result<DdlCapture, SetupError> {
    let flag = |rows: Vec<Vec<Option<String>>>| {
        rows.first()
            .and_then(|r| r.first().cloned().flatten())
            .as_deref()
            == Some("t")
    };
    if flag(rows(conn, crate::ddl::EXISTS_SQL).await?) {
        return Ok(DdlCapture::Installed);
    }
    if !flag(rows(conn, crate::ddl::IS_SUPERUSER_SQL).await?) {
        return Err(SetupError::DdlCaptureNeedsSuperuser);
    }
    match mode {
        SetupMode::Create => {}
        SetupMode::Plan => return Ok(DdlCapture::WillInstall),
        SetupMode::CheckOnly => return Err(SetupError::DdlCaptureNeedsSuperuser),
    }
    match conn.simple_query(&crate::ddl::setup_sql(version)).await {
        Ok(_) => {
            tracing::info!(
                "installed DDL capture (event triggers pgcdc_capture_ddl and pgcdc_capture_drop)"
            );
            Ok(DdlCapture::Installed)
        }
        Err(e) => {
            if !e.is_transient() {
                // The failed transaction block must end before the next query.
                let _ = conn.simple_query("ROLLBACK").await;
            }
            Err(e.into())
        }
    }
}

/// DDL capture on the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DdlCapture {
    /// Not wanted (`source.capture_ddl = false`).
    #[default]
    Off,
    /// Installed (now or before).
    Installed,
    /// Would be installed ([`SetupMode::Plan`]).
    WillInstall,
}
