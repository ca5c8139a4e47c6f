//! Group keys interned as small ids, so each remembered row names its group
//! in 4 bytes.

use std::collections::HashMap;

use super::GroupKey;

/// Ids of the group keys in use. An id is released when its group empties
/// (at commit or abort, when no row can refer to it any more) and reused.
#[derive(Debug, Clone, Default)]
pub(crate) struct GroupIds {
    ids: HashMap<GroupKey, u32>,
    keys: Vec<Option<GroupKey>>,
    free: Vec<u32>,
}

impl GroupIds {
    /// Ids `0..n` for `keys`, in order.
    pub(crate) fn from_keys(keys: Vec<GroupKey>) -> Option<GroupIds> {
        let mut ids = HashMap::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            ids.insert(k.clone(), u32::try_from(i).ok()?);
        }
        Some(GroupIds {
            ids,
            keys: keys.into_iter().map(Some).collect(),
            free: Vec::new(),
        })
    }

    /// The id of `key`, allocated if new; `None` once 2³² ids are in use.
    pub(crate) fn intern(&mut self, key: GroupKey) -> Option<u32> {
        if let Some(&id) = self.ids.get(&key) {
            return Some(id);
        }
        let id = match self.free.pop() {
            Some(id) => {
                *self.keys.get_mut(id as usize)? = Some(key.clone());
                id
            }
            None => {
                let id = u32::try_from(self.keys.len()).ok()?;
                self.keys.push(Some(key.clone()));
                id
            }
        };
        self.ids.insert(key, id);
        Some(id)
    }

    /// The id of `key`, if interned.
    pub(crate) fn id(&self, key: &GroupKey) -> Option<u32> {
        self.ids.get(key).copied()
    }

    /// The key of `id`, if in use.
    pub(crate) fn key(&self, id: u32) -> Option<&GroupKey> {
        self.keys.get(id as usize)?.as_ref()
    }

    /// One more than the largest id in use (a bound for tables by id).
    pub(crate) fn bound(&self) -> usize {
        self.keys.len()
    }

    /// Frees the id of `key` (no-op if not interned). The caller makes sure
    /// no row refers to it.
    pub(crate) fn release(&mut self, key: &GroupKey) {
        if let Some(id) = self.ids.remove(key) {
            if let Some(slot) = self.keys.get_mut(id as usize) {
                *slot = None;
                self.free.push(id);
            }
        }
    }

    /// Ids in use.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_reused_after_release() {
        let mut g = GroupIds::default();
        let a = g.intern(Some("a".into())).unwrap();
        let n = g.intern(None).unwrap();
        assert_eq!(g.intern(Some("a".into())), Some(a));
        assert_ne!(a, n);
        assert_eq!(g.key(n), Some(&None));
        g.release(&Some("a".into()));
        g.release(&Some("a".into()));
        assert_eq!(g.key(a), None);
        assert_eq!(g.id(&Some("a".into())), None);
        assert_eq!(
            g.intern(Some("b".into())),
            Some(a),
            "the freed id is reused"
        );
        assert_eq!(g.len(), 2);
        assert_eq!(g.bound(), 2);
    }
}
