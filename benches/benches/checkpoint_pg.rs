//! checkpoint-pg against the raw limits of the same server and client library.
//!
//! Starts its own throwaway server through the test harness. Each store figure is set
//! against the fastest raw way to move the same bytes with the same client library:
//!
//! * tiny state: 1000 saves against 1000 prepared single-row upserts, interleaved one by
//!   one so both see the same server and machine (after 100 warm-up rounds);
//! * 1 MiB state: one prepared single-row BYTEA `INSERT` / `SELECT` of 1 MiB (binary
//!   parameters and results, `STORAGE EXTERNAL` like the store's columns), each right
//!   after the store's save / load, medians of 20;
//! * 64 and 256 MiB states, both large layouts: the same bytes as 1 MiB BYTEA rows through
//!   binary `COPY` in / out, each right after the store's save / load (medians). First, 256
//!   MiB as 1 MiB `lo_put` / `lo_get` calls and through `COPY` show which raw layout is the
//!   faster (`COPY`, by far).
//!
//! `cargo bench -p pgcdc-benches --bench checkpoint_pg`; `PGCDC_BENCH_REPS` (default 3) sets
//! the repetitions of each big-state measurement (the median is reported);
//! `PGCDC_BENCH_ONLY=tiny`, `rows` or `lo` runs only the tiny saves, or only the states of
//! one layout (with the raw bulk baselines); `PGCDC_BENCH_SIZES=1,64` picks the state sizes
//! in MiB (default 1,64,256). `PGCDC_BENCH_PGOPTIONS` sets server options for the store's
//! connections (e.g. `-c log_min_duration_statement=0` to have the server log each
//! statement's time), `PGCDC_BENCH_LOG_RAW=1` logs the raw baseline's the same way.
//! `PGCDC_BENCH_KEEP` (default 2) sets how many
//! checkpoints each save keeps: from the third save on, each also deletes the oldest. For each state size, stderr also gets the
//! client's CPU time (this process, all threads, user + system) and minor page faults per
//! load and per raw read (medians): the server runs in other processes, so these are what
//! the store adds on the client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pgcdc_benches::{median, noise};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cdc_core::Lsn;
use checkpoint_api::{
    Checkpoint, CheckpointId, CheckpointStore, JobName, OperatorState, OwnerId, ProtocolOptions,
    SourcePosition, Timestamp,
};
use checkpoint_pg::{LargeLayout, PgCheckpointStore, PgStoreConfig};
use futures_util::{pin_mut, TryStreamExt};
use integration_tests::{TestDatabase, TestPostgres};
use tokio_postgres::binary_copy::{BinaryCopyInWriter, BinaryCopyOutStream};
use tokio_postgres::types::Type;
use tokio_postgres::Client;

const MIB: usize = 1 << 20;

fn mbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

fn checkpoint(job: &JobName, id: u64, state: Bytes) -> Checkpoint {
    let mut cp = Checkpoint::new(
        job.clone(),
        CheckpointId::new(id).unwrap(),
        Timestamp::from_unix_micros(id as i64),
        SourcePosition {
            commit_end_lsn: Lsn::from_u64(id * 64),
            slot: "bench".into(),
            publications: vec!["p".into()],
            protocol: ProtocolOptions::default(),
        },
    );
    cp.operators.push(OperatorState {
        id: "state".into(),
        kind: "blob".into(),
        state_version: 1,
        state,
    });
    cp
}

struct Raw {
    lo_write: f64,
    lo_read: f64,
    copy_write: f64,
    copy_read: f64,
}

/// Repetitions of the 1 MiB measurements (each takes milliseconds).
const SMALL_REPS: usize = 20;

