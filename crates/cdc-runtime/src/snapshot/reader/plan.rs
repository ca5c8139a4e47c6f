//! Chunk planning: which key range the next chunk covers. The boundary
//! query finds the key `chunk_size` rows on; for a dense integer key the
//! bounds are computed instead, until computed chunks turn out mostly
//! empty. One [`Planner`] is shared by the readers, under a lock, so the
//! pipeline sees chunks in planning order.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::{mpsc, watch, OwnedSemaphorePermit};
use tokio_postgres::Client;

use super::super::catalog::SnapshotTable;
use super::super::merge::ChunkId;
use super::super::SnapshotError;
use super::{KeyRange, PlanCursor, ToSource};

/// Plans the chunks of the tables in order.
pub(super) struct Planner {
    tables: Arc<Vec<SnapshotTable>>,
    table: usize,
    cursor: PlanCursor,
    redo: VecDeque<KeyRange>,
    next_chunk: ChunkId,
    chunk_size: u64,
    /// Whether the current table's bounds are computed (see [`Dense`]).
    dense: DenseState,
    /// The first table the pipeline has not finished: a table is started
    /// only once every earlier one is finished, so a checkpoint's progress
    /// names one table in progress.
    done: watch::Receiver<usize>,
}

pub(super) enum Next {
    /// Read this chunk ([`ToSource::Started`] is sent already).
    Chunk(ChunkId, usize, KeyRange),
    /// The pipeline is gone.
    Stop,
    /// Table `t` is fully planned; wait until the pipeline finished it.
    WaitFor(usize),
    Done,
}

impl Planner {
    /// Plans from table `table` at `cursor` (whose redo list is `redo`),
    /// numbering chunks from `next_chunk`; `done` counts the tables the
    /// pipeline finished.
    pub(super) fn new(
        tables: Arc<Vec<SnapshotTable>>,
        table: usize,
        cursor: PlanCursor,
        redo: VecDeque<KeyRange>,
        next_chunk: ChunkId,
        chunk_size: u64,
        done: watch::Receiver<usize>,
    ) -> Self {
        Planner {
            tables,
            table,
            cursor,
            redo,
            next_chunk,
            chunk_size,
            dense: DenseState::Unknown,
            done,
        }
    }

    /// Plans the next chunk and tells the pipeline, under the planner's
    /// lock, so the pipeline sees chunks in planning order.
    pub(super) async fn next(
        &mut self,
        client: &Client,
        tx: &mpsc::UnboundedSender<ToSource>,
        permit: OwnedSemaphorePermit,
    ) -> Result<Next, SnapshotError> {
        let tables = self.tables.clone();
        loop {
            let Some(table) = tables.get(self.table) else {
                return Ok(Next::Done);
            };
            if table.key.is_empty() {
                // Read by the no-key fallback, not in chunks.
                self.table += 1;
                continue;
            }
            if *self.done.borrow() < self.table {
                return Ok(Next::WaitFor(self.table - 1));
            }
            if let Some(range) = self.redo.pop_front() {
                return Ok(self.chunk(range, tx, permit));
            }
            if !self.cursor.exhausted {
                let lo = self.cursor.next.clone();
                let hi = match self.dense_bound(client, table, lo.as_deref()).await? {
                    Some(hi) => hi,
                    None => boundary(client, table, lo.as_deref(), self.chunk_size).await?,
                };
                self.cursor.exhausted = hi.is_none();
                self.cursor.next = hi.clone();
                return Ok(self.chunk(KeyRange { lo, hi }, tx, permit));
            }
            let _ = tx.send(ToSource::TablePlanned { table: self.table });
            self.table += 1;
            self.cursor = PlanCursor::default();
            self.dense = DenseState::Unknown;
        }
    }

    fn chunk(
        &mut self,
        range: KeyRange,
        tx: &mpsc::UnboundedSender<ToSource>,
        permit: OwnedSemaphorePermit,
    ) -> Next {
        let id = self.next_chunk;
        self.next_chunk += 1;
        let started = ToSource::Started {
            chunk: id,
            table: self.table,
            range: range.clone(),
            cursor: self.cursor.clone(),
            permit,
        };
        if tx.send(started).is_err() {
            return Next::Stop;
        }
        Next::Chunk(id, self.table, range)
    }

