//! The chunk readers: plan key ranges, write the watermarks, read the rows.
//!
//! They run as tasks beside the pipeline and talk to it only through
//! [`ToSource`] messages, each sent before the watermark that needs it is
//! written, so the pipeline always has what a watermark refers to when it
//! reads the watermark from the stream.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch, Mutex, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_postgres::{Client, SimpleQueryMessage};

use super::catalog::SnapshotTable;
use super::copy::RowDecoder;
use super::merge::ChunkId;
use super::{SnapshotError, SnapshotOptions, WATERMARK_PREFIX};
use crate::event::RowValues;
use crate::replication::{ReplicationConfig, ReplicationConnection};
use crate::tls_connect::PgClientSettings;

/// A key range `(lo, hi]` of one table; `None` is unbounded. Keys are the
/// key columns' text forms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeyRange {
    /// Exclusive lower bound.
    pub(crate) lo: Option<Vec<String>>,
    /// Inclusive upper bound.
    pub(crate) hi: Option<Vec<String>>,
}

/// Where planning of a table stands.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct PlanCursor {
    /// The upper bound of the last planned chunk (`None`: nothing planned).
    pub(crate) next: Option<Vec<String>>,
    /// Every chunk of the table has been planned.
    pub(crate) exhausted: bool,
    /// Ranges planned but not emitted; read again first.
    #[serde(default)]
    pub(crate) redo: Vec<KeyRange>,
}

/// What the readers tell the pipeline.
pub(crate) enum ToSource {
    /// A chunk's read starts; its low watermark follows. `cursor` is the
    /// table's plan after this chunk (without the redo list).
    Started {
        chunk: ChunkId,
        table: usize,
        range: KeyRange,
        cursor: PlanCursor,
        permit: OwnedSemaphorePermit,
    },
    /// The rows of a chunk; its high watermark follows.
    Rows {
        chunk: ChunkId,
        rows: Vec<RowValues>,
    },
    /// Every chunk of `table` has been started.
    TablePlanned { table: usize },
}

/// Where the readers start: the first table not done and its cursor.
#[derive(Debug, Clone)]
pub(crate) struct Start {
    pub(crate) table: usize,
    pub(crate) cursor: PlanCursor,
    /// Marks this run's watermarks; others are ignored.
    pub(crate) token: Arc<str>,
    /// The id of the first chunk (ids grow across restarts).
    pub(crate) first_chunk: ChunkId,
}

