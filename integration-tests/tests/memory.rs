//! Steady memory of `pgcdc run` (the real binary, in its own process) on a
//! stream of small transactions of typical rows, written as Debezium JSON to
//! the file sink with checkpoints every 200 ms: its resident memory is
//! sampled from `/proc` every 10 ms while the rows stream, and the median
//! (the level it holds, not a start-up spike) of what it allocates
//! (`RssAnon`: heap and stacks) is bounded.
//!
//! The bound depends on the build, because the binary under test is the one
//! built with the tests: 14 MB for a release build, 24 MB for the test
//! profile, whose own crates are unoptimized (measured 10.4–19.0 MB on
//! mimalloc: the unoptimized binary falls further behind the writer and holds
//! more queued events). Its code pages (`RssFile`: 13.1–13.3 MB in a release
//! build on the AMD machine, 11.0–11.2 MB with the `dist` profile on an Intel
//! one) are reported, not bounded: they measure the build. A release build on
//! the default system allocator held 2.6–3.6 MB anonymous, 16.0–16.8 MB in
//! all (five runs), the `dist` build 2.5–2.8 and 13.5–13.8 MB (three); with
//! `--features mimalloc` 6.3–8.0 MB anonymous, 19.4–21.1 MB in all (three
//! alternating runs; benches/RESULTS.md has more).
//!
//! A second test holds wide rows to `pipeline.batch_bytes`: a transaction of
//! 100 MB of rows passes through in batches of about 1 MiB.
#![cfg(target_os = "linux")]
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use cdc_core::Lsn;
use integration_tests::{Pgcdc, TestPostgres};

const TIMEOUT: Duration = Duration::from_secs(120);

/// Transactions of [`ROWS_PER_TXN`] rows: the `e2e_stream` bench's W2.
const TXNS: u32 = 20_000;
const ROWS_PER_TXN: u32 = 10;

/// The bound on the median anonymous resident memory, in kB (see the
/// module docs).
const STEADY_ANON_KB: u64 = if cfg!(debug_assertions) {
    24 * 1000
} else {
    14 * 1000
};

/// One `/proc/<pid>/status` reading, in kB.
#[derive(Debug, Clone, Copy)]
struct Rss {
    anon: u64,
    file: u64,
}

fn rss(pid: u32) -> Option<Rss> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |key: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some(Rss {
        anon: kb("RssAnon:")?,
        file: kb("RssFile:")?,
    })
}

/// The file sink's output files (`events.jsonl.NNNNNN`).
fn output(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| Some(e.ok()?.path()))
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("events.jsonl"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Lines in the file sink's output files.
fn lines(dir: &std::path::Path) -> usize {
    output(dir)
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap().lines().count())
        .sum()
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

async fn lsn(client: &tokio_postgres::Client, sql: &str) -> Lsn {
    let text: String = client.query_one(sql, &[]).await.unwrap().get(0);
    text.parse().unwrap()
}

/// Where slot `slot` is confirmed up to.
async fn confirmed(client: &tokio_postgres::Client, slot: &str) -> Lsn {
    let text: String = client
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0);
    text.parse().unwrap()
}

/// Starts `pgcdc run` on `public.<table>` of `db` through slot `name`
/// (snapshot mode `latest`, checkpoints every 200 ms), writing Debezium JSON
/// to the file sink in a new directory (see [`output`]); returns once it
/// streams.
async fn start(
    db: &integration_tests::TestDatabase,
    client: &tokio_postgres::Client,
    table: &str,
    name: &str,
) -> (integration_tests::TempDir, Pgcdc) {
    let dir = integration_tests::TempDir::new(name);
    let events = dir.path().join("events.jsonl");
    let config = dir.path().join("pgcdc.toml");
    std::fs::write(
        &config,
        format!(
            "{source}\n[snapshot]\nmode = \"latest\"\n\n[[sinks]]\ntype = \"file\"\npath = {events:?}\n\n\
             [checkpoint]\njob = \"{name}\"\ninterval_ms = 200\n",
            source = db.source_toml(&[&format!("public.{table}")], name, &format!("{name}_pub")),
        ),
    )
    .unwrap();
    let pgcdc = Pgcdc::run(&config).unwrap();
    await_streaming(client, name, &pgcdc).await;
    (dir, pgcdc)
}

