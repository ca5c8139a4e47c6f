//! The signal table: how a running job is asked to do something, such as
//! read a table again (an on-demand snapshot).
//!
//! pgcdc creates `pgcdc.signals` (see [`SETUP_SQL`]). A row inserted into it
//! is turned, by a trigger in the inserting transaction, into a logical
//! decoding message with the prefix [`SIGNAL_PREFIX`]. The job reads that
//! message from its slot at the transaction's commit LSN, so a request has
//! a definite place in the stream, needs no publication of its own, and is
//! seen again after a crash until a checkpoint records it.
//!
//! The row's shape follows Debezium's signal table (`id`, `type`, `data`);
//! `type = 'execute-snapshot'` with
//! `data = {"data-collections": ["public.orders"], "additional-conditions":
//! [{"data-collection": "public.orders", "filter": "id > 1000"}]}` asks for
//! a snapshot of `public.orders` limited to `id > 1000`.
//!
//! A filter is SQL that the job runs, read-only, as its own role: grant
//! `INSERT` on `pgcdc.signals` only to roles that may read the captured
//! tables.

use serde::Deserialize;

use crate::source::TableRef;

/// The prefix of the logical decoding messages the signal trigger writes.
pub const SIGNAL_PREFIX: &str = "pgcdc.signal";

/// The signal table, quoted.
pub const SIGNAL_TABLE: &str = "\"pgcdc\".\"signals\"";

/// The signal type that asks for a snapshot (Debezium's name).
pub const EXECUTE_SNAPSHOT: &str = "execute-snapshot";

/// The longest signal id accepted (Debezium's column is `varchar(42)`).
pub const MAX_ID_LEN: usize = 255;

/// Creates the signal table and its trigger if they are missing. Run in
/// one transaction under an advisory lock, so jobs starting together do not
/// race. The trigger function is `SECURITY DEFINER` (owned by pgcdc's
/// role, which may write logical decoding messages), with a fixed
/// `search_path`.
pub const SETUP_SQL: &str = r#"BEGIN;
SELECT pg_catalog.pg_advisory_xact_lock(7362181002);
CREATE SCHEMA IF NOT EXISTS "pgcdc";
CREATE TABLE IF NOT EXISTS "pgcdc"."signals" (
  "id" text PRIMARY KEY DEFAULT pg_catalog.md5(pg_catalog.random()::text || pg_catalog.clock_timestamp()::text),
  "type" text NOT NULL,
  "data" jsonb NOT NULL DEFAULT '{}',
  "created_at" timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE OR REPLACE FUNCTION "pgcdc"."emit_signal"() RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $pgcdc$
BEGIN
  PERFORM pg_catalog.pg_logical_emit_message(true, 'pgcdc.signal',
    pg_catalog.json_build_object('id', NEW."id", 'type', NEW."type", 'data', NEW."data")::text);
  RETURN NEW;
END
$pgcdc$;
REVOKE ALL ON FUNCTION "pgcdc"."emit_signal"() FROM PUBLIC;
DROP TRIGGER IF EXISTS "pgcdc_emit_signal" ON "pgcdc"."signals";
CREATE TRIGGER "pgcdc_emit_signal" AFTER INSERT ON "pgcdc"."signals"
  FOR EACH ROW EXECUTE PROCEDURE "pgcdc"."emit_signal"();
COMMIT;"#;

/// Whether the signal table and its trigger exist (one row, `t` or `f`).
pub const EXISTS_SQL: &str = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t \
    JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid \
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
    WHERE n.nspname = 'pgcdc' AND c.relname = 'signals' AND t.tgname = 'pgcdc_emit_signal')";

/// A signal as the job read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    /// The row's id.
    pub id: String,
    /// What it asks for.
    pub action: SignalAction,
}

/// What a signal asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalAction {
    /// Read these tables again, each with an optional SQL condition.
    Snapshot(Vec<SnapshotAsk>),
    /// A type pgcdc does not act on (logged and ignored).
    Other(String),
}

/// One table of an `execute-snapshot` signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotAsk {
    /// The table.
    pub table: TableRef,
    /// Only rows matching this SQL condition.
    pub filter: Option<String>,
}

/// Why a signal cannot be acted on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignalError {
    /// The message is not the JSON the trigger writes.
    #[error("the signal is not valid JSON of the signal table's shape: {0}")]
    Json(String),
    /// The id is empty or too long.
    #[error("the signal's id must be 1 to {MAX_ID_LEN} bytes")]
    Id,
    /// `execute-snapshot` without tables.
    #[error("execute-snapshot needs data.data-collections, e.g. {{\"data-collections\": [\"public.orders\"]}}")]
    NoTables,
    /// A table name that is not `schema.table`.
    #[error("{0:?} is not a table name (schema.table)")]
    Table(String),
    /// A condition for a table the signal does not name.
    #[error("additional-conditions names {0}, which data-collections does not list")]
    ConditionTable(String),
    /// Debezium's blocking snapshots are not supported.
    #[error("snapshot type {0:?} is not supported (pgcdc's snapshots are incremental: leave data.type out or set it to \"incremental\")")]
    SnapshotType(String),
}

#[derive(Deserialize)]
struct Raw {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    data: serde_json::Value,
}

#[derive(Deserialize, Default)]
struct SnapshotData {
    #[serde(rename = "data-collections", default)]
    data_collections: Vec<String>,
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(rename = "additional-conditions", default)]
    additional_conditions: Vec<Condition>,
}

