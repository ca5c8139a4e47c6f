//! The parser: [`LogicalMessage::parse`] reads one pgoutput message from
//! the `data` of an XLogData, borrowing from it, with version-dependent
//! fields read as the [`ParseContext`] says and trailing bytes refused.

use std::borrow::Cow;

use super::super::tuple::TupleData;
use super::super::ParseContext;
use super::{
    since_version, Begin, BeginPrepare, Column, Commit, CommitPrepared, Delete, Insert,
    LogicalDecodingMessage, LogicalMessage, OldTuple, Origin, Prepare, Relation, ReplicaIdentity,
    RollbackPrepared, StreamAbort, StreamAbortInfo, StreamCommit, StreamStart, Truncate, Type,
    Update,
};
use crate::error::DecodeError;
use crate::reader::Reader;
use crate::{Lsn, PgTimestamp, Xid};

#[inline]
fn lsn(r: &mut Reader<'_>) -> Result<Lsn, DecodeError> {
    r.u64().map(Lsn::from_u64)
}

#[inline]
fn ts(r: &mut Reader<'_>) -> Result<PgTimestamp, DecodeError> {
    r.i64().map(PgTimestamp::from_pg_micros)
}

#[inline]
fn stream_xid(r: &mut Reader<'_>, ctx: ParseContext) -> Result<Option<Xid>, DecodeError> {
    if ctx.in_stream {
        r.u32().map(Some)
    } else {
        Ok(None)
    }
}

#[inline]
fn cstr<'a>(r: &mut Reader<'a>) -> Result<Cow<'a, str>, DecodeError> {
    r.cstr().map(Cow::Borrowed)
}

/// The `N` marker before a new tuple.
#[inline]
fn expect_new(r: &mut Reader<'_>) -> Result<(), DecodeError> {
    let at = r.pos();
    match r.u8()? {
        b'N' => Ok(()),
        marker => Err(DecodeError::InvalidTupleMarker { marker, offset: at }),
    }
}

#[inline]
fn old_tuple<'a>(r: &mut Reader<'a>, marker: u8, at: usize) -> Result<OldTuple<'a>, DecodeError> {
    match marker {
        b'K' => Ok(OldTuple::Key(TupleData::parse(r)?)),
        b'O' => Ok(OldTuple::Full(TupleData::parse(r)?)),
        marker => Err(DecodeError::InvalidTupleMarker { marker, offset: at }),
    }
}

impl<'a> LogicalMessage<'a> {
    /// Parses one pgoutput message (the `data` of an XLogData).
    ///
    /// Version-dependent fields are read according to `ctx`, never guessed
    /// from the length; the whole buffer must be consumed.
    // Always inlined: the row-change path is small, and building the message
    // in the caller's frame avoids copying it through a return slot.
    #[inline(always)]
    pub fn parse(buf: &'a [u8], ctx: ParseContext) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let tag = r.u8()?;
        let msg = match tag {
            // The hot path first.
            b'I' => {
                let xid = stream_xid(&mut r, ctx)?;
                let relation = r.u32()?;
                expect_new(&mut r)?;
                let new = TupleData::parse(&mut r)?;
                LogicalMessage::Insert(Insert { xid, relation, new })
            }
            b'U' => {
                let xid = stream_xid(&mut r, ctx)?;
                let relation = r.u32()?;
                let at = r.pos();
                let old = match r.u8()? {
                    b'N' => None,
                    marker => {
                        let old = old_tuple(&mut r, marker, at)?;
                        expect_new(&mut r)?;
                        Some(old)
                    }
                };
                let new = TupleData::parse(&mut r)?;
                LogicalMessage::Update(Update {
                    xid,
                    relation,
                    old,
                    new,
                })
            }
            b'D' => {
                let xid = stream_xid(&mut r, ctx)?;
                let relation = r.u32()?;
                let at = r.pos();
                let marker = r.u8()?;
                let old = old_tuple(&mut r, marker, at)?;
                LogicalMessage::Delete(Delete { xid, relation, old })
            }
            _ => Self::parse_other(tag, &mut r, ctx)?,
        };
        r.finish()?;
        Ok(msg)
    }

