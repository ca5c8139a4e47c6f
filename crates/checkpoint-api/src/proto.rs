//! The generated protobuf types (private) and their conversions into the model.

use cdc_core::Lsn;

use crate::model::{
    Checkpoint, CheckpointId, InvalidCheckpoint, JobName, OperatorState, ProtocolOptions,
    RelationColumn, RelationVersion, SinkPosition, SnapshotProgress, SnapshotRequest,
    SourcePosition, StreamingMode, TableCursor, TableDone, TableRef, Timestamp,
};

#[allow(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    rust_2018_idioms
)]
pub(crate) mod pb {
    include!(concat!(env!("OUT_DIR"), "/pgcdc.checkpoint.v1.rs"));
}

/// Field number of `Checkpoint.operators`.
pub(crate) const CHECKPOINT_OPERATORS_TAG: u32 = 7;
/// Field number of `OperatorState.state`.
pub(crate) const OPERATOR_STATE_TAG: u32 = 4;

/// The protobuf form of everything in `cp` except operator state payloads (operators are
/// listed with empty `state`; the encoder appends the payloads without copying them).
pub(crate) fn checkpoint_without_operators(cp: &Checkpoint) -> pb::Checkpoint {
    pb::Checkpoint {
        format_version: Checkpoint::FORMAT_VERSION,
        job: cp.job.as_str().to_owned(),
        id: cp.id.get(),
        created_unix_micros: cp.created_at.as_unix_micros(),
        source: Some(source_to_pb(&cp.source)),
        config_fingerprint: cp.config_fingerprint.clone(),
        operators: Vec::new(),
        snapshot: cp.snapshot.as_ref().map(snapshot_to_pb),
        sinks: cp
            .sinks
            .iter()
            .map(|s| pb::SinkPosition {
                sink_id: s.sink_id.clone(),
                position: s.position.clone(),
            })
            .collect(),
        relations: cp.relations.iter().map(relation_to_pb).collect(),
    }
}

fn relation_to_pb(r: &RelationVersion) -> pb::RelationVersion {
    pb::RelationVersion {
        oid: r.oid,
        lsn: r.lsn.as_u64(),
        schema: r.schema.clone(),
        name: r.name.clone(),
        columns: r
            .columns
            .iter()
            .map(|c| pb::RelationColumn {
                name: c.name.clone(),
                type_oid: c.type_oid,
                type_modifier: c.type_modifier,
                key: c.key,
            })
            .collect(),
    }
}

fn relation_from_pb(r: pb::RelationVersion) -> RelationVersion {
    RelationVersion {
        oid: r.oid,
        lsn: Lsn::from_u64(r.lsn),
        schema: r.schema,
        name: r.name,
        columns: r
            .columns
            .into_iter()
            .map(|c| RelationColumn {
                name: c.name,
                type_oid: c.type_oid,
                type_modifier: c.type_modifier,
                key: c.key,
            })
            .collect(),
    }
}

/// The protobuf form of an operator, without its state payload.
pub(crate) fn operator_header(op: &OperatorState) -> pb::OperatorState {
    pb::OperatorState {
        id: op.id.clone(),
        kind: op.kind.clone(),
        state_version: op.state_version,
        state: bytes::Bytes::new(),
    }
}

fn source_to_pb(s: &SourcePosition) -> pb::SourcePosition {
    let p = &s.protocol;
    pb::SourcePosition {
        commit_end_lsn: s.commit_end_lsn.as_u64(),
        slot: s.slot.clone(),
        publications: s.publications.clone(),
        protocol: Some(pb::ProtocolOptions {
            proto_version: p.proto_version,
            binary: p.binary,
            messages: p.messages,
            streaming: match p.streaming {
                StreamingMode::Off => pb::StreamingMode::Off,
                StreamingMode::On => pb::StreamingMode::On,
                StreamingMode::Parallel => pb::StreamingMode::Parallel,
            } as i32,
            two_phase: p.two_phase,
            origin: p.origin.clone().unwrap_or_default(),
        }),
    }
}

fn table_to_pb(t: &TableRef) -> pb::TableRef {
    pb::TableRef {
        schema: t.schema.clone(),
        name: t.name.clone(),
    }
}