#[derive(Deserialize)]
struct Condition {
    #[serde(rename = "data-collection")]
    data_collection: String,
    filter: String,
}

/// Parses the content of a [`SIGNAL_PREFIX`] message. The id is returned
/// with the error where it could be read, for the log line.
pub fn parse(content: &[u8]) -> Result<Signal, (Option<String>, SignalError)> {
    let raw: Raw =
        serde_json::from_slice(content).map_err(|e| (None, SignalError::Json(e.to_string())))?;
    let id = raw.id;
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err((None, SignalError::Id));
    }
    let fail = |e| (Some(id.clone()), e);
    if raw.kind != EXECUTE_SNAPSHOT {
        return Ok(Signal {
            action: SignalAction::Other(raw.kind),
            id,
        });
    }
    let data: SnapshotData = match raw.data {
        serde_json::Value::Null => SnapshotData::default(),
        v => serde_json::from_value(v).map_err(|e| fail(SignalError::Json(e.to_string())))?,
    };
    if let Some(kind) = data.kind.filter(|k| !k.eq_ignore_ascii_case("incremental")) {
        return Err(fail(SignalError::SnapshotType(kind)));
    }
    if data.data_collections.is_empty() {
        return Err(fail(SignalError::NoTables));
    }
    let mut asks = Vec::with_capacity(data.data_collections.len());
    for name in &data.data_collections {
        let table = TableRef::parse(name).map_err(|_| fail(SignalError::Table(name.clone())))?;
        asks.push(SnapshotAsk {
            table,
            filter: None,
        });
    }
    for c in data.additional_conditions {
        let table = TableRef::parse(&c.data_collection)
            .map_err(|_| fail(SignalError::Table(c.data_collection.clone())))?;
        let ask = asks
            .iter_mut()
            .find(|a| a.table == table)
            .ok_or_else(|| fail(SignalError::ConditionTable(c.data_collection.clone())))?;
        let filter = c.filter.trim();
        if !filter.is_empty() {
            ask.filter = Some(filter.to_owned());
        }
    }
    Ok(Signal {
        id,
        action: SignalAction::Snapshot(asks),
    })
}

/// The `data` of an `execute-snapshot` signal for `table` (with `filter`).
pub fn snapshot_data(table: &TableRef, filter: Option<&str>) -> serde_json::Value {
    let name = table.to_string();
    let mut data = serde_json::json!({
        "data-collections": [name],
        "type": "incremental",
    });
    if let (Some(f), Some(obj)) = (filter, data.as_object_mut()) {
        obj.insert(
            "additional-conditions".into(),
            serde_json::json!([{ "data-collection": name, "filter": f }]),
        );
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debezium_shaped_snapshot_signals_parse() {
        let s = parse(
            br#"{"id":"s1","type":"execute-snapshot","data":{"data-collections":["public.orders","items"],
            "type":"INCREMENTAL","additional-conditions":[{"data-collection":"public.orders","filter":" id > 1000 "}]}}"#,
        )
        .unwrap();
        assert_eq!(s.id, "s1");
        assert_eq!(
            s.action,
            SignalAction::Snapshot(vec![
                SnapshotAsk {
                    table: TableRef::new("public", "orders"),
                    filter: Some("id > 1000".into()),
                },
                SnapshotAsk {
                    table: TableRef::new("public", "items"),
                    filter: None,
                },
            ])
        );
    }

    #[test]
    fn what_the_cli_writes_is_what_the_job_reads() {
        let t = TableRef::new("s", "t");
        let data = snapshot_data(&t, Some("k = 'a'"));
        let msg = serde_json::json!({"id": "x", "type": EXECUTE_SNAPSHOT, "data": data});
        let s = parse(msg.to_string().as_bytes()).unwrap();
        assert_eq!(
            s.action,
            SignalAction::Snapshot(vec![SnapshotAsk {
                table: t,
                filter: Some("k = 'a'".into())
            }])
        );
    }

    #[test]
    fn bad_signals_are_errors_not_panics() {
        let cases: [(&[u8], SignalError); 6] = [
            (b"not json", SignalError::Json(String::new())),
            (br#"{"id":"","type":"x"}"#, SignalError::Id),
            (
                br#"{"id":"a","type":"execute-snapshot","data":{}}"#,
                SignalError::NoTables,
            ),
            (
                br#"{"id":"a","type":"execute-snapshot","data":{"data-collections":["a.b.c"]}}"#,
                SignalError::Table("a.b.c".into()),
            ),
            (
                br#"{"id":"a","type":"execute-snapshot","data":{"data-collections":["t"],"type":"blocking"}}"#,
                SignalError::SnapshotType("blocking".into()),
            ),
            (
                br#"{"id":"a","type":"execute-snapshot","data":{"data-collections":["t"],"additional-conditions":[{"data-collection":"u","filter":"x"}]}}"#,
                SignalError::ConditionTable("u".into()),
            ),
        ];
        for (input, want) in cases {
            let got = parse(input).unwrap_err().1;
            match want {
                SignalError::Json(_) => assert!(matches!(got, SignalError::Json(_)), "{got:?}"),
                want => assert_eq!(got, want),
            }
        }
        let other = parse(br#"{"id":"a","type":"pause"}"#).unwrap();
        assert_eq!(other.action, SignalAction::Other("pause".into()));
    }
}
