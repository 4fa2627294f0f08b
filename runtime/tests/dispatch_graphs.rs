//! Graph launches through the dispatcher on the simulated H200: one graph launch is one op bound
//! to one pool node (chosen by `Policy::select_graph`), in its stream's order with the kernels
//! around it; what each policy chooses for it. (Happens-before with graphs in random programs is
//! covered by `dispatch_happens_before.rs`.)

use std::collections::BTreeSet;
use std::sync::Arc;

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Dim3, GraphLaunch, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc};
use vitamin_runtime::dispatch::{DispatchConfig, Dispatcher, Span, SERVICE_NODE};
use vitamin_runtime::policy::{ClientClass, Policy, PolicyKind, ReadyGraphView, ReadyOpView, SchedState, Static};
use vitamin_runtime::profile::Profiles;
use vitamin_runtime::{NodeId, OpId, StreamKind, VctxId, VirtualContext};

fn kernel(sim: &SimBackend, grid: u32, block_ns: u32) -> Arc<OpDesc> {
    Arc::new(OpDesc::Kernel(KernelLaunch::new(
        sim.kernel("busy").expect("built-in kernel"),
        Dim3::x(grid),
        Dim3::x(128),
        0,
        KernelArgs::pack(&[&block_ns.to_le_bytes()]),
        LaunchAttributes::none(),
    )))
}

fn graph(exec: u64) -> Arc<OpDesc> {
    Arc::new(OpDesc::Graph(GraphLaunch::new(exec, format!("graph{exec}"))))
}

fn config(lane_continuation: bool) -> DispatchConfig {
    DispatchConfig { lane_continuation, record_timeline: true, ..DispatchConfig::default() }
}

fn dispatcher<P: Policy>(sim: &SimBackend, policy: P, lane_continuation: bool) -> Dispatcher<SimBackend, P> {
    Dispatcher::new(sim.clone(), policy, Profiles::new("simulated H200"), config(lane_continuation))
        .expect("dispatcher")
}

fn span_of(spans: &[Span], holder: u32, op: OpId) -> &Span {
    spans.iter().find(|s| s.holder == holder && s.op == op.0).unwrap_or_else(|| panic!("no span for op {op:?}"))
}

/// Kernel, graph, kernel on one stream: the graph runs on a pool node (not the service partition),
/// after the first kernel completed and before the second started, under every policy, with and
/// without lane continuation. The graph is counted as bound or continued, and in the node census.
#[test]
fn a_graph_launch_is_one_op_on_one_node_in_stream_order() {
    for policy in PolicyKind::ALL {
        for lc in [true, false] {
            let sim = SimBackend::preset("h200").unwrap();
            let mut d = dispatcher(&sim, policy.build(3), lc);
            let vctx = Arc::new(VirtualContext::new(VctxId(0)));
            d.register(vctx.clone(), "app", ClientClass::BestEffort);
            let s = vctx.create_stream(StreamKind::NonBlocking, 0);
            let k1 = vctx.record_op(s, kernel(&sim, 264, 5_000)).unwrap().op;
            let g = vctx.record_op(s, graph(0x1000)).unwrap().op;
            let k2 = vctx.record_op(s, kernel(&sim, 64, 1_000)).unwrap().op;
            d.run_until_idle().expect("drains");
            assert_eq!(vctx.outstanding(), 0);
            let spans = &d.timeline().unwrap().spans;
            assert_eq!(spans.len(), 3, "{policy}: {spans:?}");
            let (s1, sg, s2) = (span_of(spans, 0, k1), span_of(spans, 0, g), span_of(spans, 0, k2));
            assert_ne!(sg.node, SERVICE_NODE, "{policy}: the graph occupies units, it runs on a pool node");
            assert_eq!(sg.name, "graph4096");
            assert!(s1.end_ns <= sg.start_ns, "{policy} lc={lc}: graph started before its predecessor ended");
            assert!(sg.end_ns <= s2.start_ns, "{policy} lc={lc}: kernel started before the graph ended");
            // The simulated device runs a graph as a fixed 20 us of work on its node.
            assert_eq!(sg.end_ns - sg.start_ns, vitamin_hal::sim::GRAPH_NS as u64, "{policy}: {sg:?}");
            let st = d.stats();
            assert_eq!(st.graphs + u64::from(sg.continued), 1, "{policy} lc={lc}: {st:?}");
            assert_eq!(st.per_node.iter().sum::<u64>(), 3, "kernels and the graph are in the node census");
            assert_eq!(st.failed, 0);
        }
    }
}

