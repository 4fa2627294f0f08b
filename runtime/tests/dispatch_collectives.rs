//! Kernels that spin on peers (NCCL's collectives) on the simulated device: they run on the
//! service partition (the whole device, no lease), under every policy, in stream order, and never
//! wait for a lease another client holds: a collective held back behind another job's lease while
//! its peer on another device spins is how spatial partitioning deadlocks a data-parallel job.
//!
//! The grid shapes are NCCL's: one block per channel, a ring collective on many channels (64 blocks
//! of 640 threads) and a tree collective on fewer (24 of 256).

use std::sync::Arc;

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{
    Backend, Dim3, FunctionRef, Incompatibility, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc, PhysicalPartition,
    UnitSet,
};
use vitamin_runtime::dispatch::{DispatchConfig, Dispatcher, SERVICE_NODE};
use vitamin_runtime::policy::{ClientClass, PolicyKind};
use vitamin_runtime::profile::Profiles;
use vitamin_runtime::vctx::{StreamKind, VctxId, VirtualContext};

fn launch(f: &FunctionRef, grid: u32, threads: u32, block_ns: u32, spins: bool) -> Arc<OpDesc> {
    Arc::new(OpDesc::Kernel(KernelLaunch::new(
        f.clone(),
        Dim3::x(grid),
        Dim3::x(threads),
        0,
        KernelArgs::pack(&[&block_ns.to_le_bytes()]),
        LaunchAttributes::none().with_coresident(spins),
    )))
}

#[test]
fn collectives_run_on_the_service_partition_in_stream_order_under_every_policy() {
    let policies = [PolicyKind::Throughput, PolicyKind::Tpot, PolicyKind::Exclusive, PolicyKind::Static];
    let runs = policies.into_iter().map(|p| (p, 0)).chain((0..8).map(|s| (PolicyKind::Chaos, s)));
    for (policy, seed) in runs {
        let sim = SimBackend::preset("h200").unwrap();
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
                // Compute, the collective on its own stream after an event (as DDP does), then
                // the next compute after the collective.
                let k = v.record_op(compute, launch(&busy, 16 + 40 * (step % 3), 256, 2_000, false)).unwrap().op;
                let e = v.create_event();
                v.record_event(e, compute).unwrap();
                v.wait_event(comm, e).unwrap();
                let (grid, threads) = if step % 2 == 0 { (64, 640) } else { (24, 256) };
                let op = v.record_op(comm, launch(&busy, grid, threads, 2_000, true)).unwrap().op;
                let done = v.create_event();
                v.record_event(done, comm).unwrap();
                v.wait_event(compute, done).unwrap();
                collectives.push((name.clone(), k.0, op.0));
            }
        }
        d.run_until_idle().expect("every op completes");
        let spans = &d.timeline().expect("timeline on").spans;
        let span = |client: &str, op: u64| {
            spans.iter().find(|s| s.client == client && s.op == op).unwrap_or_else(|| panic!("{client} op {op} ran"))
        };
        for (client, before, op) in &collectives {
            let (k, c) = (span(client, *before), span(client, *op));
            assert_eq!(c.node, SERVICE_NODE, "{policy:?} seed {seed}: a collective ran on a leased node");
            assert_ne!(k.node, SERVICE_NODE, "compute kernels are bound to pool nodes");
            assert!(k.end_ns <= c.start_ns, "{policy:?} seed {seed}: the collective overtook the compute it waits on");
        }
        assert_eq!(d.stats().collectives, collectives.len() as u64);
    }
}

#[test]
fn a_collective_never_waits_for_another_client_s_lease() {
    // Exclusive: client a holds the whole device with a long kernel; client b's collective starts
    // while it runs (as under MPS), where b's ordinary kernel waits for a's lease.
    let sim = SimBackend::preset("h200").unwrap();
    let busy = sim.kernel("busy").expect("built-in kernel");
    let config = DispatchConfig { record_timeline: true, ..DispatchConfig::default() };
    let mut d = Dispatcher::new(sim, PolicyKind::Exclusive.build(0), Profiles::new("sim"), config).expect("pool");
    let (a, b) = (Arc::new(VirtualContext::new(VctxId(0))), Arc::new(VirtualContext::new(VctxId(1))));
    d.register(a.clone(), "a", ClientClass::BestEffort);
    d.register(b.clone(), "b", ClientClass::BestEffort);
    let (sa, sb, sc) = (
        a.create_stream(StreamKind::NonBlocking, 0),
        b.create_stream(StreamKind::NonBlocking, 0),
        b.create_stream(StreamKind::NonBlocking, 0),
    );
    let long = a.record_op(sa, launch(&busy, 528, 256, 1_000_000, false)).unwrap().op;
    d.pump().unwrap();
    let coll = b.record_op(sb, launch(&busy, 64, 640, 1_000, true)).unwrap().op;
    let plain = b.record_op(sc, launch(&busy, 64, 640, 1_000, false)).unwrap().op;
    d.run_until_idle().unwrap();
    let spans = &d.timeline().unwrap().spans;
    let find = |c: &str, op: u64| spans.iter().find(|s| s.client == c && s.op == op).unwrap();
    let (l, c, p) = (find("a", long.0), find("b", coll.0), find("b", plain.0));
    assert!(c.start_ns < l.end_ns, "the collective started while a held the device: {c:?} vs {l:?}");
    assert!(p.start_ns >= l.end_ns, "an ordinary kernel of b waited for a's lease (Exclusive): {p:?} vs {l:?}");
}

#[test]
fn partitions_refuse_a_collective_grid_they_cannot_hold_at_once() {
    let sim = SimBackend::preset("h200").unwrap();
    let busy = sim.kernel("busy").expect("built-in kernel");
    let leaf = sim.create_partition(&UnitSet::range(0, 8), 1).expect("8-unit partition");
    // 4 resident `busy` blocks per unit: 32 at once on 8 units.
    assert!(leaf.can_execute(&launch(&busy, 32, 640, 1, true)).is_ok());
    assert!(matches!(
        leaf.can_execute(&launch(&busy, 33, 640, 1, true)),
        Err(Incompatibility::NotCoResident { blocks: 33, capacity: 32 })
    ));
    assert!(leaf.can_execute(&launch(&busy, 33, 640, 1, false)).is_ok(), "plain launches run in waves");
}

#[test]
fn the_constraint_is_not_a_driver_attribute() {
    let a = LaunchAttributes::none().with_coresident(true);
    assert!(a.needs_coresidency());
    assert!(!a.cooperative(), "the launch reaches the driver unchanged: not cooperative");
    assert!(a.raw().is_empty());
    assert!(!LaunchAttributes::none().needs_coresidency());
}
