//! Schema changes followed end to end against a real server: DDL between
//! DML in one transaction and while the job is stopped, a crash that
//! replays a schema change, plain-format schema-change events, and the
//! PostgreSQL sink's target following the source.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use cdc_runtime::sinks::FileSink;
use cdc_runtime::JobError;
use integration_tests::held_commit::{self, HeldCommit};
use integration_tests::{TestDatabase, TestPostgres};
use pgcdc::config::Config;
use pgcdc::RunOptions;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_postgres::Client;

const TIMEOUT: Duration = Duration::from_secs(60);

type JobTask = tokio::task::JoinHandle<Result<cdc_runtime::pipeline::Progress, JobError>>;

/// Connects to both databases and runs `ddl` in each.
async fn same_tables(source: &TestDatabase, target: &TestDatabase, ddl: &str) -> (Client, Client) {
    let src = source.connect().await.unwrap();
    let dst = target.connect().await.unwrap();
    src.batch_execute(ddl).await.unwrap();
    dst.batch_execute(ddl).await.unwrap();
    (src, dst)
}

fn init_logging() {
    if let Ok(filter) = std::env::var("PGCDC_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

struct Job {
    dir: PathBuf,
    config: Config,
}

impl Job {
    /// A job over `tables` of `source` with a plain file sink and a
    /// PostgreSQL sink into the same names in `target`, checkpointing every
    /// `interval_ms` into the source database.
    fn new(
        source: &TestDatabase,
        target: &TestDatabase,
        name: &str,
        tables: &[&str],
        interval_ms: u64,
        extra_sink: &str,
    ) -> Job {
        Job::with_source(source, target, name, tables, interval_ms, "", extra_sink)
    }

    /// [`Job::new`] with `extra_source` lines in `[source]`.
    fn with_source(
        source: &TestDatabase,
        target: &TestDatabase,
        name: &str,
        tables: &[&str],
        interval_ms: u64,
        extra_source: &str,
        extra_sink: &str,
    ) -> Job {
        let dir = std::env::temp_dir().join(format!("pgcdc-ddl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let src = source.source_toml(tables, &format!("{name}_slot"), &format!("{name}_pub"));
        let text = format!(
            r#"
            {src}
            {extra_source}
            [snapshot]
            mode = "latest"

            [[sinks]]
            type = "file"
            path = {path:?}
            format = "plain"

            [[sinks]]
            type = "postgres"
            url = {url:?}
            exactly_once = true
            {extra_sink}

            [checkpoint]
            job = {name:?}
            interval_ms = {interval_ms}
            keep = 3
            "#,
            path = dir.join("events.jsonl").display().to_string(),
            url = target.connection_info().connection_string(),
        );
        let config = Config::parse(&text).unwrap();
        config.check().unwrap();
        Job { dir, config }
    }

    fn spawn(&self) -> (oneshot::Sender<()>, JobTask) {
        let (stop, stopped) = oneshot::channel::<()>();
        let config = self.config.clone();
        let task = tokio::spawn(async move {
            pgcdc::run(&config, &RunOptions::default(), async move {
                let _ = stopped.await;
            })
            .await
        });
        (stop, task)
    }

    /// Every event written so far, in file order.
    fn events(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for file in FileSink::files(&self.dir.join("events.jsonl")).unwrap_or_default() {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            for line in text.lines() {
                // A line being written may be incomplete.
                if let Ok(v) = serde_json::from_str(line) {
                    out.push(v);
                }
            }
        }
        out
    }

    /// Waits until an event satisfies `pred`.
    async fn await_event(&self, what: &str, pred: impl Fn(&Value) -> bool) {
        integration_tests::eventually(what, TIMEOUT, || async {
            self.events().iter().any(&pred).then_some(())
        })
        .await;
    }
}

async fn stop(stop: oneshot::Sender<()>, task: JobTask) {
    let _ = stop.send(());
    tokio::time::timeout(TIMEOUT, task)
        .await
        .expect("the job did not stop")
        .unwrap()
        .expect("the job failed");
}

/// Waits until the job `name` streams (its slot exists and was confirmed).
async fn await_streaming(client: &Client, name: &str) {
    let sql = format!(
        "SELECT confirmed_flush_lsn IS NOT NULL FROM pg_replication_slots WHERE slot_name = '{name}_slot'"
    );
    integration_tests::eventually("the job streams", TIMEOUT, || async {
        let row = client.query_opt(&sql, &[]).await.unwrap();
        row.is_some_and(|r| r.get::<_, bool>(0)).then_some(())
    })
    .await;
}

/// Ends the job like a crash: no final checkpoint, no clean end of the
/// stream. Aborting the task leaves the replication connection's own task
/// behind (a dead process would not), so its walsender is ended too.
async fn crash(task: JobTask, client: &Client, name: &str) {
    task.abort();
    let _ = task.await;
    let slot = format!("{name}_slot");
    integration_tests::eventually("the crashed job's walsender to end", TIMEOUT, || async {
        let row = client
            .query_one(
                "SELECT coalesce(bool_or(pg_terminate_backend(active_pid)), false) OR NOT bool_or(active)                  FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap();
        let inactive = client
            .query_one(
                "SELECT NOT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap();
        let _: Option<bool> = row.get(0);
        inactive.get::<_, bool>(0).then_some(())
    })
    .await;
}

/// Waits until the job `name` streams from its slot: active, and past its
/// consistent point (a slot being created is active before it).
async fn await_active(client: &Client, name: &str) {
    let slot = format!("{name}_slot");
    integration_tests::eventually("the job streams", TIMEOUT, || async {
        let row = client
            .query_opt(
                "SELECT active AND confirmed_flush_lsn IS NOT NULL
                   FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .unwrap();
        row.is_some_and(|r| r.get::<_, bool>(0)).then_some(())
    })
    .await;
}

/// With DDL capture every statement is its own schema change at its own
/// LSN, even with no change of the table after it; a dropped table is
/// reported; an added column's value in existing rows reaches the target
/// (a constant default as the value, a per-row default by reading the
/// table again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captured_ddl_is_reported_per_statement_and_fills_added_columns() {
    init_logging();
    let source = TestPostgres::new_database().await.unwrap();
    let target = TestPostgres::new_database().await.unwrap();
    let (src, dst) = same_tables(
        &source,
        &target,
        "CREATE TABLE t (id int PRIMARY KEY, a text, b int); \
               CREATE TABLE u (id int PRIMARY KEY, x int)",
    )
    .await;
    let job = Job::with_source(
        &source,
        &target,
        "cap",
        &["public.t", "public.u"],
        500,
        "capture_ddl = true",
        "dropped_columns = \"drop\"",
    );
    let (s, task) = job.spawn();
    await_streaming(&src, "cap").await;
    src.batch_execute(
        "INSERT INTO t SELECT i, 'r' || i, i FROM generate_series(1, 3) i; \
         INSERT INTO u VALUES (1, 1)",
    )
    .await
    .unwrap();
    job.await_event("the first rows", |e| e["after"]["x"] == 1)
        .await;
    // Without capture these two would read as one rename, reported with
    // the next change of t.
    src.batch_execute(
        "BEGIN; ALTER TABLE t DROP COLUMN b; ALTER TABLE t ADD COLUMN c int DEFAULT 42; COMMIT;",
    )
    .await
    .unwrap();
    job.await_event("the added column, before any change of t", |e| {
        change_kinds(e) == ["add_column"]
    })
    .await;
    src.batch_execute(
        "ALTER TABLE t RENAME COLUMN a TO a2; \
         ALTER TABLE t ADD COLUMN s serial; \
         DROP TABLE u; \
         INSERT INTO t (id, a2) VALUES (4, 'r4')",
    )
    .await
    .unwrap();
    job.await_event("the insert after the DDL", |e| e["after"]["id"] == 4)
        .await;
    let caught_up = integration_tests::eventually(
        "the target to equal the source (s read again)",
        TIMEOUT,
        || async {
            let (src_cols, src_rows) = table_text(&src, "public.t").await;
            let (dst_cols, dst_rows) = table_text(&dst, "public.t").await;
            (src_cols == dst_cols && src_rows == dst_rows).then_some(())
        },
    );
    caught_up.await;
    stop(s, task).await;

    let events = dedup(&job.events());
    let changes: Vec<&Value> = events
        .iter()
        .filter(|e| e["op"] == "schema_change")
        .collect();
    let summary: Vec<(String, Vec<String>)> = changes
        .iter()
        .map(|e| {
            (
                e["table"].as_str().unwrap_or_default().to_owned(),
                change_kinds(e),
            )
        })
        .collect();
    let kinds = |t: &str, k: &str| (t.to_owned(), vec![k.to_owned()]);
    assert_eq!(
        summary,
        vec![
            kinds("t", "drop_column"),
            kinds("t", "add_column"),
            kinds("t", "rename_column"),
            kinds("t", "add_column"),
            kinds("u", "drop_table"),
        ],
        "one event per statement: {changes:#?}"
    );
    for e in &changes {
        assert!(e["ddl"].as_str().is_some_and(|d| !d.is_empty()), "{e}");
    }
    assert_eq!(changes[1]["changes"][0]["existing_rows"], "value");
    assert_eq!(changes[1]["changes"][0]["existing_value"], "42");
    assert_eq!(changes[3]["changes"][0]["existing_rows"], "per_row");
    // Each at its own LSN, in the order of the statements.
    let lsns: Vec<u64> = changes
        .iter()
        .map(|e| {
            let l = e["lsn"].as_str().unwrap();
            let (hi, lo) = l.split_once('/').unwrap();
            (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
        })
        .collect();
    assert!(lsns.windows(2).all(|w| w[0] < w[1]), "{lsns:?}");
    // The rows that existed before hold the source's values on the target.
    let (_, dst_rows) = table_text(&dst, "public.t").await;
    assert_eq!(dst_rows["1"]["c"], 42);
    assert_eq!(dst_rows["3"]["s"], 3);
    // The per-row column came by reading the table again.
    assert!(events
        .iter()
        .any(|e| e["op"] == "read" && e["after"]["id"] == 1 && e["after"]["s"] == 1));
}

/// The server streams a transaction once its commit record is in the WAL;
/// the committing session makes it visible to other sessions a moment
/// later. A synchronous standby that never answers holds a session in that
/// moment: its `ADD COLUMN s serial` streams while new snapshots still see
/// the table without `s` (and, the table being rewritten, without rows).
/// The job reads the table again only once the transaction is visible, so
/// every row gets its `s` on the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_table_is_read_again_once_its_transaction_is_visible() {
    init_logging();
    let cluster = held_commit::cluster_with_held_commits().await.unwrap();
    let source = cluster.create_database().await.unwrap();
    let target = TestPostgres::new_database().await.unwrap();
    let (src, dst) = same_tables(
        &source,
        &target,
        "CREATE TABLE t (id int PRIMARY KEY, a text)",
    )
    .await;
    let job = Job::with_source(
        &source,
        &target,
        "vis",
        &["public.t"],
        500,
        "capture_ddl = true",
        "",
    );
    let (s, task) = job.spawn();
    await_streaming(&src, "vis").await;
    src.batch_execute("INSERT INTO t SELECT i, 'r' || i FROM generate_series(1, 3) i")
        .await
        .unwrap();
    job.await_event("the first rows", |e| e["after"]["id"] == 3)
        .await;

    let alter = HeldCommit::start(&source, "ALTER TABLE t ADD COLUMN s serial")
        .await
        .unwrap();
    // The job got the ALTER's commit, and waits for it: it asks for new
    // snapshots until one sees the transaction.
    held_commit::await_visibility_wait(&src, TIMEOUT).await;
    let columns: i64 = src
        .query_one(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'public.t'::regclass AND attname = 's'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        columns, 0,
        "the ALTER is visible already: the test shows nothing"
    );
    assert!(!alter.is_finished(), "the ALTER's commit did not wait");
    alter.release(&src).await.unwrap();
    job.await_event("the added column", |e| change_kinds(e) == ["add_column"])
        .await;
    integration_tests::eventually(
        "the target to equal the source (s read again)",
        TIMEOUT,
        || async {
            let (src_cols, src_rows) = table_text(&src, "public.t").await;
            let (dst_cols, dst_rows) = table_text(&dst, "public.t").await;
            (src_cols == dst_cols && src_rows == dst_rows).then_some(())
        },
    )
    .await;
    stop(s, task).await;
    let (_, dst_rows) = table_text(&dst, "public.t").await;
    assert_eq!(dst_rows["3"]["s"], 3);
}

/// Without a superuser, `capture_ddl = true` stops start-up with an error
/// that says how to install it, before anything streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capture_ddl_without_a_superuser_names_the_fix() {
    init_logging();
    let source = TestPostgres::new_database().await.unwrap();
    let target = TestPostgres::new_database().await.unwrap();
    let src = source.connect().await.unwrap();
    let role = format!("plain_{}", source.name());
    src.batch_execute(&format!(
        "CREATE TABLE t (id int PRIMARY KEY); \
         CREATE ROLE \"{role}\" LOGIN REPLICATION; \
         GRANT CREATE ON DATABASE \"{db}\" TO \"{role}\"; \
         ALTER TABLE t OWNER TO \"{role}\"",
        db = source.name()
    ))
    .await
    .unwrap();
    let mut job = Job::with_source(
        &source,
        &target,
        "nosu",
        &["public.t"],
        500,
        "capture_ddl = true",
        "",
    );
    job.config.source.user = role.clone();
    let err = pgcdc::run(&job.config, &RunOptions::default(), std::future::pending())
        .await
        .expect_err("a role that may not create event triggers");
    let text = err.to_string();
    assert!(
        text.contains("superuser") && text.contains("capture_ddl = false"),
        "{text}"
    );
    src.batch_execute(&format!("DROP OWNED BY \"{role}\"; DROP ROLE \"{role}\""))
        .await
        .unwrap();
}

/// Events deduplicated by `(commit_lsn, index)`, in order; a duplicate
/// (delivered again after a crash) must equal the first delivery.
fn dedup(events: &[Value]) -> Vec<Value> {
    let mut seen: BTreeMap<(String, u64), Value> = BTreeMap::new();
    let mut out = Vec::new();
    for ev in events {
        let key = (
            ev["commit_lsn"].as_str().unwrap_or_default().to_owned(),
            ev["index"].as_u64().unwrap_or_default(),
        );
        match seen.get(&key) {
            Some(first) => assert_eq!(
                first, ev,
                "a replayed event differs from its first delivery"
            ),
            None => {
                seen.insert(key, ev.clone());
                out.push(ev.clone());
            }
        }
    }
    out
}

fn after_keys(ev: &Value) -> Vec<String> {
    let mut keys: Vec<String> = ev["after"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

fn column_names(ev: &Value) -> Vec<String> {
    ev["columns"]
        .as_array()
        .map(|cols| {
            cols.iter()
                .map(|c| c["name"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn change_kinds(ev: &Value) -> Vec<String> {
    ev["changes"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|c| c["kind"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Every row of `table` as text, by `id`, with the column names.
async fn table_text(client: &Client, table: &str) -> (Vec<String>, BTreeMap<String, Value>) {
    let cols: Vec<String> = client
        .query(
            "SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass($1) \
             AND attnum > 0 AND NOT attisdropped ORDER BY attname",
            &[&table],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let rows = client
        .query(
            &format!("SELECT id::text, to_jsonb(t)::text FROM {table} t"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let json: String = r.get(1);
            (r.get::<_, String>(0), serde_json::from_str(&json).unwrap())
        })
        .collect();
    (cols, rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_are_decoded_emitted_and_followed_across_restarts() {
    init_logging();
    let source = TestPostgres::new_database().await.unwrap();
    let target = TestPostgres::new_database().await.unwrap();
    let (src, dst) = same_tables(
        &source,
        &target,
        "CREATE TABLE t (id int PRIMARY KEY, a text, b int)",
    )
    .await;
    let job = Job::new(&source, &target, "ddl", &["public.t"], 600_000, "");

    // Run 1: DDL between DML inside one transaction.
    let (s, task) = job.spawn();
    await_streaming(&src, "ddl").await;
    src.batch_execute("INSERT INTO t VALUES (0, 'zero', 0)")
        .await
        .unwrap();
    job.await_event("the first insert", |e| e["op"] == "insert")
        .await;
    src.batch_execute(
        "BEGIN;
         INSERT INTO t VALUES (1, 'x', 1);
         ALTER TABLE t ADD COLUMN c int;
         INSERT INTO t VALUES (2, 'y', 2, 20);
         ALTER TABLE t RENAME COLUMN a TO a2;
         UPDATE t SET c = 10 WHERE id = 1;
         ALTER TABLE t ALTER COLUMN b TYPE bigint;
         INSERT INTO t VALUES (3, 'z', 30000000000, 30);
         COMMIT;",
    )
    .await
    .unwrap();
    job.await_event("the last insert of run 1", |e| e["after"]["id"] == 3)
        .await;
    stop(s, task).await;

    // While stopped: a change the restarted job only learns from the
    // Relation message, compared with the schema its checkpoint kept.
    src.batch_execute(
        "ALTER TABLE t DROP COLUMN a2;
         ALTER TABLE t ADD COLUMN d int DEFAULT 7;
         INSERT INTO t VALUES (4, 4, 40);
         UPDATE t SET b = b + 1;",
    )
    .await
    .unwrap();

    // Run 2: catches up, then crashes (no final checkpoint) after a rename.
    let (s2, task) = job.spawn();
    job.await_event("the insert made while stopped", |e| e["after"]["id"] == 4)
        .await;
    src.batch_execute(
        "BEGIN;
         ALTER TABLE t RENAME COLUMN d TO d2;
         INSERT INTO t VALUES (5, 5, 50, 5);
         COMMIT;",
    )
    .await
    .unwrap();
    job.await_event("the insert after the rename", |e| e["after"]["id"] == 5)
        .await;
    crash(task, &src, "ddl").await;
    drop(s2);

    // Run 3: replays from the last checkpoint, then a table rename (once
    // streaming: the job checks at start that its tables exist).
    let (s, task) = job.spawn();
    await_active(&src, "ddl").await;
    src.batch_execute(
        "ALTER TABLE t RENAME TO t_renamed;
         INSERT INTO t_renamed VALUES (6, 6, 60, 6);",
    )
    .await
    .unwrap();
    job.await_event("the insert into the renamed table", |e| {
        e["after"]["id"] == 6
    })
    .await;
    stop(s, task).await;

    let events = dedup(&job.events());
    let changes: Vec<(Vec<String>, Vec<String>)> = events
        .iter()
        .filter(|e| e["op"] == "schema_change")
        .map(|e| (change_kinds(e), column_names(e)))
        .collect();
    let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        changes,
        vec![
            (names(&["add_column"]), names(&["id", "a", "b", "c"])),
            (names(&["rename_column"]), names(&["id", "a2", "b", "c"])),
            (
                names(&["alter_column_type"]),
                names(&["id", "a2", "b", "c"])
            ),
            // Two statements while stopped, seen as one change.
            (
                names(&["drop_column", "add_column"]),
                names(&["id", "b", "c", "d"])
            ),
            (names(&["rename_column"]), names(&["id", "b", "c", "d2"])),
            (names(&["rename_table"]), names(&["id", "b", "c", "d2"])),
        ],
        "every schema change once, with the columns in force after it"
    );
    // Every row event has the columns in force at its LSN.
    let mut columns = names(&["a", "b", "id"]);
    for e in &events {
        if e["op"] == "schema_change" {
            columns = column_names(e);
            columns.sort();
        } else if e["after"].is_object() {
            assert_eq!(after_keys(e), columns, "{e}");
        }
    }
    let by_id = |id: i64| {
        events
            .iter()
            .filter(|e| e["after"]["id"] == id)
            .map(|e| e["after"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(by_id(3)[0]["b"], 30_000_000_000_i64, "decoded as bigint");
    assert_eq!(by_id(4)[0]["d"], 7, "the default of an added column");
    // The update of row 0 after ADD COLUMN d DEFAULT 7 carries the default.
    let row0 = by_id(0);
    assert_eq!(row0.last().unwrap()["d"], 7);

    // The target followed: same columns, same rows, plus the dropped
    // column `a2`, kept (dropped_columns = "keep", the default) and NULL in
    // rows written after the drop.
    let (src_cols, src_rows) = table_text(&src, "public.t_renamed").await;
    let (dst_cols, mut dst_rows) = table_text(&dst, "public.t_renamed").await;
    let mut expected_cols = src_cols.clone();
    expected_cols.push("a2".into());
    expected_cols.sort();
    assert_eq!(dst_cols, expected_cols);
    assert_eq!(
        dst_rows["1"]["a2"], "x",
        "kept values of the dropped column"
    );
    assert_eq!(dst_rows["6"]["a2"], Value::Null);
    for row in dst_rows.values_mut() {
        row.as_object_mut().unwrap().remove("a2");
    }
    assert_eq!(dst_rows, src_rows);
}

/// A small deterministic generator (xorshift64*), seeded per run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The model of one source table: its columns (`id` first) and row ids.
struct ModelTable {
    name: String,
    columns: Vec<(String, &'static str)>,
    ids: Vec<i64>,
    /// A DDL statement ran since the table's last row change: the next
    /// statement is an insert, so that every change is announced alone
    /// (two in a row are summed up, see the README).
    announced: bool,
    /// DDL capture is on: statements may follow each other, and columns
    /// are added with defaults (constant, or per row with `serial`).
    capture: bool,
}

impl ModelTable {
    fn value(rng: &mut Rng, ty: &str) -> String {
        if ty == "serial" {
            // NOT NULL, and apart from the sequence's values.
            return (100_000 + rng.below(100_000)).to_string();
        }
        if rng.below(8) == 0 {
            return "NULL".into();
        }
        match ty {
            "int4" => (rng.below(1000) as i64 - 500).to_string(),
            "int8" => format!("{}", rng.next() as i64 / 3),
            _ => format!("'v{}'", rng.below(100_000)),
        }
    }

    /// One random statement; DDL one time in four.
    fn statement(&mut self, rng: &mut Rng, next_id: &mut i64, next_col: &mut u32) -> String {
        let t = &self.name;
        let others: Vec<usize> = (1..self.columns.len()).collect();
        let pick = if self.announced || self.capture {
            rng.below(16)
        } else {
            99
        };
        if pick < 4 {
            self.announced = false;
            match pick {
                0 => {
                    let name = format!("c{next_col}");
                    *next_col += 1;
                    let ty = if rng.below(2) == 0 { "int4" } else { "text" };
                    let default = match (self.capture, rng.below(3), ty) {
                        (false, _, _) | (_, 0, _) => String::new(),
                        (true, 1, "int4") => {
                            self.columns.push((name.clone(), "serial"));
                            return format!("ALTER TABLE {t} ADD COLUMN {name} serial");
                        }
                        (true, _, _) => format!(" DEFAULT {}", Self::value(rng, ty)),
                    };
                    self.columns.push((name.clone(), ty));
                    return format!("ALTER TABLE {t} ADD COLUMN {name} {ty}{default}");
                }
                1 if others.len() > 1 => {
                    let i = others[rng.below(others.len())];
                    let (name, _) = self.columns.remove(i);
                    return format!("ALTER TABLE {t} DROP COLUMN {name}");
                }
                2 if !others.is_empty() => {
                    let i = others[rng.below(others.len())];
                    let new = format!("c{next_col}");
                    *next_col += 1;
                    let old = std::mem::replace(&mut self.columns[i].0, new.clone());
                    return format!("ALTER TABLE {t} RENAME COLUMN {old} TO {new}");
                }
                _ => {
                    if let Some(i) = others
                        .iter()
                        .copied()
                        .find(|&i| self.columns[i].1 == "int4")
                    {
                        self.columns[i].1 = "int8";
                        let name = &self.columns[i].0;
                        return format!("ALTER TABLE {t} ALTER COLUMN {name} TYPE bigint");
                    }
                }
            }
        }
        match rng.below(4) {
            0 | 1 if self.announced && !self.ids.is_empty() && !others.is_empty() => {
                let id = self.ids[rng.below(self.ids.len())];
                let i = others[rng.below(others.len())];
                let (name, ty) = &self.columns[i];
                let v = Self::value(rng, ty);
                format!("UPDATE {t} SET {name} = {v} WHERE id = {id}")
            }
            2 if self.announced && !self.ids.is_empty() => {
                let id = self.ids.swap_remove(rng.below(self.ids.len()));
                format!("DELETE FROM {t} WHERE id = {id}")
            }
            _ => {
                self.announced = true;
                let id = *next_id;
                *next_id += 1;
                self.ids.push(id);
                let names: Vec<&str> = self.columns.iter().map(|(n, _)| n.as_str()).collect();
                let mut values = vec![id.to_string()];
                for (_, ty) in self.columns.iter().skip(1) {
                    values.push(Self::value(rng, ty));
                }
                format!(
                    "INSERT INTO {t} ({}) VALUES ({})",
                    names.join(", "),
                    values.join(", ")
                )
            }
        }
    }
}

/// Fails with the rows that differ (`got` against `want`), not all rows.
fn assert_same_rows(got: &BTreeMap<String, Value>, want: &BTreeMap<String, Value>, what: &str) {
    let keys: std::collections::BTreeSet<&String> = got.keys().chain(want.keys()).collect();
    let diff: Vec<String> = keys
        .into_iter()
        .filter(|k| got.get(*k) != want.get(*k))
        .map(|k| format!("id {k}: got {:?}, want {:?}", got.get(k), want.get(k)))
        .collect();
    assert!(
        diff.is_empty(),
        "{what}: {} rows differ:\n{}",
        diff.len(),
        diff.join("\n")
    );
}

/// Replays deduplicated plain events of `table` into rows by id, checking
/// that every row event has the columns the schema stream says.
fn replay(events: &[Value], table: &str) -> BTreeMap<String, Value> {
    let mut rows: BTreeMap<String, Value> = BTreeMap::new();
    let mut columns: Option<Vec<String>> = None;
    for e in events.iter().filter(|e| e["table"] == table) {
        match e["op"].as_str().unwrap_or_default() {
            "schema_change" => {
                for item in e["changes"].as_array().unwrap() {
                    for row in rows.values_mut() {
                        let row = row.as_object_mut().unwrap();
                        match item["kind"].as_str().unwrap() {
                            "drop_column" => {
                                row.remove(item["column"]["name"].as_str().unwrap());
                            }
                            "add_column" => {
                                // A constant default's value, as JSON of
                                // the column's type (per-row values come
                                // with the table's read that follows).
                                let v = match item["existing_value"].as_str() {
                                    Some(v) if item["column"]["type"] == "text" => {
                                        Value::String(v.to_owned())
                                    }
                                    Some(v) => serde_json::from_str(v).unwrap(),
                                    None => Value::Null,
                                };
                                row.insert(item["column"]["name"].as_str().unwrap().to_owned(), v);
                            }
                            "rename_column" => {
                                let v = row.remove(item["from"].as_str().unwrap());
                                row.insert(
                                    item["to"].as_str().unwrap().to_owned(),
                                    v.unwrap_or(Value::Null),
                                );
                            }
                            _ => {}
                        }
                    }
                }
                let mut cols = column_names(e);
                cols.sort();
                columns = Some(cols);
            }
            "insert" | "update" | "read" => {
                let keys = after_keys(e);
                let expected = columns.get_or_insert_with(|| keys.clone());
                assert_eq!(&keys, expected, "columns of {e}");
                rows.insert(e["after"]["id"].to_string(), e["after"].clone());
            }
            "delete" => {
                rows.remove(&e["before"]["id"].to_string());
            }
            other => panic!("unexpected event {other}: {e}"),
        }
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_ddl_and_dml_with_restarts_end_with_the_target_equal_to_the_source() {
    random_ddl_and_dml("model", false).await;
}

/// The same with DDL capture: statements in a row, and added columns
/// with constant and per-row defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_ddl_with_capture_ends_with_the_target_equal_to_the_source() {
    random_ddl_and_dml("modelcap", true).await;
}

async fn random_ddl_and_dml(name: &str, capture: bool) {
    init_logging();
    let seed = std::env::var("PGCDC_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("seed {seed} (replay with PGCDC_TEST_SEED={seed})");
    let mut rng = Rng(seed);
    let steps: usize = std::env::var("PGCDC_TEST_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);

    let source = TestPostgres::new_database().await.unwrap();
    let target = TestPostgres::new_database().await.unwrap();
    let src = source.connect().await.unwrap();
    let dst = target.connect().await.unwrap();
    let mut tables: Vec<ModelTable> = (0..3)
        .map(|i| ModelTable {
            name: format!("m{i}"),
            columns: vec![
                ("id".into(), "int8"),
                ("a".into(), "int4"),
                ("b".into(), "text"),
            ],
            ids: Vec::new(),
            announced: true,
            capture,
        })
        .collect();
    for t in &tables {
        let ddl = format!(
            "CREATE TABLE {} (id bigint PRIMARY KEY, a int, b text)",
            t.name
        );
        src.batch_execute(&ddl).await.unwrap();
        dst.batch_execute(&ddl).await.unwrap();
    }
    let job = Job::with_source(
        &source,
        &target,
        name,
        &["public.m0", "public.m1", "public.m2"],
        150,
        if capture { "capture_ddl = true" } else { "" },
        "dropped_columns = \"drop\"",
    );
    let (mut stop_tx, mut task) = job.spawn();
    await_streaming(&src, name).await;
    // A first row in every table: the stream learns each table's schema
    // from its first change, so changes before it are not reported.
    let mut next_id = 1_i64;
    for t in &mut tables {
        src.batch_execute(&format!("INSERT INTO {} (id) VALUES ({next_id})", t.name))
            .await
            .unwrap();
        t.ids.push(next_id);
        next_id += 1;
    }
    let first_last = next_id - 1;
    job.await_event("the first rows", |e| e["after"]["id"] == first_last)
        .await;
    let mut next_col = 0_u32;
    let mut restarts = (0, 0);
    for step in 0..steps {
        let n = 1 + rng.below(3);
        let mut sql = vec!["BEGIN".to_owned()];
        for _ in 0..n {
            let t = rng.below(tables.len());
            sql.push(tables[t].statement(&mut rng, &mut next_id, &mut next_col));
        }
        sql.push("COMMIT".into());
        let text = sql.join(";\n");
        // Kept beside the events, to replay a failing seed by hand.
        {
            use std::io::Write;
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(job.dir.join("statements.sql"))
                .unwrap();
            writeln!(log, "-- step {step}\n{text};").unwrap();
        }
        src.batch_execute(&text)
            .await
            .unwrap_or_else(|e| panic!("step {step} (seed {seed}): {e:?}\n{text}"));
        if rng.below(12) == 0 {
            if rng.below(2) == 0 {
                stop(stop_tx, task).await;
                restarts.0 += 1;
            } else {
                // A crash: no final checkpoint, the rest is replayed.
                crash(task, &src, name).await;
                drop(stop_tx);
                restarts.1 += 1;
            }
            (stop_tx, task) = job.spawn();
            // Restart in the middle of the workload, not before it.
            await_active(&src, name).await;
        }
    }
    // A last row in every table, then wait for the target to have it.
    for t in &mut tables {
        let id = next_id;
        next_id += 1;
        t.ids.push(id);
        src.batch_execute(&format!("INSERT INTO {} (id) VALUES ({id})", t.name))
            .await
            .unwrap();
    }
    let last = next_id - 1;
    let last_table = tables.last().map(|t| format!("public.{}", t.name)).unwrap();
    // With DDL capture, tables read again for columns added with a value
    // per row may still be read after the last row arrived.
    let tables_ref = &tables;
    let (src_ref, dst_ref, last_ref) = (&src, &dst, &last_table);
    let caught_up =
        integration_tests::eventually("the target has the last row", TIMEOUT, || async move {
            let (_, rows) = table_text(dst_ref, last_ref).await;
            if !rows.contains_key(&last.to_string()) {
                return None;
            }
            if capture {
                for t in tables_ref {
                    let q = format!("public.{}", t.name);
                    if table_text(src_ref, &q).await != table_text(dst_ref, &q).await {
                        return None;
                    }
                }
            }
            Some(())
        });
    tokio::select! {
        () = caught_up => {}
        ended = &mut task => panic!("seed {seed}: the job ended: {:?}", ended.unwrap().map(|_| ())),
    }
    stop(stop_tx, task).await;
    println!(
        "seed {seed}: {steps} steps, {} clean restarts, {} crashes",
        restarts.0, restarts.1
    );

    let events = dedup(&job.events());
    for t in &tables {
        let qualified = format!("public.{}", t.name);
        let (src_cols, src_rows) = table_text(&src, &qualified).await;
        let (dst_cols, dst_rows) = table_text(&dst, &qualified).await;
        assert_eq!(dst_cols, src_cols, "seed {seed}: columns of {qualified}");
        assert_same_rows(
            &dst_rows,
            &src_rows,
            &format!("seed {seed}: rows of {qualified}"),
        );
        let replayed = replay(&events, &t.name);
        assert_same_rows(
            &replayed,
            &src_rows,
            &format!("seed {seed}: the events of {qualified} replayed"),
        );
    }
}
