//! What the client learns once per launched function handle, cached for the process: its
//! parameter layout, handle kind, threads-per-block limit, compiled-in cluster shape and name.
//! The interposer discovers it from the driver ([`Functions::get`]'s `discover`); the cache is
//! here so that every interposer keeps the same fast path.
//!
//! A handle stays one function while its module is loaded; the interposer calls
//! [`Functions::invalidate`] when a module, library or context is unloaded or destroyed, so a
//! handle value the driver reuses afterwards is discovered anew.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use smallvec::SmallVec;
use vitamin_hal::{Dim3, FunctionKind, ParamLayout};

/// What one function handle is.
#[derive(Debug)]
pub struct FunctionInfo {
    /// What kind of handle the application launched with.
    pub kind: FunctionKind,
    /// Parameter layout, `None` when the driver did not give one (its launches take the native
    /// path).
    pub layout: Option<Arc<[ParamLayout]>>,
    /// The function's threads-per-block limit, `None` if unknown.
    pub max_threads_per_block: Option<u32>,
    /// Cluster dimensions compiled into the function: its launches are cluster launches even
    /// without a cluster attribute.
    pub required_cluster: Option<Dim3>,
    /// The kernel's (mangled) name, kept for the process (one per distinct handle, like the
    /// info itself): descriptors then copy it without a reference count (see
    /// `FunctionRef::with_static_name`).
    pub name: &'static str,
    /// Whether the kernel spins on peers ([`super::capture::spins_on_peers`] of its name): its
    /// launches need their whole grid resident at once.
    pub spins_on_peers: bool,
    /// The occupancy of the shape this function was last launched with.
    pub occupancy: OccupancyMemo,
}

/// The driver's occupancy answer (blocks one unit holds at once) for the launch shape a function
/// was last launched with, in one atomic word: a launch that repeats its function's shape (most
/// do) reads no lock and makes no driver call. Another shape asks again and replaces it.
///
/// Word: bit 63 set = filled; bits 62..52 threads per block; bits 51..30 dynamic shared memory
/// bytes; bit 16 = the driver answered; bits 15..0 its answer. Shapes beyond those widths (more
/// than 2,047 threads or 4 MiB of shared memory, which no device allows) are asked every time.
/// The answer is scheduling information only (the size model's wave count): a carveout the
/// application changes later with `cuFuncSetAttribute`, which is not hooked, is not seen.
#[derive(Debug, Default)]
pub struct OccupancyMemo(AtomicU64);

const FILLED: u64 = 1 << 63;
const ANSWERED: u64 = 1 << 16;

impl OccupancyMemo {
    fn tag(threads: u32, smem: u32) -> Option<u64> {
        (threads < 1 << 11 && smem < 1 << 22).then(|| FILLED | u64::from(threads) << 52 | u64::from(smem) << 30)
    }

    /// Blocks of this function with `threads` threads and `smem` dynamic shared bytes one unit
    /// holds at once: the memo's answer when the shape is the last one asked, else `ask()`'s
    /// (the driver's occupancy query; `None`: it could not say), which is then kept.
    pub fn get(&self, threads: u32, smem: u32, ask: impl FnOnce() -> Option<u32>) -> Option<u32> {
        let Some(tag) = Self::tag(threads, smem) else { return ask() };
        let w = self.0.load(Ordering::Relaxed);
        if w & !(ANSWERED | 0xffff) == tag {
            return (w & ANSWERED != 0).then_some((w & 0xffff) as u32);
        }
        let n = ask();
        let answer = n.map_or(0, |n| ANSWERED | u64::from(n.min(0xffff)));
        self.0.store(tag | answer, Ordering::Relaxed);
        n.map(|n| n.min(0xffff))
    }
}

/// Per-handle cache, with a small per-thread cache in front of it: a launch looks its handle up
/// without the shared lock (whose counter every launching thread would write) or hashing.
#[derive(Debug)]
pub struct Functions {
    known: RwLock<HashMap<usize, Arc<FunctionInfo>>>,
    /// Distinguishes this cache's entries in the per-thread caches; a new value at each
    /// [`invalidate`](Functions::invalidate), so entries cached before it never match again.
    id: AtomicU64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Default for Functions {
    fn default() -> Self {
        Functions { known: RwLock::default(), id: AtomicU64::new(NEXT_ID.fetch_add(1, Ordering::Relaxed)) }
    }
}

thread_local! {
    /// Handles this thread looked up most recently, keyed by the [`Functions`] id and handle.
    static RECENT_FUNCTIONS: super::recent::Recent<(u64, usize), Arc<FunctionInfo>> = RefCell::new(SmallVec::new());
}

impl Functions {
    /// The info of handle `f`, discovering it with `discover` on first use: from this thread's
    /// recent handles when it is one of them, else from the shared cache (then kept among the
    /// recent ones).
    pub fn get(&self, f: usize, discover: impl FnOnce() -> FunctionInfo) -> Arc<FunctionInfo> {
        let id = self.id.load(Ordering::Acquire);
        super::recent::get_or_make(&RECENT_FUNCTIONS, (id, f), || self.get_shared(f, discover))
    }

