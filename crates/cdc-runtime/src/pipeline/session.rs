//! The source session: connect and START_REPLICATION, then the socket
//! select loop (read, ship when the socket runs dry, status and checkpoint
//! ticks, sink and snapshot failures, shutdown), and around it the
//! reconnect loop that retries transient errors with backoff and resumes
//! from the processed or confirmed position. Each replication message is
//! handled here: keepalives and XLogData feed the LSN accounting, decoded
//! messages go through the transaction assembler and the spiller to
//! conversion.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use cdc_core::pgoutput::ProtocolVersion;
use cdc_core::{Decoder, Lsn, ReplicationMessage, TxnAssembler};
use checkpoint_api::{ProtocolOptions, StreamingMode};

use super::spill::Spiller;
use super::{Pending, PipelineError, PipelineOptions, Shared, READ_PAUSE_BELOW};
use crate::checkpoint::Coordinator;
use crate::event::EventConverter;
use crate::operators::Operator;
use crate::replication::{
    PgOutputOptions, ReplicationConnection, ReplicationError, ReplicationStream,
};
use crate::snapshot::Snapshot;

/// How a streaming session ended without an error.
enum SessionEnd {
    Shutdown(ReplicationStream),
}

/// The source stage's state: what turns the replication stream into
/// batches. It lives across reconnects, like [`Shared`].
pub(super) struct Source<'o> {
    pub(super) options: &'o PipelineOptions,
    pub(super) assembler: TxnAssembler,
    pub(super) converter: EventConverter,
    pub(super) pending: Pending,
    /// Set once START_REPLICATION succeeded in the current session.
    pub(super) started: bool,
    pub(super) operators: Vec<Box<dyn Operator>>,
    /// End of the last transaction converted; transactions ending at or
    /// before it are skipped, and reconnects resume here.
    pub(super) processed: Lsn,
    /// The server's position from its last keepalive between transactions.
    pub(super) idle_position: Lsn,
    /// Inside a transaction that ended at or before `processed`.
    pub(super) skipping: bool,
    /// The snapshot: the initial one while it runs, then tables read on
    /// request or because they appeared.
    pub(super) snapshot: Option<Snapshot>,
    pub(super) spill: Spiller,
    /// Tables to read, noted during conversion and served between
    /// transactions (see `requests`).
    pub(super) asked: Vec<super::requests::Asked>,
    /// A snapshot read's failure, kept until the catalog says whether the
    /// table's schema changed (then the read is done again) or not (then
    /// it stops the job).
    pub(super) snapshot_failure: Option<crate::snapshot::SnapshotError>,
    /// Looks up the catalog facts of new table schemas before they ship.
    pub(super) facts: super::facts::FactsLookup,
    /// Tables that appeared while the job runs and were noted already.
    pub(super) appeared: std::collections::HashSet<cdc_core::Oid>,
    /// Watches the partitions of published partitioned tables.
    pub(super) partitions: Option<super::partitions::PartitionWatch>,
    /// The server the last session streamed from (see `failover`).
    pub(super) server: Option<super::failover::ServerIdentity>,
}

