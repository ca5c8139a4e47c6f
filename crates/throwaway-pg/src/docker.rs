//! The Docker backend: a `postgres` container started with testcontainers.

use std::io::{Read, Write};
use std::time::Duration;

/// Whether a Docker daemon answers `GET /_ping` within a second or two.
///
/// Looks at `DOCKER_HOST` (`unix://` or `tcp://`) or `/var/run/docker.sock`.
pub(crate) fn docker_reachable() -> bool {
    let host = std::env::var("DOCKER_HOST").unwrap_or_default();
    let timeout = Duration::from_secs(2);
    let request = b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n";
    let mut response = [0u8; 16];
    if let Some(addr) = host.strip_prefix("tcp://") {
        let Ok(addrs) = std::net::ToSocketAddrs::to_socket_addrs(addr) else {
            return false;
        };
        for a in addrs {
            if let Ok(mut s) = std::net::TcpStream::connect_timeout(&a, timeout) {
                let _ = s.set_read_timeout(Some(timeout));
                let _ = s.set_write_timeout(Some(timeout));
                if s.write_all(request).is_ok() && s.read_exact(&mut response).is_ok() {
                    return is_ok_response(&response);
                }
            }
        }
        return false;
    }
    let path = host
        .strip_prefix("unix://")
        .filter(|p| !p.is_empty())
        .unwrap_or("/var/run/docker.sock");
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(path) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    s.write_all(request).is_ok() && s.read_exact(&mut response).is_ok() && is_ok_response(&response)
}

fn is_ok_response(head: &[u8]) -> bool {
    head.starts_with(b"HTTP/1.") && head.get(9..12) == Some(b"200".as_slice())
}

#[cfg(feature = "docker")]
pub(crate) use imp::DockerServer;

#[cfg(feature = "docker")]
mod imp {
    use super::*;
    use crate::conn::ConnectionInfo;
    use crate::error::{Error, Result};
    use crate::Watchdog;
    use testcontainers::runners::SyncRunner;
    use testcontainers::{Container, ImageExt};
    use testcontainers_modules::postgres::Postgres;

    /// Image tag used unless `PGCDC_TEST_DOCKER_TAG` says otherwise.
    pub(crate) const DEFAULT_TAG: &str = "16-alpine";

    /// A running container; removed when dropped, or by the watchdog when the
    /// test process ends (testcontainers 0.27 has no reaper of its own).
    pub(crate) struct DockerServer {
        _container: Container<Postgres>,
        _watchdog: Option<Watchdog>,
        pub(crate) admin: ConnectionInfo,
    }

    impl std::fmt::Debug for DockerServer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("DockerServer")
                .field("admin", &self.admin)
                .finish_non_exhaustive()
        }
    }

    impl DockerServer {
        /// Starts the container (blocking: testcontainers' sync runner owns its runtime,
        /// so the container outlives the test runtime that asked for it).
        pub(crate) fn start() -> Result<DockerServer> {
            let tag = std::env::var("PGCDC_TEST_DOCKER_TAG").unwrap_or_else(|_| DEFAULT_TAG.into());
            let mut cmd: Vec<String> = Vec::new();
            for (name, value) in [
                ("wal_level", "logical"),
                ("max_replication_slots", "20"),
                ("max_wal_senders", "20"),
                ("max_prepared_transactions", "20"),
                ("max_connections", "150"),
                ("fsync", "off"),
                ("full_page_writes", "off"),
                ("timezone", "UTC"),
            ] {
                cmd.push("-c".into());
                cmd.push(format!("{name}={value}"));
            }
            let container = Postgres::default()
                .with_tag(tag)
                .with_cmd(cmd)
                .with_startup_timeout(Duration::from_secs(120))
                .start()
                .map_err(|e| Error::Docker(e.to_string()))?;
            let host = container
                .get_host()
                .map_err(|e| Error::Docker(e.to_string()))?
                .to_string();
            let port = container
                .get_host_port_ipv4(5432)
                .map_err(|e| Error::Docker(e.to_string()))?;
            let id = container.id().to_owned();
            let watchdog = Watchdog::spawn(
                r#"command -v docker >/dev/null 2>&1 && docker rm -f -v "$1" >/dev/null 2>&1"#,
                &[std::ffi::OsStr::new(&id)],
            )
            .ok();
            Ok(DockerServer {
                _container: container,
                _watchdog: watchdog,
                admin: ConnectionInfo {
                    host,
                    port,
                    user: "postgres".into(),
                    password: Some("postgres".into()),
                    dbname: "postgres".into(),
                    socket_dir: None,
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_ping_responses() {
        assert!(is_ok_response(b"HTTP/1.1 200 OK\r\n"));
        assert!(is_ok_response(b"HTTP/1.0 200 OK\r\n"));
        assert!(!is_ok_response(b"HTTP/1.1 404 Not"));
        assert!(!is_ok_response(b"garbage garbage!"));
    }
}
