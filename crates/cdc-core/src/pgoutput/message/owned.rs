//! Owned copies: `into_owned` for the messages that borrow from the input
//! buffer, for data that must outlive it (streamed transactions, tasks).

use super::{
    own_bytes, own_str, BeginPrepare, Column, CommitPrepared, Delete, Insert,
    LogicalDecodingMessage, LogicalMessage, OldTuple, Origin, OwnedLogicalMessage, Prepare,
    Relation, RollbackPrepared, Type, Update,
};

impl LogicalMessage<'_> {
    /// A copy that owns all its data, to keep past the input buffer.
    pub fn into_owned(self) -> OwnedLogicalMessage {
        match self {
            LogicalMessage::Begin(m) => LogicalMessage::Begin(m),
            LogicalMessage::Message(m) => LogicalMessage::Message(LogicalDecodingMessage {
                xid: m.xid,
                transactional: m.transactional,
                lsn: m.lsn,
                prefix: own_str(m.prefix),
                content: own_bytes(m.content),
            }),
            LogicalMessage::Commit(m) => LogicalMessage::Commit(m),
            LogicalMessage::Origin(m) => LogicalMessage::Origin(Origin {
                commit_lsn: m.commit_lsn,
                name: own_str(m.name),
            }),
            LogicalMessage::Relation(m) => LogicalMessage::Relation(m.into_owned()),
            LogicalMessage::Type(m) => LogicalMessage::Type(m.into_owned()),
            LogicalMessage::Insert(m) => LogicalMessage::Insert(m.into_owned()),
            LogicalMessage::Update(m) => LogicalMessage::Update(m.into_owned()),
            LogicalMessage::Delete(m) => LogicalMessage::Delete(m.into_owned()),
            LogicalMessage::Truncate(m) => LogicalMessage::Truncate(m),
            LogicalMessage::StreamStart(m) => LogicalMessage::StreamStart(m),
            LogicalMessage::StreamStop => LogicalMessage::StreamStop,
            LogicalMessage::StreamCommit(m) => LogicalMessage::StreamCommit(m),
            LogicalMessage::StreamAbort(m) => LogicalMessage::StreamAbort(m),
            LogicalMessage::BeginPrepare(m) => LogicalMessage::BeginPrepare(BeginPrepare {
                prepare_lsn: m.prepare_lsn,
                end_lsn: m.end_lsn,
                prepare_time: m.prepare_time,
                xid: m.xid,
                gid: own_str(m.gid),
            }),
            LogicalMessage::Prepare(m) => LogicalMessage::Prepare(m.into_owned()),
            LogicalMessage::CommitPrepared(m) => LogicalMessage::CommitPrepared(CommitPrepared {
                flags: m.flags,
                commit_lsn: m.commit_lsn,
                end_lsn: m.end_lsn,
                commit_time: m.commit_time,
                xid: m.xid,
                gid: own_str(m.gid),
            }),
            LogicalMessage::RollbackPrepared(m) => {
                LogicalMessage::RollbackPrepared(RollbackPrepared {
                    flags: m.flags,
                    prepare_end_lsn: m.prepare_end_lsn,
                    rollback_end_lsn: m.rollback_end_lsn,
                    prepare_time: m.prepare_time,
                    rollback_time: m.rollback_time,
                    xid: m.xid,
                    gid: own_str(m.gid),
                })
            }
            LogicalMessage::StreamPrepare(m) => LogicalMessage::StreamPrepare(m.into_owned()),
        }
    }
}

impl Relation<'_> {
    /// A copy that owns its strings.
    pub fn into_owned(self) -> Relation<'static> {
        Relation {
            xid: self.xid,
            oid: self.oid,
            namespace: own_str(self.namespace),
            name: own_str(self.name),
            replica_identity: self.replica_identity,
            columns: self.columns.into_iter().map(Column::into_owned).collect(),
        }
    }
}

impl Type<'_> {
    /// A copy that owns its strings.
    pub fn into_owned(self) -> Type<'static> {
        Type {
            xid: self.xid,
            oid: self.oid,
            namespace: own_str(self.namespace),
            name: own_str(self.name),
        }
    }
}

impl Insert<'_> {
    /// A copy that owns its bytes.
    pub fn into_owned(self) -> Insert<'static> {
        Insert {
            xid: self.xid,
            relation: self.relation,
            new: self.new.into_owned(),
        }
    }
}

impl Update<'_> {
    /// A copy that owns its bytes.
    pub fn into_owned(self) -> Update<'static> {
        Update {
            xid: self.xid,
            relation: self.relation,
            old: self.old.map(OldTuple::into_owned),
            new: self.new.into_owned(),
        }
    }
}

impl Delete<'_> {
    /// A copy that owns its bytes.
    pub fn into_owned(self) -> Delete<'static> {
        Delete {
            xid: self.xid,
            relation: self.relation,
            old: self.old.into_owned(),
        }
    }
}

impl Prepare<'_> {
    /// A copy that owns its strings.
    pub fn into_owned(self) -> Prepare<'static> {
        Prepare {
            flags: self.flags,
            prepare_lsn: self.prepare_lsn,
            end_lsn: self.end_lsn,
            prepare_time: self.prepare_time,
            xid: self.xid,
            gid: own_str(self.gid),
        }
    }
}

impl LogicalDecodingMessage<'_> {
    /// A copy that owns its data.
    pub fn into_owned(self) -> LogicalDecodingMessage<'static> {
        LogicalDecodingMessage {
            xid: self.xid,
            transactional: self.transactional,
            lsn: self.lsn,
            prefix: own_str(self.prefix),
            content: own_bytes(self.content),
        }
    }
}
