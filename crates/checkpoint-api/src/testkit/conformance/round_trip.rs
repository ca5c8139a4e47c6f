//! What is saved comes back: an empty job, a round trip, the least and the most a
//! checkpoint can hold.

use bytes::Bytes;
use cdc_core::Lsn;

use super::support::{is_missing_checkpoint, lsn, noise, sample_checkpoint, save, T};
use super::{Failure, StoreFactory};
use crate::model::{
    Checkpoint, CheckpointId, OperatorState, ProtocolOptions, SinkPosition, SnapshotProgress,
    SourcePosition, Timestamp,
};

/// A job with no checkpoints: nothing found, nothing skipped, nothing to delete.
pub async fn empty_job(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("empty_job");
    let (store, job, lease) = t.job(factory, "").await?;
    let latest = t.ok("latest", store.latest(&job).await)?;
    t.ensure(
        latest.checkpoint.is_none() && latest.skipped.is_empty(),
        || format!("latest of an empty job: {latest:?}"),
    )?;
    t.ensure(t.ids(&*store, &job).await?.is_empty(), || {
        "list of an empty job is not empty".into()
    })?;
    let e = t.err("load", store.load(&job, CheckpointId::FIRST).await)?;
    t.ensure(is_missing_checkpoint(&e), || {
        format!("load: {e:?}, expected NotFound")
    })?;
    let e = t.err("delete", store.delete(&lease, CheckpointId::FIRST).await)?;
    t.ensure(is_missing_checkpoint(&e), || {
        format!("delete: {e:?}, expected NotFound")
    })?;
    let deleted = t.ok("retain", store.retain(&lease, 0).await)?;
    t.ensure(deleted == 0, || {
        format!("retain deleted {deleted} of nothing")
    })
}

/// A saved checkpoint loads back equal, by id and as the latest, with matching metadata.
pub async fn save_load_round_trip(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("save_load_round_trip");
    let (store, job, lease) = t.job(factory, "").await?;
    let cp = sample_checkpoint(&job, t.id(1)?, lsn(1));
    let meta = save(t, &*store, &lease, &cp).await?;
    let loaded = t.ok("load", store.load(&job, cp.id).await)?;
    t.ensure(loaded.checkpoint == cp, || {
        "loaded checkpoint differs from the saved one".into()
    })?;
    t.ensure(loaded.meta == meta, || {
        format!("load metadata {:?} != save metadata {meta:?}", loaded.meta)
    })?;
    let latest = t.ok("latest", store.latest(&job).await)?;
    t.ensure(latest.skipped.is_empty(), || {
        format!("latest skipped {:?}", latest.skipped)
    })?;
    t.ensure(latest.checkpoint.as_ref() == Some(&loaded), || {
        format!("latest: {:?}", latest.checkpoint.map(|c| c.meta))
    })?;
    let list = t.ok("list", store.list(&job).await)?;
    t.ensure(list == vec![meta], || format!("list: {list:?}"))
}

/// The least a checkpoint can hold round-trips: no operators, sinks, snapshot or
/// fingerprint; then empty operator state and sink position.
pub async fn empty_state(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("empty_state");
    let (store, job, lease) = t.job(factory, "").await?;
    let bare = Checkpoint::new(
        job.clone(),
        t.id(1)?,
        Timestamp::UNIX_EPOCH,
        SourcePosition {
            commit_end_lsn: Lsn::INVALID,
            slot: String::new(),
            publications: Vec::new(),
            protocol: ProtocolOptions::default(),
        },
    );
    let mut empties = bare.clone();
    empties.id = t.id(2)?;
    empties.operators.push(OperatorState {
        id: "idle".into(),
        kind: "noop".into(),
        state_version: 0,
        state: Bytes::new(),
    });
    empties.sinks.push(SinkPosition {
        sink_id: "stdout".into(),
        position: Bytes::new(),
    });
    empties.snapshot = Some(SnapshotProgress::default());
    for cp in [&bare, &empties] {
        save(t, &*store, &lease, cp).await?;
        let loaded = t.ok("load", store.load(&job, cp.id).await)?;
        t.ensure(&loaded.checkpoint == cp, || {
            format!("checkpoint {} differs after the round trip", cp.id)
        })?;
    }
    Ok(())
}

/// 1000 operators round-trip, in order.
pub async fn thousand_operators(factory: &dyn StoreFactory) -> Result<(), Failure> {
    let t = T("thousand_operators");
    let (store, job, lease) = t.job(factory, "").await?;
    let mut cp = sample_checkpoint(&job, t.id(1)?, lsn(1));
    cp.operators = (0..1000u32)
        .map(|i| OperatorState {
            id: format!("op-{i:04}"),
            kind: ["map", "filter", "dedup", "window"][i as usize % 4].into(),
            state_version: i % 7,
            state: Bytes::from(noise(i as usize % 300, u64::from(i) + 1)),
        })
        .collect();
    save(t, &*store, &lease, &cp).await?;
    let loaded = t.ok("load", store.load(&job, cp.id).await)?;
    t.ensure(loaded.checkpoint.operators.len() == 1000, || {
        format!("{} operators came back", loaded.checkpoint.operators.len())
    })?;
    t.ensure(loaded.checkpoint == cp, || {
        "checkpoint with 1000 operators differs after the round trip".into()
    })
}

/// A 256 MiB operator state (half incompressible, half compressible) round-trips.
pub async fn large_state_256mib(factory: &dyn StoreFactory) -> Result<(), Failure> {
    const HALF: usize = 128 << 20;
    let t = T("large_state_256mib");
    let (store, job, lease) = t.job(factory, "").await?;
    let mut state = noise(HALF, 0x256);
    let line = b"INSERT INTO orders VALUES (42, 'compressible text, over and over'); ";
    let mut page = Vec::with_capacity(64 << 10);
    while page.len() + line.len() <= 64 << 10 {
        page.extend_from_slice(line);
    }
    page.resize(64 << 10, b' ');
    state.reserve(HALF);
    for i in 0..HALF / page.len() {
        // Number the pages so a reordering of blocks cannot go unnoticed.
        let at = state.len();
        state.extend_from_slice(&page);
        if let Some(tag) = state.get_mut(at..at + 8) {
            tag.copy_from_slice(&(i as u64).to_le_bytes());
        }
    }
    let mut cp = sample_checkpoint(&job, t.id(1)?, lsn(1));
    cp.operators.push(OperatorState {
        id: "large".into(),
        kind: "join".into(),
        state_version: 1,
        state: Bytes::from(state),
    });
    let meta = save(t, &*store, &lease, &cp).await?;
    t.ensure(meta.stored_bytes >= HALF as u64, || {
        format!("{} bytes stored for 128 MiB of noise", meta.stored_bytes)
    })?;
    let latest = t.ok("latest", store.latest(&job).await)?;
    let Some(found) = latest.checkpoint else {
        return Err(t.fail("latest found nothing"));
    };
    t.ensure(found.checkpoint == cp, || {
        "256 MiB checkpoint differs after the round trip".into()
    })?;
    t.ensure(
        found.checkpoint.operator("large").map(|o| o.state.len()) == Some(2 * HALF),
        || "large state has the wrong length".into(),
    )
}
