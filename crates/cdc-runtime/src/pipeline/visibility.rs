//! Waiting until a transaction the stream delivered is visible to new
//! snapshots.
//!
//! The server sends a transaction's commit once its commit record is in the
//! WAL, and the committing session leaves the set of running transactions a
//! moment later. A catalog query or a table read started in that moment
//! takes a snapshot that does not see the transaction: after `ALTER TABLE
//! ... ADD COLUMN s serial` it would plan the read without `s` and, since
//! the statement rewrote the table, find none of its rows (a test shows
//! it). A table that appeared in the publication could likewise be looked
//! up before it is there; moved in by `ALTER TABLE ... SET SCHEMA`, the
//! lookup waits for the table's lock and sees it anyway (a test shows that
//! too). So the reads a transaction asks for wait, between transactions,
//! until a new snapshot sees it. The stream is not read meanwhile; the wait
//! is capped at [`WAIT_LIMIT`], well inside `wal_sender_timeout`.

use std::time::Duration;

use cdc_core::Xid;

use crate::snapshot::SnapshotError;

/// How long to wait for a transaction to become visible before reading
/// anyway (with a warning): far longer than the moment it takes.
const WAIT_LIMIT: Duration = Duration::from_secs(10);

/// Waits until a snapshot taken on `client` sees `xid` (the 32-bit id the
/// stream carries) as finished.
pub(super) async fn wait_visible(
    client: &tokio_postgres::Client,
    xid: Xid,
) -> Result<(), SnapshotError> {
    let started = tokio::time::Instant::now();
    let mut delay = Duration::from_millis(1);
    loop {
        // 64-bit ids with their epoch: "xmin:xmax:xip,...". Available on
        // every supported server (pg_current_snapshot is 13+).
        let row = client
            .query_one("SELECT pg_catalog.txid_current_snapshot()::text", &[])
            .await?;
        let snapshot: String = row.try_get(0)?;
        match visible_in(&snapshot, xid) {
            Some(true) => return Ok(()),
            Some(false) if started.elapsed() < WAIT_LIMIT => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(50));
            }
            seen => {
                tracing::warn!(xid, snapshot = %snapshot, parsed = seen.is_some(),
                    "a transaction the stream delivered is still not visible to new snapshots; reading anyway");
                return Ok(());
            }
        }
    }
}

/// Whether a snapshot in `txid_current_snapshot` text form sees the 32-bit
/// transaction id `xid` as finished; `None` if the text does not parse. The
/// id is widened to the 64-bit id nearest the snapshot's `xmax`: the stream
/// delivered it moments ago, so it cannot be two billion ids away.
pub(super) fn visible_in(snapshot: &str, xid: Xid) -> Option<bool> {
    let mut parts = snapshot.split(':');
    let xmin: u64 = parts.next()?.parse().ok()?;
    let xmax: u64 = parts.next()?.parse().ok()?;
    let xip = parts.next()?;
    const EPOCH: u64 = 1 << 32;
    let mut full = (xmax & !(EPOCH - 1)) | u64::from(xid);
    if full > xmax.saturating_add(EPOCH / 2) {
        full = full.checked_sub(EPOCH)?;
    } else if full.saturating_add(EPOCH / 2) < xmax {
        full = full.checked_add(EPOCH)?;
    }
    if full < xmin {
        return Some(true);
    }
    if full >= xmax {
        return Some(false);
    }
    let mut running = xip.split(',').filter(|s| !s.is_empty());
    Some(!running.any(|s| s.parse::<u64>().ok() == Some(full)))
}

#[cfg(test)]
mod tests {
    use super::visible_in;

    #[test]
    fn a_transaction_is_visible_once_it_left_the_running_set() {
        // Older than every running transaction.
        assert_eq!(visible_in("100:105:100,103", 99), Some(true));
        // Finished between xmin and xmax, or still running.
        assert_eq!(visible_in("100:105:100,103", 101), Some(true));
        assert_eq!(visible_in("100:105:100,103", 103), Some(false));
        // At or past xmax: not finished as far as the snapshot knows (the
        // moment after its commit record, before it left the running set).
        assert_eq!(visible_in("100:105:", 105), Some(false));
        assert_eq!(visible_in("100:105:", 200), Some(false));
    }

    #[test]
    fn the_id_is_widened_with_the_epoch_nearest_xmax() {
        let epoch = 1u64 << 32;
        // Epoch 3: xid 7 is 3·2³² + 7.
        let s = format!("{}:{}:{}", 3 * epoch + 5, 3 * epoch + 10, 3 * epoch + 7);
        assert_eq!(visible_in(&s, 7), Some(false));
        assert_eq!(visible_in(&s, 8), Some(true));
        // Just before a wraparound: an id from the old epoch.
        let s = format!("{}:{}:", 3 * epoch + 2, 3 * epoch + 4);
        assert_eq!(visible_in(&s, u32::MAX), Some(true));
        // Just after it: an id of the new epoch not yet finished.
        let s = format!("{}:{}:", 3 * epoch - 10, 3 * epoch - 5);
        assert_eq!(visible_in(&s, 1), Some(false));
    }

    #[test]
    fn text_that_does_not_parse_is_none() {
        assert_eq!(visible_in("", 1), None);
        assert_eq!(visible_in("a:b:", 1), None);
        assert_eq!(visible_in("1:2", 1), None);
    }
}
