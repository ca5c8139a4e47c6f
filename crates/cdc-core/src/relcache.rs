//! [`RelationCache`]: the schemas announced by Relation and Type messages.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::pgoutput::{LogicalMessage, Relation, Type};
use crate::Oid;

/// A fast hasher for oid keys: every row change looks its relation up, and
/// SipHash would be a noticeable part of that path. Oids come from the server
/// the client chose to trust, so flooding resistance is not needed.
#[derive(Debug, Default, Clone, Copy)]
struct OidHasher(u64);

impl Hasher for OidHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        // Fibonacci hashing; hashbrown takes bucket bits from the low end and
        // tag bits from the high end, so fold the high half down as well.
        let h = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 32);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

type OidMap<V> = HashMap<Oid, V, BuildHasherDefault<OidHasher>>;

/// Relation and type metadata by oid, kept up to date from Relation (`R`) and
/// Type (`Y`) messages.
///
/// pgoutput sends a Relation before the first change to a relation in a
/// session and again whenever its definition changes, so changes are decoded
/// against the latest entry. Relations are held in [`Arc`]s: a change can keep
/// the schema it was decoded with even after the entry is replaced.
#[derive(Debug, Default, Clone)]
pub struct RelationCache {
    relations: OidMap<Arc<Relation<'static>>>,
    types: OidMap<Type<'static>>,
}

impl RelationCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a Relation or Type message; returns whether `msg` was one.
    pub fn apply(&mut self, msg: &LogicalMessage<'_>) -> bool {
        match msg {
            LogicalMessage::Relation(r) => {
                self.insert_relation(r.clone());
                true
            }
            LogicalMessage::Type(t) => {
                self.insert_type(t.clone());
                true
            }
            _ => false,
        }
    }

    /// Stores (or replaces) a relation, without its streaming xid.
    pub fn insert_relation(&mut self, relation: Relation<'_>) -> Arc<Relation<'static>> {
        let mut owned = relation.into_owned();
        owned.xid = None;
        let owned = Arc::new(owned);
        self.relations.insert(owned.oid, Arc::clone(&owned));
        owned
    }

    /// Stores (or replaces) a type, without its streaming xid.
    pub fn insert_type(&mut self, ty: Type<'_>) {
        let mut owned = ty.into_owned();
        owned.xid = None;
        self.types.insert(owned.oid, owned);
    }

    /// The relation with this oid.
    #[inline]
    pub fn relation(&self, oid: Oid) -> Option<&Arc<Relation<'static>>> {
        self.relations.get(&oid)
    }

    /// The type with this oid (only non-built-in types are announced).
    #[inline]
    pub fn type_info(&self, oid: Oid) -> Option<&Type<'static>> {
        self.types.get(&oid)
    }

    /// All known relations, in no particular order.
    pub fn relations(&self) -> impl Iterator<Item = &Arc<Relation<'static>>> {
        self.relations.values()
    }

    /// The number of known relations.
    pub fn relation_count(&self) -> usize {
        self.relations.len()
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.relations.clear();
        self.types.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgoutput::{Column, ReplicaIdentity};

    fn rel(oid: Oid, name: &str, cols: &[&str]) -> Relation<'static> {
        Relation {
            xid: Some(9),
            oid,
            namespace: "public".into(),
            name: name.to_owned().into(),
            replica_identity: ReplicaIdentity::Full,
            columns: cols
                .iter()
                .map(|c| Column {
                    flags: 0,
                    name: (*c).to_owned().into(),
                    type_oid: 25,
                    type_modifier: -1,
                })
                .collect(),
        }
    }

    #[test]
    fn relations_are_replaced_and_old_arcs_survive() {
        let mut cache = RelationCache::new();
        assert!(cache.relation(1).is_none());
        assert!(cache.apply(&LogicalMessage::Relation(rel(1, "t", &["a"]))));
        let first = Arc::clone(cache.relation(1).unwrap());
        assert_eq!(
            first.xid, None,
            "the streaming xid is not part of the schema"
        );
        cache.apply(&LogicalMessage::Relation(rel(1, "t", &["a", "b"])));
        assert_eq!(cache.relation(1).unwrap().columns.len(), 2);
        assert_eq!(first.columns.len(), 1);
        cache.apply(&LogicalMessage::Relation(rel(2, "u", &[])));
        assert_eq!(cache.relation_count(), 2);
        assert!(!cache.apply(&LogicalMessage::StreamStop));
        cache.clear();
        assert_eq!(cache.relation_count(), 0);
    }

    #[test]
    fn types_are_cached() {
        let mut cache = RelationCache::new();
        cache.apply(&LogicalMessage::Type(Type {
            xid: None,
            oid: 90_000,
            namespace: "public".into(),
            name: "mood".into(),
        }));
        assert_eq!(cache.type_info(90_000).map(|t| &*t.name), Some("mood"));
        assert!(cache.type_info(90_001).is_none());
    }
}
