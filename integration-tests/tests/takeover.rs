//! A hot standby under load: `pgcdc run --standby` processes take the job
//! over, ten times, from an active instance that is SIGKILLed (its sessions
//! close at once) or SIGSTOPped (its sessions stay open: the standby sees its
//! lock session go silent and ends it). A frozen instance is woken after the
//! takeover and must stop by itself, fenced, without writing a sink row or a
//! checkpoint. The PostgreSQL sink commits its rows with the checkpoints
//! (exactly once), and a trigger on the target records which instance
//! (its sink's `application_name`) committed each row.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::{eventually, TestDatabase, TestPostgres};
use tokio_postgres::Client;

const TAKEOVERS: usize = 10;
const TIMEOUT: Duration = Duration::from_secs(60);
const JOB: &str = "takeover";

/// One `pgcdc run --standby` process, with its own config (its sink's
/// `application_name` names it) and log.
struct Instance {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Instance {
    fn start(dir: &Path, db: &TestDatabase, n: usize) -> Instance {
        let name = format!("inst{n}");
        let source = db.source_toml(&["public.items"], "takeover_slot", "takeover_pub");
        let target_url = format!(
            "{} application_name=pgcdc-{name}",
            db.connection_info().connection_string()
        );
        let text = format!(
            r#"
            {source}
            [pipeline]
            status_interval_secs = 1

            [[sinks]]
            type = "postgres"
            url = {target_url:?}
            exactly_once = true
            tables = {{ "public.items" = "replica.items" }}

            [checkpoint]
            job = "{JOB}"
            interval_ms = 500
            keep = 50
            "#
        );
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, text).unwrap();
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(integration_tests::pgcdc_binary().unwrap())
            .args(["run", "--standby", "--config"])
            .arg(&config)
            .env("PGCDC_METRICS_LISTEN", ":0")
            .env(
                "RUST_LOG",
                std::env::var("PGCDC_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Instance { name, child, log }
    }

    fn app(&self) -> String {
        format!("pgcdc-{}", self.name)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {}", self.name);
    }

    /// Waits for the process to exit by itself; its exit code.
    async fn exited(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit; its log:\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Rows the instance named `app` committed into the target.
async fn rows_by(client: &Client, app: &str) -> i64 {
    client
        .query_one("SELECT count(*) FROM replica.audit WHERE app = $1", &[&app])
        .await
        .unwrap()
        .get(0)
}

async fn epoch(client: &Client) -> i64 {
    client
        .query_one(
            "SELECT epoch FROM pgcdc.checkpoints_leases WHERE job = $1",
            &[&JOB],
        )
        .await
        .unwrap()
        .get(0)
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2
    }
}

#[tokio::test]
async fn ten_takeovers_by_a_standby_lose_nothing_and_fence_the_frozen() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE items (id bigint PRIMARY KEY);
             CREATE SCHEMA replica;
             CREATE TABLE replica.items (id bigint PRIMARY KEY);
             CREATE TABLE replica.audit (id bigint, app text, at timestamptz DEFAULT clock_timestamp());
             CREATE FUNCTION replica.audit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               INSERT INTO replica.audit (id, app) VALUES (NEW.id, current_setting('application_name'));
               RETURN NEW;
             END $$;
             CREATE TRIGGER audit AFTER INSERT OR UPDATE ON replica.items
               FOR EACH ROW EXECUTE FUNCTION replica.audit();",
        )
        .await
        .unwrap();
    // Kept when the test fails: the instances' logs.
    let dir = std::env::temp_dir().join(format!("pgcdc-takeover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    println!("logs in {}", dir.display());
    let mut next = 0;
    let mut start = |db: &TestDatabase| {
        next += 1;
        Instance::start(&dir, db, next)
    };

    let mut active = start(&db);
    eventually("the first instance to stream", TIMEOUT, || async {
        let rows: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'takeover_slot' AND active",
                &[],
            )
            .await
            .ok()?
            .get(0);
        (rows == 1).then_some(())
    })
    .await;
    let mut standby = start(&db);

    // The writer: unique ids in small transactions, as fast as it goes.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let client = db.connect().await.unwrap();
        tokio::spawn(async move {
            let mut committed = BTreeSet::new();
            let mut next = 1i64;
            while !stop.load(Ordering::Relaxed) {
                let ids: Vec<i64> = (next..next + 10).collect();
                next += 10;
                client
                    .execute("INSERT INTO items SELECT unnest($1::bigint[])", &[&ids])
                    .await
                    .unwrap();
                committed.extend(ids);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            committed
        })
    };

    let mut times = Vec::new();
    let mut fenced_rows = 0;
    for round in 0..TAKEOVERS {
        // Both in place: the active one commits rows, the standby waits.
        eventually("the active instance to commit rows", TIMEOUT, || async {
            (rows_by(&client, &active.app()).await > 0).then_some(())
        })
        .await;
        eventually("the standby to stand by", TIMEOUT, || async {
            standby.log().contains("standing by").then_some(())
        })
        .await;
        let freeze = round % 2 == 1;
        let epoch_before = epoch(&client).await;
        let died = Instant::now();
        active.signal(if freeze { "-STOP" } else { "-KILL" });
        eventually("the standby's first row", TIMEOUT, || async {
            (rows_by(&client, &standby.app()).await > 0).then_some(())
        })
        .await;
        let took = died.elapsed();
        // The lease moved on before that row committed: whatever the old
        // instance committed is in by now, and it may commit nothing more.
        let before = rows_by(&client, &active.app()).await;
        times.push(took);
        assert!(epoch(&client).await > epoch_before, "the lease moved on");
        println!(
            "takeover {}: {} after {:?}",
            round + 1,
            if freeze { "SIGSTOP" } else { "SIGKILL" },
            took
        );
        let replacement = start(&db);
        let mut old = std::mem::replace(&mut active, std::mem::replace(&mut standby, replacement));
        if freeze {
            // The frozen instance wakes, finds itself fenced and stops, having
            // written nothing more.
            old.signal("-CONT");
            let code = old.exited(TIMEOUT).await;
            let log = old.log();
            assert_eq!(code, Some(5), "the fenced instance's exit; its log:\n{log}");
            assert!(
                log.contains("fenced: another instance took over job"),
                "{log}"
            );
            let after = rows_by(&client, &old.app()).await;
            fenced_rows += after - before;
            // No checkpoint under the old epoch after the takeover.
            let stale: i64 = client
                .query_one(
                    "SELECT count(*) FROM pgcdc.checkpoints WHERE job = $1 AND writer_epoch = $2 \
                     AND saved_at > (SELECT acquired_at FROM pgcdc.checkpoints_leases WHERE job = $1)",
                    &[&JOB, &epoch_before],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(stale, 0, "a checkpoint saved by the fenced instance");
        } else {
            assert!(old.exited(TIMEOUT).await.is_none(), "killed by a signal");
        }
    }
    assert_eq!(fenced_rows, 0, "rows committed by a fenced instance");

    stop.store(true, Ordering::Relaxed);
    let committed = writer.await.unwrap();
    let last = *committed.last().unwrap();
    eventually("the last row at the sink", TIMEOUT, || async {
        let n: i64 = client
            .query_one("SELECT count(*) FROM replica.items WHERE id = $1", &[&last])
            .await
            .ok()?
            .get(0);
        (n == 1).then_some(())
    })
    .await;
    let delivered: BTreeSet<i64> = client
        .query("SELECT id FROM replica.items", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let lost = committed.difference(&delivered).count();
    let phantom = delivered.difference(&committed).count();
    let kill: Vec<Duration> = times.iter().step_by(2).copied().collect();
    let stop_: Vec<Duration> = times.iter().skip(1).step_by(2).copied().collect();
    println!(
        "{TAKEOVERS} takeovers, {} ids: lost {lost}, phantom {phantom}, rows by fenced instances {fenced_rows}; \
         takeover times {times:?}; median {:?} (SIGKILL {:?}, SIGSTOP {:?})",
        committed.len(),
        median(&times),
        median(&kill),
        median(&stop_),
    );
    assert_eq!(lost, 0, "ids lost");
    assert_eq!(phantom, 0, "ids never written");
    // A clean stop of the last two.
    active.signal("-TERM");
    assert_eq!(active.exited(TIMEOUT).await, Some(0), "{}", active.log());
    standby.signal("-TERM");
    assert_eq!(standby.exited(TIMEOUT).await, Some(0), "{}", standby.log());
    drop((active, standby));
    let _ = std::fs::remove_dir_all(&dir);
}
