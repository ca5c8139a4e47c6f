//! The command line: commands, options and their help.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use pgcdc::exit::EXIT_STATUS_HELP;
use pgcdc::logging::LogFormat;

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
RUST_LOG sets the log filter (default: info,tokio_postgres=warn); the error
that stops pgcdc is always logged, once.";

/// Change data capture from PostgreSQL logical replication.
#[derive(Debug, Parser)]
#[command(name = "pgcdc", version, after_help = format!("{EXAMPLES}\n\n{EXIT_STATUS_HELP}"))]
pub(crate) struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Human, global = true)]
    pub(crate) log_format: LogFormat,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Stream changes into the configured sinks until SIGINT/SIGTERM.
    #[command(after_help = "Example:\n  pgcdc run --config pgcdc.toml")]
    Run {
        /// The configuration file.
        #[arg(short, long, default_value = "pgcdc.toml")]
        config: PathBuf,
        /// Resume from this retained checkpoint instead of the newest (newer ones are deleted).
        #[arg(long, value_name = "ID")]
        from_checkpoint: Option<u64>,
        /// Stand by: wait for the job's lock without a deadline, and take the
        /// job over when the running instance dies or stops beating
        /// (as `[ha] standby = true`; needs `[checkpoint]`).
        #[arg(long)]
        standby: bool,
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
    /// Ask the running job to read a table again (an on-demand snapshot),
    /// through the signal table `pgcdc.signals`; the job goes on streaming.
    Snapshot {
        /// The configuration file.
        #[arg(short, long, default_value = "pgcdc.toml")]
        config: PathBuf,
        /// The table (`schema.table`, or `table` for `public`); it must be
        /// one the job captures.
        #[arg(long)]
        table: String,
        /// Only rows matching this SQL condition, e.g. "id > 1000".
        #[arg(long = "where")]
        filter: Option<String>,
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
pub(crate) enum CheckpointsAction {
    /// One line per stored checkpoint, oldest first.
    List {
        /// Print one JSON document instead.
        #[arg(long)]
        json: bool,
    },
    /// A checkpoint's metadata, position and operator states.
    Show {
        /// Checkpoint id.
        id: u64,
        /// Print one JSON document instead.
        #[arg(long)]
        json: bool,
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
pub(crate) enum SlotAction {
    /// Slot position, lag in bytes, and the newest checkpoint.
    Status {
        /// Print one JSON document instead.
        #[arg(long)]
        json: bool,
    },
}
