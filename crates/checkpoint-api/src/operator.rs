//! [`StatefulOperator`]: how an operator puts its state into a checkpoint and takes it back.

use bytes::Bytes;

use crate::model::OperatorState;

/// An operator whose state is checkpointed.
///
/// The state is opaque bytes plus a version number of the operator's own format, so a newer
/// operator can migrate old state and an older one can refuse state it does not understand.
pub trait StatefulOperator {
    /// Id of this operator, unique in the pipeline.
    fn operator_id(&self) -> &str;

    /// Kind (type) of this operator.
    fn kind(&self) -> &str;

    /// Version of the state format [`snapshot_state`](Self::snapshot_state) writes.
    fn state_version(&self) -> u32;

    /// The current state.
    fn snapshot_state(&self) -> Result<Bytes, OperatorStateError>;

    /// Replaces the state with `state`, written at `version` (refuse or migrate versions
    /// other than [`state_version`](Self::state_version)).
    fn restore_state(&mut self, version: u32, state: Bytes) -> Result<(), OperatorStateError>;
}

/// An operator could not produce or accept state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorStateError {
    /// The state was written by a version this operator cannot read.
    #[error(
        "operator {operator}: state version {found} is not supported (supported: {supported})"
    )]
    UnsupportedVersion {
        /// Operator id.
        operator: String,
        /// Version found.
        found: u32,
        /// Newest version supported.
        supported: u32,
    },
    /// The state belongs to another operator or another kind of operator.
    #[error(
        "state of {found_kind} operator {found_id} cannot be restored into {kind} operator {id}"
    )]
    WrongOperator {
        /// This operator's id.
        id: String,
        /// This operator's kind.
        kind: String,
        /// The state's operator id.
        found_id: String,
        /// The state's operator kind.
        found_kind: String,
    },
    /// The state bytes are malformed.
    #[error("operator {operator}: invalid state: {reason}")]
    Invalid {
        /// Operator id.
        operator: String,
        /// What is wrong.
        reason: String,
    },
}

impl OperatorState {
    /// Captures `operator`'s current state.
    pub fn capture<O: StatefulOperator + ?Sized>(operator: &O) -> Result<Self, OperatorStateError> {
        Ok(OperatorState {
            id: operator.operator_id().to_owned(),
            kind: operator.kind().to_owned(),
            state_version: operator.state_version(),
            state: operator.snapshot_state()?,
        })
    }

    /// Restores this state into `operator`, after checking it is the same operator and kind.
    pub fn restore_into<O: StatefulOperator + ?Sized>(
        &self,
        operator: &mut O,
    ) -> Result<(), OperatorStateError> {
        if operator.operator_id() != self.id || operator.kind() != self.kind {
            return Err(OperatorStateError::WrongOperator {
                id: operator.operator_id().to_owned(),
                kind: operator.kind().to_owned(),
                found_id: self.id.clone(),
                found_kind: self.kind.clone(),
            });
        }
        operator.restore_state(self.state_version, self.state.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts events; v1 state is a u32, v2 a u64 (migrated from v1).
    struct Counter {
        count: u64,
    }

    impl StatefulOperator for Counter {
        fn operator_id(&self) -> &str {
            "count"
        }
        fn kind(&self) -> &str {
            "counter"
        }
        fn state_version(&self) -> u32 {
            2
        }
        fn snapshot_state(&self) -> Result<Bytes, OperatorStateError> {
            Ok(Bytes::copy_from_slice(&self.count.to_le_bytes()))
        }
        fn restore_state(&mut self, version: u32, state: Bytes) -> Result<(), OperatorStateError> {
            let invalid = || OperatorStateError::Invalid {
                operator: "count".into(),
                reason: format!("{} bytes", state.len()),
            };
            self.count = match version {
                1 => u64::from(u32::from_le_bytes(
                    state[..].try_into().map_err(|_| invalid())?,
                )),
                2 => u64::from_le_bytes(state[..].try_into().map_err(|_| invalid())?),
                found => {
                    return Err(OperatorStateError::UnsupportedVersion {
                        operator: "count".into(),
                        found,
                        supported: 2,
                    })
                }
            };
            Ok(())
        }
    }

    #[test]
    fn capture_restore_and_migrate() {
        let state = OperatorState::capture(&Counter { count: 41 }).unwrap();
        assert_eq!(state.state_version, 2);
        let mut restored = Counter { count: 0 };
        state.restore_into(&mut restored).unwrap();
        assert_eq!(restored.count, 41);

        let old = OperatorState {
            state_version: 1,
            state: Bytes::copy_from_slice(&7u32.to_le_bytes()),
            ..state.clone()
        };
        old.restore_into(&mut restored).unwrap();
        assert_eq!(restored.count, 7);

        let future = OperatorState {
            state_version: 3,
            ..state.clone()
        };
        assert!(matches!(
            future.restore_into(&mut restored),
            Err(OperatorStateError::UnsupportedVersion { found: 3, .. })
        ));
        let other = OperatorState {
            kind: "dedup".into(),
            ..state
        };
        assert!(matches!(
            other.restore_into(&mut restored),
            Err(OperatorStateError::WrongOperator { .. })
        ));
        assert_eq!(restored.count, 7);
    }
}