/// With lane continuation, a graph recorded behind a running kernel of the same stream is bound to
/// that kernel's lane at once (Exclusive accepts every continuation), and so is the kernel behind it.
#[test]
fn lane_continuation_chains_graphs_and_kernels_on_one_lane() {
    let sim = SimBackend::preset("h200").unwrap();
    let mut d = dispatcher(&sim, PolicyKind::Exclusive.build(0), true);
    let vctx = Arc::new(VirtualContext::new(VctxId(0)));
    d.register(vctx.clone(), "app", ClientClass::BestEffort);
    let s = vctx.create_stream(StreamKind::NonBlocking, 0);
    let k1 = vctx.record_op(s, kernel(&sim, 1024, 20_000)).unwrap().op;
    d.pump().unwrap(); // k1 is bound and starts running
    let g = vctx.record_op(s, graph(7)).unwrap().op;
    let k2 = vctx.record_op(s, kernel(&sim, 64, 1_000)).unwrap().op;
    d.run_until_idle().unwrap();
    let spans = &d.timeline().unwrap().spans;
    let (s1, sg, s2) = (span_of(spans, 0, k1), span_of(spans, 0, g), span_of(spans, 0, k2));
    assert!(!s1.continued && sg.continued && s2.continued, "{spans:?}");
    assert_eq!((sg.node, sg.lane), (s1.node, s1.lane));
    assert_eq!((s2.node, s2.lane), (s1.node, s1.lane));
    assert!(sg.submitted_ns < s1.end_ns, "continued: submitted while its predecessor still ran");
    assert_eq!(d.stats().graphs, 0, "continued, not bound through select_graph");
}

/// Records `n` graph launches, one non-blocking stream each, and returns the nodes they ran on.
/// `replay`: each launch is recorded after the previous one completed (a graph replayed once per
/// step, with a synchronization in between); otherwise all are recorded at once.
fn graph_nodes(policy: PolicyKind, seed: u64, n: u64, replay: bool) -> Vec<u16> {
    let sim = SimBackend::preset("h200").unwrap();
    let mut d = dispatcher(&sim, policy.build(seed), true);
    let vctx = Arc::new(VirtualContext::new(VctxId(0)));
    d.register(vctx.clone(), "app", ClientClass::BestEffort);
    for i in 0..n {
        let s = vctx.create_stream(StreamKind::NonBlocking, 0);
        vctx.record_op(s, graph(i)).unwrap();
        if replay {
            d.run_until_idle().unwrap();
        }
    }
    d.run_until_idle().unwrap();
    let spans = &d.timeline().unwrap().spans;
    assert_eq!(spans.len() as u64, n);
    assert_eq!(d.stats().graphs, n, "independent graphs are all bound through select_graph");
    spans.iter().map(|s| s.node).collect()
}

/// Chaos draws graph launches' nodes at random among the eligible ones, so its determinism checks
/// bind graph replays to many partitions; the draw follows the seed.
#[test]
fn chaos_spreads_graph_launches_over_many_nodes() {
    let pool_nodes = {
        let sim = SimBackend::preset("h200").unwrap();
        dispatcher(&sim, PolicyKind::Exclusive.build(0), true).pool().nodes().len()
    };
    let mut all = BTreeSet::new();
    for seed in 0..4 {
        // Replays: every node is eligible for each launch (59 on the H200), 32 draws.
        let nodes = graph_nodes(PolicyKind::Chaos, seed, 32, true);
        let distinct: BTreeSet<u16> = nodes.iter().copied().collect();
        assert!(distinct.len() >= 12, "seed {seed}: chaos used only {} nodes: {nodes:?}", distinct.len());
        all.extend(distinct);
        // All at once: the client's first leases exclude overlapping nodes, yet several are used.
        let burst: BTreeSet<u16> = graph_nodes(PolicyKind::Chaos, seed, 32, false).into_iter().collect();
        assert!(burst.len() >= 2, "seed {seed}: {burst:?}");
    }
    assert!(all.len() >= pool_nodes / 2, "four seeds used {} of {pool_nodes} nodes", all.len());
    assert_ne!(graph_nodes(PolicyKind::Chaos, 0, 32, true), graph_nodes(PolicyKind::Chaos, 1, 32, true));
    assert_eq!(graph_nodes(PolicyKind::Chaos, 5, 32, true), graph_nodes(PolicyKind::Chaos, 5, 32, true));
}

