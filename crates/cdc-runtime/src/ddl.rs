//! DDL capture (`source.capture_ddl = true`): schema changes known at their
//! own LSN.
//!
//! pgoutput announces a table's new columns only with its next change, and
//! says nothing of a dropped table. With DDL capture, pgcdc installs an
//! event trigger (see [`setup_sql`]) that, at the end of every `ALTER
//! TABLE` and at every `DROP TABLE`, writes a transactional logical
//! decoding message with the prefix [`DDL_PREFIX`]: the statement's text
//! and, for each altered table, its columns as pgoutput will describe them
//! from then on. The job reads the message in the transaction, between the
//! changes before and after the statement, so:
//!
//! * each statement is its own schema change (a dropped column followed by
//!   an added one is no longer summed up as a rename);
//! * renames and type changes are reported where they happened, not with
//!   the table's next change, and a dropped table is reported at all;
//! * an added column's value in the rows that existed before is known:
//!   the constant PostgreSQL stored for them (`attmissingval`), or, for a
//!   volatile default or an identity column (the table was rewritten with a
//!   value per row), the job reads the table again.
//!
//! Event triggers can only be created by a superuser. The trigger function
//! is `SECURITY DEFINER` with a fixed `search_path` and fixed output
//! settings, and never fails the user's DDL: an error in it is a WARNING,
//! and pgcdc then infers the change from the next Relation message as it
//! does without DDL capture.

use std::sync::Arc;

use serde::Deserialize;

use crate::event::{ColumnSchema, ExistingRows};

/// The prefix of the logical decoding messages the DDL trigger writes.
pub const DDL_PREFIX: &str = "pgcdc.ddl";

/// The comment on the trigger function that names its version; set-up
/// replaces a function with another comment.
pub const FUNCTION_VERSION: &str = "pgcdc ddl capture v2";

/// Whether DDL capture is installed at this version (one row, `t` or `f`).
pub const EXISTS_SQL: &str = "SELECT (SELECT count(*) FROM pg_catalog.pg_event_trigger \
    WHERE evtname IN ('pgcdc_capture_ddl', 'pgcdc_capture_drop') AND evtenabled <> 'D') = 2 \
    AND pg_catalog.obj_description(pg_catalog.to_regprocedure('pgcdc.capture_ddl()'), 'pg_proc') \
    IS NOT DISTINCT FROM 'pgcdc ddl capture v2'";

/// Whether the connected role is a superuser (one row, `t` or `f`).
pub const IS_SUPERUSER_SQL: &str =
    "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user";

