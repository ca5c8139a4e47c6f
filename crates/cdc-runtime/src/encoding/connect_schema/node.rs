//! A Kafka Connect schema as a small tree, and its JSON as Kafka Connect's
//! `JsonConverter` writes it (`asJsonSchema`).
//!
//! The converter builds each schema object in one order: `type`, then the
//! nested schemas of the type (`items`; `keys` and `values`; `fields`), then
//! `optional`, `name`, `version`, `doc`, `parameters`, `default`, and, for a
//! field of a struct, `field` last (it is added to a copy of the field's
//! schema). Absent attributes are left out, never written as `null`.

use std::borrow::Cow;

use super::super::json::{write_int, write_str};

/// A Connect schema type, with the schemas nested in it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Kind {
    Boolean,
    Int16,
    Int32,
    Int64,
    /// `FLOAT32`, written `float`.
    Float32,
    /// `FLOAT64`, written `double`.
    Float64,
    Bytes,
    String,
    Array(Box<Schema>),
    Map(Box<Schema>, Box<Schema>),
    Struct(Vec<Field>),
}

/// A field of a struct schema.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Field {
    pub(super) name: Cow<'static, str>,
    pub(super) schema: Schema,
}

/// One Connect schema: its type and the attributes the JSON converter
/// writes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Schema {
    pub(super) kind: Kind,
    pub(super) optional: bool,
    pub(super) name: Option<Cow<'static, str>>,
    pub(super) version: Option<u32>,
    pub(super) doc: Option<&'static str>,
    /// In insertion order (Connect keeps them in a `LinkedHashMap`).
    pub(super) parameters: Vec<(&'static str, String)>,
    /// A string default value (the only kind the Debezium schemas here
    /// declare: `source.snapshot`'s `"false"`).
    pub(super) default: Option<&'static str>,
}

impl Schema {
    /// A required schema of `kind` with no other attribute.
    pub(super) fn of(kind: Kind) -> Self {
        Schema {
            kind,
            optional: false,
            name: None,
            version: None,
            doc: None,
            parameters: Vec::new(),
            default: None,
        }
    }

    pub(super) fn boolean() -> Self {
        Self::of(Kind::Boolean)
    }
    pub(super) fn int16() -> Self {
        Self::of(Kind::Int16)
    }
    pub(super) fn int32() -> Self {
        Self::of(Kind::Int32)
    }
    pub(super) fn int64() -> Self {
        Self::of(Kind::Int64)
    }
    pub(super) fn float32() -> Self {
        Self::of(Kind::Float32)
    }
    pub(super) fn float64() -> Self {
        Self::of(Kind::Float64)
    }
    pub(super) fn bytes() -> Self {
        Self::of(Kind::Bytes)
    }
    pub(super) fn string() -> Self {
        Self::of(Kind::String)
    }
    pub(super) fn array(items: Schema) -> Self {
        Self::of(Kind::Array(Box::new(items)))
    }
    pub(super) fn map(keys: Schema, values: Schema) -> Self {
        Self::of(Kind::Map(Box::new(keys), Box::new(values)))
    }
    pub(super) fn structure(fields: Vec<Field>) -> Self {
        Self::of(Kind::Struct(fields))
    }

    /// A logical type: `kind` named `name`, version 1 (every Debezium and
    /// Connect logical type used here is at version 1).
    pub(super) fn logical(kind: Kind, name: &'static str) -> Self {
        Self::of(kind).named(name).version(1)
    }

    pub(super) fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    pub(super) fn optional_if(mut self, optional: bool) -> Self {
        self.optional = optional;
        self
    }

