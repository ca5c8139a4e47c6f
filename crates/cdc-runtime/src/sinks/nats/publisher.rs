//! Publishing into JetStream with a bounded window of PubAcks, in order.
//!
//! Every message is a plain publish with a reply subject
//! `{inbox}.{sequence}` under one inbox the publisher subscribes to once,
//! so a publish costs one command to the client's connection task and its
//! PubAck one message on that subscription (async-nats's JetStream
//! `publish` adds a oneshot channel, a timer, a semaphore permit and an
//! entry in a response map per message). PubAcks are taken in publishing
//! order.
//!
//! # The chain, and messages refused after a duplicate
//!
//! Every message but the first after connecting carries
//! `Nats-Expected-Last-Msg-Id`, the id of the message sent before it, so
//! JetStream refuses a message whose predecessor did not reach the stream
//! (lost in flight) instead of storing it out of order. JetStream checks a
//! message's id for a duplicate *before* the chain, and a duplicate does not
//! become the stream's last id. So when a replay holds a message the stream
//! already has after one it does not (a snapshot chunk read again, whose
//! rows were delivered before the crash), the message after that duplicate
//! is refused although nothing was lost, and so is every later one up to
//! the next duplicate. Such refusals (the message before was a duplicate
//! or itself such a refusal) are no loss: the publisher collects them,
//! waits for the rest of the window, and sends them again in their order,
//! chained to the last message the stream stored. A refusal after a stored
//! message is a loss in flight, and an error the sink reports (the
//! pipeline then replays from the last acknowledged message).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use async_nats::header::{self, HeaderName};
use async_nats::jetstream::ErrorCode;
use async_nats::{Client, HeaderMap, StatusCode, Subject, Subscriber};
use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::watch;

use super::error::NatsError;
use super::{HEADER_COMMIT_LSN, HEADER_OP, HEADER_RECORD};

const COMMIT_LSN: HeaderName = HeaderName::from_static(HEADER_COMMIT_LSN);
const OP: HeaderName = HeaderName::from_static(HEADER_OP);
const RECORD: HeaderName = HeaderName::from_static(HEADER_RECORD);

/// One message to publish.
#[derive(Debug, Clone)]
pub(super) struct Outgoing {
    pub(super) subject: Subject,
    pub(super) payload: Bytes,
    /// `Nats-Msg-Id`.
    pub(super) id: String,
    /// `Pgcdc-Commit-Lsn`.
    pub(super) lsn: String,
    /// `Pgcdc-Op`.
    pub(super) op: &'static str,
    /// `Pgcdc-Record`, if the record is not the event's own change.
    pub(super) record: Option<&'static str>,
}

impl Outgoing {
    /// The headers, chained to `previous`.
    fn headers(&self, previous: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::NATS_MESSAGE_ID, self.id.as_str());
        if let Some(last) = previous {
            headers.insert(header::NATS_EXPECTED_LAST_MESSAGE_ID, last);
        }
        headers.insert(COMMIT_LSN, self.lsn.as_str());
        headers.insert(OP, self.op);
        if let Some(record) = self.record {
            headers.insert(RECORD, record);
        }
        headers
    }
}

/// What JetStream said about one message.
#[derive(Debug)]
enum Ack {
    Stored,
    Duplicate,
    /// Refused: the chain header did not name the stream's last message.
    WrongLast(String),
    Failed(NatsError),
}

/// How the message acknowledged last ended, for reading a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Previous {
    /// Stored, or nothing yet (the first message carries no chain header).
    Anchored,
    /// A duplicate, or a message refused after one.
    AfterDuplicate,
}

/// A message waiting for its PubAck.
#[derive(Debug)]
struct Sent {
    seq: u64,
    message: Outgoing,
}

/// The publishing side of one connection; see the [module docs](self).
pub(super) struct Publisher {
    client: Client,
    acks: Subscriber,
    /// `{inbox}.`: a message's reply subject is this and its sequence.
    inbox: String,
    next_seq: u64,
    in_flight: VecDeque<Sent>,
    /// PubAcks that came before an older one's.
    early: HashMap<u64, Ack>,
    /// The id of the message sent last: the next one's chain header.
    last_sent: Option<String>,
    /// The id of the message the stream stored last, as far as this
    /// connection knows.
    tip: Option<String>,
    previous: Previous,
    /// Refused after a duplicate: sent again once the window is empty.
    refused: Vec<Outgoing>,
    disconnects: watch::Receiver<u64>,
    seen: u64,
    max_in_flight: usize,
    ack_timeout: Duration,
    stream: String,
    duplicates: u64,
    resent: u64,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("in_flight", &self.in_flight.len())
            .field("refused", &self.refused.len())
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// Subscribes to a fresh inbox on `client` for the PubAcks.
    pub(super) async fn new(
        client: Client,
        disconnects: watch::Receiver<u64>,
        max_in_flight: usize,
        ack_timeout: Duration,
        stream: String,
    ) -> Result<Publisher, NatsError> {
        let inbox = client.new_inbox();
        let acks = client
            .subscribe(format!("{inbox}.*"))
            .await
            .map_err(|e| NatsError::transient("subscribe", format!("the PubAck inbox: {e}")))?;
        let seen = *disconnects.borrow();
        Ok(Publisher {
            client,
            acks,
            inbox: format!("{inbox}."),
            next_seq: 0,
            in_flight: VecDeque::new(),
            early: HashMap::new(),
            last_sent: None,
            tip: None,
            previous: Previous::Anchored,
            refused: Vec::new(),
            disconnects,
            seen,
            max_in_flight: max_in_flight.max(1),
            ack_timeout,
            stream,
            duplicates: 0,
            resent: 0,
        })
    }