fn table_done_to_pb(t: &TableDone) -> pb::TableDone {
    pb::TableDone {
        table: Some(table_to_pb(&t.table)),
        chunks: t.chunks,
        rows: t.rows,
        oid: t.oid,
        request_id: t.request_id.clone().unwrap_or_default(),
        skipped: t.skipped,
    }
}

fn snapshot_to_pb(s: &SnapshotProgress) -> pb::SnapshotProgress {
    pb::SnapshotProgress {
        consistent_point_lsn: s.consistent_point.as_u64(),
        tables_done: s.tables_done.iter().map(table_done_to_pb).collect(),
        in_progress: s.in_progress.as_ref().map(|c| pb::TableCursor {
            table: Some(table_to_pb(&c.table)),
            chunks_done: c.chunks_done,
            rows_done: c.rows_done,
            cursor: c.cursor.clone(),
            request_id: c.request_id.clone().unwrap_or_default(),
        }),
        complete: s.complete,
        requests: s
            .requests
            .iter()
            .map(|r| pb::SnapshotRequest {
                id: r.id.clone(),
                table: Some(table_to_pb(&r.table)),
                filter: r.filter.clone().unwrap_or_default(),
                lsn: r.lsn.as_u64(),
            })
            .collect(),
        requests_done: s.requests_done.iter().map(table_done_to_pb).collect(),
    }
}

/// An empty string as `None`.
fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

impl TryFrom<pb::Checkpoint> for Checkpoint {
    type Error = InvalidCheckpoint;

    fn try_from(m: pb::Checkpoint) -> Result<Self, Self::Error> {
        if m.format_version == 0 || m.format_version > Checkpoint::FORMAT_VERSION {
            return Err(InvalidCheckpoint::UnsupportedFormat {
                found: m.format_version,
                supported: Checkpoint::FORMAT_VERSION,
            });
        }
        let job = JobName::new(m.job)?;
        let id = CheckpointId::new(m.id).ok_or(InvalidCheckpoint::ZeroId)?;
        let source = m
            .source
            .ok_or(InvalidCheckpoint::MissingField { field: "source" })
            .and_then(SourcePosition::try_from)?;
        let operators = m
            .operators
            .into_iter()
            .map(|op| OperatorState {
                id: op.id,
                kind: op.kind,
                state_version: op.state_version,
                state: op.state,
            })
            .collect();
        let snapshot = m.snapshot.map(SnapshotProgress::try_from).transpose()?;
        let sinks = m
            .sinks
            .into_iter()
            .map(|s| SinkPosition {
                sink_id: s.sink_id,
                position: s.position,
            })
            .collect();
        let cp = Checkpoint {
            job,
            id,
            created_at: Timestamp::from_unix_micros(m.created_unix_micros),
            source,
            config_fingerprint: m.config_fingerprint,
            operators,
            snapshot,
            sinks,
            relations: m.relations.into_iter().map(relation_from_pb).collect(),
        };
        cp.validate()?;
        Ok(cp)
    }
}

impl TryFrom<pb::SourcePosition> for SourcePosition {
    type Error = InvalidCheckpoint;

    fn try_from(m: pb::SourcePosition) -> Result<Self, Self::Error> {
        let p = m.protocol.ok_or(InvalidCheckpoint::MissingField {
            field: "source.protocol",
        })?;
        let streaming = match pb::StreamingMode::try_from(p.streaming) {
            Ok(pb::StreamingMode::Off) => StreamingMode::Off,
            Ok(pb::StreamingMode::On) => StreamingMode::On,
            Ok(pb::StreamingMode::Parallel) => StreamingMode::Parallel,
            Ok(pb::StreamingMode::Unspecified) | Err(_) => {
                return Err(InvalidCheckpoint::UnknownEnumValue {
                    field: "source.protocol.streaming",
                    value: p.streaming,
                })
            }
        };
        Ok(SourcePosition {
            commit_end_lsn: Lsn::from_u64(m.commit_end_lsn),
            slot: m.slot,
            publications: m.publications,
            protocol: ProtocolOptions {
                proto_version: p.proto_version,
                binary: p.binary,
                messages: p.messages,
                streaming,
                two_phase: p.two_phase,
                origin: (!p.origin.is_empty()).then_some(p.origin),
            },
        })
    }
}

impl TryFrom<pb::SnapshotProgress> for SnapshotProgress {
    type Error = InvalidCheckpoint;

