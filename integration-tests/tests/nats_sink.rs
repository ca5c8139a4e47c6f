//! The NATS JetStream sink (`type = "nats"`) against a real `nats-server`
//! and a real PostgreSQL, driven through `pgcdc.toml` and the job API:
//! subjects (percent-encoded names, `{partition}` as Kafka's default
//! partitioner), the headers every message carries, Debezium and plain
//! payloads, keys and tombstones; user/password, token and NKey auth; a
//! stream that does not cover the sink's subjects, the dedupe-window rule,
//! memory storage (refused unless allowed), `max_age_secs` and `replicas`
//! (on a three-node JetStream cluster, and refused by a single server);
//! and restarts of the server while the job streams, after which every row
//! is in the stream exactly once and in commit order.
//!
//! Each test uses its own stream, subject prefix, slot and job (names
//! unique to the run), and deletes its stream at the end. Tests that
//! restart the server or need auth run their own `nats-server`; the others
//! share the one at 127.0.0.1:4222 when it answers (else start their own).
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use cdc_runtime::{JobError, Progress};
use integration_tests::nats::{
    create_stream, delete_stream, read_stream, stream_len, unique_name, user_creds, NatsAuthConfig,
    NatsCluster, NatsOperator, NatsPki, NatsServer, NatsServerOptions, StoredMessage, TestNats,
};
use integration_tests::{eventually, TestDatabase, TestPostgres};
use pgcdc::config::Config;
use pgcdc::RunOptions;
use serde_json::{json, Value};
use tokio::sync::oneshot;

const TIMEOUT: Duration = Duration::from_secs(60);

fn init_logging() {
    if let Ok(filter) = std::env::var("PGCDC_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// The names of one test's run: `name` is the job, the slot, the subject
/// prefix; `stream` its stream.
struct Names {
    name: String,
    stream: String,
}

impl Names {
    fn new(tag: &str) -> Names {
        let name = unique_name(tag);
        let stream = name.to_ascii_uppercase();
        Names { name, stream }
    }
}

/// `[source]` over `tables`, no initial snapshot (the tables start empty;
/// a snapshot running beside the first writes would add `r` records of
/// them), and `[checkpoint]` (every 200 ms), for job `names.name`; the
/// sinks and other sections are appended by the test.
fn base_toml(db: &TestDatabase, tables: &[&str], names: &Names) -> String {
    let source = db.source_toml(tables, &names.name, &format!("{}_pub", names.name));
    format!(
        "{source}\n[snapshot]\nmode = \"latest\"\n\n[checkpoint]\njob = {job:?}\ninterval_ms = 200\n",
        job = names.name
    )
}

/// A `[[sinks]]` entry of type nats into `url` with subject prefix
/// `names.name` and stream `names.stream`, plus `extra` keys of the sink
/// and `stream_extra` keys of `[sinks.stream]`.
fn nats_sink_toml(url: &str, names: &Names, extra: &str, stream_extra: &str) -> String {
    nats_sink_toml_servers(&[url.to_owned()], names, extra, stream_extra)
}

/// [`nats_sink_toml`] with several server URLs.
fn nats_sink_toml_servers(
    urls: &[String],
    names: &Names,
    extra: &str,
    stream_extra: &str,
) -> String {
    format!(
        r#"
[[sinks]]
type = "nats"
servers = {urls:?}
prefix = {prefix:?}
{extra}

[sinks.stream]
name = {stream:?}
{stream_extra}
"#,
        prefix = names.name,
        stream = names.stream,
    )
}

struct Running {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<Progress, JobError>>,
}

fn start(text: &str) -> Running {
    init_logging();
    let config = Config::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    config.check().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let result = pgcdc::run(&config, &RunOptions::default(), async move {
            let _ = stopped.await;
        })
        .await;
        if let Err(e) = &result {
            eprintln!("the job failed: {}", chain(e));
        }
        result
    });
    Running { stop, task }
}

async fn stop(run: Running) -> Progress {
    let _ = run.stop.send(());
    tokio::time::timeout(TIMEOUT, run.task)
        .await
        .expect("the job stops")
        .unwrap()
        .expect("the job ran without an error")
}

/// An error with its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// The error that keeps the job of `text` from starting (at parsing,
/// checking or running it); panics if it starts streaming instead.
async fn refusal(text: &str) -> String {
    let err = refused(text).await;
    eprintln!("refused: {err}");
    err
}

async fn refused(text: &str) -> String {
    init_logging();
    let config = match Config::parse(text) {
        Ok(c) => c,
        Err(e) => return chain(&e),
    };
    if let Err(e) = config.check() {
        return chain(&e);
    }
    let options = RunOptions::default();
    let run = pgcdc::run(&config, &options, std::future::pending());
    match tokio::time::timeout(TIMEOUT, run).await {
        Ok(Err(e)) => chain(&e),
        Ok(Ok(p)) => panic!("the job was expected to refuse to start, it ran: {p:?}"),
        Err(_) => panic!("the job was expected to refuse to start, it ran for {TIMEOUT:?}"),
    }
}

/// Waits until the job's slot streams (changes committed before it reached
/// its consistent point are not in it).
async fn streaming(db: &TestDatabase, names: &Names) {
    let client = db.connect().await.unwrap();
    eventually("the job's slot to be active", TIMEOUT, || async {
        client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active \
                 AND confirmed_flush_lsn IS NOT NULL",
                &[&names.name],
            )
            .await
            .unwrap()
            .map(|_| ())
    })
    .await;
}

