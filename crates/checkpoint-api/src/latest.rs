//! How [`CheckpointStore::latest`] picks a checkpoint: the newest one that reads, skipping
//! (and reporting) newer corrupt ones, as pure code every backend runs.
//!
//! A backend reads its candidates newest first, however it reads them (synchronously,
//! or awaiting a database in a snapshot), and hands each outcome to a [`LatestScan`]; or,
//! when reading needs no `.await`, calls [`first_valid`]. Only [`CheckpointError::Corrupt`]
//! is skipped: any other error ends the scan, so an unreachable database is never mistaken
//! for data loss.
//!
//! [`CheckpointStore::latest`]: crate::CheckpointStore::latest

use crate::error::CheckpointError;
use crate::model::Checkpoint;
use crate::store::{CheckpointMeta, Latest, SkippedCheckpoint, StoredCheckpoint};

/// What [`LatestScan::offer`] made of a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum LatestStep<'a> {
    /// The scan found its checkpoint (this one, or an earlier one): stop reading.
    Found,
    /// The candidate is corrupt and was skipped: read the next older one.
    Skipped(&'a SkippedCheckpoint),
}

impl LatestStep<'_> {
    /// Whether the scan is over.
    pub fn is_found(&self) -> bool {
        matches!(self, LatestStep::Found)
    }
}

/// The state of a `latest` lookup: candidates are offered newest first until one reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LatestScan {
    latest: Latest,
}

impl LatestScan {
    /// A scan that has seen no candidate yet.
    pub fn new() -> Self {
        LatestScan::default()
    }

    /// Offers the next candidate (older than every one offered before): its metadata and
    /// the outcome of reading it.
    ///
    /// A checkpoint found ends the scan ([`LatestStep::Found`]); a
    /// [`CheckpointError::Corrupt`] is recorded as skipped ([`LatestStep::Skipped`]); any
    /// other error is returned, and the lookup fails with it. Offers after the scan found
    /// its checkpoint change nothing.
    pub fn offer(
        &mut self,
        meta: CheckpointMeta,
        read: Result<Checkpoint, CheckpointError>,
    ) -> Result<LatestStep<'_>, CheckpointError> {
        if self.latest.checkpoint.is_some() {
            return Ok(LatestStep::Found);
        }
        match read {
            Ok(checkpoint) => {
                self.latest.checkpoint = Some(StoredCheckpoint { meta, checkpoint });
                Ok(LatestStep::Found)
            }
            Err(CheckpointError::Corrupt { source, .. }) => {
                self.latest.skipped.push(SkippedCheckpoint {
                    meta,
                    reason: source,
                });
                match self.latest.skipped.last() {
                    Some(skipped) => Ok(LatestStep::Skipped(skipped)),
                    None => Ok(LatestStep::Found),
                }
            }
            Err(other) => Err(other),
        }
    }

    /// The answer: the checkpoint found, if any, and the newer ones skipped, newest first.
    pub fn finish(self) -> Latest {
        self.latest
    }
}

/// The answer of `latest` over `candidates`, newest first: `read` turns each into its
/// metadata and the outcome of reading it, and is not called again once a candidate reads.
///
/// See [`LatestScan`] for the rules; this is the loop over it for backends whose reads need
/// no `.await`.
pub fn first_valid<C>(
    candidates: impl IntoIterator<Item = C>,
    mut read: impl FnMut(C) -> (CheckpointMeta, Result<Checkpoint, CheckpointError>),
) -> Result<Latest, CheckpointError> {
    let mut scan = LatestScan::new();
    for candidate in candidates {
        let (meta, outcome) = read(candidate);
        if scan.offer(meta, outcome)?.is_found() {
            break;
        }
    }
    Ok(scan.finish())
}

#[cfg(test)]
mod tests {
    use cdc_core::Lsn;
    use proptest::prelude::*;

    use super::*;
    use crate::codec::DecodeError;
    use crate::error::CorruptKind;
    use crate::model::{CheckpointId, JobName, ProtocolOptions, SourcePosition, Timestamp};
    use crate::store::StorageKind;

