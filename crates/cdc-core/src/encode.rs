//! Test-only encoders (feature `test-util`): write messages exactly as a
//! PostgreSQL server would, for tests, benches and fuzz seeds.
//!
//! Optional fields are written iff they are `Some`: a message with
//! `xid: Some(_)` is encoded as inside a stream block, a Stream Abort with
//! `abort_info: Some(_)` as with parallel streaming. Strings must not contain
//! NUL bytes (the server's never do).

use crate::pgoutput::write::{self, cstr, lsn, u32, xid};
use crate::pgoutput::LogicalMessage;
use crate::replication::{PrimaryKeepalive, XLogData};
use crate::PgTimestamp;

fn ts(out: &mut Vec<u8>, v: PgTimestamp) {
    out.extend_from_slice(&v.as_pg_micros().to_be_bytes());
}

/// Appends the pgoutput encoding of `msg` to `out`.
pub fn encode_message(msg: &LogicalMessage<'_>, out: &mut Vec<u8>) {
    out.push(msg.tag());
    match msg {
        LogicalMessage::Begin(m) => {
            lsn(out, m.final_lsn);
            ts(out, m.commit_time);
            u32(out, m.xid);
        }
        LogicalMessage::Message(m) => write::message(out, m),
        LogicalMessage::Commit(m) => {
            out.push(m.flags);
            lsn(out, m.commit_lsn);
            lsn(out, m.end_lsn);
            ts(out, m.commit_time);
        }
        LogicalMessage::Origin(m) => {
            lsn(out, m.commit_lsn);
            cstr(out, &m.name);
        }
        LogicalMessage::Relation(m) => {
            xid(out, m.xid);
            u32(out, m.oid);
            cstr(out, &m.namespace);
            cstr(out, &m.name);
            out.push(m.replica_identity.as_byte());
            out.extend_from_slice(&(m.columns.len() as u16).to_be_bytes());
            for c in &m.columns {
                out.push(c.flags);
                cstr(out, &c.name);
                u32(out, c.type_oid);
                out.extend_from_slice(&c.type_modifier.to_be_bytes());
            }
        }
        LogicalMessage::Type(m) => {
            xid(out, m.xid);
            u32(out, m.oid);
            cstr(out, &m.namespace);
            cstr(out, &m.name);
        }
        LogicalMessage::Insert(m) => write::insert(out, m),
        LogicalMessage::Update(m) => write::update(out, m),
        LogicalMessage::Delete(m) => write::delete(out, m),
        LogicalMessage::Truncate(m) => write::truncate(out, m),
        LogicalMessage::StreamStart(m) => {
            u32(out, m.xid);
            out.push(u8::from(m.first_segment));
        }
        LogicalMessage::StreamStop => {}
        LogicalMessage::StreamCommit(m) => {
            u32(out, m.xid);
            out.push(m.flags);
            lsn(out, m.commit_lsn);
            lsn(out, m.end_lsn);
            ts(out, m.commit_time);
        }
        LogicalMessage::StreamAbort(m) => {
            u32(out, m.xid);
            u32(out, m.subxid);
            if let Some(info) = m.abort_info {
                lsn(out, info.abort_lsn);
                ts(out, info.abort_time);
            }
        }
        LogicalMessage::BeginPrepare(m) => {
            lsn(out, m.prepare_lsn);
            lsn(out, m.end_lsn);
            ts(out, m.prepare_time);
            u32(out, m.xid);
            cstr(out, &m.gid);
        }
        LogicalMessage::Prepare(m) | LogicalMessage::StreamPrepare(m) => {
            out.push(m.flags);
            lsn(out, m.prepare_lsn);
            lsn(out, m.end_lsn);
            ts(out, m.prepare_time);
            u32(out, m.xid);
            cstr(out, &m.gid);
        }
        LogicalMessage::CommitPrepared(m) => {
            out.push(m.flags);
            lsn(out, m.commit_lsn);
            lsn(out, m.end_lsn);
            ts(out, m.commit_time);
            u32(out, m.xid);
            cstr(out, &m.gid);
        }
        LogicalMessage::RollbackPrepared(m) => {
            out.push(m.flags);
            lsn(out, m.prepare_end_lsn);
            lsn(out, m.rollback_end_lsn);
            ts(out, m.prepare_time);
            ts(out, m.rollback_time);
            u32(out, m.xid);
            cstr(out, &m.gid);
        }
    }
}

/// The pgoutput encoding of `msg`.
pub fn message_bytes(msg: &LogicalMessage<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_message(msg, &mut out);
    out
}

/// Appends an XLogData (`w`) CopyData payload.
pub fn encode_xlog_data(msg: &XLogData<'_>, out: &mut Vec<u8>) {
    out.push(b'w');
    lsn(out, msg.wal_start);
    lsn(out, msg.wal_end);
    ts(out, msg.send_time);
    out.extend_from_slice(msg.data);
}

/// Appends a primary keepalive (`k`) CopyData payload.
pub fn encode_keepalive(msg: &PrimaryKeepalive, out: &mut Vec<u8>) {
    out.push(b'k');
    lsn(out, msg.wal_end);
    ts(out, msg.send_time);
    out.push(u8::from(msg.reply_requested));
}
