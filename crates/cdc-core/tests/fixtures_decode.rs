//! Every captured server fixture (`tests/fixtures/*.bin`, see its README)
//! decoded end to end and compared with what the SQL produced.
//!
//! Each file goes through a [`Decoder`] of the fixture's protocol version and
//! a [`TxnAssembler`]. The test then replays the committed changes on the
//! table contents before the workload (`rows_before` of `NAME.expected.json`)
//! and compares the result with `rows_after`, cell by cell:
//!
//! * every decoded column is turned into a typed [`Value`] (`decode_text` for
//!   text columns, `decode_binary` for binary ones) and compared with the
//!   server's printed text parsed by `decode_text` for the column's type;
//! * in text-format fixtures the column bytes must also equal the server's
//!   text exactly.
//!
//! It also checks the record tags and count, the Begin xids, the relation
//! schemas against the catalog columns, the logical decoding messages, and
//! that the assembler's events are well bracketed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cdc_core::pgoutput::{LogicalMessage, OldTuple, ProtocolVersion, Relation, TupleData};
use cdc_core::{decode_binary, decode_text, Change, Decoder, TupleValue, TxnAssembler, TxnEvent};
use cdc_core::{TxnKind, Value};
use serde_json::Value as Json;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The records of a fixture: u32 big-endian length + message.
fn records(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>().expect("truncated length");
        let len = u32::from_be_bytes(*len) as usize;
        assert!(tail.len() >= len, "truncated record");
        let (rec, tail) = tail.split_at(len);
        out.push(rec);
        rest = tail;
    }
    out
}

/// One cell of the simulated table: the decoded value, and the raw text when
/// the column came in text form (or from the expected file).
#[derive(Debug, Clone)]
struct Cell {
    value: Value<'static>,
    text: Option<Vec<u8>>,
}

type Row = Vec<Cell>;

/// Values equal, with NaN equal to itself (compared through Debug) and a
/// binary unknown-type value equal to the same bytes as text.
fn same(a: &Value<'_>, b: &Value<'_>) -> bool {
    if a == b || format!("{a:?}") == format!("{b:?}") {
        return true;
    }
    match (a, b) {
        (Value::OtherBinary { type_oid, bytes }, Value::Other { type_oid: t2, text })
        | (Value::Other { type_oid: t2, text }, Value::OtherBinary { type_oid, bytes }) => {
            type_oid == t2 && bytes.as_ref() == text.as_bytes()
        }
        _ => false,
    }
}

fn expected_cell(type_oid: u32, cell: &Json) -> Cell {
    match cell {
        Json::Null => Cell {
            value: Value::Null,
            text: None,
        },
        Json::String(s) => Cell {
            value: decode_text(type_oid, s.as_bytes())
                .unwrap_or_else(|e| panic!("server text {s:?} of type {type_oid}: {e}"))
                .into_owned(),
            text: Some(s.as_bytes().to_vec()),
        },
        other => panic!("unexpected cell {other}"),
    }
}

/// The decoded columns of `t`; `None` for an unchanged TOAST column.
fn decoded_row(rel: &Relation<'_>, t: &TupleData<'_>) -> Vec<Option<Cell>> {
    assert_eq!(t.len(), rel.columns.len(), "tuple width of {}", rel.name);
    rel.columns
        .iter()
        .zip(t.iter())
        .map(|(col, v)| {
            let (value, text) = match v {
                TupleValue::Null => (Ok(Value::Null), None),
                TupleValue::UnchangedToast => return None,
                TupleValue::Text(b) => (decode_text(col.type_oid, b), Some(b.to_vec())),
                TupleValue::Binary(b) => (decode_binary(col.type_oid, b), None),
            };
            let value = value.unwrap_or_else(|e| panic!("{}.{}: {e}", rel.name, col.name));
            Some(Cell {
                value: value.into_owned(),
                text,
            })
        })
        .collect()
}

#[derive(Debug)]
struct Table {
    /// (name, type oid, key) per column, from the catalog at capture time.
    columns: Vec<(String, u32, bool)>,
    replica_identity: u8,
    rows: Vec<Row>,
}