    /// The upper bound of the chunk after `lo` computed from the key's
    /// range, if the current table's key is dense (`None`: ask
    /// [`boundary`]). Like [`boundary`]'s, it is `chunk_size` key values
    /// on, and unbounded once that would pass the largest key.
    async fn dense_bound(
        &mut self,
        client: &Client,
        table: &SnapshotTable,
        lo: Option<&[String]>,
    ) -> Result<Option<Option<Vec<String>>>, SnapshotError> {
        if matches!(self.dense, DenseState::Unknown) {
            self.dense = match Dense::probe(client, table, self.chunk_size).await? {
                Some(d) => {
                    tracing::debug!(table = %table.display_name(), min = d.min, max = d.max,
                        "snapshot: dense integer key, chunk bounds computed");
                    DenseState::On(d)
                }
                None => DenseState::Off,
            };
        }
        match &self.dense {
            DenseState::On(d) => Ok(d.bound(lo, self.chunk_size)),
            _ => Ok(None),
        }
    }

    /// A chunk of table `table` was read and held `rows` rows: a dense
    /// table whose chunks turn out mostly empty (the row estimate was
    /// stale) goes back to the boundary query.
    pub(super) fn observe(&mut self, table: usize, rows: usize) {
        if table != self.table {
            return;
        }
        let DenseState::On(d) = &mut self.dense else {
            return;
        };
        d.reads += 1;
        d.rows += rows as u64;
        if d.reads >= 8 && d.rows.saturating_mul(4) < d.reads.saturating_mul(self.chunk_size) {
            tracing::debug!(
                reads = d.reads,
                rows = d.rows,
                "snapshot: computed chunks are sparse, querying bounds again"
            );
            self.dense = DenseState::Off;
        }
    }
}

/// Whether chunk bounds of the current table are computed.
#[derive(Debug, Clone, Copy)]
enum DenseState {
    /// Not probed yet.
    Unknown,
    /// Bounds come from [`boundary`].
    Off,
    On(Dense),
}

/// A table whose key is one integer column with few gaps: its key range
/// (`max - min + 1`) is at most twice the planner's row estimate. Its
/// chunks are `chunk_size` consecutive key values, computed instead of
/// asked with [`boundary`], whose `OFFSET` walks every key of the chunk in
/// the index (on two cores that server time competes with the reads).
/// Chunks may then hold fewer rows than `chunk_size`, never more.
#[derive(Debug, Clone, Copy)]
struct Dense {
    min: i64,
    max: i64,
    /// Chunks read and their rows, to notice a stale estimate.
    reads: u64,
    rows: u64,
}

impl Dense {
    /// The upper bound of the chunk after `lo`: `chunk_size` key values on
    /// (`None` inside: unbounded, once that passes `max`); `None` if `lo`
    /// is not an integer (then the boundary query decides).
    fn bound(&self, lo: Option<&[String]>, chunk_size: u64) -> Option<Option<Vec<String>>> {
        let step = i64::try_from(chunk_size).ok()?;
        let hi = match lo {
            None => self.min.checked_add(step - 1),
            Some([lo]) => lo.parse::<i64>().ok()?.checked_add(step),
            Some(_) => return None,
        };
        Some(hi.filter(|&h| h <= self.max).map(|h| vec![h.to_string()]))
    }

    /// The key's range, if `table` qualifies (two index lookups).
    async fn probe(
        client: &Client,
        table: &SnapshotTable,
        chunk_size: u64,
    ) -> Result<Option<Dense>, SnapshotError> {
        use cdc_core::types::{INT2, INT4, INT8};
        let [key] = table.key[..] else {
            return Ok(None);
        };
        let Some(col) = table.columns.get(key) else {
            return Ok(None);
        };
        let Some(estimate) = table.estimated_rows.filter(|&n| n > 0) else {
            return Ok(None);
        };
        if !matches!(col.type_oid, INT2 | INT4 | INT8) || chunk_size < 2 {
            return Ok(None);
        }
        let name = cdc_core::sql::quote_ident(&col.name);
        let row = client
            .query_one(
                &format!(
                    "SELECT min({name})::int8, max({name})::int8 FROM {}",
                    table.quoted()
                ),
                &[],
            )
            .await?;
        let (Some(min), Some(max)) = (
            row.try_get::<_, Option<i64>>(0)?,
            row.try_get::<_, Option<i64>>(1)?,
        ) else {
            return Ok(None);
        };
        let span = i128::from(max) - i128::from(min) + 1;
        Ok((span <= 2 * i128::from(estimate)).then_some(Dense {
            min,
            max,
            reads: 0,
            rows: 0,
        }))
    }
}

