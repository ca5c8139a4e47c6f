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
    let created_slot = slot(conn, source, mode).await?;
    Ok(SetupReport {
        server_version_num: version,
        created_publication: change == PublicationChange::Created,
        publication: change,
        signals,
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

/// The marker a publication pgcdc keeps in line with its configuration
/// carries in its comment, followed by the definition's digest.
const MANAGED_MARK: &str = "pgcdc:";

/// The objects clause of the publication the configuration asks for
/// (`TABLE "s"."t" ("a", "b") WHERE (...), ...` or `TABLES IN SCHEMA ...`).
fn publication_objects(source: &SourceOptions) -> String {
    if source.schemas().is_empty() {
        let tables: Vec<String> = source
            .tables()
            .iter()
            .map(|t| table_object(source, t))
            .collect();
        tables.join(", ")
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
    }
}

/// `TABLE "s"."t" ("a", "b") WHERE (...)`: one configured table.
fn table_object(source: &SourceOptions, t: &TableRef) -> String {
    let mut sql = format!("TABLE {}", table_sql(t));
    if let Some(f) = source.filters.get(t) {
        if let Some(cols) = &f.columns {
            let cols: Vec<_> = cols.iter().map(|c| quote_identifier(c)).collect();
            sql.push_str(&format!(" ({})", cols.join(", ")));
        }
        if let Some(w) = &f.row_filter {
            sql.push_str(&format!(" WHERE ({w})"));
        }
    }
    sql
}

/// The comment that marks a publication as pgcdc's, with a digest of its
/// definition: a changed configuration is seen even where the catalog
/// cannot be compared (row filters are stored rewritten).
fn managed_comment(objects: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, objects.as_bytes());
    let hex: String = digest.as_ref()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{MANAGED_MARK}{hex} (kept in line with the configuration of the pgcdc job using it)")
}

/// What a publication covers, from the catalog.
struct Published {
    all_tables: bool,
    via_root: bool,
    comment: Option<String>,
    tables: Vec<TableRef>,
    schemas: Vec<String>,
}

async fn published(
    conn: &mut ReplicationConnection,
    name: &str,
    version: u32,
) -> Result<Option<Published>, SetupError> {
    let via_root = if version >= 130_000 {
        "pubviaroot"
    } else {
        "false"
    };
    let existing = rows(
        conn,
        &format!(
            "SELECT puballtables, pg_catalog.obj_description(oid, 'pg_publication'), {via_root} \
             FROM pg_catalog.pg_publication WHERE pubname = {}",
            quote_literal(name)
        ),
    )
    .await?;
    let Some(row) = existing.first() else {
        return Ok(None);
    };
    let all_tables = row.first().cloned().flatten().as_deref() == Some("t");
    let comment = row.get(1).cloned().flatten();
    let via_root = row.get(2).cloned().flatten().as_deref() == Some("t");
    // Tables listed one by one (not those a schema brings).
    let listed = if version >= 150_000 {
        format!(
            "SELECT n.nspname, c.relname FROM pg_catalog.pg_publication_rel pr \
             JOIN pg_catalog.pg_publication p ON p.oid = pr.prpubid \
             JOIN pg_catalog.pg_class c ON c.oid = pr.prrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE p.pubname = {} ORDER BY 1, 2",
            quote_literal(name)
        )
    } else {
        format!(
            "SELECT schemaname, tablename FROM pg_catalog.pg_publication_tables \
             WHERE pubname = {} ORDER BY 1, 2",
            quote_literal(name)
        )
    };
    let tables = rows(conn, &listed)
        .await?
        .into_iter()
        .filter_map(|r| {
            let mut r = r.into_iter();
            Some(TableRef::new(r.next()??, r.next()??))
        })
        .collect();
    let schemas = if version >= 150_000 {
        rows(
            conn,
            &format!(
                "SELECT n.nspname FROM pg_catalog.pg_publication_namespace pn \
                 JOIN pg_catalog.pg_publication p ON p.oid = pn.pnpubid \
                 JOIN pg_catalog.pg_namespace n ON n.oid = pn.pnnspid \
                 WHERE p.pubname = {} ORDER BY 1",
                quote_literal(name)
            ),
        )
        .await?
        .into_iter()
        .filter_map(|r| r.into_iter().next().flatten())
        .collect()
    } else {
        Vec::new()
    };
    Ok(Some(Published {
        all_tables,
        via_root,
        comment,
        tables,
        schemas,
    }))
}

/// Checks the publication, creating it when missing, and (when pgcdc
/// manages it: `create_publication`) bringing its tables, row filters and
/// column lists in line with the configuration: tables added to the
/// configuration are added, removed ones dropped. A publication for all
/// tables is left alone. Returns whether it was created or changed.
async fn publication(
    conn: &mut ReplicationConnection,
    source: &SourceOptions,
    version: u32,
    mode: SetupMode,
) -> Result<PublicationChange, SetupError> {
    let name = &source.publication;
    let has_filters = source.filters.values().any(|f| !f.is_empty());
    if has_filters && version < 150_000 {
        return Err(SetupError::FiltersNeedPg15(version));
    }
    let objects = publication_objects(source);
    // The option exists from PostgreSQL 13.
    let via_root = (version >= 130_000).then_some(source.publish_via_partition_root);
    let with = via_root
        .map(|v| format!(" WITH (publish_via_partition_root = {v})"))
        .unwrap_or_default();
    let comment = managed_comment(&format!("{objects}{with}"));
    let managed = source.create_publication && mode != SetupMode::CheckOnly;
    let Some(existing) = published(conn, name, version).await? else {
        if !managed {
            return Err(SetupError::MissingPublication(name.clone()));
        }
        if mode == SetupMode::Plan {
            return Ok(PublicationChange::Created);
        }
        conn.simple_query(&format!(
            "BEGIN; CREATE PUBLICATION {pub_} FOR {objects}{with}; COMMENT ON PUBLICATION {pub_} IS {}; COMMIT",
            quote_literal(&comment),
            pub_ = quote_identifier(name),
        ))
        .await?;
        tracing::info!(publication = %name, "created publication");
        return Ok(PublicationChange::Created);
    };
    if existing.all_tables {
        if has_filters {
            tracing::warn!(publication = %name, "the publication is FOR ALL TABLES: the configured row filters and column lists are not applied (use a publication pgcdc manages)");
        }
        return Ok(PublicationChange::None);
    }
    // What the configuration lists and the publication lacks, as (label,
    // SQL object), and what it publishes beyond the configuration.
    let (missing, extra): (Vec<(String, String)>, Vec<String>) = if source.schemas().is_empty() {
        (
            source
                .tables()
                .iter()
                .filter(|t| !existing.tables.contains(t))
                .map(|t| (format!("table {t}"), table_object(source, t)))
                .collect(),
            existing
                .tables
                .iter()
                .filter(|t| !source.tables().contains(t))
                .map(|t| format!("table {t}"))
                .chain(existing.schemas.iter().map(|s| format!("schema {s}")))
                .collect(),
        )
    } else {
        (
            source
                .schemas()
                .iter()
                .filter(|s| !existing.schemas.contains(s))
                .map(|s| {
                    (
                        format!("schema {s}"),
                        format!("TABLES IN SCHEMA {}", quote_identifier(s)),
                    )
                })
                .collect(),
            existing
                .schemas
                .iter()
                .filter(|s| !source.schemas().contains(s))
                .map(|s| format!("schema {s}"))
                .chain(existing.tables.iter().map(|t| format!("table {t}")))
                .collect(),
        )
    };
    if !managed {
        // Someone else's: it must cover the configuration; more is fine.
        if let Some((what, what_sql)) = missing.into_iter().next() {
            return Err(SetupError::PublicationIncomplete {
                publication: name.clone(),
                what,
                what_sql,
            });
        }
        return Ok(PublicationChange::None);
    }
    let added: Vec<String> = missing.iter().map(|(label, _)| label.clone()).collect();
    let ours = existing
        .comment
        .as_deref()
        .is_some_and(|c| c.starts_with(MANAGED_MARK));
    if !ours && !extra.is_empty() {
        // Not created by pgcdc, and publishing more than the configuration:
        // add what is missing, never drop or change what others may use.
        if missing.is_empty() {
            return Ok(PublicationChange::None);
        }
        if mode == SetupMode::Plan {
            return Ok(PublicationChange::Changed {
                added,
                removed: Vec::new(),
            });
        }
        let objects: Vec<&str> = missing.iter().map(|(_, sql)| sql.as_str()).collect();
        conn.simple_query(&format!(
            "ALTER PUBLICATION {} ADD {}",
            quote_identifier(name),
            objects.join(", ")
        ))
        .await?;
        tracing::info!(publication = %name, added = ?added, others = ?extra,
            "added the configured tables to the publication; it also publishes others, left as they are since pgcdc did not create it");
        return Ok(PublicationChange::Changed {
            added,
            removed: Vec::new(),
        });
    }
    // pgcdc's (or exactly the configuration's): kept in line and marked.
    let in_line = existing.comment.as_deref() == Some(comment.as_str());
    let via_root_differs = via_root.is_some_and(|v| v != existing.via_root);
    if missing.is_empty() && extra.is_empty() && !via_root_differs && !has_filters && !in_line {
        if mode == SetupMode::Create {
            // Same tables: mark it as pgcdc's, so later changes are seen.
            conn.simple_query(&format!(
                "COMMENT ON PUBLICATION {} IS {}",
                quote_identifier(name),
                quote_literal(&comment)
            ))
            .await?;
        }
        return Ok(PublicationChange::None);
    }
    if missing.is_empty() && extra.is_empty() && in_line {
        return Ok(PublicationChange::None);
    }
    let change = PublicationChange::Changed {
        added,
        removed: extra,
    };
    if mode == SetupMode::Plan {
        return Ok(change);
    }
    let set_option = via_root
        .map(|v| {
            format!(
                "ALTER PUBLICATION {} SET (publish_via_partition_root = {v}); ",
                quote_identifier(name)
            )
        })
        .unwrap_or_default();
    conn.simple_query(&format!(
        "BEGIN; ALTER PUBLICATION {pub_} SET {objects}; {set_option}COMMENT ON PUBLICATION {pub_} IS {}; COMMIT",
        quote_literal(&comment),
        pub_ = quote_identifier(name),
    ))
    .await?;
    if let PublicationChange::Changed { added, removed } = &change {
        tracing::info!(publication = %name, added = ?added, removed = ?removed,
            filters = has_filters, "publication brought in line with the configuration");
    }
    Ok(change)
}

/// What [`prepare`] did to the publication (with [`SetupMode::Plan`]:
/// would do).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PublicationChange {
    /// Nothing.
    #[default]
    None,
    /// Created it.
    Created,
    /// Set its tables (and row filters, column lists) to the configuration.
    Changed {
        /// Tables or schemas added (`table s.t`, `schema s`).
        added: Vec<String>,
        /// Tables or schemas dropped.
        removed: Vec<String>,
    },
}

