//! [`TxnEvent`] -> [`ChangeEvent`].

use std::collections::HashMap;
use std::sync::Arc;

use cdc_core::pgoutput::{OldTuple, Relation};
use cdc_core::{Change, Lsn, Oid, PgTimestamp, RelationCache, TxnEvent, ValueError, Xid};

use super::row::RowArena;
use super::{ChangeEvent, ColumnSchema, Operation, Row, SchemaChange, SourceInfo, TableSchema};
pub(crate) use events::decode_row;
use events::{message_event, row_event, schema_change_event, with_old_toast};
pub(crate) use positions::ChunkMarks;
use positions::Positions;

/// Why a transaction event could not be converted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// A change arrived outside a transaction (no Begin before it).
    #[error("{what} outside a transaction")]
    NoTransaction {
        /// The kind of event.
        what: &'static str,
    },
    /// A Begin arrived while a transaction was open.
    #[error("Begin of xid {xid} while xid {open_xid} is open")]
    NestedBegin {
        /// Xid of the new Begin.
        xid: Xid,
        /// Xid of the open transaction.
        open_xid: Xid,
    },
    /// A Truncate named a relation no Relation message described.
    #[error("unknown relation oid {oid}")]
    UnknownRelation {
        /// The relation OID.
        oid: Oid,
    },
    /// A row had a different number of columns than its relation.
    #[error("{schema}.{table}: row has {got} columns, relation has {expected}")]
    ColumnCount {
        /// Schema name.
        schema: Arc<str>,
        /// Table name.
        table: Arc<str>,
        /// Columns in the Relation message.
        expected: usize,
        /// Columns in the row.
        got: usize,
    },
    /// A column value did not decode as its type.
    #[error("{schema}.{table}.{column}: {source}")]
    Value {
        /// Schema name.
        schema: Arc<str>,
        /// Table name.
        table: Arc<str>,
        /// Column name.
        column: Arc<str>,
        /// The decoding error.
        #[source]
        source: ValueError,
    },
    /// More than `u32::MAX` events in one transaction.
    #[error("more than 4294967295 events in transaction {xid}")]
    TooManyEvents {
        /// The transaction.
        xid: Xid,
    },
}

#[derive(Debug, Clone, Copy)]
struct OpenTxn {
    xid: Xid,
    commit_lsn: Lsn,
    /// Where its BEGIN was in the stream.
    begin_lsn: Lsn,
    commit_time: PgTimestamp,
    next_index: u32,
}

/// A table's schema as the converter knows it.
#[derive(Debug, Clone)]
struct Known {
    /// The Relation it was built from (`None` when restored from a
    /// checkpoint, until the server sends it again).
    relation: Option<Arc<Relation<'static>>>,
    schema: Arc<TableSchema>,
    /// The LSN of the first change decoded with it.
    since: Lsn,
}

