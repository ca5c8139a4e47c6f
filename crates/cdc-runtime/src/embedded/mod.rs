//! Throwaway PostgreSQL clusters from the local server programs.
//!
//! [`EmbeddedCluster::create`] finds `initdb`/`pg_ctl`/`postgres` (version 15+,
//! `PGCDC_PG_BINDIR`, then `PATH` and `/usr/lib/postgresql/*/bin`, newest
//! first), runs `initdb` in a new temp directory, writes [`DEFAULT_SETTINGS`]
//! (`wal_level=logical`, trust authentication on loopback and the unix socket)
//! and starts the server on a free port. When the calling process is root,
//! the programs run as the `postgres` system user ([`RunAs`]). A [`Watchdog`]
//! process stops the server (and removes the directory) if the caller dies
//! without dropping the cluster.
//!
//! `pgcdc quickstart` and the integration-test harness start their servers
//! with it. It is meant for demos and tests: `fsync` is off.
//!
//! ```no_run
//! use cdc_runtime::embedded::{ClusterSpec, EmbeddedCluster};
//!
//! # fn main() -> Result<(), cdc_runtime::embedded::EmbeddedError> {
//! let cluster = EmbeddedCluster::create(&ClusterSpec::new().setting("wal_sender_timeout", "'5s'"))?;
//! println!("{}", cluster.connection_string("postgres"));
//! cluster.kill()?; // a crash; `start()` runs crash recovery
//! cluster.start()?;
//! # Ok(()) }
//! ```

mod binaries;
mod cluster;
mod error;
mod watchdog;

pub use binaries::{parse_major, run_output, PgBinaries, RunAs, MIN_MAJOR};
pub use cluster::{ClusterSpec, EmbeddedCluster, DEFAULT_SETTINGS, SUPERUSER};
pub use error::{EmbeddedError, Result};
pub use watchdog::Watchdog;