    pub(super) fn named(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    pub(super) fn version(mut self, version: u32) -> Self {
        self.version = Some(version);
        self
    }

    pub(super) fn doc(mut self, doc: &'static str) -> Self {
        self.doc = Some(doc);
        self
    }

    pub(super) fn param(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.parameters.push((key, value.into()));
        self
    }

    pub(super) fn default_str(mut self, value: &'static str) -> Self {
        self.default = Some(value);
        self
    }

    /// Appends the JSON of this schema; `field` is the field name when it is
    /// the schema of a struct's field.
    pub(super) fn write(&self, out: &mut Vec<u8>, field: Option<&str>) {
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(self.kind.type_name().as_bytes());
        out.push(b'"');
        match &self.kind {
            Kind::Array(items) => {
                out.extend_from_slice(b",\"items\":");
                items.write(out, None);
            }
            Kind::Map(keys, values) => {
                out.extend_from_slice(b",\"keys\":");
                keys.write(out, None);
                out.extend_from_slice(b",\"values\":");
                values.write(out, None);
            }
            Kind::Struct(fields) => {
                out.extend_from_slice(b",\"fields\":[");
                for (i, f) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    f.schema.write(out, Some(&f.name));
                }
                out.push(b']');
            }
            _ => {}
        }
        out.extend_from_slice(if self.optional {
            b",\"optional\":true"
        } else {
            b",\"optional\":false"
        });
        if let Some(name) = &self.name {
            out.extend_from_slice(b",\"name\":");
            write_str(out, name);
        }
        if let Some(version) = self.version {
            out.extend_from_slice(b",\"version\":");
            write_int(out, version);
        }
        if let Some(doc) = self.doc {
            out.extend_from_slice(b",\"doc\":");
            write_str(out, doc);
        }
        if !self.parameters.is_empty() {
            out.extend_from_slice(b",\"parameters\":{");
            for (i, (k, v)) in self.parameters.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_str(out, v);
            }
            out.push(b'}');
        }
        if let Some(default) = self.default {
            out.extend_from_slice(b",\"default\":");
            write_str(out, default);
        }
        if let Some(field) = field {
            out.extend_from_slice(b",\"field\":");
            write_str(out, field);
        }
        out.push(b'}');
    }
}

impl Kind {
    /// The type's name in the converter's JSON.
    fn type_name(&self) -> &'static str {
        match self {
            Kind::Boolean => "boolean",
            Kind::Int16 => "int16",
            Kind::Int32 => "int32",
            Kind::Int64 => "int64",
            Kind::Float32 => "float",
            Kind::Float64 => "double",
            Kind::Bytes => "bytes",
            Kind::String => "string",
            Kind::Array(_) => "array",
            Kind::Map(..) => "map",
            Kind::Struct(_) => "struct",
        }
    }
}

impl Field {
    pub(super) fn new(name: impl Into<Cow<'static, str>>, schema: Schema) -> Self {
        Field {
            name: name.into(),
            schema,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(s: &Schema, field: Option<&str>) -> String {
        let mut out = Vec::new();
        s.write(&mut out, field);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn attributes_come_in_the_converters_order() {
        let s = Schema::logical(Kind::Bytes, "org.apache.kafka.connect.data.Decimal")
            .param("scale", "2")
            .param("connect.decimal.precision", "10")
            .doc("d")
            .default_str("x")
            .optional();
        assert_eq!(
            json(&s, Some("price")),
            r#"{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"doc":"d","parameters":{"scale":"2","connect.decimal.precision":"10"},"default":"x","field":"price"}"#
        );
    }

    #[test]
    fn nested_schemas_come_right_after_the_type() {
        let s = Schema::structure(vec![
            Field::new("a", Schema::array(Schema::int32().optional())),
            Field::new(
                "m",
                Schema::map(Schema::string(), Schema::string().optional()).optional(),
            ),
        ])
        .named("n");
        assert_eq!(
            json(&s, None),
            r#"{"type":"struct","fields":[{"type":"array","items":{"type":"int32","optional":true},"optional":false,"field":"a"},{"type":"map","keys":{"type":"string","optional":false},"values":{"type":"string","optional":true},"optional":true,"field":"m"}],"optional":false,"name":"n"}"#
        );
    }

    #[test]
    fn names_and_field_names_are_escaped() {
        let s = Schema::string().named("a\"b");
        assert_eq!(
            json(&s, Some("c\\d")),
            r#"{"type":"string","optional":false,"name":"a\"b","field":"c\\d"}"#
        );
    }
}
