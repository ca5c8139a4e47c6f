//! The settings of the Debezium format, under Debezium's own names and with
//! its defaults, so that a Debezium connector's properties carry over.
//!
//! [`DebeziumOptions::set`] takes a setting by its Debezium name
//! (`"decimal.handling.mode"`) and a value as Debezium spells it
//! (`"string"`), and [`DebeziumOptions::settings`] lists every setting with
//! its current value (what `pgcdc validate` prints).

use std::fmt;

/// `time.precision.mode`: how `date`, `time`, `timestamp` are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimePrecisionMode {
    /// `adaptive` (Debezium's default): `time(p)`/`timestamp(p)` in
    /// milliseconds when p <= 3, else microseconds; `date` in days.
    #[default]
    Adaptive,
    /// `adaptive_time_microseconds`: as adaptive, but `time` always in
    /// microseconds.
    AdaptiveTimeMicroseconds,
    /// `connect`: Kafka Connect's `Date`, `Time`, `Timestamp` (milliseconds;
    /// sub-millisecond digits are dropped).
    Connect,
}

/// `decimal.handling.mode`: how `numeric`/`decimal` (and `money`) are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecimalHandlingMode {
    /// `precise` (Debezium's default): Connect `Decimal`, the base64 of the
    /// big-endian two's-complement unscaled value (a `numeric` without a
    /// declared scale is `io.debezium.data.VariableScaleDecimal`,
    /// `{"scale":…,"value":<base64>}`).
    #[default]
    Precise,
    /// `string`: every digit in a JSON string.
    String,
    /// `double`: a JSON number (may lose precision).
    Double,
}

/// `binary.handling.mode`: how `bytea` (and `bit(n)`, `varbit`) are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BinaryHandlingMode {
    /// `bytes` (Debezium's default; in JSON the converter writes base64).
    #[default]
    Bytes,
    /// `base64`
    Base64,
    /// `base64-url-safe`
    Base64UrlSafe,
    /// `hex`
    Hex,
}

/// `interval.handling.mode`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IntervalHandlingMode {
    /// `numeric` (Debezium's default): `io.debezium.time.MicroDuration`,
    /// microseconds with a month of 365.25/12 days.
    #[default]
    Numeric,
    /// `string`: `io.debezium.time.Interval`, ISO 8601 `P1Y2M3DT4H5M6.78S`.
    String,
}

/// `hstore.handling.mode`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HstoreHandlingMode {
    /// `json` (Debezium's default): a JSON object's text, in a string
    /// (`io.debezium.data.Json`).
    #[default]
    Json,
    /// `map`: a JSON object.
    Map,
}

/// The operations left out of the output (`skipped.operations`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkippedOperations {
    /// `c`
    pub create: bool,
    /// `u`
    pub update: bool,
    /// `d`
    pub delete: bool,
    /// `t` (skipped by Debezium's default)
    pub truncate: bool,
}

impl Default for SkippedOperations {
    /// Debezium's default: `t`.
    fn default() -> Self {
        SkippedOperations {
            create: false,
            update: false,
            delete: false,
            truncate: true,
        }
    }
}

impl SkippedOperations {
    /// Nothing skipped (`none`).
    pub const NONE: SkippedOperations = SkippedOperations {
        create: false,
        update: false,
        delete: false,
        truncate: false,
    };

    /// Whether events of `op` are left out.
    pub fn skips(&self, op: crate::event::Operation) -> bool {
        use crate::event::Operation;
        match op {
            Operation::Create => self.create,
            Operation::Update => self.update,
            Operation::Delete => self.delete,
            Operation::Truncate => self.truncate,
            _ => false,
        }
    }
}

impl fmt::Display for SkippedOperations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ops: Vec<&str> = [
            (self.create, "c"),
            (self.update, "u"),
            (self.delete, "d"),
            (self.truncate, "t"),
        ]
        .into_iter()
        .filter_map(|(on, code)| on.then_some(code))
        .collect();
        if ops.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&ops.join(","))
        }
    }
}

/// The placeholder for an unchanged TOASTed value
/// (`unavailable.value.placeholder`): text, or bytes given as
/// `hex:<digits>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    text: String,
    bytes: Vec<u8>,
}

