//! The sink's server session: which backend serves it, and ending the
//! previous one for sure before a reset replays.

use tokio_postgres::Client;

use crate::sinks::SinkError;

/// The server process serving `client`, if it answers.
pub(super) async fn backend_pid(client: &Client) -> Option<i32> {
    let row = client
        .query_one("SELECT pg_catalog.pg_backend_pid()", &[])
        .await
        .ok()?;
    row.try_get(0).ok()
}

/// Ends the server session `pid` (the sink's previous connection) and waits
/// up to [`END_SESSION_WAIT`] until it has exited. Fails (transiently) when
/// it is still there, so the reset is retried rather than replaying beside
/// a session that may yet commit.
pub(super) async fn end_session(client: &Client, pid: i32) -> Result<(), SinkError> {
    let millis = i64::try_from(END_SESSION_WAIT.as_millis()).unwrap_or(i64::MAX);
    // `pg_terminate_backend` waits for the exit when given a timeout; it
    // returns false with a WARNING when the session outlives it. A session
    // that is already gone makes it warn and return false too, so ask
    // whether it is still there.
    let _ = client
        .query_opt(
            "SELECT pg_catalog.pg_terminate_backend($1, $2) \
             FROM pg_catalog.pg_stat_activity WHERE pid = $1",
            &[&pid, &millis],
        )
        .await?;
    let alive = client
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = $1",
            &[&pid],
        )
        .await?
        .is_some();
    if alive {
        return Err(SinkError::Timeout {
            what: "ending the previous target session before replaying",
            after: END_SESSION_WAIT,
        });
    }
    Ok(())
}

/// How long [`Sink::reset`](crate::sinks::Sink::reset) waits for the previous session to exit.
const END_SESSION_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
