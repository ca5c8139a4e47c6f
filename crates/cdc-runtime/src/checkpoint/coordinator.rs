//! [`Coordinator`]: decides when to checkpoint, captures, saves in the
//! background, and tells the pipeline how far the slot may move.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use cdc_core::Lsn;
use checkpoint_api::{
    Checkpoint, CheckpointError, CheckpointId, CheckpointMeta, CheckpointStore, Lease,
    OperatorState, ProtocolOptions, Regression, SnapshotProgress, SourcePosition, Timestamp,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{is_fatal, CheckpointOptions, CheckpointStats};
use crate::operators::Operator;

/// A captured checkpoint waiting for the sinks to flush `needs_ack`.
struct Prepared {
    checkpoint: Checkpoint,
    needs_ack: Lsn,
}

/// A checkpoint that a sink commits in the same transaction as its writes
/// (see [`Sink::commit_checkpoint`](crate::sinks::Sink::commit_checkpoint)).
/// It travels to every sink in the batch stream, right after the events it
/// covers. Every other sink flushes when it gets there and says so on
/// `peers_flushed`; the committing sink waits for all of them, then commits
/// and answers on `reply`.
pub(crate) struct InSinkSave {
    pub(crate) checkpoint: Checkpoint,
    pub(crate) needs_ack: Lsn,
    pub(crate) lease: Lease,
    pub(crate) keep: usize,
    /// One permit per other sink that flushed everything before it.
    pub(crate) peers_flushed: tokio::sync::Semaphore,
    reply: std::sync::Mutex<Option<oneshot::Sender<Result<CheckpointMeta, CheckpointError>>>>,
}

impl std::fmt::Debug for InSinkSave {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InSinkSave")
            .field("id", &self.checkpoint.id)
            .field("position", &self.checkpoint.source.commit_end_lsn)
            .field("needs_ack", &self.needs_ack)
            .finish_non_exhaustive()
    }
}

impl InSinkSave {
    /// Reports the outcome to the coordinator (once; later calls do nothing).
    pub(crate) fn answer(&self, result: Result<CheckpointMeta, CheckpointError>) {
        let sender = self.reply.lock().map(|mut r| r.take()).unwrap_or(None);
        if let Some(sender) = sender {
            let _ = sender.send(result);
        }
    }
}

/// How long a clean stop waits for the retention of the last save.
const SETTLE_RETENTION: Duration = Duration::from_secs(5);

/// The checkpoint state machine of one pipeline run.
pub(crate) struct Coordinator {
    store: Arc<dyn CheckpointStore>,
    lease: Lease,
    opts: CheckpointOptions,
    template: SourcePosition,
    next_id: CheckpointId,
    last_taken: Instant,
    bytes_since: u64,
    due: bool,
    prepared: Option<Prepared>,
    saving: Option<JoinHandle<Result<CheckpointMeta, CheckpointError>>>,
    /// The retention of the last save, which runs after the save was reported (so that
    /// deletes never hold a checkpoint, or the slot's confirmation, back).
    retaining: Option<JoinHandle<()>>,
    /// A save's retention was not started because the one before still ran.
    retention_skipped: bool,
    /// The job's stored checkpoints, oldest first: those recovery found, plus
    /// every save, less retention. Only this job (holding its lock and lease)
    /// writes them, so they are tracked here instead of listed per save.
    retained: Vec<CheckpointMeta>,
    confirmable: Lsn,
    stats: CheckpointStats,
    /// Snapshot progress the next capture records (carried over from the
    /// resumed checkpoint until the pipeline sets it).
    snapshot: Option<SnapshotProgress>,
    /// The relation versions the next capture records (carried over from
    /// the resumed checkpoint until the pipeline sets them).
    relations: Vec<checkpoint_api::RelationVersion>,
    /// Checkpoints are committed by a sink, in its own transaction, instead
    /// of saved through the store.
    in_sink: bool,
    /// When the saves are summarised at INFO.
    summary: SaveSummary,
    /// Metrics and health, when monitored.
    monitor: Option<crate::monitor::Monitor>,
}

/// Summarises saves at INFO at most once per [`SaveSummary::EVERY`]: the
/// first save is logged at once, later ones are counted until a minute has
/// passed since the last summary.
#[derive(Debug, Default)]
pub(crate) struct SaveSummary {
    last: Option<Instant>,
    saved: u64,
}

impl SaveSummary {
    /// The shortest time between two summaries.
    pub(crate) const EVERY: Duration = Duration::from_secs(60);

    /// Counts a save at `now`; returns how many saves to report if a
    /// summary is due.
    pub(crate) fn saved(&mut self, now: Instant) -> Option<u64> {
        self.saved += 1;
        let due = self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= Self::EVERY);
        if !due {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.saved))
    }
}

