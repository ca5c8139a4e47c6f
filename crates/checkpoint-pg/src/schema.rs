//! Table names (always quoted) and versioned, idempotent migrations.

use crate::config::PgStoreConfig;
use crate::error::pg;
use checkpoint_api::CheckpointError;

pub use cdc_core::sql::quote_ident;
use cdc_core::sql::quote_literal;

/// The quoted, schema-qualified names of the store's tables.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    pub(crate) schema: String,
    pub(crate) checkpoints: String,
    pub(crate) leases: String,
    pub(crate) chunks: String,
    pub(crate) large_objects: String,
    pub(crate) version: String,
    /// `schema.table`, unquoted, for the advisory-lock key.
    pub(crate) lock_key: String,
}

impl Names {
    pub(crate) fn new(config: &PgStoreConfig) -> Self {
        let schema = quote_ident(&config.schema);
        let q = |suffix: &str| {
            format!(
                "{schema}.{}",
                quote_ident(&format!("{}{suffix}", config.table))
            )
        };
        Names {
            checkpoints: q(""),
            leases: q("_leases"),
            chunks: q("_chunks"),
            large_objects: q("_large_objects"),
            version: q(crate::config::LONGEST_SUFFIX),
            lock_key: format!("{}.{}", config.schema, config.table),
            schema,
        }
    }
}

/// First key of the advisory lock held while migrating ("pgcd" in ASCII).
const LOCK_CLASS: i32 = 0x7067_6364;

/// What a migration does.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Statements, run as one batch.
    Sql(String),
    /// Drops every constraint of one kind on a table, whatever its name (PostgreSQL chose
    /// it, and shortened it for long table names); none is fine.
    DropConstraints(Constraints),
}

/// The constraints a [`Step::DropConstraints`] removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Constraints {
    /// Every foreign key from the chunk table to the checkpoints table. Saves, retention
    /// and deletes remove chunk rows themselves, in the statement that deletes their
    /// checkpoint row, instead of a trigger doing it per row at commit.
    ChunkForeignKeys,
    /// The `CHECK` constraints migration 1 put on the checkpoints and lease tables.
    /// PostgreSQL rebuilds a table's check expressions for every statement that inserts
    /// or updates it, which was a quarter of a tiny save's time on the server (6 of
    /// 12-13 us per insert); the store writes only values it
    /// made (positive ids and epochs, one of three storage kinds) and rejects anything
    /// else when it reads a row back.
    Checks,
}

/// The migrations, in order; version N is `migrations(n)[N - 1]`. Applied ones never
/// change: an installation made by an older build has exactly what they created.
fn migrations(n: &Names) -> Vec<Step> {
    vec![
        Step::Sql(format!(
        "CREATE TABLE IF NOT EXISTS {leases} (
            job text PRIMARY KEY,
            epoch bigint NOT NULL CHECK (epoch > 0),
            owner text NOT NULL,
            highest_id bigint,
            acquired_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE IF NOT EXISTS {cps} (
            job text NOT NULL,
            checkpoint_id bigint NOT NULL CHECK (checkpoint_id > 0),
            commit_end_lsn pg_lsn NOT NULL,
            created_at_us bigint NOT NULL,
            saved_at timestamptz NOT NULL DEFAULT now(),
            format_version integer NOT NULL,
            stored_bytes bigint NOT NULL,
            crc32c bigint NOT NULL,
            storage text NOT NULL CHECK (storage IN ('inline', 'chunk_rows', 'large_object')),
            chunk_size bigint NOT NULL,
            chunk_count bigint NOT NULL,
            writer_epoch bigint NOT NULL,
            data bytea,
            lo_oid oid,
            PRIMARY KEY (job, checkpoint_id)
        );
        ALTER TABLE {cps} ALTER COLUMN data SET STORAGE EXTERNAL;
        CREATE TABLE IF NOT EXISTS {chunks} (
            job text NOT NULL,
            checkpoint_id bigint NOT NULL,
            seq integer NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (job, checkpoint_id, seq),
            FOREIGN KEY (job, checkpoint_id) REFERENCES {cps} (job, checkpoint_id)
                ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED
        );
        ALTER TABLE {chunks} ALTER COLUMN data SET STORAGE EXTERNAL;
        CREATE TABLE IF NOT EXISTS {lobs} (
            lo_oid oid PRIMARY KEY,
            job text NOT NULL,
            checkpoint_id bigint NOT NULL
        );
        COMMENT ON TABLE {lobs} IS {comment};",
        leases = n.leases,
        cps = n.checkpoints,
        chunks = n.chunks,
        lobs = n.large_objects,
        comment = quote_literal("large objects written by pgcdc checkpoint-pg; vacuum() unlinks those no checkpoint references"),
    )),
        Step::DropConstraints(Constraints::ChunkForeignKeys),
        Step::Sql(format!(
            "ALTER TABLE {leases} ADD COLUMN IF NOT EXISTS lowest_id bigint;
             COMMENT ON COLUMN {leases}.lowest_id IS {comment};",
            leases = n.leases,
            comment = quote_literal(
                "no checkpoint row of the job has a lower id; retention scans from here"
            ),
        )),
        Step::DropConstraints(Constraints::Checks),
        Step::Sql(format!(
            "ALTER TABLE {leases} ADD COLUMN IF NOT EXISTS newest_lsn pg_lsn;
             UPDATE {leases} l SET newest_lsn = (
                 SELECT c.commit_end_lsn FROM {cps} c
                 WHERE c.job = l.job AND c.checkpoint_id >= coalesce(l.lowest_id, 0)
                 ORDER BY c.checkpoint_id DESC LIMIT 1);
             COMMENT ON COLUMN {leases}.newest_lsn IS {comment};",
            leases = n.leases,
            cps = n.checkpoints,
            comment = quote_literal(
                "commit_end_lsn of the job's newest checkpoint row; a save may not go below it"
            ),
        )),
    ]
}

