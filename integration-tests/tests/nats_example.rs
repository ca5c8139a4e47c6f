//! The example JetStream consumer (`crates/cdc-runtime/examples/nats_consumer.rs`)
//! against the JetStream server on 127.0.0.1:4222: it prints one line per
//! event of its subject filter, acks each, stops at `--max` or after
//! `--idle-secs`, and its durable consumer goes on where the last run stopped.
//!
//! The test builds the example itself (`cargo build --example nats_consumer`),
//! so it runs from `cargo test -p integration-tests` alone too.

// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::PullConsumer, stream};
use integration_tests::eventually;
use serde_json::{json, Value as Json};

/// The JetStream server the tests share (.ci/run starts one when none runs).
const NATS_URL: &str = "nats://127.0.0.1:4222";

/// How long any awaited condition or run of the example may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Builds the example with the cargo that runs the tests, into the same
/// target directory, and returns the executable cargo reports.
///
/// `--workspace`: features unified over the workspace as `cargo test
/// --workspace` and `cargo build --workspace --examples` have them, so after
/// either the build is fresh (`-p cdc-runtime` would build a second copy of
/// the dependencies whose features differ).
fn build_example() -> PathBuf {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--workspace",
            "--example",
            "nats_consumer",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build --example nats_consumer failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Json>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "nats_consumer")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo reported no nats_consumer executable")
}

/// Runs the example with `args`; returns its stdout lines, failing on a
/// non-zero exit (with its stderr) or when it outlives [`TIMEOUT`].
async fn run_example(exe: &Path, args: &[&str]) -> Vec<String> {
    let child = tokio::process::Command::new(exe)
        .args(args)
        .env_remove("NATS_URL")
        .env_remove("NATS_STREAM")
        .env_remove("NATS_DURABLE")
        .env_remove("NATS_SUBJECT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start nats_consumer");
    let out = tokio::time::timeout(TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("nats_consumer {args:?} still running after {TIMEOUT:?}"))
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "nats_consumer {args:?} failed:\n{stderr}"
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Publishes `body` to `subject` with the NATS sink's two headers, and waits
/// for the stream to store it.
async fn publish(js: &jetstream::Context, subject: String, msg_id: &str, lsn: &str, body: Json) {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", msg_id);
    headers.insert("Pgcdc-Commit-Lsn", lsn);
    js.publish_with_headers(subject, headers, body.to_string().into())
        .await
        .unwrap()
        .await
        .unwrap();
}

/// Waits until the durable consumer has nothing delivered and unacked, and
/// `pending` messages of its filter not delivered yet.
async fn wait_for_consumer(consumer: &mut PullConsumer, pending: u64) {
    eventually(
        &format!("the consumer to have 0 unacked and {pending} pending messages"),
        TIMEOUT,
        || {
            let mut consumer = consumer.clone();
            async move {
                let info = consumer.info().await.unwrap();
                (info.num_ack_pending == 0 && info.num_pending == pending).then_some(())
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_consumer_prints_acks_and_resumes() {
    let exe = tokio::task::spawn_blocking(build_example).await.unwrap();

    let client = async_nats::connect(NATS_URL).await.unwrap();
    let js = jetstream::new(client);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let run = format!("{}_{nanos}", std::process::id());
    let stream_name = format!("PGCDC_EXAMPLE_{run}");
    let prefix = format!("pgcdcexample{run}");
    js.create_stream(stream::Config {
        name: stream_name.clone(),
        subjects: vec![format!("{prefix}.>")],
        storage: stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .unwrap();

    // The body runs as a task so that the stream is deleted even when an
    // assertion fails.
    let body = {
        let (js, stream_name) = (js.clone(), stream_name.clone());
        tokio::spawn(async move { check_example(&exe, &js, &stream_name, &prefix).await })
    };
    let outcome = body.await;
    js.delete_stream(&stream_name).await.unwrap();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn check_example(exe: &Path, js: &jetstream::Context, stream_name: &str, prefix: &str) {
    let orders = format!("{prefix}.public.orders");
    let row = |op: &str, before: Json, after: Json, lsn: u64| {
        json!({
            "before": before, "after": after, "op": op,
            "source": {"connector": "postgresql", "schema": "public", "table": "orders", "lsn": lsn},
        })
    };
    let events = [
        (
            "orders",
            "ex:0/1000:0",
            "0/1000",
            row("c", Json::Null, json!({"id": 1, "qty": 2}), 4096),
        ),
        // Another table's event: outside the consumer's subject filter.
        (
            "customers",
            "ex:0/1000:1",
            "0/1000",
            row("c", Json::Null, json!({"id": 7}), 4100),
        ),
        (
            "orders",
            "ex:0/1100:0",
            "0/1100",
            row("u", Json::Null, json!({"id": 1, "qty": 3}), 4352),
        ),
        (
            "orders",
            "ex:0/1200:0",
            "0/1200",
            row("d", json!({"id": 1}), Json::Null, 4608),
        ),
        // A `key = true` sink's tombstone after the delete.
        (
            "orders",
            "ex:0/1200:0:tombstone",
            "0/1200",
            json!({"key": {"id": 1}, "value": null}),
        ),
    ];
    for (table, msg_id, lsn, body) in events {
        publish(js, format!("{prefix}.public.{table}"), msg_id, lsn, body).await;
    }

    let common = [
        "--server",
        NATS_URL,
        "--stream",
        stream_name,
        "--durable",
        "example-test",
        "--subject",
        &orders,
        "--batch",
        "3",
    ];
    // --max 2 stops after two events and leaves the rest for the next run.
    let first = run_example(exe, &[&common[..], &["--max", "2"]].concat()).await;
    assert_eq!(
        first,
        [
            r#"c public.orders lsn=4096 after={"id":1,"qty":2} Nats-Msg-Id=ex:0/1000:0 Pgcdc-Commit-Lsn=0/1000"#,
            r#"u public.orders lsn=4352 after={"id":1,"qty":3} Nats-Msg-Id=ex:0/1100:0 Pgcdc-Commit-Lsn=0/1100"#,
        ]
    );
    let mut consumer: PullConsumer = js
        .get_stream(stream_name)
        .await
        .unwrap()
        .get_consumer("example-test")
        .await
        .unwrap();
    wait_for_consumer(&mut consumer, 2).await;

    // The durable consumer goes on after the last ack; --idle-secs ends the
    // run once the stream has nothing more.
    let second = run_example(exe, &[&common[..], &["--idle-secs", "1"]].concat()).await;
    assert_eq!(
        second,
        [
            r#"d public.orders lsn=4608 before={"id":1} Nats-Msg-Id=ex:0/1200:0 Pgcdc-Commit-Lsn=0/1200"#,
            r#"tombstone key={"id":1} Nats-Msg-Id=ex:0/1200:0:tombstone Pgcdc-Commit-Lsn=0/1200"#,
        ]
    );
    wait_for_consumer(&mut consumer, 0).await;
}
