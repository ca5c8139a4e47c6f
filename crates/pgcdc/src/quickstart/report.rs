//! [`Report`]: what the quickstart saw, its checks, and how it prints.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use cdc_core::Lsn;
use checkpoint_api::CheckpointMeta;

use super::workload::Written;
use cdc_runtime::operators::{Group, GroupKey, OperationCounts};

/// One check of the quickstart: passed or not, and what was compared.
#[derive(Debug, Clone)]
pub struct Check {
    /// What is checked.
    pub name: &'static str,
    /// Whether it holds.
    pub ok: bool,
    /// The values compared.
    pub detail: String,
}

/// Where the quickstart's files are.
#[derive(Debug, Clone)]
pub struct Files {
    /// The generated `pgcdc.toml`.
    pub config: PathBuf,
    /// The base path of the events files (`<path>.000001`, ...).
    pub events: PathBuf,
    /// The events files written.
    pub event_files: Vec<PathBuf>,
    /// The log of `pgcdc run` (all runs).
    pub log: PathBuf,
    /// The throwaway cluster's directory (data dir, server log).
    pub cluster: PathBuf,
    /// Whether they stay after the quickstart (`--keep`).
    pub kept: bool,
}

/// What `pgcdc quickstart` did and found.
#[derive(Debug, Clone)]
pub struct Report {
    /// `postgres --version` of the throwaway server.
    pub server_version: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// How often `pgcdc run` was SIGKILLed.
    pub kills: usize,
    /// Row changes committed by the writer.
    pub written: Written,
    /// Row changes committed while `pgcdc run` was down.
    pub written_while_down: u64,
    /// Change event lines (c, u, d) of the demo table in the events files.
    pub delivered_lines: u64,
    /// Rows the initial snapshot delivered (op r lines, duplicates after a
    /// crash included).
    pub snapshot_reads: u64,
    /// Distinct events by `(transaction.id, transaction.total_order)`.
    pub distinct: Written,
    /// Event lines of the operators' output in the same file.
    pub operator_lines: u64,
    /// Transaction BEGIN/END records in the same file.
    pub transaction_lines: u64,
    /// Retained checkpoints, oldest first.
    pub checkpoints: Vec<CheckpointMeta>,
    /// The slot's `confirmed_flush_lsn` after the run.
    pub slot_confirmed: Lsn,
    /// The aggregate per customer: from the newest checkpoint, and from SQL.
    pub aggregate: BTreeMap<GroupKey, (Option<Group>, Option<Group>)>,
    /// The table counters of the demo table from the newest checkpoint.
    pub counters: Option<OperationCounts>,
    /// The checks, in order.
    pub checks: Vec<Check>,
    /// Where the files are.
    pub files: Files,
    /// Wall time of the whole quickstart.
    pub elapsed: Duration,
}

impl Report {
    /// Whether every check holds.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The checks that do not hold.
    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.ok)
    }

    fn check(&self, name: &str) -> &'static str {
        match self.checks.iter().find(|c| c.name == name) {
            Some(c) if c.ok => "ok",
            Some(_) => "FAILED",
            None => "-",
        }
    }
}