/// The upper bound of the chunk after `lo`: the key `chunk_size` rows on,
/// or `None` if fewer rows remain.
async fn boundary(
    client: &Client,
    table: &SnapshotTable,
    lo: Option<&[String]>,
    chunk_size: u64,
) -> Result<Option<Vec<String>>, SnapshotError> {
    let keys: Vec<_> = table
        .key
        .iter()
        .filter_map(|&i| table.columns.get(i))
        .collect();
    let select: Vec<_> = keys
        .iter()
        .enumerate()
        // Aliased: a bare `ORDER BY "id"` would sort by the text output column.
        .map(|(i, c)| format!("{}::text AS k{i}", cdc_core::sql::quote_ident(&c.name)))
        .collect();
    let order: Vec<_> = keys
        .iter()
        .map(|c| cdc_core::sql::quote_ident(&c.name))
        .collect();
    let filter = match lo {
        Some(lo) => format!(" WHERE {} > {}", table.key_row(), table.key_literal(lo)),
        None => String::new(),
    };
    let sql = format!(
        "SELECT {} FROM {}{} ORDER BY {} OFFSET {} LIMIT 1",
        select.join(", "),
        table.quoted(),
        filter,
        order.join(", "),
        chunk_size.saturating_sub(1)
    );
    let row = client.query_opt(&sql, &[]).await?;
    let Some(row) = row else { return Ok(None) };
    let mut key = Vec::with_capacity(keys.len());
    for i in 0..keys.len() {
        let v: Option<String> = row.try_get(i)?;
        key.push(v.ok_or_else(|| SnapshotError::Row {
            table: table.display_name(),
            reason: "a key column is NULL".into(),
        })?);
    }
    Ok(Some(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense(min: i64, max: i64) -> Dense {
        Dense {
            min,
            max,
            reads: 0,
            rows: 0,
        }
    }

    fn key(k: i64) -> Vec<String> {
        vec![k.to_string()]
    }

    #[test]
    fn dense_chunks_are_chunk_size_keys_like_the_boundary_query() {
        // Keys 1..=10, chunks of 4: (-, 4], (4, 8], (8, -) as the boundary
        // query plans them (an OFFSET past the last key gives no bound).
        let d = dense(1, 10);
        assert_eq!(d.bound(None, 4), Some(Some(key(4))));
        assert_eq!(d.bound(Some(&key(4)), 4), Some(Some(key(8))));
        assert_eq!(d.bound(Some(&key(8)), 4), Some(None));
        // Exactly at the last key: one more (empty) open chunk follows.
        assert_eq!(d.bound(Some(&key(6)), 4), Some(Some(key(10))));
        assert_eq!(d.bound(Some(&key(10)), 4), Some(None));
        // Fewer keys than a chunk: one open chunk.
        assert_eq!(dense(5, 6).bound(None, 4), Some(None));
        // Negative keys, and a resumed cursor outside the probed range.
        assert_eq!(dense(-10, 10).bound(None, 4), Some(Some(key(-7))));
        assert_eq!(
            dense(1, 10).bound(Some(&key(-100)), 4),
            Some(Some(key(-96)))
        );
    }

    #[test]
    fn dense_bounds_never_overflow_or_guess() {
        let d = dense(i64::MAX - 2, i64::MAX);
        assert_eq!(d.bound(None, 2), Some(Some(key(i64::MAX - 1))));
        assert_eq!(d.bound(Some(&key(i64::MAX - 1)), 2), Some(None));
        assert_eq!(d.bound(Some(&key(i64::MAX)), u64::MAX), None);
        // A cursor that is not one integer: the boundary query decides.
        assert_eq!(d.bound(Some(&["x".to_owned()]), 2), None);
        assert_eq!(d.bound(Some(&[]), 2), None);
        assert_eq!(d.bound(Some(&[key(1), key(2)].concat()), 2), None);
    }

    fn planner(chunk_size: u64) -> Planner {
        let (_, done) = watch::channel(0);
        Planner {
            tables: Arc::new(Vec::new()),
            table: 0,
            cursor: PlanCursor::default(),
            redo: VecDeque::new(),
            next_chunk: 1,
            chunk_size,
            dense: DenseState::On(dense(1, 1_000_000)),
            done,
        }
    }

    #[test]
    fn mostly_empty_computed_chunks_go_back_to_the_boundary_query() {
        let mut p = planner(100);
        for _ in 0..20 {
            p.observe(0, 90);
        }
        assert!(
            matches!(p.dense, DenseState::On(_)),
            "dense chunks stay computed"
        );
        p.observe(1, 0);
        assert!(matches!(p.dense, DenseState::On(_)), "another table's read");
        let mut p = planner(100);
        for i in 0..8 {
            assert!(matches!(p.dense, DenseState::On(_)), "after {i} reads");
            p.observe(0, 10);
        }
        assert!(matches!(p.dense, DenseState::Off));
    }
}
