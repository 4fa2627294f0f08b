//! Launch census bookkeeping shared by every interposer: named relaxed counters, the lock-free
//! per-configuration launch table and its folding into a per-kernel census. Pure Rust (no FFI);
//! an interposer's hooks feed it and render it with their own per-API counters.
//!
//! Launches are counted in a [`LaunchTable`]: a fixed-size, lock-free open-addressing table keyed
//! by (function handle, grid, block) that lives in the interposer's own static memory, so the
//! per-launch path takes no lock, allocates nothing and writes no cache line shared with the
//! driver's heap objects (a mutex-guarded heap `HashMap` measured 0.3-0.6 us per launch, varying
//! from run to run with the heap layout: docs/results/shim-observe-h200.md). At exit the table is
//! folded into a [`KernelCensus`]; names are attached once per handle and rows are merged by
//! (name, grid, block), so the same kernel loaded in two modules is one row.
//!
//! A launch issued on a stream that is being captured into a graph does not run; it is counted
//! as `captured`, apart from the launches that ran (`launched`). A replay of an instantiated
//! graph is one graph launch, however many kernels it holds.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use serde_json::{json, Value};

/// A named relaxed counter.
#[derive(Debug)]
pub struct Stat(AtomicU64);

impl Stat {
    /// Zero.
    pub const fn new() -> Stat {
        Stat(AtomicU64::new(0))
    }
    /// Adds one.
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// Subtracts one, stopping at zero.
    pub fn drop_one(&self) {
        let _ = self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
    }
    /// Current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    /// Zero again.
    pub fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

impl Default for Stat {
    fn default() -> Self {
        Stat::new()
    }
}

/// Graph launches that ran and that were captured into another graph.
#[derive(Debug, Default)]
pub struct GraphStats {
    /// Replays of instantiated graphs (one per graph launch call).
    pub launched: Stat,
    /// Graph launch calls recorded into a capturing stream.
    pub captured: Stat,
}

impl GraphStats {
    /// All zero.
    pub const fn new() -> GraphStats {
        GraphStats { launched: Stat::new(), captured: Stat::new() }
    }
}

/// Identity of one launch configuration as submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchKey {
    /// Function handle value (as the application launched it).
    pub func: usize,
    /// Grid dimensions in blocks.
    pub grid: [u32; 3],
    /// Block dimensions in threads.
    pub block: [u32; 3],
}

const EMPTY: u32 = 0;
const WRITING: u32 = 1;
const READY: u32 = 2;
/// Probes before a launch is counted as overflow instead.
const MAX_PROBE: usize = 64;
/// Spins waiting for another thread to finish writing a slot's key.
const MAX_SPIN: u32 = 10_000;

/// One slot of a [`LaunchTable`]; a cache line of its own.
#[derive(Debug)]
#[repr(C, align(64))]
struct Slot {
    state: AtomicU32,
    grid: [AtomicU32; 3],
    block: [AtomicU32; 3],
    func: AtomicUsize,
    launched: AtomicU64,
    captured: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicU32::new(EMPTY),
            grid: [const { AtomicU32::new(0) }; 3],
            block: [const { AtomicU32::new(0) }; 3],
            func: AtomicUsize::new(0),
            launched: AtomicU64::new(0),
            captured: AtomicU64::new(0),
        }
    }

    fn key(&self) -> LaunchKey {
        let load = |a: &[AtomicU32; 3]| [0, 1, 2].map(|i| a[i].load(Ordering::Relaxed));
        LaunchKey { func: self.func.load(Ordering::Relaxed), grid: load(&self.grid), block: load(&self.block) }
    }

    fn write_key(&self, key: &LaunchKey) {
        self.func.store(key.func, Ordering::Relaxed);
        for i in 0..3 {
            self.grid[i].store(key.grid[i], Ordering::Relaxed);
            self.block[i].store(key.block[i], Ordering::Relaxed);
        }
    }

    fn count(&self, captured: bool) {
        let c = if captured { &self.captured } else { &self.launched };
        c.fetch_add(1, Ordering::Relaxed);
    }

    fn wait_ready(&self) -> u32 {
        let mut state = self.state.load(Ordering::Acquire);
        let mut spins = 0;
        while state == WRITING && spins < MAX_SPIN {
            std::hint::spin_loop();
            spins += 1;
            state = self.state.load(Ordering::Acquire);
        }
        state
    }

    fn reset(&self) {
        if self.state.load(Ordering::Acquire) == EMPTY {
            return; // never written: leave the page untouched (no copy-on-write after fork)
        }
        self.func.store(0, Ordering::Relaxed);
        for i in 0..3 {
            self.grid[i].store(0, Ordering::Relaxed);
            self.block[i].store(0, Ordering::Relaxed);
        }
        self.launched.store(0, Ordering::Relaxed);
        self.captured.store(0, Ordering::Relaxed);
        self.state.store(EMPTY, Ordering::Release);
    }
}