    /// What reading a candidate gives.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Outcome {
        Valid,
        Corrupt,
        Unavailable,
    }

    fn checkpoint(id: u64) -> Checkpoint {
        Checkpoint::new(
            JobName::new("job").unwrap(),
            CheckpointId::new(id).unwrap(),
            Timestamp::UNIX_EPOCH,
            SourcePosition {
                commit_end_lsn: Lsn::from_u64(id),
                slot: "s".into(),
                publications: vec![],
                protocol: ProtocolOptions::default(),
            },
        )
    }

    fn meta(id: u64) -> CheckpointMeta {
        let cp = checkpoint(id);
        CheckpointMeta {
            job: cp.job,
            id: cp.id,
            commit_end_lsn: cp.source.commit_end_lsn,
            created_at: cp.created_at,
            stored_bytes: 1,
            storage: StorageKind::Memory,
        }
    }

    fn read(id: u64, outcome: Outcome) -> (CheckpointMeta, Result<Checkpoint, CheckpointError>) {
        let m = meta(id);
        let result = match outcome {
            Outcome::Valid => Ok(checkpoint(id)),
            Outcome::Corrupt => Err(CheckpointError::Corrupt {
                job: m.job.clone(),
                id: m.id,
                source: CorruptKind::Decode(DecodeError::Truncated),
            }),
            Outcome::Unavailable => Err(CheckpointError::Unavailable {
                message: "down".into(),
                source: None,
            }),
        };
        (m, result)
    }

    /// Candidates newest first: ids n, n-1, ..., 1 with the given outcomes.
    fn run(outcomes: &[Outcome]) -> (Result<Latest, CheckpointError>, usize) {
        let n = outcomes.len() as u64;
        let mut reads = 0;
        let result = first_valid(outcomes.iter().enumerate(), |(i, &o)| {
            reads += 1;
            read(n - i as u64, o)
        });
        (result, reads)
    }

    #[test]
    fn nothing_stored_is_nothing_found() {
        let (latest, reads) = run(&[]);
        assert_eq!(latest.unwrap(), Latest::default());
        assert_eq!(reads, 0);
    }

    #[test]
    fn corrupt_newest_falls_back_and_is_reported() {
        use Outcome::*;
        let (latest, reads) = run(&[Corrupt, Corrupt, Valid, Corrupt]);
        let latest = latest.unwrap();
        assert_eq!(latest.checkpoint.map(|c| c.meta.id.get()), Some(2));
        let skipped: Vec<u64> = latest.skipped.iter().map(|s| s.meta.id.get()).collect();
        assert_eq!(skipped, [4, 3]);
        assert_eq!(reads, 3, "nothing older than the one found is read");
    }

    #[test]
    fn other_errors_are_not_skipped() {
        use Outcome::*;
        let (latest, _) = run(&[Corrupt, Unavailable, Valid]);
        assert!(matches!(latest, Err(CheckpointError::Unavailable { .. })));
    }

    #[test]
    fn offers_after_found_change_nothing() {
        let mut scan = LatestScan::new();
        let (m, r) = read(2, Outcome::Valid);
        assert!(scan.offer(m, r).unwrap().is_found());
        let (m, r) = read(1, Outcome::Corrupt);
        assert_eq!(scan.offer(m, r).unwrap(), LatestStep::Found);
        let latest = scan.finish();
        assert_eq!(latest.checkpoint.map(|c| c.meta.id.get()), Some(2));
        assert!(latest.skipped.is_empty());
    }

    #[test]
    fn a_skip_is_handed_back_for_reporting() {
        let mut scan = LatestScan::new();
        let (m, r) = read(3, Outcome::Corrupt);
        match scan.offer(m, r).unwrap() {
            LatestStep::Skipped(s) => assert_eq!(s.meta.id.get(), 3),
            LatestStep::Found => panic!("a corrupt checkpoint was found"),
        }
    }

    fn outcome() -> impl Strategy<Value = Outcome> {
        prop_oneof![
            4 => Just(Outcome::Corrupt),
            2 => Just(Outcome::Valid),
            1 => Just(Outcome::Unavailable),
        ]
    }

    proptest! {
        #[test]
        fn the_first_readable_wins(outcomes in proptest::collection::vec(outcome(), 0..12)) {
            let n = outcomes.len() as u64;
            let (result, reads) = run(&outcomes);
            let stop = outcomes.iter().position(|&o| o != Outcome::Corrupt);
            prop_assert_eq!(reads, stop.map_or(outcomes.len(), |s| s + 1));
            let corrupt_before = stop.unwrap_or(outcomes.len());
            let expected_skipped: Vec<u64> = (0..corrupt_before as u64).map(|i| n - i).collect();
            match stop.map(|s| (s, outcomes[s])) {
                Some((_, Outcome::Unavailable)) => {
                    let unavailable = matches!(result, Err(CheckpointError::Unavailable { .. }));
                    prop_assert!(unavailable, "{:?}", result);
                }
                Some((s, _)) => {
                    let latest = result.unwrap();
                    let found = latest.checkpoint.map(|c| c.checkpoint);
                    prop_assert_eq!(found, Some(checkpoint(n - s as u64)));
                    let skipped: Vec<u64> = latest.skipped.iter().map(|s| s.meta.id.get()).collect();
                    prop_assert_eq!(skipped, expected_skipped);
                }
                None => {
                    let latest = result.unwrap();
                    prop_assert!(latest.checkpoint.is_none());
                    let skipped: Vec<u64> = latest.skipped.iter().map(|s| s.meta.id.get()).collect();
                    prop_assert_eq!(skipped, expected_skipped);
                }
            }
        }
    }
}
