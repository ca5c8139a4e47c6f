//! `pgcdc`: stream PostgreSQL changes into sinks.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use cdc_runtime::checkpoint::{slot_state, SlotLoss, SlotLostError};
use cdc_runtime::job::JobLock;
use cdc_runtime::replication::{ReplicationConnection, ReplicationError};
use cdc_runtime::setup::{
    prepare, DdlCapture, PublicationChange, SetupError, SetupMode, SignalTable,
};
use cdc_runtime::source::{OnSlotLost, SourceOptions};
use checkpoint_api::{CheckpointId, CheckpointStore, JobName, OwnerId};
use clap::Parser;
use pgcdc::config::{Config, ConfigFileError};
use pgcdc::exit::ExitKind;
use pgcdc::inspect;
use pgcdc::logging::{init_logging, EXIT_TARGET};

use cli::{CheckpointsAction, Cli, Command, SlotAction};

/// With the `mimalloc` feature, mimalloc; else the system allocator, the
/// default (see the `mimalloc` feature in Cargo.toml).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is
/// called, not when the future is first polled: a job polls it only once it
/// streams, and a SIGTERM during startup (setup, slot creation) would
/// otherwise kill the process instead of stopping it cleanly.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let (term, interrupt) = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::terminate()).ok(),
            signal(SignalKind::interrupt()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let term = async {
                match term {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            let interrupt = async {
                match interrupt {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => {
                        let _ = tokio::signal::ctrl_c().await;
                    }
                }
            };
            tokio::select! {
                _ = term => {}
                _ = interrupt => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutdown requested: flushing sinks");
    }
}

/// Why a command failed, and so how pgcdc exits.
#[derive(Debug)]
struct Failure {
    kind: ExitKind,
    message: String,
}

impl Failure {
    fn new(kind: ExitKind, message: impl std::fmt::Display) -> Failure {
        Failure {
            kind,
            message: message.to_string(),
        }
    }

    /// Exit status 1.
    fn other(message: impl std::fmt::Display) -> Failure {
        Failure::new(ExitKind::Failure, message)
    }

    /// A replication connection that could not be opened.
    fn connect(e: &ReplicationError) -> Failure {
        Failure::new(
            ExitKind::of_connect(e),
            format_args!("cannot connect to the source: {e}"),
        )
    }

    /// A checkpoint store error.
    fn store(e: &checkpoint_api::CheckpointError) -> Failure {
        Failure::new(ExitKind::of_store(e), format_args!("checkpoint store: {e}"))
    }
}

impl From<pgcdc::signal::RequestError> for Failure {
    fn from(e: pgcdc::signal::RequestError) -> Failure {
        let kind = if e.is_usage() {
            ExitKind::Config
        } else if e.is_connect() {
            ExitKind::Connect
        } else {
            ExitKind::Failure
        };
        Failure::new(kind, e)
    }
}

impl From<ConfigFileError> for Failure {
    fn from(e: ConfigFileError) -> Failure {
        Failure::new(ExitKind::Config, e)
    }
}

impl From<cdc_runtime::job::JobError> for Failure {
    fn from(e: cdc_runtime::job::JobError) -> Failure {
        Failure::new(ExitKind::of_job(&e), e)
    }
}

/// A failed check of `pgcdc validate`.
fn setup_failure(e: SetupError) -> Failure {
    match e {
        SetupError::Connection(e) => Failure::new(ExitKind::of_connect(&e), e),
        other => Failure::other(other),
    }
}

async fn validate(config: &Config) -> Result<(), Failure> {
    let source = config.source.source_options()?;
    tracing::info!(connection = %source.replication, "connecting");
    let mut conn = ReplicationConnection::connect(&source.replication)
        .await
        .map_err(|e| Failure::connect(&e))?;
    let result = check_server(&mut conn, &source).await;
    let _ = conn.close().await;
    let mut lines = result?;
    let ok = lines.pop();
    lines.extend(format_lines(config)?);
    lines.extend(nats_lines(config).await?);
    lines.extend(ok);
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

/// `pgcdc validate`'s lines on what each JSON sink writes: for the
/// Debezium format, every setting that changes the shape, by Debezium's
/// name, with its value.
fn format_lines(config: &Config) -> Result<Vec<String>, Failure> {
    let debezium = config.debezium.options()?;
    let mut lines = Vec::new();
    for (i, sink) in config.sinks.iter().enumerate() {
        let kind = match sink {
            pgcdc::config::SinkConfig::Stdout { .. } => "stdout",
            pgcdc::config::SinkConfig::File { .. } => "file",
            _ => continue,
        };
        match sink.options(&debezium)?.json_format() {
            Some(cdc_runtime::encoding::JsonFormat::Debezium(o)) => {
                let settings: Vec<String> = o
                    .settings()
                    .into_iter()
                    .map(|(name, value)| format!("{name}={value}"))
                    .collect();
                lines.push(format!(
                    "sinks[{i}] ({kind}) writes the Debezium format: {}",
                    settings.join(", ")
                ));
            }
            Some(cdc_runtime::encoding::JsonFormat::Plain) => {
                lines.push(format!("sinks[{i}] ({kind}) writes the plain format"));
            }
            None => {}
        }
    }
    Ok(lines)
}

/// `pgcdc validate`'s lines on each NATS sink's stream: whether it exists
/// or would be created, and its settings; a stream `pgcdc run` would refuse
/// (subjects that miss the sink's, a duplicate window shorter than a
/// replay) fails validation with the same message.
async fn nats_lines(config: &Config) -> Result<Vec<String>, Failure> {
    let debezium = config.debezium.options()?;
    let mut lines = Vec::new();
    for (i, sink) in config.sinks.iter().enumerate() {
        let pgcdc::config::SinkConfig::Nats(nats) = sink else {
            continue;
        };
        let mut options = nats.options(&debezium)?;
        if options.job.is_empty() {
            options.job = match &config.checkpoint {
                Some(cc) => config.job_name(cc)?.as_str().to_owned(),
                None => config.source.slot.clone(),
            };
        }
        options.checkpoint_interval = config.checkpoint.as_ref().map(|cc| cc.interval());
        let line = cdc_runtime::sinks::NatsSink::plan(&options)
            .await
            .map_err(|e| {
                let kind = match e.is_retryable() {
                    true => ExitKind::Connect,
                    false => ExitKind::Refused,
                };
                Failure::new(kind, format!("sinks[{i}] (nats): {e}"))
            })?;
        lines.push(format!("sinks[{i}] (nats): {line}"));
    }
    Ok(lines)
}

/// `pgcdc validate`'s checks without creating anything: a publication or
/// slot that `pgcdc run` would create (`source.create_publication` /
/// `create_slot`) is reported as "will create", not as an error.
async fn check_server(
    conn: &mut ReplicationConnection,
    source: &SourceOptions,
) -> Result<Vec<String>, Failure> {
    let publication = &source.publication;
    let slot = &source.slot;
    let report = prepare(conn, source, SetupMode::Plan)
        .await
        .map_err(setup_failure)?;
    let publication_line = match &report.publication {
        PublicationChange::Created => {
            format!("will create publication {publication:?} (source.create_publication = true)")
        }
        PublicationChange::Changed { added, removed } => format!(
            "will bring publication {publication:?} in line with the configuration (source.create_publication = true): add [{}], drop [{}]; tables added are snapshotted while the job streams",
            added.join(", "),
            removed.join(", ")
        ),
        PublicationChange::None => {
            format!("publication {publication:?} exists and covers the tables")
        }
    };
    let signals_line = match report.signals {
        SignalTable::Off => None,
        SignalTable::Exists | SignalTable::Created => Some(
            "signal table pgcdc.signals exists (on-demand snapshots: pgcdc snapshot)".to_owned(),
        ),
        SignalTable::Missing => {
            Some("will create signal table pgcdc.signals (source.signals = true)".to_owned())
        }
    };
    let ddl_line = match report.ddl_capture {
        DdlCapture::Off => None,
        DdlCapture::Installed => Some("DDL capture is installed (source.capture_ddl = true)".to_owned()),
        DdlCapture::WillInstall => Some(
            "will install DDL capture: event triggers pgcdc_capture_ddl, pgcdc_capture_drop (source.capture_ddl = true)"
                .to_owned(),
        ),
    };
    let invalidated = match report.created_slot {
        true => None,
        false => slot_state(conn, slot)
            .await
            .map_err(|e| Failure::connect(&e))?
            .and_then(|s| s.invalidated),
    };
    let slot_line = match (report.created_slot, invalidated) {
        (true, _) => format!("will create slot {slot:?} (source.create_slot = true)"),
        (false, None) => format!("slot {slot:?} exists (logical, pgoutput, this database)"),
        (false, Some(reason)) => match source.on_slot_lost {
            OnSlotLost::Fail => {
                let e = SlotLostError {
                    slot: slot.clone(),
                    loss: SlotLoss::Invalidated { reason },
                };
                return Err(Failure::new(ExitKind::Refused, e));
            }
            _ => format!("slot {slot:?} is lost ({reason}): will drop it, create a new one and read every published table again (source.on_slot_lost = \"resnapshot\")"),
        },
    };
    let mut lines = vec![
        format!(
            "server {}, wal_level=logical, the tables exist",
            report.server_version_num
        ),
        publication_line,
    ];
    lines.extend(signals_line);
    lines.extend(ddl_line);
    lines.push(slot_line);
    lines.push("ok: `pgcdc run` can start".to_owned());
    Ok(lines)
}

/// `pgcdc snapshot`: writes the request into the signal table and says
/// where to watch it.
async fn request_snapshot(
    config: &Config,
    table: &str,
    filter: Option<&str>,
) -> Result<(), Failure> {
    let source = config.source.source_options()?;
    let request = pgcdc::signal::request_snapshot(&source, table, filter).await?;
    println!(
        "asked the running job to read {} (signal id {}, {}); it reads the table while it streams: watch `pgcdc slot status`",
        request.table,
        request.id,
        match filter {
            Some(f) => format!("rows where {f}"),
            None => "every row".to_owned(),
        }
    );
    Ok(())
}

async fn run(config: &Config, from_checkpoint: Option<u64>, standby: bool) -> Result<(), Failure> {
    let from_checkpoint = from_checkpoint
        .map(|id| {
            CheckpointId::new(id)
                .ok_or_else(|| Failure::new(ExitKind::Config, "--from-checkpoint: ids start at 1"))
        })
        .transpose()?;
    let monitor = cdc_runtime::monitor::Monitor::new();
    // Bound before the job starts: a taken port stops start-up here.
    let _endpoint = pgcdc::http::start(&config.metrics.listen, monitor.clone())
        .await
        .map_err(|e| Failure::new(ExitKind::Config, e))?;
    pgcdc::run(
        config,
        &pgcdc::RunOptions {
            from_checkpoint,
            monitor: Some(monitor),
            standby,
        },
        shutdown_signal(),
    )
    .await?;
    Ok(())
}

/// The job name: `--job`, or the configured one.
fn job_name(config: &Config, job: Option<String>) -> Result<JobName, Failure> {
    let cc = config.checkpoint.as_ref().ok_or_else(|| {
        Failure::new(
            ExitKind::Config,
            "the configuration has no [checkpoint] section",
        )
    })?;
    match job {
        Some(name) => {
            JobName::new(name).map_err(|e| Failure::new(ExitKind::Config, format!("--job: {e}")))
        }
        None => Ok(config.job_name(cc)?),
    }
}

/// The configured checkpoint store.
async fn open_store(config: &Config) -> Result<checkpoint_pg::PgCheckpointStore, Failure> {
    let cc = config.checkpoint.as_ref().ok_or_else(|| {
        Failure::new(
            ExitKind::Config,
            "the configuration has no [checkpoint] section",
        )
    })?;
    config
        .store_options(cc)?
        .open()
        .await
        .map_err(|e| Failure::store(&e))
}

/// Prints `value` as one JSON document.
fn print_json(value: &serde_json::Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value).map_err(Failure::other)?;
    println!("{text}");
    Ok(())
}

fn checkpoint_id(id: u64) -> Result<CheckpointId, Failure> {
    CheckpointId::new(id).ok_or_else(|| Failure::new(ExitKind::Config, "checkpoint ids start at 1"))
}

async fn checkpoints(
    config: &Config,
    job: Option<String>,
    action: CheckpointsAction,
) -> Result<(), Failure> {
    let job = job_name(config, job)?;
    let store = open_store(config).await?;
    match action {
        CheckpointsAction::List { json } => {
            let list = store.list(&job).await.map_err(|e| Failure::store(&e))?;
            if json {
                print_json(&inspect::list_json(&job, &list))?;
            } else {
                print!("{}", inspect::list_text(&job, &list));
            }
        }
        CheckpointsAction::Show { id, json } => {
            let id = checkpoint_id(id)?;
            let stored = store.load(&job, id).await.map_err(|e| Failure::store(&e))?;
            if json {
                print_json(&inspect::show_json(&stored))?;
            } else {
                print!("{}", inspect::show_text(&stored));
            }
        }
        CheckpointsAction::Delete { id } => {
            let id = checkpoint_id(id)?;
            let (_lock, lease) = admin_lease(&store, &job).await?;
            store
                .delete(&lease, id)
                .await
                .map_err(|e| Failure::store(&e))?;
            println!("deleted checkpoint {id} of job {job}");
        }
        CheckpointsAction::Prune { keep } => {
            let (_lock, lease) = admin_lease(&store, &job).await?;
            let n = store
                .retain(&lease, keep)
                .await
                .map_err(|e| Failure::store(&e))?;
            let orphans = store.vacuum().await.map_err(|e| Failure::store(&e))?;
            println!("deleted {n} checkpoint(s) of job {job}, kept {keep}; removed {orphans} orphaned large object(s)");
        }
    }
    Ok(())
}

/// The job's lock (so a running instance is never disturbed) and a lease to
/// change its checkpoints.
async fn admin_lease(
    store: &checkpoint_pg::PgCheckpointStore,
    job: &JobName,
) -> Result<(JobLock, checkpoint_api::Lease), Failure> {
    let lock = JobLock::acquire(store.pool(), job.as_str())
        .await
        .map_err(|e| Failure::from(cdc_runtime::job::JobError::Lock(e)))?;
    let owner =
        OwnerId::new(format!("pgcdc-admin:{}", std::process::id())).map_err(Failure::other)?;
    let lease = store
        .acquire_lease(job, &owner)
        .await
        .map_err(|e| Failure::store(&e))?;
    Ok((lock, lease))
}

async fn slot_status(config: &Config, json: bool) -> Result<(), Failure> {
    let rc = config.source.replication_config()?;
    let mut conn = ReplicationConnection::connect(&rc)
        .await
        .map_err(|e| Failure::connect(&e))?;
    let slot = slot_state(&mut conn, &config.source.slot).await;
    let _ = conn.close().await;
    let slot = slot.map_err(|e| Failure::new(ExitKind::of_connect(&e), e))?;
    let Some(slot) = slot else {
        return Err(Failure::other(format!(
            "replication slot {:?} does not exist; `pgcdc run` creates it",
            config.source.slot
        )));
    };
    let job = match &config.checkpoint {
        Some(_) => {
            let job = job_name(config, None)?;
            let store = open_store(config).await?;
            let list = store.list(&job).await.map_err(|e| Failure::store(&e))?;
            let latest = store.latest(&job).await.map_err(|e| Failure::store(&e))?;
            Some(inspect::JobCheckpoints {
                job,
                list,
                snapshot: latest.checkpoint.and_then(|c| c.checkpoint.snapshot),
            })
        }
        None => None,
    };
    if json {
        print_json(&inspect::slot_json(&slot, job.as_ref()))?;
    } else {
        print!("{}", inspect::slot_text(&slot, job.as_ref()));
    }
    Ok(())
}

/// `pgcdc quickstart`: progress lines, then the report; fails if a check fails.
async fn quickstart(dir: Option<PathBuf>, keep: bool, kills: usize) -> Result<(), Failure> {
    let pgcdc = std::env::current_exe()
        .map_err(|e| Failure::other(format!("cannot find the pgcdc binary: {e}")))?;
    let options = pgcdc::quickstart::QuickstartOptions {
        dir,
        keep,
        kills,
        pgcdc,
    };
    let report = pgcdc::quickstart::run(&options, &mut |line| println!("{line}"))
        .await
        .map_err(Failure::other)?;
    println!();
    print!("{report}");
    if report.passed() {
        Ok(())
    } else {
        let failed: Vec<&str> = report.failures().map(|c| c.name).collect();
        Err(Failure::other(format!(
            "quickstart checks failed: {}",
            failed.join(", ")
        )))
    }
}

/// Logs why pgcdc stops (once: on stderr, as a JSON line with
/// `--log-format json`) and returns its exit status.
fn fail(failure: &Failure) -> ExitCode {
    tracing::error!(target: EXIT_TARGET, exit_code = failure.kind.code(), "{}", failure.message);
    ExitCode::from(failure.kind.code())
}

fn main() -> ExitCode {
    pgcdc::allocator::tune();
    let cli = Cli::parse();
    init_logging(cli.log_format);
    // The configuration is read before the runtime starts: it says how many
    // threads the runtime gets.
    let config = match &cli.command {
        Command::Run { config, .. }
        | Command::Validate { config }
        | Command::Checkpoints { config, .. }
        | Command::Snapshot { config, .. }
        | Command::Slot { config, .. } => match Config::load(config) {
            Ok(c) => Some(c),
            Err(e) => return fail(&Failure::from(e)),
        },
        Command::Quickstart { .. } => None,
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // The quickstart runs a server workload and child processes: tokio's
    // default (a thread per core, or TOKIO_WORKER_THREADS). The other
    // commands serve one job: `[pipeline] worker_threads`.
    if let Some(config) = &config {
        let tokio_env = std::env::var("TOKIO_WORKER_THREADS").ok();
        builder.worker_threads(config.pipeline.runtime_threads(tokio_env.as_deref()));
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(&Failure::other(format!("cannot start the runtime: {e}"))),
    };
    let result = runtime.block_on(async {
        match (cli.command, config) {
            (Command::Quickstart { dir, keep, kills }, _) => quickstart(dir, keep, kills).await,
            (
                Command::Run {
                    from_checkpoint,
                    standby,
                    ..
                },
                Some(config),
            ) => run(&config, from_checkpoint, standby).await,
            (Command::Validate { .. }, Some(config)) => validate(&config).await,
            (Command::Snapshot { table, filter, .. }, Some(config)) => {
                request_snapshot(&config, &table, filter.as_deref()).await
            }
            (Command::Checkpoints { job, action, .. }, Some(config)) => {
                checkpoints(&config, job, action).await
            }
            (
                Command::Slot {
                    action: SlotAction::Status { json },
                    ..
                },
                Some(config),
            ) => slot_status(&config, json).await,
            // Every command but the quickstart has its configuration loaded
            // above; a command missing from that list must not pass silently.
            (_, None) => Err(Failure::other(
                "internal error: this command's configuration was not loaded",
            )),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => fail(&failure),
    }
}