fn group(g: &Option<Group>) -> String {
    match g {
        Some(g) => format!("{:>6} {:>9}", g.count, g.sum),
        None => format!("{:>6} {:>9}", "-", "-"),
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = &self.written;
        let d = &self.distinct;
        writeln!(f, "Changes (table public.orders)")?;
        writeln!(
            f,
            "  rows written:        {:>7}  ({} inserts, {} updates, {} deletes; {} while pgcdc was down)",
            w.total(),
            w.inserts,
            w.updates,
            w.deletes,
            self.written_while_down
        )?;
        writeln!(
            f,
            "  snapshot reads:      {:>7}  (op r: the initial snapshot, read while the stream ran)",
            self.snapshot_reads
        )?;
        writeln!(f, "  change events:       {:>7}", self.delivered_lines)?;
        writeln!(
            f,
            "  distinct events:     {:>7}  (by transaction.id + transaction.total_order)",
            d.total()
        )?;
        writeln!(
            f,
            "  duplicates:          {:>7}  (replayed after {} crash(es): at-least-once delivery)",
            self.delivered_lines.saturating_sub(d.total()),
            self.kills
        )?;
        writeln!(
            f,
            "  missing:             {:>7}  {}",
            w.total().saturating_sub(d.total()),
            self.check("nothing missing")
        )?;
        writeln!(
            f,
            "  replayed events equal the table: {}",
            self.check("replay equals table")
        )?;
        writeln!(
            f,
            "  aggregate updates:   {:>7}  (pgcdc.order_totals, the keyed_aggregate's output, same file)",
            self.operator_lines
        )?;
        writeln!(
            f,
            "  transaction records: {:>7}  (BEGIN/END, Debezium's provide.transaction.metadata, same file)",
            self.transaction_lines
        )?;
        writeln!(f)?;
        writeln!(f, "Checkpoints (job quickstart, oldest first)")?;
        writeln!(f, "  {:>4}  {:>12}  {:>8}  storage", "id", "lsn", "bytes")?;
        for m in &self.checkpoints {
            writeln!(
                f,
                "  {:>4}  {:>12}  {:>8}  {:?}",
                m.id.get(),
                m.commit_end_lsn.to_string(),
                m.stored_bytes,
                m.storage
            )?;
        }
        let oldest = self
            .checkpoints
            .first()
            .map_or_else(|| "-".to_owned(), |m| m.commit_end_lsn.to_string());
        writeln!(
            f,
            "  slot confirmed_flush_lsn {} <= oldest retained checkpoint {}: {}",
            self.slot_confirmed,
            oldest,
            self.check("slot behind retained checkpoints")
        )?;
        writeln!(f)?;
        let newest = self
            .checkpoints
            .last()
            .map_or_else(|| "-".to_owned(), |m| m.id.to_string());
        writeln!(
            f,
            "Aggregate order_totals (checkpoint {newest}) vs SELECT customer, count(*), sum(amount) ... GROUP BY customer"
        )?;
        writeln!(
            f,
            "  {:>8}  {:>6} {:>9}  {:>6} {:>9}",
            "customer", "count", "sum", "count", "sum"
        )?;
        for (key, (checkpointed, sql)) in &self.aggregate {
            writeln!(
                f,
                "  {:>8}  {}  {}",
                key.as_deref().unwrap_or("null"),
                group(checkpointed),
                group(sql)
            )?;
        }
        writeln!(f, "  equal: {}", self.check("aggregate equals SQL"))?;
        if let Some(c) = &self.counters {
            writeln!(
                f,
                "  table_counters: {} inserts, {} updates, {} deletes (each change counted once: {})",
                c.inserts,
                c.updates,
                c.deletes,
                self.check("counters count each change once")
            )?;
        }
        writeln!(f)?;
        let files = &self.files;
        let state = if files.kept {
            "kept"
        } else {
            "removed on exit; pass --keep to look at them"
        };
        writeln!(f, "Files ({state})")?;
        writeln!(f, "  config:  {}", files.config.display())?;
        for e in &files.event_files {
            writeln!(f, "  events:  {}", e.display())?;
        }
        writeln!(f, "  log:     {}", files.log.display())?;
        writeln!(f, "  cluster: {} (stopped)", files.cluster.display())?;
        writeln!(f)?;
        if self.passed() {
            writeln!(
                f,
                "All {} checks passed in {:.1} s.",
                self.checks.len(),
                self.elapsed.as_secs_f64()
            )
        } else {
            writeln!(f, "FAILED checks:")?;
            for c in self.failures() {
                writeln!(f, "  {}: {}", c.name, c.detail)?;
            }
            Ok(())
        }
    }
}