/// Converts the event stream of a [`TxnAssembler`](cdc_core::TxnAssembler)
/// into [`ChangeEvent`]s.
///
/// Feed it every [`TxnEvent`] in order. It tracks the open transaction (for
/// commit LSN, xid, time and the per-transaction event index) and caches one
/// [`TableSchema`] per relation, rebuilt only when a new Relation message
/// replaces the cached one, so events share column names.
///
/// # Schema changes
///
/// Each change is decoded with the Relation the server sent before it, so
/// with the column set in force at its LSN. When that differs from the
/// schema the table had (a column added, dropped, renamed or retyped, the
/// table renamed), an [`Operation::SchemaChange`] event comes first. The
/// versions a transaction brings in become the table's known schema at its
/// commit; [`reset`](Self::reset) forgets those of the open transaction, so
/// the server's replay of it compares with the schema before it.
/// [`relation_versions`](Self::relation_versions) and
/// [`restore_relations`](Self::restore_relations) carry the known schemas
/// (with the LSN each took effect at) through a checkpoint.
///
/// ```
/// use cdc_core::pgoutput::{Column, Insert, Relation, ReplicaIdentity};
/// use cdc_core::{types, Change, Lsn, PgTimestamp, RelationCache, TupleData, TupleValue,
///     TxnBegin, TxnEvent, TxnKind, Value};
/// use cdc_runtime::event::{EventConverter, Operation};
///
/// let mut cache = RelationCache::new();
/// let rel = cache.insert_relation(Relation {
///     xid: None, oid: 16384, namespace: "public".into(), name: "t".into(),
///     replica_identity: ReplicaIdentity::Default,
///     columns: vec![Column { flags: 1, name: "id".into(), type_oid: types::INT4, type_modifier: -1 }],
/// });
/// let mut conv = EventConverter::new("app", "pgcdc_slot");
/// let mut out = Vec::new();
/// let begin = TxnBegin { xid: 7, final_lsn: Lsn::from_u64(0x100),
///     timestamp: PgTimestamp::EPOCH, kind: TxnKind::Plain };
/// conv.handle(&TxnEvent::Begin(begin), &cache, None, &mut out)?;
/// let new = TupleData::from_values(&[TupleValue::Text(b"42")]).unwrap();
/// let insert = Change::Insert(rel, Insert { xid: None, relation: 16384, new });
/// conv.handle(&TxnEvent::Change(insert), &cache, None, &mut out)?;
/// assert_eq!(out[0].op, Operation::Create);
/// assert_eq!(out[0].after_values().as_deref(), Some(&[Value::Int4(42)][..]));
/// assert_eq!(out[0].source.commit_lsn, Lsn::from_u64(0x100));
/// # Ok::<(), cdc_runtime::event::ConvertError>(())
/// ```
#[derive(Debug)]
pub struct EventConverter {
    database: Arc<str>,
    slot: Arc<str>,
    open: Option<OpenTxn>,
    /// The schema of every table as of the last commit.
    schemas: HashMap<Oid, Known>,
    /// Schemas the open transaction brought in.
    open_schemas: HashMap<Oid, Known>,
    /// Tables the open transaction dropped (known only with DDL capture).
    open_dropped: Vec<Oid>,
    /// The entry of `schemas` used last: consecutive changes are mostly of
    /// one table, so they skip the hash lookup.
    last: Option<(Arc<Relation<'static>>, Arc<TableSchema>)>,
    /// Where rows keep their columns as sent (no allocation per row).
    arena: RowArena,
    /// The events' positions in their transactions, and the boundaries.
    positions: Positions,
}

impl EventConverter {
    /// A converter for events of `database`, read through `slot`.
    pub fn new(database: impl Into<Arc<str>>, slot: impl Into<Arc<str>>) -> Self {
        EventConverter {
            database: database.into(),
            slot: slot.into(),
            open: None,
            schemas: HashMap::new(),
            open_schemas: HashMap::new(),
            open_dropped: Vec::new(),
            last: None,
            arena: RowArena::default(),
            positions: Positions::default(),
        }
    }

    /// Forgets the open transaction and the schemas it brought in (after a
    /// reconnect: the server resends it).
    pub fn reset(&mut self) {
        self.open = None;
        self.open_schemas.clear();
        self.open_dropped.clear();
        self.last = None;
        self.positions.forget();
    }

    /// The schema of every table as of the last commit, with the LSN of the
    /// first change decoded with it, ordered by oid (for a checkpoint).
    pub fn relation_versions(&self) -> Vec<checkpoint_api::RelationVersion> {
        let mut out: Vec<_> = self
            .schemas
            .values()
            .map(|k| checkpoint_api::RelationVersion {
                oid: k.schema.oid,
                lsn: k.since,
                schema: k.schema.schema.to_string(),
                name: k.schema.table.to_string(),
                columns: k
                    .schema
                    .columns
                    .iter()
                    .map(|c| checkpoint_api::RelationColumn {
                        name: c.name.to_string(),
                        type_oid: c.type_oid,
                        type_modifier: c.type_modifier,
                        key: c.is_key,
                    })
                    .collect(),
            })
            .collect();
        out.sort_unstable_by_key(|r| r.oid);
        out
    }

