//! Observe-mode bookkeeping of the CUDA interposer: per-API call counters indexed by the hook
//! table, interposition statistics, and the census document. The launch table, the per-kernel
//! census and the named counters are the client runtime's
//! ([`vitamin_runtime::client::census`], re-exported here); the hooks feed them.
//!
//! Counters are relaxed atomics indexed by [`HookId`] (one array, no allocation, usable from any
//! thread; [`ApiCounters`]).

pub use vitamin_runtime::client::census::*;

use crate::ffi::{CUresult, CUDA_SUCCESS};
use crate::table::{HookId, HOOKS, HOOK_COUNT};

/// Per-hook call counters.
#[derive(Debug, Default)]
pub struct Counters(ApiCounters<HOOK_COUNT>);

impl Counters {
    /// All zero.
    pub const fn new() -> Counters {
        Counters(ApiCounters::new())
    }
    /// Counts one call of `id` that returned `result`.
    pub fn record(&self, id: HookId, result: CUresult) {
        self.0.record(id.index(), result != CUDA_SUCCESS);
    }
    /// Calls of `id` so far.
    pub fn calls(&self, id: HookId) -> u64 {
        self.0.calls(id.index())
    }
    /// Total calls over all hooks.
    pub fn total(&self) -> u64 {
        self.0.total()
    }
    /// Back to zero (a forked child starts its own count).
    pub fn reset(&self) {
        self.0.reset();
    }
    /// The calls per hook, base name and family.
    pub fn to_json(&self) -> ApiCalls {
        let names = HOOKS.iter().map(|s| EntryPoint {
            index: s.id.index(),
            symbol: s.symbol,
            base: s.base,
            family: s.family.name(),
        });
        self.0.to_json(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
