//! Observe-mode bookkeeping: per-API call counters, interposition statistics and the per-kernel
//! launch census, and their JSON form. Pure Rust (no FFI); the hooks feed it.
//!
//! Counters are relaxed atomics indexed by [`HookId`] (one cache-friendly array, no allocation,
//! usable from any thread). The kernel census is a hash map keyed by (function handle, grid,
//! block) behind the caller's lock; names are attached once per handle and rows are merged by
//! (name, grid, block) when rendered, so the same kernel loaded in two modules is one row.
//!
//! A launch issued on a stream that is being captured into a graph does not run; it is counted
//! as `captured`, apart from the launches that ran (`launched`). A replay of an instantiated
//! graph is one graph launch, however many kernels it holds.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{json, Value};

use crate::ffi::{CUresult, CUDA_SUCCESS};
use crate::table::{HookId, HOOKS, HOOK_COUNT};

/// Schema tag of the census JSON; bump on incompatible changes.
pub const SCHEMA: &str = "vitamin.shim.census/1";

/// Per-hook call counters.
#[derive(Debug)]
pub struct Counters {
    calls: [AtomicU64; HOOK_COUNT],
    failed: [AtomicU64; HOOK_COUNT],
}

impl Counters {
    /// All zero.
    pub const fn new() -> Counters {
        Counters { calls: [const { AtomicU64::new(0) }; HOOK_COUNT], failed: [const { AtomicU64::new(0) }; HOOK_COUNT] }
    }

