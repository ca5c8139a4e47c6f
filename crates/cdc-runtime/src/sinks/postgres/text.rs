//! Values as text parameters in their types' input syntax.

use std::error::Error as StdError;
use std::fmt::Write as _;

use bytes::BytesMut;
use cdc_core::{Array, Value};
use tokio_postgres::types::{to_sql_checked, Format, IsNull, ToSql, Type};

use crate::event::TableSchema;
use crate::sinks::SinkError;

/// A parameter sent in text format, whatever the column type.
#[derive(Debug)]
pub(super) struct TextParam(pub(super) Option<String>);

impl ToSql for TextParam {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match &self.0 {
            None => Ok(IsNull::Yes),
            Some(s) => {
                out.extend_from_slice(s.as_bytes());
                Ok(IsNull::No)
            }
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> Format {
        Format::Text
    }

    to_sql_checked!();
}

/// The value in its type's text input syntax (`None` for NULL).
pub(super) fn pg_text(
    table: &TableSchema,
    column: &str,
    v: &Value<'_>,
) -> Result<Option<String>, SinkError> {
    let unrepresentable = || SinkError::Unrepresentable {
        schema: table.schema.clone(),
        table: table.table.clone(),
        column: column.into(),
        type_name: v.type_name(),
    };
    if v.is_null() {
        return Ok(None);
    }
    let mut s = String::new();
    write_text(&mut s, v).ok_or_else(unrepresentable)?;
    Ok(Some(s))
}

fn write_text(s: &mut String, v: &Value<'_>) -> Option<()> {
    match v {
        Value::Null | Value::UnchangedToast | Value::OtherBinary { .. } => return None,
        Value::Bool(b) => s.push(if *b { 't' } else { 'f' }),
        Value::Int2(x) => write!(s, "{x}").ok()?,
        Value::Int4(x) => write!(s, "{x}").ok()?,
        Value::Int8(x) => write!(s, "{x}").ok()?,
        Value::Oid(x) => write!(s, "{x}").ok()?,
        Value::Float4(x) => write_float(s, f64::from(*x), || x.to_string()),
        Value::Float8(x) => write_float(s, *x, || x.to_string()),
        Value::Numeric(n) => s.push_str(n.as_str()),
        Value::Text(t) | Value::Json(t) | Value::Jsonb(t) => s.push_str(t),
        Value::Other { text, .. } => s.push_str(text),
        Value::Char(0) => {}
        Value::Char(c) if c.is_ascii() => s.push(char::from(*c)),
        Value::Char(c) => write!(s, "\\{c:03o}").ok()?,
        Value::Bytea(b) => {
            s.reserve(2 + b.len() * 2);
            s.push_str("\\x");
            for byte in b.iter() {
                write!(s, "{byte:02x}").ok()?;
            }
        }
        Value::Uuid(x) => write!(s, "{x}").ok()?,
        Value::Date(x) => write!(s, "{x}").ok()?,
        Value::Time(x) => write!(s, "{x}").ok()?,
        Value::TimeTz(x) => write!(s, "{x}").ok()?,
        Value::Timestamp(x) => write!(s, "{x}").ok()?,
        Value::TimestampTz(x) => write!(s, "{x}").ok()?,
        Value::Interval(x) => write!(s, "{x}").ok()?,
        Value::Inet(x) => write!(s, "{x}").ok()?,
        Value::MacAddr(x) => write!(s, "{x}").ok()?,
        Value::MacAddr8(x) => write!(s, "{x}").ok()?,
        Value::PgLsn(x) => write!(s, "{x}").ok()?,
        Value::Array(a) => write_array(s, a)?,
        #[allow(unreachable_patterns)]
        _ => return None,
    }
    Some(())
}

fn write_float(s: &mut String, x: f64, finite: impl FnOnce() -> String) {
    if x.is_nan() {
        s.push_str("NaN");
    } else if x == f64::INFINITY {
        s.push_str("Infinity");
    } else if x == f64::NEG_INFINITY {
        s.push_str("-Infinity");
    } else {
        s.push_str(&finite());
    }
}

/// An array literal: `[2:3]={"a","b"}`, elements quoted, `NULL` unquoted.
fn write_array(s: &mut String, a: &Array<'_>) -> Option<()> {
    let dims = a.dims();
    if dims.iter().any(|d| d.lower_bound != 1) {
        for d in dims {
            let upper = i64::from(d.lower_bound) + i64::from(d.len) - 1;
            write!(s, "[{}:{}]", d.lower_bound, upper).ok()?;
        }
        s.push('=');
    }
    let lens: Vec<usize> = dims
        .iter()
        .map(|d| usize::try_from(d.len).unwrap_or(0))
        .collect();
    let mut elements = a.elements().iter();
    write_array_dim(s, &lens, &mut elements)
}

fn write_array_dim<'v>(
    s: &mut String,
    dims: &[usize],
    elements: &mut impl Iterator<Item = &'v Value<'v>>,
) -> Option<()> {
    s.push('{');
    if let Some((&len, inner)) = dims.split_first() {
        for i in 0..len {
            if i > 0 {
                s.push(',');
            }
            if inner.is_empty() {
                let v = elements.next()?;
                if v.is_null() {
                    s.push_str("NULL");
                } else {
                    let mut text = String::new();
                    write_text(&mut text, v)?;
                    s.push('"');
                    for c in text.chars() {
                        if c == '"' || c == '\\' {
                            s.push('\\');
                        }
                        s.push(c);
                    }
                    s.push('"');
                }
            } else {
                write_array_dim(s, inner, elements)?;
            }
        }
    }
    s.push('}');
    Some(())
}
