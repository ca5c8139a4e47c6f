//! The statements that apply one change: delete by key, upsert.

use std::fmt::Write as _;

use cdc_core::Value;

use crate::event::TableSchema;
use crate::sinks::SinkError;

use super::quote_ident;
use super::text::{pg_text, TextParam};

pub(super) fn delete_by_key(
    target: &str,
    table: &TableSchema,
    keys: &[usize],
    row: &[Value<'_>],
) -> Result<(String, Vec<TextParam>), SinkError> {
    let mut sql = format!("DELETE FROM {target} WHERE ");
    let mut params = Vec::with_capacity(keys.len());
    for (n, &k) in keys.iter().enumerate() {
        let (col, v) = column(table, row, k)?;
        if n > 0 {
            sql.push_str(" AND ");
        }
        let _ = write!(sql, "{} = ${}", quote_ident(&col.name), n + 1);
        params.push(TextParam(pg_text(table, &col.name, v)?));
    }
    Ok((sql, params))
}

pub(super) fn upsert(
    target: &str,
    table: &TableSchema,
    keys: &[usize],
    row: &[Value<'_>],
) -> Result<(String, Vec<TextParam>), SinkError> {
    let mut cols = String::new();
    let mut values = String::new();
    let mut set = String::new();
    let mut params = Vec::with_capacity(row.len());
    for (i, col) in table.columns.iter().enumerate() {
        let v = row
            .get(i)
            .ok_or(SinkError::Malformed("row shorter than its table"))?;
        if matches!(v, Value::UnchangedToast) {
            if keys.contains(&i) {
                return Err(SinkError::Malformed(
                    "key column is an unchanged TOAST value",
                ));
            }
            continue;
        }
        let name = quote_ident(&col.name);
        if !params.is_empty() {
            cols.push(',');
            values.push(',');
        }
        params.push(TextParam(pg_text(table, &col.name, v)?));
        cols.push_str(&name);
        let _ = write!(values, "${}", params.len());
        if !keys.contains(&i) {
            if !set.is_empty() {
                set.push(',');
            }
            let _ = write!(set, "{name} = EXCLUDED.{name}");
        }
    }
    let key_list = keys
        .iter()
        .filter_map(|&k| table.columns.get(k))
        .map(|c| quote_ident(&c.name))
        .collect::<Vec<_>>()
        .join(",");
    let action = if set.is_empty() {
        "NOTHING".to_owned()
    } else {
        format!("UPDATE SET {set}")
    };
    Ok((
        format!(
            "INSERT INTO {target} ({cols}) VALUES ({values}) ON CONFLICT ({key_list}) DO {action}"
        ),
        params,
    ))
}

fn column<'a>(
    table: &'a TableSchema,
    row: &'a [Value<'a>],
    i: usize,
) -> Result<(&'a crate::event::ColumnSchema, &'a Value<'a>), SinkError> {
    match (table.columns.get(i), row.get(i)) {
        (Some(c), Some(v)) => Ok((c, v)),
        _ => Err(SinkError::Malformed("row shorter than its table")),
    }
}
