//! Rows through [`write_debezium_row`]: placeholders, required defaults,
//! types known from the catalog facts. Expected values from Debezium's
//! converters (see the modules' docs), not from this code's output.

use std::sync::Arc;

use cdc_core::{decode_text, types, Oid, Value};
use serde_json::{json, Value as Json};

use super::*;
use crate::encoding::{
    BinaryHandlingMode, DecimalHandlingMode, HstoreHandlingMode, IntervalHandlingMode, Placeholder,
    TimePrecisionMode,
};
use crate::event::TableFacts;

fn col(name: &str, type_oid: Oid, typmod: i32, is_key: bool) -> ColumnSchema {
    ColumnSchema {
        name: name.into(),
        type_oid,
        type_modifier: typmod,
        is_key,
    }
}

fn facts(not_null: bool, type_name: Option<&str>) -> ColumnFacts {
    ColumnFacts {
        not_null,
        type_name: type_name.map(Arc::from),
        ..ColumnFacts::default()
    }
}

fn table(columns: Vec<ColumnSchema>, facts: Option<Vec<ColumnFacts>>) -> TableSchema {
    let t = TableSchema {
        facts: Default::default(),
        oid: 1,
        schema: "public".into(),
        table: "t".into(),
        columns,
    };
    if let Some(columns) = facts {
        t.facts.set(TableFacts { columns }).unwrap();
    }
    t
}

fn row(t: &TableSchema, role: RowRole, values: Vec<Value<'static>>, o: &DebeziumOptions) -> Json {
    let r = Row::from_values(values);
    let mut with_keys = Vec::new();
    write_debezium_row(&mut with_keys, t, Some(&r), role, o, Some(&RowKeys::new(t)));
    let mut without = Vec::new();
    write_debezium_row(&mut without, t, Some(&r), role, o, None);
    assert_eq!(with_keys, without, "the same bytes with and without keys");
    serde_json::from_slice(&with_keys)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&with_keys)))
}

fn v(oid: Oid, text: &str) -> Value<'static> {
    decode_text(oid, text.as_bytes()).unwrap().into_owned()
}

#[test]
fn unchanged_toast_placeholder_is_typed_per_column() {
    let cols = vec![
        col("id", types::INT4, -1, true),
        col("doc", types::TEXT, -1, false),
        col("bin", types::BYTEA, -1, false),
        col("tags", types::TEXT_ARRAY, -1, false),
        col("ints", types::INT4_ARRAY, -1, false),
        col("longs", types::INT8_ARRAY, -1, false),
        col("js", types::JSONB, -1, false),
        col("num", types::NUMERIC, -1, false),
        col("h", 16_500, -1, false),
    ];
    let mut f = vec![ColumnFacts::default(); cols.len()];
    f[8] = facts(false, Some("hstore"));
    let t = table(cols, Some(f));
    let mut values = vec![Value::Int4(1)];
    values.resize(9, Value::UnchangedToast);
    let mut o = DebeziumOptions::default();
    o.set("unavailable.value.placeholder", "hex:41ff").unwrap();
    let ph = o.unavailable_value_placeholder.text().to_owned();
    let got = row(&t, RowRole::After, values.clone(), &o);
    assert_eq!(got["doc"], json!(ph));
    assert_eq!(got["bin"], json!("Qf8="), "the bytes, base64");
    assert_eq!(got["tags"], json!([ph]));
    assert_eq!(got["ints"], json!([65, -1]), "Java's signed bytes");
    assert_eq!(got["longs"], json!([65, -1]));
    assert_eq!(got["js"], json!(ph));
    assert_eq!(got["num"], json!(ph));
    assert_eq!(got["h"], json!(format!("{{{0:?}:{0:?}}}", ph.as_str())));

    let o = DebeziumOptions {
        binary_handling_mode: BinaryHandlingMode::Hex,
        hstore_handling_mode: HstoreHandlingMode::Map,
        ..DebeziumOptions::default()
    };
    let got = row(&t, RowRole::After, values, &o);
    assert_eq!(
        got["bin"],
        json!(UNAVAILABLE_VALUE),
        "text in the other modes"
    );
    assert_eq!(got["h"], json!({UNAVAILABLE_VALUE: UNAVAILABLE_VALUE}));
    assert_eq!(
        got["ints"].as_array().unwrap().len(),
        UNAVAILABLE_VALUE.len()
    );
    assert_eq!(got["ints"][0], json!(95), "'_'");
}

