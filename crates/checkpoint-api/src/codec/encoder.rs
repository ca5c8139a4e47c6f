//! [`ChunkedEncoder`]: checkpoint -> protobuf parts -> LZ4 blocks -> envelope chunks.

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;

use super::{
    ChunkManifest, Compression, EncodeError, EncodeOptions, EnvelopeHeader, BLOCK_HEADER_LEN,
    DEFAULT_BLOCK_SIZE, ENVELOPE_VERSION, HEADER_LEN, MAX_BLOCK_SIZE, STORED_BIT, TRAILER_LEN,
    TRAILER_MAGIC,
};
use crate::model::Checkpoint;
use crate::proto;

/// Operator state up to this size is copied into the protobuf buffer; larger state is
/// referenced, not copied.
pub(super) const INLINE_STATE_MAX: usize = 16 << 10;

/// The protobuf encoding of a checkpoint as a list of byte strings, large operator state
/// referenced rather than copied.
pub(super) fn protobuf_segments(cp: &Checkpoint) -> VecDeque<Bytes> {
    let head = proto::checkpoint_without_operators(cp);
    let mut parts = VecDeque::new();
    let mut small = BytesMut::with_capacity(head.encoded_len() + cp.operators.len() * 48 + 64);
    head.encode_raw(&mut small);
    for op in &cp.operators {
        let header = proto::operator_header(op);
        let state_len = op.state.len();
        let state_field_len = if state_len == 0 {
            0
        } else {
            key_len(proto::OPERATOR_STATE_TAG) + encoded_len_varint(state_len as u64) + state_len
        };
        encode_key(
            proto::CHECKPOINT_OPERATORS_TAG,
            WireType::LengthDelimited,
            &mut small,
        );
        encode_varint((header.encoded_len() + state_field_len) as u64, &mut small);
        header.encode_raw(&mut small);
        if state_len == 0 {
            continue;
        }
        encode_key(
            proto::OPERATOR_STATE_TAG,
            WireType::LengthDelimited,
            &mut small,
        );
        encode_varint(state_len as u64, &mut small);
        if state_len <= INLINE_STATE_MAX {
            small.extend_from_slice(&op.state);
        } else {
            if !small.is_empty() {
                parts.push_back(small.split().freeze());
            }
            parts.push_back(op.state.clone());
        }
    }
    if !small.is_empty() {
        parts.push_back(small.freeze());
    }
    parts
}

/// Encodes a checkpoint into an envelope handed out as chunks of a fixed size (the last one
/// may be shorter), compressing and checksumming block by block as chunks are taken.
///
/// Memory besides the checkpoint itself: about one chunk plus one block.
///
/// ```
/// # use checkpoint_api::*;
/// # let cp = Checkpoint::new(JobName::new("j")?, CheckpointId::FIRST, Timestamp::UNIX_EPOCH,
/// #     SourcePosition { commit_end_lsn: cdc_core::Lsn::INVALID, slot: "s".into(),
/// #         publications: vec![], protocol: ProtocolOptions::default() });
/// let mut encoder = ChunkedEncoder::new(&cp, &EncodeOptions::default(), 64)?;
/// let chunks: Vec<_> = encoder.by_ref().collect();
/// let manifest = encoder.manifest().ok_or("not finished")?;
/// manifest.check_chunk_lens(chunks.iter().map(|c| c.len() as u64))?;
/// assert_eq!(decode_chunks(&chunks, &DecodeOptions::default())?, cp);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ChunkedEncoder {
    segments: VecDeque<Bytes>,
    compression: Compression,
    block_size: usize,
    chunk_size: usize,
    uncompressed_len: u64,
    remaining: u64,
    scratch: Vec<u8>,
    out: BytesMut,
    crc: u32,
    trailer_written: bool,
    emitted_len: u64,
    emitted_chunks: u64,
}

impl ChunkedEncoder {
    /// An encoder of `checkpoint` handing out chunks of `chunk_size` bytes (at least 1).
    pub fn new(
        checkpoint: &Checkpoint,
        options: &EncodeOptions,
        chunk_size: usize,
    ) -> Result<Self, EncodeError> {
        checkpoint.validate()?;
        if chunk_size == 0 {
            return Err(EncodeError::InvalidOptions {
                reason: "chunk size must be at least 1",
            });
        }
        if options.block_size == 0 || options.block_size > MAX_BLOCK_SIZE {
            return Err(EncodeError::InvalidOptions {
                reason: "block size must be 1 ..= MAX_BLOCK_SIZE",
            });
        }
        let block_size = options.block_size as usize;
        let segments = protobuf_segments(checkpoint);
        let uncompressed_len: u64 = segments.iter().map(|s| s.len() as u64).sum();
        let header = EnvelopeHeader {
            version: ENVELOPE_VERSION,
            compression: options.compression,
            block_size: options.block_size,
            uncompressed_len,
        };
        let largest_block = segments
            .iter()
            .map(Bytes::len)
            .max()
            .unwrap_or(0)
            .min(block_size);
        let scratch = match options.compression {
            Compression::None => Vec::new(),
            Compression::Lz4Block => {
                take_scratch(lz4_flex::block::get_maximum_output_size(largest_block))
            }
        };
        // Room for a whole chunk, but no more than the largest possible envelope.
        let blocks: u64 = segments
            .iter()
            .map(|s| (s.len() as u64).div_ceil(block_size as u64))
            .sum();
        let bound = (HEADER_LEN as u64 + TRAILER_LEN as u64)
            .saturating_add(blocks.saturating_mul(BLOCK_HEADER_LEN as u64))
            .saturating_add(uncompressed_len);
        let initial = usize::try_from(bound).unwrap_or(usize::MAX).min(chunk_size);
        let mut out = BytesMut::with_capacity(initial.saturating_add(BLOCK_HEADER_LEN));
        out.extend_from_slice(&header.to_bytes());
        let crc = crc32c::crc32c(&out);
        Ok(ChunkedEncoder {
            segments,
            compression: options.compression,
            block_size,
            chunk_size,
            uncompressed_len,
            remaining: uncompressed_len,
            scratch,
            out,
            crc,
            trailer_written: false,
            emitted_len: 0,
            emitted_chunks: 0,
        })
    }

