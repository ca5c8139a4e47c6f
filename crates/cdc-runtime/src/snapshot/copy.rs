//! Reading rows with `COPY ... TO STDOUT`: in binary when every column's
//! type is one whose send form cdc-core decodes to the same value as its
//! output text (so snapshot rows and stream events compare and print
//! alike), else in text.
//!
//! Binary saves both sides work: the server skips the output functions and
//! the escaping, the client the splitting, unescaping and number parsing.

use cdc_core::copy_binary::CopyBinaryReader;
use cdc_core::copy_text::fields;
use cdc_core::{decode_text, types, validate_binary, Oid, Value};

use super::catalog::SnapshotTable;
use super::SnapshotError;
use crate::event::{Row, RowArena, RowValues};

/// Types read in binary: cdc-core's conformance tests check that their send
/// and output forms decode to equal values. Arrays, network types, enums,
/// domains and unknown types are read as text.
fn binary_safe(oid: Oid) -> bool {
    use types::*;
    matches!(
        oid,
        BOOL | INT2
            | INT4
            | INT8
            | OID
            | FLOAT4
            | FLOAT8
            | NUMERIC
            | TEXT
            | VARCHAR
            | BPCHAR
            | NAME
            | BYTEA
            | JSON
            | JSONB
            | UUID
            | DATE
            | TIME
            | TIMESTAMP
            | TIMESTAMPTZ
            | INTERVAL
    )
}

/// Decodes the COPY messages of one table's read.
#[derive(Debug)]
pub(crate) struct RowDecoder<'t> {
    table: &'t SnapshotTable,
    /// `Some` when the read is in binary.
    binary: Option<CopyBinaryReader>,
    /// Where rows read in binary keep their fields: a buffer many rows
    /// share, so a row costs no allocation per value (nor per row).
    arena: RowArena,
}

impl<'t> RowDecoder<'t> {
    /// A decoder for a read of `table`; binary if every column allows it.
    pub(crate) fn new(table: &'t SnapshotTable) -> Self {
        let binary = table.columns.iter().all(|c| binary_safe(c.type_oid));
        RowDecoder {
            table,
            binary: binary.then(CopyBinaryReader::new),
            arena: RowArena::default(),
        }
    }

    /// `COPY (<query>) TO STDOUT` in this decoder's format.
    pub(crate) fn copy_statement(&self, query: &str) -> String {
        match self.binary {
            Some(_) => format!("COPY ({query}) TO STDOUT (FORMAT binary)"),
            None => format!("COPY ({query}) TO STDOUT"),
        }
    }

    fn bad(&self, reason: String) -> SnapshotError {
        SnapshotError::Row {
            table: self.table.display_name(),
            reason,
        }
    }

    /// Decodes one CopyData message: a row, or `None` for the end of a
    /// binary COPY. A binary row keeps its fields as sent, each checked to
    /// decode by its column's type (so decoding it later cannot fail); a
    /// text row holds decoded values.
    pub(crate) fn decode(&mut self, msg: &[u8]) -> Result<Option<Row>, SnapshotError> {
        let table = self.table;
        let Some(reader) = self.binary.as_mut() else {
            return decode_text_row(table, msg).map(|values| Some(Row::from_values(values)));
        };
        let row = match reader.parse(msg, table.columns.len()) {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.bad(e.to_string())),
        };
        for (col, field) in table.columns.iter().zip(row.fields()) {
            if let Some(raw) = field {
                validate_binary(col.type_oid, raw)
                    .map_err(|e| self.bad(format!("column {}: {e}", col.name)))?;
            }
        }
        let size = msg.len().saturating_add(row.len());
        match self.arena.binary_row(row.fields(), size) {
            Some(row) => Ok(Some(row)),
            None => Err(self.bad("more fields or longer ones than a row can hold".into())),
        }
    }

    /// Checks that a binary COPY ended with its trailer.
    pub(crate) fn finish(&self) -> Result<(), SnapshotError> {
        match &self.binary {
            Some(r) if !r.is_finished() => {
                Err(self.bad("the binary COPY ended without its trailer".into()))
            }
            _ => Ok(()),
        }
    }
}

