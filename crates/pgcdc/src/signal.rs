//! `pgcdc snapshot`: asks a running job for an on-demand snapshot by
//! writing a row into its signal table (see [`cdc_runtime::signal`]).

use cdc_runtime::signal::{snapshot_data, EXECUTE_SNAPSHOT, EXISTS_SQL, SIGNAL_TABLE};
use cdc_runtime::source::{Capture, SourceOptions, TableRef};
use cdc_runtime::tls_connect::PgClientSettings;

/// A request written into the signal table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requested {
    /// The signal's id.
    pub id: String,
    /// The table.
    pub table: TableRef,
}

/// Why the request could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The table name is not `schema.table`.
    #[error("--table: {0}")]
    Table(String),
    /// The job does not capture the table.
    #[error("the job does not capture {table} (it captures {captured}); list it in source.tables or source.schemas first")]
    NotCaptured {
        /// The table.
        table: TableRef,
        /// What the job captures.
        captured: String,
    },
    /// The connection settings are unusable.
    #[error("{0}")]
    Settings(String),
    /// The source could not be reached.
    #[error("cannot connect to the source: {0}")]
    Connect(String),
    /// The signal table is missing.
    #[error("the signal table {SIGNAL_TABLE} does not exist: start the job once with source.signals = true (the default) and a role that may create it")]
    NoSignalTable,
    /// `--where` is not a valid condition on the table.
    #[error("--where {filter:?} is not a valid SQL condition on {table}: {reason}")]
    Filter {
        /// The table.
        table: TableRef,
        /// The condition.
        filter: String,
        /// The server's complaint.
        reason: String,
    },
    /// A query failed.
    #[error("{0}")]
    Query(String),
}

impl RequestError {
    /// Whether the command line or the configuration is at fault.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            RequestError::Table(_)
                | RequestError::NotCaptured { .. }
                | RequestError::Settings(_)
                | RequestError::Filter { .. }
        )
    }

    /// Whether the source could not be reached.
    pub fn is_connect(&self) -> bool {
        matches!(self, RequestError::Connect(_))
    }
}

fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => e.to_string(),
    }
}

/// Writes an `execute-snapshot` signal for `table` (only rows matching
/// `filter`, if given) and returns its id. The running job reads it from
/// the WAL; nothing here waits for the job.
pub async fn request_snapshot(
    source: &SourceOptions,
    table: &str,
    filter: Option<&str>,
) -> Result<Requested, RequestError> {
    let table = TableRef::parse(table).map_err(|e| RequestError::Table(e.to_string()))?;
    let captured = match &source.capture {
        Capture::Tables(t) => t.contains(&table),
        Capture::Schemas(s) => s.contains(&table.schema),
    };
    if !captured {
        let what = match &source.capture {
            Capture::Tables(t) => t
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            Capture::Schemas(s) => format!("the tables of schema(s) {}", s.join(", ")),
        };
        return Err(RequestError::NotCaptured {
            table,
            captured: what,
        });
    }
    let filter = filter.map(str::trim).filter(|f| !f.is_empty());
    let settings = PgClientSettings::new(&source.replication)
        .map_err(|e| RequestError::Settings(e.to_string()))?;
    let client = settings
        .connect("pgcdc snapshot request")
        .await
        .map_err(|e| RequestError::Connect(describe(&e)))?;
    let exists: bool = client
        .query_one(EXISTS_SQL, &[])
        .await
        .and_then(|r| r.try_get(0))
        .map_err(|e| RequestError::Query(describe(&e)))?;
    if !exists {
        return Err(RequestError::NoSignalTable);
    }
    if let Some(f) = filter {
        // One condition on the table, checked without running it (the
        // extended protocol refuses more than one statement).
        let quoted = format!(
            "{}.{}",
            cdc_core::sql::quote_ident(&table.schema),
            cdc_core::sql::quote_ident(&table.table)
        );
        client
            .prepare(&format!("SELECT 1 FROM {quoted} WHERE ({f})"))
            .await
            .map_err(|e| RequestError::Filter {
                table: table.clone(),
                filter: f.to_owned(),
                reason: describe(&e),
            })?;
    }
    let data = snapshot_data(&table, filter).to_string();
    let row = client
        .query_one(
            &format!(
                "INSERT INTO {SIGNAL_TABLE} (\"type\", \"data\") VALUES ($1, $2::text::jsonb) RETURNING \"id\""
            ),
            &[&EXECUTE_SNAPSHOT, &data],
        )
        .await
        .map_err(|e| RequestError::Query(describe(&e)))?;
    let id: String = row
        .try_get(0)
        .map_err(|e| RequestError::Query(describe(&e)))?;
    Ok(Requested { id, table })
}
