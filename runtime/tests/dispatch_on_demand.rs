//! An on-demand pool (`pool = "on-demand"`) on the simulated H200: partitions are created on the
//! dispatch path the first time a node is used, a node whose creation fails takes no work, and
//! no op is lost either way. (Ordering and outputs under every pool layout are checked by the
//! happens-before property test, `dispatch_happens_before.rs`.)

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vitamin_hal::sim::{SimBackend, SimPartition};
use vitamin_hal::{
    Backend, Dim3, GraphLaunch, HalError, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc, Topology, UnitSet,
};
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
        let config = DispatchConfig { pool: layout, remainders_at_start: true, ..DispatchConfig::default() };
        let d = Dispatcher::new(b.clone(), PolicyKind::Throughput.build(0), Profiles::new("t"), config).expect("pool");
        assert_eq!(b.created().len(), 59 + 1, "{layout:?}: every node and the service partition");
        let r = d.pool_report();
        assert_eq!((r.layout, r.created, r.on_demand.created, r.remainders_at_start), (layout, 59, 0, true));
    }
}

#[test]
fn by_default_the_tree_is_created_at_start_and_a_remainder_at_its_first_use() {
    use vitamin_runtime::pool::NodeKind;
    for layout in [PoolLayout::Hierarchical, PoolLayout::Flat] {
        let b = Logged::new(|_, _| false);
        let config = DispatchConfig { pool: layout, ..DispatchConfig::default() };
        let mut d = Dispatcher::new(b.clone(), PolicyKind::Chaos.build(5), Profiles::new("t"), config).expect("pool");
        // 16 leaves + 15 internal nodes of the H200 tree, then the service partition.
        let tree: Vec<UnitSet> =
            d.pool().nodes().iter().filter(|n| n.kind != NodeKind::Remainder).map(|n| n.units).collect();
        assert_eq!(tree.len(), 31);
        let mut at_start = tree.clone();
        at_start.push(b.topology().all_units());
        assert_eq!(b.created(), at_start, "{layout:?}: the tree in node order, then the service partition");
        let r = d.pool_report();
        assert_eq!((r.created, r.on_demand.created, r.remainders_at_start), (31, 0, false), "{layout:?}");

        // Chaos binds to random eligible nodes, remainders among them: those used are created
        // then, once each, and every op completes.
        let v = Arc::new(VirtualContext::new(VctxId(0)));
        d.register(v.clone(), "app", ClientClass::BestEffort);
        record_busy(&b, &v, 3, 200);
        d.run_until_idle().expect("no stall");
        assert_eq!((d.stats().completed, d.stats().failed, v.outstanding()), (200, 0, 0), "{layout:?}");
        let later: Vec<UnitSet> = b.created()[at_start.len()..].to_vec();
        let remainders: HashSet<UnitSet> =
            d.pool().nodes().iter().filter(|n| n.kind == NodeKind::Remainder).map(|n| n.units).collect();
        assert!(later.iter().all(|u| remainders.contains(u)), "{layout:?}: only remainders are created later");
        assert_eq!(later.iter().collect::<HashSet<_>>().len(), later.len(), "{layout:?}: none twice");
        let used_remainders = used_units(&d).intersection(&remainders).count();
        assert!(used_remainders > 0, "{layout:?}: Chaos over 200 ops used no remainder");
        assert!(later.len() >= used_remainders, "{layout:?}: a remainder ran kernels without being created");
        let r = d.pool_report();
        assert_eq!((r.created, r.on_demand.created as usize), (31 + later.len(), later.len()), "{layout:?}");
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

/// Per node size, how many partitions exist (the whole device left out).
fn created_per_size(b: &Logged) -> std::collections::BTreeMap<usize, usize> {
    let all = b.topology().all_units();
    let mut per = std::collections::BTreeMap::new();
    for u in b.created().into_iter().filter(|u| *u != all) {
        *per.entry(u.len()).or_insert(0) += 1;
    }
    per
}

#[test]
fn an_on_demand_pool_reuses_a_created_node_of_the_size_before_creating_another() {
    for policy in [PolicyKind::Throughput, PolicyKind::Tpot, PolicyKind::Static, PolicyKind::Exclusive] {
        let b = Logged::new(|_, _| false);
        let mut d = Dispatcher::new(b.clone(), policy.build(1), Profiles::new("t"), on_demand()).expect("pool");
        let v = Arc::new(VirtualContext::new(VctxId(0)));
        d.register(v.clone(), "app", ClientClass::BestEffort);
        // One stream, op by op (as a program that synchronizes after each launch) and in bursts:
        // every op waits for the one before, so one node of a size is always free when the next
        // op of that size is placed.
        for _ in 0..100 {
            record_busy(&b, &v, 1, 1);
            d.run_until_idle().expect("no stall");
        }
        for _ in 0..5 {
            record_busy(&b, &v, 1, 20);
            d.run_until_idle().expect("no stall");
        }
        assert_eq!((d.stats().completed, d.stats().failed), (200, 0), "{policy:?}");
        let per = created_per_size(&b);
        assert!(per.values().all(|&k| k == 1), "{policy:?}: a serial chain created {per:?} partitions per size");
        // and the whole-device node (asked at intake), which the service partition does not count as
        assert_eq!(d.pool_report().created, per.values().sum::<usize>() + 1, "{policy:?}");
    }
}

#[test]
fn an_on_demand_pool_creates_a_second_node_of_a_size_when_concurrency_needs_it() {
    let b = Logged::new(|_, _| false);
    let mut d =
        Dispatcher::new(b.clone(), PolicyKind::Throughput.build(1), Profiles::new("t"), on_demand()).expect("pool");
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let v = Arc::new(VirtualContext::new(VctxId(i)));
            d.register(v.clone(), format!("app{i}"), ClientClass::BestEffort);
            v
        })
        .collect();
    for v in &clients {
        record_busy(&b, v, 2, 40);
    }
    d.run_until_idle().expect("no stall");
    assert_eq!((d.stats().completed, d.stats().failed), (160, 0));
    let per = created_per_size(&b);
    assert!(per.values().any(|&k| k > 1), "four clients at once ran on one partition per size: {per:?}");
    assert!(d.pool_report().created < d.pool_report().nodes);
}