/// Waits until stream `name` holds `n` messages, then reads them all;
/// on a timeout, panics listing what it holds. A failed stream info counts
/// as no messages yet (a clustered stream answers only once it has a
/// leader).
async fn wait_for_messages(js: &jetstream::Context, name: &str, n: u64) -> Vec<StoredMessage> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let (len, error) = match stream_len(js, name).await {
            Ok(len) => (len.unwrap_or(0), None),
            Err(e) => (0, Some(e)),
        };
        if len >= n {
            return read_stream(js, name).await.unwrap();
        }
        if tokio::time::Instant::now() >= deadline {
            let held = read_stream(js, name).await.unwrap_or_default();
            panic!(
                "timed out waiting for {n} messages in stream {name}; it holds {len}{}:\n{}",
                error.map_or(String::new(), |e| format!(" (last error: {e})")),
                listing(&held)
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// One line per message: sequence, subject, `Nats-Msg-Id`, payload.
fn listing(messages: &[StoredMessage]) -> String {
    messages
        .iter()
        .map(|m| {
            format!(
                "{} {} {:?} {}",
                m.sequence,
                m.subject,
                m.header("Nats-Msg-Id"),
                String::from_utf8_lossy(&m.payload)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Drops the replication slot of a finished job (slots are the cluster's).
async fn drop_slot(db: &TestDatabase, names: &Names) {
    let client = db.connect().await.unwrap();
    let _ = client
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE slot_name = $1 AND NOT active",
            &[&names.name],
        )
        .await;
}

// ---- Kafka's default partitioner ---------------------------------------------

/// Kafka's `Utils.murmur2` (the default partitioner's hash).
fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner gives `key` of `n`.
fn kafka_partition(key: &[u8], n: u32) -> u32 {
    ((murmur2(key) as u32) & 0x7fff_ffff) % n
}

#[test]
fn murmur2_matches_kafka() {
    // Kafka's UtilsTest.testMurmur2.
    for (data, hash) in [
        (&b"21"[..], -973_932_308),
        (b"foobar", -790_332_482),
        (b"a-little-bit-long-string", -985_981_536),
        (b"a-little-bit-longer-string", -1_486_304_829),
        (
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        ),
        (b"abc", 479_470_107),
    ] {
        assert_eq!(murmur2(data), hash, "{}", String::from_utf8_lossy(data));
    }
}

// ---- the harness ------------------------------------------------------------

/// The harness itself: a server of its own answers with JetStream, keeps
/// its port and store across a kill and start, deduplicates by
/// `Nats-Msg-Id`, reads a stream back in order, and is gone once dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_server_restarts_with_its_store_and_stops_when_dropped() {
    let mut server = NatsServer::start().await.unwrap();
    let port = server.port();
    let js = server.jetstream().await.unwrap();
    create_stream(&js, "HARNESS", &["harness.>"]).await.unwrap();
    for (i, id) in ["a", "b", "a", "c"].iter().enumerate() {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", *id);
        headers.insert("Pgcdc-Op", "insert");
        let ack = js
            .publish_with_headers(format!("harness.{i}"), headers, format!("{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(ack.duplicate, i == 2, "message {i} ({id})");
    }
    server.restart().await.unwrap();
    assert_eq!(server.port(), port);
    assert_eq!(server.starts(), 2);
    let js = server.jetstream().await.unwrap();
    let messages = read_stream(&js, "HARNESS").await.unwrap();
    let got: Vec<(u64, &str, Option<&str>, &[u8])> = messages
        .iter()
        .map(|m| {
            (
                m.sequence,
                m.subject.as_str(),
                m.header("Nats-Msg-Id"),
                m.payload.as_slice(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (1, "harness.0", Some("a"), &b"0"[..]),
            (2, "harness.1", Some("b"), b"1"),
            (3, "harness.3", Some("c"), b"3"),
        ]
    );
    assert_eq!(messages[0].header("Pgcdc-Op"), Some("insert"));
    assert!(delete_stream(&js, "HARNESS").await.unwrap());
    assert!(!delete_stream(&js, "HARNESS").await.unwrap());
    assert_eq!(stream_len(&js, "HARNESS").await.unwrap(), None);
    drop(js);
    drop(server);
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err(),
        "the server still listens after the drop"
    );
}

// ---- message checks -----------------------------------------------------------

/// An `X/Y` LSN as PostgreSQL prints it (upper-case hex, no leading zeros).
fn is_lsn(s: &str) -> bool {
    let hex = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_digit() || ('A'..='F').contains(&c))
            && (p == "0" || !p.starts_with('0'))
    };
    s.split_once('/').is_some_and(|(a, b)| hex(a) && hex(b))
}

fn lsn_value(s: &str) -> u64 {
    let (hi, lo) = s.split_once('/').unwrap();
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

/// A `Nats-Msg-Id` taken apart: `{job}:{commit LSN}:{index}[:{suffix}]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct MsgId {
    lsn: u64,
    index: u32,
    suffix: Option<String>,
}

/// Parses `id` and checks it against the message's other headers: the job
/// prefix, the commit LSN equal to `Pgcdc-Commit-Lsn`.
fn msg_id(m: &StoredMessage, job: &str) -> MsgId {
    let id = m
        .header("Nats-Msg-Id")
        .unwrap_or_else(|| panic!("no Nats-Msg-Id on message {}: {:?}", m.sequence, m.headers));
    let rest = id
        .strip_prefix(job)
        .and_then(|r| r.strip_prefix(':'))
        .unwrap_or_else(|| panic!("Nats-Msg-Id {id:?} does not start with the job {job:?}:"));
    let mut parts = rest.splitn(3, ':');
    let lsn = parts.next().unwrap();
    let index = parts
        .next()
        .unwrap_or_else(|| panic!("Nats-Msg-Id {id:?}: no index"));
    let suffix = parts.next().map(str::to_owned);
    assert!(is_lsn(lsn), "Nats-Msg-Id {id:?}: {lsn:?} is not an X/Y LSN");
    let commit = m
        .header("Pgcdc-Commit-Lsn")
        .unwrap_or_else(|| panic!("no Pgcdc-Commit-Lsn on {id}"));
    assert_eq!(
        lsn, commit,
        "Nats-Msg-Id {id:?} names the commit LSN of Pgcdc-Commit-Lsn"
    );
    let index = index
        .parse()
        .unwrap_or_else(|_| panic!("Nats-Msg-Id {id:?}: index {index:?} is not a number"));
    MsgId {
        lsn: lsn_value(lsn),
        index,
        suffix,
    }
}

/// Every message has a distinct `Nats-Msg-Id`, and commit LSNs never go
/// back in stream order.
fn check_ids(messages: &[StoredMessage], job: &str) -> Vec<MsgId> {
    let ids: Vec<MsgId> = messages.iter().map(|m| msg_id(m, job)).collect();
    let mut seen = BTreeSet::new();
    for m in messages {
        assert!(
            seen.insert(m.header("Nats-Msg-Id").unwrap()),
            "Nats-Msg-Id {:?} twice in the stream",
            m.header("Nats-Msg-Id")
        );
    }
    for pair in ids.windows(2) {
        assert!(
            pair[0].lsn <= pair[1].lsn,
            "commit LSNs go back in stream order: {pair:?}"
        );
    }
    ids
}

/// What a test expects of one message, in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Want {
    Begin,
    End,
    /// A change record: table, Debezium op, key id, `Pgcdc-Op`, record kind
    /// (`None` for the event's own record, else `key-delete`, `tombstone`,
    /// `key-create`).
    Change {
        table: &'static str,
        op: &'static str,
        id: i64,
        pgcdc_op: &'static str,
        record: Option<&'static str>,
    },
}

fn change(table: &'static str, op: &'static str, id: i64) -> Want {
    let pgcdc_op = match op {
        "c" => "insert",
        "u" => "update",
        "d" => "delete",
        "r" => "read",
        other => panic!("op {other}"),
    };
    Want::Change {
        table,
        op,
        id,
        pgcdc_op,
        record: None,
    }
}

fn record(table: &'static str, op: &'static str, id: i64, record: &'static str) -> Want {
    Want::Change {
        table,
        op,
        id,
        pgcdc_op: "update",
        record: Some(record),
    }
}

const ITEMS: &str = "items";
/// A table name with bytes NATS forbids in a subject token.
const ODD: &str = "order lines>50%";
const ODD_TOKEN: &str = "order%20lines%3E50%25";

/// Creates `items (id int PRIMARY KEY, name text)` and `"order lines>50%"
/// (id int PRIMARY KEY, qty int)`.
async fn create_tables(db: &TestDatabase) {
    db.connect()
        .await
        .unwrap()
        .batch_execute(
            "CREATE TABLE items (id int PRIMARY KEY, name text);
             CREATE TABLE \"order lines>50%\" (id int PRIMARY KEY, qty int);",
        )
        .await
        .unwrap();
}

/// Six transactions over both tables; returns the change records the
/// Debezium format makes of them without keys (no tombstones), with the
/// BEGIN/END records.
async fn workload(db: &TestDatabase) -> Vec<Want> {
    let client = db.connect().await.unwrap();
    // One transaction per statement (a multi-statement string would be one
    // implicit transaction).
    for sql in [
        "BEGIN;
         INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 8) g;
         INSERT INTO \"order lines>50%\" VALUES (1, 10), (2, 20);
         COMMIT;",
        "UPDATE items SET name = 'renamed' WHERE id = 2",
        "DELETE FROM items WHERE id = 3",
        "UPDATE items SET id = 100 WHERE id = 4",
        "UPDATE \"order lines>50%\" SET qty = qty + 1",
        "DELETE FROM \"order lines>50%\" WHERE id = 1",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    let mut want = vec![Want::Begin];
    want.extend((1..=8).map(|i| change(ITEMS, "c", i)));
    want.extend([change(ODD, "c", 1), change(ODD, "c", 2), Want::End]);
    want.extend([Want::Begin, change(ITEMS, "u", 2), Want::End]);
    want.extend([Want::Begin, change(ITEMS, "d", 3), Want::End]);
    want.extend([
        Want::Begin,
        record(ITEMS, "d", 4, "key-delete"),
        record(ITEMS, "c", 100, "key-create"),
        Want::End,
    ]);
    want.extend([
        Want::Begin,
        change(ODD, "u", 1),
        change(ODD, "u", 2),
        Want::End,
    ]);
    want.extend([Want::Begin, change(ODD, "d", 1), Want::End]);
    want
}

/// The table of a subject `{prefix}.public.{table}[.{partition}]`, and
/// its partition token.
fn subject_parts<'a>(subject: &'a str, prefix: &str) -> (&'a str, Option<&'a str>) {
    let rest = subject
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix(".public."))
        .unwrap_or_else(|| panic!("subject {subject:?} is not {prefix}.public.<table>…"));
    match rest.split_once('.') {
        Some((table, partition)) => (table, Some(partition)),
        None => (rest, None),
    }
}

fn token_of(table: &str) -> &'static str {
    match table {
        ITEMS => "items",
        ODD => ODD_TOKEN,
        other => panic!("table {other}"),
    }
}

// ---- subjects, headers, payloads ---------------------------------------------

/// Debezium records with transaction metadata and `{partition}` of 4: every
/// message's subject, headers and payload, and the order of the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_subjects_headers_partitions_and_payloads() {
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let names = Names::new("nats_dbz");
    let text = format!(
        "{}{}\n[debezium]\n\"provide.transaction.metadata\" = true\n",
        base_toml(&db, &["public.items", &format!("public.{ODD}")], &names),
        nats_sink_toml(
            nats.url(),
            &names,
            "subject = \"{prefix}.{schema}.{table}.{partition}\"\npartitions = 4",
            "create = true",
        ),
    );
    let run = start(&text);
    streaming(&db, &names).await;
    let want = workload(&db).await;
    let messages = wait_for_messages(&js, &names.stream, want.len() as u64).await;
    stop(run).await;
    let ids = check_ids(&messages, &names.name);
    assert_eq!(
        messages.len(),
        want.len(),
        "one message per record: {:#?}",
        messages
            .iter()
            .map(|m| (&m.subject, m.header("Nats-Msg-Id")))
            .collect::<Vec<_>>()
    );

    let prefix = &names.name;
    let mut partitions: HashMap<(&str, i64), BTreeSet<String>> = HashMap::new();
    let mut txn_lsn = None;
    for ((m, id), want) in messages.iter().zip(&ids).zip(&want) {
        let v = m.json();
        let where_ = format!("message {} ({:?})", m.sequence, m.header("Nats-Msg-Id"));
        match want {
            Want::Begin | Want::End => {
                let (suffix, status) = if *want == Want::Begin {
                    ("begin", "BEGIN")
                } else {
                    ("end", "END")
                };
                assert_eq!(m.subject, format!("{prefix}.transaction"), "{where_}");
                assert_eq!(id.suffix.as_deref(), Some(suffix), "{where_}");
                assert_eq!(m.header("Pgcdc-Op"), Some("transaction"), "{where_}");
                assert_eq!(m.header("Pgcdc-Record"), None, "{where_}");
                assert_eq!(v["status"], json!(status), "{where_}: {v}");
                if *want == Want::Begin {
                    txn_lsn = Some(id.lsn);
                } else {
                    assert_eq!(Some(id.lsn), txn_lsn, "{where_}: END of the BEGIN's commit");
                }
            }
            Want::Change {
                table,
                op,
                id: key,
                pgcdc_op,
                record,
            } => {
                assert_eq!(Some(id.lsn), txn_lsn, "{where_}: in its transaction");
                let (token, partition) = subject_parts(&m.subject, prefix);
                assert_eq!(token, token_of(table), "{where_}: subject {}", m.subject);
                // The key as the Debezium key JSON, hashed as Kafka does.
                let key_json = format!("{{\"id\":{key}}}");
                let expected = kafka_partition(key_json.as_bytes(), 4).to_string();
                assert_eq!(
                    partition,
                    Some(expected.as_str()),
                    "{where_}: the partition of key {key_json} is murmur2(key) % 4 as Kafka's \
                     default partitioner (subject {})",
                    m.subject
                );
                partitions
                    .entry((*table, *key))
                    .or_default()
                    .insert(m.subject.clone());
                assert_eq!(id.suffix.as_deref(), *record, "{where_}");
                assert_eq!(m.header("Pgcdc-Op"), Some(*pgcdc_op), "{where_}");
                assert_eq!(m.header("Pgcdc-Record"), *record, "{where_}");
                assert_eq!(v["op"], json!(op), "{where_}: {v}");
                let row = if *op == "d" {
                    &v["before"]
                } else {
                    &v["after"]
                };
                assert_eq!(row["id"], json!(key), "{where_}: {v}");
                assert_eq!(v["source"]["table"], json!(table), "{where_}");
                // The event's position in its transaction.
                assert_eq!(
                    v["transaction"]["total_order"],
                    json!(u64::from(id.index) + 1),
                    "{where_}: the index of Nats-Msg-Id is the event's in its transaction"
                );
                let event_lsn = v["source"]["lsn"].as_u64().unwrap();
                assert!(
                    event_lsn <= id.lsn,
                    "{where_}: the event's LSN {event_lsn} is at or before its commit {}",
                    id.lsn
                );
            }
        }
    }
    for ((table, key), subjects) in &partitions {
        assert_eq!(
            subjects.len(),
            1,
            "key {key} of {table} went to one partition: {subjects:?}"
        );
    }
    // Key 2 of items was inserted then updated; key 4 deleted by its change.
    assert!(partitions[&(ITEMS, 2)].len() == 1);
    // Each transaction's records share their commit LSN; indexes of its
    // change events go up.
    let mut by_lsn: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for id in &ids {
        if id.suffix.is_none() {
            by_lsn.entry(id.lsn).or_default().push(id.index);
        }
    }
    for (lsn, indexes) in &by_lsn {
        assert!(
            indexes.windows(2).all(|w| w[0] < w[1]),
            "indexes of commit {lsn:X} go up: {indexes:?}"
        );
    }
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;
}

/// The plain format: one message per event, `Nats-Msg-Id` exactly
/// `{job}:{commit_lsn}:{index}` of the payload, the default subject.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_format_ids_are_the_payloads_commit_lsn_and_index() {
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let names = Names::new("nats_plain");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items", &format!("public.{ODD}")], &names),
        nats_sink_toml(nats.url(), &names, "format = \"plain\"", ""),
    );
    let run = start(&text);
    streaming(&db, &names).await;
    let _ = workload(&db).await;
    // 10 inserts, 1 update, 1 delete, 1 key change, 2 updates, 1 delete.
    let want: Vec<(&str, &str, i64)> = (1..=8)
        .map(|i| (ITEMS, "insert", i))
        .chain([
            (ODD, "insert", 1),
            (ODD, "insert", 2),
            (ITEMS, "update", 2),
            (ITEMS, "delete", 3),
            (ITEMS, "update", 100),
            (ODD, "update", 1),
            (ODD, "update", 2),
            (ODD, "delete", 1),
        ])
        .collect();
    let messages = wait_for_messages(&js, &names.stream, want.len() as u64).await;
    stop(run).await;
    check_ids(&messages, &names.name);
    assert_eq!(messages.len(), want.len());
    for (m, (table, op, key)) in messages.iter().zip(&want) {
        let v = m.json();
        let id = m.header("Nats-Msg-Id").unwrap();
        assert_eq!(
            m.subject,
            format!("{}.public.{}", names.name, token_of(table)),
            "{id}"
        );
        assert_eq!(v["op"], json!(op), "{id}: {v}");
        assert_eq!(v["table"], json!(table), "{id}: {v}");
        let row = if *op == "delete" {
            &v["before"]
        } else {
            &v["after"]
        };
        assert_eq!(row["id"], json!(key), "{id}: {v}");
        let commit = v["commit_lsn"].as_str().unwrap();
        assert_eq!(
            id,
            format!("{}:{commit}:{}", names.name, v["index"]),
            "Nats-Msg-Id of {v}"
        );
        assert_eq!(m.header("Pgcdc-Commit-Lsn"), Some(commit), "{id}");
        assert_eq!(m.header("Pgcdc-Op"), Some(*op), "{id}");
        assert_eq!(m.header("Pgcdc-Record"), None, "{id}");
    }
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;
}