/// Decodes one text COPY row into typed values.
pub(crate) fn decode_text_row(
    table: &SnapshotTable,
    line: &[u8],
) -> Result<RowValues, SnapshotError> {
    let bad = |reason: String| SnapshotError::Row {
        table: table.display_name(),
        reason,
    };
    let mut values = Vec::with_capacity(table.columns.len());
    let mut cols = table.columns.iter();
    for field in fields(line) {
        let field = field.map_err(|e| bad(e.to_string()))?;
        let Some(col) = cols.next() else {
            return Err(bad(format!(
                "a row has more than {} fields",
                table.columns.len()
            )));
        };
        let v = match field {
            None => Value::Null,
            Some(raw) => decode_text(col.type_oid, &raw)
                .map(Value::into_owned)
                .map_err(|e| bad(format!("column {}: {e}", col.name)))?,
        };
        values.push(v);
    }
    if values.len() != table.columns.len() {
        return Err(bad(format!(
            "a row has {} fields, expected {}",
            values.len(),
            table.columns.len()
        )));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cdc_core::copy_binary::encode_row;

    use super::*;
    use crate::event::{ColumnSchema, TableSchema};
    use crate::snapshot::key::RowKey;
    use crate::snapshot::Column;

    fn table(types: &[Oid]) -> SnapshotTable {
        SnapshotTable {
            oid: 1,
            schema: "public".into(),
            name: "t".into(),
            columns: types
                .iter()
                .enumerate()
                .map(|(i, &type_oid)| Column {
                    name: format!("c{i}"),
                    type_oid,
                    type_modifier: -1,
                    type_sql: String::new(),
                })
                .collect(),
            key: vec![0],
            row_filter: None,
            estimated_rows: None,
            partitioned: false,
            event_schema: Arc::new(TableSchema {
                facts: Default::default(),
                oid: 1,
                schema: "public".into(),
                table: "t".into(),
                columns: types
                    .iter()
                    .enumerate()
                    .map(|(i, &type_oid)| ColumnSchema {
                        name: format!("c{i}").into(),
                        type_oid,
                        type_modifier: -1,
                        is_key: i == 0,
                    })
                    .collect(),
            }),
            request: None,
        }
    }

    #[test]
    fn binary_rows_decode_like_text_rows() {
        let t = table(&[types::INT8, types::INT4, types::TEXT]);
        let mut d = RowDecoder::new(&t);
        assert!(d.copy_statement("SELECT 1").ends_with("(FORMAT binary)"));
        let mut msg = Vec::new();
        encode_row(
            true,
            &[Some(&7i64.to_be_bytes()), None, Some(b"a\tb")],
            &mut msg,
        )
        .unwrap();
        let row = d.decode(&msg).unwrap().unwrap();
        assert!(row.as_values().is_none(), "kept as sent");
        assert_eq!(
            *row.values(&t.event_schema),
            decode_text_row(&t, b"7\t\\N\ta\\tb\n").unwrap()
        );
        assert!(d.finish().is_err(), "no trailer yet");
        assert_eq!(d.decode(&[0xff, 0xff]).unwrap(), None);
        d.finish().unwrap();
    }

    #[test]
    fn a_column_of_another_type_makes_the_read_text() {
        let t = table(&[types::INT8, types::INET]);
        let mut d = RowDecoder::new(&t);
        assert!(d.copy_statement("SELECT 1").ends_with("TO STDOUT"));
        let row = d.decode(b"1\t10.0.0.1\n").unwrap().unwrap();
        assert_eq!(
            row.as_values().and_then(<[_]>::first),
            Some(&Value::Int8(1))
        );
        d.finish().unwrap();
        assert!(d.decode(b"1\n").is_err(), "too few fields");
    }

    /// Binary rows of every type read in binary decode, when asked, to what
    /// their fields decode to; their keys are the decoded key columns.
    #[test]
    fn binary_rows_keep_fields_that_decode_later() {
        let oids = [
            types::INT8,
            types::NUMERIC,
            types::TIMESTAMPTZ,
            types::TEXT,
            types::BOOL,
            types::FLOAT8,
            types::UUID,
            types::BYTEA,
        ];
        let t = table(&oids);
        // numeric -12.50: 2 base-10000 digits [12, 5000], weight 0, negative, scale 2.
        let numeric = [0, 2, 0, 0, 0x40, 0, 0, 2, 0, 12, 0x13, 0x88];
        let (key, ts) = ((-5i64).to_be_bytes(), 1_000_000i64.to_be_bytes());
        let fields: [Option<&[u8]>; 8] = [
            Some(&key),
            Some(&numeric),
            Some(&ts),
            Some("é\"x".as_bytes()),
            Some(&[1]),
            None,
            Some(&[7; 16]),
            Some(&[]),
        ];
        let mut d = RowDecoder::new(&t);
        let mut rows = Vec::new();
        for _ in 0..3 {
            let mut msg = Vec::new();
            encode_row(rows.is_empty(), &fields, &mut msg).unwrap();
            rows.push(d.decode(&msg).unwrap().unwrap());
        }
        let expected: Vec<Value<'_>> = oids
            .iter()
            .zip(fields)
            .map(|(&oid, field)| {
                field.map_or(Value::Null, |raw| {
                    cdc_core::decode_binary(oid, raw).unwrap()
                })
            })
            .collect();
        assert_eq!(
            expected[1],
            Value::Numeric(cdc_core::Numeric::Finite("-12.50".into()))
        );
        for row in &rows {
            assert_eq!(row.len(), oids.len());
            assert_eq!(*row.values(&t.event_schema), expected);
            assert_eq!(
                RowKey::of_row(row, &[0, 3], &t.event_schema),
                RowKey::of(&expected, &[0, 3])
            );
        }
        assert_eq!(RowKey::of_row(&rows[0], &[8], &t.event_schema), None);
    }

    /// A field its column's type cannot decode is an error when the row is
    /// read, not when it is written.
    #[test]
    fn binary_fields_are_checked_when_read() {
        let t = table(&[types::INT8, types::NUMERIC]);
        // A base-10000 digit of 10000.
        let numeric = [0, 1, 0, 0, 0, 0, 0, 0, 0x27, 0x10];
        let mut msg = Vec::new();
        let key = 1i64.to_be_bytes();
        encode_row(true, &[Some(&key), Some(&numeric)], &mut msg).unwrap();
        let err = RowDecoder::new(&t).decode(&msg).unwrap_err();
        assert!(err.to_string().contains("column c1"), "{err}");
    }

    #[test]
    fn malformed_binary_rows_are_row_errors() {
        let t = table(&[types::INT4]);
        let mut d = RowDecoder::new(&t);
        let mut msg = Vec::new();
        encode_row(true, &[Some(&[1, 2, 3])], &mut msg).unwrap();
        assert!(matches!(d.decode(&msg), Err(SnapshotError::Row { .. })));
        let mut d = RowDecoder::new(&t);
        assert!(matches!(d.decode(b"1\n"), Err(SnapshotError::Row { .. })));
    }
}