/// The index of the row whose `cols` match `old` (non-TOAST columns only).
fn find_row(table: &Table, old: &[Option<Cell>], cols: &[usize]) -> usize {
    let hits: Vec<usize> = table
        .rows
        .iter()
        .enumerate()
        .filter(|(_, row)| {
            cols.iter().all(|&i| match &old[i] {
                Some(c) => same(&row[i].value, &c.value),
                None => true,
            })
        })
        .map(|(n, _)| n)
        .collect();
    assert_eq!(hits.len(), 1, "rows matching {old:?} on columns {cols:?}");
    hits[0]
}

fn key_columns(rel: &Relation<'_>) -> Vec<usize> {
    (0..rel.columns.len())
        .filter(|&i| rel.columns[i].is_key())
        .collect()
}

/// Columns an old tuple identifies a row by: the key for `K`, all for `O`.
fn old_columns(rel: &Relation<'_>, old: &OldTuple<'_>) -> Vec<usize> {
    match old {
        OldTuple::Key(_) => key_columns(rel),
        OldTuple::Full(_) => (0..rel.columns.len()).collect(),
    }
}

fn apply(
    tables: &mut HashMap<String, Table>,
    names: &HashMap<u32, String>,
    change: &Change<'_>,
) -> usize {
    let table_of = |tables: &mut HashMap<String, Table>, rel: &Arc<Relation<'static>>| {
        tables
            .remove(rel.name.as_ref())
            .unwrap_or_else(|| panic!("unknown table {}", rel.name))
    };
    let mut decoded = 0;
    match change {
        Change::Insert(rel, m) => {
            let mut t = table_of(tables, rel);
            let row = decoded_row(rel, &m.new);
            decoded += row.len();
            t.rows.push(
                row.into_iter()
                    .map(|c| c.expect("Insert with an unchanged TOAST column"))
                    .collect(),
            );
            tables.insert(rel.name.to_string(), t);
        }
        Change::Update(rel, m) => {
            let mut t = table_of(tables, rel);
            let new = decoded_row(rel, &m.new);
            let at = match &m.old {
                Some(old) => {
                    let row = decoded_row(rel, old.tuple());
                    decoded += row.len();
                    find_row(&t, &row, &old_columns(rel, old))
                }
                None => find_row(&t, &new, &key_columns(rel)),
            };
            decoded += new.len();
            for (cell, n) in t.rows[at].iter_mut().zip(new) {
                if let Some(n) = n {
                    *cell = n;
                }
            }
            tables.insert(rel.name.to_string(), t);
        }
        Change::Delete(rel, m) => {
            let mut t = table_of(tables, rel);
            let row = decoded_row(rel, m.old.tuple());
            decoded += row.len();
            let at = find_row(&t, &row, &old_columns(rel, &m.old));
            t.rows.remove(at);
            tables.insert(rel.name.to_string(), t);
        }
        Change::Truncate(m) => {
            for oid in &m.relations {
                let name = &names[oid];
                tables.get_mut(name).expect("truncated table").rows.clear();
            }
        }
        Change::Message(_) => {}
    }
    decoded
}

fn str_field<'j>(j: &'j Json, key: &str) -> &'j str {
    j[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is not a string"))
}

