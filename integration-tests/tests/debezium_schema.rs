//! The Debezium format with `schemas.enable = true` against a real server:
//! changes captured from a pgoutput slot, written as Kafka Connect's JSON
//! converter writes them (`{"schema":…,"payload":…}`), where every payload
//! agrees with its schema and the schema is Debezium's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use cdc_core::{Decoder, Lsn, ProtocolVersion, TxnAssembler};
use cdc_runtime::encoding::{DebeziumOptions, JsonEncoder, JsonFormat};
use cdc_runtime::event::{ChangeEvent, ColumnFacts, EventConverter, TableFacts, TableSchema};
use integration_tests::TestPostgres;
use serde_json::Value as Json;
use tokio_postgres::Client;

const DDL: &str = "
    CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
    CREATE TABLE orders (
        id int4 PRIMARY KEY,
        name text NOT NULL,
        price numeric(10,2),
        created_at timestamptz NOT NULL,
        updated timestamp(3),
        day date,
        data bytea,
        flag bool,
        doc jsonb,
        uid uuid,
        mood mood,
        tags int4[]
    );
    -- The whole old row in updates and deletes: Debezium fills the NOT NULL
    -- columns a default-identity delete lacks with fallback values, which
    -- is the values' business, not the schema's.
    ALTER TABLE orders REPLICA IDENTITY FULL;
    CREATE PUBLICATION pub FOR TABLE orders;";

