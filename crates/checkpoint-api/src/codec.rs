//! The checkpoint envelope: protobuf, compressed in LZ4 blocks, framed and checksummed.
//!
//! # Layout
//!
//! All integers are little-endian.
//!
//! ```text
//! header   (20 bytes)
//!   magic             4   b"PGCK"
//!   envelope version  2   1
//!   compression       1   0 = none, 1 = LZ4 block format (lz4_flex)
//!   flags             1   0 (reserved; readers reject anything else)
//!   max block size    4   largest uncompressed block, 1 ..= MAX_BLOCK_SIZE
//!   uncompressed len  8   length of the protobuf message
//! blocks   one after another until their uncompressed lengths add up to the message length
//!   block len         4   uncompressed bytes in this block, 1 ..= max block size
//!   payload word      4   bit 31: stored (raw) block; bits 0..31: payload length
//!   payload               LZ4 block, or the raw bytes when stored
//! trailer  (8 bytes)
//!   crc32c            4   CRC32C of every byte from the header's first to the last block's last
//!   end magic         4   b"PGCE"
//! ```
//!
//! Blocks are compressed independently, so [`ChunkedEncoder`] compresses, checksums and hands
//! out the envelope chunk by chunk without ever building it whole, and [`ChunkedDecoder`]
//! takes it back the same way, holding at most one compressed block besides the output. The
//! encoder cuts blocks where the message's parts end (a large operator state starts a new
//! block), so every block is compressed straight from the caller's buffers with no staging
//! copy. A block that LZ4 cannot shrink is stored raw, so incompressible state costs a copy,
//! not an expansion. The CRC32C is computed incrementally as blocks are produced or consumed.
//!
//! Operator state payloads are never copied into a protobuf buffer: the encoder writes the
//! small protobuf parts itself and feeds the payload [`Bytes`] straight to the
//! compressor; the decoder decompresses into one buffer and the decoded state payloads are
//! slices of it (no further copy).

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;

use crate::model::{Checkpoint, InvalidCheckpoint};
use crate::proto::{self, pb};

/// First bytes of every envelope.
pub const MAGIC: [u8; 4] = *b"PGCK";
/// Last bytes of every envelope.
pub const TRAILER_MAGIC: [u8; 4] = *b"PGCE";
/// The envelope version this crate writes and reads.
pub const ENVELOPE_VERSION: u16 = 1;
/// Length of the envelope header.
pub const HEADER_LEN: usize = 20;
/// Length of the envelope trailer.
pub const TRAILER_LEN: usize = 8;
/// Default uncompressed block size (1 MiB).
pub const DEFAULT_BLOCK_SIZE: u32 = 1 << 20;
/// Largest block size a reader accepts (16 MiB).
pub const MAX_BLOCK_SIZE: u32 = 16 << 20;
/// Default limit on the uncompressed length a decoder accepts (1 GiB).
pub const DEFAULT_MAX_UNCOMPRESSED_LEN: u64 = 1 << 30;

const BLOCK_HEADER_LEN: usize = 8;
const STORED_BIT: u32 = 1 << 31;
/// Operator state up to this size is copied into the protobuf buffer; larger state is
/// referenced, not copied.
const INLINE_STATE_MAX: usize = 16 << 10;

/// How blocks are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Compression {
    /// Every block is stored raw.
    None,
    /// LZ4 block format (lz4_flex); blocks that do not shrink are stored raw.
    Lz4Block,
}

impl Compression {
    fn code(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Lz4Block => 1,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Compression::None),
            1 => Some(Compression::Lz4Block),
            _ => None,
        }
    }
}

/// Options of the encoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeOptions {
    compression: Compression,
    block_size: u32,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        EncodeOptions {
            compression: Compression::Lz4Block,
            block_size: DEFAULT_BLOCK_SIZE,
        }
    }
}

impl EncodeOptions {
    /// Sets the compression (default [`Compression::Lz4Block`]).
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Sets the largest uncompressed block (default [`DEFAULT_BLOCK_SIZE`]; 1 ..= [`MAX_BLOCK_SIZE`]).
    pub fn with_block_size(mut self, block_size: u32) -> Self {
        self.block_size = block_size;
        self
    }
}

/// Options of the decoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeOptions {
    max_uncompressed_len: u64,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            max_uncompressed_len: DEFAULT_MAX_UNCOMPRESSED_LEN,
        }
    }
}

impl DecodeOptions {
    /// Refuse envelopes whose protobuf message is longer than `limit` bytes (default
    /// [`DEFAULT_MAX_UNCOMPRESSED_LEN`]). This bounds the decoder's memory: about `limit`
    /// plus one compressed block.
    pub fn with_max_uncompressed_len(mut self, limit: u64) -> Self {
        self.max_uncompressed_len = limit;
        self
    }