/// A delete's `before` under the default replica identity: the key, the
/// NOT NULL columns with their types' defaults, the nullable ones null.
#[test]
fn before_rows_get_required_defaults() {
    let specs: Vec<(&str, Oid, i32, Json)> = vec![
        ("b", types::BOOL, -1, json!(false)),
        ("i2", types::INT2, -1, json!(0)),
        ("i8", types::INT8, -1, json!(0)),
        ("f8", types::FLOAT8, -1, json!(0.0)),
        ("n", types::NUMERIC, (10 << 16 | 2) + 4, json!("AA==")),
        (
            "nv",
            types::NUMERIC,
            -1,
            json!({"scale": 0, "value": "AA=="}),
        ),
        ("txt", types::TEXT, -1, json!("")),
        ("vc", types::VARCHAR, 14, json!("")),
        ("by", types::BYTEA, -1, json!("")),
        ("u", types::UUID, -1, json!("")),
        ("js", types::JSONB, -1, json!("")),
        ("d", types::DATE, -1, json!(0)),
        ("tm", types::TIME, -1, json!(0)),
        ("ts", types::TIMESTAMP, -1, json!(0)),
        (
            "tstz",
            types::TIMESTAMPTZ,
            -1,
            json!("1970-01-01T00:00:00Z"),
        ),
        ("ttz", types::TIMETZ, -1, json!("00:00:00Z")),
        ("iv", types::INTERVAL, -1, json!(0)),
        ("arr", types::INT4_ARRAY, -1, json!([])),
        ("m", debezium::MONEY, -1, json!("AA==")),
        ("bit1", debezium::BIT, 1, json!(false)),
        ("bits", debezium::BIT, 8, json!("")),
        (
            "pt",
            debezium::POINT,
            -1,
            json!({"x": 0.0, "y": 0.0, "wkb": "AQEAAAAAAAAAAAAAAAAAAAAAAAAA", "srid": null}),
        ),
    ];
    let mut cols = vec![col("id", types::INT4, -1, true)];
    let mut f = vec![facts(true, Some("int4"))];
    for (name, oid, typmod, _) in &specs {
        cols.push(col(name, *oid, *typmod, false));
        f.push(facts(true, None));
    }
    cols.push(col("nullable", types::TEXT, -1, false));
    f.push(facts(false, None));
    let t = table(cols.clone(), Some(f));
    let mut values = vec![Value::Int4(7)];
    values.resize(cols.len(), Value::Null);
    let o = DebeziumOptions::default();
    let got = row(&t, RowRole::Before, values.clone(), &o);
    assert_eq!(got["id"], json!(7));
    for (name, _, _, want) in &specs {
        assert_eq!(&got[name], want, "{name}");
    }
    assert_eq!(got["nullable"], Json::Null);
    // The `after` image and a full identity keep nulls as they are.
    let after = row(&t, RowRole::After, values.clone(), &o);
    assert_eq!(after["b"], Json::Null);
    let mut full = cols.clone();
    for c in &mut full {
        c.is_key = true;
    }
    let ft = table(full, Some(vec![facts(true, None); cols.len()]));
    assert_eq!(
        row(&ft, RowRole::Before, values.clone(), &o)["b"],
        Json::Null
    );
    // Without facts every column is nullable.
    let bare = table(cols, None);
    assert_eq!(
        row(&bare, RowRole::Before, values.clone(), &o)["b"],
        Json::Null
    );
    // Other modes.
    let o = DebeziumOptions {
        decimal_handling_mode: DecimalHandlingMode::String,
        interval_handling_mode: IntervalHandlingMode::String,
        ..DebeziumOptions::default()
    };
    let got = row(&t, RowRole::Before, values.clone(), &o);
    assert_eq!(got["n"], json!("0.00"));
    assert_eq!(got["nv"], json!("0"));
    assert_eq!(got["m"], json!("0.00"));
    assert_eq!(got["iv"], json!("P0Y0M0DT0H0M0S"));
    let o = DebeziumOptions {
        decimal_handling_mode: DecimalHandlingMode::Double,
        ..DebeziumOptions::default()
    };
    assert_eq!(row(&t, RowRole::Before, values, &o)["m"], json!(0.0));
}