    /// Length of the protobuf message being encoded.
    pub fn uncompressed_len(&self) -> u64 {
        self.uncompressed_len
    }

    /// The manifest of the chunks handed out, once the last one has been.
    pub fn manifest(&self) -> Option<ChunkManifest> {
        if !self.trailer_written || !self.out.is_empty() {
            return None;
        }
        Some(ChunkManifest {
            total_len: self.emitted_len,
            chunk_size: self.chunk_size as u64,
            chunk_count: self.emitted_chunks,
            uncompressed_len: self.uncompressed_len,
            crc32c: self.crc,
        })
    }

    fn emit(&mut self, len: usize) -> Bytes {
        let chunk = self.out.split_to(len).freeze();
        self.emitted_len += chunk.len() as u64;
        self.emitted_chunks += 1;
        chunk
    }

    /// The next block of the message: at most `block_size` bytes of the front segment, so
    /// a block never spans two segments and is compressed in place.
    fn take_block(&mut self) -> Option<Bytes> {
        while self.segments.front().is_some_and(Bytes::is_empty) {
            self.segments.pop_front();
        }
        let front = self.segments.front_mut()?;
        let len = front.len().min(self.block_size);
        let block = front.split_to(len);
        if front.is_empty() {
            self.segments.pop_front();
        }
        Some(block)
    }

    fn write_block(&mut self) {
        let Some(input) = self.take_block() else {
            // The segments ran dry before the declared length: cannot happen, since the
            // length is their sum; stop rather than loop.
            self.remaining = 0;
            return;
        };
        let start = self.out.len();
        let compressed = match self.compression {
            Compression::None => None,
            Compression::Lz4Block => {
                match lz4_flex::block::compress_into(&input, &mut self.scratch) {
                    Ok(n) if n < input.len() => self.scratch.get(..n),
                    _ => None,
                }
            }
        };
        let payload: &[u8] = compressed.unwrap_or(&input);
        self.out.reserve(BLOCK_HEADER_LEN + payload.len());
        self.out.put_u32_le(input.len() as u32);
        let stored = if compressed.is_some() { 0 } else { STORED_BIT };
        self.out.put_u32_le(payload.len() as u32 | stored);
        self.out.extend_from_slice(payload);
        if let Some(written) = self.out.get(start..) {
            self.crc = crc32c::crc32c_append(self.crc, written);
        }
        self.remaining = self.remaining.saturating_sub(input.len() as u64);
    }
}

thread_local! {
    /// The LZ4 output buffer of the last encoder dropped on this thread. Reusing it spares
    /// each checkpoint a fresh, page-faulting allocation of about one block.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Largest scratch buffer kept for reuse per thread (that of a default-size block).
const SCRATCH_KEEP_MAX: usize =
    lz4_flex::block::get_maximum_output_size(DEFAULT_BLOCK_SIZE as usize);

/// A zero-filled buffer of `len` bytes, reusing this thread's cached one when large enough.
fn take_scratch(len: usize) -> Vec<u8> {
    let cached = SCRATCH
        .try_with(|s| {
            s.try_borrow_mut()
                .map(|mut s| std::mem::take(&mut *s))
                .unwrap_or_default()
        })
        .unwrap_or_default();
    if cached.len() >= len {
        // Longer than needed is fine, and its contents are left over from an earlier block:
        // LZ4 writes before it reads, and only what it wrote is used.
        cached
    } else {
        vec![0u8; len]
    }
}

impl Drop for ChunkedEncoder {
    fn drop(&mut self) {
        let scratch = std::mem::take(&mut self.scratch);
        if scratch.is_empty() || scratch.len() > SCRATCH_KEEP_MAX {
            return;
        }
        let _ = SCRATCH.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                if s.len() < scratch.len() {
                    *s = scratch;
                }
            }
        });
    }
}

impl Iterator for ChunkedEncoder {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        loop {
            if self.out.len() >= self.chunk_size {
                return Some(self.emit(self.chunk_size));
            }
            if self.trailer_written {
                if self.out.is_empty() {
                    return None;
                }
                return Some(self.emit(self.out.len()));
            }
            if self.remaining > 0 {
                self.write_block();
            } else {
                self.out.reserve(TRAILER_LEN);
                self.out.put_u32_le(self.crc);
                self.out.extend_from_slice(&TRAILER_MAGIC);
                self.trailer_written = true;
            }
        }
    }
}
