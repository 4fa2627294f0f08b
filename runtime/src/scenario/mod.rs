//! Simulated scenarios: tenants driven over virtual time through the real dispatcher, pool,
//! vCtxs and policies, on the simulated device. This is what `vitamin demo` runs, and what the
//! integration tests assert on (same code path, same figures).
//!
//! The harness charges an **observation latency** (default 5 us: a launch plus an event query on
//! the H200, FACTS.md) between a completion and the dispatcher's reaction to it, so strict
//! readiness pays the host round trip that lane continuation removes.

mod report;
mod tenants;
pub mod trace;
mod workload;

use std::sync::Arc;

use vitamin_hal::sim::SimBackend;
use vitamin_hal::Backend;

pub use report::{percentile, PolicyRun, ScenarioReport, TenantReport};
pub use tenants::{Decode, Inference, Prefill, Serving, Tenant, TenantCtx, TenantMetrics, Training};
pub use workload::{timing_kernel, DataPath, KernelShape};

use crate::dispatch::{DispatchConfig, DispatchError, Dispatcher, Timeline};
use crate::policy::{Policy, PolicyKind};
use crate::pool::HolderId;
use crate::profile::Profiles;
use crate::vctx::{VctxId, VirtualContext};

/// Harness settings.
#[derive(Debug, Clone)]
pub struct HarnessConfig {
    /// Dispatcher settings.
    pub dispatch: DispatchConfig,
    /// ns between a completion and the dispatcher observing it.
    pub observe_latency_ns: u64,
    /// Stop at this virtual time even if tenants are not done (safety bound).
    pub horizon_ns: u64,
}

impl Default for HarnessConfig {
    fn default() -> Self {
        HarnessConfig { dispatch: DispatchConfig::default(), observe_latency_ns: 5_000, horizon_ns: 600_000_000_000 }
    }
}

/// Result of one harness run.
#[derive(Debug)]
pub struct HarnessRun {
    /// Per-tenant metrics, in tenant order.
    pub tenants: Vec<TenantMetrics>,
    /// Virtual time at the end, ns.
    pub end_ns: u64,
    /// Dispatcher counters.
    pub stats: crate::dispatch::DispatchStats,
    /// Binding timeline, if recorded.
    pub timeline: Option<Timeline>,
}

/// Runs `tenants` to completion on `sim` under `policy`.
pub fn run<P: Policy>(
    sim: SimBackend,
    policy: P,
    profiles: Profiles,
    mut tenants: Vec<Box<dyn Tenant>>,
    config: &HarnessConfig,
) -> Result<HarnessRun, DispatchError> {
    let mut disp = Dispatcher::new(sim.clone(), policy, profiles, config.dispatch.clone())?;
    let mut clients: Vec<(Arc<VirtualContext>, HolderId)> = Vec::new();
    for (i, t) in tenants.iter().enumerate() {
        let v = Arc::new(VirtualContext::new(VctxId(i as u32)));
        let h = disp.register(v.clone(), t.name().to_owned(), t.class());
        clients.push((v, h));
    }
    let mut wake: Vec<Option<u64>> = vec![Some(0); tenants.len()];
    loop {
        let now = sim.now_ns();
        for (i, t) in tenants.iter_mut().enumerate() {
            if t.done() {
                wake[i] = None;
                continue;
            }
            let mut ctx = TenantCtx { now, vctx: &clients[i].0, sim: &sim, advise_deadline: None };
            wake[i] = t.step(&mut ctx);
            if let Some(d) = ctx.advise_deadline {
                disp.advise_deadline(clients[i].1, d);
            }
        }
        let mut progressed = false;
        while disp.pump()? > 0 {
            progressed = true;
        }
        if progressed {
            continue; // let tenants observe what just completed, at this same instant
        }
        let all_done = tenants.iter().all(|t| t.done());
        if (all_done && disp.is_idle()) || now >= config.horizon_ns {
            break;
        }
        let next_wake = wake.iter().flatten().copied().filter(|&t| t > now).min();
        let next_done = sim.next_completion_ns();
        let next = match (next_wake, next_done) {
            (Some(a), Some(b)) => a.min(b.saturating_add(config.observe_latency_ns)),
            (Some(a), None) => a,
            (None, Some(b)) => b.saturating_add(config.observe_latency_ns),
            (None, None) => {
                // Nothing runs and nobody waits on time: tenants waiting on completions observe
                // them now; if nothing changes in a second pass, the run is stuck.
                let before: Vec<bool> = tenants.iter().map(|t| t.done()).collect();
                let mut changed = false;
                for (i, t) in tenants.iter_mut().enumerate() {
                    let mut ctx = TenantCtx { now, vctx: &clients[i].0, sim: &sim, advise_deadline: None };
                    wake[i] = t.step(&mut ctx);
                    changed |= wake[i].is_some() || t.done() != before[i];
                }
                changed |= disp.pump()? > 0;
                if !changed {
                    tracing::warn!(now, "scenario stalled: no work, no wake-up");
                    break;
                }
                continue;
            }
        };
        sim.advance_until(next.max(now + 1));
    }
    let end_ns = sim.now_ns();
    Ok(HarnessRun {
        tenants: tenants.iter().map(|t| t.metrics(&sim)).collect(),
        end_ns,
        stats: disp.stats().clone(),
        timeline: disp.timeline().cloned(),
    })
}

