//! Writes pgoutput messages back into their wire form, exactly as a server
//! sends them. Used for spilling streamed transactions
//! ([`crate::spill`]) and, under `test-util`, by [`crate::encode`].
//!
//! Optional fields are written iff they are `Some`: a data message with
//! `xid: Some(_)` is written as inside a stream block. Strings must not
//! contain NUL bytes (the server's never do); counts and lengths must fit the
//! protocol's fields (those parsed from a server always do).

use super::message::{Delete, Insert, LogicalDecodingMessage, OldTuple, Truncate, Update};
use super::tuple::TupleData;
use crate::{Lsn, Xid};

#[inline]
pub(crate) fn lsn(out: &mut Vec<u8>, v: Lsn) {
    out.extend_from_slice(&v.as_u64().to_be_bytes());
}

#[inline]
pub(crate) fn u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn cstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

#[inline]
pub(crate) fn xid(out: &mut Vec<u8>, v: Option<Xid>) {
    if let Some(v) = v {
        u32(out, v);
    }
}

#[inline]
fn tuple(out: &mut Vec<u8>, t: &TupleData<'_>) {
    // `TupleData` holds at most i16::MAX columns.
    out.extend_from_slice(&(t.len() as u16).to_be_bytes());
    out.extend_from_slice(t.raw_columns());
}

fn old(out: &mut Vec<u8>, t: &OldTuple<'_>) {
    match t {
        OldTuple::Key(t) => {
            out.push(b'K');
            tuple(out, t);
        }
        OldTuple::Full(t) => {
            out.push(b'O');
            tuple(out, t);
        }
    }
}

/// `I`, after the tag.
pub(crate) fn insert(out: &mut Vec<u8>, m: &Insert<'_>) {
    xid(out, m.xid);
    u32(out, m.relation);
    out.push(b'N');
    tuple(out, &m.new);
}

/// `U`, after the tag.
pub(crate) fn update(out: &mut Vec<u8>, m: &Update<'_>) {
    xid(out, m.xid);
    u32(out, m.relation);
    if let Some(o) = &m.old {
        old(out, o);
    }
    out.push(b'N');
    tuple(out, &m.new);
}

/// `D`, after the tag.
pub(crate) fn delete(out: &mut Vec<u8>, m: &Delete<'_>) {
    xid(out, m.xid);
    u32(out, m.relation);
    old(out, &m.old);
}

/// `T`, after the tag.
pub(crate) fn truncate(out: &mut Vec<u8>, m: &Truncate) {
    xid(out, m.xid);
    u32(out, m.relations.len() as u32);
    out.push(m.options);
    for &oid in &m.relations {
        u32(out, oid);
    }
}

/// `M`, after the tag.
pub(crate) fn message(out: &mut Vec<u8>, m: &LogicalDecodingMessage<'_>) {
    xid(out, m.xid);
    out.push(u8::from(m.transactional));
    lsn(out, m.lsn);
    cstr(out, &m.prefix);
    u32(out, m.content.len() as u32);
    out.extend_from_slice(&m.content);
}
