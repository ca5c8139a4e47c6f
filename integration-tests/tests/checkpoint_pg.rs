//! `checkpoint-pg` against a real PostgreSQL: the conformance suite, quoting, concurrent
//! migrations, corruption, fencing, retention, vacuum and a connection killed mid-save.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cdc_core::Lsn;
use checkpoint_api::testkit::conformance::{self, sample_checkpoint, StoreFactory};
use checkpoint_api::{
    Checkpoint, CheckpointError, CheckpointId, CheckpointStore, JobName, Lease, OperatorState,
    OwnerId, StorageKind,
};
use checkpoint_pg::{LargeLayout, PgCheckpointStore, PgStoreConfig};
use integration_tests::{TestDatabase, TestPostgres};
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

/// A store factory on one test database; `corrupt` and `fail_next_save` act on the tables
/// directly (a byte flipped in the stored bytes; a trigger that fails the metadata insert,
/// which comes after all chunks are written).
struct Factory {
    db: TestDatabase,
    config: PgStoreConfig,
    admin: Client,
    seq: AtomicU64,
    store: PgCheckpointStore,
}

impl Factory {
    async fn new(db: TestDatabase, config: PgStoreConfig) -> Factory {
        let store = open(&db, config.clone(), "factory").await;
        let admin = db.connect().await.unwrap();
        admin
            .batch_execute(&format!(
                "CREATE TABLE fail_jobs (job text PRIMARY KEY, seq regclass NOT NULL);
                 CREATE FUNCTION fail_once() RETURNS trigger LANGUAGE plpgsql AS $$
                 DECLARE s regclass;
                 BEGIN
                     SELECT f.seq INTO s FROM fail_jobs f WHERE f.job = NEW.job;
                     -- Sequences are not transactional: the second save passes.
                     IF s IS NOT NULL AND nextval(s) = 1 THEN
                         RAISE EXCEPTION 'injected failure for job %', NEW.job;
                     END IF;
                     RETURN NEW;
                 END $$;
                 CREATE TRIGGER fail_once BEFORE INSERT ON {} FOR EACH ROW
                     EXECUTE FUNCTION fail_once();",
                store.checkpoints_table()
            ))
            .await
            .unwrap();
        Factory {
            db,
            config,
            admin,
            seq: AtomicU64::new(0),
            store,
        }
    }
}

async fn open(db: &TestDatabase, config: PgStoreConfig, app: &str) -> PgCheckpointStore {
    let mut pg = db.config();
    pg.application_name(app);
    PgCheckpointStore::connect(pg, config).await.unwrap()
}

/// Flips one bit in the middle of the stored bytes of `job`/`id`, wherever they are.
async fn flip_byte(client: &Client, store: &PgCheckpointStore, job: &str, id: i64) {
    let row = client
        .query_one(
            &format!(
                "SELECT storage, lo_oid, stored_bytes FROM {} WHERE job = $1 AND checkpoint_id = $2",
                store.checkpoints_table()
            ),
            &[&job, &id],
        )
        .await
        .unwrap();
    let storage: String = row.get(0);
    let oid: Option<u32> = row.get(1);
    let stored: i64 = row.get(2);
    let flip = |col: &str| {
        format!("set_byte({col}, length({col}) / 2, get_byte({col}, length({col}) / 2) # 16)")
    };
    let n = match storage.as_str() {
        "inline" => client
            .execute(
                &format!(
                    "UPDATE {} SET data = {} WHERE job = $1 AND checkpoint_id = $2",
                    store.checkpoints_table(),
                    flip("data")
                ),
                &[&job, &id],
            )
            .await
            .unwrap(),
        "chunk_rows" => client
            .execute(
                &format!(
                    "UPDATE {} SET data = {} WHERE job = $1 AND checkpoint_id = $2 AND seq = 0",
                    store.chunks_table(),
                    flip("data")
                ),
                &[&job, &id],
            )
            .await
            .unwrap(),
        "large_object" => {
            let oid = oid.unwrap();
            let at = stored / 2;
            client
                .execute(
                    "SELECT lo_put($1, $2, set_byte(b, 0, get_byte(b, 0) # 16))
                     FROM (SELECT lo_get($1, $2, 1) AS b) s",
                    &[&oid, &at],
                )
                .await
                .unwrap()
        }
        other => panic!("unknown storage {other}"),
    };
    assert_eq!(n, 1, "nothing corrupted for {job}/{id} ({storage})");
}

