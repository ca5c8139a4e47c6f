//! The monitoring endpoint: `/metrics` (Prometheus), `/healthz`, `/readyz`
//! and the status page at `/`, served by axum from a job's
//! [`Monitor`].
//!
//! It listens on `[metrics] listen` (default `127.0.0.1:9187`, localhost
//! only); `""` turns it off and port 0 picks a free port. Requests are
//! read-only; nothing a client sends reaches the job.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

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
    sampler: tokio::task::JoinHandle<()>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
        self.sampler.abort();
    }
}

/// How often the status page's plots get a point, and how many are kept
/// (15 minutes).
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
const SAMPLES_KEPT: usize = 900;

/// One point of the plots: Unix milliseconds, lag bytes, events/s.
type Sample = (i64, u64, f64);

#[derive(Clone)]
struct AppState {
    monitor: Monitor,
    history: Arc<Mutex<VecDeque<Sample>>>,
}

/// Samples lag and throughput into `history` every [`SAMPLE_EVERY`].
async fn sample(monitor: Monitor, history: Arc<Mutex<VecDeque<Sample>>>) {
    let mut ticker = tokio::time::interval(SAMPLE_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<(Instant, u64)> = None;
    loop {
        ticker.tick().await;
        let now = Instant::now();
        let status = monitor.health.status(now);
        let rate = match last {
            Some((at, events)) => {
                let secs = now.saturating_duration_since(at).as_secs_f64().max(1e-3);
                status.events.saturating_sub(events) as f64 / secs
            }
            None => 0.0,
        };
        last = Some((now, status.events));
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        if let Ok(mut h) = history.lock() {
            if h.len() == SAMPLES_KEPT {
                h.pop_front();
            }
            h.push_back((ms, status.lag_bytes, rate));
        }
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
    let state = AppState {
        monitor: monitor.clone(),
        history: Arc::new(Mutex::new(VecDeque::with_capacity(SAMPLES_KEPT))),
    };
    let sampler = tokio::spawn(sample(monitor, state.history.clone()));
    let app = router(state);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the monitoring endpoint stopped");
        }
    });
    tracing::info!(%addr, "monitoring endpoint: http://{addr}/ (status page), /metrics, /healthz, /readyz");
    Ok(Some(Endpoint {
        addr,
        task,
        sampler,
    }))
}

/// The routes.
fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(status_page))
        .route("/status.json", get(status_json))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn status_json(State(s): State<AppState>) -> Response {
    let status = s.monitor.health.status(Instant::now());
    let history: Vec<Sample> = s
        .history
        .lock()
        .map(|h| h.iter().copied().collect())
        .unwrap_or_default();
    let body = serde_json::json!({ "status": status, "history": history }).to_string();
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

async fn metrics(State(s): State<AppState>) -> Response {
    let m = &s.monitor;
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

async fn readyz(State(s): State<AppState>) -> Response {
    let r = s.monitor.health.readiness(Instant::now());
    let body = serde_json::json!({ "ready": r.ready, "reasons": r.reasons }).to_string();
    let status = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The status page: one self-contained file (styles and script inline,
/// nothing fetched from elsewhere) that polls `/status.json`.
async fn status_page() -> Response {
    (
        [(
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
        )],
        Html(include_str!("status.html")),
    )
        .into_response()
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