/// MB/s of writing `blob` into the empty `raw_rows` as 1 MiB BYTEA rows through binary COPY.
async fn copy_in(client: &Client, blob: &[u8]) -> f64 {
    client.batch_execute("TRUNCATE raw_rows").await.unwrap();
    let start = Instant::now();
    let sink = client
        .copy_in("COPY raw_rows (seq, data) FROM STDIN (FORMAT binary)")
        .await
        .unwrap();
    let writer = BinaryCopyInWriter::new(sink, &[Type::INT4, Type::BYTEA]);
    pin_mut!(writer);
    for (i, chunk) in blob.chunks(MIB).enumerate() {
        writer.as_mut().write(&[&(i as i32), &chunk]).await.unwrap();
    }
    writer.finish().await.unwrap();
    mbps(blob.len(), start.elapsed())
}

/// MB/s of reading the `len` bytes of `raw_rows` back through binary COPY.
async fn copy_out(client: &Client, len: usize) -> f64 {
    let start = Instant::now();
    let out = client
        .copy_out("COPY (SELECT data FROM raw_rows ORDER BY seq) TO STDOUT (FORMAT binary)")
        .await
        .unwrap();
    let rows = BinaryCopyOutStream::new(out, &[Type::BYTEA]);
    pin_mut!(rows);
    let mut n = 0;
    while let Some(row) = rows.try_next().await.unwrap() {
        n += row.get::<&[u8]>(0).len();
    }
    assert_eq!(n, len);
    mbps(n, start.elapsed())
}

async fn raw(client: &mut Client, reps: usize) -> Raw {
    let blob = Bytes::from(noise(256 * MIB, 7));
    let (mut lw, mut lr, mut cw, mut cr) = (vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        // Large object, 1 MiB lo_put calls, one transaction.
        let tx = client.transaction().await.unwrap();
        let start = Instant::now();
        let oid: u32 = tx
            .query_one("SELECT lo_create(0)", &[])
            .await
            .unwrap()
            .get(0);
        let put = tx.prepare("SELECT lo_put($1, $2, $3)").await.unwrap();
        for (i, chunk) in blob.chunks(MIB).enumerate() {
            let at = (i * MIB) as i64;
            tx.execute(&put, &[&oid, &at, &chunk]).await.unwrap();
        }
        tx.commit().await.unwrap();
        lw.push(mbps(blob.len(), start.elapsed()));
        let start = Instant::now();
        let get = client.prepare("SELECT lo_get($1, $2, $3)").await.unwrap();
        let mut n = 0;
        for i in 0..256 {
            let at = (i * MIB) as i64;
            let r = client
                .query_one(&get, &[&oid, &at, &(MIB as i32)])
                .await
                .unwrap();
            n += r.get::<_, &[u8]>(0).len();
        }
        assert_eq!(n, blob.len());
        lr.push(mbps(n, start.elapsed()));
        client
            .execute("SELECT lo_unlink($1)", &[&oid])
            .await
            .unwrap();

        // 1 MiB BYTEA rows through binary COPY.
        cw.push(copy_in(client, &blob).await);
        cr.push(copy_out(client, blob.len()).await);
    }
    Raw {
        lo_write: median(lw),
        lo_read: median(lr),
        copy_write: median(cw),
        copy_read: median(cr),
    }
}

async fn store_for(db: &TestDatabase, layout: LargeLayout, table: &str) -> PgCheckpointStore {
    let mut config = PgStoreConfig::default();
    config.large_layout = layout;
    config.table = table.into();
    // `PGCDC_BENCH_KEEP`: how many checkpoints a save keeps (default 2, so that
    // every save from the third on also deletes one).
    config.keep_on_save = Some(
        std::env::var("PGCDC_BENCH_KEEP")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2),
    );
    let mut pg = db.config();
    if let Ok(o) = std::env::var("PGCDC_BENCH_PGOPTIONS") {
        pg.options(&o);
    }
    PgCheckpointStore::connect(pg, config).await.unwrap()
}

/// Median MB/s of the store and of the raw baseline measured beside it, and the client's
/// CPU and minor page faults per load and per raw read.
struct Speeds {
    save: f64,
    /// Median time of the retention each save started (after it returned).
    retention: Duration,
    load: f64,
    raw_write: f64,
    raw_read: f64,
    load_client: Usage,
    raw_read_client: Usage,
}

