//! `[debezium]`: the settings of the Debezium format, under Debezium's own
//! names (quoted, as TOML wants dotted keys), so a connector's properties
//! carry over:
//!
//! ```toml
//! [debezium]
//! "topic.prefix" = "app"
//! "decimal.handling.mode" = "string"
//! "tombstones.on.delete" = false
//! "skipped.operations" = ["t"]     # or "t", or "none"
//! ```
//!
//! [`cdc_runtime::encoding::SETTINGS`] lists every setting; values are
//! Debezium's (strings, or booleans for the boolean settings).

use std::collections::BTreeMap;

use cdc_runtime::encoding::DebeziumOptions;
use serde::Deserialize;

use super::{invalid, ConfigFileError};

/// `[debezium]`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct DebeziumConfig(pub BTreeMap<String, toml::Value>);

impl DebeziumConfig {
    /// The typed settings: Debezium's defaults with these on top.
    pub fn options(&self) -> Result<DebeziumOptions, ConfigFileError> {
        let mut options = DebeziumOptions::default();
        for (name, value) in &self.0 {
            let key = format!("debezium.\"{name}\"");
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Boolean(b) => b.to_string(),
                toml::Value::Array(items) => items
                    .iter()
                    .map(|v| match v {
                        toml::Value::String(s) => Ok(s.clone()),
                        other => Err(invalid(
                            key.as_str(),
                            format!("{other} is not a string; give a list of strings"),
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .join(","),
                other => {
                    return Err(invalid(
                        key.as_str(),
                        format!("{other} is not a string or a boolean"),
                    ))
                }
            };
            options
                .set(name, &text)
                .map_err(|e| invalid(key.as_str(), e.reason))?;
        }
        Ok(options)
    }
}
