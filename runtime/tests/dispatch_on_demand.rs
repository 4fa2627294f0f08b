//! An on-demand pool (`pool = "on-demand"`) on the simulated H200: partitions are created on the
//! dispatch path the first time a node is used, a node whose creation fails takes no work, and
//! no op is lost either way. (Ordering and outputs under every pool layout are checked by the
//! happens-before property test, `dispatch_happens_before.rs`.)

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vitamin_hal::sim::{SimBackend, SimPartition};
use vitamin_hal::{Backend, Dim3, HalError, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc, Topology, UnitSet};
use vitamin_runtime::dispatch::{DispatchConfig, Dispatcher};
use vitamin_runtime::policy::{ClientClass, PolicyKind};
use vitamin_runtime::pool::PoolLayout;
use vitamin_runtime::profile::Profiles;
use vitamin_runtime::vctx::{StreamKind, VctxId, VirtualContext};

/// The simulated H200, logging every partition it creates and refusing the unit sets `refuse`
/// names (as a driver out of memory would).
#[derive(Clone)]
struct Logged {
    sim: SimBackend,
    created: Arc<Mutex<Vec<UnitSet>>>,
    refuse: fn(&UnitSet, &Topology) -> bool,
}

impl Logged {
    fn new(refuse: fn(&UnitSet, &Topology) -> bool) -> Logged {
        Logged { sim: SimBackend::preset("h200").unwrap(), created: Arc::default(), refuse }
    }

    fn created(&self) -> Vec<UnitSet> {
        self.created.lock().unwrap().clone()
    }
}

impl Backend for Logged {
    type Partition = SimPartition;

    fn topology(&self) -> &Topology {
        self.sim.topology()
    }

    fn create_partition(&self, units: &UnitSet, lanes: usize) -> Result<SimPartition, HalError> {
        if (self.refuse)(units, self.sim.topology()) {
            return Err(HalError::OutOfMemory(format!("refused by the test: {units}")));
        }
        self.created.lock().unwrap().push(*units);
        self.sim.create_partition(units, lanes)
    }

    fn now_ns(&self) -> u64 {
        self.sim.now_ns()
    }

    fn wait_for_progress(&self, timeout: Duration) -> Result<bool, HalError> {
        self.sim.wait_for_progress(timeout)
    }
}

fn on_demand() -> DispatchConfig {
    DispatchConfig { pool: PoolLayout::OnDemand, ..DispatchConfig::default() }
}

/// Records `n` launches of the built-in `busy` kernel round-robin over `streams` new streams.
fn record_busy(b: &Logged, v: &VirtualContext, streams: usize, n: usize) {
    let busy = b.sim.kernel("busy").expect("builtin");
    let streams: Vec<_> = (0..streams).map(|_| v.create_stream(StreamKind::NonBlocking, 0)).collect();
    for i in 0..n {
        let op = Arc::new(OpDesc::Kernel(KernelLaunch::new(
            busy.clone(),
            Dim3::x(64 + (i as u32 % 5) * 64),
            Dim3::x(64),
            0,
            KernelArgs::pack(&[&2_000u32.to_le_bytes()]),
            LaunchAttributes::none(),
        )));
        v.record_op(streams[i % streams.len()], op).expect("record");
    }
}

/// The nodes kernels were bound to (by units).
fn used_units(d: &Dispatcher<Logged, vitamin_runtime::policy::AnyPolicy>) -> HashSet<UnitSet> {
    d.stats().per_node.iter().enumerate().filter(|(_, &k)| k > 0).map(|(i, _)| d.pool().nodes()[i].units).collect()
}

#[test]
fn an_on_demand_pool_creates_nothing_at_start_and_then_only_what_it_uses() {
    let b = Logged::new(|_, _| false);
    let all = b.topology().all_units();
    let mut d = Dispatcher::new(b.clone(), PolicyKind::Chaos.build(3), Profiles::new("t"), on_demand()).expect("pool");
    assert_eq!(b.created(), vec![all], "at start only the service partition exists");
    let report = d.pool_report();
    assert_eq!((report.layout, report.nodes, report.created), (PoolLayout::OnDemand, 59, 0));

    let v = Arc::new(VirtualContext::new(VctxId(0)));
    d.register(v.clone(), "app", ClientClass::BestEffort);
    record_busy(&b, &v, 3, 30);
    d.run_until_idle().expect("no stall");
    assert_eq!(v.outstanding(), 0);
    assert_eq!((d.stats().completed, d.stats().failed), (30, 0));

    let created: HashSet<UnitSet> = b.created()[1..].iter().copied().collect();
    assert_eq!(created.len(), b.created().len() - 1, "no node was created twice");
    let used = used_units(&d);
    assert!(!used.is_empty());
    // The whole device is also asked at intake whether it runs each op (nothing smaller could
    // if it cannot), so it exists whether or not a kernel ran there.
    let mut expected = used.clone();
    expected.insert(all);
    assert_eq!(created, expected, "created the nodes kernels ran on and the whole device, nothing else");
    let report = d.pool_report();
    assert_eq!(report.created, created.len());
    assert_eq!(report.on_demand.created as usize, created.len());
    assert_eq!(report.on_demand.failed, 0);
    assert!(report.created < report.nodes, "Chaos over 30 ops used {} of {} nodes", report.created, report.nodes);
}

#[test]
fn a_pool_created_at_start_creates_every_node_before_the_first_op() {
    for layout in [PoolLayout::Hierarchical, PoolLayout::Flat] {
        let b = Logged::new(|_, _| false);
        let config = DispatchConfig { pool: layout, ..DispatchConfig::default() };
        let d = Dispatcher::new(b.clone(), PolicyKind::Throughput.build(0), Profiles::new("t"), config).expect("pool");
        assert_eq!(b.created().len(), 59 + 1, "{layout:?}: every node and the service partition");
        let r = d.pool_report();
        assert_eq!((r.layout, r.created, r.on_demand.created), (layout, 59, 0));
    }
}

#[test]
fn a_node_whose_creation_fails_takes_no_work_and_no_op_is_lost() {
    // Only the leaves and the whole device can be created.
    let b = Logged::new(|u, top| u.len() != top.all_units().len() && !top.leaves().contains(u));
    let mut d = Dispatcher::new(b.clone(), PolicyKind::Chaos.build(9), Profiles::new("t"), on_demand()).expect("pool");
    let v = Arc::new(VirtualContext::new(VctxId(0)));
    d.register(v.clone(), "app", ClientClass::BestEffort);
    record_busy(&b, &v, 4, 200);
    d.run_until_idle().expect("no stall: refused nodes are skipped");
    assert_eq!(v.outstanding(), 0, "nothing kept");
    assert_eq!((d.stats().completed, d.stats().failed), (200, 0), "nothing lost or failed");
    let report = d.pool_report();
    assert!(report.on_demand.failed > 0, "Chaos tried nodes that cannot be created: {report:?}");
    let top = b.topology();
    for u in used_units(&d) {
        assert!(u == top.all_units() || top.leaves().contains(&u), "work ran on {u}, which was never created");
    }
    // Each refused node was tried once, and its proposal rejected once: later proposals skip it.
    let refusable = d.pool().nodes().iter().filter(|n| (b.refuse)(&n.units, top)).count() as u64;
    assert!(
        report.on_demand.failed <= refusable,
        "{} failures for {refusable} refusable nodes",
        report.on_demand.failed
    );
    assert!(
        d.stats().rejected <= report.on_demand.failed,
        "{} proposals rejected for {} failed creations",
        d.stats().rejected,
        report.on_demand.failed
    );
}