impl Source<'_> {
    /// Runs sessions until `shutdown` completes, reconnecting after
    /// transient errors as [`PipelineOptions::backoff`] says. Returns the
    /// stream to end (`None` if shutdown came while not connected); on a
    /// definite error the sink tasks are aborted.
    pub(super) async fn stream(
        &mut self,
        shared: &mut Shared,
        mut shutdown: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<Option<ReplicationStream>, PipelineError> {
        let options = self.options;
        let mut attempt = 0u32;
        loop {
            match self.session(shared, shutdown.as_mut()).await {
                Ok(SessionEnd::Shutdown(stream)) => return Ok(Some(stream)),
                Err(PipelineError::ShutdownWhileConnecting) => return Ok(None),
                Err(e) if e.is_transient() => {
                    // A session that got as far as streaming resets the count.
                    if std::mem::take(&mut self.started) {
                        attempt = 0;
                    }
                    attempt = attempt.saturating_add(1);
                    if let Some(max) = options.backoff.max_attempts {
                        if attempt > max {
                            return Err(PipelineError::RetriesExhausted {
                                attempts: attempt - 1,
                                last: Box::new(e),
                            });
                        }
                    }
                    let delay = options.backoff.delay(attempt);
                    tracing::warn!(error = %e, attempt, delay_ms = delay.as_millis() as u64,
                        resume_from = %shared.lsn.confirmed(), "replication interrupted; reconnecting");
                    shared.reconnects = shared.reconnects.saturating_add(1);
                    if let Some(m) = &shared.monitor {
                        m.metrics.reconnects.inc();
                        m.health.disconnected(&e.to_string());
                    }
                    shared.publish();
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = shutdown.as_mut() => return Ok(None),
                    }
                }
                Err(e) => {
                    if let Some(m) = &shared.monitor {
                        m.health.disconnected(&e.to_string());
                    }
                    shared.senders.clear();
                    shared.tasks.abort_all();
                    return Err(e);
                }
            }
        }
    }

    async fn session(
        &mut self,
        shared: &mut Shared,
        mut shutdown: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<SessionEnd, PipelineError> {
        let opts = self.options;
        self.abort_open_transaction();

        let resuming = shared.lsn.resuming();
        let needs_epoch = self.snapshot.as_ref().is_some_and(|s| !s.has_epoch());
        let connect = async {
            let mut conn = ReplicationConnection::connect(&opts.replication).await?;
            let version = conn.server_version_num().await?;
            let mut pgoutput =
                PgOutputOptions::for_server(version, opts.publications.iter().cloned());
            if let Some(v) = opts.proto_version {
                pgoutput = pgoutput.proto_version(v).map_err(ReplicationError::from)?;
            }
            if !opts.stream_in_progress {
                pgoutput = pgoutput.streaming(false).map_err(ReplicationError::from)?;
            }
            let mut start = self.processed.max(shared.lsn.confirmed());
            // Resuming from a checkpoint on a two-phase slot: start where the
            // slot is confirmed, so that the server sends again every
            // prepared transaction still undecided (see `prepared`).
            let two_phase = match resuming {
                Some(_) => slot_two_phase(&mut conn, &opts.slot, version).await?,
                None => false,
            };
            if two_phase {
                tracing::info!(slot = %opts.slot, checkpoint = %start,
                    "two-phase slot: resuming from its confirmed position so that undecided prepared transactions are sent again");
                start = Lsn::INVALID;
            }
            // After a failover: the same history, and the slot not past us.
            let server = super::failover::check_server(
                &mut conn,
                self.server,
                &opts.slot,
                self.processed,
                start,
            )
            .await?;
            // Where the slot stands when nothing was processed or checkpointed
            // yet: it identifies a snapshot that starts now, and stays so
            // until the first checkpoint moves the slot.
            let slot_at = match (start == Lsn::INVALID, needs_epoch) {
                (true, true) => super::failover::slot_confirmed(&mut conn, &opts.slot).await?,
                _ => None,
            };
            tracing::info!(slot = %opts.slot, start = %start, proto_version = pgoutput.get_proto_version(), "starting replication");
            let stream = conn.start_replication(&opts.slot, start, &pgoutput).await?;
            Ok::<_, PipelineError>((stream, pgoutput, two_phase, server, slot_at))
        };
        // Connecting is bounded by `connect_timeout`; the commands after it
        // (IDENTIFY_SYSTEM, START_REPLICATION) by the receive timeout, so a
        // server that stops answering mid-way is retried, not waited on.
        let limit = opts
            .receive_timeout
            .map(|t| t + opts.replication.get_connect_timeout());
        let connect = async {
            match limit {
                None => connect.await,
                Some(limit) => tokio::time::timeout(limit, connect)
                    .await
                    .unwrap_or(Err(ReplicationError::ReceiveTimeout(limit).into())),
            }
        };
        let (mut stream, pgoutput, two_phase, server, slot_at) = tokio::select! {
            r = connect => r?,
            _ = shutdown.as_mut() => return Err(PipelineError::ShutdownWhileConnecting),
        };
        self.server = Some(server);
        if let (Some(s), Some(at)) = (self.snapshot.as_mut(), slot_at) {
            s.set_epoch(at);
        }
        if two_phase {
            shared.lsn.handle_two_phase_slot();
        }
        self.started = true;
        if let Some(m) = &shared.monitor {
            m.health.connected(std::time::Instant::now());
        }
        let proto = pgoutput.get_proto_version();
        if let Some(c) = shared.coordinator.as_mut() {
            c.set_protocol(ProtocolOptions {
                proto_version: proto,
                binary: pgoutput.get_binary(),
                messages: pgoutput.get_messages(),
                streaming: if pgoutput.get_streaming() {
                    StreamingMode::On
                } else {
                    StreamingMode::Off
                },
                two_phase: pgoutput.get_two_phase(),
                origin: None,
            });
        }
        stream.set_receive_timeout(opts.receive_timeout);
        let version = ProtocolVersion::new(proto)
            .map_err(|_| PipelineError::Internal("unsupported pgoutput version"))?;
        let mut decoder = Decoder::new(version);

        let mut ticker = tokio::time::interval(opts.status_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut checkpoint_ticker = tokio::time::interval(
            shared
                .coordinator
                .as_ref()
                .map_or(Duration::from_secs(3600), Coordinator::tick_period),
        );
        checkpoint_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Armed after a small read (see `PipelineOptions::read_pause`); one
        // timer, reset each time.
        let pause = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(pause);
        let mut paused = false;
        // The receive timeout, across select rounds: the stream's own one
        // restarts whenever another branch (a tick) wins a round, so with
        // ticks more frequent than the timeout it would never fire. It
        // counts from the last message, or from the end of the last ship
        // (which waits on the sinks, not on the server).
        let silence_limit = opts.receive_timeout.unwrap_or(Duration::from_secs(3600));
        let silence = tokio::time::sleep(silence_limit);
        tokio::pin!(silence);
        let heard = |silence: Pin<&mut tokio::time::Sleep>| {
            silence.reset(tokio::time::Instant::now() + silence_limit);
        };
        loop {
            // Shipped when the socket runs dry only if a sink could acknowledge
            // something or a checkpoint waits for the sink that commits it;
            // events of an open transaction wait for a full batch.
            let flush_ready = self.pending.commit_end.is_some()
                || self.pending.committed > 0
                || self.pending.checkpoint.is_some();
            let saving = shared
                .coordinator
                .as_ref()
                .is_some_and(Coordinator::is_saving);
            let waiting = shared
                .coordinator
                .as_ref()
                .is_some_and(Coordinator::is_waiting);
            let was_paused = paused;
            tokio::select! {
                biased;
                _ = shutdown.as_mut() => {
                    self.ship(shared, &mut stream, &mut ticker).await?;
                    return Ok(SessionEnd::Shutdown(stream));
                }
                Some(joined) = shared.tasks.join_next() => {
                    return Err(Shared::sink_failure(joined));
                }
                e = snapshot_failed(&mut self.snapshot) => {
                    if e.is_transient() {
                        return Err(PipelineError::Snapshot(e));
                    }
                    // A read fails when its table's schema changed under
                    // it: the catalog decides, between transactions.
                    if self.snapshot_failure.is_none() {
                        self.snapshot_failure = Some(e);
                        self.asked.push(super::requests::Asked::Refresh);
                    }
                    self.serve_requests(shared).await?;
                }
                attached = super::partitions::next_attached(&mut self.partitions) => {
                    self.asked.push(super::requests::Asked::Attached(attached));
                    self.serve_requests(shared).await?;
                }
                saved = checkpoint_saved(&mut shared.coordinator), if saving => {
                    saved.map_err(PipelineError::Checkpoint)?;
                    // Let the slot move right away.
                    shared.send_status(&mut stream).await?;
                }
                _ = shared.acked.notified(), if waiting => shared.poll_checkpoint(),
                _ = checkpoint_ticker.tick() => {
                    self.checkpoint_between_transactions(shared)?;
                    shared.poll_checkpoint();
                }
                _ = ticker.tick() => shared.send_status(&mut stream).await?,
                _ = &mut pause, if paused => paused = false,
                // While paused, wait for the mark (see below) instead: a full
                // read's worth queued ends the pause early.
                read = async {
                    if was_paused {
                        stream.queued_enough().await;
                        None
                    } else {
                        Some(stream.next_message().await)
                    }
                } => {
                    let Some(msg) = read else {
                        paused = false;
                        continue;
                    };
                    let Some(payload) = msg? else {
                        // The server ended the stream: finish reports why.
                        stream.finish().await?;
                        return Err(ReplicationError::StreamEnded.into());
                    };
                    let mut bytes = payload.len();
                    self.handle(shared, &mut stream, &mut ticker, &mut decoder, &payload).await?;
                    // What the same socket read brought in, without a select round each.
                    let mut drained = false;
                    while !self.batch_full() {
                        let Some(payload) = stream.buffered_message()? else {
                            drained = true;
                            break;
                        };
                        bytes += payload.len();
                        self.handle(shared, &mut stream, &mut ticker, &mut decoder, &payload).await?;
                    }
                    if self.batch_full() {
                        self.ship(shared, &mut stream, &mut ticker).await?;
                    }
                    // A small read pauses unless the socket already holds
                    // a large one: then the data comes faster than it is
                    // read, and the read buffer's room, not the server,
                    // made the read small.
                    if drained
                        && bytes < READ_PAUSE_BELOW
                        && !opts.read_pause.is_zero()
                        && stream.queued_bytes().is_none_or(|q| q < READ_PAUSE_BELOW)
                    {
                        // Not woken by each segment that arrives meanwhile.
                        // Without the mark (a Unix-domain socket, or not
                        // Linux) there is no pause: each arrival would end
                        // it, and one on the timer alone held the server
                        // back (measured over a socket: 25,000 events/s
                        // on W3 with a 1 ms pause).
                        if stream.wake_only_after(READ_PAUSE_BELOW) {
                            pause.as_mut().reset(tokio::time::Instant::now() + opts.read_pause);
                            paused = true;
                        }
                    }
                    heard(silence.as_mut());
                }
                // After a message that was ready: silence only while none is.
                _ = &mut silence, if opts.receive_timeout.is_some() => {
                    return Err(ReplicationError::ReceiveTimeout(silence_limit).into());
                }
                // Nothing more to read right now: hand over what we have.
                _ = std::future::ready(()), if flush_ready => {
                    self.ship(shared, &mut stream, &mut ticker).await?;
                    heard(silence.as_mut());
                }
            }
        }
    }

    async fn handle(
        &mut self,
        shared: &mut Shared,
        stream: &mut ReplicationStream,
        ticker: &mut tokio::time::Interval,
        decoder: &mut Decoder,
        payload: &[u8],
    ) -> Result<(), PipelineError> {
        match ReplicationMessage::parse(payload)? {
            ReplicationMessage::PrimaryKeepalive(k) => {
                tracing::trace!(slot = %self.options.slot, wal_end = %k.wal_end, reply = k.reply_requested, open = ?self.converter.open_transaction(), "keepalive");
                shared.lsn.handle_keepalive(k.wal_end);
                shared.server_wal_end = shared.server_wal_end.max(k.wal_end);
                // Between transactions everything before the server's
                // position has been sent: a checkpoint may record it.
                if self.converter.open_transaction().is_none()
                    && !self.skipping
                    && k.wal_end > self.idle_position
                {
                    self.idle_position = k.wal_end;
                    shared.lsn.handle_idle_keepalive(k.wal_end, self.processed);
                }
                if k.reply_requested {
                    shared.send_status(stream).await?;
                }
            }
            ReplicationMessage::XLogData(x) => {
                tracing::trace!(slot = %self.options.slot, wal_start = %x.wal_start, wal_end = %x.wal_end, "xlogdata");
                shared.server_wal_end = shared.server_wal_end.max(x.wal_end);
                shared.lsn.handle_xlog_data(x.wal_start);
                if let Some(c) = shared.coordinator.as_mut() {
                    c.add_bytes(x.data.len());
                }
                let msg = decoder.decode(x.data)?;
                if let Some(event) = self.assembler.handle_message(msg)? {
                    if self.reads_before(&event) {
                        self.before_event(shared, stream, ticker, &event).await?;
                    }
                    self.convert(shared, &event, x.wal_start)?;
                }
                // Spill past the byte budget; ship released and replayed
                // transactions batch by batch.
                loop {
                    if self.spill.has_work(&self.assembler) {
                        self.spill.after_message(&mut self.assembler).await?;
                    }
                    while let Some(event) = self.assembler.poll_event() {
                        if self.reads_before(&event) {
                            self.before_event(shared, stream, ticker, &event).await?;
                        }
                        self.convert(shared, &event, x.wal_start)?;
                        self.ship_full(shared, stream, ticker).await?;
                    }
                    let Some(mut replay) = self.assembler.poll_replay() else {
                        break;
                    };
                    let mut file = self.spill.reader(replay.xid()).await?;
                    while let Some(record) = file.next().await? {
                        match replay.record(record) {
                            Ok(Some(event)) => {
                                if self.reads_before(&event) {
                                    self.before_event(shared, stream, ticker, &event).await?;
                                }
                                self.convert(shared, &event, x.wal_start)?
                            }
                            Ok(None) => {}
                            Err(e) => return Err(file.corrupt(e).into()),
                        }
                        self.ship_full(shared, stream, ticker).await?;
                    }
                    replay.finish().map_err(|e| file.corrupt(e))?;
                }
                // Prepared transactions hold the confirmed position.
                shared
                    .lsn
                    .handle_prepared(self.assembler.oldest_undecided_prepare(), self.processed);
            }
        }
        if self.requests_due() {
            self.serve_requests(shared).await?;
        }
        Ok(())
    }
}

/// Whether slot `slot` has `two_phase` enabled (PostgreSQL 14+; older
/// servers have no two-phase slots). A missing slot reads as `false`:
/// START_REPLICATION reports it.
async fn slot_two_phase(
    conn: &mut ReplicationConnection,
    slot: &str,
    server_version: u32,
) -> Result<bool, ReplicationError> {
    if server_version < 140_000 {
        return Ok(false);
    }
    let sql = format!(
        "SELECT two_phase FROM pg_catalog.pg_replication_slots WHERE slot_name = {}",
        cdc_core::sql::quote_literal(slot)
    );
    let results = conn.simple_query(&sql).await?;
    let two_phase = results
        .iter()
        .flat_map(|r| r.rows().first())
        .any(|row| row.first().cloned().flatten().as_deref() == Some("t"));
    Ok(two_phase)
}

/// Waits for a snapshot reader to fail (pending without a snapshot).
async fn snapshot_failed(snapshot: &mut Option<Snapshot>) -> crate::snapshot::SnapshotError {
    match snapshot.as_mut() {
        Some(s) => s.failed().await,
        None => std::future::pending().await,
    }
}

/// Waits for the coordinator's running save.
async fn checkpoint_saved(
    coordinator: &mut Option<Coordinator>,
) -> Result<(), checkpoint_api::CheckpointError> {
    match coordinator.as_mut() {
        Some(c) => c.saved().await,
        None => std::future::pending().await,
    }
}
