//! The schemas against Debezium's JSON, written out literally.

use std::sync::Arc;

use cdc_core::types;

use super::column::column_schema;
use super::envelope::record_name;
use super::*;
use crate::encoding::{
    BinaryHandlingMode, DecimalHandlingMode, HstoreHandlingMode, IntervalHandlingMode,
    TimePrecisionMode,
};
use crate::event::{ColumnFacts, ColumnSchema, TableFacts};

const MOOD_OID: u32 = 16_401;
const HSTORE_OID: u32 = 16_500;

/// `numeric(p,s)`'s type modifier.
fn numeric_typmod(p: i32, s: i32) -> i32 {
    ((p << 16) | s) + 4
}

/// `(name, type OID, type modifier, NOT NULL, primary key, facts' type name)`
type Col = (&'static str, u32, i32, bool, bool, &'static str);

/// A realistic table, `public.orders`:
///
/// ```sql
/// CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
/// CREATE TABLE orders (id int4 PRIMARY KEY, name text NOT NULL, price numeric(10,2),
///   amount numeric, created_at timestamptz NOT NULL, updated timestamp(3), day date,
///   t time(3), data bytea, flag bool, doc jsonb, uid uuid, mood mood, tags int4[]);
/// ```
const ORDERS: &[Col] = &[
    ("id", types::INT4, -1, true, true, "int4"),
    ("name", types::TEXT, -1, true, false, "text"),
    ("price", types::NUMERIC, 655_366, false, false, "numeric"),
    ("amount", types::NUMERIC, -1, false, false, "numeric"),
    (
        "created_at",
        types::TIMESTAMPTZ,
        -1,
        true,
        false,
        "timestamptz",
    ),
    ("updated", types::TIMESTAMP, 3, false, false, "timestamp"),
    ("day", types::DATE, -1, false, false, "date"),
    ("t", types::TIME, 3, false, false, "time"),
    ("data", types::BYTEA, -1, false, false, "bytea"),
    ("flag", types::BOOL, -1, false, false, "bool"),
    ("doc", types::JSONB, -1, false, false, "jsonb"),
    ("uid", types::UUID, -1, false, false, "uuid"),
    ("mood", MOOD_OID, -1, false, false, "mood"),
    ("tags", types::INT4_ARRAY, -1, false, false, "_int4"),
];

fn table(name: &str, cols: &[Col], with_facts: bool) -> Arc<TableSchema> {
    let t = TableSchema {
        oid: 16_402,
        schema: "public".into(),
        table: name.into(),
        columns: cols
            .iter()
            .map(|&(name, type_oid, type_modifier, _, pk, _)| ColumnSchema {
                name: name.into(),
                type_oid,
                type_modifier,
                // The default replica identity: the primary key.
                is_key: pk,
            })
            .collect(),
        facts: Default::default(),
    };
    if with_facts {
        let facts = TableFacts {
            columns: cols
                .iter()
                .map(
                    |&(_, type_oid, _, not_null, primary_key, type_name)| ColumnFacts {
                        not_null,
                        primary_key,
                        type_name: Some(type_name.into()),
                        enum_labels: (type_oid == MOOD_OID)
                            .then(|| ["sad", "ok", "happy"].map(Arc::from).into()),
                        domain_base_oid: None,
                    },
                )
                .collect(),
        };
        t.facts.set(facts).unwrap();
    }
    Arc::new(t)
}

fn app() -> DebeziumOptions {
    DebeziumOptions {
        name: "app".to_owned(),
        ..DebeziumOptions::default()
    }
}

/// `json` without the whitespace between tokens (the literal JSON below is
/// indented for reading).
fn compact(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut out = Vec::new();
    f(&mut out);
    String::from_utf8(out).unwrap()
}

/// The schema of column `name` of `t` as a struct field.
fn field(t: &TableSchema, name: &str, opts: &DebeziumOptions) -> String {
    let i = t.column_index(name).unwrap();
    text(|out| column_schema(&t.columns[i], t.column_facts(i), opts).write(out, Some(name)))
}

