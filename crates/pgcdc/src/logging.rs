//! Log set-up: human-readable or JSON lines on stderr, filtered by `RUST_LOG`.

use clap::ValueEnum;

/// Log format.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// The target of the one error line that says why `pgcdc` stops. It is
/// logged whatever `RUST_LOG` says, so the reason is printed exactly once,
/// as a JSON line with `--log-format json`.
pub const EXIT_TARGET: &str = "pgcdc::exit";

/// Installs the global subscriber (default filter: `info,tokio_postgres=warn`;
/// errors of [`EXIT_TARGET`] always pass).
pub fn init_logging(format: LogFormat) {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // tokio-postgres logs every server NOTICE at info; keep those quiet.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tokio_postgres=warn"));
    if let Ok(directive) = format!("{EXIT_TARGET}=error").parse() {
        filter = filter.add_directive(directive);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
