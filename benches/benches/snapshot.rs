//! Initial snapshot throughput: pgcdc's chunked, watermarked snapshot of a table
//! into the null sink, against `COPY (SELECT …) TO STDOUT` of the same table to
//! /dev/null through psql, in the same run, on the same server.
//!
//! Starts its own throwaway cluster (autovacuum off). For each row shape in
//! `PGCDC_SNAPSHOT_SHAPES` (comma-separated, default `narrow,wide`) it writes a
//! table of `PGCDC_SNAPSHOT_ROWS` rows (default 5,000,000), then vacuums and
//! analyzes it:
//!
//! * `narrow`: `(id bigint PRIMARY KEY, a int, b text)`, 32 characters of text;
//! * `wide`: `(id bigint PRIMARY KEY, k int, v text, ts timestamptz, n numeric)`,
//!   100 characters of text, the realistic row of `e2e_stream`.
//!
//! Each repetition (`PGCDC_BENCH_REPS`, default 3, order reversed every other
//! time) times:
//!
//! * `psql -c "COPY (SELECT <columns> FROM <table>) TO STDOUT" -o /dev/null`, from
//!   spawn to exit;
//! * pgcdc: a fresh slot, then the pipeline with the snapshot (default chunk size,
//!   `PGCDC_SNAPSHOT_READERS` readers, default 2; `PGCDC_SNAPSHOT_CHUNK` rows per
//!   chunk, default the default chunk size) into the null sink, from start
//!   until the snapshot is complete and every row has reached the sink
//!   (low/high watermarks, the merge with the stream and the events included).
//!   With `PGCDC_SNAPSHOT_SINK=debezium` the null sink encodes each event as
//!   Debezium JSON first, as the file sink would: rows read in binary are
//!   decoded there, not when read.
//!
//! The process uses the pgcdc binary's allocator (the system's; mimalloc with
//! `--features mimalloc`).
//!
//! Rows/s and MB/s (MB of COPY text output, the same for both) are medians;
//! the ratio is the median of the per-repetition ratios of pgcdc's throughput
//! to COPY's. `cargo bench -p pgcdc-benches --bench snapshot`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cdc_runtime::encoding::{DebeziumOptions, JsonEncoder, JsonFormat};
use cdc_runtime::pipeline::{Pipeline, PipelineOptions};
use cdc_runtime::replication::ReplicationConfig;
use cdc_runtime::sinks::NullSink;
use cdc_runtime::snapshot::{published_tables, SnapshotOptions, SnapshotPlan, SnapshotState};
use integration_tests::{ClusterOptions, LocalCluster, TestPostgres};
use pgcdc_benches::{median, uptime};

/// The pgcdc binary's allocator: the system's, or mimalloc with the
/// `mimalloc` feature (`cargo bench -p pgcdc-benches --features mimalloc`).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// A table's row shape.
struct Shape {
    name: &'static str,
    describe: &'static str,
    table: &'static str,
    /// The columns of `CREATE TABLE`.
    columns: &'static str,
    /// The `SELECT` list of row `g` (a `generate_series` value).
    values: &'static str,
    /// The column names, in order.
    names: &'static str,
}

const SHAPES: [Shape; 2] = [
    Shape {
        name: "narrow",
        describe: "bigint, int, text 32",
        table: "snap",
        columns: "id bigint PRIMARY KEY, a int NOT NULL, b text NOT NULL",
        values: "g, g % 1000, md5(g::text)",
        names: "id, a, b",
    },
    Shape {
        name: "wide",
        describe: "bigint, int, text 100, timestamptz, numeric",
        table: "snapw",
        columns: "id bigint PRIMARY KEY, k int NOT NULL, v text NOT NULL, \
                  ts timestamptz NOT NULL, n numeric NOT NULL",
        values: "g, g % 1000, rpad('row ' || g || ' ', 100, 'abcdefghijklmnopqrstuvwxyz'), \
                 timestamptz '2026-01-01 00:00:00+00' + g * interval '1.25 second', \
                 round(g * 3.14159, 4)",
        names: "id, k, v, ts, n",
    },
];

async fn run() {
    let shapes = std::env::var("PGCDC_SNAPSHOT_SHAPES").unwrap_or_else(|_| "narrow,wide".into());
    eprintln!("load before: {}", uptime());
    let cluster = TestPostgres::dedicated(ClusterOptions::new().setting("autovacuum", "off"))
        .await
        .unwrap();
    for name in shapes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let shape = SHAPES.iter().find(|s| s.name == name).unwrap_or_else(|| {
            panic!("PGCDC_SNAPSHOT_SHAPES: unknown shape {name:?} (narrow, wide)")
        });
        run_shape(&cluster, shape).await;
    }
    eprintln!("load after: {}", uptime());
    cluster.stop().await.unwrap();
}

