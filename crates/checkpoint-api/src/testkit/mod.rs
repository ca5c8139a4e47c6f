//! Test tools (feature `testkit`): an in-memory store and the conformance suite every
//! [`CheckpointStore`](crate::CheckpointStore) implementation runs.

pub mod conformance;
mod memory;

pub use memory::{MemoryStore, DEFAULT_CHUNK_SIZE};