/// Debezium 2.7's `source` block and the fields after it, the same for
/// every table.
const SOURCE_TO_END: &str = r#"
{"type":"struct","fields":[
  {"type":"string","optional":false,"field":"version"},
  {"type":"string","optional":false,"field":"connector"},
  {"type":"string","optional":false,"field":"name"},
  {"type":"int64","optional":false,"field":"ts_ms"},
  {"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,
   "parameters":{"allowed":"true,last,false,incremental"},"default":"false","field":"snapshot"},
  {"type":"string","optional":false,"field":"db"},
  {"type":"string","optional":true,"field":"sequence"},
  {"type":"int64","optional":true,"field":"ts_us"},
  {"type":"int64","optional":true,"field":"ts_ns"},
  {"type":"string","optional":false,"field":"schema"},
  {"type":"string","optional":false,"field":"table"},
  {"type":"int64","optional":true,"field":"txId"},
  {"type":"int64","optional":true,"field":"lsn"},
  {"type":"int64","optional":true,"field":"xmin"}
 ],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"},
{"type":"struct","fields":[
  {"type":"string","optional":false,"field":"id"},
  {"type":"int64","optional":false,"field":"total_order"},
  {"type":"int64","optional":false,"field":"data_collection_order"}
 ],"optional":true,"name":"event.block","version":1,"field":"transaction"},
{"type":"string","optional":false,"field":"op"},
{"type":"int64","optional":true,"field":"ts_ms"},
{"type":"int64","optional":true,"field":"ts_us"},
{"type":"int64","optional":true,"field":"ts_ns"}
"#;

/// The columns of `orders` in the default modes.
const ORDERS_COLUMNS: &str = r#"
  {"type":"int32","optional":false,"field":"id"},
  {"type":"string","optional":false,"field":"name"},
  {"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,
   "parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"price"},
  {"type":"struct","fields":[
     {"type":"int32","optional":false,"field":"scale"},
     {"type":"bytes","optional":false,"field":"value"}
   ],"optional":true,"name":"io.debezium.data.VariableScaleDecimal","version":1,
   "doc":"Variable scaled decimal","field":"amount"},
  {"type":"string","optional":false,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"created_at"},
  {"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"updated"},
  {"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"day"},
  {"type":"int32","optional":true,"name":"io.debezium.time.Time","version":1,"field":"t"},
  {"type":"bytes","optional":true,"field":"data"},
  {"type":"boolean","optional":true,"field":"flag"},
  {"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"doc"},
  {"type":"string","optional":true,"name":"io.debezium.data.Uuid","version":1,"field":"uid"},
  {"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,
   "parameters":{"allowed":"sad,ok,happy"},"field":"mood"},
  {"type":"array","items":{"type":"int32","optional":true},"optional":true,"field":"tags"}
"#;

#[test]
fn the_envelope_schema_of_a_realistic_table_is_debeziums() {
    let t = table("orders", ORDERS, true);
    let want = format!(
        r#"{{"type":"struct","fields":[
          {{"type":"struct","fields":[{ORDERS_COLUMNS}],"optional":true,"name":"app.public.orders.Value","field":"before"}},
          {{"type":"struct","fields":[{ORDERS_COLUMNS}],"optional":true,"name":"app.public.orders.Value","field":"after"}},
          {SOURCE_TO_END}
        ],"optional":false,"name":"app.public.orders.Envelope","version":2}}"#
    );
    let got = text(|out| write_value_schema(out, &t, &app()));
    assert_eq!(got, compact(&want));
    // And it is JSON.
    serde_json::from_str::<serde_json::Value>(&got).unwrap();
}

#[test]
fn the_key_schema_holds_the_primary_key() {
    let t = table("orders", ORDERS, true);
    assert_eq!(
        text(|out| write_key_schema(out, &t, &app())),
        compact(
            r#"{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],
                "optional":false,"name":"app.public.orders.Key"}"#
        )
    );
    // No key columns: a null key, so a null schema.
    let keyless = table(
        "log",
        &[("line", types::TEXT, -1, false, false, "text")],
        true,
    );
    assert_eq!(text(|out| write_key_schema(out, &keyless, &app())), "null");
}

#[test]
fn without_catalog_facts_every_column_is_optional_and_the_key_is_the_identity() {
    let t = table("orders", ORDERS, false);
    let opts = app();
    assert_eq!(
        field(&t, "id", &opts),
        r#"{"type":"int32","optional":true,"field":"id"}"#
    );
    // An enum without its labels is declared as the text it is written as.
    assert_eq!(
        field(&t, "mood", &opts),
        r#"{"type":"string","optional":true,"field":"mood"}"#
    );
    assert_eq!(
        text(|out| write_key_schema(out, &t, &opts)),
        compact(
            r#"{"type":"struct","fields":[{"type":"int32","optional":true,"field":"id"}],
                "optional":false,"name":"app.public.orders.Key"}"#
        )
    );
}