    /// The configured limit.
    pub fn max_uncompressed_len(&self) -> u64 {
        self.max_uncompressed_len
    }
}

/// The fixed header of an envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvelopeHeader {
    /// Envelope version.
    pub version: u16,
    /// Block compression.
    pub compression: Compression,
    /// Largest uncompressed block.
    pub block_size: u32,
    /// Length of the protobuf message.
    pub uncompressed_len: u64,
}

impl EnvelopeHeader {
    fn to_bytes(self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        let mut w = &mut b[..];
        w.put_slice(&MAGIC);
        w.put_u16_le(self.version);
        w.put_u8(self.compression.code());
        w.put_u8(0);
        w.put_u32_le(self.block_size);
        w.put_u64_le(self.uncompressed_len);
        b
    }

    /// Parses and checks the header at the start of `bytes` (magic, version, compression,
    /// flags, block size, and the length against `options`).
    pub fn parse(bytes: &[u8], options: &DecodeOptions) -> Result<Self, DecodeError> {
        let mut found = [0u8; 4];
        let magic = bytes.get(..4).ok_or(DecodeError::Truncated)?;
        found.copy_from_slice(magic);
        if found != MAGIC {
            return Err(DecodeError::BadMagic { found });
        }
        let b = bytes.get(..HEADER_LEN).ok_or(DecodeError::Truncated)?;
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != ENVELOPE_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                found: version,
                supported: ENVELOPE_VERSION,
            });
        }
        let compression = Compression::from_code(b[6])
            .ok_or(DecodeError::UnsupportedCompression { found: b[6] })?;
        if b[7] != 0 {
            return Err(DecodeError::InvalidHeader {
                reason: "reserved flags are set",
            });
        }
        let block_size = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        if block_size == 0 || block_size > MAX_BLOCK_SIZE {
            return Err(DecodeError::InvalidHeader {
                reason: "block size out of range",
            });
        }
        let uncompressed_len =
            u64::from_le_bytes([b[12], b[13], b[14], b[15], b[16], b[17], b[18], b[19]]);
        if uncompressed_len > options.max_uncompressed_len
            || usize::try_from(uncompressed_len).is_err()
        {
            return Err(DecodeError::TooLarge {
                len: uncompressed_len,
                limit: options.max_uncompressed_len,
            });
        }
        Ok(EnvelopeHeader {
            version,
            compression,
            block_size,
            uncompressed_len,
        })
    }
}

/// What a backend records about a chunked envelope so it can tell, before decoding, that it
/// has every chunk and each has the right size. [`ChunkManifest::crc32c`] equals the
/// checksum in the envelope trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkManifest {
    /// Total envelope length in bytes.
    pub total_len: u64,
    /// Chunk size: every chunk but the last has exactly this length.
    pub chunk_size: u64,
    /// Number of chunks.
    pub chunk_count: u64,
    /// Length of the protobuf message inside.
    pub uncompressed_len: u64,
    /// CRC32C of the envelope up to its trailer (the trailer's checksum).
    pub crc32c: u32,
}

impl ChunkManifest {
    /// The length chunk `index` must have, or `None` past the last chunk.
    pub fn expected_chunk_len(&self, index: u64) -> Option<u64> {
        if index >= self.chunk_count {
            return None;
        }
        let start = index.checked_mul(self.chunk_size)?;
        Some(self.total_len.saturating_sub(start).min(self.chunk_size))
    }

    /// Checks that `lens`, the lengths of the chunks held in order, are exactly the chunks of
    /// this manifest.
    pub fn check_chunk_lens<I>(&self, lens: I) -> Result<(), ManifestError>
    where
        I: IntoIterator<Item = u64>,
    {
        let mut count = 0u64;
        for (index, len) in (0u64..).zip(lens) {
            count = index + 1;
            match self.expected_chunk_len(index) {
                Some(expected) if expected == len => {}
                Some(expected) => {
                    return Err(ManifestError::ChunkLen {
                        index,
                        expected,
                        found: len,
                    })
                }
                None => {
                    return Err(ManifestError::ChunkCount {
                        expected: self.chunk_count,
                        found: None,
                    })
                }
            }
        }
        if count != self.chunk_count {
            return Err(ManifestError::ChunkCount {
                expected: self.chunk_count,
                found: Some(count),
            });
        }
        Ok(())
    }
}

/// The chunks held do not match a [`ChunkManifest`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// Wrong number of chunks (`found` is `None` when there were more than expected).
    #[error("expected {expected} chunks, found {}", found.map_or_else(|| "more".to_owned(), |n| n.to_string()))]
    ChunkCount {
        /// Chunks in the manifest.
        expected: u64,
        /// Chunks found, if fewer or equal.
        found: Option<u64>,
    },
    /// A chunk has the wrong length.
    #[error("chunk {index} has {found} bytes, expected {expected}")]
    ChunkLen {
        /// Chunk index.
        index: u64,
        /// Expected length.
        expected: u64,
        /// Length found.
        found: u64,
    },
}

