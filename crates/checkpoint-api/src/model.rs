//! The checkpoint model: pgcdc's own validated types, independent of the protobuf schema.

use std::collections::HashSet;
use std::fmt;
use std::num::NonZeroU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cdc_core::Lsn;

/// Longest job, operator, sink or owner name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Longest configuration fingerprint, in bytes.
pub const MAX_FINGERPRINT_LEN: usize = 1024;

/// The name of a pipeline (a job): non-empty, at most [`MAX_NAME_LEN`] bytes, no control
/// characters.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobName(String);

impl JobName {
    /// A job name, if `name` is a valid one.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidCheckpoint> {
        let name = name.into();
        check_name(&name, NameKind::Job)?;
        Ok(JobName(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobName({:?})", self.0)
    }
}

/// A checkpoint id: per job, strictly increasing, never 0.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CheckpointId(NonZeroU64);

impl CheckpointId {
    /// The first id of a job.
    pub const FIRST: CheckpointId = CheckpointId(NonZeroU64::MIN);

    /// The id `value`, or `None` for 0.
    pub const fn new(value: u64) -> Option<Self> {
        match NonZeroU64::new(value) {
            Some(v) => Some(CheckpointId(v)),
            None => None,
        }
    }

    /// The id as a number.
    pub const fn get(self) -> u64 {
        self.0.get()
    }

    /// The id after this one, or `None` at `u64::MAX`.
    pub const fn next(self) -> Option<Self> {
        match self.0.checked_add(1) {
            Some(v) => Some(CheckpointId(v)),
            None => None,
        }
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Debug for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CheckpointId({})", self.0)
    }
}

/// A point in time with microsecond precision, as checkpoints record it.
///
/// The crate never reads the clock: callers pass `Timestamp::from_system_time(SystemTime::now())`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const UNIX_EPOCH: Timestamp = Timestamp(0);

    /// The time `micros` microseconds after (or before, if negative) the Unix epoch.
    pub const fn from_unix_micros(micros: i64) -> Self {
        Timestamp(micros)
    }

    /// Microseconds since the Unix epoch.
    pub const fn as_unix_micros(self) -> i64 {
        self.0
    }

    /// `time`, truncated to whole microseconds and saturated to the representable range.
    pub fn from_system_time(time: SystemTime) -> Self {
        match time.duration_since(UNIX_EPOCH) {
            Ok(after) => Timestamp(i64::try_from(after.as_micros()).unwrap_or(i64::MAX)),
            Err(before) => {
                let micros = i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX);
                Timestamp(-micros)
            }
        }
    }

    /// This time as a [`SystemTime`], or `None` if the platform cannot represent it.
    pub fn to_system_time(self) -> Option<SystemTime> {
        let magnitude = Duration::from_micros(self.0.unsigned_abs());
        if self.0 >= 0 {
            UNIX_EPOCH.checked_add(magnitude)
        } else {
            UNIX_EPOCH.checked_sub(magnitude)
        }
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}us)", self.0)
    }
}

/// Everything needed to resume a pipeline exactly where it stopped.
///
/// Fields are public; [`Checkpoint::validate`] states the rules, and both the encoder and the
/// decoder enforce them, so anything that encodes also decodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The job this checkpoint belongs to.
    pub job: JobName,
    /// Per-job id, strictly increasing.
    pub id: CheckpointId,
    /// When the checkpoint was taken.
    pub created_at: Timestamp,
    /// Where replication resumes.
    pub source: SourcePosition,
    /// Fingerprint of the pipeline configuration (opaque, at most [`MAX_FINGERPRINT_LEN`] bytes).
    pub config_fingerprint: Bytes,
    /// The state of every stateful operator; ids are unique.
    pub operators: Vec<OperatorState>,
    /// Initial-snapshot progress, if the job takes an initial snapshot.
    pub snapshot: Option<SnapshotProgress>,
    /// The opaque resume position of every sink; ids are unique.
    pub sinks: Vec<SinkPosition>,
    /// The schema in force at [`source`](Self::source) of every relation the
    /// stream decoded; oids are unique.
    pub relations: Vec<RelationVersion>,
}

impl Checkpoint {
    /// The version of the checkpoint format this crate writes, and the newest it reads.
    pub const FORMAT_VERSION: u32 = 1;

    /// A checkpoint with no operator, sink or snapshot state.
    pub fn new(
        job: JobName,
        id: CheckpointId,
        created_at: Timestamp,
        source: SourcePosition,
    ) -> Self {
        Checkpoint {
            job,
            id,
            created_at,
            source,
            config_fingerprint: Bytes::new(),
            operators: Vec::new(),
            snapshot: None,
            sinks: Vec::new(),
            relations: Vec::new(),
        }
    }

