//! The shared test server: one per test process, started lazily, with a
//! fresh database per test (see the crate docs for where it comes from).

use crate::conn::{ConnectionInfo, TestDatabase};
use crate::error::{Error, Result};
use crate::local::{self, ClusterOptions, LocalCluster};
use crate::{docker, SUPERUSER};
use tokio::sync::OnceCell;

/// Which kind of server backs a [`TestPostgres`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// A throwaway cluster from local server binaries.
    Local,
    /// A testcontainers `postgres` container.
    Docker,
    /// An existing server from `PGCDC_TEST_DATABASE_URL`.
    External,
}

#[derive(Debug)]
enum Backend {
    Local(LocalCluster),
    #[cfg(feature = "docker")]
    Docker(Box<docker::DockerServer>),
    External,
}

/// A PostgreSQL server for tests (see the [crate docs](crate) for where it comes from).
#[derive(Debug)]
pub struct TestPostgres {
    backend: Backend,
    admin: ConnectionInfo,
    server_version_num: u32,
}

static SHARED: OnceCell<std::result::Result<TestPostgres, String>> = OnceCell::const_new();

impl TestPostgres {
    /// The server shared by all tests of this process, started on first use.
    ///
    /// If starting it fails, every caller gets the same error (it is not retried).
    pub async fn shared() -> Result<&'static TestPostgres> {
        let shared = SHARED
            .get_or_init(|| async { TestPostgres::start().await.map_err(|e| e.to_string()) })
            .await;
        shared
            .as_ref()
            .map_err(|e| Error::SharedUnavailable(e.clone()))
    }

    /// A fresh database on the [shared](Self::shared) server.
    pub async fn new_database() -> Result<TestDatabase> {
        Self::shared().await?.create_database().await
    }

    /// A dedicated cluster from local binaries with extra configuration, owned
    /// by the caller (stop/start/restart are allowed on it).
    pub async fn dedicated(options: ClusterOptions) -> Result<LocalCluster> {
        LocalCluster::create(options).await
    }

    /// Starts (or connects to) a server as chosen by the environment.
    async fn start() -> Result<TestPostgres> {
        Self::start_any().await.map_err(|e| match e {
            Error::NoServer { reason } => Error::NoServer {
                reason: format!(
                    "{reason} (tests can also use Docker, when a daemon answers, or a server \
                     with wal_level=logical named by PGCDC_TEST_DATABASE_URL)"
                ),
            },
            other => other,
        })
    }

    async fn start_any() -> Result<TestPostgres> {
        let choice = std::env::var("PGCDC_TEST_BACKEND").unwrap_or_default();
        let url = std::env::var("PGCDC_TEST_DATABASE_URL")
            .ok()
            .filter(|u| !u.is_empty());
        let backend = match (choice.as_str(), url) {
            ("url", None) => {
                return Err(Error::NoServer {
                    reason: "PGCDC_TEST_BACKEND=url but PGCDC_TEST_DATABASE_URL is not set"
                        .to_owned(),
                })
            }
            ("url", Some(url)) | ("" | "auto", Some(url)) => {
                return Self::finish(Backend::External, external_admin(&url)?).await
            }
            ("docker", _) => Self::start_docker().await?,
            ("local", _) => Backend::Local(LocalCluster::create(ClusterOptions::new()).await?),
            ("" | "auto", None) => {
                if cfg!(feature = "docker") && docker::docker_reachable() {
                    Self::start_docker().await?
                } else {
                    match LocalCluster::create(ClusterOptions::new()).await {
                        Ok(c) => Backend::Local(c),
                        Err(Error::NoServer { reason }) => {
                            return Err(Error::NoServer {
                                reason: format!("{reason}; Docker is not reachable"),
                            })
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            (other, _) => {
                return Err(Error::Config(format!(
                    "PGCDC_TEST_BACKEND={other:?}: expected url, docker, local or auto"
                )))
            }
        };
        let admin = match &backend {
            Backend::Local(c) => c.admin(),
            #[cfg(feature = "docker")]
            Backend::Docker(d) => d.admin.clone(),
            Backend::External => return Err(Error::Task("external backend without a URL".into())),
        };
        Self::finish(backend, admin).await
    }

    #[cfg(feature = "docker")]
    async fn start_docker() -> Result<Backend> {
        let server = tokio::task::spawn_blocking(docker::DockerServer::start)
            .await
            .map_err(|e| Error::Task(e.to_string()))??;
        Ok(Backend::Docker(Box::new(server)))
    }

    #[cfg(not(feature = "docker"))]
    async fn start_docker() -> Result<Backend> {
        Err(Error::Unsupported {
            backend: "docker",
            what: "this build has no `docker` feature",
        })
    }

    /// Checks the server is usable for logical replication tests.
    async fn finish(backend: Backend, admin: ConnectionInfo) -> Result<TestPostgres> {
        let client = admin.connect().await?;
        let row = client
            .query_one(
                "SELECT current_setting('wal_level'), current_setting('server_version_num')::int4",
                &[],
            )
            .await
            .map_err(|e| Error::pg("read server settings", e))?;
        let wal_level: String = row.get(0);
        let version: i32 = row.get(1);
        if wal_level != "logical" {
            return Err(Error::Unsuitable(format!(
                "{} has wal_level={wal_level}; logical decoding needs wal_level=logical",
                admin.describe()
            )));
        }
        let server_version_num = u32::try_from(version).unwrap_or(0);
        if server_version_num < crate::MIN_MAJOR * 10_000 {
            return Err(Error::Unsuitable(format!(
                "{} runs server_version_num {version}; pgcdc tests need PostgreSQL {}+",
                admin.describe(),
                crate::MIN_MAJOR
            )));
        }
        Ok(TestPostgres {
            backend,
            admin,
            server_version_num,
        })
    }

    /// Creates a fresh, uniquely named database on this server.
    pub async fn create_database(&self) -> Result<TestDatabase> {
        local::create_database(&self.admin).await
    }

    /// Superuser connection parameters for the `postgres` (or URL's) database.
    pub fn admin(&self) -> &ConnectionInfo {
        &self.admin
    }

    /// Which kind of server this is.
    pub fn backend(&self) -> BackendKind {
        match &self.backend {
            Backend::Local(_) => BackendKind::Local,
            #[cfg(feature = "docker")]
            Backend::Docker(_) => BackendKind::Docker,
            Backend::External => BackendKind::External,
        }
    }

    /// The local cluster behind this server, if it is one (to read its log or
    /// data dir; do not restart the shared server, other tests use it).
    pub fn local_cluster(&self) -> Option<&LocalCluster> {
        match &self.backend {
            Backend::Local(c) => Some(c),
            _ => None,
        }
    }

    /// `server_version_num`, e.g. `150013`.
    pub fn server_version_num(&self) -> u32 {
        self.server_version_num
    }

    /// Major version, e.g. `15`.
    pub fn major_version(&self) -> u32 {
        self.server_version_num / 10_000
    }
}

/// Connection parameters from `PGCDC_TEST_DATABASE_URL`.
fn external_admin(url: &str) -> Result<ConnectionInfo> {
    let config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| Error::Config(format!("PGCDC_TEST_DATABASE_URL: {e}")))?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_owned(),
    };
    let user = config.get_user().unwrap_or(SUPERUSER).to_owned();
    let password = match config.get_password() {
        Some(p) => Some(String::from_utf8(p.to_vec()).map_err(|_| {
            Error::Config("PGCDC_TEST_DATABASE_URL: password is not UTF-8".to_owned())
        })?),
        None => None,
    };
    Ok(ConnectionInfo {
        host,
        port: config.get_ports().first().copied().unwrap_or(5432),
        dbname: config.get_dbname().unwrap_or(&user).to_owned(),
        user,
        password,
        socket_dir: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_external_urls() {
        let info = external_admin("postgres://alice:pw@db.example:6543/main").unwrap();
        assert_eq!(info.host(), "db.example");
        assert_eq!(info.port(), 6543);
        assert_eq!(info.user(), "alice");
        assert_eq!(info.password(), Some("pw"));
        assert_eq!(info.dbname(), "main");

        let info = external_admin("host=127.0.0.1 user=bob").unwrap();
        assert_eq!(info.port(), 5432);
        assert_eq!(info.dbname(), "bob");
        assert_eq!(info.password(), None);

        assert!(matches!(
            external_admin("postgres://[bad"),
            Err(Error::Config(_))
        ));
    }
}
