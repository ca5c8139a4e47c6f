//! Reading the Debezium events file back: duplicates, distinct events, and
//! the table state they replay to.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::QuickstartError;
use super::workload::Written;
use cdc_runtime::sinks::FileSink;

/// An `orders` row: `id -> (customer, amount)`.
pub(super) type Rows = BTreeMap<i64, (Option<i64>, Option<i64>)>;

/// What the events file holds for the demo table.
#[derive(Debug, Default)]
pub(super) struct Delivered {
    /// Event lines of the demo table.
    pub(super) lines: u64,
    /// Event lines of the operators' output (`pgcdc.<operator id>`).
    pub(super) operator_lines: u64,
    /// Transaction BEGIN/END records (`provide.transaction.metadata`).
    pub(super) transaction_lines: u64,
    /// Snapshot read lines (`op` r) of the demo table.
    pub(super) reads: u64,
    /// Distinct events by `(transaction.id, transaction.total_order)`, by operation.
    pub(super) distinct: Written,
    /// The table as the distinct events replay to, in file order.
    pub(super) replayed: Rows,
    /// The files read.
    pub(super) files: Vec<PathBuf>,
}

/// Reads every file of the file sink at `base`.
pub(super) fn read(base: &Path, table: &str) -> Result<Delivered, QuickstartError> {
    let mut delivered = Delivered {
        files: FileSink::files(base).map_err(|e| QuickstartError::io("list", base, e))?,
        ..Delivered::default()
    };
    let mut seen: HashSet<(String, u64)> = HashSet::new();
    for file in delivered.files.clone() {
        let text =
            std::fs::read_to_string(&file).map_err(|e| QuickstartError::io("read", &file, e))?;
        for (n, line) in text.lines().enumerate() {
            let bad = |reason: &str| QuickstartError::Event {
                path: file.clone(),
                line: n + 1,
                reason: reason.to_owned(),
            };
            let event: Value = serde_json::from_str(line).map_err(|e| bad(&e.to_string()))?;
            if event["status"].is_string() {
                delivered.transaction_lines += 1;
                continue;
            }
            let source = &event["source"];
            if source["schema"] == "pgcdc" {
                delivered.operator_lines += 1;
                continue;
            }
            if format!(
                "{}.{}",
                source["schema"].as_str().unwrap_or_default(),
                source["table"].as_str().unwrap_or_default()
            ) != table
            {
                continue;
            }
            if event["op"] == "r" {
                delivered.reads += 1;
            } else {
                delivered.lines += 1;
            }
            let row_id = |v: &Value| v["id"].as_i64().ok_or_else(|| bad("a row without id"));
            // Snapshot reads belong to no transaction (Debezium writes
            // `transaction: null` for them): a read again after a crash is
            // the same row id read again.
            let dedup_key = if event["op"] == "r" {
                (
                    "snapshot".to_owned(),
                    row_id(&event["after"])?.unsigned_abs(),
                )
            } else {
                let id = event["transaction"]["id"]
                    .as_str()
                    .ok_or_else(|| bad("no transaction.id"))?;
                let order = event["transaction"]["total_order"]
                    .as_u64()
                    .ok_or_else(|| bad("no transaction.total_order"))?;
                (id.to_owned(), order)
            };
            if !seen.insert(dedup_key) {
                continue;
            }
            let row = |v: &Value| (v["customer"].as_i64(), v["amount"].as_i64());
            match event["op"].as_str() {
                // The initial snapshot: the row as it is (an upsert).
                Some("r") => {
                    let after = &event["after"];
                    delivered.replayed.insert(row_id(after)?, row(after));
                }
                Some("c") => {
                    delivered.distinct.inserts += 1;
                    let after = &event["after"];
                    delivered.replayed.insert(row_id(after)?, row(after));
                }
                Some("u") => {
                    delivered.distinct.updates += 1;
                    delivered.replayed.remove(&row_id(&event["before"])?);
                    let after = &event["after"];
                    delivered.replayed.insert(row_id(after)?, row(after));
                }
                Some("d") => {
                    delivered.distinct.deletes += 1;
                    delivered.replayed.remove(&row_id(&event["before"])?);
                }
                _ => return Err(bad("op is not r, c, u or d")),
            }
        }
    }
    Ok(delivered)
}