#[test]
fn decimal_handling_modes_change_numeric_columns() {
    let t = table("orders", ORDERS, true);
    let mut opts = app();
    opts.decimal_handling_mode = DecimalHandlingMode::String;
    assert_eq!(
        field(&t, "price", &opts),
        r#"{"type":"string","optional":true,"field":"price"}"#
    );
    assert_eq!(
        field(&t, "amount", &opts),
        r#"{"type":"string","optional":true,"field":"amount"}"#
    );
    opts.decimal_handling_mode = DecimalHandlingMode::Double;
    assert_eq!(
        field(&t, "price", &opts),
        r#"{"type":"double","optional":true,"field":"price"}"#
    );
    assert_eq!(
        field(&t, "amount", &opts),
        r#"{"type":"double","optional":true,"field":"amount"}"#
    );
}

#[test]
fn time_precision_modes_change_temporal_columns() {
    let t = table("orders", ORDERS, true);
    let mut opts = app();
    opts.time_precision_mode = TimePrecisionMode::AdaptiveTimeMicroseconds;
    assert_eq!(
        field(&t, "t", &opts),
        r#"{"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1,"field":"t"}"#
    );
    assert_eq!(
        field(&t, "updated", &opts),
        r#"{"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1,"field":"updated"}"#
    );
    assert_eq!(
        field(&t, "day", &opts),
        r#"{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"day"}"#
    );
    opts.time_precision_mode = TimePrecisionMode::Connect;
    assert_eq!(
        field(&t, "t", &opts),
        r#"{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Time","version":1,"field":"t"}"#
    );
    assert_eq!(
        field(&t, "updated", &opts),
        r#"{"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1,"field":"updated"}"#
    );
    assert_eq!(
        field(&t, "day", &opts),
        r#"{"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Date","version":1,"field":"day"}"#
    );
    // Time zones are strings in every mode.
    assert_eq!(
        field(&t, "created_at", &opts),
        r#"{"type":"string","optional":false,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"created_at"}"#
    );
}

