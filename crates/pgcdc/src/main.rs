//! `pgcdc`: stream PostgreSQL changes into sinks.

use std::path::PathBuf;
use std::process::ExitCode;

use cdc_runtime::checkpoint::slot_state;
use cdc_runtime::job::JobLock;
use cdc_runtime::replication::ReplicationConnection;
use cdc_runtime::setup::{prepare, SetupMode};
use checkpoint_api::{CheckpointId, CheckpointStore, JobName, OwnerId};
use clap::{Parser, Subcommand};
use pgcdc::config::Config;
use pgcdc::logging::{init_logging, LogFormat};

/// mimalloc: the snapshot's readers allocate row values on one thread and the
/// sinks free them on another, which glibc's malloc serves without a thread
/// cache hit on either side (a third of the client's instructions per row).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const EXAMPLES: &str = "\
Examples:
  # See it work in under a minute (needs the PostgreSQL server programs):
  pgcdc quickstart

  # Check the config and the server (connection, wal_level, tables, publication, slot):
  pgcdc validate --config pgcdc.toml

  # Read the existing rows (initial snapshot), then stream changes; Ctrl-C or
  # SIGTERM flushes the sinks, takes a final checkpoint and stops cleanly. After a
  # crash it resumes from the newest checkpoint, an unfinished snapshot included:
  pgcdc run --config pgcdc.toml

  # Only copy the tables' rows, then stop (or stream from now, without them):
  PGCDC_SNAPSHOT_MODE=snapshot_only pgcdc run -c pgcdc.toml
  PGCDC_SNAPSHOT_MODE=latest pgcdc run -c pgcdc.toml

  # Inspect checkpoints, the slot and the snapshot's progress:
  pgcdc checkpoints list --config pgcdc.toml
  pgcdc slot status --config pgcdc.toml

  # Override the file from the environment, log JSON:
  PGCDC_SOURCE_HOST=db.internal PGCDC_SOURCE_PASSWORD=... pgcdc run -c pgcdc.toml --log-format json

Environment variables PGCDC_<SECTION>_<KEY> (e.g. PGCDC_SOURCE_HOST,
PGCDC_SOURCE_PASSWORD, PGCDC_PIPELINE_BATCH_SIZE) override the config file.
RUST_LOG sets the log filter (default: info,tokio_postgres=warn).";

/// Change data capture from PostgreSQL logical replication.
#[derive(Debug, Parser)]
#[command(name = "pgcdc", version, after_help = EXAMPLES)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Human, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Stream changes into the configured sinks until SIGINT/SIGTERM.
    #[command(after_help = "Example:\n  pgcdc run --config pgcdc.toml")]
    Run {
        /// The configuration file.
        #[arg(short, long, default_value = "pgcdc.toml")]
        config: PathBuf,
        /// Resume from this retained checkpoint instead of the newest (newer ones are deleted).
        #[arg(long, value_name = "ID")]
        from_checkpoint: Option<u64>,
    },
    /// Check the configuration and the server without streaming or creating anything.
    #[command(after_help = "Example:\n  pgcdc validate --config pgcdc.toml")]
    Validate {
        /// The configuration file.
        #[arg(short, long, default_value = "pgcdc.toml")]
        config: PathBuf,
    },
    /// List, show, delete or prune the job's checkpoints.
    #[command(
        after_help = "Examples:\n  pgcdc checkpoints list -c pgcdc.toml\n  pgcdc checkpoints show 42 -c pgcdc.toml\n  pgcdc checkpoints prune --keep 1 -c pgcdc.toml"
    )]
    Checkpoints {
        /// The configuration file (its `[checkpoint]` section says where they are).
        #[arg(short, long, default_value = "pgcdc.toml", global = true)]
        config: PathBuf,
        /// The job (default: the configured one).
        #[arg(long, global = true)]
        job: Option<String>,
        #[command(subcommand)]
        action: CheckpointsAction,
    },
    /// A one-minute demo on a throwaway PostgreSQL: streams a table while
    /// crashing `pgcdc run`, then checks nothing was lost and state is exact.
    #[command(
        after_help = "Needs the PostgreSQL 15+ server programs (initdb, pg_ctl, postgres), e.g. \
                      `apt-get install postgresql`.\n\nExample:\n  pgcdc quickstart --keep --dir ./pgcdc-demo"
    )]
    Quickstart {
        /// Where the config, the events file and the log go (default: a new temp dir).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Keep the files and the stopped cluster's directory afterwards.
        #[arg(long)]
        keep: bool,
        /// How often `pgcdc run` is killed (SIGKILL) mid-stream.
        #[arg(long, default_value_t = 2)]
        kills: usize,
    },
    /// The replication slot's position against the newest checkpoint.
    Slot {
        /// The configuration file.
        #[arg(short, long, default_value = "pgcdc.toml", global = true)]
        config: PathBuf,
        #[command(subcommand)]
        action: SlotAction,
    },
}