/// What [`LaunchTable::record`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// First launch of this configuration (a new slot).
    New,
    /// Counted in an existing slot.
    Existing,
    /// No slot within reach: counted in the overflow counter only.
    Overflow,
}

/// Lock-free launch counts keyed by (function, grid, block), `N` slots (a power of two).
///
/// Insertion claims an empty slot with a compare-and-swap (`EMPTY -> WRITING`), writes the key and
/// publishes it (`READY`, release). Lookups probe linearly from the key's hash; a slot another
/// thread is still writing is waited for briefly and otherwise skipped, which can at worst put
/// one configuration into two slots (merged again by [`LaunchTable::snapshot`] consumers). After
/// [`MAX_PROBE`] slots a launch counts as overflow. Readers only ever see `READY` slots.
#[derive(Debug)]
#[repr(align(128))]
pub struct LaunchTable<const N: usize = 4096> {
    slots: [Slot; N],
    overflow_launched: AtomicU64,
    overflow_captured: AtomicU64,
}

impl<const N: usize> LaunchTable<N> {
    /// Empty (const: usable as a `static`).
    pub const fn new() -> Self {
        assert!(N.is_power_of_two(), "LaunchTable size must be a power of two");
        LaunchTable {
            slots: [const { Slot::new() }; N],
            overflow_launched: AtomicU64::new(0),
            overflow_captured: AtomicU64::new(0),
        }
    }

    fn start(key: &LaunchKey) -> usize {
        let mut h = FxHasher::default();
        h.write_u64(key.func as u64);
        h.write_u64(((key.grid[0] as u64) << 32) | key.grid[1] as u64);
        h.write_u64(((key.grid[2] as u64) << 32) | key.block[0] as u64);
        h.write_u64(((key.block[1] as u64) << 32) | key.block[2] as u64);
        (h.finish() >> 32) as usize
    }

    /// Counts one launch.
    pub fn record(&self, key: &LaunchKey, captured: bool) -> Recorded {
        let start = Self::start(key);
        for i in 0..MAX_PROBE.min(N) {
            let slot = &self.slots[(start + i) & (N - 1)];
            let mut state = slot.state.load(Ordering::Acquire);
            if state == EMPTY {
                match slot.state.compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Acquire) {
                    Ok(_) => {
                        slot.write_key(key);
                        slot.count(captured);
                        slot.state.store(READY, Ordering::Release);
                        return Recorded::New;
                    }
                    Err(now) => state = now,
                }
            }
            if state == WRITING {
                state = slot.wait_ready();
            }
            if state == READY && slot.key() == *key {
                slot.count(captured);
                return Recorded::Existing;
            }
        }
        let c = if captured { &self.overflow_captured } else { &self.overflow_launched };
        c.fetch_add(1, Ordering::Relaxed);
        Recorded::Overflow
    }

    /// Every published slot's key and counts.
    pub fn snapshot(&self) -> Vec<(LaunchKey, LaunchCounts)> {
        self.slots
            .iter()
            .filter(|s| s.state.load(Ordering::Acquire) == READY)
            .map(|s| {
                let counts = LaunchCounts {
                    launched: s.launched.load(Ordering::Relaxed),
                    captured: s.captured.load(Ordering::Relaxed),
                };
                (s.key(), counts)
            })
            .collect()
    }

    /// Launches that found no slot.
    pub fn overflow(&self) -> LaunchCounts {
        LaunchCounts {
            launched: self.overflow_launched.load(Ordering::Relaxed),
            captured: self.overflow_captured.load(Ordering::Relaxed),
        }
    }

    /// Empty again. Only for a single-threaded moment (the child side of `fork`).
    pub fn reset(&self) {
        self.slots.iter().for_each(Slot::reset);
        self.overflow_launched.store(0, Ordering::Relaxed);
        self.overflow_captured.store(0, Ordering::Relaxed);
    }
}

impl<const N: usize> Default for LaunchTable<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// Launch counts of one configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaunchCounts {
    /// Launches that ran (not captured).
    pub launched: u64,
    /// Launches recorded into a graph under stream capture.
    pub captured: u64,
}