#[test]
fn adaptive_precision_follows_the_declared_fractional_digits() {
    let cols: &[Col] = &[
        ("ts0", types::TIMESTAMP, 0, false, false, "timestamp"),
        ("ts4", types::TIMESTAMP, 4, false, false, "timestamp"),
        ("ts", types::TIMESTAMP, -1, false, false, "timestamp"),
        ("tm6", types::TIME, 6, false, false, "time"),
        ("tz", types::TIMETZ, -1, false, false, "timetz"),
    ];
    let t = table("times", cols, true);
    let opts = app();
    let named = |ty: &str, name: &str, f: &str| {
        format!(r#"{{"type":"{ty}","optional":true,"name":"{name}","version":1,"field":"{f}"}}"#)
    };
    assert_eq!(
        field(&t, "ts0", &opts),
        named("int64", "io.debezium.time.Timestamp", "ts0")
    );
    assert_eq!(
        field(&t, "ts4", &opts),
        named("int64", "io.debezium.time.MicroTimestamp", "ts4")
    );
    assert_eq!(
        field(&t, "ts", &opts),
        named("int64", "io.debezium.time.MicroTimestamp", "ts")
    );
    assert_eq!(
        field(&t, "tm6", &opts),
        named("int64", "io.debezium.time.MicroTime", "tm6")
    );
    assert_eq!(
        field(&t, "tz", &opts),
        named("string", "io.debezium.time.ZonedTime", "tz")
    );
}

#[test]
fn binary_handling_modes_other_than_bytes_declare_strings() {
    let t = table("orders", ORDERS, true);
    for mode in [
        BinaryHandlingMode::Base64,
        BinaryHandlingMode::Base64UrlSafe,
        BinaryHandlingMode::Hex,
    ] {
        let opts = DebeziumOptions {
            binary_handling_mode: mode,
            ..app()
        };
        assert_eq!(
            field(&t, "data", &opts),
            r#"{"type":"string","optional":true,"field":"data"}"#,
            "{mode:?}"
        );
    }
}

#[test]
fn interval_and_hstore_modes() {
    let cols: &[Col] = &[
        ("iv", types::INTERVAL, -1, false, false, "interval"),
        ("h", HSTORE_OID, -1, true, false, "hstore"),
        ("hs", HSTORE_OID + 1, -1, false, false, "_hstore"),
    ];
    let t = table("kv", cols, true);
    let mut opts = app();
    assert_eq!(
        field(&t, "iv", &opts),
        r#"{"type":"int64","optional":true,"name":"io.debezium.time.MicroDuration","version":1,"field":"iv"}"#
    );
    assert_eq!(
        field(&t, "h", &opts),
        r#"{"type":"string","optional":false,"name":"io.debezium.data.Json","version":1,"field":"h"}"#
    );
    opts.interval_handling_mode = IntervalHandlingMode::String;
    opts.hstore_handling_mode = HstoreHandlingMode::Map;
    assert_eq!(
        field(&t, "iv", &opts),
        r#"{"type":"string","optional":true,"name":"io.debezium.time.Interval","version":1,"field":"iv"}"#
    );
    assert_eq!(
        field(&t, "h", &opts),
        compact(
            r#"{"type":"map","keys":{"type":"string","optional":false},
                "values":{"type":"string","optional":true},"optional":false,"field":"h"}"#
        )
    );
    assert_eq!(
        field(&t, "hs", &opts),
        compact(
            r#"{"type":"array","items":{"type":"map","keys":{"type":"string","optional":false},
                "values":{"type":"string","optional":true},"optional":true},"optional":true,"field":"hs"}"#
        )
    );
}

