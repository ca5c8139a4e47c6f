//! Tables without a key: one consistent read through the exported snapshot
//! of a temporary slot.
//!
//! The temporary slot's consistent point `C` splits the WAL exactly: every
//! transaction that committed before `C` is visible to the exported
//! snapshot, none after it is. The reader imports the snapshot
//! (`SET TRANSACTION SNAPSHOT`), drops the temporary slot, writes a marker
//! transaction (so the stream reaches `C` even when nothing else commits)
//! and copies the tables. The pipeline emits the rows right before the
//! first transaction of its own stream that commits at or after `C`. The
//! read is not resumable: after a crash or reconnect it starts over.

use std::sync::Arc;

use cdc_core::Lsn;
use futures_util::{pin_mut, TryStreamExt};
use tokio::sync::mpsc;

use super::catalog::SnapshotTable;
use super::copy::RowDecoder;
use super::reader::connect;
use super::{SnapshotError, WATERMARK_PREFIX};
use crate::event::Row;
use crate::replication::{ReplicationConfig, ReplicationConnection, SnapshotAction};
use crate::tls_connect::PgClientSettings;

/// Rows per message to the pipeline.
const BATCH: usize = 1024;

/// What the fallback reader tells the pipeline.
pub(crate) enum FromFallback {
    /// The consistent point: rows go before the first transaction
    /// committing at or after it.
    Point(Lsn),
    /// Rows of `table` (an index into the fallback's tables).
    Rows { table: usize, rows: Vec<Row> },
    /// `table` is copied completely.
    TableDone { table: usize, rows: u64 },
    /// Every table is copied.
    Done,
}

/// Reads `tables` and sends them to `tx` (bounded: the reader waits for the
/// pipeline to reach the consistent point).
pub(crate) async fn run(
    replication: ReplicationConfig,
    settings: PgClientSettings,
    tables: Arc<Vec<SnapshotTable>>,
    token: Arc<str>,
    tx: mpsc::Sender<FromFallback>,
) -> Result<(), SnapshotError> {
    let names: Vec<_> = tables.iter().map(SnapshotTable::display_name).collect();
    tracing::warn!(tables = ?names,
        "snapshot: tables without a primary key or replica identity index are read in one consistent read, which is not resumable (after a crash it starts over)");
    let client = connect(&settings).await?;
    let mut repl = ReplicationConnection::connect(&replication).await?;
    let slot_name = format!("pgcdc_snapshot_{}", &token[..token.len().min(16)]);
    let slot = repl
        .create_replication_slot(&slot_name, true, SnapshotAction::Export)
        .await?;
    let Some(snapshot) = slot.snapshot_name else {
        return Err(SnapshotError::Merge(
            "the temporary slot exported no snapshot".into(),
        ));
    };
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; SET TRANSACTION SNAPSHOT {}",
            cdc_core::sql::quote_literal(&snapshot)
        ))
        .await?;
    // The snapshot is held by our transaction now; the slot can go.
    let _ = repl.close().await;
    if tx
        .send(FromFallback::Point(slot.consistent_point))
        .await
        .is_err()
    {
        return Ok(());
    }
    // A transaction after the consistent point, so the stream reaches it.
    let marker = connect(&settings).await?;
    marker
        .execute(
            "SELECT pg_catalog.pg_logical_emit_message(true, $1, $2)",
            &[&WATERMARK_PREFIX, &format!("{token} marker 0")],
        )
        .await?;
    drop(marker);
    for (i, table) in tables.iter().enumerate() {
        let mut query = format!("SELECT {} FROM {}", table.select_list(), table.quoted());
        let filters: Vec<_> = table.filters().map(|f| format!("({f})")).collect();
        if !filters.is_empty() {
            query.push_str(" WHERE ");
            query.push_str(&filters.join(" AND "));
        }
        let mut decoder = RowDecoder::new(table);
        let stream = client.copy_out(&decoder.copy_statement(&query)).await?;
        pin_mut!(stream);
        let mut batch = Vec::with_capacity(BATCH);
        let mut count = 0u64;
        while let Some(msg) = stream.try_next().await? {
            let Some(row) = decoder.decode(&msg)? else {
                continue;
            };
            batch.push(row);
            if batch.len() == BATCH {
                count += batch.len() as u64;
                let rows = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                if tx
                    .send(FromFallback::Rows { table: i, rows })
                    .await
                    .is_err()
                {
                    return Ok(());
                }
            }
        }
        decoder.finish()?;
        count += batch.len() as u64;
        if !batch.is_empty()
            && tx
                .send(FromFallback::Rows {
                    table: i,
                    rows: batch,
                })
                .await
                .is_err()
        {
            return Ok(());
        }
        if tx
            .send(FromFallback::TableDone {
                table: i,
                rows: count,
            })
            .await
            .is_err()
        {
            return Ok(());
        }
    }
    client.batch_execute("COMMIT").await?;
    let _ = tx.send(FromFallback::Done).await;
    Ok(())
}