/// A tiny multiplicative hasher (FxHash): keys are a handful of integers, so SipHash's DoS
/// resistance buys nothing and costs tens of nanoseconds on every launch.
#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

type FxBuild = BuildHasherDefault<FxHasher>;

/// The per-kernel launch census.
#[derive(Debug, Default)]
pub struct KernelCensus {
    counts: HashMap<LaunchKey, LaunchCounts, FxBuild>,
    names: HashMap<usize, String, FxBuild>,
}

/// One rendered census row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRow {
    /// Kernel name as the driver reports it (mangled), or `<unknown>`.
    pub name: String,
    /// Grid.
    pub grid: [u32; 3],
    /// Block.
    pub block: [u32; 3],
    /// Counts.
    pub counts: LaunchCounts,
}

impl KernelCensus {
    /// Empty.
    pub fn new() -> KernelCensus {
        KernelCensus::default()
    }

    /// Adds counts for a configuration (from a [`LaunchTable`] snapshot).
    pub fn add(&mut self, key: LaunchKey, counts: LaunchCounts) {
        let c = self.counts.entry(key).or_default();
        c.launched += counts.launched;
        c.captured += counts.captured;
    }

    /// Counts one successful launch.
    pub fn record(&mut self, key: LaunchKey, captured: bool) {
        let c = self.counts.entry(key).or_default();
        if captured {
            c.captured += 1;
        } else {
            c.launched += 1;
        }
    }

    /// Whether the name of `func` is still unknown.
    pub fn needs_name(&self, func: usize) -> bool {
        !self.names.contains_key(&func)
    }

    /// Attaches a name to a handle.
    pub fn set_name(&mut self, func: usize, name: String) {
        self.names.insert(func, name);
    }

    /// Totals over all rows.
    pub fn totals(&self) -> LaunchCounts {
        self.counts.values().fold(LaunchCounts::default(), |a, c| LaunchCounts {
            launched: a.launched + c.launched,
            captured: a.captured + c.captured,
        })
    }

    /// Rows merged by (name, grid, block), most launched first, then by name.
    pub fn rows(&self) -> Vec<KernelRow> {
        let mut merged: HashMap<(String, [u32; 3], [u32; 3]), LaunchCounts> = HashMap::new();
        for (k, c) in &self.counts {
            let name = self.names.get(&k.func).cloned().unwrap_or_else(|| "<unknown>".to_string());
            let e = merged.entry((name, k.grid, k.block)).or_default();
            e.launched += c.launched;
            e.captured += c.captured;
        }
        let mut rows: Vec<KernelRow> =
            merged.into_iter().map(|((name, grid, block), counts)| KernelRow { name, grid, block, counts }).collect();
        rows.sort_by(|a, b| {
            (b.counts.launched + b.counts.captured)
                .cmp(&(a.counts.launched + a.counts.captured))
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| a.grid.cmp(&b.grid))
                .then_with(|| a.block.cmp(&b.block))
        });
        rows
    }

    /// Rows as JSON.
    pub fn to_json(&self) -> Value {
        Value::Array(
            self.rows()
                .into_iter()
                .map(|r| {
                    json!({
                        "name": r.name,
                        "grid": r.grid,
                        "block": r.block,
                        "launched": r.counts.launched,
                        "captured": r.counts.captured,
                    })
                })
                .collect(),
        )
    }
}

/// Per-entry-point call counters, `N` of them (on their own cache lines), indexed by the
/// interposer's hook table.
#[derive(Debug)]
#[repr(align(128))]
pub struct ApiCounters<const N: usize> {
    calls: [AtomicU64; N],
    failed: [AtomicU64; N],
}

/// One entry point as the census names it.
#[derive(Debug, Clone, Copy)]
pub struct EntryPoint<'a> {
    /// Its index in the counters.
    pub index: usize,
    /// The exported symbol.
    pub symbol: &'a str,
    /// The symbol without its version and per-thread suffixes.
    pub base: &'a str,
    /// Its API family.
    pub family: &'a str,
}

impl<const N: usize> ApiCounters<N> {
    /// All zero.
    pub const fn new() -> Self {
        ApiCounters { calls: [const { AtomicU64::new(0) }; N], failed: [const { AtomicU64::new(0) }; N] }
    }