/// Decodes one fixture and compares it with its expected file; returns the
/// number of cells compared.
fn check_fixture(bin: &Path) -> usize {
    let stem = bin.file_stem().unwrap().to_string_lossy().into_owned();
    let expected: Json = serde_json::from_slice(
        &fs::read(bin.with_file_name(format!("{stem}.expected.json"))).unwrap(),
    )
    .unwrap();
    let bytes = fs::read(bin).unwrap();
    let recs = records(&bytes);
    let binary = str_field(&expected, "options").contains("'binary', 'true'");
    let version = ProtocolVersion::new(expected["proto_version"].as_u64().unwrap() as u32).unwrap();

    let exp_records = expected["records"].as_array().unwrap();
    assert_eq!(recs.len(), exp_records.len(), "{stem}: record count");
    let tags = str_field(&expected, "tags");
    if !tags.is_empty() {
        assert_eq!(tags.len(), recs.len(), "{stem}: tags");
    }

    // The tables as they were before the workload.
    let mut tables: HashMap<String, Table> = HashMap::new();
    for (name, t) in expected["tables"].as_object().unwrap() {
        let cols = &t["columns"];
        let columns: Vec<(String, u32, bool)> = cols["list"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    str_field(c, "name").to_string(),
                    c["type_oid"].as_u64().unwrap() as u32,
                    c["key"].as_bool().unwrap(),
                )
            })
            .collect();
        let rows = t["rows_before"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let r = r.as_array().unwrap();
                assert_eq!(r.len(), columns.len());
                r.iter()
                    .zip(&columns)
                    .map(|(cell, col)| expected_cell(col.1, cell))
                    .collect()
            })
            .collect();
        tables.insert(
            name.clone(),
            Table {
                replica_identity: str_field(cols, "replica_identity").as_bytes()[0],
                columns,
                rows,
            },
        );
    }

    // With `streaming = parallel` (v4) a Stream Abort carries the abort LSN and time.
    let parallel = str_field(&expected, "options").contains("'streaming', 'parallel'");
    let mut decoder = Decoder::new(version).with_parallel_streaming(parallel);
    let mut asm = TxnAssembler::new();
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut events: Vec<TxnEvent<'static>> = Vec::new();
    for (i, rec) in recs.iter().enumerate() {
        let msg = decoder
            .decode(rec)
            .unwrap_or_else(|e| panic!("{stem}: record {i}: {e}"));
        if !tags.is_empty() {
            assert_eq!(msg.tag(), tags.as_bytes()[i], "{stem}: tag of record {i}");
        }
        assert_eq!(
            exp_records[i][2].as_str().unwrap().as_bytes(),
            [msg.tag()],
            "{stem}: record {i}"
        );
        let rec_xid = exp_records[i][1].as_u64().unwrap();
        match &msg {
            LogicalMessage::Begin(b) => assert_eq!(u64::from(b.xid), rec_xid, "{stem}: Begin xid"),
            LogicalMessage::BeginPrepare(b) => {
                assert_eq!(u64::from(b.xid), rec_xid, "{stem}: Begin Prepare xid")
            }
            LogicalMessage::Relation(r) => {
                names.insert(r.oid, r.name.to_string());
                let t = tables
                    .get(r.name.as_ref())
                    .unwrap_or_else(|| panic!("{stem}: relation {} not expected", r.name));
                assert_eq!(r.namespace, "public");
                assert_eq!(r.replica_identity.as_byte(), t.replica_identity, "{stem}");
                let got: Vec<(String, u32, bool)> = r
                    .columns
                    .iter()
                    .map(|c| (c.name.to_string(), c.type_oid, c.is_key()))
                    .collect();
                assert_eq!(got, t.columns, "{stem}: columns of {}", r.name);
            }
            _ => {}
        }
        if let Some(ev) = asm
            .handle_message(msg)
            .unwrap_or_else(|e| panic!("{stem}: record {i}: {e}"))
        {
            events.push(ev.into_owned());
        }
        while let Some(ev) = asm.poll_event() {
            events.push(ev);
        }
    }
    assert_eq!(
        asm.open_transaction(),
        None,
        "{stem}: transaction left open"
    );
    assert_eq!(asm.open_stream(), None, "{stem}: stream block left open");
    assert_eq!(
        asm.streamed_in_progress(),
        0,
        "{stem}: streamed transaction left over"
    );

    assert_eq!(
        asm.prepared_waiting(),
        0,
        "{stem}: prepared transaction left undecided"
    );

    // Replay: changes apply at Commit (a prepared transaction comes out of
    // the assembler at its Commit Prepared, as a committed one).
    let mut open: Option<(u32, TxnKind, Vec<Change<'static>>)> = None;
    let mut messages = Vec::new();
    let mut origins = 0;
    let mut decoded = 0;
    for ev in events {
        match ev {
            TxnEvent::Begin(b) => {
                assert!(open.is_none(), "{stem}: nested Begin");
                open = Some((b.xid, b.kind, Vec::new()));
            }
            TxnEvent::Origin(_) => {
                assert!(open.is_some(), "{stem}: Origin outside a transaction");
                origins += 1;
            }
            TxnEvent::Change(c) => {
                if let Change::Message(m) = &c {
                    messages.push((m.transactional, m.prefix.to_string(), m.content.to_vec()));
                }
                open.as_mut()
                    .expect("change outside a transaction")
                    .2
                    .push(c);
            }
            TxnEvent::Commit(c) => {
                let (xid, _kind, changes) = open.take().expect("Commit without Begin");
                assert_eq!(xid, c.xid, "{stem}: Commit xid");
                for ch in &changes {
                    decoded += apply(&mut tables, &names, ch);
                }
            }
            TxnEvent::CommitPrepared(c) => {
                panic!("{stem}: Commit Prepared of {} without its changes", c.gid)
            }
            TxnEvent::RollbackPrepared(r) => {
                assert!(open.is_none(), "{stem}: Rollback Prepared {} inside", r.gid);
            }
            TxnEvent::Message(m) => {
                assert!(
                    open.is_none(),
                    "{stem}: non-transactional Message in a transaction"
                );
                messages.push((m.transactional, m.prefix.to_string(), m.content.to_vec()));
            }
        }
    }
    assert!(open.is_none(), "{stem}: unfinished transactions");
    assert_eq!(origins, tags.matches('O').count(), "{stem}: Origin events");

    let exp_messages: Vec<(bool, String, Vec<u8>)> = expected["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let hex = str_field(m, "content_hex");
            let content = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (
                m["transactional"].as_bool().unwrap(),
                str_field(m, "prefix").to_string(),
                content,
            )
        })
        .collect();
    assert_eq!(messages, exp_messages, "{stem}: logical decoding messages");

    // The replayed tables against rows_after, matched by the first column.
    let mut compared = 0;
    for (name, t) in expected["tables"].as_object().unwrap() {
        let table = tables.remove(name).unwrap();
        let after = t["rows_after"].as_array().unwrap();
        assert_eq!(table.rows.len(), after.len(), "{stem}: rows of {name}");
        let mut rows = table.rows;
        for exp in after {
            let exp: Row = exp
                .as_array()
                .unwrap()
                .iter()
                .zip(&table.columns)
                .map(|(cell, col)| expected_cell(col.1, cell))
                .collect();
            let at = rows
                .iter()
                .position(|r| same(&r[0].value, &exp[0].value))
                .unwrap_or_else(|| panic!("{stem}: no row {:?} in {name}", exp[0].value));
            let row = rows.remove(at);
            for ((got, want), col) in row.iter().zip(&exp).zip(&table.columns) {
                assert!(
                    same(&got.value, &want.value),
                    "{stem}: {name}.{} = {:?}, server printed {:?} ({:?})",
                    col.0,
                    got.value,
                    want.text.as_deref().map(String::from_utf8_lossy),
                    want.value
                );
                if !binary {
                    if let Some(text) = &got.text {
                        assert_eq!(
                            Some(text),
                            want.text.as_ref(),
                            "{stem}: {name}.{} text differs from the server's",
                            col.0
                        );
                    }
                }
                compared += 1;
            }
        }
    }
    let has_rows = tags.contains(['I', 'U', 'D']);
    assert_eq!(decoded > 0, has_rows, "{stem}: decoded {decoded} columns");
    compared
}