/// The three demo scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScenarioKind {
    /// Two training-like tenants with compute phases and idle gaps.
    ColocatedTraining,
    /// A latency-critical inference tenant (Poisson arrivals) with background training.
    InferenceWithTraining,
    /// Serving replay of the Azure conversation trace: prefill and decode, plus background training.
    Serving,
}

impl ScenarioKind {
    /// All scenarios.
    pub const ALL: [ScenarioKind; 3] =
        [ScenarioKind::ColocatedTraining, ScenarioKind::InferenceWithTraining, ScenarioKind::Serving];
    /// Name.
    pub fn name(self) -> &'static str {
        match self {
            ScenarioKind::ColocatedTraining => "colocated-training",
            ScenarioKind::InferenceWithTraining => "inference-with-training",
            ScenarioKind::Serving => "serving",
        }
    }
}

/// Scenario size knobs.
#[derive(Debug, Clone, Copy)]
pub struct ScenarioScale {
    /// Virtual duration of time-bounded tenants, ns.
    pub duration_ns: u64,
    /// Requests replayed from the trace.
    pub trace_requests: usize,
}

impl Default for ScenarioScale {
    fn default() -> Self {
        ScenarioScale { duration_ns: 2_000_000_000, trace_requests: 200 }
    }
}

/// ns.
const MS: u64 = 1_000_000;
/// Trace arrivals are replayed this many times faster than recorded (a busy serving instance).
pub const TRACE_SPEEDUP: f64 = 100.0;
/// TPOT target of the serving scenario's decode instance, ns.
pub const SERVING_TPOT_TARGET_NS: u64 = 300_000;

fn shape(sim: &SimBackend, name: &str, resident: u32, sat: Option<u32>, grid: u32, block_us: u32) -> KernelShape {
    KernelShape { function: timing_kernel(sim, name, resident, sat), grid, block: 256, block_ns: block_us * 1_000 }
}

/// Training tenant "A" (small-batch transformer fine-tuning): per layer two GEMMs with large
/// tiles (one block per SM; 96 and 192 blocks, so they cannot fill all 132 SMs evenly) and
/// attention / layer-norm / activation kernels that saturate memory bandwidth with 16-32 SMs;
/// then a communication gap.
pub fn training_a(sim: &SimBackend) -> Vec<KernelShape> {
    let mut v = Vec::new();
    for _ in 0..4 {
        v.push(shape(sim, "a.qkv_gemm", 1, None, 96, 40));
        v.push(shape(sim, "a.attention", 1, Some(32), 64, 50));
        v.push(shape(sim, "a.layernorm", 8, Some(16), 528, 25));
        v.push(shape(sim, "a.mlp_gemm", 1, None, 192, 40));
        v.push(shape(sim, "a.gelu", 8, Some(24), 1056, 20));
    }
    v
}

/// Training tenant "B" (convolutional, small batch): convolutions of 264 blocks, batch-norm and
/// activations that saturate early, and a bandwidth-bound optimizer step.
pub fn training_b(sim: &SimBackend) -> Vec<KernelShape> {
    let mut v = Vec::new();
    for _ in 0..8 {
        v.push(shape(sim, "b.conv", 2, None, 264, 50));
        v.push(shape(sim, "b.batchnorm", 8, Some(16), 396, 30));
        v.push(shape(sim, "b.relu", 8, Some(24), 792, 15));
    }
    v.push(shape(sim, "b.optimizer", 4, Some(16), 264, 40));
    v
}