/// Exclusive runs every graph launch on the root (the whole device).
#[test]
fn exclusive_runs_graphs_on_the_whole_device() {
    let sim = SimBackend::preset("h200").unwrap();
    let root = dispatcher(&sim, PolicyKind::Exclusive.build(0), true).pool().root().0;
    let nodes = graph_nodes(PolicyKind::Exclusive, 0, 12, false);
    assert!(nodes.iter().all(|&n| n == root), "{nodes:?}");
}

/// Throughput-Oriented (the trait's default) gives a graph on an idle device the widest node: the
/// whole device.
#[test]
fn throughput_gives_a_lone_graph_the_widest_eligible_node() {
    let sim = SimBackend::preset("h200").unwrap();
    let mut d = dispatcher(&sim, PolicyKind::Throughput.build(0), true);
    let vctx = Arc::new(VirtualContext::new(VctxId(0)));
    d.register(vctx.clone(), "app", ClientClass::BestEffort);
    let g = vctx.record_op(vctx.legacy_default_stream(), graph(1)).unwrap().op;
    d.run_until_idle().unwrap();
    let root = d.pool().root();
    assert_eq!(span_of(&d.timeline().unwrap().spans, 0, g).node, root.0);
    assert_eq!(d.pool().node(root).size(), 132);
}

/// Static runs each client's graph launches on that client's own slice.
#[test]
fn static_runs_graphs_on_the_client_s_slice() {
    let sim = SimBackend::preset("h200").unwrap();
    let mut d = dispatcher(&sim, PolicyKind::Static.build(0), true);
    let clients: Vec<Arc<VirtualContext>> = (0..3).map(|i| Arc::new(VirtualContext::new(VctxId(i)))).collect();
    for (i, v) in clients.iter().enumerate() {
        d.register(v.clone(), format!("c{i}"), ClientClass::BestEffort);
    }
    let mut ops = Vec::new();
    for round in 0..3u64 {
        for (i, v) in clients.iter().enumerate() {
            let s = v.create_stream(StreamKind::NonBlocking, 0);
            ops.push((i, v.record_op(s, graph(10 * round + i as u64)).unwrap().op));
            ops.push((i, v.record_op(s, kernel(&sim, 64, 2_000)).unwrap().op));
        }
    }
    d.run_until_idle().unwrap();
    let cut = Static::default_cut(d.pool(), 3);
    let spans = &d.timeline().unwrap().spans;
    for (i, op) in ops {
        let s = span_of(spans, i as u32, op);
        assert_eq!(s.node, cut[i].0, "client {i}'s op {op:?} ran outside its slice: {s:?}");
    }
}

/// A latency-critical client's graph under TPOT-First lands on its standing reservation (a leaf
/// until a decode kernel was seen), not on the whole device.
#[test]
fn tpot_runs_a_latency_critical_graph_on_its_standing_node() {
    let sim = SimBackend::preset("h200").unwrap();
    let mut d = dispatcher(&sim, PolicyKind::Tpot.build(0), true);
    let vctx = Arc::new(VirtualContext::new(VctxId(0)));
    d.register(vctx.clone(), "decode", ClientClass::LatencyCritical { tpot_target_ns: 1_000_000 });
    d.pump().unwrap(); // maintain: the standing reservation
    let g = vctx.record_op(vctx.legacy_default_stream(), graph(1)).unwrap().op;
    d.run_until_idle().unwrap();
    let s = span_of(&d.timeline().unwrap().spans, 0, g);
    assert_eq!(d.pool().node(NodeId(s.node)).size(), 8, "the standing node is one leaf: {s:?}");
}

