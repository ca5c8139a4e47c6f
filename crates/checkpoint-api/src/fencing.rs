//! Whether a write may proceed: the fencing and progress rules of [`CheckpointStore`],
//! as pure functions every backend calls.
//!
//! A backend reads what it knows of the job (its current [`Epoch`], the highest id ever
//! saved, the newest stored LSN) however it stores them, in the same transaction or under
//! the same lock as the write, and asks these functions for the verdict. So every backend
//! refuses the same writes with the same errors, and the rules are tested here once.
//!
//! [`CheckpointStore`]: crate::CheckpointStore

use cdc_core::Lsn;

use crate::error::{CheckpointError, NotFound, Regression};
use crate::model::{Checkpoint, CheckpointId};
use crate::store::{Epoch, Lease};

/// Whether a write under `lease` may proceed, given the job's `current` epoch (`None`: no
/// lease was ever acquired for the job).
///
/// * `None` → [`CheckpointError::NotFound`] with [`NotFound::Lease`];
/// * an epoch other than the lease's → [`CheckpointError::Fenced`] (another writer took the
///   job over; stores only hand out greater epochs, but any mismatch fences);
/// * the lease's epoch → `Ok`.
pub fn check_lease(lease: &Lease, current: Option<Epoch>) -> Result<(), CheckpointError> {
    let Some(current) = current else {
        return Err(CheckpointError::NotFound {
            job: lease.job().clone(),
            what: NotFound::Lease,
        });
    };
    if current != lease.epoch() {
        return Err(CheckpointError::Fenced {
            job: lease.job().clone(),
            held: lease.epoch(),
            current,
        });
    }
    Ok(())
}

/// Whether saving `checkpoint` keeps the job moving forward, given the highest id ever
/// saved for the job (deleted checkpoints included; `None` if none) and the commit end LSN
/// of the newest stored checkpoint (`None` if none is stored).
///
/// The id must be greater than `highest_id` ([`Regression::Id`] otherwise), and the LSN
/// not before `newest_lsn` ([`Regression::Lsn`] otherwise; the same LSN is fine). The id
/// is checked first.
pub fn check_progress(
    checkpoint: &Checkpoint,
    highest_id: Option<CheckpointId>,
    newest_lsn: Option<Lsn>,
) -> Result<(), CheckpointError> {
    let regressed = |regression| CheckpointError::Regressed {
        job: checkpoint.job.clone(),
        regression,
    };
    if let Some(latest) = highest_id.filter(|&h| checkpoint.id <= h) {
        return Err(regressed(Regression::Id {
            latest,
            attempted: checkpoint.id,
        }));
    }
    let attempted = checkpoint.source.commit_end_lsn;
    if let Some(latest) = newest_lsn.filter(|&l| attempted < l) {
        return Err(regressed(Regression::Lsn { latest, attempted }));
    }
    Ok(())
}