/// The latency-critical inference request: four small kernels.
pub fn inference_request(sim: &SimBackend) -> Vec<KernelShape> {
    vec![
        shape(sim, "i.qkv", 4, None, 132, 30),
        shape(sim, "i.attention", 4, Some(32), 66, 40),
        shape(sim, "i.mlp", 4, None, 264, 30),
        shape(sim, "i.lm_head", 4, Some(64), 132, 30),
    ]
}

/// Builds a scenario's tenants. `data_iters`: give training tenants a deterministic data path and
/// a fixed iteration count (the determinism check) instead of a duration.
pub fn tenants(
    kind: ScenarioKind,
    sim: &SimBackend,
    scale: ScenarioScale,
    seed: u64,
    data_iters: Option<u32>,
) -> Vec<Box<dyn Tenant>> {
    let d = scale.duration_ns;
    let train = |name: &str, kernels: Vec<KernelShape>, gap: u64, start: u64, data_seed: u32| -> Box<dyn Tenant> {
        let t = Training::new(name, kernels, gap, start);
        Box::new(match data_iters {
            Some(n) => t.iterations(n).with_data(DataPath::new(sim, data_seed, 4096, n)),
            None => t.until(d),
        })
    };
    match kind {
        ScenarioKind::ColocatedTraining => {
            vec![train("train-a", training_a(sim), 3 * MS / 2, 0, 1), train("train-b", training_b(sim), MS, MS, 2)]
        }
        ScenarioKind::InferenceWithTraining => vec![
            Box::new(
                Inference::new("inference", inference_request(sim), 5.0 * MS as f64, d, seed ^ 0x1f).target(2 * MS),
            ),
            train("train-a", training_a(sim), MS, 0, 1),
        ],
        ScenarioKind::Serving => {
            let reqs = trace::azure_conv(scale.trace_requests, TRACE_SPEEDUP);
            let st = Serving::new(reqs);
            vec![
                Box::new(Prefill::new(st.clone(), shape(sim, "s.prefill", 2, None, 66, 150))),
                Box::new(Decode::new(st, shape(sim, "s.decode", 4, Some(32), 16, 200), SERVING_TPOT_TARGET_NS, 64)),
                train("train-a", training_a(sim), MS, 0, 1),
            ]
        }
    }
}

/// Runs one scenario under one policy.
pub fn run_scenario(
    kind: ScenarioKind,
    policy: PolicyKind,
    seed: u64,
    scale: ScenarioScale,
    config: &HarnessConfig,
) -> Result<HarnessRun, DispatchError> {
    let sim = SimBackend::default_device();
    let tenants = tenants(kind, &sim, scale, seed, None);
    let profiles = profile_tenants(kind, scale)?;
    run(sim, policy.build(seed), profiles, tenants, config)
}

/// The profiling pass: measures every recurring launch configuration of a scenario's tenants at
/// every pool size on a separate simulated device of the default preset (so the scenario's clock is untouched).
pub fn profile_tenants(kind: ScenarioKind, scale: ScenarioScale) -> Result<Profiles, DispatchError> {
    let sim = SimBackend::default_device();
    let launches: Vec<_> = tenants(kind, &sim, scale, 0, None)
        .iter()
        .flat_map(|t| t.kernel_shapes())
        .filter_map(|s| s.launch().as_kernel().cloned())
        .collect();
    Ok(crate::profile::profile_all(&sim, &launches, 1)?)
}

/// Iterations each training tenant of `kind` completes alone on the whole device (Exclusive) in
/// the scenario's duration: the normalization baseline.
pub fn alone_baselines(
    kind: ScenarioKind,
    scale: ScenarioScale,
    config: &HarnessConfig,
) -> Result<Vec<(String, u64)>, DispatchError> {
    let sim = SimBackend::default_device();
    let all = tenants(kind, &sim, scale, 0, None);
    let mut out = Vec::new();
    for (i, t) in all.iter().enumerate() {
        if t.class() != crate::policy::ClientClass::BestEffort || t.name() == "prefill" {
            continue;
        }
        let sim = SimBackend::default_device();
        let mut ts = tenants(kind, &sim, scale, 0, None);
        let t = ts.swap_remove(i);
        let name = t.name().to_owned();
        let profiles = Profiles::new(sim.topology().device_name());
        let r = run(sim, PolicyKind::Exclusive.build(0), profiles, vec![t], config)?;
        out.push((name, r.tenants[0].completed));
    }
    Ok(out)
}