/// The SQL that installs DDL capture on a server of `server_version_num`:
/// the trigger function and its two event triggers, in one transaction
/// under an advisory lock. Column lists (`prattrs`) exist from PostgreSQL
/// 15 and generated columns from 12; older servers get a function without
/// them.
pub fn setup_sql(server_version_num: u32) -> String {
    let column_lists = if server_version_num >= 150_000 {
        "(SELECT pg_catalog.json_agg(p.pubname) FROM pg_catalog.pg_publication_rel pr \
           JOIN pg_catalog.pg_publication p ON p.oid = pr.prpubid \
           WHERE pr.prrelid = c.oid AND pr.prattrs IS NOT NULL)"
    } else {
        "NULL::json"
    };
    let not_generated = if server_version_num >= 120_000 {
        "AND a.attgenerated = ''"
    } else {
        ""
    };
    format!(
        r#"BEGIN;
SELECT pg_catalog.pg_advisory_xact_lock(7362181003);
CREATE SCHEMA IF NOT EXISTS "pgcdc";
CREATE OR REPLACE FUNCTION "pgcdc"."capture_ddl"() RETURNS event_trigger
  LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = pg_catalog SET "DateStyle" = 'ISO, YMD' SET "TimeZone" = 'UTC'
  SET "IntervalStyle" = 'postgres' SET extra_float_digits = 3 SET bytea_output = 'hex'
  AS $pgcdc$
DECLARE
  tables json;
  kind text;
BEGIN
  -- Only the catalog reads are guarded: the block is a subtransaction, and
  -- a message written inside one is ordered by logical decoding against
  -- the statement's next change by LSN alone, which it shares.
  BEGIN
    IF TG_EVENT = 'sql_drop' THEN
      kind := 'dropped';
      SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
          'oid', d.objid::int8, 'schema', d.schema_name, 'name', d.object_name))
        INTO tables
        FROM pg_catalog.pg_event_trigger_dropped_objects() d
        WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objsubid = 0
          AND d.object_type = 'table';
    ELSE
      kind := 'tables';
      SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
          'oid', c.oid::int8, 'schema', n.nspname, 'name', c.relname,
          'column_lists', {column_lists},
          'columns', (SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
              'name', a.attname, 'type', a.atttypid::int8, 'typmod', a.atttypmod,
              'key', (c.relreplident = 'f' OR EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                       WHERE i.indrelid = c.oid AND a.attnum = ANY (i.indkey)
                         AND ((c.relreplident = 'd' AND i.indisprimary)
                           OR (c.relreplident = 'i' AND i.indisreplident)))),
              'has_missing', a.atthasmissing,
              'missing', CASE WHEN a.atthasmissing
                           THEN (a.attmissingval::text::text[])[1] END,
              'per_row', (NOT a.atthasmissing AND (ad.oid IS NOT NULL OR a.attidentity <> '')))
              ORDER BY a.attnum)
            FROM pg_catalog.pg_attribute a
            LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
            WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped {not_generated})))
        INTO tables
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p') AND c.oid IN (
          SELECT e.objid FROM pg_catalog.pg_event_trigger_ddl_commands() e
          WHERE e.classid = 'pg_catalog.pg_class'::pg_catalog.regclass);
    END IF;
  EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'pgcdc DDL capture skipped this statement (%): %', SQLSTATE, SQLERRM;
    RETURN;
  END;
  IF tables IS NOT NULL THEN
    PERFORM pg_catalog.pg_logical_emit_message(true, 'pgcdc.ddl', pg_catalog.json_build_object(
      'tag', TG_TAG, 'ddl', pg_catalog.current_query(), kind, tables)::text);
  END IF;
END
$pgcdc$;
COMMENT ON FUNCTION "pgcdc"."capture_ddl"() IS '{FUNCTION_VERSION}';
REVOKE ALL ON FUNCTION "pgcdc"."capture_ddl"() FROM PUBLIC;
DROP EVENT TRIGGER IF EXISTS "pgcdc_capture_ddl";
DROP EVENT TRIGGER IF EXISTS "pgcdc_capture_drop";
CREATE EVENT TRIGGER "pgcdc_capture_ddl" ON ddl_command_end WHEN TAG IN ('ALTER TABLE')
  EXECUTE PROCEDURE "pgcdc"."capture_ddl"();
CREATE EVENT TRIGGER "pgcdc_capture_drop" ON sql_drop WHEN TAG IN ('DROP TABLE')
  EXECUTE PROCEDURE "pgcdc"."capture_ddl"();
COMMIT;"#
    )
}

/// One captured DDL statement: the content of a [`DDL_PREFIX`] message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedDdl {
    /// The command tag (`ALTER TABLE`, `DROP TABLE`).
    pub tag: String,
    /// The text of the statement as the client sent it (the whole query
    /// string, which may hold more than one statement).
    pub ddl: Arc<str>,
    /// The tables the statement altered, as they are after it.
    pub tables: Vec<CapturedTable>,
    /// The tables the statement dropped.
    pub dropped: Vec<DroppedTable>,
}

/// A table after an `ALTER TABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedTable {
    /// The table's oid.
    pub oid: cdc_core::Oid,
    /// Its schema.
    pub schema: String,
    /// Its name.
    pub name: String,
    /// The publications that publish it with a column list: pgoutput then
    /// sends only the listed columns, which the message does not describe,
    /// so such tables are left to the next Relation message.
    pub column_lists: Vec<String>,
    /// The published columns (not dropped, not generated), in order.
    pub columns: Vec<CapturedColumn>,
}

/// A column of a [`CapturedTable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedColumn {
    /// The column as pgoutput describes it.
    pub schema: ColumnSchema,
    /// What rows that existed before the column was added hold in it.
    pub existing_rows: ExistingRows,
}

/// A table a `DROP TABLE` dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedTable {
    /// The table's oid.
    pub oid: cdc_core::Oid,
    /// Its schema.
    pub schema: String,
    /// Its name.
    pub name: String,
}

