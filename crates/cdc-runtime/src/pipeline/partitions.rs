//! Partitions attached while the job runs. With
//! `publish_via_partition_root`, a partitioned table's changes arrive under
//! its own name; attaching a partition brings that partition's rows into it
//! without any change in the WAL. A watcher compares the partitions of the
//! published partitioned tables every [`WATCH_INTERVAL`]; for each new one
//! the table is read again, limited to that partition's rows
//! (`tableoid = …`), as `r` events. A detached partition's rows leave the
//! table without events, as PostgreSQL publishes none.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use cdc_core::Oid;
use tokio::sync::mpsc;

use crate::snapshot::SnapshotError;
use crate::tls_connect::PgClientSettings;

/// How often the partitions are compared.
pub(crate) const WATCH_INTERVAL: Duration = Duration::from_secs(5);

/// A partition that was attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Attached {
    /// The published partitioned table.
    pub(super) root: Oid,
    /// The new leaf partition.
    pub(super) leaf: Oid,
    /// Its name, for logs.
    pub(super) name: String,
}

/// The watcher: its reports, and the task (aborted when dropped).
pub(super) struct PartitionWatch {
    pub(super) rx: mpsc::Receiver<Attached>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PartitionWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PartitionWatch {
    /// Watches the leaf partitions of `roots` (nothing to watch: `None`).
    pub(super) fn spawn(settings: PgClientSettings, roots: Vec<Oid>) -> Option<PartitionWatch> {
        if roots.is_empty() {
            return None;
        }
        let (tx, rx) = mpsc::channel(64);
        let task = tokio::spawn(async move {
            // A failed look is retried at the next interval; the stream does
            // not depend on it.
            let mut known: Option<HashMap<Oid, BTreeSet<(Oid, String)>>> = None;
            let mut client = None;
            let mut ticker = tokio::time::interval(WATCH_INTERVAL);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                if client.is_none() {
                    match crate::snapshot::connect(&settings).await {
                        Ok(c) => client = Some(c),
                        Err(e) => {
                            tracing::debug!(error = %e, "partition watch: cannot connect");
                            continue;
                        }
                    }
                }
                let Some(c) = client.as_ref() else { continue };
                let now = match leaves(c, &roots).await {
                    Ok(now) => now,
                    Err(e) => {
                        tracing::debug!(error = %e, "partition watch: query failed");
                        client = None;
                        continue;
                    }
                };
                if let Some(before) = &known {
                    for (root, parts) in &now {
                        let old = before.get(root);
                        for (leaf, name) in parts {
                            if !old.is_some_and(|o| o.iter().any(|(l, _)| l == leaf)) {
                                let found = Attached {
                                    root: *root,
                                    leaf: *leaf,
                                    name: name.clone(),
                                };
                                if tx.send(found).await.is_err() {
                                    return;
                                }
                            }
                        }
                        for (leaf, name) in old.into_iter().flatten() {
                            if !parts.iter().any(|(l, _)| l == leaf) {
                                tracing::info!(partition = %name, "a partition was detached (or dropped): its rows left the partitioned table without change events, as PostgreSQL publishes none");
                            }
                        }
                    }
                }
                known = Some(now);
            }
        });
        Some(PartitionWatch { rx, task })
    }
}

/// The leaf partitions of each root, with their names.
async fn leaves(
    client: &tokio_postgres::Client,
    roots: &[Oid],
) -> Result<HashMap<Oid, BTreeSet<(Oid, String)>>, SnapshotError> {
    let rows = client
        .query(
            "SELECT r.root, t.relid::oid, t.relid::regclass::text \
             FROM unnest($1::oid[]) AS r(root) \
             CROSS JOIN LATERAL pg_catalog.pg_partition_tree(r.root) t \
             WHERE t.isleaf AND t.relid <> r.root",
            &[&roots],
        )
        .await?;
    let mut out: HashMap<Oid, BTreeSet<(Oid, String)>> =
        roots.iter().map(|r| (*r, BTreeSet::new())).collect();
    for row in rows {
        let root: Oid = row.try_get(0)?;
        let leaf: Oid = row.try_get(1)?;
        let name: String = row.try_get(2)?;
        out.entry(root).or_default().insert((leaf, name));
    }
    Ok(out)
}

/// Waits for the next attached partition (pending without a watcher).
pub(super) async fn next_attached(watch: &mut Option<PartitionWatch>) -> Attached {
    match watch.as_mut() {
        Some(w) => match w.rx.recv().await {
            Some(a) => a,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}