/// Runs every policy on a scenario and computes the report.
pub fn evaluate(
    kind: ScenarioKind,
    policies: &[PolicyKind],
    seed: u64,
    scale: ScenarioScale,
    config: &HarnessConfig,
    mut progress: impl FnMut(&str),
) -> Result<(ScenarioReport, Vec<(PolicyKind, HarnessRun)>), DispatchError> {
    progress(&format!("{}: alone baselines", kind.name()));
    let alone = alone_baselines(kind, scale, config)?;
    let mut runs = Vec::new();
    let mut raw = Vec::new();
    for &p in policies {
        progress(&format!("{}: policy {p}", kind.name()));
        let r = run_scenario(kind, p, seed, scale, config)?;
        let sim = SimBackend::default_device();
        let classes: Vec<_> = tenants(kind, &sim, scale, seed, None).iter().map(|t| t.class()).collect();
        let reports: Vec<TenantReport> = r
            .tenants
            .iter()
            .zip(&classes)
            .map(|(m, c)| {
                let a = alone.iter().find(|(n, _)| *n == m.name).map(|x| x.1);
                let target = match c {
                    crate::policy::ClientClass::LatencyCritical { tpot_target_ns } => Some(*tpot_target_ns),
                    crate::policy::ClientClass::BestEffort => None,
                };
                TenantReport::from_metrics(m, a, target)
            })
            .collect();
        let norm: Vec<f64> = reports.iter().filter_map(|t| t.normalized_throughput).collect();
        runs.push(PolicyRun {
            policy: p.name().to_owned(),
            aggregate_normalized_throughput: (!norm.is_empty()).then(|| norm.iter().sum()),
            tenants: reports,
            end_ms: r.end_ns as f64 / 1e6,
            dispatch: r.stats.clone(),
        });
        raw.push((p, r));
    }
    Ok((
        ScenarioReport {
            scenario: kind.name().to_owned(),
            simulated: true,
            device: SimBackend::default_device().topology().device_name().to_owned(),
            runs,
        },
        raw,
    ))
}

/// The determinism check: the colocated-training scenario with data paths and a fixed number of
/// iterations, under Exclusive (reference) and under Chaos with each seed. Returns the reference
/// digests and, per seed, whether every tenant's output digest matched.
pub fn determinism_check(
    seeds: &[u64],
    iterations: u32,
    config: &HarnessConfig,
) -> Result<DeterminismReport, DispatchError> {
    let scale = ScenarioScale::default();
    let digests = |policy: PolicyKind, seed: u64| -> Result<Vec<u64>, DispatchError> {
        let sim = SimBackend::default_device();
        let ts = tenants(ScenarioKind::ColocatedTraining, &sim, scale, seed, Some(iterations));
        let profiles = Profiles::new(sim.topology().device_name());
        let r = run(sim, policy.build(seed), profiles, ts, config)?;
        Ok(r.tenants.iter().map(|t| t.output_digest.unwrap_or(0)).collect())
    };
    let reference = digests(PolicyKind::Exclusive, 0)?;
    let mut per_seed = Vec::new();
    for &s in seeds {
        let d = digests(PolicyKind::Chaos, s)?;
        per_seed.push(DeterminismTrial { seed: s, digests: d.clone(), identical: d == reference });
    }
    Ok(DeterminismReport { iterations, reference, trials: per_seed })
}

/// Result of [`determinism_check`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeterminismReport {
    /// Iterations per tenant.
    pub iterations: u32,
    /// Digests under Exclusive, per tenant.
    pub reference: Vec<u64>,
    /// One trial per Chaos seed.
    pub trials: Vec<DeterminismTrial>,
}

/// One Chaos seed's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeterminismTrial {
    /// Seed.
    pub seed: u64,
    /// Digests per tenant.
    pub digests: Vec<u64>,
    /// Whether all matched the reference.
    pub identical: bool,
}