    /// Takes the schemas a checkpoint recorded as the known ones: the
    /// Relation messages the server sends after the restart are compared
    /// with them, so a change made after the checkpoint is reported once,
    /// and none before it again.
    pub fn restore_relations(&mut self, versions: &[checkpoint_api::RelationVersion]) {
        self.last = None;
        self.open_schemas.clear();
        self.open_dropped.clear();
        self.schemas.clear();
        for v in versions {
            let schema = TableSchema {
                facts: Default::default(),
                oid: v.oid,
                schema: Arc::from(v.schema.as_str()),
                table: Arc::from(v.name.as_str()),
                columns: v
                    .columns
                    .iter()
                    .map(|c| ColumnSchema {
                        name: Arc::from(c.name.as_str()),
                        type_oid: c.type_oid,
                        type_modifier: c.type_modifier,
                        is_key: c.key,
                    })
                    .collect(),
            };
            self.schemas.insert(
                v.oid,
                Known {
                    relation: None,
                    schema: Arc::new(schema),
                    since: v.lsn,
                },
            );
        }
    }

    /// Bytes of the rows of the events made so far, wrapping: the
    /// difference of two readings is what the events between them hold.
    pub(crate) fn row_bytes(&self) -> usize {
        self.arena.copied()
    }

    /// The xid of the open transaction, if any.
    pub fn open_transaction(&self) -> Option<Xid> {
        self.open.map(|o| o.xid)
    }

    /// Where derived events of the open transaction go: its source metadata
    /// and the index after its last event (`None` outside a transaction).
    pub fn open_commit_context(&self) -> Option<crate::operators::CommitContext> {
        self.open.map(|o| crate::operators::CommitContext {
            source: SourceInfo {
                commit_lsn: o.commit_lsn,
                lsn: o.commit_lsn,
                xid: o.xid,
                commit_time: Some(o.commit_time),
                database: self.database.clone(),
                slot: self.slot.clone(),
            },
            next_index: o.next_index,
        })
    }

    /// Source metadata of rows the snapshot emits between transactions, at
    /// `lsn` (no transaction: xid 0, no commit time).
    pub(crate) fn snapshot_source(&self, lsn: Lsn) -> SourceInfo {
        SourceInfo {
            commit_lsn: lsn,
            lsn,
            xid: 0,
            commit_time: None,
            database: self.database.clone(),
            slot: self.slot.clone(),
        }
    }

