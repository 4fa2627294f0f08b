//! Figures of a scenario run, in the shape `vitamin demo` prints and writes as JSON.

use serde::Serialize;

use super::TenantMetrics;
use crate::dispatch::DispatchStats;

/// The `p`-th percentile (0..=100, nearest rank) of `v` (unsorted), or None if empty.
pub fn percentile(v: &[u64], p: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let rank = ((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize;
    Some(s[rank.min(s.len()) - 1])
}

/// One tenant's figures under one policy.
#[derive(Debug, Clone, Serialize)]
pub struct TenantReport {
    /// Tenant.
    pub name: String,
    /// Iterations or requests completed.
    pub completed: u64,
    /// Completed / completed when alone on the whole device (training tenants).
    pub normalized_throughput: Option<f64>,
    /// Request latency p50, ms.
    pub latency_p50_ms: Option<f64>,
    /// Request latency p99, ms.
    pub latency_p99_ms: Option<f64>,
    /// TPOT p50 / p90 / p99, ms.
    pub tpot_p50_ms: Option<f64>,
    /// TPOT p90, ms.
    pub tpot_p90_ms: Option<f64>,
    /// TPOT p99, ms.
    pub tpot_p99_ms: Option<f64>,
    /// Share of requests whose TPOT exceeded the target, percent.
    pub tpot_slo_violation_pct: Option<f64>,
    /// TTFT p50, ms.
    pub ttft_p50_ms: Option<f64>,
    /// TTFT p99, ms.
    pub ttft_p99_ms: Option<f64>,
}

fn ms(v: Option<u64>) -> Option<f64> {
    v.map(|x| x as f64 / 1e6)
}

impl TenantReport {
    /// Figures from metrics; `alone` = completions when alone (for normalization), `tpot_target_ns`
    /// for SLO violations.
    pub fn from_metrics(m: &TenantMetrics, alone: Option<u64>, tpot_target_ns: Option<u64>) -> Self {
        let violations = tpot_target_ns
            .filter(|_| !m.tpot_ns.is_empty())
            .map(|t| 100.0 * m.tpot_ns.iter().filter(|&&x| x > t).count() as f64 / m.tpot_ns.len() as f64);
        TenantReport {
            name: m.name.clone(),
            completed: m.completed,
            normalized_throughput: alone.filter(|&a| a > 0).map(|a| m.completed as f64 / a as f64),
            latency_p50_ms: ms(percentile(&m.latencies_ns, 50.0)),
            latency_p99_ms: ms(percentile(&m.latencies_ns, 99.0)),
            tpot_p50_ms: ms(percentile(&m.tpot_ns, 50.0)),
            tpot_p90_ms: ms(percentile(&m.tpot_ns, 90.0)),
            tpot_p99_ms: ms(percentile(&m.tpot_ns, 99.0)),
            tpot_slo_violation_pct: violations,
            ttft_p50_ms: ms(percentile(&m.ttft_ns, 50.0)),
            ttft_p99_ms: ms(percentile(&m.ttft_ns, 99.0)),
        }
    }
}

/// One policy's run of a scenario.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyRun {
    /// Policy name.
    pub policy: String,
    /// Sum of the training tenants' normalized throughputs.
    pub aggregate_normalized_throughput: Option<f64>,
    /// Per tenant.
    pub tenants: Vec<TenantReport>,
    /// Virtual time at the end, ms.
    pub end_ms: f64,
    /// Dispatcher counters.
    pub dispatch: DispatchStats,
}

/// All policies on one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    /// Scenario name.
    pub scenario: String,
    /// Always true: these figures come from the simulated device.
    pub simulated: bool,
    /// Device.
    pub device: String,
    /// Runs, one per policy.
    pub runs: Vec<PolicyRun>,
}

impl ScenarioReport {
    /// The run of a policy by name.
    pub fn run(&self, policy: &str) -> Option<&PolicyRun> {
        self.runs.iter().find(|r| r.policy == policy)
    }
}
