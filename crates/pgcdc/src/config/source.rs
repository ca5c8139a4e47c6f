//! `[source]`: the password, the replication connection and the tables.

use std::str::FromStr;

use cdc_runtime::replication::{ReplicationConfig, RootCertSource, SslMode};

use std::collections::BTreeMap;

use cdc_runtime::source::TableFilter;

use serde::Deserialize;

use super::{invalid, table_ref, ConfigFileError, Secret, SourceConfig, TableRef};

impl SourceConfig {
    /// Resolves the password from `password`, `password_file` or `password_env`.
    pub fn resolve_password(&self) -> Result<Option<Secret>, ConfigFileError> {
        if let Some(p) = &self.password {
            return Ok(Some(p.clone()));
        }
        if let Some(path) = &self.password_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                invalid(
                    "source.password_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            return Ok(Some(Secret::new(text.trim_end_matches(['\r', '\n']))));
        }
        if let Some(name) = &self.password_env {
            return std::env::var(name)
                .map(|v| Some(Secret::new(v)))
                .map_err(|_| {
                    invalid(
                        "source.password_env",
                        format!("environment variable {name} is not set"),
                    )
                });
        }
        Ok(None)
    }

    /// The replication connection settings.
    pub fn replication_config(&self) -> Result<ReplicationConfig, ConfigFileError> {
        let hosts: Vec<&str> = self.host.split(',').map(str::trim).collect();
        if hosts.iter().any(|h| h.is_empty()) {
            return Err(invalid(
                "source.host",
                format!("{:?} names an empty host", self.host),
            ));
        }
        let ports = match self.port.0.as_slice() {
            [one] => vec![*one; hosts.len()],
            many if many.len() == hosts.len() => many.to_vec(),
            many => {
                return Err(invalid(
                    "source.port",
                    format!(
                        "{} ports for {} hosts; give one port for every host, or one per host",
                        many.len(),
                        hosts.len()
                    ),
                ))
            }
        };
        let mut config = ReplicationConfig::new(self.user.clone())
            .hosts(hosts.into_iter().zip(ports))
            .dbname(self.database.clone())
            .application_name("pgcdc");
        if let Some(p) = self.resolve_password()? {
            config = config.password(p.expose());
        }
        if let Some(mode) = &self.sslmode {
            let mode =
                SslMode::from_str(mode).map_err(|e| invalid("source.sslmode", e.to_string()))?;
            config = config.sslmode(mode);
        }
        if let Some(root) = &self.sslrootcert {
            let source = if root == "system" {
                RootCertSource::System
            } else {
                RootCertSource::File(root.into())
            };
            config = config.sslrootcert(source);
        }
        // An abstract socket, or sockets beside TCP hosts under a mode that
        // requires TLS: refused now, not at the first connection.
        config
            .check_hosts()
            .map_err(|e| invalid("source.host", e.to_string()))?;
        Ok(config)
    }

    /// The configured tables, parsed.
    pub fn table_refs(&self) -> Result<Vec<TableRef>, ConfigFileError> {
        self.tables
            .iter()
            .map(|t| table_ref("source.tables", t.name()))
            .collect()
    }

    /// The row filters and column lists of the configured tables.
    pub fn table_filters(&self) -> Result<BTreeMap<TableRef, TableFilter>, ConfigFileError> {
        let mut filters = BTreeMap::new();
        for t in &self.tables {
            if let TableEntry::Filtered(f) = t {
                let filter = TableFilter {
                    row_filter: f.row_filter.clone(),
                    columns: f.columns.clone(),
                };
                if !filter.is_empty() {
                    filters.insert(table_ref("source.tables", &f.name)?, filter);
                }
            }
        }
        Ok(filters)
    }
}

/// `[source] port`: one port for every host, or one per host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ports(pub Vec<u16>);

impl Default for Ports {
    fn default() -> Self {
        Ports(vec![cdc_runtime::replication::DEFAULT_PORT])
    }
}