/// `key = true`: each payload is `{"key":…,"value":…}` (with `"headers"`
/// at a key change), a delete is followed by a tombstone and a key change
/// becomes its delete, a tombstone and its create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_payloads_and_tombstones() {
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let names = Names::new("nats_key");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(nats.url(), &names, "key = true", ""),
    );
    let run = start(&text);
    streaming(&db, &names).await;
    db.connect()
        .await
        .unwrap()
        .batch_execute(
            "INSERT INTO items VALUES (1, 'a'), (2, 'b');
             DELETE FROM items WHERE id = 1;
             UPDATE items SET id = 20 WHERE id = 2;",
        )
        .await
        .unwrap();
    let messages = wait_for_messages(&js, &names.stream, 7).await;
    stop(run).await;
    let ids = check_ids(&messages, &names.name);
    let got: Vec<(Option<&str>, Option<&str>, Value)> = messages
        .iter()
        .map(|m| {
            let v = m.json();
            (
                m.header("Pgcdc-Op"),
                m.header("Pgcdc-Record"),
                json!({
                    "key": v["key"],
                    "op": v["value"]["op"],
                    "value_null": v["value"].is_null(),
                    "headers": v.get("headers").cloned().unwrap_or(Value::Null),
                }),
            )
        })
        .collect();
    let rec = |key: i64, op: &str| json!({"key": {"id": key}, "op": op, "value_null": false, "headers": null});
    let tombstone =
        |key: i64| json!({"key": {"id": key}, "op": null, "value_null": true, "headers": null});
    let with_headers = |key: i64, op: &str, headers: Value| json!({"key": {"id": key}, "op": op, "value_null": false, "headers": headers});
    assert_eq!(
        got,
        vec![
            (Some("insert"), None, rec(1, "c")),
            (Some("insert"), None, rec(2, "c")),
            (Some("delete"), None, rec(1, "d")),
            (Some("delete"), Some("tombstone"), tombstone(1)),
            (
                Some("update"),
                Some("key-delete"),
                with_headers(2, "d", json!({"__debezium.newkey": {"id": 20}}))
            ),
            (Some("update"), Some("tombstone"), tombstone(2)),
            (
                Some("update"),
                Some("key-create"),
                with_headers(20, "c", json!({"__debezium.oldkey": {"id": 2}}))
            ),
        ],
        "the keyed records"
    );
    let suffixes: Vec<Option<&str>> = ids.iter().map(|i| i.suffix.as_deref()).collect();
    assert_eq!(
        suffixes,
        [
            None,
            None,
            None,
            Some("tombstone"),
            Some("key-delete"),
            Some("tombstone"),
            Some("key-create")
        ]
    );
    // The delete and its tombstone are one event; so are the three records
    // of the key change.
    assert_eq!((ids[2].lsn, ids[2].index), (ids[3].lsn, ids[3].index));
    assert!(ids[4..]
        .iter()
        .all(|i| (i.lsn, i.index) == (ids[4].lsn, ids[4].index)));
    assert_eq!(ids.len(), 7, "nothing after the key change: {ids:?}");
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;
}