impl Placeholder {
    /// Parses Debezium's form: `hex:…` for bytes, anything else is text
    /// (whose UTF-8 bytes stand in for a binary column).
    pub fn parse(value: &str) -> Result<Self, OptionError> {
        match value.strip_prefix("hex:") {
            Some(hex) => {
                let bytes = decode_hex(hex).ok_or_else(|| OptionError {
                    name: "unavailable.value.placeholder",
                    reason: format!("{value:?}: after `hex:` come pairs of hex digits"),
                })?;
                Ok(Placeholder {
                    text: String::from_utf8_lossy(&bytes).into_owned(),
                    bytes,
                })
            }
            None => Ok(Placeholder {
                text: value.to_owned(),
                bytes: value.as_bytes().to_vec(),
            }),
        }
    }

    /// The text written for a text-like column.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The bytes written for a binary column.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Default for Placeholder {
    fn default() -> Self {
        Placeholder {
            text: super::UNAVAILABLE_VALUE.to_owned(),
            bytes: super::UNAVAILABLE_VALUE.as_bytes().to_vec(),
        }
    }
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Settings of the Debezium format. The defaults are Debezium's, except
/// where the README's compatibility table says otherwise (`schemas.enable`
/// and `key` are off: one value per line, as before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebeziumOptions {
    /// `topic.prefix`: `source.name`, and the first part of topic and
    /// subject names.
    pub name: String,
    /// `source.version`: pgcdc's version.
    pub version: String,
    /// Writes schema-change events (off by default: Debezium's PostgreSQL
    /// connector emits none, so its consumers do not expect them).
    pub schema_changes: bool,
    /// `tombstones.on.delete`: after a delete, a record with the key and a
    /// null value (written where records carry keys).
    pub tombstones_on_delete: bool,
    /// `skipped.operations`
    pub skipped_operations: SkippedOperations,
    /// `time.precision.mode`
    pub time_precision_mode: TimePrecisionMode,
    /// `decimal.handling.mode`
    pub decimal_handling_mode: DecimalHandlingMode,
    /// `binary.handling.mode`
    pub binary_handling_mode: BinaryHandlingMode,
    /// `interval.handling.mode`
    pub interval_handling_mode: IntervalHandlingMode,
    /// `hstore.handling.mode`
    pub hstore_handling_mode: HstoreHandlingMode,
    /// `provide.transaction.metadata`: the `transaction` block in every
    /// event, and BEGIN/END transaction events.
    pub provide_transaction_metadata: bool,
    /// `unavailable.value.placeholder`
    pub unavailable_value_placeholder: Placeholder,
    /// `schemas.enable` (the Kafka Connect JSON converter's): each record
    /// as `{"schema":…,"payload":…}`.
    pub schemas_enable: bool,
    /// `key`: each line is `{"key":…,"value":…}` (the key is the table's
    /// primary key, or its replica identity columns).
    pub key: bool,
}

/// pgcdc's version, written as `source.version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

impl Default for DebeziumOptions {
    fn default() -> Self {
        DebeziumOptions {
            name: "pgcdc".to_owned(),
            version: VERSION.to_owned(),
            schema_changes: false,
            tombstones_on_delete: true,
            skipped_operations: SkippedOperations::default(),
            time_precision_mode: TimePrecisionMode::default(),
            decimal_handling_mode: DecimalHandlingMode::default(),
            binary_handling_mode: BinaryHandlingMode::default(),
            interval_handling_mode: IntervalHandlingMode::default(),
            hstore_handling_mode: HstoreHandlingMode::default(),
            provide_transaction_metadata: false,
            unavailable_value_placeholder: Placeholder::default(),
            schemas_enable: false,
            key: false,
        }
    }
}

/// A setting that does not exist or a value it does not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {reason}")]
pub struct OptionError {
    /// The setting.
    pub name: &'static str,
    /// What is wrong, with the values it takes.
    pub reason: String,
}

/// Every setting [`DebeziumOptions::set`] takes, by its Debezium name.
pub const SETTINGS: &[&str] = &[
    "topic.prefix",
    "tombstones.on.delete",
    "skipped.operations",
    "time.precision.mode",
    "decimal.handling.mode",
    "binary.handling.mode",
    "interval.handling.mode",
    "hstore.handling.mode",
    "provide.transaction.metadata",
    "unavailable.value.placeholder",
    "schemas.enable",
    "key",
    "schema.changes",
];