impl PartialEq<u16> for Ports {
    fn eq(&self, other: &u16) -> bool {
        self.0.as_slice() == [*other]
    }
}

impl std::fmt::Display for Ports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ports: Vec<String> = self.0.iter().map(u16::to_string).collect();
        f.write_str(&ports.join(","))
    }
}

impl std::str::FromStr for Ports {
    type Err = String;

    /// `5432` or `5432,5433`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.split(',')
            .map(|p| {
                p.trim()
                    .parse::<u16>()
                    .map_err(|_| format!("{s:?} is not a port or a comma-separated list of ports"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Ports)
    }
}

impl<'de> Deserialize<'de> for Ports {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Ports;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a port from 0 to 65535, or a list of them (one per host)")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Ports, E> {
                u16::try_from(v)
                    .map(|p| Ports(vec![p]))
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Ports, E> {
                u16::try_from(v)
                    .map(|p| Ports(vec![p]))
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Ports, A::Error> {
                let mut ports = Vec::new();
                while let Some(p) = seq.next_element::<u16>()? {
                    ports.push(p);
                }
                if ports.is_empty() {
                    return Err(serde::de::Error::invalid_length(0, &self));
                }
                Ok(Ports(ports))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// `[source] host`: a string (`"a"` or `"a,b"`) or a list of strings,
/// kept as the comma-separated list libpq takes.
pub(super) fn host_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Hosts {
        One(String),
        Many(Vec<String>),
    }
    match Hosts::deserialize(d)? {
        Hosts::One(h) => Ok(h),
        Hosts::Many(list) if !list.is_empty() && list.iter().all(|h| !h.contains(',')) => {
            Ok(list.join(","))
        }
        Hosts::Many(_) => Err(serde::de::Error::custom(
            "expected a non-empty list of host names",
        )),
    }
}

/// One `[source] tables` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum TableEntry {
    /// `"schema.table"`.
    Name(String),
    /// `{ name = "schema.table", where = "...", columns = ["a", "b"] }`.
    Filtered(FilteredTable),
}

/// A table with a row filter or a column list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilteredTable {
    /// `schema.table`, or `table` for `public`.
    pub name: String,
    /// Only rows matching this SQL condition are captured (and snapshotted).
    #[serde(rename = "where", default)]
    pub row_filter: Option<String>,
    /// Only these columns are captured (they must include the key).
    #[serde(default)]
    pub columns: Option<Vec<String>>,
}

impl TableEntry {
    /// The table's name as written.
    pub fn name(&self) -> &str {
        match self {
            TableEntry::Name(n) => n,
            TableEntry::Filtered(f) => &f.name,
        }
    }
}

impl From<String> for TableEntry {
    fn from(name: String) -> Self {
        TableEntry::Name(name)
    }
}

/// `source.on_slot_lost` as written in the file: what `pgcdc run` does when
/// the slot was invalidated by the server, or is gone while the job has a
/// checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotLostSetting {
    /// Stop with the reason and the way out (the default).
    #[default]
    Fail,
    /// Create a new slot and read every table again (announced at WARN).
    Resnapshot,
}

impl FromStr for SlotLostSetting {
    type Err = ConfigFileError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fail" => Ok(SlotLostSetting::Fail),
            "resnapshot" => Ok(SlotLostSetting::Resnapshot),
            other => Err(invalid(
                "source.on_slot_lost",
                format!("{other:?}: use fail or resnapshot"),
            )),
        }
    }
}

impl From<SlotLostSetting> for cdc_runtime::source::OnSlotLost {
    fn from(s: SlotLostSetting) -> Self {
        match s {
            SlotLostSetting::Fail => cdc_runtime::source::OnSlotLost::Fail,
            SlotLostSetting::Resnapshot => cdc_runtime::source::OnSlotLost::Resnapshot,
        }
    }
}
