//! [`ConnectionInfo`] and [`TestDatabase`]: how a test reaches its database.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use tokio_postgres::{Client, NoTls};

use crate::error::{Error, Result};

/// Where and as whom to connect: the parts of a libpq connection string.
///
/// `host` is a TCP host (`127.0.0.1` for local clusters). Local clusters also
/// listen on a unix socket in [`ConnectionInfo::socket_dir`].
#[derive(Clone)]
pub struct ConnectionInfo {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) user: String,
    pub(crate) password: Option<String>,
    pub(crate) dbname: String,
    pub(crate) socket_dir: Option<PathBuf>,
}

impl std::fmt::Debug for ConnectionInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionInfo")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("dbname", &self.dbname)
            .field("socket_dir", &self.socket_dir)
            .finish()
    }
}

impl ConnectionInfo {
    /// TCP host name or address.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// TCP port (the unix socket uses the same number).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// User name (a superuser).
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Password, when the server needs one.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// Database name.
    pub fn dbname(&self) -> &str {
        &self.dbname
    }

    /// Directory of the server's unix socket, for local clusters.
    pub fn socket_dir(&self) -> Option<&Path> {
        self.socket_dir.as_deref()
    }

    /// The same server and user, another database.
    pub fn with_dbname(&self, dbname: impl Into<String>) -> ConnectionInfo {
        ConnectionInfo {
            dbname: dbname.into(),
            ..self.clone()
        }
    }

    /// The same server and database, another user and password.
    pub fn with_user(&self, user: impl Into<String>, password: Option<&str>) -> ConnectionInfo {
        ConnectionInfo {
            user: user.into(),
            password: password.map(str::to_owned),
            ..self.clone()
        }
    }

    /// A `tokio_postgres` configuration over TCP (no TLS).
    pub fn config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .application_name("pgcdc-tests");
        if let Some(password) = &self.password {
            config.password(password);
        }
        config
    }

    /// A `tokio_postgres` configuration over the unix socket, if there is one.
    pub fn socket_config(&self) -> Option<tokio_postgres::Config> {
        let dir = self.socket_dir.as_ref()?;
        let mut config = self.config();
        config.host_path(dir);
        Some(config)
    }

    /// A libpq key/value connection string, e.g.
    /// `host=127.0.0.1 port=5433 user=postgres dbname=pgcdc_1`.
    pub fn connection_string(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "host={} port={} user={} dbname={}",
            quote(&self.host),
            self.port,
            quote(&self.user),
            quote(&self.dbname)
        );
        if let Some(password) = &self.password {
            let _ = write!(s, " password={}", quote(password));
        }
        s
    }

    /// The `[source]` section of a `pgcdc.toml` for this database (TLS off):
    /// `tables` as `schema.table`, then `slot` and `publication`.
    pub fn source_toml(&self, tables: &[&str], slot: &str, publication: &str) -> String {
        let tables = tables
            .iter()
            .map(|t| format!("{t:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let password = self
            .password
            .as_deref()
            .map(|p| format!("password = {p:?}\n"))
            .unwrap_or_default();
        format!(
            "[source]\nhost = {:?}\nport = {}\ndatabase = {:?}\nuser = {:?}\n{password}\
             sslmode = \"disable\"\ntables = [{tables}]\nslot = {slot:?}\npublication = {publication:?}\n",
            self.host, self.port, self.dbname, self.user
        )
    }

    /// [`connection_string`](Self::connection_string) plus `replication=database`: the
    /// parameters of a logical replication (walsender) connection.
    ///
    /// `tokio_postgres::Config` has no replication mode; a replication client sends
    /// `replication=database` as a startup parameter itself.
    pub fn replication_connection_string(&self) -> String {
        format!("{} replication=database", self.connection_string())
    }

    /// Connects over TCP and drives the connection on the current tokio runtime.
    pub async fn connect(&self) -> Result<Client> {
        connect_with(&self.config(), &format!("connect to {}", self.describe())).await
    }

    /// `user@host:port/dbname`, for messages.
    pub fn describe(&self) -> String {
        format!("{}@{}:{}/{}", self.user, self.host, self.port, self.dbname)
    }
}

pub(crate) async fn connect_with(config: &tokio_postgres::Config, context: &str) -> Result<Client> {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|e| Error::pg(context, e))?;
    tokio::spawn(async move {
        // The error, if any, surfaces to the client's next call.
        let _ = connection.await;
    });
    Ok(client)
}

/// libpq value quoting: `'...'` with `\` and `'` escaped, when needed.
fn quote(value: &str) -> String {
    if !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c == '\'' || c == '\\')
    {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// A fresh database created for one test, with a superuser connection.
///
/// The database is not dropped automatically: on local and Docker servers it
/// disappears with the server when the test process ends; on a server given by
/// `PGCDC_TEST_DATABASE_URL` it stays (names start with `pgcdc_t_`).
#[derive(Debug, Clone)]
pub struct TestDatabase {
    pub(crate) info: ConnectionInfo,
}

impl TestDatabase {
    /// Database name.
    pub fn name(&self) -> &str {
        &self.info.dbname
    }

    /// TCP host.
    pub fn host(&self) -> &str {
        &self.info.host
    }

    /// TCP port.
    pub fn port(&self) -> u16 {
        self.info.port
    }

    /// Superuser name.
    pub fn user(&self) -> &str {
        &self.info.user
    }

    /// Superuser password, when the server needs one.
    pub fn password(&self) -> Option<&str> {
        self.info.password.as_deref()
    }

    /// The `[source]` section of a `pgcdc.toml` for this database; see
    /// [`ConnectionInfo::source_toml`].
    pub fn source_toml(&self, tables: &[&str], slot: &str, publication: &str) -> String {
        self.connection_info()
            .source_toml(tables, slot, publication)
    }

    /// All connection parameters.
    pub fn connection_info(&self) -> &ConnectionInfo {
        &self.info
    }

    /// A `tokio_postgres` configuration for this database.
    pub fn config(&self) -> tokio_postgres::Config {
        self.info.config()
    }

    /// A libpq key/value connection string for this database.
    pub fn connection_string(&self) -> String {
        self.info.connection_string()
    }

    /// The connection string of a logical replication connection to this database.
    pub fn replication_connection_string(&self) -> String {
        self.info.replication_connection_string()
    }

    /// Opens a connection (TCP), driven on the current tokio runtime.
    pub async fn connect(&self) -> Result<Client> {
        self.info.connect().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ConnectionInfo {
        ConnectionInfo {
            host: "127.0.0.1".to_owned(),
            port: 5433,
            user: "postgres".to_owned(),
            password: Some("it's a \\ secret".to_owned()),
            dbname: "db 1".to_owned(),
            socket_dir: None,
        }
    }

    #[test]
    fn connection_strings_quote_values() {
        let info = info();
        assert_eq!(
            info.connection_string(),
            "host=127.0.0.1 port=5433 user=postgres dbname='db 1' password='it\\'s a \\\\ secret'"
        );
        assert!(info
            .replication_connection_string()
            .ends_with(" replication=database"));
        // tokio-postgres parses what we produce back into the same values.
        let parsed: tokio_postgres::Config = info.connection_string().parse().unwrap();
        assert_eq!(parsed.get_dbname(), Some("db 1"));
        assert_eq!(parsed.get_password(), Some("it's a \\ secret".as_bytes()));
        assert_eq!(parsed.get_ports(), &[5433]);
    }

    #[test]
    fn debug_redacts_password() {
        let shown = format!("{:?}", info());
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }
}
