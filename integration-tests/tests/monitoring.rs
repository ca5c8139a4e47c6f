//! The monitoring endpoint against a real job: `/metrics` carries the
//! job's counters, `/healthz` answers, and `/readyz` turns red when the
//! source goes away or the checkpoint store stops taking checkpoints, and
//! green again once they are back.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use cdc_runtime::monitor::Monitor;
use integration_tests::{eventually, ClusterOptions, TestDatabase, TestPostgres};
use pgcdc::config::Config;
use pgcdc::RunOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

const TIMEOUT: Duration = Duration::from_secs(60);

/// `GET path` on `addr`: the status code and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A sample's value in a `/metrics` body.
fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines().find_map(|l| {
        let (n, v) = l.rsplit_once(' ')?;
        (n == name).then(|| v.parse().ok()).flatten()
    })
}

struct Running {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<cdc_runtime::pipeline::Progress, cdc_runtime::JobError>>,
    addr: std::net::SocketAddr,
    _endpoint: pgcdc::http::Endpoint,
}

/// Runs a job over `public.t` of `db` into a file sink, checkpointing every
/// 300 ms (into `store` when given), with its endpoint on a free port.
async fn start(db: &TestDatabase, name: &str, store: Option<&TestDatabase>) -> Running {
    let dir = std::env::temp_dir().join(format!("pgcdc-mon-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = store
        .map(|s| format!("url = {:?}", s.connection_info().connection_string()))
        .unwrap_or_default();
    let text = format!(
        r#"
        {source}
        [pipeline]
        status_interval_secs = 1
        [[sinks]]
        type = "file"
        path = {path:?}
        [checkpoint]
        job = {name:?}
        interval_ms = 300
        {url}
        [metrics]
        listen = ":0"
        "#,
        source = db.source_toml(
            &["public.t"],
            &format!("{name}_slot"),
            &format!("{name}_pub")
        ),
        path = dir.join("events.jsonl").display().to_string(),
    );
    let config = Config::parse(&text).unwrap();
    config.check().unwrap();
    let monitor = Monitor::new();
    let endpoint = pgcdc::http::start(&config.metrics.listen, monitor.clone())
        .await
        .unwrap()
        .expect("an endpoint");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        pgcdc::run(
            &config,
            &RunOptions {
                monitor: Some(monitor),
                ..RunOptions::default()
            },
            async move {
                let _ = stopped.await;
            },
        )
        .await
    });
    Running {
        stop,
        task,
        addr: endpoint.addr,
        _endpoint: endpoint,
    }
}