    /// Duplicates JetStream dropped that [`take_duplicates`](Self::take_duplicates)
    /// has not taken yet.
    pub(super) fn pending_duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Duplicates JetStream dropped since the last call.
    pub(super) fn take_duplicates(&mut self) -> u64 {
        std::mem::take(&mut self.duplicates)
    }

    /// Messages sent again after a refusal that followed a duplicate, since
    /// the last call.
    pub(super) fn take_resent(&mut self) -> u64 {
        std::mem::take(&mut self.resent)
    }

    /// Publishes `message` once the window has room (and anything refused
    /// after a duplicate has been sent again, to keep the order).
    pub(super) async fn send(&mut self, message: Outgoing) -> Result<(), NatsError> {
        while self.in_flight.len() >= self.max_in_flight || !self.refused.is_empty() {
            self.await_oldest().await?;
        }
        self.transmit(message).await
    }

    /// Returns once every message sent has its PubAck.
    pub(super) async fn flush(&mut self) -> Result<(), NatsError> {
        while !self.in_flight.is_empty() || !self.refused.is_empty() {
            self.await_oldest().await?;
        }
        Ok(())
    }

    async fn transmit(&mut self, message: Outgoing) -> Result<(), NatsError> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let headers = message.headers(self.last_sent.as_deref());
        let reply = Subject::from(format!("{}{seq}", self.inbox));
        self.client
            .publish_with_reply_and_headers(
                message.subject.clone(),
                reply,
                headers,
                message.payload.clone(),
            )
            .await
            .map_err(|e| publish_error(&e))?;
        self.last_sent = Some(message.id.clone());
        self.in_flight.push_back(Sent { seq, message });
        Ok(())
    }

    /// Takes the oldest message's PubAck; once the window is empty, sends
    /// again what was refused after a duplicate.
    async fn await_oldest(&mut self) -> Result<(), NatsError> {
        let Some(seq) = self.in_flight.front().map(|s| s.seq) else {
            return self.resend().await;
        };
        let ack = self.ack_for(seq).await?;
        let Some(sent) = self.in_flight.pop_front() else {
            return Ok(());
        };
        match ack {
            Ack::Stored => {
                self.tip = Some(sent.message.id);
                self.previous = Previous::Anchored;
            }
            Ack::Duplicate => {
                self.duplicates += 1;
                self.previous = Previous::AfterDuplicate;
            }
            Ack::WrongLast(_) if self.previous == Previous::AfterDuplicate => {
                self.refused.push(sent.message);
            }
            Ack::WrongLast(e) => {
                return Err(NatsError::transient(
                    "publish",
                    format!("{e}: a message before this one did not reach stream {}, so this one was refused to keep the order; replaying from the last acknowledged message. If this repeats, another publisher writes into the stream: a stream takes one pgcdc job's messages only", self.stream),
                ));
            }
            Ack::Failed(e) => return Err(e),
        }
        Ok(())
    }

    /// Sends the messages refused after a duplicate again, chained to the
    /// last message the stream stored (none known: the first goes without
    /// a chain header, as after connecting; everything before it in this
    /// connection was a duplicate, so nothing before it is missing).
    async fn resend(&mut self) -> Result<(), NatsError> {
        if self.refused.is_empty() {
            return Ok(());
        }
        let refused = std::mem::take(&mut self.refused);
        self.resent += refused.len() as u64;
        self.last_sent = self.tip.clone();
        self.previous = Previous::Anchored;
        for message in refused {
            self.transmit(message).await?;
        }
        Ok(())
    }

    /// The PubAck of message `seq`: waits at most the ack timeout, and not
    /// across a disconnect (a PubAck awaited across one will not come).
    async fn ack_for(&mut self, seq: u64) -> Result<Ack, NatsError> {
        if let Some(ack) = self.early.remove(&seq) {
            return Ok(ack);
        }
        let deadline = tokio::time::Instant::now() + self.ack_timeout;
        loop {
            // Most PubAcks are already queued when the window is full: no
            // timer for those.
            let next = match self.acks.next().now_or_never() {
                Some(m) => m,
                None => {
                    let seen = self.seen;
                    let lost = self.disconnects.wait_for(|n| *n != seen);
                    tokio::select! {
                        biased;
                        m = self.acks.next() => m,
                        _ = lost => return Err(NatsError::transient(
                            "publish",
                            "the connection to NATS was lost with publishes in flight; reconnecting and replaying from the last acknowledged message",
                        )),
                        _ = tokio::time::sleep_until(deadline) => return Err(NatsError::transient(
                            "publish",
                            format!("no PubAck from stream {} within {} s; reconnecting and replaying from the last acknowledged message", self.stream, self.ack_timeout.as_secs_f64()),
                        )),
                    }
                }
            };
            let Some(message) = next else {
                return Err(NatsError::transient(
                    "publish",
                    "the PubAck subscription ended; reconnecting",
                ));
            };
            let Some(got) = message
                .subject
                .strip_prefix(self.inbox.as_str())
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            let ack = read_ack(&message, &self.stream);
            match got.cmp(&seq) {
                std::cmp::Ordering::Equal => return Ok(ack),
                std::cmp::Ordering::Greater => {
                    self.early.insert(got, ack);
                }
                // An answer to a message already given up on.
                std::cmp::Ordering::Less => {}
            }
        }
    }
}