    /// The state of operator `id`, if present.
    pub fn operator(&self, id: &str) -> Option<&OperatorState> {
        self.operators.iter().find(|op| op.id == id)
    }

    /// The position of sink `sink_id`, if present.
    pub fn sink(&self, sink_id: &str) -> Option<&SinkPosition> {
        self.sinks.iter().find(|s| s.sink_id == sink_id)
    }

    /// Total bytes of operator state.
    pub fn state_len(&self) -> u64 {
        self.operators.iter().map(|op| op.state.len() as u64).sum()
    }

    /// Checks the rules a checkpoint must keep: valid names, unique operator and sink ids,
    /// a fingerprint of at most [`MAX_FINGERPRINT_LEN`] bytes.
    pub fn validate(&self) -> Result<(), InvalidCheckpoint> {
        check_name(self.job.as_str(), NameKind::Job)?;
        if self.config_fingerprint.len() > MAX_FINGERPRINT_LEN {
            return Err(InvalidCheckpoint::FingerprintTooLong {
                len: self.config_fingerprint.len(),
            });
        }
        let mut seen = HashSet::with_capacity(self.operators.len());
        for op in &self.operators {
            check_name(&op.id, NameKind::Operator)?;
            if op.kind.is_empty() || op.kind.len() > MAX_NAME_LEN {
                return Err(InvalidCheckpoint::InvalidName {
                    what: NameKind::OperatorKind,
                });
            }
            if !seen.insert(op.id.as_str()) {
                return Err(InvalidCheckpoint::DuplicateOperator { id: op.id.clone() });
            }
        }
        let mut seen = HashSet::with_capacity(self.relations.len());
        for rel in &self.relations {
            rel.validate()?;
            if !seen.insert(rel.oid) {
                return Err(InvalidCheckpoint::InvalidRelation {
                    oid: rel.oid,
                    reason: "appears more than once",
                });
            }
        }
        let mut seen = HashSet::with_capacity(self.sinks.len());
        for sink in &self.sinks {
            check_name(&sink.sink_id, NameKind::Sink)?;
            if !seen.insert(sink.sink_id.as_str()) {
                return Err(InvalidCheckpoint::DuplicateSink {
                    id: sink.sink_id.clone(),
                });
            }
        }
        Ok(())
    }
}

/// Where a pipeline resumes replication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePosition {
    /// Commit end LSN of the last transaction fully processed; replication resumes after it.
    pub commit_end_lsn: Lsn,
    /// The replication slot.
    pub slot: String,
    /// The publications, in the order given to the server.
    pub publications: Vec<String>,
    /// The pgoutput options the stream was started with.
    pub protocol: ProtocolOptions,
}

/// One version of a relation's schema (from pgoutput's Relation message),
/// with the LSN it took effect at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationVersion {
    /// Relation OID on the source (never 0).
    pub oid: u32,
    /// LSN of the first change decoded with this version
    /// ([`Lsn::INVALID`] when unknown).
    pub lsn: Lsn,
    /// Schema (namespace) name.
    pub schema: String,
    /// Table name.
    pub name: String,
    /// The columns, in the order of the row values.
    pub columns: Vec<RelationColumn>,
}

impl RelationVersion {
    /// Checks the oid and the names.
    pub fn validate(&self) -> Result<(), InvalidCheckpoint> {
        let bad = |reason| InvalidCheckpoint::InvalidRelation {
            oid: self.oid,
            reason,
        };
        if self.oid == 0 {
            return Err(bad("oid 0"));
        }
        if self.schema.is_empty() || self.name.is_empty() {
            return Err(bad("empty schema or table name"));
        }
        if self.columns.iter().any(|c| c.name.is_empty()) {
            return Err(bad("empty column name"));
        }
        if self.columns.len() > MAX_RELATION_COLUMNS {
            return Err(bad("more columns than PostgreSQL allows"));
        }
        Ok(())
    }
}

/// PostgreSQL's limit of columns in a table (`MaxHeapAttributeNumber`).
pub const MAX_RELATION_COLUMNS: usize = 1600;

/// One column of a [`RelationVersion`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    /// Column name.
    pub name: String,
    /// Type OID.
    pub type_oid: u32,
    /// Type modifier (`atttypmod`; -1 if none).
    pub type_modifier: i32,
    /// Whether the column is part of the replica identity.
    pub key: bool,
}

