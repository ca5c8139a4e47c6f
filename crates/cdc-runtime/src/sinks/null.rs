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
            let mut lines = enc.lines_at(enc.now());
            for ev in batch {
                self.buf.clear();
                lines.encode_line(ev, &mut self.buf);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::JsonFormat;

    #[tokio::test]
    async fn counts_and_encodes() {
        let mut plain = NullSink::new();
        plain.write(&[]).await.unwrap();
        assert_eq!(plain.events(), 0);
        let mut enc = NullSink::encoding(JsonEncoder::new(JsonFormat::Plain));
        let ev = crate::event::ChangeEvent {
            op: crate::event::Operation::Message,
            table: None,
            before: None,
            after: None,
            message: None,
            schema_change: None,
            source: crate::event::SourceInfo {
                commit_lsn: cdc_core::Lsn::from_u64(1),
                lsn: cdc_core::Lsn::from_u64(1),
                xid: 0,
                commit_time: None,
                database: "d".into(),
                slot: "s".into(),
            },
            index: 0,
            position: Default::default(),
            boundary: None,
        };
        enc.write(&[ev.clone(), ev]).await.unwrap();
        assert_eq!(enc.events(), 2);
        assert!(enc.bytes() > 20);
        enc.close().await.unwrap();
        assert!(matches!(enc.write(&[]).await, Err(SinkError::Closed)));
    }
}