/// Reads a PubAck: `{"stream":…,"seq":…[,"duplicate":true]}` or
/// `{"error":{…}}`, or a no-responders status.
fn read_ack(message: &async_nats::Message, stream: &str) -> Ack {
    #[derive(serde::Deserialize)]
    struct PubAck {
        #[serde(default)]
        duplicate: bool,
        #[serde(default)]
        seq: Option<u64>,
        #[serde(default)]
        error: Option<async_nats::jetstream::Error>,
    }
    if message.status == Some(StatusCode::NO_RESPONDERS) {
        return Ack::Failed(NatsError::transient(
            "publish",
            format!("no JetStream stream answered (the server is starting, or stream {stream} was deleted)"),
        ));
    }
    match serde_json::from_slice::<PubAck>(&message.payload) {
        Ok(PubAck { error: Some(e), .. })
            if e.error_code() == ErrorCode::STREAM_WRONG_LAST_MESSAGE_ID =>
        {
            Ack::WrongLast(e.to_string())
        }
        Ok(PubAck { error: Some(e), .. }) => Ack::Failed(NatsError::transient(
            "publish",
            format!("stream {stream} refused a message: {e}"),
        )),
        Ok(PubAck {
            duplicate: true, ..
        }) => Ack::Duplicate,
        Ok(PubAck { seq: Some(_), .. }) => Ack::Stored,
        Ok(_) | Err(_) => Ack::Failed(NatsError::transient(
            "publish",
            format!(
                "an unreadable PubAck from stream {stream}: {:?}",
                String::from_utf8_lossy(&message.payload[..message.payload.len().min(200)])
            ),
        )),
    }
}

fn publish_error(e: &async_nats::PublishError) -> NatsError {
    match e.kind() {
        async_nats::client::PublishErrorKind::MaxPayloadExceeded => NatsError::permanent(
            "publish",
            format!("{e}; raise max_payload on the NATS server, or leave large columns out of the publication"),
        ),
        _ => NatsError::transient("publish", e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(payload: &str) -> async_nats::Message {
        async_nats::Message {
            subject: Subject::from("_INBOX.x.1"),
            reply: None,
            payload: Bytes::from(payload.to_owned()),
            headers: None,
            status: None,
            description: None,
            length: payload.len(),
        }
    }

    #[test]
    fn pubacks_are_read_by_what_they_say() {
        assert!(matches!(
            read_ack(&reply(r#"{"stream":"S","seq":7}"#), "S"),
            Ack::Stored
        ));
        assert!(matches!(
            read_ack(&reply(r#"{"stream":"S","seq":7,"duplicate":true}"#), "S"),
            Ack::Duplicate
        ));
        assert!(matches!(
            read_ack(
                &reply(
                    r#"{"error":{"code":400,"err_code":10070,"description":"wrong last msg ID: a"}}"#
                ),
                "S"
            ),
            Ack::WrongLast(_)
        ));
        assert!(matches!(
            read_ack(
                &reply(r#"{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}"#),
                "S"
            ),
            Ack::Failed(e) if e.transient && e.message.contains("maximum messages exceeded")
        ));
        for junk in ["", "{", "null", r#"{"stream":"S"}"#, "\u{0}\u{1}"] {
            assert!(
                matches!(read_ack(&reply(junk), "S"), Ack::Failed(_)),
                "{junk:?}"
            );
        }
        let mut none = reply("");
        none.status = Some(StatusCode::NO_RESPONDERS);
        assert!(
            matches!(read_ack(&none, "S"), Ack::Failed(e) if e.message.contains("no JetStream stream"))
        );
    }
}