#[test]
fn catalog_facts_decide_hstore_domains_and_enums() {
    let cols = vec![
        col("h", 16_400, -1, false),
        col("dom", 16_401, (8 << 16 | 2) + 4, false),
        col("mood", 16_402, -1, false),
        col("money", debezium::MONEY, -1, false),
        col("bits", debezium::VARBIT, 16, false),
        col("bit1", debezium::BIT, 1, false),
        col("pt", debezium::POINT, -1, false),
        col("moods", 16_403, -1, false),
    ];
    let mut f = vec![ColumnFacts::default(); cols.len()];
    f[7] = facts(false, Some("_mood"));
    f[0] = facts(false, Some("hstore"));
    f[1] = ColumnFacts {
        domain_base_oid: Some(types::NUMERIC),
        ..facts(false, Some("price"))
    };
    f[2] = ColumnFacts {
        enum_labels: Some(Arc::from(vec![Arc::from("happy")])),
        ..facts(false, Some("mood"))
    };
    let t = table(cols, Some(f));
    let values = vec![
        v(16_400, r#""b"=>"2", "a"=>NULL"#),
        v(16_401, "12.50"),
        v(16_402, "happy"),
        v(debezium::MONEY, "-$1,234.11"),
        v(debezium::VARBIT, "0000000100000010"),
        v(debezium::BIT, "1"),
        v(debezium::POINT, "(1.5,2)"),
        v(16_403, "{sad,NULL,\"happy\"}"),
    ];
    let o = DebeziumOptions::default();
    let got = row(&t, RowRole::After, values.clone(), &o);
    assert_eq!(got["h"], json!(r#"{"a":null,"b":"2"}"#));
    // 1250 = 0x04e2.
    assert_eq!(got["dom"], json!("BOI="));
    assert_eq!(got["mood"], json!("happy"));
    // -123411 = 0xfe1ded.
    assert_eq!(got["money"], json!("/h3t"));
    assert_eq!(got["bits"], json!("AgE="));
    assert_eq!(got["bit1"], json!(true));
    assert_eq!(got["pt"]["x"], json!(1.5));
    assert_eq!(got["moods"], json!(["sad", null, "happy"]));
    let o = DebeziumOptions {
        hstore_handling_mode: HstoreHandlingMode::Map,
        decimal_handling_mode: DecimalHandlingMode::String,
        time_precision_mode: TimePrecisionMode::Connect,
        ..DebeziumOptions::default()
    };
    let got = row(&t, RowRole::After, values, &o);
    assert_eq!(got["h"], json!({"a": null, "b": "2"}));
    assert_eq!(got["dom"], json!("12.50"));
    assert_eq!(got["money"], json!("-1234.11"));
}

#[test]
fn rows_without_columns_or_row() {
    let t = table(vec![], None);
    let o = DebeziumOptions {
        unavailable_value_placeholder: Placeholder::default(),
        ..DebeziumOptions::default()
    };
    assert_eq!(row(&t, RowRole::After, vec![], &o), json!({}));
    let mut out = Vec::new();
    write_debezium_row(&mut out, &t, None, RowRole::Before, &o, None);
    assert_eq!(out, b"null");
}

/// Column `c`'s text as the server sent it (`text`) writes the bytes its
/// decoded `value` writes, in `style`.
fn assert_wire_writes_as_value(
    c: &ColumnSchema,
    text: &str,
    value: &Value<'static>,
    style: ValueStyle<'_>,
) {
    let mut copied = Vec::new();
    let wire = cdc_core::TupleValue::Text(text.as_bytes());
    write_cell(&mut copied, c, None, Cell::Wire(wire), style);
    let mut decoded = Vec::new();
    write_cell(&mut decoded, c, None, Cell::Value(value), style);
    assert_eq!(
        String::from_utf8_lossy(&copied),
        String::from_utf8_lossy(&decoded),
        "{text} typmod {} {style:?}",
        c.type_modifier
    );
}

/// A `timestamptz` as the server's text is written as its decoded value in
/// both styles: copied in the Debezium style when in UTC, decoded otherwise.
#[test]
fn timestamptz_text_writes_as_its_value_in_both_styles() {
    let o = DebeziumOptions::default();
    for typmod in [-1, 0, 3] {
        let c = col("ts", types::TIMESTAMPTZ, typmod, false);
        for text in [
            "2024-01-15 04:05:06+00",
            "2024-01-15 04:05:06.25+00",
            "2024-01-15 04:05:06.25+02",
            "0044-03-15 12:00:00+00 BC",
        ] {
            let value = v(types::TIMESTAMPTZ, text);
            for style in [ValueStyle::Plain, ValueStyle::Debezium(&o)] {
                assert_wire_writes_as_value(&c, text, &value, style);
            }
        }
    }
}

/// The type modifier of `numeric(p, s)` (`s` may be negative).
fn numeric_typmod(p: i32, s: i32) -> i32 {
    ((p << 16) | (s & 0x7ff)) + 4
}

/// A `numeric`'s text as the server sent it is written as its decoded
/// value, in both styles and every `decimal.handling.mode`: read from its
/// digits in `precise` mode when it fits an `i128`, decoded otherwise.
fn numeric_text_writes_as_its_value(text: &str) {
    let value = v(types::NUMERIC, text);
    for mode in [
        DecimalHandlingMode::Precise,
        DecimalHandlingMode::String,
        DecimalHandlingMode::Double,
    ] {
        let o = DebeziumOptions {
            decimal_handling_mode: mode,
            ..DebeziumOptions::default()
        };
        for typmod in [
            -1,
            numeric_typmod(10, 2),
            numeric_typmod(38, 0),
            numeric_typmod(5, -2),
        ] {
            let c = col("n", types::NUMERIC, typmod, false);
            for style in [ValueStyle::Plain, ValueStyle::Debezium(&o)] {
                assert_wire_writes_as_value(&c, text, &value, style);
            }
        }
    }
}

#[test]
fn numeric_text_at_the_edges_writes_as_its_value() {
    for text in [
        "0",
        "-0.00",
        "12.50",
        "-12.5",
        "0.000001",
        "170141183460469231731687303715884105727",
        "170141183460469231731687303715884105728",
        "-170141183460469231731687303715884105728",
        "1234567890123456789012345678901234567890.5",
        "99999999.995",
        "NaN",
        "Infinity",
        "-Infinity",
    ] {
        numeric_text_writes_as_its_value(text);
    }
}

proptest::proptest! {
    #[test]
    fn numeric_text_writes_as_its_value_for_any_digits(
        negative: bool,
        int in "0|[1-9][0-9]{0,44}",
        frac in proptest::option::of("[0-9]{1,20}"),
    ) {
        let sign = if negative { "-" } else { "" };
        let text = match frac {
            Some(f) => format!("{sign}{int}.{f}"),
            None => format!("{sign}{int}"),
        };
        numeric_text_writes_as_its_value(&text);
    }
}
