//! The catalog facts the pipeline attaches to table schemas (NOT NULL,
//! primary key, type names, enum labels, domains), and the REPLICA IDENTITY
//! FULL update whose unchanged TOAST column is taken from the old row,
//! against a real server.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cdc_core::Value;
use cdc_runtime::event::{ChangeEvent, Operation};
use cdc_runtime::pipeline::{Backoff, Pipeline, PipelineOptions};
use cdc_runtime::replication::ReplicationConnection;
use cdc_runtime::setup::{prepare, SetupMode};
use cdc_runtime::sinks::Sink;
use integration_tests::CollectSink as Collect;
use integration_tests::{TestDatabase, TestPostgres};
use pgcdc::config::{Config, SourceConfig};
use tokio::sync::oneshot;

const TIMEOUT: Duration = Duration::from_secs(30);

async fn source(db: &TestDatabase, tables: &[&str], slot: &str) -> SourceConfig {
    let text = format!(
        "{}\n[[sinks]]\ntype = \"null\"\n",
        db.source_toml(tables, slot, "pgcdc_pub")
    );
    let config = Config::parse(&text).unwrap();
    config.check().unwrap();
    let source = config.source;
    let rc = source.replication_config().unwrap();
    let mut conn = ReplicationConnection::connect(&rc).await.unwrap();
    prepare(
        &mut conn,
        &source.source_options().unwrap(),
        SetupMode::Create,
    )
    .await
    .unwrap();
    conn.close().await.unwrap();
    source
}

/// Streams until `count` events arrived, then stops; returns them.
async fn collect(
    source: &SourceConfig,
    count: usize,
    write: impl std::future::Future<Output = ()>,
) -> Vec<ChangeEvent> {
    let mut options = PipelineOptions::new(
        source.replication_config().unwrap(),
        &source.slot,
        &source.publication,
    );
    options.status_interval = Duration::from_millis(100);
    options.backoff = Backoff {
        initial: Duration::from_millis(50),
        max: Duration::from_millis(500),
        max_attempts: Some(20),
    };
    let events = Arc::new(Mutex::new(Vec::new()));
    let pipeline = Pipeline::new(
        options,
        vec![Box::new(Collect(events.clone())) as Box<dyn Sink>],
    );
    let mut progress = pipeline.progress();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(pipeline.run(async move {
        let _ = stopped.await;
    }));
    write.await;
    tokio::time::timeout(TIMEOUT, progress.wait_for(|p| p.events >= count as u64))
        .await
        .expect("timed out waiting for the events")
        .expect("pipeline ended");
    let _ = stop.send(());
    task.await.unwrap().unwrap();
    let events = events.lock().unwrap().clone();
    events
}

#[tokio::test]
async fn table_schemas_carry_not_null_primary_key_and_type_names_from_the_catalog() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
             CREATE DOMAIN posint AS int CHECK (VALUE > 0);
             CREATE TABLE facts (a int, b text NOT NULL, m mood, d posint, c int NOT NULL,
                                 PRIMARY KEY (c, a));
             CREATE TABLE nokey (x int NOT NULL);",
        )
        .await
        .unwrap();
    let source = source(&db, &["facts", "nokey"], "pgcdc_facts").await;
    let events = collect(&source, 2, async {
        client
            .batch_execute(
                "INSERT INTO facts VALUES (1, 'b', 'ok', 5, 2);
                 INSERT INTO nokey VALUES (7);",
            )
            .await
            .unwrap();
    })
    .await;

    let facts = events
        .iter()
        .find(|e| e.table_name() == Some("facts"))
        .unwrap();
    let table = facts.table.as_deref().unwrap();
    let f = table
        .facts
        .get()
        .expect("facts were looked up before the sink got the event");
    let by_name = |n: &str| &f.columns[table.column_index(n).unwrap()];
    // A primary key column is NOT NULL by definition.
    assert!(by_name("a").not_null && by_name("a").primary_key);
    assert!(!by_name("m").not_null && !by_name("m").primary_key);
    assert!(by_name("b").not_null && !by_name("b").primary_key);
    assert!(by_name("c").not_null && by_name("c").primary_key);
    assert_eq!(by_name("b").type_name.as_deref(), Some("text"));
    assert_eq!(by_name("m").type_name.as_deref(), Some("mood"));
    let labels: Vec<&str> = by_name("m")
        .enum_labels
        .as_deref()
        .unwrap()
        .iter()
        .map(|l| &**l)
        .collect();
    assert_eq!(labels, ["sad", "ok", "happy"]);
    assert_eq!(by_name("d").domain_base_oid, Some(cdc_core::types::INT4));
    assert_eq!(by_name("d").type_name.as_deref(), Some("posint"));
    // The record key is the primary key, in column order.
    let key: Vec<&str> = table.key_columns().map(|(_, c)| &*c.name).collect();
    assert_eq!(key, ["a", "c"]);

    let nokey = events
        .iter()
        .find(|e| e.table_name() == Some("nokey"))
        .unwrap();
    let t = nokey.table.as_deref().unwrap();
    let f = t.facts.get().unwrap();
    assert!(f.columns[0].not_null && !f.columns[0].primary_key);
    assert!(!f.has_primary_key());
}

#[tokio::test]
async fn a_full_identity_update_takes_an_unchanged_toast_column_from_the_old_row() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    // 9,000 characters of md5 hex: too big to stay inline, too random to
    // compress below the TOAST threshold.
    client
        .batch_execute(
            "CREATE TABLE docs (id int PRIMARY KEY, n int, body text);
             ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
             ALTER TABLE docs REPLICA IDENTITY FULL;
             CREATE TABLE docs_default (id int PRIMARY KEY, n int, body text);
             ALTER TABLE docs_default ALTER COLUMN body SET STORAGE EXTERNAL;
             INSERT INTO docs SELECT 1, 0, string_agg(md5(g::text), '') FROM generate_series(1, 282) g;
             INSERT INTO docs_default SELECT id, n, body FROM docs;",
        )
        .await
        .unwrap();
    let body: String = client
        .query_one("SELECT left(body, 9000) FROM docs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(body.len(), 9000);
    let source = source(&db, &["docs", "docs_default"], "pgcdc_toast").await;
    let events = collect(&source, 2, async {
        client
            .batch_execute("UPDATE docs SET n = 1; UPDATE docs_default SET n = 1;")
            .await
            .unwrap();
    })
    .await;
    let update = |t: &str| {
        events
            .iter()
            .find(|e| e.table_name() == Some(t) && e.op == Operation::Update)
            .unwrap()
    };
    let full = update("docs");
    let after = full.after_values().unwrap();
    let before = full.before_values().unwrap();
    let full_body = match &after[2] {
        Value::Text(t) => t.to_string(),
        other => panic!("the new row's body is {other:?}, not the old row's text"),
    };
    assert_eq!(full_body.len(), 282 * 32);
    assert_eq!(after[2], before[2]);
    assert_eq!(after[1], Value::Int4(1));
    // Under the default identity the old row is not sent: the value stays
    // unknown (never null, never invented).
    let default = update("docs_default");
    assert!(default.before.is_none());
    assert_eq!(default.after_values().unwrap()[2], Value::UnchangedToast);
}
