//! [`UnitSet`]: a fixed-size bitset of execution units (SMs or CUs), at most [`MAX_UNITS`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// The largest unit index + 1 a [`UnitSet`] can hold (the largest simulated preset has 304 units; 512 leaves headroom).
pub const MAX_UNITS: usize = 512;
const WORDS: usize = MAX_UNITS / 64;

/// A set of execution units (the backend's execution units) as a 512-bit bitset.
///
/// Copyable and allocation-free: set algebra is a handful of word operations, so conflict tests
/// between pool nodes cost a few nanoseconds.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct UnitSet {
    words: [u64; WORDS],
}

impl UnitSet {
    /// The empty set.
    pub const EMPTY: UnitSet = UnitSet { words: [0; WORDS] };

    /// The empty set.
    pub const fn new() -> Self {
        Self::EMPTY
    }

    /// Units `0..n`.
    ///
    /// # Panics
    /// If `n > MAX_UNITS`.
    pub fn first_n(n: usize) -> Self {
        Self::range(0, n)
    }

    /// Units `start..end`.
    ///
    /// # Panics
    /// If `end > MAX_UNITS` or `start > end`.
    pub fn range(start: usize, end: usize) -> Self {
        assert!(start <= end && end <= MAX_UNITS, "unit range {start}..{end} out of 0..{MAX_UNITS}");
        let mut s = Self::EMPTY;
        for u in start..end {
            s.insert(u);
        }
        s
    }

    /// Adds unit `u`; returns whether it was absent.
    ///
    /// # Panics
    /// If `u >= MAX_UNITS`.
    pub fn insert(&mut self, u: usize) -> bool {
        assert!(u < MAX_UNITS, "unit {u} out of range 0..{MAX_UNITS}");
        let (w, b) = (u / 64, u % 64);
        let absent = self.words[w] & (1 << b) == 0;
        self.words[w] |= 1 << b;
        absent
    }

    /// Removes unit `u`; returns whether it was present. Out-of-range units are simply absent.
    pub fn remove(&mut self, u: usize) -> bool {
        if u >= MAX_UNITS {
            return false;
        }
        let (w, b) = (u / 64, u % 64);
        let present = self.words[w] & (1 << b) != 0;
        self.words[w] &= !(1 << b);
        present
    }

    /// Whether unit `u` is in the set.
    pub fn contains(&self, u: usize) -> bool {
        u < MAX_UNITS && self.words[u / 64] & (1 << (u % 64)) != 0
    }

    /// Number of units.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Set union.
    #[must_use]
    pub fn union(&self, other: &UnitSet) -> UnitSet {
        self.zip(other, |a, b| a | b)
    }

    /// Set intersection.
    #[must_use]
    pub fn intersection(&self, other: &UnitSet) -> UnitSet {
        self.zip(other, |a, b| a & b)
    }

    /// Units in `self` but not in `other`.
    #[must_use]
    pub fn difference(&self, other: &UnitSet) -> UnitSet {
        self.zip(other, |a, b| a & !b)
    }

    /// Units in exactly one of the two sets.
    #[must_use]
    pub fn symmetric_difference(&self, other: &UnitSet) -> UnitSet {
        self.zip(other, |a, b| a ^ b)
    }

    /// Whether the sets share a unit (the pool's conflict rule).
    pub fn intersects(&self, other: &UnitSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }

    /// Whether the sets share no unit.
    pub fn is_disjoint(&self, other: &UnitSet) -> bool {
        !self.intersects(other)
    }

    /// Whether every unit of `self` is in `other`.
    pub fn is_subset(&self, other: &UnitSet) -> bool {
        self.words.iter().zip(&other.words).all(|(a, b)| a & !b == 0)
    }

    /// Lowest unit, if any.
    pub fn first(&self) -> Option<usize> {
        self.iter().next()
    }

    /// Highest unit, if any.
    pub fn last(&self) -> Option<usize> {
        self.words
            .iter()
            .enumerate()
            .rev()
            .find(|(_, &w)| w != 0)
            .map(|(i, w)| i * 64 + 63 - w.leading_zeros() as usize)
    }

    /// Units in increasing order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { set: self, word: 0, bits: self.words[0] }
    }

    /// Compact display with the unit's name as a prefix ([`crate::Topology::unit_name`]):
    /// `SM 0-7,16-23`.
    pub fn display<'a>(&'a self, unit_name: &'a str) -> impl fmt::Display + 'a {
        Labelled { set: self, unit_name }
    }

    fn zip(&self, other: &UnitSet, f: impl Fn(u64, u64) -> u64) -> UnitSet {
        let mut words = [0; WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            *w = f(self.words[i], other.words[i]);
        }
        UnitSet { words }
    }

    /// Maximal runs of consecutive units as inclusive `(first, last)` pairs.
    pub fn runs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut it = self.iter().peekable();
        std::iter::from_fn(move || {
            let start = it.next()?;
            let mut end = start;
            while it.peek() == Some(&(end + 1)) {
                end += 1;
                it.next();
            }
            Some((start, end))
        })
    }
}