/// This process's CPU time (user + system, all threads) and minor page faults: the client's
/// share of a load, the server running in other processes.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    cpu: Duration,
    faults: u64,
}

impl Usage {
    fn now() -> Usage {
        // Field 10 of /proc/self/stat, the seventh after the parenthesised command name.
        let faults = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| {
                let rest = s.get(s.rfind(')')? + 1..)?.to_owned();
                rest.split_whitespace().nth(7)?.parse().ok()
            })
            .unwrap_or(0);
        Usage {
            cpu: cpu_time::ProcessTime::now().as_duration(),
            faults,
        }
    }

    fn since(start: Usage) -> Usage {
        let now = Usage::now();
        Usage {
            cpu: now.cpu.saturating_sub(start.cpu),
            faults: now.faults.saturating_sub(start.faults),
        }
    }

    /// The median CPU time and the median fault count of `all` (each on its own).
    fn median(all: &[Usage]) -> Usage {
        let mut cpu: Vec<Duration> = all.iter().map(|u| u.cpu).collect();
        let mut faults: Vec<u64> = all.iter().map(|u| u.faults).collect();
        cpu.sort();
        faults.sort_unstable();
        Usage {
            cpu: cpu.get(cpu.len() / 2).copied().unwrap_or_default(),
            faults: faults.get(faults.len() / 2).copied().unwrap_or_default(),
        }
    }
}

/// The raw baseline [`big`] measures right after each save and each load of the store, with
/// the same bytes, so both see the same server and machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Beside {
    /// One BYTEA row, prepared `INSERT` / `SELECT`.
    OneRow,
    /// 1 MiB BYTEA rows, binary `COPY` in / out.
    CopyRows,
}

/// Save and load of a `size`-byte state, each followed by the raw baseline `beside`.
async fn big(
    store: &PgCheckpointStore,
    size: usize,
    reps: usize,
    client: &Client,
    beside: Beside,
) -> Speeds {
    let job = JobName::new(format!("big-{size}")).unwrap();
    let lease = store
        .acquire_lease(&job, &OwnerId::new("bench").unwrap())
        .await
        .unwrap();
    let state = Bytes::from(noise(size, size as u64));
    let insert = client
        .prepare("INSERT INTO raw_one (k, v) VALUES ($1, $2)")
        .await
        .unwrap();
    let select = client
        .prepare("SELECT v FROM raw_one WHERE k = $1")
        .await
        .unwrap();
    let (mut s, mut l, mut rw, mut rr) = (vec![], vec![], vec![], vec![]);
    let (mut lu, mut ru) = (vec![], vec![]);
    let mut kept = vec![];
    for rep in 0..reps as u64 {
        let cp = checkpoint(&job, rep + 1, state.clone());
        let start = Instant::now();
        store.save(&lease, &cp).await.unwrap();
        s.push(mbps(size, start.elapsed()));
        // The retention the save started runs after it returned: let it finish, so the
        // raw baseline runs alone, and time it on its own.
        let start = Instant::now();
        store.settle_retention().await;
        kept.push(start.elapsed());
        rw.push(match beside {
            Beside::OneRow => {
                let start = Instant::now();
                client
                    .execute(&insert, &[&(rep as i64), &&state[..]])
                    .await
                    .unwrap();
                mbps(size, start.elapsed())
            }
            Beside::CopyRows => copy_in(client, &state).await,
        });
        let used = Usage::now();
        let start = Instant::now();
        let back = store.load(&job, cp.id).await.unwrap();
        l.push(mbps(size, start.elapsed()));
        lu.push(Usage::since(used));
        assert_eq!(back.checkpoint.state_len(), size as u64);
        drop(back);
        let used = Usage::now();
        rr.push(match beside {
            Beside::OneRow => {
                let start = Instant::now();
                let row = client.query_one(&select, &[&(rep as i64)]).await.unwrap();
                let n = row.get::<_, &[u8]>(0).len();
                assert_eq!(n, size);
                mbps(n, start.elapsed())
            }
            Beside::CopyRows => copy_out(client, size).await,
        });
        ru.push(Usage::since(used));
    }
    client
        .batch_execute("TRUNCATE raw_one, raw_rows")
        .await
        .unwrap();
    kept.sort();
    Speeds {
        retention: kept.get(kept.len() / 2).copied().unwrap_or_default(),
        save: median(s),
        load: median(l),
        raw_write: median(rw),
        raw_read: median(rr),
        load_client: Usage::median(&lu),
        raw_read_client: Usage::median(&ru),
    }
}

