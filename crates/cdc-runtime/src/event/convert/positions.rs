//! Where the converter's events stand in their transaction: the position
//! among the transaction's events of the same table, the commit before
//! the transaction, and the BEGIN and END boundary events (when asked for).
//! Kept here so that they are the same every time the server sends the
//! transaction again.

use std::sync::Arc;

use cdc_core::{Lsn, Oid};

use super::super::{
    ChangeEvent, Operation, SnapshotMark, SourceInfo, TableSchema, TransactionBoundary,
    TransactionStatus, MESSAGE_COLLECTION,
};
use super::{EventConverter, OpenTxn};

/// How the reads of one merged snapshot chunk are marked (see
/// [`SnapshotMark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ChunkMarks {
    /// Reads done on demand, after the initial snapshot: all `incremental`.
    pub(crate) incremental: bool,
    /// The chunk is of the initial snapshot's first table.
    pub(crate) first_table: bool,
    /// The chunk is of the initial snapshot's last table.
    pub(crate) last_table: bool,
    /// The chunk is the first of its table to be emitted.
    pub(crate) first_in_table: bool,
    /// The chunk is the last of its table to be emitted.
    pub(crate) last_in_table: bool,
    /// See [`Position::read_epoch`](crate::event::Position::read_epoch).
    pub(crate) read_epoch: Lsn,
}

impl ChunkMarks {
    /// The mark of row `i` of `n`.
    pub(crate) fn mark(&self, i: usize, n: usize) -> SnapshotMark {
        if self.incremental {
            return SnapshotMark::Incremental;
        }
        SnapshotMark::of_read(
            self.first_table,
            self.last_table,
            self.first_in_table && i == 0,
            self.last_in_table && i + 1 == n,
        )
    }
}

impl EventConverter {
    /// Emits an [`Operation::Transaction`] event before the first event of
    /// every transaction that has any (snapshot reads do not count) and
    /// one after its last (see [`TransactionBoundary`]).
    pub fn with_transaction_markers(mut self, on: bool) -> Self {
        self.positions.markers = on;
        self
    }

    /// The end LSN of the commit before the next transaction (the position
    /// a job resumes from), for the events'
    /// [`previous_commit`](crate::event::Position::previous_commit).
    pub fn set_previous_commit(&mut self, end_lsn: Lsn) {
        if !end_lsn.is_invalid() {
            self.positions.committed(end_lsn);
        }
    }

    /// Events of the open transaction appended to `out` from `start` on by
    /// others (operators at its commit, numbered already): placed among
    /// its events and counted at its END. Returns how many events that
    /// adds (a BEGIN, if the transaction had none yet).
    pub fn adopt(&mut self, out: &mut Vec<ChangeEvent>, start: usize) -> usize {
        let Some(open) = self.open else {
            return 0;
        };
        let mut next = open.next_index;
        for ev in out.iter_mut().skip(start) {
            next = next.max(ev.index.saturating_add(1));
            self.positions.place(ev);
        }
        if let Some(o) = self.open.as_mut() {
            o.next_index = next;
        }
        let before = out.len();
        self.begin_marker(&open, start, out);
        out.len() - before
    }

    /// Puts the open transaction's BEGIN before `out[start..]` if it is
    /// due there.
    pub(super) fn begin_marker(
        &mut self,
        open: &OpenTxn,
        start: usize,
        out: &mut Vec<ChangeEvent>,
    ) {
        let Some(new) = out.get(start..) else {
            return;
        };
        if !self.positions.begin_due(new) {
            return;
        }
        let index = new.first().map_or(open.next_index, |e| e.index);
        let source = SourceInfo {
            lsn: open.begin_lsn,
            ..self.txn_source(open)
        };
        out.insert(start, self.positions.begin_marker(source, index));
    }

    /// The source metadata of the transaction `open` (at its commit LSN).
    pub(super) fn txn_source(&self, open: &OpenTxn) -> SourceInfo {
        SourceInfo {
            commit_lsn: open.commit_lsn,
            lsn: open.commit_lsn,
            xid: open.xid,
            commit_time: Some(open.commit_time),
            database: self.database.clone(),
            slot: self.slot.clone(),
        }
    }
}

/// The open transaction's events counted by table.
#[derive(Debug, Default)]
pub(super) struct Positions {
    /// Emit BEGIN and END boundary events.
    pub(super) markers: bool,
    /// The end LSN of the last commit converted (or of the position
    /// resumed from).
    pub(super) last_commit: Option<Lsn>,
    /// The previous commit of the open transaction.
    previous: Option<Lsn>,
    /// Whether the open transaction's BEGIN was emitted.
    began: bool,
    /// Per table (oid, or 0 and the name for events without a catalog
    /// table): its name and how many events of it so far.
    tables: Vec<(Oid, Arc<str>, u32)>,
    /// The entry of `tables` used last.
    last: usize,
    /// `schema.table` names built for earlier transactions, by oid: most
    /// transactions touch the tables the one before did, so their names
    /// are shared rather than formatted again.
    names: Vec<(Oid, Arc<str>)>,
}

/// At most this many names are kept in [`Positions::names`] (it is
/// emptied when full).
const NAMES_KEPT: usize = 64;

