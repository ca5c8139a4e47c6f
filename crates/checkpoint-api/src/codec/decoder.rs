//! [`ChunkedDecoder`]: envelope chunks -> checked blocks -> protobuf -> checkpoint.

use prost::Message;

use super::buffer::OutputBuffer;
use super::{
    Compression, DecodeError, DecodeOptions, EnvelopeHeader, BLOCK_HEADER_LEN, HEADER_LEN,
    STORED_BIT, TRAILER_LEN, TRAILER_MAGIC,
};
use crate::model::Checkpoint;
use crate::proto::pb;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DecodeState {
    Header,
    BlockHeader,
    Block {
        stored: bool,
        payload_len: usize,
        len: usize,
    },
    Trailer,
    Done,
    Failed,
}

/// Decodes an envelope fed in chunks of any size, in order.
///
/// Checks the header as soon as it has arrived (so an oversized envelope is refused before
/// anything is allocated), decompresses each block as it completes and checks the checksum
/// at the end. Memory: the declared uncompressed length (at most the configured limit) plus
/// at most one compressed block. After an error every call returns an error.
#[derive(Debug)]
pub struct ChunkedDecoder {
    options: DecodeOptions,
    state: DecodeState,
    small: [u8; HEADER_LEN],
    small_len: usize,
    stage: Vec<u8>,
    header: Option<EnvelopeHeader>,
    out: OutputBuffer,
    out_pos: usize,
    block_index: u64,
    crc: u32,
    deferred: Option<DecodeError>,
}

impl ChunkedDecoder {
    /// A decoder with `options`.
    pub fn new(options: DecodeOptions) -> Self {
        ChunkedDecoder {
            options,
            state: DecodeState::Header,
            small: [0; HEADER_LEN],
            small_len: 0,
            stage: Vec::new(),
            header: None,
            out: OutputBuffer::empty(),
            out_pos: 0,
            block_index: 0,
            crc: 0,
            deferred: None,
        }
    }

    /// The header, once it has been read.
    pub fn header(&self) -> Option<&EnvelopeHeader> {
        self.header.as_ref()
    }