#[async_trait::async_trait]
impl StoreFactory for Factory {
    async fn open(&self) -> Result<Arc<dyn CheckpointStore>, CheckpointError> {
        let mut pg = self.db.config();
        pg.application_name("conformance");
        Ok(Arc::new(
            PgCheckpointStore::connect(pg, self.config.clone()).await?,
        ))
    }

    async fn corrupt(&self, job: &JobName, id: CheckpointId) -> Result<(), CheckpointError> {
        flip_byte(&self.admin, &self.store, job.as_str(), id.get() as i64).await;
        Ok(())
    }

    async fn fail_next_save(&self, job: &JobName) -> Result<bool, CheckpointError> {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let seq = format!("fail_seq_{n}");
        self.admin
            .batch_execute(&format!("CREATE SEQUENCE {seq}"))
            .await
            .unwrap();
        self.admin
            .execute(
                "INSERT INTO fail_jobs (job, seq) VALUES ($1, $2::text::regclass)
                 ON CONFLICT (job) DO UPDATE SET seq = EXCLUDED.seq",
                &[&job.as_str(), &seq],
            )
            .await
            .unwrap();
        Ok(true)
    }
}

fn no_auto_retention() -> PgStoreConfig {
    let mut c = PgStoreConfig::default();
    c.keep_on_save = None;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_chunk_rows_default_layout() {
    let db = TestPostgres::new_database().await.unwrap();
    let factory = Factory::new(db, no_auto_retention()).await;
    conformance::run_all(&factory).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_large_objects_and_odd_names() {
    let db = TestPostgres::new_database().await.unwrap();
    let mut config = no_auto_retention();
    config.large_layout = LargeLayout::LargeObject;
    config.schema = "my \"odd\" schema".into();
    config.table = "check points\"".into();
    // Everything but tiny checkpoints goes to large objects, in several chunks.
    config.inline_threshold = 64;
    config.large_object_chunk_size = 100;
    let factory = Factory::new(db, config).await;
    conformance::empty_job(&factory).await.unwrap();
    conformance::save_load_round_trip(&factory).await.unwrap();
    conformance::ordering_and_monotonic_ids(&factory)
        .await
        .unwrap();
    conformance::retention(&factory).await.unwrap();
    conformance::atomic_failed_save(&factory).await.unwrap();
    conformance::corrupt_newest_falls_back(&factory)
        .await
        .unwrap();
    conformance::fencing_between_two_writers(&factory)
        .await
        .unwrap();
    conformance::empty_state(&factory).await.unwrap();
    let leftover = orphans(&factory.admin, &factory.store).await;
    assert_eq!(leftover, 0, "large objects without a checkpoint row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_starts_migrate_once() {
    let db = TestPostgres::new_database().await.unwrap();
    let mut config = PgStoreConfig::default();
    config.schema = "s \"q\"".into();
    config.table = "t x".into();
    let (a, b, c) = tokio::join!(
        open(&db, config.clone(), "a"),
        open(&db, config.clone(), "b"),
        open(&db, config.clone(), "c")
    );
    let client = db.connect().await.unwrap();
    let versions: Vec<i32> = client
        .query(
            "SELECT version FROM \"s \"\"q\"\"\".\"t x_schema_version\" ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // Each migration recorded once, in order.
    assert_eq!(
        versions,
        (1..=checkpoint_pg::SCHEMA_VERSION).collect::<Vec<_>>()
    );
    // All three see one store.
    let job = JobName::new("j").unwrap();
    let lease = a
        .acquire_lease(&job, &OwnerId::new("a").unwrap())
        .await
        .unwrap();
    let cp = sample_checkpoint(&job, CheckpointId::FIRST, Lsn::from_u64(1));
    a.save(&lease, &cp).await.unwrap();
    assert_eq!(b.load(&job, cp.id).await.unwrap().checkpoint, cp);
    assert_eq!(c.list(&job).await.unwrap().len(), 1);
}

fn id(n: u64) -> CheckpointId {
    CheckpointId::new(n).unwrap()
}

fn with_state(job: &JobName, n: u64, state: Bytes) -> Checkpoint {
    let mut cp = sample_checkpoint(job, id(n), Lsn::from_u64(n * 16));
    cp.operators.push(OperatorState {
        id: "big".into(),
        kind: "blob".into(),
        state_version: 1,
        state,
    });
    cp
}

/// Bytes LZ4 cannot shrink.
fn noise(len: usize, seed: u64) -> Bytes {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    Bytes::from(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_newest_falls_back_in_every_storage_kind() {
    let db = TestPostgres::new_database().await.unwrap();
    let admin = db.connect().await.unwrap();
    for (layout, state_len, expect_chunked) in [
        (LargeLayout::ChunkRows, 100, false),
        (LargeLayout::ChunkRows, 300_000, true),
        (LargeLayout::LargeObject, 300_000, true),
    ] {
        let mut config = PgStoreConfig::default();
        config.large_layout = layout;
        config.inline_threshold = 100_000;
        config.row_chunk_size = 64 << 10;
        config.large_object_chunk_size = 64 << 10;
        let store = open(&db, config, "corrupt").await;
        let job = JobName::new(format!("corrupt-{layout:?}-{state_len}")).unwrap();
        let lease = store
            .acquire_lease(&job, &OwnerId::new("w").unwrap())
            .await
            .unwrap();
        let one = with_state(&job, 1, noise(state_len, 1));
        let two = with_state(&job, 2, noise(state_len, 2));
        store.save(&lease, &one).await.unwrap();
        let meta = store.save(&lease, &two).await.unwrap();
        assert_eq!(
            matches!(meta.storage, StorageKind::Chunked { chunks } if chunks > 1),
            expect_chunked,
            "{meta:?}"
        );
        flip_byte(&admin, &store, job.as_str(), 2).await;
        let latest = store.latest(&job).await.unwrap();
        assert_eq!(latest.checkpoint.unwrap().checkpoint, one);
        assert_eq!(latest.skipped.len(), 1);
        assert_eq!(latest.skipped[0].meta.id, id(2));
        let err = store.load(&job, id(2)).await.unwrap_err();
        assert!(
            matches!(err, CheckpointError::Corrupt { .. }) && !err.is_retryable(),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_writer_is_fenced() {
    let db = TestPostgres::new_database().await.unwrap();
    let a = open(&db, PgStoreConfig::default(), "a").await;
    let b = open(&db, PgStoreConfig::default(), "b").await;
    let job = JobName::new("fenced").unwrap();
    let old = a
        .acquire_lease(&job, &OwnerId::new("a").unwrap())
        .await
        .unwrap();
    a.save(&old, &with_state(&job, 1, noise(10, 1)))
        .await
        .unwrap();
    let new = b
        .acquire_lease(&job, &OwnerId::new("b").unwrap())
        .await
        .unwrap();
    assert!(new.epoch() > old.epoch());
    for (what, result) in [
        (
            "inline save",
            a.save(&old, &with_state(&job, 2, noise(10, 2))).await.err(),
        ),
        (
            "large save",
            a.save(&old, &with_state(&job, 3, noise(2 << 20, 3)))
                .await
                .err(),
        ),
        ("retain", a.retain(&old, 0).await.err()),
        ("delete", a.delete(&old, id(1)).await.err()),
    ] {
        match result {
            Some(CheckpointError::Fenced { held, current, .. }) => {
                assert_eq!((held, current), (old.epoch(), new.epoch()), "{what}");
            }
            other => panic!("{what}: expected Fenced, got {other:?}"),
        }
    }
    assert_eq!(
        b.list(&job).await.unwrap().len(),
        1,
        "the stale writer changed nothing"
    );
    b.save(&new, &with_state(&job, 2, noise(2 << 20, 2)))
        .await
        .unwrap();
}

/// The `count(*)` that `sql` selects.
async fn count(client: &Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> i64 {
    client.query_one(sql, params).await.unwrap().get(0)
}

/// Large objects that no checkpoint row references.
async fn orphans(client: &Client, store: &PgCheckpointStore) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM pg_largeobject_metadata m
         WHERE NOT EXISTS (SELECT 1 FROM {} c WHERE c.lo_oid = m.oid)",
        store.checkpoints_table()
    );
    count(client, &sql, &[]).await
}

/// A store keeping 2 checkpoints per job, with states over 1000 bytes in large objects,
/// and a lease on `job`.
async fn retaining_two(
    db: &TestDatabase,
    app: &str,
    job: &str,
) -> (PgCheckpointStore, JobName, Lease) {
    let mut config = PgStoreConfig::default();
    config.large_layout = LargeLayout::LargeObject;
    config.inline_threshold = 1000;
    config.keep_on_save = Some(2);
    let store = open(db, config, app).await;
    let job = JobName::new(job).unwrap();
    let lease = store
        .acquire_lease(&job, &OwnerId::new("w").unwrap())
        .await
        .unwrap();
    (store, job, lease)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_on_save_unlinks_and_vacuum_removes_only_our_orphans() {
    let db = TestPostgres::new_database().await.unwrap();
    let admin = db.connect().await.unwrap();
    let (store, job, lease) = retaining_two(&db, "retention", "retained").await;
    for n in 1..=4 {
        // Alternate inline and large-object checkpoints.
        let len = if n % 2 == 0 { 10 } else { 5000 };
        store
            .save(&lease, &with_state(&job, n, noise(len, n)))
            .await
            .unwrap();
    }
    // Retention runs after each save returns; wait for it.
    store.settle_retention().await;
    let ids: Vec<u64> = store
        .list(&job)
        .await
        .unwrap()
        .iter()
        .map(|m| m.id.get())
        .collect();
    assert_eq!(ids, vec![3, 4]);
    let total: i64 = count(&admin, "SELECT count(*) FROM pg_largeobject_metadata", &[]).await;
    assert_eq!(total, 1, "only checkpoint 3's large object is left");
    assert_eq!(orphans(&admin, &store).await, 0);

    // A foreign large object, and one of ours orphaned behind the store's back.
    let foreign: u32 = admin
        .query_one("SELECT lo_from_bytea(0, '\\x01')", &[])
        .await
        .unwrap()
        .get(0);
    admin
        .execute(
            &format!(
                "DELETE FROM {} WHERE job = $1 AND checkpoint_id = 3",
                store.checkpoints_table()
            ),
            &[&job.as_str()],
        )
        .await
        .unwrap();
    assert_eq!(orphans(&admin, &store).await, 2);
    assert_eq!(store.vacuum().await.unwrap(), 1);
    assert_eq!(store.vacuum().await.unwrap(), 0);
    let left: Vec<u32> = admin
        .query("SELECT oid FROM pg_largeobject_metadata", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, vec![foreign]);
}

/// Retention deletes from the lease's `lowest_id` up: the bound moves with every save that
/// cuts, stays at or below the oldest kept row whatever the gaps between ids, and rows of
/// both layouts below the cut are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_moves_the_lowest_id_and_never_leaves_a_row_below_it() {
    let db = TestPostgres::new_database().await.unwrap();
    let admin = db.connect().await.unwrap();
    let (store, job, lease) = retaining_two(&db, "lowest", "bounded").await;
    let leases = store.leases_table();
    let lowest_sql = format!("SELECT lowest_id FROM {leases} WHERE job = $1");
    let mut saved = Vec::new();
    for (n, id) in [1u64, 2, 5, 9, 10, 20, 21, 40].into_iter().enumerate() {
        let len = if n % 3 == 0 { 5000 } else { 10 };
        store
            .save(&lease, &with_state(&job, id, noise(len, id)))
            .await
            .unwrap();
        saved.push(id);
        store.settle_retention().await;
        let kept: Vec<u64> = store
            .list(&job)
            .await
            .unwrap()
            .iter()
            .map(|m| m.id.get())
            .collect();
        let want = saved[saved.len().saturating_sub(2)..].to_vec();
        assert_eq!(kept, want, "after saving {id}");
        let lowest: Option<i64> = admin
            .query_one(&lowest_sql, &[&job.as_str()])
            .await
            .unwrap()
            .get(0);
        if saved.len() > 2 {
            // One above the newest deleted id, at or below the oldest kept one.
            let deleted = saved[saved.len() - 3] as i64;
            assert_eq!(lowest, Some(deleted + 1), "after saving {id}");
            assert!(lowest.unwrap() <= kept[0] as i64);
        } else {
            assert_eq!(lowest, None, "nothing cut yet after {id}");
        }
        assert_eq!(orphans(&admin, &store).await, 0);
    }
    // Every large object left belongs to a kept checkpoint.
    let left: i64 = count(&admin, "SELECT count(*) FROM pg_largeobject_metadata", &[]).await;
    let kept_large = count(
        &admin,
        &format!(
            "SELECT count(*) FROM {} WHERE job = $1 AND lo_oid IS NOT NULL",
            store.checkpoints_table()
        ),
        &[&job.as_str()],
    )
    .await;
    assert_eq!(left, kept_large);
}

/// Waits until the writer's backend runs a statement matching `pattern`; returns its pid.
async fn writer_pid(admin: &Client, app: &str, pattern: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let row = admin
            .query_opt(
                "SELECT pid FROM pg_stat_activity
                 WHERE application_name = $1 AND state = 'active' AND query LIKE $2 LIMIT 1",
                &[&app, &pattern],
            )
            .await
            .unwrap();
        if let Some(row) = row {
            return row.get(0);
        }
        assert!(Instant::now() < deadline, "writer never ran {pattern}");
        tokio::task::yield_now().await;
    }
}

async fn killed_mid_save(layout: LargeLayout, pattern: &str) {
    let db = TestPostgres::new_database().await.unwrap();
    let admin = db.connect().await.unwrap();
    let mut config = PgStoreConfig::default();
    config.large_layout = layout;
    let app = format!("crash-{layout:?}");
    let store = open(&db, config, &app).await;
    let job = JobName::new("crash").unwrap();
    let lease = store
        .acquire_lease(&job, &OwnerId::new("w").unwrap())
        .await
        .unwrap();
    let first = with_state(&job, 1, noise(2 << 20, 1));
    store.save(&lease, &first).await.unwrap();

    let big = with_state(&job, 2, noise(256 << 20, 2));
    let writer = {
        let store = store.clone();
        let lease = lease.clone();
        tokio::spawn(async move { store.save(&lease, &big).await })
    };
    let pid = writer_pid(&admin, &app, pattern).await;
    let killed: bool = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(killed);
    let err = writer.await.unwrap().unwrap_err();
    assert!(
        err.is_retryable(),
        "connection loss must be retryable: {err}"
    );

    let latest = store.latest(&job).await.unwrap();
    assert_eq!(latest.checkpoint.unwrap().checkpoint, first);
    assert!(latest.skipped.is_empty());
    assert_eq!(orphans(&admin, &store).await, 0);
    let chunk_rows = count(
        &admin,
        &format!(
            "SELECT count(*) FROM {} WHERE checkpoint_id = 2",
            store.chunks_table()
        ),
        &[],
    )
    .await;
    assert_eq!(chunk_rows, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_killed_mid_large_object_save_leaves_no_trace() {
    killed_mid_save(LargeLayout::LargeObject, "%lo_put%").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_killed_mid_copy_save_leaves_no_trace() {
    killed_mid_save(LargeLayout::ChunkRows, "COPY%").await;
}

/// Retention runs after a save returns, never deletes below `keep_on_save`, and the next
/// one deletes what a writer that stopped before its retention left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_after_save_catches_up_with_what_an_earlier_writer_left() {
    let db = TestPostgres::new_database().await.unwrap();
    let mut keep_all = PgStoreConfig::default();
    keep_all.keep_on_save = None;
    let mut keep_two = PgStoreConfig::default();
    keep_two.keep_on_save = Some(2);
    keep_two.inline_threshold = 1000;
    let job = JobName::new("catching-up").unwrap();
    let ids = |list: Vec<checkpoint_api::CheckpointMeta>| {
        list.iter().map(|m| m.id.get()).collect::<Vec<_>>()
    };

    // A writer whose retention never ran (here: none configured) leaves five.
    let before = open(&db, keep_all, "before").await;
    let first = before
        .acquire_lease(&job, &OwnerId::new("a").unwrap())
        .await
        .unwrap();
    for n in 1..=5 {
        before
            .save(&first, &with_state(&job, n, noise(10, n)))
            .await
            .unwrap();
    }
    before.settle_retention().await;
    assert_eq!(ids(before.list(&job).await.unwrap()), vec![1, 2, 3, 4, 5]);

    // The next writer's saves, inline and chunked, each followed by its retention at
    // some point: at no moment are fewer than the two newest there.
    let after = open(&db, keep_two, "after").await;
    let lease = after
        .acquire_lease(&job, &OwnerId::new("b").unwrap())
        .await
        .unwrap();
    for n in 6..=9 {
        let len = if n % 2 == 0 { 5000 } else { 10 };
        after
            .save(&lease, &with_state(&job, n, noise(len, n)))
            .await
            .unwrap();
        let now = ids(after.list(&job).await.unwrap());
        assert!(
            now.ends_with(&[n - 1, n]),
            "the two newest are kept at once: {now:?}"
        );
    }
    after.settle_retention().await;
    assert_eq!(ids(after.list(&job).await.unwrap()), vec![8, 9]);

    // The earlier writer's lease was taken over: its retention deletes nothing.
    let refused = before.retain(&first, 0).await.unwrap_err();
    assert!(
        matches!(refused, CheckpointError::Fenced { .. }),
        "{refused:?}"
    );
    assert_eq!(ids(after.list(&job).await.unwrap()), vec![8, 9]);
}

/// Checkpoint `n` at LSN `lsn`, with `len` bytes of state (over the inline threshold of
/// the default config from 256 KiB: a large save).
fn at_lsn(job: &JobName, n: u64, lsn: u64, len: usize) -> Checkpoint {
    let mut cp = with_state(job, n, noise(len, n));
    cp.source.commit_end_lsn = Lsn::from_u64(lsn);
    cp
}

/// Asserts that `result` is a refusal because the LSN went below `newest`.
#[track_caller]
fn below(result: Result<checkpoint_api::CheckpointMeta, CheckpointError>, newest: u64) {
    match result {
        Err(CheckpointError::Regressed {
            regression: checkpoint_api::Regression::Lsn { latest, .. },
            ..
        }) => assert_eq!(latest, Lsn::from_u64(newest)),
        other => panic!("expected Regressed::Lsn below {newest}, got {other:?}"),
    }
}

/// A save may not go below the newest stored checkpoint's LSN. The lease row keeps that
/// LSN (schema version 5), so every way the newest row changes must keep it right: inline,
/// large and in-transaction saves, a delete of the newest row (and of another), retention
/// of none, and rows deleted by hand while no writer held the job (the next lease reads
/// the table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_lsn_follows_the_newest_row() {
    let db = TestPostgres::new_database().await.unwrap();
    let admin = db.connect().await.unwrap();
    let store = open(&db, no_auto_retention(), "newest").await;
    let job = JobName::new("newest").unwrap();
    let owner = OwnerId::new("w").unwrap();
    let lease = store.acquire_lease(&job, &owner).await.unwrap();

    store.save(&lease, &at_lsn(&job, 1, 100, 10)).await.unwrap();
    below(store.save(&lease, &at_lsn(&job, 2, 99, 10)).await, 100);
    // A large save moves it too.
    store
        .save(&lease, &at_lsn(&job, 3, 300, 2 << 20))
        .await
        .unwrap();
    below(store.save(&lease, &at_lsn(&job, 4, 299, 10)).await, 300);
    below(
        store.save(&lease, &at_lsn(&job, 4, 299, 2 << 20)).await,
        300,
    );
    // So does a save in the caller's transaction, with its retention.
    let client = db.connect().await.unwrap();
    client.batch_execute("BEGIN").await.unwrap();
    store
        .save_in(&client, &lease, &at_lsn(&job, 5, 500, 10), 10)
        .await
        .unwrap();
    client.batch_execute("COMMIT").await.unwrap();
    below(store.save(&lease, &at_lsn(&job, 6, 499, 10)).await, 500);

    // Deleting a row below the newest changes nothing; deleting the newest makes the one
    // below it the bound.
    store.delete(&lease, id(1)).await.unwrap();
    below(store.save(&lease, &at_lsn(&job, 6, 499, 10)).await, 500);
    store.delete(&lease, id(5)).await.unwrap();
    below(store.save(&lease, &at_lsn(&job, 6, 299, 10)).await, 300);
    store.save(&lease, &at_lsn(&job, 6, 300, 10)).await.unwrap();

    // Retention keeping one leaves the bound; keeping none removes it.
    assert_eq!(store.retain(&lease, 1).await.unwrap(), 1);
    below(store.save(&lease, &at_lsn(&job, 7, 299, 10)).await, 300);
    assert_eq!(store.retain(&lease, 0).await.unwrap(), 1);
    store.save(&lease, &at_lsn(&job, 7, 50, 10)).await.unwrap();

    // The newest row deleted by hand while the job is stopped: the next lease reads the
    // table, so the row below it is the bound again.
    store.save(&lease, &at_lsn(&job, 8, 800, 10)).await.unwrap();
    admin
        .execute(
            &format!(
                "DELETE FROM {} WHERE job = $1 AND checkpoint_id = 8",
                store.checkpoints_table()
            ),
            &[&job.as_str()],
        )
        .await
        .unwrap();
    let lease = store.acquire_lease(&job, &owner).await.unwrap();
    below(store.save(&lease, &at_lsn(&job, 9, 49, 10)).await, 50);
    store.save(&lease, &at_lsn(&job, 9, 60, 10)).await.unwrap();
    assert_eq!(
        store
            .list(&job)
            .await
            .unwrap()
            .iter()
            .map(|m| m.id.get())
            .collect::<Vec<_>>(),
        [7, 9]
    );
}

/// The lease's newest LSN, and the newest stored row's, of `job`.
async fn both_newest(admin: &Client, store: &PgCheckpointStore, job: &JobName) -> [Option<u64>; 2] {
    let (cps, leases) = (store.checkpoints_table(), store.leases_table());
    let sql = format!(
        "SELECT (SELECT newest_lsn FROM {leases} WHERE job = $1),
                (SELECT commit_end_lsn FROM {cps} WHERE job = $1
                 ORDER BY checkpoint_id DESC LIMIT 1)"
    );
    let row = admin.query_one(&sql, &[&job.as_str()]).await.unwrap();
    let lsn = |i| {
        row.get::<_, Option<tokio_postgres::types::PgLsn>>(i)
            .map(u64::from)
    };
    [lsn(0), lsn(1)]
}

/// A lease on job `name`, with checkpoints 8 (LSN 80) and 9 (LSN 90) saved under it.
async fn leased_with_two_rows(store: &PgCheckpointStore, name: &str) -> (JobName, Lease) {
    let job = JobName::new(name).unwrap();
    let lease = store
        .acquire_lease(&job, &OwnerId::new("w").unwrap())
        .await
        .unwrap();
    store.save(&lease, &at_lsn(&job, 8, 80, 10)).await.unwrap();
    store.save(&lease, &at_lsn(&job, 9, 90, 10)).await.unwrap();
    (job, lease)
}

/// Waits until `n` connections named `app` wait for a lock.
async fn waiting(admin: &Client, app: &str, n: i64) {
    integration_tests::eventually(
        &format!("{n} of {app} waiting for a lock"),
        Duration::from_secs(30),
        || async {
            let sql = "SELECT count(*) FROM pg_stat_activity \
                       WHERE application_name = $1 AND wait_event_type = 'Lock'";
            (count(admin, sql, &[&app]).await == n).then_some(())
        },
    )
    .await;
}

/// A delete of the newest row, or retention of none, queued behind a save of the same job
/// sees the saved row: each takes its snapshot only once it holds the lease row, so the
/// lease's newest LSN still names the newest stored row. (In one statement, the snapshot
/// came first: the delete made the row below the deleted one the bound, under the saved
/// row; retention of none cleared the bound and left the saved row.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_queued_behind_a_save_sees_the_saved_row() {
    let db = TestPostgres::new_database().await.unwrap();
    let admin = db.connect().await.unwrap();
    let saver = open(&db, no_auto_retention(), "race-save").await;
    let deleter = Arc::new(open(&db, no_auto_retention(), "race-delete").await);
    for (n, deleting) in [(1u64, false), (2, true)] {
        let (job, lease) = leased_with_two_rows(&saver, &format!("race-{n}")).await;
        // Hold the lease row, so the save and then the delete queue behind it in order.
        let mut holder = db.connect().await.unwrap();
        let hold = holder.transaction().await.unwrap();
        let leases = saver.leases_table();
        hold.execute(
            &format!("SELECT 1 FROM {leases} WHERE job = $1 FOR UPDATE"),
            &[&job.as_str()],
        )
        .await
        .unwrap();
        let save = {
            let (saver, lease, cp) = (saver.clone(), lease.clone(), at_lsn(&job, 10, 100, 10));
            tokio::spawn(async move { saver.save(&lease, &cp).await.map(drop) })
        };
        waiting(&admin, "race-save", 1).await;
        let delete = {
            let (deleter, lease) = (deleter.clone(), lease.clone());
            tokio::spawn(async move {
                if deleting {
                    deleter.delete(&lease, id(9)).await
                } else {
                    deleter.retain(&lease, 0).await.map(drop)
                }
            })
        };
        waiting(&admin, "race-delete", 1).await;
        hold.commit().await.unwrap();
        save.await.unwrap().unwrap();
        delete.await.unwrap().unwrap();
        let [lease_lsn, row_lsn] = both_newest(&admin, &saver, &job).await;
        assert_eq!(lease_lsn, row_lsn, "deleting: {deleting}");
        assert_eq!(row_lsn, deleting.then_some(100), "deleting: {deleting}");
    }
}

/// A save in the caller's transaction holds the lease row until that transaction ends.
/// Retention queued behind it sees the outcome: the saved row once the caller commits,
/// nothing of it once the caller rolls back. Either way the lease's newest LSN is the
/// newest row's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_queued_behind_a_save_in_sees_its_outcome() {
    let db = TestPostgres::new_database().await.unwrap();
    let admin = db.connect().await.unwrap();
    let saver = open(&db, no_auto_retention(), "race-save-in").await;
    let retainer = Arc::new(open(&db, no_auto_retention(), "race-retain").await);
    for (n, commit, keep) in [
        (1u64, true, 1usize),
        (2, true, 0),
        (3, false, 1),
        (4, false, 0),
    ] {
        let (job, lease) = leased_with_two_rows(&saver, &format!("race-in-{n}")).await;
        let caller = db.connect().await.unwrap();
        caller.batch_execute("BEGIN").await.unwrap();
        saver
            .save_in(&caller, &lease, &at_lsn(&job, 10, 100, 10), 10)
            .await
            .unwrap();
        let retain = {
            let (retainer, lease) = (retainer.clone(), lease.clone());
            tokio::spawn(async move { retainer.retain(&lease, keep).await.map(drop) })
        };
        waiting(&admin, "race-retain", 1).await;
        let end = if commit { "COMMIT" } else { "ROLLBACK" };
        caller.batch_execute(end).await.unwrap();
        retain.await.unwrap().unwrap();
        let case = format!("{end}, keep {keep}");
        let [lease_lsn, row_lsn] = both_newest(&admin, &saver, &job).await;
        assert_eq!(lease_lsn, row_lsn, "{case}");
        let newest = match (keep, commit) {
            (0, _) => None,
            (_, true) => Some(100),
            (_, false) => Some(90),
        };
        assert_eq!(row_lsn, newest, "{case}");
    }
}
