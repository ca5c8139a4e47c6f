//! Stateful operators: computations over the change stream whose state is
//! part of every checkpoint.
//!
//! An [`Operator`] sees every change event of a transaction
//! ([`on_event`](Operator::on_event)) and then either its commit
//! ([`on_commit`](Operator::on_commit), where it may append derived events)
//! or, when the connection dropped in the middle and the server will send
//! the transaction again, [`on_abort`](Operator::on_abort). Operators keep
//! the effect of an open transaction apart from their committed state, so a
//! checkpoint (always taken between transactions) holds exactly the
//! committed transactions up to its position, and a replayed transaction is
//! never counted twice.
//!
//! Built-ins, configured as `[[operators]]` in `pgcdc.toml`:
//!
//! * [`TableCounters`]: per-table counts of inserts, updates, deletes and
//!   truncates.
//! * [`KeyedAggregate`]: count and sum of an integer column grouped by a key
//!   column, emitted to the sinks as upserts of a derived table. It treats
//!   every change as an upsert or delete of a row (as the stream is during
//!   an initial snapshot), so it remembers each source row's contribution:
//!   its state grows with the number of rows of the source table.
//!
//! ```
//! use cdc_runtime::operators::{Operator, TableCounters};
//! use checkpoint_api::{OperatorState, StatefulOperator};
//!
//! let mut counters = TableCounters::new("counts");
//! // ... the pipeline calls on_event / on_commit ...
//! let state = OperatorState::capture(&counters).unwrap();
//! let mut restored = TableCounters::new("counts");
//! state.restore_into(&mut restored).unwrap();
//! assert_eq!(restored.totals(), counters.totals());
//! ```

mod aggregate;
mod counters;
mod wire;

use checkpoint_api::StatefulOperator;

use crate::event::{ChangeEvent, SourceInfo};

pub use aggregate::{Group, GroupKey, KeyedAggregate, KeyedAggregateSpec};
pub use counters::{OperationCounts, TableCounters};

/// Where the transaction that just committed ends, for operators that emit
/// derived events at commit.
#[derive(Debug, Clone)]
pub struct CommitContext {
    /// Source metadata for derived events (the committing transaction's).
    pub source: SourceInfo,
    /// The index the next event of this transaction gets; derived events
    /// continue the transaction's numbering so `(commit_lsn, index)` stays
    /// unique.
    pub next_index: u32,
}

/// A stateful computation over the change stream. See the [module docs](self).
pub trait Operator: StatefulOperator + Send + Sync {
    /// Sees one change event of the open transaction.
    fn on_event(&mut self, event: &ChangeEvent) -> Result<(), OperatorError>;

    /// The open transaction committed: make its effect part of the state and
    /// append any derived events to `out` (numbered from
    /// `commit.next_index`).
    fn on_commit(
        &mut self,
        commit: &CommitContext,
        out: &mut Vec<ChangeEvent>,
    ) -> Result<(), OperatorError>;

    /// The open transaction will be sent again: forget its effect.
    fn on_abort(&mut self);
}

/// An operator could not process an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// An event did not carry a column the operator needs: the table has no
    /// such column (or the publication leaves it out), or an update sent an
    /// unchanged TOASTed value of a row the operator does not know.
    #[error("operator {operator}: {table} sent a {op} without a value for column {column}")]
    MissingColumn {
        /// Operator id.
        operator: String,
        /// `schema.table`.
        table: String,
        /// The operation.
        op: &'static str,
        /// The column.
        column: String,
    },
    /// A column's value cannot be used.
    #[error("operator {operator}: column {column} of {table}: {reason}")]
    BadValue {
        /// Operator id.
        operator: String,
        /// `schema.table`.
        table: String,
        /// The column.
        column: String,
        /// What is wrong.
        reason: String,
    },
    /// A schema change took away something the operator needs (its table,
    /// or a column it reads).
    #[error("operator {operator}: {table}: {change}; the operator cannot continue. Fix: {fix}")]
    SchemaChanged {
        /// Operator id.
        operator: String,
        /// `schema.table` (its name before the change).
        table: String,
        /// What changed.
        change: String,
        /// What to do.
        fix: String,
    },
}

#[cfg(test)]
mod tests;