async fn run_shape(cluster: &LocalCluster, shape: &Shape) {
    let rows = env_usize("PGCDC_SNAPSHOT_ROWS", 5_000_000);
    let reps = env_usize("PGCDC_BENCH_REPS", 3).max(1);
    let readers = env_usize("PGCDC_SNAPSHOT_READERS", 2).max(1);
    let encode = match std::env::var("PGCDC_SNAPSHOT_SINK").as_deref() {
        Ok("debezium") => true,
        Ok("null") | Err(_) => false,
        Ok(other) => panic!("PGCDC_SNAPSHOT_SINK: unknown sink {other:?} (null, debezium)"),
    };
    let chunk_size = env_usize(
        "PGCDC_SNAPSHOT_CHUNK",
        cdc_runtime::snapshot::DEFAULT_CHUNK_SIZE as usize,
    )
    .max(1);
    let Shape {
        table,
        columns,
        values,
        names,
        ..
    } = shape;
    let db = cluster.create_database().await.unwrap();
    let client = db.connect().await.unwrap();
    eprintln!(
        "{}: writing {rows} rows ({})...",
        shape.name, shape.describe
    );
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} ({columns});
             INSERT INTO {table} SELECT {values} FROM generate_series(1, {rows}) g;
             CREATE PUBLICATION snap_pub FOR TABLE {table};"
        ))
        .await
        .unwrap();
    // On its own: VACUUM cannot run in the implicit transaction of a batch.
    client
        .batch_execute(&format!("VACUUM ANALYZE {table}"))
        .await
        .unwrap();
    // MB of COPY's text output (the same data both contenders move).
    let bytes: i64 = client
        .query_one(
            &format!(
                "SELECT sum(octet_length(concat_ws(E'\\t', {names})) + 1)::bigint FROM {table}"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let mb = bytes as f64 / 1e6;
    let rc: ReplicationConfig = format!(
        "host={} port={} dbname={} user={} sslmode=disable",
        db.host(),
        db.port(),
        db.name(),
        db.user()
    )
    .parse()
    .unwrap();

    let mut copy_s = Vec::new();
    let mut pgcdc_s = Vec::new();
    let mut ratios = Vec::new();
    let mut cpu_s = Vec::new();
    for rep in 0..reps {
        let mut order = ["copy", "pgcdc"];
        if rep % 2 == 1 {
            order.reverse();
        }
        let (mut c, mut p) = (0.0, 0.0);
        for who in order {
            if who == "copy" {
                let started = Instant::now();
                let status = Command::new("psql")
                    .args([
                        "-X",
                        "-q",
                        "-h",
                        db.host(),
                        "-p",
                        &db.port().to_string(),
                        "-U",
                        db.user(),
                        "-d",
                        db.name(),
                        "-o",
                        "/dev/null",
                        "-c",
                        &format!("COPY (SELECT {names} FROM {table}) TO STDOUT"),
                    ])
                    .stdout(Stdio::null())
                    .status()
                    .unwrap();
                assert!(status.success(), "psql COPY failed");
                c = started.elapsed().as_secs_f64();
                eprintln!("rep {}: COPY {c:.2} s", rep + 1);
            } else {
                client
                    .execute(
                        "SELECT pg_create_logical_replication_slot('snap_slot', 'pgoutput')",
                        &[],
                    )
                    .await
                    .unwrap();
                let started = Instant::now();
                let cpu = cpu_time::ProcessTime::now();
                let tables = published_tables(&client, &["snap_pub".to_owned()])
                    .await
                    .unwrap();
                let plan = SnapshotPlan::new(
                    tables,
                    rc.clone(),
                    SnapshotOptions {
                        readers,
                        chunk_size: chunk_size as u64,
                        ..SnapshotOptions::default()
                    },
                );
                let po = PipelineOptions::new(rc.clone(), "snap_slot", "snap_pub");
                let sink = if encode {
                    NullSink::encoding(JsonEncoder::new(JsonFormat::Debezium(
                        DebeziumOptions::default(),
                    )))
                } else {
                    NullSink::new()
                };
                let pipeline = Pipeline::new(po, vec![Box::new(sink)]).with_snapshot(plan);
                let mut watch = pipeline.progress();
                let progress = tokio::time::timeout(
                    Duration::from_secs(1800),
                    pipeline.run(async move {
                        let _ = watch
                            .wait_for(|p| p.snapshot == SnapshotState::Complete)
                            .await;
                    }),
                )
                .await
                .expect("the snapshot finishes")
                .unwrap();
                p = started.elapsed().as_secs_f64();
                let cpu = cpu.elapsed().as_secs_f64();
                cpu_s.push(cpu);
                assert_eq!(progress.events, rows as u64, "every row is one event");
                eprintln!("rep {}: pgcdc {p:.2} s, {cpu:.2} s CPU", rep + 1);
                client
                    .execute("SELECT pg_drop_replication_slot('snap_slot')", &[])
                    .await
                    .unwrap();
            }
        }
        copy_s.push(c);
        pgcdc_s.push(p);
        ratios.push(c / p);
    }
    let ratio_range = (
        ratios.iter().copied().fold(f64::INFINITY, f64::min),
        ratios.iter().copied().fold(0.0, f64::max),
    );
    let copy = median(copy_s);
    let pgcdc = median(pgcdc_s);
    let cpu = median(cpu_s);
    println!(
        "\n{} ({}): {rows} rows, {mb:.0} MB of COPY text, {readers} readers, medians of {reps}, load {}:\n",
        shape.name,
        shape.describe,
        uptime()
    );
    println!("| contender | seconds | rows/s | MB/s | throughput / COPY | client CPU s |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| `psql` COPY … TO STDOUT > /dev/null | {copy:.2} | {:.0} | {:.0} | | |",
        rows as f64 / copy,
        mb / copy
    );
    println!(
        "| pgcdc snapshot → {} | {pgcdc:.2} | {:.0} | {:.0} | {:.2} ({:.2}–{:.2}) | {cpu:.2} |",
        if encode {
            "null sink, Debezium JSON encoded"
        } else {
            "null sink"
        },
        rows as f64 / pgcdc,
        mb / pgcdc,
        median(ratios),
        ratio_range.0,
        ratio_range.1
    );
    drop(client);
}

fn main() {
    // As `pgcdc` does (the children are this binary again).
    pgcdc::allocator::tune();
    if let Ok(filter) = std::env::var("PGCDC_BENCH_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}