/// [`Step::DropConstraints`] in `tx`.
async fn drop_constraints(
    tx: &deadpool_postgres::Transaction<'_>,
    names: &Names,
    what: Constraints,
) -> Result<(), CheckpointError> {
    // `also`: a further condition on the constraint.
    let find = |table: &str, contype: &str, also: &str| {
        let sql = format!(
            "SELECT conname::text FROM pg_catalog.pg_constraint c
             WHERE contype = '{contype}' AND conrelid = {}::regclass {also}
             ORDER BY conname",
            quote_literal(table)
        );
        (table.to_owned(), sql)
    };
    // Only the checks migration 1 created, each on one of these columns; a check
    // somebody added on other columns stays.
    let ours = "AND array_length(c.conkey, 1) = 1 AND (
            SELECT attname FROM pg_catalog.pg_attribute a
            WHERE a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
        ) IN ('checkpoint_id', 'storage', 'epoch')";
    let lookups = match what {
        Constraints::ChunkForeignKeys => vec![find(
            &names.chunks,
            "f",
            &format!(
                "AND confrelid = {}::regclass",
                quote_literal(&names.checkpoints)
            ),
        )],
        Constraints::Checks => vec![
            find(&names.checkpoints, "c", ours),
            find(&names.leases, "c", ours),
        ],
    };
    for (table, sql) in lookups {
        let found = tx
            .query(&sql, &[])
            .await
            .map_err(|e| pg("migration: finding constraints to drop", e))?;
        for row in found {
            let name: &str = row
                .try_get(0)
                .map_err(|e| pg("migration: finding constraints to drop", e))?;
            tx.batch_execute(&format!(
                "ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {}",
                quote_ident(name)
            ))
            .await
            .map_err(|e| pg("migration: dropping a constraint", e))?;
        }
    }
    Ok(())
}

/// Creates or upgrades the schema; returns the version now in place.
///
/// Runs in one transaction under a transaction-scoped advisory lock, so two processes
/// starting at once apply each migration exactly once.
pub(crate) async fn migrate(
    client: &mut deadpool_postgres::Object,
    names: &Names,
) -> Result<i32, CheckpointError> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| pg("migration: begin", e))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        &[&LOCK_CLASS, &names.lock_key],
    )
    .await
    .map_err(|e| pg("migration: advisory lock", e))?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {version} (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         );",
        schema = names.schema,
        version = names.version,
    ))
    .await
    .map_err(|e| pg("migration: schema_version table", e))?;
    let current: i32 = tx
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM {}", names.version),
            &[],
        )
        .await
        .map_err(|e| pg("migration: read version", e))?
        .try_get(0)
        .map_err(|e| pg("migration: read version", e))?;
    if current > SCHEMA_VERSION {
        return Err(crate::error::definite(format!(
            "schema version {current} is newer than {SCHEMA_VERSION}, the newest this build knows"
        )));
    }
    let all = migrations(names);
    let mut version = current;
    for (i, step) in all.iter().enumerate() {
        let v = i32::try_from(i + 1).unwrap_or(i32::MAX);
        if v <= current {
            continue;
        }
        match step {
            Step::Sql(sql) => tx
                .batch_execute(sql)
                .await
                .map_err(|e| pg(&format!("migration {v}"), e))?,
            Step::DropConstraints(what) => drop_constraints(&tx, names, *what).await?,
        }
        tx.execute(
            &format!("INSERT INTO {} (version) VALUES ($1)", names.version),
            &[&v],
        )
        .await
        .map_err(|e| pg("migration: record version", e))?;
        version = v;
    }
    tx.commit().await.map_err(|e| pg("migration: commit", e))?;
    Ok(version)
}

/// The schema version this build creates and understands.
///
/// 1. The tables.
/// 2. No foreign key from chunk rows to their checkpoint row.
/// 3. The lease row records the lowest id a checkpoint row of the job may have, so
///    retention reads only live index entries.
/// 4. No `CHECK` constraints on the checkpoints and lease tables.
/// 5. The lease row records the newest checkpoint row's LSN, so a save checks its own LSN
///    against the row it updates anyway instead of reading the checkpoints table.
pub const SCHEMA_VERSION: i32 = 5;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("plain"), "\"plain\"");
        assert_eq!(quote_ident("a \"b\" c"), "\"a \"\"b\"\" c\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
        let c = PgStoreConfig {
            schema: "my \"schema".into(),
            table: "cp s".into(),
            ..PgStoreConfig::default()
        };
        let n = Names::new(&c);
        assert_eq!(n.checkpoints, "\"my \"\"schema\".\"cp s\"");
        assert_eq!(n.chunks, "\"my \"\"schema\".\"cp s_chunks\"");
        assert_eq!(migrations(&n).len(), SCHEMA_VERSION as usize);
    }
}