/// A schema and a table whose names hold dots (captured by schema):
/// both tokens are percent-encoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotted_schema_and_table_names_are_percent_encoded() {
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    db.connect()
        .await
        .unwrap()
        .batch_execute(
            "CREATE SCHEMA \"sales.eu\"; CREATE TABLE \"sales.eu\".\"my.table\" (id int PRIMARY KEY);",
        )
        .await
        .unwrap();
    let names = Names::new("nats_dots");
    let base = base_toml(&db, &[], &names).replace("tables = []", "schemas = [\"sales.eu\"]");
    let text = format!("{base}{}", nats_sink_toml(nats.url(), &names, "", ""));
    let run = start(&text);
    streaming(&db, &names).await;
    db.connect()
        .await
        .unwrap()
        .batch_execute("INSERT INTO \"sales.eu\".\"my.table\" VALUES (1)")
        .await
        .unwrap();
    let messages = wait_for_messages(&js, &names.stream, 1).await;
    stop(run).await;
    assert_eq!(messages.len(), 1, "{}", listing(&messages));
    assert_eq!(
        messages[0].subject,
        format!("{}.sales%2Eeu.my%2Etable", names.name)
    );
    assert_eq!(messages[0].json()["after"]["id"], json!(1));
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;
}

// ---- auth -----------------------------------------------------------------------

