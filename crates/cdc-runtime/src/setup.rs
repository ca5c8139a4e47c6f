//! Preparing the source server: version, `wal_level`, tables, publication
//! and slot.
//!
//! The checks run as ordinary SQL over the replication connection itself
//! (a `replication=database` connection accepts simple-query SQL), so they use
//! the same host, TLS and authentication as streaming. Every identifier is
//! quoted and every name passed as a literal is quoted.

use crate::replication::{
    quote_identifier, quote_literal, ReplicationConnection, ReplicationError, SnapshotAction,
};
use crate::source::{SourceOptions, TableRef};

/// The oldest server with pgoutput.
pub const MIN_SERVER_VERSION: u32 = 100_000;

/// Why the source server is not ready for capture.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// Talking to the server failed.
    #[error(transparent)]
    Connection(#[from] ReplicationError),
    /// The server is older than PostgreSQL 10.
    #[error("server version {0} is too old: logical replication with pgoutput needs PostgreSQL 10 or newer")]
    ServerTooOld(u32),
    /// `wal_level` is not `logical`.
    #[error("wal_level is '{0}'; set wal_level=logical and restart the server")]
    WalLevel(String),
    /// A configured table does not exist.
    #[error("table {0} does not exist (check source.tables)")]
    MissingTable(TableRef),
    /// A configured schema does not exist.
    #[error("schema {0:?} does not exist (check source.schemas)")]
    MissingSchema(String),
    /// `FOR TABLES IN SCHEMA` needs PostgreSQL 15.
    #[error(
        "source.schemas needs PostgreSQL 15 or newer (server is {0}); list source.tables instead"
    )]
    SchemasNeedPg15(u32),
    /// The publication does not exist and may not be created.
    #[error("publication {0:?} does not exist; `pgcdc run` creates it when source.create_publication = true (the default), or create it yourself")]
    MissingPublication(String),
    /// The publication exists but does not cover a configured table.
    #[error("publication {publication:?} does not include {what}; run ALTER PUBLICATION {} ADD {what_sql}", quote_identifier(publication))]
    PublicationIncomplete {
        /// The publication.
        publication: String,
        /// The missing table or schema, for humans.
        what: String,
        /// The SQL object clause to add (`TABLE "s"."t"` or `TABLES IN SCHEMA "s"`).
        what_sql: String,
    },
    /// The slot does not exist and may not be created.
    #[error("replication slot {0:?} does not exist; `pgcdc run` creates it when source.create_slot = true (the default), or create it yourself")]
    MissingSlot(String),
    /// The slot exists but is unusable here.
    #[error("replication slot {slot:?} {problem}; drop it or choose another source.slot")]
    BadSlot {
        /// The slot.
        slot: String,
        /// What is wrong.
        problem: String,
    },
    /// A catalog query returned something unexpected.
    #[error("unexpected reply to {0}")]
    BadReply(&'static str),
}

impl SetupError {
    /// Whether retrying later may succeed (connection trouble only).
    pub fn is_transient(&self) -> bool {
        match self {
            SetupError::Connection(e) => e.is_transient(),
            _ => false,
        }
    }
}

/// What [`prepare`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupReport {
    /// `server_version_num`.
    pub server_version_num: u32,
    /// Whether the publication was created now (with [`SetupMode::Plan`]:
    /// whether it would be).
    pub created_publication: bool,
    /// Whether the slot was created now (with [`SetupMode::Plan`]: whether it
    /// would be).
    pub created_slot: bool,
}

/// Whether [`prepare`] may create missing objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupMode {
    /// Create the publication and slot when missing (as the config allows).
    Create,
    /// Only check: nothing is created, and a missing publication or slot
    /// is an error.
    CheckOnly,
    /// Check everything and report what [`SetupMode::Create`] would create
    /// (as the config allows), creating nothing (`pgcdc validate`).
    Plan,
}

async fn rows(
    conn: &mut ReplicationConnection,
    sql: &str,
) -> Result<Vec<Vec<Option<String>>>, SetupError> {
    let mut results = conn.simple_query(sql).await?;
    match results.pop() {
        Some(r) => Ok(r.rows().to_vec()),
        None => Err(SetupError::BadReply("a catalog query")),
    }
}

/// Checks the server and creates the publication and slot if allowed.
pub async fn prepare(
    conn: &mut ReplicationConnection,
    source: &SourceOptions,
    mode: SetupMode,
) -> Result<SetupReport, SetupError> {
    let version = conn.server_version_num().await?;
    if version < MIN_SERVER_VERSION {
        return Err(SetupError::ServerTooOld(version));
    }
    let wal_level = conn.show("wal_level").await?;
    if wal_level != "logical" {
        return Err(SetupError::WalLevel(wal_level));
    }
    if !source.schemas().is_empty() && version < 150_000 {
        return Err(SetupError::SchemasNeedPg15(version));
    }
    let tables = source.tables();
    for t in tables {
        let found = rows(
            conn,
            &format!(
                "SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = {} AND c.relname = {} AND c.relkind IN ('r', 'p')",
                quote_literal(&t.schema),
                quote_literal(&t.table)
            ),
        )
        .await?;
        if found.is_empty() {
            return Err(SetupError::MissingTable(t.clone()));
        }
    }
    for s in source.schemas() {
        let found = rows(
            conn,
            &format!(
                "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = {}",
                quote_literal(s)
            ),
        )
        .await?;
        if found.is_empty() {
            return Err(SetupError::MissingSchema(s.clone()));
        }
    }

    let created_publication = publication(conn, source, tables, mode).await?;
    let created_slot = slot(conn, source, mode).await?;
    Ok(SetupReport {
        server_version_num: version,
        created_publication,
        created_slot,
    })
}