/// A policy whose `select_graph` defers graphs while it binds kernels: the graph waits (stays
/// ready, is offered again every round) and runs once the policy agrees; nothing is lost.
#[test]
fn a_deferred_graph_stays_ready_until_the_policy_binds_it() {
    struct Reluctant {
        offers: u32,
    }
    impl Policy for Reluctant {
        fn name(&self) -> &'static str {
            "reluctant"
        }
        fn pick(&mut self, queue: &[ReadyOpView<'_>], _state: &SchedState<'_>) -> Option<usize> {
            vitamin_runtime::policy::oldest(queue)
        }
        fn select(&mut self, _op: &ReadyOpView<'_>, eligible: &[NodeId], s: &SchedState<'_>) -> Option<NodeId> {
            vitamin_runtime::policy::smallest(eligible, s.pool)
        }
        fn select_graph(
            &mut self,
            _op: &ReadyGraphView<'_>,
            eligible: &[NodeId],
            s: &SchedState<'_>,
        ) -> Option<NodeId> {
            self.offers += 1;
            (self.offers > 5).then(|| vitamin_runtime::policy::smallest(eligible, s.pool)).flatten()
        }
    }
    let sim = SimBackend::preset("h200").unwrap();
    let mut d = dispatcher(&sim, Reluctant { offers: 0 }, false);
    let vctx = Arc::new(VirtualContext::new(VctxId(0)));
    d.register(vctx.clone(), "app", ClientClass::BestEffort);
    let g = vctx.record_op(vctx.legacy_default_stream(), graph(9)).unwrap().op;
    d.run_until_idle().unwrap();
    assert_eq!(d.policy().offers, 6, "offered every round until accepted");
    let s = span_of(&d.timeline().unwrap().spans, 0, g);
    assert_eq!(d.pool().node(NodeId(s.node)).size(), 8);
    assert_eq!(d.stats().graphs, 1);
}

/// Throughput-Oriented does not leave a client's graphs on a sliver beside a client that holds
/// most of the device (a CUDA-graph decoder ran 39-45 ms tokens on an 8-SM lease for 12 s beside
/// ResNet-50 on 124 SMs: docs/results/eval.md, mixed-graph runs 5-6). Here the decoder's first
/// kernel takes a leaf, the trainer's kernels most of the rest (116 units), and the decoder's graphs,
/// recorded behind its kernel, would continue on the leaf; they go up instead, the decoder waits,
/// a fair half is reclaimed from the trainer's lease, and the later graphs run there. Nothing is
/// lost: every op of both clients completes.
#[test]
fn throughput_moves_a_graph_client_off_a_sliver_beside_a_wide_lease() {
    let sim = SimBackend::preset("h200").unwrap();
    let mut d = dispatcher(&sim, PolicyKind::Throughput.build(0), true);
    let (dec, train) = (Arc::new(VirtualContext::new(VctxId(0))), Arc::new(VirtualContext::new(VctxId(1))));
    d.register(dec.clone(), "decoder", ClientClass::BestEffort);
    d.register(train.clone(), "trainer", ClientClass::BestEffort);
    let (ds, ts) = (dec.create_stream(StreamKind::NonBlocking, 0), train.create_stream(StreamKind::NonBlocking, 0));
    let first = dec.record_op(ds, kernel(&sim, 8, 2_000_000)).unwrap().op;
    d.pump().unwrap();
    for _ in 0..40 {
        train.record_op(ts, kernel(&sim, 4096, 50_000)).unwrap();
    }
    d.pump().unwrap();
    let graphs: Vec<OpId> = (0..20).map(|i| dec.record_op(ds, graph(100 + i)).unwrap().op).collect();
    d.run_until_idle().unwrap();
    assert_eq!((dec.outstanding(), train.outstanding()), (0, 0));
    let spans = &d.timeline().unwrap().spans;
    let size = |s: &Span| d.pool().node(NodeId(s.node)).size();
    let leaf = span_of(spans, 0, first);
    assert_eq!(size(leaf), 8, "the decoder's kernel on a leaf: {leaf:?}");
    let trainer_first = spans.iter().filter(|s| s.holder == 1).min_by_key(|s| s.start_ns).unwrap();
    assert!(size(trainer_first) > 66, "the trainer beside it on most of the rest: {trainer_first:?}");
    let sizes: Vec<usize> = graphs.iter().map(|&g| size(span_of(spans, 0, g))).collect();
    assert!(sizes.iter().all(|&s| s >= 64), "every graph on a fair half or wider: {sizes:?}");
    assert_eq!(d.stats().failed, 0);
}