/// A server with user/password auth: a wrong password keeps the job from
/// starting with an error that says authorization (and never shows the
/// password); the right one streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_fails_to_start_right_password_streams() {
    let server = NatsServer::start_with(NatsServerOptions {
        auth: Some(NatsAuthConfig::UserPassword {
            user: "pgcdc".into(),
            password: "right-horse-battery".into(),
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;

    let names = Names::new("nats_auth_bad");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(
            &server.url(),
            &names,
            "user = \"pgcdc\"\npassword = \"wrong-staple-zebra\"",
            "",
        ),
    );
    let err = refusal(&text).await;
    assert!(
        err.to_ascii_lowercase().contains("authorization"),
        "the error says authorization: {err}"
    );
    assert!(
        err.contains(&format!("127.0.0.1:{}", server.port())),
        "the error names the server: {err}"
    );
    assert!(
        !err.contains("wrong-staple-zebra"),
        "the error shows the password: {err}"
    );
    drop_slot(&db, &names).await;

    let names = Names::new("nats_auth_ok");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(
            &server.url(),
            &names,
            "user = \"pgcdc\"\npassword = \"right-horse-battery\"",
            "",
        ),
    );
    let run = start(&text);
    streaming(&db, &names).await;
    db.connect()
        .await
        .unwrap()
        .batch_execute("INSERT INTO items VALUES (7, 'x')")
        .await
        .unwrap();
    let js = server.jetstream().await.unwrap();
    let messages = wait_for_messages(&js, &names.stream, 1).await;
    stop(run).await;
    assert_eq!(messages[0].json()["after"]["id"], json!(7));
    assert_eq!(messages[0].subject, format!("{}.public.items", names.name));
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;
}

/// Token auth: a wrong token is refused, the right one streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_auth() {
    let server = NatsServer::start_with(NatsServerOptions {
        auth: Some(NatsAuthConfig::Token("s3cr3t-token".into())),
        ..Default::default()
    })
    .await
    .unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let names = Names::new("nats_token_bad");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(&server.url(), &names, "token = \"not-the-token\"", ""),
    );
    let err = refusal(&text).await;
    assert!(
        err.to_ascii_lowercase().contains("authorization"),
        "the error says authorization: {err}"
    );
    assert!(
        !err.contains("not-the-token"),
        "the error shows the token: {err}"
    );
    drop_slot(&db, &names).await;

    let names = Names::new("nats_token_ok");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(&server.url(), &names, "token = \"s3cr3t-token\"", ""),
    );
    let run = start(&text);
    streaming(&db, &names).await;
    db.connect()
        .await
        .unwrap()
        .batch_execute("INSERT INTO items VALUES (8, 'y')")
        .await
        .unwrap();
    let js = server.jetstream().await.unwrap();
    let messages = wait_for_messages(&js, &names.stream, 1).await;
    stop(run).await;
    assert_eq!(messages[0].json()["after"]["id"], json!(8));
    drop_slot(&db, &names).await;
}

/// NKey auth (`nkey_seed_file`): a server that authorizes one user's
/// public key; the seed of another user is refused with an authorization
/// error (that shows no seed), a missing seed file is named, and the
/// user's own seed streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nkey_seed_file_auth() {
    let user = nkeys::KeyPair::new_user();
    let seed = user.seed().unwrap();
    let server = NatsServer::start_with(NatsServerOptions {
        auth: Some(NatsAuthConfig::Nkey {
            public_key: user.public_key(),
            seed: seed.clone(),
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let seed_key =
        |path: &std::path::Path| format!("nkey_seed_file = {:?}", path.display().to_string());

    // Another user's seed.
    let other = nkeys::KeyPair::new_user().seed().unwrap();
    let other_file = server.dir().join("other.nk");
    std::fs::write(&other_file, format!("{other}\n")).unwrap();
    let names = Names::new("nats_nkey_bad");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(&server.url(), &names, &seed_key(&other_file), ""),
    );
    let err = refusal(&text).await;
    assert!(
        err.to_ascii_lowercase().contains("authorization"),
        "the error says authorization: {err}"
    );
    assert!(
        err.contains("nkey_seed_file"),
        "the error names the setting to check: {err}"
    );
    assert!(
        err.contains(&format!("127.0.0.1:{}", server.port())),
        "the error names the server: {err}"
    );
    assert!(!err.contains(&other), "the error shows the seed: {err}");
    drop_slot(&db, &names).await;

    // No seed file.
    let names = Names::new("nats_nkey_missing");
    let missing = server.dir().join("missing.nk");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(&server.url(), &names, &seed_key(&missing), ""),
    );
    let err = refusal(&text).await;
    assert!(
        err.contains("nkey_seed_file") && err.contains(&missing.display().to_string()),
        "the error names the seed file: {err}"
    );
    drop_slot(&db, &names).await;

    // The user's seed (with a trailing newline, as `nk -gen user` writes it).
    let seed_file = server.dir().join("user.nk");
    std::fs::write(&seed_file, format!("{seed}\n")).unwrap();
    let names = Names::new("nats_nkey_ok");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(&server.url(), &names, &seed_key(&seed_file), ""),
    );
    let run = start(&text);
    streaming(&db, &names).await;
    db.connect()
        .await
        .unwrap()
        .batch_execute("INSERT INTO items VALUES (11, 'nkey')")
        .await
        .unwrap();
    let js = server.jetstream().await.unwrap();
    let messages = wait_for_messages(&js, &names.stream, 1).await;
    stop(run).await;
    assert_eq!(messages[0].json()["after"]["id"], json!(11));
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;
}

/// `.creds` auth (`credentials_file`) against a server in operator mode
/// (an operator, an account with JetStream and its user, as JWTs): the
/// creds of a user another account signed (one the server does not know)
/// are refused with an error that names `credentials_file` and shows no
/// seed, a missing creds file is named, and the user's own creds stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_file_auth() {
    let operator = NatsOperator::generate("pgcdc-test").unwrap();
    let server = NatsServer::start_with(NatsServerOptions {
        auth: Some(NatsAuthConfig::Operator(operator)),
        ..Default::default()
    })
    .await
    .unwrap();
    let creds_file = server.credentials_file().unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let creds_key =
        |path: &std::path::Path| format!("credentials_file = {:?}", path.display().to_string());

    // A user of an account the server does not know.
    let (_, other) = user_creds(&nkeys::KeyPair::new_account(), "other").unwrap();
    let other_seed = other
        .lines()
        .find(|l| l.starts_with("SU"))
        .unwrap()
        .to_owned();
    let other_file = server.dir().join("other.creds");
    std::fs::write(&other_file, &other).unwrap();
    let names = Names::new("nats_creds_bad");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(&server.url(), &names, &creds_key(&other_file), ""),
    );
    let err = refusal(&text).await;
    assert!(
        err.to_ascii_lowercase().contains("authorization"),
        "the error says authorization: {err}"
    );
    assert!(
        err.contains("credentials_file") && err.contains(&other_file.display().to_string()),
        "the error names the setting and the file to check: {err}"
    );
    assert!(
        err.contains(&format!("127.0.0.1:{}", server.port())),
        "the error names the server: {err}"
    );
    assert!(
        !err.contains(&other_seed),
        "the error shows the seed: {err}"
    );
    drop_slot(&db, &names).await;

    // No creds file.
    let names = Names::new("nats_creds_missing");
    let missing = server.dir().join("missing.creds");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(&server.url(), &names, &creds_key(&missing), ""),
    );
    let err = refusal(&text).await;
    assert!(
        err.contains("credentials_file") && err.contains(&missing.display().to_string()),
        "the error names the creds file: {err}"
    );
    drop_slot(&db, &names).await;

    // The user's creds.
    let names = Names::new("nats_creds_ok");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(&server.url(), &names, &creds_key(&creds_file), ""),
    );
    let run = start(&text);
    streaming(&db, &names).await;
    db.connect()
        .await
        .unwrap()
        .batch_execute("INSERT INTO items VALUES (21, 'creds'), (22, 'jwt')")
        .await
        .unwrap();
    let js = server.jetstream().await.unwrap();
    let messages = wait_for_messages(&js, &names.stream, 2).await;
    stop(run).await;
    let ids: Vec<Value> = messages
        .iter()
        .map(|m| m.json()["after"]["id"].clone())
        .collect();
    assert_eq!(ids, [json!(21), json!(22)]);
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;
}

