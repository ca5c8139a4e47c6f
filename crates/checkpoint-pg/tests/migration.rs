//! Schema migrations against a real PostgreSQL (the `integration-tests` harness starts a
//! throwaway server): an installation made by schema version 1, whose chunk rows hang off
//! their checkpoint row by a cascading foreign key, is upgraded in place; its checkpoints
//! stay readable, and saves, retention, deletes and vacuum remove chunk rows without the key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use cdc_core::Lsn;
use checkpoint_api::{
    Checkpoint, CheckpointId, CheckpointStore, JobName, OperatorState, OwnerId, ProtocolOptions,
    SourcePosition, Timestamp,
};
use checkpoint_pg::{quote_ident, PgCheckpointStore, PgStoreConfig};
use throwaway_pg::{TestDatabase, TestPostgres};
use tokio_postgres::Client;

/// Quoting and PostgreSQL's shortened constraint names both exercised: the table name is
/// as long as the store allows (48 characters), so `<table>_chunks_job_checkpoint_id_fkey`
/// is cut to 63 bytes by the server.
const SCHEMA: &str = "legacy \"s\"";
const TABLE: &str = "Checkpoints of \"the\" legacy pipeline, long name";

/// The tables exactly as schema version 1 created them (migration 1 of the first release),
/// and its version row.
fn version_1_ddl(schema: &str, table: &str) -> String {
    let s = quote_ident(schema);
    let q = |suffix: &str| format!("{s}.{}", quote_ident(&format!("{table}{suffix}")));
    let (leases, cps, chunks, lobs, version) = (
        q("_leases"),
        q(""),
        q("_chunks"),
        q("_large_objects"),
        q("_schema_version"),
    );
    format!(
        "CREATE SCHEMA {s};
        CREATE TABLE {version} (
            version integer PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE {leases} (
            job text PRIMARY KEY,
            epoch bigint NOT NULL CHECK (epoch > 0),
            owner text NOT NULL,
            highest_id bigint,
            acquired_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE {cps} (
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
        CREATE TABLE {chunks} (
            job text NOT NULL,
            checkpoint_id bigint NOT NULL,
            seq integer NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (job, checkpoint_id, seq),
            FOREIGN KEY (job, checkpoint_id) REFERENCES {cps} (job, checkpoint_id)
                ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED
        );
        ALTER TABLE {chunks} ALTER COLUMN data SET STORAGE EXTERNAL;
        CREATE TABLE {lobs} (
            lo_oid oid PRIMARY KEY,
            job text NOT NULL,
            checkpoint_id bigint NOT NULL
        );
        INSERT INTO {version} (version) VALUES (1);"
    )
}

/// Small thresholds, so a few KiB make a checkpoint of several chunk rows.
fn config(schema: &str, table: &str) -> PgStoreConfig {
    let mut config = PgStoreConfig::default();
    config.schema = schema.into();
    config.table = table.into();
    config.inline_threshold = 1024;
    config.row_chunk_size = 4096;
    config.keep_on_save = Some(2);
    config
}

async fn open(db: &TestDatabase, config: PgStoreConfig) -> PgCheckpointStore {
    PgCheckpointStore::connect(db.config(), config)
        .await
        .unwrap()
}

fn checkpoint(job: &JobName, n: u64, state_len: usize) -> Checkpoint {
    let mut cp = Checkpoint::new(
        job.clone(),
        CheckpointId::new(n).unwrap(),
        Timestamp::from_unix_micros(i64::try_from(n).unwrap()),
        SourcePosition {
            commit_end_lsn: Lsn::from_u64(n * 16),
            slot: "slot".into(),
            publications: vec!["pub".into()],
            protocol: ProtocolOptions::default(),
        },
    );
    let mut x = n | 1;
    let mut state = Vec::with_capacity(state_len + 8);
    while state.len() < state_len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.extend_from_slice(&x.to_le_bytes());
    }
    state.truncate(state_len);
    cp.operators.push(OperatorState {
        id: "op".into(),
        kind: "blob".into(),
        state_version: 1,
        state: Bytes::from(state),
    });
    cp
}

async fn count(admin: &Client, sql: &str) -> i64 {
    admin.query_one(sql, &[]).await.unwrap().get(0)
}

/// Chunk rows of checkpoint `id` (all checkpoints with `None`).
async fn chunk_rows(admin: &Client, store: &PgCheckpointStore, id: Option<i64>) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM {} WHERE $1::bigint IS NULL OR checkpoint_id = $1",
        store.chunks_table()
    );
    admin.query_one(&sql, &[&id]).await.unwrap().get(0)
}

