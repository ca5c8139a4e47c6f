//! The publication: created when missing, and (when pgcdc manages it) kept
//! in line with the configured tables or schemas, row filters, column
//! lists and `publish_via_partition_root`.

use super::{rows, SetupError, SetupMode};
use crate::replication::{quote_identifier, quote_literal, ReplicationConnection};
use crate::source::{SourceOptions, TableRef};

pub(super) fn table_sql(t: &TableRef) -> String {
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
pub(super) async fn publication(
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

/// What [`prepare`](super::prepare) did to the publication (with [`SetupMode::Plan`]:
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