    /// Appends `rows` of `table`, read by the initial snapshot and merged
    /// into the open transaction, as `r` events numbered after its events.
    pub(crate) fn push_reads(
        &mut self,
        table: &Arc<TableSchema>,
        rows: Vec<Row>,
        marks: ChunkMarks,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<usize, ConvertError> {
        let open = self.open.ok_or(ConvertError::NoTransaction {
            what: "snapshot rows",
        })?;
        let source = SourceInfo {
            commit_lsn: open.commit_lsn,
            lsn: open.commit_lsn,
            xid: open.xid,
            commit_time: Some(open.commit_time),
            database: self.database.clone(),
            slot: self.slot.clone(),
        };
        let n = rows.len();
        let mut next = open.next_index;
        out.reserve(n);
        for (i, row) in rows.into_iter().enumerate() {
            let mut ev = row_event(
                Operation::Read,
                table.clone(),
                None,
                Some(row),
                source.clone(),
            );
            ev.index = next;
            ev.position.snapshot = marks.mark(i, n);
            ev.position.read_epoch = marks.read_epoch;
            let Some(after) = next.checked_add(1) else {
                return Err(ConvertError::TooManyEvents { xid: open.xid });
            };
            next = after;
            out.push(ev);
        }
        if let Some(o) = self.open.as_mut() {
            o.next_index = next;
        }
        Ok(n)
    }

    /// Converts one event, appending the change events it yields to `out`
    /// (none for Begin/Commit/Origin, one per row change or message, one per
    /// table of a Truncate). Returns how many were appended.
    ///
    /// `lsn` is the WAL position of the change (the XLogData's `wal_start`),
    /// if known; `relations` resolves the tables of a Truncate.
    pub fn handle(
        &mut self,
        event: &TxnEvent<'_>,
        relations: &RelationCache,
        lsn: Option<Lsn>,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<usize, ConvertError> {
        match event {
            // A prepared transaction comes here only once committed (the
            // assembler holds it until Commit Prepared), with the commit's
            // LSN and time: converted like any other.
            TxnEvent::Begin(b) => {
                if let Some(open) = self.open {
                    return Err(ConvertError::NestedBegin {
                        xid: b.xid,
                        open_xid: open.xid,
                    });
                }
                self.open = Some(OpenTxn {
                    xid: b.xid,
                    commit_lsn: b.final_lsn,
                    begin_lsn: lsn.unwrap_or(b.final_lsn),
                    commit_time: b.timestamp,
                    next_index: 0,
                });
                self.positions.begin();
                Ok(0)
            }
            TxnEvent::Commit(c) => {
                let Some(open) = self.open.take() else {
                    return Err(ConvertError::NoTransaction { what: "Commit" });
                };
                self.schemas.extend(self.open_schemas.drain());
                for oid in self.open_dropped.drain(..) {
                    self.schemas.remove(&oid);
                }
                // The END at the commit's place in the stream (its
                // XLogData's position, the transaction's end LSN).
                let at = SourceInfo {
                    lsn: c.end_lsn,
                    ..self.txn_source(&open)
                };
                let end = self.positions.end_marker(at, open.next_index);
                self.positions.committed(c.end_lsn);
                Ok(end.map_or(0, |ev| {
                    out.push(ev);
                    1
                }))
            }
            TxnEvent::Origin(_) => Ok(0),
            // Decisions about prepared transactions the assembler holds
            // nothing of (a rolled-back one, or one prepared before the
            // stream started): no change events.
            TxnEvent::CommitPrepared(_) | TxnEvent::RollbackPrepared(_) => Ok(0),
            TxnEvent::Message(m) => {
                // A non-transactional message: its own position, no commit.
                let source = SourceInfo {
                    commit_lsn: m.lsn,
                    lsn: m.lsn,
                    xid: m.xid.unwrap_or(0),
                    commit_time: None,
                    database: self.database.clone(),
                    slot: self.slot.clone(),
                };
                let mut ev = message_event(m, source);
                self.positions.outside(&mut ev);
                out.push(ev);
                Ok(1)
            }
            TxnEvent::Change(change) => self.change(change, relations, lsn, out),
        }
    }

    fn change(
        &mut self,
        change: &Change<'_>,
        relations: &RelationCache,
        lsn: Option<Lsn>,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<usize, ConvertError> {
        let what = match change {
            Change::Insert(..) => "Insert",
            Change::Update(..) => "Update",
            Change::Delete(..) => "Delete",
            Change::Truncate(_) => "Truncate",
            Change::Message(_) => "Message",
        };
        // Not `ok_or`: that builds (and drops) the error for every change.
        let Some(open) = self.open else {
            return Err(ConvertError::NoTransaction { what });
        };
        let source = SourceInfo {
            commit_lsn: open.commit_lsn,
            lsn: lsn.unwrap_or(open.commit_lsn),
            xid: open.xid,
            commit_time: Some(open.commit_time),
            database: self.database.clone(),
            slot: self.slot.clone(),
        };
        let start = out.len();
        match change {
            Change::Insert(rel, m) => {
                let table = self.schema(rel, &source, out);
                let after = decode_row(&mut self.arena, &table, &m.new)?;
                out.push(row_event(
                    Operation::Create,
                    table,
                    None,
                    Some(after),
                    source,
                ));
            }
            Change::Update(rel, m) => {
                let table = self.schema(rel, &source, out);
                let before = match &m.old {
                    Some(old) => Some(decode_row(&mut self.arena, &table, old.tuple())?),
                    None => None,
                };
                let after = match &m.old {
                    Some(OldTuple::Full(old)) => {
                        decode_row(&mut self.arena, &table, &with_old_toast(&m.new, old))?
                    }
                    _ => decode_row(&mut self.arena, &table, &m.new)?,
                };
                out.push(row_event(
                    Operation::Update,
                    table,
                    before,
                    Some(after),
                    source,
                ));
            }
            Change::Delete(rel, m) => {
                let table = self.schema(rel, &source, out);
                let before = decode_row(&mut self.arena, &table, m.old.tuple())?;
                out.push(row_event(
                    Operation::Delete,
                    table,
                    Some(before),
                    None,
                    source,
                ));
            }
            Change::Truncate(m) => {
                for &oid in &m.relations {
                    let Some(rel) = relations.relation(oid) else {
                        return Err(ConvertError::UnknownRelation { oid });
                    };
                    let rel = rel.clone();
                    let table = self.schema(&rel, &source, out);
                    out.push(row_event(
                        Operation::Truncate,
                        table,
                        None,
                        None,
                        source.clone(),
                    ));
                }
            }
            Change::Message(m) => out.push(message_event(
                m,
                SourceInfo {
                    lsn: lsn.unwrap_or(m.lsn),
                    ..source
                },
            )),
        }
        self.number(open, start, out)
    }

    /// Numbers the events from `start` on within the transaction `open`;
    /// returns how many there are.
    fn number(
        &mut self,
        open: OpenTxn,
        start: usize,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<usize, ConvertError> {
        let mut next = open.next_index;
        for ev in out.iter_mut().skip(start) {
            ev.index = next;
            let Some(after) = next.checked_add(1) else {
                return Err(ConvertError::TooManyEvents { xid: open.xid });
            };
            next = after;
            self.positions.place(ev);
        }
        if let Some(o) = self.open.as_mut() {
            o.next_index = next;
        }
        self.begin_marker(&open, start, out);
        Ok(out.len() - start)
    }

    /// The shared schema of `rel`, rebuilt only when the relation changed;
    /// a schema-change event goes to `out` first when it differs from the
    /// table's known schema.
    fn schema(
        &mut self,
        rel: &Arc<Relation<'static>>,
        source: &SourceInfo,
        out: &mut Vec<ChangeEvent>,
    ) -> Arc<TableSchema> {
        if let Some((cached, schema)) = &self.last {
            if Arc::ptr_eq(cached, rel) {
                return schema.clone();
            }
        }
        let known = match self.open_schemas.get_mut(&rel.oid) {
            Some(k) => Some(k),
            None => self.schemas.get_mut(&rel.oid),
        };
        let schema = match known {
            Some(k)
                if k.relation.as_ref().is_some_and(|r| Arc::ptr_eq(r, rel))
                    || k.schema.describes(rel) =>
            {
                // The server sent the same relation again (as it does for
                // every streamed block and session): remember this copy, so
                // the next changes compare pointers only.
                k.relation = Some(rel.clone());
                k.schema.clone()
            }
            known => {
                let previous = known.map(|k| k.schema.clone());
                let schema = Arc::new(TableSchema::from_relation(rel));
                if let Some(change) = previous.and_then(|p| SchemaChange::between(&p, &schema)) {
                    out.push(schema_change_event(schema.clone(), change, source.clone()));
                }
                self.open_schemas.insert(
                    rel.oid,
                    Known {
                        relation: Some(rel.clone()),
                        schema: schema.clone(),
                        since: source.lsn,
                    },
                );
                schema
            }
        };
        self.last = Some((rel.clone(), schema.clone()));
        schema
    }
}

mod ddl;
mod events;
mod positions;
#[cfg(test)]
mod tests;
