//! Where an event stands: in its transaction (the position among the
//! transaction's events of its table, the commit before it), in the
//! snapshot (first, last, …), and the transaction boundaries some formats
//! write (Debezium's BEGIN and END records).
//!
//! The converter fills these in as it numbers a transaction's events, so
//! they are the same whenever the transaction is delivered again (after a
//! reconnect or a restart); the snapshot marks the reads it merges.

use std::sync::Arc;

use cdc_core::Lsn;

/// Where an event stands besides its [`index`](super::ChangeEvent::index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// The event's 0-based position among the events of its transaction
    /// that are about the same table (Debezium's `data_collection_order`
    /// minus one). 0 for reads and for events outside a transaction.
    pub table_index: u32,
    /// The end LSN of the commit of the transaction delivered before this
    /// event's one (the first element of Debezium's `source.sequence`),
    /// when known: `None` for snapshot reads and until the first commit
    /// after a start without a checkpoint.
    pub previous_commit: Option<Lsn>,
    /// For a snapshot read, where it stands in the snapshot.
    pub snapshot: SnapshotMark,
    /// For a snapshot read, what identifies the read across restarts of
    /// the job: for the initial snapshot, the position of the checkpoint it
    /// started after (kept in later checkpoints); for a read a signal asked
    /// for, the signal's LSN. A chunk read again after a crash carries the
    /// same one, so a sink can recognise its rows by key (the NATS sink's
    /// message ids). [`Lsn::INVALID`] when there is none (no checkpoint
    /// yet, a read pgcdc asked for itself, or not a read).
    pub read_epoch: Lsn,
}

/// Where a snapshot read stands in the snapshot (Debezium's
/// `source.snapshot`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SnapshotMark {
    /// No mark: a change from the stream (`"false"`), or a read of the
    /// initial snapshot the snapshot did not mark (`"true"`).
    #[default]
    Unmarked,
    /// A read of the initial snapshot that is none of the others: `"true"`.
    Read,
    /// The first read of the initial snapshot: `"first"`.
    First,
    /// The first read of a table (not the snapshot's first):
    /// `"first_in_data_collection"`.
    FirstInTable,
    /// The last read of a table (not the snapshot's last):
    /// `"last_in_data_collection"`.
    LastInTable,
    /// The last read of the initial snapshot: `"last"`.
    Last,
    /// A read done on demand, after the initial snapshot (a snapshot
    /// request, a table published while the job runs): `"incremental"`.
    Incremental,
}

impl SnapshotMark {
    /// Debezium's `source.snapshot` value for an event of operation `op`
    /// carrying this mark.
    pub const fn debezium_value(self, op: super::Operation) -> &'static str {
        match self {
            SnapshotMark::Unmarked => match op {
                super::Operation::Read => "true",
                _ => "false",
            },
            SnapshotMark::Read => "true",
            SnapshotMark::First => "first",
            SnapshotMark::FirstInTable => "first_in_data_collection",
            SnapshotMark::LastInTable => "last_in_data_collection",
            SnapshotMark::Last => "last",
            SnapshotMark::Incremental => "incremental",
        }
    }

    /// The mark of a read that is first in its table (`first_in_table`),
    /// last in it (`last_in_table`), in the first or the last table of
    /// the snapshot, as Debezium decides it: the snapshot's last before
    /// its first, a table's last before its first.
    pub const fn of_read(
        first_table: bool,
        last_table: bool,
        first_in_table: bool,
        last_in_table: bool,
    ) -> Self {
        if last_in_table && last_table {
            SnapshotMark::Last
        } else if first_in_table && first_table {
            SnapshotMark::First
        } else if last_in_table {
            SnapshotMark::LastInTable
        } else if first_in_table {
            SnapshotMark::FirstInTable
        } else {
            SnapshotMark::Read
        }
    }
}

/// A transaction boundary: what an [`Operation::Transaction`] event says.
///
/// The pipeline emits them only when asked
/// ([`PipelineOptions::transaction_markers`]): a `Begin` before the first
/// event of a transaction that delivers any (snapshot reads do not count),
/// an `End` after its last. Its event's `source` is the transaction's,
/// with `lsn` the position of the transaction's BEGIN or COMMIT in the
/// stream. Sinks that apply rows ignore them (they have no table).
///
/// [`Operation::Transaction`]: super::Operation::Transaction
/// [`PipelineOptions::transaction_markers`]: crate::pipeline::PipelineOptions::transaction_markers
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionBoundary {
    /// BEGIN or END.
    pub status: TransactionStatus,
    /// END: the transaction's events (every event of the stream in it but
    /// the boundaries and snapshot reads).
    pub event_count: u64,
    /// END: those events by table (`schema.table`; logical decoding
    /// messages under `LOGICAL_DECODING_MESSAGE`), in the order the
    /// tables first appeared in the transaction.
    pub data_collections: Vec<(Arc<str>, u64)>,
}

/// Which boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionStatus {
    /// The transaction's start.
    Begin,
    /// The transaction's end.
    End,
}

impl TransactionStatus {
    /// `BEGIN` or `END`.
    pub const fn name(self) -> &'static str {
        match self {
            TransactionStatus::Begin => "BEGIN",
            TransactionStatus::End => "END",
        }
    }
}

/// The data collection Debezium counts logical decoding messages under.
pub const MESSAGE_COLLECTION: &str = "LOGICAL_DECODING_MESSAGE";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Operation;

    #[test]
    fn read_marks_follow_debeziums_precedence() {
        use SnapshotMark::*;
        // (first table, last table, first in table, last in table)
        let cases = [
            ((true, true, true, true), Last),
            ((true, false, true, true), First),
            ((true, false, true, false), First),
            ((false, false, true, false), FirstInTable),
            ((false, true, false, true), Last),
            ((false, false, false, true), LastInTable),
            ((true, true, false, false), Read),
        ];
        for ((ft, lt, fi, li), want) in cases {
            assert_eq!(
                SnapshotMark::of_read(ft, lt, fi, li),
                want,
                "{ft} {lt} {fi} {li}"
            );
        }
        assert_eq!(Unmarked.debezium_value(Operation::Read), "true");
        assert_eq!(Unmarked.debezium_value(Operation::Create), "false");
        assert_eq!(
            FirstInTable.debezium_value(Operation::Read),
            "first_in_data_collection"
        );
        assert_eq!(Incremental.debezium_value(Operation::Read), "incremental");
    }
}
