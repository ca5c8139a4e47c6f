//! What the tests share: the test context [`T`], fresh job names, sample checkpoints.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cdc_core::Lsn;

use super::{Failure, StoreFactory};
use crate::error::{CheckpointError, NotFound};
use crate::model::{
    Checkpoint, CheckpointId, JobName, OperatorState, ProtocolOptions, RelationColumn,
    RelationVersion, SinkPosition, SnapshotProgress, SourcePosition, StreamingMode, TableCursor,
    TableDone, TableRef, Timestamp,
};
use crate::store::{CheckpointMeta, CheckpointStore, Lease, OwnerId};

/// A test's context: its name, for failure messages.
#[derive(Clone, Copy)]
pub(super) struct T(pub(super) &'static str);

impl T {
    pub(super) fn fail(self, message: impl Into<String>) -> Failure {
        Failure {
            test: self.0,
            message: message.into(),
        }
    }

    pub(super) fn ensure(
        self,
        condition: bool,
        message: impl FnOnce() -> String,
    ) -> Result<(), Failure> {
        if condition {
            Ok(())
        } else {
            Err(self.fail(message()))
        }
    }

    /// The value of a store call that must succeed.
    pub(super) fn ok<V>(
        self,
        what: &str,
        result: Result<V, CheckpointError>,
    ) -> Result<V, Failure> {
        result.map_err(|e| self.fail(format!("{what}: unexpected error: {e}")))
    }

    /// The error of a store call that must fail.
    pub(super) fn err<V: fmt::Debug>(
        self,
        what: &str,
        result: Result<V, CheckpointError>,
    ) -> Result<CheckpointError, Failure> {
        match result {
            Ok(v) => Err(self.fail(format!("{what}: succeeded with {v:?}, expected an error"))),
            Err(e) => Ok(e),
        }
    }

    pub(super) async fn job(
        self,
        factory: &dyn StoreFactory,
        suffix: &str,
    ) -> Result<(Arc<dyn CheckpointStore>, JobName, Lease), Failure> {
        let store = self.ok("open", factory.open().await)?;
        let job = fresh_job(self.0, suffix).map_err(|e| self.fail(format!("job name: {e}")))?;
        let owner = OwnerId::new(format!("conformance-{}", self.0))
            .map_err(|e| self.fail(e.to_string()))?;
        let lease = self.ok("acquire_lease", store.acquire_lease(&job, &owner).await)?;
        self.ensure(lease.job() == &job && lease.owner() == &owner, || {
            format!("lease {lease:?} is not for {job} / {owner}")
        })?;
        Ok((store, job, lease))
    }

    pub(super) fn id(self, id: u64) -> Result<CheckpointId, Failure> {
        CheckpointId::new(id).ok_or_else(|| self.fail("checkpoint id 0"))
    }

    pub(super) async fn ids(
        self,
        store: &dyn CheckpointStore,
        job: &JobName,
    ) -> Result<Vec<u64>, Failure> {
        let list = self.ok("list", store.list(job).await)?;
        Ok(list.iter().map(|m| m.id.get()).collect())
    }
}

/// A job name no earlier run can have used.
pub(super) fn fresh_job(test: &str, suffix: &str) -> Result<JobName, crate::InvalidCheckpoint> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    JobName::new(format!("conformance-{test}{suffix}-{nanos:x}-{n}"))
}

/// A checkpoint with a bit of everything: operators, snapshot progress, sinks, fingerprint.
pub fn sample_checkpoint(job: &JobName, id: CheckpointId, lsn: Lsn) -> Checkpoint {
    let n = id.get();
    Checkpoint {
        job: job.clone(),
        id,
        created_at: Timestamp::from_unix_micros(1_750_000_000_000_000 + n as i64),
        source: SourcePosition {
            commit_end_lsn: lsn,
            slot: "pgcdc_slot".into(),
            publications: vec!["pub_a".into(), "pub_b".into()],
            protocol: ProtocolOptions {
                proto_version: 4,
                binary: true,
                messages: false,
                streaming: StreamingMode::Parallel,
                two_phase: false,
                origin: Some("none".into()),
            },
        },
        config_fingerprint: Bytes::from(vec![0xAB; 32]),
        operators: vec![
            OperatorState {
                id: "dedup".into(),
                kind: "dedup".into(),
                state_version: 3,
                state: Bytes::from(format!("dedup state of checkpoint {n}").into_bytes()),
            },
            OperatorState {
                id: "count".into(),
                kind: "counter".into(),
                state_version: 1,
                state: Bytes::copy_from_slice(&n.to_le_bytes()),
            },
        ],
        snapshot: Some(SnapshotProgress {
            consistent_point: Lsn::from_u64(0x1000),
            tables_done: vec![TableDone {
                table: TableRef {
                    schema: "public".into(),
                    name: "orders".into(),
                },
                chunks: 12,
                rows: 120_000,
                ..TableDone::default()
            }],
            in_progress: Some(TableCursor {
                table: TableRef {
                    schema: "public".into(),
                    name: "customers".into(),
                },
                chunks_done: 3,
                rows_done: 30_000,
                cursor: Bytes::from_static(b"\x00\x00\x75\x30"),
                ..TableCursor::default()
            }),
            complete: false,
            ..SnapshotProgress::default()
        }),
        sinks: vec![SinkPosition {
            sink_id: "kafka".into(),
            position: Bytes::from(format!("offset={n}").into_bytes()),
        }],
        relations: vec![RelationVersion {
            oid: 16_384,
            lsn,
            schema: "public".into(),
            name: "customers".into(),
            columns: vec![
                RelationColumn {
                    name: "id".into(),
                    type_oid: 20,
                    type_modifier: -1,
                    key: true,
                },
                RelationColumn {
                    name: "name".into(),
                    type_oid: 1043,
                    type_modifier: 68,
                    key: false,
                },
            ],
        }],
    }
}

pub(super) fn lsn(n: u64) -> Lsn {
    Lsn::from_u64(0x16_0000_0000 + n * 0x100)
}

/// Deterministic bytes that do not compress.
pub(super) fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut x = seed | 1;
    for word in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bytes = x.to_le_bytes();
        let n = word.len();
        word.copy_from_slice(&bytes[..n]);
    }
    out
}

pub(super) fn check_meta(t: T, meta: &CheckpointMeta, cp: &Checkpoint) -> Result<(), Failure> {
    t.ensure(meta.describes(cp), || {
        format!("metadata {meta:?} do not describe checkpoint {}", cp.id)
    })?;
    t.ensure(meta.stored_bytes > 0, || {
        format!("stored_bytes is 0 for checkpoint {}", cp.id)
    })
}

pub(super) async fn save(
    t: T,
    store: &dyn CheckpointStore,
    lease: &Lease,
    cp: &Checkpoint,
) -> Result<CheckpointMeta, Failure> {
    let meta = t.ok(&format!("save {}", cp.id), store.save(lease, cp).await)?;
    check_meta(t, &meta, cp)?;
    Ok(meta)
}

pub(super) fn is_missing_checkpoint(e: &CheckpointError) -> bool {
    matches!(
        e,
        CheckpointError::NotFound {
            what: NotFound::Checkpoint(_),
            ..
        }
    )
}
