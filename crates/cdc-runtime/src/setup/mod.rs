//! Preparing the source server: version, `wal_level`, tables, publication
//! and slot.
//!
//! The checks run as ordinary SQL over the replication connection itself
//! (a `replication=database` connection accepts simple-query SQL), so they use
//! the same host, TLS and authentication as streaming. Every identifier is
//! quoted and every name passed as a literal is quoted.

use crate::replication::{
    quote_identifier, quote_literal, ReplicationConnection, ReplicationError, SnapshotAction,
    FAILOVER_SLOTS_SINCE,
};
use crate::source::{SourceOptions, TableRef};

mod ddl;
mod publication;
mod signals;

use ddl::ddl_capture;
pub use ddl::DdlCapture;
use publication::publication;
pub use publication::PublicationChange;
use signals::signal_table;
pub use signals::SignalTable;

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
    /// Row filters and column lists need PostgreSQL 15.
    #[error("row filters and column lists (source.tables entries with `where` or `columns`) need PostgreSQL 15 or newer (server is {0})")]
    FiltersNeedPg15(u32),
    /// `FOR TABLES IN SCHEMA` needs PostgreSQL 15.
    #[error(
        "source.schemas needs PostgreSQL 15 or newer (server is {0}); list source.tables instead"
    )]
    SchemasNeedPg15(u32),
    /// The publication does not exist and may not be created.
    #[error("publication {0:?} does not exist; `pgcdc run` creates it when source.create_publication = true (the default), or create it yourself")]
    MissingPublication(String),
    /// The publication exists but does not cover a configured table.
    #[error("publication {publication:?} does not include {what}; run ALTER PUBLICATION {} ADD {what_sql}, or set source.create_publication = true so pgcdc keeps the publication in line with source.tables", quote_identifier(publication))]
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
    /// `capture_ddl = true`, but DDL capture is not installed and this
    /// role may not install it.
    #[error("source.capture_ddl = true needs the event triggers pgcdc_capture_ddl and pgcdc_capture_drop, and only a superuser may create event triggers: start pgcdc once as a superuser (it installs them and later runs need no superuser), or set source.capture_ddl = false")]
    DdlCaptureNeedsSuperuser,
    /// `failover_slot = true` on a server without failover slots.
    #[error("source.failover_slot = true needs PostgreSQL 17 or newer (server version {0}); set failover_slot = false or leave it unset (it defaults to on for 17+ only)")]
    FailoverSlotNeedsPg17(u32),
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
    /// What was done to the publication (with [`SetupMode::Plan`]: would be).
    pub publication: PublicationChange,
    /// The signal table.
    pub signals: SignalTable,
    /// DDL capture.
    pub ddl_capture: DdlCapture,
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

    let change = publication(conn, source, version, mode).await?;
    let signals = if source.signals {
        signal_table(conn, mode).await?
    } else {
        SignalTable::Off
    };
    let ddl_capture = if source.capture_ddl {
        ddl_capture(conn, version, mode).await?
    } else {
        DdlCapture::Off
    };
    let created_slot = slot(conn, source, version, mode).await?;
    Ok(SetupReport {
        server_version_num: version,
        created_publication: change == PublicationChange::Created,
        publication: change,
        signals,
        ddl_capture,
        created_slot,
    })
}

async fn slot(
    conn: &mut ReplicationConnection,
    source: &SourceOptions,
    version: u32,
    mode: SetupMode,
) -> Result<bool, SetupError> {
    let name = &source.slot;
    if source.failover_slot == Some(true) && version < FAILOVER_SLOTS_SINCE {
        return Err(SetupError::FailoverSlotNeedsPg17(version));
    }
    let failover = source
        .failover_slot
        .unwrap_or(version >= FAILOVER_SLOTS_SINCE);
    let failover_column = if version >= FAILOVER_SLOTS_SINCE {
        "failover"
    } else {
        "false"
    };
    let existing = rows(
        conn,
        &format!(
            "SELECT slot_type, plugin, database, {failover_column} FROM pg_catalog.pg_replication_slots WHERE slot_name = {}",
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
        if failover && get(3) != "t" && mode == SetupMode::Create {
            conn.alter_slot_failover(name, true).await?;
            tracing::info!(slot = %name, "made the existing replication slot a failover slot (source.failover_slot), so standbys with sync_replication_slots = on keep a copy");
        }
        return Ok(false);
    }
    if mode == SetupMode::CheckOnly || !source.create_slot {
        return Err(SetupError::MissingSlot(name.clone()));
    }
    if mode == SetupMode::Plan {
        return Ok(true);
    }
    let created = if failover {
        conn.create_failover_slot(name, SnapshotAction::Nothing)
            .await?
    } else {
        conn.create_replication_slot(name, false, SnapshotAction::Nothing)
            .await?
    };
    tracing::info!(slot = %name, consistent_point = %created.consistent_point, failover, "created replication slot");
    Ok(true)
}