    #[inline(never)]
    fn parse_other(tag: u8, r: &mut Reader<'a>, ctx: ParseContext) -> Result<Self, DecodeError> {
        match since_version(tag) {
            None => return Err(DecodeError::UnknownTag { tag, offset: 0 }),
            Some(v) if v > ctx.version.get() => {
                return Err(DecodeError::NotInProtocolVersion {
                    tag,
                    version: ctx.version.get(),
                    offset: 0,
                })
            }
            Some(_) => {}
        }
        Ok(match tag {
            b'B' => LogicalMessage::Begin(Begin {
                final_lsn: lsn(r)?,
                commit_time: ts(r)?,
                xid: r.u32()?,
            }),
            b'M' => {
                let xid = stream_xid(r, ctx)?;
                let flags = r.u8()?;
                let lsn = lsn(r)?;
                let prefix = cstr(r)?;
                let len = r.len32()?;
                let content = Cow::Borrowed(r.bytes(len)?);
                LogicalMessage::Message(LogicalDecodingMessage {
                    xid,
                    transactional: flags & 1 != 0,
                    lsn,
                    prefix,
                    content,
                })
            }
            b'C' => LogicalMessage::Commit(Commit {
                flags: r.u8()?,
                commit_lsn: lsn(r)?,
                end_lsn: lsn(r)?,
                commit_time: ts(r)?,
            }),
            b'O' => LogicalMessage::Origin(Origin {
                commit_lsn: lsn(r)?,
                name: cstr(r)?,
            }),
            b'R' => {
                let xid = stream_xid(r, ctx)?;
                let oid = r.u32()?;
                let namespace = cstr(r)?;
                let name = cstr(r)?;
                let replica_identity = ReplicaIdentity::from_byte(r.u8()?);
                let n = r.count16()?;
                // Each column takes at least 10 bytes: never reserve more than
                // the buffer could hold.
                let mut columns = Vec::with_capacity(usize::from(n).min(r.remaining() / 10));
                for _ in 0..n {
                    columns.push(Column {
                        flags: r.u8()?,
                        name: cstr(r)?,
                        type_oid: r.u32()?,
                        type_modifier: r.i32()?,
                    });
                }
                LogicalMessage::Relation(Relation {
                    xid,
                    oid,
                    namespace,
                    name,
                    replica_identity,
                    columns,
                })
            }
            b'Y' => LogicalMessage::Type(Type {
                xid: stream_xid(r, ctx)?,
                oid: r.u32()?,
                namespace: cstr(r)?,
                name: cstr(r)?,
            }),
            b'T' => {
                let xid = stream_xid(r, ctx)?;
                let n = r.len32()?;
                let options = r.u8()?;
                let mut relations = Vec::with_capacity(n.min(r.remaining() / 4));
                for _ in 0..n {
                    relations.push(r.u32()?);
                }
                LogicalMessage::Truncate(Truncate {
                    xid,
                    options,
                    relations,
                })
            }
            b'S' => LogicalMessage::StreamStart(StreamStart {
                xid: r.u32()?,
                first_segment: r.u8()? != 0,
            }),
            b'E' => LogicalMessage::StreamStop,
            b'c' => LogicalMessage::StreamCommit(StreamCommit {
                xid: r.u32()?,
                flags: r.u8()?,
                commit_lsn: lsn(r)?,
                end_lsn: lsn(r)?,
                commit_time: ts(r)?,
            }),
            b'A' => {
                let xid = r.u32()?;
                let subxid = r.u32()?;
                let abort_info = if ctx.stream_abort_has_info() {
                    Some(StreamAbortInfo {
                        abort_lsn: lsn(r)?,
                        abort_time: ts(r)?,
                    })
                } else {
                    None
                };
                LogicalMessage::StreamAbort(StreamAbort {
                    xid,
                    subxid,
                    abort_info,
                })
            }
            b'b' => LogicalMessage::BeginPrepare(BeginPrepare {
                prepare_lsn: lsn(r)?,
                end_lsn: lsn(r)?,
                prepare_time: ts(r)?,
                xid: r.u32()?,
                gid: cstr(r)?,
            }),
            b'P' => LogicalMessage::Prepare(parse_prepare(r)?),
            b'p' => LogicalMessage::StreamPrepare(parse_prepare(r)?),
            b'K' => LogicalMessage::CommitPrepared(CommitPrepared {
                flags: r.u8()?,
                commit_lsn: lsn(r)?,
                end_lsn: lsn(r)?,
                commit_time: ts(r)?,
                xid: r.u32()?,
                gid: cstr(r)?,
            }),
            b'r' => LogicalMessage::RollbackPrepared(RollbackPrepared {
                flags: r.u8()?,
                prepare_end_lsn: lsn(r)?,
                rollback_end_lsn: lsn(r)?,
                prepare_time: ts(r)?,
                rollback_time: ts(r)?,
                xid: r.u32()?,
                gid: cstr(r)?,
            }),
            // `since_version` knows exactly the tags above plus I/U/D, which
            // `parse` handled.
            tag => return Err(DecodeError::UnknownTag { tag, offset: 0 }),
        })
    }
}

fn parse_prepare<'a>(r: &mut Reader<'a>) -> Result<Prepare<'a>, DecodeError> {
    Ok(Prepare {
        flags: r.u8()?,
        prepare_lsn: lsn(r)?,
        end_lsn: lsn(r)?,
        prepare_time: ts(r)?,
        xid: r.u32()?,
        gid: cstr(r)?,
    })
}
