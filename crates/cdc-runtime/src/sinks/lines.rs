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
        for ev in batch {
            self.encoder.encode_line(ev, &mut self.buf);
        }
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