const CHANGES: &str = "
    INSERT INTO orders VALUES
      (1, 'first', 12.50, '2024-01-15 04:05:06.5+00', '2024-01-15 04:05:06.123', '2024-01-15',
       '\\x00ff', true, '{\"a\": [1, 2]}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'happy', '{1,2,NULL}'),
      (2, 'nulls', NULL, '2024-01-16 00:00:00+00', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    UPDATE orders SET price = 99.99, mood = 'sad', tags = '{}' WHERE id = 1;
    UPDATE orders SET id = 3 WHERE id = 2;
    DELETE FROM orders WHERE id = 1;
    SELECT pg_logical_emit_message(true, 'audit', 'hello');";

/// The events of the slot's changes so far (as the pipeline converts them).
async fn capture(client: &Client) -> Vec<ChangeEvent> {
    let rows = client
        .query(
            "SELECT lsn::text, data FROM pg_logical_slot_get_binary_changes('schemas', NULL, NULL, \
             'proto_version', '1', 'publication_names', 'pub', 'messages', 'true')",
            &[],
        )
        .await
        .unwrap();
    let mut decoder = Decoder::new(ProtocolVersion::V1);
    let mut assembler = TxnAssembler::new();
    let mut conv = EventConverter::new("src", "schemas");
    let mut out = Vec::new();
    for row in rows {
        let lsn: Lsn = row.get::<_, String>(0).parse().unwrap();
        let data: Vec<u8> = row.get(1);
        let msg = decoder.decode(&data).unwrap();
        let mut pending = Vec::new();
        if let Some(e) = assembler.handle_message(msg).unwrap() {
            pending.push(e.into_owned());
        }
        while let Some(e) = assembler.poll_event() {
            pending.push(e);
        }
        for e in pending {
            conv.handle(&e, assembler.relations(), Some(lsn), &mut out)
                .unwrap();
        }
    }
    out
}

/// What the catalog says about `table`'s columns (what the pipeline looks
/// up before events reach a sink).
async fn catalog_facts(client: &Client, table: &TableSchema) -> TableFacts {
    let mut columns = Vec::new();
    for col in &table.columns {
        let row = client
            .query_one(
                "SELECT a.attnotnull,
                        coalesce(a.attnum = ANY (i.indkey::int2[]), false),
                        t.typname::text,
                        (SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
                           FROM pg_enum e WHERE e.enumtypid = t.oid),
                        CASE WHEN t.typtype = 'd' THEN t.typbasetype END
                   FROM pg_attribute a
                   JOIN pg_type t ON t.oid = a.atttypid
                   LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
                  WHERE a.attrelid = $1 AND a.attname = $2",
                &[&table.oid, &&*col.name],
            )
            .await
            .unwrap();
        let labels: Option<Vec<String>> = row.get(3);
        columns.push(ColumnFacts {
            not_null: row.get(0),
            primary_key: row.get(1),
            type_name: Some(Arc::from(row.get::<_, String>(2))),
            enum_labels: labels.map(|l| l.into_iter().map(Arc::from).collect()),
            domain_base_oid: row.get(4),
        });
    }
    TableFacts { columns }
}

/// Fields on main's payload that Debezium's schema requires but pgcdc does
/// not write yet (the envelope's rewrite adds it).
const NOT_WRITTEN_YET: &[&str] = &["payload.transaction.data_collection_order"];

/// Fields on main's payload that Debezium 2.7's schema does not declare:
/// a message record has no `transaction` block in 2.7 (3.0 adds one).
/// Kafka Connect ignores undeclared fields, so they do no harm.
const NOT_DECLARED: &[&str] = &["payload.transaction"];

/// Asserts that `value` is a valid value of the Connect schema `schema`
/// (as Kafka Connect's JSON converter would read it back): every field of
/// a struct is declared, required fields are present and not null, and
/// every value has its schema's JSON type.
fn check(schema: &Json, value: &Json, path: &str) {
    let optional = schema["optional"].as_bool().unwrap();
    if value.is_null() {
        assert!(
            optional || !schema["default"].is_null(),
            "{path}: null for a required {schema}"
        );
        return;
    }
    let ty = schema["type"].as_str().unwrap();
    match ty {
        "struct" => {
            let object = value
                .as_object()
                .unwrap_or_else(|| panic!("{path}: {value}"));
            let fields = schema["fields"].as_array().unwrap();
            for key in object.keys() {
                assert!(
                    fields.iter().any(|f| f["field"] == **key)
                        || NOT_DECLARED.contains(&format!("{path}.{key}").as_str()),
                    "{path}.{key} is not declared in {schema}"
                );
            }
            for f in fields {
                let name = f["field"].as_str().unwrap();
                let at = format!("{path}.{name}");
                match object.get(name) {
                    Some(v) => check(f, v, &at),
                    None => assert!(
                        f["optional"] == true || NOT_WRITTEN_YET.contains(&at.as_str()),
                        "{at}: required but missing"
                    ),
                }
            }
        }
        "array" => {
            for (i, item) in value.as_array().unwrap().iter().enumerate() {
                check(&schema["items"], item, &format!("{path}[{i}]"));
            }
        }
        "map" => {
            for (k, v) in value.as_object().unwrap() {
                check(&schema["values"], v, &format!("{path}.{k}"));
            }
        }
        "string" | "bytes" => assert!(value.is_string(), "{path}: {value} is no {ty}"),
        "int16" | "int32" | "int64" => assert!(
            value.is_i64() || value.is_u64(),
            "{path}: {value} is no {ty}"
        ),
        "float" | "double" => assert!(value.is_number(), "{path}: {value} is no {ty}"),
        "boolean" => assert!(value.is_boolean(), "{path}: {value} is no {ty}"),
        other => panic!("{path}: unknown type {other}"),
    }
}

/// The schema of column `name` in the envelope's `after` struct.
fn after_field<'a>(schema: &'a Json, name: &str) -> &'a Json {
    let after = schema["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["field"] == "after")
        .unwrap();
    after["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["field"] == name)
        .unwrap_or_else(|| panic!("no column {name}"))
}

#[tokio::test]
async fn every_line_carries_debeziums_schema_and_a_payload_that_fits_it() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client.batch_execute(DDL).await.unwrap();
    // Its own statement: a slot is not created in a transaction that wrote.
    client
        .batch_execute("SELECT pg_create_logical_replication_slot('schemas', 'pgoutput')")
        .await
        .unwrap();
    client.batch_execute(CHANGES).await.unwrap();

    let events = capture(&client).await;
    assert_eq!(events.len(), 6, "{events:#?}");
    let table = events[0].table.clone().unwrap();
    // Every event of the table shares its schema, so its facts.
    table
        .facts
        .set(catalog_facts(&client, &table).await)
        .unwrap();

    let mut opts = DebeziumOptions::default();
    opts.set("topic.prefix", "app").unwrap();
    opts.set("schemas.enable", "true").unwrap();
    // Decimal values as strings: the `precise` values are another change.
    opts.set("decimal.handling.mode", "string").unwrap();
    let encoder = JsonEncoder::new(JsonFormat::Debezium(opts));
    // Both ways of encoding: one event at a time, and a run of lines.
    let mut one_by_one = Vec::new();
    for e in &events {
        encoder.encode_line_at(e, 1_700_000_000_000, &mut one_by_one);
    }
    let mut run = Vec::new();
    let mut lines = encoder.lines(1_700_000_000_000);
    for e in &events {
        lines.encode_line(e, &mut run);
    }
    assert_eq!(
        String::from_utf8_lossy(&one_by_one),
        String::from_utf8_lossy(&run)
    );

    let text = String::from_utf8(run).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // The key update (`SET id = 3`) is two records, a delete and a create,
    // as Debezium writes it.
    assert_eq!(lines.len(), events.len() + 1);
    let ops: Vec<String> = lines
        .iter()
        .map(|line| {
            let record: Json = serde_json::from_str(line).unwrap();
            let keys: Vec<&String> = record.as_object().unwrap().keys().collect();
            assert_eq!(keys, ["schema", "payload"], "{line}");
            check(&record["schema"], &record["payload"], "payload");
            let op = &record["payload"]["op"];
            let name = if op == "m" {
                "io.debezium.connector.postgresql.MessageValue"
            } else {
                "app.public.orders.Envelope"
            };
            assert_eq!(record["schema"]["name"], name);
            assert_eq!(record["schema"]["version"], if op == "m" { 1 } else { 2 });
            record["payload"]["op"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(ops, ["c", "c", "u", "d", "c", "d", "m"]);

    // A few columns exactly as Debezium declares them, bytes and all.
    let schema: Json = serde_json::from_str::<Json>(lines[0]).unwrap()["schema"].clone();
    let declared = |name: &str| serde_json::to_string(after_field(&schema, name)).unwrap();
    assert_eq!(
        declared("id"),
        r#"{"type":"int32","optional":false,"field":"id"}"#
    );
    assert_eq!(
        declared("created_at"),
        r#"{"type":"string","optional":false,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"created_at"}"#
    );
    assert_eq!(
        declared("mood"),
        r#"{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"sad,ok,happy"},"field":"mood"}"#
    );
    assert_eq!(
        declared("updated"),
        r#"{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"updated"}"#
    );
    assert_eq!(
        declared("price"),
        r#"{"type":"string","optional":true,"field":"price"}"#
    );
    // The payload keeps its shape inside the wrapper.
    let first: Json = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(first["payload"]["after"]["price"], "12.50");
    assert_eq!(first["payload"]["after"]["mood"], "happy");
    assert_eq!(first["payload"]["source"]["table"], "orders");
}
