//! The checkpointed state of a [`KeyedAggregate`](super::KeyedAggregate),
//! format version 2:
//!
//! ```text
//! u64 n, n × str            row key columns (n = 0: no row seen yet)
//! u64 g, g × group          strictly increasing group keys:
//!                             u64 0 (NULL) | u64 1, str key; i64 count > 0; i128 sum
//! u64 r, r × row            in no particular order:
//!                             bytes key (one segment per key column);
//!                             uvarint (group index << 1 | has value);
//!                             [uvarint zigzag(value)]
//! ```
//!
//! Reading checks everything a corrupt or foreign state could get wrong:
//! lengths, canonical row keys, unique rows, group indexes, and that the
//! groups are exactly the sums of their rows.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;

use super::super::wire::{unzigzag, zigzag, Reader, Writer};
use super::groups::GroupIds;
use super::rows::{Row, RowId};
use super::{Committed, Group, GroupKey};

/// Version 1 held group totals only.
pub(super) const V1_REFUSED: &str = "this is a version 1 keyed_aggregate state, which holds only \
     group totals; since version 2 the aggregate remembers each source row's contribution (so \
     a row delivered by both the initial snapshot and the stream counts once) and cannot rebuild \
     that from totals. Start the job from a fresh checkpoint history: stop it, run `pgcdc \
     checkpoints prune --keep 0` (or give the job a new name) and start it again; it takes a new \
     initial snapshot and rebuilds the aggregate";

/// The committed state, in format version 2; `None` if a row refers to a
/// group the aggregate does not hold (an internal inconsistency).
pub(super) fn write(c: &Committed) -> Option<Bytes> {
    let mut w = Writer::with_capacity(64 + c.groups.len() * 48 + c.rows.len() * 16);
    let columns = c.key_columns.as_deref().unwrap_or_default();
    w.u64(columns.len() as u64);
    for name in columns {
        w.str(name);
    }
    // Group index by id.
    let mut index = vec![u32::MAX; c.ids.bound()];
    w.u64(c.groups.len() as u64);
    for (i, (key, g)) in c.groups.iter().enumerate() {
        match key {
            Some(k) => {
                w.u64(1);
                w.str(k);
            }
            None => w.u64(0),
        }
        w.i64(g.count);
        w.i128(g.sum);
        if let Some(id) = c.ids.id(key) {
            *index.get_mut(id as usize)? = u32::try_from(i).ok()?;
        }
    }
    w.u64(c.rows.len() as u64);
    for (id, row) in &c.rows {
        let i = *index
            .get(row.group() as usize)
            .filter(|&&i| i != u32::MAX)?;
        w.bytes(id.as_bytes());
        let value = row.value();
        w.uvarint(u128::from(i) << 1 | u128::from(value.is_some()));
        if let Some(v) = value {
            w.uvarint(zigzag(v));
        }
    }
    Some(w.finish())
}

/// Reads a version 2 state.
pub(super) fn read(bytes: &[u8]) -> Result<Committed, &'static str> {
    const SHORT: &str = "truncated";
    let mut r = Reader::new(bytes);

    let n = r.count(4).map_err(|_| SHORT)?;
    let mut columns = Vec::with_capacity(n);
    let mut seen = HashSet::with_capacity(n);
    for _ in 0..n {
        let name = r.str().map_err(|_| SHORT)?;
        if name.is_empty() || !seen.insert(name) {
            return Err("empty or repeated key column name");
        }
        columns.push(name.to_owned());
    }

    let g = r.count(32).map_err(|_| SHORT)?;
    let mut groups = BTreeMap::new();
    let mut keys: Vec<GroupKey> = Vec::with_capacity(g);
    for _ in 0..g {
        let key = match r.u64().map_err(|_| SHORT)? {
            0 => None,
            1 => Some(r.str().map_err(|_| SHORT)?.to_owned()),
            _ => return Err("bad group key tag"),
        };
        let count = r.i64().map_err(|_| SHORT)?;
        let sum = r.i128().map_err(|_| SHORT)?;
        if count <= 0 {
            return Err("a group without rows");
        }
        if keys.last().is_some_and(|last| *last >= key) {
            return Err("group keys out of order or repeated");
        }
        keys.push(key.clone());
        groups.insert(key, Group { count, sum });
    }

    let n_rows = r.count(4).map_err(|_| SHORT)?;
    if columns.is_empty() && n_rows > 0 {
        return Err("rows without key columns");
    }
    let mut rows = HashMap::with_capacity(n_rows);
    let mut sums = vec![Group::default(); g];
    for _ in 0..n_rows {
        let id = RowId::parse(r.bytes().map_err(|_| SHORT)?, columns.len())
            .ok_or("malformed row key")?;
        let tagged = r.uvarint().map_err(|_| SHORT)?;
        let group = u32::try_from(tagged >> 1)
            .ok()
            .filter(|&i| (i as usize) < g)
            .ok_or("row of an unknown group")?;
        let value = if tagged & 1 == 1 {
            Some(unzigzag(r.uvarint().map_err(|_| SHORT)?))
        } else {
            None
        };
        if rows.insert(id, Row::new(group, value)).is_some() {
            return Err("repeated row key");
        }
        if let Some(s) = sums.get_mut(group as usize) {
            s.add(value);
        }
    }
    r.finish().map_err(|_| "trailing bytes")?;
    if !keys
        .iter()
        .zip(&sums)
        .all(|(k, s)| groups.get(k) == Some(s))
    {
        return Err("group totals differ from their rows");
    }
    Ok(Committed {
        key_columns: (!columns.is_empty()).then_some(columns),
        rows,
        groups,
        ids: GroupIds::from_keys(keys).ok_or("too many groups")?,
    })
}