    /// Feeds the next bytes of the envelope.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), DecodeError> {
        if self.state == DecodeState::Failed {
            return Err(DecodeError::Failed);
        }
        let result = self.push_inner(chunk);
        if result.is_err() {
            self.state = DecodeState::Failed;
            self.out = OutputBuffer::empty();
            self.stage = Vec::new();
        }
        result
    }

    /// Ends the input and returns the checkpoint.
    pub fn finish(self) -> Result<Checkpoint, DecodeError> {
        match self.state {
            DecodeState::Done => {}
            DecodeState::Failed => return Err(DecodeError::Failed),
            _ => return Err(DecodeError::Truncated),
        }
        let message = pb::Checkpoint::decode(self.out.into_bytes())?;
        Ok(Checkpoint::try_from(message)?)
    }

    /// Collects `need` bytes into the small buffer; true once complete.
    fn gather_small(&mut self, input: &mut &[u8], need: usize) -> bool {
        let n = (need - self.small_len).min(input.len());
        if let (Some(dst), Some(src)) = (
            self.small.get_mut(self.small_len..self.small_len + n),
            input.get(..n),
        ) {
            dst.copy_from_slice(src);
        }
        self.small_len += n;
        *input = input.get(n..).unwrap_or_default();
        if self.small_len == need {
            self.small_len = 0;
            true
        } else {
            false
        }
    }

    fn push_inner(&mut self, mut input: &[u8]) -> Result<(), DecodeError> {
        while !input.is_empty() {
            match self.state {
                DecodeState::Failed => return Err(DecodeError::Failed),
                DecodeState::Done => return Err(DecodeError::TrailingBytes),
                DecodeState::Header => {
                    if !self.gather_small(&mut input, HEADER_LEN) {
                        return Ok(());
                    }
                    let header = EnvelopeHeader::parse(&self.small, &self.options)?;
                    let len = usize::try_from(header.uncompressed_len).map_err(|_| {
                        DecodeError::TooLarge {
                            len: header.uncompressed_len,
                            limit: self.options.max_uncompressed_len,
                        }
                    })?;
                    self.crc = crc32c::crc32c(&self.small);
                    self.out = OutputBuffer::zeroed(len);
                    self.header = Some(header);
                    self.state = self.after_block();
                }
                DecodeState::BlockHeader => {
                    if !self.gather_small(&mut input, BLOCK_HEADER_LEN) {
                        return Ok(());
                    }
                    let s = &self.small;
                    let len = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                    let word = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
                    self.crc = crc32c::crc32c_append(self.crc, &self.small[..BLOCK_HEADER_LEN]);
                    self.state = self.block_header(len, word)?;
                }
                DecodeState::Block {
                    stored,
                    payload_len,
                    len,
                } => {
                    if self.stage.is_empty() && input.len() >= payload_len {
                        let (payload, rest) = input.split_at(payload_len);
                        input = rest;
                        self.block(payload, stored, len);
                    } else {
                        let n = (payload_len - self.stage.len()).min(input.len());
                        let (part, rest) = input.split_at(n);
                        input = rest;
                        self.stage.extend_from_slice(part);
                        if self.stage.len() < payload_len {
                            return Ok(());
                        }
                        let stage = std::mem::take(&mut self.stage);
                        self.block(&stage, stored, len);
                        self.stage = stage;
                        self.stage.clear();
                    }
                    self.state = self.after_block();
                }
                DecodeState::Trailer => {
                    if !self.gather_small(&mut input, TRAILER_LEN) {
                        return Ok(());
                    }
                    let s = &self.small;
                    let expected = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                    if [s[4], s[5], s[6], s[7]] != TRAILER_MAGIC {
                        return Err(DecodeError::BadTrailer);
                    }
                    if expected != self.crc {
                        return Err(DecodeError::ChecksumMismatch {
                            expected,
                            actual: self.crc,
                        });
                    }
                    if let Some(err) = self.deferred.take() {
                        return Err(err);
                    }
                    self.state = DecodeState::Done;
                }
            }
        }
        Ok(())
    }

    fn after_block(&self) -> DecodeState {
        if self.out_pos < self.out.len() {
            DecodeState::BlockHeader
        } else {
            DecodeState::Trailer
        }
    }

    fn block_header(&self, len: u32, word: u32) -> Result<DecodeState, DecodeError> {
        let corrupt = |reason| DecodeError::CorruptBlock {
            index: self.block_index,
            reason,
        };
        let header = self.header.ok_or(corrupt("block before header"))?;
        let len = len as usize;
        if len == 0 || len > header.block_size as usize || len > self.out.len() - self.out_pos {
            return Err(corrupt("block length out of range"));
        }
        let stored = word & STORED_BIT != 0;
        let payload_len = (word & !STORED_BIT) as usize;
        if stored {
            if payload_len != len {
                return Err(corrupt(
                    "stored block payload length differs from the block length",
                ));
            }
        } else {
            if header.compression == Compression::None {
                return Err(corrupt("compressed block in an uncompressed envelope"));
            }
            if payload_len == 0 || payload_len > lz4_flex::block::get_maximum_output_size(len) {
                return Err(corrupt("compressed block length out of range"));
            }
        }
        Ok(DecodeState::Block {
            stored,
            payload_len,
            len,
        })
    }

    /// Checksums and unpacks one block. A block that does not decompress is remembered and
    /// reported after the checksum (a checksum mismatch is the better diagnosis).
    fn block(&mut self, payload: &[u8], stored: bool, len: usize) {
        self.crc = crc32c::crc32c_append(self.crc, payload);
        let index = self.block_index;
        self.block_index += 1;
        let start = self.out_pos;
        self.out_pos += len;
        if self.deferred.is_some() {
            return;
        }
        self.out.prefault(start + len);
        let Some(dst) = self.out.as_mut_slice().get_mut(start..start + len) else {
            self.deferred = Some(DecodeError::CorruptBlock {
                index,
                reason: "block past the declared length",
            });
            return;
        };
        if stored {
            if dst.len() == payload.len() {
                dst.copy_from_slice(payload);
            }
            return;
        }
        match lz4_flex::block::decompress_into(payload, dst) {
            Ok(n) if n == len => {}
            _ => {
                self.deferred = Some(DecodeError::CorruptBlock {
                    index,
                    reason: "LZ4 data does not decompress to the block size",
                });
            }
        }
    }
}