fn table_sql(t: &TableRef) -> String {
    format!(
        "{}.{}",
        quote_identifier(&t.schema),
        quote_identifier(&t.table)
    )
}

async fn publication(
    conn: &mut ReplicationConnection,
    source: &SourceOptions,
    tables: &[TableRef],
    mode: SetupMode,
) -> Result<bool, SetupError> {
    let name = &source.publication;
    let existing = rows(
        conn,
        &format!(
            "SELECT puballtables FROM pg_catalog.pg_publication WHERE pubname = {}",
            quote_literal(name)
        ),
    )
    .await?;
    if let Some(row) = existing.first() {
        if row.first().cloned().flatten().as_deref() == Some("t") {
            return Ok(false);
        }
        for t in tables {
            let found = rows(
                conn,
                &format!(
                    "SELECT 1 FROM pg_catalog.pg_publication_tables \
                     WHERE pubname = {} AND schemaname = {} AND tablename = {}",
                    quote_literal(name),
                    quote_literal(&t.schema),
                    quote_literal(&t.table)
                ),
            )
            .await?;
            if found.is_empty() {
                return Err(SetupError::PublicationIncomplete {
                    publication: name.clone(),
                    what: format!("table {t}"),
                    what_sql: format!("TABLE {}", table_sql(t)),
                });
            }
        }
        for s in source.schemas() {
            let found = rows(
                conn,
                &format!(
                    "SELECT 1 FROM pg_catalog.pg_publication_namespace pn \
                     JOIN pg_catalog.pg_publication p ON p.oid = pn.pnpubid \
                     JOIN pg_catalog.pg_namespace n ON n.oid = pn.pnnspid \
                     WHERE p.pubname = {} AND n.nspname = {}",
                    quote_literal(name),
                    quote_literal(s)
                ),
            )
            .await?;
            if found.is_empty() {
                return Err(SetupError::PublicationIncomplete {
                    publication: name.clone(),
                    what: format!("schema {s}"),
                    what_sql: format!("TABLES IN SCHEMA {}", quote_identifier(s)),
                });
            }
        }
        return Ok(false);
    }
    if mode == SetupMode::CheckOnly || !source.create_publication {
        return Err(SetupError::MissingPublication(name.clone()));
    }
    if mode == SetupMode::Plan {
        return Ok(true);
    }
    let objects = if source.schemas().is_empty() {
        format!(
            "TABLE {}",
            tables.iter().map(table_sql).collect::<Vec<_>>().join(", ")
        )
    } else {
        format!(
            "TABLES IN SCHEMA {}",
            source
                .schemas()
                .iter()
                .map(|s| quote_identifier(s))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    conn.simple_query(&format!(
        "CREATE PUBLICATION {} FOR {objects}",
        quote_identifier(name)
    ))
    .await?;
    tracing::info!(publication = %name, "created publication");
    Ok(true)
}

async fn slot(
    conn: &mut ReplicationConnection,
    source: &SourceOptions,
    mode: SetupMode,
) -> Result<bool, SetupError> {
    let name = &source.slot;
    let existing = rows(
        conn,
        &format!(
            "SELECT slot_type, plugin, database FROM pg_catalog.pg_replication_slots WHERE slot_name = {}",
            quote_literal(name)
        ),
    )
    .await?;
    if let Some(row) = existing.first() {
        let get = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        let bad = |problem: String| SetupError::BadSlot {
            slot: name.clone(),
            problem,
        };
        if get(0) != "logical" {
            return Err(bad(format!("is a {} slot, not a logical one", get(0))));
        }
        if get(1) != "pgoutput" {
            return Err(bad(format!("uses plugin {:?}, not pgoutput", get(1))));
        }
        let database = source.replication.get_dbname();
        if get(2) != database {
            return Err(bad(format!(
                "belongs to database {:?}, not {database:?}",
                get(2),
            )));
        }
        return Ok(false);
    }
    if mode == SetupMode::CheckOnly || !source.create_slot {
        return Err(SetupError::MissingSlot(name.clone()));
    }
    if mode == SetupMode::Plan {
        return Ok(true);
    }
    let created = conn
        .create_replication_slot(name, false, SnapshotAction::Nothing)
        .await?;
    tracing::info!(slot = %name, consistent_point = %created.consistent_point, "created replication slot");
    Ok(true)
}