/// Whether an event counts among its transaction's events (Debezium counts
/// the changes it streams; snapshot reads and boundaries are not part of a
/// streamed transaction).
fn counted(ev: &ChangeEvent) -> bool {
    !matches!(ev.op, Operation::Read | Operation::Transaction)
}

impl Positions {
    /// A transaction begins.
    pub(super) fn begin(&mut self) {
        self.previous = self.last_commit;
        self.began = false;
        self.tables.clear();
        self.last = 0;
    }

    /// The open transaction was forgotten (the server sends it again).
    pub(super) fn forget(&mut self) {
        self.began = false;
        self.tables.clear();
        self.last = 0;
    }

    /// A transaction committed at `end_lsn`.
    pub(super) fn committed(&mut self, end_lsn: Lsn) {
        self.last_commit = Some(end_lsn);
    }

    /// The previous commit for an event outside a transaction.
    pub(super) fn outside(&self, ev: &mut ChangeEvent) {
        ev.position.previous_commit = self.last_commit;
    }

    /// Places `ev`, an event of the open transaction.
    pub(super) fn place(&mut self, ev: &mut ChangeEvent) {
        if !counted(ev) {
            return;
        }
        ev.position.previous_commit = self.previous;
        let hit = |e: &(Oid, Arc<str>, u32)| match ev.table.as_deref() {
            Some(t) if t.oid != 0 => e.0 == t.oid,
            Some(t) => e.0 == 0 && is_name(&e.1, &t.schema, &t.table),
            None => e.0 == 0 && &*e.1 == MESSAGE_COLLECTION,
        };
        let at = match self.tables.get(self.last) {
            Some(e) if hit(e) => self.last,
            _ => match self.tables.iter().position(hit) {
                Some(at) => at,
                None => {
                    let (oid, name) = match ev.table.as_deref() {
                        Some(t) => (t.oid, self.name_of(t)),
                        None => (0, Arc::from(MESSAGE_COLLECTION)),
                    };
                    self.tables.push((oid, name, 0));
                    self.tables.len() - 1
                }
            },
        };
        self.last = at;
        if let Some(e) = self.tables.get_mut(at) {
            ev.position.table_index = e.2;
            e.2 = e.2.saturating_add(1);
        }
    }

    /// `schema.table` of `t`, shared with earlier transactions while the
    /// table keeps its oid and name.
    fn name_of(&mut self, t: &TableSchema) -> Arc<str> {
        let known = |(oid, name): &&(Oid, Arc<str>)| {
            *oid == t.oid && t.oid != 0 && is_name(name, &t.schema, &t.table)
        };
        if let Some((_, name)) = self.names.iter().find(known) {
            return name.clone();
        }
        let name: Arc<str> = Arc::from(format!("{}.{}", t.schema, t.table));
        if t.oid != 0 {
            if self.names.len() >= NAMES_KEPT {
                self.names.clear();
            }
            // A renamed table's old name goes.
            self.names.retain(|(oid, _)| *oid != t.oid);
            self.names.push((t.oid, name.clone()));
        }
        name
    }

    /// Whether the open transaction's BEGIN goes before `events` (its
    /// newest): markers are on, it has not begun yet and one of them counts.
    pub(super) fn begin_due(&self, events: &[ChangeEvent]) -> bool {
        self.markers && !self.began && events.iter().any(counted)
    }

    /// The BEGIN event of the open transaction; `source` is the
    /// transaction's, at its BEGIN.
    pub(super) fn begin_marker(&mut self, source: SourceInfo, index: u32) -> ChangeEvent {
        self.began = true;
        boundary(
            source,
            index,
            TransactionBoundary {
                status: TransactionStatus::Begin,
                event_count: 0,
                data_collections: Vec::new(),
            },
        )
    }

    /// The END event of the open transaction, if it began one; `source`
    /// is the transaction's, at its COMMIT.
    pub(super) fn end_marker(&mut self, source: SourceInfo, index: u32) -> Option<ChangeEvent> {
        if !std::mem::take(&mut self.began) {
            return None;
        }
        let data_collections: Vec<(Arc<str>, u64)> = self
            .tables
            .drain(..)
            .map(|(_, name, n)| (name, u64::from(n)))
            .collect();
        self.last = 0;
        Some(boundary(
            source,
            index,
            TransactionBoundary {
                status: TransactionStatus::End,
                event_count: data_collections.iter().map(|(_, n)| n).sum(),
                data_collections,
            },
        ))
    }
}

/// Whether `name` is `schema.table`.
fn is_name(name: &str, schema: &str, table: &str) -> bool {
    name.strip_prefix(schema)
        .and_then(|rest| rest.strip_prefix('.'))
        .is_some_and(|rest| rest == table)
}

fn boundary(source: SourceInfo, index: u32, b: TransactionBoundary) -> ChangeEvent {
    ChangeEvent {
        op: Operation::Transaction,
        table: None,
        before: None,
        after: None,
        message: None,
        schema_change: None,
        source,
        index,
        position: Default::default(),
        boundary: Some(Arc::new(b)),
    }
}

#[cfg(test)]
mod tests;
