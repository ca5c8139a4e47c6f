//! The chunk readers: plan key ranges, write the watermarks, read the rows.
//!
//! They run as tasks beside the pipeline and talk to it only through
//! [`ToSource`] messages, each sent before the watermark that needs it is
//! written, so the pipeline always has what a watermark refers to when it
//! reads the watermark from the stream.

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
use crate::event::Row;
use crate::replication::{ReplicationConfig, ReplicationConnection};
use crate::tls_connect::PgClientSettings;

mod plan;

use plan::{Next, Planner};

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
    Rows { chunk: ChunkId, rows: Vec<Row> },
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
    let planner = Arc::new(Mutex::new(Planner::new(
        tables.clone(),
        start.table,
        PlanCursor {
            redo: Vec::new(),
            ..start.cursor
        },
        redo,
        start.first_chunk,
        options.chunk_size.max(1),
        done_tables.clone(),
    )));
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
/// session settings (so text reads print values as the stream does), and
/// read-only.
async fn connect_reading(
    config: &ReplicationConfig,
) -> Result<ReplicationConnection, SnapshotError> {
    let config = config.clone().application_name("pgcdc snapshot");
    let mut conn = ReplicationConnection::connect_session(&config).await?;
    // Reads only: a request's condition (`pgcdc snapshot --where`) runs here.
    conn.simple_query("SET statement_timeout = 0; SET default_transaction_read_only = on")
        .await?;
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
) -> Result<Vec<Row>, SnapshotError> {
    let mut conditions = Vec::new();
    if let Some(lo) = &range.lo {
        conditions.push(format!("{} > {}", table.key_row(), table.key_literal(lo)));
    }
    if let Some(hi) = &range.hi {
        conditions.push(format!("{} <= {}", table.key_row(), table.key_literal(hi)));
    }
    for filter in table.filters() {
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
