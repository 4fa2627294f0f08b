//! Recording a profile while launches run (`DispatchConfig::record_profile`, the `profile_out`
//! key), on the simulated H200, whose kernel times are known: `busy` with a per-wave time of
//! 10 us takes 2 us + ceil(blocks / (units x 4)) x 10 us.

use std::sync::Arc;

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Dim3, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc};
use vitamin_runtime::dispatch::{DispatchConfig, Dispatcher};
use vitamin_runtime::policy::{ClientClass, PolicyKind};
use vitamin_runtime::profile::{ProfileEntry, Profiles};
use vitamin_runtime::vctx::{StreamKind, VctxId, VirtualContext};

fn busy(sim: &SimBackend, grid: u32) -> KernelLaunch {
    KernelLaunch::new(
        sim.kernel("busy").expect("builtin"),
        Dim3::x(grid),
        Dim3::x(128),
        0,
        KernelArgs::pack(&[&10_000u32.to_le_bytes()]),
        LaunchAttributes::none(),
    )
}

fn model_ns(blocks: u64, units: usize) -> f64 {
    2_000.0 + blocks.div_ceil(units as u64 * 4) as f64 * 10_000.0
}

/// Runs `n` launches of each kernel in `kernels`, alternating, on one stream under `policy`.
fn record(
    sim: &SimBackend,
    policy: PolicyKind,
    lane_continuation: bool,
    base: Profiles,
    kernels: &[KernelLaunch],
    n: usize,
) -> (Profiles, u64) {
    let config = DispatchConfig { record_profile: true, lane_continuation, ..DispatchConfig::default() };
    let mut d = Dispatcher::new(sim.clone(), policy.build(7), base, config).expect("pool");
    let v = Arc::new(VirtualContext::new(VctxId(0)));
    d.register(v.clone(), "app", ClientClass::BestEffort);
    let s = v.create_stream(StreamKind::NonBlocking, 0);
    for _ in 0..n {
        for k in kernels {
            v.record_op(s, Arc::new(OpDesc::Kernel(k.clone()))).expect("record");
        }
    }
    d.run_until_idle().expect("no stall");
    assert_eq!(v.outstanding(), 0);
    d.recorded_profiles().expect("recording")
}

#[test]
fn recorded_times_are_the_devices_times_at_every_size_chaos_visited() {
    let sim = SimBackend::preset("h200").unwrap();
    let kernels = [busy(&sim, 528), busy(&sim, 132)];
    // Chaos binds each launch to a random node; strict readiness leaves each alone on its lane.
    let (p, samples) = record(&sim, PolicyKind::Chaos, false, Profiles::new("sim"), &kernels, 150);
    assert_eq!(samples, 300, "every launch ran alone on its lane and was timed");
    assert_eq!(p.len(), 2);
    for k in &kernels {
        let e = p.get(&k.config()).expect("an entry per configuration");
        assert!(e.times.len() >= 4, "Chaos visited several sizes: {:?}", e.times);
        for &(units, t) in &e.times {
            let want = model_ns(k.blocks(), units);
            assert!(
                (t - want).abs() <= 0.02 * want,
                "{} blocks on {units} units: recorded {t} ns, device {want} ns",
                k.blocks()
            );
        }
    }
}

#[test]
fn launches_queued_behind_others_are_not_timed_and_the_base_profile_is_kept() {
    let sim = SimBackend::preset("h200").unwrap();
    let k = busy(&sim, 528);
    let other = busy(&sim, 64);
    let mut base = Profiles::new("sim");
    base.insert(ProfileEntry { config: other.config(), times: vec![(8, 1.0)] });
    // Lane continuation queues each launch behind the previous one on its lane: only launches
    // that found their lane empty are timed.
    let (p, samples) = record(&sim, PolicyKind::Throughput, true, base, std::slice::from_ref(&k), 100);
    assert!((1..100).contains(&samples), "queued launches are left out ({samples} of 100 timed)");
    assert_eq!(p.get(&other.config()).expect("base entry kept").times, vec![(8, 1.0)]);
    for &(units, t) in &p.get(&k.config()).expect("the first launch found its lane empty").times {
        let want = model_ns(k.blocks(), units);
        assert!((t - want).abs() <= 0.02 * want, "on {units} units: recorded {t} ns, device {want} ns");
    }
}

#[test]
fn nothing_is_recorded_unless_asked() {
    let sim = SimBackend::preset("h200").unwrap();
    let d = Dispatcher::new(sim, PolicyKind::Throughput.build(0), Profiles::new("sim"), DispatchConfig::default())
        .expect("pool");
    assert!(d.recorded_profiles().is_none());
}
