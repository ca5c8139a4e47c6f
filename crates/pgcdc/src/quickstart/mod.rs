//! `pgcdc quickstart`: the whole promise of pgcdc in under a minute, on a
//! machine with nothing but the PostgreSQL server programs.
//!
//! [`run`] starts a throwaway server ([`throwaway_pg`]), creates
//! `public.orders`, writes a `pgcdc.toml` (Debezium JSON file sink, 500 ms
//! checkpoints into the same server, a `keyed_aggregate` and
//! `table_counters`), and runs `pgcdc run` as a child process while a
//! background writer changes the table. It SIGKILLs the child mid-stream,
//! writes more while it is down, restarts it, waits until a checkpoint covers
//! the server's WAL position and stops it with SIGTERM. Then it checks:
//!
//! - every committed change is in the events file (duplicates from the
//!   replay after a crash are allowed and counted; they are recognised by
//!   Debezium's `transaction.id` + `transaction.total_order`), and the
//!   distinct events replay to the table's contents;
//! - the slot is not confirmed past the oldest retained checkpoint;
//! - the aggregate in the newest checkpoint equals SQL's `GROUP BY`, and the
//!   table counters count each change exactly once.
//!
//! Failed checks are in the [`Report`]; [`QuickstartError`] is for a run that
//! could not get that far.

mod child;
mod error;
mod events;
mod report;
mod workload;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cdc_core::Lsn;
use checkpoint_api::{CheckpointStore, JobName};
use tokio_postgres::{Client, NoTls};

use crate::config::Config;
use cdc_runtime::operators::{Group, GroupKey, KeyedAggregate, KeyedAggregateSpec, TableCounters};
use child::PgcdcChild;
use throwaway_pg::{ClusterSpec, EmbeddedCluster};
use workload::{Writer, TABLE};

pub use error::QuickstartError;
pub use report::{Check, Files, Report};
pub use workload::Written;

const JOB: &str = "quickstart";
const AGGREGATE: &str = "order_totals";
const COUNTERS: &str = "counts";
/// How long any single awaited condition may take.
const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(25);
/// Writer rounds committed while `pgcdc run` is down, per crash.
const ROUNDS_WHILE_DOWN: u64 = 40;

/// What [`run`] does.
#[derive(Debug, Clone)]
pub struct QuickstartOptions {
    /// Where the config, events and log go (created if missing). `None`: a
    /// new directory under the system temp dir.
    pub dir: Option<PathBuf>,
    /// Keep the files and the (stopped) cluster's directory afterwards.
    pub keep: bool,
    /// How often `pgcdc run` is SIGKILLed mid-stream.
    pub kills: usize,
    /// The `pgcdc` binary to run as the child (usually `std::env::current_exe()`).
    pub pgcdc: PathBuf,
}

