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
//! slices of it (no further copy). On Linux a buffer of 4 MiB or more is an anonymous
//! mapping whose pages are populated in one call a MiB ahead of the writes, not faulted in
//! page by page: that was most of the CPU of decoding a big incompressible state.

use bytes::{BufMut, Bytes, BytesMut};

use crate::model::{Checkpoint, InvalidCheckpoint};

mod buffer;
mod decoder;
mod encoder;

#[cfg(test)]
use crate::proto::pb;
pub use decoder::ChunkedDecoder;
pub use encoder::ChunkedEncoder;
#[cfg(test)]
use encoder::{protobuf_segments, INLINE_STATE_MAX};

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

#[cfg(test)]
mod tests;
