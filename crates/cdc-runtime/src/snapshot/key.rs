//! Row keys as the merge compares them.

use std::hash::{Hash, Hasher};

use cdc_core::Value;

use crate::event::{decode_cell, Cell, Row, TableSchema};

/// The key columns of a row, as typed values. Snapshot rows (read as text)
/// and stream events (text or binary) decode to the same values, so keys
/// compare across both.
#[derive(Debug, Clone, PartialEq)]
pub struct RowKey(pub Vec<Value<'static>>);

// `Value` holds floats, so it is only `PartialEq`; keys are never NaN in
// practice (a NaN key would just never match, keeping the snapshot's row).
impl Eq for RowKey {}

impl Hash for RowKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The Debug form is a canonical rendering of each value; feed it to
        // the hasher without allocating.
        struct W<'a, H: Hasher>(&'a mut H);
        impl<H: Hasher> std::fmt::Write for W<'_, H> {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                self.0.write(s.as_bytes());
                Ok(())
            }
        }
        for v in &self.0 {
            let _ = std::fmt::write(&mut W(state), format_args!("{v:?}\u{1f}"));
        }
    }
}

impl RowKey {
    /// The key of `row` at the column indexes `key`; `None` if a key column
    /// is missing or its value unknown (an unchanged TOASTed value).
    pub fn of(row: &[Value<'_>], key: &[usize]) -> Option<RowKey> {
        let mut values = Vec::with_capacity(key.len());
        for &i in key {
            match row.get(i)? {
                Value::UnchangedToast => return None,
                v => values.push(v.clone().into_owned()),
            }
        }
        Some(RowKey(values))
    }

    /// [`of`](Self::of) for a [`Row`] of `table`, decoding only the key
    /// columns of a row kept as sent.
    pub(crate) fn of_row(row: &Row, key: &[usize], table: &TableSchema) -> Option<RowKey> {
        if let Some(values) = row.as_values() {
            return Self::of(values, key);
        }
        let mut values = Vec::with_capacity(key.len());
        for &i in key {
            let value = match row.cells().nth(i)? {
                Cell::Value(v) => v.clone(),
                Cell::Wire(tv) => decode_cell(tv, table.columns.get(i)?.type_oid).into_owned(),
            };
            match value {
                Value::UnchangedToast => return None,
                v => values.push(v),
            }
        }
        Some(RowKey(values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn equal_keys_hash_equal_and_differ_otherwise() {
        let a = RowKey(vec![Value::Int4(1), Value::Text("x".into())]);
        let b = RowKey(vec![Value::Int4(1), Value::Text("x".to_owned().into())]);
        let c = RowKey(vec![Value::Int4(1), Value::Text("y".into())]);
        let set: HashSet<_> = [a.clone(), b, c].into_iter().collect();
        assert_eq!(set.len(), 2);
        assert!(set.contains(&a));
    }

    #[test]
    fn key_of_a_row_picks_the_key_columns() {
        let row = vec![Value::Text("v".into()), Value::Int8(7)];
        assert_eq!(RowKey::of(&row, &[1]), Some(RowKey(vec![Value::Int8(7)])));
        assert_eq!(RowKey::of(&row, &[2]), None);
        let toast = vec![Value::UnchangedToast];
        assert_eq!(RowKey::of(&toast, &[0]), None);
    }
}