    /// Counts one call of entry point `index` (ignored beyond `N`) that failed or not.
    pub fn record(&self, index: usize, failed: bool) {
        let Some(c) = self.calls.get(index) else { return };
        c.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.failed[index].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Calls of entry point `index` so far.
    pub fn calls(&self, index: usize) -> u64 {
        self.calls.get(index).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Total calls over all entry points.
    pub fn total(&self) -> u64 {
        self.calls.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Back to zero (a forked child starts its own count).
    pub fn reset(&self) {
        for c in self.calls.iter().chain(self.failed.iter()) {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// `{symbol: {"calls": n, "failed": m}}` for every entry point called at least once, and the
    /// calls summed per base name and per family.
    pub fn to_json<'a>(&self, entry_points: impl IntoIterator<Item = EntryPoint<'a>>) -> ApiCalls {
        let mut by_symbol = serde_json::Map::new();
        let mut by_base: std::collections::BTreeMap<&str, u64> = Default::default();
        let mut by_family: std::collections::BTreeMap<&str, u64> = Default::default();
        for e in entry_points {
            let calls = self.calls(e.index);
            if calls == 0 {
                continue;
            }
            let failed = self.failed[e.index].load(Ordering::Relaxed);
            by_symbol.insert(e.symbol.to_string(), json!({ "calls": calls, "failed": failed }));
            *by_base.entry(e.base).or_default() += calls;
            *by_family.entry(e.family).or_default() += calls;
        }
        ApiCalls {
            by_symbol: Value::Object(by_symbol),
            by_base: json!(by_base),
            by_family: json!(by_family),
            total: self.total(),
        }
    }
}

impl<const N: usize> Default for ApiCounters<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// How the interposition itself went: which routes substituted hooks, and what passed through.
#[derive(Debug, Default)]
pub struct InterposeStats {
    /// `dlsym` answered with a hook.
    pub dlsym_substituted: Stat,
    /// `dlsym` found one of the interposer's own exports (e.g. `RTLD_DEFAULT` lookups) and kept it.
    pub dlsym_own: Stat,
    /// `dlsym` of a driver name vitamin does not hook (passed through).
    pub dlsym_passed: Stat,
    /// The driver's entry-point lookup answered with a hook.
    pub proc_substituted: Stat,
    /// An entry-point lookup of a name/version vitamin does not hook (passed through).
    pub proc_passed: Stat,
    /// A substitution was refused because all variant slots of that hook were taken.
    pub slots_full: Stat,
    /// A hook could not find the real driver function.
    pub missing_real: Stat,
}

impl InterposeStats {
    /// All zero.
    pub const fn new() -> InterposeStats {
        InterposeStats {
            dlsym_substituted: Stat::new(),
            dlsym_own: Stat::new(),
            dlsym_passed: Stat::new(),
            proc_substituted: Stat::new(),
            proc_passed: Stat::new(),
            slots_full: Stat::new(),
            missing_real: Stat::new(),
        }
    }

    fn all(&self) -> [(&'static str, &Stat); 7] {
        [
            ("dlsym_substituted", &self.dlsym_substituted),
            ("dlsym_own", &self.dlsym_own),
            ("dlsym_passed", &self.dlsym_passed),
            ("proc_substituted", &self.proc_substituted),
            ("proc_passed", &self.proc_passed),
            ("slots_full", &self.slots_full),
            ("missing_real", &self.missing_real),
        ]
    }

    /// Zero again.
    pub fn reset(&self) {
        self.all().iter().for_each(|(_, s)| s.reset());
    }

    /// As a JSON object.
    pub fn to_json(&self) -> Value {
        Value::Object(self.all().iter().map(|(k, s)| (k.to_string(), json!(s.get()))).collect())
    }
}

/// Schema tag of the census JSON; bump on incompatible changes.
pub const SCHEMA: &str = "vitamin.shim.census/1";

/// Calls per intercepted entry point: by symbol (`{symbol: {"calls": n, "failed": m}}`), summed
/// per base name and per family, and the total.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiCalls {
    /// By exported symbol.
    pub by_symbol: Value,
    /// By base name (the symbol without its version and per-thread suffixes).
    pub by_base: Value,
    /// By API family.
    pub by_family: Value,
    /// All calls.
    pub total: u64,
}

impl KernelCensus {
    /// The census of a launch table's snapshot, with the names known for its handles.
    pub fn from_table<const N: usize>(table: &LaunchTable<N>, names: &HashMap<usize, String>) -> KernelCensus {
        let mut kernels = KernelCensus::new();
        for (key, counts) in table.snapshot() {
            kernels.add(key, counts);
            if let Some(name) = names.get(&key.func) {
                kernels.set_name(key.func, name.clone());
            }
        }
        kernels
    }
}

/// Everything a census file holds.
#[derive(Debug)]
pub struct Report<'a> {
    /// Process id.
    pub pid: u32,
    /// Mode name.
    pub mode: &'a str,
    /// Calls per intercepted entry point.
    pub api: ApiCalls,
    /// How the interposition itself went (the interposer's own statistics).
    pub interposition: Value,
    /// Graph launch counts.
    pub graphs: &'a GraphStats,
    /// The kernel census.
    pub kernels: &'a KernelCensus,
    /// Launches the launch table had no slot for (counted, not attributed to a kernel).
    pub launch_overflow: LaunchCounts,
}

impl Report<'_> {
    /// The census JSON document (schema [`SCHEMA`]).
    pub fn to_json(&self) -> Value {
        let kernels = self.kernels;
        let totals = kernels.totals();
        json!({
            "schema": SCHEMA,
            "pid": self.pid,
            "mode": self.mode,
            "totals": {
                "kernel_launches": totals.launched + self.launch_overflow.launched,
                "captured_kernel_launches": totals.captured + self.launch_overflow.captured,
                "unattributed_kernel_launches": self.launch_overflow.launched + self.launch_overflow.captured,
                "graph_launches": self.graphs.launched.get(),
                "captured_graph_launches": self.graphs.captured.get(),
                "intercepted_calls": self.api.total,
            },
            "api": self.api.by_symbol,
            "api_by_base": self.api.by_base,
            "api_by_family": self.api.by_family,
            "interposition": self.interposition,
            "kernels": kernels.to_json(),
        })
    }
}

/// Writes `doc` to `path` through a temporary file renamed into place (`tag` makes the temporary
/// name unique per process), so a reader never sees half a census.
pub fn write_atomically(path: &std::path::Path, doc: &Value, tag: u32) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{tag}"));
    let bytes = serde_json::to_vec_pretty(doc).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn stat_never_underflows() {
        let s = Stat::new();
        s.drop_one();
        assert_eq!(s.get(), 0);
        s.bump();
        s.bump();
        s.drop_one();
        assert_eq!(s.get(), 1);
    }

    #[test]
    fn launch_table_counts_and_reports_new_keys_once() {
        let t: LaunchTable<64> = LaunchTable::new();
        let k = LaunchKey { func: 0x10, grid: [4, 1, 1], block: [256, 1, 1] };
        assert_eq!(t.record(&k, false), Recorded::New);
        assert_eq!(t.record(&k, false), Recorded::Existing);
        assert_eq!(t.record(&k, true), Recorded::Existing);
        assert_eq!(t.snapshot(), vec![(k, LaunchCounts { launched: 2, captured: 1 })]);
        t.reset();
        assert!(t.snapshot().is_empty());
        assert_eq!(t.record(&k, false), Recorded::New, "empty again after reset");
    }

    #[test]
    fn launch_table_overflows_instead_of_losing_counts() {
        // 8 slots, 20 distinct keys: 8 get slots, the rest are counted as overflow.
        let t: LaunchTable<8> = LaunchTable::new();
        let mut overflowed = 0;
        for f in 0..20 {
            for _ in 0..3 {
                if t.record(&LaunchKey { func: f, grid: [1, 1, 1], block: [32, 1, 1] }, f % 2 == 0)
                    == Recorded::Overflow
                {
                    overflowed += 1;
                }
            }
        }
        let snap = t.snapshot();
        assert_eq!(snap.len(), 8);
        let in_slots: u64 = snap.iter().map(|(_, c)| c.launched + c.captured).sum();
        let o = t.overflow();
        assert_eq!(o.launched + o.captured, overflowed);
        assert_eq!(in_slots + overflowed, 60, "every launch is counted somewhere");
    }

    #[test]
    fn launch_table_is_exact_under_concurrent_launches() {
        // 8 threads, 2000 launches each over 50 shared configurations.
        let t: std::sync::Arc<LaunchTable<1024>> = std::sync::Arc::new(LaunchTable::new());
        let threads: Vec<_> = (0..8)
            .map(|tid| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..2000u32 {
                        let f = ((i * 7 + tid) % 50) as usize;
                        t.record(&LaunchKey { func: f, grid: [f as u32 + 1, 1, 1], block: [64, 1, 1] }, i % 5 == 0);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|h| h.join().unwrap());
        let mut merged: HashMap<usize, LaunchCounts> = HashMap::new();
        for (k, c) in t.snapshot() {
            assert_eq!(k.grid[0] as usize, k.func + 1, "keys are never torn");
            let e = merged.entry(k.func).or_default();
            e.launched += c.launched;
            e.captured += c.captured;
        }
        let total: u64 = merged.values().map(|c| c.launched + c.captured).sum::<u64>();
        let o = t.overflow();
        assert_eq!(total + o.launched + o.captured, 16_000);
        assert_eq!(merged.len(), 50);
        let captured: u64 = merged.values().map(|c| c.captured).sum::<u64>() + o.captured;
        assert_eq!(captured, 8 * 400);
    }

    #[derive(Debug, Clone)]
    struct Launch {
        func: usize,
        grid: [u32; 3],
        block: [u32; 3],
        captured: bool,
    }

    fn launch() -> impl Strategy<Value = Launch> {
        (0usize..6, 1u32..4, 1u32..3, any::<bool>()).prop_map(|(func, g, b, captured)| Launch {
            func,
            grid: [g, 1, 1],
            block: [32 * b, 1, 1],
            captured,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Against a reference model: a list of launches folded into (name, grid, block) counts.
        /// Handles 0..6 map to 3 names, so merging by name is exercised.
        #[test]
        fn census_matches_model(launches in proptest::collection::vec(launch(), 0..200)) {
            let name_of = |f: usize| format!("k{}", f % 3);
            let mut census = KernelCensus::new();
            let mut model: HashMap<(String, [u32; 3], [u32; 3]), LaunchCounts> = HashMap::new();
            for l in &launches {
                census.record(LaunchKey { func: l.func, grid: l.grid, block: l.block }, l.captured);
                if census.needs_name(l.func) {
                    census.set_name(l.func, name_of(l.func));
                }
                let e = model.entry((name_of(l.func), l.grid, l.block)).or_default();
                if l.captured { e.captured += 1 } else { e.launched += 1 }
            }
            let rows = census.rows();
            prop_assert_eq!(rows.len(), model.len());
            for r in &rows {
                prop_assert_eq!(Some(&r.counts), model.get(&(r.name.clone(), r.grid, r.block)));
            }
            let t = census.totals();
            prop_assert_eq!(t.launched, launches.iter().filter(|l| !l.captured).count() as u64);
            prop_assert_eq!(t.captured, launches.iter().filter(|l| l.captured).count() as u64);
            // The lock-free table, folded into a census, gives the same rows.
            let table: LaunchTable<256> = LaunchTable::new();
            for l in &launches {
                table.record(&LaunchKey { func: l.func, grid: l.grid, block: l.block }, l.captured);
            }
            prop_assert_eq!(table.overflow(), LaunchCounts::default());
            let mut folded = KernelCensus::new();
            for (k, c) in table.snapshot() {
                folded.add(k, c);
                folded.set_name(k.func, name_of(k.func));
            }
            prop_assert_eq!(folded.rows(), rows.clone());
            // Sorted: non-increasing totals.
            for w in rows.windows(2) {
                prop_assert!(w[0].counts.launched + w[0].counts.captured >= w[1].counts.launched + w[1].counts.captured);
            }
        }
    }

    #[test]
    fn api_counters_count_per_entry_point_and_fold_by_base_and_family() {
        let c: ApiCounters<4> = ApiCounters::new();
        c.record(0, false);
        c.record(0, true);
        c.record(1, false);
        c.record(9, false); // beyond the table: ignored
        let names = [("launch", "launch", "launch"), ("launch_v2", "launch", "launch"), ("sync", "sync", "stream")];
        let v = c.to_json(names.iter().enumerate().map(|(index, &(symbol, base, family))| EntryPoint {
            index,
            symbol,
            base,
            family,
        }));
        assert_eq!((v.total, c.calls(0), c.calls(9)), (3, 2, 0));
        assert_eq!(v.by_symbol["launch"]["failed"], 1);
        assert_eq!(v.by_base["launch"], 3);
        assert!(v.by_symbol.get("sync").is_none(), "uncalled entry points are omitted");
        c.reset();
        assert_eq!(c.total(), 0);
        let s = InterposeStats::new();
        s.proc_substituted.bump();
        assert_eq!(s.to_json()["proc_substituted"], 1);
        s.reset();
        assert_eq!(s.to_json()["proc_substituted"], 0);
    }
}
