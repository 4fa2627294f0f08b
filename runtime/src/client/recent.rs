//! A per-thread cache of the few values a thread looked up most recently (launch-first probes,
//! function info): a hit reads no shared lock or table, which every launching thread would
//! otherwise write. Hand-written rather than an LRU crate: eight entries scanned linearly in a
//! `SmallVec`, oldest dropped first, hits not reordered (a thread repeats a few keys).

use std::cell::RefCell;
use std::thread::LocalKey;

use smallvec::SmallVec;

/// Entries a cache keeps.
pub const ENTRIES: usize = 8;

/// One thread's cache, oldest entry first (declare it in a `thread_local!`).
pub type Recent<K, V> = RefCell<SmallVec<[(K, V); ENTRIES]>>;

/// The value of `key` from this thread's `cache`, or `make()`'s, which is then kept (dropping the
/// oldest entry of a full cache). `make` runs outside any borrow of the cache; a thread whose
/// thread-locals are gone (exiting) or that re-enters gets `make()`'s value uncached.
pub fn get_or_make<K: PartialEq + Copy + 'static, V: Clone + 'static>(
    cache: &'static LocalKey<Recent<K, V>>,
    key: K,
    make: impl FnOnce() -> V,
) -> V {
    let hit = cache.try_with(|c| {
        let entries = c.try_borrow().ok()?;
        entries.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| v.clone())
    });
    if let Ok(Some(v)) = hit {
        return v;
    }
    let v = make();
    let _ = cache.try_with(|c| {
        if let Ok(mut entries) = c.try_borrow_mut() {
            if entries.len() == ENTRIES {
                entries.remove(0);
            }
            entries.push((key, v.clone()));
        }
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static CACHE: Recent<u32, u32> = RefCell::new(SmallVec::new());
    }

    #[test]
    fn hits_keep_their_value_and_the_oldest_entry_goes_first() {
        let mut made = 0;
        let mut get = |k: u32| {
            get_or_make(&CACHE, k, || {
                made += 1;
                k * 10 + made
            })
        };
        assert_eq!(get(1), 11);
        assert_eq!(get(1), 11, "a hit returns the kept value");
        for k in 2..=ENTRIES as u32 {
            get(k);
        }
        assert_eq!(get(1), 11, "a full cache still holds its oldest entry");
        get(100);
        assert_eq!(get(1), 10 + ENTRIES as u32 + 2, "one more key pushed the oldest out");
    }
}
