//! `pgcdc`: stream PostgreSQL changes into sinks.

use std::path::PathBuf;
use std::process::ExitCode;

use cdc_runtime::config::{Config, SinkConfig};
use cdc_runtime::encoding::JsonEncoder;
use cdc_runtime::pipeline::{Pipeline, PipelineOptions};
use cdc_runtime::replication::ReplicationConnection;
use cdc_runtime::setup::{prepare, SetupMode};
use cdc_runtime::sinks::{
    FileSink, FileSinkOptions, JsonLinesSink, NullSink, PgTableSink, PgTableSinkOptions, Sink,
};
use clap::{Parser, Subcommand, ValueEnum};

const EXAMPLES: &str = "\
Examples:
  # Check the config and the server (connection, wal_level, tables, publication, slot):
  pgcdc validate --config pgcdc.toml

  # Stream changes; Ctrl-C or SIGTERM flushes the sinks and stops cleanly:
  pgcdc run --config pgcdc.toml

  # Override the file from the environment, log JSON:
  PGCDC_SOURCE_HOST=db.internal PGCDC_SOURCE_PASSWORD=... pgcdc run -c pgcdc.toml --log-format json

Environment variables PGCDC_<SECTION>_<KEY> (e.g. PGCDC_SOURCE_HOST,
PGCDC_SOURCE_PASSWORD, PGCDC_PIPELINE_BATCH_SIZE) override the config file.
RUST_LOG sets the log filter (default: info).";

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

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Stream changes into the configured sinks until SIGINT/SIGTERM.
    #[command(after_help = "Example:\n  pgcdc run --config pgcdc.toml")]
    Run {
        /// The configuration file.
        #[arg(short, long, default_value = "pgcdc.toml")]
        config: PathBuf,
    },
    /// Check the configuration and the server without streaming or creating anything.
    #[command(after_help = "Example:\n  pgcdc validate --config pgcdc.toml")]
    Validate {
        /// The configuration file.
        #[arg(short, long, default_value = "pgcdc.toml")]
        config: PathBuf,
    },
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn open_sink(config: &SinkConfig) -> Result<Box<dyn Sink>, String> {
    Ok(match config {
        SinkConfig::Stdout { format } => Box::new(JsonLinesSink::stdout(JsonEncoder::new(
            format.json_format(),
        ))),
        SinkConfig::File {
            path,
            max_file_bytes,
            format,
        } => Box::new(
            FileSink::open(
                FileSinkOptions {
                    path: path.clone(),
                    max_file_bytes: *max_file_bytes,
                },
                JsonEncoder::new(format.json_format()),
            )
            .await
            .map_err(|e| format!("file sink: {e}"))?,
        ),
        SinkConfig::Postgres { url } => Box::new(
            PgTableSink::connect(url.expose(), PgTableSinkOptions::default())
                .await
                .map_err(|e| format!("postgres sink: {e}"))?,
        ),
        SinkConfig::Null => Box::new(NullSink::new()),
    })
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
    let report = prepare(&mut conn, &config.source, SetupMode::CheckOnly)
        .await
        .map_err(|e| e.to_string())?;
    let _ = conn.close().await;
    println!(
        "ok: server {}, wal_level=logical, tables, publication {:?} and slot {:?} are ready",
        report.server_version_num, config.source.publication, config.source.slot
    );
    Ok(())
}

async fn run(config: &Config) -> Result<(), String> {
    let rc = config
        .source
        .replication_config()
        .map_err(|e| e.to_string())?;
    tracing::info!(connection = %rc, "connecting");
    let mut conn = ReplicationConnection::connect(&rc)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    prepare(&mut conn, &config.source, SetupMode::Create)
        .await
        .map_err(|e| e.to_string())?;
    let _ = conn.close().await;

    let mut sinks = Vec::new();
    for s in &config.sinks {
        sinks.push(open_sink(s).await?);
    }
    let mut options = PipelineOptions::new(rc, &config.source.slot, &config.source.publication);
    options.start_lsn = config.start_lsn().map_err(|e| e.to_string())?;
    options.batch_size = config.pipeline.batch_size;
    options.byte_budget = config.pipeline.byte_budget;
    if let Some(dir) = &config.pipeline.spill_dir {
        options.spill_dir = dir.clone();
    }
    options.status_interval = config.status_interval();
    options.channel_capacity = config.pipeline.channel_capacity;
    let progress = Pipeline::new(options, sinks)
        .run(shutdown_signal())
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(confirmed = %progress.confirmed, events = progress.events, reconnects = progress.reconnects, "stopped cleanly");
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pgcdc: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let path = match &cli.command {
            Command::Run { config } | Command::Validate { config } => config,
        };
        let config = Config::load(path).map_err(|e| e.to_string())?;
        match cli.command {
            Command::Run { .. } => run(&config).await,
            Command::Validate { .. } => validate(&config).await,
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