/// A server with TLS that requires client certificates: `verify-full`
/// with the test CA and a client certificate streams; another CA, or no
/// client certificate, keeps the job from starting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_verify_full_and_client_certificates() {
    let server = NatsServer::start_with(NatsServerOptions {
        tls: true,
        verify_clients: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let pki = server.pki().unwrap().clone();
    let other_dir = integration_tests::TempDir::new("nats-other-ca");
    let other = NatsPki::generate(other_dir.path()).unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let tls_keys = |ca: &std::path::Path, client_cert: bool| {
        let mut keys = format!(
            "tls = \"verify-full\"\ntls_ca_file = {:?}\n",
            ca.display().to_string()
        );
        if client_cert {
            keys.push_str(&format!(
                "tls_cert_file = {:?}\ntls_key_file = {:?}\n",
                pki.client_cert_file.display().to_string(),
                pki.client_key_file.display().to_string()
            ));
        }
        keys
    };

    for (tag, ca, client_cert) in [
        ("nats_tls_other_ca", &other.ca_file, true),
        ("nats_tls_no_cert", &pki.ca_file, false),
    ] {
        let names = Names::new(tag);
        let text = format!(
            "{}{}",
            base_toml(&db, &["public.items"], &names),
            nats_sink_toml(&server.url(), &names, &tls_keys(ca, client_cert), ""),
        );
        let err = refusal(&text).await;
        assert!(
            err.contains(&format!("127.0.0.1:{}", server.port())),
            "{tag}: the error names the server: {err}"
        );
        drop_slot(&db, &names).await;
    }

    let names = Names::new("nats_tls_ok");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(&server.url(), &names, &tls_keys(&pki.ca_file, true), ""),
    );
    let run = start(&text);
    streaming(&db, &names).await;
    db.connect()
        .await
        .unwrap()
        .batch_execute("INSERT INTO items VALUES (9, 'tls')")
        .await
        .unwrap();
    let js = server.jetstream().await.unwrap();
    let messages = wait_for_messages(&js, &names.stream, 1).await;
    stop(run).await;
    assert_eq!(messages[0].json()["after"]["id"], json!(9));
    drop_slot(&db, &names).await;
}

// ---- stream checks ------------------------------------------------------------

/// A stream named as the sink's whose subjects do not cover the sink's:
/// the job refuses to start, naming the stream, its subjects and the
/// subject not covered; nothing is published into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_does_not_cover_the_subjects_is_refused() {
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let names = Names::new("nats_mismatch");
    let other = format!("other_{}.>", names.name);
    create_stream(&js, &names.stream, &[&other]).await.unwrap();
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(nats.url(), &names, "", "create = true"),
    );
    let err = refusal(&text).await;
    assert!(
        err.contains(&names.stream),
        "the error names the stream: {err}"
    );
    assert!(
        err.contains(&other),
        "the error names the stream's subjects: {err}"
    );
    assert!(
        err.contains(&format!("{}.", names.name)),
        "the error names the sink's subject that is not covered: {err}"
    );
    assert_eq!(stream_len(&js, &names.stream).await.unwrap(), Some(0));
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;
}

/// `create = false` and no such stream: refused, naming the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_stream_without_create_is_refused() {
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let names = Names::new("nats_missing");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(nats.url(), &names, "", "create = false"),
    );
    let err = refusal(&text).await;
    assert!(
        err.contains(&names.stream),
        "the error names the stream: {err}"
    );
    assert_eq!(
        stream_len(&js, &names.stream).await.unwrap(),
        None,
        "the stream was created"
    );
    drop_slot(&db, &names).await;
}

/// A duplicate window that does not exceed the checkpoint interval plus
/// the 60 s margin (30 s against the default 30 s interval): refused with
/// a message naming duplicate_window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_window_shorter_than_the_checkpoint_interval_is_refused() {
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let names = Names::new("nats_window");
    let source = db.source_toml(
        &["public.items"],
        &names.name,
        &format!("{}_pub", names.name),
    );
    // The default checkpoint interval (30 s).
    let text = format!(
        "{source}\n[snapshot]\nmode = \"latest\"\n\n[checkpoint]\njob = {:?}\n{}",
        names.name,
        nats_sink_toml(nats.url(), &names, "", "duplicate_window_secs = 30"),
    );
    let err = refusal(&text).await;
    assert!(
        err.contains("duplicate_window"),
        "the error names duplicate_window: {err}"
    );
    assert!(
        err.contains("interval"),
        "the error names the checkpoint interval: {err}"
    );
    let _ = delete_stream(&js, &names.stream).await.unwrap();
    drop_slot(&db, &names).await;
}

/// `pgcdc validate --config <text>`: its exit status, stdout and stderr.
async fn validate(dir: &std::path::Path, file: &str, text: &str) -> (bool, String, String) {
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap();
    let out =
        integration_tests::run_pgcdc(&["validate", "--config", path.to_str().unwrap()], TIMEOUT)
            .await
            .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Memory storage loses the stream (and its duplicate window) with the
/// server, so it is refused, by `run` and by `validate`, naming the fix:
/// a sink that would create its stream in memory (nothing is created), and
/// an existing stream in memory (nothing is published). With
/// `allow_memory_storage = true` the job streams into such a stream and
/// warns once at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_storage_is_refused_unless_allowed() {
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let dir = integration_tests::TempDir::new("nats-memory");
    let fix = |err: &str| {
        assert!(
            err.contains("allow_memory_storage = true in [sinks.stream]"),
            "the error names the opt-in: {err}"
        );
        assert!(
            err.contains("at-least-once"),
            "the error says what the opt-in accepts: {err}"
        );
    };
    let memory_stream = |name: &str, subjects: String| {
        let js = js.clone();
        let name = name.to_owned();
        async move {
            js.create_stream(jetstream::stream::Config {
                name,
                subjects: vec![subjects],
                storage: jetstream::stream::StorageType::Memory,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .unwrap();
        }
    };

    // The sink would create its stream in memory.
    let names = Names::new("nats_mem_create");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(nats.url(), &names, "", "storage = \"memory\""),
    );
    let err = refusal(&text).await;
    assert!(
        err.contains(&names.stream) && err.contains("memory storage"),
        "the error names the stream and its storage: {err}"
    );
    assert!(
        err.contains("storage = \"file\""),
        "the error names file storage: {err}"
    );
    fix(&err);
    assert_eq!(
        stream_len(&js, &names.stream).await.unwrap(),
        None,
        "the stream was created"
    );
    let (ok, stdout, stderr) = validate(dir.path(), "create.toml", &text).await;
    assert!(!ok, "validate passed: {stdout}");
    assert!(stderr.contains("memory storage"), "{stderr}");
    fix(&stderr);
    drop_slot(&db, &names).await;

    // A stream that exists in memory; the sink asks for nothing special.
    let names = Names::new("nats_mem_exists");
    memory_stream(&names.stream, format!("{}.>", names.name)).await;
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(nats.url(), &names, "", ""),
    );
    let err = refusal(&text).await;
    assert!(
        err.contains(&names.stream) && err.contains("uses memory storage"),
        "the error names the stream and its storage: {err}"
    );
    assert!(
        err.contains("file storage"),
        "the error names file storage: {err}"
    );
    fix(&err);
    let (ok, stdout, stderr) = validate(dir.path(), "exists.toml", &text).await;
    assert!(!ok, "validate passed: {stdout}");
    assert!(stderr.contains("uses memory storage"), "{stderr}");
    assert_eq!(stream_len(&js, &names.stream).await.unwrap(), Some(0));
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;

    // Allowed: `pgcdc run` streams into a memory stream and warns once.
    let names = Names::new("nats_mem_allowed");
    memory_stream(&names.stream, format!("{}.>", names.name)).await;
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(nats.url(), &names, "", "allow_memory_storage = true"),
    );
    let (ok, stdout, stderr) = validate(dir.path(), "allowed.toml", &text).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l.starts_with("sinks[0] (nats):")
            && l.contains("memory storage (allow_memory_storage: at least once)")),
        "validate reports the memory storage it accepts: {stdout}"
    );
    let config = dir.path().join("allowed.toml");
    let mut pgcdc = integration_tests::Pgcdc::run(&config).unwrap_or_else(|e| panic!("{e}"));
    streaming(&db, &names).await;
    db.connect()
        .await
        .unwrap()
        .batch_execute("INSERT INTO items VALUES (12, 'memory')")
        .await
        .unwrap();
    let messages = wait_for_messages(&js, &names.stream, 1).await;
    let status = pgcdc.terminate(TIMEOUT).await.unwrap();
    let log = pgcdc.stderr();
    assert!(status.success(), "pgcdc exited with {status}:\n{log}");
    assert_eq!(messages[0].json()["after"]["id"], json!(12));
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("keeps its messages in memory"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one warning about memory storage at start:\n{log}"
    );
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("at least once"),
        "{}",
        warnings[0]
    );
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;
}