/// Encoding failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The checkpoint breaks the model's rules.
    #[error("invalid checkpoint: {0}")]
    Invalid(#[from] InvalidCheckpoint),
    /// The options are out of range.
    #[error("invalid encode options: {reason}")]
    InvalidOptions {
        /// What is wrong.
        reason: &'static str,
    },
}

/// Decoding failed. Every malformed input ends here; the decoder never panics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input does not start with [`MAGIC`].
    #[error("not a pgcdc checkpoint envelope (magic {found:02x?})")]
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// The envelope version is not supported.
    #[error("envelope version {found} is not supported (this reader supports {supported})")]
    UnsupportedVersion {
        /// Version found.
        found: u16,
        /// Version supported.
        supported: u16,
    },
    /// The compression kind is unknown.
    #[error("unknown compression kind {found}")]
    UnsupportedCompression {
        /// The code found.
        found: u8,
    },
    /// A header field is out of range.
    #[error("invalid envelope header: {reason}")]
    InvalidHeader {
        /// What is wrong.
        reason: &'static str,
    },
    /// The message is longer than the decoder's limit.
    #[error("checkpoint of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Declared length.
        len: u64,
        /// Configured limit.
        limit: u64,
    },
    /// The input ended before the envelope did.
    #[error("envelope is truncated")]
    Truncated,
    /// A block is malformed.
    #[error("block {index} is corrupt: {reason}")]
    CorruptBlock {
        /// Block index.
        index: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// The trailer does not end with [`TRAILER_MAGIC`].
    #[error("envelope trailer is corrupt")]
    BadTrailer,
    /// The checksum does not match the content.
    #[error("checksum mismatch: envelope says {expected:#010x}, content has {actual:#010x}")]
    ChecksumMismatch {
        /// Checksum in the trailer.
        expected: u32,
        /// Checksum of the bytes read.
        actual: u32,
    },
    /// Bytes follow the trailer.
    #[error("bytes follow the end of the envelope")]
    TrailingBytes,
    /// The payload is not a valid protobuf `Checkpoint`.
    #[error("invalid protobuf: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// The payload decodes but breaks the model's rules.
    #[error("invalid checkpoint: {0}")]
    Invalid(#[from] InvalidCheckpoint),
    /// The decoder already returned an error; it takes no more input.
    #[error("decoder already failed")]
    Failed,
}

/// Encodes `checkpoint` into one envelope with the default options.
pub fn encode(checkpoint: &Checkpoint) -> Result<Bytes, EncodeError> {
    encode_with(checkpoint, &EncodeOptions::default())
}

/// Encodes `checkpoint` into one envelope.
pub fn encode_with(checkpoint: &Checkpoint, options: &EncodeOptions) -> Result<Bytes, EncodeError> {
    let mut encoder = ChunkedEncoder::new(checkpoint, options, usize::MAX)?;
    let mut out = match encoder.next() {
        Some(first) => first,
        None => return Ok(Bytes::new()),
    };
    // With an unbounded chunk size there is exactly one chunk; stay correct if not.
    for more in encoder {
        let mut joined = BytesMut::from(&out[..]);
        joined.extend_from_slice(&more);
        out = joined.freeze();
    }
    Ok(out)
}

/// Decodes one envelope with the default options.
pub fn decode(envelope: &[u8]) -> Result<Checkpoint, DecodeError> {
    decode_with(envelope, &DecodeOptions::default())
}

/// Decodes one envelope.
pub fn decode_with(envelope: &[u8], options: &DecodeOptions) -> Result<Checkpoint, DecodeError> {
    let mut decoder = ChunkedDecoder::new(options.clone());
    decoder.push(envelope)?;
    decoder.finish()
}

/// Decodes an envelope given as chunks, in order.
pub fn decode_chunks<I>(chunks: I, options: &DecodeOptions) -> Result<Checkpoint, DecodeError>
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    let mut decoder = ChunkedDecoder::new(options.clone());
    for chunk in chunks {
        decoder.push(chunk.as_ref())?;
    }
    decoder.finish()
}

/// The protobuf encoding of a checkpoint as a list of byte strings, large operator state
/// referenced rather than copied.
fn protobuf_segments(cp: &Checkpoint) -> VecDeque<Bytes> {
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
    out: Vec<u8>,
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
            out: Vec::new(),
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
            self.out = Vec::new();
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
        let message = pb::Checkpoint::decode(Bytes::from(self.out))?;
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
                    self.out = vec![0u8; len];
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
        let Some(dst) = self.out.get_mut(start..start + len) else {
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

#[cfg(test)]
mod tests;
