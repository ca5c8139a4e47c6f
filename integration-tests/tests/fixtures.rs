//! Checks the committed pgoutput fixtures (crates/cdc-core/tests/fixtures) against
//! their `.expected.json`, with a deliberately tiny, independent reader: framing,
//! tags, sizes, and that text-mode tuples carry exactly the values PostgreSQL
//! printed for the table rows. No server needed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use serde_json::Value;

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/cdc-core/tests/fixtures")
}

fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".bin").map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

fn records(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let (len, tail) = rest.split_at(4);
        let len = u32::from_be_bytes(len.try_into().unwrap()) as usize;
        assert!(tail.len() >= len, "truncated record");
        let (record, tail) = tail.split_at(len);
        out.push(record);
        rest = tail;
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Null,
    UnchangedToast,
    Text(String),
    Binary(Vec<u8>),
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u8(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().unwrap();
        self.0 = rest;
        *b
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        a
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take(2).try_into().unwrap())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take(4).try_into().unwrap())
    }
    fn tuple(&mut self) -> Vec<Cell> {
        let n = self.u16();
        (0..n)
            .map(|_| match self.u8() {
                b'n' => Cell::Null,
                b'u' => Cell::UnchangedToast,
                b't' => {
                    let len = self.u32() as usize;
                    Cell::Text(String::from_utf8(self.take(len).to_vec()).unwrap())
                }
                b'b' => {
                    let len = self.u32() as usize;
                    Cell::Binary(self.take(len).to_vec())
                }
                other => panic!("unexpected tuple cell kind {other:#x}"),
            })
            .collect()
    }
}

/// (old tuple, new tuple) of one Insert/Update/Delete.
type RowChange = (Option<Vec<Cell>>, Option<Vec<Cell>>);

/// Every Insert/Update/Delete, in order.
fn row_changes(recs: &[&[u8]]) -> Vec<RowChange> {
    let mut in_stream = false;
    let mut out = Vec::new();
    for rec in recs {
        let mut r = Reader(rec);
        let tag = r.u8();
        match tag {
            b'S' => in_stream = true,
            b'E' => in_stream = false,
            b'I' | b'U' | b'D' => {
                if in_stream {
                    r.u32(); // xid
                }
                r.u32(); // relation id
                let mut old = None;
                let mut new = None;
                while !r.0.is_empty() {
                    match r.u8() {
                        b'K' | b'O' => old = Some(r.tuple()),
                        b'N' => new = Some(r.tuple()),
                        other => panic!("unexpected tuple marker {other:#x}"),
                    }
                }
                out.push((old, new));
            }
            _ => {}
        }
    }
    out
}

fn rows(v: &Value) -> Vec<Vec<Option<String>>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().map(str::to_owned))
                .collect()
        })
        .collect()
}

/// A decoded tuple matches a row: equal text, NULL for NULL; an unchanged TOAST
/// value matches anything.
fn tuple_matches(tuple: &[Cell], row: &[Option<String>]) -> bool {
    tuple.len() == row.len()
        && tuple.iter().zip(row).all(|(c, v)| match (c, v) {
            (Cell::UnchangedToast, _) => true,
            (Cell::Null, None) => true,
            (Cell::Text(t), Some(v)) => t == v,
            _ => false,
        })
}

/// An old key tuple ('K') matches a row on its non-NULL cells.
fn key_matches(tuple: &[Cell], row: &[Option<String>]) -> bool {
    tuple.len() == row.len()
        && tuple.iter().zip(row).all(|(c, v)| match (c, v) {
            (Cell::Null, _) => true,
            (Cell::Text(t), Some(v)) => t == v,
            _ => false,
        })
}

#[test]
fn fixtures_match_their_expected_files() {
    let names = fixture_names();
    assert!(names.len() >= 14, "fixtures missing: {names:?}");
    for name in &names {
        let dir = fixtures_dir();
        let bin = std::fs::read(dir.join(format!("{name}.bin"))).unwrap();
        let json: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{name}.expected.json"))).unwrap(),
        )
        .unwrap();
        assert!(bin.len() < 100_000, "{name} is {} bytes", bin.len());
        let recs = records(&bin);
        let tags: String = recs.iter().map(|r| char::from(r[0])).collect();
        assert_eq!(tags, json["tags"].as_str().unwrap(), "{name}");
        assert_eq!(recs.len(), json["records"].as_array().unwrap().len());

        let binary = json["options"]
            .as_str()
            .unwrap()
            .contains("'binary', 'true'");
        let changes = row_changes(&recs);
        assert!(
            !changes.is_empty() || tags.contains('T') || name.starts_with("messages"),
            "{name} has no row changes"
        );
        if binary {
            continue;
        }
        for table in json["tables"].as_object().unwrap().values() {
            let before = rows(&table["rows_before"]);
            let after = rows(&table["rows_after"]);
            // Every row that is new or changed was sent as a new tuple.
            for row in after.iter().filter(|r| !before.contains(r)) {
                assert!(
                    changes
                        .iter()
                        .any(|(_, new)| new.as_ref().is_some_and(|t| tuple_matches(t, row))),
                    "{name}: row {row:?} not found in the fixture's tuples"
                );
            }
            // Every old tuple describes a row that existed before.
            for (old, _) in &changes {
                if let Some(old) = old {
                    assert!(
                        before.iter().any(|row| key_matches(old, row)),
                        "{name}: old tuple {old:?} matches no row before"
                    );
                }
            }
        }
    }
}

#[test]
fn all_types_inserts_carry_postgres_text_output_in_order() {
    let dir = fixtures_dir();
    let bin = std::fs::read(dir.join("inserts-all-types-v1.bin")).unwrap();
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("inserts-all-types-v1.expected.json")).unwrap(),
    )
    .unwrap();
    let recs = records(&bin);
    let inserted: Vec<Vec<Cell>> = row_changes(&recs)
        .into_iter()
        .map(|(_, new)| new.unwrap())
        .collect();
    let expected = rows(&json["tables"]["all_types"]["rows_after"]);
    assert_eq!(inserted.len(), expected.len());
    for (tuple, row) in inserted.iter().zip(&expected) {
        assert!(tuple_matches(tuple, row), "{tuple:?} != {row:?}");
    }
    // A few values whose text form a decoder must not "normalise".
    let row1 = &expected[0];
    assert_eq!(row1[11].as_deref(), Some("ab   "), "char(5) keeps padding");
    assert_eq!(row1[1].as_deref(), Some("t"));
}

#[test]
fn unchanged_toast_update_sends_u() {
    let bin = std::fs::read(fixtures_dir().join("update-unchanged-toast-v1.bin")).unwrap();
    let changes = row_changes(&records(&bin));
    let (_, new) = &changes[0];
    assert_eq!(new.as_ref().unwrap()[1], Cell::UnchangedToast);
}

#[test]
fn binary_fixture_sends_binary_cells() {
    let bin = std::fs::read(fixtures_dir().join("inserts-all-types-binary-v1.bin")).unwrap();
    let changes = row_changes(&records(&bin));
    assert_eq!(changes.len(), 7);
    let first = changes[0].1.as_ref().unwrap();
    assert_eq!(
        first[0],
        Cell::Binary(vec![0, 0, 0, 1]),
        "int4 id 1, big-endian"
    );
    assert_eq!(first[1], Cell::Binary(vec![1]), "bool true");
    let last = changes[6].1.as_ref().unwrap();
    assert!(
        last[1..].iter().all(|c| *c == Cell::Null),
        "row 7 is all NULL"
    );
}