async fn await_ready(addr: std::net::SocketAddr, ready: bool, what: &str) -> String {
    let want = if ready { 200 } else { 503 };
    eventually(what, TIMEOUT, || async {
        let (status, body) = get(addr, "/readyz").await;
        (status == want).then_some(body)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_readiness_follow_the_source() {
    let cluster = TestPostgres::dedicated(ClusterOptions::new())
        .await
        .unwrap();
    let db = cluster.create_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
        .await
        .unwrap();
    let job = start(&db, "mon", None).await;
    assert_eq!(get(job.addr, "/healthz").await.0, 200);
    await_ready(job.addr, true, "ready").await;
    client
        .batch_execute("INSERT INTO t SELECT i, 'n' FROM generate_series(1, 3) i; UPDATE t SET note = 'u' WHERE id = 1")
        .await
        .unwrap();
    let body = eventually("the events in /metrics", TIMEOUT, || async {
        let (_, body) = get(job.addr, "/metrics").await;
        // Counted when shipped; the latency once the sink flushed them.
        (sample(&body, r#"pgcdc_events_total{table="public.t",op="update"}"#) == Some(1.0)
            && sample(&body, "pgcdc_commit_to_flush_seconds_count{sink=\"0\"}").unwrap_or(0.0)
                >= 2.0)
            .then_some(body)
    })
    .await;
    assert_eq!(
        sample(&body, r#"pgcdc_events_total{table="public.t",op="insert"}"#),
        Some(3.0)
    );
    for name in [
        "pgcdc_commit_to_flush_seconds_count{sink=\"0\"}",
        "pgcdc_source_lag_bytes",
        "pgcdc_confirmed_lsn",
        "pgcdc_reconnects_total",
        "pgcdc_spilled_bytes_total",
        "pgcdc_build_info{version=\"0.1.0\"}",
        "pgcdc_sink_info{sink=\"0\",type=\"file\"}",
    ] {
        assert!(sample(&body, name).is_some(), "{name} missing:\n{body}");
    }
    assert!(sample(&body, "pgcdc_commit_to_flush_seconds_count{sink=\"0\"}").unwrap() >= 2.0);
    eventually(
        "checkpoints and the slot's WAL in /metrics",
        TIMEOUT,
        || async {
            let (_, body) = get(job.addr, "/metrics").await;
            (sample(&body, "pgcdc_checkpoints_saved_total").unwrap_or(0.0) > 0.0
                && sample(&body, "pgcdc_slot_retained_wal_bytes").unwrap_or(0.0) > 0.0
                && sample(&body, "pgcdc_checkpoint_age_seconds").is_some()
                && sample(&body, "pgcdc_checkpoint_duration_seconds_count").unwrap_or(0.0) > 0.0)
                .then_some(())
        },
    )
    .await;

    // The source goes away (a crash: a fast shutdown waits for the job to
    // confirm everything sent, which it does only up to a durable
    // checkpoint, stored in this same server): red, with the reason.
    drop(client);
    cluster.kill().await.unwrap();
    let down = Instant::now();
    let body = await_ready(job.addr, false, "not ready while the source is down").await;
    let red_after = down.elapsed();
    assert!(body.contains("not connected"), "{body}");
    assert_eq!(get(job.addr, "/healthz").await.0, 200, "alive all the same");
    cluster.start().await.unwrap();
    let up = Instant::now();
    await_ready(job.addr, true, "ready again").await;
    let green_after = up.elapsed();
    println!(
        "source down: red after {:.2} s; back: green after {:.2} s",
        red_after.as_secs_f64(),
        green_after.as_secs_f64()
    );
    let (_, body) = get(job.addr, "/metrics").await;
    assert!(sample(&body, "pgcdc_reconnects_total").unwrap() >= 1.0);
    job.stop.send(()).unwrap();
    job.task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_is_red_while_the_checkpoint_store_is_down() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
        .await
        .unwrap();
    let store_cluster = TestPostgres::dedicated(ClusterOptions::new())
        .await
        .unwrap();
    let store = store_cluster.create_database().await.unwrap();
    let job = start(&db, "monstore", Some(&store)).await;
    await_ready(job.addr, true, "ready").await;
    store_cluster.stop().await.unwrap();
    let down = Instant::now();
    // Changes keep the job checkpointing (and failing to).
    let writer = async {
        for i in 0.. {
            client
                .execute("INSERT INTO t VALUES ($1, 'w')", &[&i])
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let body = tokio::select! {
        b = await_ready(job.addr, false, "not ready while checkpoints fail") => b,
        () = writer => unreachable!(),
    };
    let red_after = down.elapsed();
    assert!(body.contains("checkpoint"), "{body}");
    store_cluster.start().await.unwrap();
    let up = Instant::now();
    await_ready(job.addr, true, "ready once checkpoints are saved again").await;
    println!(
        "checkpoint store down: red after {:.2} s (3 intervals = 0.9 s); back: green after {:.2} s",
        red_after.as_secs_f64(),
        up.elapsed().as_secs_f64()
    );
    job.stop.send(()).unwrap();
    job.task.await.unwrap().unwrap();
}

/// `data-<name>="…"` of the element `id="<id>"` in `dom`.
fn attribute(dom: &str, id: &str, name: &str) -> Option<String> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let tag_start = dom[..at].rfind('<')?;
    let tag_end = at + dom[at..].find('>')?;
    let tag = &dom[tag_start..tag_end];
    let key = format!("data-{name}=\"");
    let from = tag.find(&key)? + key.len();
    Some(tag[from..].split('"').next()?.to_owned())
}

/// The status page in a real browser (headless Chromium): it loads from a
/// running job, its plots hold data points, no script error occurs, and a
/// screenshot is kept in `target/test-artifacts/status-page.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_the_job_in_a_browser() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
        .await
        .unwrap();
    let job = start(&db, "page", None).await;
    await_ready(job.addr, true, "ready").await;
    // A few seconds of traffic: the plots get a point a second.
    for i in 0..40 {
        client
            .execute("INSERT INTO t VALUES ($1, 'n')", &[&i])
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let url = format!("http://{}/", job.addr);
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("Chromium is needed for this test: apt-get install chromium (.ci/run installs it)");
    let browser = |extra: &[&str]| {
        let mut cmd = tokio::process::Command::new(chromium);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1280,1100",
            "--virtual-time-budget=5000",
        ])
        .args(extra)
        .arg(&url)
        .kill_on_drop(true);
        cmd
    };
    let out = tokio::time::timeout(TIMEOUT, browser(&["--dump-dom"]).output())
        .await
        .expect("chromium timed out")
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    for plot in ["lag-plot", "rate-plot"] {
        let n: usize = attribute(&dom, plot, "points")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!(n >= 2, "{plot} has {n} points:\n{dom}");
    }
    assert!(
        dom.contains("data-errors=\"0\""),
        "script errors:\n{dom}\n{log}"
    );
    assert!(dom.contains(">page<"), "the job's name:\n{dom}");
    assert!(dom.contains(">ready<"), "the readiness badge:\n{dom}");
    for bad in ["Uncaught", "Refused to", "CONSOLE(0)] \"Failed"] {
        assert!(!log.contains(bad), "console: {bad}\n{log}");
    }
    // The screenshot, kept as an artifact.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    let shot = dir.join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let arg = format!("--screenshot={}", shot.display());
    let out = tokio::time::timeout(TIMEOUT, browser(&[arg.as_str()]).output())
        .await
        .expect("chromium timed out")
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    println!("status page screenshot: {}", shot.display());
    job.stop.send(()).unwrap();
    job.task.await.unwrap().unwrap();
}