impl std::ops::BitOr for UnitSet {
    type Output = UnitSet;
    fn bitor(self, rhs: UnitSet) -> UnitSet {
        self.union(&rhs)
    }
}

impl std::ops::BitAnd for UnitSet {
    type Output = UnitSet;
    fn bitand(self, rhs: UnitSet) -> UnitSet {
        self.intersection(&rhs)
    }
}

impl std::ops::BitOrAssign for UnitSet {
    fn bitor_assign(&mut self, rhs: UnitSet) {
        *self = self.union(&rhs);
    }
}

impl FromIterator<usize> for UnitSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut s = UnitSet::EMPTY;
        for u in iter {
            s.insert(u);
        }
        s
    }
}

impl<'a> IntoIterator for &'a UnitSet {
    type Item = usize;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Iterator over the units of a [`UnitSet`] in increasing order.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    set: &'a UnitSet,
    word: usize,
    bits: u64,
}

impl Iterator for Iter<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        loop {
            if self.bits != 0 {
                let b = self.bits.trailing_zeros() as usize;
                self.bits &= self.bits - 1;
                return Some(self.word * 64 + b);
            }
            self.word += 1;
            if self.word >= WORDS {
                return None;
            }
            self.bits = self.set.words[self.word];
        }
    }
}

impl fmt::Display for UnitSet {
    /// `0-7,16-23`; the empty set prints as `-`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("-");
        }
        for (i, (a, b)) in self.runs().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if a == b {
                write!(f, "{a}")?;
            } else {
                write!(f, "{a}-{b}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for UnitSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UnitSet({self}; {} units)", self.len())
    }
}

struct Labelled<'a> {
    set: &'a UnitSet,
    unit_name: &'a str,
}

impl fmt::Display for Labelled<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.unit_name, self.set)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn arb_set() -> impl Strategy<Value = BTreeSet<usize>> {
        prop::collection::btree_set(0..MAX_UNITS, 0..80)
    }

    fn to_unitset(s: &BTreeSet<usize>) -> UnitSet {
        s.iter().copied().collect()
    }

    proptest! {
        #[test]
        fn algebra_matches_btreeset(a in arb_set(), b in arb_set()) {
            let (ua, ub) = (to_unitset(&a), to_unitset(&b));
            prop_assert_eq!(ua.iter().collect::<BTreeSet<_>>(), a.clone());
            prop_assert_eq!(ua.len(), a.len());
            prop_assert_eq!(ua.is_empty(), a.is_empty());
            prop_assert_eq!(ua.union(&ub).iter().collect::<BTreeSet<_>>(), a.union(&b).copied().collect::<BTreeSet<_>>());
            prop_assert_eq!(ua.intersection(&ub).iter().collect::<BTreeSet<_>>(), a.intersection(&b).copied().collect::<BTreeSet<_>>());
            prop_assert_eq!(ua.difference(&ub).iter().collect::<BTreeSet<_>>(), a.difference(&b).copied().collect::<BTreeSet<_>>());
            prop_assert_eq!(ua.symmetric_difference(&ub).iter().collect::<BTreeSet<_>>(), a.symmetric_difference(&b).copied().collect::<BTreeSet<_>>());
            prop_assert_eq!(ua.intersects(&ub), !a.is_disjoint(&b));
            prop_assert_eq!(ua.is_subset(&ub), a.is_subset(&b));
            prop_assert_eq!(ua.first(), a.first().copied());
            prop_assert_eq!(ua.last(), a.last().copied());
        }

        #[test]
        fn insert_remove_contains(a in arb_set(), u in 0..MAX_UNITS) {
            let mut ua = to_unitset(&a);
            let mut m = a.clone();
            prop_assert_eq!(ua.contains(u), m.contains(&u));
            prop_assert_eq!(ua.insert(u), m.insert(u));
            prop_assert!(ua.contains(u));
            prop_assert_eq!(ua.remove(u), m.remove(&u));
            prop_assert!(!ua.contains(u));
            prop_assert_eq!(ua.iter().collect::<BTreeSet<_>>(), m);
        }

        #[test]
        fn runs_cover_the_set_exactly(a in arb_set()) {
            let ua = to_unitset(&a);
            let mut back = BTreeSet::new();
            let mut prev_end: Option<usize> = None;
            for (s, e) in ua.runs() {
                prop_assert!(s <= e);
                if let Some(p) = prev_end { prop_assert!(s > p + 1, "runs must be maximal"); }
                back.extend(s..=e);
                prev_end = Some(e);
            }
            prop_assert_eq!(back, a);
        }
    }

    #[test]
    fn compact_display() {
        let s = UnitSet::range(0, 8) | UnitSet::range(16, 24);
        assert_eq!(s.display("SM").to_string(), "SM 0-7,16-23");
        assert_eq!(UnitSet::from_iter([3, 5, 6]).to_string(), "3,5-6");
        assert_eq!(UnitSet::EMPTY.display("CU").to_string(), "CU -");
        assert_eq!(UnitSet::first_n(512).to_string(), "0-511");
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn insert_past_capacity_panics() {
        UnitSet::new().insert(MAX_UNITS);
    }
}