/// pgoutput options of `START_REPLICATION`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolOptions {
    /// `proto_version`.
    pub proto_version: u32,
    /// `binary`.
    pub binary: bool,
    /// `messages`.
    pub messages: bool,
    /// `streaming`.
    pub streaming: StreamingMode,
    /// `two_phase`.
    pub two_phase: bool,
    /// `origin`, if set.
    pub origin: Option<String>,
}

impl Default for ProtocolOptions {
    fn default() -> Self {
        ProtocolOptions {
            proto_version: 1,
            binary: false,
            messages: false,
            streaming: StreamingMode::Off,
            two_phase: false,
            origin: None,
        }
    }
}

/// pgoutput `streaming` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StreamingMode {
    /// `off`.
    Off,
    /// `on`.
    On,
    /// `parallel` (PostgreSQL 16+).
    Parallel,
}

/// The state of one stateful operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorState {
    /// Operator id, unique in the pipeline.
    pub id: String,
    /// Operator kind, so state never lands in a different kind of operator.
    pub kind: String,
    /// Version of the operator's state format.
    pub state_version: u32,
    /// The state, opaque to pgcdc. Cloning is cheap (reference counted).
    pub state: Bytes,
}

/// Progress of the initial snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotProgress {
    /// LSN of the consistent point the snapshot was exported at; for the
    /// chunked snapshot, the position that identifies it across restarts
    /// (where the slot stood when it began), which sinks use to recognise
    /// rows read again after a crash.
    pub consistent_point: Lsn,
    /// Tables copied completely.
    pub tables_done: Vec<TableDone>,
    /// The table being copied, if any.
    pub in_progress: Option<TableCursor>,
    /// Whether the whole initial snapshot is done.
    pub complete: bool,
    /// Reads asked for while the job runs, in the order they are read
    /// (the first may be `in_progress`).
    pub requests: Vec<SnapshotRequest>,
    /// The newest finished requests (a bounded history, for status output).
    pub requests_done: Vec<TableDone>,
}

/// A read of one table asked for while the job runs: an on-demand snapshot
/// (the signal table), or a table that appeared in a published schema.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SnapshotRequest {
    /// The request's id (the signal's id, or one pgcdc made).
    pub id: String,
    /// The table to read.
    pub table: TableRef,
    /// An SQL condition the read adds; `None`: every row.
    pub filter: Option<String>,
    /// LSN of the signal that asked ([`Lsn::INVALID`] if pgcdc asked
    /// itself).
    pub lsn: Lsn,
}

/// A table by schema and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TableRef {
    /// Schema name.
    pub schema: String,
    /// Table name.
    pub name: String,
}

/// A table whose copy has finished.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableDone {
    /// The table.
    pub table: TableRef,
    /// Chunks it was copied in.
    pub chunks: u64,
    /// Rows copied.
    pub rows: u64,
    /// The table's oid when it was read (0: unknown).
    pub oid: u32,
    /// The request this read answered (`None`: the initial snapshot).
    pub request_id: Option<String>,
    /// The table was not read: it could not be, and the job was configured
    /// to go on without it.
    pub skipped: bool,
}

/// The table whose copy is in progress.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableCursor {
    /// The table.
    pub table: TableRef,
    /// Chunks already copied.
    pub chunks_done: u64,
    /// Rows already copied.
    pub rows_done: u64,
    /// Where the next chunk starts (opaque).
    pub cursor: Bytes,
    /// The request being read (`None`: the initial snapshot).
    pub request_id: Option<String>,
}

/// The opaque resume position of one sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkPosition {
    /// Sink id, unique in the pipeline.
    pub sink_id: String,
    /// Opaque position, only the sink interprets it.
    pub position: Bytes,
}

/// Which name a validation error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameKind {
    /// A job name.
    Job,
    /// An operator id.
    Operator,
    /// An operator kind.
    OperatorKind,
    /// A sink id.
    Sink,
    /// A lease owner id.
    Owner,
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameKind::Job => "job name",
            NameKind::Operator => "operator id",
            NameKind::OperatorKind => "operator kind",
            NameKind::Sink => "sink id",
            NameKind::Owner => "owner id",
        })
    }
}