#[test]
fn every_fixture_decodes_to_what_the_server_printed() {
    let mut bins: Vec<PathBuf> = fs::read_dir(fixtures_dir())
        .expect("tests/fixtures")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    bins.sort();
    assert!(bins.len() >= 10, "only {} fixtures", bins.len());
    let mut total = 0;
    for bin in &bins {
        total += check_fixture(bin);
    }
    // all_types alone is 2 x 7 rows x 31 columns.
    assert!(total > 434, "only {total} cells compared");
}

/// The comparison can fail: a fixture whose Insert carries another value
/// than the server printed is caught.
#[test]
#[should_panic(expected = "server printed")]
fn a_changed_value_is_caught() {
    let dir = tempdir();
    let src = fixtures_dir().join("update-default-identity-v1");
    let mut bytes = fs::read(src.with_extension("bin")).unwrap();
    // 'green apple' -> 'green applf': same length, same framing.
    let at = bytes
        .windows(11)
        .position(|w| w == b"green apple")
        .expect("the fixture holds the new name");
    bytes[at + 10] = b'f';
    let bin = dir.join("update-default-identity-v1.bin");
    fs::write(&bin, bytes).unwrap();
    fs::copy(
        src.with_extension("expected.json"),
        dir.join("update-default-identity-v1.expected.json"),
    )
    .unwrap();
    check_fixture(&bin);
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cdc-core-fixtures-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    dir
}