impl Coordinator {
    pub(crate) fn new(opts: CheckpointOptions, slot: &str, publications: &[String]) -> Self {
        let template = SourcePosition {
            commit_end_lsn: Lsn::INVALID,
            slot: slot.to_owned(),
            publications: publications.to_vec(),
            protocol: ProtocolOptions::default(),
        };
        Coordinator {
            store: opts.store.clone(),
            lease: opts.lease.clone(),
            next_id: opts.next_id,
            confirmable: opts.confirm.position(&opts.retained),
            retained: opts.retained.clone(),
            template,
            last_taken: Instant::now(),
            bytes_since: 0,
            due: false,
            prepared: None,
            saving: None,
            retaining: None,
            retention_skipped: false,
            stats: CheckpointStats::default(),
            snapshot: opts.resume.as_ref().and_then(|c| c.snapshot.clone()),
            relations: opts
                .resume
                .as_ref()
                .map(|c| c.relations.clone())
                .unwrap_or_default(),
            in_sink: false,
            monitor: None,
            summary: SaveSummary::default(),
            opts,
        }
    }

    /// Hands every checkpoint to a sink that commits it with its writes:
    /// [`capture`](Self::capture) then returns it for the pipeline to send
    /// down the batch stream, and nothing is saved through the store.
    pub(crate) fn commit_in_sink(&mut self) {
        self.in_sink = true;
    }

    pub(crate) fn commits_in_sink(&self) -> bool {
        self.in_sink
    }

    /// The schema of every relation as of the next capture's position,
    /// recorded by it.
    pub(crate) fn set_relations(&mut self, relations: Vec<checkpoint_api::RelationVersion>) {
        self.relations = relations;
    }

    /// The initial snapshot's progress, recorded by the next capture.
    pub(crate) fn set_snapshot(&mut self, progress: SnapshotProgress) {
        self.snapshot = Some(progress);
    }

    /// The checkpoint to resume from, if any.
    pub(crate) fn resume(&self) -> Option<&Checkpoint> {
        self.opts.resume.as_ref()
    }

    /// Records the pgoutput options of the current session.
    pub(crate) fn set_protocol(&mut self, protocol: ProtocolOptions) {
        self.template.protocol = protocol;
    }

    /// How far the slot may be confirmed: covered by durable checkpoints.
    pub(crate) fn confirmable(&self) -> Lsn {
        self.confirmable
    }

    pub(crate) fn stats(&self) -> CheckpointStats {
        self.stats
    }

    /// Counts WAL bytes toward `max_bytes`.
    pub(crate) fn add_bytes(&mut self, n: usize) {
        self.bytes_since = self.bytes_since.saturating_add(n as u64);
        if let Some(max) = self.opts.max_bytes {
            if self.bytes_since >= max {
                self.due = true;
            }
        }
    }

    /// Marks a checkpoint due if the interval has passed.
    pub(crate) fn tick(&mut self) {
        if self.last_taken.elapsed() >= self.opts.interval {
            self.due = true;
        }
    }

    /// Whether a checkpoint should be captured at the next boundary.
    pub(crate) fn wants_capture(&self) -> bool {
        self.due && self.prepared.is_none() && self.saving.is_none()
    }

    /// Whether a save is running.
    pub(crate) fn is_saving(&self) -> bool {
        self.saving.is_some()
    }

    /// Whether a captured checkpoint waits for the sinks.
    pub(crate) fn is_waiting(&self) -> bool {
        self.prepared.is_some() && self.saving.is_none()
    }

    /// How often the pipeline should call [`tick`](Self::tick).
    pub(crate) fn tick_period(&self) -> std::time::Duration {
        (self.opts.interval / 4).clamp(
            std::time::Duration::from_millis(10),
            std::time::Duration::from_secs(1),
        )
    }