    fn try_from(m: pb::SnapshotProgress) -> Result<Self, Self::Error> {
        let table = |t: Option<pb::TableRef>, field: &'static str| {
            t.map(|t| TableRef {
                schema: t.schema,
                name: t.name,
            })
            .ok_or(InvalidCheckpoint::MissingField { field })
        };
        let done = |t: pb::TableDone, field: &'static str| {
            Ok(TableDone {
                table: table(t.table, field)?,
                chunks: t.chunks,
                rows: t.rows,
                oid: t.oid,
                request_id: non_empty(t.request_id),
                skipped: t.skipped,
            })
        };
        let tables_done = m
            .tables_done
            .into_iter()
            .map(|t| done(t, "snapshot.tables_done.table"))
            .collect::<Result<_, InvalidCheckpoint>>()?;
        let requests_done = m
            .requests_done
            .into_iter()
            .map(|t| done(t, "snapshot.requests_done.table"))
            .collect::<Result<_, InvalidCheckpoint>>()?;
        let requests = m
            .requests
            .into_iter()
            .map(|r| {
                if r.id.is_empty() {
                    return Err(InvalidCheckpoint::MissingField {
                        field: "snapshot.requests.id",
                    });
                }
                Ok(SnapshotRequest {
                    id: r.id,
                    table: table(r.table, "snapshot.requests.table")?,
                    filter: non_empty(r.filter),
                    lsn: Lsn::from_u64(r.lsn),
                })
            })
            .collect::<Result<_, InvalidCheckpoint>>()?;
        let in_progress = m
            .in_progress
            .map(|c| {
                Ok::<_, InvalidCheckpoint>(TableCursor {
                    table: table(c.table, "snapshot.in_progress.table")?,
                    chunks_done: c.chunks_done,
                    rows_done: c.rows_done,
                    cursor: c.cursor,
                    request_id: non_empty(c.request_id),
                })
            })
            .transpose()?;
        Ok(SnapshotProgress {
            consistent_point: Lsn::from_u64(m.consistent_point_lsn),
            tables_done,
            in_progress,
            complete: m.complete,
            requests,
            requests_done,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn with_relations(relations: Vec<pb::RelationVersion>) -> pb::Checkpoint {
        let mut cp = Checkpoint::new(
            JobName::new("job").unwrap(),
            CheckpointId::FIRST,
            Timestamp::from_unix_micros(1),
            SourcePosition {
                commit_end_lsn: Lsn::from_u64(0x100),
                slot: "slot".into(),
                publications: vec!["p".into()],
                protocol: ProtocolOptions::default(),
            },
        );
        cp.relations = vec![RelationVersion {
            oid: 7,
            lsn: Lsn::from_u64(0x80),
            schema: "public".into(),
            name: "t".into(),
            columns: vec![RelationColumn {
                name: "id".into(),
                type_oid: 23,
                type_modifier: -1,
                key: true,
            }],
        }];
        let mut m = checkpoint_without_operators(&cp);
        assert_eq!(Checkpoint::try_from(m.clone()).unwrap(), cp, "round trip");
        m.relations = relations;
        m
    }

    fn relation(oid: u32, name: &str, column: &str) -> pb::RelationVersion {
        pb::RelationVersion {
            oid,
            lsn: 1,
            schema: "public".into(),
            name: name.into(),
            columns: vec![pb::RelationColumn {
                name: column.into(),
                type_oid: 23,
                type_modifier: -1,
                key: false,
            }],
        }
    }

    #[test]
    fn invalid_relation_versions_are_refused() {
        for (relations, reason) in [
            (vec![relation(0, "t", "a")], "oid 0"),
            (vec![relation(1, "", "a")], "empty schema or table name"),
            (vec![relation(1, "t", "")], "empty column name"),
            (
                vec![relation(1, "t", "a"), relation(1, "u", "a")],
                "appears more than once",
            ),
        ] {
            let err = Checkpoint::try_from(with_relations(relations)).unwrap_err();
            assert!(
                matches!(err, InvalidCheckpoint::InvalidRelation { reason: r, .. } if r == reason),
                "{err}"
            );
        }
        let mut many = relation(1, "t", "a");
        many.columns = vec![many.columns[0].clone(); crate::model::MAX_RELATION_COLUMNS + 1];
        assert!(Checkpoint::try_from(with_relations(vec![many])).is_err());
    }
}
