//! Telling whether two connections reach the same database.

use tokio_postgres::Client;

/// What identifies the database a connection reaches: the server's start
/// time (distinct for every start of every cluster, to the microsecond), the
/// database's OID and its name. Equal identities mean the same database of
/// the same running server, however each connection got there (host name,
/// IP address, socket, pooler).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseIdentity {
    server_started: String,
    database_oid: u32,
    database: String,
}

impl DatabaseIdentity {
    /// The database's name.
    pub fn database(&self) -> &str {
        &self.database
    }
}

/// The identity of the database `client` is connected to (one query, no
/// privileges needed).
pub async fn database_identity(client: &Client) -> Result<DatabaseIdentity, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT pg_postmaster_start_time()::text, d.oid, d.datname::text \
             FROM pg_catalog.pg_database d WHERE d.datname = current_database()",
            &[],
        )
        .await?;
    Ok(DatabaseIdentity {
        server_started: row.try_get(0)?,
        database_oid: row.try_get(1)?,
        database: row.try_get(2)?,
    })
}
