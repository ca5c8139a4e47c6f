//! A sink that discards events (for benchmarks).

use crate::encoding::JsonEncoder;
use crate::event::ChangeEvent;

use super::{Sink, SinkError};

/// Discards events, counting them. With an encoder it also encodes each
/// event (into a reused buffer) so benchmarks include encoding cost.
#[derive(Debug, Default)]
pub struct NullSink {
    encoder: Option<JsonEncoder>,
    buf: Vec<u8>,
    events: u64,
    bytes: u64,
    closed: bool,
}

impl NullSink {
    /// A sink that only counts.
    pub fn new() -> Self {
        Self::default()
    }

    /// A sink that encodes every event with `encoder`, then drops the bytes.
    pub fn encoding(encoder: JsonEncoder) -> Self {
        NullSink {
            encoder: Some(encoder),
            ..Self::default()
        }
    }

    /// Events written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Encoded bytes so far (0 without an encoder).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[async_trait::async_trait]
impl Sink for NullSink {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        if self.closed {
            return Err(SinkError::Closed);
        }
        if let Some(enc) = &self.encoder {
            for ev in batch {
                self.buf.clear();
                enc.encode_line(ev, &mut self.buf);
                self.bytes += self.buf.len() as u64;
            }
        }
        self.events += batch.len() as u64;
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        Ok(())
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        self.closed = true;
        Ok(())
    }
}