#[test]
fn other_types_map_as_debezium_maps_them() {
    let cols: &[Col] = &[
        ("b8", 1560, 8, false, false, "bit"),
        ("b1", 1560, 1, false, false, "bit"),
        ("x", 142, -1, false, false, "xml"),
        ("p", 600, -1, false, false, "point"),
        ("m", 790, -1, false, false, "money"),
        ("o", types::OID, -1, false, false, "oid"),
        ("ch", types::BPCHAR, 5, false, false, "bpchar"),
        ("r", 3904, -1, false, false, "int4range"),
        ("l", 16_600, -1, false, false, "ltree"),
        ("ci", 16_601, -1, false, false, "citext"),
        ("moods", MOOD_OID + 1, -1, false, false, "_mood"),
        ("odd", MOOD_OID + 2, -1, false, false, "_odd"),
        (
            "nums",
            types::NUMERIC_ARRAY,
            numeric_typmod(5, 1),
            false,
            false,
            "_numeric",
        ),
        (
            "stamps",
            types::TIMESTAMPTZ_ARRAY,
            -1,
            false,
            false,
            "_timestamptz",
        ),
    ];
    let mut t = TableSchema::clone(&table("misc", cols, true));
    // An enum whose name starts like an array type's: its labels say it
    // is an enum.
    let mut facts = t.facts.get().unwrap().clone();
    facts.columns[11].enum_labels = Some(["a", "b"].map(Arc::from).into());
    t.facts = Default::default();
    t.facts.set(facts).unwrap();
    let opts = app();
    let want = [
        (
            "b8",
            r#"{"type":"bytes","optional":true,"name":"io.debezium.data.Bits","version":1,"parameters":{"length":"8"},"field":"b8"}"#,
        ),
        ("b1", r#"{"type":"boolean","optional":true,"field":"b1"}"#),
        (
            "x",
            r#"{"type":"string","optional":true,"name":"io.debezium.data.Xml","version":1,"field":"x"}"#,
        ),
        (
            "p",
            r#"{"type":"struct","fields":[{"type":"double","optional":false,"field":"x"},{"type":"double","optional":false,"field":"y"},{"type":"bytes","optional":true,"field":"wkb"},{"type":"int32","optional":true,"field":"srid"}],"optional":true,"name":"io.debezium.data.geometry.Point","version":1,"doc":"Geometry (POINT)","field":"p"}"#,
        ),
        (
            "m",
            r#"{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2"},"field":"m"}"#,
        ),
        ("o", r#"{"type":"int64","optional":true,"field":"o"}"#),
        ("ch", r#"{"type":"string","optional":true,"field":"ch"}"#),
        ("r", r#"{"type":"string","optional":true,"field":"r"}"#),
        (
            "l",
            r#"{"type":"string","optional":true,"name":"io.debezium.data.Ltree","version":1,"field":"l"}"#,
        ),
        ("ci", r#"{"type":"string","optional":true,"field":"ci"}"#),
        (
            "moods",
            // Without its element's labels (see `column_schema`).
            r#"{"type":"array","items":{"type":"string","optional":true},"optional":true,"field":"moods"}"#,
        ),
        (
            "odd",
            r#"{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"a,b"},"field":"odd"}"#,
        ),
        (
            "nums",
            r#"{"type":"array","items":{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"1","connect.decimal.precision":"5"}},"optional":true,"field":"nums"}"#,
        ),
        (
            "stamps",
            r#"{"type":"array","items":{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1},"optional":true,"field":"stamps"}"#,
        ),
    ];
    for (name, json) in want {
        assert_eq!(field(&t, name, &opts), json, "{name}");
    }
}

#[test]
fn a_domain_is_declared_as_its_base_type() {
    let cols: &[Col] = &[("qty", 16_700, -1, true, false, "positive_int")];
    let mut t = TableSchema::clone(&table("d", cols, true));
    let mut facts = t.facts.get().unwrap().clone();
    facts.columns[0].domain_base_oid = Some(types::INT4);
    t.facts = Default::default();
    t.facts.set(facts).unwrap();
    assert_eq!(
        field(&t, "qty", &app()),
        r#"{"type":"int32","optional":false,"field":"qty"}"#
    );
}

#[test]
fn record_names_are_sanitised_like_topic_names() {
    let mut opts = app();
    opts.name = "my app".to_owned();
    let t = TableSchema {
        oid: 1,
        schema: "Sales-EU".into(),
        table: "Orders 2024/€😀".into(),
        columns: Vec::new(),
        facts: Default::default(),
    };
    // One `_` per UTF-16 unit: `€` is one, the emoji two.
    assert_eq!(record_name(&opts, &t), "my_app.Sales-EU.Orders_2024____");
    let long = TableSchema {
        table: "t".repeat(300).into(),
        ..t
    };
    assert_eq!(record_name(&opts, &long).len(), 249);
}

#[test]
fn transaction_records_have_debeziums_schemas() {
    assert_eq!(
        text(write_transaction_value_schema),
        compact(
            r#"{"type":"struct","fields":[
                {"type":"string","optional":false,"field":"status"},
                {"type":"string","optional":false,"field":"id"},
                {"type":"int64","optional":true,"field":"event_count"},
                {"type":"array","items":{"type":"struct","fields":[
                    {"type":"string","optional":false,"field":"data_collection"},
                    {"type":"int64","optional":false,"field":"event_count"}
                  ],"optional":true,"name":"event.collection","version":1},
                 "optional":true,"field":"data_collections"},
                {"type":"int64","optional":false,"field":"ts_ms"}
              ],"optional":false,"name":"io.debezium.connector.common.TransactionMetadataValue","version":1}"#
        )
    );
    assert_eq!(
        text(write_transaction_key_schema),
        compact(
            r#"{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"}],
                "optional":false,"name":"io.debezium.connector.common.TransactionMetadataKey","version":1}"#
        )
    );
}

#[test]
fn the_cache_renders_a_table_once_and_again_when_its_facts_arrive() {
    let cache = SchemaCache::default();
    let opts = app();
    let t = table("orders", ORDERS, false);
    let first = cache.get(&t, &opts);
    let again = cache.get(&t, &opts);
    assert!(Arc::ptr_eq(&first, &again), "rendered once");
    assert_eq!(cache.len(), 1);

    // The same table schema, its facts now known: rendered again.
    t.facts
        .set(table("orders", ORDERS, true).facts.get().unwrap().clone())
        .unwrap();
    let with_facts = cache.get(&t, &opts);
    assert!(!Arc::ptr_eq(&first, &with_facts));
    assert_eq!(
        &*with_facts.value,
        text(|out| write_value_schema(out, &t, &opts)).as_bytes()
    );
    assert_eq!(cache.len(), 1);

    // An equal but distinct table schema (a new relation message) is
    // another entry; the oldest goes past the capacity.
    let other = table("orders", ORDERS, true);
    assert!(!Arc::ptr_eq(&cache.get(&other, &opts), &with_facts));
    assert_eq!(cache.len(), 2);
    let tables: Vec<_> = (0..100).map(|_| table("x", ORDERS, true)).collect();
    for t in &tables {
        cache.get(t, &opts);
    }
    assert_eq!(cache.len(), 64);
}

#[test]
fn wrapping_puts_the_schema_before_the_payload() {
    let got = text(|out| write_wrapped(out, b"null", |out| out.extend_from_slice(b"{\"a\":1}")));
    assert_eq!(got, r#"{"schema":null,"payload":{"a":1}}"#);
}

/// An insert into `orders` and a logical message.
fn events(t: &Arc<TableSchema>) -> Vec<crate::event::ChangeEvent> {
    use crate::event::{ChangeEvent, MessagePayload, Operation, Row, SourceInfo};
    use cdc_core::{Lsn, Value};
    let source = SourceInfo {
        commit_lsn: Lsn::from_u64(0x200),
        lsn: Lsn::from_u64(0x100),
        xid: 755,
        commit_time: None,
        database: "appdb".into(),
        slot: "slot".into(),
    };
    let mut row: Vec<Value<'static>> = vec![Value::Null; t.columns.len()];
    row[0] = Value::Int4(1);
    row[1] = Value::Text("a".into());
    let insert = ChangeEvent {
        op: Operation::Create,
        table: Some(t.clone()),
        before: None,
        after: Some(Row::from_values(row)),
        message: None,
        schema_change: None,
        source: source.clone(),
        index: 0,
        position: Default::default(),
        boundary: None,
    };
    let message = ChangeEvent {
        op: Operation::Message,
        table: None,
        before: None,
        after: None,
        message: Some(MessagePayload {
            transactional: true,
            prefix: "p".into(),
            content: b"hi".to_vec(),
        }),
        schema_change: None,
        source,
        index: 1,
        position: Default::default(),
        boundary: None,
    };
    vec![insert, message]
}

#[test]
fn the_encoder_wraps_each_envelope_with_its_schema_when_schemas_are_enabled() {
    use crate::encoding::{JsonEncoder, JsonFormat};
    let t = table("orders", ORDERS, true);
    let evs = events(&t);
    let now = 1_700_000_000_123;
    let plain = JsonEncoder::new(JsonFormat::Debezium(app()));
    let wrapping = JsonEncoder::new(JsonFormat::Debezium(DebeziumOptions {
        schemas_enable: true,
        ..app()
    }));
    let schema = text(|out| write_value_schema(out, &t, &app()));
    let message = text(|out| write_message_value_schema(out, &app()));
    for (i, ev) in evs.iter().enumerate() {
        let payload = text(|out| plain.encode_at(ev, now, out));
        let want = match i {
            0 => format!(r#"{{"schema":{schema},"payload":{payload}}}"#),
            // A message: its record's own schema.
            _ => format!(r#"{{"schema":{message},"payload":{payload}}}"#),
        };
        assert_eq!(text(|out| wrapping.encode_at(ev, now, out)), want);
        // The run-of-lines encoder writes the same bytes.
        let mut lines = wrapping.lines(now);
        assert_eq!(text(|out| lines.encode_line(ev, out)), format!("{want}\n"));
    }
}

#[test]
fn logical_decoding_messages_have_debeziums_message_schema() {
    let want = format!(
        r#"{{"type":"struct","fields":[
            {{"type":"string","optional":false,"field":"op"}},
            {{"type":"int64","optional":true,"field":"ts_ms"}},
            {SOURCE}
            {{"type":"struct","fields":[
                {{"type":"string","optional":true,"field":"prefix"}},
                {{"type":"bytes","optional":true,"field":"content"}}
              ],"optional":false,"name":"io.debezium.connector.postgresql.Message","version":1,"field":"message"}}
          ],"optional":false,"name":"io.debezium.connector.postgresql.MessageValue","version":1}}"#,
        // The same `source` block as a table's, up to its end.
        SOURCE = &SOURCE_TO_END[..SOURCE_TO_END.find(r#""field":"source"},"#).unwrap() + 18]
    );
    assert_eq!(
        text(|out| write_message_value_schema(out, &app())),
        compact(&want)
    );
    // The content follows binary.handling.mode.
    let hex = DebeziumOptions {
        binary_handling_mode: BinaryHandlingMode::Hex,
        ..app()
    };
    assert!(text(|out| write_message_value_schema(out, &hex))
        .contains(r#"{"type":"string","optional":true,"field":"content"}"#));
    assert_eq!(
        text(write_message_key_schema),
        compact(
            r#"{"type":"struct","fields":[{"type":"string","optional":true,"field":"prefix"}],
                "optional":false,"name":"io.debezium.connector.postgresql.MessageKey","version":1}"#
        )
    );
}

fn mode<T: Copy>(choices: &[T], i: usize) -> T {
    choices[i % choices.len()]
}

proptest::proptest! {
    /// Whatever the server sends (type OIDs, type modifiers, names) and
    /// whatever the modes, the schema is valid JSON, names every column,
    /// and a column is optional exactly when it is not `NOT NULL`.
    #[test]
    fn any_column_gives_a_valid_schema(
        oid in proptest::prop_oneof![
            proptest::sample::select(cdc_core::types::SCALARS.to_vec()),
            proptest::sample::select(cdc_core::types::array_types().collect::<Vec<_>>()),
            proptest::sample::select(vec![142u32, 600, 790, 1560, 1561, 1562, 3904, 3914]),
            proptest::prelude::any::<u32>(),
        ],
        typmod in proptest::prelude::any::<i32>(),
        name in ".{0,12}",
        type_name in proptest::option::of("_?[a-z]{0,8}"),
        labels in proptest::option::of(proptest::collection::vec(".{0,5}", 0..4)),
        not_null in proptest::prelude::any::<bool>(),
        modes in proptest::prelude::any::<[usize; 5]>(),
    ) {
        let t = TableSchema {
            oid: 1,
            schema: "s".into(),
            table: "t".into(),
            columns: vec![ColumnSchema { name: name.as_str().into(), type_oid: oid, type_modifier: typmod, is_key: true }],
            facts: Default::default(),
        };
        t.facts.set(TableFacts { columns: vec![ColumnFacts {
            not_null,
            primary_key: false,
            type_name: type_name.map(|n| n.as_str().into()),
            enum_labels: labels.map(|l| l.iter().map(|s| Arc::from(s.as_str())).collect()),
            domain_base_oid: None,
        }] }).unwrap();
        let opts = DebeziumOptions {
            time_precision_mode: mode(&[TimePrecisionMode::Adaptive, TimePrecisionMode::AdaptiveTimeMicroseconds, TimePrecisionMode::Connect], modes[0]),
            decimal_handling_mode: mode(&[DecimalHandlingMode::Precise, DecimalHandlingMode::String, DecimalHandlingMode::Double], modes[1]),
            binary_handling_mode: mode(&[BinaryHandlingMode::Bytes, BinaryHandlingMode::Base64, BinaryHandlingMode::Hex], modes[2]),
            interval_handling_mode: mode(&[IntervalHandlingMode::Numeric, IntervalHandlingMode::String], modes[3]),
            hstore_handling_mode: mode(&[HstoreHandlingMode::Json, HstoreHandlingMode::Map], modes[4]),
            ..app()
        };
        let json = text(|out| write_value_schema(out, &t, &opts));
        let schema: serde_json::Value = serde_json::from_str(&json).unwrap();
        let column = &schema["fields"][1]["fields"][0];
        proptest::prop_assert_eq!(&column["field"], &serde_json::Value::from(name));
        proptest::prop_assert_eq!(&column["optional"], &serde_json::Value::from(!not_null));
        let key = text(|out| write_key_schema(out, &t, &opts));
        serde_json::from_str::<serde_json::Value>(&key).unwrap();
    }
}
