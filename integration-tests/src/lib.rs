//! End-to-end tests of pgcdc (unpublished).
//!
//! The PostgreSQL servers come from [`throwaway_pg`] (re-exported here, so
//! tests write `integration_tests::TestPostgres`): every test that needs a
//! server calls [`TestPostgres::new_database`]; tests that restart or
//! reconfigure a server own a [`LocalCluster`].
//!
//! End-to-end tests of the `pgcdc` command line run the real binary as a child
//! process: [`pgcdc_binary`], [`run_pgcdc`] and [`Pgcdc`] (`cargo test
//! --workspace` builds it; otherwise `cargo build -p pgcdc --bin pgcdc`).
//!
//! Network faults between pgcdc and a server come from a [`FaultProxy`]
//! (drop connections, blackhole, throttle).
//!
//! The NATS sink's tests run their own `nats-server -js` (or a cluster of
//! three) or share one ([`nats`]).
#![forbid(unsafe_code)]

mod cli;
mod fault_proxy;
pub mod held_commit;
pub mod nats;
mod support;

pub use cli::{pgcdc_binary, run_pgcdc, Pgcdc};
pub use fault_proxy::{FaultProxy, ProxyMode};
pub use support::{kill_and_wait, snapshot_progress, CollectSink, TempDir};
/// The harness's error: [`throwaway_pg::Error`].
pub use throwaway_pg::Error as HarnessError;
pub use throwaway_pg::*;

/// Polls `check` every 25 ms until it yields a value, for server-side
/// conditions that have no notification; panics naming `what` after
/// `timeout`.
pub async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    timeout: std::time::Duration,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}