    /// Captures a checkpoint at `position` (a transaction boundary) holding
    /// every operator's committed state; it is saved once the sinks have
    /// flushed `needs_ack`.
    ///
    /// When a sink commits checkpoints ([`commit_in_sink`](Self::commit_in_sink)),
    /// the checkpoint is returned instead, to be sent to that sink after the
    /// events before `position`; the save counts as running until it answers.
    pub(crate) fn capture(
        &mut self,
        position: Lsn,
        needs_ack: Lsn,
        operators: &[Box<dyn Operator>],
    ) -> Result<Option<Arc<InSinkSave>>, CheckpointError> {
        self.due = false;
        self.last_taken = Instant::now();
        self.bytes_since = 0;
        let mut states = Vec::with_capacity(operators.len());
        for op in operators {
            let state = OperatorState::capture(op.as_ref())
                .map_err(|e| CheckpointError::backend("capturing operator state", e))?;
            states.push(state);
        }
        let mut source = self.template.clone();
        source.commit_end_lsn = position;
        let mut checkpoint = Checkpoint::new(
            self.lease.job().clone(),
            self.next_id,
            Timestamp::from_system_time(SystemTime::now()),
            source,
        );
        checkpoint.operators = states;
        checkpoint.snapshot = self.snapshot.clone();
        checkpoint.relations = self.relations.clone();
        checkpoint.config_fingerprint = self.opts.config_fingerprint.clone();
        self.next_id = self.next_id.next().unwrap_or(self.next_id);
        if self.in_sink {
            let (reply, answer) = oneshot::channel();
            self.saving = Some(tokio::spawn(async move {
                answer.await.unwrap_or_else(|_| {
                    Err(CheckpointError::Unavailable {
                        message: "the sink committing checkpoints stopped before answering".into(),
                        source: None,
                    })
                })
            }));
            return Ok(Some(Arc::new(InSinkSave {
                checkpoint,
                needs_ack,
                lease: self.lease.clone(),
                keep: self.opts.keep,
                peers_flushed: tokio::sync::Semaphore::new(0),
                reply: std::sync::Mutex::new(Some(reply)),
            })));
        }
        self.prepared = Some(Prepared {
            checkpoint,
            needs_ack,
        });
        Ok(None)
    }

    /// Starts saving the captured checkpoint once every sink acknowledged
    /// what it covers (`acked`: the minimum over the sinks).
    pub(crate) fn poll_acks(&mut self, acked: Lsn) {
        if self.saving.is_some() {
            return;
        }
        let ready = matches!(&self.prepared, Some(p) if acked >= p.needs_ack);
        if !ready {
            return;
        }
        let Some(prepared) = self.prepared.take() else {
            return;
        };
        let store = self.store.clone();
        let lease = self.lease.clone();
        self.saving = Some(tokio::spawn(async move {
            store.save(&lease, &prepared.checkpoint).await
        }));
    }

    /// Deletes all but the newest `keep` checkpoints, in a task of its own: a save is
    /// complete (and the slot may move) without waiting for deletes, which for a big state
    /// are thousands of rows. While the last save's retention still runs, none is started:
    /// the next save's deletes what both made old (so a slow store never piles tasks up).
    /// A failure is logged and left to the next save's retention; until then the job holds
    /// more checkpoints than it keeps, never fewer.
    fn retain_after_save(&mut self) {
        if self.retaining.as_ref().is_some_and(|r| !r.is_finished()) {
            self.retention_skipped = true;
            return;
        }
        self.retention_skipped = false;
        let store = self.store.clone();
        let lease = self.lease.clone();
        let keep = self.opts.keep;
        self.retaining = Some(tokio::spawn(async move {
            match store.retain(&lease, keep).await {
                Ok(_) => {}
                // The next save reports the takeover.
                Err(CheckpointError::Fenced { .. }) => {
                    tracing::debug!("old checkpoints not deleted: the lease was taken over");
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "deleting old checkpoints failed; the next checkpoint tries again"
                ),
            }
        }));
    }

    /// Waits, up to `limit`, for the retention of the last save (at shutdown, so that a
    /// clean stop leaves no more checkpoints than `keep`; what it leaves, the next
    /// start's first retention deletes).
    async fn settle_retention(&mut self, limit: Duration) {
        let settle = async {
            if let Some(running) = self.retaining.take() {
                let _ = running.await;
            }
            // A save came while it ran: delete what that one made old too.
            if std::mem::take(&mut self.retention_skipped) {
                self.retain_after_save();
                if let Some(last) = self.retaining.take() {
                    let _ = last.await;
                }
            }
        };
        if tokio::time::timeout(limit, settle).await.is_err() {
            tracing::info!(
                "stopping without waiting longer for old checkpoints to be deleted; the next start deletes them"
            );
        }
    }

    /// Waits for the running save (pending forever when none runs).
    pub(crate) async fn saved(&mut self) -> Result<(), CheckpointError> {
        let Some(handle) = self.saving.as_mut() else {
            return std::future::pending().await;
        };
        let joined = handle.await;
        self.saving = None;
        let result = match joined {
            Ok(r) => r,
            Err(e) => Err(CheckpointError::backend("checkpoint task", e)),
        };
        self.finish(result)
    }

    /// Applies the outcome of a save: on success the slot may move; on
    /// failure the next interval retries. Only fencing is fatal.
    /// Reports saves to `monitor`.
    pub(crate) fn set_monitor(&mut self, monitor: crate::monitor::Monitor) {
        self.monitor = Some(monitor);
    }