    /// Counts one call of `id` that returned `result`.
    pub fn record(&self, id: HookId, result: CUresult) {
        self.calls[id.index()].fetch_add(1, Ordering::Relaxed);
        if result != CUDA_SUCCESS {
            self.failed[id.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Calls of `id` so far.
    pub fn calls(&self, id: HookId) -> u64 {
        self.calls[id.index()].load(Ordering::Relaxed)
    }

    /// Total calls over all hooks.
    pub fn total(&self) -> u64 {
        self.calls.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Back to zero (a forked child starts its own count).
    pub fn reset(&self) {
        for c in self.calls.iter().chain(self.failed.iter()) {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// `{symbol: {"calls": n, "failed": m}}` for every hook called at least once, and the calls
    /// summed per base name and per family.
    pub fn to_json(&self) -> (Value, Value, Value) {
        let mut by_symbol = serde_json::Map::new();
        let mut by_base: std::collections::BTreeMap<&str, u64> = Default::default();
        let mut by_family: std::collections::BTreeMap<&str, u64> = Default::default();
        for s in &HOOKS {
            let calls = self.calls[s.id.index()].load(Ordering::Relaxed);
            if calls == 0 {
                continue;
            }
            let failed = self.failed[s.id.index()].load(Ordering::Relaxed);
            by_symbol.insert(s.symbol.to_string(), json!({ "calls": calls, "failed": failed }));
            *by_base.entry(s.base).or_default() += calls;
            *by_family.entry(s.family.name()).or_default() += calls;
        }
        (Value::Object(by_symbol), json!(by_base), json!(by_family))
    }
}

impl Default for Counters {
    fn default() -> Self {
        Counters::new()
    }
}

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

/// How the interposition itself went: which routes substituted hooks, and what passed through.
#[derive(Debug, Default)]
pub struct InterposeStats {
    /// `dlsym` answered with a hook.
    pub dlsym_substituted: Stat,
    /// `dlsym` found one of the shim's own exports (e.g. `RTLD_DEFAULT` lookups) and kept it.
    pub dlsym_own: Stat,
    /// `dlsym` of a `cu[A-Z]` name vitamin does not hook (passed through).
    pub dlsym_passed: Stat,
    /// `cuGetProcAddress` answered with a hook.
    pub proc_substituted: Stat,
    /// `cuGetProcAddress` of a name/version vitamin does not hook (passed through).
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

/// Graph launches that ran and that were captured into another graph.
#[derive(Debug, Default)]
pub struct GraphStats {
    /// Replays of instantiated graphs (one per `cuGraphLaunch`).
    pub launched: Stat,
    /// `cuGraphLaunch` calls recorded into a capturing stream.
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
    /// `CUfunction` (or `CUkernel`) handle value.
    pub func: usize,
    /// Grid dimensions in blocks.
    pub grid: [u32; 3],
    /// Block dimensions in threads.
    pub block: [u32; 3],
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

/// Everything a census file holds.
#[derive(Debug)]
pub struct Report<'a> {
    /// Process id.
    pub pid: u32,
    /// Mode name.
    pub mode: &'a str,
    /// Call counters.
    pub counters: &'a Counters,
    /// Interposition statistics.
    pub stats: &'a InterposeStats,
    /// Graph launch counts.
    pub graphs: &'a GraphStats,
    /// The kernel census (None if never created: no launch seen).
    pub kernels: Option<&'a KernelCensus>,
}

impl Report<'_> {
    /// The census JSON document (schema [`SCHEMA`]).
    pub fn to_json(&self) -> Value {
        let (api, by_base, by_family) = self.counters.to_json();
        let empty = KernelCensus::new();
        let kernels = self.kernels.unwrap_or(&empty);
        let totals = kernels.totals();
        json!({
            "schema": SCHEMA,
            "pid": self.pid,
            "mode": self.mode,
            "totals": {
                "kernel_launches": totals.launched,
                "captured_kernel_launches": totals.captured,
                "graph_launches": self.graphs.launched.get(),
                "captured_graph_launches": self.graphs.captured.get(),
                "intercepted_calls": self.counters.total(),
            },
            "api": api,
            "api_by_base": by_base,
            "api_by_family": by_family,
            "interposition": self.stats.to_json(),
            "kernels": kernels.to_json(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counters_record_and_reset() {
        let c = Counters::new();
        c.record(HookId::cuLaunchKernel, CUDA_SUCCESS);
        c.record(HookId::cuLaunchKernel, 1);
        c.record(HookId::cuLaunchKernel_ptsz, CUDA_SUCCESS);
        assert_eq!(c.calls(HookId::cuLaunchKernel), 2);
        assert_eq!(c.total(), 3);
        let (api, base, family) = c.to_json();
        assert_eq!(api["cuLaunchKernel"]["calls"], 2);
        assert_eq!(api["cuLaunchKernel"]["failed"], 1);
        assert_eq!(base["cuLaunchKernel"], 3);
        assert_eq!(family["launch"], 3);
        assert!(api.get("cuStreamQuery").is_none(), "uncalled hooks are omitted");
        c.reset();
        assert_eq!(c.total(), 0);
    }

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
    fn report_shape() {
        let counters = Counters::new();
        let stats = InterposeStats::new();
        let graphs = GraphStats::new();
        let mut k = KernelCensus::new();
        k.record(LaunchKey { func: 1, grid: [4, 1, 1], block: [256, 1, 1] }, false);
        k.set_name(1, "vector_add".into());
        graphs.launched.bump();
        stats.proc_substituted.bump();
        let r =
            Report { pid: 7, mode: "observe", counters: &counters, stats: &stats, graphs: &graphs, kernels: Some(&k) };
        let v = r.to_json();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["totals"]["kernel_launches"], 1);
        assert_eq!(v["totals"]["graph_launches"], 1);
        assert_eq!(v["interposition"]["proc_substituted"], 1);
        assert_eq!(v["kernels"][0]["name"], "vector_add");
        assert_eq!(v["kernels"][0]["grid"], json!([4, 1, 1]));
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
            // Sorted: non-increasing totals.
            for w in rows.windows(2) {
                prop_assert!(w[0].counts.launched + w[0].counts.captured >= w[1].counts.launched + w[1].counts.captured);
            }
        }
    }
}
