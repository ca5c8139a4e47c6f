//! [`ReplicationStream`]: the CopyBoth phase after `START_REPLICATION`.

use std::time::Duration;

use bytes::Bytes;
use postgres_protocol::message::frontend;

use super::connection::ReplicationConnection;
use super::error::{ProtocolError, ReplicationError};
use super::transport::log_notice;
use super::wire::{encode_copy_data, parse_error_fields, Frame};

/// What a backend frame means for the stream.
enum Step {
    /// A CopyData payload.
    Data(Bytes),
    /// The server ended the stream.
    End,
    /// Nothing for the caller (a notice, a parameter status).
    Skip,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyState {
    /// Both directions open.
    Open,
    /// The server sent CopyDone; the client may still end its side.
    ServerDone,
    /// The server left copy mode with CommandComplete (a walsender shutting
    /// down does this after the client confirmed everything).
    Completed,
    /// An error ended the stream; the connection is unusable.
    Failed,
}

/// The CopyBoth stream of a logical replication connection.
///
/// [`next_message`](Self::next_message) yields the raw CopyData payloads
/// (XLogData `w`, primary keepalive `k`, ...) as zero-copy slices of the
/// shared read buffer; [`send`](Self::send) carries the client's CopyData
/// (standby status updates `r`); [`finish`](Self::finish) ends the stream with
/// CopyDone and hands back the connection.
///
/// **Backpressure:** the socket is read only while `next_message` is being
/// awaited, so a slow consumer stops reading, the kernel buffers fill and the
/// server's walsender waits. Memory stays bounded by one read chunk plus the
/// largest message (and whatever payloads the caller still holds).
#[derive(Debug)]
pub struct ReplicationStream {
    conn: ReplicationConnection,
    state: CopyState,
    receive_timeout: Option<Duration>,
}

impl ReplicationStream {
    pub(crate) fn new(conn: ReplicationConnection) -> Self {
        ReplicationStream {
            conn,
            state: CopyState::Open,
            receive_timeout: None,
        }
    }

    /// Fail [`next_message`](Self::next_message) with the transient
    /// [`ReplicationError::ReceiveTimeout`] when the server sends nothing for
    /// this long. The walsender sends a keepalive every `wal_sender_timeout / 2`
    /// when idle (30 s by default), so a value above that detects a silently
    /// dead connection (no FIN or RST) that TCP alone would wait on for hours.
    /// `None` (the default) waits forever.
    pub fn set_receive_timeout(&mut self, timeout: Option<Duration>) {
        self.receive_timeout = timeout;
    }

    /// The next CopyData payload, or `None` once the server has ended the
    /// stream (CopyDone, or CommandComplete from a walsender that is shutting
    /// down). Then call [`finish`](Self::finish): it hands the connection back,
    /// or fails with a transient error when the server went away.
    ///
    /// Cancel-safe: it can be used in `tokio::select!`; a cancelled call loses
    /// no data.
    pub async fn next_message(&mut self) -> Result<Option<Bytes>, ReplicationError> {
        match self.state {
            CopyState::Open => {}
            CopyState::ServerDone | CopyState::Completed => return Ok(None),
            CopyState::Failed => return Err(ReplicationError::StreamEnded),
        }
        loop {
            if let Some(body) = self.buffered_message()? {
                return Ok(Some(body));
            }
            if self.state != CopyState::Open {
                return Ok(None);
            }
            let read = self.conn.transport.read_frame();
            let result = match self.receive_timeout {
                None => read.await,
                // read_frame is cancel-safe, so timing it out loses no bytes.
                Some(limit) => tokio::time::timeout(limit, read)
                    .await
                    .unwrap_or(Err(ReplicationError::ReceiveTimeout(limit))),
            };
            let frame = match result {
                Ok(frame) => frame,
                Err(e) => {
                    self.state = CopyState::Failed;
                    return Err(e);
                }
            };
            match self.step(frame)? {
                Step::Data(body) => return Ok(Some(body)),
                Step::End => return Ok(None),
                Step::Skip => {}
            }
        }
    }

    /// How many bytes the server has sent that the socket holds, unread
    /// (`None` where the platform cannot say). The bytes already read into
    /// the buffer are not counted.
    pub fn queued_bytes(&self) -> Option<usize> {
        self.conn.transport.queued()
    }

