//! JSON lines on any async writer (stdout).

use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::encoding::JsonEncoder;
use crate::event::ChangeEvent;

use super::{Sink, SinkError};

/// JSON lines to standard output.
pub type StdoutSink = JsonLinesSink<tokio::io::Stdout>;

/// Writes one JSON object per line to an async writer. A batch is encoded
/// into one reused buffer and written with a single `write_all`.
#[derive(Debug)]
pub struct JsonLinesSink<W> {
    writer: Option<W>,
    encoder: JsonEncoder,
    buf: Vec<u8>,
}

impl StdoutSink {
    /// JSON lines on stdout.
    pub fn stdout(encoder: JsonEncoder) -> Self {
        JsonLinesSink::new(tokio::io::stdout(), encoder)
    }
}

impl<W: AsyncWrite + Unpin + Send> JsonLinesSink<W> {
    /// Lines written to `writer`.
    pub fn new(writer: W, encoder: JsonEncoder) -> Self {
        JsonLinesSink {
            writer: Some(writer),
            encoder,
            buf: Vec::new(),
        }
    }

    /// The writer (`None` once closed).
    pub fn get_ref(&self) -> Option<&W> {
        self.writer.as_ref()
    }

    /// Closes the sink and returns the writer.
    pub async fn into_inner(mut self) -> Result<W, SinkError> {
        self.flush_writer().await?;
        self.writer.take().ok_or(SinkError::Closed)
    }

    async fn flush_writer(&mut self) -> Result<(), SinkError> {
        let w = self.writer.as_mut().ok_or(SinkError::Closed)?;
        w.flush()
            .await
            .map_err(|e| SinkError::io("flushing", None, e))
    }
}

#[async_trait::async_trait]
impl<W: AsyncWrite + Unpin + Send> Sink for JsonLinesSink<W> {
    async fn write(&mut self, batch: &[ChangeEvent]) -> Result<(), SinkError> {
        let w = self.writer.as_mut().ok_or(SinkError::Closed)?;
        self.buf.clear();
        self.encoder.encode_lines(batch, &mut self.buf);
        w.write_all(&self.buf)
            .await
            .map_err(|e| SinkError::io("writing", None, e))
    }

    async fn flush(&mut self) -> Result<(), SinkError> {
        self.flush_writer().await
    }

    async fn close(&mut self) -> Result<(), SinkError> {
        if self.writer.is_some() {
            self.flush_writer().await?;
            if let Some(mut w) = self.writer.take() {
                w.shutdown()
                    .await
                    .map_err(|e| SinkError::io("closing", None, e))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use cdc_core::Lsn;

    use super::*;
    use crate::encoding::JsonFormat;
    use crate::event::{MessagePayload, Operation, SourceInfo};

    fn message(prefix: &str) -> ChangeEvent {
        ChangeEvent {
            op: Operation::Message,
            table: None,
            before: None,
            after: None,
            message: Some(MessagePayload {
                transactional: false,
                prefix: prefix.into(),
                content: vec![1],
            }),
            schema_change: None,
            source: SourceInfo {
                commit_lsn: Lsn::from_u64(1),
                lsn: Lsn::from_u64(1),
                xid: 0,
                commit_time: None,
                database: "db".into(),
                slot: "s".into(),
            },
            index: 0,
            position: Default::default(),
            boundary: None,
        }
    }

    #[tokio::test]
    async fn one_line_per_event_in_order() {
        let mut sink = JsonLinesSink::new(Vec::new(), JsonEncoder::new(JsonFormat::Plain));
        sink.write(&[message("a"), message("b")]).await.unwrap();
        sink.write(&[message("c")]).await.unwrap();
        sink.flush().await.unwrap();
        let out = sink.into_inner().await.unwrap();
        let prefixes: Vec<String> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["message"]["prefix"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(prefixes, ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn closed_sink_rejects_writes() {
        let mut sink = JsonLinesSink::new(Vec::new(), JsonEncoder::new(JsonFormat::Plain));
        sink.close().await.unwrap();
        assert!(matches!(
            sink.write(&[message("a")]).await,
            Err(SinkError::Closed)
        ));
    }
}