#[derive(Deserialize)]
struct RawDdl {
    tag: String,
    ddl: Option<String>,
    #[serde(default)]
    tables: Vec<RawTable>,
    #[serde(default)]
    dropped: Vec<RawDropped>,
}

#[derive(Deserialize)]
struct RawTable {
    oid: u32,
    schema: String,
    name: String,
    column_lists: Option<Vec<String>>,
    columns: Option<Vec<RawColumn>>,
}

#[derive(Deserialize)]
struct RawColumn {
    name: String,
    #[serde(rename = "type")]
    type_oid: u32,
    typmod: i32,
    key: bool,
    has_missing: bool,
    missing: Option<String>,
    per_row: bool,
}

#[derive(Deserialize)]
struct RawDropped {
    oid: u32,
    schema: Option<String>,
    name: Option<String>,
}

/// Why a DDL message cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the DDL capture message is not the JSON the trigger writes: {0}")]
pub struct DdlError(String);

/// Parses the content of a [`DDL_PREFIX`] message.
pub fn parse(content: &[u8]) -> Result<CapturedDdl, DdlError> {
    let raw: RawDdl = serde_json::from_slice(content).map_err(|e| DdlError(e.to_string()))?;
    let tables = raw
        .tables
        .into_iter()
        .map(|t| CapturedTable {
            oid: t.oid,
            schema: t.schema,
            name: t.name,
            column_lists: t.column_lists.unwrap_or_default(),
            columns: t
                .columns
                .unwrap_or_default()
                .into_iter()
                .map(|c| CapturedColumn {
                    existing_rows: match (c.has_missing, c.missing, c.per_row) {
                        (true, Some(v), _) => ExistingRows::Value(v.into()),
                        // A stored value that has no text form here (an
                        // array column's): read the rows again.
                        (true, None, _) | (false, _, true) => ExistingRows::PerRow,
                        (false, _, false) => ExistingRows::Null,
                    },
                    schema: ColumnSchema {
                        name: c.name.into(),
                        type_oid: c.type_oid,
                        type_modifier: c.typmod,
                        is_key: c.key,
                    },
                })
                .collect(),
        })
        .collect();
    let dropped = raw
        .dropped
        .into_iter()
        .map(|d| DroppedTable {
            oid: d.oid,
            schema: d.schema.unwrap_or_default(),
            name: d.name.unwrap_or_default(),
        })
        .collect();
    Ok(CapturedDdl {
        tag: raw.tag,
        ddl: raw.ddl.unwrap_or_default().into(),
        tables,
        dropped,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn alter_and_drop_messages_parse() {
        let alter = br#"{"tag":"ALTER TABLE","ddl":"alter table t add c int default 5","tables":[
            {"oid":16384,"schema":"public","name":"t","column_lists":null,"columns":[
              {"name":"id","type":23,"typmod":-1,"key":true,"has_missing":false,"missing":null,"per_row":false},
              {"name":"c","type":23,"typmod":-1,"key":false,"has_missing":true,"missing":"5","per_row":false},
              {"name":"s","type":23,"typmod":-1,"key":false,"has_missing":false,"missing":null,"per_row":true}]}]}"#;
        let d = parse(alter).unwrap();
        assert_eq!(d.tag, "ALTER TABLE");
        let t = &d.tables[0];
        assert_eq!((t.oid, t.name.as_str()), (16384, "t"));
        assert!(t.columns[0].schema.is_key);
        assert_eq!(t.columns[0].existing_rows, ExistingRows::Null);
        assert_eq!(t.columns[1].existing_rows, ExistingRows::Value("5".into()));
        assert_eq!(t.columns[2].existing_rows, ExistingRows::PerRow);

        let drop = br#"{"tag":"DROP TABLE","ddl":"drop table t","dropped":[{"oid":16384,"schema":"public","name":"t"}]}"#;
        let d = parse(drop).unwrap();
        assert!(d.tables.is_empty());
        assert_eq!(d.dropped[0].oid, 16384);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            &b""[..],
            b"{",
            b"[]",
            b"{\"tag\":1}",
            b"{\"tag\":\"x\",\"tables\":[{}]}",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