/// `max_age_secs`: `validate` reports it, and the stream the job creates
/// keeps messages that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_age_is_set_on_the_created_stream() {
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let dir = integration_tests::TempDir::new("nats-max-age");
    let names = Names::new("nats_max_age");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(nats.url(), &names, "", "max_age_secs = 3600"),
    );
    let (ok, stdout, stderr) = validate(dir.path(), "max_age.toml", &text).await;
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l.starts_with("sinks[0] (nats):")
            && l.contains("will be created")
            && l.contains("max_age 3600 s")),
        "validate reports max_age: {stdout}"
    );
    let run = start(&text);
    streaming(&db, &names).await;
    db.connect()
        .await
        .unwrap()
        .batch_execute("INSERT INTO items VALUES (13, 'aged')")
        .await
        .unwrap();
    let messages = wait_for_messages(&js, &names.stream, 1).await;
    stop(run).await;
    assert_eq!(messages[0].json()["after"]["id"], json!(13));
    let mut stream = js.get_stream(&names.stream).await.unwrap();
    let info = stream.info().await.unwrap();
    assert_eq!(info.config.max_age, Duration::from_secs(3600));
    assert_eq!(
        info.config.storage,
        jetstream::stream::StorageType::File,
        "the default storage"
    );
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;
}

/// `replicas = 3`: a server that is not clustered cannot hold them, and the
/// job says so and what to do (nothing is created); nor can a cluster of
/// three hold five; on that cluster, three replicas are created and the
/// rows arrive. `pgcdc validate` tells the same before anything runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_need_a_cluster() {
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let dir = integration_tests::TempDir::new("nats-replicas");
    // `validate` refuses with the message `run` refuses with.
    let validate_refuses = |text: String, file: &'static str, cause: &'static str| {
        let dir = dir.path().to_owned();
        async move {
            let (ok, stdout, stderr) = validate(&dir, file, &text).await;
            assert!(!ok, "validate passed: {stdout}");
            assert!(stderr.contains(cause), "validate names the cause: {stderr}");
            assert!(
                stderr.contains("[sinks.stream]"),
                "validate names the fix: {stderr}"
            );
        }
    };

    let single = TestNats::new().await.unwrap();
    let js = single.jetstream().await.unwrap();
    let names = Names::new("nats_r3_single");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(single.url(), &names, "", "replicas = 3"),
    );
    validate_refuses(text.clone(), "single.toml", "not clustered").await;
    let err = refusal(&text).await;
    assert!(
        err.contains(&names.stream) && err.contains("not clustered"),
        "the error names the stream and the cause: {err}"
    );
    assert!(
        err.contains("set replicas = 1 in [sinks.stream]"),
        "the error names the fix: {err}"
    );
    assert_eq!(stream_len(&js, &names.stream).await.unwrap(), None);
    drop_slot(&db, &names).await;

    let cluster = NatsCluster::start().await.unwrap();
    // More replicas than the cluster has servers.
    let names = Names::new("nats_r5_cluster");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml_servers(&cluster.urls(), &names, "", "replicas = 5"),
    );
    validate_refuses(
        text.clone(),
        "r5.toml",
        "replicas = 5 needs 5 JetStream servers",
    )
    .await;
    let err = refusal(&text).await;
    assert!(
        err.contains(&names.stream) && err.contains("replicas = 5 needs 5 JetStream servers"),
        "the error names the stream and the cause: {err}"
    );
    assert!(
        err.contains("lower replicas in [sinks.stream]"),
        "the error names the fix: {err}"
    );
    drop_slot(&db, &names).await;

    let names = Names::new("nats_r3_cluster");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml_servers(&cluster.urls(), &names, "", "replicas = 3"),
    );
    let (ok, stdout, stderr) = validate(dir.path(), "r3.toml", &text).await;
    assert!(
        ok,
        "validate refused three replicas on three servers: {stderr}"
    );
    assert!(
        stdout.contains("will be created") && stdout.contains("3 replica(s)"),
        "validate says what run will do: {stdout}"
    );
    let run = start(&text);
    streaming(&db, &names).await;
    db.connect()
        .await
        .unwrap()
        .batch_execute("INSERT INTO items SELECT g, 'r3' FROM generate_series(1, 5) g")
        .await
        .unwrap();
    let js = cluster.jetstream().await.unwrap();
    let messages = wait_for_messages(&js, &names.stream, 5).await;
    stop(run).await;
    let ids: Vec<Value> = messages
        .iter()
        .map(|m| m.json()["after"]["id"].clone())
        .collect();
    assert_eq!(ids, (1..=5).map(|i| json!(i)).collect::<Vec<_>>());
    check_ids(&messages, &names.name);
    let mut stream = js.get_stream(&names.stream).await.unwrap();
    let info = stream.info().await.unwrap();
    assert_eq!(info.config.num_replicas, 3);
    let placement = info
        .cluster
        .clone()
        .expect("a clustered stream has cluster info");
    assert!(placement.leader.is_some(), "no leader: {placement:?}");
    assert_eq!(
        placement.replicas.len(),
        2,
        "two replicas besides the leader: {placement:?}"
    );
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;
}