struct Planner {
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

enum Next {
    /// Read this chunk ([`ToSource::Started`] is sent already).
    Chunk(ChunkId, usize, KeyRange),
    /// The pipeline is gone.
    Stop,
    /// Table `t` is fully planned; wait until the pipeline finished it.
    WaitFor(usize),
    Done,
}

impl Planner {
    /// Plans the next chunk and tells the pipeline, under the planner's
    /// lock, so the pipeline sees chunks in planning order.
    async fn next(
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
    fn observe(&mut self, table: usize, rows: usize) {
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

/// Starts `readers` chunk readers from `start`; they end when every table
/// is read. `done_tables` counts the tables the pipeline finished.
pub(crate) fn spawn(
    replication: ReplicationConfig,
    settings: PgClientSettings,
    tables: Arc<Vec<SnapshotTable>>,
    start: Start,
    options: &SnapshotOptions,
    tx: mpsc::UnboundedSender<ToSource>,
    done_tables: watch::Receiver<usize>,
) -> JoinSet<Result<(), SnapshotError>> {
    let readers = options.readers.max(1);
    let redo = start.cursor.redo.iter().cloned().collect();
    let planner = Arc::new(Mutex::new(Planner {
        tables: tables.clone(),
        table: start.table,
        cursor: PlanCursor {
            redo: Vec::new(),
            ..start.cursor
        },
        redo,
        next_chunk: start.first_chunk,
        chunk_size: options.chunk_size.max(1),
        dense: DenseState::Unknown,
        done: done_tables.clone(),
    }));
    // Per reader: a chunk being read, the next one prepared, and one whose
    // high watermark is on its way through the stream, so readers rarely
    // wait for the merge.
    let permits = Arc::new(Semaphore::new(readers * 3));
    let mut set = JoinSet::new();
    for _ in 0..readers {
        let reader = Reader {
            replication: replication.clone(),
            settings: settings.clone(),
            tables: tables.clone(),
            planner: planner.clone(),
            permits: permits.clone(),
            token: start.token.clone(),
            chunk_size: usize::try_from(options.chunk_size.max(1)).unwrap_or(usize::MAX),
            tx: tx.clone(),
            done_tables: done_tables.clone(),
        };
        set.spawn(reader.run());
    }
    set
}

struct Reader {
    /// Where chunks are read, on a session of pgcdc's own protocol client.
    replication: ReplicationConfig,
    /// Where watermarks are written and chunks planned (tokio-postgres).
    settings: PgClientSettings,
    tables: Arc<Vec<SnapshotTable>>,
    planner: Arc<Mutex<Planner>>,
    permits: Arc<Semaphore>,
    token: Arc<str>,
    /// Rows a chunk is planned to hold (a capacity hint for its rows).
    chunk_size: usize,
    tx: mpsc::UnboundedSender<ToSource>,
    done_tables: watch::Receiver<usize>,
}

/// Opens an ordinary connection to the source for snapshot reads.
pub async fn connect(settings: &PgClientSettings) -> Result<Client, SnapshotError> {
    let client = settings.connect("pgcdc snapshot").await?;
    // Watermarks must reach the WAL's flushed end at once, whatever the
    // server's default.
    client
        .batch_execute("SET synchronous_commit = on; SET statement_timeout = 0")
        .await?;
    Ok(client)
}

/// Opens the session chunks are read on: pgcdc's own protocol client,
/// which hands COPY rows over in place from 128 KiB socket reads (see
/// [`ReplicationConnection::copy_out`]), with the replication connection's
/// session settings (so text reads print values as the stream does).
async fn connect_reading(
    config: &ReplicationConfig,
) -> Result<ReplicationConnection, SnapshotError> {
    let config = config.clone().application_name("pgcdc snapshot");
    let mut conn = ReplicationConnection::connect_session(&config).await?;
    conn.simple_query("SET statement_timeout = 0").await?;
    Ok(conn)
}

/// A chunk whose low watermark is written and whose open transactions
/// have ended: ready to be read.
struct Prepared {
    chunk: ChunkId,
    table: usize,
    range: KeyRange,
}

/// What preparing the next chunk gave.
enum Prep {
    Ready(Prepared),
    /// Table `t` is fully planned; wait until the pipeline finished it.
    WaitFor(usize),
    /// Every table is read, or the pipeline is gone.
    Done,
}

impl Reader {
    /// Reads chunks on one connection while a second one prepares the next
    /// chunk (plans it, writes its low watermark, waits for the
    /// transactions open then) and writes the high watermark of the chunk
    /// read before, so the reading connection rarely waits.
    ///
    /// Order per chunk `c`: `Started(c)`, `LW(c)`, the wait, then (on the
    /// reading connection) the read, `Rows(c)`, and only then `HW(c)`. The
    /// next chunk's `LW` may come before `HW(c)`: windows overlap, which
    /// the merge allows.
    async fn run(mut self) -> Result<(), SnapshotError> {
        let mut client = connect_reading(&self.replication).await?;
        let marks = connect(&self.settings).await?;
        let mut high: Option<ChunkId> = None;
        let mut next = self.prepare(&marks).await?;
        loop {
            let current = match next {
                Prep::Done => {
                    if let Some(chunk) = high.take() {
                        watermark(&marks, &self.token, "hw", chunk).await?;
                    }
                    return Ok(());
                }
                Prep::WaitFor(table) => {
                    // The pipeline finishes a table only after the high
                    // watermark of its last chunk.
                    if let Some(chunk) = high.take() {
                        watermark(&marks, &self.token, "hw", chunk).await?;
                    }
                    if self
                        .done_tables
                        .wait_for(|&done| done > table)
                        .await
                        .is_err()
                    {
                        return Ok(());
                    }
                    next = self.prepare(&marks).await?;
                    continue;
                }
                Prep::Ready(p) => p,
            };
            let tables = self.tables.clone();
            let Some(table) = tables.get(current.table) else {
                return Err(SnapshotError::Merge(format!("no table #{}", current.table)));
            };
            let previous = high.take();
            let side = async {
                if let Some(chunk) = previous {
                    watermark(&marks, &self.token, "hw", chunk).await?;
                }
                self.prepare(&marks).await
            };
            let started = std::time::Instant::now();
            // The first error ends both (a side waiting for a permit would
            // otherwise wait for chunks that will never finish).
            let (rows, prepared) = tokio::try_join!(
                read_range(&mut client, table, &current.range, self.chunk_size),
                side
            )?;
            tracing::debug!(table = %table.display_name(), chunk = current.chunk,
                lo = %key_text(&current.range.lo), hi = %key_text(&current.range.hi),
                rows = rows.len(), read_us = started.elapsed().as_micros() as u64,
                "snapshot chunk read");
            // A heuristic: skipped when the other reader is planning.
            if let Ok(mut planner) = self.planner.try_lock() {
                planner.observe(current.table, rows.len());
            }
            // Its high watermark follows, on the other connection.
            if self
                .tx
                .send(ToSource::Rows {
                    chunk: current.chunk,
                    rows,
                })
                .is_err()
            {
                return Ok(());
            }
            high = Some(current.chunk);
            next = prepared;
        }
    }

    /// Plans the next chunk and makes it ready to read: its low watermark
    /// written and the transactions open at that moment ended.
    async fn prepare(&self, client: &Client) -> Result<Prep, SnapshotError> {
        let Ok(permit) = self.permits.clone().acquire_owned().await else {
            return Ok(Prep::Done);
        };
        let next = {
            let mut planner = self.planner.lock().await;
            planner.next(client, &self.tx, permit).await?
        };
        match next {
            Next::Done | Next::Stop => Ok(Prep::Done),
            Next::WaitFor(table) => Ok(Prep::WaitFor(table)),
            Next::Chunk(chunk, table, range) => {
                let started = std::time::Instant::now();
                let open = low_watermark(client, &self.token, chunk).await?;
                let low = started.elapsed();
                wait_for_open_transactions(client, open).await?;
                tracing::debug!(
                    chunk,
                    low_us = low.as_micros() as u64,
                    wait_us = (started.elapsed() - low).as_micros() as u64,
                    "snapshot chunk prepared"
                );
                Ok(Prep::Ready(Prepared {
                    chunk,
                    table,
                    range,
                }))
            }
        }
    }
}

/// A bound for logs: the key's columns joined by `,`; `-` for unbounded.
fn key_text(key: &Option<Vec<String>>) -> String {
    key.as_ref().map_or_else(|| "-".to_owned(), |k| k.join(","))
}

fn emit_statement(token: &str, kind: &str, chunk: ChunkId) -> String {
    let payload = format!("{token} {kind} {chunk}");
    format!(
        "SELECT pg_catalog.pg_logical_emit_message(true, {}, {})",
        cdc_core::sql::quote_literal(WATERMARK_PREFIX),
        cdc_core::sql::quote_literal(&payload)
    )
}

/// Writes a high watermark in a transaction of its own, flushed at once so
/// the stream brings it without delay (and the low watermarks before it
/// with it).
async fn watermark(
    client: &Client,
    token: &str,
    kind: &str,
    chunk: ChunkId,
) -> Result<(), SnapshotError> {
    client
        .batch_execute(&emit_statement(token, kind, chunk))
        .await?;
    Ok(())
}

/// Writes a low watermark in a transaction of its own and returns the
/// transactions open right after it, in one round trip. Its commit is not
/// waited for: its place in the WAL is fixed when it is written, and the
/// next high watermark's flush makes it durable.
async fn low_watermark(
    client: &Client,
    token: &str,
    chunk: ChunkId,
) -> Result<Vec<i64>, SnapshotError> {
    let messages = client
        .simple_query(&format!(
            "BEGIN; SET LOCAL synchronous_commit = off; {}; COMMIT; \
             SELECT x AS open_xid \
             FROM pg_catalog.txid_snapshot_xip(pg_catalog.txid_current_snapshot()) x",
            emit_statement(token, "lw", chunk)
        ))
        .await?;
    let mut open = Vec::new();
    for m in messages {
        // The watermark's own row (its LSN) comes first.
        let SimpleQueryMessage::Row(row) = m else {
            continue;
        };
        if row.columns().first().map(|c| c.name()) == Some("open_xid") {
            let xid = row
                .get(0)
                .and_then(|x| x.parse().ok())
                .ok_or_else(|| SnapshotError::Merge("an unreadable open transaction id".into()))?;
            open.push(xid);
        }
    }
    Ok(open)
}

/// Waits until the transactions `open` (open right after a low watermark)
/// are no longer running in a new snapshot, so a transaction that committed
/// before the low watermark is visible to the read that follows (a commit
/// is in the WAL a moment before other sessions can see it).
async fn wait_for_open_transactions(
    client: &Client,
    mut open: Vec<i64>,
) -> Result<(), SnapshotError> {
    let mut delay = Duration::from_micros(200);
    while !open.is_empty() {
        let rows = client
            .query(
                "SELECT x FROM unnest($1::bigint[]) x WHERE NOT \
                 pg_catalog.txid_visible_in_snapshot(x, pg_catalog.txid_current_snapshot())",
                &[&open],
            )
            .await?;
        open = rows
            .iter()
            .map(|r| r.try_get::<_, i64>(0))
            .collect::<Result<_, _>>()?;
        if open.is_empty() {
            break;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(50));
    }
    Ok(())
}

/// Reads the rows of `range` through `COPY ... TO STDOUT` (binary where
/// the column types allow, see [`RowDecoder`]).
pub(crate) async fn read_range(
    conn: &mut ReplicationConnection,
    table: &SnapshotTable,
    range: &KeyRange,
    expected: usize,
) -> Result<Vec<RowValues>, SnapshotError> {
    let mut conditions = Vec::new();
    if let Some(lo) = &range.lo {
        conditions.push(format!("{} > {}", table.key_row(), table.key_literal(lo)));
    }
    if let Some(hi) = &range.hi {
        conditions.push(format!("{} <= {}", table.key_row(), table.key_literal(hi)));
    }
    if let Some(filter) = &table.row_filter {
        conditions.push(format!("({filter})"));
    }
    let mut query = format!("SELECT {} FROM {}", table.select_list(), table.quoted());
    if !conditions.is_empty() {
        query.push_str(" WHERE ");
        query.push_str(&conditions.join(" AND "));
    }
    let mut decoder = RowDecoder::new(table);
    let statement = decoder.copy_statement(&query);
    // Room for a whole chunk at once (no regrowth copies), within reason.
    let mut rows = Vec::with_capacity(expected.min(1 << 16));
    conn.copy_out(&statement, |msg| {
        if let Some(row) = decoder.decode(msg)? {
            rows.push(row);
        }
        Ok::<_, SnapshotError>(())
    })
    .await?;
    decoder.finish()?;
    Ok(rows)
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
