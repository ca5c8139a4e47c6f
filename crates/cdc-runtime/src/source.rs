//! What a job captures and from where: [`SourceOptions`].

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::replication::ReplicationConfig;

/// The source of a job: the server, the slot and publication, and which
/// tables they cover.
#[derive(Debug, Clone)]
pub struct SourceOptions {
    /// The replication connection (its password is never printed).
    pub replication: ReplicationConfig,
    /// The logical replication slot (plugin pgoutput).
    pub slot: String,
    /// The publication the slot streams.
    pub publication: String,
    /// The tables or schemas the publication covers.
    pub capture: Capture,
    /// Create the slot when it does not exist.
    pub create_slot: bool,
    /// Create the publication when it does not exist.
    pub create_publication: bool,
    /// Make the slot a failover slot (PostgreSQL 17+), so that standbys
    /// with `sync_replication_slots = on` keep a copy that is usable once
    /// one is promoted: created with `FAILOVER true`, or altered so when it
    /// exists without. `None` (the default): on for servers 17+, off below;
    /// `Some(true)` on an older server is an error. `Some(false)` leaves an
    /// existing slot as it is.
    pub failover_slot: Option<bool>,
    /// Write a WAL heartbeat this often, so that a slot whose tables are
    /// quiet still moves while other databases write (`None`: never).
    pub heartbeat_interval: Option<Duration>,
    /// With nothing at all from the server for this long (not even a
    /// keepalive), the replication connection is taken for dead and
    /// replication reconnects (default
    /// [`DEFAULT_RECEIVE_TIMEOUT`](crate::pipeline::DEFAULT_RECEIVE_TIMEOUT),
    /// 90 s; keep it above the server's `wal_sender_timeout / 2`; `None`:
    /// wait forever).
    pub receive_timeout: Option<Duration>,
    /// Per table: the publication's row filter and column list
    /// (PostgreSQL 15+). The snapshot reads with the same filter, so the
    /// snapshot and the stream agree.
    pub filters: BTreeMap<TableRef, TableFilter>,
    /// Create the signal table (`pgcdc.signals`) through which a running
    /// job is asked for on-demand snapshots (see [`crate::signal`]).
    pub signals: bool,
    /// Publish a partitioned table's changes under its own name rather than
    /// its partitions' (`publish_via_partition_root`, PostgreSQL 13+; set on
    /// the publication pgcdc manages).
    pub publish_via_partition_root: bool,
    /// Install DDL capture (event triggers; see [`crate::ddl`]) so schema
    /// changes are known at their own LSN and dropped tables are reported.
    /// Installing needs a superuser once.
    pub capture_ddl: bool,
    /// What to do when the slot is lost: invalidated by the server, or gone
    /// while the job has a checkpoint (see [`crate::checkpoint::SlotLoss`]).
    pub on_slot_lost: OnSlotLost,
}

/// What a job does when its replication slot is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnSlotLost {
    /// Stop with [`crate::checkpoint::SlotLostError`]: the reason and the
    /// way out (the default).
    #[default]
    Fail,
    /// Say so at WARN, delete the job's checkpoints, drop the slot, create
    /// a new one and read every published table again, as a first start
    /// does. Downstream receives every row again: at-least-once across a
    /// lost slot.
    Resnapshot,
}

/// What a publication publishes of one table (PostgreSQL 15+).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableFilter {
    /// Only rows matching this SQL condition (`WHERE (...)`).
    pub row_filter: Option<String>,
    /// Only these columns (they must include the replica identity).
    pub columns: Option<Vec<String>>,
}

impl TableFilter {
    /// Whether it publishes everything.
    pub fn is_empty(&self) -> bool {
        self.row_filter.is_none() && self.columns.is_none()
    }
}

impl SourceOptions {
    /// A source capturing `capture` through `slot` and `publication`,
    /// creating both when missing, without heartbeats.
    pub fn new(
        replication: ReplicationConfig,
        slot: impl Into<String>,
        publication: impl Into<String>,
        capture: Capture,
    ) -> Self {
        SourceOptions {
            replication,
            slot: slot.into(),
            publication: publication.into(),
            capture,
            create_slot: true,
            create_publication: true,
            failover_slot: None,
            heartbeat_interval: None,
            receive_timeout: Some(crate::pipeline::DEFAULT_RECEIVE_TIMEOUT),
            filters: BTreeMap::new(),
            signals: true,
            publish_via_partition_root: true,
            capture_ddl: false,
            on_slot_lost: OnSlotLost::Fail,
        }
    }

    /// The listed tables (empty when whole schemas are captured).
    pub fn tables(&self) -> &[TableRef] {
        match &self.capture {
            Capture::Tables(t) => t,
            Capture::Schemas(_) => &[],
        }
    }

    /// The listed schemas (empty when tables are listed).
    pub fn schemas(&self) -> &[String] {
        match &self.capture {
            Capture::Tables(_) => &[],
            Capture::Schemas(s) => s,
        }
    }
}

/// Which tables a publication covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capture {
    /// These tables.
    Tables(Vec<TableRef>),
    /// Every table of these schemas, including tables created later
    /// (PostgreSQL 15+).
    Schemas(Vec<String>),
}

/// A table named by schema and name (unquoted; quoted wherever it is used in SQL).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableRef {
    /// The schema.
    pub schema: String,
    /// The table.
    pub table: String,
}

/// A table name that is neither `schema.table` nor `table`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not `schema.table` or `table`")]
pub struct TableRefError(pub String);

impl TableRef {
    /// A table by schema and name.
    pub fn new(schema: impl Into<String>, table: impl Into<String>) -> Self {
        TableRef {
            schema: schema.into(),
            table: table.into(),
        }
    }

    /// Parses `schema.table`, or `table` in schema `public`.
    pub fn parse(s: &str) -> Result<TableRef, TableRefError> {
        let (schema, table) = match s.split_once('.') {
            Some((schema, table)) => (schema, table),
            None => ("public", s),
        };
        if schema.is_empty() || table.is_empty() || table.contains('.') {
            return Err(TableRefError(s.to_owned()));
        }
        Ok(TableRef::new(schema, table))
    }
}

impl std::str::FromStr for TableRef {
    type Err = TableRefError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TableRef::parse(s)
    }
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_parse_with_the_public_default() {
        assert_eq!(
            TableRef::parse("orders").unwrap().to_string(),
            "public.orders"
        );
        assert_eq!(
            TableRef::parse("sales.items").unwrap(),
            TableRef::new("sales", "items")
        );
        for bad in ["a.b.c", ".b", "a.", ""] {
            assert_eq!(
                TableRef::parse(bad),
                Err(TableRefError(bad.to_owned())),
                "{bad}"
            );
        }
    }

    #[test]
    fn capture_lists_tables_or_schemas() {
        let rc = ReplicationConfig::new("u");
        let s = SourceOptions::new(rc.clone(), "s", "p", Capture::Schemas(vec!["x".into()]));
        assert!(s.tables().is_empty());
        assert_eq!(s.schemas(), ["x"]);
        let t = SourceOptions::new(rc, "s", "p", Capture::Tables(vec![TableRef::new("a", "b")]));
        assert_eq!(t.tables().len(), 1);
        assert!(t.schemas().is_empty());
        assert!(t.create_slot && t.create_publication && t.heartbeat_interval.is_none());
    }
}
