//! Committing a checkpoint with the sink's writes, and running a batch's statements.

use super::*;

impl PgTableSink {
    /// [`Sink::commit_checkpoint`] without the clean-up after an error.
    pub(super) async fn save_and_commit(
        &mut self,
        checkpoint: &Checkpoint,
        lease: &Lease,
        keep: usize,
    ) -> Result<CheckpointMeta, CheckpointError> {
        let (Some(store), Some(client)) = (self.checkpoints.as_ref(), self.client.as_ref()) else {
            return Err(CheckpointError::Backend {
                message: "the postgres sink is closed or does not commit checkpoints".into(),
                source: None,
            });
        };
        if self.commit_unknown == Some(checkpoint.id) {
            // The last attempt's COMMIT lost its connection, maybe after the
            // server committed. If it did, the replay before this retry was
            // skipped by the progress row it committed: nothing is left to
            // write, and saving the checkpoint again would be refused.
            // The flag stays set until the store answered: a retry after a
            // failed look must look again.
            use checkpoint_api::CheckpointStore as _;
            let stored = store.list(&checkpoint.job).await?;
            self.commit_unknown = None;
            if let Some(meta) = stored.into_iter().find(|m| m.describes(checkpoint)) {
                tracing::info!(checkpoint = %checkpoint.id, "the checkpoint's interrupted COMMIT had succeeded");
                return Ok(meta);
            }
        }
        if !self.open {
            client
                .batch_execute("BEGIN")
                .await
                .map_err(|e| txn_error("begin", e))?;
            self.open = true;
        }
        let meta = store.save_in(client, lease, checkpoint, keep).await?;
        self.open = false;
        // Unknown from the moment COMMIT is sent: if this future is dropped
        // (a timeout) before the answer, the retry must look first too.
        self.commit_unknown = Some(checkpoint.id);
        if let Err(e) = client.batch_execute("COMMIT").await {
            if !crate::pg_error::fault(&e).is_transient() {
                self.commit_unknown = None;
            }
            return Err(txn_error("commit", e));
        }
        self.commit_unknown = None;
        Ok(meta)
    }

    /// Opens the transaction of a write: its own, or when checkpoints are
    /// committed with the writes, the one that lasts until the next
    /// checkpoint (if not open yet).
    pub(super) async fn begin(&mut self) -> Result<(), SinkError> {
        let client = self.client.as_ref().ok_or(SinkError::Closed)?;
        if self.checkpoints.is_none() || !self.open {
            client.batch_execute("BEGIN").await?;
            self.open = true;
        }
        Ok(())
    }

    /// Ends the transaction of a write: commits it unless checkpoints are
    /// committed with the writes.
    pub(super) async fn end(&mut self) -> Result<(), SinkError> {
        let client = self.client.as_ref().ok_or(SinkError::Closed)?;
        if self.checkpoints.is_none() {
            self.open = false;
            client.batch_execute("COMMIT").await?;
        }
        Ok(())
    }

    /// Runs `ops` in order, pipelined, in the transaction [`begin`](Self::begin)
    /// opened. On an error, the index of the statement that failed, if one did.
    pub(super) async fn execute(
        &mut self,
        ops: &[(String, Vec<TextParam>)],
    ) -> Result<(), (Option<usize>, SinkError)> {
        let client = self.client.as_ref().ok_or((None, SinkError::Closed))?;
        for (i, (sql, _)) in ops.iter().enumerate() {
            if !self.statements.contains_key(sql) {
                let stmt = client.prepare(sql).await.map_err(|e| (Some(i), e.into()))?;
                self.statements.insert(sql.clone(), stmt);
            }
        }
        let mut calls = Vec::with_capacity(ops.len());
        for (sql, params) in ops {
            let stmt = self
                .statements
                .get(sql)
                .ok_or((None, SinkError::Malformed("statement not prepared")))?;
            let refs: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|p| p as &(dyn ToSql + Sync)).collect();
            calls.push((stmt, refs));
        }
        // tokio-postgres pipelines requests polled together; they run in
        // order, so the first error to arrive is the first statement that
        // failed (the ones after it fail as "in failed transaction").
        futures_util::future::try_join_all(calls.iter().enumerate().map(|(i, (stmt, refs))| {
            use futures_util::TryFutureExt as _;
            client
                .execute(*stmt, refs)
                .map_err(move |e| (Some(i), SinkError::from(e)))
        }))
        .await?;
        Ok(())
    }
}