/// A checkpoint (or a name in one) breaks the model's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidCheckpoint {
    /// A name is empty, longer than [`MAX_NAME_LEN`] bytes or has control characters.
    #[error("invalid {what}: must be 1 to 255 bytes without control characters")]
    InvalidName {
        /// Which name.
        what: NameKind,
    },
    /// Two operators share an id.
    #[error("operator id {id:?} appears more than once")]
    DuplicateOperator {
        /// The id.
        id: String,
    },
    /// Two sinks share an id.
    #[error("sink id {id:?} appears more than once")]
    DuplicateSink {
        /// The id.
        id: String,
    },
    /// The configuration fingerprint is too long.
    #[error("config fingerprint of {len} bytes exceeds {MAX_FINGERPRINT_LEN}")]
    FingerprintTooLong {
        /// Its length.
        len: usize,
    },
    /// The checkpoint id is 0.
    #[error("checkpoint id 0 is not valid")]
    ZeroId,
    /// A required field is absent.
    #[error("required field `{field}` is missing")]
    MissingField {
        /// The field.
        field: &'static str,
    },
    /// The format version is newer than this reader supports, or 0.
    #[error("checkpoint format version {found} is not supported (this reader supports 1 to {supported})")]
    UnsupportedFormat {
        /// The version found.
        found: u32,
        /// The newest supported version.
        supported: u32,
    },
    /// A relation version is not valid.
    #[error("relation oid {oid}: {reason}")]
    InvalidRelation {
        /// The relation OID.
        oid: u32,
        /// What is wrong.
        reason: &'static str,
    },
    /// An enum field holds a value this reader does not know.
    #[error("field `{field}` has unknown value {value}")]
    UnknownEnumValue {
        /// The field.
        field: &'static str,
        /// The value.
        value: i32,
    },
}

pub(crate) fn check_name(name: &str, what: NameKind) -> Result<(), InvalidCheckpoint> {
    if name.is_empty() || name.len() > MAX_NAME_LEN || name.chars().any(char::is_control) {
        return Err(InvalidCheckpoint::InvalidName { what });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(JobName::new("orders-to-kafka").is_ok());
        assert!(JobName::new("").is_err());
        assert!(JobName::new("a\nb").is_err());
        assert!(JobName::new("x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(JobName::new("x".repeat(MAX_NAME_LEN + 1)).is_err());
    }

    #[test]
    fn ids_are_non_zero_and_ordered() {
        assert_eq!(CheckpointId::new(0), None);
        let one = CheckpointId::FIRST;
        assert_eq!(one.get(), 1);
        assert_eq!(one.next().map(CheckpointId::get), Some(2));
        assert_eq!(
            CheckpointId::new(u64::MAX).and_then(CheckpointId::next),
            None
        );
        assert!(one < CheckpointId::new(2).unwrap());
    }

    #[test]
    fn timestamps_round_trip_through_system_time() {
        for micros in [0, 1, -1, 1_700_000_000_123_456, -86_400_000_000] {
            let ts = Timestamp::from_unix_micros(micros);
            let st = ts.to_system_time().unwrap();
            assert_eq!(Timestamp::from_system_time(st), ts);
        }
        let st = UNIX_EPOCH + Duration::from_nanos(1_999);
        assert_eq!(Timestamp::from_system_time(st).as_unix_micros(), 1);
    }

    #[test]
    fn validate_rejects_duplicates() {
        let mut cp = Checkpoint::new(
            JobName::new("j").unwrap(),
            CheckpointId::FIRST,
            Timestamp::UNIX_EPOCH,
            SourcePosition {
                commit_end_lsn: Lsn::INVALID,
                slot: "s".into(),
                publications: vec![],
                protocol: ProtocolOptions::default(),
            },
        );
        let op = OperatorState {
            id: "a".into(),
            kind: "k".into(),
            state_version: 1,
            state: Bytes::new(),
        };
        cp.operators = vec![op.clone(), op];
        assert!(matches!(
            cp.validate(),
            Err(InvalidCheckpoint::DuplicateOperator { .. })
        ));
        cp.operators.truncate(1);
        assert_eq!(cp.validate(), Ok(()));
        cp.operators[0].kind.clear();
        assert!(cp.validate().is_err());
        cp.operators[0].kind = "k".into();
        let sink = SinkPosition {
            sink_id: "s".into(),
            position: Bytes::new(),
        };
        cp.sinks = vec![sink.clone(), sink];
        assert!(matches!(
            cp.validate(),
            Err(InvalidCheckpoint::DuplicateSink { .. })
        ));
        cp.sinks.truncate(1);
        cp.config_fingerprint = Bytes::from(vec![0; MAX_FINGERPRINT_LEN + 1]);
        assert!(matches!(
            cp.validate(),
            Err(InvalidCheckpoint::FingerprintTooLong { .. })
        ));
    }
}