#[derive(Debug, Subcommand)]
enum CheckpointsAction {
    /// One line per stored checkpoint, oldest first.
    List,
    /// A checkpoint's metadata, position and operator states.
    Show {
        /// Checkpoint id.
        id: u64,
    },
    /// Deletes one checkpoint (the job must not be running).
    Delete {
        /// Checkpoint id.
        id: u64,
    },
    /// Deletes all but the newest N checkpoints (the job must not be running).
    Prune {
        /// How many to keep (0 deletes all: the job then starts over).
        #[arg(long)]
        keep: usize,
    },
}

#[derive(Debug, Subcommand)]
enum SlotAction {
    /// Slot position, lag in bytes, and the newest checkpoint.
    Status,
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutdown requested: flushing sinks");
}

async fn validate(config: &Config) -> Result<(), String> {
    let rc = config
        .source
        .replication_config()
        .map_err(|e| e.to_string())?;
    tracing::info!(connection = %rc, "connecting");
    let mut conn = ReplicationConnection::connect(&rc)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let source = config.source.source_options().map_err(|e| e.to_string())?;
    let report = prepare(&mut conn, &source, SetupMode::CheckOnly)
        .await
        .map_err(|e| e.to_string())?;
    let _ = conn.close().await;
    println!(
        "ok: server {}, wal_level=logical, tables, publication {:?} and slot {:?} are ready",
        report.server_version_num, config.source.publication, config.source.slot
    );
    Ok(())
}