fn pick<T: Copy>(
    name: &'static str,
    value: &str,
    choices: &[(&'static str, T)],
) -> Result<T, OptionError> {
    let v = value.trim().to_ascii_lowercase();
    choices
        .iter()
        .find(|(n, _)| *n == v)
        .map(|(_, t)| *t)
        .ok_or_else(|| OptionError {
            name,
            reason: format!(
                "{value:?} is not one of {}",
                choices
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

fn name_of<T: PartialEq>(value: T, choices: &[(&'static str, T)]) -> &'static str {
    choices
        .iter()
        .find(|(_, t)| *t == value)
        .map_or("", |(n, _)| *n)
}

const TIME_MODES: &[(&str, TimePrecisionMode)] = &[
    ("adaptive", TimePrecisionMode::Adaptive),
    (
        "adaptive_time_microseconds",
        TimePrecisionMode::AdaptiveTimeMicroseconds,
    ),
    ("connect", TimePrecisionMode::Connect),
];
const DECIMAL_MODES: &[(&str, DecimalHandlingMode)] = &[
    ("precise", DecimalHandlingMode::Precise),
    ("string", DecimalHandlingMode::String),
    ("double", DecimalHandlingMode::Double),
];
const BINARY_MODES: &[(&str, BinaryHandlingMode)] = &[
    ("bytes", BinaryHandlingMode::Bytes),
    ("base64", BinaryHandlingMode::Base64),
    ("base64-url-safe", BinaryHandlingMode::Base64UrlSafe),
    ("hex", BinaryHandlingMode::Hex),
];
const INTERVAL_MODES: &[(&str, IntervalHandlingMode)] = &[
    ("numeric", IntervalHandlingMode::Numeric),
    ("string", IntervalHandlingMode::String),
];
const HSTORE_MODES: &[(&str, HstoreHandlingMode)] = &[
    ("json", HstoreHandlingMode::Json),
    ("map", HstoreHandlingMode::Map),
];

fn parse_bool(name: &'static str, value: &str) -> Result<bool, OptionError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(OptionError {
            name,
            reason: format!("{value:?} is not true or false"),
        }),
    }
}

fn parse_skipped(value: &str) -> Result<SkippedOperations, OptionError> {
    let mut s = SkippedOperations::NONE;
    for op in value.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        match op.to_ascii_lowercase().as_str() {
            "c" => s.create = true,
            "u" => s.update = true,
            "d" => s.delete = true,
            "t" => s.truncate = true,
            "none" => {}
            _ => {
                return Err(OptionError {
                    name: "skipped.operations",
                    reason: format!(
                        "{op:?} is not an operation: give a comma-separated list of c, u, d, t, or none"
                    ),
                })
            }
        }
    }
    Ok(s)
}

impl DebeziumOptions {
    /// Sets one setting by its Debezium name, from its value as Debezium
    /// spells it (`set("decimal.handling.mode", "string")`).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), OptionError> {
        match name {
            "topic.prefix" => {
                if value.is_empty() {
                    return Err(OptionError {
                        name: "topic.prefix",
                        reason: "must not be empty".to_owned(),
                    });
                }
                self.name = value.to_owned();
            }
            "tombstones.on.delete" => {
                self.tombstones_on_delete = parse_bool("tombstones.on.delete", value)?
            }
            "skipped.operations" => self.skipped_operations = parse_skipped(value)?,
            "time.precision.mode" => {
                self.time_precision_mode = pick("time.precision.mode", value, TIME_MODES)?
            }
            "decimal.handling.mode" => {
                self.decimal_handling_mode = pick("decimal.handling.mode", value, DECIMAL_MODES)?
            }
            "binary.handling.mode" => {
                self.binary_handling_mode = pick("binary.handling.mode", value, BINARY_MODES)?
            }
            "interval.handling.mode" => {
                self.interval_handling_mode = pick("interval.handling.mode", value, INTERVAL_MODES)?
            }
            "hstore.handling.mode" => {
                self.hstore_handling_mode = pick("hstore.handling.mode", value, HSTORE_MODES)?
            }
            "provide.transaction.metadata" => {
                self.provide_transaction_metadata =
                    parse_bool("provide.transaction.metadata", value)?
            }
            "unavailable.value.placeholder" => {
                self.unavailable_value_placeholder = Placeholder::parse(value)?
            }
            "schemas.enable" => self.schemas_enable = parse_bool("schemas.enable", value)?,
            "key" => self.key = parse_bool("key", value)?,
            "schema.changes" => self.schema_changes = parse_bool("schema.changes", value)?,
            _ => {
                return Err(OptionError {
                    name: "setting",
                    reason: format!(
                        "{name:?} is not a Debezium setting pgcdc knows; it knows {}",
                        SETTINGS.join(", ")
                    ),
                })
            }
        }
        Ok(())
    }

    /// Every setting with its value, as Debezium spells it, in the order of
    /// [`SETTINGS`].
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("topic.prefix", self.name.clone()),
            (
                "tombstones.on.delete",
                self.tombstones_on_delete.to_string(),
            ),
            ("skipped.operations", self.skipped_operations.to_string()),
            (
                "time.precision.mode",
                name_of(self.time_precision_mode, TIME_MODES).to_owned(),
            ),
            (
                "decimal.handling.mode",
                name_of(self.decimal_handling_mode, DECIMAL_MODES).to_owned(),
            ),
            (
                "binary.handling.mode",
                name_of(self.binary_handling_mode, BINARY_MODES).to_owned(),
            ),
            (
                "interval.handling.mode",
                name_of(self.interval_handling_mode, INTERVAL_MODES).to_owned(),
            ),
            (
                "hstore.handling.mode",
                name_of(self.hstore_handling_mode, HSTORE_MODES).to_owned(),
            ),
            (
                "provide.transaction.metadata",
                self.provide_transaction_metadata.to_string(),
            ),
            (
                "unavailable.value.placeholder",
                self.unavailable_value_placeholder.text().to_owned(),
            ),
            ("schemas.enable", self.schemas_enable.to_string()),
            ("key", self.key.to_string()),
            ("schema.changes", self.schema_changes.to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_round_trips_through_its_printed_value() {
        let mut o = DebeziumOptions::default();
        for (name, value) in [
            ("topic.prefix", "app"),
            ("tombstones.on.delete", "false"),
            ("skipped.operations", "u,d"),
            ("time.precision.mode", "connect"),
            ("decimal.handling.mode", "string"),
            ("binary.handling.mode", "base64-url-safe"),
            ("interval.handling.mode", "string"),
            ("hstore.handling.mode", "map"),
            ("provide.transaction.metadata", "true"),
            ("unavailable.value.placeholder", "__gone"),
            ("schemas.enable", "true"),
            ("key", "true"),
            ("schema.changes", "true"),
        ] {
            o.set(name, value).unwrap();
        }
        let printed = o.settings();
        assert_eq!(printed.len(), SETTINGS.len());
        let mut again = DebeziumOptions::default();
        for (name, value) in &printed {
            again.set(name, value).unwrap();
        }
        assert_eq!(again, o);
        assert_eq!(
            DebeziumOptions::default().settings()[2],
            ("skipped.operations", "t".to_owned())
        );
    }

    #[test]
    fn bad_values_name_the_setting_and_the_choices() {
        let mut o = DebeziumOptions::default();
        let e = o.set("decimal.handling.mode", "exact").unwrap_err();
        assert!(e.to_string().contains("precise, string, double"), "{e}");
        let e = o.set("skipped.operations", "x").unwrap_err();
        assert!(e.to_string().starts_with("skipped.operations"), "{e}");
        let e = o.set("tombstone.on.delete", "true").unwrap_err();
        assert!(e.to_string().contains("tombstones.on.delete"), "{e}");
        assert!(o.set("unavailable.value.placeholder", "hex:zz").is_err());
        o.set("unavailable.value.placeholder", "hex:00ff").unwrap();
        assert_eq!(o.unavailable_value_placeholder.bytes(), &[0, 255]);
        o.set("skipped.operations", "none").unwrap();
        assert_eq!(o.skipped_operations, SkippedOperations::NONE);
    }
}