/// Whether saving `checkpoint` under `lease` may proceed: [`check_lease`], then
/// [`check_progress`]. (The checkpoint's job is checked against the lease's before, with
/// [`Lease::check_job`].)
pub fn check_save(
    lease: &Lease,
    checkpoint: &Checkpoint,
    current: Option<Epoch>,
    highest_id: Option<CheckpointId>,
    newest_lsn: Option<Lsn>,
) -> Result<(), CheckpointError> {
    check_lease(lease, current)?;
    check_progress(checkpoint, highest_id, newest_lsn)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::{JobName, ProtocolOptions, SourcePosition, Timestamp};
    use crate::store::OwnerId;

    fn lease(epoch: u64) -> Lease {
        Lease::new(
            JobName::new("job").unwrap(),
            OwnerId::new("owner").unwrap(),
            Epoch(epoch),
        )
    }

    fn checkpoint(id: u64, lsn: u64) -> Checkpoint {
        Checkpoint::new(
            JobName::new("job").unwrap(),
            CheckpointId::new(id).unwrap(),
            Timestamp::UNIX_EPOCH,
            SourcePosition {
                commit_end_lsn: Lsn::from_u64(lsn),
                slot: "s".into(),
                publications: vec![],
                protocol: ProtocolOptions::default(),
            },
        )
    }

    fn id(n: u64) -> Option<CheckpointId> {
        CheckpointId::new(n)
    }

    #[test]
    fn no_lease_is_not_found() {
        let e = check_lease(&lease(1), None).unwrap_err();
        assert!(matches!(
            e,
            CheckpointError::NotFound {
                what: NotFound::Lease,
                ..
            }
        ));
    }

    #[test]
    fn a_newer_epoch_fences() {
        let e = check_lease(&lease(1), Some(Epoch(2))).unwrap_err();
        assert!(
            matches!(e, CheckpointError::Fenced { held: Epoch(1), current: Epoch(2), ref job }
                if job.as_str() == "job"),
            "{e:?}"
        );
        assert!(!e.is_retryable());
        check_lease(&lease(2), Some(Epoch(2))).unwrap();
    }

    #[test]
    fn ids_and_lsns_only_go_forward() {
        check_progress(&checkpoint(1, 10), None, None).unwrap();
        check_progress(&checkpoint(3, 10), id(2), Some(Lsn::from_u64(10))).unwrap();
        let e = check_progress(&checkpoint(2, 10), id(2), None).unwrap_err();
        assert!(matches!(
            e,
            CheckpointError::Regressed {
                regression: Regression::Id { .. },
                ..
            }
        ));
        let e = check_progress(&checkpoint(3, 9), id(2), Some(Lsn::from_u64(10))).unwrap_err();
        assert!(matches!(
            e,
            CheckpointError::Regressed {
                regression: Regression::Lsn { .. },
                ..
            }
        ));
    }

    #[test]
    fn the_lease_is_checked_before_progress() {
        let e = check_save(&lease(1), &checkpoint(1, 1), Some(Epoch(2)), id(5), None);
        assert!(matches!(e, Err(CheckpointError::Fenced { .. })));
        let e = check_save(&lease(2), &checkpoint(1, 1), Some(Epoch(2)), id(5), None);
        assert!(matches!(e, Err(CheckpointError::Regressed { .. })));
    }

    proptest! {
        #[test]
        fn lease_ok_exactly_when_current(held in 0u64..4, current in proptest::option::of(0u64..4)) {
            let result = check_lease(&lease(held), current.map(Epoch));
            let expected = match current {
                None => matches!(result, Err(CheckpointError::NotFound { .. })),
                Some(c) if c == held => result.is_ok(),
                Some(c) => matches!(
                    result,
                    Err(CheckpointError::Fenced { held: h, current: cur, .. })
                        if h == Epoch(held) && cur == Epoch(c)
                ),
            };
            prop_assert!(expected, "held {}, current {:?}: {:?}", held, current, result);
        }

        #[test]
        fn progress_ok_exactly_when_forward(
            new_id in 1u64..8,
            lsn in 0u64..8,
            highest in proptest::option::of(1u64..8),
            newest in proptest::option::of(0u64..8),
        ) {
            let result = check_progress(
                &checkpoint(new_id, lsn),
                highest.and_then(CheckpointId::new),
                newest.map(Lsn::from_u64),
            );
            let id_ok = highest.is_none_or(|h| new_id > h);
            let lsn_ok = newest.is_none_or(|n| lsn >= n);
            match result {
                Ok(()) => prop_assert!(id_ok && lsn_ok),
                Err(CheckpointError::Regressed { regression: Regression::Id { latest, attempted }, .. }) => {
                    prop_assert!(!id_ok);
                    prop_assert_eq!(Some(latest.get()), highest);
                    prop_assert_eq!(attempted.get(), new_id);
                }
                Err(CheckpointError::Regressed { regression: Regression::Lsn { latest, attempted }, .. }) => {
                    prop_assert!(id_ok && !lsn_ok);
                    prop_assert_eq!(Some(latest.as_u64()), newest);
                    prop_assert_eq!(attempted.as_u64(), lsn);
                }
                Err(other) => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