/// `pgcdc validate` connects to the NATS server and fails on the stream
/// checks `pgcdc run` would refuse (subjects not covered, a short
/// duplicate window), and says what it would do with a good stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_checks_the_stream() {
    let nats = TestNats::new().await.unwrap();
    let js = nats.jetstream().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    create_tables(&db).await;
    let dir = integration_tests::TempDir::new("nats-validate");
    let validate = |text: String, file: &str| {
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        async move {
            let out = integration_tests::run_pgcdc(
                &["validate", "--config", path.to_str().unwrap()],
                TIMEOUT,
            )
            .await
            .unwrap();
            (
                out.status,
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };

    // Subjects not covered.
    let names = Names::new("nats_val_mismatch");
    let other = format!("other_{}.>", names.name);
    create_stream(&js, &names.stream, &[&other]).await.unwrap();
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(nats.url(), &names, "", ""),
    );
    let (status, _, stderr) = validate(text, "mismatch.toml").await;
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains(&names.stream) && stderr.contains(&other),
        "validate names the stream and its subjects: {stderr}"
    );
    assert!(delete_stream(&js, &names.stream).await.unwrap());

    // A duplicate window shorter than a replay (default 30 s interval).
    let names = Names::new("nats_val_window");
    let source = db.source_toml(
        &["public.items"],
        &names.name,
        &format!("{}_pub", names.name),
    );
    let text = format!(
        "{source}\n[checkpoint]\njob = {:?}\n{}",
        names.name,
        nats_sink_toml(nats.url(), &names, "", "duplicate_window_secs = 30"),
    );
    let (status, _, stderr) = validate(text, "window.toml").await;
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("duplicate_window"), "{stderr}");
    assert_eq!(
        stream_len(&js, &names.stream).await.unwrap(),
        None,
        "validate created the stream"
    );

    // A good one: validate passes and says what it would do.
    let names = Names::new("nats_val_ok");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.items"], &names),
        nats_sink_toml(nats.url(), &names, "", ""),
    );
    let (status, stdout, stderr) = validate(text, "ok.toml").await;
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("sinks[0] (nats):") && l.contains(&names.stream)),
        "validate reports the sink's stream: {stdout}"
    );
    assert_eq!(
        stream_len(&js, &names.stream).await.unwrap(),
        None,
        "validate created the stream"
    );
}

// ---- server restarts ------------------------------------------------------------

/// Rows the writer inserted: (id, k), in commit order.
type Inserted = Vec<(i64, i32)>;

/// The server is killed and started again (same port, same store) twice
/// while a writer inserts rows; afterwards every row is in the stream
/// exactly once (JetStream's dedupe dropped the replays: no reader-side
/// dedupe needed), and the stream is in commit order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_restarts_mid_stream_lose_and_duplicate_nothing() {
    let mut server = NatsServer::start().await.unwrap();
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE ticks (id bigint PRIMARY KEY, k int NOT NULL, v int)")
        .await
        .unwrap();
    let names = Names::new("nats_restart");
    let text = format!(
        "{}{}",
        base_toml(&db, &["public.ticks"], &names),
        nats_sink_toml(
            &server.url(),
            &names,
            "ack_timeout_secs = 2\nmax_in_flight = 64",
            "",
        ),
    );
    let run = start(&text);
    streaming(&db, &names).await;

    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let client = db.connect().await.unwrap();
        let writing = writing.clone();
        tokio::spawn(async move {
            let mut inserted: Inserted = Vec::new();
            let mut next = 1i64;
            while writing.load(Ordering::Relaxed) {
                // 1-3 rows per transaction over 5 keys.
                let n = 1 + next % 3;
                let ids: Vec<i64> = (next..next + n).collect();
                next += n;
                client
                    .execute(
                        "INSERT INTO ticks SELECT g, (g % 5)::int, 0 FROM unnest($1::bigint[]) g",
                        &[&ids],
                    )
                    .await
                    .unwrap();
                inserted.extend(ids.iter().map(|&id| (id, (id % 5) as i32)));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            inserted
        })
    };

    let mut at_kill = Vec::new();
    // Down for less, then for more than the ack timeout (2 s).
    for down in [Duration::from_millis(1500), Duration::from_millis(3500)] {
        // Progress since the last restart, then the server goes away for a
        // while (the sink's publishes fail meanwhile) and comes back.
        let js = server.jetstream().await.unwrap();
        let before = stream_len(&js, &names.stream).await.unwrap().unwrap_or(0);
        let stored = eventually("messages after the (re)start", TIMEOUT, || async {
            assert!(!run.task.is_finished(), "the job ended");
            let n = stream_len(&js, &names.stream).await.ok()??;
            (n >= before + 200).then_some(n)
        })
        .await;
        at_kill.push(stored);
        drop(js);
        server.kill();
        tokio::time::sleep(down).await;
        server.start_again().await.unwrap();
    }
    // Progress after the last restart, then the writer stops.
    let js = server.jetstream().await.unwrap();
    let last = *at_kill.last().unwrap();
    eventually("messages after the last restart", TIMEOUT, || async {
        assert!(!run.task.is_finished(), "the job ended");
        let n = stream_len(&js, &names.stream).await.ok()??;
        (n >= last + 200).then_some(())
    })
    .await;
    writing.store(false, Ordering::Relaxed);
    let inserted = writer.await.unwrap();
    let messages = wait_for_messages(&js, &names.stream, inserted.len() as u64).await;
    let progress = stop(run).await;
    // Anything published late would show now.
    let messages = if stream_len(&js, &names.stream).await.unwrap() == Some(messages.len() as u64) {
        messages
    } else {
        read_stream(&js, &names.stream).await.unwrap()
    };

    let mut count: BTreeMap<i64, usize> = BTreeMap::new();
    let mut order = Vec::new();
    for m in &messages {
        let v = m.json();
        let id = v["after"]["id"]
            .as_i64()
            .unwrap_or_else(|| panic!("message {} is no insert: {v}", m.sequence));
        *count.entry(id).or_default() += 1;
        order.push((id, v["after"]["k"].as_i64().unwrap()));
    }
    let twice: Vec<_> = count.iter().filter(|(_, &n)| n > 1).collect();
    assert!(
        twice.is_empty(),
        "rows stored more than once (id, times): {twice:?}; the first 20 messages:\n{}",
        listing(&messages[..messages.len().min(20)])
    );
    let missing: Vec<i64> = inserted
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| !count.contains_key(id))
        .collect();
    assert!(
        missing.is_empty(),
        "rows missing from the stream: {missing:?}"
    );
    assert_eq!(messages.len(), inserted.len());
    check_ids(&messages, &names.name);
    // Commit order: one writer, so ids go up, for every key and overall.
    let mut last_per_key: HashMap<i64, i64> = HashMap::new();
    for (id, k) in &order {
        if let Some(prev) = last_per_key.insert(*k, *id) {
            assert!(prev < *id, "key {k}: row {id} after row {prev}");
        }
    }
    assert!(
        order.windows(2).all(|w| w[0].0 < w[1].0),
        "the stream is in commit order"
    );
    eprintln!(
        "nats restarts: {} rows, {} messages, server killed at {at_kill:?} messages, \
         {} starts; job {progress:?}",
        inserted.len(),
        messages.len(),
        server.starts()
    );
    assert!(delete_stream(&js, &names.stream).await.unwrap());
    drop_slot(&db, &names).await;
}