    /// Forgets every handle (a module, library or context was unloaded or destroyed: the driver
    /// may hand the same handle values to other functions), in this cache and every thread's.
    pub fn invalidate(&self) {
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        self.id.store(NEXT_ID.fetch_add(1, Ordering::Relaxed), Ordering::Release);
        known.clear();
    }

    fn get_shared(&self, f: usize, discover: impl FnOnce() -> FunctionInfo) -> Arc<FunctionInfo> {
        if let Some(i) = self.known.read().unwrap_or_else(|e| e.into_inner()).get(&f) {
            return i.clone();
        }
        let info = Arc::new(discover());
        self.known.write().unwrap_or_else(|e| e.into_inner()).entry(f).or_insert(info).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &'static str) -> FunctionInfo {
        FunctionInfo {
            kind: FunctionKind::Function,
            layout: Some(Arc::from(vec![ParamLayout { offset: 0, size: 8 }])),
            max_threads_per_block: Some(1024),
            required_cluster: None,
            name,
            spins_on_peers: false,
            occupancy: OccupancyMemo::default(),
        }
    }

    #[test]
    fn the_occupancy_of_the_last_shape_is_asked_once() {
        let memo = OccupancyMemo::default();
        let asked = AtomicU64::new(0);
        let ask = |n: Option<u32>| {
            asked.fetch_add(1, Ordering::Relaxed);
            n
        };
        assert_eq!(memo.get(256, 0, || ask(Some(8))), Some(8));
        assert_eq!(memo.get(256, 0, || unreachable!("memoized")), Some(8));
        assert_eq!(memo.get(256, 48 * 1024, || ask(Some(2))), Some(2), "another shape is asked");
        assert_eq!(memo.get(256, 0, || ask(Some(8))), Some(8), "and replaces the first");
        assert_eq!(asked.load(Ordering::Relaxed), 3);
        // An unanswered query is remembered as unknown too; a zero answer is an answer.
        assert_eq!(memo.get(1024, 0, || ask(None)), None);
        assert_eq!(memo.get(1024, 0, || unreachable!("memoized")), None);
        assert_eq!(memo.get(1024, 200 * 1024, || ask(Some(0))), Some(0));
        assert_eq!(memo.get(1024, 200 * 1024, || unreachable!("memoized")), Some(0));
        // Shapes beyond the word's fields are asked every time.
        assert_eq!(memo.get(4096, 0, || ask(Some(1))), Some(1));
        assert_eq!(memo.get(4096, 0, || ask(Some(1))), Some(1));
        assert_eq!(asked.load(Ordering::Relaxed), 7);
    }

    #[test]
    fn a_handle_is_discovered_once_per_cache_whatever_the_thread() {
        let functions = Functions::default();
        let discovered = AtomicU64::new(0);
        let discover = || {
            discovered.fetch_add(1, Ordering::Relaxed);
            info("k")
        };
        let a = functions.get(0x10, discover);
        let again = functions.get(0x10, || unreachable!("cached"));
        assert!(Arc::ptr_eq(&a, &again));
        std::thread::scope(|s| {
            s.spawn(|| {
                let there = functions.get(0x10, || unreachable!("in the shared cache"));
                assert!(Arc::ptr_eq(&a, &there));
            });
        });
        assert_eq!(discovered.load(Ordering::Relaxed), 1);
        // After an unload the same handle is discovered anew, on this thread and on others.
        functions.invalidate();
        assert_eq!(functions.get(0x10, || info("reloaded")).name, "reloaded");
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(functions.get(0x10, || unreachable!("shared again")).name, "reloaded"));
        });
        // Another cache (another process state) discovers for itself.
        let other = Functions::default();
        assert_eq!(other.get(0x10, || info("other")).name, "other");
    }
}