/// Runs the quickstart; `progress` receives one line per step.
pub async fn run(
    options: &QuickstartOptions,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Report, QuickstartError> {
    let started = Instant::now();
    let (dir, created_dir) = prepare_dir(options.dir.as_deref())?;
    let files = Files {
        config: dir.join("pgcdc.toml"),
        events: dir.join("events.jsonl"),
        event_files: Vec::new(),
        log: dir.join("pgcdc.log"),
        cluster: PathBuf::new(),
        kept: options.keep,
    };
    progress("starting a throwaway PostgreSQL (wal_level=logical) ...");
    let spec = ClusterSpec::new().keep_files(options.keep);
    let created = tokio::task::spawn_blocking(move || EmbeddedCluster::create(&spec))
        .await
        .map_err(|e| QuickstartError::Task(e.to_string()))
        .and_then(|r| r.map_err(QuickstartError::from));
    let cluster = match created {
        Ok(c) => c,
        Err(e) => {
            remove_files(&dir, created_dir);
            return Err(e);
        }
    };
    let cluster = Arc::new(cluster);
    progress(&format!(
        "  {} on 127.0.0.1:{}, data in {}",
        cluster.server_version(),
        cluster.port(),
        cluster.root_dir().display()
    ));
    let result = demo(options, &cluster, files, progress, started).await;
    // Stop the server (pg_ctl blocks) and remove what is not kept.
    let _ = tokio::task::spawn_blocking(move || drop(cluster)).await;
    if !options.keep {
        remove_files(&dir, created_dir);
    }
    result.map(|mut report| {
        report.elapsed = started.elapsed();
        report
    })
}

async fn demo(
    options: &QuickstartOptions,
    cluster: &EmbeddedCluster,
    mut files: Files,
    progress: &mut (dyn FnMut(&str) + Send),
    started: Instant,
) -> Result<Report, QuickstartError> {
    files.cluster = cluster.root_dir().to_path_buf();
    let conninfo = cluster.connection_string("postgres");
    let client = connect(&conninfo).await?;
    client
        .batch_execute(workload::CREATE_TABLE)
        .await
        .map_err(QuickstartError::pg("create the demo table"))?;
    client
        .batch_execute(workload::SEED)
        .await
        .map_err(QuickstartError::pg("fill the demo table"))?;
    std::fs::write(&files.config, config_text(cluster.port(), &files.events))
        .map_err(|e| QuickstartError::io("write", &files.config, e))?;
    let config = Config::load(&files.config)?;
    progress(&format!(
        "created {TABLE} with {} rows; wrote {}",
        workload::SEED_ROWS,
        files.config.display()
    ));

    progress("starting `pgcdc run` (it creates the publication and the slot) ...");
    let mut child = PgcdcChild::spawn(&options.pgcdc, &files.config, &files.log)?;
    let job = JobName::new(JOB).map_err(|e| QuickstartError::Task(e.to_string()))?;
    await_condition("the slot to be created", &mut child, || async {
        Ok(!slot_confirmed(&client).await?.is_invalid())
    })
    .await?;
    let cc = config.checkpoint.as_ref().ok_or_else(|| {
        QuickstartError::OpenStore("the generated configuration has no [checkpoint]".into())
    })?;
    let store = config
        .store_options(cc)?
        .open()
        .await
        .map_err(|e| QuickstartError::OpenStore(e.to_string()))?;

    let writer = Writer::start(connect(&conninfo).await?);
    progress("writing orders in the background ...");
    let mut seed = seed();
    let mut written_while_down = 0u64;
    for kill in 1..=options.kills {
        // A deliberate random moment, mid-stream.
        let delay = Duration::from_millis(700 + xorshift(&mut seed) % 900);
        tokio::time::sleep(delay).await;
        if let Some(status) = child.exited()? {
            return Err(QuickstartError::PgcdcExited {
                status: status.to_string(),
                log: child.log_tail(),
            });
        }
        child.sigkill().await?;
        let before = writer.rounds();
        let changes_before = writer.changes();
        progress(&format!(
            "crash {kill}/{}: SIGKILLed `pgcdc run` mid-stream; writing more while it is down ...",
            options.kills
        ));
        await_writer(&writer, before + ROUNDS_WHILE_DOWN).await?;
        written_while_down += writer.changes() - changes_before;
        child = PgcdcChild::spawn(&options.pgcdc, &files.config, &files.log)?;
        progress("  restarted `pgcdc run`; it resumes from its newest checkpoint");
    }
    // Let the last instance run a little under load too.
    let before = writer.rounds();
    await_writer(&writer, before + ROUNDS_WHILE_DOWN).await?;
    let written = writer.finish().await?;

    let end = current_wal(&client).await?;
    progress(&format!(
        "stopped writing at {end}; waiting for a checkpoint at or past it ..."
    ));
    await_condition(
        "a checkpoint covering the server's WAL",
        &mut child,
        || async {
            let list = store.list(&job).await?;
            Ok(list.iter().any(|m| m.commit_end_lsn >= end))
        },
    )
    .await?;
    let status = child.sigterm(WAIT).await?;
    progress(&format!("stopped `pgcdc run` with SIGTERM ({status})"));

    let mut checks = vec![Check {
        name: "clean shutdown",
        ok: status.success(),
        detail: format!("`pgcdc run` exited with {status} after SIGTERM"),
    }];
    let delivered = events::read(&files.events, TABLE)?;
    files.event_files = delivered.files.clone();
    checks.push(Check {
        name: "nothing missing",
        ok: delivered.distinct == written,
        detail: format!(
            "written {written:?}, distinct events delivered {:?}",
            delivered.distinct
        ),
    });
    let table = table_rows(&client).await?;
    checks.push(Check {
        name: "replay equals table",
        ok: delivered.replayed == table,
        detail: format!(
            "{} rows replayed from the events, {} rows in {TABLE}",
            delivered.replayed.len(),
            table.len()
        ),
    });

    let checkpoints = store.list(&job).await?;
    let slot = slot_confirmed(&client).await?;
    let oldest = checkpoints.first().map(|m| m.commit_end_lsn);
    checks.push(Check {
        name: "slot behind retained checkpoints",
        ok: oldest.is_some_and(|o| slot <= o),
        detail: format!("confirmed_flush_lsn {slot}, oldest retained checkpoint {oldest:?}"),
    });

    let latest = store.latest(&job).await?;
    let newest = latest
        .checkpoint
        .ok_or_else(|| QuickstartError::Task("no checkpoint was stored".into()))?;
    let mut aggregate = KeyedAggregate::new(KeyedAggregateSpec {
        id: AGGREGATE.into(),
        schema: "public".into(),
        table: "orders".into(),
        key: "customer".into(),
        value: "amount".into(),
    });
    let mut counters = TableCounters::new(COUNTERS);
    let restore = |id: &str, op: &mut dyn checkpoint_api::StatefulOperator| {
        newest
            .checkpoint
            .operator(id)
            .ok_or_else(|| format!("the newest checkpoint has no operator {id:?}"))
            .and_then(|state| state.restore_into(op).map_err(|e| e.to_string()))
    };
    let restored = restore(AGGREGATE, &mut aggregate).and(restore(COUNTERS, &mut counters));
    let sql = sql_aggregate(&client).await?;
    let mut joined: std::collections::BTreeMap<GroupKey, (Option<Group>, Option<Group>)> =
        Default::default();
    for (k, g) in aggregate.groups() {
        joined.entry(k.clone()).or_default().0 = Some(*g);
    }
    for (k, g) in &sql {
        joined.entry(k.clone()).or_default().1 = Some(*g);
    }
    checks.push(Check {
        name: "aggregate equals SQL",
        ok: restored.is_ok() && aggregate.groups() == &sql,
        detail: match &restored {
            Err(e) => e.clone(),
            Ok(()) => format!(
                "{} groups checkpointed, {} from SQL",
                aggregate.groups().len(),
                sql.len()
            ),
        },
    });
    let counted = counters.totals().get(TABLE).copied();
    checks.push(Check {
        name: "counters count each change once",
        ok: counted.is_some_and(|c| {
            (c.inserts, c.updates, c.deletes) == (written.inserts, written.updates, written.deletes)
        }),
        detail: format!("table_counters {counted:?}, written {written:?}"),
    });

    Ok(Report {
        server_version: cluster.server_version().to_owned(),
        port: cluster.port(),
        kills: options.kills,
        written,
        written_while_down,
        delivered_lines: delivered.lines,
        snapshot_reads: delivered.reads,
        distinct: delivered.distinct,
        operator_lines: delivered.operator_lines,
        transaction_lines: delivered.transaction_lines,
        checkpoints,
        slot_confirmed: slot,
        aggregate: joined,
        counters: counted,
        checks,
        files,
        elapsed: started.elapsed(),
    })
}

/// The configuration `pgcdc run` gets.
fn config_text(port: u16, events: &Path) -> String {
    format!(
        r#"# Written by `pgcdc quickstart`.
[source]
host = "127.0.0.1"
port = {port}
database = "postgres"
user = "postgres"
sslmode = "disable"
tables = ["{TABLE}"]
slot = "quickstart"
publication = "quickstart"

[pipeline]
status_interval_secs = 1

[[sinks]]
type = "file"
path = {events:?}
format = "debezium"

[debezium]
"topic.prefix" = "quickstart"
# The `transaction` block (id, total_order), by which duplicates are recognised.
"provide.transaction.metadata" = true

[checkpoint]
job = "{JOB}"
interval_ms = 500
keep = 3

# The monitoring endpoint (status page, /metrics, /readyz) on any free port,
# logged at start; `pgcdc run` listens on 127.0.0.1:9187 by default.
[metrics]
listen = ":0"

[[operators]]
type = "keyed_aggregate"
id = "{AGGREGATE}"
table = "{TABLE}"
key = "customer"
value = "amount"

[[operators]]
type = "table_counters"
id = "{COUNTERS}"
"#,
        events = events.display().to_string(),
    )
}

/// Polls `probe` until it holds, `pgcdc run` exits, or [`WAIT`] passes.
async fn await_condition<F, Fut>(
    what: &str,
    child: &mut PgcdcChild,
    mut probe: F,
) -> Result<(), QuickstartError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, QuickstartError>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if probe().await? {
            return Ok(());
        }
        if let Some(status) = child.exited()? {
            return Err(QuickstartError::PgcdcExited {
                status: status.to_string(),
                log: child.log_tail(),
            });
        }
        if Instant::now() >= deadline {
            return Err(QuickstartError::Timeout {
                what: what.to_owned(),
                log: child.log_tail(),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the writer has committed `rounds` rounds.
async fn await_writer(writer: &Writer, rounds: u64) -> Result<(), QuickstartError> {
    let deadline = Instant::now() + WAIT;
    while writer.rounds() < rounds {
        if writer.is_finished() || Instant::now() >= deadline {
            return Err(QuickstartError::Timeout {
                what: "the background writer".to_owned(),
                log: String::new(),
            });
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// A seed for the kill delays: differs from run to run.
fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (u64::from(std::process::id()) << 32 | u64::from(nanos)) | 1
}

fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

async fn connect(conninfo: &str) -> Result<Client, QuickstartError> {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls)
        .await
        .map_err(QuickstartError::pg("connect to the throwaway server"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

async fn lsn(client: &Client, sql: &str, context: &'static str) -> Result<Lsn, QuickstartError> {
    let row = client
        .query_opt(sql, &[])
        .await
        .map_err(QuickstartError::pg(context))?;
    Ok(row
        .and_then(|r| r.get::<_, Option<String>>(0))
        .and_then(|s| s.parse().ok())
        .unwrap_or(Lsn::INVALID))
}

async fn slot_confirmed(client: &Client) -> Result<Lsn, QuickstartError> {
    lsn(
        client,
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'quickstart'",
        "read the slot",
    )
    .await
}

async fn current_wal(client: &Client) -> Result<Lsn, QuickstartError> {
    lsn(
        client,
        "SELECT pg_current_wal_lsn()::text",
        "read the WAL position",
    )
    .await
}

async fn table_rows(client: &Client) -> Result<events::Rows, QuickstartError> {
    Ok(client
        .query(
            "SELECT id, customer::int8, amount::int8 FROM public.orders",
            &[],
        )
        .await
        .map_err(QuickstartError::pg("read the demo table"))?
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect())
}

async fn sql_aggregate(
    client: &Client,
) -> Result<std::collections::BTreeMap<GroupKey, Group>, QuickstartError> {
    Ok(client
        .query(
            "SELECT customer::text, count(*), coalesce(sum(amount), 0)::int8 \
             FROM public.orders GROUP BY customer",
            &[],
        )
        .await
        .map_err(QuickstartError::pg("aggregate the demo table"))?
        .iter()
        .map(|r| {
            (
                r.get(0),
                Group {
                    count: r.get(1),
                    sum: i128::from(r.get::<_, i64>(2)),
                },
            )
        })
        .collect())
}

/// The quickstart's directory: the given one (created if missing; files of
/// an earlier quickstart in it are removed) or a new one under the temp dir.
/// Returns whether it was created here.
fn prepare_dir(dir: Option<&Path>) -> Result<(PathBuf, bool), QuickstartError> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::temp_dir().join(format!("pgcdc-quickstart-{}", std::process::id())),
    };
    if dir.is_dir() {
        // A previous `--keep` run's files would be counted as this run's events.
        remove_files(&dir, false);
        return Ok((dir, false));
    }
    std::fs::create_dir_all(&dir).map_err(|e| QuickstartError::io("create", &dir, e))?;
    Ok((dir, true))
}

/// Removes the quickstart's files (and the directory if it was created here).
fn remove_files(dir: &Path, created: bool) {
    let base = dir.join("events.jsonl");
    for file in cdc_runtime::sinks::FileSink::files(&base).unwrap_or_default() {
        let _ = std::fs::remove_file(file);
    }
    for name in ["pgcdc.toml", "pgcdc.log"] {
        let _ = std::fs::remove_file(dir.join(name));
    }
    if created {
        let _ = std::fs::remove_dir(dir);
    }
}
