//! Observe-mode bookkeeping of the CUDA interposer: per-API call counters indexed by the hook
//! table, interposition statistics, and the census document. The launch table, the per-kernel
//! census and the named counters are the client runtime's
//! ([`vitamin_runtime::client::census`], re-exported here); the hooks feed them.
//!
//! Counters are relaxed atomics indexed by [`HookId`] (one array, no allocation, usable from any
//! thread).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{json, Value};
pub use vitamin_runtime::client::census::*;

use crate::ffi::{CUresult, CUDA_SUCCESS};
use crate::table::{HookId, HOOKS, HOOK_COUNT};

/// Per-hook call counters (on their own cache lines).
#[derive(Debug)]
#[repr(align(128))]
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
    pub fn to_json(&self) -> ApiCalls {
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
        ApiCalls {
            by_symbol: Value::Object(by_symbol),
            by_base: json!(by_base),
            by_family: json!(by_family),
            total: self.total(),
        }
    }
}

impl Default for Counters {
    fn default() -> Self {
        Counters::new()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_record_and_reset() {
        let c = Counters::new();
        c.record(HookId::cuLaunchKernel, CUDA_SUCCESS);
        c.record(HookId::cuLaunchKernel, 1);
        c.record(HookId::cuLaunchKernel_ptsz, CUDA_SUCCESS);
        assert_eq!(c.calls(HookId::cuLaunchKernel), 2);
        assert_eq!(c.total(), 3);
        let calls = c.to_json();
        let (api, base, family) = (calls.by_symbol, calls.by_base, calls.by_family);
        assert_eq!(calls.total, 3);
        assert_eq!(api["cuLaunchKernel"]["calls"], 2);
        assert_eq!(api["cuLaunchKernel"]["failed"], 1);
        assert_eq!(base["cuLaunchKernel"], 3);
        assert_eq!(family["launch"], 3);
        assert!(api.get("cuStreamQuery").is_none(), "uncalled hooks are omitted");
        c.reset();
        assert_eq!(c.total(), 0);
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
        let r = Report {
            pid: 7,
            mode: "observe",
            api: counters.to_json(),
            interposition: stats.to_json(),
            graphs: &graphs,
            kernels: &k,
            launch_overflow: LaunchCounts::default(),
        };
        let v = r.to_json();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["totals"]["kernel_launches"], 1);
        assert_eq!(v["totals"]["graph_launches"], 1);
        assert_eq!(v["interposition"]["proc_substituted"], 1);
        assert_eq!(v["kernels"][0]["name"], "vector_add");
        assert_eq!(v["kernels"][0]["grid"], json!([4, 1, 1]));
    }
}