/// Creates the signal table when it is missing (see [`crate::signal`]). A
/// role that may not create it gets a warning, not an error: streaming
/// works without it.
async fn signal_table(
    conn: &mut ReplicationConnection,
    mode: SetupMode,
) -> Result<SignalTable, SetupError> {
    let exists = rows(conn, crate::signal::EXISTS_SQL).await?;
    if exists
        .first()
        .and_then(|r| r.first().cloned().flatten())
        .as_deref()
        == Some("t")
    {
        return Ok(SignalTable::Exists);
    }
    if mode != SetupMode::Create {
        return Ok(SignalTable::Missing);
    }
    match conn.simple_query(crate::signal::SETUP_SQL).await {
        Ok(_) => {
            tracing::info!(
                table = crate::signal::SIGNAL_TABLE,
                "created the signal table (on-demand snapshots: pgcdc snapshot --table ...)"
            );
            Ok(SignalTable::Created)
        }
        Err(e) if e.is_transient() => Err(e.into()),
        Err(e) => {
            // The failed transaction block must end before the next query.
            let _ = conn.simple_query("ROLLBACK").await;
            tracing::warn!(error = %e, "could not create the signal table pgcdc.signals, so on-demand snapshots (pgcdc snapshot) are unavailable; run pgcdc once as a role that may create schemas in this database, or set source.signals = false");
            Ok(SignalTable::Missing)
        }
    }
}

/// Whether the signal table is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SignalTable {
    /// Not wanted (`source.signals = false`).
    #[default]
    Off,
    /// It exists.
    Exists,
    /// Created now (with [`SetupMode::Plan`]: never).
    Created,
    /// It does not exist (and could not be created, or was not to be).
    Missing,
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
