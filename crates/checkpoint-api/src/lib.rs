//! The pgcdc checkpoint: what it holds, how it is encoded, and the contract every storage
//! backend keeps.
//!
//! A [`Checkpoint`] is everything needed to resume a pipeline exactly where it stopped: the
//! source position (commit end LSN, slot, publications, pgoutput options), a fingerprint of
//! the configuration, the state of every operator, the initial-snapshot progress and the
//! position of every sink.
//!
//! This crate does no IO: it has no async runtime, opens nothing and reads no clock. It holds
//!
//! * the model ([`Checkpoint`] and friends) and its protobuf schema
//!   (`proto/pgcdc/checkpoint/v1/checkpoint.proto`, compiled at build time; the generated
//!   types are private and convert with `TryFrom`);
//! * the codec ([`encode`], [`decode`], [`ChunkedEncoder`], [`ChunkedDecoder`]): protobuf in
//!   independently LZ4-compressed blocks, in an envelope with magic, version, compression
//!   kind, lengths and a CRC32C, handed out and taken back in chunks so a backend can stream
//!   256 MiB of state without building it whole; see [`codec`] for the layout;
//! * the storage contract: [`CheckpointStore`], with fencing [`Lease`]s, and
//!   [`CheckpointError`]; the [`StatefulOperator`] trait operators implement;
//! * the rules every backend applies, as pure functions: [`fencing`] (whether a write under
//!   a lease may proceed, and whether a save moves the job forward) and [`latest`] (the
//!   newest checkpoint that reads, skipping and reporting corrupt ones, with
//!   [`LatestScan`]);
//! * with the `testkit` feature, an in-memory store and the conformance suite.
//!
//! The main types are re-exported at the crate root; [`codec`], [`fencing`], [`latest`] and
//! `testkit` are public modules for what is used less often.
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use cdc_core::Lsn;
//! use checkpoint_api::{
//!     decode, encode, Checkpoint, CheckpointId, JobName, OperatorState, ProtocolOptions,
//!     SourcePosition, Timestamp,
//! };
//!
//! let mut cp = Checkpoint::new(
//!     JobName::new("orders-to-kafka")?,
//!     CheckpointId::FIRST,
//!     Timestamp::from_unix_micros(1_750_000_000_000_000),
//!     SourcePosition {
//!         commit_end_lsn: "16/B374D848".parse()?,
//!         slot: "pgcdc".into(),
//!         publications: vec!["orders".into()],
//!         protocol: ProtocolOptions { proto_version: 2, ..ProtocolOptions::default() },
//!     },
//! );
//! cp.operators.push(OperatorState {
//!     id: "dedup".into(),
//!     kind: "dedup".into(),
//!     state_version: 1,
//!     state: Bytes::from(vec![7; 1 << 20]),
//! });
//!
//! let envelope = encode(&cp)?;
//! assert!(envelope.len() < 64 << 10, "1 MiB of sevens compresses");
//! let back = decode(&envelope)?;
//! assert_eq!(back, cp);
//! assert_eq!(back.source.commit_end_lsn, Lsn::from_u64(0x16_B374_D848));
//!
//! // Damage is reported, never a panic.
//! let mut bad = envelope.to_vec();
//! bad[40] ^= 1;
//! assert!(decode(&bad).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A backend streams the envelope in chunks and records the manifest:
//!
//! ```
//! # use checkpoint_api::*;
//! # let cp = Checkpoint::new(JobName::new("j")?, CheckpointId::FIRST, Timestamp::UNIX_EPOCH,
//! #     SourcePosition { commit_end_lsn: cdc_core::Lsn::INVALID, slot: "s".into(),
//! #         publications: vec![], protocol: ProtocolOptions::default() });
//! let mut encoder = ChunkedEncoder::new(&cp, &EncodeOptions::default(), 1 << 20)?;
//! let mut stored = Vec::new();
//! for chunk in encoder.by_ref() {
//!     stored.push(chunk); // e.g. write one large-object page or one row
//! }
//! let manifest = encoder.manifest().ok_or("encoder not finished")?;
//!
//! manifest.check_chunk_lens(stored.iter().map(|c| c.len() as u64))?;
//! let mut decoder = ChunkedDecoder::new(DecodeOptions::default().with_max_uncompressed_len(1 << 30));
//! for chunk in &stored {
//!     decoder.push(chunk)?;
//! }
//! assert_eq!(decoder.finish()?, cp);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Feature flags
//!
//! * `testkit` (off by default): `testkit::MemoryStore` (also re-exported as
//!   `MemoryStore`), an in-memory [`CheckpointStore`], and `testkit::conformance`, the
//!   suite every backend runs with
//!   `conformance::run_all(&factory).await`. It adds no dependency and no async runtime: the
//!   suite only awaits the store, so it runs under any executor.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod codec;
mod error;
pub mod fencing;
pub mod latest;
mod model;
mod operator;
mod proto;
mod store;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use codec::{
    decode, decode_chunks, decode_with, encode, encode_with, ChunkManifest, ChunkedDecoder,
    ChunkedEncoder, Compression, DecodeError, DecodeOptions, EncodeError, EncodeOptions,
    EnvelopeHeader, ManifestError,
};
pub use error::{BoxError, CheckpointError, CorruptKind, NotFound, Regression, Rejection};
pub use latest::{LatestScan, LatestStep};
pub use model::{
    Checkpoint, CheckpointId, InvalidCheckpoint, JobName, NameKind, OperatorState, ProtocolOptions,
    RelationColumn, RelationVersion, SinkPosition, SnapshotProgress, SnapshotRequest,
    SourcePosition, StreamingMode, TableCursor, TableDone, TableRef, Timestamp,
    MAX_FINGERPRINT_LEN, MAX_NAME_LEN, MAX_RELATION_COLUMNS,
};
pub use operator::{OperatorStateError, StatefulOperator};
pub use store::{
    verify_decoded, CheckpointMeta, CheckpointStore, Epoch, Latest, Lease, OwnerId,
    SkippedCheckpoint, StorageKind, StoredCheckpoint,
};
#[cfg(feature = "testkit")]
pub use testkit::MemoryStore;
