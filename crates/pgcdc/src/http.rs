//! The monitoring endpoint: `/metrics` (Prometheus), `/healthz`, `/readyz`
//! and the status page at `/`, served by axum from a job's
//! [`Monitor`](cdc_runtime::monitor::Monitor).
//!
//! It listens on `[metrics] listen` (default `127.0.0.1:9187`, localhost
//! only); `""` turns it off and port 0 picks a free port. Requests are
//! read-only; nothing a client sends reaches the job.

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use cdc_runtime::monitor::Monitor;
use tokio::net::TcpListener;

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// `listen` is not `host:port`.
    #[error("metrics.listen = {listen:?} is not host:port (e.g. \"127.0.0.1:9187\", \":0\" for any free port, \"\" for off)")]
    Address {
        /// The setting.
        listen: String,
    },
    /// The address is taken or not ours.
    #[error("metrics.listen = {listen:?}: cannot listen on {addr}: {source}; choose another port in [metrics] listen (\":0\" picks a free one) or set it to \"\" to turn the endpoint off")]
    Bind {
        /// The setting.
        listen: String,
        /// The address tried.
        addr: SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
}

/// A running endpoint; dropping it stops it.
#[derive(Debug)]
pub struct Endpoint {
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The address `listen` names (`None`: off).
pub fn parse_listen(listen: &str) -> Result<Option<SocketAddr>, HttpError> {
    let listen_t = listen.trim();
    if listen_t.is_empty() {
        return Ok(None);
    }
    let full = if listen_t.starts_with(':') {
        format!("127.0.0.1{listen_t}")
    } else {
        listen_t.to_owned()
    };
    let full = full.replace("localhost:", "127.0.0.1:");
    full.parse().map(Some).map_err(|_| HttpError::Address {
        listen: listen.to_owned(),
    })
}

/// Starts serving `monitor` on `listen` (`None` when turned off). The
/// address is bound before this returns, so a taken port is an error here.
pub async fn start(listen: &str, monitor: Monitor) -> Result<Option<Endpoint>, HttpError> {
    let Some(addr) = parse_listen(listen)? else {
        return Ok(None);
    };
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind {
            listen: listen.to_owned(),
            addr,
            source,
        })?;
    let addr = listener.local_addr().unwrap_or(addr);
    let app = router(monitor);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the monitoring endpoint stopped");
        }
    });
    tracing::info!(%addr, "monitoring endpoint: http://{addr}/ (status page), /metrics, /healthz, /readyz");
    Ok(Some(Endpoint { addr, task }))
}

/// The routes.
pub fn router(monitor: Monitor) -> Router {
    Router::new()
        .route("/", get(status_page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(monitor)
}

async fn metrics(State(m): State<Monitor>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.metrics.encode(),
    )
        .into_response()
}

async fn healthz() -> Response {
    (StatusCode::OK, "ok\n").into_response()
}

async fn readyz(State(m): State<Monitor>) -> Response {
    let r = m.health.readiness(Instant::now());
    let body = serde_json::json!({ "ready": r.ready, "reasons": r.reasons }).to_string();
    let status = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn status_page() -> Html<&'static str> {
    Html(include_str!("status.html"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn listen_settings() {
        assert_eq!(parse_listen("").unwrap(), None);
        assert_eq!(
            parse_listen(":0").unwrap(),
            Some("127.0.0.1:0".parse().unwrap())
        );
        assert_eq!(
            parse_listen("localhost:9187").unwrap(),
            Some("127.0.0.1:9187".parse().unwrap())
        );
        assert_eq!(
            parse_listen("0.0.0.0:9187").unwrap(),
            Some("0.0.0.0:9187".parse().unwrap())
        );
        assert!(matches!(
            parse_listen("nine"),
            Err(HttpError::Address { .. })
        ));
    }

    #[tokio::test]
    async fn a_taken_port_names_the_setting() {
        let first = start(":0", Monitor::new()).await.unwrap().unwrap();
        let taken = format!("127.0.0.1:{}", first.addr.port());
        let err = start(&taken, Monitor::new()).await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("metrics.listen") && text.contains(&taken),
            "{text}"
        );
    }
}