async fn foreign_keys_on_chunks(admin: &Client, store: &PgCheckpointStore) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND conrelid = {}::regclass",
        cdc_core::sql::quote_literal(store.chunks_table())
    );
    count(admin, &sql).await
}

/// The job's newest checkpoint.
async fn newest(store: &PgCheckpointStore, job: &JobName) -> Checkpoint {
    let latest = store.latest(job).await.unwrap();
    latest.checkpoint.unwrap().checkpoint
}

fn all_versions() -> Vec<i32> {
    (1..=checkpoint_pg::SCHEMA_VERSION).collect()
}

async fn versions(admin: &Client, schema: &str, table: &str) -> Vec<i32> {
    let sql = format!(
        "SELECT version FROM {}.{} ORDER BY version",
        quote_ident(schema),
        quote_ident(&format!("{table}_schema_version"))
    );
    admin
        .query(&sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_1_installation_loses_the_chunk_foreign_key_and_keeps_working() {
    let db = TestPostgres::new_database().await.unwrap();
    let admin = db.connect().await.unwrap();
    let job = JobName::new("legacy job").unwrap();
    let owner = OwnerId::new("w").unwrap();

    // A chunk-rows checkpoint as version 1 stored it: written by today's store into a
    // scratch table set (same columns), then copied into the version 1 tables.
    let old = checkpoint(&job, 1, 10_000);
    let scratch = open(&db, config("scratch", "cp")).await;
    let lease = scratch.acquire_lease(&job, &owner).await.unwrap();
    scratch.save(&lease, &old).await.unwrap();
    admin
        .batch_execute(&version_1_ddl(SCHEMA, TABLE))
        .await
        .unwrap();
    let s = quote_ident(SCHEMA);
    // Today's lease table has two columns more (`lowest_id`, version 3, and `newest_lsn`,
    // version 5) at its end.
    for (suffix, columns) in [
        ("_leases", "job, epoch, owner, highest_id, acquired_at"),
        ("", "*"),
        ("_chunks", "*"),
    ] {
        admin
            .batch_execute(&format!(
                "INSERT INTO {s}.{} SELECT {columns} FROM scratch.{}",
                quote_ident(&format!("{TABLE}{suffix}")),
                quote_ident(&format!("cp{suffix}"))
            ))
            .await
            .unwrap();
    }
    let legacy_chunks = format!("{s}.{}", quote_ident(&format!("{TABLE}_chunks")));
    let fk = format!(
        "SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND conrelid = {}::regclass",
        cdc_core::sql::quote_literal(&legacy_chunks)
    );
    assert_eq!(count(&admin, &fk).await, 1, "version 1 has the foreign key");

    // Opening the store migrates: version 2 recorded, the key gone, the old checkpoint
    // readable.
    let store = open(&db, config(SCHEMA, TABLE)).await;
    assert_eq!(store.chunks_table(), legacy_chunks);
    assert_eq!(versions(&admin, SCHEMA, TABLE).await, all_versions());
    assert_eq!(checkpoint_pg::SCHEMA_VERSION, 5);
    assert_eq!(foreign_keys_on_chunks(&admin, &store).await, 0);
    // Version 4 dropped the CHECK constraints of both tables that had them.
    for table in [
        store.checkpoints_table().to_owned(),
        format!("{s}.{}", quote_ident(&format!("{TABLE}_leases"))),
    ] {
        let sql = format!(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'c' AND conrelid = {}::regclass",
            cdc_core::sql::quote_literal(&table)
        );
        assert_eq!(count(&admin, &sql).await, 0, "CHECK constraints on {table}");
    }
    assert_eq!(store.load(&job, old.id).await.unwrap().checkpoint, old);
    let old_chunks = chunk_rows(&admin, &store, Some(1)).await;
    assert!(old_chunks > 1, "{old_chunks} chunk rows");

    // Retention on save deletes the old checkpoint's chunk rows with its row.
    let lease = store.acquire_lease(&job, &owner).await.unwrap();
    for n in 2..=3 {
        store
            .save(&lease, &checkpoint(&job, n, 10_000 + n as usize))
            .await
            .unwrap();
    }
    // Retention runs after each save returns; wait for it.
    store.settle_retention().await;
    let ids = |list: Vec<checkpoint_api::CheckpointMeta>| {
        list.iter().map(|m| m.id.get()).collect::<Vec<_>>()
    };
    assert_eq!(ids(store.list(&job).await.unwrap()), vec![2, 3]);
    assert_eq!(chunk_rows(&admin, &store, Some(1)).await, 0);
    assert!(chunk_rows(&admin, &store, Some(2)).await > 1);
    // An inline save's retention removes a chunk-rows checkpoint's chunks too.
    store.save(&lease, &checkpoint(&job, 4, 100)).await.unwrap();
    store.settle_retention().await;
    assert_eq!(ids(store.list(&job).await.unwrap()), vec![3, 4]);
    assert_eq!(chunk_rows(&admin, &store, Some(2)).await, 0);
    let three = chunk_rows(&admin, &store, Some(3)).await;
    assert!(three > 1);
    assert_eq!(chunk_rows(&admin, &store, None).await, three);

    // So do delete and retain.
    store
        .delete(&lease, CheckpointId::new(3).unwrap())
        .await
        .unwrap();
    assert_eq!(chunk_rows(&admin, &store, None).await, 0);
    store
        .save(&lease, &checkpoint(&job, 5, 10_005))
        .await
        .unwrap();
    assert!(chunk_rows(&admin, &store, Some(5)).await > 1);
    store.settle_retention().await;
    assert_eq!(store.retain(&lease, 0).await.unwrap(), 2);
    assert_eq!(chunk_rows(&admin, &store, None).await, 0);

    // A checkpoint row deleted by hand leaves its chunks (nothing cascades any more);
    // vacuum removes them, and nothing that belongs to a checkpoint.
    for n in 6..=7 {
        store
            .save(&lease, &checkpoint(&job, n, 10_000 + n as usize))
            .await
            .unwrap();
    }
    let seven = chunk_rows(&admin, &store, Some(7)).await;
    admin
        .execute(
            &format!(
                "DELETE FROM {} WHERE job = $1 AND checkpoint_id = 6",
                store.checkpoints_table()
            ),
            &[&job.as_str()],
        )
        .await
        .unwrap();
    assert!(chunk_rows(&admin, &store, Some(6)).await > 1);
    assert_eq!(store.vacuum().await.unwrap(), 0, "no large objects");
    assert_eq!(chunk_rows(&admin, &store, Some(6)).await, 0);
    assert_eq!(chunk_rows(&admin, &store, None).await, seven);
    assert_eq!(
        store
            .load(&job, CheckpointId::new(7).unwrap())
            .await
            .unwrap()
            .checkpoint,
        checkpoint(&job, 7, 10_007)
    );

    // Opening again changes nothing.
    drop(store);
    let store = open(&db, config(SCHEMA, TABLE)).await;
    assert_eq!(versions(&admin, SCHEMA, TABLE).await, all_versions());
    assert_eq!(store.list(&job).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_2_is_a_no_op_without_the_foreign_key() {
    let db = TestPostgres::new_database().await.unwrap();
    let admin = db.connect().await.unwrap();
    admin
        .batch_execute(&version_1_ddl("s", "cp"))
        .await
        .unwrap();
    // Dropped by hand before the upgrade (under whatever name): nothing left to drop.
    let chunks = "s.cp_chunks";
    let name: String = admin
        .query_one(
            &format!(
                "SELECT conname::text FROM pg_constraint
                 WHERE contype = 'f' AND conrelid = '{chunks}'::regclass"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    admin
        .batch_execute(&format!(
            "ALTER TABLE {chunks} DROP CONSTRAINT {}",
            quote_ident(&name)
        ))
        .await
        .unwrap();
    let store = open(&db, config("s", "cp")).await;
    assert_eq!(versions(&admin, "s", "cp").await, all_versions());
    assert_eq!(foreign_keys_on_chunks(&admin, &store).await, 0);
    let job = JobName::new("j").unwrap();
    let lease = store
        .acquire_lease(&job, &OwnerId::new("w").unwrap())
        .await
        .unwrap();
    for n in 1..=3 {
        store
            .save(&lease, &checkpoint(&job, n, 10_000))
            .await
            .unwrap();
    }
    store.settle_retention().await;
    assert_eq!(chunk_rows(&admin, &store, Some(1)).await, 0);
    assert_eq!(newest(&store, &job).await, checkpoint(&job, 3, 10_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_4_keeps_checks_an_operator_added() {
    let db = TestPostgres::new_database().await.unwrap();
    let admin = db.connect().await.unwrap();
    admin
        .batch_execute(&version_1_ddl("ops", "cp"))
        .await
        .unwrap();
    // Added by an operator before the upgrade: one on a column migration 1 never
    // checked, one over two columns (one of which migration 1 did check).
    admin
        .batch_execute(
            "ALTER TABLE ops.cp ADD CONSTRAINT \"operator: size\" CHECK (stored_bytes >= 0);
             ALTER TABLE ops.cp ADD CONSTRAINT operator_two
                 CHECK (checkpoint_id > 0 AND chunk_count >= 0);
             ALTER TABLE ops.cp_leases ADD CONSTRAINT operator_owner CHECK (owner <> '');",
        )
        .await
        .unwrap();
    let checks = |table: &'static str| {
        let admin = &admin;
        async move {
            let sql = format!(
                "SELECT conname::text FROM pg_constraint
                 WHERE contype = 'c' AND conrelid = '{table}'::regclass ORDER BY conname"
            );
            let rows = admin.query(&sql, &[]).await.unwrap();
            rows.iter().map(|r| r.get(0)).collect::<Vec<String>>()
        }
    };
    // Migration 1's own checks are there too before the upgrade.
    assert_eq!(checks("ops.cp").await.len(), 4);
    assert_eq!(checks("ops.cp_leases").await.len(), 2);

    let store = open(&db, config("ops", "cp")).await;
    assert_eq!(versions(&admin, "ops", "cp").await, all_versions());
    assert_eq!(checks("ops.cp").await, ["operator: size", "operator_two"]);
    assert_eq!(checks("ops.cp_leases").await, ["operator_owner"]);
    // And the store works under them.
    let job = JobName::new("j").unwrap();
    let lease = store
        .acquire_lease(&job, &OwnerId::new("w").unwrap())
        .await
        .unwrap();
    store.save(&lease, &checkpoint(&job, 1, 100)).await.unwrap();
    store
        .save(&lease, &checkpoint(&job, 2, 10_000))
        .await
        .unwrap();
    assert_eq!(newest(&store, &job).await, checkpoint(&job, 2, 10_000));
}

/// Migration 5 moves the newest stored LSN onto the lease row, filled in from the
/// checkpoints table: a writer that held its lease across the upgrade is still refused a
/// save below its newest checkpoint's LSN (it does not take a new lease, which would read
/// the table again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_5_fills_in_the_newest_lsn_of_every_job() {
    let db = TestPostgres::new_database().await.unwrap();
    let admin = db.connect().await.unwrap();
    let store = open(&db, config("five", "cp")).await;
    let job = JobName::new("j").unwrap();
    let lease = store
        .acquire_lease(&job, &OwnerId::new("w").unwrap())
        .await
        .unwrap();
    // LSNs 16 and 32 (`checkpoint` puts id n at 16 n).
    for n in 1..=2 {
        store.save(&lease, &checkpoint(&job, n, 100)).await.unwrap();
    }
    // Back to version 4, as a build before it left the tables.
    admin
        .batch_execute(
            "ALTER TABLE five.cp_leases DROP COLUMN newest_lsn;
             DELETE FROM five.cp_schema_version WHERE version = 5;",
        )
        .await
        .unwrap();
    drop(store);

    let store = open(&db, config("five", "cp")).await;
    assert_eq!(versions(&admin, "five", "cp").await, all_versions());
    let mut early = checkpoint(&job, 3, 100);
    early.source.commit_end_lsn = Lsn::from_u64(20);
    match store.save(&lease, &early).await {
        Err(checkpoint_api::CheckpointError::Regressed {
            regression: checkpoint_api::Regression::Lsn { latest, .. },
            ..
        }) => assert_eq!(latest, Lsn::from_u64(32)),
        other => panic!("expected Regressed::Lsn below 0/20, got {other:?}"),
    }
    store.save(&lease, &checkpoint(&job, 3, 100)).await.unwrap();
}
