//! The `pgcdc` command line end to end: the real binary (`pgcdc run --config`)
//! as a child process against real servers.
//!
//! Needs the binary built next to the tests (`cargo test --workspace` does
//! that; otherwise `cargo build -p pgcdc --bin pgcdc`).

// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cdc_core::Lsn;
use cdc_runtime::sinks::FileSink;
use integration_tests::{
    run_pgcdc, ClusterOptions, ConnectionInfo, LocalCluster, Pgcdc, TestPostgres, SUPERUSER,
};
use serde_json::Value as Json;
use tokio_postgres::Client;

/// How long any awaited condition may take before the test fails.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The Debezium placeholder for an unchanged TOAST column.
const UNAVAILABLE: &str = "__debezium_unavailable_value";

/// A scratch directory, removed on drop.
struct Workdir(PathBuf);

impl Workdir {
    fn new(name: &str) -> Workdir {
        let dir = std::env::temp_dir().join(format!("pgcdc-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Workdir(dir)
    }

    fn out(&self) -> PathBuf {
        self.0.join("out.jsonl")
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes a `pgcdc.toml` streaming `tables` of `info`'s database into the
/// file sink at `dir.out()` in Debezium format. `password` overrides the
/// server's; `extra_source` is appended to `[source]`.
fn write_config(
    dir: &Workdir,
    info: &ConnectionInfo,
    password: Option<&str>,
    tables: &[&str],
    slot: &str,
    extra_source: &str,
) -> PathBuf {
    let tables = tables
        .iter()
        .map(|t| format!("{t:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let password = password
        .or(info.password())
        .map(|p| format!("password = {p:?}"))
        .unwrap_or_default();
    let text = format!(
        r#"
[source]
host = {host:?}
port = {port}
database = {dbname:?}
user = {user:?}
{password}
tables = [{tables}]
slot = {slot:?}
publication = {publication:?}
{extra_source}

[pipeline]
batch_size = 200
status_interval_secs = 1

[debezium]
"decimal.handling.mode" = "string"
# The replays apply truncates, which Debezium skips by default.
"skipped.operations" = "none"

[[sinks]]
type = "file"
path = {out:?}
max_file_bytes = 262144
format = "debezium"
"#,
        host = info.host(),
        port = info.port(),
        dbname = info.dbname(),
        user = info.user(),
        publication = format!("{slot}_pub"),
        out = dir.out(),
    );
    let path = dir.0.join("pgcdc.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Every complete line the file sink wrote so far (a line still being
/// written, without its newline, is left out).
fn read_lines(base: &Path) -> Vec<Json> {
    let mut out = Vec::new();
    for file in FileSink::files(base).unwrap_or_default() {
        let text = std::fs::read_to_string(&file).unwrap();
        let complete = match text.rfind('\n') {
            Some(end) => &text[..end],
            None => "",
        };
        for line in complete.lines() {
            out.push(
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("{}: {e}: {line}", file.display())),
            );
        }
    }
    out
}

/// Polls `cond` until it holds, failing the test (with pgcdc's stderr) after
/// [`TIMEOUT`] or if pgcdc exits.
async fn await_cond<F, Fut>(pgcdc: &mut Pgcdc, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if cond().await {
            return;
        }
        if let Some(status) = pgcdc.try_status().unwrap() {
            panic!(
                "pgcdc exited ({status}) while waiting for {what}; stderr:\n{}",
                pgcdc.stderr()
            );
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}; pgcdc stderr:\n{}",
            pgcdc.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn slot_active(client: &Client, slot: &str) -> bool {
    client
        .query_opt(
            // A slot being created is active already; changes stream only
            // after its consistent point (confirmed_flush_lsn set).
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active \
             AND confirmed_flush_lsn IS NOT NULL",
            &[&slot],
        )
        .await
        .unwrap()
        .is_some()
}

/// The pid of the walsender streaming `slot`, if any.
async fn walsender_pid(client: &Client, slot: &str) -> Option<i32> {
    client
        .query_one(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0)
}

async fn slot_confirmed(client: &Client, slot: &str) -> Lsn {
    let row = client
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
    row.get::<_, String>(0).parse().unwrap()
}

async fn current_lsn(client: &Client) -> Lsn {
    client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap()
        .get::<_, String>(0)
        .parse()
        .unwrap()
}

/// `source.lsn`: where the event is in the WAL (Debezium's records carry
/// no commit LSN; `source.sequence` starts with the previous commit's).
fn event_lsn(line: &Json) -> Lsn {
    Lsn::from_u64(line["source"]["lsn"].as_u64().unwrap())
}

/// Whether a message with `prefix` is among `lines`.
fn has_message(lines: &[Json], prefix: &str) -> bool {
    lines
        .iter()
        .any(|l| l["op"] == "m" && l["message"]["prefix"] == prefix)
}

/// Sends SIGTERM, expects exit 0 and returns stderr.
async fn stop_cleanly(pgcdc: &mut Pgcdc) -> String {
    let status = pgcdc.terminate(TIMEOUT).await.unwrap();
    let stderr = pgcdc.stderr();
    assert!(
        status.success(),
        "pgcdc exited with {status}; stderr:\n{stderr}"
    );
    stderr
}

// ---- every DML and value type -----------------------------------------------

/// Columns of both captured tables: one of every type the decoder maps.
const COLUMNS: &str = r#"
    id int8 PRIMARY KEY,
    i2 int2, i4 int4, i8 int8, o oid,
    num numeric, num_s numeric(12,3),
    f4 float4, f8 float8,
    txt text, vc varchar(20), bp char(5), ch "char",
    bin bytea, flag bool,
    d date, t time, t3 time(3), ttz timetz,
    ts timestamp, ts3 timestamp(3), tstz timestamptz, iv interval,
    u uuid, j json, jb jsonb,
    ip inet, mac macaddr, lsn pg_lsn,
    m8 macaddr8, net cidr, mood mood, nm name,
    ai int4[], atxt text[], a2 int4[], anum numeric[],
    big text
"#;

/// The Debezium JSON of each column (`decimal.handling.mode=string`, the
/// other modes Debezium's defaults), computed by the server from the table:
/// an independent derivation to compare the file sink with. Infinite dates
/// and timestamps are the JDBC driver's sentinels, `interval` is Debezium's
/// `MicroDuration` arithmetic in doubles.
const DEBEZIUM_ROW: &str = r#"json_build_object(
    'id', id, 'i2', i2, 'i4', i4, 'i8', i8, 'o', o::int8,
    'num', CASE WHEN num = 'NaN' THEN 'NAN' ELSE num::text END, 'num_s', num_s::text,
    'f4', f4, 'f8', f8,
    'txt', txt, 'vc', vc, 'bp', bp, 'ch', ch::text,
    'bin', translate(encode(bin, 'base64'), E'\n', ''), 'flag', flag,
    'd', CASE WHEN isfinite(d) THEN d - date '1970-01-01'
              WHEN d > '2000-01-01' THEN -2147472692 WHEN d < '2000-01-01' THEN -2147472691 END,
    't', (extract(epoch FROM t) * 1000000)::int8,
    't3', floor(extract(epoch FROM t3) * 1000)::int8,
    'ttz', ((ttz AT TIME ZONE 'UTC')::time)::text || 'Z',
    'ts', CASE WHEN isfinite(ts) THEN (extract(epoch FROM ts) * 1000000)::int8
               WHEN ts > 'epoch' THEN 9223372036825200000
               WHEN ts < 'epoch' THEN -9223372036832400000 END,
    'ts3', CASE WHEN isfinite(ts3) THEN floor(extract(epoch FROM ts3) * 1000)::int8
                WHEN ts3 > 'epoch' THEN 9223372036825200
                WHEN ts3 < 'epoch' THEN -9223372036832400 END,
    'tstz', CASE WHEN isfinite(tstz)
                 THEN to_json(to_char(tstz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                 ELSE to_json(tstz::text) END,
    'iv', trunc((((((extract(year FROM iv) * 12 + extract(month FROM iv))::float8
                   * 30.4375::float8 + extract(day FROM iv)::float8) * 24
                  + extract(hour FROM iv)::float8) * 60 + extract(minute FROM iv)::float8) * 60
                + extract(second FROM iv)::float8) * 1000000::float8)::int8,
    'u', u, 'j', j::text, 'jb', jb::text,
    'ip', ip::text, 'mac', mac::text, 'lsn', (lsn - '0/0'::pg_lsn)::int8,
    'm8', m8::text, 'net', net::text, 'mood', mood::text, 'nm', nm,
    'ai', ai, 'atxt', atxt, 'a2', a2, 'anum', replace(anum::text, 'NaN', 'NAN')::text[],
    'big', big)"#;

/// Row values (after the id) for the inserts.
const ROW_TYPICAL: &str = r#"42, 100000, 9000000000, 12345,
    '12345678901234567890.123456789', 3.5,
    3.14, 2.718281828459045,
    'hello', 'varchar', 'ab', 'x',
    '\x00ff10', true,
    '2024-02-29', '04:05:06.789012', '04:05:06.789', '04:05:06.5+02',
    '2024-01-15 04:05:06.123456', '2024-01-15 04:05:06.123', '2024-01-15 04:05:06.5+03',
    '1 year 2 mons 3 days 04:05:06.7',
    'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"b": [1, 2], "a": null}', '{"b": [1, 2], "a": null}',
    '192.168.0.1/24', '08:00:2b:01:02:03', '16/B374D848',
    '08:00:2b:01:02:03:04:05', '192.168.100.128/25', 'happy', 'a name',
    '{1,NULL,3}', '{"with space","q\"uote",NULL}', '{{1,2},{3,4}}', '{1.50,-2,NaN}',
    'small'"#;

const ROW_EXTREME: &str = r#"-32768, -2147483648, -9223372036854775808, 4294967295,
    'NaN', -0.001,
    'NaN', '-Infinity',
    E'\u00e9\u4e2d "q" \\ \n\t end', '', 'abcde', 'Z',
    '', false,
    'infinity', '00:00:00', '23:59:59.999', '00:00:00-11:30',
    '-infinity', '1969-12-31 23:59:59.999', '1900-01-01 00:00:00+00',
    '-1 year -2 days -00:00:00.000001',
    '00000000-0000-0000-0000-000000000000', '[]', '{}',
    '::1', '00:00:00:00:00:00', '0/0',
    'ff:ff:ff:ff:ff:ff:ff:ff', '2001:db8::/32', 'ok', '',
    '{}', '{}', '{{NULL}}', '{}',
    ''"#;

/// Every column NULL except the key.
const ROW_NULLS: &str = "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL";

/// The changes applied to each captured table (`{t}`), one transaction each.
const DML: &[&str] = &[
    // Inserts: typical and extreme values, all NULLs, a TOASTed `big`.
    "INSERT INTO {t} VALUES (1, {typical}), (2, {extreme}), (3, {nulls});
     INSERT INTO {t} (id, txt, big)
       SELECT 4, 'toast', string_agg(md5(i::text), '') FROM generate_series(1, 400) i",
    // An update that leaves the TOASTed column out (unchanged TOAST).
    "UPDATE {t} SET i4 = i4 + 1, txt = 'changed' WHERE id = 4",
    // A primary key change.
    "UPDATE {t} SET id = 10 WHERE id = 1",
    "DELETE FROM {t} WHERE id = 2",
    // NULLs become values.
    "UPDATE {t} SET f8 = 'Infinity', f4 = '-Infinity', d = '2000-01-01', tstz = 'infinity',
            ts3 = 'infinity', ai = '{7}', flag = false WHERE id = 3",
    // Several changes of one row in one transaction.
    "BEGIN;
     INSERT INTO {t} (id, txt) VALUES (5, 'five');
     UPDATE {t} SET txt = 'five again', num = 5 WHERE id = 5;
     COMMIT",
];

fn dml(table: &str, template: &str) -> String {
    template
        .replace("{typical}", ROW_TYPICAL)
        .replace("{extreme}", ROW_EXTREME)
        .replace("{nulls}", ROW_NULLS)
        .replace("{t}", table)
}

/// The table's rows in the Debezium mapping, by id.
async fn table_state(client: &Client, table: &str) -> BTreeMap<i64, Json> {
    client
        .query(
            &format!("SELECT id, {DEBEZIUM_ROW}::text FROM {table}"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get::<_, i64>(0),
                serde_json::from_str::<Json>(r.get(1)).unwrap(),
            )
        })
        .collect()
}

/// What the Debezium lines of one table say about it: the replayed rows
/// (unchanged TOAST placeholders filled from the previous image) and the
/// number of events per op.
#[derive(Debug, Default)]
struct Replay {
    rows: BTreeMap<i64, Json>,
    ops: BTreeMap<String, usize>,
    unchanged_toast: usize,
}

fn key(row: &Json, column: &str) -> i64 {
    row[column]
        .as_i64()
        .unwrap_or_else(|| panic!("no {column} in {row}"))
}

/// Replays the lines of `table`. With `full` (REPLICA IDENTITY FULL) every
/// update and delete must carry the complete old row; otherwise deletes carry
/// only the key and updates that keep the key no `before` at all.
fn replay(lines: &[Json], table: &str, id: &str, full: bool) -> Replay {
    let mut r = Replay::default();
    for l in lines.iter().filter(|l| l["source"]["table"] == table) {
        let op = l["op"].as_str().unwrap();
        *r.ops.entry(op.to_owned()).or_default() += 1;
        let before = &l["before"];
        if matches!(op, "u" | "d") {
            if full {
                let old = &r.rows[&key(before, id)];
                for (col, v) in before.as_object().unwrap() {
                    assert!(
                        v == UNAVAILABLE || v == &old[col],
                        "{table}: FULL before.{col} = {v}, replayed {}",
                        old[col]
                    );
                }
            } else if !before.is_null() {
                // A delete, or an update that changed the key: the old key only.
                for (col, v) in before.as_object().unwrap() {
                    assert!(
                        col == id || v.is_null(),
                        "{table}: key-only before: {before}"
                    );
                }
            }
        }
        match op {
            "c" | "u" => {
                let mut after = l["after"].clone();
                let k = key(&after, id);
                let old = if before.is_null() {
                    assert!(op == "c" || !full, "{table}: an update without before: {l}");
                    r.rows.get(&k).cloned()
                } else {
                    r.rows.remove(&key(before, id))
                };
                for (col, v) in after.as_object_mut().unwrap() {
                    if v == UNAVAILABLE {
                        r.unchanged_toast += 1;
                        *v = old.as_ref().unwrap()[col].clone();
                    }
                }
                r.rows.insert(k, after);
            }
            "d" => {
                r.rows.remove(&key(before, id));
            }
            "t" => {
                assert!(before.is_null() && l["after"].is_null(), "{l}");
                r.rows.clear();
            }
            other => panic!("{table}: unexpected op {other}"),
        }
    }
    r
}

/// Every DML on REPLICA IDENTITY DEFAULT and FULL tables with every value type,
/// a truncate and logical messages go through `pgcdc run` into the file sink in
/// Debezium format; replaying the lines gives the tables' contents as the
/// server itself renders them. SIGTERM stops pgcdc with exit 0 and the slot
/// confirmed past the last commit.
#[tokio::test]
async fn run_streams_every_change_and_value_type_to_the_file_sink() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(&format!(
            "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
             CREATE TABLE t_default ({COLUMNS});
             CREATE TABLE t_full ({COLUMNS});
             ALTER TABLE t_full REPLICA IDENTITY FULL;
             CREATE TABLE t_trunc (k int PRIMARY KEY, v text);"
        ))
        .await
        .unwrap();
    let dir = Workdir::new("e2e");
    let slot = "cli_e2e";
    // Streaming only: an initial snapshot racing the DML below could also
    // read its rows as `r` events (the snapshot has tests of its own).
    let config = write_config(
        &dir,
        db.connection_info(),
        None,
        &["t_default", "public.t_full", "t_trunc"],
        slot,
        "[snapshot]\nmode = \"latest\"",
    );
    let mut pgcdc = Pgcdc::run(&config).unwrap_or_else(|e| panic!("{e}"));
    // The slot is created at startup: changes before it would not be captured.
    await_cond(&mut pgcdc, "the slot to be streaming", || {
        slot_active(&client, slot)
    })
    .await;

    for table in ["t_default", "t_full"] {
        for template in DML {
            client.batch_execute(&dml(table, template)).await.unwrap();
        }
    }
    client
        .batch_execute(
            "INSERT INTO t_trunc VALUES (1, 'a'), (2, 'b');
             BEGIN;
             SELECT pg_logical_emit_message(true, 'pgcdc-txn', 'in a transaction');
             TRUNCATE t_trunc;
             INSERT INTO t_trunc VALUES (3, 'c');
             COMMIT;
             SELECT pg_logical_emit_message(false, 'pgcdc-now', E'\\\\x00ff'::bytea);",
        )
        .await
        .unwrap();
    let before_last = current_lsn(&client).await;
    client
        .batch_execute(
            "BEGIN;
             INSERT INTO t_trunc VALUES (4, 'last');
             SELECT pg_logical_emit_message(true, 'pgcdc-end', 'done');
             COMMIT;",
        )
        .await
        .unwrap();
    let base = dir.out();
    await_cond(&mut pgcdc, "the last transaction in the file", || {
        let done = has_message(&read_lines(&base), "pgcdc-end");
        async move { done }
    })
    .await;
    stop_cleanly(&mut pgcdc).await;

    let lines = read_lines(&base);
    // The envelope.
    for l in &lines {
        let source = &l["source"];
        assert_eq!(source["connector"], "postgresql", "{l}");
        assert_eq!(source["db"], db.name(), "{l}");
        if l["op"] != "m" {
            assert_eq!(source["schema"], "public", "{l}");
            assert!(source["txId"].as_u64().is_some(), "{l}");
        }
    }
    for (table, full) in [("t_default", false), ("t_full", true)] {
        let r = replay(&lines, table, "id", full);
        let ops: Vec<(&str, usize)> = r.ops.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        // The update of the key (`SET id = 10`) is, as in Debezium, a
        // delete of the old key and a create of the new one.
        assert_eq!(ops, [("c", 6), ("d", 2), ("u", 3)], "{table}");
        if full {
            // The old row carries the TOASTed value, which fills the new one.
            assert_eq!(r.unchanged_toast, 0, "{table}: a placeholder under FULL");
        } else {
            assert!(
                r.unchanged_toast >= 1,
                "{table}: no unchanged TOAST value seen"
            );
        }
        let expected = table_state(&client, table).await;
        assert_eq!(r.rows.len(), expected.len(), "{table}");
        for (id, row) in &expected {
            assert_eq!(
                r.rows.get(id),
                Some(row),
                "{table} row {id}: file sink (left) vs table (right)"
            );
        }
    }
    let r = replay(&lines, "t_trunc", "k", false);
    assert_eq!(r.ops.get("t"), Some(&1));
    let trunc: BTreeSet<i64> = r.rows.keys().copied().collect();
    let table: BTreeSet<i64> = client
        .query("SELECT k::int8 FROM t_trunc", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(trunc, table);
    assert_eq!(table, BTreeSet::from([3, 4]));

    // Logical messages, content base64.
    let messages: Vec<(&str, &str)> = lines
        .iter()
        .filter(|l| l["op"] == "m")
        .map(|l| {
            (
                l["message"]["prefix"].as_str().unwrap(),
                l["message"]["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        messages,
        [
            ("pgcdc-txn", "aW4gYSB0cmFuc2FjdGlvbg=="),
            ("pgcdc-now", "AP8="),
            ("pgcdc-end", "ZG9uZQ==")
        ]
    );

    // The slot is confirmed past the last event (and the last commit
    // before it): nothing will be replayed.
    let confirmed = slot_confirmed(&client, slot).await;
    let last = lines.iter().map(event_lsn).max().unwrap();
    assert!(confirmed > last, "{confirmed} <= {last}");
    assert!(confirmed > before_last, "{confirmed} <= {before_last}");
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
}

// ---- clear errors -------------------------------------------------------------

/// Runs `pgcdc run --config <config>` expecting a quick failure with exit
/// status `code`; returns stderr.
async fn run_expecting_failure(config: &Path, code: i32) -> String {
    let out = run_pgcdc(&["run", "--config", config.to_str().unwrap()], TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "pgcdc should fail; stderr:\n{stderr}"
    );
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    stderr
}

/// The superuser password of the dedicated cluster below: it must never be printed.
const SERVER_PASSWORD: &str = "Sup3r-s3cret-pw";
/// A wrong password: it must never be printed either.
const WRONG_PASSWORD: &str = "wr0ng-guess-pw";

/// One dedicated cluster serves three definite errors: it has
/// `wal_level=replica`, SCRAM authentication with a superuser password, and
/// no TLS. Each `pgcdc run` exits with a message saying what to change (3
/// when it cannot connect, 1 when the server is not ready), and never prints
/// a password.
#[tokio::test]
async fn run_fails_clearly_on_bad_password_wal_level_and_missing_tls() {
    let cluster = LocalCluster::create(
        ClusterOptions::new()
            .setting("wal_level", "replica")
            .superuser_password(SERVER_PASSWORD)
            .hba_host_line("host all all 127.0.0.1/32 scram-sha-256")
            .hba_host_line("host replication all 127.0.0.1/32 scram-sha-256"),
    )
    .await
    .unwrap();
    let db = cluster.create_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY)")
        .await
        .unwrap();
    assert_eq!(db.user(), SUPERUSER);
    let dir = Workdir::new("errors");
    let no_password = |stderr: &str| {
        for pw in [SERVER_PASSWORD, WRONG_PASSWORD] {
            assert!(!stderr.contains(pw), "stderr shows a password:\n{stderr}");
        }
    };

    // Wrong password: the server's SQLSTATE and what failed.
    let config = write_config(
        &dir,
        db.connection_info(),
        Some(WRONG_PASSWORD),
        &["t"],
        "s",
        "sslmode = \"disable\"",
    );
    let stderr = run_expecting_failure(&config, 3).await;
    no_password(&stderr);
    assert!(stderr.contains("cannot connect"), "{stderr}");
    assert!(
        stderr.contains("password authentication failed"),
        "{stderr}"
    );
    assert!(stderr.contains("28P01"), "{stderr}");

    // Right password, but wal_level=replica: says which setting to change.
    let config = write_config(
        &dir,
        db.connection_info(),
        None,
        &["t"],
        "s",
        "sslmode = \"disable\"",
    );
    let stderr = run_expecting_failure(&config, 1).await;
    no_password(&stderr);
    assert!(
        stderr.contains("wal_level is 'replica'; set wal_level=logical and restart the server"),
        "{stderr}"
    );

    // sslmode=require against a server without TLS.
    let config = write_config(
        &dir,
        db.connection_info(),
        None,
        &["t"],
        "s",
        "sslmode = \"require\"",
    );
    let stderr = run_expecting_failure(&config, 3).await;
    no_password(&stderr);
    assert!(stderr.contains("set sslmode=disable or prefer"), "{stderr}");

    // None of the attempts created anything on the server.
    let n: i64 = client
        .query_one("SELECT count(*) FROM pg_publication", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}

#[tokio::test]
async fn run_fails_clearly_on_a_missing_table() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE present (id int PRIMARY KEY)")
        .await
        .unwrap();
    let dir = Workdir::new("missing");
    let config = write_config(
        &dir,
        db.connection_info(),
        None,
        &["present", "app.absent"],
        "cli_missing",
        "",
    );
    let stderr = run_expecting_failure(&config, 1).await;
    assert!(
        stderr.contains("table app.absent does not exist (check source.tables)"),
        "{stderr}"
    );
    if let Some(pw) = db.password() {
        assert!(!stderr.contains(pw), "{stderr}");
    }
    let slots: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'cli_missing'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0);
}

// ---- server restart -------------------------------------------------------------

/// Commits one row per transaction until told to stop, reconnecting whenever
/// the server goes away; records the ids whose COMMIT succeeded.
async fn writer(
    info: ConnectionInfo,
    committed: Arc<Mutex<Vec<i64>>>,
    stop: Arc<tokio::sync::Notify>,
) {
    let mut next = 1i64;
    let stopped = stop.notified();
    tokio::pin!(stopped);
    loop {
        let client = tokio::select! {
            c = info.connect() => c,
            _ = &mut stopped => return,
        };
        let Ok(client) = client else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        loop {
            // An error leaves the outcome of that commit unknown: the id is
            // not recorded (it may still show up in the sink) and not reused.
            let id = next;
            next += 1;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&id];
            let insert = client.execute("INSERT INTO w VALUES ($1)", &params);
            tokio::select! {
                r = insert => match r {
                    Ok(_) => committed.lock().unwrap().push(id),
                    Err(_) => break,
                },
                _ = &mut stopped => return,
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

async fn wait_for_commits(pgcdc: &mut Pgcdc, committed: &Mutex<Vec<i64>>, n: usize) {
    await_cond(pgcdc, "the writer to commit", || {
        let done = committed.lock().unwrap().len() >= n;
        async move { done }
    })
    .await;
}

/// A fast restart and a crash (immediate shutdown) of the server while a
/// writer commits: pgcdc reconnects by itself, and every committed
/// transaction ends up in the file sink (at least once).
#[tokio::test]
async fn run_survives_server_restarts_without_losing_commits() {
    let cluster = LocalCluster::create(ClusterOptions::new()).await.unwrap();
    let db = cluster.create_database().await.unwrap();
    let client = db.connect().await.unwrap();
    // `s` holds rows before pgcdc starts: its initial snapshot runs, in
    // small chunks, through the server restarts.
    client
        .batch_execute(
            "CREATE TABLE w (id int8 PRIMARY KEY);
             CREATE TABLE s (id int8 PRIMARY KEY);
             INSERT INTO s SELECT g FROM generate_series(1, 50000) g;",
        )
        .await
        .unwrap();
    drop(client);
    let dir = Workdir::new("restart");
    let slot = "cli_restart";
    let config = write_config(
        &dir,
        db.connection_info(),
        None,
        &["w", "s"],
        slot,
        "[snapshot]\nchunk_size = 500",
    );
    let mut pgcdc = Pgcdc::run(&config).unwrap_or_else(|e| panic!("{e}"));
    let admin = db.connect().await.unwrap();
    await_cond(&mut pgcdc, "the slot to be streaming", || {
        slot_active(&admin, slot)
    })
    .await;
    let first_walsender = walsender_pid(&admin, slot).await;
    drop(admin);

    let committed = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(tokio::sync::Notify::new());
    let writing = tokio::spawn(writer(
        db.connection_info().clone(),
        committed.clone(),
        stop.clone(),
    ));
    let base = dir.out();
    let count = || committed.lock().unwrap().len();
    wait_for_commits(&mut pgcdc, &committed, 20).await;
    cluster.restart().await.unwrap();
    wait_for_commits(&mut pgcdc, &committed, count() + 20).await;
    cluster.kill().await.unwrap();
    cluster.start().await.unwrap();
    wait_for_commits(&mut pgcdc, &committed, count() + 20).await;
    stop.notify_one();
    writing.await.unwrap();

    let committed: BTreeSet<i64> = committed.lock().unwrap().iter().copied().collect();
    let seen = || -> BTreeSet<i64> {
        read_lines(&base)
            .iter()
            .filter(|l| l["op"] == "c")
            .map(|l| l["after"]["id"].as_i64().unwrap())
            .collect()
    };
    await_cond(&mut pgcdc, "every committed id in the file", || {
        let missing = committed.difference(&seen()).count();
        async move { missing == 0 }
    })
    .await;
    let snapshot_rows = || -> BTreeSet<i64> {
        read_lines(&base)
            .iter()
            .filter(|l| l["op"] == "r" && l["source"]["table"] == "s")
            .map(|l| l["after"]["id"].as_i64().unwrap())
            .collect()
    };
    await_cond(&mut pgcdc, "every row of s read by the snapshot", || {
        let read = snapshot_rows().len();
        async move { read == 50_000 }
    })
    .await;
    // The same pgcdc process (await_cond fails if it exits) streams again,
    // through a walsender of the restarted server.
    let admin = db.connect().await.unwrap();
    await_cond(&mut pgcdc, "the slot to be streaming again", || {
        slot_active(&admin, slot)
    })
    .await;
    assert_ne!(walsender_pid(&admin, slot).await, first_walsender);
    stop_cleanly(&mut pgcdc).await;
    assert!(committed.len() >= 60);
}

// ---- validate, configuration errors, exit statuses, --json ----------------------

/// Runs `pgcdc <args>` with `env` added to the clean environment of
/// [`run_pgcdc`] (which removes every `PGCDC_*` variable of the caller).
async fn run_pgcdc_with_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(integration_tests::pgcdc_binary().unwrap());
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("PGCDC_")) {
            cmd.env_remove(&name);
        }
    }
    cmd.env("RUST_LOG", "info")
        .env("PGCDC_METRICS_LISTEN", ":0")
        .envs(env.iter().copied())
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(TIMEOUT, cmd.output())
        .await
        .expect("pgcdc timed out")
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// On a first run neither the publication nor the slot exists: `validate`
/// succeeds and says `pgcdc run` will create them (creating nothing itself);
/// with creation turned off, or a slot that exists but is wrong, it fails.
#[tokio::test]
async fn validate_on_a_first_run_says_what_run_will_create() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE items (id int PRIMARY KEY)")
        .await
        .unwrap();
    let dir = Workdir::new("validate");
    let config = write_config(&dir, db.connection_info(), None, &["items"], "cli_val", "");
    let path = config.to_str().unwrap();

    let out = run_pgcdc(&["validate", "--config", path], TIMEOUT)
        .await
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("will create publication \"cli_val_pub\""),
        "{stdout}"
    );
    assert!(stdout.contains("will create slot \"cli_val\""), "{stdout}");
    // Every setting that changes the Debezium shape, with Debezium's names
    // and defaults.
    assert!(
        stdout.contains(
            "sinks[0] (file) writes the Debezium format: topic.prefix=pgcdc, \
             tombstones.on.delete=true, skipped.operations=none, time.precision.mode=adaptive, \
             decimal.handling.mode=string, binary.handling.mode=bytes, \
             interval.handling.mode=numeric, hstore.handling.mode=json, \
             provide.transaction.metadata=false, \
             unavailable.value.placeholder=__debezium_unavailable_value, schemas.enable=false, \
             key=false, schema.changes=false"
        ),
        "{stdout}"
    );
    // validate created nothing.
    let publications: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_publication WHERE pubname = 'cli_val_pub'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(publications, 0);
    let slots: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'cli_val'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 0);

    // Creation turned off: a missing publication is an error.
    let config = write_config(
        &dir,
        db.connection_info(),
        None,
        &["items"],
        "cli_val",
        "create_publication = false",
    );
    let out = run_pgcdc(&["validate", "--config", config.to_str().unwrap()], TIMEOUT)
        .await
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("publication \"cli_val_pub\" does not exist"),
        "{stderr}"
    );

    // The publication is missing (and may be created), but the slot exists
    // with the wrong plugin: still checked, and refused.
    client
        .batch_execute("SELECT pg_create_logical_replication_slot('cli_val', 'test_decoding')")
        .await
        .unwrap();
    let config = write_config(&dir, db.connection_info(), None, &["items"], "cli_val", "");
    let out = run_pgcdc(&["validate", "--config", config.to_str().unwrap()], TIMEOUT)
        .await
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("uses plugin \"test_decoding\", not pgoutput"),
        "{stderr}"
    );
    client
        .batch_execute("SELECT pg_drop_replication_slot('cli_val')")
        .await
        .unwrap();

    // The publication exists, the slot may not be created.
    client
        .batch_execute("CREATE PUBLICATION cli_val_pub FOR TABLE items")
        .await
        .unwrap();
    let config = write_config(
        &dir,
        db.connection_info(),
        None,
        &["items"],
        "cli_val",
        "create_slot = false",
    );
    let out = run_pgcdc(&["validate", "--config", config.to_str().unwrap()], TIMEOUT)
        .await
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("replication slot \"cli_val\" does not exist"),
        "{stderr}"
    );
}

/// A config with `interval_ms = -5`: exit status 2 and one error naming
/// `file:line:column` and the key, also as a JSON log line.
#[tokio::test]
async fn a_config_error_names_file_line_column_and_key_once_and_exits_2() {
    let dir = Workdir::new("badconfig");
    let path = dir.0.join("pgcdc.toml");
    std::fs::write(
        &path,
        "[source]\ndatabase = \"d\"\nuser = \"u\"\ntables = [\"t\"]\nslot = \"s\"\n\
         publication = \"p\"\n\n[[sinks]]\ntype = \"null\"\n\n[checkpoint]\ninterval_ms = -5\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    for command in ["validate", "run"] {
        let out = run_pgcdc(&[command, "--config", p], TIMEOUT).await.unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        let expected = format!("{p}:12:15: checkpoint.interval_ms: invalid value: integer `-5`");
        assert!(stderr.contains(&expected), "{command}: {stderr}");
        assert_eq!(
            stderr.matches("checkpoint.interval_ms").count(),
            1,
            "{command}: printed more than once:\n{stderr}"
        );
    }

    let out = run_pgcdc(
        &["validate", "--config", p, "--log-format", "json"],
        TIMEOUT,
    )
    .await
    .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let errors: Vec<Json> = stderr
        .lines()
        .map(|l| serde_json::from_str::<Json>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|l| l["level"] == "ERROR")
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    let message = errors[0]["fields"]["message"].as_str().unwrap();
    assert!(
        message.contains(":12:15: checkpoint.interval_ms"),
        "{message}"
    );
    assert_eq!(errors[0]["fields"]["exit_code"], 2);
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
    // Dropped here: connections to it are refused.
}

/// An unreachable server is exit status 3, for `validate` and `run`; a
/// misspelt `PGCDC_*` variable is named with the setting it resembles.
#[tokio::test]
async fn unreachable_server_exits_3_and_unknown_variables_are_named() {
    let dir = Workdir::new("unreachable");
    let path = dir.0.join("pgcdc.toml");
    std::fs::write(
        &path,
        format!(
            "[source]\nhost = \"127.0.0.1\"\nport = {}\ndatabase = \"d\"\nuser = \"u\"\n\
             tables = [\"t\"]\nslot = \"s\"\npublication = \"p\"\nsslmode = \"disable\"\n\n\
             [[sinks]]\ntype = \"null\"\n",
            closed_port()
        ),
    )
    .unwrap();
    let p = path.to_str().unwrap();
    for command in ["validate", "run"] {
        let out = run_pgcdc_with_env(
            &[command, "--config", p],
            &[
                ("PGCDC_SOURCE_PASWORD", "not-printed"),
                ("PGCDC_TEST_DATABASE_URL", "harness knob, not a setting"),
            ],
        )
        .await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{command}: {stderr}");
        assert!(stderr.contains("cannot connect"), "{command}: {stderr}");
        assert!(
            stderr.contains(
                "unknown environment variable PGCDC_SOURCE_PASWORD; did you mean PGCDC_SOURCE_PASSWORD?"
            ),
            "{command}: {stderr}"
        );
        assert_eq!(
            stderr.matches("PGCDC_SOURCE_PASWORD").count(),
            1,
            "{stderr}"
        );
        assert!(!stderr.contains("PGCDC_TEST_DATABASE_URL"), "{stderr}");
        assert!(!stderr.contains("not-printed"), "{stderr}");
    }
}

/// `checkpoints list|show` and `slot status` with `--json` print one JSON
/// document each, with RFC 3339 times.
/// `[source] host` may name the server's Unix-domain socket directory, as in
/// libpq: the snapshot, the stream and the checkpoints all go through the
/// socket, and `sslmode` does not apply there.
#[tokio::test]
async fn run_streams_through_a_unix_domain_socket() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    let info = db.connection_info();
    let Some(socket_dir) = info.socket_dir() else {
        eprintln!("skipped: this server (a container) has no Unix-domain socket here");
        return;
    };
    client
        .batch_execute(
            "CREATE TABLE s (id int PRIMARY KEY, v text); INSERT INTO s VALUES (1, 'before')",
        )
        .await
        .unwrap();
    let dir = Workdir::new("socket");
    let slot = "cli_socket";
    let config = write_config(
        &dir,
        info,
        None,
        &["s"],
        slot,
        "sslmode = \"require\"\n[checkpoint]\ninterval_ms = 100",
    );
    let text = std::fs::read_to_string(&config).unwrap();
    let tcp_host = format!("host = {:?}", info.host());
    assert!(text.contains(&tcp_host), "{text}");
    let text = text.replace(
        &tcp_host,
        &format!("host = {:?}", socket_dir.display().to_string()),
    );
    std::fs::write(&config, text).unwrap();

    let mut pgcdc = Pgcdc::run(&config).unwrap_or_else(|e| panic!("{e}"));
    let base = dir.out();
    let has_id = |id: i64| {
        let found = read_lines(&base).iter().any(|l| l["after"]["id"] == id);
        async move { found }
    };
    await_cond(&mut pgcdc, "the snapshot's row", || has_id(1)).await;
    client
        .batch_execute("INSERT INTO s VALUES (2, 'after')")
        .await
        .unwrap();
    await_cond(&mut pgcdc, "the streamed row", || has_id(2)).await;
    await_cond(&mut pgcdc, "a checkpoint", || async {
        client
            .query_one("SELECT count(*) FROM pgcdc.checkpoints", &[])
            .await
            .is_ok_and(|r| r.get::<_, i64>(0) > 0)
    })
    .await;
    // Every session pgcdc holds came through the socket (no client address),
    // the walsender among them.
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE client_addr IS NOT NULL),
                    count(*) FILTER (WHERE backend_type = 'walsender')
             FROM pg_stat_activity
             WHERE (application_name = 'pgcdc' OR application_name LIKE 'pgcdc %')
               AND datname = current_database()",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 0, "a pgcdc session came over TCP");
    assert_eq!(row.get::<_, i64>(1), 1, "the walsender is pgcdc's");
    stop_cleanly(&mut pgcdc).await;
}

#[tokio::test]
async fn checkpoints_and_slot_status_print_json() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE j (id int PRIMARY KEY); INSERT INTO j VALUES (1), (2)")
        .await
        .unwrap();
    let dir = Workdir::new("json");
    let slot = "cli_json";
    let config = write_config(
        &dir,
        db.connection_info(),
        None,
        &["j"],
        slot,
        "[checkpoint]\ninterval_ms = 100",
    );
    let mut pgcdc = Pgcdc::run(&config).unwrap_or_else(|e| panic!("{e}"));
    // The initial snapshot's rows are checkpointed (every 100 ms).
    await_cond(&mut pgcdc, "a checkpoint", || async {
        client
            .query_one("SELECT count(*) FROM pg_tables WHERE schemaname = 'pgcdc' AND tablename = 'checkpoints'", &[])
            .await
            .is_ok_and(|r| r.get::<_, i64>(0) == 1)
            && client
                .query_one("SELECT count(*) FROM pgcdc.checkpoints", &[])
                .await
                .is_ok_and(|r| r.get::<_, i64>(0) > 0)
    })
    .await;
    stop_cleanly(&mut pgcdc).await;
    let p = config.to_str().unwrap();

    let json_of = |out: std::process::Output| -> Json {
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{stdout}\n{stderr}");
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    };
    let list = json_of(
        run_pgcdc(&["checkpoints", "list", "--json", "-c", p], TIMEOUT)
            .await
            .unwrap(),
    );
    assert_eq!(list["job"], slot);
    let checkpoints = list["checkpoints"].as_array().unwrap();
    assert!(!checkpoints.is_empty(), "{list}");
    let newest = checkpoints.last().unwrap();
    let created = newest["created_at"].as_str().unwrap();
    // YYYY-MM-DDTHH:MM:SS.ffffffZ
    assert_eq!(created.len(), 27, "{created}");
    assert!(
        created.ends_with('Z') && created.as_bytes()[10] == b'T',
        "{created}"
    );
    newest["lsn"].as_str().unwrap().parse::<Lsn>().unwrap();

    let id = newest["id"].as_u64().unwrap().to_string();
    let show = json_of(
        run_pgcdc(&["checkpoints", "show", &id, "--json", "-c", p], TIMEOUT)
            .await
            .unwrap(),
    );
    assert_eq!(show["id"], newest["id"]);
    assert_eq!(show["slot"], slot);
    assert_eq!(show["created_at"], newest["created_at"]);
    assert_eq!(show["publications"][0], format!("{slot}_pub"));

    let status = json_of(
        run_pgcdc(&["slot", "status", "--json", "-c", p], TIMEOUT)
            .await
            .unwrap(),
    );
    assert_eq!(status["slot"]["name"], slot);
    assert_eq!(status["slot"]["active_pid"], Json::Null);
    assert_eq!(status["job"]["name"], slot);
    assert_eq!(status["job"]["newest"]["id"], newest["id"]);
    assert_eq!(status["job"]["slot_past_newest_checkpoint"], false);

    // The text output shows the same time, not Unix seconds.
    let out = run_pgcdc(&["checkpoints", "list", "-c", p], TIMEOUT)
        .await
        .unwrap();
    assert!(text(&out.stdout).contains(created), "{}", text(&out.stdout));
}

#[tokio::test]
async fn the_log_has_status_lines_and_summarises_checkpoints_at_info() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE s (id int PRIMARY KEY); INSERT INTO s SELECT generate_series(1, 50)",
        )
        .await
        .unwrap();
    let dir = Workdir::new("status-log");
    let config = write_config(
        &dir,
        db.connection_info(),
        None,
        &["s"],
        "cli_status_log",
        "[checkpoint]\ninterval_ms = 100",
    );
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "status_interval_secs = 1\n",
        "status_interval_secs = 1\nstatus_log_interval_secs = 1\n",
    );
    std::fs::write(&config, text).unwrap();
    let stderr_path = config.with_extension("stderr");
    let status_lines = || {
        std::fs::read_to_string(&stderr_path)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" status ") && l.contains("events_per_sec="))
            .count()
    };
    let mut pgcdc = Pgcdc::run(&config).unwrap_or_else(|e| panic!("{e}"));
    await_cond(&mut pgcdc, "three status lines", || async {
        status_lines() >= 3
    })
    .await;
    let log = stop_cleanly(&mut pgcdc).await;
    // About ten checkpoints a second were saved; INFO has a summary at
    // most once a minute (the first at once), each one only at DEBUG.
    let saved = client
        .query_one("SELECT count(*) FROM pgcdc.checkpoints", &[])
        .await
        .map(|r| r.get::<_, i64>(0))
        .unwrap_or(0);
    assert!(saved >= 1, "{log}");
    let summaries = log.matches("checkpoints saved (summary").count();
    assert!(
        (1..=2).contains(&summaries),
        "{summaries} summaries:\n{log}"
    );
    assert!(
        !log.contains("\"checkpoint saved\"") && !log.contains(" checkpoint saved "),
        "{log}"
    );
    let line = log
        .lines()
        .find(|l| l.contains(" status ") && l.contains("events_per_sec="))
        .unwrap();
    for field in [
        "events=",
        "confirmed=",
        "unconfirmed_bytes=",
        "checkpoint_age=",
        "snapshot=",
    ] {
        assert!(line.contains(field), "{field} missing: {line}");
    }
}
