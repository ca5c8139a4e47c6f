//! The conformance suite: the [`CheckpointStore`] contract as executable checks.
//!
//! A backend implements [`StoreFactory`] and calls [`run_all`] from one test, in whatever
//! async runtime it uses (the suite only awaits the store):
//!
//! ```
//! # use std::sync::Arc;
//! # use checkpoint_api::{CheckpointError, CheckpointId, CheckpointStore, JobName};
//! use checkpoint_api::testkit::{conformance, MemoryStore};
//!
//! #[derive(Debug, Default)]
//! struct Factory(MemoryStore);
//!
//! #[async_trait::async_trait]
//! impl conformance::StoreFactory for Factory {
//!     async fn open(&self) -> Result<Arc<dyn CheckpointStore>, CheckpointError> {
//!         Ok(Arc::new(self.0.clone()))
//!     }
//!     async fn corrupt(&self, job: &JobName, id: CheckpointId) -> Result<(), CheckpointError> {
//!         self.0.corrupt(job, id);
//!         Ok(())
//!     }
//!     async fn fail_next_save(&self, job: &JobName) -> Result<bool, CheckpointError> {
//!         self.0.fail_next_save(job);
//!         Ok(true)
//!     }
//! }
//!
//! # let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! # rt.block_on(async {
//! // In a backend's test: everything but the 256 MiB round trip, to keep the example quick.
//! conformance::fencing_between_two_writers(&Factory::default()).await?;
//! conformance::corrupt_newest_falls_back(&Factory::default()).await?;
//! // conformance::run_all(&Factory::default()).await?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every test uses fresh, unique job names, so a backend can run the suite against a shared
//! database that is not empty, and run it again.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::CheckpointError;
use crate::model::{CheckpointId, JobName};
use crate::store::CheckpointStore;

mod fencing;
mod progress;
mod recovery;
mod round_trip;
mod support;

pub use fencing::fencing_between_two_writers;
pub use progress::{ordering_and_monotonic_ids, retention};
pub use recovery::{atomic_failed_save, corrupt_newest_falls_back};
pub use round_trip::{
    empty_job, empty_state, large_state_256mib, save_load_round_trip, thousand_operators,
};
pub use support::sample_checkpoint;

/// What the suite needs from a backend besides the store itself.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// Opens a store on the storage under test. Every call must reach the same storage (two
    /// stores opened from one factory see each other's writes, like two processes on one
    /// database); the fencing test relies on it. The storage need not be empty.
    async fn open(&self) -> Result<Arc<dyn CheckpointStore>, CheckpointError>;

    /// Damages the stored bytes of checkpoint `id` of `job` so that they no longer decode
    /// (e.g. flip a byte in the middle of its data), leaving its metadata intact.
    async fn corrupt(&self, job: &JobName, id: CheckpointId) -> Result<(), CheckpointError>;

    /// Makes the next save of `job` fail part-way, after some of its data reached storage
    /// (e.g. abort the transaction after writing the first chunk). Returns `Ok(false)` if the
    /// backend cannot inject failures: atomicity is then checked with saves the store must
    /// reject only.
    async fn fail_next_save(&self, job: &JobName) -> Result<bool, CheckpointError>;
}

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The test.
    pub test: &'static str,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "conformance test `{}` failed: {}",
            self.test, self.message
        )
    }
}

impl std::error::Error for Failure {}

/// Every failed test of a [`run_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failures(pub Vec<Failure>);

impl fmt::Display for Failures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} conformance test(s) failed:", self.0.len())?;
        for failure in &self.0 {
            writeln!(f, "  {failure}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Failures {}

/// Runs every test of the suite, in order, and reports all failures.
///
/// Takes a few seconds in memory; [`large_state_256mib`] dominates. Tests are independent:
/// a backend can also call them one by one.
pub async fn run_all(factory: &dyn StoreFactory) -> Result<(), Failures> {
    let mut failures = Vec::new();
    macro_rules! run {
        ($($test:ident),* $(,)?) => {
            $(
                if let Err(failure) = $test(factory).await {
                    failures.push(failure);
                }
            )*
        };
    }
    run!(
        empty_job,
        save_load_round_trip,
        ordering_and_monotonic_ids,
        retention,
        atomic_failed_save,
        corrupt_newest_falls_back,
        fencing_between_two_writers,
        empty_state,
        thousand_operators,
        large_state_256mib,
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failures(failures))
    }
}