    fn finish(
        &mut self,
        result: Result<CheckpointMeta, CheckpointError>,
    ) -> Result<(), CheckpointError> {
        match result {
            Ok(meta) => {
                // A sink committing checkpoints applies retention in its transaction.
                if !self.in_sink {
                    self.retain_after_save();
                }
                self.retained.push(meta.clone());
                let excess = self.retained.len().saturating_sub(self.opts.keep);
                self.retained.drain(..excess);
                let saved = meta;
                // Never past the checkpoint just saved, and never back.
                let allowed = self
                    .opts
                    .confirm
                    .position(&self.retained)
                    .min(saved.commit_end_lsn);
                if allowed > self.confirmable {
                    self.confirmable = allowed;
                }
                self.stats.saved += 1;
                self.stats.last_id = Some(saved.id);
                self.stats.last_lsn = saved.commit_end_lsn;
                self.stats.last_saved_at = Some(std::time::SystemTime::now());
                if let Some(m) = &self.monitor {
                    m.metrics
                        .checkpoint_duration
                        .observe(self.last_taken.elapsed().as_secs_f64());
                    m.metrics
                        .checkpoint_size_bytes
                        .set(i64::try_from(saved.stored_bytes).unwrap_or(i64::MAX));
                    m.metrics.checkpoints_saved.inc();
                    m.metrics.checkpoint_saved_at(std::time::SystemTime::now());
                    m.health.checkpoint_saved(Instant::now());
                    m.health.set_checkpoints(
                        self.retained
                            .iter()
                            .map(|c| crate::monitor::CheckpointEntry {
                                id: c.id.get(),
                                lsn: c.commit_end_lsn.to_string(),
                                created_unix_ms: c.created_at.as_unix_micros() / 1000,
                                bytes: c.stored_bytes,
                            })
                            .collect(),
                    );
                }
                tracing::debug!(
                    id = %saved.id,
                    lsn = %saved.commit_end_lsn,
                    bytes = saved.stored_bytes,
                    retained = self.retained.len(),
                    confirmable = %self.confirmable,
                    "checkpoint saved"
                );
                if let Some(saved_since) = self.summary.saved(Instant::now()) {
                    tracing::info!(
                        newest = %saved.id,
                        lsn = %saved.commit_end_lsn,
                        bytes = saved.stored_bytes,
                        saved = saved_since,
                        retained = self.retained.len(),
                        "checkpoints saved (summary at most once a minute; each one at DEBUG)"
                    );
                }
                Ok(())
            }
            Err(e) if is_fatal(&e) => Err(e),
            Err(e) => {
                self.stats.failed += 1;
                if let Some(m) = &self.monitor {
                    m.metrics.checkpoints_failed.inc();
                }
                if let CheckpointError::Regressed {
                    regression: Regression::Id { latest, .. },
                    ..
                } = &e
                {
                    if let Some(next) = latest.next() {
                        self.next_id = self.next_id.max(next);
                    }
                }
                tracing::warn!(error = %e, "checkpoint failed; streaming goes on, the slot stays, retrying at the next interval");
                Ok(())
            }
        }
    }

    /// Shutdown: waits for a running save, then captures and saves a final
    /// checkpoint at `position` right away (the sinks are drained).
    pub(crate) async fn finish_final(
        &mut self,
        position: Option<Lsn>,
        operators: &[Box<dyn Operator>],
    ) -> Result<(), CheckpointError> {
        if self.saving.is_some() {
            self.saved().await?;
        }
        self.prepared = None;
        if self.in_sink {
            // Only the sink may commit a checkpoint: its writes since the
            // last one are rolled back with it. The pipeline sent the final
            // checkpoint to the sink before closing it.
            return Ok(());
        }
        let moved = position
            .filter(|&p| !p.is_invalid() && (p > self.stats.last_lsn || self.stats.saved == 0));
        let saved = match moved {
            Some(position) => {
                self.capture(position, Lsn::INVALID, operators)?;
                self.poll_acks(Lsn::INVALID);
                self.saved().await
            }
            None => Ok(()),
        };
        // Also when nothing moved: the last periodic save's retention may still run, and
        // a clean stop should leave no more than `keep` checkpoints.
        self.settle_retention(SETTLE_RETENTION).await;
        saved
    }

    /// Shutdown with a sink committing checkpoints: waits for a running
    /// save, then captures the final checkpoint at `position` for the
    /// pipeline to send to that sink (`None` when nothing moved since the
    /// last one).
    pub(crate) async fn capture_final_in_sink(
        &mut self,
        position: Option<Lsn>,
        operators: &[Box<dyn Operator>],
    ) -> Result<Option<Arc<InSinkSave>>, CheckpointError> {
        if self.saving.is_some() {
            self.saved().await?;
        }
        let Some(position) = position else {
            return Ok(None);
        };
        if position.is_invalid() || position <= self.stats.last_lsn && self.stats.saved > 0 {
            return Ok(None);
        }
        self.capture(position, position, operators)
    }
}

#[cfg(test)]
mod tests;