    /// Until the next read from the socket, has the kernel wake the reader
    /// only once `bytes` are queued (or the connection ends, or the receive
    /// buffer fills), not on every segment the server sends: for a pause
    /// between reads, so the pause is not cut short by wake-ups that find
    /// nothing to do. The next read undoes it first, so it never delays
    /// data. Returns whether the platform supports it (Linux).
    pub fn wake_only_after(&mut self, bytes: usize) -> bool {
        self.conn.transport.wake_only_after(bytes)
    }

    /// Completes once the socket signals readable, reading nothing: after
    /// [`wake_only_after`](Self::wake_only_after), once that many bytes are
    /// queued (or the connection ended). For ending a pause early.
    /// Cancel-safe.
    pub async fn queued_enough(&self) {
        self.conn.transport.readable().await
    }

    /// The next CopyData payload if one is already complete in the read
    /// buffer, without reading the socket or arming the receive timeout:
    /// `None` when nothing complete is buffered or the stream ended (then
    /// [`next_message`](Self::next_message) says which). For draining what
    /// one socket read brought in without a `select!` round per message.
    pub fn buffered_message(&mut self) -> Result<Option<Bytes>, ReplicationError> {
        if self.state != CopyState::Open {
            return Ok(None);
        }
        loop {
            let frame = match self.conn.transport.buffered_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => return Ok(None),
                Err(e) => {
                    self.state = CopyState::Failed;
                    return Err(e);
                }
            };
            match self.step(frame)? {
                Step::Data(body) => return Ok(Some(body)),
                Step::End => return Ok(None),
                Step::Skip => {}
            }
        }
    }

    /// Handles one frame received while streaming.
    fn step(&mut self, frame: Frame) -> Result<Step, ReplicationError> {
        match frame.tag {
            b'd' => Ok(Step::Data(frame.body)),
            b'c' => {
                self.state = CopyState::ServerDone;
                Ok(Step::End)
            }
            b'C' => {
                self.state = CopyState::Completed;
                Ok(Step::End)
            }
            b'N' => {
                log_notice(parse_error_fields(frame.body));
                Ok(Step::Skip)
            }
            b'S' => Ok(Step::Skip), // ParameterStatus may arrive at any time; nothing depends on it here.
            b'E' => {
                self.state = CopyState::Failed;
                Err(parse_error_fields(frame.body)?.into())
            }
            tag => {
                self.state = CopyState::Failed;
                Err(ProtocolError::Unexpected {
                    tag: char::from(tag),
                    state: "streaming",
                }
                .into())
            }
        }
    }

    /// Sends one CopyData message (e.g. a standby status update) and flushes it.
    ///
    /// Not cancel-safe: await it to completion.
    pub async fn send(&mut self, payload: &[u8]) -> Result<(), ReplicationError> {
        if self.state != CopyState::Open {
            return Err(ReplicationError::StreamEnded);
        }
        encode_copy_data(payload, &mut self.conn.transport.write)?;
        let result = self.conn.transport.send().await;
        if result.is_err() {
            self.state = CopyState::Failed;
        }
        result
    }

    /// Ends streaming: sends CopyDone, discards CopyData still in flight, and
    /// reads until the server is ready for commands again. Changes received
    /// but not confirmed will be sent again on the next `START_REPLICATION`.
    pub async fn finish(mut self) -> Result<ReplicationConnection, ReplicationError> {
        if self.state == CopyState::Failed {
            return Err(ReplicationError::StreamEnded);
        }
        if self.state != CopyState::Completed {
            frontend::copy_done(&mut self.conn.transport.write);
            self.conn.transport.send().await?;
        }
        let mut error = None;
        let mut discarded = 0usize;
        loop {
            let frame = self.conn.transport.read_frame().await?;
            match frame.tag {
                b'd' => discarded += 1,
                b'c' | b'C' | b'T' | b'D' | b'S' => {}
                b'N' => log_notice(parse_error_fields(frame.body)),
                b'E' => error = Some(parse_error_fields(frame.body)?),
                b'Z' => break,
                tag => {
                    return Err(ProtocolError::Unexpected {
                        tag: char::from(tag),
                        state: "ending replication",
                    }
                    .into())
                }
            }
        }
        if discarded > 0 {
            tracing::debug!(discarded, "discarded CopyData received after CopyDone");
        }
        match error {
            Some(e) => Err(e.into()),
            None => Ok(self.conn),
        }
    }

    /// The underlying connection (server parameters, TLS state).
    pub fn connection(&self) -> &ReplicationConnection {
        &self.conn
    }
}