/// Waits until `pgcdc` streams from `slot`, which it creates: the slot is
/// active and has reached its consistent point. A slot is active while it
/// is being created too, and rows committed before its consistent point are
/// not in the stream (the snapshot mode is `latest`), so `active` alone let
/// the writer start early: under load the first 12,550 rows went missing.
async fn await_streaming(client: &tokio_postgres::Client, slot: &str, pgcdc: &Pgcdc) {
    let started = Instant::now();
    loop {
        let ready: Option<bool> = client
            .query_opt(
                "SELECT active AND confirmed_flush_lsn IS NOT NULL
                   FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap()
            .map(|r| r.get(0));
        if ready == Some(true) {
            return;
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "pgcdc did not start streaming from {slot}; stderr:\n{}",
            pgcdc.stderr()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// 20,000 transactions of 10 rows (bigint, int, 100 characters of text,
/// timestamptz, numeric) written while `pgcdc run` streams them: the median
/// of its anonymous resident memory over the stream stays within the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_transactions_stream_within_the_steady_budget() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE wide (id bigint PRIMARY KEY, k int NOT NULL, v text NOT NULL,
                                ts timestamptz NOT NULL, n numeric NOT NULL)",
        )
        .await
        .unwrap();
    let (dir, mut pgcdc) = start(&db, &client, "wide", "steady_memory").await;
    let pid = pgcdc.id().unwrap();

    // One round trip: a transaction per 10 rows, committed inside the block.
    let writer = db.connect().await.unwrap();
    let write = tokio::spawn(async move {
        writer
            .batch_execute(&format!(
                "DO $$ BEGIN FOR t IN 0..{last} LOOP
                   INSERT INTO wide SELECT g, g % 1000,
                     rpad('row ' || g || ' ', 100, 'abcdefghijklmnopqrstuvwxyz'),
                     timestamptz '2026-01-01 00:00:00+00' + g * interval '1.25 second',
                     round(g * 3.14159, 4)
                   FROM generate_series(t * {ROWS_PER_TXN} + 1, (t + 1) * {ROWS_PER_TXN}) g;
                   COMMIT;
                 END LOOP; END $$",
                last = TXNS - 1
            ))
            .await
            .unwrap();
    });
    // Sampled from the first line written until the slot is confirmed past
    // the last transaction.
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut end = None;
    loop {
        assert!(
            started.elapsed() < TIMEOUT,
            "the stream did not end; stderr:\n{}",
            pgcdc.stderr()
        );
        if output(dir.path())
            .iter()
            .any(|f| f.metadata().is_ok_and(|m| m.len() > 0))
        {
            if let Some(r) = rss(pid) {
                samples.push(r);
            }
        }
        if end.is_none() && write.is_finished() {
            end = Some(lsn(&client, "SELECT pg_current_wal_insert_lsn()::text").await);
        }
        if let Some(end) = end {
            if confirmed(&client, "steady_memory").await >= end {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    write.await.unwrap();
    let streamed = started.elapsed();
    pgcdc.terminate(TIMEOUT).await.unwrap();
    let lines = lines(dir.path());
    assert_eq!(lines, (TXNS * ROWS_PER_TXN) as usize, "one line per row");

    assert!(samples.len() >= 20, "{} samples", samples.len());
    let anon = median(samples.iter().map(|r| r.anon).collect());
    let file = median(samples.iter().map(|r| r.file).collect());
    let peak_anon = samples.iter().map(|r| r.anon).max().unwrap_or_default();
    println!(
        "{} rows in {streamed:?}: steady anonymous RSS {anon} kB (peak sampled {peak_anon} kB), \
         code pages of this build {file} kB, {} samples",
        TXNS * ROWS_PER_TXN,
        samples.len()
    );
    assert!(
        anon <= STEADY_ANON_KB,
        "steady anonymous RSS {anon} kB over {STEADY_ANON_KB} kB"
    );
}

/// The bound on the anonymous resident memory while 100 MB of wide rows in
/// one transaction stream through, in kB: the batches the pipeline holds
/// ([`cdc_runtime::pipeline::DEFAULT_CHANNEL_CAPACITY`] per sink, one being
/// written, one being filled), each about `batch_bytes` (1 MiB) of rows and
/// then their JSON, on top of the steady level above.
const WIDE_PEAK_ANON_KB: u64 = STEADY_ANON_KB + 24 * 1000;

/// One transaction of 400 rows of 256 KiB each (100 MiB) written while
/// `pgcdc run` streams: with batches cut at `pipeline.batch_bytes` (1 MiB)
/// its anonymous resident memory stays within a few batches of the steady
/// level, where batches of `batch_size` (1,000) events alone would hold the
/// whole transaction. Measured with the test profile: a peak of 24–25 MB
/// sampled, against 107 MB in one batch of 400 events with `batch_bytes` set
/// out of the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_of_wide_rows_passes_in_batches_of_batch_bytes() {
    const ROWS: usize = 400;
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE docs (id bigint PRIMARY KEY, body text NOT NULL)")
        .await
        .unwrap();
    let (dir, mut pgcdc) = start(&db, &client, "docs", "wide_memory").await;
    let pid = pgcdc.id().unwrap();
    let before = rss(pid).unwrap();

    // 256 KiB a row: 8,192 copies of a 32-character hash (compressed in
    // the table and the WAL; sent and held whole).
    client
        .batch_execute(&format!(
            "INSERT INTO docs SELECT g, repeat(md5(g::text), 8192) FROM generate_series(1, {ROWS}) g"
        ))
        .await
        .unwrap();
    let end = lsn(&client, "SELECT pg_current_wal_insert_lsn()::text").await;
    let started = Instant::now();
    let mut peak = before.anon;
    loop {
        assert!(
            started.elapsed() < TIMEOUT,
            "the stream did not end; stderr:\n{}",
            pgcdc.stderr()
        );
        if let Some(r) = rss(pid) {
            peak = peak.max(r.anon);
        }
        if confirmed(&client, "wide_memory").await >= end {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let streamed = started.elapsed();
    pgcdc.terminate(TIMEOUT).await.unwrap();
    let lines = lines(dir.path());
    assert_eq!(lines, ROWS, "one line per row");
    let bytes: u64 = output(dir.path())
        .iter()
        .map(|f| f.metadata().unwrap().len())
        .sum();
    assert!(
        bytes > (ROWS as u64) << 18,
        "{bytes} bytes written: the rows are not wide"
    );
    println!(
        "{ROWS} rows of 256 KiB ({bytes} bytes of JSON) in {streamed:?}: anonymous RSS {} kB before, peak sampled {peak} kB",
        before.anon
    );
    assert!(
        peak <= WIDE_PEAK_ANON_KB,
        "anonymous RSS peaked at {peak} kB, over {WIDE_PEAK_ANON_KB} kB"
    );
}