async fn run(config: &Config, from_checkpoint: Option<u64>) -> Result<(), String> {
    let from_checkpoint = from_checkpoint
        .map(|id| CheckpointId::new(id).ok_or("--from-checkpoint: ids start at 1"))
        .transpose()?;
    pgcdc::run(
        config,
        &pgcdc::RunOptions { from_checkpoint },
        shutdown_signal(),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(())
}

/// The job name: `--job`, or the configured one.
fn job_name(config: &Config, job: Option<String>) -> Result<JobName, String> {
    let cc = config
        .checkpoint
        .as_ref()
        .ok_or("the configuration has no [checkpoint] section")?;
    match job {
        Some(name) => JobName::new(name).map_err(|e| format!("--job: {e}")),
        None => config.job_name(cc).map_err(|e| e.to_string()),
    }
}

fn lsn_or_dash(lsn: cdc_core::Lsn) -> String {
    if lsn.is_invalid() {
        "-".to_owned()
    } else {
        lsn.to_string()
    }
}

fn time(ts: checkpoint_api::Timestamp) -> String {
    let micros = ts.as_unix_micros();
    format!(
        "{}.{:06}",
        micros.div_euclid(1_000_000),
        micros.rem_euclid(1_000_000)
    )
}

async fn checkpoints(
    config: &Config,
    job: Option<String>,
    action: CheckpointsAction,
) -> Result<(), String> {
    let job = job_name(config, job)?;
    let store = config.open_store().await?;
    match action {
        CheckpointsAction::List => {
            let list = store.list(&job).await.map_err(|e| e.to_string())?;
            println!(
                "{:>8}  {:>18}  {:>18}  {:>12}  storage",
                "id", "lsn", "created (unix s)", "bytes"
            );
            for m in &list {
                println!(
                    "{:>8}  {:>18}  {:>18}  {:>12}  {:?}",
                    m.id.get(),
                    m.commit_end_lsn.to_string(),
                    time(m.created_at),
                    m.stored_bytes,
                    m.storage
                );
            }
            println!("{} checkpoint(s) of job {job}", list.len());
        }
        CheckpointsAction::Show { id } => {
            let id = CheckpointId::new(id).ok_or("checkpoint ids start at 1")?;
            let stored = store.load(&job, id).await.map_err(|e| e.to_string())?;
            let c = &stored.checkpoint;
            println!("job:          {}", c.job);
            println!("id:           {}", c.id);
            println!("created:      {} (unix s)", time(c.created_at));
            println!("position:     {}", c.source.commit_end_lsn);
            println!("slot:         {}", c.source.slot);
            println!("publications: {}", c.source.publications.join(", "));
            println!("protocol:     v{}", c.source.protocol.proto_version);
            println!(
                "stored:       {} bytes ({:?})",
                stored.meta.stored_bytes, stored.meta.storage
            );
            println!("operators:    {}", c.operators.len());
            for op in &c.operators {
                println!(
                    "  {} ({} v{}): {} bytes of state",
                    op.id,
                    op.kind,
                    op.state_version,
                    op.state.len()
                );
            }
        }
        CheckpointsAction::Delete { id } => {
            let id = CheckpointId::new(id).ok_or("checkpoint ids start at 1")?;
            let (_lock, lease) = admin_lease(&store, &job).await?;
            store.delete(&lease, id).await.map_err(|e| e.to_string())?;
            println!("deleted checkpoint {id} of job {job}");
        }
        CheckpointsAction::Prune { keep } => {
            let (_lock, lease) = admin_lease(&store, &job).await?;
            let n = store
                .retain(&lease, keep)
                .await
                .map_err(|e| e.to_string())?;
            let orphans = store.vacuum().await.map_err(|e| e.to_string())?;
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
) -> Result<(JobLock, checkpoint_api::Lease), String> {
    let lock = JobLock::acquire(store.pool(), job.as_str())
        .await
        .map_err(|e| e.to_string())?;
    let owner =
        OwnerId::new(format!("pgcdc-admin:{}", std::process::id())).map_err(|e| e.to_string())?;
    let lease = store
        .acquire_lease(job, &owner)
        .await
        .map_err(|e| e.to_string())?;
    Ok((lock, lease))
}

async fn slot_status(config: &Config) -> Result<(), String> {
    let rc = config
        .source
        .replication_config()
        .map_err(|e| e.to_string())?;
    let mut conn = ReplicationConnection::connect(&rc)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let slot = slot_state(&mut conn, &config.source.slot)
        .await
        .map_err(|e| e.to_string())?;
    let _ = conn.close().await;
    let Some(slot) = slot else {
        return Err(format!(
            "replication slot {:?} does not exist; `pgcdc run` creates it",
            config.source.slot
        ));
    };
    println!("slot:             {}", slot.name);
    println!("confirmed_flush:  {}", lsn_or_dash(slot.confirmed_flush));
    println!("restart_lsn:      {}", lsn_or_dash(slot.restart_lsn));
    println!("server WAL:       {}", lsn_or_dash(slot.current_wal));
    println!("lag:              {} bytes", slot.lag_bytes());
    match slot.active_pid {
        Some(pid) => println!("active:           yes (walsender pid {pid})"),
        None => println!("active:           no"),
    }
    if config.checkpoint.is_some() {
        let job = job_name(config, None)?;
        let store = config.open_store().await?;
        let list = store.list(&job).await.map_err(|e| e.to_string())?;
        match (list.first(), list.last()) {
            (Some(oldest), Some(newest)) => {
                println!("job:              {job} ({} checkpoint(s))", list.len());
                println!(
                    "newest:           {} at {}",
                    newest.id, newest.commit_end_lsn
                );
                println!(
                    "oldest retained:  {} at {}",
                    oldest.id, oldest.commit_end_lsn
                );
                if slot.confirmed_flush > newest.commit_end_lsn {
                    println!("WARNING: the slot is confirmed past the newest checkpoint; `pgcdc run` will refuse to resume unless checkpoint.trust_slot = true");
                } else {
                    println!(
                        "checkpoint ahead of slot by {} bytes (confirmed only up to what retained checkpoints cover)",
                        newest
                            .commit_end_lsn
                            .as_u64()
                            .saturating_sub(slot.confirmed_flush.as_u64())
                    );
                }
            }
            _ => println!("job:              {job} (no checkpoints yet)"),
        }
        let latest = store.latest(&job).await.map_err(|e| e.to_string())?;
        if let Some(stored) = latest.checkpoint {
            print_snapshot(stored.checkpoint.snapshot.as_ref());
        }
    }
    Ok(())
}

/// The initial snapshot's progress as the newest checkpoint records it.
fn print_snapshot(progress: Option<&checkpoint_api::SnapshotProgress>) {
    let Some(p) = progress else {
        println!("snapshot:         none recorded");
        return;
    };
    let rows: u64 = p.tables_done.iter().map(|t| t.rows).sum();
    if p.complete {
        println!(
            "snapshot:         complete ({} table(s), {rows} rows)",
            p.tables_done.len()
        );
        return;
    }
    println!(
        "snapshot:         running; {} table(s) done ({rows} rows)",
        p.tables_done.len()
    );
    if let Some(c) = &p.in_progress {
        println!(
            "snapshot table:   {}.{}: {} chunks, {} rows done",
            c.table.schema, c.table.name, c.chunks_done, c.rows_done
        );
    }
}

/// `pgcdc quickstart`: progress lines, then the report; fails if a check fails.
async fn quickstart(dir: Option<PathBuf>, keep: bool, kills: usize) -> Result<(), String> {
    let pgcdc =
        std::env::current_exe().map_err(|e| format!("cannot find the pgcdc binary: {e}"))?;
    let options = pgcdc::quickstart::QuickstartOptions {
        dir,
        keep,
        kills,
        pgcdc,
    };
    let report = pgcdc::quickstart::run(&options, &mut |line| println!("{line}"))
        .await
        .map_err(|e| e.to_string())?;
    println!();
    print!("{report}");
    if report.passed() {
        Ok(())
    } else {
        let failed: Vec<&str> = report.failures().map(|c| c.name).collect();
        Err(format!("quickstart checks failed: {}", failed.join(", ")))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    // The configuration is read before the runtime starts: it says how many
    // threads the runtime gets.
    let config = match &cli.command {
        Command::Run { config, .. }
        | Command::Validate { config }
        | Command::Checkpoints { config, .. }
        | Command::Slot { config, .. } => match Config::load(config) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!("{e}");
                eprintln!("pgcdc: {e}");
                return ExitCode::FAILURE;
            }
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
        Err(e) => {
            eprintln!("pgcdc: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match (cli.command, config) {
            (Command::Quickstart { dir, keep, kills }, _) => quickstart(dir, keep, kills).await,
            (
                Command::Run {
                    from_checkpoint, ..
                },
                Some(config),
            ) => run(&config, from_checkpoint).await,
            (Command::Validate { .. }, Some(config)) => validate(&config).await,
            (Command::Checkpoints { job, action, .. }, Some(config)) => {
                checkpoints(&config, job, action).await
            }
            (
                Command::Slot {
                    action: SlotAction::Status,
                    ..
                },
                Some(config),
            ) => slot_status(&config).await,
            // Every command but the quickstart has its configuration loaded
            // above; a command missing from that list must not pass silently.
            (_, None) => Err("internal error: this command's configuration was not loaded".into()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("pgcdc: {e}");
            ExitCode::FAILURE
        }
    }
}
