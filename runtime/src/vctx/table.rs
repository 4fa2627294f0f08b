//! The table of live ops, keyed by [`OpId`]: a sliding window indexed by id, plus an overflow
//! map for stragglers.
//!
//! Op ids are issued in increasing order and most ops retire soon after later ones were
//! recorded, so live ids cluster in a window `[base, next)`. Lookups there are an index
//! computation, not a hash. Retired slots at the front are popped; when a long-lived op (say a
//! persistent kernel) holds the front while many later ops retire, the window would fill with
//! empty slots, so once fewer than half of its slots are live the front entries move to the
//! overflow map. Memory is therefore O(live ops) and every operation amortized O(1).

use std::collections::VecDeque;

use super::ids::{IdMap, OpId};

/// Window slots are kept when the window is at most this long, whatever their occupancy.
const MIN_WINDOW: usize = 256;

#[derive(Debug)]
pub(crate) struct Table<V> {
    /// Id of `window[0]`.
    base: u64,
    window: VecDeque<Option<V>>,
    /// Live entries in `window`.
    in_window: usize,
    /// Live entries older than `base`.
    overflow: IdMap<OpId, V>,
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Table { base: 1, window: VecDeque::new(), in_window: 0, overflow: IdMap::default() }
    }
}

impl<V> Table<V> {
    /// Number of live entries.
    pub(crate) fn len(&self) -> usize {
        self.in_window + self.overflow.len()
    }

    /// Inserts the entry of `id`, which must be greater than every id inserted before.
    pub(crate) fn insert(&mut self, id: OpId, value: V) {
        let end = self.base + self.window.len() as u64;
        debug_assert!(id.0 >= end, "ids must be inserted in increasing order");
        if self.window.is_empty() {
            self.base = id.0;
        } else {
            for _ in end..id.0 {
                self.window.push_back(None);
            }
        }
        self.window.push_back(Some(value));
        self.in_window += 1;
    }

    fn slot(&self, id: OpId) -> Option<usize> {
        id.0.checked_sub(self.base).map(|i| i as usize).filter(|i| *i < self.window.len())
    }

    pub(crate) fn contains(&self, id: OpId) -> bool {
        self.get(id).is_some()
    }

    pub(crate) fn get(&self, id: OpId) -> Option<&V> {
        match self.slot(id) {
            Some(i) => self.window[i].as_ref(),
            None if id.0 < self.base => self.overflow.get(&id),
            None => None,
        }
    }

    pub(crate) fn get_mut(&mut self, id: OpId) -> Option<&mut V> {
        match self.slot(id) {
            Some(i) => self.window[i].as_mut(),
            None if id.0 < self.base => self.overflow.get_mut(&id),
            None => None,
        }
    }

    pub(crate) fn remove(&mut self, id: OpId) -> Option<V> {
        let Some(i) = self.slot(id) else {
            return if id.0 < self.base { self.overflow.remove(&id) } else { None };
        };
        let value = self.window[i].take()?;
        self.in_window -= 1;
        self.trim();
        Some(value)
    }

    /// Pops retired slots at the front, and moves live front entries to the overflow map while
    /// the window is long and mostly empty.
    fn trim(&mut self) {
        loop {
            let sparse = self.window.len() > MIN_WINDOW && self.window.len() > 2 * self.in_window;
            match self.window.front_mut() {
                Some(None) => {}
                Some(slot) if sparse => {
                    if let Some(v) = slot.take() {
                        self.overflow.insert(OpId(self.base), v);
                        self.in_window -= 1;
                    }
                }
                _ => return,
            }
            self.window.pop_front();
            self.base += 1;
        }
    }

    /// Visits every live entry (order unspecified; consistency checks in tests).
    #[cfg(test)]
    pub(crate) fn values(&self) -> impl Iterator<Item = (OpId, &V)> {
        let base = self.base;
        self.window
            .iter()
            .enumerate()
            .filter_map(move |(i, v)| v.as_ref().map(|v| (OpId(base + i as u64), v)))
            .chain(self.overflow.iter().map(|(k, v)| (*k, v)))
    }

    #[cfg(test)]
    fn footprint(&self) -> usize {
        self.window.len() + self.overflow.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_straggler_does_not_pin_the_window() {
        let mut t = Table::default();
        t.insert(OpId(1), 1u64);
        for id in 2..100_000 {
            t.insert(OpId(id), id);
            assert_eq!(t.remove(OpId(id)), Some(id));
        }
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(OpId(1)), Some(&1));
        assert!(t.footprint() <= MIN_WINDOW + 2, "footprint {}", t.footprint());
        assert_eq!(t.remove(OpId(1)), Some(1));
        assert_eq!(t.len(), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The table behaves like a map; its footprint stays linear in its size.
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec((any::<bool>(), 0u64..40, 1u64..4), 1..3000)) {
            let mut t = Table::default();
            let mut m = BTreeMap::new();
            let mut next = 1u64;
            for (insert, pick, gap) in ops {
                if insert || m.is_empty() {
                    next += gap - 1;
                    t.insert(OpId(next), next);
                    m.insert(next, next);
                    next += 1;
                } else {
                    // Remove one of the live ids (newest ones more often, as in practice).
                    let keys: Vec<u64> = m.keys().copied().collect();
                    let k = keys[keys.len() - 1 - (pick as usize % keys.len())];
                    prop_assert_eq!(t.remove(OpId(k)), m.remove(&k));
                    prop_assert_eq!(t.remove(OpId(k)), None);
                }
                prop_assert_eq!(t.len(), m.len());
                let probe = pick % next.max(1);
                prop_assert_eq!(t.get(OpId(probe)), m.get(&probe));
                prop_assert!(t.footprint() <= 3 * m.len() + MIN_WINDOW + 3, "footprint {} for {} entries", t.footprint(), m.len());
            }
            let mut seen: Vec<u64> = t.values().map(|(k, v)| { assert_eq!(k.0, *v); k.0 }).collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, m.keys().copied().collect::<Vec<_>>());
        }
    }
}