/// p50 and p99 of tiny saves and of raw upserts, interleaved one by one.
struct Tiny {
    save: (Duration, Duration),
    /// The retention each save started, run to its end before the next upsert.
    retention: (Duration, Duration),
    upsert: (Duration, Duration),
}

async fn tiny(store: &PgCheckpointStore, client: &Client) -> Tiny {
    let job = JobName::new("tiny").unwrap();
    let lease = store
        .acquire_lease(&job, &OwnerId::new("bench").unwrap())
        .await
        .unwrap();
    let upsert = client
        .prepare(
            "INSERT INTO raw_kv (k, v) VALUES ($1, $2)
             ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
        )
        .await
        .unwrap();
    let state = Bytes::from(noise(200, 1));
    let value = Bytes::from(noise(300, 3));
    let mut saves = Vec::with_capacity(1000);
    let mut upserts = Vec::with_capacity(1000);
    let mut retentions = Vec::with_capacity(1000);
    for n in 1..=1100u64 {
        let cp = checkpoint(&job, n, state.clone());
        let start = Instant::now();
        store.save(&lease, &cp).await.unwrap();
        let saved = start.elapsed();
        let start = Instant::now();
        store.settle_retention().await;
        let retained = start.elapsed();
        let start = Instant::now();
        client
            .execute(&upsert, &[&"job", &&value[..]])
            .await
            .unwrap();
        let upserted = start.elapsed();
        if n > 100 {
            retentions.push(retained);
            saves.push(saved);
            upserts.push(upserted);
        }
    }
    saves.sort();
    upserts.sort();
    retentions.sort();
    let p = |v: &[Duration]| (percentile(v, 0.5), percentile(v, 0.99));
    Tiny {
        retention: p(&retentions),
        save: p(&saves),
        upsert: p(&upserts),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn run() {
    let reps: usize = std::env::var("PGCDC_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let db = TestPostgres::new_database().await.unwrap();
    let mut client = db.connect().await.unwrap();
    if std::env::var("PGCDC_BENCH_LOG_RAW").is_ok() {
        client
            .batch_execute("SET log_min_duration_statement = 0")
            .await
            .unwrap();
    }
    client
        .batch_execute(
            "CREATE TABLE raw_rows (seq int PRIMARY KEY, data bytea NOT NULL);
             ALTER TABLE raw_rows ALTER COLUMN data SET STORAGE EXTERNAL;
             CREATE TABLE raw_kv (k text PRIMARY KEY, v bytea NOT NULL);
             CREATE TABLE raw_one (k bigint PRIMARY KEY, v bytea NOT NULL);
             ALTER TABLE raw_one ALTER COLUMN v SET STORAGE EXTERNAL;",
        )
        .await
        .unwrap();
    let only = std::env::var("PGCDC_BENCH_ONLY").unwrap_or_default();
    // `PGCDC_BENCH_SIZES`: the state sizes in MiB, comma-separated (default 1,64,256).
    let sizes: Vec<usize> = std::env::var("PGCDC_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![1, 64, 256]);
    let part = |name: &str| only.is_empty() || only == name;
    if part("tiny") {
        eprintln!("tiny saves and upserts...");
        let tiny_store = store_for(&db, LargeLayout::ChunkRows, "cp_tiny").await;
        let t = tiny(&tiny_store, &client).await;
        println!("| tiny (single row) | p50 | p99 | p50 / raw | p99 / raw |");
        println!("|---|---|---|---|---|");
        println!(
            "| raw upsert (prepared), interleaved with the saves | {:.3} ms | {:.3} ms | | |",
            ms(t.upsert.0),
            ms(t.upsert.1)
        );
        println!(
            "| store save, tiny state (1000 saves, retention 2) | {:.3} ms | {:.3} ms | {:.2}x | {:.2}x |",
            ms(t.save.0),
            ms(t.save.1),
            ms(t.save.0) / ms(t.upsert.0),
            ms(t.save.1) / ms(t.upsert.1)
        );
        println!(
            "| its retention, after the save returned (deletes the oldest) | {:.3} ms | {:.3} ms | | |",
            ms(t.retention.0),
            ms(t.retention.1)
        );
        println!();
    }
    if !(part("rows") || part("lo")) {
        return;
    }
    println!("| measurement | save MB/s | load MB/s | save / raw | load / raw |");
    println!("|---|---|---|---|---|");
    // The bulk baselines (256 MiB, which layout is faster) matter only for the big states.
    if sizes.iter().any(|&m| m > 1) {
        eprintln!("raw baselines ({reps} reps)...");
        let raw = raw(&mut client, reps).await;
        if raw.lo_write > raw.copy_write || raw.lo_read > raw.copy_read {
            eprintln!("note: large objects beat COPY here; big states are still set against COPY");
        }
        println!(
            "| raw: 256 MiB as 1 MiB lo_put / lo_get | {:.0} | {:.0} | | |",
            raw.lo_write, raw.lo_read
        );
        println!(
            "| raw: 256 MiB as 1 MiB BYTEA rows, binary COPY in / out | {:.0} | {:.0} | | |",
            raw.copy_write, raw.copy_read
        );
    }
    for (layout, table, name) in [
        (LargeLayout::ChunkRows, "cp_rows", "rows"),
        (LargeLayout::LargeObject, "cp_lo", "lo"),
    ] {
        if !part(name) {
            continue;
        }
        let store = store_for(&db, layout, table).await;
        for size in sizes.iter().map(|&m| m * MIB) {
            eprintln!("{layout:?} {} MiB...", size / MIB);
            // 1 MiB against the one-row baseline, bigger states against COPY (the faster bulk
            // layout, see the lines above), each measured right after the store.
            let sp = if size == MIB {
                let sp = big(&store, size, reps.max(SMALL_REPS), &client, Beside::OneRow).await;
                println!(
                    "| raw: 1 MiB as one BYTEA row, prepared INSERT / SELECT (interleaved with the next row) | {:.0} | {:.0} | | |",
                    sp.raw_write, sp.raw_read
                );
                sp
            } else {
                let sp = big(&store, size, reps, &client, Beside::CopyRows).await;
                println!(
                    "| raw: {} MiB as 1 MiB BYTEA rows, binary COPY (interleaved with the next row) | {:.0} | {:.0} | | |",
                    size / MIB,
                    sp.raw_write,
                    sp.raw_read
                );
                sp
            };
            println!(
                "| store {layout:?}: {} MiB state | {:.0} | {:.0} | {:.0}% | {:.0}% |",
                size / MIB,
                sp.save,
                sp.load,
                100.0 * sp.save / sp.raw_write,
                100.0 * sp.load / sp.raw_read
            );
            println!(
                "| its retention, after the save returned: {:.1} ms (median) | | | | |",
                ms(sp.retention)
            );
            eprintln!(
                "  client per load (medians): store {:.0} ms CPU, {} minor faults; raw read {:.0} ms CPU, {} minor faults",
                ms(sp.load_client.cpu),
                sp.load_client.faults,
                ms(sp.raw_read_client.cpu),
                sp.raw_read_client.faults
            );
        }
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}
