//! The demo's scenarios and determinism check on a simulated device other than the H200 (the
//! runtime's `scenario::evaluate` and `determinism_check` build the simulated H200 themselves):
//! the same steps, through the runtime's public scenario API, on the chosen preset. The
//! scenarios' kernel shapes were sized for the H200's 132 SMs; on the MI300X's 304 CUs they are
//! the same launches on a larger device.

use anyhow::Result;
use vitamin_hal::sim::SimDevice;
use vitamin_hal::Backend;
use vitamin_runtime::policy::{ClientClass, PolicyKind};
use vitamin_runtime::profile::{profile_all, Profiles};
use vitamin_runtime::scenario::{
    run, tenants, DeterminismReport, DeterminismTrial, HarnessConfig, HarnessRun, PolicyRun, ScenarioKind,
    ScenarioReport, ScenarioScale, TenantReport,
};

fn profiles(device: SimDevice, kind: ScenarioKind, scale: ScenarioScale) -> Result<Profiles> {
    let sim = device.backend();
    let launches: Vec<_> = tenants(kind, &sim, scale, 0, None)
        .iter()
        .flat_map(|t| t.kernel_shapes())
        .filter_map(|s| s.launch().as_kernel().cloned())
        .collect();
    Ok(profile_all(&sim, &launches, 1)?)
}

/// One scenario under one policy on `device`.
pub fn run_scenario(
    device: SimDevice,
    kind: ScenarioKind,
    policy: PolicyKind,
    seed: u64,
    scale: ScenarioScale,
    config: &HarnessConfig,
) -> Result<HarnessRun> {
    let sim = device.backend();
    let ts = tenants(kind, &sim, scale, seed, None);
    Ok(run(sim, policy.build(seed), profiles(device, kind, scale)?, ts, config)?)
}

/// Every policy on one scenario, normalized by each best-effort tenant alone under Exclusive.
pub fn evaluate(
    device: SimDevice,
    kind: ScenarioKind,
    policies: &[PolicyKind],
    seed: u64,
    scale: ScenarioScale,
    config: &HarnessConfig,
    mut progress: impl FnMut(&str),
) -> Result<ScenarioReport> {
    progress(&format!("{}: alone baselines", kind.name()));
    let sim = device.backend();
    let all = tenants(kind, &sim, scale, 0, None);
    let mut alone = Vec::new();
    for (i, t) in all.iter().enumerate() {
        if t.class() != ClientClass::BestEffort || t.name() == "prefill" {
            continue;
        }
        let sim = device.backend();
        let mut ts = tenants(kind, &sim, scale, 0, None);
        let t = ts.swap_remove(i);
        let name = t.name().to_owned();
        let r = run(sim, PolicyKind::Exclusive.build(0), Profiles::new(device.name()), vec![t], config)?;
        alone.push((name, r.tenants[0].completed));
    }
    let classes: Vec<ClientClass> = all.iter().map(|t| t.class()).collect();
    let mut runs = Vec::new();
    for &p in policies {
        progress(&format!("{}: policy {p}", kind.name()));
        let r = run_scenario(device, kind, p, seed, scale, config)?;
        let reports: Vec<TenantReport> = r
            .tenants
            .iter()
            .zip(&classes)
            .map(|(m, c)| {
                let a = alone.iter().find(|(n, _)| *n == m.name).map(|x| x.1);
                let target = match c {
                    ClientClass::LatencyCritical { tpot_target_ns } => Some(*tpot_target_ns),
                    ClientClass::BestEffort => None,
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
    }
    Ok(ScenarioReport {
        scenario: kind.name().to_owned(),
        simulated: true,
        device: sim.topology().device_name().to_owned(),
        runs,
    })
}

/// The colocated-training scenario with data paths under Exclusive (reference) and Chaos per seed.
pub fn determinism_check(
    device: SimDevice,
    seeds: &[u64],
    iterations: u32,
    config: &HarnessConfig,
) -> Result<DeterminismReport> {
    let scale = ScenarioScale::default();
    let digests = |policy: PolicyKind, seed: u64| -> Result<Vec<u64>> {
        let sim = device.backend();
        let ts = tenants(ScenarioKind::ColocatedTraining, &sim, scale, seed, Some(iterations));
        let r = run(sim, policy.build(seed), Profiles::new(device.name()), ts, config)?;
        Ok(r.tenants.iter().map(|t| t.output_digest.unwrap_or(0)).collect())
    };
    let reference = digests(PolicyKind::Exclusive, 0)?;
    let mut trials = Vec::new();
    for &s in seeds {
        let d = digests(PolicyKind::Chaos, s)?;
        trials.push(DeterminismTrial { seed: s, identical: d == reference, digests: d });
    }
    Ok(DeterminismReport { iterations, reference, trials })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo's pieces on the simulated MI300X: a scenario under Chaos binds kernels to many
    /// of its 71 pool nodes, and Chaos bindings keep the tenants' outputs bitwise identical.
    #[test]
    fn the_demo_runs_on_the_simulated_mi300x() {
        let config = HarnessConfig::default();
        let scale = ScenarioScale { duration_ns: 20_000_000, trace_requests: 5 };
        let r = evaluate(
            SimDevice::named("mi300x").unwrap(),
            ScenarioKind::ColocatedTraining,
            &[PolicyKind::Throughput, PolicyKind::Chaos],
            7,
            scale,
            &config,
            |_| {},
        )
        .expect("scenario");
        assert!(r.device.contains("MI300X"), "{}", r.device);
        assert_eq!(r.runs.len(), 2);
        for run in &r.runs {
            assert!(run.dispatch.bound > 0, "{} bound nothing", run.policy);
            if run.policy == "chaos" {
                let used = run.dispatch.per_node.iter().filter(|&&k| k > 0).count();
                assert!(used >= 10, "Chaos used only {used} pool nodes");
            }
            assert!(run.tenants.iter().all(|t| t.completed > 0), "{}: a tenant made no progress", run.policy);
        }
        let d = determinism_check(SimDevice::named("mi300x").unwrap(), &[1, 2], 2, &config).expect("determinism");
        assert!(d.trials.iter().all(|t| t.identical), "{d:?}");
        assert!(d.reference.iter().all(|&x| x != 0));
    }
}