/// Records `n` launches of `busy` on one new stream: cluster launches of 8-block clusters (which
/// every node holds) or cooperative launches of `coop` blocks (which only nodes of at least
/// `coop / 8` units hold, 8 resident blocks per unit).
fn record_constrained(b: &Logged, v: &VirtualContext, n: usize, coop: Option<u32>) {
    let busy = b.sim.kernel("busy").expect("builtin");
    let s = v.create_stream(StreamKind::NonBlocking, 0);
    for i in 0..n {
        let (grid, attrs) = match coop {
            Some(blocks) => (blocks, LaunchAttributes::new(true, None, None, Vec::new())),
            None => (8 * (4 + i as u32 % 3), LaunchAttributes::new(false, Some(Dim3::x(8)), None, Vec::new())),
        };
        let op = Arc::new(OpDesc::Kernel(KernelLaunch::new(
            busy.clone(),
            Dim3::x(grid),
            Dim3::x(64),
            0,
            KernelArgs::pack(&[&2_000u32.to_le_bytes()]),
            attrs,
        )));
        v.record_op(s, op).expect("record");
    }
}

#[test]
fn constrained_launches_check_only_the_partitions_an_on_demand_pool_has() {
    for (policy, coop) in
        [(PolicyKind::Throughput, None), (PolicyKind::Throughput, Some(200)), (PolicyKind::Chaos, Some(200))]
    {
        let b = Logged::new(|_, _| false);
        let mut d = Dispatcher::new(b.clone(), policy.build(5), Profiles::new("t"), on_demand()).expect("pool");
        let v = Arc::new(VirtualContext::new(VctxId(0)));
        d.register(v.clone(), "app", ClientClass::BestEffort);
        for _ in 0..20 {
            record_constrained(&b, &v, 5, coop);
            d.run_until_idle().expect("no stall");
        }
        assert_eq!((d.stats().completed, d.stats().failed), (100, 0), "{policy:?} {coop:?}");
        for u in used_units(&d) {
            assert!(
                u.len() * 8 >= coop.unwrap_or(0) as usize,
                "{policy:?}: a {coop:?}-block cooperative launch ran on {u}"
            );
        }
        // Checking every candidate would create every node.
        let report = d.pool_report();
        assert!(report.created < report.nodes, "{policy:?} {coop:?}: {report:?}");
        if policy == PolicyKind::Throughput {
            let per = created_per_size(&b);
            assert!(per.values().all(|&k| k == 1), "{coop:?}: created {per:?}");
        }
    }
}

#[test]
fn graph_launches_check_only_the_partitions_an_on_demand_pool_has() {
    let b = Logged::new(|_, _| false);
    let mut d =
        Dispatcher::new(b.clone(), PolicyKind::Throughput.build(0), Profiles::new("t"), on_demand()).expect("pool");
    let v = Arc::new(VirtualContext::new(VctxId(0)));
    d.register(v.clone(), "app", ClientClass::BestEffort);
    let s = v.create_stream(StreamKind::NonBlocking, 0);
    for exec in 0..10u64 {
        v.record_op(s, Arc::new(OpDesc::Graph(GraphLaunch::new(exec, format!("graph{exec}"))))).expect("record");
        d.run_until_idle().expect("no stall");
    }
    assert_eq!((d.stats().completed, d.stats().failed, d.stats().graphs), (10, 0, 10));
    // The widest eligible node (the whole device) ran them; checking every candidate would have
    // created every node at the first graph.
    assert_eq!(used_units(&d), HashSet::from([b.topology().all_units()]));
    assert_eq!(d.pool_report().created, 1, "{:?}", d.pool_report());
}
