//! Reading rows with `COPY ... TO STDOUT`: in binary when every column's
//! type is one whose send form cdc-core decodes to the same value as its
//! output text (so snapshot rows and stream events compare and print
//! alike), else in text.
//!
//! Binary saves both sides work: the server skips the output functions and
//! the escaping, the client the splitting, unescaping and number parsing.

use cdc_core::copy_binary::CopyBinaryReader;
use cdc_core::copy_text::fields;
use cdc_core::{decode_binary, decode_text, types, Oid, Value};

use super::catalog::SnapshotTable;
use super::SnapshotError;
use crate::event::RowValues;

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
}

impl<'t> RowDecoder<'t> {
    /// A decoder for a read of `table`; binary if every column allows it.
    pub(crate) fn new(table: &'t SnapshotTable) -> Self {
        let binary = table.columns.iter().all(|c| binary_safe(c.type_oid));
        RowDecoder {
            table,
            binary: binary.then(CopyBinaryReader::new),
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
    /// binary COPY.
    pub(crate) fn decode(&mut self, msg: &[u8]) -> Result<Option<RowValues>, SnapshotError> {
        let Some(reader) = self.binary.as_mut() else {
            return decode_text_row(self.table, msg).map(Some);
        };
        let columns = &self.table.columns;
        let row = match reader.parse(msg, columns.len()) {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.bad(e.to_string())),
        };
        let mut values = Vec::with_capacity(columns.len());
        for (col, field) in columns.iter().zip(row.fields()) {
            let v = match field {
                None => Value::Null,
                Some(raw) => decode_binary(col.type_oid, raw)
                    .map(Value::into_owned)
                    .map_err(|e| self.bad(format!("column {}: {e}", col.name)))?,
            };
            values.push(v);
        }
        Ok(Some(values))
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
    use crate::event::TableSchema;
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
                columns: Vec::new(),
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
        assert_eq!(row, decode_text_row(&t, b"7\t\\N\ta\\tb\n").unwrap());
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
        assert_eq!(row.first(), Some(&Value::Int8(1)));
        d.finish().unwrap();
        assert!(d.decode(b"1\n").is_err(), "too few fields");
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
