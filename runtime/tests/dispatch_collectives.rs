//! Kernels that spin on peers (NCCL's collectives) are bound only where their whole grid is
//! resident at once, on the simulated device, under every policy and many seeds of Chaos (which
//! draws a random eligible node for every launch).
//!
//! The grid shapes are NCCL's: one block per channel, so a ring collective on many channels is a
//! wide grid of full blocks and a tree collective a narrower one. The simulated `busy` kernel
//! holds 4 blocks per unit at once, so on the simulated H200 (leaves of 8 and 12 units) a ring
//! grid of 64 channels needs a node of at least 16 units and a tree grid of 24 channels fits
//! every leaf.

use std::sync::Arc;

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Dim3, FunctionRef, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc};
use vitamin_runtime::dispatch::{DispatchConfig, Dispatcher, SERVICE_NODE};
use vitamin_runtime::policy::{ClientClass, PolicyKind};
use vitamin_runtime::pool::NodeId;
use vitamin_runtime::profile::Profiles;
use vitamin_runtime::vctx::{StreamKind, VctxId, VirtualContext};

/// Resident `busy` blocks per unit on the simulated device.
const RESIDENT_PER_UNIT: u64 = 4;

fn launch(f: &FunctionRef, grid: u32, threads: u32, spins: bool) -> Arc<OpDesc> {
    Arc::new(OpDesc::Kernel(KernelLaunch::new(
        f.clone(),
        Dim3::x(grid),
        Dim3::x(threads),
        0,
        KernelArgs::pack(&[&2_000u32.to_le_bytes()]),
        LaunchAttributes::none().with_coresident(spins),
    )))
}

/// Runs rounds of ring and tree collectives after ordinary kernels on two streams of two clients;
/// returns, per bound collective, (grid, units of its node).
fn run(policy: PolicyKind, seed: u64) -> Vec<(u32, usize)> {
    let sim = SimBackend::h200();
    let busy = sim.kernel("busy").expect("built-in kernel");
    let config = DispatchConfig { record_timeline: true, ..DispatchConfig::default() };
    let mut d = Dispatcher::new(sim, policy.build(seed), Profiles::new("sim"), config).expect("pool");
    let mut collectives = Vec::new();
    for c in 0..2u32 {
        let v = Arc::new(VirtualContext::new(VctxId(c)));
        let name = format!("rank{c}");
        d.register(v.clone(), name.clone(), ClientClass::BestEffort);
        let compute = v.create_stream(StreamKind::NonBlocking, 0);
        let comm = v.create_stream(StreamKind::NonBlocking, -1);
        for step in 0..6u32 {
            // Compute, then the collective on its own stream after an event, as DDP does.
            v.record_op(compute, launch(&busy, 16 + 40 * (step % 3), 256, false)).expect("record");
            let e = v.create_event();
            v.record_event(e, compute).expect("event");
            v.wait_event(comm, e).expect("wait");
            let (grid, threads) = if step % 2 == 0 { (64, 640) } else { (24, 256) };
            let op = v.record_op(comm, launch(&busy, grid, threads, true)).expect("record").op;
            collectives.push((name.clone(), op.0, grid));
        }
    }
    d.run_until_idle().expect("every collective is bound and completes");
    let hierarchy = d.pool().hierarchy().clone();
    let out: Vec<(u32, usize)> = d
        .timeline()
        .expect("timeline on")
        .spans
        .iter()
        .filter(|s| s.node != SERVICE_NODE)
        .filter_map(|s| {
            let (_, _, grid) = collectives.iter().find(|(c, op, _)| *c == s.client && *op == s.op)?;
            Some((*grid, hierarchy.node(NodeId(s.node)).size()))
        })
        .collect();
    assert_eq!(out.len(), collectives.len(), "{policy:?} seed {seed}: every collective ran once, bound");
    out
}

#[test]
fn collectives_run_only_where_their_whole_grid_is_resident() {
    let mut smallest_ring = usize::MAX;
    let mut smallest_tree = usize::MAX;
    let policies = [PolicyKind::Throughput, PolicyKind::Tpot, PolicyKind::Exclusive, PolicyKind::Static];
    let runs = policies.into_iter().map(|p| (p, 0)).chain((0..24).map(|s| (PolicyKind::Chaos, s)));
    for (policy, seed) in runs {
        for (grid, units) in run(policy, seed) {
            assert!(
                u64::from(grid) <= units as u64 * RESIDENT_PER_UNIT,
                "{policy:?} seed {seed}: a collective of {grid} blocks ran on a node of {units} units"
            );
            if grid == 64 {
                smallest_ring = smallest_ring.min(units);
            } else {
                smallest_tree = smallest_tree.min(units);
            }
        }
    }
    assert_eq!(smallest_ring, 16, "Chaos drew the smallest node that holds a ring grid");
    assert!(smallest_tree <= 12, "tree grids fit leaves, and Chaos placed some there ({smallest_tree})");
}

#[test]
fn the_constraint_is_not_a_driver_attribute() {
    let a = LaunchAttributes::none().with_coresident(true);
    assert!(a.needs_coresidency());
    assert!(!a.cooperative(), "the launch reaches the driver unchanged: not cooperative");
    assert!(a.raw().is_empty());
    assert!(!LaunchAttributes::none().needs_coresidency());
}
